//! The on-demand-paging regions of a PD by local key ([`OdpKeys`]): what
//! `Pd::advise_mr` (`mr/odp.rs`) checks an SGE against.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::io::Errno;

/// One ODP region of a PD, by local key: its range and access.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OdpRegion {
    pub(crate) addr: u64,
    pub(crate) len: u64,
}

/// The ODP regions of a PD by local key: registration adds, deregistration removes under the
/// same lock that [`Pd::advise_mr`] holds across its ioctl, so a key it checked cannot be
/// deregistered (and given to a pinned region) before the kernel has read it.
#[derive(Debug, Default)]
pub(crate) struct OdpKeys(Mutex<HashMap<u32, OdpRegion>>);

impl OdpKeys {
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<u32, OdpRegion>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes a new ODP region.
    pub(crate) fn registered(&self, lkey: u32, addr: u64, len: u64) {
        self.lock().insert(lkey, OdpRegion { addr, len });
    }

    /// Deregisters through `dereg`, holding the table's lock if `lkey` is an ODP region's,
    /// and forgets the key if `dereg` succeeded.
    pub(crate) fn deregister(
        &self,
        lkey: u32,
        dereg: impl FnOnce() -> std::result::Result<(), Errno>,
    ) -> std::result::Result<(), Errno> {
        let mut t = self.lock();
        if !t.contains_key(&lkey) {
            drop(t);
            return dereg();
        }
        let r = dereg();
        if r.is_ok() {
            t.remove(&lkey);
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
        k.registered(0x10, 0x1000, 4096);
        assert_eq!(k.deregister(0x10, || Err(Errno::BUSY)), Err(Errno::BUSY));
        assert!(k.lock().contains_key(&0x10));
        assert_eq!(k.deregister(0x10, || Ok(())), Ok(()));
        assert!(!k.lock().contains_key(&0x10));
        // a key that is not an ODP region's deregisters without the table
        assert_eq!(k.deregister(0x20, || Ok(())), Ok(()));
    }
}
