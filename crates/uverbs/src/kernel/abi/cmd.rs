//! The write() command interface of `/dev/infiniband/uverbsN` (`ib_user_verbs.h`).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `enum ib_uverbs_write_cmds`.
pub mod nr {
    pub const GET_CONTEXT: u32 = 0;
    pub const QUERY_DEVICE: u32 = 1;
    pub const QUERY_PORT: u32 = 2;
    pub const ALLOC_PD: u32 = 3;
    pub const DEALLOC_PD: u32 = 4;
    pub const CREATE_AH: u32 = 5;
    pub const MODIFY_AH: u32 = 6;
    pub const QUERY_AH: u32 = 7;
    pub const DESTROY_AH: u32 = 8;
    pub const REG_MR: u32 = 9;
    pub const REG_SMR: u32 = 10;
    pub const REREG_MR: u32 = 11;
    pub const QUERY_MR: u32 = 12;
    pub const DEREG_MR: u32 = 13;
    pub const ALLOC_MW: u32 = 14;
    pub const BIND_MW: u32 = 15;
    pub const DEALLOC_MW: u32 = 16;
    pub const CREATE_COMP_CHANNEL: u32 = 17;
    pub const CREATE_CQ: u32 = 18;
    pub const RESIZE_CQ: u32 = 19;
    pub const DESTROY_CQ: u32 = 20;
    pub const POLL_CQ: u32 = 21;
    pub const PEEK_CQ: u32 = 22;
    pub const REQ_NOTIFY_CQ: u32 = 23;
    pub const CREATE_QP: u32 = 24;
    pub const QUERY_QP: u32 = 25;
    pub const MODIFY_QP: u32 = 26;
    pub const DESTROY_QP: u32 = 27;
    pub const POST_SEND: u32 = 28;
    pub const POST_RECV: u32 = 29;
    pub const ATTACH_MCAST: u32 = 30;
    pub const DETACH_MCAST: u32 = 31;
    pub const CREATE_SRQ: u32 = 32;
    pub const MODIFY_SRQ: u32 = 33;
    pub const QUERY_SRQ: u32 = 34;
    pub const DESTROY_SRQ: u32 = 35;
    pub const POST_SRQ_RECV: u32 = 36;
    pub const OPEN_XRCD: u32 = 37;
    pub const CLOSE_XRCD: u32 = 38;
    pub const CREATE_XSRQ: u32 = 39;
    pub const OPEN_QP: u32 = 40;
}

/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`: set in `command` for the extended commands.
pub const CMD_FLAG_EXTENDED: u32 = 0x8000_0000;

/// `enum ib_uverbs_ex_write_cmds` (without the extended flag).
pub mod ex_nr {
    pub const QUERY_DEVICE: u32 = 1;
    pub const CREATE_CQ: u32 = 18;
    pub const CREATE_QP: u32 = 24;
    pub const MODIFY_QP: u32 = 26;
    /// `IB_USER_VERBS_CMD_THRESHOLD` (50) + 7: the extended-only commands are numbered after
    /// the legacy ones (CREATE_FLOW = 50, …), not like MODIFY_QP's 26.
    pub const MODIFY_CQ: u32 = 57;
}

/// `struct ib_uverbs_cmd_hdr` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_cmd_hdr {
    pub command: u32,
    /// Whole write() size including this header, in 4-byte words.
    pub in_words: u16,
    /// Response size in 4-byte words.
    pub out_words: u16,
}

/// `struct ib_uverbs_ex_cmd_hdr` (16 bytes), after `ib_uverbs_cmd_hdr` in extended commands.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_ex_cmd_hdr {
    pub response: u64,
    pub provider_in_words: u16,
    pub provider_out_words: u16,
    pub cmd_hdr_reserved: u32,
}
