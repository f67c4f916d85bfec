//! The 64-byte mlx5 completion queue entry (CQE64): a typed, copied-out view and its
//! translation into a [`WorkCompletion`](rverbs_uverbs::WorkCompletion).
//!
//! Layout (big-endian fields; offsets as in rdma-core's `struct mlx5_cqe64` /
//! `struct mlx5_err_cqe` in `mlx5dv.h` and the kernel's `include/linux/mlx5/device.h`):
//!
//! | offset | field | notes |
//! |---|---|---|
//! | 2  | `wqe_id` (be16) | striding RQ only |
//! | 17 | `ml_path` (u8) | low 7 bits: DLID path bits |
//! | 22 | `slid` (be16) | |
//! | 24 | `flags_rqpn` (be32) | 31:28 GRH/L3 type, 27:24 SL, 23:0 remote QPN |
//! | 28 | `hds_ip_ext`, 29 `l4_hdr_type_etc`, 30 `vlan_info` (be16) | raw-packet QPs |
//! | 32 | `srqn_uidx` (be32) | 23:0 SRQ number (CQE v0) or user index (CQE v1) |
//! | 36 | `imm_inval_pkey` (be32) | immediate data, invalidated rkey, or 15:0 P_Key |
//! | 44 | `byte_cnt` (be32) | |
//! | 48 | `timestamp` (be64) | |
//! | 54 | `vendor_err_synd` (u8), 55 `syndrome` (u8) | error CQEs only |
//! | 56 | `sop_drop_qpn` (be32) | 31:24 send WQE opcode (requester), 23:0 QPN |
//! | 60 | `wqe_counter` (be16) | |
//! | 62 | `signature` (u8) | |
//! | 63 | `op_own` (u8) | 7:4 CQE opcode, 3:2 format, 1 solicited event, 0 owner |
//!
//! The parser ([`parse_cqe`]) is the one the CQ poller ([`super::cq::Mlx5Cq`]) uses on real
//! hardware; it is total: every 64-byte input yields a
//! [`WorkCompletion`](rverbs_uverbs::WorkCompletion), unknown or unsupported values become
//! explicit error completions (see [`ParseFault`]), nothing panics.
//!
//! The parts: this file holds the view ([`Cqe64`], its field offsets and accessors) and the
//! newtypes of the values the device writes ([`CqeOpcode`], [`WqeOpcode`], [`CqeSyndrome`],
//! [`CqeFormat`]) with [`ParseFault`]; `parse` the translation (the fast paths, the general
//! parser, the [`WrIdLookup`] hook); `tests` their unit tests.

use std::fmt;

use rverbs_uverbs::WcStatus;

use super::mlx5_newtype;

mod parse;

#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
pub use parse::parse_cqe;
pub(crate) use parse::{parse_from, parse_req_plain, CqeSource};
pub use parse::{WorkQueue, WqeRef, WrIdLookup};

/// Size of the CQE64 structure; a 128-byte CQE slot carries it in its second half.
pub const CQE64_SIZE: usize = 64;

// Field offsets (the table above), shared by `Cqe64`'s accessors and the fast parser.
const OFF_ML_PATH: usize = 17;
const OFF_SLID: usize = 22;
const OFF_FLAGS_RQPN: usize = 24;
const OFF_SRQN_UIDX: usize = 32;
const OFF_IMM_INVAL_PKEY: usize = 36;
const OFF_BYTE_CNT: usize = 44;
const OFF_SOP_DROP_QPN: usize = 56;
const OFF_WQE_COUNTER: usize = 60;
pub(crate) const OFF_OP_OWN: usize = 63;

mlx5_newtype! {
    /// CQE opcode: `op_own >> 4` (`MLX5_CQE_*` in `mlx5dv.h`).
    CqeOpcode(u8) {
        REQ = 0, "REQ";
        RESP_WR_IMM = 1, "RESP_WR_IMM";
        RESP_SEND = 2, "RESP_SEND";
        RESP_SEND_IMM = 3, "RESP_SEND_IMM";
        RESP_SEND_INV = 4, "RESP_SEND_INV";
        RESIZE_CQ = 5, "RESIZE_CQ";
        NO_PACKET = 6, "NO_PACKET";
        SIG_ERR = 12, "SIG_ERR";
        REQ_ERR = 13, "REQ_ERR";
        RESP_ERR = 14, "RESP_ERR";
        /// What software writes into every entry it owns; never written by the device.
        INVALID = 15, "INVALID";
    }
}

mlx5_newtype! {
    /// Send WQE opcode (`MLX5_OPCODE_*` in `mlx5dv.h`): what the encoder (`wq/wqe.rs`) writes
    /// into a WQE's control segment, and what requester CQEs report in `sop_drop_qpn >> 24`.
    WqeOpcode(u8) {
        NOP = 0x00, "NOP";
        SEND_INVAL = 0x01, "SEND_INVAL";
        RDMA_WRITE = 0x08, "RDMA_WRITE";
        RDMA_WRITE_IMM = 0x09, "RDMA_WRITE_IMM";
        SEND = 0x0a, "SEND";
        SEND_IMM = 0x0b, "SEND_IMM";
        TSO = 0x0e, "TSO";
        RDMA_READ = 0x10, "RDMA_READ";
        ATOMIC_CS = 0x11, "ATOMIC_CS";
        ATOMIC_FA = 0x12, "ATOMIC_FA";
        ATOMIC_MASKED_CS = 0x14, "ATOMIC_MASKED_CS";
        ATOMIC_MASKED_FA = 0x15, "ATOMIC_MASKED_FA";
        LOCAL_INVAL = 0x1b, "LOCAL_INVAL";
        SET_PSV = 0x20, "SET_PSV";
        UMR = 0x25, "UMR";
    }
}

mlx5_newtype! {
    /// Error syndrome of a REQ_ERR/RESP_ERR CQE (byte 55; `MLX5_CQE_SYNDROME_*`).
    CqeSyndrome(u8) {
        LOCAL_LENGTH_ERR = 0x01, "LOCAL_LENGTH_ERR";
        LOCAL_QP_OP_ERR = 0x02, "LOCAL_QP_OP_ERR";
        LOCAL_PROT_ERR = 0x04, "LOCAL_PROT_ERR";
        WR_FLUSH_ERR = 0x05, "WR_FLUSH_ERR";
        MW_BIND_ERR = 0x06, "MW_BIND_ERR";
        BAD_RESP_ERR = 0x10, "BAD_RESP_ERR";
        LOCAL_ACCESS_ERR = 0x11, "LOCAL_ACCESS_ERR";
        REMOTE_INVAL_REQ_ERR = 0x12, "REMOTE_INVAL_REQ_ERR";
        REMOTE_ACCESS_ERR = 0x13, "REMOTE_ACCESS_ERR";
        REMOTE_OP_ERR = 0x14, "REMOTE_OP_ERR";
        TRANSPORT_RETRY_EXC_ERR = 0x15, "TRANSPORT_RETRY_EXC_ERR";
        RNR_RETRY_EXC_ERR = 0x16, "RNR_RETRY_EXC_ERR";
        REMOTE_ABORTED_ERR = 0x22, "REMOTE_ABORTED_ERR";
    }
}

impl CqeSyndrome {
    /// The work-completion status this syndrome means (the table libmlx5 and the kernel use);
    /// any other syndrome is [`WcStatus::GENERAL_ERR`].
    pub const fn status(self) -> WcStatus {
        match self {
            Self::LOCAL_LENGTH_ERR => WcStatus::LOC_LEN_ERR,
            Self::LOCAL_QP_OP_ERR => WcStatus::LOC_QP_OP_ERR,
            Self::LOCAL_PROT_ERR => WcStatus::LOC_PROT_ERR,
            Self::WR_FLUSH_ERR => WcStatus::WR_FLUSH_ERR,
            Self::MW_BIND_ERR => WcStatus::MW_BIND_ERR,
            Self::BAD_RESP_ERR => WcStatus::BAD_RESP_ERR,
            Self::LOCAL_ACCESS_ERR => WcStatus::LOC_ACCESS_ERR,
            Self::REMOTE_INVAL_REQ_ERR => WcStatus::REM_INV_REQ_ERR,
            Self::REMOTE_ACCESS_ERR => WcStatus::REM_ACCESS_ERR,
            Self::REMOTE_OP_ERR => WcStatus::REM_OP_ERR,
            Self::TRANSPORT_RETRY_EXC_ERR => WcStatus::RETRY_EXC_ERR,
            Self::RNR_RETRY_EXC_ERR => WcStatus::RNR_RETRY_EXC_ERR,
            Self::REMOTE_ABORTED_ERR => WcStatus::REM_ABORT_ERR,
            _ => WcStatus::GENERAL_ERR,
        }
    }
}

mlx5_newtype! {
    /// CQE format: `(op_own >> 2) & 3`. For responder CQEs formats 1 and 2 mean the payload
    /// was scattered into the CQE itself (`MLX5_INLINE_SCATTER_32`/`_64` = op_own bits 0x4 and
    /// 0x8); 3 is a compressed CQE (mini-CQE array). rverbs asks for neither.
    CqeFormat(u8) {
        PLAIN = 0, "PLAIN";
        INLINE_SCATTER_32 = 1, "INLINE_SCATTER_32";
        INLINE_SCATTER_64 = 2, "INLINE_SCATTER_64";
        COMPRESSED = 3, "COMPRESSED";
    }
}

mlx5_newtype! {
    /// Why rverbs turned a CQE into an error completion on its own (not the device's verdict).
    ///
    /// Such completions have status [`WcStatus::GENERAL_ERR`] and
    /// `vendor_err = (fault << 8) | detail` ([`ParseFault::vendor_err`]). The hardware's vendor
    /// syndrome is one byte, so a `vendor_err` of 0x100 or more always comes from rverbs.
    ParseFault(u8) {
        /// CQE opcode rverbs does not know or does not handle (NO_PACKET, SIG_ERR, 7..=11).
        /// Detail: the raw `op_own` byte.
        UNKNOWN_CQE_OPCODE = 1, "unknown or unsupported CQE opcode";
        /// A RESIZE_CQ CQE: rverbs never resizes a CQ, so one is unexpected. Detail: `op_own`.
        RESIZE_CQE = 2, "unexpected RESIZE_CQ CQE";
        /// Payload scattered into the CQE (format 1/2) or a compressed CQE (format 3): rverbs
        /// enables neither, and cannot place the data. Detail: `op_own`.
        UNSUPPORTED_FORMAT = 3, "unsupported CQE format";
        /// Requester CQE whose send WQE opcode rverbs does not know or post. Detail: the WQE
        /// opcode.
        UNKNOWN_WQE_OPCODE = 4, "unknown send WQE opcode";
        /// The work-request lookup knew no WQE for (QPN, queue, wqe_counter). Detail: 0.
        NO_WR_ID = 5, "no work request for this CQE";
        /// `byte_cnt` larger than any message can be (2^31 bytes). Detail: 0.
        BAD_BYTE_COUNT = 6, "byte count out of range";
    }
}

impl ParseFault {
    /// The `vendor_err` of a completion rverbs synthesised for this fault.
    pub const fn vendor_err(self, detail: u8) -> u32 {
        ((self.0 as u32) << 8) | detail as u32
    }

    /// Splits a `vendor_err` back into (fault, detail); `None` for the device's own syndromes.
    #[cfg(any(test, feature = "internals", rverbs_fuzzing))]
    pub const fn from_vendor_err(vendor_err: u32) -> Option<(ParseFault, u8)> {
        if vendor_err < 0x100 || vendor_err > 0xffff {
            None
        } else {
            Some((ParseFault((vendor_err >> 8) as u8), vendor_err as u8))
        }
    }
}

/// The largest message InfiniBand allows (2^31 bytes); a larger `byte_cnt` is corrupt.
pub const MAX_BYTE_COUNT: u32 = 1 << 31;

/// A CQE64 copied out of the ring (or assembled by a test). Field accessors read big-endian.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Cqe64 {
    bytes: [u8; CQE64_SIZE],
}

impl fmt::Debug for Cqe64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cqe64")
            .field("opcode", &self.opcode())
            .field("format", &self.format())
            .field("owner", &self.owner())
            .field("qpn", &self.qpn())
            .field("wqe_counter", &self.wqe_counter())
            .field("byte_cnt", &self.byte_cnt())
            .field("syndrome", &self.syndrome())
            .finish_non_exhaustive()
    }
}

impl Cqe64 {
    /// Wraps 64 raw bytes.
    #[cfg(any(test, feature = "internals"))]
    pub const fn new(bytes: [u8; CQE64_SIZE]) -> Self {
        Self { bytes }
    }

    /// The CQE64 of a CQE slot: the slot itself when 64 bytes long, its second half when 128
    /// bytes long (mlx5 puts the CQE64 at the end of a 128-byte CQE). Any other length is an
    /// error naming it.
    #[cfg(any(test, feature = "internals", rverbs_fuzzing))]
    pub fn from_slot(slot: &[u8]) -> rverbs_uverbs::Result<Self> {
        let tail = match slot.len() {
            64 | 128 => &slot[slot.len() - CQE64_SIZE..],
            n => {
                return Err(rverbs_uverbs::Error::invalid(
                    "mlx5 CQE",
                    format!("CQE slot of {n} bytes: expected 64 or 128"),
                )
                .into())
            }
        };
        let mut bytes = [0u8; CQE64_SIZE];
        bytes.copy_from_slice(tail);
        Ok(Self { bytes })
    }

    /// The raw bytes.
    #[cfg(any(test, feature = "internals"))]
    pub const fn as_bytes(&self) -> &[u8; CQE64_SIZE] {
        &self.bytes
    }

    #[inline(always)]
    const fn u8_at(&self, off: usize) -> u8 {
        self.bytes[off]
    }

    #[inline(always)]
    const fn be16_at(&self, off: usize) -> u16 {
        u16::from_be_bytes([self.bytes[off], self.bytes[off + 1]])
    }

    #[inline(always)]
    const fn be32_at(&self, off: usize) -> u32 {
        u32::from_be_bytes([
            self.bytes[off],
            self.bytes[off + 1],
            self.bytes[off + 2],
            self.bytes[off + 3],
        ])
    }

    /// `op_own` (byte 63).
    #[inline(always)]
    pub const fn op_own(&self) -> u8 {
        self.u8_at(OFF_OP_OWN)
    }
    /// The CQE opcode (`op_own >> 4`).
    #[inline(always)]
    pub const fn opcode(&self) -> CqeOpcode {
        CqeOpcode(self.op_own() >> 4)
    }
    /// The CQE format (`op_own` bits 3:2).
    #[inline(always)]
    pub const fn format(&self) -> CqeFormat {
        CqeFormat((self.op_own() >> 2) & 3)
    }
    /// Solicited-event bit (`op_own` bit 1).
    #[cfg(any(test, feature = "internals"))]
    pub const fn solicited(&self) -> bool {
        self.op_own() & 2 != 0
    }
    /// Owner bit (`op_own` bit 0).
    #[inline(always)]
    pub const fn owner(&self) -> bool {
        self.op_own() & 1 != 0
    }
    /// `signature` (byte 62).
    #[cfg(any(test, feature = "internals"))]
    pub const fn signature(&self) -> u8 {
        self.u8_at(62)
    }
    /// `wqe_counter` (bytes 60..62): the index of the WQE this CQE completes.
    #[inline(always)]
    pub const fn wqe_counter(&self) -> u16 {
        self.be16_at(OFF_WQE_COUNTER)
    }
    /// `sop_drop_qpn` (bytes 56..60).
    #[inline(always)]
    pub const fn sop_drop_qpn(&self) -> u32 {
        self.be32_at(OFF_SOP_DROP_QPN)
    }
    /// The local QP number (`sop_drop_qpn & 0xffffff`).
    #[inline(always)]
    pub const fn qpn(&self) -> u32 {
        self.sop_drop_qpn() & 0x00ff_ffff
    }
    /// Send WQE opcode of a requester CQE (`sop_drop_qpn >> 24`).
    #[inline(always)]
    pub const fn wqe_opcode(&self) -> WqeOpcode {
        WqeOpcode((self.sop_drop_qpn() >> 24) as u8)
    }
    /// `timestamp` (bytes 48..56), in device clock ticks.
    #[cfg(any(test, feature = "internals"))]
    pub const fn timestamp(&self) -> u64 {
        ((self.be32_at(48) as u64) << 32) | self.be32_at(52) as u64
    }
    /// `byte_cnt` (bytes 44..48).
    #[inline(always)]
    pub const fn byte_cnt(&self) -> u32 {
        self.be32_at(OFF_BYTE_CNT)
    }
    /// `imm_inval_pkey` (bytes 36..40), in host order.
    #[inline(always)]
    pub const fn imm_inval_pkey(&self) -> u32 {
        self.be32_at(OFF_IMM_INVAL_PKEY)
    }
    /// `srqn_uidx` (bytes 32..36), low 24 bits: SRQ number (CQE v0) or user index (CQE v1).
    #[inline(always)]
    pub const fn srqn_uidx(&self) -> u32 {
        self.be32_at(OFF_SRQN_UIDX) & 0x00ff_ffff
    }
    /// `flags_rqpn` (bytes 24..28).
    #[inline(always)]
    pub const fn flags_rqpn(&self) -> u32 {
        self.be32_at(OFF_FLAGS_RQPN)
    }
    /// Remote (source) QP number (`flags_rqpn & 0xffffff`).
    #[cfg(any(test, feature = "internals"))]
    pub const fn src_qp(&self) -> u32 {
        self.flags_rqpn() & 0x00ff_ffff
    }
    /// Service level (`flags_rqpn` bits 27:24).
    #[cfg(any(test, feature = "internals"))]
    pub const fn sl(&self) -> u8 {
        ((self.flags_rqpn() >> 24) & 0xf) as u8
    }
    /// GRH / L3 header indication (`flags_rqpn` bits 29:28); non-zero means a GRH was present.
    #[cfg(any(test, feature = "internals"))]
    pub const fn grh_type(&self) -> u8 {
        ((self.flags_rqpn() >> 28) & 3) as u8
    }
    /// `slid` (bytes 22..24).
    pub const fn slid(&self) -> u16 {
        self.be16_at(OFF_SLID)
    }
    /// `ml_path` (byte 17).
    pub const fn ml_path(&self) -> u8 {
        self.u8_at(OFF_ML_PATH)
    }
    /// `wqe_id` (bytes 2..4), striding RQ only.
    #[cfg(any(test, feature = "internals"))]
    pub const fn wqe_id(&self) -> u16 {
        self.be16_at(2)
    }
    /// Error CQEs: `vendor_err_synd` (byte 54).
    #[inline(always)]
    pub const fn vendor_err_synd(&self) -> u8 {
        self.u8_at(54)
    }
    /// Error CQEs: `syndrome` (byte 55).
    #[inline(always)]
    pub const fn syndrome(&self) -> CqeSyndrome {
        CqeSyndrome(self.u8_at(55))
    }

    /// The WQE this CQE completes, on `queue`.
    #[inline(always)]
    pub fn wqe_ref(&self, queue: WorkQueue) -> WqeRef {
        parse::wqe_ref(self, queue)
    }
}

#[cfg(test)]
mod tests;
