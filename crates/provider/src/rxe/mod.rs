//! rxe (soft-RoCE): the kernel-shared queues, WQE building and completion parsing.
//!
//! rxe keeps every queue in kernel memory that userspace maps: the create CQ / QP / SRQ
//! responses carry an [`abi::mminfo`] per queue (driver data), and
//! `mmap(NULL, mi.size, PROT_READ | PROT_WRITE, MAP_SHARED, cmd_fd, mi.offset)` maps it.
//! The mapping starts with a 384-byte header (`rxe_queue_buf`) followed by the elements; see
//! [`queue`] for the protocol.
//!
//! How the pieces fit (the verbs objects in `rverbs-uverbs` do the kernel calls and own the
//! mappings):
//!
//! - CQ: map `rxe_create_cq_resp.mi` → [`RxeQueue::new`]`(.., QueueKind::Completion)` →
//!   [`RxeCq`]; poll with [`RxeCq::poll`] or [`RxeCq::iter`].
//! - QP: map `rxe_create_qp_resp.sq_mi` → [`QueueKind::Send`] → [`RxeSq::new`] with the
//!   QP type and the *kernel-returned* caps (`max_send_sge`, `max_inline_data`, which rxe
//!   rounds up) and whether the QP was created with `sq_sig_all`; post with [`RxeSq::post`],
//!   then ring [`post_send_doorbell`].
//!   `rq_mi` (unless the QP has an SRQ) → [`QueueKind::Recv`] → [`RxeRq::new`] with
//!   `max_recv_sge`; receives need no doorbell.
//! - SRQ: map `rxe_create_srq_resp.mi` → [`QueueKind::Srq`] → [`RxeRq::new`] with the SRQ's
//!   `max_sge`.
//! - UD: create the AH with a response buffer for `rxe_create_ah_resp`; the 6.1 kernel returns
//!   a non-zero `ah_num` there, which goes into [`rverbs_uverbs::UdDest::ah_num`].
//!
//! None of these types locks: each queue has one user at a time (`&mut self`).

// Crate-private since issue 21: what only the tests (`src/tests/`), the benchmarks and the
// fuzz targets (feature `internals`) use is dead in a plain library build. A test build
// (`cargo test`, `clippy --all-targets`) still reports what nothing uses.
#![cfg_attr(not(test), allow(dead_code, unused_imports))]
// With `internals`, a few items are re-exported (hidden); their docs link to crate-private
// items, which is right for documentation only the crate's own developers read.
#![cfg_attr(feature = "internals", allow(rustdoc::private_intra_doc_links))]

use std::fmt;
use std::io;

use rverbs_uverbs::error::PostError;

// The uapi's definitions as the headers have them (layout-checked by the tests), also those
// the data path does not use.
#[allow(dead_code)]
pub mod abi;
pub mod cq;
pub mod doorbell;
pub mod driver;
pub mod queue;
pub mod rq;
/// A simulated rxe queue in plain memory, for tests and benchmarks (feature `internals`).
#[cfg(any(test, feature = "internals"))]
pub mod sim;
pub mod sq;

pub use cq::RxeCq;
pub use doorbell::post_send_doorbell;
pub use queue::{QueueKind, RxeQueue};
pub use rq::RxeRq;
pub use sq::{RxeQpType, RxeSq, RxeSqConfig};

/// Why one work request could not be posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostErrorReason {
    /// No free slot: the queue holds `capacity` requests the kernel has not consumed yet.
    QueueFull {
        /// Requests the queue holds at most (one slot less than it has).
        capacity: u32,
    },
    /// More SGEs than the queue was created for.
    TooManySge {
        /// SGEs in the request.
        num_sge: usize,
        /// SGEs the queue's slots hold (as the kernel returned it at creation).
        max_sge: u32,
    },
    /// Inline data longer than the QP's `max_inline_data`.
    InlineTooLong {
        /// Bytes of the request's SGEs together.
        len: u64,
        /// The QP's `max_inline_data`.
        max_inline: u32,
    },
    /// INLINE was asked for an operation that carries no outbound payload.
    InlineNotAllowed {
        /// The operation's name (`RDMA_READ`, ...).
        op: &'static str,
    },
    /// Send flags rxe does not implement (e.g. IP_CSUM).
    UnsupportedFlags {
        /// The flag bits rxe does not implement (`IB_SEND_*` numbering).
        flags: u32,
    },
    /// A UD send without a destination.
    MissingUdDest,
    /// A UD destination with `ah_num` 0 (the AH was created without the rxe response).
    NoAhNum,
    /// An atomic's local buffer is shorter than 8 bytes.
    AtomicLength {
        /// Bytes of the request's SGEs together.
        len: u64,
    },
    /// An atomic's remote address is not 8-byte aligned.
    AtomicAlignment {
        /// The remote address given.
        remote_addr: u64,
    },
    /// The gather/scatter list adds up to more than 4 GiB - 1 bytes.
    LengthOverflow {
        /// The sum of the SGE lengths.
        len: u64,
    },
    /// An operation that takes no SGEs (LOCAL_INV, BIND_MW, FLUSH, ATOMIC_WRITE) given some.
    SgeOnLocalOp {
        /// The operation's name.
        op: &'static str,
        /// SGEs given.
        num_sge: usize,
    },
}

impl fmt::Display for PostErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PostErrorReason::QueueFull { capacity } => {
                write!(f, "queue full ({capacity} requests outstanding)")
            }
            PostErrorReason::TooManySge { num_sge, max_sge } => {
                write!(f, "{num_sge} SGEs, the queue allows {max_sge}")
            }
            PostErrorReason::InlineTooLong { len, max_inline } => {
                write!(
                    f,
                    "{len} bytes of inline data, max_inline_data is {max_inline}"
                )
            }
            PostErrorReason::InlineNotAllowed { op } => {
                write!(f, "INLINE is not possible with {op}")
            }
            PostErrorReason::UnsupportedFlags { flags } => {
                write!(f, "send flags {flags:#x} are not supported by rxe")
            }
            PostErrorReason::MissingUdDest => f.write_str("UD send without a destination (ud)"),
            PostErrorReason::NoAhNum => f.write_str(
                "UD destination has ah_num 0: create the AH with the rxe driver response",
            ),
            PostErrorReason::AtomicLength { len } => {
                write!(f, "atomic with a {len}-byte local buffer, needs 8")
            }
            PostErrorReason::AtomicAlignment { remote_addr } => {
                write!(
                    f,
                    "atomic remote address {remote_addr:#x} is not 8-byte aligned"
                )
            }
            PostErrorReason::LengthOverflow { len } => {
                write!(
                    f,
                    "SGE lengths add up to {len} bytes, more than fits in 32 bits"
                )
            }
            PostErrorReason::SgeOnLocalOp { op, num_sge } => {
                write!(f, "{op} takes no SGEs, got {num_sge}")
            }
        }
    }
}

/// An rxe ring's post stopped at work request number `posted`: the ones before it are in the
/// queue (and, for a send queue, still need the doorbell), it and the ones after it are not.
/// The typed form of what [`rverbs_uverbs::error::PostError`] (which it converts into)
/// says in words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxePostError {
    /// The queue posted to.
    pub queue: QueueKind,
    /// Requests posted before the failing one (= the failing one's index in the slice).
    pub posted: usize,
    /// What was wrong with the failing request.
    pub reason: PostErrorReason,
}

impl fmt::Display for RxePostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rxe {}: work request #{}: {}",
            self.queue, self.posted, self.reason
        )
    }
}

impl std::error::Error for RxePostError {}

impl From<RxePostError> for PostError {
    #[cold]
    fn from(e: RxePostError) -> Self {
        match e.reason {
            PostErrorReason::QueueFull { capacity } => PostError::queue_full(e.posted, capacity),
            PostErrorReason::UnsupportedFlags { .. } => {
                PostError::unsupported(e.posted, e.reason.to_string())
            }
            _ => PostError::invalid(e.posted, e.reason.to_string()),
        }
    }
}

impl From<RxePostError> for io::Error {
    fn from(e: RxePostError) -> Self {
        PostError::from(e).into()
    }
}
