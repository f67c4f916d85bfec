//! ns per completion for polling a full rxe CQ ring.
//!
//! The ring has 4096 slots of 128 bytes (what Linux 6.1 gives a CQ: `struct rxe_cqe` is 72
//! bytes on x86-64, rounded up to a power of two), so it holds 4095 CQEs. Each sample refills
//! the whole ring outside the timed region — the simulated kernel writes the CQEs and
//! publishes its producer index with the kernel's Release ordering — then times draining it:
//! `RxeCq::poll` in batches of 32 (one Acquire load of the producer and one Release store of
//! the consumer per batch, the element copy and the conversion to `WorkCompletion`), or one
//! `RxeCq::iter` over the whole ring. Criterion's throughput is per CQE.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rverbs_provider::internals::rxe::SimQueue;
use rverbs_provider::internals::rxe::{QueueKind, RxeCq};
use rverbs_uverbs::RawWc;
use rverbs_uverbs::WorkCompletion;

const LOG2_ELEM: u32 = 7;
const SLOTS: u32 = 4096;
const BATCH: usize = 32;

fn cqe(i: u32) -> RawWc {
    if i % 2 == 0 {
        RawWc {
            wr_id: u64::from(i),
            opcode: 0,
            byte_len: 64,
            qp_num: 17,
            ..Default::default()
        }
    } else {
        // Receive with immediate data and GRH.
        RawWc {
            wr_id: u64::from(i),
            opcode: 128,
            byte_len: 4096,
            ex: i.to_be(),
            qp_num: 17,
            src_qp: 18,
            wc_flags: 1 | 2,
            port_num: 1,
            ..Default::default()
        }
    }
}

fn benches(c: &mut Criterion) {
    let mut q = SimQueue::new(LOG2_ELEM, SLOTS).unwrap();
    // SAFETY: `cq` is declared after `q`, so it is dropped first; nothing else uses the view,
    // the kernel side only produces (a CQ's part) and no header word is rewritten.
    let mut cq = RxeCq::new(unsafe { q.view(QueueKind::Completion) }.unwrap()).unwrap();
    let capacity = cq.queue().capacity();
    let templates: Vec<RawWc> = (0..capacity).map(cqe).collect();
    let mut kernel = q.kernel();
    let mut out = [WorkCompletion::default(); BATCH];

    let mut g = c.benchmark_group("rxe_poll");
    g.throughput(Throughput::Elements(u64::from(capacity)));
    let mut refill = || {
        for t in &templates {
            assert!(kernel.produce_cqe(t), "ring not drained");
        }
    };

    g.bench_function("batch32", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                refill();
                let start = Instant::now();
                let mut left = capacity as usize;
                while left > 0 {
                    let n = cq.poll(black_box(&mut out));
                    assert!(n > 0, "ring drained early, {left} left");
                    black_box(&out[..n]);
                    left -= n;
                }
                total += start.elapsed();
            }
            total
        })
    });

    g.bench_function("iter", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                refill();
                let start = Instant::now();
                let mut n = 0u32;
                for wc in cq.iter() {
                    black_box(&wc);
                    n += 1;
                }
                total += start.elapsed();
                assert_eq!(n, capacity);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(rxe, benches);
criterion_main!(rxe);
