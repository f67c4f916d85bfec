//! `CmId`: an rdma_cm identifier (the kernel's `rdma_cm_id` behind a ucma context).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::io::Errno;
use rverbs_uverbs::Error;
use zerocopy::{FromZeros, IntoBytes};

use crate::abi::{self, cm_sizes, cmd};
use crate::addr::{self, CmAddr, IbAddr};
use crate::channel::{resp_ptr, Channel, Dispatch, EventChannel};
use crate::event::CmEvent;
use crate::query::{AddrQuery, GidQuery, PathRecord, RouteQuery};
use rverbs_uverbs::qp::QpAttr;

use crate::types::{CmEventKind, PortSpace, QpState, QpType, RejectReason};

/// Defaults of librdmacm's `rdma_connect`/`rdma_accept` when the caller gives none.
pub const DEFAULT_RETRY_COUNT: u8 = 7;
/// See [`DEFAULT_RETRY_COUNT`].
pub const DEFAULT_RNR_RETRY_COUNT: u8 = 7;
/// responder_resources / initiator_depth used when neither the caller nor
/// [`CmId::set_rd_atomic_max`] says more: 1 lets RDMA READ work on every device.
pub const FALLBACK_RD_ATOMIC: u8 = 1;

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

/// Port space and QP type from one of our uids (`None` for a uid we did not make).
pub(crate) fn uid_info(uid: u64) -> (Option<PortSpace>, Option<QpType>) {
    if uid >> 24 == 0 {
        return (None, None);
    }
    let ps = PortSpace(uid as u16);
    let qp = QpType((uid >> 16) as u8);
    (ps.name().map(|_| ps), qp.name().map(|_| qp))
}

// --- connection parameters -------------------------------------------------------------------

/// Parameters of [`CmId::connect`] and [`CmId::accept`] (`struct rdma_conn_param`).
///
/// Defaults follow librdmacm: retry_count 7, rnr_retry_count 7; `None` for
/// responder_resources / initiator_depth means "the device maximum" when known (see
/// [`CmId::set_rd_atomic_max`]), on accept at most what the peer's request asked, else
/// [`FALLBACK_RD_ATOMIC`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    /// Sent in the REQ/REP (or SIDR REQ/REP). Limits on IB/RoCE with IP addressing: connect RC
    /// 56, connect UD 180, accept RC 196, accept UD 136.
    pub private_data: Vec<u8>,
    /// RDMA reads/atomics the peer may have outstanding toward us.
    pub responder_resources: Option<u8>,
    /// RDMA reads/atomics we may have outstanding toward the peer.
    pub initiator_depth: Option<u8>,
    /// Announce end-to-end flow control support.
    pub flow_control: bool,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Announce that the local QP takes receives from an SRQ.
    pub srq: bool,
    /// The local QP number announced to the peer (24 bits). The CM only carries it in its
    /// messages: a handshake without a QP can use any value.
    pub qp_num: u32,
    /// Only used with AF_IB addressing (which this crate does not produce).
    pub qkey: u32,
}

impl Default for ConnParam {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            responder_resources: None,
            initiator_depth: None,
            flow_control: false,
            retry_count: DEFAULT_RETRY_COUNT,
            rnr_retry_count: DEFAULT_RNR_RETRY_COUNT,
            srq: false,
            qp_num: 0,
            qkey: 0,
        }
    }
}

impl ConnParam {
    /// Default parameters announcing `qp_num`.
    pub fn with_qp_num(qp_num: u32) -> Self {
        Self {
            qp_num,
            ..Self::default()
        }
    }
}

/// The private-data limit for `op` on an id of `qp_type` with IP addressing, and its reason.
pub(crate) fn private_data_limit(op: &str, qp_type: QpType) -> (usize, &'static str) {
    let ud = qp_type == QpType::UD;
    match (op, ud) {
        ("connect", false) => (
            cm_sizes::REQ - cm_sizes::CMA_HDR,
            "an IB CM REQ carries 92 bytes, of which rdma_cm uses 36 for its address header",
        ),
        ("connect", true) => (
            cm_sizes::SIDR_REQ - cm_sizes::CMA_HDR,
            "an IB CM SIDR REQ carries 216 bytes, of which rdma_cm uses 36 for its address header",
        ),
        ("accept", false) => (
            cm_sizes::REP,
            "an IB CM REP carries 196 bytes of private data",
        ),
        ("reject", false) => (
            cm_sizes::REJ,
            "an IB CM REJ carries 148 bytes of private data",
        ),
        (_, true) => (
            cm_sizes::SIDR_REP,
            "an IB CM SIDR REP carries 136 bytes of private data",
        ),
        _ => (
            abi::RDMA_MAX_PRIVATE_DATA,
            "the ucma ABI buffer holds 256 bytes",
        ),
    }
}

fn check_private_data(op: &'static str, qp_type: QpType, data: &[u8]) -> io::Result<()> {
    let (limit, why) = private_data_limit(op, qp_type);
    if data.len() > limit {
        return Err(Error::invalid(
            op,
            format!(
                "{} bytes of private data exceed the limit of {limit} for {op} on a {qp_type} id \
                 ({why})",
                data.len()
            ),
        )
        .into());
    }
    Ok(())
}

/// Builds the kernel's conn_param, validating what the kernel would silently truncate.
pub(crate) fn encode_conn_param(
    op: &'static str,
    qp_type: QpType,
    p: &ConnParam,
    depths: (u8, u8),
) -> io::Result<abi::rdma_ucm_conn_param> {
    check_private_data(op, qp_type, &p.private_data)?;
    if p.retry_count > 7 || p.rnr_retry_count > 7 {
        return Err(Error::invalid(
            op,
            format!(
                "retry_count {} / rnr_retry_count {}: the CM carries 3 bits, 0..=7",
                p.retry_count, p.rnr_retry_count
            ),
        )
        .into());
    }
    if p.qp_num > 0x00ff_ffff {
        return Err(Error::invalid(
            op,
            format!("qp_num {:#x} does not fit in 24 bits", p.qp_num),
        )
        .into());
    }
    let mut c = abi::rdma_ucm_conn_param::new_zeroed();
    c.qp_num = p.qp_num;
    c.qkey = p.qkey;
    c.private_data[..p.private_data.len()].copy_from_slice(&p.private_data);
    c.private_data_len = p.private_data.len() as u8;
    c.srq = u8::from(p.srq);
    c.initiator_depth = depths.0;
    c.responder_resources = depths.1;
    c.flow_control = u8::from(p.flow_control);
    c.retry_count = p.retry_count;
    c.rnr_retry_count = p.rnr_retry_count;
    c.valid = 1;
    Ok(c)
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

    /// The kernel's handle for this id (unique while the id lives; reused after destroy).
    pub fn handle(&self) -> u32 {
        self.handle
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
    /// Completion waits ([`crate::verbs::Endpoint::get_recv_comp`]) end on it.
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
    /// `None` initiator_depth / responder_resources in [`ConnParam`] (as librdmacm does with
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

    // --- address and route ---------------------------------------------------------------

    /// Binds to a local address (`BIND`); port 0 picks a free port. Binding to an address of an
    /// RDMA device's netdev also attaches the id to that device.
    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let (storage, size) = addr::to_storage(&addr);
        let req = abi::rdma_ucm_bind {
            id: self.handle,
            addr_size: size,
            reserved: 0,
            addr: storage,
        };
        self.run("bind", cmd::BIND, &req, 0)
            .map_err(|e| add_detail(e, format!("address {addr}")))?;
        self.set_step(Step::Bound(addr));
        Ok(())
    }

    /// Resolves `dst` to an RDMA device and GID (`RESOLVE_ADDR`), from `src` if given.
    /// Completes with ADDR_RESOLVED or ADDR_ERROR (synchronous ids wait for it).
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut req = abi::rdma_ucm_resolve_addr {
            id: self.handle,
            timeout_ms: millis("resolve_addr", timeout)?,
            ..Default::default()
        };
        if let Some(s) = src {
            let (st, n) = addr::to_storage(&s);
            req.src_addr = st;
            req.src_size = n;
        }
        let (dt, n) = addr::to_storage(&dst);
        req.dst_addr = dt;
        req.dst_size = n;
        self.run("resolve_addr", cmd::RESOLVE_ADDR, &req, 0)
            .map_err(|e| add_detail(e, format!("destination {dst}")))?;
        self.set_step(Step::ResolvingAddr(dst));
        if self.sync {
            self.wait("resolve_addr", &[CmEventKind::ADDR_RESOLVED])
                .map_err(|e| add_detail(e, format!("destination {dst}")))?;
        }
        Ok(())
    }

    /// Resolves the route to the resolved address (`RESOLVE_ROUTE`). Completes with
    /// ROUTE_RESOLVED or ROUTE_ERROR.
    pub fn resolve_route(&self, timeout: Duration) -> io::Result<()> {
        let req = abi::rdma_ucm_resolve_route {
            id: self.handle,
            timeout_ms: millis("resolve_route", timeout)?,
        };
        self.run("resolve_route", cmd::RESOLVE_ROUTE, &req, 0)?;
        self.set_step(Step::ResolvingRoute);
        if self.sync {
            self.wait("resolve_route", &[CmEventKind::ROUTE_RESOLVED])?;
        }
        Ok(())
    }

    // --- passive side ----------------------------------------------------------------------

    /// Listens for connection requests (`LISTEN`). `backlog` 0 means the kernel's maximum
    /// (`net.rdma_ucm.max_backlog`, 1024 by default). An unbound id listens on all devices.
    pub fn listen(&self, backlog: u32) -> io::Result<()> {
        let req = abi::rdma_ucm_listen {
            id: self.handle,
            backlog,
        };
        self.run("listen", cmd::LISTEN, &req, 0)?;
        self.set_step(Step::Listening);
        Ok(())
    }

    /// Synchronous listening ids: waits for the next connection request and returns the new
    /// id, itself synchronous (moved to its own channel). Its CONNECT_REQUEST event (private
    /// data, parameters) is available through [`CmId::take_event`].
    pub fn get_request(&self) -> io::Result<CmId> {
        if !self.sync {
            return Err(Error::invalid(
                "get_request",
                format!(
                    "rdma_cm id {} uses an explicit EventChannel: read CONNECT_REQUEST events \
                     there (CmEvent::take_id)",
                    self.handle
                ),
            )
            .into());
        }
        self.wait("get_request", &[CmEventKind::CONNECT_REQUEST])?;
        let mut ev = self
            .take_event()
            .ok_or_else(|| Error::protocol("get_request", "event vanished"))?;
        let mut id = ev
            .take_id()
            .ok_or_else(|| Error::protocol("get_request", "CONNECT_REQUEST without a new id"))?;
        id.migrate(None)?;
        id.lock().event = Some(Box::new(ev));
        Ok(id)
    }

    /// Accepts a connection request (`ACCEPT`), sending the REP (or SIDR REP for UD). Move the
    /// QP to RTR and RTS (with [`CmId::init_qp_attr`]) before calling this. Synchronous RC ids
    /// wait for ESTABLISHED.
    pub fn accept(&self, param: &ConnParam) -> io::Result<()> {
        let (req_depths, rd_max) = {
            let st = self.lock();
            (st.req_depths, st.rd_max)
        };
        let clamp = |asked: Option<u8>, requested: Option<u8>, max: Option<u8>| {
            asked.unwrap_or_else(|| match (requested, max) {
                (Some(r), Some(m)) => r.min(m),
                (Some(r), None) => r,
                (None, Some(m)) => m,
                (None, None) => FALLBACK_RD_ATOMIC,
            })
        };
        let depths = (
            clamp(
                param.initiator_depth,
                req_depths.map(|d| d.0),
                rd_max.map(|m| m.0),
            ),
            clamp(
                param.responder_resources,
                req_depths.map(|d| d.1),
                rd_max.map(|m| m.1),
            ),
        );
        let req = abi::rdma_ucm_accept {
            uid: self.uid,
            conn_param: encode_conn_param("accept", self.qp_type, param, depths)?,
            id: self.handle,
            reserved: 0,
            ece: abi::rdma_ucm_ece::default(),
        };
        self.run("accept", cmd::ACCEPT, &req, 0)?;
        self.set_step(Step::Accepting);
        if self.sync && self.qp_type != QpType::UD {
            self.wait("accept", &[CmEventKind::ESTABLISHED])?;
        }
        Ok(())
    }

    /// Rejects a connection request (`REJECT`, reason "consumer defined" 28) with private data
    /// (RC: at most 148 bytes, UD: 136). The active side gets REJECTED with status 28.
    pub fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        check_private_data("reject", self.qp_type, private_data)?;
        let mut req = abi::rdma_ucm_reject::new_zeroed();
        req.id = self.handle;
        req.private_data_len = private_data.len() as u8;
        req.reason = 0;
        req.private_data[..private_data.len()].copy_from_slice(private_data);
        self.run("reject", cmd::REJECT, &req, 0)?;
        self.set_step(Step::Rejected);
        Ok(())
    }

    // --- active side -----------------------------------------------------------------------

    /// Connects (`CONNECT`): sends the REQ (SIDR REQ for UD). Synchronous RC ids wait for
    /// CONNECT_RESPONSE and then send the RTU ([`CmId::establish`]); synchronous UD ids wait
    /// for ESTABLISHED. With a QP, use [`CmId::connect_with`] to move it to RTR/RTS in between.
    pub fn connect(&self, param: &ConnParam) -> io::Result<()> {
        self.connect_with(param, |_, _| Ok(()))
    }

    /// [`CmId::connect`] with a step between the peer's REP (CONNECT_RESPONSE) and our RTU, for
    /// synchronous RC ids: `on_response` gets the id and the CONNECT_RESPONSE event and must
    /// bring the QP to RTS (`init_qp_attr(RTR)`, modify, `init_qp_attr(RTS)`, modify). If it
    /// fails, the connection is rejected and its error returned. Asynchronous ids ignore it:
    /// they see CONNECT_RESPONSE on their channel and call [`CmId::establish`].
    pub fn connect_with(
        &self,
        param: &ConnParam,
        on_response: impl FnOnce(&CmId, &CmEvent) -> io::Result<()>,
    ) -> io::Result<()> {
        let rd_max = self.lock().rd_max;
        let depths = (
            param
                .initiator_depth
                .unwrap_or(rd_max.map_or(FALLBACK_RD_ATOMIC, |m| m.0)),
            param
                .responder_resources
                .unwrap_or(rd_max.map_or(FALLBACK_RD_ATOMIC, |m| m.1)),
        );
        let req = abi::rdma_ucm_connect {
            conn_param: encode_conn_param("connect", self.qp_type, param, depths)?,
            id: self.handle,
            reserved: 0,
            ece: abi::rdma_ucm_ece::default(),
        };
        self.run("connect", cmd::CONNECT, &req, 0)?;
        self.set_step(Step::Connecting);
        if !self.sync {
            return Ok(());
        }
        if self.qp_type == QpType::UD {
            return self.wait("connect", &[CmEventKind::ESTABLISHED]);
        }
        self.wait("connect", &[CmEventKind::CONNECT_RESPONSE])?;
        let ev = self
            .take_event()
            .ok_or_else(|| Error::protocol("connect", "event vanished"))?;
        let hook = on_response(self, &ev);
        self.lock().event = Some(Box::new(ev));
        if let Err(e) = hook {
            // Tell the peer now rather than letting it time out waiting for our RTU.
            if let Err(r) = self.reject(&[]) {
                tracing::debug!(id = self.handle, "reject after a failed connect step: {r}");
            }
            return Err(e);
        }
        self.establish()
    }

    /// Active RC side after CONNECT_RESPONSE (QP already in RTS): sends the RTU (an `ACCEPT`
    /// without parameters), completing the connection. The passive side then gets
    /// ESTABLISHED. (librdmacm's `rdma_establish`.)
    pub fn establish(&self) -> io::Result<()> {
        let mut req = abi::rdma_ucm_accept::new_zeroed();
        req.id = self.handle;
        self.run("establish", cmd::ACCEPT, &req, 0)?;
        self.set_step(Step::Event(CmEventKind::ESTABLISHED));
        Ok(())
    }

    /// Disconnects (`DISCONNECT`: DREQ, or DREP when answering the peer's). Move the QP to ERR
    /// first. Both sides get DISCONNECTED; this call does not wait for it.
    pub fn disconnect(&self) -> io::Result<()> {
        let req = abi::rdma_ucm_disconnect { id: self.handle };
        self.run("disconnect", cmd::DISCONNECT, &req, 0)?;
        self.set_step(Step::Disconnecting);
        Ok(())
    }

    /// Synchronous ids: waits for this id's next event (e.g. DISCONNECTED), up to `timeout`
    /// (`None`: forever). `Ok(None)` on timeout.
    pub fn get_event(&self, timeout: Option<Duration>) -> io::Result<Option<CmEvent>> {
        if !self.sync && !self.chan.lock().is_claimed(self.uid) {
            return Err(Error::invalid(
                "get_event",
                format!(
                    "rdma_cm id {} uses an explicit EventChannel: read its events there (or \
                     claim them with CmId::claim_events)",
                    self.handle
                ),
            )
            .into());
        }
        let uid = self.uid;
        let raw = self
            .chan
            .get_with(timeout, |d: &mut Dispatch| d.take_for(uid))
            .map_err(|e| Error::os("get rdma_cm event", e))?;
        Ok(raw.map(|r| {
            let ev = CmEvent::decode(r, &self.chan);
            self.set_step(Step::Event(ev.kind()));
            ev
        }))
    }

    // --- QP attributes -----------------------------------------------------------------------

    /// The attributes the kernel wants a QP of this id to have in `state` (`INIT_QP_ATTR`),
    /// ready for [`Qp::modify`](rverbs_uverbs::qp::Qp::modify): exactly the fields the
    /// kernel's mask names are `Some` ([`QpAttr::mask`] gives that mask). INIT after
    /// address/route resolution or a request, RTR and RTS once the peer's parameters are
    /// known (CONNECT_RESPONSE, or the request).
    pub fn init_qp_attr(&self, state: QpState) -> io::Result<QpAttr> {
        let mut resp = abi::ib_uverbs_qp_attr::default();
        let req = abi::rdma_ucm_init_qp_attr {
            response: resp_ptr(&mut resp),
            id: self.handle,
            qp_state: u32::from(state.0),
        };
        self.run("init_qp_attr", cmd::INIT_QP_ATTR, &req, size_of_val(&resp))
            .map_err(|e| add_detail(e, format!("QP state {state}")))?;
        Ok(crate::qp_attr::from_kernel(&resp))
    }

    // --- queries -----------------------------------------------------------------------------

    /// Addresses and device of the id (`QUERY` / ADDR): local and peer addresses, the device's
    /// node GUID, port, P_Key and device index.
    pub fn query_addr(&self) -> io::Result<AddrQuery> {
        let mut resp = abi::rdma_ucm_query_addr_resp::default();
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut resp),
            id: self.handle,
            option: abi::query::ADDR,
        };
        self.run("query_addr", cmd::QUERY, &req, size_of_val(&resp))?;
        Ok(AddrQuery::from_raw(&resp))
    }

    /// The local and remote GIDs and P_Key as AF_IB addresses (`QUERY` / GID).
    pub fn query_gid(&self) -> io::Result<GidQuery> {
        let mut resp = abi::rdma_ucm_query_addr_resp::default();
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut resp),
            id: self.handle,
            option: abi::query::GID,
        };
        self.run("query_gid", cmd::QUERY, &req, size_of_val(&resp))?;
        let ib = |a: CmAddr| match a {
            CmAddr::Ib(ib) => ib,
            _ => IbAddr::default(),
        };
        Ok(GidQuery {
            src: ib(addr::decode_sized(&resp.src_addr.bytes, resp.src_size)),
            dst: ib(addr::decode_sized(&resp.dst_addr.bytes, resp.dst_size)),
            src_size: resp.src_size,
            dst_size: resp.dst_size,
        })
    }

    /// The resolved path records (`QUERY` / PATH); empty before ROUTE_RESOLVED.
    pub fn query_path(&self) -> io::Result<Vec<PathRecord>> {
        const MAX: usize = 6;
        const LEN: usize =
            size_of::<abi::rdma_ucm_query_path_resp>() + MAX * size_of::<abi::ib_path_rec_data>();
        // A u64 buffer keeps the response 8-byte aligned like the kernel's structure.
        let mut buf = [0u64; LEN / 8];
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut buf),
            id: self.handle,
            option: abi::query::PATH,
        };
        self.run("query_path", cmd::QUERY, &req, LEN)?;
        Ok(crate::query::decode_path_resp(buf.as_bytes()))
    }

    /// The route as the pre-AF_IB `QUERY_ROUTE` reports it (up to two `ib_user_path_rec`).
    pub fn query_route(&self) -> io::Result<RouteQuery> {
        let mut resp = abi::rdma_ucm_query_route_resp::default();
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut resp),
            id: self.handle,
            option: 0,
        };
        self.run("query_route", cmd::QUERY_ROUTE, &req, size_of_val(&resp))?;
        Ok(RouteQuery::from_raw(&resp))
    }

    // --- options -----------------------------------------------------------------------------

    /// `SET_OPTION` with raw bytes (see [`abi::opt`]).
    pub fn set_option_raw(&self, level: u32, name: u32, value: &[u8]) -> io::Result<()> {
        let req = abi::rdma_ucm_set_option {
            optval: value.as_ptr() as u64,
            id: self.handle,
            level,
            optname: name,
            optlen: u32::try_from(value.len())
                .map_err(|_| Error::invalid("set_option", "value too large"))?,
        };
        self.run("set_option", cmd::SET_OPTION, &req, 0)
            .map_err(|e| add_detail(e, format!("level {level} option {name}")))
    }

    /// Type of service of the connection's traffic (RDMA_OPTION_ID_TOS).
    pub fn set_tos(&self, tos: u8) -> io::Result<()> {
        self.set_option_raw(abi::opt::LEVEL_ID, abi::opt::ID_TOS, &[tos])
    }

    /// Allow binding a port still in use (RDMA_OPTION_ID_REUSEADDR); before bind.
    pub fn set_reuseaddr(&self, on: bool) -> io::Result<()> {
        self.set_option_raw(
            abi::opt::LEVEL_ID,
            abi::opt::ID_REUSEADDR,
            &i32::from(on).to_ne_bytes(),
        )
    }

    /// An IPv6 wildcard bind listens on IPv6 only (RDMA_OPTION_ID_AFONLY); before bind.
    pub fn set_afonly(&self, on: bool) -> io::Result<()> {
        self.set_option_raw(
            abi::opt::LEVEL_ID,
            abi::opt::ID_AFONLY,
            &i32::from(on).to_ne_bytes(),
        )
    }

    /// Local ACK timeout exponent for the QP (RDMA_OPTION_ID_ACK_TIMEOUT): 4.096 µs · 2^t.
    pub fn set_ack_timeout(&self, timeout: u8) -> io::Result<()> {
        self.set_option_raw(abi::opt::LEVEL_ID, abi::opt::ID_ACK_TIMEOUT, &[timeout])
    }

    /// Tells the CM about a QP event (`NOTIFY`, an `ib_event_type`): IB_EVENT_COMM_EST = 4 when
    /// a receive completes before ESTABLISHED, IB_EVENT_PATH_MIG = 6.
    pub fn notify(&self, ib_event: u32) -> io::Result<()> {
        let req = abi::rdma_ucm_notify {
            id: self.handle,
            event: ib_event,
        };
        self.run("notify", cmd::NOTIFY, &req, 0)
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
    } else if ev.status() > 0 {
        Error::os(op, Errno::from_raw_os_error(ev.status()))
            .with_detail(format!("{kind} event instead of {}", kinds(ok)))
    } else {
        Error::protocol(
            op,
            format!("{kind} event (status 0) while waiting for {}", kinds(ok)),
        )
    };
    Err(err.into())
}

fn add_detail(e: io::Error, detail: String) -> io::Error {
    let kind = e.kind();
    match e.into_inner() {
        Some(inner) => match inner.downcast::<Error>() {
            Ok(err) => (*err).with_detail(detail).into(),
            Err(other) => io::Error::new(kind, other),
        },
        None => io::Error::new(kind, detail),
    }
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
    fn conn_param_encoding() {
        let p = ConnParam {
            private_data: b"hello".to_vec(),
            qp_num: 0x12345,
            srq: true,
            flow_control: true,
            ..ConnParam::default()
        };
        let c = encode_conn_param("connect", QpType::RC, &p, (3, 4)).unwrap();
        let b = c.as_bytes();
        assert_eq!(b.len(), 272);
        assert_eq!(&b[0..4], &0x12345u32.to_ne_bytes());
        assert_eq!(&b[4..8], &0u32.to_ne_bytes());
        assert_eq!(&b[8..13], b"hello");
        assert!(b[13..264].iter().all(|&x| x == 0));
        // private_data_len, srq, responder_resources, initiator_depth, flow_control,
        // retry_count, rnr_retry_count, valid
        assert_eq!(&b[264..272], &[5, 1, 4, 3, 1, 7, 7, 1]);
    }

    #[test]
    fn private_data_limits_name_both_numbers() {
        let p = ConnParam {
            private_data: vec![0; 57],
            ..ConnParam::default()
        };
        let e = encode_conn_param("connect", QpType::RC, &p, (1, 1)).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("57 bytes") && s.contains("limit of 56"), "{s}");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let ok = ConnParam {
            private_data: vec![0; 56],
            ..ConnParam::default()
        };
        encode_conn_param("connect", QpType::RC, &ok, (1, 1)).unwrap();
        // UD connect (SIDR REQ): 180; accept RC (REP): 196; UD accept (SIDR REP): 136.
        let ud = ConnParam {
            private_data: vec![0; 181],
            ..ConnParam::default()
        };
        let s = encode_conn_param("connect", QpType::UD, &ud, (0, 0))
            .unwrap_err()
            .to_string();
        assert!(s.contains("181 bytes") && s.contains("limit of 180"), "{s}");
        let rep = ConnParam {
            private_data: vec![0; 197],
            ..ConnParam::default()
        };
        let s = encode_conn_param("accept", QpType::RC, &rep, (1, 1))
            .unwrap_err()
            .to_string();
        assert!(s.contains("197 bytes") && s.contains("limit of 196"), "{s}");
        let rep_ok = ConnParam {
            private_data: vec![0; 196],
            ..ConnParam::default()
        };
        encode_conn_param("accept", QpType::RC, &rep_ok, (1, 1)).unwrap();
        let sidr = ConnParam {
            private_data: vec![0; 137],
            ..ConnParam::default()
        };
        let s = encode_conn_param("accept", QpType::UD, &sidr, (0, 0))
            .unwrap_err()
            .to_string();
        assert!(s.contains("137 bytes") && s.contains("limit of 136"), "{s}");
        let s = check_private_data("reject", QpType::RC, &[0; 149])
            .unwrap_err()
            .to_string();
        assert!(s.contains("149 bytes") && s.contains("limit of 148"), "{s}");
        check_private_data("reject", QpType::RC, &[0; 148]).unwrap();
    }

    #[test]
    fn conn_param_range_checks() {
        let p = ConnParam {
            retry_count: 8,
            ..ConnParam::default()
        };
        assert!(encode_conn_param("connect", QpType::RC, &p, (1, 1))
            .unwrap_err()
            .to_string()
            .contains("0..=7"));
        let p = ConnParam {
            qp_num: 0x0100_0000,
            ..ConnParam::default()
        };
        assert!(encode_conn_param("connect", QpType::RC, &p, (1, 1))
            .unwrap_err()
            .to_string()
            .contains("24 bits"));
    }

    #[test]
    fn guid_format() {
        assert_eq!(format_guid(0x0211_22ff_fe33_4455), "0211:22ff:fe33:4455");
    }
}
