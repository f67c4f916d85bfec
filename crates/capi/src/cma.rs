//! The exported `rdma_*` functions of librdmacm on `rverbs-cm`, sharing this library's verbs
//! objects: the `ibv_context`, `ibv_pd`, `ibv_cq`, `ibv_comp_channel` and `ibv_qp` an
//! `rdma_cm_id` exposes are made by the `ibv_*` functions of [`crate::verbs`], so the inline
//! functions of `rdma_verbs.h` (`rdma_reg_msgs`, `rdma_post_send`, `rdma_get_send_comp`, …)
//! reach rverbs through the same ops tables as any verbs caller.
//!
//! Each `rdma_cm_id` is the first field of a [`CCmId`] that owns the [`CmId`] behind it;
//! each `rdma_cm_event` the first field of a [`CEvent`] that owns the decoded [`CmEvent`]
//! (its private data stays valid until `rdma_ack_cm_event`). Devices are opened once per
//! node GUID, with one default PD each, and live until the process ends (as librdmacm's
//! device list).
//!
//! What librdmacm does on top of the kernel's events is done here too: an id with a QP has
//! it moved to INIT on creation (UD: to RTS), to RTR/RTS before `rdma_accept` and on
//! CONNECT_RESPONSE (which is then reported as ESTABLISHED after the RTU), and to ERR on
//! `rdma_disconnect`. Error conventions are librdmacm's: -1 with `errno`, constructors NULL
//! with `errno`.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::ptr::{self, null_mut};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rverbs_cm::{
    AddrHints, AddrInfo, CmEvent, CmEventKind, CmId, ConnParam, EventChannel, IpFamily,
    McJoinFlags, PortSpace, QpState, QpType, UdEventParam,
};
use rverbs_uverbs::gid::Gid;

use crate::abi::*;
use crate::events::EventCount;
use crate::verbs::{self, fail, null_arg, set_errno};

// ---------------------------------------------------------------------------------------
// errors

fn ret(r: io::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(fail(&e));
            -1
        }
    }
}

fn einval(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

fn from_errno(op: &str, r: c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::from_raw_os_error(r);
        Err(io::Error::new(e.kind(), format!("{op}: {e}")))
    }
}

// ---------------------------------------------------------------------------------------
// devices: one context and one default PD per node GUID

struct Dev {
    guid: u64,
    ctx: usize,
    pd: usize,
}

static DEVS: Mutex<Vec<Dev>> = Mutex::new(Vec::new());

/// The context (opened once) of the device with node GUID `guid` (host order).
fn device_for(guid: u64) -> io::Result<*mut ibv_context> {
    let mut devs = DEVS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = devs.iter().find(|d| d.guid == guid) {
        return Ok(d.ctx as *mut ibv_context);
    }
    // SAFETY: NULL count is allowed; the list is freed below, its devices live forever.
    let list = unsafe { verbs::ibv_get_device_list(null_mut()) };
    if list.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut found = null_mut();
    let mut i = 0;
    loop {
        // SAFETY: NULL-terminated array from ibv_get_device_list.
        let d = unsafe { *list.add(i) };
        if d.is_null() {
            break;
        }
        // SAFETY: [object] d, from ibv_get_device_list.
        if unsafe { verbs::ibv_get_device_guid(d) } == guid.to_be() {
            found = d;
            break;
        }
        i += 1;
    }
    let ctx = if found.is_null() {
        null_mut()
    } else {
        // SAFETY: [object] found, from ibv_get_device_list.
        unsafe { verbs::ibv_open_device(found) }
    };
    // SAFETY: from ibv_get_device_list.
    unsafe { verbs::ibv_free_device_list(list) };
    if found.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("rdma_cm: no verbs device has node GUID {guid:#018x}"),
        ));
    }
    if ctx.is_null() {
        return Err(io::Error::last_os_error());
    }
    devs.push(Dev {
        guid,
        ctx: ctx as usize,
        pd: 0,
    });
    Ok(ctx)
}

/// The default PD of `ctx` (a context from [`device_for`]), allocated on first use.
fn default_pd(ctx: *mut ibv_context) -> io::Result<*mut ibv_pd> {
    let mut devs = DEVS.lock().unwrap_or_else(|p| p.into_inner());
    let d = devs
        .iter_mut()
        .find(|d| d.ctx == ctx as usize)
        .ok_or_else(|| einval("rdma_cm: the id's context is not one the rdma_cm opened"))?;
    if d.pd == 0 {
        // SAFETY: [object] ctx, opened here and never closed.
        let pd = unsafe { verbs::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(io::Error::last_os_error());
        }
        d.pd = pd as usize;
    }
    Ok(d.pd as *mut ibv_pd)
}

// ---------------------------------------------------------------------------------------
// event channels

/// An `rdma_event_channel` and the rverbs channel behind it.
#[repr(C)]
pub struct CEventChannel {
    /// What C sees.
    pub c: rdma_event_channel,
    /// The rverbs channel.
    pub ch: EventChannel,
}

fn new_channel(ch: EventChannel) -> *mut CEventChannel {
    Box::into_raw(Box::new(CEventChannel {
        c: rdma_event_channel { fd: ch.as_raw_fd() },
        ch,
    }))
}

/// # Safety
/// `c` is NULL or an \[object\] event channel pointer.
unsafe fn cchan<'a>(c: *mut rdma_event_channel) -> Option<&'a CEventChannel> {
    // SAFETY: [object] c, the first field of its CEventChannel ([owner]).
    unsafe { verbs::owner(c, "rdma_event_channel") }
}

/// `rdma_create_event_channel`: NULL and `errno` when `/dev/infiniband/rdma_cm` cannot be
/// opened.
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    match EventChannel::new() {
        Ok(ch) => new_channel(ch).cast(),
        Err(e) => {
            set_errno(fail(&e));
            null_mut()
        }
    }
}

/// `rdma_destroy_event_channel`.
///
/// # Safety
/// `channel` came from [`rdma_create_event_channel`] and no id uses it any more.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    if !channel.is_null() {
        // SAFETY: [destroy] channel: boxed by rdma_create_event_channel ([owner]).
        drop(unsafe { Box::from_raw(channel as *mut CEventChannel) });
    }
}

// ---------------------------------------------------------------------------------------
// ids

/// An `rdma_cm_id` and the rverbs id behind it. C threads share ids (rping's CM thread
/// reads events while its main thread disconnects), so the owner is only reached through
/// `&` (\[object\]): what changes is behind a lock.
#[repr(C)]
pub struct CCmId {
    /// What C sees (\[c-struct\]): written back, under the id's lock, by the calls that change it.
    pub c: UnsafeCell<rdma_cm_id>,
    st: Mutex<IdState>,
    /// Calls of [`rdma_get_cm_event`] working on the id (found in [`IDS`]): destroy waits
    /// for them.
    users: EventCount,
}

/// What an id's calls change, under its lock.
struct IdState {
    id: Option<CmId>,
    /// The private channel of a synchronous id (`c.channel` points at it).
    own_channel: *mut CEventChannel,
    paths: Vec<ibv_sa_path_rec>,
    /// `rdma_create_ep` on the passive side: the QP attributes (and PD) for the ids
    /// `rdma_get_request` returns.
    ep_qp: Option<(ibv_qp_init_attr, *mut ibv_pd)>,
    /// Set when the active side's CONNECT_RESPONSE could not be completed: the peer's
    /// REJECTED that follows is not reported (as librdmacm).
    connect_error: bool,
    /// Why the device the kernel bound the id to could not be opened (a driver rverbs has
    /// no provider for): what creating a QP on the id then fails with (`ENODEV`).
    device_error: Option<String>,
    /// The multicast groups joined with `rdma_join_multicast(_ex)`.
    joins: Vec<CJoin>,
}

/// One multicast group an id joined.
struct CJoin {
    addr: SocketAddr,
    /// The caller's `context` (the events' `param.ud.private_data`).
    context: *mut c_void,
    flags: McJoinFlags,
    /// The group the id's QP was attached to (by the MULTICAST_JOIN event).
    attached: Option<(Gid, u16)>,
}

// SAFETY: the raw pointers name objects of this library (a channel, a PD) that any thread
// may use (libibverbs' and librdmacm's objects are thread-safe), reached only under the lock.
unsafe impl Send for IdState {}

impl IdState {
    fn id(&self) -> io::Result<&CmId> {
        self.id
            .as_ref()
            .ok_or_else(|| einval("rdma_cm id without a kernel id"))
    }
}

/// An id's state, locked, with a copy of its C structure (`c`) taken when locked: the code
/// reads and changes the copy, and dropping the guard writes it back (every field but
/// `context`, which is the caller's) while the lock is still held. So our threads never race
/// on the C structure, and no Rust reference to it exists (\[c-struct\]).
struct IdGuard<'a> {
    st: MutexGuard<'a, IdState>,
    c: rdma_cm_id,
    /// The C structure (what C's pointer to the id is).
    me: *mut rdma_cm_id,
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
    fn lock(&self) -> IdGuard<'_> {
        let st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        let me = self.c.get();
        // SAFETY: [c-struct] a raw copy of the live C structure, under the lock (our writes
        // happen under it; C's are C's, as with librdmacm).
        let c = unsafe { ptr::read(me) };
        IdGuard { st, c, me }
    }

    /// The `context` C gave the id (C may change it: read from the C structure).
    fn context(&self) -> *mut c_void {
        // SAFETY: [c-struct] a raw read.
        unsafe { (*self.c.get()).context }
    }
}

/// CCmId addresses by the uid the kernel echoes in their events (\[registry\]).
static IDS: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

/// The id with uid `uid`, counted as used by the caller (who calls `users.ack(1)` when
/// done with it); `None` when there is none.
fn use_id(uid: u64) -> Option<&'static CCmId> {
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

/// # Safety
/// `id` is NULL or an \[object\] id pointer.
unsafe fn cid<'a>(id: *mut rdma_cm_id) -> Option<&'a CCmId> {
    // SAFETY: [object] id, the first field of its CCmId ([owner]).
    unsafe { verbs::owner(id, "rdma_cm_id") }
}

fn wrap_id(id: CmId, channel: *mut rdma_event_channel, context: *mut c_void) -> *mut CCmId {
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

fn to_storage(a: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { ptr::write(&raw mut s as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(v) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as u16,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { ptr::write(&raw mut s as *mut libc::sockaddr_in6, sin6) };
        }
    }
    s
}

fn sockaddr_len(a: &SocketAddr) -> u32 {
    match a {
        SocketAddr::V4(_) => size_of::<libc::sockaddr_in>() as u32,
        SocketAddr::V6(_) => size_of::<libc::sockaddr_in6>() as u32,
    }
}

use std::mem::size_of;

/// # Safety
/// `sa` is NULL or points at a sockaddr whose family says how much is readable.
unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> io::Result<Option<SocketAddr>> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: [in] sa: at least the family is readable, and as much as it names.
    let family = c_int::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { (sa as *const libc::sockaddr_in).read_unaligned() };
            Ok(Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(s.sin_port),
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { (sa as *const libc::sockaddr_in6).read_unaligned() };
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            ))))
        }
        f => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("rdma_cm: address family {f} (only AF_INET and AF_INET6)"),
        )),
    }
}

/// Refreshes what the id exposes from the kernel (`QUERY` ADDR and ROUTE): addresses, the
/// device (`verbs`, opened on first use), the port and the path records.
fn update_addr(g: &mut IdGuard<'_>) {
    let IdGuard { st, c, .. } = g;
    let st = &mut **st;
    let Some(id) = st.id.as_ref() else { return };
    let Ok(q) = id.query_addr() else { return };
    if let Some(a) = q.src.ip() {
        c.route.addr.src_storage = to_storage(&a);
    }
    if let Some(a) = q.dst.ip() {
        c.route.addr.dst_storage = to_storage(&a);
    }
    c.route.addr.ibaddr.pkey = q.pkey.to_be();
    if q.has_device() {
        c.port_num = q.port_num;
        if c.verbs.is_null() {
            match device_for(q.node_guid) {
                Ok(ctx) => {
                    c.verbs = ctx;
                    let mut a: ibv_device_attr =
                        // SAFETY: plain data; all-zero is valid.
                        unsafe { std::mem::zeroed() };
                    // SAFETY: [object] ctx (the device list's, never closed); [out] a.
                    if unsafe { verbs::ibv_query_device(ctx, &mut a) } == 0 {
                        id.set_rd_atomic_max(
                            a.max_qp_init_rd_atom.clamp(0, 255) as u8,
                            a.max_qp_rd_atom.clamp(0, 255) as u8,
                        );
                    }
                }
                Err(e) => {
                    fail(&e);
                    st.device_error = Some(e.to_string());
                }
            }
        }
    }
    if let Ok(r) = id.query_route() {
        if let Some(p) = r.paths.first() {
            c.route.addr.ibaddr.sgid = ibv_gid { raw: p.sgid.0 };
            c.route.addr.ibaddr.dgid = ibv_gid { raw: p.dgid.0 };
        }
        st.paths = r
            .paths
            .iter()
            .take(r.num_paths as usize)
            .map(|p| ibv_sa_path_rec {
                dgid: ibv_gid { raw: p.dgid.0 },
                sgid: ibv_gid { raw: p.sgid.0 },
                dlid: p.dlid.to_be(),
                slid: p.slid.to_be(),
                raw_traffic: c_int::from(p.raw_traffic),
                flow_label: p.flow_label.to_be(),
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                reversible: c_int::from(p.reversible),
                numb_path: p.numb_path,
                pkey: p.pkey.to_be(),
                sl: p.sl,
                mtu_selector: p.mtu_selector,
                mtu: p.mtu,
                rate_selector: p.rate_selector,
                rate: p.rate,
                packet_life_time_selector: p.packet_life_time_selector,
                packet_life_time: p.packet_life_time,
                preference: p.preference,
            })
            .collect();
        c.route.num_paths = st.paths.len() as c_int;
        c.route.path_rec = if st.paths.is_empty() {
            null_mut()
        } else {
            st.paths.as_mut_ptr()
        };
    }
}

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
    let ch = unsafe { cchan(channel) }.map(|c| &c.ch);
    match CmId::create(ch, PortSpace(ps as u16)) {
        Ok(i) => {
            // SAFETY: [out] id (non-NULL, checked above).
            unsafe { *id = wrap_id(i, channel, context).cast() };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

/// `rdma_destroy_id`: 0 (destroying never waits for unacknowledged events here: an event
/// does not borrow its id).
///
/// # Safety
/// `id` is ours and not used afterwards; its QP was destroyed (`rdma_destroy_qp`).
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: [destroy] id.
    let c = obj!(unsafe { cid(id) }, neg);
    let uid = c.lock().id.as_ref().map(CmId::uid);
    if let Some(uid) = uid {
        if let Some(m) = IDS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            m.remove(&uid);
        }
    }
    // Out of the registry: wait for the rdma_get_cm_event calls still working on it.
    c.users.wait_acked();
    // SAFETY: [destroy] id: boxed by wrap_id ([owner]); `c` is not used any more.
    let b = unsafe { Box::from_raw(id.cast::<CCmId>()) };
    let ev = b.c.into_inner().event;
    let st = b.st.into_inner().unwrap_or_else(|p| p.into_inner());
    let own = st.own_channel;
    let r = match st.id {
        Some(i) => i.destroy().map(|_| ()),
        None => Ok(()),
    };
    if !ev.is_null() {
        // SAFETY: [owner] our event, owned by the id.
        drop(unsafe { Box::from_raw(ev as *mut CEvent) });
    }
    if !own.is_null() {
        // SAFETY: [owner] the private channel, boxed by wrap_id.
        drop(unsafe { Box::from_raw(own) });
    }
    ret(r)
}

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
    let mut c = obj!(unsafe { cid(id) }, neg).lock();
    let r = c.id().and_then(f);
    if r.is_ok() {
        update_addr(&mut c);
    }
    ret(r)
}

fn ms(timeout_ms: c_int) -> Duration {
    Duration::from_millis(timeout_ms.max(0) as u64)
}

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

/// `rdma_resolve_route`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, timeout_ms: c_int) -> c_int {
    // SAFETY: [object] id.
    unsafe { on_id(id, |i| i.resolve_route(ms(timeout_ms))) }
}

/// `rdma_listen`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    // SAFETY: [object] id.
    unsafe { on_id(id, |i| i.listen(backlog.max(0) as u32)) }
}

// ---------------------------------------------------------------------------------------
// QPs

const IBV_QP_STATE: c_int = 1;
const IBV_QP_SQ_PSN: c_int = 1 << 16;
const IBV_QP_INIT_ATTR_PD: u32 = 1;

/// Moves the id's QP to `state` with the attributes the kernel gives for it.
fn modify_qp_to(c: &IdGuard<'_>, state: QpState) -> io::Result<()> {
    let a = c.id()?.init_qp_attr(state)?;
    // SAFETY: [object] the id's QP, not destroyed during the call.
    let r = unsafe { verbs::modify_qp_with(c.c.qp, &a) };
    from_errno("rdma_cm: modify QP", r)
}

fn modify_qp_plain(c: &IdGuard<'_>, state: QpState, mask: c_int) -> io::Result<()> {
    let mut attr = ibv_qp_attr {
        qp_state: u32::from(state.0),
        ..Default::default()
    };
    // SAFETY: [object] the id's QP, not destroyed during the call.
    let r = unsafe { verbs::ibv_modify_qp(c.c.qp, &mut attr, mask) };
    from_errno("rdma_cm: modify QP", r)
}

fn init_qp(c: &IdGuard<'_>) -> io::Result<()> {
    modify_qp_to(c, QpState::INIT)?;
    if c.c.qp_type == u32::from(QpType::UD.0) {
        modify_qp_plain(c, QpState::RTR, IBV_QP_STATE)?;
        modify_qp_plain(c, QpState::RTS, IBV_QP_STATE | IBV_QP_SQ_PSN)?;
    }
    Ok(())
}

/// INIT again (the attributes now reflect the peer's parameters: remote read access once
/// the peer may read), then RTR and RTS.
/// Whether the id's device is iWARP (siw, irdma, cxgb4): the iw_cm connects its QP (to RTS)
/// and reports ESTABLISHED, with no CONNECT_RESPONSE and no RTU.
fn iwarp(c: &IdGuard<'_>) -> bool {
    let verbs = c.c.verbs;
    // SAFETY: [object] a non-NULL `verbs` of an id is the context our rdma_cm opened for it,
    // alive while the id is; its device is set at open and never changed.
    !verbs.is_null() && unsafe { (*(*verbs).device).transport_type } == 1
}

/// After ESTABLISHED on an iWARP id with a QP: the kernel's QP is in RTS already (the iw_cm
/// moved it); this modify (no change for the kernel) records the state so sends are accepted.
fn iwarp_established(c: &IdGuard<'_>) -> io::Result<()> {
    if c.c.qp.is_null() || !iwarp(c) {
        return Ok(());
    }
    modify_qp_plain(c, QpState::RTS, IBV_QP_STATE)
}

fn rtr_rts(c: &IdGuard<'_>) -> io::Result<()> {
    modify_qp_to(c, QpState::INIT)?;
    modify_qp_to(c, QpState::RTR)?;
    modify_qp_to(c, QpState::RTS)
}

fn destroy_cqs(c: &mut IdGuard<'_>) {
    // SAFETY: [destroy] CQs and channels the rdma_cm created for this id (the only ones stored here).
    unsafe {
        if !c.c.recv_cq.is_null() {
            verbs::ibv_destroy_cq(c.c.recv_cq);
        }
        if !c.c.send_cq.is_null() && c.c.send_cq != c.c.recv_cq {
            verbs::ibv_destroy_cq(c.c.send_cq);
        }
        if !c.c.recv_cq_channel.is_null() {
            verbs::ibv_destroy_comp_channel(c.c.recv_cq_channel);
        }
        if !c.c.send_cq_channel.is_null() && c.c.send_cq_channel != c.c.recv_cq_channel {
            verbs::ibv_destroy_comp_channel(c.c.send_cq_channel);
        }
    }
    c.c.recv_cq = null_mut();
    c.c.send_cq = null_mut();
    c.c.recv_cq_channel = null_mut();
    c.c.send_cq_channel = null_mut();
}

/// A completion channel and CQ for one side of the id (`cq_context` = the id, which
/// `rdma_get_send_comp`/`rdma_get_recv_comp` assert).
fn create_cq(c: &mut IdGuard<'_>, cqe: u32) -> io::Result<(*mut ibv_comp_channel, *mut ibv_cq)> {
    let ctx = c.c.verbs;
    // SAFETY: [object] the id's context (never closed).
    let ch = unsafe { verbs::ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(io::Error::last_os_error());
    }
    let me = c.me.cast::<c_void>();
    // SAFETY: [object] ctx and ch.
    let cq = unsafe { verbs::ibv_create_cq(ctx, cqe.max(1) as c_int, me, ch, 0) };
    if cq.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: [destroy] just created, unused.
        unsafe { verbs::ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((ch, cq))
}

fn create_qp(c: &mut IdGuard<'_>, attr: &mut ibv_qp_init_attr_ex) -> io::Result<()> {
    if c.c.verbs.is_null() {
        if let Some(why) = &c.st.device_error {
            return Err(
                rverbs_uverbs::Error::os("rdma_create_qp", rustix::io::Errno::NODEV)
                    .with_detail(format!("the id's device cannot be opened: {why}"))
                    .into(),
            );
        }
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "rdma_create_qp: the id has no device yet (bind, resolve the address or take a \
             connection request first)",
        ));
    }
    if !c.c.qp.is_null() {
        return Err(einval("rdma_create_qp: the id already has a QP"));
    }
    if attr.qp_type == 0 {
        // Callers of rdma_create_ep often leave it zero: the id's type.
        attr.qp_type = c.c.qp_type;
    }
    let pd = if attr.comp_mask & IBV_QP_INIT_ATTR_PD != 0 && !attr.pd.is_null() {
        attr.pd
    } else {
        default_pd(c.c.verbs)?
    };
    // SAFETY: [object] pd.
    if unsafe { (*pd).context } != c.c.verbs {
        return Err(einval(
            "rdma_create_qp: the PD belongs to another device than the id",
        ));
    }
    if attr.recv_cq.is_null() {
        let (ch, cq) = create_cq(c, attr.cap.max_recv_wr)?;
        c.c.recv_cq_channel = ch;
        c.c.recv_cq = cq;
        attr.recv_cq = cq;
    }
    if attr.send_cq.is_null() {
        match create_cq(c, attr.cap.max_send_wr) {
            Ok((ch, cq)) => {
                c.c.send_cq_channel = ch;
                c.c.send_cq = cq;
                attr.send_cq = cq;
            }
            Err(e) => {
                destroy_cqs(c);
                return Err(e);
            }
        }
    }
    let mut plain = attr.base();
    if plain.srq.is_null() {
        plain.srq = c.c.srq;
    }
    // SAFETY: [object] pd; [in] plain names [object] CQs.
    let qp = unsafe { verbs::ibv_create_qp(pd, &mut plain) };
    if qp.is_null() {
        let e = io::Error::last_os_error();
        destroy_cqs(c);
        return Err(e);
    }
    attr.cap = plain.cap;
    c.c.qp = qp;
    c.c.pd = pd;
    if let Err(e) = init_qp(c) {
        // SAFETY: [destroy] just created.
        unsafe { verbs::ibv_destroy_qp(qp) };
        c.c.qp = null_mut();
        destroy_cqs(c);
        return Err(e);
    }
    Ok(())
}

/// `rdma_create_qp_ex`: the QP on the id's device, moved to INIT (UD: RTS). Missing CQs are
/// created (with completion channels) and owned by the id; no PD means the device's
/// default one.
///
/// # Safety
/// `id` is ours; `attr` readable and writable, naming objects of ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { cid(id) }, neg).lock();
    // SAFETY: [in] [out] attr.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        set_errno(null_arg("ibv_qp_init_attr_ex"));
        return -1;
    };
    if a.comp_mask & !IBV_QP_INIT_ATTR_PD != 0 {
        return ret(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "rdma_create_qp_ex: comp_mask {:#x} (only IBV_QP_INIT_ATTR_PD is supported)",
                a.comp_mask
            ),
        )));
    }
    ret(create_qp(&mut c, a))
}

/// `rdma_create_qp`: [`rdma_create_qp_ex`] with `pd`; the CQs used and the granted
/// capabilities are written back into `qp_init_attr`.
///
/// # Safety
/// As [`rdma_create_qp_ex`].
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { cid(id) }, neg).lock();
    // SAFETY: [in] [out] qp_init_attr.
    let Some(a) = (unsafe { qp_init_attr.as_mut() }) else {
        set_errno(null_arg("ibv_qp_init_attr"));
        return -1;
    };
    let mut ex = ibv_qp_init_attr_ex::with_pd(a, pd);
    let r = create_qp(&mut c, &mut ex);
    if r.is_ok() {
        a.send_cq = ex.send_cq;
        a.recv_cq = ex.recv_cq;
        a.cap = ex.cap;
    }
    ret(r)
}

/// `rdma_destroy_qp`: the QP and the CQs the rdma_cm created for it.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { cid(id) }, unit).lock();
    if !c.c.qp.is_null() {
        // SAFETY: the id's QP, an [object] of ours.
        unsafe { verbs::ibv_destroy_qp(c.c.qp) };
        c.c.qp = null_mut();
    }
    destroy_cqs(&mut c);
}

/// `rdma_init_qp_attr`: the attributes (and mask) for `qp_attr.qp_state`.
///
/// # Safety
/// `id` is ours; `qp_attr` readable and writable; `qp_attr_mask` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    // SAFETY: [in] qp_attr.
    let state = unsafe { (*qp_attr).qp_state };
    let r = c.id().and_then(|i| i.init_qp_attr(QpState(state as u8)));
    match r {
        Ok(a) => {
            // SAFETY: [out] qp_attr and qp_attr_mask.
            unsafe {
                *qp_attr = to_ibv_qp_attr(&a);
                *qp_attr_mask = a.mask().bits() as c_int;
            }
            0
        }
        Err(e) => ret(Err(e)),
    }
}

/// The C view of the attributes `INIT_QP_ATTR` returned (fields outside the mask zero).
fn to_ibv_qp_attr(a: &rverbs_uverbs::qp::QpAttr) -> ibv_qp_attr {
    let mut o = ibv_qp_attr::default();
    let st = |s: Option<QpState>| s.map_or(0, |s| u32::from(s.0));
    o.qp_state = st(a.qp_state);
    o.cur_qp_state = st(a.cur_qp_state);
    o.en_sqd_async_notify = a.en_sqd_async_notify.map_or(0, u8::from);
    o.qp_access_flags = a.access_flags.map_or(0, |f| f.bits());
    o.pkey_index = a.pkey_index.unwrap_or(0);
    o.port_num = a.port_num.unwrap_or(0);
    o.qkey = a.qkey.unwrap_or(0);
    if let Some(ah) = &a.ah_attr {
        o.ah_attr = verbs::ah_attr_to(ah);
    }
    o.path_mtu = a.path_mtu.map_or(0, |m| u32::from(m.0));
    o.timeout = a.timeout.unwrap_or(0);
    o.retry_cnt = a.retry_cnt.unwrap_or(0);
    o.rnr_retry = a.rnr_retry.unwrap_or(0);
    o.rq_psn = a.rq_psn.unwrap_or(0);
    o.max_rd_atomic = a.max_rd_atomic.unwrap_or(0);
    o.min_rnr_timer = a.min_rnr_timer.unwrap_or(0);
    o.sq_psn = a.sq_psn.unwrap_or(0);
    o.max_dest_rd_atomic = a.max_dest_rd_atomic.unwrap_or(0);
    o.dest_qp_num = a.dest_qp_num.unwrap_or(0);
    o
}

// ---------------------------------------------------------------------------------------
// connections

fn depth(v: u8) -> Option<u8> {
    (v != 0xff).then_some(v)
}

/// # Safety
/// `p` is NULL or a readable `rdma_conn_param` whose private data is readable.
unsafe fn conn_param(c: &IdGuard<'_>, p: *const rdma_conn_param) -> ConnParam {
    let mut cp = ConnParam::default();
    if !p.is_null() {
        // SAFETY: [in] p (non-NULL).
        let p = unsafe { &*p };
        if !p.private_data.is_null() && p.private_data_len > 0 {
            // SAFETY: [buf] private_data has private_data_len readable bytes.
            cp.private_data = unsafe {
                std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
            }
            .to_vec();
        }
        cp.responder_resources = depth(p.responder_resources);
        cp.initiator_depth = depth(p.initiator_depth);
        cp.flow_control = p.flow_control != 0;
        cp.retry_count = p.retry_count.min(7);
        cp.rnr_retry_count = p.rnr_retry_count.min(7);
        cp.srq = p.srq != 0;
        cp.qp_num = p.qp_num;
    }
    if !c.c.qp.is_null() {
        // SAFETY: [object] the id's QP; [c-struct] raw reads, no reference.
        let (qp_num, srq) = unsafe { ((*c.c.qp).qp_num, (*c.c.qp).srq) };
        cp.qp_num = qp_num;
        cp.srq = !srq.is_null();
    }
    cp
}

/// `rdma_connect`. With a QP, synchronous ids move it to RTR/RTS between the peer's reply and
/// the RTU; asynchronous ids do it when `rdma_get_cm_event` reads CONNECT_RESPONSE.
///
/// # Safety
/// `id` is ours; `conn_param` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    // SAFETY: [in] conn_param (NULL allowed).
    let p = unsafe { self::conn_param(&c, conn_param) };
    let r = c.id().and_then(|i| {
        if i.is_sync() && !c.c.qp.is_null() {
            // On iWARP the hook does not run: ESTABLISHED comes instead of CONNECT_RESPONSE.
            i.connect_with(&p, |_, _| rtr_rts(&c))?;
            iwarp_established(&c)
        } else {
            i.connect(&p)
        }
    });
    ret(r)
}

/// `rdma_establish`: sends the RTU after CONNECT_RESPONSE (ids whose QP the caller manages).
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    ret(c.id().and_then(|i| i.establish()))
}

/// `rdma_accept`. With a (connected) QP, moves it to RTR and RTS first.
///
/// # Safety
/// `id` is ours; `conn_param` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    // SAFETY: [in] conn_param (NULL allowed).
    let p = unsafe { self::conn_param(&c, conn_param) };
    let r = (|| {
        if !c.c.qp.is_null() && c.c.qp_type != u32::from(QpType::UD.0) {
            rtr_rts(&c)?;
        }
        let id = c.id()?;
        id.accept(&p)?;
        if id.is_sync() && c.c.qp_type != u32::from(QpType::UD.0) {
            // Synchronous ids waited for ESTABLISHED.
            iwarp_established(&c)?;
        }
        Ok(())
    })();
    ret(r)
}

/// `rdma_reject`.
///
/// # Safety
/// `id` is ours; `private_data` NULL or `private_data_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    let data: &[u8] = if private_data.is_null() {
        &[]
    } else {
        // SAFETY: [buf] private_data has private_data_len readable bytes.
        unsafe { std::slice::from_raw_parts(private_data.cast(), private_data_len.into()) }
    };
    ret(c.id().and_then(|i| i.reject(data)))
}

/// `rdma_disconnect`: the QP (if any, connected) goes to ERR first.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    let r = (|| {
        if !c.c.qp.is_null() && c.c.qp_type != u32::from(QpType::UD.0) {
            modify_qp_plain(&c, QpState::ERR, IBV_QP_STATE)?;
        }
        c.id()?.disconnect()
    })();
    ret(r)
}

/// `rdma_notify`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    ret(c.id().and_then(|i| i.notify(event as u32)))
}

/// `rdma_set_option`: `RDMA_OPTION_ID` TOS, REUSEADDR, AFONLY, ACK_TIMEOUT; `RDMA_OPTION_IB`
/// PATH (passed to the kernel).
///
/// # Safety
/// `id` is ours; `optval` has `optlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { cid(id) }, neg).lock();
    if optval.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [buf] optval has optlen readable bytes (NULL checked above).
    let v = unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen) };
    let int = || -> io::Result<c_int> {
        let b: [u8; 4] = v
            .try_into()
            .map_err(|_| einval("rdma_set_option: this option takes an int"))?;
        Ok(c_int::from_ne_bytes(b))
    };
    let byte = || -> io::Result<u8> {
        match v {
            [b] => Ok(*b),
            _ => Err(einval("rdma_set_option: this option takes a uint8_t")),
        }
    };
    let r = c.id().and_then(|i| match (level, optname) {
        (0, 0) => i.set_tos(byte()?),
        (0, 1) => i.set_reuseaddr(int()? != 0),
        (0, 2) => i.set_afonly(int()? != 0),
        (0, 3) => i.set_ack_timeout(byte()?),
        _ => i.set_option_raw(level as u32, optname as u32, v),
    });
    ret(r)
}

/// `rdma_migrate_id`: moves the id (and its events) to `channel`; NULL makes it synchronous.
///
/// # Safety
/// `id` is ours; `channel` NULL or ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    // SAFETY: [object] id.
    let mut g = obj!(unsafe { cid(id) }, neg).lock();
    let IdGuard { st, c, .. } = &mut g;
    let st = &mut **st;
    let Some(i) = st.id.as_mut() else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let to = if channel.is_null() {
        None
    } else {
        // SAFETY: [object] channel.
        Some(&obj!(unsafe { cchan(channel) }, neg).ch)
    };
    if let Err(e) = i.migrate(to) {
        return ret(Err(e));
    }
    let old = st.own_channel;
    if channel.is_null() {
        let own = new_channel(i.event_channel());
        st.own_channel = own;
        c.channel = own.cast();
    } else {
        st.own_channel = null_mut();
        c.channel = channel;
    }
    if !old.is_null() {
        // SAFETY: [owner] the old private channel, boxed by wrap_id/here, no longer named by the id.
        drop(unsafe { Box::from_raw(old) });
    }
    0
}

/// `rdma_get_src_port`: the local port, network order.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: [object] id.
    unsafe { cid(id) }.map_or(0, |c| port_of(&c.lock().c.route.addr.src_storage))
}

/// `rdma_get_dst_port`: the peer's port, network order.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: [object] id.
    unsafe { cid(id) }.map_or(0, |c| port_of(&c.lock().c.route.addr.dst_storage))
}

fn port_of(s: &libc::sockaddr_storage) -> u16 {
    // SAFETY: sockaddr_storage is large enough for either view.
    unsafe { from_sockaddr((s as *const libc::sockaddr_storage).cast()) }
        .ok()
        .flatten()
        .map_or(0, |a| a.port().to_be())
}

// ---------------------------------------------------------------------------------------
// events

/// An `rdma_cm_event` and the rverbs event behind it.
#[repr(C)]
pub struct CEvent {
    /// What C sees.
    pub c: rdma_cm_event,
    _ev: CmEvent,
    private_data: Vec<u8>,
}

fn make_event(ev: CmEvent, id: *mut CCmId, listen: *mut CCmId) -> *mut CEvent {
    // SAFETY: integers and raw pointers; all-zero is valid.
    let mut c: rdma_cm_event = unsafe { std::mem::zeroed() };
    c.id = id.cast();
    c.listen_id = listen.cast();
    c.event = ev.kind().0;
    c.status = ev.status();
    let pd = ev.private_data().to_vec();
    let mut b = Box::new(CEvent {
        c,
        _ev: ev,
        private_data: pd,
    });
    let (ptr, len) = if b.private_data.is_empty() {
        (ptr::null(), 0u8)
    } else {
        (
            b.private_data.as_ptr().cast::<c_void>(),
            b.private_data.len().min(255) as u8,
        )
    };
    if let Some(u) = b._ev.ud() {
        b.c.param.ud = rdma_ud_param {
            private_data: ptr,
            private_data_len: len,
            ah_attr: verbs::ah_from_kern(&u.ah_attr),
            qp_num: u.qp_num,
            qkey: u.qkey,
        };
    } else {
        let p = b._ev.conn().unwrap_or_default();
        b.c.param.conn = rdma_conn_param {
            private_data: ptr,
            private_data_len: len,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: p.flow_control,
            retry_count: p.retry_count,
            rnr_retry_count: p.rnr_retry_count,
            srq: u8::from(p.srq),
            qp_num: p.qp_num,
        };
    }
    Box::into_raw(b)
}

/// `rdma_get_cm_event`: the next event of the channel; waits for one (also when the caller
/// made the fd non-blocking: poll it first). CONNECT_REQUEST carries a new id (on the listener's
/// channel, with its context). For an id with a QP, CONNECT_RESPONSE is completed here
/// (QP to RTR/RTS, RTU) and reported as ESTABLISHED, or as CONNECT_ERROR if that failed.
///
/// # Safety
/// `channel` is ours; `event` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    if channel.is_null() || event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [object] channel.
    let ch = obj!(unsafe { cchan(channel) }, neg);
    loop {
        // The descriptor is O_NONBLOCK from the start (rverbs-cm reads it after poll), so a
        // caller's own O_NONBLOCK cannot be told apart: this call always waits.
        let got = ch.ch.get_event().map(Some);
        let mut ev = match got {
            Ok(Some(ev)) => ev,
            Ok(None) => {
                set_errno(libc::EAGAIN);
                return -1;
            }
            Err(e) => return ret(Err(e)),
        };
        let Some(cc) = use_id(ev.uid()) else {
            // An id destroyed with events still queued: nobody to report them to.
            continue;
        };
        // Done with the id (destroy may go on) when this is dropped, on every path.
        struct Used<'a>(&'a CCmId);
        impl Drop for Used<'_> {
            fn drop(&mut self) {
                self.0.users.ack(1);
            }
        }
        let _used = Used(cc);
        let idp = cc.c.get().cast::<CCmId>();
        let mut c = cc.lock();
        let kind = ev.kind();
        let out = match kind {
            CmEventKind::CONNECT_REQUEST => {
                let Some(new) = ev.take_id() else { continue };
                let n = wrap_id(new, c.c.channel, cc.context());
                make_event(ev, n, idp)
            }
            CmEventKind::ADDR_RESOLVED | CmEventKind::ROUTE_RESOLVED => {
                update_addr(&mut c);
                let e = make_event(ev, idp, null_mut());
                if kind == CmEventKind::ADDR_RESOLVED && c.c.verbs.is_null() {
                    // SAFETY: just made.
                    unsafe {
                        (*e).c.event = CmEventKind::ADDR_ERROR.0;
                        (*e).c.status = -libc::ENODEV;
                    }
                }
                e
            }
            CmEventKind::CONNECT_RESPONSE if !c.c.qp.is_null() => {
                let r = rtr_rts(&c).and_then(|()| c.id()?.establish());
                let e = make_event(ev, idp, null_mut());
                // SAFETY: just made.
                let ce = unsafe { &mut (*e).c };
                match r {
                    Ok(()) => ce.event = CmEventKind::ESTABLISHED.0,
                    Err(err) => {
                        let n = fail(&err);
                        if let Ok(i) = c.id() {
                            let _ = i.reject(&[]);
                        }
                        c.connect_error = true;
                        ce.event = CmEventKind::CONNECT_ERROR.0;
                        ce.status = -n;
                    }
                }
                e
            }
            CmEventKind::MULTICAST_JOIN | CmEventKind::MULTICAST_ERROR => {
                let (handle, ud) = (ev.id_handle(), ev.ud());
                let e = make_event(ev, idp, null_mut());
                // SAFETY: just made.
                multicast_event(&mut c, unsafe { &mut (*e).c }, handle, ud);
                e
            }
            CmEventKind::ESTABLISHED if !c.c.qp.is_null() && iwarp(&c) => {
                let e = make_event(ev, idp, null_mut());
                if let Err(err) = iwarp_established(&c) {
                    // SAFETY: just made.
                    let ce = unsafe { &mut (*e).c };
                    ce.event = CmEventKind::CONNECT_ERROR.0;
                    ce.status = -fail(&err);
                }
                e
            }
            CmEventKind::REJECTED if c.connect_error => {
                c.connect_error = false;
                continue;
            }
            _ => make_event(ev, idp, null_mut()),
        };
        // SAFETY: [out] event (non-NULL, checked above).
        unsafe { *event = out.cast() };
        return 0;
    }
}

/// `rdma_ack_cm_event`: frees the event (its private data with it).
///
/// # Safety
/// `event` came from [`rdma_get_cm_event`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [destroy] event: boxed by make_event ([owner]).
    drop(unsafe { Box::from_raw(event as *mut CEvent) });
    0
}

/// `rdma_event_str`.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&CStr; 16] = [
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    usize::try_from(event)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
}

// ---------------------------------------------------------------------------------------
// synchronous endpoints: rdma_getaddrinfo, rdma_create_ep, rdma_get_request

const RAI_PASSIVE: c_int = 1;

fn alloc_sockaddr(a: &SocketAddr) -> *mut libc::sockaddr {
    let s = to_storage(a);
    // SAFETY: plain allocation; checked for NULL.
    let p = unsafe { libc::calloc(1, size_of::<libc::sockaddr_storage>()) }
        .cast::<libc::sockaddr_storage>();
    if !p.is_null() {
        // SAFETY: fresh allocation of the right size.
        unsafe { p.write(s) };
    }
    p.cast()
}

/// `rdma_getaddrinfo`: numeric or resolvable IPv4/IPv6 nodes and numeric services; 0, or -1
/// and `errno`. Free the list with [`rdma_freeaddrinfo`].
///
/// # Safety
/// `node`/`service` NULL or C strings; `hints` NULL or readable; `res` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    let r = (|| -> io::Result<*mut rdma_addrinfo> {
        let s = |p: *const c_char| -> io::Result<Option<String>> {
            if p.is_null() {
                return Ok(None);
            }
            // SAFETY: [str] p.
            let c = unsafe { CStr::from_ptr(p) };
            Ok(Some(
                c.to_str()
                    .map_err(|_| einval("rdma_getaddrinfo: not UTF-8"))?
                    .to_string(),
            ))
        };
        let (node, service) = (s(node)?, s(service)?);
        let mut h = AddrHints::default();
        let mut flags = 0;
        if !hints.is_null() {
            // SAFETY: [in] hints (non-NULL).
            let hi = unsafe { &*hints };
            flags = hi.ai_flags;
            h.passive = hi.ai_flags & RAI_PASSIVE != 0;
            if hi.ai_port_space != 0 {
                h.port_space = PortSpace(hi.ai_port_space as u16);
            }
            if hi.ai_qp_type != 0 {
                h.qp_type = Some(QpType(hi.ai_qp_type as u8));
            }
            h.family = match hi.ai_family {
                0 => None,
                libc::AF_INET => Some(IpFamily::V4),
                libc::AF_INET6 => Some(IpFamily::V6),
                f => {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        format!("rdma_getaddrinfo: family {f} (AF_INET and AF_INET6 only)"),
                    ))
                }
            };
            // SAFETY: [in] hints' source address (NULL allowed).
            h.src = unsafe { from_sockaddr(hi.ai_src_addr) }?;
        }
        let list = rverbs_cm::getaddrinfo(node.as_deref(), service.as_deref(), &h)?;
        let mut head: *mut rdma_addrinfo = null_mut();
        for ai in list.iter().rev() {
            // SAFETY: calloc of the struct's size; all-zero is a valid rdma_addrinfo.
            let n = unsafe { libc::calloc(1, size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
            if n.is_null() {
                // SAFETY: our list so far.
                unsafe { rdma_freeaddrinfo(head) };
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            // SAFETY: fresh, zeroed.
            let r = unsafe { &mut *n };
            r.ai_flags = flags;
            r.ai_qp_type = c_int::from(ai.qp_type.0);
            r.ai_port_space = c_int::from(ai.port_space.0);
            let fam = ai.dst.or(ai.src).map(|a| a.is_ipv6());
            r.ai_family = match fam {
                Some(true) => libc::AF_INET6,
                _ => libc::AF_INET,
            };
            if let Some(a) = &ai.src {
                r.ai_src_addr = alloc_sockaddr(a);
                r.ai_src_len = sockaddr_len(a);
            }
            if let Some(a) = &ai.dst {
                r.ai_dst_addr = alloc_sockaddr(a);
                r.ai_dst_len = sockaddr_len(a);
            }
            r.ai_next = head;
            head = n;
        }
        Ok(head)
    })();
    match r {
        Ok(h) => {
            // SAFETY: [out] res.
            unsafe { *res = h };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `res` came from [`rdma_getaddrinfo`] (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: [destroy] res: nodes and addresses were calloc'ed by rdma_getaddrinfo.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free(p.cast());
            p = next;
        }
    }
}

/// # Safety
/// `res` is a readable `rdma_addrinfo`.
unsafe fn addrinfo_of(res: *const rdma_addrinfo) -> io::Result<AddrInfo> {
    // SAFETY: [in] res (non-NULL): an rdma_addrinfo of ours or the caller's.
    let r = unsafe { &*res };
    let ps = if r.ai_port_space == 0 {
        PortSpace::TCP
    } else {
        PortSpace(r.ai_port_space as u16)
    };
    Ok(AddrInfo {
        passive: r.ai_flags & RAI_PASSIVE != 0,
        port_space: ps,
        qp_type: if r.ai_qp_type == 0 {
            ps.default_qp_type()
        } else {
            QpType(r.ai_qp_type as u8)
        },
        // SAFETY: [in] res: the addresses of an rdma_addrinfo are sockaddrs (or NULL).
        src: unsafe { from_sockaddr(r.ai_src_addr) }?,
        // SAFETY: as above.
        dst: unsafe { from_sockaddr(r.ai_dst_addr) }?,
    })
}

/// `rdma_create_ep`: a synchronous id for `res` (active: address and route resolved, and
/// with `qp_init_attr` its QP; passive: bound, and `qp_init_attr` kept for the ids
/// `rdma_get_request` returns).
///
/// # Safety
/// `id` writable; `res` readable; `pd` NULL or ours; `qp_init_attr` NULL or readable and
/// writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [in] res.
    let ai = match unsafe { addrinfo_of(res) } {
        Ok(a) => a,
        Err(e) => return ret(Err(e)),
    };
    let cm = match rverbs_cm::create_ep(&ai) {
        Ok(i) => i,
        Err(e) => return ret(Err(e)),
    };
    let p = wrap_id(cm, null_mut(), null_mut());
    if !qp_init_attr.is_null() {
        // SAFETY: [in] [out] qp_init_attr (non-NULL).
        let a = unsafe { &mut *qp_init_attr };
        if ai.passive {
            // SAFETY: [owner] just made, alive.
            unsafe { &*p }.lock().ep_qp = Some((*a, pd));
        // SAFETY: [object] p; [in] a, the caller's attr.
        } else if unsafe { rdma_create_qp(p.cast(), pd, a) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: [destroy] ours, no QP.
            unsafe { rdma_destroy_id(p.cast()) };
            set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
            return -1;
        }
    }
    // SAFETY: [out] id.
    unsafe { *id = p.cast() };
    0
}

/// `rdma_destroy_ep`: QP, SRQ, CQs and the id.
///
/// # Safety
/// `id` is ours and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: [destroy] id, destroyed in order: QP, SRQ, the id.
    unsafe {
        rdma_destroy_qp(id);
        rdma_destroy_srq(id);
        rdma_destroy_id(id);
    }
}

/// `rdma_get_request`: on a synchronous listening id, waits for the next connection request
/// and returns its (synchronous) id, with its QP when the listener came from
/// `rdma_create_ep` with QP attributes. `id->event` is the CONNECT_REQUEST.
///
/// # Safety
/// `listen` is ours; `id` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    // SAFETY: [object] listen.
    let lc = obj!(unsafe { cid(listen) }, neg);
    if id.is_null() {
        set_errno(null_arg("rdma_cm_id output"));
        return -1;
    }
    let (new, ep_qp) = {
        let l = lc.lock();
        match l.id().and_then(|i| i.get_request()) {
            Ok(n) => (n, l.ep_qp),
            Err(e) => return ret(Err(e)),
        }
    };
    let ev = new.take_event();
    let p = wrap_id(new, null_mut(), lc.context());
    // SAFETY: [owner] just made, alive.
    let c = unsafe { &*p };
    if let Some(ev) = ev {
        c.lock().c.event = make_event(ev, p, listen.cast()).cast();
    }
    if let Some((mut a, pd)) = ep_qp {
        // SAFETY: p is an [object] id of ours (not locked here); a is a copy.
        if unsafe { rdma_create_qp(p.cast(), pd, &mut a) } != 0 {
            let e = io::Error::last_os_error();
            if let Ok(i) = c.lock().id() {
                let _ = i.reject(&[]);
            }
            // SAFETY: [destroy] ours, no QP.
            unsafe { rdma_destroy_id(p.cast()) };
            set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
            return -1;
        }
    }
    // SAFETY: [out] id.
    unsafe { *id = p.cast() };
    0
}

// ---------------------------------------------------------------------------------------
// SRQs, devices, unsupported

/// `rdma_create_srq`: an SRQ on the id's device (PD NULL: the default one), kept in
/// `id->srq` for the QP created next.
///
/// # Safety
/// `id` is ours; `pd` NULL or ours; `attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { cid(id) }, neg).lock();
    let pd = if pd.is_null() {
        match default_pd(c.c.verbs) {
            Ok(p) => p,
            Err(e) => return ret(Err(e)),
        }
    } else {
        pd
    };
    // SAFETY: forwarded: [object] pd, [in] [out] attr.
    let srq = unsafe { verbs::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return -1;
    }
    c.c.srq = srq;
    c.c.pd = pd;
    0
}

/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { cid(id) }, unit).lock();
    if !c.c.srq.is_null() {
        // SAFETY: [object] the id's SRQ.
        unsafe { verbs::ibv_destroy_srq(c.c.srq) };
        c.c.srq = null_mut();
    }
}

/// `rdma_get_devices`: a NULL-terminated array of every device's context (opened once, kept
/// open); free it with [`rdma_free_devices`].
///
/// # Safety
/// `num_devices` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let mut n: c_int = 0;
    // SAFETY: n is writable.
    let list = unsafe { verbs::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return null_mut();
    }
    let mut ctxs = Vec::new();
    for i in 0..n as usize {
        // SAFETY: n entries.
        let d = unsafe { *list.add(i) };
        // SAFETY: one of ours.
        let guid = u64::from_be(unsafe { verbs::ibv_get_device_guid(d) });
        if let Ok(c) = device_for(guid) {
            ctxs.push(c);
        }
    }
    // SAFETY: from ibv_get_device_list.
    unsafe { verbs::ibv_free_device_list(list) };
    // SAFETY: plain allocation, checked.
    let out = unsafe { libc::calloc(ctxs.len() + 1, size_of::<*mut ibv_context>()) }
        .cast::<*mut ibv_context>();
    if out.is_null() {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    for (i, c) in ctxs.iter().enumerate() {
        // SAFETY: len + 1 entries allocated.
        unsafe { *out.add(i) = *c };
    }
    if !num_devices.is_null() {
        // SAFETY: [out] num_devices (non-NULL).
        unsafe { *num_devices = ctxs.len() as c_int };
    }
    out
}

/// `rdma_free_devices`.
///
/// # Safety
/// `list` came from [`rdma_get_devices`].
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: [destroy] list: calloc'ed by rdma_get_devices.
    unsafe { libc::free(list.cast()) };
}

// ---------------------------------------------------------------------------------------
// multicast

/// The join of `c` whose kernel handle is `handle` (a multicast event's `id`).
fn join_by_handle<'a>(c: &'a mut IdGuard<'_>, handle: u32) -> Option<&'a mut CJoin> {
    let IdGuard { st, .. } = c;
    let st = &mut **st;
    let id = st.id.as_ref()?;
    st.joins
        .iter_mut()
        .find(|j| id.multicast_handle(j.addr) == Some(handle))
}

/// Completes a MULTICAST_JOIN / MULTICAST_ERROR event of the join with kernel handle
/// `handle` as librdmacm does: `param.ud.private_data` is the join's `context`, and on JOIN
/// the id's QP (if it has one and the join is not send-only) is attached to the group the
/// event names; when that fails the event becomes MULTICAST_ERROR with the negative errno as
/// status.
fn multicast_event(
    c: &mut IdGuard<'_>,
    ev: &mut rdma_cm_event,
    handle: u32,
    ud: Option<UdEventParam>,
) {
    let Some(addr) = join_by_handle(c, handle).map(|j| {
        // A write of a union field (of the `ud` member make_event wrote, or zeroed): safe.
        ev.param.ud.private_data = j.context;
        j.addr
    }) else {
        return;
    };
    if ev.event != CmEventKind::MULTICAST_JOIN.0 {
        return;
    }
    let r = match ud {
        Some(ud) => attach_join(c, addr, &ud),
        None => Err(einval("MULTICAST_JOIN without UD parameters")),
    };
    if let Err(e) = r {
        ev.event = CmEventKind::MULTICAST_ERROR.0;
        ev.status = -fail(&e);
    }
}

/// `rdma_join_multicast`: joins the group `addr` as a full member
/// ([`rdma_join_multicast_ex`] with `RDMA_MC_JOIN_FLAG_FULLMEMBER`).
///
/// # Safety
/// `id` is NULL or ours; `addr` NULL or a readable sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: [object] id; [in] addr.
    unsafe { join(id, addr, McJoinFlags::FULL_MEMBER, context) }
}

/// `rdma_join_multicast_ex`: joins `attr.addr` with `attr.join_flags`. `comp_mask` must name
/// both fields (`EINVAL` otherwise; unknown bits `EOPNOTSUPP`, as librdmacm).
///
/// # Safety
/// `id` is NULL or ours; `attr` NULL or a readable `rdma_cm_join_mc_attr_ex` whose `addr` is
/// NULL or a readable sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    if attr.is_null() {
        set_errno(null_arg("rdma_cm_join_mc_attr_ex"));
        return -1;
    }
    // SAFETY: [in] attr, non-NULL.
    let a = unsafe { attr.read_unaligned() };
    let known = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    if a.comp_mask & !known != 0 {
        return ret(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "rdma_join_multicast_ex: unknown comp_mask bits {:#x}",
                a.comp_mask & !known
            ),
        )));
    }
    if a.comp_mask != known {
        return ret(Err(einval(
            "rdma_join_multicast_ex: comp_mask must name both the address and the join flags",
        )));
    }
    let Ok(flags) = u16::try_from(a.join_flags) else {
        return ret(Err(einval(&format!(
            "rdma_join_multicast_ex: unknown join flags {}",
            a.join_flags
        ))));
    };
    // SAFETY: [object] id; [in] a.addr (the caller's contract).
    unsafe { join(id, a.addr, McJoinFlags(flags), context) }
}

/// # Safety
/// `id` is NULL or ours; `addr` NULL or a readable sockaddr.
unsafe fn join(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    flags: McJoinFlags,
    context: *mut c_void,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { cid(id) }, neg).lock();
    // SAFETY: [in] addr.
    let a = match unsafe { from_sockaddr(addr) } {
        Ok(Some(a)) => a,
        Ok(None) => return ret(Err(einval("rdma_join_multicast: NULL group address"))),
        Err(e) => return ret(Err(e)),
    };
    let r = c.id().and_then(|i| i.join_multicast(a, flags));
    let ud = match r {
        Ok(ud) => ud,
        Err(e) => return ret(Err(e)),
    };
    c.joins.push(CJoin {
        addr: a,
        context,
        flags,
        attached: None,
    });
    if let Some(ud) = ud {
        // A synchronous id waited for MULTICAST_JOIN: attach its QP now (the event itself is
        // not kept).
        if let Ok(i) = c.id() {
            drop(i.take_event());
        }
        if let Err(e) = attach_join(&mut c, a, &ud) {
            let n = fail(&e);
            if let Err(l) = leave_join(&mut c, a) {
                fail(&l);
            }
            set_errno(n);
            return -1;
        }
    }
    0
}

/// Attaches the id's QP (if any, and unless the join of `addr` is send-only) to the group of
/// `ud`.
fn attach_join(c: &mut IdGuard<'_>, addr: SocketAddr, ud: &UdEventParam) -> io::Result<()> {
    let qp = c.c.qp;
    let Some(j) = c.joins.iter_mut().find(|j| j.addr.ip() == addr.ip()) else {
        return Ok(());
    };
    if qp.is_null() || j.flags == McJoinFlags::SENDONLY_FULL_MEMBER {
        return Ok(());
    }
    // SAFETY: [object] the id's QP, made by rdma_create_qp (alive while the id has it).
    let Some(q) = (unsafe { verbs::cqp(qp) }) else {
        return Ok(());
    };
    let (gid, lid) = ud.mcast_group();
    q.qp.attach_mcast(&gid, lid)?;
    j.attached = Some((gid, lid));
    Ok(())
}

/// Detaches the id's QP from the group `addr` if it was attached, leaves it and forgets the
/// join (nothing for a group not joined); the first error (the leave is tried also when the
/// detach failed).
fn leave_join(c: &mut IdGuard<'_>, addr: SocketAddr) -> io::Result<()> {
    let qp = c.c.qp;
    let Some(k) = c.joins.iter().position(|j| j.addr.ip() == addr.ip()) else {
        return Ok(());
    };
    let j = c.joins.remove(k);
    let mut r = Ok(());
    if let (Some((gid, lid)), false) = (j.attached, qp.is_null()) {
        // SAFETY: [object] the id's QP.
        if let Some(q) = unsafe { verbs::cqp(qp) } {
            r = q.qp.detach_mcast(&gid, lid);
        }
    }
    let l = c.id().and_then(|i| i.leave_multicast(addr).map(drop));
    r.and(l)
}

/// `rdma_leave_multicast`: detaches the id's QP from the group (if the join attached it) and
/// leaves it; `EADDRNOTAVAIL` for a group the id has not joined (as librdmacm).
///
/// # Safety
/// `id` is NULL or ours; `addr` NULL or a readable sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { cid(id) }, neg).lock();
    // SAFETY: [in] addr.
    let a = match unsafe { from_sockaddr(addr) } {
        Ok(Some(a)) => a,
        Ok(None) => return ret(Err(einval("rdma_leave_multicast: NULL group address"))),
        Err(e) => return ret(Err(e)),
    };
    if !c.joins.iter().any(|j| j.addr.ip() == a.ip()) {
        fail(&einval(&format!(
            "rdma_leave_multicast: this id has not joined {}",
            a.ip()
        )));
        set_errno(libc::EADDRNOTAVAIL);
        return -1;
    }
    ret(leave_join(&mut c, a))
}

macro_rules! cm_unsupported {
    ($($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*);)*) => {$(
        $(#[$m])*
        ///
        /// Not supported: -1 and `errno` `EOPNOTSUPP`.
        ///
        /// # Safety
        /// Never touches its arguments.
        #[no_mangle]
        pub unsafe extern "C" fn $name($(_: $t),*) -> c_int {
            set_errno(libc::EOPNOTSUPP);
            -1
        }
    )*};
}

cm_unsupported! {
    /// `rdma_set_local_ece`.
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    /// `rdma_get_remote_ece`.
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut c_void);
}

/// `rpoll` (rsockets): this library has no rsockets, so every descriptor is an ordinary one
/// and `poll(2)` serves.
///
/// # Safety
/// As `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    // SAFETY: [buf] fds has nfds entries, as poll(2) requires.
    unsafe { libc::poll(fds, nfds, timeout) }
}
