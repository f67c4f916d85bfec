//! The exported `ibv_*` functions and the ops-table entries behind the inline functions of
//! `verbs.h`.
//!
//! Every C object is the first field (`repr(C)`) of the Rust object that owns the rverbs
//! object behind it ([`CDevice`], [`CContext`], [`CPd`], …), allocated with `Box` and handed
//! to C as a pointer to that first field; the destroy call turns it back into the `Box`.
//! Functions taking these pointers are `unsafe extern "C"`: the caller (C) promises they came
//! from this library and are still alive, as libibverbs' callers do — the crate root's
//! *Safety vocabulary* names these contracts (\[object\], \[destroy\], \[c-struct\], …).
//! The owners are reached only through shared references; a NULL object pointer is refused
//! with `EINVAL`.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::{self, null_mut};
use std::sync::{Arc, Mutex, OnceLock};

use rverbs_uverbs::ah::{Ah, AhAttr, GlobalRoute};
use rverbs_uverbs::channel::CompChannel;
use rverbs_uverbs::context::Context;
use rverbs_uverbs::cq::{Cq, CqOptions};
use rverbs_uverbs::device::Device;
use rverbs_uverbs::gid::GidType;
use rverbs_uverbs::mr::{register_raw, AccessFlags, RawMr};
use rverbs_uverbs::pd::Pd;
use rverbs_uverbs::port::Mtu;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::{Qp, QpAttr, QpAttrMask, QpInit, QpState, QpType};
use rverbs_uverbs::srq::{Srq, SrqAttr};
use rverbs_uverbs::{
    Error, RawWc, RecvWr, SendFlags, SendOp, SendWr, Sge, WcFlags, WorkCompletion,
};

use crate::abi::*;
use crate::events::{add_to_c_counter, EventCount};

// ---------------------------------------------------------------------------------------
// errno and diagnostics

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot (glibc and musl).
    unsafe { *libc::__errno_location() = e };
}

/// The errno an rverbs error stands for: the kernel's when it gave one, else one chosen from
/// the error's kind (bad argument `EINVAL`, not found `ENOENT`, unsupported `EOPNOTSUPP`).
pub fn errno_of(e: &io::Error) -> c_int {
    if let Some(n) = Error::errno_of(e) {
        return n.raw_os_error();
    }
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::Unsupported => libc::EOPNOTSUPP,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        _ => libc::EINVAL,
    }
}

/// Reports `e` on stderr when `RVERBS_CAPI_LOG` is set (libibverbs' callers see only the
/// errno; the message says which object and operation failed) and returns its errno.
pub(crate) fn fail(e: &io::Error) -> c_int {
    if std::env::var_os("RVERBS_CAPI_LOG").is_some() {
        eprintln!("rverbs libibverbs: {e}");
    }
    errno_of(e)
}

/// A NULL object pointer where `what` was expected: logged as [`fail`] logs; `EINVAL`.
#[cold]
#[inline(never)]
pub(crate) fn null_arg(what: &str) -> c_int {
    fail(&io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("NULL {what} pointer"),
    ))
}

/// The owner `O` of the C object `p` points at, or `None` (logged) for NULL.
///
/// # Safety
/// `p` is NULL or an \[object\] pointer whose owner type is `O` (\[owner\]), alive for `'a`.
#[inline(always)]
pub(crate) unsafe fn owner<'a, C, O>(p: *mut C, what: &str) -> Option<&'a O> {
    if p.is_null() {
        null_arg(what);
        return None;
    }
    // SAFETY: [object] p is a live object of ours, not destroyed during the call; [owner] its
    // C object is the first field of a repr(C) O, so the cast points at that O. Only a shared
    // reference: other threads may use the object too, and its C part is an UnsafeCell
    // ([c-struct]).
    Some(unsafe { &*p.cast::<O>() })
}

/// Runs `f`, which writes fields of C-visible structures after their object's creation,
/// while no other thread of this library does (\[c-struct\]: C's own reads of those fields
/// are C's business, as with libibverbs; ours do not race among themselves).
pub(crate) fn c_write<R>(f: impl FnOnce() -> R) -> R {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    f()
}

/// NULL with `errno` set: how constructors fail.
fn null_with<T>(e: &io::Error) -> *mut T {
    set_errno(fail(e));
    null_mut()
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

// ---------------------------------------------------------------------------------------
// Devices

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

/// `ibv_free_device_list`.
///
/// # Safety
/// `list` came from [`ibv_get_device_list`] (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: [destroy] list: calloc'ed by ibv_get_device_list; the devices stay alive.
    unsafe { libc::free(list.cast()) };
}

/// # Safety
/// `d` is NULL or an \[object\] device pointer (devices are never freed).
unsafe fn cdev<'a>(d: *mut ibv_device) -> Option<&'a CDevice> {
    // SAFETY: [object] d, a CDevice's first field ([owner]).
    unsafe { owner(d, "ibv_device") }
}

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

/// `ibv_get_device_guid`: the node GUID, big-endian.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    // SAFETY: [object] device.
    match unsafe { cdev(device) } {
        Some(d) => d.dev.node_guid().to_be(),
        None => {
            set_errno(libc::EINVAL);
            0
        }
    }
}

/// `ibv_get_device_index`: the kernel's device index, -1 when unknown.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    // SAFETY: [object] device.
    let d = obj!(unsafe { cdev(device) }, neg);
    d.dev.netlink_index().map_or(-1, |i| i as c_int)
}

// ---------------------------------------------------------------------------------------
// Contexts

/// An opened device: the `verbs_context` (with the `ibv_context` at its end) and the rverbs
/// context.
#[repr(C)]
pub struct CContext {
    /// What C sees (through `vctx.context`; \[c-struct\]).
    pub vctx: UnsafeCell<verbs_context>,
    /// The rverbs context.
    pub ctx: Arc<Context>,
}

/// The [`CContext`] whose `ibv_context` `c` points at (NULL stays recognisable).
fn ctx_owner(c: *mut ibv_context) -> *mut CContext {
    let off = offset_of!(CContext, vctx) + offset_of!(verbs_context, context);
    // The ibv_context sits `off` bytes into its CContext ([owner]: the verbs_context is its
    // first field); wrapping_byte_sub computes the address without dereferencing anything.
    c.wrapping_byte_sub(off).cast()
}

/// # Safety
/// `c` is NULL or an \[object\] context pointer.
pub(crate) unsafe fn cctx<'a>(c: *mut ibv_context) -> Option<&'a CContext> {
    if c.is_null() {
        null_arg("ibv_context");
        return None;
    }
    // SAFETY: [object] c: a live CContext ([owner], see ctx_owner); shared reference only.
    Some(unsafe { &*ctx_owner(c) })
}

/// `ibv_open_device`.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    // SAFETY: [object] device.
    let d = obj!(unsafe { cdev(device) }, null);
    let ctx = match rverbs_provider::open(&d.dev) {
        Ok(c) => c,
        Err(e) => return null_with(&e),
    };
    // rverbs opens the async fd non-blocking; libibverbs' blocks until the caller sets
    // O_NONBLOCK itself, which ibv_get_async_event reads to decide whether to wait.
    let blocking = rustix::fs::fcntl_getfl(ctx.async_fd())
        .and_then(|f| rustix::fs::fcntl_setfl(ctx.async_fd(), f - rustix::fs::OFlags::NONBLOCK));
    if let Err(e) = blocking {
        return null_with(&io::Error::from(e));
    }
    // SAFETY: verbs_context is integers, raw and fn pointers (Option) and a pthread mutex
    // whose all-zero pattern is PTHREAD_MUTEX_INITIALIZER: all-zero is a valid value.
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    vctx.query_port = Some(query_port_op);
    vctx.query_device_ex = Some(query_device_ex_op);
    vctx.create_qp_ex = Some(crate::qp_ex::create_qp_ex_op);
    vctx.create_cq_ex = Some(crate::cq_ex::create_cq_ex_op);
    vctx.sz = size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = device;
    c.ops.poll_cq = Some(poll_cq_op);
    c.ops.req_notify_cq = Some(req_notify_cq_op);
    c.ops.post_send = Some(post_send_op);
    c.ops.post_recv = Some(post_recv_op);
    c.ops.post_srq_recv = Some(post_srq_recv_op);
    c.ops.alloc_mw = Some(crate::mw::alloc_mw_op);
    c.ops.bind_mw = Some(crate::mw::bind_mw_op);
    c.ops.dealloc_mw = Some(crate::mw::dealloc_mw_op);
    c.cmd_fd = ctx.cmd_fd().as_raw_fd();
    c.async_fd = ctx.async_fd().as_raw_fd();
    c.num_comp_vectors = ctx.num_comp_vectors() as c_int;
    c.abi_compat = VERBS_ABI_IS_EXTENDED;
    let b = Box::into_raw(Box::new(CContext {
        vctx: UnsafeCell::new(vctx),
        ctx,
    }));
    // SAFETY: b is a fresh, valid allocation.
    unsafe { &raw mut (*(*b).vctx.get()).context }
}

/// `ibv_close_device`: 0. Objects still open on the context keep the kernel context alive
/// until they are destroyed (rverbs objects hold their parents).
///
/// # Safety
/// `context` came from [`ibv_open_device`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    if context.is_null() {
        return null_arg("ibv_context");
    }
    // SAFETY: [destroy] context: the CContext boxed by ibv_open_device ([owner]).
    drop(unsafe { Box::from_raw(ctx_owner(context)) });
    0
}

/// `ibv_query_device`: positive errno on failure.
///
/// # Safety
/// `context` is ours; `attr` is writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, errno);
    match c.ctx.query_device() {
        Ok(a) => {
            // SAFETY: [out] attr.
            unsafe { attr.write(device_attr(&a)) };
            0
        }
        Err(e) => fail(&e),
    }
}

fn device_attr(a: &rverbs_uverbs::device_attr::DeviceAttr) -> ibv_device_attr {
    // SAFETY: plain integers and a char array: all-zero is valid.
    let mut o: ibv_device_attr = unsafe { std::mem::zeroed() };
    copy_cstr(&mut o.fw_ver, &a.fw_ver);
    o.node_guid = a.node_guid.to_be();
    o.sys_image_guid = a.sys_image_guid.to_be();
    o.max_mr_size = a.max_mr_size;
    o.page_size_cap = a.page_size_cap;
    o.vendor_id = a.vendor_id;
    o.vendor_part_id = a.vendor_part_id;
    o.hw_ver = a.hw_ver;
    let i = |v: u32| v as c_int;
    o.max_qp = i(a.max_qp);
    o.max_qp_wr = i(a.max_qp_wr);
    o.device_cap_flags = a.device_cap_flags;
    o.max_sge = i(a.max_sge);
    o.max_sge_rd = i(a.max_sge_rd);
    o.max_cq = i(a.max_cq);
    o.max_cqe = i(a.max_cqe);
    o.max_mr = i(a.max_mr);
    o.max_pd = i(a.max_pd);
    o.max_qp_rd_atom = i(a.max_qp_rd_atom);
    o.max_ee_rd_atom = i(a.max_ee_rd_atom);
    o.max_res_rd_atom = i(a.max_res_rd_atom);
    o.max_qp_init_rd_atom = i(a.max_qp_init_rd_atom);
    o.max_ee_init_rd_atom = i(a.max_ee_init_rd_atom);
    o.atomic_cap = a.atomic_cap.0;
    o.max_ee = i(a.max_ee);
    o.max_rdd = i(a.max_rdd);
    o.max_mw = i(a.max_mw);
    o.max_raw_ipv6_qp = i(a.max_raw_ipv6_qp);
    o.max_raw_ethy_qp = i(a.max_raw_ethy_qp);
    o.max_mcast_grp = i(a.max_mcast_grp);
    o.max_mcast_qp_attach = i(a.max_mcast_qp_attach);
    o.max_total_mcast_qp_attach = i(a.max_total_mcast_qp_attach);
    o.max_ah = i(a.max_ah);
    o.max_fmr = i(a.max_fmr);
    o.max_map_per_fmr = i(a.max_map_per_fmr);
    o.max_srq = i(a.max_srq);
    o.max_srq_wr = i(a.max_srq_wr);
    o.max_srq_sge = i(a.max_srq_sge);
    o.max_pkeys = a.max_pkeys;
    o.local_ca_ack_delay = a.local_ca_ack_delay;
    o.phys_port_cnt = a.phys_port_cnt;
    o
}

/// `verbs_context.query_device_ex`: fills the first `attr_size` bytes.
unsafe extern "C" fn query_device_ex_op(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: [in] input (NULL allowed).
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, errno);
    let a = match c.ctx.query_device() {
        Ok(a) => a,
        Err(e) => return fail(&e),
    };
    // SAFETY: plain integers: all-zero is valid.
    let mut o: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    o.orig_attr = device_attr(&a);
    o.odp_caps = ibv_odp_caps {
        general_caps: a.odp_caps.general_caps,
        rc_odp_caps: a.odp_caps.rc_odp_caps,
        uc_odp_caps: a.odp_caps.uc_odp_caps,
        ud_odp_caps: a.odp_caps.ud_odp_caps,
    };
    o.xrc_odp_caps = a.odp_caps.xrc_odp_caps;
    o.completion_timestamp_mask = a.completion_timestamp_mask;
    o.hca_core_clock = a.hca_core_clock;
    o.device_cap_flags_ex = a.device_cap_flags_ex;
    o.rss_caps.supported_qpts = a.rss_caps.supported_qpts;
    o.rss_caps.max_rwq_indirection_tables = a.rss_caps.max_rwq_indirection_tables;
    o.rss_caps.max_rwq_indirection_table_size = a.rss_caps.max_rwq_indirection_table_size;
    o.max_wq_type_rq = a.max_wq_type_rq;
    o.raw_packet_caps = a.raw_packet_caps;
    o.tm_caps = ibv_tm_caps {
        max_rndv_hdr_size: a.tm_caps.max_rndv_hdr_size,
        max_num_tags: a.tm_caps.max_num_tags,
        flags: a.tm_caps.flags,
        max_ops: a.tm_caps.max_ops,
        max_sge: a.tm_caps.max_sge,
    };
    o.cq_mod_caps = ibv_cq_moderation_caps {
        max_cq_count: a.cq_mod_caps.max_cq_count,
        max_cq_period: a.cq_mod_caps.max_cq_period,
    };
    o.max_dm_size = a.max_dm_size;
    o.phys_port_cnt_ex = u32::from(a.phys_port_cnt);
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: [buf] the caller gave attr_size writable bytes; we copy at most that many.
    unsafe { ptr::copy_nonoverlapping((&raw const o).cast::<u8>(), attr.cast::<u8>(), n) };
    0
}

fn port_attr(p: &rverbs_uverbs::port::PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: u32::from(p.state.0),
        max_mtu: u32::from(p.max_mtu.0),
        active_mtu: u32::from(p.active_mtu.0),
        gid_tbl_len: p.gid_tbl_len as c_int,
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: p.init_type_reply,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state.0,
        link_layer: p.link_layer.0,
        flags: p.flags,
        port_cap_flags2: p.port_cap_flags2,
    }
}

/// Writes the first `len` bytes of port `port`'s attributes to `out`.
///
/// # Safety
/// `context` is ours; `out` has `len` writable bytes.
unsafe fn query_port_into(context: *mut ibv_context, port: u8, out: *mut u8, len: usize) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, errno);
    match c.ctx.query_port(u32::from(port)) {
        Ok(p) => {
            let a = port_attr(&p);
            let n = len.min(size_of::<ibv_port_attr>());
            // SAFETY: [buf] out has len writable bytes; at most len are written.
            unsafe { ptr::copy_nonoverlapping((&raw const a).cast::<u8>(), out, n) };
            0
        }
        Err(e) => fail(&e),
    }
}

/// `verbs_context.query_port` (what the inline `ibv_query_port` calls).
unsafe extern "C" fn query_port_op(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: [object] context; [buf] len writable bytes at attr.
    unsafe { query_port_into(context, port, attr.cast(), len) }
}

/// `ibv_query_port@IBVERBS_1.1`: the exported form, which fills the older, shorter
/// `struct _compat_ibv_port_attr` (no `port_cap_flags2`).
///
/// # Safety
/// `context` is ours; `attr` points to at least that compat struct.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: [object] context; [out] attr (the compat struct's size).
    unsafe { query_port_into(context, port, attr.cast(), COMPAT_PORT_ATTR_SIZE) }
}

/// `ibv_query_gid`: 0, or -1 with errno; an empty slot reads as the zero GID.
///
/// # Safety
/// `context` is ours; `gid` has 16 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, neg);
    if index < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    match c.ctx.query_gid(u32::from(port), index as u32) {
        Ok(g) => {
            // SAFETY: [out] gid.
            unsafe { gid.write(g.gid.0) };
            0
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && in_table(c, port, index) => {
            // SAFETY: [out] gid.
            unsafe { gid.write([0; 16]) };
            0
        }
        Err(e) => {
            set_errno(fail(&e));
            -1
        }
    }
}

fn in_table(c: &CContext, port: u8, index: c_int) -> bool {
    c.ctx
        .query_port(u32::from(port))
        .is_ok_and(|p| (index as u32) < p.gid_tbl_len)
}

/// `ibv_query_gid_type` (IBVERBS_PRIVATE): `IBV_GID_TYPE_SYSFS_IB_ROCE_V1` (0) or
/// `IBV_GID_TYPE_SYSFS_ROCE_V2` (1); -1 with errno for an empty or bad slot.
///
/// # Safety
/// `context` is ours; `ty` is writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, neg);
    match c.ctx.query_gid(u32::from(port), index) {
        Ok(g) => {
            let v = if g.gid_type == GidType::ROCE_V2 { 1 } else { 0 };
            // SAFETY: [out] ty.
            unsafe { ty.write(v) };
            0
        }
        Err(e) => {
            set_errno(fail(&e));
            -1
        }
    }
}

/// `ibv_query_pkey`: P_Key `index` of `port` (big-endian) from sysfs; 0 or -1.
///
/// # Safety
/// `context` is ours; `pkey` is writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, neg);
    let path = c
        .ctx
        .device()
        .ibdev_path()
        .join(format!("ports/{port}/pkeys/{index}"));
    let v = std::fs::read_to_string(&path)
        .ok()
        .and_then(|s| u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok());
    match v {
        Some(v) => {
            // SAFETY: [out] pkey.
            unsafe { pkey.write(v.to_be()) };
            0
        }
        None => {
            set_errno(libc::EINVAL);
            -1
        }
    }
}

/// `ibv_read_sysfs_file(dir, file, buf, size)`: reads `dir/file` into `buf` (NUL-terminated,
/// a trailing newline removed); returns the length, or -1.
///
/// # Safety
/// `dir` and `file` are C strings; `buf` has `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    // SAFETY: [str] dir and file.
    let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(d.to_bytes()))
        .join(std::ffi::OsStr::from_bytes(f.to_bytes()));
    let mut data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) => {
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return -1;
        }
    };
    if size == 0 {
        return 0;
    }
    data.truncate(size - 1);
    if data.last() == Some(&b'\n') {
        data.pop();
    }
    // SAFETY: [buf] data.len() < size bytes plus the NUL fit in buf.
    unsafe {
        ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
        *buf.add(data.len()) = 0;
    }
    data.len() as c_int
}

// ---------------------------------------------------------------------------------------
// PD, MR

/// An `ibv_pd` and its rverbs PD.
#[repr(C)]
pub struct CPd {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_pd>,
    /// The rverbs PD.
    pub pd: Arc<Pd>,
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `context` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, null);
    match Pd::alloc(&c.ctx) {
        Ok(pd) => {
            let b = Box::new(CPd {
                c: UnsafeCell::new(ibv_pd {
                    context,
                    handle: pd.handle(),
                }),
                pd,
            });
            Box::into_raw(b).cast()
        }
        Err(e) => null_with(&e),
    }
}

/// # Safety
/// `pd` is NULL or an \[object\] PD pointer.
pub(crate) unsafe fn cpd<'a>(pd: *mut ibv_pd) -> Option<&'a CPd> {
    // SAFETY: [object] pd, the first field of its CPd ([owner]).
    unsafe { owner(pd, "ibv_pd") }
}

impl CPd {
    /// The context C sees in `ibv_pd.context` (set at creation).
    pub(crate) fn context(&self) -> *mut ibv_context {
        // SAFETY: [c-struct] a read through the raw pointer, no reference.
        unsafe { (*self.c.get()).context }
    }
}

/// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs, SRQs or AHs still use it.
///
/// # Safety
/// `pd` came from [`ibv_alloc_pd`]; on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: [destroy] pd.
    let p = obj!(unsafe { cpd(pd) }, errno);
    if Arc::strong_count(&p.pd) > 1 {
        return libc::EBUSY;
    }
    // SAFETY: [destroy] pd: boxed by ibv_alloc_pd ([owner]); `p` is not used any more.
    drop(unsafe { Box::from_raw(pd.cast::<CPd>()) });
    0
}

/// An `ibv_mr` and the registration behind it.
#[repr(C)]
pub struct CMr {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_mr>,
    /// The registration (deregistered on drop).
    pub mr: RawMr,
}

/// `IBV_ACCESS_OPTIONAL_RANGE`: access bits a device may ignore.
const ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

/// `ibv_reg_mr`.
///
/// # Safety
/// `pd` is ours; `addr..addr+length` is memory of the caller that stays mapped while the MR
/// lives (the device reads and writes it).
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded: [object] pd, [registered] addr..addr+length.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint) }
}

/// `ibv_reg_mr_iova`: only `iova == addr` is supported (`EOPNOTSUPP` otherwise).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded: [object] pd, [registered] addr..addr+length.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

/// `ibv_reg_mr_iova2`: only `iova == addr` is supported (`EOPNOTSUPP` otherwise).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { cpd(pd) }, null);
    if iova != addr as u64 {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let access = AccessFlags::from_bits_retain(access & !ACCESS_OPTIONAL_RANGE);
    // SAFETY: [registered] the caller keeps the range mapped while the MR lives (ibv_reg_mr's contract).
    match unsafe { register_raw(&p.pd, addr as u64, length, access) } {
        Ok(mr) => {
            let b = Box::new(CMr {
                c: UnsafeCell::new(ibv_mr {
                    context: p.context(),
                    pd,
                    addr,
                    length,
                    handle: 0,
                    lkey: mr.lkey,
                    rkey: mr.rkey,
                }),
                mr,
            });
            Box::into_raw(b).cast()
        }
        Err(e) => null_with(&e),
    }
}

/// `ibv_dereg_mr`: fails (EINVAL, the region kept) while a memory window is bound in it.
///
/// # Safety
/// `mr` came from [`ibv_reg_mr`] and is not used afterwards unless this fails.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return null_arg("ibv_mr");
    }
    let p = mr as *mut CMr;
    // SAFETY: [destroy] mr: boxed by ibv_reg_mr_iova2 ([owner]); the registration is moved out and either consumed
    // (then the box is freed without dropping it again) or written back.
    let raw = unsafe { std::ptr::read(&raw const (*p).mr) };
    match raw.deregister() {
        Ok(()) => {
            // SAFETY: ManuallyDrop<CMr> has CMr's layout; its moved-out field is not dropped.
            drop(unsafe { Box::from_raw(p.cast::<std::mem::ManuallyDrop<CMr>>()) });
            0
        }
        Err((raw, e)) => {
            // Still registered (a memory window is bound in it, EINVAL as on rdma-core): the
            // caller keeps the region.
            // SAFETY: the slot read above, still allocated.
            unsafe { std::ptr::write(&raw mut (*p).mr, raw) };
            fail(&e)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Completion channels, CQs

/// An `ibv_comp_channel` and its rverbs channel.
#[repr(C)]
pub struct CChannel {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_comp_channel>,
    /// The rverbs channel.
    pub ch: Arc<CompChannel>,
}

/// # Safety
/// `ch` is NULL or an \[object\] completion channel pointer.
pub(crate) unsafe fn cchannel<'a>(ch: *mut ibv_comp_channel) -> Option<&'a CChannel> {
    // SAFETY: [object] ch, the first field of its CChannel ([owner]).
    unsafe { owner(ch, "ibv_comp_channel") }
}

/// `ibv_create_comp_channel`. Its fd blocks, as libibverbs' does (a caller may make it
/// non-blocking with `fcntl`).
///
/// # Safety
/// `context` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, null);
    let ch = match CompChannel::create(&c.ctx).and_then(|ch| ch.set_blocking(true).map(|()| ch)) {
        Ok(ch) => ch,
        Err(e) => return null_with(&e),
    };
    let b = Box::new(CChannel {
        c: UnsafeCell::new(ibv_comp_channel {
            context,
            fd: ch.as_fd().as_raw_fd(),
            refcnt: 0,
        }),
        ch,
    });
    Box::into_raw(b).cast()
}

/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it.
///
/// # Safety
/// `channel` came from [`ibv_create_comp_channel`]; on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    // SAFETY: [destroy] channel.
    let ch = obj!(unsafe { cchannel(channel) }, errno);
    if Arc::strong_count(&ch.ch) > 1 {
        return libc::EBUSY;
    }
    // SAFETY: [destroy] channel: boxed by ibv_create_comp_channel ([owner]).
    drop(unsafe { Box::from_raw(channel.cast::<CChannel>()) });
    0
}

/// An `ibv_cq` (room for an `ibv_cq_ex`, whose first fields are those of `ibv_cq`) and its
/// rverbs CQ.
#[repr(C)]
pub struct CCq {
    /// What C sees: an `ibv_cq`, or all of the `ibv_cq_ex` for a CQ made by
    /// `ibv_create_cq_ex` (\[c-struct\]).
    pub c: UnsafeCell<ibv_cq_ex>,
    /// The rverbs CQ.
    pub cq: Arc<Cq>,
    /// The extended CQ's polling state (`ibv_create_cq_ex` only, set once at creation).
    pub ex: OnceLock<Box<crate::cq_ex::CqEx>>,
    /// Completion and async events handed to C and acknowledged: destroy waits for them.
    events: EventCount,
}

impl CCq {
    /// The C structure (\[c-struct\]: for raw reads and writes only).
    pub(crate) fn c_ptr(&self) -> *mut ibv_cq_ex {
        self.c.get()
    }
}

struct CqPtr(*mut CCq);
// SAFETY: only used to find the CQ an event names, under CQS's lock ([registry]).
unsafe impl Send for CqPtr {}

/// Hashes a CQ's user handle for [`CQS`] with one multiplication. The handles are unique
/// integers handed out in sequence (never chosen by a peer), so std's default SipHash, which
/// guards against keys crafted to collide, cost `ibv_get_cq_event` about 150 instructions per
/// event for nothing. Multiplying by an odd constant permutes the low bits (the bucket index)
/// and spreads into the high ones (the table's tag bits).
#[derive(Default)]
struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; stay correct for any other input anyway.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type CqMap = HashMap<u64, CqPtr, std::hash::BuildHasherDefault<HandleHasher>>;

/// CQs by the user handle their completion and async events carry (\[registry\]: a CQ is in
/// it from creation until its destroy takes it out, before freeing it).
static CQS: Mutex<Option<CqMap>> = Mutex::new(None);

fn cqs() -> std::sync::MutexGuard<'static, Option<CqMap>> {
    CQS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The CQ with user handle `handle`, its event counted as handed to C; NULL when no CQ has
/// that handle (any more).
fn deliver_cq_event(handle: u64) -> *mut CCq {
    let m = cqs();
    let Some(p) = m.as_ref().and_then(|m| m.get(&handle)).map(|p| p.0) else {
        return null_mut();
    };
    // SAFETY: [registry] p is in CQS and we hold its lock: the CQ is alive.
    let c = unsafe { &*p };
    c.events.delivered();
    p
}

/// A C object's address, by the user handle the kernel's async events name it with.
struct Addr(usize);

/// QPs (key `(QP, handle)`) and SRQs (key `(SRQ, handle)`), for async events
/// (\[registry\]).
static OBJS: Mutex<Option<HashMap<(u8, u64), Addr>>> = Mutex::new(None);
const QP: u8 = 0;
const SRQ: u8 = 1;

fn objs() -> std::sync::MutexGuard<'static, Option<HashMap<(u8, u64), Addr>>> {
    OBJS.lock().unwrap_or_else(|p| p.into_inner())
}

fn register(kind: u8, handle: u64, p: usize) {
    objs()
        .get_or_insert_with(HashMap::new)
        .insert((kind, handle), Addr(p));
}

fn unregister(kind: u8, handle: u64) {
    if let Some(m) = objs().as_mut() {
        m.remove(&(kind, handle));
    }
}

/// The QP or SRQ `(kind, handle)` with an async event counted as handed to C (when
/// `count`); NULL when there is none.
fn deliver_async_event(kind: u8, handle: u64, count: bool) -> *mut c_void {
    let m = objs();
    let Some(a) = m.as_ref().and_then(|m| m.get(&(kind, handle))).map(|a| a.0) else {
        return null_mut();
    };
    if count {
        // SAFETY: [registry] the object is in OBJS and we hold its lock: alive; `kind` says
        // its owner type.
        let ev = unsafe {
            if kind == QP {
                &(*(a as *const CQp)).events
            } else {
                &(*(a as *const CSrq)).events
            }
        };
        ev.delivered();
    }
    a as *mut c_void
}

/// `ibv_create_cq`.
///
/// # Safety
/// `context` is an \[object\] context; `channel` is NULL or an \[object\] channel of this
/// context.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, null);
    if cqe < 0 || comp_vector < 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: [object] channel.
        Some(obj!(unsafe { cchannel(channel) }, null).ch.clone())
    };
    let opts = CqOptions {
        channel: ch,
        comp_vector: comp_vector as u32,
    };
    let cq = match Cq::create(&c.ctx, cqe as u32, opts) {
        Ok(cq) => cq,
        Err(e) => return null_with(&e),
    };
    if !channel.is_null() {
        // SAFETY: [object] channel; [c-struct] a raw write, serialised by c_write.
        c_write(|| unsafe { (*channel).refcnt += 1 });
    }
    // SAFETY: ibv_cq_ex is integers, pointers, NULL fn pointers (Option) and
    // zero-initialised pthread objects.
    let mut ic: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ic.context = context;
    ic.channel = channel;
    ic.cq_context = cq_context;
    ic.handle = cq.handle();
    ic.cqe = cq.cqe() as c_int;
    let handle = cq.user_handle();
    let p = Box::into_raw(Box::new(CCq {
        c: UnsafeCell::new(ic),
        cq,
        ex: OnceLock::new(),
        events: EventCount::default(),
    }));
    cqs()
        .get_or_insert_with(HashMap::default)
        .insert(handle, CqPtr(p));
    p.cast()
}

/// # Safety
/// `cq` is NULL or an \[object\] CQ pointer.
#[inline(always)]
pub(crate) unsafe fn ccq<'a>(cq: *mut ibv_cq) -> Option<&'a CCq> {
    // SAFETY: [object] cq, the first field of its CCq ([owner]).
    unsafe { owner(cq, "ibv_cq") }
}

/// `ibv_resize_cq`.
///
/// # Safety
/// `cq` is an \[object\] CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    if cqe <= 0 {
        return libc::EINVAL;
    }
    // SAFETY: [object] cq.
    let c = obj!(unsafe { ccq(cq) }, errno);
    match c.cq.resize(cqe as u32) {
        Ok(n) => {
            // SAFETY: [c-struct] a raw write, serialised by c_write.
            c_write(|| unsafe { (*c.c_ptr()).cqe = n as c_int });
            0
        }
        Err(e) => fail(&e),
    }
}

/// `ibv_destroy_cq`: `EBUSY` while a QP uses it. Waits until every completion and async
/// event delivered for the CQ was acknowledged (`ibv_ack_cq_events`,
/// `ibv_ack_async_event`), as libibverbs does.
///
/// # Safety
/// `cq` came from [`ibv_create_cq`] (\[destroy\]); on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: [destroy] cq.
    let c = obj!(unsafe { ccq(cq) }, errno);
    if Arc::strong_count(&c.cq) > 1 {
        return libc::EBUSY;
    }
    // Out of the registry first: no event is handed out for it afterwards ([registry]).
    if let Some(m) = cqs().as_mut() {
        m.remove(&c.cq.user_handle());
    }
    c.events.wait_acked();
    // SAFETY: [destroy] cq: boxed by ibv_create_cq ([owner]); `c` is not used any more.
    let b = unsafe { Box::from_raw(cq.cast::<CCq>()) };
    // SAFETY: [c-struct] a raw read of the channel we set at creation.
    let channel = unsafe { (*b.c.get()).channel };
    if !channel.is_null() {
        // SAFETY: the channel outlives its CQs (destroying it fails while they hold it);
        // [c-struct] a raw write, serialised by c_write.
        c_write(|| unsafe { (*channel).refcnt -= 1 });
    }
    drop(b);
    0
}

/// `ibv_get_cq_event`: reads one event from the channel (blocking unless the caller made
/// the fd non-blocking); 0, or -1 with errno. The CQ stays valid until the event is
/// acknowledged ([`ibv_ack_cq_events`]): destroying it waits for that.
///
/// # Safety
/// `channel` is an \[object\] channel; `cq` and `cq_context` are \[out\] pointers.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: [object] channel.
    let ch = obj!(unsafe { cchannel(channel) }, neg);
    if cq.is_null() || cq_context.is_null() {
        set_errno(null_arg("ibv_get_cq_event output"));
        return -1;
    }
    let p = loop {
        let mut buf = [0u8; 8];
        match rustix::io::read(ch.ch.as_fd(), &mut buf) {
            Ok(8) => {}
            Ok(_) => {
                set_errno(libc::EIO);
                return -1;
            }
            Err(e) => {
                set_errno(e.raw_os_error());
                return -1;
            }
        }
        let p = deliver_cq_event(u64::from_ne_bytes(buf));
        if !p.is_null() {
            break p;
        }
        // The event of a CQ being destroyed (out of the registry, not yet destroyed in the
        // kernel, which drops the events it still queues for it): skipped, as those are.
    };
    // SAFETY: the event was counted as delivered while the CQ was in the registry, so its
    // destroy waits for our caller's ack: the CQ is alive ([registry]).
    let c = unsafe { &*p };
    c.cq.event_received();
    // SAFETY: [out] cq and cq_context; [c-struct] a raw read of cq_context.
    unsafe {
        *cq = p.cast();
        *cq_context = (*c.c_ptr()).cq_context;
    }
    0
}

/// `ibv_ack_cq_events`: acknowledges `nevents` events of `cq` (a destroy waiting for them
/// returns once all are).
///
/// # Safety
/// `cq` is an \[object\] CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // SAFETY: [object] cq.
    let c = obj!(unsafe { ccq(cq) }, unit);
    c.cq.ack_events(nevents);
    // SAFETY: [c-struct] the field libibverbs counts in, an aligned u32 of the live CQ.
    unsafe { add_to_c_counter(&raw mut (*c.c_ptr()).comp_events_completed, nevents) };
    c.events.ack(nevents);
}

// `ibv_wc` is the kernel's `ib_uverbs_wc` (which `RawWc` is) field for field, but for the
// two padding bytes at its end where `ib_uverbs_wc` has `port_num` and a reserved byte
// (the layout test checks `ibv_wc` against the header; `RawWc`'s offsets are asserted in
// rverbs-uverbs).
const _: () = {
    assert!(size_of::<ibv_wc>() == size_of::<RawWc>());
    assert!(std::mem::align_of::<ibv_wc>() == std::mem::align_of::<RawWc>());
    assert!(offset_of!(ibv_wc, imm_data) == 24 && offset_of!(ibv_wc, dlid_path_bits) == 45);
};

/// Writes one raw ring entry (the kernel's `ib_uverbs_wc`) as an `ibv_wc`: a 48-byte copy,
/// then the flags renumbered (kernel → userspace). The immediate data stays big-endian as
/// on the wire and the invalidated rkey in host order, as `ibv_wc` keeps them.
///
/// # Safety
/// `dst` is valid for writing one `ibv_wc`.
#[inline(always)]
unsafe fn write_ibv_wc(dst: *mut ibv_wc, w: &RawWc) {
    // SAFETY: same size (asserted above) and the same field order and types; every byte of
    // a RawWc is initialised (plain integers, no padding) and every byte pattern is a valid
    // ibv_wc (integers); dst is writable ([out]) and cannot overlap our stack copy.
    unsafe {
        ptr::copy_nonoverlapping((w as *const RawWc).cast::<ibv_wc>(), dst, 1);
        (*dst).wc_flags = w.wc_flags().bits();
    }
}

/// How many completions or work requests one step of the data path handles on the stack.
const BATCH: usize = 16;

/// Polls up to `want` completions into `wc` through a stack buffer of `N` raw entries
/// (`Cq::poll_raw`: rxe copies its ring entries unchanged), each written out with
/// [`write_ibv_wc`]; returns how many.
///
/// # Safety
/// `wc` is valid for writing `want` `ibv_wc`.
#[inline(always)]
unsafe fn poll_into<const N: usize>(cq: &Cq, want: usize, wc: *mut ibv_wc) -> usize {
    let mut buf = [RawWc::default(); N];
    let mut done = 0usize;
    while done < want {
        let n = (want - done).min(N);
        let got = cq.poll_raw(&mut buf[..n]).min(n);
        for (i, w) in buf[..got].iter().enumerate() {
            // SAFETY: [out] wc has want entries and done + i < want.
            unsafe { write_ibv_wc(wc.add(done + i), w) };
        }
        done += got;
        if got < n {
            break;
        }
    }
    done
}

/// `ops.poll_cq` (the inline `ibv_poll_cq`). A caller asking for a few completions (the
/// latency-bound case) gets a 4-entry buffer, which is zeroed with a few inline stores; a
/// larger request a `BATCH`-entry one (its zeroing is a `memset` call).
unsafe extern "C" fn poll_cq_op(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: [object] cq.
    let c = obj!(unsafe { ccq(cq) }, neg);
    let want = num_entries.max(0) as usize;
    // SAFETY: [out] num_entries writable ibv_wc.
    let done = unsafe {
        if want <= 4 {
            poll_into::<4>(&c.cq, want, wc)
        } else {
            poll_into::<BATCH>(&c.cq, want, wc)
        }
    };
    done as c_int
}

/// `ops.req_notify_cq`.
unsafe extern "C" fn req_notify_cq_op(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: [object] cq.
    let c = obj!(unsafe { ccq(cq) }, errno);
    match c.cq.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

// ---------------------------------------------------------------------------------------
// SRQ

/// An `ibv_srq` and its rverbs SRQ.
#[repr(C)]
pub struct CSrq {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_srq>,
    /// The rverbs SRQ.
    pub srq: Arc<Srq>,
    /// Async events handed to C and acknowledged: destroy waits for them.
    events: EventCount,
}

/// `ibv_create_srq`; writes the granted sizes back into `attr.attr`.
///
/// # Safety
/// `pd` is ours; `attr` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { cpd(pd) }, null);
    // SAFETY: [in] [out] attr.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        set_errno(null_arg("ibv_srq_init_attr"));
        return null_mut();
    };
    let want = SrqAttr {
        max_wr: a.attr.max_wr,
        max_sge: a.attr.max_sge,
        srq_limit: a.attr.srq_limit,
    };
    let srq = match Srq::create(&p.pd, want) {
        Ok(s) => s,
        Err(e) => return null_with(&e),
    };
    let got = srq.attr();
    a.attr.max_wr = got.max_wr;
    a.attr.max_sge = got.max_sge;
    // SAFETY: integers, pointers, zeroed pthread objects.
    let mut c: ibv_srq = unsafe { std::mem::zeroed() };
    c.context = p.context();
    c.srq_context = a.srq_context;
    c.pd = pd;
    c.handle = srq.handle();
    let h = srq.user_handle();
    let p = Box::into_raw(Box::new(CSrq {
        c: UnsafeCell::new(c),
        srq,
        events: EventCount::default(),
    }));
    register(SRQ, h, p as usize);
    p.cast()
}

/// # Safety
/// `srq` is NULL or an \[object\] SRQ pointer.
#[inline(always)]
pub(crate) unsafe fn csrq<'a>(srq: *mut ibv_srq) -> Option<&'a CSrq> {
    // SAFETY: [object] srq, the first field of its CSrq ([owner]).
    unsafe { owner(srq, "ibv_srq") }
}

/// `ibv_modify_srq`: only the limit (`IBV_SRQ_LIMIT`) can change; `IBV_SRQ_MAX_WR` (resize)
/// is `EOPNOTSUPP`.
///
/// # Safety
/// `srq` is ours; `attr` is readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: [object] srq.
    let s = obj!(unsafe { csrq(srq) }, errno);
    // SAFETY: [in] attr.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return null_arg("ibv_srq_attr");
    };
    if mask & 1 != 0 {
        return libc::EOPNOTSUPP;
    }
    if mask & 2 != 0 {
        if let Err(e) = s.srq.set_limit(a.srq_limit) {
            return fail(&e);
        }
    }
    0
}

/// `ibv_query_srq`.
///
/// # Safety
/// `srq` is ours; `attr` is writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: [object] srq.
    let s = obj!(unsafe { csrq(srq) }, errno);
    match s.srq.query() {
        Ok(a) => {
            // SAFETY: [out] attr.
            unsafe {
                attr.write(ibv_srq_attr {
                    max_wr: a.max_wr,
                    max_sge: a.max_sge,
                    srq_limit: a.srq_limit,
                })
            };
            0
        }
        Err(e) => fail(&e),
    }
}

/// `ibv_destroy_srq`: `EBUSY` while a QP uses it. Waits until every async event delivered
/// for the SRQ was acknowledged (`ibv_ack_async_event`), as libibverbs does.
///
/// # Safety
/// `srq` came from [`ibv_create_srq`] (\[destroy\]); on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: [destroy] srq.
    let s = obj!(unsafe { csrq(srq) }, errno);
    if Arc::strong_count(&s.srq) > 1 {
        return libc::EBUSY;
    }
    // Out of the registry first: no event is handed out for it afterwards ([registry]).
    unregister(SRQ, s.srq.user_handle());
    s.events.wait_acked();
    // SAFETY: [destroy] srq: boxed by ibv_create_srq ([owner]); `s` is not used any more.
    drop(unsafe { Box::from_raw(srq.cast::<CSrq>()) });
    0
}

/// A C request's gather/scatter list as rverbs' SGEs (`ibv_sge` is `Sge`), or
/// `None` when its count is negative or its pointer NULL with entries.
///
/// # Safety
/// `sg_list` has `num_sge` entries, alive for `'a`.
#[inline(always)]
unsafe fn sge_list<'a>(sg_list: *const ibv_sge, num_sge: c_int) -> Option<&'a [Sge]> {
    if num_sge < 0 || (num_sge > 0 && sg_list.is_null()) {
        return None;
    }
    Some(if num_sge == 0 {
        &[]
    } else {
        // SAFETY: [wr] sg_list has num_sge readable entries (ibv_sge is Sge; its layout is in the layout test).
        unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) }
    })
}

/// The rverbs request of one C receive request, or `None` when its SGE list is negative
/// or dangling.
///
/// # Safety
/// `w` is a valid request: `sg_list` has `num_sge` entries.
#[inline(always)]
unsafe fn recv_wr(w: &ibv_recv_wr) -> Option<RecvWr<'_>> {
    // SAFETY: [wr] sg_list has num_sge entries.
    let sge = unsafe { sge_list(w.sg_list, w.num_sge) }?;
    Some(RecvWr {
        wr_id: w.wr_id,
        sge,
    })
}

/// Builds `RecvWr`s from a C list (a single request directly, a list `BATCH` at a time), and posts each batch with `post`.
/// Returns 0, or the errno with `*bad` set to the first request not posted.
///
/// # Safety
/// `wr` is a valid NULL-terminated list whose SGEs name registered memory (the caller's
/// `ibv_post_recv` contract); `bad` is writable.
unsafe fn post_recv_list(
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl Fn(&[RecvWr<'_>]) -> Result<(), rverbs_uverbs::error::PostError>,
) -> c_int {
    // One request (the common case): converted and posted without the batch arrays.
    // SAFETY: [wr] wr is NULL or a valid request.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // SAFETY: [wr] w's SGE list.
        let Some(r) = (unsafe { recv_wr(w) }) else {
            // SAFETY: [out] bad.
            unsafe { *bad = wr };
            return libc::EINVAL;
        };
        return match post(std::slice::from_ref(&r)) {
            Ok(()) => 0,
            Err(e) => {
                // SAFETY: [out] bad.
                unsafe { *bad = wr };
                fail(&io::Error::from(e))
            }
        };
    }
    while !wr.is_null() {
        let mut ptrs = [null_mut::<ibv_recv_wr>(); BATCH];
        let mut wrs = [RecvWr { wr_id: 0, sge: &[] }; BATCH];
        let mut n = 0;
        while n < BATCH && !wr.is_null() {
            // SAFETY: [wr] wr is a valid request.
            let w = unsafe { &*wr };
            // SAFETY: [wr] w's SGE list.
            let Some(r) = (unsafe { recv_wr(w) }) else {
                // SAFETY: [out] bad.
                unsafe { *bad = wr };
                return libc::EINVAL;
            };
            ptrs[n] = wr;
            wrs[n] = r;
            n += 1;
            wr = w.next;
        }
        if let Err(e) = post(&wrs[..n]) {
            let failed = e.posted().min(n - 1);
            // SAFETY: [out] bad.
            unsafe { *bad = ptrs[failed] };
            return fail(&io::Error::from(e));
        }
    }
    0
}

/// `ops.post_srq_recv`.
unsafe extern "C" fn post_srq_recv_op(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: [object] srq.
    let s = obj!(unsafe { csrq(srq) }, errno);
    // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid
    // until the completions are polled.
    unsafe { post_recv_list(wr, bad, |w| s.srq.post_recv_raw(w)) }
}

// ---------------------------------------------------------------------------------------
// QP

/// An `ibv_qp` (inside an `ibv_qp_ex`, which begins with it) and its rverbs QP.
#[repr(C)]
pub struct CQp {
    /// What C sees: `c.qp_base`, and for a QP made by `ibv_create_qp_ex` all of the
    /// `ibv_qp_ex` (\[c-struct\]).
    pub c: UnsafeCell<ibv_qp_ex>,
    /// The rverbs QP.
    pub qp: Arc<Qp>,
    /// The extended send API's state (`ibv_create_qp_ex` only, set once at creation).
    pub ex: OnceLock<Box<crate::qp_ex::QpEx>>,
    /// Async events handed to C and acknowledged: destroy waits for them.
    events: EventCount,
}

impl CQp {
    /// The C structure (\[c-struct\]: for raw reads and writes only).
    pub(crate) fn c_ptr(&self) -> *mut ibv_qp_ex {
        self.c.get()
    }
}

/// # Safety
/// `qp` is NULL or an \[object\] QP pointer.
#[inline(always)]
pub(crate) unsafe fn cqp<'a>(qp: *mut ibv_qp) -> Option<&'a CQp> {
    // SAFETY: [object] qp, the first field of its CQp ([owner]).
    unsafe { owner(qp, "ibv_qp") }
}

/// `ibv_create_qp`: RC, UC and UD; writes the granted capabilities back into
/// `init_attr.cap`.
///
/// # Safety
/// `pd` is ours; `init_attr` is readable and writable and names CQs (and an SRQ) of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { cpd(pd) }, null);
    // SAFETY: [in] [out] init_attr.
    let Some(a) = (unsafe { init_attr.as_mut() }) else {
        set_errno(null_arg("ibv_qp_init_attr"));
        return null_mut();
    };
    if a.qp_type > 255 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: [in] init_attr names [object] CQs (NULL is refused).
    let scq = obj!(unsafe { ccq(a.send_cq) }, null).cq.clone();
    // SAFETY: as above.
    let rcq = obj!(unsafe { ccq(a.recv_cq) }, null).cq.clone();
    let srq = if a.srq.is_null() {
        None
    } else {
        // SAFETY: [in] init_attr names an [object] SRQ.
        Some(obj!(unsafe { csrq(a.srq) }, null).srq.clone())
    };
    let init = QpInit {
        qp_type: QpType(a.qp_type as u8),
        send_cq: scq,
        recv_cq: rcq,
        srq,
        caps: QpCaps {
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
            max_inline_data: a.cap.max_inline_data,
        },
        sq_sig_all: a.sq_sig_all != 0,
    };
    let qp = match Qp::create(&p.pd, init) {
        Ok(q) => q,
        Err(e) => return null_with(&e),
    };
    let caps = qp.caps();
    a.cap = ibv_qp_cap {
        max_send_wr: caps.max_send_wr,
        max_recv_wr: caps.max_recv_wr,
        max_send_sge: caps.max_send_sge,
        max_recv_sge: caps.max_recv_sge,
        max_inline_data: caps.max_inline_data,
    };
    // SAFETY: integers, pointers, zeroed pthread objects.
    let mut c: ibv_qp = unsafe { std::mem::zeroed() };
    c.context = p.context();
    c.qp_context = a.qp_context;
    c.pd = pd;
    c.send_cq = a.send_cq;
    c.recv_cq = a.recv_cq;
    c.srq = a.srq;
    c.handle = qp.handle();
    c.qp_num = qp.qp_num();
    c.state = u32::from(QpState::RESET.0);
    c.qp_type = a.qp_type;
    let h = qp.user_handle();
    let p = Box::into_raw(Box::new(CQp {
        c: UnsafeCell::new(ibv_qp_ex::from_base(c)),
        qp,
        ex: OnceLock::new(),
        events: EventCount::default(),
    }));
    register(QP, h, p as usize);
    p.cast()
}

fn ah_attr_from(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: a.grh.dgid.raw,
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
    }
}

pub(crate) fn ah_attr_to(a: &AhAttr) -> ibv_ah_attr {
    let g = a.grh.unwrap_or_default();
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: g.dgid },
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: u8::from(a.grh.is_some()),
        port_num: a.port_num,
    }
}

/// The `ibv_qp_attr_mask` bits [`ibv_modify_qp`] carries.
const MODIFY_SUPPORTED: u32 = QpAttrMask::STATE.bits()
    | QpAttrMask::CUR_STATE.bits()
    | QpAttrMask::EN_SQD_ASYNC_NOTIFY.bits()
    | QpAttrMask::ACCESS_FLAGS.bits()
    | QpAttrMask::PKEY_INDEX.bits()
    | QpAttrMask::PORT.bits()
    | QpAttrMask::QKEY.bits()
    | QpAttrMask::AV.bits()
    | QpAttrMask::PATH_MTU.bits()
    | QpAttrMask::TIMEOUT.bits()
    | QpAttrMask::RETRY_CNT.bits()
    | QpAttrMask::RNR_RETRY.bits()
    | QpAttrMask::RQ_PSN.bits()
    | QpAttrMask::MAX_QP_RD_ATOMIC.bits()
    | QpAttrMask::MIN_RNR_TIMER.bits()
    | QpAttrMask::SQ_PSN.bits()
    | QpAttrMask::MAX_DEST_RD_ATOMIC.bits()
    | QpAttrMask::DEST_QPN.bits();

/// The rverbs attributes of a C modify: one `Some` per mask bit.
fn qp_attr_from(a: &ibv_qp_attr, mask: u32) -> QpAttr {
    let on = |m: QpAttrMask| mask & m.bits() != 0;
    QpAttr {
        qp_state: on(QpAttrMask::STATE).then_some(QpState(a.qp_state as u8)),
        cur_qp_state: on(QpAttrMask::CUR_STATE).then_some(QpState(a.cur_qp_state as u8)),
        en_sqd_async_notify: on(QpAttrMask::EN_SQD_ASYNC_NOTIFY)
            .then_some(a.en_sqd_async_notify != 0),
        access_flags: on(QpAttrMask::ACCESS_FLAGS)
            .then_some(AccessFlags::from_bits_retain(a.qp_access_flags)),
        pkey_index: on(QpAttrMask::PKEY_INDEX).then_some(a.pkey_index),
        port_num: on(QpAttrMask::PORT).then_some(a.port_num),
        qkey: on(QpAttrMask::QKEY).then_some(a.qkey),
        ah_attr: on(QpAttrMask::AV).then(|| ah_attr_from(&a.ah_attr)),
        path_mtu: on(QpAttrMask::PATH_MTU).then_some(Mtu(a.path_mtu as u8)),
        timeout: on(QpAttrMask::TIMEOUT).then_some(a.timeout),
        retry_cnt: on(QpAttrMask::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: on(QpAttrMask::RNR_RETRY).then_some(a.rnr_retry),
        rq_psn: on(QpAttrMask::RQ_PSN).then_some(a.rq_psn),
        max_rd_atomic: on(QpAttrMask::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        min_rnr_timer: on(QpAttrMask::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        sq_psn: on(QpAttrMask::SQ_PSN).then_some(a.sq_psn),
        max_dest_rd_atomic: on(QpAttrMask::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        dest_qp_num: on(QpAttrMask::DEST_QPN).then_some(a.dest_qp_num),
    }
}

/// Applies rverbs attributes to our QP, keeping `ibv_qp.state` as libibverbs does; a
/// positive errno on failure.
///
/// # Safety
/// `qp` is a live QP of ours.
pub(crate) unsafe fn modify_qp_with(qp: *mut ibv_qp, a: &QpAttr) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { cqp(qp) }, errno);
    match q.qp.modify(a) {
        Ok(()) => {
            if let Some(st) = a.qp_state {
                // SAFETY: [object] qp; [c-struct] a raw write (libibverbs updates this field
                // the same way), serialised by c_write.
                c_write(|| unsafe { (*qp).state = u32::from(st.0) });
            }
            0
        }
        Err(e) => fail(&e),
    }
}

/// `ibv_modify_qp`: positive errno on failure. Alternate paths, path migration, `IBV_QP_CAP`
/// and rate limits are `EOPNOTSUPP`.
///
/// # Safety
/// `qp` is ours; `attr` is readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: [in] attr.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return null_arg("ibv_qp_attr");
    };
    let mask = mask as u32;
    if mask & !MODIFY_SUPPORTED != 0 {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: [object] qp.
    unsafe { modify_qp_with(qp, &qp_attr_from(a, mask)) }
}

/// `ibv_query_qp`: fills every attribute (whatever `mask`) and `init_attr`.
///
/// # Safety
/// `qp` is ours; `attr` and `init_attr` are writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { cqp(qp) }, errno);
    if attr.is_null() || init_attr.is_null() {
        return null_arg("ibv_query_qp output");
    }
    let i = match q.qp.query() {
        Ok(i) => i,
        Err(e) => return fail(&e),
    };
    let cap = ibv_qp_cap {
        max_send_wr: i.caps.max_send_wr,
        max_recv_wr: i.caps.max_recv_wr,
        max_send_sge: i.caps.max_send_sge,
        max_recv_sge: i.caps.max_recv_sge,
        max_inline_data: i.caps.max_inline_data,
    };
    let o = ibv_qp_attr {
        qp_state: u32::from(i.state.0),
        cur_qp_state: u32::from(i.cur_state.0),
        path_mtu: u32::from(i.path_mtu.0),
        path_mig_state: 0,
        qkey: i.qkey,
        rq_psn: i.rq_psn,
        sq_psn: i.sq_psn,
        dest_qp_num: i.dest_qp_num,
        qp_access_flags: i.access_flags.bits(),
        cap,
        ah_attr: ah_attr_to(&i.ah_attr),
        alt_ah_attr: ibv_ah_attr::default(),
        pkey_index: i.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: 0,
        sq_draining: u8::from(i.sq_draining),
        max_rd_atomic: i.max_rd_atomic,
        max_dest_rd_atomic: i.max_dest_rd_atomic,
        min_rnr_timer: i.min_rnr_timer,
        port_num: i.port_num,
        timeout: i.timeout,
        retry_cnt: i.retry_cnt,
        rnr_retry: i.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    };
    // SAFETY: [object] qp; [c-struct] a raw write, serialised by c_write.
    c_write(|| unsafe { (*qp).state = o.qp_state });
    // SAFETY: [out] attr and init_attr; [object] qp, whose C fields are read through the raw
    // pointer ([c-struct]).
    unsafe {
        attr.write(o);
        let ia = &mut *init_attr;
        ia.qp_context = (*qp).qp_context;
        ia.send_cq = (*qp).send_cq;
        ia.recv_cq = (*qp).recv_cq;
        ia.srq = (*qp).srq;
        ia.cap = cap;
        ia.qp_type = (*qp).qp_type;
        ia.sq_sig_all = c_int::from(i.sq_sig_all);
    }
    0
}

/// `ibv_destroy_qp`. Waits until every async event delivered for the QP was acknowledged
/// (`ibv_ack_async_event`), as libibverbs does.
///
/// # Safety
/// `qp` came from [`ibv_create_qp`] (\[destroy\]) and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: [destroy] qp.
    let q = obj!(unsafe { cqp(qp) }, errno);
    // Out of the registry first: no event is handed out for it afterwards ([registry]).
    unregister(QP, q.qp.user_handle());
    q.events.wait_acked();
    // SAFETY: [destroy] qp: boxed by ibv_create_qp ([owner]); `q` is not used any more.
    drop(unsafe { Box::from_raw(qp.cast::<CQp>()) });
    0
}

/// The rverbs operation of a C send request, or `None` for an opcode we do not carry.
///
/// # Safety
/// For UD QPs, `w.wr.ud.ah` is an AH of ours; for BIND_MW, `w.bind_mw` names a window and
/// region of ours.
unsafe fn send_op(w: &ibv_send_wr) -> Option<SendOp> {
    // SAFETY: reading a union of plain integers: every bit pattern is valid.
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    Some(match w.opcode {
        0 => SendOp::RdmaWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        1 => SendOp::RdmaWriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm: u32::from_be(w.imm_data),
        },
        2 => SendOp::Send,
        3 => SendOp::SendWithImm {
            imm: u32::from_be(w.imm_data),
        },
        4 => SendOp::RdmaRead {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        5 => SendOp::AtomicCmpSwp {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        6 => SendOp::AtomicFetchAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        7 => SendOp::LocalInv {
            invalidate_rkey: w.imm_data,
        },
        // SAFETY: [wr] a BIND_MW request names an [object] window (and region).
        8 => return unsafe { crate::mw::bind_op(w) },
        9 => SendOp::SendWithInv {
            invalidate_rkey: w.imm_data,
        },
        _ => return None,
    })
}

/// The rverbs request of one C send request, or `None` when it is malformed (an opcode we
/// do not carry, a negative or dangling SGE list, a UD request without an AH).
///
/// # Safety
/// `w` is a valid request (`ibv_post_send`'s contract): `sg_list` has `num_sge` entries;
/// for UD QPs `w.wr.ud.ah` is NULL or an AH of ours.
#[inline(always)]
unsafe fn send_wr(w: &ibv_send_wr, ud: bool) -> Option<SendWr<'_>> {
    // SAFETY: [wr] for UD QPs the request names an [object] AH (checked non-NULL below).
    let op = unsafe { send_op(w) }?;
    // SAFETY: [wr] sg_list has num_sge entries.
    let sge = unsafe { sge_list(w.sg_list, w.num_sge) }?;
    let ud_dest = if ud {
        // SAFETY: reading a union of plain data (a UD request uses its `ud` member).
        let u = unsafe { w.wr.ud };
        if u.ah.is_null() {
            return None;
        }
        // SAFETY: [wr] a UD request's non-NULL AH is an [object] AH ([owner]).
        let a = unsafe { &*(u.ah as *const CAh) };
        Some(a.ah.ud_dest(u.remote_qpn, u.remote_qkey))
    } else {
        None
    };
    Some(SendWr {
        wr_id: w.wr_id,
        op,
        sge,
        flags: SendFlags::from_bits_retain(w.send_flags),
        ud: ud_dest,
    })
}

/// `ops.post_send` (the inline `ibv_post_send`). A single request (the common case of
/// latency-bound programs) is converted and posted without the batch arrays; a list goes in
/// batches of `BATCH`.
unsafe extern "C" fn post_send_op(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { cqp(qp) }, errno);
    let ud = q.qp.qp_type() == QpType::UD;
    // SAFETY: [wr] wr is NULL or a valid request.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // SAFETY: [wr] as above; AHs of UD requests are [object] AHs.
        let Some(s) = (unsafe { send_wr(w, ud) }) else {
            // SAFETY: [out] bad.
            unsafe { *bad = wr };
            return libc::EINVAL;
        };
        // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid until the
        // completions are polled, and INLINE sources are not written during the call (C code
        // that writes them concurrently races libibverbs' own copy just the same).
        return match unsafe { q.qp.post_send_raw(std::slice::from_ref(&s)) } {
            Ok(()) => 0,
            Err(e) => {
                // SAFETY: [out] bad.
                unsafe { *bad = wr };
                fail(&io::Error::from(e))
            }
        };
    }
    while !wr.is_null() {
        let mut ptrs = [null_mut::<ibv_send_wr>(); BATCH];
        let mut wrs = [SendWr::send(0, &[]); BATCH];
        let mut n = 0;
        while n < BATCH && !wr.is_null() {
            // SAFETY: [wr] wr is a valid request.
            let w = unsafe { &*wr };
            // SAFETY: as above.
            let Some(s) = (unsafe { send_wr(w, ud) }) else {
                // SAFETY: [out] bad.
                unsafe { *bad = wr };
                return libc::EINVAL;
            };
            ptrs[n] = wr;
            wrs[n] = s;
            n += 1;
            wr = w.next;
        }
        // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid until the
        // completions are polled, and INLINE sources are not written during the call (C code
        // that writes them concurrently races libibverbs' own copy just the same).
        if let Err(e) = unsafe { q.qp.post_send_raw(&wrs[..n]) } {
            let failed = e.posted().min(n - 1);
            // SAFETY: [out] bad.
            unsafe { *bad = ptrs[failed] };
            return fail(&io::Error::from(e));
        }
    }
    0
}

/// `ops.post_recv` (the inline `ibv_post_recv`).
unsafe extern "C" fn post_recv_op(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { cqp(qp) }, errno);
    // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid
    // until the completions are polled.
    unsafe { post_recv_list(wr, bad, |w| q.qp.post_recv_raw(w)) }
}

// ---------------------------------------------------------------------------------------
// AH

/// An `ibv_ah` and its rverbs AH.
#[repr(C)]
pub struct CAh {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_ah>,
    /// The rverbs AH.
    pub ah: Arc<Ah>,
}

/// `ibv_create_ah`.
///
/// # Safety
/// `pd` is ours; `attr` is readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { cpd(pd) }, null);
    // SAFETY: [in] attr.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        set_errno(null_arg("ibv_ah_attr"));
        return null_mut();
    };
    match Ah::create(&p.pd, ah_attr_from(a)) {
        Ok(ah) => {
            let c = ibv_ah {
                context: p.context(),
                pd,
                handle: ah.handle(),
            };
            Box::into_raw(Box::new(CAh {
                c: UnsafeCell::new(c),
                ah,
            }))
            .cast()
        }
        Err(e) => null_with(&e),
    }
}

/// The fields of a C completion that a reply address needs.
fn wc_for_reply(wc: &ibv_wc) -> WorkCompletion {
    WorkCompletion {
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        // The userspace numbering (IBV_WC_GRH = 1), which WcFlags uses too.
        wc_flags: WcFlags::from_bits_truncate(wc.wc_flags),
        slid: wc.slid,
        sl: wc.sl,
        dlid_path_bits: wc.dlid_path_bits,
        ..Default::default()
    }
}

/// `ibv_init_ah_from_wc`: the address vector of a reply to the UD receive `wc`, whose
/// receive buffer starts with `grh` (read only when `wc` has `IBV_WC_GRH`); see
/// `AhAttr::reply_to`. 0, or -1 with `errno` (`ENOENT`: no GID of ours matches the
/// destination; `EINVAL`: a multicast destination or a header that is not IPv4/IPv6).
///
/// # Safety
/// `context` is a live context of ours; `wc` and `ah_attr` are valid; `grh` points to 40
/// readable bytes when `wc` has `IBV_WC_GRH`.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, neg);
    // SAFETY: [in] wc.
    let Some(wc) = (unsafe { wc.as_ref() }).map(wc_for_reply) else {
        set_errno(null_arg("ibv_wc"));
        return -1;
    };
    let mut area = [0u8; rverbs_uverbs::ah::GRH_LEN];
    if wc.wc_flags.contains(WcFlags::GRH) {
        // SAFETY: [buf] grh has 40 readable bytes (a copy: the buffer is the device's
        // to write while other receives are posted on it).
        unsafe { std::ptr::copy_nonoverlapping(grh as *const u8, area.as_mut_ptr(), area.len()) };
    }
    match AhAttr::reply_to(&c.ctx, port_num, &wc, &area) {
        Ok(a) => {
            // SAFETY: [out] ah_attr.
            unsafe { ah_attr.write(ah_attr_to(&a)) };
            0
        }
        Err(e) => {
            set_errno(fail(&e));
            -1
        }
    }
}

/// `ibv_create_ah_from_wc`: [`ibv_init_ah_from_wc`] on `pd`'s context, then
/// [`ibv_create_ah`]; NULL with `errno` when either fails.
///
/// # Safety
/// As [`ibv_init_ah_from_wc`], with `pd` a live PD of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    port_num: u8,
) -> *mut ibv_ah {
    // SAFETY: [object] pd.
    let context = obj!(unsafe { cpd(pd) }, null).context();
    let mut attr = std::mem::MaybeUninit::<ibv_ah_attr>::zeroed();
    // SAFETY: forwarded: [object] context, [in] wc, [buf] grh as our caller's; `attr` is writable.
    if unsafe { ibv_init_ah_from_wc(context, port_num, wc, grh, attr.as_mut_ptr()) } != 0 {
        return null_mut();
    }
    // SAFETY: initialized by ibv_init_ah_from_wc; [object] pd.
    unsafe { ibv_create_ah(pd, attr.as_mut_ptr()) }
}

/// `ibv_destroy_ah`.
///
/// # Safety
/// `ah` came from [`ibv_create_ah`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    if ah.is_null() {
        return null_arg("ibv_ah");
    }
    // SAFETY: [destroy] ah: boxed by ibv_create_ah ([owner]).
    drop(unsafe { Box::from_raw(ah.cast::<CAh>()) });
    0
}

// ---------------------------------------------------------------------------------------
// Misc

/// `enum ibv_rate` values with their multiple of 2.5 Gb/s (`ibv_rate_to_mult`; -1 where
/// libibverbs has none) and their rate in Mb/s (`ibv_rate_to_mbps`), from the IBTA's rate
/// encoding: 2 = 2.5, 5 = 5, 3 = 10, 6 = 20, 4 = 30, 7 = 40, 8 = 60, 9 = 80, 10 = 120 Gb/s
/// (SDR..QDR widths), then FDR/EDR/HDR/NDR lanes (14.0625, 56.25, …, 1275 Gb/s).
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),
    (3, 4, 10000),
    (4, 12, 30000),
    (5, 2, 5000),
    (6, 8, 20000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s; -1 for `IBV_RATE_MAX`, unknown
/// values and the rates libibverbs gives no multiple for.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate`: the inverse of [`ibv_rate_to_mult`]; `IBV_RATE_MAX` (0) for a
/// multiple no rate has.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`: the rate in Mb/s; -1 for `IBV_RATE_MAX` and unknown values.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`: the rate whose Mb/s is exactly `mbps`; `IBV_RATE_MAX` (0) otherwise.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// `ibv_fork_init`: 0 (the kernels rverbs runs on keep registered memory intact across
/// fork, so nothing has to be done).
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (2).
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// Strings of rdma-core's `ibv_wc_status_str`, by status number.
const WC_STATUS: &[&CStr] = &[
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

fn pick(table: &[&'static CStr], i: c_int) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    pick(WC_STATUS, status)
}

/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    pick(T, node_type)
}

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    pick(T, state)
}

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(T, event)
}

// ---------------------------------------------------------------------------------------
// GID entries, async events, kernel-struct converters (used by rdma-core's librdmacm)

fn gid_entry(g: &rverbs_uverbs::gid::GidEntry) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid { raw: g.gid.0 },
        gid_index: g.index,
        port_num: g.port,
        gid_type: g.gid_type.0,
        ndev_ifindex: g.ndev_ifindex,
    }
}

/// `_ibv_query_gid_ex` (the inline `ibv_query_gid_ex`): 0, `ENODATA` for an empty slot, or
/// another positive errno. `flags` must be 0.
///
/// # Safety
/// `context` is ours; `entry` has `entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    if flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, errno);
    match c.ctx.query_gid(port, index) {
        Ok(g) => {
            // SAFETY: [buf] entry has entry_size writable bytes (checked to hold an ibv_gid_entry above).
            unsafe { entry.write(gid_entry(&g)) };
            0
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => libc::ENODATA,
        Err(e) => fail(&e),
    }
}

/// `_ibv_query_gid_table` (the inline `ibv_query_gid_table`): the number of valid entries
/// written, or a negative errno.
///
/// # Safety
/// `context` is ours; `entries` has room for `max_entries` entries of `entry_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    if flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
        return -(libc::EINVAL as isize);
    }
    // SAFETY: [object] context.
    let c = obj!(unsafe { cctx(context) }, neg_errno);
    let table = match c.ctx.query_gid_table() {
        Ok(t) => t,
        Err(e) => return -(fail(&e) as isize),
    };
    if table.len() > max_entries {
        return -(libc::EINVAL as isize);
    }
    for (i, g) in table.iter().enumerate() {
        // SAFETY: [buf] i < max_entries entries of entry_size bytes each.
        unsafe { entries.byte_add(i * entry_size).write(gid_entry(g)) };
    }
    table.len() as isize
}

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
    let c = obj!(unsafe { cctx(context) }, neg);
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

/// `ibv_get_pkey_index`: the index of `pkey` (big-endian) in the port's table, or -1.
///
/// # Safety
/// `context` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    for i in 0..c_int::from(u16::MAX) {
        let mut v = 0u16;
        // SAFETY: forwarded: [object] context; v is writable.
        if unsafe { ibv_query_pkey(context, port, i, &mut v) } != 0 {
            return -1;
        }
        if v == pkey {
            return i;
        }
    }
    -1
}

/// `ibv_get_sysfs_path`: `/sys`.
///
/// # Safety
/// `buf` has `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_sysfs_path(buf: *mut c_char, size: usize) -> c_int {
    const SYS: &[u8] = b"/sys\0";
    if size < SYS.len() {
        return -1;
    }
    // SAFETY: [buf] buf has size >= SYS.len() writable bytes.
    unsafe { ptr::copy_nonoverlapping(SYS.as_ptr(), buf.cast::<u8>(), SYS.len()) };
    0
}

pub(crate) fn ah_from_kern(a: &rverbs_cm::abi::ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.grh.dgid },
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global,
        port_num: a.port_num,
    }
}

/// `ibv_copy_ah_attr_from_kern`: `struct ib_uverbs_ah_attr` to `ibv_ah_attr`.
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *const rverbs_cm::abi::ib_uverbs_ah_attr,
) {
    // SAFETY: [in] src, [out] dst (read_unaligned: C gives no alignment promise beyond 4).
    unsafe { dst.write(ah_from_kern(&src.read_unaligned())) };
}

/// `ibv_copy_qp_attr_from_kern`: `struct ib_uverbs_qp_attr` to `ibv_qp_attr`.
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *const rverbs_cm::abi::ib_uverbs_qp_attr,
) {
    // SAFETY: [in] src (unaligned).
    let k = unsafe { src.read_unaligned() };
    let o = ibv_qp_attr {
        qp_state: k.qp_state,
        cur_qp_state: k.cur_qp_state,
        path_mtu: k.path_mtu,
        path_mig_state: k.path_mig_state,
        qkey: k.qkey,
        rq_psn: k.rq_psn,
        sq_psn: k.sq_psn,
        dest_qp_num: k.dest_qp_num,
        qp_access_flags: k.qp_access_flags,
        cap: ibv_qp_cap {
            max_send_wr: k.max_send_wr,
            max_recv_wr: k.max_recv_wr,
            max_send_sge: k.max_send_sge,
            max_recv_sge: k.max_recv_sge,
            max_inline_data: k.max_inline_data,
        },
        ah_attr: ah_from_kern(&k.ah_attr),
        alt_ah_attr: ah_from_kern(&k.alt_ah_attr),
        pkey_index: k.pkey_index,
        alt_pkey_index: k.alt_pkey_index,
        en_sqd_async_notify: k.en_sqd_async_notify,
        sq_draining: k.sq_draining,
        max_rd_atomic: k.max_rd_atomic,
        max_dest_rd_atomic: k.max_dest_rd_atomic,
        min_rnr_timer: k.min_rnr_timer,
        port_num: k.port_num,
        timeout: k.timeout,
        retry_cnt: k.retry_cnt,
        rnr_retry: k.rnr_retry,
        alt_port_num: k.alt_port_num,
        alt_timeout: k.alt_timeout,
        rate_limit: 0,
    };
    // SAFETY: [out] dst.
    unsafe { dst.write(o) };
}

/// `ibv_copy_path_rec_from_kern`: `struct ib_user_path_rec` to `ibv_sa_path_rec`.
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *const rverbs_cm::abi::ib_user_path_rec,
) {
    // SAFETY: [in] src (unaligned).
    let k = unsafe { src.read_unaligned() };
    let o = ibv_sa_path_rec {
        dgid: ibv_gid { raw: k.dgid },
        sgid: ibv_gid { raw: k.sgid },
        // Already big-endian on both sides: keep the bytes.
        dlid: u16::from_ne_bytes(k.dlid),
        slid: u16::from_ne_bytes(k.slid),
        raw_traffic: k.raw_traffic as c_int,
        flow_label: u32::from_ne_bytes(k.flow_label),
        hop_limit: k.hop_limit,
        traffic_class: k.traffic_class,
        reversible: k.reversible as c_int,
        numb_path: k.numb_path,
        pkey: u16::from_ne_bytes(k.pkey),
        sl: k.sl,
        mtu_selector: k.mtu_selector,
        mtu: k.mtu as u8,
        rate_selector: k.rate_selector,
        rate: k.rate,
        packet_life_time_selector: k.packet_life_time_selector,
        packet_life_time: k.packet_life_time,
        preference: k.preference,
    };
    // SAFETY: [out] dst.
    unsafe { dst.write(o) };
}

/// `ibv_copy_path_rec_to_kern`: `ibv_sa_path_rec` to `struct ib_user_path_rec`, the inverse
/// of [`ibv_copy_path_rec_from_kern`].
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut rverbs_cm::abi::ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    // SAFETY: [in] src (unaligned).
    let o = unsafe { src.read_unaligned() };
    let k = rverbs_cm::abi::ib_user_path_rec {
        dgid: o.dgid.raw,
        sgid: o.sgid.raw,
        // Big-endian on both sides: the bytes as they are.
        dlid: o.dlid.to_ne_bytes(),
        slid: o.slid.to_ne_bytes(),
        raw_traffic: o.raw_traffic as u32,
        flow_label: o.flow_label.to_ne_bytes(),
        reversible: o.reversible as u32,
        mtu: u32::from(o.mtu),
        pkey: o.pkey.to_ne_bytes(),
        hop_limit: o.hop_limit,
        traffic_class: o.traffic_class,
        numb_path: o.numb_path,
        sl: o.sl,
        mtu_selector: o.mtu_selector,
        rate_selector: o.rate_selector,
        rate: o.rate,
        packet_life_time_selector: o.packet_life_time_selector,
        packet_life_time: o.packet_life_time,
        preference: o.preference,
    };
    // SAFETY: [out] dst (unaligned).
    unsafe { dst.write_unaligned(k) };
}

/// Declares `extern "C"` functions that report `EOPNOTSUPP` the way their rdma-core
/// counterparts report failure (NULL + errno, or the given return value + errno).
macro_rules! unsupported {
    ($($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $fail:expr;)*) => {$(
        $(#[$m])*
        ///
        /// Not supported by rverbs: fails with `EOPNOTSUPP` (docs/capi.md).
        ///
        /// # Safety
        /// Any arguments (none is dereferenced).
        #[no_mangle]
        pub unsafe extern "C" fn $name($(_: $t),*) -> $r {
            set_errno(libc::EOPNOTSUPP);
            $fail
        }
    )*};
}

unsupported! {
    /// `ibv_rereg_mr` (returns `IBV_REREG_MR_ERR_INPUT`).
    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> c_int = -1;
    /// `ibv_reg_dmabuf_mr`.
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, off: u64, len: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr = null_mut();
    /// `ibv_import_device`.
    fn ibv_import_device(fd: c_int) -> *mut ibv_context = null_mut();
    /// `ibv_import_pd`.
    fn ibv_import_pd(ctx: *mut ibv_context, handle: u32) -> *mut ibv_pd = null_mut();
    /// `ibv_unimport_pd`.
    fn ibv_unimport_pd(pd: *mut ibv_pd) -> () = ();
    /// `ibv_import_mr`.
    fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr = null_mut();
    /// `ibv_unimport_mr`.
    fn ibv_unimport_mr(mr: *mut ibv_mr) -> () = ();
    /// `ibv_import_dm`.
    fn ibv_import_dm(ctx: *mut ibv_context, handle: u32) -> *mut c_void = null_mut();
    /// `ibv_unimport_dm`.
    fn ibv_unimport_dm(dm: *mut c_void) -> () = ();
    /// `ibv_query_ece`.
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut c_void) -> c_int = libc::EOPNOTSUPP;
    /// `ibv_set_ece`.
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut c_void) -> c_int = libc::EOPNOTSUPP;
    /// `ibv_attach_mcast` (multicast).
    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const c_void, lid: u16) -> c_int = libc::EOPNOTSUPP;
    /// `ibv_detach_mcast` (multicast).
    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const c_void, lid: u16) -> c_int = libc::EOPNOTSUPP;
}

/// `ibv_query_qp_data_in_order`: 0 (no in-order guarantee is promised).
///
/// # Safety
/// Any pointers (none is dereferenced).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(
    _qp: *mut ibv_qp,
    _op: u32,
    _flags: u32,
) -> c_int {
    0
}

// ---------------------------------------------------------------------------------------
// rdma-core's provider interface (IBVERBS_PRIVATE_34)

/// rdma-core's provider libraries (Debian's libmlx5.so.1, libefa.so.1, … which perftest and
/// pyverbs link directly) import these libibverbs-private entry points; they are exported
/// so that those libraries load. rverbs does not host rdma-core's providers (it has its own,
/// `rverbs-provider`), so none of them is ever reached through a device of ours: a call
/// fails with `EOPNOTSUPP` (or NULL, or does nothing, for the pointer and void ones). They
/// are declared without parameters; on the C ABIs rverbs supports the caller's arguments
/// are then simply ignored.
macro_rules! provider_entry_points {
    (int: $($i:ident),*; ptr: $($p:ident),*; void: $($v:ident),*;) => {
        $(
            #[doc = concat!("`", stringify!($i), "` (provider interface): `EOPNOTSUPP`.")]
            #[no_mangle]
            pub extern "C" fn $i() -> c_int {
                set_errno(libc::EOPNOTSUPP);
                libc::EOPNOTSUPP
            }
        )*
        $(
            #[doc = concat!("`", stringify!($p), "` (provider interface): NULL, `EOPNOTSUPP`.")]
            #[no_mangle]
            pub extern "C" fn $p() -> *mut c_void {
                set_errno(libc::EOPNOTSUPP);
                null_mut()
            }
        )*
        $(
            #[doc = concat!("`", stringify!($v), "` (provider interface): does nothing.")]
            #[no_mangle]
            pub extern "C" fn $v() {}
        )*
    };
}

provider_entry_points! {
    int: execute_ioctl, ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw, ibv_cmd_alloc_pd, ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters, ibv_cmd_create_cq, ibv_cmd_create_cq_ex, ibv_cmd_create_flow, ibv_cmd_create_flow_action_esp, ibv_cmd_create_qp, ibv_cmd_create_qp_ex2, ibv_cmd_create_qp_ex, ibv_cmd_create_rwq_ind_table, ibv_cmd_create_srq, ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw, ibv_cmd_dealloc_pd, ibv_cmd_dereg_mr, ibv_cmd_destroy_ah, ibv_cmd_destroy_counters, ibv_cmd_destroy_cq, ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp, ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq, ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq, ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex, ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd, ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr, ibv_cmd_query_port, ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters, ibv_cmd_reg_dm_mr, ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_rereg_mr, ibv_cmd_resize_cq;
    ptr: _verbs_init_and_alloc_context, verbs_open_device;
    void: __verbs_log, verbs_init_cq, verbs_set_ops, verbs_uninit_context;
}

/// `verbs_register_driver_34`: called by each rdma-core provider library's constructor when
/// it is loaded. The registration is ignored: devices are served by rverbs' own providers.
///
/// # Safety
/// Any pointer (not dereferenced).
#[no_mangle]
pub unsafe extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}

/// `verbs_allow_disassociate_destroy` (a flag providers read): false.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: bool = false;

/// `ibv_dontfork_range`: 0 (nothing to do, see [`ibv_fork_init`]).
///
/// # Safety
/// Any range (not touched).
#[no_mangle]
pub unsafe extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: 0 (nothing to do, see [`ibv_fork_init`]).
///
/// # Safety
/// Any range (not touched).
#[no_mangle]
pub unsafe extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

unsupported! {
    /// `ibv_resolve_eth_l2_from_gid`.
    fn ibv_resolve_eth_l2_from_gid(ctx: *mut ibv_context, attr: *mut c_void, mac: *mut u8, vid: *mut u16) -> c_int = libc::EOPNOTSUPP;
}

all_symvers!();
