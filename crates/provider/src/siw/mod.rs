//! siw (soft-iWARP): the kernel-shared rings, SQE/RQE building, CQE parsing, CQ arming and
//! the send doorbell.
//!
//! siw keeps every queue in kernel memory that userspace maps: the create CQ / QP / SRQ
//! responses ([`abi`]) give each ring's element count (a power of two) and an mmap key;
//! `mmap(NULL, n * elem (+ 8 for a CQ's notify word), PROT_READ | PROT_WRITE, MAP_SHARED,
//! cmd_fd, key)` maps it. Each element's `flags` word is the handshake ([`ring`] has the
//! protocol). A context needs the 8-byte `siw_uresp_alloc_ctx` response room and each memory
//! registration the 8-byte `siw_ureq_reg_mr` (the kernel refuses both without them).
//!
//! iWARP's rules, as siw enforces them and as rverbs refuses them first with errors naming
//! the device, the QP and the rule:
//!
//! - RC QPs only (no UC, no UD): refused at create, before any kernel command.
//! - Operations: SEND, SEND_WITH_INV, RDMA_WRITE, RDMA_READ ([`driver::send_caps`]); no
//!   atomics, no immediate data, no LOCAL_INV or BIND_MW from userspace: refused by the one
//!   classification of `rverbs_uverbs::op` before any provider code runs.
//! - An RDMA READ has exactly one sink SGE; inline data is at most [`abi::SIW_MAX_INLINE`]
//!   (80) bytes and only for SEND and RDMA WRITE.
//! - A QP is connected only through rdma_cm (iw_cm moves it to RTS); the doorbell of a QP
//!   that is not connected fails with `ENOTCONN`, named as such.

// What only the tests use is dead in a plain library build.
#![cfg_attr(not(test), allow(dead_code))]

use std::fmt;
use std::io;

use rverbs_uverbs::error::PostError;
use rverbs_uverbs::OpKind;

#[allow(dead_code)]
pub mod abi;
pub mod doorbell;
pub mod driver;
pub mod ring;
/// A simulated siw ring in plain memory, for tests.
#[cfg(test)]
pub mod sim;

/// Which siw ring a post or a mapping concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SiwQueue {
    /// A QP's send queue.
    Send,
    /// A QP's receive queue.
    Recv,
    /// A shared receive queue.
    Srq,
    /// A completion queue.
    Completion,
}

impl fmt::Display for SiwQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SiwQueue::Send => "send queue",
            SiwQueue::Recv => "receive queue",
            SiwQueue::Srq => "shared receive queue",
            SiwQueue::Completion => "completion queue",
        })
    }
}

/// Why one work request could not be posted to a siw ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostErrorReason {
    /// The slot at the producer is still valid: `capacity` requests are outstanding.
    QueueFull {
        /// Elements in the ring.
        capacity: u32,
    },
    /// More SGEs than the queue was created for.
    TooManySge {
        /// SGEs in the request.
        num_sge: usize,
        /// SGEs the queue takes.
        max_sge: u32,
    },
    /// Inline data longer than siw's SQE holds.
    InlineTooLong {
        /// Bytes of the request's SGEs together.
        len: u64,
        /// `SIW_MAX_INLINE`.
        max_inline: u32,
    },
    /// INLINE asked for an operation that carries no outbound payload.
    InlineNotAllowed {
        /// The operation's name.
        op: &'static str,
    },
    /// Send flags siw does not implement (`SendFlags` bits).
    UnsupportedFlags {
        /// The bits.
        flags: u32,
    },
    /// An RDMA READ whose sink is not exactly one SGE (iWARP tags one sink buffer).
    ReadSinkSges {
        /// SGEs given.
        num_sge: usize,
    },
    /// An operation iWARP (siw) does not carry, reaching the ring without the core's check.
    NotIwarp {
        /// The operation.
        op: OpKind,
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
            PostErrorReason::InlineTooLong { len, max_inline } => write!(
                f,
                "{len} bytes of inline data: siw (iWARP) carries at most {max_inline} inline"
            ),
            PostErrorReason::InlineNotAllowed { op } => {
                write!(f, "INLINE is not possible with {op}")
            }
            PostErrorReason::UnsupportedFlags { flags } => {
                write!(f, "send flags {flags:#x} are not supported by siw")
            }
            PostErrorReason::ReadSinkSges { num_sge } => write!(
                f,
                "RDMA_READ with {num_sge} sink SGEs: iWARP reads into exactly one"
            ),
            PostErrorReason::NotIwarp { op } => {
                write!(f, "iWARP (siw) does not carry {op}")
            }
        }
    }
}

/// A siw ring's post stopped at work request number `posted`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiwPostError {
    /// The ring posted to.
    pub queue: SiwQueue,
    /// Requests posted before the failing one.
    pub posted: usize,
    /// What was wrong with the failing request.
    pub reason: PostErrorReason,
    /// The requests before it need the doorbell (send queue only).
    pub ring_doorbell: bool,
}

impl fmt::Display for SiwPostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "siw {}: work request #{}: {}",
            self.queue, self.posted, self.reason
        )
    }
}

impl std::error::Error for SiwPostError {}

impl From<SiwPostError> for PostError {
    #[cold]
    fn from(e: SiwPostError) -> Self {
        match e.reason {
            PostErrorReason::QueueFull { capacity } => PostError::queue_full(e.posted, capacity),
            PostErrorReason::UnsupportedFlags { .. } | PostErrorReason::NotIwarp { .. } => {
                PostError::unsupported(e.posted, e.reason.to_string())
            }
            _ => PostError::invalid(e.posted, e.reason.to_string()),
        }
    }
}

impl From<SiwPostError> for io::Error {
    fn from(e: SiwPostError) -> Self {
        PostError::from(e).into()
    }
}
