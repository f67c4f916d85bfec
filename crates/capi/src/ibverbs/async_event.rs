//! Asynchronous events (`ibv_get_async_event`, `ibv_ack_async_event`).

use super::*;

symver!(ibv_get_async_event => "IBVERBS_1.1");
/// `ibv_get_async_event`: blocks for the next event (returns -1 with `EAGAIN` at once when
/// the caller made `async_fd` non-blocking and none is there); -1 with errno on failure.
///
/// # Safety
/// `context` is ours; `event` is writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    use rverbs_uverbs::async_event::AsyncElement;
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, neg);
    let nonblock = rustix::fs::fcntl_getfl(c.ctx.async_fd())
        .is_ok_and(|f| f.contains(rustix::fs::OFlags::NONBLOCK));
    let timeout = nonblock.then_some(std::time::Duration::ZERO);
    let ev = match c.ctx.get_async_event(timeout) {
        Ok(Some(ev)) => ev,
        Ok(None) => {
            set_errno(libc::EAGAIN);
            return -1;
        }
        Err(e) => {
            set_errno(fail(&e));
            return -1;
        }
    };
    // Counted (so that destroy waits for the ack) when ibv_ack_async_event will find the
    // object by the event type, as libibverbs' does.
    let kind = async_kind(ev.event_type.0);
    let element: *mut c_void = match ev.element {
        AsyncElement::Cq(h) if kind == Some(AsyncKind::Cq) => deliver_cq_event(h).cast(),
        AsyncElement::Cq(h) => cqs()
            .as_ref()
            .and_then(|m| m.get(&h).map(|p| p.0.cast()))
            .unwrap_or(null_mut()),
        AsyncElement::Qp(h) => deliver_async_event(QP, h, kind == Some(AsyncKind::Qp)),
        AsyncElement::Srq(h) => deliver_async_event(SRQ, h, kind == Some(AsyncKind::Srq)),
        AsyncElement::Port(p) => usize::from(p) as *mut c_void,
        AsyncElement::Device | AsyncElement::Unknown(_) => null_mut(),
        // AsyncElement is non_exhaustive: an element kind added later has no C object here yet.
        _ => null_mut(),
    };
    // SAFETY: [buf] entries has room for max_entries entries of entry_size bytes.
    unsafe {
        event.write(ibv_async_event {
            element,
            event_type: ev.event_type.0,
        })
    };
    0
}

/// Which object an async event of type `t` (`enum ibv_event_type`) names, as
/// `ibv_ack_async_event` reads it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum AsyncKind {
    Cq,
    Qp,
    Srq,
}

fn async_kind(t: u32) -> Option<AsyncKind> {
    match t {
        // IBV_EVENT_CQ_ERR
        0 => Some(AsyncKind::Cq),
        // QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, SQ_DRAINED, PATH_MIG,
        // PATH_MIG_ERR, QP_LAST_WQE_REACHED
        1..=7 | 16 => Some(AsyncKind::Qp),
        // SRQ_ERR, SRQ_LIMIT_REACHED
        14 | 15 => Some(AsyncKind::Srq),
        _ => None,
    }
}

symver!(ibv_ack_async_event => "IBVERBS_1.1");
/// `ibv_ack_async_event`: acknowledges an event of [`ibv_get_async_event`]; a destroy of its
/// CQ, QP or SRQ waiting for it returns once all of that object's events are acknowledged.
///
/// # Safety
/// `event` is NULL or an \[in\] event filled by [`ibv_get_async_event`] and not acknowledged
/// yet.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    // SAFETY: [in] event.
    let Some(ev) = (unsafe { event.as_ref() }) else {
        null_arg("ibv_async_event");
        return;
    };
    if ev.element.is_null() {
        return;
    }
    match async_kind(ev.event_type) {
        Some(AsyncKind::Cq) => {
            // SAFETY: [in] event: its element is the CQ ibv_get_async_event counted the event
            // on, kept alive until this ack ([registry]).
            let c = unsafe { &*ev.element.cast::<CCq>() };
            // SAFETY: [c-struct] an aligned u32 of the live object.
            unsafe { add_to_c_counter(&raw mut (*c.c_ptr()).async_events_completed, 1) };
            c.events.ack(1);
        }
        Some(AsyncKind::Qp) => {
            // SAFETY: as above, a QP.
            let q = unsafe { &*ev.element.cast::<CQp>() };
            // SAFETY: [c-struct] an aligned u32 of the live object.
            unsafe { add_to_c_counter(&raw mut (*q.c_ptr()).qp_base.events_completed, 1) };
            q.events.ack(1);
        }
        Some(AsyncKind::Srq) => {
            // SAFETY: as above, an SRQ.
            let s = unsafe { &*ev.element.cast::<CSrq>() };
            // SAFETY: [c-struct] an aligned u32 of the live object.
            unsafe { add_to_c_counter(&raw mut (*s.c.get()).events_completed, 1) };
            s.events.ack(1);
        }
        None => {}
    }
}
