//! The exported `rdma_*` functions of librdmacm on `rverbs-cm`, sharing this library's verbs
//! objects: the `ibv_context`, `ibv_pd`, `ibv_cq`, `ibv_comp_channel` and `ibv_qp` an
//! `rdma_cm_id` exposes are made by the `ibv_*` functions of [`crate::ibverbs`], so the inline
//! functions of `rdma_verbs.h` (`rdma_reg_msgs`, `rdma_post_send`, `rdma_get_send_comp`, …)
//! reach rverbs through the same ops tables as any verbs caller.
//!
//! Each `rdma_cm_id` is the first field of a [`CCmId`] that owns the [`CmId`] behind it;
//! each `rdma_cm_event` the first field of a [`CEvent`] that owns the decoded [`CmEvent`]
//! (its private data stays valid until `rdma_ack_cm_event`). Devices are opened once per
//! node GUID, with one default PD each, and live until the process ends (as librdmacm's
//! device list).
//!
//! What librdmacm does on top of the kernel's events is done here too: an id with a QP has
//! it moved to INIT on creation (UD: to RTS), to RTR/RTS before `rdma_accept` and on
//! CONNECT_RESPONSE (which is then reported as ESTABLISHED after the RTU), and to ERR on
//! `rdma_disconnect`. Error conventions are librdmacm's: -1 with `errno`, constructors NULL
//! with `errno`.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::ptr::{self, null_mut};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rverbs_cm::{
    AddrHints, AddrInfo, CmEvent, CmEventKind, CmId, ConnParam, EventChannel, IpFamily,
    McJoinFlags, PortSpace, QpState, QpType, UdEventParam,
};
use rverbs_uverbs::gid::Gid;

mod addr;
mod addrinfo;
mod channel;
mod conn;
mod device;
mod endpoint;
mod event;
mod id;
mod multicast;
mod qp;
mod unsupported;

use addr::*;
pub use addrinfo::*;
pub use channel::*;
pub use conn::*;
pub use device::*;
pub use endpoint::*;
pub use event::*;
pub use id::*;
pub use multicast::*;
pub use qp::*;
pub use unsupported::*;

use crate::abi::*;
use crate::events::EventCount;
use crate::handle::{from_c, FromC};
use crate::ibverbs::{self, fail, null_arg, set_errno};

fn ret(r: io::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(fail(&e));
            -1
        }
    }
}

/// With `RVERBS_CAPI_LOG` set, one line on stderr per rdma_cm step (each event handed to C,
/// each accept, connect and disconnect, with its outcome): a hang's report then shows how far
/// each connection got.
fn trace(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("RVERBS_CAPI_LOG").is_some() {
        eprintln!("rverbs librdmacm: {what}");
    }
}

/// [`trace`]s `r` of `op` on the id at `id`, and passes it on.
fn traced(op: &str, id: *const c_void, r: io::Result<()>) -> io::Result<()> {
    match &r {
        Ok(()) => trace(format_args!("{op} id {id:p}: ok")),
        Err(e) => trace(format_args!("{op} id {id:p}: {e}")),
    }
    r
}

fn einval(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what.to_string())
}

fn from_errno(op: &str, r: c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::from_raw_os_error(r);
        Err(io::Error::new(e.kind(), format!("{op}: {e}")))
    }
}
