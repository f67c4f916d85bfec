//! A simulated rxe queue in ordinary memory, and the kernel's side of the ring protocol, for
//! tests and benchmarks of the rxe data path without a device.
//!
//! [`SimQueue`] allocates a zeroed, page-aligned buffer laid out like the kernel's
//! `rxe_queue_buf` (as `rxe_queue_init` does: header, then `slots` elements of
//! `1 << log2_elem_size` bytes, the length rounded up to whole pages as the kernel's `mminfo`
//! reports it). [`SimKernel`] plays the kernel with the kernel's orderings: it loads the index
//! userspace owns with `Acquire`, copies the element, and publishes its own index with
//! `Release` (`smp_load_acquire` / `smp_store_release` in `rxe_queue.h`).

#![allow(unsafe_code)]

use std::alloc::{self, Layout};
use std::io;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use rverbs_uverbs::Error;
use zerocopy::IntoBytes;

use super::abi::{
    QUEUE_CONSUMER_INDEX_OFFSET, QUEUE_DATA_OFFSET, QUEUE_INDEX_MASK_OFFSET,
    QUEUE_LOG2_ELEM_SIZE_OFFSET, QUEUE_PRODUCER_INDEX_OFFSET,
};
use super::queue::{QueueKind, RxeQueue, MAX_LOG2_ELEM_SIZE};

const PAGE: usize = 4096;

/// A heap buffer laid out like a mapped rxe queue. Freed on drop.
#[derive(Debug)]
pub struct SimQueue {
    ptr: NonNull<u8>,
    layout: Layout,
    log2_elem_size: u32,
    index_mask: u32,
}

// SAFETY: `SimQueue` owns its allocation; the only shared-state accessors take `&mut self`
// (kernel side) or go through atomics (header words), so moving or sharing the owner between
// threads cannot create a data race by itself.
unsafe impl Send for SimQueue {}
// SAFETY: see above: `&SimQueue` only offers atomic header accesses.
unsafe impl Sync for SimQueue {}

impl SimQueue {
    /// A queue of `slots` elements (a power of two: it holds `slots - 1`) of
    /// `1 << log2_elem_size` bytes, header initialised, both indices 0.
    pub fn new(log2_elem_size: u32, slots: u32) -> io::Result<Self> {
        const OP: &str = "simulate rxe queue";
        if !(3..=MAX_LOG2_ELEM_SIZE).contains(&log2_elem_size) {
            return Err(Error::invalid(
                OP,
                format!("log2_elem_size {log2_elem_size} outside 3..={MAX_LOG2_ELEM_SIZE}"),
            )
            .into());
        }
        if !slots.is_power_of_two() {
            return Err(Error::invalid(OP, format!("{slots} slots is not a power of two")).into());
        }
        let len = (slots as usize)
            .checked_mul(1usize << log2_elem_size)
            .and_then(|d| d.checked_add(QUEUE_DATA_OFFSET))
            .and_then(|n| n.checked_next_multiple_of(PAGE))
            .ok_or_else(|| Error::invalid(OP, "queue size overflows"))?;
        let layout = Layout::from_size_align(len, PAGE)
            .map_err(|e| Error::invalid(OP, format!("layout of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (at least the header).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        let q = Self {
            ptr,
            layout,
            log2_elem_size,
            index_mask: slots - 1,
        };
        q.set_header_word(QUEUE_LOG2_ELEM_SIZE_OFFSET, log2_elem_size);
        q.set_header_word(QUEUE_INDEX_MASK_OFFSET, slots - 1);
        Ok(q)
    }

    /// Start of the buffer.
    pub fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Length of the buffer (page multiple, as `mminfo.size`).
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Never true: the buffer holds at least the header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// A validated user-side view of this buffer.
    ///
    /// # Safety
    ///
    /// The view (and everything built from it) must not be used after `self` is dropped, and
    /// at most one user-side view of the buffer may be used for posting/polling at a time.
    /// While it is used, the other side is only the kernel's, playing its part of the ring
    /// protocol for `kind`: [`SimKernel::consume`] for a send, receive or shared receive
    /// queue, [`SimKernel::produce`] for a completion queue (the other call would write the
    /// index or the elements the view writes, racing it), and [`SimQueue::set_header_word`]
    /// is not called (it rewrites indices behind both sides).
    pub unsafe fn view(&self, kind: QueueKind) -> io::Result<RxeQueue> {
        // SAFETY: the allocation is live, readable and writable for `len()` bytes and laid out
        // as an rxe queue; the caller keeps it alive, the user side single, and the kernel
        // side to its part of the protocol, which is what `RxeQueue::new` asks.
        unsafe { RxeQueue::new(self.ptr, self.len(), kind) }
    }

    /// Overwrites one 32-bit header word (to build broken headers in tests). An atomic store:
    /// safe by itself; a view in use forbids it ([`SimQueue::view`]).
    pub fn set_header_word(&self, offset: usize, value: u32) {
        word(self.ptr, offset).store(value, Ordering::SeqCst);
    }

    /// The producer index as stored.
    pub fn producer(&self) -> u32 {
        word(self.ptr, QUEUE_PRODUCER_INDEX_OFFSET).load(Ordering::Acquire)
    }

    /// The consumer index as stored.
    pub fn consumer(&self) -> u32 {
        word(self.ptr, QUEUE_CONSUMER_INDEX_OFFSET).load(Ordering::Acquire)
    }

    /// The kernel's side of this queue. Borrowing `self` mutably makes it the only one.
    pub fn kernel(&mut self) -> SimKernel<'_> {
        SimKernel {
            base: self.ptr,
            log2_elem_size: self.log2_elem_size,
            index_mask: self.index_mask,
            _queue: PhantomData,
        }
    }
}

impl Drop for SimQueue {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout and not freed before.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// One header word of a live `SimQueue`; `offset` is one of the header constants.
fn word<'a>(base: NonNull<u8>, offset: usize) -> &'a AtomicU32 {
    assert!(offset + 4 <= QUEUE_DATA_OFFSET && offset % 4 == 0);
    // SAFETY: callers pass the base of a live SimQueue (page-aligned, at least header-sized),
    // the word is in bounds and aligned, and header words are only accessed atomically.
    unsafe { AtomicU32::from_ptr(base.as_ptr().add(offset).cast::<u32>()) }
}

/// The kernel's end of a [`SimQueue`]: consumes WQEs of a send/receive queue, produces CQEs.
#[derive(Debug)]
pub struct SimKernel<'a> {
    base: NonNull<u8>,
    log2_elem_size: u32,
    index_mask: u32,
    _queue: PhantomData<&'a mut SimQueue>,
}

// SAFETY: the handle exclusively borrows its SimQueue (which is Send + Sync) and touches
// elements only under the ring protocol, so it may act from another thread.
unsafe impl Send for SimKernel<'_> {}

impl SimKernel<'_> {
    fn slot(&self, index: u32) -> *mut u8 {
        let off = QUEUE_DATA_OFFSET + (((index & self.index_mask) as usize) << self.log2_elem_size);
        // SAFETY: the masked index is below the slot count the allocation was sized for.
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Element size in bytes.
    pub fn elem_size(&self) -> usize {
        1usize << self.log2_elem_size
    }

    /// Number of elements queued between consumer and producer.
    pub fn pending(&self) -> u32 {
        let prod = word(self.base, QUEUE_PRODUCER_INDEX_OFFSET).load(Ordering::Acquire);
        let cons = word(self.base, QUEUE_CONSUMER_INDEX_OFFSET).load(Ordering::Acquire);
        prod.wrapping_sub(cons) & self.index_mask
    }

    /// Work-queue side: takes the oldest element userspace posted, copying its first
    /// `out.len()` bytes (at most one element) into `out`. Returns false when the queue is empty.
    pub fn consume(&mut self, out: &mut [u8]) -> bool {
        // Acquire: userspace's element writes happen-before its release of the producer.
        let prod = word(self.base, QUEUE_PRODUCER_INDEX_OFFSET).load(Ordering::Acquire);
        // Relaxed: the kernel side alone writes the consumer index.
        let cons = word(self.base, QUEUE_CONSUMER_INDEX_OFFSET).load(Ordering::Relaxed);
        if (prod.wrapping_sub(cons) & self.index_mask) == 0 {
            return false;
        }
        let n = out.len().min(self.elem_size());
        // SAFETY: the slot is in bounds for `elem_size` bytes; userspace published it and will
        // not touch it again before we release it below; `out` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(cons), out.as_mut_ptr(), n) };
        // Release: our reads of the slot complete before userspace may reuse it.
        word(self.base, QUEUE_CONSUMER_INDEX_OFFSET)
            .store(cons.wrapping_add(1) & self.index_mask, Ordering::Release);
        true
    }

    /// Completion-queue side: appends one element made of `bytes` (at most one element, the
    /// rest of the slot left as it was). Returns false when the queue is full.
    pub fn produce(&mut self, bytes: &[u8]) -> bool {
        // Relaxed: the kernel side alone writes the producer index.
        let prod = word(self.base, QUEUE_PRODUCER_INDEX_OFFSET).load(Ordering::Relaxed);
        // Acquire: userspace finished reading the slots it released.
        let cons = word(self.base, QUEUE_CONSUMER_INDEX_OFFSET).load(Ordering::Acquire);
        let next = prod.wrapping_add(1) & self.index_mask;
        if next == cons {
            return false;
        }
        let n = bytes.len().min(self.elem_size());
        // SAFETY: the slot is in bounds and free (userspace released it); `bytes` is a
        // distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.slot(prod), n) };
        // Release: the element is written before userspace can see the new producer.
        word(self.base, QUEUE_PRODUCER_INDEX_OFFSET).store(next, Ordering::Release);
        true
    }

    /// [`produce`](Self::produce) of one `ib_uverbs_wc`.
    pub fn produce_cqe(&mut self, wc: &rverbs_uverbs::RawWc) -> bool {
        self.produce(wc.as_bytes())
    }
}
