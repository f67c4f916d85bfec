//! [`AsyncEndpoint`]: librdmacm's verbs helpers with `get_send_comp().await` /
//! `get_recv_comp().await`, the async counterparts of `Endpoint::get_send_comp` / `get_recv_comp`, under the same rule
//! (the id's own, separate send and receive CQs) and with the same end: when the connection
//! ends (DISCONNECTED, DEVICE_REMOVAL, the QP in ERR) the future moves the QP to ERR and drains
//! the queue as the blocking call does ([`Endpoint::drain_on_end`], no timer): it returns the
//! completions of the requests posted before the end, real or flushed, then fails with the
//! same error as the blocking call. A future dropped after it posted the end marker leaves
//! the marker's flush in the CQ, which the next wait takes as the end.
//!
//! **Cancel safety.** `get_send_comp` / `get_recv_comp` are cancel-safe (see [`crate::cq`]): a
//! dropped future loses no completion. `connect` / `accept` / `disconnect` send their command
//! first; dropping them afterwards does not undo it, and a dropped `connect` leaves the
//! connection half-made (the peer times out): drop the endpoint then.

use std::fmt;
use std::io;
use std::pin::pin;
use std::sync::Arc;

use rverbs_cm::{CmEvent, CmEventKind, ConnParam, QpType};
use rverbs_cm::{Drain, Endpoint, EndpointAttr, OwnCqs};
use rverbs_uverbs::PostQueue;
use rverbs_uverbs::WorkCompletion;

use crate::cm::{AsyncCmId, AsyncEventChannel};
use crate::cq::AsyncCompChannel;

/// An [`Endpoint`] whose completions and connection events are awaited.
pub struct AsyncEndpoint {
    ep: Endpoint<OwnCqs>,
    cm: Arc<AsyncEventChannel>,
    send: Arc<AsyncCompChannel>,
    recv: Arc<AsyncCompChannel>,
}

impl fmt::Debug for AsyncEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEndpoint")
            .field("endpoint", &self.ep)
            .finish_non_exhaustive()
    }
}

impl AsyncEndpoint {
    /// `rdma_create_qp` on an async id ([`Endpoint::create`]: own send and receive CQs, each
    /// with its own completion channel), with the channels registered with tokio.
    pub fn create(id: AsyncCmId, attr: &EndpointAttr) -> io::Result<AsyncEndpoint> {
        let cm = id.channel().clone();
        let ep = Endpoint::create(id.into_id(), attr)?;
        Self::with_channel(ep, cm)
    }

    /// Wraps an endpoint made by blocking calls (e.g. on a synchronous id from `create_ep`,
    /// already connected): its id's channel and both completion channels are registered with
    /// tokio. For an id of an [`AsyncEventChannel`], use [`AsyncEndpoint::with_channel`].
    pub fn from_endpoint(ep: Endpoint<OwnCqs>) -> io::Result<AsyncEndpoint> {
        let cm = AsyncEventChannel::from_channel(ep.id().event_channel())?;
        Self::with_channel(ep, cm)
    }

    /// Wraps an endpoint whose id's events arrive on `cm`.
    pub fn with_channel(
        ep: Endpoint<OwnCqs>,
        cm: Arc<AsyncEventChannel>,
    ) -> io::Result<AsyncEndpoint> {
        ep.id().claim_events();
        let send = AsyncCompChannel::new(ep.send_channel().clone())?;
        let recv = AsyncCompChannel::new(ep.recv_channel().clone())?;
        Ok(AsyncEndpoint { ep, cm, send, recv })
    }

    /// The endpoint (posting, registration, the id).
    pub fn endpoint(&self) -> &Endpoint<OwnCqs> {
        &self.ep
    }

    /// The next event of the id. Cancel-safe.
    pub async fn next_event(&self) -> io::Result<CmEvent> {
        let id = self.ep.id();
        self.cm.wait_for(|| id.try_next_event()).await
    }

    async fn expect(&self, op: &'static str, ok: &[CmEventKind]) -> io::Result<CmEvent> {
        let ev = self.next_event().await?;
        ev.check(op, ok)?;
        Ok(ev)
    }

    /// `rdma_connect` with the QP: REQ, then on CONNECT_RESPONSE the QP to RTR/RTS and the RTU
    /// (UD: until ESTABLISHED; RC on iWARP: until ESTABLISHED, the iw_cm having connected the
    /// QP, whose RTS is then recorded: [`Endpoint::connect_answer`],
    /// [`Endpoint::complete_connect`]). The id must be asynchronous.
    pub async fn connect(&self, param: &ConnParam) -> io::Result<()> {
        self.ep.start_connect(param)?;
        self.expect("connect", &[self.ep.connect_answer()]).await?;
        if self.ep.id().qp_type() == QpType::UD {
            return Ok(());
        }
        if let Err(e) = self.ep.complete_connect() {
            let _ = self.ep.id().reject(&[]);
            return Err(e);
        }
        Ok(())
    }

    /// `rdma_accept` with the QP: RTR/RTS, REP, then ESTABLISHED (RC; on iWARP the QP's RTS,
    /// set by the iw_cm, is then recorded: [`Endpoint::established`]).
    pub async fn accept(&self, param: &ConnParam) -> io::Result<()> {
        self.ep.accept(param)?;
        if self.ep.id().qp_type() == QpType::UD || self.ep.id().is_sync() {
            // A synchronous id waited for ESTABLISHED inside accept.
            return Ok(());
        }
        self.expect("accept", &[CmEventKind::ESTABLISHED]).await?;
        self.ep.established()
    }

    /// `rdma_disconnect`: the QP to ERR (flushing what is posted), DREQ, then this id's
    /// DISCONNECTED — which comes when the peer answers (its own disconnect, or destroying its
    /// id) or the CM gives up waiting for it. After the peer's DISCONNECTED it sends the answer
    /// (DREP) and returns at once.
    pub async fn disconnect(&self) -> io::Result<()> {
        let ended = self.ep.id().end_event().is_some();
        let r = self.ep.disconnect();
        if ended {
            return Ok(());
        }
        r?;
        let id = self.ep.id();
        self.cm.wait_for(|| Ok(id.end_event().map(|_| ()))).await
    }

    /// The next completion of the send CQ (`rdma_get_send_comp`, awaited). Cancel-safe.
    /// Ends as [`Endpoint::get_send_comp`] does when the connection ended.
    pub async fn get_send_comp(&self) -> io::Result<WorkCompletion> {
        let mut wc = [WorkCompletion::default()];
        self.comp(PostQueue::Send, &self.send, &mut wc).await?;
        Ok(wc[0])
    }

    /// The next completion of the receive CQ. Cancel-safe.
    pub async fn get_recv_comp(&self) -> io::Result<WorkCompletion> {
        let mut wc = [WorkCompletion::default()];
        self.comp(PostQueue::Recv, &self.recv, &mut wc).await?;
        Ok(wc[0])
    }

    /// Up to `out.len()` completions of the send CQ (at least one). Cancel-safe.
    pub async fn get_send_comps(&self, out: &mut [WorkCompletion]) -> io::Result<usize> {
        self.comp(PostQueue::Send, &self.send, out).await
    }

    /// Up to `out.len()` completions of the receive CQ (at least one). Cancel-safe.
    pub async fn get_recv_comps(&self, out: &mut [WorkCompletion]) -> io::Result<usize> {
        self.comp(PostQueue::Recv, &self.recv, out).await
    }

    async fn comp(
        &self,
        queue: PostQueue,
        ch: &AsyncCompChannel,
        out: &mut [WorkCompletion],
    ) -> io::Result<usize> {
        let (op, cq) = match queue {
            PostQueue::Send => ("get_send_comp", self.ep.send_cq()),
            _ => ("get_recv_comp", self.ep.recv_cq()),
        };
        if out.is_empty() {
            return Err(rverbs_uverbs::Error::invalid(op, "empty completion buffer").into());
        }
        // This wait drained the queue after the end: completions (the marker's flush at the
        // latest) are still to come, and the end event no longer needs watching.
        let mut draining = false;
        loop {
            ch.apply(cq);
            let n = self.ep.poll_comps(queue, out)?;
            if n > 0 {
                return Ok(n);
            }
            // Registered before the checks below, so that nothing read from now on is missed.
            let mut cq_woken = pin!(ch.notify.notified());
            cq_woken.as_mut().enable();
            let mut cm_woken = pin!(self.cm.notify().notified());
            cm_woken.as_mut().enable();
            if !draining && self.ep.ended().is_some() {
                match self.ep.drain_on_end(queue)? {
                    Drain::Wait => draining = true,
                    Drain::Done => {
                        let n = self.ep.poll_comps(queue, out)?;
                        if n > 0 {
                            return Ok(n);
                        }
                        return Err(self.ep.end_error(queue));
                    }
                }
                continue;
            }
            cq.req_notify(false)?;
            let n = self.ep.poll_comps(queue, out)?;
            if n > 0 {
                return Ok(n);
            }
            tokio::select! {
                biased;
                r = ch.wait(cq_woken) => r?,
                r = self.cm.sleep(cm_woken), if !draining => r?,
            }
        }
    }
}
