//! siw as a [`Driver`]: maps the rings the kernel's create responses name and unmaps them when
//! the object goes away (after the kernel object is destroyed).

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
use rverbs_uverbs::PostError;
use rverbs_uverbs::{Error, RecvWr, SendCaps, SendWr, WorkCompletion};
use zerocopy::IntoBytes;

use super::abi::{
    siw_rqe, siw_sqe, siw_ureq_reg_mr, siw_uresp_alloc_ctx, siw_uresp_create_cq,
    siw_uresp_create_qp, siw_uresp_create_srq, SIW_INVAL_UOBJ_KEY, SIW_MAX_INLINE, SIW_MAX_SGE,
};
use super::doorbell::{Doorbell, SIW};
use super::ring::{ring_bytes, Ring, SiwCq, SiwRq, SiwSq, SqConfig};
use super::SiwQueue;
use crate::mapping::Mapping;
use rverbs_uverbs::kernel::mapping::MapAccess;

/// Opens a siw device: GET_CONTEXT with room for `siw_uresp_alloc_ctx`.
pub fn open(dev: &Device) -> io::Result<Arc<Context>> {
    crate::check_driver(dev, DriverId::SIW, "siw")?;
    let mut resp = siw_uresp_alloc_ctx::default();
    let ctx = Context::open_with_udata(dev, &[], resp.as_mut_bytes())?;
    // SAFETY: the context's device is a siw device (checked above).
    unsafe {
        ctx.set_driver(Box::new(SiwDriver {
            device: dev.name().into(),
        }))
    }?;
    Ok(Arc::new(ctx))
}

/// The siw driver: stateless but for the device's name (errors name it).
#[derive(Debug, Clone)]
pub struct SiwDriver {
    device: Box<str>,
}

impl SiwDriver {
    /// A driver for the device called `device` (tests; [`open`] makes the real one).
    #[cfg(test)]
    pub fn new(device: &str) -> Self {
        SiwDriver {
            device: device.into(),
        }
    }
}

/// What siw encodes, per QP type: its op table, [`super::ring::OPS`], beside the encoder.
pub(crate) fn send_caps() -> SendCaps {
    SendCaps::from_table(&super::ring::OPS)
}

/// The register-MR request: STag key 0, as libsiw sends.
static REG_MR_REQ: siw_ureq_reg_mr = siw_ureq_reg_mr {
    stag_key: 0,
    reserved: [0; 3],
    pad: 0,
};

/// Maps `slots` elements of `elem` bytes (+ `tail`) at `key` and checks the geometry.
///
/// Every key of a successful create is mapped as it is, `SIW_INVAL_UOBJ_KEY` (0x90000)
/// included: siw's kernels that hand out their rings through the rdma core's mmap entries
/// (`rdma_user_mmap_entry_insert`: 6.1, 6.12 and newer) never answer a create with that key
/// to mean "not offered" (a ring they cannot offer fails the create), and 0x90000 is page
/// offset 144, an ordinary offset of the context's 145th ring page. libsiw (rdma-core 44 and
/// 56) still refuses it, so its creates fail whenever a ring lands there; ours map it. On a
/// kernel where the key did mean "not offered", nothing is there and the mapping fails.
fn map_ring(
    fd: BorrowedFd<'_>,
    key: u64,
    slots: u32,
    elem: usize,
    tail: usize,
    what: SiwQueue,
) -> io::Result<(Ring, Mapping)> {
    let len = ring_bytes(slots, elem, tail).ok_or_else(|| -> io::Error {
        Error::protocol(
            format!("map siw {what}"),
            format!("the kernel answered {slots} elements, not a power of two in range"),
        )
        .into()
    })?;
    let map = Mapping::shared(fd, key, len, MapAccess::ReadWrite).map_err(|e| -> io::Error {
        let mut err = Error::os(format!("map siw {what}"), e)
            .with_detail(format!("offset {key:#x}, {len} bytes"));
        if key == SIW_INVAL_UOBJ_KEY {
            err = err.with_detail(
                "the offset is SIW_INVAL_UOBJ_KEY, which siw's kernels before the rdma core's \
                 mmap entries answered for a ring they could not offer",
            );
        }
        err.into()
    })?;
    // SAFETY: the mapping lives as long as the ops object that owns both it and the ring view
    // (the view is declared first there, so dropped first), and it holds the kernel's siw
    // ring of this kind (the create contract).
    let ring = unsafe { Ring::new(map.ptr(), map.len(), slots, elem, tail, what) }?;
    Ok((ring, map))
}

#[derive(Debug)]
struct CqRing {
    cq: SiwCq,
    _map: Mapping,
}

impl CqOps for CqRing {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.cq.poll(out)
    }

    fn arm(&mut self, _cq: KernelObj<'_>, solicited_only: bool) -> rverbs_uverbs::Result<()> {
        // siw arms through the notify word it shares with us: no system call.
        self.cq.arm(solicited_only);
        Ok(())
    }
}

#[derive(Debug)]
struct QpRings {
    sq: SiwSq,
    rq: Option<SiwRq>,
    doorbell: Doorbell,
    _sq_map: Mapping,
    _rq_map: Option<Mapping>,
}

impl QpOps for QpRings {
    unsafe fn post_send(&mut self, qp: KernelObj<'_>, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        debug_assert!(
            wrs.iter()
                .all(|w| send_caps().for_type(QpType::RC).contains(w.op.kind())),
            "QpOps::post_send's contract: every operation is one the QP accepts"
        );
        // SAFETY: the caller upholds QpOps::post_send's memory contract.
        let p = unsafe { self.sq.post(wrs) };
        if p.ring_doorbell {
            self.ring(qp, p.count)?;
        }
        p.error().map_or(Ok(()), Err)
    }

    unsafe fn post_recv(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        let rq = self.rq.as_mut().ok_or_else(|| {
            PostError::invalid(0, "the QP has no receive queue (an SRQ, or max_recv_wr 0)")
        })?;
        // SAFETY: forwarded memory contract; siw needs no receive doorbell.
        unsafe { rq.post(wrs) }.map(|_| ())
    }
}

impl QpRings {
    fn ring(&mut self, qp: KernelObj<'_>, posted: usize) -> Result<(), PostError> {
        self.doorbell
            .ring(qp.fd)
            .map_err(|e| PostError::failed(posted, "the send doorbell failed", e))
    }
}

#[derive(Debug)]
struct SrqRing {
    rq: SiwRq,
    _map: Mapping,
}

impl SrqOps for SrqRing {
    unsafe fn post_recv(
        &mut self,
        _srq: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        // SAFETY: forwarded contract.
        unsafe { self.rq.post(wrs) }.map(|_| ())
    }
}

/// The refusal of a QP type iWARP does not have.
fn not_rc(device: &str, t: QpType) -> io::Error {
    Error::unsupported(
        format!("create {t} QP on {device}"),
        format!("siw is iWARP, which has only RC QPs (connected through rdma_cm): no {t}"),
    )
    .into()
}

/// What siw's kernel refuses at create with a bare EINVAL, refused first with the limit named.
fn check_caps(device: &str, c: &rverbs_uverbs::qp::QpCaps) -> io::Result<()> {
    let why = if c.max_inline_data as usize > SIW_MAX_INLINE {
        format!(
            "max_inline_data {}: siw (iWARP) carries at most {SIW_MAX_INLINE} inline bytes",
            c.max_inline_data
        )
    } else if c.max_send_sge as usize > SIW_MAX_SGE || c.max_recv_sge as usize > SIW_MAX_SGE {
        format!(
            "max_send_sge {} / max_recv_sge {}: siw takes at most {SIW_MAX_SGE}",
            c.max_send_sge, c.max_recv_sge
        )
    } else if c.max_send_wr == 0 {
        "max_send_wr 0: siw has no QP without a send queue".to_string()
    } else {
        return Ok(());
    };
    Err(Error::invalid(format!("create RC QP on {device}"), why).into())
}

// SAFETY: the data path touches only the rings the kernel mapped for each object (at the
// keys and of the sizes its genuine create responses name: the create contract), through
// views that check the geometry and bound every index by the ring's size.
unsafe impl Driver for SiwDriver {
    fn name(&self) -> &'static str {
        "siw"
    }

    fn send_caps(&self) -> SendCaps {
        send_caps()
    }

    fn reg_mr_udata(&self) -> (&'static [u8], usize) {
        (REG_MR_REQ.as_bytes(), 8)
    }

    unsafe fn create_cq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        _cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> io::Result<Box<dyn CqOps>> {
        let mut resp = siw_uresp_create_cq::default();
        create(&[], resp.as_mut_bytes())?;
        let (ring, map) = map_ring(
            cmd_fd,
            resp.cq_key,
            resp.num_cqe,
            size_of::<super::abi::siw_cqe>(),
            size_of::<super::abi::siw_cq_ctrl>(),
            SiwQueue::Completion,
        )?;
        Ok(Box::new(CqRing {
            cq: SiwCq::new(ring)?,
            _map: map,
        }))
    }

    unsafe fn create_qp(
        &self,
        cmd_fd: BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> io::Result<Box<dyn QpOps>> {
        if req.qp_type != QpType::RC {
            return Err(not_rc(&self.device, req.qp_type));
        }
        check_caps(&self.device, &req.caps)?;
        let mut resp = siw_uresp_create_qp::default();
        let k = create(&[], resp.as_mut_bytes())?;
        let (sq_ring, sq_map) = map_ring(
            cmd_fd,
            resp.sq_key,
            resp.num_sqe,
            size_of::<siw_sqe>(),
            0,
            SiwQueue::Send,
        )?;
        let sq = SiwSq::new(
            sq_ring,
            SqConfig {
                max_sge: k.caps.max_send_sge.min(SIW_MAX_SGE as u32),
                max_inline: k.caps.max_inline_data.min(SIW_MAX_INLINE as u32),
                sig_all: req.sq_sig_all,
            },
        )?;
        let (rq, rq_map) = if req.has_srq || resp.num_rqe == 0 {
            (None, None)
        } else {
            let (ring, map) = map_ring(
                cmd_fd,
                resp.rq_key,
                resp.num_rqe,
                size_of::<siw_rqe>(),
                0,
                SiwQueue::Recv,
            )?;
            let max = k.caps.max_recv_sge.min(SIW_MAX_SGE as u32);
            (Some(SiwRq::new(ring, max, SiwQueue::Recv)?), Some(map))
        };
        Ok(Box::new(QpRings {
            sq,
            rq,
            doorbell: Doorbell::new(k.handle, &SIW),
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
        let mut resp = siw_uresp_create_srq::default();
        let k = create(&[], resp.as_mut_bytes())?;
        let (ring, map) = map_ring(
            cmd_fd,
            resp.srq_key,
            resp.num_rqe,
            size_of::<siw_rqe>(),
            0,
            SiwQueue::Srq,
        )?;
        let rq = SiwRq::new(ring, k.max_sge.min(SIW_MAX_SGE as u32), SiwQueue::Srq)?;
        Ok(Box::new(SrqRing { rq, _map: map }))
    }

    unsafe fn create_ah(
        &self,
        _attr: &rverbs_uverbs::ah::AhAttr,
        _create: &mut CreateFn<'_, u32>,
    ) -> io::Result<u32> {
        Err(Error::unsupported(
            format!("create AH on {}", self.device),
            "siw is iWARP: no address handles (no UD QPs)",
        )
        .into())
    }
}
