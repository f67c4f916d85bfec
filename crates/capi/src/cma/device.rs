//! Devices for rdma_cm ids: one context and one default PD per node GUID, and
//! `rdma_get_devices`.

use super::*;

struct Dev {
    guid: u64,
    ctx: usize,
    pd: usize,
}

static DEVS: Mutex<Vec<Dev>> = Mutex::new(Vec::new());

/// The context (opened once) of the device with node GUID `guid` (host order).
pub(super) fn device_for(guid: u64) -> io::Result<*mut ibv_context> {
    let mut devs = DEVS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = devs.iter().find(|d| d.guid == guid) {
        return Ok(d.ctx as *mut ibv_context);
    }
    // SAFETY: NULL count is allowed; the list is freed below, its devices live forever.
    let list = unsafe { ibverbs::ibv_get_device_list(null_mut()) };
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
        if unsafe { ibverbs::ibv_get_device_guid(d) } == guid.to_be() {
            found = d;
            break;
        }
        i += 1;
    }
    let ctx = if found.is_null() {
        null_mut()
    } else {
        // SAFETY: [object] found, from ibv_get_device_list.
        unsafe { ibverbs::ibv_open_device(found) }
    };
    // SAFETY: from ibv_get_device_list.
    unsafe { ibverbs::ibv_free_device_list(list) };
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
pub(super) fn default_pd(ctx: *mut ibv_context) -> io::Result<*mut ibv_pd> {
    let mut devs = DEVS.lock().unwrap_or_else(|p| p.into_inner());
    let d = devs
        .iter_mut()
        .find(|d| d.ctx == ctx as usize)
        .ok_or_else(|| einval("rdma_cm: the id's context is not one the rdma_cm opened"))?;
    if d.pd == 0 {
        // SAFETY: [object] ctx, opened here and never closed.
        let pd = unsafe { ibverbs::ibv_alloc_pd(ctx) };
        if pd.is_null() {
            return Err(io::Error::last_os_error());
        }
        d.pd = pd as usize;
    }
    Ok(d.pd as *mut ibv_pd)
}

symver!(rdma_get_devices => "RDMACM_1.0");
/// `rdma_get_devices`: a NULL-terminated array of every device's context (opened once, kept
/// open); free it with [`rdma_free_devices`].
///
/// # Safety
/// `num_devices` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let mut n: c_int = 0;
    // SAFETY: n is writable.
    let list = unsafe { ibverbs::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return null_mut();
    }
    let mut ctxs = Vec::new();
    for i in 0..n as usize {
        // SAFETY: n entries.
        let d = unsafe { *list.add(i) };
        // SAFETY: one of ours.
        let guid = u64::from_be(unsafe { ibverbs::ibv_get_device_guid(d) });
        if let Ok(c) = device_for(guid) {
            ctxs.push(c);
        }
    }
    // SAFETY: from ibv_get_device_list.
    unsafe { ibverbs::ibv_free_device_list(list) };
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

symver!(rdma_free_devices => "RDMACM_1.0");
/// `rdma_free_devices`.
///
/// # Safety
/// `list` came from [`rdma_get_devices`].
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: [destroy] list: calloc'ed by rdma_get_devices.
    unsafe { libc::free(list.cast()) };
}
