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
//! **How the bytes move: a byte-wise atomic memcpy.** On x86_64 (outside Miri) each copy is
//! inline assembly — 1- to 16-byte `mov`/`movdqu` loads and stores, and `rep movsb` /
//! `rep stosb` from 2 KiB (`REP_FROM`) — whose effect is, by the rule that an `asm!` block
//! performs what some sequence of Rust operations could perform (the Reference, "Behaviour of
//! an asm block"), the byte loop it stands for: for every byte of the range, a relaxed 1-byte
//! atomic load of the source and a relaxed 1-byte atomic store of that value to the
//! destination, in some order, some bytes possibly twice (the overlapping head and tail
//! moves). That is the semantics of C++'s P1478 "byte-wise atomic memcpy" and of Rust's
//! `AtomicPerByte` proposal (RFC 3301), whose authors expect it to be implemented as plain
//! `memcpy` code for the same reason: the hardware gives every byte of every load and store
//! exactly the guarantees of a relaxed byte atomic (x86 and AMD64 make every byte access
//! single-copy atomic — a wider access may be split, never a byte — and keep one coherent
//! order of the stores to each byte; loads are not reordered with loads, so two loads of the
//! same byte in program order never see its stores backwards; a relaxed atomic promises no
//! more). The compiler cannot look inside the block, so it can neither merge it with nor
//! split it into accesses of another kind. Every other Rust accessor of these bytes goes
//! through this module too (the rule above), so in the abstract machine all of them are 1-byte
//! atomics, whatever instructions carry them: no mixed-size race exists to be undefined, and
//! the hardware, for which a 16-byte load racing a 1-byte store is well defined, gives each
//! byte an old or a new value. The kernel, a device or a peer writing at any time is the same
//! as for the byte loop (outside the abstract machine; each byte an old or a new value). No
//! move writes outside its range or writes a value it did not load (a head and a tail move
//! that overlap store the same bytes twice: the same value when the source is private —
//! `copy_to_shared`, `fill_shared` — and into our own private destination otherwise), so a
//! concurrent accessor of a neighbouring range, Rust or device, never sees its bytes touched.
//!
//! Under Miri (which cannot run `asm!`) and on other targets the same functions run that byte
//! loop itself, so Miri checks the semantics the assembly stands for.
//!
//! The cost (measured by `cargo bench -p rverbs-provider --bench mr_copy`, docs/perf.md "Copy
//! accessors"): about memcpy's on x86_64.
//!
//! All functions here are `unsafe`: the caller names raw memory. Their shared contract
//! ("the shared-memory contract"): the range is valid for the access for the whole call, and
//! while the call runs no Rust code accesses it other than through the functions of this
//! module (the kernel, a device or a peer may). A source pointer must carry the right to
//! write (not be derived from a shared reference to bytes without `UnsafeCell`, such as a
//! `&[u8]`): the byte loop reaches each byte through `AtomicU8::from_ptr`, whose contract
//! asks for it, and Stacked Borrows holds it to that. A `&[u8]`'s bytes cannot be written by
//! anyone while it lives, so its right copy is a plain one (see `rverbs_cm`'s
//! `Endpoint::post_send_inline`).

#![allow(unsafe_code)]

/// From this many bytes on, the x86_64 copies use `rep movsb` / `rep stosb` (fast-string
/// operation), below it 16-byte vector moves: a side-by-side trial on the development machine
/// (AMD EPYC with ERMS and FSRM) found the two about equal at 1 KiB and `rep movsb` ahead from
/// 4 KiB; glibc's default threshold for 16-byte vectors is the same 2 KiB.
// Used by the assembly and the tests only.
#[cfg_attr(any(miri, not(target_arch = "x86_64")), allow(dead_code))]
const REP_FROM: usize = 2048;

/// Copies `dst.len()` bytes from shared memory at `src` into `dst`, each byte one relaxed
/// 1-byte atomic load (a byte-wise atomic memcpy, see the module doc).
///
/// # Safety
/// `src..src + dst.len()` must be valid for reads for the whole call, and accessed by Rust
/// code meanwhile only through this module (the shared-memory contract, see the module doc).
/// `src` must not be derived from a shared reference to memory without interior mutability
/// (`&[u8]`, `&T`): the copy is a sequence of atomic accesses, which such a pointer does not
/// permit (Stacked Borrows rejects it); a pointer from owned or mapped memory, a `&mut`, an
/// `UnsafeCell` or C is fine.
#[inline]
pub unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
    // SAFETY: the caller's contract for the source; `dst` is ours alone.
    unsafe { imp::copy_from(src, dst.as_mut_ptr(), dst.len()) }
}

/// Copies `len` bytes from shared memory at `src` to `dst`, memory no one else touches
/// during the call (a work-queue entry being built), each source byte one relaxed 1-byte
/// atomic load.
///
/// # Safety
/// `src..src + len` as for [`copy_from_shared`]; `dst..dst + len` valid for writes, not
/// overlapping the source, and neither read nor written by anyone else during the call.
#[inline]
pub unsafe fn copy_from_shared_raw(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { imp::copy_from(src, dst, len) }
}

/// Copies `src` into shared memory at `dst`, each byte one relaxed 1-byte atomic store.
///
/// # Safety
/// `dst..dst + src.len()` must be valid for writes for the whole call, and accessed by Rust
/// code meanwhile only through this module (the shared-memory contract).
#[inline]
pub unsafe fn copy_to_shared(src: &[u8], dst: *mut u8) {
    // SAFETY: the caller's contract; `src` is a live slice.
    unsafe { imp::copy_to(src.as_ptr(), dst, src.len()) }
}

/// Sets `len` bytes of shared memory at `dst` to `byte`, each one relaxed 1-byte atomic store.
///
/// # Safety
/// As for [`copy_to_shared`] with `len` bytes.
#[inline]
pub unsafe fn fill_shared(dst: *mut u8, len: usize, byte: u8) {
    // SAFETY: the caller's contract.
    unsafe { imp::fill(dst, len, byte) }
}

/// The byte loops themselves: what Miri runs, and the copy on targets without the assembly.
#[cfg(any(miri, not(target_arch = "x86_64")))]
mod imp {
    use std::sync::atomic::AtomicU8;
    use std::sync::atomic::Ordering::Relaxed;

    /// `len` bytes from shared `src` to private `dst`: atomic loads, plain stores.
    ///
    /// # Safety
    /// As for `copy_from_shared_raw`.
    #[inline]
    pub(super) unsafe fn copy_from(src: *const u8, dst: *mut u8, len: usize) {
        for i in 0..len {
            // SAFETY: in range of both (the caller); a byte is always aligned; the source is
            // reached by Rust only through 1-byte atomics, the destination is ours alone.
            unsafe {
                let b = AtomicU8::from_ptr(src.add(i).cast_mut()).load(Relaxed);
                dst.add(i).write(b);
            }
        }
    }

    /// `len` bytes from private `src` to shared `dst`: plain loads, atomic stores.
    ///
    /// # Safety
    /// As for `copy_to_shared`.
    #[inline]
    pub(super) unsafe fn copy_to(src: *const u8, dst: *mut u8, len: usize) {
        for i in 0..len {
            // SAFETY: in range of both (the caller); 1-byte atomics only on the shared side.
            unsafe { AtomicU8::from_ptr(dst.add(i)).store(src.add(i).read(), Relaxed) };
        }
    }

    /// `len` atomic stores of `byte` at shared `dst`.
    ///
    /// # Safety
    /// As for `fill_shared`.
    #[inline]
    pub(super) unsafe fn fill(dst: *mut u8, len: usize, byte: u8) {
        for i in 0..len {
            // SAFETY: in range (the caller); 1-byte atomics only.
            unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Relaxed);
        }
    }
}

/// The byte-wise atomic memcpy in x86_64 assembly (the module doc argues why each block is
/// the byte loop of the other `imp`).
#[cfg(all(target_arch = "x86_64", not(miri)))]
mod imp {
    use std::arch::asm;

    /// `N` bytes (1, 2, 4, 8, 16, 32 or 64) from `s` to `d`: all loads, then all stores, in
    /// one block; `N` of 1, 2, 4 and 8 through a general register, 16 and up through
    /// unaligned SSE2 moves (part of the x86_64 baseline).
    ///
    /// # Safety
    /// `s..s + N` valid for reads and `d..d + N` for writes; each a range of the copy being
    /// made (the callers' contracts: byte-wise atomic accesses in the abstract machine).
    #[inline(always)]
    unsafe fn mov<const N: usize>(s: *const u8, d: *mut u8) {
        // SAFETY: the ranges are valid (the caller); the blocks only load from `s..s + N` and
        // store to `d..d + N`, touch no stack and keep the flags.
        unsafe {
            match N {
                1 => asm!(
                    "mov {t}, byte ptr [{s}]",
                    "mov byte ptr [{d}], {t}",
                    s = in(reg) s, d = in(reg) d, t = out(reg_byte) _,
                    options(nostack, preserves_flags),
                ),
                2 => asm!(
                    "mov {t:x}, word ptr [{s}]",
                    "mov word ptr [{d}], {t:x}",
                    s = in(reg) s, d = in(reg) d, t = out(reg) _,
                    options(nostack, preserves_flags),
                ),
                4 => asm!(
                    "mov {t:e}, dword ptr [{s}]",
                    "mov dword ptr [{d}], {t:e}",
                    s = in(reg) s, d = in(reg) d, t = out(reg) _,
                    options(nostack, preserves_flags),
                ),
                8 => asm!(
                    "mov {t}, qword ptr [{s}]",
                    "mov qword ptr [{d}], {t}",
                    s = in(reg) s, d = in(reg) d, t = out(reg) _,
                    options(nostack, preserves_flags),
                ),
                16 => asm!(
                    "movdqu {a}, xmmword ptr [{s}]",
                    "movdqu xmmword ptr [{d}], {a}",
                    s = in(reg) s, d = in(reg) d, a = out(xmm_reg) _,
                    options(nostack, preserves_flags),
                ),
                32 => asm!(
                    "movdqu {a}, xmmword ptr [{s}]",
                    "movdqu {b}, xmmword ptr [{s} + 16]",
                    "movdqu xmmword ptr [{d}], {a}",
                    "movdqu xmmword ptr [{d} + 16], {b}",
                    s = in(reg) s, d = in(reg) d, a = out(xmm_reg) _, b = out(xmm_reg) _,
                    options(nostack, preserves_flags),
                ),
                64 => asm!(
                    "movdqu {a}, xmmword ptr [{s}]",
                    "movdqu {b}, xmmword ptr [{s} + 16]",
                    "movdqu {c}, xmmword ptr [{s} + 32]",
                    "movdqu {e}, xmmword ptr [{s} + 48]",
                    "movdqu xmmword ptr [{d}], {a}",
                    "movdqu xmmword ptr [{d} + 16], {b}",
                    "movdqu xmmword ptr [{d} + 32], {c}",
                    "movdqu xmmword ptr [{d} + 48], {e}",
                    s = in(reg) s, d = in(reg) d,
                    a = out(xmm_reg) _, b = out(xmm_reg) _, c = out(xmm_reg) _, e = out(xmm_reg) _,
                    options(nostack, preserves_flags),
                ),
                _ => unreachable!("mov::<{N}>"),
            }
        }
    }

    /// `len` bytes from `s` to `d` (either or both shared), byte-wise atomic: a head and a
    /// tail move of the largest size that fits (they overlap unless `len` is that size), a
    /// loop of 64-byte moves, or `rep movsb`.
    ///
    /// # Safety
    /// `s..s + len` valid for reads, `d..d + len` for writes, not overlapping; shared sides
    /// reached by Rust only through this module. Where both ranges might be written by someone
    /// else the overlapping moves could store a byte twice with different values: callers
    /// have a private side (`copy_from`: the destination; `copy_to`, `fill`: the source).
    #[inline(always)]
    unsafe fn copy(s: *const u8, d: *mut u8, len: usize) {
        // SAFETY: every move below lies inside `0..len` of both ranges (the caller's
        // contract), by the bounds of its branch.
        unsafe {
            if len < 16 {
                if len >= 8 {
                    mov::<8>(s, d);
                    mov::<8>(s.add(len - 8), d.add(len - 8));
                } else if len >= 4 {
                    mov::<4>(s, d);
                    mov::<4>(s.add(len - 4), d.add(len - 4));
                } else if len >= 2 {
                    mov::<2>(s, d);
                    mov::<2>(s.add(len - 2), d.add(len - 2));
                } else if len == 1 {
                    mov::<1>(s, d);
                }
            } else if len <= 32 {
                mov::<16>(s, d);
                mov::<16>(s.add(len - 16), d.add(len - 16));
            } else if len <= 64 {
                mov::<32>(s, d);
                mov::<32>(s.add(len - 32), d.add(len - 32));
            } else if len < super::REP_FROM {
                let mut i = 0;
                while len - i > 64 {
                    mov::<64>(s.add(i), d.add(i));
                    i += 64;
                }
                mov::<64>(s.add(len - 64), d.add(len - 64));
            } else {
                // Fast-string operation: byte-granular moves the processor may group and
                // reorder (stores to different bytes out of order; relaxed promises no
                // order). DF is clear on entry to an `asm!` block (the Reference) and the
                // instruction leaves it so.
                asm!(
                    "rep movsb",
                    inout("rsi") s => _, inout("rdi") d => _, inout("rcx") len => _,
                    options(nostack, preserves_flags),
                );
            }
        }
    }

    /// As for the byte loop's `copy_from`.
    ///
    /// # Safety
    /// As for `copy_from_shared_raw`.
    #[inline]
    pub(super) unsafe fn copy_from(src: *const u8, dst: *mut u8, len: usize) {
        // SAFETY: the caller's contract; the destination is private.
        unsafe { copy(src, dst, len) }
    }

    /// As for the byte loop's `copy_to`.
    ///
    /// # Safety
    /// As for `copy_to_shared`.
    #[inline]
    pub(super) unsafe fn copy_to(src: *const u8, dst: *mut u8, len: usize) {
        // SAFETY: the caller's contract; the source is private.
        unsafe { copy(src, dst, len) }
    }

    /// As for the byte loop's `fill`: `rep stosb` from `REP_FROM` bytes, below it copies of a
    /// private 64-byte pattern.
    ///
    /// # Safety
    /// As for `fill_shared`.
    #[inline]
    pub(super) unsafe fn fill(dst: *mut u8, len: usize, byte: u8) {
        if len >= super::REP_FROM {
            // SAFETY: `dst..dst + len` valid for writes (the caller); byte stores only, DF
            // clear as above.
            unsafe {
                asm!(
                    "rep stosb",
                    inout("rdi") dst => _, inout("rcx") len => _, in("al") byte,
                    options(nostack, preserves_flags),
                )
            };
            return;
        }
        let pattern = [byte; 64];
        let mut i = 0;
        while len - i > 64 {
            // SAFETY: i + 64 < len; the pattern is private.
            unsafe { copy(pattern.as_ptr(), dst.add(i), 64) };
            i += 64;
        }
        // SAFETY: the rest, at most 64 bytes.
        unsafe { copy(pattern.as_ptr(), dst.add(i), len - i) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + 3) as u8).collect()
    }

    /// The lengths at which the x86_64 copy changes its moves (1, 2, 4, 8, 16, 32, 64 bytes,
    /// the 64-byte loop, `rep movsb` from `REP_FROM`), each with its neighbours.
    /// Under Miri (the byte loop, which has no length classes) a few of them.
    fn edge_lengths() -> Vec<usize> {
        if cfg!(miri) {
            return vec![0, 1, 2, 3, 8, 9, 17, 33, 65];
        }
        let mut v: Vec<usize> = (0..=20).collect();
        for e in [31, 32, 33, 63, 64, 65, 127, 128, 129, 200] {
            v.push(e);
        }
        v.extend([REP_FROM - 1, REP_FROM, REP_FROM + 1, 3 * REP_FROM + 5]);
        v
    }

    #[test]
    fn copies_at_every_alignment() {
        let lens = edge_lengths();
        let max = *lens.iter().max().unwrap();
        let mut mem = vec![0u8; max + 9];
        let src = pattern(max);
        let offsets: &[usize] = if cfg!(miri) {
            &[0, 1, 7]
        } else {
            &[0, 1, 2, 3, 4, 5, 6, 7, 8]
        };
        for &off in offsets {
            for &len in &lens {
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
        let lens = edge_lengths();
        let max = *lens.iter().max().unwrap();
        let mut mem = vec![0u8; max + 16];
        for off in [0, 3, 8] {
            for &len in &lens {
                mem.fill(0);
                // SAFETY: off + len <= max + 16.
                unsafe { fill_shared(mem.as_mut_ptr().add(off), len, 0xab) };
                assert!(mem[..off].iter().all(|&b| b == 0), "before {off} {len}");
                assert!(
                    mem[off..off + len].iter().all(|&b| b == 0xab),
                    "{off} {len}"
                );
                assert!(
                    mem[off + len..].iter().all(|&b| b == 0),
                    "after {off} {len}"
                );
            }
        }
    }

    /// Adversarial, natively on the assembly (under Miri on the byte loop): a thread writes
    /// the bytes just outside a range, one byte at a time through this module, and reads each
    /// back, while another thread copies into and out of the range with every length class.
    /// A copy that touched a byte outside its range — a wider store, a read-modify-write of a
    /// neighbour — would make the neighbour read back an older value.
    #[test]
    fn copies_never_touch_the_neighbours() {
        let lens: Vec<usize> = edge_lengths().into_iter().filter(|&l| l > 0).collect();
        let max = *lens.iter().max().unwrap();
        let rounds = if cfg!(miri) { 1 } else { 40 };
        for &len in &lens {
            // 8 neighbour bytes before the range at offset 8 and 8 after it.
            let mut mem = vec![0u8; len + 16];
            let base = mem.as_mut_ptr().expose_provenance();
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let p = std::ptr::with_exposed_provenance_mut::<u8>(base);
                    let src = pattern(max);
                    let mut out = vec![0u8; len];
                    for _ in 0..rounds {
                        // SAFETY: 8..8 + len is inside `mem`, reached only through this
                        // module until the scope ends.
                        unsafe {
                            copy_to_shared(&src[..len], p.add(8));
                            fill_shared(p.add(8), len, 0x77);
                            copy_from_shared(p.add(8), &mut out);
                            copy_from_shared_raw(p.add(8), out.as_mut_ptr(), len);
                        }
                    }
                    stop.store(true, std::sync::atomic::Ordering::Release);
                });
                s.spawn(|| {
                    let p = std::ptr::with_exposed_provenance_mut::<u8>(base);
                    let mut v = 0u8;
                    loop {
                        let done = stop.load(std::sync::atomic::Ordering::Acquire);
                        v = v.wrapping_add(1);
                        for at in (0..8).chain(len + 8..len + 16) {
                            let mut back = [0u8];
                            // SAFETY: `at` is outside the copies' range, inside `mem`.
                            unsafe {
                                copy_to_shared(&[v], p.add(at));
                                copy_from_shared(p.add(at), &mut back);
                            }
                            assert_eq!(back[0], v, "neighbour {at} of a {len}-byte copy");
                        }
                        if done {
                            break;
                        }
                    }
                });
            });
            assert!(mem[8..8 + len].iter().all(|&b| b == 0x77), "{len}");
        }
    }

    /// Adversarial: a writer flips a whole buffer between two patterns whose bytes all differ
    /// while readers copy overlapping windows of it with every length class. Every byte read
    /// must be one of the two values stored to that byte (an old or a new value: nothing
    /// invented, nothing from another byte).
    #[test]
    fn racing_reads_see_old_or_new_bytes() {
        let lens: Vec<usize> = edge_lengths().into_iter().filter(|&l| l > 0).collect();
        let max = *lens.iter().max().unwrap();
        let n = max + 64;
        let a = pattern(n);
        let b: Vec<u8> = a.iter().map(|x| !x).collect();
        let mut mem = a.clone();
        let base = mem.as_mut_ptr().expose_provenance();
        let rounds = if cfg!(miri) { 1 } else { 200 };
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let p = std::ptr::with_exposed_provenance_mut::<u8>(base);
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    for src in [&b, &a] {
                        // SAFETY: all of `mem`, reached only through this module meanwhile.
                        unsafe { copy_to_shared(src, p) };
                    }
                    if cfg!(miri) {
                        break;
                    }
                }
            });
            s.spawn(|| {
                // Stops the writer however this thread ends (a failed assertion included).
                struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
                impl Drop for Stop<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, std::sync::atomic::Ordering::Release);
                    }
                }
                let _stop = Stop(&stop);
                let p = std::ptr::with_exposed_provenance::<u8>(base);
                let mut out = vec![0u8; max];
                for r in 0..rounds {
                    for &len in &lens {
                        let off = (r * 7 + len) % (n - len + 1);
                        // SAFETY: off + len <= n.
                        unsafe { copy_from_shared(p.add(off), &mut out[..len]) };
                        for (i, &x) in out[..len].iter().enumerate() {
                            let at = off + i;
                            assert!(x == a[at] || x == b[at], "byte {at}: {x:#x}");
                        }
                    }
                }
            });
        });
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
                    // Other move classes, other edges: 2 bytes at 17 (one 2-byte move), 3
                    // at 19 (two overlapping ones), 9 at 20 (overlapping 8-byte moves).
                    copy_to_shared(&[0; 2], p.add(17));
                    fill_shared(p.add(19), 3, 0);
                    copy_to_shared(&[0; 9], p.add(20));
                }
            });
            s.spawn(|| {
                let p = std::ptr::with_exposed_provenance::<u8>(base);
                let mut a = [0u8; 16];
                let mut b = [0u8; 20];
                let mut c = [0u8; 31];
                let mut d = [0u8; 5];
                // SAFETY: as above.
                unsafe {
                    copy_from_shared(p, &mut a);
                    copy_from_shared(p.add(4), &mut b);
                    copy_from_shared(p.add(1), &mut c);
                    copy_from_shared_raw(p.add(3), d.as_mut_ptr(), 5);
                }
                assert_eq!(a[0], 0);
                assert!(a
                    .iter()
                    .chain(&b)
                    .chain(&c)
                    .chain(&d)
                    .all(|&x| x == 0 || x == 0xaa));
            });
        });
        let bytes: Vec<u8> = mem.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(bytes[0], 0);
        assert!(bytes[1..17].iter().all(|&b| b == 0xaa));
        assert!(bytes[17..].iter().all(|&b| b == 0));
    }
}
