//! Set-up shared by the examples (`examples/common/` has no `main.rs`: it is no example
//! itself). Each example uses part of it.
#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use rverbs_async::{AsyncEndpoint, AsyncEventChannel};
use rverbs_cm::{ConnParam, PortSpace};
use rverbs_cm::{Endpoint, EndpointAttr};
use rverbs_uverbs::mr::{Mr, PageBuf};
use rverbs_uverbs::qp::QpCaps;

/// Message size: every message is sent inline.
pub const MSG: usize = 64;

/// One send and one receive in flight, `MSG`-byte inline sends, every send signaled.
pub fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: MSG as u32,
        },
        sq_sig_all: true,
    }
}

/// The address `ADDR PORT` of the command line (its first two arguments; `10.10.0.1` and
/// `default_port` when missing) and the arguments after them.
pub fn addr_and_args(default_port: u16) -> io::Result<(SocketAddr, Vec<String>)> {
    let mut args = std::env::args().skip(1);
    let ip = args.next().unwrap_or_else(|| "10.10.0.1".into());
    let port = args.next().unwrap_or_else(|| default_port.to_string());
    let addr = format!("{ip}:{port}")
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{ip}:{port}: {e}")))?;
    Ok((addr, args.collect()))
}

/// A registered page whose first `MSG` bytes receive one message at a time.
pub struct MsgBuf {
    mr: Mr<PageBuf>,
}

impl MsgBuf {
    /// Registers a page for `ep`'s messages.
    pub fn new(ep: &Endpoint) -> io::Result<MsgBuf> {
        let mr = ep.reg_msgs(PageBuf::new(4096)?).map_err(io::Error::from)?;
        Ok(MsgBuf { mr })
    }

    /// Posts the buffer as `ep`'s next receive (work request id 0).
    pub fn post_recv(&self, ep: &Endpoint) -> io::Result<()> {
        ep.post_recv(0, &[self.mr.sge(0..MSG)])
    }

    /// A copy of the first `len` bytes (what the last receive wrote).
    pub fn read(&self, len: usize) -> Vec<u8> {
        self.mr.read_vec(0..len.min(MSG))
    }
}

/// An async client endpoint connected to `dst`, with its receive buffer posted.
pub async fn connect(dst: SocketAddr) -> io::Result<(AsyncEndpoint, MsgBuf)> {
    let ch = AsyncEventChannel::new()?;
    let id = ch.create_id(PortSpace::TCP)?;
    id.resolve_addr(None, dst, Duration::from_secs(2)).await?;
    id.resolve_route(Duration::from_secs(2)).await?;
    let ep = AsyncEndpoint::create(id, &attr())?;
    let buf = MsgBuf::new(ep.endpoint())?;
    buf.post_recv(ep.endpoint())?;
    ep.connect(&ConnParam::default()).await?;
    Ok((ep, buf))
}
