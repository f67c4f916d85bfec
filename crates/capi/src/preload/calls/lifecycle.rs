//! Life cycle: `socket`, `bind`, `listen`, `accept`/`accept4`, `connect`, `shutdown`,
//! `close` and the `dup` family.

use std::sync::Arc;

use libc::{c_int, sockaddr, socklen_t};

use super::tcp_stream;
use super::{apply_env_options, fall_back, log, loopback};
use crate::ibverbs::set_errno;
use crate::preload::config::config_allows;
use crate::preload::forksafe::{self, State};
use crate::preload::real::real;
use crate::preload::{errno, get, insert, remove, Sock};
use crate::rsocket as r;

/// `socket(2)`: a TCP stream socket over IPv4 or IPv6 becomes an rsocket behind a real
/// socket's number (the module's doc), or in rdma-core's fork mode (`RDMAV_FORK_SAFE`) a
/// real socket that moves to an rsocket later (`forksafe`); anything else, or when no
/// rsocket can be made, the next `socket`.
///
/// # Safety
/// Takes integers only.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
    // SAFETY: integers only.
    let fd = unsafe { (real().socket)(domain, type_, protocol) };
    if fd < 0 || !tcp_stream(domain, type_, protocol) {
        return fd;
    }
    if !config_allows(domain, type_, protocol) {
        log("socket: not for this program by preload_config, a plain TCP socket");
        return fd;
    }
    if forksafe::enabled() {
        // rdma-core's fork mode: TCP until the first data call (`forksafe`).
        forksafe::set(fd, State::Fresh);
        return fd;
    }
    // SAFETY: integers only.
    let rs = unsafe { r::rsocket(domain, libc::SOCK_STREAM | (type_ & libc::SOCK_NONBLOCK), 0) };
    if rs < 0 {
        log("socket: no rsocket, a plain TCP socket");
        return fd;
    }
    apply_env_options(rs);
    drop(insert(fd, Arc::new(Sock { rs, domain })));
    fd
}

/// `bind(2)`: binds the real socket (its errors are TCP's, and a port 0 is chosen there),
/// then gives the rsocket the same address and port. A loopback address, or an rsocket that
/// refuses it: the number stays a TCP socket.
///
/// # Safety
/// \[buf\] `addr` NULL or `addrlen` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    let rl = real();
    // SAFETY: [buf] as this function's contract.
    let ret = unsafe { (rl.bind)(fd, addr, addrlen) };
    let Some(s) = get(fd) else { return ret };
    if ret < 0 {
        return ret;
    }
    // SAFETY: [buf] as this function's contract.
    if unsafe { loopback(addr, addrlen) } {
        fall_back(fd, "bound to a loopback address");
        return 0;
    }
    // SAFETY: all-zero bytes are a sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: [out] ss has len bytes; the number is the caller's open fd.
    let got = unsafe {
        (rl.getsockname)(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    // SAFETY: [buf] ss, len bytes of it written by getsockname.
    if got < 0 || unsafe { r::rbind(s.rs, (&ss as *const libc::sockaddr_storage).cast(), len) } < 0
    {
        fall_back(fd, "the rsocket refused the address");
    }
    0
}

/// `listen(2)`: `rlisten`; where that fails (no RDMA device for the address, …), or on a
/// loopback address, the real socket listens instead.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    if let Some(s) = get(fd) {
        // SAFETY: integers only.
        if unsafe { r::rlisten(s.rs, backlog) } == 0 {
            return 0;
        }
        drop(s);
        fall_back(fd, "rlisten failed");
    }
    // SAFETY: integers only.
    let ret = unsafe { (real().listen)(fd, backlog) };
    if ret == 0 && forksafe::state(fd) == Some(State::Fresh) {
        match forksafe::name_is_loopback(fd) {
            true => forksafe::forget(fd),
            false => forksafe::set(fd, State::Listening),
        }
    }
    ret
}

/// `accept4(2)`: a listening rsocket's next connection, as an rsocket behind a new real
/// socket's number (`SOCK_NONBLOCK`, `SOCK_CLOEXEC` as asked); else the next `accept4`.
///
/// # Safety
/// \[out\] `addrlen` NULL or a `socklen_t`; `addr` NULL or `*addrlen` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let rl = real();
    let Some(s) = get(fd) else {
        // SAFETY: [out] as this function's contract.
        let n = unsafe { (rl.accept4)(fd, addr, addrlen, flags) };
        if n >= 0 && forksafe::state(fd) == Some(State::Listening) {
            forksafe::set(n, State::Passive);
        }
        return n;
    };
    if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [out] as this function's contract.
    let rs = unsafe { r::raccept(s.rs, addr, addrlen) };
    if rs < 0 {
        return -1;
    }
    let nb = flags & libc::SOCK_NONBLOCK;
    // SAFETY: integers only.
    unsafe {
        r::rfcntl(
            rs,
            libc::F_SETFL,
            if nb != 0 { libc::O_NONBLOCK } else { 0 },
        )
    };
    // SAFETY: integers only.
    let n = unsafe { (rl.socket)(s.domain, libc::SOCK_STREAM | flags, 0) };
    if n < 0 {
        let e = errno();
        // SAFETY: integers only; the rsocket just made.
        unsafe { r::rclose(rs) };
        set_errno(e);
        return -1;
    }
    drop(insert(
        n,
        Arc::new(Sock {
            rs,
            domain: s.domain,
        }),
    ));
    n
}

/// `accept(2)`: [`accept4`] without flags.
///
/// # Safety
/// As [`accept4`].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { accept4(fd, addr, addrlen, 0) }
}

/// `connect(2)`: `rconnect` (which completes before it returns, also on a non-blocking
/// socket); a loopback address, or an `rconnect` that fails (no RDMA device for the
/// address, no rsockets listener there, …): the real socket connects instead.
///
/// # Safety
/// \[buf\] `addr` NULL or `addrlen` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    if let Some(s) = get(fd) {
        // SAFETY: [buf] as this function's contract.
        if unsafe { loopback(addr, addrlen) } {
            drop(s);
            fall_back(fd, "connect to a loopback address");
        } else {
            // SAFETY: [buf] as this function's contract.
            if unsafe { r::rconnect(s.rs, addr, addrlen) } == 0 {
                return 0;
            }
            let e = errno();
            if e == libc::EISCONN || e == libc::EFAULT {
                return -1;
            }
            drop(s);
            fall_back(
                fd,
                &format!("rconnect: {}", std::io::Error::from_raw_os_error(e)),
            );
        }
    } else if forksafe::state(fd) == Some(State::Fresh) {
        // SAFETY: [buf] as this function's contract.
        if unsafe { loopback(addr, addrlen) } {
            forksafe::forget(fd);
        } else {
            forksafe::set(fd, State::Active);
        }
    }
    // SAFETY: [buf] as this function's contract.
    unsafe { (real().connect)(fd, addr, addrlen) }
}

/// `shutdown(2)`: `rshutdown` or the next `shutdown`.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    match get(fd) {
        // SAFETY: integers only.
        Some(s) => unsafe { r::rshutdown(s.rs, how) },
        // SAFETY: integers only.
        None => unsafe { (real().shutdown)(fd, how) },
    }
}

/// `close(2)`: forgets the number (the rsocket closes with its last number), then closes
/// the real fd.
///
/// # Safety
/// \[fd\]: closing a number another thread still uses is the caller's race, as with any
/// `close`.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // The fork mode's entry first: a switch of this number that ends meanwhile either
    // settled before (then `remove` takes its rsocket out) or finds the entry gone and
    // closes its rsocket, never settling on a closed number.
    forksafe::forget(fd);
    drop(remove(fd));
    crate::preload::epoll::forget(fd);
    // SAFETY: integers only.
    unsafe { (real().close)(fd) }
}

/// `dup(2)`: the new number shares the rsocket.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    forksafe::resolve(fd);
    // SAFETY: integers only.
    let n = unsafe { (real().dup)(fd) };
    if n >= 0 {
        if let Some(s) = get(fd) {
            drop(insert(n, s));
        }
        forksafe::copy(fd, n);
    }
    n
}

/// `dup3` and `dup2`: `new` forgets what it was and shares `old`'s rsocket.
fn dup_onto(old: c_int, new: c_int, f: impl FnOnce() -> c_int) -> c_int {
    forksafe::resolve(old);
    let s = get(old);
    let n = f();
    if n >= 0 && old != new {
        // As in `close`: the fork mode's entry of `new` before the table.
        forksafe::forget(new);
        let before = match s {
            Some(s) => insert(new, s),
            None => remove(new),
        };
        forksafe::copy(old, new);
        crate::preload::epoll::forget(new);
        drop(before);
    }
    n
}

/// `dup2(2)`.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: integers only.
    dup_onto(old, new, || unsafe { (real().dup2)(old, new) })
}

/// `dup3(2)`.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: integers only.
    dup_onto(old, new, || unsafe { (real().dup3)(old, new, flags) })
}
