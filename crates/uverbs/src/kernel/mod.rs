//! The kernel layer: what the verbs objects of this crate are built on, and not part of the
//! user's API.
//!
//! - [`abi`]: raw kernel structures and numbers (`include/rdma/*.h`), layout-checked.
//! - [`ioctl`]: a typed attribute builder for `RDMA_VERBS_IOCTL`.
//! - [`write`](mod@write): the legacy and extended write() commands.
//! - [`mapping`]: the one owner of memory mappings (every `mmap`/`munmap`).
//! - [`shared`]: copies in and out of memory someone outside Rust may touch.
//! - [`sync`]: the one lock of the data path.
//! - [`fd`]: `O_NONBLOCK` and waiting for readability, for every rverbs file descriptor.
//!
//! Nothing here imports a verbs object: the floor below the objects. It is public only with
//! the feature `internals`, which the crates of this workspace that speak the kernel ABI or
//! build a provider's rings turn on (`rverbs-provider`, `rverbs-cm`, `rverbs-stream`, the C
//! drop-in); users get the verbs objects and their value types from the crate root's modules.
//! Public with the feature means reachable from safe code of any crate in the build (Cargo
//! features are unified), so every item here keeps the promise every public item keeps:
//! whatever could break Rust's rules from safe code is `unsafe fn` with its contract, or not
//! public (docs/architecture.md, "Why this is sound"). Inventoried with the feature on:
//! `api/rverbs-uverbs+internals.txt`.

// Raw kernel structures and numbers, named field for field as in the uapi headers they are
// layout-checked against: those headers are their documentation.
#[allow(non_camel_case_types, missing_debug_implementations, missing_docs)]
pub mod abi;
pub mod fd;
pub mod ioctl;
pub mod mapping;
pub mod shared;
pub mod sync;
pub mod write;
