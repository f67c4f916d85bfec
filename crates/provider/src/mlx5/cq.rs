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

use rverbs_uverbs::wc::WorkCompletion;
use rverbs_uverbs::Error;

use super::abi::{
    mlx5_ib_create_cq, mlx5_ib_create_cq_resp, MLX5_CQ_ARM_DB, MLX5_CQ_CI_MASK, MLX5_CQ_DB_REQ_NOT,
    MLX5_CQ_DB_REQ_NOT_SOL, MLX5_CQ_DOORBELL, MLX5_CQ_SET_CI,
    MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX, MLX5_MAX_CQ_ENTRIES,
};
use super::barrier::{dma_rmb, mmio_flush, mmio_wmb};
use super::cqe::{parse_cqe, Cqe64, CqeOpcode, WrIdLookup, CQE64_SIZE};

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
struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl Region {
    fn new(len: usize) -> rverbs_uverbs::Result<Self> {
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
        .map_err(|e| Error::os("mmap mlx5 CQ buffer", e).with_detail(format!("{len} bytes")))?;
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| Error::protocol("mmap mlx5 CQ buffer", "kernel returned NULL"))?;
        Ok(Self { ptr, len })
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
    pub fn ncqe(&self) -> u32 {
        self.ncqe
    }

    /// The `cqe` to give the kernel: `ncqe - 1`.
    pub fn kernel_cqe(&self) -> u32 {
        self.ncqe - 1
    }

    /// Bytes per slot.
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
    base: *mut u8,
    ncqe: u32,
    mask: u32,
    /// log2 of the slot size.
    shift: u32,
    /// Offset of the CQE64 inside a slot (0 or 64).
    cqe64_off: usize,
    dbrec: *mut u32,
}

impl Ring {
    /// The CQE at consumer index `ci`, copied out, if software owns it.
    #[inline(always)]
    fn take(&self, ci: u32) -> Option<Cqe64> {
        let idx = (ci & self.mask) as usize;
        // SAFETY: idx < ncqe, so the slot and its CQE64 lie inside the ring mapping, which
        // lives as long as the CQ that owns this Ring.
        let cqe = unsafe { self.base.add((idx << self.shift) + self.cqe64_off) };
        // SAFETY: in bounds (see above); u8 has no alignment requirement. The device (or a
        // simulated device thread) writes this byte while we read it, so it is read as an
        // atomic; nothing reads it through a reference.
        let op_own = unsafe { AtomicU8::from_ptr(cqe.add(CQE64_SIZE - 1)) }.load(Ordering::Relaxed);
        let sw_owner = (ci & self.ncqe != 0) as u8;
        if op_own >> 4 == CqeOpcode::INVALID.0 || (op_own & 1) != sw_owner {
            return None;
        }
        // The owner byte says the entry is complete; nothing else of it may be read before
        // that byte was. Acquire fence (plus the device barrier where the architecture needs
        // one): pairs with the producer's release of the owner byte, so its writes of the rest
        // of the entry are visible to the copy below.
        dma_rmb();
        // SAFETY: in bounds and 64-byte aligned (page-aligned base, 64- or 128-byte slots,
        // CQE64 at offset 0 or 64). The producer does not write this slot again until we
        // publish a consumer index past it, so this plain copy races with nothing. We copy
        // the entry out and never keep a reference into device-written memory.
        Some(unsafe { ptr::read(cqe.cast::<Cqe64>()) })
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

impl<L: WrIdLookup> Mlx5Cq<L> {
    /// A CQ over `buf`, known to the device as `cqn`, armed through `uar`.
    pub fn new(buf: CqBuf, cqn: u32, uar: UarPage, lookup: L) -> rverbs_uverbs::Result<Self> {
        if cqn > MLX5_CQ_CI_MASK {
            return Err(Error::invalid(OP, format!("cqn {cqn:#x} does not fit 24 bits")).into());
        }
        let ring = Ring {
            base: buf.ring_ptr(),
            ncqe: buf.ncqe,
            mask: buf.ncqe - 1,
            shift: buf.cqe_size.bytes().trailing_zeros(),
            cqe64_off: buf.cqe_size.bytes() - CQE64_SIZE,
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
        let mut n = 0;
        let mut ci = self.cons_index;
        for slot in out.iter_mut() {
            let Some(cqe) = self.ring.take(ci) else { break };
            ci = ci.wrapping_add(1);
            *slot = parse_cqe(&cqe, &mut self.lookup);
            n += 1;
        }
        self.cons_index = ci;
        self.publish();
        n
    }

    /// A borrowing iterator over the completions that are ready. It publishes the consumer
    /// index once, when dropped (or at [`CqIter::sync`]). mlx5 has no producer index to read:
    /// the iterator stops at the first entry the device has not written.
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

    /// Acknowledges one completion event read from the completion channel: advances the arm
    /// sequence number, so the next arm is a new request (libmlx5's `mlx5_cq_event()`).
    pub fn ack_event(&mut self) {
        self.arm_sn = self.arm_sn.wrapping_add(1);
    }

    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// The consumer index (entries consumed since creation, wrapping).
    pub fn cons_index(&self) -> u32 {
        self.cons_index
    }

    /// The arm sequence number (events acknowledged, wrapping).
    pub fn arm_sn(&self) -> u32 {
        self.arm_sn
    }

    /// The CQ memory.
    pub fn buf(&self) -> &CqBuf {
        &self.buf
    }

    /// The wr_id lookup.
    pub fn lookup_mut(&mut self) -> &mut L {
        &mut self.lookup
    }

    /// Takes the next CQE if software owns it.
    #[inline(always)]
    fn next(&mut self) -> Option<WorkCompletion> {
        let cqe = self.ring.take(self.cons_index)?;
        self.cons_index = self.cons_index.wrapping_add(1);
        Some(parse_cqe(&cqe, &mut self.lookup))
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
pub struct CqIter<'a, L: WrIdLookup> {
    cq: &'a mut Mlx5Cq<L>,
}

impl<L: WrIdLookup> CqIter<'_, L> {
    /// Publishes the consumer index now (the device may reuse the slots consumed so far).
    pub fn sync(&mut self) {
        self.cq.publish();
    }
}

impl<L: WrIdLookup> Iterator for CqIter<'_, L> {
    type Item = WorkCompletion;

    #[inline]
    fn next(&mut self) -> Option<WorkCompletion> {
        self.cq.next()
    }
}

impl<L: WrIdLookup> Drop for CqIter<'_, L> {
    fn drop(&mut self) {
        self.cq.publish();
    }
}

impl<L: WrIdLookup> fmt::Debug for CqIter<'_, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqIter").field("cq", &self.cq).finish()
    }
}
