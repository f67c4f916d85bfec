//! The exported `ibv_*` functions and the ops-table entries behind the inline functions of
//! `verbs.h`.
//!
//! Every C object is the first field (`repr(C)`) of the Rust object that owns the rverbs
//! object behind it ([`CDevice`], [`CContext`], [`CPd`], …), allocated with `Box` and handed
//! to C as a pointer to that first field; the destroy call turns it back into the `Box`.
//! Functions taking these pointers are `unsafe extern "C"`: the caller (C) promises they came
//! from this library and are still alive, as libibverbs' callers do — the crate root's
//! *Safety vocabulary* names these contracts (\[object\], \[destroy\], \[c-struct\], …).
//! The owners are reached only through shared references, by `FromC::from_c` (`handle.rs`),
//! which refuses a NULL object pointer (`EINVAL`). One module per object.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsFd, AsRawFd};
use std::ptr::{self, null_mut};
use std::sync::{Arc, Mutex, OnceLock};

use rverbs_uverbs::ah::{Ah, AhAttr, GlobalRoute};
use rverbs_uverbs::channel::CompChannel;
use rverbs_uverbs::context::Context;
use rverbs_uverbs::cq::{Cq, CqOptions};
use rverbs_uverbs::device::Device;
use rverbs_uverbs::gid::{Gid, GidType};
use rverbs_uverbs::mr::{register_raw_iova, AccessFlags, RawMr};
use rverbs_uverbs::pd::Pd;
use rverbs_uverbs::port::Mtu;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::{Qp, QpAttr, QpAttrMask, QpInit, QpState, QpType};
use rverbs_uverbs::srq::{Srq, SrqAttr};
use rverbs_uverbs::{RawWc, RecvWr, SendFlags, SendOp, SendWr, Sge, WcFlags, WorkCompletion};

mod ah;
mod async_event;
mod channel;
mod context;
mod cq;
mod cq_ex;
mod device;
mod dmabuf;
mod efadv;
mod kern;
mod mr;
mod mr_ex;
mod mw;
mod pd;
mod qp;
mod qp_ex;
mod registry;
mod srq;
mod strings;
mod unsupported;

pub use ah::*;
pub use async_event::*;
pub use channel::*;
pub use context::*;
pub use cq::*;
pub use cq_ex::*;
pub use device::*;
pub use dmabuf::*;
pub use efadv::*;
pub use kern::*;
pub use mr::*;
pub use mr_ex::*;
pub use mw::*;
pub use pd::*;
pub use qp::*;
pub use qp_ex::*;
use registry::*;
pub use srq::*;
pub use strings::*;
pub use unsupported::*;

use crate::abi::*;
use crate::events::{add_to_c_counter, EventCount};
use crate::handle::{from_c, FromC};

// ---------------------------------------------------------------------------------------
// errno and diagnostics (`crate::errno`, a leaf module: `handle.rs` needs them too)

pub use crate::errno::errno_of;
pub(crate) use crate::errno::{fail, null_arg, set_errno};

/// Runs `f`, which writes fields of C-visible structures after their object's creation,
/// while no other thread of this library does (\[c-struct\]: C's own reads of those fields
/// are C's business, as with libibverbs; ours do not race among themselves).
pub(crate) fn c_write<R>(f: impl FnOnce() -> R) -> R {
    static LOCK: Mutex<()> = Mutex::new(());
    let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    f()
}

/// NULL with `errno` set: how constructors fail.
fn null_with<T>(e: &io::Error) -> *mut T {
    set_errno(fail(e));
    null_mut()
}

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

// ---------------------------------------------------------------------------------------
// Devices
