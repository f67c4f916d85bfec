//! mlx5 as a [`Driver`]: context set-up (alloc_ucontext driver data, the static UAR pages
//! mapped), CQs, QPs (RC, UC, UD), SRQs and AHs, and the registry through which the CQ poller
//! finds the `wr_id` of each completion.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{Device, DriverId};
use rverbs_uverbs::driver::{
    CqCreated, CqOps, CreateFn, Driver, KernelObj, QpCreated, QpOps, QpRequest, SrqCreated, SrqOps,
};
use rverbs_uverbs::{Error, RawWc, WorkCompletion};
use zerocopy::IntoBytes;

use std::collections::HashMap;
use std::sync::Mutex;

use rverbs_uverbs::ah::AhAttr;

use super::abi::{
    mlx5_ib_alloc_ucontext_resp, mlx5_ib_create_ah_resp, mlx5_ib_create_cq_resp,
    mlx5_ib_create_qp_resp, mlx5_ib_create_srq_resp, MLX5_ADAPTER_PAGE_SIZE, MLX5_BFREGS_PER_UAR,
    MLX5_NUM_NON_FP_BFREGS_PER_UAR,
};
use super::context::{Mlx5ContextInfo, Mlx5ContextUdata};
use super::cq::{parse_create_cq_resp, ring_entries, CqBuf, CqeSize, Mlx5Cq, UarPage};
use super::uar::{DynUarPool, KernelUars, UarKernel};
use super::wq::{
    build_av, qp_sizing, srq_sizing, AhTable, BfPolicy, BfReg, CqLookup, Mlx5Qp, Mlx5Srq, QpBuf,
    QpParts, QpTableLock, Registry, SrqBuf, SrqShared, UserIndex, WqLimits,
};
use crate::mapping::{map_shared, Mapping};

/// Opens an mlx5 device: alloc_ucontext with mlx5's driver data, then maps the static UAR
/// pages (page 0 also carries the CQ doorbells).
pub fn open(dev: &Device) -> io::Result<Arc<Context>> {
    crate::check_driver(dev, DriverId::MLX5, "mlx5")?;
    let page = rustix::param::page_size();
    let udata = Mlx5ContextUdata::new(page);
    let req = udata.request()?;
    let mut resp = mlx5_ib_alloc_ucontext_resp::default();
    let ctx = Context::open_with_udata(dev, req.as_bytes(), resp.as_mut_bytes())?;
    let info = udata.parse_response(resp.as_bytes(), page)?;
    let mut eth = Vec::new();
    for p in 1..=u32::from(info.num_ports) {
        let ll = ctx.query_port(p).map(|a| a.link_layer).ok();
        eth.push(ll == Some(rverbs_uverbs::port::LinkLayer::ETHERNET));
    }
    if info.tot_bfregs == 0 {
        // Dynamic UARs (the kernel allocated no static page): the UAR object method.
        let kernel: Arc<dyn UarKernel> =
            Arc::new(KernelUars::new(ctx.cmd_fd(), dev.driver_id().0)?);
        let pool = DynUarPool::new(
            kernel,
            dev.name(),
            udata.total_num_bfregs,
            udata.num_low_latency_bfregs,
            info.bf_reg_size,
            info.num_uars_per_page,
        )?;
        let d = Mlx5Driver::from_dynamic(info, pool, BfPolicy::from_env(), eth)
            .with_gid_types(sysfs_gid_types(dev))
            .with_cqe_size(cqe_size_from_env());
        // SAFETY: as below.
        unsafe { ctx.set_driver(Box::new(d)) }?;
        return Ok(Arc::new(ctx));
    }
    let pages = static_uar_pages(&info);
    let mut uars = Vec::with_capacity(pages);
    for i in 0..pages {
        uars.push(map_shared(
            ctx.cmd_fd(),
            info.uar_mmap_offset(i as u8),
            page,
            &format!("mlx5 UAR page {i} of {}", dev.name()),
        )?);
    }
    let uar_mem: Vec<(*mut u8, usize)> = uars.iter().map(|m| (m.ptr().as_ptr(), m.len())).collect();
    // SAFETY: the mappings are kept in the driver (`_uars`), so they outlive every register
    // and CQ made from them (all hold the context alive).
    let mut d = unsafe { Mlx5Driver::from_parts(info, &uar_mem, BfPolicy::from_env(), eth)? }
        .with_gid_types(sysfs_gid_types(dev))
        .with_cqe_size(cqe_size_from_env());
    d._uars = uars;
    // SAFETY: the context's device is an mlx5 device (checked first, before anything was
    // opened), so its rings and doorbells follow mlx5's layout.
    unsafe { ctx.set_driver(Box::new(d)) }?;
    Ok(Arc::new(ctx))
}

/// RoCE v2 GIDs as sysfs shows them (`ports/P/gid_attrs/types/I` = `RoCE v2`), what
/// libibverbs' `ibv_query_gid_type` reads.
fn sysfs_gid_types(dev: &Device) -> GidTypeFn {
    let ibdev = dev.ibdev_path().to_path_buf();
    Box::new(move |port, index| {
        std::fs::read_to_string(ibdev.join(format!("ports/{port}/gid_attrs/types/{index}")))
            .is_ok_and(|t| t.trim() == "RoCE v2")
    })
}

/// libmlx5's `MLX5_CQE_SIZE`: the CQE size of the context's CQs (64 without it; anything but
/// 64 or 128 makes CQ creation fail, as in libmlx5; a value that is not a number counts as 0).
pub fn cqe_size_from_env() -> u32 {
    match std::env::var("MLX5_CQE_SIZE") {
        Ok(v) => v.trim().parse().unwrap_or(0),
        Err(_) => 64,
    }
}

/// Static UAR pages a context maps (libmlx5: `tot_bfregs / (uars_per_page * 2)`, at least 1).
pub fn static_uar_pages(info: &Mlx5ContextInfo) -> usize {
    let per_page = info.num_uars_per_page.max(1) * MLX5_NUM_NON_FP_BFREGS_PER_UAR;
    ((info.tot_bfregs / per_page) as usize).max(1)
}

/// The per-context mlx5 driver.
pub struct Mlx5Driver {
    info: Mlx5ContextInfo,
    /// (start, length) of each static UAR system page.
    uar_pages: Vec<(usize, usize)>,
    _uars: Vec<Mapping>,
    bfs: Mutex<HashMap<u32, Arc<BfReg>>>,
    registry: Arc<Registry>,
    /// Orders QP creation against a QP's destroy and clean (`Driver::qp_table_lock`).
    qp_table: QpTableLock,
    ahs: Arc<AhTable>,
    policy: BfPolicy,
    /// Per port (1-based, index 0 = port 1): the link layer is Ethernet (RoCE).
    eth: Vec<bool>,
    /// Dynamic UARs (the kernel answered `tot_bfregs` 0), else `None`.
    dyn_uars: Option<DynUarPool>,
    /// CQE version 1: the user indices given to QPs and SRQs (lowest free first, as
    /// libmlx5's `mlx5_store_uidx`).
    uidx: Arc<Mutex<Vec<bool>>>,
    /// SRQs by kernel handle, so that a QP on an SRQ knows it (CQE version 1 names the QP,
    /// not the SRQ, in a receive completion).
    srqs: Mutex<HashMap<u32, std::sync::Weak<SrqShared>>>,
    /// Whether GID `index` of `port` is a RoCE v2 GID (read when an AH is created: GIDs
    /// come and go with the netdev's addresses).
    roce_v2: GidTypeFn,
    /// CQE size in bytes asked for (`MLX5_CQE_SIZE`; checked at CQ creation).
    cqe_size: u32,
}

/// Tells whether GID `(port, index)` is a RoCE v2 GID.
pub type GidTypeFn = Box<dyn Fn(u8, u8) -> bool + Send + Sync>;

impl std::fmt::Debug for Mlx5Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mlx5Driver")
            .field("info", &self.info)
            .field("uar_pages", &self.uar_pages)
            .field("dyn_uars", &self.dyn_uars)
            .field("policy", &self.policy)
            .field("eth", &self.eth)
            .finish_non_exhaustive()
    }
}

// SAFETY: the UAR memory is only written through single 64-bit doorbell stores (UarPage) and
// under each blue-flame register's lock (BfReg); everything else is plain data or locked.
unsafe impl Sync for Mlx5Driver {}

impl Mlx5Driver {
    /// A driver over UAR memory the caller provides (the real open maps it from the device;
    /// tests and the oracle give ordinary memory). `uar_pages` are the static UAR system
    /// pages in order; `eth[p - 1]` says whether port `p` is Ethernet.
    ///
    /// # Safety
    /// Each page must stay mapped and writable as long as the driver and every object created
    /// through it exist, and nothing may hold a Rust reference into it.
    pub unsafe fn from_parts(
        info: Mlx5ContextInfo,
        uar_pages: &[(*mut u8, usize)],
        policy: BfPolicy,
        eth: Vec<bool>,
    ) -> io::Result<Self> {
        if uar_pages.is_empty() {
            return Err(Error::invalid("open mlx5 context", "no UAR page").into());
        }
        Ok(Self::with_uars(
            info,
            uar_pages.iter().map(|&(p, l)| (p as usize, l)).collect(),
            None,
            policy,
            eth,
        ))
    }

    /// A driver whose UARs come from `pool` (dynamic UARs: the kernel answered
    /// `tot_bfregs` 0). `eth[p - 1]` says whether port `p` is Ethernet.
    pub fn from_dynamic(
        info: Mlx5ContextInfo,
        pool: DynUarPool,
        policy: BfPolicy,
        eth: Vec<bool>,
    ) -> Self {
        Self::with_uars(info, Vec::new(), Some(pool), policy, eth)
    }

    fn with_uars(
        info: Mlx5ContextInfo,
        uar_pages: Vec<(usize, usize)>,
        dyn_uars: Option<DynUarPool>,
        policy: BfPolicy,
        eth: Vec<bool>,
    ) -> Self {
        Self {
            info,
            uar_pages,
            _uars: Vec::new(),
            bfs: Mutex::new(HashMap::new()),
            registry: Arc::new(Registry::default()),
            qp_table: QpTableLock::default(),
            ahs: Arc::new(AhTable::default()),
            policy,
            eth,
            dyn_uars,
            uidx: Arc::default(),
            srqs: Mutex::default(),
            roce_v2: Box::new(|_, _| false),
            cqe_size: 64,
        }
    }

    /// Sets the size of the CQEs of CQs created from now on: 64 (the default) or 128 bytes
    /// (libmlx5's `MLX5_CQE_SIZE`, which [`open`] reads). Any other value makes CQ creation
    /// fail with an error naming it, as libmlx5 does (EINVAL).
    pub fn with_cqe_size(mut self, bytes: u32) -> Self {
        self.cqe_size = bytes;
        self
    }

    /// Sets how the driver learns whether a source GID is RoCE v2 (its AVs then carry a UDP
    /// source port). [`open`] reads the device's sysfs `gid_attrs/types`; without this call
    /// every GID counts as RoCE v1 / InfiniBand.
    pub fn with_gid_types(mut self, roce_v2: GidTypeFn) -> Self {
        self.roce_v2 = roce_v2;
        self
    }

    /// Threads waiting for the QP table lock now (for tests to see a create wait).
    #[cfg(test)]
    pub(crate) fn qp_table_waiting(&self) -> usize {
        self.qp_table.waiting()
    }

    /// With CQE version 1, a user index for a new QP (`None` with version 0).
    fn take_uidx(&self) -> io::Result<Option<UserIndex>> {
        if self.info.cqe_version == 0 {
            return Ok(None);
        }
        Ok(Some(UserIndex::take(&self.uidx)?))
    }

    /// The blue-flame register `index`, shared by every QP the kernel gives it.
    fn bfreg(&self, index: u32) -> io::Result<Arc<BfReg>> {
        let mut m = self.bfs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = m.get(&index) {
            return Ok(b.clone());
        }
        let uar = (index / MLX5_BFREGS_PER_UAR) as usize;
        let per_page = self.info.num_uars_per_page.max(1) as usize;
        let Some(&(page, len)) = self.uar_pages.get(uar / per_page) else {
            return Err(Error::protocol(
                "create QP on mlx5",
                format!(
                    "the kernel gave blue-flame register {index}, beyond the {} static UAR \
                     pages of this context",
                    self.uar_pages.len()
                ),
            )
            .into());
        };
        let within = (uar % per_page) * MLX5_ADAPTER_PAGE_SIZE as usize;
        if within >= len {
            return Err(Error::protocol("create QP on mlx5", "UAR outside its page").into());
        }
        // SAFETY: the page stays mapped as long as the driver (from_parts' contract), and
        // every QP holding the register holds the context, which owns the driver.
        let b = Arc::new(unsafe {
            BfReg::new(
                (page + within) as *mut u8,
                len - within,
                index,
                self.info.bf_reg_size,
            )?
        });
        m.insert(index, b.clone());
        Ok(b)
    }
}

#[derive(Debug)]
struct CqRing {
    cq: Mlx5Cq<CqLookup>,
}

impl CqOps for CqRing {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.cq.poll(out)
    }

    fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        self.cq.poll_raw(out)
    }

    fn arm(&mut self, _cq: KernelObj<'_>, solicited_only: bool) -> io::Result<()> {
        // mlx5 arms in userspace: doorbell record, then the UAR doorbell.
        self.cq.arm(solicited_only);
        Ok(())
    }

    fn event_received(&mut self) {
        self.cq.event_received();
    }

    fn cleans_on_qp_reset(&self) -> bool {
        true
    }

    fn qp_reset(&mut self, qp_num: u32, recv: bool) {
        // libmlx5 `mlx5_modify_qp` → `mlx5_cq_clean` under the CQ's lock (ours is the core's).
        if let Some(f) = self.cq.lookup_mut().reset_filter(qp_num, recv) {
            self.cq.clean(|cqe| f.removes(cqe));
        }
    }

    fn qp_destroyed(
        &mut self,
        qp: &dyn QpOps,
        _qp_num: u32,
        recv: bool,
        srq_done: &mut dyn FnMut(u64),
    ) {
        // libmlx5 `mlx5_destroy_qp` → `__mlx5_cq_clean` after the kernel destroyed the QP,
        // under the CQ's lock (ours is the core's). Another provider's QP cannot be on an
        // mlx5 CQ (one context, one driver); found by its own tables, not its number.
        let Some(q) = qp.as_any().and_then(|a| a.downcast_ref::<Mlx5Qp>()) else {
            return;
        };
        let f = self.cq.lookup_mut().destroy_filter(q.shared(), recv);
        self.cq.clean(|cqe| f.removes_reporting(cqe, srq_done));
    }
}

// SAFETY: every ring and doorbell record is memory this driver allocated and sized itself
// (the sizing checked before it is written); the UAR pages were mapped when the context
// opened; a create response only names numbers (CQN, QPN, SRQN, UAR index), each checked
// before use.
unsafe impl Driver for Mlx5Driver {
    fn name(&self) -> &'static str {
        "mlx5"
    }

    fn qp_table_lock(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        // As libmlx5, with CQE version 0 only: with version 1 a completion names its QP by
        // user index, which the destroyed QP's `Mlx5Qp` frees only after the clean.
        (self.info.cqe_version == 0).then(|| self.qp_table.lock())
    }

    fn send_caps(&self) -> rverbs_uverbs::SendCaps {
        super::wq::send_caps()
    }

    fn adjust_cqe(&self, cqe: u32) -> io::Result<u32> {
        // The ring gets the next power of two above `cqe`; the kernel is told one less.
        Ok(ring_entries(cqe)? - 1)
    }

    unsafe fn create_cq(
        &self,
        _cmd_fd: BorrowedFd<'_>,
        cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> io::Result<Box<dyn CqOps>> {
        let size = match self.cqe_size {
            64 => CqeSize::B64,
            128 => CqeSize::B128,
            v => {
                return Err(Error::invalid(
                    "create CQ on mlx5",
                    format!("MLX5_CQE_SIZE is {v}: mlx5 CQEs are 64 or 128 bytes"),
                )
                .into())
            }
        };
        let buf = CqBuf::new(cqe, size)?;
        // Dynamic UARs: the context's non-cached UAR, named by its page id (libmlx5:
        // `MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX` with `nc_uar->page_id`).
        let nc = self.dyn_uars.as_ref().map(|p| p.nc());
        let req = buf.create_cq_udata(nc.map(|u| u.page_id() as u16));
        let mut resp = mlx5_ib_create_cq_resp::default();
        create(req.as_bytes(), resp.as_mut_bytes())?;
        let cqn = parse_create_cq_resp(resp.as_bytes())?;
        let (page, len) = match nc {
            Some(u) => {
                let (p, l) = u.mapping();
                (p as usize, l)
            }
            None => self.uar_pages[0],
        };
        // SAFETY: the UAR page stays mapped as long as this driver, which the context owns,
        // and every CQ holds its context alive (Arc<Context>), so it outlives the CQ.
        let uar = unsafe { UarPage::new(page as *mut u8, len)? };
        let cq = Mlx5Cq::new(
            buf,
            cqn,
            uar,
            CqLookup::new(self.registry.clone(), self.info.cqe_version),
        )?;
        Ok(Box::new(CqRing { cq }))
    }

    unsafe fn create_qp(
        &self,
        _cmd_fd: BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> io::Result<Box<dyn QpOps>> {
        let sz = qp_sizing(
            &WqLimits::from(&self.info),
            req.qp_type,
            &req.caps,
            req.has_srq,
        )?;
        let buf = QpBuf::new(sz)?;
        let lease = match &self.dyn_uars {
            Some(p) => Some(p.qp_register(self.policy.shut_up_bf)?),
            None => None,
        };
        let uidx = self.take_uidx()?;
        let udata = buf.create_udata(
            uidx.as_ref().map(UserIndex::get),
            lease.as_ref().map(|l| l.bf().index()),
        );
        let mut resp = mlx5_ib_create_qp_resp::default();
        // From the kernel's create until the QP is in the registry (libmlx5 holds
        // `qp_table_mutex` so in `create_qp`): a number the kernel reuses becomes the new
        // QP's only once the destroyed QP's completions are out of the CQs.
        let table = self.qp_table_lock();
        let k = create(udata.as_bytes(), resp.as_mut_bytes())?;
        let bf = match &lease {
            // Dynamic UARs: the register is ours; the kernel's bfreg answer does not apply.
            Some(l) => l.bf().clone(),
            None => self.bfreg(resp.bfreg_index).map_err(|e| {
                Error::protocol(
                    format!("create {} QP {:#x} on mlx5", req.qp_type, k.qp_num),
                    e.to_string(),
                )
            })?,
        };
        let qp = Mlx5Qp::new(
            buf,
            QpParts {
                qpn: k.qp_num,
                qp_type: req.qp_type,
                sq_sig_all: req.sq_sig_all,
                bf,
                policy: self.policy,
                ahs: self.ahs.clone(),
                reg: self.registry.clone(),
                srq: req.srq_handle.and_then(|h| {
                    let m = self.srqs.lock().unwrap_or_else(|e| e.into_inner());
                    m.get(&h).and_then(std::sync::Weak::upgrade)
                }),
                lease,
                uidx,
            },
        )?;
        drop(table);
        Ok(Box::new(qp))
    }

    unsafe fn create_srq(
        &self,
        _cmd_fd: BorrowedFd<'_>,
        max_wr: u32,
        max_sge: u32,
        create: &mut CreateFn<'_, SrqCreated>,
    ) -> io::Result<Box<dyn SrqOps>> {
        let sz = srq_sizing(&WqLimits::from(&self.info), max_wr, max_sge)?;
        let buf = SrqBuf::new(sz)?;
        let udata = buf.create_udata();
        let mut resp = mlx5_ib_create_srq_resp::default();
        let k = create(udata.as_bytes(), resp.as_mut_bytes())?;
        let op = || format!("create SRQ {:#x} on mlx5", k.srq_num);
        if k.max_wr < sz.max_wr || k.max_sge < max_sge {
            return Err(Error::protocol(
                op(),
                format!(
                    "the kernel answered max_wr {} max_sge {} for a ring of {} WQEs of {} SGEs",
                    k.max_wr, k.max_sge, sz.max_wr, sz.max_gs
                ),
            )
            .into());
        }
        if resp.srqn != k.srq_num || resp.srqn > 0xff_ffff {
            return Err(Error::protocol(
                op(),
                format!("driver response names SRQ {:#x}", resp.srqn),
            )
            .into());
        }
        let srq = Mlx5Srq::new(buf, resp.srqn, self.registry.clone());
        let mut m = self.srqs.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, w| w.strong_count() > 0);
        m.insert(k.handle, Arc::downgrade(srq.shared()));
        drop(m);
        Ok(Box::new(srq))
    }

    unsafe fn create_ah(&self, attr: &AhAttr, create: &mut CreateFn<'_, u32>) -> io::Result<u32> {
        let op = || format!("create AH on mlx5 port {}", attr.port_num);
        let eth = match self.eth.get(usize::from(attr.port_num).wrapping_sub(1)) {
            Some(&e) => e,
            None => {
                return Err(Error::invalid(
                    op(),
                    format!("the device has ports 1..={}", self.eth.len()),
                )
                .into())
            }
        };
        if eth && attr.grh.is_none() {
            return Err(
                Error::invalid(op(), "a RoCE address needs a GRH (destination GID)").into(),
            );
        }
        let mut resp = mlx5_ib_create_ah_resp::default();
        create(&[], resp.as_mut_bytes())?;
        let v2 = eth
            && attr
                .grh
                .is_some_and(|g| (self.roce_v2)(attr.port_num, g.sgid_index));
        let av = build_av(attr, eth.then_some(resp.dmac), v2);
        Ok(self.ahs.insert(av))
    }
}
