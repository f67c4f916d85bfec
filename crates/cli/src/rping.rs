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

#![allow(unsafe_code)] // posting work requests hands buffers to the device

use std::ffi::OsString;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::Duration;

use rverbs::cm::verbs::{Endpoint, EndpointAttr, UserCqs};
use rverbs::cm::{
    getaddrinfo, AddrHints, CmEvent, CmEventKind, CmId, ConnParam, PortSpace, QpState as CmQpState,
};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::mr::{AccessFlags, Mr};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{self as vqp, Qp, QpInit};
use rverbs::uverbs::{
    MrSge, RecvWr, SendFlags, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

use crate::{usage_err, CmdResult};

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

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// `Some(true)` server, `Some(false)` client.
    pub server: Option<bool>,
    pub addr: Option<String>,
    pub src: Option<String>,
    pub port: u16,
    pub count: u32,
    pub size: u32,
    pub verbose: bool,
    pub validate: bool,
    pub debug: bool,
    pub persistent: bool,
    pub self_qp: bool,
    pub help: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            server: None,
            addr: None,
            src: None,
            port: DEFAULT_PORT,
            count: 0,
            size: 64,
            verbose: false,
            validate: false,
            debug: false,
            persistent: false,
            self_qp: false,
            help: false,
        }
    }
}

fn number(opt: &str, s: &str) -> Result<i64, Box<dyn std::error::Error>> {
    crate::rc_pingpong::parse_c_int(s)
        .ok_or_else(|| usage_err(format!("-{opt} {s:?}: not a number")))
}

/// Parses the arguments after `rping` (getopt style: clustered flags, attached values).
pub fn parse(args: Vec<OsString>) -> Result<Opts, Box<dyn std::error::Error>> {
    use lexopt::prelude::*;
    let mut o = Opts::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Short('a') => o.addr = Some(p.value()?.string()?),
            Short('I') => o.src = Some(p.value()?.string()?),
            Short('P') => o.persistent = true,
            Short('p') => {
                let v = number("p", &p.value()?.string()?)?;
                o.port = u16::try_from(v)
                    .map_err(|_| usage_err(format!("-p {v}: the port must be in 0..=65535")))?;
            }
            Short('C') => {
                let v = number("C", &p.value()?.string()?)?;
                o.count = u32::try_from(v)
                    .ok()
                    .filter(|&c| c <= i32::MAX as u32)
                    .ok_or_else(|| usage_err(format!("Invalid count {v}")))?;
            }
            Short('S') => {
                let v = number("S", &p.value()?.string()?)?;
                o.size = u32::try_from(v)
                    .ok()
                    .filter(|s| (MIN_SIZE..BUFSIZE).contains(s))
                    .ok_or_else(|| {
                        usage_err(format!(
                            "Invalid size {v} (valid range is {MIN_SIZE} to {})",
                            BUFSIZE - 1
                        ))
                    })?;
            }
            Short('s') => o.server = Some(true),
            Short('c') => o.server = Some(false),
            Short('v') => o.verbose = true,
            Short('V') => o.validate = true,
            Short('d') => o.debug = true,
            Short('q') => o.self_qp = true,
            Short('h') | Long("help") => o.help = true,
            Short('t') => {
                return Err(usage_err(
                    "option -t is not supported (rping v44 lists it in its option string but \
                     rejects it too)",
                ))
            }
            Value(v) => {
                return Err(usage_err(format!(
                    "unexpected argument {:?} (the address goes after -a)",
                    v.to_string_lossy()
                )))
            }
            other => return Err(other.unexpected().into()),
        }
    }
    if o.help {
        return Ok(o);
    }
    match o.server {
        None => return Err(usage_err("choose a side: -s (server) or -c (client)")),
        Some(false) if o.addr.is_none() => {
            return Err(usage_err("the client needs the server's address: -a ADDR"))
        }
        Some(false) if o.persistent => {
            return Err(usage_err(
                "-P (persistent server) is for the server side (-s)",
            ))
        }
        _ => {}
    }
    Ok(o)
}

// ---------------------------------------------------------------------------------------------
// Wire format and the ping pattern
// ---------------------------------------------------------------------------------------------

/// `struct rping_rdma_info`: a buffer's address, rkey and size, all big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaInfo {
    pub buf: u64,
    pub rkey: u32,
    pub size: u32,
}

impl RdmaInfo {
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        b[0..8].copy_from_slice(&self.buf.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; INFO_LEN]) -> Self {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Self {
            buf: u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
            rkey: u32_at(8),
            size: u32_at(12),
        }
    }
}

/// Fills `buf` as the C client does for ping number `ping`, whose characters start at
/// `start` (65 'A' ..= 122 'z'): `"rdma-ping-N: "`, then `start`, `start+1`, … wrapping from
/// 'z' to 'A', and a NUL in the last byte.
pub fn fill_ping(buf: &mut [u8], ping: u32, start: u8) {
    let head = format!("rdma-ping-{}: ", ping as i32);
    let n = head.len().min(buf.len());
    buf[..n].copy_from_slice(&head.as_bytes()[..n]);
    let mut c = start;
    for b in &mut buf[n..] {
        *b = c;
        c += 1;
        if c > 122 {
            c = 65;
        }
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
}

/// The first character of ping `ping + 1`, given ping `ping`'s.
pub fn next_start(start: u8) -> u8 {
    if start >= 122 {
        65
    } else {
        start + 1
    }
}

/// The C string at the start of `buf` (up to the first NUL, or all of it).
pub fn c_str(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

// ---------------------------------------------------------------------------------------------
// The connection
// ---------------------------------------------------------------------------------------------

/// rping's `enum test_state`, numbered as in C (the numbers appear in its messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum State {
    Idle = 1,
    ConnectRequest,
    #[allow(dead_code)] // a synchronous id resolves without passing through these
    AddrResolved,
    #[allow(dead_code)]
    RouteResolved,
    Connected,
    RdmaReadAdv,
    RdmaReadComplete,
    RdmaWriteAdv,
    RdmaWriteComplete,
    Disconnected,
    Error,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Idle => "IDLE",
            State::ConnectRequest => "CONNECT_REQUEST",
            State::AddrResolved => "ADDR_RESOLVED",
            State::RouteResolved => "ROUTE_RESOLVED",
            State::Connected => "CONNECTED",
            State::RdmaReadAdv => "RDMA_READ_ADV",
            State::RdmaReadComplete => "RDMA_READ_COMPLETE",
            State::RdmaWriteAdv => "RDMA_WRITE_ADV",
            State::RdmaWriteComplete => "RDMA_WRITE_COMPLETE",
            State::Disconnected => "DISCONNECTED",
            State::Error => "ERROR",
        }
    }
}

macro_rules! debug_log {
    ($o:expr, $($t:tt)*) => {
        if $o.debug {
            println!($($t)*);
        }
    };
}

/// The QP: made by the rdma_cm helpers on the id (rping's default) or by rping itself (`-q`).
enum Link {
    Cm(Endpoint<UserCqs>),
    Own { qp: Arc<Qp>, id: CmId },
}

impl Link {
    fn id(&self) -> &CmId {
        match self {
            Link::Cm(ep) => ep.id(),
            Link::Own { id, .. } => id,
        }
    }

    fn qp_num(&self) -> u32 {
        match self {
            Link::Cm(ep) => ep.qp_num(),
            Link::Own { qp, .. } => qp.qp_num(),
        }
    }

    fn post_send(&self, op: SendOp, sge: &[MrSge<'_>]) -> io::Result<()> {
        let flags = SendFlags::SIGNALED;
        match self {
            Link::Cm(ep) => match op {
                SendOp::RdmaRead { remote_addr, rkey } => {
                    ep.post_read(0, sge, remote_addr, rkey, flags)
                }
                SendOp::RdmaWrite { remote_addr, rkey } => {
                    ep.post_write(0, sge, remote_addr, rkey, flags)
                }
                _ => ep.post_send(0, sge, flags),
            },
            Link::Own { qp, .. } => qp
                .post_send(&[SendWr {
                    wr_id: 0,
                    op,
                    sge,
                    flags,
                    ud: None,
                }])
                .map_err(io::Error::from),
        }
    }

    fn post_recv(&self, sge: &[MrSge<'_>]) -> io::Result<()> {
        match self {
            Link::Cm(ep) => ep.post_recv(0, sge),
            Link::Own { qp, .. } => qp
                .post_recv(&[RecvWr { wr_id: 0, sge }])
                .map_err(io::Error::from),
        }
    }

    fn param(&self) -> ConnParam {
        // rping_init_conn_param: 1 outstanding RDMA READ each way, retries 7; the QP number
        // only with a self-created QP (the helpers fill it in otherwise).
        ConnParam {
            responder_resources: Some(1),
            initiator_depth: Some(1),
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: match self {
                Link::Own { qp, .. } => qp.qp_num(),
                Link::Cm(_) => 0,
            },
            ..ConnParam::default()
        }
    }

    fn self_modify(qp: &Qp, id: &CmId) -> io::Result<()> {
        for s in [CmQpState::INIT, CmQpState::RTR, CmQpState::RTS] {
            qp.modify(&id.init_qp_attr(s)?)?;
        }
        Ok(())
    }

    fn connect(&self) -> io::Result<()> {
        let p = self.param();
        match self {
            Link::Cm(ep) => ep.connect(&p),
            Link::Own { qp, id } => id.connect_with(&p, |id, _| Self::self_modify(qp, id)),
        }
    }

    fn accept(&self) -> io::Result<()> {
        match self {
            // rping accepts with librdmacm's defaults unless it made the QP itself.
            Link::Cm(ep) => ep.accept(&ConnParam::default()),
            Link::Own { qp, id } => {
                Self::self_modify(qp, id)?;
                id.accept(&self.param())
            }
        }
    }

    fn disconnect(&self) -> io::Result<()> {
        match self {
            Link::Cm(ep) => ep.disconnect(),
            Link::Own { qp, id } => {
                qp.modify(&vqp::QpAttr {
                    qp_state: Some(vqp::QpState::ERR),
                    ..Default::default()
                })?;
                id.disconnect()
            }
        }
    }
}

/// One connection's control block (`struct rping_cb`). Field order is drop order: the QP
/// goes before the memory it may access.
struct Cb<'o> {
    link: Link,
    recv_mr: Mr<Box<[u8]>>,
    send_mr: Mr<Box<[u8]>>,
    rdma_mr: Mr<Box<[u8]>>,
    start_mr: Option<Mr<Box<[u8]>>>,
    cq: Arc<Cq>,
    channel: Arc<CompChannel>,
    o: &'o Opts,
    server: bool,
    state: State,
    /// rping's semaphore: posts not yet waited for.
    sem: u32,
    armed: bool,
    remote: RdmaInfo,
}

fn os_err(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl<'o> Cb<'o> {
    /// `rping_setup_qp` + `rping_setup_buffers`: PD, one completion channel, one CQ of 32
    /// entries for sends and receives (armed), the QP (16 sends, 2 receives, 1 SGE), and the
    /// buffers: 16-byte receive and send messages, the RDMA buffer (and the client's start
    /// buffer) of `-S` bytes.
    fn setup(o: &'o Opts, id: CmId, server: bool) -> io::Result<Cb<'o>> {
        let dev = id
            .query_addr()
            .and_then(|q| q.ib_device_name())
            .map_err(|e| os_err("setup_qp failed: find the id's RDMA device", e))?;
        let ctx = rverbs::provider::open_by_name(&dev)
            .map_err(|e| os_err(&format!("setup_qp failed: open {dev}"), e))?;
        let pd = Pd::alloc(&ctx).map_err(|e| os_err("ibv_alloc_pd failed", e))?;
        debug_log!(o, "created pd {}", pd.handle());
        let channel =
            CompChannel::create(&ctx).map_err(|e| os_err("ibv_create_comp_channel failed", e))?;
        debug_log!(o, "created channel {}", channel.as_fd().as_raw_fd());
        let cq = Cq::create(
            &ctx,
            SQ_DEPTH * 2,
            CqOptions {
                channel: Some(channel.clone()),
                comp_vector: 0,
            },
        )
        .map_err(|e| os_err("ibv_create_cq failed", e))?;
        debug_log!(o, "created cq {}", cq.handle());
        cq.req_notify(false)
            .map_err(|e| os_err("ibv_req_notify_cq failed", e))?;
        let caps = QpCaps {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let link = if o.self_qp {
            let port = id.query_addr().map(|q| q.port_num).unwrap_or(1);
            let qp =
                Qp::create(&pd, QpInit::rc(&cq, caps)).map_err(|e| os_err("ibv_create_qp", e))?;
            qp.modify(&vqp::QpAttr {
                qp_state: Some(vqp::QpState::INIT),
                pkey_index: Some(0),
                port_num: Some(port),
                access_flags: Some(AccessFlags::empty()),
                ..Default::default()
            })
            .map_err(|e| os_err("ibv_modify_qp", e))?;
            Link::Own { qp, id }
        } else {
            let attr = EndpointAttr {
                caps,
                sq_sig_all: false,
            };
            Link::Cm(
                Endpoint::with_cqs(id, &pd, &cq, &cq, &attr)
                    .map_err(|e| os_err("rdma_create_qp", e))?,
            )
        };
        debug_log!(o, "created qp {:#x}", link.qp_num());
        let reg = |len: usize, access: AccessFlags, what: &str| {
            Mr::register(&pd, vec![0u8; len].into_boxed_slice(), access)
                .map_err(|e| os_err(&format!("{what} reg_mr failed"), e))
        };
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let size = o.size as usize;
        let recv_mr = reg(INFO_LEN, AccessFlags::LOCAL_WRITE, "recv_buf")?;
        let send_mr = reg(INFO_LEN, AccessFlags::empty(), "send_buf")?;
        let rdma_mr = reg(size, rw, "rdma_buf")?;
        let start_mr = if server {
            None
        } else {
            Some(reg(size, rw, "start_buf")?)
        };
        debug_log!(o, "allocated & registered buffers...");
        Ok(Cb {
            link,
            recv_mr,
            send_mr,
            rdma_mr,
            start_mr,
            cq,
            channel,
            o,
            server,
            state: State::Idle,
            sem: 0,
            armed: true,
            remote: RdmaInfo {
                buf: 0,
                rkey: 0,
                size: 0,
            },
        })
    }

    fn post_recv(&self) -> io::Result<()> {
        let sge = [self.recv_mr.sge(0..INFO_LEN)];
        self.link.post_recv(&sge)
    }

    fn post_info_send(&self) -> io::Result<()> {
        let sge = [self.send_mr.sge(0..INFO_LEN)];
        self.link.post_send(SendOp::Send, &sge)
    }

    /// `rping_format_send`: advertises the client's start or sink buffer.
    fn format_send(&mut self, sink: bool) {
        let mr = if sink {
            &self.rdma_mr
        } else {
            self.start_mr.as_ref().expect("client has a start buffer")
        };
        let info = RdmaInfo {
            buf: mr.addr(),
            rkey: mr.rkey(),
            size: self.o.size,
        };
        debug_log!(
            self.o,
            "RDMA addr {:x} rkey {:x} len {}",
            info.buf,
            info.rkey,
            info.size
        );
        self.send_mr.write_at(0, &info.encode());
    }

    // --- completions and events ----------------------------------------------------------

    fn on_recv(&mut self, wc: &WorkCompletion) -> io::Result<()> {
        if wc.byte_len as usize != INFO_LEN {
            return Err(io::Error::other(format!(
                "Received bogus data, size {}",
                wc.byte_len
            )));
        }
        if self.server {
            let mut b = [0u8; INFO_LEN];
            self.recv_mr.read_at(0, &mut b);
            self.remote = RdmaInfo::decode(&b);
            debug_log!(
                self.o,
                "Received rkey {:x} addr {:x} len {} from peer",
                self.remote.rkey,
                self.remote.buf,
                self.remote.size
            );
            self.state = if self.state <= State::Connected || self.state == State::RdmaWriteComplete
            {
                State::RdmaReadAdv
            } else {
                State::RdmaWriteAdv
            };
        } else {
            self.state = if self.state == State::RdmaReadAdv {
                State::RdmaWriteAdv
            } else {
                State::RdmaWriteComplete
            };
        }
        Ok(())
    }

    /// `rping_cq_event_handler` for one completion: flushes are skipped, other errors end
    /// the run; receives are re-posted after their content was taken.
    fn on_completion(&mut self, wc: &WorkCompletion) -> io::Result<()> {
        if !wc.status.is_success() {
            if wc.status == WcStatus::WR_FLUSH_ERR {
                return Ok(());
            }
            self.state = State::Error;
            return Err(io::Error::other(format!(
                "cq completion failed status {} ({})",
                wc.status.0, wc.status
            )));
        }
        match wc.opcode {
            WcOpcode::SEND => debug_log!(self.o, "send completion"),
            WcOpcode::RDMA_WRITE => {
                debug_log!(self.o, "rdma write completion");
                self.state = State::RdmaWriteComplete;
                self.sem += 1;
            }
            WcOpcode::RDMA_READ => {
                debug_log!(self.o, "rdma read completion");
                self.state = State::RdmaReadComplete;
                self.sem += 1;
            }
            WcOpcode::RECV => {
                debug_log!(self.o, "recv completion");
                self.on_recv(wc).map_err(|e| os_err("recv wc error", e))?;
                self.post_recv().map_err(|e| os_err("post recv error", e))?;
                self.sem += 1;
            }
            other => {
                self.state = State::Error;
                return Err(io::Error::other(format!(
                    "unexpected completion opcode {other}"
                )));
            }
        }
        Ok(())
    }

    fn on_cm_event(&mut self, ev: &CmEvent) {
        let kind = ev.kind();
        debug_log!(
            self.o,
            "cma_event type RDMA_CM_EVENT_{} cma_id {} ({})",
            kind,
            ev.id_handle(),
            if self.server { "child" } else { "parent" }
        );
        match kind {
            CmEventKind::DISCONNECTED => {
                eprintln!(
                    "{} DISCONNECT EVENT...",
                    if self.server { "server" } else { "client" }
                );
                self.state = State::Disconnected;
                self.sem += 1;
            }
            CmEventKind::DEVICE_REMOVAL => {
                eprintln!("cma detected device removal!!!!");
                self.state = State::Error;
                self.sem += 1;
            }
            CmEventKind::ADDR_ERROR
            | CmEventKind::ROUTE_ERROR
            | CmEventKind::CONNECT_ERROR
            | CmEventKind::UNREACHABLE
            | CmEventKind::REJECTED => {
                eprintln!("cma event RDMA_CM_EVENT_{kind}, error {}", ev.status());
                self.state = State::Error;
                self.sem += 1;
            }
            CmEventKind::ESTABLISHED => {
                if !self.server {
                    self.state = State::Connected;
                }
                self.sem += 1;
            }
            other => eprintln!("unhandled event: RDMA_CM_EVENT_{other}, ignoring"),
        }
    }

    /// Handles what is ready; sleeps on the CQ channel and the rdma_cm fd when nothing is.
    fn progress(&mut self) -> io::Result<()> {
        let mut wcs = [WorkCompletion::default(); 4];
        let n = self.cq.poll(&mut wcs);
        if n > 0 {
            for wc in &wcs[..n] {
                self.on_completion(wc)?;
            }
            return Ok(());
        }
        if !self.armed {
            self.cq
                .req_notify(false)
                .map_err(|e| os_err("Failed to set notify", e))?;
            self.armed = true;
            // A completion that came before the arm raised no event: poll again.
            return Ok(());
        }
        use rustix::event::{poll, PollFd, PollFlags};
        let cm_fd = self.link.id().channel_fd();
        let mut fds = [
            PollFd::new(&*self.channel, PollFlags::IN),
            PollFd::new(&cm_fd, PollFlags::IN),
        ];
        let ts = rustix::time::Timespec {
            tv_sec: IDLE_TIMEOUT.as_secs() as _,
            tv_nsec: 0,
        };
        let ready = match poll(&mut fds, Some(&ts)) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(os_err("poll for completions and rdma_cm events", e)),
        };
        if ready == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no completion and no rdma_cm event for {} s while in state {} ({}): the \
                     peer is gone or cannot reach us",
                    IDLE_TIMEOUT.as_secs(),
                    self.state.name(),
                    self.state as u32
                ),
            ));
        }
        let (cq_ready, cm_ready) = (!fds[0].revents().is_empty(), !fds[1].revents().is_empty());
        if cq_ready {
            self.cq
                .wait_event()
                .map_err(|e| os_err("Failed to get cq event", e))?;
            self.cq.ack_events(1);
            self.armed = false;
        }
        if cm_ready {
            // The channel's readiness protocol: take events until none is left.
            loop {
                match self.link.id().try_next_event() {
                    Ok(Some(ev)) => self.on_cm_event(&ev),
                    Ok(None) => break,
                    Err(e) => return Err(os_err("rdma_get_cm_event", e)),
                }
            }
        }
        Ok(())
    }

    /// `sem_wait`: returns once a completion or event posted the semaphore.
    fn sem_wait(&mut self) -> io::Result<()> {
        while self.sem == 0 {
            self.progress()?;
        }
        self.sem -= 1;
        Ok(())
    }

    /// `sem_wait` and the check that follows it in rping: `Ok(true)` when the state is
    /// `want`, `Ok(false)` when it is another (see `self.state`).
    fn wait_for(&mut self, want: State) -> io::Result<bool> {
        self.sem_wait()?;
        Ok(self.state == want)
    }

    /// The error for a wait that ended in another state than `want` (rping's message, and
    /// what the state means).
    fn unexpected(&self, want: State) -> io::Error {
        let s = self.state;
        let mut msg = format!("wait for {} state {} ({})", want.name(), s as u32, s.name());
        if s == State::Disconnected {
            msg += if self.server {
                ": the client disconnected"
            } else {
                ": the server disconnected"
            };
        }
        io::Error::other(msg)
    }

    // --- the two loops -----------------------------------------------------------------

    /// `rping_test_server`: serves pings until the client disconnects (`Ok`, wherever in a
    /// ping it happens, as rping: the client decides when the run ends) or something fails.
    fn test_server(&mut self, out: &mut impl Write) -> io::Result<()> {
        match self.serve_pings(out) {
            Err(_) if self.state == State::Disconnected => Ok(()),
            r => r,
        }
    }

    fn serve_pings(&mut self, out: &mut impl Write) -> io::Result<()> {
        loop {
            if !self.wait_for(State::RdmaReadAdv)? {
                if self.state == State::Disconnected {
                    return Ok(());
                }
                return Err(self.unexpected(State::RdmaReadAdv));
            }
            debug_log!(self.o, "server received sink adv");
            let len = self.remote.size;
            if len > self.o.size {
                return Err(io::Error::other(format!(
                    "the client advertised a {len}-byte buffer, larger than this server's \
                     {} bytes: run the server with -S {len} or more",
                    self.o.size
                )));
            }
            let sge = [self.rdma_mr.sge(0..len as usize)];
            let op = SendOp::RdmaRead {
                remote_addr: self.remote.buf,
                rkey: self.remote.rkey,
            };
            self.link
                .post_send(op, &sge)
                .map_err(|e| os_err("post send error", e))?;
            debug_log!(self.o, "server posted rdma read req ");
            if !self.wait_for(State::RdmaReadComplete)? {
                return Err(self.unexpected(State::RdmaReadComplete));
            }
            debug_log!(self.o, "server received read complete");
            if self.o.verbose {
                out.write_all(b"server ping data: ")?;
                out.write_all(c_str(&self.rdma_mr.to_vec()))?;
                out.write_all(b"\n")?;
                out.flush()?;
            }
            self.post_info_send()
                .map_err(|e| os_err("post send error", e))?;
            debug_log!(self.o, "server posted go ahead");
            if !self.wait_for(State::RdmaWriteAdv)? {
                return Err(self.unexpected(State::RdmaWriteAdv));
            }
            debug_log!(self.o, "server received sink adv");
            // The string read, with its NUL (rping: strlen + 1), within our buffer.
            let len = (c_str(&self.rdma_mr.to_vec()).len() + 1).min(self.o.size as usize);
            let sge = [self.rdma_mr.sge(0..len)];
            debug_log!(
                self.o,
                "rdma write from lkey {:x} laddr {:x} len {}",
                sge[0].lkey,
                sge[0].addr,
                sge[0].length
            );
            let op = SendOp::RdmaWrite {
                remote_addr: self.remote.buf,
                rkey: self.remote.rkey,
            };
            self.link
                .post_send(op, &sge)
                .map_err(|e| os_err("post send error", e))?;
            if !self.wait_for(State::RdmaWriteComplete)? {
                return Err(self.unexpected(State::RdmaWriteComplete));
            }
            debug_log!(self.o, "server rdma write complete ");
            self.post_info_send()
                .map_err(|e| os_err("post send error", e))?;
            debug_log!(self.o, "server posted go ahead");
        }
    }

    /// The client's error for a wait that ended in another state than `want`.
    fn lost(&self, want: State, ping: u32) -> io::Error {
        if self.state != State::Disconnected {
            return self.unexpected(want);
        }
        let of = match self.o.count {
            0 => String::new(),
            n => format!(" of {n}"),
        };
        io::Error::other(format!(
            "the server disconnected during ping {ping}{of} (waiting for {})",
            want.name()
        ))
    }

    /// `rping_test_client`: `-C` pings (forever with 0).
    fn test_client(&mut self, out: &mut impl Write) -> io::Result<()> {
        let mut start = 65u8;
        let mut ping = 0u32;
        while self.o.count == 0 || ping < self.o.count {
            self.state = State::RdmaReadAdv;
            let size = self.o.size as usize;
            {
                let mut ping_buf = vec![0u8; size];
                fill_ping(&mut ping_buf, ping, start);
                self.start_mr
                    .as_ref()
                    .expect("client")
                    .write_at(0, &ping_buf);
            }
            start = next_start(start);
            self.format_send(false);
            self.post_info_send()
                .map_err(|e| os_err("post send error", e))?;
            if !self.wait_for(State::RdmaWriteAdv)? {
                return Err(self.lost(State::RdmaWriteAdv, ping));
            }
            self.format_send(true);
            self.post_info_send()
                .map_err(|e| os_err("post send error", e))?;
            if !self.wait_for(State::RdmaWriteComplete)? {
                return Err(self.lost(State::RdmaWriteComplete, ping));
            }
            let start_buf = self.start_mr.as_ref().expect("client").to_vec();
            let sink = self.rdma_mr.to_vec();
            if self.o.validate && start_buf[..size] != sink[..size] {
                return Err(io::Error::other(format!(
                    "data mismatch! (ping {ping}: the {size} bytes written back differ from \
                     those read)"
                )));
            }
            if self.o.verbose {
                out.write_all(b"ping data: ")?;
                out.write_all(c_str(&sink))?;
                out.write_all(b"\n")?;
                out.flush()?;
            }
            ping = ping.wrapping_add(1);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The two sides
// ---------------------------------------------------------------------------------------------

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
    fn options() {
        let o = parse(args(&["-s"])).unwrap();
        assert_eq!(
            (o.server, o.port, o.size, o.count, o.addr),
            (Some(true), 7174, 64, 0, None)
        );
        let o = parse(args(&[
            "-c",
            "-a",
            "10.10.0.1",
            "-p",
            "9000",
            "-C",
            "5",
            "-S",
            "1024",
            "-v",
            "-V",
            "-d",
            "-q",
            "-I",
            "10.10.0.2",
        ]))
        .unwrap();
        assert_eq!(
            o,
            Opts {
                server: Some(false),
                addr: Some("10.10.0.1".into()),
                src: Some("10.10.0.2".into()),
                port: 9000,
                count: 5,
                size: 1024,
                verbose: true,
                validate: true,
                debug: true,
                persistent: false,
                self_qp: true,
                help: false,
            }
        );
        // getopt style: clustered flags and attached values.
        let o = parse(args(&["-cvVC3", "-a10.10.0.1", "-S26"])).unwrap();
        assert_eq!(
            (o.count, o.size, o.verbose, o.validate),
            (3, 26, true, true)
        );
        let o = parse(args(&["-sP"])).unwrap();
        assert!(o.persistent);
        assert!(parse(args(&["-h"])).unwrap().help);
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        assert!(err(&[]).contains("-s (server) or -c (client)"));
        assert!(err(&["-c"]).contains("-a ADDR"));
        assert!(err(&["-s", "-p", "70000"]).contains("-p 70000"));
        assert!(err(&["-s", "-p", "x"]).contains("-p \"x\": not a number"));
        assert!(err(&["-s", "-S", "25"]).contains("Invalid size 25 (valid range is 26 to 65535)"));
        assert!(err(&["-s", "-S", "65536"]).contains("Invalid size 65536"));
        assert!(err(&["-s", "-C", "-1"]).contains("Invalid count -1"));
        assert!(err(&["-s", "-t", "5"]).contains("-t is not supported"));
        assert!(err(&["-s", "-x"]).contains("-x"));
        assert!(err(&["-s", "host"]).contains("unexpected argument \"host\""));
        assert!(err(&["-c", "-P", "-a", "h"]).contains("-P"));
        let e = err(&["-s", "-S"]);
        assert!(e.contains("missing argument"), "{e}");
    }

    #[test]
    fn info_is_big_endian() {
        let i = RdmaInfo {
            buf: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            size: 64,
        };
        let b = i.encode();
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]
        );
        assert_eq!(RdmaInfo::decode(&b), i);
    }

    #[test]
    fn ping_pattern_is_the_c_clients() {
        // What rping -v prints for the first pings at -S 64 (checked against the C tool).
        let mut b = vec![0xffu8; 64];
        fill_ping(&mut b, 0, 65);
        assert_eq!(
            c_str(&b),
            b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
        );
        assert_eq!(b[63], 0);
        let mut start = 65;
        for _ in 0..2 {
            start = next_start(start);
        }
        fill_ping(&mut b, 2, start);
        assert_eq!(
            c_str(&b),
            b"rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst"
        );
        // The characters wrap from 'z' to 'A', and so does the start.
        assert_eq!(next_start(122), 65);
        fill_ping(&mut b, 7, 120);
        assert_eq!(&c_str(&b)[13..18], b"xyzAB");
        // The smallest size still ends with a NUL.
        let mut s = vec![0u8; MIN_SIZE as usize];
        fill_ping(&mut s, 2_147_483_647, 65);
        assert_eq!(c_str(&s), b"rdma-ping-2147483647: ABC");
    }
}
