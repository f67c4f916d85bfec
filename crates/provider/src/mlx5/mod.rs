//! mlx5 (ConnectX-4 and later), spoken directly — no libmlx5: context, CQs, RC/UC/UD QPs,
//! SRQs and AHs, posting and polling.
//!
//! - [`abi`]: the driver data of `include/rdma/mlx5-abi.h` and the numbers of
//!   `mlx5_user_ioctl_cmds.h` (layout-checked against the installed headers).
//! - [`context`]: the alloc_ucontext request and the parser of its response.
//! - [`driver`]: [`Mlx5Driver`](driver::Mlx5Driver), the provider seam: opens a context,
//!   creates the data path of each CQ, QP, SRQ and AH.
//! - [`uar`]: dynamic UARs (a kernel answering `tot_bfregs` 0): allocation through the UAR
//!   object, libmlx5's assignment of registers to QPs.
//! - [`cq`]: the CQ buffer and doorbell record we allocate, the CREATE_CQ driver data, the
//!   poller ([`Mlx5Cq::poll`], [`Mlx5Cq::iter`]) and arming ([`Mlx5Cq::arm`]).
//! - [`cqe`]: the CQE64 view and its translation into a
//!   [`WorkCompletion`](rverbs_uverbs::WorkCompletion).
//! - [`wq`]: QP and SRQ sizing, buffers, WQE building, doorbells and BlueFlame, AVs.
//!
//! Proven without hardware against libmlx5 itself (the oracle), byte-exact CQE fixtures and
//! a simulated device: see `docs/mlx5.md`, which also lists what only a ConnectX can prove.

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
pub(crate) mod barrier;
pub mod context;
pub mod cq;
pub mod cqe;
pub mod driver;
pub mod uar;
pub mod wq;

pub use context::Mlx5ContextInfo;
// What the tests, benchmarks and fuzz targets name at this level.
#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
pub use context::Mlx5ContextUdata;
#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
pub use cq::{CqBuf, CqeSize, Mlx5Cq, UarPage};
#[cfg(any(test, feature = "internals", rverbs_fuzzing))]
pub use cqe::{parse_cqe, Cqe64, ParseFault, WqeRef};
#[cfg(any(test, feature = "internals"))]
pub use cqe::{WorkQueue, WrIdLookup};

use rverbs_uverbs::raw_newtype as mlx5_newtype;
