//! A PD's regions as the PD sees them: the registration and the memory under a safe `Mr`
//! ([`Region`]), the memory of a deregistered region a peer may still reach ([`Deferred`]), and
//! deregistration. They live beside [`Pd`] because the two hold each other: a PD keeps the
//! registry of its regions (`ledger::Registry<Region>`) and its siw/rxe fence of deferred memory,
//! and a region keeps its PD alive. So `ledger` knows neither (it is generic over what it
//! holds), `mr` builds regions from here, and the imports run one way: `mr` → `pd` → `ledger`.

#![allow(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use rustix::io::Errno;
use zerocopy::IntoBytes as _;

use super::Pd;
use crate::context::{Context, Method};
use crate::error::Error;
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::obj::ib_uverbs_dereg_mr;
use crate::kernel::abi::obj::mr;
use crate::kernel::write;
use crate::ledger::Holdable;
use crate::values::RawMemory;

/// A registration and the memory under it, given back (deregistered, then the memory
/// dropped) when the last `Arc` goes: the [`Mr`](crate::mr::Mr)'s, or a ledger's
/// ([`crate::ledger`]).
pub(crate) struct Region {
    pub(crate) pd: Arc<Pd>,
    pub(crate) handle: u32,
    pub(crate) lkey: u32,
    pub(crate) mem: RawMemory,
    /// `M::from_raw` and drop, for the `M` the region was registered with.
    pub(crate) free: unsafe fn(RawMemory),
    /// `M::OWNED`: the memory may be given back later than the `Mr`'s drop.
    pub(crate) owned: bool,
    /// Registered with remote access (READ, WRITE or atomic): on siw and rxe a peer may still
    /// reach the memory after deregistration, until the PD's QPs of then are destroyed
    /// ([`crate::ledger::Fence`]).
    pub(crate) remote: bool,
}

/// Memory of a deregistered region that a peer may still reach through a QP of its PD
/// (siw, rxe: [`crate::ledger::Fence`]); freed when dropped.
pub(crate) struct Deferred {
    mem: RawMemory,
    free: unsafe fn(RawMemory),
}

// SAFETY: as for Region: the memory of an `M`, owned as raw parts; `MrMemory`'s contract lets
// `from_raw` run on any thread, and nothing reaches the bytes through a `Deferred`.
unsafe impl Send for Deferred {}

impl fmt::Debug for Deferred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deferred")
            .field("addr", &self.mem.ptr)
            .field("len", &self.mem.len)
            .finish()
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // SAFETY: a Deferred is made only from a deregistered region's parts (into_raw's,
        // used once), and dropped only when no QP that existed at its deregistration is left
        // (Fence::qp_destroyed) or none existed (Fence::defer's Err): nothing can reach it.
        unsafe { (self.free)(self.mem) }
    }
}

/// Frees the memory of a region of `pd` just deregistered, now or, where a peer may still
/// reach it (a region with remote access on siw or rxe: [`crate::ledger::Fence`]), when the
/// PD's QPs of now are destroyed. `Some` gives the parts back to free now.
pub(crate) fn release(
    pd: &Pd,
    remote: bool,
    mem: RawMemory,
    free: unsafe fn(RawMemory),
) -> Option<RawMemory> {
    match pd.fence() {
        Some(f) if remote => match f.defer(Deferred { mem, free }) {
            Ok(()) => None,
            Err(d) => {
                let d = std::mem::ManuallyDrop::new(d);
                Some(d.mem)
            }
        },
        _ => Some(mem),
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("handle", &self.handle)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .finish_non_exhaustive()
    }
}

// SAFETY: a Region owns the memory of an `M` as raw parts; `MrMemory`'s contract lets `from_raw`
// run on any thread, and the bytes are reached only by `crate::kernel::shared`'s atomic copies.
unsafe impl Send for Region {}
// SAFETY: shared access reads only plain fields; the memory is not touched through `&Region`.
unsafe impl Sync for Region {}

impl Holdable for Region {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    /// True when the memory may be freed after the `Mr` is dropped (owned memory): only such
    /// regions may be written by a safe request ([`crate::ledger`]).
    fn deferrable(&self) -> bool {
        self.owned
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.pd.regions().remove(self.lkey);
        match dereg_noted(&self.pd, self.handle, self.lkey) {
            Ok(()) => {
                if let Some(mem) = release(&self.pd, self.remote, self.mem, self.free) {
                    // SAFETY: deregistered, and no ledger holds the region any more (this is
                    // its last `Arc`), so no request that may write it is outstanding; no
                    // peer can reach it either (release: not a remote region on siw/rxe, or no
                    // QP of the PD left); the parts come from into_raw and are used once
                    // (this is Drop).
                    unsafe { (self.free)(mem) }
                }
            }
            Err(e) => {
                dereg_failed(&self.pd, self.handle, self.mem, self.owned, e);
            }
        }
    }
}

/// Logs (and for borrowed memory, aborts on) a failed deregistration; the memory is leaked.
#[cold]
pub(crate) fn dereg_failed(pd: &Pd, handle: u32, mem: RawMemory, owned: bool, e: Errno) -> Error {
    let ctx = pd.context();
    let err = Error::os(
        format!(
            "deregister MR {handle} ({} bytes at {:p}) on {}",
            mem.len,
            mem.ptr,
            ctx.name()
        ),
        e,
    );
    tracing::error!(
        device = ctx.name(),
        handle,
        "{err}; leaking the memory: the device may still reach it"
    );
    if !owned {
        // The memory is borrowed: its owner gets it back when we return, while the device
        // may still write it. Nothing but stopping the process keeps that from happening.
        tracing::error!("aborting: borrowed memory of a failed deregistration");
        std::process::abort();
    }
    err
}

/// Deregisters MR `handle` of `pd` whose local key is `lkey`, keeping the PD's record of
/// READ sinks ([`OpSet`](crate::OpSet), iWARP) true: the key leaves it before the kernel can give it to a
/// new region, and comes back if the kernel refuses.
pub(crate) fn dereg_noted(pd: &Pd, handle: u32, lkey: u32) -> std::result::Result<(), Errno> {
    let sinks = pd.read_sinks();
    let was = sinks.is_some_and(|s| s.deregistering(lkey));
    let r = pd
        .odp_keys()
        .deregister(lkey, || dereg_mr(pd.context(), handle));
    if let (Err(_), Some(s)) = (&r, sinks) {
        s.restore(lkey, was);
    }
    r
}

/// Deregisters MR `handle`: ioctl `MR_DESTROY`, or the legacy `DEREG_MR` command.
fn dereg_mr(ctx: &Context, handle: u32) -> std::result::Result<(), Errno> {
    ctx.ioctl_or_write(
        Method::DestroyMr,
        &mut (),
        |c, _| c.idr(mr::ATTR_DESTROY_HANDLE, handle),
        |_| {
            let req = ib_uverbs_dereg_mr { mr_handle: handle };
            write::cmd_legacy(ctx.cmd_fd(), nr::DEREG_MR, req.as_bytes(), &[], &mut [])
        },
    )
    .map(drop)
}
