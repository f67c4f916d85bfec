//! Ids (`rdma_cm_id`): the owner and its state, the registry by uid, create, destroy, bind,
//! resolve and listen.

use super::*;

/// An `rdma_cm_id` and the rverbs id behind it. C threads share ids (rping's CM thread
/// reads events while its main thread disconnects), so the owner is only reached through
/// `&` (\[object\]): what changes is behind a lock.
#[repr(C)]
pub struct CCmId {
    /// What C sees (\[c-struct\]): written back, under the id's lock, by the calls that change it.
    pub c: UnsafeCell<rdma_cm_id>,
    pub(super) st: Mutex<IdState>,
    /// Events of the id handed out by [`rdma_get_cm_event`] (counted while the id is in
    /// [`IDS`]) and not yet acknowledged: destroy waits for them, as librdmacm's.
    pub(super) users: EventCount,
}

from_c!(CCmId => rdma_cm_id, "rdma_cm_id");

/// What an id's calls change, under its lock.
pub(super) struct IdState {
    pub(super) id: Option<CmId>,
    /// The private channel of a synchronous id (`c.channel` points at it).
    pub(super) own_channel: *mut CEventChannel,
    pub(super) paths: Vec<ibv_sa_path_rec>,
    /// `rdma_create_ep` on the passive side: the QP attributes (and PD) for the ids
    /// `rdma_get_request` returns.
    pub(super) ep_qp: Option<(ibv_qp_init_attr, *mut ibv_pd)>,
    /// Set when the active side's CONNECT_RESPONSE could not be completed: the peer's
    /// REJECTED that follows is not reported (as librdmacm).
    pub(super) connect_error: bool,
    /// Why the device the kernel bound the id to could not be opened (a driver rverbs has
    /// no provider for): what creating a QP on the id then fails with (`ENODEV`).
    pub(super) device_error: Option<String>,
    /// The multicast groups joined with `rdma_join_multicast(_ex)`.
    pub(super) joins: Vec<CJoin>,
    /// `rdma_resolve_addrinfo`'s state and answer.
    pub(super) addrinfo: addrinfo::Resolving,
}

/// One multicast group an id joined.
pub(super) struct CJoin {
    pub(super) addr: SocketAddr,
    /// The caller's `context` (the events' `param.ud.private_data`).
    pub(super) context: *mut c_void,
    pub(super) flags: McJoinFlags,
    /// The group the id's QP was attached to (by the MULTICAST_JOIN event).
    pub(super) attached: Option<(Gid, u16)>,
}

// SAFETY: the raw pointers name objects of this library (a channel, a PD) that any thread
// may use (libibverbs' and librdmacm's objects are thread-safe), reached only under the lock.
unsafe impl Send for IdState {}

impl IdState {
    pub(super) fn id(&self) -> io::Result<&CmId> {
        self.id
            .as_ref()
            .ok_or_else(|| einval("rdma_cm id without a kernel id"))
    }
}

/// An id's state, locked, with a copy of its C structure (`c`) taken when locked: the code
/// reads and changes the copy, and dropping the guard writes it back (every field but
/// `context`, which is the caller's) while the lock is still held. So our threads never race
/// on the C structure, and no Rust reference to it exists (\[c-struct\]).
pub(super) struct IdGuard<'a> {
    pub(super) st: MutexGuard<'a, IdState>,
    pub(super) c: rdma_cm_id,
    /// The C structure (what C's pointer to the id is).
    pub(super) me: *mut rdma_cm_id,
}

impl Deref for IdGuard<'_> {
    type Target = IdState;
    fn deref(&self) -> &IdState {
        &self.st
    }
}

impl DerefMut for IdGuard<'_> {
    fn deref_mut(&mut self) -> &mut IdState {
        &mut self.st
    }
}

impl Drop for IdGuard<'_> {
    fn drop(&mut self) {
        let c = &self.c;
        // SAFETY: [c-struct] raw writes into the live id's C structure, under its lock (the
        // guard holds it), fields one by one so that `context` stays what C set.
        unsafe {
            let m = self.me;
            (*m).verbs = c.verbs;
            (*m).channel = c.channel;
            (*m).qp = c.qp;
            ptr::write(&raw mut (*m).route, ptr::read(&c.route));
            (*m).ps = c.ps;
            (*m).port_num = c.port_num;
            (*m).event = c.event;
            (*m).send_cq_channel = c.send_cq_channel;
            (*m).send_cq = c.send_cq;
            (*m).recv_cq_channel = c.recv_cq_channel;
            (*m).recv_cq = c.recv_cq;
            (*m).srq = c.srq;
            (*m).pd = c.pd;
            (*m).qp_type = c.qp_type;
        }
    }
}

impl CCmId {
    /// Locks the id (see [`IdGuard`]). Never held across a call that locks the same id
    /// again (the exported functions lock their id themselves).
    pub(super) fn lock(&self) -> IdGuard<'_> {
        let st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        let me = self.c.get();
        // SAFETY: [c-struct] a raw copy of the live C structure, under the lock (our writes
        // happen under it; C's are C's, as with librdmacm).
        let c = unsafe { ptr::read(me) };
        IdGuard { st, c, me }
    }

    /// The `context` C gave the id (C may change it: read from the C structure).
    pub(super) fn context(&self) -> *mut c_void {
        // SAFETY: [c-struct] a raw read.
        unsafe { (*self.c.get()).context }
    }
}

/// CCmId addresses by the uid the kernel echoes in their events (\[registry\]).
static IDS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

/// The id with uid `uid`, with one event counted against it (acknowledged by the caller's
/// `users.ack(1)`, or by [`rdma_ack_cm_event`] once the event is handed to C); `None` when
/// there is none.
pub(super) fn use_id(uid: u64) -> Option<&'static CCmId> {
    let m = IDS.lock().unwrap_or_else(|p| p.into_inner());
    let p = m
        .as_ref()
        .and_then(|m| m.get(&uid))
        .map(|a| *a as *const CCmId)?;
    // SAFETY: [registry] in IDS, under its lock: alive; counted before the lock is released,
    // so destroy (which takes it out of IDS first, then waits for its users) waits for us.
    let c = unsafe { &*p };
    c.users.delivered();
    Some(c)
}

pub(super) fn wrap_id(
    id: CmId,
    channel: *mut rdma_event_channel,
    context: *mut c_void,
) -> *mut CCmId {
    let (own, channel) = if id.is_sync() {
        let own = new_channel(id.event_channel());
        (own, own.cast::<rdma_event_channel>())
    } else {
        (null_mut(), channel)
    };
    // SAFETY: rdma_cm_id is integers, raw pointers and sockaddr_storage: all-zero is valid.
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.channel = channel;
    c.context = context;
    c.ps = u32::from(id.port_space().0);
    c.qp_type = u32::from(id.qp_type().0);
    let uid = id.uid();
    let p = Box::into_raw(Box::new(CCmId {
        c: UnsafeCell::new(c),
        st: Mutex::new(IdState {
            id: Some(id),
            own_channel: own,
            paths: Vec::new(),
            ep_qp: None,
            connect_error: false,
            device_error: None,
            joins: Vec::new(),
            addrinfo: addrinfo::Resolving::default(),
        }),
        users: EventCount::default(),
    }));
    IDS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(uid, p as usize);
    // SAFETY: [owner] a fresh allocation, alive.
    update_addr(&mut unsafe { &*p }.lock());
    p
}

symver!(rdma_create_id => "RDMACM_1.0");
/// `rdma_create_id`: 0, or -1 and `errno`. A NULL `channel` makes a synchronous id (with a
/// private channel of its own, as librdmacm).
///
/// # Safety
/// `channel` is NULL or ours; `id` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() || !(0..=0xffff).contains(&ps) {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [object] channel (NULL: a synchronous id).
    let ch = unsafe { CEventChannel::from_c(channel) }.map(|c| &c.ch);
    match CmId::create(ch, PortSpace(ps as u16)) {
        Ok(i) => {
            // SAFETY: [out] id (non-NULL, checked above).
            unsafe { *id = wrap_id(i, channel, context).cast() };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

symver!(rdma_destroy_id => "RDMACM_1.0");
/// `rdma_destroy_id`: 0. Waits until every event of the id that [`rdma_get_cm_event`]
/// returned was acknowledged ([`rdma_ack_cm_event`]), as librdmacm does: an event's `id`
/// (and a CONNECT_REQUEST's `listen_id`) stays valid until its ack.
///
/// # Safety
/// `id` is ours and not used afterwards; its QP was destroyed (`rdma_destroy_qp`).
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: [destroy] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg);
    let (uid, ev) = {
        let mut g = c.lock();
        (
            g.id.as_ref().map(CmId::uid),
            std::mem::replace(&mut g.c.event, null_mut()),
        )
    };
    if let Some(uid) = uid {
        if let Some(m) = IDS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            m.remove(&uid);
        }
    }
    if !ev.is_null() {
        // The id's own event (rdma_get_request's), freed first as librdmacm acknowledges it.
        // SAFETY: [owner] our event, owned by the id.
        unsafe { free_event(ev.cast()) };
    }
    // Out of the registry: no event is counted against it any more; wait for the acks of
    // those handed out.
    c.users.wait_acked();
    // SAFETY: [destroy] id: boxed by wrap_id ([owner]); `c` is not used any more.
    let b = unsafe { Box::from_raw(id.cast::<CCmId>()) };
    let st = b.st.into_inner().unwrap_or_else(|p| p.into_inner());
    let own = st.own_channel;
    let r = match st.id {
        Some(i) => i.destroy().map(|_| ()),
        None => Ok(()),
    };
    if !own.is_null() {
        // SAFETY: [owner] the private channel, boxed by wrap_id.
        drop(unsafe { Box::from_raw(own) });
    }
    ret(r)
}

symver!(rdma_bind_addr => "RDMACM_1.0");
/// `rdma_bind_addr`.
///
/// # Safety
/// `id` is ours; `addr` a readable sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
    // SAFETY: [object] id; [in] addr.
    unsafe {
        on_id(id, |i| {
            let a = from_sockaddr(addr)?.ok_or_else(|| einval("rdma_bind_addr: NULL address"))?;
            i.bind(a)
        })
    }
}

/// Runs `f` on the id's rverbs id and, when it succeeds, refreshes what the id exposes.
///
/// # Safety
/// `id` is ours.
unsafe fn on_id(id: *mut rdma_cm_id, f: impl FnOnce(&CmId) -> io::Result<()>) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    let r = c.id().and_then(f);
    if r.is_ok() {
        update_addr(&mut c);
    }
    ret(r)
}

fn ms(timeout_ms: c_int) -> Duration {
    Duration::from_millis(timeout_ms.max(0) as u64)
}

symver!(rdma_resolve_addr => "RDMACM_1.0");
/// `rdma_resolve_addr`: asynchronous ids get ADDR_RESOLVED / ADDR_ERROR; synchronous ones
/// wait for it.
///
/// # Safety
/// `id` is ours; `src` NULL or a sockaddr, `dst` a sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: [object] id; [in] src (NULL allowed) and dst.
    unsafe {
        on_id(id, |i| {
            let s = from_sockaddr(src)?;
            let d =
                from_sockaddr(dst)?.ok_or_else(|| einval("rdma_resolve_addr: NULL destination"))?;
            i.resolve_addr(s, d, ms(timeout_ms))
        })
    }
}

symver!(rdma_resolve_route => "RDMACM_1.0");
/// `rdma_resolve_route`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    // SAFETY: [object] id.
    unsafe { on_id(id, |i| i.resolve_route(ms(timeout_ms))) }
}

symver!(rdma_listen => "RDMACM_1.0");
/// `rdma_listen`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    // SAFETY: [object] id.
    unsafe { on_id(id, |i| i.listen(backlog.max(0) as u32)) }
}
