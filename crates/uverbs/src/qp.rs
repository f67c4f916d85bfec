//! Queue pairs: create (RC, UC, UD, a provider's DRIVER type), modify through the state machine, query, post, destroy.

#![allow(unsafe_code)] // unsafe fns: posting hands memory to the device

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use zerocopy::IntoBytes;

use crate::ah::AhAttr;
use crate::context::Context;
use crate::context::{Method, Via};
use crate::cq::Cq;
use crate::driver::{KernelObj, OpsGuard, OpsLock, QpCreated, QpOps, QpRequest};
use crate::error::{Error, Result};
use crate::gid::Gid;
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::ioctl::{UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT};
use crate::kernel::abi::obj::qp;
use crate::kernel::abi::obj::{
    ib_uverbs_attach_mcast, ib_uverbs_create_qp, ib_uverbs_create_qp_resp, ib_uverbs_destroy_qp,
};
use crate::kernel::abi::obj::{
    ib_uverbs_destroy_qp_resp, ib_uverbs_modify_qp, ib_uverbs_qp_cap, ib_uverbs_qp_dest,
    ib_uverbs_query_qp, ib_uverbs_query_qp_resp, IB_UVERBS_QP_CREATE_SQ_SIG_ALL,
};
use crate::kernel::write;
use crate::ledger::{Fence, Freed, QpLedger, Role, Ticket};
use crate::mr::AccessFlags;
use crate::op::{DeviceCapsEx, OpSet};
use crate::pd::region::{Deferred, Region};
use crate::pd::Pd;
use crate::port::Mtu;
use crate::srq::Srq;
use zerocopy::FromBytes;

mod attr;
mod post;
pub use attr::{QpAttr, QpInfo, QpInit};
internal! {
    pub use attr::required_for;
}

pub use crate::values::{QpCaps, QpState, QpType};

// The attribute mask is the kernel's: `QpAttr::mask` derives it from the fields set, so it is
// for the crates of this workspace (the C drop-in's `ibv_modify_qp`), not for users.
mod mask {
    use bitflags::bitflags;

    bitflags! {
        /// `ib_qp_attr_mask` (`IBV_QP_*`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
        pub struct QpAttrMask: u32 {
            /// Sets `qp_state`.
            const STATE = 1 << 0;
            /// Sets `cur_qp_state`.
            const CUR_STATE = 1 << 1;
            /// Sets `en_sqd_async_notify`.
            const EN_SQD_ASYNC_NOTIFY = 1 << 2;
            /// Sets `qp_access_flags`.
            const ACCESS_FLAGS = 1 << 3;
            /// Sets `pkey_index`.
            const PKEY_INDEX = 1 << 4;
            /// Sets `port_num`.
            const PORT = 1 << 5;
            /// Sets `qkey`.
            const QKEY = 1 << 6;
            /// Sets `ah_attr` (the primary path's address vector).
            const AV = 1 << 7;
            /// Sets `path_mtu`.
            const PATH_MTU = 1 << 8;
            /// Sets `timeout`.
            const TIMEOUT = 1 << 9;
            /// Sets `retry_cnt`.
            const RETRY_CNT = 1 << 10;
            /// Sets `rnr_retry`.
            const RNR_RETRY = 1 << 11;
            /// Sets `rq_psn`.
            const RQ_PSN = 1 << 12;
            /// Sets `max_rd_atomic`.
            const MAX_QP_RD_ATOMIC = 1 << 13;
            /// Sets The alternate path (`alt_ah_attr`, `alt_pkey_index`, …).
            const ALT_PATH = 1 << 14;
            /// Sets `min_rnr_timer`.
            const MIN_RNR_TIMER = 1 << 15;
            /// Sets `sq_psn`.
            const SQ_PSN = 1 << 16;
            /// Sets `max_dest_rd_atomic`.
            const MAX_DEST_RD_ATOMIC = 1 << 17;
            /// Sets `path_mig_state`.
            const PATH_MIG_STATE = 1 << 18;
            /// Sets `cap` (queue capacities).
            const CAP = 1 << 19;
            /// Sets `dest_qp_num`.
            const DEST_QPN = 1 << 20;
            /// Not sent by rverbs' modify; the rdma_cm's INIT_QP_ATTR may report it.
            const RATE_LIMIT = 1 << 25;
        }
    }
}
internal! {
    pub use mask::QpAttrMask;
}

/// A queue pair. Keeps its PD, CQs and SRQ alive; destroyed (then its rings unmapped) on drop.
///
/// # Soundness
///
/// Its send and receive rings (shared with the kernel or device) are written only by the
/// provider under the QP's lock, one producer at a time, and published with Release before the
/// doorbell. The safe posts take SGEs made from live [`Mr`](crate::mr::Mr)s ([`MrSge`](crate::wr::MrSge)),
/// so the device can reach nothing but registered memory of this PD, and INLINE payloads are
/// read with the one copy rule of the kernel layer (`kernel::shared`); hand-made SGEs need the `unsafe`
/// [`Qp::post_send_raw`] / [`Qp::post_recv_raw`] (docs/architecture.md, "Posting").
pub struct Qp {
    // Drop order: `Drop::drop` destroys the kernel object first; the fields then drop in
    // declaration order: the provider's data path (`ops`: rings unmapped, registrations
    // removed) before the parents it was created under (the `Arc`s after it).
    ops: OpsLock<Box<dyn QpOps>>,
    pd: Arc<Pd>,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    srq: Option<Arc<Srq>>,
    qp_type: QpType,
    /// The operations a post may carry: the transport's and the provider's
    /// ([`SendCaps::allowed`](crate::op::SendCaps::allowed)).
    send_ops: OpSet,
    driver_name: &'static str,
    handle: u32,
    qp_num: u32,
    caps: QpCaps,
    sq_sig_all: bool,
    user_handle: u64,
    state: AtomicU8,
    /// The multicast groups (GID, LID) the QP is attached to, held across each attach and
    /// detach command so that it matches the kernel's list: the kernel refuses (EBUSY) to
    /// destroy a QP that is still attached, so drop detaches these first.
    mcast: Mutex<Vec<(Gid, u16)>>,
    /// What the posted requests may still write, released as their completions are polled on
    /// the CQs (which watch it) and when the QP is destroyed ([`crate::ledger`]).
    ledger: Arc<QpLedger<Region>>,
    /// On siw and rxe, this QP's number in its PD's [`Fence`](crate::ledger::Fence): memory of
    /// remote regions deregistered while it lives waits for its destroy.
    fence_seq: Option<u64>,
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("device", &self.pd.context().name())
            .field("type", &self.qp_type)
            .field("qp_num", &format_args!("{:#x}", self.qp_num))
            .field("state", &self.cached_state())
            .field("caps", &self.caps)
            .finish()
    }
}

impl Qp {
    /// Creates a QP on `pd`.
    pub fn create(pd: &Arc<Pd>, init: QpInit) -> Result<Arc<Qp>> {
        let ctx = pd.context();
        let op = || format!("create {} QP on {}", init.qp_type, ctx.name());
        for (what, cq) in [("send CQ", &init.send_cq), ("recv CQ", &init.recv_cq)] {
            if !Arc::ptr_eq(cq.context(), ctx) {
                return Err(
                    Error::invalid(op(), format!("{what} belongs to another context")).into(),
                );
            }
        }
        // Kernel handles are per context: another context's SRQ handle would name whatever
        // SRQ of this context has that number, and the ledger would be the wrong SRQ's.
        if let Some(srq) = &init.srq {
            if !Arc::ptr_eq(srq.pd().context(), ctx) {
                return Err(Error::invalid(op(), "the SRQ belongs to another context").into());
            }
        }
        if let Some(limits) = ctx.cached_limits() {
            let c = &init.caps;
            for (name, v, max) in [
                ("max_send_wr", c.max_send_wr, limits.max_qp_wr),
                ("max_recv_wr", c.max_recv_wr, limits.max_qp_wr),
                ("max_send_sge", c.max_send_sge, limits.max_sge),
                ("max_recv_sge", c.max_recv_sge, limits.max_sge),
            ] {
                if v > max {
                    return Err(Error::invalid(
                        op(),
                        format!("{name} {v} exceeds the device limit {max}"),
                    )
                    .into());
                }
            }
        }
        if init.srq.is_some() && init.caps.max_recv_wr != 0 {
            return Err(Error::invalid(op(), "a QP with an SRQ takes max_recv_wr 0").into());
        }
        let driver = ctx.driver()?;
        if init.qp_type == QpType::DRIVER && driver.driver_qp().is_none() {
            return Err(Error::unsupported(
                op(),
                format!(
                    "the {} provider has no QP type of its own (IBV_QPT_DRIVER: EFA's SRD)",
                    driver.name()
                ),
            )
            .into());
        }
        // FLUSH and ATOMIC_WRITE also need the device's capability bits (crate::op).
        let send_ops = OpSet::for_transport(init.qp_type)
            .intersection(encoded(driver, init.qp_type))
            .on_device(
                ctx.cached_limits()
                    .map_or(DeviceCapsEx(0), |l| l.device_cap_flags_ex),
            );
        let driver_name = driver.name();
        let user_handle = crate::util::next_user_handle();
        let req = QpRequest {
            qp_type: init.qp_type,
            caps: init.caps,
            sq_sig_all: init.sq_sig_all,
            has_srq: init.srq.is_some(),
            srq_handle: init.srq.as_ref().map(|s| s.handle()),
        };
        let k = driver.qp_caps_for_kernel(&req)?;
        let cap = ib_uverbs_qp_cap {
            max_send_wr: k.max_send_wr,
            max_recv_wr: k.max_recv_wr,
            max_send_sge: k.max_send_sge,
            max_recv_sge: k.max_recv_sge,
            max_inline_data: k.max_inline_data,
        };
        let flags: u32 = if init.sq_sig_all {
            IB_UVERBS_QP_CREATE_SQ_SIG_ALL
        } else {
            0
        };
        // Numbered before the kernel QP exists, so that no deregistration can miss it; undone
        // (the kernel QP destroyed, the number given back) on an error or a panic before the
        // `Qp` exists.
        let mut unborn = Unborn {
            pd,
            ticket: pd.fence().map(Fence::ticket),
            created: None,
        };
        let created = &mut unborn.created;
        // SAFETY: the fd is this context's command fd, the driver is the one
        // attached to it, and the callback issues CREATE_QP on that fd with the driver's data
        // and returns the kernel's answer unaltered (the create contract).
        let res = unsafe {
            driver.create_qp(ctx.cmd_fd(), &req, &mut |uhw_in, uhw_out| {
                // The granted caps, the QP number and the driver's output.
                let mut out = (ib_uverbs_qp_cap::default(), 0u32, uhw_out);
                let via = ctx.ioctl_or_write(
                    Method::CreateQp,
                    &mut out,
                    |c, (resp_cap, qpn, uhw_out)| {
                        let h = c.idr_new(qp::ATTR_CREATE_HANDLE);
                        c.idr(qp::ATTR_CREATE_PD_HANDLE, pd.handle());
                        c.idr(qp::ATTR_CREATE_SEND_CQ_HANDLE, init.send_cq.handle());
                        c.idr(qp::ATTR_CREATE_RECV_CQ_HANDLE, init.recv_cq.handle());
                        if let Some(srq) = &init.srq {
                            c.idr(qp::ATTR_CREATE_SRQ_HANDLE, srq.handle());
                        }
                        c.ptr_in(qp::ATTR_CREATE_USER_HANDLE, &user_handle);
                        c.ptr_in(qp::ATTR_CREATE_CAP, &cap);
                        c.const_in(qp::ATTR_CREATE_TYPE, u64::from(init.qp_type.0));
                        c.ptr_in(qp::ATTR_CREATE_FLAGS, &flags);
                        c.fd(qp::ATTR_CREATE_EVENT_FD, ctx.async_fd());
                        c.optional();
                        c.ptr_out(qp::ATTR_CREATE_RESP_CAP, resp_cap);
                        c.ptr_out(qp::ATTR_CREATE_RESP_QP_NUM, qpn);
                        if !uhw_in.is_empty() {
                            c.ptr_in_bytes(UVERBS_ATTR_UHW_IN, uhw_in);
                        }
                        if !uhw_out.is_empty() {
                            c.ptr_out_bytes(UVERBS_ATTR_UHW_OUT, uhw_out);
                        }
                        h
                    },
                    |(_, _, uhw_out)| {
                        let req = ib_uverbs_create_qp {
                            user_handle,
                            pd_handle: pd.handle(),
                            send_cq_handle: init.send_cq.handle(),
                            recv_cq_handle: init.recv_cq.handle(),
                            srq_handle: init.srq.as_ref().map_or(0, |s| s.handle()),
                            max_send_wr: cap.max_send_wr,
                            max_recv_wr: cap.max_recv_wr,
                            max_send_sge: cap.max_send_sge,
                            max_recv_sge: cap.max_recv_sge,
                            max_inline_data: cap.max_inline_data,
                            sq_sig_all: u8::from(init.sq_sig_all),
                            qp_type: init.qp_type.0,
                            is_srq: u8::from(init.srq.is_some()),
                            ..Default::default()
                        };
                        create_qp_write(ctx, req, uhw_in, uhw_out)
                    },
                );
                let r = via.map(|via| match via {
                    Via::Ioctl(a, h) => {
                        let (resp_cap, qpn, _) = &out;
                        QpCreated {
                            handle: a.handle(h),
                            qp_num: *qpn,
                            caps: QpCaps {
                                max_send_wr: resp_cap.max_send_wr,
                                max_recv_wr: resp_cap.max_recv_wr,
                                max_send_sge: resp_cap.max_send_sge,
                                max_recv_sge: resp_cap.max_recv_sge,
                                max_inline_data: resp_cap.max_inline_data,
                            },
                        }
                    }
                    Via::Write(created) => created,
                });
                let r = r.map_err(|e| {
                    Error::os(op(), e).with_detail(format!(
                        "caps send_wr {} recv_wr {} send_sge {} recv_sge {} inline {}",
                        cap.max_send_wr,
                        cap.max_recv_wr,
                        cap.max_send_sge,
                        cap.max_recv_sge,
                        cap.max_inline_data
                    ))
                })?;
                *created = Some(r);
                Ok(r)
            })
        };
        match res {
            Ok(ops) => {
                let k = unborn
                    .created
                    .expect("provider built a QP without creating it");
                let caps = ops.caps().unwrap_or(k.caps);
                tracing::debug!(device = ctx.name(), qpn = k.qp_num, "QP created");
                // Receives completing in any order are held as an SRQ's are.
                let unordered =
                    (init.srq.is_none() && !driver.recv_completes_in_order()).then(|| {
                        Arc::new(crate::ledger::LedgerLock::new(
                            crate::ledger::RecvLedger::shared(),
                        ))
                    });
                let ledger = Arc::new(QpLedger::new(
                    k.qp_num,
                    init.srq.as_ref().map(|s| s.ledger()).or(unordered.as_ref()),
                    // siw alone reads a source through the reference it took when the
                    // request started: sources are held too (ledger::SendLedger).
                    ctx.driver_id() == crate::device::DriverId::SIW,
                ));
                if Arc::ptr_eq(&init.send_cq, &init.recv_cq) {
                    init.send_cq.watch().add(&ledger, Role::Both);
                } else {
                    init.send_cq.watch().add(&ledger, Role::Send);
                    init.recv_cq.watch().add(&ledger, Role::Recv);
                }
                let fence_seq = unborn.ticket.take().map(Ticket::keep);
                unborn.created = None;
                Ok(Arc::new(Qp {
                    ledger,
                    fence_seq,
                    pd: pd.clone(),
                    send_cq: init.send_cq,
                    recv_cq: init.recv_cq,
                    srq: init.srq,
                    qp_type: init.qp_type,
                    send_ops,
                    driver_name,
                    handle: k.handle,
                    qp_num: k.qp_num,
                    caps,
                    sq_sig_all: init.sq_sig_all,
                    user_handle,
                    state: AtomicU8::new(QpState::RESET.0),
                    mcast: Mutex::new(Vec::new()),
                    ops: OpsLock::new(ops),
                }))
            }
            // `unborn` destroys the kernel QP if there is one and gives its number back.
            Err(e) => Err(e),
        }
    }

    /// The QP number peers address.
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }
    internal! {
    /// The kernel's handle for this QP.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    }
    /// The transport type the QP was created with.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }
    /// Capacities the kernel granted (≥ asked).
    pub fn caps(&self) -> QpCaps {
        self.caps
    }
    /// Whether every send produces a completion, whatever its SIGNALED flag.
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }
    /// The protection domain the QP belongs to.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }
    /// The CQ send completions go to.
    pub fn send_cq(&self) -> &Arc<Cq> {
        &self.send_cq
    }
    /// The CQ receive completions go to.
    pub fn recv_cq(&self) -> &Arc<Cq> {
        &self.recv_cq
    }
    /// The SRQ the QP takes receives from, if any.
    pub fn srq(&self) -> Option<&Arc<Srq>> {
        self.srq.as_ref()
    }
    /// The value async events carry for this QP.
    pub fn user_handle(&self) -> u64 {
        self.user_handle
    }

    /// The state of the last successful transition made through this handle, cached here: no
    /// system call. The kernel may have moved the QP to ERR/SQE on its own since;
    /// [`Qp::query`] asks the kernel (`query().state`).
    #[inline]
    pub fn cached_state(&self) -> QpState {
        // Relaxed: an advisory cache; modify() and note_iwarp_connected() write it.
        QpState(self.state.load(Ordering::Relaxed))
    }

    internal! {
    /// Records that the rdma_cm has connected this iWARP QP: the iw_cm moved the kernel's QP
    /// to RTS itself (when the connection was accepted or established), so sends are taken
    /// from now on ([`Qp::cached_state`] becomes RTS). No command reaches the kernel: a
    /// MODIFY_QP there would take siw's QP state lock for writing, and a segment the peer's
    /// first message arrives in while it is held is left unread in the socket until the next
    /// one comes (siw's receive upcall only tries the lock), so that message would never be
    /// received; rdma-core's librdmacm sends no modify at that point either.
    ///
    /// Refused for a QP whose device is not iWARP (there only a modify connects a QP). A QP
    /// the iw_cm did not in fact connect takes posts into its ring, and the first doorbell
    /// fails with `ENOTCONN`.
    pub fn note_iwarp_connected(&self) -> Result<()> {
        let ctx = self.pd.context();
        if ctx.device().transport() != crate::device::Transport::IWARP {
            return Err(Error::invalid(
                format!(
                    "note {} QP {:#x} on {} as connected by the rdma_cm",
                    self.qp_type,
                    self.qp_num,
                    ctx.name()
                ),
                "not an iWARP device: a QP reaches RTS by a modify",
            )
            .into());
        }
        self.state.store(QpState::RTS.0, Ordering::Relaxed);
        Ok(())
    }
    }

    /// Modifies the QP. Checks the transition and its required attributes first (the error
    /// names what is missing); the kernel has the final word.
    ///
    /// After the kernel has moved the QP to RESET the provider resets its side, as libmlx5
    /// does: the receive CQ, then the send CQ if it is another one, drop this QP's completions
    /// not yet polled (`CqOps::qp_reset`), each under its own
    /// lock; then the QP's queues start again from empty (`QpOps::reset`) under the QP's
    /// lock. The core never holds two of these locks at once, so this cannot deadlock with
    /// posting (the QP's lock alone) or polling (the CQ's lock alone). A CQ whose provider has
    /// nothing to clean there (rxe: `CqOps::cleans_on_qp_reset` false) is not locked at all;
    /// on mlx5 the reset waits while a [`CqView`](crate::cq::CqView) of one of the QP's CQs
    /// is alive (libmlx5 takes the CQ's lock the same way): drop the view first. Work
    /// requests posted before the reset never complete and are not seen again.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        let ctx = self.pd.context();
        let cur = attr.cur_qp_state.unwrap_or_else(|| self.cached_state());
        let op = || match attr.qp_state {
            Some(next) => format!(
                "modify {} QP {:#x} on {} from {} to {}",
                self.qp_type,
                self.qp_num,
                ctx.name(),
                cur,
                next
            ),
            None => format!(
                "modify {} QP {:#x} on {} (state {})",
                self.qp_type,
                self.qp_num,
                ctx.name(),
                cur
            ),
        };
        let mask = attr.mask();
        // iWARP (siw, irdma, cxgb4): the rdma_cm's iw_cm connects the QP over its LLP and
        // moves it to RTS itself; the InfiniBand table of required attributes does not apply
        // (the rdma_cm's own modifies carry none of them), and a QP cannot be connected by
        // hand: refused here with the rule, before the kernel's bare EINVAL.
        let iwarp = ctx.device().transport() == crate::device::Transport::IWARP;
        if iwarp {
            let by_hand = QpAttrMask::AV
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::SQ_PSN
                | QpAttrMask::PATH_MTU;
            if mask.intersects(by_hand) {
                return Err(Error::unsupported(
                    op(),
                    format!(
                        "{} is an iWARP device: its RC QPs are connected only through the \
                         rdma_cm (which moves them to RTS), not by hand ({:?})",
                        ctx.name(),
                        mask & by_hand
                    ),
                )
                .into());
            }
        } else if let Some(next) = attr.qp_state {
            match required_for(self.qp_type, cur, next) {
                None => {
                    return Err(Error::invalid(op(), "illegal state transition").into());
                }
                Some(req) => {
                    let missing = req - mask;
                    if !missing.is_empty() {
                        return Err(Error::invalid(
                            op(),
                            format!("missing attributes {missing:?}"),
                        )
                        .into());
                    }
                }
            }
        }
        let cmd = attr.to_modify(self.handle);
        write::cmd_legacy(ctx.cmd_fd(), nr::MODIFY_QP, cmd.as_bytes(), &[], &mut []).map_err(
            |e| {
                let hint = if iwarp && attr.qp_state == Some(QpState::RTS) {
                    "; an iWARP QP reaches RTS only when the rdma_cm connects it"
                } else {
                    ""
                };
                Error::os(op(), e).with_detail(format!("mask {mask:?}{hint}"))
            },
        )?;
        if let Some(next) = attr.qp_state {
            self.state.store(next.0, Ordering::Relaxed);
            if next == QpState::RESET {
                self.provider_reset();
            }
        }
        Ok(())
    }

    /// The provider's side of a modify to RESET (see [`Qp::modify`]): the CQs, each under its
    /// own lock, then the QP under its lock; never two locks at once.
    fn provider_reset(&self) {
        self.recv_cq.qp_reset(self.qp_num, true);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.send_cq.qp_reset(self.qp_num, false);
        }
        self.lock().reset();
    }

    /// Queries the QP's attributes from the kernel (and refreshes [`Qp::cached_state`]).
    ///
    /// A QP reaches RESET only by a modify, never by the kernel's own doing; so an answer of
    /// RESET for a QP this handle moved out of RESET means the driver does not report the
    /// state (siw of Linux 6.1 leaves it zero): then `state` is the cached one, and the
    /// cache keeps it.
    pub fn query(&self) -> Result<QpInfo> {
        let ctx = self.pd.context();
        let req = ib_uverbs_query_qp {
            response: 0,
            qp_handle: self.handle,
            attr_mask: u32::MAX >> 7,
        };
        let mut r = ib_uverbs_query_qp_resp::default();
        write::cmd_legacy_simple(ctx.cmd_fd(), nr::QUERY_QP, &req, &mut r)
            .map_err(|e| Error::os(format!("query QP {:#x} on {}", self.qp_num, ctx.name()), e))?;
        let state = queried_state(self.cached_state(), QpState(r.qp_state));
        self.state.store(state.0, Ordering::Relaxed);
        Ok(QpInfo {
            state,
            cur_state: QpState(r.cur_qp_state),
            path_mtu: Mtu(r.path_mtu),
            qkey: r.qkey,
            rq_psn: r.rq_psn,
            sq_psn: r.sq_psn,
            dest_qp_num: r.dest_qp_num,
            access_flags: AccessFlags::from_bits_retain(r.qp_access_flags),
            pkey_index: r.pkey_index,
            port_num: r.port_num,
            timeout: r.timeout,
            retry_cnt: r.retry_cnt,
            rnr_retry: r.rnr_retry,
            min_rnr_timer: r.min_rnr_timer,
            max_rd_atomic: r.max_rd_atomic,
            max_dest_rd_atomic: r.max_dest_rd_atomic,
            sq_draining: r.sq_draining != 0,
            sq_sig_all: r.sq_sig_all != 0,
            ah_attr: AhAttr::from_qp_dest(&r.dest),
            caps: QpCaps {
                max_send_wr: r.max_send_wr,
                max_recv_wr: r.max_recv_wr,
                max_send_sge: r.max_send_sge,
                max_recv_sge: r.max_recv_sge,
                max_inline_data: r.max_inline_data,
            },
        })
    }

    /// Attaches this UD QP to the multicast group `gid` (`ATTACH_MCAST`): datagrams sent to
    /// the group are then delivered to its receive queue. `lid` is the group's multicast LID
    /// on InfiniBand, 0 on RoCE (rdma_cm's MULTICAST_JOIN event gives both:
    /// `ah_attr.grh.dgid` and `ah_attr.dlid`).
    ///
    /// Refused before the kernel is asked: a GID that is not multicast ([`Gid::is_multicast`]:
    /// `ff00::/8` or an IPv4-mapped multicast address) and a QP
    /// that is not UD. Attaching twice to the same group is not an error (the kernel keeps one
    /// attachment).
    ///
    /// Dropping the QP detaches it from every group it is still attached to, then destroys
    /// it: the kernel refuses to destroy an attached QP (EBUSY; rdma-core's `ibv_destroy_qp`
    /// then fails and the caller must detach first), and detaches by itself only when the
    /// whole context is closed.
    pub fn attach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast("attach", nr::ATTACH_MCAST, gid, lid)
    }

    /// Detaches this QP from the multicast group `gid` / `lid` (`DETACH_MCAST`). The kernel
    /// refuses (EINVAL) a group the QP is not attached to.
    pub fn detach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast("detach", nr::DETACH_MCAST, gid, lid)
    }

    fn mcast(&self, what: &str, command: u32, gid: &Gid, lid: u16) -> Result<()> {
        let ctx = self.pd.context();
        let op = || {
            format!(
                "{what} {} QP {:#x} on {} to multicast group {gid} (LID {lid:#x})",
                self.qp_type,
                self.qp_num,
                ctx.name()
            )
        };
        if !gid.is_multicast() {
            return Err(Error::invalid(
                op(),
                "the GID is not a multicast GID (ff00::/8 or IPv4-mapped 224.0.0.0/4)",
            )
            .into());
        }
        if self.qp_type != QpType::UD {
            return Err(Error::invalid(op(), "only UD QPs can join multicast groups").into());
        }
        let mut groups = self.mcast.lock().unwrap_or_else(|p| p.into_inner());
        mcast_cmd(ctx, command, self.handle, gid, lid).map_err(|e| -> std::io::Error {
            let err = Error::os(op(), e);
            if command == nr::DETACH_MCAST && e == rustix::io::Errno::INVAL {
                err.with_detail("the QP is not attached to this group")
                    .into()
            } else {
                err.into()
            }
        })?;
        let at = groups.iter().position(|g| *g == (*gid, lid));
        match (command, at) {
            (nr::ATTACH_MCAST, None) => groups.push((*gid, lid)),
            (nr::DETACH_MCAST, Some(i)) => {
                groups.swap_remove(i);
            }
            _ => {}
        }
        Ok(())
    }

    internal! {
    /// The multicast groups (GID, LID) this QP is attached to through
    /// [`Qp::attach_mcast`].
    pub fn mcast_groups(&self) -> Vec<(Gid, u16)> {
        self.mcast.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    }

    #[inline]
    fn lock(&self) -> OpsGuard<'_, Box<dyn QpOps>> {
        self.ops.lock()
    }

    #[inline]
    fn kobj(&self) -> KernelObj<'_> {
        KernelObj {
            fd: self.pd.context().cmd_fd(),
            handle: self.handle,
        }
    }
}

/// The legacy write `CREATE_QP`, for kernels without the ioctl method: driver data follows
/// the core request and the 32-byte core response.
fn create_qp_write(
    ctx: &Context,
    req: ib_uverbs_create_qp,
    uhw_in: &[u8],
    uhw_out: &mut [u8],
) -> std::result::Result<QpCreated, rustix::io::Errno> {
    let core = size_of::<ib_uverbs_create_qp_resp>();
    let mut resp = vec![0u8; core + uhw_out.len()];
    write::cmd_legacy(
        ctx.cmd_fd(),
        nr::CREATE_QP,
        req.as_bytes(),
        uhw_in,
        &mut resp,
    )?;
    let (head, drv) = resp.split_at(core);
    let r = ib_uverbs_create_qp_resp::read_from_bytes(head).expect("sized above");
    uhw_out.copy_from_slice(drv);
    Ok(QpCreated {
        handle: r.qp_handle,
        qp_num: r.qpn,
        caps: QpCaps {
            max_send_wr: r.max_send_wr,
            max_recv_wr: r.max_recv_wr,
            max_send_sge: r.max_send_sge,
            max_recv_sge: r.max_recv_sge,
            max_inline_data: r.max_inline_data,
        },
    })
}

/// Sends `ATTACH_MCAST` or `DETACH_MCAST` (same request layout, no response).
fn mcast_cmd(
    ctx: &Context,
    command: u32,
    qp_handle: u32,
    gid: &Gid,
    lid: u16,
) -> std::result::Result<(), rustix::io::Errno> {
    let req = ib_uverbs_attach_mcast {
        gid: gid.0,
        qp_handle,
        mlid: lid,
        reserved: 0,
    };
    write::cmd_legacy(ctx.cmd_fd(), command, req.as_bytes(), &[], &mut [])
}

/// What [`Qp::create`] has made before its `Qp` exists, undone when it is dropped: on an
/// error, and on a panic in the provider or in the create itself (issue 31 (g): a fence number
/// left live would hold every remote region of the PD deregistered later).
struct Unborn<'a> {
    pd: &'a Pd,
    ticket: Option<Ticket<'a, Deferred>>,
    /// The kernel QP, once CREATE_QP succeeded.
    created: Option<QpCreated>,
}

impl Drop for Unborn<'_> {
    fn drop(&mut self) {
        let gone = self
            .created
            .map_or(true, |k| destroy_kernel_qp(self.pd, k.handle).is_ok());
        if let Some(t) = self.ticket.take() {
            if gone {
                drop(t);
            } else {
                // A kernel QP that could not be destroyed keeps its number: what waits for it
                // stays allocated.
                t.stuck();
            }
        }
    }
}

/// What `driver` encodes on a `qp_type` QP: its [`SendCaps`](crate::op::SendCaps) row, or for
/// [`QpType::DRIVER`] its own QP type's operations ([`Driver::driver_qp`](crate::driver::Driver::driver_qp)).
fn encoded(driver: &dyn crate::driver::Driver, qp_type: QpType) -> OpSet {
    if qp_type == QpType::DRIVER {
        driver.driver_qp().map_or(OpSet::EMPTY, |t| t.ops)
    } else {
        driver.send_caps().for_type(qp_type)
    }
}

fn destroy_kernel_qp(pd: &Pd, handle: u32) -> Result<u32> {
    let ctx = pd.context();
    let mut resp = ib_uverbs_destroy_qp_resp::default();
    let r = ctx.ioctl_or_write(
        Method::DestroyQp,
        &mut resp,
        |c, resp| {
            c.idr(qp::ATTR_DESTROY_HANDLE, handle);
            c.ptr_out(qp::ATTR_DESTROY_RESP, resp);
        },
        |resp| {
            let req = ib_uverbs_destroy_qp {
                qp_handle: handle,
                ..Default::default()
            };
            write::cmd_legacy_simple(ctx.cmd_fd(), nr::DESTROY_QP, &req, resp)
        },
    );
    r.map_err(|e| Error::os(format!("destroy QP handle {handle} on {}", ctx.name()), e))?;
    Ok(resp.events_reported)
}

impl Drop for Qp {
    fn drop(&mut self) {
        // The kernel refuses to destroy a QP that is still attached to a group.
        let groups = std::mem::take(self.mcast.get_mut().unwrap_or_else(|p| p.into_inner()));
        for (gid, lid) in groups {
            if let Err(e) = mcast_cmd(self.pd.context(), nr::DETACH_MCAST, self.handle, &gid, lid) {
                tracing::error!(
                    "detach QP {:#x} from multicast group {gid} before destroying it: {e}",
                    self.qp_num
                );
            }
        }
        // The provider's QP table lock (mlx5, as libmlx5's `qp_table_mutex`) from the
        // kernel's destroy until the CQs are clean: a QP the kernel gives this number from
        // now on is not known to the pollers, nor can it post, before then
        // (`Driver::qp_table_lock`, where the lock order is).
        let driver = self.pd.context().driver().ok();
        let table = driver.and_then(|d| d.qp_table_lock());
        match destroy_kernel_qp(&self.pd, self.handle) {
            // Destroyed: the device places nothing more for this QP, so what its requests may
            // have written can be given back (the ledger goes with the last of its `Arc`s).
            Ok(_) => {
                // What the cleans and the retires let go of, dropped after the CQs' and the
                // QP table's locks (crate::ledger::Freed).
                let freed = std::cell::RefCell::new(Freed::default());
                // The provider drops its completions still in the CQs where the library
                // does (mlx5, as libmlx5 `mlx5_destroy_qp`): receive CQ first. A dropped
                // receive of the SRQ is over (the device wrote its completion), so the SRQ
                // lets go of what it held under its `wr_id`. No lock of this QP is taken:
                // it is being dropped, no one else holds it.
                let ops: &dyn QpOps = &**self.ops.get_mut();
                let srq = self.srq.is_some().then(|| self.ledger.recv.clone());
                let srq_done = |wr_id: u64| {
                    if let Some(l) = &srq {
                        crate::ledger::lock(l).completed(wr_id, &mut freed.borrow_mut());
                    }
                };
                let (qp_num, two) = (self.qp_num, !Arc::ptr_eq(&self.send_cq, &self.recv_cq));
                let (send_cq, recv_cq, ledger) = (&self.send_cq, &self.recv_cq, &self.ledger);
                let mut table = table;
                let fence = self.pd.fence().zip(self.fence_seq);
                // Each step runs, also when one before it panicked (a provider's clean): a
                // skipped tombstone would let a new QP with this number be settled by this
                // QP's completions, a skipped fence step would keep the PD's deregistered
                // remote memory until the PD goes.
                each_step(&mut [
                    &mut || {
                        let mut done = srq_done;
                        recv_cq.qp_destroyed(ops, qp_num, true, &mut done);
                    },
                    &mut || {
                        let mut done = srq_done;
                        if two {
                            send_cq.qp_destroyed(ops, qp_num, false, &mut done);
                        }
                    },
                    // Its completions still in the CQs count for no one, nor for a new QP
                    // that gets its number, until they are out (crate::ledger::Watch).
                    &mut || send_cq.watch().retire(ledger, &mut freed.borrow_mut()),
                    &mut || {
                        if two {
                            recv_cq.watch().retire(ledger, &mut freed.borrow_mut());
                        }
                    },
                    &mut || drop(table.take()),
                    // siw and rxe place nothing more for it (siw: state_lock; rxe:
                    // rxe_cleanup_task): memory of remote regions deregistered while it lived
                    // is freed once no older QP of the PD is left (crate::ledger::Fence).
                    &mut || {
                        if let Some((f, n)) = fence {
                            drop(f.qp_destroyed(n));
                        }
                    },
                ]);
                drop(freed);
            }
            Err(e) => {
                tracing::error!("{e}; the memory its requests may still write stays allocated");
                std::mem::forget(self.ledger.clone());
            }
        }
        // Then the fields drop in declaration order: the rings unmap (`ops`, first), then
        // the PD, CQs and SRQ are released (the `Arc`s after it).
    }
}

/// Runs each of `steps` in order, each also when one before it panicked, then resumes the
/// first panic: `Qp::drop`'s teardown, where a panic in one step (a provider's CQ clean) must
/// not skip the others (the other CQ's clean, the tombstones, the QP table's unlock, the
/// fence). A panic while the thread is already unwinding aborts, as in any drop.
fn each_step(steps: &mut [&mut dyn FnMut()]) {
    let mut first = None;
    for step in steps.iter_mut() {
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut **step)) {
            first.get_or_insert(p);
        }
    }
    if let Some(p) = first {
        std::panic::resume_unwind(p);
    }
}

/// The state [`Qp::query`] reports and caches: the kernel's answer, unless that is RESET for
/// a QP last moved (by this handle) to another state — the kernel never moves a QP to RESET by
/// itself, so such an answer is a driver that leaves the field zero (siw of Linux 6.1).
fn queried_state(cached: QpState, reported: QpState) -> QpState {
    if reported == QpState::RESET {
        cached
    } else {
        reported
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review of issue 31: `Qp::drop`'s teardown runs every step when one panics (a
    /// provider's CQ clean), in order, and then passes the first panic on.
    #[test]
    fn a_panicking_teardown_step_does_not_skip_the_others() {
        let ran = std::cell::RefCell::new(Vec::new());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            each_step(&mut [
                &mut || {
                    ran.borrow_mut().push(1);
                    panic!("the receive CQ's clean");
                },
                &mut || ran.borrow_mut().push(2),
                &mut || {
                    ran.borrow_mut().push(3);
                    panic!("a second");
                },
                &mut || ran.borrow_mut().push(4),
            ]);
        }));
        assert_eq!(*ran.borrow(), [1, 2, 3, 4], "every step ran, in order");
        let p = r.expect_err("the panic is passed on");
        assert_eq!(p.downcast_ref::<&str>(), Some(&"the receive CQ's clean"));
        // No panic: each step once, nothing raised.
        let n = std::cell::Cell::new(0);
        each_step(&mut [&mut || n.set(n.get() + 1), &mut || n.set(n.get() + 1)]);
        assert_eq!(n.get(), 2);
    }

    #[test]
    fn mask_follows_fields() {
        let a = QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(1),
            access_flags: Some(AccessFlags::LOCAL_WRITE),
            ..Default::default()
        };
        assert_eq!(
            a.mask(),
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS
        );
        let m = a.to_modify(7);
        assert_eq!(
            (m.qp_handle, m.qp_state, m.port_num, m.qp_access_flags),
            (7, 1, 1, 1)
        );
        assert_eq!(m.attr_mask, a.mask().bits());
    }

    #[test]
    fn a_query_answering_reset_keeps_the_cached_state() {
        // siw of Linux 6.1 answers 0 (RESET) for a QP in RTS: the cache is not lost.
        assert_eq!(queried_state(QpState::RTS, QpState::RESET), QpState::RTS);
        assert_eq!(queried_state(QpState::INIT, QpState::RESET), QpState::INIT);
        assert_eq!(
            queried_state(QpState::RESET, QpState::RESET),
            QpState::RESET
        );
        // Any other answer is the kernel's word (e.g. ERR after a failure it saw).
        assert_eq!(queried_state(QpState::RTS, QpState::ERR), QpState::ERR);
        assert_eq!(queried_state(QpState::RTS, QpState::SQE), QpState::SQE);
        assert_eq!(queried_state(QpState::INIT, QpState::RTS), QpState::RTS);
    }

    #[test]
    fn transitions() {
        assert!(required_for(QpType::RC, QpState::RESET, QpState::RTS).is_none());
        assert!(required_for(QpType::RC, QpState::INIT, QpState::RTS).is_none());
        let r = required_for(QpType::RC, QpState::INIT, QpState::RTR).unwrap();
        assert!(r.contains(QpAttrMask::AV | QpAttrMask::DEST_QPN));
        let r = required_for(QpType::UD, QpState::RESET, QpState::INIT).unwrap();
        assert!(r.contains(QpAttrMask::QKEY));
        assert_eq!(
            required_for(QpType::UD, QpState::INIT, QpState::RTR).unwrap(),
            QpAttrMask::empty()
        );
        assert!(required_for(QpType::RC, QpState::RTS, QpState::ERR).is_some());
    }

    #[test]
    fn mtu_bytes() {
        assert_eq!(Mtu::MTU_1024.bytes(), Some(1024));
        assert_eq!(Mtu::from_bytes(4096), Some(Mtu::MTU_4096));
        assert_eq!(Mtu(9).bytes(), None);
    }
}
