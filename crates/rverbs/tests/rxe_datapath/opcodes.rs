//! Every send opcode with its payload checked: SEND (with immediate), RDMA WRITE (with
//! immediate), RDMA READ, the atomics, SEND_WITH_INV and LOCAL_INV.

use super::errors::requester_local_error;
use super::ud::ud_ready;
use super::*;

/// SEND (multi-packet) and SEND_WITH_IMM: payload, byte_len, and the immediate data in host
/// byte order at the receiver.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn send_and_send_with_imm() {
    each_topo("send_and_send_with_imm", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let msg = pattern(1, 5000); // five packets at MTU 1024
        a.mr.write_at(0, &msg);
        a.mr.write_at(5000, b"imm");
        let (r0, r1) = ([b.mr.sge(0..8192)], [b.mr.sge(8192..8292)]);
        recv_ok(&b.qp, &[recv(10, &r0), recv(11, &r1)]);
        let (s0, s1) = ([a.mr.sge(0..5000)], [a.mr.sge(5000..5003)]);
        send_ok(
            &a.qp,
            &[
                SendWr::send(1, &s0),
                wr(2, SendOp::SendWithImm { imm: IMM }, &s1),
            ],
        );
        let s = poll_n(&a.cq, 2);
        assert_wc(&s[0], 1, WcOpcode::SEND);
        assert_wc(&s[1], 2, WcOpcode::SEND);
        assert_eq!(s[0].qp_num, a.qp.qp_num());
        let r = poll_n(&b.cq, 2);
        assert_wc(&r[0], 10, WcOpcode::RECV);
        assert_eq!(r[0].byte_len, 5000);
        assert_eq!(r[0].imm(), None, "{:?}", r[0]);
        assert_eq!(r[0].qp_num, b.qp.qp_num());
        assert_wc(&r[1], 11, WcOpcode::RECV);
        assert_eq!(r[1].byte_len, 3);
        assert!(r[1].wc_flags.contains(WcFlags::WITH_IMM), "{:?}", r[1]);
        assert_eq!(r[1].imm(), Some(IMM), "imm in host byte order");
        assert_eq!(&b.mr.to_vec()[..5000], &msg[..]);
        assert_eq!(b.mr.to_vec()[5000], 0, "nothing past byte_len");
        assert_eq!(&b.mr.to_vec()[8192..8196], b"imm\0");

        // Zero bytes, no SGE on either side: only the immediate travels.
        recv_ok(&b.qp, &[recv(12, &[])]);
        send_ok(&a.qp, &[wr(3, SendOp::SendWithImm { imm: !IMM }, &[])]);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);
        let r = poll1(&b.cq);
        assert_wc(&r, 12, WcOpcode::RECV);
        assert_eq!((r.byte_len, r.imm()), (0, Some(!IMM)));
    });
}

/// RDMA_WRITE lands in remote memory without a receive completion; RDMA_WRITE_WITH_IMM
/// completes RECV_RDMA_WITH_IMM with the immediate, consuming a receive (whose buffer it
/// leaves untouched).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rdma_write_and_write_with_imm() {
    each_topo("rdma_write_and_write_with_imm", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let data = pattern(2, 3000);
        let data2 = pattern(3, 200);
        a.mr.write_at(0, &data);
        a.mr.write_at(3000, &data2);
        a.mr.write_at(3200, b"after");
        b.mr.fill(40000..40016, 0xee);
        let (r0, r1) = ([b.mr.sge(40000..40016)], [b.mr.sge(40100..40200)]);
        recv_ok(&b.qp, &[recv(20, &r0), recv(21, &r1)]);
        let (rb, rkey) = (b.mr.addr(), b.mr.rkey());

        // An unaligned multi-packet write.
        let s = [a.mr.sge(0..3000)];
        let op = SendOp::RdmaWrite {
            remote_addr: rb + 4101,
            rkey,
        };
        send_ok(&a.qp, &[wr(1, op, &s)]);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::RDMA_WRITE);
        assert_eq!(&b.mr.to_vec()[4101..7101], &data[..]);
        assert_eq!(b.mr.to_vec()[4100], 0);
        assert_eq!(b.mr.to_vec()[7101], 0);
        assert_quiet(&b.cq, "RDMA WRITE without immediate");

        let s = [a.mr.sge(3000..3200)];
        let op = SendOp::RdmaWriteWithImm {
            remote_addr: rb + 20000,
            rkey,
            imm: 0x0a0b_0c0d,
        };
        send_ok(&a.qp, &[wr(2, op, &s)]);
        assert_wc(&poll1(&a.cq), 2, WcOpcode::RDMA_WRITE);
        let r = poll1(&b.cq);
        assert_wc(&r, 20, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!(r.imm(), Some(0x0a0b_0c0d), "{r:?}");
        assert_eq!(r.byte_len, 200, "byte_len of a write with immediate: {r:?}");
        assert_eq!(&b.mr.to_vec()[20000..20200], &data2[..]);
        assert!(
            b.mr.to_vec()[40000..40016].iter().all(|&x| x == 0xee),
            "the consumed receive's buffer was written"
        );

        // That receive was consumed: the next SEND lands in the second one.
        let s = [a.mr.sge(3200..3205)];
        send_ok(&a.qp, &[SendWr::send(3, &s)]);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);
        let r = poll1(&b.cq);
        assert_wc(&r, 21, WcOpcode::RECV);
        assert_eq!(r.byte_len, 5);
        assert_eq!(&b.mr.to_vec()[40100..40105], b"after");

        // A zero-length WRITE_WITH_IMM (no SGE) into a receive without SGEs; then a 60 KB
        // write (60 packets).
        recv_ok(&b.qp, &[recv(22, &[])]);
        let op = SendOp::RdmaWriteWithImm {
            remote_addr: rb,
            rkey,
            imm: 7,
        };
        send_ok(&a.qp, &[wr(4, op, &[])]);
        assert_wc(&poll1(&a.cq), 4, WcOpcode::RDMA_WRITE);
        let r = poll1(&b.cq);
        assert_wc(&r, 22, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!((r.byte_len, r.imm()), (0, Some(7)));
        let big = pattern(14, 60 * 1024);
        a.mr.write_at(0, &big);
        let s = [a.mr.sge(0..big.len())];
        let op = SendOp::RdmaWrite {
            remote_addr: rb + 1,
            rkey,
        };
        send_ok(&a.qp, &[wr(5, op, &s)]);
        assert_wc(&poll1(&a.cq), 5, WcOpcode::RDMA_WRITE);
        assert!(b.mr.to_vec()[1..1 + big.len()] == big[..], "60 KB write");
    });
}

/// RDMA_READ of a multi-packet remote buffer.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rdma_read() {
    each_topo("rdma_read", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let data = pattern(4, 10000);
        b.mr.write_at(8000, &data);
        let d = [a.mr.sge(30000..40000)];
        let op = SendOp::RdmaRead {
            remote_addr: b.mr.addr() + 8000,
            rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(1, op, &d)]);
        let wc = poll1(&a.cq);
        assert_wc(&wc, 1, WcOpcode::RDMA_READ);
        assert_eq!(wc.byte_len, 10000);
        assert_eq!(&a.mr.to_vec()[30000..40000], &data[..]);
        assert_eq!(a.mr.to_vec()[40000], 0);
        assert_quiet(&b.cq, "RDMA READ responder");
    });
}

/// ATOMIC_CMP_AND_SWP (matching and not) and ATOMIC_FETCH_AND_ADD: old values in the local
/// 8-byte buffers, the remote value changed; misaligned atomics are refused at post.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn atomics() {
    each_topo("atomics", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let v0: u64 = 0x0102_0304_0506_0708;
        let v1: u64 = 0x1111_2222_3333_4444;
        b.mr.write_at(64, &v0.to_ne_bytes());
        a.mr.fill(128..152, 0xff);
        let (remote_addr, rkey) = (b.mr.addr() + 64, b.mr.rkey());
        let (l0, l1, l2) = (
            [a.mr.sge(128..136)],
            [a.mr.sge(136..144)],
            [a.mr.sge(144..152)],
        );
        let swap = |compare, swap| SendOp::AtomicCmpSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        };
        send_ok(
            &a.qp,
            &[
                wr(1, swap(v0, v1), &l0),
                // The compare fails now: the old value comes back, nothing is swapped.
                wr(2, swap(v0, 0xdead), &l1),
                wr(
                    3,
                    SendOp::AtomicFetchAdd {
                        remote_addr,
                        rkey,
                        add: 0x10,
                    },
                    &l2,
                ),
            ],
        );
        let wc = poll_n(&a.cq, 3);
        assert_wc(&wc[0], 1, WcOpcode::COMP_SWAP);
        assert_wc(&wc[1], 2, WcOpcode::COMP_SWAP);
        assert_wc(&wc[2], 3, WcOpcode::FETCH_ADD);
        assert!(wc.iter().all(|w| w.byte_len == 8), "{wc:?}");
        let l = a.mr.to_vec();
        assert_eq!(u64_at(&l, 128), v0, "CMP_AND_SWP returns the old value");
        assert_eq!(
            u64_at(&l, 136),
            v1,
            "failed CMP_AND_SWP returns the current value"
        );
        assert_eq!(u64_at(&l, 144), v1, "FETCH_AND_ADD returns the old value");
        assert_eq!(u64_at(&b.mr.to_vec(), 64), v1 + 0x10, "remote value");

        // Misaligned: refused before anything is posted.
        let e = post_send(
            &a.qp,
            &[wr(
                4,
                SendOp::AtomicFetchAdd {
                    remote_addr: remote_addr + 4,
                    rkey,
                    add: 1,
                },
                &l2,
            )],
        )
        .unwrap_err();
        assert_eq!(e.posted(), 0);
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not 8-byte aligned"), "{e}");
        assert_quiet(&a.cq, "refused atomic");
    });
}

/// Connects a new RC QP on `local` to a new one on `remote` and RDMA READs the first 4 bytes
/// of `remote_mr` into `local_mr` through the remote MR's rkey.
fn read_over_new_qps(
    local: &Side,
    local_mr: &mut Mr<PageBuf>,
    remote: &Side,
    remote_mr: &Mr<PageBuf>,
) -> [u8; 4] {
    let (cl, cr) = (cq(local, 4, None), cq(remote, 4, None));
    let ql = qp(local, QpInit::rc(&cl, caps(4, 1, 1, 0)));
    let qr = qp(remote, QpInit::rc(&cr, caps(4, 1, 1, 0)));
    rc_connect(&ql, local, qr.qp_num(), remote.gid, NORMAL);
    rc_connect(&qr, remote, ql.qp_num(), local.gid, NORMAL);
    local_mr.fill(0..4, 0);
    let d = [local_mr.sge(0..4)];
    let op = SendOp::RdmaRead {
        remote_addr: remote_mr.addr(),
        rkey: remote_mr.rkey(),
    };
    send_ok(&ql, &[wr(99, op, &d)]);
    assert_wc(&poll1(&cl), 99, WcOpcode::RDMA_READ);
    local_mr.to_vec()[..4].try_into().unwrap()
}

/// SEND_WITH_INV and LOCAL_INV. rxe 6.1 invalidates only fast-registration MRs and memory
/// windows (`rxe_invalidate_mr` refuses MRs of type IB_MR_TYPE_USER), and userspace can only
/// name user MRs here: both operations go through our stack and come back as the kernel's
/// clear error completions, asserted below as measured. UD QPs refuse them at post time.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn send_with_inv_and_local_inv() {
    each_topo("send_with_inv_and_local_inv", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        // LOCAL_INV of a user MR: LOC_QP_OP_ERR (6.12: WR_FLUSH_ERR), and the QP goes to ERR.
        let (a, mut b) = rc_pair(t, &fast);
        let op = SendOp::LocalInv {
            invalidate_rkey: a.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(1, op, &[])]);
        let wc = poll1(&a.cq);
        assert_status(&wc, 1, requester_local_error());
        assert_eq!(state(&a.qp), QpState::ERR);
        // Nothing was invalidated: B reads A's MR through its rkey over a new connection.
        a.mr.write_at(0, b"live");
        assert_eq!(
            read_over_new_qps(&b.side, &mut b.mr, &a.side, &a.mr),
            *b"live"
        );

        // SEND_WITH_INV naming the receiver's user MR.
        let (mut a, b) = rc_pair(t, &fast);
        a.mr.write_at(0, b"inv!");
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(7, &r)]);
        let s = [a.mr.sge(0..4)];
        let op = SendOp::SendWithInv {
            invalidate_rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(2, op, &s)]);
        let rw = poll1(&b.cq);
        let sw = poll1(&a.cq);
        eprintln!("SEND_WITH_INV of a user MR: receiver {rw:?}, sender {sw:?}");
        // The responder fails the invalidation after it accepted the packet: the receive
        // completes REM_INV_REQ_ERR and its QP goes to ERR, but the SEND was ACKed first, so
        // the requester sees success.
        assert_status(&rw, 7, WcStatus::REM_INV_REQ_ERR);
        assert_eq!(rw.invalidated_rkey(), None);
        assert_eq!(state(&b.qp), QpState::ERR);
        assert_status(&sw, 2, WcStatus::SUCCESS);
        // The MR was not invalidated: A reads it through its rkey over a new connection.
        b.mr.write_at(0, b"live");
        assert_eq!(
            read_over_new_qps(&a.side, &mut a.mr, &b.side, &b.mr),
            *b"live"
        );

        // UD cannot carry them at all: refused with a clear error, nothing posted.
        let s = Side::open(&t.dev_a);
        let c = cq(&s, 8, None);
        let ud = qp(
            &s,
            QpInit {
                qp_type: QpType::UD,
                ..QpInit::rc(&c, caps(8, 8, 1, 0))
            },
        );
        ud_ready(&ud);
        for op in [
            SendOp::SendWithInv { invalidate_rkey: 1 },
            SendOp::LocalInv { invalidate_rkey: 1 },
        ] {
            let e = post_send(&ud, &[wr(1, op, &[])]).unwrap_err();
            assert_eq!(e.posted(), 0);
            assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
            assert!(e.to_string().contains("does not support"), "{op:?}: {e}");
        }
        assert_quiet(&c, "refused UD work requests");
    });
}
