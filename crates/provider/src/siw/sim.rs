//! A simulated siw ring in ordinary memory and the kernel's side of its flag handshake, for
//! tests of the siw data path without a device.
//!
//! [`SimRing`] allocates a zeroed, page-aligned buffer of `slots` elements (and a tail, the
//! CQ's notify word), as the kernel's `vmalloc_user` does. [`SimKernel`] plays the kernel
//! with the kernel's orderings: it reads an element's `flags` before the element (Acquire)
//! and hands a taken work queue element back by clearing `flags` (Release); it writes a CQE's
//! fields before setting `VALID` (Release) and only into a slot whose `flags` are 0.

#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU8, Ordering};

use super::abi::{notify, siw_cqe, wqe_flags, FLAGS_OFFSET};
use super::ring::{ring_bytes, Ring};
use super::SiwQueue;

const PAGE: usize = 4096;

/// A heap buffer laid out like a mapped siw ring. Freed on drop.
#[derive(Debug)]
pub struct SimRing {
    ptr: NonNull<u8>,
    layout: Layout,
    slots: u32,
    elem: usize,
    tail: usize,
}

// SAFETY: `SimRing` owns its allocation; it hands out views and kernel handles whose users
// follow the flag protocol (atomics for the flags, elements only by their owner of the
// moment), so moving or sharing the owner cannot race by itself.
unsafe impl Send for SimRing {}
// SAFETY: as above; `&SimRing` offers nothing but those handles.
unsafe impl Sync for SimRing {}

impl SimRing {
    /// A ring of `slots` (a power of two) elements of `elem` bytes and `tail` bytes after.
    pub fn new(slots: u32, elem: usize, tail: usize) -> Self {
        let len = ring_bytes(slots, elem, tail)
            .expect("power-of-two slots")
            .next_multiple_of(PAGE);
        let layout = Layout::from_size_align(len, PAGE).expect("layout");
        // SAFETY: non-zero size (at least one element).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        SimRing {
            ptr,
            layout,
            slots,
            elem,
            tail,
        }
    }

    /// The user side's view.
    ///
    /// # Safety
    /// The view must not outlive `self`, and only one user side may use the ring.
    pub unsafe fn view(&self, what: SiwQueue) -> Ring {
        // SAFETY: the buffer holds the geometry (new); lifetime and single user: the caller.
        unsafe {
            Ring::new(
                self.ptr,
                self.layout.size(),
                self.slots,
                self.elem,
                self.tail,
                what,
            )
        }
        .expect("simulated geometry")
    }

    /// The kernel's side (one at a time, like the kernel's own lock per queue).
    pub fn kernel(&self) -> SimKernel<'_> {
        SimKernel { ring: self, at: 0 }
    }

    /// The buffer's start (to hand a view lying sizes).
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Bytes allocated.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    fn slot(&self, i: u32) -> *mut u8 {
        self.ptr
            .as_ptr()
            .wrapping_add((i & (self.slots - 1)) as usize * self.elem)
    }

    fn flags16(&self, i: u32) -> &AtomicU16 {
        // SAFETY: in bounds, 2-aligned; the flags are reached only as atomics.
        unsafe { AtomicU16::from_ptr(self.slot(i).add(FLAGS_OFFSET).cast()) }
    }

    fn flags8(&self, i: u32) -> &AtomicU8 {
        // SAFETY: in bounds; the flags are reached only as atomics.
        unsafe { AtomicU8::from_ptr(self.slot(i).add(FLAGS_OFFSET)) }
    }

    /// The flags of element `i` (a work queue's 16 bits), as they are now.
    pub fn flags_of(&self, i: u32) -> u16 {
        self.flags16(i).load(Ordering::Acquire)
    }

    /// The notify word after the elements (CQ rings).
    pub fn notify(&self) -> &AtomicU32 {
        assert!(self.tail >= 4);
        // SAFETY: within the allocation (tail), 4-aligned; reached only as an atomic.
        unsafe {
            AtomicU32::from_ptr(
                self.ptr
                    .as_ptr()
                    .add(self.slots as usize * self.elem)
                    .cast(),
            )
        }
    }
}

impl Drop for SimRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; every view is gone (the view contract).
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// The kernel's side of one simulated ring: its own free-running index.
#[derive(Debug)]
pub struct SimKernel<'a> {
    ring: &'a SimRing,
    at: u32,
}

impl SimKernel<'_> {
    /// Takes the next work queue element if it is valid: copies it, then clears its flags
    /// (handing the slot back), as siw does when it takes an SQE or RQE.
    pub fn take<T: zerocopy::FromBytes>(&mut self) -> Option<T> {
        assert_eq!(size_of::<T>(), self.ring.elem);
        let f = self.ring.flags16(self.at);
        // Acquire: the element's fields, written before VALID, are visible.
        let flags = f.load(Ordering::Acquire);
        if flags & wqe_flags::VALID == 0 {
            return None;
        }
        // SAFETY: in bounds; while VALID is set the user side does not write the element
        // (it only loads the flags, atomically), so this copy races with nothing.
        let v = unsafe { self.ring.slot(self.at).cast::<T>().read() };
        // Release: our copy is done before the user may rewrite the slot.
        f.store(0, Ordering::Release);
        self.at = self.at.wrapping_add(1);
        Some(v)
    }

    /// Produces `cqe` (its `flags` ORed with `VALID`) if the slot is free; false when the CQ
    /// is full.
    pub fn produce(&mut self, cqe: &siw_cqe) -> bool {
        let f = self.ring.flags8(self.at);
        // Acquire: the user's copy of the slot's previous CQE is done.
        if f.load(Ordering::Acquire) != 0 {
            return false;
        }
        let p = self.ring.slot(self.at).cast::<siw_cqe>();
        // SAFETY: the slot is in bounds and free (flags 0): the user side does not read its
        // fields until VALID is set; the flags byte is left alone here (atomics only).
        unsafe {
            ptr::addr_of_mut!((*p).id).write(cqe.id);
            ptr::addr_of_mut!((*p).opcode).write(cqe.opcode);
            ptr::addr_of_mut!((*p).status).write(cqe.status);
            ptr::addr_of_mut!((*p).bytes).write(cqe.bytes);
            ptr::addr_of_mut!((*p).imm_data).write(cqe.imm_data);
            ptr::addr_of_mut!((*p).qp_id).write(cqe.qp_id);
        }
        // Release: the fields are visible before VALID.
        f.store(cqe.flags | wqe_flags::VALID as u8, Ordering::Release);
        self.at = self.at.wrapping_add(1);
        true
    }

    /// Whether a completion now raises an event (siw's `siw_cq_notify_now`): one-shot, the
    /// word goes back to `NOT`.
    pub fn notify_now(&mut self, solicited: bool) -> bool {
        let w = self.ring.notify();
        let v = w.load(Ordering::SeqCst);
        if v & notify::NEXT_COMPLETION != 0 || (v & notify::SOLICITED != 0 && solicited) {
            w.store(notify::NOT, Ordering::SeqCst);
            true
        } else {
            false
        }
    }
}
