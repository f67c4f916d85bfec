//! # rverbs
//!
//! Pure-Rust RDMA for Linux: the uverbs and rdma_cm kernel ABIs spoken directly, the rxe and
//! mlx5 data paths in Rust, and no C library of rdma-core linked or loaded.
//!
//! This facade re-exports the three layers:
//! - [`uverbs`] (`rverbs-uverbs`): devices, contexts, verbs objects, kernel ABI;
//! - [`provider`] (`rverbs-provider`): rxe and mlx5 rings, posting and polling;
//! - [`cm`] (`rverbs-cm`): rdma_cm ids, events, and librdmacm's helpers;
//! - `tokio` (`rverbs-async`, with the `tokio` feature): async CQs, rdma_cm ids and
//!   endpoints on tokio.

#![deny(unsafe_code)]
// missing_docs: to be turned to deny once every public item has its doc (issue #12, not done).
#![allow(missing_docs)]

#[cfg(feature = "tokio")]
pub use rverbs_async as tokio;
pub use rverbs_cm as cm;
pub use rverbs_provider as provider;
pub use rverbs_uverbs as uverbs;
