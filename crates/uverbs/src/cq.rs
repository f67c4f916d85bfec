//! Completion queues.

use std::fmt;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::channel::CompChannel;
use crate::context::Context;
use crate::context::{Method, Via};
use crate::driver::{CqCreated, CqOps, KernelObj, OpsGuard, OpsLock};
use crate::error::{Error, Result};
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::ioctl::{UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT};
use crate::kernel::abi::obj::cq;
use crate::kernel::abi::obj::{
    ib_uverbs_create_cq, ib_uverbs_create_cq_resp, ib_uverbs_destroy_cq,
};
use crate::kernel::abi::obj::{
    ib_uverbs_destroy_cq_resp, ib_uverbs_resize_cq, ib_uverbs_resize_cq_resp,
};
use crate::kernel::write;
use crate::ledger::{Freed, Watch};
use crate::pd::region::Region;
use crate::wc::{RawWc, WorkCompletion};
use std::os::fd::AsRawFd;
use zerocopy::{FromBytes, IntoBytes};

/// A completion queue. QPs keep their CQs alive (`Arc<Cq>`).
///
/// Polling locks a small lock around the provider's ring (uncontended: one compare-and-swap in,
/// one store out), which makes `Cq` `Sync`: several threads may poll, arm and wait on it.
///
/// # Soundness
///
/// The ring is shared with the kernel (rxe) or the device (mlx5) and is never behind a Rust
/// reference: the provider loads the producer index or owner bit with Acquire, copies each
/// entry out by value, and publishes the consumer index with Release, all under the CQ's lock
/// (so two threads never consume the same slots). A [`CqView`] holds that lock and reads only
/// the caller's copies; forgetting one leaves the CQ locked (a hang, never UB). The ring is
/// unmapped only after the kernel object is destroyed, and the CQ lives while any QP using it
/// does (QPs hold `Arc<Cq>`), so nothing can write a ring that is gone.
pub struct Cq {
    // Drop order: `Drop::drop` destroys the kernel object first; the fields then drop in
    // declaration order: the provider's data path (`ops`: rings unmapped, registrations
    // removed) before the parents it was created under (the `Arc`s after it).
    ops: OpsLock<Box<dyn CqOps>>,
    ctx: Arc<Context>,
    channel: Option<Arc<CompChannel>>,
    handle: u32,
    cqe: AtomicU32,
    user_handle: u64,
    events_received: AtomicU32,
    events_acked: AtomicU32,
    /// The provider's `CqOps::arms_in_kernel`: arm and take events without the lock.
    arms_in_kernel: bool,
    /// The provider's `CqOps::cleans_on_qp_reset`: a modify to RESET of one of this CQ's QPs
    /// takes the lock and calls the provider; else it touches nothing here.
    cleans_on_qp_reset: bool,
    /// The ledgers of the QPs completing here: every poll settles them with what it took
    /// ([`crate::ledger`]) under the ring's lock (so a completion polled before a QP's destroy
    /// cannot be counted for a new QP of the same number). What a settle released (a region's
    /// deregistration, a window's deallocation, a user's `MrMemory` drop) is dropped only
    /// after that lock is released ([`Freed`]).
    watch: Watch<Region>,
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq")
            .field("device", &self.ctx.name())
            .field("handle", &self.handle)
            .field("cqe", &self.cqe())
            .field("channel", &self.channel.is_some())
            .finish()
    }
}

/// Options for [`Cq::create`].
#[derive(Clone, Debug, Default)]
pub struct CqOptions {
    /// Completion events go to this channel (needed for [`Cq::req_notify`] to be useful).
    pub channel: Option<Arc<CompChannel>>,
    /// Completion vector (interrupt) to use; `0` when unsure.
    pub comp_vector: u32,
}

impl Cq {
    /// Creates a CQ with room for at least `cqe` completions.
    pub fn create(ctx: &Arc<Context>, cqe: u32, opts: CqOptions) -> Result<Arc<Cq>> {
        let op = || format!("create CQ of {cqe} entries on {}", ctx.name());
        if cqe == 0 {
            return Err(Error::invalid(op(), "cqe must be at least 1").into());
        }
        if let Some(max) = ctx.cached_max_cqe() {
            if cqe > max {
                return Err(Error::invalid(op(), format!("device limit max_cqe is {max}")).into());
            }
        }
        if let Some(ch) = &opts.channel {
            if !Arc::ptr_eq(ch.context(), ctx) {
                return Err(Error::invalid(op(), "completion channel of another context").into());
            }
        }
        let driver = ctx.driver()?;
        let kernel_cqe = driver.adjust_cqe(cqe)?;
        let user_handle = crate::util::next_user_handle();
        let mut created: Option<CqCreated> = None;
        // SAFETY: the fd is this context's command fd, the driver is the one
        // attached to it, and the callback issues CREATE_CQ on that fd with the driver's data
        // and returns the kernel's answer unaltered (the create contract).
        #[allow(unsafe_code)]
        let res = unsafe {
            driver.create_cq(ctx.cmd_fd(), cqe, &mut |uhw_in, uhw_out| {
                // The response's CQE count and the driver's output, filled by either path.
                let mut out = (0u32, uhw_out);
                let via = ctx.ioctl_or_write(
                    Method::CreateCq,
                    &mut out,
                    |c, (resp_cqe, uhw_out)| {
                        let h = c.idr_new(cq::ATTR_CREATE_HANDLE);
                        c.ptr_in(cq::ATTR_CREATE_CQE, &kernel_cqe);
                        c.ptr_in(cq::ATTR_CREATE_USER_HANDLE, &user_handle);
                        if let Some(ch) = &opts.channel {
                            c.fd(cq::ATTR_CREATE_COMP_CHANNEL, ch.as_fd());
                        }
                        c.ptr_in(cq::ATTR_CREATE_COMP_VECTOR, &opts.comp_vector);
                        c.ptr_out(cq::ATTR_CREATE_RESP_CQE, resp_cqe);
                        c.fd(cq::ATTR_CREATE_EVENT_FD, ctx.async_fd());
                        c.optional();
                        if !uhw_in.is_empty() {
                            c.ptr_in_bytes(UVERBS_ATTR_UHW_IN, uhw_in);
                        }
                        if !uhw_out.is_empty() {
                            c.ptr_out_bytes(UVERBS_ATTR_UHW_OUT, uhw_out);
                        }
                        h
                    },
                    |(_, uhw_out)| {
                        let req = ib_uverbs_create_cq {
                            user_handle,
                            cqe: kernel_cqe,
                            comp_vector: opts.comp_vector,
                            comp_channel: opts
                                .channel
                                .as_ref()
                                .map_or(-1, |ch| ch.as_fd().as_raw_fd()),
                            ..Default::default()
                        };
                        create_cq_write(ctx, req, uhw_in, uhw_out)
                    },
                );
                let r = via.map(|via| match via {
                    Via::Ioctl(a, h) => CqCreated {
                        handle: a.handle(h),
                        cqe: out.0,
                    },
                    Via::Write(created) => created,
                });
                let r = r.map_err(|e| {
                    let mut err = Error::os(op(), e);
                    if e == rustix::io::Errno::INVAL {
                        if let Some(max) = ctx.cached_max_cqe() {
                            err = err.with_detail(format!("device max_cqe {max}"));
                        }
                    }
                    err
                })?;
                created = Some(r);
                Ok(r)
            })
        };
        match res {
            Ok(ops) => {
                let k = created.expect("provider built a CQ without creating it");
                tracing::debug!(
                    device = ctx.name(),
                    handle = k.handle,
                    cqe = k.cqe,
                    "CQ created"
                );
                Ok(Arc::new(Cq {
                    ctx: ctx.clone(),
                    channel: opts.channel,
                    handle: k.handle,
                    cqe: AtomicU32::new(k.cqe),
                    user_handle,
                    events_received: AtomicU32::new(0),
                    events_acked: AtomicU32::new(0),
                    arms_in_kernel: ops.arms_in_kernel(),
                    cleans_on_qp_reset: ops.cleans_on_qp_reset(),
                    ops: OpsLock::new(ops),
                    watch: Watch::default(),
                }))
            }
            Err(e) => {
                if let Some(k) = created {
                    // The kernel object exists but the provider could not set up its side.
                    let _ = destroy_kernel_cq(ctx, k.handle);
                }
                Err(e)
            }
        }
    }

    internal! {
    /// The kernel handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    }

    /// Entries the kernel gave (≥ asked).
    pub fn cqe(&self) -> u32 {
        // Relaxed: a plain value, written under the ring lock by resize().
        self.cqe.load(Ordering::Relaxed)
    }

    /// Resizes the CQ to hold at least `cqe` completions (`ibv_resize_cq`); completions not
    /// yet polled are kept. Returns the depth the kernel gave. rxe resizes; mlx5 and siw
    /// refuse (unsupported).
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        let ctx = &self.ctx;
        let op = || {
            format!(
                "resize CQ {} on {} from {} to {cqe} entries",
                self.handle,
                ctx.name(),
                self.cqe()
            )
        };
        if cqe == 0 {
            return Err(Error::invalid(op(), "cqe must be at least 1").into());
        }
        if let Some(max) = ctx.cached_max_cqe() {
            if cqe > max {
                return Err(Error::invalid(op(), format!("device limit max_cqe is {max}")).into());
            }
        }
        let mut ops = self.lock();
        let handle = self.handle;
        let mut new_cqe = 0;
        // SAFETY: the fd is the CQ's context's command fd and the callback issues
        // RESIZE_CQ for this CQ on it with the driver's data, returning the kernel's answer
        // unaltered (the create contract).
        #[allow(unsafe_code)]
        unsafe {
            ops.resize(ctx.cmd_fd(), cqe, &mut |uhw_in, uhw_out| {
                let req = ib_uverbs_resize_cq {
                    response: 0,
                    cq_handle: handle,
                    cqe,
                };
                let core_len = size_of::<ib_uverbs_resize_cq_resp>();
                let mut resp = vec![0u8; core_len + uhw_out.len()];
                write::cmd_legacy(
                    ctx.cmd_fd(),
                    nr::RESIZE_CQ,
                    zerocopy::IntoBytes::as_bytes(&req),
                    uhw_in,
                    &mut resp,
                )
                .map_err(|e| Error::os(op(), e))?;
                let r = <ib_uverbs_resize_cq_resp as zerocopy::FromBytes>::read_from_prefix(&resp)
                    .map(|(r, _)| r)
                    .map_err(|_| Error::protocol(op(), "short response"))?;
                uhw_out.copy_from_slice(&resp[core_len..]);
                new_cqe = r.cqe;
                Ok(r.cqe)
            })
        }?;
        self.cqe.store(new_cqe, Ordering::Relaxed);
        Ok(new_cqe)
    }

    /// The value completion events on the channel carry for this CQ.
    pub fn user_handle(&self) -> u64 {
        self.user_handle
    }

    /// The completion channel, if any.
    pub fn channel(&self) -> Option<&Arc<CompChannel>> {
        self.channel.as_ref()
    }

    /// The context.
    #[inline]
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    #[inline]
    fn lock(&self) -> OpsGuard<'_, Box<dyn CqOps>> {
        // No poisoning: a panic while polling cannot leave the ring inconsistent (indices are
        // published atomically), see OpsLock.
        self.ops.lock()
    }

    /// Moves up to `out.len()` completions into `out`; returns how many. Never blocks.
    #[inline]
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut ops = self.lock();
        let epoch = self.watch.epoch();
        let n = ops.poll(out).min(out.len());
        // Under the ring's lock: settles happen in the ring's order (crate::ledger::Watch);
        // what they release is dropped after it.
        self.watch
            .settle_unlocking(ops, out[..n].iter(), (n < out.len()).then_some(epoch));
        n
    }

    /// Copies up to `out.len()` completions into `out` without decoding them and publishes
    /// the consumer index once; returns how many. Never blocks. The fastest poll: a field of
    /// a [`RawWc`] is decoded only when it is read (rxe copies its ring entries unchanged).
    /// After the call `out[..n]` are the caller's copies; the ring slots are free again.
    #[inline]
    pub fn poll_raw(&self, out: &mut [RawWc]) -> usize {
        let mut ops = self.lock();
        let epoch = self.watch.epoch();
        let n = ops.poll_raw(out).min(out.len());
        // Under the ring's lock: settles happen in the ring's order (crate::ledger::Watch);
        // what they release is dropped after it.
        self.watch
            .settle_unlocking(ops, out[..n].iter(), (n < out.len()).then_some(epoch));
        n
    }

    /// The CQ's watch over its QPs' ledgers ([`crate::ledger`]).
    pub(crate) fn watch(&self) -> &Watch<Region> {
        &self.watch
    }

    /// Starts a lazy poll (`ibv_start_poll`): takes the CQ's lock for the life of the
    /// returned [`CqView`] and copies a first batch of up to `slots.len()` completions into
    /// `slots` (publishing the consumer index once for the batch). The view reads them in
    /// place in `slots`, decoding a field only when it is read, and can take further batches
    /// under the same lock ([`CqView::next_batch`], or by iterating past the batch).
    ///
    /// While the view lives, every other use of this CQ (`poll`, `req_notify`, another view,
    /// from any thread) waits for it: drop it before waiting on anything else. Leaking it
    /// (`mem::forget`) leaves the CQ locked for good (later polls wait forever) but cannot
    /// lose or repeat a completion or touch memory: each batch is published when it is
    /// copied, never on drop. What the view's settles released (regions, windows) is
    /// dropped when the view is, after the lock; a leaked view never frees it.
    #[inline]
    pub fn start_poll<'a>(&'a self, slots: &'a mut [RawWc]) -> CqView<'a> {
        let mut ops = ViewOps::Locked(self.lock(), &self.watch, Freed::default());
        let len = ops.poll_raw(slots).min(slots.len());
        CqView {
            ops,
            slots,
            len,
            pos: 0,
        }
    }

    /// Polls one completion.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        let mut wc = [WorkCompletion::default()];
        (self.poll(&mut wc) == 1).then_some(wc[0])
    }

    /// Arms the CQ: the next completion (or next solicited one) produces an event on the
    /// channel. One-shot. Poll again after arming: a completion that arrived before the arm
    /// produced no event.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if self.channel.is_none() {
            return Err(Error::invalid(
                format!("arm CQ {} on {}", self.handle, self.ctx.name()),
                "the CQ has no completion channel",
            )
            .into());
        }
        if self.arms_in_kernel {
            // The provider's arm is this kernel command and guards nothing (arms_in_kernel).
            return crate::driver::req_notify_write(self.kobj(), solicited_only);
        }
        self.lock().arm(self.kobj(), solicited_only)
    }

    /// Waits on the CQ's channel for an event of this CQ (blocking), counts it, and returns.
    /// Events of other CQs on the same channel are an error here (use the channel directly).
    pub fn wait_event(&self) -> Result<()> {
        let ch = self.channel.as_ref().ok_or_else(|| {
            Error::invalid(
                format!("wait for event on CQ {}", self.handle),
                "the CQ has no completion channel",
            )
        })?;
        let ev = ch.get_event()?;
        if ev.cq_user_handle != self.user_handle {
            return Err(Error::protocol(
                format!("wait for event on CQ {}", self.handle),
                format!(
                    "event for another CQ (user handle {}) on a shared channel",
                    ev.cq_user_handle
                ),
            )
            .into());
        }
        self.event_received();
        Ok(())
    }

    /// Records that an event for this CQ was read from its channel (done by
    /// [`Cq::wait_event`]; call it when reading the channel yourself).
    pub fn event_received(&self) {
        // Relaxed: plain counters, read only for reporting.
        self.events_received.fetch_add(1, Ordering::Relaxed);
        if !self.arms_in_kernel {
            self.lock().event_received();
        }
    }

    /// Acknowledges `n` events (bookkeeping as libibverbs does; destroy never waits on it).
    pub fn ack_events(&self, n: u32) {
        self.events_acked.fetch_add(n, Ordering::Relaxed);
    }

    /// Destroys the CQ now if nothing else (no QP) holds it; otherwise returns it with an
    /// error naming how many holders remain.
    pub fn try_destroy(self: Arc<Self>) -> std::result::Result<(), (std::io::Error, Arc<Cq>)> {
        match Arc::try_unwrap(self) {
            Ok(cq) => {
                drop(cq);
                Ok(())
            }
            Err(cq) => {
                let n = Arc::strong_count(&cq) - 1;
                let e = Error::invalid(
                    format!("destroy CQ {} on {}", cq.handle, cq.ctx.name()),
                    format!("still in use: {n} other reference(s) (QPs keep their CQs)"),
                )
                .into();
                Err((e, cq))
            }
        }
    }

    #[inline]
    pub(crate) fn kobj(&self) -> KernelObj<'_> {
        KernelObj {
            fd: self.ctx.cmd_fd(),
            handle: self.handle,
        }
    }

    /// Tells the provider that QP `qp_num` (of this CQ's context) was moved to RESET
    /// ([`CqOps::qp_reset`](crate::driver::CqOps::qp_reset)), under this CQ's lock only; not
    /// at all when the provider has nothing to do there
    /// ([`CqOps::cleans_on_qp_reset`](crate::driver::CqOps::cleans_on_qp_reset) false, rxe), so
    /// that a reset then never waits for a poller holding the lock.
    pub(crate) fn qp_reset(&self, qp_num: u32, recv: bool) {
        if self.cleans_on_qp_reset {
            self.lock().qp_reset(qp_num, recv);
        }
    }

    /// Tells the provider that QP `qp` (number `qp_num`, of this CQ's context) was destroyed
    /// ([`CqOps::qp_destroyed`](crate::driver::CqOps::qp_destroyed)), under this CQ's lock
    /// only; not at all when the provider has nothing to do there (rxe, siw).
    pub(crate) fn qp_destroyed(
        &self,
        qp: &dyn crate::driver::QpOps,
        qp_num: u32,
        recv: bool,
        srq_done: &mut dyn FnMut(u64),
    ) {
        if self.cleans_on_qp_reset {
            self.lock().qp_destroyed(qp, qp_num, recv, srq_done);
        }
    }
}

/// A lazy, borrowed view of a CQ's completions (the idea of `ibv_cq_ex`'s start_poll /
/// next_poll / read_*), made by [`Cq::start_poll`]. It holds the CQ's lock for its life and
/// reads completions copied out of the ring into the caller's slots, never the shared ring:
/// [`completions`](Self::completions) is the current batch, [`next_batch`](Self::next_batch)
/// takes the next one, and as an [`Iterator`] it yields every completion (taking further
/// batches while the previous one filled the slots).
pub struct CqView<'a> {
    ops: ViewOps<'a>,
    slots: &'a mut [RawWc],
    len: usize,
    pos: usize,
}

/// The data path a view polls: a CQ's, under its lock (and its watch over the ledgers, and
/// what its settles released, dropped after the lock: the fields drop in order), or one the
/// caller lends.
enum ViewOps<'a> {
    Locked(
        OpsGuard<'a, Box<dyn CqOps>>,
        &'a Watch<Region>,
        Freed<Region>,
    ),
    Lent(&'a mut dyn CqOps),
}

impl ViewOps<'_> {
    #[inline(always)]
    fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        match self {
            ViewOps::Locked(g, w, freed) => {
                let epoch = w.epoch();
                let n = g.poll_raw(out).min(out.len());
                settle_raw(w, &out[..n], (n < out.len()).then_some(epoch), freed);
                n
            }
            ViewOps::Lent(o) => o.poll_raw(out),
        }
    }
}

/// Settles `watch`'s ledgers with the polled `wcs`; `drained` as for [`Watch::settle`].
#[inline]
fn settle_raw(
    watch: &Watch<Region>,
    wcs: &[RawWc],
    drained: Option<u64>,
    freed: &mut Freed<Region>,
) {
    watch.settle(wcs.iter(), drained, freed);
}

impl fmt::Debug for CqView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqView")
            .field("batch", &self.completions())
            .field("pos", &self.pos)
            .finish()
    }
}

impl<'a> CqView<'a> {
    internal! {
    /// A view over a provider's data path that is not inside a [`Cq`] (a provider's own
    /// tests, a ring driven outside the core): as [`Cq::start_poll`], with `&mut` access in
    /// place of the lock.
    pub fn from_ops(ops: &'a mut dyn CqOps, slots: &'a mut [RawWc]) -> Self {
        let mut ops = ViewOps::Lent(ops);
        let len = ops.poll_raw(slots).min(slots.len());
        CqView {
            ops,
            slots,
            len,
            pos: 0,
        }
    }
    }

    /// The completions of the current batch, oldest first.
    #[inline]
    pub fn completions(&self) -> &[RawWc] {
        &self.slots[..self.len]
    }

    /// Completions in the current batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the current batch is empty (the CQ had no completion).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Replaces the current batch with the next one (the completions that arrived since, up
    /// to the slots' length), under the same lock; returns its length.
    #[inline]
    pub fn next_batch(&mut self) -> usize {
        self.len = self.ops.poll_raw(self.slots).min(self.slots.len());
        self.pos = 0;
        self.len
    }
}

impl Iterator for CqView<'_> {
    type Item = RawWc;

    /// The next completion by copy: the rest of the current batch, then further batches as
    /// long as the previous one filled the slots (so an iteration ends).
    #[inline]
    fn next(&mut self) -> Option<RawWc> {
        if self.pos == self.len && (self.len < self.slots.len() || self.next_batch() == 0) {
            return None;
        }
        let w = self.slots[self.pos];
        self.pos += 1;
        Some(w)
    }
}

/// The legacy write `CREATE_CQ`, for kernels without the ioctl method: driver data follows
/// the core request and the 8-byte core response.
fn create_cq_write(
    ctx: &Context,
    req: ib_uverbs_create_cq,
    uhw_in: &[u8],
    uhw_out: &mut [u8],
) -> std::result::Result<CqCreated, rustix::io::Errno> {
    let core = size_of::<ib_uverbs_create_cq_resp>();
    let mut resp = vec![0u8; core + uhw_out.len()];
    write::cmd_legacy(
        ctx.cmd_fd(),
        nr::CREATE_CQ,
        req.as_bytes(),
        uhw_in,
        &mut resp,
    )?;
    let (head, drv) = resp.split_at(core);
    let r = ib_uverbs_create_cq_resp::read_from_bytes(head).expect("sized above");
    uhw_out.copy_from_slice(drv);
    Ok(CqCreated {
        handle: r.cq_handle,
        cqe: r.cqe,
    })
}

fn destroy_kernel_cq(ctx: &Context, handle: u32) -> Result<ib_uverbs_destroy_cq_resp> {
    let mut resp = ib_uverbs_destroy_cq_resp::default();
    let r = ctx.ioctl_or_write(
        Method::DestroyCq,
        &mut resp,
        |c, resp| {
            c.idr(cq::ATTR_DESTROY_HANDLE, handle);
            c.ptr_out(cq::ATTR_DESTROY_RESP, resp);
        },
        |resp| {
            let req = ib_uverbs_destroy_cq {
                cq_handle: handle,
                ..Default::default()
            };
            write::cmd_legacy_simple(ctx.cmd_fd(), nr::DESTROY_CQ, &req, resp)
        },
    );
    r.map_err(|e| Error::os(format!("destroy CQ {handle} on {}", ctx.name()), e))?;
    Ok(resp)
}

impl Drop for Cq {
    fn drop(&mut self) {
        match destroy_kernel_cq(&self.ctx, self.handle) {
            Ok(r) => {
                let acked = self.events_acked.load(Ordering::Relaxed);
                if acked < r.comp_events_reported {
                    tracing::debug!(
                        handle = self.handle,
                        reported = r.comp_events_reported,
                        acked,
                        "CQ destroyed with unacknowledged events"
                    );
                }
            }
            Err(e) => tracing::error!("{e}"),
        }
        // Then the fields drop in declaration order: the provider's ring (`ops`, first) is
        // unmapped, then the context and channel are released.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::req_notify_write;

    /// A view stays `Send` with what its settles released in it (`api/`: `Send`, `!Sync`).
    const _: () = {
        const fn send<T: Send>() {}
        send::<CqView<'static>>();
    };

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
    fn req_notify_write_sends_one_16_byte_command() {
        let path = std::env::temp_dir().join(format!("rverbs-{}-arm", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        let k = KernelObj {
            fd: f.as_fd(),
            handle: 0x0102_0304,
        };
        req_notify_write(k, true).unwrap();
        req_notify_write(k, false).unwrap();
        drop(f);
        let b = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(b.len(), 32, "two commands of 16 bytes");
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        let u16_at = |o: usize| u16::from_ne_bytes(b[o..o + 2].try_into().unwrap());
        assert_eq!(u32_at(0), nr::REQ_NOTIFY_CQ, "command");
        assert_eq!(u16_at(4), 4, "in_words: header and request");
        assert_eq!(u16_at(6), 0, "out_words: no response");
        assert_eq!(u32_at(8), 0x0102_0304, "cq_handle");
        assert_eq!(u32_at(12), 1, "solicited_only");
        assert_eq!(u32_at(16 + 12), 0, "solicited_only of the second");
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
    fn req_notify_write_names_the_cq_on_error() {
        let path = std::env::temp_dir().join(format!("rverbs-{}-arm-ro", std::process::id()));
        std::fs::write(&path, b"").unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let e = req_notify_write(
            KernelObj {
                fd: f.as_fd(),
                handle: 9,
            },
            false,
        )
        .unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(Error::errno_of(&e), Some(rustix::io::Errno::BADF));
        assert!(e.to_string().contains("arm CQ 9"), "{e}");
    }
}
