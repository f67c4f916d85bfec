//! mlx5 work queues: QP sizing and buffers, send and receive WQEs, SRQs, address vectors,
//! doorbells (doorbell record, 64-bit UAR doorbell, BlueFlame) and the `wr_id` tables the CQ
//! poller resolves completions through.
//!
//! Facts from rdma-core v44 `providers/mlx5` (`verbs.c`: sizing and create; `qp.c`: posting
//! and doorbells; `srq.c`: the SRQ free list) and the kernel's `hw/mlx5/qp.c` (what it takes
//! from the create driver data); see `docs/mlx5.md`. The byte-level behaviour is proven
//! against libmlx5 itself by the oracle (`cargo xtask mlx5-oracle`).

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rverbs_uverbs::ah::AhAttr;
use rverbs_uverbs::driver::{KernelObj, QpOps, SrqOps};
use rverbs_uverbs::error::PostError;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge};
use rverbs_uverbs::Error;

use super::abi::{mlx5_ib_create_qp, mlx5_ib_create_srq, MLX5_BFREGS_PER_UAR, MLX5_BF_OFFSET};
use super::barrier::{mmio_flush, mmio_wmb};
use super::cq::Region;
use super::cqe::{WorkQueue, WqeRef, WrIdLookup};

/// Send WQE basic block (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
const CTRL_SEG: usize = 16;
const RADDR_SEG: usize = 16;
const ATOMIC_SEG: usize = 16;
const DATA_SEG: usize = 16;
const INL_SEG: usize = 4;
/// `struct mlx5_wqe_datagram_seg` (the address vector).
pub const AV_SIZE: usize = 48;
const SRQ_NEXT_SEG: usize = 16;
/// umr control (48) + mkey context (64) + max(klm 16, 64): what a memory-window bind or local
/// invalidate needs; libmlx5 reserves it in every RC/UC WQE size (`_sq_overhead`).
const MW_SIZE: usize = CTRL_SEG + 48 + 64 + 64;

/// `MLX5_INVALID_LKEY`: the terminator of a receive scatter list.
pub const MLX5_INVALID_LKEY: u32 = 0x100;
/// `MLX5_INLINE_SEG`.
const MLX5_INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_EXTENDED_UD_AV`.
const MLX5_EXTENDED_UD_AV: u32 = 0x8000_0000;
/// `fm_ce_se` bits.
const CTRL_CQ_UPDATE: u8 = 2 << 2;
const CTRL_SOLICITED: u8 = 1 << 1;
const CTRL_FENCE: u8 = 4 << 5;
/// Send WQE opcodes (`MLX5_OPCODE_*`).
const OP_SEND_INVAL: u8 = 0x01;
const OP_RDMA_WRITE: u8 = 0x08;
const OP_RDMA_WRITE_IMM: u8 = 0x09;
const OP_SEND: u8 = 0x0a;
const OP_SEND_IMM: u8 = 0x0b;
const OP_RDMA_READ: u8 = 0x10;
const OP_ATOMIC_CS: u8 = 0x11;
const OP_ATOMIC_FA: u8 = 0x12;
/// Doorbell record slots of a QP (`MLX5_RCV_DBR`, `MLX5_SND_DBR`).
const RCV_DBR: usize = 0;
const SND_DBR: usize = 1;

/// The device limits sizing needs (from the alloc_ucontext response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqLimits {
    /// `max_sq_desc_sz`: largest send WQE in bytes.
    pub max_sq_desc_sz: u32,
    /// `max_rq_desc_sz`: largest receive WQE in bytes.
    pub max_rq_desc_sz: u32,
    /// `max_send_wqebb`: largest SQ in basic blocks.
    pub max_send_wqebb: u32,
    /// `max_recv_wr`: largest RQ.
    pub max_recv_wr: u32,
    /// `max_srq_recv_wr`: largest SRQ.
    pub max_srq_recv_wr: u32,
}

impl From<&super::Mlx5ContextInfo> for WqLimits {
    fn from(i: &super::Mlx5ContextInfo) -> Self {
        Self {
            max_sq_desc_sz: u32::from(i.max_sq_desc_sz),
            max_rq_desc_sz: u32::from(i.max_rq_desc_sz),
            max_send_wqebb: i.max_send_wqebb,
            max_recv_wr: i.max_recv_wr,
            max_srq_recv_wr: i.max_srq_recv_wr,
        }
    }
}

/// The geometry of a QP's queues, as libmlx5 computes it and the kernel takes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpSizing {
    /// SQ basic blocks (power of two, or 0 without an SQ).
    pub sq_wqe_cnt: u32,
    /// Work requests the SQ takes (each counted at the largest WQE size).
    pub sq_max_post: u32,
    /// SGEs per send.
    pub sq_max_gs: u32,
    /// Inline bytes per send.
    pub max_inline: u32,
    /// RQ WQEs (power of two, or 0).
    pub rq_wqe_cnt: u32,
    /// log2 of the receive WQE size.
    pub rq_wqe_shift: u32,
    /// SGEs per receive.
    pub rq_max_gs: u32,
    /// Byte offset of the SQ in the buffer (= RQ bytes).
    pub sq_offset: usize,
    /// Buffer bytes (RQ + SQ).
    pub buf_size: usize,
}

impl QpSizing {
    /// The capacities reported to the caller (libmlx5 reports these, not the kernel's).
    pub fn caps(&self) -> QpCaps {
        QpCaps {
            max_send_wr: self.sq_max_post,
            max_recv_wr: self.rq_wqe_cnt,
            max_send_sge: self.sq_max_gs,
            max_recv_sge: self.rq_max_gs,
            max_inline_data: self.max_inline,
        }
    }
}

fn sq_overhead(qp_type: QpType) -> Option<usize> {
    match qp_type {
        // Control plus the largest of raddr (rdma), raddr+atomic, memory-window bind.
        QpType::RC | QpType::UC => Some(MW_SIZE.max(CTRL_SEG + RADDR_SEG + ATOMIC_SEG)),
        // Control (SEND, SEND_IMM) plus the datagram segment.
        QpType::UD => Some(CTRL_SEG + AV_SIZE),
        _ => None,
    }
}

fn align(v: usize, a: usize) -> usize {
    v.div_ceil(a) * a
}

/// Computes a QP's queue geometry (libmlx5 `mlx5_calc_wq_size`).
pub fn qp_sizing(
    lim: &WqLimits,
    qp_type: QpType,
    caps: &QpCaps,
    has_srq: bool,
) -> rverbs_uverbs::Result<QpSizing> {
    let op = || format!("create {qp_type} QP on mlx5");
    let bad =
        |d: String| -> rverbs_uverbs::Result<QpSizing> { Err(Error::invalid(op(), d).into()) };
    let overhead = match sq_overhead(qp_type) {
        Some(o) => o,
        None => {
            return bad(format!(
                "QP type {qp_type} is not supported by rverbs on mlx5"
            ))
        }
    };
    let mut s = QpSizing::default();
    let max_sq = lim.max_sq_desc_sz as usize;
    if caps.max_send_wr > 0 {
        let inl_size = if caps.max_inline_data > 0 {
            overhead + align(INL_SEG + caps.max_inline_data as usize, 16)
        } else {
            0
        };
        let max_gather = max_sq.saturating_sub(overhead) / DATA_SEG;
        if caps.max_send_sge as usize > max_gather {
            return bad(format!(
                "max_send_sge {} exceeds the {max_gather} SGEs a {max_sq}-byte send WQE holds",
                caps.max_send_sge
            ));
        }
        let size = overhead + caps.max_send_sge as usize * DATA_SEG;
        let tot = size.max(inl_size);
        if tot > max_sq {
            return bad(format!(
                "max_inline_data {} needs a {tot}-byte send WQE, above the device's {max_sq}",
                caps.max_inline_data
            ));
        }
        let wqe_size = align(tot, SEND_WQE_BB);
        if wqe_size > max_sq {
            return bad(format!(
                "send WQE of {wqe_size} bytes above the device's {max_sq}"
            ));
        }
        if max_sq == 0 || caps.max_send_wr as usize > 0x7fff_ffff / max_sq {
            return bad(format!("max_send_wr {} is too large", caps.max_send_wr));
        }
        let wq_size = (caps.max_send_wr as usize * wqe_size).next_power_of_two();
        let cnt = wq_size / SEND_WQE_BB;
        if cnt > lim.max_send_wqebb as usize {
            return bad(format!(
                "max_send_wr {} needs {cnt} send WQE blocks, above the device's {}",
                caps.max_send_wr, lim.max_send_wqebb
            ));
        }
        s.max_inline = (wqe_size - overhead - INL_SEG) as u32;
        s.sq_wqe_cnt = cnt as u32;
        s.sq_max_gs = caps.max_send_sge;
        s.sq_max_post = (wq_size / wqe_size) as u32;
        s.buf_size = wq_size;
    }
    if caps.max_recv_wr > 0 && !has_srq {
        if caps.max_recv_wr > lim.max_recv_wr {
            return bad(format!(
                "max_recv_wr {} exceeds the device's {}",
                caps.max_recv_wr, lim.max_recv_wr
            ));
        }
        let wqe = (DATA_SEG * caps.max_recv_sge.max(1) as usize).next_power_of_two();
        if wqe > lim.max_rq_desc_sz as usize {
            return bad(format!(
                "max_recv_sge {} needs a {wqe}-byte receive WQE, above the device's {}",
                caps.max_recv_sge, lim.max_rq_desc_sz
            ));
        }
        let wq = ((caps.max_recv_wr as usize).next_power_of_two() * wqe).max(SEND_WQE_BB);
        s.rq_wqe_cnt = (wq / wqe) as u32;
        s.rq_wqe_shift = wqe.trailing_zeros();
        s.rq_max_gs = (wqe / DATA_SEG) as u32;
        s.sq_offset = wq;
        s.buf_size += wq;
    }
    Ok(s)
}

/// The geometry of an SRQ (libmlx5 `mlx5_alloc_srq_buf` without its wait queue).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqSizing {
    /// WQEs in the buffer (power of two).
    pub max: u32,
    /// log2 of the WQE size.
    pub wqe_shift: u32,
    /// SGEs per receive.
    pub max_gs: u32,
    /// Work requests the caller may have outstanding (the free list's tail index).
    pub max_wr: u32,
}

/// Computes an SRQ's geometry.
pub fn srq_sizing(lim: &WqLimits, max_wr: u32, max_sge: u32) -> rverbs_uverbs::Result<SrqSizing> {
    let op = "create SRQ on mlx5";
    if max_wr == 0 || max_wr > lim.max_srq_recv_wr {
        return Err(Error::invalid(
            op,
            format!("max_wr {max_wr} outside 1..={}", lim.max_srq_recv_wr),
        )
        .into());
    }
    if max_sge > lim.max_rq_desc_sz / DATA_SEG as u32 {
        return Err(Error::invalid(
            op,
            format!(
                "max_sge {max_sge} exceeds the {} SGEs of a {}-byte receive WQE",
                lim.max_rq_desc_sz / DATA_SEG as u32,
                lim.max_rq_desc_sz
            ),
        )
        .into());
    }
    let size = (SRQ_NEXT_SEG + max_sge as usize * DATA_SEG)
        .max(32)
        .next_power_of_two();
    // libmlx5 compares the WQE size with max_recv_wr here; kept so both refuse alike.
    if size > lim.max_recv_wr as usize {
        return Err(Error::invalid(op, format!("{size}-byte SRQ WQE refused")).into());
    }
    // No wait queue (libmlx5 adds one, for on-demand-paging faults, when the device allows
    // twice the WQEs): the ring is what the kernel computes from the max_wr it is told,
    // roundup_pow_of_two(max_wr + 1), all of it in the free list but the tail WQE.
    let max = (max_wr + 1).next_power_of_two();
    Ok(SrqSizing {
        max,
        wqe_shift: size.trailing_zeros(),
        max_gs: ((size - SRQ_NEXT_SEG) / DATA_SEG) as u32,
        max_wr: max - 1,
    })
}

/// A UD address vector as the send WQE's datagram segment carries it (48 bytes).
pub type Av = [u8; AV_SIZE];

/// libmlx5's `ib_to_mlx5_rate_table`: `enum ibv_rate` → the device's rate code (0 =
/// unlimited).
const RATE: [u8; 23] = [
    0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11, 13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0,
];

/// Builds the address vector of an AH (libmlx5 `mlx5_create_ah`); `dmac` is the RoCE
/// destination MAC the kernel's create-AH response gave (`None` on InfiniBand).
pub fn build_av(attr: &AhAttr, dmac: Option<[u8; 6]>) -> Av {
    let mut av = [0u8; AV_SIZE];
    let rate = RATE.get(attr.static_rate as usize).copied().unwrap_or(0);
    let grh_bit;
    if let Some(mac) = dmac {
        grh_bit = 0;
        av[12] = (rate << 4) | ((attr.sl & 7) << 1);
        av[20..26].copy_from_slice(&mac);
    } else {
        av[13] = attr.src_path_bits & 0x7f;
        av[14..16].copy_from_slice(&attr.dlid.to_be_bytes());
        grh_bit = 1u32;
        av[12] = (rate << 4) | (attr.sl & 0xf);
    }
    if let Some(g) = attr.grh {
        av[26] = g.traffic_class;
        av[27] = g.hop_limit;
        let w = (grh_bit << 30) | (u32::from(g.sgid_index) << 20) | (g.flow_label & 0xfffff);
        av[28..32].copy_from_slice(&w.to_be_bytes());
        av[32..48].copy_from_slice(&g.dgid);
    }
    av
}

/// Address vectors of a context's AHs, indexed by the number the driver gave each AH.
#[derive(Debug, Default)]
pub struct AhTable {
    avs: RwLock<Vec<Av>>,
}

impl AhTable {
    /// Stores `av`; returns its number.
    pub fn insert(&self, av: Av) -> u32 {
        let mut t = self.avs.write().unwrap_or_else(|e| e.into_inner());
        t.push(av);
        (t.len() - 1) as u32
    }

    fn get(&self, n: u32) -> Option<Av> {
        let t = self.avs.read().unwrap_or_else(|e| e.into_inner());
        t.get(n as usize).copied()
    }
}

/// How posts ring the doorbell (libmlx5's `MLX5_SHUT_UP_BF` / `MLX5_POST_SEND_PREFER_BF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BfPolicy {
    /// Never use BlueFlame (`MLX5_SHUT_UP_BF=1`).
    pub shut_up_bf: bool,
    /// Use BlueFlame for single non-inline WQEs too (`MLX5_POST_SEND_PREFER_BF`, default on).
    pub prefer_bf: bool,
}

impl Default for BfPolicy {
    fn default() -> Self {
        Self {
            shut_up_bf: false,
            prefer_bf: true,
        }
    }
}

impl BfPolicy {
    /// libmlx5's knobs read from the environment, with libmlx5's defaults.
    pub fn from_env() -> Self {
        let on = |k: &str, default: bool| match std::env::var(k) {
            Ok(v) => v != "0",
            Err(_) => default,
        };
        Self {
            shut_up_bf: on("MLX5_SHUT_UP_BF", false),
            prefer_bf: on("MLX5_POST_SEND_PREFER_BF", true),
        }
    }
}

/// One blue-flame register: the doorbell and BlueFlame buffer of the QPs the kernel gave it.
///
/// Registers other than 0 may be shared by several QPs (the kernel hands out the medium
/// latency ones round robin): the lock keeps one QP's doorbell or BlueFlame copy and the
/// toggle of the buffer half together, as libmlx5's `bf->lock` does.
pub struct BfReg {
    reg: *mut u8,
    /// Bytes of one BlueFlame buffer half (`bf_reg_size / 2`), 0 for register 0.
    buf_size: usize,
    index: u32,
    offset: AtomicUsize,
    lock: AtomicBool,
}

// SAFETY: `reg` points into a UAR mapping that outlives the register (its constructor's
// contract); it is only written, with volatile stores, under `lock` (or, for register 0, with
// single 64-bit stores).
unsafe impl Send for BfReg {}
// SAFETY: as above.
unsafe impl Sync for BfReg {}

impl fmt::Debug for BfReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BfReg({}, {:p}, {} B)",
            self.index, self.reg, self.buf_size
        )
    }
}

impl BfReg {
    /// Register `index` (libmlx5 numbering: four per 4 KiB UAR) inside the UAR at `uar`
    /// (`uar_len` bytes mapped from there), with `bf_reg_size`.
    ///
    /// # Safety
    /// `uar..uar + uar_len` must stay mapped and writable as long as this register exists
    /// and nothing may hold a Rust reference into it.
    pub unsafe fn new(
        uar: *mut u8,
        uar_len: usize,
        index: u32,
        bf_reg_size: u32,
    ) -> rverbs_uverbs::Result<Self> {
        let uars = uar;
        let uars_len = uar_len;
        let k = (index % MLX5_BFREGS_PER_UAR) as usize;
        let off = MLX5_BF_OFFSET + k * bf_reg_size as usize;
        let buf_size = if index == 0 {
            0
        } else {
            bf_reg_size as usize / 2
        };
        if k >= 2 || off + 8.max(2 * buf_size) > uars_len {
            return Err(Error::protocol(
                "create QP on mlx5",
                format!(
                    "the kernel gave blue-flame register {index}, outside the {uars_len} bytes of \
                     UAR pages this context mapped"
                ),
            )
            .into());
        }
        Ok(Self {
            // SAFETY: in bounds (checked above).
            reg: unsafe { uars.add(off) },
            buf_size,
            index,
            offset: AtomicUsize::new(0),
            lock: AtomicBool::new(false),
        })
    }

    /// The register's number.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Rings: `ctrl` points at the last WQE's control segment, `size16` its size in 16-byte
    /// units; BlueFlame copies the WQE (rounded up to 64 bytes, wrapping at `qend` to
    /// `qstart`) when `bf` allows it, else the 64-bit doorbell carries the control segment's
    /// first 8 bytes.
    ///
    /// # Safety
    /// `ctrl..` must be a WQE of `size16` units inside the SQ `qstart..qend` (whole 64-byte
    /// blocks).
    #[inline]
    unsafe fn ring(
        &self,
        ctrl: *const u8,
        size16: usize,
        bf: bool,
        qstart: *const u8,
        qend: *const u8,
    ) {
        // Acquire: the previous holder's BlueFlame stores and offset toggle happen before ours.
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // The doorbell record store (done by the caller) must reach the device before the UAR
        // write: the device may fetch WQEs from memory on the doorbell and checks the record
        // (rdma-core `mmio_wc_start`: `sfence` on x86-64, `dsb st` on aarch64).
        mmio_wmb();
        let off = self.offset.load(Ordering::Relaxed);
        // SAFETY: `reg + off` lies in the register (checked in `new`: both halves fit).
        let dst = unsafe { self.reg.add(off) };
        if bf && self.buf_size != 0 && size16 > 1 && size16 <= self.buf_size / 16 {
            let mut left = align(size16 * 16, 64);
            let mut src = ctrl;
            let mut d = dst;
            while left > 0 {
                // SAFETY: `src` walks whole 64-byte blocks of the SQ, wrapping at its end
                // (caller's contract); `d` stays inside the BlueFlame half (size16 * 16 ≤
                // buf_size). Volatile 8-byte stores in order: write-combining memory must not
                // see string instructions whose store order is unspecified (libmlx5
                // `mlx5_bf_copy`).
                unsafe {
                    // One block read first (plain loads, the SQ is ours), then eight
                    // volatile stores in address order.
                    let b = ptr::read(src.cast::<[u64; 8]>());
                    let d8 = d.cast::<u64>();
                    ptr::write_volatile(d8, b[0]);
                    ptr::write_volatile(d8.add(1), b[1]);
                    ptr::write_volatile(d8.add(2), b[2]);
                    ptr::write_volatile(d8.add(3), b[3]);
                    ptr::write_volatile(d8.add(4), b[4]);
                    ptr::write_volatile(d8.add(5), b[5]);
                    ptr::write_volatile(d8.add(6), b[6]);
                    ptr::write_volatile(d8.add(7), b[7]);
                    src = src.add(64);
                    d = d.add(64);
                }
                left -= 64;
                if src == qend {
                    src = qstart;
                }
            }
        } else {
            // SAFETY: `dst` is 8-byte aligned UAR memory; `ctrl` the control segment.
            unsafe {
                let v = ptr::read(ctrl.cast::<u64>());
                ptr::write_volatile(dst.cast::<u64>(), v);
            }
        }
        // Flush the write-combining buffer inside the lock: otherwise another CPU's later
        // doorbell on this register could reach the device first (`mmio_flush_writes`).
        mmio_flush();
        self.offset.store(off ^ self.buf_size, Ordering::Relaxed);
        // Release: our register stores and the toggle happen before the next holder's use.
        self.lock.store(false, Ordering::Release);
    }
}

/// A QP's completion-side state, shared between its post path and the CQ poller.
#[derive(Debug)]
pub struct QpShared {
    qpn: u32,
    sq_mask: u32,
    sq_wrid: Box<[AtomicU64]>,
    sq_wqe_head: Box<[AtomicU32]>,
    /// Work requests completed (libmlx5 `sq.tail`): written by the poller.
    sq_tail: AtomicU32,
    rq_mask: u32,
    rq_wrid: Box<[AtomicU64]>,
    rq_tail: AtomicU32,
    srq: Option<Arc<SrqShared>>,
}

impl QpShared {
    fn send_done(&self, counter: u16) -> Option<u64> {
        if self.sq_wrid.is_empty() {
            return None;
        }
        let idx = (u32::from(counter) & self.sq_mask) as usize;
        // Relaxed: the post stored it before the doorbell record's Release store; the device
        // wrote the CQE after reading the record and the poller's Acquire load of the CQE's
        // owner byte orders this read after it.
        let wr = self.sq_wrid[idx].load(Ordering::Relaxed);
        let head = self.sq_wqe_head[idx].load(Ordering::Relaxed);
        // Release: our reads of the slot tables happen before a post that sees the freed
        // space reuses them.
        self.sq_tail.store(head.wrapping_add(1), Ordering::Release);
        Some(wr)
    }

    fn recv_done(&self, counter: u16, reg: &Registry, srqn: u32) -> Option<u64> {
        if let Some(srq) = &self.srq {
            return srq.done(counter);
        }
        if srqn != 0 {
            return reg.srq(srqn)?.done(counter);
        }
        if self.rq_wrid.is_empty() {
            return None;
        }
        // The receive queue completes in order; only this QP's receive CQ poller moves it.
        let t = self.rq_tail.load(Ordering::Relaxed);
        let wr = self.rq_wrid[(t & self.rq_mask) as usize].load(Ordering::Relaxed);
        // Release: as for the send queue.
        self.rq_tail.store(t.wrapping_add(1), Ordering::Release);
        Some(wr)
    }
}

/// A context's QPs and SRQs by number, for the CQ poller.
#[derive(Debug, Default)]
pub struct Registry {
    qps: RwLock<HashMap<u32, Arc<QpShared>>>,
    srqs: RwLock<HashMap<u32, Arc<SrqShared>>>,
    /// Bumped on every change, so a poller's cached entry is never a stale one.
    generation: AtomicU64,
}

impl Registry {
    fn insert_qp(&self, qp: Arc<QpShared>) {
        let mut m = self.qps.write().unwrap_or_else(|e| e.into_inner());
        m.insert(qp.qpn, qp);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
    fn remove_qp(&self, qpn: u32) {
        let mut m = self.qps.write().unwrap_or_else(|e| e.into_inner());
        m.remove(&qpn);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
    fn insert_srq(&self, srq: Arc<SrqShared>) {
        let mut m = self.srqs.write().unwrap_or_else(|e| e.into_inner());
        m.insert(srq.srqn, srq);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
    fn remove_srq(&self, srqn: u32) {
        let mut m = self.srqs.write().unwrap_or_else(|e| e.into_inner());
        m.remove(&srqn);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
    fn qp(&self, qpn: u32) -> Option<Arc<QpShared>> {
        self.qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned()
    }
    fn srq(&self, srqn: u32) -> Option<Arc<SrqShared>> {
        self.srqs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&srqn)
            .cloned()
    }
}

/// The CQ poller's [`WrIdLookup`] for a context: QP number → the QP's tables (the last one
/// used cached), then the WQE counter → `wr_id` as libmlx5 does.
#[derive(Debug)]
pub struct CqLookup {
    reg: Arc<Registry>,
    cache: Option<(u64, Arc<QpShared>)>,
}

impl CqLookup {
    /// A lookup over `reg`.
    pub fn new(reg: Arc<Registry>) -> Self {
        Self { reg, cache: None }
    }
}

impl WrIdLookup for CqLookup {
    #[inline]
    fn wr_id(&mut self, w: WqeRef) -> Option<u64> {
        // Acquire: pairs with the AcqRel bump after a change, so a matching generation means
        // the cached QP is still the registered one.
        let g = self.reg.generation.load(Ordering::Acquire);
        let qp = match &self.cache {
            Some((cg, qp)) if *cg == g && qp.qpn == w.qpn => qp.clone(),
            _ => {
                let qp = self.reg.qp(w.qpn)?;
                self.cache = Some((g, qp.clone()));
                qp
            }
        };
        match w.queue {
            WorkQueue::Send => qp.send_done(w.wqe_counter),
            _ => qp.recv_done(w.wqe_counter, &self.reg, w.srqn_uidx),
        }
    }
}

/// Raw stores into a work queue buffer (device-read memory we own until the doorbell: plain
/// stores, no references).
///
/// # Safety
/// `p + off .. + 4/8` must lie in a live buffer.
#[inline(always)]
unsafe fn w32(p: *mut u8, off: usize, v: u32) {
    // SAFETY: caller's contract; 4-byte aligned in every segment we write.
    unsafe { p.add(off).cast::<u32>().write(v.to_be()) }
}
#[inline(always)]
unsafe fn w64(p: *mut u8, off: usize, v: u64) {
    // SAFETY: as in `w32`; `p + off` is 8-byte aligned where used (segment starts).
    unsafe { p.add(off).cast::<u64>().write_unaligned(v.to_be()) }
}

/// An mlx5 QP's data path: the buffer (RQ then SQ) and doorbell record, the posting state,
/// its BlueFlame register.
pub struct Mlx5Qp {
    region: Region,
    dbrec: *mut u32,
    qpn: u32,
    qp_type: QpType,
    sz: QpSizing,
    sq_start: *mut u8,
    sq_end: *mut u8,
    cur_post: u32,
    sq_head: u32,
    rq_head: u32,
    sig_bits: u8,
    bf: Arc<BfReg>,
    policy: BfPolicy,
    ahs: Arc<AhTable>,
    shared: Arc<QpShared>,
    reg: Arc<Registry>,
}

// SAFETY: the raw pointers point into `region`, which this value owns; the BlueFlame register
// is Sync. Moving the QP between threads moves all of it.
unsafe impl Send for Mlx5Qp {}

impl fmt::Debug for Mlx5Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlx5Qp")
            .field("qpn", &self.qpn)
            .field("sizing", &self.sz)
            .field("bf", &self.bf)
            .finish_non_exhaustive()
    }
}

/// Memory and driver data of a QP being created, before the kernel has answered.
pub struct QpBuf {
    region: Region,
    sz: QpSizing,
    dbrec_off: usize,
}

impl QpBuf {
    /// Allocates the zeroed buffer and doorbell record for `sz`.
    pub fn new(sz: QpSizing) -> rverbs_uverbs::Result<Self> {
        let page = rustix::param::page_size();
        let dbrec_off = align(sz.buf_size.max(1), page);
        let region = Region::new(dbrec_off + page)?;
        Ok(Self {
            region,
            sz,
            dbrec_off,
        })
    }

    /// The CREATE_QP driver data (static UARs: the kernel picks the register).
    pub fn create_udata(&self, cqe_version: u8) -> mlx5_ib_create_qp {
        mlx5_ib_create_qp {
            buf_addr: self.region.ptr() as u64,
            // SAFETY: in bounds of the region.
            db_addr: unsafe { self.region.ptr().add(self.dbrec_off) } as u64,
            sq_wqe_count: self.sz.sq_wqe_cnt,
            rq_wqe_count: self.sz.rq_wqe_cnt,
            rq_wqe_shift: self.sz.rq_wqe_shift,
            flags: 0,
            uidx: if cqe_version == 0 { 0xff_ffff } else { 0 },
            ..Default::default()
        }
    }

    /// Start of the buffer.
    pub fn buf_ptr(&self) -> *mut u8 {
        self.region.ptr()
    }
}

/// Everything [`Mlx5Qp::new`] needs besides the buffer.
pub struct QpParts {
    /// The QP number the kernel gave.
    pub qpn: u32,
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Every send is signalled.
    pub sq_sig_all: bool,
    /// The QP's BlueFlame register.
    pub bf: Arc<BfReg>,
    /// Doorbell policy.
    pub policy: BfPolicy,
    /// The context's AHs.
    pub ahs: Arc<AhTable>,
    /// The context's registry (the QP registers itself).
    pub reg: Arc<Registry>,
    /// The SRQ's shared state, if the QP receives through one.
    pub srq: Option<Arc<SrqShared>>,
}

impl Mlx5Qp {
    /// The data path over `buf`, registered under its QP number.
    pub fn new(buf: QpBuf, p: QpParts) -> rverbs_uverbs::Result<Self> {
        if p.qpn > 0xff_ffff {
            return Err(Error::protocol(
                "create QP on mlx5",
                format!("QP number {:#x} does not fit 24 bits", p.qpn),
            )
            .into());
        }
        let sz = buf.sz;
        let base = buf.region.ptr();
        let atomics = |n: u32| (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        let shared = Arc::new(QpShared {
            qpn: p.qpn,
            sq_mask: sz.sq_wqe_cnt.wrapping_sub(1),
            sq_wrid: atomics(sz.sq_wqe_cnt),
            sq_wqe_head: (0..sz.sq_wqe_cnt).map(|_| AtomicU32::new(0)).collect(),
            sq_tail: AtomicU32::new(0),
            rq_mask: sz.rq_wqe_cnt.wrapping_sub(1),
            rq_wrid: atomics(sz.rq_wqe_cnt),
            rq_tail: AtomicU32::new(0),
            srq: p.srq,
        });
        p.reg.insert_qp(shared.clone());
        Ok(Self {
            // SAFETY: both inside the region (sq_offset + SQ bytes = buf_size ≤ dbrec_off).
            sq_start: unsafe { base.add(sz.sq_offset) },
            // SAFETY: as above.
            sq_end: unsafe { base.add(sz.buf_size) },
            // SAFETY: the doorbell record page follows the buffer inside the region.
            dbrec: unsafe { base.add(buf.dbrec_off) }.cast(),
            region: buf.region,
            qpn: p.qpn,
            qp_type: p.qp_type,
            sz,
            cur_post: 0,
            sq_head: 0,
            rq_head: 0,
            sig_bits: if p.sq_sig_all { CTRL_CQ_UPDATE } else { 0 },
            bf: p.bf,
            policy: p.policy,
            ahs: p.ahs,
            shared,
            reg: p.reg,
        })
    }

    /// The queue geometry.
    pub fn sizing(&self) -> &QpSizing {
        &self.sz
    }

    /// Start of the buffer (RQ first, SQ at `sizing().sq_offset`).
    pub fn buf_ptr(&self) -> *const u8 {
        self.region.ptr()
    }

    /// The doorbell record (`[receive, send]`, big-endian).
    pub fn dbrec_ptr(&self) -> *const u32 {
        self.dbrec
    }

    #[inline(always)]
    fn wqe(&self, idx: u32) -> *mut u8 {
        // SAFETY: idx is masked to the SQ by callers; the SQ lies in the region.
        unsafe { self.sq_start.add((idx as usize) << 6) }
    }

    /// Writes one send WQE at `cur_post`; returns its size in 16-byte units.
    ///
    /// # Safety
    /// The SQ has room (checked by the caller); inline SGEs must be readable.
    #[inline]
    unsafe fn build_send(&self, wr: &SendWr<'_>, nreq: usize) -> Result<usize, PostError> {
        let (opcode, imm) = match wr.op {
            SendOp::Send => (OP_SEND, 0),
            SendOp::SendWithImm { imm } => (OP_SEND_IMM, imm),
            SendOp::SendWithInv { invalidate_rkey } => (OP_SEND_INVAL, invalidate_rkey),
            SendOp::RdmaWrite { .. } => (OP_RDMA_WRITE, 0),
            SendOp::RdmaWriteWithImm { imm, .. } => (OP_RDMA_WRITE_IMM, imm),
            SendOp::RdmaRead { .. } => (OP_RDMA_READ, 0),
            SendOp::AtomicCmpSwp { .. } => (OP_ATOMIC_CS, 0),
            SendOp::AtomicFetchAdd { .. } => (OP_ATOMIC_FA, 0),
            SendOp::LocalInv { .. } => {
                return Err(PostError::unsupported(
                    nreq,
                    "LOCAL_INV is not implemented on mlx5 by rverbs (it needs a UMR WQE)",
                ))
            }
            // SendOp is non_exhaustive: operations added later are refused until built here.
            _ => {
                return Err(PostError::unsupported(
                    nreq,
                    format!("{:?} is not implemented on mlx5 by rverbs", wr.op),
                ))
            }
        };
        let ud = self.qp_type == QpType::UD;
        let rdma = matches!(
            wr.op,
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } | SendOp::RdmaRead { .. }
        );
        let atomic = matches!(
            wr.op,
            SendOp::AtomicCmpSwp { .. } | SendOp::AtomicFetchAdd { .. }
        );
        if (ud && (rdma || atomic || matches!(wr.op, SendOp::SendWithInv { .. })))
            || (self.qp_type == QpType::UC && (atomic || matches!(wr.op, SendOp::RdmaRead { .. })))
        {
            return Err(PostError::invalid(
                nreq,
                format!("a {} QP cannot post {:?}", self.qp_type, wr.op),
            ));
        }
        let idx = self.cur_post & self.shared.sq_mask;
        let ctrl = self.wqe(idx);
        // SAFETY: every store stays inside the SQ: a WQE is at most the size the sizing
        // reserved (checked SGE count and inline length), starting at a block the full-queue
        // check gave us, and wraps at `sq_end`; inline sources are readable per the caller's
        // contract. (One comment for the whole block.)
        unsafe {
            w32(ctrl, 8, 0);
            w32(ctrl, 12, imm);
            let flags = wr.flags;
            *ctrl.add(11) = self.sig_bits
                | if flags.contains(SendFlags::FENCE) {
                    CTRL_FENCE
                } else {
                    0
                }
                | if flags.contains(SendFlags::SIGNALED) {
                    CTRL_CQ_UPDATE
                } else {
                    0
                }
                | if flags.contains(SendFlags::SOLICITED) {
                    CTRL_SOLICITED
                } else {
                    0
                };
            let mut seg = ctrl.add(CTRL_SEG);
            let mut size = CTRL_SEG / 16;
            match wr.op {
                SendOp::RdmaWrite { remote_addr, rkey }
                | SendOp::RdmaWriteWithImm {
                    remote_addr, rkey, ..
                }
                | SendOp::RdmaRead { remote_addr, rkey } => {
                    w64(seg, 0, remote_addr);
                    w32(seg, 8, rkey);
                    w32(seg, 12, 0);
                    seg = seg.add(RADDR_SEG);
                    size += 1;
                }
                SendOp::AtomicCmpSwp {
                    remote_addr,
                    rkey,
                    compare,
                    swap,
                } => {
                    w64(seg, 0, remote_addr);
                    w32(seg, 8, rkey);
                    w32(seg, 12, 0);
                    w64(seg, 16, swap);
                    w64(seg, 24, compare);
                    seg = seg.add(RADDR_SEG + ATOMIC_SEG);
                    size += 2;
                }
                SendOp::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add,
                } => {
                    w64(seg, 0, remote_addr);
                    w32(seg, 8, rkey);
                    w32(seg, 12, 0);
                    // The compare field is left as it was, as libmlx5 does (the device
                    // ignores it for fetch-and-add).
                    w64(seg, 16, add);
                    seg = seg.add(RADDR_SEG + ATOMIC_SEG);
                    size += 2;
                }
                _ => {}
            }
            if ud {
                let Some(dest) = wr.ud else {
                    return Err(PostError::invalid(
                        nreq,
                        "a UD send needs a destination (an AH)",
                    ));
                };
                let Some(av) = self.ahs.get(dest.ah_num) else {
                    return Err(PostError::invalid(
                        nreq,
                        format!(
                            "AH number {} is not an mlx5 AH of this context",
                            dest.ah_num
                        ),
                    ));
                };
                ptr::copy_nonoverlapping(av.as_ptr(), seg, AV_SIZE);
                w32(seg, 8, dest.remote_qpn | MLX5_EXTENDED_UD_AV);
                w32(seg, 0, dest.remote_qkey);
                seg = seg.add(AV_SIZE);
                size += AV_SIZE / 16;
                if seg == self.sq_end {
                    seg = self.sq_start;
                }
            }
            if flags.contains(SendFlags::INLINE) && !wr.sge.is_empty() {
                let hdr = seg;
                let mut p = seg.add(INL_SEG);
                let mut inl = 0usize;
                for s in wr.sge {
                    let mut len = s.length as usize;
                    let mut src = s.addr as usize as *const u8;
                    inl += len;
                    if inl > self.sz.max_inline as usize {
                        return Err(PostError::invalid(
                            nreq,
                            format!(
                                "{inl} bytes of inline data exceed the QP's max_inline_data {}",
                                self.sz.max_inline
                            ),
                        ));
                    }
                    if p as usize + len > self.sq_end as usize {
                        let first = self.sq_end.offset_from(p) as usize;
                        ptr::copy_nonoverlapping(src, p, first);
                        src = src.add(first);
                        len -= first;
                        p = self.sq_start;
                    }
                    ptr::copy_nonoverlapping(src, p, len);
                    p = p.add(len);
                }
                if inl > 0 {
                    w32(hdr, 0, inl as u32 | MLX5_INLINE_SEG);
                    size += (inl + INL_SEG).div_ceil(16);
                }
            } else {
                let mut d = seg;
                for s in wr.sge {
                    if d == self.sq_end {
                        d = self.sq_start;
                    }
                    if s.length == 0 {
                        continue;
                    }
                    w32(d, 0, if atomic { 8 } else { s.length });
                    w32(d, 4, s.lkey);
                    w64(d, 8, s.addr);
                    d = d.add(DATA_SEG);
                    size += 1;
                }
            }
            w32(ctrl, 0, ((self.cur_post & 0xffff) << 8) | u32::from(opcode));
            w32(ctrl, 4, size as u32 | (self.qpn << 8));
            Ok(size)
        }
    }
}

impl QpOps for Mlx5Qp {
    unsafe fn post_send(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[SendWr<'_>],
    ) -> Result<(), PostError> {
        let mut nreq = 0;
        let mut last: (*mut u8, usize, bool) = (ptr::null_mut(), 0, false);
        let mut err = None;
        // Acquire: the poller's reads of the slots it freed happen before we reuse them.
        let tail = self.shared.sq_tail.load(Ordering::Acquire);
        for wr in wrs {
            if self.sz.sq_wqe_cnt == 0
                || self.sq_head.wrapping_sub(tail) as usize + nreq >= self.sz.sq_max_post as usize
            {
                let outstanding = self.sq_head.wrapping_sub(tail) as usize + nreq;
                err = Some(PostError::queue_full(nreq, outstanding as u32));
                break;
            }
            if wr.sge.len() > self.sz.sq_max_gs as usize {
                err = Some(PostError::invalid(
                    nreq,
                    format!(
                        "{} SGEs exceed the QP's max_send_sge {}",
                        wr.sge.len(),
                        self.sz.sq_max_gs
                    ),
                ));
                break;
            }
            let idx = self.cur_post & self.shared.sq_mask;
            // SAFETY: room checked above; the SGE contract is the caller's.
            match unsafe { self.build_send(wr, nreq) } {
                Ok(size) => {
                    let inl = wr.flags.contains(SendFlags::INLINE) && !wr.sge.is_empty();
                    last = (self.wqe(idx), size, inl);
                    // Relaxed: published by the doorbell record's Release store below.
                    self.shared.sq_wrid[idx as usize].store(wr.wr_id, Ordering::Relaxed);
                    self.shared.sq_wqe_head[idx as usize]
                        .store(self.sq_head.wrapping_add(nreq as u32), Ordering::Relaxed);
                    self.cur_post = self.cur_post.wrapping_add((size * 16).div_ceil(64) as u32);
                    nreq += 1;
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        if nreq > 0 {
            self.sq_head = self.sq_head.wrapping_add(nreq as u32);
            // SAFETY: the doorbell record lives in our region.
            let db = unsafe { AtomicU32::from_ptr(self.dbrec.add(SND_DBR)) };
            // Release: the WQEs are written before the device can see the new counter
            // (libmlx5 `udma_to_device_barrier` before the record store).
            db.store((self.cur_post & 0xffff).to_be(), Ordering::Release);
            let (ctrl, size, inl) = last;
            let bf = !self.policy.shut_up_bf && nreq == 1 && (inl || self.policy.prefer_bf);
            // SAFETY: `ctrl` is the last WQE written, of `size` units, inside the SQ.
            unsafe { self.bf.ring(ctrl, size, bf, self.sq_start, self.sq_end) };
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    unsafe fn post_recv(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        let mut nreq = 0;
        let mut err = None;
        // Acquire: as for the send queue.
        let tail = self.shared.rq_tail.load(Ordering::Acquire);
        for wr in wrs {
            if self.sz.rq_wqe_cnt == 0
                || self.rq_head.wrapping_sub(tail) as usize + nreq >= self.sz.rq_wqe_cnt as usize
            {
                let outstanding = self.rq_head.wrapping_sub(tail) as usize + nreq;
                err = Some(PostError::queue_full(nreq, outstanding as u32));
                break;
            }
            if wr.sge.len() > self.sz.rq_max_gs as usize {
                err = Some(PostError::invalid(
                    nreq,
                    format!(
                        "{} SGEs exceed the QP's max_recv_sge {}",
                        wr.sge.len(),
                        self.sz.rq_max_gs
                    ),
                ));
                break;
            }
            let ind = self.rq_head.wrapping_add(nreq as u32) & self.shared.rq_mask;
            // SAFETY: the WQE lies in the RQ (ind masked); at most max_gs segments.
            unsafe {
                let scat = self
                    .region
                    .ptr()
                    .add((ind as usize) << self.sz.rq_wqe_shift);
                write_scatter(scat, wr.sge, self.sz.rq_max_gs as usize, true);
            }
            // Relaxed: published by the record's Release store.
            self.shared.rq_wrid[ind as usize].store(wr.wr_id, Ordering::Relaxed);
            nreq += 1;
        }
        if nreq > 0 {
            self.rq_head = self.rq_head.wrapping_add(nreq as u32);
            // SAFETY: in our region.
            let db = unsafe { AtomicU32::from_ptr(self.dbrec.add(RCV_DBR)) };
            // Release: the WQEs before the counter the device reads (no UAR doorbell for
            // receives).
            db.store((self.rq_head & 0xffff).to_be(), Ordering::Release);
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn caps(&self) -> Option<QpCaps> {
        Some(self.sz.caps())
    }
}

impl Drop for Mlx5Qp {
    fn drop(&mut self) {
        self.reg.remove_qp(self.qpn);
    }
}

/// Writes a receive scatter list: data segments (zero-length ones skipped when `skip_empty`),
/// then the terminator when fewer than `max` were written.
///
/// # Safety
/// `scat..scat + max * 16` must lie in a live buffer.
unsafe fn write_scatter(scat: *mut u8, sge: &[Sge], max: usize, skip_empty: bool) {
    let mut j = 0;
    for s in sge {
        if skip_empty && s.length == 0 {
            continue;
        }
        // SAFETY: j < sge.len() ≤ max (checked by the caller).
        unsafe {
            let d = scat.add(j * DATA_SEG);
            w32(d, 0, s.length);
            w32(d, 4, s.lkey);
            w64(d, 8, s.addr);
        }
        j += 1;
    }
    if j < max {
        // SAFETY: j < max.
        unsafe {
            let d = scat.add(j * DATA_SEG);
            w32(d, 0, 0);
            w32(d, 4, MLX5_INVALID_LKEY);
            w64(d, 8, 0);
        }
    }
}

/// The part of an SRQ both its post path and the CQ poller touch: the free list.
pub struct SrqShared {
    srqn: u32,
    inner: Mutex<SrqList>,
}

struct SrqList {
    /// The SRQ buffer: owned here, so that it stays mapped while a poller may still hold
    /// this state.
    _region: Region,
    buf: *mut u8,
    shift: u32,
    head: u32,
    tail: u32,
    wrid: Box<[u64]>,
}

// SAFETY: `buf` points into `region`, which this value owns; access is under the mutex.
unsafe impl Send for SrqList {}

impl fmt::Debug for SrqShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SrqShared({:#x})", self.srqn)
    }
}

impl SrqList {
    fn next_of(&self, i: u32) -> *mut u8 {
        // SAFETY: i < max (indices come from the free list or a masked CQE counter).
        unsafe { self.buf.add((i as usize) << self.shift) }
    }
}

impl SrqShared {
    fn done(&self, counter: u16) -> Option<u64> {
        let mut l = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let ind = u32::from(counter);
        if ind as usize >= l.wrid.len() {
            return None;
        }
        let wr = l.wrid[ind as usize];
        // Put the WQE back at the tail of the free list (libmlx5 `mlx5_free_srq_wqe`).
        let t = l.next_of(l.tail);
        // SAFETY: `t` is a WQE of the SRQ buffer; the device is done with the free list's
        // tail WQE (it only consumes from the head).
        unsafe { t.add(2).cast::<u16>().write((ind as u16).to_be()) };
        l.tail = ind;
        Some(wr)
    }
}

/// An mlx5 SRQ's data path.
pub struct Mlx5Srq {
    buf: *mut u8,
    dbrec: *mut u32,
    sz: SrqSizing,
    counter: u32,
    shared: Arc<SrqShared>,
    reg: Arc<Registry>,
}

// SAFETY: the pointers point into the region `shared` owns, which this value keeps alive.
unsafe impl Send for Mlx5Srq {}

impl fmt::Debug for Mlx5Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlx5Srq")
            .field("srqn", &self.shared.srqn)
            .field("sizing", &self.sz)
            .finish_non_exhaustive()
    }
}

/// An SRQ's memory before the kernel has answered.
pub struct SrqBuf {
    region: Region,
    sz: SrqSizing,
    dbrec_off: usize,
}

impl SrqBuf {
    /// Allocates the buffer, links the free list (and the wait queue) as libmlx5 does.
    pub fn new(sz: SrqSizing) -> rverbs_uverbs::Result<Self> {
        let page = rustix::param::page_size();
        let bytes = (sz.max as usize) << sz.wqe_shift;
        let dbrec_off = align(bytes, page);
        let region = Region::new(dbrec_off + page)?;
        let link = |from: u32, to: u32| {
            for i in from..to {
                // SAFETY: i < max: inside the buffer.
                unsafe {
                    let p = region.ptr().add((i as usize) << sz.wqe_shift);
                    p.add(2).cast::<u16>().write(((i + 1) as u16).to_be());
                }
            }
        };
        link(0, sz.max_wr);
        Ok(Self {
            region,
            sz,
            dbrec_off,
        })
    }

    /// The CREATE_SRQ driver data.
    pub fn create_udata(&self) -> mlx5_ib_create_srq {
        mlx5_ib_create_srq {
            buf_addr: self.region.ptr() as u64,
            // SAFETY: in the region.
            db_addr: unsafe { self.region.ptr().add(self.dbrec_off) } as u64,
            ..Default::default()
        }
    }
}

impl Mlx5Srq {
    /// The data path over `buf`, known to the device as `srqn`.
    pub fn new(buf: SrqBuf, srqn: u32, reg: Arc<Registry>) -> Self {
        let base = buf.region.ptr();
        // SAFETY: in the region.
        let dbrec = unsafe { base.add(buf.dbrec_off) }.cast();
        let sz = buf.sz;
        let shared = Arc::new(SrqShared {
            srqn,
            inner: Mutex::new(SrqList {
                _region: buf.region,
                buf: base,
                shift: buf.sz.wqe_shift,
                head: 0,
                tail: buf.sz.max_wr,
                wrid: vec![0u64; buf.sz.max as usize].into_boxed_slice(),
            }),
        });
        reg.insert_srq(shared.clone());
        Self {
            buf: base,
            dbrec,
            sz,
            counter: 0,
            shared,
            reg,
        }
    }

    /// The shared part (for QPs attached to this SRQ).
    pub fn shared(&self) -> &Arc<SrqShared> {
        &self.shared
    }

    /// The geometry.
    pub fn sizing(&self) -> &SrqSizing {
        &self.sz
    }

    /// Start of the buffer.
    pub fn buf_ptr(&self) -> *const u8 {
        self.buf
    }

    /// The doorbell record.
    pub fn dbrec_ptr(&self) -> *const u32 {
        self.dbrec
    }
}

impl SrqOps for Mlx5Srq {
    unsafe fn post_recv(
        &mut self,
        _srq: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        let mut nreq = 0;
        let mut err = None;
        {
            let mut l = self.shared.inner.lock().unwrap_or_else(|e| e.into_inner());
            for wr in wrs {
                if wr.sge.len() > self.sz.max_gs as usize {
                    err = Some(PostError::invalid(
                        nreq,
                        format!(
                            "{} SGEs exceed the SRQ's max_sge {}",
                            wr.sge.len(),
                            self.sz.max_gs
                        ),
                    ));
                    break;
                }
                if l.head == l.tail {
                    err = Some(PostError::queue_full(nreq, self.sz.max_wr));
                    break;
                }
                let h = l.head;
                l.wrid[h as usize] = wr.wr_id;
                let next = l.next_of(h);
                // SAFETY: `next` is the free WQE at the list head, ours until the record
                // store; its scatter list holds max_gs segments.
                unsafe {
                    l.head = u32::from(u16::from_be(next.add(2).cast::<u16>().read()));
                    write_scatter(
                        next.add(SRQ_NEXT_SEG),
                        wr.sge,
                        self.sz.max_gs as usize,
                        false,
                    );
                }
                nreq += 1;
            }
        }
        if nreq > 0 {
            self.counter = self.counter.wrapping_add(nreq as u32);
            // SAFETY: in our region.
            let db = unsafe { AtomicU32::from_ptr(self.dbrec) };
            // Release: the WQEs are written before the device sees the counter.
            db.store(self.counter.to_be(), Ordering::Release);
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Mlx5Srq {
    fn drop(&mut self) {
        self.reg.remove_srq(self.shared.srqn);
    }
}
