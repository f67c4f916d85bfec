//! rdma_cm ids as futures: [`AsyncEventChannel`] (an event channel registered with tokio) and
//! [`AsyncCmId`] (`resolve_addr`, `resolve_route`, `connect`, `listen`, `get_request`, `accept`,
//! `disconnect`, `next_event`).
//!
//! Every id of an [`AsyncEventChannel`] is *claimed* ([`rverbs_cm::CmId::claim_events`]): the
//! channel's dispatcher keeps its events for it, so each future receives the events of its own
//! id and of no other, in the kernel's order, whatever other tasks wait on the same channel.
//!
//! ## The wait, and why nothing is lost
//!
//! A future waiting for an id's event: registers for the channel's wake-up (a
//! [`tokio::sync::Notify`], enabled first), takes the id's first queued event if there is
//! one (reading the kernel's queue), else sleeps until the fd is readable or it is woken. The
//! task that finds the fd readable reads the whole kernel queue (to `EAGAIN`, as tokio's
//! edge-triggered readiness needs) into the dispatcher and wakes every waiter; a blocking
//! rverbs call in another thread that reads the channel wakes them too (the dispatcher's hook).
//!
//! **Cancel safety.** Events stay in the dispatcher's queue until the future that returns
//! them takes them, with no `.await` between taking and returning: dropping a future loses no
//! event (the next wait for that id gets it). Dropping `resolve_addr`, `connect`, … after the
//! command was sent does not undo the command: its event is what the next
//! [`AsyncCmId::next_event`] returns.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use rverbs_cm::{
    CmEvent, CmEventKind, CmId, ConnParam, EventChannel, McJoinFlags, PortSpace, QpType,
    UdEventParam,
};
use rverbs_uverbs::Error;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

/// An rdma_cm event channel registered with the current tokio runtime. Shared (`Arc`) by the
/// [`AsyncCmId`]s created on it, and by the ids of the connection requests of its listeners.
pub struct AsyncEventChannel {
    fd: AsyncFd<EventChannel>,
    notify: Arc<Notify>,
    hook: u64,
}

impl fmt::Debug for AsyncEventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEventChannel")
            .field("channel", self.fd.get_ref())
            .finish_non_exhaustive()
    }
}

impl Drop for AsyncEventChannel {
    fn drop(&mut self) {
        self.fd.get_ref().remove_dispatch_hook(self.hook);
    }
}

impl AsyncEventChannel {
    /// Opens a new event channel and registers it with the current tokio runtime.
    pub fn new() -> io::Result<Arc<AsyncEventChannel>> {
        Self::from_channel(EventChannel::new()?)
    }

    /// Registers an existing channel (e.g. [`CmId::event_channel`] of a synchronous id) with
    /// the current tokio runtime. Register a channel once: a second registration of the same
    /// file in one runtime fails (`EEXIST`).
    pub fn from_channel(ch: EventChannel) -> io::Result<Arc<AsyncEventChannel>> {
        let notify = Arc::new(Notify::new());
        let n = notify.clone();
        let hook = ch.on_dispatch(Arc::new(move || n.notify_waiters()));
        // SAFETY: `EventChannel` keeps its file open while any handle to it lives (this one
        // is owned by the AsyncFd) and `as_raw_fd` always returns that file's descriptor.
        #[allow(unsafe_code)]
        let reg = unsafe { AsyncFd::register_with_interest(ch.clone(), Interest::READABLE) };
        let fd = match reg {
            Ok(fd) => fd,
            Err(e) => {
                ch.remove_dispatch_hook(hook);
                return Err(e.into());
            }
        };
        Ok(Arc::new(AsyncEventChannel { fd, notify, hook }))
    }

    /// The channel.
    pub fn channel(&self) -> &EventChannel {
        self.fd.get_ref()
    }

    /// Creates an asynchronous id on this channel (its events claimed for it).
    pub fn create_id(self: &Arc<Self>, ps: PortSpace) -> io::Result<AsyncCmId> {
        let id = CmId::create(Some(self.channel()), ps)?;
        Ok(AsyncCmId::wrap(id, self.clone()))
    }

    /// Creates an asynchronous id with an explicit QP type.
    pub fn create_id_with_qp_type(
        self: &Arc<Self>,
        ps: PortSpace,
        qp_type: QpType,
    ) -> io::Result<AsyncCmId> {
        let id = CmId::create_with_qp_type(Some(self.channel()), ps, qp_type)?;
        Ok(AsyncCmId::wrap(id, self.clone()))
    }

    /// The next event of `id`, an id of this channel with claimed events (e.g. one that an
    /// `Endpoint` with caller-supplied CQs owns). Cancel-safe.
    pub async fn next_event_for(&self, id: &CmId) -> io::Result<CmEvent> {
        id.claim_events();
        self.wait_for(|| id.try_next_event()).await
    }

    /// Waits until `take` returns something, reading the channel when it is readable.
    /// Cancel-safe if `take` is: nothing is consumed between a successful `take` and the return.
    pub(crate) async fn wait_for<T>(
        &self,
        mut take: impl FnMut() -> io::Result<Option<T>>,
    ) -> io::Result<T> {
        loop {
            let mut notified = pin!(self.notify.notified());
            notified.as_mut().enable();
            if let Some(t) = take()? {
                return Ok(t);
            }
            self.sleep(notified).await?;
        }
    }

    /// Sleeps until the fd is readable (then reads the whole kernel queue into the
    /// dispatcher, waking every waiter) or `notified` fires.
    pub(crate) async fn sleep(
        &self,
        notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    ) -> io::Result<()> {
        crate::readable_or_notified(&self.fd, notified, |fd| {
            fd.get_ref().dispatch()?;
            // dispatch() read to EAGAIN: the readiness is used up.
            Err(io::ErrorKind::WouldBlock.into())
        })
        .await
    }

    /// A new wake-up registration (for waits that combine this channel with others).
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

/// An asynchronous rdma_cm id on an [`AsyncEventChannel`], with futures for the calls that the
/// kernel completes with an event. Each future checks the event: the expected kind with status
/// 0, else the same error as the synchronous call (`REJECTED` → `ConnectionRefused` naming the
/// reject reason, `ADDR_ERROR` → its errno, …). The event that ended the last call is kept
/// ([`AsyncCmId::take_event`]).
pub struct AsyncCmId {
    id: CmId,
    ch: Arc<AsyncEventChannel>,
    last: std::sync::Mutex<Option<CmEvent>>,
}

impl fmt::Debug for AsyncCmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCmId")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl AsyncCmId {
    fn wrap(id: CmId, ch: Arc<AsyncEventChannel>) -> AsyncCmId {
        id.claim_events();
        AsyncCmId {
            id,
            ch,
            last: std::sync::Mutex::new(None),
        }
    }

    /// Wraps an asynchronous id of `ch` (e.g. from [`CmEvent::take_id`]), claiming its events.
    pub fn from_id(id: CmId, ch: &Arc<AsyncEventChannel>) -> io::Result<AsyncCmId> {
        if id.is_sync() || !id.event_channel().same_channel(ch.channel()) {
            return Err(Error::invalid(
                format!("async rdma_cm id {}", id.handle()),
                "the id's events go to another channel (or it is synchronous)",
            )
            .into());
        }
        Ok(Self::wrap(id, ch.clone()))
    }

    /// The id.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// The id, giving up the async wrapper (its events stay claimed).
    pub fn into_id(self) -> CmId {
        self.id
    }

    /// The channel.
    pub fn channel(&self) -> &Arc<AsyncEventChannel> {
        &self.ch
    }

    /// The event that ended the last call (success or failure), e.g. the REJECTED event with
    /// the peer's private data.
    pub fn take_event(&self) -> Option<CmEvent> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The next event of this id. Cancel-safe.
    pub async fn next_event(&self) -> io::Result<CmEvent> {
        self.ch.wait_for(|| self.id.try_next_event()).await
    }

    /// Waits for the next event and checks it is one of `ok`; keeps it for `take_event`.
    async fn expect(&self, op: &'static str, ok: &[CmEventKind]) -> io::Result<()> {
        let ev = self.next_event().await?;
        let r = ev.check(op, ok);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(ev);
        r
    }

    /// Binds to a local address (no event: immediate).
    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        self.id.bind(addr)
    }

    /// `resolve_addr`, completed by ADDR_RESOLVED.
    pub async fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<()> {
        self.id.resolve_addr(src, dst, timeout)?;
        self.expect("resolve_addr", &[CmEventKind::ADDR_RESOLVED])
            .await
            .map_err(|e| Error::add_detail(e, format!("destination {dst}")))
    }

    /// `resolve_route`, completed by ROUTE_RESOLVED.
    pub async fn resolve_route(&self, timeout: Duration) -> io::Result<()> {
        self.id.resolve_route(timeout)?;
        self.expect("resolve_route", &[CmEventKind::ROUTE_RESOLVED])
            .await
    }

    /// Listens (no event: immediate). `backlog` 0: the kernel's maximum.
    pub fn listen(&self, backlog: u32) -> io::Result<()> {
        self.id.listen(backlog)
    }

    /// The next connection request on this listening id: the new id (on the same channel, its
    /// events claimed) and its CONNECT_REQUEST event (private data, parameters). Cancel-safe:
    /// a request stays queued until the future that returns it takes it.
    pub async fn get_request(&self) -> io::Result<(AsyncCmId, CmEvent)> {
        loop {
            let mut ev = self.next_event().await?;
            if ev.kind() != CmEventKind::CONNECT_REQUEST {
                // A listener gets nothing else in normal operation; report it.
                ev.check("get_request", &[CmEventKind::CONNECT_REQUEST])?;
                continue;
            }
            let id = ev.take_id().ok_or_else(|| {
                io::Error::from(Error::protocol(
                    "get_request",
                    "CONNECT_REQUEST without a new id",
                ))
            })?;
            return Ok((Self::wrap(id, self.ch.clone()), ev));
        }
    }

    /// `connect` without a QP (the handshake only, as `CmId::connect`): RC waits for
    /// CONNECT_RESPONSE and sends the RTU; UD waits for ESTABLISHED. With a QP use
    /// [`crate::AsyncEndpoint::connect`].
    pub async fn connect(&self, param: &ConnParam) -> io::Result<()> {
        self.id.connect(param)?;
        if self.id.qp_type() == QpType::UD {
            return self.expect("connect", &[CmEventKind::ESTABLISHED]).await;
        }
        self.expect("connect", &[CmEventKind::CONNECT_RESPONSE])
            .await?;
        self.id.establish()
    }

    /// `accept`: sends the REP; RC waits for ESTABLISHED.
    pub async fn accept(&self, param: &ConnParam) -> io::Result<()> {
        self.id.accept(param)?;
        if self.id.qp_type() == QpType::UD {
            return Ok(());
        }
        self.expect("accept", &[CmEventKind::ESTABLISHED]).await
    }

    /// `join_multicast` ([`CmId::join_multicast`]), completed by MULTICAST_JOIN: returns its
    /// UD parameters (the AH attributes, QP number and Q_Key for sending to the group, and the
    /// GID and LID a receiving QP attaches to). On MULTICAST_ERROR (or any other event of the
    /// id) the group is left again and the error names the event. Join one group at a time per
    /// id: the future takes the id's next event. Not cancel-safe: dropped while waiting, the
    /// join stands (leave it with [`AsyncCmId::leave_multicast`]).
    pub async fn join_multicast(
        &self,
        addr: SocketAddr,
        flags: McJoinFlags,
    ) -> io::Result<UdEventParam> {
        self.id.join_multicast(addr, flags)?;
        let r = self
            .expect("join_multicast", &[CmEventKind::MULTICAST_JOIN])
            .await;
        let ud = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|e| e.ud());
        match (r, ud) {
            (Ok(()), Some(ud)) => Ok(ud),
            (r, _) => {
                if let Err(l) = self.id.leave_multicast(addr) {
                    tracing::warn!("leaving {} after the failed join: {l}", addr.ip());
                }
                Err(r.err().unwrap_or_else(|| {
                    Error::protocol("join_multicast", "MULTICAST_JOIN without UD parameters").into()
                }))
            }
        }
    }

    /// `leave_multicast` ([`CmId::leave_multicast`]; no event: immediate).
    pub fn leave_multicast(&self, addr: SocketAddr) -> io::Result<u32> {
        self.id.leave_multicast(addr)
    }

    /// `disconnect`, completed by this id's DISCONNECTED, which comes when the peer answers the
    /// DREQ (its own disconnect or the destruction of its id) or the CM stops waiting. If the
    /// connection already ended, it answers the peer (DREP) and returns at once.
    pub async fn disconnect(&self) -> io::Result<()> {
        if self.id.end_event().is_some() {
            let _ = self.id.disconnect();
            return Ok(());
        }
        self.id.disconnect()?;
        self.ch
            .wait_for(|| Ok(self.id.end_event().map(|_| ())))
            .await
    }
}
