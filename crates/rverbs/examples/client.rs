//! The active side of an rdma_cm connection, synchronously: resolve the server, create the
//! endpoint, post a receive, connect, send a message, wait for the answer. This is the
//! README's example as a program; its peer is `examples/server.rs` (or librdmacm's
//! `rdma_server`, which answers 16 bytes).
//!
//! ```text
//! cargo run -p rverbs --example client -- 10.10.0.1 7471 hello   # server address, port, message
//! ```

use std::io;

use rverbs::cm::{create_ep, getaddrinfo, AddrHints, ConnParam};
use rverbs::cm::{Endpoint, EndpointAttr};
use rverbs::uverbs::SendFlags;

/// Connects to `addr:port`, sends `msg` (at most 16 bytes: it is sent inline) and returns
/// the server's answer.
pub fn run(addr: &str, port: &str, msg: &[u8]) -> io::Result<Vec<u8>> {
    let ai = getaddrinfo(Some(addr), Some(port), &AddrHints::default())?;
    // Resolves the address and route (which device, which port), then creates the QP.
    let ep = Endpoint::create(create_ep(&ai[0])?, &EndpointAttr::default())?;
    // Registered memory: the Mr owns the buffer; no &[u8] into it while it is registered.
    let mr = ep.reg_msgs(vec![0u8; 4096])?; // the error gives the Vec back; `?` converts it
    ep.post_recv(1, &[mr.sge(0..4096)])?; // before connecting: the answer may come at once
    ep.connect(&ConnParam::default())?;
    ep.post_send_inline(2, msg, SendFlags::empty())?; // copied at post time: no MR needed
    let wc = ep.get_send_comp()?; // blocks (asleep) until the send completes
    if !wc.status.is_success() {
        return Err(io::Error::other(format!("send: {}", wc.status)));
    }
    let wc = ep.get_recv_comp()?;
    if !wc.status.is_success() {
        return Err(io::Error::other(format!("receive: {}", wc.status)));
    }
    let mut reply = vec![0u8; wc.byte_len as usize];
    mr.read_at(0, &mut reply); // copy out (the device may still write the region)
    ep.disconnect()?;
    Ok(reply)
}

#[allow(dead_code)] // built into crates/cli/tests/rdma_examples.rs without its main
fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args.first().map_or("10.10.0.1", String::as_str);
    let port = args.get(1).map_or("7471", String::as_str);
    let msg = args.get(2).map_or("hello", String::as_str);
    let reply = run(addr, port, msg.as_bytes())?;
    println!("client: got {:?}", String::from_utf8_lossy(&reply));
    Ok(())
}
