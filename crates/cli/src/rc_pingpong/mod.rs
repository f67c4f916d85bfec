//! `rverbs rc-pingpong`: rdma-core's `ibv_rc_pingpong` (v44) rebuilt on rverbs.
//!
//! Same options, same TCP exchange of LID/QPN/PSN/GID (so either side can be the C tool), same
//! order of operations and the same output lines. The two sides bounce one message of `--size`
//! bytes back and forth `--iters` times over an RC queue pair, polling the CQ (default) or
//! sleeping on CQ events (`-e`).
//!
//! How it runs (as the C tool does):
//! 1. open the device, fill the buffer with 0x7b, create PD, MR, CQ (rx_depth + 1 entries),
//!    an RC QP (1 send WR, rx_depth receive WRs, 1 SGE each), move it to INIT, post rx_depth
//!    receives, arm the CQ with `-e`;
//! 2. TCP exchange of one 52-byte message each way (`"%04x:%06x:%06x:%s"` + NUL: LID, QPN,
//!    PSN and the GID as 32 hex digits): the client sends first, the server reads it, moves
//!    its QP to RTR/RTS, answers, and reads the client's `"done"`; the client connects its QP
//!    after the exchange;
//! 3. the client posts the first send; every completion clears its bit of `pending`, and when
//!    both the send and the receive of a round are done the next send goes out; receives are
//!    re-posted in a batch when only one is left.
//!
//! Differences by design: errors are `rverbs rc-pingpong: <what went wrong>` with exit status
//! 1; the C options this tool does not implement (`-o -O -P -t -j -N`) are refused by name;
//! numbers that do not parse are refused instead of read as 0; the client's TCP connect gives
//! up after 10 s per address and each exchange read after 30 s; a run that sees no completion
//! for 60 s (`RVERBS_PINGPONG_IDLE_SECS`) stops with an error instead of hanging (the peer
//! died or cannot reach us; with `-e` after 60 to 70 s: the loop sleeps in a blocking read,
//! one system call per event as in the C tool, and a watchdog thread looks every 10 s, or a
//! quarter of a shorter limit); with `-c` a failed buffer check exits 1 (the
//! C tool only prints it); without `-g` on our side but a GID from the peer, the address uses
//! our GID index 0 (the C tool puts its -1 there, which the kernel sees as index 255).

//!
//! The files: [`opts`] (command line, environment knobs), [`exchange`] (the TCP address
//! exchange), [`resources`] (the verbs objects and the QP's connection), [`pingpong`] (what a
//! completion does, the polling and event loops), [`watchdog`] (the `-e` loop's idle limit);
//! this file runs them in order ([`run_pingpong`]).

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::time::Instant;

use rverbs::uverbs::{MrRecvWr, RecvWr, SendOp, SendWr};

use crate::CmdResult;

mod exchange;
mod opts;
mod pingpong;
mod resources;
mod watchdog;

use exchange::{client_exchange, connect, listen, server_exchange, Dest};
pub use opts::parse_c_int;
use opts::{parse, Opts};
use pingpong::{LoopStats, PingPong};
use resources::Resources;

pub const USAGE: &str = "\
Usage:
  rverbs rc-pingpong [options]          start a server and wait for connection
  rverbs rc-pingpong [options] <host>   connect to server at <host>

Ping-pong over an RC queue pair, compatible with rdma-core's ibv_rc_pingpong (either side
may be the C tool).

Options:
  -p, --port=<port>       listen on/connect to port <port> (default 18515)
  -d, --ib-dev=<dev>      use IB device <dev> (default first device found)
  -i, --ib-port=<port>    use port <port> of IB device (default 1)
  -s, --size=<size>       size of message to exchange (default 4096)
  -m, --mtu=<size>        path MTU (default 1024)
  -r, --rx-depth=<dep>    number of receives to post at a time (default 500)
  -n, --iters=<iters>     number of exchanges (default 1000)
  -l, --sl=<sl>           service level value (default 0)
  -e, --events            sleep on CQ events (default poll)
  -g, --gid-idx=<index>   local port GID index (needed on RoCE; default -1 = none)
  -c, --chk               validate received buffer
  -h, --help              this text

Not supported (ibv_rc_pingpong has them): -o/--odp, -O/--iodp, -P/--prefetch, -t/--ts,
-j/--dm, -N/--new_send.

With RVERBS_PINGPONG_STATS set, the number of CQ polls and completion events of the run is
printed to stderr at the end. RVERBS_PINGPONG_IDLE_SECS=N (default 60) is how long a run may
see no completion before it gives up on its peer (exit 1). RVERBS_PINGPONG_PAD=N polls the
empty CQ N more times before every send, to measure what userspace work costs in latency.
";

/// `wr_id` of every receive (also its bit in `PingPong::pending`).
const RECV_WRID: u64 = 1;
/// `wr_id` of every send (also its bit in `PingPong::pending`).
const SEND_WRID: u64 = 2;

/// The numbers of the two summary lines.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub bytes: u64,
    pub usec: f64,
    pub iters: u32,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.usec / 1e6;
        writeln!(
            f,
            "{} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
            self.bytes,
            self.bytes as f64 * 8.0 / self.usec
        )?;
        writeln!(
            f,
            "{} iters in {secs:.2} seconds = {:.2} usec/iter",
            self.iters,
            self.usec / f64::from(self.iters)
        )
    }
}

/// Runs one side and prints what the C tool prints to `out`: create the objects, post the
/// receives, exchange addresses, connect the QP, bounce the messages, print the summary,
/// check the buffer with `-c`.
pub fn run_pingpong(o: &Opts, out: &mut dyn Write) -> Result<Summary, Box<dyn std::error::Error>> {
    let idle = opts::idle_timeout()?;
    let pad = opts::send_padding()?;
    let res = Resources::create(o)?;
    let size = o.size as usize;
    let sge = [res.mr.sge(0..size)];
    let recv_wrs: Vec<MrRecvWr<'_>> = vec![
        RecvWr {
            wr_id: RECV_WRID,
            sge: &sge,
        };
        o.rx_depth as usize
    ];
    let mut pp = PingPong {
        qp: &res.qp,
        recv_wrs: &recv_wrs,
        send_wr: [SendWr {
            wr_id: SEND_WRID,
            op: SendOp::Send,
            sge: &sge,
            flags: res.send_flags,
            ud: None,
        }],
        rx_depth: o.rx_depth,
        iters: o.iters,
        routs: 0,
        rcnt: 0,
        scnt: 0,
        pending: 0,
        pad,
        padded: 0,
        cq: &res.cq,
    };
    pp.post_initial_recvs()?;
    if o.events {
        res.cq
            .req_notify(false)
            .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
    }

    let me = res.local_dest(o)?;
    writeln!(out, "  local address:  {me}")?;
    out.flush()?;
    let rem = exchange_addresses(o, &res, &me)?;
    writeln!(out, "  remote address: {rem}")?;
    out.flush()?;
    let client = o.server.is_some();
    if client {
        res.connect_qp(o, me.psn, &rem)?;
        if o.chk {
            mark_pages(&res, size);
        }
    }

    pp.start(client)?;
    let start = Instant::now();
    let stats = match &res.channel {
        Some(ch) => pp.run_events(ch, idle)?,
        None => pp.run_polling(idle)?,
    };
    let elapsed = start.elapsed();

    let summary = Summary {
        bytes: u64::from(o.size) * u64::from(o.iters) * 2,
        usec: (elapsed.as_secs_f64() * 1e6).max(1.0),
        iters: o.iters,
    };
    write!(out, "{summary}")?;
    print_stats(&stats, pad, pp.padded);
    let bad_pages = if !client && o.chk {
        check_pages(&res, size, out)?
    } else {
        0
    };
    out.flush()?;
    // Teardown in the C tool's order (the field order of `Resources`).
    drop(recv_wrs);
    drop(res);
    if bad_pages > 0 {
        return Err(format!("buffer check failed: {bad_pages} page(s) had invalid data").into());
    }
    Ok(summary)
}

/// The TCP exchange of the two addresses. The client sends first; the server reads it,
/// connects its QP, answers, and waits for the client's `"done"` (the client connects its QP
/// after the exchange). The server waits for its client as long as it takes, like the C tool.
fn exchange_addresses(
    o: &Opts,
    res: &Resources,
    me: &Dest,
) -> Result<Dest, Box<dyn std::error::Error>> {
    match &o.server {
        Some(host) => {
            let mut s = connect(host, o.port)?;
            let rem = client_exchange(&mut s, &format!("{host}:{}", o.port), me).map_err(|e| {
                let hint = if e.kind() == io::ErrorKind::UnexpectedEof
                    && res.port.link_layer == rverbs::uverbs::port::LinkLayer::ETHERNET
                    && o.gid_idx.is_none()
                {
                    " (did the server fail to connect its QP? RoCE needs -g <GID index> on \
                     both sides)"
                } else {
                    ""
                };
                format!("{e}{hint}")
            })?;
            Ok(rem)
        }
        None => {
            let l = listen(o.port)?;
            let (mut s, peer) = l
                .accept()
                .map_err(|e| format!("accept() on port {} failed: {e}", o.port))?;
            drop(l);
            server_exchange(&mut s, &peer.to_string(), me, |rem| {
                res.connect_qp(o, me.psn, rem)
                    .map_err(|e| format!("Couldn't connect to remote QP: {e}").into())
            })
        }
    }
}

/// `-c` on the client: ibv_rc_pingpong writes `i / page_size % sizeof(char)` at the start of
/// every page, which is always 0; the server checks those bytes after the run (its buffer
/// started as 0x7b, so they must have been received).
fn mark_pages(res: &Resources, size: usize) {
    let page = rustix::param::page_size();
    for i in (0..size).step_by(page) {
        res.mr.write_at(i, &[0]);
    }
}

/// `-c` on the server: prints each page whose first byte is not the client's 0; returns how
/// many.
fn check_pages(res: &Resources, size: usize, out: &mut dyn Write) -> io::Result<usize> {
    let page = rustix::param::page_size();
    let b = res.mr.to_vec();
    let mut bad = 0;
    for i in (0..size).step_by(page) {
        if b[i] != 0 {
            writeln!(out, "invalid data in page {}", i / page)?;
            bad += 1;
        }
    }
    Ok(bad)
}

/// RVERBS_PINGPONG_STATS: the loop's CQ polls and completion events (and padding polls) on
/// stderr.
fn print_stats(stats: &LoopStats, pad: u32, padded: u64) {
    if std::env::var_os("RVERBS_PINGPONG_STATS").is_some() {
        eprintln!(
            "rc-pingpong stats: {} CQ polls, {} completion events",
            stats.polls, stats.events
        );
        if pad != 0 {
            eprintln!("rc-pingpong stats: {padded} padding polls");
        }
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
    run_pingpong(&o, &mut out)?;
    Ok(())
}
