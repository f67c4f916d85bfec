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
//! a hang (see `rdma_client::with_peer_watch`). The other differences are those of
//! `rverbs rdma-client`.

#![allow(unsafe_code)] // posting a receive hands a buffer to the device

use std::ffi::OsString;
use std::io::{self, Write};

use rverbs::cm::verbs::Endpoint;
use rverbs::cm::{create_ep, getaddrinfo, AddrHints, ConnParam};
use rverbs::uverbs::mr::Mr;
use rverbs::uverbs::SendFlags;

use crate::rdma_client::{
    addrinfo_failure, example_attr, finish, parse, with_peer_watch, Failure, MSG_LEN,
};
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
    let inline = ep.caps().max_inline_data as usize >= MSG_LEN;
    if !inline {
        println!("rdma_server: device doesn't support IBV_SEND_INLINE, using sge sends");
    }
    let recv_mr = ep
        .reg_msgs(vec![0u8; MSG_LEN])
        .map_err(|(e, _)| Failure::new("rdma_reg_msgs for recv_msg", e))?;
    // The C tool answers with its (zeroed) send buffer.
    let send_mr: Option<Mr<Vec<u8>>> = if inline {
        None
    } else {
        Some(
            ep.reg_msgs(vec![0u8; MSG_LEN])
                .map_err(|(e, _)| Failure::new("rdma_reg_msgs for send_msg", e))?,
        )
    };
    let sge = [recv_mr.sge(0..MSG_LEN)];
    // SAFETY: recv_mr is registered on this endpoint's PD and is dropped only after `ep`
    // (and so its QP) at the end of this function.
    unsafe { ep.post_recv(0, &sge) }.map_err(|e| Failure::new("rdma_post_recv", e))?;
    ep.accept(&ConnParam::default())
        .map_err(|e| Failure::new("rdma_accept", e))?;
    let res = with_peer_watch(&ep, |watch| -> Result<(), Failure> {
        let wc = ep
            .get_recv_comp()
            .map_err(|e| Failure::new("rdma_get_recv_comp", e))?;
        if !wc.status.is_success() {
            return Err(Failure::new(
                "rdma_get_recv_comp",
                watch.explain("the receive of the client's message", &wc),
            ));
        }
        match &send_mr {
            None => ep.post_send_inline(0, &[0u8; MSG_LEN], SendFlags::empty()),
            Some(mr) => {
                let s = [mr.sge(0..MSG_LEN)];
                // SAFETY: mr is a live MR of this PD, dropped after `ep`.
                unsafe { ep.post_send(0, &s, SendFlags::empty()) }
            }
        }
        .map_err(|e| Failure::new("rdma_post_send", e))?;
        let wc = ep
            .get_send_comp()
            .map_err(|e| Failure::new("rdma_get_send_comp", e))?;
        if !wc.status.is_success() {
            return Err(Failure::new(
                "rdma_get_send_comp",
                watch.explain("the send of the answer", &wc),
            ));
        }
        Ok(())
    })
    .map_err(|e| Failure::new("start the peer watcher", e))?;
    let _ = ep.disconnect();
    drop(ep);
    drop(send_mr);
    drop(recv_mr);
    drop(listen_id);
    res
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
