//! The CQ ring: polling, a simulated device thread, the clean of a QP moved to RESET (also
//! under Miri).

#![allow(unsafe_code)]

use super::*;
use crate::mlx5::abi::{MLX5_CQ_DOORBELL, MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX};
use crate::mlx5::cqe::WqeRef;
use rverbs_uverbs::{WcOpcode, WcStatus};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A device's view of the ring: writes entries with the owner-bit protocol.
struct Dev {
    ring: *mut u8,
    dbrec: *mut u32,
    ncqe: u32,
    slot: usize,
    pi: u32,
}
// SAFETY: test-only; the pointers stay valid while the CQ lives (joined before drop).
unsafe impl Send for Dev {}

impl Dev {
    fn of<L>(cq: &Mlx5Cq<L>) -> Dev {
        Dev {
            ring: cq.buf().ring_ptr(),
            dbrec: cq.buf().dbrec_ptr(),
            ncqe: cq.buf().ncqe(),
            slot: cq.buf().cqe_size().bytes(),
            pi: 0,
        }
    }
    /// Consumer index the device reads from the doorbell record.
    fn ci(&self) -> u32 {
        // SAFETY: dbrec is inside the live CQ mapping.
        let v = unsafe { AtomicU32::from_ptr(self.dbrec) }.load(Ordering::Acquire);
        u32::from_be(v)
    }
    fn has_room(&self) -> bool {
        (self.pi.wrapping_sub(self.ci()) & MLX5_CQ_CI_MASK) < self.ncqe
    }
    /// Writes `body` (op_own's opcode taken from body[63]) as entry `pi`.
    fn push(&mut self, body: [u8; 64]) {
        assert!(
            self.has_room(),
            "device would overwrite an unconsumed entry"
        );
        let idx = (self.pi & (self.ncqe - 1)) as usize;
        let owner = (self.pi & self.ncqe != 0) as u8;
        // SAFETY: the slot is inside the ring; the consumer released it (has_room) and
        // reads only its op_own byte (atomically) until we release it below.
        unsafe {
            let cqe = self.ring.add(idx * self.slot + self.slot - 64);
            ptr::copy_nonoverlapping(body.as_ptr(), cqe, 63);
            AtomicU8::from_ptr(cqe.add(63)).store((body[63] & !1) | owner, Ordering::Release);
        }
        self.pi = self.pi.wrapping_add(1);
    }
}

fn uar_mem() -> (*mut u64, UarPage) {
    let p = Box::into_raw(Box::new([0u64; 8])).cast::<u64>();
    // SAFETY: 64 bytes of test memory, reached only through raw pointers, freed by
    // `free_uar` after the CQ is gone.
    let uar = unsafe { UarPage::new(p.cast(), 64) }.unwrap();
    (p, uar)
}
fn free_uar(p: *mut u64) {
    // SAFETY: made by Box::into_raw in uar_mem; no CQ uses it any more.
    drop(unsafe { Box::from_raw(p.cast::<[u64; 8]>()) });
}

/// A requester SEND CQE for (qpn, wqe_counter).
fn send_cqe(qpn: u32, ctr: u16) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[56..60].copy_from_slice(&((0x0a << 24) | qpn).to_be_bytes());
    b[60..62].copy_from_slice(&ctr.to_be_bytes());
    b[63] = CqeOpcode::REQ.0 << 4;
    b
}

fn by_counter(w: WqeRef) -> Option<u64> {
    Some(((w.qpn as u64) << 16) | w.wqe_counter as u64)
}
type Lk = fn(WqeRef) -> Option<u64>;

fn new_cq(cqe: u32, size: CqeSize) -> (Mlx5Cq<Lk>, *mut u64) {
    let (p, uar) = uar_mem();
    let buf = CqBuf::new(cqe, size).unwrap();
    (Mlx5Cq::new(buf, 0x42, uar, by_counter as Lk).unwrap(), p)
}

#[test]
fn mlx5_ring_entries_rounding() {
    assert_eq!(ring_entries(1).unwrap(), 2);
    assert_eq!(ring_entries(2).unwrap(), 4);
    assert_eq!(ring_entries(3).unwrap(), 4);
    assert_eq!(ring_entries(4).unwrap(), 8);
    assert_eq!(ring_entries(255).unwrap(), 256);
    assert_eq!(ring_entries((1 << 24) - 1).unwrap(), 1 << 24);
    for bad in [0, 1 << 24, u32::MAX] {
        let e = ring_entries(bad).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {e}");
    }
}

#[test]
fn mlx5_buffer_init_and_create_udata() {
    for size in [CqeSize::B64, CqeSize::B128] {
        let b = CqBuf::new(5, size).unwrap();
        assert_eq!(b.ncqe(), 8);
        assert_eq!(b.kernel_cqe(), 7);
        let page = rustix::param::page_size() as u64;
        assert_eq!(b.buf_addr() % page, 0);
        assert_eq!(b.db_addr() % page, 0);
        assert!(b.db_addr() >= b.buf_addr() + 8 * size.bytes() as u64);
        for i in 0..8 * size.bytes() {
            // SAFETY: inside the ring; single-threaded.
            let v = unsafe { b.ring_ptr().add(i).read() };
            let want = if i % size.bytes() == size.bytes() - 1 {
                0xf0
            } else {
                0
            };
            assert_eq!(v, want, "byte {i} of a {size:?} ring");
        }
        // SAFETY: the two doorbell words; single-threaded.
        unsafe {
            assert_eq!(b.dbrec_ptr().read(), 0);
            assert_eq!(b.dbrec_ptr().add(1).read(), 0);
        }
        let u = b.create_cq_udata(None);
        assert_eq!(u.buf_addr, b.buf_addr());
        assert_eq!(u.db_addr, b.db_addr());
        assert_eq!(u.cqe_size, size.bytes() as u32);
        assert_eq!((u.cqe_comp_en, u.flags, u.uar_page_index), (0, 0, 0));
        let u = b.create_cq_udata(Some(9));
        assert_eq!(
            (u.flags, u.uar_page_index),
            (MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX, 9)
        );
    }
}

#[test]
fn mlx5_create_cq_resp() {
    let mut r = [0u8; 8];
    r[..4].copy_from_slice(&0x12_3456u32.to_ne_bytes());
    assert_eq!(parse_create_cq_resp(&r).unwrap(), 0x12_3456);
    assert_eq!(parse_create_cq_resp(&0x77u32.to_ne_bytes()).unwrap(), 0x77);
    let e = parse_create_cq_resp(&[1, 2, 3]).unwrap_err();
    assert!(e.to_string().contains("3 bytes"), "{e}");
    assert!(parse_create_cq_resp(&0x0100_0000u32.to_ne_bytes()).is_err());
}

#[test]
fn mlx5_poll_batches_and_publishes_ci_once() {
    for size in [CqeSize::B64, CqeSize::B128] {
        let (mut cq, p) = new_cq(3, size); // ncqe 4
        let mut dev = Dev::of(&cq);
        let mut out = [WorkCompletion::default(); 3];
        assert_eq!(cq.poll(&mut out), 0);
        assert_eq!(dev.ci(), 0);
        for lap in 0..3u16 {
            for k in 0..4u16 {
                dev.push(send_cqe(7, lap * 4 + k));
            }
            assert!(!dev.has_room());
            assert_eq!(cq.poll(&mut out), 3);
            assert_eq!(dev.ci(), lap as u32 * 4 + 3);
            for (k, wc) in out.iter().enumerate() {
                assert_eq!(wc.wr_id, (7 << 16) | (lap as u64 * 4 + k as u64));
                assert_eq!(wc.status, WcStatus::SUCCESS);
                assert_eq!(wc.opcode, WcOpcode::SEND);
            }
            assert_eq!(cq.poll(&mut out), 1);
            assert_eq!(out[0].wr_id, (7 << 16) | (lap as u64 * 4 + 3));
            assert_eq!(cq.poll(&mut out), 0, "stale entries of the previous lap");
            assert_eq!(dev.ci(), (lap as u32 + 1) * 4);
        }
        drop(cq);
        free_uar(p);
    }
}

/// An mlx5 CQ behind the core's seam, as the mlx5 driver puts it.
#[derive(Debug)]
struct Ops(Mlx5Cq<Lk>);
impl rverbs_uverbs::driver::CqOps for Ops {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.0.poll(out)
    }
    fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        self.0.poll_raw(out)
    }
}

/// `CqView` over the mlx5 fixture ring (the seam's `poll_raw`): batches of the slots'
/// length, the consumer index published per batch, fields equal to `poll`'s, iteration
/// across batches and laps.
#[test]
fn mlx5_cq_view_batches_and_decodes() {
    use rverbs_uverbs::cq::CqView;
    let (cq, p) = new_cq(3, CqeSize::B64); // ncqe 4
    let mut dev = Dev::of(&cq);
    let mut ops = Ops(cq);
    let mut slots = [RawWc::default(); 3];
    for lap in 0..3u16 {
        for k in 0..4u16 {
            dev.push(send_cqe(9, lap * 4 + k));
        }
        let mut view = CqView::from_ops(&mut ops, &mut slots);
        assert_eq!(view.len(), 3);
        assert_eq!(
            dev.ci(),
            lap as u32 * 4 + 3,
            "first batch published when copied"
        );
        for (k, w) in view.completions().iter().enumerate() {
            assert_eq!(w.wr_id(), (9 << 16) | (lap as u64 * 4 + k as u64));
            assert!(w.is_success());
            assert_eq!(w.opcode(), WcOpcode::SEND);
            assert_eq!(w.imm(), None);
        }
        let ids: Vec<u64> = view.by_ref().map(|w| w.wr_id() & 0xffff).collect();
        assert_eq!(
            ids,
            (lap as u64 * 4..lap as u64 * 4 + 4).collect::<Vec<_>>()
        );
        assert_eq!(dev.ci(), (lap as u32 + 1) * 4);
        assert_eq!(view.next_batch(), 0);
    }
    drop(ops);
    free_uar(p);
}

#[test]
fn mlx5_owner_bit_and_invalid_opcode_gate_ownership() {
    let (mut cq, p) = new_cq(1, CqeSize::B64); // ncqe 2
    let ring = cq.buf().ring_ptr();
    let mut out = [WorkCompletion::default(); 2];
    // A valid opcode with the owner bit of the *next* lap is not ours yet.
    let mut b = send_cqe(1, 0);
    b[63] |= 1;
    // SAFETY: single-threaded writes into slot 0.
    unsafe { ptr::copy_nonoverlapping(b.as_ptr(), ring, 64) };
    assert_eq!(cq.poll(&mut out), 0);
    // INVALID opcode with the right owner bit is not ours either.
    // SAFETY: as above.
    unsafe { ring.add(63).write(0xf0) };
    assert_eq!(cq.poll(&mut out), 0);
    // SAFETY: as above.
    unsafe { ring.add(63).write(0x00) };
    assert_eq!(cq.poll(&mut out), 1);
    assert_eq!(cq.cons_index(), 1);
    drop(cq);
    free_uar(p);
}

#[test]
fn mlx5_iterator_publishes_on_drop_and_sync() {
    let (mut cq, p) = new_cq(7, CqeSize::B64); // ncqe 8
    let mut dev = Dev::of(&cq);
    for k in 0..5 {
        dev.push(send_cqe(3, k));
    }
    {
        let mut it = cq.iter();
        assert_eq!(it.next().unwrap().wr_id, 3 << 16);
        assert_eq!(it.next().unwrap().wr_id, (3 << 16) | 1);
        assert_eq!(dev.ci(), 0, "nothing published mid-iteration");
        it.sync();
        assert_eq!(dev.ci(), 2);
        assert_eq!(it.by_ref().count(), 3);
        assert_eq!(dev.ci(), 2);
    }
    assert_eq!(dev.ci(), 5);
    assert_eq!(cq.iter().count(), 0);
    drop(cq);
    free_uar(p);
}

#[test]
fn mlx5_arm_words_and_sequence() {
    let (mut cq, p) = new_cq(3, CqeSize::B64);
    let mut dev = Dev::of(&cq);
    let dbrec = cq.buf().dbrec_ptr();
    // SAFETY: test memory / doorbell record, read single-threaded between calls.
    let read = || unsafe {
        (
            u32::from_be(dbrec.add(1).read()),
            u64::from_be(p.add(MLX5_CQ_DOORBELL / 8).read()),
        )
    };
    cq.arm(false);
    assert_eq!(read(), (0, 0x42));
    cq.arm(true);
    assert_eq!(read(), (1 << 24, (1u64 << 56) | 0x42));
    dev.push(send_cqe(1, 0));
    dev.push(send_cqe(1, 1));
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut out), 2);
    cq.event_received();
    cq.arm(false);
    assert_eq!(read(), ((1 << 28) | 2, (((1u64 << 28) | 2) << 32) | 0x42));
    for _ in 0..3 {
        cq.event_received();
    }
    assert_eq!(cq.arm_sn(), 4);
    cq.arm(true);
    // sn wraps at 4: back to 0.
    assert_eq!(read(), ((1 << 24) | 2, (((1u64 << 24) | 2) << 32) | 0x42));
    cq.event_received();
    cq.event_received();
    cq.event_received();
    assert_eq!(cq.arm_word(false), (3 << 28) | 2);
    drop(cq);
    free_uar(p);
}

#[test]
fn mlx5_uar_page_checks() {
    let mut mem = [0u64; 8];
    let base = mem.as_mut_ptr().cast::<u8>();
    // SAFETY: the constructor only checks; nothing is written.
    unsafe {
        assert!(UarPage::new(ptr::null_mut(), 4096).is_err());
        assert!(UarPage::new(base, 0x27).is_err());
        assert!(UarPage::new(base.add(1), 0x30).is_err());
        assert!(UarPage::new(base, 0x28).is_ok());
    }
}

#[test]
fn mlx5_cqn_must_fit_24_bits() {
    let (p, uar) = uar_mem();
    let buf = CqBuf::new(1, CqeSize::B64).unwrap();
    assert!(Mlx5Cq::new(buf, 1 << 24, uar, by_counter as Lk).is_err());
    free_uar(p);
}

/// A device thread producing into a small ring while the consumer polls: nothing lost,
/// duplicated or read before it was written (Miri checks the last one for data races).
#[test]
fn mlx5_sim_device_thread_small() {
    let total: u32 = if cfg!(miri) { 20 } else { 5000 };
    let (mut cq, p) = new_cq(3, CqeSize::B128); // ncqe 4: a wrap every 4 entries
    let mut dev = Dev::of(&cq);
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    let t = std::thread::spawn(move || {
        let mut n = 0u32;
        while n < total {
            if dev.has_room() {
                let mut b = send_cqe(5, n as u16);
                b[44..48].copy_from_slice(&n.to_be_bytes());
                dev.push(b);
                n += 1;
            } else {
                std::thread::yield_now();
            }
        }
        d2.store(true, Ordering::Release);
    });
    let mut out = [WorkCompletion::default(); 3];
    let mut next = 0u64;
    while next < total as u64 {
        let k = cq.poll(&mut out);
        for wc in &out[..k] {
            assert_eq!(wc.wr_id, (5 << 16) | (next & 0xffff));
            next += 1;
        }
        if k == 0 {
            std::thread::yield_now();
        }
    }
    t.join().unwrap();
    assert!(done.load(Ordering::Acquire));
    assert_eq!(cq.poll(&mut out), 0);
    drop(cq);
    free_uar(p);
}

/// The first 64 bytes of slot `ci` (test memory, single-threaded callers).
fn lead_bytes(cq: &Mlx5Cq<Lk>, ci: u32) -> *mut u8 {
    let size = cq.buf().cqe_size().bytes();
    let idx = (ci & (cq.buf().ncqe() - 1)) as usize;
    // SAFETY: inside the ring.
    unsafe { cq.buf().ring_ptr().add(idx * size) }
}

#[test]
fn mlx5_clean_drops_one_qps_entries_and_keeps_the_others_in_order() {
    for size in [CqeSize::B64, CqeSize::B128] {
        let (mut cq, p) = new_cq(3, size); // ncqe 4
        let mut dev = Dev::of(&cq);
        let mut out = [WorkCompletion::default(); 4];
        // Move the consumer index to slot 2, so the entries below cross the wrap.
        dev.push(send_cqe(2, 0));
        dev.push(send_cqe(2, 1));
        assert_eq!(cq.poll(&mut out), 2);
        // Nothing to clean: nothing changes, nothing is published.
        assert_eq!(cq.clean(|_| true), 0);
        assert_eq!(dev.ci(), 2);
        dev.push(send_cqe(1, 0)); // ci 2, slot 2
        dev.push(send_cqe(2, 2)); // ci 3, slot 3
        dev.push(send_cqe(1, 1)); // ci 4, slot 0 (owner bit 1)
        if size == CqeSize::B128 {
            // SAFETY: slot 3's first half, software-owned; single-threaded.
            unsafe { lead_bytes(&cq, 3).write(0x5a) };
        }
        let mut seen = Vec::new();
        let removed = cq.clean(|c| {
            seen.push((c.qpn(), c.wqe_counter()));
            c.qpn() == 1
        });
        assert_eq!(removed, 2, "{size:?}");
        // Newest first, each once.
        assert_eq!(seen, [(1, 1), (2, 2), (1, 0)], "{size:?}");
        // The kept entry moved to slot 0 with the whole slot, keeping slot 0's owner bit.
        assert_eq!(cq.cons_index(), 4);
        assert_eq!(dev.ci(), 4, "{size:?}: the consumer index is published");
        if size == CqeSize::B128 {
            // SAFETY: slot 0's first half; single-threaded.
            assert_eq!(unsafe { lead_bytes(&cq, 4).read() }, 0x5a);
        }
        assert_eq!(cq.poll(&mut out), 1);
        assert_eq!(out[0].wr_id, (2 << 16) | 2);
        assert_eq!(out[0].qp_num, 2);
        assert_eq!(cq.poll(&mut out), 0);
        // The device goes on where it was; the freed slots are reused.
        for c in 3..6 {
            dev.push(send_cqe(2, c));
        }
        assert_eq!(cq.poll(&mut out), 3);
        let ids: Vec<u64> = out[..3].iter().map(|w| w.wr_id & 0xffff).collect();
        assert_eq!(ids, [3, 4, 5]);
        drop(cq);
        free_uar(p);
    }
}

#[test]
fn mlx5_clean_looks_at_ncqe_minus_one_entries_as_libmlx5() {
    let (mut cq, p) = new_cq(3, CqeSize::B64);
    let mut dev = Dev::of(&cq);
    for c in 0..4 {
        dev.push(send_cqe(1, c));
    }
    // A full ring: libmlx5's scan stops one short, so the newest entry stays.
    assert_eq!(cq.clean(|c| c.qpn() == 1), 3);
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut out), 1);
    assert_eq!(out[0].wr_id, (1 << 16) | 3);
    // Removing nothing leaves the ring as it was.
    dev.push(send_cqe(2, 0));
    assert_eq!(cq.clean(|_| false), 0);
    assert_eq!(dev.ci(), 4);
    assert_eq!(cq.poll(&mut out), 1);
    drop(cq);
    free_uar(p);
}

/// A device thread writes entries of two QPs while the consumer polls and cleans one of
/// them: every entry of the other arrives once, in order; each entry of the cleaned QP
/// is either polled or removed, once. (Miri: the clean's reads and moves race with
/// nothing the device does.)
#[test]
fn mlx5_clean_while_the_device_writes() {
    let total: u32 = if cfg!(miri) { 24 } else { 6000 };
    let (mut cq, p) = new_cq(7, CqeSize::B64);
    let mut dev = Dev::of(&cq);
    let t = std::thread::spawn(move || {
        let mut n = 0u32;
        while n < total {
            if dev.has_room() {
                let qpn = if n % 3 == 0 { 1 } else { 2 };
                dev.push(send_cqe(qpn, n as u16));
                n += 1;
            } else {
                std::thread::yield_now();
            }
        }
    });
    let want1 = (0..total).filter(|n| n % 3 == 0).count() as u32;
    let mut out = [WorkCompletion::default(); 2];
    let (mut next2, mut got1, mut removed1) = (1u32, 0u32, 0u32);
    let mut seen1 = std::collections::HashSet::new();
    while next2 < total || got1 + removed1 < want1 {
        let k = cq.poll(&mut out);
        for wc in &out[..k] {
            let ctr = (wc.wr_id & 0xffff) as u32;
            if wc.qp_num == 2 {
                assert_eq!(ctr, next2 & 0xffff);
                next2 += if next2 % 3 == 2 { 2 } else { 1 };
            } else {
                assert!(seen1.insert(ctr), "QP 1 entry {ctr} seen twice");
                got1 += 1;
            }
        }
        removed1 += cq.clean(|c| {
            if c.qpn() == 1 {
                assert!(seen1.insert(u32::from(c.wqe_counter())), "removed twice");
            }
            c.qpn() == 1
        });
        if k == 0 {
            std::thread::yield_now();
        }
    }
    t.join().unwrap();
    assert_eq!(got1 + removed1, want1);
    assert_eq!(cq.poll(&mut out), 0);
    drop(cq);
    free_uar(p);
}
