//! `fork(2)` with rsockets open: the child leaves the parent's rsockets alone.
//!
//! An rsocket's queue pair, completion queue, rings and rdma_cm id are kernel objects of
//! files the child inherits (the verbs device and the rdma_cm), and the rxe/siw rings are
//! shared mappings: a child that read, wrote, polled or closed its copy would post to, steal
//! completions from, or destroy the *parent's* connection (rdma-core's preload, outside its
//! `RDMAV_FORK_SAFE` mode, does exactly that). So, registered with `pthread_atfork` when
//! the table first gets a number:
//!
//! - **prepare** (in the forking thread) takes the epoll sets', the table's, the
//!   rsocket registry's and the fork mode's (`forksafe`) locks, in that order (the order every other path takes them in, if
//!   it takes more than one), so that no other thread holds one at the fork;
//! - **parent** releases them;
//! - **child** empties the table *without dropping* its entries (a drop would `rclose` the
//!   parent's rsocket), clears every mark, then releases the locks. Each inherited number
//!   is from then on what the table kept it as: its placeholder, a real TCP socket that
//!   never connected (bound, for a listener). So in the child a read fails with `ENOTCONN`,
//!   a write with `EPIPE` (and `SIGPIPE` where not ignored), `poll` reports `POLLHUP`, an
//!   `accept` fails with `EINVAL`, and `close` closes only the child's placeholder: the
//!   parent's connection and listener go on untouched. `RVERBS_CAPI_LOG=1` names how many
//!   were left to the parent. Sockets the child makes after the fork are rsockets as usual.
//!   The fork mode's sockets (`RDMAV_FORK_SAFE`, `forksafe`) are still TCP connections: the
//!   child keeps them, and whichever process first reads or writes one moves it to an
//!   rsocket; a switch another thread of the parent was making at the fork is forgotten in
//!   the child (the parent finishes it), and the child closes its copies of the switches'
//!   machine-wide lock file descriptors (a copy left open would keep the lock held).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, MutexGuard, Once, RwLockWriteGuard};

use libc::c_int;

use super::{epoll, Sock, MARKS};

/// The locks prepare took, released by parent or child (the same thread: the child's only
/// thread is the copy of the forking one).
#[allow(clippy::type_complexity)]
struct Held {
    // Dropped in reverse order of taking: fields drop top to bottom.
    pending: MutexGuard<'static, BTreeMap<c_int, super::forksafe::State>>,
    _registry: RwLockWriteGuard<'static, Vec<Option<Arc<crate::rsocket::RSocket>>>>,
    table: MutexGuard<'static, BTreeMap<c_int, Arc<Sock>>>,
    _sets: MutexGuard<'static, epoll::Sets>,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

extern "C" fn prepare() {
    let sets = epoll::sets();
    let table = super::table();
    let registry = crate::rsocket::registry_mut();
    let pending = super::forksafe::pending();
    HELD.with(|h| {
        *h.borrow_mut() = Some(Held {
            pending,
            _registry: registry,
            table,
            _sets: sets,
        })
    });
}

extern "C" fn parent() {
    HELD.with(|h| drop(h.borrow_mut().take()));
}

extern "C" fn child() {
    let saved = super::errno();
    super::forksafe::close_lock_fds_in_child();
    HELD.with(|h| {
        let Some(mut held) = h.borrow_mut().take() else {
            return;
        };
        let left = std::mem::take(&mut *held.table);
        MARKS.clear();
        let n = left.len();
        super::forksafe::child_after_fork(&mut held.pending);
        // The parent's: never closed from here (see the module's doc).
        std::mem::forget(left);
        drop(held);
        if n > 0 && LOG.get().copied().unwrap_or(false) {
            // Not `eprintln!`: another thread of the parent may have held stderr's lock.
            let m = format!(
                "librspreload: fork: {n} rsocket number(s) left to the parent; in this child \
                 they are unconnected TCP sockets\n"
            );
            // SAFETY: [buf] `m`'s bytes, its length.
            unsafe { (super::real::real().write)(2, m.as_ptr().cast(), m.len()) };
        }
    });
    crate::ibverbs::set_errno(saved);
}

/// `RVERBS_CAPI_LOG`, read at registration (the child must not read the environment: another
/// thread of the parent may have held its lock at the fork).
static LOG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Registers the handlers, once.
pub(crate) fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = LOG.set(std::env::var_os("RVERBS_CAPI_LOG").is_some());
        // SAFETY: three functions of this module with the C signature `void (*)(void)`, for
        // the life of the process.
        let e = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if e != 0 {
            eprintln!("librspreload: pthread_atfork failed ({e}): a forked child may disturb the parent's rsockets");
        }
    });
}
