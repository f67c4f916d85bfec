//! `rpoll` and `rselect` over a mix of rsockets and ordinary fds.
//!
//! Each round asks every connected rsocket what it is ready for
//! ([`rverbs_stream::RdmaStream::poll_ready`], which arms the stream's readiness fd when
//! nothing asked for is ready), then `poll(2)`s the ordinary fds together with the
//! readiness fds of the rsockets (a listening rsocket: its rdma_cm channel fd) — without
//! waiting if an rsocket is ready. An rsocket's readiness fd that wakes the poll but finds
//! nothing ready starts another round; the timeout is the caller's in total.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libc::{c_int, c_short, nfds_t, pollfd};

use super::{fail, lookup, refuse, RSocket, Role};

/// What one entry of the caller's array is.
enum Entry {
    /// An ordinary fd (or a negative one, which poll ignores).
    Plain,
    /// An rsocket, kept alive for the call.
    Rs(Arc<RSocket>),
}

/// The revents of a connected rsocket for `events`, and whether its fd should be polled.
fn stream_revents(c: &rverbs_stream::RdmaStream, events: c_short) -> c_short {
    let want_in = events & libc::POLLIN != 0;
    let want_out = events & libc::POLLOUT != 0;
    match c.poll_ready(want_in, want_out) {
        Ok(r) => {
            let mut ev = 0;
            if want_in && r.readable {
                ev |= libc::POLLIN;
            }
            if want_out && r.writable {
                ev |= libc::POLLOUT;
            }
            if r.hangup {
                ev |= libc::POLLHUP;
            }
            if r.error {
                ev |= libc::POLLERR;
            }
            ev
        }
        Err(_) => libc::POLLERR,
    }
}

/// The work of `rpoll` on a copy of the caller's array: fills `revents`, returns the count
/// of entries with any, or an errno.
pub(crate) fn poll_fds(fds: &mut [pollfd], timeout: c_int) -> Result<c_int, c_int> {
    let entries: Vec<Entry> = fds
        .iter()
        .map(|p| match (p.fd >= 0).then(|| lookup(p.fd)).flatten() {
            Some(s) => Entry::Rs(s),
            None => Entry::Plain,
        })
        .collect();
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let mut sys: Vec<pollfd> = Vec::with_capacity(fds.len());
    let mut rs_rev: Vec<c_short> = vec![0; fds.len()];
    loop {
        sys.clear();
        let mut rs_ready = false;
        for (i, (p, e)) in fds.iter().zip(&entries).enumerate() {
            rs_rev[i] = 0;
            let q = match e {
                Entry::Plain => pollfd {
                    fd: p.fd,
                    events: p.events,
                    revents: 0,
                },
                Entry::Rs(s) => {
                    let st = s.lock();
                    match &st.role {
                        Role::Connected(c) => {
                            let c = c.clone();
                            drop(st);
                            rs_rev[i] = stream_revents(&c, p.events);
                            pollfd {
                                fd: c.as_fd().as_raw_fd(),
                                events: libc::POLLIN,
                                revents: 0,
                            }
                        }
                        Role::Listening(l) => pollfd {
                            fd: l.as_fd().as_raw_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        },
                        // Neither connected nor listening: as an unconnected TCP socket.
                        Role::New | Role::Bound(_) => {
                            rs_rev[i] = libc::POLLHUP | (p.events & libc::POLLOUT);
                            pollfd {
                                fd: -1,
                                events: 0,
                                revents: 0,
                            }
                        }
                    }
                }
            };
            rs_ready |= rs_rev[i] != 0;
            sys.push(q);
        }
        let wait = if rs_ready {
            0
        } else {
            match deadline {
                None => -1,
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .as_millis()
                    .min(c_int::MAX as u128) as c_int,
            }
        };
        // SAFETY: sys is a valid array of sys.len() pollfds, ours for the call; the fds of
        // rsockets are borrowed from streams and listeners that `entries` keeps alive.
        let n = unsafe { libc::poll(sys.as_mut_ptr(), sys.len() as nfds_t, wait) };
        if n < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        let mut count = 0;
        for (i, (p, e)) in fds.iter_mut().zip(&entries).enumerate() {
            p.revents = match e {
                Entry::Plain => sys[i].revents,
                Entry::Rs(s) => match &s.lock().role {
                    Role::Listening(_) => {
                        let r = sys[i].revents;
                        let mut ev = 0;
                        if r & libc::POLLIN != 0 {
                            ev |= p.events & libc::POLLIN;
                        }
                        ev | (r & (libc::POLLERR | libc::POLLHUP))
                    }
                    _ => rs_rev[i],
                },
            };
            count += (p.revents != 0) as c_int;
        }
        // A ready rsocket made count positive; wait 0 without one: the time is up.
        if count > 0 || wait == 0 {
            return Ok(count);
        }
    }
}

symver!(rpoll => "RDMACM_1.0");
/// `rpoll`: `poll(2)` over rsockets and ordinary fds together (see the module's doc); an
/// rsocket reports `POLLIN` (data, end of stream or an error to read), `POLLOUT` (credits
/// and ring space), `POLLHUP` (disconnected, or neither connected nor listening), `POLLERR`;
/// a listening one `POLLIN` when a connection request waits. -1 and `EFAULT` (NULL `fds`
/// with entries), `EINVAL` (more than `RLIMIT_NOFILE`'s usual 1 Mi entries), `EINTR`.
///
/// # Safety
/// \[buf\] `fds` NULL or `nfds` readable and writable `pollfd`s, which no other thread
/// accesses during the call.
#[no_mangle]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    if nfds > (1 << 20) {
        return refuse(libc::EINVAL, "rpoll: nfds");
    }
    if nfds > 0 && fds.is_null() {
        return refuse(libc::EFAULT, "rpoll: NULL fds");
    }
    let mut v: Vec<pollfd> = (0..nfds as usize)
        // SAFETY: [buf] fds has nfds entries.
        .map(|i| unsafe { fds.add(i).read_unaligned() })
        .collect();
    match poll_fds(&mut v, timeout) {
        Ok(n) => {
            for (i, p) in v.iter().enumerate() {
                // SAFETY: [buf] as above; only revents is written.
                unsafe { std::ptr::addr_of_mut!((*fds.add(i)).revents).write_unaligned(p.revents) };
            }
            n
        }
        Err(n) => fail(&std::io::Error::from_raw_os_error(n)),
    }
}

symver!(rselect => "RDMACM_1.0");
/// `rselect`: `select(2)` over rsockets and ordinary fds (`rpoll` of the fds set in the
/// three sets: read `POLLIN`, write `POLLOUT`, except `POLLPRI`; an error or hangup counts as
/// readable and writable, as `select(2)` has it). The sets are rewritten to the ready fds;
/// the timeout is not updated. -1 and `EINVAL` (`nfds` negative or above `FD_SETSIZE`, a
/// negative timeout), `EINTR`.
///
/// # Safety
/// \[buf\] each set NULL or a readable and writable `fd_set`; `timeout` NULL or a readable
/// `timeval`; none accessed by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        return refuse(libc::EINVAL, "rselect: nfds");
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: [buf] timeout is a readable timeval.
        let t = unsafe { timeout.read_unaligned() };
        if t.tv_sec < 0 || !(0..1_000_000).contains(&t.tv_usec) {
            return refuse(libc::EINVAL, "rselect: the timeout");
        }
        (t.tv_sec as i128 * 1000 + (t.tv_usec as i128 + 999) / 1000).min(c_int::MAX as i128)
            as c_int
    };
    let sets = [readfds, writefds, exceptfds];
    // SAFETY: [buf] each non-NULL set is a readable fd_set (copied).
    let copies: Vec<Option<libc::fd_set>> = sets
        .iter()
        .map(|&p| (!p.is_null()).then(|| unsafe { p.read_unaligned() }))
        .collect();
    let isset = |k: usize, fd: c_int| match &copies[k] {
        // SAFETY: fd < FD_SETSIZE; the set is our local copy.
        Some(s) => unsafe { libc::FD_ISSET(fd, s) },
        None => false,
    };
    let mut v = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if isset(0, fd) {
            ev |= libc::POLLIN;
        }
        if isset(1, fd) {
            ev |= libc::POLLOUT;
        }
        if isset(2, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            v.push(pollfd {
                fd,
                events: ev,
                revents: 0,
            });
        }
    }
    if let Err(n) = poll_fds(&mut v, ms) {
        return fail(&std::io::Error::from_raw_os_error(n));
    }
    let mut out: [libc::fd_set; 3] = [empty_set(), empty_set(), empty_set()];
    let mut count = 0;
    let bad = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    for p in &v {
        let r = p.revents;
        for (k, bit) in [libc::POLLIN, libc::POLLOUT, libc::POLLPRI]
            .into_iter()
            .enumerate()
        {
            let hit = p.events & bit != 0 && (r & bit != 0 || (k < 2 && r & bad != 0));
            if hit {
                // SAFETY: fd < FD_SETSIZE; the set is local.
                unsafe { libc::FD_SET(p.fd, &mut out[k]) };
                count += 1;
            }
        }
    }
    for (k, &p) in sets.iter().enumerate() {
        if !p.is_null() {
            // SAFETY: [buf] the set is writable.
            unsafe { p.write_unaligned(out[k]) };
        }
    }
    count
}

fn empty_set() -> libc::fd_set {
    // SAFETY: fd_set is an array of integers; all zeroes is the empty set (FD_ZERO).
    unsafe { std::mem::zeroed() }
}
