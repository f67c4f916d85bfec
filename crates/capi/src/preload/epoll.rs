//! `epoll_*` with rsockets among the watched fds.
//!
//! An rsocket's readiness is its stream's (credits, ring space, received data), not an fd's,
//! so the kernel's epoll cannot watch it. As rdma-core's `repoll`, the rsockets of an epoll
//! set are kept here, beside the kernel's set (which holds every other fd): `epoll_wait` on
//! a set with rsockets `rpoll`s those rsockets together with the epoll fd itself (readable
//! when a kernel member is ready), reports the ready rsockets, then takes what the kernel's
//! set has without waiting. Level-triggered: `EPOLLET` is served as level-triggered (a
//! program that reads until `EAGAIN`, as edge-triggered ones must, sees no difference);
//! `EPOLLONESHOT` disarms the member once reported, until `EPOLL_CTL_MOD`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event, pollfd, sigset_t};

use super::calls::{poll_translated, with_mask};
use super::get;
use super::real::real;
use crate::ibverbs::set_errno;

/// The rsocket members of each epoll set: epoll fd → (program's fd → its event).
pub(super) type Sets = BTreeMap<c_int, BTreeMap<c_int, epoll_event>>;

static SETS: Mutex<Sets> = Mutex::new(BTreeMap::new());

/// Set once any set got an rsocket: until then no call takes the lock.
static ANY: AtomicBool = AtomicBool::new(false);

pub(super) fn sets() -> MutexGuard<'static, Sets> {
    SETS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `fd` was closed: it leaves every set, and, if it was an epoll fd, its set goes.
pub(crate) fn forget(fd: c_int) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let mut s = sets();
    s.remove(&fd);
    for m in s.values_mut() {
        m.remove(&fd);
    }
}

fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// `epoll_ctl(2)`: an rsocket is added to, changed in or deleted from this module's half of
/// the set (-1 and `EEXIST`, `ENOENT`, `EFAULT` for a NULL event, `EINVAL` for another `op`
/// or an `epfd` equal to `fd`, `EBADF` for an `epfd` that is not open); any other fd goes to
/// the next `epoll_ctl`. An rsocket the kernel's set holds (a fork-mode socket added before
/// its switch) is deleted there by `EPOLL_CTL_DEL`, and moved here by `EPOLL_CTL_MOD`.
///
/// # Safety
/// \[in\] `event` NULL or an `epoll_event` (NULL allowed for `EPOLL_CTL_DEL`); \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn epoll_ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    event: *mut epoll_event,
) -> c_int {
    if op != libc::EPOLL_CTL_DEL {
        // A fork-mode socket moves first: an rsocket is watched in this module's half.
        super::forksafe::resolve(fd);
    }
    // An rsocket, or a number added while it was one (it fell back to TCP since: it stays in
    // this module's half until deleted or closed, and is waited on as the plain fd it is).
    let ours = get(fd).is_some()
        || (ANY.load(Ordering::Acquire) && sets().get(&epfd).is_some_and(|m| m.contains_key(&fd)));
    if !ours {
        // SAFETY: [in] as this function's contract.
        return unsafe { (real().epoll_ctl)(epfd, op, fd, event) };
    }
    if epfd == fd {
        return fail(libc::EINVAL);
    }
    // SAFETY: integers only: is epfd an open fd?
    if unsafe { (real().fcntl)(epfd, libc::F_GETFD) } < 0 {
        return fail(libc::EBADF);
    }
    let ev = if op == libc::EPOLL_CTL_DEL {
        None
    } else if event.is_null() {
        return fail(libc::EFAULT);
    } else {
        // SAFETY: [in] a non-NULL event is an epoll_event.
        Some(unsafe { event.read_unaligned() })
    };
    let mut s = sets();
    let m = s.entry(epfd).or_default();
    if (op == libc::EPOLL_CTL_MOD || op == libc::EPOLL_CTL_DEL) && !m.contains_key(&fd) {
        // A fork-mode socket added to the kernel's set while still TCP, and switched since:
        // the kernel's set holds it (its placeholder is the same file), this half does not.
        // DEL goes to the kernel; MOD takes it out of the kernel's set and adds it here.
        // SAFETY: [in] event NULL or an epoll_event, as this function's contract.
        let ret = unsafe { (real().epoll_ctl)(epfd, libc::EPOLL_CTL_DEL, fd, event) };
        if ret < 0 || op == libc::EPOLL_CTL_DEL {
            return ret;
        }
    }
    match (op, ev) {
        (libc::EPOLL_CTL_ADD, Some(ev)) => {
            if m.contains_key(&fd) {
                return fail(libc::EEXIST);
            }
            m.insert(fd, ev);
            ANY.store(true, Ordering::Release);
        }
        (libc::EPOLL_CTL_MOD, Some(ev)) => {
            m.insert(fd, ev);
            ANY.store(true, Ordering::Release);
        }
        (libc::EPOLL_CTL_DEL, _) => {
            if m.remove(&fd).is_none() {
                return fail(libc::ENOENT);
            }
        }
        _ => return fail(libc::EINVAL),
    }
    0
}

/// `epoll_wait(2)`: [`epoll_pwait`] without a signal mask.
///
/// # Safety
/// As [`epoll_pwait`].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn epoll_wait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { epoll_pwait(epfd, events, maxevents, timeout, std::ptr::null()) }
}

/// `epoll_pwait(2)`: on a set with rsockets, the module's wait (see its doc); else the next
/// `epoll_pwait`.
///
/// # Safety
/// \[out\] `events` with `maxevents` writable `epoll_event`s; \[in\] `sigmask` NULL or a
/// `sigset_t`; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: c_int,
    sigmask: *const sigset_t,
) -> c_int {
    let members: Vec<(c_int, epoll_event)> = if ANY.load(Ordering::Acquire) {
        sets()
            .get(&epfd)
            .map(|m| {
                m.iter()
                    .filter(|(_, v)| v.events != 0)
                    .map(|(k, v)| (*k, *v))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    if members.is_empty() {
        // SAFETY: as this function's contract.
        return unsafe { (real().epoll_pwait)(epfd, events, maxevents, timeout, sigmask) };
    }
    if maxevents <= 0 {
        return fail(libc::EINVAL);
    }
    if events.is_null() {
        return fail(libc::EFAULT);
    }
    let max = maxevents as usize;
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let mut pf: Vec<pollfd> = std::iter::once(pollfd {
            fd: epfd,
            events: libc::POLLIN,
            revents: 0,
        })
        .chain(members.iter().map(|(fd, ev)| pollfd {
            fd: *fd,
            // The poll bits of an epoll mask have poll's values.
            events: (ev.events & (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLPRI) as u32) as i16,
            revents: 0,
        }))
        .collect();
        let wait = match deadline {
            None => -1,
            Some(d) => d
                .saturating_duration_since(Instant::now())
                .as_millis()
                .min(c_int::MAX as u128) as c_int,
        };
        // SAFETY: [in] sigmask as this function's contract.
        let n = unsafe { with_mask(sigmask, || poll_translated(&mut pf, wait)) };
        if n < 0 {
            return n;
        }
        let mut out = 0usize;
        let mut oneshot = Vec::new();
        for (p, (fd, ev)) in pf[1..].iter().zip(&members) {
            let mask = (ev.events as i16) | libc::POLLHUP | libc::POLLERR;
            let got = p.revents & mask;
            if got != 0 && out < max {
                let e = epoll_event {
                    events: got as u16 as u32,
                    u64: ev.u64,
                };
                // SAFETY: [out] out < maxevents entries of events.
                unsafe { events.add(out).write_unaligned(e) };
                out += 1;
                if ev.events & libc::EPOLLONESHOT as u32 != 0 {
                    oneshot.push(*fd);
                }
            }
        }
        if !oneshot.is_empty() {
            if let Some(m) = sets().get_mut(&epfd) {
                for fd in oneshot {
                    if let Some(e) = m.get_mut(&fd) {
                        e.events = 0;
                    }
                }
            }
        }
        if pf[0].revents & libc::POLLIN != 0 && out < max {
            // SAFETY: [out] the entries from `out` on, `max - out` of them.
            let k = unsafe {
                (real().epoll_pwait)(
                    epfd,
                    events.add(out),
                    (max - out) as c_int,
                    0,
                    std::ptr::null(),
                )
            };
            if k > 0 {
                out += k as usize;
            }
        }
        if out > 0 || wait == 0 {
            return out as c_int;
        }
    }
}
