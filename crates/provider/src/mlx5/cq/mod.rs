//! The mlx5 completion queue as userspace sees it: a CQE ring and a doorbell record in our
//! own memory (the device writes the ring, we write the record), plus the CQ doorbell register
//! in a UAR page (MMIO) for arming.
//!
//! Ownership protocol (as libmlx5 and the kernel's `get_sw_cqe()`): entry `n` of a ring of
//! `ncqe` entries is ours when its opcode is not INVALID and its owner bit equals
//! `(n & ncqe) != 0`; the owner bit the device writes flips on every lap. After consuming
//! entries we tell the device how far we got by writing `ci & 0xffffff` (big-endian) into the
//! first word of the doorbell record; it never overwrites an entry we have not released.
//!
//! - [`buf`]: the ring and doorbell record memory, the CREATE_CQ driver data.
//! - [`uar`]: the UAR page and arming.
//! - this module: the poller ([`Mlx5Cq`]).

#![allow(unsafe_code)]

pub mod buf;
pub mod uar;

#[cfg(test)]
mod tests;

pub use buf::*;
pub use uar::*;

use std::fmt;
use std::ptr::{self};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use rverbs_uverbs::Error;
use rverbs_uverbs::{RawWc, WorkCompletion};

use crate::mlx5::abi::{
    MLX5_CQ_ARM_DB, MLX5_CQ_CI_MASK, MLX5_CQ_DB_REQ_NOT, MLX5_CQ_DB_REQ_NOT_SOL, MLX5_CQ_SET_CI,
};
use crate::mlx5::barrier::{dma_rmb_device, mmio_flush, mmio_wmb};
use crate::mlx5::cqe::{
    parse_from, parse_req_plain, Cqe64, CqeOpcode, CqeSource, WrIdLookup, CQE64_SIZE, OFF_OP_OWN,
};

const OP: &str = "mlx5 CQ";

/// The ring geometry, cached for the poll path.
#[derive(Clone, Copy, Debug)]
struct Ring {
    /// The CQE64 of slot 0 (the ring start, plus 64 with 128-byte slots).
    cqe0: *mut u8,
    /// One past the last slot's CQE64: `cqe0 + ncqe * stride`.
    end: *mut u8,
    /// Slot size in bytes.
    stride: usize,
    /// log2 of the entry count: `ci >> lap_shift` counts laps, its low bit is the owner
    /// bit software expects.
    lap_shift: u32,
    mask: u32,
    /// log2 of the slot size.
    shift: u32,
    dbrec: *mut u32,
}

/// What an owned entry is, as far as its owner byte tells.
#[derive(Clone, Copy)]
enum Owned {
    /// A requester CQE of the plain format (`op_own` bits 7:2 zero).
    ReqPlain,
    /// Anything else; its `op_own`.
    Other(u8),
}

impl Owned {
    /// Parses the entry `cqe` into `out`.
    #[inline(always)]
    fn parse<L: WrIdLookup>(self, cqe: OwnedCqe, lookup: &mut L, out: &mut WorkCompletion) {
        match self {
            Owned::ReqPlain => parse_req_plain(cqe, lookup, out),
            Owned::Other(op_own) => parse_from(cqe, op_own, lookup, out),
        }
    }
}

/// Where the next entry is: its CQE64, and the owner bit it carries once it is ours (the
/// lap's parity). The poller walks this instead of recomputing both from the index.
#[derive(Clone, Copy)]
struct Cursor {
    cqe: *mut u8,
    parity: u8,
}

/// A CQE64 in the ring that software owns: its owner byte said so and the read barrier is
/// behind us. The parser reads the fields it needs through the raw pointer (plain copies of
/// the bytes; no reference into the ring is formed). Valid until the consumer index is
/// published past the slot, which happens only after parsing.
#[derive(Clone, Copy)]
struct OwnedCqe(*const u8);

impl OwnedCqe {
    /// # Safety
    /// `p` points at a CQE64 (64 bytes, 64-byte aligned) inside a live ring, and the entry is
    /// software-owned for as long as the value is used: the producer does not write the slot
    /// again before the consumer index passes it.
    #[inline(always)]
    unsafe fn at(p: *const u8) -> Self {
        Self(p)
    }
}

impl CqeSource for OwnedCqe {
    #[inline(always)]
    fn u8_at(self, off: usize) -> u8 {
        debug_assert!(off < CQE64_SIZE);
        // SAFETY: off < 64: inside the owned entry (`at`'s contract), which nobody writes
        // while we read it.
        unsafe { self.0.add(off).read() }
    }
    #[inline(always)]
    fn be16_at(self, off: usize) -> u16 {
        debug_assert!(off + 2 <= CQE64_SIZE);
        // SAFETY: as in `u8_at`; unaligned read, so any offset inside the entry is fine.
        u16::from_be(unsafe { self.0.add(off).cast::<u16>().read_unaligned() })
    }
    #[inline(always)]
    fn be32_at(self, off: usize) -> u32 {
        debug_assert!(off + 4 <= CQE64_SIZE);
        // SAFETY: as in `be16_at`.
        u32::from_be(unsafe { self.0.add(off).cast::<u32>().read_unaligned() })
    }
    #[inline(always)]
    fn to_cqe64(self) -> Cqe64 {
        // SAFETY: the whole entry is ours and 64-byte aligned (`at`'s contract).
        unsafe { ptr::read(self.0.cast::<Cqe64>()) }
    }
}

impl Ring {
    /// The CQE64 of consumer index `ci` (its slot is `ci mod ncqe`).
    #[inline(always)]
    fn slot(&self, ci: u32) -> *mut u8 {
        let idx = (ci & self.mask) as usize;
        // SAFETY: idx < ncqe, so the slot and its CQE64 lie inside the ring mapping, which
        // lives as long as the CQ that owns this Ring.
        unsafe { self.cqe0.add(idx << self.shift) }
    }

    /// The cursor of consumer index `ci`.
    #[inline(always)]
    fn cursor(&self, ci: u32) -> Cursor {
        Cursor {
            cqe: self.slot(ci),
            parity: (ci >> self.lap_shift) as u8 & 1,
        }
    }

    /// `at`, or slot 0 of the next lap when `at` is one past the last slot.
    #[inline(always)]
    fn wrap(&self, at: Cursor) -> Cursor {
        if at.cqe == self.end {
            Cursor {
                cqe: self.cqe0,
                parity: at.parity ^ 1,
            }
        } else {
            at
        }
    }

    /// Slots from `at` to the end of the ring (at least 1).
    #[inline(always)]
    fn slots_left(&self, at: Cursor) -> usize {
        (self.end as usize - at.cqe as usize) >> self.shift
    }

    /// The CQE at `at` and what it is, if software owns it: its opcode is not INVALID and
    /// its owner bit matches the lap's parity.
    #[inline(always)]
    fn take(&self, at: Cursor) -> Option<(OwnedCqe, Owned)> {
        // SAFETY: a cursor points at a CQE64 inside the ring (`cursor`; the poll loop steps
        // it by `stride` only while `slots_left` says so, and `wrap` restarts it), so its
        // owner byte is in bounds; u8 has no alignment requirement. The device (or a
        // simulated device thread) writes this byte while we read it, so it is read as an
        // atomic; nothing reads it through a reference.
        let owner_byte = unsafe { AtomicU8::from_ptr(at.cqe.add(OFF_OP_OWN)) };
        // Acquire: the owner byte says the entry is complete, and nothing else of it may be
        // read before that byte was. Pairs with the producer's release of the byte (a
        // simulated device's store; the device's write ordering for a real one), so its
        // writes of the rest of the entry are visible to the reads the parser makes. A load
        // ordering rather than a fence: a fence per entry would make the compiler reload
        // everything it holds from memory (the lookup's tables) for every entry.
        let op_own = owner_byte.load(Ordering::Acquire);
        // Owner bit, solicited bit (ignored), format and opcode: one test finds the commonest
        // entry, an owned requester CQE of the plain format.
        let x = op_own ^ at.parity;
        let kind = if x & 0xfd == 0 {
            Owned::ReqPlain
        } else if x & 1 == 0 && op_own >> 4 != CqeOpcode::INVALID.0 {
            Owned::Other(op_own)
        } else {
            return None;
        };
        // What DMA needs beyond the Acquire (aarch64: `dmb oshld`; nothing on x86-64).
        dma_rmb_device();
        // SAFETY: in bounds and 64-byte aligned (page-aligned ring, 64- or 128-byte slots,
        // CQE64 at offset 0 or 64); software-owned (checked above) until `set_ci` passes it,
        // which the poller does only after parsing.
        Some((unsafe { OwnedCqe::at(at.cqe) }, kind))
    }

    /// Publishes the consumer index: `dbrec[SET_CI] = be32(ci & 0xffffff)`.
    #[inline(always)]
    fn set_ci(&self, ci: u32) {
        // SAFETY: the doorbell record lies inside the CQ mapping and is 4-byte aligned (page
        // start); the device reads it concurrently, so it is written as an atomic.
        let w = unsafe { AtomicU32::from_ptr(self.dbrec.add(MLX5_CQ_SET_CI)) };
        // Release: every read of the entries we consumed happens before the device can see
        // the new index and overwrite those slots.
        w.store((ci & MLX5_CQ_CI_MASK).to_be(), Ordering::Release);
    }
}

/// An mlx5 completion queue: poll, iterate, arm.
///
/// `L` maps a CQE's (QPN, queue, WQE counter) to the `wr_id` ([`WrIdLookup`]): the QP side
/// of rverbs provides it; tests use a table or a closure.
pub struct Mlx5Cq<L> {
    ring: Ring,
    cons_index: u32,
    published: u32,
    arm_sn: u32,
    cqn: u32,
    uar: UarPage,
    lookup: L,
    buf: CqBuf,
}

// SAFETY: the raw pointers in `ring` point into `buf`, which the CQ owns; the UAR page is
// Send. Everything else is plain data.
unsafe impl<L: Send> Send for Mlx5Cq<L> {}

impl<L> fmt::Debug for Mlx5Cq<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlx5Cq")
            .field("cqn", &self.cqn)
            .field("cons_index", &self.cons_index)
            .field("arm_sn", &self.arm_sn)
            .field("buf", &self.buf)
            .field("uar", &self.uar)
            .finish_non_exhaustive()
    }
}

impl<L> Mlx5Cq<L> {
    /// The CQ number.
    #[cfg(any(test, feature = "internals"))]
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The consumer index (entries consumed since creation, wrapping).
    #[cfg(any(test, feature = "internals"))]
    pub fn cons_index(&self) -> u32 {
        self.cons_index
    }

    /// The arm sequence number (events acknowledged, wrapping).
    #[cfg(any(test, feature = "internals"))]
    pub fn arm_sn(&self) -> u32 {
        self.arm_sn
    }

    /// The CQ memory.
    #[cfg(any(test, feature = "internals"))]
    pub fn buf(&self) -> &CqBuf {
        &self.buf
    }

    /// The wr_id lookup.
    pub fn lookup_mut(&mut self) -> &mut L {
        &mut self.lookup
    }
}

impl<L: WrIdLookup> Mlx5Cq<L> {
    /// A CQ over `buf`, known to the device as `cqn`, armed through `uar`.
    pub fn new(buf: CqBuf, cqn: u32, uar: UarPage, lookup: L) -> rverbs_uverbs::Result<Self> {
        if cqn > MLX5_CQ_CI_MASK {
            return Err(Error::invalid(OP, format!("cqn {cqn:#x} does not fit 24 bits")).into());
        }
        let ring = Ring {
            // SAFETY: 0 or 64 bytes into slot 0, inside the ring.
            cqe0: unsafe { buf.ring_ptr().add(buf.cqe_size.bytes() - CQE64_SIZE) },
            // SAFETY: one past the last slot's CQE64, at most 64 bytes past the ring, where
            // the doorbell page follows; never dereferenced.
            end: unsafe {
                buf.ring_ptr().add(
                    buf.ncqe as usize * buf.cqe_size.bytes() + buf.cqe_size.bytes() - CQE64_SIZE,
                )
            },
            stride: buf.cqe_size.bytes(),
            lap_shift: buf.ncqe.trailing_zeros(),
            mask: buf.ncqe - 1,
            shift: buf.cqe_size.bytes().trailing_zeros(),
            dbrec: buf.dbrec_ptr(),
        };
        Ok(Self {
            ring,
            cons_index: 0,
            published: 0,
            arm_sn: 0,
            cqn,
            uar,
            lookup,
            buf,
        })
    }

    /// Polls up to `out.len()` completions into `out`; returns how many. The consumer index
    /// is published once, after the batch. Does not allocate.
    #[inline]
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.walk(
            out,
            #[inline(always)]
            |cqe, kind, lookup, slot| kind.parse(cqe, lookup, slot),
        )
    }

    /// Polls up to `out.len()` completions into `out` as [`RawWc`]s (the kernel's
    /// `ib_uverbs_wc` layout, decoded by the reader): each CQE is parsed as by
    /// [`poll`](Self::poll), `wr_id` looked up, and encoded. The consumer index is published
    /// once, after the batch. Does not allocate.
    #[inline]
    pub fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        self.walk(
            out,
            #[inline(always)]
            |cqe, kind, lookup, slot| {
                let mut wc = WorkCompletion::default();
                kind.parse(cqe, lookup, &mut wc);
                *slot = RawWc::from_work_completion(&wc);
            },
        )
    }

    /// The ring walk of [`poll`](Self::poll) and [`poll_raw`](Self::poll_raw): takes the
    /// software-owned entries in order into `out` through `emit`, then publishes the
    /// consumer index once.
    #[inline(always)]
    fn walk<T>(
        &mut self,
        out: &mut [T],
        mut emit: impl FnMut(OwnedCqe, Owned, &mut L, &mut T),
    ) -> usize {
        let mut n = 0;
        // A local copy keeps the geometry in registers.
        let ring = self.ring;
        let mut at = ring.cursor(self.cons_index);
        'ring: while n < out.len() {
            // Up to the end of the ring, the next slot is simply the one after: no wrap test
            // per entry.
            let rest = &mut out[n..];
            let run = ring.slots_left(at).min(rest.len());
            for (i, slot) in rest[..run].iter_mut().enumerate() {
                // The owner byte is read with Acquire inside `take` (the device writes the
                // entry, then its owner byte); the entry is read by copy from then on.
                let Some((cqe, kind)) = ring.take(at) else {
                    n += i;
                    break 'ring;
                };
                emit(cqe, kind, &mut self.lookup, slot);
                at.cqe = at.cqe.wrapping_add(ring.stride);
            }
            n += run;
            at = ring.wrap(at);
        }
        self.cons_index = self.cons_index.wrapping_add(n as u32);
        // Release inside `publish` (set_ci): our copies of the entries happen before the
        // device may see their slots free.
        self.publish();
        n
    }

    /// A borrowing iterator over the completions that are ready. It publishes the consumer
    /// index once, when dropped (or at [`CqIter::sync`]). mlx5 has no producer index to read:
    /// the iterator stops at the first entry the device has not written.
    #[cfg(any(test, feature = "internals"))]
    pub fn iter(&mut self) -> CqIter<'_, L> {
        CqIter { cq: self }
    }

    /// Requests an event for the next completion (`solicited`: the next solicited or error
    /// completion): writes the arm word into the doorbell record, then the CQ doorbell.
    ///
    /// As with every verbs CQ, poll once more after arming: completions that arrived before
    /// the arm do not raise an event.
    pub fn arm(&mut self, solicited: bool) {
        let word = self.arm_word(solicited);
        // SAFETY: the doorbell record is inside the CQ mapping, 4-byte aligned; the device
        // reads it concurrently, so it is written as an atomic.
        let arm = unsafe { AtomicU32::from_ptr(self.ring.dbrec.add(MLX5_CQ_ARM_DB)) };
        arm.store(word.to_be(), Ordering::Relaxed);
        // The record must be visible to the device before the doorbell that makes it look.
        mmio_wmb();
        self.uar
            .ring_cq_doorbell(((word as u64) << 32) | self.cqn as u64);
        mmio_flush();
    }

    /// The arm word `arm` writes: `sn << 28 | cmd | ci`, with `sn = arm_sn & 3`,
    /// `cmd` = [`MLX5_CQ_DB_REQ_NOT_SOL`] or [`MLX5_CQ_DB_REQ_NOT`], `ci` the low 24 bits of
    /// the consumer index. The UAR doorbell is this word in its high 32 bits and the CQN below.
    pub fn arm_word(&self, solicited: bool) -> u32 {
        let sn = self.arm_sn & 3;
        let cmd = if solicited {
            MLX5_CQ_DB_REQ_NOT_SOL
        } else {
            MLX5_CQ_DB_REQ_NOT
        };
        (sn << 28) | cmd | (self.cons_index & MLX5_CQ_CI_MASK)
    }

    /// Removes the entries software owns that `remove` picks, keeping the others in order, as
    /// libmlx5's `__mlx5_cq_clean` does when a QP is moved to RESET or destroyed; returns how
    /// many were removed.
    ///
    /// The entries looked at run from the consumer index to the first one the device has not
    /// written, at most `ncqe - 1` of them (libmlx5 stops one short of a full ring). From the
    /// newest back to the oldest, a removed entry counts one more hole, and a kept entry is
    /// copied `holes` slots forward (the whole slot, 64 or 128 bytes), keeping the owner bit
    /// of the slot it lands in. Then the consumer index moves past the holes and is
    /// published (Release: the copies are done before the device may reuse the slots). The
    /// entries the device writes meanwhile are not looked at: they come after the range.
    /// `remove` sees each entry once, newest first.
    pub fn clean(&mut self, mut remove: impl FnMut(&Cqe64) -> bool) -> u32 {
        let ring = self.ring;
        let start = self.cons_index;
        let mut prod = start;
        while ring.take(ring.cursor(prod)).is_some() {
            if prod == start.wrapping_add(ring.mask) {
                break;
            }
            prod = prod.wrapping_add(1);
        }
        // Bytes before the CQE64 in a slot (64 with 128-byte slots).
        let lead = ring.stride - CQE64_SIZE;
        let mut holes = 0u32;
        while prod != start {
            prod = prod.wrapping_sub(1);
            // SAFETY: `prod` is in [start, end of the owned run): `take` found the entry
            // software-owned (Acquire), and the device writes it again only after the
            // consumer index has passed it, which happens below, after this copy.
            let cqe = unsafe { OwnedCqe::at(ring.slot(prod)) }.to_cqe64();
            if remove(&cqe) {
                holes += 1;
            } else if holes > 0 {
                let dst64 = ring.slot(prod.wrapping_add(holes));
                // SAFETY: both slots lie in the ring (`slot` masks the index; the slot starts
                // `lead` bytes before its CQE64) and are distinct; both are software-owned
                // (the destination lies between this entry and the end of the owned run), so
                // nobody else reads or writes them now; no reference is formed.
                unsafe {
                    let owner = dst64.add(OFF_OP_OWN).read() & 1;
                    ptr::copy_nonoverlapping(
                        ring.slot(prod).sub(lead),
                        dst64.sub(lead),
                        ring.stride,
                    );
                    let op_own = dst64.add(OFF_OP_OWN);
                    op_own.write((op_own.read() & !1) | owner);
                }
            }
        }
        if holes > 0 {
            self.cons_index = self.cons_index.wrapping_add(holes);
            // Release inside `publish`: the copies above happen before the device can see
            // the slots behind the new consumer index as free.
            self.publish();
        }
        holes
    }

    /// One completion event was read from the completion channel (`CqOps::event_received`):
    /// advances the arm sequence number, so the next arm is a new request (libmlx5's
    /// `mlx5_cq_event()`).
    pub fn event_received(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }

    /// Takes the next CQE if software owns it.
    #[inline(always)]
    #[cfg(any(test, feature = "internals"))]
    fn next(&mut self) -> Option<WorkCompletion> {
        let (cqe, kind) = self.ring.take(self.ring.cursor(self.cons_index))?;
        let mut wc = WorkCompletion::default();
        kind.parse(cqe, &mut self.lookup, &mut wc);
        self.cons_index = self.cons_index.wrapping_add(1);
        Some(wc)
    }

    #[inline(always)]
    fn publish(&mut self) {
        if self.published != self.cons_index {
            self.ring.set_ci(self.cons_index);
            self.published = self.cons_index;
        }
    }
}

/// Iterator over ready completions; see [`Mlx5Cq::iter`].
#[cfg(any(test, feature = "internals"))]
pub struct CqIter<'a, L: WrIdLookup> {
    cq: &'a mut Mlx5Cq<L>,
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> CqIter<'_, L> {
    /// Publishes the consumer index now (the device may reuse the slots consumed so far).
    pub fn sync(&mut self) {
        self.cq.publish();
    }
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> Iterator for CqIter<'_, L> {
    type Item = WorkCompletion;

    #[inline]
    fn next(&mut self) -> Option<WorkCompletion> {
        self.cq.next()
    }
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> Drop for CqIter<'_, L> {
    fn drop(&mut self) {
        self.cq.publish();
    }
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> fmt::Debug for CqIter<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqIter").field("cq", &self.cq).finish()
    }
}
