//! Copies in and out of memory that someone outside the Rust abstract machine may touch:
//! registered memory (which the device reads and writes and a peer reaches by RDMA), and the
//! sources of INLINE sends.
//!
//! **The rule: every byte of such memory is accessed by Rust only as a 1-byte relaxed atomic
//! (`AtomicU8`), by every accessor, whatever the call's range.** Rust's memory model makes a
//! race of two atomic accesses of different sizes to overlapping bytes undefined behaviour
//! ("overlapping unsynchronized atomic accesses must use the same access size"), so a rule in
//! which the access size depends on the call's range (machine words where the call's range is
//! aligned, bytes at its edges) breaks as soon as two threads copy partially overlapping
//! ranges: `Mr::write_at(1, ..)` racing `Mr::read_at(0, ..)` stores byte 1 with a 1-byte
//! atomic while the read loads it inside an 8-byte one. With one access size for every byte
//! no two Rust accesses can disagree, and no accessor needs to know anything but its own
//! range (an INLINE post sees only the SGE's address and length, not the region's bounds).
//! Writes by the kernel, a device or a peer happen outside the abstract machine and are not
//! data races in Rust's sense as long as Rust reads only with atomics.
//!
//! Relaxed is enough: these copies order nothing. The completion that says the device's data
//! is there is read with Acquire (the CQ's producer index or owner bit), and the post that
//! hands our data to the device is a Release store or a system call.
//!
//! The cost (measured by `cargo bench -p rverbs-provider --bench mr_copy`, docs/perf.md "Copy
//! accessors"): byte atomics cannot be merged or vectorised, so large copies run several
//! times slower than `memcpy`.
//!
//! All functions here are `unsafe`: the caller names raw memory. Their shared contract
//! ("the shared-memory contract"): the range is valid for the access for the whole call, and
//! while the call runs no Rust code accesses it other than through the functions of this
//! module (the kernel, a device or a peer may).

#![allow(unsafe_code)]

use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::Relaxed;

/// Copies `dst.len()` bytes from shared memory at `src` into `dst`, each byte one relaxed
/// 1-byte atomic load.
///
/// # Safety
/// `src..src + dst.len()` must be valid for reads for the whole call, and accessed by Rust
/// code meanwhile only through this module (the shared-memory contract, see the module doc).
#[inline]
pub unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
    for (i, d) in dst.iter_mut().enumerate() {
        // SAFETY: in range (the caller); a byte is always aligned; Rust reaches this byte
        // only by 1-byte atomics (the caller).
        *d = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Relaxed);
    }
}

/// Copies `len` bytes from shared memory at `src` to `dst`, memory no one else touches
/// during the call (a work-queue entry being built), each source byte one relaxed 1-byte
/// atomic load; `dst` is written with plain stores.
///
/// # Safety
/// `src..src + len` as for [`copy_from_shared`]; `dst..dst + len` valid for writes, not
/// overlapping the source, and neither read nor written by anyone else during the call.
#[inline]
pub unsafe fn copy_from_shared_raw(src: *const u8, dst: *mut u8, len: usize) {
    /// Byte `i`: one relaxed 1-byte atomic load, one plain store.
    ///
    /// # Safety
    /// `i < len` (the outer contract).
    #[inline(always)]
    unsafe fn byte(src: *const u8, dst: *mut u8, i: usize) {
        // SAFETY: in range of both (the caller); the source only by 1-byte atomics, the
        // destination is ours alone during the call.
        unsafe {
            let b = AtomicU8::from_ptr(src.add(i).cast_mut()).load(Relaxed);
            dst.add(i).write(b);
        }
    }
    // Eight bytes per turn: the loop control is paid once per eight (the INLINE hot path).
    let mut i = 0;
    while len - i >= 8 {
        for k in 0..8 {
            // SAFETY: i + k < i + 8 <= len.
            unsafe { byte(src, dst, i + k) };
        }
        i += 8;
    }
    while i < len {
        // SAFETY: i < len.
        unsafe { byte(src, dst, i) };
        i += 1;
    }
}

/// Copies `src` into shared memory at `dst`, each byte one relaxed 1-byte atomic store.
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes for the whole call, and accessed by Rust
/// code meanwhile only through this module (the shared-memory contract).
#[inline]
pub unsafe fn copy_to_shared(src: &[u8], dst: *mut u8) {
    for (i, &b) in src.iter().enumerate() {
        // SAFETY: in range (the caller); 1-byte atomics only (the caller).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(b, Relaxed);
    }
}

/// Sets `len` bytes of shared memory at `dst` to `byte`, each one relaxed 1-byte atomic store.
///
/// # Safety
/// As for [`copy_to_shared`] with `len` bytes.
#[inline]
pub unsafe fn fill_shared(dst: *mut u8, len: usize, byte: u8) {
    for i in 0..len {
        // SAFETY: in range (the caller); 1-byte atomics only (the caller).
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    #[test]
    fn copies_at_every_alignment() {
        let mut mem = vec![0u8; 64];
        let src = pattern(64);
        for off in 0..9 {
            for len in [0, 1, 7, 8, 9, 15, 16, 17, 40] {
                mem.fill(0);
                let base = mem.as_mut_ptr();
                // SAFETY: off+len <= 64; nothing else touches `mem` meanwhile.
                unsafe { copy_to_shared(&src[..len], base.add(off)) };
                assert_eq!(&mem[off..off + len], &src[..len], "write {off} {len}");
                assert!(mem[..off].iter().all(|&b| b == 0), "before {off} {len}");
                assert!(
                    mem[off + len..].iter().all(|&b| b == 0),
                    "after {off} {len}"
                );
                let mut out = vec![0u8; len];
                // SAFETY: as above.
                unsafe { copy_from_shared(mem.as_ptr().add(off), &mut out) };
                assert_eq!(out, &src[..len], "read {off} {len}");
                let mut raw = vec![0xeeu8; len + 2];
                // SAFETY: as above; `raw` has len+2 bytes, a distinct allocation.
                unsafe {
                    copy_from_shared_raw(mem.as_ptr().add(off), raw.as_mut_ptr().add(1), len)
                };
                assert_eq!(&raw[1..=len], &src[..len], "raw read {off} {len}");
                assert_eq!(
                    (raw[0], raw[len + 1]),
                    (0xee, 0xee),
                    "raw edges {off} {len}"
                );
            }
        }
    }

    #[test]
    fn fill_sets_exactly_the_range() {
        let mut mem = vec![0u8; 700];
        // SAFETY: 3+600 <= 700.
        unsafe { fill_shared(mem.as_mut_ptr().add(3), 600, 0xab) };
        assert!(mem[..3].iter().all(|&b| b == 0));
        assert!(mem[3..603].iter().all(|&b| b == 0xab));
        assert!(mem[603..].iter().all(|&b| b == 0));
    }

    /// The hostile case of issue 21, finding 2: two threads copy partially overlapping
    /// ranges with different call edges inside the same machine words (a write of bytes
    /// 1..17 and a fill of 5..9 against reads of 0..16 and 4..24). Under Miri a rule whose
    /// access size depends on the call's range reports "overlapping unsynchronized atomic
    /// accesses must use the same access size"; with bytes throughout there is nothing to
    /// report, and each byte read is an old or a new value.
    #[test]
    fn writes_race_reads_at_other_offsets() {
        // Word-aligned, so that the call edges fall inside machine words.
        let mut mem = vec![0u64; 4];
        let base = mem.as_mut_ptr().cast::<u8>().expose_provenance();
        std::thread::scope(|s| {
            s.spawn(|| {
                let p = std::ptr::with_exposed_provenance_mut::<u8>(base);
                // SAFETY: 1..17 and 5..9 are inside the 32 bytes; Rust touches them only
                // through this module until the scope ends.
                unsafe {
                    copy_to_shared(&[0xaa; 16], p.add(1));
                    fill_shared(p.add(5), 4, 0xaa);
                }
            });
            s.spawn(|| {
                let p = std::ptr::with_exposed_provenance::<u8>(base);
                let mut a = [0u8; 16];
                let mut b = [0u8; 20];
                // SAFETY: as above.
                unsafe {
                    copy_from_shared(p, &mut a);
                    copy_from_shared(p.add(4), &mut b);
                }
                assert_eq!(a[0], 0);
                assert!(a.iter().chain(&b).all(|&x| x == 0 || x == 0xaa));
            });
        });
        let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(bytes[0], 0);
        assert!(bytes[1..17].iter().all(|&b| b == 0xaa));
        assert!(bytes[17..].iter().all(|&b| b == 0));
    }
}
