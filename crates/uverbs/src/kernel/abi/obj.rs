//! Each verbs object's kernel ABI, in one place: the request and response structures of its
//! write() commands and ioctl payloads (`ib_user_verbs.h`, `ib_user_ioctl_verbs.h`), and, at
//! the end, its ioctl method and attribute ids (`ib_user_ioctl_cmds.h`: a module per object,
//! `obj::cq::METHOD_CREATE`; the object ids and the ioctl framing are `ioctl`'s). Flexible
//! `driver_data[]` tails are not part of these structs: driver data is appended by the write
//! layer.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_pd {
    pub response: u64,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_pd_resp {
    pub pd_handle: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_dealloc_pd {
    pub pd_handle: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_dereg_mr {
    pub mr_handle: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_mw {
    pub response: u64,
    pub pd_handle: u32,
    pub mw_type: u8,
    pub reserved: [u8; 3],
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_alloc_mw_resp {
    pub mw_handle: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_dealloc_mw {
    pub mw_handle: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_cq {
    pub response: u64,
    pub user_handle: u64,
    pub cqe: u32,
    pub comp_vector: u32,
    pub comp_channel: i32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_cq_resp {
    pub cq_handle: u32,
    pub cqe: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_cq {
    pub response: u64,
    pub cq_handle: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_qp {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub send_cq_handle: u32,
    pub recv_cq_handle: u32,
    pub srq_handle: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub sq_sig_all: u8,
    pub qp_type: u8,
    pub is_srq: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_qp_resp {
    pub qp_handle: u32,
    pub qpn: u32,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_qp {
    pub response: u64,
    pub qp_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_attach_mcast` (24 bytes; no response). `ib_uverbs_detach_mcast` has the
/// same layout and is the same type here.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_attach_mcast {
    /// The multicast GID, in wire order.
    pub gid: [u8; 16],
    pub qp_handle: u32,
    /// The group's multicast LID (0 on RoCE).
    pub mlid: u16,
    pub reserved: u16,
}

/// `struct ib_uverbs_detach_mcast`: the layout of [`ib_uverbs_attach_mcast`].
pub type ib_uverbs_detach_mcast = ib_uverbs_attach_mcast;

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_ah {
    pub ah_handle: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_srq {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_reg_mr {
    pub response: u64,
    pub start: u64,
    pub length: u64,
    pub hca_va: u64,
    pub pd_handle: u32,
    pub access_flags: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_reg_mr_resp {
    pub mr_handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_comp_channel {
    pub response: u64,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_comp_channel_resp {
    pub fd: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_req_notify_cq {
    pub cq_handle: u32,
    pub solicited_only: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_resize_cq {
    pub response: u64,
    pub cq_handle: u32,
    pub cqe: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_resize_cq_resp {
    pub cqe: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_cq_resp {
    pub comp_events_reported: u32,
    pub async_events_reported: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_qp_resp {
    pub events_reported: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_qp_dest {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub dlid: u16,
    pub reserved: u16,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_modify_qp {
    pub dest: ib_uverbs_qp_dest,
    pub alt_dest: ib_uverbs_qp_dest,
    pub qp_handle: u32,
    pub attr_mask: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub en_sqd_async_notify: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 2],
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_qp {
    pub response: u64,
    pub qp_handle: u32,
    pub attr_mask: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_qp_resp {
    pub dest: ib_uverbs_qp_dest,
    pub alt_dest: ib_uverbs_qp_dest,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub qp_state: u8,
    pub cur_qp_state: u8,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub sq_sig_all: u8,
    pub reserved: [u8; 5],
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_global_route {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_ah_attr {
    pub grh: ib_uverbs_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr` (`ib_user_verbs.h`, 144 bytes): what the rdma_cm's `INIT_QP_ATTR` answers.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_qp_attr {
    /// `IB_QP_*` bits (same numbering as `ibv_qp_attr_mask`).
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_ah {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub reserved: u32,
    pub attr: ib_uverbs_ah_attr,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_ah_resp {
    pub ah_handle: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_srq {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_create_srq_resp {
    pub srq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srqn: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_modify_srq {
    pub srq_handle: u32,
    pub attr_mask: u32,
    pub max_wr: u32,
    pub srq_limit: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_srq {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_query_srq_resp {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_destroy_srq_resp {
    pub events_reported: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_async_event_desc {
    pub element: u64,
    pub event_type: u32,
    pub reserved: u32,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_comp_event_desc {
    pub cq_handle: u64,
}

#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_post_send_resp {
    pub bad_wr: u32,
}

/// `IB_UVERBS_QP_CREATE_SQ_SIG_ALL` (ioctl QP create flags).
pub const IB_UVERBS_QP_CREATE_SQ_SIG_ALL: u32 = 1 << 12;

/// Methods and attributes of `UVERBS_OBJECT_DEVICE`.
pub mod device {
    pub const METHOD_INVOKE_WRITE: u16 = 0;
    pub const METHOD_INFO_HANDLES: u16 = 1;
    pub const METHOD_QUERY_PORT: u16 = 2;
    pub const METHOD_GET_CONTEXT: u16 = 3;
    pub const METHOD_QUERY_CONTEXT: u16 = 4;
    pub const METHOD_QUERY_GID_TABLE: u16 = 5;
    pub const METHOD_QUERY_GID_ENTRY: u16 = 6;
    /// `UVERBS_METHOD_QUERY_PORT_SPEED`: not in 6.1 or 6.12, in 7.3 (the installed 6.1
    /// headers lack it; the number is rdma-core 64's `kernel-headers/rdma/ib_user_ioctl_cmds.h`,
    /// pinned by `newer_ids_are_rdma_core_64s`).
    pub const METHOD_QUERY_PORT_SPEED: u16 = 7;

    /// `UVERBS_ATTR_CORE_IN` etc. of INVOKE_WRITE.
    pub const ATTR_CORE_IN: u16 = 0;
    pub const ATTR_CORE_OUT: u16 = 1;
    pub const ATTR_WRITE_CMD: u16 = 2;

    pub const ATTR_GET_CONTEXT_NUM_COMP_VECTORS: u16 = 0;
    pub const ATTR_GET_CONTEXT_CORE_SUPPORT: u16 = 1;

    pub const ATTR_QUERY_PORT_PORT_NUM: u16 = 0;
    pub const ATTR_QUERY_PORT_RESP: u16 = 1;

    pub const ATTR_QUERY_GID_TABLE_ENTRY_SIZE: u16 = 0;
    pub const ATTR_QUERY_GID_TABLE_FLAGS: u16 = 1;
    pub const ATTR_QUERY_GID_TABLE_RESP_ENTRIES: u16 = 2;
    pub const ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES: u16 = 3;

    pub const ATTR_QUERY_GID_ENTRY_PORT: u16 = 0;
    pub const ATTR_QUERY_GID_ENTRY_GID_INDEX: u16 = 1;
    pub const ATTR_QUERY_GID_ENTRY_FLAGS: u16 = 2;
    pub const ATTR_QUERY_GID_ENTRY_RESP_ENTRY: u16 = 3;

    /// `enum uverbs_attrs_query_port_speed_cmd_attr_ids`: the port (u32 const in) and the
    /// speed (u64 out, in 100 Mb/s).
    pub const ATTR_QUERY_PORT_SPEED_PORT_NUM: u16 = 0;
    pub const ATTR_QUERY_PORT_SPEED_RESP: u16 = 1;
}

/// `UVERBS_OBJECT_ASYNC_EVENT`.
pub mod async_event {
    pub const METHOD_ALLOC: u16 = 0;
    pub const ATTR_ALLOC_FD_HANDLE: u16 = 0;
}

/// `UVERBS_OBJECT_PD`.
pub mod pd {
    pub const METHOD_DESTROY: u16 = 0;
    pub const ATTR_DESTROY_HANDLE: u16 = 0;
}

/// `UVERBS_OBJECT_MR`.
pub mod mr {
    pub const METHOD_DM_MR_REG: u16 = 0;
    pub const METHOD_DESTROY: u16 = 1;
    pub const METHOD_ADVISE: u16 = 2;
    pub const METHOD_QUERY: u16 = 3;
    /// `UVERBS_METHOD_REG_DMABUF_MR` (Linux 5.12 and later).
    pub const METHOD_REG_DMABUF: u16 = 4;

    pub const ATTR_DESTROY_HANDLE: u16 = 0;

    /// `enum uverbs_attrs_advise_mr_cmd_attr_ids`: the PD (IDR), the advice (CONST_IN), the
    /// flags (FLAGS_IN, u32), the SGE list (PTR_IN, `struct ib_uverbs_sge` each).
    pub const ATTR_ADVISE_PD_HANDLE: u16 = 0;
    pub const ATTR_ADVISE_ADVICE: u16 = 1;
    pub const ATTR_ADVISE_FLAGS: u16 = 2;
    pub const ATTR_ADVISE_SGE_LIST: u16 = 3;

    /// `enum uverbs_attrs_reg_dmabuf_mr_cmd_attr_ids`: the new MR (IDR), its PD (IDR),
    /// offset, length and iova (u64 in), the dma-buf fd (a raw fd: an s32 PTR_IN, not an FD
    /// attribute), access flags (u32 in), lkey and rkey (u32 out).
    pub const ATTR_REG_DMABUF_HANDLE: u16 = 0;
    pub const ATTR_REG_DMABUF_PD_HANDLE: u16 = 1;
    pub const ATTR_REG_DMABUF_OFFSET: u16 = 2;
    pub const ATTR_REG_DMABUF_LENGTH: u16 = 3;
    pub const ATTR_REG_DMABUF_IOVA: u16 = 4;
    pub const ATTR_REG_DMABUF_FD: u16 = 5;
    pub const ATTR_REG_DMABUF_ACCESS_FLAGS: u16 = 6;
    pub const ATTR_REG_DMABUF_RESP_LKEY: u16 = 7;
    pub const ATTR_REG_DMABUF_RESP_RKEY: u16 = 8;
}

/// `UVERBS_OBJECT_MW`: only destroy has a method (6.1 and 6.12); MWs are allocated with the
/// write command `ALLOC_MW`.
pub mod mw {
    pub const METHOD_DESTROY: u16 = 0;
    pub const ATTR_DESTROY_HANDLE: u16 = 0;
}

// `UVERBS_OBJECT_COMP_CHANNEL` has no methods in the 6.1 uapi: a completion channel is an
// fd object, destroyed by closing the fd.

/// `UVERBS_OBJECT_CQ`.
pub mod cq {
    pub const METHOD_CREATE: u16 = 0;
    pub const METHOD_DESTROY: u16 = 1;

    pub const ATTR_CREATE_HANDLE: u16 = 0;
    pub const ATTR_CREATE_CQE: u16 = 1;
    pub const ATTR_CREATE_USER_HANDLE: u16 = 2;
    pub const ATTR_CREATE_COMP_CHANNEL: u16 = 3;
    pub const ATTR_CREATE_COMP_VECTOR: u16 = 4;
    pub const ATTR_CREATE_FLAGS: u16 = 5;
    pub const ATTR_CREATE_RESP_CQE: u16 = 6;
    pub const ATTR_CREATE_EVENT_FD: u16 = 7;

    pub const ATTR_DESTROY_HANDLE: u16 = 0;
    pub const ATTR_DESTROY_RESP: u16 = 1;
}

/// `UVERBS_OBJECT_QP`.
pub mod qp {
    pub const METHOD_CREATE: u16 = 0;
    pub const METHOD_DESTROY: u16 = 1;

    pub const ATTR_CREATE_HANDLE: u16 = 0;
    pub const ATTR_CREATE_XRCD_HANDLE: u16 = 1;
    pub const ATTR_CREATE_PD_HANDLE: u16 = 2;
    pub const ATTR_CREATE_SRQ_HANDLE: u16 = 3;
    pub const ATTR_CREATE_SEND_CQ_HANDLE: u16 = 4;
    pub const ATTR_CREATE_RECV_CQ_HANDLE: u16 = 5;
    pub const ATTR_CREATE_IND_TABLE_HANDLE: u16 = 6;
    pub const ATTR_CREATE_USER_HANDLE: u16 = 7;
    pub const ATTR_CREATE_CAP: u16 = 8;
    pub const ATTR_CREATE_TYPE: u16 = 9;
    pub const ATTR_CREATE_FLAGS: u16 = 10;
    pub const ATTR_CREATE_SOURCE_QPN: u16 = 11;
    pub const ATTR_CREATE_EVENT_FD: u16 = 12;
    pub const ATTR_CREATE_RESP_CAP: u16 = 13;
    pub const ATTR_CREATE_RESP_QP_NUM: u16 = 14;

    pub const ATTR_DESTROY_HANDLE: u16 = 0;
    pub const ATTR_DESTROY_RESP: u16 = 1;
}

/// `UVERBS_OBJECT_SRQ`.
pub mod srq {
    pub const METHOD_CREATE: u16 = 0;
    pub const METHOD_DESTROY: u16 = 1;
    pub const ATTR_DESTROY_HANDLE: u16 = 0;
    pub const ATTR_DESTROY_RESP: u16 = 1;
}

/// `UVERBS_OBJECT_AH`: only destroy has a method in the 6.1 uapi (`enum uverbs_methods_ah`);
/// AHs are created with the write command `CREATE_AH`.
pub mod ah {
    pub const METHOD_DESTROY: u16 = 0;
    pub const ATTR_DESTROY_HANDLE: u16 = 0;
}

/// Ids newer than the installed 6.1 uapi headers, which `tests/abi_layout.rs` cannot compare:
/// their numbers as rdma-core 64's `kernel-headers/rdma/ib_user_ioctl_cmds.h` gives them (the
/// place of each name in its enum), written out here so that a renumbering is a visible change.
#[cfg(test)]
mod newer_ids {
    /// `name`'s place in `list`, a C enum's names in order.
    fn place(list: &[&str], name: &str) -> usize {
        list.iter().position(|n| *n == name).expect(name)
    }

    #[test]
    fn newer_ids_are_rdma_core_64s() {
        let methods = [
            "INVOKE_WRITE",
            "INFO_HANDLES",
            "QUERY_PORT",
            "GET_CONTEXT",
            "QUERY_CONTEXT",
            "QUERY_GID_TABLE",
            "QUERY_GID_ENTRY",
            "QUERY_PORT_SPEED",
            "QUERY_COMP_CNTR_CAPS",
        ];
        let m = |n| place(&methods, n) as u16;
        assert_eq!(super::device::METHOD_QUERY_GID_ENTRY, m("QUERY_GID_ENTRY"));
        assert_eq!(
            super::device::METHOD_QUERY_PORT_SPEED,
            m("QUERY_PORT_SPEED")
        );
        let speed_attrs = ["PORT_NUM", "RESP"];
        let a = |n| place(&speed_attrs, n) as u16;
        assert_eq!(super::device::ATTR_QUERY_PORT_SPEED_PORT_NUM, a("PORT_NUM"));
        assert_eq!(super::device::ATTR_QUERY_PORT_SPEED_RESP, a("RESP"));
    }
}
