//! `errno` and diagnostics, rdma-core's error conventions: a leaf module (the object modules
//! and `handle.rs` use it; it uses none of them).

use std::ffi::c_int;
use std::io;

use rverbs_uverbs::Error;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns the calling thread's errno slot (glibc and musl).
    unsafe { *libc::__errno_location() = e };
}

/// The errno an rverbs error stands for: the kernel's when it gave one, else one chosen from
/// the error's kind (bad argument `EINVAL`, not found `ENOENT`, unsupported `EOPNOTSUPP`).
pub fn errno_of(e: &io::Error) -> c_int {
    if let Some(n) = Error::errno_of(e) {
        return n.raw_os_error();
    }
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::Unsupported => libc::EOPNOTSUPP,
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        io::ErrorKind::PermissionDenied => libc::EACCES,
        _ => libc::EINVAL,
    }
}

/// Reports `e` on stderr when `RVERBS_CAPI_LOG` is set (libibverbs' callers see only the
/// errno; the message says which object and operation failed) and returns its errno.
pub(crate) fn fail(e: &io::Error) -> c_int {
    if std::env::var_os("RVERBS_CAPI_LOG").is_some() {
        eprintln!("rverbs libibverbs: {e}");
    }
    errno_of(e)
}

/// A NULL object pointer where `what` was expected: logged as [`fail`] logs; `EINVAL`.
#[cold]
#[inline(never)]
pub(crate) fn null_arg(what: &str) -> c_int {
    fail(&io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("NULL {what} pointer"),
    ))
}
