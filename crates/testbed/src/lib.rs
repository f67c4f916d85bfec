//! rverbs-testbed: boots QEMU guests with soft-RoCE (rxe) or soft-iWARP (siw) devices on Debian's own kernels and
//! runs programs in them. Used by `rverbs-vm` (the runner for any crate's tests, see
//! docs/testing.md "Testing your crate on RDMA") and by the rverbs workspace's `cargo xtask`.
//!
//! std only; it depends on no rverbs crate (it sits beside them, see docs/architecture.md).

#![warn(missing_docs)]

mod buildroot;
pub mod cpio;
pub mod host;
pub mod kernel;
pub mod local;
pub mod packages;
pub mod runner;
pub mod siw;
pub mod userland;
pub mod util;
pub mod vm;
