//! Data: `read`/`write`, their vector, socket and message forms, and `sendfile`.

use libc::{c_int, c_void, iovec, msghdr, off_t, size_t, sockaddr, socklen_t, ssize_t};

use super::get_io as get;
use crate::ibverbs::set_errno;
use crate::preload::errno;
use crate::preload::real::real;
use crate::rsocket as r;

/// `read(2)`: `rread` or the next `read`.
///
/// # Safety
/// \[buf\] `buf` with `count` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rread(s.rs, buf, count) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().read)(fd, buf, count) },
    }
}

/// `write(2)`: `rwrite` or the next `write`.
///
/// # Safety
/// \[buf\] `buf` with `count` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rwrite(s.rs, buf, count) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().write)(fd, buf, count) },
    }
}

/// `readv(2)`: `rreadv` or the next `readv`.
///
/// # Safety
/// \[in\] `iov` with `iovcnt` entries, each \[buf\] writable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rreadv(s.rs, iov, iovcnt) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().readv)(fd, iov, iovcnt) },
    }
}

/// `writev(2)`: `rwritev` or the next `writev`.
///
/// # Safety
/// \[in\] `iov` with `iovcnt` entries, each \[buf\] readable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rwritev(s.rs, iov, iovcnt) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().writev)(fd, iov, iovcnt) },
    }
}

/// `recv(2)`: `rrecv` or the next `recv`.
///
/// # Safety
/// \[buf\] `buf` with `len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rrecv(s.rs, buf, len, flags) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().recv)(fd, buf, len, flags) },
    }
}

/// `send(2)`: `rsend` or the next `send` (`MSG_NOSIGNAL` and the other flags rsockets
/// ignores are accepted; an rsocket never raises `SIGPIPE`).
///
/// # Safety
/// \[buf\] `buf` with `len` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rsend(s.rs, buf, len, flags) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().send)(fd, buf, len, flags) },
    }
}

/// `recvfrom(2)`: `rrecvfrom` or the next `recvfrom`.
///
/// # Safety
/// \[buf\] `buf` with `len` writable bytes; \[out\] `addrlen` NULL or a `socklen_t`, `addr`
/// NULL or `*addrlen` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] [out] as this function's contract.
        Some(s) => unsafe { r::rrecvfrom(s.rs, buf, len, flags, addr, addrlen) },
        // SAFETY: [buf] [out] as this function's contract.
        None => unsafe { (real().recvfrom)(fd, buf, len, flags, addr, addrlen) },
    }
}

/// `sendto(2)`: on an rsocket `rsend` (the address is ignored, as TCP ignores it on a
/// connected socket), else the next `sendto`.
///
/// # Safety
/// \[buf\] `buf` with `len` readable bytes, `addr` NULL or `addrlen` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rsend(s.rs, buf, len, flags) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().sendto)(fd, buf, len, flags, addr, addrlen) },
    }
}

/// `recvmsg(2)`: `rrecvmsg` or the next `recvmsg`.
///
/// # Safety
/// \[in\] `msg` a `msghdr` whose iovecs are \[buf\] writable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rrecvmsg(s.rs, msg, flags) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().recvmsg)(fd, msg, flags) },
    }
}

/// `sendmsg(2)`: `rsendmsg` or the next `sendmsg`.
///
/// # Safety
/// \[in\] `msg` a `msghdr` whose iovecs are \[buf\] readable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rsendmsg(s.rs, msg, flags) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().sendmsg)(fd, msg, flags) },
    }
}

/// `sendfile(2)` to an rsocket: one chunk (at most 256 KiB) read from `in_fd` (at
/// `*offset`, which advances by what was sent, or at its file position, which ends after
/// what was sent) and `rwrite`n; to anything else the next `sendfile`.
///
/// # Safety
/// \[out\] `offset` NULL or an `off_t`; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    let rl = real();
    let Some(s) = get(out_fd) else {
        // SAFETY: [out] as this function's contract.
        return unsafe { (rl.sendfile)(out_fd, in_fd, offset, count) };
    };
    let mut buf = vec![0u8; count.min(256 << 10)];
    let got = if offset.is_null() {
        // SAFETY: [buf] our buffer, its length.
        unsafe { (rl.read)(in_fd, buf.as_mut_ptr().cast(), buf.len()) }
    } else {
        // SAFETY: [out] offset is an off_t; [buf] our buffer.
        unsafe {
            (rl.pread)(
                in_fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                offset.read_unaligned(),
            )
        }
    };
    if got <= 0 {
        return got;
    }
    // SAFETY: [buf] the `got` bytes just read.
    let sent = unsafe { r::rwrite(s.rs, buf.as_ptr().cast(), got as size_t) };
    let back = got - sent.max(0);
    if offset.is_null() {
        if back > 0 {
            let e = errno();
            // SAFETY: integers only: the file position moves back over what was not sent.
            unsafe { libc::lseek(in_fd, -(back as off_t), libc::SEEK_CUR) };
            set_errno(e);
        }
    } else if sent > 0 {
        // SAFETY: [out] offset is an off_t.
        unsafe { offset.write_unaligned(offset.read_unaligned() + sent as off_t) };
    }
    sent
}

/// `sendfile64`: [`sendfile`] (`off64_t` is `off_t` on 64-bit Linux).
///
/// # Safety
/// As [`sendfile`].
#[cfg(target_pointer_width = "64")]
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: as this function's contract.
    unsafe { sendfile(out_fd, in_fd, offset, count) }
}
