//! The siw driver ABI: `include/uapi/rdma/siw-abi.h` (`SIW_ABI_VERSION` 1).
//!
//! Names keep the kernel's spelling. Every size, alignment, field offset and constant here is
//! compared with the installed header by `src/tests/siw_abi_layout.rs` (a C probe compiled
//! with `cc`).
//!
//! C unions are modelled as follows: `siw_sqe`'s `raddr`/`base_mr` union is the one `u64`
//! [`siw_sqe::raddr`] (`base_mr` is for kernel clients only); its `sge[]`/`access` union is the
//! SGE array (`access` is for kernel clients only); `siw_cqe`'s `imm_data`/`inval_stag` union is
//! the `u64` [`siw_cqe::imm_data`], whose low 32 bits (little-endian hosts) are `inval_stag`;
//! `base_qp`/`qp_id` is [`siw_cqe::qp_id`].
//!
//! The rings (SQ, RQ, SRQ, CQ) live in kernel memory that userspace maps; none of these types
//! is ever referenced in place there: elements are written through raw pointers, read by copy,
//! and their `flags` word is accessed only atomically (see [`super::ring`]).

#![allow(non_camel_case_types)]

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `SIW_ABI_VERSION`: the driver ABI the kernel's siw announces in sysfs.
pub const SIW_ABI_VERSION: u32 = 1;
/// `SIW_MAX_SGE`: SGEs in one SQE or RQE.
pub const SIW_MAX_SGE: usize = 6;
/// `SIW_UOBJ_MAX_KEY`.
pub const SIW_UOBJ_MAX_KEY: u64 = 0x08FFFF;
/// `SIW_INVAL_UOBJ_KEY`: a create response's mmap key when the kernel could not offer the
/// queue for mapping.
pub const SIW_INVAL_UOBJ_KEY: u64 = SIW_UOBJ_MAX_KEY + 1;
/// `SIW_MAX_INLINE`: inline bytes an SQE carries (in the space of `sge[1..]`).
pub const SIW_MAX_INLINE: usize = core::mem::size_of::<siw_sge>() * (SIW_MAX_SGE - 1);

/// `struct siw_uresp_create_cq`: driver data of create CQ.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_create_cq {
    /// The CQ's id (random; only for debugging).
    pub cq_id: u32,
    /// CQEs in the ring (the request rounded up to a power of two).
    pub num_cqe: u32,
    /// mmap offset of the ring (`num_cqe` CQEs, then the [`siw_cq_ctrl`] notify word).
    pub cq_key: u64,
}

/// `struct siw_uresp_create_qp`: driver data of create QP.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_create_qp {
    /// The QP's id (its QP number).
    pub qp_id: u32,
    /// SQEs in the send ring (a power of two).
    pub num_sqe: u32,
    /// RQEs in the receive ring (a power of two; 0 with an SRQ).
    pub num_rqe: u32,
    /// Padding.
    pub pad: u32,
    /// mmap offset of the send ring.
    pub sq_key: u64,
    /// mmap offset of the receive ring (unused with an SRQ).
    pub rq_key: u64,
}

/// `struct siw_ureq_reg_mr`: driver data of register MR (the kernel refuses a registration
/// without it).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_ureq_reg_mr {
    /// Low 8 bits of the STag (lkey/rkey) the caller chooses; libsiw sends 0.
    pub stag_key: u8,
    /// Reserved, 0.
    pub reserved: [u8; 3],
    /// Padding, 0.
    pub pad: u32,
}

/// `struct siw_uresp_reg_mr`: driver response of register MR.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_reg_mr {
    /// The STag (also the lkey and rkey of the core response).
    pub stag: u32,
    /// Padding.
    pub pad: u32,
}

/// `struct siw_uresp_create_srq`: driver data of create SRQ.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_create_srq {
    /// RQEs in the ring (a power of two).
    pub num_rqe: u32,
    /// Padding.
    pub pad: u32,
    /// mmap offset of the ring.
    pub srq_key: u64,
}

/// `struct siw_uresp_alloc_ctx`: driver data of GET_CONTEXT (the kernel refuses a context
/// whose response has no room for it: the `EINVAL` of opening siw without a provider).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_uresp_alloc_ctx {
    /// The device's vendor part id.
    pub dev_id: u32,
    /// Padding.
    pub pad: u32,
}

/// `enum siw_opcode`: the `opcode` byte of SQEs, RQEs and CQEs.
pub mod opcode {
    /// RDMA WRITE.
    pub const WRITE: u8 = 0;
    /// RDMA READ.
    pub const READ: u8 = 1;
    /// RDMA READ with local invalidate (kernel clients).
    pub const READ_LOCAL_INV: u8 = 2;
    /// SEND.
    pub const SEND: u8 = 3;
    /// SEND with immediate data (not carried by siw's iWARP).
    pub const SEND_WITH_IMM: u8 = 4;
    /// SEND with remote invalidate.
    pub const SEND_REMOTE_INV: u8 = 5;
    /// Fetch-and-add (unsupported by siw).
    pub const FETCH_AND_ADD: u8 = 6;
    /// Compare-and-swap (unsupported by siw).
    pub const COMP_AND_SWAP: u8 = 7;
    /// A receive (RQE/CQE).
    pub const RECEIVE: u8 = 8;
    /// Provider-internal READ response.
    pub const READ_RESPONSE: u8 = 9;
    /// Invalidate an STag (kernel clients).
    pub const INVAL_STAG: u8 = 10;
    /// Register an MR (kernel clients).
    pub const REG_MR: u8 = 11;
    /// `SIW_NUM_OPCODES`.
    pub const NUM_OPCODES: u8 = 12;
}

/// `struct siw_sge` (16 bytes, the layout of `ibv_sge`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_sge {
    /// Local virtual address.
    pub laddr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key (STag) of the region.
    pub lkey: u32,
}

/// `enum siw_wqe_flags`: the `flags` of SQEs, RQEs and CQEs.
pub mod wqe_flags {
    /// The element is valid: set last by its producer, cleared by its consumer.
    pub const VALID: u16 = 1;
    /// The SQE carries its payload inline (in `sge[1..]`, length in `sge[0].length`).
    pub const INLINE: u16 = 1 << 1;
    /// Complete the SQE with a CQE.
    pub const SIGNALLED: u16 = 1 << 2;
    /// Solicited event.
    pub const SOLICITED: u16 = 1 << 3;
    /// Wait for earlier RDMA READs first.
    pub const READ_FENCE: u16 = 1 << 4;
    /// CQE: the peer invalidated `inval_stag`.
    pub const REM_INVAL: u16 = 1 << 5;
    /// Kernel-internal.
    pub const COMPLETED: u16 = 1 << 6;
}

/// `struct siw_sqe` (120 bytes): one send queue element.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_sqe {
    /// The caller's work request id.
    pub id: u64,
    /// [`wqe_flags`]; `VALID` is stored last (Release) and cleared by the kernel.
    pub flags: u16,
    /// SGEs used (1 for inline data).
    pub num_sge: u8,
    /// [`opcode`].
    pub opcode: u8,
    /// Remote STag (RDMA) or the STag to invalidate (SEND_REMOTE_INV).
    pub rkey: u32,
    /// Remote address (union with `base_mr`, kernel clients only).
    pub raddr: u64,
    /// SGEs, or inline data from `sge[1]` on (union with `access`, kernel clients only).
    pub sge: [siw_sge; SIW_MAX_SGE],
}

/// `struct siw_rqe` (112 bytes): one receive queue element (QP RQ and SRQ).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_rqe {
    /// The caller's work request id.
    pub id: u64,
    /// [`wqe_flags`]: `VALID` stored last, cleared by the kernel.
    pub flags: u16,
    /// SGEs used.
    pub num_sge: u8,
    /// Kernel-only; ignored when set by userspace.
    pub opcode: u8,
    /// Unused.
    pub unused: u32,
    /// The scatter list.
    pub sge: [siw_sge; SIW_MAX_SGE],
}

/// `enum siw_notify_flags`: the CQ's notify word ([`siw_cq_ctrl::flags`]).
pub mod notify {
    /// Not armed.
    pub const NOT: u32 = 0;
    /// An event for the next solicited completion.
    pub const SOLICITED: u32 = 1;
    /// An event for the next completion.
    pub const NEXT_COMPLETION: u32 = 1 << 1;
    /// Kernel clients: report missed events.
    pub const MISSED_EVENTS: u32 = 1 << 2;
    /// All three.
    pub const ALL: u32 = SOLICITED | NEXT_COMPLETION | MISSED_EVENTS;
}

/// `enum siw_wc_status`: a CQE's `status`.
pub mod wc_status {
    /// Success.
    pub const SUCCESS: u16 = 0;
    /// Local length error.
    pub const LOC_LEN_ERR: u16 = 1;
    /// Local protection error.
    pub const LOC_PROT_ERR: u16 = 2;
    /// Local QP operation error.
    pub const LOC_QP_OP_ERR: u16 = 3;
    /// Flushed.
    pub const WR_FLUSH_ERR: u16 = 4;
    /// Bad response.
    pub const BAD_RESP_ERR: u16 = 5;
    /// Local access error.
    pub const LOC_ACCESS_ERR: u16 = 6;
    /// Remote access error.
    pub const REM_ACCESS_ERR: u16 = 7;
    /// Remote invalid request.
    pub const REM_INV_REQ_ERR: u16 = 8;
    /// General error.
    pub const GENERAL_ERR: u16 = 9;
    /// `SIW_NUM_WC_STATUS`.
    pub const NUM_WC_STATUS: u16 = 10;
}

/// `struct siw_cqe` (32 bytes): one completion queue element.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_cqe {
    /// The work request id.
    pub id: u64,
    /// [`wqe_flags`] (one byte here): `VALID` stored last by the kernel, cleared by us.
    pub flags: u8,
    /// [`opcode`] of the completed request.
    pub opcode: u8,
    /// [`wc_status`].
    pub status: u16,
    /// Bytes transferred.
    pub bytes: u32,
    /// `union { imm_data; inval_stag }`: the invalidated STag (low 32 bits) with `REM_INVAL`.
    pub imm_data: u64,
    /// The QP number (user CQs; kernel CQs hold a pointer here).
    pub qp_id: u64,
}

/// `struct siw_cq_ctrl`: the notify word after the CQ's last CQE.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct siw_cq_ctrl {
    /// [`notify`]: written by us to arm, reset to `NOT` by the kernel when it raises the event.
    pub flags: u32,
    /// Padding.
    pub pad: u32,
}

/// Offset of the `flags` word in [`siw_sqe`], [`siw_rqe`] and [`siw_cqe`].
pub const FLAGS_OFFSET: usize = core::mem::offset_of!(siw_sqe, flags);

const _: () = {
    assert!(core::mem::offset_of!(siw_rqe, flags) == FLAGS_OFFSET);
    assert!(core::mem::offset_of!(siw_cqe, flags) == FLAGS_OFFSET);
    assert!(core::mem::size_of::<siw_sqe>() == 120);
    assert!(core::mem::size_of::<siw_rqe>() == 112);
    assert!(core::mem::size_of::<siw_cqe>() == 32);
};
