//! Doorbells: the QP's doorbell record slots, the UAR doorbell register and BlueFlame (libmlx5
//! `post_send_db`, `mlx5_bf_copy`), and the policy that chooses between them.

#![allow(unsafe_code)]

use std::fmt;
use std::ptr;

use rverbs_uverbs::kernel::sync::SpinLock;
use rverbs_uverbs::Error;

use crate::mlx5::abi::{MLX5_BFREGS_PER_UAR, MLX5_BF_OFFSET};
use crate::mlx5::barrier::wc_store_barrier;

/// Doorbell record slots of a QP (`MLX5_RCV_DBR`, `MLX5_SND_DBR`).
pub(super) const RCV_DBR: usize = 0;
pub(super) const SND_DBR: usize = 1;

/// How posts ring the doorbell (libmlx5's `MLX5_SHUT_UP_BF` / `MLX5_POST_SEND_PREFER_BF`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BfPolicy {
    /// Never use BlueFlame (`MLX5_SHUT_UP_BF=1`).
    pub shut_up_bf: bool,
    /// Use BlueFlame for single non-inline WQEs too (`MLX5_POST_SEND_PREFER_BF`, default on).
    pub prefer_bf: bool,
}

impl Default for BfPolicy {
    fn default() -> Self {
        Self {
            shut_up_bf: false,
            prefer_bf: true,
        }
    }
}

impl BfPolicy {
    /// libmlx5's knobs read from the environment, with libmlx5's defaults.
    pub fn from_env() -> Self {
        let on = |k: &str, default: bool| match std::env::var(k) {
            Ok(v) => v != "0",
            Err(_) => default,
        };
        Self {
            shut_up_bf: on("MLX5_SHUT_UP_BF", false),
            prefer_bf: on("MLX5_POST_SEND_PREFER_BF", true),
        }
    }
}

/// One blue-flame register: the doorbell and BlueFlame buffer of the QPs the kernel gave it.
///
/// Registers other than 0 may be shared by several QPs (the kernel hands out the medium
/// latency ones round robin): the lock keeps one QP's doorbell or BlueFlame copy and the
/// toggle of the buffer half together, as libmlx5's `bf->lock` does.
pub struct BfReg {
    pub(super) reg: *mut u8,
    /// Bytes of one BlueFlame buffer half (`bf_reg_size / 2`), 0 for register 0.
    pub(super) buf_size: usize,
    pub(super) index: u32,
    /// The offset of the BlueFlame half the next ring writes (0 or `buf_size`), under the
    /// lock that also covers the register's stores.
    pub(super) offset: SpinLock<usize>,
}

// SAFETY: `reg` points into a UAR mapping that outlives the register (its constructor's
// contract); it is only written, with volatile stores, under `lock` (or, for register 0, with
// single 64-bit stores).
unsafe impl Send for BfReg {}
// SAFETY: as above.
unsafe impl Sync for BfReg {}

impl fmt::Debug for BfReg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BfReg({}, {:p}, {} B)",
            self.index, self.reg, self.buf_size
        )
    }
}

impl BfReg {
    /// Register `index` (libmlx5 numbering: four per 4 KiB UAR) inside the UAR at `uar`
    /// (`uar_len` bytes mapped from there), with `bf_reg_size`.
    ///
    /// # Safety
    /// `uar..uar + uar_len` must stay mapped and writable as long as this register exists
    /// and nothing may hold a Rust reference into it.
    pub unsafe fn new(
        uar: *mut u8,
        uar_len: usize,
        index: u32,
        bf_reg_size: u32,
    ) -> rverbs_uverbs::Result<Self> {
        let uars = uar;
        let uars_len = uar_len;
        let k = (index % MLX5_BFREGS_PER_UAR) as usize;
        let off = MLX5_BF_OFFSET + k * bf_reg_size as usize;
        let buf_size = if index == 0 {
            0
        } else {
            bf_reg_size as usize / 2
        };
        if k >= 2 || off + 8.max(2 * buf_size) > uars_len {
            return Err(Error::protocol(
                "create QP on mlx5",
                format!(
                    "the kernel gave blue-flame register {index}, outside the {uars_len} bytes of \
                     UAR pages this context mapped"
                ),
            )
            .into());
        }
        Ok(Self {
            // SAFETY: in bounds (checked above).
            reg: unsafe { uars.add(off) },
            buf_size,
            index,
            offset: SpinLock::new(0),
        })
    }

    /// A register at byte `off` of the UAR mapping `uar..uar + uar_len`, with BlueFlame
    /// halves of `buf_size` bytes (0: doorbells only), named `index` in errors and
    /// [`BfReg::index`] (dynamic UARs: the UAR's page id).
    ///
    /// # Safety
    /// As for [`BfReg::new`].
    pub unsafe fn at(
        uar: *mut u8,
        uar_len: usize,
        off: usize,
        buf_size: usize,
        index: u32,
    ) -> rverbs_uverbs::Result<Self> {
        if off + 8.max(2 * buf_size) > uar_len {
            return Err(Error::protocol(
                "map an mlx5 UAR",
                format!("register at {off:#x} lies outside the UAR's {uar_len} bytes"),
            )
            .into());
        }
        Ok(Self {
            // SAFETY: in bounds (checked above).
            reg: unsafe { uar.add(off) },
            buf_size,
            index,
            offset: SpinLock::new(0),
        })
    }

    /// The register's number.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Bytes of one BlueFlame buffer half (0: doorbells only).
    pub fn bf_size(&self) -> usize {
        self.buf_size
    }

    /// Rings: `ctrl` points at the last WQE's control segment, `size16` its size in 16-byte
    /// units; with `bf` BlueFlame copies the WQE (rounded up to 64 bytes, wrapping at `qend`
    /// to `qstart`), else the 64-bit doorbell carries the control segment's first 8 bytes.
    ///
    /// # Safety
    /// `ctrl..` must be a WQE of `size16` units inside the SQ `qstart..qend` (whole 64-byte
    /// blocks); with `bf`, `size16 * 16` must fit [`BfReg::bf_size`].
    #[inline(always)]
    pub(super) unsafe fn ring(
        &self,
        ctrl: *const u8,
        size16: usize,
        bf: bool,
        qstart: *const u8,
        qend: *const u8,
    ) {
        // The lock's Acquire: the previous holder's BlueFlame stores and offset toggle happen
        // before ours.
        let mut offset = self.offset.lock();
        // The doorbell record store (done by the caller) must reach the device before the UAR
        // write: the device may fetch WQEs from memory on the doorbell and checks the record
        // (rdma-core `mmio_wc_start`: `sfence` on x86-64, `dsb st` on aarch64).
        wc_store_barrier();
        let off = *offset;
        // SAFETY: `reg + off` lies in the register (checked in `new`: both halves fit).
        let dst = unsafe { self.reg.add(off) };
        if bf {
            let mut src = ctrl;
            let mut d = dst;
            let end = dst.wrapping_add(size16 * 16);
            loop {
                // SAFETY: `src` walks whole 64-byte blocks of the SQ, wrapping at its end
                // (caller's contract); `d` stays inside the BlueFlame half (size16 * 16 ≤
                // buf_size, rounded up to whole blocks, which buf_size is).
                unsafe {
                    copy_block_to_wc(d, src);
                    src = src.add(64);
                    d = d.add(64);
                }
                if d >= end {
                    break;
                }
                if src == qend {
                    src = qstart;
                }
            }
        } else {
            // SAFETY: `dst` is 8-byte aligned UAR memory; `ctrl` the control segment.
            unsafe {
                let v = ptr::read(ctrl.cast::<u64>());
                ptr::write_volatile(dst.cast::<u64>(), v);
            }
        }
        // Flush the write-combining buffer inside the lock: otherwise another CPU's later
        // doorbell on this register could reach the device first (`mmio_flush_writes`).
        wc_store_barrier();
        *offset = off ^ self.buf_size;
        // The guard's Release (dropped here): our register stores and the toggle happen
        // before the next holder's use.
        drop(offset);
    }
}

/// Copies one 64-byte WQE block to write-combining UAR memory: four 16-byte SSE stores on
/// x86-64 (eight 8-byte volatile stores elsewhere and under Miri), in address order, never a
/// string instruction, whose store order is unspecified (libmlx5 `mlx5_bf_copy`). The block
/// is read first with plain loads: the SQ is ours until the doorbell.
///
/// # Safety
/// `src..src + 64` must be readable, `dst..dst + 64` writable UAR (or test) memory that
/// nothing holds a Rust reference into; `dst` 8-byte aligned.
#[inline(always)]
pub(super) unsafe fn copy_block_to_wc(dst: *mut u8, src: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the caller's contract; `movups` needs no alignment; SSE2 is part of the x86-64
    // baseline. The block has no `nomem`/`readonly` option: the compiler completes the WQE
    // stores before it and treats it as writing memory (as a volatile store).
    unsafe {
        core::arch::asm!(
            "movups {a}, xmmword ptr [{s}]",
            "movups {b}, xmmword ptr [{s} + 16]",
            "movups {c}, xmmword ptr [{s} + 32]",
            "movups {e}, xmmword ptr [{s} + 48]",
            "movups xmmword ptr [{d}], {a}",
            "movups xmmword ptr [{d} + 16], {b}",
            "movups xmmword ptr [{d} + 32], {c}",
            "movups xmmword ptr [{d} + 48], {e}",
            s = in(reg) src,
            d = in(reg) dst,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            e = out(xmm_reg) _,
            options(nostack, preserves_flags),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    // SAFETY: the caller's contract.
    unsafe {
        let b = ptr::read(src.cast::<[u64; 8]>());
        let d8 = dst.cast::<u64>();
        for (i, w) in b.iter().enumerate() {
            ptr::write_volatile(d8.add(i), *w);
        }
    }
}
