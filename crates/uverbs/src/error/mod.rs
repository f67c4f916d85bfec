//! Errors: every failure names the operation (and, where known, the object, limit or state)
//! that went wrong. Public functions return [`std::io::Result`]; the `io::Error` wraps an
//! [`Error`] so that callers can still recover the kernel's errno.
//!
//! The parts: this file holds [`Error`] (the operation, its detail, the errno), [`errno_name`]
//! and [`Result`]; `post` the errors of posting work requests ([`PostQueue`], the typed
//! [`PostFault`], [`PostError`]); `tests` their unit tests.

use std::borrow::Cow;
use std::fmt;
use std::io;

use rustix::io::Errno;

mod post;

pub use post::{PostError, PostFault, PostQueue};

/// An rverbs error: the operation that failed, what it was working on, and the kernel's errno
/// when the kernel said no.
#[derive(Debug, Clone)]
pub struct Error {
    op: Cow<'static, str>,
    detail: Option<String>,
    errno: Option<Errno>,
    kind: io::ErrorKind,
}

impl Error {
    internal! {
    /// The kernel refused `op` with `errno`.
    pub fn os(op: impl Into<Cow<'static, str>>, errno: Errno) -> Self {
        Self {
            op: op.into(),
            detail: None,
            errno: Some(errno),
            kind: io::Error::from(errno).kind(),
        }
    }
    }

    internal! {
    /// Our own validation refused `op` before the kernel saw it.
    pub fn invalid(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::InvalidInput,
        }
    }
    }

    internal! {
    /// Something the kernel returned did not make sense (short response, bad ring header…).
    pub fn protocol(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::InvalidData,
        }
    }
    }

    internal! {
    /// A thing that was looked for does not exist (device, port, GID index…).
    pub fn not_found(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::NotFound,
        }
    }
    }

    internal! {
    /// The operation is not supported (driver, ABI version, kernel feature).
    pub fn unsupported(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::Unsupported,
        }
    }
    }

    internal! {
    /// Adds (or extends) the human-readable detail.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        let d = detail.into();
        self.detail = Some(match self.detail.take() {
            Some(old) => format!("{old}; {d}"),
            None => d,
        });
        self
    }
    }

    internal! {
    /// Adds `detail` to the rverbs [`Error`] inside `err` ([`Error::with_detail`]), keeping
    /// its errno and kind. An `io::Error` that holds another error type is returned as it is;
    /// one that holds none (a plain OS error) keeps its kind and message, `detail` appended.
    pub fn add_detail(err: io::Error, detail: impl Into<String>) -> io::Error {
        match err.downcast::<Error>() {
            Ok(e) => e.with_detail(detail).into(),
            Err(other) if other.get_ref().is_some() => other,
            Err(os) => io::Error::new(os.kind(), format!("{os}; {}", detail.into())),
        }
    }
    }

    /// The operation that failed, e.g. `"create CQ"`.
    pub fn op(&self) -> &str {
        &self.op
    }

    /// The kernel's errno, when the kernel refused.
    pub fn errno(&self) -> Option<Errno> {
        self.errno
    }

    /// The errno of an `io::Error` made by rverbs (or a plain OS error): the first rverbs
    /// [`Error`] or OS error found walking the chain of `source()`s, so wrappers such as
    /// `PostError` (inside an `io::Error`) give their cause's errno.
    pub fn errno_of(err: &io::Error) -> Option<Errno> {
        if let Some(n) = err.raw_os_error() {
            return Some(Errno::from_raw_os_error(n));
        }
        let mut cur: Option<&(dyn std::error::Error + 'static)> = match err.get_ref() {
            Some(e) => Some(e),
            None => return None,
        };
        while let Some(e) = cur {
            if let Some(e) = e.downcast_ref::<Error>() {
                return e.errno;
            }
            if let Some(e) = e.downcast_ref::<PostError>() {
                return e.errno();
            }
            if let Some(io) = e.downcast_ref::<io::Error>() {
                if let Some(n) = io.raw_os_error() {
                    return Some(Errno::from_raw_os_error(n));
                }
                if let Some(inner) = io.get_ref() {
                    cur = Some(inner);
                    continue;
                }
            }
            cur = e.source();
        }
        None
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.op)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        if let Some(e) = self.errno {
            write!(f, ": {} ({})", io::Error::from(e), errno_name(e))?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        io::Error::new(e.kind, e)
    }
}

/// The symbolic name of the errnos the verbs ABI commonly returns.
pub fn errno_name(e: Errno) -> &'static str {
    match e {
        Errno::PERM => "EPERM",
        Errno::NOENT => "ENOENT",
        Errno::INTR => "EINTR",
        Errno::IO => "EIO",
        Errno::NXIO => "ENXIO",
        Errno::BADF => "EBADF",
        Errno::AGAIN => "EAGAIN",
        Errno::NOMEM => "ENOMEM",
        Errno::ACCESS => "EACCES",
        Errno::FAULT => "EFAULT",
        Errno::BUSY => "EBUSY",
        Errno::EXIST => "EEXIST",
        Errno::NODEV => "ENODEV",
        Errno::INVAL => "EINVAL",
        Errno::MFILE => "EMFILE",
        Errno::NOTTY => "ENOTTY",
        Errno::NOSPC => "ENOSPC",
        Errno::RANGE => "ERANGE",
        Errno::NOSYS => "ENOSYS",
        Errno::NOTSUP => "EOPNOTSUPP",
        Errno::PROTONOSUPPORT => "EPROTONOSUPPORT",
        Errno::ADDRINUSE => "EADDRINUSE",
        Errno::ADDRNOTAVAIL => "EADDRNOTAVAIL",
        Errno::NETUNREACH => "ENETUNREACH",
        Errno::CONNREFUSED => "ECONNREFUSED",
        Errno::CONNRESET => "ECONNRESET",
        Errno::TIMEDOUT => "ETIMEDOUT",
        Errno::HOSTUNREACH => "EHOSTUNREACH",
        Errno::ALREADY => "EALREADY",
        Errno::INPROGRESS => "EINPROGRESS",
        Errno::ISCONN => "EISCONN",
        Errno::NOTCONN => "ENOTCONN",
        Errno::OVERFLOW => "EOVERFLOW",
        _ => "errno",
    }
}

/// `Result` with an `io::Error` made from [`Error`].
pub type Result<T> = io::Result<T>;

#[cfg(test)]
mod tests;
