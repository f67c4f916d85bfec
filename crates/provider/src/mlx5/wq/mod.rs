//! mlx5 work queues: QP and SRQ sizing and buffers, send and receive WQEs, address vectors,
//! doorbells (doorbell record, 64-bit UAR doorbell, BlueFlame) and the `wr_id` tables the CQ
//! poller resolves completions through. One file per job:
//!
//! - [`sizing`]: libmlx5's QP and SRQ sizing from the caps and the device limits.
//! - [`av`]: UD address vectors and the context's table of them.
//! - [`doorbell`]: doorbell record slots, the UAR doorbell and BlueFlame.
//! - [`registry`]: the `wr_id` registry the CQ poller looks completions up in; user indices.
//! - [`wqe`]: WQE segment layouts and the send encoder.
//! - [`qp`]: the QP data path ([`Mlx5Qp`]): buffer, capabilities, posting.
//! - [`srq`]: the SRQ data path ([`Mlx5Srq`]).
//!
//! Facts from rdma-core v44 `providers/mlx5` (`verbs.c`: sizing and create; `qp.c`: posting
//! and doorbells; `srq.c`: the SRQ free list) and the kernel's `hw/mlx5/qp.c` (what it takes
//! from the create driver data); see `docs/mlx5.md`. The byte-level behaviour is proven
//! against libmlx5 itself by the oracle (`cargo xtask mlx5-oracle`).

pub mod av;
pub mod doorbell;
pub mod qp;
pub mod registry;
pub mod sizing;
pub mod srq;
pub mod wqe;

#[cfg(test)]
mod tests;

pub use av::*;
pub use doorbell::*;
pub use qp::*;
pub use registry::*;
pub use sizing::*;
pub use srq::*;
pub use wqe::*;
