//! `RDMA_VERBS_IOCTL`: header, attribute, flags and the object ids (`ib_user_ioctl_cmds.h`,
//! `rdma_user_ioctl_cmds.h`). Each object's method and attribute ids sit beside its write()
//! structures, in its module of `obj` (`obj::cq`, `obj::qp`, ...): one place per object.

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
