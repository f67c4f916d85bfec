//! `CmId`: an rdma_cm identifier (the kernel's `rdma_cm_id` behind a ucma context): its
//! creation, events, errors and destruction. What an id does lives in the child modules:
//! `connect` (address and route resolution, listen/accept/reject, connect/disconnect),
//! `attrs` (what the kernel tells about the id: INIT_QP_ATTR and the QUERY commands, whose
//! answers are the types of the crate's `query` module), `options` (SET_OPTION and notify).

mod attrs;
mod connect;
mod multicast;
mod options;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::io::Errno;
use rverbs_uverbs::Error;
use zerocopy::{FromZeros, IntoBytes};

use crate::abi::{self, cmd};
use crate::addr::{self, CmAddr, IbAddr};
use crate::channel::{resp_ptr, Channel, Dispatch, EventChannel};
use crate::event::CmEvent;
use crate::query::{AddrQuery, GidQuery, PathRecord, RouteQuery};
use rverbs_uverbs::qp::QpAttr;

use crate::types::{CmEventKind, PortSpace, QpState, QpType, RejectReason};

// --- uid: our cookie for an id, echoed by the kernel in every event --------------------------
//
// The kernel drops the events of an id whose uid is 0, and the event's `param` union is `ud`
// or `conn` depending on the id's QP type, which the event does not say. So the uid carries a
// process-unique serial (never 0) and the port space / QP type: bits 0..16 port space, 16..24
// QP type, 24..64 serial.

static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

fn make_uid(ps: PortSpace, qp_type: QpType) -> u64 {
    // Relaxed: only uniqueness matters, not ordering with other memory.
    let serial = NEXT_SERIAL.fetch_add(1, Ordering::Relaxed) & ((1 << 40) - 1);
    (serial.max(1) << 24) | (u64::from(qp_type.0) << 16) | u64::from(ps.0)
}

/// librdmacm's `RDMA_CM_EVENT_INTERNAL`: the event kind it writes for itself
/// ([`CmId::write_internal_event`]); not a constant of [`CmEventKind`], as no user of this
/// crate reads one.
pub(crate) const INTERNAL_EVENT: u32 = 19;

/// Port space and QP type from one of our uids (`None` for a uid we did not make).
pub(crate) fn uid_info(uid: u64) -> (Option<PortSpace>, Option<QpType>) {
    if uid >> 24 == 0 {
        return (None, None);
    }
    let ps = PortSpace(uid as u16);
    let qp = QpType((uid >> 16) as u8);
    (ps.name().map(|_| ps), qp.name().map(|_| qp))
}

// --- internal progress, for error messages ---------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Created,
    FromRequest,
    Bound(SocketAddr),
    ResolvingAddr(SocketAddr),
    ResolvingRoute,
    Listening,
    Connecting,
    Accepting,
    Rejected,
    Disconnecting,
    /// A synchronous wait saw this event.
    Event(CmEventKind),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Created => f.write_str("created"),
            Step::FromRequest => f.write_str("created by a connection request"),
            Step::Bound(a) => write!(f, "bound to {a}"),
            Step::ResolvingAddr(a) => write!(f, "resolve_addr of {a} issued"),
            Step::ResolvingRoute => f.write_str("resolve_route issued"),
            Step::Listening => f.write_str("listening"),
            Step::Connecting => f.write_str("connect issued"),
            Step::Accepting => f.write_str("accept issued"),
            Step::Rejected => f.write_str("reject issued"),
            Step::Disconnecting => f.write_str("disconnect issued"),
            Step::Event(k) => write!(f, "{k} received"),
        }
    }
}

/// What an operation needs, for EINVAL messages.
fn needs(op: &str) -> &'static str {
    match op {
        "bind" => "the id must be fresh (not bound, resolving, listening or connected)",
        "resolve_addr" => "the id must be fresh or bound",
        "resolve_route" => "the address must be resolved first (ADDR_RESOLVED)",
        "listen" => "the id must be fresh or bound, not resolving, connected or listening",
        "connect" => "the route must be resolved first (ROUTE_RESOLVED), and only once",
        "accept" => {
            "it needs a pending connection request not yet accepted or rejected (or, on the \
             active side, a CONNECT_RESPONSE)"
        }
        "join_multicast" => {
            "the id needs a device: bind it to a local address or resolve the group's address \
             from a local one first"
        }
        "establish" => "it needs a CONNECT_RESPONSE on an active RC id",
        "reject" => "it needs a pending connection request",
        "disconnect" => "it needs a connection (connecting or established)",
        "init_qp_attr" => {
            "the id needs a device: a resolved address, a device address bind, or a connection \
             request"
        }
        _ => "the kernel refuses it in the id's current state",
    }
}

struct IdState {
    step: Step,
    /// Synchronous ids: the event that ended the last synchronous step.
    event: Option<Box<CmEvent>>,
    sync_timeout: Option<Duration>,
    /// From the CONNECT_REQUEST (already in our view): (initiator_depth, responder_resources).
    req_depths: Option<(u8, u8)>,
    /// Device limits (max_qp_init_rd_atom, max_qp_rd_atom) when the caller told us.
    rd_max: Option<(u8, u8)>,
    /// The multicast groups joined and not left.
    joined: Vec<multicast::Joined>,
}

/// An rdma_cm identifier: the rdma_cm's equivalent of a socket.
///
/// Created on an [`EventChannel`] (asynchronous: each call returns once the kernel took the
/// command; its events arrive on the channel) or without one (**synchronous**, like librdmacm's
/// ids without a channel: the id gets a private channel and each call that the kernel completes
/// with an event waits for that event and fails with the event's error).
///
/// Dropping the id destroys it (`DESTROY_ID`): the kernel discards its unread events, so drop
/// never waits. Methods take `&self`; the id is `Send + Sync`.
pub struct CmId {
    chan: Arc<Channel>,
    handle: u32,
    uid: u64,
    ps: PortSpace,
    qp_type: QpType,
    sync: bool,
    destroyed: bool,
    state: Mutex<IdState>,
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmId")
            .field("handle", &self.handle)
            .field("uid", &format_args!("{:#x}", self.uid))
            .field("port_space", &self.ps)
            .field("qp_type", &self.qp_type)
            .field("sync", &self.sync)
            .field("step", &self.lock().step)
            .finish()
    }
}

impl CmId {
    /// Creates an id. `channel: None` makes a synchronous id with its own private channel.
    /// The QP type follows the port space (TCP → RC, UDP/IPOIB → UD, IB → RC).
    pub fn create(channel: Option<&EventChannel>, ps: PortSpace) -> io::Result<CmId> {
        Self::create_with_qp_type(channel, ps, ps.default_qp_type())
    }

    /// Creates an id with an explicit QP type (the kernel honours it only for
    /// [`PortSpace::IB`]; TCP is always RC and UDP/IPOIB always UD).
    pub fn create_with_qp_type(
        channel: Option<&EventChannel>,
        ps: PortSpace,
        qp_type: QpType,
    ) -> io::Result<CmId> {
        let effective = match ps {
            PortSpace::TCP => QpType::RC,
            PortSpace::UDP | PortSpace::IPOIB => QpType::UD,
            _ => qp_type,
        };
        if effective != qp_type {
            return Err(Error::invalid(
                "create rdma_cm id",
                format!("port space {ps} implies QP type {effective}, not {qp_type}"),
            )
            .into());
        }
        let (chan, sync) = match channel {
            Some(c) => (c.chan.clone(), false),
            None => (Channel::open()?, true),
        };
        let uid = make_uid(ps, qp_type);
        let mut resp = abi::rdma_ucm_create_id_resp::default();
        let req = abi::rdma_ucm_create_id {
            uid,
            response: resp_ptr(&mut resp),
            ps: ps.0,
            qp_type: qp_type.0,
            reserved: [0; 5],
        };
        chan.command(cmd::CREATE_ID, &req, size_of_val(&resp))
            .map_err(|e| {
                Error::os("create rdma_cm id", e)
                    .with_detail(format!("port space {ps}, QP type {qp_type}"))
            })?;
        tracing::debug!(id = resp.id, ?ps, ?qp_type, sync, "rdma_cm id created");
        if sync {
            // A private channel's events are the id's own: nobody else may take them.
            chan.lock().claim(uid);
        }
        Ok(CmId {
            chan,
            handle: resp.id,
            uid,
            ps,
            qp_type,
            sync,
            destroyed: false,
            state: Mutex::new(IdState {
                step: Step::Created,
                event: None,
                sync_timeout: None,
                req_depths: None,
                rd_max: None,
                joined: Vec::new(),
            }),
        })
    }

    /// Wraps the id the kernel created for a connection request (asynchronous, on `chan`).
    pub(crate) fn from_request(
        chan: Arc<Channel>,
        handle: u32,
        ps: PortSpace,
        qp_type: QpType,
        req_depths: (u8, u8),
    ) -> CmId {
        CmId {
            chan,
            handle,
            uid: make_uid(ps, qp_type),
            ps,
            qp_type,
            sync: false,
            destroyed: false,
            state: Mutex::new(IdState {
                step: Step::FromRequest,
                event: None,
                sync_timeout: None,
                req_depths: Some(req_depths),
                rd_max: None,
                joined: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, IdState> {
        // A panic while holding this lock cannot leave the state inconsistent (plain fields).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_step(&self, step: Step) {
        self.lock().step = step;
    }

    internal! {
    /// The kernel's handle for this id (unique while the id lives; reused after destroy).
    pub fn handle(&self) -> u32 {
        self.handle
    }
    }

    /// The uid the kernel echoes in this id's events (process-unique, never 0).
    pub fn uid(&self) -> u64 {
        self.uid
    }

    /// The id's port space (TCP for RC, UDP for UD, IB for any QP type).
    pub fn port_space(&self) -> PortSpace {
        self.ps
    }

    /// The QP type this id connects (the port space's default unless chosen at creation).
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// True for ids without an explicit channel (each call waits for its event).
    pub fn is_sync(&self) -> bool {
        self.sync
    }

    /// The fd of the channel this id's events arrive on (for synchronous ids: the private one),
    /// for poll/epoll or an async runtime. When it is readable, call
    /// [`CmId::try_next_event`] (synchronous or claimed ids) or
    /// [`EventChannel::try_get_event`] until `None` before waiting again (see
    /// [`EventChannel`]'s readiness protocol).
    pub fn channel_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.chan.fd()
    }

    /// A handle to the channel this id's events arrive on (for synchronous ids: the private
    /// one). Its [`EventChannel::try_get_event`] never takes a synchronous or claimed id's
    /// events; [`EventChannel::dispatch`] and [`EventChannel::on_dispatch`] serve event loops
    /// that wait for this id.
    pub fn event_channel(&self) -> EventChannel {
        EventChannel {
            chan: self.chan.clone(),
        }
    }

    /// Reserves this id's events for the id itself: from now on they are read with
    /// [`CmId::try_next_event`] / [`CmId::get_event`], and the channel's
    /// [`EventChannel::get_event`] skips them. Synchronous ids are claimed from the start.
    /// Events of the id that a channel reader already took stay taken.
    pub fn claim_events(&self) {
        self.chan.lock().claim(self.uid);
    }

    /// The next event of this id if one is queued (reading the kernel's queue first), without
    /// waiting. For synchronous ids and ids with [`CmId::claim_events`].
    pub fn try_next_event(&self) -> io::Result<Option<CmEvent>> {
        let uid = self.uid;
        let raw = self
            .chan
            .try_get_with(|d| d.take_for(uid))
            .map_err(|e| Error::os("get rdma_cm event", e))?;
        Ok(raw.map(|r| {
            let ev = CmEvent::decode(r, &self.chan);
            self.set_step(Step::Event(ev.kind()));
            ev
        }))
    }

    /// The event that ended this id's connection (DISCONNECTED or DEVICE_REMOVAL) and its
    /// status, once the channel's dispatcher has read it — whoever takes the event itself.
    /// Completion waits ([`crate::Endpoint::get_recv_comp`]) end on it.
    pub fn end_event(&self) -> Option<(CmEventKind, i32)> {
        self.chan.lock().ended(self.uid)
    }

    /// The channel (crate-internal: the verbs helpers wait on its dispatcher).
    pub(crate) fn channel(&self) -> &Arc<Channel> {
        &self.chan
    }

    /// Synchronous ids: bounds every internal wait (`None`, the default, waits as long as the
    /// kernel takes, which its own timeouts bound). On expiry the call fails with `TimedOut`;
    /// the kernel operation continues and its event is read by the next wait.
    pub fn set_sync_timeout(&self, timeout: Option<Duration>) {
        self.lock().sync_timeout = timeout;
    }

    /// Tells the id the device's limits (`max_qp_init_rd_atom`, `max_qp_rd_atom`), used for
    /// `None` initiator_depth / responder_resources in [`ConnParam`](crate::ConnParam) (as librdmacm does with
    /// the device it queries).
    pub fn set_rd_atomic_max(&self, max_initiator_depth: u8, max_responder_resources: u8) {
        self.lock().rd_max = Some((max_initiator_depth, max_responder_resources));
    }

    /// Synchronous ids: takes the event that ended the last synchronous call (e.g. the
    /// REJECTED event with the peer's private data after `connect` failed, or the
    /// CONNECT_REQUEST of an id returned by `get_request`).
    pub fn take_event(&self) -> Option<CmEvent> {
        self.lock().event.take().map(|b| *b)
    }

    // --- errors ------------------------------------------------------------------------------

    fn kernel_err(&self, op: &'static str, e: Errno) -> io::Error {
        let step = self.lock().step.clone();
        let mut err = Error::os(op, e).with_detail(format!(
            "rdma_cm id {} ({} {}, {step})",
            self.handle, self.ps, self.qp_type
        ));
        match e {
            Errno::INVAL => err = err.with_detail(format!("{op} refused: {}", needs(op))),
            Errno::ADDRNOTAVAIL if op == "bind" => {
                err = err.with_detail("no local interface has this address")
            }
            Errno::ADDRINUSE => err = err.with_detail("the port is in use in this port space"),
            Errno::NODEV => err = err.with_detail("no RDMA device serves this address"),
            _ => {}
        }
        err.into()
    }

    fn run<Req: IntoBytes + zerocopy::Immutable>(
        &self,
        op: &'static str,
        c: u32,
        req: &Req,
        out_len: usize,
    ) -> io::Result<()> {
        tracing::trace!(id = self.handle, op, "rdma_cm command");
        self.chan
            .command(c, req, out_len)
            .map_err(|e| self.kernel_err(op, e))
    }

    /// Synchronous ids: reads this id's next event and checks it is one of `ok` with status 0.
    fn wait(&self, op: &'static str, ok: &[CmEventKind]) -> io::Result<()> {
        let timeout = self.lock().sync_timeout;
        let uid = self.uid;
        let raw = self
            .chan
            .get_with(timeout, |d: &mut Dispatch| d.take_for(uid))
            .map_err(|e| Error::os(op, e).with_detail("reading the id's event"))?;
        let Some(raw) = raw else {
            return Err(Error::os(op, Errno::TIMEDOUT)
                .with_detail(format!(
                    "no rdma_cm event for id {} within {:?} (waiting for {})",
                    self.handle,
                    timeout.unwrap_or_default(),
                    kinds(ok)
                ))
                .into());
        };
        let ev = CmEvent::decode(raw, &self.chan);
        let res = check_event(op, &ev, ok);
        let mut st = self.lock();
        st.step = Step::Event(ev.kind());
        st.event = Some(Box::new(ev));
        res
    }

    // --- channel migration and destruction ---------------------------------------------------

    /// Moves the id (and its queued events) to another channel (`MIGRATE_ID`); `None` gives it
    /// a new private channel and makes it synchronous. Returns the number of events the kernel
    /// had reported for the id.
    pub fn migrate(&mut self, to: Option<&EventChannel>) -> io::Result<u32> {
        let new_chan = match to {
            Some(c) => c.chan.clone(),
            None => Channel::open()?,
        };
        let mut resp = abi::rdma_ucm_migrate_resp::default();
        let req = abi::rdma_ucm_migrate_id {
            response: resp_ptr(&mut resp),
            id: self.handle,
            fd: self.chan.raw_fd() as u32,
        };
        new_chan
            .command(cmd::MIGRATE_ID, &req, size_of_val(&resp))
            .map_err(|e| self.kernel_err("migrate", e))?;
        // The kernel moved the events it held; move those our dispatcher already read (they
        // are older) and the claim.
        let (claimed, queued) = {
            let mut d = self.chan.lock();
            let claimed = d.is_claimed(self.uid);
            (claimed, d.forget(self.uid))
        };
        self.sync = to.is_none();
        new_chan
            .lock()
            .adopt(self.uid, claimed || self.sync, queued);
        self.chan = new_chan;
        Ok(resp.events_reported)
    }

    fn destroy_inner(&mut self) -> io::Result<u32> {
        if self.destroyed {
            return Ok(0);
        }
        self.destroyed = true;
        let mut resp = abi::rdma_ucm_destroy_id_resp::default();
        let req = abi::rdma_ucm_destroy_id {
            response: resp_ptr(&mut resp),
            id: self.handle,
            reserved: 0,
        };
        self.run("destroy_id", cmd::DESTROY_ID, &req, size_of_val(&resp))?;
        Ok(resp.events_reported)
    }

    /// Destroys the id now (`DESTROY_ID`), returning how many events the kernel reported for
    /// it. Dropping does the same and logs errors instead.
    pub fn destroy(mut self) -> io::Result<u32> {
        self.destroy_inner()
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Err(e) = self.destroy_inner() {
                tracing::warn!("dropping rdma_cm id {}: {e}", self.handle);
            }
        }
        // The kernel discarded the events it still held; discard those the dispatcher read.
        // A CONNECT_REQUEST among them owns a new id: decoding and dropping it destroys that
        // id (outside the dispatcher's lock: destroying writes a command).
        let queued = self.chan.lock().forget(self.uid);
        for raw in queued {
            drop(CmEvent::decode(raw, &self.chan));
        }
    }
}

fn kinds(ok: &[CmEventKind]) -> String {
    ok.iter()
        .map(|k| k.to_string())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The error a synchronous wait reports for an event that is not the expected success.
pub(crate) fn check_event(op: &'static str, ev: &CmEvent, ok: &[CmEventKind]) -> io::Result<()> {
    let kind = ev.kind();
    if ok.contains(&kind) && ev.status() == 0 {
        return Ok(());
    }
    let err = if let Some(reason) = ev.reject_reason() {
        let why = if reason == RejectReason::INVALID_SERVICE_ID {
            " (nobody listens on that port)"
        } else {
            ""
        };
        Error::os(op, Errno::CONNREFUSED).with_detail(format!(
            "REJECTED by the peer: IB CM reject reason {} {reason}{why}; the event with {} bytes \
             of private data is in CmId::take_event",
            reason.0,
            ev.private_data().len()
        ))
    } else if let Some(e) = ev.errno() {
        Error::os(op, e).with_detail(format!("{kind} event instead of {}", kinds(ok)))
    } else if (1..4096).contains(&ev.status()) {
        Error::os(op, Errno::from_raw_os_error(ev.status()))
            .with_detail(format!("{kind} event instead of {}", kinds(ok)))
    } else {
        Error::protocol(
            op,
            format!(
                "{kind} event (status {}) while waiting for {}",
                ev.status(),
                kinds(ok)
            ),
        )
    };
    Err(err.into())
}

fn millis(op: &'static str, d: Duration) -> io::Result<u32> {
    u32::try_from(d.as_millis()).map_err(|_| {
        Error::invalid(op, format!("timeout {d:?} exceeds u32::MAX milliseconds")).into()
    })
}

/// Sysfs formatting of a node GUID: `xxxx:xxxx:xxxx:xxxx`.
pub(crate) fn format_guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) as u16,
        (g >> 32) as u16,
        (g >> 16) as u16,
        g as u16
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_roundtrip_and_never_zero() {
        let u = make_uid(PortSpace::UDP, QpType::UD);
        assert_ne!(u >> 24, 0);
        assert_eq!(uid_info(u), (Some(PortSpace::UDP), Some(QpType::UD)));
        let v = make_uid(PortSpace::TCP, QpType::RC);
        assert_ne!(u, v);
        assert_eq!(uid_info(v), (Some(PortSpace::TCP), Some(QpType::RC)));
        assert_eq!(uid_info(0), (None, None));
        assert_eq!(uid_info(0x1234), (None, None));
    }

    #[test]
    fn guid_format() {
        assert_eq!(format_guid(0x0211_22ff_fe33_4455), "0211:22ff:fe33:4455");
    }
}
