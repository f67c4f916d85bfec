//! Byte-exact mlx5 CQE fixtures, hand-assembled from the public layout, and what rverbs must
//! make of them.
//!
//! Where the expectations come from:
//! - CQE64 field offsets: rdma-core `providers/mlx5/mlx5dv.h` `struct mlx5_cqe64` and
//!   `struct mlx5_err_cqe` (the kernel's `include/linux/mlx5/device.h` has the same layout):
//!   ml_path @17, slid @22 (be16), flags_rqpn @24 (be32), srqn_uidx @32, imm_inval_pkey @36,
//!   byte_cnt @44, timestamp @48 (be64), vendor_err_synd @54, syndrome @55, sop_drop_qpn @56
//!   (be32: WQE opcode 31:24, QPN 23:0), wqe_counter @60 (be16), signature @62, op_own @63
//!   (opcode 7:4, format 3:2, solicited 1, owner 0).
//! - CQE opcodes (`MLX5_CQE_*`), send WQE opcodes (`MLX5_OPCODE_*`), syndromes
//!   (`MLX5_CQE_SYNDROME_*`): mlx5dv.h.
//! - Field semantics: rdma-core `providers/mlx5/cq.c` `handle_good_req()` (requester opcode
//!   and byte_len: READ = byte_cnt, CMP_SWP/FETCH_ADD = 8, WITH_IMM for *_IMM),
//!   `handle_responder()` (byte_len, opcode, imm/inval rkey, src_qp = flags_rqpn & 0xffffff,
//!   sl = flags_rqpn >> 24 & 0xf, GRH iff flags_rqpn >> 28 & 3, slid, dlid_path_bits =
//!   ml_path & 0x7f, pkey_index = imm_inval_pkey & 0xffff), `mlx5_handle_error_cqe()`
//!   (syndrome → ibv_wc_status; vendor_err = vendor_err_synd).
//! - rverbs choices (docs/mlx5.md): imm_data in host order; requester byte_len 0 where
//!   libmlx5 leaves it unset; unknown/unsupported CQEs → GENERAL_ERR with a ParseFault in
//!   vendor_err.

use std::collections::HashMap;

use crate::mlx5::cqe::CqeSyndrome;
use crate::mlx5::{
    parse_cqe, CqBuf, Cqe64, CqeSize, Mlx5Cq, ParseFault, UarPage, WorkQueue, WqeRef, WrIdLookup,
};
use rverbs_uverbs::{RawWc, WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// The QP side's table: (qpn, queue, wqe_counter) → wr_id, counting lookups.
#[derive(Default)]
struct Table {
    map: HashMap<(u32, WorkQueue, u16), u64>,
    calls: usize,
}

impl Table {
    fn with(entries: &[(u32, WorkQueue, u16, u64)]) -> Self {
        let mut t = Table::default();
        for &(q, w, c, id) in entries {
            t.map.insert((q, w, c), id);
        }
        t
    }
}

impl WrIdLookup for Table {
    fn wr_id(&mut self, w: WqeRef) -> Option<u64> {
        self.calls += 1;
        self.map.get(&(w.qpn, w.queue, w.wqe_counter)).copied()
    }
}

fn table() -> Table {
    use WorkQueue::*;
    Table::with(&[
        (0x123, Send, 5, 0x5e4d_0005),
        (0x123, Send, 6, 0x5e4d_0006),
        (0x123, Send, 7, 0x5e4d_0007),
        (0x123, Send, 8, 0x5e4d_0008),
        (0x123, Send, 9, 0x5e4d_0009),
        (0x123, Send, 10, 0x5e4d_000a),
        (0x123, Send, 11, 0x5e4d_000b),
        (0x123, Send, 12, 0x5e4d_000c),
        (0x456, Recv, 0, 0x7ecf_0000),
        (0x456, Recv, 1, 0x7ecf_0001),
    ])
}

fn parse(b: &[u8; 64]) -> WorkCompletion {
    parse_cqe(&Cqe64::new(*b), &mut table())
}

// ---------------------------------------------------------------------------------------
// Requester completions. Rows are 16 bytes; only non-zero fields are commented.

/// REQ, SEND (WQE opcode 0x0a), QPN 0x000123, wqe_counter 5.
const REQ_SEND: [u8; 64] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 0, //
    0x0a, 0x00, 0x01, 0x23, // sop_drop_qpn @56: opcode SEND, QPN 0x123
    0x00, 0x05, // wqe_counter @60 = 5
    0x00, // signature
    0x00, // op_own: opcode REQ (0), format 0, owner 0
];

#[test]
fn mlx5_req_send() {
    let wc = parse(&REQ_SEND);
    assert_eq!(
        wc,
        WorkCompletion {
            wr_id: 0x5e4d_0005,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::SEND,
            qp_num: 0x123,
            ..Default::default()
        }
    );
}

/// Same CQE with another send WQE opcode, wqe_counter and byte_cnt.
fn req(wqe_opcode: u8, counter: u16, byte_cnt: u32) -> [u8; 64] {
    let mut b = REQ_SEND;
    b[56] = wqe_opcode;
    b[60..62].copy_from_slice(&counter.to_be_bytes());
    b[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
    b
}

#[test]
fn mlx5_req_send_imm_write_write_imm() {
    // SEND_IMM 0x0b → SEND + WITH_IMM (handle_good_req); no immediate on the requester side.
    let wc = parse(&req(0x0b, 6, 0));
    assert_eq!(
        (wc.opcode, wc.wc_flags, wc.imm_data, wc.wr_id),
        (WcOpcode::SEND, WcFlags::WITH_IMM, 0, 0x5e4d_0006)
    );
    // SEND_INVAL 0x01 → SEND.
    let wc = parse(&req(0x01, 6, 0));
    assert_eq!((wc.opcode, wc.wc_flags), (WcOpcode::SEND, WcFlags::empty()));
    // RDMA_WRITE 0x08 → RDMA_WRITE; byte_len 0 (libmlx5 leaves it unset; rverbs says 0).
    let wc = parse(&req(0x08, 7, 0x1234));
    assert_eq!(
        (wc.opcode, wc.wc_flags, wc.byte_len, wc.wr_id),
        (WcOpcode::RDMA_WRITE, WcFlags::empty(), 0, 0x5e4d_0007)
    );
    // RDMA_WRITE_IMM 0x09 → RDMA_WRITE + WITH_IMM.
    let wc = parse(&req(0x09, 8, 0));
    assert_eq!(
        (wc.opcode, wc.wc_flags, wc.wr_id),
        (WcOpcode::RDMA_WRITE, WcFlags::WITH_IMM, 0x5e4d_0008)
    );
    assert!(wc.status.is_success());
}

/// REQ, RDMA_READ (0x10), wqe_counter 9, byte_cnt 0x1000: byte_len = byte_cnt.
const REQ_READ: [u8; 64] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0x00, 0x00, 0x10, 0x00, // byte_cnt @44 = 4096
    0, 0, 0, 0, 0, 0, 0, 0, // timestamp
    0x10, 0x00, 0x01, 0x23, // sop_drop_qpn: RDMA_READ, QPN 0x123
    0x00, 0x09, 0x00, 0x00, // wqe_counter 9, signature, op_own REQ
];

#[test]
fn mlx5_req_read_and_atomics() {
    let wc = parse(&REQ_READ);
    assert_eq!(
        (wc.opcode, wc.byte_len, wc.wr_id, wc.status),
        (WcOpcode::RDMA_READ, 4096, 0x5e4d_0009, WcStatus::SUCCESS)
    );
    // ATOMIC_CS 0x11 / ATOMIC_FA 0x12: byte_len is 8 whatever byte_cnt says.
    let wc = parse(&req(0x11, 10, 0xdead_beef));
    assert_eq!(
        (wc.opcode, wc.byte_len, wc.wr_id),
        (WcOpcode::COMP_SWAP, 8, 0x5e4d_000a)
    );
    let wc = parse(&req(0x12, 11, 0));
    assert_eq!(
        (wc.opcode, wc.byte_len, wc.wr_id),
        (WcOpcode::FETCH_ADD, 8, 0x5e4d_000b)
    );
}

#[test]
fn mlx5_req_unknown_wqe_opcode() {
    // UMR 0x25: rverbs posts none; explicit error, wr_id still resolved.
    let wc = parse(&req(0x25, 12, 0));
    assert_eq!(wc.status, WcStatus::GENERAL_ERR);
    assert_eq!(wc.vendor_err, 0x425);
    assert_eq!(
        ParseFault::from_vendor_err(wc.vendor_err),
        Some((ParseFault::UNKNOWN_WQE_OPCODE, 0x25))
    );
    assert_eq!(wc.wr_id, 0x5e4d_000c);
}

// ---------------------------------------------------------------------------------------
// Responder completions.

/// RESP_SEND (op_own 0x20), QPN 0x000456, byte_cnt 512, remote QPN 0x000789, SL 5, GRH
/// (flags_rqpn 31:28 = 2), SLID 0x0011, ml_path 0x83 (path bits 3), P_Key field 0xffff.
const RESP_SEND: [u8; 64] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0x83, // ml_path @17
    0, 0, 0, 0, // rsvd
    0x00, 0x11, // slid @22
    0x25, 0x00, 0x07, 0x89, // flags_rqpn @24: GRH type 2, SL 5, remote QPN 0x789
    0, 0, 0, 0, // hds_ip_ext, l4_hdr_type_etc, vlan_info
    0x00, 0x00, 0x00, 0x00, // srqn_uidx @32
    0x00, 0x00, 0xff, 0xff, // imm_inval_pkey @36: P_Key 0xffff
    0, 0, 0, 0, // app, app_op, app_info
    0x00, 0x00, 0x02, 0x00, // byte_cnt @44 = 512
    0, 0, 0, 0, 0, 0, 0, 0, // timestamp
    0x00, 0x00, 0x04, 0x56, // sop_drop_qpn: QPN 0x456
    0x00, 0x00, // wqe_counter 0
    0x00, // signature
    0x20, // op_own: RESP_SEND, owner 0
];

#[test]
fn mlx5_resp_send_with_grh() {
    let wc = parse(&RESP_SEND);
    assert_eq!(
        wc,
        WorkCompletion {
            wr_id: 0x7ecf_0000,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV,
            vendor_err: 0,
            byte_len: 512,
            imm_data: 0,
            qp_num: 0x456,
            src_qp: 0x789,
            wc_flags: WcFlags::GRH,
            pkey_index: 0xffff,
            slid: 0x11,
            sl: 5,
            dlid_path_bits: 3,
            port_num: 0,
            unmatched: false,
        }
    );
}

fn resp(op_own: u8, imm_inval_pkey: u32, byte_cnt: u32) -> [u8; 64] {
    let mut b = RESP_SEND;
    b[63] = op_own;
    b[36..40].copy_from_slice(&imm_inval_pkey.to_be_bytes());
    b[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
    b[24] = 0; // no GRH, SL 0
    b
}

#[test]
fn mlx5_resp_imm_inv_write_imm() {
    // RESP_SEND_IMM (3): imm in host order; pkey_index = low 16 bits as libmlx5 reports.
    let wc = parse(&resp(0x30, 0x1234_5678, 16));
    assert_eq!(
        (wc.opcode, wc.wc_flags, wc.imm_data, wc.imm(), wc.byte_len),
        (
            WcOpcode::RECV,
            WcFlags::WITH_IMM,
            0x1234_5678,
            Some(0x1234_5678),
            16
        )
    );
    assert_eq!((wc.pkey_index, wc.sl, wc.src_qp), (0x5678, 0, 0x789));
    // RESP_SEND_INV (4): the invalidated rkey, host order, WITH_INV.
    let wc = parse(&resp(0x40, 0xabcd_ef01, 0));
    assert_eq!(
        (wc.opcode, wc.wc_flags, wc.invalidated_rkey(), wc.imm()),
        (WcOpcode::RECV, WcFlags::WITH_INV, Some(0xabcd_ef01), None)
    );
    // RESP_WR_IMM (1): RECV_RDMA_WITH_IMM.
    let wc = parse(&resp(0x10, 0xcafe_f00d, 0x1_0000));
    assert_eq!(
        (wc.opcode, wc.wc_flags, wc.imm_data, wc.byte_len),
        (
            WcOpcode::RECV_RDMA_WITH_IMM,
            WcFlags::WITH_IMM,
            0xcafe_f00d,
            0x1_0000
        )
    );
}

#[test]
fn mlx5_owner_and_solicited_bits_do_not_change_the_parse() {
    let mut b = RESP_SEND;
    b[63] = 0x23; // RESP_SEND, solicited, owner 1
    assert_eq!(parse(&b), parse(&RESP_SEND));
    assert!(Cqe64::new(b).solicited() && Cqe64::new(b).owner());
}

// ---------------------------------------------------------------------------------------
// Error completions.

/// REQ_ERR (op_own 0xd0): syndrome 0x05 WR_FLUSH_ERR, vendor syndrome 0xf9, SEND, QPN 0x123,
/// wqe_counter 7.
const REQ_ERR_FLUSH: [u8; 64] = [
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0,    //
    0xf9, // vendor_err_synd @54
    0x05, // syndrome @55
    0x0a, 0x00, 0x01, 0x23, // s_wqe_opcode_qpn @56
    0x00, 0x07, 0x00, //
    0xd0, // op_own: REQ_ERR
];

#[test]
fn mlx5_req_err_flush() {
    let wc = parse(&REQ_ERR_FLUSH);
    assert_eq!(
        wc,
        WorkCompletion {
            wr_id: 0x5e4d_0007,
            status: WcStatus::WR_FLUSH_ERR,
            opcode: WcOpcode::SEND, // a hint only: undefined for errors
            vendor_err: 0xf9,
            qp_num: 0x123,
            ..Default::default()
        }
    );
}

#[test]
fn mlx5_resp_err_and_syndrome_table() {
    // RESP_ERR (0xe0), LOCAL_PROT_ERR (0x04), vendor 0x88, on QPN 0x456 → recv wr_id.
    let mut b = RESP_SEND;
    b[63] = 0xe0;
    b[55] = 0x04;
    b[54] = 0x88;
    let wc = parse(&b);
    assert_eq!(
        (wc.status, wc.vendor_err, wc.opcode, wc.wr_id, wc.byte_len),
        (WcStatus::LOC_PROT_ERR, 0x88, WcOpcode::RECV, 0x7ecf_0000, 0)
    );
    // Every syndrome of mlx5dv.h, and unknown ones (→ GENERAL_ERR, vendor byte kept).
    let table = [
        (0x01, WcStatus::LOC_LEN_ERR),
        (0x02, WcStatus::LOC_QP_OP_ERR),
        (0x04, WcStatus::LOC_PROT_ERR),
        (0x05, WcStatus::WR_FLUSH_ERR),
        (0x06, WcStatus::MW_BIND_ERR),
        (0x10, WcStatus::BAD_RESP_ERR),
        (0x11, WcStatus::LOC_ACCESS_ERR),
        (0x12, WcStatus::REM_INV_REQ_ERR),
        (0x13, WcStatus::REM_ACCESS_ERR),
        (0x14, WcStatus::REM_OP_ERR),
        (0x15, WcStatus::RETRY_EXC_ERR),
        (0x16, WcStatus::RNR_RETRY_EXC_ERR),
        (0x22, WcStatus::REM_ABORT_ERR),
        (0x00, WcStatus::GENERAL_ERR),
        (0x03, WcStatus::GENERAL_ERR),
        (0x99, WcStatus::GENERAL_ERR),
        (0xff, WcStatus::GENERAL_ERR),
    ];
    for (synd, status) in table {
        let mut b = REQ_ERR_FLUSH;
        b[55] = synd;
        let wc = parse(&b);
        assert_eq!(wc.status, status, "syndrome {synd:#x}");
        assert_eq!(wc.vendor_err, 0xf9, "syndrome {synd:#x}");
        assert_eq!(CqeSyndrome(synd).status(), status);
    }
    assert_eq!(
        format!("{}", CqeSyndrome(0x99)),
        "unknown CqeSyndrome 153 (0x99)"
    );
}

// ---------------------------------------------------------------------------------------
// Bad input: explicit completion values, no lookup where no WQE can be named, no panic.

#[test]
fn mlx5_unknown_opcode_resize_corrupt_length_format_and_missing_wqe() {
    let mut t = table();
    // CQE opcode 7 (unknown): GENERAL_ERR, vendor_err 0x100 | op_own, no lookup.
    let mut b = REQ_SEND;
    b[63] = 0x70;
    let wc = parse_cqe(&Cqe64::new(b), &mut t);
    assert_eq!(
        (wc.status, wc.vendor_err, wc.wr_id, wc.qp_num),
        (WcStatus::GENERAL_ERR, 0x170, 0, 0x123)
    );
    // NO_PACKET (6) and SIG_ERR (12) are known but unsupported: same treatment.
    b[63] = 0x60;
    assert_eq!(parse_cqe(&Cqe64::new(b), &mut t).vendor_err, 0x160);
    b[63] = 0xc0;
    assert_eq!(parse_cqe(&Cqe64::new(b), &mut t).vendor_err, 0x1c0);
    // RESIZE_CQ (5): rverbs never resizes; explicit fault, no lookup.
    b[63] = 0x51;
    let wc = parse_cqe(&Cqe64::new(b), &mut t);
    assert_eq!((wc.status, wc.vendor_err), (WcStatus::GENERAL_ERR, 0x251));
    assert_eq!(t.calls, 0);
    // Corrupt length: a receive of more than 2^31 bytes.
    let wc = parse_cqe(&Cqe64::new(resp(0x20, 0, 0x8000_0001)), &mut t);
    assert_eq!(
        (wc.status, wc.vendor_err, wc.byte_len, wc.wr_id),
        (WcStatus::GENERAL_ERR, 0x600, 0x8000_0001, 0x7ecf_0000)
    );
    let mut r = REQ_READ;
    r[44] = 0xff;
    assert_eq!(parse_cqe(&Cqe64::new(r), &mut t).vendor_err, 0x600);
    // Data scattered into the CQE (format 1 = MLX5_INLINE_SCATTER_32): not enabled by rverbs.
    let wc = parse_cqe(&Cqe64::new(resp(0x24, 0, 4)), &mut t);
    assert_eq!((wc.status, wc.vendor_err), (WcStatus::GENERAL_ERR, 0x324));
    // Compressed CQE format (3).
    let wc = parse_cqe(&Cqe64::new(resp(0x2c, 0, 4)), &mut t);
    assert_eq!(wc.vendor_err, 0x32c);
    // The lookup knows no such WQE.
    let wc = parse_cqe(&Cqe64::new(req(0x0a, 99, 0)), &mut t);
    assert_eq!(
        (wc.status, wc.vendor_err, wc.wr_id),
        (WcStatus::GENERAL_ERR, 0x500, 0)
    );
    // Slots that are neither 64 nor 128 bytes.
    assert!(Cqe64::from_slot(&[0u8; 100]).is_err());
}

/// Issue 31 (a): a completion the parser makes up (no request looked up, or the lookup found
/// none) is `unmatched`, so that no ledger counts it; a fault found after the lookup matched a
/// request (that request is over) stays matched, as do the device's own completions.
#[test]
fn mlx5_made_up_completions_are_unmatched() {
    let mut t = table();
    let made_up = |b: [u8; 64], t: &mut dyn WrIdLookup| {
        let wc = parse_cqe(&Cqe64::new(b), t);
        let raw = RawWc::from_work_completion(&wc);
        assert_eq!(raw.is_unmatched(), wc.unmatched, "{wc:?}");
        assert_eq!(raw.to_work_completion().unmatched, wc.unmatched, "{wc:?}");
        (wc.status, wc.unmatched)
    };
    let mut b = REQ_SEND;
    for op_own in [0x70, 0x60, 0xc0, 0x51] {
        b[63] = op_own;
        assert_eq!(
            made_up(b, &mut t),
            (WcStatus::GENERAL_ERR, true),
            "{op_own:#x}"
        );
    }
    // The lookup knows no such WQE (an unknown QPN, nothing outstanding).
    assert_eq!(
        made_up(req(0x0a, 99, 0), &mut t),
        (WcStatus::GENERAL_ERR, true)
    );
    assert_eq!(
        made_up(resp(0x20, 0, 4), &mut |_| None::<u64>),
        (WcStatus::GENERAL_ERR, true)
    );
    assert_eq!(
        made_up(resp(0x2c, 0, 4), &mut |_| None::<u64>),
        (WcStatus::GENERAL_ERR, true)
    );
    // Matched: a fault after the lookup found the request, and the device's verdicts.
    assert_eq!(
        made_up(resp(0x20, 0, 0x8000_0001), &mut t),
        (WcStatus::GENERAL_ERR, false)
    );
    assert_eq!(
        made_up(resp(0x24, 0, 4), &mut t),
        (WcStatus::GENERAL_ERR, false)
    );
    assert_eq!(made_up(RESP_SEND, &mut t), (WcStatus::SUCCESS, false));
    assert_eq!(made_up(REQ_SEND, &mut t), (WcStatus::SUCCESS, false));
}

#[test]
fn mlx5_cqe128_carries_the_cqe64_in_its_second_half() {
    let mut slot = [0xa5u8; 128];
    slot[64..].copy_from_slice(&RESP_SEND);
    let c = Cqe64::from_slot(&slot).unwrap();
    assert_eq!(parse_cqe(&c, &mut table()), parse(&RESP_SEND));
}

// ---------------------------------------------------------------------------------------
// The poller uses this very parser: fixtures written into a real ring come out the same.

#[test]
fn mlx5_poller_yields_the_fixture_parses() {
    let fixtures = [
        REQ_SEND,
        REQ_READ,
        RESP_SEND,
        REQ_ERR_FLUSH,
        resp(0x30, 0x1234_5678, 16),
    ];
    for size in [CqeSize::B64, CqeSize::B128] {
        let mut uar_mem = Box::new([0u64; 8]);
        // SAFETY: the CQ does not outlive uar_mem (dropped at the end of this iteration).
        let uar = unsafe { UarPage::new(uar_mem.as_mut_ptr().cast(), 64) }.unwrap();
        let buf = CqBuf::new(7, size).unwrap();
        let slot = size.bytes();
        for (i, f) in fixtures.iter().enumerate() {
            // SAFETY: slot i < ncqe lies in the ring; the CQ is not polling yet. Lap 0: the
            // owner bits of the fixtures are 0, as the device writes them on the first lap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    f.as_ptr(),
                    buf.ring_ptr().add(i * slot + slot - 64),
                    64,
                )
            };
        }
        let mut cq = Mlx5Cq::new(buf, 1, uar, table()).unwrap();
        let mut out = [WorkCompletion::default(); 8];
        let n = cq.poll(&mut out);
        assert_eq!(n, fixtures.len());
        for (f, wc) in fixtures.iter().zip(&out) {
            assert_eq!(*wc, parse(f));
        }
        // SAFETY: the doorbell record, read after the poll on this thread.
        let ci = unsafe { u32::from_be(cq.buf().dbrec_ptr().read()) };
        assert_eq!(ci, fixtures.len() as u32);
        drop(cq);
        drop(uar_mem);
    }
}
