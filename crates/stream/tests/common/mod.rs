//! Helpers shared by the stream crate's VM tests (`vm_stream`, `vm_stream_iomap`,
//! `vm_stream_async`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use rverbs_stream::wire::{ConnData, RsSge};

/// `$RVERBS_ADDR_A` (set by the VM), else 10.10.0.1.
pub fn addr_a() -> IpAddr {
    let s = std::env::var("RVERBS_ADDR_A").unwrap_or_else(|_| "10.10.0.1".into());
    IpAddr::V4(s.parse::<Ipv4Addr>().expect("RVERBS_ADDR_A"))
}

/// Node A's address at `port`.
pub fn at(port: u16) -> SocketAddr {
    SocketAddr::new(addr_a(), port)
}

/// `n` pseudo-random bytes (xorshift) from `seed`: the same seed gives the same bytes.
pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// rsockets connection data of `version` with a made-up target SGL and receive buffer (the
/// listener only uses them once it writes to us).
#[allow(dead_code)] // vm_stream_iomap does not use it
pub fn conn_data(version: u8) -> Vec<u8> {
    ConnData {
        version,
        flags: 0,
        credits: 16,
        target_iomap_size: 0,
        target_sgl: RsSge {
            addr: 0x1000,
            key: 1,
            length: 2,
        },
        data_buf: RsSge {
            addr: 0x2000,
            key: 1,
            length: 4096,
        },
    }
    .to_bytes()
    .to_vec()
}
