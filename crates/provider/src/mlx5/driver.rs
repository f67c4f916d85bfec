//! mlx5 as a [`Driver`]: context set-up (alloc_ucontext driver data, UAR page 0 mapped for CQ
//! doorbells) and the CQ data path. QPs, SRQs and AHs on mlx5 are not implemented yet: their
//! creation fails with an error that says so, before anything is created in the kernel.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::Device;
use rverbs_uverbs::provider::{
    CqCreated, CqOps, CreateFn, Driver, KernelObj, QpCreated, QpOps, QpRequest, SrqCreated, SrqOps,
};
use rverbs_uverbs::{Error, WorkCompletion};
use zerocopy::IntoBytes;

use super::abi::{mlx5_ib_alloc_ucontext_resp, mlx5_ib_create_cq_resp};
use super::context::{Mlx5ContextInfo, Mlx5ContextUdata};
use super::cq::{parse_create_cq_resp, ring_entries, CqBuf, CqeSize, Mlx5Cq, UarPage};
use super::cqe::WqeRef;
use crate::mapping::Mapping;

/// Opens an mlx5 device: alloc_ucontext with mlx5's driver data, then maps UAR page 0.
pub fn open(dev: &Device) -> io::Result<Arc<Context>> {
    let page = rustix::param::page_size();
    let udata = Mlx5ContextUdata::new(page);
    let req = udata.request()?;
    let mut resp = mlx5_ib_alloc_ucontext_resp::default();
    let ctx = Context::open_with_udata(dev, req.as_bytes(), resp.as_mut_bytes())?;
    let info = udata.parse_response(resp.as_bytes(), page)?;
    let uar = Mapping::map(
        ctx.cmd_fd(),
        info.uar_mmap_offset(0),
        page,
        &format!("mlx5 UAR page 0 of {}", dev.name()),
    )?;
    // SAFETY: this context was opened with mlx5's driver data and the kernel accepted it, so
    // the device is an mlx5 device and the rings follow mlx5's layout.
    unsafe { ctx.set_driver(Box::new(Mlx5Driver { info, uar })) }?;
    Ok(Arc::new(ctx))
}

/// The per-context mlx5 driver.
#[derive(Debug)]
pub struct Mlx5Driver {
    info: Mlx5ContextInfo,
    uar: Mapping,
}

// SAFETY: the UAR mapping is only written through single 64-bit doorbell stores (UarPage);
// `info` is plain data.
unsafe impl Sync for Mlx5Driver {}

impl Mlx5Driver {
    /// What the kernel said at context creation.
    pub fn info(&self) -> &Mlx5ContextInfo {
        &self.info
    }
}

/// Until rverbs creates mlx5 QPs, no WQE can complete on our CQs: any CQE naming a WQE is
/// unknown and reported as such by the poller.
#[derive(Debug, Clone, Copy)]
struct NoQps;

impl super::cqe::WrIdLookup for NoQps {
    fn wr_id(&mut self, _wqe: WqeRef) -> Option<u64> {
        None
    }
}

#[derive(Debug)]
struct CqRing {
    cq: Mlx5Cq<NoQps>,
}

impl CqOps for CqRing {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.cq.poll(out)
    }

    fn arm(&mut self, _cq: KernelObj<'_>, solicited_only: bool) -> io::Result<()> {
        // mlx5 arms in userspace: doorbell record, then the UAR doorbell.
        self.cq.arm(solicited_only);
        Ok(())
    }

    fn event_received(&mut self) {
        self.cq.ack_event();
    }
}

fn not_yet(what: &str) -> io::Error {
    Error::unsupported(
        format!("create {what} on mlx5"),
        "rverbs implements the mlx5 CQ data path only; mlx5 QPs, SRQs and AHs are not \
         implemented yet",
    )
    .into()
}

impl Driver for Mlx5Driver {
    fn name(&self) -> &'static str {
        "mlx5"
    }

    fn adjust_cqe(&self, cqe: u32) -> io::Result<u32> {
        // The ring gets the next power of two above `cqe`; the kernel is told one less.
        Ok(ring_entries(cqe)? - 1)
    }

    fn create_cq(
        &self,
        _cmd_fd: BorrowedFd<'_>,
        cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> io::Result<Box<dyn CqOps>> {
        let buf = CqBuf::new(cqe, CqeSize::B64)?;
        let req = buf.create_cq_udata(None);
        let mut resp = mlx5_ib_create_cq_resp::default();
        create(req.as_bytes(), resp.as_mut_bytes())?;
        let cqn = parse_create_cq_resp(resp.as_bytes())?;
        // SAFETY: the UAR page stays mapped as long as this driver, which the context owns,
        // and every CQ holds its context alive (Arc<Context>), so it outlives the CQ.
        let uar = unsafe { UarPage::new(self.uar.ptr().as_ptr(), self.uar.len())? };
        let cq = Mlx5Cq::new(buf, cqn, uar, NoQps)?;
        Ok(Box::new(CqRing { cq }))
    }

    fn create_qp(
        &self,
        _cmd_fd: BorrowedFd<'_>,
        _req: &QpRequest,
        _create: &mut CreateFn<'_, QpCreated>,
    ) -> io::Result<Box<dyn QpOps>> {
        Err(not_yet("QP"))
    }

    fn create_srq(
        &self,
        _cmd_fd: BorrowedFd<'_>,
        _max_wr: u32,
        _max_sge: u32,
        _create: &mut CreateFn<'_, SrqCreated>,
    ) -> io::Result<Box<dyn SrqOps>> {
        Err(not_yet("SRQ"))
    }

    fn create_ah(&self, _create: &mut CreateFn<'_, u32>) -> io::Result<u32> {
        Err(not_yet("AH"))
    }
}
