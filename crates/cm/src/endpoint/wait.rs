//! The completion waits of an [`Endpoint<OwnCqs>`] and how they end (the parent module's
//! "How a wait ends"): the end's reason, the drain to the marker's flush, the blocking wait.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rustix::io::Errno;
use rverbs_uverbs::qp::QpAttr;
use rverbs_uverbs::{Error, RecvWr, SendFlags, SendOp, SendWr, WorkCompletion};
use rverbs_uverbs::{PostFault, PostQueue};

use super::{Endpoint, OwnCqs};
use crate::channel::Woke;
use crate::{CmEventKind, QpState};

/// Why an endpoint's connection carries no more traffic (see [`Endpoint::ended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndReason {
    /// The rdma_cm reported this event (DISCONNECTED, DEVICE_REMOVAL) with this status.
    Event(CmEventKind, i32),
    /// The QP was moved to this state (ERR, RESET) through the endpoint: its work requests are
    /// flushed (ERR) or discarded (RESET).
    Qp(QpState),
}

impl EndReason {
    fn parts(self) -> (Errno, String) {
        match self {
            EndReason::Event(k, st) if k == CmEventKind::DEVICE_REMOVAL => (
                Errno::NODEV,
                format!("the RDMA device was removed ({k} event, status {st})"),
            ),
            EndReason::Event(k, st) => (
                Errno::CONNRESET,
                format!("the connection ended: the peer disconnected or died ({k} event, status {st})"),
            ),
            EndReason::Qp(st) => (
                Errno::CONNABORTED,
                format!("the QP is in {st}: its work requests were flushed (disconnect or a failed request)"),
            ),
        }
    }

    internal! {
    /// The error an operation (`op`) on rdma_cm id `id` returns for this end.
    pub fn to_error(self, op: &str, id: u32) -> io::Error {
        let (errno, what) = self.parts();
        Error::os(format!("{op} on rdma_cm id {id}"), errno)
            .with_detail(what)
            .into()
    }
    }
}

/// What a completion wait does after [`Endpoint::drain_on_end`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drain {
    /// Completions are still to come (the marker's flush at the latest, or a request of the
    /// caller's that fills the queue): sleep on the CQ, with no timer.
    Wait,
    /// Nothing more will come (siw, which flushed in the modify; a QP in RESET; a device that
    /// refused the modify): poll once more, then fail with [`Endpoint::end_error`].
    Done,
}

fn op_of(queue: PostQueue) -> &'static str {
    match queue {
        PostQueue::Send => "get_send_comp",
        _ => "get_recv_comp",
    }
}

/// The `wr_id` of the marker request a completion wait of an [`Endpoint`] posts after the end
/// of the connection ([`Endpoint::drain_on_end`]). Its completion is never returned by the
/// waits or [`Endpoint::poll_comps`]; the endpoint's post helpers refuse it as a `wr_id`, and a
/// request posted through [`Endpoint::qp`] must not use it.
pub const END_MARKER: u64 = 0x7276_6572_6273_2145;

impl Endpoint<OwnCqs> {
    fn queue_cq(&self, queue: PostQueue) -> io::Result<&rverbs_uverbs::cq::Cq> {
        match queue {
            PostQueue::Send => Ok(self.check_own("send")?),
            PostQueue::Recv => Ok(self.check_own("recv")?),
            _ => Err(Error::invalid(
                format!("wait for completions on rdma_cm id {}", self.id.handle()),
                "an endpoint has no shared receive queue",
            )
            .into()),
        }
    }

    /// Polls up to `out.len()` completions of `queue`'s CQ without waiting, leaving out the
    /// end markers ([`END_MARKER`]): `Ok(0)` when there is none. A marker polled
    /// with nothing else means every request posted before it has completed and was returned:
    /// the connection's end error then ([`Endpoint::end_error`]). For event loops that wait
    /// themselves (as `rverbs-async` does).
    pub fn poll_comps(&self, queue: PostQueue, out: &mut [WorkCompletion]) -> io::Result<usize> {
        let cq = self.queue_cq(queue)?;
        let n = cq.poll(out);
        let mut kept = 0;
        for i in 0..n {
            if out[i].wr_id != END_MARKER {
                out[kept] = out[i];
                kept += 1;
            }
        }
        if n > 0 && kept == 0 {
            return Err(self.end_error(queue));
        }
        Ok(kept)
    }

    /// After the end ([`Endpoint::ended`] is `Some`) with `queue`'s CQ found empty: moves the
    /// QP to ERR and, where the provider flushes requests posted later (rxe, mlx5), posts the
    /// end marker to `queue` and moves the QP to ERR again. A QP in ERR completes every request
    /// in order, flushed if not done (IB spec C10-42, C10-97.2.1), so the marker's flush comes
    /// after the completion of every request posted before it; rxe flushes a user QP's receive
    /// queue only when its responder runs, which the second move to ERR schedules. On siw the
    /// move to ERR flushes both queues before the modify returns, and later posts to its
    /// user-mapped queues are never flushed: what the CQ holds then is all there is
    /// ([`Drain::Done`]). Call it once per wait (each call posts a marker); then poll with
    /// [`Endpoint::poll_comps`] as [`Drain`] says. docs/cm.md has the kernel sources' details.
    pub fn drain_on_end(&self, queue: PostQueue) -> io::Result<Drain> {
        self.queue_cq(queue)?;
        let st = self.qp.cached_state();
        if st == QpState::RESET {
            return Ok(Drain::Done);
        }
        if st != QpState::ERR {
            // The event ended the connection; the ERR below is this wait's, not the caller's.
            self.drained.store(true, Ordering::Relaxed);
        }
        let to_err = || {
            self.qp.modify(&QpAttr {
                qp_state: Some(QpState::ERR),
                ..Default::default()
            })
        };
        if let Err(e) = to_err() {
            // A removed device answers nothing more: no completion can come.
            tracing::debug!("{}: {e}; nothing more can complete", op_of(queue));
            return Ok(Drain::Done);
        }
        if self.is_iwarp() {
            return Ok(Drain::Done);
        }
        let posted = match queue {
            PostQueue::Send => self.qp.post_send(&[SendWr {
                wr_id: END_MARKER,
                op: SendOp::Send,
                sge: &[],
                flags: SendFlags::SIGNALED,
                ud: None,
            }]),
            _ => self.qp.post_recv(&[RecvWr {
                wr_id: END_MARKER,
                sge: &[],
            }]),
        };
        match posted {
            Ok(()) => {}
            // A full queue holds a request of the caller's, posted before the ERR above: its
            // completion (or flush) comes, and the next wait posts the marker.
            Err(e) if matches!(e.fault(), Some(PostFault::QueueFull { .. })) => {}
            // A UD send queue takes no request without a destination: nothing to wait for.
            Err(e) => {
                tracing::debug!("{}: end marker not posted: {e}", op_of(queue));
                return Ok(Drain::Done);
            }
        }
        // rxe runs the flush of a user QP's receive queue only in its responder, which a
        // move to ERR schedules (the marker was posted after the first one).
        if let Err(e) = to_err() {
            tracing::debug!("{}: {e}", op_of(queue));
        }
        Ok(Drain::Wait)
    }

    /// The error a completion wait on `queue` returns once the connection ended and every
    /// completion of its requests was returned: the cause ([`EndReason`]) and the QP.
    pub fn end_error(&self, queue: PostQueue) -> io::Error {
        let op = op_of(queue);
        let end = self
            .ended()
            .unwrap_or(EndReason::Qp(self.qp.cached_state()));
        let (errno, what) = end.parts();
        let which = if queue == PostQueue::Send {
            "send"
        } else {
            "receive"
        };
        Error::os(format!("{op} on rdma_cm id {}", self.id.handle()), errno)
            .with_detail(format!(
                "{what}; QP {:#x} is in ERR and every {which} request posted before the end has \
                 completed: no completion is left to come",
                self.qp.qp_num()
            ))
            .into()
    }

    pub(super) fn get_comp_until(
        &self,
        op: &'static str,
        send: bool,
        deadline: Option<Instant>,
    ) -> io::Result<Option<WorkCompletion>> {
        let queue = if send {
            PostQueue::Send
        } else {
            PostQueue::Recv
        };
        let cq = self.queue_cq(queue)?;
        let ch = cq.channel().expect("an Endpoint<OwnCqs> has its channels");
        let uid = self.id.uid();
        let mut wc = [WorkCompletion::default()];
        // This wait drained the queue after the end: completions are still to come, and the
        // end event no longer needs watching.
        let mut draining = false;
        loop {
            if self.poll_comps(queue, &mut wc)? == 1 {
                return Ok(Some(wc[0]));
            }
            if !draining && self.ended().is_some() {
                match self.drain_on_end(queue)? {
                    Drain::Wait => draining = true,
                    Drain::Done => {
                        if self.poll_comps(queue, &mut wc)? == 1 {
                            return Ok(Some(wc[0]));
                        }
                        return Err(self.end_error(queue));
                    }
                }
                continue;
            }
            cq.req_notify(false)?;
            if self.poll_comps(queue, &mut wc)? == 1 {
                return Ok(Some(wc[0]));
            }
            let watch_end = !draining;
            let woke = self
                .id
                .channel()
                .wait_until(deadline, &[ch.as_fd()], |d| {
                    (watch_end && d.ended(uid).is_some()).then_some(())
                })
                .map_err(|e| Error::os(format!("{op}: wait for a completion"), e))?;
            match woke {
                Woke::Extra => {
                    while let Some(ev) = ch.try_get_event()? {
                        if ev.cq_user_handle == cq.user_handle() {
                            cq.event_received();
                            cq.ack_events(1);
                        } else {
                            tracing::warn!(
                                handle = ev.cq_user_handle,
                                "{op}: completion event of a foreign CQ on an endpoint's channel"
                            );
                        }
                    }
                }
                Woke::Found(()) => {}
                Woke::TimedOut => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        let n = self.poll_comps(queue, &mut wc)?;
                        return Ok((n == 1).then_some(wc[0]));
                    }
                }
            }
        }
    }
}
