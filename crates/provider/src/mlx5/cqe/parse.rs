//! The translation of a CQE64 into a [`WorkCompletion`]: the fast paths of a plain send and
//! receive completion, the general parser behind them, and the `wr_id` lookup they ask.

use rverbs_uverbs::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

use super::*;

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
pub(super) struct ReqOp {
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
pub(super) const fn req_opcode(op: WqeOpcode) -> Option<ReqOp> {
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
pub(super) fn wqe_ref<S: CqeSource>(cqe: S, queue: WorkQueue) -> WqeRef {
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
pub(super) enum Looked<'a, L: ?Sized> {
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
pub(super) fn parse_general<L: WrIdLookup + ?Sized>(
    cqe: &Cqe64,
    looked: Looked<'_, L>,
) -> WorkCompletion {
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
