//! Fuzzes the mlx5 CQE parser — the same `parse_cqe` the CQ poller runs on hardware — and the
//! poller itself over a ring filled with the input.
//!
//! Input: bytes 0..64 or 0..128 are a CQE slot; the byte after it steers the wr_id lookup
//! (even: found, odd: not found); everything is also written into an 8-entry ring in 64-byte
//! chunks and polled.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rverbs_provider::internals::mlx5::{
    parse_cqe, CqBuf, Cqe64, CqeSize, Mlx5Cq, ParseFault, UarPage, WqeRef,
};
use rverbs_uverbs::wc::{WcStatus, WorkCompletion};

fn check(cqe: &Cqe64, wc: &WorkCompletion) {
    assert_eq!(wc.qp_num, cqe.qpn());
    if wc.status == WcStatus::SUCCESS {
        assert_eq!(wc.vendor_err, 0);
    }
    if let Some((fault, _)) = ParseFault::from_vendor_err(wc.vendor_err) {
        assert_eq!(wc.status, WcStatus::GENERAL_ERR);
        assert!(fault.name().is_some(), "unnamed fault {fault:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let slot_len = if data.len() >= 128 { 128 } else { 64 };
    if data.len() >= slot_len {
        let cqe = Cqe64::from_slot(&data[..slot_len]).expect("64 or 128 bytes");
        let found = data.get(slot_len).is_none_or(|b| b & 1 == 0);
        let mut calls = 0;
        let wc = parse_cqe(&cqe, &mut |_w: WqeRef| {
            calls += 1;
            found.then_some(0x1234)
        });
        assert!(calls <= 1);
        check(&cqe, &wc);
    } else {
        assert!(Cqe64::from_slot(data).is_err() || data.len() == 64);
    }

    // The poller over a ring holding the input (lap 0: the owner bit must be 0 to count).
    let buf = CqBuf::new(7, CqeSize::B64).expect("CQ buffer");
    let chunks: Vec<&[u8]> = data.chunks_exact(64).take(8).collect();
    for (i, c) in chunks.iter().enumerate() {
        // SAFETY: slot i < 8 lies in the ring; nothing polls yet.
        unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), buf.ring_ptr().add(i * 64), 64) };
    }
    let mut uar_mem = Box::new([0u64; 8]);
    // SAFETY: the CQ is dropped before uar_mem.
    let uar = unsafe { UarPage::new(uar_mem.as_mut_ptr().cast(), 64) }.expect("uar");
    let mut cq = Mlx5Cq::new(buf, 1, uar, |_w: WqeRef| Some(7)).expect("cq");
    let mut out = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut out);
    assert!(n <= chunks.len());
    for (c, wc) in chunks.iter().zip(&out[..n]) {
        check(&Cqe64::from_slot(c).unwrap(), wc);
    }
    cq.arm(data.first().is_some_and(|b| b & 1 == 1));
    drop(cq);
    drop(uar_mem);
});
