//! The data path on rxe (issue #4), in the VM: every send opcode with its payload checked, the
//! send flags, gather/scatter, lists of work requests, every ring wrapping and filling up, UD
//! with its GRH, SRQ, error completions, completion events and async events.
//!
//! Each test runs on two QPs of one device (loopback, `RVERBS_DEV_A` or `rxe0`) and, in the
//! two-node topology, between a QP on `RVERBS_DEV_A` and one on `RVERBS_DEV_B` (with
//! `RVERBS_TOPO=two` those must exist). Every wait is bounded: a hang is a failure.
//!
//! What Linux 6.1's rxe does where the verbs leave it to the device is asserted as measured in
//! the VM (the reason is at each assertion):
//! - a wrong lkey completes LOC_QP_OP_ERR (not LOC_PROT_ERR; 6.12: WR_FLUSH_ERR);
//! - a receive buffer too small: LOC_QP_OP_ERR at the receiver, REM_OP_ERR at the sender
//!   (not LOC_LEN_ERR / REM_INV_REQ_ERR);
//! - LOCAL_INV and SEND_WITH_INV cannot invalidate a user MR (only fast-registration MRs and
//!   memory windows): LOC_QP_OP_ERR, resp. REM_INV_REQ_ERR at the receiver with the SEND
//!   itself ACKed (success at the sender);
//! - rxe raises no QP_FATAL / QP_REQ_ERR / QP_ACCESS_ERR; it does raise SQ_DRAINED,
//!   SRQ_LIMIT_REACHED and CQ_ERR (overflow: the CQE is dropped, the QP goes on);
//! - create QP/SRQ answers the requested max_wr; the rings hold 2^n - 1 >= that, which query
//!   tells.
//!
//! The tests are grouped by topic, one module each: [`opcodes`], [`flags`] (signaling,
//! fence, inline, gather/scatter, lists), [`rings`] (wrapping, full queues and CQs), [`ud`],
//! [`srq`], [`errors`] (error completions), [`events`] (completion and async events),
//! [`threads`] (queues shared between threads), [`mw`] (memory windows), [`iova`] (a region
//! the device addresses at another iova), [`reset`] (a QP cycled through RESET). This file holds what they share: the
//! topologies, the connection of an RC pair, posting and polling helpers. One test binary
//! for all of them (each binary costs start-up time in every VM stage).

#[path = "../common/mod.rs"]
mod common;

mod errors;
mod events;
mod flags;
mod ibta15;
mod iova;
mod mw;
mod opcodes;
mod reset;
mod rings;
mod srq;
mod threads;
mod ud;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{dev_b, dev_name, open, roce_v2_gid, ALL_ACCESS};
use rverbs::rc::{RcPath, RcRemote};
use rverbs::uverbs::ah::{Ah, AhAttr};
use rverbs::uverbs::async_event::{AsyncElement, AsyncEvent, AsyncEventType};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::context::Context;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::gid::GidType;
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{Qp, QpAttr, QpInit, QpState, QpType};
use rverbs::uverbs::srq::{Srq, SrqAttr};
use rverbs::uverbs::PostError;
use rverbs::uverbs::SgeList;
use rverbs::uverbs::{
    MrRecvWr, MrSendWr, MrSge, RecvWr, SendFlags, SendOp, SendWr, Sge, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};

/// How long any single expected completion or event may take.
const WAIT: Duration = Duration::from_secs(10);
/// How long we watch for something that must *not* happen.
const QUIET: Duration = Duration::from_millis(200);
/// Bytes of each side's main memory region.
const MR_LEN: usize = 64 * 1024;
/// Immediate data with four distinct bytes: a byte-order mistake cannot go unnoticed.
const IMM: u32 = 0x1234_5678;
const QKEY: u32 = 0x1111_2222;

// ---------------------------------------------------------------------------------------------
// Topologies and endpoints

/// Where a test runs: both QPs on one device, or one on each device of the two-node topology.
#[derive(Clone, Debug)]
struct Topo {
    label: &'static str,
    dev_a: String,
    dev_b: String,
}

fn topologies() -> Vec<Topo> {
    let a = dev_name();
    let mut v = vec![Topo {
        label: "loopback",
        dev_a: a.clone(),
        dev_b: a.clone(),
    }];
    let two = std::env::var("RVERBS_TOPO").is_ok_and(|t| t == "two");
    // The one-node topology sets RVERBS_DEV_B to the same device: that is the loopback case.
    match dev_b().filter(|b| *b != a) {
        Some(b) => v.push(Topo {
            label: "two-node",
            dev_a: a,
            dev_b: b,
        }),
        None => assert!(
            !two,
            "RVERBS_TOPO=two but RVERBS_DEV_B is not set to a second device: the two-node \
             topology is incomplete"
        ),
    }
    v
}

/// Runs `f` on every topology there is, saying which ran.
fn each_topo(test: &str, f: impl Fn(&Topo)) {
    let topos = topologies();
    for t in &topos {
        let start = Instant::now();
        f(t);
        eprintln!(
            "{test}: {} ({} <-> {}) passed in {:?}",
            t.label,
            t.dev_a,
            t.dev_b,
            start.elapsed()
        );
    }
    if topos.len() == 1 {
        eprintln!("{test}: two-node part not run (one-node topology: no second device)");
    }
}

/// One device opened, with a PD and the RoCE v2 GID to use.
struct Side {
    // Field order is drop order: the PD before its context.
    pd: Arc<Pd>,
    ctx: Arc<Context>,
    sgid: u8,
    gid: [u8; 16],
}

impl Side {
    fn open(dev: &str) -> Side {
        let ctx = open(dev);
        let pd = Pd::alloc(&ctx).unwrap_or_else(|e| panic!("alloc PD on {dev}: {e}"));
        let (sgid, gid) = gid_for(&ctx, dev);
        Side { pd, ctx, sgid, gid }
    }

    fn ipv4(&self) -> [u8; 4] {
        self.gid[12..16].try_into().unwrap()
    }
}

/// The RoCE v2 GID of `dev`: the one of the address the VM gave it (`RVERBS_ADDR_A/B`) when
/// it says so — the traffic must use the intended netdev — else the first IPv4 one.
fn gid_for(ctx: &Context, dev: &str) -> (u8, [u8; 16]) {
    for (d, a) in [
        ("RVERBS_DEV_A", "RVERBS_ADDR_A"),
        ("RVERBS_DEV_B", "RVERBS_ADDR_B"),
    ] {
        let (Ok(d), Ok(a)) = (std::env::var(d), std::env::var(a)) else {
            continue;
        };
        if d != dev {
            continue;
        }
        let ip: std::net::Ipv4Addr = a.parse().unwrap_or_else(|e| panic!("{a}: {e}"));
        let want = ip.to_ipv6_mapped().octets();
        let table = ctx.query_gid_table().expect("query GID table");
        let e = table
            .iter()
            .find(|e| e.port == 1 && e.gid_type == GidType::ROCE_V2 && e.gid.0 == want)
            .unwrap_or_else(|| panic!("{dev} has no RoCE v2 GID for {ip}: {table:?}"));
        return (e.index as u8, e.gid.0);
    }
    roce_v2_gid(ctx)
}

/// The RC connection of the tests: every access, MTU 1024, four outstanding RDMA
/// READ/atomics each way, ACK timeout 14, retries 7, RNR retries forever
/// ([`common::rc_path`]).
const NORMAL: RcPath = common::rc_path(ALL_ACCESS);

/// For tests that end in an error: give up quickly (16 ms timeout, one retry, no RNR retry).
const FAST_FAIL: RcPath = RcPath {
    timeout: 12,
    retry_cnt: 1,
    rnr_retry: 0,
    min_rnr_timer: 1,
    ..NORMAL
};

fn caps(send: u32, recv: u32, sge: u32, inline: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// How to build an RC pair.
#[derive(Clone, Copy, Debug)]
struct Opts {
    caps: QpCaps,
    cqe_a: u32,
    cqe_b: u32,
    sq_sig_all: bool,
    path: RcPath,
    /// B's CQ gets a completion channel.
    channel_b: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            caps: caps(32, 32, 4, 64),
            cqe_a: 64,
            cqe_b: 64,
            sq_sig_all: false,
            path: NORMAL,
            channel_b: false,
        }
    }
}

/// One end of a connection. Field order is drop order: the QP goes first, so its work
/// requests are gone before the memory they name is deregistered.
struct End {
    qp: Arc<Qp>,
    cq: Arc<Cq>,
    mr: Mr<PageBuf>,
    side: Side,
}

fn reg(pd: &Arc<Pd>, len: usize, access: AccessFlags) -> Mr<PageBuf> {
    Mr::register(pd, PageBuf::new(len).expect("page buffer"), access)
        .unwrap_or_else(|e| panic!("register {len} bytes with {access:?}: {e}"))
}

fn cq(side: &Side, cqe: u32, channel: Option<Arc<CompChannel>>) -> Arc<Cq> {
    Cq::create(
        &side.ctx,
        cqe,
        CqOptions {
            channel,
            comp_vector: 0,
        },
    )
    .unwrap_or_else(|e| panic!("create CQ: {e}"))
}

fn qp(side: &Side, init: QpInit) -> Arc<Qp> {
    Qp::create(&side.pd, init).unwrap_or_else(|e| panic!("create QP: {e}"))
}

/// Moves an RC `qp` of `local` to RTS towards QP `rqpn` at `rgid` (both first PSNs 0x100).
fn rc_connect(qp: &Qp, local: &Side, rqpn: u32, rgid: [u8; 16], p: RcPath) {
    let remote = RcRemote {
        qp_num: rqpn,
        psn: 0x100,
        ah: AhAttr::roce(1, rgid, local.sgid),
    };
    rverbs::rc::connect(qp, &p, 0x100, &remote)
        .unwrap_or_else(|e| panic!("connect QP {:#x}: {e}", qp.qp_num()));
}

/// Two connected RC QPs: A on `t.dev_a`, B on `t.dev_b` (each side its own context).
fn rc_pair(t: &Topo, o: &Opts) -> (End, End) {
    let sa = Side::open(&t.dev_a);
    let sb = Side::open(&t.dev_b);
    let cq_a = cq(&sa, o.cqe_a, None);
    let ch = o.channel_b.then(|| {
        CompChannel::create(&sb.ctx).unwrap_or_else(|e| panic!("completion channel: {e}"))
    });
    let cq_b = cq(&sb, o.cqe_b, ch);
    let init = |cq: &Arc<Cq>| QpInit {
        sq_sig_all: o.sq_sig_all,
        ..QpInit::rc(cq, o.caps)
    };
    let qa = qp(&sa, init(&cq_a));
    let qb = qp(&sb, init(&cq_b));
    rc_connect(&qa, &sa, qb.qp_num(), sb.gid, o.path);
    rc_connect(&qb, &sb, qa.qp_num(), sa.gid, o.path);
    let ma = reg(&sa.pd, MR_LEN, ALL_ACCESS);
    let mb = reg(&sb.pd, MR_LEN, ALL_ACCESS);
    (
        End {
            qp: qa,
            cq: cq_a,
            mr: ma,
            side: sa,
        },
        End {
            qp: qb,
            cq: cq_b,
            mr: mb,
            side: sb,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Posting and polling

/// Posts sends (the safe path: SGEs made from `Mr`s).
fn post_send(qp: &Qp, wrs: &[MrSendWr<'_>]) -> Result<(), PostError> {
    qp.post_send(wrs)
}

/// Posts sends with raw SGEs (the tests of what providers refuse: bad keys, INLINE data).
fn post_send_raw(qp: &Qp, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
    // SAFETY: in these tests every raw SGE names either a registered `Mr` that lives until the
    // end of the test (the `End`s drop their QP before their MR), an address no MR covers (the
    // device fails the request), or, for INLINE, a live local buffer copied during the call.
    unsafe { qp.post_send_raw(wrs) }
}

fn send_ok(qp: &Qp, wrs: &[MrSendWr<'_>]) {
    post_send(qp, wrs).unwrap_or_else(|e| panic!("post {} send WRs: {e}", wrs.len()));
}

fn send_raw_ok(qp: &Qp, wrs: &[SendWr<'_>]) {
    post_send_raw(qp, wrs).unwrap_or_else(|e| panic!("post {} send WRs: {e}", wrs.len()));
}

/// Posts receives.
fn post_recv(qp: &Qp, wrs: &[MrRecvWr<'_>]) -> Result<(), PostError> {
    qp.post_recv(wrs)
}

fn recv_ok(qp: &Qp, wrs: &[MrRecvWr<'_>]) {
    post_recv(qp, wrs).unwrap_or_else(|e| panic!("post {} receives: {e}", wrs.len()));
}

fn post_srq(srq: &Srq, wrs: &[MrRecvWr<'_>]) -> Result<(), PostError> {
    srq.post_recv(wrs)
}

/// The whole message a post to `qp` fails with: device, QP, work request, what, count, once each.
fn qp_post_msg(qp: &Qp, op: &str, index: usize, what: &str, posted: usize) -> String {
    let dev = qp.pd().context().name();
    let n = qp.qp_num();
    format!("{op} to QP {n:#x} on {dev}: work request #{index}: {what}; {posted} posted")
}

fn recv<'a>(wr_id: u64, sge: &'a [MrSge<'a>]) -> MrRecvWr<'a> {
    RecvWr { wr_id, sge }
}

/// A signaled work request of `op`.
/// One receive per SGE list of `sges`, numbered from `first` (the `wr_id`s).
fn recvs<'a>(first: u64, sges: &'a [[MrSge<'a>; 1]]) -> Vec<MrRecvWr<'a>> {
    sges.iter()
        .enumerate()
        .map(|(i, s)| recv(first + i as u64, s))
        .collect()
}

/// `n` single-SGE lists over consecutive `len`-byte slots of `mr`, from its start.
fn sge_slots(mr: &Mr<PageBuf>, n: usize, len: usize) -> Vec<[MrSge<'_>; 1]> {
    (0..n).map(|i| [mr.sge(i * len..(i + 1) * len)]).collect()
}

fn wr<'a, S: SgeList>(wr_id: u64, op: SendOp, sge: &'a [S]) -> SendWr<'a, S> {
    SendWr {
        op,
        ..SendWr::send(wr_id, sge)
    }
}

fn poll_n(cq: &Cq, n: usize) -> Vec<WorkCompletion> {
    common::poll_n(cq, n)
}

fn poll1(cq: &Cq) -> WorkCompletion {
    poll_n(cq, 1)[0]
}

/// Asserts that nothing arrives on `cq` for a while.
fn assert_quiet(cq: &Cq, what: &str) {
    let end = Instant::now() + QUIET;
    while Instant::now() < end {
        if let Some(wc) = cq.poll_one() {
            panic!("{what}: unexpected completion {wc:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[track_caller]
fn assert_wc(wc: &WorkCompletion, wr_id: u64, op: WcOpcode) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::SUCCESS, op),
        "{wc:?}"
    );
}

#[track_caller]
fn assert_status(wc: &WorkCompletion, wr_id: u64, status: WcStatus) {
    assert_eq!((wc.wr_id, wc.status), (wr_id, status), "{wc:?}");
}

/// `len` bytes that differ from every other seed's.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(101))
                ^ (i >> 8) as u8
        })
        .collect()
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().unwrap())
}

fn errno(e: &PostError) -> Option<i32> {
    e.errno().map(|e| e.raw_os_error())
}

fn state(qp: &Qp) -> QpState {
    qp.query()
        .unwrap_or_else(|e| panic!("query QP {:#x}: {e}", qp.qp_num()))
        .state
}

/// Waits up to `timeout` for the next async event of `ctx`.
fn async_event(ctx: &Context, timeout: Duration) -> Option<AsyncEvent> {
    ctx.get_async_event(Some(timeout))
        .unwrap_or_else(|e| panic!("read async event on {}: {e}", ctx.name()))
}
