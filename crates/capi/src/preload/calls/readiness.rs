//! Readiness: `poll`, `ppoll`, `select`, `pselect` (and what `epoll` shares with them).

use std::sync::Arc;
use std::time::Instant;

use libc::{c_int, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};

use crate::ibverbs::set_errno;
use crate::preload::real::real;
use crate::preload::{errno, forksafe, get, maybe, Sock};
use crate::rsocket as r;

/// Runs `rpoll` over `fds` with the table's numbers replaced by their rsockets (kept alive
/// for the call); the results go back into `fds`.
pub(crate) fn poll_translated(fds: &mut [pollfd], timeout: c_int) -> c_int {
    let socks: Vec<Option<Arc<Sock>>> = fds.iter().map(|p| get(p.fd)).collect();
    let mut tr: Vec<pollfd> = fds
        .iter()
        .zip(&socks)
        .map(|(p, s)| pollfd {
            fd: s.as_ref().map_or(p.fd, |s| s.rs),
            events: p.events,
            revents: 0,
        })
        .collect();
    // SAFETY: [buf] our own array of tr.len() pollfds.
    let n = unsafe { r::rpoll(tr.as_mut_ptr(), tr.len() as nfds_t, timeout) };
    if n >= 0 {
        for (p, t) in fds.iter_mut().zip(&tr) {
            p.revents = t.revents;
        }
    }
    n
}

/// The milliseconds of a `timespec` (NULL: -1, forever), rounded up.
///
/// # Safety
/// \[in\] `ts` NULL or a `timespec`.
unsafe fn ms_of(ts: *const timespec) -> Result<c_int, ()> {
    if ts.is_null() {
        return Ok(-1);
    }
    // SAFETY: [in] as this function's contract.
    let t = unsafe { ts.read_unaligned() };
    if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
        return Err(());
    }
    let ms = (t.tv_sec as i128) * 1000 + (t.tv_nsec as i128 + 999_999) / 1_000_000;
    Ok(ms.min(c_int::MAX as i128) as c_int)
}

/// `poll(2)`: with a table number among `fds`, `rpoll` over them all; else the next `poll`.
///
/// # Safety
/// \[buf\] `fds` NULL or `nfds` readable and writable `pollfd`s; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() || nfds == 0 || nfds > 1 << 20 {
        // SAFETY: as this function's contract.
        return unsafe { (real().poll)(fds, nfds, timeout) };
    }
    // SAFETY: [buf] as this function's contract: nfds pollfds, ours for the call.
    let v = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
    for p in v.iter() {
        forksafe::resolve(p.fd);
    }
    if !v.iter().any(|p| maybe(p.fd)) {
        // SAFETY: as this function's contract.
        return unsafe { (real().poll)(fds, nfds, timeout) };
    }
    poll_translated(v, timeout)
}

/// Runs `f` with the thread's signal mask `mask` (NULL: unchanged), then restores it. Not
/// atomic as `ppoll`'s and `pselect`'s are: a signal the mask unblocks that arrives before
/// the wait starts is handled then, and the wait runs its full time.
///
/// # Safety
/// \[in\] `mask` NULL or a `sigset_t`.
pub(crate) unsafe fn with_mask(mask: *const sigset_t, f: impl FnOnce() -> c_int) -> c_int {
    if mask.is_null() {
        return f();
    }
    // SAFETY: all-zero bytes are a sigset_t.
    let mut old: sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: [in] mask; [out] old, ours.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) };
    let n = f();
    let e = errno();
    // SAFETY: [in] old, the mask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    set_errno(e);
    n
}

/// `ppoll(2)`: as [`poll`], the timeout a `timespec`, `sigmask` set around the wait.
///
/// # Safety
/// As [`poll`]; \[in\] `ts` and `sigmask` NULL or their types.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    ts: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    let plain = fds.is_null() || nfds == 0 || nfds > 1 << 20 || {
        // SAFETY: [buf] as this function's contract.
        let v = unsafe { std::slice::from_raw_parts(fds, nfds as usize) };
        for p in v {
            forksafe::resolve(p.fd);
        }
        !v.iter().any(|p| maybe(p.fd))
    };
    if plain {
        // SAFETY: as this function's contract.
        return unsafe { (real().ppoll)(fds, nfds, ts, sigmask) };
    }
    // SAFETY: [in] as this function's contract.
    let Ok(ms) = (unsafe { ms_of(ts) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: [buf] as this function's contract: nfds pollfds, ours for the call.
    let v = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
    // SAFETY: [in] as this function's contract.
    unsafe { with_mask(sigmask, || poll_translated(v, ms)) }
}

/// The `select` work over rsockets: the sets as pollfds, [`poll_translated`], the sets
/// rewritten. `None` when no table number is in the sets (the caller asks the next
/// definition).
///
/// # Safety
/// \[out\] each set NULL or an `fd_set`; `nfds` at most `FD_SETSIZE`.
unsafe fn select_translated(
    nfds: c_int,
    sets: [*mut fd_set; 3],
    ms: c_int,
    mask: *const sigset_t,
) -> Option<c_int> {
    let mut fds = Vec::new();
    let mut any = false;
    for fd in 0..nfds {
        let mut events = 0;
        for (set, ev) in sets
            .iter()
            .zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI])
        {
            // SAFETY: [out] a non-NULL set is an fd_set; fd < nfds <= FD_SETSIZE.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, *set) } {
                events |= ev;
            }
        }
        if events != 0 {
            forksafe::resolve(fd);
            any |= maybe(fd);
            fds.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    if !any {
        return None;
    }
    // SAFETY: [in] mask as the caller's contract.
    let n = unsafe { with_mask(mask, || poll_translated(&mut fds, ms)) };
    if n < 0 {
        return Some(n);
    }
    if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        set_errno(libc::EBADF);
        return Some(-1);
    }
    for set in sets.iter().filter(|s| !s.is_null()) {
        // SAFETY: [out] a non-NULL set is an fd_set.
        unsafe { libc::FD_ZERO(*set) };
    }
    let mut count = 0;
    let kinds = [
        libc::POLLIN | libc::POLLHUP | libc::POLLERR,
        libc::POLLOUT | libc::POLLERR,
        libc::POLLPRI,
    ];
    for p in &fds {
        for ((set, ev), want) in
            sets.iter()
                .zip(kinds)
                .zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI])
        {
            if !set.is_null() && p.events & want != 0 && p.revents & ev != 0 {
                // SAFETY: [out] a non-NULL set is an fd_set; p.fd < nfds.
                unsafe { libc::FD_SET(p.fd, *set) };
                count += 1;
            }
        }
    }
    Some(count)
}

/// `select(2)`: with a table number in the sets, [`poll`]'s work over them (an error or
/// hangup counts as readable, an error as writable, as Linux's select); `timeout` is
/// updated to the time left, as Linux does. Else the next `select`.
///
/// # Safety
/// \[out\] each set NULL or an `fd_set`; `timeout` NULL or a `timeval`; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    let rl = real();
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        // SAFETY: as this function's contract.
        return unsafe { (rl.select)(nfds, readfds, writefds, exceptfds, timeout) };
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: [out] timeout is a timeval.
        let t = unsafe { timeout.read_unaligned() };
        if t.tv_sec < 0 || !(0..1_000_000).contains(&t.tv_usec) {
            set_errno(libc::EINVAL);
            return -1;
        }
        ((t.tv_sec as i128) * 1000 + (t.tv_usec as i128 + 999) / 1000).min(c_int::MAX as i128)
            as c_int
    };
    let t0 = Instant::now();
    let sets = [readfds, writefds, exceptfds];
    // SAFETY: [out] as this function's contract; nfds checked.
    match unsafe { select_translated(nfds, sets, ms, std::ptr::null()) } {
        None => {
            // SAFETY: as this function's contract.
            unsafe { (rl.select)(nfds, readfds, writefds, exceptfds, timeout) }
        }
        Some(n) => {
            if !timeout.is_null() && n >= 0 {
                let left = std::time::Duration::from_millis(ms as u64).saturating_sub(t0.elapsed());
                // SAFETY: [out] timeout is a timeval.
                let mut tv: timeval = unsafe { timeout.read_unaligned() };
                tv.tv_sec = left.as_secs() as _;
                tv.tv_usec = left.subsec_micros() as _;
                // SAFETY: [out] timeout is a timeval.
                unsafe { timeout.write_unaligned(tv) };
            }
            n
        }
    }
}

/// `pselect(2)`: as [`select`], the timeout a `timespec` (not updated), `sigmask` set
/// around the wait.
///
/// # Safety
/// As [`select`]; \[in\] `ts`, `sigmask` NULL or their types.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    ts: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    let rl = real();
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        // SAFETY: as this function's contract.
        return unsafe { (rl.pselect)(nfds, readfds, writefds, exceptfds, ts, sigmask) };
    }
    // SAFETY: [in] as this function's contract.
    let Ok(ms) = (unsafe { ms_of(ts) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let sets = [readfds, writefds, exceptfds];
    // SAFETY: [out] [in] as this function's contract; nfds checked.
    match unsafe { select_translated(nfds, sets, ms, sigmask) } {
        // SAFETY: as this function's contract.
        None => unsafe { (rl.pselect)(nfds, readfds, writefds, exceptfds, ts, sigmask) },
        Some(n) => n,
    }
}
