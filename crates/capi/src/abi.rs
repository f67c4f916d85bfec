//! The C structures of `<infiniband/verbs.h>` that callers read or write directly, laid out
//! byte for byte as rdma-core's headers declare them (x86-64 and other LP64 Linux targets).
//! `tests/layout.rs` compiles a probe against the installed libibverbs-dev headers and checks
//! every size and field offset declared here.
//!
//! Field names follow the C names so that the probe and readers can match them one to one.
//! Enumerations are plain integers (`u32`/`i32`): a C caller may store any value in them.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

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

/// `struct verbs_context`: the extension that sits *before* `ibv_context` in memory; the
/// inline functions reach it at a negative offset from the context pointer and check `sz`
/// before using a slot.
#[repr(C)]
pub struct verbs_context {
    /// `ibv_query_port` (the inline wrapper prefers it).
    pub query_port: Option<QueryPortFn>,
    /// Not supported (NULL).
    pub advise_mr: VoidFn,
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

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    #[allow(missing_docs)]
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    #[allow(missing_docs)]
    pub vendor_err: u32,
    #[allow(missing_docs)]
    pub byte_len: u32,
    /// Big-endian immediate data, or the invalidated rkey.
    pub imm_data: u32,
    #[allow(missing_docs)]
    pub qp_num: u32,
    #[allow(missing_docs)]
    pub src_qp: u32,
    #[allow(missing_docs)]
    pub wc_flags: c_uint,
    #[allow(missing_docs)]
    pub pkey_index: u16,
    #[allow(missing_docs)]
    pub slid: u16,
    #[allow(missing_docs)]
    pub sl: u8,
    #[allow(missing_docs)]
    pub dlid_path_bits: u8,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub addr: *mut c_void,
    #[allow(missing_docs)]
    pub length: usize,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub lkey: u32,
    #[allow(missing_docs)]
    pub rkey: u32,
}

/// `union ibv_gid`: 16 bytes, aligned as its `__be64` view (which makes `ibv_qp_attr` 144
/// bytes, not 140).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid {
    /// The GID in network order.
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    #[allow(missing_docs)]
    pub dgid: ibv_gid,
    #[allow(missing_docs)]
    pub flow_label: u32,
    #[allow(missing_docs)]
    pub sgid_index: u8,
    #[allow(missing_docs)]
    pub hop_limit: u8,
    #[allow(missing_docs)]
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    #[allow(missing_docs)]
    pub grh: ibv_global_route,
    #[allow(missing_docs)]
    pub dlid: u16,
    #[allow(missing_docs)]
    pub sl: u8,
    #[allow(missing_docs)]
    pub src_path_bits: u8,
    #[allow(missing_docs)]
    pub static_rate: u8,
    #[allow(missing_docs)]
    pub is_global: u8,
    #[allow(missing_docs)]
    pub port_num: u8,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    #[allow(missing_docs)]
    pub max_wr: u32,
    #[allow(missing_docs)]
    pub max_sge: u32,
    #[allow(missing_docs)]
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct ibv_srq_init_attr {
    #[allow(missing_docs)]
    pub srq_context: *mut c_void,
    #[allow(missing_docs)]
    pub attr: ibv_srq_attr,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    #[allow(missing_docs)]
    pub max_send_wr: u32,
    #[allow(missing_docs)]
    pub max_recv_wr: u32,
    #[allow(missing_docs)]
    pub max_send_sge: u32,
    #[allow(missing_docs)]
    pub max_recv_sge: u32,
    #[allow(missing_docs)]
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    #[allow(missing_docs)]
    pub qp_context: *mut c_void,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    #[allow(missing_docs)]
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    #[allow(missing_docs)]
    pub rx_hash_function: u8,
    #[allow(missing_docs)]
    pub rx_hash_key_len: u8,
    #[allow(missing_docs)]
    pub rx_hash_key: *mut u8,
    #[allow(missing_docs)]
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: the fields of [`ibv_qp_init_attr`], then the extension.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    #[allow(missing_docs)]
    pub qp_context: *mut c_void,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Not padded to 8 here, unlike the end of [`ibv_qp_init_attr`]: `comp_mask` follows.
    pub sq_sig_all: c_int,
    /// `IBV_QP_INIT_ATTR_*`.
    pub comp_mask: u32,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub xrcd: *mut c_void,
    #[allow(missing_docs)]
    pub create_flags: u32,
    #[allow(missing_docs)]
    pub max_tso_header: u16,
    #[allow(missing_docs)]
    pub rwq_ind_tbl: *mut c_void,
    #[allow(missing_docs)]
    pub rx_hash_conf: ibv_rx_hash_conf,
    #[allow(missing_docs)]
    pub source_qpn: u32,
    #[allow(missing_docs)]
    pub send_ops_flags: u64,
}

impl ibv_qp_init_attr_ex {
    /// The fields it shares with [`ibv_qp_init_attr`].
    pub fn base(&self) -> ibv_qp_init_attr {
        ibv_qp_init_attr {
            qp_context: self.qp_context,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.cap,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
        }
    }

    /// `a` with the PD extension (`comp_mask` = `IBV_QP_INIT_ATTR_PD`), the rest zero.
    pub fn with_pd(a: &ibv_qp_init_attr, pd: *mut ibv_pd) -> Self {
        Self {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
            comp_mask: 1,
            pd,
            xrcd: std::ptr::null_mut(),
            create_flags: 0,
            max_tso_header: 0,
            rwq_ind_tbl: std::ptr::null_mut(),
            rx_hash_conf: ibv_rx_hash_conf {
                rx_hash_function: 0,
                rx_hash_key_len: 0,
                rx_hash_key: std::ptr::null_mut(),
                rx_hash_fields_mask: 0,
            },
            source_qpn: 0,
            send_ops_flags: 0,
        }
    }
}

/// `create_qp_ex` slot of [`verbs_context`].
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    #[allow(missing_docs)]
    pub qkey: u32,
    #[allow(missing_docs)]
    pub rq_psn: u32,
    #[allow(missing_docs)]
    pub sq_psn: u32,
    #[allow(missing_docs)]
    pub dest_qp_num: u32,
    #[allow(missing_docs)]
    pub qp_access_flags: c_uint,
    #[allow(missing_docs)]
    pub cap: ibv_qp_cap,
    #[allow(missing_docs)]
    pub ah_attr: ibv_ah_attr,
    #[allow(missing_docs)]
    pub alt_ah_attr: ibv_ah_attr,
    #[allow(missing_docs)]
    pub pkey_index: u16,
    #[allow(missing_docs)]
    pub alt_pkey_index: u16,
    #[allow(missing_docs)]
    pub en_sqd_async_notify: u8,
    #[allow(missing_docs)]
    pub sq_draining: u8,
    #[allow(missing_docs)]
    pub max_rd_atomic: u8,
    #[allow(missing_docs)]
    pub max_dest_rd_atomic: u8,
    #[allow(missing_docs)]
    pub min_rnr_timer: u8,
    #[allow(missing_docs)]
    pub port_num: u8,
    #[allow(missing_docs)]
    pub timeout: u8,
    #[allow(missing_docs)]
    pub retry_cnt: u8,
    #[allow(missing_docs)]
    pub rnr_retry: u8,
    #[allow(missing_docs)]
    pub alt_port_num: u8,
    #[allow(missing_docs)]
    pub alt_timeout: u8,
    #[allow(missing_docs)]
    pub rate_limit: u32,
}

/// `struct ibv_sge`: the same layout as [`rverbs_uverbs::Sge`] (checked by the layout test),
/// so a C gather list is used in place.
pub type ibv_sge = rverbs_uverbs::Sge;

/// `wr.rdma` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_rdma {
    #[allow(missing_docs)]
    pub remote_addr: u64,
    #[allow(missing_docs)]
    pub rkey: u32,
}

/// `wr.atomic` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_atomic {
    #[allow(missing_docs)]
    pub remote_addr: u64,
    #[allow(missing_docs)]
    pub compare_add: u64,
    #[allow(missing_docs)]
    pub swap: u64,
    #[allow(missing_docs)]
    pub rkey: u32,
}

/// `wr.ud` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_ud {
    #[allow(missing_docs)]
    pub ah: *mut ibv_ah,
    #[allow(missing_docs)]
    pub remote_qpn: u32,
    #[allow(missing_docs)]
    pub remote_qkey: u32,
}

/// The `wr` union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union wr_union {
    #[allow(missing_docs)]
    pub rdma: wr_rdma,
    #[allow(missing_docs)]
    pub atomic: wr_atomic,
    #[allow(missing_docs)]
    pub ud: wr_ud,
}

/// `bind_mw` of [`ibv_send_wr`] (`IBV_WR_BIND_MW`; the union's `tso` arm is not read).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_bind_mw {
    /// The window to bind.
    pub mw: *mut ibv_mw,
    /// Its new rkey (`ibv_inc_rkey(mw->rkey)`).
    pub rkey: u32,
    #[allow(missing_docs)]
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    /// The region (NULL with length 0: unbind a type 1 window).
    pub mr: *mut ibv_mr,
    #[allow(missing_docs)]
    pub addr: u64,
    #[allow(missing_docs)]
    pub length: u64,
    /// `ibv_access_flags` of the window.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (`ibv_bind_mw`'s request).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    #[allow(missing_docs)]
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub send_flags: c_uint,
    #[allow(missing_docs)]
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub rkey: u32,
    #[allow(missing_docs)]
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub mw_type: c_uint,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct ibv_send_wr {
    #[allow(missing_docs)]
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub next: *mut ibv_send_wr,
    #[allow(missing_docs)]
    pub sg_list: *mut ibv_sge,
    #[allow(missing_docs)]
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    #[allow(missing_docs)]
    pub send_flags: c_uint,
    /// Big-endian immediate data, or the rkey to invalidate.
    pub imm_data: u32,
    #[allow(missing_docs)]
    pub wr: wr_union,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// The `bind_mw` / `tso` union.
    pub bind_mw: wr_bind_mw,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    #[allow(missing_docs)]
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub next: *mut ibv_recv_wr,
    #[allow(missing_docs)]
    pub sg_list: *mut ibv_sge,
    #[allow(missing_docs)]
    pub num_sge: c_int,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub srq_context: *mut c_void,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub qp_context: *mut c_void,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub events_completed: u32,
}

/// `struct ibv_data_buf`: one buffer of `ibv_wr_set_inline_data_list`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    #[allow(missing_docs)]
    pub addr: *mut c_void,
    #[allow(missing_docs)]
    pub length: usize,
}

/// A builder of [`ibv_qp_ex`] with no operands (`wr_send`, `wr_start`, `wr_abort`).
pub type WrFn = unsafe extern "C" fn(*mut ibv_qp_ex);
/// A builder of [`ibv_qp_ex`] with one 32-bit operand (`wr_send_imm`, `wr_send_inv`,
/// `wr_local_inv`).
pub type WrU32Fn = unsafe extern "C" fn(*mut ibv_qp_ex, u32);
/// `wr_bind_mw`: the window, its new rkey, the bind (region, range, access).
pub type WrBindMwFn =
    unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info);
/// `wr_rdma_read` / `wr_rdma_write`: rkey, remote address.
pub type WrRdmaFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64);
/// `wr_rdma_write_imm`: rkey, remote address, big-endian immediate data.
pub type WrRdmaImmFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
/// `wr_atomic_cmp_swp`: rkey, remote address, compare, swap.
pub type WrCmpSwpFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64);
/// `wr_atomic_fetch_add`: rkey, remote address, add.
pub type WrFetchAddFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64);
/// `wr_atomic_write`: rkey, remote address, the 8 bytes to write.
pub type WrAtomicWriteFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void);
/// `wr_set_ud_addr`: AH, remote QPN, remote Q_Key.
pub type WrUdAddrFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32);
/// `wr_set_inline_data`: address, length.
pub type WrInlineFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize);
/// `wr_set_inline_data_list`: count, buffers.
pub type WrInlineListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf);
/// `wr_set_sge`: lkey, address, length.
pub type WrSgeFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
/// `wr_set_sge_list`: count, SGEs.
pub type WrSgeListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge);
/// `wr_complete`: 0 or a positive errno.
pub type WrCompleteFn = unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int;

/// `struct ibv_qp_ex`: an [`ibv_qp`] followed by the extended send API's fields and builders
/// (what the inline `ibv_wr_*` functions of `verbs.h` call). A NULL slot is an operation the
/// QP was not created with.
#[repr(C)]
pub struct ibv_qp_ex {
    /// The QP itself (`ibv_qp_to_qp_ex` returns a pointer to it).
    pub qp_base: ibv_qp,
    #[allow(missing_docs)]
    pub comp_mask: u64,
    /// The `wr_id` of the next work request built (the caller sets it).
    pub wr_id: u64,
    /// The `IBV_SEND_*` flags of the next work request built (the caller sets them).
    pub wr_flags: c_uint,
    #[allow(missing_docs)]
    pub wr_atomic_cmp_swp: Option<WrCmpSwpFn>,
    #[allow(missing_docs)]
    pub wr_atomic_fetch_add: Option<WrFetchAddFn>,
    /// A memory-window bind (RC, UC QPs that asked for `IBV_QP_EX_WITH_BIND_MW`).
    pub wr_bind_mw: Option<WrBindMwFn>,
    /// A local invalidation (RC QPs that asked for `IBV_QP_EX_WITH_LOCAL_INV`).
    pub wr_local_inv: Option<WrU32Fn>,
    #[allow(missing_docs)]
    pub wr_rdma_read: Option<WrRdmaFn>,
    #[allow(missing_docs)]
    pub wr_rdma_write: Option<WrRdmaFn>,
    #[allow(missing_docs)]
    pub wr_rdma_write_imm: Option<WrRdmaImmFn>,
    #[allow(missing_docs)]
    pub wr_send: Option<WrFn>,
    #[allow(missing_docs)]
    pub wr_send_imm: Option<WrU32Fn>,
    #[allow(missing_docs)]
    pub wr_send_inv: Option<WrU32Fn>,
    /// TSO: NULL.
    pub wr_send_tso: VoidFn,
    #[allow(missing_docs)]
    pub wr_set_ud_addr: Option<WrUdAddrFn>,
    /// XRC: NULL.
    pub wr_set_xrc_srqn: VoidFn,
    #[allow(missing_docs)]
    pub wr_set_inline_data: Option<WrInlineFn>,
    #[allow(missing_docs)]
    pub wr_set_inline_data_list: Option<WrInlineListFn>,
    #[allow(missing_docs)]
    pub wr_set_sge: Option<WrSgeFn>,
    #[allow(missing_docs)]
    pub wr_set_sge_list: Option<WrSgeListFn>,
    #[allow(missing_docs)]
    pub wr_start: Option<WrFn>,
    #[allow(missing_docs)]
    pub wr_complete: Option<WrCompleteFn>,
    #[allow(missing_docs)]
    pub wr_abort: Option<WrFn>,
    /// Atomic write (IBTA 1.5), where the QP was created with
    /// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
    pub wr_atomic_write: Option<WrAtomicWriteFn>,
}

impl ibv_qp_ex {
    /// `qp` with every extended field zero and every builder NULL.
    pub fn from_base(qp: ibv_qp) -> Self {
        Self {
            qp_base: qp,
            comp_mask: 0,
            wr_id: 0,
            wr_flags: 0,
            wr_atomic_cmp_swp: None,
            wr_atomic_fetch_add: None,
            wr_bind_mw: None,
            wr_local_inv: None,
            wr_rdma_read: None,
            wr_rdma_write: None,
            wr_rdma_write_imm: None,
            wr_send: None,
            wr_send_imm: None,
            wr_send_inv: None,
            wr_send_tso: None,
            wr_set_ud_addr: None,
            wr_set_xrc_srqn: None,
            wr_set_inline_data: None,
            wr_set_inline_data_list: None,
            wr_set_sge: None,
            wr_set_sge_list: None,
            wr_start: None,
            wr_complete: None,
            wr_abort: None,
            wr_atomic_write: None,
        }
    }
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub fd: c_int,
    #[allow(missing_docs)]
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub cq_context: *mut c_void,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub cqe: c_int,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub comp_events_completed: u32,
    #[allow(missing_docs)]
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_poll_cq_attr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `start_poll` of [`ibv_cq_ex`]: 0, `ENOENT` when empty, or another errno.
pub type StartPollFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int;
/// `next_poll` of [`ibv_cq_ex`].
pub type NextPollFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int;
/// `end_poll` of [`ibv_cq_ex`].
pub type EndPollFn = unsafe extern "C" fn(*mut ibv_cq_ex);
/// A 32-bit `read_*` of [`ibv_cq_ex`].
pub type ReadU32Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u32;
/// An 8-bit `read_*` of [`ibv_cq_ex`].
pub type ReadU8Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u8;

/// `struct ibv_cq_ex`: the fields of [`ibv_cq`] (same names), then the current completion's
/// status and `wr_id` and the polling functions. A NULL `read_*` is a field the CQ was not
/// created to report.
#[repr(C)]
pub struct ibv_cq_ex {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub cq_context: *mut c_void,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub cqe: c_int,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub comp_events_completed: u32,
    #[allow(missing_docs)]
    pub async_events_completed: u32,
    #[allow(missing_docs)]
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: u32,
    /// `wr_id` of the current completion.
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub start_poll: Option<StartPollFn>,
    #[allow(missing_docs)]
    pub next_poll: Option<NextPollFn>,
    #[allow(missing_docs)]
    pub end_poll: Option<EndPollFn>,
    /// `enum ibv_wc_opcode`.
    pub read_opcode: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_vendor_err: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_byte_len: Option<ReadU32Fn>,
    /// Big-endian immediate data, or the invalidated rkey.
    pub read_imm_data: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_qp_num: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_src_qp: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_wc_flags: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_slid: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_sl: Option<ReadU8Fn>,
    #[allow(missing_docs)]
    pub read_dlid_path_bits: Option<ReadU8Fn>,
    /// Completion timestamps: NULL (rxe has none).
    pub read_completion_ts: VoidFn,
    /// NULL.
    pub read_cvlan: VoidFn,
    /// NULL.
    pub read_flow_tag: VoidFn,
    /// NULL.
    pub read_tm_info: VoidFn,
    /// NULL.
    pub read_completion_wallclock_ns: VoidFn,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    #[allow(missing_docs)]
    pub cqe: u32,
    #[allow(missing_docs)]
    pub cq_context: *mut c_void,
    #[allow(missing_docs)]
    pub channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub comp_vector: u32,
    /// `IBV_WC_EX_WITH_*`.
    pub wc_flags: u64,
    /// `IBV_CQ_INIT_ATTR_MASK_*`.
    pub comp_mask: u32,
    /// `IBV_CREATE_CQ_ATTR_*`.
    pub flags: u32,
    #[allow(missing_docs)]
    pub parent_domain: *mut ibv_pd,
}

/// `create_cq_ex` slot of [`verbs_context`].
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub handle: u32,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    #[allow(missing_docs)]
    pub gid: ibv_gid,
    #[allow(missing_docs)]
    pub gid_index: u32,
    #[allow(missing_docs)]
    pub port_num: u32,
    /// `enum ibv_gid_type` (the kernel's numbers).
    pub gid_type: u32,
    #[allow(missing_docs)]
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event`: `element` is the union of `cq`, `qp`, `srq`, `wq` pointers and
/// `port_num`.
#[repr(C)]
pub struct ibv_async_event {
    /// The object (a pointer) or the port number (an `int` in the low bytes).
    pub element: *mut c_void,
    /// `enum ibv_event_type` (the kernel's numbers).
    pub event_type: u32,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sa_path_rec {
    #[allow(missing_docs)]
    pub dgid: ibv_gid,
    #[allow(missing_docs)]
    pub sgid: ibv_gid,
    /// Big-endian.
    pub dlid: u16,
    /// Big-endian.
    pub slid: u16,
    #[allow(missing_docs)]
    pub raw_traffic: c_int,
    /// Big-endian.
    pub flow_label: u32,
    #[allow(missing_docs)]
    pub hop_limit: u8,
    #[allow(missing_docs)]
    pub traffic_class: u8,
    #[allow(missing_docs)]
    pub reversible: c_int,
    #[allow(missing_docs)]
    pub numb_path: u8,
    /// Big-endian.
    pub pkey: u16,
    #[allow(missing_docs)]
    pub sl: u8,
    #[allow(missing_docs)]
    pub mtu_selector: u8,
    #[allow(missing_docs)]
    pub mtu: u8,
    #[allow(missing_docs)]
    pub rate_selector: u8,
    #[allow(missing_docs)]
    pub rate: u8,
    #[allow(missing_docs)]
    pub packet_life_time_selector: u8,
    #[allow(missing_docs)]
    pub packet_life_time: u8,
    #[allow(missing_docs)]
    pub preference: u8,
}

// ---------------------------------------------------------------------------------------
// <rdma/rdma_cma.h> (librdmacm-dev)

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    /// The ucma file's descriptor (poll it; `rdma_get_cm_event` reads it).
    pub fd: c_int,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ib_addr {
    #[allow(missing_docs)]
    pub sgid: ibv_gid,
    #[allow(missing_docs)]
    pub dgid: ibv_gid,
    /// Big-endian.
    pub pkey: u16,
}

/// `struct rdma_addr`: the source and destination unions (each as large as a
/// `sockaddr_storage`), then the IB address.
#[repr(C)]
pub struct rdma_addr {
    /// `src_addr` / `src_sin` / `src_sin6` / `src_storage`.
    pub src_storage: libc::sockaddr_storage,
    /// `dst_addr` / `dst_sin` / `dst_sin6` / `dst_storage`.
    pub dst_storage: libc::sockaddr_storage,
    /// `addr.ibaddr`.
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
pub struct rdma_route {
    #[allow(missing_docs)]
    pub addr: rdma_addr,
    #[allow(missing_docs)]
    pub path_rec: *mut ibv_sa_path_rec,
    #[allow(missing_docs)]
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`: what `rdma_cma.h`'s and `rdma_verbs.h`'s inline functions read.
#[repr(C)]
pub struct rdma_cm_id {
    #[allow(missing_docs)]
    pub verbs: *mut ibv_context,
    #[allow(missing_docs)]
    pub channel: *mut rdma_event_channel,
    #[allow(missing_docs)]
    pub context: *mut c_void,
    #[allow(missing_docs)]
    pub qp: *mut ibv_qp,
    #[allow(missing_docs)]
    pub route: rdma_route,
    /// `enum rdma_port_space`.
    pub ps: u32,
    #[allow(missing_docs)]
    pub port_num: u8,
    #[allow(missing_docs)]
    pub event: *mut rdma_cm_event,
    #[allow(missing_docs)]
    pub send_cq_channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq_channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    #[allow(missing_docs)]
    pub private_data: *const c_void,
    #[allow(missing_docs)]
    pub private_data_len: u8,
    #[allow(missing_docs)]
    pub responder_resources: u8,
    #[allow(missing_docs)]
    pub initiator_depth: u8,
    #[allow(missing_docs)]
    pub flow_control: u8,
    #[allow(missing_docs)]
    pub retry_count: u8,
    #[allow(missing_docs)]
    pub rnr_retry_count: u8,
    #[allow(missing_docs)]
    pub srq: u8,
    #[allow(missing_docs)]
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    #[allow(missing_docs)]
    pub private_data: *const c_void,
    #[allow(missing_docs)]
    pub private_data_len: u8,
    #[allow(missing_docs)]
    pub ah_attr: ibv_ah_attr,
    #[allow(missing_docs)]
    pub qp_num: u32,
    #[allow(missing_docs)]
    pub qkey: u32,
}

/// `struct rdma_cm_join_mc_attr_ex` (`rdma_join_multicast_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    /// Which fields are valid: [`RDMA_CM_JOIN_MC_ATTR_ADDRESS`] and
    /// [`RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`], both required.
    pub comp_mask: u32,
    /// `enum rdma_cm_mc_join_flags`: 0 full member, 1 send-only full member.
    pub join_flags: u32,
    /// The group's address.
    pub addr: *mut libc::sockaddr,
}

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`: `rdma_cm_join_mc_attr_ex::addr` is valid.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
/// `RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`: `rdma_cm_join_mc_attr_ex::join_flags` is valid.
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    #[allow(missing_docs)]
    pub conn: rdma_conn_param,
    #[allow(missing_docs)]
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    #[allow(missing_docs)]
    pub id: *mut rdma_cm_id,
    #[allow(missing_docs)]
    pub listen_id: *mut rdma_cm_id,
    /// `enum rdma_cm_event_type`.
    pub event: u32,
    #[allow(missing_docs)]
    pub status: c_int,
    #[allow(missing_docs)]
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    /// `RAI_*`.
    pub ai_flags: c_int,
    #[allow(missing_docs)]
    pub ai_family: c_int,
    #[allow(missing_docs)]
    pub ai_qp_type: c_int,
    #[allow(missing_docs)]
    pub ai_port_space: c_int,
    #[allow(missing_docs)]
    pub ai_src_len: u32,
    #[allow(missing_docs)]
    pub ai_dst_len: u32,
    #[allow(missing_docs)]
    pub ai_src_addr: *mut libc::sockaddr,
    #[allow(missing_docs)]
    pub ai_dst_addr: *mut libc::sockaddr,
    #[allow(missing_docs)]
    pub ai_src_canonname: *mut c_char,
    #[allow(missing_docs)]
    pub ai_dst_canonname: *mut c_char,
    #[allow(missing_docs)]
    pub ai_route_len: usize,
    #[allow(missing_docs)]
    pub ai_route: *mut c_void,
    #[allow(missing_docs)]
    pub ai_connect_len: usize,
    #[allow(missing_docs)]
    pub ai_connect: *mut c_void,
    #[allow(missing_docs)]
    pub ai_next: *mut rdma_addrinfo,
}

/// The structs the layout test checks: C name, Rust size, and (C field, Rust offset) pairs.
pub type LayoutRow = (&'static str, usize, &'static [(&'static str, usize)]);

macro_rules! layouts {
    ($($cname:literal => $ty:ty { $($cf:literal : $($rf:ident).+),* $(,)? })*) => {
        /// Every struct of this module with its size and field offsets, named as in C.
        pub const LAYOUTS: &[LayoutRow] = &[
            $(($cname, std::mem::size_of::<$ty>(), &[$(($cf, std::mem::offset_of!($ty, $($rf).+))),*]),)*
        ];
    };
}

layouts! {
    "rdma_event_channel" => rdma_event_channel { "fd": fd }
    "rdma_ib_addr" => rdma_ib_addr { "sgid": sgid, "dgid": dgid, "pkey": pkey }
    "rdma_addr" => rdma_addr { "src_storage": src_storage, "dst_storage": dst_storage,
        "addr": ibaddr }
    "rdma_route" => rdma_route { "addr": addr, "path_rec": path_rec, "num_paths": num_paths }
    "rdma_cm_id" => rdma_cm_id { "verbs": verbs, "channel": channel, "context": context,
        "qp": qp, "route": route, "ps": ps, "port_num": port_num, "event": event,
        "send_cq_channel": send_cq_channel, "send_cq": send_cq,
        "recv_cq_channel": recv_cq_channel, "recv_cq": recv_cq, "srq": srq, "pd": pd,
        "qp_type": qp_type }
    "rdma_conn_param" => rdma_conn_param { "private_data": private_data,
        "private_data_len": private_data_len, "responder_resources": responder_resources,
        "initiator_depth": initiator_depth, "flow_control": flow_control,
        "retry_count": retry_count, "rnr_retry_count": rnr_retry_count, "srq": srq,
        "qp_num": qp_num }
    "rdma_ud_param" => rdma_ud_param { "private_data": private_data,
        "private_data_len": private_data_len, "ah_attr": ah_attr, "qp_num": qp_num,
        "qkey": qkey }
    "rdma_cm_join_mc_attr_ex" => rdma_cm_join_mc_attr_ex { "comp_mask": comp_mask,
        "join_flags": join_flags, "addr": addr }
    "rdma_cm_event" => rdma_cm_event { "id": id, "listen_id": listen_id, "event": event,
        "status": status, "param": param }
    "rdma_addrinfo" => rdma_addrinfo { "ai_flags": ai_flags, "ai_family": ai_family,
        "ai_qp_type": ai_qp_type, "ai_port_space": ai_port_space, "ai_src_len": ai_src_len,
        "ai_dst_len": ai_dst_len, "ai_src_addr": ai_src_addr, "ai_dst_addr": ai_dst_addr,
        "ai_src_canonname": ai_src_canonname, "ai_dst_canonname": ai_dst_canonname,
        "ai_route_len": ai_route_len, "ai_route": ai_route, "ai_connect_len": ai_connect_len,
        "ai_connect": ai_connect, "ai_next": ai_next }
    "ibv_gid" => ibv_gid { "raw": raw }
    "ibv_device" => ibv_device { "node_type": node_type, "transport_type": transport_type,
        "name": name, "dev_name": dev_name, "dev_path": dev_path, "ibdev_path": ibdev_path }
    "ibv_context_ops" => ibv_context_ops { "alloc_mw": alloc_mw, "bind_mw": bind_mw,
        "dealloc_mw": dealloc_mw, "poll_cq": poll_cq,
        "req_notify_cq": req_notify_cq, "post_srq_recv": post_srq_recv,
        "post_send": post_send, "post_recv": post_recv, "_compat_async_event": _compat_async_event }
    "ibv_context" => ibv_context { "device": device, "ops": ops, "cmd_fd": cmd_fd,
        "async_fd": async_fd, "num_comp_vectors": num_comp_vectors, "mutex": mutex,
        "abi_compat": abi_compat }
    "verbs_context" => verbs_context { "query_port": query_port, "create_cq_ex": create_cq_ex,
        "priv": priv_, "query_device_ex": query_device_ex, "open_qp": open_qp,
        "create_qp_ex": create_qp_ex, "close_xrcd": close_xrcd, "sz": sz, "context": context }
    "ibv_device_attr" => ibv_device_attr { "fw_ver": fw_ver, "node_guid": node_guid,
        "sys_image_guid": sys_image_guid, "max_mr_size": max_mr_size, "vendor_id": vendor_id,
        "max_qp": max_qp, "device_cap_flags": device_cap_flags, "atomic_cap": atomic_cap,
        "max_srq_sge": max_srq_sge, "max_pkeys": max_pkeys,
        "local_ca_ack_delay": local_ca_ack_delay, "phys_port_cnt": phys_port_cnt }
    "ibv_device_attr_ex" => ibv_device_attr_ex { "orig_attr": orig_attr, "comp_mask": comp_mask,
        "odp_caps": odp_caps, "completion_timestamp_mask": completion_timestamp_mask,
        "hca_core_clock": hca_core_clock, "device_cap_flags_ex": device_cap_flags_ex,
        "tso_caps": tso_caps, "rss_caps": rss_caps, "max_wq_type_rq": max_wq_type_rq,
        "packet_pacing_caps": packet_pacing_caps, "raw_packet_caps": raw_packet_caps,
        "tm_caps": tm_caps, "cq_mod_caps": cq_mod_caps, "max_dm_size": max_dm_size,
        "pci_atomic_caps": pci_atomic_caps, "xrc_odp_caps": xrc_odp_caps,
        "phys_port_cnt_ex": phys_port_cnt_ex }
    "ibv_rss_caps" => ibv_rss_caps { "rx_hash_fields_mask": rx_hash_fields_mask,
        "rx_hash_function": rx_hash_function }
    "ibv_port_attr" => ibv_port_attr { "state": state, "max_mtu": max_mtu,
        "active_mtu": active_mtu, "gid_tbl_len": gid_tbl_len, "port_cap_flags": port_cap_flags,
        "max_msg_sz": max_msg_sz, "pkey_tbl_len": pkey_tbl_len, "lid": lid, "sm_lid": sm_lid,
        "lmc": lmc, "active_width": active_width, "active_speed": active_speed,
        "phys_state": phys_state, "link_layer": link_layer, "flags": flags,
        "port_cap_flags2": port_cap_flags2 }
    "ibv_wc" => ibv_wc { "wr_id": wr_id, "status": status, "opcode": opcode,
        "vendor_err": vendor_err, "byte_len": byte_len, "imm_data": imm_data, "qp_num": qp_num,
        "src_qp": src_qp, "wc_flags": wc_flags, "pkey_index": pkey_index, "slid": slid, "sl": sl,
        "dlid_path_bits": dlid_path_bits }
    "ibv_pd" => ibv_pd { "context": context, "handle": handle }
    "ibv_mr" => ibv_mr { "context": context, "pd": pd, "addr": addr, "length": length,
        "handle": handle, "lkey": lkey, "rkey": rkey }
    "ibv_global_route" => ibv_global_route { "dgid": dgid, "flow_label": flow_label,
        "sgid_index": sgid_index, "hop_limit": hop_limit, "traffic_class": traffic_class }
    "ibv_ah_attr" => ibv_ah_attr { "grh": grh, "dlid": dlid, "sl": sl,
        "src_path_bits": src_path_bits, "static_rate": static_rate, "is_global": is_global,
        "port_num": port_num }
    "ibv_srq_attr" => ibv_srq_attr { "max_wr": max_wr, "max_sge": max_sge,
        "srq_limit": srq_limit }
    "ibv_srq_init_attr" => ibv_srq_init_attr { "srq_context": srq_context, "attr": attr }
    "ibv_qp_cap" => ibv_qp_cap { "max_send_wr": max_send_wr, "max_recv_wr": max_recv_wr,
        "max_send_sge": max_send_sge, "max_recv_sge": max_recv_sge,
        "max_inline_data": max_inline_data }
    "ibv_qp_init_attr" => ibv_qp_init_attr { "qp_context": qp_context, "send_cq": send_cq,
        "recv_cq": recv_cq, "srq": srq, "cap": cap, "qp_type": qp_type, "sq_sig_all": sq_sig_all }
    "ibv_qp_init_attr_ex" => ibv_qp_init_attr_ex { "qp_context": qp_context,
        "send_cq": send_cq, "cap": cap, "qp_type": qp_type, "sq_sig_all": sq_sig_all,
        "comp_mask": comp_mask,
        "pd": pd, "xrcd": xrcd, "create_flags": create_flags, "max_tso_header": max_tso_header,
        "rwq_ind_tbl": rwq_ind_tbl, "rx_hash_conf": rx_hash_conf, "source_qpn": source_qpn,
        "send_ops_flags": send_ops_flags }
    "ibv_rx_hash_conf" => ibv_rx_hash_conf { "rx_hash_function": rx_hash_function,
        "rx_hash_key_len": rx_hash_key_len, "rx_hash_key": rx_hash_key,
        "rx_hash_fields_mask": rx_hash_fields_mask }
    "ibv_qp_attr" => ibv_qp_attr { "qp_state": qp_state, "cur_qp_state": cur_qp_state,
        "path_mtu": path_mtu, "path_mig_state": path_mig_state, "qkey": qkey, "rq_psn": rq_psn,
        "sq_psn": sq_psn, "dest_qp_num": dest_qp_num, "qp_access_flags": qp_access_flags,
        "cap": cap, "ah_attr": ah_attr, "alt_ah_attr": alt_ah_attr, "pkey_index": pkey_index,
        "alt_pkey_index": alt_pkey_index, "en_sqd_async_notify": en_sqd_async_notify,
        "sq_draining": sq_draining, "max_rd_atomic": max_rd_atomic,
        "max_dest_rd_atomic": max_dest_rd_atomic, "min_rnr_timer": min_rnr_timer,
        "port_num": port_num, "timeout": timeout, "retry_cnt": retry_cnt,
        "rnr_retry": rnr_retry, "alt_port_num": alt_port_num, "alt_timeout": alt_timeout,
        "rate_limit": rate_limit }
    "ibv_sge" => ibv_sge { "addr": addr, "length": length, "lkey": lkey }
    "ibv_send_wr" => ibv_send_wr { "wr_id": wr_id, "next": next, "sg_list": sg_list,
        "num_sge": num_sge, "opcode": opcode, "send_flags": send_flags, "imm_data": imm_data,
        "wr": wr, "qp_type": remote_srqn, "bind_mw": bind_mw, "bind_mw.mw": bind_mw.mw,
        "bind_mw.rkey": bind_mw.rkey, "bind_mw.bind_info": bind_mw.bind_info }
    "ibv_mw_bind_info" => ibv_mw_bind_info { "mr": mr, "addr": addr, "length": length,
        "mw_access_flags": mw_access_flags }
    "ibv_mw_bind" => ibv_mw_bind { "wr_id": wr_id, "send_flags": send_flags,
        "bind_info": bind_info }
    "ibv_mw" => ibv_mw { "context": context, "pd": pd, "rkey": rkey, "handle": handle,
        "type": mw_type }
    "ibv_recv_wr" => ibv_recv_wr { "wr_id": wr_id, "next": next, "sg_list": sg_list,
        "num_sge": num_sge }
    "ibv_srq" => ibv_srq { "context": context, "srq_context": srq_context, "pd": pd,
        "handle": handle, "mutex": mutex, "cond": cond, "events_completed": events_completed }
    "ibv_qp" => ibv_qp { "context": context, "qp_context": qp_context, "pd": pd,
        "send_cq": send_cq, "recv_cq": recv_cq, "srq": srq, "handle": handle, "qp_num": qp_num,
        "state": state, "qp_type": qp_type, "mutex": mutex, "cond": cond,
        "events_completed": events_completed }
    "ibv_qp_ex" => ibv_qp_ex { "qp_base": qp_base, "comp_mask": comp_mask, "wr_id": wr_id,
        "wr_flags": wr_flags, "wr_atomic_cmp_swp": wr_atomic_cmp_swp,
        "wr_atomic_fetch_add": wr_atomic_fetch_add, "wr_bind_mw": wr_bind_mw,
        "wr_local_inv": wr_local_inv, "wr_rdma_read": wr_rdma_read,
        "wr_rdma_write": wr_rdma_write, "wr_rdma_write_imm": wr_rdma_write_imm,
        "wr_send": wr_send, "wr_send_imm": wr_send_imm, "wr_send_inv": wr_send_inv,
        "wr_send_tso": wr_send_tso, "wr_set_ud_addr": wr_set_ud_addr,
        "wr_set_xrc_srqn": wr_set_xrc_srqn, "wr_set_inline_data": wr_set_inline_data,
        "wr_set_inline_data_list": wr_set_inline_data_list, "wr_set_sge": wr_set_sge,
        "wr_set_sge_list": wr_set_sge_list, "wr_start": wr_start, "wr_complete": wr_complete,
        "wr_abort": wr_abort, "wr_atomic_write": wr_atomic_write }
    "ibv_data_buf" => ibv_data_buf { "addr": addr, "length": length }
    "ibv_cq_ex" => ibv_cq_ex { "context": context, "channel": channel,
        "cq_context": cq_context, "handle": handle, "cqe": cqe, "mutex": mutex, "cond": cond,
        "comp_events_completed": comp_events_completed,
        "async_events_completed": async_events_completed, "comp_mask": comp_mask,
        "status": status, "wr_id": wr_id, "start_poll": start_poll, "next_poll": next_poll,
        "end_poll": end_poll, "read_opcode": read_opcode, "read_vendor_err": read_vendor_err,
        "read_byte_len": read_byte_len, "read_imm_data": read_imm_data,
        "read_qp_num": read_qp_num, "read_src_qp": read_src_qp,
        "read_wc_flags": read_wc_flags, "read_slid": read_slid, "read_sl": read_sl,
        "read_dlid_path_bits": read_dlid_path_bits, "read_completion_ts": read_completion_ts,
        "read_cvlan": read_cvlan, "read_flow_tag": read_flow_tag,
        "read_tm_info": read_tm_info,
        "read_completion_wallclock_ns": read_completion_wallclock_ns }
    "ibv_poll_cq_attr" => ibv_poll_cq_attr { "comp_mask": comp_mask }
    "ibv_cq_init_attr_ex" => ibv_cq_init_attr_ex { "cqe": cqe, "cq_context": cq_context,
        "channel": channel, "comp_vector": comp_vector, "wc_flags": wc_flags,
        "comp_mask": comp_mask, "flags": flags, "parent_domain": parent_domain }
    "ibv_comp_channel" => ibv_comp_channel { "context": context, "fd": fd, "refcnt": refcnt }
    "ibv_cq" => ibv_cq { "context": context, "channel": channel, "cq_context": cq_context,
        "handle": handle, "cqe": cqe, "mutex": mutex, "cond": cond,
        "comp_events_completed": comp_events_completed,
        "async_events_completed": async_events_completed }
    "ibv_ah" => ibv_ah { "context": context, "pd": pd, "handle": handle }
    "ibv_gid_entry" => ibv_gid_entry { "gid": gid, "gid_index": gid_index,
        "port_num": port_num, "gid_type": gid_type, "ndev_ifindex": ndev_ifindex }
    "ibv_async_event" => ibv_async_event { "element": element, "event_type": event_type }
    "ibv_sa_path_rec" => ibv_sa_path_rec { "dgid": dgid, "sgid": sgid, "dlid": dlid,
        "slid": slid, "raw_traffic": raw_traffic, "flow_label": flow_label,
        "hop_limit": hop_limit, "traffic_class": traffic_class, "reversible": reversible,
        "numb_path": numb_path, "pkey": pkey, "sl": sl, "mtu_selector": mtu_selector,
        "mtu": mtu, "rate_selector": rate_selector, "rate": rate,
        "packet_life_time_selector": packet_life_time_selector,
        "packet_life_time": packet_life_time, "preference": preference }
}
