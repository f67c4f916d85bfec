//! **Not for users: no stability, benchmark support only** (feature `internals`), but
//! inventoried like the rest of the crate's surface (`api/rverbs-provider+internals.txt`,
//! checked by the `public api` stage), so every item this feature adds is seen in review.
//!
//! The few provider internals the benchmarks (`benches/`) drive directly. Nothing here is API:
//! it changes with the providers, without notice. A program that opens devices needs only the
//! crate root ([`crate::open`] and friends).
//!
//! Nothing reachable from here lets safe code break Rust's rules: the parsers take byte
//! slices; the CQ pollers own their rings ([`mlx5::CqBuf`] allocates its own memory, an rxe
//! queue view comes only from `unsafe` [`rxe::SimQueue::view`], whose contract also keeps the
//! simulated kernel side to its part of the ring protocol); a UAR page is made only by
//! `unsafe` [`mlx5::UarPage::new`]. Writing a ring behind a poller's back goes through raw
//! pointers, which needs `unsafe` and its contract.

/// mlx5: the CQE parser, the CQ poller over its own ring, the driver-response parsers.
pub mod mlx5 {
    pub use crate::mlx5::cq::parse_create_cq_resp;
    pub use crate::mlx5::{
        parse_cqe, CqBuf, Cqe64, CqeSize, Mlx5ContextUdata, Mlx5Cq, ParseFault, UarPage, WorkQueue,
        WqeRef, WrIdLookup,
    };
}

/// rxe: the CQ poller and the simulated queue (the kernel's side in ordinary memory).
pub mod rxe {
    pub use crate::rxe::sim::{SimKernel, SimQueue};
    pub use crate::rxe::{QueueKind, RxeCq};
}
