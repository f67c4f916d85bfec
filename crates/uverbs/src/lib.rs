//! # rverbs-uverbs
//!
//! The Linux uverbs kernel ABI spoken directly from Rust: no libibverbs, no C toolchain.
//!
//! - [`device`], [`context`], [`pd`], [`mr`], [`cq`], [`qp`], [`srq`], [`ah`], [`mw`]: devices
//!   and the verbs objects.
//! - At the crate root: the vocabulary of posting and completing, provider-neutral — work
//!   requests ([`SendWr`], [`RecvWr`], [`Sge`], [`SendOp`], ...), completions
//!   ([`WorkCompletion`], [`RawWc`], [`WcStatus`], ...), operations ([`OpKind`], [`OpSet`],
//!   ...) and errors ([`Error`], [`PostError`], [`PostFault`]).
//!
//! Below the objects sits the kernel layer (`kernel`: the raw ABI, ioctl and write() framing,
//! mappings, copies into shared memory, the data path's lock) and beside them the provider seam
//! (`driver`); both are public only with the feature `internals`, for the crates of this
//! workspace that build on them, and are not part of the user's API.
//!
//! `unsafe` is denied at the crate root and allowed only in the modules that talk to the
//! kernel, each block with a `// SAFETY:` comment.

#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

/// Declares one item (a function, method, type, constant or module) for the crates of this
/// workspace, not for users: `pub` with the feature `internals`, `pub(crate)` without it, so
/// that it stays out of the user's API (api/rverbs-uverbs.txt) and in the workspace's
/// (api/rverbs-uverbs+internals.txt). Usable where items go, inside `impl` blocks too.
///
/// With `internals` it is exported (hidden) for the crates of this workspace that have an
/// `internals` feature of their own (rverbs-cm: `#[macro_use(internal)] extern crate`): the
/// `cfg` of an expansion is the calling crate's, so there it follows that crate's feature.
#[cfg_attr(feature = "internals", macro_export, doc(hidden))]
macro_rules! internal {
    ($(#[$m:meta])* pub $($item:tt)+) => {
        #[cfg(feature = "internals")]
        $(#[$m])* pub $($item)+
        #[cfg(not(feature = "internals"))]
        #[allow(dead_code, unused_imports)]
        $(#[$m])* pub(crate) $($item)+
    };
}

/// A public struct whose fields are for the crates of this workspace only (see [`internal!`]):
/// the type is the user's, its fields `pub` only with the feature `internals`.
macro_rules! internal_fields {
    ($(#[$m:meta])* $v:vis struct $name:ident { $($(#[$fm:meta])* $fv:vis $f:ident : $t:ty),* $(,)? }) => {
        #[cfg(feature = "internals")]
        $(#[$m])* $v struct $name { $($(#[$fm])* $fv $f: $t),* }
        #[cfg(not(feature = "internals"))]
        $(#[$m])* $v struct $name { $($(#[$fm])* pub(crate) $f: $t),* }
    };
}

/// A public struct some of whose fields are for the crates of this workspace only (see
/// [`internal!`]): the fields written `pub(crate)` are `pub` with the feature `internals`; the
/// fields written `pub` are the user's.
macro_rules! some_internal_fields {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* $fv:vis $f:ident : $t:ty),* $(,)? }) => {
        #[cfg(feature = "internals")]
        $(#[$m])* pub struct $name { $($(#[$fm])* pub $f: $t),* }
        #[cfg(not(feature = "internals"))]
        $(#[$m])* pub struct $name { $($(#[$fm])* $fv $f: $t),* }
    };
}

mod newtype;
// Without `internals` `raw_newtype!` is not exported; this keeps its `$crate::raw_newtype`
// recursion resolving (with the feature the exported macro is there).
#[cfg(not(feature = "internals"))]
#[allow(unused_imports)]
use newtype::raw_newtype;

// The kernel layer and the provider seam: public for the crates of this workspace (feature
// `internals`, not for users; see `kernel`'s doc), private otherwise.
#[cfg(feature = "internals")]
pub mod driver;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)]
mod driver;
#[cfg(feature = "internals")]
pub mod kernel;
#[cfg(not(feature = "internals"))]
#[allow(dead_code)]
mod kernel;

pub mod ah;
pub mod async_event;
pub mod channel;
pub mod context;
pub mod cq;
pub mod device;
pub mod device_attr;
pub mod dmabuf;
mod error;
// The fuzz targets' entry points: built for the fuzz targets (`--cfg rverbs_fuzzing`,
// set by `cargo xtask fuzz`) and for this crate's unit tests, which run them over the seeds.
#[cfg(any(test, rverbs_fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
pub mod gid;
mod ledger;
pub mod mr;
pub mod mw;
internal! {
    pub mod netlink;
}
mod op;
pub mod pd;
pub mod port;
pub mod qp;
pub mod srd;
pub mod srq;
mod util;
mod values;
mod wc;
mod wr;

// The vocabulary of posting and completing, one path each (their modules are private).
pub use error::{Error, PostError, PostFault, PostQueue, Result};
pub use op::{DeviceCapsEx, FlushLevel, FlushType, OpKind, OpSet};
internal! {
    pub use op::{OpTable, SendCaps, Transports};
}
pub use wc::{RawWc, WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use wr::{MrRecvWr, MrSendWr, MrSge, RecvWr, SendFlags, SendOp, SendWr, Sge, SgeList, UdDest};
