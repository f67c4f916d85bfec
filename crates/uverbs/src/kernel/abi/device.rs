//! Context, device, port and GID structures of `ib_user_verbs.h` / `ib_user_ioctl_verbs.h`.
//!
//! `__be64` fields are kept as `u64` holding the big-endian bytes: convert with
//! `u64::from_be`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_get_context` (legacy write, cmd 0); driver data follows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_get_context {
    pub response: u64,
}

/// `struct ib_uverbs_get_context_resp`; driver data follows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_get_context_resp {
    pub async_fd: u32,
    pub num_comp_vectors: u32,
}

/// `struct ib_uverbs_query_device` (legacy write, cmd 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_query_device {
    pub response: u64,
}

/// `struct ib_uverbs_query_device_resp` (176 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_query_device_resp {
    pub fw_ver: u64,
    /// `__be64`.
    pub node_guid: u64,
    /// `__be64`.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: u32,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub reserved: [u8; 4],
}

/// `struct ib_uverbs_ex_query_device` (extended write, cmd 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_ex_query_device {
    pub comp_mask: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_odp_caps.per_transport_caps` (anonymous in C).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_odp_per_transport_caps {
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ib_uverbs_odp_caps` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_odp_caps {
    pub general_caps: u64,
    pub per_transport_caps: ib_uverbs_odp_per_transport_caps,
    pub reserved: u32,
}

/// `struct ib_uverbs_rss_caps` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_tm_caps` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_tm_caps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_cq_moderation_caps` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_cq_moderation_caps {
    pub max_cq_moderation_count: u16,
    pub max_cq_moderation_period: u16,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_query_device_resp`. The kernel fills `response_length` bytes (older
/// kernels fewer than `size_of`), and zero in the rest of our buffer stays zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_ex_query_device_resp {
    pub base: ib_uverbs_query_device_resp,
    pub comp_mask: u32,
    pub response_length: u32,
    pub odp_caps: ib_uverbs_odp_caps,
    pub timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub rss_caps: ib_uverbs_rss_caps,
    pub max_wq_type_rq: u32,
    pub raw_packet_caps: u32,
    pub tm_caps: ib_uverbs_tm_caps,
    pub cq_moderation_caps: ib_uverbs_cq_moderation_caps,
    pub max_dm_size: u64,
    pub xrc_odp_caps: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_query_port` (legacy write, cmd 2).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_query_port {
    pub response: u64,
    pub port_num: u8,
    pub reserved: [u8; 7],
}

/// `struct ib_uverbs_query_port_resp` (40 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_query_port_resp {
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub gid_tbl_len: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_query_port_resp_ex` (48 bytes): `UVERBS_METHOD_QUERY_PORT`'s response.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_query_port_resp_ex {
    pub legacy_resp: ib_uverbs_query_port_resp,
    pub port_cap_flags2: u16,
    pub reserved: [u8; 6],
}

/// `struct ib_uverbs_gid_entry` (32 bytes): one entry of `UVERBS_METHOD_QUERY_GID_TABLE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_gid_entry {
    /// The 16 GID bytes in network order (`__aligned_u64 gid[2]` in C).
    pub gid: [u64; 2],
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ib_uverbs_gid_type`.
    pub gid_type: u32,
    /// 0 when no netdev is associated.
    pub netdev_ifindex: u32,
}

/// `enum ib_uverbs_gid_type`.
pub mod gid_type {
    pub const IB: u32 = 0;
    pub const ROCE_V1: u32 = 1;
    pub const ROCE_V2: u32 = 2;
}

/// `enum ib_uverbs_core_support`.
pub const IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS: u64 = 1 << 0;

/// `enum ib_uverbs_query_port_flags`.
pub const IB_UVERBS_QPF_GRH_REQUIRED: u8 = 1 << 0;
