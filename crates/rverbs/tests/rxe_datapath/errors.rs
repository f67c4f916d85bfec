//! Error completions: what the requester and the responder see for each kind of error.

use super::*;

/// The status of a send WR that fails locally at the requester (a wrong lkey, LOCAL_INV of a
/// user MR). rxe 6.1 completes it LOC_QP_OP_ERR. rxe 6.12 moves the QP to ERR first, and its
/// completer then flushes the whole send queue, the failed WR included: WR_FLUSH_ERR
/// (measured; docs/abi.md). Kernels between the two were not measured.
pub(super) fn requester_local_error() -> WcStatus {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("kernel release");
    let mut v = r
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    if (v.next().unwrap_or(0), v.next().unwrap_or(0)) >= (6, 12) {
        WcStatus::WR_FLUSH_ERR
    } else {
        WcStatus::LOC_QP_OP_ERR
    }
}

/// A wrong lkey fails the WR at the requester (rxe 6.1: LOC_QP_OP_ERR; 6.12: WR_FLUSH_ERR, see
/// [`requester_local_error`]); the WR after it in the list is flushed; the responder sees
/// nothing.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_wrong_lkey() {
    each_topo("error_wrong_lkey", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        let bad = [Sge {
            lkey: a.mr.lkey() ^ 0x80,
            ..a.mr.sge(0..16).raw()
        }];
        let good = [a.mr.sge(0..16).raw()];
        send_raw_ok(&a.qp, &[SendWr::send(1, &bad), SendWr::send(2, &good)]);
        let wc = poll_n(&a.cq, 2);
        // rxe 6.1: the lkey lookup fails with EINVAL (not EFAULT) in copy_data(), which the
        // requester reports as LOC_QP_OP_ERR rather than LOC_PROT_ERR.
        assert_status(&wc[0], 1, requester_local_error());
        assert_status(&wc[1], 2, WcStatus::WR_FLUSH_ERR);
        assert_eq!(state(&a.qp), QpState::ERR);
        assert_quiet(&b.cq, "responder of a failed request");
    });
}

/// A receive whose `Mr` is dropped before data arrives still completes with success: the
/// posted receive holds the region (registration and memory) until its completion is polled
/// (issue #31, docs/architecture.md "What a posted request keeps alive"), so the data lands in
/// memory nobody else has. (Before, the drop deregistered at once and the receive failed on rxe,
/// while on siw it kept writing the freed buffer.)
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn dropped_mr_keeps_its_receive() {
    each_topo("dropped_mr_keeps_its_receive", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        let gone = reg(&b.side.pd, 4096, ALL_ACCESS);
        let r = [gone.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        drop(gone);
        a.mr.write_at(0, b"held on!");
        let s = [a.mr.sge(0..8)];
        send_ok(&a.qp, &[SendWr::send(2, &s)]);
        let wc = poll1(&b.cq);
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (1, WcStatus::SUCCESS, 8),
            "the receive's region is held until its completion: {wc:?}"
        );
        let sc = poll1(&a.cq);
        assert_eq!((sc.wr_id, sc.status), (2, WcStatus::SUCCESS), "{sc:?}");
    });
}

/// A wrong rkey: REM_ACCESS_ERR at the requester; the responder goes to ERR and flushes its
/// posted receive.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_wrong_rkey() {
    each_topo("error_wrong_rkey", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        for read in [false, true] {
            let (a, b) = rc_pair(t, &fast);
            let r = [b.mr.sge(0..64)];
            recv_ok(&b.qp, &[recv(1, &r)]);
            let s = [a.mr.sge(0..16)];
            let (remote_addr, rkey) = (b.mr.addr(), b.mr.rkey() ^ 0x80);
            let op = if read {
                SendOp::RdmaRead { remote_addr, rkey }
            } else {
                SendOp::RdmaWrite { remote_addr, rkey }
            };
            send_ok(&a.qp, &[wr(1, op, &s)]);
            assert_status(&poll1(&a.cq), 1, WcStatus::REM_ACCESS_ERR);
            assert_status(&poll1(&b.cq), 1, WcStatus::WR_FLUSH_ERR);
            assert_eq!(state(&b.qp), QpState::ERR);
            assert_eq!(state(&a.qp), QpState::ERR);
        }
    });
}

/// Remote access the MR does not grant: WRITE to an MR without REMOTE_WRITE, READ from one
/// without REMOTE_READ, atomics on one without REMOTE_ATOMIC — REM_ACCESS_ERR each time, and
/// the remote memory unchanged. What the MR grants works.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_remote_access_not_granted() {
    each_topo("error_remote_access_not_granted", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let lw = AccessFlags::LOCAL_WRITE;
        for (name, access, denied) in [
            ("REMOTE_WRITE", lw | AccessFlags::REMOTE_READ, 0),
            ("REMOTE_READ", lw | AccessFlags::REMOTE_WRITE, 1),
            ("REMOTE_ATOMIC", lw | AccessFlags::REMOTE_READ, 2),
        ] {
            let (a, b) = rc_pair(t, &fast);
            let m = reg(&b.side.pd, 4096, access);
            m.write_at(0, &7u64.to_ne_bytes());
            a.mr.write_at(0, &1u64.to_ne_bytes());
            let (remote_addr, rkey) = (m.addr(), m.rkey());
            let s = [a.mr.sge(0..8)];
            // First what the MR grants.
            let allowed = if access.contains(AccessFlags::REMOTE_READ) {
                SendOp::RdmaRead { remote_addr, rkey }
            } else {
                SendOp::RdmaWrite {
                    remote_addr: remote_addr + 64,
                    rkey,
                }
            };
            let s2 = [a.mr.sge(64..72)];
            send_ok(&a.qp, &[wr(1, allowed, &s2)]);
            assert_status(&poll1(&a.cq), 1, WcStatus::SUCCESS);
            let op = match denied {
                0 => SendOp::RdmaWrite { remote_addr, rkey },
                1 => SendOp::RdmaRead { remote_addr, rkey },
                _ => SendOp::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add: 1,
                },
            };
            send_ok(&a.qp, &[wr(2, op, &s)]);
            let wc = poll1(&a.cq);
            assert_eq!(
                (wc.wr_id, wc.status),
                (2, WcStatus::REM_ACCESS_ERR),
                "without {name}: {wc:?}"
            );
            assert_eq!(u64_at(&m.to_vec(), 0), 7, "remote memory changed");
            assert_eq!(state(&b.qp), QpState::ERR);
            drop((a, b));
        }
    });
}

/// A receive buffer too small for the SEND: statuses at both ends as rxe 6.1 reports them
/// (measured: LOC_QP_OP_ERR / REM_OP_ERR), both QPs in ERR.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_receive_buffer_too_small() {
    each_topo("error_receive_buffer_too_small", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        let r = [b.mr.sge(0..16)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        let s = [a.mr.sge(0..100)];
        send_ok(&a.qp, &[SendWr::send(1, &s)]);
        let rw = poll1(&b.cq);
        let sw = poll1(&a.cq);
        eprintln!("  receive too small: receiver {rw:?}, sender {sw:?}");
        // rxe 6.1's copy_data() answers "more bytes than the receive has" with EINVAL, not
        // ENOSPC, so the responder treats it as a malformed WQE (class A): LOC_QP_OP_ERR at
        // the receiver and a REM_OP_ERR NAK to the sender — not LOC_LEN_ERR/REM_INV_REQ_ERR.
        assert_status(&rw, 1, WcStatus::LOC_QP_OP_ERR);
        assert_status(&sw, 1, WcStatus::REM_OP_ERR);
        assert_eq!(state(&b.qp), QpState::ERR);
        assert_eq!(state(&a.qp), QpState::ERR);
    });
}

/// No receive posted and rnr_retry 0: RNR_RETRY_EXC_ERR at the sender, nothing at the
/// receiver.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_rnr_retry_exceeded() {
    each_topo("error_rnr_retry_exceeded", |t| {
        let fast = Opts {
            path: FAST_FAIL,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &fast);
        assert_eq!(a.qp.query().unwrap().rnr_retry, 0);
        let s = [a.mr.sge(0..8)];
        let start = Instant::now();
        send_ok(&a.qp, &[SendWr::send(1, &s), SendWr::send(2, &s)]);
        let wc = poll_n(&a.cq, 2);
        assert_status(&wc[0], 1, WcStatus::RNR_RETRY_EXC_ERR);
        assert_status(&wc[1], 2, WcStatus::WR_FLUSH_ERR);
        eprintln!("  RNR_RETRY_EXC_ERR after {:?}", start.elapsed());
        assert_eq!(state(&a.qp), QpState::ERR);
        assert_quiet(&b.cq, "receiver without receives");
        assert_eq!(state(&b.qp), QpState::RTS);
    });
}

/// Moving a QP to ERR flushes every posted receive with WR_FLUSH_ERR, in order; a send
/// posted in ERR is flushed too.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn error_flush_after_err() {
    each_topo("error_flush_after_err", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let r = sge_slots(&b.mr, 4, 64);
        let rw = recvs(40, &r);
        recv_ok(&b.qp, &rw);
        assert_quiet(&b.cq, "posted receives");
        let to_err = QpAttr {
            qp_state: Some(QpState::ERR),
            ..Default::default()
        };
        b.qp.modify(&to_err).unwrap();
        let wc = poll_n(&b.cq, 4);
        for (i, w) in wc.iter().enumerate() {
            assert_status(w, 40 + i as u64, WcStatus::WR_FLUSH_ERR);
            assert_eq!(w.qp_num, b.qp.qp_num());
        }
        assert_quiet(&b.cq, "flushed receive queue");

        a.qp.modify(&to_err).unwrap();
        let s = [a.mr.sge(0..8)];
        send_ok(&a.qp, &[SendWr::send(7, &s)]);
        assert_status(&poll1(&a.cq), 7, WcStatus::WR_FLUSH_ERR);
    });
}
