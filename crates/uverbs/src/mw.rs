//! Memory windows: remote keys for a part of a memory region, bound and invalidated through
//! the send queue.
//!
//! An [`Mw`] is allocated on a PD ([`Mw::alloc`], write command `ALLOC_MW`; no ioctl method
//! exists on 6.1 or 6.12) and deallocated on drop (ioctl `MW_DESTROY`, or the write command
//! `DEALLOC_MW`). Binding it gives a peer RDMA access to `addr..addr + length` of a memory
//! region under the window's rkey:
//!
//! - **type 1**: bound (and rebound, or unbound with length 0) by [`Qp::bind_mw`], which posts
//!   a bind work request on the QP's send queue; invalidated only by another bind or by
//!   deallocation;
//! - **type 2**: bound by a bind work request ([`Qp::bind_mw`]; the C drop-in also posts
//!   [`SendOp::BindMw`] in a list) on one QP, which is then the only QP through which peers
//!   may use the rkey; invalidated by [`SendOp::LocalInv`] on that QP, by a peer's
//!   [`SendOp::SendWithInv`], or by deallocation.
//!
//! Each bind gives the window a new rkey: the kernel's 24-bit index with a new low byte
//! ([`MwBinding::rkey`]). [`Mw::rkey`] is the key of the last bind posted through
//! [`Qp::bind_mw`] (or noted with `Mw::set_rkey`).
//!
//! # Why binding in safe code is sound
//!
//! A bound window lets a peer read or write the region's memory, so a safe bind may grant no
//! more than the region itself does ([`Mw::bind_info`] checks it before anything is posted):
//!
//! 1. the region is an [`Mr<M>`] over memory that lives as long as needed (`M: 'static`:
//!    `Vec`, `Box<[u8]>`, `PageBuf`, a `&'static mut [u8]`): the memory Rust only reaches
//!    through atomic copies, freed only after a successful deregistration. The window keeps
//!    every region it was bound into ([`Mw::bind_info`] records it): dropping the `Mr` while
//!    the window lives deregisters nothing, [`Mr::deregister`] answers `EBUSY`, and the region
//!    is deregistered and its memory freed only after the window's deallocation succeeded
//!    (a failed deallocation leaks them). Not every kernel would refuse the deregistration
//!    itself (rxe does, `num_mw`, IBA 10.6.7.2.6; mlx5's binds are WQEs the kernel never
//!    sees). Scoped (borrowed) regions are refused: their borrow ends with the scope;
//! 2. the region was registered with `MW_BIND`, on the window's PD;
//! 3. the window's remote rights (`REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`) are among
//!    the region's own: so a region's access flags stay the most any peer can do to its
//!    memory, through its rkey or any window (the IBA lets a window add remote write to a
//!    region with only local write; the safe API does not; the C drop-in's binds, made with
//!    the `unsafe` `MwBind::from_raw` of the feature `internals`, do);
//! 4. the range lies inside the region and is not empty (zero-based windows are not offered).
//!
//! The kernel checks the same again when it executes the bind (and fails it with
//! `MW_BIND_ERR`): the `mr_lkey` names a live region of the QP's device, the region allows
//! binds and lies around the range, the window is in the right state.
//!
//! A bind names its window and its region by keys, and keys are reused: a window deallocated
//! while its bind is still queued (behind a long send queue) lets that bind bind whichever
//! window gets its key next, in whichever region got the region's key, which that window does
//! not keep. So the checked bind is an [`MwBinding`]: not `Copy` or `Clone`, it holds its
//! window (and the window the region), and [`Qp::bind_mw`] consumes it and leaves the window
//! in the QP's send ledger until the bind is over: a signaled bind, READ or atomic at or
//! after it completed with success, or the QP was destroyed (`crate::ledger`). Until then
//! dropping the [`Mw`] deallocates nothing and frees none of its regions; a QP in ERROR whose
//! requests are never flushed keeps them until it is destroyed. The raw operands
//! ([`MwBind`], `Copy`, posted as [`SendOp::BindMw`]) are made only by the `unsafe`
//! `MwBind::from_raw`, whose caller promises the same for every post: the C drop-in's
//! (feature `internals`); a Rust user binds with [`Qp::bind_mw`].

#![allow(unsafe_code)] // posting a bind work request

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::context::{Context, Method};
use crate::error::{Error, PostError, PostQueue, Result};
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::obj::mw;
use crate::kernel::abi::obj::{ib_uverbs_alloc_mw, ib_uverbs_alloc_mw_resp, ib_uverbs_dealloc_mw};
use crate::kernel::write;
use crate::ledger::lock;
use crate::mr::{AccessFlags, Mr, MrMemory};
use crate::pd::region::Region;
use crate::pd::Pd;
use crate::qp::Qp;
use crate::wr::{SendFlags, SendOp, SendWr, Sge};
use rustix::io::Errno;
use zerocopy::IntoBytes as _;

pub use crate::values::{MwBind, MwType};

/// A checked bind of a window ([`Mw::bind_info`], [`Mw::unbind_info`]), posted once by
/// [`Qp::bind_mw`], which consumes it. It holds its window, so a bind for a deallocated
/// window cannot be posted, and it is neither `Copy` nor `Clone`, so no stale copy of it can
/// be posted later (module docs, "Why binding in safe code is sound").
///
/// ```compile_fail,E0382
/// # use rverbs_uverbs::mw::MwBinding;
/// # use rverbs_uverbs::SendFlags;
/// # fn demo(qp: &rverbs_uverbs::qp::Qp, bind: MwBinding) {
/// let _ = qp.bind_mw(bind, 1, SendFlags::SIGNALED);
/// let _ = qp.bind_mw(bind, 2, SendFlags::SIGNALED); // posted once only
/// # }
/// ```
/// ```compile_fail,E0599
/// # use rverbs_uverbs::mw::MwBinding;
/// # fn demo(bind: MwBinding) -> (MwBinding, MwBinding) {
/// (bind.clone(), bind) // no copies
/// # }
/// ```
#[must_use = "a bind does nothing until it is posted with Qp::bind_mw"]
pub struct MwBinding {
    mw: Arc<Mw>,
    wr: MwBind,
}

impl fmt::Debug for MwBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MwBinding")
            .field("mw", &self.mw)
            .field("rkey", &format_args!("{:#x}", self.wr.rkey))
            .field("length", &self.wr.length)
            .field("access", &self.wr.access)
            .finish()
    }
}

impl MwBinding {
    /// The window's rkey after the bind: what peers name once it completed.
    pub fn rkey(&self) -> u32 {
        self.wr.rkey
    }
    /// The window being bound.
    pub fn mw(&self) -> &Arc<Mw> {
        &self.mw
    }
    /// Bytes the window will cover (0: an unbind).
    pub fn length(&self) -> u64 {
        self.wr.length
    }
}

/// The access bits a window may carry in the safe API: the remote rights (and LOCAL_WRITE,
/// which rdma-core's callers pass and the kernel ignores for windows).
const MW_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);
const REMOTE: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC);

internal! {
/// The next rkey of a window or region: same index, the low 8 bits incremented
/// (`ibv_inc_rkey`).
pub const fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}
}

/// A memory window.
pub struct Mw {
    pd: Arc<Pd>,
    handle: u32,
    mw_type: MwType,
    rkey: AtomicU32,
    /// The regions [`bind_info`](Mw::bind_info) made binds into: kept (registered, their
    /// memory allocated) until the window is deallocated, whatever happens to their `Mr`s. A
    /// bound window lets a peer reach the region under the window's rkey, and not every
    /// kernel refuses to deregister a region with a bound window (rxe counts its windows;
    /// mlx5's binds are WQEs the kernel never sees, and its deregistration counts nothing), so
    /// the window, not the kernel, keeps it. A rebind or an invalidation does not let go of
    /// the older regions: whether it took effect is the device's to say (a failed bind may
    /// leave the old binding), so only the deallocation ends them. Grows by one entry per
    /// distinct region bound.
    bound: Mutex<Vec<Arc<Region>>>,
}

impl fmt::Debug for Mw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mw")
            .field("device", &self.pd.context().name())
            .field("handle", &self.handle)
            .field("type", &self.mw_type)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

impl Mw {
    /// Allocates a window of `mw_type` on `pd`.
    pub fn alloc(pd: &Arc<Pd>, mw_type: MwType) -> Result<Arc<Mw>> {
        let ctx = pd.context();
        let op = || {
            format!(
                "allocate {mw_type} MW on {} (PD handle {})",
                ctx.name(),
                pd.handle()
            )
        };
        if mw_type != MwType::TYPE_1 && mw_type != MwType::TYPE_2 {
            return Err(Error::invalid(op(), "the type must be 1 or 2").into());
        }
        let req = ib_uverbs_alloc_mw {
            response: 0,
            pd_handle: pd.handle(),
            mw_type: mw_type.0,
            reserved: [0; 3],
        };
        let mut resp = ib_uverbs_alloc_mw_resp::default();
        write::cmd_legacy_simple(ctx.cmd_fd(), nr::ALLOC_MW, &req, &mut resp).map_err(|e| {
            let hint = match e {
                Errno::OPNOTSUPP => "; the device has no memory windows of this type",
                _ => "",
            };
            Error::os(format!("{}{hint}", op()), e)
        })?;
        tracing::debug!(
            device = ctx.name(),
            handle = resp.mw_handle,
            rkey = resp.rkey,
            "MW allocated"
        );
        Ok(Arc::new(Mw {
            pd: pd.clone(),
            handle: resp.mw_handle,
            mw_type,
            rkey: AtomicU32::new(resp.rkey),
            bound: Mutex::new(Vec::new()),
        }))
    }

    internal! {
    /// The kernel handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    }
    /// Type 1 or 2.
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }
    /// The protection domain.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }
    /// The window's current rkey: from the allocation, then from each bind posted through
    /// [`Qp::bind_mw`] (or noted with `Mw::set_rkey`). What a peer names.
    pub fn rkey(&self) -> u32 {
        // Relaxed: a plain value; ordering with the bind is the caller's (post, completion).
        self.rkey.load(Ordering::Relaxed)
    }
    internal! {
    /// Records `rkey` as the window's key: after posting a [`SendOp::BindMw`] yourself (in a
    /// [`Qp::post_send`] list), with [`MwBind::rkey`], so that the next bind starts from it.
    pub fn set_rkey(&self, rkey: u32) {
        // Relaxed: as in rkey().
        self.rkey.store(rkey, Ordering::Relaxed)
    }
    }

    fn op(&self, what: &str) -> String {
        format!(
            "{what} {} MW {} (rkey {:#x}) on {} (PD handle {})",
            self.mw_type,
            self.handle,
            self.rkey(),
            self.pd.context().name(),
            self.pd.handle()
        )
    }

    /// A bind of this window to `range` of `mr` with `access`, checked as the module docs
    /// say ("Why binding in safe code is sound"); post it with [`Qp::bind_mw`]. The bind's
    /// new rkey is `inc_rkey` of [`Mw::rkey`]. From here on the window keeps `mr`'s region.
    ///
    /// ```no_run
    /// # use rverbs_uverbs::mr::{AccessFlags, Mr, PageBuf};
    /// # use rverbs_uverbs::mw::{Mw, MwType};
    /// # use rverbs_uverbs::SendFlags;
    /// # fn demo(qp: &rverbs_uverbs::qp::Qp) -> std::io::Result<()> {
    /// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
    /// let mr = Mr::register(qp.pd(), PageBuf::new(8192)?, access)?;
    /// let mw = Mw::alloc(qp.pd(), MwType::TYPE_1)?;
    /// let bind = mw.bind_info(&mr, 4096..8192, AccessFlags::REMOTE_WRITE)?;
    /// qp.bind_mw(bind, 1, SendFlags::SIGNALED)?;
    /// // ... after the BIND_MW completion, a peer writes 4096..8192 under mw.rkey()
    /// # Ok(()) }
    /// ```
    ///
    /// A scoped (borrowed) region cannot be bound: its deregistration failing under a bound
    /// window would have to abort the process.
    /// ```compile_fail,E0597
    /// # use rverbs_uverbs::mr::{AccessFlags, Mr};
    /// # use rverbs_uverbs::mw::Mw;
    /// # fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>, mw: &std::sync::Arc<Mw>) {
    /// let mut buf = [0u8; 4096];
    /// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::MW_BIND;
    /// let _ = Mr::scoped(pd, &mut buf[..], access, |mr| {
    ///     mw.bind_info(mr, 0..64, AccessFlags::REMOTE_READ).is_ok()
    /// });
    /// # }
    /// ```
    ///
    /// The binding holds the window's `Arc`, so it is made from one: an `Mw` taken out of its
    /// `Arc` (`Arc::into_inner`) makes no binding.
    /// ```compile_fail,E0599
    /// # use rverbs_uverbs::mr::{AccessFlags, Mr};
    /// # use rverbs_uverbs::mw::Mw;
    /// # fn demo(mw: std::sync::Arc<Mw>, mr: &Mr<Vec<u8>>) {
    /// let mw: Mw = std::sync::Arc::into_inner(mw).unwrap();
    /// let _ = mw.bind_info(mr, 0..64, AccessFlags::REMOTE_READ);
    /// # }
    /// ```
    pub fn bind_info<M: MrMemory + 'static>(
        self: &Arc<Self>,
        mr: &Mr<M>,
        range: Range<usize>,
        access: AccessFlags,
    ) -> Result<MwBinding> {
        let op = || self.op("bind");
        if !Arc::ptr_eq(mr.pd(), &self.pd) {
            return Err(Error::invalid(
                op(),
                format!(
                    "the MR (lkey {:#x}) belongs to PD handle {}, not the window's",
                    mr.lkey(),
                    mr.pd().handle()
                ),
            )
            .into());
        }
        if !mr.access().contains(AccessFlags::MW_BIND) {
            return Err(Error::invalid(
                op(),
                format!(
                    "the MR (lkey {:#x}) was registered with {:?}, without MW_BIND",
                    mr.lkey(),
                    mr.access()
                ),
            )
            .into());
        }
        let extra = access - MW_ACCESS;
        if !extra.is_empty() {
            return Err(Error::invalid(
                op(),
                format!(
                    "access {access:?}: a window takes only REMOTE_READ, REMOTE_WRITE, \
                     REMOTE_ATOMIC (and LOCAL_WRITE), not {extra:?}"
                ),
            )
            .into());
        }
        let beyond = (access & REMOTE) - mr.access();
        if !beyond.is_empty() {
            return Err(Error::invalid(
                op(),
                format!(
                    "access {access:?} grants {beyond:?}, which the MR (lkey {:#x}, {:?}) \
                     does not: a window may grant only the region's own remote rights",
                    mr.lkey(),
                    mr.access()
                ),
            )
            .into());
        }
        if range.start >= range.end || range.end > mr.len() {
            return Err(Error::invalid(
                op(),
                format!(
                    "range {range:?} is empty or outside the MR of {} bytes at {:#x}",
                    mr.len(),
                    mr.addr()
                ),
            )
            .into());
        }
        // Every region, owned or a `'static` borrow: a `Mr<&'static mut [u8]>` dropped under
        // a bound window would otherwise be deregistered (mlx5: succeeds, the window's
        // translation left pointing at it; rxe: refused, and a failed deregistration of
        // borrowed memory aborts), and `Mr::deregister` would hand the borrow back while a
        // peer can still write through the window.
        let mut b = lock(&self.bound);
        if !b.iter().any(|r| Arc::ptr_eq(r, mr.region())) {
            b.push(mr.region().clone());
        }
        drop(b);
        Ok(self.next_bind(
            mr.lkey(),
            mr.addr() + range.start as u64,
            range.len() as u64,
            access,
        ))
    }

    /// A bind of this window under its next key (`inc_rkey` of the current one).
    fn next_bind(
        self: &Arc<Self>,
        mr_lkey: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> MwBinding {
        let mw_rkey = self.rkey();
        MwBinding {
            // The binding holds the window (module docs): taken from the `Arc` the caller
            // holds, so an `Mw` moved out of its `Arc` (`Arc::into_inner`) cannot make one.
            mw: Arc::clone(self),
            wr: MwBind {
                mw_type: self.mw_type,
                mw_rkey,
                rkey: inc_rkey(mw_rkey),
                mr_lkey,
                addr,
                length,
                access,
            },
        }
    }

    /// The bind that unbinds a type 1 window (length 0): peers' accesses with its rkey fail
    /// from then on. Type 2 windows are invalidated instead ([`SendOp::LocalInv`],
    /// [`SendOp::SendWithInv`]).
    pub fn unbind_info(self: &Arc<Self>) -> Result<MwBinding> {
        if self.mw_type != MwType::TYPE_1 {
            return Err(Error::invalid(
                self.op("unbind"),
                "only type 1 windows are unbound by a bind of length 0; invalidate a type 2 \
                 window (LOCAL_INV or SEND_WITH_INV)",
            )
            .into());
        }
        Ok(self.next_bind(0, 0, 0, AccessFlags::empty()))
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // No bind of this window is queued any more: each holds it in its QP's send ledger
        // until it is over (module docs), so its key cannot reach a later window.
        let ctx = self.pd.context();
        let bound = std::mem::take(&mut *lock(&self.bound));
        if let Err(e) = dealloc_mw(ctx, self.handle) {
            // The window may still be bound: what it was bound in stays allocated.
            std::mem::forget(bound);
            tracing::error!(
                device = ctx.name(),
                handle = self.handle,
                "{}",
                Error::os(format!("deallocate {} MW", self.mw_type), e)
            );
        }
    }
}

/// Deallocates MW `handle`: ioctl `MW_DESTROY`, or the write command `DEALLOC_MW`. rxe
/// invalidates a bound window here (its region can then be deregistered).
fn dealloc_mw(ctx: &Context, handle: u32) -> std::result::Result<(), Errno> {
    ctx.ioctl_or_write(
        Method::DestroyMw,
        &mut (),
        |c, _| c.idr(mw::ATTR_DESTROY_HANDLE, handle),
        |_| {
            let req = ib_uverbs_dealloc_mw { mw_handle: handle };
            write::cmd_legacy(ctx.cmd_fd(), nr::DEALLOC_MW, req.as_bytes(), &[], &mut [])
        },
    )
    .map(drop)
}

impl Qp {
    /// Posts `bind`, a bind work request for its window (`ibv_bind_mw` for type 1; the same
    /// request binds a type 2 window to this QP) and, once posted, makes
    /// [`MwBinding::rkey`] the window's [`Mw::rkey`]. The bind completes on the send CQ with
    /// opcode `BIND_MW` (if `flags` has SIGNALED or the QP signals all) or fails there with
    /// `MW_BIND_ERR`; peers may use the new rkey after a successful completion.
    ///
    /// The window (and the regions it keeps) stays allocated, whatever happens to the `Mw`
    /// and `Mr`s, until a signaled bind, READ or atomic posted here at or after this one
    /// completed with success, or the QP is destroyed (module docs).
    ///
    /// Refused before posting: a window of another PD than the QP's, a `bind` made before
    /// another bind of its window was posted (it names an older key), an unbind of a type 2
    /// window. `bind` is consumed either way.
    pub fn bind_mw(
        &self,
        bind: MwBinding,
        wr_id: u64,
        flags: SendFlags,
    ) -> std::result::Result<(), PostError> {
        let MwBinding { mw, wr: bind } = bind;
        let ctx = self.pd().context().name();
        let fail =
            |what: String| PostError::invalid(0, what).at(ctx, PostQueue::Send, self.qp_num());
        if !Arc::ptr_eq(mw.pd(), self.pd()) {
            return Err(fail(format!(
                "bind {} MW {}: the window is on PD handle {}, the QP on PD handle {}",
                mw.mw_type,
                mw.handle,
                mw.pd().handle(),
                self.pd().handle()
            )));
        }
        if bind.mw_rkey != mw.rkey() || bind.mw_type != mw.mw_type {
            return Err(fail(format!(
                "bind {} MW {}: the bind was made for {} window rkey {:#x}, the window's rkey \
                 is {:#x} (another bind of it was posted since)",
                mw.mw_type,
                mw.handle,
                bind.mw_type,
                bind.mw_rkey,
                mw.rkey()
            )));
        }
        if bind.length == 0 && mw.mw_type == MwType::TYPE_2 {
            return Err(fail(format!(
                "bind type 2 MW {}: length 0 (invalidate it instead)",
                mw.handle
            )));
        }
        let wr = SendWr::<Sge> {
            wr_id,
            op: SendOp::BindMw(bind),
            sge: &[],
            flags,
            ud: None,
        };
        let keep: Arc<dyn Send + Sync> = mw.clone();
        // SAFETY: the request has no SGEs; what the bind grants was checked when the binding
        // was made (Mw::bind_info), whose window keeps the region; the window is kept in the
        // send ledger until the bind is over (`keep`).
        unsafe { self.post_send_checked(&[wr], false, Some(keep)) }?;
        mw.set_rkey(bind.rkey);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rkey_increments_the_low_byte_only() {
        assert_eq!(inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
    }
}
