//! Cost of the memory-region copy accessors against memcpy.
//!
//! `Mr::read_at` / `Mr::write_at` (and INLINE posts) copy with relaxed 1-byte atomic
//! loads/stores (`rverbs_uverbs::shared::copy_from_shared` / `copy_to_shared`), because
//! registered memory may be written by the device, a peer or another thread at any time and
//! every Rust access to a byte of it must have the same size. This measures those two
//! functions against `copy_from_slice` (memcpy) and against the earlier word copy (8-byte
//! atomics where the call's range is aligned, bytes at its edges: unsound when two threads
//! copy partially overlapping ranges, kept here only to show what the rule costs) on the
//! same buffers, side by side in one run, alternating rounds, and prints the medians and
//! their ratios to memcpy per size.
//!
//! `cargo bench -p rverbs-provider --bench mr_copy`

use std::hint::black_box;
use std::time::Instant;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU8, AtomicUsize};

use rverbs_uverbs::shared::{copy_from_shared, copy_to_shared};

const W: usize = size_of::<usize>();

/// The earlier read: words where the call's range is aligned, bytes at its edges.
///
/// # Safety
/// `src..src + dst.len()` readable and accessed only atomically meanwhile.
unsafe fn word_copy_from(src: *const u8, dst: &mut [u8]) {
    let n = dst.len();
    let mut i = 0;
    while i < n && (src as usize + i) % W != 0 {
        // SAFETY: in range; a byte is always aligned.
        dst[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
    while i + W <= n {
        // SAFETY: aligned (the loop above) and in range.
        let w = unsafe { AtomicUsize::from_ptr(src.add(i).cast::<usize>().cast_mut()) };
        dst[i..i + W].copy_from_slice(&w.load(Relaxed).to_ne_bytes());
        i += W;
    }
    while i < n {
        // SAFETY: in range.
        dst[i] = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
        i += 1;
    }
}

/// The earlier write, the counterpart of [`word_copy_from`].
///
/// # Safety
/// `dst..dst + src.len()` writable and accessed only atomically meanwhile.
unsafe fn word_copy_to(src: &[u8], dst: *mut u8) {
    let n = src.len();
    let mut i = 0;
    while i < n && (dst as usize + i) % W != 0 {
        // SAFETY: in range.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(src[i], Relaxed);
        i += 1;
    }
    while i + W <= n {
        let w = usize::from_ne_bytes(src[i..i + W].try_into().expect("W bytes"));
        // SAFETY: aligned (the loop above) and in range.
        unsafe { AtomicUsize::from_ptr(dst.add(i).cast::<usize>()) }.store(w, Relaxed);
        i += W;
    }
    while i < n {
        // SAFETY: in range.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(src[i], Relaxed);
        i += 1;
    }
}

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
        "size      memcpy-in    words-in    bytes-in  w/m  b/m | memcpy-out   words-out   bytes-out  w/m  b/m (ns per copy)"
    );
    for &size in &[64usize, 256, 4096, 65536, 1 << 20] {
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
                unsafe { word_copy_from(black_box(src), &mut local) };
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
                unsafe { word_copy_to(black_box(&local), black_box(dst)) };
            }));
            t[5].push(time(size, || {
                // SAFETY: as above.
                unsafe { copy_to_shared(black_box(&local), black_box(dst)) };
            }));
        }
        let [mi, wi, bi, mo, wo, bo] = t.map(median);
        println!(
            "{size:>8}  {mi:>10.1}  {wi:>10.1}  {bi:>10.1} {:>4.1} {:>4.1} | {mo:>10.1}  {wo:>10.1}  {bo:>10.1} {:>4.1} {:>4.1}",
            wi / mi,
            bi / mi,
            wo / mo,
            bo / mo
        );
    }
}
