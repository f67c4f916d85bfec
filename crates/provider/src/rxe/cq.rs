//! Polling an rxe completion queue: the kernel produces `ib_uverbs_wc` elements, we consume.
//!
//! [`RxeCq::poll`] fills a caller's slice; [`RxeCq::iter`] lends an iterator over the
//! completions present when it was made (it reads the producer index once), and publishes the
//! consumer index once, when dropped or [`synced`](RxeCqIter::sync). Neither allocates.

#![allow(unsafe_code)]

use std::io;

use rverbs_uverbs::{Error, RawWc, WorkCompletion};

use super::queue::{QueueKind, RxeQueue};

/// What a poll copies a CQE into: the kernel's `ib_uverbs_wc` as it is ([`RawWc`]), or
/// decoded ([`WorkCompletion`]).
trait FromCqe {
    /// The completion of the CQE at `src`.
    ///
    /// # Safety
    /// `src` is valid for reading 48 bytes and 8-aligned.
    unsafe fn read(src: *const RawWc) -> Self;
}

impl FromCqe for RawWc {
    #[inline(always)]
    unsafe fn read(src: *const RawWc) -> Self {
        // SAFETY: `src` per the trait's contract; any bit pattern is a valid RawWc. Copied
        // out by value (a 48-byte read); no reference into it is formed.
        unsafe { src.read() }
    }
}

impl FromCqe for WorkCompletion {
    /// Copied out (six word loads) and converted by the one conversion,
    /// [`RawWc::to_work_completion`].
    #[inline(always)]
    unsafe fn read(src: *const RawWc) -> Self {
        // SAFETY: `src` per the trait's contract.
        unsafe { RawWc::read(src) }.to_work_completion()
    }
}

/// The user side of one rxe completion queue.
#[derive(Debug)]
pub struct RxeCq {
    queue: RxeQueue,
}

impl RxeCq {
    /// Wraps a validated view of a completion queue mapping.
    pub fn new(queue: RxeQueue) -> io::Result<Self> {
        if queue.kind() != QueueKind::Completion {
            return Err(Error::invalid(
                "rxe CQ",
                format!(
                    "a {} view cannot be polled as a completion queue",
                    queue.kind()
                ),
            )
            .into());
        }
        Ok(Self { queue })
    }

    /// The underlying queue view.
    #[cfg(any(test, feature = "internals"))]
    pub fn queue(&self) -> &RxeQueue {
        &self.queue
    }

    /// Gives the queue view back (e.g. to replace it after a resize).
    #[cfg(any(test, feature = "internals"))]
    pub fn into_queue(self) -> RxeQueue {
        self.queue
    }

    /// Completions waiting to be polled.
    #[cfg(any(test, feature = "internals", rverbs_fuzzing))]
    pub fn pending(&self) -> u32 {
        self.queue.len()
    }

    /// Copies up to `out.len()` completions into `out`, oldest first, and returns how many.
    /// Publishes the consumer index once.
    ///
    /// The empty case comes first and costs two loads and a compare: the caller of a busy
    /// poll loop mostly finds the queue empty.
    #[inline]
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        // Acquire (in load_peer): pairs with the kernel's release store of its producer
        // index, so the CQEs below it are visible to the copies in `take`.
        let tail = self.queue.load_peer();
        let head = self.queue.load_own();
        if head == tail {
            return 0;
        }
        self.take(out, head, tail)
    }

    /// The non-empty part of [`poll`](Self::poll) and [`poll_raw`](Self::poll_raw): copies
    /// the completions in `head..tail` (at most `out.len()`) and publishes the new consumer
    /// index. Not inlined: the empty poll, the common one while waiting, then saves and
    /// restores none of the registers the copy loop needs.
    #[inline(never)]
    fn take<T: FromCqe>(&mut self, out: &mut [T], head: u32, tail: u32) -> usize {
        let avail = (tail.wrapping_sub(head) & self.queue.index_mask()) as usize;
        let n = avail.min(out.len());
        let mut h = head;
        for slot in &mut out[..n] {
            let src = self.queue.slot(h).cast::<RawWc>();
            // SAFETY: the slot is in bounds, 8-aligned and at least 48 bytes (RxeQueue::new
            // checked the element size for a CQ); it lies between our consumer index and the
            // producer index loaded with Acquire, so the kernel finished writing it and will
            // not rewrite it before we publish a consumer index past it. It is copied out by
            // value; no reference into it is formed.
            *slot = unsafe { T::read(src) };
            h = self.queue.next(h);
        }
        if n != 0 {
            // Release (in publish_own): our copies out of the slots happen before the kernel
            // may see them free and reuse them.
            self.queue.publish_own(h);
        }
        n
    }

    /// Copies up to `out.len()` completions into `out` unchanged (rxe's ring holds the
    /// kernel's `ib_uverbs_wc`, which is [`RawWc`]), oldest first, and returns how
    /// many. Publishes the consumer index once. No field is decoded: that is left to the
    /// reader of each `RawWc`.
    #[inline]
    pub fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        // Acquire (in load_peer): pairs with the kernel's release store of its producer
        // index, so the CQEs below it are visible to the copies below.
        let tail = self.queue.load_peer();
        // Relaxed inside load_own: only we write the consumer index.
        let head = self.queue.load_own();
        if head == tail {
            return 0;
        }
        self.take(out, head, tail)
    }

    /// Polls at most one completion.
    #[cfg(any(test, feature = "internals", rverbs_fuzzing))]
    pub fn poll_one(&mut self) -> Option<WorkCompletion> {
        self.iter().next()
    }

    /// An iterator over the completions present now. The consumer index is published when the
    /// iterator is dropped (or [`RxeCqIter::sync`] is called): completions it did not yield
    /// stay in the queue for the next poll. Leaking it (`mem::forget`) only means its
    /// completions are seen again.
    #[inline]
    #[cfg(any(test, feature = "internals", rverbs_fuzzing))]
    pub fn iter(&mut self) -> RxeCqIter<'_> {
        let head = self.queue.load_own();
        let tail = self.queue.load_peer();
        RxeCqIter {
            queue: &self.queue,
            start: head,
            head,
            tail,
        }
    }
}

/// Borrowing iterator over a snapshot of an rxe CQ; see [`RxeCq::iter`].
#[derive(Debug)]
#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
pub struct RxeCqIter<'a> {
    queue: &'a RxeQueue,
    /// Consumer index last published.
    start: u32,
    /// Next element to read.
    head: u32,
    /// Producer index seen at the last sync.
    tail: u32,
}

#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
impl RxeCqIter<'_> {
    /// Publishes the completions consumed so far and looks for new ones.
    #[cfg(any(test, feature = "internals"))]
    pub fn sync(&mut self) {
        self.publish();
        self.tail = self.queue.load_peer();
    }

    #[inline]
    fn publish(&mut self) {
        if self.head != self.start {
            self.queue.publish_own(self.head);
            self.start = self.head;
        }
    }
}

#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
impl Iterator for RxeCqIter<'_> {
    type Item = WorkCompletion;

    #[inline]
    fn next(&mut self) -> Option<WorkCompletion> {
        if self.head == self.tail {
            return None;
        }
        let src = self.queue.slot(self.head).cast::<RawWc>();
        // SAFETY: the slot is in bounds, 8-aligned and at least 48 bytes (RxeQueue::new
        // checked the element size for a CQ); the kernel published it before the producer
        // index we loaded with Acquire, and will not rewrite it before we publish a consumer
        // index past it. It is copied out by value; no reference into it is formed.
        let wc = unsafe { <WorkCompletion as FromCqe>::read(src) };
        self.head = self.queue.next(self.head);
        Some(wc)
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.tail.wrapping_sub(self.head) & self.queue.index_mask()) as usize;
        (n, Some(n))
    }
}

#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
impl ExactSizeIterator for RxeCqIter<'_> {}

#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
impl Drop for RxeCqIter<'_> {
    #[inline]
    fn drop(&mut self) {
        self.publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rxe::sim::SimQueue;
    use rverbs_uverbs::{WcFlags, WcOpcode};

    fn cqe(wr_id: u64) -> RawWc {
        RawWc {
            wr_id,
            byte_len: wr_id as u32,
            ..Default::default()
        }
    }

    #[test]
    fn rxe_cq_converts_imm_and_flags() {
        let raw = RawWc {
            wr_id: 9,
            status: 0,
            opcode: 129,
            byte_len: 4,
            ex: 0x1234_5678u32.to_be(),
            qp_num: 17,
            src_qp: 18,
            wc_flags: 1 | 2,
            pkey_index: 3,
            slid: 4,
            sl: 5,
            dlid_path_bits: 6,
            port_num: 1,
            ..Default::default()
        };
        let wc = raw.to_work_completion();
        assert_eq!(wc.imm(), Some(0x1234_5678));
        assert_eq!(wc.opcode, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!(wc.wc_flags, WcFlags::GRH | WcFlags::WITH_IMM);
        assert_eq!(
            (
                wc.qp_num,
                wc.src_qp,
                wc.pkey_index,
                wc.slid,
                wc.sl,
                wc.dlid_path_bits
            ),
            (17, 18, 3, 4, 5, 6)
        );
        assert_eq!(wc.port_num, 1);

        let inv = RawWc {
            opcode: 128,
            ex: 0xabcd,
            wc_flags: 1 | 4,
            ..Default::default()
        };
        let wc = inv.to_work_completion();
        assert_eq!(wc.invalidated_rkey(), Some(0xabcd));
        assert_eq!(wc.imm(), None);
    }

    #[test]
    fn rxe_cq_iter_publishes_once_on_drop() {
        let mut q = SimQueue::new(6, 8).unwrap();
        // SAFETY: `q` outlives the view.
        let mut cq = RxeCq::new(unsafe { q.view(QueueKind::Completion) }.unwrap()).unwrap();
        {
            let mut k = q.kernel();
            for i in 0..5 {
                assert!(k.produce_cqe(&cqe(i)));
            }
        }
        {
            let mut it = cq.iter();
            assert_eq!(it.len(), 5);
            assert_eq!(it.next().unwrap().wr_id, 0);
            assert_eq!(it.next().unwrap().wr_id, 1);
            // Not yet published.
            assert_eq!(q.consumer(), 0);
        }
        assert_eq!(q.consumer(), 2);
        let mut out = [WorkCompletion::default(); 2];
        assert_eq!(cq.poll(&mut out), 2);
        assert_eq!((out[0].wr_id, out[1].wr_id), (2, 3));
        assert_eq!(cq.pending(), 1);
        assert_eq!(cq.poll_one().unwrap().wr_id, 4);
        assert_eq!(cq.poll(&mut out), 0);
        assert_eq!(q.consumer(), 5);
    }

    #[test]
    fn rxe_cq_iter_sync_sees_new_entries() {
        let mut q = SimQueue::new(6, 4).unwrap();
        // SAFETY: `q` outlives the view.
        let mut cq = RxeCq::new(unsafe { q.view(QueueKind::Completion) }.unwrap()).unwrap();
        let mut k = q.kernel();
        for i in 0..3 {
            assert!(k.produce_cqe(&cqe(i)));
        }
        // Full: 3 of 4 slots.
        assert!(!k.produce_cqe(&cqe(99)));
        let mut it = cq.iter();
        assert_eq!(it.next().unwrap().wr_id, 0);
        assert_eq!(it.next().unwrap().wr_id, 1);
        assert_eq!(it.next().unwrap().wr_id, 2);
        assert!(it.next().is_none());
        // The kernel still sees the queue full until we publish.
        assert!(!k.produce_cqe(&cqe(99)));
        it.sync();
        assert!(k.produce_cqe(&cqe(3)));
        it.sync();
        assert_eq!(it.next().unwrap().wr_id, 3);
        drop(it);
        assert_eq!(k.pending(), 0);
    }

    /// `poll_raw` copies entries unchanged, decodes them lazily to what `poll` gives, stops at
    /// the slots' length, publishes once per call and wraps around the ring.
    #[test]
    fn rxe_cq_poll_raw_batches_and_decodes() {
        let mut q = SimQueue::new(6, 4).unwrap();
        // SAFETY: `q` outlives the view.
        let mut cq = RxeCq::new(unsafe { q.view(QueueKind::Completion) }.unwrap()).unwrap();
        let mut k = q.kernel();
        let mut out = [RawWc::default(); 2];
        assert_eq!(cq.poll_raw(&mut out), 0);
        let mut next = 0u64;
        for round in 0..5 {
            for _ in 0..3 {
                let raw = RawWc {
                    wr_id: next,
                    opcode: 129,
                    byte_len: next as u32,
                    ex: (0x0a0b_0c00 | next as u32).to_be(),
                    wc_flags: 2 | (next as u32 & 1) << 2,
                    qp_num: 7,
                    ..Default::default()
                };
                assert!(k.produce_cqe(&raw), "round {round}");
                next += 1;
            }
            let base = next - 3;
            assert_eq!(cq.poll_raw(&mut out), 2);
            assert_eq!(k.pending(), 1, "published once, for two");
            assert_eq!(cq.poll_raw(&mut out[..1]), 1);
            assert_eq!(out[0].wr_id(), base + 2);
            let raw = RawWc {
                wr_id: base + 2,
                opcode: 129,
                byte_len: (base + 2) as u32,
                ex: (0x0a0b_0c00 | (base + 2) as u32).to_be(),
                wc_flags: 2 | ((base + 2) as u32 & 1) << 2,
                qp_num: 7,
                ..Default::default()
            };
            assert_eq!(out[0].to_work_completion(), raw.to_work_completion());
            assert_eq!(out[0].imm(), Some(0x0a0b_0c00 | (base + 2) as u32));
            assert!(out[0].is_success());
            assert_eq!(k.pending(), 0);
        }
    }

    /// The simulated ring behind the core's seam, as the rxe driver puts it.
    #[derive(Debug)]
    struct Ops(RxeCq);
    impl rverbs_uverbs::driver::CqOps for Ops {
        fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
            self.0.poll(out)
        }
        fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
            self.0.poll_raw(out)
        }
    }

    /// The same ring through the seam's default `poll_raw` (poll, then re-encode).
    #[derive(Debug)]
    struct DefaultOps(RxeCq);
    impl rverbs_uverbs::driver::CqOps for DefaultOps {
        fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
            self.0.poll(out)
        }
    }

    fn varied_cqe(i: u64) -> RawWc {
        RawWc {
            wr_id: i,
            status: (i % 3 == 2) as u32 * 5,
            opcode: if i % 2 == 0 { 0 } else { 129 },
            vendor_err: i as u32 * 3,
            byte_len: i as u32 * 7,
            ex: (0x5000_0000 | i as u32).to_be(),
            qp_num: 0x11,
            src_qp: 0x22,
            wc_flags: (i as u32) & 0xf,
            pkey_index: i as u16,
            slid: 3,
            sl: 1,
            dlid_path_bits: 2,
            port_num: 1,
            reserved: 0,
        }
    }

    /// `CqView` over the simulated ring: batches of the slots' length, one consumer-index
    /// publication per batch, lazily decoded fields equal to `poll`'s conversion, iteration
    /// across batches and the ring's wrap, for the rxe `poll_raw` and the seam's default.
    #[test]
    fn rxe_cq_view_batches_publish_once_and_decode() {
        use rverbs_uverbs::cq::CqView;
        for native in [true, false] {
            let mut q = SimQueue::new(6, 8).unwrap();
            // SAFETY: `q` outlives the view.
            let cq = RxeCq::new(unsafe { q.view(QueueKind::Completion) }.unwrap()).unwrap();
            let a = Ops(cq);
            let mut ops: Box<dyn rverbs_uverbs::driver::CqOps> = if native {
                Box::new(a)
            } else {
                Box::new(DefaultOps(a.0))
            };
            let mut k = q.kernel();
            let mut slots = [RawWc::default(); 3];
            let mut next = 0u64;
            for round in 0..4 {
                for _ in 0..7 {
                    assert!(k.produce_cqe(&varied_cqe(next)), "round {round}");
                    next += 1;
                }
                let base = next - 7;
                let mut view = CqView::from_ops(&mut *ops, &mut slots);
                assert_eq!(view.len(), 3);
                // The first batch is published when copied, before anything is read.
                assert_eq!(k.pending(), 4);
                for (j, w) in view.completions().iter().enumerate() {
                    let want = varied_cqe(base + j as u64).to_work_completion();
                    assert_eq!(w.wr_id(), want.wr_id);
                    assert_eq!(w.status(), want.status);
                    assert_eq!(w.wc_flags(), want.wc_flags);
                    assert_eq!(w.imm(), want.imm());
                    assert_eq!(w.to_work_completion(), want, "native {native}");
                }
                // Iterating goes on into the next batches (3, then 1) and stops.
                let ids: Vec<u64> = view.by_ref().map(|w| w.wr_id()).collect();
                assert_eq!(ids, (base..next).collect::<Vec<_>>());
                assert_eq!(k.pending(), 0);
                assert_eq!(view.next_batch(), 0);
                assert!(view.is_empty());
            }
            // An empty ring gives an empty view, and a forgotten view loses nothing: its
            // batch was published when copied.
            assert!(k.produce_cqe(&varied_cqe(100)));
            let view = CqView::from_ops(&mut *ops, &mut slots);
            assert_eq!(view.len(), 1);
            std::mem::forget(view);
            assert_eq!(k.pending(), 0);
            let view = CqView::from_ops(&mut *ops, &mut slots);
            assert!(view.is_empty());
        }
    }

    #[test]
    fn rxe_cq_rejects_work_queue_view() {
        let q = SimQueue::new(8, 4).unwrap();
        // SAFETY: `q` outlives the view.
        let v = unsafe { q.view(QueueKind::Send) }.unwrap();
        let e = RxeCq::new(v).unwrap_err();
        assert!(e.to_string().contains("send queue view cannot be polled"));
    }
}
