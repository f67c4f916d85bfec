//! Memory regions, tied to the memory they cover.
//!
//! By job: [`AccessFlags`] and the memory a region can take over ([`MrMemory`], in
//! `mr/memory.rs`), the page allocator ([`PageBuf`], `mr/page.rs`), regions over such memory
//! ([`Mr`], here), and regions over memory the caller manages ([`RawMr`], `mr/raw.rs`). The
//! copies in and out of registered memory are the kernel layer's (`kernel::shared`).
//!
//! An [`Mr<M>`] takes over its memory `M` (owned, or borrowed inside [`Mr::scoped`]), so the
//! buffer can be neither freed nor moved while the device may access it: dropping the `Mr`
//! deregisters first and only then releases the memory (if deregistration fails, the memory is
//! leaked). While registered the bytes are reached by copies, never by Rust references: see
//! docs/architecture.md, "Why this is sound".
//!
//! What does not compile in safe code (stable rustdoc only checks that these fail; the
//! crate's `tests/compile_fail.rs` checks each one fails for the reason given, against the
//! compiler's messages in `tests/ui/*.stderr`):
//!
//! A region outliving its buffer (borrowed memory needs [`Mr::scoped`]):
//! ```compile_fail,E0597
//! # use rverbs_uverbs::mr::{AccessFlags, Mr};
//! # fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
//! let mr;
//! {
//!     let mut buf = vec![0u8; 4096];
//!     mr = Mr::register(pd, &mut buf[..], AccessFlags::LOCAL_WRITE).unwrap();
//! }
//! drop(mr);
//! # }
//! ```
//!
//! Forgetting a registration of borrowed memory (so it would stay registered after the
//! borrow):
//! ```compile_fail,E0597
//! # use rverbs_uverbs::mr::{AccessFlags, Mr};
//! # fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
//! let mut buf = [0u8; 64];
//! let mr = Mr::register(pd, &mut buf[..], AccessFlags::LOCAL_WRITE).unwrap();
//! std::mem::forget(mr);
//! # }
//! ```
//!
//! A safe `&[u8]` over memory a peer may write:
//! ```compile_fail,E0133
//! # use rverbs_uverbs::mr::{AccessFlags, Mr, PageBuf};
//! # fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
//! let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
//! let mr = Mr::register(pd, PageBuf::new(4096).unwrap(), access).unwrap();
//! let bytes: &[u8] = mr.as_slice();
//! # let _ = bytes; }
//! ```
//!
//! The same three in their sound forms:
//! ```no_run
//! # use rverbs_uverbs::mr::{AccessFlags, Mr, PageBuf};
//! # fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) -> std::io::Result<()> {
//! let mut buf = [0u8; 64];
//! Mr::scoped(pd, &mut buf[..], AccessFlags::LOCAL_WRITE, |mr| mr.write_at(0, b"hi"))?;
//! let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
//! let mr = Mr::register(pd, PageBuf::new(4096)?, access)?;
//! let mut head = [0u8; 16];
//! mr.read_at(0, &mut head);
//! std::mem::forget(mr); // owned memory: leaked together with its registration
//! # Ok(()) }
//! ```

#![allow(unsafe_code)]

mod memory;
mod odp;
mod page;
mod raw;

pub use memory::{AccessFlags, MrMemory, RawMemory};
pub use odp::{AdviseFlags, MrAdvice};
pub use page::PageBuf;
pub use raw::{register_raw, register_raw_iova, RawMr};

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::obj::{ib_uverbs_reg_mr, ib_uverbs_reg_mr_resp};
use crate::kernel::shared::{copy_from_shared, copy_to_shared, fill_shared};
use crate::kernel::write;
use crate::pd::region::{dereg_failed, dereg_noted, release, Region};
use crate::pd::Pd;
use crate::wr::{MrSge, Sge};
use rustix::io::Errno;
use zerocopy::{FromBytes as _, IntoBytes as _};

/// A registered memory region over memory `M`.
///
/// The memory is given up at registration ([`MrMemory::into_raw`]) and given back only after
/// deregistration ([`Mr::deregister`]), so while it is registered safe code sees it only
/// through copies: [`Mr::read_at`], [`Mr::write_at`], [`Mr::fill`], [`Mr::to_vec`]. The device
/// and remote peers may read or write the bytes at any time; the copies use 1-byte relaxed atomic
/// loads and stores, never a Rust reference. Slice views exist as `unsafe` functions
/// ([`Mr::as_slice`], [`Mr::as_mut_slice`]) with written contracts.
pub struct Mr<M: MrMemory> {
    /// The registration and the memory, shared with the ledgers of the queues whose posted
    /// requests may still write it ([`crate::ledger`]): deregistered and freed when the last
    /// holder lets go.
    region: Arc<Region>,
    rkey: u32,
    access: AccessFlags,
    _mem: PhantomData<M>,
}

/// Gives back the memory of an `M`.
///
/// # Safety
/// `raw` comes from `M::into_raw`, is used once, and nothing can reach it any more.
unsafe fn free_as<M: MrMemory>(raw: RawMemory) {
    // SAFETY: forwarded to the caller.
    drop(unsafe { M::from_raw(raw) });
}

// The Mr owns M (as raw parts, in its Region); moving it to another thread moves M. Shared
// access reads and writes the bytes only with `crate::kernel::shared`'s copies, 1-byte atomics for
// every byte whoever copies (or through the unsafe views, whose contracts cover threads); M
// itself is never shared. (Region is Send + Sync; the marker PhantomData<M> keeps Mr<M> Send
// and Sync only for M: Send + Sync. Sync needs only M: Send, as before.)
// SAFETY: as above.
unsafe impl<M: MrMemory + Send> Sync for Mr<M> {}

impl<M: MrMemory> fmt::Debug for Mr<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("handle", &self.region.handle)
            .field("addr", &self.region.mem.ptr)
            .field("len", &self.region.mem.len)
            .field("lkey", &format_args!("{:#x}", self.region.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

/// A failed registration: the error, and the memory given back.
///
/// Converts to [`std::io::Error`] (dropping the memory), so `?` works in functions returning
/// `io::Result`; [`RegisterError::into_inner`] keeps the memory.
pub struct RegisterError<M> {
    error: std::io::Error,
    mem: M,
}

impl<M> RegisterError<M> {
    /// The error.
    pub fn error(&self) -> &std::io::Error {
        &self.error
    }
    /// The memory that was to be registered.
    pub fn into_inner(self) -> M {
        self.mem
    }
    /// Both parts.
    pub fn into_parts(self) -> (std::io::Error, M) {
        (self.error, self.mem)
    }
}

impl<M> fmt::Debug for RegisterError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisterError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<M> fmt::Display for RegisterError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<M> std::error::Error for RegisterError<M> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl<M> From<RegisterError<M>> for std::io::Error {
    fn from(e: RegisterError<M>) -> Self {
        e.error
    }
}

/// The access that lets a peer reach a region by its rkey.
const REMOTE: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

pub(crate) fn check_access(access: AccessFlags) -> std::result::Result<(), String> {
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

/// Refuses a `FLUSH_*` access flag the device does not report (`IB_UVERBS_DEVICE_FLUSH_*`):
/// a kernel without FLUSH (rxe before Linux 6.2) would answer a bare `EINVAL`.
fn check_flush_access(
    ctx: &crate::context::Context,
    access: AccessFlags,
) -> std::result::Result<(), String> {
    use crate::op::DeviceCapsEx;
    let caps = ctx
        .cached_limits()
        .map_or(DeviceCapsEx(0), |l| l.device_cap_flags_ex);
    for (flag, cap, name) in [
        (
            AccessFlags::FLUSH_GLOBAL,
            DeviceCapsEx::FLUSH_GLOBAL,
            "FLUSH_GLOBAL",
        ),
        (
            AccessFlags::FLUSH_PERSISTENT,
            DeviceCapsEx::FLUSH_PERSISTENT,
            "FLUSH_PERSISTENT",
        ),
    ] {
        if access.contains(flag) && !caps.contains(cap) {
            return Err(format!(
                "access {name} is not supported by this kernel's {} (the device does not \
                 report IB_UVERBS_DEVICE_{name})",
                ctx.driver().map_or("device", |d| d.name())
            ));
        }
    }
    Ok(())
}

/// Registers `addr..addr+len`, which the device addresses as `iova..iova+len` (its SGEs and
/// a peer's RDMA requests name that range), and returns (handle, lkey, rkey).
pub(crate) fn reg_raw(
    pd: &Pd,
    addr: u64,
    len: usize,
    iova: u64,
    access: AccessFlags,
) -> Result<(u32, u32, u32)> {
    let ctx = pd.context();
    let op = || {
        let at = if iova == addr {
            String::new()
        } else {
            format!(" (iova {iova:#x})")
        };
        format!(
            "register MR of {len} bytes at {addr:#x}{at} on {}",
            ctx.name()
        )
    };
    if len == 0 {
        return Err(Error::invalid(op(), "length 0").into());
    }
    check_access(access).map_err(|d| Error::invalid(op(), d))?;
    check_flush_access(ctx, access).map_err(|d| Error::unsupported(op(), d))?;
    let odp = access.contains(AccessFlags::ON_DEMAND);
    if odp {
        if iova != addr {
            // The PD's ODP table checks advice SGEs against the region's addresses.
            return Err(Error::unsupported(
                op(),
                "an on-demand-paging region at an iova other than its address",
            )
            .into());
        }
        odp::check_odp(ctx, addr, len).map_err(|d| Error::unsupported(op(), d))?;
    }
    // The kernel's REG_MR (`ib_uverbs_reg_mr`) refuses EINVAL otherwise: pages map to pages.
    let page = rustix::param::page_size() as u64;
    if iova % page != addr % page {
        return Err(Error::invalid(
            op(),
            format!(
                "the iova's offset in a page ({:#x}) differs from the address's ({:#x})",
                iova % page,
                addr % page
            ),
        )
        .into());
    }
    if iova != addr && ctx.driver_id() == crate::device::DriverId::SIW {
        // siw_reg_user_mr ignores the iova (`rnic_va`: "not used by siw") and checks every
        // access against the address: the region would not be where its iova says.
        return Err(Error::unsupported(
            op(),
            "an iova other than the address on siw (its kernel driver addresses a region at \
             its address only)",
        )
        .into());
    }
    if iova.checked_add(len as u64 - 1).is_none() {
        return Err(
            Error::invalid(op(), "the iova range passes the end of the 64-bit space").into(),
        );
    }
    let req = ib_uverbs_reg_mr {
        response: 0,
        start: addr,
        length: len as u64,
        hca_va: iova,
        pd_handle: pd.handle(),
        access_flags: access.bits(),
    };
    let mut resp = ib_uverbs_reg_mr_resp::default();
    // The provider's driver data (siw's kernel refuses a registration without it).
    let (drv_in, drv_out) = ctx.driver().map_or((&[][..], 0), |d| d.reg_mr_udata());
    let r = if drv_in.is_empty() && drv_out == 0 {
        write::cmd_legacy_simple(ctx.cmd_fd(), nr::REG_MR, &req, &mut resp)
    } else {
        // Core response, then the driver's (at most 32 bytes; none asks for more).
        let core = size_of::<ib_uverbs_reg_mr_resp>();
        let mut buf = [0u8; 12 + 32];
        let out = buf.get_mut(..core + drv_out).ok_or(Errno::INVAL);
        out.and_then(|out| {
            write::cmd_legacy(ctx.cmd_fd(), nr::REG_MR, req.as_bytes(), drv_in, out)?;
            resp = ib_uverbs_reg_mr_resp::read_from_prefix(out)
                .map(|(r, _)| r)
                .unwrap_or_default();
            Ok(())
        })
    };
    r.map_err(|e| {
        let hint = match e {
            rustix::io::Errno::FAULT => "; the range is not mapped",
            rustix::io::Errno::NOMEM => "; the memlock limit (ulimit -l) may be too low",
            _ => "",
        };
        Error::os(format!("{}{hint}", op()), e)
    })?;
    if let Some(sinks) = pd.read_sinks() {
        sinks.registered(resp.lkey, access);
    }
    if odp {
        let local_write = access.contains(AccessFlags::LOCAL_WRITE);
        pd.odp_keys()
            .registered(resp.lkey, addr, len as u64, local_write);
    }
    Ok((resp.mr_handle, resp.lkey, resp.rkey))
}

impl<M: MrMemory + 'static> Mr<M> {
    /// Registers `mem` with `access`. On failure the error gives `mem` back.
    ///
    /// `M: 'static`: the memory is owned (a `Vec`, `Box<[u8]>`, [`PageBuf`]), so leaking the
    /// `Mr` with `mem::forget` leaks the memory too and the device can never reach memory that
    /// was given to someone else. Borrowed memory is registered with [`Mr::scoped`] (or the
    /// `unsafe` [`Mr::register_unchecked`]).
    ///
    /// On siw and rxe the memory of a region with remote access stays with the region after
    /// its drop until the QPs of its PD that existed then are destroyed (a peer may still be
    /// writing it: docs/architecture.md, "What a peer can still reach after the drop"); a
    /// `'static` borrow too, which is therefore accepted with remote access there.
    pub fn register(
        pd: &Arc<Pd>,
        mem: M,
        access: AccessFlags,
    ) -> std::result::Result<Mr<M>, RegisterError<M>> {
        // SAFETY: M: 'static owns its memory (or borrows it forever), so leaking the Mr cannot
        // let the memory be reused while registered, and the memory may wait past the Mr's
        // drop (a 'static borrow too: no one else gets it back meanwhile).
        unsafe { Mr::register_with(pd, mem, access, true) }
    }
}

impl<'a> Mr<&'a mut [u8]> {
    /// Registers the borrowed `buf` for the duration of `f`, which gets the region by
    /// reference; the region is deregistered when `f` returns or unwinds, before the borrow
    /// ends. Returns `f`'s result, or the registration error.
    ///
    /// On siw and rxe, remote access (REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC) is refused
    /// ([`io::ErrorKind::Unsupported`](std::io::ErrorKind::Unsupported)): siw's deregistration
    /// does not wait for a peer's transfer in progress, and rxe's waits for it only until a
    /// timeout (50 s), so a peer could still write the buffer after it went back to its owner
    /// (docs/architecture.md, "What a peer can still reach after the drop"); register owned
    /// memory instead.
    ///
    /// ```no_run
    /// # use rverbs_uverbs::mr::{AccessFlags, Mr};
    /// # fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) -> std::io::Result<()> {
    /// let mut buf = [0u8; 4096];
    /// let n = Mr::scoped(pd, &mut buf[..], AccessFlags::LOCAL_WRITE, |mr| {
    ///     mr.write_at(0, b"hello");
    ///     mr.len()
    /// })?;
    /// # let _ = n; Ok(()) }
    /// ```
    ///
    /// The region cannot leave the closure:
    /// ```compile_fail,E0521
    /// # use rverbs_uverbs::mr::{AccessFlags, Mr};
    /// # fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
    /// let mut buf = [0u8; 64];
    /// let mut keep = None;
    /// let _ = Mr::scoped(pd, &mut buf[..], AccessFlags::LOCAL_WRITE, |mr| keep = Some(mr));
    /// # }
    /// ```
    pub fn scoped<R>(
        pd: &Arc<Pd>,
        buf: &'a mut [u8],
        access: AccessFlags,
        f: impl FnOnce(&Mr<&'a mut [u8]>) -> R,
    ) -> std::io::Result<R> {
        // SAFETY: the Mr lives in this frame and is dropped (deregistered) on return and on
        // unwind; `f` only borrows it, so it cannot be leaked.
        let mr =
            unsafe { Mr::register_unchecked(pd, buf, access) }.map_err(std::io::Error::from)?;
        Ok(f(&mr))
    }
}

impl<M: MrMemory> Mr<M> {
    /// The registration and memory, for holders that must keep it past the `Mr`'s drop (a
    /// memory window bound in it: [`crate::mw::Mw`]).
    pub(crate) fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Registers `mem` with `access`, for any `M` including borrows.
    ///
    /// Borrowed memory (`!M::OWNED`) with remote access is refused on siw and rxe, as for
    /// [`Mr::scoped`].
    ///
    /// # Safety
    /// The returned `Mr` must be dropped (or [deregistered](Mr::deregister)) before the memory
    /// can be used by anyone else: for a borrow, before the borrow ends. `mem::forget` of an
    /// `Mr` over borrowed memory (or an `Rc` cycle holding it) violates this and lets the
    /// device or a remote peer write memory that has been reused.
    pub unsafe fn register_unchecked(
        pd: &Arc<Pd>,
        mem: M,
        access: AccessFlags,
    ) -> std::result::Result<Mr<M>, RegisterError<M>> {
        // SAFETY: the caller's contract; a borrow (!OWNED) may not wait past the drop.
        unsafe { Mr::register_with(pd, mem, access, M::OWNED) }
    }

    /// [`Mr::register_unchecked`], where `can_wait` says whether the memory may stay with the
    /// region after the `Mr`'s drop ([`crate::ledger::Fence`]): owned memory, or a `'static`
    /// borrow ([`Mr::register`]). Remote access to memory that cannot wait is refused where
    /// the PD has a fence.
    ///
    /// # Safety
    /// As [`Mr::register_unchecked`]; and with `can_wait`, the memory is not used by anyone
    /// else until the region gives it back, however late.
    unsafe fn register_with(
        pd: &Arc<Pd>,
        mem: M,
        access: AccessFlags,
        can_wait: bool,
    ) -> std::result::Result<Mr<M>, RegisterError<M>> {
        if !can_wait && access.intersects(REMOTE) && pd.fence().is_some() {
            // siw, rxe: a peer's WRITE in progress may land after deregistration, until the
            // QPs of the PD are destroyed (crate::ledger::Fence); borrowed memory goes back to
            // its owner at the drop and cannot wait for that.
            let ctx = pd.context();
            let why = if ctx.driver_id() == crate::device::DriverId::SIW {
                "siw does not wait for a peer's RDMA WRITE or READ in progress when a region is \
                 deregistered"
            } else {
                "rxe waits for a peer's RDMA WRITE, READ or atomic in progress only until a \
                 timeout when a region is deregistered"
            };
            let error = Error::unsupported(
                format!(
                    "register borrowed memory with access {access:?} on {}",
                    ctx.name()
                ),
                format!(
                    "{why}, and borrowed memory cannot be kept until the QPs that could reach \
                     it are gone: register owned memory (Mr::register) for remote access"
                ),
            );
            return Err(RegisterError {
                error: error.into(),
                mem,
            });
        }
        let raw = mem.into_raw();
        if let Err(d) = odp::check_safe_start(pd.context(), raw.ptr.as_ptr() as u64, access) {
            let op = format!(
                "register MR of {} bytes on {}",
                raw.len,
                pd.context().name()
            );
            return Err(RegisterError {
                error: Error::unsupported(op, d).into(),
                // SAFETY: the parts into_raw just returned; nothing was registered.
                mem: unsafe { M::from_raw(raw) },
            });
        }
        match reg_raw(
            pd,
            raw.ptr.as_ptr() as u64,
            raw.len,
            raw.ptr.as_ptr() as u64,
            access,
        ) {
            Ok((handle, lkey, rkey)) => {
                let region = Arc::new(Region {
                    pd: pd.clone(),
                    handle,
                    lkey,
                    mem: raw,
                    free: free_as::<M>,
                    owned: M::OWNED,
                    remote: access.intersects(REMOTE),
                });
                pd.regions().insert(&region);
                Ok(Mr {
                    region,
                    rkey,
                    access,
                    _mem: PhantomData,
                })
            }
            Err(error) => Err(RegisterError {
                error,
                // SAFETY: the parts into_raw just returned; nothing was registered.
                mem: unsafe { M::from_raw(raw) },
            }),
        }
    }

    /// Local key: what SGEs name.
    pub fn lkey(&self) -> u32 {
        self.region.lkey
    }
    /// Remote key: what a peer names in RDMA READ/WRITE/atomic requests.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    internal! {
    /// Kernel handle.
    pub fn handle(&self) -> u32 {
        self.region.handle
    }
    }
    /// The access the region was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// Start address (also the iova the remote side uses).
    pub fn addr(&self) -> u64 {
        self.region.mem.ptr.as_ptr() as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.region.mem.len
    }
    /// True for an empty region (never: registration refuses length 0).
    pub fn is_empty(&self) -> bool {
        self.region.mem.len == 0
    }
    /// The protection domain.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.region.pd
    }

    /// An SGE for `range` of this region. Panics if the range is outside the region (a
    /// programming error, like slice indexing); see [`Mr::try_sge`].
    pub fn sge(&self, range: Range<usize>) -> MrSge<'_> {
        self.try_sge(range.clone()).unwrap_or_else(|| {
            panic!(
                "SGE range {range:?} outside MR of {} bytes",
                self.region.mem.len
            )
        })
    }

    /// An SGE for `range`, or `None` if it is outside the region or over 4 GiB.
    pub fn try_sge(&self, range: Range<usize>) -> Option<MrSge<'_>> {
        if range.start > range.end || range.end > self.region.mem.len {
            return None;
        }
        let sge = Sge {
            addr: self.addr() + range.start as u64,
            length: u32::try_from(range.len()).ok()?,
            lkey: self.region.lkey,
        };
        // SAFETY: the range is inside this region, which stays registered while `self` is
        // borrowed, and whose memory Rust never references while registered.
        Some(unsafe { MrSge::new_unchecked(sge) })
    }

    #[track_caller]
    fn check(&self, offset: usize, len: usize) -> *mut u8 {
        match offset.checked_add(len) {
            Some(end) if end <= self.region.mem.len => {}
            _ => panic!(
                "range {offset}..{offset}+{len} outside MR of {} bytes",
                self.region.mem.len
            ),
        }
        // SAFETY: offset <= len of the allocation.
        unsafe { self.region.mem.ptr.as_ptr().add(offset) }
    }

    /// Copies `dst.len()` bytes from `offset` of the region into `dst`.
    ///
    /// Bytes that the device, a peer or another thread writes meanwhile read as old or new
    /// values, each byte on its own (`kernel::shared`: 1-byte relaxed atomics); read after
    /// the completion that says the data is there.
    ///
    /// # Panics
    /// If `offset..offset + dst.len()` is outside the region.
    #[track_caller]
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) {
        let src = self.check(offset, dst.len());
        // SAFETY: `src..src+dst.len()` lies in the registered memory, valid while self lives;
        // safe code reaches that memory only through `crate::kernel::shared` (these accessors and
        // INLINE posts), the unsafe views' contracts exclude these copies.
        unsafe { copy_from_shared(src, dst) }
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Panics
    /// If `offset..offset + src.len()` is outside the region.
    #[track_caller]
    pub fn write_at(&self, offset: usize, src: &[u8]) {
        let dst = self.check(offset, src.len());
        // SAFETY: as in read_at.
        unsafe { copy_to_shared(src, dst) }
    }

    /// Sets the bytes of `range` to `byte`.
    ///
    /// # Panics
    /// If `range` is outside the region.
    #[track_caller]
    pub fn fill(&self, range: Range<usize>, byte: u8) {
        let n = range.end.saturating_sub(range.start);
        let dst = self.check(range.start, n);
        // SAFETY: as in read_at.
        unsafe { fill_shared(dst, n, byte) }
    }

    /// A copy of `range` of the region.
    ///
    /// # Panics
    /// If `range` is outside the region.
    #[track_caller]
    pub fn read_vec(&self, range: Range<usize>) -> Vec<u8> {
        let mut v = vec![0u8; range.end.saturating_sub(range.start)];
        self.read_at(range.start, &mut v);
        v
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Vec<u8> {
        self.read_vec(0..self.len())
    }

    /// The memory's bytes as a slice.
    ///
    /// # Safety
    /// While the slice lives nothing may write the bytes: no work request that writes them
    /// (a receive, the local side of an RDMA READ or atomic) may be outstanding on any QP —
    /// including requests posted with SGEs of a region already dropped, whose lkey the kernel
    /// may give to a new region — and no peer may write them (the region was registered
    /// without REMOTE_WRITE/REMOTE_ATOMIC and without MW_BIND — a memory window bound with
    /// the C drop-in's `MwBind::from_raw` may grant remote write on a region
    /// with only LOCAL_WRITE | MW_BIND —, or no peer has its rkey or a window's and the
    /// address, or all QPs a peer could use are gone). No [`Mr::write_at`]/[`Mr::fill`] may
    /// run meanwhile. On rxe an on-demand-paging region ([`AccessFlags::ON_DEMAND`]) counts as
    /// written as a whole by any request that may write any part of it, and a window over it
    /// as granting its whole range (rxe on Linux 7.3.4 places ODP data from each page's
    /// start: docs/architecture.md, "On-demand paging").
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the range is valid and initialised while self lives; the caller promises no
        // writes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.region.mem.ptr.as_ptr(), self.region.mem.len) }
    }

    /// The memory's bytes as a mutable slice.
    ///
    /// # Safety
    /// As for [`Mr::as_slice`], and also nothing may read them: no outstanding work request
    /// that reads them (a send, the local side of an RDMA WRITE) and no peer that can RDMA
    /// READ them.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; `&mut self` excludes the copy accessors.
        unsafe { std::slice::from_raw_parts_mut(self.region.mem.ptr.as_ptr(), self.region.mem.len) }
    }

    /// Deregisters the region and gives the memory back.
    ///
    /// On failure the memory stays given up (leaked: the device might still reach it) and the
    /// error is returned; for borrowed memory the process aborts, as for `Drop`. While a
    /// posted request may still write the memory (a receive, an RDMA READ or atomic into it
    /// whose completion has not been polled: docs/architecture.md, "What a posted request
    /// keeps alive") the memory cannot be given back: the error is `EBUSY`, and the region is
    /// deregistered and freed once those completions are polled (or their QP is destroyed),
    /// as when the `Mr` is dropped. Likewise while a memory window it was bound into
    /// ([`crate::mw::Mw::bind_info`]) is not deallocated: `EBUSY`, and the region goes with
    /// the last such window. On siw and rxe a region with remote access is also not given
    /// back while a QP of its PD that existed at the deregistration lives (a peer may still be
    /// writing it): it is deregistered, the error is `EBUSY`, and the memory is freed when
    /// those QPs are destroyed.
    pub fn deregister(self) -> std::io::Result<M> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used again after its fields are read out.
        let region = unsafe { std::ptr::read(&me.region) };
        let region = match Arc::try_unwrap(region) {
            Ok(r) => std::mem::ManuallyDrop::new(r),
            Err(shared) => {
                let (len, handle, name) = (
                    shared.mem.len,
                    shared.handle,
                    shared.pd.context().name().to_owned(),
                );
                drop(shared);
                let err = Error::os(
                    format!(
                        "deregister MR {handle} ({len} bytes) on {name}: posted requests or a \
                         memory window bound in it may still reach it; it is deregistered and \
                         freed once their completions are polled and the windows deallocated"
                    ),
                    Errno::BUSY,
                );
                return Err(err.into());
            }
        };
        // SAFETY: `region` is never used again after its fields are read out (ManuallyDrop).
        let pd = unsafe { std::ptr::read(&region.pd) };
        pd.regions().remove(region.lkey);
        match dereg_noted(&pd, region.handle, region.lkey) {
            Ok(()) => match release(&pd, region.remote, region.mem, region.free) {
                // SAFETY: deregistered, and this was the last holder of the region
                // (try_unwrap): no ledger holds it, so no request that may write it is
                // outstanding, and no peer can reach it (release); the parts are the ones
                // into_raw returned.
                Some(mem) => Ok(unsafe { M::from_raw(mem) }),
                None => Err(Error::os(
                    format!(
                        "deregister MR {} ({} bytes) on {}: deregistered, but a peer may still \
                         write it through a QP of its PD (siw does not wait for a placement in \
                         progress, rxe only until a timeout); its memory is freed once those \
                         QPs are destroyed",
                        region.handle,
                        region.mem.len,
                        pd.context().name()
                    ),
                    Errno::BUSY,
                )
                .into()),
            },
            Err(e) => {
                let err = dereg_failed(&pd, region.handle, region.mem, M::OWNED, e);
                Err(err.into())
            }
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
    fn mr_sge_lists_view_as_raw() {
        let raw = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 5,
        }; 3];
        // SAFETY: test only: the list is viewed, never posted.
        let list: Vec<MrSge<'_>> = raw
            .iter()
            .map(|&s| unsafe { MrSge::new_unchecked(s) })
            .collect();
        assert_eq!(MrSge::raw_slice(&list), &raw[..]);
        let wrs = [crate::wr::SendWr::send(7, &list[..])];
        let r = crate::wr::SendWr::raw_list(&wrs);
        assert_eq!(r[0].wr_id, 7);
        assert_eq!(r[0].sge, &raw[..]);
        let rw = [crate::wr::RecvWr::new(9, &list[1..])];
        assert_eq!(crate::wr::RecvWr::raw_list(&rw)[0].sge, &raw[1..]);
    }
}
