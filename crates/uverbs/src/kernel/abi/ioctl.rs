//! `RDMA_VERBS_IOCTL`: header, attribute and the object/method/attribute ids we use.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `RDMA_IOCTL_MAGIC`.
pub const RDMA_IOCTL_MAGIC: u8 = 0x1b;
/// `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub const RDMA_VERBS_IOCTL: u32 = 0xC018_1B01;

/// Caller marks an attribute the kernel must understand.
pub const UVERBS_ATTR_F_MANDATORY: u16 = 1 << 0;
/// Kernel marks an output attribute it wrote.
pub const UVERBS_ATTR_F_VALID_OUTPUT: u16 = 1 << 1;

/// Driver-specific attribute/method ids have this bit set.
pub const UVERBS_ID_NS_DRIVER: u16 = 0x1000;
/// `UVERBS_ATTR_UHW_IN` (driver data in).
pub const UVERBS_ATTR_UHW_IN: u16 = UVERBS_ID_NS_DRIVER;
/// `UVERBS_ATTR_UHW_OUT` (driver data out).
pub const UVERBS_ATTR_UHW_OUT: u16 = UVERBS_ID_NS_DRIVER | 1;

/// `struct ib_uverbs_attr` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_attr {
    pub attr_id: u16,
    pub len: u16,
    pub flags: u16,
    /// `attr_data.enum_data.elem_id` in the low byte, reserved byte above.
    pub attr_data: u16,
    pub data: u64,
}

/// `struct ib_uverbs_ioctl_hdr` (24 bytes), followed in memory by the attributes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_ioctl_hdr {
    pub length: u16,
    pub object_id: u16,
    pub method_id: u16,
    pub num_attrs: u16,
    pub reserved1: u64,
    pub driver_id: u32,
    pub reserved2: u32,
}

/// `enum uverbs_default_objects`.
pub mod object {
    pub const DEVICE: u16 = 0;
    pub const PD: u16 = 1;
    pub const COMP_CHANNEL: u16 = 2;
    pub const CQ: u16 = 3;
    pub const QP: u16 = 4;
    pub const SRQ: u16 = 5;
    pub const AH: u16 = 6;
    pub const MR: u16 = 7;
    pub const MW: u16 = 8;
    pub const FLOW: u16 = 9;
    pub const XRCD: u16 = 10;
    pub const RWQ_IND_TBL: u16 = 11;
    pub const WQ: u16 = 12;
    pub const FLOW_ACTION: u16 = 13;
    pub const DM: u16 = 14;
    pub const COUNTERS: u16 = 15;
    pub const ASYNC_EVENT: u16 = 16;
}

/// Methods and attributes of `UVERBS_OBJECT_DEVICE`.
pub mod device {
    pub const METHOD_INVOKE_WRITE: u16 = 0;
    pub const METHOD_INFO_HANDLES: u16 = 1;
    pub const METHOD_QUERY_PORT: u16 = 2;
    pub const METHOD_GET_CONTEXT: u16 = 3;
    pub const METHOD_QUERY_CONTEXT: u16 = 4;
    pub const METHOD_QUERY_GID_TABLE: u16 = 5;
    pub const METHOD_QUERY_GID_ENTRY: u16 = 6;

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
