//! Unit tests of the CQE64 view and its parser.

use rverbs_uverbs::WorkCompletion;

use super::parse::{parse_general, req_opcode, Looked};
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
