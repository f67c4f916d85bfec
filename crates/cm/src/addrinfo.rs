//! `rdma_getaddrinfo`-style resolution and `rdma_create_ep`-style endpoint creation.
//!
//! Host names go through the standard library (`ToSocketAddrs`: /etc/hosts, DNS); services are
//! numeric ports only. QP creation is deliberately not part of [`create_ep`]: it returns the
//! id with its address (and route) resolved, and the verbs layer creates the QP on it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use rverbs_uverbs::Error;

use crate::id::CmId;
use crate::types::{PortSpace, QpType};

/// Address resolution and route resolution timeouts of [`create_ep`] (librdmacm's 2000 ms).
pub const EP_RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

/// An IP address family filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpFamily {
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
}

/// What [`getaddrinfo`] should produce (`struct rdma_addrinfo` hints).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrHints {
    /// `RAI_PASSIVE`: addresses to bind/listen on (node optional: wildcard) instead of
    /// destinations (node required).
    pub passive: bool,
    /// The port space of the ids to create (`RDMA_PS_TCP` for RC, `RDMA_PS_UDP` for UD).
    pub port_space: PortSpace,
    /// `None`: the port space's QP type.
    pub qp_type: Option<QpType>,
    /// Keep only this family.
    pub family: Option<IpFamily>,
    /// Active side: the source address to resolve from (`ai_src_addr`).
    pub src: Option<SocketAddr>,
}

impl Default for AddrHints {
    fn default() -> Self {
        Self {
            passive: false,
            port_space: PortSpace::TCP,
            qp_type: None,
            family: None,
            src: None,
        }
    }
}

/// One result of [`getaddrinfo`]: everything [`create_ep`] needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrInfo {
    /// Whether this is a passive (bind/listen) result.
    pub passive: bool,
    /// The port space [`create_ep`] creates the id in.
    pub port_space: PortSpace,
    /// The QP type of the id (the hint's, or the port space's default).
    pub qp_type: QpType,
    /// Passive: the address to bind. Active: the optional source address.
    pub src: Option<SocketAddr>,
    /// Active: the destination. Passive: `None`.
    pub dst: Option<SocketAddr>,
}

/// Parses a numeric service (port). Names from /etc/services are not supported.
pub fn parse_service(service: &str) -> io::Result<u16> {
    const OP: &str = "rdma getaddrinfo";
    let s = service.trim();
    let n: i64 = s.parse().map_err(|_| {
        Error::invalid(
            OP,
            format!("service {service:?} is not a port number (only numeric ports 0..=65535)"),
        )
    })?;
    u16::try_from(n).map_err(|_| {
        Error::invalid(
            OP,
            format!("port {n} out of range 0..=65535 (service {service:?})"),
        )
        .into()
    })
}

fn family_ok(a: &SocketAddr, f: Option<IpFamily>) -> bool {
    match f {
        None => true,
        Some(IpFamily::V4) => a.is_ipv4(),
        Some(IpFamily::V6) => a.is_ipv6(),
    }
}

/// Resolves `node` to socket addresses with `port`: numeric IPv4/IPv6 (brackets allowed)
/// directly, host names through the system resolver.
fn resolve_node(node: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    const OP: &str = "rdma getaddrinfo";
    let n = node.trim();
    if n.is_empty() {
        return Err(Error::invalid(OP, "empty node name").into());
    }
    let bare = n
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .unwrap_or(n);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let addrs = (bare, port)
        .to_socket_addrs()
        .map_err(|e| Error::not_found(OP, format!("cannot resolve host {node:?}: {e}")))?;
    let mut v: Vec<SocketAddr> = Vec::new();
    for a in addrs {
        if !v.contains(&a) {
            v.push(a);
        }
    }
    if v.is_empty() {
        return Err(Error::not_found(OP, format!("host {node:?} has no addresses")).into());
    }
    Ok(v)
}

/// `rdma_getaddrinfo`: the endpoints for `node` / `service` under `hints`.
///
/// Passive without a node yields the wildcard addresses (0.0.0.0 first, then ::); active needs
/// a node. A missing service means port 0 (any port for passive).
pub fn getaddrinfo(
    node: Option<&str>,
    service: Option<&str>,
    hints: &AddrHints,
) -> io::Result<Vec<AddrInfo>> {
    const OP: &str = "rdma getaddrinfo";
    let port = match service {
        Some(s) => parse_service(s)?,
        None => 0,
    };
    let qp_type = hints
        .qp_type
        .unwrap_or_else(|| hints.port_space.default_qp_type());
    let addrs = match (node, hints.passive) {
        (Some(n), _) => resolve_node(n, port)?,
        (None, true) => vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port),
        ],
        (None, false) => {
            return Err(Error::invalid(
                OP,
                "an active endpoint needs a destination node (or set hints.passive)",
            )
            .into())
        }
    };
    let out: Vec<AddrInfo> = addrs
        .into_iter()
        .filter(|a| family_ok(a, hints.family))
        .map(|a| AddrInfo {
            passive: hints.passive,
            port_space: hints.port_space,
            qp_type,
            src: if hints.passive { Some(a) } else { hints.src },
            dst: (!hints.passive).then_some(a),
        })
        .collect();
    if out.is_empty() {
        return Err(Error::not_found(
            OP,
            format!(
                "no {:?} address for node {:?}",
                hints.family.unwrap_or(IpFamily::V4),
                node.unwrap_or("(wildcard)")
            ),
        )
        .into());
    }
    Ok(out)
}

/// `rdma_create_ep` without the QP: a **synchronous** id for `ai`.
///
/// - Active: `resolve_addr` (from `ai.src` if set) and `resolve_route`, 2000 ms each, so the
///   returned id is ready for a QP (`init_qp_attr`) and `connect`.
/// - Passive: `bind` to `ai.src`; the caller then calls `listen` (as with librdmacm, options
///   such as REUSEADDR or TOS can still be set in between) and `get_request`.
///
/// QP creation is a separate step done by the verbs layer on the returned id (librdmacm's
/// `rdma_create_qp`). On error the id is destroyed.
pub fn create_ep(ai: &AddrInfo) -> io::Result<CmId> {
    let id = CmId::create_with_qp_type(None, ai.port_space, ai.qp_type)?;
    if ai.passive {
        let src = ai.src.ok_or_else(|| {
            Error::invalid("create_ep", "a passive endpoint needs a source address")
        })?;
        id.bind(src)?;
    } else {
        let dst = ai.dst.ok_or_else(|| {
            Error::invalid(
                "create_ep",
                "an active endpoint needs a destination address",
            )
        })?;
        id.resolve_addr(ai.src, dst, EP_RESOLVE_TIMEOUT)?;
        id.resolve_route(EP_RESOLVE_TIMEOUT)?;
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services() {
        assert_eq!(parse_service("7471").unwrap(), 7471);
        assert_eq!(parse_service(" 0 ").unwrap(), 0);
        assert_eq!(parse_service("65535").unwrap(), 65535);
        let e = parse_service("65536").unwrap_err().to_string();
        assert!(e.contains("port 65536 out of range 0..=65535"), "{e}");
        let e = parse_service("-1").unwrap_err().to_string();
        assert!(e.contains("port -1 out of range"), "{e}");
        let e = parse_service("http").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string().contains("\"http\" is not a port number"),
            "{e}"
        );
    }

    #[test]
    fn numeric_active() {
        let v = getaddrinfo(Some("10.10.0.1"), Some("7471"), &AddrHints::default()).unwrap();
        assert_eq!(
            v,
            vec![AddrInfo {
                passive: false,
                port_space: PortSpace::TCP,
                qp_type: QpType::RC,
                src: None,
                dst: Some("10.10.0.1:7471".parse().unwrap()),
            }]
        );
        let v = getaddrinfo(Some("[fe80::1]"), Some("1"), &AddrHints::default()).unwrap();
        assert_eq!(v[0].dst, Some("[fe80::1]:1".parse().unwrap()));
        let v = getaddrinfo(Some("::1"), None, &AddrHints::default()).unwrap();
        assert_eq!(v[0].dst, Some("[::1]:0".parse().unwrap()));
    }

    #[test]
    fn passive_wildcards_and_family_filter() {
        let h = AddrHints {
            passive: true,
            port_space: PortSpace::UDP,
            ..AddrHints::default()
        };
        let v = getaddrinfo(None, Some("7174"), &h).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].src, Some("0.0.0.0:7174".parse().unwrap()));
        assert_eq!(v[1].src, Some("[::]:7174".parse().unwrap()));
        assert!(v
            .iter()
            .all(|a| a.passive && a.dst.is_none() && a.qp_type == QpType::UD));
        let h6 = AddrHints {
            family: Some(IpFamily::V6),
            ..h
        };
        let v = getaddrinfo(None, None, &h6).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].src, Some("[::]:0".parse().unwrap()));
        let h4 = AddrHints {
            family: Some(IpFamily::V4),
            ..AddrHints::default()
        };
        let e = getaddrinfo(Some("::1"), None, &h4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn errors_are_clear() {
        let e = getaddrinfo(None, Some("1"), &AddrHints::default()).unwrap_err();
        assert!(e.to_string().contains("needs a destination node"), "{e}");
        let e = getaddrinfo(Some(""), None, &AddrHints::default()).unwrap_err();
        assert!(e.to_string().contains("empty node"), "{e}");
        let e = getaddrinfo(Some("10.0.0.1"), Some("99999"), &AddrHints::default()).unwrap_err();
        assert!(e.to_string().contains("port 99999 out of range"), "{e}");
        let e = getaddrinfo(
            Some("no-such-host.invalid"),
            Some("1"),
            &AddrHints::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no-such-host.invalid"), "{e}");
    }

    #[test]
    fn host_names_resolve() {
        // "localhost" is in /etc/hosts on any sane system; no network needed.
        let v = getaddrinfo(Some("localhost"), Some("80"), &AddrHints::default()).unwrap();
        assert!(v.iter().all(|a| a.dst.unwrap().ip().is_loopback()), "{v:?}");
        assert!(v.iter().all(|a| a.dst.unwrap().port() == 80));
    }

    #[test]
    fn active_source_hint_is_kept() {
        let h = AddrHints {
            src: Some("10.10.0.1:0".parse().unwrap()),
            ..AddrHints::default()
        };
        let v = getaddrinfo(Some("10.10.0.2"), Some("5"), &h).unwrap();
        assert_eq!(v[0].src, h.src);
    }
}
