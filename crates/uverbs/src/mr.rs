//! Memory regions, tied to the memory they cover.
//!
//! An [`Mr<M>`] owns (or exclusively borrows) its memory `M`, so the buffer can be neither
//! freed nor moved while the device may access it: dropping the `Mr` deregisters first and only
//! then releases the memory.

#![allow(unsafe_code)]

use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use bitflags::bitflags;

use crate::abi::cmd::nr;
use crate::abi::ioctl::{mr, object};
use crate::abi::obj::ib_uverbs_dereg_mr;
use crate::abi::obj::{ib_uverbs_reg_mr, ib_uverbs_reg_mr_resp};
use crate::context::{Context, M_DESTROY_MR};
use crate::error::{Error, Result};
use crate::ioctl::IoctlCall;
use crate::pd::Pd;
use crate::wr::Sge;
use crate::write;
use rustix::io::Errno;
use zerocopy::IntoBytes as _;

bitflags! {
    /// `IB_UVERBS_ACCESS_*` / `ibv_access_flags`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        const LOCAL_WRITE = 1 << 0;
        const REMOTE_WRITE = 1 << 1;
        const REMOTE_READ = 1 << 2;
        const REMOTE_ATOMIC = 1 << 3;
        const MW_BIND = 1 << 4;
        const ZERO_BASED = 1 << 5;
        const ON_DEMAND = 1 << 6;
        const HUGETLB = 1 << 7;
        /// Optional: a kernel or device that does not support it ignores it.
        const RELAXED_ORDERING = 1 << 20;
    }
}

/// Memory that can be registered: a stable address range that stays valid and unmoved for as
/// long as the value lives.
///
/// # Safety
/// `as_ptr()..as_ptr()+len()` must be valid for reads and writes for the value's whole life and
/// must not change while the value is not mutably borrowed through `as_mut_slice`-like means
/// that could reallocate (implementations must never reallocate).
pub unsafe trait MrMemory {
    /// Start of the range.
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// SAFETY: the slice is exclusively borrowed for the Mr's life; its memory cannot move or be
// freed while the borrow lasts.
unsafe impl MrMemory for &mut [u8] {
    fn as_ptr(&self) -> *mut u8 {
        <[u8]>::as_ptr(self).cast_mut()
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

// SAFETY: a boxed slice's heap allocation does not move when the box moves and is never
// reallocated (we never hand out the Box itself mutably).
unsafe impl MrMemory for Box<[u8]> {
    fn as_ptr(&self) -> *mut u8 {
        <[u8]>::as_ptr(self).cast_mut()
    }
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
}

// SAFETY: as for Box<[u8]>: the Mr owns the Vec and never lets it grow or shrink.
unsafe impl MrMemory for Vec<u8> {
    fn as_ptr(&self) -> *mut u8 {
        <[u8]>::as_ptr(self).cast_mut()
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// Page-aligned, zeroed memory from an anonymous mapping (what RDMA buffers usually want).
pub struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
}

// SAFETY: PageBuf is plain owned memory, like Box<[u8]>.
unsafe impl Send for PageBuf {}
// SAFETY: shared access only hands out &[u8]; mutation requires &mut.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// Maps `len` zeroed bytes (rounded up to whole pages for the mapping).
    pub fn new(len: usize) -> Result<PageBuf> {
        if len == 0 {
            return Err(Error::invalid("allocate page buffer", "length 0").into());
        }
        let page = rustix::param::page_size();
        let map_len = len.div_ceil(page) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                map_len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }
        .map_err(|e| Error::os(format!("allocate page buffer of {len} bytes"), e))?;
        Ok(PageBuf {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
            map_len,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is our mapping, initialised (zero-filled) and alive.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageBuf")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: we own this mapping and nothing refers to it any more.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.map_len) } {
            tracing::error!("munmap page buffer: {e}");
        }
    }
}

// SAFETY: the mapping is owned, fixed, and unmapped only in Drop.
unsafe impl MrMemory for PageBuf {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// A registered memory region over memory `M`.
pub struct Mr<M: MrMemory> {
    // Field order matters for nothing here: Drop deregisters before any field is dropped.
    pd: Arc<Pd>,
    handle: u32,
    lkey: u32,
    rkey: u32,
    access: AccessFlags,
    mem: M,
}

impl<M: MrMemory> fmt::Debug for Mr<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("handle", &self.handle)
            .field("addr", &self.mem.as_ptr())
            .field("len", &self.mem.len())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

fn check_access(access: AccessFlags) -> std::result::Result<(), String> {
    let unknown = access.bits() & !AccessFlags::all().bits();
    if unknown != 0 {
        return Err(format!("unknown access bits {unknown:#x}"));
    }
    let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if access.intersects(needs_local_write) && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(format!(
            "access {access:?} needs LOCAL_WRITE too (remote write and atomic access imply it)"
        ));
    }
    Ok(())
}

/// Registers `addr..addr+len` and returns (handle, lkey, rkey).
fn reg_raw(pd: &Pd, addr: u64, len: usize, access: AccessFlags) -> Result<(u32, u32, u32)> {
    let ctx = pd.context();
    let op = || format!("register MR of {len} bytes at {addr:#x} on {}", ctx.name());
    if len == 0 {
        return Err(Error::invalid(op(), "length 0").into());
    }
    check_access(access).map_err(|d| Error::invalid(op(), d))?;
    let req = ib_uverbs_reg_mr {
        response: 0,
        start: addr,
        length: len as u64,
        hca_va: addr,
        pd_handle: pd.handle(),
        access_flags: access.bits(),
    };
    let mut resp = ib_uverbs_reg_mr_resp::default();
    write::legacy_simple(ctx.cmd_fd(), nr::REG_MR, &req, &mut resp).map_err(|e| {
        let hint = match e {
            rustix::io::Errno::FAULT => "; the range is not mapped",
            rustix::io::Errno::NOMEM => "; the memlock limit (ulimit -l) may be too low",
            _ => "",
        };
        Error::os(format!("{}{hint}", op()), e)
    })?;
    Ok((resp.mr_handle, resp.lkey, resp.rkey))
}

impl<M: MrMemory> Mr<M> {
    /// Registers `mem` with `access`. On failure `mem` is returned along with the error.
    pub fn register(
        pd: &Arc<Pd>,
        mem: M,
        access: AccessFlags,
    ) -> std::result::Result<Mr<M>, (std::io::Error, M)> {
        match reg_raw(pd, mem.as_ptr() as u64, mem.len(), access) {
            Ok((handle, lkey, rkey)) => Ok(Mr {
                pd: pd.clone(),
                handle,
                lkey,
                rkey,
                access,
                mem,
            }),
            Err(e) => Err((e, mem)),
        }
    }

    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    pub fn handle(&self) -> u32 {
        self.handle
    }
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// Start address (also the iova the remote side uses).
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }
    pub fn len(&self) -> usize {
        self.mem.len()
    }
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// An SGE for `range` of this region. Panics if the range is outside the region (a
    /// programming error, like slice indexing); see [`Mr::try_sge`].
    pub fn sge(&self, range: Range<usize>) -> Sge {
        self.try_sge(range.clone())
            .unwrap_or_else(|| panic!("SGE range {range:?} outside MR of {} bytes", self.mem.len()))
    }

    /// An SGE for `range`, or `None` if it is outside the region or over 4 GiB.
    pub fn try_sge(&self, range: Range<usize>) -> Option<Sge> {
        if range.start > range.end || range.end > self.mem.len() {
            return None;
        }
        Some(Sge {
            addr: self.addr() + range.start as u64,
            length: u32::try_from(range.len()).ok()?,
            lkey: self.lkey,
        })
    }

    /// The memory's bytes. Reading bytes that an in-flight RDMA operation writes gives
    /// unspecified values: read after the completion.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: MrMemory guarantees the range is valid for our life.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr(), self.mem.len()) }
    }

    /// The memory's bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` makes this the only Rust reference.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), self.mem.len()) }
    }

    /// The memory itself.
    pub fn memory(&self) -> &M {
        &self.mem
    }
}

impl<M: MrMemory> Drop for Mr<M> {
    fn drop(&mut self) {
        let ctx = self.pd.context();
        if let Err(e) = dereg_mr(ctx, self.handle) {
            tracing::error!(
                device = ctx.name(),
                handle = self.handle,
                "{}",
                Error::os("deregister MR", e)
            );
        }
    }
}

/// Registers a raw address range.
///
/// # Safety
/// The range must stay mapped and must not be reused for anything else while the returned
/// [`RawMr`] lives and while any work request naming it is in flight.
pub unsafe fn register_raw(
    pd: &Arc<Pd>,
    addr: u64,
    len: usize,
    access: AccessFlags,
) -> Result<RawMr> {
    let (handle, lkey, rkey) = reg_raw(pd, addr, len, access)?;
    Ok(RawMr {
        pd: pd.clone(),
        handle,
        lkey,
        rkey,
        addr,
        len,
    })
}

/// A memory region over memory the caller manages (see [`register_raw`]).
pub struct RawMr {
    pd: Arc<Pd>,
    handle: u32,
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub len: usize,
}

impl fmt::Debug for RawMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMr")
            .field("handle", &self.handle)
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

/// Deregisters MR `handle`: ioctl `MR_DESTROY`, or the legacy `DEREG_MR` command.
fn dereg_mr(ctx: &Context, handle: u32) -> std::result::Result<(), Errno> {
    let mut c = IoctlCall::new(object::MR, mr::METHOD_DESTROY);
    c.idr(mr::ATTR_DESTROY_HANDLE, handle);
    if ctx.try_ioctl(M_DESTROY_MR, &mut c)? {
        return Ok(());
    }
    let req = ib_uverbs_dereg_mr { mr_handle: handle };
    write::legacy(ctx.cmd_fd(), nr::DEREG_MR, req.as_bytes(), &[], &mut [])
}

impl Drop for RawMr {
    fn drop(&mut self) {
        let ctx = self.pd.context();
        if let Err(e) = dereg_mr(ctx, self.handle) {
            tracing::error!(handle = self.handle, "{}", Error::os("deregister MR", e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_checks() {
        assert!(check_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).is_ok());
        let e = check_access(AccessFlags::REMOTE_WRITE).unwrap_err();
        assert!(e.contains("LOCAL_WRITE"), "{e}");
        let e = check_access(AccessFlags::from_bits_retain(1 << 15)).unwrap_err();
        assert!(e.contains("0x8000"), "{e}");
        assert!(check_access(AccessFlags::RELAXED_ORDERING | AccessFlags::REMOTE_READ).is_ok());
    }

    #[test]
    fn page_buf_is_aligned_and_zeroed() {
        let mut b = PageBuf::new(100).unwrap();
        assert_eq!(b.as_slice().len(), 100);
        assert_eq!(b.as_ptr() as usize % rustix::param::page_size(), 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[99] = 7;
        assert_eq!(b.as_slice()[99], 7);
        assert!(PageBuf::new(0).is_err());
    }
}
