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
//!   then ring the QP's [`doorbell::Doorbell`] (its command built once, at create).
//!   `rq_mi` (unless the QP has an SRQ) → [`QueueKind::Recv`] → [`RxeRq::new`] with
//!   `max_recv_sge`; receives need no doorbell.
//! - SRQ: map `rxe_create_srq_resp.mi` → [`QueueKind::Srq`] → [`RxeRq::new`] with the SRQ's
//!   `max_sge`.
//! - UD: create the AH with a response buffer for `rxe_create_ah_resp`; the 6.1 kernel returns
//!   a non-zero `ah_num` there, which goes into [`rverbs_uverbs::UdDest::ah_num`].
//!
//! None of these types locks: each queue has one user at a time (`&mut self`).

// Crate-private: what only the tests (`src/tests/`), the benchmarks (feature `internals`) or
// the fuzz targets (`--cfg rverbs_fuzzing`) use is compiled only for them
// (`#[cfg(any(test, ...))]` on the item), so a plain library build has no dead
// code and reports any that appears.
// With `internals`, a few items are re-exported (hidden); their docs link to crate-private
// items, which is right for documentation only the crate's own developers read.
#![cfg_attr(feature = "internals", allow(rustdoc::private_intra_doc_links))]

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
mod wqe;

pub use cq::RxeCq;
pub use queue::{QueueKind, RxeQueue};
pub use rq::RxeRq;
pub use sq::{RxeQpType, RxeSq, RxeSqConfig};
