//! Regions over memory the caller manages: [`register_raw`] and [`RawMr`].

#![allow(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use rustix::io::Errno;

use super::{dereg_noted, reg_raw, AccessFlags};
use crate::error::{Error, Result};
use crate::pd::Pd;

/// Registers a raw address range.
///
/// # Safety
/// The range must stay mapped and must not be reused for anything else while the returned
/// [`RawMr`] lives and while any work request naming it is in flight.
///
/// That includes requests the caller did not post against this region: the kernel may give
/// the new region a local key that a dropped region had, and a request posted earlier with
/// that key (a raw post, or, on a provider whose deregistration does not fence the device, one
/// of a dropped safe [`Mr`](super::Mr) whose hold the caller ended some other way) then
/// reaches this range. rverbs' safe posts hold a safe `Mr`'s registration until such requests
/// are over ([`crate::qp::Qp::post_recv`]), so their keys are not reused meanwhile; requests
/// posted with the `unsafe` raw posts are the caller's to account for.
///
/// With [`AccessFlags::ON_DEMAND`] nothing is pinned: the device reaches whatever the range
/// maps at the time of each access, so "stays mapped and not reused" means the same virtual
/// range keeps the caller's memory (unmapping it makes accesses fail; mapping something else
/// there hands that to the device). Address 0 with length `usize::MAX` (`u64::MAX`) is an
/// **implicit** ODP region, the whole address space of the process as one region: with
/// remote access, any peer that learns its rkey reads or writes any memory of the process,
/// and locally any SGE with its lkey reaches any address. No contract a library can check
/// makes that sound, which is why rverbs offers it only here: the caller promises that no
/// request and no peer is ever given its keys except for memory the caller owns and treats
/// as registered memory (no Rust references to it while the device may touch it). Refused
/// with a named error on a device that does not report `IBV_ODP_SUPPORT_IMPLICIT` (rxe does
/// not), and any ODP registration on one without `IBV_ODP_SUPPORT`.
pub unsafe fn register_raw(
    pd: &Arc<Pd>,
    addr: u64,
    len: usize,
    access: AccessFlags,
) -> Result<RawMr> {
    // SAFETY: forwarded (the caller's contract, the same).
    unsafe { register_raw_iova(pd, addr, len, addr, access) }
}

/// Registers a raw address range that the device addresses at `iova`
/// (`ibv_reg_mr_iova2`): local SGEs and a peer's RDMA READ, WRITE and atomics name
/// `iova..iova + len` with this region's keys, and reach `addr..addr + len`. Inline data
/// is not addressed through a region: an inline SGE's address is always the CPU's.
///
/// Refused by name on siw with `iova != addr` (its kernel driver ignores the iova and
/// addresses the region at its address), for an on-demand-paging region (`ON_DEMAND`) with
/// `iova != addr`, an
/// `iova` whose offset in a page is not the address's (the kernel's `EINVAL`), and an
/// `iova` range that passes the end of the 64-bit space.
///
/// # Safety
/// As [`register_raw`], for `addr..addr + len`.
pub unsafe fn register_raw_iova(
    pd: &Arc<Pd>,
    addr: u64,
    len: usize,
    iova: u64,
    access: AccessFlags,
) -> Result<RawMr> {
    let (handle, lkey, rkey) = reg_raw(pd, addr, len, iova, access)?;
    Ok(RawMr {
        pd: pd.clone(),
        handle,
        lkey,
        rkey,
        addr,
        iova,
        len,
    })
}

/// A memory region over memory the caller manages (see [`register_raw`]).
///
/// Its keys and range are read with accessors, never written: the PD's bookkeeping (iWARP's
/// READ sinks, [`OpSet`](crate::OpSet)) is kept by the key the kernel returned, which safe code cannot
/// change.
pub struct RawMr {
    pd: Arc<Pd>,
    handle: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    pub(crate) iova: u64,
    pub(crate) len: usize,
}

impl fmt::Debug for RawMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMr")
            .field("handle", &self.handle)
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .finish()
    }
}

impl RawMr {
    /// Local key: what SGEs over this memory carry.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key: what a peer's RDMA READ/WRITE/atomic names.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Start address of the registered range.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Where the device addresses the range: what SGEs and a peer's requests name (the
    /// address itself unless registered by [`register_raw_iova`]).
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length of the registered range, in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty range (never: registration refuses length 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A registration the kernel made (a dma-buf region: `addr` is its iova).
    pub(crate) fn from_parts(
        pd: Arc<Pd>,
        handle: u32,
        lkey: u32,
        rkey: u32,
        addr: u64,
        len: usize,
    ) -> RawMr {
        RawMr {
            pd,
            handle,
            lkey,
            rkey,
            addr,
            iova: addr,
            len,
        }
    }

    /// The kernel's handle of the region.
    pub(crate) fn handle(&self) -> u32 {
        self.handle
    }

    /// The PD the region belongs to.
    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// Deregisters the region; on failure gives it back, still registered, with the error.
    /// The kernel refuses (EINVAL on rxe) while a memory window is bound in the region.
    pub fn deregister(self) -> std::result::Result<(), (RawMr, std::io::Error)> {
        let ctx = self.pd.context();
        match dereg_noted(&self.pd, self.handle, self.lkey) {
            Ok(()) => {
                let me = std::mem::ManuallyDrop::new(self);
                // SAFETY: `me` is never used again; its only field with a destructor is the PD.
                drop(unsafe { std::ptr::read(&me.pd) });
                Ok(())
            }
            Err(e) => {
                let hint = if e == Errno::INVAL {
                    "; a memory window may still be bound in it"
                } else {
                    ""
                };
                let err = Error::os(
                    format!(
                        "deregister MR {} ({} bytes at {:#x}) on {}{hint}",
                        self.handle,
                        self.len,
                        self.addr,
                        ctx.name()
                    ),
                    e,
                );
                Err((self, err.into()))
            }
        }
    }
}

impl Drop for RawMr {
    fn drop(&mut self) {
        if let Err(e) = dereg_noted(&self.pd, self.handle, self.lkey) {
            tracing::error!(handle = self.handle, "{}", Error::os("deregister MR", e));
        }
    }
}
