//! Functions rverbs does not support (`EOPNOTSUPP`), multicast attach and detach, and the
//! entry points of rdma-core's provider interface (IBVERBS_PRIVATE_34).

use super::*;

/// Declares `extern "C"` functions that report `EOPNOTSUPP` the way their rdma-core
/// counterparts report failure (NULL + errno, or the given return value + errno), each with
/// its symbol version (`"VERSION" fn name(…) -> type = failure;`).
macro_rules! unsupported {
    ($($(#[$m:meta])* $ver:literal fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $fail:expr;)*) => {$(
        symver!($name => $ver);
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
    "IBVERBS_1.1" fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> c_int = -1;
    /// `ibv_import_device`.
    "IBVERBS_1.10" fn ibv_import_device(fd: c_int) -> *mut ibv_context = null_mut();
    /// `ibv_import_pd`.
    "IBVERBS_1.10" fn ibv_import_pd(ctx: *mut ibv_context, handle: u32) -> *mut ibv_pd = null_mut();
    /// `ibv_unimport_pd`.
    "IBVERBS_1.10" fn ibv_unimport_pd(pd: *mut ibv_pd) -> () = ();
    /// `ibv_import_mr`.
    "IBVERBS_1.10" fn ibv_import_mr(pd: *mut ibv_pd, handle: u32) -> *mut ibv_mr = null_mut();
    /// `ibv_unimport_mr`.
    "IBVERBS_1.10" fn ibv_unimport_mr(mr: *mut ibv_mr) -> () = ();
    /// `ibv_import_dm`.
    "IBVERBS_1.13" fn ibv_import_dm(ctx: *mut ibv_context, handle: u32) -> *mut c_void = null_mut();
    /// `ibv_unimport_dm`.
    "IBVERBS_1.13" fn ibv_unimport_dm(dm: *mut c_void) -> () = ();
    /// `ibv_query_ece`.
    "IBVERBS_1.10" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut c_void) -> c_int = libc::EOPNOTSUPP;
    /// `ibv_set_ece`.
    "IBVERBS_1.10" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut c_void) -> c_int = libc::EOPNOTSUPP;
}

symver!(ibv_attach_mcast => "IBVERBS_1.1");
/// `ibv_attach_mcast`: attaches the UD QP to the multicast group `gid` / `lid`
/// ([`Qp::attach_mcast`]); 0 or an errno (`EINVAL` for a QP that is not UD, a GID that is not
/// multicast, NULL arguments). Attaching twice is one attachment, as in the kernel.
///
/// # Safety
/// `qp` is NULL or an \[object\] QP; `gid` is NULL or points at a readable `ibv_gid`.
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: [object] qp; gid as documented.
    unsafe { mcast(qp, gid, lid, true) }
}

symver!(ibv_detach_mcast => "IBVERBS_1.1");
/// `ibv_detach_mcast`: detaches the QP from the group ([`Qp::detach_mcast`]); `EINVAL` for a
/// group it is not attached to.
///
/// # Safety
/// As [`ibv_attach_mcast`].
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int {
    // SAFETY: [object] qp; gid as documented.
    unsafe { mcast(qp, gid, lid, false) }
}

/// # Safety
/// As [`ibv_attach_mcast`].
unsafe fn mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16, attach: bool) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    if gid.is_null() {
        return null_arg("ibv_gid");
    }
    // SAFETY: gid is non-NULL and readable (the caller's contract); a plain copy of 16 bytes
    // the caller owns (C memory, not registered memory).
    let g = Gid(unsafe { ptr::read_unaligned(gid) }.raw);
    let r = if attach {
        q.qp.attach_mcast(&g, lid)
    } else {
        q.qp.detach_mcast(&g, lid)
    };
    match r {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

symver!(ibv_query_qp_data_in_order => "IBVERBS_1.14");
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

/// rdma-core's provider libraries (Debian's libmlx5.so.1, libefa.so.1, … which perftest and
/// pyverbs link directly) import these libibverbs-private entry points; they are exported
/// so that those libraries load. rverbs does not host rdma-core's providers (it has its own,
/// `rverbs-provider`), so none of them is ever reached through a device of ours: a call
/// fails with `EOPNOTSUPP` (or NULL, or does nothing, for the pointer and void ones). They
/// are declared without parameters; on the C ABIs rverbs supports the caller's arguments
/// are then simply ignored. All are in rdma-core 44's private version node.
macro_rules! provider_entry_points {
    (int: $($i:ident),*; ptr: $($p:ident),*; void: $($v:ident),*;) => {
        $(symver!($i => "IBVERBS_PRIVATE_34");)*
        $(symver!($p => "IBVERBS_PRIVATE_34");)*
        $(symver!($v => "IBVERBS_PRIVATE_34");)*
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
    int: execute_ioctl, ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw, ibv_cmd_alloc_pd, ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters, ibv_cmd_create_cq, ibv_cmd_create_cq_ex, ibv_cmd_create_cq_ex2, ibv_cmd_create_flow, ibv_cmd_create_flow_action_esp, ibv_cmd_create_qp, ibv_cmd_create_qp_ex2, ibv_cmd_create_qp_ex, ibv_cmd_create_rwq_ind_table, ibv_cmd_create_srq, ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw, ibv_cmd_dealloc_pd, ibv_cmd_dereg_mr, ibv_cmd_destroy_ah, ibv_cmd_destroy_counters, ibv_cmd_destroy_cq, ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp, ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq, ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq, ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex, ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd, ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr, ibv_cmd_query_port, ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters, ibv_cmd_reg_dm_mr, ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_rereg_mr, ibv_cmd_resize_cq;
    ptr: _verbs_init_and_alloc_context, verbs_open_device;
    void: __verbs_log, verbs_init_cq, verbs_set_ops, verbs_uninit_context;
}

symver!(verbs_register_driver_34 => "IBVERBS_PRIVATE_34");
/// `verbs_register_driver_34`: called by each rdma-core provider library's constructor when
/// it is loaded. The registration is ignored: devices are served by rverbs' own providers.
///
/// # Safety
/// Any pointer (not dereferenced).
#[no_mangle]
pub unsafe extern "C" fn verbs_register_driver_34(_ops: *const c_void) {}

symver!(verbs_allow_disassociate_destroy => "IBVERBS_PRIVATE_34");
/// `verbs_allow_disassociate_destroy` (a flag providers read): false.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: bool = false;

symver!(ibv_dontfork_range => "IBVERBS_1.1");
/// `ibv_dontfork_range`: 0 (nothing to do, see [`ibv_fork_init`]).
///
/// # Safety
/// Any range (not touched).
#[no_mangle]
pub unsafe extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

symver!(ibv_dofork_range => "IBVERBS_1.1");
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
    "IBVERBS_1.1" fn ibv_resolve_eth_l2_from_gid(ctx: *mut ibv_context, attr: *mut c_void, mac: *mut u8, vid: *mut u16) -> c_int = libc::EOPNOTSUPP;
}
