//! The provider's tests over its internals (rings, WQE and CQE layouts, the mlx5 seam with a
//! fake kernel, the mlx5 oracle, the C layout probes, the no-allocation checks). They are unit
//! tests of the crate because what they test is not public API: `cargo test -p
//! rverbs-provider --lib tests::` runs them. `tests/provider_table.rs` stays an integration
//! test: it needs only the public surface.
//!
//! The counting allocator of [`allocs`] is this test binary's global allocator (it forwards to
//! the system allocator and counts per thread, so the other tests are unaffected).

#![allow(unsafe_code)]

mod allocs;
mod efa_driver;
mod efa_oracle;
mod mlx5_abi_layout;
mod mlx5_cqe_fixtures;
mod mlx5_fake;
mod mlx5_noalloc;
mod mlx5_oracle;
mod mlx5_qp;
mod mlx5_sim_device;
mod open_checks;
mod rxe_abi_layout;
mod rxe_noalloc;
mod rxe_rings;
mod rxe_wqe;
mod siw_abi_layout;
mod siw_doorbell;
mod siw_rings;

use crate::{provider_for, PROVIDERS};
use rverbs_uverbs::device::DriverId;

#[test]
fn table_is_keyed_by_distinct_driver_ids() {
    for (i, a) in PROVIDERS.iter().enumerate() {
        for b in &PROVIDERS[i + 1..] {
            assert_ne!(a.driver_id, b.driver_id, "{} and {}", a.name, b.name);
        }
    }
    assert_eq!(provider_for(DriverId::RXE).unwrap().name, "rxe");
    assert_eq!(provider_for(DriverId::MLX5).unwrap().name, "mlx5");
    assert_eq!(provider_for(DriverId::SIW).unwrap().name, "siw");
    assert_eq!(provider_for(DriverId::EFA).unwrap().name, "efa");
    assert!(provider_for(DriverId(9999)).is_none());
}
