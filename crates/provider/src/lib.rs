//! # rverbs-provider
//!
//! The data path of the devices rverbs drives: rxe (soft-RoCE), siw (soft-iWARP), mlx5
//! (ConnectX) and EFA (AWS Elastic Fabric Adapter).
//!
//! Providers are chosen from a static table keyed by the kernel's driver id ([`PROVIDERS`]),
//! never by scanning driver files or loading libraries: [`open`] looks the device's driver up
//! and opens a context with that provider's [`Driver`](rverbs_uverbs::driver::Driver)
//! attached.
//!
//! ```no_run
//! let ctx = rverbs_provider::open_by_name("rxe0")?;
//! let pd = rverbs_uverbs::pd::Pd::alloc(&ctx)?;
//! # Ok::<(), std::io::Error>(())
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

use std::io;
use std::sync::Arc;

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{Device, DriverId};
use rverbs_uverbs::Error;

// The fuzz targets' entry points: built for the fuzz targets (`--cfg rverbs_fuzzing`,
// set by `cargo xtask fuzz`) and for this crate's unit tests, which run them over the seeds.
#[cfg(any(test, rverbs_fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
mod mapping;
// The providers' internals (rings, WQE builders, CQE parsers, sizing, the drivers): not public
// API. The `internals` feature re-exports the few pieces the benchmarks and fuzz targets use.
pub(crate) mod efa;
pub(crate) mod mlx5;
pub(crate) mod rxe;
pub(crate) mod siw;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals;

/// One provider: the kernel driver it serves and how to open a context for it.
///
/// Its entry is private: a context is opened through [`Provider::open`], which refuses a
/// device of another driver (attaching a provider's data path to another driver's context
/// would read and write the kernel's rings by the wrong layout). The entry point is not a
/// value safe code can take out of the table and call:
///
/// ```compile_fail,E0615
/// # fn f(dev: &rverbs_uverbs::device::Device) {
/// let _ = (rverbs_provider::PROVIDERS[0].open)(dev);
/// # }
/// ```
#[derive(Debug)]
pub struct Provider {
    /// The kernel's `RDMA_DRIVER_*` id.
    pub driver_id: DriverId,
    /// Short name (`"rxe"`, `"mlx5"`).
    pub name: &'static str,
    /// Opens a context on a device of this driver; checks the driver itself
    /// ([`check_driver`]) before it opens anything.
    entry: fn(&Device) -> io::Result<Arc<Context>>,
}

impl Provider {
    /// Opens `dev` with this provider. A device of another driver is refused with an error
    /// naming the device, its driver and this provider, before anything is opened.
    pub fn open(&self, dev: &Device) -> io::Result<Arc<Context>> {
        (self.entry)(dev)
    }
}

/// The providers rverbs has, keyed by driver id.
pub static PROVIDERS: &[Provider] = &[
    Provider {
        driver_id: DriverId::RXE,
        name: "rxe",
        entry: rxe::driver::open,
    },
    Provider {
        driver_id: DriverId::MLX5,
        name: "mlx5",
        entry: mlx5::driver::open,
    },
    Provider {
        driver_id: DriverId::EFA,
        name: "efa",
        entry: efa::driver::open,
    },
    Provider {
        driver_id: DriverId::SIW,
        name: "siw",
        entry: siw::driver::open,
    },
];

/// Refuses `dev` unless its driver is `want` (the driver of provider `provider`). Every
/// provider's `open` calls it first: attaching a provider's driver
/// ([`Context::set_driver`]) is sound only on a context of that provider's kernel driver.
pub(crate) fn check_driver(dev: &Device, want: DriverId, provider: &str) -> io::Result<()> {
    if dev.driver_id() == want {
        return Ok(());
    }
    Err(Error::unsupported(
        format!("open {} with the {provider} provider", dev.name()),
        format!(
            "its driver is {} (id {}), not {provider}",
            dev.driver_id(),
            dev.driver_id().0
        ),
    )
    .into())
}

/// The provider for `driver_id`, if rverbs has one.
pub fn provider_for(driver_id: DriverId) -> Option<&'static Provider> {
    PROVIDERS.iter().find(|p| p.driver_id == driver_id)
}

/// Opens `dev` with its provider. A device whose driver rverbs has no provider for gives an
/// error naming the device, the driver and the providers there are.
pub fn open(dev: &Device) -> io::Result<Arc<Context>> {
    match provider_for(dev.driver_id()) {
        Some(p) => p.open(dev),
        None => Err(Error::unsupported(
            format!("open {}", dev.name()),
            format!(
                "no rverbs provider for driver {} (id {}); rverbs has: {}",
                dev.driver_id(),
                dev.driver_id().0,
                PROVIDERS
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .into()),
    }
}

/// Opens `dev` (rxe only) with [`Context::open_legacy_abi`]: every ioctl method that has a
/// legacy write() command is skipped for it. It exists to test those fallbacks in the VM.
#[doc(hidden)]
pub fn open_legacy_abi(dev: &Device) -> io::Result<Arc<Context>> {
    if dev.driver_id() != DriverId::RXE {
        return Err(Error::unsupported(
            format!("open {} with the legacy ABI", dev.name()),
            format!("only rxe can be opened so, not driver {}", dev.driver_id()),
        )
        .into());
    }
    let ctx = Context::open_legacy_abi(dev)?;
    // SAFETY: the device is an rxe device (checked above).
    #[allow(unsafe_code)]
    unsafe {
        ctx.set_driver(Box::new(rxe::driver::RxeDriver))?;
    }
    Ok(Arc::new(ctx))
}

/// Opens the device called `name` (e.g. `rxe0`) with its provider.
pub fn open_by_name(name: &str) -> io::Result<Arc<Context>> {
    open(&Device::by_name(name)?)
}

/// Opens the first device (as rdma-core's tools do without `-d`).
pub fn open_first() -> io::Result<Arc<Context>> {
    let devs = rverbs_uverbs::device::devices()?;
    match devs.first() {
        Some(d) => open(d),
        None => Err(rverbs_uverbs::device::Sysfs::system().no_devices_error()),
    }
}

/// An EFA device's limits and capabilities, from its kernel's driver data: what rdma-core's
/// `efadv_query_device` reports ([`efa_device_attr`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EfaDeviceAttr {
    /// Send queue depth limit.
    pub max_sq_wr: u32,
    /// Receive queue depth limit.
    pub max_rq_wr: u32,
    /// SGEs per send.
    pub max_sq_sge: u16,
    /// SGEs per receive.
    pub max_rq_sge: u16,
    /// The device's inline buffer size (a QP takes at most 32 inline bytes).
    pub inline_buf_size: u16,
    /// `EFADV_DEVICE_ATTR_CAPS_*` bits ([`EfaDeviceAttr::CAPS_RDMA_READ`],
    /// [`EfaDeviceAttr::CAPS_RNR_RETRY`]; CQs with source GIDs are not offered).
    pub device_caps: u32,
    /// The largest RDMA transfer.
    pub max_rdma_size: u32,
}

impl EfaDeviceAttr {
    /// `EFADV_DEVICE_ATTR_CAPS_RDMA_READ`: SRD QPs take RDMA READ.
    pub const CAPS_RDMA_READ: u32 = 1 << 0;
    /// `EFADV_DEVICE_ATTR_CAPS_RNR_RETRY`.
    pub const CAPS_RNR_RETRY: u32 = 1 << 1;
}

/// The EFA attributes of `ctx`'s device, `None` when `ctx` is not an EFA context opened by
/// this crate.
pub fn efa_device_attr(ctx: &Context) -> Option<EfaDeviceAttr> {
    let d = ctx.driver().ok()?;
    let efa = d.as_any()?.downcast_ref::<efa::driver::EfaDriver>()?;
    Some(efa.info.device_attr())
}

#[cfg(test)]
mod tests;
