//! Contexts (`ibv_context`): open and close, device, port, GID and P_Key queries.

use super::*;

/// An opened device: the `verbs_context` (with the `ibv_context` at its end) and the rverbs
/// context.
#[repr(C)]
pub struct CContext {
    /// What C sees (through `vctx.context`; \[c-struct\]).
    pub vctx: UnsafeCell<verbs_context>,
    /// The rverbs context.
    pub ctx: Arc<Context>,
}

// The ibv_context is the first field of the verbs_context, CContext's first field.
from_c!(
    CContext => ibv_context, "ibv_context",
    offset_of!(CContext, vctx) + offset_of!(verbs_context, context)
);

symver!(ibv_open_device => "IBVERBS_1.1");
/// `ibv_open_device`.
///
/// # Safety
/// `device` is one of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    // SAFETY: [object] device.
    let d = obj!(unsafe { CDevice::from_c(device) }, null);
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
    vctx.create_qp_ex = Some(super::qp_ex::create_qp_ex_op);
    vctx.create_cq_ex = Some(super::cq_ex::create_cq_ex_op);
    vctx.advise_mr = Some(super::mr::advise_mr_op);
    vctx.sz = size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = device;
    c.ops.poll_cq = Some(poll_cq_op);
    c.ops.req_notify_cq = Some(req_notify_cq_op);
    c.ops.post_send = Some(post_send_op);
    c.ops.post_recv = Some(post_recv_op);
    c.ops.post_srq_recv = Some(post_srq_recv_op);
    c.ops.alloc_mw = Some(super::mw::alloc_mw_op);
    c.ops.bind_mw = Some(super::mw::bind_mw_op);
    c.ops.dealloc_mw = Some(super::mw::dealloc_mw_op);
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

symver!(ibv_close_device => "IBVERBS_1.1");
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
    drop(unsafe { Box::from_raw(CContext::owner_ptr(context)) });
    0
}

symver!(ibv_query_device => "IBVERBS_1.1");
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
    let c = obj!(unsafe { CContext::from_c(context) }, errno);
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
    let c = obj!(unsafe { CContext::from_c(context) }, errno);
    let o = match c.ctx.query_device() {
        Ok(a) => device_attr_ex(&a),
        Err(e) => return fail(&e),
    };
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: [buf] the caller gave attr_size writable bytes; we copy at most that many.
    unsafe { ptr::copy_nonoverlapping((&raw const o).cast::<u8>(), attr.cast::<u8>(), n) };
    0
}

/// The extended attributes libibverbs' `ibv_device_attr_ex` carries, from the device's.
fn device_attr_ex(a: &rverbs_uverbs::device_attr::DeviceAttr) -> ibv_device_attr_ex {
    // SAFETY: plain integers: all-zero is valid.
    let mut o: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
    o.orig_attr = device_attr(a);
    o.odp_caps = ibv_odp_caps {
        general_caps: a.odp_caps.general_caps.bits(),
        rc_odp_caps: a.odp_caps.rc_odp_caps.bits(),
        uc_odp_caps: a.odp_caps.uc_odp_caps.bits(),
        ud_odp_caps: a.odp_caps.ud_odp_caps.bits(),
    };
    o.xrc_odp_caps = a.odp_caps.xrc_odp_caps.bits();
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
    o
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
    let c = obj!(unsafe { CContext::from_c(context) }, errno);
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

symver!(ibv_query_port => "IBVERBS_1.1");
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

symver!(ibv_query_port_speed => "IBVERBS_1.16");
/// `ibv_query_port_speed` (rdma-core 62): the port's effective bandwidth in 100 Mb/s units
/// into `*port_speed`; 0, or the errno (`Context::query_port_speed`: `EOPNOTSUPP` where the
/// kernel has no such method or the device reports no speed, as on rxe and siw; `EINVAL` for
/// a port the device lacks or a NULL pointer).
///
/// # Safety
/// `context` is ours; `port_speed` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port_speed(
    context: *mut ibv_context,
    port_num: u32,
    port_speed: *mut u64,
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, errno);
    if port_speed.is_null() {
        return null_arg("port_speed");
    }
    match c.ctx.query_port_speed(port_num) {
        Ok(speed) => {
            // SAFETY: [out] port_speed (non-NULL, checked above).
            unsafe { port_speed.write(speed) };
            0
        }
        Err(e) => fail(&e),
    }
}

symver!(ibv_query_gid => "IBVERBS_1.1");
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
    let c = obj!(unsafe { CContext::from_c(context) }, neg);
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

symver!(ibv_query_gid_type => "IBVERBS_PRIVATE_34");
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
    let c = obj!(unsafe { CContext::from_c(context) }, neg);
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

symver!(ibv_query_pkey => "IBVERBS_1.1");
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
    let c = obj!(unsafe { CContext::from_c(context) }, neg);
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

symver!(ibv_read_sysfs_file => "IBVERBS_1.0");
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

fn gid_entry(g: &rverbs_uverbs::gid::GidEntry) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid { raw: g.gid.0 },
        gid_index: g.index,
        port_num: g.port,
        gid_type: g.gid_type.0,
        ndev_ifindex: g.ndev_ifindex,
    }
}

symver!(_ibv_query_gid_ex => "IBVERBS_1.11");
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
    let c = obj!(unsafe { CContext::from_c(context) }, errno);
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

symver!(_ibv_query_gid_table => "IBVERBS_1.11");
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
    let c = obj!(unsafe { CContext::from_c(context) }, neg_errno);
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

symver!(ibv_get_pkey_index => "IBVERBS_1.5");
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

symver!(ibv_get_sysfs_path => "IBVERBS_1.0");
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

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;
    use std::ptr::addr_of;

    use super::*;

    #[test]
    fn context_offset_leads_back_to_its_owner() {
        let m = MaybeUninit::<CContext>::uninit();
        let owner = m.as_ptr().cast_mut();
        // SAFETY: addr_of! and raw_get only compute addresses inside the (uninitialised)
        // allocation; nothing is read and no reference is formed.
        let c = unsafe { addr_of!((*UnsafeCell::raw_get(addr_of!((*owner).vctx))).context) };
        let c = c.cast_mut();
        assert_eq!(CContext::owner_ptr(c), owner);
        assert_ne!(
            c.cast::<u8>(),
            owner.cast::<u8>(),
            "the context is not the first byte"
        );
    }
}
