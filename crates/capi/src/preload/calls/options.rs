//! Options and names: `fcntl`, `ioctl`, `setsockopt`/`getsockopt`, `getsockname`,
//! `getpeername`.

use libc::{c_int, c_ulong, c_void, sockaddr, socklen_t};

use crate::ibverbs::set_errno;
use crate::preload::real::real;
use crate::preload::{errno, get, insert};
use crate::rsocket as r;

/// `fcntl(2)` (declared `(int, int, unsigned long)`: stable Rust cannot define a variadic
/// function, and on x86-64 and AArch64 Linux the variadic argument, an integer or a
/// pointer, arrives where that third parameter is read). On a table number `F_SETFL` sets
/// the rsocket's `O_NONBLOCK` and the real socket's flags, `F_DUPFD` and
/// `F_DUPFD_CLOEXEC` share the rsocket with the new number; everything else (and every
/// other fd) goes to the next `fcntl`.
///
/// # Safety
/// `arg` as `fcntl(2)` reads it for `cmd`; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let rl = real();
    let dupfd = cmd == libc::F_DUPFD || cmd == libc::F_DUPFD_CLOEXEC;
    if dupfd {
        crate::preload::forksafe::resolve(fd);
    }
    // SAFETY: as this function's contract.
    let n = unsafe { (rl.fcntl)(fd, cmd, arg) };
    if n < 0 {
        return n;
    }
    if dupfd {
        crate::preload::forksafe::copy(fd, n);
    }
    if let Some(s) = get(fd) {
        match cmd {
            libc::F_SETFL => {
                // SAFETY: integers only.
                unsafe { r::rfcntl(s.rs, libc::F_SETFL, (arg as c_int) & libc::O_NONBLOCK) };
            }
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => drop(insert(n, s)),
            _ => {}
        }
    }
    n
}

/// `FIONREAD` as glibc's `ioctl` takes it (libc's constant is an `int` on musl, whose
/// `ioctl` takes an `int`).
#[allow(clippy::unnecessary_cast)]
pub(crate) const FIONREAD: c_ulong = libc::FIONREAD as c_ulong;
/// `FIONBIO`, as [`FIONREAD`].
#[allow(clippy::unnecessary_cast)]
pub(crate) const FIONBIO: c_ulong = libc::FIONBIO as c_ulong;

/// `ioctl(2)` (glibc's `int ioctl(int, unsigned long, ...)`, whose one argument after the
/// request arrives here as a pointer). On a table number: `FIONREAD` (`SIOCINQ`) writes the
/// bytes a read would return now without waiting (0 before the connection, -1 and `EINVAL`
/// on a listening socket, as TCP; rdma-core's preload does not interpose `ioctl`), `FIONBIO`
/// sets `O_NONBLOCK` on the rsocket and
/// the real socket as `fcntl(F_SETFL)` does; every other request, and every other fd, goes
/// to the next `ioctl`.
///
/// # Safety
/// `arg` as `ioctl(2)` reads or writes it for `request` (`FIONREAD`: an `int` written;
/// `FIONBIO`: an `int` read); \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let rl = real();
    if request == FIONREAD {
        // The bytes to read are the rsocket's once a fork-mode socket has moved.
        crate::preload::forksafe::resolve(fd);
    }
    let Some(s) = get(fd) else {
        // SAFETY: as this function's contract.
        return unsafe { (rl.ioctl)(fd, request, arg) };
    };
    match request {
        FIONREAD => {
            if arg.is_null() {
                set_errno(libc::EFAULT);
                return -1;
            }
            let n = r::bytes_readable(s.rs);
            if n < 0 {
                return -1;
            }
            // SAFETY: [out] `arg` is the caller's `int` (FIONREAD's contract), checked non-NULL.
            unsafe { arg.cast::<c_int>().write_unaligned(n) };
            0
        }
        FIONBIO => {
            if arg.is_null() {
                set_errno(libc::EFAULT);
                return -1;
            }
            // SAFETY: [in] `arg` is the caller's `int` (FIONBIO's contract), checked non-NULL.
            let on = unsafe { arg.cast::<c_int>().read_unaligned() } != 0;
            // SAFETY: as this function's contract: the real socket first (its errors are
            // the call's).
            let n = unsafe { (rl.ioctl)(fd, request, arg) };
            if n < 0 {
                return n;
            }
            // SAFETY: integers only.
            unsafe { r::rfcntl(s.rs, libc::F_SETFL, if on { libc::O_NONBLOCK } else { 0 }) };
            0
        }
        // SAFETY: as this function's contract.
        _ => unsafe { (rl.ioctl)(fd, request, arg) },
    }
}

/// `fcntl64`: [`fcntl`] (the same on 64-bit Linux).
///
/// # Safety
/// As [`fcntl`].
#[cfg(target_pointer_width = "64")]
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// `setsockopt(2)`: `rsetsockopt`, and the same option on the real socket (for the
/// fallback; its answer is not used); else the next `setsockopt`.
///
/// # Safety
/// \[buf\] `val` NULL or `len` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let rl = real();
    let Some(s) = get(fd) else {
        // SAFETY: [buf] as this function's contract.
        return unsafe { (rl.setsockopt)(fd, level, name, val, len) };
    };
    // SAFETY: [buf] as this function's contract.
    let ret = unsafe { r::rsetsockopt(s.rs, level, name, val, len) };
    let e = errno();
    if level != r::SOL_RDMA {
        // SAFETY: [buf] as this function's contract.
        unsafe { (rl.setsockopt)(fd, level, name, val, len) };
    }
    set_errno(e);
    ret
}

/// `getsockopt(2)`: `rgetsockopt`; a socket-level option rsockets does not keep
/// (`SO_TYPE`, `SO_DOMAIN`, `SO_PROTOCOL`, …) is the real socket's; else the next
/// `getsockopt`.
///
/// # Safety
/// \[out\] `len` a `socklen_t`, `val` `*len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let rl = real();
    let Some(s) = get(fd) else {
        // SAFETY: [out] as this function's contract.
        return unsafe { (rl.getsockopt)(fd, level, name, val, len) };
    };
    // SAFETY: [out] as this function's contract.
    let ret = unsafe { r::rgetsockopt(s.rs, level, name, val, len) };
    if ret < 0 && errno() == libc::ENOPROTOOPT && level == libc::SOL_SOCKET {
        // SAFETY: [out] as this function's contract.
        return unsafe { (rl.getsockopt)(fd, level, name, val, len) };
    }
    ret
}

/// `getsockname(2)`: `rgetsockname` or the next `getsockname`.
///
/// # Safety
/// \[out\] `len` a `socklen_t`, `addr` `*len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match get(fd) {
        // SAFETY: [out] as this function's contract.
        Some(s) => unsafe { r::rgetsockname(s.rs, addr, len) },
        // SAFETY: [out] as this function's contract.
        None => unsafe { (real().getsockname)(fd, addr, len) },
    }
}

/// `getpeername(2)`: `rgetpeername` or the next `getpeername`.
///
/// # Safety
/// \[out\] `len` a `socklen_t`, `addr` `*len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match get(fd) {
        // SAFETY: [out] as this function's contract.
        Some(s) => unsafe { r::rgetpeername(s.rs, addr, len) },
        // SAFETY: [out] as this function's contract.
        None => unsafe { (real().getpeername)(fd, addr, len) },
    }
}
