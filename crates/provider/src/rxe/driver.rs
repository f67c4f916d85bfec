//! rxe as a [`Driver`]: the glue between the verbs objects of `rverbs-uverbs` and the rxe
//! queues of this module. It maps the queues the kernel describes in its create responses and
//! unmaps them when the object goes away (after the kernel object is destroyed).

#![allow(unsafe_code)]

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{Device, DriverId};
use rverbs_uverbs::driver::{
    CqCreated, CqOps, CreateFn, Driver, KernelObj, QpCreated, QpOps, QpRequest, SrqCreated, SrqOps,
};
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::{Error, RawWc, RecvWr, SendCaps, SendWr, WorkCompletion};
use rverbs_uverbs::{PostError, PostFault};
use zerocopy::{FromBytes, IntoBytes};

use super::abi::{
    mminfo, rxe_create_ah_resp, rxe_create_cq_resp, rxe_create_qp_resp, rxe_create_srq_resp,
    rxe_modify_srq_cmd, rxe_resize_cq_resp,
};
use crate::mapping::{map_shared, Mapping};

use super::doorbell::{Doorbell, RXE};
use super::{QueueKind, RxeCq, RxeQpType, RxeQueue, RxeRq, RxeSq, RxeSqConfig};

/// Opens an rxe device: no driver data for the context.
pub fn open(dev: &Device) -> io::Result<Arc<Context>> {
    crate::check_driver(dev, DriverId::RXE, "rxe")?;
    let ctx = Context::open(dev)?;
    // SAFETY: the context's device is an rxe device (checked above).
    unsafe { ctx.set_driver(Box::new(RxeDriver)) }?;
    Ok(Arc::new(ctx))
}

/// The rxe driver (stateless: everything lives in the per-object queues).
#[derive(Debug, Clone, Copy)]
pub struct RxeDriver;

fn map_queue(fd: BorrowedFd<'_>, mi: &mminfo, what: &str) -> io::Result<Mapping> {
    if mi.size == 0 {
        return Err(Error::protocol(
            format!("map rxe {what}"),
            "the kernel returned an empty mapping",
        )
        .into());
    }
    map_shared(fd, mi.offset, mi.size as usize, &format!("rxe {what}"))
}

fn queue(m: &Mapping, kind: QueueKind) -> io::Result<RxeQueue> {
    // SAFETY: the mapping lives as long as the ops object that owns both it and the queue
    // view (declared first there, so dropped first), and it holds the kernel's rxe queue of
    // `kind`.
    unsafe { RxeQueue::new(m.ptr(), m.len(), kind) }
}

#[derive(Debug)]
struct CqRing {
    cq: RxeCq,
    _map: Mapping,
}

impl CqOps for CqRing {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.cq.poll(out)
    }

    fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        self.cq.poll_raw(out)
    }

    // rxe arms through the kernel (the default `arm`) and keeps no event state.
    fn arms_in_kernel(&self) -> bool {
        true
    }

    unsafe fn resize(
        &mut self,
        cmd_fd: BorrowedFd<'_>,
        _cqe: u32,
        resize: &mut CreateFn<'_, u32>,
    ) -> io::Result<()> {
        // The kernel builds a new queue, copies the completions we have not consumed (our
        // consumer index is published after every batch) and answers with its mapping.
        let mut resp = rxe_resize_cq_resp::default();
        resize(&[], resp.as_mut_bytes())?;
        let map = map_queue(cmd_fd, &resp.mi, "resized completion queue")?;
        let cq = RxeCq::new(queue(&map, QueueKind::Completion)?)?;
        // The old view goes before its mapping is unmapped.
        self.cq = cq;
        self._map = map;
        Ok(())
    }
}

#[derive(Debug)]
struct QpRings {
    sq: RxeSq,
    rq: Option<RxeRq>,
    /// The send doorbell, its command built once (`rxe::doorbell::Doorbell`).
    doorbell: Doorbell,
    _sq_map: Mapping,
    _rq_map: Option<Mapping>,
}

impl QpOps for QpRings {
    unsafe fn post_send(&mut self, qp: KernelObj<'_>, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        // SAFETY: the caller upholds the memory contract of QpOps::post_send.
        match unsafe { self.sq.post(wrs) } {
            // The kernel processes the send queue only when told: one write() per list.
            Ok(0) => Ok(()),
            Ok(posted) => ring(&mut self.doorbell, qp, posted),
            Err(e) => post_send_failed(&mut self.doorbell, qp, e),
        }
    }

    unsafe fn post_recv(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        let rq = self
            .rq
            .as_mut()
            .ok_or_else(|| PostError::refused(0, PostFault::NoReceiveQueue))?;
        // SAFETY: the caller upholds the memory contract; rxe needs no receive doorbell (the
        // kernel reads the producer index when a packet arrives).
        unsafe { rq.post(wrs) }.map(|_| ())
    }
}

/// The send doorbell after `posted` requests went into the ring.
#[inline(always)]
fn ring(db: &mut Doorbell, qp: KernelObj<'_>, posted: usize) -> Result<(), PostError> {
    db.ring(qp.fd)
        .map_err(|e| PostError::failed(posted, "the send doorbell failed", e))
}

/// A post that stopped at a request: the doorbell for the ones before it, if any, then the
/// error (a doorbell failure is reported in preference).
#[cold]
#[inline(never)]
fn post_send_failed(db: &mut Doorbell, qp: KernelObj<'_>, e: PostError) -> Result<(), PostError> {
    if e.posted() > 0 {
        ring(db, qp, e.posted())?;
    }
    Err(e)
}

#[derive(Debug)]
struct SrqRing {
    rq: RxeRq,
    _map: Mapping,
}

/// `rxe_modify_srq_cmd` with no mapping address: 6.1 reads the struct on every modify but uses
/// the address only to resize, which rverbs does not do.
const MODIFY_SRQ_LIMIT_ONLY: rxe_modify_srq_cmd = rxe_modify_srq_cmd { mmap_info_addr: 0 };

impl SrqOps for SrqRing {
    fn modify_udata(&self) -> &[u8] {
        MODIFY_SRQ_LIMIT_ONLY.as_bytes()
    }

    unsafe fn post_recv(
        &mut self,
        _srq: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        // SAFETY: forwarded contract.
        unsafe { self.rq.post(wrs) }.map(|_| ())
    }
}

fn rxe_qp_type(t: QpType) -> io::Result<RxeQpType> {
    match t {
        QpType::RC => Ok(RxeQpType::Rc),
        QpType::UC => Ok(RxeQpType::Uc),
        QpType::UD => Ok(RxeQpType::Ud),
        other => Err(Error::unsupported("create QP on rxe", format!("QP type {other}")).into()),
    }
}

/// What rxe encodes, per QP type (the data [`Driver::send_caps`] returns): its op table,
/// [`super::sq::OPS`], beside the encoder.
pub(crate) fn send_caps() -> SendCaps {
    SendCaps::from_table(&super::sq::OPS)
}

// SAFETY: the data path touches only the queues the kernel mapped for each object (at the
// offsets and sizes its genuine create responses name: the create contract), through views
// that follow rxe's queue protocol and bound every index by the ring's mask.
unsafe impl Driver for RxeDriver {
    fn name(&self) -> &'static str {
        "rxe"
    }

    fn send_caps(&self) -> SendCaps {
        send_caps()
    }

    unsafe fn create_cq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        _cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> io::Result<Box<dyn CqOps>> {
        let mut resp = rxe_create_cq_resp::default();
        create(&[], resp.as_mut_bytes())?;
        let map = map_queue(cmd_fd, &resp.mi, "completion queue")?;
        let cq = RxeCq::new(queue(&map, QueueKind::Completion)?)?;
        Ok(Box::new(CqRing { cq, _map: map }))
    }

    unsafe fn create_qp(
        &self,
        cmd_fd: BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> io::Result<Box<dyn QpOps>> {
        let qp_type = rxe_qp_type(req.qp_type)?;
        let mut resp = rxe_create_qp_resp::default();
        let k = create(&[], resp.as_mut_bytes())?;
        let sq_map = map_queue(cmd_fd, &resp.sq_mi, "send queue")?;
        let sq = RxeSq::new(
            queue(&sq_map, QueueKind::Send)?,
            RxeSqConfig {
                qp_type,
                max_sge: k.caps.max_send_sge,
                max_inline: k.caps.max_inline_data,
                sig_all: req.sq_sig_all,
            },
        )?;
        let (rq, rq_map) = if req.has_srq {
            (None, None)
        } else {
            let m = map_queue(cmd_fd, &resp.rq_mi, "receive queue")?;
            let rq = RxeRq::new(queue(&m, QueueKind::Recv)?, k.caps.max_recv_sge)?;
            (Some(rq), Some(m))
        };
        Ok(Box::new(QpRings {
            sq,
            rq,
            doorbell: Doorbell::new(k.handle, &RXE),
            _sq_map: sq_map,
            _rq_map: rq_map,
        }))
    }

    unsafe fn create_srq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        _max_wr: u32,
        _max_sge: u32,
        create: &mut CreateFn<'_, SrqCreated>,
    ) -> io::Result<Box<dyn SrqOps>> {
        let mut resp = rxe_create_srq_resp::default();
        let k = create(&[], resp.as_mut_bytes())?;
        let map = map_queue(cmd_fd, &resp.mi, "shared receive queue")?;
        let rq = RxeRq::new(queue(&map, QueueKind::Srq)?, k.max_sge)?;
        Ok(Box::new(SrqRing { rq, _map: map }))
    }

    unsafe fn create_ah(
        &self,
        _attr: &rverbs_uverbs::ah::AhAttr,
        create: &mut CreateFn<'_, u32>,
    ) -> io::Result<u32> {
        let mut resp = rxe_create_ah_resp::default();
        create(&[], resp.as_mut_bytes())?;
        let r = rxe_create_ah_resp::read_from_bytes(resp.as_bytes()).unwrap_or_default();
        Ok(r.ah_num)
    }
}
