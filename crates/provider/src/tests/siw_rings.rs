//! siw rings against a simulated kernel (`siw::sim`) with the kernel's flag handshake: what
//! each SQE/RQE holds, the doorbell rule, full rings, CQE decoding and arming, iWARP's
//! refusals, lying geometries, and a kernel thread racing the user side (run under Miri with
//! the counts cut down).

use std::ptr::NonNull;
use std::thread;

use crate::siw::abi::{
    notify, opcode, siw_cq_ctrl, siw_cqe, siw_rqe, siw_sqe, wc_status, wqe_flags, SIW_MAX_INLINE,
};
use crate::siw::driver::{send_caps, SiwDriver};
use crate::siw::ring::{Posted, Ring, SiwCq, SiwRq, SiwSq, SqConfig, UNKNOWN_OPCODE_BASE};
use crate::siw::sim::SimRing;
use crate::siw::SiwQueue;
use rverbs_uverbs::driver::Driver;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::PostFault;
use rverbs_uverbs::{
    OpKind, OpSet, RecvWr, SendFlags, SendOp, SendWr, Sge, WcFlags, WcOpcode, WcStatus,
    WorkCompletion,
};

const N: u64 = if cfg!(miri) { 30 } else { 100_000 };

/// A send post in which every request went in.
#[track_caller]
fn all(p: Posted) -> Posted {
    assert_eq!(p.refused, None, "{p:?}");
    p
}

fn sq_ring(slots: u32) -> SimRing {
    SimRing::new(slots, size_of::<siw_sqe>(), 0)
}

fn rq_ring(slots: u32) -> SimRing {
    SimRing::new(slots, size_of::<siw_rqe>(), 0)
}

fn cq_ring(slots: u32) -> SimRing {
    SimRing::new(slots, size_of::<siw_cqe>(), size_of::<siw_cq_ctrl>())
}

fn sq(r: &SimRing, max_sge: u32, sig_all: bool) -> SiwSq {
    // SAFETY: `r` outlives the queue in every test; one user side.
    SiwSq::new(
        // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
        unsafe { r.view(SiwQueue::Send) },
        SqConfig {
            max_sge,
            max_inline: SIW_MAX_INLINE as u32,
            sig_all,
        },
    )
    .unwrap()
}

fn wr<'a>(wr_id: u64, op: SendOp, sge: &'a [Sge], flags: SendFlags) -> SendWr<'a> {
    SendWr {
        wr_id,
        op,
        sge,
        flags,
        ud: None,
    }
}

fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

#[test]
fn siw_send_caps_are_iwarps() {
    let c = send_caps();
    let rc = OpSet::of(&[
        OpKind::Send,
        OpKind::SendWithInv,
        OpKind::RdmaWrite,
        OpKind::RdmaRead,
    ]);
    assert_eq!(c.allowed(QpType::RC), rc);
    assert_eq!(c.allowed(QpType::UC), OpSet::EMPTY);
    assert_eq!(c.allowed(QpType::UD), OpSet::EMPTY);
    for k in [
        OpKind::AtomicCmpSwp,
        OpKind::AtomicFetchAdd,
        OpKind::SendWithImm,
        OpKind::RdmaWriteWithImm,
        OpKind::LocalInv,
        OpKind::BindMw,
    ] {
        assert!(!c.allowed(QpType::RC).contains(k), "{k}");
    }
    let d = SiwDriver::new("siw0");
    assert_eq!(d.send_caps(), c);
    // REG_MR carries siw_ureq_reg_mr (8 zero bytes) and room for siw_uresp_reg_mr.
    assert_eq!(d.reg_mr_udata(), (&[0u8; 8][..], 8));
}

#[test]
fn siw_sqes_hold_what_the_kernel_reads() {
    let r = sq_ring(8);
    let mut q = sq(&r, 2, false);
    let mut k = r.kernel();
    let two = [sge(0x1000, 10, 7), sge(0x2000, 20, 8)];
    let one = [sge(0x3000, 64, 9)];
    let wrs = [
        wr(
            1,
            SendOp::Send,
            &two,
            SendFlags::SIGNALED | SendFlags::SOLICITED,
        ),
        wr(
            2,
            SendOp::RdmaWrite {
                remote_addr: 0xdead_0000,
                rkey: 0x55,
            },
            &one,
            SendFlags::FENCE,
        ),
        wr(
            3,
            SendOp::RdmaRead {
                remote_addr: 0xbeef_0000,
                rkey: 0x66,
            },
            &one,
            SendFlags::SIGNALED,
        ),
        wr(
            4,
            SendOp::SendWithInv {
                invalidate_rkey: 0x77,
            },
            &[],
            SendFlags::empty(),
        ),
    ];
    // SAFETY: nothing reads the SGEs' memory (the simulated kernel only copies the SQEs).
    let p = all(unsafe { q.post(&wrs) });
    assert_eq!(p.count, 4);
    assert!(p.ring_doorbell, "a fresh SQ is idle");

    let s: siw_sqe = k.take().unwrap();
    assert_eq!((s.id, s.opcode, s.num_sge), (1, opcode::SEND, 2));
    assert_eq!(
        s.flags,
        wqe_flags::VALID | wqe_flags::SIGNALLED | wqe_flags::SOLICITED
    );
    assert_eq!(
        (s.sge[0].laddr, s.sge[0].length, s.sge[0].lkey),
        (0x1000, 10, 7)
    );
    assert_eq!(
        (s.sge[1].laddr, s.sge[1].length, s.sge[1].lkey),
        (0x2000, 20, 8)
    );

    let s: siw_sqe = k.take().unwrap();
    assert_eq!((s.id, s.opcode, s.num_sge), (2, opcode::WRITE, 1));
    assert_eq!(s.flags, wqe_flags::VALID | wqe_flags::READ_FENCE);
    assert_eq!((s.raddr, s.rkey), (0xdead_0000, 0x55));

    let s: siw_sqe = k.take().unwrap();
    assert_eq!((s.id, s.opcode, s.num_sge), (3, opcode::READ, 1));
    assert_eq!((s.raddr, s.rkey, s.sge[0].length), (0xbeef_0000, 0x66, 64));

    let s: siw_sqe = k.take().unwrap();
    assert_eq!(
        (s.id, s.opcode, s.num_sge, s.rkey),
        (4, opcode::SEND_REMOTE_INV, 0, 0x77)
    );
    assert!(k.take::<siw_sqe>().is_none());
}

#[test]
fn siw_sig_all_signals_every_sqe() {
    let r = sq_ring(2);
    let mut q = sq(&r, 1, true);
    // SAFETY: no SGEs.
    all(unsafe { q.post(&[wr(9, SendOp::Send, &[], SendFlags::empty())]) });
    let s: siw_sqe = r.kernel().take().unwrap();
    assert_eq!(s.flags, wqe_flags::VALID | wqe_flags::SIGNALLED);
}

#[test]
fn siw_inline_is_copied_into_the_sqe() {
    let r = sq_ring(2);
    let mut q = sq(&r, 1, false);
    let mut a = *b"hello, ";
    let mut b = [b'x'; 73]; // 7 + 73 = 80 = SIW_MAX_INLINE
    let sges = [
        sge(a.as_mut_ptr() as u64, 7, 0),
        sge(0, 0, 0), // empty: skipped, its address never read
        sge(b.as_mut_ptr() as u64, 73, 0),
    ];
    // SAFETY: the inline sources are live locals nobody writes during the call (more SGEs
    // than max_sge is fine inline: the bytes are copied).
    // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
    let p = all(unsafe { q.post(&[wr(5, SendOp::Send, &sges, SendFlags::INLINE)]) });
    assert_eq!(p.count, 1);
    let s: siw_sqe = r.kernel().take().unwrap();
    assert_eq!(s.flags, wqe_flags::VALID | wqe_flags::INLINE);
    assert_eq!((s.num_sge, s.sge[0].length, s.sge[0].lkey), (1, 80, 0));
    let bytes = zerocopy::IntoBytes::as_bytes(&s.sge[1..]);
    assert_eq!(&bytes[..7], b"hello, ");
    assert!(bytes[7..80].iter().all(|&c| c == b'x'));
}

#[test]
fn siw_refuses_what_iwarp_does_not_allow() {
    let r = sq_ring(4);
    let mut q = sq(&r, 2, false);
    let mut big = [0u8; SIW_MAX_INLINE + 1];
    let three = [sge(0, 1, 1), sge(0, 1, 1), sge(0, 1, 1)];
    let two = [sge(0, 1, 1), sge(0, 1, 1)];
    let read = SendOp::RdmaRead {
        remote_addr: 0,
        rkey: 1,
    };
    let big_sge = [sge(big.as_mut_ptr() as u64, 81, 0)];
    let one8 = [sge(0, 8, 1)];
    let cases: [(SendWr<'_>, PostFault, &str); 7] = [
        (
            wr(1, SendOp::Send, &big_sge, SendFlags::INLINE),
            PostFault::InlineTooLong {
                len: 81,
                max_inline: 80,
            },
            "81 bytes of inline data, the QP's max_inline_data is 80",
        ),
        (
            wr(2, read, &two, SendFlags::empty()),
            PostFault::ReadSinkSges {
                num_sge: 2,
                provider: "siw",
            },
            "RDMA_READ with 2 sink SGEs: siw (iWARP) reads into exactly one",
        ),
        (
            wr(2, read, &[], SendFlags::empty()),
            PostFault::ReadSinkSges {
                num_sge: 0,
                provider: "siw",
            },
            "RDMA_READ with 0 sink SGEs: siw (iWARP) reads into exactly one",
        ),
        (
            wr(3, read, &one8, SendFlags::INLINE),
            PostFault::InlineNotAllowed {
                op: OpKind::RdmaRead,
            },
            "INLINE is not possible with RDMA_READ",
        ),
        (
            wr(4, SendOp::Send, &three, SendFlags::empty()),
            PostFault::TooManySges {
                num_sge: 3,
                max_sge: 2,
            },
            "3 SGEs, the queue allows 2",
        ),
        (
            wr(
                5,
                SendOp::AtomicFetchAdd {
                    remote_addr: 0,
                    rkey: 1,
                    add: 1,
                },
                &one8,
                SendFlags::empty(),
            ),
            // What `Qp` refuses first (the driver asserts it in debug builds): the ring's guard
            // for direct callers writes nothing.
            PostFault::OpNotEncoded {
                op: OpKind::AtomicFetchAdd,
                qp_type: QpType::RC,
                provider: "siw",
            },
            "siw does not support ATOMIC_FETCH_AND_ADD on RC QPs",
        ),
        (
            wr(6, SendOp::Send, &[], SendFlags::IP_CSUM),
            PostFault::FlagsNotEncoded {
                flags: SendFlags::IP_CSUM.bits(),
                provider: "siw",
            },
            "send flags 0x10 are not supported by siw",
        ),
    ];
    for (w, fault, text) in cases {
        // SAFETY: every request is refused before anything is copied or written.
        let p = unsafe { q.post(&[w]) };
        assert_eq!(
            p,
            Posted {
                count: 0,
                ring_doorbell: false,
                refused: Some(fault)
            }
        );
        let e = p.error().unwrap();
        assert_eq!(e.fault(), Some(fault));
        assert_eq!(e.kind(), fault.kind());
        assert_eq!(
            e.to_string(),
            format!("post: work request #0: {text}; 0 posted")
        );
    }
    assert_eq!(r.flags_of(0), 0, "nothing was written into the ring");
    // The QP's own max_inline_data (below siw's 80) is the limit, as on rxe and mlx5.
    let r16 = sq_ring(4);
    let mut q16 = SiwSq::new(
        // SAFETY: `r16` outlives `q16`; one user side.
        unsafe { r16.view(SiwQueue::Send) },
        SqConfig {
            max_sge: 1,
            max_inline: 16,
            sig_all: false,
        },
    )
    .unwrap();
    let seventeen = [sge(big.as_mut_ptr() as u64, 17, 0)];
    // SAFETY: refused before anything is copied.
    let p = unsafe { q16.post(&[wr(7, SendOp::Send, &seventeen, SendFlags::INLINE)]) };
    assert_eq!(
        p.refused,
        Some(PostFault::InlineTooLong {
            len: 17,
            max_inline: 16
        })
    );
    assert_eq!(r16.flags_of(0), 0);
}

#[test]
fn siw_full_sq_and_the_doorbell_rule() {
    let r = sq_ring(4);
    let mut q = sq(&r, 1, false);
    let mut k = r.kernel();
    let send = |i| wr(i, SendOp::Send, &[], SendFlags::SIGNALED);
    // SAFETY: no SGEs (nor in any post of this test).
    let p = all(unsafe { q.post(&[send(0), send(1)]) });
    assert!(p.ring_doorbell);
    // The kernel has not taken #1: it is busy with this SQ, no doorbell.
    // SAFETY: the simulated kernel reads only the ring, never the memory the SGEs name.
    let p = all(unsafe { q.post(&[send(2)]) });
    assert!(!p.ring_doorbell);
    // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
    let p = all(unsafe { q.post(&[send(3)]) });
    assert!(!p.ring_doorbell);
    // Full: four outstanding.
    // SAFETY: the simulated kernel reads only the ring, never the memory the SGEs name.
    let p = unsafe { q.post(&[send(4)]) };
    assert_eq!((p.count, p.ring_doorbell), (0, false));
    assert_eq!(p.refused, Some(PostFault::QueueFull { outstanding: 4 }));
    assert_eq!(
        rverbs_uverbs::Error::errno_of(&p.error().unwrap().into()),
        Some(rustix::io::Errno::NOMEM)
    );
    // The kernel takes everything and goes idle: the next post rings.
    for i in 0..4 {
        assert_eq!(k.take::<siw_sqe>().unwrap().id, i);
    }
    // SAFETY: the simulated kernel reads only the ring, never the memory the SGEs name.
    let p = all(unsafe { q.post(&[send(4), send(5)]) });
    assert!(p.ring_doorbell);
    // A list that stops part-way still asks for the doorbell of the ones before it.
    assert_eq!(k.take::<siw_sqe>().unwrap().id, 4);
    assert_eq!(k.take::<siw_sqe>().unwrap().id, 5);
    // SAFETY: the simulated kernel reads only the ring, never the memory the SGEs name.
    let p = unsafe {
        q.post(&[
            send(6),
            wr(7, SendOp::Send, &[], SendFlags::IP_CSUM),
            send(8),
        ])
    };
    assert_eq!((p.count, p.ring_doorbell), (1, true));
    let e = p.error().unwrap();
    assert_eq!((e.index(), e.posted()), (Some(1), 1));
    assert!(matches!(e.fault(), Some(PostFault::FlagsNotEncoded { .. })));
    assert_eq!(k.take::<siw_sqe>().unwrap().id, 6);
    assert!(k.take::<siw_sqe>().is_none());
}

#[test]
fn siw_receive_rings() {
    for queue in [SiwQueue::Recv, SiwQueue::Srq] {
        let r = rq_ring(2);
        // SAFETY: `r` outlives `q`; one user side.
        let mut q = SiwRq::new(unsafe { r.view(queue) }, 2, queue).unwrap();
        let mut k = r.kernel();
        let two = [sge(0x10, 1, 2), sge(0x20, 3, 4)];
        let wrs = [RecvWr::new(1, &two[..]), RecvWr::new(2, &two[..1])];
        // SAFETY: the simulated kernel writes nothing through the SGEs.
        assert_eq!(unsafe { q.post(&wrs) }.unwrap(), 2);
        // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
        let e = unsafe { q.post(&wrs[..1]) }.unwrap_err();
        assert_eq!(e.fault(), Some(PostFault::QueueFull { outstanding: 2 }));
        assert_eq!((e.index(), e.posted()), (Some(0), 0));
        assert_eq!(
            e.to_string(),
            "post: work request #0: queue full (2 requests outstanding) (ENOMEM); 0 posted"
        );
        let a: siw_rqe = k.take().unwrap();
        assert_eq!((a.id, a.flags, a.num_sge), (1, wqe_flags::VALID, 2));
        assert_eq!(
            (a.sge[1].laddr, a.sge[1].length, a.sge[1].lkey),
            (0x20, 3, 4)
        );
        let b: siw_rqe = k.take().unwrap();
        assert_eq!((b.id, b.num_sge), (2, 1));
        let three = [sge(0, 1, 1); 3];
        // SAFETY: the simulated kernel reads only the ring, never the memory the SGEs name.
        let e = unsafe { q.post(&[wrs[1], RecvWr::new(3, &three[..])]) }.unwrap_err();
        assert_eq!(
            e.fault(),
            Some(PostFault::TooManySges {
                num_sge: 3,
                max_sge: 2
            })
        );
        assert_eq!((e.index(), e.posted()), (Some(1), 1));
        // SAFETY: as above.
        assert_eq!(unsafe { q.post(&wrs[..1]) }.unwrap(), 1);
    }
}

fn cqe(id: u64, op: u8, status: u16) -> siw_cqe {
    siw_cqe {
        id,
        flags: 0,
        opcode: op,
        status,
        bytes: id as u32 * 3,
        imm_data: 0,
        qp_id: 0x42,
    }
}

#[test]
fn siw_cqes_decode() {
    let r = cq_ring(16);
    // SAFETY: `r` outlives `cq`; one user side.
    let mut cq = SiwCq::new(unsafe { r.view(SiwQueue::Completion) }).unwrap();
    let mut k = r.kernel();
    let table = [
        (
            opcode::SEND,
            wc_status::SUCCESS,
            WcOpcode::SEND,
            WcStatus::SUCCESS,
        ),
        (
            opcode::WRITE,
            wc_status::LOC_LEN_ERR,
            WcOpcode::RDMA_WRITE,
            WcStatus::LOC_LEN_ERR,
        ),
        (
            opcode::READ,
            wc_status::LOC_PROT_ERR,
            WcOpcode::RDMA_READ,
            WcStatus::LOC_PROT_ERR,
        ),
        (
            opcode::RECEIVE,
            wc_status::WR_FLUSH_ERR,
            WcOpcode::RECV,
            WcStatus::WR_FLUSH_ERR,
        ),
        (
            opcode::SEND_REMOTE_INV,
            wc_status::REM_ACCESS_ERR,
            WcOpcode::SEND,
            WcStatus::REM_ACCESS_ERR,
        ),
        (
            opcode::READ_LOCAL_INV,
            wc_status::BAD_RESP_ERR,
            WcOpcode::RDMA_READ,
            WcStatus::BAD_RESP_ERR,
        ),
        (
            opcode::FETCH_AND_ADD,
            wc_status::LOC_ACCESS_ERR,
            WcOpcode::FETCH_ADD,
            WcStatus::LOC_ACCESS_ERR,
        ),
        (
            opcode::COMP_AND_SWAP,
            wc_status::REM_INV_REQ_ERR,
            WcOpcode::COMP_SWAP,
            WcStatus::REM_INV_REQ_ERR,
        ),
        (
            opcode::INVAL_STAG,
            wc_status::GENERAL_ERR,
            WcOpcode::LOCAL_INV,
            WcStatus::GENERAL_ERR,
        ),
        (
            opcode::SEND,
            wc_status::LOC_QP_OP_ERR,
            WcOpcode::SEND,
            WcStatus::LOC_QP_OP_ERR,
        ),
    ];
    for (i, &(op, st, _, _)) in table.iter().enumerate() {
        assert!(k.produce(&cqe(i as u64, op, st)));
    }
    let mut out = [WorkCompletion::default(); 16];
    assert_eq!(cq.poll(&mut out), table.len());
    for (i, (&(_, _, wop, wst), wc)) in table.iter().zip(&out).enumerate() {
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status),
            (i as u64, wop, wst),
            "#{i}"
        );
        assert_eq!(
            (wc.byte_len, wc.qp_num, wc.vendor_err),
            (i as u32 * 3, 0x42, 0)
        );
        assert_eq!(wc.wc_flags, WcFlags::empty());
    }
    assert_eq!(cq.poll(&mut out), 0);

    // A receive whose sender invalidated an STag; unknown numbers stay visible.
    let mut inv = cqe(100, opcode::RECEIVE, wc_status::SUCCESS);
    inv.flags = wqe_flags::REM_INVAL as u8;
    inv.imm_data = u64::from_ne_bytes([0x78, 0x56, 0x34, 0x12, 0, 0, 0, 0]);
    assert!(k.produce(&inv));
    assert!(k.produce(&cqe(101, 200, 77)));
    // No room: nothing is taken (the empty-poll shortcut must not consume a ready CQE).
    assert_eq!(cq.poll(&mut []), 0);
    assert_eq!(cq.poll(&mut out[..1]), 1);
    assert_eq!(out[0].wr_id, 100);
    assert_eq!(out[0].wc_flags, WcFlags::WITH_INV);
    assert_eq!(
        out[0].imm_data,
        u32::from_ne_bytes([0x78, 0x56, 0x34, 0x12])
    );
    assert_eq!(cq.poll(&mut out[..1]), 1);
    assert_eq!(out[0].opcode, WcOpcode(UNKNOWN_OPCODE_BASE + 200));
    assert_eq!(
        (out[0].status, out[0].vendor_err),
        (WcStatus::GENERAL_ERR, 77)
    );
}

#[test]
fn siw_full_cq_waits_for_the_poller() {
    let r = cq_ring(2);
    // SAFETY: `r` outlives `cq`; one user side.
    let mut cq = SiwCq::new(unsafe { r.view(SiwQueue::Completion) }).unwrap();
    let mut k = r.kernel();
    assert!(k.produce(&cqe(0, opcode::SEND, 0)));
    assert!(k.produce(&cqe(1, opcode::SEND, 0)));
    assert!(!k.produce(&cqe(2, opcode::SEND, 0)), "the ring is full");
    let mut out = [WorkCompletion::default(); 1];
    assert_eq!(cq.poll(&mut out), 1);
    assert!(
        k.produce(&cqe(2, opcode::SEND, 0)),
        "polled slot handed back"
    );
    let mut out = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut out), 2);
    assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
}

#[test]
fn siw_arming_writes_the_notify_word() {
    let r = cq_ring(2);
    // SAFETY: `r` outlives `cq`; one user side.
    let mut cq = SiwCq::new(unsafe { r.view(SiwQueue::Completion) }).unwrap();
    let mut k = r.kernel();
    assert_eq!(cq.notify_word(), notify::NOT);
    assert!(!k.notify_now(false), "not armed: no event");
    cq.arm(true);
    assert_eq!(cq.notify_word(), notify::SOLICITED);
    assert!(!k.notify_now(false), "solicited only");
    assert!(k.notify_now(true));
    assert_eq!(cq.notify_word(), notify::NOT, "one-shot");
    cq.arm(false);
    assert_eq!(
        cq.notify_word(),
        notify::SOLICITED | notify::NEXT_COMPLETION
    );
    assert!(k.notify_now(false));
    assert!(!k.notify_now(true));
}

#[test]
fn siw_ring_geometry_lies_are_refused() {
    let r = sq_ring(4);
    let e = size_of::<siw_sqe>();
    // SAFETY (each call): the buffer is live and unused; only the checks run.
    let bad = |base: NonNull<u8>, len, slots, elem, tail| {
        // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
        unsafe { Ring::new(base, len, slots, elem, tail, SiwQueue::Send) }
            .unwrap_err()
            .to_string()
    };
    assert!(bad(r.ptr(), r.len(), 3, e, 0).contains("not a power of two"));
    assert!(bad(r.ptr(), r.len(), 0, e, 0).contains("not a power of two"));
    assert!(bad(r.ptr(), r.len(), 1 << 23, e, 0).contains("not a power of two"));
    // The response says more elements than were mapped.
    assert!(bad(r.ptr(), r.len(), 64, e, 0).contains("the mapping has 4096"));
    assert!(bad(r.ptr(), 4 * e - 1, 4, e, 0).contains("need 480 bytes"));
    let odd = NonNull::new(r.ptr().as_ptr().wrapping_add(4)).unwrap();
    assert!(bad(odd, 1024, 4, e, 0).contains("not 8-byte aligned"));
    // A ring of other elements is not a send queue, nor a CQ; max_sge above siw's.
    // SAFETY: as above.
    let view = || unsafe { r.view(SiwQueue::Send) };
    assert!(SiwCq::new(view()).is_err());
    assert!(SiwRq::new(view(), 1, SiwQueue::Recv).is_err());
    assert!(SiwSq::new(
        view(),
        SqConfig {
            max_sge: 7,
            max_inline: 80,
            sig_all: false
        }
    )
    .is_err());
    // Nor inline room beyond an SQE's: the copy of `check`ed inline data stays in the slot.
    let sq_r = sq_ring(4);
    let e = SiwSq::new(
        // SAFETY: `sq_r` outlives the (refused) queue.
        unsafe { sq_r.view(SiwQueue::Send) },
        SqConfig {
            max_sge: 1,
            max_inline: 81,
            sig_all: false,
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("81 inline bytes"), "{e}");
}

/// The simulated kernel takes SQEs and completes each signalled one on another thread, while
/// this thread posts (sometimes inline) and polls: every completion arrives once, in order.
#[test]
fn siw_sq_and_cq_against_kernel_thread() {
    let sq_r = sq_ring(4);
    let cq_r = cq_ring(4);
    let mut q = sq(&sq_r, 1, false);
    // SAFETY: `cq_r` outlives `cq`; one user side.
    let mut cq = SiwCq::new(unsafe { cq_r.view(SiwQueue::Completion) }).unwrap();
    let mut payload = [7u8; 16];
    thread::scope(|s| {
        let (sq_r, cq_r) = (&sq_r, &cq_r);
        s.spawn(move || {
            let mut ks = sq_r.kernel();
            let mut kc = cq_r.kernel();
            let mut done = 0;
            while done < N {
                let Some(e) = ks.take::<siw_sqe>() else {
                    thread::yield_now();
                    continue;
                };
                assert_eq!(e.id, done);
                if e.flags & wqe_flags::INLINE != 0 {
                    assert_eq!(e.sge[0].length, 16);
                }
                let c = cqe(e.id, e.opcode, wc_status::SUCCESS);
                while !kc.produce(&c) {
                    thread::yield_now();
                }
                done += 1;
            }
        });
        let mut posted = 0u64;
        let mut polled = 0u64;
        let mut out = [WorkCompletion::default(); 3];
        let sges = [sge(payload.as_mut_ptr() as u64, 16, 0)];
        while polled < N {
            // Keep at most 4 outstanding (the CQ's size), as the verbs rule asks.
            if posted < N && posted - polled < 4 {
                let flags = if posted % 3 == 0 {
                    SendFlags::SIGNALED | SendFlags::INLINE
                } else {
                    SendFlags::SIGNALED
                };
                // SAFETY: `payload` is live and never written; the kernel thread reads only
                // the SQEs.
                // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
                let p = unsafe { q.post(&[wr(posted, SendOp::Send, &sges, flags)]) };
                match p.refused {
                    None => posted += 1,
                    Some(f) => assert!(matches!(f, PostFault::QueueFull { .. }), "{f}"),
                }
            }
            let n = cq.poll(&mut out);
            for wc in &out[..n] {
                assert_eq!(wc.wr_id, polled);
                assert_eq!(wc.status, WcStatus::SUCCESS);
                polled += 1;
            }
            if n == 0 {
                thread::yield_now();
            }
        }
    });
}

/// A UD (or UC) QP is refused before any kernel command, naming the device and the rule.
#[test]
#[cfg_attr(miri, ignore = "Miri cannot open files")]
fn siw_refuses_non_rc_qps_before_the_kernel() {
    use rverbs_uverbs::driver::{QpCreated, QpRequest};
    let d = SiwDriver::new("siw0");
    let f = std::fs::File::open("/dev/null").unwrap();
    for t in [QpType::UD, QpType::UC] {
        let req = QpRequest {
            qp_type: t,
            caps: Default::default(),
            sq_sig_all: false,
            has_srq: false,
            srq_handle: None,
        };
        let mut create = |_: &[u8], _: &mut [u8]| -> rverbs_uverbs::Result<QpCreated> {
            panic!("no kernel command may be issued for a {t} QP on siw")
        };
        use std::os::fd::AsFd;
        // SAFETY: the callback is never called (that is what is tested; it would panic
        // before anything is mapped), so nothing a response names is mapped.
        // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
        let e = unsafe { d.create_qp(f.as_fd(), &req, &mut create) }.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
        let s = e.to_string();
        assert!(s.contains(&format!("create {t} QP on siw0")), "{s}");
        assert!(s.contains("iWARP, which has only RC QPs"), "{s}");
    }
}

/// Capacities siw's kernel refuses with a bare EINVAL are refused first, the limit named.
#[test]
#[cfg_attr(miri, ignore = "Miri cannot open files")]
fn siw_refuses_capacities_over_its_limits() {
    use rverbs_uverbs::driver::{QpCreated, QpRequest};
    use rverbs_uverbs::qp::QpCaps;
    use std::os::fd::AsFd;
    let d = SiwDriver::new("siw0");
    let f = std::fs::File::open("/dev/null").unwrap();
    let ok = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 6,
        max_recv_sge: 6,
        max_inline_data: 80,
    };
    for (caps, text) in [
        (
            QpCaps {
                max_inline_data: 81,
                ..ok
            },
            "max_inline_data 81: siw (iWARP) carries at most 80 inline bytes",
        ),
        (
            QpCaps {
                max_send_sge: 7,
                ..ok
            },
            "max_send_sge 7 / max_recv_sge 6: siw takes at most 6",
        ),
        (
            QpCaps {
                max_recv_sge: 7,
                ..ok
            },
            "siw takes at most 6",
        ),
        (
            QpCaps {
                max_send_wr: 0,
                ..ok
            },
            "max_send_wr 0",
        ),
    ] {
        let req = QpRequest {
            qp_type: QpType::RC,
            caps,
            sq_sig_all: false,
            has_srq: false,
            srq_handle: None,
        };
        let mut create = |_: &[u8], _: &mut [u8]| -> rverbs_uverbs::Result<QpCreated> {
            panic!("no kernel command may be issued for {caps:?}")
        };
        // SAFETY: the callback is never called (what is tested), so nothing is mapped.
        let e = unsafe { d.create_qp(f.as_fd(), &req, &mut create) }.unwrap_err();
        let s = e.to_string();
        assert!(s.contains("create RC QP on siw0"), "{s}");
        assert!(s.contains(text), "{s}");
    }
}

/// A create CQ callback answering `key` and `num` elements.
fn cq_answer(
    key: u64,
    num: u32,
) -> impl FnMut(&[u8], &mut [u8]) -> rverbs_uverbs::Result<rverbs_uverbs::driver::CqCreated> {
    use zerocopy::IntoBytes;
    move |_: &[u8], out: &mut [u8]| {
        let r = crate::siw::abi::siw_uresp_create_cq {
            cq_id: 1,
            num_cqe: num,
            cq_key: key,
        };
        out.copy_from_slice(r.as_bytes());
        Ok(rverbs_uverbs::driver::CqCreated {
            handle: 1,
            cqe: num,
        })
    }
}

/// A ring at offset 0x90000, which is also `SIW_INVAL_UOBJ_KEY`, is mapped like any other:
/// siw's kernels (6.1, 6.12, newer) hand out that offset for a context's 145th ring page and
/// never use it to mean "not offered" (rdma-core's pyverbs `test_query_rc_qp` failed with
/// EINVAL whenever a QP's ring landed there). A file stands in for the command fd.
#[test]
#[cfg_attr(miri, ignore = "Miri cannot map files")]
fn siw_ring_at_the_inval_key_offset_is_mapped() {
    use std::os::fd::AsFd;
    let key = crate::siw::abi::SIW_INVAL_UOBJ_KEY;
    assert_eq!(key, 0x90000);
    let path = std::env::temp_dir().join(format!("rverbs-siw-key-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let _ = std::fs::remove_file(&path);
    f.set_len(key + 2 * 4096).unwrap();
    let d = SiwDriver::new("siw0");
    let mut create = cq_answer(key, 4);
    // SAFETY: the file is zeroed memory laid out as an empty CQ ring of 4 elements and its
    // notify word (more than enough bytes), used by nothing else.
    let cq = unsafe { d.create_cq(f.as_fd(), 4, &mut create) };
    assert!(cq.is_ok(), "{:?}", cq.err());
}

/// A ring at `SIW_INVAL_UOBJ_KEY` that cannot be mapped (a kernel that meant "not offered")
/// fails with the mapping's error, naming the offset and what the key meant there.
#[test]
#[cfg_attr(miri, ignore = "Miri cannot open files")]
fn siw_unmappable_ring_at_the_inval_key_names_it() {
    use std::os::fd::AsFd;
    let d = SiwDriver::new("siw0");
    let f = std::fs::File::open("/dev/null").unwrap();
    let mut create = cq_answer(crate::siw::abi::SIW_INVAL_UOBJ_KEY, 4);
    // SAFETY: /dev/null cannot be mapped: nothing is.
    let e = unsafe { d.create_cq(f.as_fd(), 4, &mut create) }.unwrap_err();
    let s = e.to_string();
    assert!(s.contains("map siw completion queue"), "{s}");
    assert!(s.contains("offset 0x90000"), "{s}");
    assert!(s.contains("SIW_INVAL_UOBJ_KEY"), "{s}");
}

/// A create response whose size is not a power of two is an error naming the ring; nothing is
/// mapped.
#[test]
#[cfg_attr(miri, ignore = "Miri cannot open files")]
fn siw_bad_create_responses_are_refused() {
    use rverbs_uverbs::driver::CqCreated;
    use std::os::fd::AsFd;
    use zerocopy::IntoBytes;
    let d = SiwDriver::new("siw0");
    let f = std::fs::File::open("/dev/null").unwrap();
    for (key, num, text) in [
        (0, 3, "3 elements, not a power of two"),
        (0, 0, "0 elements, not a power of two"),
    ] {
        let mut create = |_: &[u8], out: &mut [u8]| -> rverbs_uverbs::Result<CqCreated> {
            let r = crate::siw::abi::siw_uresp_create_cq {
                cq_id: 1,
                num_cqe: num,
                cq_key: key,
            };
            out.copy_from_slice(r.as_bytes());
            Ok(CqCreated {
                handle: 1,
                cqe: num,
            })
        };
        // SAFETY: the response is refused before anything is mapped (what is tested).
        let e = unsafe { d.create_cq(f.as_fd(), 4, &mut create) }.unwrap_err();
        let s = e.to_string();
        assert!(s.contains("map siw completion queue"), "{s}");
        assert!(s.contains(text), "{s}");
    }
}

/// An INLINE post copies its source with `shared`'s 1-byte atomics, so another thread writing
/// the same bytes through `shared` (as `Mr::write_at` does) races no plain access: under Miri
/// a plain copy here is reported as a data race.
#[test]
fn siw_inline_post_races_a_shared_writer() {
    let r = sq_ring(2);
    let mut q = sq(&r, 1, false);
    let src = vec![0u8; 64].into_boxed_slice();
    let p = Box::into_raw(src).cast::<u8>();
    let addr = p as usize;
    thread::scope(|s| {
        s.spawn(move || {
            for i in 0..(if cfg!(miri) { 3 } else { 1000 }) {
                // SAFETY: the buffer lives until the scope ends; everyone reaches it only
                // through rverbs_uverbs::kernel::shared.
                // SAFETY: the buffer is live and unused by anyone else; the simulated kernel reads only the ring.
                unsafe { rverbs_uverbs::kernel::shared::fill_shared(addr as *mut u8, 64, i as u8) };
            }
        });
        let mut k = r.kernel();
        for i in 0..(if cfg!(miri) { 3 } else { 1000 }) {
            let sges = [sge(addr as u64, 64, 0)];
            // SAFETY: the source is live and written meanwhile only through `shared`.
            all(unsafe { q.post(&[wr(i, SendOp::Send, &sges, SendFlags::INLINE)]) });
            let e: siw_sqe = k.take().unwrap();
            assert_eq!((e.id, e.sge[0].length), (i, 64));
        }
    });
    // SAFETY: made by Box::into_raw above from a 64-byte boxed slice; the writer is done.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, 64)) });
}
