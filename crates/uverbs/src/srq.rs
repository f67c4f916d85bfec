//! Shared receive queues.

#![allow(unsafe_code)] // unsafe fns: posting hands memory to the device

use std::fmt;
use std::sync::Arc;

use zerocopy::{FromBytes, IntoBytes};

use crate::context::Method;
use crate::driver::{KernelObj, OpsLock, SrqCreated, SrqOps};
use crate::error::{Error, Result};
use crate::error::{PostError, PostQueue};
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::obj::ib_uverbs_destroy_srq;
use crate::kernel::abi::obj::srq;
use crate::kernel::abi::obj::{
    ib_uverbs_create_srq, ib_uverbs_create_srq_resp, ib_uverbs_destroy_srq_resp,
    ib_uverbs_modify_srq, ib_uverbs_query_srq, ib_uverbs_query_srq_resp,
};
use crate::kernel::write;
use crate::ledger::{LedgerLock, RecvLedger};
use crate::pd::region::Region;
use crate::pd::Pd;
use crate::wr::{MrRecvWr, RecvWr};

/// SRQ attributes (`ibv_srq_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Work requests the SRQ holds.
    pub max_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Limit event threshold: an SRQ_LIMIT_REACHED async event fires when fewer WRs remain.
    pub srq_limit: u32,
}

/// A shared receive queue.
///
/// # Soundness
///
/// Its ring is written only by the provider under the SRQ's lock and published with Release;
/// the safe [`Srq::post_recv`] takes SGEs made from live [`Mr`](crate::mr::Mr)s only, so the
/// device writes nothing but registered memory of this PD (raw SGEs need the `unsafe`
/// [`Srq::post_recv_raw`]). QPs using the SRQ hold it (`Arc`), so its ring outlives them.
pub struct Srq {
    // Drop order: `Drop::drop` destroys the kernel object first; the fields then drop in
    // declaration order: the provider's data path (`ops`: rings unmapped, registrations
    // removed) before the parents it was created under (the `Arc`s after it).
    ops: OpsLock<Box<dyn SrqOps>>,
    pd: Arc<Pd>,
    handle: u32,
    srq_num: u32,
    attr: SrqAttr,
    user_handle: u64,
    /// What the posted receives may still write ([`crate::ledger`]), shared with the ledgers
    /// of the QPs that use the SRQ.
    ledger: Arc<LedgerLock<RecvLedger<Region>>>,
}

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq")
            .field("handle", &self.handle)
            .field("srq_num", &self.srq_num)
            .field("attr", &self.attr)
            .finish()
    }
}

impl Srq {
    /// Creates an SRQ.
    pub fn create(pd: &Arc<Pd>, attr: SrqAttr) -> Result<Arc<Srq>> {
        let ctx = pd.context();
        let op = || {
            format!(
                "create SRQ (max_wr {}, max_sge {}) on {}",
                attr.max_wr,
                attr.max_sge,
                ctx.name()
            )
        };
        if let Some(l) = ctx.cached_limits() {
            if attr.max_wr > l.max_srq_wr || attr.max_sge > l.max_srq_sge {
                return Err(Error::invalid(
                    op(),
                    format!(
                        "device limits are max_srq_wr {} and max_srq_sge {}",
                        l.max_srq_wr, l.max_srq_sge
                    ),
                )
                .into());
            }
        }
        let driver = ctx.driver()?;
        let user_handle = crate::util::next_user_handle();
        let mut created: Option<SrqCreated> = None;
        // SAFETY: the fd is this context's command fd, the driver is the one
        // attached to it, and the callback issues CREATE_SRQ on that fd with the driver's data
        // and returns the kernel's answer unaltered (the create contract).
        let res = unsafe {
            driver.create_srq(ctx.cmd_fd(), attr.max_wr, attr.max_sge, &mut |uin, uout| {
                let req = ib_uverbs_create_srq {
                    response: 0,
                    user_handle,
                    pd_handle: pd.handle(),
                    max_wr: attr.max_wr,
                    max_sge: attr.max_sge,
                    srq_limit: attr.srq_limit,
                };
                let core_len = size_of::<ib_uverbs_create_srq_resp>();
                let mut resp = vec![0u8; core_len + uout.len()];
                write::cmd_legacy(ctx.cmd_fd(), nr::CREATE_SRQ, req.as_bytes(), uin, &mut resp)
                    .map_err(|e| Error::os(op(), e))?;
                let r = ib_uverbs_create_srq_resp::read_from_prefix(&resp)
                    .map(|(r, _)| r)
                    .map_err(|_| Error::protocol(op(), "short response"))?;
                uout.copy_from_slice(&resp[core_len..]);
                let c = SrqCreated {
                    handle: r.srq_handle,
                    max_wr: r.max_wr,
                    max_sge: r.max_sge,
                    srq_num: r.srqn,
                };
                created = Some(c);
                Ok(c)
            })
        };
        match res {
            Ok(ops) => {
                let c = created.expect("provider built an SRQ without creating it");
                Ok(Arc::new(Srq {
                    ledger: Arc::new(LedgerLock::new(RecvLedger::shared())),
                    pd: pd.clone(),
                    handle: c.handle,
                    srq_num: c.srq_num,
                    attr: SrqAttr {
                        max_wr: c.max_wr,
                        max_sge: c.max_sge,
                        srq_limit: attr.srq_limit,
                    },
                    user_handle,
                    ops: OpsLock::new(ops),
                }))
            }
            Err(e) => {
                if let Some(c) = created {
                    let _ = destroy_kernel_srq(pd, c.handle);
                }
                Err(e)
            }
        }
    }

    internal! {
    /// The kernel's handle for this SRQ.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    }
    /// The SRQ number the kernel reported (meaningful for XRC SRQs; may be 0 for others).
    pub fn srq_num(&self) -> u32 {
        self.srq_num
    }
    /// Attributes as created (the kernel's max_wr/max_sge).
    pub fn attr(&self) -> SrqAttr {
        self.attr
    }
    /// The user handle async events about this SRQ carry.
    pub fn user_handle(&self) -> u64 {
        self.user_handle
    }
    /// The protection domain the SRQ belongs to.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// Arms the limit event: `IBV_SRQ_LIMIT`.
    pub fn set_limit(&self, srq_limit: u32) -> Result<()> {
        let ctx = self.pd.context();
        let req = ib_uverbs_modify_srq {
            srq_handle: self.handle,
            attr_mask: 1 << 1,
            max_wr: 0,
            srq_limit,
        };
        let udata = self.ops.lock().modify_udata().to_vec();
        write::cmd_legacy(
            ctx.cmd_fd(),
            nr::MODIFY_SRQ,
            req.as_bytes(),
            &udata,
            &mut [],
        )
        .map_err(|e| {
            Error::os(
                format!(
                    "set SRQ {} limit to {srq_limit} on {}",
                    self.handle,
                    ctx.name()
                ),
                e,
            )
            .into()
        })
    }

    /// Queries the SRQ.
    pub fn query(&self) -> Result<SrqAttr> {
        let ctx = self.pd.context();
        let req = ib_uverbs_query_srq {
            response: 0,
            srq_handle: self.handle,
            reserved: 0,
        };
        let mut r = ib_uverbs_query_srq_resp::default();
        write::cmd_legacy_simple(ctx.cmd_fd(), nr::QUERY_SRQ, &req, &mut r)
            .map_err(|e| Error::os(format!("query SRQ {} on {}", self.handle, ctx.name()), e))?;
        Ok(SrqAttr {
            max_wr: r.max_wr,
            max_sge: r.max_sge,
            srq_limit: r.srq_limit,
        })
    }

    /// Posts receive work requests to the SRQ; safe for the reasons given at
    /// [`Qp::post_send`](crate::qp::Qp::post_send).
    pub fn post_recv(&self, wrs: &[MrRecvWr<'_>]) -> std::result::Result<(), PostError> {
        // SAFETY: every SGE names a range of a registered Mr (MrSge's invariant), held by the
        // ledger until the receive is over.
        unsafe { self.post_recv_checked(RecvWr::raw_list(wrs), true) }
    }

    /// The SRQ's ledger ([`crate::ledger`]), which its QPs' completions settle.
    pub(crate) fn ledger(&self) -> &Arc<LedgerLock<RecvLedger<Region>>> {
        &self.ledger
    }

    /// Posts receive work requests with raw SGEs to the SRQ.
    ///
    /// # Safety
    /// As for [`crate::qp::Qp::post_recv_raw`].
    pub unsafe fn post_recv_raw(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.post_recv_checked(wrs, false) }
    }

    /// The one receive path: with `hold`, the regions are held in the ledger (safe posts).
    ///
    /// # Safety
    /// As for [`Srq::post_recv_raw`]; with `hold`, every SGE names a live safe `Mr`.
    unsafe fn post_recv_checked(
        &self,
        wrs: &[RecvWr<'_>],
        hold: bool,
    ) -> std::result::Result<(), PostError> {
        let k = KernelObj {
            fd: self.pd.context().cmd_fd(),
            handle: self.handle,
        };
        RecvLedger::post(&self.ledger, self.pd.regions(), wrs, hold, |ok| {
            // SAFETY: forwarded to the caller.
            unsafe { self.ops.lock().post_recv(k, ok) }
        })
        .map_err(|e| e.at(self.pd.context().name(), PostQueue::Srq, self.srq_num))
    }
}

fn destroy_kernel_srq(pd: &Pd, handle: u32) -> Result<u32> {
    let ctx = pd.context();
    let mut resp = ib_uverbs_destroy_srq_resp::default();
    let r = ctx.ioctl_or_write(
        Method::DestroySrq,
        &mut resp,
        |c, resp| {
            c.idr(srq::ATTR_DESTROY_HANDLE, handle);
            c.ptr_out(srq::ATTR_DESTROY_RESP, resp);
        },
        |resp| {
            let req = ib_uverbs_destroy_srq {
                srq_handle: handle,
                ..Default::default()
            };
            write::cmd_legacy_simple(ctx.cmd_fd(), nr::DESTROY_SRQ, &req, resp)
        },
    );
    r.map_err(|e| Error::os(format!("destroy SRQ {handle} on {}", ctx.name()), e))?;
    Ok(resp.events_reported)
}

impl Drop for Srq {
    fn drop(&mut self) {
        if let Err(e) = destroy_kernel_srq(&self.pd, self.handle) {
            tracing::error!("{e}; the memory its receives may still write stays allocated");
            std::mem::forget(self.ledger.clone());
        }
        // Then the fields drop in declaration order: the ring (`ops`, first), then the PD.
    }
}
