//! Completion events (a thread asleep on a channel) and async events.

use super::*;

/// The scheduler state of thread `tid` of this process ('S' = asleep); `None` once the thread
/// has ended.
fn thread_state(tid: &str) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    let after = &stat[stat.rfind(')').expect("stat format") + 2..];
    after.chars().next()
}

/// Completion events: a waiter asleep in `Cq::wait_event` on one thread is woken by a SEND
/// posted from another after a delay; arming then re-polling finds a completion that came
/// before the arm (which raised no event); solicited-only arming ignores an unsolicited SEND
/// and wakes on a SOLICITED one.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn completion_events() {
    each_topo("completion_events", |t| {
        let (a, b) = rc_pair(
            t,
            &Opts {
                channel_b: true,
                ..Opts::default()
            },
        );
        let ch = b.cq.channel().expect("channel").clone();
        let r = sge_slots(&b.mr, 8, 64);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        let s = [a.mr.sge(0..8)];

        // 1. Arm, re-poll (empty), sleep in wait_event; another thread posts after DELAY.
        const DELAY: Duration = Duration::from_millis(300);
        assert!(b.cq.poll_one().is_none());
        b.cq.req_notify(false).unwrap();
        assert!(b.cq.poll_one().is_none(), "re-poll after arming");
        let (tx, rx) = std::sync::mpsc::channel();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let cq_b = b.cq.clone();
        // Not scoped: if the event never comes, the test fails on the timeout below instead
        // of joining a thread that sleeps forever.
        std::thread::spawn(move || {
            // Taken before the poster exists (it starts once we have sent our tid), so the
            // time to the wake-up is at least the poster's delay.
            let t0 = Instant::now();
            let me = std::fs::read_link("/proc/thread-self").unwrap();
            let tid = me.file_name().unwrap().to_string_lossy().into_owned();
            tid_tx.send(tid).unwrap();
            let r = cq_b.wait_event().map_err(|e| e.to_string());
            let _ = tx.send((r, t0, Instant::now()));
        });
        let tid = tid_rx.recv_timeout(WAIT).expect("waiter thread started");
        let posting = std::sync::atomic::AtomicBool::new(false);
        let posted_at = std::thread::scope(|sc| {
            let poster = sc.spawn(|| {
                std::thread::sleep(DELAY);
                // SeqCst: the look below must see this store if it read the state after it.
                posting.store(true, std::sync::atomic::Ordering::SeqCst);
                let at = Instant::now();
                send_ok(&a.qp, &[SendWr::send(1, &s)]);
                at
            });
            std::thread::sleep(DELAY / 2);
            let state = thread_state(&tid);
            // Read after the state: if the poster had not started posting then, nothing could
            // have woken the waiter, so it must have been asleep. On a loaded machine this
            // thread may oversleep the poster's delay; then the look proves nothing.
            if !posting.load(std::sync::atomic::Ordering::SeqCst) {
                assert_eq!(state, Some('S'), "the waiter is not asleep");
            } else {
                eprintln!("completion_events: looked at the waiter after the post: not checked");
            }
            poster.join().unwrap()
        });
        let (res, t0, woke) = rx.recv_timeout(WAIT).expect("no completion event");
        res.unwrap_or_else(|e| panic!("wait_event: {e}"));
        assert!(woke >= posted_at, "woke before the post");
        let waited = woke - t0;
        assert!(
            waited >= DELAY,
            "woke after {waited:?}, less than the poster's delay"
        );
        b.cq.ack_events(1);
        assert_wc(&poll1(&b.cq), 0, WcOpcode::RECV);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);

        // 2. A completion that arrives unarmed raises no event, not even when the CQ is armed
        //    afterwards: the re-poll after arming is what finds it.
        send_ok(&a.qp, &[SendWr::send(2, &s)]);
        // The sender's completion follows the receiver's CQE (rxe completes, then ACKs).
        assert_wc(&poll1(&a.cq), 2, WcOpcode::SEND);
        b.cq.req_notify(false).unwrap();
        assert_wc(
            &b.cq.poll_one().expect("re-poll after arming"),
            1,
            WcOpcode::RECV,
        );
        assert!(
            !ch.wait(Some(QUIET)).unwrap(),
            "event for a pre-arm completion"
        );
        // Still armed: the next completion raises one.
        send_ok(&a.qp, &[SendWr::send(3, &s)]);
        assert!(ch.wait(Some(WAIT)).unwrap(), "no event for an armed CQ");
        b.cq.wait_event().unwrap();
        b.cq.ack_events(1);
        assert_wc(&poll1(&b.cq), 2, WcOpcode::RECV);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);

        // 3. Solicited only: an unsolicited SEND raises nothing, a SOLICITED one does.
        b.cq.req_notify(true).unwrap();
        assert!(b.cq.poll_one().is_none());
        send_ok(&a.qp, &[SendWr::send(4, &s)]);
        assert_wc(&poll1(&a.cq), 4, WcOpcode::SEND);
        assert!(
            !ch.wait(Some(QUIET)).unwrap(),
            "event for an unsolicited SEND"
        );
        send_ok(
            &a.qp,
            &[SendWr {
                flags: SendFlags::SIGNALED | SendFlags::SOLICITED,
                ..SendWr::send(5, &s)
            }],
        );
        assert!(
            ch.wait(Some(WAIT)).unwrap(),
            "no event for a SOLICITED send"
        );
        b.cq.wait_event().unwrap();
        b.cq.ack_events(1);
        let wc = poll_n(&b.cq, 2);
        assert_wc(&wc[0], 3, WcOpcode::RECV);
        assert_wc(&wc[1], 4, WcOpcode::RECV);
        assert_wc(&poll1(&a.cq), 5, WcOpcode::SEND);
        assert!(ch.try_get_event().unwrap().is_none());
    });
}

// Async events

/// Whether rxe of this kernel release raises QP_ACCESS_ERR at the responder of an R_Key
/// violation: from 7.x (absent in 6.1 and 6.12, present in 7.3.4).
fn rkey_violation_event(release: &str) -> bool {
    release
        .split('.')
        .next()
        .and_then(|m| m.trim().parse::<u32>().ok())
        .is_some_and(|major| major >= 7)
}

/// Async events through `Context::get_async_event` with a timeout, each naming its object:
/// SQ_DRAINED for a QP moved to SQD, SRQ_LIMIT_REACHED for an armed SRQ. rxe of 6.1 and 6.12
/// raises no QP_FATAL / QP_REQ_ERR / QP_ACCESS_ERR at all (its requester, completer and
/// responder move a QP to ERR without an event): after a remote access violation neither side
/// gets one. rxe of 7.x (measured on 7.3.4) raises QP_ACCESS_ERR at the responder for an
/// R_Key violation of a request without immediate data, the affiliated asynchronous error of
/// IBTA C9-222.1.1 ("RDMA/rxe: Generate async error for r_key violations", February 2026):
/// B gets it, naming B's QP; the requester A still gets none.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_events() {
    each_topo("async_events", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        assert_eq!(async_event(&a.side.ctx, Duration::ZERO), None);

        // SQ_DRAINED, naming the QP.
        a.qp.modify(&QpAttr {
            qp_state: Some(QpState::SQD),
            en_sqd_async_notify: Some(true),
            ..Default::default()
        })
        .unwrap();
        let ev = async_event(&a.side.ctx, WAIT).expect("no SQ_DRAINED event");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::SQ_DRAINED,
                element: AsyncElement::Qp(a.qp.user_handle()),
            }
        );
        assert_eq!(state(&a.qp), QpState::SQD);
        a.qp.modify(&QpAttr {
            qp_state: Some(QpState::RTS),
            ..Default::default()
        })
        .unwrap();
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r)]);
        let s = [a.mr.sge(0..8)];
        send_ok(&a.qp, &[SendWr::send(1, &s)]);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 1, WcOpcode::RECV);

        // A remote access violation: both QPs end in ERR; the responder's QP_ACCESS_ERR from
        // 7.x only, none on the requester's side.
        let op = SendOp::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey() ^ 0x80,
        };
        send_ok(&a.qp, &[wr(2, op, &s)]);
        assert_status(&poll1(&a.cq), 2, WcStatus::REM_ACCESS_ERR);
        assert_eq!(state(&b.qp), QpState::ERR);
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let expected = rkey_violation_event(&release).then_some(AsyncEvent {
            event_type: AsyncEventType::QP_ACCESS_ERR,
            element: AsyncElement::Qp(b.qp.user_handle()),
        });
        let wait = if expected.is_some() { WAIT } else { QUIET };
        assert_eq!(
            async_event(&b.side.ctx, wait),
            expected,
            "the responder's event after an R_Key violation (kernel {})",
            release.trim()
        );
        assert_eq!(
            async_event(&a.side.ctx, QUIET),
            None,
            "the requester got a QP event (kernel {})",
            release.trim()
        );

        // SRQ_LIMIT_REACHED, naming the SRQ: 6 receives, limit 4, three consumed.
        let sa = &a.side;
        let sb = &b.side;
        let srq = Srq::create(
            &sb.pd,
            SrqAttr {
                max_wr: 8,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
        let (ca, cb) = (cq(sa, 16, None), cq(sb, 16, None));
        let qa = qp(sa, QpInit::rc(&ca, caps(8, 1, 1, 0)));
        let qb = qp(
            sb,
            QpInit {
                srq: Some(srq.clone()),
                ..QpInit::rc(&cb, caps(8, 0, 1, 0))
            },
        );
        rc_connect(&qa, sa, qb.qp_num(), sb.gid, NORMAL);
        rc_connect(&qb, sb, qa.qp_num(), sa.gid, NORMAL);
        let r = sge_slots(&b.mr, 6, 64);
        let rw = recvs(0, &r);
        post_srq(&srq, &rw).unwrap();
        srq.set_limit(4).unwrap();
        assert_eq!(srq.query().unwrap().srq_limit, 4);
        for i in 0..2 {
            send_ok(&qa, &[SendWr::send(i, &s)]);
        }
        poll_n(&cb, 2);
        assert_eq!(
            async_event(sb.ctx.as_ref(), QUIET),
            None,
            "4 left: not below 4"
        );
        send_ok(&qa, &[SendWr::send(2, &s)]);
        poll_n(&cb, 1);
        let ev = async_event(&sb.ctx, WAIT).expect("no SRQ_LIMIT_REACHED event");
        assert_eq!(
            ev,
            AsyncEvent {
                event_type: AsyncEventType::SRQ_LIMIT_REACHED,
                element: AsyncElement::Srq(srq.user_handle()),
            }
        );
        // One-shot: the limit is disarmed.
        assert_eq!(srq.query().unwrap().srq_limit, 0);
        poll_n(&ca, 3);
        drop((qa, qb));
    });
}
