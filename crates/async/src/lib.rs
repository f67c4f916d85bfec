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

/// Waits until `fd` is readable, then drains it with `drain` (which reads to EAGAIN and
/// returns `WouldBlock`, so the readiness is used up), or until `notified` fires (another
/// task drained it). `notified` must have been enabled before the caller's last check. The
/// one sleep of the event and completion channels.
pub(crate) async fn readable_or_notified<T: std::os::fd::AsRawFd>(
    fd: &tokio::io::unix::AsyncFd<T>,
    notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    drain: impl FnMut(&tokio::io::unix::AsyncFd<T>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    tokio::select! {
        biased;
        r = fd.readable() => {
            let mut guard = r?;
            match guard.try_io(drain) {
                Ok(Err(e)) if e.kind() != std::io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
        _ = notified => {}
    }
    Ok(())
}

pub use cm::{AsyncCmId, AsyncEventChannel};
pub use cq::{AsyncCompChannel, AsyncCq};
pub use endpoint::AsyncEndpoint;
