//! # rverbs-stream
//!
//! A byte stream over RDMA that speaks librdmacm's **rsockets** protocol:
//! [`RdmaListener::bind`] / [`RdmaListener::accept`], [`RdmaStream::connect`],
//! `std::io::Read` / `Write` (vectored too), `shutdown`, non-blocking mode, timeouts and a
//! readiness fd; with the `tokio` feature, `AsyncRead` / `AsyncWrite` (the `tokio` module, not
//! in the default build). An `RdmaStream` interoperates with rdma-core's rsocket programs (`rstream`,
//! `riostream`) both ways.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use rverbs_stream::{RdmaListener, RdmaStream};
//! # fn demo() -> std::io::Result<()> {
//! let listener = RdmaListener::bind("10.9.0.1:7471".parse().unwrap())?;
//! // connect returns once the listener has accepted: another thread (or process) connects.
//! let client = std::thread::spawn(|| -> std::io::Result<()> {
//!     let mut c = RdmaStream::connect("10.9.0.1:7471".parse().unwrap())?;
//!     c.write_all(b"hello")
//! });
//! let (mut server, _peer) = listener.accept()?;
//! let mut buf = [0u8; 5];
//! server.read_exact(&mut buf)?;
//! client.join().unwrap()?;
//! # Ok(()) }
//! ```
//!
//! ## On the wire
//!
//! Facts from rdma-core's `librdmacm/docs/rsocket` and `rsocket.c` (see [`wire`]): rdma_cm
//! on the TCP port space, 40 bytes of connection data each way (version 1, credits, the
//! target SGL, the first receive buffer), then every message an RDMA WRITE with immediate.
//! Not supported: iomap (`riomap` / `riowrite`, direct placement, which rdma-core's
//! `riostream` needs; we announce none, and a peer that has one — a non-zero iomap size in its
//! connection data — is refused at connect / accept with [`wire::WireError::Iomap`]),
//! the iWARP variant (messages as sends), keepalive (ignored when received),
//! datagram rsockets.
//!
//! ## Soundness
//!
//! The three registered regions of a stream (send ring, target SGL, receive ring) are only
//! copied with `rverbs_uverbs::shared`'s accessors (`Mr::read_at` / `write_at`); no Rust
//! reference into them exists. Everything the peer sends — its connection data, its message
//! types and lengths, its credit counts, the SGL entries it writes into our memory — is
//! checked before use ([`wire::ConnData::parse`], the ledger's receive path); a violation
//! ends the stream with an error naming it. The SGL entries only name where *we* write in
//! the *peer's* memory, under its rkeys: a lying entry can at worst make our RDMA WRITE fail
//! at the peer. The only `unsafe` in this crate is the registration of the readiness fd with
//! tokio (feature `tokio`), whose I/O-safety contract an owned duplicate of the fd meets.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod ledger;
mod stream;
mod wake;
pub mod wire;

#[cfg(feature = "tokio")]
pub mod tokio;

pub use stream::{RdmaListener, RdmaStream, Readiness, StreamOptions};
