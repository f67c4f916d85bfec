//! Refused and failed posts: the queue a post went to, the typed fault of a refused work
//! request ([`PostFault`]) and the error a post returns ([`PostError`]).

use std::borrow::Cow;
use std::fmt;
use std::io;

use rustix::io::Errno;

use super::errno_name;

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
