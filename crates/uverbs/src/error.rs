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

/// What was wrong with a work request: the one typed description of a refused post, from the
/// core's checks ([`OpSet`](crate::OpSet), the QP's state) and from every provider's encoder alike. Read
/// it with [`PostError::fault`]; [`PostError::kind`] and [`PostError::errno`] say how the
/// refusal surfaces as an `io::Error` (and in the C drop-in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive] // more typed refusals can come with new operations and providers
pub enum PostFault {
    /// The QP's transport does not carry the operation (SEND_WITH_INV on UC, RDMA READ on UD,
    /// …: the op table's transports column).
    OpForTransport {
        /// The operation.
        op: crate::values::OpKind,
        /// The QP's type.
        qp_type: crate::values::QpType,
    },
    /// The transport carries it, but the provider does not encode it on this QP type
    /// (its capability table).
    OpNotEncoded {
        /// The operation.
        op: crate::values::OpKind,
        /// The QP's type.
        qp_type: crate::values::QpType,
        /// The provider's name.
        provider: &'static str,
    },
    /// Sends were posted to a QP not yet in RTS (the request and those after it were not
    /// queued).
    NotReadyToSend {
        /// The QP's state as last set.
        state: crate::values::QpState,
    },
    /// No free slot: the queue holds `outstanding` requests not yet consumed. Carries
    /// `ENOMEM`, as libibverbs reports it.
    QueueFull {
        /// Requests outstanding (the queue's capacity).
        outstanding: u32,
    },
    /// More SGEs than the queue was created for.
    TooManySges {
        /// SGEs in the request.
        num_sge: usize,
        /// SGEs the queue takes (as the kernel returned it at creation).
        max_sge: u32,
    },
    /// The SGE lengths add up to more than 4 GiB - 1 bytes.
    LengthOverflow {
        /// The sum of the SGE lengths.
        len: u64,
    },
    /// INLINE data longer than the QP's `max_inline_data`.
    InlineTooLong {
        /// Bytes of the request's SGEs together.
        len: u64,
        /// The QP's `max_inline_data`.
        max_inline: u32,
    },
    /// INLINE asked for an operation that carries no outbound payload.
    InlineNotAllowed {
        /// The operation.
        op: crate::values::OpKind,
    },
    /// An operation that takes no SGEs (LOCAL_INV, BIND_MW, FLUSH, ATOMIC_WRITE) given some.
    SgesOnLocalOp {
        /// The operation.
        op: crate::values::OpKind,
        /// SGEs given.
        num_sge: usize,
    },
    /// Send flags the provider does not implement (e.g. IP_CSUM).
    FlagsNotEncoded {
        /// The flag bits it does not implement (`IBV_SEND_*` numbering).
        flags: u32,
        /// The provider's name.
        provider: &'static str,
    },
    /// A UD send without a destination.
    NoUdDest,
    /// A UD destination whose address handle the provider does not know (rxe: `ah_num` 0, an
    /// AH created without the driver's response; mlx5: not an AH of this context).
    UnknownAh {
        /// The destination's `ah_num`.
        ah_num: u32,
        /// The provider's name.
        provider: &'static str,
    },
    /// An atomic's local buffer is shorter than 8 bytes.
    AtomicLength {
        /// Bytes of the request's SGEs together.
        len: u64,
    },
    /// An atomic's remote address is not 8-byte aligned.
    AtomicAlignment {
        /// The remote address given.
        remote_addr: u64,
    },
    /// A memory-window bind longer than the provider can encode.
    BindTooLong {
        /// The bind's length.
        length: u64,
        /// The longest the provider binds.
        max: u64,
        /// The provider's name.
        provider: &'static str,
    },
    /// A zero-based bind of a type 1 memory window, which the provider refuses.
    ZeroBasedType1Bind {
        /// The provider's name.
        provider: &'static str,
    },
    /// Receives posted to a QP in RESET.
    NotReadyToReceive {
        /// The QP's state as last set.
        state: crate::values::QpState,
    },
    /// Receives posted to a QP whose receives go to an SRQ.
    NoReceiveQueue,
    /// The transport carries it and the provider encodes it, but the device does not report
    /// the capability (FLUSH, ATOMIC_WRITE: [`DeviceCapsEx`](crate::DeviceCapsEx);
    /// e.g. rxe before Linux 6.2).
    OpNotOnDevice {
        /// The operation.
        op: crate::values::OpKind,
        /// The provider's name.
        provider: &'static str,
    },
    /// An RDMA READ whose sink is not exactly one SGE: iWARP (siw) tags one sink buffer per
    /// read.
    ReadSinkSges {
        /// SGEs given.
        num_sge: usize,
        /// The provider's name.
        provider: &'static str,
    },
    /// An RDMA READ on an iWARP QP whose sink is a region registered without
    /// `REMOTE_WRITE`: iWARP places a READ's data into the sink by its steering tag, as it
    /// does an RDMA WRITE's ([`OpSet`](crate::OpSet), "iWARP").
    ReadSinkNotRemoteWrite {
        /// The sink SGE's local key.
        lkey: u32,
    },
    /// A request the device writes (a receive, an RDMA READ's sink, an atomic's result) into
    /// a region over borrowed memory ([`Mr::scoped`](crate::mr::Mr::scoped),
    /// [`Mr::register_unchecked`](crate::mr::Mr::register_unchecked) of a borrow): such a
    /// region's memory goes back to its owner when the `Mr` is dropped, which cannot wait for
    /// the request's completion, so only owned memory may be written by a safe post.
    BorrowedSink {
        /// The SGE's local key.
        lkey: u32,
    },
}

impl PostFault {
    internal! {
    /// The `io::ErrorKind` a refusal for this fault carries: `Unsupported` for what the
    /// transport or provider does not do, `OutOfMemory` for a full queue, `InvalidInput`
    /// for everything wrong with the request itself.
    pub const fn kind(&self) -> io::ErrorKind {
        match self {
            PostFault::OpForTransport { .. }
            | PostFault::OpNotEncoded { .. }
            | PostFault::FlagsNotEncoded { .. }
            | PostFault::BindTooLong { .. }
            | PostFault::OpNotOnDevice { .. } => io::ErrorKind::Unsupported,
            PostFault::QueueFull { .. } => io::ErrorKind::OutOfMemory,
            _ => io::ErrorKind::InvalidInput,
        }
    }
    }

    internal! {
    /// The errno the refusal names itself (`ENOMEM` for a full queue, as libibverbs reports
    /// it); `None` for the others, whose errno follows from [`PostFault::kind`].
    pub const fn errno(&self) -> Option<Errno> {
        match self {
            PostFault::QueueFull { .. } => Some(Errno::NOMEM),
            _ => None,
        }
    }
    }
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
            PostFault::NotReadyToSend { state } => {
                write!(f, "the QP is in {state}: sends need RTS (connect first)")
            }
            PostFault::QueueFull { outstanding } => {
                write!(f, "queue full ({outstanding} requests outstanding)")
            }
            PostFault::TooManySges { num_sge, max_sge } => {
                write!(f, "{num_sge} SGEs, the queue allows {max_sge}")
            }
            PostFault::LengthOverflow { len } => write!(
                f,
                "SGE lengths add up to {len} bytes, more than fits in 32 bits"
            ),
            PostFault::InlineTooLong { len, max_inline } => write!(
                f,
                "{len} bytes of inline data, the QP's max_inline_data is {max_inline}"
            ),
            PostFault::InlineNotAllowed { op } => write!(f, "INLINE is not possible with {op}"),
            PostFault::SgesOnLocalOp { op, num_sge } => {
                write!(f, "{op} takes no SGEs, got {num_sge}")
            }
            PostFault::FlagsNotEncoded { flags, provider } => {
                write!(f, "send flags {flags:#x} are not supported by {provider}")
            }
            PostFault::NoUdDest => f.write_str("a UD send needs a destination (an AH)"),
            PostFault::UnknownAh { ah_num, provider } => write!(
                f,
                "AH number {ah_num} is not a {provider} AH of this context"
            ),
            PostFault::AtomicLength { len } => {
                write!(f, "atomic with a {len}-byte local buffer, needs 8")
            }
            PostFault::AtomicAlignment { remote_addr } => write!(
                f,
                "atomic remote address {remote_addr:#x} is not 8-byte aligned"
            ),
            PostFault::BindTooLong {
                length,
                max,
                provider,
            } => write!(
                f,
                "a memory-window bind of {length} bytes exceeds {provider}'s {max}"
            ),
            PostFault::ZeroBasedType1Bind { provider } => write!(
                f,
                "a type 1 memory window cannot be bound zero-based on {provider}"
            ),
            PostFault::NotReadyToReceive { state } => {
                write!(f, "the QP is in {state}: receives need INIT or later")
            }
            PostFault::NoReceiveQueue => {
                f.write_str("the QP uses an SRQ: post receives to the SRQ")
            }
            PostFault::OpNotOnDevice { op, provider } => write!(
                f,
                "{op} is not supported by this kernel's {provider} (the device does not report \
                 the IBTA 1.5 capability in device_cap_flags_ex)"
            ),
            PostFault::ReadSinkSges { num_sge, provider } => write!(
                f,
                "RDMA_READ with {num_sge} sink SGEs: {provider} (iWARP) reads into exactly one"
            ),
            PostFault::ReadSinkNotRemoteWrite { lkey } => write!(
                f,
                "RDMA_READ into lkey {lkey:#x}, a region registered without REMOTE_WRITE: on \
                 iWARP the peer places a READ's data into its sink as it would an RDMA \
                 WRITE's, so the sink must be registered with REMOTE_WRITE"
            ),
            PostFault::BorrowedSink { lkey } => write!(
                f,
                "a request the device writes into lkey {lkey:#x}, a region over borrowed \
                 memory (Mr::scoped): its memory goes back to its owner when the Mr is \
                 dropped, before the request may be over; register owned memory (a Vec, a \
                 Box, a PageBuf) for receives, READ sinks and atomic results"
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
/// A refused request is `PostError::refused` with its typed [`PostFault`] (the core's
/// checks and every provider use it); a failure after queueing (the doorbell) is
/// `PostError::failed`; `PostError::invalid` and `PostError::unsupported` describe in
/// words what no `PostFault` covers. The core adds the device and queue
/// (`PostError::at`) before the caller sees it. Converts to [`std::io::Error`] keeping its
/// kind, and [`Error::errno_of`](crate::Error::errno_of) finds its errno (a full queue's
/// `ENOMEM`, as libibverbs reports it) through the conversion.
#[derive(Debug)]
pub struct PostError {
    target: Option<PostTarget>,
    index: Option<usize>,
    posted: usize,
    kind: std::io::ErrorKind,
    errno: Option<rustix::io::Errno>,
    what: What,
    source: Option<std::io::Error>,
}

/// What was wrong: a typed fault (its words written when asked for) or words alone.
#[derive(Debug)]
enum What {
    Fault(PostFault),
    Words(String),
}

impl PostError {
    fn new(index: Option<usize>, posted: usize, kind: std::io::ErrorKind, what: What) -> Self {
        Self {
            target: None,
            index,
            posted,
            kind,
            errno: None,
            what,
            source: None,
        }
    }

    internal! {
    /// Work request `index` of the list was refused for `fault`; the `index` requests before
    /// it were posted. The kind and errno are the fault's ([`PostFault::kind`],
    /// [`PostFault::errno`]).
    #[cold]
    pub fn refused(index: usize, fault: PostFault) -> Self {
        // No allocation: the words are the fault's Display, written when asked for.
        let mut e = Self::new(Some(index), index, fault.kind(), What::Fault(fault));
        e.errno = fault.errno();
        e
    }
    }

    internal! {
    /// Work request `index` of the list is malformed for this queue (too many SGEs, inline
    /// data too long, wrong state, …); the `index` requests before it were posted.
    #[cold]
    pub fn invalid(index: usize, what: impl Into<String>) -> Self {
        Self::new(
            Some(index),
            index,
            std::io::ErrorKind::InvalidInput,
            What::Words(what.into()),
        )
    }
    }

    internal! {
    /// Work request `index` asks for something the provider does not implement; the `index`
    /// requests before it were posted.
    #[cold]
    pub fn unsupported(index: usize, what: impl Into<String>) -> Self {
        Self::new(
            Some(index),
            index,
            std::io::ErrorKind::Unsupported,
            What::Words(what.into()),
        )
    }
    }

    internal! {
    /// Work request `index` found the queue full, with `outstanding` requests not yet consumed;
    /// the `index` requests before it were posted. Carries `ENOMEM`, as libibverbs reports it.
    /// The same as `PostError::refused` with [`PostFault::QueueFull`].
    #[cold]
    pub fn queue_full(index: usize, outstanding: u32) -> Self {
        Self::refused(index, PostFault::QueueFull { outstanding })
    }
    }

    internal! {
    /// `posted` requests went into the queue, then `what` failed with `source` (e.g. the
    /// doorbell write); no single work request is at fault.
    #[cold]
    pub fn failed(posted: usize, what: impl Into<String>, source: std::io::Error) -> Self {
        let mut e = Self::new(None, posted, source.kind(), What::Words(what.into()));
        e.errno = crate::Error::errno_of(&source);
        e.source = Some(source);
        e
    }
    }

    internal! {
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
    }

    /// The device's name, once `PostError::at` named it.
    pub fn device(&self) -> Option<&str> {
        self.target.as_ref().map(|t| &*t.device)
    }

    /// The queue posted to, once `PostError::at` named it.
    pub fn queue(&self) -> Option<PostQueue> {
        self.target.as_ref().map(|t| t.queue)
    }

    /// The QP number (SRQ number for [`PostQueue::Srq`]), once `PostError::at` named it.
    pub fn number(&self) -> Option<u32> {
        self.target.as_ref().map(|t| t.number)
    }

    /// Index in the list of the work request that failed; `None` when the failure came after
    /// queueing (see `PostError::failed`).
    pub fn index(&self) -> Option<usize> {
        self.index
    }

    /// Work requests posted (and, for sends, rung) before the failure.
    pub fn posted(&self) -> usize {
        self.posted
    }

    /// What was wrong, without the device, queue or counts.
    pub fn what(&self) -> Cow<'_, str> {
        match &self.what {
            What::Fault(f) => Cow::Owned(f.to_string()),
            What::Words(w) => Cow::Borrowed(w),
        }
    }

    /// What was wrong with the refused request, typed: set by `PostError::refused` (so by
    /// every refusal of rverbs' core and providers); `None` for a failure after queueing
    /// (`PostError::failed`) and for a description in words only (`PostError::invalid`,
    /// `PostError::unsupported`).
    pub fn fault(&self) -> Option<PostFault> {
        match self.what {
            What::Fault(f) => Some(f),
            What::Words(_) => None,
        }
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
        match &self.what {
            What::Fault(fault) => write!(f, "{fault}")?,
            What::Words(w) => f.write_str(w)?,
        }
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
    fn add_detail_extends_an_rverbs_error_and_keeps_the_rest() {
        let io: io::Error = Error::os("resolve address", Errno::NETUNREACH).into();
        let e = Error::add_detail(io, "destination 10.0.0.9:7471");
        assert_eq!(e.kind(), io::ErrorKind::NetworkUnreachable);
        assert_eq!(Error::errno_of(&e), Some(Errno::NETUNREACH));
        let s = e.to_string();
        assert!(
            s.starts_with("resolve address: destination 10.0.0.9:7471: "),
            "{s}"
        );
        let e = Error::add_detail(e, "port 7471");
        assert!(
            e.to_string()
                .contains("destination 10.0.0.9:7471; port 7471"),
            "{e}"
        );
        // Another payload stays as it was; a plain OS error keeps its kind and message.
        let other = io::Error::other("peer said no");
        assert_eq!(Error::add_detail(other, "x").to_string(), "peer said no");
        let os = io::Error::from_raw_os_error(Errno::NOENT.raw_os_error());
        let e = Error::add_detail(os, "device rxe9");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().ends_with("; device rxe9"), "{e}");
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
        let state = PostError::refused(
            0,
            PostFault::NotReadyToSend {
                state: crate::values::QpState::INIT,
            },
        )
        .at("rxe0", PostQueue::Send, 0x11);
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

    /// Every fault: its words, and the kind and errno its refusal carries (the C drop-in's
    /// errno follows from them).
    #[test]
    fn every_fault_says_what_and_carries_its_kind() {
        use crate::qp::{QpState, QpType};
        use crate::values::OpKind;
        use io::ErrorKind::{InvalidInput, OutOfMemory, Unsupported};
        let cases: &[(PostFault, &str, io::ErrorKind)] = &[
            (
                PostFault::OpForTransport {
                    op: OpKind::RdmaRead,
                    qp_type: QpType::UD,
                },
                "a UD QP does not support RDMA_READ (the UD transport does not carry it)",
                Unsupported,
            ),
            (
                PostFault::OpNotEncoded {
                    op: OpKind::BindMw,
                    qp_type: QpType::UC,
                    provider: "rxe",
                },
                "rxe does not support BIND_MW on UC QPs",
                Unsupported,
            ),
            (
                PostFault::NotReadyToSend {
                    state: QpState::RTR,
                },
                "the QP is in RTR: sends need RTS (connect first)",
                InvalidInput,
            ),
            (
                PostFault::NotReadyToReceive {
                    state: QpState::RESET,
                },
                "the QP is in RESET: receives need INIT or later",
                InvalidInput,
            ),
            (
                PostFault::QueueFull { outstanding: 7 },
                "queue full (7 requests outstanding)",
                OutOfMemory,
            ),
            (
                PostFault::TooManySges {
                    num_sge: 5,
                    max_sge: 4,
                },
                "5 SGEs, the queue allows 4",
                InvalidInput,
            ),
            (
                PostFault::LengthOverflow { len: 1 << 32 },
                "SGE lengths add up to 4294967296 bytes, more than fits in 32 bits",
                InvalidInput,
            ),
            (
                PostFault::InlineTooLong {
                    len: 61,
                    max_inline: 60,
                },
                "61 bytes of inline data, the QP's max_inline_data is 60",
                InvalidInput,
            ),
            (
                PostFault::InlineNotAllowed {
                    op: OpKind::AtomicCmpSwp,
                },
                "INLINE is not possible with ATOMIC_CMP_AND_SWP",
                InvalidInput,
            ),
            (
                PostFault::SgesOnLocalOp {
                    op: OpKind::LocalInv,
                    num_sge: 2,
                },
                "LOCAL_INV takes no SGEs, got 2",
                InvalidInput,
            ),
            (
                PostFault::FlagsNotEncoded {
                    flags: 0x10,
                    provider: "rxe",
                },
                "send flags 0x10 are not supported by rxe",
                Unsupported,
            ),
            (
                PostFault::NoUdDest,
                "a UD send needs a destination (an AH)",
                InvalidInput,
            ),
            (
                PostFault::UnknownAh {
                    ah_num: 99,
                    provider: "mlx5",
                },
                "AH number 99 is not a mlx5 AH of this context",
                InvalidInput,
            ),
            (
                PostFault::AtomicLength { len: 4 },
                "atomic with a 4-byte local buffer, needs 8",
                InvalidInput,
            ),
            (
                PostFault::AtomicAlignment {
                    remote_addr: 0x1004,
                },
                "atomic remote address 0x1004 is not 8-byte aligned",
                InvalidInput,
            ),
            (
                PostFault::BindTooLong {
                    length: 3,
                    max: 2,
                    provider: "mlx5",
                },
                "a memory-window bind of 3 bytes exceeds mlx5's 2",
                Unsupported,
            ),
            (
                PostFault::ZeroBasedType1Bind { provider: "mlx5" },
                "a type 1 memory window cannot be bound zero-based on mlx5",
                InvalidInput,
            ),
            (
                PostFault::NoReceiveQueue,
                "the QP uses an SRQ: post receives to the SRQ",
                InvalidInput,
            ),
            (
                PostFault::ReadSinkSges {
                    num_sge: 2,
                    provider: "siw",
                },
                "RDMA_READ with 2 sink SGEs: siw (iWARP) reads into exactly one",
                InvalidInput,
            ),
            (
                PostFault::ReadSinkNotRemoteWrite { lkey: 0x42 },
                "RDMA_READ into lkey 0x42, a region registered without REMOTE_WRITE: on iWARP \
                 the peer places a READ's data into its sink as it would an RDMA WRITE's, so \
                 the sink must be registered with REMOTE_WRITE",
                InvalidInput,
            ),
            (
                PostFault::BorrowedSink { lkey: 0x43 },
                "a request the device writes into lkey 0x43, a region over borrowed memory \
                 (Mr::scoped): its memory goes back to its owner when the Mr is dropped, \
                 before the request may be over; register owned memory (a Vec, a Box, a \
                 PageBuf) for receives, READ sinks and atomic results",
                InvalidInput,
            ),
        ];
        for &(fault, words, kind) in cases {
            let e = PostError::refused(3, fault).at("dev0", PostQueue::Send, 1);
            assert_eq!(e.fault(), Some(fault));
            assert_eq!(e.what(), words);
            assert_eq!((e.index(), e.posted(), e.kind()), (Some(3), 3, kind));
            let errno = e.errno();
            assert_eq!(errno, fault.errno());
            let io = io::Error::from(e);
            assert_eq!(io.kind(), kind, "{words}");
            assert_eq!(Error::errno_of(&io), errno);
            let s = io.to_string();
            assert!(
                s.starts_with(&format!(
                    "post send to QP 0x1 on dev0: work request #3: {words}"
                )) && s.ends_with("; 3 posted"),
                "{s}"
            );
        }
        assert_eq!(
            PostFault::QueueFull { outstanding: 1 }.errno(),
            Some(Errno::NOMEM)
        );
        // Small enough to return by value on every post (clippy's result_large_err).
        assert!(std::mem::size_of::<PostError>() < 128);
    }
}
