//! Cost of the memory-region copy accessors against memcpy.
//!
//! `Mr::read_at` / `Mr::write_at` copy with relaxed atomic word loads/stores
//! (`rverbs_uverbs::mr::copy_from_shared` / `copy_to_shared`), because registered memory may be
//! written by the device at any time and Rust never forms a reference into it. This measures
//! those two functions against `copy_from_slice` (memcpy) on the same buffers, side by side in
//! one run, alternating rounds, and prints the medians and their ratio per size.
//!
//! `cargo bench -p rverbs-provider --bench mr_copy`

use std::hint::black_box;
use std::time::Instant;

use rverbs_uverbs::mr::{copy_from_shared, copy_to_shared};

const ROUNDS: usize = 15;

fn time(bytes: usize, mut f: impl FnMut()) -> f64 {
    // About 64 MiB per sample, at least 100 calls.
    let iters = (64 << 20) / bytes.max(1);
    let iters = iters.max(100);
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!(
        "size      memcpy-in   atomic-in  ratio | memcpy-out  atomic-out  ratio (ns per copy)"
    );
    for &size in &[64usize, 4096, 65536, 1 << 20] {
        let shared = vec![0x5au8; size + 64];
        let mut local = vec![0u8; size];
        // memcpy-out writes a buffer like `shared` (same size and alignment), not `shared` itself,
        // which the atomic copies reach through raw pointers only.
        let mut out = vec![0x5au8; size + 64];
        let (mut mi, mut ai, mut mo, mut ao) = (vec![], vec![], vec![], vec![]);
        let src = shared.as_ptr();
        let dst = shared.as_ptr().cast_mut();
        for _ in 0..ROUNDS {
            mi.push(time(size, || {
                local.copy_from_slice(black_box(&shared[..size]));
                black_box(&mut local);
            }));
            ai.push(time(size, || {
                // SAFETY: src..src+size is inside `shared`, touched only by these copies.
                unsafe { copy_from_shared(black_box(src), &mut local) };
                black_box(&mut local);
            }));
            mo.push(time(size, || {
                out[..size].copy_from_slice(black_box(&local));
                black_box(&mut out);
            }));
            ao.push(time(size, || {
                // SAFETY: as above; `shared` is not referenced while this runs.
                unsafe { copy_to_shared(black_box(&local), black_box(dst)) };
            }));
        }
        let (mi, ai, mo, ao) = (median(mi), median(ai), median(mo), median(ao));
        println!(
            "{size:>8}  {mi:>10.1}  {ai:>10.1}  {:>5.2} | {mo:>10.1}  {ao:>10.1}  {:>5.2}",
            ai / mi,
            ao / mo
        );
    }
}
