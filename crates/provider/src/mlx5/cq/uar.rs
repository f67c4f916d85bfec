//! The CQ doorbell register in a UAR page: arming (request notification) with the doorbell
//! record and one 64-bit MMIO store.

#![allow(unsafe_code)]

use std::fmt;
use std::ptr::{self, NonNull};

use rverbs_uverbs::Error;

use crate::mlx5::abi::MLX5_CQ_DOORBELL;

/// A UAR page: where the CQ doorbell register lives (`UAR + 0x20`).
///
/// In real use it is an mmap of the uverbs fd (see [`crate::mlx5::context::Mlx5ContextInfo`]); tests
/// point it at ordinary memory. Several CQs of a context share one page: the doorbell is a
/// single 64-bit store, so they need no lock on 64-bit targets.
#[derive(Clone, Copy)]
pub struct UarPage {
    pub(super) base: NonNull<u8>,
    pub(super) len: usize,
}

// SAFETY: the page is only written with single volatile stores of whole doorbell words; the
// constructor's contract makes it valid from any thread.
unsafe impl Send for UarPage {}
// SAFETY: as above; `&UarPage` gives no read access.
unsafe impl Sync for UarPage {}

impl fmt::Debug for UarPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UarPage({:p}, {} bytes)", self.base, self.len)
    }
}

impl UarPage {
    /// Wraps the memory at `base..base + len`.
    ///
    /// # Safety
    /// That memory must stay mapped and writable for as long as this value, its copies and
    /// every CQ given one exist, and nothing may hold a Rust reference into it while a CQ
    /// rings the doorbell (it is device memory, or test memory reached through raw pointers).
    pub unsafe fn new(base: *mut u8, len: usize) -> rverbs_uverbs::Result<Self> {
        let base = NonNull::new(base)
            .ok_or_else(|| Error::invalid("mlx5 UAR", "UAR page address is NULL"))?;
        if len < MLX5_CQ_DOORBELL + 8 {
            return Err(Error::invalid(
                "mlx5 UAR",
                format!(
                    "UAR mapping of {len} bytes does not reach the CQ doorbell at {MLX5_CQ_DOORBELL:#x}"
                ),
            )
            .into());
        }
        if (base.as_ptr() as usize + MLX5_CQ_DOORBELL) % 8 != 0 {
            return Err(Error::invalid(
                "mlx5 UAR",
                format!("UAR page at {base:p}: CQ doorbell not 8-byte aligned"),
            )
            .into());
        }
        Ok(Self { base, len })
    }

    /// Stores the 64-bit doorbell `value` big-endian at `UAR + 0x20`, in one access on 64-bit
    /// targets (like rdma-core's `mmio_write64_be`).
    #[inline]
    pub(super) fn ring_cq_doorbell(&self, value: u64) {
        // SAFETY: in bounds and 8-byte aligned (checked in `new`); the memory is valid for
        // writes per `new`'s contract. Volatile: the store is an MMIO write the compiler must
        // neither drop nor merge.
        unsafe {
            let p = self.base.as_ptr().add(MLX5_CQ_DOORBELL);
            #[cfg(target_pointer_width = "64")]
            ptr::write_volatile(p.cast::<u64>(), value.to_be());
            #[cfg(not(target_pointer_width = "64"))]
            {
                // Two 32-bit halves, high word first, as rdma-core does without 64-bit MMIO.
                static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
                let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
                ptr::write_volatile(p.cast::<u32>(), ((value >> 32) as u32).to_be());
                ptr::write_volatile(p.add(4).cast::<u32>(), (value as u32).to_be());
            }
        }
    }
}
