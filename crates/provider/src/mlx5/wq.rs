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
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rverbs_uverbs::ah::AhAttr;
use rverbs_uverbs::driver::{KernelObj, QpOps, SrqOps};
use rverbs_uverbs::error::PostError;
use rverbs_uverbs::mr::AccessFlags;
use rverbs_uverbs::mw::MwType;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::shared::copy_from_shared_raw;
use rverbs_uverbs::wc::WcOpcode;
use rverbs_uverbs::wr::{RecvWr, SendFlags, SendOp, SendWr, Sge};
use rverbs_uverbs::Error;
use rverbs_uverbs::{OpKind, OpSet, SendCaps};

use super::abi::{mlx5_ib_create_qp, mlx5_ib_create_srq, MLX5_BFREGS_PER_UAR, MLX5_BF_OFFSET};
use super::barrier::wc_store_barrier;
use super::cq::Region;
use super::cqe::{Cqe64, CqeOpcode, WorkQueue, WqeOpcode, WqeRef, WrIdLookup};

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
/// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`: libmlx5 puts it on the work request after a UMR
/// (bind or local invalidate) unless that request asks for the full fence itself.
const CTRL_SMALL_FENCE: u8 = 1 << 5;

/// UMR control segment (`struct mlx5_wqe_umr_ctrl_seg`, 48 bytes) `flags` bits.
const UMR_FLAG_INLINE: u8 = 1 << 7;
const UMR_FLAG_CHECK_FREE: u8 = 1 << 5;
const UMR_FLAG_TRANSLATION_OFFSET: u8 = 1 << 4;
const UMR_FLAG_CHECK_QPN: u8 = 1 << 3;
/// UMR control segment `mkey_mask` bits: which mkey-context fields the UMR changes.
const UMR_MASK_LEN: u64 = 1 << 0;
const UMR_MASK_START_ADDR: u64 = 1 << 6;
const UMR_MASK_MKEY: u64 = 1 << 13;
const UMR_MASK_QPN: u64 = 1 << 14;
const UMR_MASK_LOCAL_WRITE: u64 = 1 << 18;
const UMR_MASK_REMOTE_READ: u64 = 1 << 19;
const UMR_MASK_REMOTE_WRITE: u64 = 1 << 20;
const UMR_MASK_ATOMIC: u64 = 1 << 21;
const UMR_MASK_FREE: u64 = 1 << 29;
/// Mkey context segment (`struct mlx5_wqe_mkey_context_seg`, 64 bytes): `free` and
/// `access_flags` bits.
const MKEY_FREE: u8 = 1 << 6;
const MKEY_ACCESS_ATOMIC: u8 = 1 << 6;
const MKEY_ACCESS_REMOTE_WRITE: u8 = 1 << 5;
const MKEY_ACCESS_REMOTE_READ: u8 = 1 << 4;
const MKEY_ACCESS_LOCAL_WRITE: u8 = 1 << 3;
/// A bind's KLM takes at most 2 GiB (libmlx5 `set_bind_wr`: EOPNOTSUPP above).
pub const MAX_BIND_LENGTH: u64 = 1 << 31;
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

/// Largest queue buffer (bytes) a sizing may describe: what [`qp_sizing`] can give (its
/// send queue stays under 2 GiB) with room for the receive queue.
const MAX_WQ_BYTES: usize = 1 << 32;

impl QpSizing {
    /// Checks the geometry's own consistency — what the buffer, the WQE writers and the slot
    /// tables rely on — whatever built it: queue sizes powers of two (or 0), the receive queue
    /// exactly `sq_offset` bytes, the send queue exactly the rest of `buf_size`, receive WQEs
    /// big enough for `rq_max_gs` segments, no more posts than blocks.
    fn check_layout(&self) -> Result<(), String> {
        let pow2_or_0 = |v: u32| v == 0 || v.is_power_of_two();
        if !pow2_or_0(self.sq_wqe_cnt) || !pow2_or_0(self.rq_wqe_cnt) {
            return Err(format!(
                "queue sizes {} (send blocks) and {} (receive WQEs) must be powers of two or 0",
                self.sq_wqe_cnt, self.rq_wqe_cnt
            ));
        }
        let rq_bytes = if self.rq_wqe_cnt == 0 {
            if self.rq_max_gs != 0 {
                return Err(format!(
                    "rq_max_gs {} without a receive queue",
                    self.rq_max_gs
                ));
            }
            0
        } else {
            if !(4..=16).contains(&self.rq_wqe_shift)
                || self.rq_max_gs as usize * DATA_SEG > 1 << self.rq_wqe_shift
            {
                return Err(format!(
                    "receive WQE of 2^{} bytes cannot hold rq_max_gs {} segments",
                    self.rq_wqe_shift, self.rq_max_gs
                ));
            }
            (self.rq_wqe_cnt as usize) << self.rq_wqe_shift
        };
        let sq_bytes = self.sq_wqe_cnt as usize * SEND_WQE_BB;
        if self.sq_wqe_cnt == 0
            && (self.sq_max_post != 0 || self.sq_max_gs != 0 || self.max_inline != 0)
        {
            return Err("send capacities without a send queue".into());
        }
        if self.sq_max_post > self.sq_wqe_cnt {
            return Err(format!(
                "sq_max_post {} exceeds the {} send blocks",
                self.sq_max_post, self.sq_wqe_cnt
            ));
        }
        if self.sq_offset != rq_bytes
            || rq_bytes.checked_add(sq_bytes) != Some(self.buf_size)
            || self.buf_size > MAX_WQ_BYTES
        {
            return Err(format!(
                "buffer of {} bytes with the send queue at {} does not hold {rq_bytes} \
                 receive and {sq_bytes} send bytes",
                self.buf_size, self.sq_offset
            ));
        }
        Ok(())
    }

    /// [`QpSizing::check_layout`], and that `sq_max_post` WQEs of the size `sq_max_gs`
    /// and `max_inline` need on a `qp_type` QP fit the send queue.
    fn check_for(&self, qp_type: QpType) -> Result<(), String> {
        self.check_layout()?;
        if self.sq_wqe_cnt == 0 {
            return Ok(());
        }
        let overhead = sq_overhead(qp_type).ok_or(format!("QP type {qp_type} on mlx5"))?;
        let gather = overhead + self.sq_max_gs as usize * DATA_SEG;
        let inline = if self.max_inline > 0 {
            overhead + INL_SEG + self.max_inline as usize
        } else {
            0
        };
        let wqe = align(gather.max(inline), SEND_WQE_BB);
        if self.sq_max_post as usize * wqe > self.sq_wqe_cnt as usize * SEND_WQE_BB {
            return Err(format!(
                "{} send WQEs of {wqe} bytes (sq_max_gs {}, max_inline {}) exceed the {}-block \
                 send queue",
                self.sq_max_post, self.sq_max_gs, self.max_inline, self.sq_wqe_cnt
            ));
        }
        Ok(())
    }

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
        // A WQE without inline room (no SGEs, no inline data, the overhead a whole number of
        // blocks) carries no inline bytes.
        s.max_inline = wqe_size.saturating_sub(overhead + INL_SEG) as u32;
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

impl SrqSizing {
    /// Checks the geometry's own consistency — what the free list and the post path rely on —
    /// whatever built it: `max` a power of two the 16-bit next indices address, the free list
    /// (`max_wr`) inside the ring, WQEs big enough for the next segment and `max_gs`
    /// scatter segments.
    fn check(&self) -> Result<(), String> {
        if !self.max.is_power_of_two() || self.max < 2 || self.max > 1 << 16 {
            return Err(format!(
                "max {} is not a power of two in 2..=65536",
                self.max
            ));
        }
        if self.max_wr >= self.max {
            return Err(format!(
                "max_wr {} does not fit a ring of {} WQEs",
                self.max_wr, self.max
            ));
        }
        if !(5..=16).contains(&self.wqe_shift)
            || SRQ_NEXT_SEG + self.max_gs as usize * DATA_SEG > 1 << self.wqe_shift
        {
            return Err(format!(
                "WQE of 2^{} bytes cannot hold the next segment and max_gs {} segments",
                self.wqe_shift, self.max_gs
            ));
        }
        Ok(())
    }
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
    if max > 1 << 16 {
        return Err(Error::invalid(
            op,
            format!("max_wr {max_wr} needs {max} WQEs, above the 65536 the free list addresses"),
        )
        .into());
    }
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

/// The lowest UDP source port of RoCE v2 (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`): ports are
/// chosen in `0xC000..=0xFFFF`.
pub const ROCE_V2_SPORT_MIN: u16 = 0xc000;

/// The RoCE v2 UDP source port of an AH (libmlx5 `mlx5_ah_set_udp_sport`): from a non-zero
/// flow label, its low 14 bits XOR its high 6 bits, in the valid range
/// (`ibv_flow_label_to_udp_sport`); with flow label 0 a random port of that range (it spreads
/// flows over the fabric's paths; nothing on the receiving side depends on it).
pub fn roce_v2_udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & 0xfffff;
    if fl != 0 {
        let low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
        return low as u16 | ROCE_V2_SPORT_MIN;
    }
    use std::hash::{BuildHasher, Hasher};
    // A per-process random key (std's hasher seed) hashing a counter: random enough to
    // spread flows, no dependency.
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    (h.finish() % (0x1_0000 - u64::from(ROCE_V2_SPORT_MIN))) as u16 + ROCE_V2_SPORT_MIN
}

/// Builds the address vector of an AH (libmlx5 `mlx5_create_ah`); `dmac` is the RoCE
/// destination MAC the kernel's create-AH response gave (`None` on InfiniBand); `roce_v2`:
/// the source GID is a RoCE v2 one, so the AV carries a UDP source port where InfiniBand has
/// the destination LID.
pub fn build_av(attr: &AhAttr, dmac: Option<[u8; 6]>, roce_v2: bool) -> Av {
    let mut av = [0u8; AV_SIZE];
    let rate = RATE.get(attr.static_rate as usize).copied().unwrap_or(0);
    let grh_bit;
    if let Some(mac) = dmac {
        grh_bit = 0;
        if roce_v2 {
            let fl = attr.grh.map_or(0, |g| g.flow_label);
            av[14..16].copy_from_slice(&roce_v2_udp_sport(fl).to_be_bytes());
        }
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

    /// A register at byte `off` of the UAR mapping `uar..uar + uar_len`, with BlueFlame
    /// halves of `buf_size` bytes (0: doorbells only), named `index` in errors and
    /// [`BfReg::index`] (dynamic UARs: the UAR's page id).
    ///
    /// # Safety
    /// As for [`BfReg::new`].
    pub unsafe fn at(
        uar: *mut u8,
        uar_len: usize,
        off: usize,
        buf_size: usize,
        index: u32,
    ) -> rverbs_uverbs::Result<Self> {
        if off + 8.max(2 * buf_size) > uar_len {
            return Err(Error::protocol(
                "map an mlx5 UAR",
                format!("register at {off:#x} lies outside the UAR's {uar_len} bytes"),
            )
            .into());
        }
        Ok(Self {
            // SAFETY: in bounds (checked above).
            reg: unsafe { uar.add(off) },
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

    /// Bytes of one BlueFlame buffer half (0: doorbells only).
    pub fn bf_size(&self) -> usize {
        self.buf_size
    }

    /// Rings: `ctrl` points at the last WQE's control segment, `size16` its size in 16-byte
    /// units; with `bf` BlueFlame copies the WQE (rounded up to 64 bytes, wrapping at `qend`
    /// to `qstart`), else the 64-bit doorbell carries the control segment's first 8 bytes.
    ///
    /// # Safety
    /// `ctrl..` must be a WQE of `size16` units inside the SQ `qstart..qend` (whole 64-byte
    /// blocks); with `bf`, `size16 * 16` must fit [`BfReg::bf_size`].
    #[inline(always)]
    unsafe fn ring(
        &self,
        ctrl: *const u8,
        size16: usize,
        bf: bool,
        qstart: *const u8,
        qend: *const u8,
    ) {
        // Acquire: the previous holder's BlueFlame stores and offset toggle happen before ours.
        if self
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        // The doorbell record store (done by the caller) must reach the device before the UAR
        // write: the device may fetch WQEs from memory on the doorbell and checks the record
        // (rdma-core `mmio_wc_start`: `sfence` on x86-64, `dsb st` on aarch64).
        wc_store_barrier();
        let off = self.offset.load(Ordering::Relaxed);
        // SAFETY: `reg + off` lies in the register (checked in `new`: both halves fit).
        let dst = unsafe { self.reg.add(off) };
        if bf {
            let mut src = ctrl;
            let mut d = dst;
            let end = dst.wrapping_add(size16 * 16);
            loop {
                // SAFETY: `src` walks whole 64-byte blocks of the SQ, wrapping at its end
                // (caller's contract); `d` stays inside the BlueFlame half (size16 * 16 ≤
                // buf_size, rounded up to whole blocks, which buf_size is).
                unsafe {
                    copy_block_to_wc(d, src);
                    src = src.add(64);
                    d = d.add(64);
                }
                if d >= end {
                    break;
                }
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
        wc_store_barrier();
        self.offset.store(off ^ self.buf_size, Ordering::Relaxed);
        // Release: our register stores and the toggle happen before the next holder's use.
        self.lock.store(false, Ordering::Release);
    }

    /// Waits for the register's lock held by another QP's post (registers other than the
    /// dedicated ones are shared).
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        // Acquire: as in `ring`.
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }
}

/// Copies one 64-byte WQE block to write-combining UAR memory: four 16-byte SSE stores on
/// x86-64 (eight 8-byte volatile stores elsewhere and under Miri), in address order, never a
/// string instruction, whose store order is unspecified (libmlx5 `mlx5_bf_copy`). The block
/// is read first with plain loads: the SQ is ours until the doorbell.
///
/// # Safety
/// `src..src + 64` must be readable, `dst..dst + 64` writable UAR (or test) memory that
/// nothing holds a Rust reference into; `dst` 8-byte aligned.
#[inline(always)]
unsafe fn copy_block_to_wc(dst: *mut u8, src: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the caller's contract; `movups` needs no alignment; SSE2 is part of the x86-64
    // baseline. The block has no `nomem`/`readonly` option: the compiler completes the WQE
    // stores before it and treats it as writing memory (as a volatile store).
    unsafe {
        core::arch::asm!(
            "movups {a}, xmmword ptr [{s}]",
            "movups {b}, xmmword ptr [{s} + 16]",
            "movups {c}, xmmword ptr [{s} + 32]",
            "movups {e}, xmmword ptr [{s} + 48]",
            "movups xmmword ptr [{d}], {a}",
            "movups xmmword ptr [{d} + 16], {b}",
            "movups xmmword ptr [{d} + 32], {c}",
            "movups xmmword ptr [{d} + 48], {e}",
            s = in(reg) src,
            d = in(reg) dst,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            e = out(xmm_reg) _,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        let b = ptr::read(src.cast::<[u64; 8]>());
        let d8 = dst.cast::<u64>();
        for (i, w) in b.iter().enumerate() {
            ptr::write_volatile(d8.add(i), *w);
        }
    }
}

/// A send WQE's completion entry: the caller's `wr_id` and the work request count at its
/// post (libmlx5 `sq.wrid`, `sq.wqe_head`), indexed by the WQE's first block.
#[derive(Debug, Default)]
struct SqSlot {
    wr_id: AtomicU64,
    head: AtomicU32,
    /// For a UMR WQE: the completion opcode (`WcOpcode` BIND_MW or LOCAL_INV, libmlx5's
    /// `wr_data`); written only for UMR WQEs and read only for CQEs naming a UMR WQE.
    wr_data: AtomicU8,
}

/// A QP's completion-side state, shared between its post path and the CQ poller.
///
/// The post path (under the QP's lock) writes a slot of `sq` only while it is free; the poller
/// (under its CQ's lock, which is another lock) reads it after its completion. They are
/// atomics because the two sides run under different locks; Relaxed ones are plain moves on
/// x86-64 and aarch64, so they cost the post path nothing over plain stores.
#[derive(Debug)]
pub struct QpShared {
    qpn: u32,
    sq_mask: u32,
    sq: Box<[SqSlot]>,
    /// Work requests completed (libmlx5 `sq.tail`): written by the poller.
    sq_tail: AtomicU32,
    rq_mask: u32,
    rq_wrid: Box<[AtomicU64]>,
    rq_tail: AtomicU32,
    srq: Option<Arc<SrqShared>>,
    /// With CQE version 1: the QP's user index (what its CQEs carry in `srqn_uidx`).
    uidx: Option<u32>,
}

impl QpShared {
    fn send_done(&self, counter: u16, wr_data: &mut u8) -> Option<u64> {
        let slot = self.sq.get((u32::from(counter) & self.sq_mask) as usize)?;
        // Relaxed: the post stored it before the doorbell record's Release store; the device
        // wrote the CQE after reading the record and the poller's Acquire load of the CQE's
        // owner byte orders this read after it.
        let wr = slot.wr_id.load(Ordering::Relaxed);
        let head = slot.head.load(Ordering::Relaxed);
        // Relaxed, as above; read before the tail store below lets a post reuse the slot.
        *wr_data = slot.wr_data.load(Ordering::Relaxed);
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
    /// Removes `qp`'s entry if it is still `qp`'s: the QP is dropped after the kernel
    /// destroyed it, and by then the kernel may have given its number to a new QP, whose
    /// entry must stay.
    fn remove_qp(&self, qp: &Arc<QpShared>) {
        let mut m = self.qps.write().unwrap_or_else(|e| e.into_inner());
        if m.get(&qp.qpn).is_some_and(|e| Arc::ptr_eq(e, qp)) {
            m.remove(&qp.qpn);
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
    fn insert_srq(&self, srq: Arc<SrqShared>) {
        let mut m = self.srqs.write().unwrap_or_else(|e| e.into_inner());
        m.insert(srq.srqn, srq);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
    /// Removes `srq`'s entry if it is still `srq`'s (as [`Registry::remove_qp`]: SRQ
    /// numbers are reused too).
    fn remove_srq(&self, srq: &Arc<SrqShared>) {
        let mut m = self.srqs.write().unwrap_or_else(|e| e.into_inner());
        if m.get(&srq.srqn).is_some_and(|e| Arc::ptr_eq(e, srq)) {
            m.remove(&srq.srqn);
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
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
    /// CQE version 1: `srqn_uidx` is the QP's user index, not an SRQ number (the SRQ of a
    /// receive is found through its QP).
    cqe_v1: bool,
    /// The `wr_data` of the send WQE the last lookup found (0: none).
    wr_data: u8,
}

impl CqLookup {
    /// A lookup over `reg` for CQEs of `cqe_version` (0 or 1).
    pub fn new(reg: Arc<Registry>, cqe_version: u8) -> Self {
        Self {
            reg,
            cache: None,
            cqe_v1: cqe_version != 0,
            wr_data: 0,
        }
    }
}

impl WrIdLookup for CqLookup {
    #[inline]
    fn wr_id(&mut self, w: WqeRef) -> Option<u64> {
        // Acquire: pairs with the AcqRel bump after a change, so a matching generation means
        // the cached QP is still the registered one.
        let g = self.reg.generation.load(Ordering::Acquire);
        self.wr_data = 0;
        let qp = match &self.cache {
            Some((cg, qp)) if *cg == g && qp.qpn == w.qpn => qp.clone(),
            _ => {
                let qp = self.reg.qp(w.qpn)?;
                self.cache = Some((g, qp.clone()));
                qp
            }
        };
        match w.queue {
            WorkQueue::Send => qp.send_done(w.wqe_counter, &mut self.wr_data),
            _ => qp.recv_done(
                w.wqe_counter,
                &self.reg,
                if self.cqe_v1 { 0 } else { w.srqn_uidx },
            ),
        }
    }

    #[inline]
    fn wr_data(&self) -> Option<WcOpcode> {
        (self.wr_data != 0).then_some(WcOpcode(u32::from(self.wr_data)))
    }
}

impl CqLookup {
    /// What to remove from this CQ now that QP `qpn` is in RESET ([`ResetFilter`]); `recv`:
    /// the CQ is the QP's receive CQ. `None` when no QP of the context has that number.
    pub fn reset_filter(&self, qpn: u32, recv: bool) -> Option<ResetFilter> {
        let qp = self.reg.qp(qpn)?;
        Some(ResetFilter {
            // libmlx5's `rsc.rsn`: the user index with CQE version 1, else the QP number.
            rsn: if self.cqe_v1 {
                qp.uidx.unwrap_or(qpn)
            } else {
                qpn
            },
            cqe_v1: self.cqe_v1,
            srq: if recv { qp.srq.clone() } else { None },
        })
    }
}

/// The entries of a QP moved to RESET, as libmlx5's `free_res_cqe` picks them for
/// `mlx5_cq_clean`: with CQE version 1 those whose `srqn_uidx` is the QP's user index, with
/// version 0 those whose QP number is the QP's. A removed receive completion of an SRQ (on
/// the QP's receive CQ; version 1: a responder opcode, version 0: a non-zero `srqn`) gives
/// its WQE back to the SRQ's free list, as its poll would have.
#[derive(Debug)]
pub struct ResetFilter {
    rsn: u32,
    cqe_v1: bool,
    srq: Option<Arc<SrqShared>>,
}

impl ResetFilter {
    /// Whether `cqe` goes (and frees its SRQ WQE when it does, see above).
    pub fn removes(&self, cqe: &Cqe64) -> bool {
        let (ours, srq_wqe) = if self.cqe_v1 {
            let responder = matches!(
                cqe.opcode(),
                CqeOpcode::RESP_WR_IMM
                    | CqeOpcode::RESP_SEND
                    | CqeOpcode::RESP_SEND_IMM
                    | CqeOpcode::RESP_SEND_INV
                    | CqeOpcode::RESP_ERR
            );
            (cqe.srqn_uidx() & 0xff_ffff == self.rsn, responder)
        } else {
            (cqe.qpn() == self.rsn, cqe.srqn_uidx() & 0xff_ffff != 0)
        };
        if ours && srq_wqe {
            if let Some(srq) = &self.srq {
                srq.done(cqe.wqe_counter());
            }
        }
        ours
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
    // The send path's state and constants first (one or two cache lines).
    sq_start: *mut u8,
    sq_end: *mut u8,
    /// `shared.sq`'s slots (kept alive by `shared`).
    sq_slots: *const SqSlot,
    dbrec: *mut u32,
    /// The control segment's bytes 4–7 for this QP as a little-endian u64's high half:
    /// `be32(qpn << 8)`; the size in 16-byte units goes into its low byte (byte 7).
    qpn_ds: u64,
    sq_mask: u32,
    cur_post: u32,
    sq_head: u32,
    max_post: u32,
    max_gs: u32,
    max_inline: u32,
    /// `fm_ce_se` by `SendFlags` bits 0–2 (FENCE, SIGNALED, SOLICITED), sq_sig_all included.
    fm_ce_se: [u8; 8],
    /// The fence the next work request gets unless it asks for the full one: the small
    /// initiator fence after a UMR, across posts (libmlx5 `fm_cache`), else 0.
    fm_cache: u8,
    /// The operations this QP takes ([`SendCaps::allowed`] of [`send_caps`]): uverbs' `Qp`
    /// refuses the others before posting; the encoder keeps the same set as the guard of its
    /// WQE layouts for callers that drive it directly (the oracle, benches, fuzzing).
    ops_ok: OpSet,
    ud: bool,
    /// The largest WQE (16-byte units) BlueFlame copies, for inline and other single WRs (0:
    /// never: `MLX5_SHUT_UP_BF`, register without BlueFlame, or `prefer_bf` off for non-inline).
    bf_max_inl: u32,
    bf_max_plain: u32,
    bf: Arc<BfReg>,
    region: Region,
    qpn: u32,
    qp_type: QpType,
    sz: QpSizing,
    rq_head: u32,
    ahs: Arc<AhTable>,
    shared: Arc<QpShared>,
    reg: Arc<Registry>,
    _lease: Option<super::uar::UarLease>,
    _uidx: Option<UserIndex>,
}

/// Whether mlx5 (as libmlx5 builds WQEs) encodes `op` on a `t` QP: the UMR operations
/// (memory-window bind, local invalidate) on RC and UC, RDMA and atomics on the connected
/// types; the transport's own limits (`OpSet::for_transport`) are applied on top. Exhaustive
/// over [`OpKind`]: a new operation does not compile until this says whether mlx5 encodes it.
const fn encodes(op: OpKind, t: QpType) -> bool {
    match op {
        OpKind::Send | OpKind::SendWithImm => true,
        OpKind::SendWithInv
        | OpKind::RdmaWrite
        | OpKind::RdmaWriteWithImm
        | OpKind::RdmaRead
        | OpKind::AtomicCmpSwp
        | OpKind::AtomicFetchAdd
        | OpKind::LocalInv
        | OpKind::BindMw => matches!(t, QpType::RC | QpType::UC),
        // Not encoded: the libmlx5 44 oracle cannot judge them (docs/mlx5.md).
        OpKind::Flush | OpKind::AtomicWrite => false,
    }
}

/// What mlx5 encodes, per QP type (the data `Driver::send_caps` returns).
pub(crate) fn send_caps() -> SendCaps {
    SendCaps {
        rc: OpSet::from_fn(|k| encodes(k, QpType::RC)),
        uc: OpSet::from_fn(|k| encodes(k, QpType::UC)),
        ud: OpSet::from_fn(|k| encodes(k, QpType::UD)),
    }
}

/// Why a send work request was refused (the message is built out of line, from the WR).
#[derive(Clone, Copy, Debug)]
enum SendFault {
    Sges,
    Inline,
    NoAh,
    UnknownAh,
    OpForType,
    /// A bind longer than [`MAX_BIND_LENGTH`].
    BindLength,
    /// A zero-based bind of a type 1 window (libmlx5 `mlx5_bind_mw`: EINVAL).
    BindZeroBased,
    Unsupported,
}

/// A user index (CQE version 1: what the CQEs of a QP carry in `srqn_uidx`), taken from
/// its context's table and freed on drop.
#[derive(Debug)]
pub struct UserIndex {
    idx: u32,
    table: Arc<Mutex<Vec<bool>>>,
}

/// User indices fit 24 bits (the CQE field).
const MAX_UIDX: usize = 0xff_ffff;

impl UserIndex {
    /// The lowest free index of `table` (libmlx5 `mlx5_store_uidx`).
    pub fn take(table: &Arc<Mutex<Vec<bool>>>) -> rverbs_uverbs::Result<Self> {
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        let i = match t.iter().position(|used| !used) {
            Some(i) => i,
            None if t.len() < MAX_UIDX => {
                t.push(false);
                t.len() - 1
            }
            None => {
                return Err(Error::invalid(
                    "create QP on mlx5",
                    format!("all {MAX_UIDX} user indices of the context are in use"),
                )
                .into())
            }
        };
        t[i] = true;
        Ok(Self {
            idx: i as u32,
            table: table.clone(),
        })
    }

    /// The index.
    pub fn get(&self) -> u32 {
        self.idx
    }
}

impl Drop for UserIndex {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t[self.idx as usize] = false;
    }
}

// SAFETY: the raw pointers point into `region`, which this value owns, and (`sq_slots`) into
// `shared`'s slot table of atomics, which it keeps alive; the BlueFlame register is Sync.
// Moving the QP between threads moves all of it.
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
        sz.check_layout()
            .map_err(|d| Error::invalid("allocate mlx5 QP buffer", d))?;
        let page = rustix::param::page_size();
        let dbrec_off = align(sz.buf_size.max(1), page);
        let region = Region::new(dbrec_off + page)?;
        Ok(Self {
            region,
            sz,
            dbrec_off,
        })
    }

    /// The buffer's start (the receive queue, then the send queue at `sq_offset`).
    #[cfg(test)]
    pub fn buf_ptr(&self) -> *mut u8 {
        self.region.ptr()
    }

    /// The CREATE_QP driver data. `uidx`: the user index CQEs of version 1 carry (`None`
    /// with CQE version 0: 0xffffff). `uar_page`: with dynamic UARs, the page id of the UAR
    /// whose register the QP uses (`MLX5_QP_FLAG_UAR_PAGE_INDEX`); `None` with static UARs
    /// (the kernel picks the register and answers it).
    pub fn create_udata(&self, uidx: Option<u32>, uar_page: Option<u32>) -> mlx5_ib_create_qp {
        mlx5_ib_create_qp {
            buf_addr: self.region.ptr() as u64,
            // SAFETY: in bounds of the region.
            db_addr: unsafe { self.region.ptr().add(self.dbrec_off) } as u64,
            sq_wqe_count: self.sz.sq_wqe_cnt,
            rq_wqe_count: self.sz.rq_wqe_cnt,
            rq_wqe_shift: self.sz.rq_wqe_shift,
            flags: if uar_page.is_some() {
                super::abi::MLX5_QP_FLAG_UAR_PAGE_INDEX
            } else {
                0
            },
            uidx: uidx.unwrap_or(0xff_ffff),
            bfreg_index: uar_page.unwrap_or(0),
            ..Default::default()
        }
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
    /// With dynamic UARs: the pool's lease on `bf`, given back when the QP is dropped.
    pub lease: Option<super::uar::UarLease>,
    /// With CQE version 1: the QP's user index, freed when the QP is dropped.
    pub uidx: Option<UserIndex>,
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
        // `QpBuf::new` checked the layout; the WQE sizes depend on the QP type as well.
        sz.check_for(p.qp_type)
            .map_err(|d| Error::invalid("create QP on mlx5", d))?;
        let base = buf.region.ptr();
        let atomics = |n: u32| (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        let shared = Arc::new(QpShared {
            qpn: p.qpn,
            sq_mask: sz.sq_wqe_cnt.wrapping_sub(1),
            sq: (0..sz.sq_wqe_cnt).map(|_| SqSlot::default()).collect(),
            sq_tail: AtomicU32::new(0),
            rq_mask: sz.rq_wqe_cnt.wrapping_sub(1),
            rq_wrid: atomics(sz.rq_wqe_cnt),
            rq_tail: AtomicU32::new(0),
            srq: p.srq,
            uidx: p.uidx.as_ref().map(UserIndex::get),
        });
        p.reg.insert_qp(shared.clone());
        let sig = if p.sq_sig_all { CTRL_CQ_UPDATE } else { 0 };
        let fm_ce_se: [u8; 8] = std::array::from_fn(|f| {
            let f = SendFlags::from_bits_truncate(f as u32);
            sig | if f.contains(SendFlags::FENCE) {
                CTRL_FENCE
            } else {
                0
            } | if f.contains(SendFlags::SIGNALED) {
                CTRL_CQ_UPDATE
            } else {
                0
            } | if f.contains(SendFlags::SOLICITED) {
                CTRL_SOLICITED
            } else {
                0
            }
        });
        let ops_ok = send_caps().allowed(p.qp_type);
        // BlueFlame (libmlx5 `post_send_db`): a WQE of more than one unit that fits the
        // register's half; inline WQEs unless `MLX5_SHUT_UP_BF`, others only with `prefer_bf`.
        // Whole 64-byte blocks of the half only (the copy writes whole blocks; a half is 256
        // bytes on every ConnectX, but the kernel's bf_reg_size is not checked to be a
        // multiple of 128).
        let bf_units = if p.policy.shut_up_bf {
            0
        } else {
            ((p.bf.bf_size() & !63) / 16) as u32
        };
        Ok(Self {
            // SAFETY: both inside the region (sq_offset + SQ bytes = buf_size ≤ dbrec_off,
            // checked by `QpBuf::new`).
            sq_start: unsafe { base.add(sz.sq_offset) },
            // SAFETY: as above.
            sq_end: unsafe { base.add(sz.buf_size) },
            sq_slots: shared.sq.as_ptr(),
            // SAFETY: the doorbell record page follows the buffer inside the region.
            dbrec: unsafe { base.add(buf.dbrec_off) }.cast(),
            qpn_ds: u64::from((p.qpn << 8).to_be()) << 32,
            sq_mask: sz.sq_wqe_cnt.wrapping_sub(1),
            cur_post: 0,
            sq_head: 0,
            // No SQ: no room (the full-queue refusal).
            max_post: if sz.sq_wqe_cnt == 0 {
                0
            } else {
                sz.sq_max_post
            },
            max_gs: sz.sq_max_gs,
            max_inline: sz.max_inline,
            fm_ce_se,
            fm_cache: 0,
            ops_ok,
            ud: p.qp_type == QpType::UD,
            bf_max_inl: bf_units,
            bf_max_plain: if p.policy.prefer_bf { bf_units } else { 0 },
            bf: p.bf,
            region: buf.region,
            qpn: p.qpn,
            qp_type: p.qp_type,
            sz,
            rq_head: 0,
            ahs: p.ahs,
            shared,
            reg: p.reg,
            _lease: p.lease,
            _uidx: p.uidx,
        })
    }

    /// Writes one send WQE at block `cur` (the SQ has room: checked by the caller); returns
    /// its size in 16-byte units. Checks the SGE count, the opcode against the QP type, the
    /// inline length and the UD destination before writing anything it cannot take back (a
    /// refused WQE leaves only bytes the next WQE overwrites: nothing rings for it).
    ///
    /// `fence` is the pending fence (`fm_cache`): the request takes it unless it asks for the
    /// full fence, and leaves the small fence after a UMR, as libmlx5 does.
    ///
    /// # Safety
    /// Inline SGEs must be readable.
    #[inline(always)]
    unsafe fn build_send(
        &self,
        wr: &SendWr<'_>,
        cur: u32,
        fence: &mut u8,
    ) -> Result<usize, SendFault> {
        if wr.sge.len() > self.max_gs as usize {
            return Err(SendFault::Sges);
        }
        // SAFETY: the block index is masked to the SQ, which lies in the region.
        let ctrl = unsafe { self.sq_start.add(((cur & self.sq_mask) as usize) << 6) };
        let flags = wr.flags.bits();
        // The operands' segments right after the control segment, in the first 64-byte block
        // (at most 32 bytes: never wrapping); one match decides the opcode, the immediate,
        // what the QP type allows and the segments.
        let raddr = |seg: *mut u8, addr: u64, rkey: u32| {
            // SAFETY: `seg..seg + 16` lies in the WQE's first block.
            unsafe {
                seg.cast::<u64>().write(addr.to_be());
                seg.add(8).cast::<u64>().write(u64::from(rkey.to_be()));
            }
        };
        // SAFETY: 16 bytes into the WQE's first block.
        let seg1 = unsafe { ctrl.add(CTRL_SEG) };
        let (opcode, imm, mut size) = match wr.op {
            SendOp::Send => (WqeOpcode::SEND.0, 0, 1),
            SendOp::SendWithImm { imm } => (WqeOpcode::SEND_IMM.0, imm, 1),
            SendOp::SendWithInv { invalidate_rkey } => {
                if !self.ops_ok.contains(OpKind::SendWithInv) {
                    return Err(SendFault::OpForType);
                }
                (WqeOpcode::SEND_INVAL.0, invalidate_rkey, 1)
            }
            SendOp::RdmaWrite { remote_addr, rkey } => {
                if !self.ops_ok.contains(OpKind::RdmaWrite) {
                    return Err(SendFault::OpForType);
                }
                raddr(seg1, remote_addr, rkey);
                (WqeOpcode::RDMA_WRITE.0, 0, 2)
            }
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                if !self.ops_ok.contains(OpKind::RdmaWriteWithImm) {
                    return Err(SendFault::OpForType);
                }
                raddr(seg1, remote_addr, rkey);
                (WqeOpcode::RDMA_WRITE_IMM.0, imm, 2)
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                if !self.ops_ok.contains(OpKind::RdmaRead) {
                    return Err(SendFault::OpForType);
                }
                raddr(seg1, remote_addr, rkey);
                (WqeOpcode::RDMA_READ.0, 0, 2)
            }
            SendOp::AtomicCmpSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                if !self.ops_ok.contains(OpKind::AtomicCmpSwp) {
                    return Err(SendFault::OpForType);
                }
                raddr(seg1, remote_addr, rkey);
                // SAFETY: bytes 32..48 of the first block.
                unsafe {
                    ctrl.add(32).cast::<u64>().write(swap.to_be());
                    ctrl.add(40).cast::<u64>().write(compare.to_be());
                }
                (WqeOpcode::ATOMIC_CS.0, 0, 3)
            }
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                if !self.ops_ok.contains(OpKind::AtomicFetchAdd) {
                    return Err(SendFault::OpForType);
                }
                raddr(seg1, remote_addr, rkey);
                // The compare field is left as it was, as libmlx5 does (the device ignores it
                // for fetch-and-add).
                // SAFETY: bytes 32..40 of the first block.
                unsafe { ctrl.add(32).cast::<u64>().write(add.to_be()) };
                (WqeOpcode::ATOMIC_FA.0, 0, 3)
            }
            SendOp::LocalInv { .. } | SendOp::BindMw(_) => {
                // Out of line, the pending fence by value (the common requests' path keeps
                // it in a register).
                // SAFETY: the caller's contract.
                let r = unsafe { self.build_umr(wr, cur, ctrl, *fence) };
                // libmlx5 arms the small fence for the next request once a UMR is being
                // built, also when it is refused after that (a bind too long, inline data
                // over the limit); the refusals before it leave the fence as it was.
                if !matches!(r, Err(SendFault::OpForType | SendFault::BindZeroBased)) {
                    *fence = CTRL_SMALL_FENCE;
                }
                return r;
            }
            // SendOp is non_exhaustive outside rverbs-uverbs: every operation is named above,
            // and this arm lists every kind, so a new operation does not compile here.
            other => match other.kind() {
                OpKind::Send
                | OpKind::SendWithImm
                | OpKind::SendWithInv
                | OpKind::RdmaWrite
                | OpKind::RdmaWriteWithImm
                | OpKind::RdmaRead
                | OpKind::AtomicCmpSwp
                | OpKind::AtomicFetchAdd
                | OpKind::LocalInv
                | OpKind::BindMw
                // Not in mlx5's send caps (`encodes`): never reaches here through `Qp`.
                | OpKind::Flush
                | OpKind::AtomicWrite => return Err(SendFault::Unsupported),
            },
        };
        // The control segment's second half now (bytes 8–10 zero, fm_ce_se, imm): libmlx5
        // writes it before the segments that may still refuse the request (inline length, UD
        // destination), and the oracle compares what such a refusal leaves in the SQ.
        // SAFETY: the WQE's first block.
        unsafe { self.write_ctrl_half(ctrl, flags, imm, fence) };
        // SAFETY: inside the WQE's first block (at most 48 bytes in).
        let mut seg = unsafe { ctrl.add(size * 16) };
        if self.ud {
            // SAFETY: the datagram segment fills the rest of the first block.
            unsafe { self.write_av(wr, seg)? };
            size += AV_SIZE / 16;
            // SAFETY: one past the first block: the SQ end at most.
            seg = unsafe { seg.add(AV_SIZE) };
            if seg == self.sq_end {
                seg = self.sq_start;
            }
        }
        // SAFETY: the caller's contract; `seg` is where the WQE's data goes.
        unsafe { self.finish_wqe(wr, cur, ctrl, seg, size, opcode) }
    }

    /// The data (or inline) segments of `wr` at `seg`, then the control segment's first half
    /// (`opmod_idx_opcode`, `qpn_ds`); returns the WQE's size in 16-byte units (`size` so
    /// far plus the data's).
    ///
    /// # Safety
    /// `ctrl` is block `cur` of the SQ, `seg` inside the WQE (wrapped), with room reserved for
    /// the data by the sizing; inline SGEs readable.
    #[inline(always)]
    unsafe fn finish_wqe(
        &self,
        wr: &SendWr<'_>,
        cur: u32,
        ctrl: *mut u8,
        seg: *mut u8,
        mut size: usize,
        opcode: u8,
    ) -> Result<usize, SendFault> {
        let flags = wr.flags.bits();
        // CS and FA (0x11, 0x12): one compare.
        let atomic = opcode.wrapping_sub(WqeOpcode::ATOMIC_CS.0) < 2;
        if flags & SendFlags::INLINE.bits() != 0 && !wr.sge.is_empty() {
            // SAFETY: the inline segment stays within max_inline (checked inside), which the
            // sizing reserved; inline sources are readable (caller's contract).
            size += unsafe { self.write_inline(wr.sge, seg)? };
        } else {
            let mut d = seg;
            for s in wr.sge {
                if d == self.sq_end {
                    d = self.sq_start;
                }
                if s.length == 0 {
                    continue;
                }
                let len = if atomic { 8 } else { s.length };
                // SAFETY: at most max_gs segments (checked above), which the sizing reserved,
                // wrapping at the SQ end.
                unsafe {
                    d.cast::<u64>()
                        .write(u64::from(len.to_be()) | (u64::from(s.lkey.to_be()) << 32));
                    d.add(8).cast::<u64>().write(s.addr.to_be());
                    d = d.add(DATA_SEG);
                }
                size += 1;
            }
        }
        // The control segment's first half last: opmod_idx_opcode, qpn_ds.
        let w0 = (((cur & 0xffff) << 8) | u32::from(opcode)).to_be();
        // SAFETY: the first 8 bytes of the WQE (64-byte aligned).
        unsafe {
            ctrl.cast::<u64>()
                .write(u64::from(w0) | self.qpn_ds | ((size as u64) << 56));
        }
        Ok(size)
    }

    /// A LOCAL_INV or memory-window bind: one UMR WQE at block `cur` (`ctrl`), libmlx5's
    /// `IBV_WR_LOCAL_INV` / `IBV_WR_BIND_MW` cases of `_mlx5_post_send`: the checks, the
    /// control segment's second half (the invalidated key, or the window's current key),
    /// the UMR segments ([`Mlx5Qp::write_umr`]), any SGEs as for other requests, the
    /// completion opcode recorded in the slot. `fence` is the pending fence this request
    /// takes (the caller arms the next one).
    ///
    /// # Safety
    /// As for [`Mlx5Qp::build_send`]; `ctrl` is block `cur` of the SQ.
    #[inline(never)]
    unsafe fn build_umr(
        &self,
        wr: &SendWr<'_>,
        cur: u32,
        ctrl: *mut u8,
        fence: u8,
    ) -> Result<usize, SendFault> {
        if !self.ops_ok.contains(wr.op.kind()) {
            return Err(SendFault::OpForType);
        }
        let mut fence = fence;
        let flags = wr.flags.bits();
        let (size, wc) = match wr.op {
            SendOp::LocalInv { invalidate_rkey } => {
                // libmlx5: a type 2 unbind (length 0) of key 0 (`set_bind_wr` with an empty
                // bind), the invalidated key in the control segment's immediate.
                // SAFETY: as below.
                unsafe { self.write_ctrl_half(ctrl, flags, invalidate_rkey, &mut fence) };
                // SAFETY: block `cur` and the next one lie in the SQ (masked).
                unsafe { self.write_umr(ctrl, cur, true, 0, None) };
                (8, WcOpcode::LOCAL_INV)
            }
            SendOp::BindMw(b) => {
                let type2 = b.mw_type() == MwType::TYPE_2;
                if !type2 && b.access().contains(AccessFlags::ZERO_BASED) {
                    return Err(SendFault::BindZeroBased);
                }
                // SAFETY: bytes 8..16 of the WQE's first block.
                unsafe { self.write_ctrl_half(ctrl, flags, b.mw_rkey(), &mut fence) };
                if b.length() > MAX_BIND_LENGTH {
                    return Err(SendFault::BindLength);
                }
                let bind = (b.length() != 0).then_some(&b);
                // SAFETY: blocks `cur` to `cur + 2` lie in the SQ (masked).
                unsafe { self.write_umr(ctrl, cur, type2, b.rkey(), bind) };
                (if bind.is_some() { 12 } else { 8 }, WcOpcode::BIND_MW)
            }
            _ => return Err(SendFault::Unsupported),
        };
        // SAFETY: the slot index is masked to the SQ's blocks, the table's length.
        let slot = unsafe { &*self.sq_slots.add((cur & self.sq_mask) as usize) };
        // Relaxed: published by the doorbell record's Release store, as the wr_id.
        slot.wr_data.store(wc.0 as u8, Ordering::Relaxed);
        // A UMR's segments fill whole blocks: what follows starts a block (wrapped).
        let seg = self.block(cur.wrapping_add(size as u32 / 4));
        // SAFETY: the caller's contract; the sizing reserves the UMR and max_gs SGEs.
        unsafe { self.finish_wqe(wr, cur, ctrl, seg, size, WqeOpcode::UMR.0) }
    }

    /// Block `i` of the SQ (masked).
    #[inline(always)]
    fn block(&self, i: u32) -> *mut u8 {
        // SAFETY: the index is masked to the SQ, which lies in the region.
        unsafe { self.sq_start.add(((i & self.sq_mask) as usize) << 6) }
    }

    /// The control segment's bytes 8–15: three zero bytes, `fm_ce_se` (the flags, the
    /// pending fence unless the request asks for the full one; the pending fence is used
    /// up), the immediate (big-endian).
    ///
    /// # Safety
    /// `ctrl` is a WQE's first block in the SQ.
    #[inline(always)]
    unsafe fn write_ctrl_half(&self, ctrl: *mut u8, flags: u32, imm: u32, fence: &mut u8) {
        // The pending fence unless FENCE is asked (bit 0 of the flags): a mask, no branch.
        let pending = *fence & ((flags & SendFlags::FENCE.bits()) as u8).wrapping_sub(1);
        *fence = 0;
        let fm = self.fm_ce_se[(flags & 7) as usize] | pending;
        // SAFETY: bytes 8..16 of the WQE (64-byte aligned).
        unsafe {
            ctrl.add(8)
                .cast::<u64>()
                .write((u64::from(fm) << 24) | (u64::from(imm.to_be()) << 32));
        }
    }

    /// A UMR's segments after the control segment at `ctrl` (block `cur`), libmlx5's
    /// `set_bind_wr` field by field: the UMR control segment (bytes 16–63 of the first block),
    /// the mkey context segment (the next block) and, for a bind (`bind` with a non-zero
    /// length), the KLM data segment (the block after). `rkey` is the window's new key
    /// (its low byte goes into the mkey context). An unbind or invalidation (`bind` None)
    /// writes only the mkey context's key and `free` byte, leaving the rest as it was, as
    /// libmlx5 does (the UMR's mask tells the device to take only those).
    ///
    /// # Safety
    /// `ctrl` is block `cur` of the SQ; `cur..cur + 3` (masked) are this WQE's blocks.
    #[inline(never)]
    unsafe fn write_umr(
        &self,
        ctrl: *mut u8,
        cur: u32,
        type2: bool,
        rkey: u32,
        bind: Option<&rverbs_uverbs::mw::MwBind>,
    ) {
        let mut uflags = UMR_FLAG_TRANSLATION_OFFSET | UMR_FLAG_INLINE;
        let mut mask = UMR_MASK_FREE | UMR_MASK_MKEY;
        if type2 {
            mask |= UMR_MASK_QPN;
        }
        let klm_octowords: u16 = if bind.is_some() {
            if type2 {
                uflags |= UMR_FLAG_CHECK_FREE;
            }
            mask |= UMR_MASK_LEN
                | UMR_MASK_START_ADDR
                | UMR_MASK_LOCAL_WRITE
                | UMR_MASK_REMOTE_READ
                | UMR_MASK_REMOTE_WRITE
                | UMR_MASK_ATOMIC;
            // One KLM entry, in octowords of a list aligned to 8 entries (libmlx5
            // `get_klm_octo(1)`: 8 / 2).
            4
        } else {
            if type2 {
                uflags |= UMR_FLAG_CHECK_QPN;
            }
            0
        };
        let mut u = [0u8; 48];
        u[0] = uflags;
        u[4..6].copy_from_slice(&klm_octowords.to_be_bytes());
        // bytes 6–7: translation_offset 0.
        u[8..16].copy_from_slice(&mask.to_be_bytes());
        // SAFETY: bytes 16..64 of the WQE's first block (the caller's contract).
        unsafe { ptr::copy_nonoverlapping(u.as_ptr(), ctrl.add(CTRL_SEG), u.len()) };
        let mk = self.block(cur.wrapping_add(1));
        // The window's key and the QP it is bound to: a type 2 bind names this QP; type 1
        // windows, unbinds and invalidations name none (0xffffff).
        let qpn = if type2 && bind.is_some() {
            self.qpn << 8
        } else {
            0xffff_ff00
        };
        // SAFETY: bytes 4..8 of the mkey context block (the caller's contract).
        unsafe { w32(mk, 4, (rkey & 0xff) | qpn) };
        let Some(b) = bind else {
            // SAFETY: byte 0 of the mkey context block.
            unsafe { mk.write(MKEY_FREE) };
            return;
        };
        let a = b.access();
        let mut access = 0;
        for (f, bit) in [
            (AccessFlags::LOCAL_WRITE, MKEY_ACCESS_LOCAL_WRITE),
            (AccessFlags::REMOTE_WRITE, MKEY_ACCESS_REMOTE_WRITE),
            (AccessFlags::REMOTE_READ, MKEY_ACCESS_REMOTE_READ),
            (AccessFlags::REMOTE_ATOMIC, MKEY_ACCESS_ATOMIC),
        ] {
            if a.contains(f) {
                access |= bit;
            }
        }
        let start = if a.contains(AccessFlags::ZERO_BASED) {
            0
        } else {
            b.addr()
        };
        // SAFETY: bytes 0, 2 and 16..32 of the mkey context block (local read is always on:
        // the kernel sets it when it creates the window's mkey).
        unsafe {
            mk.write(0);
            mk.add(2).write(access);
            w64(mk, 16, start);
            w64(mk, 24, b.length());
        }
        // The KLM: the window's bytes in the region (its address even when zero-based), then
        // zeros to the end of the block.
        let mut d = [0u8; 64];
        d[0..4].copy_from_slice(&(b.length() as u32).to_be_bytes());
        d[4..8].copy_from_slice(&b.mr_lkey().to_be_bytes());
        d[8..16].copy_from_slice(&b.addr().to_be_bytes());
        // SAFETY: the third block of the WQE (the caller's contract).
        unsafe { ptr::copy_nonoverlapping(d.as_ptr(), self.block(cur.wrapping_add(2)), 64) };
    }

    /// The UD datagram segment at `seg`: the AH's address vector, the remote QPN and Q_Key.
    ///
    /// # Safety
    /// `seg..seg + 48` must lie in the SQ.
    #[inline(never)]
    unsafe fn write_av(&self, wr: &SendWr<'_>, seg: *mut u8) -> Result<(), SendFault> {
        let dest = wr.ud.ok_or(SendFault::NoAh)?;
        let av = self.ahs.get(dest.ah_num).ok_or(SendFault::UnknownAh)?;
        // SAFETY: the caller's contract.
        unsafe {
            ptr::copy_nonoverlapping(av.as_ptr(), seg, AV_SIZE);
            w32(seg, 8, dest.remote_qpn | MLX5_EXTENDED_UD_AV);
            w32(seg, 0, dest.remote_qkey);
        }
        Ok(())
    }

    /// The inline segment at `seg` (a 4-byte byte count | `MLX5_INLINE_SEG`, then the bytes,
    /// wrapping past the SQ end to its start; no segment when the total is 0); returns its
    /// size in 16-byte units.
    ///
    /// # Safety
    /// `seg` must lie in the SQ with `max_inline` bytes reserved after it (wrapping); the SGEs
    /// must be readable.
    #[inline(always)]
    unsafe fn write_inline(&self, sge: &[Sge], seg: *mut u8) -> Result<usize, SendFault> {
        let total = if let [s] = sge {
            // One SGE, the common case, in line.
            if s.length > self.max_inline {
                return Err(SendFault::Inline);
            }
            // SAFETY: the caller's contract; at most max_inline bytes after the header.
            unsafe { self.copy_inline(s, seg.add(INL_SEG)) };
            s.length as usize
        } else {
            // SAFETY: as above.
            unsafe { self.copy_inline_sges(sge, seg.add(INL_SEG))? }
        };
        if total == 0 {
            return Ok(0);
        }
        // SAFETY: the header of the inline segment, in the SQ (the caller's contract).
        unsafe { w32(seg, 0, total as u32 | MLX5_INLINE_SEG) };
        Ok((total + INL_SEG).div_ceil(16))
    }

    /// Copies one inline SGE to `p`, split at the SQ end; returns where the copy ended.
    ///
    /// # Safety
    /// `p` in the SQ with `s.length` bytes reserved after it (wrapping); `s` readable, and
    /// written by no one during the call except through `rverbs_uverbs::shared` (which the
    /// copy uses too: 1-byte atomic loads), the kernel or a device.
    #[inline(always)]
    unsafe fn copy_inline(&self, s: &Sge, p: *mut u8) -> *mut u8 {
        let mut len = s.length as usize;
        let mut src = s.addr as usize as *const u8;
        let mut p = p;
        // SAFETY: the caller's contract; the first piece ends at the SQ end.
        unsafe {
            let room = self.sq_end.offset_from(p) as usize;
            if len > room {
                copy_from_shared_raw(src, p, room);
                src = src.add(room);
                len -= room;
                p = self.sq_start;
            }
            copy_from_shared_raw(src, p, len);
            p.add(len)
        }
    }

    /// Several inline SGEs (out of line: rare): the running total is checked before each
    /// SGE's copy, in libmlx5's order, so that a refused request leaves the same bytes in
    /// the SQ; returns the total.
    ///
    /// # Safety
    /// As for [`Mlx5Qp::write_inline`].
    #[inline(never)]
    unsafe fn copy_inline_sges(&self, sge: &[Sge], mut p: *mut u8) -> Result<usize, SendFault> {
        let mut total = 0usize;
        for s in sge {
            total += s.length as usize;
            if total > self.max_inline as usize {
                return Err(SendFault::Inline);
            }
            // SAFETY: the caller's contract; the total stays within max_inline.
            p = unsafe { self.copy_inline(s, p) };
        }
        Ok(total)
    }

    /// The error for work request `nreq` refused for `f`, naming the limit it broke.
    #[cold]
    #[inline(never)]
    fn send_fault(&self, f: SendFault, nreq: usize, wr: &SendWr<'_>) -> PostError {
        match f {
            SendFault::Sges => PostError::invalid(
                nreq,
                format!(
                    "{} SGEs exceed the QP's max_send_sge {}",
                    wr.sge.len(),
                    self.max_gs
                ),
            ),
            SendFault::Inline => PostError::invalid(
                nreq,
                format!(
                    "{} bytes of inline data exceed the QP's max_inline_data {}",
                    wr.sge.iter().map(|s| u64::from(s.length)).sum::<u64>(),
                    self.max_inline
                ),
            ),
            SendFault::NoAh => PostError::invalid(nreq, "a UD send needs a destination (an AH)"),
            SendFault::UnknownAh => PostError::invalid(
                nreq,
                format!(
                    "AH number {} is not an mlx5 AH of this context",
                    wr.ud.map_or(0, |d| d.ah_num)
                ),
            ),
            SendFault::OpForType => PostError::invalid(
                nreq,
                format!("a {} QP cannot post {:?}", self.qp_type, wr.op),
            ),
            SendFault::BindLength => PostError::unsupported(
                nreq,
                format!(
                    "a memory-window bind of {} bytes exceeds mlx5's {} (one KLM entry; \
                     libmlx5: EOPNOTSUPP)",
                    match wr.op {
                        SendOp::BindMw(b) => b.length(),
                        _ => 0,
                    },
                    MAX_BIND_LENGTH
                ),
            ),
            SendFault::BindZeroBased => PostError::invalid(
                nreq,
                "a type 1 memory window cannot be bound zero-based on mlx5 (libmlx5 \
                 ibv_bind_mw: EINVAL)",
            ),
            SendFault::Unsupported => PostError::unsupported(
                nreq,
                format!("{:?} is not implemented on mlx5 by rverbs", wr.op),
            ),
        }
    }
}

impl QpOps for Mlx5Qp {
    unsafe fn post_send(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[SendWr<'_>],
    ) -> Result<(), PostError> {
        // Acquire: the poller's reads of the slots it freed happen before we reuse them.
        let tail = self.shared.sq_tail.load(Ordering::Acquire);
        let outstanding = self.sq_head.wrapping_sub(tail);
        // Full SQ, as libmlx5 counts it (work requests, not blocks): request `n` of the list
        // is refused when `outstanding + n >= max_send_wr`; one test for the whole list.
        let room = self.max_post.saturating_sub(outstanding) as usize;
        let take = wrs.len().min(room);
        let mut cur = self.cur_post;
        let mut fence = self.fm_cache;
        let mut last = (cur, 0);
        let mut fault = None;
        let mut nreq = 0;
        while nreq < take {
            // SAFETY: nreq < take ≤ wrs.len().
            let wr = unsafe { wrs.get_unchecked(nreq) };
            // SAFETY: room checked above; the SGE contract is the caller's.
            match unsafe { self.build_send(wr, cur, &mut fence) } {
                Ok(size) => {
                    // SAFETY: the slot index is masked to the SQ's blocks, the table's length.
                    let slot = unsafe { &*self.sq_slots.add((cur & self.sq_mask) as usize) };
                    // Relaxed: published by the doorbell record's Release store below.
                    slot.wr_id.store(wr.wr_id, Ordering::Relaxed);
                    slot.head
                        .store(self.sq_head.wrapping_add(nreq as u32), Ordering::Relaxed);
                    last = (cur, size);
                    cur = cur.wrapping_add(size.div_ceil(4) as u32);
                    nreq += 1;
                }
                Err(f) => {
                    fault = Some(f);
                    break;
                }
            }
        }
        self.fm_cache = fence;
        if nreq > 0 {
            self.cur_post = cur;
            self.sq_head = self.sq_head.wrapping_add(nreq as u32);
            // SAFETY: the doorbell record lives in our region.
            let db = unsafe { AtomicU32::from_ptr(self.dbrec.add(SND_DBR)) };
            // Release: the WQEs are written before the device can see the new counter
            // (libmlx5 `udma_to_device_barrier` before the record store).
            db.store((cur & 0xffff).to_be(), Ordering::Release);
            // The last WQE (the only one when BlueFlame may copy it) and its size.
            let (last, size) = last;
            // SAFETY: the block of the last WQE built, in the SQ.
            let ctrl = unsafe { self.sq_start.add(((last & self.sq_mask) as usize) << 6) };
            let bf = nreq == 1 && {
                // SAFETY: nreq == 1 ≤ wrs.len().
                let w = unsafe { wrs.get_unchecked(0) };
                let max = if w.flags.contains(SendFlags::INLINE) && !w.sge.is_empty() {
                    self.bf_max_inl
                } else {
                    self.bf_max_plain
                };
                size > 1 && size <= max as usize
            };
            // SAFETY: `ctrl` is the last WQE written, of `size` units, inside the SQ; with
            // `bf` it fits the register's BlueFlame half (bf_max_* ≤ bf_size / 16).
            unsafe { self.bf.ring(ctrl, size, bf, self.sq_start, self.sq_end) };
        }
        if let Some(f) = fault {
            // SAFETY: the faulting request is wrs[nreq] (nreq < take).
            return Err(self.send_fault(f, nreq, unsafe { wrs.get_unchecked(nreq) }));
        }
        if take < wrs.len() {
            return Err(PostError::queue_full(
                take,
                outstanding.wrapping_add(take as u32),
            ));
        }
        Ok(())
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

    fn reset(&mut self) {
        // libmlx5 `mlx5_init_qp_indices` and the doorbell records after a modify to RESET.
        // The pending fence (`fm_cache`) and the BlueFlame half stay, as in libmlx5.
        self.cur_post = 0;
        self.sq_head = 0;
        self.rq_head = 0;
        // Release: pairs with the post paths' Acquire loads of the tails (the next post
        // here, under the same lock, sees them anyway). The CQs no longer hold entries of
        // this QP (`CqOps::qp_reset` ran first) and the device makes none in RESET, so no
        // poller moves these tails now; a CQE the device still wrote would only name a
        // masked slot.
        self.shared.sq_tail.store(0, Ordering::Release);
        self.shared.rq_tail.store(0, Ordering::Release);
        for i in [RCV_DBR, SND_DBR] {
            // SAFETY: the doorbell record lives in our region, 4-byte aligned; the device
            // reads it concurrently, so it is written as an atomic.
            unsafe { AtomicU32::from_ptr(self.dbrec.add(i)) }.store(0, Ordering::Release);
        }
    }
}

impl Drop for Mlx5Qp {
    fn drop(&mut self) {
        self.reg.remove_qp(&self.shared);
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
        sz.check()
            .map_err(|d| Error::invalid("allocate mlx5 SRQ buffer", d))?;
        let page = rustix::param::page_size();
        let bytes = (sz.max as usize) << sz.wqe_shift;
        let dbrec_off = align(bytes, page);
        let region = Region::new(dbrec_off + page)?;
        let link = |from: u32, to: u32| {
            for i in from..to {
                // SAFETY: i < max_wr < max (checked above): inside the buffer of max WQEs.
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
        self.reg.remove_srq(&self.shared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_uverbs::shared::copy_to_shared;
    use std::os::fd::AsFd;

    const LIM: WqLimits = WqLimits {
        max_sq_desc_sz: 512,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
    };

    fn caps(send: u32, recv: u32, ssge: u32, rsge: u32, inl: u32) -> QpCaps {
        QpCaps {
            max_send_wr: send,
            max_recv_wr: recv,
            max_send_sge: ssge,
            max_recv_sge: rsge,
            max_inline_data: inl,
        }
    }

    /// Issue 21, finding 1: a sizing whose free list is longer than its ring (250 links of
    /// 64 bytes in a 64-byte ring) is refused before anything is written.
    #[test]
    fn srq_buf_refuses_a_lying_sizing() {
        let lie = SrqSizing {
            max: 1,
            wqe_shift: 6,
            max_gs: 0,
            max_wr: 250,
        };
        let e = SrqBuf::new(lie).err().expect("refused");
        assert!(e.to_string().contains("allocate mlx5 SRQ buffer"), "{e}");
        assert!(e.to_string().contains("max 1 "), "{e}");
        // The free list past the ring, scatter lists past the WQE, WQEs the u16 links cannot
        // address: each refused with what is wrong.
        let ok = srq_sizing(&LIM, 10, 2).unwrap();
        for (lie, what) in [
            (SrqSizing { max_wr: 16, ..ok }, "max_wr 16"),
            (SrqSizing { max_gs: 4, ..ok }, "max_gs 4"),
            (
                SrqSizing {
                    wqe_shift: 40,
                    ..ok
                },
                "2^40",
            ),
            (SrqSizing { max: 12, ..ok }, "max 12 "),
            (
                SrqSizing {
                    max: 1 << 17,
                    max_wr: (1 << 17) - 1,
                    ..ok
                },
                "max 131072",
            ),
        ] {
            let e = SrqBuf::new(lie).err().expect("refused");
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
        SrqBuf::new(ok).unwrap();
        let e = srq_sizing(&SrqLimitsHuge::LIM, 1 << 16, 1).unwrap_err();
        assert!(e.to_string().contains("65536 the free list"), "{e}");
    }

    struct SrqLimitsHuge;
    impl SrqLimitsHuge {
        const LIM: WqLimits = WqLimits {
            max_srq_recv_wr: 1 << 20,
            ..LIM
        };
    }

    /// Finding 1's QP shape: an SQ offset past the buffer, queue sizes that are not powers of
    /// two (the slot tables are indexed by a mask), more SGEs or inline bytes than the
    /// WQEs hold — refused by `QpBuf::new` or by the check `Mlx5Qp::new` runs.
    #[test]
    fn qp_buf_refuses_a_lying_sizing() {
        let ok = qp_sizing(&LIM, QpType::RC, &caps(16, 10, 1, 3, 0), false).unwrap();
        ok.check_for(QpType::RC).unwrap();
        for (lie, what) in [
            (
                QpSizing {
                    sq_offset: 1 << 20,
                    ..ok
                },
                "send queue at 1048576",
            ),
            (QpSizing { buf_size: 64, ..ok }, "buffer of 64 bytes"),
            (
                QpSizing {
                    sq_wqe_cnt: 48,
                    ..ok
                },
                "48 (send blocks)",
            ),
            (
                QpSizing {
                    rq_wqe_cnt: 3,
                    ..ok
                },
                "3 (receive WQEs)",
            ),
            (QpSizing { rq_max_gs: 5, ..ok }, "rq_max_gs 5"),
            (
                QpSizing {
                    rq_wqe_shift: 70,
                    ..ok
                },
                "2^70",
            ),
            (
                QpSizing {
                    sq_max_post: 65,
                    ..ok
                },
                "sq_max_post 65",
            ),
        ] {
            let e = QpBuf::new(lie).err().expect("refused");
            assert!(e.to_string().contains(what), "{what}: {e}");
        }
        // Layout right, WQEs too small for the SGEs or inline bytes claimed.
        for lie in [
            QpSizing {
                sq_max_gs: 100,
                ..ok
            },
            QpSizing {
                max_inline: 4000,
                ..ok
            },
        ] {
            QpBuf::new(lie).unwrap();
            let e = lie.check_for(QpType::RC).unwrap_err();
            assert!(e.contains("exceed the 64-block send queue"), "{e}");
        }
    }

    fn shared(qpn: u32) -> Arc<QpShared> {
        Arc::new(QpShared {
            qpn,
            sq_mask: 0,
            sq: Box::new([SqSlot::default()]),
            sq_tail: AtomicU32::new(0),
            rq_mask: 0,
            rq_wrid: Box::new([AtomicU64::new(0)]),
            rq_tail: AtomicU32::new(0),
            srq: None,
            uidx: None,
        })
    }

    /// A QP is dropped after the kernel destroyed it; a QP created in between may have been
    /// given the same number. Dropping the old one leaves the new one's entry (its
    /// completions must still find their work requests).
    #[test]
    fn registry_keeps_the_entry_of_a_reused_qp_number() {
        let reg = Registry::default();
        let (old, new) = (shared(0x42), shared(0x42));
        reg.insert_qp(old.clone());
        reg.insert_qp(new.clone());
        reg.remove_qp(&old);
        assert!(Arc::ptr_eq(&reg.qp(0x42).expect("new QP's entry"), &new));
        reg.remove_qp(&new);
        assert!(reg.qp(0x42).is_none());
        // SRQ numbers alike.
        let srq = |n| {
            let buf = SrqBuf::new(srq_sizing(&LIM, 3, 1).unwrap()).unwrap();
            Arc::new(SrqShared {
                srqn: n,
                inner: Mutex::new(SrqList {
                    buf: buf.region.ptr(),
                    _region: buf.region,
                    shift: 5,
                    head: 0,
                    tail: 3,
                    wrid: Box::new([0; 4]),
                }),
            })
        };
        let (old, new) = (srq(7), srq(7));
        reg.insert_srq(old.clone());
        reg.insert_srq(new.clone());
        reg.remove_srq(&old);
        assert!(Arc::ptr_eq(&reg.srq(7).expect("new SRQ's entry"), &new));
        reg.remove_srq(&new);
        assert!(reg.srq(7).is_none());
    }

    /// Every geometry `qp_sizing` gives passes the checks `QpBuf::new` and `Mlx5Qp::new` run;
    /// no SGEs and no inline data (`wqe_size - overhead - 4` underflowed when the overhead is
    /// whole blocks: UD's 64 bytes, RC's 192) gives a send queue with no inline room.
    #[test]
    fn qp_sizing_output_passes_the_checks() {
        for t in [QpType::RC, QpType::UC, QpType::UD] {
            for send in [0, 1, 3, 64] {
                for ssge in [0, 1, 5] {
                    for inl in [0, 1, 60, 200] {
                        for (recv, rsge, srq) in [(0, 0, false), (7, 0, false), (9, 4, true)] {
                            let c = caps(send, recv, ssge, rsge, inl);
                            let s = qp_sizing(&LIM, t, &c, srq).unwrap();
                            s.check_for(t).unwrap_or_else(|e| panic!("{t} {c:?}: {e}"));
                            assert!(send == 0 || s.max_inline >= inl, "{t} {c:?}");
                        }
                    }
                }
            }
        }
        let s = qp_sizing(&LIM, QpType::UD, &caps(4, 0, 0, 0, 0), false).unwrap();
        assert_eq!((s.max_inline, s.sq_wqe_cnt, s.sq_max_post), (0, 4, 4));
        // RC's 192 bytes of overhead are three whole blocks too.
        let s = qp_sizing(&LIM, QpType::RC, &caps(4, 0, 0, 0, 0), false).unwrap();
        assert_eq!((s.max_inline, s.sq_wqe_cnt), (0, 16));
        let s = qp_sizing(&LIM, QpType::RC, &caps(4, 0, 1, 0, 0), false).unwrap();
        assert_eq!(s.max_inline, 256 - 192 - 4);
    }

    /// Issue 21, finding 3 on mlx5: an INLINE post on a QP in ordinary memory copies the
    /// SGE's bytes into the SQ while another thread writes the same memory as `Mr::write_at`
    /// does (`shared::copy_to_shared`, other call edges). The post copies with the same
    /// 1-byte atomics, so Miri finds no race; the bytes land as old or new values.
    #[test]
    fn inline_post_races_write_at() {
        let lim = WqLimits {
            max_sq_desc_sz: 512,
            max_rq_desc_sz: 512,
            max_send_wqebb: 1 << 15,
            max_recv_wr: 1 << 15,
            max_srq_recv_wr: 1 << 15,
        };
        let caps = QpCaps {
            max_send_wr: 2,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 0,
            max_inline_data: 64,
        };
        let sz = qp_sizing(&lim, QpType::RC, &caps, false).unwrap();
        let buf = QpBuf::new(sz).unwrap();
        let sq = buf.buf_ptr().expose_provenance() + sz.sq_offset as usize;
        // One UAR page of ordinary memory: doorbell and BlueFlame register 1.
        let mut uar = vec![0u64; 512];
        // SAFETY: `uar` outlives the QP (dropped after it) and is not referenced meanwhile.
        let bf = unsafe { BfReg::new(uar.as_mut_ptr().cast(), 4096, 1, 512) }.unwrap();
        let mut qp = Mlx5Qp::new(
            buf,
            QpParts {
                qpn: 9,
                qp_type: QpType::RC,
                sq_sig_all: false,
                bf: Arc::new(bf),
                policy: BfPolicy::default(),
                ahs: Arc::new(AhTable::default()),
                reg: Arc::new(Registry::default()),
                srq: None,
                lease: None,
                uidx: None,
            },
        )
        .unwrap();
        // Word-aligned "registered memory", reached only through rverbs_uverbs::shared.
        let mut mem = vec![0u64; 8];
        let base = mem.as_mut_ptr().cast::<u8>().expose_provenance();
        let sge = [Sge {
            addr: base as u64,
            length: 40,
            lkey: 0,
        }];
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sge: &sge,
            flags: SendFlags::INLINE,
            ud: None,
        };
        let stdin = std::io::stdin();
        let k = KernelObj {
            fd: stdin.as_fd(),
            handle: 1,
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let p = std::ptr::with_exposed_provenance_mut::<u8>(base);
                // SAFETY: 3..35 lies in the 64 bytes of `mem`, which Rust reaches only
                // through `shared` until the scope ends.
                unsafe { copy_to_shared(&[0xaa; 32], p.add(3)) };
            });
            // SAFETY: the inline SGE names 40 readable bytes of `mem`, written meanwhile only
            // through `shared`; the mlx5 data path does not use the fd.
            unsafe { qp.post_send(k, std::slice::from_ref(&wr)) }.unwrap();
        });
        // The first WQE: control segment (16 bytes), inline header (4), then the bytes.
        let p = std::ptr::with_exposed_provenance::<u8>(sq);
        let mut data = [0u8; 40];
        // SAFETY: the SQ's first 64-byte block holds 20 + 40 bytes; nothing writes it now.
        unsafe { std::ptr::copy_nonoverlapping(p.add(20), data.as_mut_ptr(), 40) };
        assert!(data[..3].iter().all(|&b| b == 0));
        assert!(data[3..35].iter().all(|&b| b == 0 || b == 0xaa));
        assert!(data[35..].iter().all(|&b| b == 0));
        drop(qp);
        drop(uar);
        drop(mem);
    }
}
