//! # rverbs-uverbs
//!
//! The Linux uverbs kernel ABI spoken directly from Rust: no libibverbs, no C toolchain.
//!
//! - [`abi`]: raw kernel structures and numbers (`include/rdma/*.h`), layout-checked.
//! - [`ioctl`]: a typed attribute builder for `RDMA_VERBS_IOCTL`.
//! - [`write`](mod@write): the legacy and extended write() commands.
//! - [`wc`], [`wr`]: the provider-neutral completion and work-request types.
//! - [`mapping`]: the one owner of memory mappings (every `mmap`/`munmap`); [`sync`]: the one
//!   lock of the data path.
//!
//! `unsafe` is denied at the crate root and allowed only in the modules that talk to the
//! kernel, each block with a `// SAFETY:` comment.

#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

mod newtype;

#[allow(non_camel_case_types, missing_debug_implementations)]
// zerocopy derives add helper types
// Raw kernel structures and numbers, named field for field as in the uapi headers they are
// layout-checked against: those headers are their documentation.
#[allow(missing_docs)]
pub mod abi;
pub mod ah;
pub mod async_event;
pub mod channel;
pub mod context;
pub mod cq;
pub mod device;
pub mod device_attr;
pub mod dmabuf;
pub mod driver;
pub mod error;
pub mod fd;
// The fuzz targets' entry points: built for the fuzz targets (`--cfg rverbs_fuzzing`,
// set by `cargo xtask fuzz`) and for this crate's unit tests, which run them over the seeds.
#[cfg(any(test, rverbs_fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
pub mod gid;
pub mod ioctl;
mod ledger;
pub mod mapping;
pub mod mr;
pub mod mw;
pub mod netlink;
pub mod op;
pub mod pd;
pub mod port;
pub mod qp;
pub mod shared;
pub mod srq;
pub mod sync;
mod util;
pub mod wc;
pub mod wr;
pub mod write;

pub use error::{Error, PostError, PostFault, PostQueue, Result};
pub use op::{DeviceCapsEx, FlushLevel, FlushType, OpKind, OpSet, SendCaps};
pub use wc::{RawWc, WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use wr::{MrRecvWr, MrSendWr, MrSge, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};
