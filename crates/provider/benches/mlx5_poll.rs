//! ns per CQE for polling a full mlx5 CQ ring of valid CQEs.
//!
//! Each sample refills the whole ring (4096 entries) with CQEs of the current lap (owner bit
//! flipped per lap, as the device writes them) outside the timed region, then times
//! `Mlx5Cq::poll` in batches of 32 until the ring is drained: the ownership check, the read
//! barrier, the copy-out, parsing, the wr_id lookup and the consumer-index publish per batch.
//! Criterion's throughput is per CQE.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rverbs_provider::mlx5::{CqBuf, CqeSize, Mlx5Cq, UarPage, WorkQueue, WqeRef};
use rverbs_uverbs::wc::WorkCompletion;

const CQE: u32 = 4095; // ring of 4096
const BATCH: usize = 32;
const QPN: u32 = 0x1234;

/// The QP side's tables, as a real QP keeps them: wr_ids by send WQE index, receives in
/// order.
struct Tables {
    sq: Vec<u64>,
    rq: Vec<u64>,
    rq_tail: u32,
}

impl rverbs_provider::mlx5::WrIdLookup for Tables {
    #[inline]
    fn wr_id(&mut self, w: WqeRef) -> Option<u64> {
        match w.queue {
            WorkQueue::Send => self
                .sq
                .get(w.wqe_counter as usize & (self.sq.len() - 1))
                .copied(),
            WorkQueue::Recv => {
                let id = self
                    .rq
                    .get(self.rq_tail as usize & (self.rq.len() - 1))
                    .copied();
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

fn bench_ring(c: &mut Criterion, name: &str, size: CqeSize, mixed: bool) {
    let mut uar_mem = Box::new([0u64; 8]);
    // SAFETY: the CQ is dropped at the end of this function, before uar_mem.
    let uar = unsafe { UarPage::new(uar_mem.as_mut_ptr().cast(), 64) }.unwrap();
    let buf = CqBuf::new(CQE, size).unwrap();
    let ncqe = buf.ncqe();
    let slot = size.bytes();
    let ring = buf.ring_ptr();
    let templates: Vec<[u8; 64]> = (0..ncqe).map(|i| template(i, mixed)).collect();
    let tables = Tables {
        sq: (0..1024).map(|i| 0x5000_0000 + i).collect(),
        rq: (0..1024).map(|i| 0x7000_0000 + i).collect(),
        rq_tail: 0,
    };
    let mut cq = Mlx5Cq::new(buf, 1, uar, tables).unwrap();
    let mut out = [WorkCompletion::default(); BATCH];
    let mut lap = 0u32;

    let mut g = c.benchmark_group("mlx5_poll");
    g.throughput(Throughput::Elements(ncqe as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Refill (not timed): the device's writes of one lap.
                let owner = (lap & 1) as u8;
                for (i, t) in templates.iter().enumerate() {
                    // SAFETY: slot i < ncqe is inside the ring; the previous lap was fully
                    // consumed and published, and nothing polls concurrently.
                    unsafe {
                        let p = ring.add(i * slot + slot - 64);
                        std::ptr::copy_nonoverlapping(t.as_ptr(), p, 63);
                        p.add(63).write(t[63] | owner);
                    }
                }
                lap += 1;
                let start = Instant::now();
                let mut left = ncqe as usize;
                while left > 0 {
                    let n = cq.poll(black_box(&mut out));
                    assert!(
                        n > 0,
                        "ring drained after {} of {ncqe}",
                        ncqe as usize - left
                    );
                    black_box(&out[..n]);
                    left -= n;
                }
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
    drop(cq);
    drop(uar_mem);
}

fn benches(c: &mut Criterion) {
    bench_ring(c, "send_cqe64", CqeSize::B64, false);
    bench_ring(c, "mixed_cqe64", CqeSize::B64, true);
    bench_ring(c, "send_cqe128", CqeSize::B128, false);
}

criterion_group!(mlx5, benches);
criterion_main!(mlx5);
