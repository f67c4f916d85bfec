//! QP and SRQ sizing: libmlx5's rules (`verbs.c`: `mlx5_calc_sq_size`, `mlx5_calc_rq_size`,
//! `mlx5_calc_wqe_size`, the SRQ's) from the caps asked for and the device limits.

#![allow(unsafe_code)]

use super::*;

use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::Error;

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

impl From<&crate::mlx5::Mlx5ContextInfo> for WqLimits {
    fn from(i: &crate::mlx5::Mlx5ContextInfo) -> Self {
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
pub(super) const MAX_WQ_BYTES: usize = 1 << 32;

impl QpSizing {
    /// Checks the geometry's own consistency — what the buffer, the WQE writers and the slot
    /// tables rely on — whatever built it: queue sizes powers of two (or 0), the receive queue
    /// exactly `sq_offset` bytes, the send queue exactly the rest of `buf_size`, receive WQEs
    /// big enough for `rq_max_gs` segments, no more posts than blocks.
    pub(super) fn check_layout(&self) -> Result<(), String> {
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
    pub(super) fn check_for(&self, qp_type: QpType) -> Result<(), String> {
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

pub(super) fn sq_overhead(qp_type: QpType) -> Option<usize> {
    match qp_type {
        // Control plus the largest of raddr (rdma), raddr+atomic, memory-window bind.
        QpType::RC | QpType::UC => Some(MW_SIZE.max(CTRL_SEG + RADDR_SEG + ATOMIC_SEG)),
        // Control (SEND, SEND_IMM) plus the datagram segment.
        QpType::UD => Some(CTRL_SEG + AV_SIZE),
        _ => None,
    }
}

pub(super) fn align(v: usize, a: usize) -> usize {
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
    pub(super) fn check(&self) -> Result<(), String> {
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
