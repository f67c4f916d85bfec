//! Events (`rdma_cm_event`): get, acknowledge, name.

use super::*;

/// An `rdma_cm_event` and the rverbs event behind it.
#[repr(C)]
pub struct CEvent {
    /// What C sees.
    pub c: rdma_cm_event,
    _ev: CmEvent,
    private_data: Vec<u8>,
    /// The id the event counts against until it is acknowledged (the id the kernel named:
    /// for CONNECT_REQUEST the listening id), whose destroy waits for that; NULL when the
    /// event is not counted (`rdma_get_request`'s, which the new id owns).
    counted: *const CCmId,
}

pub(super) fn make_event(ev: CmEvent, id: *mut CCmId, listen: *mut CCmId) -> *mut CEvent {
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
        counted: ptr::null(),
    });
    let (ptr, len) = if b.private_data.is_empty() {
        (ptr::null(), 0u8)
    } else {
        (
            b.private_data.as_ptr().cast::<c_void>(),
            b.private_data.len().min(255) as u8,
        )
    };
    if let Some(arg) = b._ev.arg() {
        b.c.param.arg = arg;
    } else if let Some(u) = b._ev.ud() {
        b.c.param.ud = rdma_ud_param {
            private_data: ptr,
            private_data_len: len,
            ah_attr: ibverbs::ah_from_kern(&u.ah_attr),
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

symver!(rdma_get_cm_event => "RDMACM_1.0");
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
    let ch = obj!(unsafe { CEventChannel::from_c(channel) }, neg);
    match next_event(ch) {
        Ok(out) => {
            // SAFETY: [out] event (non-NULL, checked above).
            unsafe { *event = out.cast() };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

/// The next event of `ch` for C (a fresh [`CEvent`]), with what librdmacm does on top of the
/// kernel's event: the new id of a CONNECT_REQUEST, the addresses of a resolved id, the QP's
/// RTR/RTS and RTU on CONNECT_RESPONSE, multicast joins, iWARP's QP on ESTABLISHED, and the
/// REJECTED that follows a failed CONNECT_RESPONSE skipped.
fn next_event(ch: &CEventChannel) -> io::Result<*mut CEvent> {
    loop {
        // The descriptor is O_NONBLOCK from the start (rverbs-cm reads it after poll), so a
        // caller's own O_NONBLOCK cannot be told apart: this call always waits.
        let mut ev = ch.ch.get_event()?;
        let Some(cc) = use_id(ev.uid()) else {
            // An id destroyed with events still queued: nobody to report them to.
            continue;
        };
        // The event counts against the id from use_id on: an event not handed to C is
        // acknowledged when this is dropped (after the id's guard below, which writes to
        // it: destroy may free the id once the ack counts); one handed to C disarms it, and
        // rdma_ack_cm_event acknowledges it.
        struct Counted<'a>(Option<&'a CCmId>);
        impl Drop for Counted<'_> {
            fn drop(&mut self) {
                if let Some(c) = self.0 {
                    c.users.ack(1);
                }
            }
        }
        let mut counted = Counted(Some(cc));
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
            k if k.0 == addrinfo::EVENT_INTERNAL => {
                let kind = addrinfo::internal_event(ev.arg())?;
                let e = make_event(ev, idp, null_mut());
                // SAFETY: just made.
                unsafe { (*e).c.event = kind };
                e
            }
            CmEventKind::REJECTED if c.connect_error => {
                c.connect_error = false;
                continue;
            }
            _ => make_event(ev, idp, null_mut()),
        };
        counted.0 = None;
        // SAFETY: just made, not handed out yet.
        unsafe { (*out).counted = idp };
        // SAFETY: just made; the name is a static string.
        let (name, status, id) = unsafe {
            (
                CStr::from_ptr(rdma_event_str((*out).c.event as c_int)),
                (*out).c.status,
                (*out).c.id,
            )
        };
        trace(format_args!(
            "event {} status {status} id {id:p} (kernel's {:?}, on id {idp:p})",
            name.to_string_lossy(),
            kind
        ));
        return Ok(out);
    }
}

symver!(rdma_ack_cm_event => "RDMACM_1.0");
/// `rdma_ack_cm_event`: frees the event (its private data with it), then acknowledges it
/// to its id (a destroy of the id waiting for it may return).
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
    unsafe { free_event(event.cast()) };
    0
}

/// Frees an event of [`make_event`], then acknowledges it to the id it counts against: that
/// ack is the last access to the id (its destroy may free it from then on).
///
/// # Safety
/// `e` came from [`make_event`] and is not used afterwards; an event counted against an id
/// is not yet acknowledged (so the id is alive: its destroy waits for this).
pub(super) unsafe fn free_event(e: *mut CEvent) {
    // SAFETY: the caller's promise ([owner]).
    let b = unsafe { Box::from_raw(e) };
    let counted = b.counted;
    drop(b);
    if !counted.is_null() {
        // SAFETY: the caller's promise: the id waits for this ack; only its (interior
        // mutable) count is reached.
        unsafe { (*counted).users.ack(1) };
    }
}

symver!(rdma_event_str => "RDMACM_1.0");
/// `rdma_event_str`.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    const NAMES: [&CStr; 18] = [
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
        c"RDMA_CM_EVENT_ADDRINFO_RESOLVED",
        c"RDMA_CM_EVENT_ADDRINFO_ERROR",
    ];
    usize::try_from(event)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or(c"UNKNOWN EVENT".as_ptr(), |s| s.as_ptr())
}
