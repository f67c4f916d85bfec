//! Posting to a QP: the one check of every send's operation ([`OpSet`](crate::OpSet), with iWARP's
//! rule for READ sinks) and the QP's state, then the provider's encoder (`QpOps`); every refusal a typed
//! [`PostFault`](crate::error::PostFault) inside a [`PostError`] naming the device and QP.

use super::{Qp, QpState};
use crate::error::{PostError, PostQueue};
use crate::op::{OpKind, OpSet};
use crate::wr::{MrRecvWr, MrSendWr, RecvWr, SendWr};

impl Qp {
    /// Posts send work requests (one doorbell for the list).
    ///
    /// Every SGE is an [`MrSge`](crate::wr::MrSge) made from a live [`Mr`](crate::mr::Mr), so this is safe:
    /// the device reads (or, for RDMA READ and atomics, writes) memory that Rust never
    /// references while it is registered, and if an `Mr` is dropped before its requests
    /// complete, deregistration cuts the device off and the requests complete with an error
    /// (docs/architecture.md, "Why this is sound"). Keep the `Mr` alive until the completion
    /// to get the data moved.
    ///
    /// A request counts against the send CQ until its completion is polled, not only until
    /// the send queue accepts it: rxe frees a queue slot when the kernel completes the
    /// request, so a queue that keeps accepting posts can still overflow a CQ that is polled
    /// too slowly (the kernel then drops the completion and raises a `CQ_ERR` async event).
    /// The same holds for [`Qp::post_recv`] and the receive CQ, whose overflow also moves the
    /// QP to the error state.
    ///
    /// A request the device writes into (an RDMA READ's sink, an atomic's result) holds its
    /// region until the completion of that request, or of a later signaled READ or atomic, is
    /// polled, or the QP is destroyed: dropping the `Mr` meanwhile defers its deregistration
    /// and the freeing of its memory to then (docs/architecture.md, "What a posted request
    /// keeps alive"). Borrowed memory ([`Mr::scoped`](crate::mr::Mr::scoped)) cannot wait, so
    /// it is refused there
    /// ([`PostFault::BorrowedSink`](crate::error::PostFault::BorrowedSink)). On siw, which
    /// reads a source through the reference it took when the request started, the regions a
    /// request reads are held the same way until a signaled request at or after it completes
    /// with success (borrowed sources are read, not held).
    #[inline]
    pub fn post_send(&self, wrs: &[MrSendWr<'_>]) -> std::result::Result<(), PostError> {
        // SAFETY: every SGE names a range of a registered Mr (MrSge's invariant), and what the
        // device may write is held by the ledger (`hold`); see above.
        unsafe { self.post_send_checked(SendWr::raw_list(wrs), true, None) }
    }

    /// Posts send work requests with raw SGEs.
    ///
    /// # Safety
    /// Every SGE must lie inside a memory region registered on this QP's PD, and that memory
    /// must stay valid (its `Mr` alive) until the request's completion is polled or the QP is
    /// destroyed: the device reads it — and for RDMA READ and atomics writes it — later. With
    /// [`SendFlags::INLINE`](crate::wr::SendFlags::INLINE) the provider reads the SGEs' memory
    /// during the call, so it must be valid for reads then, and no one may write it during the
    /// call except through the kernel layer's atomic copies (`kernel::shared`, as [`Mr::write_at`](crate::mr::Mr::write_at)
    /// does: the provider copies with the same 1-byte atomic loads), the kernel or a device; a
    /// plain write racing the copy (another thread's store, C code) is a data race. The copy
    /// is atomic byte accesses, so an INLINE source must not be derived from a shared
    /// reference to memory without interior mutability (`&[u8]`): use owned, registered or
    /// C memory, or a `&mut`.
    #[inline]
    pub unsafe fn post_send_raw(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.post_send_checked(wrs, false, None) }
    }

    /// The one send path: with `hold`, the regions the requests may write are held in the
    /// ledger (safe posts); without, the requests are only counted (raw posts). `keep`: what
    /// the one bind of `wrs` keeps alive until it is over (`Qp::bind_mw`: its window).
    ///
    /// # Safety
    /// As for [`Qp::post_send_raw`]; with `hold`, every SGE names a live safe `Mr`.
    #[inline]
    pub(crate) unsafe fn post_send_checked(
        &self,
        wrs: &[SendWr<'_>],
        hold: bool,
        mut keep: Option<std::sync::Arc<dyn Send + Sync>>,
    ) -> std::result::Result<(), PostError> {
        // `keep` not kept (the bind did not go to the queue) drops when this returns, after
        // the ledger's lock: maybe the window's last `Arc`, whose drop deallocates it.
        let st = self.cached_state();
        if matches!(st, QpState::RESET | QpState::INIT | QpState::RTR) {
            // Refused before anything is queued: a WQE left in the ring would go out later, at
            // the next doorbell, which the caller was told had failed.
            return Err(self.send_refused(st));
        }
        // The one check of the operations (crate::op), before any provider code: the requests
        // before the first refused one are posted, as a provider that stopped there would.
        // One pass finds the first refused request and whether one before it is ordered
        // (READ, atomics, binds: crate::ledger::ordered).
        let send_ops = self.send_ops;
        let mut refused = None;
        let mut ordered = false;
        for (i, w) in wrs.iter().enumerate() {
            if !send_ops.contains(w.op.kind()) {
                refused = Some(i);
                break;
            }
            ordered |= crate::ledger::ordered(&w.op);
        }
        let mut sink_fault = None;
        if let Some(sinks) = self.pd.read_sinks() {
            // iWARP: a READ's sink must be registered with REMOTE_WRITE (crate::op).
            if let Some((i, f)) = sinks.check(&wrs[..refused.unwrap_or(wrs.len())]) {
                refused = Some(i);
                sink_fault = Some(f);
                // Only the requests before the refused READ go out.
                ordered = wrs[..i].iter().any(|w| crate::ledger::ordered(&w.op));
            }
        }
        let mut ok = match refused {
            Some(i) => &wrs[..i],
            None => wrs,
        };
        // The ledger (crate::ledger), held across the post so that its order is the queue's:
        // only for lists with an ordered request, and on siw for every list (it holds sources
        // there and numbers every request).
        let mut ledger =
            (self.ledger.sources || ordered).then(|| crate::ledger::lock(&self.ledger.send));
        if let (true, Some(l)) = (hold, ledger.as_mut()) {
            if let Some((i, lkey)) = l.hold(self.pd.regions(), ok) {
                refused = Some(i);
                sink_fault = Some(crate::error::PostFault::BorrowedSink { lkey });
                ok = &wrs[..i];
            }
        }
        if !ok.is_empty() {
            let k = self.kobj();
            // SAFETY: forwarded to the caller; every operation of `ok` is in `send_ops`, what
            // this QP's driver encodes on its type (QpOps::post_send's contract).
            let r = unsafe { self.lock().post_send(k, ok) };
            if let Some(l) = ledger.as_mut() {
                let ord = l.next_ordered();
                let went = crate::ledger::went(&r, ok.len());
                l.posted(&ok[..went], self.sq_sig_all);
                if let [w] = &ok[..went] {
                    if let Some(k) = keep.take() {
                        debug_assert!(matches!(w.op, crate::wr::SendOp::BindMw(_)));
                        l.keep(ord, k);
                    }
                }
            }
            r.map_err(|e| self.post_error(e, PostQueue::Send))?;
        }
        drop(ledger);
        match (refused, sink_fault) {
            (Some(i), Some(f)) => Err(self.post_error(PostError::refused(i, f), PostQueue::Send)),
            (Some(i), None) => Err(self.op_refused(i, wrs[i].op.kind())),
            (None, _) => Ok(()),
        }
    }

    /// The refusal of work request `index`, whose operation `op` this QP does not accept.
    #[cold]
    fn op_refused(&self, index: usize, op: OpKind) -> PostError {
        let encoded = self
            .pd
            .context()
            .driver()
            .map_or(OpSet::EMPTY, |d| super::encoded(d, self.qp_type));
        let fault = crate::op::refusal(op, self.qp_type, self.driver_name, encoded);
        self.post_error(PostError::refused(index, fault), PostQueue::Send)
    }

    /// The operations this QP's sends may carry: what its transport carries and its provider
    /// encodes ([`OpSet`]).
    pub fn send_ops(&self) -> OpSet {
        self.send_ops
    }

    /// Names this QP and its device in a provider's error.
    #[cold]
    fn post_error(&self, e: PostError, queue: PostQueue) -> PostError {
        e.at(self.pd.context().name(), queue, self.qp_num)
    }

    #[cold]
    fn send_refused(&self, st: QpState) -> PostError {
        self.post_error(
            PostError::refused(0, crate::error::PostFault::NotReadyToSend { state: st }),
            PostQueue::Send,
        )
    }

    /// Posts receive work requests; safe for the reasons given at [`Qp::post_send`].
    ///
    /// Each receive holds its regions until its completion (or a later receive's) is polled,
    /// or the QP is destroyed: dropping an `Mr` meanwhile defers its deregistration and the
    /// freeing of its memory to then (docs/architecture.md, "What a posted request keeps
    /// alive"). Borrowed memory ([`Mr::scoped`](crate::mr::Mr::scoped)) is refused
    /// ([`PostFault::BorrowedSink`](crate::error::PostFault::BorrowedSink)).
    #[inline]
    pub fn post_recv(&self, wrs: &[MrRecvWr<'_>]) -> std::result::Result<(), PostError> {
        // SAFETY: every SGE names a range of a registered Mr (MrSge's invariant), held by the
        // ledger until the receive is over.
        unsafe { self.post_recv_checked(RecvWr::raw_list(wrs), true) }
    }

    /// Posts receive work requests with raw SGEs.
    ///
    /// # Safety
    /// As for [`Qp::post_send_raw`]; the device writes the received data into the memory.
    #[inline]
    pub unsafe fn post_recv_raw(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.post_recv_checked(wrs, false) }
    }

    /// The one receive path; `hold` as for [`Qp::post_send_checked`].
    ///
    /// # Safety
    /// As for [`Qp::post_recv_raw`]; with `hold`, every SGE names a live safe `Mr`.
    #[inline]
    unsafe fn post_recv_checked(
        &self,
        wrs: &[RecvWr<'_>],
        hold: bool,
    ) -> std::result::Result<(), PostError> {
        if self.cached_state() == QpState::RESET {
            return Err(self.post_error(
                PostError::refused(
                    0,
                    crate::error::PostFault::NotReadyToReceive {
                        state: QpState::RESET,
                    },
                ),
                PostQueue::Recv,
            ));
        }
        if self.srq.is_some() {
            return Err(self.post_error(
                PostError::refused(0, crate::error::PostFault::NoReceiveQueue),
                PostQueue::Recv,
            ));
        }
        let k = self.kobj();
        crate::ledger::RecvLedger::post(&self.ledger.recv, self.pd.regions(), wrs, hold, |ok| {
            // SAFETY: forwarded to the caller.
            unsafe { self.lock().post_recv(k, ok) }
        })
        .map_err(|e| self.post_error(e, PostQueue::Recv))
    }
}
