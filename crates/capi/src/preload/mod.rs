//! `librspreload.so.1`: rsockets for unmodified socket programs (`LD_PRELOAD`).
//!
//! Built by `cargo xtask capi` from this crate with the `preload` feature, which gives the
//! functions of [`calls`] their C names (`socket`, `connect`, `read`, `poll`, …): preloaded,
//! they shadow glibc's. Without the feature they are ordinary Rust functions of this module
//! (the host tests call them so).
//!
//! **The fd table.** `socket(AF_INET or AF_INET6, SOCK_STREAM, 0 or IPPROTO_TCP)` makes a
//! real TCP socket *and* an rsocket; the program gets the real socket's number, and the table
//! maps that number to the rsocket. The real socket reserves the number (as rdma-core's
//! preload reserves one with `/dev/null`), answers `F_GETFD`/`F_SETFD` and `fstat`, and is
//! the fallback: `bind` binds it first (so the port is the program's in both port spaces and
//! an error is TCP's), options and `O_NONBLOCK` are mirrored onto it, and when the
//! connection cannot be an rsocket the table entry goes and the number *is* an ordinary TCP
//! socket from then on (no further cost):
//!
//! - `connect` to a loopback address (127.0.0.0/8, `::1`, `::ffff:127.x`), or whose
//!   `rconnect` fails (no RDMA device for the address, nobody listening on rsockets, …):
//!   the real `connect`;
//! - `listen` on a loopback address, or whose `rlisten` fails: the real `listen`.
//!
//! Every call on a number the table does not hold goes to the next definition
//! (`dlsym(RTLD_NEXT)`) untouched: files, pipes, Unix and UDP sockets, TCP sockets that fell
//! back. A bitmap of the numbers below 65536 that the table holds makes that check one
//! atomic load, without a lock (also from a signal handler). `dup`, `dup2`, `dup3` and
//! `fcntl(F_DUPFD)` of a table number share the rsocket, which is closed with the last
//! number (`close` of the others only forgets the number).
//!
//! Environment, as rdma-core's preload: `RS_SQ_SIZE`, `RS_RQ_SIZE`, `RS_INLINE` (the
//! rsockets' `RDMA_SQSIZE`, `RDMA_RQSIZE`, `RDMA_INLINE`), over the defaults of rsockets'
//! configuration files (`crate::rsocket`). `fork`: the child leaves the parent's rsockets
//! alone (`fork`'s module); rdma-core's `RDMAV_FORK_SAFE` mode (connections start on TCP and
//! move to rsockets on their first data call, after the fork) is `forksafe`'s.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use libc::c_int;

pub mod calls;
mod config;
pub mod epoll;
mod fork;
pub(crate) mod forksafe;
mod real;
#[cfg(test)]
mod tests;

pub use calls::*;
pub use epoll::*;

/// One rsocket behind one or more of the program's numbers (`dup`).
pub(crate) struct Sock {
    /// The rsocket's own number (`crate::rsocket`'s registry).
    pub rs: c_int,
    /// `AF_INET` or `AF_INET6` (an accepted rsocket's number is a socket of its listener's).
    pub domain: c_int,
}

impl Drop for Sock {
    fn drop(&mut self) {
        let saved = errno();
        // SAFETY: integers only; the rsocket is ours (made by the table's socket or accept).
        unsafe { crate::rsocket::rclose(self.rs) };
        crate::ibverbs::set_errno(saved);
    }
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// One bit per fd number below 65536, for a table behind a lock: set and cleared under the
/// table's lock, read without it, so a call on a number the table cannot hold costs one
/// atomic load (numbers from 65536 up are always "maybe").
pub(crate) struct FdMarks([AtomicU64; FdMarks::BELOW / 64]);

impl FdMarks {
    const BELOW: usize = 65536;

    pub(crate) const fn new() -> FdMarks {
        FdMarks([const { AtomicU64::new(0) }; FdMarks::BELOW / 64])
    }

    /// Marks `fd` (`on`) or clears its mark.
    pub(crate) fn set(&self, fd: c_int, on: bool) {
        if let Ok(i) = usize::try_from(fd) {
            if i < FdMarks::BELOW {
                let bit = 1u64 << (i % 64);
                if on {
                    self.0[i / 64].fetch_or(bit, Ordering::Release);
                } else {
                    self.0[i / 64].fetch_and(!bit, Ordering::Release);
                }
            }
        }
    }

    /// Clears every mark (a forked child's table starts empty).
    pub(crate) fn clear(&self) {
        for m in &self.0 {
            m.store(0, Ordering::Release);
        }
    }

    /// Whether the table may hold `fd` (a negative number: no; below 65536: its bit).
    pub(crate) fn maybe(&self, fd: c_int) -> bool {
        match usize::try_from(fd) {
            Err(_) => false,
            Ok(i) if i < FdMarks::BELOW => {
                self.0[i / 64].load(Ordering::Acquire) & (1u64 << (i % 64)) != 0
            }
            Ok(_) => true,
        }
    }
}

/// The rsocket table's marks.
static MARKS: FdMarks = FdMarks::new();

/// The program's numbers that are rsockets.
static TABLE: Mutex<BTreeMap<c_int, Arc<Sock>>> = Mutex::new(BTreeMap::new());

fn table() -> MutexGuard<'static, BTreeMap<c_int, Arc<Sock>>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

fn mark(fd: c_int, on: bool) {
    MARKS.set(fd, on);
}

/// Whether the table may hold `fd` (a negative number: no; below 65536: its bit).
pub(crate) fn maybe(fd: c_int) -> bool {
    MARKS.maybe(fd)
}

/// The rsocket behind the program's `fd`, if the table holds it.
pub(crate) fn get(fd: c_int) -> Option<Arc<Sock>> {
    if !maybe(fd) {
        return None;
    }
    table().get(&fd).cloned()
}

/// Puts `fd` → `s` into the table; what it held for `fd` before is returned (to drop
/// outside the lock).
pub(crate) fn insert(fd: c_int, s: Arc<Sock>) -> Option<Arc<Sock>> {
    fork::register();
    let mut t = table();
    mark(fd, true);
    t.insert(fd, s)
}

/// Takes `fd` out of the table (the caller drops it outside the lock: the last reference
/// closes the rsocket).
pub(crate) fn remove(fd: c_int) -> Option<Arc<Sock>> {
    if !maybe(fd) {
        return None;
    }
    let mut t = table();
    let s = t.remove(&fd);
    mark(fd, false);
    s
}
