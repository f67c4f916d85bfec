//! The exported `ibv_*` functions and the ops-table entries behind the inline functions of
//! `verbs.h`.
//!
//! Every C object is the first field (`repr(C)`) of the Rust object that owns the rverbs
//! object behind it ([`CDevice`], [`CContext`], [`CPd`], …), allocated with `Box` and handed
//! to C as a pointer to that first field; the destroy call turns it back into the `Box`.
//! Functions taking these pointers are `unsafe extern "C"`: the caller (C) promises they came
//! from this library and are still alive, as libibverbs' callers do.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr::{self, null_mut};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

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
    /// What C sees.
    pub c: ibv_device,
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

fn new_device(dev: Device) -> *mut CDevice {
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
        c,
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
        // SAFETY: caller's contract.
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
    // SAFETY: the list was calloc'ed by ibv_get_device_list; the devices stay alive.
    unsafe { libc::free(list.cast()) };
}

/// # Safety
/// `d` is a device of ours.
unsafe fn cdev<'a>(d: *mut ibv_device) -> &'a CDevice {
    // SAFETY: ibv_device is the first field of a CDevice that is never freed.
    unsafe { &*(d as *const CDevice) }
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
    // SAFETY: caller's contract; name is NUL-terminated and lives as long as the device.
    unsafe { (*device).name.as_ptr() }
}

/// `ibv_get_device_guid`: the node GUID, big-endian.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    // SAFETY: caller's contract.
    unsafe { cdev(device) }.dev.node_guid().to_be()
}

/// `ibv_get_device_index`: the kernel's device index, -1 when unknown.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    // SAFETY: caller's contract.
    unsafe { cdev(device) }
        .dev
        .netlink_index()
        .map_or(-1, |i| i as c_int)
}

// ---------------------------------------------------------------------------------------
// Contexts

/// An opened device: the `verbs_context` (with the `ibv_context` at its end) and the rverbs
/// context.
#[repr(C)]
pub struct CContext {
    /// What C sees (through `vctx.context`).
    pub vctx: verbs_context,
    /// The rverbs context.
    pub ctx: Arc<Context>,
}

/// # Safety
/// `c` is the `ibv_context` of a live [`CContext`].
unsafe fn cctx<'a>(c: *mut ibv_context) -> &'a CContext {
    let off = offset_of!(CContext, vctx) + offset_of!(verbs_context, context);
    // SAFETY: the ibv_context sits `off` bytes into its CContext.
    unsafe { &*(c.byte_sub(off) as *const CContext) }
}

/// `ibv_open_device`.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    // SAFETY: caller's contract.
    let d = unsafe { cdev(device) };
    let ctx = match rverbs_provider::open(&d.dev) {
        Ok(c) => c,
        Err(e) => return null_with(&e),
    };
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
    let b = Box::into_raw(Box::new(CContext { vctx, ctx }));
    // SAFETY: b is a fresh, valid allocation.
    unsafe { &raw mut (*b).vctx.context }
}

/// `ibv_close_device`: 0. Objects still open on the context keep the kernel context alive
/// until they are destroyed (rverbs objects hold their parents).
///
/// # Safety
/// `context` came from [`ibv_open_device`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    // SAFETY: caller's contract: the CContext was boxed by ibv_open_device.
    drop(unsafe { Box::from_raw(cctx(context) as *const CContext as *mut CContext) });
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    match c.ctx.query_device() {
        Ok(a) => {
            // SAFETY: caller's contract.
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
    // SAFETY: input is NULL or readable (caller's contract).
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: the ops table is only reachable from our contexts.
    let c = unsafe { cctx(context) };
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
    // SAFETY: the caller gave attr_size writable bytes; we copy at most that many.
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    match c.ctx.query_port(u32::from(port)) {
        Ok(p) => {
            let a = port_attr(&p);
            let n = len.min(size_of::<ibv_port_attr>());
            // SAFETY: caller's contract; at most len bytes.
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
    // SAFETY: the caller gave len writable bytes at attr.
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
    // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    if index < 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    match c.ctx.query_gid(u32::from(port), index as u32) {
        Ok(g) => {
            // SAFETY: caller's contract.
            unsafe { gid.write(g.gid.0) };
            0
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && in_table(c, port, index) => {
            // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    match c.ctx.query_gid(u32::from(port), index) {
        Ok(g) => {
            let v = if g.gid_type == GidType::ROCE_V2 { 1 } else { 0 };
            // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
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
            // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
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
    // SAFETY: data.len() < size bytes plus the NUL fit in buf.
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
    /// What C sees.
    pub c: ibv_pd,
    /// The rverbs PD.
    pub pd: Arc<Pd>,
}

/// `ibv_alloc_pd`.
///
/// # Safety
/// `context` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    match Pd::alloc(&c.ctx) {
        Ok(pd) => {
            let b = Box::new(CPd {
                c: ibv_pd {
                    context,
                    handle: pd.handle(),
                },
                pd,
            });
            Box::into_raw(b).cast()
        }
        Err(e) => null_with(&e),
    }
}

/// # Safety
/// `pd` is a live PD of ours.
unsafe fn cpd<'a>(pd: *mut ibv_pd) -> &'a CPd {
    // SAFETY: the ibv_pd is the first field of its CPd.
    unsafe { &*(pd as *const CPd) }
}

/// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs, SRQs or AHs still use it.
///
/// # Safety
/// `pd` came from [`ibv_alloc_pd`]; on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: caller's contract.
    if Arc::strong_count(&unsafe { cpd(pd) }.pd) > 1 {
        return libc::EBUSY;
    }
    // SAFETY: boxed by ibv_alloc_pd.
    drop(unsafe { Box::from_raw(pd as *mut CPd) });
    0
}

/// An `ibv_mr` and the registration behind it.
#[repr(C)]
pub struct CMr {
    /// What C sees.
    pub c: ibv_mr,
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
    // SAFETY: forwarded.
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
    // SAFETY: forwarded.
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
    // SAFETY: caller's contract.
    let p = unsafe { cpd(pd) };
    if iova != addr as u64 {
        set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let access = AccessFlags::from_bits_retain(access & !ACCESS_OPTIONAL_RANGE);
    // SAFETY: the caller keeps the range mapped while the MR lives (ibv_reg_mr's contract).
    match unsafe { register_raw(&p.pd, addr as u64, length, access) } {
        Ok(mr) => {
            let b = Box::new(CMr {
                c: ibv_mr {
                    context: p.c.context,
                    pd,
                    addr,
                    length,
                    handle: 0,
                    lkey: mr.lkey,
                    rkey: mr.rkey,
                },
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
    let p = mr as *mut CMr;
    // SAFETY: boxed by ibv_reg_mr_iova2; the registration is moved out and either consumed
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
    /// What C sees.
    pub c: ibv_comp_channel,
    /// The rverbs channel.
    pub ch: Arc<CompChannel>,
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    let ch = match CompChannel::create(&c.ctx).and_then(|ch| ch.set_blocking(true).map(|()| ch)) {
        Ok(ch) => ch,
        Err(e) => return null_with(&e),
    };
    let b = Box::new(CChannel {
        c: ibv_comp_channel {
            context,
            fd: ch.as_fd().as_raw_fd(),
            refcnt: 0,
        },
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
    // SAFETY: the ibv_comp_channel is the first field of its CChannel.
    let ch = unsafe { &*(channel as *const CChannel) };
    if Arc::strong_count(&ch.ch) > 1 {
        return libc::EBUSY;
    }
    // SAFETY: boxed by ibv_create_comp_channel.
    drop(unsafe { Box::from_raw(channel as *mut CChannel) });
    0
}

/// An `ibv_cq` (room for an `ibv_cq_ex`, whose first fields are those of `ibv_cq`) and its
/// rverbs CQ.
#[repr(C)]
pub struct CCq {
    /// What C sees: an `ibv_cq`, or all of the `ibv_cq_ex` for a CQ made by
    /// `ibv_create_cq_ex`.
    pub c: ibv_cq_ex,
    /// The rverbs CQ.
    pub cq: Arc<Cq>,
    /// The extended CQ's polling state (`ibv_create_cq_ex` only).
    pub ex: Option<Box<crate::cq_ex::CqEx>>,
}

struct CqPtr(*mut CCq);
// SAFETY: only used to find the CQ an event names; the CQ outlives its map entry.
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

/// CQs by the user handle their completion and async events carry.
static CQS: Mutex<Option<HashMap<u64, CqPtr, std::hash::BuildHasherDefault<HandleHasher>>>> =
    Mutex::new(None);

/// The CQ the last completion event named (or NULL), so that `ibv_get_cq_event` of a program
/// that waits on one CQ skips the lock and the map. Written only while [`CQS`] is locked and
/// only with a CQ that is in it; [`forget_cq`] clears it (under the same lock) before a CQ is
/// freed. So a non-NULL value names a CQ that is in `CQS` at that moment, as a map entry does.
static EVENT_CQ: AtomicPtr<CCq> = AtomicPtr::new(null_mut());

/// Takes the CQ `p` (user handle `handle`) out of [`CQS`] and [`EVENT_CQ`]: before it is
/// freed, by whatever destroys it.
fn forget_cq(handle: u64, p: *mut CCq) {
    let mut m = CQS.lock().unwrap_or_else(|p| p.into_inner());
    // Relaxed: the lock (held by every writer) orders this before the CQ is freed, and
    // nothing is read through the old value here.
    let _ = EVENT_CQ.compare_exchange(p, null_mut(), Ordering::Relaxed, Ordering::Relaxed);
    if let Some(m) = m.as_mut() {
        m.remove(&handle);
    }
}

/// A C object's address, by the user handle the kernel's async events name it with.
struct Addr(usize);

/// QPs (key `(0, handle)`) and SRQs (key `(1, handle)`), for async events.
static OBJS: Mutex<Option<HashMap<(u8, u64), Addr>>> = Mutex::new(None);

fn register(kind: u8, handle: u64, p: usize) {
    OBJS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert((kind, handle), Addr(p));
}

fn unregister(kind: u8, handle: u64) {
    if let Some(m) = OBJS.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
        m.remove(&(kind, handle));
    }
}

fn lookup(kind: u8, handle: u64) -> Option<usize> {
    OBJS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|m| m.get(&(kind, handle)).map(|a| a.0))
}

/// `ibv_create_cq`.
///
/// # Safety
/// `context` is ours; `channel` is NULL or a channel of this context.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    if cqe < 0 || comp_vector < 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let opts = CqOptions {
        channel: (!channel.is_null())
            // SAFETY: caller's contract: a live channel of ours.
            .then(|| unsafe { &*(channel as *const CChannel) }.ch.clone()),
        comp_vector: comp_vector as u32,
    };
    let cq = match Cq::create(&c.ctx, cqe as u32, opts) {
        Ok(cq) => cq,
        Err(e) => return null_with(&e),
    };
    if !channel.is_null() {
        // SAFETY: caller's contract.
        unsafe { (*channel).refcnt += 1 };
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
        c: ic,
        cq,
        ex: None,
    }));
    CQS.lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::default)
        .insert(handle, CqPtr(p));
    p.cast()
}

/// # Safety
/// `cq` is a live CQ of ours.
pub(crate) unsafe fn ccq<'a>(cq: *mut ibv_cq) -> &'a CCq {
    // SAFETY: the ibv_cq is the first field of its CCq.
    unsafe { &*(cq as *const CCq) }
}

/// `ibv_resize_cq`.
///
/// # Safety
/// `cq` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    if cqe <= 0 {
        return libc::EINVAL;
    }
    // SAFETY: caller's contract.
    let c = unsafe { ccq(cq) };
    match c.cq.resize(cqe as u32) {
        Ok(n) => {
            // SAFETY: caller's contract; C reads cqe only between calls.
            unsafe { (*cq).cqe = n as c_int };
            0
        }
        Err(e) => fail(&e),
    }
}

/// `ibv_destroy_cq`: `EBUSY` while a QP uses it.
///
/// # Safety
/// `cq` came from [`ibv_create_cq`]; on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: caller's contract.
    let c = unsafe { ccq(cq) };
    if Arc::strong_count(&c.cq) > 1 {
        return libc::EBUSY;
    }
    forget_cq(c.cq.user_handle(), cq as *mut CCq);
    // SAFETY: boxed by ibv_create_cq.
    let b = unsafe { Box::from_raw(cq as *mut CCq) };
    if !b.c.channel.is_null() {
        // SAFETY: the channel outlives its CQs (destroying it fails while they hold it).
        unsafe { (*b.c.channel).refcnt -= 1 };
    }
    drop(b);
    0
}

/// `ibv_get_cq_event`: reads one event from the channel (blocking unless the caller made
/// the fd non-blocking); 0, or -1 with errno.
///
/// # Safety
/// `channel` is ours; `cq` and `cq_context` are writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: caller's contract: a live channel; the fd is open while it lives.
    let fd = unsafe { BorrowedFd::borrow_raw((*channel).fd) };
    let mut buf = [0u8; 8];
    match rustix::io::read(fd, &mut buf) {
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
    let handle = u64::from_ne_bytes(buf);
    // Acquire: pairs with the Release store below (made under the lock), so the CQ it names
    // is seen fully built.
    let last = EVENT_CQ.load(Ordering::Acquire);
    // SAFETY: a non-NULL EVENT_CQ names a CQ still in CQS when loaded (see EVENT_CQ); that
    // it stays alive while its event is returned is the caller's part, as for a CQ found in
    // the map (destroying a CQ while another thread takes its events is outside the contract).
    let found = if !last.is_null() && unsafe { (*last).cq.user_handle() } == handle {
        Some(last)
    } else {
        let m = CQS.lock().unwrap_or_else(|p| p.into_inner());
        let p = m.as_ref().and_then(|m| m.get(&handle).map(|p| p.0));
        if let Some(p) = p {
            // Release: see the load above. Under the lock, and p is in the map.
            EVENT_CQ.store(p, Ordering::Release);
        }
        p
    };
    let Some(p) = found else {
        set_errno(libc::EIO);
        return -1;
    };
    // SAFETY: p is in the map, so its CQ is alive.
    let c = unsafe { &*p };
    c.cq.event_received();
    // SAFETY: caller's contract.
    unsafe {
        *cq = p.cast();
        *cq_context = c.c.cq_context;
    }
    0
}

/// `ibv_ack_cq_events`.
///
/// # Safety
/// `cq` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // SAFETY: caller's contract.
    let c = unsafe { ccq(cq) };
    c.cq.ack_events(nevents);
    // SAFETY: caller's contract; the field is ours to count in.
    unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents) };
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
    // ibv_wc (integers); dst is writable (caller's contract) and cannot overlap our stack copy.
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
            // SAFETY: done + i < want (caller's contract).
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
    // SAFETY: the ops table is reachable only from our contexts; cq is live.
    let c = unsafe { ccq(cq) };
    let want = num_entries.max(0) as usize;
    // SAFETY: the caller gave num_entries writable ibv_wc.
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
    // SAFETY: as poll_cq_op.
    let c = unsafe { ccq(cq) };
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
    /// What C sees.
    pub c: ibv_srq,
    /// The rverbs SRQ.
    pub srq: Arc<Srq>,
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
    // SAFETY: caller's contract.
    let (p, a) = unsafe { (cpd(pd), &mut *attr) };
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
    c.context = p.c.context;
    c.srq_context = a.srq_context;
    c.pd = pd;
    c.handle = srq.handle();
    let h = srq.user_handle();
    let p = Box::into_raw(Box::new(CSrq { c, srq }));
    register(1, h, p as usize);
    p.cast()
}

/// # Safety
/// `srq` is a live SRQ of ours.
unsafe fn csrq<'a>(srq: *mut ibv_srq) -> &'a CSrq {
    // SAFETY: the ibv_srq is the first field of its CSrq.
    unsafe { &*(srq as *const CSrq) }
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
    // SAFETY: caller's contract.
    let (s, a) = unsafe { (csrq(srq), &*attr) };
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
    // SAFETY: caller's contract.
    let s = unsafe { csrq(srq) };
    match s.srq.query() {
        Ok(a) => {
            // SAFETY: caller's contract.
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

/// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
///
/// # Safety
/// `srq` came from [`ibv_create_srq`]; on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: caller's contract.
    if Arc::strong_count(&unsafe { csrq(srq) }.srq) > 1 {
        return libc::EBUSY;
    }
    // SAFETY: boxed by ibv_create_srq.
    let b = unsafe { Box::from_raw(srq as *mut CSrq) };
    unregister(1, b.srq.user_handle());
    drop(b);
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
        // SAFETY: caller's contract (ibv_sge is Sge; its layout is in the layout test).
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
    // SAFETY: sg_list has num_sge entries (caller's contract).
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
    // SAFETY: caller's contract: wr is NULL or a valid request.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // SAFETY: caller's contract.
        let Some(r) = (unsafe { recv_wr(w) }) else {
            // SAFETY: caller's contract.
            unsafe { *bad = wr };
            return libc::EINVAL;
        };
        return match post(std::slice::from_ref(&r)) {
            Ok(()) => 0,
            Err(e) => {
                // SAFETY: caller's contract.
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
            // SAFETY: caller's contract: wr is a valid request.
            let w = unsafe { &*wr };
            // SAFETY: caller's contract.
            let Some(r) = (unsafe { recv_wr(w) }) else {
                // SAFETY: caller's contract.
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
            // SAFETY: caller's contract.
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
    // SAFETY: srq is ours (ops table).
    let s = unsafe { csrq(srq) };
    // SAFETY: ibv_post_srq_recv's contract: the SGEs name registered memory that stays valid
    // until the completions are polled.
    unsafe { post_recv_list(wr, bad, |w| s.srq.post_recv_raw(w)) }
}

// ---------------------------------------------------------------------------------------
// QP

/// An `ibv_qp` (inside an `ibv_qp_ex`, which begins with it) and its rverbs QP.
#[repr(C)]
pub struct CQp {
    /// What C sees: `c.qp_base`, and for a QP made by `ibv_create_qp_ex` all of the
    /// `ibv_qp_ex`.
    pub c: ibv_qp_ex,
    /// The rverbs QP.
    pub qp: Arc<Qp>,
    /// The extended send API's state (`ibv_create_qp_ex` only).
    pub ex: Option<Box<crate::qp_ex::QpEx>>,
}

/// # Safety
/// `qp` is a live QP of ours.
pub(crate) unsafe fn cqp<'a>(qp: *mut ibv_qp) -> &'a CQp {
    // SAFETY: the ibv_qp is the first field of its CQp.
    unsafe { &*(qp as *const CQp) }
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
    // SAFETY: caller's contract.
    let (p, a) = unsafe { (cpd(pd), &mut *init_attr) };
    if a.send_cq.is_null() || a.recv_cq.is_null() || a.qp_type > 255 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: caller's contract: CQs and SRQ of ours.
    let (scq, rcq) = unsafe { (ccq(a.send_cq).cq.clone(), ccq(a.recv_cq).cq.clone()) };
    // SAFETY: as above.
    let srq = (!a.srq.is_null()).then(|| unsafe { csrq(a.srq) }.srq.clone());
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
    c.context = p.c.context;
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
        c: ibv_qp_ex::from_base(c),
        qp,
        ex: None,
    }));
    register(0, h, p as usize);
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
    // SAFETY: caller's contract.
    let q = unsafe { cqp(qp) };
    match q.qp.modify(a) {
        Ok(()) => {
            if let Some(st) = a.qp_state {
                // SAFETY: caller's contract; libibverbs updates this field the same way.
                unsafe { (*qp).state = u32::from(st.0) };
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
    // SAFETY: caller's contract.
    let a = unsafe { &*attr };
    let mask = mask as u32;
    if mask & !MODIFY_SUPPORTED != 0 {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
    let q = unsafe { cqp(qp) };
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
    // SAFETY: caller's contract.
    unsafe {
        attr.write(o);
        (*qp).state = o.qp_state;
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

/// `ibv_destroy_qp`.
///
/// # Safety
/// `qp` came from [`ibv_create_qp`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: boxed by ibv_create_qp.
    let b = unsafe { Box::from_raw(qp as *mut CQp) };
    unregister(0, b.qp.user_handle());
    drop(b);
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
        // SAFETY: a BIND_MW request names a window (and region) of ours.
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
    // SAFETY: for UD QPs the request names an AH of ours (checked non-NULL below).
    let op = unsafe { send_op(w) }?;
    // SAFETY: sg_list has num_sge entries (caller's contract).
    let sge = unsafe { sge_list(w.sg_list, w.num_sge) }?;
    let ud_dest = if ud {
        // SAFETY: reading a union of plain data (a UD request uses its `ud` member).
        let u = unsafe { w.wr.ud };
        if u.ah.is_null() {
            return None;
        }
        // SAFETY: non-NULL, so an AH of ours (caller's contract).
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
    // SAFETY: qp is ours (ops table).
    let q = unsafe { cqp(qp) };
    let ud = q.qp.qp_type() == QpType::UD;
    // SAFETY: ibv_post_send's contract: wr is NULL or a valid request.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // SAFETY: as above; AHs of UD requests are ours.
        let Some(s) = (unsafe { send_wr(w, ud) }) else {
            // SAFETY: caller's contract: bad is writable.
            unsafe { *bad = wr };
            return libc::EINVAL;
        };
        // SAFETY: ibv_post_send's contract: the SGEs name registered memory that stays valid
        // until the completions are polled, and INLINE sources are not written during the call
        // (C code that writes them concurrently races libibverbs' own copy just the same).
        return match unsafe { q.qp.post_send_raw(std::slice::from_ref(&s)) } {
            Ok(()) => 0,
            Err(e) => {
                // SAFETY: caller's contract.
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
            // SAFETY: ibv_post_send's contract: wr is a valid request.
            let w = unsafe { &*wr };
            // SAFETY: as above.
            let Some(s) = (unsafe { send_wr(w, ud) }) else {
                // SAFETY: caller's contract.
                unsafe { *bad = wr };
                return libc::EINVAL;
            };
            ptrs[n] = wr;
            wrs[n] = s;
            n += 1;
            wr = w.next;
        }
        // SAFETY: ibv_post_send's contract: the SGEs name registered memory that stays valid
        // until the completions are polled, and INLINE sources are not written during the call
        // (C code that writes them concurrently races libibverbs' own copy just the same).
        if let Err(e) = unsafe { q.qp.post_send_raw(&wrs[..n]) } {
            let failed = e.posted().min(n - 1);
            // SAFETY: caller's contract.
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
    // SAFETY: qp is ours (ops table).
    let q = unsafe { cqp(qp) };
    // SAFETY: ibv_post_recv's contract: the SGEs name registered memory that stays valid
    // until the completions are polled.
    unsafe { post_recv_list(wr, bad, |w| q.qp.post_recv_raw(w)) }
}

// ---------------------------------------------------------------------------------------
// AH

/// An `ibv_ah` and its rverbs AH.
#[repr(C)]
pub struct CAh {
    /// What C sees.
    pub c: ibv_ah,
    /// The rverbs AH.
    pub ah: Arc<Ah>,
}

/// `ibv_create_ah`.
///
/// # Safety
/// `pd` is ours; `attr` is readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: caller's contract.
    let (p, a) = unsafe { (cpd(pd), &*attr) };
    match Ah::create(&p.pd, ah_attr_from(a)) {
        Ok(ah) => {
            let c = ibv_ah {
                context: p.c.context,
                pd,
                handle: ah.handle(),
            };
            Box::into_raw(Box::new(CAh { c, ah })).cast()
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
    // SAFETY: caller's contract.
    let (c, wc) = unsafe { (cctx(context), wc_for_reply(&*wc)) };
    let mut area = [0u8; rverbs_uverbs::ah::GRH_LEN];
    if wc.wc_flags.contains(WcFlags::GRH) {
        // SAFETY: caller's contract: 40 readable bytes (a copy: the buffer is the device's
        // to write while other receives are posted on it).
        unsafe { std::ptr::copy_nonoverlapping(grh as *const u8, area.as_mut_ptr(), area.len()) };
    }
    match AhAttr::reply_to(&c.ctx, port_num, &wc, &area) {
        Ok(a) => {
            // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
    let context = unsafe { (*pd).context };
    let mut attr = std::mem::MaybeUninit::<ibv_ah_attr>::zeroed();
    // SAFETY: caller's contract; `attr` is writable.
    if unsafe { ibv_init_ah_from_wc(context, port_num, wc, grh, attr.as_mut_ptr()) } != 0 {
        return null_mut();
    }
    // SAFETY: initialized by ibv_init_ah_from_wc; `pd` per the caller's contract.
    unsafe { ibv_create_ah(pd, attr.as_mut_ptr()) }
}

/// `ibv_destroy_ah`.
///
/// # Safety
/// `ah` came from [`ibv_create_ah`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: boxed by ibv_create_ah.
    drop(unsafe { Box::from_raw(ah as *mut CAh) });
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    match c.ctx.query_gid(port, index) {
        Ok(g) => {
            // SAFETY: caller's contract (entry_size checked above).
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
    let table = match c.ctx.query_gid_table() {
        Ok(t) => t,
        Err(e) => return -(fail(&e) as isize),
    };
    if table.len() > max_entries {
        return -(libc::EINVAL as isize);
    }
    for (i, g) in table.iter().enumerate() {
        // SAFETY: i < max_entries entries of entry_size bytes each.
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
    // SAFETY: caller's contract.
    let c = unsafe { cctx(context) };
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
    let element: *mut c_void = match ev.element {
        AsyncElement::Cq(h) => CQS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|m| m.get(&h).map(|p| p.0.cast()))
            .unwrap_or(null_mut()),
        AsyncElement::Qp(h) => lookup(0, h).unwrap_or(0) as *mut c_void,
        AsyncElement::Srq(h) => lookup(1, h).unwrap_or(0) as *mut c_void,
        AsyncElement::Port(p) => usize::from(p) as *mut c_void,
        AsyncElement::Device | AsyncElement::Unknown(_) => null_mut(),
        // AsyncElement is non_exhaustive: an element kind added later has no C object here yet.
        _ => null_mut(),
    };
    // SAFETY: caller's contract.
    unsafe {
        event.write(ibv_async_event {
            element,
            event_type: ev.event_type.0,
        })
    };
    0
}

/// `ibv_ack_async_event`: nothing to do (destroying an object never waits for acks here).
///
/// # Safety
/// Any pointer.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(_event: *mut ibv_async_event) {}

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
        // SAFETY: forwarded; v is writable.
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
    // SAFETY: size >= SYS.len() writable bytes.
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
    // SAFETY: caller's contract (read_unaligned: C gives no alignment promise beyond 4).
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
    // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
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
    // SAFETY: caller's contract.
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
