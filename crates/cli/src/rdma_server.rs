//! `rverbs rdma-server`: librdmacm's `rdma_server` example (rdma-core v44) on rverbs.
//!
//! Same options (`-s ADDR`, `-p PORT`, default 0.0.0.0 and 7471), same wire behaviour and
//! output, either side may be the C tool: listen, take one connection request, create an RC
//! endpoint on it (1 send / 1 receive WR, 1 SGE, 16 bytes inline, all sends signaled), post a
//! 16-byte receive, accept, wait for the client's message, answer with 16 bytes (inline when
//! the QP allows it), wait for the send's completion, disconnect. Prints `rdma_server: start`
//! and `rdma_server: end N` and exits with N (0, or 255 for -1).
//!
//! As the C tool, the server waits for its one client as long as it takes. Once connected,
//! a client that disconnects or dies ends the wait for its message with an error instead of
//! a hang (the library's completion waits end with the connection). The other differences are those of
//! `rverbs rdma-client`.

#![allow(unsafe_code)] // posting a receive hands a buffer to the device

use std::ffi::OsString;
use std::io::{self, Write};

use rverbs::cm::{create_ep, getaddrinfo, AddrHints, CmEventKind, ConnParam};
use rverbs::cm::{EndReason, Endpoint};

use crate::rdma_client::{addrinfo_failure, example_attr, finish, parse, Failure, Msgs};
use crate::CmdResult;

pub const USAGE: &str = "\
Usage: rverbs rdma-server [-s server_address] [-p port_number]

librdmacm's rdma_server example on rverbs (the client may be rdma_client or rverbs
rdma-client): listens, accepts one RC connection, waits for the client's 16-byte message,
answers with 16 bytes and disconnects. Prints \"rdma_server: start\" and \"rdma_server: end N\";
exits with N (0, or 255).

Options:
  -s ADDR   address to listen on (default 0.0.0.0: every RDMA device)
  -p PORT   port number (default 7471)
  -h        this text
";

fn run_server(server: &str, port: &str) -> Result<(), Failure> {
    let hints = AddrHints {
        passive: true,
        ..AddrHints::default()
    };
    let ai = getaddrinfo(Some(server), Some(port), &hints).map_err(addrinfo_failure)?;
    let listen_id = create_ep(&ai[0]).map_err(|e| Failure::new("rdma_create_ep", e))?;
    listen_id
        .listen(0)
        .map_err(|e| Failure::new("rdma_listen", e))?;
    let id = listen_id
        .get_request()
        .map_err(|e| Failure::new("rdma_get_request", e))?;
    let ep =
        Endpoint::create(id, &example_attr()).map_err(|e| Failure::new("rdma_get_request", e))?;
    let msgs = Msgs::post_recv(&ep, "rdma_server")?;
    ep.accept(&ConnParam::default())
        .map_err(|e| Failure::new("rdma_accept", e))?;
    let res = msgs
        .recv(&ep, "the receive of the client's message")
        .and_then(|()| answer(&ep, &msgs));
    let _ = ep.disconnect();
    // The QP (in `ep`) goes before the buffers it could still write to.
    drop(ep);
    drop(msgs);
    drop(listen_id);
    res
}

/// Sends the answer and waits for its completion. A client that got the answer may hang up
/// before its acknowledgement reaches us: rxe posts the client's receive completion before it
/// sends the ACK, and a QP torn down at once can drop that ACK. The answer's completion then
/// comes back flushed (the wait moves the QP to ERR after DISCONNECTED; or a retry error)
/// though the client has the data; librdmacm's
/// rdma_server does not look at that completion's status at all. So once the
/// client has disconnected (a DISCONNECTED event), a failed answer completion is reported on
/// stderr and the exchange counts as done: the client's own exit status says whether it got
/// the answer. Any other failure is the server's.
fn answer(ep: &Endpoint, msgs: &Msgs) -> Result<(), Failure> {
    match msgs.send(ep, "the send of the answer") {
        Err(f) if matches!(ep.ended(), Some(EndReason::Event(k, _)) if k == CmEventKind::DISCONNECTED) =>
        {
            eprintln!(
                "rdma_server: the client disconnected before the answer's completion ({}: {}); \
                 its exit status tells whether it got the answer",
                f.step, f.err
            );
            Ok(())
        }
        r => r,
    }
}

pub fn run(args: Vec<OsString>) -> CmdResult {
    let o = parse(args, "0.0.0.0")?;
    if o.help {
        print!("{USAGE}");
        return Ok(());
    }
    println!("rdma_server: start");
    io::stdout().flush()?;
    let res = run_server(&o.server, &o.port);
    finish("rdma_server", res)
}
