//! The interposed socket calls (C names with the `preload` feature, see the module's doc):
//! a number the table holds goes to its rsocket (`crate::rsocket`), any other to the next
//! definition untouched. Error convention: the calls' own (-1 and `errno`).
//!
//! The parts, by what a call does: `lifecycle` (`socket` … `close`, the `dup` family),
//! `options` (`fcntl`, `ioctl`, socket options and names), `data` (the read and write
//! family, `sendfile`), `readiness` (`poll`, `select` and their `p` forms). This file holds
//! the helpers they share (the log, which sockets are TCP over IP, loopback, falling back to
//! TCP); which sockets become rsockets at all is `super::config`.

use libc::{c_int, sockaddr, socklen_t};

use super::{errno, remove};
use crate::ibverbs::set_errno;
use crate::rsocket as r;

mod data;
mod lifecycle;
mod options;
mod readiness;

pub use data::*;
pub use lifecycle::*;
pub use options::*;
pub use readiness::*;

/// Logs `what` when `RVERBS_CAPI_LOG` is set (as the rest of the library).
pub(crate) fn log(what: &str) {
    if std::env::var_os("RVERBS_CAPI_LOG").is_some() {
        eprintln!("librspreload: {what}");
    }
}

/// Whether `(domain, type, protocol)` asks for a TCP stream over IP.
fn tcp_stream(domain: c_int, type_: c_int, protocol: c_int) -> bool {
    (domain == libc::AF_INET || domain == libc::AF_INET6)
        && type_ & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) == libc::SOCK_STREAM
        && (protocol == 0 || protocol == libc::IPPROTO_TCP)
}

/// Whether C's `(addr, len)` is a loopback address (127.0.0.0/8, `::1`, `::ffff:127.x`):
/// such connections stay TCP.
///
/// # Safety
/// \[buf\] `addr` NULL or `len` readable bytes.
pub(crate) unsafe fn loopback(addr: *const sockaddr, len: socklen_t) -> bool {
    // SAFETY: [buf] as this function's contract.
    match unsafe { r::sockaddr_in(addr, len) } {
        Ok(std::net::SocketAddr::V4(a)) => a.ip().is_loopback(),
        Ok(std::net::SocketAddr::V6(a)) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// Gives up the rsocket of `fd`: the number is its real TCP socket from now on.
fn fall_back(fd: c_int, why: &str) {
    let saved = errno();
    if let Some(s) = remove(fd) {
        log(&format!("fd {fd}: plain TCP ({why})"));
        drop(s);
    }
    set_errno(saved);
}

/// Sets the preload's `RS_SQ_SIZE`, `RS_RQ_SIZE`, `RS_INLINE` on the rsocket `rs` (failure
/// keeps the default, as rdma-core's preload).
pub(crate) fn apply_env_options(rs: c_int) {
    for &(opt, v) in super::config::env_options() {
        if let Some(v) = v {
            // SAFETY: [buf] a c_int of ours, its size given.
            unsafe {
                r::rsetsockopt(
                    rs,
                    r::SOL_RDMA,
                    opt,
                    (&v as *const c_int).cast(),
                    size_of::<c_int>() as socklen_t,
                )
            };
        }
    }
}

/// The rsocket behind `fd` for a call that moves data or waits for it: a fork-mode socket
/// (`RDMAV_FORK_SAFE`) switches first (`super::forksafe`).
pub(crate) fn get_io(fd: c_int) -> Option<std::sync::Arc<super::Sock>> {
    super::forksafe::resolve(fd);
    super::get(fd)
}
