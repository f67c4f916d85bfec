//! # rverbs-cm
//!
//! The RDMA connection manager over `/dev/infiniband/rdma_cm` (the kernel's ucma ABI, version
//! 4), spoken directly: no librdmacm.
//!
//! - [`EventChannel`]: an open ucma file; events of its ids queue there ([`CmEvent`]).
//! - [`CmId`]: an rdma_cm id — bind / resolve_addr / resolve_route / listen / connect /
//!   accept / reject / disconnect / init_qp_attr / query / migrate / options. Without a
//!   channel an id is *synchronous*: each call waits for the event that completes it.
//! - [`getaddrinfo`] / [`create_ep`]: librdmacm's `rdma_getaddrinfo` / `rdma_create_ep`
//!   (without the QP, which the verbs layer creates on the returned id).
//! - `abi` (the raw ucma structures, layout-checked against `rdma_user_cm.h`): not the user's
//!   API, public only with the feature `internals` (for the C drop-in).
//!
//! See `docs/cm.md` for the design (events need no ack; destroy never waits; private-data
//! limits; what the kernel does and does not report).

#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

// `internal!` declares one item for the crates of this workspace, not for users: `pub` with
// this crate's feature `internals`, `pub(crate)` without it, so that it stays out of the user's
// API (api/rverbs-cm.txt). It is rverbs-uverbs' own (whose `cfg` is the calling crate's).
#[macro_use(internal)]
extern crate rverbs_uverbs;

// The ucma ABI: raw kernel structures and numbers, named field for field as in the uapi
// headers they are layout-checked against (those headers are their documentation). Not the
// user's API: public only with the feature `internals` (for the C drop-in and this crate's
// layout test), private otherwise.
#[cfg(feature = "internals")]
#[allow(non_camel_case_types, missing_docs)]
pub mod abi;
#[cfg(not(feature = "internals"))]
#[allow(non_camel_case_types, dead_code, unused_imports)]
mod abi;
mod addr;
mod addrinfo;
mod channel;
mod conn_param;
mod endpoint;
mod event;
// The fuzz targets' entry points: built for the fuzz targets (`--cfg rverbs_fuzzing`,
// set by `cargo xtask fuzz`) and for this crate's unit tests, which run them over the seeds.
#[cfg(any(test, rverbs_fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
mod id;
mod qp_attr;
mod query;
mod types;

#[cfg(test)]
mod encode_tests;

pub use addr::{CmAddr, Gid, IbAddr};
pub use addrinfo::{create_ep, getaddrinfo, AddrHints, AddrInfo, IpFamily, EP_RESOLVE_TIMEOUT};
internal! {
    pub use addrinfo::parse_service;
}
pub use channel::EventChannel;
internal! {
    pub use channel::{ABI_VERSION_PATH, DEVICE_PATH};
}
pub use conn_param::{ConnParam, DEFAULT_RETRY_COUNT, DEFAULT_RNR_RETRY_COUNT, FALLBACK_RD_ATOMIC};
pub use endpoint::{
    default_pd, CqOwnership, Drain, EndReason, Endpoint, EndpointAttr, OwnCqs, UserCqs, END_MARKER,
};
pub use event::{CmEvent, ConnEventParam, UdEventParam};
pub use id::CmId;
pub use query::{AddrQuery, GidQuery, PathRecord, RouteQuery};
pub use types::{CmEventKind, McJoinFlags, PortSpace, QpState, QpType, RejectReason};
internal! {
    pub use types::QpAttrMask;
}
