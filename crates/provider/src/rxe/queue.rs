//! A view over one mapped rxe queue: the 384-byte `rxe_queue_buf` header followed by
//! `index_mask + 1` elements of `1 << log2_elem_size` bytes.
//!
//! # The protocol (Linux 6.1, `drivers/infiniband/sw/rxe/rxe_queue.h`)
//!
//! - `producer_index` lives at byte 128, `consumer_index` at byte 256, the elements from
//!   byte 384; element `i` is at `384 + ((i & index_mask) << log2_elem_size)`.
//! - Both indices are always stored already masked (`0..=index_mask`). The queue is empty when
//!   `producer == consumer` and full when `(producer + 1) & index_mask == consumer`, so it holds
//!   at most `index_mask` elements.
//! - Send queues, receive queues and SRQs are written by userspace and read by the kernel
//!   (`QUEUE_TYPE_FROM_CLIENT`): **we own the producer index**, the kernel the consumer index.
//!   Completion queues are written by the kernel (`QUEUE_TYPE_TO_CLIENT`): the kernel owns the
//!   producer index, **we own the consumer index**.
//! - The kernel loads the index we own with `smp_load_acquire` and publishes its own with
//!   `smp_store_release`. We mirror that: our own index is loaded `Relaxed` (nobody else
//!   writes it), the peer's index `Acquire`, our new index is stored `Release`.
//!
//! The memory is shared with the kernel, so no `&`/`&mut` to it is ever formed except the
//! `&AtomicU32` to the two index words; elements are copied in and out through raw pointers.
//! This type does not own the mapping: whoever mapped it unmaps it after every view is gone.

#![allow(unsafe_code)]

use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use rverbs_uverbs::Error;

use super::abi::{
    rxe_recv_wqe, rxe_send_wqe, QUEUE_CONSUMER_INDEX_OFFSET, QUEUE_DATA_OFFSET,
    QUEUE_INDEX_MASK_OFFSET, QUEUE_LOG2_ELEM_SIZE_OFFSET, QUEUE_PRODUCER_INDEX_OFFSET,
};

/// Which queue a mapping holds; decides the element type and which index is ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// A QP's send queue: `rxe_send_wqe` elements; we produce.
    Send,
    /// A QP's receive queue: `rxe_recv_wqe` elements; we produce.
    Recv,
    /// A shared receive queue: `rxe_recv_wqe` elements; we produce.
    Srq,
    /// A completion queue: `ib_uverbs_wc` elements; the kernel produces, we consume.
    Completion,
}

impl QueueKind {
    /// Human-readable name used in errors.
    pub const fn name(self) -> &'static str {
        match self {
            QueueKind::Send => "send queue",
            QueueKind::Recv => "receive queue",
            QueueKind::Srq => "shared receive queue",
            QueueKind::Completion => "completion queue",
        }
    }

    /// The smallest element that can hold this queue's fixed element header.
    pub const fn min_elem_size(self) -> usize {
        match self {
            QueueKind::Send => core::mem::size_of::<rxe_send_wqe>(),
            QueueKind::Recv | QueueKind::Srq => core::mem::size_of::<rxe_recv_wqe>(),
            QueueKind::Completion => core::mem::size_of::<rverbs_uverbs::RawWc>(),
        }
    }

    /// True when userspace owns the producer index (work queues), false for a CQ.
    pub const fn user_produces(self) -> bool {
        !matches!(self, QueueKind::Completion)
    }
}

impl fmt::Display for QueueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The largest element size accepted from a header (`1 << 20`); rxe's largest elements (send
/// WQEs with many SGEs or much inline data) are a few KiB.
pub const MAX_LOG2_ELEM_SIZE: u32 = 20;

/// A validated view over one mapped rxe queue. See the [module docs](self) for the protocol.
pub struct RxeQueue {
    base: NonNull<u8>,
    map_len: usize,
    log2_elem_size: u32,
    index_mask: u32,
    kind: QueueKind,
    /// Header offset of our index and of the kernel's, fixed by `kind` (computed once: the
    /// post and poll paths read them on every call).
    own_off: usize,
    peer_off: usize,
}

// SAFETY: the view only holds a pointer to memory that is valid for its whole life (the
// contract of `RxeQueue::new`); moving it to another thread moves the right to be the single
// userspace writer of our index with it. It is not `Sync`: two threads posting through `&self`
// would race on our index, and every mutating method takes `&mut self` in the users.
unsafe impl Send for RxeQueue {}

impl fmt::Debug for RxeQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RxeQueue")
            .field("kind", &self.kind)
            .field("base", &self.base)
            .field("map_len", &self.map_len)
            .field("elem_size", &self.elem_size())
            .field("slots", &self.slots())
            .finish()
    }
}

impl RxeQueue {
    /// Validates the header of the queue mapped at `base` (`len` bytes) and returns a view.
    ///
    /// Checks: the mapping holds the header; `base` is 8-aligned; `log2_elem_size` is at least 3
    /// and at most [`MAX_LOG2_ELEM_SIZE`] and the element is large enough for `kind`;
    /// `index_mask + 1` is a power of two; header plus all elements fit in `len`; both indices
    /// are within `index_mask`.
    ///
    /// # Safety
    ///
    /// `base..base + len` must stay mapped readable and writable for as long as the returned
    /// view (and anything built from it) is used, and hold an rxe queue buffer of `kind`: mapped
    /// from the kernel's `mminfo`, or laid out the same way for tests. Nothing else in this
    /// process may write the index this side owns (producer for work queues, consumer for a
    /// CQ) or the elements this side writes while the view is in use.
    pub unsafe fn new(base: NonNull<u8>, len: usize, kind: QueueKind) -> io::Result<Self> {
        let op = match kind {
            QueueKind::Send => "map rxe send queue",
            QueueKind::Recv => "map rxe receive queue",
            QueueKind::Srq => "map rxe shared receive queue",
            QueueKind::Completion => "map rxe completion queue",
        };
        if len < QUEUE_DATA_OFFSET {
            return Err(Error::protocol(
                op,
                format!("mapping of {len} bytes is smaller than the {QUEUE_DATA_OFFSET}-byte queue header"),
            )
            .into());
        }
        if base.as_ptr() as usize % 8 != 0 {
            return Err(Error::invalid(
                op,
                format!("queue base {:p} is not 8-byte aligned", base.as_ptr()),
            )
            .into());
        }
        // SAFETY: `len` covers the header (checked above) and the caller guarantees the mapping
        // is valid; the header words are only read atomically.
        let word = |off: usize| unsafe { atomic_at(base, off) }.load(Ordering::Relaxed);
        let log2_elem_size = word(QUEUE_LOG2_ELEM_SIZE_OFFSET);
        let index_mask = word(QUEUE_INDEX_MASK_OFFSET);
        let producer = word(QUEUE_PRODUCER_INDEX_OFFSET);
        let consumer = word(QUEUE_CONSUMER_INDEX_OFFSET);

        if !(3..=MAX_LOG2_ELEM_SIZE).contains(&log2_elem_size) {
            return Err(Error::protocol(
                op,
                format!(
                    "header log2_elem_size {log2_elem_size} is outside 3..={MAX_LOG2_ELEM_SIZE}"
                ),
            )
            .into());
        }
        let elem_size = 1usize << log2_elem_size;
        if elem_size < kind.min_elem_size() {
            return Err(Error::protocol(
                op,
                format!(
                    "element size {elem_size} (log2 {log2_elem_size}) is smaller than the \
                     {}-byte {kind} element",
                    kind.min_elem_size()
                ),
            )
            .into());
        }
        let slots = u64::from(index_mask) + 1;
        if !slots.is_power_of_two() {
            return Err(Error::protocol(
                op,
                format!("header index_mask {index_mask:#x} is not a power of two minus one"),
            )
            .into());
        }
        let needed = usize::try_from(slots)
            .ok()
            .and_then(|s| s.checked_mul(elem_size))
            .and_then(|d| d.checked_add(QUEUE_DATA_OFFSET));
        match needed {
            Some(n) if n <= len => {}
            _ => {
                return Err(Error::protocol(
                    op,
                    format!(
                        "{slots} elements of {elem_size} bytes after the {QUEUE_DATA_OFFSET}-byte \
                         header do not fit in the {len}-byte mapping"
                    ),
                )
                .into())
            }
        }
        if producer > index_mask || consumer > index_mask {
            return Err(Error::protocol(
                op,
                format!(
                    "producer index {producer} / consumer index {consumer} exceed index_mask \
                     {index_mask:#x}"
                ),
            )
            .into());
        }
        let (own_off, peer_off) = if kind.user_produces() {
            (QUEUE_PRODUCER_INDEX_OFFSET, QUEUE_CONSUMER_INDEX_OFFSET)
        } else {
            (QUEUE_CONSUMER_INDEX_OFFSET, QUEUE_PRODUCER_INDEX_OFFSET)
        };
        Ok(Self {
            base,
            map_len: len,
            log2_elem_size,
            index_mask,
            kind,
            own_off,
            peer_off,
        })
    }

    /// What this queue holds.
    pub fn kind(&self) -> QueueKind {
        self.kind
    }

    /// Bytes per element (`1 << log2_elem_size`).
    pub fn elem_size(&self) -> usize {
        1usize << self.log2_elem_size
    }

    /// `log2_elem_size` from the header.
    #[cfg(any(test, feature = "internals"))]
    pub fn log2_elem_size(&self) -> u32 {
        self.log2_elem_size
    }

    /// `index_mask` from the header.
    #[inline]
    pub fn index_mask(&self) -> u32 {
        self.index_mask
    }

    /// Number of element slots (`index_mask + 1`).
    pub fn slots(&self) -> u64 {
        u64::from(self.index_mask) + 1
    }

    /// How many elements the queue can hold at once (`index_mask`: one slot stays empty).
    pub fn capacity(&self) -> u32 {
        self.index_mask
    }

    /// The start of the mapping.
    #[cfg(any(test, feature = "internals"))]
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// The length of the mapping given to [`RxeQueue::new`].
    #[cfg(any(test, feature = "internals"))]
    pub fn mapping_len(&self) -> usize {
        self.map_len
    }

    /// Elements currently queued (written by the producer, not yet released by the consumer).
    #[cfg(any(test, feature = "internals", rverbs_fuzzing))]
    pub fn len(&self) -> u32 {
        let (prod, cons) = if self.kind.user_produces() {
            (self.load_own(), self.load_peer())
        } else {
            (self.load_peer(), self.load_own())
        };
        prod.wrapping_sub(cons) & self.index_mask
    }

    /// True when no element is queued.
    #[cfg(any(test, feature = "internals"))]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Our own index (producer of a work queue, consumer of a CQ).
    #[inline]
    pub(crate) fn load_own(&self) -> u32 {
        // SAFETY: the index word is inside the validated header.
        let a = unsafe { atomic_at(self.base, self.own_off) };
        // Relaxed: only this side writes this index, and all our writes to it came from this
        // thread (or were handed over with the view, which synchronizes); no other memory is
        // published through it towards us.
        a.load(Ordering::Relaxed) & self.index_mask
    }

    /// The kernel's index (consumer of a work queue, producer of a CQ).
    #[inline]
    pub(crate) fn load_peer(&self) -> u32 {
        // SAFETY: the index word is inside the validated header.
        let a = unsafe { atomic_at(self.base, self.peer_off) };
        // Acquire: pairs with the kernel's smp_store_release of this index. For a CQ it makes
        // the CQEs the kernel wrote before moving the producer visible to our reads; for a work
        // queue it orders the kernel's last reads/writes of the slots it released before our
        // overwriting them.
        a.load(Ordering::Acquire) & self.index_mask
    }

    /// Stores our new index, publishing everything written or read in the slots before it.
    #[inline]
    pub(crate) fn publish_own(&self, index: u32) {
        debug_assert!(index <= self.index_mask);
        // SAFETY: the index word is inside the validated header.
        let a = unsafe { atomic_at(self.base, self.own_off) };
        // Release: pairs with the kernel's smp_load_acquire of this index. For a work queue the
        // kernel must see the WQE bytes we wrote before the producer that covers them; for a
        // CQ our copies out of the released slots must be finished before the kernel reuses
        // them.
        a.store(index & self.index_mask, Ordering::Release);
    }

    /// `(index + 1) & index_mask`.
    #[inline]
    pub(crate) fn next(&self, index: u32) -> u32 {
        index.wrapping_add(1) & self.index_mask
    }

    /// The index after `prod` when the slot at `prod` is free, else `None` (the ring is full).
    /// `cons` is the caller's cached copy of the kernel's consumer index: it is reloaded
    /// (Acquire, in `load_peer`) only when the cached one says full, so a list post loads the
    /// kernel's index about once.
    #[inline]
    pub(crate) fn next_free(&self, prod: u32, cons: &mut u32) -> Option<u32> {
        let next = self.next(prod);
        if next == *cons {
            *cons = self.load_peer();
            if next == *cons {
                return None;
            }
        }
        Some(next)
    }

    /// Start of element `index` (masked). Always inside the mapping and 8-byte aligned.
    #[inline]
    pub(crate) fn slot(&self, index: u32) -> *mut u8 {
        let off = QUEUE_DATA_OFFSET + (((index & self.index_mask) as usize) << self.log2_elem_size);
        // SAFETY: `new` checked that header + slots * elem_size fits in the mapping, and the
        // masked index is below `slots`.
        unsafe { self.base.as_ptr().add(off) }
    }
}

/// The index word at `off` in the header.
///
/// # Safety
///
/// `base + off .. + 4` must be inside a live mapping, 4-aligned, and accessed only atomically.
#[inline]
unsafe fn atomic_at<'a>(base: NonNull<u8>, off: usize) -> &'a AtomicU32 {
    // SAFETY: per the function contract the word is in bounds and aligned (base is 8-aligned,
    // offsets are multiples of 4); AtomicU32 has the layout of u32 and is the only way this
    // memory is touched from Rust, so a shared reference to it is sound even while the kernel
    // writes the word.
    unsafe { AtomicU32::from_ptr(base.as_ptr().add(off).cast::<u32>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rxe::sim::SimQueue;

    fn err_text(e: io::Error) -> String {
        e.to_string()
    }

    #[test]
    fn rxe_header_validation() {
        let q = SimQueue::new(6, 8).unwrap();
        // SAFETY: the simulated queue outlives the views made here.
        let ok = unsafe { RxeQueue::new(q.base(), q.len(), QueueKind::Completion) }.unwrap();
        assert_eq!(ok.elem_size(), 64);
        assert_eq!(ok.slots(), 8);
        assert_eq!(ok.capacity(), 7);
        assert!(ok.is_empty());

        // Element too small for a send WQE.
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(q.base(), q.len(), QueueKind::Send) }.unwrap_err();
        assert!(err_text(e).contains("smaller than the 208-byte send queue element"));

        // Exactly header + elements is enough; one byte less is not.
        let exact = QUEUE_DATA_OFFSET + 8 * 64;
        // SAFETY: as above: the views never outlive `q`.
        unsafe { RxeQueue::new(q.base(), exact, QueueKind::Completion) }.unwrap();
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(q.base(), exact - 1, QueueKind::Completion) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(err_text(e).contains("do not fit"));

        // Shorter than the header.
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(q.base(), 100, QueueKind::Completion) }.unwrap_err();
        assert!(err_text(e).contains("smaller than the 384-byte queue header"));

        // Misaligned base.
        let off = NonNull::new(q.base().as_ptr().wrapping_add(4)).unwrap();
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(off, q.len() - 4, QueueKind::Completion) }.unwrap_err();
        assert!(err_text(e).contains("not 8-byte aligned"));

        q.set_header_word(QUEUE_INDEX_MASK_OFFSET, 6);
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(q.base(), q.len(), QueueKind::Completion) }.unwrap_err();
        assert!(err_text(e).contains("not a power of two minus one"));
        q.set_header_word(QUEUE_INDEX_MASK_OFFSET, 7);

        q.set_header_word(QUEUE_LOG2_ELEM_SIZE_OFFSET, 40);
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(q.base(), q.len(), QueueKind::Completion) }.unwrap_err();
        assert!(err_text(e).contains("log2_elem_size 40"));
        q.set_header_word(QUEUE_LOG2_ELEM_SIZE_OFFSET, 6);

        q.set_header_word(QUEUE_PRODUCER_INDEX_OFFSET, 8);
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(q.base(), q.len(), QueueKind::Completion) }.unwrap_err();
        assert!(err_text(e).contains("exceed index_mask"));
        q.set_header_word(QUEUE_PRODUCER_INDEX_OFFSET, 0);

        // A huge mask must not overflow the size computation.
        q.set_header_word(QUEUE_INDEX_MASK_OFFSET, u32::MAX);
        // SAFETY: as above: the views never outlive `q`.
        let e = unsafe { RxeQueue::new(q.base(), q.len(), QueueKind::Completion) }.unwrap_err();
        assert!(err_text(e).contains("do not fit"));
    }

    #[test]
    fn rxe_slots_wrap_and_stay_in_bounds() {
        let q = SimQueue::new(6, 4).unwrap();
        // SAFETY: the simulated queue outlives the view.
        let v = unsafe { RxeQueue::new(q.base(), q.len(), QueueKind::Recv) }.unwrap();
        let data = q.base().as_ptr().wrapping_add(QUEUE_DATA_OFFSET);
        assert_eq!(v.slot(0), data);
        assert_eq!(v.slot(3), data.wrapping_add(3 * 64));
        assert_eq!(v.slot(4), data);
        assert_eq!(v.slot(u32::MAX), data.wrapping_add(3 * 64));
        assert_eq!(v.next(3), 0);
        v.publish_own(3);
        assert_eq!(v.load_own(), 3);
        assert_eq!(q.producer(), 3);
        assert_eq!(v.len(), 3);
    }
}
