//! The memory barriers the mlx5 data path needs, beyond what Rust's atomics give.
//!
//! Rust's fences order memory as other CPUs see it. A PCIe device sits in the outer-shareable
//! domain, so on aarch64 the inner-shareable `dmb ish*` that `fence()` emits is not enough; the
//! Linux kernel uses `dmb oshld` for `dma_rmb()` and `dsb st` for `wmb()`, and rdma-core the
//! same `dsb` forms. On x86-64, DMA to write-back memory is coherent and loads are not
//! reordered with loads, so reading a CQE needs only a compiler barrier (the kernel's
//! `dma_rmb()` is `barrier()`), while ordering a store to write-combining UAR memory after
//! ordinary stores needs `sfence` (rdma-core's `mmio_wc_start()`/`mmio_flush_writes()`).
//!
//! The store barriers also issue the matching Rust fence, so the ordering is visible to the
//! Rust memory model (and to Miri, which runs these paths in the unit tests with a simulated
//! device thread). On the read side the poller's Acquire load of the owner byte is what the
//! memory model sees; `dma_rmb_device` adds only the device-domain part.
#![allow(unsafe_code)]

use std::sync::atomic::{fence, Ordering};

/// What reading a CQE needs after an Acquire load of its owner byte, beyond that Acquire:
/// the device-domain barrier on aarch64 (`dmb oshld`), nothing on x86-64 (DMA is coherent
/// and loads are not reordered with loads). It issues no Rust fence (the Acquire load is what
/// orders the reads for the memory model), so it does not make the compiler forget what it
/// holds in registers.
#[inline(always)]
pub(crate) fn dma_rmb_device() {
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; touches no memory and no registers.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
}

/// Store barrier: ordinary stores (the doorbell record) become visible to the device before
/// any later store to UAR (MMIO) memory (`mmio_wc_start()`).
#[inline(always)]
pub(crate) fn mmio_wmb() {
    fence(Ordering::SeqCst);
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` has no operands and no memory effects beyond ordering stores.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; touches no memory and no registers.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
}

/// Flush write-combining buffers after an MMIO doorbell write so it leaves the CPU promptly
/// and is not merged with a later one (`mmio_flush_writes()`).
#[inline(always)]
pub(crate) fn mmio_flush() {
    mmio_wmb();
}

/// The send path's store barrier, before its first store to UAR memory: the stores before it
/// (WQEs, the doorbell record) reach the device before any later store (`mmio_wc_start()`:
/// `sfence` on x86-64, `dsb st` on aarch64). Unlike [`mmio_wmb`] it orders stores only
/// (store to store is all a doorbell needs: the post path reads nothing the device writes
/// back), so for the Rust memory model it is a Release fence, which emits no instruction on
/// x86-64. The `asm!` blocks have no `nomem` option: the compiler moves no memory access
/// across them either.
#[inline(always)]
pub(crate) fn wc_store_barrier() {
    fence(Ordering::Release);
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` has no operands and no memory effects beyond ordering stores.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: a barrier instruction; touches no memory and no registers.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
}
