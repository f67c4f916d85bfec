//! The cases of the battery, on the device itself: each opens its own context and builds its
//! own objects (two QPs of one device in loopback), checks what came back byte by byte, and
//! tears everything down. Every wait ends at the case's deadline with an error naming what
//! did not come.

use std::sync::Arc;
use std::time::Instant;

use rverbs::rc::{RcPath, RcRemote};
use rverbs::uverbs::ah::{Ah, AhAttr};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::context::Context;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::port::{LinkLayer, Mtu};
use rverbs::uverbs::qp::{Qp, QpAttr, QpCaps, QpInit, QpState, QpType};
use rverbs::uverbs::srq::{Srq, SrqAttr};
use rverbs::uverbs::WorkCompletion;
use rverbs::uverbs::{RecvWr, SendFlags, SendOp, SendWr, Sge, WcFlags, WcOpcode, WcStatus};

use super::cm;
use super::plan::Case;

mod errors;
use errors::*;

/// What every case needs to know about the device under test.
#[derive(Clone, Debug)]
pub struct Env {
    pub dev: String,
    pub port: u8,
    pub link_layer: LinkLayer,
    pub lid: u16,
    /// The GID index and GID the loopback address handles use (RoCE: a RoCE v2 GID).
    pub sgid_index: u8,
    pub gid: [u8; 16],
    pub mtu: Mtu,
    /// The device does atomics: regions are registered for remote atomic access.
    pub atomics: bool,
    /// iWARP: the RC cases' QPs are connected through the rdma_cm ([`cm::link`]), not by
    /// hand.
    pub iwarp: bool,
    /// EFA: loopback address handles name the GID (EFA's AHs are made from it).
    pub efa: bool,
    /// The rdma_cm's address (each listener takes a port the rdma_cm picks: `cm::link`).
    pub cm_addr: Option<String>,
}

/// A case that ran to its end: passed, or found at run time that the device cannot do it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Skip(String),
}

/// `Err` is a failure, with why.
pub type CaseResult = Result<Outcome, String>;

/// Runs `case` on `env`, giving up at `end`.
pub fn run(case: Case, env: &Env, end: Instant) -> CaseResult {
    match case {
        Case::RcSend => send(env, end, QpType::RC, None),
        Case::RcSendImm => send(env, end, QpType::RC, Some(IMM)),
        Case::RcWrite => write(env, end, QpType::RC, None),
        Case::RcWriteImm => write(env, end, QpType::RC, Some(IMM)),
        Case::RcRead => read(env, end),
        Case::RcInline => inline(env, end),
        Case::RcFetchAdd => fetch_add(env, end),
        Case::RcCmpSwap => cmp_swap(env, end),
        Case::RcSrq => srq(env, end),
        Case::RcEvents => events(env, end),
        Case::RcErrRkey if env.iwarp => err_rkey_iwarp(env, end),
        Case::RcErrLkey => err_lkey(env, end),
        Case::RcErrFlush if env.iwarp => err_flush_iwarp(env, end),
        Case::RcErrRkey => err_rkey(env, end),
        Case::RcErrFlush => err_flush(env, end),
        Case::UcSend => send(env, end, QpType::UC, None),
        Case::UcWriteImm => write(env, end, QpType::UC, Some(IMM)),
        Case::UdSend => ud(env, end),
        Case::CmRc => cm::rc(env, end),
        Case::SrdSend => srd(env, end),
    }
}

/// Immediate data with four distinct bytes: a byte-order mistake cannot go unnoticed.
const IMM: u32 = 0x1234_5678;
/// A message of three packets at MTU 1024.
const MSG: usize = 3000;
const MR_LEN: usize = 16 * 1024;
const PSN: u32 = 0x100;
const QKEY: u32 = 0x1111_2222;

/// `map_err` helper: "`what`: error".
pub(super) fn ctx<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// `len` bytes that differ from every other seed's.
pub(super) fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(101))
                ^ (i >> 8) as u8
        })
        .collect()
}

/// Polls `cq` until a completion arrives or `end` passes.
pub(super) fn wait_wc(cq: &Cq, end: Instant, what: &str) -> Result<WorkCompletion, String> {
    loop {
        if let Some(wc) = cq.poll_one() {
            return Ok(wc);
        }
        if Instant::now() >= end {
            return Err(format!(
                "no completion for {what} within the case's timeout"
            ));
        }
        std::thread::yield_now();
    }
}

/// The next completion of `cq`, which must be a successful `op` for `wr_id`.
pub(super) fn ok_wc(
    cq: &Cq,
    end: Instant,
    wr_id: u64,
    op: WcOpcode,
    what: &str,
) -> Result<WorkCompletion, String> {
    let wc = wait_wc(cq, end, what)?;
    check_wc(&wc, wr_id, op, what)?;
    Ok(wc)
}

pub(super) fn check_wc(
    wc: &WorkCompletion,
    wr_id: u64,
    op: WcOpcode,
    what: &str,
) -> Result<(), String> {
    if wc.status != WcStatus::SUCCESS {
        return Err(format!(
            "{what}: completion status {} ({}), vendor_err {:#x}",
            wc.status, wc.status.0, wc.vendor_err
        ));
    }
    if (wc.wr_id, wc.opcode) != (wr_id, op) {
        return Err(format!(
            "{what}: completion of wr_id {} opcode {}, expected wr_id {wr_id} opcode {op}",
            wc.wr_id, wc.opcode
        ));
    }
    Ok(())
}

/// The next completion of `cq`, which must have `status` for `wr_id`.
fn status_wc(
    cq: &Cq,
    end: Instant,
    wr_id: u64,
    status: WcStatus,
    what: &str,
) -> Result<(), String> {
    let wc = wait_wc(cq, end, what)?;
    if (wc.wr_id, wc.status) != (wr_id, status) {
        return Err(format!(
            "{what}: completion of wr_id {} with status {} ({}), expected wr_id {wr_id} with {} \
             ({})",
            wc.wr_id, wc.status, wc.status.0, status, status.0
        ));
    }
    Ok(())
}

pub(super) fn same_bytes(got: &[u8], want: &[u8], what: &str) -> Result<(), String> {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        None if got.len() == want.len() => Ok(()),
        None => Err(format!(
            "{what}: {} bytes, expected {}",
            got.len(),
            want.len()
        )),
        Some(i) => Err(format!(
            "{what}: byte {i} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        )),
    }
}

fn u64_at(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[..8]);
    u64::from_ne_bytes(v)
}

/// The address of the device's own port: the loopback destination.
fn loop_ah(env: &Env) -> AhAttr {
    if env.link_layer == LinkLayer::ETHERNET || env.efa {
        AhAttr::roce(env.port, env.gid, env.sgid_index)
    } else {
        AhAttr {
            dlid: env.lid,
            port_num: env.port,
            ..AhAttr::default()
        }
    }
}

fn access(env: &Env, qp_type: QpType) -> AccessFlags {
    let mut a = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    if qp_type == QpType::RC {
        a |= AccessFlags::REMOTE_READ;
        if env.atomics {
            a |= AccessFlags::REMOTE_ATOMIC;
        }
    }
    a
}

/// How to build a [`Pair`].
#[derive(Clone, Copy)]
struct PairOpts {
    qp_type: QpType,
    /// B takes its receives from an SRQ.
    srq: bool,
    /// B's CQ has a completion channel.
    channel: bool,
    /// Give up quickly on errors (one retry, no RNR retry): for the error cases.
    fast_fail: bool,
    inline: u32,
}

impl PairOpts {
    fn of(qp_type: QpType) -> PairOpts {
        PairOpts {
            qp_type,
            srq: false,
            channel: false,
            fast_fail: false,
            inline: 0,
        }
    }
}

/// Two QPs of one device connected to each other: by hand, or on iWARP through the rdma_cm
/// (A the client, B the server). Field order is drop order: the QPs go first, so no request
/// names memory whose registration is gone, and the rdma_cm ids last, as librdmacm's users
/// destroy the QP before the id.
struct Pair {
    a: Arc<Qp>,
    b: Arc<Qp>,
    cq_a: Arc<Cq>,
    cq_b: Arc<Cq>,
    ma: Mr<PageBuf>,
    mb: Mr<PageBuf>,
    srq: Option<Arc<Srq>>,
    _pd: Arc<Pd>,
    _ctx: Arc<Context>,
    _link: Option<cm::Link>,
}

fn open(env: &Env) -> Result<(Arc<Context>, Arc<Pd>), String> {
    let c = rverbs::provider::open_by_name(&env.dev).map_err(ctx("open the device"))?;
    let pd = Pd::alloc(&c).map_err(ctx("allocate a PD"))?;
    Ok((c, pd))
}

fn new_cq(c: &Arc<Context>, channel: Option<Arc<CompChannel>>) -> Result<Arc<Cq>, String> {
    Cq::create(
        c,
        16,
        CqOptions {
            channel,
            comp_vector: 0,
        },
    )
    .map_err(ctx("create a CQ"))
}

fn reg(pd: &Arc<Pd>, access: AccessFlags) -> Result<Mr<PageBuf>, String> {
    let buf = PageBuf::new(MR_LEN).map_err(ctx("allocate a buffer"))?;
    Mr::register(pd, buf, access).map_err(|e| format!("register {MR_LEN} bytes: {e}"))
}

impl Pair {
    fn new(env: &Env, end: Instant, o: PairOpts) -> Result<Pair, String> {
        let (c, pd) = open(env)?;
        let cq_a = new_cq(&c, None)?;
        let ch = if o.channel {
            Some(CompChannel::create(&c).map_err(ctx("create a completion channel"))?)
        } else {
            None
        };
        let cq_b = new_cq(&c, ch)?;
        let srq = if o.srq {
            let attr = SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            };
            Some(Srq::create(&pd, attr).map_err(ctx("create an SRQ"))?)
        } else {
            None
        };
        let caps = |recv: u32| QpCaps {
            max_send_wr: 4,
            max_recv_wr: recv,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: o.inline,
        };
        let mk = |cq: &Arc<Cq>, srq: Option<Arc<Srq>>| {
            let recv = if srq.is_some() { 0 } else { 4 };
            let init = QpInit {
                qp_type: o.qp_type,
                srq,
                ..QpInit::rc(cq, caps(recv))
            };
            Qp::create(&pd, init).map_err(ctx("create a QP"))
        };
        let a = mk(&cq_a, None)?;
        let b = mk(&cq_b, srq.clone())?;
        let access = access(env, o.qp_type);
        let link = if env.iwarp {
            Some(cm::link(env, end, &a, &b, o.srq)?)
        } else {
            connect(env, &a, b.qp_num(), o, access)?;
            connect(env, &b, a.qp_num(), o, access)?;
            None
        };
        let ma = reg(&pd, access)?;
        let mb = reg(&pd, access)?;
        Ok(Pair {
            a,
            b,
            cq_a,
            cq_b,
            ma,
            mb,
            srq,
            _pd: pd,
            _ctx: c,
            _link: link,
        })
    }
}

/// Moves `qp` (RC or UC) to RTS towards the QP `rqpn` of the same port.
fn connect(env: &Env, qp: &Qp, rqpn: u32, o: PairOpts, access: AccessFlags) -> Result<(), String> {
    let what = |e| format!("connect QP {:#x} to QP {rqpn:#x}: {e}", qp.qp_num());
    if o.qp_type == QpType::RC {
        let path = RcPath {
            port_num: env.port,
            pkey_index: 0,
            access,
            path_mtu: env.mtu,
            timeout: if o.fast_fail { 12 } else { 14 },
            retry_cnt: if o.fast_fail { 1 } else { 7 },
            rnr_retry: if o.fast_fail { 0 } else { 7 },
            min_rnr_timer: if o.fast_fail { 1 } else { 12 },
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        };
        let remote = RcRemote {
            qp_num: rqpn,
            psn: PSN,
            ah: loop_ah(env),
        };
        return rverbs::rc::connect(qp, &path, PSN, &remote).map_err(what);
    }
    // UC: no acknowledgements, hence no timeouts, retries or RDMA READ resources.
    for a in [
        QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(env.port),
            access_flags: Some(access),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTR),
            path_mtu: Some(env.mtu),
            dest_qp_num: Some(rqpn),
            rq_psn: Some(PSN),
            ah_attr: Some(loop_ah(env)),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTS),
            sq_psn: Some(PSN),
            ..Default::default()
        },
    ] {
        qp.modify(&a).map_err(what)?;
    }
    Ok(())
}

fn post_send(qp: &Qp, wr: SendWr<'_, rverbs::uverbs::MrSge<'_>>) -> Result<(), String> {
    qp.post_send(&[wr]).map_err(|e| e.to_string())
}

/// SEND (with immediate) of [`MSG`] bytes into a posted receive.
fn send(env: &Env, end: Instant, t: QpType, imm: Option<u32>) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(t))?;
    let msg = pattern(1, MSG);
    p.ma.write_at(0, &msg);
    let r = [p.mb.sge(0..4096)];
    p.b.post_recv(&[RecvWr::new(10, &r)])
        .map_err(|e| e.to_string())?;
    let s = [p.ma.sge(0..MSG)];
    let op = imm.map_or(SendOp::Send, |imm| SendOp::SendWithImm { imm });
    post_send(
        &p.a,
        SendWr {
            op,
            ..SendWr::send(1, &s)
        },
    )?;
    ok_wc(&p.cq_a, end, 1, WcOpcode::SEND, "the SEND")?;
    let wc = ok_wc(&p.cq_b, end, 10, WcOpcode::RECV, "the receive")?;
    if wc.byte_len as usize != MSG || wc.imm() != imm || wc.qp_num != p.b.qp_num() {
        return Err(format!(
            "the receive: byte_len {} imm {:x?} QP {:#x}, expected {MSG}, {imm:x?}, {:#x}",
            wc.byte_len,
            wc.imm(),
            wc.qp_num,
            p.b.qp_num()
        ));
    }
    same_bytes(&p.mb.read_vec(0..MSG), &msg, "received bytes")?;
    Ok(Outcome::Pass)
}

/// RDMA WRITE (with immediate, which consumes a receive) of [`MSG`] bytes at an odd offset.
fn write(env: &Env, end: Instant, t: QpType, imm: Option<u32>) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(t))?;
    let data = pattern(2, MSG);
    p.ma.write_at(0, &data);
    let (remote_addr, rkey) = (p.mb.addr() + 4097, p.mb.rkey());
    if imm.is_some() {
        p.b.post_recv(&[RecvWr::new(20, &[])])
            .map_err(|e| e.to_string())?;
    }
    let op = match imm {
        None => SendOp::RdmaWrite { remote_addr, rkey },
        Some(imm) => SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        },
    };
    // iWARP completes a WRITE once it is sent, perhaps before the peer placed it: a SEND
    // after it, once received, says it was (the peer takes one stream in order).
    let marker = env.iwarp && imm.is_none();
    let rm = [p.mb.sge(12288..12296)];
    if marker {
        p.b.post_recv(&[RecvWr::new(21, &rm)])
            .map_err(|e| e.to_string())?;
    }
    let s = [p.ma.sge(0..MSG)];
    post_send(
        &p.a,
        SendWr {
            op,
            ..SendWr::send(2, &s)
        },
    )?;
    ok_wc(&p.cq_a, end, 2, WcOpcode::RDMA_WRITE, "the RDMA WRITE")?;
    if marker {
        let sm = [p.ma.sge(12288..12296)];
        post_send(&p.a, SendWr::send(22, &sm))?;
        ok_wc(&p.cq_a, end, 22, WcOpcode::SEND, "the SEND after the WRITE")?;
        ok_wc(
            &p.cq_b,
            end,
            21,
            WcOpcode::RECV,
            "the receive after the WRITE",
        )?;
    }
    if let Some(imm) = imm {
        let wc = ok_wc(
            &p.cq_b,
            end,
            20,
            WcOpcode::RECV_RDMA_WITH_IMM,
            "the WRITE's receive",
        )?;
        if wc.imm() != Some(imm) {
            return Err(format!(
                "the WRITE's receive: immediate {:x?}, expected {imm:#x}",
                wc.imm()
            ));
        }
    }
    same_bytes(&p.mb.read_vec(4097..4097 + MSG), &data, "written bytes")?;
    let around = p.mb.read_vec(4096..4097);
    if around[0] != 0 || p.mb.read_vec(4097 + MSG..4098 + MSG)[0] != 0 {
        return Err("the RDMA WRITE wrote outside its range".into());
    }
    Ok(Outcome::Pass)
}

fn read(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    let data = pattern(3, MSG);
    p.mb.write_at(8192, &data);
    let s = [p.ma.sge(4096..4096 + MSG)];
    let op = SendOp::RdmaRead {
        remote_addr: p.mb.addr() + 8192,
        rkey: p.mb.rkey(),
    };
    post_send(
        &p.a,
        SendWr {
            op,
            ..SendWr::send(3, &s)
        },
    )?;
    ok_wc(&p.cq_a, end, 3, WcOpcode::RDMA_READ, "the RDMA READ")?;
    same_bytes(&p.ma.read_vec(4096..4096 + MSG), &data, "bytes read")?;
    Ok(Outcome::Pass)
}

/// A SEND with INLINE data, as long as the QP allows up to 64 bytes.
fn inline(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(
        env,
        end,
        PairOpts {
            inline: 64,
            ..PairOpts::of(QpType::RC)
        },
    )?;
    let len = p.a.caps().max_inline_data.min(64) as usize;
    if len == 0 {
        return Ok(Outcome::Skip(
            "the device grants no inline data (max_inline_data 0)".into(),
        ));
    }
    let msg = pattern(4, len);
    p.ma.write_at(0, &msg);
    let r = [p.mb.sge(0..4096)];
    p.b.post_recv(&[RecvWr::new(10, &r)])
        .map_err(|e| e.to_string())?;
    let s = [p.ma.sge(0..len)];
    let wr = SendWr {
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..SendWr::send(4, &s)
    };
    post_send(&p.a, wr)?;
    ok_wc(&p.cq_a, end, 4, WcOpcode::SEND, "the INLINE SEND")?;
    let wc = ok_wc(&p.cq_b, end, 10, WcOpcode::RECV, "the receive")?;
    if wc.byte_len as usize != len {
        return Err(format!(
            "the receive: byte_len {}, expected {len}",
            wc.byte_len
        ));
    }
    same_bytes(&p.mb.read_vec(0..len), &msg, "received inline bytes")?;
    Ok(Outcome::Pass)
}

/// One atomic of `op` from A into B's first 8 bytes, the old value landing in A's first 8.
fn atomic(p: &Pair, end: Instant, op: SendOp, wr_id: u64, wc_op: WcOpcode) -> Result<u64, String> {
    let s = [p.ma.sge(0..8)];
    post_send(
        &p.a,
        SendWr {
            op,
            ..SendWr::send(wr_id, &s)
        },
    )?;
    ok_wc(&p.cq_a, end, wr_id, wc_op, "the atomic")?;
    Ok(u64_at(&p.ma.read_vec(0..8)))
}

fn expect_u64(what: &str, got: u64, want: u64) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: {got:#x}, expected {want:#x}"))
    }
}

fn fetch_add(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    let start = 0x0102_0304_0506_0708u64;
    p.mb.write_at(0, &start.to_ne_bytes());
    let op = SendOp::AtomicFetchAdd {
        remote_addr: p.mb.addr(),
        rkey: p.mb.rkey(),
        add: 0x10_0000_0001,
    };
    let old = atomic(&p, end, op, 5, WcOpcode::FETCH_ADD)?;
    expect_u64("fetch-add's old value", old, start)?;
    let now = u64_at(&p.mb.read_vec(0..8));
    expect_u64("the value after fetch-add", now, start + 0x10_0000_0001)?;
    Ok(Outcome::Pass)
}

fn cmp_swap(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    let start = 0x1111_2222_3333_4444u64;
    p.mb.write_at(0, &start.to_ne_bytes());
    let (remote_addr, rkey) = (p.mb.addr(), p.mb.rkey());
    // Equal: swaps.
    let op = SendOp::AtomicCmpSwp {
        remote_addr,
        rkey,
        compare: start,
        swap: 42,
    };
    let old = atomic(&p, end, op, 6, WcOpcode::COMP_SWAP)?;
    expect_u64("cmp-swap's old value", old, start)?;
    expect_u64(
        "the value after a cmp-swap that matched",
        u64_at(&p.mb.read_vec(0..8)),
        42,
    )?;
    // Not equal: leaves it.
    let op = SendOp::AtomicCmpSwp {
        remote_addr,
        rkey,
        compare: 41,
        swap: 7,
    };
    let old = atomic(&p, end, op, 7, WcOpcode::COMP_SWAP)?;
    expect_u64("cmp-swap's old value", old, 42)?;
    expect_u64(
        "the value after a cmp-swap that did not match",
        u64_at(&p.mb.read_vec(0..8)),
        42,
    )?;
    Ok(Outcome::Pass)
}

/// Two SENDs into receives taken from B's SRQ.
fn srq(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(
        env,
        end,
        PairOpts {
            srq: true,
            ..PairOpts::of(QpType::RC)
        },
    )?;
    let srq = p.srq.as_ref().ok_or("no SRQ")?;
    let (r0, r1) = ([p.mb.sge(0..256)], [p.mb.sge(256..512)]);
    srq.post_recv(&[RecvWr::new(30, &r0), RecvWr::new(31, &r1)])
        .map_err(|e| e.to_string())?;
    for (i, m) in [b"first".as_slice(), b"second"].into_iter().enumerate() {
        p.ma.write_at(1024 * i, m);
        let s = [p.ma.sge(1024 * i..1024 * i + m.len())];
        post_send(&p.a, SendWr::send(i as u64, &s))?;
        ok_wc(&p.cq_a, end, i as u64, WcOpcode::SEND, "a SEND")?;
        let wc = ok_wc(
            &p.cq_b,
            end,
            30 + i as u64,
            WcOpcode::RECV,
            "a receive from the SRQ",
        )?;
        if wc.qp_num != p.b.qp_num() || wc.byte_len as usize != m.len() {
            return Err(format!(
                "a receive from the SRQ: QP {:#x} byte_len {}, expected {:#x}, {}",
                wc.qp_num,
                wc.byte_len,
                p.b.qp_num(),
                m.len()
            ));
        }
        same_bytes(
            &p.mb.read_vec(256 * i..256 * i + m.len()),
            m,
            "received bytes",
        )?;
    }
    Ok(Outcome::Pass)
}

/// A completion event: arm B's CQ, SEND, the channel becomes readable, the event is for B's
/// CQ, and the completion is there.
fn events(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(
        env,
        end,
        PairOpts {
            channel: true,
            ..PairOpts::of(QpType::RC)
        },
    )?;
    let ch = p.cq_b.channel().ok_or("no channel")?.clone();
    let r = [p.mb.sge(0..64)];
    p.b.post_recv(&[RecvWr::new(40, &r)])
        .map_err(|e| e.to_string())?;
    p.cq_b.req_notify(false).map_err(ctx("arm the CQ"))?;
    if ch
        .try_get_event()
        .map_err(ctx("read the channel"))?
        .is_some()
    {
        return Err("an event before any completion".into());
    }
    let s = [p.ma.sge(0..8)];
    post_send(&p.a, SendWr::send(8, &s))?;
    let left = end.saturating_duration_since(Instant::now());
    if !ch.wait(Some(left)).map_err(ctx("wait on the channel"))? {
        return Err("no completion event within the case's timeout".into());
    }
    p.cq_b
        .wait_event()
        .map_err(ctx("read the completion event"))?;
    p.cq_b.ack_events(1);
    ok_wc(&p.cq_b, end, 40, WcOpcode::RECV, "the receive")?;
    ok_wc(&p.cq_a, end, 8, WcOpcode::SEND, "the SEND")?;
    Ok(Outcome::Pass)
}

/// A UD QP in RTS with [`QKEY`].
fn ud_ready(env: &Env, qp: &Qp) -> Result<(), String> {
    for a in [
        QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(env.port),
            qkey: Some(QKEY),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTR),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTS),
            sq_psn: Some(PSN),
            ..Default::default()
        },
    ] {
        qp.modify(&a)
            .map_err(|e| format!("UD QP {:#x}: {e}", qp.qp_num()))?;
    }
    Ok(())
}

/// A datagram through an AH to the port's own address; the payload lands after the 40 bytes
/// kept for the GRH.
fn ud(env: &Env, end: Instant) -> CaseResult {
    const LEN: usize = 256;
    let (c, pd) = open(env)?;
    let (cq_a, cq_b) = (new_cq(&c, None)?, new_cq(&c, None)?);
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mk = |cq: &Arc<Cq>| {
        let init = QpInit {
            qp_type: QpType::UD,
            ..QpInit::rc(cq, caps)
        };
        Qp::create(&pd, init).map_err(ctx("create a UD QP"))
    };
    let (ma, mb) = (
        reg(&pd, AccessFlags::LOCAL_WRITE)?,
        reg(&pd, AccessFlags::LOCAL_WRITE)?,
    );
    // Declared after the regions: dropped before them.
    let (a, b) = (mk(&cq_a)?, mk(&cq_b)?);
    ud_ready(env, &a)?;
    ud_ready(env, &b)?;
    let ah = Ah::create(&pd, loop_ah(env)).map_err(ctx("create an address handle"))?;
    let msg = pattern(5, LEN);
    ma.write_at(0, &msg);
    let r = [mb.sge(0..40 + LEN)];
    b.post_recv(&[RecvWr::new(60, &r)])
        .map_err(|e| e.to_string())?;
    let s = [ma.sge(0..LEN)];
    let wr = SendWr {
        ud: Some(ah.ud_dest(b.qp_num(), QKEY)),
        ..SendWr::send(11, &s)
    };
    post_send(&a, wr)?;
    ok_wc(&cq_a, end, 11, WcOpcode::SEND, "the UD SEND")?;
    let wc = ok_wc(&cq_b, end, 60, WcOpcode::RECV, "the UD receive")?;
    let grh = if wc.wc_flags.contains(WcFlags::GRH) {
        40
    } else {
        0
    };
    if wc.byte_len as usize != LEN + grh || wc.src_qp != a.qp_num() {
        return Err(format!(
            "the UD receive: byte_len {} from QP {:#x}, expected {} from {:#x}",
            wc.byte_len,
            wc.src_qp,
            LEN + grh,
            a.qp_num()
        ));
    }
    same_bytes(
        &mb.read_vec(40..40 + LEN),
        &msg,
        "the datagram after the GRH",
    )?;
    drop((a, b, ah));
    Ok(Outcome::Pass)
}

#[cfg(test)]
mod tests;

/// SRD (EFA): a SEND with immediate data from one SRD QP to another through an AH to the
/// port's own GID, the safe SRD API end to end ([`SrdQp`](rverbs::uverbs::srd::SrdQp)); SRD
/// delivers the payload at the receive's start (no GRH).
fn srd(env: &Env, end: Instant) -> CaseResult {
    use rverbs::uverbs::srd::{SrdInit, SrdQp, SrdSendWr};
    const LEN: usize = 256;
    let (c, pd) = open(env)?;
    let (cq_a, cq_b) = (new_cq(&c, None)?, new_cq(&c, None)?);
    let mk = |cq: &Arc<Cq>| {
        let init = SrdInit {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            caps: QpCaps {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let qp = SrdQp::create(&pd, init).map_err(ctx("create an SRD QP"))?;
        qp.ready(env.port, QKEY)
            .map_err(|e| format!("SRD QP {:#x}: {e}", qp.qp_num()))?;
        Ok::<_, String>(qp)
    };
    let (ma, mb) = (
        reg(&pd, AccessFlags::LOCAL_WRITE)?,
        reg(&pd, AccessFlags::LOCAL_WRITE)?,
    );
    // Declared after the regions: dropped before them.
    let (a, b) = (mk(&cq_a)?, mk(&cq_b)?);
    let ah = Ah::create(&pd, loop_ah(env)).map_err(ctx("create an address handle"))?;
    let msg = pattern(7, LEN);
    ma.write_at(0, &msg);
    let r = [mb.sge(0..LEN)];
    b.post_recv(&[RecvWr::new(61, &r)])
        .map_err(|e| e.to_string())?;
    let s = [ma.sge(0..LEN)];
    let dest = ah.ud_dest(b.qp_num(), QKEY);
    a.post_send(&[SrdSendWr::send_with_imm(12, &s, IMM, dest)])
        .map_err(|e| e.to_string())?;
    ok_wc(&cq_a, end, 12, WcOpcode::SEND, "the SRD SEND")?;
    let wc = ok_wc(&cq_b, end, 61, WcOpcode::RECV, "the SRD receive")?;
    if wc.byte_len as usize != LEN || wc.src_qp != a.qp_num() || wc.imm() != Some(IMM) {
        return Err(format!(
            "the SRD receive: byte_len {} from QP {:#x}, immediate {:x?}; expected {LEN} \
             from {:#x} with immediate {IMM:#x}",
            wc.byte_len,
            wc.src_qp,
            wc.imm(),
            a.qp_num()
        ));
    }
    same_bytes(&mb.read_vec(0..LEN), &msg, "the SRD message")?;
    drop((a, b, ah));
    Ok(Outcome::Pass)
}
