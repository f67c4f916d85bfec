//! EFA as a [`Driver`]: the context (alloc_ucontext and QUERY_DEVICE driver data), CQs, UD
//! and SRD QPs and AHs on the provider seam, every queue mapped at the mmap key the kernel's
//! create response names.

#![allow(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use rverbs_uverbs::ah::AhAttr;
use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{Device, DriverId};
use rverbs_uverbs::driver::{
    CqCreated, CqOps, CreateFn, Driver, DriverQpType, QpCreated, QpOps, QpRequest, SrqCreated,
    SrqOps,
};
use rverbs_uverbs::kernel::mapping::{MapAccess, Mapping};
use rverbs_uverbs::qp::{QpCaps, QpType};
use rverbs_uverbs::{Error, OpKind, OpSet, SendCaps};
use rverbs_uverbs::{OpTable, Transports};
use zerocopy::{FromZeros, IntoBytes};

use super::abi::*;
use super::queues::{EfaCq, EfaQp, Rq, Sq, Wq, WqLock};

/// `IBV_QPT_DRIVER` (0xff): the QP type an SRD QP is created with (its driver data says SRD).
pub(crate) const QP_TYPE_DRIVER: QpType = QpType(0xff);

/// What the context learned from the kernel: alloc_ucontext's answer and QUERY_DEVICE's
/// driver data (libefa `efa_alloc_context`, `efa_query_device_ctx`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EfaInfo {
    pub sub_cqs_per_cq: u16,
    pub inline_buf_size: u16,
    pub max_llq_size: u32,
    pub max_tx_batch: u16,
    pub min_sq_wr: u16,
    pub device_caps: u32,
    pub max_sq_wr: u32,
    pub max_rq_wr: u32,
    pub max_sq_sge: u16,
    pub max_rq_sge: u16,
    pub max_rdma_size: u32,
}

/// The alloc_ucontext request libefa 44 sends: it reads `max_tx_batch` and `min_sq_wr`.
pub(crate) fn alloc_ucontext_cmd() -> efa_ibv_alloc_ucontext_cmd {
    efa_ibv_alloc_ucontext_cmd {
        comp_mask: EFA_ALLOC_UCONTEXT_CMD_COMP_TX_BATCH | EFA_ALLOC_UCONTEXT_CMD_COMP_MIN_SQ_WR,
        ..Default::default()
    }
}

impl EfaInfo {
    /// What libefa 44's `efadv_query_device` reports of the device (every field its
    /// `struct efadv_device_attr` has in rdma-core 44).
    pub(crate) fn device_attr(&self) -> crate::EfaDeviceAttr {
        let mut caps = 0;
        if self.device_caps & EFA_QUERY_DEVICE_CAPS_RDMA_READ != 0 {
            caps |= crate::EfaDeviceAttr::CAPS_RDMA_READ;
        }
        if self.device_caps & EFA_QUERY_DEVICE_CAPS_RNR_RETRY != 0 {
            caps |= crate::EfaDeviceAttr::CAPS_RNR_RETRY;
        }
        crate::EfaDeviceAttr {
            max_sq_wr: self.max_sq_wr,
            max_rq_wr: self.max_rq_wr,
            max_sq_sge: self.max_sq_sge,
            max_rq_sge: self.max_rq_sge,
            inline_buf_size: self.inline_buf_size,
            device_caps: caps,
            max_rdma_size: self.max_rdma_size,
        }
    }

    /// From alloc_ucontext's answer and, when the kernel answers QUERY_DEVICE with driver
    /// data, that. A kernel without AH driver data is refused, as libefa refuses it (the AH
    /// number every send carries comes from there).
    pub(crate) fn new(
        dev: &str,
        ctx: &efa_ibv_alloc_ucontext_resp,
        query: Option<&efa_ibv_ex_query_device_resp>,
    ) -> io::Result<EfaInfo> {
        if ctx.cmds_supp_udata_mask & EFA_USER_CMDS_SUPP_UDATA_CREATE_AH == 0 {
            return Err(Error::unsupported(
                format!("open {dev} with the efa provider"),
                "the kernel does not answer CREATE_AH with EFA's driver data (the AH number)",
            )
            .into());
        }
        let q = query.copied().unwrap_or_default();
        Ok(EfaInfo {
            sub_cqs_per_cq: ctx.sub_cqs_per_cq,
            inline_buf_size: ctx.inline_buf_size,
            max_llq_size: ctx.max_llq_size,
            max_tx_batch: ctx.max_tx_batch,
            min_sq_wr: ctx.min_sq_wr,
            device_caps: q.device_caps,
            max_sq_wr: q.max_sq_wr,
            max_rq_wr: q.max_rq_wr,
            max_sq_sge: q.max_sq_sge,
            max_rq_sge: q.max_rq_sge,
            max_rdma_size: q.max_rdma_size,
        })
    }
}

/// A mapping of kernel memory (a queue, a doorbell page, the LLQ window): unmapped on drop.
pub(crate) struct EfaMap {
    ptr: NonNull<u8>,
    len: usize,
    _mapping: Option<Mapping>,
}

// SAFETY: the map is an address range; access to it is synchronised by its owner.
unsafe impl Send for EfaMap {}
// SAFETY: as above.
unsafe impl Sync for EfaMap {}

impl fmt::Debug for EfaMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EfaMap({:p}, {})", self.ptr, self.len)
    }
}

impl EfaMap {
    /// Memory someone else owns (a test's fake kernel memory).
    ///
    /// # Safety
    /// `ptr..ptr + len` stays valid, and is touched by nobody but the provider and a fake
    /// device, until the map and every queue made from it are dropped.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) unsafe fn borrowed(ptr: NonNull<u8>, len: usize) -> EfaMap {
        EfaMap {
            ptr,
            len,
            _mapping: None,
        }
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Where the kernel's mmap keys lead: the command fd (a device), or a test's memory.
pub(crate) trait EfaMem: Send + Sync + fmt::Debug {
    /// Maps `len` bytes at mmap key `key` of the command fd `fd`; `what` names it in errors.
    fn map(
        &self,
        fd: BorrowedFd<'_>,
        key: u64,
        len: usize,
        access: MapAccess,
        what: &str,
    ) -> io::Result<EfaMap>;
}

/// The command fd's mappings.
#[derive(Debug)]
struct KernelMem;

impl EfaMem for KernelMem {
    fn map(
        &self,
        fd: BorrowedFd<'_>,
        key: u64,
        len: usize,
        access: MapAccess,
        what: &str,
    ) -> io::Result<EfaMap> {
        let m = Mapping::shared(fd, key, len, access).map_err(|e| {
            io::Error::from(
                Error::os(format!("map {what}"), e)
                    .with_detail(format!("mmap key {key:#x}, {len} bytes")),
            )
        })?;
        Ok(EfaMap {
            ptr: m.ptr(),
            len: m.len(),
            _mapping: Some(m),
        })
    }
}

/// The work queues of each live QP, by QP number: how the CQ poller finds a completion's
/// `wr_id` (libefa's `qp_table`).
pub(crate) type QpTable = Mutex<HashMap<u32, (Arc<WqLock>, Arc<WqLock>)>>;

/// The per-context EFA driver.
#[derive(Debug)]
pub(crate) struct EfaDriver {
    pub(crate) info: EfaInfo,
    mem: Arc<dyn EfaMem>,
    qps: Arc<QpTable>,
    page: usize,
}

/// Opens an EFA device: alloc_ucontext with EFA's driver data, QUERY_DEVICE with its driver
/// data (when the kernel says it answers so).
pub fn open(dev: &Device) -> io::Result<Arc<Context>> {
    crate::check_driver(dev, DriverId::EFA, "efa")?;
    let cmd = alloc_ucontext_cmd();
    let mut resp = efa_ibv_alloc_ucontext_resp::default();
    let ctx = Context::open_with_udata(dev, cmd.as_bytes(), resp.as_mut_bytes())?;
    let query = if resp.cmds_supp_udata_mask & EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE != 0 {
        Some(query_device_udata(&ctx)?)
    } else {
        None
    };
    let info = EfaInfo::new(dev.name(), &resp, query.as_ref())?;
    let d = EfaDriver::new(info, Arc::new(KernelMem), rustix::param::page_size());
    // SAFETY: the context's device is an EFA device (checked first), so its queues follow
    // EFA's layout.
    unsafe { ctx.set_driver(Box::new(d)) }?;
    Ok(Arc::new(ctx))
}

/// Extended QUERY_DEVICE with room for EFA's driver data; returns that.
fn query_device_udata(ctx: &Context) -> io::Result<efa_ibv_ex_query_device_resp> {
    use rverbs_uverbs::kernel::abi::cmd::ex_nr;
    use rverbs_uverbs::kernel::abi::device::{
        ib_uverbs_ex_query_device, ib_uverbs_ex_query_device_resp,
    };
    let core = std::mem::size_of::<ib_uverbs_ex_query_device_resp>();
    let mut buf = vec![0u8; core + std::mem::size_of::<efa_ibv_ex_query_device_resp>()];
    let req = ib_uverbs_ex_query_device::default();
    // SAFETY: QUERY_DEVICE writes only the response buffer we pass, whose length it is told.
    unsafe {
        rverbs_uverbs::kernel::write::extended(
            ctx.cmd_fd(),
            ex_nr::QUERY_DEVICE,
            req.as_bytes(),
            &[],
            &mut buf,
            core,
        )
    }
    .map_err(|e| {
        io::Error::from(Error::os(
            format!("query device {} (EFA driver data)", ctx.device().name()),
            e,
        ))
    })?;
    let mut r = efa_ibv_ex_query_device_resp::new_zeroed();
    r.as_mut_bytes().copy_from_slice(&buf[core..]);
    Ok(r)
}

fn roundup_pow2(n: u32) -> Option<u32> {
    n.max(1).checked_next_power_of_two()
}

/// What libefa sizes a QP to (`efa_setup_qp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpSizing {
    /// Send descriptors (= send work requests).
    pub sq_wqes: u32,
    /// Receive descriptors in the ring (one per SGE).
    pub rq_descs: u32,
    /// Receive work requests.
    pub rq_wqes: u32,
}

impl EfaDriver {
    /// A driver over `mem` (the command fd's mappings, or a test's memory).
    pub(crate) fn new(info: EfaInfo, mem: Arc<dyn EfaMem>, page: usize) -> EfaDriver {
        EfaDriver {
            info,
            mem,
            qps: Arc::new(Mutex::new(HashMap::new())),
            page,
        }
    }

    /// Whether the device reports RDMA READ (`EFA_QUERY_DEVICE_CAPS_RDMA_READ`): SRD QPs
    /// then take it.
    pub(crate) fn reads(&self) -> bool {
        self.info.device_caps & EFA_QUERY_DEVICE_CAPS_RDMA_READ != 0
    }

    /// libefa's checks (`efa_check_qp_attr`, `efa_check_qp_limits`) and sizing
    /// (`efa_setup_qp`): what the QP's rings get, and so what the kernel is told.
    pub(crate) fn qp_sizing(&self, req: &QpRequest) -> io::Result<QpSizing> {
        let op = || format!("create {} QP on efa", qp_type_name(req.qp_type));
        if req.qp_type != QpType::UD && req.qp_type != QP_TYPE_DRIVER {
            return Err(Error::unsupported(
                op(),
                format!(
                    "EFA has UD and SRD QPs, not {} (libefa: EOPNOTSUPP)",
                    req.qp_type
                ),
            )
            .into());
        }
        if req.has_srq {
            return Err(Error::invalid(op(), "EFA QPs take no SRQ").into());
        }
        let c = &req.caps;
        let i = &self.info;
        for (what, asked, max) in [
            ("send SGEs", c.max_send_sge, u32::from(i.max_sq_sge)),
            ("receive SGEs", c.max_recv_sge, u32::from(i.max_rq_sge)),
            ("send work requests", c.max_send_wr, i.max_sq_wr),
            ("receive work requests", c.max_recv_wr, i.max_rq_wr),
        ] {
            if asked > max {
                return Err(Error::invalid(
                    op(),
                    format!("{asked} {what} asked, the device takes at most {max}"),
                )
                .into());
            }
        }
        if c.max_recv_sge == 0 || c.max_recv_wr == 0 || c.max_send_wr == 0 {
            return Err(Error::invalid(
                op(),
                "an EFA QP needs at least one send and one receive work request and receive SGE \
                 (libefa sizes its rings by them)",
            )
            .into());
        }
        let too_big = || io::Error::from(Error::invalid(op(), "the queue sizes overflow"));
        let sq_wqes =
            roundup_pow2(c.max_send_wr.max(u32::from(i.min_sq_wr))).ok_or_else(too_big)?;
        let rq_descs = c
            .max_recv_sge
            .checked_mul(c.max_recv_wr)
            .and_then(roundup_pow2)
            .ok_or_else(too_big)?;
        if sq_wqes > u32::from(u16::MAX) + 1 || rq_descs > u32::from(u16::MAX) + 1 {
            return Err(too_big());
        }
        Ok(QpSizing {
            sq_wqes,
            rq_descs,
            rq_wqes: rq_descs / c.max_recv_sge,
        })
    }
}

fn qp_type_name(t: QpType) -> String {
    if t == QP_TYPE_DRIVER {
        "SRD".into()
    } else {
        t.to_string()
    }
}

/// What libefa 44's `ibv_post_send` encodes, per operation (`efa_post_send_validate_wr`: SEND
/// and SEND with immediate on UD; SRD's set, RDMA READ included, is `driver_qp`'s). Every operation of the op table has a field: a new one
/// does not compile until this says whether EFA encodes it.
const OPS: OpTable<Transports> = OpTable {
    rdma_write: Transports::NONE,
    rdma_write_with_imm: Transports::NONE,
    send: Transports::UD,
    send_with_imm: Transports::UD,
    rdma_read: Transports::NONE,
    atomic_cmp_swp: Transports::NONE,
    atomic_fetch_add: Transports::NONE,
    local_inv: Transports::NONE,
    bind_mw: Transports::NONE,
    send_with_inv: Transports::NONE,
    flush: Transports::NONE,
    atomic_write: Transports::NONE,
};

// SAFETY: the data path touches only what the kernel mapped for each object, at the mmap keys
// and sizes its genuine create responses name (each size checked against what the ring
// needs before use), and every ring index is bounded by the ring's mask.
unsafe impl Driver for EfaDriver {
    fn name(&self) -> &'static str {
        "efa"
    }

    fn send_caps(&self) -> SendCaps {
        SendCaps::from_table(&OPS)
    }

    fn driver_qp(&self) -> Option<DriverQpType> {
        // libefa 44 (`efa_check_qp_attr`): SRD takes UD's SEND and SEND with immediate, and
        // RDMA READ where the device reports EFA_QUERY_DEVICE_CAPS_RDMA_READ (libefa encodes
        // it through `ibv_wr_rdma_read` only; rverbs through every post, the same bytes).
        let ud = SendCaps::from_table(&OPS).for_type(QpType::UD);
        let read = self.reads();
        let ops = OpSet::from_fn(|k| ud.contains(k) || (read && k == OpKind::RdmaRead));
        Some(DriverQpType { name: "SRD", ops })
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn adjust_cqe(&self, cqe: u32) -> io::Result<u32> {
        roundup_pow2(cqe).ok_or_else(|| {
            Error::invalid("create CQ on efa", format!("{cqe} entries overflow")).into()
        })
    }

    fn recv_completes_in_order(&self) -> bool {
        // libefa gives receive ids from a pool and looks each completion up by its id: the
        // device may complete receives in any order.
        false
    }

    fn qp_caps_for_kernel(&self, req: &QpRequest) -> io::Result<QpCaps> {
        let s = self.qp_sizing(req)?;
        Ok(QpCaps {
            max_send_wr: s.sq_wqes,
            max_recv_wr: s.rq_wqes,
            ..req.caps
        })
    }

    unsafe fn create_cq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        _cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> io::Result<Box<dyn CqOps>> {
        let op = "create CQ on efa";
        let subs = self.info.sub_cqs_per_cq;
        if subs == 0 {
            return Err(Error::protocol(op, "the kernel reported 0 sub-CQs per CQ").into());
        }
        let req = efa_ibv_create_cq {
            cq_entry_size: RX_CDESC as u32,
            num_sub_cqs: subs,
            ..Default::default()
        };
        let mut resp = efa_ibv_create_cq_resp::default();
        let created = create(req.as_bytes(), resp.as_mut_bytes())?;
        let n = created.cqe;
        let need = usize::from(subs)
            .checked_mul(n as usize)
            .and_then(|x| x.checked_mul(RX_CDESC))
            .filter(|_| n.is_power_of_two() && n <= 1 << 16);
        let Some(need) = need else {
            return Err(Error::protocol(
                op,
                format!("the kernel answered {n} entries per sub-CQ (a power of two up to 65536 expected)"),
            )
            .into());
        };
        if (resp.q_mmap_size as usize) < need {
            return Err(Error::protocol(
                op,
                format!(
                    "the kernel's ring is {} bytes, {subs} sub-CQs of {n} entries need {need}",
                    resp.q_mmap_size
                ),
            )
            .into());
        }
        let ring = self.mem.map(
            cmd_fd,
            resp.q_mmap_key,
            resp.q_mmap_size as usize,
            MapAccess::ReadWrite,
            "EFA CQ ring",
        )?;
        let db = if resp.comp_mask & EFA_CREATE_CQ_RESP_DB_OFF != 0 {
            if resp.db_off as usize > self.page - 4 || resp.db_off % 4 != 0 {
                return Err(Error::protocol(
                    op,
                    format!("CQ doorbell offset {:#x} outside its page", resp.db_off),
                )
                .into());
            }
            let m = self.mem.map(
                cmd_fd,
                resp.db_mmap_key,
                self.page,
                MapAccess::WriteOnly,
                "EFA CQ doorbell",
            )?;
            Some((m, resp.db_off as usize))
        } else {
            None
        };
        Ok(Box::new(EfaCq::new(ring, db, subs, n, self.qps.clone())))
    }

    unsafe fn create_qp(
        &self,
        cmd_fd: BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> io::Result<Box<dyn QpOps>> {
        let op = || format!("create {} QP on efa", qp_type_name(req.qp_type));
        let s = self.qp_sizing(req)?;
        let cmd = efa_ibv_create_qp {
            comp_mask: 0,
            rq_ring_size: s.rq_descs * RX_DESC as u32,
            sq_ring_size: s.sq_wqes * TX_WQE as u32,
            driver_qp_type: if req.qp_type == QP_TYPE_DRIVER {
                EFA_QP_DRIVER_TYPE_SRD
            } else {
                0
            },
        };
        let mut resp = efa_ibv_create_qp_resp::default();
        let created = create(cmd.as_bytes(), resp.as_mut_bytes())?;
        let proto = |d: String| io::Error::from(Error::protocol(op(), d));
        if created.qp_num > 0xffff {
            return Err(proto(format!(
                "QP number {:#x} above 16 bits (EFA completions carry 16)",
                created.qp_num
            )));
        }
        let subs = self.info.sub_cqs_per_cq;
        for (what, idx) in [
            ("send", resp.send_sub_cq_idx),
            ("receive", resp.recv_sub_cq_idx),
        ] {
            if idx >= subs {
                return Err(proto(format!(
                    "{what} sub-CQ {idx}, the context's CQs have {subs}"
                )));
            }
        }
        for (what, off) in [
            ("RQ doorbell", resp.rq_db_offset),
            ("SQ doorbell", resp.sq_db_offset),
        ] {
            if off as usize > self.page - 4 || off % 4 != 0 {
                return Err(proto(format!("{what} offset {off:#x} outside its page")));
            }
        }
        let rq_bytes = cmd.rq_ring_size as usize;
        if (resp.rq_mmap_size as usize) < rq_bytes {
            return Err(proto(format!(
                "RQ ring of {} bytes, {rq_bytes} needed",
                resp.rq_mmap_size
            )));
        }
        let desc_off = resp.llq_desc_offset as usize;
        if desc_off % TX_WQE != 0 || desc_off >= self.page {
            return Err(proto(format!(
                "LLQ descriptor offset {desc_off:#x} not a 64-byte slot of the first page"
            )));
        }
        let sq_bytes = cmd.sq_ring_size as usize;
        let llq_len = (sq_bytes + desc_off).div_ceil(self.page) * self.page;
        let what = |w: &str| format!("EFA QP {:#x} {w}", created.qp_num);
        let rq_ring = self.mem.map(
            cmd_fd,
            resp.rq_mmap_key,
            resp.rq_mmap_size as usize,
            MapAccess::ReadWrite,
            &what("RQ ring"),
        )?;
        let rq_db = self.mem.map(
            cmd_fd,
            resp.rq_db_mmap_key,
            self.page,
            MapAccess::WriteOnly,
            &what("RQ doorbell"),
        )?;
        let sq_db = self.mem.map(
            cmd_fd,
            resp.sq_db_mmap_key,
            self.page,
            MapAccess::WriteOnly,
            &what("SQ doorbell"),
        )?;
        let llq = self.mem.map(
            cmd_fd,
            resp.llq_desc_mmap_key,
            llq_len,
            MapAccess::WriteOnly,
            &what("LLQ window"),
        )?;
        let i = &self.info;
        let mut max_batch = if i.max_tx_batch != 0 {
            u32::from(i.max_tx_batch) * 64 / TX_WQE as u32
        } else {
            u32::from(u16::MAX)
        };
        if i.min_sq_wr != 0 {
            max_batch = max_batch.min(s.sq_wqes - 1);
        }
        let sq_wq = Arc::new(WqLock::new(Wq::new(s.sq_wqes)));
        let rq_wq = Arc::new(WqLock::new(Wq::new(s.rq_wqes)));
        // libefa copies inline data into the descriptor's 32 bytes and SGEs into its two
        // buffer descriptors: never more, whatever the kernel echoes.
        let max_inline = created.caps.max_inline_data.min(32);
        let sq = Sq::new(
            sq_wq.clone(),
            llq,
            desc_off,
            sq_db,
            resp.sq_db_offset as usize,
            s.sq_wqes,
            req.caps.max_send_sge.min(TX_DESC_NUM_BUFS),
            max_inline,
            max_batch.max(1),
            req.qp_type == QP_TYPE_DRIVER && self.reads(),
        );
        let rq = Rq::new(
            rq_wq.clone(),
            rq_ring,
            rq_db,
            resp.rq_db_offset as usize,
            s.rq_descs,
            s.rq_wqes,
            req.caps.max_recv_sge,
        );
        let caps = QpCaps {
            max_send_wr: s.sq_wqes,
            max_recv_wr: s.rq_wqes,
            max_send_sge: created.caps.max_send_sge,
            max_recv_sge: created.caps.max_recv_sge,
            max_inline_data: created.caps.max_inline_data,
        };
        self.qps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(created.qp_num, (sq_wq, rq_wq));
        Ok(Box::new(EfaQp::new(
            created.qp_num,
            req.sq_sig_all,
            sq,
            rq,
            caps,
            self.qps.clone(),
        )))
    }

    unsafe fn create_srq(
        &self,
        _cmd_fd: BorrowedFd<'_>,
        _max_wr: u32,
        _max_sge: u32,
        _create: &mut CreateFn<'_, SrqCreated>,
    ) -> io::Result<Box<dyn SrqOps>> {
        Err(Error::unsupported("create SRQ on efa", "EFA has no SRQs").into())
    }

    unsafe fn create_ah(&self, _attr: &AhAttr, create: &mut CreateFn<'_, u32>) -> io::Result<u32> {
        let mut resp = efa_ibv_create_ah_resp::default();
        create(&[], resp.as_mut_bytes())?;
        Ok(u32::from(resp.efa_address_handle))
    }
}
