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
//! the device, the QP and the rule (a refused work request is a `rverbs_uverbs::PostError`
//! with its `PostFault`, as for every provider):
//!
//! - RC QPs only (no UC, no UD): refused at create, before any kernel command.
//! - Operations: SEND, SEND_WITH_INV, RDMA_WRITE, RDMA_READ ([`driver::send_caps`]); no
//!   atomics, no immediate data, no LOCAL_INV or BIND_MW from userspace: refused by the one
//!   classification of `rverbs_uverbs::op` before any provider code runs.
//! - An RDMA READ has exactly one sink SGE (`PostFault::ReadSinkSges`); inline data is at
//!   most [`abi::SIW_MAX_INLINE`] (80) bytes, the QP's `max_inline_data` as siw reports it
//!   (`PostFault::InlineTooLong`), and only for SEND and RDMA WRITE.
//! - A QP is connected only through rdma_cm (iw_cm moves it to RTS); the doorbell of a QP
//!   that is not connected fails with `ENOTCONN`, named as such.

// What only the tests use is compiled only for them (`#[cfg(test)]` on the item), as in
// rxe, so a plain library build has no dead code and reports any that appears.

use std::fmt;

// The uapi's definitions as the header has them (layout-checked by the tests), also those
// the data path does not use.
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
