//! The device's IPv4 address for the rdma_cm case when neither `-a` nor a RoCE v2 IPv4 GID
//! gives one (iWARP: siw's one GID is its netdev's MAC): each local IPv4 address of the
//! machine, as `/proc/net/fib_trie` lists them, bound by an rdma_cm id in turn, and the first
//! one the rdma_cm itself attaches to the device is taken.

use std::net::{Ipv4Addr, SocketAddr};

use rverbs::cm::{CmId, PortSpace};

/// The local IPv4 addresses (`/32 host LOCAL` entries) of a `/proc/net/fib_trie` text, in
/// order, once each, without the loopback ones.
pub fn local_ipv4(fib_trie: &str) -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut last: Option<Ipv4Addr> = None;
    for l in fib_trie.lines() {
        let t = l.trim();
        if let Some(a) = t.strip_prefix("|-- ") {
            last = a.parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = last.take() {
                if !a.is_loopback() && !out.contains(&a) {
                    out.push(a);
                }
            }
        }
    }
    out
}

/// The first local IPv4 address the rdma_cm binds on device `dev`.
pub fn find(dev: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/net/fib_trie").ok()?;
    local_ipv4(&text).into_iter().find_map(|a| {
        let id = CmId::create(None, PortSpace::TCP).ok()?;
        id.bind(SocketAddr::new(a.into(), 0)).ok()?;
        let name = id.query_addr().ok()?.ib_device_name().ok()?;
        (name == dev).then(|| a.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_addresses_of_a_fib_trie() {
        let t = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n\
                 \x20    +-- 127.0.0.0/8 2 0 2\n           |-- 127.0.0.1\n              /32 host LOCAL\n\
                 \x20    +-- 10.10.0.0/24 2 0 2\n           |-- 10.10.0.0\n              /24 link UNICAST\n\
                 \x20          |-- 10.10.0.1\n              /32 host LOCAL\n\
                 \x20       |-- 10.10.0.255\n           /32 link BROADCAST\n\
                 \x20          |-- 10.20.0.2\n              /32 host LOCAL\n\
                 Local:\n           |-- 10.10.0.1\n              /32 host LOCAL\n\
                 \x20          |-- garbage\n              /32 host LOCAL\n";
        assert_eq!(
            local_ipv4(t),
            [Ipv4Addr::new(10, 10, 0, 1), Ipv4Addr::new(10, 20, 0, 2)]
        );
        assert!(local_ipv4("").is_empty());
    }
}
