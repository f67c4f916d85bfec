//! One send WQE slot of the rxe ring as a typed view with safe setters (smoltcp's way over a
//! byte layout): the opcode's encoding (`sq.rs`) is safe code that calls setters, and the one
//! `unsafe` step is making the view, where the caller vouches that the slot is its own. The
//! fields are written in place through raw pointers (no reference into memory the kernel
//! shares is formed, and no WQE is built on the stack and copied).

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use super::abi::{
    rxe_dma_info, rxe_send_wqe, rxe_send_wr, rxe_sge, rxe_wr_atomic, rxe_wr_flush, rxe_wr_mw,
    rxe_wr_rdma, rxe_wr_ud, RXE_SEND_WQE_SGE_OFFSET, RXE_SEND_WR_UNION_SIZE,
};
use rverbs_uverbs::kernel::shared::copy_from_shared_raw;

/// A send queue slot at our unpublished producer index: ours to write until the producer
/// index moves past it, for `'a`.
pub(super) struct WqeSlot<'a> {
    wqe: NonNull<rxe_send_wqe>,
    /// Bytes after the 208-byte header (SGEs, inline data, ATOMIC_WRITE's value).
    room: usize,
    _slot: PhantomData<&'a mut u8>,
}

impl WqeSlot<'_> {
    /// A view of the `elem_size` bytes at `slot`.
    ///
    /// # Safety
    ///
    /// `slot` is 8-aligned and valid for reads and writes of `elem_size` bytes, and for the
    /// view's life nobody else reads or writes them: the slot is at or past our producer
    /// index, not yet published, and not between the kernel's consumer and our producer
    /// (the kernel does not touch it until we publish a producer index past it).
    #[inline(always)]
    pub(super) unsafe fn new(slot: *mut u8, elem_size: usize) -> Self {
        debug_assert!(slot.cast::<rxe_send_wqe>().is_aligned());
        assert!(
            elem_size >= RXE_SEND_WQE_SGE_OFFSET,
            "a slot smaller than a WQE header"
        );
        WqeSlot {
            // SAFETY: the contract: a slot of the mapping, never null.
            wqe: unsafe { NonNull::new_unchecked(slot.cast()) },
            room: elem_size - RXE_SEND_WQE_SGE_OFFSET,
            _slot: PhantomData,
        }
    }

    #[inline(always)]
    fn wr(&mut self) -> *mut rxe_send_wr {
        // SAFETY: a field address inside the slot (`new`): no reference is formed.
        unsafe { ptr::addr_of_mut!((*self.wqe.as_ptr()).wr) }
    }

    /// The `wr` union, as bytes.
    #[inline(always)]
    fn arm(&mut self) -> *mut u8 {
        // SAFETY: as in `wr`.
        unsafe { ptr::addr_of_mut!((*self.wr()).wr).cast::<u8>() }
    }

    /// The `wr` union zeroed, for an arm to be written over it.
    #[inline(always)]
    pub(super) fn clear_arm(&mut self) {
        let arm = self.arm();
        // SAFETY: the union is RXE_SEND_WR_UNION_SIZE bytes inside the slot, ours to write
        // (`new`).
        unsafe { ptr::write_bytes(arm, 0, RXE_SEND_WR_UNION_SIZE) }
    }

    /// The request's words: `wr_id`, `opcode`, `send_flags`, `ex` (`reserved` 0).
    #[inline(always)]
    pub(super) fn set_wr(&mut self, wr_id: u64, opcode: u32, send_flags: u32, ex: u32) {
        let w = self.wr();
        // SAFETY: fields of the slot, ours to write (`new`).
        unsafe {
            ptr::addr_of_mut!((*w).wr_id).write(wr_id);
            ptr::addr_of_mut!((*w).reserved).write(0);
            ptr::addr_of_mut!((*w).opcode).write(opcode);
            ptr::addr_of_mut!((*w).send_flags).write(send_flags);
            ptr::addr_of_mut!((*w).ex).write(ex);
        }
    }

    /// The RDMA arm of the union (RDMA WRITE and READ, ATOMIC_WRITE's target). After
    /// [`clear_arm`](Self::clear_arm), which zeroed the rest of the union.
    #[inline(always)]
    pub(super) fn set_rdma(&mut self, arm: rxe_wr_rdma) {
        // SAFETY: the union holds the arm (the ABI layout tests); ours to write (`new`).
        unsafe { self.arm().cast::<rxe_wr_rdma>().write(arm) }
    }

    /// The atomic arm (compare-and-swap, fetch-and-add).
    #[inline(always)]
    pub(super) fn set_atomic(&mut self, arm: rxe_wr_atomic) {
        // SAFETY: as in `set_rdma`.
        unsafe { self.arm().cast::<rxe_wr_atomic>().write(arm) }
    }

    /// The memory-window arm (BIND_MW).
    #[inline(always)]
    pub(super) fn set_mw(&mut self, arm: rxe_wr_mw) {
        // SAFETY: as in `set_rdma`.
        unsafe { self.arm().cast::<rxe_wr_mw>().write(arm) }
    }

    /// The FLUSH arm.
    #[inline(always)]
    pub(super) fn set_flush(&mut self, arm: rxe_wr_flush) {
        // SAFETY: as in `set_rdma`.
        unsafe { self.arm().cast::<rxe_wr_flush>().write(arm) }
    }

    /// The UD arm's leading fields (the rest, pad and address vector, stays zero).
    #[inline(always)]
    pub(super) fn set_ud(&mut self, remote_qpn: u32, remote_qkey: u32, ah_num: u32) {
        let u = self.arm().cast::<rxe_wr_ud>();
        // SAFETY: as in `set_rdma`.
        unsafe {
            ptr::addr_of_mut!((*u).remote_qpn).write(remote_qpn);
            ptr::addr_of_mut!((*u).remote_qkey).write(remote_qkey);
            ptr::addr_of_mut!((*u).ah_num).write(ah_num);
        }
    }

    /// The words after the request: `iova`, `ssn` and `dma`; `status`, `state` (0: posted)
    /// and the kernel's own fields zeroed, so nothing is left from the slot's previous use.
    #[inline(always)]
    pub(super) fn set_rest(&mut self, iova: u64, ssn: u32, dma: rxe_dma_info) {
        let wqe = self.wqe.as_ptr();
        // SAFETY: fields of the slot, ours to write (`new`).
        unsafe {
            ptr::addr_of_mut!((*wqe).status).write(0);
            ptr::addr_of_mut!((*wqe).state).write(0);
            ptr::addr_of_mut!((*wqe).iova).write(iova);
            ptr::addr_of_mut!((*wqe).mask).write(0);
            ptr::addr_of_mut!((*wqe).first_psn).write(0);
            ptr::addr_of_mut!((*wqe).last_psn).write(0);
            ptr::addr_of_mut!((*wqe).ack_length).write(0);
            ptr::addr_of_mut!((*wqe).ssn).write(ssn);
            ptr::addr_of_mut!((*wqe).has_rd_atomic).write(0);
            ptr::addr_of_mut!((*wqe).dma).write(dma);
        }
    }

    /// The bytes after the header.
    #[inline(always)]
    fn data(&mut self) -> *mut u8 {
        self.wqe
            .as_ptr()
            .cast::<u8>()
            .wrapping_add(RXE_SEND_WQE_SGE_OFFSET)
    }

    /// SGE `i` of the gather list after the header. Panics if the slot has no room for it
    /// (`RxeSq::new` sized the slots for `max_sge`, which the plan checked).
    #[inline(always)]
    pub(super) fn set_sge(&mut self, i: usize, sge: rxe_sge) {
        let size = core::mem::size_of::<rxe_sge>();
        assert!(i < self.room / size, "SGE {i} past the slot");
        // SAFETY: inside the slot (checked), 8-aligned (the array starts at offset 208 of an
        // 8-aligned slot); ours to write (`new`).
        unsafe { self.data().cast::<rxe_sge>().add(i).write(sge) }
    }

    /// ATOMIC_WRITE's 8 bytes, where the SGEs would be.
    #[inline(always)]
    pub(super) fn set_atomic_value(&mut self, value: [u8; 8]) {
        assert!(self.room >= 8, "no room for the value");
        // SAFETY: 8 bytes inside the slot (checked); ours to write (`new`).
        unsafe { ptr::copy_nonoverlapping(value.as_ptr(), self.data(), 8) }
    }

    /// Copies `len` bytes from `src` into the inline data at `off`. Panics if they do not
    /// fit in the slot.
    ///
    /// # Safety
    ///
    /// `src` names `len` readable bytes that Rust touches meanwhile only through
    /// `rverbs_uverbs::kernel::shared` (registered memory: `Mr::write_at` may race this
    /// copy, and does so with the same 1-byte atomics), not overlapping the ring.
    #[inline(always)]
    pub(super) unsafe fn copy_inline(&mut self, off: usize, src: *const u8, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.room),
            "inline data past the slot"
        );
        // SAFETY: the destination is inside the slot (checked) and ours (`new`); the source
        // is the caller's.
        unsafe { copy_from_shared_raw(src, self.data().add(off), len) }
    }
}
