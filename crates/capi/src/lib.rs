//! # rverbs-capi
//!
//! rverbs behind rdma-core's C ABI: built as `libibverbs.so.1` (rdma-core's soname and symbol
//! versions) so that unmodified programs linked against libibverbs run on rverbs, and as the
//! static archive `librverbs.a` for fully static C programs. `cargo xtask capi` builds both
//! and checks the exported symbol versions against what rdma-core's tools import;
//! `docs/capi.md` lists what works.
//!
//! The structures C callers touch directly ([`abi`]) are byte-exact copies of rdma-core's;
//! each one is the first field of a Rust object that owns the rverbs object behind it, so a
//! pointer handed to C leads back to its owner. The data path (`ibv_post_send`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`, … — inline functions in `verbs.h`) reaches us through
//! the context's ops table.
//!
//! Error conventions are rdma-core's: constructors return NULL and set `errno`; destroy,
//! modify, query and post calls return a positive errno; `ibv_poll_cq` returns the number of
//! completions (negative on error); `ibv_get_cq_event` and `ibv_query_gid` return -1 and set
//! `errno`.
//!
//! Panics: every exported function is `extern "C"`, and unwinding out of such a function
//! aborts the process (Rust 1.81 and later): a bug in this library ends the program like a
//! failed assertion in C would, it never unwinds into C frames.

#![allow(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod abi;
#[macro_use]
mod symver;
pub mod cma;
pub mod cq_ex;
pub mod mw;
pub mod qp_ex;
pub mod verbs;
