//! Every ring wrapping and filling up: send and receive queues, send and receive CQs.

use super::*;

/// Capacities of a QP's send and receive rings. rxe makes each ring 2^n slots, one always
/// empty, for at least the WRs asked; the create response repeats the request, query tells
/// the capacity.
fn ring_capacity(qp: &Qp) -> (usize, usize) {
    let asked = qp.caps();
    let c = qp.query().unwrap().caps;
    assert!(c.max_send_wr >= asked.max_send_wr, "{c:?} < {asked:?}");
    assert!(c.max_recv_wr >= asked.max_recv_wr, "{c:?} < {asked:?}");
    assert!((c.max_send_wr + 1).is_power_of_two(), "{c:?}");
    assert!((c.max_recv_wr + 1).is_power_of_two(), "{c:?}");
    (c.max_send_wr as usize, c.max_recv_wr as usize)
}

/// A small QP and small CQs: five times around every ring (SQ, RQ, both CQs), payloads and
/// wr_ids checked in order.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rings_wrap_around() {
    each_topo("rings_wrap_around", |t| {
        let o = Opts {
            caps: caps(4, 4, 1, 0),
            cqe_a: 4,
            cqe_b: 4,
            ..Opts::default()
        };
        let (a, b) = rc_pair(t, &o);
        let sq = ring_capacity(&a.qp).0 as u32;
        let rq = ring_capacity(&b.qp).1 as u32;
        let (cqa, cqb) = (a.cq.cqe(), b.cq.cqe());
        let batch = sq.min(rq).min(cqa).min(cqb) as usize;
        // Ring slots are capacity + 1.
        let slots = sq.max(rq).max(cqa).max(cqb) as usize + 1;
        let rounds = (5 * slots).div_ceil(batch);
        eprintln!(
            "  SQ {sq}, RQ {rq}, CQs {cqa}/{cqb}: {rounds} rounds of {batch} = {} messages",
            rounds * batch
        );
        const MSG: usize = 64;
        let mut seq = 0u64;
        for _ in 0..rounds {
            let r = sge_slots(&b.mr, batch, MSG);
            let rw: Vec<MrRecvWr> = r
                .iter()
                .enumerate()
                .map(|(i, s)| recv(seq + i as u64, s))
                .collect();
            recv_ok(&b.qp, &rw);
            for i in 0..batch {
                let mut m = pattern(seq as u8 + i as u8, MSG);
                m[..8].copy_from_slice(&(seq + i as u64).to_ne_bytes());
                a.mr.write_at(i * MSG, &m);
            }
            let s = sge_slots(&a.mr, batch, MSG);
            let sw: Vec<MrSendWr> = s
                .iter()
                .enumerate()
                .map(|(i, s)| SendWr::send(seq + i as u64, s))
                .collect();
            send_ok(&a.qp, &sw);
            let sc = poll_n(&a.cq, batch);
            let rc = poll_n(&b.cq, batch);
            for i in 0..batch {
                let id = seq + i as u64;
                assert_wc(&sc[i], id, WcOpcode::SEND);
                assert_wc(&rc[i], id, WcOpcode::RECV);
                assert_eq!(rc[i].byte_len as usize, MSG);
                let got = &b.mr.to_vec()[i * MSG..(i + 1) * MSG];
                assert_eq!(u64_at(got, 0), id);
                assert_eq!(&got[8..], &a.mr.to_vec()[i * MSG + 8..(i + 1) * MSG]);
            }
            seq += batch as u64;
        }
        assert!(seq as usize >= 5 * slots);
        assert_quiet(&a.cq, "after the last round");
    });
}

/// A full SQ and a full RQ refuse the next WR with ENOMEM ("queue full") and never overwrite:
/// every accepted WR completes exactly once, in order, and the refused ones never appear.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn full_send_and_recv_queues() {
    each_topo("full_send_and_recv_queues", |t| {
        // SQ: a QP whose peer does not exist keeps every WQE waiting for its ACK.
        let s = Side::open(&t.dev_a);
        let peer = Side::open(&t.dev_b);
        let c = cq(&s, 64, None);
        let q = qp(&s, QpInit::rc(&c, caps(8, 1, 1, 0)));
        // In RESET nothing may be posted; the whole list is refused at its first request.
        let mr0 = reg(&s.pd, 64, ALL_ACCESS);
        let sg0 = [mr0.sge(0..8)];
        let e = post_send(&q, &[SendWr::send(0, &sg0), SendWr::send(1, &sg0)]).unwrap_err();
        let what = "the QP is in RESET: sends need RTS (connect first)";
        assert_eq!(e.to_string(), qp_post_msg(&q, "post send", 0, what, 0));
        let e = post_recv(&q, &[recv(0, &sg0)]).unwrap_err();
        let what = "the QP is in RESET: receives need INIT or later";
        assert_eq!(e.to_string(), qp_post_msg(&q, "post receive", 0, what, 0));
        drop(mr0);
        let slow = RcPath {
            timeout: 18, // ~1 s: nothing times out while we fill the queue
            ..NORMAL
        };
        rc_connect(&q, &s, 0x00ff_ff00, peer.gid, slow);
        let mr = reg(&s.pd, 4096, ALL_ACCESS);
        let cap = ring_capacity(&q).0;
        let sg = [mr.sge(0..8)];
        let wrs: Vec<MrSendWr> = (0..=cap as u64).map(|i| SendWr::send(i, &sg)).collect();
        let e = post_send(&q, &wrs).unwrap_err();
        assert_eq!(e.posted(), cap, "{e}");
        assert_eq!(errno(&e), Some(12), "ENOMEM: {e}");
        let what = format!("queue full ({cap} requests outstanding) (ENOMEM)");
        assert_eq!(e.to_string(), qp_post_msg(&q, "post send", cap, &what, cap));
        let e = post_send(&q, &[SendWr::send(99, &sg)]).unwrap_err();
        assert_eq!((e.posted(), errno(&e)), (0, Some(12)), "{e}");
        assert_quiet(&c, "WQEs waiting for an ACK");
        q.modify(&QpAttr {
            qp_state: Some(QpState::ERR),
            ..Default::default()
        })
        .unwrap();
        let wc = poll_n(&c, cap);
        for (i, w) in wc.iter().enumerate() {
            assert_status(w, i as u64, WcStatus::WR_FLUSH_ERR);
        }
        assert_quiet(&c, "flushed send queue");
        drop(q);

        // RQ.
        let (a, b) = rc_pair(t, &Opts::default());
        let cap = ring_capacity(&b.qp).1;
        let r = sge_slots(&b.mr, cap + 1, 64);
        let rw = recvs(0, &r);
        let e = post_recv(&b.qp, &rw).unwrap_err();
        assert_eq!(e.posted(), cap, "{e}");
        assert_eq!(errno(&e), Some(12), "ENOMEM: {e}");
        let what = format!("queue full ({cap} requests outstanding) (ENOMEM)");
        assert_eq!(
            e.to_string(),
            qp_post_msg(&b.qp, "post receive", cap, &what, cap)
        );
        for i in 0..cap {
            a.mr.write_at(i * 8, &(i as u64).to_ne_bytes());
        }
        let s = sge_slots(&a.mr, cap, 8);
        let sw: Vec<MrSendWr> = s
            .iter()
            .enumerate()
            .map(|(i, s)| SendWr::send(i as u64, s))
            .collect();
        send_ok(&a.qp, &sw);
        poll_n(&a.cq, cap);
        let rc = poll_n(&b.cq, cap);
        for (i, w) in rc.iter().enumerate() {
            assert_wc(w, i as u64, WcOpcode::RECV);
            assert_eq!(u64_at(&b.mr.to_vec(), i * 64), i as u64);
        }
        assert_quiet(&b.cq, "refused receive");
        // Room again.
        recv_ok(&b.qp, &[recv(1000, &r[0])]);
    });
}

/// A CQ that overflows keeps what it holds (never overwritten), reports CQ_ERR naming itself
/// on the async fd, and — on rxe 6.1, whose completer drops the CQE and goes on — the QP
/// keeps working.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn full_cq_keeps_its_entries() {
    each_topo("full_cq_keeps_its_entries", |t| {
        let (a, b) = rc_pair(
            t,
            &Opts {
                cqe_a: 2,
                ..Opts::default()
            },
        );
        let cap = a.cq.cqe() as usize;
        let n = cap + 2;
        let r = sge_slots(&b.mr, n, 64);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        let s = [a.mr.sge(0..8)];
        let sw: Vec<MrSendWr> = (0..n as u64).map(|i| SendWr::send(i, &s)).collect();
        send_ok(&a.qp, &sw);
        poll_n(&b.cq, n);
        let ev = async_event(&a.side.ctx, WAIT).expect("no CQ_ERR event for the full CQ");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::CQ_ERR,
                element: AsyncElement::Cq(a.cq.user_handle()),
            }
        );
        // The second dropped completion may come with a second event.
        std::thread::sleep(QUIET);
        while let Some(ev) = async_event(&a.side.ctx, Duration::ZERO) {
            assert_eq!(ev.event_type, AsyncEventType::CQ_ERR, "{ev:?}");
        }
        let wc = poll_n(&a.cq, cap);
        for (i, w) in wc.iter().enumerate() {
            assert_wc(w, i as u64, WcOpcode::SEND);
        }
        assert_quiet(&a.cq, "overflowed CQ");
        // Nothing hung: the QP still sends, and completes into the drained CQ.
        recv_ok(&b.qp, &[recv(100, &r[0])]);
        send_ok(&a.qp, &[SendWr::send(100, &s)]);
        assert_wc(&poll1(&a.cq), 100, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 100, WcOpcode::RECV);
        assert_eq!(state(&a.qp), QpState::RTS);
    });
}

/// A receive CQ that overflows (docs/architecture.md, "CQ room on rxe"): the receive queue
/// keeps accepting posts while their completions pile up unpolled; past the CQ's capacity the
/// kernel raises `CQ_ERR` for the CQ and, unlike a full send CQ (`full_cq_keeps_its_entries`),
/// moves the receiving QP to the error state.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn full_receive_cq_moves_the_qp_to_err() {
    each_topo("full_receive_cq_moves_the_qp_to_err", |t| {
        // B's CQ: 4 asked, rxe gives 7 (2^n - 1); it gets 8 unpolled receive completions.
        let (a, b) = rc_pair(
            t,
            &Opts {
                cqe_b: 4,
                ..Opts::default()
            },
        );
        let cap_b = b.cq.cqe() as usize;
        assert!((4..16).contains(&cap_b), "B's CQ holds {cap_b}");
        let s = [a.mr.sge(0..8)];
        let r = sge_slots(&b.mr, cap_b + 1, 64);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        for i in 0..cap_b {
            send_ok(&a.qp, &[SendWr::send(i as u64, &s)]);
            assert_wc(&poll1(&a.cq), i as u64, WcOpcode::SEND);
        }
        // The one too many: B's responder cannot complete it.
        send_ok(&a.qp, &[SendWr::send(99, &s)]);
        let ev = async_event(&b.side.ctx, WAIT).expect("no CQ_ERR event for B's full CQ");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::CQ_ERR,
                element: AsyncElement::Cq(b.cq.user_handle()),
            }
        );
        // rxe raises CQ_ERR from the completion it could not post, then its responder moves
        // the QP to ERROR: the event may arrive first (seen on 6.12 under load), so the state
        // is waited for, bounded by WAIT.
        let t0 = std::time::Instant::now();
        while state(&b.qp) != QpState::ERR && t0.elapsed() < WAIT {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(state(&b.qp), QpState::ERR, "B's QP after its CQ overflowed");
        // What the CQ held stays: the first receives, in order.
        for (i, w) in poll_n(&b.cq, cap_b).iter().enumerate() {
            assert_wc(w, i as u64, WcOpcode::RECV);
        }
    });
}
