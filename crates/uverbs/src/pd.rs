//! Protection domains.

use std::fmt;
use std::sync::Arc;

use crate::context::Context;
use crate::context::Method;
use crate::device::{DriverId, Transport};
use crate::error::{Error, Result};
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::obj::ib_uverbs_dealloc_pd;
use crate::kernel::abi::obj::pd;
use crate::kernel::abi::obj::{ib_uverbs_alloc_pd, ib_uverbs_alloc_pd_resp};
use crate::kernel::write;
use crate::ledger::{Fence, Registry};
use crate::op::ReadSinks;
use zerocopy::IntoBytes as _;

pub(crate) mod odp_keys;
pub(crate) mod region;

use region::{Deferred, Region};

/// A protection domain. Memory regions, QPs, SRQs and AHs keep their PD alive (`Arc<Pd>`).
pub struct Pd {
    ctx: Arc<Context>,
    handle: u32,
    /// On iWARP devices: the regions that may not be an RDMA READ's sink ([`OpSet`](crate::OpSet)).
    read_sinks: Option<ReadSinks>,
    /// The safe regions of this PD by local key ([`crate::ledger`]).
    regions: Registry<Region>,
    /// On siw and rxe: the memory of deregistered regions with remote access, kept until the
    /// QPs of this PD that existed at their deregistration are destroyed ([`Fence`]).
    fence: Option<Fence<Deferred>>,
    /// The regions of this PD registered with `ON_DEMAND`, by local key (`mr/odp.rs`).
    odp_keys: odp_keys::OdpKeys,
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd")
            .field("device", &self.ctx.name())
            .field("handle", &self.handle)
            .finish()
    }
}

impl Pd {
    /// Allocates a protection domain on `ctx`.
    pub fn alloc(ctx: &Arc<Context>) -> Result<Arc<Pd>> {
        let req = ib_uverbs_alloc_pd { response: 0 };
        let mut resp = ib_uverbs_alloc_pd_resp::default();
        write::cmd_legacy_simple(ctx.cmd_fd(), nr::ALLOC_PD, &req, &mut resp)
            .map_err(|e| Error::os(format!("alloc PD on {}", ctx.name()), e))?;
        tracing::debug!(device = ctx.name(), handle = resp.pd_handle, "PD allocated");
        let iwarp = ctx.device().transport() == Transport::IWARP;
        Ok(Arc::new(Pd {
            ctx: ctx.clone(),
            handle: resp.pd_handle,
            read_sinks: iwarp.then(ReadSinks::default),
            regions: Registry::default(),
            fence: fences_peers(ctx.driver_id()).then(Fence::default),
            odp_keys: Default::default(),
        }))
    }

    /// On an iWARP device, the local keys of this PD's regions registered without
    /// `REMOTE_WRITE`, which an RDMA READ may not have as its sink; `None` elsewhere.
    #[inline]
    pub(crate) fn read_sinks(&self) -> Option<&ReadSinks> {
        self.read_sinks.as_ref()
    }

    /// The safe regions of this PD by local key, which posts look up ([`crate::ledger`]).
    #[inline]
    pub(crate) fn regions(&self) -> &Registry<Region> {
        &self.regions
    }

    /// On siw and rxe, what keeps the memory of deregistered remote regions until the QPs that
    /// could reach it are gone ([`Fence`]); `None` elsewhere.
    #[inline]
    pub(crate) fn fence(&self) -> Option<&Fence<Deferred>> {
        self.fence.as_ref()
    }

    /// The on-demand-paging regions of this PD by local key (`mr/odp.rs`).
    #[inline]
    pub(crate) fn odp_keys(&self) -> &odp_keys::OdpKeys {
        &self.odp_keys
    }

    internal! {
    /// The kernel handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    }

    /// The context this PD belongs to.
    #[inline]
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }
}

/// Whether a PD of a device with driver `id` needs a [`Fence`]: whether a peer's transfer into
/// (or out of) a region may still be in progress after the region's deregistration returned.
///
/// - siw: yes, always. `siw_dereg_mr` (`siw_mr_drop_mem`) clears `stag_valid`, erases the key
///   and drops its own reference, and waits for nothing; a WRITE segment that passed
///   `siw_check_mem` is still being copied (`siw_rx_umem`).
/// - rxe: yes, after a timeout. `rxe_dereg_mr` → `__rxe_cleanup` erases the key and then waits
///   for the references of packets being processed with `wait_for_completion_timeout(..,
///   msecs_to_jiffies(50000))` — 50 s on Debian's 6.1.192, 6.12.118 and 7.3.4 alike — and when
///   that expires it warns and releases the pinned pages anyway (`rxe_mr_cleanup` →
///   `ib_umem_release`), while the responder that holds the reference may still copy a WRITE's
///   or SEND's payload or an atomic's result into them. A kernel timer is not a fence; the QP's
///   destroy is (`rxe_qp_do_cleanup` → `rxe_cleanup_task` waits for the QP's tasks, where every
///   copy runs, without a timeout).
/// - mlx5, efa and the rest: no; the mkey is destroyed in firmware before deregistration
///   returns.
///
/// docs/architecture.md ("What a peer can still reach after the drop") has the details.
pub(crate) fn fences_peers(id: DriverId) -> bool {
    id == DriverId::SIW || id == DriverId::RXE
}

impl Drop for Pd {
    fn drop(&mut self) {
        let handle = self.handle;
        let r = self.ctx.ioctl_or_write(
            Method::DestroyPd,
            &mut (),
            |c, _| c.idr(pd::ATTR_DESTROY_HANDLE, handle),
            |_| {
                let req = ib_uverbs_dealloc_pd { pd_handle: handle };
                write::cmd_legacy(
                    self.ctx.cmd_fd(),
                    nr::DEALLOC_PD,
                    req.as_bytes(),
                    &[],
                    &mut [],
                )
            },
        );
        if let Err(e) = r {
            tracing::error!(
                device = self.ctx.name(),
                handle = self.handle,
                "dealloc PD: {}",
                Error::os("dealloc PD", e)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peers_transfer_is_fenced_on_siw_and_rxe_only() {
        // rxe's deregistration waits for a packet in progress only until a 50 s timeout
        // (__rxe_cleanup), siw's not at all: both keep remote memory until the QPs' destroy.
        assert!(fences_peers(DriverId::SIW));
        assert!(fences_peers(DriverId::RXE));
        assert!(!fences_peers(DriverId::MLX5));
        assert!(!fences_peers(DriverId::EFA));
    }
}
