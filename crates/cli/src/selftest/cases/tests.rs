//! Host unit tests of the cases' completion checks and helpers (no device).

use super::*;

fn wc(wr_id: u64, opcode: WcOpcode, status: WcStatus) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        opcode,
        status,
        vendor_err: 0x32,
        ..Default::default()
    }
}

#[test]
fn a_completion_that_is_not_the_expected_one_says_what_it_was() {
    let ok = wc(1, WcOpcode::SEND, WcStatus::SUCCESS);
    assert_eq!(check_wc(&ok, 1, WcOpcode::SEND, "the SEND"), Ok(()));
    let e = check_wc(&ok, 2, WcOpcode::SEND, "the SEND").unwrap_err();
    assert_eq!(
        e,
        "the SEND: completion of wr_id 1 opcode SEND, expected wr_id 2 opcode SEND"
    );
    let e = check_wc(&ok, 1, WcOpcode::RDMA_READ, "the READ").unwrap_err();
    assert!(e.ends_with("expected wr_id 1 opcode RDMA_READ"), "{e}");
    let bad = wc(1, WcOpcode::SEND, WcStatus::REM_ACCESS_ERR);
    assert_eq!(
        check_wc(&bad, 1, WcOpcode::SEND, "the SEND").unwrap_err(),
        "the SEND: completion status remote access error (10), vendor_err 0x32"
    );
}

#[test]
fn bytes_that_differ_are_located() {
    assert_eq!(same_bytes(b"abc", b"abc", "x"), Ok(()));
    assert_eq!(
        same_bytes(b"abd", b"abc", "received").unwrap_err(),
        "received: byte 2 is 0x64, expected 0x63"
    );
    assert_eq!(
        same_bytes(b"ab", b"abc", "received").unwrap_err(),
        "received: 2 bytes, expected 3"
    );
}

#[test]
fn patterns_differ_by_seed() {
    assert_ne!(pattern(1, 64), pattern(2, 64));
    assert_eq!(pattern(1, 300).len(), 300);
    // Not periodic at 256: a misplaced page-sized block shows.
    let p = pattern(3, 512);
    assert_ne!(p[..256], p[256..]);
}
