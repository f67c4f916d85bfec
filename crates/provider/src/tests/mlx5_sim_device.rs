//! A simulated mlx5 device: a thread that writes CQEs into the ring with the owner-bit
//! protocol, never overwriting an entry the consumer has not released (it reads the consumer
//! index from the doorbell record), while the test polls. Through many wraps nothing may be
//! lost, duplicated, or read before the device finished writing it.
//!
//! Every CQE carries its sequence number twice (timestamp and byte_cnt) and a kind derived
//! from it; a CQE read early would mix fields of two laps and fail the cross-checks.

use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::thread;

use crate::mlx5::{CqBuf, CqeSize, Mlx5Cq, UarPage, WorkQueue, WqeRef, WrIdLookup};
use rverbs_uverbs::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

const QPN: u32 = 0x00ab_cdef;
const SQ: u32 = 256;
const RQ: u32 = 128;

/// The QP side, as libmlx5 keeps it: send wr_ids by WQE index, receives in order.
struct Qp {
    rq_tail: u32,
}

impl WrIdLookup for Qp {
    fn wr_id(&mut self, w: WqeRef) -> Option<u64> {
        if w.qpn != QPN {
            return None;
        }
        Some(match w.queue {
            WorkQueue::Send => 0x5000_0000 + (w.wqe_counter as u32 & (SQ - 1)) as u64,
            WorkQueue::Recv => {
                let id = 0x7000_0000 + (self.rq_tail & (RQ - 1)) as u64;
                self.rq_tail += 1;
                id
            }
        })
    }
}

/// What CQE number `seq` is: 0 = send completion, 1 = receive with immediate, 2 = flushed
/// send (error CQE).
fn kind(seq: u32) -> u32 {
    match seq % 11 {
        0 => 2,
        1 | 4 | 7 => 1,
        _ => 0,
    }
}

fn cqe_for(seq: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[48..52].copy_from_slice(&seq.to_be_bytes()); // timestamp high word: seq
    b[44..48].copy_from_slice(&(seq & 0x7fff_ffff).to_be_bytes()); // byte_cnt: seq
    match kind(seq) {
        0 => {
            b[56..60].copy_from_slice(&((0x0a << 24) | QPN).to_be_bytes());
            b[60..62].copy_from_slice(&(seq as u16).to_be_bytes());
            b[63] = 0x00;
        }
        1 => {
            b[56..60].copy_from_slice(&QPN.to_be_bytes());
            b[36..40].copy_from_slice(&(!seq).to_be_bytes());
            b[24..28].copy_from_slice(&(seq & 0xff_ffff).to_be_bytes()); // src_qp
            b[63] = 0x30;
        }
        _ => {
            b[56..60].copy_from_slice(&((0x0a << 24) | QPN).to_be_bytes());
            b[60..62].copy_from_slice(&(seq as u16).to_be_bytes());
            b[55] = 0x05;
            b[54] = (seq & 0xff) as u8;
            b[63] = 0xd0;
        }
    }
    b
}

struct Device {
    ring: usize,
    dbrec: usize,
    ncqe: u32,
    slot: usize,
}

impl Device {
    fn run(&self, total: u32) -> u32 {
        let ring = self.ring as *mut u8;
        // SAFETY: the doorbell record of the CQ, which outlives this thread (joined first).
        let ci_word = unsafe { AtomicU32::from_ptr(self.dbrec as *mut u32) };
        let mut full_spins = 0u32;
        for pi in 0..total {
            loop {
                // Acquire: pairs with the consumer's Release publish; its reads of the slot
                // we are about to overwrite are finished.
                let ci = u32::from_be(ci_word.load(Ordering::Acquire));
                let used = pi.wrapping_sub(ci) & 0xff_ffff;
                assert!(
                    used <= self.ncqe,
                    "consumer index {ci} ahead of producer {pi}"
                );
                if used < self.ncqe {
                    break;
                }
                full_spins += 1;
                thread::yield_now();
            }
            let b = cqe_for(pi);
            let idx = (pi & (self.ncqe - 1)) as usize;
            let owner = (pi & self.ncqe != 0) as u8;
            // SAFETY: the slot is inside the ring and released by the consumer (checked
            // above); the consumer reads only its owner byte (atomically) until the Release
            // store below hands it over.
            unsafe {
                let cqe = ring.add(idx * self.slot + self.slot - 64);
                // Write the body in two steps with a pause between: a consumer that read
                // before the owner byte would see half of it.
                ptr::copy_nonoverlapping(b.as_ptr(), cqe, 32);
                if pi % 64 == 0 {
                    thread::yield_now();
                }
                ptr::copy_nonoverlapping(b.as_ptr().add(32), cqe.add(32), 31);
                AtomicU8::from_ptr(cqe.add(63)).store(b[63] | owner, Ordering::Release);
            }
        }
        full_spins
    }
}

fn check(seq: u32, wc: &WorkCompletion, rq_seen: &mut u32) {
    assert_eq!(wc.qp_num, QPN, "seq {seq}");
    match kind(seq) {
        0 => {
            assert_eq!(wc.status, WcStatus::SUCCESS, "seq {seq}");
            assert_eq!(wc.opcode, WcOpcode::SEND);
            assert_eq!(wc.wr_id, 0x5000_0000 + (seq & (SQ - 1)) as u64, "seq {seq}");
        }
        1 => {
            assert_eq!(wc.status, WcStatus::SUCCESS, "seq {seq}");
            assert_eq!(wc.opcode, WcOpcode::RECV);
            assert_eq!(wc.wc_flags, WcFlags::WITH_IMM);
            assert_eq!(wc.byte_len, seq & 0x7fff_ffff, "seq {seq}");
            assert_eq!(wc.imm_data, !seq, "seq {seq}: immediate from another lap");
            assert_eq!(wc.src_qp, seq & 0xff_ffff);
            assert_eq!(wc.wr_id, 0x7000_0000 + (*rq_seen & (RQ - 1)) as u64);
            *rq_seen += 1;
        }
        _ => {
            assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR, "seq {seq}");
            assert_eq!(wc.vendor_err, seq & 0xff, "seq {seq}");
            assert_eq!(wc.wr_id, 0x5000_0000 + (seq & (SQ - 1)) as u64);
        }
    }
}

fn run(cqe: u32, size: CqeSize, total: u32, use_iter: bool) {
    let mut uar_mem = Box::new([0u64; 8]);
    // SAFETY: the CQ is dropped before uar_mem.
    let uar = unsafe { UarPage::new(uar_mem.as_mut_ptr().cast(), 64) }.unwrap();
    let buf = CqBuf::new(cqe, size).unwrap();
    let dev = Device {
        ring: buf.ring_ptr() as usize,
        dbrec: buf.dbrec_ptr() as usize,
        ncqe: buf.ncqe(),
        slot: size.bytes(),
    };
    let mut cq = Mlx5Cq::new(buf, 7, uar, Qp { rq_tail: 0 }).unwrap();
    let producer = thread::spawn(move || dev.run(total));

    let mut out = [WorkCompletion::default(); 7];
    let mut seq = 0u32;
    let mut rq_seen = 0u32;
    let mut batch = 1usize;
    let mut idle = 0u64;
    while seq < total {
        let got = if use_iter && seq % 3 == 0 {
            let mut k = 0;
            for wc in cq.iter().take(batch) {
                check(seq + k as u32, &wc, &mut rq_seen);
                k += 1;
            }
            k
        } else {
            let k = cq.poll(&mut out[..batch]);
            for (i, wc) in out[..k].iter().enumerate() {
                check(seq + i as u32, wc, &mut rq_seen);
            }
            k
        };
        seq += got as u32;
        batch = batch % 7 + 1;
        if got == 0 {
            idle += 1;
            thread::yield_now();
        }
    }
    let full_spins = producer.join().unwrap();
    assert_eq!(cq.poll(&mut out), 0, "a CQE beyond the last one produced");
    assert_eq!(cq.cons_index(), total);
    // SAFETY: the doorbell record; the producer has stopped.
    let ci = unsafe { u32::from_be(cq.buf().dbrec_ptr().read()) };
    assert_eq!(ci, total & 0xff_ffff);
    eprintln!(
        "{size:?} ring of {}: {total} CQEs, {} laps, consumer idle {idle}x, producer full {full_spins}x",
        cq.buf().ncqe(),
        total / cq.buf().ncqe()
    );
    drop(cq);
    drop(uar_mem);
}

#[test]
fn mlx5_sim_device_64b_many_wraps_poll() {
    run(
        63,
        CqeSize::B64,
        if cfg!(miri) { 200 } else { 200_000 },
        false,
    );
}

#[test]
fn mlx5_sim_device_128b_many_wraps_poll_and_iter() {
    run(
        15,
        CqeSize::B128,
        if cfg!(miri) { 100 } else { 100_000 },
        true,
    );
}

#[test]
fn mlx5_sim_device_two_entry_ring() {
    // The smallest ring (cqe 1 → 2 entries): the owner bit flips every other CQE.
    run(1, CqeSize::B64, if cfg!(miri) { 50 } else { 50_000 }, true);
}
