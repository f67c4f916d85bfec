//! Socket addresses as the ucma ABI carries them: `sockaddr_in`, `sockaddr_in6` and
//! `sockaddr_ib` inside a 128-byte `sockaddr_storage` (or a bare `sockaddr_in6` slot in the
//! pre-AF_IB commands). GIDs are [`rverbs_uverbs::gid::Gid`].

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use zerocopy::{FromBytes, IntoBytes};

pub use rverbs_uverbs::gid::Gid;

use crate::abi::{self, sockaddr_in, sockaddr_in6, sockaddr_storage, AF_IB, AF_INET, AF_INET6};

/// An AF_IB address (`sockaddr_ib`): what the kernel reports for `QUERY_GID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct IbAddr {
    /// The GID (`sib_addr`).
    pub gid: Gid,
    /// The partition key (`sib_pkey`), host order.
    pub pkey: u16,
    /// IPv6-style flow label bits (`sib_flowinfo`), host order.
    pub flowinfo: u32,
    /// Service id (for IP-addressed ids: the port space and port, e.g. 0x0000000001061cef for
    /// RDMA_PS_TCP port 7407).
    pub sid: u64,
    /// Which bits of `sid` are significant (`sib_sid_mask`), host order.
    pub sid_mask: u64,
    /// `sib_scope_id`.
    pub scope_id: u64,
}

impl IbAddr {
    fn from_raw(r: &abi::sockaddr_ib) -> Self {
        Self {
            gid: Gid(r.sib_addr),
            pkey: u16::from_be_bytes(r.sib_pkey),
            flowinfo: u32::from_be_bytes(r.sib_flowinfo),
            sid: u64::from_be_bytes(r.sib_sid),
            sid_mask: u64::from_be_bytes(r.sib_sid_mask),
            scope_id: r.sib_scope_id,
        }
    }

    /// The port of an IP-addressed id's service id (its low 16 bits).
    pub fn port(&self) -> u16 {
        self.sid as u16
    }
}

/// An address the kernel reported: IP, AF_IB, none (family 0) or something else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmAddr {
    /// Family 0: nothing bound/resolved yet.
    Unspecified,
    /// An IPv4 or IPv6 socket address (`sockaddr_in` / `sockaddr_in6`).
    Ip(SocketAddr),
    /// An AF_IB address (`sockaddr_ib`).
    Ib(IbAddr),
    /// A family this crate does not decode.
    Other(u16),
}

impl CmAddr {
    /// The IP socket address, if this is one.
    pub fn ip(&self) -> Option<SocketAddr> {
        match self {
            CmAddr::Ip(a) => Some(*a),
            _ => None,
        }
    }
}

impl fmt::Display for CmAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmAddr::Unspecified => f.write_str("(none)"),
            CmAddr::Ip(a) => write!(f, "{a}"),
            CmAddr::Ib(a) => write!(f, "ib:{} sid {:#x}", a.gid, a.sid),
            CmAddr::Other(fam) => write!(f, "(address family {fam})"),
        }
    }
}

/// Size the kernel expects for an address of `family` (`rdma_addr_size()`).
pub(crate) fn family_size(family: u16) -> Option<usize> {
    match family {
        AF_INET => Some(size_of::<sockaddr_in>()),
        AF_INET6 => Some(size_of::<sockaddr_in6>()),
        AF_IB => Some(size_of::<abi::sockaddr_ib>()),
        _ => None,
    }
}

fn raw_in(a: &SocketAddrV4) -> sockaddr_in {
    sockaddr_in {
        sin_family: AF_INET,
        sin_port: a.port().to_be_bytes(),
        sin_addr: a.ip().octets(),
        sin_zero: [0; 8],
    }
}

fn raw_in6(a: &SocketAddrV6) -> sockaddr_in6 {
    sockaddr_in6 {
        sin6_family: AF_INET6,
        sin6_port: a.port().to_be_bytes(),
        sin6_flowinfo: a.flowinfo().to_be_bytes(),
        sin6_addr: a.ip().octets(),
        sin6_scope_id: a.scope_id(),
    }
}

/// Encodes an IP socket address into a `sockaddr_storage`; returns it and its size.
pub(crate) fn to_storage(addr: &SocketAddr) -> (sockaddr_storage, u16) {
    let mut s = sockaddr_storage::default();
    let n = match addr {
        SocketAddr::V4(a) => {
            let r = raw_in(a);
            s.bytes[..16].copy_from_slice(r.as_bytes());
            16
        }
        SocketAddr::V6(a) => {
            let r = raw_in6(a);
            s.bytes[..28].copy_from_slice(r.as_bytes());
            28
        }
    };
    (s, n)
}

/// Encodes an IP socket address into the `sockaddr_in6` slot of the pre-AF_IB commands
/// (`BIND_IP`, `RESOLVE_IP`, `JOIN_IP_MCAST`): an IPv4 address keeps its own family and layout
/// in that slot. (rverbs sends the AF_IB-capable `BIND`/`RESOLVE_ADDR`; `JOIN_IP_MCAST` only
/// on kernels without `JOIN_MCAST`.)
pub(crate) fn to_in6_slot(addr: &SocketAddr) -> sockaddr_in6 {
    match addr {
        SocketAddr::V4(a) => {
            let mut slot = <sockaddr_in6 as zerocopy::FromZeros>::new_zeroed();
            slot.as_mut_bytes()[..16].copy_from_slice(raw_in(a).as_bytes());
            slot
        }
        SocketAddr::V6(a) => raw_in6(a),
    }
}

/// Decodes an address the kernel reported with a size: the size must be the family's
/// (`rdma_addr_size()`), 0 meaning none.
pub(crate) fn decode_sized(bytes: &[u8], size: u16) -> CmAddr {
    if size == 0 || bytes.len() < 2 {
        return CmAddr::Unspecified;
    }
    let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
    match family_size(family) {
        Some(n) if n == usize::from(size) && n <= bytes.len() => decode(&bytes[..n]),
        _ => CmAddr::Other(family),
    }
}

/// Decodes a family-tagged address from the start of `bytes` (a `sockaddr_storage` or a
/// `sockaddr_in6` slot).
pub(crate) fn decode(bytes: &[u8]) -> CmAddr {
    if bytes.len() < 2 {
        return CmAddr::Unspecified;
    }
    let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
    match family {
        0 => CmAddr::Unspecified,
        AF_INET => match sockaddr_in::read_from_prefix(bytes) {
            Ok((r, _)) => CmAddr::Ip(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(r.sin_addr),
                u16::from_be_bytes(r.sin_port),
            ))),
            Err(_) => CmAddr::Other(family),
        },
        AF_INET6 => match sockaddr_in6::read_from_prefix(bytes) {
            Ok((r, _)) => CmAddr::Ip(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(r.sin6_addr),
                u16::from_be_bytes(r.sin6_port),
                u32::from_be_bytes(r.sin6_flowinfo),
                r.sin6_scope_id,
            ))),
            Err(_) => CmAddr::Other(family),
        },
        AF_IB => match abi::sockaddr_ib::read_from_prefix(bytes) {
            Ok((r, _)) => CmAddr::Ib(IbAddr::from_raw(&r)),
            Err(_) => CmAddr::Other(family),
        },
        other => CmAddr::Other(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_storage_bytes() {
        let a: SocketAddr = "10.10.0.1:7471".parse().unwrap();
        let (s, n) = to_storage(&a);
        assert_eq!(n, 16);
        // family (host order), port 7471 = 0x1d2f big-endian, address, zero padding.
        let fam = AF_INET.to_ne_bytes();
        assert_eq!(&s.bytes[..8], &[fam[0], fam[1], 0x1d, 0x2f, 10, 10, 0, 1]);
        assert!(s.bytes[8..].iter().all(|&b| b == 0));
        assert_eq!(s.family(), AF_INET);
        assert_eq!(decode(&s.bytes), CmAddr::Ip(a));
    }

    #[test]
    fn ipv6_storage_bytes() {
        let a = SocketAddr::V6(SocketAddrV6::new(
            "fe80::1".parse().unwrap(),
            4791,
            0x12345,
            3,
        ));
        let (s, n) = to_storage(&a);
        assert_eq!(n, 28);
        assert_eq!(&s.bytes[2..4], &4791u16.to_be_bytes());
        assert_eq!(&s.bytes[4..8], &0x12345u32.to_be_bytes());
        assert_eq!(s.bytes[8], 0xfe);
        assert_eq!(s.bytes[23], 1);
        assert_eq!(&s.bytes[24..28], &3u32.to_ne_bytes());
        assert_eq!(decode(&s.bytes), CmAddr::Ip(a));
    }

    #[test]
    fn in6_slot_keeps_ipv4_layout() {
        let a: SocketAddr = "192.168.1.2:80".parse().unwrap();
        let slot = to_in6_slot(&a);
        assert_eq!(slot.sin6_family, AF_INET);
        assert_eq!(decode(slot.as_bytes()), CmAddr::Ip(a));
    }

    #[test]
    fn sockaddr_ib_layout() {
        // Kernel include/rdma/ib.h (not uapi, so no C probe): family, pkey, flowinfo, 16-byte
        // GID, service id, service id mask, scope id; rdma_addr_size() says 48 for AF_IB.
        use std::mem::{align_of, offset_of};
        type S = abi::sockaddr_ib;
        assert_eq!((size_of::<S>(), align_of::<S>()), (48, 8));
        assert_eq!(offset_of!(S, sib_pkey), 2);
        assert_eq!(offset_of!(S, sib_flowinfo), 4);
        assert_eq!(offset_of!(S, sib_addr), 8);
        assert_eq!(offset_of!(S, sib_sid), 24);
        assert_eq!(offset_of!(S, sib_sid_mask), 32);
        assert_eq!(offset_of!(S, sib_scope_id), 40);
    }

    #[test]
    fn sockaddr_ib_decodes() {
        let mut b = [0u8; 48];
        b[..2].copy_from_slice(&AF_IB.to_ne_bytes());
        b[2..4].copy_from_slice(&[0xff, 0xff]);
        b[8..24].copy_from_slice(&[
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
        ]);
        b[24..32].copy_from_slice(&0x0000_0000_0106_1d2fu64.to_be_bytes());
        b[32..40].copy_from_slice(&u64::MAX.to_be_bytes());
        match decode(&b) {
            CmAddr::Ib(ib) => {
                assert_eq!(ib.pkey, 0xffff);
                assert_eq!(ib.gid.to_string(), "fe80::211:22ff:fe33:4455");
                assert_eq!(ib.port(), 7471);
                assert_eq!(ib.sid_mask, u64::MAX);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_and_empty_families() {
        assert_eq!(decode(&[0u8; 128]), CmAddr::Unspecified);
        let mut b = [0u8; 128];
        b[..2].copy_from_slice(&17u16.to_ne_bytes());
        assert_eq!(decode(&b), CmAddr::Other(17));
        assert_eq!(family_size(AF_INET), Some(16));
        assert_eq!(family_size(AF_INET6), Some(28));
        assert_eq!(family_size(AF_IB), Some(48));
        assert_eq!(family_size(1), None);
    }
}
