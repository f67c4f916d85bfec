//! A small library over rverbs, as a user would write one: it finds the devices the test bed
//! names in its environment and exchanges one message over rdma_cm.

use rverbs::cm::{Endpoint, EndpointAttr};
use rverbs::cm::{create_ep, getaddrinfo, AddrHints, ConnParam};
use rverbs::uverbs::mr::PageBuf;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::{SendFlags, WcStatus};
use std::io;
use std::net::Ipv4Addr;

/// A device and its address as the bed's variables name them (`A` or `B`): `RVERBS_DEV_A`,
/// `RVERBS_ADDR_A`, ...
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub dev: String,
    pub addr: Ipv4Addr,
}

/// Reads node `which` (`"A"` or `"B"`) from the environment given by `env`.
pub fn node_from(which: &str, env: impl Fn(&str) -> Option<String>) -> Result<Node, String> {
    let dev_var = format!("RVERBS_DEV_{which}");
    let addr_var = format!("RVERBS_ADDR_{which}");
    let dev = env(&dev_var).ok_or_else(|| format!("{dev_var} is not set: run under rverbs-vm"))?;
    let addr =
        env(&addr_var).ok_or_else(|| format!("{addr_var} is not set: run under rverbs-vm"))?;
    let addr = addr
        .parse()
        .map_err(|_| format!("{addr_var}={addr} is not an IPv4 address"))?;
    Ok(Node { dev, addr })
}

/// Node `which` of this process's environment.
pub fn node(which: &str) -> Result<Node, String> {
    node_from(which, |k| std::env::var(k).ok())
}

fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        sq_sig_all: true,
    }
}

/// Listens on `server`'s address, connects to it, sends `msg` from the client and returns
/// what the server received.
pub fn exchange(server: Ipv4Addr, port: u16, msg: &[u8]) -> io::Result<Vec<u8>> {
    let passive = AddrHints {
        passive: true,
        ..Default::default()
    };
    let ai = getaddrinfo(Some(&server.to_string()), Some(&port.to_string()), &passive)?;
    let lis = create_ep(&ai[0])?;
    lis.listen(1)?;
    let want = msg.len();
    let srv = std::thread::spawn(move || -> io::Result<Vec<u8>> {
        let ep = Endpoint::create(lis.get_request()?, &attr())?;
        let buf = ep.reg_msgs(PageBuf::new(4096)?)?;
        ep.post_recv(1, &[buf.sge(0..256)])?;
        ep.accept(&ConnParam::default())?;
        let wc = ep.get_recv_comp()?;
        if wc.status != WcStatus::SUCCESS {
            return Err(io::Error::other(format!(
                "receive completed with {:?}",
                wc.status
            )));
        }
        let got = buf.read_vec(0..wc.byte_len as usize);
        let _ = ep.id().get_event(Some(std::time::Duration::from_secs(10)));
        Ok(got)
    });
    let ai = getaddrinfo(
        Some(&server.to_string()),
        Some(&port.to_string()),
        &AddrHints::default(),
    )?;
    let ep = Endpoint::create(create_ep(&ai[0])?, &attr())?;
    ep.connect(&ConnParam::default())?;
    ep.post_send_inline(2, msg, SendFlags::empty())?;
    let wc = ep.get_send_comp()?;
    if wc.status != WcStatus::SUCCESS {
        return Err(io::Error::other(format!(
            "send completed with {:?}",
            wc.status
        )));
    }
    ep.disconnect()?;
    let got = srv
        .join()
        .map_err(|_| io::Error::other("the server thread panicked"))??;
    if got.len() != want {
        return Err(io::Error::other(format!(
            "received {} bytes, sent {want}",
            got.len()
        )));
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_come_from_the_environment() {
        let env = |k: &str| match k {
            "RVERBS_DEV_B" => Some("rxe2".to_string()),
            "RVERBS_ADDR_B" => Some("10.20.0.2".to_string()),
            "RVERBS_ADDR_A" => Some("ten".to_string()),
            "RVERBS_DEV_A" => Some("rxe1".to_string()),
            _ => None,
        };
        assert_eq!(
            node_from("B", env),
            Ok(Node {
                dev: "rxe2".into(),
                addr: Ipv4Addr::new(10, 20, 0, 2)
            })
        );
        assert!(node_from("A", env)
            .unwrap_err()
            .contains("RVERBS_ADDR_A=ten"));
        assert!(node_from("C", env)
            .unwrap_err()
            .contains("RVERBS_DEV_C is not set"));
    }
}
