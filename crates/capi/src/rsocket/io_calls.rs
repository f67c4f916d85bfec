//! Data calls: `rrecv`, `rrecvfrom`, `rrecvmsg`, `rread`, `rreadv`, `rsend`, `rsendto`,
//! `rsendmsg`, `rwrite`, `rwritev`; and iomap (`riomap`, `riounmap`, `riowrite`): direct
//! placement into buffers the peer maps.
//!
//! The C buffers are \[buf\] memory: plain memory of the caller, not registered (the stream
//! copies between them and its own registered rings), so they are borrowed as byte slices
//! for the duration of the call, which is the caller's promise.

use std::io::{self, ErrorKind, IoSlice, IoSliceMut};
use std::sync::atomic::Ordering;

use libc::{c_int, c_void, iovec, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use rverbs_stream::RawIoMap;
use rverbs_uverbs::mr::register_raw;

use super::{fail, refuse, rs};

/// Most iovec entries one call takes (Linux's `UIO_MAXIOV`).
pub const IOV_MAX: c_int = 1024;

/// Flags of `rrecv` / `rsend` this library acts on; other flags are ignored as rsockets
/// ignores them, except `MSG_PEEK` and `MSG_OOB` (refused, `EOPNOTSUPP`).
fn check_flags(flags: c_int, what: &str) -> Result<(), c_int> {
    if flags & (libc::MSG_PEEK | libc::MSG_OOB) != 0 {
        refuse(
            libc::EOPNOTSUPP,
            &format!("{what}: MSG_PEEK and MSG_OOB are not supported"),
        );
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// `(buf, len)` checked: NULL with a length is `EFAULT`, a length over `isize::MAX`
/// `EINVAL`. A zero length gives a dangling, aligned pointer.
fn checked(buf: *const c_void, len: size_t) -> Result<(*mut u8, usize), c_int> {
    if len == 0 {
        return Ok((std::ptr::NonNull::dangling().as_ptr(), 0));
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    if len > isize::MAX as usize {
        return Err(libc::EINVAL);
    }
    Ok((buf.cast::<u8>().cast_mut(), len))
}

/// `(buf, len)` as a slice to receive into.
///
/// # Safety
/// \[buf\] `buf` NULL or `len` writable bytes, not accessed by anyone else during the call.
unsafe fn slice_mut<'a>(buf: *mut c_void, len: size_t) -> Result<&'a mut [u8], c_int> {
    let (p, n) = checked(buf, len)?;
    // SAFETY: [buf] n writable bytes at p (or none), nobody else's during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// `(buf, len)` as a slice to send from.
///
/// # Safety
/// \[buf\] `buf` NULL or `len` readable bytes, not written by anyone during the call.
unsafe fn slice<'a>(buf: *const c_void, len: size_t) -> Result<&'a [u8], c_int> {
    let (p, n) = checked(buf, len)?;
    // SAFETY: [buf] n readable bytes at p (or none), unchanged during the call.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The `iovcnt` entries at `iov`, each checked as [`checked`] and the total as well.
///
/// # Safety
/// \[in\] `iov` NULL or `iovcnt` readable `iovec`s.
unsafe fn iovecs(iov: *const iovec, iovcnt: c_int) -> Result<Vec<(*mut u8, usize)>, c_int> {
    if !(0..=IOV_MAX).contains(&iovcnt) {
        return Err(libc::EINVAL);
    }
    if iovcnt > 0 && iov.is_null() {
        return Err(libc::EFAULT);
    }
    let mut v = Vec::with_capacity(iovcnt as usize);
    let mut total = 0usize;
    for i in 0..iovcnt as usize {
        // SAFETY: [in] iov has iovcnt entries.
        let e = unsafe { iov.add(i).read_unaligned() };
        total = match total.checked_add(e.iov_len) {
            Some(t) if t <= isize::MAX as usize => t,
            _ => return Err(libc::EINVAL),
        };
        v.push(checked(e.iov_base, e.iov_len)?);
    }
    Ok(v)
}

/// Checked iovecs as slices to receive into; overlapping buffers (which `readv(2)` allows,
/// with unspecified contents) are refused with `EINVAL`: two Rust `&mut` slices may not
/// alias.
///
/// # Safety
/// \[buf\] each `(ptr, len)` is writable and nobody else's during the call.
unsafe fn as_mut<'a>(v: &[(*mut u8, usize)], what: &str) -> Result<Vec<&'a mut [u8]>, c_int> {
    let mut spans: Vec<(usize, usize)> = v
        .iter()
        .filter(|&&(_, n)| n > 0)
        .map(|&(p, n)| (p as usize, p as usize + n))
        .collect();
    spans.sort_unstable();
    if spans.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err(refuse(
            libc::EINVAL,
            &format!("{what}: receive buffers overlap"),
        ));
    }
    Ok(v.iter()
        // SAFETY: [buf] the contract; disjoint (checked above).
        .map(|&(p, n)| unsafe { std::slice::from_raw_parts_mut(p, n) })
        .collect())
}

/// Checked iovecs as slices to send from.
///
/// # Safety
/// \[buf\] each `(ptr, len)` is readable and unchanged during the call.
unsafe fn as_ref<'a>(v: &[(*mut u8, usize)]) -> Vec<&'a [u8]> {
    v.iter()
        // SAFETY: [buf] the contract.
        .map(|&(p, n)| unsafe { std::slice::from_raw_parts(p.cast_const(), n) })
        .collect()
}

/// `IoSliceMut`s over `bufs` from byte `skip` on, on the stack for up to 8 buffers (a
/// `Vec` beyond), handed to `f`.
fn io_mut<R>(
    bufs: &mut [&mut [u8]],
    mut skip: usize,
    f: impl FnOnce(&mut [IoSliceMut<'_>]) -> R,
) -> R {
    let mut rest = bufs.iter_mut().filter_map(move |b| {
        if skip >= b.len() {
            skip -= b.len();
            return None;
        }
        let s = IoSliceMut::new(&mut b[skip..]);
        skip = 0;
        Some(s)
    });
    if bufs_len_small(rest.size_hint().1) {
        let mut arr: [IoSliceMut<'_>; 8] = std::array::from_fn(|_| IoSliceMut::new(&mut []));
        let mut n = 0;
        for (slot, s) in arr.iter_mut().zip(&mut rest) {
            *slot = s;
            n += 1;
        }
        f(&mut arr[..n])
    } else {
        let mut v: Vec<IoSliceMut<'_>> = rest.collect();
        f(&mut v)
    }
}

/// `IoSlice`s over `bufs`, on the stack for up to 8 buffers (a `Vec` beyond), handed to `f`.
fn io_ref<R>(bufs: &[&[u8]], f: impl FnOnce(&[IoSlice<'_>]) -> R) -> R {
    if bufs_len_small(Some(bufs.len())) {
        let mut arr = [IoSlice::new(&[]); 8];
        for (slot, b) in arr.iter_mut().zip(bufs) {
            *slot = IoSlice::new(b);
        }
        f(&arr[..bufs.len()])
    } else {
        let v: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
        f(&v)
    }
}

fn bufs_len_small(n: Option<usize>) -> bool {
    n.is_some_and(|n| n <= 8)
}

/// A data call's bad buffer or iovec array (`n`): `EBADF` first if `fd` is no rsocket, as
/// before the buffers were looked at.
fn bad_args(fd: c_int, n: c_int, what: &str) -> ssize_t {
    if super::with_rsocket(fd, |_| ()).is_none() {
        return refuse(libc::EBADF, "not an rsocket") as ssize_t;
    }
    refuse(n, what) as ssize_t
}

/// What a data call found on its rsocket ([`super::with_rsocket`]: the registry's lock is
/// not held).
enum Found<T> {
    /// The non-blocking call's result.
    Done(io::Result<T>),
    /// A blocking call: the stream, to wait on.
    Wait(rverbs_stream::RdmaStream),
    NotConnected,
}

/// `rrecv`'s work on the rsocket `fd`. A non-blocking call runs on the stream in place
/// (one try: rsockets' `MSG_DONTWAIT`); a blocking one on a clone of the stream.
fn recv_on(fd: c_int, bufs: &mut [&mut [u8]], flags: c_int) -> ssize_t {
    if check_flags(flags, "rrecv").is_err() {
        return -1;
    }
    let found = super::with_rsocket(fd, |s| {
        let Some(c) = s.conn.get() else {
            return Found::NotConnected;
        };
        if flags & libc::MSG_DONTWAIT != 0 || s.nonblocking.load(Ordering::Relaxed) {
            Found::Done(io_mut(bufs, 0, |io| c.recv_vectored(io, true)))
        } else {
            Found::Wait(c.clone())
        }
    });
    let c = match found {
        None => return refuse(libc::EBADF, "not an rsocket") as ssize_t,
        Some(Found::NotConnected) => return refuse(libc::ENOTCONN, "rrecv") as ssize_t,
        Some(Found::Done(Ok(n))) => return n as ssize_t,
        Some(Found::Done(Err(e))) => return fail(&e) as ssize_t,
        Some(Found::Wait(c)) => c,
    };
    let want: usize = bufs.iter().map(|b| b.len()).sum();
    let mut got = 0usize;
    loop {
        // The part of the buffers not filled yet.
        match io_mut(bufs, got, |io| c.recv_vectored(io, false)) {
            Ok(0) => return got as ssize_t,
            Ok(n) => got += n,
            Err(e) if got > 0 => {
                // What was read is returned; the error comes with the next call.
                let _ = e;
                return got as ssize_t;
            }
            Err(e) => return fail(&e) as ssize_t,
        }
        if got == want || flags & libc::MSG_WAITALL == 0 {
            return got as ssize_t;
        }
    }
}

/// `rsend`'s work on the rsocket `fd`, as [`recv_on`].
fn send_on(fd: c_int, bufs: &[&[u8]], flags: c_int) -> ssize_t {
    if check_flags(flags, "rsend").is_err() {
        return -1;
    }
    let found = super::with_rsocket(fd, |s| {
        let Some(c) = s.conn.get() else {
            return Found::NotConnected;
        };
        if flags & libc::MSG_DONTWAIT != 0 || s.nonblocking.load(Ordering::Relaxed) {
            Found::Done(io_ref(bufs, |io| c.send_vectored(io, true)))
        } else {
            Found::Wait(c.clone())
        }
    });
    let r = match found {
        None => return refuse(libc::EBADF, "not an rsocket") as ssize_t,
        Some(Found::NotConnected) => return refuse(libc::ENOTCONN, "rsend") as ssize_t,
        Some(Found::Done(r)) => r,
        Some(Found::Wait(c)) => io_ref(bufs, |io| c.send_vectored(io, false)),
    };
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => fail(&e) as ssize_t,
    }
}

/// `ioctl(FIONREAD)` of the rsocket `fd` (rdma-core's rsockets has no such call; the
/// preload's `ioctl` uses it): the bytes a read would return now without waiting, as TCP's
/// `SIOCINQ` — processes what arrived first. 0 on an rsocket not connected yet (TCP's
/// answer in `CLOSE`), -1 and `EINVAL` on a listening one (as TCP), `EBADF` on no rsocket.
pub(crate) fn bytes_readable(fd: c_int) -> c_int {
    let found = super::with_rsocket(fd, |s| match s.conn.get() {
        Some(c) => Some(c.bytes_readable()),
        None if matches!(s.lock().role, super::Role::Listening(_)) => None,
        None => Some(Ok(0)),
    });
    match found {
        None => refuse(libc::EBADF, "not an rsocket"),
        Some(None) => refuse(libc::EINVAL, "FIONREAD on a listening rsocket"),
        Some(Some(Ok(n))) => n.min(c_int::MAX as usize) as c_int,
        Some(Some(Err(e))) => fail(&e),
    }
}

symver!(rrecv => "RDMACM_1.0");
/// `rrecv`: up to `len` bytes into `buf`; 0 at the end of the stream. Flags: `MSG_DONTWAIT`
/// (as `O_NONBLOCK`: -1 and `EAGAIN` when nothing is there), `MSG_WAITALL` (blocking: wait
/// for `len` bytes or the end); `MSG_PEEK`, `MSG_OOB`: `EOPNOTSUPP`. -1 and `EBADF`,
/// `EFAULT` (NULL `buf` with a length), `EINVAL`, `ENOTCONN`, `EPROTO` (the peer broke the
/// protocol), `ETIMEDOUT`, ….
///
/// # Safety
/// \[buf\] `buf` NULL or `len` writable bytes, which no one else accesses during the call.
#[no_mangle]
pub unsafe extern "C" fn rrecv(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: [buf] the contract.
    match unsafe { slice_mut(buf, len) } {
        Ok(b) => recv_on(socket, &mut [b], flags),
        Err(n) => bad_args(socket, n, "rrecv: the buffer"),
    }
}

symver!(rread => "RDMACM_1.0");
/// `rread`: `rrecv` without flags.
///
/// # Safety
/// As [`rrecv`].
#[no_mangle]
pub unsafe extern "C" fn rread(socket: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { rrecv(socket, buf, count, 0) }
}

symver!(rrecvfrom => "RDMACM_1.0");
/// `rrecvfrom`: `rrecv`, and the peer's address in `(src_addr, *addrlen)` when `src_addr`
/// is not NULL (`EFAULT` without `addrlen`).
///
/// # Safety
/// As [`rrecv`]; \[out\] `addrlen` NULL or a `socklen_t`, `src_addr` NULL or `*addrlen`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    src_addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    if !src_addr.is_null() && addrlen.is_null() {
        return refuse(libc::EFAULT, "rrecvfrom: an address without its length") as ssize_t;
    }
    // SAFETY: the same contract.
    let n = unsafe { rrecv(socket, buf, len, flags) };
    if n > 0 && !src_addr.is_null() {
        // SAFETY: [out] the contract.
        if unsafe { super::rgetpeername(socket, src_addr, addrlen) } != 0 {
            return -1;
        }
    }
    n
}

symver!(rreadv => "RDMACM_1.0");
/// `rreadv`: `rrecv` into `iovcnt` buffers. -1 and `EINVAL` (`iovcnt` negative or above
/// 1024, lengths summing past `SSIZE_MAX`), `EFAULT` (NULL `iov` or entry), as `rrecv`.
///
/// # Safety
/// \[in\] `iov` NULL or `iovcnt` readable `iovec`s, each as `rrecv`'s buffer.
#[no_mangle]
pub unsafe extern "C" fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    if super::with_rsocket(socket, |_| ()).is_none() {
        return refuse(libc::EBADF, "not an rsocket") as ssize_t;
    }
    // SAFETY: [in] [buf] the contract.
    match unsafe { iovecs(iov, iovcnt) } {
        // SAFETY: [buf] the contract: each entry is writable.
        Ok(v) => match unsafe { as_mut(&v, "rreadv") } {
            Ok(mut b) => recv_on(socket, &mut b, 0),
            Err(_) => -1,
        },
        Err(n) => bad_args(socket, n, "rreadv: the iovec array"),
    }
}

/// The iovecs of `msg` (control data refused with `EOPNOTSUPP`, as rsockets does).
///
/// # Safety
/// \[in\] `msg` NULL or a `msghdr` whose `msg_iov` is as [`rreadv`]'s `iov`.
unsafe fn msg_iovecs(msg: *const msghdr, what: &str) -> Result<Vec<(*mut u8, usize)>, c_int> {
    if msg.is_null() {
        refuse(libc::EFAULT, &format!("{what}: NULL msghdr"));
        return Err(libc::EFAULT);
    }
    // SAFETY: [in] msg is a readable msghdr.
    let m = unsafe { msg.read_unaligned() };
    if !m.msg_control.is_null() && m.msg_controllen != 0 {
        refuse(
            libc::EOPNOTSUPP,
            &format!("{what}: control data is not supported"),
        );
        return Err(libc::EOPNOTSUPP);
    }
    // size_t on glibc, int on musl: anything past IOV_MAX is refused by `iovecs`.
    #[allow(clippy::unnecessary_cast)]
    let cnt = (m.msg_iovlen as u64).min(IOV_MAX as u64 + 1) as c_int;
    // SAFETY: [in] [buf] the contract.
    unsafe { iovecs(m.msg_iov, cnt) }.inspect_err(|&n| {
        refuse(n, &format!("{what}: the iovec array"));
    })
}

symver!(rrecvmsg => "RDMACM_1.0");
/// `rrecvmsg`: `rreadv` of `msg`'s iovecs with `flags`; no control data (`EOPNOTSUPP`).
///
/// # Safety
/// \[in\] `msg` NULL or a readable `msghdr` whose iovecs are as [`rreadv`]'s.
#[no_mangle]
pub unsafe extern "C" fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if super::with_rsocket(socket, |_| ()).is_none() {
        return refuse(libc::EBADF, "not an rsocket") as ssize_t;
    }
    // SAFETY: [in] the contract.
    match unsafe { msg_iovecs(msg, "rrecvmsg") } {
        // SAFETY: [buf] the contract: each entry is writable.
        Ok(v) => match unsafe { as_mut(&v, "rrecvmsg") } {
            Ok(mut b) => recv_on(socket, &mut b, flags),
            Err(_) => -1,
        },
        Err(_) => -1,
    }
}

symver!(rsend => "RDMACM_1.0");
/// `rsend`: posts `len` bytes of `buf`; blocking, returns once all are posted;
/// non-blocking (`MSG_DONTWAIT` or `O_NONBLOCK`), what fit (-1 and `EAGAIN` if nothing).
/// -1 and `EBADF`, `EFAULT`, `EINVAL`, `ENOTCONN`, `EPIPE` (shut down for writing, or the
/// peer disconnected; no `SIGPIPE`), `EOPNOTSUPP` (`MSG_OOB`), `EPROTO`, ….
///
/// # Safety
/// \[buf\] `buf` NULL or `len` readable bytes, which no one writes during the call.
#[no_mangle]
pub unsafe extern "C" fn rsend(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: [buf] the contract (the slice is only read).
    match unsafe { slice(buf, len) } {
        Ok(b) => send_on(socket, &[b], flags),
        Err(n) => bad_args(socket, n, "rsend: the buffer"),
    }
}

symver!(rwrite => "RDMACM_1.0");
/// `rwrite`: `rsend` without flags.
///
/// # Safety
/// As [`rsend`].
#[no_mangle]
pub unsafe extern "C" fn rwrite(socket: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: the same contract.
    unsafe { rsend(socket, buf, count, 0) }
}

symver!(rsendto => "RDMACM_1.0");
/// `rsendto`: `rsend`; a destination address is refused with `EISCONN` (a stream rsocket is
/// connected), as rsockets does.
///
/// # Safety
/// As [`rsend`].
#[no_mangle]
pub unsafe extern "C" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    dest_addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    if !dest_addr.is_null() || addrlen != 0 {
        return refuse(libc::EISCONN, "rsendto: a destination on a stream rsocket") as ssize_t;
    }
    // SAFETY: the same contract.
    unsafe { rsend(socket, buf, len, flags) }
}

symver!(rwritev => "RDMACM_1.0");
/// `rwritev`: `rsend` of `iovcnt` buffers. Errors as [`rreadv`]'s and [`rsend`]'s.
///
/// # Safety
/// \[in\] `iov` NULL or `iovcnt` readable `iovec`s, each as `rsend`'s buffer.
#[no_mangle]
pub unsafe extern "C" fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    if super::with_rsocket(socket, |_| ()).is_none() {
        return refuse(libc::EBADF, "not an rsocket") as ssize_t;
    }
    // SAFETY: [in] [buf] the contract (the slices are only read).
    match unsafe { iovecs(iov, iovcnt) } {
        // SAFETY: [buf] the contract: each entry is readable.
        Ok(v) => send_on(socket, &unsafe { as_ref(&v) }, 0),
        Err(n) => bad_args(socket, n, "rwritev: the iovec array"),
    }
}

symver!(rsendmsg => "RDMACM_1.0");
/// `rsendmsg`: `rwritev` of `msg`'s iovecs with `flags`; no control data (`EOPNOTSUPP`);
/// `msg_name` is ignored, as by rsockets.
///
/// # Safety
/// \[in\] `msg` NULL or a readable `msghdr` whose iovecs are as [`rwritev`]'s.
#[no_mangle]
pub unsafe extern "C" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if super::with_rsocket(socket, |_| ()).is_none() {
        return refuse(libc::EBADF, "not an rsocket") as ssize_t;
    }
    // SAFETY: [in] the contract.
    match unsafe { msg_iovecs(msg, "rsendmsg") } {
        // SAFETY: [buf] the contract: each entry is readable.
        Ok(v) => send_on(socket, &unsafe { as_ref(&v) }, flags),
        Err(_) => -1,
    }
}

/// One `riomap` of an rsocket: the caller's `(buf, len)`, and the mapping (`None` for
/// `PROT_NONE`, which the peer cannot write and which nothing here registers).
pub(crate) struct CMap {
    addr: usize,
    len: usize,
    _map: Option<RawIoMap>,
}

symver!(riomap => "RDMACM_1.0");
/// `riomap`: maps the caller's `(buf, len)` for the peer's `riowrite`s at offsets `offset ..
/// offset + len` (`offset` -1: the address of `buf`), returning the offset. With
/// `PROT_WRITE` the memory is registered for remote writes and takes one entry of the peer's
/// iomap table (its `RDMA_IOMAPSIZE`); the peer is told by a message posted at once when a
/// credit allows, else with the next call that makes progress (rsockets sends it with the
/// next `rsend` or `riowrite`): the peer knows of it once it received what was sent after.
/// `PROT_NONE` only records the range for `riounmap` (rsockets registers it locally, for no
/// use). `flags` is not used, as by rsockets. -1 and `EBADF`, `EINVAL` (`prot` other than
/// `PROT_WRITE` / `PROT_NONE`, not connected, `len` 0 or beyond `isize::MAX`, an offset
/// below -1 or overflowing with `len`), `EFAULT` (NULL `buf`), `ENOMEM` (the peer has no iomap
/// table, or every entry is in use), `EPIPE` (shut down for writing, or the peer is gone), or
/// the registration's errno.
///
/// # Safety
/// \[registered\] `buf` NULL or `len` bytes of the caller's memory, which stay mapped (not
/// freed, not unmapped) until `riounmap` of the same `(buf, len)` or `rclose` returns; the
/// peer may write them at any time until then, so the caller reads them as memory another
/// thread writes (`volatile`, as `riostream` polls its last byte).
#[no_mangle]
pub unsafe extern "C" fn riomap(
    socket: c_int,
    buf: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    offset: libc::off_t,
) -> libc::off_t {
    let _ = flags;
    let s = rs!(socket);
    if prot & !libc::PROT_WRITE != 0 {
        return refuse(libc::EINVAL, "riomap: prot must be PROT_WRITE or PROT_NONE") as _;
    }
    let Some(c) = s.stream() else {
        return refuse(libc::EINVAL, "riomap: the rsocket is not connected") as _;
    };
    if buf.is_null() {
        return refuse(libc::EFAULT, "riomap: a NULL buffer") as _;
    }
    if len == 0 || len > isize::MAX as usize {
        return refuse(libc::EINVAL, "riomap: the length") as _;
    }
    let offset = match offset {
        -1 => buf as usize as u64,
        o if o < 0 => return refuse(libc::EINVAL, "riomap: a negative offset") as _,
        o => o as u64,
    };
    if offset
        .checked_add(len as u64)
        .map_or(true, |end| end > i64::MAX as u64)
    {
        return refuse(libc::EINVAL, "riomap: offset + length overflows off_t") as _;
    }
    let map = if prot & libc::PROT_WRITE != 0 {
        // riomap never waits (as rsockets'): the announcement may stay queued.
        let r = c.iomap_raw(offset, true, |pd, access| {
            // SAFETY: [registered] the caller's `len` bytes at `buf` stay mapped and theirs until the
            // mapping is dropped (riounmap of this range, or rclose), this function's contract.
            unsafe { register_raw(pd, buf as u64, len, access) }
        });
        match r {
            Ok(m) => Some(m),
            Err(e) if matches!(e.kind(), ErrorKind::Unsupported | ErrorKind::OutOfMemory) => {
                return refuse(libc::ENOMEM, &format!("{e}")) as _
            }
            Err(e) if e.kind() == ErrorKind::NotConnected => {
                return refuse(libc::EPIPE, &format!("{e}")) as _
            }
            Err(e) => return fail(&e) as _,
        }
    } else {
        None
    };
    s.lock().maps.push(CMap {
        addr: buf as usize,
        len,
        _map: map,
    });
    offset as libc::off_t
}

symver!(riounmap => "RDMACM_1.0");
/// `riounmap`: ends the mapping `riomap` made of exactly `(buf, len)`: the memory is
/// deregistered (a write the peer still makes fails, and ends the connection at its side)
/// and its entry of the peer's table is free for the next `riomap`. The peer is not told,
/// as by rsockets. -1 and `EBADF`, `EINVAL` (no mapping of that `(buf, len)`).
///
/// # Safety
/// Compares `buf` as an address only.
#[no_mangle]
pub unsafe extern "C" fn riounmap(socket: c_int, buf: *mut c_void, len: size_t) -> c_int {
    let s = rs!(socket);
    let m = {
        let mut st = s.lock();
        match st
            .maps
            .iter()
            .position(|m| m.addr == buf as usize && m.len == len)
        {
            Some(i) => st.maps.remove(i),
            None => {
                return refuse(
                    libc::EINVAL,
                    "riounmap: no riomap of that buffer and length",
                )
            }
        }
    };
    drop(m);
    0
}

symver!(riowrite => "RDMACM_1.0");
/// `riowrite`: writes `count` bytes of `buf` into the peer's mapping at `offset` (RDMA
/// WRITEs straight into the buffer the peer's `riomap` mapped there; the peer gets no
/// message; a peer that polls a flag byte learns only that the flag arrived, since no device
/// promises the order in which it places one write's bytes: write the flag with a
/// `riowrite` of its own after the data's, which an InfiniBand or RoCE RC QP places after
/// them, or, on iWARP, which does not order two writes' placement, send a message after
/// them). Returns the bytes posted: all of them blocking; non-blocking (`O_NONBLOCK` or
/// `MSG_DONTWAIT`) what fits now, -1 and `EAGAIN` when nothing does. -1 and `EBADF`,
/// `ENOTCONN`, `EFAULT` (NULL `buf` with a count), `EINVAL` (a negative offset; no mapping of
/// the peer covers `offset .. offset + count` — rsockets writes what its mappings cover and
/// returns that count, 0 when none does), `EPIPE` (shut down, or the peer is gone),
/// `EPROTO` (the peer broke the protocol), `ETIMEDOUT`, and after a failed write what
/// `rsend` then gives.
///
/// # Safety
/// \[buf\] `buf` NULL or `count` readable bytes, not written by anyone during the call.
#[no_mangle]
pub unsafe extern "C" fn riowrite(
    socket: c_int,
    buf: *const c_void,
    count: size_t,
    offset: libc::off_t,
    flags: c_int,
) -> ssize_t {
    let s = rs!(socket);
    let Some(c) = s.stream() else {
        return refuse(libc::ENOTCONN, "riowrite") as ssize_t;
    };
    if offset < 0 {
        return refuse(libc::EINVAL, "riowrite: a negative offset") as ssize_t;
    }
    // SAFETY: [buf] the contract.
    let b = match unsafe { slice(buf, count) } {
        Ok(b) => b,
        Err(n) => return refuse(n, "riowrite: the buffer") as ssize_t,
    };
    let nb = flags & libc::MSG_DONTWAIT != 0 || s.nonblocking.load(Ordering::Relaxed);
    match c.iowrite_with(offset as u64, b, nb) {
        Ok(n) => n as ssize_t,
        Err(e) => fail(&e) as ssize_t,
    }
}
