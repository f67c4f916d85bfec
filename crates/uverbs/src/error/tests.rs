//! Unit tests of the errors and their words.

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
    let sge = PostError::invalid(2, "3 SGEs, the queue allows 2").at("rxe0", PostQueue::Recv, 7);
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
