//! The passive side of an rdma_cm connection, synchronously: listen, take one connection
//! request, create the endpoint (QP and CQs) on it, post a receive, accept, answer the
//! client's message, disconnect. Its peer is `examples/client.rs` (or librdmacm's
//! `rdma_client`, which sends 16 bytes).
//!
//! ```text
//! cargo run -p rverbs --example server -- 10.10.0.1 7471     # address to listen on, port
//! cargo run -p rverbs --example client -- 10.10.0.1 7471     # in another shell or node
//! ```
//!
//! In the test bed: `cargo xtask vm --topo one -- sh -c 'target/debug/examples/server
//! 10.10.0.1 7471 & sleep 1; target/debug/examples/client 10.10.0.1 7471'`.
//! `crates/cli/tests/rdma_examples.rs` runs the functions below in every test guest.

use std::io;

use rverbs::cm::{create_ep, getaddrinfo, AddrHints, CmId, ConnParam};
use rverbs::cm::{Endpoint, EndpointAttr};
use rverbs::uverbs::{SendFlags, WorkCompletion};

/// Listens on `addr:port` (`0.0.0.0`: every RDMA device). A listening id has no QP; each
/// connection request brings a new id of its own.
pub fn listen(addr: &str, port: &str) -> io::Result<CmId> {
    let hints = AddrHints {
        passive: true,
        ..AddrHints::default()
    };
    let ai = getaddrinfo(Some(addr), Some(port), &hints)?;
    let listener = create_ep(&ai[0])?; // rdma_create_ep: a bound id
    listener.listen(4)?; // backlog: requests the kernel queues until get_request
    Ok(listener)
}

/// Serves one client of `listener`: receives its message, answers with `reply` (at most 4 KiB)
/// and returns the message.
pub fn serve_one(listener: &CmId, reply: &[u8]) -> io::Result<Vec<u8>> {
    // Blocks until a client connects; the new id is bound to the device the request came in on.
    let id = listener.get_request()?;
    // The QP (RC, its own send and receive CQs, the PD of the device) on that id.
    let ep = Endpoint::create(id, &EndpointAttr::default())?;
    // The receive goes in before accept: the client may send as soon as it is connected.
    let mr = ep.reg_msgs(vec![0u8; 4096])?;
    ep.post_recv(1, &[mr.sge(0..4096)])?;
    ep.accept(&ConnParam::default())?; // returns once the connection is ESTABLISHED
    let wc = ok(ep.get_recv_comp()?, "the client's message")?;
    let mut msg = vec![0u8; wc.byte_len as usize];
    mr.read_at(0, &mut msg); // copy out: no &[u8] into registered memory
                             // The receive is done, so the region is free to send from.
    mr.write_at(0, reply);
    ep.post_send(2, &[mr.sge(0..reply.len())], SendFlags::empty())?;
    ok(ep.get_send_comp()?, "the answer")?;
    // The client disconnects once it has the answer; an error here would only say it was first.
    let _ = ep.disconnect();
    Ok(msg)
}

/// `wc` if it succeeded, else an error naming `what`.
fn ok(wc: WorkCompletion, what: &str) -> io::Result<WorkCompletion> {
    if wc.status.is_success() {
        Ok(wc)
    } else {
        Err(io::Error::other(format!("{what}: {}", wc.status)))
    }
}

#[allow(dead_code)] // built into crates/cli/tests/rdma_examples.rs without its main
fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args.first().map_or("0.0.0.0", String::as_str);
    let port = args.get(1).map_or("7471", String::as_str);
    let listener = listen(addr, port)?;
    println!("server: listening on {addr} port {port}");
    let msg = serve_one(&listener, b"world")?;
    println!("server: got {:?}", String::from_utf8_lossy(&msg));
    Ok(())
}
