//! Set-up shared by the cm device tests (they run in the VM; see docs/testing.md): the
//! address of device A, the rdma_cm address of a port, a listening id, an unconnected client
//! endpoint.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};

use rverbs_cm::{create_ep, getaddrinfo, AddrHints, AddrInfo, CmId};
use rverbs_cm::{Endpoint, EndpointAttr};
use rverbs_uverbs::qp::QpCaps;

/// `$RVERBS_ADDR_A` (set by the VM), else 10.10.0.1.
pub fn addr_a() -> IpAddr {
    let s = std::env::var("RVERBS_ADDR_A").unwrap_or_else(|_| "10.10.0.1".into());
    IpAddr::V4(s.parse::<Ipv4Addr>().expect("RVERBS_ADDR_A"))
}

/// `rdma_getaddrinfo` of `addr_a():port`: to listen on (`passive`) or to connect to.
pub fn addrinfo(port: u16, passive: bool) -> Vec<AddrInfo> {
    getaddrinfo(
        Some(&addr_a().to_string()),
        Some(&port.to_string()),
        &AddrHints {
            passive,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("getaddrinfo {}:{port}: {e}", addr_a()))
}

/// Endpoint attributes: `max_wr` sends and receives of one SGE, `max_inline` inline bytes,
/// every send signaled.
pub fn attr(max_wr: u32, max_inline: u32) -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: max_wr,
            max_recv_wr: max_wr,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: max_inline,
        },
        sq_sig_all: true,
    }
}

/// An id listening on `addr_a():port` (backlog 4).
pub fn listener(port: u16) -> CmId {
    let id = create_ep(&addrinfo(port, true)[0]).unwrap();
    id.listen(4).unwrap();
    id
}

/// A client endpoint towards `addr_a():port`: address and route resolved, QP and CQs made,
/// not connected yet.
pub fn client(port: u16, attr: &EndpointAttr) -> Endpoint {
    Endpoint::create(create_ep(&addrinfo(port, false)[0]).unwrap(), attr).unwrap()
}
