//! The rxe driver ABI: `include/uapi/rdma/rdma_user_rxe.h` (Linux 6.1) plus the two
//! `ib_user_verbs.h` structures the rxe data path touches (`ib_uverbs_post_send`, the send
//! doorbell; the CQ element `ib_uverbs_wc` is [`rverbs_uverbs::RawWc`]).
//!
//! Names keep the kernel's spelling so the two can be read side by side. Every size, alignment
//! and field offset here is compared with the real header by `src/tests/rxe_abi_layout.rs`, which
//! compiles a small C probe.
//!
//! C unions are modelled as follows: `rxe_send_wr.ex` (`__be32 imm_data` / `__u32
//! invalidate_rkey`) is one `u32` whose meaning depends on the opcode; the big `rxe_send_wr.wr`
//! union is [`rxe_send_wr_union`], a 120-byte, 8-aligned byte area with typed accessors for each
//! arm ([`rxe_wr_rdma`], [`rxe_wr_atomic`], [`rxe_wr_ud`], [`rxe_wr_mw`]); the
//! `sockaddr_in`/`sockaddr_in6` unions of [`rxe_av`] are 28-byte arrays. Flexible array members
//! (`rxe_dma_info.sge[]` / `.inline_data[]`, `rxe_queue_buf.data[]`) are not part of the Rust
//! structs: they start right after them, at the offsets given by the `*_OFFSET` constants.
//!
//! None of these types is ever referenced in place in kernel-shared memory: WQEs are written
//! into a ring slot through raw pointers (field by field or as whole values), CQEs are copied
//! out of a slot (see [`super::queue`]).

#![allow(non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `RXE_NETWORK_TYPE_IPV4`: value of [`rxe_av::network_type`].
pub const RXE_NETWORK_TYPE_IPV4: u8 = 1;
/// `RXE_NETWORK_TYPE_IPV6`: value of [`rxe_av::network_type`].
pub const RXE_NETWORK_TYPE_IPV6: u8 = 2;

/// `struct mminfo` (16 bytes): where to mmap one queue on the uverbs command fd.
/// `mmap(NULL, size, PROT_READ|PROT_WRITE, MAP_SHARED, cmd_fd, offset)`; each offset can be
/// mapped once. The kernel page-aligns `size`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct mminfo {
    /// The mmap offset on the uverbs command fd that selects this queue.
    pub offset: u64,
    /// Bytes to map (header and elements), page-aligned by the kernel.
    pub size: u32,
    /// Padding; the kernel writes 0.
    pub pad: u32,
}

/// `struct rxe_create_cq_resp`: driver data (UHW_OUT) of create CQ.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_cq_resp {
    /// Where to map the completion queue.
    pub mi: mminfo,
}

/// `struct rxe_resize_cq_resp`: driver data of resize CQ (a new queue buffer to map).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_resize_cq_resp {
    /// Where to map the resized completion queue (the old mapping stays valid until unmapped).
    pub mi: mminfo,
}

/// `struct rxe_create_qp_resp`: driver data of create QP. **The receive queue comes first.**
/// `rq_mi` is all zero when the QP uses an SRQ.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_qp_resp {
    /// Where to map the receive queue (all zero with an SRQ).
    pub rq_mi: mminfo,
    /// Where to map the send queue.
    pub sq_mi: mminfo,
}

/// `struct rxe_create_srq_resp`: driver data of create SRQ.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_srq_resp {
    /// Where to map the SRQ.
    pub mi: mminfo,
    /// The SRQ number (the same as the core response's; XRC addresses an SRQ by it).
    pub srq_num: u32,
    /// Padding; the kernel writes 0.
    pub reserved: u32,
}

/// `struct rxe_modify_srq_cmd`: driver data (UHW_IN) of modify SRQ (resize): the address of an
/// [`mminfo`] the kernel fills with the new queue's mapping.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_modify_srq_cmd {
    /// Address of the [`mminfo`] the kernel writes on a resize; 0 when the modify only sets the limit.
    pub mmap_info_addr: u64,
}

/// `struct rxe_create_ah_resp`: driver data of create AH. A kernel that fills it (6.1 does when
/// the response buffer is large enough) returns a non-zero `ah_num`, which UD send WQEs carry.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_create_ah_resp {
    /// The AH number a UD send WQE names its destination by (0: the kernel did not fill the response).
    pub ah_num: u32,
    /// Padding; the kernel writes 0.
    pub reserved: u32,
}

/// `union rxe_gid` is 16 raw bytes (or two big-endian u64 halves, which make it 8-aligned).
pub type rxe_gid = [u8; 16];

/// `struct rxe_global_route` (24 bytes, 8-aligned through `rxe_gid`'s `__be64` arm).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_global_route {
    /// Destination GID.
    pub dgid: rxe_gid,
    /// IPv6 flow label (20 bits).
    pub flow_label: u32,
    /// Index of the source GID in the port's GID table.
    pub sgid_index: u8,
    /// IPv6 hop limit / IPv4 TTL.
    pub hop_limit: u8,
    /// IPv6 traffic class / IPv4 DSCP and ECN.
    pub traffic_class: u8,
    /// Tail padding of the C struct, made explicit.
    pub _pad: u8,
}

/// `struct rxe_av` (88 bytes): the address vector that *old* kernels (without `ah_num`) needed
/// copied into every UD send WQE. Linux 6.1 looks the AV up by `ah_num` instead; this type is
/// kept for the layout check and for completeness.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_av {
    /// Port number (1 on rxe).
    pub port_num: u8,
    /// `RXE_NETWORK_TYPE_*`.
    pub network_type: u8,
    /// Destination MAC address.
    pub dmac: [u8; 6],
    /// The global route (GIDs, flow label, hop limit, traffic class).
    pub grh: rxe_global_route,
    /// `union { struct sockaddr_in; struct sockaddr_in6; }` (28 bytes).
    pub sgid_addr: [u8; 28],
    /// `union { struct sockaddr_in; struct sockaddr_in6; }` (28 bytes).
    pub dgid_addr: [u8; 28],
}

/// `rxe_send_wr.wr.rdma` (RDMA READ/WRITE).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_wr_rdma {
    /// Remote virtual address the RDMA READ or WRITE starts at.
    pub remote_addr: u64,
    /// Remote key of the remote memory region.
    pub rkey: u32,
    /// Padding; written as 0.
    pub reserved: u32,
}

/// The `flush` arm of the `rxe_send_wr` union (Linux 6.2 and later): FLUSH's operands.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_wr_flush {
    /// Remote virtual address the flushed range starts at.
    pub remote_addr: u64,
    /// Bytes of the range.
    pub length: u32,
    /// Remote key of the remote memory region.
    pub rkey: u32,
    /// Placement type (`IB_FLUSH_GLOBAL` 1, `IB_FLUSH_PERSISTENT` 2).
    pub flush_type: u8,
    /// Selectivity level (`IB_FLUSH_RANGE` 0, `IB_FLUSH_MR` 1).
    pub level: u8,
    /// Padding to the struct's 8-byte alignment; written as 0.
    pub pad: [u8; 6],
}

/// `rxe_send_wr.wr.atomic` (compare-and-swap, fetch-and-add).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_wr_atomic {
    /// Remote virtual address of the 8-byte operand (8-aligned).
    pub remote_addr: u64,
    /// The compare operand (CMP_AND_SWP) or the addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// The value stored on a successful compare (CMP_AND_SWP only).
    pub swap: u64,
    /// Remote key of the remote memory region.
    pub rkey: u32,
    /// Padding; written as 0.
    pub reserved: u32,
}

/// `rxe_send_wr.wr.ud` (UD sends).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_wr_ud {
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
    /// Used by the kernel for GSI QPs only.
    pub pkey_index: u16,
    /// Padding; written as 0.
    pub reserved: u16,
    /// The `ah_num` from [`rxe_create_ah_resp`]; 0 means "use `av`" (old kernels).
    pub ah_num: u32,
    /// Padding up to the address vector; written as 0.
    pub pad: [u32; 4],
    /// Address vector of kernels without `ah_num`; zeroed on 6.1.
    pub av: rxe_av,
}

/// `rxe_send_wr.wr.mw` (memory window bind).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_wr_mw {
    /// Start address of the window.
    pub addr: u64,
    /// Length of the window in bytes.
    pub length: u64,
    /// Local key of the memory region the window is bound in.
    pub mr_lkey: u32,
    /// Remote key of the memory window.
    pub mw_rkey: u32,
    /// The new remote key of the window after the bind.
    pub rkey: u32,
    /// Access flags (`IB_ACCESS_*`) of the bound window.
    pub access: u32,
}

/// Size of the `rxe_send_wr.wr` union (its largest arm, `ud`).
pub const RXE_SEND_WR_UNION_SIZE: usize = 120;

/// The `rxe_send_wr.wr` union: 120 bytes, 8-aligned, read and written through one typed arm at
/// a time. Bytes not covered by the arm last written keep their previous value (zero for a
/// fresh [`rxe_send_wr`]).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_send_wr_union {
    /// The raw bytes of the union; use the typed arm accessors.
    pub bytes: [u8; RXE_SEND_WR_UNION_SIZE],
}

impl Default for rxe_send_wr_union {
    fn default() -> Self {
        Self {
            bytes: [0; RXE_SEND_WR_UNION_SIZE],
        }
    }
}

macro_rules! union_arm {
    ($get:ident, $set:ident, $ty:ty) => {
        #[doc = concat!("Reads the `", stringify!($get), "` arm.")]
        pub fn $get(&self) -> $ty {
            // Every arm is FromBytes and no larger than the union (checked at compile time
            // below), so the prefix read cannot fail.
            match <$ty>::read_from_prefix(&self.bytes) {
                Ok((v, _)) => v,
                Err(_) => unreachable!("union arm larger than the union"),
            }
        }

        #[doc = concat!("Writes the `", stringify!($get), "` arm (its bytes only).")]
        pub fn $set(&mut self, v: &$ty) {
            let b = v.as_bytes();
            self.bytes[..b.len()].copy_from_slice(b);
        }
    };
}

impl rxe_send_wr_union {
    union_arm!(rdma, set_rdma, rxe_wr_rdma);
    union_arm!(atomic, set_atomic, rxe_wr_atomic);
    union_arm!(ud, set_ud, rxe_wr_ud);
    union_arm!(mw, set_mw, rxe_wr_mw);
}

const _: () = {
    assert!(core::mem::size_of::<rxe_wr_rdma>() <= RXE_SEND_WR_UNION_SIZE);
    assert!(core::mem::size_of::<rxe_wr_flush>() == 24);
    assert!(core::mem::size_of::<rxe_wr_atomic>() <= RXE_SEND_WR_UNION_SIZE);
    assert!(core::mem::size_of::<rxe_wr_ud>() == RXE_SEND_WR_UNION_SIZE);
    assert!(core::mem::size_of::<rxe_wr_mw>() <= RXE_SEND_WR_UNION_SIZE);
};

/// `struct rxe_send_wr` (144 bytes): the work request part of a send WQE.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_send_wr {
    /// The caller's work request id, returned in the completion.
    pub wr_id: u64,
    /// Padding; written as 0.
    pub reserved: u32,
    /// `IB_UVERBS_WR_*` (the kernel's `IB_WR_*` share the numbers).
    pub opcode: u32,
    /// `IB_SEND_*`: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8.
    pub send_flags: u32,
    /// `union ex`: `imm_data` **big-endian** (network order, as it goes on the wire) for the
    /// `*_WITH_IMM` opcodes, `invalidate_rkey` in host order for SEND_WITH_INV / LOCAL_INV.
    pub ex: u32,
    /// The operation's arm (RDMA, atomic, UD, memory window).
    pub wr: rxe_send_wr_union,
}

/// Offset of the flexible `sge[]` / `inline_data[]` union inside [`rxe_dma_info`].
pub const RXE_DMA_INFO_SGE_OFFSET: usize = core::mem::size_of::<rxe_dma_info>();

/// `struct rxe_dma_info` (24 bytes without its flexible array; 8-aligned because of it).
#[repr(C, align(8))]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_dma_info {
    /// Total bytes of the gather/scatter list (or of the inline data).
    pub length: u32,
    /// Bytes still to transfer; starts equal to `length`.
    pub resid: u32,
    /// Index of the SGE the kernel is at; 0 at post.
    pub cur_sge: u32,
    /// Number of SGEs after the header (0 for inline data).
    pub num_sge: u32,
    /// Byte offset inside the current SGE; 0 at post.
    pub sge_offset: u32,
    /// Padding; written as 0.
    pub reserved: u32,
}

/// `struct rxe_sge` (16 bytes): the same layout as `ib_uverbs_sge` / `ibv_sge`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_sge {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region that holds the range.
    pub lkey: u32,
}

/// `struct rxe_send_wqe` (208 bytes; its SGEs or inline data follow at
/// [`RXE_SEND_WQE_SGE_OFFSET`]).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_send_wqe {
    /// The work request as posted.
    pub wr: rxe_send_wr,
    /// Written by the kernel (`ib_wc_status`).
    pub status: u32,
    /// `enum wqe_state`; userspace posts with 0 (`wqe_state_posted`).
    pub state: u32,
    /// Remote address of RDMA/atomic operations (0 otherwise).
    pub iova: u64,
    /// Recomputed by the 6.1 kernel from the opcode; userspace writes 0.
    pub mask: u32,
    /// First packet sequence number of the request; the kernel's, written as 0.
    pub first_psn: u32,
    /// Last packet sequence number of the request; the kernel's, written as 0.
    pub last_psn: u32,
    /// Bytes acknowledged so far; the kernel's, written as 0.
    pub ack_length: u32,
    /// Send sequence number; the 6.1 kernel does not read it for user QPs.
    pub ssn: u32,
    /// Kernel bookkeeping; userspace writes 0.
    pub has_rd_atomic: u32,
    /// Length and SGE count of the payload (the SGEs or inline bytes follow the header).
    pub dma: rxe_dma_info,
}

/// Where a send WQE's SGE array or inline data starts.
pub const RXE_SEND_WQE_SGE_OFFSET: usize = core::mem::size_of::<rxe_send_wqe>();

/// `struct rxe_recv_wqe` (40 bytes; its SGEs follow at [`RXE_RECV_WQE_SGE_OFFSET`]).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct rxe_recv_wqe {
    /// The caller's work request id, returned in the completion.
    pub wr_id: u64,
    /// Padding; written as 0.
    pub reserved: u32,
    /// Padding; written as 0.
    pub padding: u32,
    /// Total length and SGE count (the SGEs follow the header).
    pub dma: rxe_dma_info,
}

/// Where a receive WQE's SGE array starts.
pub const RXE_RECV_WQE_SGE_OFFSET: usize = core::mem::size_of::<rxe_recv_wqe>();

/// `struct rxe_queue_buf`: the 384-byte header at the start of every mapped rxe queue, the
/// element array (`data[]`) following it. Producer and consumer index live in separate cache
/// lines. Used for layout checks; shared headers are accessed through atomics at the offsets
/// below, never through this type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct rxe_queue_buf {
    /// log2 of the element size in bytes.
    pub log2_elem_size: u32,
    /// Number of slots minus one (a power of two minus one); indices are stored masked with it.
    pub index_mask: u32,
    /// Padding up to the producer index's cache line.
    pub pad_1: [u32; 30],
    /// The producer index (ours for work queues, the kernel's for CQs).
    pub producer_index: u32,
    /// Padding up to the consumer index's cache line.
    pub pad_2: [u32; 31],
    /// The consumer index (the kernel's for work queues, ours for CQs).
    pub consumer_index: u32,
    /// Padding up to the elements.
    pub pad_3: [u32; 31],
}

/// Offset of `rxe_queue_buf.log2_elem_size`.
pub const QUEUE_LOG2_ELEM_SIZE_OFFSET: usize = 0;
/// Offset of `rxe_queue_buf.index_mask`.
pub const QUEUE_INDEX_MASK_OFFSET: usize = 4;
/// Offset of `rxe_queue_buf.producer_index`.
pub const QUEUE_PRODUCER_INDEX_OFFSET: usize = 128;
/// Offset of `rxe_queue_buf.consumer_index`.
pub const QUEUE_CONSUMER_INDEX_OFFSET: usize = 256;
/// Offset of `rxe_queue_buf.data[]`, the first element.
pub const QUEUE_DATA_OFFSET: usize = core::mem::size_of::<rxe_queue_buf>();

// `struct ib_uverbs_wc` (48 bytes), one rxe CQ element, is `rverbs_uverbs::RawWc`: the one
// definition of the kernel's completion (its layout is checked here too).

/// Kernel `IB_WC_WITH_IMM`.
pub const IB_WC_WITH_IMM: u32 = 1 << 1;
/// Kernel `IB_WC_WITH_INVALIDATE` (userspace numbers it differently).
pub const IB_WC_WITH_INVALIDATE: u32 = 1 << 2;

/// `struct ib_uverbs_post_send` (24 bytes, without its flexible `send_wr[]`): the payload of
/// the legacy POST_SEND write() command, which rxe uses as its send doorbell.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_post_send {
    /// Address of an [`ib_uverbs_post_send_resp`] the kernel writes.
    pub response: u64,
    /// Kernel handle of the QP whose send queue to process.
    pub qp_handle: u32,
    /// Work requests following (0 for the rxe doorbell).
    pub wr_count: u32,
    /// SGEs following the work requests (0 for the doorbell).
    pub sge_count: u32,
    /// Must be at least `sizeof(struct ib_uverbs_send_wr)` even when `wr_count` is 0.
    pub wqe_size: u32,
}

/// `struct ib_uverbs_post_send_resp`.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ib_uverbs_post_send_resp {
    /// Index of the first work request the kernel refused (unused with `wr_count` 0).
    pub bad_wr: u32,
}

/// `sizeof(struct ib_uverbs_send_wr)`: the smallest `wqe_size` the kernel accepts.
pub const IB_UVERBS_SEND_WR_SIZE: u32 = 56;

/// `IB_UVERBS_WR_*` opcodes rxe understands.
pub mod wr_opcode {
    /// RDMA WRITE.
    pub const RDMA_WRITE: u32 = 0;
    /// RDMA WRITE with immediate data.
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// SEND.
    pub const SEND: u32 = 2;
    /// SEND with immediate data.
    pub const SEND_WITH_IMM: u32 = 3;
    /// RDMA READ.
    pub const RDMA_READ: u32 = 4;
    /// Atomic compare and swap.
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    /// Atomic fetch and add.
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// Local invalidate of an rkey.
    pub const LOCAL_INV: u32 = 7;
    /// Bind a memory window.
    pub const BIND_MW: u32 = 8;
    /// SEND that invalidates a remote rkey.
    pub const SEND_WITH_INV: u32 = 9;
}

/// `IB_SEND_*` flags as rxe reads them from `rxe_send_wr.send_flags`.
pub mod send_flags {
    /// Wait for prior RDMA READs and atomics before this request.
    pub const FENCE: u32 = 1;
    /// Generate a completion for this request.
    pub const SIGNALED: u32 = 2;
    /// Ask the receiver for a solicited event.
    pub const SOLICITED: u32 = 4;
    /// The payload is copied into the WQE after the header.
    pub const INLINE: u32 = 8;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_union_arms_round_trip() {
        let mut u = rxe_send_wr_union::default();
        let a = rxe_wr_atomic {
            remote_addr: 0x1122_3344_5566_7788,
            compare_add: 7,
            swap: 9,
            rkey: 0xabcd,
            reserved: 0,
        };
        u.set_atomic(&a);
        assert_eq!(u.atomic(), a);
        // The rdma arm overlays the first 16 bytes.
        assert_eq!(u.rdma().remote_addr, a.remote_addr);
        // Bytes past the arm written stay as they were.
        assert!(u.bytes[40..].iter().all(|&b| b == 0));
    }
}
