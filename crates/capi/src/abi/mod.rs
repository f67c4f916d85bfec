//! The C structures of `<infiniband/verbs.h>`, `<infiniband/sa.h>` and `<rdma/rdma_cma.h>`
//! that callers read or write directly, laid out byte for byte as rdma-core's headers declare
//! them (x86-64 and other LP64 Linux targets).
//! `tests/layout.rs` compiles a probe against the installed libibverbs-dev headers and checks
//! every size and field offset declared here.
//!
//! Field names follow the C names so that the probe and readers can match them one to one.
//! Enumerations are plain integers (`u32`/`i32`): a C caller may store any value in them.
//! One module per header (`verbs.h` in two: devices and contexts, then the objects).

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

mod device;
mod efadv;
mod layout;
mod queues;
mod rdma_cma;
mod sa;

pub use device::*;
pub use efadv::*;
pub use layout::*;
pub use queues::*;
pub use rdma_cma::*;
pub use sa::*;
