//! The mlx5 completion queue as userspace sees it: a CQE ring and a doorbell record in our
//! own memory (the device writes the ring, we write the record), plus the CQ doorbell register
//! in a UAR page (MMIO) for arming.
//!
//! Ownership protocol (as libmlx5 and the kernel's `get_sw_cqe()`): entry `n` of a ring of
//! `ncqe` entries is ours when its opcode is not INVALID and its owner bit equals
//! `(n & ncqe) != 0`; the owner bit the device writes flips on every lap. After consuming
//! entries we tell the device how far we got by writing `ci & 0xffffff` (big-endian) into the
//! first word of the doorbell record; it never overwrites an entry we have not released.
#![allow(unsafe_code)]

use std::fmt;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use rverbs_uverbs::wc::{RawWc, WorkCompletion};
use rverbs_uverbs::Error;

use super::abi::{
    mlx5_ib_create_cq, mlx5_ib_create_cq_resp, MLX5_CQ_ARM_DB, MLX5_CQ_CI_MASK, MLX5_CQ_DB_REQ_NOT,
    MLX5_CQ_DB_REQ_NOT_SOL, MLX5_CQ_DOORBELL, MLX5_CQ_SET_CI,
    MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX, MLX5_MAX_CQ_ENTRIES,
};
use super::barrier::{dma_rmb_device, mmio_flush, mmio_wmb};
use super::cqe::{
    parse_from, parse_req_plain, Cqe64, CqeOpcode, CqeSource, WrIdLookup, CQE64_SIZE, OFF_OP_OWN,
};

const OP: &str = "mlx5 CQ";

/// Size of one CQE slot. With 128-byte CQEs the CQE64 is the second half of each slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CqeSize {
    /// 64-byte CQEs (libmlx5's default).
    #[default]
    B64,
    /// 128-byte CQEs.
    B128,
}

impl CqeSize {
    /// Bytes per slot.
    pub const fn bytes(self) -> usize {
        match self {
            CqeSize::B64 => 64,
            CqeSize::B128 => 128,
        }
    }
}

/// `op_own` of an entry software owns and the device has not written yet: opcode INVALID,
/// owner bit 0 (libmlx5's `mlx5_alloc_cq_buf()` and the kernel's `init_cq_frag_buf()`).
pub const OP_OWN_INIT: u8 = CqeOpcode::INVALID.0 << 4;

/// Entries the ring gets for a request of `cqe` completions: the next power of two above
/// `cqe` (`roundup_pow_of_two(cqe + 1)`, as libmlx5 and the kernel both compute it). The
/// kernel is told `ncqe - 1`, which makes it arrive at the same `ncqe`.
pub fn ring_entries(cqe: u32) -> rverbs_uverbs::Result<u32> {
    if cqe == 0 {
        return Err(Error::invalid(OP, "a CQ needs at least one entry (cqe = 0)").into());
    }
    match cqe.checked_add(1).and_then(u32::checked_next_power_of_two) {
        Some(n) if n <= MLX5_MAX_CQ_ENTRIES => Ok(n),
        _ => Err(Error::invalid(
            OP,
            format!(
                "cqe {cqe} needs a ring above the mlx5 maximum of {MLX5_MAX_CQ_ENTRIES} entries"
            ),
        )
        .into()),
    }
}

/// Anonymous, page-aligned memory that stays at one address until dropped.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl Region {
    /// Maps `len` zeroed bytes.
    pub(crate) fn new(len: usize) -> rverbs_uverbs::Result<Self> {
        use rustix::mm::{mmap_anonymous, MapFlags, ProtFlags};
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks; it aliases
        // nothing. Anonymous memory is zero-filled.
        let p = unsafe {
            mmap_anonymous(
                ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .map_err(|e| Error::os("mmap mlx5 queue buffer", e).with_detail(format!("{len} bytes")))?;
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| Error::protocol("mmap mlx5 queue buffer", "kernel returned NULL"))?;
        Ok(Self { ptr, len })
    }

    /// The start of the memory.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new`, unmapped only here; no
        // reference into it outlives `self` (all access goes through raw pointers held by the
        // owner of this Region).
        let r = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
        if let Err(e) = r {
            tracing::warn!(error = %e, len = self.len, "munmap of mlx5 CQ buffer failed");
        }
    }
}

/// The memory of one mlx5 CQ: `ncqe` CQE slots, page aligned, then the doorbell record (two
/// big-endian u32: SET_CI, ARM) at the start of the following page.
///
/// Every slot's `op_own` starts as [`OP_OWN_INIT`] and the doorbell record as zero. The
/// buffer never moves; it is unmapped on drop, which must not happen while the kernel CQ that
/// was given its addresses still exists (destroy the CQ first).
pub struct CqBuf {
    region: Region,
    ncqe: u32,
    cqe_size: CqeSize,
    dbrec_off: usize,
}

// SAFETY: CqBuf owns its mapping; nothing in it is tied to a thread.
unsafe impl Send for CqBuf {}

impl fmt::Debug for CqBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqBuf")
            .field("buf_addr", &format_args!("{:#x}", self.buf_addr()))
            .field("db_addr", &format_args!("{:#x}", self.db_addr()))
            .field("ncqe", &self.ncqe)
            .field("cqe_size", &self.cqe_size)
            .finish()
    }
}

impl CqBuf {
    /// Allocates and initialises the buffer for a CQ of at least `cqe` entries.
    pub fn new(cqe: u32, cqe_size: CqeSize) -> rverbs_uverbs::Result<Self> {
        let ncqe = ring_entries(cqe)?;
        let page = rustix::param::page_size();
        let ring_bytes = ncqe as usize * cqe_size.bytes();
        let dbrec_off = ring_bytes.div_ceil(page) * page;
        let region = Region::new(dbrec_off + page)?;
        let buf = Self {
            region,
            ncqe,
            cqe_size,
            dbrec_off,
        };
        let tail = cqe_size.bytes() - 1;
        for i in 0..ncqe as usize {
            // SAFETY: slot `i` lies inside the ring (i < ncqe), which lies inside the mapping;
            // nobody else knows the buffer yet.
            unsafe {
                buf.ring_ptr()
                    .add(i * cqe_size.bytes() + tail)
                    .write(OP_OWN_INIT)
            };
        }
        Ok(buf)
    }

    /// Ring entries (a power of two).
    #[cfg(any(test, feature = "internals"))]
    pub fn ncqe(&self) -> u32 {
        self.ncqe
    }

    /// The `cqe` to give the kernel: `ncqe - 1`.
    #[cfg(any(test, feature = "internals"))]
    pub fn kernel_cqe(&self) -> u32 {
        self.ncqe - 1
    }

    /// Bytes per slot.
    #[cfg(any(test, feature = "internals"))]
    pub fn cqe_size(&self) -> CqeSize {
        self.cqe_size
    }

    /// Address of the first slot (`buf_addr`).
    pub fn buf_addr(&self) -> u64 {
        self.region.ptr.as_ptr() as usize as u64
    }

    /// Address of the doorbell record (`db_addr`).
    pub fn db_addr(&self) -> u64 {
        self.buf_addr() + self.dbrec_off as u64
    }

    /// First byte of the ring. Writing it is for simulated devices (tests) only and must
    /// follow the ownership protocol in the module docs.
    pub fn ring_ptr(&self) -> *mut u8 {
        self.region.ptr.as_ptr()
    }

    /// The doorbell record: `[SET_CI, ARM]`, each a big-endian u32.
    pub fn dbrec_ptr(&self) -> *mut u32 {
        // SAFETY: dbrec_off < region.len (a whole page follows the ring).
        unsafe { self.region.ptr.as_ptr().add(self.dbrec_off).cast::<u32>() }
    }

    /// The driver data of CREATE_CQ for this buffer: no CQE compression, no flags unless
    /// a UAR page index is given (then `MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX`). Without an
    /// index the kernel uses the context's first static UAR page, which is what rverbs maps.
    pub fn create_cq_udata(&self, uar_page_index: Option<u16>) -> mlx5_ib_create_cq {
        mlx5_ib_create_cq {
            buf_addr: self.buf_addr(),
            db_addr: self.db_addr(),
            cqe_size: self.cqe_size.bytes() as u32,
            cqe_comp_en: 0,
            cqe_comp_res_format: 0,
            flags: if uar_page_index.is_some() {
                MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX
            } else {
                0
            },
            uar_page_index: uar_page_index.unwrap_or(0),
            reserved0: 0,
            reserved1: 0,
        }
    }
}

/// Reads the CQ number out of the CREATE_CQ driver response (`mlx5_ib_create_cq_resp`).
/// `resp` is what the kernel filled; fewer than 4 bytes is an error.
pub fn parse_create_cq_resp(resp: &[u8]) -> rverbs_uverbs::Result<u32> {
    use zerocopy::FromBytes;
    let mut full = [0u8; core::mem::size_of::<mlx5_ib_create_cq_resp>()];
    if resp.len() < 4 {
        return Err(Error::protocol(
            "mlx5 create CQ",
            format!(
                "driver response of {} bytes has no cqn (need 4 of {})",
                resp.len(),
                full.len()
            ),
        )
        .into());
    }
    let n = resp.len().min(full.len());
    full[..n].copy_from_slice(&resp[..n]);
    let r = mlx5_ib_create_cq_resp::read_from_bytes(&full[..]).map_err(|_| {
        Error::protocol("mlx5 create CQ", "driver response does not fit the struct")
    })?;
    if r.cqn > MLX5_CQ_CI_MASK {
        return Err(Error::protocol(
            "mlx5 create CQ",
            format!("cqn {:#x} does not fit 24 bits", r.cqn),
        )
        .into());
    }
    Ok(r.cqn)
}

/// A UAR page: where the CQ doorbell register lives (`UAR + 0x20`).
///
/// In real use it is an mmap of the uverbs fd (see [`super::context::Mlx5ContextInfo`]); tests
/// point it at ordinary memory. Several CQs of a context share one page: the doorbell is a
/// single 64-bit store, so they need no lock on 64-bit targets.
#[derive(Clone, Copy)]
pub struct UarPage {
    base: NonNull<u8>,
    len: usize,
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
    fn ring_cq_doorbell(&self, value: u64) {
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

/// The ring geometry, cached for the poll path.
#[derive(Clone, Copy, Debug)]
struct Ring {
    /// The CQE64 of slot 0 (the ring start, plus 64 with 128-byte slots).
    cqe0: *mut u8,
    /// One past the last slot's CQE64: `cqe0 + ncqe * stride`.
    end: *mut u8,
    /// Slot size in bytes.
    stride: usize,
    /// log2 of the entry count: `ci >> lap_shift` counts laps, its low bit is the owner
    /// bit software expects.
    lap_shift: u32,
    mask: u32,
    /// log2 of the slot size.
    shift: u32,
    dbrec: *mut u32,
}

/// What an owned entry is, as far as its owner byte tells.
#[derive(Clone, Copy)]
enum Owned {
    /// A requester CQE of the plain format (`op_own` bits 7:2 zero).
    ReqPlain,
    /// Anything else; its `op_own`.
    Other(u8),
}

impl Owned {
    /// Parses the entry `cqe` into `out`.
    #[inline(always)]
    fn parse<L: WrIdLookup>(self, cqe: OwnedCqe, lookup: &mut L, out: &mut WorkCompletion) {
        match self {
            Owned::ReqPlain => parse_req_plain(cqe, lookup, out),
            Owned::Other(op_own) => parse_from(cqe, op_own, lookup, out),
        }
    }
}

/// Where the next entry is: its CQE64, and the owner bit it carries once it is ours (the
/// lap's parity). The poller walks this instead of recomputing both from the index.
#[derive(Clone, Copy)]
struct Cursor {
    cqe: *mut u8,
    parity: u8,
}

/// A CQE64 in the ring that software owns: its owner byte said so and the read barrier is
/// behind us. The parser reads the fields it needs through the raw pointer (plain copies of
/// the bytes; no reference into the ring is formed). Valid until the consumer index is
/// published past the slot, which happens only after parsing.
#[derive(Clone, Copy)]
struct OwnedCqe(*const u8);

impl OwnedCqe {
    /// # Safety
    /// `p` points at a CQE64 (64 bytes, 64-byte aligned) inside a live ring, and the entry is
    /// software-owned for as long as the value is used: the producer does not write the slot
    /// again before the consumer index passes it.
    #[inline(always)]
    unsafe fn at(p: *const u8) -> Self {
        Self(p)
    }
}

impl CqeSource for OwnedCqe {
    #[inline(always)]
    fn u8_at(self, off: usize) -> u8 {
        debug_assert!(off < CQE64_SIZE);
        // SAFETY: off < 64: inside the owned entry (`at`'s contract), which nobody writes
        // while we read it.
        unsafe { self.0.add(off).read() }
    }
    #[inline(always)]
    fn be16_at(self, off: usize) -> u16 {
        debug_assert!(off + 2 <= CQE64_SIZE);
        // SAFETY: as in `u8_at`; unaligned read, so any offset inside the entry is fine.
        u16::from_be(unsafe { self.0.add(off).cast::<u16>().read_unaligned() })
    }
    #[inline(always)]
    fn be32_at(self, off: usize) -> u32 {
        debug_assert!(off + 4 <= CQE64_SIZE);
        // SAFETY: as in `be16_at`.
        u32::from_be(unsafe { self.0.add(off).cast::<u32>().read_unaligned() })
    }
    #[inline(always)]
    fn to_cqe64(self) -> Cqe64 {
        // SAFETY: the whole entry is ours and 64-byte aligned (`at`'s contract).
        unsafe { ptr::read(self.0.cast::<Cqe64>()) }
    }
}

impl Ring {
    /// The CQE64 of consumer index `ci` (its slot is `ci mod ncqe`).
    #[inline(always)]
    fn slot(&self, ci: u32) -> *mut u8 {
        let idx = (ci & self.mask) as usize;
        // SAFETY: idx < ncqe, so the slot and its CQE64 lie inside the ring mapping, which
        // lives as long as the CQ that owns this Ring.
        unsafe { self.cqe0.add(idx << self.shift) }
    }

    /// The cursor of consumer index `ci`.
    #[inline(always)]
    fn cursor(&self, ci: u32) -> Cursor {
        Cursor {
            cqe: self.slot(ci),
            parity: (ci >> self.lap_shift) as u8 & 1,
        }
    }

    /// `at`, or slot 0 of the next lap when `at` is one past the last slot.
    #[inline(always)]
    fn wrap(&self, at: Cursor) -> Cursor {
        if at.cqe == self.end {
            Cursor {
                cqe: self.cqe0,
                parity: at.parity ^ 1,
            }
        } else {
            at
        }
    }

    /// Slots from `at` to the end of the ring (at least 1).
    #[inline(always)]
    fn slots_left(&self, at: Cursor) -> usize {
        (self.end as usize - at.cqe as usize) >> self.shift
    }

    /// The CQE at `at` and what it is, if software owns it: its opcode is not INVALID and
    /// its owner bit matches the lap's parity.
    #[inline(always)]
    fn take(&self, at: Cursor) -> Option<(OwnedCqe, Owned)> {
        // SAFETY: a cursor points at a CQE64 inside the ring (`cursor`; the poll loop steps
        // it by `stride` only while `slots_left` says so, and `wrap` restarts it), so its
        // owner byte is in bounds; u8 has no alignment requirement. The device (or a
        // simulated device thread) writes this byte while we read it, so it is read as an
        // atomic; nothing reads it through a reference.
        let owner_byte = unsafe { AtomicU8::from_ptr(at.cqe.add(OFF_OP_OWN)) };
        // Acquire: the owner byte says the entry is complete, and nothing else of it may be
        // read before that byte was. Pairs with the producer's release of the byte (a
        // simulated device's store; the device's write ordering for a real one), so its
        // writes of the rest of the entry are visible to the reads the parser makes. A load
        // ordering rather than a fence: a fence per entry would make the compiler reload
        // everything it holds from memory (the lookup's tables) for every entry.
        let op_own = owner_byte.load(Ordering::Acquire);
        // Owner bit, solicited bit (ignored), format and opcode: one test finds the commonest
        // entry, an owned requester CQE of the plain format.
        let x = op_own ^ at.parity;
        let kind = if x & 0xfd == 0 {
            Owned::ReqPlain
        } else if x & 1 == 0 && op_own >> 4 != CqeOpcode::INVALID.0 {
            Owned::Other(op_own)
        } else {
            return None;
        };
        // What DMA needs beyond the Acquire (aarch64: `dmb oshld`; nothing on x86-64).
        dma_rmb_device();
        // SAFETY: in bounds and 64-byte aligned (page-aligned ring, 64- or 128-byte slots,
        // CQE64 at offset 0 or 64); software-owned (checked above) until `set_ci` passes it,
        // which the poller does only after parsing.
        Some((unsafe { OwnedCqe::at(at.cqe) }, kind))
    }

    /// Publishes the consumer index: `dbrec[SET_CI] = be32(ci & 0xffffff)`.
    #[inline(always)]
    fn set_ci(&self, ci: u32) {
        // SAFETY: the doorbell record lies inside the CQ mapping and is 4-byte aligned (page
        // start); the device reads it concurrently, so it is written as an atomic.
        let w = unsafe { AtomicU32::from_ptr(self.dbrec.add(MLX5_CQ_SET_CI)) };
        // Release: every read of the entries we consumed happens before the device can see
        // the new index and overwrite those slots.
        w.store((ci & MLX5_CQ_CI_MASK).to_be(), Ordering::Release);
    }
}

/// An mlx5 completion queue: poll, iterate, arm.
///
/// `L` maps a CQE's (QPN, queue, WQE counter) to the `wr_id` ([`WrIdLookup`]): the QP side
/// of rverbs provides it; tests use a table or a closure.
pub struct Mlx5Cq<L> {
    ring: Ring,
    cons_index: u32,
    published: u32,
    arm_sn: u32,
    cqn: u32,
    uar: UarPage,
    lookup: L,
    buf: CqBuf,
}

// SAFETY: the raw pointers in `ring` point into `buf`, which the CQ owns; the UAR page is
// Send. Everything else is plain data.
unsafe impl<L: Send> Send for Mlx5Cq<L> {}

impl<L> fmt::Debug for Mlx5Cq<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlx5Cq")
            .field("cqn", &self.cqn)
            .field("cons_index", &self.cons_index)
            .field("arm_sn", &self.arm_sn)
            .field("buf", &self.buf)
            .field("uar", &self.uar)
            .finish_non_exhaustive()
    }
}

impl<L> Mlx5Cq<L> {
    /// The CQ number.
    #[cfg(any(test, feature = "internals"))]
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The consumer index (entries consumed since creation, wrapping).
    #[cfg(any(test, feature = "internals"))]
    pub fn cons_index(&self) -> u32 {
        self.cons_index
    }

    /// The arm sequence number (events acknowledged, wrapping).
    #[cfg(any(test, feature = "internals"))]
    pub fn arm_sn(&self) -> u32 {
        self.arm_sn
    }

    /// The CQ memory.
    #[cfg(any(test, feature = "internals"))]
    pub fn buf(&self) -> &CqBuf {
        &self.buf
    }

    /// The wr_id lookup.
    pub fn lookup_mut(&mut self) -> &mut L {
        &mut self.lookup
    }
}

impl<L: WrIdLookup> Mlx5Cq<L> {
    /// A CQ over `buf`, known to the device as `cqn`, armed through `uar`.
    pub fn new(buf: CqBuf, cqn: u32, uar: UarPage, lookup: L) -> rverbs_uverbs::Result<Self> {
        if cqn > MLX5_CQ_CI_MASK {
            return Err(Error::invalid(OP, format!("cqn {cqn:#x} does not fit 24 bits")).into());
        }
        let ring = Ring {
            // SAFETY: 0 or 64 bytes into slot 0, inside the ring.
            cqe0: unsafe { buf.ring_ptr().add(buf.cqe_size.bytes() - CQE64_SIZE) },
            // SAFETY: one past the last slot's CQE64, at most 64 bytes past the ring, where
            // the doorbell page follows; never dereferenced.
            end: unsafe {
                buf.ring_ptr().add(
                    buf.ncqe as usize * buf.cqe_size.bytes() + buf.cqe_size.bytes() - CQE64_SIZE,
                )
            },
            stride: buf.cqe_size.bytes(),
            lap_shift: buf.ncqe.trailing_zeros(),
            mask: buf.ncqe - 1,
            shift: buf.cqe_size.bytes().trailing_zeros(),
            dbrec: buf.dbrec_ptr(),
        };
        Ok(Self {
            ring,
            cons_index: 0,
            published: 0,
            arm_sn: 0,
            cqn,
            uar,
            lookup,
            buf,
        })
    }

    /// Polls up to `out.len()` completions into `out`; returns how many. The consumer index
    /// is published once, after the batch. Does not allocate.
    #[inline]
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.walk(
            out,
            #[inline(always)]
            |cqe, kind, lookup, slot| kind.parse(cqe, lookup, slot),
        )
    }

    /// Polls up to `out.len()` completions into `out` as [`RawWc`]s (the kernel's
    /// `ib_uverbs_wc` layout, decoded by the reader): each CQE is parsed as by
    /// [`poll`](Self::poll), `wr_id` looked up, and encoded. The consumer index is published
    /// once, after the batch. Does not allocate.
    #[inline]
    pub fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        self.walk(
            out,
            #[inline(always)]
            |cqe, kind, lookup, slot| {
                let mut wc = WorkCompletion::default();
                kind.parse(cqe, lookup, &mut wc);
                *slot = RawWc::from_work_completion(&wc);
            },
        )
    }

    /// The ring walk of [`poll`](Self::poll) and [`poll_raw`](Self::poll_raw): takes the
    /// software-owned entries in order into `out` through `emit`, then publishes the
    /// consumer index once.
    #[inline(always)]
    fn walk<T>(
        &mut self,
        out: &mut [T],
        mut emit: impl FnMut(OwnedCqe, Owned, &mut L, &mut T),
    ) -> usize {
        let mut n = 0;
        // A local copy keeps the geometry in registers.
        let ring = self.ring;
        let mut at = ring.cursor(self.cons_index);
        'ring: while n < out.len() {
            // Up to the end of the ring, the next slot is simply the one after: no wrap test
            // per entry.
            let rest = &mut out[n..];
            let run = ring.slots_left(at).min(rest.len());
            for (i, slot) in rest[..run].iter_mut().enumerate() {
                // The owner byte is read with Acquire inside `take` (the device writes the
                // entry, then its owner byte); the entry is read by copy from then on.
                let Some((cqe, kind)) = ring.take(at) else {
                    n += i;
                    break 'ring;
                };
                emit(cqe, kind, &mut self.lookup, slot);
                at.cqe = at.cqe.wrapping_add(ring.stride);
            }
            n += run;
            at = ring.wrap(at);
        }
        self.cons_index = self.cons_index.wrapping_add(n as u32);
        // Release inside `publish` (set_ci): our copies of the entries happen before the
        // device may see their slots free.
        self.publish();
        n
    }

    /// A borrowing iterator over the completions that are ready. It publishes the consumer
    /// index once, when dropped (or at [`CqIter::sync`]). mlx5 has no producer index to read:
    /// the iterator stops at the first entry the device has not written.
    #[cfg(any(test, feature = "internals"))]
    pub fn iter(&mut self) -> CqIter<'_, L> {
        CqIter { cq: self }
    }

    /// Requests an event for the next completion (`solicited`: the next solicited or error
    /// completion): writes the arm word into the doorbell record, then the CQ doorbell.
    ///
    /// As with every verbs CQ, poll once more after arming: completions that arrived before
    /// the arm do not raise an event.
    pub fn arm(&mut self, solicited: bool) {
        let word = self.arm_word(solicited);
        // SAFETY: the doorbell record is inside the CQ mapping, 4-byte aligned; the device
        // reads it concurrently, so it is written as an atomic.
        let arm = unsafe { AtomicU32::from_ptr(self.ring.dbrec.add(MLX5_CQ_ARM_DB)) };
        arm.store(word.to_be(), Ordering::Relaxed);
        // The record must be visible to the device before the doorbell that makes it look.
        mmio_wmb();
        self.uar
            .ring_cq_doorbell(((word as u64) << 32) | self.cqn as u64);
        mmio_flush();
    }

    /// The arm word `arm` writes: `sn << 28 | cmd | ci`, with `sn = arm_sn & 3`,
    /// `cmd` = [`MLX5_CQ_DB_REQ_NOT_SOL`] or [`MLX5_CQ_DB_REQ_NOT`], `ci` the low 24 bits of
    /// the consumer index. The UAR doorbell is this word in its high 32 bits and the CQN below.
    pub fn arm_word(&self, solicited: bool) -> u32 {
        let sn = self.arm_sn & 3;
        let cmd = if solicited {
            MLX5_CQ_DB_REQ_NOT_SOL
        } else {
            MLX5_CQ_DB_REQ_NOT
        };
        (sn << 28) | cmd | (self.cons_index & MLX5_CQ_CI_MASK)
    }

    /// Removes the entries software owns that `remove` picks, keeping the others in order, as
    /// libmlx5's `__mlx5_cq_clean` does when a QP is moved to RESET or destroyed; returns how
    /// many were removed.
    ///
    /// The entries looked at run from the consumer index to the first one the device has not
    /// written, at most `ncqe - 1` of them (libmlx5 stops one short of a full ring). From the
    /// newest back to the oldest, a removed entry counts one more hole, and a kept entry is
    /// copied `holes` slots forward (the whole slot, 64 or 128 bytes), keeping the owner bit
    /// of the slot it lands in. Then the consumer index moves past the holes and is
    /// published (Release: the copies are done before the device may reuse the slots). The
    /// entries the device writes meanwhile are not looked at: they come after the range.
    /// `remove` sees each entry once, newest first.
    pub fn clean(&mut self, mut remove: impl FnMut(&Cqe64) -> bool) -> u32 {
        let ring = self.ring;
        let start = self.cons_index;
        let mut prod = start;
        while ring.take(ring.cursor(prod)).is_some() {
            if prod == start.wrapping_add(ring.mask) {
                break;
            }
            prod = prod.wrapping_add(1);
        }
        // Bytes before the CQE64 in a slot (64 with 128-byte slots).
        let lead = ring.stride - CQE64_SIZE;
        let mut holes = 0u32;
        while prod != start {
            prod = prod.wrapping_sub(1);
            // SAFETY: `prod` is in [start, end of the owned run): `take` found the entry
            // software-owned (Acquire), and the device writes it again only after the
            // consumer index has passed it, which happens below, after this copy.
            let cqe = unsafe { OwnedCqe::at(ring.slot(prod)) }.to_cqe64();
            if remove(&cqe) {
                holes += 1;
            } else if holes > 0 {
                let dst64 = ring.slot(prod.wrapping_add(holes));
                // SAFETY: both slots lie in the ring (`slot` masks the index; the slot starts
                // `lead` bytes before its CQE64) and are distinct; both are software-owned
                // (the destination lies between this entry and the end of the owned run), so
                // nobody else reads or writes them now; no reference is formed.
                unsafe {
                    let owner = dst64.add(OFF_OP_OWN).read() & 1;
                    ptr::copy_nonoverlapping(
                        ring.slot(prod).sub(lead),
                        dst64.sub(lead),
                        ring.stride,
                    );
                    let op_own = dst64.add(OFF_OP_OWN);
                    op_own.write((op_own.read() & !1) | owner);
                }
            }
        }
        if holes > 0 {
            self.cons_index = self.cons_index.wrapping_add(holes);
            // Release inside `publish`: the copies above happen before the device can see
            // the slots behind the new consumer index as free.
            self.publish();
        }
        holes
    }

    /// Acknowledges one completion event read from the completion channel: advances the arm
    /// sequence number, so the next arm is a new request (libmlx5's `mlx5_cq_event()`).
    pub fn ack_event(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }

    /// Takes the next CQE if software owns it.
    #[inline(always)]
    #[cfg(any(test, feature = "internals"))]
    fn next(&mut self) -> Option<WorkCompletion> {
        let (cqe, kind) = self.ring.take(self.ring.cursor(self.cons_index))?;
        let mut wc = WorkCompletion::default();
        kind.parse(cqe, &mut self.lookup, &mut wc);
        self.cons_index = self.cons_index.wrapping_add(1);
        Some(wc)
    }

    #[inline(always)]
    fn publish(&mut self) {
        if self.published != self.cons_index {
            self.ring.set_ci(self.cons_index);
            self.published = self.cons_index;
        }
    }
}

/// Iterator over ready completions; see [`Mlx5Cq::iter`].
#[cfg(any(test, feature = "internals"))]
pub struct CqIter<'a, L: WrIdLookup> {
    cq: &'a mut Mlx5Cq<L>,
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> CqIter<'_, L> {
    /// Publishes the consumer index now (the device may reuse the slots consumed so far).
    pub fn sync(&mut self) {
        self.cq.publish();
    }
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> Iterator for CqIter<'_, L> {
    type Item = WorkCompletion;

    #[inline]
    fn next(&mut self) -> Option<WorkCompletion> {
        self.cq.next()
    }
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> Drop for CqIter<'_, L> {
    fn drop(&mut self) {
        self.cq.publish();
    }
}

#[cfg(any(test, feature = "internals"))]
impl<L: WrIdLookup> fmt::Debug for CqIter<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqIter").field("cq", &self.cq).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mlx5::cqe::WqeRef;
    use rverbs_uverbs::wc::{WcOpcode, WcStatus};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    /// A device's view of the ring: writes entries with the owner-bit protocol.
    struct Dev {
        ring: *mut u8,
        dbrec: *mut u32,
        ncqe: u32,
        slot: usize,
        pi: u32,
    }
    // SAFETY: test-only; the pointers stay valid while the CQ lives (joined before drop).
    unsafe impl Send for Dev {}

    impl Dev {
        fn of<L>(cq: &Mlx5Cq<L>) -> Dev {
            Dev {
                ring: cq.buf().ring_ptr(),
                dbrec: cq.buf().dbrec_ptr(),
                ncqe: cq.buf().ncqe(),
                slot: cq.buf().cqe_size().bytes(),
                pi: 0,
            }
        }
        /// Consumer index the device reads from the doorbell record.
        fn ci(&self) -> u32 {
            // SAFETY: dbrec is inside the live CQ mapping.
            let v = unsafe { AtomicU32::from_ptr(self.dbrec) }.load(Ordering::Acquire);
            u32::from_be(v)
        }
        fn has_room(&self) -> bool {
            (self.pi.wrapping_sub(self.ci()) & MLX5_CQ_CI_MASK) < self.ncqe
        }
        /// Writes `body` (op_own's opcode taken from body[63]) as entry `pi`.
        fn push(&mut self, body: [u8; 64]) {
            assert!(
                self.has_room(),
                "device would overwrite an unconsumed entry"
            );
            let idx = (self.pi & (self.ncqe - 1)) as usize;
            let owner = (self.pi & self.ncqe != 0) as u8;
            // SAFETY: the slot is inside the ring; the consumer released it (has_room) and
            // reads only its op_own byte (atomically) until we release it below.
            unsafe {
                let cqe = self.ring.add(idx * self.slot + self.slot - 64);
                ptr::copy_nonoverlapping(body.as_ptr(), cqe, 63);
                AtomicU8::from_ptr(cqe.add(63)).store((body[63] & !1) | owner, Ordering::Release);
            }
            self.pi = self.pi.wrapping_add(1);
        }
    }

    fn uar_mem() -> (*mut u64, UarPage) {
        let p = Box::into_raw(Box::new([0u64; 8])).cast::<u64>();
        // SAFETY: 64 bytes of test memory, reached only through raw pointers, freed by
        // `free_uar` after the CQ is gone.
        let uar = unsafe { UarPage::new(p.cast(), 64) }.unwrap();
        (p, uar)
    }
    fn free_uar(p: *mut u64) {
        // SAFETY: made by Box::into_raw in uar_mem; no CQ uses it any more.
        drop(unsafe { Box::from_raw(p.cast::<[u64; 8]>()) });
    }

    /// A requester SEND CQE for (qpn, wqe_counter).
    fn send_cqe(qpn: u32, ctr: u16) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[56..60].copy_from_slice(&((0x0a << 24) | qpn).to_be_bytes());
        b[60..62].copy_from_slice(&ctr.to_be_bytes());
        b[63] = CqeOpcode::REQ.0 << 4;
        b
    }

    fn by_counter(w: WqeRef) -> Option<u64> {
        Some(((w.qpn as u64) << 16) | w.wqe_counter as u64)
    }
    type Lk = fn(WqeRef) -> Option<u64>;

    fn new_cq(cqe: u32, size: CqeSize) -> (Mlx5Cq<Lk>, *mut u64) {
        let (p, uar) = uar_mem();
        let buf = CqBuf::new(cqe, size).unwrap();
        (Mlx5Cq::new(buf, 0x42, uar, by_counter as Lk).unwrap(), p)
    }

    #[test]
    fn mlx5_ring_entries_rounding() {
        assert_eq!(ring_entries(1).unwrap(), 2);
        assert_eq!(ring_entries(2).unwrap(), 4);
        assert_eq!(ring_entries(3).unwrap(), 4);
        assert_eq!(ring_entries(4).unwrap(), 8);
        assert_eq!(ring_entries(255).unwrap(), 256);
        assert_eq!(ring_entries((1 << 24) - 1).unwrap(), 1 << 24);
        for bad in [0, 1 << 24, u32::MAX] {
            let e = ring_entries(bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad}: {e}");
        }
    }

    #[test]
    fn mlx5_buffer_init_and_create_udata() {
        for size in [CqeSize::B64, CqeSize::B128] {
            let b = CqBuf::new(5, size).unwrap();
            assert_eq!(b.ncqe(), 8);
            assert_eq!(b.kernel_cqe(), 7);
            let page = rustix::param::page_size() as u64;
            assert_eq!(b.buf_addr() % page, 0);
            assert_eq!(b.db_addr() % page, 0);
            assert!(b.db_addr() >= b.buf_addr() + 8 * size.bytes() as u64);
            for i in 0..8 * size.bytes() {
                // SAFETY: inside the ring; single-threaded.
                let v = unsafe { b.ring_ptr().add(i).read() };
                let want = if i % size.bytes() == size.bytes() - 1 {
                    0xf0
                } else {
                    0
                };
                assert_eq!(v, want, "byte {i} of a {size:?} ring");
            }
            // SAFETY: the two doorbell words; single-threaded.
            unsafe {
                assert_eq!(b.dbrec_ptr().read(), 0);
                assert_eq!(b.dbrec_ptr().add(1).read(), 0);
            }
            let u = b.create_cq_udata(None);
            assert_eq!(u.buf_addr, b.buf_addr());
            assert_eq!(u.db_addr, b.db_addr());
            assert_eq!(u.cqe_size, size.bytes() as u32);
            assert_eq!((u.cqe_comp_en, u.flags, u.uar_page_index), (0, 0, 0));
            let u = b.create_cq_udata(Some(9));
            assert_eq!(
                (u.flags, u.uar_page_index),
                (MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX, 9)
            );
        }
    }

    #[test]
    fn mlx5_create_cq_resp() {
        let mut r = [0u8; 8];
        r[..4].copy_from_slice(&0x12_3456u32.to_ne_bytes());
        assert_eq!(parse_create_cq_resp(&r).unwrap(), 0x12_3456);
        assert_eq!(parse_create_cq_resp(&0x77u32.to_ne_bytes()).unwrap(), 0x77);
        let e = parse_create_cq_resp(&[1, 2, 3]).unwrap_err();
        assert!(e.to_string().contains("3 bytes"), "{e}");
        assert!(parse_create_cq_resp(&0x0100_0000u32.to_ne_bytes()).is_err());
    }

    #[test]
    fn mlx5_poll_batches_and_publishes_ci_once() {
        for size in [CqeSize::B64, CqeSize::B128] {
            let (mut cq, p) = new_cq(3, size); // ncqe 4
            let mut dev = Dev::of(&cq);
            let mut out = [WorkCompletion::default(); 3];
            assert_eq!(cq.poll(&mut out), 0);
            assert_eq!(dev.ci(), 0);
            for lap in 0..3u16 {
                for k in 0..4u16 {
                    dev.push(send_cqe(7, lap * 4 + k));
                }
                assert!(!dev.has_room());
                assert_eq!(cq.poll(&mut out), 3);
                assert_eq!(dev.ci(), lap as u32 * 4 + 3);
                for (k, wc) in out.iter().enumerate() {
                    assert_eq!(wc.wr_id, (7 << 16) | (lap as u64 * 4 + k as u64));
                    assert_eq!(wc.status, WcStatus::SUCCESS);
                    assert_eq!(wc.opcode, WcOpcode::SEND);
                }
                assert_eq!(cq.poll(&mut out), 1);
                assert_eq!(out[0].wr_id, (7 << 16) | (lap as u64 * 4 + 3));
                assert_eq!(cq.poll(&mut out), 0, "stale entries of the previous lap");
                assert_eq!(dev.ci(), (lap as u32 + 1) * 4);
            }
            drop(cq);
            free_uar(p);
        }
    }

    /// An mlx5 CQ behind the core's seam, as the mlx5 driver puts it.
    #[derive(Debug)]
    struct Ops(Mlx5Cq<Lk>);
    impl rverbs_uverbs::driver::CqOps for Ops {
        fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
            self.0.poll(out)
        }
        fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
            self.0.poll_raw(out)
        }
    }

    /// `CqView` over the mlx5 fixture ring (the seam's `poll_raw`): batches of the slots'
    /// length, the consumer index published per batch, fields equal to `poll`'s, iteration
    /// across batches and laps.
    #[test]
    fn mlx5_cq_view_batches_and_decodes() {
        use rverbs_uverbs::cq::CqView;
        let (cq, p) = new_cq(3, CqeSize::B64); // ncqe 4
        let mut dev = Dev::of(&cq);
        let mut ops = Ops(cq);
        let mut slots = [RawWc::default(); 3];
        for lap in 0..3u16 {
            for k in 0..4u16 {
                dev.push(send_cqe(9, lap * 4 + k));
            }
            let mut view = CqView::from_ops(&mut ops, &mut slots);
            assert_eq!(view.len(), 3);
            assert_eq!(
                dev.ci(),
                lap as u32 * 4 + 3,
                "first batch published when copied"
            );
            for (k, w) in view.completions().iter().enumerate() {
                assert_eq!(w.wr_id(), (9 << 16) | (lap as u64 * 4 + k as u64));
                assert!(w.is_success());
                assert_eq!(w.opcode(), WcOpcode::SEND);
                assert_eq!(w.imm(), None);
            }
            let ids: Vec<u64> = view.by_ref().map(|w| w.wr_id() & 0xffff).collect();
            assert_eq!(
                ids,
                (lap as u64 * 4..lap as u64 * 4 + 4).collect::<Vec<_>>()
            );
            assert_eq!(dev.ci(), (lap as u32 + 1) * 4);
            assert_eq!(view.next_batch(), 0);
        }
        drop(ops);
        free_uar(p);
    }

    #[test]
    fn mlx5_owner_bit_and_invalid_opcode_gate_ownership() {
        let (mut cq, p) = new_cq(1, CqeSize::B64); // ncqe 2
        let ring = cq.buf().ring_ptr();
        let mut out = [WorkCompletion::default(); 2];
        // A valid opcode with the owner bit of the *next* lap is not ours yet.
        let mut b = send_cqe(1, 0);
        b[63] |= 1;
        // SAFETY: single-threaded writes into slot 0.
        unsafe { ptr::copy_nonoverlapping(b.as_ptr(), ring, 64) };
        assert_eq!(cq.poll(&mut out), 0);
        // INVALID opcode with the right owner bit is not ours either.
        // SAFETY: as above.
        unsafe { ring.add(63).write(0xf0) };
        assert_eq!(cq.poll(&mut out), 0);
        // SAFETY: as above.
        unsafe { ring.add(63).write(0x00) };
        assert_eq!(cq.poll(&mut out), 1);
        assert_eq!(cq.cons_index(), 1);
        drop(cq);
        free_uar(p);
    }

    #[test]
    fn mlx5_iterator_publishes_on_drop_and_sync() {
        let (mut cq, p) = new_cq(7, CqeSize::B64); // ncqe 8
        let mut dev = Dev::of(&cq);
        for k in 0..5 {
            dev.push(send_cqe(3, k));
        }
        {
            let mut it = cq.iter();
            assert_eq!(it.next().unwrap().wr_id, 3 << 16);
            assert_eq!(it.next().unwrap().wr_id, (3 << 16) | 1);
            assert_eq!(dev.ci(), 0, "nothing published mid-iteration");
            it.sync();
            assert_eq!(dev.ci(), 2);
            assert_eq!(it.by_ref().count(), 3);
            assert_eq!(dev.ci(), 2);
        }
        assert_eq!(dev.ci(), 5);
        assert_eq!(cq.iter().count(), 0);
        drop(cq);
        free_uar(p);
    }

    #[test]
    fn mlx5_arm_words_and_sequence() {
        let (mut cq, p) = new_cq(3, CqeSize::B64);
        let mut dev = Dev::of(&cq);
        let dbrec = cq.buf().dbrec_ptr();
        // SAFETY: test memory / doorbell record, read single-threaded between calls.
        let read = || unsafe {
            (
                u32::from_be(dbrec.add(1).read()),
                u64::from_be(p.add(MLX5_CQ_DOORBELL / 8).read()),
            )
        };
        cq.arm(false);
        assert_eq!(read(), (0, 0x42));
        cq.arm(true);
        assert_eq!(read(), (1 << 24, (1u64 << 56) | 0x42));
        dev.push(send_cqe(1, 0));
        dev.push(send_cqe(1, 1));
        let mut out = [WorkCompletion::default(); 4];
        assert_eq!(cq.poll(&mut out), 2);
        cq.ack_event();
        cq.arm(false);
        assert_eq!(read(), ((1 << 28) | 2, (((1u64 << 28) | 2) << 32) | 0x42));
        for _ in 0..3 {
            cq.ack_event();
        }
        assert_eq!(cq.arm_sn(), 4);
        cq.arm(true);
        // sn wraps at 4: back to 0.
        assert_eq!(read(), ((1 << 24) | 2, (((1u64 << 24) | 2) << 32) | 0x42));
        cq.ack_event();
        cq.ack_event();
        cq.ack_event();
        assert_eq!(cq.arm_word(false), (3 << 28) | 2);
        drop(cq);
        free_uar(p);
    }

    #[test]
    fn mlx5_uar_page_checks() {
        let mut mem = [0u64; 8];
        let base = mem.as_mut_ptr().cast::<u8>();
        // SAFETY: the constructor only checks; nothing is written.
        unsafe {
            assert!(UarPage::new(ptr::null_mut(), 4096).is_err());
            assert!(UarPage::new(base, 0x27).is_err());
            assert!(UarPage::new(base.add(1), 0x30).is_err());
            assert!(UarPage::new(base, 0x28).is_ok());
        }
    }

    #[test]
    fn mlx5_cqn_must_fit_24_bits() {
        let (p, uar) = uar_mem();
        let buf = CqBuf::new(1, CqeSize::B64).unwrap();
        assert!(Mlx5Cq::new(buf, 1 << 24, uar, by_counter as Lk).is_err());
        free_uar(p);
    }

    /// A device thread producing into a small ring while the consumer polls: nothing lost,
    /// duplicated or read before it was written (Miri checks the last one for data races).
    #[test]
    fn mlx5_sim_device_thread_small() {
        let total: u32 = if cfg!(miri) { 20 } else { 5000 };
        let (mut cq, p) = new_cq(3, CqeSize::B128); // ncqe 4: a wrap every 4 entries
        let mut dev = Dev::of(&cq);
        let done = Arc::new(AtomicBool::new(false));
        let d2 = done.clone();
        let t = std::thread::spawn(move || {
            let mut n = 0u32;
            while n < total {
                if dev.has_room() {
                    let mut b = send_cqe(5, n as u16);
                    b[44..48].copy_from_slice(&n.to_be_bytes());
                    dev.push(b);
                    n += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            d2.store(true, Ordering::Release);
        });
        let mut out = [WorkCompletion::default(); 3];
        let mut next = 0u64;
        while next < total as u64 {
            let k = cq.poll(&mut out);
            for wc in &out[..k] {
                assert_eq!(wc.wr_id, (5 << 16) | (next & 0xffff));
                next += 1;
            }
            if k == 0 {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
        assert!(done.load(Ordering::Acquire));
        assert_eq!(cq.poll(&mut out), 0);
        drop(cq);
        free_uar(p);
    }

    /// The first 64 bytes of slot `ci` (test memory, single-threaded callers).
    fn lead_bytes(cq: &Mlx5Cq<Lk>, ci: u32) -> *mut u8 {
        let size = cq.buf().cqe_size().bytes();
        let idx = (ci & (cq.buf().ncqe() - 1)) as usize;
        // SAFETY: inside the ring.
        unsafe { cq.buf().ring_ptr().add(idx * size) }
    }

    #[test]
    fn mlx5_clean_drops_one_qps_entries_and_keeps_the_others_in_order() {
        for size in [CqeSize::B64, CqeSize::B128] {
            let (mut cq, p) = new_cq(3, size); // ncqe 4
            let mut dev = Dev::of(&cq);
            let mut out = [WorkCompletion::default(); 4];
            // Move the consumer index to slot 2, so the entries below cross the wrap.
            dev.push(send_cqe(2, 0));
            dev.push(send_cqe(2, 1));
            assert_eq!(cq.poll(&mut out), 2);
            // Nothing to clean: nothing changes, nothing is published.
            assert_eq!(cq.clean(|_| true), 0);
            assert_eq!(dev.ci(), 2);
            dev.push(send_cqe(1, 0)); // ci 2, slot 2
            dev.push(send_cqe(2, 2)); // ci 3, slot 3
            dev.push(send_cqe(1, 1)); // ci 4, slot 0 (owner bit 1)
            if size == CqeSize::B128 {
                // SAFETY: slot 3's first half, software-owned; single-threaded.
                unsafe { lead_bytes(&cq, 3).write(0x5a) };
            }
            let mut seen = Vec::new();
            let removed = cq.clean(|c| {
                seen.push((c.qpn(), c.wqe_counter()));
                c.qpn() == 1
            });
            assert_eq!(removed, 2, "{size:?}");
            // Newest first, each once.
            assert_eq!(seen, [(1, 1), (2, 2), (1, 0)], "{size:?}");
            // The kept entry moved to slot 0 with the whole slot, keeping slot 0's owner bit.
            assert_eq!(cq.cons_index(), 4);
            assert_eq!(dev.ci(), 4, "{size:?}: the consumer index is published");
            if size == CqeSize::B128 {
                // SAFETY: slot 0's first half; single-threaded.
                assert_eq!(unsafe { lead_bytes(&cq, 4).read() }, 0x5a);
            }
            assert_eq!(cq.poll(&mut out), 1);
            assert_eq!(out[0].wr_id, (2 << 16) | 2);
            assert_eq!(out[0].qp_num, 2);
            assert_eq!(cq.poll(&mut out), 0);
            // The device goes on where it was; the freed slots are reused.
            for c in 3..6 {
                dev.push(send_cqe(2, c));
            }
            assert_eq!(cq.poll(&mut out), 3);
            let ids: Vec<u64> = out[..3].iter().map(|w| w.wr_id & 0xffff).collect();
            assert_eq!(ids, [3, 4, 5]);
            drop(cq);
            free_uar(p);
        }
    }

    #[test]
    fn mlx5_clean_looks_at_ncqe_minus_one_entries_as_libmlx5() {
        let (mut cq, p) = new_cq(3, CqeSize::B64);
        let mut dev = Dev::of(&cq);
        for c in 0..4 {
            dev.push(send_cqe(1, c));
        }
        // A full ring: libmlx5's scan stops one short, so the newest entry stays.
        assert_eq!(cq.clean(|c| c.qpn() == 1), 3);
        let mut out = [WorkCompletion::default(); 4];
        assert_eq!(cq.poll(&mut out), 1);
        assert_eq!(out[0].wr_id, (1 << 16) | 3);
        // Removing nothing leaves the ring as it was.
        dev.push(send_cqe(2, 0));
        assert_eq!(cq.clean(|_| false), 0);
        assert_eq!(dev.ci(), 4);
        assert_eq!(cq.poll(&mut out), 1);
        drop(cq);
        free_uar(p);
    }

    /// A device thread writes entries of two QPs while the consumer polls and cleans one of
    /// them: every entry of the other arrives once, in order; each entry of the cleaned QP
    /// is either polled or removed, once. (Miri: the clean's reads and moves race with
    /// nothing the device does.)
    #[test]
    fn mlx5_clean_while_the_device_writes() {
        let total: u32 = if cfg!(miri) { 24 } else { 6000 };
        let (mut cq, p) = new_cq(7, CqeSize::B64);
        let mut dev = Dev::of(&cq);
        let t = std::thread::spawn(move || {
            let mut n = 0u32;
            while n < total {
                if dev.has_room() {
                    let qpn = if n % 3 == 0 { 1 } else { 2 };
                    dev.push(send_cqe(qpn, n as u16));
                    n += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let want1 = (0..total).filter(|n| n % 3 == 0).count() as u32;
        let mut out = [WorkCompletion::default(); 2];
        let (mut next2, mut got1, mut removed1) = (1u32, 0u32, 0u32);
        let mut seen1 = std::collections::HashSet::new();
        while next2 < total || got1 + removed1 < want1 {
            let k = cq.poll(&mut out);
            for wc in &out[..k] {
                let ctr = (wc.wr_id & 0xffff) as u32;
                if wc.qp_num == 2 {
                    assert_eq!(ctr, next2 & 0xffff);
                    next2 += if next2 % 3 == 2 { 2 } else { 1 };
                } else {
                    assert!(seen1.insert(ctr), "QP 1 entry {ctr} seen twice");
                    got1 += 1;
                }
            }
            removed1 += cq.clean(|c| {
                if c.qpn() == 1 {
                    assert!(seen1.insert(u32::from(c.wqe_counter())), "removed twice");
                }
                c.qpn() == 1
            });
            if k == 0 {
                std::thread::yield_now();
            }
        }
        t.join().unwrap();
        assert_eq!(got1 + removed1, want1);
        assert_eq!(cq.poll(&mut out), 0);
        drop(cq);
        free_uar(p);
    }
}
