//! `rverbs rping`: rdma-core's `rping` (librdmacm/examples, v44) on rverbs.
//!
//! Same options, same protocol, same output lines, interoperable with the C tool in both
//! directions. Per ping:
//!
//! 1. the client fills its *start* buffer with `"rdma-ping-N: "` and a rotating run of the
//!    characters `A`..`z` (NUL at the end), and sends `struct rping_rdma_info {buf, rkey,
//!    size}` (16 bytes, network byte order) naming it;
//! 2. the server RDMA READs that many bytes into its buffer (`-v`: `server ping data: ...`)
//!    and sends a 16-byte "go ahead";
//! 3. the client advertises its *sink* buffer the same way;
//! 4. the server RDMA WRITEs its buffer's string (up to and including the NUL) into it and
//!    sends a "go ahead";
//! 5. the client compares sink and start with `-V` and prints `ping data: ...` with `-v`.
//!
//! The server serves one client (or, with `-P`, every client, each in its own thread) until
//! it disconnects; `-C` counts the client's pings (0, the default, pings until stopped).
//!
//! The C tool runs a CM-event thread and a CQ-event thread that post a semaphore; here one
//! thread waits on both (the CQ's completion channel and the rdma_cm id's fd in one `poll`)
//! and counts the same semaphore, so states, checks and messages follow the C code.
//!
//! Differences by design: numbers that do not parse and ports above 65535 are refused (the C
//! tool reads them with `atoi`); errors name what failed and exit 1; a client whose server
//! disconnects before the last ping exits 1 (the C client exits 0 once it sees
//! DISCONNECTED); a connection that shows neither a completion nor an rdma_cm event for 60 s
//! ends with an error instead of waiting forever; a client advertising more bytes than the
//! server's `-S` is refused by name (the C server would read past its buffer); the server's
//! final `wait for RDMA_READ_ADV state 10` line is not printed. `-t` (in the C tool's option
//! string but unhandled there) is refused.
//!
//! The files: [`opts`] (command line), [`message`] (what goes over the wire and into the
//! buffers), [`link`] (the QP, made by rdma_cm's helpers or by rping), [`cb`] (a connection's
//! objects, states and event loop), [`pings`] (the ping protocol of each side); this file
//! resolves the addresses and runs the client or the server.

use std::ffi::OsString;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Duration;

use rverbs::cm::{getaddrinfo, AddrHints, CmId, PortSpace};

use crate::CmdResult;

macro_rules! debug_log {
    ($o:expr, $($t:tt)*) => {
        if $o.debug {
            println!($($t)*);
        }
    };
}

mod cb;
mod link;
mod message;
mod opts;
mod pings;

use cb::{Cb, State};
pub use opts::{parse, Opts};

pub const USAGE: &str = "\
Usage:
  rverbs rping -s [-vVdPq] [-S size] [-C count] [-a addr] [-p port]
  rverbs rping -c [-vVdq] [-S size] [-C count] [-I addr] -a addr [-p port]

RDMA ping-pong over rdma_cm, compatible with rdma-core's rping (either side may be the C
tool): per ping the server RDMA READs the client's buffer, then RDMA WRITEs it back into the
client's sink buffer.

Options:
  -c          client side
  -s          server side (to bind to any IPv6 address use -a ::0)
  -a ADDR     address: the server's to connect to (client), to listen on (server; default
              0.0.0.0)
  -I ADDR     source address to bind to (client)
  -p PORT     port (default 7174)
  -C COUNT    ping COUNT times (client; default 0 = until stopped; the server serves until
              its client disconnects)
  -S SIZE     ping data size, 26..=65535 (default 64; the server's must be at least the
              client's)
  -v          display ping data to stdout
  -V          validate ping data (client)
  -d          debug printfs
  -P          persistent server: serve any number of clients, each in its own thread
  -q          use a self-created, self-modified QP (the QP made with verbs, moved through
              INIT/RTR/RTS by rping with the rdma_cm's attributes, its number sent in the
              connection parameters)
  -h          this text

Not supported: -t (rping's option string has it, but rping refuses it too).
";

/// rping's default port.
pub const DEFAULT_PORT: u16 = 7174;
/// `RPING_BUFSIZE`: sizes must stay below it.
pub const BUFSIZE: u32 = 64 * 1024;
/// `RPING_MIN_BUFSIZE`: `sizeof "2147483647"` + `sizeof "rdma-ping-%d: "`.
pub const MIN_SIZE: u32 = 11 + 15;
/// `RPING_SQ_DEPTH`.
const SQ_DEPTH: u32 = 16;
/// Bytes of `struct rping_rdma_info`.
pub const INFO_LEN: usize = 16;
/// A connection with no completion and no rdma_cm event for this long has lost its peer.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Address and route resolution timeouts (rping's 2000 ms).
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

// ---------------------------------------------------------------------------------------------
// The two sides
// ---------------------------------------------------------------------------------------------

/// An error naming the rdma_cm or verbs step `what` that failed.
fn os_err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// `-a` (and `-I`) as rping's `get_addr` reads them: the first address the name resolves to.
fn resolve(what: &str, name: &str, port: u16, passive: bool) -> io::Result<SocketAddr> {
    let hints = AddrHints {
        passive,
        ..AddrHints::default()
    };
    let ai = getaddrinfo(Some(name), Some(&port.to_string()), &hints).map_err(|e| {
        os_err(
            &format!("getaddrinfo failed for {what} {name:?} - invalid hostname or IP address"),
            e,
        )
    })?;
    let a = &ai[0];
    Ok(if passive { a.src } else { a.dst }.expect("getaddrinfo fills the address it was asked"))
}

fn run_client(o: &Opts, out: &mut impl Write) -> io::Result<()> {
    let dst = resolve("-a", o.addr.as_deref().unwrap_or_default(), o.port, false)?;
    let src = match &o.src {
        Some(s) => Some(resolve("-I", s, 0, false)?),
        None => None,
    };
    let id = CmId::create(None, PortSpace::TCP).map_err(|e| os_err("rdma_create_id", e))?;
    debug_log!(o, "created cm_id {}", id.handle());
    id.resolve_addr(src, dst, RESOLVE_TIMEOUT)
        .map_err(|e| os_err("rdma_resolve_addr", e))?;
    debug_log!(
        o,
        "cma_event type RDMA_CM_EVENT_ADDR_RESOLVED cma_id {} (parent)",
        id.handle()
    );
    id.resolve_route(RESOLVE_TIMEOUT)
        .map_err(|e| os_err("rdma_resolve_route", e))?;
    debug_log!(
        o,
        "cma_event type RDMA_CM_EVENT_ROUTE_RESOLVED cma_id {} (parent)",
        id.handle()
    );
    debug_log!(o, "rdma_resolve_addr - rdma_resolve_route successful");
    let mut cb = Cb::setup(o, id, false)?;
    cb.post_recv()
        .map_err(|e| os_err("ibv_post_recv failed", e))?;
    cb.link.connect().map_err(|e| os_err("rdma_connect", e))?;
    cb.state = State::Connected;
    debug_log!(o, "rdma_connect successful");
    let res = cb
        .test_client(out)
        .map_err(|e| os_err("rping client failed", e));
    // rping_disconnect: whatever happened (refused once the peer is gone: ignore that).
    if cb.state != State::Disconnected {
        let _ = cb.link.disconnect();
    }
    debug_log!(o, "rping_free_buffers called on cb");
    drop(cb);
    res
}

/// Serves one connection request (`rping_run_server` after the request, or one thread of the
/// persistent server).
fn serve(o: &Opts, id: CmId, out: &mut impl Write) -> io::Result<()> {
    debug_log!(o, "child cma {}", id.handle());
    let mut cb = Cb::setup(o, id, true)?;
    cb.state = State::ConnectRequest;
    cb.post_recv()
        .map_err(|e| os_err("ibv_post_recv failed", e))?;
    debug_log!(o, "accepting client connection request");
    cb.link
        .accept()
        .map_err(|e| os_err("connect error: rdma_accept", e))?;
    debug_log!(
        o,
        "cma_event type RDMA_CM_EVENT_ESTABLISHED cma_id {} (child)",
        cb.link.id().handle()
    );
    let res = cb
        .test_server(out)
        .map_err(|e| os_err("rping server failed", e));
    let _ = cb.link.disconnect();
    debug_log!(o, "rping_free_buffers called on cb");
    drop(cb);
    res
}

fn run_server(o: &Opts, out: &mut impl Write) -> io::Result<()> {
    let addr = resolve("-a", o.addr.as_deref().unwrap_or("0.0.0.0"), o.port, true)?;
    let listen = CmId::create(None, PortSpace::TCP).map_err(|e| os_err("rdma_create_id", e))?;
    debug_log!(o, "created cm_id {}", listen.handle());
    listen.bind(addr).map_err(|e| os_err("rdma_bind_addr", e))?;
    debug_log!(o, "rdma_bind_addr successful");
    debug_log!(o, "rdma_listen");
    listen.listen(3).map_err(|e| os_err("rdma_listen", e))?;
    if !o.persistent {
        let id = listen
            .get_request()
            .map_err(|e| os_err("wait for CONNECT_REQUEST", e))?;
        debug_log!(
            o,
            "cma_event type RDMA_CM_EVENT_CONNECT_REQUEST cma_id {} (child)",
            id.handle()
        );
        let res = serve(o, id, out);
        debug_log!(o, "destroy cm_id {}", listen.handle());
        return res;
    }
    // Persistent: each connection in its own (detached) thread, forever.
    loop {
        let id = listen
            .get_request()
            .map_err(|e| os_err("wait for CONNECT_REQUEST", e))?;
        debug_log!(
            o,
            "cma_event type RDMA_CM_EVENT_CONNECT_REQUEST cma_id {} (child)",
            id.handle()
        );
        let o = o.clone();
        std::thread::Builder::new()
            .name(format!("rping-{}", id.handle()))
            .spawn(move || {
                // io::Stdout locks per write: the connections' lines do not block each other.
                if let Err(e) = serve(&o, id, &mut io::stdout()) {
                    eprintln!("rverbs rping: {e}");
                }
            })
            .map_err(|e| os_err("pthread_create", e))?;
    }
}

pub fn run(args: Vec<OsString>) -> CmdResult {
    let o = parse(args)?;
    if o.help {
        print!("{USAGE}");
        return Ok(());
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    if o.server == Some(true) {
        if o.persistent {
            // The connection threads print themselves: do not hold stdout's lock here.
            drop(out);
            run_server(&o, &mut io::sink())?;
        } else {
            run_server(&o, &mut out)?;
        }
    } else {
        run_client(&o, &mut out)?;
    }
    Ok(())
}
