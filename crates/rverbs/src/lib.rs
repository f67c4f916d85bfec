//! # rverbs
//!
//! Pure-Rust RDMA for Linux: the uverbs and rdma_cm kernel ABIs spoken directly, the rxe and
//! mlx5 data paths in Rust, and no C library of rdma-core linked or loaded.
//!
//! This facade re-exports the layers and adds one helper of its own:
//! - [`uverbs`] (`rverbs-uverbs`): devices, contexts, verbs objects, kernel ABI;
//! - [`provider`] (`rverbs-provider`): rxe, siw and mlx5 rings, posting and polling;
//! - [`cm`] (`rverbs-cm`): rdma_cm ids, events, and librdmacm's helpers;
//! - [`stream`] (`rverbs-stream`): `RdmaStream` / `RdmaListener`, a byte stream over RDMA
//!   that speaks librdmacm's rsockets protocol (interoperates with rdma-core's `rstream`);
//! - [`rc`]: connecting an RC QP by hand (RESET → INIT → RTR → RTS) when the peers exchange
//!   their QP numbers without rdma_cm;
//! - `tokio` (`rverbs-async`, with the `tokio` feature): async CQs, rdma_cm ids and
//!   endpoints on tokio.
//!
//! Runnable programs are in `crates/rverbs/examples/` (a client and a server over rdma_cm,
//! RDMA WRITE and READ with a key exchange, the README's example; over [`stream`]: a file
//! copy, an echo server and client, sync and on tokio, and HTTP/1.1 with hyper);
//! `cargo xtask test` builds them and runs them in the test guests.
//!
//! The repository's README follows; its example is compiled as a doctest of this crate.
//!
#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod rc;

#[cfg(feature = "tokio")]
pub use rverbs_async as tokio;
pub use rverbs_cm as cm;
pub use rverbs_provider as provider;
pub use rverbs_stream as stream;
pub use rverbs_uverbs as uverbs;
