//! # rverbs-async
//!
//! tokio integration for rverbs (the facade's `tokio` feature re-exports it as
//! `rverbs::tokio`):
//!
//! - [`AsyncCq`] / [`AsyncCompChannel`]: `next().await` and `next_batch(&mut buf).await` on a
//!   CQ; several CQs may share one completion channel.
//! - [`AsyncEventChannel`] / [`AsyncCmId`]: rdma_cm ids whose `resolve_addr`,
//!   `resolve_route`, `connect`, `get_request`, `accept`, `disconnect` are futures, each id
//!   receiving its own events.
//! - [`AsyncEndpoint`]: an `Endpoint` with `get_send_comp().await` /
//!   `get_recv_comp().await` (the names of the blocking helpers and of librdmacm's), which end
//!   with an error when the connection does.
//!
//! Everything here is built on the readiness protocols the lower crates document (their fds
//! are `AsFd`, non-blocking): nothing in this crate sleeps in a system call, so the runtime's
//! threads are never blocked. Each module says what its futures guarantee when dropped
//! (cancel safety). The futures need a tokio runtime with I/O enabled (`enable_io`, or
//! `enable_all`); the endpoint's completion futures need the time driver too.

// unsafe only for tokio's fd registration (`AsyncFd::register_with_interest`), with its
// SAFETY comment.
#![deny(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations)]

pub mod cm;
pub mod cq;
pub mod endpoint;

pub use cm::{AsyncCmId, AsyncEventChannel};
pub use cq::{AsyncCompChannel, AsyncCq};
pub use endpoint::AsyncEndpoint;
