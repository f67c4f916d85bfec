//! What a posted request may still write stays allocated until the request is seen to be over.
//!
//! Deregistration does not fence the device on every provider: siw's `siw_dereg_mr` returns
//! at once while a READ response or a multi-segment SEND keeps placing data through the
//! memory reference it took at the first fragment (docs/architecture.md, "Why this is sound").
//! So rverbs does not trust it: a safe [`Mr`](crate::mr::Mr) keeps its registration and its
//! memory in a [`Region`](crate::pd::region::Region) (the PD's, `pd/region.rs`) behind an
//! `Arc`, and every safe post of a request that the device may *write* through (a receive, an
//! RDMA READ's sink, an atomic's result) leaves a clone of that `Arc` in a ledger of the queue
//! it was posted on. The ledger is generic over what it holds ([`Holdable`]), so that it
//! imports no object. Dropping the `Mr` drops only its own
//! clone; the region is deregistered and its memory freed when the last clone goes, never
//! earlier than one of:
//!
//! - **a receive queue**: that many receive completions were polled. Receives complete one by
//!   one in the order they were posted, each once (success or flush). Counted: every success
//!   completion with a receive opcode, and every completion on a CQ that is only this QP's
//!   receive CQ; an error completion on a CQ shared by both queues is counted only when its
//!   opcode is a receive's (rxe leaves a flushed receive's opcode 0, a send's number, so it is
//!   not counted: which can only hold memory longer). A completion the provider made up
//!   ([`Seen::matched`] false) is never counted.
//! - **a shared receive queue**: its own completion was polled (SRQ receives complete in no
//!   fixed order across its QPs, but each completion names its receive's `wr_id`; a `wr_id`
//!   posted twice waits for both), also when it is polled after its QP was destroyed (the
//!   QP's tombstone keeps a weak reference to the SRQ's ledger: [`Watch`]).
//! - **a send queue**: a later or equal signaled READ/atomic completed with success. READs and
//!   atomics complete in their order among themselves on every provider (siw's ORQ, rxe's
//!   completer, mlx5's queue), but not in order with the sends around them on siw (a SEND
//!   completes when it is handed to TCP, before an earlier READ's response has arrived), so
//!   only the completion of a READ or atomic releases a sink, and an unsignaled one only with
//!   the next signaled one. Memory-window binds are numbered with them ([`ordered`]; rxe and
//!   mlx5, the providers with windows, complete their send queue in order): a safe bind keeps
//!   its window, and so the regions the window keeps, until a later or equal signaled READ,
//!   atomic or bind completed with success ([`SendLedger::keep`]), so that no window is
//!   deallocated (its key handed to a new window) while a bind naming it may still execute.
//! - the QP (or SRQ) is destroyed: every provider stops placing data for a QP before its
//!   destroy returns (siw: under the QP's state lock, which its receive path takes; rxe:
//!   `rxe_cleanup_task` waits, with no timeout, for the QP's tasks, where every copy runs).
//!
//! siw alone also reads a SEND's or WRITE's source through the reference it took when the
//! request started, so there the send ledger holds sources too, until a signaled request at
//! or after them completes with success ([`SendLedger::other_completed`],
//! [`SendLedger::sink_completed`]). And a peer may still be writing (or reading) a region with
//! remote access after its deregistration on siw (which waits for nothing) and on rxe (which
//! waits for it only until a 50 s timeout), so there each PD keeps such memory until the QPs
//! that could reach it are destroyed ([`Fence`]).
//!
//! Counting fewer completions than happened only holds memory longer, never shorter, so a
//! completion that cannot be classified is not counted. The raw (`unsafe`) posts hold
//! nothing but still count, so that a safe request's place in the queue stays right.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::error::{PostError, PostFault};
use crate::kernel::sync::{SpinGuard, SpinLock};
use crate::wc::WcOpcode;
use crate::wr::{RecvWr, SendFlags, SendOp, SendWr, SgeList};

/// Locks `m`; a panic under one of these locks leaves counters and `Arc`s, still usable.
#[inline(always)]
pub(crate) fn lock<L: Lock + ?Sized>(m: &L) -> L::Guard<'_> {
    m.take()
}

/// The lock of the ledgers a post or a poll takes ([`QpLedger`], an SRQ's, a CQ's [`Watch`]):
/// the data path's [`SpinLock`] (one compare-and-swap and one store when uncontended, as the
/// QP's and CQ's own locks). Each is held for a few counter updates, or across one
/// provider post (ring writes, at most a doorbell), the sections `SpinLock` is made for. It
/// does not poison, which [`lock`] ignores on a `Mutex` anyway.
pub(crate) type LedgerLock<T> = SpinLock<T>;

/// What [`lock`] takes: a `Mutex` (poisoning ignored: see [`lock`]) or a [`LedgerLock`].
pub(crate) trait Lock {
    type Guard<'a>
    where
        Self: 'a;
    fn take(&self) -> Self::Guard<'_>;
}

impl<T> Lock for Mutex<T> {
    type Guard<'a>
        = MutexGuard<'a, T>
    where
        T: 'a;
    #[inline]
    fn take(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<L: Lock + ?Sized> Lock for Arc<L> {
    type Guard<'a>
        = L::Guard<'a>
    where
        L: 'a;
    #[inline(always)]
    fn take(&self) -> L::Guard<'_> {
        (**self).take()
    }
}

impl<T> Lock for SpinLock<T> {
    type Guard<'a>
        = SpinGuard<'a, T>
    where
        T: 'a;
    #[inline(always)]
    fn take(&self) -> SpinGuard<'_, T> {
        self.lock()
    }
}

/// A PD's safe regions by local key, so that a post can find what an SGE names: owned ones
/// by a weak reference, borrowed ones (`None`) by their key alone, so that a look-up never
/// holds a borrowed region past its `Mr` (a transient `Arc` would delay its deregistration
/// past the end of the borrow).
#[derive(Debug)]
pub(crate) struct Registry<R> {
    map: Mutex<HashMap<u32, Option<Weak<R>>>>,
}

impl<R> Default for Registry<R> {
    fn default() -> Self {
        Registry {
            map: Mutex::default(),
        }
    }
}

/// What a ledger holds: a PD's region (`pd::region::Region`), or a test's stand-in.
pub(crate) trait Holdable {
    /// Its local key.
    fn lkey(&self) -> u32;
    /// True when it may be given back later than its `Mr`'s drop (owned memory).
    fn deferrable(&self) -> bool;
}

/// What a local key of the PD names.
enum Found<R> {
    Owned(Arc<R>),
    Borrowed,
    Nothing,
}

impl<R: Holdable> Registry<R> {
    /// Region `r` was registered.
    pub(crate) fn insert(&self, r: &Arc<R>) {
        let entry = r.deferrable().then(|| Arc::downgrade(r));
        lock(&self.map).insert(r.lkey(), entry);
    }

    /// Region `lkey` is being deregistered (before the kernel may give its key to another).
    pub(crate) fn remove(&self, lkey: u32) {
        lock(&self.map).remove(&lkey);
    }

    fn find(&self, lkey: u32) -> Found<R> {
        match lock(&self.map).get(&lkey) {
            Some(Some(w)) => w.upgrade().map_or(Found::Nothing, Found::Owned),
            Some(None) => Found::Borrowed,
            None => Found::Nothing,
        }
    }
}

/// A region held for requests up to `last` (a queue's sequence number).
#[derive(Debug)]
struct Held<R> {
    last: u64,
    region: Arc<R>,
}

/// What a ledger let go of under a lock, for the lock's taker to drop once every lock is
/// released ([`Freed::default`] before the first lock is taken, so that it drops last, also
/// while unwinding).
///
/// Dropping the last `Arc` of a region deregisters it (a syscall) and drops its memory (a
/// user's [`MrMemory`](crate::mr::MrMemory), whose drop may post or poll); of a window, it
/// deallocates it. Under the ring's or a ledger's spin lock the first would make every other
/// poller spin through a syscall, and the second would spin forever on a lock its own thread
/// holds. So no release point of a ledger drops anything: each moves it here.
pub(crate) struct Freed<R>(Vec<Gone<R>>);

/// One thing a ledger let go of ([`Freed`]).
enum Gone<R> {
    Region(#[allow(dead_code)] Arc<R>),
    Kept(#[allow(dead_code)] Arc<dyn Send + Sync>),
    Srq(#[allow(dead_code)] Arc<LedgerLock<RecvLedger<R>>>),
    Qp(#[allow(dead_code)] Arc<QpLedger<R>>),
}

impl<R> Default for Freed<R> {
    #[inline(always)]
    fn default() -> Self {
        Freed(Vec::new())
    }
}

impl<R> std::fmt::Debug for Freed<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freed").field("len", &self.0.len()).finish()
    }
}

impl<R> Freed<R> {
    /// Things held for their drop (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Drops what it holds, now (the caller let go of every lock), leaving it empty: then it
    /// owns no element and no allocation, and the caller forgets it (`mem::forget`, which
    /// leaks nothing) instead of dropping it, so that no drop glue runs on the common path
    /// where nothing was released (the list never allocated: a `Vec`'s length is at most
    /// its capacity). In place, not by value: a by-value call copies the list first.
    #[inline(always)]
    pub(crate) fn release(&mut self) {
        if self.0.capacity() != 0 {
            Self::release_slow(&mut self.0);
        }
    }

    #[cold]
    #[inline(never)]
    fn release_slow(v: &mut Vec<Gone<R>>) {
        drop(std::mem::take(v));
    }
}

/// Removes from `v` the elements `keep` says no to, in place and in order, handing each to
/// `out` (`Vec::retain` with the removed elements moved out, not dropped).
#[inline]
fn retain_into<T>(v: &mut Vec<T>, mut keep: impl FnMut(&T) -> bool, mut out: impl FnMut(T)) {
    let mut n = 0;
    for i in 0..v.len() {
        if keep(&v[i]) {
            v.swap(n, i);
            n += 1;
        }
    }
    v.drain(n..).for_each(&mut out);
}

/// Holds the region of `lkey` for request `seq`. `Err(())`: the region is over borrowed memory,
/// whose release cannot wait (the borrow ends when its scope does), so it may not be written by
/// a safe request. An `lkey` of no safe region of the PD is not held: the device refuses a key
/// of another PD, and a [`register_raw`](crate::mr::register_raw) region is its caller's
/// promise.
#[inline]
fn hold<R: Holdable>(
    held: &mut Vec<Held<R>>,
    reg: &Registry<R>,
    lkey: u32,
    seq: u64,
) -> Result<Option<usize>, ()> {
    if let Some(at) = held.iter().position(|h| h.region.lkey() == lkey) {
        let h = &mut held[at];
        h.last = h.last.max(seq);
        return Ok(Some(at));
    }
    match reg.find(lkey) {
        Found::Owned(region) => {
            held.push(Held { last: seq, region });
            Ok(Some(held.len() - 1))
        }
        Found::Borrowed => Err(()),
        Found::Nothing => Ok(None),
    }
}

/// The ledger of a receive queue (a QP's, or with `slots` an SRQ's).
#[derive(Debug)]
pub(crate) struct RecvLedger<R> {
    posted: u64,
    done: u64,
    /// A QP's own queue: regions held up to a receive's number.
    held: Vec<Held<R>>,
    /// At most the smallest `last` of `held` (`u64::MAX` when nothing is held): a completion
    /// that leaves `done` at or below it releases nothing, so [`completed`](Self::completed)
    /// looks at `held` only when `done` passes it. A lower bound, not the minimum: `hold`
    /// only lowers it (raising a `last` leaves it), and `completed` makes it exact again when
    /// it looks.
    low: u64,
    /// An SRQ: its receives by `wr_id`, each released when its completion names it.
    slots: Option<HashMap<u64, Slot<R>>>,
    /// An SRQ: what [`hold`](Self::hold) found for the receives about to be posted (their
    /// index in the list), moved to `slots` for those that went to the queue.
    pending: Vec<(usize, Arc<R>)>,
}

/// The SRQ receives posted with one `wr_id` that have not completed, and what they write.
#[derive(Debug)]
struct Slot<R> {
    outstanding: u64,
    regions: Vec<Arc<R>>,
}

impl<R> Default for RecvLedger<R> {
    fn default() -> Self {
        RecvLedger {
            posted: 0,
            done: 0,
            held: Vec::new(),
            low: u64::MAX,
            slots: None,
            pending: Vec::new(),
        }
    }
}

impl<R: Holdable> RecvLedger<R> {
    /// An SRQ's ledger. Its receives are taken by several QPs and complete in no fixed order,
    /// but each completion names its receive's `wr_id` (valid in every completion, errors
    /// included), so each receive is released by its own completion: the regions of the
    /// receives posted with a `wr_id` go when as many completions named it as receives were
    /// posted with it (raw ones included; a `wr_id` used twice waits for both).
    pub(crate) fn shared() -> Self {
        RecvLedger {
            slots: Some(HashMap::new()),
            ..RecvLedger::default()
        }
    }

    /// Holds the regions the receives of `wrs` write, as if they were all posted next; stops
    /// at the first that names borrowed memory: its index and the key. (An SRQ keeps them
    /// aside until [`posted`](Self::posted) says which went to the queue.)
    pub(crate) fn hold<S: SgeList>(
        &mut self,
        reg: &Registry<R>,
        wrs: &[RecvWr<'_, S>],
    ) -> Option<(usize, u32)> {
        self.pending.clear();
        // The last key held and where in `held`: a list's receives mostly name the same
        // region, whose entry then only takes the later number, as `hold` would give it,
        // without the search (`held` only grows here, so the index stays right).
        let mut last: Option<(u32, usize)> = None;
        for (i, w) in wrs.iter().enumerate() {
            let seq = self.posted + i as u64;
            for s in w.sge {
                let lkey = s.raw_sge().lkey;
                if let (None, Some((k, at))) = (&self.slots, last) {
                    if k == lkey {
                        let h = &mut self.held[at];
                        h.last = h.last.max(seq);
                        continue;
                    }
                }
                let r = if self.slots.is_some() {
                    match reg.find(lkey) {
                        Found::Owned(region) => {
                            self.pending.push((i, region));
                            Ok(())
                        }
                        Found::Borrowed => Err(()),
                        Found::Nothing => Ok(()),
                    }
                } else {
                    // A new entry is the only way the smallest `last` goes down (`hold`
                    // otherwise raises one): `low` stays a lower bound.
                    self.low = self.low.min(seq);
                    hold(&mut self.held, reg, lkey, seq).map(|at| {
                        last = at.map(|at| (lkey, at));
                    })
                };
                if r.is_err() {
                    return Some((i, lkey));
                }
            }
        }
        None
    }

    /// Posts `wrs` with `post` under the ledger's lock `l`, so that the ledger's order is the
    /// queue's: with `hold` (a safe post) the regions the receives write are held first, and
    /// a receive naming borrowed memory stops the list there (those before it are posted);
    /// every receive that went to the queue is counted. The one receive path of a QP and an
    /// SRQ; the caller names the queue in the error.
    pub(crate) fn post(
        l: &LedgerLock<Self>,
        reg: &Registry<R>,
        wrs: &[RecvWr<'_>],
        hold: bool,
        post: impl FnOnce(&[RecvWr<'_>]) -> Result<(), PostError>,
    ) -> Result<(), PostError> {
        let mut ledger = lock(l);
        let (ok, refused) = match hold.then(|| ledger.hold(reg, wrs)).flatten() {
            Some((i, lkey)) => (&wrs[..i], Some((i, lkey))),
            None => (wrs, None),
        };
        let r = if ok.is_empty() {
            Ok(())
        } else {
            let r = post(ok);
            ledger.posted(&ok[..went(&r, ok.len())]);
            r
        };
        // What an SRQ kept aside and did not keep (receives that never went to the queue, a
        // region named twice) may be a region's last handle (a key found in the PD's table
        // is not the borrowed `Mr`'s own region when two devices' keys collide): let go of
        // it after the lock, as a settle does.
        let leftover = std::mem::take(&mut ledger.pending);
        drop(ledger);
        drop(leftover);
        r?;
        match refused {
            Some((i, lkey)) => Err(PostError::refused(i, PostFault::BorrowedSink { lkey })),
            None => Ok(()),
        }
    }

    /// `wrs` (the first of the list [`hold`](Self::hold) saw) went to the queue.
    pub(crate) fn posted<S: SgeList>(&mut self, wrs: &[RecvWr<'_, S>]) {
        self.posted += wrs.len() as u64;
        let Some(slots) = &mut self.slots else {
            return;
        };
        for w in wrs {
            slots
                .entry(w.wr_id)
                .or_insert_with(|| Slot {
                    outstanding: 0,
                    regions: Vec::new(),
                })
                .outstanding += 1;
        }
        let mut rest = Vec::new();
        for (i, region) in self.pending.drain(..) {
            // Those past `wrs` never went to the queue, and a region a slot holds already is
            // not held twice: left in `pending`, let go of by the caller after its lock.
            match wrs.get(i).and_then(|w| slots.get_mut(&w.wr_id)) {
                Some(slot) if !slot.regions.iter().any(|r| Arc::ptr_eq(r, &region)) => {
                    slot.regions.push(region)
                }
                _ => rest.push((i, region)),
            }
        }
        self.pending = rest;
    }

    /// One receive completed: for a QP's own queue the oldest outstanding one, for an SRQ the
    /// one posted with `wr_id`. What it lets go of goes to `freed`.
    #[inline]
    pub(crate) fn completed(&mut self, wr_id: u64, freed: &mut Freed<R>) {
        self.done += 1;
        if self.slots.is_some() {
            return self.slot_completed(wr_id, freed);
        }
        // Nothing held is released before `done` passes the smallest `last` (`low`).
        if self.done > self.low {
            self.release(freed);
        }
    }

    /// An SRQ's receive posted with `wr_id` completed.
    #[inline(never)]
    fn slot_completed(&mut self, wr_id: u64, freed: &mut Freed<R>) {
        if let Some(slots) = &mut self.slots {
            if let Some(slot) = slots.get_mut(&wr_id) {
                slot.outstanding -= 1;
                if slot.outstanding == 0 {
                    if let Some(slot) = slots.remove(&wr_id) {
                        freed.0.extend(slot.regions.into_iter().map(Gone::Region));
                    }
                }
            }
        }
    }

    /// Lets go of what no outstanding receive writes (into `freed`); `low` exact again.
    #[inline(never)]
    fn release(&mut self, freed: &mut Freed<R>) {
        let done = self.done;
        retain_into(
            &mut self.held,
            |h| h.last >= done,
            |h| {
                freed.0.push(Gone::Region(h.region));
            },
        );
        self.low = self.held.iter().map(|h| h.last).min().unwrap_or(u64::MAX);
    }

    /// Regions held (tests).
    #[cfg(test)]
    fn holding(&self) -> usize {
        match &self.slots {
            Some(slots) => slots.values().map(|s| s.regions.len()).sum(),
            None => self.held.len(),
        }
    }
}

/// How many of the `n` requests a provider's post went to the queue: all on success, else
/// those before the one that failed.
#[inline]
pub(crate) fn went(r: &Result<(), PostError>, n: usize) -> usize {
    r.as_ref().map_or_else(|e| e.posted().min(n), |()| n)
}

/// True for the send operations the device writes local memory for: the sink of an RDMA
/// READ, the result buffer of an atomic.
#[inline]
pub(crate) fn writes_local(op: &SendOp) -> bool {
    matches!(
        op,
        SendOp::RdmaRead { .. } | SendOp::AtomicCmpSwp { .. } | SendOp::AtomicFetchAdd { .. }
    )
}

/// True for the send operations numbered in the send ledger's ordered class
/// ([`SendLedger`]): the READs and atomics ([`writes_local`]) and the memory-window binds.
/// They complete in their order among themselves on every provider that carries them (binds:
/// rxe's completer and mlx5's send queue complete every request in queue order; siw and EFA
/// have no binds).
#[inline]
pub(crate) fn ordered(op: &SendOp) -> bool {
    writes_local(op) || matches!(op, SendOp::BindMw(_))
}

/// What a posted bind keeps alive until it is over: its window (which keeps the regions it
/// was bound into, `mw::Mw`), type-erased so that the ledger imports no object.
pub(crate) struct Kept {
    /// The bind's number among the ordered requests ([`ordered`]).
    last: u64,
    /// Held for its drop; compared by address so that one window has one entry.
    what: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").field("last", &self.last).finish()
    }
}

/// The ledger of a send queue: its READs, atomics and binds, numbered in posting order, and on
/// siw the sources of its other requests, numbered with every request.
#[derive(Debug)]
pub(crate) struct SendLedger<R> {
    /// Ordered requests ([`ordered`]) posted: READs, atomics, binds.
    sinks: u64,
    sinks_done: u64,
    /// The signaled ordered requests: `(their number, request number)`.
    signaled: VecDeque<(u64, u64)>,
    held: Vec<Held<R>>,
    /// The windows of posted binds ([`keep`](Self::keep)): kept until a signaled ordered
    /// request at or after the bind completed with success, or the QP is destroyed (the
    /// ledger goes). A window deallocated while its bind is still queued would let the bind
    /// reach whichever window gets its key next, in whichever region got the region's key.
    ///
    /// Its bound, exactly: one entry per distinct window whose latest bind on this QP is
    /// numbered at or after `sinks_done`, that is, bound since the last successful signaled
    /// READ, atomic or bind that was polled (or since the QP's creation): at most the binds
    /// posted since then, and at most the windows they name. Each keeps its `Mw` (the kernel
    /// window and the regions it was bound into). The next such success polled empties it
    /// of every entry numbered before it, the QP's destroy of all. Sends and WRITEs release
    /// nothing here, whatever their signal: a QP that binds distinct windows without a signal
    /// and then only sends grows it by one per window until one of those. Releasing on any
    /// signaled success would need the send queue's in-order completion (rxe's and mlx5's
    /// RC queues; not EFA's SRD) and each signaled request's place in the queue: every
    /// signaled post numbered and every signaled send completion counted from the QP's start,
    /// the send ledger's lock on each post and a settle for each SEND's completion, where
    /// the data path now takes neither (`Watch::settle`, `Qp::post_send_checked`). Test:
    /// `kept_windows_are_the_distinct_windows_bound_since_the_last_ordered_success`.
    kept: Vec<Kept>,
    /// siw: the sources of sends and WRITEs are held too (`siw_tx_hdt` reads them through the
    /// memory reference `siw_check_sgl_tx` took when the request started, whatever happens to
    /// the region meanwhile): a source dropped mid-transfer would send the bytes of whatever
    /// the allocator put there next.
    sources: bool,
    /// Requests posted (counted only with `sources`).
    wrs: u64,
    /// The signaled requests that are not READs or atomics, by request number.
    signaled_other: VecDeque<u64>,
    /// Sources held up to a request number.
    src: Vec<Held<R>>,
}

impl<R> Default for SendLedger<R> {
    fn default() -> Self {
        SendLedger {
            sinks: 0,
            sinks_done: 0,
            signaled: VecDeque::new(),
            held: Vec::new(),
            kept: Vec::new(),
            sources: false,
            wrs: 0,
            signaled_other: VecDeque::new(),
            src: Vec::new(),
        }
    }
}

/// True for a request whose SGEs the device reads after the post: not the sink of a READ or
/// an atomic, not an INLINE copy (made during the post).
#[inline]
fn reads_local<S>(w: &SendWr<'_, S>) -> bool {
    !writes_local(&w.op) && !w.flags.contains(SendFlags::INLINE) && !w.sge.is_empty()
}

impl<R: Holdable> SendLedger<R> {
    /// A send queue whose sources are held as well (siw: see `sources`).
    pub(crate) fn holding_sources() -> Self {
        SendLedger {
            sources: true,
            ..SendLedger::default()
        }
    }

    /// As [`RecvLedger::hold`], for the READ sinks and atomic results of `wrs`, and with
    /// `sources` the regions the other requests read (borrowed ones are read as before, not
    /// held: their release cannot wait).
    pub(crate) fn hold<S: SgeList>(
        &mut self,
        reg: &Registry<R>,
        wrs: &[SendWr<'_, S>],
    ) -> Option<(usize, u32)> {
        let mut ord = self.sinks;
        for (i, w) in wrs.iter().enumerate() {
            if !writes_local(&w.op) {
                if self.sources && reads_local(w) {
                    let n = self.wrs + i as u64;
                    for s in w.sge {
                        // Err: borrowed memory, read but not held (see above).
                        let _ = hold(&mut self.src, reg, s.raw_sge().lkey, n);
                    }
                }
                if ordered(&w.op) {
                    ord += 1; // a bind: numbered, writes nothing through SGEs
                }
                continue;
            }
            for s in w.sge {
                let lkey = s.raw_sge().lkey;
                if hold(&mut self.held, reg, lkey, ord).is_err() {
                    return Some((i, lkey));
                }
            }
            ord += 1;
        }
        None
    }

    /// `wrs` went to the queue.
    #[inline]
    pub(crate) fn posted<S: SgeList>(&mut self, wrs: &[SendWr<'_, S>], sig_all: bool) {
        for w in wrs {
            let signaled = sig_all || w.flags.contains(SendFlags::SIGNALED);
            if ordered(&w.op) {
                if signaled {
                    self.signaled.push_back((self.sinks, self.wrs));
                }
                self.sinks += 1;
            } else if self.sources && signaled {
                self.signaled_other.push_back(self.wrs);
            }
            if self.sources {
                self.wrs += 1;
            }
        }
    }

    /// The number the next ordered request ([`ordered`]) will get when posted.
    #[inline]
    pub(crate) fn next_ordered(&self) -> u64 {
        self.sinks
    }

    /// The bind numbered `ord` ([`next_ordered`](Self::next_ordered) before it was posted)
    /// went to the queue: keeps `what` (its window) until it is over.
    pub(crate) fn keep(&mut self, ord: u64, what: Arc<dyn Send + Sync>) {
        // A window already kept for an earlier bind keeps one entry, now numbered with the
        // later bind: it stays until the later bind is over, which is no sooner than the
        // earlier one (ordered requests complete in order), and binding one window again and
        // again never grows the list. (`what` dropped here is a second `Arc` of that window.)
        let at = Arc::as_ptr(&what).cast::<()>();
        if let Some(k) = self
            .kept
            .iter_mut()
            .find(|k| std::ptr::eq(Arc::as_ptr(&k.what).cast::<()>(), at))
        {
            k.last = k.last.max(ord);
            return;
        }
        self.kept.push(Kept { last: ord, what });
    }

    /// A READ, atomic or bind completed with success: the oldest signaled one, so it and
    /// every ordered request before it are over, and on siw every request posted before it was
    /// sent (siw sends the queue in order, and a READ's request before its response can come).
    /// What it lets go of goes to `freed`.
    pub(crate) fn sink_completed(&mut self, freed: &mut Freed<R>) {
        if let Some((o, n)) = self.signaled.pop_front() {
            self.sinks_done = self.sinks_done.max(o + 1);
            let done = self.sinks_done;
            let out = &mut freed.0;
            retain_into(
                &mut self.held,
                |h| h.last >= done,
                |h| {
                    out.push(Gone::Region(h.region));
                },
            );
            retain_into(
                &mut self.kept,
                |k| k.last >= done,
                |k| {
                    out.push(Gone::Kept(k.what));
                },
            );
            if self.sources {
                retain_into(
                    &mut self.src,
                    |h| h.last >= n,
                    |h| {
                        out.push(Gone::Region(h.region));
                    },
                );
            }
        }
    }

    /// Another request completed with success (siw: the oldest signaled one that is not a
    /// READ or atomic, since siw completes those in queue order once they are handed to TCP,
    /// `siw_qp_sq_process`): every request up to it has been sent, its sources read.
    /// What it lets go of goes to `freed`.
    pub(crate) fn other_completed(&mut self, freed: &mut Freed<R>) {
        if let Some(n) = self.signaled_other.pop_front() {
            retain_into(
                &mut self.src,
                |h| h.last > n,
                |h| {
                    freed.0.push(Gone::Region(h.region));
                },
            );
        }
    }

    #[cfg(test)]
    fn holding(&self) -> usize {
        self.held.len() + self.src.len() + self.kept.len()
    }
}

/// A QP's ledgers: its send queue's, and its receive queue's (its SRQ's when it has one).
#[derive(Debug)]
pub(crate) struct QpLedger<R> {
    qp_num: u32,
    /// siw: the send ledger holds sources too, and every post and completion goes through it.
    pub(crate) sources: bool,
    pub(crate) send: LedgerLock<SendLedger<R>>,
    pub(crate) recv: Arc<LedgerLock<RecvLedger<R>>>,
}

impl<R: Holdable> QpLedger<R> {
    /// `sources`: hold the regions sends read too (siw, [`SendLedger::holding_sources`]).
    pub(crate) fn new(
        qp_num: u32,
        srq: Option<&Arc<LedgerLock<RecvLedger<R>>>>,
        sources: bool,
    ) -> Self {
        QpLedger {
            qp_num,
            sources,
            send: LedgerLock::new(if sources {
                SendLedger::holding_sources()
            } else {
                SendLedger::default()
            }),
            recv: srq
                .cloned()
                .unwrap_or_else(|| Arc::new(LedgerLock::new(RecvLedger::default()))),
        }
    }
}

/// Which of a QP's queues complete on a CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Only its send queue.
    Send,
    /// Only its receive queue.
    Recv,
    /// Both.
    Both,
}

/// What a ledger needs of one polled completion.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    pub(crate) qp_num: u32,
    /// Success.
    pub(crate) ok: bool,
    /// The [`WcOpcode`]'s number.
    pub(crate) opcode: u32,
    pub(crate) wr_id: u64,
    /// The provider matched it to a request posted on `qp_num`
    /// ([`WorkCompletion::unmatched`](crate::wc::WorkCompletion::unmatched) false). mlx5's
    /// parser makes completions up (`wr_id` 0, `GENERAL_ERR`) for a CQE naming a QP or WQE it
    /// has nothing posted for, or whose opcode or format it cannot attribute: counted, one of
    /// them would release a receive (or on an SRQ, wr_id 0's) that the device may still write.
    pub(crate) matched: bool,
}

impl From<&crate::wc::WorkCompletion> for Seen {
    #[inline(always)]
    fn from(w: &crate::wc::WorkCompletion) -> Self {
        Seen {
            qp_num: w.qp_num,
            ok: w.status.is_success(),
            opcode: w.opcode.0,
            wr_id: w.wr_id,
            matched: !w.unmatched,
        }
    }
}

impl From<&crate::wc::RawWc> for Seen {
    #[inline(always)]
    fn from(w: &crate::wc::RawWc) -> Self {
        Seen {
            qp_num: w.qp_num,
            ok: w.is_success(),
            opcode: w.opcode,
            wr_id: w.wr_id,
            matched: !w.is_unmatched(),
        }
    }
}

impl Seen {
    /// True when this completion can settle something: the provider matched it to a request
    /// (one it made up is no sign that any request is over), and it is a receive's or a
    /// successful ordered request's ([`may_settle`](Self::may_settle)), or any while
    /// (`every`) a QP here settles on every completion or a tombstone stands.
    #[inline(always)]
    fn counts(&self, every: bool) -> bool {
        self.matched && (every || self.may_settle())
    }

    /// True when this completion can settle a ledger of a QP whose receives complete on
    /// another CQ or on this one by opcode (`Role::Send`, `Role::Both`) and that holds no
    /// sources: a receive's (success or error, `is_recv`), or a successful ordered request's
    /// (`settle_one`). Every other completion settles nothing there.
    #[inline(always)]
    fn may_settle(&self) -> bool {
        match WcOpcode(self.opcode) {
            WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM => true,
            op => self.ok && is_sink(op),
        }
    }
}

/// Tests: `(qp_num, success, opcode, wr_id)`, matched.
#[cfg(test)]
impl From<(u32, bool, u32, u64)> for Seen {
    fn from((qp_num, ok, opcode, wr_id): (u32, bool, u32, u64)) -> Self {
        Seen {
            qp_num,
            ok,
            opcode,
            wr_id,
            matched: true,
        }
    }
}

/// A CQ's QPs, whose ledgers its completions settle.
///
/// A completion names its QP only by number, and a number is reused once its QP is destroyed
/// (siw gives a new QP the lowest free one), while the destroyed QP's completions may still sit
/// unpolled in the ring. Counted for the new QP, they would release its regions while its own
/// requests are still posted. So a destroyed QP leaves a tombstone: completions with its
/// number are counted for no one until a poll that began after the destroy has found the ring
/// empty (a destroyed QP adds nothing to the ring after its destroy returns, and completions
/// leave the ring in order): only then do completions with that number belong to a live QP.
/// The exception: a receive of the destroyed QP's SRQ, which outlives it, still settles the
/// SRQ by its `wr_id` where that cannot be another queue's (a pinned `wr_id` would hold every
/// region posted under it later).
#[derive(Debug)]
pub(crate) struct Watch<R> {
    list: LedgerLock<WatchList<R>>,
    /// Tombstones made so far; a poll reads it before it reads the ring.
    epoch: AtomicU64,
    /// How many tombstones stand (kept under `list`'s lock): an empty poll with none settles
    /// nothing and skips the lock.
    tombs: AtomicUsize,
    /// How many live QPs here settle something on every completion (a copy of
    /// `WatchList::every`, kept under `list`'s lock, read without it as a hint): those whose receive queue alone completes here (`Role::Recv`: every completion
    /// is a receive), and siw's (`sources`: every success settles the send ledger). With none
    /// and no tombstone, only a receive's completion or a successful ordered one can settle a
    /// ledger ([`Seen::may_settle`]), and a poll of other completions skips the lock.
    every: AtomicUsize,
}

#[derive(Debug)]
struct WatchList<R> {
    live: Vec<(Arc<QpLedger<R>>, Role)>,
    /// [`Watch::every`] as a settle uses it: read under the lock, with the `live` it counts.
    every: usize,
    /// Destroyed QPs whose completions may still be in the ring.
    gone: Vec<Tomb<R>>,
}

/// A destroyed QP whose completions may still be in the ring.
#[derive(Debug)]
struct Tomb<R> {
    qp_num: u32,
    /// The [`Watch::epoch`] it was made at.
    made: u64,
    /// Its queues on this CQ.
    role: Role,
    /// Its SRQ's ledger, when it had one: the SRQ outlives it, and a receive it took from the
    /// SRQ is over only when its completion (polled after the destroy) says so. Weak: a
    /// tombstone keeps no SRQ alive (a destroyed SRQ released everything).
    srq: Option<Weak<LedgerLock<RecvLedger<R>>>>,
}

impl<R> Default for Watch<R> {
    fn default() -> Self {
        Watch {
            list: LedgerLock::new(WatchList {
                live: Vec::new(),
                every: 0,
                gone: Vec::new(),
            }),
            epoch: AtomicU64::new(0),
            tombs: AtomicUsize::new(0),
            every: AtomicUsize::new(0),
        }
    }
}

impl<R: Holdable> Watch<R> {
    pub(crate) fn add(&self, l: &Arc<QpLedger<R>>, role: Role) {
        let mut list = lock(&self.list);
        list.live.push((l.clone(), role));
        self.count_every(&mut list);
    }

    /// Recounts [`every`](Self::every), under `list`'s lock: the count a settle uses
    /// (`WatchList::every`), and its copy that a poll reads without the lock.
    fn count_every(&self, list: &mut WatchList<R>) {
        let n = list
            .live
            .iter()
            .filter(|(l, r)| *r == Role::Recv || l.sources)
            .count();
        list.every = n;
        self.every.store(n, Ordering::Relaxed);
    }

    /// QP `l` was destroyed: its completions still in the ring are counted for no one, but
    /// its SRQ's receives (named by `wr_id`) still settle the SRQ's ledger (see `settle`).
    /// The watch's `Arc` of its ledger goes to `freed` (the QP holds another while it is
    /// dropped, but the last one must not drop under the lock either).
    pub(crate) fn retire(&self, l: &Arc<QpLedger<R>>, freed: &mut Freed<R>) {
        let mut list = lock(&self.list);
        let mut role = None;
        retain_into(
            &mut list.live,
            |(x, _)| !Arc::ptr_eq(x, l),
            |(x, r)| {
                role = Some(r);
                freed.0.push(Gone::Qp(x));
            },
        );
        self.count_every(&mut list);
        let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        let role = role.unwrap_or(Role::Send);
        let mut srq = lock(&l.recv)
            .slots
            .is_some()
            .then(|| Arc::downgrade(&l.recv));
        // An older tombstone with this number (the kernel reused it, and the CQ was not
        // drained since): its QP's completions may still be in the ring, named by the same
        // number. The new tombstone settles its SRQ only when the older QP's completions are
        // that SRQ's too (the same SRQ, the same queues here); otherwise neither is counted.
        if let Some(old) = list.gone.iter().find(|t| t.qp_num == l.qp_num) {
            let same = old.role == role
                && matches!((&old.srq, &srq), (Some(a), Some(b)) if Weak::ptr_eq(a, b));
            if !same {
                srq = None;
            }
        }
        list.gone.retain(|t| t.qp_num != l.qp_num);
        list.gone.push(Tomb {
            qp_num: l.qp_num,
            made: e,
            role,
            srq,
        });
        self.tombs.store(list.gone.len(), Ordering::Relaxed);
    }

    /// The tombstones made so far: read by a poll, under the CQ's lock, before it reads the
    /// ring, and given back to [`settle`](Self::settle) when the poll found the ring empty.
    #[inline]
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// [`settle`](Self::settle) under the ring's lock `guard`, which it then releases, and
    /// only then drops what the settle released ([`Freed`]; dropped after the guard also
    /// while unwinding). A poll with nothing to settle or clear (the empty poll, the common
    /// one while waiting, or one whose completions cannot release anything) only releases
    /// the guard: no [`Freed`] is made and no call is made. Inlined into the poll, with the
    /// work that can release something behind one call
    /// ([`settle_live_unlocking`](Self::settle_live_unlocking)), which makes and drops the
    /// [`Freed`], so that a poll that calls nothing stays small enough to be inlined into its
    /// caller's loop.
    #[inline(always)]
    pub(crate) fn settle_unlocking<G, I>(&self, guard: G, wcs: I, drained: Option<u64>)
    where
        I: ExactSizeIterator + Clone,
        I::Item: Into<Seen>,
    {
        match self.plan(wcs, drained) {
            Plan::Nothing => drop(guard),
            Plan::Live(first, rest, all, hint) => {
                self.settle_live_unlocking(guard, first, rest, all, hint)
            }
            Plan::Tombs(from) => self.settle_with_tombs_unlocking(guard, from, drained),
        }
    }

    /// Settles the ledgers for the polled completions, in polled order. Call it under the
    /// CQ's lock (so that settles happen in the ring's order), with `drained: Some(epoch)` when
    /// the poll, which read [`epoch`](Self::epoch) before the ring, took fewer completions than
    /// it asked for (it emptied the ring). A completion the provider did not match to a posted
    /// request ([`Seen::matched`] false) settles nothing. What the ledgers let go of goes to
    /// `freed`, which the caller drops once it released the CQ's lock ([`Freed`]).
    #[inline(always)]
    pub(crate) fn settle<I>(&self, wcs: I, drained: Option<u64>, freed: &mut Freed<R>)
    where
        I: ExactSizeIterator + Clone,
        I::Item: Into<Seen>,
    {
        match self.plan(wcs, drained) {
            Plan::Nothing => {}
            Plan::Live(first, rest, all, hint) => self.settle_live(first, rest, all, hint, freed),
            Plan::Tombs(from) => self.settle_with_tombs(from, drained, freed),
        }
    }

    /// What a settle of `wcs` has to do, decided without the lock ([`settle`](Self::settle)).
    #[inline(always)]
    fn plan<I>(&self, wcs: I, drained: Option<u64>) -> Plan<impl Iterator<Item = Seen>, I>
    where
        I: ExactSizeIterator + Clone,
        I::Item: Into<Seen>,
    {
        // The two counts, read without the lock, are only hints of whether to take it: a
        // settle takes the lock for the first completion that counts under them, and then
        // counts again with the counts read under the lock (`WatchList::every`, `gone`),
        // from the first completion when they differ. Relaxed, and stale hints are safe:
        // - `every` (a QP here settles on every completion) is raised by `add` before its QP
        //   exists, but a completion of that QP reaches this poll through the device, not
        //   through a Rust synchronization that orders the store before this load. A stale 0
        //   skips the lock for completions that are no receive's and no ordered request's
        //   success: a `Role::Recv` QP's flushed receive with a send's opcode (rxe), a siw
        //   send's success. Counting fewer completions than happened only holds memory
        //   longer (module docs), never shorter: its ledger counts them no sooner than a
        //   later poll that took the lock reads the count under it.
        // - A stale `tombs` of 0 only skips the clearing, which a later drained poll does:
        //   a completion that counts takes the lock, and one of a tombstoned QP is then
        //   handled as such (`settle_live` checks `gone` under the lock).
        // - A stale nonzero count takes the lock for nothing, or counts completions that
        //   settle nothing (`settle_one` decides by the QP's role).
        let tombs = self.tombs.load(Ordering::Relaxed);
        let clear = drained.is_some() && tombs != 0;
        // The empty poll, the common one while waiting: nothing to settle or clear.
        if wcs.len() == 0 && !clear {
            return Plan::Nothing;
        }
        let hint = tombs != 0 || self.every.load(Ordering::Relaxed) != 0;
        let all = wcs.clone();
        let mut rest = wcs.map(Into::into);
        // Nor is there anything to settle when no completion counts ([`Seen::counts`]): the
        // lock is taken from the first that does.
        let first = rest.find(|s: &Seen| s.counts(hint));
        match (first, clear) {
            (Some(first), false) => Plan::Live(first, rest, all, hint),
            (None, false) => Plan::Nothing,
            (first, true) => Plan::Tombs(Polled {
                first,
                rest,
                all,
                hint,
            }),
        }
    }

    /// [`settle`](Self::settle) without tombstones to clear, from `first`, the first
    /// completion that counts under the `hint`, on through `rest`. A tombstone made meanwhile,
    /// or a count read under the lock that differs from the hint (both stale), sends it to
    /// [`settle_with_tombs`](Self::settle_with_tombs), which counts again with what it reads
    /// under the lock (from the first of `all` when the count differs) and clears nothing, as
    /// a stale count would have.
    #[inline(never)]
    fn settle_live<I, J>(&self, first: Seen, rest: I, all: J, hint: bool, freed: &mut Freed<R>)
    where
        I: Iterator<Item = Seen>,
        J: Iterator,
        J::Item: Into<Seen>,
    {
        self.settle_live_in(first, rest, all, hint, freed);
    }

    /// [`settle_live`](Self::settle_live) under the ring's lock `guard`, which it then
    /// releases, and only then drops what the settle released (the one call of a poll that
    /// settles: [`settle_unlocking`](Self::settle_unlocking)).
    #[inline(never)]
    fn settle_live_unlocking<G, I, J>(&self, guard: G, first: Seen, rest: I, all: J, hint: bool)
    where
        I: Iterator<Item = Seen>,
        J: Iterator,
        J::Item: Into<Seen>,
    {
        let mut freed = Freed::default();
        // Moved into a local made after `freed`, so that it drops first when unwinding.
        let guard = guard;
        self.settle_live_in(first, rest, all, hint, &mut freed);
        drop(guard);
        freed.release();
        // Empty now (`Freed::release`): forgetting it leaks nothing and skips its drop glue.
        std::mem::forget(freed);
    }

    /// The body of [`settle_live`](Self::settle_live).
    #[inline(always)]
    fn settle_live_in<I, J>(&self, first: Seen, rest: I, all: J, hint: bool, freed: &mut Freed<R>)
    where
        I: Iterator<Item = Seen>,
        J: Iterator,
        J::Item: Into<Seen>,
    {
        let list = lock(&self.list);
        if !list.gone.is_empty() || (list.every != 0) != hint {
            drop(list);
            let from = Polled {
                first: Some(first),
                rest,
                all,
                hint,
            };
            return self.settle_with_tombs(from, None, freed);
        }
        let mut at = 0;
        settle_live_one(&list.live, &mut at, first, freed);
        for seen in rest {
            if seen.counts(hint) {
                settle_live_one(&list.live, &mut at, seen, freed);
            }
        }
    }

    /// [`settle_with_tombs`](Self::settle_with_tombs) under the ring's lock `guard`, which
    /// it then releases, and only then drops what the settle released.
    #[cold]
    #[inline(never)]
    fn settle_with_tombs_unlocking<G, I, J>(
        &self,
        guard: G,
        from: Polled<I, J>,
        drained: Option<u64>,
    ) where
        I: Iterator<Item = Seen>,
        J: Iterator,
        J::Item: Into<Seen>,
    {
        let mut freed = Freed::default();
        // Moved into a local made after `freed`, so that it drops first when unwinding.
        let guard = guard;
        self.settle_with_tombs(from, drained, &mut freed);
        drop(guard);
        freed.release();
        // Empty now (`Freed::release`): forgetting it leaks nothing and skips its drop glue.
        std::mem::forget(freed);
    }

    /// [`settle`](Self::settle) where tombstones stand: the completions that count (as in
    /// [`settle_live`](Self::settle_live)), then (`drained`) clears those the poll's empty
    /// ring proved out.
    #[cold]
    #[inline(never)]
    fn settle_with_tombs<I, J>(
        &self,
        from: Polled<I, J>,
        drained: Option<u64>,
        freed: &mut Freed<R>,
    ) where
        I: Iterator<Item = Seen>,
        J: Iterator,
        J::Item: Into<Seen>,
    {
        let mut list = lock(&self.list);
        if list.live.is_empty() && list.gone.is_empty() {
            return;
        }
        let every = list.every != 0 || !list.gone.is_empty();
        let mut at = 0;
        let list_ = &*list;
        from.each(every, |seen| {
            let qp_num = seen.qp_num;
            if let Some(t) = list_.gone.iter().find(|t| t.qp_num == qp_num) {
                // A destroyed QP's, or its number's new QP's: counted for no one, except a
                // receive of the destroyed QP's SRQ (`wr_id` names it in whichever QP's
                // completion: safe when no live QP here has the number, or the one that
                // does shares the SRQ and the role).
                if let Some(srq) = t.srq.as_ref().and_then(Weak::upgrade) {
                    let same = |(l, r): &(Arc<QpLedger<R>>, Role)| {
                        l.qp_num != qp_num || (Arc::ptr_eq(&l.recv, &srq) && *r == t.role)
                    };
                    if list_.live.iter().all(same) && is_recv(t.role, seen.opcode) {
                        lock(&srq).completed(seen.wr_id, freed);
                    }
                    // Maybe the last `Arc` now (the SRQ was dropped meanwhile): its drop
                    // releases what it holds.
                    freed.0.push(Gone::Srq(srq));
                }
                return;
            }
            settle_live_one(&list_.live, &mut at, seen, freed);
        });
        if let Some(e) = drained {
            // Every tombstone made before the poll read the ring: its completions are out.
            list.gone.retain(|t| t.made > e);
            self.tombs.store(list.gone.len(), Ordering::Relaxed);
        }
    }
}

/// What a settle does ([`Watch::plan`]): nothing (no completion counts, no tombstone to
/// clear), the live QPs' ledgers from the first completion that counts (with the rest, all
/// of them again, and the hint they were counted under: [`Polled`]), or that with
/// tombstones to clear.
enum Plan<I, J> {
    Nothing,
    Live(Seen, I, J, bool),
    Tombs(Polled<I, J>),
}

/// A settle's completions, read up to the first that counted under the counts read without
/// the lock (`hint`): that one (`first`), those after it (`rest`), and all of them again
/// (`all`), for when the counts read under the lock differ.
struct Polled<I, J> {
    first: Option<Seen>,
    rest: I,
    all: J,
    hint: bool,
}

impl<I, J> Polled<I, J>
where
    I: Iterator<Item = Seen>,
    J: Iterator,
    J::Item: Into<Seen>,
{
    /// Calls `f` with each completion that counts under `every` (read under the lock), in
    /// polled order.
    #[inline(always)]
    fn each(self, every: bool, mut f: impl FnMut(Seen)) {
        if every == self.hint {
            self.first.into_iter().for_each(&mut f);
            self.rest.filter(|s| s.counts(every)).for_each(f);
        } else {
            self.all
                .map(Into::into)
                .filter(|s: &Seen| s.counts(every))
                .for_each(f);
        }
    }
}

/// Settles `seen` for its QP in `live` (none: a QP not watched here), looking first at
/// `live[*at]`, the last one found (a poll's completions are mostly one QP's).
#[inline(always)]
fn settle_live_one<R: Holdable>(
    live: &[(Arc<QpLedger<R>>, Role)],
    at: &mut usize,
    seen: Seen,
    freed: &mut Freed<R>,
) {
    let qp_num = seen.qp_num;
    if !live.get(*at).is_some_and(|(l, _)| l.qp_num == qp_num) {
        match live.iter().position(|(l, _)| l.qp_num == qp_num) {
            Some(i) => *at = i,
            None => return,
        }
    }
    let (l, role) = &live[*at];
    settle_one(l, *role, seen.ok, WcOpcode(seen.opcode), seen.wr_id, freed);
}

/// True when a completion of a QP with `role` on this CQ is one of its receives: every
/// completion on its own receive CQ; on a CQ shared with its sends, one whose opcode is a
/// receive's, errors included (no provider gives a send's completion a receive opcode: mlx5's
/// parser says RECV for a responder error CQE only, siw's CQE carries the request's opcode,
/// rxe a send's; rxe leaves a receive error's opcode 0, so that one is not counted here:
/// which only holds memory longer).
#[inline]
fn is_recv(role: Role, opcode: u32) -> bool {
    match role {
        Role::Recv => true,
        Role::Both => matches!(
            WcOpcode(opcode),
            WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM
        ),
        Role::Send => false,
    }
}

/// The ordered requests' completions ([`ordered`]): READs, atomics, binds.
#[inline(always)]
fn is_sink(opcode: WcOpcode) -> bool {
    matches!(
        opcode,
        WcOpcode::RDMA_READ | WcOpcode::COMP_SWAP | WcOpcode::FETCH_ADD | WcOpcode::BIND_MW
    )
}

#[inline(always)]
fn settle_one<R: Holdable>(
    l: &QpLedger<R>,
    role: Role,
    ok: bool,
    opcode: WcOpcode,
    wr_id: u64,
    freed: &mut Freed<R>,
) {
    let sink = is_sink(opcode);
    match role {
        Role::Recv => lock(&l.recv).completed(wr_id, freed),
        Role::Send | Role::Both if ok && sink => lock(&l.send).sink_completed(freed),
        Role::Both if is_recv(role, opcode.0) => lock(&l.recv).completed(wr_id, freed),
        Role::Send | Role::Both if ok && l.sources => lock(&l.send).other_completed(freed),
        _ => {}
    }
}

/// What a peer may still write after deregistration: on siw and rxe, memory of a region with
/// remote access stays allocated after its deregistration until every QP of its PD that existed
/// then has been destroyed.
///
/// Why, on siw (docs/architecture.md, "What a peer can still reach after the drop"): a peer's
/// RDMA WRITE names our rkey, not a request we posted, so no ledger entry covers it. siw's
/// `siw_proc_write` checks the STag (`siw_check_mem`: `stag_valid`, PD, rights, bounds) and
/// then copies the segment's bytes (`siw_rx_umem`) through the memory object it holds a
/// reference to; `siw_dereg_mr` (`siw_mr_drop_mem`) only clears `stag_valid` and drops its own
/// reference, without waiting for a copy that passed the check. A READ response we send from a
/// region with REMOTE_READ is read the same way (`siw_check_sgl_tx` once, then the pages),
/// so a region dropped mid-response sends a fresh allocation's bytes to the peer. What does wait
/// is the QP's destroy: siw's receive path places data only inside
/// `down_read_trylock(&qp->state_lock)` in RTS (`siw_qp_llp_data_ready`), its transmit path
/// likewise (`siw_sq_resume`), and `siw_destroy_qp` sets `rx_suspend`, takes `state_lock` for
/// writing (waiting for both) and moves the QP to ERROR before it returns. A QP created after the
/// deregistration cannot reach the region: the STag is gone from the device's table
/// (`xa_erase` in `siw_mr_drop_mem`), and `siw_mem_id2obj` no longer finds it.
///
/// So each QP of the PD takes a number when it is created; memory given to
/// [`defer`](Self::defer) is marked with the next number and freed when no QP with a lower
/// number is left (marks only grow, so the oldest waits at the front). A QP whose destroy the
/// kernel refused stays counted: what waits for it is never freed.
///
/// rxe (Debian's 6.1.192, 6.12.118 and 7.3.4 alike): its responder looks the MR up by rkey
/// for each packet (`check_rkey` → `lookup_mr` → `rxe_pool_get_index`, a reference taken with
/// `kref_get_unless_zero`) and drops the reference after the packet, and `rxe_dereg_mr` →
/// `rxe_cleanup` → `__rxe_cleanup` erases the key (`xa_erase`: no lookup finds it after) and
/// waits for those references — with `wait_for_completion_timeout(.., msecs_to_jiffies(50000))`.
/// When that expires it warns (`WARN_ON`, then "cleanup failed, err = -110" on 6.12 and 7.3)
/// and goes on: `rxe_mr_cleanup` unpins the pages (`ib_umem_release`) and the deregistration
/// returns success, while the responder that holds the reference may still copy a WRITE's or
/// SEND's payload or an atomic's result into them. So the wait is a timer, not a fence. The
/// QP's destroy is one: `rxe_destroy_qp` → `rxe_cleanup` → `rxe_qp_cleanup` →
/// `rxe_qp_do_cleanup` → `rxe_cleanup_task` for each of the QP's tasks (6.1: responder,
/// requester, completer; 6.12, 7.3: receive and send task), which runs after the QP's own
/// timed wait whether or not that expired and waits, with no timeout, until the task is idle and
/// can no longer be run (6.12, 7.3: `TASK_STATE_DRAINING` set under the task's lock; 6.1: the
/// unlocked `destroyed` flag, see docs/architecture.md for the one window that leaves), and
/// every copy into a region runs in one of those tasks.
///
/// Not used on mlx5 (the mkey is destroyed in firmware before deregistration returns).
#[derive(Debug)]
pub(crate) struct Fence<D> {
    inner: Mutex<FenceInner<D>>,
}

#[derive(Debug)]
struct FenceInner<D> {
    /// The number the next QP gets.
    next: u64,
    /// The QPs not yet destroyed.
    live: BTreeSet<u64>,
    /// `(mark, memory)`: freed when no live QP is numbered below `mark`; marks in order.
    waiting: VecDeque<(u64, D)>,
}

impl<D> Default for Fence<D> {
    fn default() -> Self {
        Fence {
            inner: Mutex::new(FenceInner {
                next: 0,
                live: BTreeSet::new(),
                waiting: VecDeque::new(),
            }),
        }
    }
}

impl<D> Drop for FenceInner<D> {
    fn drop(&mut self) {
        if !self.live.is_empty() {
            // A QP the kernel refused to destroy may still place data: leak what waits for it.
            self.waiting.drain(..).for_each(std::mem::forget);
        }
    }
}

impl<D> Fence<D> {
    /// A QP of the PD is about to be created: its number.
    pub(crate) fn qp_created(&self) -> u64 {
        let mut f = lock(&self.inner);
        let n = f.next;
        f.next += 1;
        f.live.insert(n);
        n
    }

    /// A number for a QP about to be created, given back when the ticket is dropped (the
    /// create failed, or panicked: issue 31 (g), a number left live holds every region
    /// deregistered later until the PD goes) unless [`Ticket::keep`] hands it to the QP or
    /// [`Ticket::stuck`] says a kernel QP with it could not be destroyed.
    pub(crate) fn ticket(&self) -> Ticket<'_, D> {
        Ticket {
            fence: self,
            n: Some(self.qp_created()),
        }
    }

    /// QP `n` is destroyed (or was never created): gives back what no longer waits. The caller
    /// drops it, outside the lock.
    #[must_use]
    pub(crate) fn qp_destroyed(&self, n: u64) -> Vec<D> {
        let mut f = lock(&self.inner);
        f.live.remove(&n);
        let oldest = f.live.first().copied().unwrap_or(u64::MAX);
        let mut out = Vec::new();
        while f.waiting.front().is_some_and(|&(mark, _)| mark <= oldest) {
            out.extend(f.waiting.pop_front().map(|(_, d)| d));
        }
        out
    }

    /// Memory just deregistered: kept while a QP that existed may still reach it (`Ok`), or
    /// given back when none does (`Err`: the caller frees it now).
    pub(crate) fn defer(&self, d: D) -> Result<(), D> {
        let mut f = lock(&self.inner);
        if f.live.is_empty() {
            return Err(d);
        }
        let mark = f.next;
        f.waiting.push_back((mark, d));
        Ok(())
    }

    /// Memory waiting (tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        lock(&self.inner).waiting.len()
    }
}

/// A QP number of a [`Fence`] while its QP is being created ([`Fence::ticket`]).
#[derive(Debug)]
pub(crate) struct Ticket<'a, D> {
    fence: &'a Fence<D>,
    n: Option<u64>,
}

impl<D> Ticket<'_, D> {
    /// The QP exists: its number, which its destroy gives back ([`Fence::qp_destroyed`]).
    pub(crate) fn keep(mut self) -> u64 {
        self.n.take().expect("a ticket's number is taken once")
    }

    /// A kernel QP with this number exists and could not be destroyed: the number stays live
    /// (what waits for it is never freed).
    pub(crate) fn stuck(mut self) {
        self.n = None;
    }
}

impl<D> Drop for Ticket<'_, D> {
    fn drop(&mut self) {
        if let Some(n) = self.n.take() {
            // What no longer waits is dropped here, outside the fence's lock.
            drop(self.fence.qp_destroyed(n));
        }
    }
}

#[cfg(test)]
mod tests;
