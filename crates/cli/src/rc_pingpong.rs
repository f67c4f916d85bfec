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

#![allow(unsafe_code)] // posting work requests hands the buffer to the device

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rverbs::uverbs::ah::{AhAttr, GlobalRoute};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::gid::Gid;
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::port::{LinkLayer, Mtu};
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{Qp, QpAttr, QpInit, QpState};
use rverbs::uverbs::{MrRecvWr, MrSendWr, RawWc, RecvWr, SendFlags, SendOp, SendWr};

use crate::{usage_err, CmdResult};

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

/// Default TCP port, as ibv_rc_pingpong.
pub const DEFAULT_PORT: u16 = 18515;
/// Bytes of the address message on the TCP socket: `sizeof "0000:000000:000000:" + 32 hex
/// digits`, NUL included.
pub const MSG_LEN: usize = 52;
/// What the client sends after reading the server's address (NUL included).
pub const DONE_MSG: &[u8; 5] = b"done\0";

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// How long the client tries each address of the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long each read or write of the address exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);
/// A run with no completion for this long has lost its peer (unless RVERBS_PINGPONG_IDLE_SECS
/// says otherwise).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The value of the environment variable `var`: `None` if it is unset, an error naming it if
/// it is not a whole number `what` from `min` to `max`.
fn env_number(var: &str, min: u64, max: u64, what: &str) -> Result<Option<u64>, String> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    match v.to_str().and_then(|s| s.parse::<u64>().ok()) {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{var}={}: expected a whole number of {what}, from {min} to {max}",
            v.to_string_lossy()
        )),
    }
}

/// The idle limit of this run: RVERBS_PINGPONG_IDLE_SECS, else [`IDLE_TIMEOUT`].
fn idle_timeout() -> Result<Duration, String> {
    let secs = env_number("RVERBS_PINGPONG_IDLE_SECS", 1, u64::MAX, "seconds")?;
    Ok(secs.map_or(IDLE_TIMEOUT, Duration::from_secs))
}

/// RVERBS_PINGPONG_PAD: extra polls of the empty CQ before every send (default 0). A
/// measurement aid, not a feature: `ci/bench-pingpong.sh pad` adds a known number of
/// userspace instructions of the library's own hot code to the critical path this way and
/// measures what they cost in latency (docs/perf.md).
fn send_padding() -> Result<u32, String> {
    let n = env_number("RVERBS_PINGPONG_PAD", 0, u32::MAX.into(), "CQ polls")?;
    Ok(n.map_or(0, |n| n as u32))
}

/// Polls between two looks at the clock (polling mode).
const SPINS_PER_CLOCK_CHECK: u64 = 1 << 14;

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// The server to connect to; `None` runs the server.
    pub server: Option<String>,
    pub port: u16,
    pub ib_dev: Option<String>,
    pub ib_port: u8,
    pub size: u32,
    pub mtu: Mtu,
    pub rx_depth: u32,
    pub iters: u32,
    pub sl: u8,
    pub events: bool,
    /// `-g`: our GID index; `None` (the C tool's -1) sends a zero GID.
    pub gid_idx: Option<u32>,
    pub chk: bool,
    pub help: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            server: None,
            port: DEFAULT_PORT,
            ib_dev: None,
            ib_port: 1,
            size: 4096,
            mtu: Mtu::MTU_1024,
            rx_depth: 500,
            iters: 1000,
            sl: 0,
            events: false,
            gid_idx: None,
            chk: false,
            help: false,
        }
    }
}

/// Parses a number as C's `strtol(s, NULL, 0)` reads it (decimal, `0x` hex, leading-`0`
/// octal, optional sign), but refuses trailing garbage and empty strings.
pub fn parse_c_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()?
    } else {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn num_in(
    opt: &str,
    s: &str,
    min: i64,
    max: i64,
    what: &str,
) -> Result<i64, Box<dyn std::error::Error>> {
    match parse_c_int(s) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        Some(v) => Err(usage_err(format!(
            "{opt} {v}: {what} must be in {min}..={max}"
        ))),
        None => Err(usage_err(format!("{opt} {s:?}: not a number"))),
    }
}

/// The C options rverbs does not implement, with what they do.
const UNSUPPORTED: &[(char, &str, &str)] = &[
    ('o', "odp", "on-demand paging"),
    ('O', "iodp", "implicit on-demand paging"),
    ('P', "prefetch", "prefetching an ODP MR"),
    ('t', "ts", "completion timestamps"),
    ('j', "dm", "device memory"),
    ('N', "new_send", "the new post-send API"),
];

fn unsupported(short: char, long: &str, what: &str) -> Box<dyn std::error::Error> {
    usage_err(format!(
        "option -{short}/--{long} ({what}) of ibv_rc_pingpong is not supported by rverbs \
         rc-pingpong"
    ))
}

/// Parses the arguments after `rc-pingpong`.
pub fn parse(args: Vec<OsString>) -> Result<Opts, Box<dyn std::error::Error>> {
    use lexopt::prelude::*;
    let mut o = Opts::default();
    let mut p = lexopt::Parser::from_args(args);
    let mut positional: Vec<String> = Vec::new();
    while let Some(arg) = p.next()? {
        match arg {
            Short('p') | Long("port") => {
                o.port = num_in("-p", &p.value()?.string()?, 0, 65535, "the TCP port")? as u16
            }
            Short('d') | Long("ib-dev") => o.ib_dev = Some(p.value()?.string()?),
            Short('i') | Long("ib-port") => {
                o.ib_port = num_in("-i", &p.value()?.string()?, 1, 255, "the port")? as u8
            }
            Short('s') | Long("size") => {
                o.size = num_in("-s", &p.value()?.string()?, 1, i32::MAX.into(), "the size")? as u32
            }
            Short('m') | Long("mtu") => {
                let v = p.value()?.string()?;
                o.mtu = parse_c_int(&v)
                    .and_then(|n| u32::try_from(n).ok())
                    .and_then(Mtu::from_bytes)
                    .ok_or_else(|| {
                        usage_err(format!(
                            "-m {v:?}: the MTU must be 256, 512, 1024, 2048 or 4096"
                        ))
                    })?;
            }
            Short('r') | Long("rx-depth") => {
                o.rx_depth = num_in(
                    "-r",
                    &p.value()?.string()?,
                    1,
                    i32::MAX.into(),
                    "the receive depth",
                )? as u32
            }
            Short('n') | Long("iters") => {
                o.iters = num_in(
                    "-n",
                    &p.value()?.string()?,
                    1,
                    i32::MAX.into(),
                    "the iteration count",
                )? as u32
            }
            Short('l') | Long("sl") => {
                o.sl = num_in("-l", &p.value()?.string()?, 0, 15, "the service level")? as u8
            }
            Short('e') | Long("events") => o.events = true,
            Short('g') | Long("gid-idx") => {
                let v = num_in(
                    "-g",
                    &p.value()?.string()?,
                    -1,
                    255,
                    "the GID index (-1: none)",
                )?;
                o.gid_idx = (v >= 0).then_some(v as u32);
            }
            Short('c') | Long("chk") => o.chk = true,
            Short('h') | Long("help") => o.help = true,
            Short(c) => match UNSUPPORTED.iter().find(|u| u.0 == c) {
                Some(&(s, l, w)) => return Err(unsupported(s, l, w)),
                None => return Err(Short(c).unexpected().into()),
            },
            Long(l) => match UNSUPPORTED.iter().find(|u| u.1 == l) {
                Some(&(s, l, w)) => return Err(unsupported(s, l, w)),
                None => return Err(Long(l).unexpected().into()),
            },
            Value(v) => positional.push(v.string()?),
        }
    }
    match positional.len() {
        0 => {}
        1 => o.server = positional.pop(),
        _ => {
            return Err(usage_err(format!(
                "one server host at most, got {}: {}",
                positional.len(),
                positional.join(" ")
            )))
        }
    }
    Ok(o)
}

// ---------------------------------------------------------------------------------------------
// The address message
// ---------------------------------------------------------------------------------------------

/// One side's address as exchanged over TCP (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl fmt::Display for Dest {
    /// The text after "local address:" / "remote address:".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid, self.qpn, self.psn, self.gid
        )
    }
}

/// The GID as the wire carries it: its 16 bytes in order as 32 lowercase hex digits.
pub fn gid_to_wire(gid: &Gid) -> [u8; 32] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in gid.0.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    out
}

/// Reads a wire GID (32 hex digits, either case).
pub fn wire_to_gid(s: &str) -> Option<Gid> {
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(Gid(g))
}

/// The 52-byte message: `"%04x:%06x:%06x:<32 hex>"` and a NUL.
pub fn encode_dest(d: &Dest) -> [u8; MSG_LEN] {
    let mut m = [0u8; MSG_LEN];
    let head = format!(
        "{:04x}:{:06x}:{:06x}:",
        d.lid,
        d.qpn & 0xff_ffff,
        d.psn & 0xff_ffff
    );
    m[..head.len()].copy_from_slice(head.as_bytes());
    m[head.len()..head.len() + 32].copy_from_slice(&gid_to_wire(&d.gid));
    m
}

/// Parses a peer's message (what C's `sscanf("%x:%x:%x:%s")` reads): three hex numbers and
/// a 32-digit GID, separated by ':', up to the first NUL.
pub fn decode_dest(msg: &[u8]) -> Result<Dest, String> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = std::str::from_utf8(&msg[..end])
        .map_err(|_| format!("the remote address message is not text: {msg:02x?}"))?;
    let bad = |why: &str| format!("bad remote address message {text:?}: {why}");
    let mut parts = text.splitn(4, ':');
    let mut hex = |name: &str, max: u32| -> Result<u32, String> {
        let s = parts.next().ok_or_else(|| bad(&format!("no {name}")))?;
        match u32::from_str_radix(s, 16) {
            Ok(v) if v <= max => Ok(v),
            _ => Err(bad(&format!(
                "{name} {s:?} is not a hex number up to {max:#x}"
            ))),
        }
    };
    let lid = hex("LID", 0xffff)? as u16;
    let qpn = hex("QPN", 0xff_ffff)?;
    let psn = hex("PSN", 0xff_ffff)?;
    let g = parts.next().ok_or_else(|| bad("no GID"))?;
    let gid = wire_to_gid(g).ok_or_else(|| bad(&format!("GID {g:?} is not 32 hex digits")))?;
    Ok(Dest { lid, qpn, psn, gid })
}

// ---------------------------------------------------------------------------------------------
// TCP exchange
// ---------------------------------------------------------------------------------------------

/// Reads exactly `buf.len()` bytes; a peer that closes early is an error naming how much came.
fn read_msg(s: &mut TcpStream, buf: &mut [u8], what: &str, peer: &str) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{peer} closed the connection after {got} of the {} bytes of {what}",
                        buf.len()
                    ),
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no {what} from {peer} within {} s (got {got} of {} bytes)",
                        EXCHANGE_TIMEOUT.as_secs(),
                        buf.len()
                    ),
                ))
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("read {what} from {peer}: {e}"),
                ))
            }
        }
    }
    Ok(())
}

fn write_msg(s: &mut TcpStream, buf: &[u8], what: &str, peer: &str) -> io::Result<()> {
    s.write_all(buf)
        .map_err(|e| io::Error::new(e.kind(), format!("send {what} to {peer}: {e}")))
}

fn bounded(s: &TcpStream) -> io::Result<()> {
    s.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    s.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
    s.set_nodelay(true)
}

/// Connects to `host:port`, trying each address it resolves to.
pub fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("resolve {host}:{port}: {e}")))?
        .collect();
    let mut errs = Vec::new();
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => errs.push((e.kind(), format!("{a}: {e}"))),
        }
    }
    let kind = errs.first().map_or(io::ErrorKind::NotFound, |e| e.0);
    let detail = if errs.is_empty() {
        "no address".to_string()
    } else {
        errs.into_iter().map(|e| e.1).collect::<Vec<_>>().join("; ")
    };
    Err(io::Error::new(
        kind,
        format!("couldn't connect to {host}:{port}: {detail}"),
    ))
}

/// Client side: send ours, read theirs, send "done".
pub fn client_exchange(s: &mut TcpStream, peer: &str, mine: &Dest) -> io::Result<Dest> {
    bounded(s)?;
    write_msg(s, &encode_dest(mine), "our address", peer)?;
    let mut m = [0u8; MSG_LEN];
    read_msg(s, &mut m, "the remote address", peer)?;
    write_msg(s, DONE_MSG, "\"done\"", peer)?;
    decode_dest(&m).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Listens on `port` on every address (IPv6 and IPv4; IPv4 alone when there is no IPv6).
pub fn listen(port: u16) -> io::Result<TcpListener> {
    TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port)))
        .map_err(|e| io::Error::new(e.kind(), format!("couldn't listen to port {port}: {e}")))
}

/// Server side: read theirs, `connect_qp(theirs)`, send ours, read "done".
pub fn server_exchange(
    s: &mut TcpStream,
    peer: &str,
    mine: &Dest,
    connect_qp: impl FnOnce(&Dest) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<Dest, Box<dyn std::error::Error>> {
    bounded(s)?;
    let mut m = [0u8; MSG_LEN];
    read_msg(s, &mut m, "the remote address", peer)?;
    let rem = decode_dest(&m)?;
    connect_qp(&rem)?;
    write_msg(s, &encode_dest(mine), "our address", peer)?;
    let mut done = [0u8; DONE_MSG.len()];
    read_msg(s, &mut done, "\"done\"", peer)?;
    if &done != DONE_MSG {
        return Err(format!("{peer} sent {done:02x?} where \"done\" was expected").into());
    }
    Ok(rem)
}

// ---------------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------------

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

/// A random 24-bit PSN (lrand48() & 0xffffff in the C tool).
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

fn connect_qp(qp: &Qp, o: &Opts, my_psn: u32, rem: &Dest, link: LinkLayer) -> CmdResult {
    // A GRH is used when the peer has a GID (as the C tool: its interface id is not zero).
    let grh = (rem.gid.0[8..] != [0; 8]).then(|| GlobalRoute {
        dgid: rem.gid.0,
        flow_label: 0,
        sgid_index: o.gid_idx.unwrap_or(0) as u8,
        hop_limit: 1,
        traffic_class: 0,
    });
    let rtr = QpAttr {
        qp_state: Some(QpState::RTR),
        path_mtu: Some(o.mtu),
        dest_qp_num: Some(rem.qpn),
        rq_psn: Some(rem.psn),
        max_dest_rd_atomic: Some(1),
        min_rnr_timer: Some(12),
        ah_attr: Some(AhAttr {
            dlid: rem.lid,
            sl: o.sl,
            src_path_bits: 0,
            static_rate: 0,
            port_num: o.ib_port,
            grh,
        }),
        ..Default::default()
    };
    qp.modify(&rtr).map_err(|e| {
        let hint = if link == LinkLayer::ETHERNET && (grh.is_none() || o.gid_idx.is_none()) {
            " (RoCE needs GIDs: give -g <GID index> on both sides; `rverbs devinfo -v` lists \
             the GID table)"
        } else {
            ""
        };
        format!("Failed to modify QP to RTR: {e}{hint}")
    })?;
    qp.modify(&QpAttr {
        qp_state: Some(QpState::RTS),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        sq_psn: Some(my_psn),
        max_rd_atomic: Some(1),
        ..Default::default()
    })
    .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
    Ok(())
}

/// The ping-pong loop's state (`parse_single_wc` of the C tool).
struct PingPong<'a> {
    qp: &'a Qp,
    recv_wrs: &'a [MrRecvWr<'a>],
    send_wr: [MrSendWr<'a>; 1],
    rx_depth: u32,
    iters: u32,
    routs: u32,
    rcnt: u32,
    scnt: u32,
    pending: u64,
    /// Empty CQ polls before every send (RVERBS_PINGPONG_PAD).
    pad: u32,
    /// Padding polls made so far.
    padded: u64,
    cq: &'a Cq,
}

/// Polls the CQ `n` times, for the padding measurement: callgrind counts the instructions.
/// The CQ is empty when a send is due (both completions of the last exchange are taken, and
/// the peer sends only after this side's send), so a completion here breaks the protocol.
#[inline(never)]
fn pad(cq: &Cq, n: u32) -> CmdResult {
    let mut wc = [RawWc::default(); 1];
    for _ in 0..n {
        if cq.poll_raw(&mut wc) != 0 {
            return Err(format!(
                "RVERBS_PINGPONG_PAD: a padding poll found a completion (wr_id {})",
                wc[0].wr_id()
            )
            .into());
        }
    }
    Ok(())
}

impl PingPong<'_> {
    /// Posts up to `n` receives; returns how many went in.
    fn post_recvs(&self, n: u32) -> u32 {
        let list = &self.recv_wrs[..n as usize];
        match self.qp.post_recv(list) {
            Ok(()) => n,
            Err(e) => e.posted() as u32,
        }
    }

    fn post_send(&mut self) -> CmdResult {
        if self.pad != 0 {
            pad(self.cq, self.pad)?;
            self.padded += u64::from(self.pad);
        }
        self.qp
            .post_send(&self.send_wr)
            .map_err(|e| format!("Couldn't post send: {e}").into())
    }

    /// Handles one completion, reading only its status and `wr_id` (the CQ is polled with
    /// `Cq::poll_raw`: nothing else of the entry is decoded).
    #[inline]
    fn completion(&mut self, wc: &RawWc) -> CmdResult {
        if !wc.is_success() {
            let status = wc.status();
            return Err(format!(
                "Failed status {} ({}) for wr_id {}",
                status,
                status.0,
                wc.wr_id()
            )
            .into());
        }
        let wr_id = wc.wr_id();
        match wr_id {
            SEND_WRID => self.scnt += 1,
            RECV_WRID => {
                self.routs -= 1;
                if self.routs <= 1 {
                    self.routs += self.post_recvs(self.rx_depth - self.routs);
                    if self.routs < self.rx_depth {
                        return Err(format!("Couldn't post receive ({})", self.routs).into());
                    }
                }
                self.rcnt += 1;
            }
            other => return Err(format!("Completion for unknown wr_id {other}").into()),
        }
        self.pending &= !wr_id;
        if self.scnt < self.iters && self.pending == 0 {
            self.post_send()?;
            self.pending = RECV_WRID | SEND_WRID;
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.rcnt >= self.iters && self.scnt >= self.iters
    }

    fn idle_error(&self, idle: Duration) -> Box<dyn std::error::Error> {
        idle_message(idle, self.scnt, self.rcnt, self.iters).into()
    }
}

/// Bounds the `-e` loop's waits without a timeout on each one: the loop sleeps in a plain
/// blocking `read(2)` of the channel (one system call per event, as the C tool), and this
/// thread ends the process with the idle error if the loop's counters do not move for the
/// idle limit (checked every [`WATCHDOG_CHECK`], or a quarter of a shorter limit). A blocked
/// read cannot be interrupted soundly from another thread without a signal handler; exiting
/// is what the loop would do anyway (print the error, exit 1), and the kernel releases the
/// QP, CQ, MR and mappings of an exiting process.
struct Watchdog {
    shared: Arc<WatchShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct WatchShared {
    /// `scnt << 32 | rcnt`, stored by the loop after every event.
    progress: AtomicU64,
    stop: AtomicBool,
}

/// How often the watchdog looks at the loop's progress.
const WATCHDOG_CHECK: Duration = Duration::from_secs(10);

impl Watchdog {
    fn start(iters: u32, idle: Duration) -> io::Result<Watchdog> {
        let check = WATCHDOG_CHECK.min(idle / 4);
        let shared = Arc::new(WatchShared {
            progress: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rc-pingpong watchdog".into())
            .spawn(move || {
                let mut last = u64::MAX;
                let mut since = Instant::now();
                loop {
                    std::thread::park_timeout(check);
                    // Relaxed: the flag carries no data; a late look only delays the exit.
                    if sh.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    // Relaxed: a plain counter; all we need is to see it change eventually.
                    let p = sh.progress.load(Ordering::Relaxed);
                    let now = Instant::now();
                    if p != last {
                        last = p;
                        since = now;
                    } else if now.duration_since(since) >= idle {
                        eprintln!(
                            "rverbs rc-pingpong: {}",
                            idle_message(idle, (p >> 32) as u32, p as u32, iters)
                        );
                        std::process::exit(1);
                    }
                }
            })?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
        })
    }

    #[inline]
    fn progress(&self, scnt: u32, rcnt: u32) {
        // Relaxed: read only by the watchdog, which needs no other memory with it.
        self.shared
            .progress
            .store(u64::from(scnt) << 32 | u64::from(rcnt), Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn idle_message(idle: Duration, scnt: u32, rcnt: u32, iters: u32) -> String {
    format!(
        "no completion for {} s: the remote side stopped or cannot reach us (sent {scnt}, \
         received {rcnt} of {iters} messages)",
        idle.as_secs(),
    )
}

/// Runs one side and prints what the C tool prints to `out`.
pub fn run_pingpong(o: &Opts, out: &mut dyn Write) -> Result<Summary, Box<dyn std::error::Error>> {
    let idle = idle_timeout()?;
    let pad = send_padding()?;
    let ctx = match &o.ib_dev {
        Some(name) => rverbs::provider::open_by_name(name)?,
        None => rverbs::provider::open_first()?,
    };
    // Queried first (the C tool asks after creating its objects): a port that does not exist
    // is then reported as such, not as a failed QP transition.
    let port = ctx
        .query_port(u32::from(o.ib_port))
        .map_err(|e| format!("Couldn't get port info: {e}"))?;
    let page = rustix::param::page_size();
    let size = o.size as usize;
    let mut buf = PageBuf::new(size)?;
    buf.as_mut_slice().fill(0x7b);
    let channel = if o.events {
        Some(CompChannel::create(&ctx)?)
    } else {
        None
    };
    let pd = Pd::alloc(&ctx)?;
    // Declared before the QP so that it is dropped after it: the device never writes to a
    // buffer whose registration is gone while receives are still posted.
    let mr = Mr::register(&pd, buf, AccessFlags::LOCAL_WRITE)?;
    let cq = Cq::create(
        &ctx,
        o.rx_depth + 1,
        CqOptions {
            channel: channel.clone(),
            comp_vector: 0,
        },
    )?;
    let qp: Arc<Qp> = Qp::create(
        &pd,
        QpInit::rc(
            &cq,
            QpCaps {
                max_send_wr: 1,
                max_recv_wr: o.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        ),
    )?;
    let mut send_flags = SendFlags::SIGNALED;
    if qp.caps().max_inline_data >= o.size {
        send_flags |= SendFlags::INLINE;
    }
    qp.modify(&QpAttr {
        qp_state: Some(QpState::INIT),
        pkey_index: Some(0),
        port_num: Some(o.ib_port),
        access_flags: Some(AccessFlags::empty()),
        ..Default::default()
    })
    .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;

    let sge = [mr.sge(0..size)];
    let recv_wrs: Vec<MrRecvWr<'_>> = vec![
        RecvWr {
            wr_id: RECV_WRID,
            sge: &sge,
        };
        o.rx_depth as usize
    ];
    let mut pp = PingPong {
        qp: &qp,
        recv_wrs: &recv_wrs,
        send_wr: [SendWr {
            wr_id: SEND_WRID,
            op: SendOp::Send,
            sge: &sge,
            flags: send_flags,
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
        cq: &cq,
    };
    pp.routs = pp.post_recvs(o.rx_depth);
    if pp.routs < o.rx_depth {
        return Err(format!("Couldn't post receive ({})", pp.routs).into());
    }
    if o.events {
        cq.req_notify(false)
            .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
    }

    if port.link_layer != LinkLayer::ETHERNET && port.lid == 0 {
        return Err(format!(
            "Couldn't get local LID: port {} of {} has LID 0 (is the subnet manager running?)",
            o.ib_port,
            ctx.name()
        )
        .into());
    }
    let gid = match o.gid_idx {
        Some(i) => {
            ctx.query_gid(u32::from(o.ib_port), i)
                .map_err(|e| format!("can't read sgid of index {i}: {e}"))?
                .gid
        }
        None => Gid::default(),
    };
    let my_psn = random_psn();
    let me = Dest {
        lid: port.lid,
        qpn: qp.qp_num(),
        psn: my_psn,
        gid,
    };
    writeln!(out, "  local address:  {me}")?;
    out.flush()?;

    let rem = match &o.server {
        Some(host) => {
            let mut s = connect(host, o.port)?;
            client_exchange(&mut s, &format!("{host}:{}", o.port), &me).map_err(|e| {
                let hint = if e.kind() == io::ErrorKind::UnexpectedEof
                    && port.link_layer == LinkLayer::ETHERNET
                    && o.gid_idx.is_none()
                {
                    " (did the server fail to connect its QP? RoCE needs -g <GID index> on \
                     both sides)"
                } else {
                    ""
                };
                format!("{e}{hint}")
            })?
        }
        None => {
            let l = listen(o.port)?;
            // Like the C tool, the server waits for its client as long as it takes.
            let (mut s, peer) = l
                .accept()
                .map_err(|e| format!("accept() on port {} failed: {e}", o.port))?;
            drop(l);
            server_exchange(&mut s, &peer.to_string(), &me, |rem| {
                connect_qp(&qp, o, my_psn, rem, port.link_layer)
                    .map_err(|e| format!("Couldn't connect to remote QP: {e}").into())
            })?
        }
    };
    writeln!(out, "  remote address: {rem}")?;
    out.flush()?;
    if o.server.is_some() {
        connect_qp(&qp, o, my_psn, &rem, port.link_layer)?;
    }

    pp.pending = RECV_WRID;
    if o.server.is_some() {
        if o.chk {
            // ibv_rc_pingpong writes `i / page_size % sizeof(char)` at the start of every
            // page, which is always 0: the server checks those bytes after the run (the
            // buffer started as 0x7b, so they must have been received).
            for i in (0..size).step_by(page) {
                mr.write_at(i, &[0]);
            }
        }
        pp.post_send()?;
        pp.pending |= SEND_WRID;
    }

    let start = Instant::now();
    // Polled with `poll_raw`: completions are copied out undecoded and only their status and
    // wr_id read (the fastest path; `Cq::poll` would decode every field).
    let mut wc = [RawWc::default(); 2];
    // CQ polls and completion events, for RVERBS_PINGPONG_STATS (docs/perf.md uses them to
    // separate waiting from work in instruction counts).
    let mut polls: u64 = 0;
    let mut events: u64 = 0;
    if let Some(ch) = &channel {
        // One read(2) per event, like the C tool; the watchdog bounds the wait.
        ch.set_blocking(true)?;
        let watchdog = Watchdog::start(o.iters, idle)?;
        while !pp.done() {
            // Sleep on the channel, take the event, acknowledge it, re-arm, then poll once,
            // as ibv_rc_pingpong does.
            cq.wait_event()
                .map_err(|e| format!("Failed to get cq_event: {e}"))?;
            cq.ack_events(1);
            events += 1;
            cq.req_notify(false)
                .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
            let n = cq.poll_raw(&mut wc);
            polls += 1;
            for w in &wc[..n] {
                pp.completion(w)?;
            }
            watchdog.progress(pp.scnt, pp.rcnt);
        }
        drop(watchdog);
    } else {
        // Spin on the CQ. After SPINS_PER_CLOCK_CHECK empty polls in a row, look back: no
        // completion since the last look starts (or continues) the idle clock.
        let cq: &Cq = &cq;
        let mut progressed = true;
        let mut idle_since: Option<Instant> = None;
        while !pp.done() {
            let n = 'spin: loop {
                for _ in 0..SPINS_PER_CLOCK_CHECK {
                    let n = cq.poll_raw(&mut wc);
                    polls += 1;
                    if n != 0 {
                        break 'spin n;
                    }
                }
                if progressed {
                    progressed = false;
                    idle_since = None;
                } else {
                    let now = Instant::now();
                    match idle_since {
                        None => idle_since = Some(now),
                        Some(t) if now.duration_since(t) >= idle => return Err(pp.idle_error(idle)),
                        Some(_) => {}
                    }
                }
            };
            progressed = true;
            for w in &wc[..n] {
                pp.completion(w)?;
            }
        }
    }
    let elapsed = start.elapsed();

    let summary = Summary {
        bytes: u64::from(o.size) * u64::from(o.iters) * 2,
        usec: (elapsed.as_secs_f64() * 1e6).max(1.0),
        iters: o.iters,
    };
    write!(out, "{summary}")?;
    if std::env::var_os("RVERBS_PINGPONG_STATS").is_some() {
        eprintln!("rc-pingpong stats: {polls} CQ polls, {events} completion events");
        if pad != 0 {
            eprintln!("rc-pingpong stats: {} padding polls", pp.padded);
        }
    }
    let mut bad_pages = 0;
    if o.server.is_none() && o.chk {
        let b = mr.to_vec();
        for i in (0..size).step_by(page) {
            if b[i] != 0 {
                writeln!(out, "invalid data in page {}", i / page)?;
                bad_pages += 1;
            }
        }
    }
    out.flush()?;
    // Teardown in the C tool's order: QP, CQ, MR, PD, channel, context.
    drop(qp);
    drop(cq);
    drop(mr);
    drop(pd);
    drop(channel);
    drop(ctx);
    if bad_pages > 0 {
        return Err(format!("buffer check failed: {bad_pages} page(s) had invalid data").into());
    }
    Ok(summary)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    fn err(s: &[&str]) -> String {
        parse(args(s)).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_the_c_tools() {
        let o = parse(vec![]).unwrap();
        assert_eq!(o, Opts::default());
        assert_eq!(
            (o.port, o.ib_port, o.size, o.mtu, o.rx_depth, o.iters, o.sl),
            (18515, 1, 4096, Mtu::MTU_1024, 500, 1000, 0)
        );
        assert_eq!(
            (o.server, o.gid_idx, o.events, o.chk),
            (None, None, false, false)
        );
    }

    #[test]
    fn every_option_short_and_long() {
        let o = parse(args(&[
            "-p",
            "9000",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-s",
            "64",
            "-m",
            "2048",
            "-r",
            "10",
            "-n",
            "0x10",
            "-l",
            "3",
            "-e",
            "-g",
            "1",
            "-c",
            "10.10.0.1",
        ]))
        .unwrap();
        let want = Opts {
            server: Some("10.10.0.1".into()),
            port: 9000,
            ib_dev: Some("rxe0".into()),
            ib_port: 1,
            size: 64,
            mtu: Mtu::MTU_2048,
            rx_depth: 10,
            iters: 16,
            sl: 3,
            events: true,
            gid_idx: Some(1),
            chk: true,
            help: false,
        };
        assert_eq!(o, want);
        let o = parse(args(&[
            "--port=9000",
            "--ib-dev",
            "rxe0",
            "--ib-port=1",
            "--size=64",
            "--mtu=2048",
            "--rx-depth=10",
            "--iters=16",
            "--sl=3",
            "--events",
            "--gid-idx=1",
            "--chk",
            "10.10.0.1",
        ]))
        .unwrap();
        assert_eq!(o, want);
        // Clustered short flags and attached values, as getopt takes them.
        let o = parse(args(&["-ecg1", "-s64", "host"])).unwrap();
        assert_eq!(
            (o.events, o.chk, o.gid_idx, o.size),
            (true, true, Some(1), 64)
        );
        assert_eq!(parse(args(&["-g", "-1"])).unwrap().gid_idx, None);
        assert!(parse(args(&["-h"])).unwrap().help);
    }

    #[test]
    fn refuses_bad_values_by_name() {
        assert!(err(&["-s", "abc"]).contains("-s \"abc\": not a number"));
        assert!(err(&["-s", "0"]).contains("-s 0: the size must be in 1..="));
        assert!(err(&["-p", "70000"]).contains("-p 70000"));
        assert!(err(&["-i", "0"]).contains("-i 0"));
        assert!(err(&["-m", "1000"]).contains("256, 512, 1024, 2048 or 4096"));
        assert!(err(&["-n", "0"]).contains("-n 0"));
        assert!(err(&["-n", "12x"]).contains("not a number"));
        assert!(err(&["-l", "16"]).contains("-l 16"));
        assert!(err(&["-g", "-2"]).contains("-g -2"));
        assert!(err(&["-r", "0"]).contains("-r 0"));
        assert!(err(&["a", "b"]).contains("one server host at most, got 2: a b"));
        assert!(err(&["-x"]).contains("-x"));
        assert!(
            err(&["-s"]).contains("missing argument"),
            "{}",
            err(&["-s"])
        );
    }

    #[test]
    fn names_the_unsupported_c_options() {
        for (s, l, what) in UNSUPPORTED {
            let e = err(&[&format!("-{s}")]);
            assert!(e.contains(&format!("-{s}/--{l}")), "{e}");
            assert!(e.contains(what), "{e}");
            assert!(e.contains("not supported"), "{e}");
            let e = err(&[&format!("--{l}")]);
            assert!(e.contains(&format!("-{s}/--{l}")), "{e}");
        }
    }

    #[test]
    fn c_numbers() {
        assert_eq!(parse_c_int("4096"), Some(4096));
        assert_eq!(parse_c_int("0x1000"), Some(4096));
        assert_eq!(parse_c_int("010"), Some(8));
        assert_eq!(parse_c_int("0"), Some(0));
        assert_eq!(parse_c_int("-1"), Some(-1));
        assert_eq!(parse_c_int(""), None);
        assert_eq!(parse_c_int("0x"), None);
        assert_eq!(parse_c_int("12 3"), None);
        assert_eq!(parse_c_int("09"), None);
    }

    fn roce_dest() -> Dest {
        Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::parse("::ffff:10.10.0.1").unwrap(),
        }
    }

    #[test]
    fn message_is_the_c_tools_bytes() {
        let m = encode_dest(&roce_dest());
        assert_eq!(m.len(), 52);
        assert_eq!(
            &m[..51],
            b"0000:000011:abcdef:00000000000000000000ffff0a0a0001"
        );
        assert_eq!(m[51], 0);
        // IB-style: a LID, no GID.
        let d = Dest {
            lid: 0x1f,
            qpn: 0xfffffe,
            psn: 0,
            gid: Gid::default(),
        };
        assert_eq!(
            &encode_dest(&d)[..],
            &b"001f:fffffe:000000:00000000000000000000000000000000\0"[..]
        );
    }

    #[test]
    fn message_round_trips_and_parses_c_output() {
        let d = roce_dest();
        assert_eq!(decode_dest(&encode_dest(&d)).unwrap(), d);
        // The form of ibv_rc_pingpong's sprintf for a link-local GID (NUL included), and a
        // reader that stops at the NUL.
        let c = b"0000:000012:5f0c3a:fe80000000000000505400fffe123456\0";
        let d = decode_dest(c).unwrap();
        assert_eq!((d.lid, d.qpn, d.psn), (0, 0x12, 0x5f0c3a));
        assert_eq!(d.gid.to_string(), "fe80::5054:ff:fe12:3456");
        assert_eq!(
            wire_to_gid("00000000000000000000FFFF0A0A0001").unwrap(),
            roce_dest().gid
        );
        assert_eq!(
            std::str::from_utf8(&gid_to_wire(&roce_dest().gid)).unwrap(),
            "00000000000000000000ffff0a0a0001"
        );
    }

    #[test]
    fn bad_messages_say_what_is_wrong() {
        let e = decode_dest(b"0000:000011\0").unwrap_err();
        assert!(e.contains("no PSN"), "{e}");
        let e = decode_dest(b"0000:zz:000001:00000000000000000000ffff0a0a0001\0").unwrap_err();
        assert!(e.contains("QPN \"zz\""), "{e}");
        let e = decode_dest(b"0000:000011:1000000:00000000000000000000ffff0a0a0001\0").unwrap_err();
        assert!(e.contains("PSN"), "{e}");
        let e = decode_dest(b"0000:000011:000001:ffff0a0a0001\0").unwrap_err();
        assert!(e.contains("not 32 hex digits"), "{e}");
        let e = decode_dest(&[0xff; 52]).unwrap_err();
        assert!(e.contains("not text"), "{e}");
    }

    #[test]
    fn address_lines_match_the_c_format() {
        assert_eq!(
            roce_dest().to_string(),
            "LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:10.10.0.1"
        );
        let s = Summary {
            bytes: 64 * 1000 * 2,
            usec: 250_000.0,
            iters: 1000,
        };
        assert_eq!(
            s.to_string(),
            "128000 bytes in 0.25 seconds = 4.10 Mbit/sec\n\
             1000 iters in 0.25 seconds = 250.00 usec/iter\n"
        );
    }

    /// The TCP exchange between our client and our server over loopback, with a fake QP
    /// connect that records the order of events.
    #[test]
    fn exchange_over_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server_me = Dest {
            qpn: 0x22,
            ..roce_dest()
        };
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut connected = None;
            let rem = server_exchange(&mut s, "client", &server_me, |r| {
                connected = Some(*r);
                Ok(())
            })
            .unwrap();
            assert_eq!(connected, Some(rem));
            rem
        });
        let mut s = connect("127.0.0.1", port).unwrap();
        let client_me = roce_dest();
        let got = client_exchange(&mut s, "server", &client_me).unwrap();
        assert_eq!(got, server_me);
        assert_eq!(t.join().unwrap(), client_me);
    }

    #[test]
    fn exchange_errors() {
        // The peer closes after part of its message.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut m = [0u8; MSG_LEN];
            s.read_exact(&mut m).unwrap();
            s.write_all(b"0000:0000").unwrap();
        });
        let mut s = connect("127.0.0.1", port).unwrap();
        let e = client_exchange(&mut s, "srv", &roce_dest()).unwrap_err();
        assert!(
            e.to_string().contains(
                "srv closed the connection after 9 of the 52 bytes of the remote address"
            ),
            "{e}"
        );
        t.join().unwrap();
        // Nobody listens.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = connect("127.0.0.1", port).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("couldn't connect to 127.0.0.1:{port}")),
            "{e}"
        );
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }
}
