//! The ledger's release points, with stand-in regions that record when they are given back.

use super::*;
use crate::wr::{SendOp, Sge};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

impl<R: Holdable> Watch<R> {
    /// [`settle`](Self::settle), dropping what it released at once.
    fn settle_now<I>(&self, wcs: I, drained: Option<u64>)
    where
        I: ExactSizeIterator + Clone,
        I::Item: Into<Seen>,
    {
        self.settle(wcs, drained, &mut Freed::default());
    }
}

/// A region that records its drop (the moment rverbs would deregister and free it).
#[derive(Debug)]
struct Fake {
    lkey: u32,
    owned: bool,
    freed: Arc<AtomicBool>,
}

impl Holdable for Fake {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn deferrable(&self) -> bool {
        self.owned
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.freed.store(true, Ordering::SeqCst);
    }
}

/// A registered region (the `Mr`'s `Arc`) and its "freed" flag.
fn region(reg: &Registry<Fake>, lkey: u32, owned: bool) -> (Arc<Fake>, Arc<AtomicBool>) {
    let freed = Arc::new(AtomicBool::new(false));
    let r = Arc::new(Fake {
        lkey,
        owned,
        freed: freed.clone(),
    });
    reg.insert(&r);
    (r, freed)
}

fn sge(lkey: u32) -> Sge {
    Sge {
        addr: 0x1000,
        length: 64,
        lkey,
    }
}

fn read(sge: &[Sge], signaled: bool) -> SendWr<'_> {
    SendWr {
        wr_id: 0,
        op: SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 1,
        },
        sge,
        flags: if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        },
        ud: None,
    }
}

/// `n` receives with no SGEs (raw ones: they hold nothing, but count), `wr_id` 0.
fn raw(n: usize) -> Vec<RecvWr<'static>> {
    vec![RecvWr::new(0, &[]); n]
}

fn freed(f: &AtomicBool) -> bool {
    f.load(Ordering::SeqCst)
}

#[test]
fn a_dropped_receive_buffer_lives_until_its_completion() {
    let reg = Registry::default();
    let mut rq = RecvLedger::<Fake>::default();
    let (a, fa) = region(&reg, 1, true);
    let (b, fb) = region(&reg, 2, true);
    let (sa, sb) = ([sge(1)], [sge(2)]);
    let wrs = [RecvWr::new(0, &sa[..]), RecvWr::new(1, &sb[..])];
    assert_eq!(rq.hold(&reg, &wrs), None);
    rq.posted(&raw(2));
    drop((a, b));
    assert!(
        !freed(&fa) && !freed(&fb),
        "held while both receives are posted"
    );
    rq.completed(0, &mut Freed::default());
    assert!(freed(&fa), "the first completion is the first receive's");
    assert!(!freed(&fb), "the second receive is still outstanding");
    rq.completed(0, &mut Freed::default());
    assert!(freed(&fb));
    assert_eq!(rq.holding(), 0);
}

#[test]
fn one_region_for_many_receives_is_held_once_until_the_last() {
    let reg = Registry::default();
    let mut rq = RecvLedger::<Fake>::default();
    let (a, fa) = region(&reg, 7, true);
    let s = [sge(7)];
    for i in 0..3 {
        assert_eq!(rq.hold(&reg, &[RecvWr::new(i, &s[..])]), None);
        rq.posted(&raw(1));
    }
    assert_eq!(rq.holding(), 1);
    drop(a);
    rq.completed(0, &mut Freed::default());
    rq.completed(0, &mut Freed::default());
    assert!(!freed(&fa), "the third receive may still write it");
    rq.completed(0, &mut Freed::default());
    assert!(freed(&fa));
}

#[test]
fn regions_named_in_runs_are_held_up_to_their_last_receive() {
    // A list naming A, A, B, A (the same key in a row takes the shortcut of `hold`), then a
    // list naming A: completions release B after the third receive and A only after the
    // fifth, however the marks of the entries were raised.
    let reg = Registry::default();
    let mut rq = RecvLedger::<Fake>::default();
    let (a, fa) = region(&reg, 1, true);
    let (b, fb) = region(&reg, 2, true);
    let (sa, sb) = ([sge(1)], [sge(2)]);
    let wrs = [
        RecvWr::new(0, &sa[..]),
        RecvWr::new(1, &sa[..]),
        RecvWr::new(2, &sb[..]),
        RecvWr::new(3, &sa[..]),
    ];
    assert_eq!(rq.hold(&reg, &wrs), None);
    rq.posted(&raw(4));
    assert_eq!(rq.hold(&reg, &[RecvWr::new(4, &sa[..])]), None);
    rq.posted(&raw(1));
    assert_eq!(rq.holding(), 2);
    drop((a, b));
    rq.completed(0, &mut Freed::default());
    rq.completed(0, &mut Freed::default());
    assert!(!freed(&fa) && !freed(&fb));
    rq.completed(0, &mut Freed::default());
    assert!(freed(&fb), "B's last receive was the third");
    rq.completed(0, &mut Freed::default());
    assert!(!freed(&fa), "A's last receive is the fifth");
    rq.completed(0, &mut Freed::default());
    assert!(freed(&fa));
    assert_eq!(rq.holding(), 0);
}

#[test]
fn borrowed_memory_is_refused_and_nothing_after_it_is_held() {
    let reg = Registry::default();
    let mut rq = RecvLedger::<Fake>::default();
    let (_a, _) = region(&reg, 1, true);
    let (_b, _) = region(&reg, 2, false);
    let (sa, sb) = ([sge(1)], [sge(2)]);
    let wrs = [RecvWr::new(0, &sa[..]), RecvWr::new(1, &sb[..])];
    assert_eq!(rq.hold(&reg, &wrs), Some((1, 2)));
    let mut sq = SendLedger::<Fake>::default();
    let wrs = [read(&sa, true), read(&sb, true)];
    assert_eq!(sq.hold(&reg, &wrs), Some((1, 2)));
}

#[test]
fn unknown_keys_hold_nothing() {
    let reg = Registry::<Fake>::default();
    let mut rq = RecvLedger::<Fake>::default();
    let s = [sge(99)];
    assert_eq!(rq.hold(&reg, &[RecvWr::new(0, &s[..])]), None);
    assert_eq!(rq.holding(), 0);
}

#[test]
fn raw_receives_keep_the_count_right() {
    // A raw receive posted before a safe one: the first completion is the raw one's.
    let reg = Registry::default();
    let mut rq = RecvLedger::<Fake>::default();
    rq.posted(&raw(1));
    let (a, fa) = region(&reg, 3, true);
    let s = [sge(3)];
    assert_eq!(rq.hold(&reg, &[RecvWr::new(0, &s[..])]), None);
    rq.posted(&raw(1));
    drop(a);
    rq.completed(0, &mut Freed::default());
    assert!(!freed(&fa));
    rq.completed(0, &mut Freed::default());
    assert!(freed(&fa));
}

#[test]
fn a_refused_tail_is_held_until_later_completions_only() {
    // Held as if posted, but the post stopped short: the region waits for a completion
    // numbered past it (conservative), never less.
    let reg = Registry::default();
    let mut rq = RecvLedger::<Fake>::default();
    let (a, fa) = region(&reg, 4, true);
    let s = [sge(4)];
    let wrs = [RecvWr::new(0, &s[..]), RecvWr::new(1, &s[..])];
    assert_eq!(rq.hold(&reg, &wrs), None);
    rq.posted(&raw(1)); // the provider took only the first
    drop(a);
    rq.completed(0, &mut Freed::default());
    assert!(!freed(&fa));
    rq.posted(&raw(1));
    rq.completed(0, &mut Freed::default());
    assert!(freed(&fa));
}

#[test]
fn srq_receives_are_released_by_their_own_completion() {
    let reg = Registry::default();
    let mut srq = RecvLedger::<Fake>::shared();
    let (a, fa) = region(&reg, 5, true);
    let (b, fb) = region(&reg, 6, true);
    let (sa, sb) = ([sge(5)], [sge(6)]);
    let wa = [RecvWr::new(10, &sa[..])];
    assert_eq!(srq.hold(&reg, &wa), None);
    srq.posted(&wa);
    let wb = [RecvWr::new(11, &sb[..])];
    assert_eq!(srq.hold(&reg, &wb), None);
    srq.posted(&wb);
    drop((a, b));
    // Another QP took the second receive first: its completion names it.
    srq.completed(11, &mut Freed::default());
    assert!(freed(&fb), "the receive of wr_id 11 is over");
    assert!(!freed(&fa), "the receive of wr_id 10 may still be written");
    srq.completed(10, &mut Freed::default());
    assert!(freed(&fa));
    assert_eq!(srq.holding(), 0);
}

#[test]
fn a_long_lived_srq_does_not_grow() {
    // Kept stocked, never drained: each buffer goes with its own completion.
    let reg = Registry::default();
    let mut srq = RecvLedger::<Fake>::shared();
    let mut live = std::collections::VecDeque::new();
    for i in 0..64u32 {
        let (r, f) = region(&reg, 100 + i, true);
        let s = [sge(100 + i)];
        let w = [RecvWr::new(u64::from(i), &s[..])];
        assert_eq!(srq.hold(&reg, &w), None);
        srq.posted(&w);
        drop(r);
        live.push_back((u64::from(i), f));
        if live.len() > 4 {
            let (id, f) = live.pop_front().unwrap();
            srq.completed(id, &mut Freed::default());
            assert!(freed(&f), "receive {id} completed but its buffer is held");
        }
        assert!(srq.holding() <= 5, "{} regions held", srq.holding());
    }
}

#[test]
fn an_srq_wr_id_posted_twice_waits_for_both() {
    // The same wr_id on two outstanding receives (a raw one and a safe one): the first
    // completion naming it may be either's, so the safe one's buffer waits for the second.
    let reg = Registry::default();
    let mut srq = RecvLedger::<Fake>::shared();
    srq.posted(&[RecvWr::<Sge>::new(7, &[])]);
    let (a, fa) = region(&reg, 5, true);
    let sa = [sge(5)];
    let w = [RecvWr::new(7, &sa[..])];
    assert_eq!(srq.hold(&reg, &w), None);
    srq.posted(&w);
    drop(a);
    srq.completed(7, &mut Freed::default());
    assert!(!freed(&fa));
    srq.completed(7, &mut Freed::default());
    assert!(freed(&fa));
}

#[test]
fn an_srq_receive_that_did_not_go_to_the_queue_holds_nothing() {
    let reg = Registry::default();
    let mut srq = RecvLedger::<Fake>::shared();
    let (a, fa) = region(&reg, 5, true);
    let (b, fb) = region(&reg, 6, true);
    let (sa, sb) = ([sge(5)], [sge(6)]);
    let w = [RecvWr::new(1, &sa[..]), RecvWr::new(2, &sb[..])];
    assert_eq!(srq.hold(&reg, &w), None);
    srq.posted(&w[..1]); // the provider took only the first
    drop((a, b));
    // Left aside for the caller, who lets go of it after the ledger's lock (`post`).
    assert!(!freed(&fb));
    drop(std::mem::take(&mut srq.pending));
    assert!(freed(&fb), "never posted, so never written");
    assert!(!freed(&fa));
    srq.completed(1, &mut Freed::default());
    assert!(freed(&fa));
}

#[test]
fn an_unsignaled_read_is_released_by_the_next_signaled_one() {
    let reg = Registry::default();
    let mut sq = SendLedger::<Fake>::default();
    let (a, fa) = region(&reg, 1, true);
    let (b, fb) = region(&reg, 2, true);
    let (sa, sb) = ([sge(1)], [sge(2)]);
    let wrs = [read(&sa, false), read(&sb, true)];
    assert_eq!(sq.hold(&reg, &wrs), None);
    sq.posted(&wrs, false);
    drop((a, b));
    assert!(!freed(&fa) && !freed(&fb));
    sq.sink_completed(&mut Freed::default());
    assert!(freed(&fa) && freed(&fb));
}

#[test]
fn a_signaled_read_releases_only_what_came_before_it() {
    let reg = Registry::default();
    let mut sq = SendLedger::<Fake>::default();
    let (a, fa) = region(&reg, 1, true);
    let (b, fb) = region(&reg, 2, true);
    let (sa, sb) = ([sge(1)], [sge(2)]);
    let wrs = [read(&sa, true), read(&sb, true)];
    assert_eq!(sq.hold(&reg, &wrs), None);
    sq.posted(&wrs, false);
    drop((a, b));
    sq.sink_completed(&mut Freed::default());
    assert!(freed(&fa));
    assert!(!freed(&fb), "the second READ is still outstanding");
    sq.sink_completed(&mut Freed::default());
    assert!(freed(&fb));
    assert_eq!(sq.holding(), 0);
}

#[test]
fn an_unsignaled_read_alone_waits_for_the_qp() {
    let reg = Registry::default();
    let (a, fa) = region(&reg, 1, true);
    let sa = [sge(1)];
    let wrs = [read(&sa, false)];
    let l = Arc::new(QpLedger::<Fake>::new(9, None, false));
    assert_eq!(lock(&l.send).hold(&reg, &wrs), None);
    lock(&l.send).posted(&wrs, false);
    drop(a);
    let watch = Watch::default();
    watch.add(&l, Role::Both);
    // A SEND's completion says nothing about the READ before it (siw completes it first).
    watch.settle_now([(9, true, WcOpcode::SEND.0, 0)].into_iter(), None);
    assert!(!freed(&fa));
    watch.retire(&l, &mut Freed::default());
    drop(l); // the QP destroyed
    assert!(freed(&fa));
}

#[test]
fn sq_sig_all_signals_every_read() {
    let reg = Registry::default();
    let mut sq = SendLedger::<Fake>::default();
    let (a, fa) = region(&reg, 1, true);
    let sa = [sge(1)];
    let wrs = [read(&sa, false)];
    assert_eq!(sq.hold(&reg, &wrs), None);
    sq.posted(&wrs, true);
    drop(a);
    sq.sink_completed(&mut Freed::default());
    assert!(freed(&fa));
}

#[test]
fn a_cq_counts_what_it_can_classify() {
    let reg = Registry::default();
    let l = Arc::new(QpLedger::<Fake>::new(3, None, false));
    let (a, fa) = region(&reg, 1, true);
    let sa = [sge(1)];
    assert_eq!(lock(&l.recv).hold(&reg, &[RecvWr::new(0, &sa[..])]), None);
    lock(&l.recv).posted(&raw(1));
    drop(a);
    let both = Watch::default();
    both.add(&l, Role::Both);
    // On a CQ shared by both queues an error completion without a receive's opcode cannot be
    // told apart (rxe leaves a flushed receive's opcode 0, an unknown send's 0xff), nor can
    // another QP's or a send's success.
    both.settle_now(
        [
            (3, false, 0xff, 0),
            (3, false, 0, 0),
            (4, true, WcOpcode::RECV.0, 0),
            (3, true, WcOpcode::SEND.0, 0),
            (3, true, WcOpcode::RDMA_READ.0, 0),
        ]
        .into_iter(),
        None,
    );
    assert!(!freed(&fa));
    both.settle_now(
        [(3, true, WcOpcode::RECV_RDMA_WITH_IMM.0, 0)].into_iter(),
        None,
    );
    assert!(freed(&fa));

    // On the QP's own receive CQ every completion is a receive's, flushes included.
    let l = Arc::new(QpLedger::<Fake>::new(3, None, false));
    let (b, fb) = region(&reg, 2, true);
    let sb = [sge(2)];
    assert_eq!(lock(&l.recv).hold(&reg, &[RecvWr::new(0, &sb[..])]), None);
    lock(&l.recv).posted(&raw(1));
    drop(b);
    let recv = Watch::default();
    recv.add(&l, Role::Recv);
    recv.settle_now([(3, false, 0, 0)].into_iter(), None);
    assert!(freed(&fb));
}

#[test]
fn a_send_cq_releases_reads_on_their_success_only() {
    let reg = Registry::default();
    let l = Arc::new(QpLedger::<Fake>::new(3, None, false));
    let (a, fa) = region(&reg, 1, true);
    let sa = [sge(1)];
    let wrs = [read(&sa, true)];
    assert_eq!(lock(&l.send).hold(&reg, &wrs), None);
    lock(&l.send).posted(&wrs, false);
    drop(a);
    let send = Watch::default();
    send.add(&l, Role::Send);
    send.settle_now(
        [
            (3, false, WcOpcode::RDMA_READ.0, 0),
            (3, true, WcOpcode::SEND.0, 0),
        ]
        .into_iter(),
        None,
    );
    assert!(
        !freed(&fa),
        "a flush's opcode is not to be trusted, a SEND's says nothing"
    );
    send.settle_now([(3, true, WcOpcode::FETCH_ADD.0, 0)].into_iter(), None);
    assert!(freed(&fa));
}

/// A receive of QP `qpn` into region `lkey`, whose `Mr` is then dropped: the QP's ledger.
fn qp_with_held_receive(
    reg: &Registry<Fake>,
    qpn: u32,
    lkey: u32,
) -> (Arc<QpLedger<Fake>>, Arc<AtomicBool>) {
    let l = Arc::new(QpLedger::<Fake>::new(qpn, None, false));
    let (a, fa) = region(reg, lkey, true);
    let sa = [sge(lkey)];
    assert_eq!(lock(&l.recv).hold(reg, &[RecvWr::new(0, &sa[..])]), None);
    lock(&l.recv).posted(&raw(1));
    drop(a);
    (l, fa)
}

#[test]
fn a_destroyed_qps_completions_do_not_count_for_its_number_reused() {
    // siw gives a new QP the lowest free number (xa_alloc): a QP created after one was
    // destroyed on the same CQ may carry its number while the destroyed QP's completions
    // (a receive that succeeded, its flushes) still sit unpolled in the ring.
    let reg = Registry::default();
    let watch = Watch::default();
    let (a, _) = qp_with_held_receive(&reg, 7, 1);
    watch.add(&a, Role::Both);
    // QP A's receive completed (in the ring, not polled); A is destroyed.
    watch.retire(&a, &mut Freed::default());
    drop(a);
    let (b, fb) = qp_with_held_receive(&reg, 7, 2);
    watch.add(&b, Role::Both);
    // The poll finds A's completion first (and more behind it: not drained).
    let e = watch.epoch();
    watch.settle_now([(7, true, WcOpcode::RECV.0, 0)].into_iter(), None);
    assert!(
        !freed(&fb),
        "QP B's receive is still posted: its region was freed by QP A's completion"
    );
    // A poll that started after A was retired and found the ring empty took the last of A's
    // completions: B's own count from then on.
    watch.settle_now(std::iter::empty::<Seen>(), Some(e));
    watch.settle_now(
        [(7, true, WcOpcode::RECV.0, 0)].into_iter(),
        Some(watch.epoch()),
    );
    assert!(freed(&fb));
}

#[test]
fn a_drained_poll_that_began_before_a_destroy_keeps_its_tombstone() {
    let reg = Registry::default();
    let watch = Watch::default();
    let (a, _) = qp_with_held_receive(&reg, 7, 1);
    watch.add(&a, Role::Recv);
    // A poll reads the ring (epoch taken) before A's destroy, which may still add flushes.
    let e = watch.epoch();
    watch.retire(&a, &mut Freed::default());
    drop(a);
    watch.settle_now(std::iter::empty::<Seen>(), Some(e));
    let (b, fb) = qp_with_held_receive(&reg, 7, 2);
    watch.add(&b, Role::Recv);
    // A's flush, written during its destroy after that poll's read.
    watch.settle_now([(7, false, 0, 0)].into_iter(), None);
    assert!(!freed(&fb));
    drop(b);
}

/// Memory waiting in a [`Fence`], recording when it is freed.
#[derive(Debug)]
struct Mem(&'static AtomicBool);

impl Drop for Mem {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Fresh 'static flags, statics of the calling test (a forgotten `Mem` owns nothing).
macro_rules! flags {
    ($($f:ident),+) => {
        $(static $f: AtomicBool = AtomicBool::new(false);)+
    };
}

#[test]
fn remote_memory_waits_for_the_qps_of_its_deregistration() {
    let f = Fence::<Mem>::default();
    let a = f.qp_created();
    let b = f.qp_created();
    flags!(M, FREED);
    let (m, freed) = (&M, &FREED);
    assert!(f.defer(Mem(m)).is_ok(), "two QPs may still place data");
    // A QP created afterwards cannot reach the region (its key is gone): not waited for.
    let c = f.qp_created();
    assert!(f.qp_destroyed(a).is_empty(), "QP b may still place data");
    assert!(!freed.load(Ordering::SeqCst) && !m.load(Ordering::SeqCst));
    let out = f.qp_destroyed(b);
    assert_eq!(out.len(), 1, "no QP of the deregistration is left");
    drop(out);
    assert!(m.load(Ordering::SeqCst));
    assert!(f.qp_destroyed(c).is_empty());
    assert_eq!(f.waiting(), 0);
}

#[test]
fn remote_memory_with_no_qp_is_freed_at_once() {
    let f = Fence::<Mem>::default();
    flags!(M1, M2);
    let m = &M1;
    let back = f.defer(Mem(m));
    assert!(back.is_err(), "no QP: nothing can reach it");
    drop(back);
    assert!(m.load(Ordering::SeqCst));
    // A QP created and destroyed before changes nothing.
    let a = f.qp_created();
    assert!(f.qp_destroyed(a).is_empty());
    let m = &M2;
    drop(f.defer(Mem(m)));
    assert!(m.load(Ordering::SeqCst));
}

#[test]
fn remote_memory_goes_in_the_order_its_qps_do() {
    // Memory deregistered under QPs {a} and then {a, b}: destroying b first frees nothing
    // (a is older than both marks), destroying a then frees both.
    let f = Fence::<Mem>::default();
    let a = f.qp_created();
    flags!(M1, M2, M3);
    let (m1, m2) = (&M1, &M2);
    f.defer(Mem(m1)).unwrap();
    let b = f.qp_created();
    f.defer(Mem(m2)).unwrap();
    assert!(f.qp_destroyed(b).is_empty());
    let out = f.qp_destroyed(a);
    assert_eq!(out.len(), 2);
    drop(out);
    assert!(m1.load(Ordering::SeqCst) && m2.load(Ordering::SeqCst));

    // Under {a} only, then a new QP c: destroying a frees the first at once.
    let a = f.qp_created();
    let m3 = &M3;
    f.defer(Mem(m3)).unwrap();
    let c = f.qp_created();
    drop(f.qp_destroyed(a));
    assert!(m3.load(Ordering::SeqCst), "c came after the deregistration");
    assert!(f.qp_destroyed(c).is_empty());
}

#[test]
fn memory_of_a_qp_never_destroyed_is_never_freed() {
    // The kernel refused the destroy: the QP keeps its number, and what waits for it is
    // leaked with the fence (the PD) rather than freed under a device that may still write.
    let f = Fence::<Mem>::default();
    let _refused = f.qp_created();
    flags!(M);
    let m = &M;
    f.defer(Mem(m)).unwrap();
    drop(f);
    assert!(!m.load(Ordering::SeqCst));
}

/// Issue 31 (g): a QP create that panics (or fails) gives its fence number back, so that
/// memory deregistered meanwhile is freed when the QPs that could reach it are gone; one whose
/// kernel QP could not be destroyed keeps it; one that succeeded hands it to the QP.
#[test]
fn a_qp_create_that_panics_gives_its_fence_number_back() {
    let f = Fence::<Mem>::default();
    let a = f.qp_created();
    flags!(M1, M2, M3);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _t = f.ticket();
        f.defer(Mem(&M1)).unwrap();
        panic!("the provider panicked inside create_qp");
    }));
    assert!(r.is_err());
    drop(f.qp_destroyed(a));
    assert!(
        M1.load(Ordering::SeqCst),
        "the panicked create's number stayed live"
    );
    // A ticket kept: the QP's number, which its destroy gives back.
    let t = f.ticket();
    f.defer(Mem(&M2)).unwrap();
    let n = t.keep();
    assert!(!M2.load(Ordering::SeqCst));
    drop(f.qp_destroyed(n));
    assert!(M2.load(Ordering::SeqCst));
    // A kernel QP that could not be destroyed: its number stays, what waits for it too.
    let t = f.ticket();
    f.defer(Mem(&M3)).unwrap();
    t.stuck();
    assert_eq!(f.waiting(), 1);
    drop(f);
    assert!(!M3.load(Ordering::SeqCst));
}

fn send(sge: &[Sge], flags: SendFlags) -> SendWr<'_> {
    SendWr {
        wr_id: 0,
        op: SendOp::Send,
        sge,
        flags,
        ud: None,
    }
}

#[test]
fn siw_sources_wait_for_a_completion_at_or_after_them() {
    let reg = Registry::default();
    let mut sq = SendLedger::<Fake>::holding_sources();
    let (a, fa) = region(&reg, 1, true);
    let (b, fb) = region(&reg, 2, true);
    let (c, fc) = region(&reg, 3, true);
    let (sa, sb, sc) = ([sge(1)], [sge(2)], [sge(3)]);
    // An unsignaled SEND, a signaled one, another signaled one.
    let wrs = [
        send(&sa, SendFlags::empty()),
        send(&sb, SendFlags::SIGNALED),
        send(&sc, SendFlags::SIGNALED),
    ];
    assert_eq!(sq.hold(&reg, &wrs), None);
    sq.posted(&wrs, false);
    drop((a, b, c));
    assert!(
        !freed(&fa) && !freed(&fb) && !freed(&fc),
        "siw may still read them"
    );
    sq.other_completed(&mut Freed::default());
    assert!(
        freed(&fa) && freed(&fb),
        "the second request's completion: both went out"
    );
    assert!(!freed(&fc), "the third may still be read");
    sq.other_completed(&mut Freed::default());
    assert!(freed(&fc));
    assert_eq!(sq.holding(), 0);
}

#[test]
fn siw_a_reads_completion_releases_the_sources_before_it_only() {
    let reg = Registry::default();
    let mut sq = SendLedger::<Fake>::holding_sources();
    let (a, fa) = region(&reg, 1, true);
    let (s, fs) = region(&reg, 2, true);
    let (b, fb) = region(&reg, 3, true);
    let (sa, ss, sb) = ([sge(1)], [sge(2)], [sge(3)]);
    let wrs = [
        send(&sa, SendFlags::empty()),
        read(&ss, true),
        send(&sb, SendFlags::SIGNALED),
    ];
    assert_eq!(sq.hold(&reg, &wrs), None);
    sq.posted(&wrs, false);
    drop((a, s, b));
    // siw completes the later SEND first (handed to TCP) or the READ first (its response):
    // here the READ's completion comes first.
    sq.sink_completed(&mut Freed::default());
    assert!(
        freed(&fa),
        "the SEND before the READ went out before the READ's request"
    );
    assert!(freed(&fs));
    assert!(!freed(&fb), "the SEND after the READ may still be read");
    sq.other_completed(&mut Freed::default());
    assert!(freed(&fb));
}

#[test]
fn siw_inline_and_borrowed_sources_are_not_held() {
    let reg = Registry::default();
    let mut sq = SendLedger::<Fake>::holding_sources();
    let (_a, _) = region(&reg, 1, true);
    let (_b, _) = region(&reg, 2, false);
    let (sa, sb) = ([sge(1)], [sge(2)]);
    let wrs = [
        send(&sa, SendFlags::INLINE | SendFlags::SIGNALED),
        send(&sb, SendFlags::SIGNALED),
    ];
    assert_eq!(
        sq.hold(&reg, &wrs),
        None,
        "a borrowed source is read, not refused"
    );
    assert_eq!(sq.holding(), 0);
}

#[test]
fn sources_are_held_on_siw_only() {
    let reg = Registry::default();
    let mut sq = SendLedger::<Fake>::default();
    let (a, fa) = region(&reg, 1, true);
    let sa = [sge(1)];
    let wrs = [send(&sa, SendFlags::SIGNALED)];
    assert_eq!(sq.hold(&reg, &wrs), None);
    sq.posted(&wrs, false);
    drop(a);
    assert!(freed(&fa), "rxe and mlx5 fence a source at deregistration");
}

#[test]
fn a_cq_releases_siw_sources_on_a_sends_success_only() {
    let reg = Registry::default();
    let l = Arc::new(QpLedger::<Fake>::new(3, None, true));
    let (a, fa) = region(&reg, 1, true);
    let sa = [sge(1)];
    let wrs = [send(&sa, SendFlags::SIGNALED)];
    assert_eq!(lock(&l.send).hold(&reg, &wrs), None);
    lock(&l.send).posted(&wrs, false);
    drop(a);
    let watch = Watch::default();
    watch.add(&l, Role::Both);
    watch.settle_now(
        [
            (3, false, WcOpcode::SEND.0, 0),
            (3, true, WcOpcode::RECV.0, 0),
        ]
        .into_iter(),
        None,
    );
    assert!(
        !freed(&fa),
        "a flush, a receive: the SEND may still be read"
    );
    watch.settle_now([(3, true, WcOpcode::SEND.0, 0)].into_iter(), None);
    assert!(freed(&fa));
}

/// An SRQ's ledger with one receive posted under `wr_id` into region `lkey`, whose `Mr` is
/// dropped, and a QP `qpn` on that SRQ.
fn srq_with_held_receive(
    reg: &Registry<Fake>,
    srq: &Arc<LedgerLock<RecvLedger<Fake>>>,
    qpn: u32,
    wr_id: u64,
    lkey: u32,
) -> (Arc<QpLedger<Fake>>, Arc<AtomicBool>) {
    let l = Arc::new(QpLedger::<Fake>::new(qpn, Some(srq), false));
    let (a, fa) = region(reg, lkey, true);
    let sa = [sge(lkey)];
    let w = [RecvWr::new(wr_id, &sa[..])];
    assert_eq!(lock(srq).hold(reg, &w), None);
    lock(srq).posted(&w);
    drop(a);
    (l, fa)
}

/// Issue 31 (a): a completion the provider made up (mlx5: wr_id 0, GENERAL_ERR for a CQE it
/// could not attribute) names a live QP but no request of it: it settles nothing.
#[test]
fn made_up_completions_settle_no_ledger() {
    use crate::wc::{RawWc, WcStatus, WorkCompletion};
    let made_up = WorkCompletion {
        qp_num: 3,
        status: WcStatus::GENERAL_ERR,
        vendor_err: 0x500,
        unmatched: true,
        ..WorkCompletion::default()
    };
    let reg = Registry::default();
    // A QP's own receive CQ, where every completion used to count as its next receive's.
    let (l, fa) = qp_with_held_receive(&reg, 3, 1);
    let w = Watch::default();
    w.add(&l, Role::Recv);
    w.settle_now([made_up].iter(), None);
    w.settle_now([RawWc::from_work_completion(&made_up)].iter(), None);
    assert!(
        !freed(&fa),
        "a made-up completion released a posted receive's buffer"
    );
    let real = WorkCompletion {
        unmatched: false,
        ..made_up
    };
    w.settle_now([real].iter(), None);
    assert!(
        freed(&fa),
        "the device's own error completion is the receive's"
    );

    // An SRQ receive posted with wr_id 0, the made-up completion's.
    let srq = Arc::new(LedgerLock::new(RecvLedger::shared()));
    let (l, fb) = srq_with_held_receive(&reg, &srq, 3, 0, 2);
    let w = Watch::default();
    w.add(&l, Role::Both);
    let recv = WorkCompletion {
        opcode: WcOpcode::RECV,
        ..made_up
    };
    w.settle_now([recv].iter(), None);
    w.settle_now([RawWc::from_work_completion(&recv)].iter(), None);
    assert!(
        !freed(&fb),
        "a made-up completion released SRQ wr_id 0's buffer"
    );
    w.settle_now(
        [WorkCompletion {
            unmatched: false,
            ..recv
        }]
        .iter(),
        None,
    );
    assert!(freed(&fb));
}

/// Issue 31 (b): an SRQ receive whose completion is polled after its QP was destroyed (or is
/// an error on a CQ shared with sends) is still settled, so that its `wr_id` slot does not
/// stay pinned and hold every region posted under that `wr_id` later.
#[test]
fn an_srq_receive_of_a_destroyed_qp_or_a_shared_cqs_error_still_settles() {
    let reg = Registry::default();
    let srq = Arc::new(LedgerLock::new(RecvLedger::shared()));
    // QP 7 takes wr_id 5's receive; it is destroyed before its completion is polled.
    let (a, fa) = srq_with_held_receive(&reg, &srq, 7, 5, 1);
    let watch = Watch::default();
    watch.add(&a, Role::Recv);
    watch.retire(&a, &mut Freed::default());
    drop(a);
    watch.settle_now([(7, false, WcOpcode::RECV.0, 5)].into_iter(), None);
    assert!(
        freed(&fa),
        "the destroyed QP's completion of SRQ wr_id 5 was counted for no one"
    );
    // Another QP on the SRQ, its CQ shared with its sends: an error completion of a receive
    // (its opcode a receive's) is that receive's.
    let (b, fb) = srq_with_held_receive(&reg, &srq, 8, 5, 2);
    let shared = Watch::default();
    shared.add(&b, Role::Both);
    shared.settle_now([(8, false, WcOpcode::RECV.0, 5)].into_iter(), None);
    assert!(
        freed(&fb),
        "a receive's error on a shared CQ pinned wr_id 5"
    );
    // wr_id 5 reused many times: nothing accumulates.
    for i in 0..32u32 {
        let (r, f) = region(&reg, 100 + i, true);
        let s = [sge(100 + i)];
        let w = [RecvWr::new(5, &s[..])];
        assert_eq!(lock(&srq).hold(&reg, &w), None);
        lock(&srq).posted(&w);
        drop(r);
        shared.settle_now([(8, true, WcOpcode::RECV.0, 5)].into_iter(), None);
        assert!(freed(&f), "round {i}: wr_id 5's buffer is held");
    }
    assert_eq!(lock(&srq).holding(), 0);
}

/// A tombstone settles its SRQ only where the completion cannot be a new QP's of another
/// queue: a new QP with the number, on another SRQ, makes it count for no one.
#[test]
fn a_tombstone_does_not_settle_its_srq_for_a_new_qp_of_another() {
    let reg = Registry::default();
    let old = Arc::new(LedgerLock::new(RecvLedger::shared()));
    let (a, fa) = srq_with_held_receive(&reg, &old, 7, 5, 1);
    let watch = Watch::default();
    watch.add(&a, Role::Recv);
    watch.retire(&a, &mut Freed::default());
    drop(a);
    let new = Arc::new(LedgerLock::new(RecvLedger::shared()));
    let (b, fb) = srq_with_held_receive(&reg, &new, 7, 5, 2);
    watch.add(&b, Role::Recv);
    // Whose is it? The old QP's (its SRQ's wr_id 5) or the new one's: not known, not counted.
    watch.settle_now([(7, true, WcOpcode::RECV.0, 5)].into_iter(), None);
    assert!(!freed(&fa) && !freed(&fb));
    // The new QP on the same SRQ: either way it is that SRQ's wr_id 5.
    let (c, fc) = srq_with_held_receive(&reg, &old, 9, 6, 3);
    watch.add(&c, Role::Recv);
    watch.retire(&c, &mut Freed::default());
    drop(c);
    let (d, _fd) = srq_with_held_receive(&reg, &old, 9, 6, 4);
    watch.add(&d, Role::Recv);
    watch.settle_now([(9, true, WcOpcode::RECV.0, 6)].into_iter(), None);
    assert_eq!(
        lock(&old).holding(),
        3,
        "one of wr_id 6's two receives is over"
    );
    let _ = fc;
    drop((b, d));
}

/// A QP number reused by the kernel and destroyed again before the CQ was drained: the old
/// QP's completions (another SRQ's `wr_id`s, or its own receive queue's) are still in the
/// ring, and the newer tombstone must not settle its SRQ with them (review of 31 (b): the
/// newer tombstone replaced the older one and released a receive the device may still write).
#[test]
fn a_reused_numbers_second_tombstone_does_not_settle_its_srq_for_the_first_qp() {
    let reg = Registry::default();
    // The first QP with number 7 on SRQ `old`, or on its own receive queue.
    for first_on_srq in [true, false] {
        let old = Arc::new(LedgerLock::new(RecvLedger::shared()));
        let (a, fa) = if first_on_srq {
            srq_with_held_receive(&reg, &old, 7, 5, 1)
        } else {
            qp_with_held_receive(&reg, 7, 1)
        };
        let watch = Watch::default();
        watch.add(&a, Role::Recv);
        watch.retire(&a, &mut Freed::default());
        drop(a);
        // Number 7 again, on SRQ `new`, wr_id 5 posted there; destroyed before any poll.
        let new = Arc::new(LedgerLock::new(RecvLedger::shared()));
        let (b, fb) = srq_with_held_receive(&reg, &new, 7, 5, 2);
        watch.add(&b, Role::Recv);
        watch.retire(&b, &mut Freed::default());
        drop(b);
        // The first QP's receive completion (wr_id 5 of `old`, or of its own queue; a queue
        // of its own posts wr_ids as the user chose, 5 here too).
        watch.settle_now([(7, true, WcOpcode::RECV.0, 5)].into_iter(), None);
        assert!(
            !freed(&fb),
            "first on SRQ: {first_on_srq}: SRQ `new`'s wr_id 5 was released by a completion \
             that may be the first QP's"
        );
        let _ = fa;
    }
}

/// A bind work request (`Qp::bind_mw`'s), `signaled` or not.
fn bind(signaled: bool) -> SendWr<'static> {
    // SAFETY: only numbers for the ledger; never posted to a device.
    #[allow(unsafe_code)]
    let b = unsafe {
        crate::values::MwBind::from_raw(
            crate::values::MwType::TYPE_1,
            0x100,
            0x101,
            7,
            0x1000,
            64,
            crate::values::AccessFlags::REMOTE_READ,
        )
    };
    SendWr {
        wr_id: 0,
        op: SendOp::BindMw(b),
        sge: &[],
        flags: if signaled {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        },
        ud: None,
    }
}

/// A window stand-in (what `Mw` keeps: its regions), recording its drop (its deallocation).
struct Window(Arc<AtomicBool>);

impl Drop for Window {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Posts `w` (one bind) on `l`'s send queue as `Qp::bind_mw` does, keeping `what`.
fn post_bind<R: Holdable>(l: &QpLedger<R>, w: SendWr<'static>, what: Arc<dyn Send + Sync>) {
    let mut sq = lock(&l.send);
    let ord = sq.next_ordered();
    let wrs = [w];
    assert_eq!(sq.hold(&Registry::default(), &wrs), None);
    sq.posted(&wrs, false);
    sq.keep(ord, what);
}

/// Issue #31 (memory windows): a window dropped while its bind is posted is deallocated (and
/// its regions freed) only once that bind's completion, or a later signaled ordered request's,
/// was polled with success: not on a flush, not on a SEND's success, not on the completion of
/// an earlier READ.
#[test]
fn a_posted_bind_keeps_its_window_until_its_completion() {
    let reg = Registry::default();
    let l = Arc::new(QpLedger::<Fake>::new(5, None, false));
    let send = Watch::default();
    send.add(&l, Role::Send);
    // A signaled READ before the bind.
    let (a, fa) = region(&reg, 1, true);
    let sa = [sge(1)];
    let wrs = [read(&sa, true)];
    assert_eq!(lock(&l.send).hold(&reg, &wrs), None);
    lock(&l.send).posted(&wrs, false);
    drop(a);
    // The bind, its window (and what the window keeps) then dropped by the user.
    let gone = Arc::new(AtomicBool::new(false));
    post_bind(&l, bind(true), Arc::new(Window(gone.clone())));
    assert!(!freed(&gone), "held while the bind is posted");
    send.settle_now(
        [
            (5, true, WcOpcode::RDMA_READ.0, 0),
            (5, true, WcOpcode::SEND.0, 0),
            (5, false, WcOpcode::BIND_MW.0, 0),
        ]
        .into_iter(),
        None,
    );
    assert!(freed(&fa), "the READ before it is over");
    assert!(
        !freed(&gone),
        "an earlier READ, a SEND, a flush: the bind may still execute"
    );
    send.settle_now([(5, true, WcOpcode::BIND_MW.0, 0)].into_iter(), None);
    assert!(freed(&gone), "the bind's own success lets go of its window");
    assert_eq!(lock(&l.send).holding(), 0);
}

/// An unsignaled bind keeps its window until the next signaled ordered request succeeds; a QP
/// that never completes anything (in ERROR, never flushed) keeps it until its ledger goes
/// (the QP's destroy).
#[test]
fn an_unsignaled_bind_waits_for_the_next_signaled_one_or_the_destroy() {
    let l = Arc::new(QpLedger::<Fake>::new(6, None, false));
    let send = Watch::default();
    send.add(&l, Role::Send);
    let (g1, g2) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    post_bind(&l, bind(false), Arc::new(Window(g1.clone())));
    post_bind(&l, bind(true), Arc::new(Window(g2.clone())));
    let g3 = Arc::new(AtomicBool::new(false));
    post_bind(&l, bind(true), Arc::new(Window(g3.clone())));
    send.settle_now([(6, true, WcOpcode::BIND_MW.0, 0)].into_iter(), None);
    assert!(
        freed(&g1) && freed(&g2),
        "the first signaled bind covers the one before it"
    );
    assert!(!freed(&g3), "the third is still queued");
    // Never completed: the QP's destroy (the watch retires it, the QP drops its ledger).
    send.retire(&l, &mut Freed::default());
    drop(l);
    assert!(freed(&g3), "the destroy lets go of what is still posted");
}

/// One window bound again and again without a signal, between signaled SENDs (which release no
/// bind): one entry, not one per bind, and the window held until a signaled ordered request at
/// or after the last bind succeeds (review of issue 31: the list grew by one per bind).
#[test]
fn rebinding_one_window_keeps_one_entry_until_the_last_bind_is_over() {
    let l = Arc::new(QpLedger::<Fake>::new(8, None, false));
    let send = Watch::default();
    send.add(&l, Role::Send);
    let gone = Arc::new(AtomicBool::new(false));
    let window: Arc<dyn Send + Sync> = Arc::new(Window(gone.clone()));
    for _ in 0..1000 {
        post_bind(&l, bind(false), window.clone());
        send.settle_now([(8, true, WcOpcode::SEND.0, 0)].into_iter(), None);
    }
    assert_eq!(lock(&l.send).holding(), 1, "one entry for one window");
    assert_eq!(
        Arc::strong_count(&window),
        2,
        "the caller's and the ledger's"
    );
    // Another window's bind after it, then a signaled bind: both over.
    let other = Arc::new(AtomicBool::new(false));
    post_bind(&l, bind(false), Arc::new(Window(other.clone())));
    assert_eq!(lock(&l.send).holding(), 2);
    post_bind(&l, bind(true), window.clone());
    drop(window);
    assert!(!freed(&gone), "the last bind of it is still queued");
    send.settle_now([(8, true, WcOpcode::BIND_MW.0, 0)].into_iter(), None);
    assert!(
        freed(&gone) && freed(&other),
        "a signaled bind after both lets go of both"
    );
    assert_eq!(lock(&l.send).holding(), 0);
}

/// The locks a poll holds while it settles: the CQ ring's (`Cq::poll` takes it first), the
/// watch's, and the QP's two ledgers'.
struct PollLocks {
    ring: LedgerLock<()>,
    watch: Watch<Probe>,
    qp: OnceLock<Arc<QpLedger<Probe>>>,
}

impl PollLocks {
    /// True while any of them is held.
    fn any_held(&self) -> bool {
        self.ring.is_locked()
            || self.watch.list.is_locked()
            || self
                .qp
                .get()
                .is_some_and(|l| l.send.is_locked() || l.recv.is_locked())
    }
}

/// A region (or a window) whose drop, the deregistration syscall or a user's
/// `MrMemory::drop`, which may post or poll and so take these very locks, records whether a
/// lock of the poll path was held then.
#[derive(Debug)]
struct Probe {
    lkey: u32,
    locks: Weak<PollLocks>,
    dropped: Arc<AtomicBool>,
    under_lock: Arc<AtomicBool>,
}

impl std::fmt::Debug for PollLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PollLocks")
    }
}

impl Holdable for Probe {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn deferrable(&self) -> bool {
        true
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if self.locks.upgrade().is_some_and(|l| l.any_held()) {
            self.under_lock.store(true, Ordering::SeqCst);
        }
        self.dropped.store(true, Ordering::SeqCst);
    }
}

/// A poll as `Cq::poll` makes it: the ring's lock, and `Watch::settle_unlocking` with it.
fn poll_like(p: &PollLocks, wcs: &[(u32, bool, u32, u64)], drained: Option<u64>) {
    let ring = p.ring.lock();
    p.watch.settle_unlocking(ring, wcs.iter().copied(), drained);
}

/// A probe region registered in `reg`, and its two flags (dropped, dropped under a lock).
fn probe(
    p: &Arc<PollLocks>,
    reg: &Registry<Probe>,
    lkey: u32,
) -> (Arc<Probe>, Arc<AtomicBool>, Arc<AtomicBool>) {
    let (dropped, under) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let r = Arc::new(Probe {
        lkey,
        locks: Arc::downgrade(p),
        dropped: dropped.clone(),
        under_lock: under.clone(),
    });
    reg.insert(&r);
    (r, dropped, under)
}

/// Review of issue 31: what a settle releases (a region's deregistration, a window's
/// deallocation, a user's `MrMemory` drop, which may post or poll) is dropped after the poll
/// let go of the ring's, the watch's and the ledgers' spin locks: never under them, where a
/// drop that takes one of them would spin forever and a syscall would stall every poller.
/// Each release point of a settle: a receive, a READ's sink, a bind's window, siw's source.
#[test]
fn what_a_settle_releases_is_dropped_after_the_locks() {
    for (role, sources) in [(Role::Recv, false), (Role::Send, false), (Role::Send, true)] {
        let p = Arc::new(PollLocks {
            ring: LedgerLock::new(()),
            watch: Watch::default(),
            qp: OnceLock::new(),
        });
        let reg = Registry::default();
        let l = Arc::new(QpLedger::<Probe>::new(4, None, sources));
        p.qp.set(l.clone()).unwrap();
        p.watch.add(&l, role);
        let (r, dropped, under) = probe(&p, &reg, 1);
        let s = [sge(1)];
        let opcode = match role {
            Role::Recv => {
                let wrs = [RecvWr::new(0, &s)];
                assert_eq!(lock(&l.recv).hold(&reg, &wrs), None);
                lock(&l.recv).posted(&wrs);
                WcOpcode::RECV
            }
            _ if sources => {
                let wrs = [send(&s, SendFlags::SIGNALED)];
                assert_eq!(lock(&l.send).hold(&reg, &wrs), None);
                lock(&l.send).posted(&wrs, false);
                WcOpcode::SEND
            }
            _ => {
                // A READ into the probe, then a bind keeping a probe window.
                let wrs = [read(&s, false)];
                assert_eq!(lock(&l.send).hold(&reg, &wrs), None);
                lock(&l.send).posted(&wrs, false);
                let (w, _, _) = probe(&p, &Registry::default(), 2);
                let wd = w.dropped.clone();
                let wu = w.under_lock.clone();
                post_bind(&l, bind(true), w);
                poll_like(&p, &[(4, true, WcOpcode::BIND_MW.0, 0)], None);
                assert!(wd.load(Ordering::SeqCst), "the bind is over");
                assert!(
                    !wu.load(Ordering::SeqCst),
                    "a bind's window was dropped under a poll's lock"
                );
                drop(r);
                assert!(dropped.load(Ordering::SeqCst), "the READ before it is over");
                assert!(
                    !under.load(Ordering::SeqCst),
                    "a READ's sink was dropped under a poll's lock"
                );
                continue;
            }
        };
        drop(r);
        assert!(!dropped.load(Ordering::SeqCst), "held while posted");
        poll_like(&p, &[(4, true, opcode.0, 0)], None);
        assert!(dropped.load(Ordering::SeqCst), "{role:?}: over");
        assert!(
            !under.load(Ordering::SeqCst),
            "{role:?} (sources {sources}): dropped under a poll's lock"
        );
    }
}

/// As `what_a_settle_releases_is_dropped_after_the_locks`, where a tombstone stands: the
/// receive of a destroyed QP's SRQ settles the SRQ, and what it held is dropped after the
/// locks (the SRQ's among them), by a poll that did not empty the ring and by one that did
/// (which clears the tombstone: `Watch::settle_with_tombs_unlocking`); so is the watch's
/// `Arc` of a retired QP's ledger.
#[test]
fn what_a_tombstone_or_a_retire_releases_is_dropped_after_the_locks() {
    for drained in [false, true] {
        let p = Arc::new(PollLocks {
            ring: LedgerLock::new(()),
            watch: Watch::default(),
            qp: OnceLock::new(),
        });
        let reg = Registry::default();
        let srq = Arc::new(LedgerLock::new(RecvLedger::shared()));
        let l = Arc::new(QpLedger::<Probe>::new(7, Some(&srq), false));
        p.watch.add(&l, Role::Recv);
        // Its receive ledger is the SRQ's: `any_held` checks the SRQ's lock too.
        p.qp.set(l.clone()).unwrap();
        let (r, dropped, under) = probe(&p, &reg, 1);
        let s = [sge(1)];
        let w = [RecvWr::new(5, &s[..])];
        assert_eq!(lock(&srq).hold(&reg, &w), None);
        lock(&srq).posted(&w);
        drop(r);
        // The QP is destroyed (its retire under the ring's lock here, as `Qp::drop` holds
        // the QP table's): the watch's `Arc` of its ledger is not dropped under it.
        let mut freed = Freed::default();
        let ring = p.ring.lock();
        p.watch.retire(&l, &mut freed);
        drop(ring);
        assert_eq!(freed.len(), 1, "the watch's Arc of the ledger");
        drop(freed);
        drop(l);
        assert!(
            !dropped.load(Ordering::SeqCst),
            "its receive is still posted"
        );
        let epoch = p.watch.epoch();
        poll_like(
            &p,
            &[(7, true, WcOpcode::RECV.0, 5)],
            drained.then_some(epoch),
        );
        assert!(
            dropped.load(Ordering::SeqCst),
            "drained {drained}: the receive of the destroyed QP is over"
        );
        assert!(
            !under.load(Ordering::SeqCst),
            "drained {drained}: an SRQ receive settled through a tombstone was dropped under \
             a poll's lock"
        );
        assert_eq!(
            p.watch.tombs.load(Ordering::Relaxed),
            usize::from(!drained),
            "a drained poll clears the tombstone, another does not"
        );
        drop(srq);
    }
}

/// Review of issue 31: the count of QPs here that settle on every completion is read without
/// the lock only as a hint; a stale one (a QP added on another thread, its store not yet seen
/// by the poller) is corrected by the count read under the lock, from the first completion:
/// a `Role::Recv` QP's flushed receive with no receive opcode (rxe leaves it 0) before a
/// successful one is counted, and both receives' regions are released.
#[test]
fn a_stale_every_count_is_read_again_under_the_lock() {
    let reg = Registry::default();
    let watch = Watch::default();
    let l = Arc::new(QpLedger::<Fake>::new(3, None, false));
    watch.add(&l, Role::Recv);
    let (a, fa) = region(&reg, 1, true);
    let (b, fb) = region(&reg, 2, true);
    let (sa, sb) = ([sge(1)], [sge(2)]);
    let wrs = [RecvWr::new(0, &sa[..]), RecvWr::new(0, &sb[..])];
    assert_eq!(lock(&l.recv).hold(&reg, &wrs), None);
    lock(&l.recv).posted(&wrs);
    drop((a, b));
    // The poller's stale view of the count (what `add` stored, not yet visible to it).
    watch.every.store(0, Ordering::Relaxed);
    watch.settle_now(
        [(3, false, 0, 0), (3, true, WcOpcode::RECV.0, 0)].into_iter(),
        None,
    );
    assert!(
        freed(&fa) && freed(&fb),
        "both receives are over: the flush before the success was counted"
    );
}

/// The bound of the kept windows (`SendLedger::kept`), exactly: one entry per distinct window
/// bound since the last successful signaled ordered completion polled, whatever the SENDs'
/// successes between; the next such success releases every entry before it, and what is
/// bound after it stays.
#[test]
fn kept_windows_are_the_distinct_windows_bound_since_the_last_ordered_success() {
    let l = Arc::new(QpLedger::<Fake>::new(9, None, false));
    let send = Watch::default();
    send.add(&l, Role::Send);
    let flags: Vec<_> = (0..5).map(|_| Arc::new(AtomicBool::new(false))).collect();
    let windows: Vec<Arc<dyn Send + Sync>> = flags
        .iter()
        .map(|f| Arc::new(Window(f.clone())) as Arc<dyn Send + Sync>)
        .collect();
    // 20 unsignaled binds over the 5 windows, each followed by a signaled SEND's success.
    for i in 0..20 {
        post_bind(&l, bind(false), windows[i % 5].clone());
        send.settle_now([(9, true, WcOpcode::SEND.0, 0)].into_iter(), None);
        assert_eq!(
            lock(&l.send).holding(),
            (i + 1).min(5),
            "one entry per distinct window bound so far"
        );
    }
    drop(windows);
    assert!(flags.iter().all(|f| !freed(f)), "no ordered success yet");
    // A signaled READ after them, then a bind of a new window after the READ.
    let wrs = [read(&[], true)];
    assert_eq!(lock(&l.send).hold(&Registry::default(), &wrs), None);
    lock(&l.send).posted(&wrs, false);
    let later = Arc::new(AtomicBool::new(false));
    post_bind(&l, bind(false), Arc::new(Window(later.clone())));
    send.settle_now([(9, true, WcOpcode::RDMA_READ.0, 0)].into_iter(), None);
    assert!(
        flags.iter().all(|f| freed(f)),
        "the READ's success covers all five"
    );
    assert!(!freed(&later), "the bind after the READ is still kept");
    assert_eq!(lock(&l.send).holding(), 1);
}
