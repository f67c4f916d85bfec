//! WQE segment encoding: the segments' sizes and field values (`mlx5dv.h`, `qp.c`), the
//! stores into the ring, and the send encoder of [`Mlx5Qp`] (control, remote address, atomic,
//! datagram, data, inline and UMR segments). Operations are checked once, before this code
//! runs (`rverbs_uverbs::op`); here only what mlx5 itself limits is refused.

#![allow(unsafe_code)]

use super::*;
use std::ptr;
use std::sync::atomic::Ordering;

use rverbs_uverbs::kernel::shared::copy_from_shared_raw;
use rverbs_uverbs::mr::AccessFlags;
use rverbs_uverbs::mw::MwType;
use rverbs_uverbs::PostFault;
use rverbs_uverbs::WcOpcode;
use rverbs_uverbs::{OpKind, OpTable, Transports};
use rverbs_uverbs::{SendFlags, SendOp, SendWr, Sge};

use crate::mlx5::cqe::WqeOpcode;

/// Send WQE basic block (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
pub(super) const CTRL_SEG: usize = 16;
pub(super) const RADDR_SEG: usize = 16;
pub(super) const ATOMIC_SEG: usize = 16;
pub(super) const DATA_SEG: usize = 16;
pub(super) const INL_SEG: usize = 4;
/// `struct mlx5_wqe_datagram_seg` (the address vector).
pub const AV_SIZE: usize = 48;
pub(super) const SRQ_NEXT_SEG: usize = 16;
/// umr control (48) + mkey context (64) + max(klm 16, 64): what a memory-window bind or local
/// invalidate needs; libmlx5 reserves it in every RC/UC WQE size (`_sq_overhead`).
pub(super) const MW_SIZE: usize = CTRL_SEG + 48 + 64 + 64;
/// Where an atomic WQE's atomic segment starts: after the control and remote address
/// segments, inside the first block.
const ATOMIC_AT: usize = CTRL_SEG + RADDR_SEG;

/// `MLX5_INVALID_LKEY`: the terminator of a receive scatter list.
pub const MLX5_INVALID_LKEY: u32 = 0x100;
/// `MLX5_INLINE_SEG`.
pub(super) const MLX5_INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_EXTENDED_UD_AV`.
pub(super) const MLX5_EXTENDED_UD_AV: u32 = 0x8000_0000;
/// `fm_ce_se` bits.
pub(super) const CTRL_CQ_UPDATE: u8 = 2 << 2;
pub(super) const CTRL_SOLICITED: u8 = 1 << 1;
pub(super) const CTRL_FENCE: u8 = 4 << 5;
/// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`: libmlx5 puts it on the work request after a UMR
/// (bind or local invalidate) unless that request asks for the full fence itself.
pub(super) const CTRL_SMALL_FENCE: u8 = 1 << 5;

/// UMR control segment (`struct mlx5_wqe_umr_ctrl_seg`, 48 bytes) `flags` bits.
pub(super) const UMR_FLAG_INLINE: u8 = 1 << 7;
pub(super) const UMR_FLAG_CHECK_FREE: u8 = 1 << 5;
pub(super) const UMR_FLAG_TRANSLATION_OFFSET: u8 = 1 << 4;
pub(super) const UMR_FLAG_CHECK_QPN: u8 = 1 << 3;
/// UMR control segment `mkey_mask` bits: which mkey-context fields the UMR changes.
pub(super) const UMR_MASK_LEN: u64 = 1 << 0;
pub(super) const UMR_MASK_START_ADDR: u64 = 1 << 6;
pub(super) const UMR_MASK_MKEY: u64 = 1 << 13;
pub(super) const UMR_MASK_QPN: u64 = 1 << 14;
pub(super) const UMR_MASK_LOCAL_WRITE: u64 = 1 << 18;
pub(super) const UMR_MASK_REMOTE_READ: u64 = 1 << 19;
pub(super) const UMR_MASK_REMOTE_WRITE: u64 = 1 << 20;
pub(super) const UMR_MASK_ATOMIC: u64 = 1 << 21;
pub(super) const UMR_MASK_FREE: u64 = 1 << 29;
/// Mkey context segment (`struct mlx5_wqe_mkey_context_seg`, 64 bytes): `free` and
/// `access_flags` bits.
pub(super) const MKEY_FREE: u8 = 1 << 6;
pub(super) const MKEY_ACCESS_ATOMIC: u8 = 1 << 6;
pub(super) const MKEY_ACCESS_REMOTE_WRITE: u8 = 1 << 5;
pub(super) const MKEY_ACCESS_REMOTE_READ: u8 = 1 << 4;
pub(super) const MKEY_ACCESS_LOCAL_WRITE: u8 = 1 << 3;
/// A bind's KLM takes at most 2 GiB (libmlx5 `set_bind_wr`: EOPNOTSUPP above).
pub const MAX_BIND_LENGTH: u64 = 1 << 31;

/// Field offsets inside the WQE segments (`mlx5dv.h`), named the way smoltcp's `wire`
/// modules name a layout's fields: every store into a segment goes through one of these.
/// Several neighbouring fields are written with one wide store; the constants below say
/// where each lies in it (asserted).
pub(super) mod field {
    /// `struct mlx5_wqe_ctrl_seg` (16 bytes).
    pub(crate) mod ctrl {
        /// `opmod_idx_opcode`, then `qpn_ds` at 4 (one 8-byte store).
        pub(crate) const OPMOD_IDX_OPCODE: usize = 0;
        /// `qpn_ds`: the QP number << 8 | the WQE's size in 16-byte units.
        pub(crate) const QPN_DS: usize = 4;
        /// `signature`, two reserved bytes, `fm_ce_se` at 11, `imm` at 12 (one 8-byte store).
        pub(crate) const SIGNATURE: usize = 8;
        /// Fence, completion and solicited-event bits.
        pub(crate) const FM_CE_SE: usize = 11;
        /// Immediate data, invalidated key or the window's current key (big-endian).
        pub(crate) const IMM: usize = 12;
    }
    /// `struct mlx5_wqe_raddr_seg` (16 bytes).
    pub(crate) mod raddr {
        /// `raddr`, the remote address.
        pub(crate) const ADDR: usize = 0;
        /// `rkey`.
        pub(crate) const RKEY: usize = 8;
    }
    /// `struct mlx5_wqe_atomic_seg` (16 bytes).
    pub(crate) mod atomic {
        /// `swap_add`: the swap value, or the addend.
        pub(crate) const SWAP_ADD: usize = 0;
        /// `compare`.
        pub(crate) const COMPARE: usize = 8;
    }
    /// `struct mlx5_wqe_data_seg` (16 bytes).
    pub(crate) mod data {
        /// `byte_count`, then `lkey` at 4 (one 8-byte store on the send path).
        pub(crate) const BYTE_COUNT: usize = 0;
        /// `lkey`.
        pub(crate) const LKEY: usize = 4;
        /// `addr`.
        pub(crate) const ADDR: usize = 8;
    }
    /// `struct mlx5_wqe_inl_data_seg` (4 bytes, the data follows).
    pub(crate) mod inline {
        /// `byte_count` | `MLX5_INLINE_SEG`.
        pub(crate) const BYTE_COUNT: usize = 0;
    }
    /// `struct mlx5_wqe_datagram_seg` (the 48-byte address vector).
    pub(crate) mod datagram {
        /// `av.key.qkey.qkey`: the remote Q_Key.
        pub(crate) const QKEY: usize = 0;
        /// `av.dqp_dct`: the remote QP number | `MLX5_EXTENDED_UD_AV`.
        pub(crate) const DQP_DCT: usize = 8;
    }
    /// `struct mlx5_wqe_mkey_context_seg` (64 bytes).
    pub(crate) mod mkey {
        /// `free`.
        pub(crate) const FREE: usize = 0;
        /// `access_flags`.
        pub(crate) const ACCESS_FLAGS: usize = 2;
        /// `qpn_mkey`: the bound QP number << 8 | the key's low byte.
        pub(crate) const QPN_MKEY: usize = 4;
        /// `start_addr`.
        pub(crate) const START_ADDR: usize = 16;
        /// `len`.
        pub(crate) const LEN: usize = 24;
    }

    const _: () = {
        assert!(ctrl::QPN_DS == ctrl::OPMOD_IDX_OPCODE + 4);
        assert!(ctrl::FM_CE_SE == ctrl::SIGNATURE + 3 && ctrl::IMM == ctrl::SIGNATURE + 4);
        assert!(data::LKEY == data::BYTE_COUNT + 4);
    };
}
use field::{atomic, ctrl as ctrl_f, data, datagram, inline, mkey, raddr as raddr_f};

/// Raw stores into a work queue buffer (device-read memory we own until the doorbell: plain
/// stores, no references).
///
/// # Safety
/// `p + off .. + 4/8` must lie in a live buffer.
#[inline(always)]
pub(super) unsafe fn w32(p: *mut u8, off: usize, v: u32) {
    // SAFETY: caller's contract; 4-byte aligned in every segment we write.
    unsafe { p.add(off).cast::<u32>().write(v.to_be()) }
}
#[inline(always)]
pub(super) unsafe fn w64(p: *mut u8, off: usize, v: u64) {
    // SAFETY: as in `w32`; `p + off` is 8-byte aligned where used (segment starts).
    unsafe { p.add(off).cast::<u64>().write_unaligned(v.to_be()) }
}

/// Writes a receive scatter list: data segments (zero-length ones skipped when `skip_empty`),
/// then the terminator when fewer than `max` were written.
///
/// # Safety
/// `scat..scat + max * 16` must lie in a live buffer.
pub(super) unsafe fn write_scatter(scat: *mut u8, sge: &[Sge], max: usize, skip_empty: bool) {
    let mut j = 0;
    for s in sge {
        if skip_empty && s.length == 0 {
            continue;
        }
        // SAFETY: j < sge.len() ≤ max (checked by the caller).
        unsafe {
            let d = scat.add(j * DATA_SEG);
            w32(d, data::BYTE_COUNT, s.length);
            w32(d, data::LKEY, s.lkey);
            w64(d, data::ADDR, s.addr);
        }
        j += 1;
    }
    if j < max {
        // SAFETY: j < max.
        unsafe {
            let d = scat.add(j * DATA_SEG);
            w32(d, data::BYTE_COUNT, 0);
            w32(d, data::LKEY, MLX5_INVALID_LKEY);
            w64(d, data::ADDR, 0);
        }
    }
}

impl Mlx5Qp {
    /// Writes one send WQE at block `cur` (the SQ has room: checked by the caller); returns
    /// its size in 16-byte units. The operation is one the QP accepts (checked once by
    /// uverbs' `Qp`: `QpOps::post_send`'s contract); checks what only mlx5 limits (SGE count,
    /// inline length, the UD destination's AH, binds) before writing anything it cannot take
    /// back (a refused WQE leaves only bytes the next WQE overwrites: nothing rings for it).
    ///
    /// `fence` is the pending fence (`fm_cache`): the request takes it unless it asks for the
    /// full fence, and leaves the small fence after a UMR, as libmlx5 does.
    ///
    /// # Safety
    /// Inline SGEs must be readable.
    #[inline(always)]
    pub(super) unsafe fn build_send(
        &self,
        wr: &SendWr<'_>,
        cur: u32,
        fence: &mut u8,
    ) -> Result<usize, PostFault> {
        if wr.sge.len() > self.max_gs as usize {
            return Err(PostFault::TooManySges {
                num_sge: wr.sge.len(),
                max_sge: self.max_gs,
            });
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
                seg.add(raddr_f::ADDR).cast::<u64>().write(addr.to_be());
                seg.add(raddr_f::RKEY)
                    .cast::<u64>()
                    .write(u64::from(rkey.to_be()));
            }
        };
        // SAFETY: 16 bytes into the WQE's first block.
        let seg1 = unsafe { ctrl.add(CTRL_SEG) };
        let (opcode, imm, mut size) = match wr.op {
            SendOp::Send => (WqeOpcode::SEND.0, 0, 1),
            SendOp::SendWithImm { imm } => (WqeOpcode::SEND_IMM.0, imm, 1),
            SendOp::SendWithInv { invalidate_rkey } => {
                (WqeOpcode::SEND_INVAL.0, invalidate_rkey, 1)
            }
            SendOp::RdmaWrite { remote_addr, rkey } => {
                raddr(seg1, remote_addr, rkey);
                (WqeOpcode::RDMA_WRITE.0, 0, 2)
            }
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                raddr(seg1, remote_addr, rkey);
                (WqeOpcode::RDMA_WRITE_IMM.0, imm, 2)
            }
            SendOp::RdmaRead { remote_addr, rkey } => {
                raddr(seg1, remote_addr, rkey);
                (WqeOpcode::RDMA_READ.0, 0, 2)
            }
            SendOp::AtomicCmpSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                raddr(seg1, remote_addr, rkey);
                // SAFETY: bytes 32..48 of the first block.
                unsafe {
                    let a = ctrl.add(ATOMIC_AT);
                    a.add(atomic::SWAP_ADD).cast::<u64>().write(swap.to_be());
                    a.add(atomic::COMPARE).cast::<u64>().write(compare.to_be());
                }
                (WqeOpcode::ATOMIC_CS.0, 0, 3)
            }
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                raddr(seg1, remote_addr, rkey);
                // The compare field is left as it was, as libmlx5 does (the device ignores it
                // for fetch-and-add).
                // SAFETY: bytes 32..40 of the first block.
                unsafe {
                    ctrl.add(ATOMIC_AT + atomic::SWAP_ADD)
                        .cast::<u64>()
                        .write(add.to_be())
                };
                (WqeOpcode::ATOMIC_FA.0, 0, 3)
            }
            // The rest out of line: memory-window binds and local invalidations (UMRs), and
            // what mlx5 does not encode; the common requests' match stays small.
            // SAFETY: the caller's contract.
            _ => return unsafe { self.build_rare(wr, cur, ctrl, fence) },
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
    pub(super) unsafe fn finish_wqe(
        &self,
        wr: &SendWr<'_>,
        cur: u32,
        ctrl: *mut u8,
        seg: *mut u8,
        mut size: usize,
        opcode: u8,
    ) -> Result<usize, PostFault> {
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
                    d.add(data::BYTE_COUNT)
                        .cast::<u64>()
                        .write(u64::from(len.to_be()) | (u64::from(s.lkey.to_be()) << 32));
                    d.add(data::ADDR).cast::<u64>().write(s.addr.to_be());
                    d = d.add(DATA_SEG);
                }
                size += 1;
            }
        }
        // The control segment's first half last: opmod_idx_opcode, qpn_ds.
        let w0 = (((cur & 0xffff) << 8) | u32::from(opcode)).to_be();
        // SAFETY: the first 8 bytes of the WQE (64-byte aligned).
        unsafe {
            ctrl.add(ctrl_f::OPMOD_IDX_OPCODE)
                .cast::<u64>()
                .write(u64::from(w0) | self.qpn_ds | ((size as u64) << 56));
        }
        Ok(size)
    }

    /// The requests [`Mlx5Qp::build_send`] does not encode in line: LOCAL_INV and memory-window
    /// binds (UMRs, [`Mlx5Qp::build_umr`]), which arm the small fence for the next request,
    /// and the operations mlx5 has no layout for (refused by name).
    ///
    /// # Safety
    /// As for [`Mlx5Qp::build_send`]; `ctrl` is block `cur` of the SQ.
    #[inline(never)]
    pub(super) unsafe fn build_rare(
        &self,
        wr: &SendWr<'_>,
        cur: u32,
        ctrl: *mut u8,
        fence: &mut u8,
    ) -> Result<usize, PostFault> {
        match wr.op {
            SendOp::LocalInv { .. } | SendOp::BindMw(_) => {
                // SAFETY: the caller's contract.
                let r = unsafe { self.build_umr(wr, cur, ctrl, *fence) };
                // libmlx5 arms the small fence for the next request once a UMR is being
                // built, also when it is refused after that (a bind too long, inline data
                // over the limit); the refusals before it leave the fence as it was.
                if !matches!(r, Err(PostFault::ZeroBasedType1Bind { .. })) {
                    *fence = CTRL_SMALL_FENCE;
                }
                r
            }
            // SendOp is non_exhaustive outside rverbs-uverbs: this arm lists every kind, so a
            // new operation does not compile here (the common ones are encoded by
            // `build_send` and never come here).
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
                // Not in mlx5's op table (`OPS`): never reaches here through `Qp`.
                | OpKind::Flush
                | OpKind::AtomicWrite => Err(self.not_encoded(other.kind())),
            },
        }
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
    pub(super) unsafe fn build_umr(
        &self,
        wr: &SendWr<'_>,
        cur: u32,
        ctrl: *mut u8,
        fence: u8,
    ) -> Result<usize, PostFault> {
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
                    return Err(PostFault::ZeroBasedType1Bind { provider: "mlx5" });
                }
                // SAFETY: bytes 8..16 of the WQE's first block.
                unsafe { self.write_ctrl_half(ctrl, flags, b.mw_rkey(), &mut fence) };
                if b.length() > MAX_BIND_LENGTH {
                    return Err(PostFault::BindTooLong {
                        length: b.length(),
                        max: MAX_BIND_LENGTH,
                        provider: "mlx5",
                    });
                }
                let bind = (b.length() != 0).then_some(&b);
                // SAFETY: blocks `cur` to `cur + 2` lie in the SQ (masked).
                unsafe { self.write_umr(ctrl, cur, type2, b.rkey(), bind) };
                (if bind.is_some() { 12 } else { 8 }, WcOpcode::BIND_MW)
            }
            _ => return Err(self.not_encoded(wr.op.kind())),
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
    pub(super) fn block(&self, i: u32) -> *mut u8 {
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
    pub(super) unsafe fn write_ctrl_half(
        &self,
        ctrl: *mut u8,
        flags: u32,
        imm: u32,
        fence: &mut u8,
    ) {
        // The pending fence unless FENCE is asked (bit 0 of the flags): a mask, no branch.
        let pending = *fence & ((flags & SendFlags::FENCE.bits()) as u8).wrapping_sub(1);
        *fence = 0;
        let fm = self.fm_ce_se[(flags & 7) as usize] | pending;
        // SAFETY: bytes 8..16 of the WQE (64-byte aligned).
        unsafe {
            ctrl.add(ctrl_f::SIGNATURE)
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
    pub(super) unsafe fn write_umr(
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
        unsafe { w32(mk, mkey::QPN_MKEY, (rkey & 0xff) | qpn) };
        let Some(b) = bind else {
            // SAFETY: byte 0 of the mkey context block.
            unsafe { mk.add(mkey::FREE).write(MKEY_FREE) };
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
            mk.add(mkey::FREE).write(0);
            mk.add(mkey::ACCESS_FLAGS).write(access);
            w64(mk, mkey::START_ADDR, start);
            w64(mk, mkey::LEN, b.length());
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
    pub(super) unsafe fn write_av(&self, wr: &SendWr<'_>, seg: *mut u8) -> Result<(), PostFault> {
        let dest = wr.ud.ok_or(PostFault::NoUdDest)?;
        let av = self.ahs.get(dest.ah_num).ok_or(PostFault::UnknownAh {
            ah_num: dest.ah_num,
            provider: "mlx5",
        })?;
        // SAFETY: the caller's contract.
        unsafe {
            ptr::copy_nonoverlapping(av.as_ptr(), seg, AV_SIZE);
            w32(
                seg,
                datagram::DQP_DCT,
                dest.remote_qpn | MLX5_EXTENDED_UD_AV,
            );
            w32(seg, datagram::QKEY, dest.remote_qkey);
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
    pub(super) unsafe fn write_inline(
        &self,
        sge: &[Sge],
        seg: *mut u8,
    ) -> Result<usize, PostFault> {
        let total = if let [s] = sge {
            // One SGE, the common case, in line.
            if s.length > self.max_inline {
                return Err(self.inline_too_long(sge));
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
        unsafe { w32(seg, inline::BYTE_COUNT, total as u32 | MLX5_INLINE_SEG) };
        Ok((total + INL_SEG).div_ceil(16))
    }

    /// Copies one inline SGE to `p`, split at the SQ end; returns where the copy ended.
    ///
    /// # Safety
    /// `p` in the SQ with `s.length` bytes reserved after it (wrapping); `s` readable, and
    /// written by no one during the call except through `rverbs_uverbs::kernel::shared` (which the
    /// copy uses too: 1-byte atomic loads), the kernel or a device.
    #[inline(always)]
    pub(super) unsafe fn copy_inline(&self, s: &Sge, p: *mut u8) -> *mut u8 {
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
    pub(super) unsafe fn copy_inline_sges(
        &self,
        sge: &[Sge],
        mut p: *mut u8,
    ) -> Result<usize, PostFault> {
        let mut total = 0usize;
        for s in sge {
            total += s.length as usize;
            if total > self.max_inline as usize {
                return Err(self.inline_too_long(sge));
            }
            // SAFETY: the caller's contract; the total stays within max_inline.
            p = unsafe { self.copy_inline(s, p) };
        }
        Ok(total)
    }

    /// The refusal of inline data `sge` over `max_inline`, naming the whole request's bytes.
    #[cold]
    #[inline(never)]
    pub(super) fn inline_too_long(&self, sge: &[Sge]) -> PostFault {
        PostFault::InlineTooLong {
            len: sge.iter().map(|s| u64::from(s.length)).sum(),
            max_inline: self.max_inline,
        }
    }

    /// The refusal of an operation this encoder has no layout for (unreachable for a caller
    /// that keeps `QpOps::post_send`'s contract: `send_caps` does not offer it).
    #[cold]
    #[inline(never)]
    pub(super) fn not_encoded(&self, op: OpKind) -> PostFault {
        PostFault::OpNotEncoded {
            op,
            qp_type: self.qp_type,
            provider: "mlx5",
        }
    }
}

/// What mlx5 (as libmlx5 builds WQEs) encodes, per operation: the UMR operations
/// (memory-window bind, local invalidate) on RC and UC, RDMA and atomics on the connected
/// types; the transport's own limits (`OpSet::for_transport`) are applied on top. Every
/// operation of the op table has a field: a new one does not compile until this says whether
/// mlx5 encodes it, and `Mlx5Qp::build_send` or `build_rare` how.
pub(crate) const OPS: OpTable<Transports> = OpTable {
    rdma_write: Transports::RC_UC,
    rdma_write_with_imm: Transports::RC_UC,
    send: Transports::RC_UC_UD,
    send_with_imm: Transports::RC_UC_UD,
    rdma_read: Transports::RC_UC,
    atomic_cmp_swp: Transports::RC_UC,
    atomic_fetch_add: Transports::RC_UC,
    local_inv: Transports::RC_UC,
    bind_mw: Transports::RC_UC,
    send_with_inv: Transports::RC_UC,
    // Not encoded: the libmlx5 44 oracle cannot judge them (docs/mlx5.md).
    flush: Transports::NONE,
    atomic_write: Transports::NONE,
};
