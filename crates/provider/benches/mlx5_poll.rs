//! ns per CQE for polling a full mlx5 CQ ring of valid CQEs.
//!
//! Each sample refills the whole ring (4096 entries) with CQEs of the current lap (owner bit
//! flipped per lap, as the device writes them) outside the timed region, then times
//! `Mlx5Cq::poll` in batches of 32 until the ring is drained: the ownership check, the read
//! barrier, the copy-out, parsing, the wr_id lookup and the consumer-index publish per batch.
//! Criterion's throughput is per CQE. `MLX5_POLL_LAPS=n` runs a plain loop instead (see
//! `plain`), for counting instructions with callgrind.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use rverbs_provider::internals::mlx5::{CqBuf, CqeSize, Mlx5Cq, UarPage, WorkQueue, WqeRef};
use rverbs_uverbs::WorkCompletion;

const CQE: u32 = 4095; // ring of 4096
const BATCH: usize = 32;
const QPN: u32 = 0x1234;

/// The QP side's tables, as a real QP keeps them: wr_ids by send WQE index, receives in
/// order.
struct Tables {
    sq: Box<[u64]>,
    rq: Box<[u64]>,
    /// Both tables' length - 1 (a power of two).
    mask: usize,
    rq_tail: u32,
}

impl rverbs_provider::internals::mlx5::WrIdLookup for Tables {
    #[inline]
    fn wr_id(&mut self, w: WqeRef) -> Option<u64> {
        match w.queue {
            WorkQueue::Send => self.sq.get(w.wqe_counter as usize & self.mask).copied(),
            WorkQueue::Recv => {
                let id = self.rq.get(self.rq_tail as usize & self.mask).copied();
                self.rq_tail = self.rq_tail.wrapping_add(1);
                id
            }
        }
    }
}

fn template(i: u32, mixed: bool) -> [u8; 64] {
    let mut b = [0u8; 64];
    if mixed && i % 2 == 1 {
        // Receive with immediate and GRH.
        b[24..28].copy_from_slice(&(0x2000_0000u32 | 0x77).to_be_bytes());
        b[36..40].copy_from_slice(&i.to_be_bytes());
        b[44..48].copy_from_slice(&256u32.to_be_bytes());
        b[56..60].copy_from_slice(&QPN.to_be_bytes());
        b[63] = 0x30;
    } else {
        b[56..60].copy_from_slice(&((0x0a << 24) | QPN).to_be_bytes());
        b[60..62].copy_from_slice(&(i as u16).to_be_bytes());
        b[63] = 0x00;
    }
    b
}

/// A CQ with its ring pointer and one lap of CQE templates.
struct Rig {
    cq: Mlx5Cq<Tables>,
    ring: *mut u8,
    slot: usize,
    templates: Vec<[u8; 64]>,
    lap: u32,
    out: [WorkCompletion; BATCH],
    // Declared last: dropped after the CQ that rings it.
    _uar_mem: Box<[u64; 8]>,
}

impl Rig {
    fn new(size: CqeSize, mixed: bool) -> Rig {
        let mut uar_mem = Box::new([0u64; 8]);
        // SAFETY: the CQ is dropped before uar_mem (field order of Rig).
        let uar = unsafe { UarPage::new(uar_mem.as_mut_ptr().cast(), 64) }.unwrap();
        let buf = CqBuf::new(CQE, size).unwrap();
        let ring = buf.ring_ptr();
        let templates = (0..buf.ncqe()).map(|i| template(i, mixed)).collect();
        let tables = Tables {
            sq: (0..1024).map(|i| 0x5000_0000 + i).collect(),
            rq: (0..1024).map(|i| 0x7000_0000 + i).collect(),
            mask: 1023,
            rq_tail: 0,
        };
        Rig {
            cq: Mlx5Cq::new(buf, 1, uar, tables).unwrap(),
            ring,
            slot: size.bytes(),
            templates,
            lap: 0,
            out: [WorkCompletion::default(); BATCH],
            _uar_mem: uar_mem,
        }
    }

    fn ncqe(&self) -> usize {
        self.templates.len()
    }

    /// The device's writes of one lap (owner bit flipped per lap). Not timed.
    fn refill(&mut self) {
        let owner = (self.lap & 1) as u8;
        let slot = self.slot;
        for (i, t) in self.templates.iter().enumerate() {
            // SAFETY: slot i < ncqe is inside the ring; the previous lap was fully consumed
            // and published, and nothing polls concurrently.
            unsafe {
                let p = self.ring.add(i * slot + slot - 64);
                std::ptr::copy_nonoverlapping(t.as_ptr(), p, 63);
                p.add(63).write(t[63] | owner);
            }
        }
        self.lap += 1;
    }

    /// Polls the whole ring; the timed part.
    #[inline(never)]
    fn drain(&mut self) {
        let mut left = self.ncqe();
        while left > 0 {
            let n = self.cq.poll(black_box(&mut self.out));
            assert!(
                n > 0,
                "ring drained after {} of {}",
                self.ncqe() - left,
                self.ncqe()
            );
            black_box(&self.out[..n]);
            left -= n;
        }
    }
}

fn bench_ring(c: &mut Criterion, name: &str, size: CqeSize, mixed: bool) {
    let mut rig = Rig::new(size, mixed);
    let mut g = c.benchmark_group("mlx5_poll");
    g.throughput(Throughput::Elements(rig.ncqe() as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                rig.refill();
                let start = Instant::now();
                rig.drain();
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

/// `MLX5_POLL_LAPS=n`: no criterion, just `n` refill+drain laps of the send ring and the mean
/// ns/CQE — small enough to run under `valgrind --tool=callgrind` and count instructions per
/// CQE in `Rig::drain`.
fn plain(laps: u32) {
    let mut rig = Rig::new(CqeSize::B64, false);
    let mut total = Duration::ZERO;
    for _ in 0..laps {
        rig.refill();
        let start = Instant::now();
        rig.drain();
        total += start.elapsed();
    }
    let n = laps as f64 * rig.ncqe() as f64;
    println!(
        "mlx5_poll plain: {laps} laps x {} CQEs: {:.2} ns/CQE",
        rig.ncqe(),
        total.as_nanos() as f64 / n
    );
}

fn main() {
    if let Ok(laps) = std::env::var("MLX5_POLL_LAPS") {
        plain(laps.parse().expect("MLX5_POLL_LAPS: a number of laps"));
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    bench_ring(&mut c, "send_cqe64", CqeSize::B64, false);
    bench_ring(&mut c, "mixed_cqe64", CqeSize::B64, true);
    bench_ring(&mut c, "send_cqe128", CqeSize::B128, false);
    c.final_summary();
}
