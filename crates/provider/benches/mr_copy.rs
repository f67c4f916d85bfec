//! Cost of the memory-region copy accessors against memcpy.
//!
//! `Mr::read_at` / `Mr::write_at` (and INLINE posts, and both ring copies of `RdmaStream`)
//! copy with `rverbs_uverbs::kernel::shared::copy_from_shared` / `copy_to_shared`: a byte-wise atomic
//! memcpy (every byte a relaxed 1-byte atomic access in the abstract machine; on x86_64
//! inline-assembly vector moves and `rep movsb`), because registered memory may be written by
//! the device, a peer or another thread at any time and every Rust access to a byte of it
//! must have the same size. This measures those two functions against `copy_from_slice`
//! (memcpy) and against the byte loop they stand for (one `AtomicU8` load or store per byte:
//! what Miri runs, and what the copies were before) on the same buffers, side by side in one
//! run, alternating rounds, and prints the medians and their ratios to memcpy per size.
//!
//! `cargo bench -p rverbs-provider --bench mr_copy`

use std::hint::black_box;
use std::time::Instant;

use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::Relaxed;

use rverbs_uverbs::kernel::shared::{copy_from_shared, copy_to_shared};

/// The byte loop: one relaxed `AtomicU8` load per byte.
///
/// # Safety
/// `src..src + dst.len()` readable and accessed only atomically meanwhile.
#[inline(never)]
unsafe fn byte_loop_from(src: *const u8, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: in range; a byte is always aligned.
        *d = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
    }
}

/// The byte loop: one relaxed `AtomicU8` store per byte.
///
/// # Safety
/// `dst..dst + src.len()` writable and accessed only atomically meanwhile.
#[inline(never)]
unsafe fn byte_loop_to(src: &[u8], dst: *mut u8) {
    for (i, &b) in src.iter().enumerate() {
        // SAFETY: in range.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(b, Relaxed);
    }
}

/// Many short samples: on a loaded machine most of them run without being preempted, and the
/// median is one of those.
const ROUNDS: usize = 101;

fn time(bytes: usize, mut f: impl FnMut()) -> f64 {
    // About 256 KiB per sample, at least 20 calls.
    let iters = (256 << 10) / bytes.max(1);
    let iters = iters.max(20);
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
        "size      memcpy-in     loop-in   shared-in  l/m  s/m | memcpy-out    loop-out  shared-out  l/m  s/m (ns per copy)"
    );
    for &size in &[64usize, 256, 1024, 4096, 65536, 1 << 20] {
        let shared = vec![0x5au8; size + 64];
        let mut local = vec![0u8; size];
        // memcpy-out writes a buffer like `shared` (same size and alignment), not `shared` itself,
        // which the atomic copies reach through raw pointers only.
        let mut out = vec![0x5au8; size + 64];
        let mut t: [Vec<f64>; 6] = Default::default();
        let src = shared.as_ptr();
        let dst = shared.as_ptr().cast_mut();
        for _ in 0..ROUNDS {
            t[0].push(time(size, || {
                local.copy_from_slice(black_box(&shared[..size]));
                black_box(&mut local);
            }));
            t[1].push(time(size, || {
                // SAFETY: src..src+size is inside `shared`, touched only by these copies.
                unsafe { byte_loop_from(black_box(src), &mut local) };
                black_box(&mut local);
            }));
            t[2].push(time(size, || {
                // SAFETY: as above.
                unsafe { copy_from_shared(black_box(src), &mut local) };
                black_box(&mut local);
            }));
            t[3].push(time(size, || {
                out[..size].copy_from_slice(black_box(&local));
                black_box(&mut out);
            }));
            t[4].push(time(size, || {
                // SAFETY: as above; `shared` is not referenced while this runs.
                unsafe { byte_loop_to(black_box(&local), black_box(dst)) };
            }));
            t[5].push(time(size, || {
                // SAFETY: as above.
                unsafe { copy_to_shared(black_box(&local), black_box(dst)) };
            }));
        }
        let [mi, li, si, mo, lo, so] = t.map(median);
        println!(
            "{size:>8}  {mi:>10.1}  {li:>10.1}  {si:>10.1} {:>4.2} {:>4.2} | {mo:>10.1}  {lo:>10.1}  {so:>10.1} {:>4.2} {:>4.2}",
            li / mi,
            si / mi,
            lo / mo,
            so / mo
        );
    }
}
