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
    /// On siw: the memory of deregistered regions with remote access, kept until the QPs of
    /// this PD that existed at their deregistration are destroyed ([`Fence`]).
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
            // siw alone: its deregistration does not wait for a peer's placement in progress
            // (crate::ledger::Fence says what rxe and mlx5 do instead).
            fence: (ctx.driver_id() == DriverId::SIW).then(Fence::default),
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

    /// On siw, what keeps the memory of deregistered remote regions until the QPs that could
    /// reach it are gone ([`Fence`]); `None` elsewhere.
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
