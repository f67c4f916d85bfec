//! The mlx5 poll path allocates nothing: not for plain completions, not for the ones that go
//! through the general (error, resize, unknown) path, not through the iterator, not to arm.

use super::allocs::allocs;

use crate::mlx5::{CqBuf, CqeSize, Mlx5Cq, UarPage, WqeRef};
use rverbs_uverbs::WorkCompletion;

/// CQE `i` of lap 0: a mix of plain and general-path kinds.
fn cqe(i: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[56..60].copy_from_slice(&((0x0a_u32 << 24) | 0x10).to_be_bytes());
    b[60..62].copy_from_slice(&(i as u16).to_be_bytes());
    b[63] = match i % 6 {
        0 => 0x00, // REQ
        1 => 0x30, // RESP_SEND_IMM
        2 => 0xd0, // REQ_ERR
        3 => 0x50, // RESIZE
        4 => 0x70, // unknown opcode
        _ => 0x24, // RESP_SEND with inline scatter
    };
    b
}

#[test]
fn mlx5_poll_iter_and_arm_do_not_allocate() {
    let mut uar_mem = Box::new([0u64; 8]);
    // SAFETY: the CQ is dropped before uar_mem.
    let uar = unsafe { UarPage::new(uar_mem.as_mut_ptr().cast(), 64) }.unwrap();
    let buf = CqBuf::new(63, CqeSize::B64).unwrap();
    for i in 0..48u32 {
        // SAFETY: slot i < 64 is inside the ring; nothing polls yet (lap 0, owner bit 0).
        unsafe {
            std::ptr::copy_nonoverlapping(cqe(i).as_ptr(), buf.ring_ptr().add(i as usize * 64), 64)
        };
    }
    // A lookup that misses sometimes, so the NO_WR_ID path runs too.
    let lookup = |w: WqeRef| (w.wqe_counter % 7 != 6).then_some(w.wqe_counter as u64);
    let mut cq = Mlx5Cq::new(buf, 3, uar, lookup).unwrap();
    let mut out = [WorkCompletion::default(); 16];

    let before = allocs();
    let mut got = cq.poll(&mut out);
    got += cq.poll(&mut out);
    got += cq.iter().count();
    cq.arm(true);
    cq.event_received();
    cq.arm(false);
    let after = allocs();

    assert_eq!(got, 48);
    assert_eq!(after - before, 0, "the poll path allocated");
    drop(cq);
    drop(uar_mem);
}
