//! RDMA netlink (`NETLINK_RDMA`): the generic netlink framing of `<linux/netlink.h>` and the
//! `RDMA_NL_NLDEV` commands and attributes of `<rdma/rdma_netlink.h>`.
//!
//! Netlink is host-endian; every integer here is native-endian on the wire.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `NETLINK_RDMA`: the protocol number of RDMA netlink sockets.
pub const NETLINK_RDMA: i32 = 20;

/// `struct nlmsghdr` (16 bytes).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct nlmsghdr {
    /// Length of the message including this header.
    pub nlmsg_len: u32,
    pub nlmsg_type: u16,
    pub nlmsg_flags: u16,
    pub nlmsg_seq: u32,
    pub nlmsg_pid: u32,
}

/// `struct nlmsgerr` (20 bytes): the payload of `NLMSG_ERROR`. `error` is 0 for an ACK, a
/// negative errno otherwise; `msg` is the header of the request it answers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct nlmsgerr {
    pub error: i32,
    pub msg: nlmsghdr,
}

/// `struct nlattr` (4 bytes), followed by the payload, padded to 4 bytes.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct nlattr {
    /// Length including this header, excluding the padding.
    pub nla_len: u16,
    pub nla_type: u16,
}

/// `NLMSG_ALIGNTO` / `NLA_ALIGNTO`.
pub const NLMSG_ALIGNTO: usize = 4;
/// `NLA_ALIGNTO`.
pub const NLA_ALIGNTO: usize = 4;

pub const NLM_F_REQUEST: u16 = 0x01;
pub const NLM_F_MULTI: u16 = 0x02;
pub const NLM_F_ACK: u16 = 0x04;
pub const NLM_F_DUMP_INTR: u16 = 0x10;
pub const NLM_F_ROOT: u16 = 0x100;
pub const NLM_F_MATCH: u16 = 0x200;
pub const NLM_F_DUMP: u16 = NLM_F_ROOT | NLM_F_MATCH;

pub const NLMSG_NOOP: u16 = 0x1;
pub const NLMSG_ERROR: u16 = 0x2;
pub const NLMSG_DONE: u16 = 0x3;
pub const NLMSG_OVERRUN: u16 = 0x4;

/// `NLA_F_NESTED`.
pub const NLA_F_NESTED: u16 = 1 << 15;
/// `NLA_F_NET_BYTEORDER`.
pub const NLA_F_NET_BYTEORDER: u16 = 1 << 14;
/// `RDMA_NLA_F_MANDATORY`.
pub const RDMA_NLA_F_MANDATORY: u16 = 1 << 13;
/// `RDMA_NLA_TYPE_MASK`: the attribute type without the flag bits.
pub const RDMA_NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER | RDMA_NLA_F_MANDATORY);

/// `RDMA_NL_NLDEV`: the netlink client of the RDMA device interface.
pub const RDMA_NL_NLDEV: u16 = 5;

/// `RDMA_NL_GET_TYPE(client, op)`.
pub const fn rdma_nl_get_type(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// `RDMA_NL_GET_CLIENT(type)`.
pub const fn rdma_nl_get_client(ty: u16) -> u16 {
    (ty & (((1 << 6) - 1) << 10)) >> 10
}

/// `RDMA_NL_GET_OP(type)`.
pub const fn rdma_nl_get_op(ty: u16) -> u16 {
    ty & ((1 << 10) - 1)
}

/// `enum rdma_nldev_command`.
pub mod cmd {
    pub const GET: u16 = 1;
    pub const SET: u16 = 2;
    pub const NEWLINK: u16 = 3;
    pub const DELLINK: u16 = 4;
    pub const PORT_GET: u16 = 5;
    pub const SYS_GET: u16 = 6;
    pub const SYS_SET: u16 = 7;
    pub const RES_GET: u16 = 9;
    pub const GET_CHARDEV: u16 = 15;
}

/// `enum rdma_nldev_attr` (the ones rverbs reads or writes).
pub mod attr {
    pub const PAD: u16 = 0;
    pub const DEV_INDEX: u16 = 1;
    pub const DEV_NAME: u16 = 2;
    pub const PORT_INDEX: u16 = 3;
    pub const CAP_FLAGS: u16 = 4;
    pub const FW_VERSION: u16 = 5;
    pub const NODE_GUID: u16 = 6;
    pub const SYS_IMAGE_GUID: u16 = 7;
    pub const SUBNET_PREFIX: u16 = 8;
    pub const LID: u16 = 9;
    pub const SM_LID: u16 = 10;
    pub const LMC: u16 = 11;
    pub const PORT_STATE: u16 = 12;
    pub const PORT_PHYS_STATE: u16 = 13;
    pub const DEV_NODE_TYPE: u16 = 14;
    pub const RES_SUMMARY: u16 = 15;
    pub const RES_SUMMARY_ENTRY: u16 = 16;
    pub const RES_SUMMARY_ENTRY_NAME: u16 = 17;
    pub const RES_SUMMARY_ENTRY_CURR: u16 = 18;
    pub const NDEV_INDEX: u16 = 50;
    pub const NDEV_NAME: u16 = 51;
    pub const LINK_TYPE: u16 = 65;
    pub const DEV_PROTOCOL: u16 = 67;
    pub const CHARDEV_TYPE: u16 = 69;
    pub const CHARDEV_NAME: u16 = 70;
    pub const CHARDEV_ABI: u16 = 71;
    pub const CHARDEV: u16 = 72;
    pub const UVERBS_DRIVER_ID: u16 = 73;
    pub const DEV_DIM: u16 = 84;
}
