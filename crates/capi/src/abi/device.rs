//! `<infiniband/verbs.h>`: devices, contexts and their ops tables, device and port
//! attributes.

use super::*;

/// `pthread_mutex_t`: callers never touch it; it is zero-initialised (glibc's and musl's
/// `PTHREAD_MUTEX_INITIALIZER`) and only its size and alignment matter here.
pub type pthread_mutex_t = libc::pthread_mutex_t;
/// `pthread_cond_t`, like [`pthread_mutex_t`].
pub type pthread_cond_t = libc::pthread_cond_t;

/// An ops-table slot we leave empty (NULL): the inline functions of `verbs.h` test it.
pub type VoidFn = Option<unsafe extern "C" fn()>;

/// `struct _ibv_device_ops` (obsolete, never called).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct _ibv_device_ops {
    /// Never used.
    pub _dummy1: VoidFn,
    /// Never used.
    pub _dummy2: VoidFn,
}

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`.
#[repr(C)]
pub struct ibv_device {
    /// Obsolete ops.
    pub _ops: _ibv_device_ops,
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    /// Kernel device name, e.g. `rxe0`.
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// uverbs device name, e.g. `uverbs0`.
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// `/sys/class/infiniband_verbs/uverbsN`.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// `/sys/class/infiniband/<name>`.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `poll_cq` slot type.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `req_notify_cq` slot type.
pub type ReqNotifyFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `post_send` slot type.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `alloc_mw` slot type (the `enum ibv_mw_type` argument is an `unsigned int` in the ABI).
pub type AllocMwFn = unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw;
/// `bind_mw` slot type.
pub type BindMwFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int;
/// `dealloc_mw` slot type.
pub type DeallocMwFn = unsafe extern "C" fn(*mut ibv_mw) -> c_int;
/// `post_recv` slot type.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `post_srq_recv` slot type.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops`: the data-path entries the inline functions call.
#[repr(C)]
pub struct ibv_context_ops {
    /// Legacy slot (NULL).
    pub _compat_query_device: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_query_port: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_alloc_pd: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_dealloc_pd: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_reg_mr: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_rereg_mr: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_dereg_mr: VoidFn,
    /// `ibv_alloc_mw`.
    pub alloc_mw: Option<AllocMwFn>,
    /// `ibv_bind_mw` (type 1 windows).
    pub bind_mw: Option<BindMwFn>,
    /// `ibv_dealloc_mw`.
    pub dealloc_mw: Option<DeallocMwFn>,
    /// Legacy slot (NULL).
    pub _compat_create_cq: VoidFn,
    /// `ibv_poll_cq`.
    pub poll_cq: Option<PollCqFn>,
    /// `ibv_req_notify_cq`.
    pub req_notify_cq: Option<ReqNotifyFn>,
    /// Legacy slot (NULL).
    pub _compat_cq_event: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_resize_cq: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_destroy_cq: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_create_srq: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_modify_srq: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_query_srq: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_destroy_srq: VoidFn,
    /// `ibv_post_srq_recv`.
    pub post_srq_recv: Option<PostSrqRecvFn>,
    /// Legacy slot (NULL).
    pub _compat_create_qp: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_query_qp: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_modify_qp: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_destroy_qp: VoidFn,
    /// `ibv_post_send`.
    pub post_send: Option<PostSendFn>,
    /// `ibv_post_recv`.
    pub post_recv: Option<PostRecvFn>,
    /// Legacy slot (NULL).
    pub _compat_create_ah: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_destroy_ah: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_attach_mcast: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_detach_mcast: VoidFn,
    /// Legacy slot (NULL).
    pub _compat_async_event: VoidFn,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    /// The device it was opened on.
    pub device: *mut ibv_device,
    /// Data-path entries.
    pub ops: ibv_context_ops,
    /// The uverbs command fd.
    pub cmd_fd: c_int,
    /// The async event fd.
    pub async_fd: c_int,
    /// Completion vectors.
    pub num_comp_vectors: c_int,
    /// Unused by us.
    pub mutex: pthread_mutex_t,
    /// [`VERBS_ABI_IS_EXTENDED`]: a [`verbs_context`] surrounds this struct.
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` of an extended context.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `query_port` slot of [`verbs_context`].
pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
/// `query_device_ex` slot of [`verbs_context`].
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;

/// `advise_mr` slot of [`verbs_context`]: `(pd, advice, flags, sg_list, num_sge)`, returning
/// 0 or an errno value.
pub type AdviseMrFn =
    unsafe extern "C" fn(*mut ibv_pd, c_uint, u32, *mut crate::abi::queues::ibv_sge, u32) -> c_int;

/// `struct verbs_context`: the extension that sits *before* `ibv_context` in memory; the
/// inline functions reach it at a negative offset from the context pointer and check `sz`
/// before using a slot.
#[repr(C)]
pub struct verbs_context {
    /// `ibv_query_port` (the inline wrapper prefers it).
    pub query_port: Option<QueryPortFn>,
    /// `ibv_advise_mr` (the inline wrapper calls it; `EOPNOTSUPP` where NULL).
    pub advise_mr: Option<AdviseMrFn>,
    /// Not supported (NULL).
    pub alloc_null_mr: VoidFn,
    /// Not supported (NULL).
    pub read_counters: VoidFn,
    /// Not supported (NULL).
    pub attach_counters_point_flow: VoidFn,
    /// Not supported (NULL).
    pub create_counters: VoidFn,
    /// Not supported (NULL).
    pub destroy_counters: VoidFn,
    /// Not supported (NULL).
    pub reg_dm_mr: VoidFn,
    /// Not supported (NULL).
    pub alloc_dm: VoidFn,
    /// Not supported (NULL).
    pub free_dm: VoidFn,
    /// Not supported (NULL).
    pub modify_flow_action_esp: VoidFn,
    /// Not supported (NULL).
    pub destroy_flow_action: VoidFn,
    /// Not supported (NULL).
    pub create_flow_action_esp: VoidFn,
    /// Not supported (NULL).
    pub modify_qp_rate_limit: VoidFn,
    /// Not supported (NULL).
    pub alloc_parent_domain: VoidFn,
    /// Not supported (NULL).
    pub dealloc_td: VoidFn,
    /// Not supported (NULL).
    pub alloc_td: VoidFn,
    /// Not supported (NULL).
    pub modify_cq: VoidFn,
    /// Not supported (NULL).
    pub post_srq_ops: VoidFn,
    /// Not supported (NULL).
    pub destroy_rwq_ind_table: VoidFn,
    /// Not supported (NULL).
    pub create_rwq_ind_table: VoidFn,
    /// Not supported (NULL).
    pub destroy_wq: VoidFn,
    /// Not supported (NULL).
    pub modify_wq: VoidFn,
    /// Not supported (NULL).
    pub create_wq: VoidFn,
    /// Not supported (NULL).
    pub query_rt_values: VoidFn,
    /// `ibv_create_cq_ex` (`cq_ex.rs`).
    pub create_cq_ex: Option<CreateCqExFn>,
    /// libibverbs-private (NULL).
    pub priv_: *mut c_void,
    /// `ibv_query_device_ex`.
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// Not supported (NULL).
    pub ibv_destroy_flow: VoidFn,
    /// Placeholder.
    pub ABI_placeholder2: VoidFn,
    /// Not supported (NULL).
    pub ibv_create_flow: VoidFn,
    /// Placeholder.
    pub ABI_placeholder1: VoidFn,
    /// Not supported (NULL).
    pub open_qp: VoidFn,
    /// `ibv_create_qp_ex` without the extended send API (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`).
    pub create_qp_ex: Option<CreateQpExFn>,
    /// Not supported (NULL).
    pub get_srq_num: VoidFn,
    /// Not supported (NULL).
    pub create_srq_ex: VoidFn,
    /// Not supported (NULL).
    pub open_xrcd: VoidFn,
    /// Not supported (NULL).
    pub close_xrcd: VoidFn,
    /// Placeholder.
    pub _ABI_placeholder3: u64,
    /// `sizeof(struct verbs_context)`: the slots a caller may use.
    pub sz: usize,
    /// The public part; must be last.
    pub context: ibv_context,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr {
    /// Firmware version text.
    pub fw_ver: [c_char; 64],
    /// Big-endian.
    pub node_guid: u64,
    /// Big-endian.
    pub sys_image_guid: u64,
    /// See `ibv_query_device(3)` for the fields below.
    pub max_mr_size: u64,
    #[allow(missing_docs)]
    pub page_size_cap: u64,
    #[allow(missing_docs)]
    pub vendor_id: u32,
    #[allow(missing_docs)]
    pub vendor_part_id: u32,
    #[allow(missing_docs)]
    pub hw_ver: u32,
    #[allow(missing_docs)]
    pub max_qp: c_int,
    #[allow(missing_docs)]
    pub max_qp_wr: c_int,
    #[allow(missing_docs)]
    pub device_cap_flags: c_uint,
    #[allow(missing_docs)]
    pub max_sge: c_int,
    #[allow(missing_docs)]
    pub max_sge_rd: c_int,
    #[allow(missing_docs)]
    pub max_cq: c_int,
    #[allow(missing_docs)]
    pub max_cqe: c_int,
    #[allow(missing_docs)]
    pub max_mr: c_int,
    #[allow(missing_docs)]
    pub max_pd: c_int,
    #[allow(missing_docs)]
    pub max_qp_rd_atom: c_int,
    #[allow(missing_docs)]
    pub max_ee_rd_atom: c_int,
    #[allow(missing_docs)]
    pub max_res_rd_atom: c_int,
    #[allow(missing_docs)]
    pub max_qp_init_rd_atom: c_int,
    #[allow(missing_docs)]
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: u32,
    #[allow(missing_docs)]
    pub max_ee: c_int,
    #[allow(missing_docs)]
    pub max_rdd: c_int,
    #[allow(missing_docs)]
    pub max_mw: c_int,
    #[allow(missing_docs)]
    pub max_raw_ipv6_qp: c_int,
    #[allow(missing_docs)]
    pub max_raw_ethy_qp: c_int,
    #[allow(missing_docs)]
    pub max_mcast_grp: c_int,
    #[allow(missing_docs)]
    pub max_mcast_qp_attach: c_int,
    #[allow(missing_docs)]
    pub max_total_mcast_qp_attach: c_int,
    #[allow(missing_docs)]
    pub max_ah: c_int,
    #[allow(missing_docs)]
    pub max_fmr: c_int,
    #[allow(missing_docs)]
    pub max_map_per_fmr: c_int,
    #[allow(missing_docs)]
    pub max_srq: c_int,
    #[allow(missing_docs)]
    pub max_srq_wr: c_int,
    #[allow(missing_docs)]
    pub max_srq_sge: c_int,
    #[allow(missing_docs)]
    pub max_pkeys: u16,
    #[allow(missing_docs)]
    pub local_ca_ack_delay: u8,
    #[allow(missing_docs)]
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub struct ibv_query_device_ex_input {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_odp_caps {
    #[allow(missing_docs)]
    pub general_caps: u64,
    #[allow(missing_docs)]
    pub rc_odp_caps: u32,
    #[allow(missing_docs)]
    pub uc_odp_caps: u32,
    #[allow(missing_docs)]
    pub ud_odp_caps: u32,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tso_caps {
    #[allow(missing_docs)]
    pub max_tso: u32,
    #[allow(missing_docs)]
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rss_caps {
    #[allow(missing_docs)]
    pub supported_qpts: u32,
    #[allow(missing_docs)]
    pub max_rwq_indirection_tables: u32,
    #[allow(missing_docs)]
    pub max_rwq_indirection_table_size: u32,
    #[allow(missing_docs)]
    pub rx_hash_fields_mask: u64,
    #[allow(missing_docs)]
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_packet_pacing_caps {
    #[allow(missing_docs)]
    pub qp_rate_limit_min: u32,
    #[allow(missing_docs)]
    pub qp_rate_limit_max: u32,
    #[allow(missing_docs)]
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_tm_caps {
    #[allow(missing_docs)]
    pub max_rndv_hdr_size: u32,
    #[allow(missing_docs)]
    pub max_num_tags: u32,
    #[allow(missing_docs)]
    pub flags: u32,
    #[allow(missing_docs)]
    pub max_ops: u32,
    #[allow(missing_docs)]
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_cq_moderation_caps {
    #[allow(missing_docs)]
    pub max_cq_count: u16,
    #[allow(missing_docs)]
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_pci_atomic_caps {
    #[allow(missing_docs)]
    pub fetch_add: u16,
    #[allow(missing_docs)]
    pub swap: u16,
    #[allow(missing_docs)]
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_device_attr_ex {
    /// The legacy attributes.
    pub orig_attr: ibv_device_attr,
    #[allow(missing_docs)]
    pub comp_mask: u32,
    #[allow(missing_docs)]
    pub odp_caps: ibv_odp_caps,
    #[allow(missing_docs)]
    pub completion_timestamp_mask: u64,
    #[allow(missing_docs)]
    pub hca_core_clock: u64,
    #[allow(missing_docs)]
    pub device_cap_flags_ex: u64,
    #[allow(missing_docs)]
    pub tso_caps: ibv_tso_caps,
    #[allow(missing_docs)]
    pub rss_caps: ibv_rss_caps,
    #[allow(missing_docs)]
    pub max_wq_type_rq: u32,
    #[allow(missing_docs)]
    pub packet_pacing_caps: ibv_packet_pacing_caps,
    #[allow(missing_docs)]
    pub raw_packet_caps: u32,
    #[allow(missing_docs)]
    pub tm_caps: ibv_tm_caps,
    #[allow(missing_docs)]
    pub cq_mod_caps: ibv_cq_moderation_caps,
    #[allow(missing_docs)]
    pub max_dm_size: u64,
    #[allow(missing_docs)]
    pub pci_atomic_caps: ibv_pci_atomic_caps,
    #[allow(missing_docs)]
    pub xrc_odp_caps: u32,
    #[allow(missing_docs)]
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    #[allow(missing_docs)]
    pub gid_tbl_len: c_int,
    #[allow(missing_docs)]
    pub port_cap_flags: u32,
    #[allow(missing_docs)]
    pub max_msg_sz: u32,
    #[allow(missing_docs)]
    pub bad_pkey_cntr: u32,
    #[allow(missing_docs)]
    pub qkey_viol_cntr: u32,
    #[allow(missing_docs)]
    pub pkey_tbl_len: u16,
    #[allow(missing_docs)]
    pub lid: u16,
    #[allow(missing_docs)]
    pub sm_lid: u16,
    #[allow(missing_docs)]
    pub lmc: u8,
    #[allow(missing_docs)]
    pub max_vl_num: u8,
    #[allow(missing_docs)]
    pub sm_sl: u8,
    #[allow(missing_docs)]
    pub subnet_timeout: u8,
    #[allow(missing_docs)]
    pub init_type_reply: u8,
    #[allow(missing_docs)]
    pub active_width: u8,
    #[allow(missing_docs)]
    pub active_speed: u8,
    #[allow(missing_docs)]
    pub phys_state: u8,
    #[allow(missing_docs)]
    pub link_layer: u8,
    #[allow(missing_docs)]
    pub flags: u8,
    #[allow(missing_docs)]
    pub port_cap_flags2: u16,
}

/// Bytes of `ibv_port_attr` the exported `ibv_query_port@IBVERBS_1.1` writes
/// (`struct _compat_ibv_port_attr`: everything before `port_cap_flags2`).
pub const COMPAT_PORT_ATTR_SIZE: usize = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);
