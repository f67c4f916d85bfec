//! Work completions: the one completion type every provider (rxe, mlx5) returns.
//!
//! Status and opcode are written by the kernel or the device, so they are newtypes over the raw
//! number with named constants, never Rust enums: an unknown value stays an unknown value.

use crate::newtype::flag_set;

use crate::newtype::raw_newtype;

raw_newtype! {
    /// `ibv_wc_status` / `ib_wc_status`: the kernel and libibverbs agree on these numbers.
    WcStatus(u32) {
        SUCCESS = 0, "success";
        LOC_LEN_ERR = 1, "local length error";
        LOC_QP_OP_ERR = 2, "local QP operation error";
        LOC_EEC_OP_ERR = 3, "local EE context operation error";
        LOC_PROT_ERR = 4, "local protection error";
        WR_FLUSH_ERR = 5, "Work Request Flushed Error";
        MW_BIND_ERR = 6, "memory management operation error";
        BAD_RESP_ERR = 7, "bad response error";
        LOC_ACCESS_ERR = 8, "local access error";
        REM_INV_REQ_ERR = 9, "remote invalid request error";
        REM_ACCESS_ERR = 10, "remote access error";
        REM_OP_ERR = 11, "remote operation error";
        RETRY_EXC_ERR = 12, "transport retry counter exceeded";
        RNR_RETRY_EXC_ERR = 13, "RNR retry counter exceeded";
        LOC_RDD_VIOL_ERR = 14, "local RDD violation error";
        REM_INV_RD_REQ_ERR = 15, "remote invalid RD request";
        REM_ABORT_ERR = 16, "aborted error";
        INV_EECN_ERR = 17, "invalid EE context number";
        INV_EEC_STATE_ERR = 18, "invalid EE context state";
        FATAL_ERR = 19, "fatal error";
        RESP_TIMEOUT_ERR = 20, "response timeout error";
        GENERAL_ERR = 21, "general error";
    }
}

impl WcStatus {
    /// True for [`WcStatus::SUCCESS`].
    pub const fn is_success(self) -> bool {
        self.0 == 0
    }
}

raw_newtype! {
    /// `ibv_wc_opcode`: requester opcodes below 128, responder opcodes from 128 (`IBV_WC_RECV`).
    WcOpcode(u32) {
        SEND = 0, "SEND";
        RDMA_WRITE = 1, "RDMA_WRITE";
        RDMA_READ = 2, "RDMA_READ";
        COMP_SWAP = 3, "COMP_SWAP";
        FETCH_ADD = 4, "FETCH_ADD";
        BIND_MW = 5, "BIND_MW";
        LOCAL_INV = 6, "LOCAL_INV";
        TSO = 7, "TSO";
        FLUSH = 8, "FLUSH";
        ATOMIC_WRITE = 9, "ATOMIC_WRITE";
        RECV = 128, "RECV";
        RECV_RDMA_WITH_IMM = 129, "RECV_RDMA_WITH_IMM";
    }
}

impl WcOpcode {
    internal! {
    /// True for responder (receive-side) completions.
    pub const fn is_recv(self) -> bool {
        self.0 & 128 != 0
    }
    }
}

flag_set! {
    /// `ibv_wc_flags` — the **userspace** numbering. The kernel's `ib_uverbs_wc` numbers
    /// with-invalidate as bit 2 (`IB_WC_WITH_INVALIDATE`) where libibverbs has `IBV_WC_WITH_INV`
    /// at bit 3; providers convert (`WcFlags::from_kernel`, for the crates of this workspace).
    pub struct WcFlags: u32 {
        /// A GRH is present in the first 40 bytes of the receive buffer.
        const GRH = 1 << 0;
        /// `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// The IP checksum was checked and is correct.
        const IP_CSUM_OK = 1 << 2;
        /// `imm_data` holds the invalidated rkey.
        const WITH_INV = 1 << 3;
    }
}

impl WcFlags {
    internal! {
    /// Kernel (`ib_wc_flags`) numbering: GRH 1, WITH_IMM 2, WITH_INVALIDATE 4, IP_CSUM_OK 8.
    /// The two numberings differ only in bits 2 and 3, which swap places (no branch: this
    /// runs once per rxe completion).
    pub const fn from_kernel(raw: u32) -> Self {
        const _: () = assert!(WcFlags::WITH_INV.bits() == 8 && WcFlags::IP_CSUM_OK.bits() == 4);
        Self::from_bits_retain((raw & !0b1100) | (raw & 4) << 1 | (raw & 8) >> 1)
    }
    }
}

/// One completion, as `ibv_wc` carries it.
///
/// The fields are laid out (`repr(C)`) in the order a poller fills them: first what every
/// successful requester completion sets, then `status` and the fields only errors and
/// receives set. A send completion then ends in 24 zero bytes that the compiler writes with
/// two wide stores instead of six narrow ones: polling an mlx5 ring is bound by stores
/// (`docs/mlx5.md`, Performance).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct WorkCompletion {
    /// The `wr_id` the work request was posted with.
    pub wr_id: u64,
    /// Valid only when `status` is success (as in libibverbs).
    pub opcode: WcOpcode,
    /// Bytes received (receives and RDMA WRITE with immediate); for sends, unspecified.
    pub byte_len: u32,
    /// Local QP number the completion belongs to.
    pub qp_num: u32,
    /// Which optional fields are valid (GRH, immediate data, invalidated rkey).
    pub wc_flags: WcFlags,
    /// Whether the work request succeeded, and if not why.
    pub status: WcStatus,
    /// Provider-specific error detail (mlx5: the vendor syndrome).
    pub vendor_err: u32,
    /// Immediate data in **host** byte order when `wc_flags` has `WITH_IMM`; the invalidated
    /// rkey when it has `WITH_INV`. (libibverbs keeps immediate data big-endian; we convert
    /// once, in the provider.)
    pub imm_data: u32,
    /// Source QP number of a UD receive.
    pub src_qp: u32,
    /// P_Key index of a GSI (QP1) receive.
    pub pkey_index: u16,
    /// Source LID of a UD receive (InfiniBand).
    pub slid: u16,
    /// Service level of a UD receive.
    pub sl: u8,
    /// Destination LID path bits of a UD receive (InfiniBand).
    pub dlid_path_bits: u8,
    /// Port of a receive on a switch's QP (0 otherwise).
    pub port_num: u8,
    /// True when the provider made this completion up instead of matching it to a request
    /// posted on `qp_num` (mlx5: a CQE naming a QP or WQE it has no request for, a CQE
    /// opcode or format it cannot attribute; `wr_id` is then 0 and the status
    /// `GENERAL_ERR`). No request is over because of it: rverbs' ledgers count only matched
    /// completions (docs/architecture.md, "Why this is sound"). Completions the kernel
    /// writes (rxe, siw) and those EFA's parser reports are always matched.
    pub unmatched: bool,
}

impl WorkCompletion {
    /// The immediate data, when the completion carries some.
    pub fn imm(&self) -> Option<u32> {
        self.wc_flags
            .contains(WcFlags::WITH_IMM)
            .then_some(self.imm_data)
    }

    /// The rkey invalidated by a SEND_WITH_INV, when there was one.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags
            .contains(WcFlags::WITH_INV)
            .then_some(self.imm_data)
    }
}

internal_fields! {
/// The kernel's `struct ib_uverbs_wc` (48 bytes, `include/uapi/rdma/ib_user_verbs.h`): one
/// completion as the kernel writes it (rxe's CQ ring holds these), decoded only when a field
/// is read: the lazy counterpart of [`WorkCompletion`] that [`CqView`](crate::cq::CqView)
/// hands out. Its layout is compared with the installed header by `tests/abi_layout.rs`.
///
/// A `RawWc` is always a copy owned by the caller (never a place in shared memory). rxe copies
/// its ring entries into it unchanged; other providers build one from their own CQE format
/// (`RawWc::from_work_completion`). Reading [`wr_id`](Self::wr_id) or
/// [`status`](Self::status) is one load; [`wc_flags`](Self::wc_flags) converts the kernel's
/// flag numbering and [`imm`](Self::imm) the immediate data's byte order, each only when
/// called; [`to_work_completion`](Self::to_work_completion) is the one conversion of all
/// fields. The fields are the kernel's, in its numbering and byte order.
#[derive(
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::Immutable,
    zerocopy::KnownLayout,
)]
#[repr(C)]
pub struct RawWc {
    /// The work request id the request was posted with.
    pub wr_id: u64,
    /// `ib_wc_status` ([`WcStatus`]'s number): 0 is success.
    pub status: u32,
    /// `ib_uverbs_wc_opcode` ([`WcOpcode`]'s number) of the completed operation.
    pub opcode: u32,
    /// Vendor error syndrome.
    pub vendor_err: u32,
    /// Bytes received or transferred.
    pub byte_len: u32,
    /// `union ex`: immediate data as it came off the wire (**big-endian**) with
    /// `IB_WC_WITH_IMM`, the invalidated rkey (host order) with `IB_WC_WITH_INVALIDATE`.
    pub ex: u32,
    /// The local QP number.
    pub qp_num: u32,
    /// Source QP number of a UD receive.
    pub src_qp: u32,
    /// Kernel `ib_wc_flags` numbering ([`WcFlags::from_kernel`] converts it).
    pub wc_flags: u32,
    /// P_Key index of a UD/GSI receive.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits (0 on RoCE).
    pub dlid_path_bits: u8,
    /// Port the completion came from (UD/GSI).
    pub port_num: u8,
    /// Padding in the kernel's layout (rxe writes 0). rverbs uses its bit 0 for
    /// [`WorkCompletion::unmatched`] ([`RawWc::is_unmatched`]); the other bits mean nothing.
    pub reserved: u8,
}
}

const _: () = {
    assert!(core::mem::size_of::<RawWc>() == 48 && core::mem::align_of::<RawWc>() == 8);
    assert!(core::mem::offset_of!(RawWc, ex) == 24 && core::mem::offset_of!(RawWc, port_num) == 46);
};

/// Kernel `IB_WC_WITH_IMM`.
const K_WITH_IMM: u32 = 1 << 1;
/// Kernel `IB_WC_WITH_INVALIDATE`.
const K_WITH_INV: u32 = 1 << 2;

impl RawWc {
    /// The `wr_id` the work request was posted with.
    #[inline(always)]
    pub fn wr_id(&self) -> u64 {
        self.wr_id
    }

    /// The completion's status.
    #[inline(always)]
    pub fn status(&self) -> WcStatus {
        WcStatus(self.status)
    }

    /// True when the status is success (one compare).
    #[inline(always)]
    pub fn is_success(&self) -> bool {
        self.status == 0
    }

    internal! {
    /// [`WorkCompletion::unmatched`]: the provider made this completion up (bit 0 of
    /// `reserved`, which the kernel leaves 0).
    #[inline(always)]
    pub fn is_unmatched(&self) -> bool {
        self.reserved & 1 != 0
    }
    }

    /// The opcode; valid only when the status is success (as in libibverbs).
    #[inline(always)]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode(self.opcode)
    }

    /// Bytes received (receives) or transferred.
    #[inline(always)]
    pub fn byte_len(&self) -> u32 {
        self.byte_len
    }

    /// The local QP number.
    #[inline(always)]
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// The flags, converted from the kernel's numbering to the userspace one on this call.
    #[inline]
    pub fn wc_flags(&self) -> WcFlags {
        WcFlags::from_kernel(self.wc_flags)
    }

    /// The immediate data in host byte order, when the completion carries some.
    #[inline]
    pub fn imm(&self) -> Option<u32> {
        (self.wc_flags & K_WITH_IMM != 0).then(|| u32::from_be(self.ex))
    }

    /// The rkey invalidated by a SEND_WITH_INV, when there was one.
    #[inline]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        (self.wc_flags & K_WITH_INV != 0).then_some(self.ex)
    }

    /// Provider-specific error detail (mlx5: the vendor syndrome).
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.vendor_err
    }

    /// The remote QP number (UD receives).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.src_qp
    }

    /// The P_Key index (GSI receives).
    #[inline]
    pub fn pkey_index(&self) -> u16 {
        self.pkey_index
    }

    /// The source LID (UD receives on InfiniBand).
    #[inline]
    pub fn slid(&self) -> u16 {
        self.slid
    }

    /// The service level (UD receives).
    #[inline]
    pub fn sl(&self) -> u8 {
        self.sl
    }

    /// The destination LID path bits (UD receives).
    #[inline]
    pub fn dlid_path_bits(&self) -> u8 {
        self.dlid_path_bits
    }

    /// The port number (switches' and GSI receives).
    #[inline]
    pub fn port_num(&self) -> u8 {
        self.port_num
    }

    /// Every field decoded: what [`Cq::poll`](crate::cq::Cq::poll) would have returned. The
    /// one conversion of a kernel completion: flags into the userspace numbering, immediate
    /// data from network to host byte order, the invalidated rkey (host order) unchanged.
    ///
    /// On little-endian targets it moves whole 64-bit words: six loads, the 32-bit fields
    /// paired up with shifts, six stores into the [`WorkCompletion`] (which keeps its fields
    /// in another order), instead of a dozen narrow loads and stores (`rxe_poll` bench:
    /// about 2.8 → 2.2 ns per completion). The same result as the field-by-field form
    /// (tested; big-endian targets use that one).
    #[inline(always)]
    pub fn to_work_completion(&self) -> WorkCompletion {
        #[cfg(target_endian = "little")]
        {
            self.decode_words()
        }
        #[cfg(not(target_endian = "little"))]
        {
            self.decode_fields()
        }
    }

    /// [`to_work_completion`](Self::to_work_completion) field by field.
    #[cfg_attr(target_endian = "little", allow(dead_code))]
    #[inline(always)]
    fn decode_fields(&self) -> WorkCompletion {
        let flags = self.wc_flags();
        WorkCompletion {
            wr_id: self.wr_id,
            opcode: self.opcode(),
            byte_len: self.byte_len,
            qp_num: self.qp_num,
            wc_flags: flags,
            status: self.status(),
            vendor_err: self.vendor_err,
            imm_data: if self.wc_flags & K_WITH_IMM != 0 {
                u32::from_be(self.ex)
            } else {
                self.ex
            },
            src_qp: self.src_qp,
            pkey_index: self.pkey_index,
            slid: self.slid,
            sl: self.sl,
            dlid_path_bits: self.dlid_path_bits,
            port_num: self.port_num,
            unmatched: self.is_unmatched(),
        }
    }

    /// [`to_work_completion`](Self::to_work_completion) word by word (little-endian only).
    #[cfg(target_endian = "little")]
    #[inline(always)]
    #[allow(unsafe_code)]
    fn decode_words(&self) -> WorkCompletion {
        // The two layouts, word by word (little-endian: the lower-addressed field is the low
        // half):
        //   kernel: [wr_id] [status | opcode] [vendor_err | byte_len] [ex | qp_num]
        //           [src_qp | wc_flags] [pkey slid sl dlid port reserved]
        //   ours:   [wr_id] [opcode | byte_len] [qp_num | wc_flags] [status | vendor_err]
        //           [imm_data | src_qp] [pkey slid sl dlid port unmatched]
        const _: () = {
            use core::mem::{align_of, offset_of, size_of};
            type K = RawWc;
            type W = WorkCompletion;
            assert!(size_of::<K>() == 48 && size_of::<W>() == 48);
            assert!(offset_of!(K, status) == 8 && offset_of!(K, opcode) == 12);
            assert!(offset_of!(K, vendor_err) == 16 && offset_of!(K, byte_len) == 20);
            assert!(offset_of!(K, ex) == 24 && offset_of!(K, qp_num) == 28);
            assert!(offset_of!(K, src_qp) == 32 && offset_of!(K, wc_flags) == 36);
            assert!(offset_of!(W, wr_id) == 0 && offset_of!(W, opcode) == 8);
            assert!(offset_of!(W, byte_len) == 12 && offset_of!(W, qp_num) == 16);
            assert!(offset_of!(W, wc_flags) == 20 && offset_of!(W, status) == 24);
            assert!(offset_of!(W, vendor_err) == 28 && offset_of!(W, imm_data) == 32);
            assert!(offset_of!(W, src_qp) == 36);
            // The last word is the same in both.
            assert!(offset_of!(K, pkey_index) == 40 && offset_of!(W, pkey_index) == 40);
            assert!(offset_of!(K, slid) == 42 && offset_of!(W, slid) == 42);
            assert!(offset_of!(K, sl) == 44 && offset_of!(W, sl) == 44);
            assert!(offset_of!(K, dlid_path_bits) == 45 && offset_of!(W, dlid_path_bits) == 45);
            assert!(offset_of!(K, port_num) == 46 && offset_of!(W, port_num) == 46);
            assert!(offset_of!(K, reserved) == 47 && offset_of!(W, unmatched) == 47);
            assert!(align_of::<W>() == 8);
        };
        const LO: u64 = 0xffff_ffff;
        let k: [u64; 6] = zerocopy::transmute!(*self);
        let kflags = (k[4] >> 32) as u32;
        let ex = k[3] as u32;
        let imm = if kflags & K_WITH_IMM != 0 {
            u32::from_be(ex)
        } else {
            ex
        };
        let flags = WcFlags::from_kernel(kflags).bits();
        let words = [
            k[0],
            (k[1] >> 32) | (k[2] & !LO),
            (k[3] >> 32) | u64::from(flags) << 32,
            (k[1] & LO) | k[2] << 32,
            u64::from(imm) | k[4] << 32,
            // `reserved`'s bit 0 alone: `unmatched` is a bool.
            k[5] & !(0xfe << 56),
        ];
        let mut wc = core::mem::MaybeUninit::<WorkCompletion>::uninit();
        // SAFETY: `wc` is storage for one WorkCompletion: 48 bytes, 8-aligned (asserted
        // above), written whole; every field of it but `unmatched` accepts any bit pattern
        // (plain integers and raw-number newtypes; WcFlags keeps unknown bits), `unmatched`
        // gets 0 or 1 (the mask above), and
        // the layout above puts each kernel field at its own field's offset.
        unsafe {
            wc.as_mut_ptr().cast::<[u64; 6]>().write(words);
            wc.assume_init()
        }
    }

    internal! {
    /// The raw form of a decoded completion (the inverse of
    /// [`to_work_completion`](Self::to_work_completion)): for providers whose ring format is
    /// not the kernel's, and for `CqOps::poll_raw`'s
    /// default.
    pub fn from_work_completion(wc: &WorkCompletion) -> Self {
        let u = wc.wc_flags.bits();
        // Userspace → kernel numbering: bits 2 and 3 swap (the same swap as from_kernel).
        let k = (u & !0b1100) | (u & 4) << 1 | (u & 8) >> 1;
        RawWc {
            wr_id: wc.wr_id,
            status: wc.status.0,
            opcode: wc.opcode.0,
            vendor_err: wc.vendor_err,
            byte_len: wc.byte_len,
            ex: if k & K_WITH_IMM != 0 {
                wc.imm_data.to_be()
            } else {
                wc.imm_data
            },
            qp_num: wc.qp_num,
            src_qp: wc.src_qp,
            wc_flags: k,
            pkey_index: wc.pkey_index,
            slid: wc.slid,
            sl: wc.sl,
            dlid_path_bits: wc.dlid_path_bits,
            port_num: wc.port_num,
            reserved: wc.unmatched as u8,
        }
    }
    }
}

impl std::fmt::Debug for RawWc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.to_work_completion(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_survive() {
        let s = WcStatus(99);
        assert_eq!(s.name(), None);
        assert_eq!(format!("{s:?}"), "WcStatus(0x63)");
        assert_eq!(
            format!("{}", WcStatus::WR_FLUSH_ERR),
            "Work Request Flushed Error"
        );
        assert!(WcOpcode::RECV_RDMA_WITH_IMM.is_recv());
        assert!(!WcOpcode::RDMA_READ.is_recv());
    }

    #[test]
    fn kernel_flags_convert() {
        assert_eq!(
            WcFlags::from_kernel(1 | 2),
            WcFlags::GRH | WcFlags::WITH_IMM
        );
        assert_eq!(WcFlags::from_kernel(4), WcFlags::WITH_INV);
        assert_eq!(WcFlags::from_kernel(8), WcFlags::IP_CSUM_OK);
        assert_eq!(
            WcFlags::from_kernel(4 | 8 | 1),
            WcFlags::WITH_INV | WcFlags::IP_CSUM_OK | WcFlags::GRH
        );
        assert_eq!(WcFlags::from_kernel(0x40).bits(), 0x40);
    }

    /// `RawWc` round-trips every decoded completion, flags and immediate data included, and
    /// decodes lazily what the kernel wrote.
    #[test]
    fn raw_wc_round_trips() {
        for flags in 0..16u32 {
            let wc = WorkCompletion {
                wr_id: 0x1122_3344_5566_7788,
                opcode: WcOpcode::RECV_RDMA_WITH_IMM,
                byte_len: 64,
                qp_num: 17,
                wc_flags: WcFlags::from_bits_retain(flags | 0x40),
                status: WcStatus(flags),
                vendor_err: 3,
                imm_data: 0xdead_beef,
                src_qp: 18,
                pkey_index: 1,
                slid: 2,
                sl: 3,
                dlid_path_bits: 4,
                port_num: 1,
                unmatched: flags & 1 != 0,
            };
            let raw = RawWc::from_work_completion(&wc);
            assert_eq!(raw.to_work_completion(), wc);
            assert_eq!(raw.wc_flags(), wc.wc_flags);
            assert_eq!(raw.imm(), wc.imm());
            // One union holds both: a completion never has both flags (the raw form keeps
            // the immediate data's wire order there, so the two forms differ only then).
            if flags & 0b1010 != 0b1010 {
                assert_eq!(raw.invalidated_rkey(), wc.invalidated_rkey());
            }
            assert_eq!(
                (raw.wr_id(), raw.status(), raw.is_success()),
                (wc.wr_id, wc.status, flags == 0)
            );
        }
        // What rxe's kernel writes: immediate data big-endian, kernel flag numbering.
        let mut bytes = [0u8; 48];
        bytes[24..28].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        bytes[36..40].copy_from_slice(&2u32.to_ne_bytes());
        let raw = <RawWc as zerocopy::FromBytes>::read_from_bytes(&bytes[..]).unwrap();
        assert_eq!(raw.imm(), Some(0x0102_0304));
        assert_eq!(raw.wc_flags(), WcFlags::WITH_IMM);
    }

    /// The word-wise conversion gives exactly the field-by-field completion for any kernel
    /// completion: every flag combination, immediate or not, all other fields varied.
    #[test]
    #[cfg(target_endian = "little")]
    fn word_conversion_matches_field_conversion() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            // xorshift64: a fixed, reproducible sequence of field values.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = if cfg!(miri) { 64 } else { 20_000 };
        for i in 0..n {
            let r = next();
            let raw = RawWc {
                wr_id: next(),
                status: r as u32,
                opcode: (r >> 32) as u32,
                vendor_err: next() as u32,
                byte_len: next() as u32,
                ex: next() as u32,
                qp_num: next() as u32,
                src_qp: next() as u32,
                // Every combination of the four known bits, plus unknown ones sometimes.
                wc_flags: (i as u32 & 0xf) | if i % 5 == 0 { 0x40 } else { 0 },
                pkey_index: next() as u16,
                slid: next() as u16,
                sl: next() as u8,
                dlid_path_bits: next() as u8,
                port_num: next() as u8,
                reserved: next() as u8,
            };
            assert_eq!(raw.decode_words(), raw.decode_fields(), "{raw:?}");
        }
    }
}
