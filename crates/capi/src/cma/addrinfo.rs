//! librdmacm's `RDMACM_1.4` (rdma-core 60): `rdma_write_cm_event`, and the asynchronous
//! address resolution `rdma_resolve_addrinfo` / `rdma_query_addrinfo` built on it.
//!
//! As librdmacm: `rdma_write_cm_event` queues a USER event on the id's channel with the
//! kernel's `WRITE_CM_EVENT` (7.x kernels; 6.1 and 6.12 have no such command, refused by name,
//! `EOPNOTSUPP`). `rdma_resolve_addrinfo` resolves the name at once (`rdma_getaddrinfo`: DNS
//! or numeric), keeps the answer on the id, and writes an INTERNAL event carrying
//! `RDMA_CM_EVENT_ADDRINFO_RESOLVED`, which [`rdma_get_cm_event`] reports as that event (a
//! synchronous id reads it before the call returns); `rdma_query_addrinfo` then hands the
//! answer over (the caller frees it with [`rdma_freeaddrinfo`]). Resolution through the
//! InfiniBand SA (`RAI_SA`, `RESOLVE_IB_SERVICE`) needs an InfiniBand port, which rxe and siw
//! do not have: refused, `EOPNOTSUPP`.

use super::*;

/// `RAI_SA`: resolve the service through the InfiniBand SA (rdma-core 60).
const RAI_SA: c_int = 0x10;
/// `RAI_DNS`: resolve through DNS (rdma-core 60; the default, exclusive with `RAI_SA`).
const RAI_DNS: c_int = 0x20;
/// `RDMA_CM_EVENT_ADDRINFO_RESOLVED` (rdma-core 60's `enum rdma_cm_event_type`).
pub(super) const EVENT_ADDRINFO_RESOLVED: u32 = 16;
/// `RDMA_CM_EVENT_INTERNAL` (rdma-core 60): librdmacm's own events.
pub(super) const EVENT_INTERNAL: u32 = 19;

/// An id's `rdma_resolve_addrinfo` state (librdmacm's `resolving_ai` and `resolved_ai`):
/// whether a resolution is under way, and its answer until `rdma_query_addrinfo` takes it;
/// an answer nobody took is freed with the id.
pub(super) struct Resolving {
    busy: bool,
    ai: *mut rdma_addrinfo,
}

impl Default for Resolving {
    fn default() -> Self {
        Self {
            busy: false,
            ai: null_mut(),
        }
    }
}

impl Drop for Resolving {
    fn drop(&mut self) {
        // SAFETY: [owner] an answer of rdma_getaddrinfo that nobody took.
        unsafe { rdma_freeaddrinfo(self.ai) };
    }
}

symver!(rdma_write_cm_event => "RDMACM_1.4");
/// `rdma_write_cm_event` (rdma-core 60): queues `RDMA_CM_EVENT_USER` with `status` and `arg`
/// (the event's `param.arg`) on the id's channel (`CmId::write_event`); 0, or -1 and
/// `errno`: `EINVAL` for a NULL id or another event type (as librdmacm), `EOPNOTSUPP` on a
/// kernel without the command (6.1, 6.12).
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_write_cm_event(
    id: *mut rdma_cm_id,
    event: c_int,
    status: c_int,
    arg: u64,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    if event != CmEventKind::USER.0 as c_int {
        return ret(Err(einval(&format!(
            "rdma_write_cm_event: event {event} (only RDMA_CM_EVENT_USER, {}, can be written)",
            CmEventKind::USER.0
        ))));
    }
    ret(c.id().and_then(|i| i.write_event(status, arg)))
}

symver!(rdma_resolve_addrinfo => "RDMACM_1.4");
/// `rdma_resolve_addrinfo` (rdma-core 60): resolves `node` / `service` with `hints` as
/// [`rdma_getaddrinfo`] does, then reports `RDMA_CM_EVENT_ADDRINFO_RESOLVED` on the id's
/// channel (a synchronous id reads it before this returns); [`rdma_query_addrinfo`] gives the
/// answer. 0, or -1 and `errno`: `EINVAL` for a NULL id, `EBUSY` while a resolution of the id
/// is under way (until its answer is queried), `EOPNOTSUPP` for `RAI_SA` (the InfiniBand SA:
/// rxe and siw have none) or `RAI_SA` with `RAI_DNS`, and on kernels without `WRITE_CM_EVENT`
/// (6.1, 6.12: the event cannot be written); what `rdma_getaddrinfo` fails with. A failure
/// leaves the id as it was.
///
/// # Safety
/// `id` is ours; `node`/`service` NULL or C strings; `hints` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addrinfo(
    id: *mut rdma_cm_id,
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
) -> c_int {
    // SAFETY: [object] id.
    let cc = obj!(unsafe { CCmId::from_c(id) }, neg);
    let mut c = cc.lock();
    if c.addrinfo.busy {
        fail(&io::Error::other(
            "rdma_resolve_addrinfo: the id is resolving already (query its answer first)",
        ));
        // Logged above; librdmacm's errno is EBUSY (the kind maps to none).
        set_errno(libc::EBUSY);
        return -1;
    }
    // SAFETY: [in] hints: NULL or readable.
    let flags = unsafe { hints.as_ref() }.map_or(0, |h| h.ai_flags);
    if flags & RAI_SA != 0 {
        let what = if flags & RAI_DNS != 0 {
            "RAI_SA and RAI_DNS together"
        } else {
            "RAI_SA: resolution through the InfiniBand SA (RESOLVE_IB_SERVICE) needs an \
             InfiniBand port (rxe and siw have none) and is not supported"
        };
        return ret(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("rdma_resolve_addrinfo: {what}"),
        )));
    }
    // The id is marked busy and unlocked while the name resolves (DNS may take seconds), as
    // librdmacm resolves without its mutex: the id's other calls (its events, its destroy)
    // need not wait for it.
    c.addrinfo.busy = true;
    drop(c);
    let mut ai = null_mut();
    // SAFETY: [str] node and service; [in] hints; ai is writable.
    let failed = unsafe { rdma_getaddrinfo(node, service, hints, &mut ai) } != 0;
    let mut c = cc.lock();
    c.addrinfo.busy = false;
    if failed {
        return -1; // errno is rdma_getaddrinfo's (`lock` sets none)
    }
    let answer = Resolving { busy: true, ai };
    let sync = match c.id() {
        Ok(i) => i.is_sync(),
        Err(e) => return ret(Err(e)),
    };
    let written = c
        .id()
        .and_then(|i| i.write_internal_event(0, u64::from(EVENT_ADDRINFO_RESOLVED)));
    if let Err(e) = written {
        // `answer` is dropped: its list is freed, the id stays as it was.
        return ret(Err(e));
    }
    c.addrinfo = answer;
    if sync {
        // As librdmacm's ucma_complete: the event is read before returning.
        let r = c
            .id()
            .and_then(|i| i.get_event(None))
            .and_then(|ev| match ev {
                Some(ev)
                    if ev.kind().0 == EVENT_INTERNAL
                        && ev.arg() == Some(u64::from(EVENT_ADDRINFO_RESOLVED)) =>
                {
                    Ok(())
                }
                Some(ev) => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "rdma_resolve_addrinfo: the synchronous id read {} instead of its \
                     resolution",
                        ev.kind()
                    ),
                )),
                None => Err(einval("rdma_resolve_addrinfo: no event")),
            });
        if let Err(e) = r {
            c.addrinfo = Resolving::default();
            return ret(Err(e));
        }
    }
    0
}

symver!(rdma_query_addrinfo => "RDMACM_1.4");
/// `rdma_query_addrinfo` (rdma-core 60): hands over the answer of the id's
/// [`rdma_resolve_addrinfo`] (free it with [`rdma_freeaddrinfo`]) and ends the resolution.
/// 0, or -1 and `errno`: `EINVAL` for NULL arguments, `ENOENT` when there is no answer (no
/// resolution, or it was taken already).
///
/// # Safety
/// `id` is ours; `info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_query_addrinfo(
    id: *mut rdma_cm_id,
    info: *mut *mut rdma_addrinfo,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    if info.is_null() {
        return ret(Err(einval("rdma_query_addrinfo: NULL info pointer")));
    }
    if !c.addrinfo.busy || c.addrinfo.ai.is_null() {
        return ret(Err(io::Error::new(
            io::ErrorKind::NotFound,
            "rdma_query_addrinfo: no resolved address information on the id \
             (rdma_resolve_addrinfo first; an answer is given once)",
        )));
    }
    let ai = std::mem::replace(&mut c.addrinfo.ai, null_mut());
    c.addrinfo.busy = false;
    // SAFETY: [out] info (non-NULL, checked above).
    unsafe { *info = ai };
    0
}

/// What [`rdma_get_cm_event`] reports for an INTERNAL event: librdmacm's own, of which only
/// `rdma_resolve_addrinfo`'s (carrying `RDMA_CM_EVENT_ADDRINFO_RESOLVED`) exists; another is
/// `EBADE`, as librdmacm answers.
pub(super) fn internal_event(arg: Option<u64>) -> io::Result<u32> {
    match arg {
        Some(a) if a == u64::from(EVENT_ADDRINFO_RESOLVED) => Ok(EVENT_ADDRINFO_RESOLVED),
        _ => Err(io::Error::from_raw_os_error(libc::EBADE)),
    }
}
