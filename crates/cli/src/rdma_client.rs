//! `rverbs rdma-client`: librdmacm's `rdma_client` example (rdma-core v44) on rverbs.
//!
//! Same options (`-s ADDR`, `-p PORT`, default 127.0.0.1 and 7471), same wire behaviour and
//! output, either side may be the C tool: an RC endpoint with 1 send and 1 receive work
//! request of 1 SGE each, 16 bytes of inline data, every send signaled; a 16-byte receive is
//! posted before connecting; then one 16-byte send (inline when the QP allows it), its
//! completion, the server's 16-byte answer, and a disconnect. Prints `rdma_client: start` and
//! `rdma_client: end N` as the C tool does and exits with N (0, or 255 for -1).
//!
//! Differences by design: errors name what failed (the C tool prints `perror`); completions
//! are checked (the C tool ignores their status); a peer that disconnects or dies while we
//! wait for a completion ends the wait with an error instead of hanging forever (the
//! library's `get_send_comp` / `get_recv_comp` end when the connection does); getaddrinfo failures
//! end with -2 (unresolvable host) or -8 (bad port: a port above 65535 is refused, not
//! truncated to 16 bits).
//!
//! The helpers shared with `rverbs rdma-server` live here.

#![allow(unsafe_code)] // posting a receive hands a buffer to the device

use std::ffi::OsString;
use std::io::{self, Write};

use rverbs::cm::{create_ep, getaddrinfo, AddrHints, ConnParam};
use rverbs::cm::{Endpoint, EndpointAttr};
use rverbs::uverbs::mr::Mr;
use rverbs::uverbs::{SendFlags, WorkCompletion};

use crate::{usage_err, CmdResult};

pub const USAGE: &str = "\
Usage: rverbs rdma-client [-s server_address] [-p port_number]

librdmacm's rdma_client example on rverbs (the server may be rdma_server or rverbs
rdma-server): connects over RC, sends one 16-byte message, waits for the 16-byte answer and
disconnects. Prints \"rdma_client: start\" and \"rdma_client: end N\"; exits with N (0, or 255).

Options:
  -s ADDR   server address or host name (default 127.0.0.1)
  -p PORT   port number (default 7471)
  -h        this text
";

/// Default port of librdmacm's rdma_server / rdma_client examples.
pub const DEFAULT_PORT: &str = "7471";
/// Message size of the examples.
pub const MSG_LEN: usize = 16;

/// `-s` and `-p` of the two example tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    pub server: String,
    pub port: String,
    pub help: bool,
}

/// Parses `[-s ADDR] [-p PORT] [-h]` (getopt style: `-sADDR` works too).
pub fn parse(
    args: Vec<OsString>,
    default_server: &str,
) -> Result<Opts, Box<dyn std::error::Error>> {
    use lexopt::prelude::*;
    let mut o = Opts {
        server: default_server.to_string(),
        port: DEFAULT_PORT.to_string(),
        help: false,
    };
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Short('s') => o.server = p.value()?.string()?,
            Short('p') => o.port = p.value()?.string()?,
            Short('h') | Long("help") => o.help = true,
            Value(v) => {
                return Err(usage_err(format!(
                    "unexpected argument {:?} (the address goes after -s)",
                    v.to_string_lossy()
                )))
            }
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(o)
}

/// Why a run failed: the step (named as the C tool's perror would), the error, and the code
/// the C tool would return (`end N`, exit status N as a byte).
#[derive(Debug)]
pub struct Failure {
    pub step: &'static str,
    pub err: String,
    pub code: i32,
}

impl Failure {
    pub fn new(step: &'static str, err: impl std::fmt::Display) -> Self {
        Self {
            step,
            err: err.to_string(),
            code: -1,
        }
    }
}

/// `rdma_getaddrinfo`'s failure as the C tools return it: a negative EAI code.
pub fn addrinfo_failure(e: io::Error) -> Failure {
    let code = match e.kind() {
        io::ErrorKind::InvalidInput => -8, // EAI_SERVICE
        _ => -2,                           // EAI_NONAME
    };
    Failure {
        step: "rdma_getaddrinfo",
        err: e.to_string(),
        code,
    }
}

/// Prints the last line as the C tool does and ends the process with its status.
pub fn finish(prog: &str, res: Result<(), Failure>) -> CmdResult {
    let code = match res {
        Ok(()) => 0,
        Err(f) => {
            eprintln!("{prog}: {}: {}", f.step, f.err);
            f.code
        }
    };
    println!("{prog}: end {code}");
    io::stdout().flush()?;
    if code != 0 {
        // The C tools return `ret` from main: -1 becomes 255. Everything was dropped in
        // `run_*` already, so nothing is left to clean up.
        std::process::exit(code & 0xff);
    }
    Ok(())
}

/// Explains a failed completion: its status, and how the connection ended if it did.
pub fn explain(ep: &Endpoint, what: &str, wc: &WorkCompletion) -> String {
    let mut s = format!(
        "{what} completed with status {} ({})",
        wc.status, wc.status.0
    );
    if let Some(end) = ep.ended() {
        s += &format!(": {}", end.to_error("the connection", ep.id().handle()));
    }
    s
}

/// The examples' QP: 1 send and 1 receive WR, 1 SGE each, 16 bytes inline, all signaled.
pub fn example_attr() -> EndpointAttr {
    EndpointAttr::default()
}

/// The examples' two 16-byte message buffers, registered as the C tools do (the send buffer
/// only when the QP cannot send 16 bytes inline), with the receive posted. Drop it after the
/// endpoint: the QP must be gone before the memory it could still write to.
pub struct Msgs {
    /// Held, not read: the posted receive lands here.
    _recv: Mr<Vec<u8>>,
    send: Option<Mr<Vec<u8>>>,
}

impl Msgs {
    /// Registers the buffers on `ep` and posts the receive. `prog` names the tool in the
    /// "device doesn't support IBV_SEND_INLINE" line the C tools print.
    pub fn post_recv(ep: &Endpoint, prog: &str) -> Result<Msgs, Failure> {
        let inline = ep.caps().max_inline_data as usize >= MSG_LEN;
        if !inline {
            println!("{prog}: device doesn't support IBV_SEND_INLINE, using sge sends");
        }
        let recv = ep
            .reg_msgs(vec![0u8; MSG_LEN])
            .map_err(|e| Failure::new("rdma_reg_msgs for recv_msg", e))?;
        // The C tools send their (zeroed) send buffer.
        let send = if inline {
            None
        } else {
            Some(
                ep.reg_msgs(vec![0u8; MSG_LEN])
                    .map_err(|e| Failure::new("rdma_reg_msgs for send_msg", e))?,
            )
        };
        let sge = [recv.sge(0..MSG_LEN)];
        ep.post_recv(0, &sge)
            .map_err(|e| Failure::new("rdma_post_recv", e))?;
        Ok(Msgs { _recv: recv, send })
    }

    /// Sends the 16-byte message (inline, or from the send buffer) and waits for its
    /// completion; a failed one is explained with `what` and the peer's event.
    pub fn send(&self, ep: &Endpoint, what: &str) -> Result<(), Failure> {
        match &self.send {
            None => ep.post_send_inline(0, &[0u8; MSG_LEN], SendFlags::empty()),
            Some(mr) => {
                let s = [mr.sge(0..MSG_LEN)];
                ep.post_send(0, &s, SendFlags::empty())
            }
        }
        .map_err(|e| Failure::new("rdma_post_send", e))?;
        let wc = ep
            .get_send_comp()
            .map_err(|e| Failure::new("rdma_get_send_comp", e))?;
        if !wc.status.is_success() {
            return Err(Failure::new("rdma_get_send_comp", explain(ep, what, &wc)));
        }
        Ok(())
    }

    /// Waits for the posted receive; a failed one is explained with `what`.
    pub fn recv(&self, ep: &Endpoint, what: &str) -> Result<(), Failure> {
        let wc = ep
            .get_recv_comp()
            .map_err(|e| Failure::new("rdma_get_recv_comp", e))?;
        if !wc.status.is_success() {
            return Err(Failure::new("rdma_get_recv_comp", explain(ep, what, &wc)));
        }
        Ok(())
    }
}

fn run_client(o: &Opts) -> Result<(), Failure> {
    let ai = getaddrinfo(Some(&o.server), Some(&o.port), &AddrHints::default())
        .map_err(addrinfo_failure)?;
    let id = create_ep(&ai[0]).map_err(|e| Failure::new("rdma_create_ep", e))?;
    let ep =
        Endpoint::create(id, &example_attr()).map_err(|e| Failure::new("rdma_create_ep", e))?;
    let msgs = Msgs::post_recv(&ep, "rdma_client")?;
    ep.connect(&ConnParam::default())
        .map_err(|e| Failure::new("rdma_connect", e))?;
    let res = msgs
        .send(&ep, "the send")
        .and_then(|()| msgs.recv(&ep, "the receive of the server's answer"));
    // As the C tool: disconnect whatever happened (its errors do not change the result).
    let _ = ep.disconnect();
    // The QP (in `ep`) goes before the buffers it could still write to.
    drop(ep);
    drop(msgs);
    res
}

pub fn run(args: Vec<OsString>) -> CmdResult {
    let o = parse(args, "127.0.0.1")?;
    if o.help {
        print!("{USAGE}");
        return Ok(());
    }
    println!("rdma_client: start");
    io::stdout().flush()?;
    let res = run_client(&o);
    finish("rdma_client", res)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn defaults_and_flags() {
        let o = parse(vec![], "127.0.0.1").unwrap();
        assert_eq!((o.server.as_str(), o.port.as_str()), ("127.0.0.1", "7471"));
        let o = parse(args(&["-s", "10.10.0.1", "-p", "9000"]), "x").unwrap();
        assert_eq!((o.server.as_str(), o.port.as_str()), ("10.10.0.1", "9000"));
        let o = parse(args(&["-s10.10.0.2", "-p7000"]), "x").unwrap();
        assert_eq!((o.server.as_str(), o.port.as_str()), ("10.10.0.2", "7000"));
        assert!(parse(args(&["-h"]), "x").unwrap().help);
    }

    #[test]
    fn bad_arguments_are_refused() {
        let e = parse(args(&["-x"]), "x").unwrap_err().to_string();
        assert!(e.contains("-x"), "{e}");
        let e = parse(args(&["-s"]), "x").unwrap_err().to_string();
        assert!(e.contains("missing argument"), "{e}");
        let e = parse(args(&["host"]), "x").unwrap_err().to_string();
        assert!(e.contains("unexpected argument \"host\""), "{e}");
    }

    #[test]
    fn addrinfo_codes() {
        let e = getaddrinfo(Some("10.0.0.1"), Some("70000"), &AddrHints::default()).unwrap_err();
        let f = addrinfo_failure(e);
        assert_eq!(f.code, -8);
        assert!(f.err.contains("port 70000 out of range"), "{}", f.err);
        let e = getaddrinfo(
            Some("no-such-host.invalid"),
            Some("1"),
            &AddrHints::default(),
        )
        .unwrap_err();
        assert_eq!(addrinfo_failure(e).code, -2);
    }
}
