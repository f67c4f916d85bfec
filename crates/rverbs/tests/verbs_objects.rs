//! Every core verbs object on a real rxe device (issue #3). Runs in the VM.

mod common;

use std::sync::Arc;

use common::*;
use rverbs::uverbs::ah::{Ah, AhAttr};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{Qp, QpAttr, QpInit, QpState, QpType};
use rverbs::uverbs::srq::{Srq, SrqAttr};
use rverbs::uverbs::{SendWr, Sge, WcStatus};

const VM_ONLY: &str = "needs an RDMA device: runs in the VM (cargo xtask test)";

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn create_and_destroy_every_object() {
    let _ = VM_ONLY;
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let mr = Mr::register(&pd, PageBuf::new(8192).unwrap(), ALL_ACCESS).unwrap();
    assert_ne!(mr.lkey(), 0);
    let vmr = Mr::register(&pd, vec![0u8; 100], AccessFlags::LOCAL_WRITE).unwrap();
    let mut local = [0u8; 64];
    let bmr_lkey = Mr::scoped(&pd, &mut local[..], AccessFlags::LOCAL_WRITE, |m| {
        m.write_at(0, b"scoped");
        assert_eq!(m.read_vec(0..6), b"scoped");
        m.lkey()
    })
    .unwrap();
    assert_ne!(bmr_lkey, 0);
    assert_eq!(
        &local[..6],
        b"scoped",
        "the borrow is back, with what was written"
    );
    let ch = CompChannel::create(&ctx).unwrap();
    let cq = Cq::create(
        &ctx,
        32,
        CqOptions {
            channel: Some(ch.clone()),
            comp_vector: 0,
        },
    )
    .unwrap();
    assert!(cq.cqe() >= 32);
    let srq = Srq::create(
        &pd,
        SrqAttr {
            max_wr: 32,
            max_sge: 1,
            srq_limit: 0,
        },
    )
    .unwrap();
    let q = srq.query().unwrap();
    assert!(q.max_wr >= 32, "{q:?}");
    for t in [QpType::RC, QpType::UC, QpType::UD] {
        let qp = Qp::create(
            &pd,
            QpInit {
                qp_type: t,
                ..QpInit::rc(&cq, caps())
            },
        )
        .unwrap_or_else(|e| panic!("create {t} QP: {e}"));
        assert!(qp.qp_num() > 1);
        assert_eq!(qp.query().unwrap().state, QpState::RESET);
    }
    let srq_qp = Qp::create(
        &pd,
        QpInit {
            srq: Some(srq.clone()),
            caps: QpCaps {
                max_recv_wr: 0,
                ..caps()
            },
            ..QpInit::rc(&cq, caps())
        },
    )
    .unwrap();
    let (sgid, gid) = roce_v2_gid(&ctx);
    let ah = Ah::create(&pd, AhAttr::roce(1, gid, sgid)).unwrap();
    drop((ah, srq_qp, srq, vmr, mr));
    drop(cq);
    drop(ch);
    drop(pd);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn qp_walks_every_state() {
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 16, CqOptions::default()).unwrap();
    let qp = Qp::create(&pd, QpInit::rc(&cq, caps())).unwrap();
    let (sgid, gid) = roce_v2_gid(&ctx);
    connect(&qp, qp.qp_num(), gid, sgid, ALL_ACCESS);
    let info = qp.query().unwrap();
    assert_eq!(info.state, QpState::RTS);
    assert_eq!(info.timeout, 14);
    assert_eq!(info.ah_attr.grh.unwrap().dgid, gid);
    qp.modify(&QpAttr {
        qp_state: Some(QpState::SQD),
        ..Default::default()
    })
    .unwrap();
    // SQD is reached once the send queue drained (immediately: nothing is outstanding).
    let st = qp.query().unwrap().state;
    assert!(st == QpState::SQD || st == QpState::RTS, "{st}");
    qp.modify(&QpAttr {
        qp_state: Some(QpState::ERR),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::ERR);
    qp.modify(&QpAttr {
        qp_state: Some(QpState::RESET),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(qp.query().unwrap().state, QpState::RESET);
}

/// Two RC QPs on one device connected by hand (no CM): SEND with immediate, RDMA WRITE and
/// READ, payload checked.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rc_pair_by_hand_moves_data() {
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq_a = Cq::create(&ctx, 64, CqOptions::default()).unwrap();
    let cq_b = Cq::create(&ctx, 64, CqOptions::default()).unwrap();
    let a = Qp::create(&pd, QpInit::rc(&cq_a, caps())).unwrap();
    let b = Qp::create(&pd, QpInit::rc(&cq_b, caps())).unwrap();
    let (sgid, gid) = roce_v2_gid(&ctx);
    connect(&a, b.qp_num(), gid, sgid, ALL_ACCESS);
    connect(&b, a.qp_num(), gid, sgid, ALL_ACCESS);

    send_write_read(&pd, (&a, &cq_a), (&b, &cq_b), b"hello, rxe!", 0x1234_5678);
    let _ = Sge::default();
    let _: Arc<Pd> = pd;
}

/// Resizing a CQ keeps the completions not yet polled, and the bigger CQ keeps working.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn cq_resize_keeps_pending_completions() {
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq_a = Cq::create(&ctx, 8, CqOptions::default()).unwrap();
    let cq_b = Cq::create(&ctx, 64, CqOptions::default()).unwrap();
    let a = Qp::create(&pd, QpInit::rc(&cq_a, caps())).unwrap();
    let b = Qp::create(&pd, QpInit::rc(&cq_b, caps())).unwrap();
    let (sgid, gid) = roce_v2_gid(&ctx);
    connect(&a, b.qp_num(), gid, sgid, ALL_ACCESS);
    connect(&b, a.qp_num(), gid, sgid, ALL_ACCESS);
    let m = Mr::register(&pd, PageBuf::new(4096).unwrap(), ALL_ACCESS).unwrap();
    let rs = [m.sge(0..64)];
    let ss = [m.sge(64..72)];
    let send = |id| {
        b.post_recv(&[rverbs::uverbs::RecvWr {
            wr_id: id,
            sge: &rs,
        }])
        .unwrap();
        a.post_send(&[SendWr::send(id, &ss)]).unwrap();
    };
    for id in 1..=3 {
        send(id);
    }
    // Let all three land in cq_a before resizing (rxe completes within the doorbell, but a
    // delayed ACK would only make the test weaker, never wrong: we then poll what arrived).
    std::thread::sleep(std::time::Duration::from_millis(200));
    let before = cq_a.cqe();
    let e = cq_a.resize(0).unwrap_err();
    assert!(e.to_string().contains("at least 1"), "{e}");
    let got = cq_a.resize(100).unwrap();
    assert!(got >= 100 && got > before, "{before} -> {got}");
    assert_eq!(cq_a.cqe(), got);
    let ids: Vec<u64> = poll_n(&cq_a, 3).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [1, 2, 3]);
    // More completions than the old depth fit now, and arrive in order.
    for id in 4..=20 {
        send(id);
        assert_eq!(poll_n(&cq_b, 1)[0].status, WcStatus::SUCCESS);
    }
    let wcs = poll_n(&cq_a, 17);
    assert!(wcs.iter().all(|w| w.status == WcStatus::SUCCESS));
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (4..=20).collect::<Vec<_>>()
    );
}
