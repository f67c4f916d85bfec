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

/// The queue a post went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive] // more queue kinds can come (e.g. XRC SRQs, WQs)
pub enum PostQueue {
    /// A QP's send queue.
    Send,
    /// A QP's receive queue.
    Recv,
    /// A shared receive queue.
    Srq,
}

/// What was wrong with a work request, when rverbs' one classification of operations
/// ([`crate::op`]) refused it before any provider code ran. Read it with
/// [`PostError::fault`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive] // more typed refusals can come (SGE counts, inline length, flags)
pub enum PostFault {
    /// The QP's transport does not carry the operation (SEND_WITH_INV on UC, RDMA READ on UD,
    /// …: [`OpSet::for_transport`](crate::op::OpSet::for_transport)).
    OpForTransport {
        /// The operation.
        op: crate::op::OpKind,
        /// The QP's type.
        qp_type: crate::qp::QpType,
    },
    /// The transport carries it, but the provider does not encode it on this QP type
    /// ([`SendCaps`](crate::op::SendCaps)).
    OpNotEncoded {
        /// The operation.
        op: crate::op::OpKind,
        /// The QP's type.
        qp_type: crate::qp::QpType,
        /// The provider's name.
        provider: &'static str,
    },
    /// The transport carries it and the provider encodes it, but the device does not report
    /// the capability (FLUSH, ATOMIC_WRITE: [`OpKind::device_caps`](crate::op::OpKind::device_caps);
    /// e.g. rxe before Linux 6.2).
    OpNotOnDevice {
        /// The operation.
        op: crate::op::OpKind,
        /// The provider's name.
        provider: &'static str,
    },
}

impl fmt::Display for PostFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PostFault::OpForTransport { op, qp_type } => write!(
                f,
                "a {qp_type} QP does not support {op} (the {qp_type} transport does not carry it)"
            ),
            PostFault::OpNotEncoded {
                op,
                qp_type,
                provider,
            } => write!(f, "{provider} does not support {op} on {qp_type} QPs"),
            PostFault::OpNotOnDevice { op, provider } => write!(
                f,
                "{op} is not supported by this kernel's {provider} (the device does not report \
                 the IBTA 1.5 capability in device_cap_flags_ex)"
            ),
        }
    }
}

#[derive(Debug)]
struct PostTarget {
    device: Box<str>,
    queue: PostQueue,
    number: u32,
}

/// Why a post stopped: the device and queue posted to, the failing work request, what was
/// wrong with it, and how many requests of the list went in before it.
///
/// A provider makes one with [`PostError::invalid`], [`PostError::unsupported`],
/// [`PostError::queue_full`] or [`PostError::failed`]; the core adds the device and queue
/// ([`PostError::at`]) before the caller sees it. Converts to [`std::io::Error`] keeping its
/// kind, and [`Error::errno_of`](crate::Error::errno_of) finds its errno (a full queue's
/// `ENOMEM`, as libibverbs reports it) through the conversion.
#[derive(Debug)]
pub struct PostError {
    target: Option<PostTarget>,
    index: Option<usize>,
    posted: usize,
    kind: std::io::ErrorKind,
    errno: Option<rustix::io::Errno>,
    what: String,
    fault: Option<PostFault>,
    source: Option<std::io::Error>,
}

impl PostError {
    fn new(index: Option<usize>, posted: usize, kind: std::io::ErrorKind, what: String) -> Self {
        Self {
            target: None,
            index,
            posted,
            kind,
            errno: None,
            what,
            fault: None,
            source: None,
        }
    }

    /// Work request `index` of the list was refused for `fault`; the `index` requests before
    /// it were posted. Kind `Unsupported` (`EOPNOTSUPP` in the C drop-in).
    #[cold]
    pub fn refused(index: usize, fault: PostFault) -> Self {
        let mut e = Self::new(
            Some(index),
            index,
            std::io::ErrorKind::Unsupported,
            fault.to_string(),
        );
        e.fault = Some(fault);
        e
    }

    /// Work request `index` of the list is malformed for this queue (too many SGEs, inline
    /// data too long, wrong state, …); the `index` requests before it were posted.
    #[cold]
    pub fn invalid(index: usize, what: impl Into<String>) -> Self {
        Self::new(
            Some(index),
            index,
            std::io::ErrorKind::InvalidInput,
            what.into(),
        )
    }

    /// Work request `index` asks for something the provider does not implement; the `index`
    /// requests before it were posted.
    #[cold]
    pub fn unsupported(index: usize, what: impl Into<String>) -> Self {
        Self::new(
            Some(index),
            index,
            std::io::ErrorKind::Unsupported,
            what.into(),
        )
    }

    /// Work request `index` found the queue full, with `outstanding` requests not yet consumed;
    /// the `index` requests before it were posted. Carries `ENOMEM`, as libibverbs reports it.
    #[cold]
    pub fn queue_full(index: usize, outstanding: u32) -> Self {
        let mut e = Self::new(
            Some(index),
            index,
            std::io::ErrorKind::OutOfMemory,
            format!("queue full ({outstanding} requests outstanding)"),
        );
        e.errno = Some(rustix::io::Errno::NOMEM);
        e
    }

    /// `posted` requests went into the queue, then `what` failed with `source` (e.g. the
    /// doorbell write); no single work request is at fault.
    #[cold]
    pub fn failed(posted: usize, what: impl Into<String>, source: std::io::Error) -> Self {
        let mut e = Self::new(None, posted, source.kind(), what.into());
        e.errno = crate::Error::errno_of(&source);
        e.source = Some(source);
        e
    }

    /// Names the device and the queue (its QP or SRQ number) the post went to.
    #[cold]
    #[must_use]
    pub fn at(mut self, device: &str, queue: PostQueue, number: u32) -> Self {
        self.target = Some(PostTarget {
            device: device.into(),
            queue,
            number,
        });
        self
    }

    /// The device's name, once [`PostError::at`] named it.
    pub fn device(&self) -> Option<&str> {
        self.target.as_ref().map(|t| &*t.device)
    }

    /// The queue posted to, once [`PostError::at`] named it.
    pub fn queue(&self) -> Option<PostQueue> {
        self.target.as_ref().map(|t| t.queue)
    }

    /// The QP number (SRQ number for [`PostQueue::Srq`]), once [`PostError::at`] named it.
    pub fn number(&self) -> Option<u32> {
        self.target.as_ref().map(|t| t.number)
    }

    /// Index in the list of the work request that failed; `None` when the failure came after
    /// queueing (see [`PostError::failed`]).
    pub fn index(&self) -> Option<usize> {
        self.index
    }

    /// Work requests posted (and, for sends, rung) before the failure.
    pub fn posted(&self) -> usize {
        self.posted
    }

    /// What was wrong, without the device, queue or counts.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The typed fault, when the classification of operations refused the request.
    pub fn fault(&self) -> Option<PostFault> {
        self.fault
    }

    /// The errno this failure corresponds to, if any (`ENOMEM` for a full queue).
    pub fn errno(&self) -> Option<rustix::io::Errno> {
        self.errno
    }

    /// The `io::ErrorKind` the conversion to `io::Error` keeps.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.kind
    }
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Some(t) => {
                let (op, obj) = match t.queue {
                    PostQueue::Send => ("post send", "QP"),
                    PostQueue::Recv => ("post receive", "QP"),
                    PostQueue::Srq => ("post receive", "SRQ"),
                };
                write!(f, "{op} to {obj} {:#x} on {}: ", t.number, t.device)?;
            }
            None => f.write_str("post: ")?,
        }
        if let Some(i) = self.index {
            write!(f, "work request #{i}: ")?;
        }
        f.write_str(&self.what)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        } else if let Some(e) = self.errno {
            write!(f, " ({})", errno_name(e))?;
        }
        write!(f, "; {} posted", self.posted)
    }
}

impl std::error::Error for PostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

impl From<PostError> for std::io::Error {
    fn from(e: PostError) -> Self {
        std::io::Error::new(e.kind, e)
    }
}

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
        let post = PostError::queue_full(2, 4);
        let outer = io::Error::from(post);
        assert_eq!(Error::errno_of(&outer), Some(Errno::NOMEM));
        // A failure after queueing keeps its cause's errno.
        let doorbell: io::Error = Error::os("doorbell", Errno::BADF).into();
        let late = io::Error::from(PostError::failed(3, "doorbell", doorbell));
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

    /// Each post error says device, queue, request, what and count once, and converts to an
    /// `io::Error` that keeps its kind and errno.
    #[test]
    fn post_error_messages() {
        let state = PostError::invalid(0, "the QP is in INIT: sends need RTS (connect first)").at(
            "rxe0",
            PostQueue::Send,
            0x11,
        );
        assert_eq!(
            state.to_string(),
            "post send to QP 0x11 on rxe0: work request #0: the QP is in INIT: sends need RTS \
             (connect first); 0 posted"
        );
        let sge =
            PostError::invalid(2, "3 SGEs, the queue allows 2").at("rxe0", PostQueue::Recv, 7);
        assert_eq!(
            sge.to_string(),
            "post receive to QP 0x7 on rxe0: work request #2: 3 SGEs, the queue allows 2; 2 posted"
        );
        assert_eq!(
            (sge.index(), sge.posted(), sge.number()),
            (Some(2), 2, Some(7))
        );
        let full = PostError::queue_full(4, 4).at("mlx5_0", PostQueue::Srq, 0x20);
        assert_eq!(
            full.to_string(),
            "post receive to SRQ 0x20 on mlx5_0: work request #4: queue full (4 requests \
             outstanding) (ENOMEM); 4 posted"
        );
        assert_eq!(full.device(), Some("mlx5_0"));
        assert_eq!(full.queue(), Some(PostQueue::Srq));
        let io: io::Error = full.into();
        assert_eq!(io.kind(), io::ErrorKind::OutOfMemory);
        assert_eq!(crate::Error::errno_of(&io), Some(rustix::io::Errno::NOMEM));
        let unsup = PostError::unsupported(1, "send flags 0x10 are not supported by rxe");
        assert_eq!(
            unsup.to_string(),
            "post: work request #1: send flags 0x10 are not supported by rxe; 1 posted"
        );
        assert_eq!(io::Error::from(unsup).kind(), io::ErrorKind::Unsupported);
        let bell = crate::Error::os("rxe send doorbell for QP handle 3", rustix::io::Errno::BADF);
        let late = PostError::failed(5, "the send doorbell failed", bell.into()).at(
            "rxe0",
            PostQueue::Send,
            0x11,
        );
        assert_eq!(late.index(), None);
        let s = late.to_string();
        assert!(
            s.starts_with(
                "post send to QP 0x11 on rxe0: the send doorbell failed: rxe send doorbell for \
                 QP handle 3: "
            ),
            "{s}"
        );
        assert!(s.ends_with("(EBADF); 5 posted"), "{s}");
        assert!(std::error::Error::source(&late).is_some());
    }
}
