//! Errors: every failure names the operation (and, where known, the object, limit or state)
//! that went wrong. Public functions return [`std::io::Result`]; the `io::Error` wraps an
//! [`Error`] so that callers can still recover the kernel's errno.

use std::borrow::Cow;
use std::fmt;
use std::io;

use rustix::io::Errno;

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
    /// The kernel refused `op` with `errno`.
    pub fn os(op: impl Into<Cow<'static, str>>, errno: Errno) -> Self {
        Self {
            op: op.into(),
            detail: None,
            errno: Some(errno),
            kind: io::Error::from(errno).kind(),
        }
    }

    /// Our own validation refused `op` before the kernel saw it.
    pub fn invalid(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::InvalidInput,
        }
    }

    /// Something the kernel returned did not make sense (short response, bad ring header…).
    pub fn protocol(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::InvalidData,
        }
    }

    /// A thing that was looked for does not exist (device, port, GID index…).
    pub fn not_found(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::NotFound,
        }
    }

    /// The operation is not supported (driver, ABI version, kernel feature).
    pub fn unsupported(op: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Self {
            op: op.into(),
            detail: Some(detail.into()),
            errno: None,
            kind: io::ErrorKind::Unsupported,
        }
    }

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
            if let Some(e) = e.downcast_ref::<crate::provider::PostError>() {
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
mod tests {
    use super::*;

    #[test]
    fn display_names_op_detail_and_errno() {
        let e = Error::os("create CQ", Errno::INVAL).with_detail("cqe 5000000 on rxe0");
        let s = e.to_string();
        assert!(s.starts_with("create CQ: cqe 5000000 on rxe0: "), "{s}");
        assert!(s.ends_with("(EINVAL)"), "{s}");
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(Error::errno_of(&io), Some(Errno::INVAL));
    }

    #[test]
    fn errno_of_walks_sources() {
        let post = crate::provider::PostError::queue_full(2, 4);
        let outer = io::Error::from(post);
        assert_eq!(Error::errno_of(&outer), Some(Errno::NOMEM));
        // A failure after queueing keeps its cause's errno.
        let doorbell: io::Error = Error::os("doorbell", Errno::BADF).into();
        let late = io::Error::from(crate::provider::PostError::failed(3, "doorbell", doorbell));
        assert_eq!(Error::errno_of(&late), Some(Errno::BADF));
        let wrapped = io::Error::other(outer);
        assert_eq!(Error::errno_of(&wrapped), Some(Errno::NOMEM));
        assert_eq!(Error::errno_of(&io::Error::other("no errno")), None);
    }

    #[test]
    fn plain_os_error_errno() {
        let io = io::Error::from_raw_os_error(libc_enodev());
        assert_eq!(Error::errno_of(&io), Some(Errno::NODEV));
    }

    fn libc_enodev() -> i32 {
        Errno::NODEV.raw_os_error()
    }
}
