//! The mlx5 driver data of the uverbs ABI (`include/rdma/mlx5-abi.h`, Linux 6.1 uapi) and the
//! device numbers rverbs needs to speak to a ConnectX CQ.
//!
//! The structs travel in the `UHW_IN`/`UHW_OUT` attributes (or after the core data of a write()
//! command). Names keep the kernel's spelling so the two can be read side by side; sizes and
//! every field offset are checked against the installed header by
//! `crates/provider/src/tests/mlx5_abi_layout.rs` (a C probe compiled with `cc`).
//!
//! `__aligned_u64` fields are 8-byte aligned on every architecture, hence `align(8)`.

#![allow(non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `MLX5_IB_UVERBS_ABI_VERSION`: the driver ABI version in sysfs (`uverbsN/abi_version`).
pub const MLX5_IB_UVERBS_ABI_VERSION: u32 = 1;

/// `enum mlx5_lib_caps`: `lib_caps` bits of the alloc_ucontext request.
pub const MLX5_LIB_CAP_4K_UAR: u64 = 1 << 0;
/// The library allocates UARs dynamically (needs the UAR object ioctl; rverbs does not ask).
pub const MLX5_LIB_CAP_DYN_UAR: u64 = 1 << 1;

/// `enum mlx5_ib_alloc_uctx_v2_flags`.
pub const MLX5_IB_ALLOC_UCTX_DEVX: u32 = 1 << 0;

/// `enum mlx5_ib_alloc_ucontext_resp_mask` (`comp_mask` of the response): the response
/// carries `hca_core_clock_offset`.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET: u32 = 1 << 0;
/// The response carries `dump_fill_mkey`.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_DUMP_FILL_MKEY: u32 = 1 << 1;
/// The device supports enhanced connection establishment (ECE).
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE: u32 = 1 << 2;
/// The device can move a QP from SQD back to RTS.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_SQD2RTS: u32 = 1 << 3;
/// CQE timestamps can be real time (not free-running).
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_REAL_TIME_TS: u32 = 1 << 4;
/// The device supports the mkey update-tag feature.
pub const MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_MKEY_UPDATE_TAG: u32 = 1 << 5;

/// `enum mlx5_ib_create_cq_flags`: 128-byte CQE slots padded (the CQE in the second half).
pub const MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD: u16 = 1 << 0;
/// `uar_page_index` names the UAR the CQ doorbells go through (dynamic UARs).
pub const MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX: u16 = 1 << 1;
/// Real-time CQE timestamps.
pub const MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS: u16 = 1 << 2;

/// `struct mlx5_ib_alloc_ucontext_req_v2` (32 bytes): driver data of GET_CONTEXT.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_alloc_ucontext_req_v2 {
    /// Blue-flame registers asked for (two per 4 KiB UAR; static UARs only).
    pub total_num_bfregs: u32,
    /// Of those, registers dedicated to one QP each.
    pub num_low_latency_bfregs: u32,
    /// `MLX5_IB_ALLOC_UCTX_*` (DEVX).
    pub flags: u32,
    /// Must be 0.
    pub comp_mask: u32,
    /// Highest CQE version the library parses (0 or 1).
    pub max_cqe_version: u8,
    /// Must be 0.
    pub reserved0: u8,
    /// Must be 0.
    pub reserved1: u16,
    /// Must be 0.
    pub reserved2: u32,
    /// `MLX5_LIB_CAP_*`: 4 KiB UARs, dynamic UARs.
    pub lib_caps: u64,
}

/// `struct mlx5_ib_alloc_ucontext_resp` (72 bytes in 6.1). Older kernels fill a prefix only:
/// see [`crate::mlx5::context::Mlx5ContextUdata::parse_response`].
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_alloc_ucontext_resp {
    /// Size of the device QP table.
    pub qp_tab_size: u32,
    /// Bytes of one blue-flame register (both BlueFlame halves); 0: no write combining.
    pub bf_reg_size: u32,
    /// Static blue-flame registers the context got (0: dynamic UARs).
    pub tot_bfregs: u32,
    /// The device's cache line size.
    pub cache_line_size: u32,
    /// Largest send WQE, bytes.
    pub max_sq_desc_sz: u16,
    /// Largest receive WQE, bytes.
    pub max_rq_desc_sz: u16,
    /// Most 64-byte send blocks per SQ.
    pub max_send_wqebb: u32,
    /// Most receive WQEs per RQ.
    pub max_recv_wr: u32,
    /// Most WQEs per SRQ.
    pub max_srq_recv_wr: u32,
    /// Ports of the device.
    pub num_ports: u16,
    /// Flow-action capabilities (`MLX5_USER_ALLOC_UCONTEXT_FLOW_ACTION_FLAGS_*`).
    pub flow_action_flags: u16,
    /// `MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_*`: which optional fields are valid.
    pub comp_mask: u32,
    /// Bytes of this response the kernel filled.
    pub response_length: u32,
    /// CQE version in force (at most the one asked for).
    pub cqe_version: u8,
    /// `MLX5_USER_CMDS_SUPP_UHW_*`: commands that take driver data (create AH).
    pub cmds_supp_uhw: u8,
    /// Minimum inline header for Ethernet raw-packet QPs.
    pub eth_min_inline: u8,
    /// Bit mask of the clock-info page versions the kernel can map.
    pub clock_info_versions: u8,
    /// mmap offset of the core clock (with the CORE_CLOCK_OFFSET bit).
    pub hca_core_clock_offset: u64,
    /// log2 of one UAR's size.
    pub log_uar_size: u32,
    /// UARs per system page.
    pub num_uars_per_page: u32,
    /// Blue-flame registers available for dynamic allocation.
    pub num_dyn_bfregs: u32,
    /// The dump-and-fill memory key (with the DUMP_FILL_MKEY bit).
    pub dump_fill_mkey: u32,
}

/// `struct mlx5_ib_create_cq` (32 bytes): driver data of CREATE_CQ.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_cq {
    /// Address of the CQ buffer the library allocated.
    pub buf_addr: u64,
    /// Address of the CQ doorbell record.
    pub db_addr: u64,
    /// CQE slot size: 64 or 128.
    pub cqe_size: u32,
    /// CQE compression (rverbs: 0).
    pub cqe_comp_en: u8,
    /// Compressed CQE format (with `cqe_comp_en`).
    pub cqe_comp_res_format: u8,
    /// `MLX5_IB_CREATE_CQ_FLAGS_*`.
    pub flags: u16,
    /// The UAR for the CQ doorbells (with `UAR_PAGE_INDEX`).
    pub uar_page_index: u16,
    /// Must be 0.
    pub reserved0: u16,
    /// Must be 0.
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_cq_resp` (8 bytes).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_cq_resp {
    /// The CQ number (24 bits).
    pub cqn: u32,
    /// Unused.
    pub reserved: u32,
}

// ---- Numbers that are not in the uapi header (rdma-core's providers/mlx5, the kernel's
// drivers/infiniband/hw/mlx5 and include/linux/mlx5; see docs/mlx5.md for the sources). ----

/// Index of the consumer-index word in the CQ doorbell record (`MLX5_CQ_SET_CI`).
pub const MLX5_CQ_SET_CI: usize = 0;
/// Index of the arm word in the CQ doorbell record (`MLX5_CQ_ARM_DB`).
pub const MLX5_CQ_ARM_DB: usize = 1;
/// Byte offset of the CQ doorbell register in a UAR page (`MLX5_CQ_DOORBELL`).
pub const MLX5_CQ_DOORBELL: usize = 0x20;
/// Arm command: next completion of any kind (`MLX5_CQ_DB_REQ_NOT`).
pub const MLX5_CQ_DB_REQ_NOT: u32 = 0;
/// Arm command: next solicited (or error) completion (`MLX5_CQ_DB_REQ_NOT_SOL`).
pub const MLX5_CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
/// The largest ring libmlx5 builds (2^24 entries; the kernel further limits it to the device's
/// `log_max_cq_sz`).
pub const MLX5_MAX_CQ_ENTRIES: u32 = 1 << 24;
/// The consumer index and the arm word carry 24 bits of the consumer index.
pub const MLX5_CQ_CI_MASK: u32 = 0x00ff_ffff;

/// `MLX5_NUM_NON_FP_BFREGS_PER_UAR`: blue-flame registers per UAR that are not "fast path".
pub const MLX5_NUM_NON_FP_BFREGS_PER_UAR: u32 = 2;
/// `MLX5_MAX_UARS`.
pub const MLX5_MAX_UARS: u32 = 1 << 8;
/// `MLX5_MAX_BFREGS`: the kernel refuses a larger `total_num_bfregs` (ENOMEM).
pub const MLX5_MAX_BFREGS: u32 = MLX5_MAX_UARS * MLX5_NUM_NON_FP_BFREGS_PER_UAR;
/// libmlx5's default `total_num_bfregs` (`MLX5_DEF_TOT_UUARS`).
pub const MLX5_DEF_TOT_UUARS: u32 = 8 * MLX5_NUM_NON_FP_BFREGS_PER_UAR;
/// libmlx5's `MLX5_MED_BFREGS_TSHOLD`.
pub const MLX5_MED_BFREGS_TSHOLD: u32 = 12;
/// The device's page size for UARs (`MLX5_ADAPTER_PAGE_SIZE`).
pub const MLX5_ADAPTER_PAGE_SIZE: u32 = 4096;

/// mmap offsets on the uverbs fd: `((command << MLX5_IB_MMAP_CMD_SHIFT) | index) * page_size`.
pub const MLX5_IB_MMAP_CMD_SHIFT: u32 = 8;
/// `MLX5_IB_MMAP_REGULAR_PAGE`: a static UAR page, write-combining if the device supports it.
pub const MLX5_IB_MMAP_REGULAR_PAGE: u32 = 0;
/// `MLX5_IB_MMAP_NC_PAGE`: a static UAR page mapped non-cached.
pub const MLX5_IB_MMAP_NC_PAGE: u32 = 3;

/// `MLX5_CQE_VERSION_V0`: CQEs name the QP by its number.
pub const MLX5_CQE_VERSION_V0: u8 = 0;
/// `MLX5_CQE_VERSION_V1`: CQEs carry the user index given at QP creation in `srqn_uidx`.
pub const MLX5_CQE_VERSION_V1: u8 = 1;

/// `struct mlx5_ib_create_qp` (56 bytes): driver data of CREATE_QP.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_qp {
    /// The QP buffer (RQ first, SQ after it).
    pub buf_addr: u64,
    /// The doorbell record (two big-endian u32: receive, send).
    pub db_addr: u64,
    /// Send WQE basic blocks (64 bytes each), a power of two.
    pub sq_wqe_count: u32,
    /// Receive WQEs, a power of two.
    pub rq_wqe_count: u32,
    /// log2 of the receive WQE size.
    pub rq_wqe_shift: u32,
    /// `MLX5_QP_FLAG_*`.
    pub flags: u32,
    /// User index (CQE version 1), `0xffffff` with CQE version 0.
    pub uidx: u32,
    /// Blue-flame register asked for (with `MLX5_QP_FLAG_BFREG_INDEX`), else 0.
    pub bfreg_index: u32,
    /// Raw-packet QPs only: a separate SQ buffer.
    pub sq_buf_addr: u64,
    /// Enhanced connection establishment options.
    pub ece_options: u32,
    /// DCI streams (DC only): `log_num_concurent`, `log_num_errored`.
    pub dci_streams: [u8; 2],
    /// Reserved, zero.
    pub reserved: u16,
}

/// `struct mlx5_ib_create_qp_resp` (40 bytes).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_qp_resp {
    /// The blue-flame register the kernel gave the QP (libmlx5's `bfs[]` numbering: four per
    /// UAR, of which the first two are usable).
    pub bfreg_index: u32,
    /// Enhanced connection establishment options.
    pub ece_options: u32,
    /// `MLX5_IB_CREATE_QP_RESP_MASK_*`.
    pub comp_mask: u32,
    /// Raw-packet / RSS QPs only.
    pub tirn: u32,
    /// Raw-packet QPs only.
    pub tisn: u32,
    /// Raw-packet QPs only.
    pub rqn: u32,
    /// Raw-packet QPs only.
    pub sqn: u32,
    /// Reserved.
    pub reserved1: u32,
    /// RSS QPs only.
    pub tir_icm_addr: u64,
}

/// `struct mlx5_ib_create_srq` (32 bytes): driver data of CREATE_SRQ.
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_srq {
    /// The SRQ buffer.
    pub buf_addr: u64,
    /// The doorbell record (one big-endian u32: the WQE counter).
    pub db_addr: u64,
    /// `MLX5_SRQ_FLAG_SIGNATURE` or 0.
    pub flags: u32,
    /// Explicit padding.
    pub reserved0: u32,
    /// User index (CQE version 1).
    pub uidx: u32,
    /// Reserved.
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_srq_resp` (8 bytes).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_srq_resp {
    /// The SRQ number.
    pub srqn: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct mlx5_ib_create_ah_resp` (16 bytes): the destination MAC on RoCE.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mlx5_ib_create_ah_resp {
    /// Bytes the kernel filled.
    pub response_length: u32,
    /// Destination MAC address.
    pub dmac: [u8; 6],
    /// Reserved.
    pub reserved: [u8; 6],
}

/// `MLX5_QP_FLAG_SCATTER_CQE`: small messages land in the CQE (rverbs never asks: its poller
/// does not take scattered CQEs).
pub const MLX5_QP_FLAG_SCATTER_CQE: u32 = 1 << 1;
/// `MLX5_QP_FLAG_BFREG_INDEX`: `bfreg_index` names a dynamically allocated register.
pub const MLX5_QP_FLAG_BFREG_INDEX: u32 = 1 << 3;
/// `MLX5_BF_OFFSET`: blue-flame registers start at this offset in a UAR.
pub const MLX5_BF_OFFSET: usize = 0x800;
/// Blue-flame registers per 4 KiB UAR in libmlx5's numbering (`NUM_BFREGS_PER_UAR`).
pub const MLX5_BFREGS_PER_UAR: u32 = 4;

/// `MLX5_IB_OBJECT_UAR` (`enum mlx5_ib_objects` in `mlx5_user_ioctl_cmds.h`): the driver
/// object through which a context allocates UARs dynamically (driver namespace, 0x1000 + 8).
pub const MLX5_IB_OBJECT_UAR: u16 = 0x1008;
/// `MLX5_IB_METHOD_UAR_OBJ_ALLOC`.
pub const MLX5_IB_METHOD_UAR_OBJ_ALLOC: u16 = 0x1000;
/// `MLX5_IB_METHOD_UAR_OBJ_DESTROY`.
pub const MLX5_IB_METHOD_UAR_OBJ_DESTROY: u16 = 0x1001;
/// `MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE` (IDR, new object).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE: u16 = 0x1000;
/// `MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE` (const in, `MLX5_IB_UAPI_UAR_ALLOC_TYPE_*`).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE: u16 = 0x1001;
/// `MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET` (out u64).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET: u16 = 0x1002;
/// `MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH` (out u32).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH: u16 = 0x1003;
/// `MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID` (out u32: the UAR's index on the device).
pub const MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID: u16 = 0x1004;
/// `MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE` (IDR).
pub const MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE: u16 = 0x1000;
/// `MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF`: a write-combining UAR (doorbells and BlueFlame).
pub const MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF: u32 = 0;
/// `MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC`: a non-cached UAR (doorbells only).
pub const MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC: u32 = 1;
/// `MLX5_QP_FLAG_UAR_PAGE_INDEX`: `bfreg_index` of CREATE_QP is a dynamic UAR's page id.
pub const MLX5_QP_FLAG_UAR_PAGE_INDEX: u32 = 1 << 10;
