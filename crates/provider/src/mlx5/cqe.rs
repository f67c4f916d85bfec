//! The 64-byte mlx5 completion queue entry (CQE64): a typed, copied-out view and its
//! translation into a [`WorkCompletion`].
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
//! hardware; it is total: every 64-byte input yields a [`WorkCompletion`], unknown or
//! unsupported values become explicit error completions (see [`ParseFault`]), nothing panics.

use std::fmt;

use rverbs_uverbs::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

use super::mlx5_newtype;

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
        wqe_ref(self, queue)
    }
}

/// Where the parser reads a CQE's fields from: a copy ([`Cqe64`]), or — in the poller — a
/// ring slot that software owns (owner bit seen, read barrier passed), read field by field
/// straight out of the ring without first copying all 64 bytes to the stack.
///
/// Offsets and widths are those of the table in the module docs; every read is a copy of
/// the bytes, never a reference into the ring.
pub(crate) trait CqeSource: Copy {
    /// The byte at `off` (< 64).
    fn u8_at(self, off: usize) -> u8;
    /// The big-endian u16 at `off` (≤ 62).
    fn be16_at(self, off: usize) -> u16;
    /// The big-endian u32 at `off` (≤ 60).
    fn be32_at(self, off: usize) -> u32;
    /// All 64 bytes (for the general path).
    fn to_cqe64(self) -> Cqe64;
}

impl CqeSource for &Cqe64 {
    #[inline(always)]
    fn u8_at(self, off: usize) -> u8 {
        Cqe64::u8_at(self, off)
    }
    #[inline(always)]
    fn be16_at(self, off: usize) -> u16 {
        Cqe64::be16_at(self, off)
    }
    #[inline(always)]
    fn be32_at(self, off: usize) -> u32 {
        Cqe64::be32_at(self, off)
    }
    #[inline(always)]
    fn to_cqe64(self) -> Cqe64 {
        *self
    }
}

/// Which work queue of a QP a CQE completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WorkQueue {
    /// The send queue: REQ and REQ_ERR CQEs.
    Send,
    /// The receive queue or SRQ: RESP_* and RESP_ERR CQEs.
    Recv,
}

/// What a CQE says about the WQE it completes: the key of a wr_id lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WqeRef {
    /// Local QP number (`sop_drop_qpn & 0xffffff`).
    pub qpn: u32,
    /// `srqn_uidx & 0xffffff`: with CQE version 0 the SRQ number of a receive through an SRQ
    /// (0 otherwise); with CQE version 1 the user index given when the QP/SRQ was created.
    pub srqn_uidx: u32,
    /// Send or receive side.
    pub queue: WorkQueue,
    /// `wqe_counter`: the WQE index (send queue: of the last WQE this CQE covers; SRQ: the
    /// receive WQE's index). libmlx5 ignores it for a plain receive queue, which completes
    /// in order.
    pub wqe_counter: u16,
}

/// The QP side's answer to "which work request is this?": mlx5 CQEs carry a WQE counter, not
/// the caller's `wr_id`.
///
/// The CQ poller calls [`WrIdLookup::wr_id`] exactly once for every REQ, REQ_ERR, RESP_* and
/// RESP_ERR CQE, in ring order, and never for other CQEs. Implementations should do what
/// libmlx5 does with its own tables:
/// - send queue: `wr_id = sq.wrid[wqe_counter & (sq_size - 1)]`, and free every WQE up to and
///   including that one (unsignalled WQEs before it completed too);
/// - receive queue without SRQ: `wr_id = rq.wrid[rq.tail & (rq_size - 1)]`, `rq.tail += 1`
///   (receives complete in order; `wqe_counter` is not needed);
/// - SRQ: `wr_id = srq.wrid[wqe_counter]`, and free that WQE.
///
/// Returning `None` (unknown QP, or nothing outstanding) makes the completion an error
/// completion with [`ParseFault::NO_WR_ID`], `wr_id` 0 and `unmatched` set (it settles no ledger). Any `FnMut(WqeRef) -> Option<u64>`
/// closure is a lookup.
pub trait WrIdLookup {
    /// The `wr_id` of the work request `wqe` completes.
    fn wr_id(&mut self, wqe: WqeRef) -> Option<u64>;
    /// The completion opcode recorded at post time for the send WQE the last
    /// [`WrIdLookup::wr_id`] call found, for WQEs whose CQE does not say it (UMR: a
    /// memory-window bind or a local invalidation; libmlx5's `wr_data`). `None` (the
    /// default): nothing recorded; the CQE is then reported as an unknown WQE opcode.
    fn wr_data(&self) -> Option<WcOpcode> {
        None
    }
}

impl<F: FnMut(WqeRef) -> Option<u64>> WrIdLookup for F {
    #[inline(always)]
    fn wr_id(&mut self, wqe: WqeRef) -> Option<u64> {
        self(wqe)
    }
}

#[inline(always)]
fn fault(wc: &mut WorkCompletion, f: ParseFault, detail: u8) {
    wc.status = WcStatus::GENERAL_ERR;
    wc.vendor_err = f.vendor_err(detail);
}

/// What a successful requester completion of one send WQE opcode reports (libmlx5's
/// `handle_good_req`).
///
/// Four bytes, so that the fast path's table is indexed without a multiply.
#[derive(Clone, Copy)]
#[repr(C, align(4))]
struct ReqOp {
    /// The [`WcOpcode`] (requester opcodes are all below 8).
    opcode: u8,
    /// The [`WcFlags`] bits: `WITH_IMM` for the immediate-carrying opcodes, else none.
    flags: u8,
    /// `byte_len`: [`LEN_BYTE_CNT`] for the CQE's `byte_cnt` (RDMA READ), else the value
    /// itself (8 for atomics, 0 otherwise); [`LEN_NOT_FAST`] in [`REQ_OPS`] for opcodes
    /// without a plain requester completion. The two markers are the largest values, so one
    /// comparison tells a length from a marker.
    len: u8,
}

const LEN_BYTE_CNT: u8 = 0xfe;
const LEN_NOT_FAST: u8 = 0xff;

/// The requester rules, one send WQE opcode at a time; `None` for opcodes a plain requester
/// completion never reports.
const fn req_opcode(op: WqeOpcode) -> Option<ReqOp> {
    let (opcode, imm, len) = match op {
        WqeOpcode::RDMA_WRITE => (WcOpcode::RDMA_WRITE, false, 0),
        WqeOpcode::RDMA_WRITE_IMM => (WcOpcode::RDMA_WRITE, true, 0),
        WqeOpcode::SEND | WqeOpcode::SEND_INVAL => (WcOpcode::SEND, false, 0),
        WqeOpcode::SEND_IMM => (WcOpcode::SEND, true, 0),
        WqeOpcode::RDMA_READ => (WcOpcode::RDMA_READ, false, LEN_BYTE_CNT),
        WqeOpcode::ATOMIC_CS => (WcOpcode::COMP_SWAP, false, 8),
        WqeOpcode::ATOMIC_FA => (WcOpcode::FETCH_ADD, false, 8),
        WqeOpcode::TSO => (WcOpcode::TSO, false, 0),
        _ => return None,
    };
    let flags = if imm { WcFlags::WITH_IMM.bits() } else { 0 };
    Some(ReqOp {
        opcode: opcode.0 as u8,
        flags: flags as u8,
        len,
    })
}

impl ReqOp {
    #[inline(always)]
    const fn opcode(self) -> WcOpcode {
        WcOpcode(self.opcode as u32)
    }
    #[inline(always)]
    const fn flags(self) -> WcFlags {
        WcFlags::from_bits_retain(self.flags as u32)
    }
}

// The narrowing in `req_opcode` loses nothing.
const _: () = assert!(WcOpcode::TSO.0 < 0x100 && WcFlags::WITH_IMM.bits() < 0x100);
const _: () = assert!(core::mem::size_of::<ReqOp>() == 4);

/// [`req_opcode`] for every send WQE opcode, for the fast path: one load instead of a match.
const REQ_OPS: [ReqOp; 256] = {
    let mut t = [ReqOp {
        opcode: 0,
        flags: 0,
        len: LEN_NOT_FAST,
    }; 256];
    let mut i = 0;
    while i < 256 {
        if let Some(r) = req_opcode(WqeOpcode(i as u8)) {
            t[i] = r;
        }
        i += 1;
    }
    t
};

/// Translates one CQE into a work completion, calling `lookup` (at most once) for the wr_id.
///
/// Field by field, this follows libmlx5's `mlx5_parse_cqe` for the plain `ibv_poll_cq` path:
/// - every CQE: `qp_num` = QPN of `sop_drop_qpn`;
/// - REQ: opcode from the send WQE opcode; `WITH_IMM` for SEND_IMM/WRITE_IMM (no immediate
///   value: the requester has none to report); `byte_len` = `byte_cnt` for RDMA READ, 8 for
///   compare-swap and fetch-add, 0 otherwise;
/// - RESP_*: `byte_len` = `byte_cnt`; WR_IMM → RECV_RDMA_WITH_IMM + `WITH_IMM`; SEND → RECV;
///   SEND_IMM → RECV + `WITH_IMM`; SEND_INV → RECV + `WITH_INV`; the immediate value or the
///   invalidated rkey in host order in `imm_data`; `src_qp`, `sl`, `slid`, `dlid_path_bits`
///   (`ml_path & 0x7f`), `GRH` when `flags_rqpn` bits 29:28 are non-zero, `pkey_index` =
///   `imm_inval_pkey & 0xffff` (as libmlx5 reports it, even when the field holds immediate
///   data);
/// - REQ_ERR/RESP_ERR: status from the syndrome ([`CqeSyndrome::status`]), `vendor_err` =
///   `vendor_err_synd`; the opcode is a hint only (as in libibverbs, it is undefined for
///   errors): the send WQE's opcode when known, RECV for responder errors.
///
/// Whatever else a CQE holds becomes a [`WcStatus::GENERAL_ERR`] completion with a
/// [`ParseFault`] in `vendor_err`.
#[inline(always)]
#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
pub fn parse_cqe<L: WrIdLookup + ?Sized>(cqe: &Cqe64, lookup: &mut L) -> WorkCompletion {
    let mut wc = WorkCompletion::default();
    parse_cqe_into(cqe, lookup, &mut wc);
    wc
}

/// [`parse_cqe`] writing into `out` (what the poller uses: the completion goes straight into
/// the caller's slot).
#[inline(always)]
#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
pub fn parse_cqe_into<L: WrIdLookup + ?Sized>(
    cqe: &Cqe64,
    lookup: &mut L,
    out: &mut WorkCompletion,
) {
    parse_from(cqe, cqe.op_own(), lookup, out)
}

/// The parser over any [`CqeSource`]: the poller hands it the owned ring slot, everything
/// else a [`Cqe64`]. One body for both, so fixtures test the code hardware runs.
///
/// Fast paths for successful plain CQEs read only the fields they report; anything unusual
/// goes to `parse_general` (cold) over a full copy, which holds the complete rules. Both give
/// the same result for the same CQE; the lookup is called exactly once either way.
#[inline(always)]
/// `op_own` is the CQE's byte 63, already read (the poller's ownership check has it).
pub(crate) fn parse_from<S: CqeSource, L: WrIdLookup + ?Sized>(
    cqe: S,
    op_own: u8,
    lookup: &mut L,
    out: &mut WorkCompletion,
) {
    // Bits 7:2 of op_own: the opcode and the format (plain = 0); the solicited and owner
    // bits below them do not matter here.
    if op_own & 0xfc == CqeOpcode::REQ.0 << 4 {
        parse_req_plain(cqe, lookup, out);
        return;
    }
    if (op_own >> 4).wrapping_sub(CqeOpcode::RESP_WR_IMM.0) < 4 && op_own & 0x0c == 0 {
        let wr = lookup.wr_id(wqe_ref(cqe, WorkQueue::Recv));
        if !resp_fast(cqe, op_own, wr, out) {
            *out = parse_general(&cqe.to_cqe64(), Looked::<dyn WrIdLookup>::Up(wr, None));
        }
        return;
    }
    *out = parse_general(&cqe.to_cqe64(), Looked::NotYet(lookup));
}

/// [`parse_from`] for a CQE known to be a requester CQE of the plain format (`op_own` bits
/// 7:2 zero): the poller's fast lane.
#[inline(always)]
pub(crate) fn parse_req_plain<S: CqeSource, L: WrIdLookup + ?Sized>(
    cqe: S,
    lookup: &mut L,
    out: &mut WorkCompletion,
) {
    let wr = lookup.wr_id(wqe_ref(cqe, WorkQueue::Send));
    if !req_fast(cqe, wr, out) {
        *out = parse_general(
            &cqe.to_cqe64(),
            Looked::<dyn WrIdLookup>::Up(wr, lookup.wr_data()),
        );
    }
}

/// The WQE a CQE completes, on `queue` ([`Cqe64::wqe_ref`] over any source).
#[inline(always)]
fn wqe_ref<S: CqeSource>(cqe: S, queue: WorkQueue) -> WqeRef {
    WqeRef {
        qpn: cqe.be32_at(OFF_SOP_DROP_QPN) & 0x00ff_ffff,
        srqn_uidx: cqe.be32_at(OFF_SRQN_UIDX) & 0x00ff_ffff,
        queue,
        wqe_counter: cqe.be16_at(OFF_WQE_COUNTER),
    }
}

/// Writes a successful requester CQE of the plain format into `out`; `false` (nothing
/// written) sends it to the general path.
#[inline(always)]
fn req_fast<S: CqeSource>(cqe: S, wr: Option<u64>, out: &mut WorkCompletion) -> bool {
    let Some(wr_id) = wr else { return false };
    let sop = cqe.be32_at(OFF_SOP_DROP_QPN);
    // The send WQE opcode is the first byte of `sop_drop_qpn`.
    let r = REQ_OPS[cqe.u8_at(OFF_SOP_DROP_QPN) as usize];
    let mut byte_len = r.len as u32;
    if r.len >= LEN_BYTE_CNT {
        if r.len == LEN_NOT_FAST {
            return false;
        }
        byte_len = cqe.be32_at(OFF_BYTE_CNT);
        if byte_len > MAX_BYTE_COUNT {
            return false;
        }
    }
    *out = WorkCompletion {
        wr_id,
        status: WcStatus::SUCCESS,
        opcode: r.opcode(),
        vendor_err: 0,
        byte_len,
        imm_data: 0,
        qp_num: sop & 0x00ff_ffff,
        src_qp: 0,
        wc_flags: r.flags(),
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
        port_num: 0,
        unmatched: false,
    };
    true
}

/// Responder opcodes 1..=4 (index opcode - 1): (WcOpcode, flags carrying `imm_inval_pkey`).
const RESP_MAP: [(WcOpcode, WcFlags); 4] = [
    (WcOpcode::RECV_RDMA_WITH_IMM, WcFlags::WITH_IMM),
    (WcOpcode::RECV, WcFlags::empty()),
    (WcOpcode::RECV, WcFlags::WITH_IMM),
    (WcOpcode::RECV, WcFlags::WITH_INV),
];

/// Writes a successful plain responder CQE into `out`; `false` (nothing written) sends it to
/// the general path.
#[inline(always)]
fn resp_fast<S: CqeSource>(cqe: S, op_own: u8, wr: Option<u64>, out: &mut WorkCompletion) -> bool {
    let Some(wr_id) = wr else { return false };
    let n = cqe.be32_at(OFF_BYTE_CNT);
    if n > MAX_BYTE_COUNT {
        return false;
    }
    let (opcode, flags) = RESP_MAP[((op_own >> 4).wrapping_sub(1) & 3) as usize];
    let field = cqe.be32_at(OFF_IMM_INVAL_PKEY);
    let rqpn = cqe.be32_at(OFF_FLAGS_RQPN);
    let grh = ((rqpn >> 28) & 3 != 0) as u32 * WcFlags::GRH.bits();
    *out = WorkCompletion {
        wr_id,
        status: WcStatus::SUCCESS,
        opcode,
        vendor_err: 0,
        byte_len: n,
        imm_data: if flags.is_empty() { 0 } else { field },
        qp_num: cqe.be32_at(OFF_SOP_DROP_QPN) & 0x00ff_ffff,
        src_qp: rqpn & 0x00ff_ffff,
        wc_flags: WcFlags::from_bits_retain(flags.bits() | grh),
        pkey_index: field as u16,
        slid: cqe.be16_at(OFF_SLID),
        sl: ((rqpn >> 24) & 0xf) as u8,
        dlid_path_bits: cqe.u8_at(OFF_ML_PATH) & 0x7f,
        port_num: 0,
        unmatched: false,
    };
    true
}

/// The lookup state handed to the general path.
enum Looked<'a, L: ?Sized> {
    /// The fast path already asked (once): here is the answer (and the lookup's
    /// [`WrIdLookup::wr_data`] after it, for send WQEs).
    Up(Option<u64>, Option<WcOpcode>),
    /// Not asked yet: ask if the CQE names a WQE.
    NotYet(&'a mut L),
}

/// Every CQE, by the full rules (see [`parse_cqe`]). Kept out of line: the poll loop stays
/// small for the common completions.
#[cold]
#[inline(never)]
fn parse_general<L: WrIdLookup + ?Sized>(cqe: &Cqe64, looked: Looked<'_, L>) -> WorkCompletion {
    let qpn = cqe.qpn();
    let mut wc = WorkCompletion {
        qp_num: qpn,
        ..WorkCompletion::default()
    };
    let opcode = cqe.opcode();
    let queue = match opcode {
        CqeOpcode::REQ | CqeOpcode::REQ_ERR => WorkQueue::Send,
        CqeOpcode::RESP_WR_IMM
        | CqeOpcode::RESP_SEND
        | CqeOpcode::RESP_SEND_IMM
        | CqeOpcode::RESP_SEND_INV
        | CqeOpcode::RESP_ERR => WorkQueue::Recv,
        // No request looked up: nothing posted is over because of these (`unmatched`).
        CqeOpcode::RESIZE_CQ => {
            fault(&mut wc, ParseFault::RESIZE_CQE, cqe.op_own());
            wc.unmatched = true;
            return wc;
        }
        _ => {
            fault(&mut wc, ParseFault::UNKNOWN_CQE_OPCODE, cqe.op_own());
            wc.unmatched = true;
            return wc;
        }
    };
    let (wr, wr_data) = match looked {
        Looked::Up(wr, d) => (wr, d),
        Looked::NotYet(lookup) => {
            let wr = lookup.wr_id(cqe.wqe_ref(queue));
            (wr, lookup.wr_data())
        }
    };
    match wr {
        Some(id) => wc.wr_id = id,
        None => {
            // The lookup matched no request (an unknown QP, nothing outstanding).
            fault(&mut wc, ParseFault::NO_WR_ID, 0);
            wc.unmatched = true;
            return wc;
        }
    }

    match opcode {
        CqeOpcode::REQ => {
            let wop = cqe.wqe_opcode();
            if wop == WqeOpcode::UMR {
                // libmlx5: the opcode recorded when the WQE was posted (BIND_MW or
                // LOCAL_INV), no byte count.
                if let Some(op) = wr_data {
                    wc.opcode = op;
                    if cqe.format() != CqeFormat::PLAIN {
                        fault(&mut wc, ParseFault::UNSUPPORTED_FORMAT, cqe.op_own());
                    }
                    return wc;
                }
            }
            let Some(r) = req_opcode(wop) else {
                wc.byte_len = cqe.byte_cnt();
                fault(&mut wc, ParseFault::UNKNOWN_WQE_OPCODE, wop.0);
                return wc;
            };
            wc.opcode = r.opcode();
            wc.wc_flags = r.flags();
            wc.byte_len = match r.len {
                LEN_BYTE_CNT => {
                    let n = cqe.byte_cnt();
                    if n > MAX_BYTE_COUNT {
                        wc.byte_len = n;
                        fault(&mut wc, ParseFault::BAD_BYTE_COUNT, 0);
                        return wc;
                    }
                    n
                }
                len => len as u32,
            };
            // Inline scatter on the send side (READ/atomic responses placed in the CQE) needs
            // MLX5_QP_FLAG_SCATTER_CQE at QP creation, which rverbs does not set.
            if cqe.format() != CqeFormat::PLAIN {
                fault(&mut wc, ParseFault::UNSUPPORTED_FORMAT, cqe.op_own());
            }
        }
        CqeOpcode::REQ_ERR | CqeOpcode::RESP_ERR => {
            let syn = cqe.syndrome();
            wc.status = syn.status();
            wc.vendor_err = cqe.vendor_err_synd() as u32;
            wc.opcode = if opcode == CqeOpcode::REQ_ERR {
                match (req_opcode(cqe.wqe_opcode()), wr_data) {
                    (Some(r), _) => r.opcode(),
                    (None, Some(op)) if cqe.wqe_opcode() == WqeOpcode::UMR => op,
                    _ => WcOpcode::SEND,
                }
            } else {
                WcOpcode::RECV
            };
        }
        _ => {
            // Responder success.
            let n = cqe.byte_cnt();
            wc.byte_len = n;
            let field = cqe.imm_inval_pkey();
            let (op, flags) = match opcode {
                CqeOpcode::RESP_WR_IMM => (WcOpcode::RECV_RDMA_WITH_IMM, WcFlags::WITH_IMM),
                CqeOpcode::RESP_SEND_IMM => (WcOpcode::RECV, WcFlags::WITH_IMM),
                CqeOpcode::RESP_SEND_INV => (WcOpcode::RECV, WcFlags::WITH_INV),
                _ => (WcOpcode::RECV, WcFlags::empty()),
            };
            wc.opcode = op;
            wc.wc_flags = flags;
            if !flags.is_empty() {
                wc.imm_data = field;
            }
            let rqpn = cqe.flags_rqpn();
            wc.src_qp = rqpn & 0x00ff_ffff;
            wc.sl = ((rqpn >> 24) & 0xf) as u8;
            if (rqpn >> 28) & 3 != 0 {
                wc.wc_flags |= WcFlags::GRH;
            }
            wc.slid = cqe.slid();
            wc.dlid_path_bits = cqe.ml_path() & 0x7f;
            wc.pkey_index = field as u16;
            if cqe.format() != CqeFormat::PLAIN {
                fault(&mut wc, ParseFault::UNSUPPORTED_FORMAT, cqe.op_own());
            } else if n > MAX_BYTE_COUNT {
                fault(&mut wc, ParseFault::BAD_BYTE_COUNT, 0);
            }
        }
    }
    wc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cqe(f: impl FnOnce(&mut [u8; 64])) -> Cqe64 {
        let mut b = [0u8; 64];
        f(&mut b);
        Cqe64::new(b)
    }

    #[test]
    fn slot_lengths() {
        let mut slot = [0u8; 128];
        slot[127] = 0x21;
        slot[63] = 0xff;
        let c = Cqe64::from_slot(&slot).unwrap();
        assert_eq!(c.op_own(), 0x21);
        assert_eq!(Cqe64::from_slot(&slot[..64]).unwrap().op_own(), 0xff);
        for n in [0usize, 1, 63, 65, 127, 129] {
            let e = Cqe64::from_slot(&vec![0u8; n]).unwrap_err();
            assert!(e.to_string().contains(&format!("{n} bytes")), "{e}");
        }
    }

    #[test]
    fn vendor_err_round_trip() {
        let v = ParseFault::RESIZE_CQE.vendor_err(0x51);
        assert_eq!(v, 0x251);
        assert_eq!(
            ParseFault::from_vendor_err(v),
            Some((ParseFault::RESIZE_CQE, 0x51))
        );
        assert_eq!(ParseFault::from_vendor_err(0x93), None);
    }

    #[test]
    fn lookup_called_once_per_work_cqe_and_never_for_others() {
        let mut calls = 0;
        let mut lk = |_w: WqeRef| {
            calls += 1;
            Some(7)
        };
        let _ = parse_cqe(&cqe(|b| b[63] = 0x00), &mut lk);
        let _ = parse_cqe(&cqe(|b| b[63] = 0x20), &mut lk);
        let _ = parse_cqe(&cqe(|b| b[63] = 0xd0), &mut lk);
        let _ = parse_cqe(&cqe(|b| b[63] = 0x50), &mut lk);
        let _ = parse_cqe(&cqe(|b| b[63] = 0x70), &mut lk);
        let _ = parse_cqe(&cqe(|b| b[63] = 0xf0), &mut lk);
        assert_eq!(calls, 3);
    }

    #[test]
    fn every_op_own_is_total() {
        // Cheap exhaustive sweep of the byte that selects the code path.
        for op_own in 0..=255u8 {
            for synd in [0u8, 0x05, 0x22, 0xff] {
                let c = cqe(|b| {
                    b[63] = op_own;
                    b[55] = synd;
                    b[56] = 0xff;
                    b[44..48].copy_from_slice(&u32::MAX.to_be_bytes());
                });
                let wc = parse_cqe(&c, &mut |_w: WqeRef| Some(1));
                if wc.status == WcStatus::SUCCESS {
                    assert!(wc.vendor_err == 0);
                }
            }
        }
    }

    #[test]
    fn fast_paths_agree_with_the_general_rules() {
        // Every op_own × every send WQE opcode × byte counts around the limit × with and
        // without a wr_id: the fast lanes (`parse_from`, `parse_req_plain` where op_own says
        // plain REQ) give exactly what the complete rules in `parse_general` give, and each
        // asks the lookup the same question as often.
        // Under Miri (slow) every 11th op_own and every 13th WQE opcode, plus the opcodes the
        // requester table knows.
        let step = |n: u8| !cfg!(miri) || n % 13 == 0 || req_opcode(WqeOpcode(n)).is_some();
        let mut checked = 0u32;
        for op_own in (0..=255u8).filter(|o| !cfg!(miri) || o % 11 == 0 || *o < 4) {
            for wqe_op in (0..=255u8).filter(|w| step(*w)) {
                for byte_cnt in [0u32, 8, 4096, MAX_BYTE_COUNT, MAX_BYTE_COUNT + 1] {
                    for found in [true, false] {
                        let c = cqe(|b| {
                            b[63] = op_own;
                            b[56] = wqe_op;
                            b[57..60].copy_from_slice(&[0x12, 0x34, 0x56]);
                            b[60..62].copy_from_slice(&0x0203u16.to_be_bytes());
                            b[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
                            b[36..40].copy_from_slice(&0xa1b2_c3d4u32.to_be_bytes());
                            b[24..28].copy_from_slice(&0x1900_0077u32.to_be_bytes());
                            b[22..24].copy_from_slice(&0x0005u16.to_be_bytes());
                            b[17] = 0x83;
                            b[55] = 0x05;
                            b[54] = 0x99;
                        });
                        let asked = std::cell::RefCell::new(Vec::new());
                        let mut lk = |w: WqeRef| {
                            asked.borrow_mut().push(w);
                            found.then_some(0xfeed)
                        };
                        let mut fast = WorkCompletion::default();
                        parse_from(&c, c.op_own(), &mut lk, &mut fast);
                        if op_own & 0xfc == 0 {
                            let mut lane = WorkCompletion::default();
                            parse_req_plain(&c, &mut lk, &mut lane);
                            assert_eq!(lane, fast, "op_own {op_own:#x} wqe op {wqe_op:#x}");
                        }
                        let fast_asked = asked.take();
                        let general = parse_general(&c, Looked::NotYet(&mut lk));
                        assert_eq!(
                            fast, general,
                            "op_own {op_own:#x} wqe op {wqe_op:#x} byte_cnt {byte_cnt:#x} \
                             wr_id found {found}"
                        );
                        let per_call = if op_own & 0xfc == 0 { 2 } else { 1 };
                        let general_asked = asked.take();
                        assert_eq!(fast_asked.len(), general_asked.len() * per_call);
                        assert!(fast_asked.iter().all(|w| Some(w) == general_asked.first()));
                        checked += 1;
                    }
                }
            }
        }
        if !cfg!(miri) {
            assert_eq!(checked, 256 * 256 * 5 * 2);
        }
    }
}
