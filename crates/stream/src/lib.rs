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
//! Not supported: the iWARP variant (messages as sends), keepalive (ignored when received),
//! datagram rsockets.
//!
//! ## iomap (direct placement)
//!
//! With [`StreamOptions::iomap_entries`] (rsockets' `RDMA_IOMAPSIZE`) a stream announces an
//! iomap table of that many entries; the peer may then map buffers into it, and we write
//! straight into them. [`RdmaStream::iomap`] maps a buffer of ours (an [`IoMap`]: registered
//! memory the stream side owns, read by copies) into the *peer's* table;
//! [`RdmaStream::iowrite`] writes into a mapping the peer announced in *ours*. This is what
//! rdma-core's `riostream` uses (`riomap`, `riowrite`):
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use rverbs_stream::{RdmaStream, StreamOptions};
//! # fn demo(mut s: RdmaStream) -> std::io::Result<()> {
//! // (both sides connected with StreamOptions { iomap_entries: 1, ..Default::default() })
//! let map = s.iomap(4096, 0)?; // the peer may now write at offsets 0..4096
//! s.write_all(b"go")?; // anything sent after the mapping tells the peer of it
//! let mut ack = [0u8; 4];
//! s.read_exact(&mut ack)?; // the peer's message after its iowrite: the bytes are there
//! let mut head = [0u8; 16];
//! map.read_at(0, &mut head)?;
//! # Ok(()) }
//! ```
//!
//! ## Soundness
//!
//! The three registered regions of a stream (send ring, target SGL with the iomap table,
//! receive ring) and its iomap buffers are only copied with `rverbs_uverbs::kernel::shared`'s
//! accessors (`Mr::read_at` / `write_at`); no Rust reference into them exists. An iomap
//! buffer is deregistered before it is freed, so a write the peer makes after
//! the mapping is dropped fails at the device. Everything the peer sends — its connection data, its message
//! types and lengths, its credit counts, the SGL entries it writes into our memory — is
//! checked before use ([`wire::ConnData::parse`], the ledger's receive path); a violation
//! ends the stream with an error naming it. The SGL entries only name where *we* write in
//! the *peer's* memory, under its rkeys: a lying entry can at worst make our RDMA WRITE fail
//! at the peer; the same holds for the iomap entries it writes into our table. The only `unsafe` in this crate is the registration of the readiness fd with
//! tokio (feature `tokio`), whose I/O-safety contract an owned duplicate of the fd meets.
#![deny(unsafe_code)]
#![deny(missing_docs)]

mod ledger;
mod stream;
mod wake;
pub mod wire;

#[cfg(feature = "tokio")]
pub mod tokio;

pub use stream::{IoMap, RawIoMap, RdmaListener, RdmaStream, Readiness, StreamOptions};
