//! The raw ucma ABI of `/dev/infiniband/rdma_cm` (`include/rdma/rdma_user_cm.h`, ABI version 4),
//! plus the few structures of `ib_user_verbs.h` / `ib_user_sa.h` it embeds.
//!
//! Every structure here is a byte-for-byte mirror of the 6.1 uapi header; `tests/abi_layout.rs`
//! compiles a C probe against `/usr/include/rdma/rdma_user_cm.h` and compares every size and
//! field offset. Names keep the kernel's spelling so the two can be read side by side. Nothing
//! here is meant for users: the safe API is [`crate::CmId`] / [`crate::EventChannel`].
//!
//! Multi-byte fields are in host order unless named `*_be` or documented as network order
//! (socket addresses, path records, GIDs keep the kernel's wire layout as byte arrays).

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// `RDMA_USER_CM_ABI_VERSION`: the only ABI this crate speaks.
pub const RDMA_USER_CM_ABI_VERSION: u32 = 4;
/// `RDMA_MAX_PRIVATE_DATA`: size of the private-data buffers in the command structures.
pub const RDMA_MAX_PRIVATE_DATA: usize = 256;

/// The anonymous command enum of `rdma_user_cm.h` (`RDMA_USER_CM_CMD_*`).
pub mod cmd {
    pub const CREATE_ID: u32 = 0;
    pub const DESTROY_ID: u32 = 1;
    pub const BIND_IP: u32 = 2;
    pub const RESOLVE_IP: u32 = 3;
    pub const RESOLVE_ROUTE: u32 = 4;
    pub const QUERY_ROUTE: u32 = 5;
    pub const CONNECT: u32 = 6;
    pub const LISTEN: u32 = 7;
    pub const ACCEPT: u32 = 8;
    pub const REJECT: u32 = 9;
    pub const DISCONNECT: u32 = 10;
    pub const INIT_QP_ATTR: u32 = 11;
    pub const GET_EVENT: u32 = 12;
    /// Defined by the ABI but the kernel has no handler for it: always `ENOSYS`.
    pub const GET_OPTION: u32 = 13;
    pub const SET_OPTION: u32 = 14;
    pub const NOTIFY: u32 = 15;
    pub const JOIN_IP_MCAST: u32 = 16;
    pub const LEAVE_MCAST: u32 = 17;
    pub const MIGRATE_ID: u32 = 18;
    pub const QUERY: u32 = 19;
    pub const BIND: u32 = 20;
    pub const RESOLVE_ADDR: u32 = 21;
    pub const JOIN_MCAST: u32 = 22;
    /// `RDMA_USER_CM_CMD_RESOLVE_IB_SERVICE` (InfiniBand SA service records; not used here).
    /// Newer than the installed 6.1 header: the number is rdma-core 64's
    /// `kernel-headers/rdma/rdma_user_cm.h`, pinned by a unit test.
    pub const RESOLVE_IB_SERVICE: u32 = 23;
    /// `RDMA_USER_CM_CMD_WRITE_CM_EVENT`: queue a USER or INTERNAL event on an id's channel.
    /// In the 7.x kernels, not in 6.1 or 6.12 (which answer `EINVAL`: a command past their
    /// table). Newer than the installed header, as [`RESOLVE_IB_SERVICE`].
    pub const WRITE_CM_EVENT: u32 = 24;
}

/// `enum rdma_ucm_port_space`.
pub mod ps {
    pub const IPOIB: u16 = 0x0002;
    pub const IB: u16 = 0x013F;
    pub const TCP: u16 = 0x0106;
    pub const UDP: u16 = 0x0111;
}

/// `RDMA_USER_CM_QUERY_*`: the `option` of [`rdma_ucm_query`].
pub mod query {
    pub const ADDR: u32 = 0;
    pub const PATH: u32 = 1;
    pub const GID: u32 = 2;
}

/// Option levels and names of [`rdma_ucm_set_option`].
pub mod opt {
    pub const LEVEL_ID: u32 = 0;
    pub const LEVEL_IB: u32 = 1;
    /// u8 type of service.
    pub const ID_TOS: u32 = 0;
    /// int (4 bytes), boolean.
    pub const ID_REUSEADDR: u32 = 1;
    /// int (4 bytes), boolean.
    pub const ID_AFONLY: u32 = 2;
    /// u8, the local ACK timeout exponent.
    pub const ID_ACK_TIMEOUT: u32 = 3;
    /// `ib_path_rec_data[]`.
    pub const IB_PATH: u32 = 1;
}

/// `IB_PATH_*` flags of [`ib_path_rec_data`] (`ib_user_sa.h`).
pub mod path_flags {
    pub const GMP: u32 = 1;
    pub const PRIMARY: u32 = 1 << 1;
    pub const ALTERNATE: u32 = 1 << 2;
    pub const OUTBOUND: u32 = 1 << 3;
    pub const INBOUND: u32 = 1 << 4;
    pub const INBOUND_REVERSE: u32 = 1 << 5;
    pub const BIDIRECTIONAL: u32 = OUTBOUND | INBOUND_REVERSE;
}

/// `AF_INET`, `AF_INET6` and `AF_IB` (the last is not in libc's headers: `include/linux/socket.h`).
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;
pub const AF_IB: u16 = 27;

/// `struct rdma_ucm_cmd_hdr` (8 bytes): `in` counts the payload bytes after this header, `out`
/// the response bytes the kernel may write through the payload's response pointer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_cmd_hdr {
    pub cmd: u32,
    pub r#in: u16,
    pub out: u16,
}

/// `struct sockaddr_in` (`linux/in.h`, 16 bytes, 4-aligned by its `struct in_addr`). Port and
/// address in network order.
#[repr(C, align(4))]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct sockaddr_in {
    pub sin_family: u16,
    pub sin_port: [u8; 2],
    pub sin_addr: [u8; 4],
    pub sin_zero: [u8; 8],
}

/// `struct sockaddr_in6` (`linux/in6.h`, 28 bytes). Port, flow info and address in network
/// order; `sin6_scope_id` in host order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct sockaddr_in6 {
    pub sin6_family: u16,
    pub sin6_port: [u8; 2],
    pub sin6_flowinfo: [u8; 4],
    pub sin6_addr: [u8; 16],
    pub sin6_scope_id: u32,
}

/// `struct sockaddr_ib` (48 bytes). Not a uapi structure: it lives in the kernel's
/// `include/rdma/ib.h` and rdma-core's `librdmacm/ib.h`, so the C layout probe cannot see it;
/// its layout is pinned by a unit test and by `rdma_addr_size()` accepting 48 bytes for AF_IB.
/// Every multi-byte field except `sib_scope_id` is big-endian.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct sockaddr_ib {
    pub sib_family: u16,
    pub sib_pkey: [u8; 2],
    pub sib_flowinfo: [u8; 4],
    pub sib_addr: [u8; 16],
    pub sib_sid: [u8; 8],
    pub sib_sid_mask: [u8; 8],
    pub sib_scope_id: u64,
}

/// `struct __kernel_sockaddr_storage` (128 bytes, pointer-aligned): the family in the first two
/// bytes, then the family's own layout.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct sockaddr_storage {
    pub bytes: [u8; 128],
}

impl Default for sockaddr_storage {
    fn default() -> Self {
        Self { bytes: [0; 128] }
    }
}

impl sockaddr_storage {
    /// The address family in the first two bytes (host order, like `ss_family`).
    pub fn family(&self) -> u16 {
        u16::from_ne_bytes([self.bytes[0], self.bytes[1]])
    }
}

/// `struct rdma_ucm_create_id` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_create_id {
    /// Echoed in every event of the id (must be non-zero: the kernel drops events of ids whose
    /// uid is 0).
    pub uid: u64,
    pub response: u64,
    pub ps: u16,
    /// `ib_qp_type`; only used by the kernel for `RDMA_PS_IB`.
    pub qp_type: u8,
    pub reserved: [u8; 5],
}

/// `struct rdma_ucm_create_id_resp` (4 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_create_id_resp {
    pub id: u32,
}

/// `struct rdma_ucm_destroy_id` (16 bytes); also the request of `LEAVE_MCAST`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_destroy_id {
    pub response: u64,
    pub id: u32,
    pub reserved: u32,
}

/// `struct rdma_ucm_destroy_id_resp` (4 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_destroy_id_resp {
    pub events_reported: u32,
}

/// `struct rdma_ucm_bind_ip` (40 bytes): the pre-AF_IB bind; IPv4 goes in the sockaddr_in6
/// slot with its own family.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_bind_ip {
    /// Unused by the kernel (no response), kept by the ABI.
    pub response: u64,
    pub addr: sockaddr_in6,
    pub id: u32,
}

/// `struct rdma_ucm_bind` (136 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_bind {
    pub id: u32,
    /// Must equal the size the family implies (16, 28 or 48).
    pub addr_size: u16,
    pub reserved: u16,
    pub addr: sockaddr_storage,
}

/// `struct rdma_ucm_join_mcast` (152 bytes); the response is `rdma_ucm_create_id_resp`
/// (the multicast's kernel id, the `id` of its events and of `LEAVE_MCAST`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_join_mcast {
    pub response: u64,
    /// Echoed as the `uid` of the join's MULTICAST_JOIN / MULTICAST_ERROR events.
    pub uid: u64,
    pub id: u32,
    /// Must equal the size the family implies.
    pub addr_size: u16,
    /// `RDMA_MC_JOIN_FLAG_*`.
    pub join_flags: u16,
    pub addr: sockaddr_storage,
}

/// `struct rdma_ucm_join_ip_mcast` (48 bytes): `JOIN_IP_MCAST`, the join of kernels before
/// `JOIN_MCAST` (always a full member).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_join_ip_mcast {
    pub response: u64,
    pub uid: u64,
    pub addr: sockaddr_in6,
    pub id: u32,
}

/// `struct rdma_ucm_resolve_ip` (64 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_resolve_ip {
    pub src_addr: sockaddr_in6,
    pub dst_addr: sockaddr_in6,
    pub id: u32,
    pub timeout_ms: u32,
}

/// `struct rdma_ucm_resolve_addr` (272 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_resolve_addr {
    pub id: u32,
    pub timeout_ms: u32,
    /// 0 = no source address.
    pub src_size: u16,
    pub dst_size: u16,
    pub reserved: u32,
    pub src_addr: sockaddr_storage,
    pub dst_addr: sockaddr_storage,
}

/// `struct rdma_ucm_resolve_route` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_resolve_route {
    pub id: u32,
    pub timeout_ms: u32,
}

/// `struct rdma_ucm_query` (16 bytes): request of `QUERY` and `QUERY_ROUTE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_query {
    pub response: u64,
    pub id: u32,
    pub option: u32,
}

/// `struct ib_user_path_rec` (`ib_user_sa.h`, 64 bytes). `dlid`, `slid`, `flow_label`, `pkey`
/// are big-endian.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: [u8; 2],
    pub slid: [u8; 2],
    pub raw_traffic: u32,
    pub flow_label: [u8; 4],
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: [u8; 2],
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_path_rec_data` (`ib_user_sa.h`, 72 bytes): an SA PathRecord in its 64-byte wire
/// (big-endian, bit-packed) form.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ib_path_rec_data {
    /// `IB_PATH_*` ([`path_flags`]).
    pub flags: u32,
    pub reserved: u32,
    pub path_rec: [u8; 64],
}

/// `struct rdma_ucm_query_route_resp` (208 bytes, 8-aligned by its `__aligned_u64` GUID).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_query_route_resp {
    /// The device's node GUID as the kernel stores it (big-endian bytes).
    pub node_guid: [u8; 8],
    pub ib_route: [ib_user_path_rec; 2],
    pub src_addr: sockaddr_in6,
    pub dst_addr: sockaddr_in6,
    pub num_paths: u32,
    pub port_num: u8,
    pub reserved: [u8; 3],
    pub ibdev_index: u32,
    pub reserved1: u32,
}

/// `struct rdma_ucm_query_addr_resp` (280 bytes); also the response of `QUERY_GID`, whose
/// addresses are `sockaddr_ib`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_query_addr_resp {
    /// Big-endian bytes, as the kernel stores it.
    pub node_guid: [u8; 8],
    pub port_num: u8,
    pub reserved: u8,
    /// Big-endian.
    pub pkey: [u8; 2],
    pub src_size: u16,
    pub dst_size: u16,
    pub src_addr: sockaddr_storage,
    pub dst_addr: sockaddr_storage,
    pub ibdev_index: u32,
    pub reserved1: u32,
}

/// `struct rdma_ucm_query_path_resp` header (8 bytes); `num_paths` × [`ib_path_rec_data`]
/// follow (a flexible array in C).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_query_path_resp {
    pub num_paths: u32,
    pub reserved: u32,
}

/// `struct rdma_ucm_conn_param` (272 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_conn_param {
    /// The kernel keeps the low 24 bits.
    pub qp_num: u32,
    /// Only used with AF_IB addresses.
    pub qkey: u32,
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
    pub private_data_len: u8,
    pub srq: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// `connect` needs 1; `accept` with 0 means "no parameters" (on the active side after
    /// CONNECT_RESPONSE: send the RTU).
    pub valid: u8,
}

impl Default for rdma_ucm_conn_param {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

// The verbs structures the ucma ABI embeds are the verbs crate's (one declaration each).
pub use rverbs_uverbs::kernel::abi::obj::{
    ib_uverbs_ah_attr, ib_uverbs_global_route, ib_uverbs_qp_attr,
};

/// `struct rdma_ucm_ud_param` (304 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_ud_param {
    pub qp_num: u32,
    pub qkey: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
    pub private_data_len: u8,
    pub reserved: [u8; 7],
}

/// `struct rdma_ucm_ece` (8 bytes): enhanced connection establishment options.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rdma_ucm_ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

/// `struct rdma_ucm_connect` (288 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_connect {
    pub conn_param: rdma_ucm_conn_param,
    pub id: u32,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

/// `struct rdma_ucm_listen` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_listen {
    pub id: u32,
    /// 0 or above the `net.rdma_ucm.max_backlog` sysctl (1024) means that maximum.
    pub backlog: u32,
}

/// `struct rdma_ucm_accept` (296 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_accept {
    /// Becomes the id's uid (events of an id created by a connection request are dropped by the
    /// kernel until an accept with `conn_param.valid` sets it).
    pub uid: u64,
    pub conn_param: rdma_ucm_conn_param,
    pub id: u32,
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

/// `struct rdma_ucm_reject` (264 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_reject {
    pub id: u32,
    pub private_data_len: u8,
    /// 0 = consumer defined (28); the kernel accepts only that and 35 (vendor option not
    /// supported, used by ECE).
    pub reason: u8,
    pub reserved: [u8; 2],
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
}

impl Default for rdma_ucm_reject {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// `struct rdma_ucm_disconnect` (4 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_disconnect {
    pub id: u32,
}

/// `struct rdma_ucm_init_qp_attr` (16 bytes); the response is [`ib_uverbs_qp_attr`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_init_qp_attr {
    pub response: u64,
    pub id: u32,
    /// `ib_qp_state`: RESET 0 … ERR 6; larger values are EINVAL.
    pub qp_state: u32,
}

/// `struct rdma_ucm_notify` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_notify {
    pub id: u32,
    /// `ib_event_type`.
    pub event: u32,
}

/// `struct rdma_ucm_get_event` (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_get_event {
    pub response: u64,
}

/// Size of the `param` union of [`rdma_ucm_event_resp`] (its larger member, the UD param).
pub const EVENT_PARAM_SIZE: usize = 304;

/// `struct rdma_ucm_event_resp` (336 bytes). The `param` union (`conn` or `ud`, chosen by the
/// id's QP type) starts at offset 20, only 4-byte aligned, so it is kept as bytes and decoded by
/// copying.
#[repr(C)]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_event_resp {
    pub uid: u64,
    pub id: u32,
    pub event: u32,
    /// A negative errno, or for REJECTED the (positive) IB CM reject reason.
    pub status: u32,
    pub param: [u8; EVENT_PARAM_SIZE],
    pub reserved: u32,
    pub ece: rdma_ucm_ece,
}

impl Default for rdma_ucm_event_resp {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// `struct rdma_ucm_write_cm_event` (320 bytes, 8-aligned by the union's `__u64 arg`):
/// `WRITE_CM_EVENT`'s request. Newer than the installed 6.1 header, so `tests/abi_layout.rs`
/// cannot compare it: its layout, from rdma-core 64's `kernel-headers/rdma/rdma_user_cm.h`,
/// is pinned by a unit test. The `param` union (`conn`, `ud` or `arg`) is kept as bytes;
/// only `arg` (its first 8, host order) is written.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_write_cm_event {
    pub id: u32,
    pub reserved: u32,
    /// `RDMA_CM_EVENT_USER` or `RDMA_CM_EVENT_INTERNAL` (the kernel refuses others).
    pub event: u32,
    pub status: u32,
    pub param: [u8; WRITE_EVENT_PARAM_SIZE],
}

/// The size of [`rdma_ucm_write_cm_event`]'s `param` union: its largest member,
/// `rdma_ucm_ud_param`.
pub const WRITE_EVENT_PARAM_SIZE: usize = 304;

impl Default for rdma_ucm_write_cm_event {
    fn default() -> Self {
        Self::new_zeroed()
    }
}

/// `struct rdma_ucm_set_option` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_set_option {
    /// Pointer to `optlen` bytes of value.
    pub optval: u64,
    pub id: u32,
    pub level: u32,
    pub optname: u32,
    pub optlen: u32,
}

/// `struct rdma_ucm_migrate_id` (16 bytes). Written to the **destination** channel's fd; `fd`
/// names the channel the id currently belongs to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_migrate_id {
    pub response: u64,
    pub id: u32,
    pub fd: u32,
}

/// `struct rdma_ucm_migrate_resp` (4 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rdma_ucm_migrate_resp {
    pub events_reported: u32,
}

/// IB CM private-data sizes (`enum ib_cm_data_size`, kernel `include/rdma/ib_cm.h`) and the
/// header rdma_cm puts in front of user data for IP-addressed ids (`struct cma_hdr`, 36 bytes:
/// version, IP version, port, two 16-byte addresses). Not uapi: pinned by unit tests and
/// checked by the VM tests.
pub mod cm_sizes {
    pub const REQ: usize = 92;
    pub const REP: usize = 196;
    pub const REJ: usize = 148;
    pub const DREQ: usize = 220;
    pub const SIDR_REQ: usize = 216;
    pub const SIDR_REP: usize = 136;
    pub const CMA_HDR: usize = 36;
}

/// What is newer than the installed 6.1 uapi header (which `tests/abi_layout.rs` compares
/// against), pinned to rdma-core 64's `kernel-headers/rdma/rdma_user_cm.h`, by hand.
#[cfg(test)]
mod newer_than_the_installed_header {
    use std::mem::{align_of, offset_of, size_of};

    use super::*;

    #[test]
    fn write_cm_event_is_rdma_core_64s() {
        // The command enum after JOIN_MCAST (22): RESOLVE_IB_SERVICE, WRITE_CM_EVENT.
        assert_eq!((cmd::RESOLVE_IB_SERVICE, cmd::WRITE_CM_EVENT), (23, 24));
        // The union's members: conn (272 bytes), ud (304), arg (a __u64).
        assert_eq!(WRITE_EVENT_PARAM_SIZE, size_of::<rdma_ucm_ud_param>());
        assert!(size_of::<rdma_ucm_conn_param>() < WRITE_EVENT_PARAM_SIZE);
        assert_eq!(size_of::<rdma_ucm_write_cm_event>(), 320);
        assert_eq!(align_of::<rdma_ucm_write_cm_event>(), 8);
        let o = [
            offset_of!(rdma_ucm_write_cm_event, id),
            offset_of!(rdma_ucm_write_cm_event, reserved),
            offset_of!(rdma_ucm_write_cm_event, event),
            offset_of!(rdma_ucm_write_cm_event, status),
            offset_of!(rdma_ucm_write_cm_event, param),
        ];
        assert_eq!(o, [0, 4, 8, 12, 16]);
    }
}
