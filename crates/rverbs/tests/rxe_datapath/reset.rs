//! A QP cycled RTS → RESET → INIT → RTR → RTS: it works again, and no work request posted
//! before the reset is seen after it.
//!
//! Measured on rxe (6.1 and 6.12, loopback and two nodes): the receives left in a reset QP's
//! RQ are gone (no completion, no later SEND lands in them); a completion already in the CQ
//! stays there and is polled after the reset (librxe does not clean CQs either; rverbs'
//! `CqOps::qp_reset` does nothing on rxe). rverbs' rxe rings keep no index of their own
//! outside the shared queue headers, so nothing needs resyncing.

use super::*;
use rverbs::uverbs::RawWc;

/// Both ends of a working connection are reset (with receives still posted at B and a
/// completion not yet polled at A) and connected again: a new SEND lands in the receive
/// posted after the reset, never in an old one; nothing posted before the reset completes
/// after it. Three cycles, so the rings' indices go on from wherever the last one left them.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn qp_cycled_through_reset_works_and_forgets_old_requests() {
    each_topo(
        "qp_cycled_through_reset_works_and_forgets_old_requests",
        |t| {
            let o = Opts {
                caps: caps(4, 4, 1, 0),
                ..Opts::default()
            };
            let (a, b) = rc_pair(t, &o);
            const MSG: usize = 64;
            for cycle in 0..3u64 {
                let base = 1000 * (cycle + 1);
                // A working exchange, then work left behind: two receives at B that no SEND
                // consumes, and at A a signalled SEND whose completion is not polled.
                let r = sge_slots(&b.mr, 3, MSG);
                recv_ok(&b.qp, &[recv(base, &r[0])]);
                a.mr.write_at(0, &pattern(cycle as u8, MSG));
                let s = [a.mr.sge(0..MSG)];
                send_ok(&a.qp, &[SendWr::send(base + 1, &s)]);
                assert_wc(&poll1(&b.cq), base, WcOpcode::RECV);
                assert_wc(&poll1(&a.cq), base + 1, WcOpcode::SEND);
                recv_ok(&b.qp, &[recv(base + 2, &r[1]), recv(base + 3, &r[2])]);
                recv_ok(&a.qp, &[recv(base + 4, &r[0])]);
                // B's receive of this one is the first of the two left behind.
                send_ok(&a.qp, &[SendWr::send(base + 5, &s)]);
                assert_wc(&poll1(&b.cq), base + 2, WcOpcode::RECV);
                for e in [&a, &b] {
                    let reset = QpAttr {
                        qp_state: Some(QpState::RESET),
                        ..QpAttr::default()
                    };
                    // A view of the QP's CQ held across the reset (the C drop-in's
                    // ibv_start_poll .. ibv_end_poll): rxe's CQs are not locked by a reset,
                    // so this does not wait for itself.
                    let mut slots = [RawWc::default(); 1];
                    let view = e.cq.start_poll(&mut slots[..0]);
                    e.qp.modify(&reset)
                        .unwrap_or_else(|e| panic!("cycle {cycle}: modify to RESET: {e}"));
                    drop(view);
                    assert_eq!(e.qp.query().unwrap().state, QpState::RESET);
                }
                rc_connect(&a.qp, &a.side, b.qp.qp_num(), b.side.gid, o.path);
                rc_connect(&b.qp, &b.side, a.qp.qp_num(), a.side.gid, o.path);
                // What the CQs still hold from before the reset: at most A's last SEND (rxe
                // keeps a reset QP's completions in its CQs, as librxe does: the kernel owns
                // those rings), never one of the receives left behind.
                let old_a = drain(&a.cq);
                let old_b = drain(&b.cq);
                eprintln!("  cycle {cycle}: after the reset A's CQ held {old_a:?}, B's {old_b:?}");
                assert!(
                    old_a.iter().all(|w| w.wr_id == base + 5),
                    "cycle {cycle}: {old_a:?}"
                );
                assert!(old_b.is_empty(), "cycle {cycle}: {old_b:?}");
                // After: the new receive gets the new SEND; none of the old ones show up.
                let r = sge_slots(&b.mr, 4, MSG);
                recv_ok(&b.qp, &[recv(base + 10, &r[3])]);
                let m = pattern(cycle as u8 + 100, MSG);
                a.mr.write_at(0, &m);
                send_ok(&a.qp, &[SendWr::send(base + 11, &s)]);
                let wb = poll1(&b.cq);
                assert_wc(&wb, base + 10, WcOpcode::RECV);
                assert_eq!(&b.mr.to_vec()[3 * MSG..4 * MSG], &m[..], "cycle {cycle}");
                assert_wc(&poll1(&a.cq), base + 11, WcOpcode::SEND);
                assert_quiet(&a.cq, "A after the reset");
                assert_quiet(&b.cq, "B after the reset");
            }
        },
    );
}

/// Everything `cq` holds, once it has been quiet for a while.
fn drain(cq: &Cq) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    std::thread::sleep(QUIET);
    while let Some(wc) = cq.poll_one() {
        v.push(wc);
    }
    v
}
