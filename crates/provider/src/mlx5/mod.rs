//! mlx5 (ConnectX-4 and later): the CQ data path, spoken directly — no libmlx5.
//!
//! - [`abi`]: the driver data of `include/rdma/mlx5-abi.h` (layout-checked against the header)
//!   and the device numbers the CQ needs.
//! - [`context`]: the alloc_ucontext request and the parser of its response.
//! - [`cq`]: the CQ buffer and doorbell record we allocate, the CREATE_CQ driver data, the
//!   poller ([`Mlx5Cq::poll`], [`Mlx5Cq::iter`]) and arming ([`Mlx5Cq::arm`]).
//! - [`cqe`]: the CQE64 view and its translation into a
//!   [`WorkCompletion`](rverbs_uverbs::WorkCompletion).
//!
//! No mlx5 hardware was available while this was written: it is built from the ABI header,
//! rdma-core's and the kernel's public sources, and proven on byte-exact CQE fixtures and a
//! simulated device (see `docs/mlx5.md`).

// Raw kernel structures and numbers, named field for field as in the uapi headers they are
// layout-checked against: those headers are their documentation.
#[allow(missing_docs)]
pub mod abi;
mod barrier;
pub mod context;
pub mod cq;
pub mod cqe;
pub mod driver;
pub mod uar;
pub mod wq;

pub use context::{Mlx5ContextInfo, Mlx5ContextUdata};
pub use cq::{ring_entries, CqBuf, CqIter, CqeSize, Mlx5Cq, UarPage};
pub use cqe::{
    parse_cqe, parse_cqe_into, Cqe64, CqeFormat, CqeOpcode, CqeSyndrome, ParseFault, WorkQueue,
    WqeOpcode, WqeRef, WrIdLookup,
};

use rverbs_uverbs::raw_newtype as mlx5_newtype;
