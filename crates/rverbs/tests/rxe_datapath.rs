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

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{dev_b, dev_name, open, roce_v2_gid, ALL_ACCESS};
use rverbs::uverbs::ah::{Ah, AhAttr};
use rverbs::uverbs::async_event::{AsyncElement, AsyncEvent, AsyncEventType};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::context::Context;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::error::PostError;
use rverbs::uverbs::gid::GidType;
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::port::Mtu;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{Qp, QpAttr, QpInit, QpState, QpType};
use rverbs::uverbs::srq::{Srq, SrqAttr};
use rverbs::uverbs::wr::SgeList;
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

/// Retry behaviour of an RC connection.
#[derive(Clone, Copy, Debug)]
struct Path {
    /// Local ACK timeout, 4.096 µs × 2^timeout.
    timeout: u8,
    retry_cnt: u8,
    /// 7 = forever.
    rnr_retry: u8,
    min_rnr_timer: u8,
}

const NORMAL: Path = Path {
    timeout: 14,
    retry_cnt: 7,
    rnr_retry: 7,
    min_rnr_timer: 12,
};

/// For tests that end in an error: give up quickly (16 ms timeout, one retry, no RNR retry).
const FAST_FAIL: Path = Path {
    timeout: 12,
    retry_cnt: 1,
    rnr_retry: 0,
    min_rnr_timer: 1,
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
    path: Path,
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

/// Moves an RC `qp` of `local` to RTS towards QP `rqpn` at `rgid`.
fn rc_connect(qp: &Qp, local: &Side, rqpn: u32, rgid: [u8; 16], p: Path) {
    let step = |what: &str, a: QpAttr| {
        qp.modify(&a)
            .unwrap_or_else(|e| panic!("QP {:#x} to {what}: {e}", qp.qp_num()))
    };
    step(
        "INIT",
        QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(1),
            access_flags: Some(ALL_ACCESS),
            ..Default::default()
        },
    );
    step(
        "RTR",
        QpAttr {
            qp_state: Some(QpState::RTR),
            path_mtu: Some(Mtu::MTU_1024),
            dest_qp_num: Some(rqpn),
            rq_psn: Some(0x100),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(p.min_rnr_timer),
            ah_attr: Some(AhAttr::roce(1, rgid, local.sgid)),
            ..Default::default()
        },
    );
    step(
        "RTS",
        QpAttr {
            qp_state: Some(QpState::RTS),
            sq_psn: Some(0x100),
            timeout: Some(p.timeout),
            retry_cnt: Some(p.retry_cnt),
            rnr_retry: Some(p.rnr_retry),
            max_rd_atomic: Some(4),
            ..Default::default()
        },
    );
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

// ---------------------------------------------------------------------------------------------
// Opcodes

/// SEND (multi-packet) and SEND_WITH_IMM: payload, byte_len, and the immediate data in host
/// byte order at the receiver.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn send_and_send_with_imm() {
    each_topo("send_and_send_with_imm", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let msg = pattern(1, 5000); // five packets at MTU 1024
        a.mr.write_at(0, &msg);
        a.mr.write_at(5000, b"imm");
        let (r0, r1) = ([b.mr.sge(0..8192)], [b.mr.sge(8192..8292)]);
        recv_ok(&b.qp, &[recv(10, &r0), recv(11, &r1)]);
        let (s0, s1) = ([a.mr.sge(0..5000)], [a.mr.sge(5000..5003)]);
        send_ok(
            &a.qp,
            &[
                SendWr::send(1, &s0),
                wr(2, SendOp::SendWithImm { imm: IMM }, &s1),
            ],
        );
        let s = poll_n(&a.cq, 2);
        assert_wc(&s[0], 1, WcOpcode::SEND);
        assert_wc(&s[1], 2, WcOpcode::SEND);
        assert_eq!(s[0].qp_num, a.qp.qp_num());
        let r = poll_n(&b.cq, 2);
        assert_wc(&r[0], 10, WcOpcode::RECV);
        assert_eq!(r[0].byte_len, 5000);
        assert_eq!(r[0].imm(), None, "{:?}", r[0]);
        assert_eq!(r[0].qp_num, b.qp.qp_num());
        assert_wc(&r[1], 11, WcOpcode::RECV);
        assert_eq!(r[1].byte_len, 3);
        assert!(r[1].wc_flags.contains(WcFlags::WITH_IMM), "{:?}", r[1]);
        assert_eq!(r[1].imm(), Some(IMM), "imm in host byte order");
        assert_eq!(&b.mr.to_vec()[..5000], &msg[..]);
        assert_eq!(b.mr.to_vec()[5000], 0, "nothing past byte_len");
        assert_eq!(&b.mr.to_vec()[8192..8196], b"imm\0");

        // Zero bytes, no SGE on either side: only the immediate travels.
        recv_ok(&b.qp, &[recv(12, &[])]);
        send_ok(&a.qp, &[wr(3, SendOp::SendWithImm { imm: !IMM }, &[])]);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);
        let r = poll1(&b.cq);
        assert_wc(&r, 12, WcOpcode::RECV);
        assert_eq!((r.byte_len, r.imm()), (0, Some(!IMM)));
    });
}

/// RDMA_WRITE lands in remote memory without a receive completion; RDMA_WRITE_WITH_IMM
/// completes RECV_RDMA_WITH_IMM with the immediate, consuming a receive (whose buffer it
/// leaves untouched).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rdma_write_and_write_with_imm() {
    each_topo("rdma_write_and_write_with_imm", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let data = pattern(2, 3000);
        let data2 = pattern(3, 200);
        a.mr.write_at(0, &data);
        a.mr.write_at(3000, &data2);
        a.mr.write_at(3200, b"after");
        b.mr.fill(40000..40016, 0xee);
        let (r0, r1) = ([b.mr.sge(40000..40016)], [b.mr.sge(40100..40200)]);
        recv_ok(&b.qp, &[recv(20, &r0), recv(21, &r1)]);
        let (rb, rkey) = (b.mr.addr(), b.mr.rkey());

        // An unaligned multi-packet write.
        let s = [a.mr.sge(0..3000)];
        let op = SendOp::RdmaWrite {
            remote_addr: rb + 4101,
            rkey,
        };
        send_ok(&a.qp, &[wr(1, op, &s)]);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::RDMA_WRITE);
        assert_eq!(&b.mr.to_vec()[4101..7101], &data[..]);
        assert_eq!(b.mr.to_vec()[4100], 0);
        assert_eq!(b.mr.to_vec()[7101], 0);
        assert_quiet(&b.cq, "RDMA WRITE without immediate");

        let s = [a.mr.sge(3000..3200)];
        let op = SendOp::RdmaWriteWithImm {
            remote_addr: rb + 20000,
            rkey,
            imm: 0x0a0b_0c0d,
        };
        send_ok(&a.qp, &[wr(2, op, &s)]);
        assert_wc(&poll1(&a.cq), 2, WcOpcode::RDMA_WRITE);
        let r = poll1(&b.cq);
        assert_wc(&r, 20, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!(r.imm(), Some(0x0a0b_0c0d), "{r:?}");
        assert_eq!(r.byte_len, 200, "byte_len of a write with immediate: {r:?}");
        assert_eq!(&b.mr.to_vec()[20000..20200], &data2[..]);
        assert!(
            b.mr.to_vec()[40000..40016].iter().all(|&x| x == 0xee),
            "the consumed receive's buffer was written"
        );

        // That receive was consumed: the next SEND lands in the second one.
        let s = [a.mr.sge(3200..3205)];
        send_ok(&a.qp, &[SendWr::send(3, &s)]);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);
        let r = poll1(&b.cq);
        assert_wc(&r, 21, WcOpcode::RECV);
        assert_eq!(r.byte_len, 5);
        assert_eq!(&b.mr.to_vec()[40100..40105], b"after");

        // A zero-length WRITE_WITH_IMM (no SGE) into a receive without SGEs; then a 60 KB
        // write (60 packets).
        recv_ok(&b.qp, &[recv(22, &[])]);
        let op = SendOp::RdmaWriteWithImm {
            remote_addr: rb,
            rkey,
            imm: 7,
        };
        send_ok(&a.qp, &[wr(4, op, &[])]);
        assert_wc(&poll1(&a.cq), 4, WcOpcode::RDMA_WRITE);
        let r = poll1(&b.cq);
        assert_wc(&r, 22, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!((r.byte_len, r.imm()), (0, Some(7)));
        let big = pattern(14, 60 * 1024);
        a.mr.write_at(0, &big);
        let s = [a.mr.sge(0..big.len())];
        let op = SendOp::RdmaWrite {
            remote_addr: rb + 1,
            rkey,
        };
        send_ok(&a.qp, &[wr(5, op, &s)]);
        assert_wc(&poll1(&a.cq), 5, WcOpcode::RDMA_WRITE);
        assert!(b.mr.to_vec()[1..1 + big.len()] == big[..], "60 KB write");
    });
}

/// RDMA_READ of a multi-packet remote buffer.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rdma_read() {
    each_topo("rdma_read", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let data = pattern(4, 10000);
        b.mr.write_at(8000, &data);
        let d = [a.mr.sge(30000..40000)];
        let op = SendOp::RdmaRead {
            remote_addr: b.mr.addr() + 8000,
            rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(1, op, &d)]);
        let wc = poll1(&a.cq);
        assert_wc(&wc, 1, WcOpcode::RDMA_READ);
        assert_eq!(wc.byte_len, 10000);
        assert_eq!(&a.mr.to_vec()[30000..40000], &data[..]);
        assert_eq!(a.mr.to_vec()[40000], 0);
        assert_quiet(&b.cq, "RDMA READ responder");
    });
}

/// ATOMIC_CMP_AND_SWP (matching and not) and ATOMIC_FETCH_AND_ADD: old values in the local
/// 8-byte buffers, the remote value changed; misaligned atomics are refused at post.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn atomics() {
    each_topo("atomics", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let v0: u64 = 0x0102_0304_0506_0708;
        let v1: u64 = 0x1111_2222_3333_4444;
        b.mr.write_at(64, &v0.to_ne_bytes());
        a.mr.fill(128..152, 0xff);
        let (remote_addr, rkey) = (b.mr.addr() + 64, b.mr.rkey());
        let (l0, l1, l2) = (
            [a.mr.sge(128..136)],
            [a.mr.sge(136..144)],
            [a.mr.sge(144..152)],
        );
        let swap = |compare, swap| SendOp::AtomicCmpSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        };
        send_ok(
            &a.qp,
            &[
                wr(1, swap(v0, v1), &l0),
                // The compare fails now: the old value comes back, nothing is swapped.
                wr(2, swap(v0, 0xdead), &l1),
                wr(
                    3,
                    SendOp::AtomicFetchAdd {
                        remote_addr,
                        rkey,
                        add: 0x10,
                    },
                    &l2,
                ),
            ],
        );
        let wc = poll_n(&a.cq, 3);
        assert_wc(&wc[0], 1, WcOpcode::COMP_SWAP);
        assert_wc(&wc[1], 2, WcOpcode::COMP_SWAP);
        assert_wc(&wc[2], 3, WcOpcode::FETCH_ADD);
        assert!(wc.iter().all(|w| w.byte_len == 8), "{wc:?}");
        let l = a.mr.to_vec();
        assert_eq!(u64_at(&l, 128), v0, "CMP_AND_SWP returns the old value");
        assert_eq!(
            u64_at(&l, 136),
            v1,
            "failed CMP_AND_SWP returns the current value"
        );
        assert_eq!(u64_at(&l, 144), v1, "FETCH_AND_ADD returns the old value");
        assert_eq!(u64_at(&b.mr.to_vec(), 64), v1 + 0x10, "remote value");

        // Misaligned: refused before anything is posted.
        let e = post_send(
            &a.qp,
            &[wr(
                4,
                SendOp::AtomicFetchAdd {
                    remote_addr: remote_addr + 4,
                    rkey,
                    add: 1,
                },
                &l2,
            )],
        )
        .unwrap_err();
        assert_eq!(e.posted(), 0);
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not 8-byte aligned"), "{e}");
        assert_quiet(&a.cq, "refused atomic");
    });
}

/// Connects a new RC QP on `local` to a new one on `remote` and RDMA READs the first 4 bytes
/// of `remote_mr` into `local_mr` through the remote MR's rkey.
fn read_over_new_qps(
    local: &Side,
    local_mr: &mut Mr<PageBuf>,
    remote: &Side,
    remote_mr: &Mr<PageBuf>,
) -> [u8; 4] {
    let (cl, cr) = (cq(local, 4, None), cq(remote, 4, None));
    let ql = qp(local, QpInit::rc(&cl, caps(4, 1, 1, 0)));
    let qr = qp(remote, QpInit::rc(&cr, caps(4, 1, 1, 0)));
    rc_connect(&ql, local, qr.qp_num(), remote.gid, NORMAL);
    rc_connect(&qr, remote, ql.qp_num(), local.gid, NORMAL);
    local_mr.fill(0..4, 0);
    let d = [local_mr.sge(0..4)];
    let op = SendOp::RdmaRead {
        remote_addr: remote_mr.addr(),
        rkey: remote_mr.rkey(),
    };
    send_ok(&ql, &[wr(99, op, &d)]);
    assert_wc(&poll1(&cl), 99, WcOpcode::RDMA_READ);
    local_mr.to_vec()[..4].try_into().unwrap()
}

/// SEND_WITH_INV and LOCAL_INV. rxe 6.1 invalidates only fast-registration MRs and memory
/// windows (`rxe_invalidate_mr` refuses MRs of type IB_MR_TYPE_USER), and userspace can only
/// name user MRs here: both operations go through our stack and come back as the kernel's
/// clear error completions, asserted below as measured. UD QPs refuse them at post time.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn send_with_inv_and_local_inv() {
    each_topo("send_with_inv_and_local_inv", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        // LOCAL_INV of a user MR: LOC_QP_OP_ERR (6.12: WR_FLUSH_ERR), and the QP goes to ERR.
        let (a, mut b) = rc_pair(t, &fast);
        let op = SendOp::LocalInv {
            invalidate_rkey: a.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(1, op, &[])]);
        let wc = poll1(&a.cq);
        assert_status(&wc, 1, requester_local_error());
        assert_eq!(state(&a.qp), QpState::ERR);
        // Nothing was invalidated: B reads A's MR through its rkey over a new connection.
        a.mr.write_at(0, b"live");
        assert_eq!(
            read_over_new_qps(&b.side, &mut b.mr, &a.side, &a.mr),
            *b"live"
        );

        // SEND_WITH_INV naming the receiver's user MR.
        let (mut a, b) = rc_pair(t, &fast);
        a.mr.write_at(0, b"inv!");
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(7, &r)]);
        let s = [a.mr.sge(0..4)];
        let op = SendOp::SendWithInv {
            invalidate_rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(2, op, &s)]);
        let rw = poll1(&b.cq);
        let sw = poll1(&a.cq);
        eprintln!("SEND_WITH_INV of a user MR: receiver {rw:?}, sender {sw:?}");
        // The responder fails the invalidation after it accepted the packet: the receive
        // completes REM_INV_REQ_ERR and its QP goes to ERR, but the SEND was ACKed first, so
        // the requester sees success.
        assert_status(&rw, 7, WcStatus::REM_INV_REQ_ERR);
        assert_eq!(rw.invalidated_rkey(), None);
        assert_eq!(state(&b.qp), QpState::ERR);
        assert_status(&sw, 2, WcStatus::SUCCESS);
        // The MR was not invalidated: A reads it through its rkey over a new connection.
        b.mr.write_at(0, b"live");
        assert_eq!(
            read_over_new_qps(&a.side, &mut a.mr, &b.side, &b.mr),
            *b"live"
        );

        // UD cannot carry them at all: refused with a clear error, nothing posted.
        let s = Side::open(&t.dev_a);
        let c = cq(&s, 8, None);
        let ud = qp(
            &s,
            QpInit {
                qp_type: QpType::UD,
                ..QpInit::rc(&c, caps(8, 8, 1, 0))
            },
        );
        ud_ready(&ud);
        for op in [
            SendOp::SendWithInv { invalidate_rkey: 1 },
            SendOp::LocalInv { invalidate_rkey: 1 },
        ] {
            let e = post_send(&ud, &[wr(1, op, &[])]).unwrap_err();
            assert_eq!(e.posted(), 0);
            assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
            assert!(e.to_string().contains("does not support"), "{op:?}: {e}");
        }
        assert_quiet(&c, "refused UD work requests");
    });
}

// ---------------------------------------------------------------------------------------------
// Flags

/// With sq_sig_all off, unsignaled WRs produce no completion; with it on, every WR does.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn signaled_and_unsignaled() {
    each_topo("signaled_and_unsignaled", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        assert!(!a.qp.query().unwrap().sq_sig_all);
        let r = sge_slots(&b.mr, 3, 64);
        let rw = recvs(30, &r);
        recv_ok(&b.qp, &rw);
        let s = [a.mr.sge(0..16)];
        let unsignaled = |id| SendWr {
            flags: SendFlags::empty(),
            ..SendWr::send(id, &s)
        };
        send_ok(&a.qp, &[unsignaled(1), unsignaled(2), SendWr::send(3, &s)]);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);
        assert_quiet(&a.cq, "unsignaled sends");
        let r = poll_n(&b.cq, 3);
        for (i, wc) in r.iter().enumerate() {
            assert_wc(wc, 30 + i as u64, WcOpcode::RECV);
        }

        let (a, b) = rc_pair(
            t,
            &Opts {
                sq_sig_all: true,
                ..Opts::default()
            },
        );
        assert!(a.qp.query().unwrap().sq_sig_all);
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r), recv(2, &r)]);
        let s = [a.mr.sge(0..16)];
        let unsignaled = |id| SendWr {
            flags: SendFlags::empty(),
            ..SendWr::send(id, &s)
        };
        send_ok(&a.qp, &[unsignaled(1), unsignaled(2)]);
        let wc = poll_n(&a.cq, 2);
        assert_wc(&wc[0], 1, WcOpcode::SEND);
        assert_wc(&wc[1], 2, WcOpcode::SEND);
        poll_n(&b.cq, 2);
    });
}

/// FENCE: a SEND fenced behind an RDMA READ into the buffer it sends carries the read data,
/// and a fenced SEND does not leave while a READ is outstanding (an unfenced one does).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn fence_orders_send_after_read() {
    each_topo("fence_orders_send_after_read", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        const N: usize = 8192;
        let fresh = pattern(5, N);
        b.mr.write_at(0, &fresh);
        a.mr.fill(0..2 * N, 0xaa);
        let r0 = [b.mr.sge(2 * N..3 * N)];
        recv_ok(&b.qp, &[recv(1, &r0)]);
        let read = SendOp::RdmaRead {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        };
        // The READ lands in the very bytes the SEND after it sends.
        let l0 = [a.mr.sge(0..N)];
        send_ok(
            &a.qp,
            &[
                wr(10, read, &l0),
                SendWr {
                    flags: SendFlags::SIGNALED | SendFlags::FENCE,
                    ..SendWr::send(11, &l0)
                },
            ],
        );
        let wc = poll_n(&a.cq, 2);
        assert_wc(&wc[0], 10, WcOpcode::RDMA_READ);
        assert_wc(&wc[1], 11, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 1, WcOpcode::RECV);
        assert!(
            b.mr.to_vec()[2 * N..3 * N] == fresh[..],
            "the fenced SEND carried data from before the READ completed"
        );

        // rxe answers a READ within the doorbell call here (loopback and veth alike), so the
        // data above would be fresh even without FENCE. What shows the fence is the QP's next
        // PSN (query's sq_psn is rxe's req.psn) with a READ that stays outstanding because
        // the peer QP does not exist: the READ takes 2 PSNs (2048 bytes at MTU 1024), an
        // unfenced SEND goes out behind it (+1), a fenced one waits.
        for fence in [false, true] {
            let s = Side::open(&t.dev_a);
            let c = cq(&s, 8, None);
            let q = qp(&s, QpInit::rc(&c, caps(4, 1, 1, 0)));
            let slow = Path {
                timeout: 18, // ~1 s before the READ is retried
                ..NORMAL
            };
            rc_connect(&q, &s, 0x00ff_ff00, b.side.gid, slow);
            let m = reg(&s.pd, 4096, ALL_ACCESS);
            let (d, sg) = ([m.sge(0..2048)], [m.sge(2048..2056)]);
            let op = SendOp::RdmaRead {
                remote_addr: 0x1000,
                rkey: 0x1234,
            };
            let flags = if fence {
                SendFlags::SIGNALED | SendFlags::FENCE
            } else {
                SendFlags::SIGNALED
            };
            send_ok(
                &q,
                &[
                    wr(1, op, &d),
                    SendWr {
                        flags,
                        ..SendWr::send(2, &sg)
                    },
                ],
            );
            let sq_psn = || q.query().unwrap().sq_psn;
            let end = Instant::now() + WAIT;
            while sq_psn() < 0x102 {
                assert!(
                    Instant::now() < end,
                    "the READ never went out: {:#x}",
                    sq_psn()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(QUIET);
            let want = if fence { 0x102 } else { 0x103 };
            assert_eq!(sq_psn(), want, "fence {fence}: next PSN");
            q.modify(&QpAttr {
                qp_state: Some(QpState::ERR),
                ..Default::default()
            })
            .unwrap();
            let wc = poll_n(&c, 2);
            assert_status(&wc[0], 1, WcStatus::WR_FLUSH_ERR);
            assert_status(&wc[1], 2, WcStatus::WR_FLUSH_ERR);
            drop(q);
        }
    });
}

/// INLINE: data up to max_inline_data is copied at post time from unregistered memory;
/// one byte more is refused with a clear error and nothing of it is posted.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn inline_data() {
    each_topo("inline_data", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let m = a.qp.caps().max_inline_data as usize;
        assert!(m >= 64, "max_inline_data {m} < 64 asked");
        let want = pattern(6, m + 1);
        // Not registered: INLINE needs no lkey.
        let mut src = want.clone();
        let inline = |id, len: usize, src: &[u8]| {
            let sge = Sge {
                addr: src.as_ptr() as u64,
                length: len as u32,
                lkey: 0,
            };
            (id, sge)
        };
        let r = sge_slots(&b.mr, 3, 4096);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        let (id, sge) = inline(1, m, &src);
        let sg = [sge];
        send_raw_ok(
            &a.qp,
            &[SendWr {
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..SendWr::send(id, &sg)
            }],
        );
        // Copied at post: changing the source now changes nothing.
        src.fill(0);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);
        let wc = poll1(&b.cq);
        assert_wc(&wc, 0, WcOpcode::RECV);
        assert_eq!(wc.byte_len as usize, m);
        assert_eq!(&b.mr.to_vec()[..m], &want[..m]);

        // [m bytes, m + 1 bytes]: the first goes, the second is refused.
        src.copy_from_slice(&want);
        let ok = [inline(2, m, &src).1];
        let big = [inline(3, m + 1, &src).1];
        let iw = |id, s| SendWr {
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ..SendWr::send(id, s)
        };
        let e = post_send_raw(&a.qp, &[iw(2, &ok), iw(3, &big)]).unwrap_err();
        assert_eq!(e.posted(), 1, "{e}");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        let what = format!("{} bytes of inline data, max_inline_data is {m}", m + 1);
        assert_eq!(e.to_string(), qp_post_msg(&a.qp, "post send", 1, &what, 1));
        assert_wc(&poll1(&a.cq), 2, WcOpcode::SEND);
        assert_quiet(&a.cq, "refused inline WR");
        let wc = poll1(&b.cq);
        assert_wc(&wc, 1, WcOpcode::RECV);
        assert_eq!(wc.byte_len as usize, m);

        // Inline RDMA WRITE; then the third receive is still there for the next SEND.
        let w = [inline(4, 16, &src).1];
        let op = SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 20000,
            rkey: b.mr.rkey(),
        };
        send_raw_ok(
            &a.qp,
            &[SendWr {
                op,
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..SendWr::send(4, &w)
            }],
        );
        assert_wc(&poll1(&a.cq), 4, WcOpcode::RDMA_WRITE);
        assert_eq!(&b.mr.to_vec()[20000..20016], &want[..16]);
        let s = [a.mr.sge(0..1)];
        send_ok(&a.qp, &[SendWr::send(5, &s)]);
        assert_wc(&poll1(&a.cq), 5, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 2, WcOpcode::RECV);

        // Inline data gathered from two unregistered buffers.
        let (x, y) = (*b"gather", *b" inline");
        let two = [
            Sge {
                addr: x.as_ptr() as u64,
                length: 6,
                lkey: 0,
            },
            Sge {
                addr: y.as_ptr() as u64,
                length: 7,
                lkey: 0,
            },
        ];
        let r4 = [b.mr.sge(30000..30100)];
        recv_ok(&b.qp, &[recv(3, &r4)]);
        send_raw_ok(&a.qp, &[iw(7, &two)]);
        assert_wc(&poll1(&a.cq), 7, WcOpcode::SEND);
        let wc = poll1(&b.cq);
        assert_wc(&wc, 3, WcOpcode::RECV);
        assert_eq!(
            &b.mr.to_vec()[30000..30000 + wc.byte_len as usize],
            b"gather inline"
        );

        // INLINE makes no sense for a READ: refused.
        let d = [a.mr.sge(0..8)];
        let op = SendOp::RdmaRead {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        };
        let e = post_send(
            &a.qp,
            &[SendWr {
                op,
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..SendWr::send(6, &d)
            }],
        )
        .unwrap_err();
        assert_eq!(e.posted(), 0);
        assert!(
            e.to_string()
                .contains("INLINE is not possible with RDMA_READ"),
            "{e}"
        );
        assert_quiet(&a.cq, "refused inline READ");
    });
}

/// Gather (3 SGEs over two MRs) into scatter (3 SGEs); RDMA WRITE gathering and RDMA READ
/// scattering; one SGE over max_send_sge is refused.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn gather_and_scatter() {
    each_topo("gather_and_scatter", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let a2 = reg(&a.side.pd, 4096, AccessFlags::LOCAL_WRITE);
        let (p1, p2, p3) = (pattern(7, 10), pattern(8, 1000), pattern(9, 7));
        a.mr.write_at(0, &p1);
        a.mr.write_at(100, &p2);
        a2.write_at(0, &p3);
        let all: Vec<u8> = [&p1[..], &p2[..], &p3[..]].concat();
        b.mr.fill(0..4000, 0xee);

        let gather = [a.mr.sge(0..10), a.mr.sge(100..1100), a2.sge(0..7)];
        let scatter = [b.mr.sge(0..3), b.mr.sge(500..504), b.mr.sge(2000..3010)];
        recv_ok(&b.qp, &[recv(1, &scatter)]);
        send_ok(&a.qp, &[SendWr::send(1, &gather)]);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);
        let wc = poll1(&b.cq);
        assert_wc(&wc, 1, WcOpcode::RECV);
        assert_eq!(wc.byte_len, 1017);
        let bm = b.mr.to_vec();
        assert_eq!(&bm[..3], &all[..3]);
        assert_eq!(&bm[500..504], &all[3..7]);
        assert_eq!(&bm[2000..3010], &all[7..]);
        for edge in [3, 499, 504, 1999, 3010] {
            assert_eq!(
                bm[edge], 0xee,
                "byte {edge} outside the scatter list was written"
            );
        }

        // RDMA WRITE from two SGEs, RDMA READ back into two SGEs.
        let g = [a.mr.sge(0..10), a2.sge(0..7)];
        let op = SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 10000,
            rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(2, op, &g)]);
        assert_wc(&poll1(&a.cq), 2, WcOpcode::RDMA_WRITE);
        let written: Vec<u8> = [&p1[..], &p3[..]].concat();
        assert_eq!(&b.mr.to_vec()[10000..10017], &written[..]);
        let s = [a.mr.sge(20000..20005), a.mr.sge(21000..21012)];
        let op = SendOp::RdmaRead {
            remote_addr: b.mr.addr() + 10000,
            rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(3, op, &s)]);
        let wc = poll1(&a.cq);
        assert_wc(&wc, 3, WcOpcode::RDMA_READ);
        assert_eq!(wc.byte_len, 17);
        assert_eq!(&a.mr.to_vec()[20000..20005], &written[..5]);
        assert_eq!(&a.mr.to_vec()[21000..21012], &written[5..]);

        // One SGE too many, for the send and the receive queue.
        let n = a.qp.caps().max_send_sge as usize + 1;
        let many: Vec<MrSge<'_>> = (0..n).map(|i| a.mr.sge(i..i + 1)).collect();
        let e = post_send(&a.qp, &[SendWr::send(4, &many)]).unwrap_err();
        assert_eq!(e.posted(), 0);
        let what = format!("{n} SGEs, the queue allows {}", n - 1);
        assert_eq!(e.to_string(), qp_post_msg(&a.qp, "post send", 0, &what, 0));
        let n = b.qp.caps().max_recv_sge as usize + 1;
        let many: Vec<MrSge<'_>> = (0..n).map(|i| b.mr.sge(i..i + 1)).collect();
        let e = post_recv(&b.qp, &[recv(5, &many)]).unwrap_err();
        assert_eq!(e.posted(), 0);
        let what = format!("{n} SGEs, the queue allows {}", n - 1);
        assert_eq!(
            e.to_string(),
            qp_post_msg(&b.qp, "post receive", 0, &what, 0)
        );
        assert_quiet(&a.cq, "refused WRs");
        drop(a);
        drop(a2);
    });
}

/// Write syscalls this thread has made (`/proc/thread-self/io`): the rxe send doorbell is one
/// write() on the command fd.
fn write_syscalls() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("read /proc/thread-self/io");
    io.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no syscw in /proc/thread-self/io: {io}"))
}

/// Eight WRs of every kind in one post call: one doorbell, completions in order. Receives
/// need no doorbell; a list that fails part-way rings once for the part posted, and one
/// that fails at its first WR not at all.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn many_wrs_one_doorbell() {
    each_topo("many_wrs_one_doorbell", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let (rb, rkey) = (b.mr.addr(), b.mr.rkey());
        a.mr.write_at(0, &pattern(10, 4096));
        b.mr.write_at(8192, &5u64.to_ne_bytes());
        b.mr.write_at(8200, &9u64.to_ne_bytes());
        b.mr.write_at(12288, &pattern(11, 100));

        let r = sge_slots(&b.mr, 4, 1024);
        let rw = recvs(100, &r);
        let before = write_syscalls();
        recv_ok(&b.qp, &rw);
        assert_eq!(write_syscalls() - before, 0, "receives need no doorbell");

        let s = |r: std::ops::Range<usize>| [a.mr.sge(r)];
        let (s0, s1, s2, s3, s4, s5, s6, s7) = (
            s(0..100),
            s(100..200),
            s(200..300),
            s(20000..20100),
            s(20100..20108),
            s(300..400),
            s(400..500),
            s(20108..20116),
        );
        let wrs = [
            SendWr::send(0, &s0),
            wr(1, SendOp::SendWithImm { imm: 1 }, &s1),
            wr(
                2,
                SendOp::RdmaWrite {
                    remote_addr: rb + 16384,
                    rkey,
                },
                &s2,
            ),
            wr(
                3,
                SendOp::RdmaRead {
                    remote_addr: rb + 12288,
                    rkey,
                },
                &s3,
            ),
            wr(
                4,
                SendOp::AtomicFetchAdd {
                    remote_addr: rb + 8192,
                    rkey,
                    add: 2,
                },
                &s4,
            ),
            wr(
                5,
                SendOp::RdmaWriteWithImm {
                    remote_addr: rb + 16484,
                    rkey,
                    imm: 5,
                },
                &s5,
            ),
            SendWr::send(6, &s6),
            wr(
                7,
                SendOp::AtomicCmpSwp {
                    remote_addr: rb + 8200,
                    rkey,
                    compare: 9,
                    swap: 10,
                },
                &s7,
            ),
        ];
        let before = write_syscalls();
        send_ok(&a.qp, &wrs);
        assert_eq!(write_syscalls() - before, 1, "one doorbell for eight WRs");
        let wc = poll_n(&a.cq, 8);
        let ops = [
            WcOpcode::SEND,
            WcOpcode::SEND,
            WcOpcode::RDMA_WRITE,
            WcOpcode::RDMA_READ,
            WcOpcode::FETCH_ADD,
            WcOpcode::RDMA_WRITE,
            WcOpcode::SEND,
            WcOpcode::COMP_SWAP,
        ];
        for (i, (w, op)) in wc.iter().zip(ops).enumerate() {
            assert_wc(w, i as u64, op);
        }
        let r = poll_n(&b.cq, 4);
        assert_wc(&r[0], 100, WcOpcode::RECV);
        assert_wc(&r[1], 101, WcOpcode::RECV);
        assert_eq!(r[1].imm(), Some(1));
        assert_wc(&r[2], 102, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!(r[2].imm(), Some(5));
        assert_wc(&r[3], 103, WcOpcode::RECV);
        let am = a.mr.to_vec();
        let bm = b.mr.to_vec();
        assert_eq!(&bm[..100], &am[..100]);
        assert_eq!(&bm[1024..1124], &am[100..200]);
        assert_eq!(&bm[16384..16484], &am[200..300]);
        assert_eq!(&bm[16484..16584], &am[300..400]);
        assert_eq!(&bm[3072..3172], &am[400..500]);
        assert_eq!(&am[20000..20100], &pattern(11, 100)[..]);
        assert_eq!((u64_at(&am, 20100), u64_at(&bm, 8192)), (5, 7));
        assert_eq!((u64_at(&am, 20108), u64_at(&bm, 8200)), (9, 10));

        // Fails at the second WR: one doorbell for the first.
        let bad: Vec<MrSge<'_>> = (0..a.qp.caps().max_send_sge as usize + 1)
            .map(|i| a.mr.sge(i..i + 1))
            .collect();
        let rr = [b.mr.sge(4096..5120)];
        recv_ok(&b.qp, &[recv(104, &rr)]);
        let before = write_syscalls();
        let e = post_send(&a.qp, &[SendWr::send(8, &s0), SendWr::send(9, &bad)]).unwrap_err();
        assert_eq!(write_syscalls() - before, 1);
        assert_eq!(e.posted(), 1);
        assert_wc(&poll1(&a.cq), 8, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 104, WcOpcode::RECV);
        // Fails at the first: no doorbell.
        let before = write_syscalls();
        let e = post_send(&a.qp, &[SendWr::send(10, &bad), SendWr::send(11, &s0)]).unwrap_err();
        assert_eq!(write_syscalls() - before, 0);
        assert_eq!(e.posted(), 0);
        assert_quiet(&a.cq, "nothing posted");
    });
}

// ---------------------------------------------------------------------------------------------
// Rings

/// Capacities of a QP's send and receive rings. rxe makes each ring 2^n slots, one always
/// empty, for at least the WRs asked; the create response repeats the request, query tells
/// the capacity.
fn ring_capacity(qp: &Qp) -> (usize, usize) {
    let asked = qp.caps();
    let c = qp.query().unwrap().caps;
    assert!(c.max_send_wr >= asked.max_send_wr, "{c:?} < {asked:?}");
    assert!(c.max_recv_wr >= asked.max_recv_wr, "{c:?} < {asked:?}");
    assert!((c.max_send_wr + 1).is_power_of_two(), "{c:?}");
    assert!((c.max_recv_wr + 1).is_power_of_two(), "{c:?}");
    (c.max_send_wr as usize, c.max_recv_wr as usize)
}

/// A small QP and small CQs: five times around every ring (SQ, RQ, both CQs), payloads and
/// wr_ids checked in order.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rings_wrap_around() {
    each_topo("rings_wrap_around", |t| {
        let o = Opts {
            caps: caps(4, 4, 1, 0),
            cqe_a: 4,
            cqe_b: 4,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &o);
        let sq = ring_capacity(&a.qp).0 as u32;
        let rq = ring_capacity(&b.qp).1 as u32;
        let (cqa, cqb) = (a.cq.cqe(), b.cq.cqe());
        let batch = sq.min(rq).min(cqa).min(cqb) as usize;
        // Ring slots are capacity + 1.
        let slots = sq.max(rq).max(cqa).max(cqb) as usize + 1;
        let rounds = (5 * slots).div_ceil(batch);
        eprintln!(
            "  SQ {sq}, RQ {rq}, CQs {cqa}/{cqb}: {rounds} rounds of {batch} = {} messages",
            rounds * batch
        );
        const MSG: usize = 64;
        let mut seq = 0u64;
        for _ in 0..rounds {
            let r = sge_slots(&b.mr, batch, MSG);
            let rw: Vec<MrRecvWr> = r
                .iter()
                .enumerate()
                .map(|(i, s)| recv(seq + i as u64, s))
                .collect();
            recv_ok(&b.qp, &rw);
            for i in 0..batch {
                let mut m = pattern(seq as u8 + i as u8, MSG);
                m[..8].copy_from_slice(&(seq + i as u64).to_ne_bytes());
                a.mr.write_at(i * MSG, &m);
            }
            let s = sge_slots(&a.mr, batch, MSG);
            let sw: Vec<MrSendWr> = s
                .iter()
                .enumerate()
                .map(|(i, s)| SendWr::send(seq + i as u64, s))
                .collect();
            send_ok(&a.qp, &sw);
            let sc = poll_n(&a.cq, batch);
            let rc = poll_n(&b.cq, batch);
            for i in 0..batch {
                let id = seq + i as u64;
                assert_wc(&sc[i], id, WcOpcode::SEND);
                assert_wc(&rc[i], id, WcOpcode::RECV);
                assert_eq!(rc[i].byte_len as usize, MSG);
                let got = &b.mr.to_vec()[i * MSG..(i + 1) * MSG];
                assert_eq!(u64_at(got, 0), id);
                assert_eq!(&got[8..], &a.mr.to_vec()[i * MSG + 8..(i + 1) * MSG]);
            }
            seq += batch as u64;
        }
        assert!(seq as usize >= 5 * slots);
        assert_quiet(&a.cq, "after the last round");
    });
}

/// A full SQ and a full RQ refuse the next WR with ENOMEM ("queue full") and never overwrite:
/// every accepted WR completes exactly once, in order, and the refused ones never appear.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn full_send_and_recv_queues() {
    each_topo("full_send_and_recv_queues", |t| {
        // SQ: a QP whose peer does not exist keeps every WQE waiting for its ACK.
        let s = Side::open(&t.dev_a);
        let peer = Side::open(&t.dev_b);
        let c = cq(&s, 64, None);
        let q = qp(&s, QpInit::rc(&c, caps(8, 1, 1, 0)));
        // In RESET nothing may be posted; the whole list is refused at its first request.
        let mr0 = reg(&s.pd, 64, ALL_ACCESS);
        let sg0 = [mr0.sge(0..8)];
        let e = post_send(&q, &[SendWr::send(0, &sg0), SendWr::send(1, &sg0)]).unwrap_err();
        let what = "the QP is in RESET: sends need RTS (connect first)";
        assert_eq!(e.to_string(), qp_post_msg(&q, "post send", 0, what, 0));
        let e = post_recv(&q, &[recv(0, &sg0)]).unwrap_err();
        let what = "the QP is in RESET: receives need INIT or later";
        assert_eq!(e.to_string(), qp_post_msg(&q, "post receive", 0, what, 0));
        drop(mr0);
        let slow = Path {
            timeout: 18, // ~1 s: nothing times out while we fill the queue
            ..NORMAL
        };
        rc_connect(&q, &s, 0x00ff_ff00, peer.gid, slow);
        let mr = reg(&s.pd, 4096, ALL_ACCESS);
        let cap = ring_capacity(&q).0;
        let sg = [mr.sge(0..8)];
        let wrs: Vec<MrSendWr> = (0..=cap as u64).map(|i| SendWr::send(i, &sg)).collect();
        let e = post_send(&q, &wrs).unwrap_err();
        assert_eq!(e.posted(), cap, "{e}");
        assert_eq!(errno(&e), Some(12), "ENOMEM: {e}");
        let what = format!("queue full ({cap} requests outstanding) (ENOMEM)");
        assert_eq!(e.to_string(), qp_post_msg(&q, "post send", cap, &what, cap));
        let e = post_send(&q, &[SendWr::send(99, &sg)]).unwrap_err();
        assert_eq!((e.posted(), errno(&e)), (0, Some(12)), "{e}");
        assert_quiet(&c, "WQEs waiting for an ACK");
        q.modify(&QpAttr {
            qp_state: Some(QpState::ERR),
            ..Default::default()
        })
        .unwrap();
        let wc = poll_n(&c, cap);
        for (i, w) in wc.iter().enumerate() {
            assert_status(w, i as u64, WcStatus::WR_FLUSH_ERR);
        }
        assert_quiet(&c, "flushed send queue");
        drop(q);

        // RQ.
        let (a, b) = rc_pair(t, &Opts::default());
        let cap = ring_capacity(&b.qp).1;
        let r = sge_slots(&b.mr, cap + 1, 64);
        let rw = recvs(0, &r);
        let e = post_recv(&b.qp, &rw).unwrap_err();
        assert_eq!(e.posted(), cap, "{e}");
        assert_eq!(errno(&e), Some(12), "ENOMEM: {e}");
        let what = format!("queue full ({cap} requests outstanding) (ENOMEM)");
        assert_eq!(
            e.to_string(),
            qp_post_msg(&b.qp, "post receive", cap, &what, cap)
        );
        for i in 0..cap {
            a.mr.write_at(i * 8, &(i as u64).to_ne_bytes());
        }
        let s = sge_slots(&a.mr, cap, 8);
        let sw: Vec<MrSendWr> = s
            .iter()
            .enumerate()
            .map(|(i, s)| SendWr::send(i as u64, s))
            .collect();
        send_ok(&a.qp, &sw);
        poll_n(&a.cq, cap);
        let rc = poll_n(&b.cq, cap);
        for (i, w) in rc.iter().enumerate() {
            assert_wc(w, i as u64, WcOpcode::RECV);
            assert_eq!(u64_at(&b.mr.to_vec(), i * 64), i as u64);
        }
        assert_quiet(&b.cq, "refused receive");
        // Room again.
        recv_ok(&b.qp, &[recv(1000, &r[0])]);
    });
}

/// A CQ that overflows keeps what it holds (never overwritten), reports CQ_ERR naming itself
/// on the async fd, and — on rxe 6.1, whose completer drops the CQE and goes on — the QP
/// keeps working.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn full_cq_keeps_its_entries() {
    each_topo("full_cq_keeps_its_entries", |t| {
        let (a, b) = rc_pair(
            t,
            &Opts {
                cqe_a: 2,
                ..Opts::default()
            },
        );
        let cap = a.cq.cqe() as usize;
        let n = cap + 2;
        let r = sge_slots(&b.mr, n, 64);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        let s = [a.mr.sge(0..8)];
        let sw: Vec<MrSendWr> = (0..n as u64).map(|i| SendWr::send(i, &s)).collect();
        send_ok(&a.qp, &sw);
        poll_n(&b.cq, n);
        let ev = async_event(&a.side.ctx, WAIT).expect("no CQ_ERR event for the full CQ");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::CQ_ERR,
                element: AsyncElement::Cq(a.cq.user_handle()),
            }
        );
        // The second dropped completion may come with a second event.
        std::thread::sleep(QUIET);
        while let Some(ev) = async_event(&a.side.ctx, Duration::ZERO) {
            assert_eq!(ev.event_type, AsyncEventType::CQ_ERR, "{ev:?}");
        }
        let wc = poll_n(&a.cq, cap);
        for (i, w) in wc.iter().enumerate() {
            assert_wc(w, i as u64, WcOpcode::SEND);
        }
        assert_quiet(&a.cq, "overflowed CQ");
        // Nothing hung: the QP still sends, and completes into the drained CQ.
        recv_ok(&b.qp, &[recv(100, &r[0])]);
        send_ok(&a.qp, &[SendWr::send(100, &s)]);
        assert_wc(&poll1(&a.cq), 100, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 100, WcOpcode::RECV);
        assert_eq!(state(&a.qp), QpState::RTS);
    });
}

// ---------------------------------------------------------------------------------------------
// UD

/// RESET → INIT → RTR → RTS for a UD QP with our qkey.
fn ud_ready(qp: &Qp) {
    for a in [
        QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(QKEY),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTR),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTS),
            sq_psn: Some(0),
            ..Default::default()
        },
    ] {
        qp.modify(&a)
            .unwrap_or_else(|e| panic!("UD QP {:#x}: {e}", qp.qp_num()));
    }
}

/// UD through an AH to the peer's GID: the 40-byte GRH heads the receive buffer (rxe puts the
/// IPv4 header in its last 20 bytes), byte_len counts it, the completion has GRH and src_qp;
/// a datagram with the wrong qkey is dropped.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ud_send_recv_with_grh() {
    each_topo("ud_send_recv_with_grh", |t| {
        let sa = Side::open(&t.dev_a);
        let sb = Side::open(&t.dev_b);
        let (ca, cb) = (cq(&sa, 16, None), cq(&sb, 16, None));
        let ud = |s: &Side, c: &Arc<Cq>| {
            qp(
                s,
                QpInit {
                    qp_type: QpType::UD,
                    ..QpInit::rc(c, caps(8, 8, 1, 0))
                },
            )
        };
        let (qa, qb) = (ud(&sa, &ca), ud(&sb, &cb));
        ud_ready(&qa);
        ud_ready(&qb);
        assert_eq!(qb.query().unwrap().qkey, QKEY);
        let ma = reg(&sa.pd, 4096, ALL_ACCESS);
        let mb = reg(&sb.pd, 8192, ALL_ACCESS);
        mb.fill(0..mb.len(), 0xee);
        let ah = Ah::create(&sa.pd, AhAttr::roce(1, sb.gid, sa.sgid))
            .unwrap_or_else(|e| panic!("create AH: {e}"));
        assert_ne!(ah.ah_num(), 0);

        let (m1, m2) = (pattern(12, 300), pattern(13, 200));
        ma.write_at(0, &m1);
        ma.write_at(512, &m2);
        let (r0, r1) = ([mb.sge(0..40 + 1024)], [mb.sge(4096..4096 + 40 + 1024)]);
        recv_ok(&qb, &[recv(1, &r0), recv(2, &r1)]);
        let (s1, s2) = ([ma.sge(0..300)], [ma.sge(512..712)]);
        send_ok(
            &qa,
            &[
                SendWr {
                    ud: Some(ah.ud_dest(qb.qp_num(), QKEY ^ 1)),
                    ..SendWr::send(10, &s1)
                },
                SendWr {
                    ud: Some(ah.ud_dest(qb.qp_num(), QKEY)),
                    ..SendWr::send(11, &s2)
                },
            ],
        );
        // UD has no ACK: both sends complete.
        let wc = poll_n(&ca, 2);
        assert_wc(&wc[0], 10, WcOpcode::SEND);
        assert_wc(&wc[1], 11, WcOpcode::SEND);
        let wc = poll1(&cb);
        assert_wc(&wc, 1, WcOpcode::RECV);
        assert_eq!(wc.byte_len, 40 + 200, "byte_len counts the GRH: {wc:?}");
        assert!(wc.wc_flags.contains(WcFlags::GRH), "{wc:?}");
        assert_eq!(wc.src_qp, qa.qp_num());
        assert_eq!(wc.qp_num, qb.qp_num());
        assert_quiet(&cb, "the datagram with the wrong qkey");
        let buf = mb.to_vec();
        assert_eq!(&buf[40..240], &m2[..]);
        assert_eq!(buf[240], 0xee);
        // RoCE v2 over IPv4: 20 zero bytes, then the IPv4 header.
        assert!(buf[..20].iter().all(|&x| x == 0), "{:?}", &buf[..20]);
        assert_eq!(buf[20], 0x45, "IPv4, 20-byte header");
        assert_eq!(buf[20 + 9], 17, "UDP");
        assert_eq!(&buf[32..36], &sa.ipv4(), "source address");
        assert_eq!(&buf[36..40], &sb.ipv4(), "destination address");

        // What UD cannot do is refused at post time.
        let e = post_send(&qa, &[SendWr::send(12, &s2)]).unwrap_err();
        assert!(
            e.to_string().contains("UD send without a destination"),
            "{e}"
        );
        let op = SendOp::RdmaWrite {
            remote_addr: mb.addr(),
            rkey: mb.rkey(),
        };
        let e = post_send(
            &qa,
            &[SendWr {
                ud: Some(ah.ud_dest(qb.qp_num(), QKEY)),
                ..wr(13, op, &s2)
            }],
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
        assert_quiet(&ca, "refused UD WRs");
        drop((qa, qb, ah));
    });
}

// ---------------------------------------------------------------------------------------------
// SRQ

/// Two QPs on one SRQ: each receives from it (the completion names the QP); posting to such
/// a QP is refused; the SRQ fills up with a clear error and wraps around five times.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn srq_shared_by_two_qps() {
    each_topo("srq_shared_by_two_qps", |t| {
        let sa = Side::open(&t.dev_a);
        let sb = Side::open(&t.dev_b);
        let srq = Srq::create(
            &sb.pd,
            SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap_or_else(|e| panic!("create SRQ: {e}"));
        // rxe sizes the ring to 2^n - 1 >= max_wr; the create response repeats the request,
        // query tells the ring's capacity.
        let cap = srq.query().unwrap().max_wr as usize;
        assert!(cap >= srq.attr().max_wr as usize);
        assert!((cap + 1).is_power_of_two(), "SRQ capacity {cap}");
        let (ca, cb) = (cq(&sa, 64, None), cq(&sb, 64, None));
        let on_srq = |c: &Arc<Cq>| QpInit {
            srq: Some(srq.clone()),
            ..QpInit::rc(c, caps(16, 0, 1, 0))
        };
        let a: Vec<Arc<Qp>> = (0..2)
            .map(|_| qp(&sa, QpInit::rc(&ca, caps(16, 1, 1, 0))))
            .collect();
        let b: Vec<Arc<Qp>> = (0..2).map(|_| qp(&sb, on_srq(&cb))).collect();
        for i in 0..2 {
            rc_connect(&a[i], &sa, b[i].qp_num(), sb.gid, NORMAL);
            rc_connect(&b[i], &sb, a[i].qp_num(), sa.gid, NORMAL);
        }
        let ma = reg(&sa.pd, 4096, ALL_ACCESS);
        let mb = reg(&sb.pd, 4096, ALL_ACCESS);
        const MSG: usize = 64;
        let r = sge_slots(&mb, cap + 1, MSG);

        let e = post_recv(&b[0], &[recv(0, &r[0])]).unwrap_err();
        assert_eq!(e.posted(), 0);
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        let what = "the QP uses an SRQ: post receives to the SRQ";
        assert_eq!(
            e.to_string(),
            qp_post_msg(&b[0], "post receive", 0, what, 0)
        );

        // Full: `cap` accepted, the next refused.
        let rw = recvs(0, &r);
        let e = post_srq(&srq, &rw).unwrap_err();
        assert_eq!(e.posted(), cap, "{e}");
        assert_eq!(errno(&e), Some(12), "ENOMEM: {e}");
        assert_eq!(
            e.to_string(),
            format!(
                "post receive to SRQ {:#x} on {}: work request #{cap}: queue full ({cap} requests \
                 outstanding) (ENOMEM); {cap} posted",
                srq.srq_num(),
                srq.pd().context().name()
            )
        );

        // Rounds of `cap` messages alternating between the two QPs; the SRQ holds `cap`
        // receives at the start of each round. Each message names its sender and number.
        let slots = cap + 1;
        let rounds = (5 * slots).div_ceil(cap) + 1;
        let mut seq = 0u64;
        for round in 0..rounds {
            if round > 0 {
                let rw = recvs(0, &r[..cap]);
                post_srq(&srq, &rw).unwrap_or_else(|e| panic!("post to SRQ: {e}"));
            }
            for i in 0..cap {
                ma.write_at(i * MSG, &(seq + i as u64).to_ne_bytes());
                ma.write_at(i * MSG + 8, &[(i % 2) as u8]);
            }
            let s = sge_slots(&ma, cap, MSG);
            for (i, sg) in s.iter().enumerate() {
                send_ok(&a[i % 2], &[SendWr::send(seq + i as u64, sg)]);
            }
            poll_n(&ca, cap);
            let rc = poll_n(&cb, cap);
            let mut got: Vec<u64> = rc
                .iter()
                .map(|w| {
                    assert_eq!((w.status, w.opcode), (WcStatus::SUCCESS, WcOpcode::RECV));
                    let buf = mb.read_vec(w.wr_id as usize * MSG..(w.wr_id as usize + 1) * MSG);
                    let from = buf[8] as usize;
                    assert_eq!(w.qp_num, b[from].qp_num(), "{w:?}");
                    u64_at(&buf, 0)
                })
                .collect();
            got.sort_unstable();
            let want: Vec<u64> = (seq..seq + cap as u64).collect();
            assert_eq!(got, want);
            seq += cap as u64;
        }
        eprintln!("  SRQ of {cap}: {seq} receives through it");
        assert_quiet(&cb, "after the last round");
    });
}

// ---------------------------------------------------------------------------------------------
// Error completions

/// The status of a send WR that fails locally at the requester (a wrong lkey, LOCAL_INV of a
/// user MR). rxe 6.1 completes it LOC_QP_OP_ERR. rxe 6.12 moves the QP to ERR first, and its
/// completer then flushes the whole send queue, the failed WR included: WR_FLUSH_ERR
/// (measured; docs/abi.md). Kernels between the two were not measured.
fn requester_local_error() -> WcStatus {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("kernel release");
    let mut v = r
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    if (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12) {
        WcStatus::WR_FLUSH_ERR
    } else {
        WcStatus::LOC_QP_OP_ERR
    }
}

/// A wrong lkey fails the WR at the requester (rxe 6.1: LOC_QP_OP_ERR; 6.12: WR_FLUSH_ERR, see
/// [`requester_local_error`]); the WR after it in the list is flushed; the responder sees
/// nothing.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_wrong_lkey() {
    each_topo("error_wrong_lkey", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        let bad = [Sge {
            lkey: a.mr.lkey() ^ 0x80,
            ..a.mr.sge(0..16).raw()
        }];
        let good = [a.mr.sge(0..16).raw()];
        send_raw_ok(&a.qp, &[SendWr::send(1, &bad), SendWr::send(2, &good)]);
        let wc = poll_n(&a.cq, 2);
        // rxe 6.1: the lkey lookup fails with EINVAL (not EFAULT) in copy_data(), which the
        // requester reports as LOC_QP_OP_ERR rather than LOC_PROT_ERR.
        assert_status(&wc[0], 1, requester_local_error());
        assert_status(&wc[1], 2, WcStatus::WR_FLUSH_ERR);
        assert_eq!(state(&a.qp), QpState::ERR);
        assert_quiet(&b.cq, "responder of a failed request");
    });
}

/// A receive whose `Mr` is dropped before data arrives completes with an error: deregistration
/// cuts the device off (the argument docs/architecture.md's "Why this is sound" makes for the
/// safe post path), and nothing is written to the freed buffer.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn dropped_mr_fails_its_receive() {
    each_topo("dropped_mr_fails_its_receive", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        let gone = reg(&b.side.pd, 4096, ALL_ACCESS);
        let r = [gone.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        drop(gone);
        a.mr.write_at(0, b"too late");
        let s = [a.mr.sge(0..8)];
        send_ok(&a.qp, &[SendWr::send(2, &s)]);
        let wc = poll1(&b.cq);
        assert_eq!(wc.wr_id, 1, "{wc:?}");
        assert!(
            !wc.status.is_success(),
            "a receive into a deregistered region must fail: {wc:?}"
        );
        let sc = poll1(&a.cq);
        assert_eq!(sc.wr_id, 2, "{sc:?}");
        assert!(!sc.status.is_success(), "the send cannot land: {sc:?}");
    });
}

/// A wrong rkey: REM_ACCESS_ERR at the requester; the responder goes to ERR and flushes its
/// posted receive.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_wrong_rkey() {
    each_topo("error_wrong_rkey", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        for read in [false, true] {
            let (a, b) = rc_pair(t, &fast);
            let r = [b.mr.sge(0..64)];
            recv_ok(&b.qp, &[recv(1, &r)]);
            let s = [a.mr.sge(0..16)];
            let (remote_addr, rkey) = (b.mr.addr(), b.mr.rkey() ^ 0x80);
            let op = if read {
                SendOp::RdmaRead { remote_addr, rkey }
            } else {
                SendOp::RdmaWrite { remote_addr, rkey }
            };
            send_ok(&a.qp, &[wr(1, op, &s)]);
            assert_status(&poll1(&a.cq), 1, WcStatus::REM_ACCESS_ERR);
            assert_status(&poll1(&b.cq), 1, WcStatus::WR_FLUSH_ERR);
            assert_eq!(state(&b.qp), QpState::ERR);
            assert_eq!(state(&a.qp), QpState::ERR);
        }
    });
}

/// Remote access the MR does not grant: WRITE to an MR without REMOTE_WRITE, READ from one
/// without REMOTE_READ, atomics on one without REMOTE_ATOMIC — REM_ACCESS_ERR each time, and
/// the remote memory unchanged. What the MR grants works.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_remote_access_not_granted() {
    each_topo("error_remote_access_not_granted", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let lw = AccessFlags::LOCAL_WRITE;
        for (name, access, denied) in [
            ("REMOTE_WRITE", lw | AccessFlags::REMOTE_READ, 0),
            ("REMOTE_READ", lw | AccessFlags::REMOTE_WRITE, 1),
            ("REMOTE_ATOMIC", lw | AccessFlags::REMOTE_READ, 2),
        ] {
            let (a, b) = rc_pair(t, &fast);
            let m = reg(&b.side.pd, 4096, access);
            m.write_at(0, &7u64.to_ne_bytes());
            a.mr.write_at(0, &1u64.to_ne_bytes());
            let (remote_addr, rkey) = (m.addr(), m.rkey());
            let s = [a.mr.sge(0..8)];
            // First what the MR grants.
            let allowed = if access.contains(AccessFlags::REMOTE_READ) {
                SendOp::RdmaRead { remote_addr, rkey }
            } else {
                SendOp::RdmaWrite {
                    remote_addr: remote_addr + 64,
                    rkey,
                }
            };
            let s2 = [a.mr.sge(64..72)];
            send_ok(&a.qp, &[wr(1, allowed, &s2)]);
            assert_status(&poll1(&a.cq), 1, WcStatus::SUCCESS);
            let op = match denied {
                0 => SendOp::RdmaWrite { remote_addr, rkey },
                1 => SendOp::RdmaRead { remote_addr, rkey },
                _ => SendOp::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add: 1,
                },
            };
            send_ok(&a.qp, &[wr(2, op, &s)]);
            let wc = poll1(&a.cq);
            assert_eq!(
                (wc.wr_id, wc.status),
                (2, WcStatus::REM_ACCESS_ERR),
                "without {name}: {wc:?}"
            );
            assert_eq!(u64_at(&m.to_vec(), 0), 7, "remote memory changed");
            assert_eq!(state(&b.qp), QpState::ERR);
            drop((a, b));
        }
    });
}

/// A receive buffer too small for the SEND: statuses at both ends as rxe 6.1 reports them
/// (measured: LOC_QP_OP_ERR / REM_OP_ERR), both QPs in ERR.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_receive_buffer_too_small() {
    each_topo("error_receive_buffer_too_small", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        let r = [b.mr.sge(0..16)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        let s = [a.mr.sge(0..100)];
        send_ok(&a.qp, &[SendWr::send(1, &s)]);
        let rw = poll1(&b.cq);
        let sw = poll1(&a.cq);
        eprintln!("  receive too small: receiver {rw:?}, sender {sw:?}");
        // rxe 6.1's copy_data() answers "more bytes than the receive has" with EINVAL, not
        // ENOSPC, so the responder treats it as a malformed WQE (class A): LOC_QP_OP_ERR at
        // the receiver and a REM_OP_ERR NAK to the sender — not LOC_LEN_ERR/REM_INV_REQ_ERR.
        assert_status(&rw, 1, WcStatus::LOC_QP_OP_ERR);
        assert_status(&sw, 1, WcStatus::REM_OP_ERR);
        assert_eq!(state(&b.qp), QpState::ERR);
        assert_eq!(state(&a.qp), QpState::ERR);
    });
}

/// No receive posted and rnr_retry 0: RNR_RETRY_EXC_ERR at the sender, nothing at the
/// receiver.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_rnr_retry_exceeded() {
    each_topo("error_rnr_retry_exceeded", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        assert_eq!(a.qp.query().unwrap().rnr_retry, 0);
        let s = [a.mr.sge(0..8)];
        let start = Instant::now();
        send_ok(&a.qp, &[SendWr::send(1, &s), SendWr::send(2, &s)]);
        let wc = poll_n(&a.cq, 2);
        assert_status(&wc[0], 1, WcStatus::RNR_RETRY_EXC_ERR);
        assert_status(&wc[1], 2, WcStatus::WR_FLUSH_ERR);
        eprintln!("  RNR_RETRY_EXC_ERR after {:?}", start.elapsed());
        assert_eq!(state(&a.qp), QpState::ERR);
        assert_quiet(&b.cq, "receiver without receives");
        assert_eq!(state(&b.qp), QpState::RTS);
    });
}

/// Moving a QP to ERR flushes every posted receive with WR_FLUSH_ERR, in order; a send
/// posted in ERR is flushed too.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_flush_after_err() {
    each_topo("error_flush_after_err", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let r = sge_slots(&b.mr, 4, 64);
        let rw = recvs(40, &r);
        recv_ok(&b.qp, &rw);
        assert_quiet(&b.cq, "posted receives");
        let to_err = QpAttr {
            qp_state: Some(QpState::ERR),
            ..Default::default()
        };
        b.qp.modify(&to_err).unwrap();
        let wc = poll_n(&b.cq, 4);
        for (i, w) in wc.iter().enumerate() {
            assert_status(w, 40 + i as u64, WcStatus::WR_FLUSH_ERR);
            assert_eq!(w.qp_num, b.qp.qp_num());
        }
        assert_quiet(&b.cq, "flushed receive queue");

        a.qp.modify(&to_err).unwrap();
        let s = [a.mr.sge(0..8)];
        send_ok(&a.qp, &[SendWr::send(7, &s)]);
        assert_status(&poll1(&a.cq), 7, WcStatus::WR_FLUSH_ERR);
    });
}

// ---------------------------------------------------------------------------------------------
// Completion events

/// The scheduler state of thread `tid` of this process ('S' = asleep).
fn thread_state(tid: &str) -> char {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .unwrap_or_else(|e| panic!("stat of thread {tid}: {e}"));
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    after.chars().next().unwrap()
}

/// Completion events: a waiter asleep in `Cq::wait_event` on one thread is woken by a SEND
/// posted from another after a delay; arming then re-polling finds a completion that came
/// before the arm (which raised no event); solicited-only arming ignores an unsolicited SEND
/// and wakes on a SOLICITED one.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn completion_events() {
    each_topo("completion_events", |t| {
        let (a, b) = rc_pair(
            t,
            &Opts {
                channel_b: true,
                ..Opts::default()
            },
        );
        let ch = b.cq.channel().expect("channel").clone();
        let r = sge_slots(&b.mr, 8, 64);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        let s = [a.mr.sge(0..8)];

        // 1. Arm, re-poll (empty), sleep in wait_event; another thread posts after DELAY.
        const DELAY: Duration = Duration::from_millis(300);
        assert!(b.cq.poll_one().is_none());
        b.cq.req_notify(false).unwrap();
        assert!(b.cq.poll_one().is_none(), "re-poll after arming");
        let (tx, rx) = std::sync::mpsc::channel();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let cq_b = b.cq.clone();
        // Not scoped: if the event never comes, the test fails on the timeout below instead
        // of joining a thread that sleeps forever.
        std::thread::spawn(move || {
            // Taken before the poster exists (it starts once we have sent our tid), so the
            // time to the wake-up is at least the poster's delay.
            let t0 = Instant::now();
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let tid = me.file_name().unwrap().to_string_lossy().into_owned();
            tid_tx.send(tid).unwrap();
            let r = cq_b.wait_event().map_err(|e| e.to_string());
            let _ = tx.send((r, t0, Instant::now()));
        });
        let tid = tid_rx.recv_timeout(WAIT).expect("waiter thread started");
        let posted_at = std::thread::scope(|sc| {
            let poster = sc.spawn(|| {
                std::thread::sleep(DELAY);
                let at = Instant::now();
                send_ok(&a.qp, &[SendWr::send(1, &s)]);
                at
            });
            std::thread::sleep(DELAY / 2);
            assert_eq!(thread_state(&tid), 'S', "the waiter is not asleep");
            poster.join().unwrap()
        });
        let (res, t0, woke) = rx.recv_timeout(WAIT).expect("no completion event");
        res.unwrap_or_else(|e| panic!("wait_event: {e}"));
        assert!(woke >= posted_at, "woke before the post");
        let waited = woke - t0;
        assert!(
            waited >= DELAY,
            "woke after {waited:?}, less than the poster's delay"
        );
        b.cq.ack_events(1);
        assert_wc(&poll1(&b.cq), 0, WcOpcode::RECV);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);

        // 2. A completion that arrives unarmed raises no event, not even when the CQ is armed
        //    afterwards: the re-poll after arming is what finds it.
        send_ok(&a.qp, &[SendWr::send(2, &s)]);
        // The sender's completion follows the receiver's CQE (rxe completes, then ACKs).
        assert_wc(&poll1(&a.cq), 2, WcOpcode::SEND);
        b.cq.req_notify(false).unwrap();
        assert_wc(
            &b.cq.poll_one().expect("re-poll after arming"),
            1,
            WcOpcode::RECV,
        );
        assert!(
            !ch.wait(Some(QUIET)).unwrap(),
            "event for a pre-arm completion"
        );
        // Still armed: the next completion raises one.
        send_ok(&a.qp, &[SendWr::send(3, &s)]);
        assert!(ch.wait(Some(WAIT)).unwrap(), "no event for an armed CQ");
        b.cq.wait_event().unwrap();
        b.cq.ack_events(1);
        assert_wc(&poll1(&b.cq), 2, WcOpcode::RECV);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);

        // 3. Solicited only: an unsolicited SEND raises nothing, a SOLICITED one does.
        b.cq.req_notify(true).unwrap();
        assert!(b.cq.poll_one().is_none());
        send_ok(&a.qp, &[SendWr::send(4, &s)]);
        assert_wc(&poll1(&a.cq), 4, WcOpcode::SEND);
        assert!(
            !ch.wait(Some(QUIET)).unwrap(),
            "event for an unsolicited SEND"
        );
        send_ok(
            &a.qp,
            &[SendWr {
                flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
                ..SendWr::send(5, &s)
            }],
        );
        assert!(
            ch.wait(Some(WAIT)).unwrap(),
            "no event for a SOLICITED send"
        );
        b.cq.wait_event().unwrap();
        b.cq.ack_events(1);
        let wc = poll_n(&b.cq, 2);
        assert_wc(&wc[0], 3, WcOpcode::RECV);
        assert_wc(&wc[1], 4, WcOpcode::RECV);
        assert_wc(&poll1(&a.cq), 5, WcOpcode::SEND);
        assert!(ch.try_get_event().unwrap().is_none());
    });
}

// ---------------------------------------------------------------------------------------------
// Async events

/// Async events through `Context::get_async_event` with a timeout, each naming its object:
/// SQ_DRAINED for a QP moved to SQD, SRQ_LIMIT_REACHED for an armed SRQ. rxe 6.1 raises no
/// QP_FATAL / QP_REQ_ERR / QP_ACCESS_ERR at all (its requester, completer and responder move
/// a QP to ERR without an event): after a remote access violation neither side gets one.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_events() {
    each_topo("async_events", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        assert_eq!(async_event(&a.side.ctx, Duration::ZERO), None);

        // SQ_DRAINED, naming the QP.
        a.qp.modify(&QpAttr {
            qp_state: Some(QpState::SQD),
            en_sqd_async_notify: Some(true),
            ..Default::default()
        })
        .unwrap();
        let ev = async_event(&a.side.ctx, WAIT).expect("no SQ_DRAINED event");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::SQ_DRAINED,
                element: AsyncElement::Qp(a.qp.user_handle()),
            }
        );
        assert_eq!(state(&a.qp), QpState::SQD);
        a.qp.modify(&QpAttr {
            qp_state: Some(QpState::RTS),
            ..Default::default()
        })
        .unwrap();
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        let s = [a.mr.sge(0..8)];
        send_ok(&a.qp, &[SendWr::send(1, &s)]);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 1, WcOpcode::RECV);

        // A remote access violation: both QPs end in ERR, and no QP event is raised.
        let op = SendOp::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey() ^ 0x80,
        };
        send_ok(&a.qp, &[wr(2, op, &s)]);
        assert_status(&poll1(&a.cq), 2, WcStatus::REM_ACCESS_ERR);
        assert_eq!(state(&b.qp), QpState::ERR);
        for ctx in [&a.side.ctx, &b.side.ctx] {
            assert_eq!(
                async_event(ctx, QUIET),
                None,
                "rxe 6.1 raised a QP error event"
            );
        }

        // SRQ_LIMIT_REACHED, naming the SRQ: 6 receives, limit 4, three consumed.
        let sa = &a.side;
        let sb = &b.side;
        let srq = Srq::create(
            &sb.pd,
            SrqAttr {
                max_wr: 8,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
        let (ca, cb) = (cq(sa, 16, None), cq(sb, 16, None));
        let qa = qp(sa, QpInit::rc(&ca, caps(8, 1, 1, 0)));
        let qb = qp(
            sb,
            QpInit {
                srq: Some(srq.clone()),
                ..QpInit::rc(&cb, caps(8, 0, 1, 0))
            },
        );
        rc_connect(&qa, sa, qb.qp_num(), sb.gid, NORMAL);
        rc_connect(&qb, sb, qa.qp_num(), sa.gid, NORMAL);
        let r = sge_slots(&b.mr, 6, 64);
        let rw = recvs(0, &r);
        post_srq(&srq, &rw).unwrap();
        srq.set_limit(4).unwrap();
        assert_eq!(srq.query().unwrap().srq_limit, 4);
        for i in 0..2 {
            send_ok(&qa, &[SendWr::send(i, &s)]);
        }
        poll_n(&cb, 2);
        assert_eq!(
            async_event(sb.ctx.as_ref(), QUIET),
            None,
            "4 left: not below 4"
        );
        send_ok(&qa, &[SendWr::send(2, &s)]);
        poll_n(&cb, 1);
        let ev = async_event(&sb.ctx, WAIT).expect("no SRQ_LIMIT_REACHED event");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::SRQ_LIMIT_REACHED,
                element: AsyncElement::Srq(srq.user_handle()),
            }
        );
        // One-shot: the limit is disarmed.
        assert_eq!(srq.query().unwrap().srq_limit, 0);
        poll_n(&ca, 3);
        drop((qa, qb));
    });
}

// ---------------------------------------------------------------------------------------------
// Sharing queues between threads

/// Work requests a thread may have outstanding on one queue of [`threads_share_queues`]: a
/// request counts from its post until its completion is polled.
struct Credits(std::sync::atomic::AtomicUsize);

impl Credits {
    fn take(&self) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        self.0
            .fetch_update(AcqRel, Relaxed, |c| c.checked_sub(1))
            .is_ok()
    }
    fn give(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Threads share one QP, its CQs and (in the SRQ variant) one SRQ, as the `Sync` objects
/// allow: three threads post inline sends to the same send queue, two post receives to the
/// same receive queue (or SRQ), one thread polls each CQ. The queues hold 15 requests and the
/// posters may have 32 outstanding, so they keep finding a queue full and retrying while the
/// kernel drains it. Every send and receive must complete exactly once, and each sender's
/// messages must arrive in the order that thread posted them: a WQE overwritten or published
/// twice by two posters racing on one ring would break one or the other.
///
/// The credits are what keeps the CQs from overflowing: rxe frees a work queue slot when the
/// kernel completes the request, before its completion is polled, so a queue that accepts a
/// post says nothing about room in the CQ (with 64-entry CQs and only the queue-full
/// retries, this test overflowed both CQs at 127 completions and stalled). A request counts
/// against its CQ until it is polled, as the verbs rules have it.
fn threads_share_queues(t: &Topo, use_srq: bool) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    const SENDERS: u64 = 3;
    const PER_SENDER: u64 = 300;
    const TOTAL: usize = (SENDERS * PER_SENDER) as usize;
    const SLOT: usize = 64;
    const DEPTH: u32 = 8;
    const OUTSTANDING: usize = 32;
    const LIMIT: Duration = Duration::from_secs(60);
    const _: () = assert!(TOTAL * SLOT <= MR_LEN);
    let sa = Side::open(&t.dev_a);
    let sb = Side::open(&t.dev_b);
    let srq = use_srq.then(|| {
        Srq::create(
            &sb.pd,
            SrqAttr {
                max_wr: DEPTH,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap_or_else(|e| panic!("create SRQ: {e}"))
    });
    let (ca, cb) = (cq(&sa, 64, None), cq(&sb, 64, None));
    let qa = qp(&sa, QpInit::rc(&ca, caps(DEPTH, 1, 1, 64)));
    let rq_depth = if use_srq { 0 } else { DEPTH };
    let qb = qp(
        &sb,
        QpInit {
            srq: srq.clone(),
            ..QpInit::rc(&cb, caps(DEPTH, rq_depth, 1, 64))
        },
    );
    rc_connect(&qa, &sa, qb.qp_num(), sb.gid, NORMAL);
    rc_connect(&qb, &sb, qa.qp_num(), sa.gid, NORMAL);
    let mb = reg(&sb.pd, MR_LEN, ALL_ACCESS);
    let (send_credits, recv_credits) = (
        Credits(AtomicUsize::new(OUTSTANDING)),
        Credits(AtomicUsize::new(OUTSTANDING)),
    );
    // Progress, for the message of a run that does not finish.
    let posted: [AtomicUsize; SENDERS as usize] = Default::default();
    let (nfull, nsent, nrposted, nrecv) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let start = Instant::now();
    let in_time = |what: &str| {
        assert!(
            start.elapsed() < LIMIT,
            "{what}: not done after {LIMIT:?}: sends posted per thread {:?}, send \
             completions {}, receives posted {}, receive completions {}",
            posted.iter().map(|p| p.load(Relaxed)).collect::<Vec<_>>(),
            nsent.load(Relaxed),
            nrposted.load(Relaxed),
            nrecv.load(Relaxed)
        );
        std::thread::yield_now();
    };
    let full = |e: &PostError| {
        let f = e.posted() == 0 && errno(e) == Some(12);
        if f {
            nfull.fetch_add(1, Relaxed);
        }
        f
    };

    let (sent, arrived) = std::thread::scope(|sc| {
        for tid in 0..SENDERS {
            let (qa, credits, posted) = (&qa, &send_credits, &posted[tid as usize]);
            let (in_time, full) = (&in_time, &full);
            sc.spawn(move || {
                for seq in 0..PER_SENDER {
                    // Inline: the bytes are copied into the WQE during the post.
                    let msg = (tid << 32 | seq).to_ne_bytes();
                    let sge = [Sge {
                        addr: msg.as_ptr() as u64,
                        length: msg.len() as u32,
                        lkey: 0,
                    }];
                    let wr = SendWr {
                        flags: SendFlags::SIGNALED | SendFlags::INLINE,
                        ..SendWr::send(tid << 32 | seq, &sge)
                    };
                    while !credits.take() {
                        in_time("sender, waiting for a send completion");
                    }
                    while let Err(e) = post_send_raw(qa, &[wr]) {
                        assert!(full(&e), "sender {tid}, message {seq}: {e}");
                        in_time("sender, send queue full");
                    }
                    posted.fetch_add(1, Relaxed);
                }
            });
        }
        for half in 0..2 {
            let (qb, srq, mb, credits) = (&qb, &srq, &mb, &recv_credits);
            let (in_time, full, nrposted) = (&in_time, &full, &nrposted);
            sc.spawn(move || {
                for slot in (half..TOTAL).step_by(2) {
                    let sge = [mb.sge(slot * SLOT..(slot + 1) * SLOT)];
                    let wr = [recv(slot as u64, &sge)];
                    while !credits.take() {
                        in_time("receive poster, waiting for a receive completion");
                    }
                    loop {
                        let r = match srq {
                            Some(s) => post_srq(s, &wr),
                            None => post_recv(qb, &wr),
                        };
                        match r {
                            Ok(()) => break,
                            Err(e) => assert!(full(&e), "receive slot {slot}: {e}"),
                        }
                        in_time("receive poster, receive queue full");
                    }
                    nrposted.fetch_add(1, Relaxed);
                }
            });
        }
        let sends = sc.spawn(|| {
            let mut seen = std::collections::HashSet::new();
            let mut wc = [WorkCompletion::default(); 16];
            while seen.len() < TOTAL {
                let n = ca.poll(&mut wc);
                for w in &wc[..n] {
                    assert_wc(w, w.wr_id, WcOpcode::SEND);
                    assert!(seen.insert(w.wr_id), "send {:#x} completed twice", w.wr_id);
                    nsent.fetch_add(1, Relaxed);
                    send_credits.give();
                }
                if n == 0 {
                    in_time("send completions");
                }
            }
            seen
        });
        let recvs = sc.spawn(|| {
            let mut order = Vec::with_capacity(TOTAL);
            let mut wc = [WorkCompletion::default(); 16];
            while order.len() < TOTAL {
                let n = cb.poll(&mut wc);
                for w in &wc[..n] {
                    assert_wc(w, w.wr_id, WcOpcode::RECV);
                    assert_eq!(w.byte_len, 8, "receive slot {}", w.wr_id);
                    assert_eq!(w.qp_num, qb.qp_num());
                    order.push(w.wr_id as usize);
                    nrecv.fetch_add(1, Relaxed);
                    recv_credits.give();
                }
                if n == 0 {
                    in_time("receive completions");
                }
            }
            order
        });
        (sends.join().unwrap(), recvs.join().unwrap())
    });

    let want: std::collections::HashSet<u64> = (0..SENDERS)
        .flat_map(|tid| (0..PER_SENDER).map(move |seq| tid << 32 | seq))
        .collect();
    assert_eq!(sent, want, "the send completions");
    let mut slots = arrived.clone();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), TOTAL, "a receive slot completed twice");
    // Nothing is in flight now: the receive buffer can be read.
    let mut next = [0u64; SENDERS as usize];
    for slot in arrived {
        let v = u64_at(&mb.to_vec()[slot * SLOT..], 0);
        let (tid, seq) = ((v >> 32) as usize, v & 0xffff_ffff);
        assert!(tid < SENDERS as usize, "slot {slot} holds {v:#x}");
        assert_eq!(
            seq, next[tid],
            "sender {tid}'s messages out of order (slot {slot})"
        );
        next[tid] += 1;
    }
    assert_eq!(next, [PER_SENDER; SENDERS as usize]);
    assert_quiet(&ca, "send CQ after the run");
    assert_quiet(&cb, "receive CQ after the run");
    // The posters did meet full queues (what makes this a test of racing on a full ring).
    assert!(
        nfull.load(Relaxed) > 0,
        "no post found its queue full: the run did not exercise the full-queue retries"
    );
    eprintln!(
        "threads_share_queues (SRQ: {use_srq}): {} posts found their queue full",
        nfull.load(Relaxed)
    );
    drop((qa, qb));
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn threads_share_a_qp_and_its_cqs() {
    each_topo("threads_share_a_qp_and_its_cqs", |t| {
        threads_share_queues(t, false)
    });
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn threads_share_an_srq() {
    each_topo("threads_share_an_srq", |t| threads_share_queues(t, true));
}

/// A receive CQ that overflows (docs/architecture.md, "CQ room on rxe"): the receive queue
/// keeps accepting posts while their completions pile up unpolled; past the CQ's capacity the
/// kernel raises `CQ_ERR` for the CQ and, unlike a full send CQ (`full_cq_keeps_its_entries`),
/// moves the receiving QP to the error state.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn full_receive_cq_moves_the_qp_to_err() {
    each_topo("full_receive_cq_moves_the_qp_to_err", |t| {
        // B's CQ: 4 asked, rxe gives 7 (2^n - 1); it gets 8 unpolled receive completions.
        let (a, b) = rc_pair(
            t,
            &Opts {
                cqe_b: 4,
                ..Opts::default()
            },
        );
        let cap_b = b.cq.cqe() as usize;
        assert!((4..16).contains(&cap_b), "B's CQ holds {cap_b}");
        let s = [a.mr.sge(0..8)];
        let r = sge_slots(&b.mr, cap_b + 1, 64);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        for i in 0..cap_b {
            send_ok(&a.qp, &[SendWr::send(i as u64, &s)]);
            assert_wc(&poll1(&a.cq), i as u64, WcOpcode::SEND);
        }
        // The one too many: B's responder cannot complete it.
        send_ok(&a.qp, &[SendWr::send(99, &s)]);
        let ev = async_event(&b.side.ctx, WAIT).expect("no CQ_ERR event for B's full CQ");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::CQ_ERR,
                element: AsyncElement::Cq(b.cq.user_handle()),
            }
        );
        assert_eq!(state(&b.qp), QpState::ERR, "B's QP after its CQ overflowed");
        // What the CQ held stays: the first receives, in order.
        for (i, w) in poll_n(&b.cq, cap_b).iter().enumerate() {
            assert_wc(w, i as u64, WcOpcode::RECV);
        }
    });
}
