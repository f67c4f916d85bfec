//! Devices: the device list, names, GUIDs and indexes (`ibv_device`).

use super::*;

/// An `ibv_device` and the rverbs device behind it. Devices live until the process ends
/// (libibverbs too keeps them while any list or context refers to them).
#[repr(C)]
pub struct CDevice {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_device>,
    /// NULL where rdma-core's `struct verbs_device` keeps its provider's ops pointer: the
    /// `mlx5dv_*`/`efadv_*` functions of rdma-core's provider libraries compare it with their
    /// own and so see that a device of ours is not theirs.
    pub provider_ops: *const c_void,
    /// The sysfs device.
    pub dev: Device,
}

from_c!(CDevice => ibv_device, "ibv_device");

struct DevPtr(*mut CDevice);
// SAFETY: the pointee is immutable after creation and never freed; Device is Send + Sync.
unsafe impl Send for DevPtr {}

static DEVICES: Mutex<Vec<DevPtr>> = Mutex::new(Vec::new());

pub(crate) fn new_device(dev: Device) -> *mut CDevice {
    // SAFETY: ibv_device is plain data (integers, arrays, fn pointers); all-zero is valid.
    let mut c: ibv_device = unsafe { std::mem::zeroed() };
    c.node_type = dev.node_type().0 as c_int;
    c.transport_type = dev.transport().0;
    copy_cstr(&mut c.name, dev.name());
    let uv = format!("uverbs{}", dev.uverbs_index());
    copy_cstr(&mut c.dev_name, &uv);
    copy_cstr(
        &mut c.dev_path,
        &format!("/sys/class/infiniband_verbs/{uv}"),
    );
    copy_cstr(&mut c.ibdev_path, &dev.ibdev_path().to_string_lossy());
    Box::into_raw(Box::new(CDevice {
        c: UnsafeCell::new(c),
        provider_ops: ptr::null(),
        dev,
    }))
}

symver!(ibv_get_device_list => "IBVERBS_1.1");
/// `ibv_get_device_list`: a NULL-terminated array of the RDMA devices (free it with
/// [`ibv_free_device_list`]). NULL and `errno` when the device scan fails.
///
/// # Safety
/// `num_devices` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let devs = match rverbs_uverbs::device::devices() {
        Ok(d) => d,
        // Like libibverbs: ENOSYS when the kernel has no uverbs support at all.
        Err(_) if !std::path::Path::new("/sys/class/infiniband_verbs").exists() => {
            set_errno(libc::ENOSYS);
            return null_mut();
        }
        Err(e) => return null_with(&e),
    };
    let mut known = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    let mut out: Vec<*mut ibv_device> = Vec::with_capacity(devs.len() + 1);
    for d in devs {
        // SAFETY: entries of DEVICES are live CDevices (never freed).
        let found = known.iter().find(|p| unsafe {
            (*p.0).dev.name() == d.name() && (*p.0).dev.uverbs_index() == d.uverbs_index()
        });
        let p = match found {
            Some(p) => p.0,
            None => {
                let p = new_device(d);
                known.push(DevPtr(p));
                p
            }
        };
        out.push(p.cast());
    }
    let n = out.len();
    out.push(null_mut());
    // The list is malloc'ed so that its length need not be remembered: free() takes it back.
    // SAFETY: calloc of n+1 pointers; checked for NULL below.
    let list =
        unsafe { libc::calloc(n + 1, size_of::<*mut ibv_device>()) }.cast::<*mut ibv_device>();
    if list.is_null() {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    // SAFETY: list has room for n+1 pointers; out has n+1.
    unsafe { ptr::copy_nonoverlapping(out.as_ptr(), list, n + 1) };
    if !num_devices.is_null() {
        // SAFETY: [out] num_devices (non-NULL).
        unsafe { *num_devices = n as c_int };
    }
    list
}

symver!(ibv_free_device_list => "IBVERBS_1.1");
/// `ibv_free_device_list`.
///
/// # Safety
/// `list` came from [`ibv_get_device_list`] (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: [destroy] list: calloc'ed by ibv_get_device_list; the devices stay alive.
    unsafe { libc::free(list.cast()) };
}

symver!(ibv_get_device_name => "IBVERBS_1.1");
/// `ibv_get_device_name`.
///
/// # Safety
/// `device` is NULL or one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    if device.is_null() {
        return ptr::null();
    }
    // SAFETY: [object] device (never freed); the name is NUL-terminated ([c-struct]: a raw
    // pointer into the C structure, no reference).
    unsafe { (&raw const (*device).name).cast() }
}

symver!(ibv_get_device_guid => "IBVERBS_1.1");
/// `ibv_get_device_guid`: the node GUID, big-endian.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    // SAFETY: [object] device.
    match unsafe { CDevice::from_c(device) } {
        Some(d) => d.dev.node_guid().to_be(),
        None => {
            set_errno(libc::EINVAL);
            0
        }
    }
}

symver!(ibv_get_device_index => "IBVERBS_1.9");
/// `ibv_get_device_index`: the kernel's device index, -1 when unknown.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    // SAFETY: [object] device.
    let d = obj!(unsafe { CDevice::from_c(device) }, neg);
    d.dev.netlink_index().map_or(-1, |i| i as c_int)
}
