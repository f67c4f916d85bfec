//! EFA's driver data of the uverbs ABI (`include/rdma/efa-abi.h`, as rdma-core 44 ships it in
//! `kernel-headers/rdma/efa-abi.h`) and the device's queue formats (rdma-core 44
//! `providers/efa/efa_io_defs.h`, `efa_io_regs_defs.h`). Names keep the kernel's spelling so
//! the two can be read side by side; sizes are checked against the installed header by
//! `crates/provider/src/tests/efa_oracle.rs` (`efa_abi_sizes`) and every field by the oracle,
//! which compares the bytes libefa sends and reads with ours.
//!
//! `__aligned_u64` fields are 8-byte aligned on every architecture, hence `align(8)`.

#![allow(non_camel_case_types)]
// The complete set of the header's constants, used or not (the ABI as the kernel states it).
#![allow(dead_code)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `EFA_UVERBS_ABI_VERSION`: the driver ABI version in sysfs (`uverbsN/abi_version`).
pub const EFA_UVERBS_ABI_VERSION: u32 = 1;

/// alloc_ucontext request `comp_mask`: the library reads `max_tx_batch`.
pub const EFA_ALLOC_UCONTEXT_CMD_COMP_TX_BATCH: u32 = 1 << 0;
/// alloc_ucontext request `comp_mask`: the library reads `min_sq_wr`.
pub const EFA_ALLOC_UCONTEXT_CMD_COMP_MIN_SQ_WR: u32 = 1 << 1;

/// `cmds_supp_udata_mask`: QUERY_DEVICE answers EFA's driver data.
pub const EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE: u32 = 1 << 0;
/// `cmds_supp_udata_mask`: CREATE_AH answers EFA's driver data (the AH number).
pub const EFA_USER_CMDS_SUPP_UDATA_CREATE_AH: u32 = 1 << 1;

/// CREATE_CQ `flags`: the CQ has a completion channel.
pub const EFA_CREATE_CQ_WITH_COMPLETION_CHANNEL: u8 = 1 << 0;
/// CREATE_CQ response `comp_mask`: `db_off` and `db_mmap_key` are valid.
pub const EFA_CREATE_CQ_RESP_DB_OFF: u32 = 1 << 0;

/// `driver_qp_type` of CREATE_QP: Scalable Reliable Datagram.
pub const EFA_QP_DRIVER_TYPE_SRD: u32 = 0;

/// QUERY_DEVICE `device_caps`: RDMA READ.
pub const EFA_QUERY_DEVICE_CAPS_RDMA_READ: u32 = 1 << 0;
/// QUERY_DEVICE `device_caps`: RNR retry.
pub const EFA_QUERY_DEVICE_CAPS_RNR_RETRY: u32 = 1 << 1;
/// QUERY_DEVICE `device_caps`: CQ notifications (completion channels, arming).
pub const EFA_QUERY_DEVICE_CAPS_CQ_NOTIFICATIONS: u32 = 1 << 2;

/// `struct efa_ibv_alloc_ucontext_cmd` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_alloc_ucontext_cmd {
    pub comp_mask: u32,
    pub reserved_20: [u8; 4],
}

/// `struct efa_ibv_alloc_ucontext_resp` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_alloc_ucontext_resp {
    pub comp_mask: u32,
    pub cmds_supp_udata_mask: u32,
    pub sub_cqs_per_cq: u16,
    pub inline_buf_size: u16,
    /// Bytes.
    pub max_llq_size: u32,
    /// In units of 64 bytes.
    pub max_tx_batch: u16,
    pub min_sq_wr: u16,
    pub reserved_a0: [u8; 4],
}

/// `struct efa_ibv_create_cq` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_create_cq {
    pub comp_mask: u32,
    pub cq_entry_size: u32,
    pub num_sub_cqs: u16,
    pub flags: u8,
    pub reserved_58: [u8; 5],
}

/// `struct efa_ibv_create_cq_resp` (40 bytes).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_create_cq_resp {
    pub comp_mask: u32,
    pub reserved_20: [u8; 4],
    pub q_mmap_key: u64,
    pub q_mmap_size: u64,
    pub cq_idx: u16,
    pub reserved_d0: [u8; 2],
    pub db_off: u32,
    pub db_mmap_key: u64,
}

/// `struct efa_ibv_create_qp` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_create_qp {
    pub comp_mask: u32,
    /// Bytes.
    pub rq_ring_size: u32,
    /// Bytes.
    pub sq_ring_size: u32,
    pub driver_qp_type: u32,
}

/// `struct efa_ibv_create_qp_resp` (64 bytes).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_create_qp_resp {
    pub comp_mask: u32,
    /// Offset of the RQ doorbell inside its page.
    pub rq_db_offset: u32,
    /// Offset of the SQ doorbell inside its page.
    pub sq_db_offset: u32,
    /// Offset of the LLQ descriptors inside their first page.
    pub llq_desc_offset: u32,
    pub rq_mmap_key: u64,
    pub rq_mmap_size: u64,
    pub rq_db_mmap_key: u64,
    pub sq_db_mmap_key: u64,
    pub llq_desc_mmap_key: u64,
    pub send_sub_cq_idx: u16,
    pub recv_sub_cq_idx: u16,
    pub reserved_1e0: [u8; 4],
}

/// `struct efa_ibv_create_ah_resp` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_create_ah_resp {
    pub comp_mask: u32,
    pub efa_address_handle: u16,
    pub reserved_30: [u8; 2],
}

/// `struct efa_ibv_ex_query_device_resp` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct efa_ibv_ex_query_device_resp {
    pub comp_mask: u32,
    pub max_sq_wr: u32,
    pub max_rq_wr: u32,
    pub max_sq_sge: u16,
    pub max_rq_sge: u16,
    pub max_rdma_size: u32,
    pub device_caps: u32,
}

/// `sizeof(struct efa_io_tx_wqe)`: one LLQ send descriptor (32-byte meta descriptor, then 32
/// bytes of buffer descriptors or inline data).
pub const TX_WQE: usize = 64;
/// `sizeof(struct efa_io_rx_desc)`: one receive descriptor (one per SGE).
pub const RX_DESC: usize = 16;
/// `sizeof(struct efa_io_rx_cdesc)`: the CQE size libefa 44 asks for (no source GID).
pub const RX_CDESC: usize = 16;
/// `EFA_IO_TX_DESC_NUM_BUFS`: buffer descriptors in one send descriptor.
pub const TX_DESC_NUM_BUFS: u32 = 2;

/// `EFA_IO_TX_DESC_NUM_RDMA_BUFS`: local buffer descriptors in one RDMA READ descriptor
/// (libefa's `max_wr_rdma_sge` is at most this).
pub const TX_DESC_NUM_RDMA_BUFS: u32 = 1;

/// `efa_io_tx_meta_desc.ctrl1`: operation type SEND (bits 3:0).
pub const TX_OP_SEND: u8 = 0;
/// `ctrl1`: operation type RDMA READ (`EFA_IO_RDMA_READ`; the descriptor's second half is
/// `efa_io_rdma_req`: the remote buffer, then the local one).
pub const TX_OP_RDMA_READ: u8 = 1;
/// `ctrl1`: immediate data present.
pub const TX_CTRL1_HAS_IMM: u8 = 1 << 4;
/// `ctrl1`: inline message (the data follows the meta descriptor).
pub const TX_CTRL1_INLINE_MSG: u8 = 1 << 5;
/// `ctrl1`: meta descriptor (must be set).
pub const TX_CTRL1_META_DESC: u8 = 1 << 7;
/// `ctrl2`: phase.
pub const TX_CTRL2_PHASE: u8 = 1 << 0;
/// `ctrl2`: first descriptor of the transaction.
pub const TX_CTRL2_FIRST: u8 = 1 << 2;
/// `ctrl2`: last descriptor of the transaction.
pub const TX_CTRL2_LAST: u8 = 1 << 3;
/// `ctrl2`: completion requested.
pub const TX_CTRL2_COMP_REQ: u8 = 1 << 4;
/// `lkey` bits of a buffer descriptor (23:0).
pub const LKEY_MASK: u32 = 0x00ff_ffff;
/// `efa_io_rx_desc.lkey_ctrl`: first descriptor of the WQE.
pub const RX_FIRST: u32 = 1 << 30;
/// `efa_io_rx_desc.lkey_ctrl`: last descriptor of the WQE.
pub const RX_LAST: u32 = 1 << 31;

/// `efa_io_cdesc_common.flags`: phase (bit 0).
pub const CDESC_PHASE: u8 = 1 << 0;
/// `flags`: queue type (bits 2:1).
pub const CDESC_Q_TYPE_SHIFT: u8 = 1;
/// `flags`: immediate data present.
pub const CDESC_HAS_IMM: u8 = 1 << 3;
/// `enum efa_io_queue_type`: send queue.
pub const IO_SEND_QUEUE: u8 = 1;

/// CQ doorbell: consumer index (bits 15:0).
pub const CQ_DB_CONSUMER_INDEX_MASK: u32 = 0xffff;
/// CQ doorbell: command sequence number (bits 30:29).
pub const CQ_DB_CMD_SN_SHIFT: u32 = 29;
/// CQ doorbell: arm.
pub const CQ_DB_ARM: u32 = 1 << 31;
