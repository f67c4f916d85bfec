//! The on-demand-paging regions of a PD by local key ([`OdpKeys`]): what
//! `Pd::advise_mr` (`mr/odp.rs`) checks an SGE against.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::io::Errno;

/// One ODP region of a PD, by local key: its range and access.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OdpRegion {
    pub(crate) addr: u64,
    pub(crate) len: u64,
    /// Registered with `LOCAL_WRITE` (rxe's advice looks every region up for local write).
    pub(crate) local_write: bool,
}

/// The ODP regions of a PD by local key: registration adds, deregistration removes under the
/// same lock that [`Pd::advise_mr`] holds across its ioctl, so a key it checked cannot be
/// deregistered (and given to a pinned region) before the kernel has read it.
///
/// `live` counts the entries, so that a PD that has no ODP region deregisters without the
/// lock: an advice's prefetch (`FLUSH`: a synchronous fault-in of a possibly large range)
/// holds it across the ioctl, and a region dropped by a poll's release must not wait for it.
/// A key is inserted (and counted) before its `Mr` is returned, so its deregistration, which
/// comes after, sees the count.
#[derive(Debug, Default)]
pub(crate) struct OdpKeys {
    table: Mutex<HashMap<u32, OdpRegion>>,
    live: AtomicUsize,
}

impl OdpKeys {
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<u32, OdpRegion>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a new ODP region.
    pub(crate) fn registered(&self, lkey: u32, addr: u64, len: u64, local_write: bool) {
        let mut t = self.lock();
        let r = OdpRegion {
            addr,
            len,
            local_write,
        };
        if t.insert(lkey, r).is_none() {
            self.live.fetch_add(1, Ordering::Release);
        }
    }

    /// Deregisters through `dereg`, holding the table's lock if `lkey` is an ODP region's,
    /// and forgets the key if `dereg` succeeded.
    pub(crate) fn deregister(
        &self,
        lkey: u32,
        dereg: impl FnOnce() -> std::result::Result<(), Errno>,
    ) -> std::result::Result<(), Errno> {
        if self.live.load(Ordering::Acquire) == 0 {
            return dereg(); // no ODP region in this PD: lkey is not one
        }
        let mut t = self.lock();
        if !t.contains_key(&lkey) {
            drop(t);
            return dereg();
        }
        let r = dereg();
        if r.is_ok() && t.remove(&lkey).is_some() {
            self.live.fetch_sub(1, Ordering::Release);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_odp_key_is_forgotten_only_when_its_deregistration_succeeds() {
        let k = OdpKeys::default();
        k.registered(0x10, 0x1000, 4096, true);
        assert_eq!(k.deregister(0x10, || Err(Errno::BUSY)), Err(Errno::BUSY));
        assert!(k.lock().contains_key(&0x10));
        assert_eq!(k.deregister(0x10, || Ok(())), Ok(()));
        assert!(!k.lock().contains_key(&0x10));
        // a key that is not an ODP region's deregisters without the table
        assert_eq!(k.deregister(0x20, || Ok(())), Ok(()));
    }

    #[test]
    fn a_pd_without_odp_regions_deregisters_while_an_advice_holds_the_table() {
        let k = OdpKeys::default();
        let held = k.lock(); // an advice across its ioctl
        assert_eq!(k.deregister(0x20, || Ok(())), Ok(()));
        drop(held);
        k.registered(0x10, 0x1000, 4096, true);
        k.registered(0x10, 0x1000, 4096, true); // the same key again counts once
        assert_eq!(k.live.load(Ordering::Relaxed), 1);
        assert_eq!(k.deregister(0x10, || Ok(())), Ok(()));
        assert_eq!(k.live.load(Ordering::Relaxed), 0);
    }
}
