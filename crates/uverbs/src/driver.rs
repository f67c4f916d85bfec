//! The driver seam between the core (kernel objects) and a provider crate such as
//! `rverbs-provider` (rings and data path): what a provider implements, not what a verbs
//! user calls.
//!
//! rdma-core finds providers by scanning driver files and calling constructors; rverbs instead
//! keeps a static table keyed by the kernel's driver id (in `rverbs-provider`). A provider hands
//! the core a [`Driver`] for each context it opens. The core makes every kernel object; for the
//! objects whose driver data and data path belong to the provider (CQ, QP, SRQ, AH) the core
//! asks the driver to take part:
//!
//! 1. the driver prepares its request driver data (and whatever memory it has to give the
//!    kernel, e.g. mlx5's CQ buffer);
//! 2. it calls the `create` callback, which issues the kernel command with that driver data and
//!    returns the core response and the driver response bytes;
//! 3. it builds its data-path state (maps rings, …) and returns it as a boxed ops object.
//!
//! If step 3 fails after step 2 succeeded, the core destroys the kernel object: nothing leaks.
//!
//! Step 3 trusts step 2: a provider maps and then reads and writes what the kernel's response
//! names (rxe `mmap`s the queue at the offset and size the response gives, on the command
//! fd). So [`Driver`] is an `unsafe trait` and its create methods (and [`CqOps::resize`]) are
//! `unsafe fn`s: only code that issues the genuine kernel command — the verbs objects of this
//! crate — may call them. Safe code can reach a context's driver ([`Context::driver`]) but
//! cannot call into it.
//!
//! [`Context::driver`]: crate::context::Context::driver

#![allow(unsafe_code)] // unsafe fns: posting hands memory to the device

use std::fmt;
use std::os::fd::BorrowedFd;

use crate::error::{PostError, Result};
use crate::values::QpCaps;
use crate::wc::{RawWc, WorkCompletion};
use crate::wr::{RecvWr, SendWr};

/// What the data path needs to address a kernel object (for doorbells through write()).
#[derive(Clone, Copy, Debug)]
pub struct KernelObj<'a> {
    /// The context's command fd (`/dev/infiniband/uverbsN`).
    pub fd: BorrowedFd<'a>,
    /// The object's kernel handle.
    pub handle: u32,
}

/// The kernel's answer to a CQ create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqCreated {
    /// The CQ's kernel handle.
    pub handle: u32,
    /// Entries the kernel actually gave (≥ requested).
    pub cqe: u32,
}

/// The kernel's answer to a QP create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCreated {
    /// The QP's kernel handle.
    pub handle: u32,
    /// The QP number peers address.
    pub qp_num: u32,
    /// Capacities the kernel granted (≥ requested).
    pub caps: QpCaps,
}

/// The kernel's answer to an SRQ create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqCreated {
    /// The SRQ's kernel handle.
    pub handle: u32,
    /// Work requests the SRQ holds, as the kernel answered.
    pub max_wr: u32,
    /// Most SGEs per work request, as the kernel answered.
    pub max_sge: u32,
    /// The SRQ number the kernel reported (what XRC senders address; may be 0 otherwise).
    pub srq_num: u32,
}

/// What a driver learns about a QP being created.
#[derive(Clone, Copy, Debug)]
pub struct QpRequest {
    /// RC, UC, UD, …
    pub qp_type: crate::values::QpType,
    /// Capacities the caller asked for.
    pub caps: QpCaps,
    /// Every send produces a completion, whatever its SIGNALED flag.
    pub sq_sig_all: bool,
    /// The QP takes receives from an SRQ (so it has no receive queue).
    pub has_srq: bool,
    /// That SRQ's kernel handle (mlx5 with CQE version 1 finds the SRQ of a receive
    /// completion through its QP).
    pub srq_handle: Option<u32>,
}

/// A provider's own QP type, created as `IBV_QPT_DRIVER` ([`Driver::driver_qp`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverQpType {
    /// Its name, e.g. `"SRD"`.
    pub name: &'static str,
    /// The send operations the provider encodes on it.
    pub ops: crate::op::OpSet,
}

/// The callback that creates the kernel object with the driver's data. Arguments: request
/// driver data, response driver data buffer.
///
/// The callers of the `unsafe` create methods promise what such a callback does (the
/// *create contract*): each call issues the kernel command that creates (or resizes) the
/// object, on the context's command fd that the method is given, with exactly the request
/// driver data passed in, and returns only what the kernel answered — the core response it
/// returns and the bytes it leaves in the response buffer are the kernel's, unaltered, for
/// an object of this context that nothing else destroys while the provider's ops object
/// lives. A provider may `mmap` the command fd at the offsets such a response names, and read
/// and write what it maps, as the kernel's memory.
pub type CreateFn<'a, T> = dyn FnMut(&[u8], &mut [u8]) -> Result<T> + 'a;

/// A provider's per-context driver.
///
/// # Safety
/// An implementation promises that its data path is sound whenever every create call it
/// gets keeps the create contract ([`CreateFn`]) on a context of the device kind it was
/// attached for ([`Context::set_driver`](crate::context::Context::set_driver)): the ops
/// objects it returns touch only memory it owns or the kernel mapped for that object, and
/// they stay sound for any calls of their safe methods from safe code.
pub unsafe trait Driver: Send + Sync + fmt::Debug {
    /// Provider name, e.g. `"rxe"`.
    fn name(&self) -> &'static str;

    /// The send operations this provider encodes, per QP type (data: the classification in
    /// [`OpSet`](crate::OpSet) checks every post against it, before [`QpOps::post_send`] is called).
    /// Its provider writes it as an exhaustive `match` over [`OpKind`](crate::op::OpKind), so
    /// a new operation does not compile until each provider says whether it encodes it.
    fn send_caps(&self) -> crate::op::SendCaps;

    /// Driver data of a memory registration (`REG_MR`): the request bytes and how many bytes
    /// of driver response to make room for, for kernel drivers that refuse a registration
    /// without them (siw). Default: none.
    fn reg_mr_udata(&self) -> (&'static [u8], usize) {
        (&[], 0)
    }

    /// The CQ depth to ask the kernel for when the caller wants `cqe` entries (mlx5 sizes its
    /// ring to a power of two and tells the kernel one less). Default: `cqe` itself.
    fn adjust_cqe(&self, cqe: u32) -> Result<u32> {
        Ok(cqe)
    }

    /// The capacities to tell the kernel in CREATE_QP for `req` (EFA's libefa sizes its rings
    /// first and sends the rounded work-request counts, which the kernel gives the device).
    /// Called before [`create_qp`](Self::create_qp); an error refuses the QP before any
    /// kernel command. Default: the caller's capacities, unchanged.
    fn qp_caps_for_kernel(&self, req: &QpRequest) -> Result<QpCaps> {
        Ok(req.caps)
    }

    /// True when a QP's receives complete one by one in the order they were posted (rxe, siw,
    /// mlx5). When false (EFA: libefa hands out receive ids from a pool, as for completions in
    /// any order), a safe receive's memory is held until every receive posted to the QP has
    /// completed, as for an SRQ (the ledger, docs/architecture.md). Default: true.
    fn recv_completes_in_order(&self) -> bool {
        true
    }

    /// The QP type this provider creates as `IBV_QPT_DRIVER`
    /// ([`QpType::DRIVER`](crate::values::QpType::DRIVER)), if it has one (EFA: SRD), and the
    /// send operations it encodes on it. Default: none (a DRIVER QP is refused before any
    /// kernel command).
    fn driver_qp(&self) -> Option<DriverQpType> {
        None
    }

    /// The driver itself, for its provider's own queries of a context (EFA's
    /// `efadv_query_device`: the device limits from its driver data). Default: none.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// The context's QP table lock (libmlx5's `qp_table_mutex`), for a provider that cleans a
    /// destroyed QP's completions out of its CQs ([`CqOps::qp_destroyed`]) and finds a QP's
    /// completions by its number: a QP's drop holds it from the kernel's DESTROY_QP until its
    /// CQs are clean, and the provider's [`create_qp`](Self::create_qp) holds it from the
    /// kernel's CREATE_QP until the new QP is known to its pollers. So a new QP that the kernel
    /// gives the destroyed one's number is not seen by a poller, and cannot post, before the
    /// old QP's completions are out: none of them is read against the new QP's tables, and
    /// the clean removes none of the new QP's.
    ///
    /// Lock order: this lock, then a CQ's lock (the clean), then the provider's own locks. A
    /// poller holds a CQ's lock and never takes this one; so a thread that holds a CQ's lock
    /// (a [`CqView`](crate::cq::CqView)) must neither drop a QP of that CQ (it waits for
    /// itself, with or without this lock) nor, where this lock exists, create or drop any QP
    /// of the context (a thread dropping a QP of the view's CQ holds this lock while it waits
    /// for the view's CQ: each waits for the other), as in libmlx5 between `ibv_start_poll`
    /// and `ibv_end_poll`. Default: none (nothing to order: rxe, siw, EFA; mlx5 with CQE
    /// version 1, whose completions name a QP by a user index freed after the clean).
    fn qp_table_lock(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        None
    }

    /// Creates a CQ's data path. `cqe` is the depth the caller asked for.
    ///
    /// # Safety
    /// `cmd_fd` is the command fd of the context this driver is attached to, and `create`
    /// keeps the create contract ([`CreateFn`]) for that fd.
    unsafe fn create_cq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> Result<Box<dyn CqOps>>;

    /// Creates a QP's data path.
    ///
    /// # Safety
    /// `cmd_fd` is the command fd of the context this driver is attached to, and `create`
    /// keeps the create contract ([`CreateFn`]) for that fd.
    unsafe fn create_qp(
        &self,
        cmd_fd: BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> Result<Box<dyn QpOps>>;

    /// Creates an SRQ's data path.
    ///
    /// # Safety
    /// `cmd_fd` is the command fd of the context this driver is attached to, and `create`
    /// keeps the create contract ([`CreateFn`]) for that fd.
    unsafe fn create_srq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        max_wr: u32,
        max_sge: u32,
        create: &mut CreateFn<'_, SrqCreated>,
    ) -> Result<Box<dyn SrqOps>>;

    /// Creates an address handle for `attr`; returns the provider's number for it (rxe:
    /// `ah_num`), which UD sends carry. mlx5 builds its address vector from `attr`; rxe and
    /// siw need only the kernel's answer.
    ///
    /// # Safety
    /// `create` keeps the create contract ([`CreateFn`]) on the command fd of the context
    /// this driver is attached to.
    unsafe fn create_ah(
        &self,
        attr: &crate::values::AhAttr,
        create: &mut CreateFn<'_, u32>,
    ) -> Result<u32>;
}

/// A CQ's data path.
pub trait CqOps: Send + fmt::Debug {
    /// Moves up to `out.len()` completions into `out`; returns how many.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize;

    /// Copies up to `out.len()` completions into `out` undecoded, in the kernel's
    /// `ib_uverbs_wc` layout ([`RawWc`]), oldest first; returns how many. Publishes the
    /// consumer index at most once per call (one batch). This is the path of
    /// [`Cq::poll_raw`](crate::cq::Cq::poll_raw) and [`CqView`](crate::cq::CqView).
    ///
    /// Default: [`poll`](Self::poll) in chunks of eight, each completion re-encoded with
    /// [`RawWc::from_work_completion`] (correct for any provider, and no faster than `poll`).
    fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        let mut wc = [WorkCompletion::default(); 8];
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(wc.len());
            let n = self.poll(&mut wc[..want]).min(want);
            for (o, w) in out[done..done + n].iter_mut().zip(&wc[..n]) {
                *o = RawWc::from_work_completion(w);
            }
            done += n;
            if n < want {
                break;
            }
        }
        done
    }

    /// Requests a completion event for the next (solicited) completion.
    fn arm(&mut self, cq: KernelObj<'_>, solicited_only: bool) -> Result<()> {
        req_notify_write(cq, solicited_only)
    }

    /// Called once per completion event read from the channel (mlx5 advances its arm
    /// sequence number here).
    fn event_received(&mut self) {}

    /// True when this provider arms with the default [`arm`](Self::arm) (the kernel's
    /// REQ_NOTIFY_CQ) and keeps no event state ([`event_received`](Self::event_received) does
    /// nothing). The CQ then arms and counts events without taking its lock or calling the
    /// provider: a kernel command on the CQ's handle touches nothing the lock guards. Asked
    /// once, when the CQ is created. Default: false.
    fn arms_in_kernel(&self) -> bool {
        false
    }

    /// Resizes the CQ to at least `cqe` entries: the driver calls `resize` (which issues the
    /// kernel's RESIZE_CQ with the driver data given and returns the new depth), then moves
    /// its ring to what the kernel answered. Completions not yet polled are kept. Default: the
    /// provider cannot resize.
    ///
    /// # Safety
    /// `cmd_fd` is the command fd of the CQ's context and `resize` keeps the create contract
    /// ([`CreateFn`]) for the RESIZE_CQ command on this CQ (rxe maps the ring its response
    /// names).
    unsafe fn resize(
        &mut self,
        _cmd_fd: BorrowedFd<'_>,
        _cqe: u32,
        _resize: &mut CreateFn<'_, u32>,
    ) -> Result<()> {
        Err(crate::Error::unsupported("resize CQ", "the provider does not resize CQs").into())
    }

    /// The kernel has moved QP `qp_num` to RESET: drop that QP's completions not yet polled
    /// from the ring, keeping every other QP's in order (libmlx5 `mlx5_cq_clean`). `recv`:
    /// this CQ is the QP's receive CQ (the QP's SRQ gets back the receives it drops). Called
    /// by [`Qp::modify`](crate::qp::Qp::modify) under this CQ's lock, before
    /// [`QpOps::reset`], never with another CQ's or a QP's lock held, and only when
    /// [`cleans_on_qp_reset`](Self::cleans_on_qp_reset) said so. Default: nothing (rxe: the
    /// kernel produces the CQ's entries and keeps them, as librxe does).
    fn qp_reset(&mut self, qp_num: u32, recv: bool) {
        let _ = (qp_num, recv);
    }

    /// The kernel has destroyed QP `qp` (number `qp_num`): drop its completions not yet
    /// polled from the ring, keeping every other QP's in order, as for
    /// [`qp_reset`](Self::qp_reset) (libmlx5 `mlx5_destroy_qp` → `__mlx5_cq_clean`). `recv`:
    /// this CQ is the QP's receive CQ; each receive of the QP's SRQ dropped here goes back to
    /// the SRQ and its `wr_id` to `srq_done`, so that the core releases what it held (the
    /// device wrote its completion: it writes that buffer no more). `qp` is the destroyed QP's
    /// own data path ([`QpOps::as_any`]): the provider finds the QP there, not by its number,
    /// which the kernel may already have given to a new QP. Called by the QP's drop under
    /// this CQ's lock only (no one else can hold the dropped QP's), receive CQ first, only
    /// when [`cleans_on_qp_reset`](Self::cleans_on_qp_reset) said so. Default: nothing (rxe,
    /// siw: the kernel's completions stay, and the core's tombstones count them for no one).
    fn qp_destroyed(
        &mut self,
        qp: &dyn QpOps,
        qp_num: u32,
        recv: bool,
        srq_done: &mut dyn FnMut(u64),
    ) {
        let _ = (qp, qp_num, recv, srq_done);
    }

    /// True when [`qp_reset`](Self::qp_reset) and [`qp_destroyed`](Self::qp_destroyed) have
    /// work to do on this CQ (mlx5). Asked once,
    /// when the CQ is created; when false the core neither takes the CQ's lock nor calls
    /// `qp_reset`, so a modify to RESET never waits for a poller that holds the lock (a
    /// [`CqView`](crate::cq::CqView), the C drop-in's `ibv_start_poll`). Default: false.
    fn cleans_on_qp_reset(&self) -> bool {
        false
    }
}

/// A QP's data path.
pub trait QpOps: Send + fmt::Debug {
    /// Posts send work requests and rings the doorbell once.
    ///
    /// # Safety
    /// Every SGE must name memory inside a live memory region registered with this QP's
    /// protection domain, and that memory must stay valid (not freed, not deregistered) until
    /// the work request's completion has been polled or the QP destroyed. The device reads
    /// (and for RDMA READ / atomics, writes) it asynchronously. For INLINE requests the
    /// provider copies the SGEs' bytes during the call, with [`crate::kernel::shared`] only; no one
    /// may write them meanwhile except through [`crate::kernel::shared`], the kernel or a device.
    /// Every request's operation is one the QP accepts
    /// ([`SendCaps::allowed`](crate::op::SendCaps::allowed) of the driver's
    /// [`Driver::send_caps`] for the QP's type): [`Qp`](crate::qp::Qp) checks it, and the
    /// provider only encodes.
    unsafe fn post_send(
        &mut self,
        qp: KernelObj<'_>,
        wrs: &[SendWr<'_>],
    ) -> std::result::Result<(), PostError>;

    /// Posts receive work requests.
    ///
    /// # Safety
    /// As for [`QpOps::post_send`]; the device writes into the memory.
    unsafe fn post_recv(
        &mut self,
        qp: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> std::result::Result<(), PostError>;

    /// The capacities the provider really gives, when they differ from what the kernel's
    /// create response says (mlx5: libmlx5's sizing is what posts are checked against).
    /// Default: `None` (the kernel's answer).
    fn caps(&self) -> Option<QpCaps> {
        None
    }

    /// The kernel has moved the QP to RESET: start the queues again from empty, so that no
    /// work request posted before is seen again after RESET → INIT → RTR → RTS (mlx5: the
    /// producer and consumer indices and both doorbell records to 0, libmlx5
    /// `mlx5_init_qp_indices`). Called by [`Qp::modify`](crate::qp::Qp::modify) under the
    /// QP's lock, after [`CqOps::qp_reset`] on its CQs. Default: nothing (rxe: the kernel
    /// owns the queue indices in the shared rings).
    fn reset(&mut self) {}

    /// The provider's own type, for its CQs' [`CqOps::qp_destroyed`]. Default: `None`.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// An SRQ's data path.
pub trait SrqOps: Send + fmt::Debug {
    /// Driver data for a modify-SRQ command that changes only the limit (rxe 6.1 refuses the
    /// command with EINVAL unless it carries its 8-byte `rxe_modify_srq_cmd`). Default: none.
    fn modify_udata(&self) -> &[u8] {
        &[]
    }

    /// Posts receive work requests.
    ///
    /// # Safety
    /// As for [`QpOps::post_recv`].
    unsafe fn post_recv(
        &mut self,
        srq: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> std::result::Result<(), PostError>;
}

/// The lock around a CQ's, QP's or SRQ's ops object: the data path's [`SpinLock`](crate::kernel::sync::SpinLock).
pub(crate) type OpsLock<T> = crate::kernel::sync::SpinLock<T>;
/// Access to a locked ops object.
pub(crate) type OpsGuard<'a, T> = crate::kernel::sync::SpinGuard<'a, T>;

/// Arms a CQ through the kernel (`IB_USER_VERBS_CMD_REQ_NOTIFY_CQ`), the default for
/// providers whose CQ arming is a kernel call (rxe).
///
/// One `write(2)` of 16 bytes built on the stack (it runs after every completion event when a
/// CQ is re-armed): the command header and `ib_uverbs_req_notify_cq`, no response.
#[inline]
pub fn req_notify_write(cq: KernelObj<'_>, solicited_only: bool) -> Result<()> {
    let cmd = ReqNotifyCmd {
        hdr: crate::kernel::abi::cmd::ib_uverbs_cmd_hdr {
            command: crate::kernel::abi::cmd::nr::REQ_NOTIFY_CQ,
            in_words: (size_of::<ReqNotifyCmd>() / 4) as u16,
            out_words: 0,
        },
        body: crate::kernel::abi::obj::ib_uverbs_req_notify_cq {
            cq_handle: cq.handle,
            solicited_only: u32::from(solicited_only),
        },
    };
    match crate::kernel::write::cmd_write(cq.fd, zerocopy::IntoBytes::as_bytes(&cmd)) {
        Ok(n) if n == size_of::<ReqNotifyCmd>() => Ok(()),
        r => Err(req_notify_error(cq.handle, r)),
    }
}

/// The whole REQ_NOTIFY_CQ write(): header and request (the command has no response).
#[repr(C)]
#[derive(zerocopy::IntoBytes, zerocopy::Immutable)]
struct ReqNotifyCmd {
    hdr: crate::kernel::abi::cmd::ib_uverbs_cmd_hdr,
    body: crate::kernel::abi::obj::ib_uverbs_req_notify_cq,
}

#[cold]
#[inline(never)]
fn req_notify_error(
    handle: u32,
    r: std::result::Result<usize, rustix::io::Errno>,
) -> std::io::Error {
    // uverbs consumes a command in one write() or fails it; a short count is a protocol error.
    let e = r.err().unwrap_or(rustix::io::Errno::IO);
    crate::error::Error::os(format!("arm CQ {handle}"), e).into()
}
