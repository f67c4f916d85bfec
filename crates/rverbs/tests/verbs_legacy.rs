//! The verbs objects over the legacy write() commands: a context opened with the legacy ABI
//! forced (`rverbs_provider::open_legacy_abi`) creates CQs and QPs and destroys every object
//! with write() instead of the ioctl methods. Runs in the VM.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use rverbs::uverbs::ah::{Ah, AhAttr};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::context::Context;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::device::Device;
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::netlink::RdmaNetlink;
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{Qp, QpInit, QpState, QpType};
use rverbs::uverbs::srq::{Srq, SrqAttr};

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

/// The tests of this file count the device's kernel objects, so they run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn legacy_ctx(name: &str) -> Arc<Context> {
    let dev = Device::by_name(name).unwrap_or_else(|e| panic!("{name} (the VM must have it): {e}"));
    rverbs::provider::open_legacy_abi(&dev)
        .unwrap_or_else(|e| panic!("open {name} with the legacy ABI: {e}"))
}

fn kernel_objects(dev: &str) -> HashMap<String, u64> {
    let mut nl = RdmaNetlink::open().unwrap();
    let d = nl.device_by_name(dev, "resource test").unwrap();
    nl.resource_summary(d.index).unwrap().into_iter().collect()
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn every_object_over_write_commands_and_nothing_left() {
    let _serial = serial();
    let name = dev_name();
    let ctx = legacy_ctx(&name);
    let base = kernel_objects(&name);
    {
        let pd = Pd::alloc(&ctx).unwrap();
        let mr = Mr::register(&pd, PageBuf::new(8192).unwrap(), ALL_ACCESS).unwrap();
        assert_ne!(mr.lkey(), 0);
        let vmr = Mr::register(&pd, vec![0u8; 100], AccessFlags::LOCAL_WRITE).unwrap();
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
        let cq2 = Cq::create(&ctx, 8, CqOptions::default()).unwrap();
        let srq = Srq::create(
            &pd,
            SrqAttr {
                max_wr: 32,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
        let mut qps = Vec::new();
        for t in [QpType::RC, QpType::UC, QpType::UD] {
            let qp = Qp::create(
                &pd,
                QpInit {
                    qp_type: t,
                    send_cq: cq.clone(),
                    recv_cq: cq2.clone(),
                    ..QpInit::rc(&cq, caps())
                },
            )
            .unwrap_or_else(|e| panic!("create {t} QP: {e}"));
            assert!(qp.qp_num() > 1);
            assert!(qp.caps().max_send_wr >= 16, "{:?}", qp.caps());
            assert_eq!(qp.query().unwrap().state, QpState::RESET);
            qps.push(qp);
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
        // The kernel's resource summary counts no AHs; the AH's destroy is checked by its drop
        // (an error there is logged) and by the PD's dealloc succeeding after it.
        let now = kernel_objects(&name);
        for (k, n) in [("pd", 1), ("cq", 2), ("mr", 2), ("qp", 4), ("srq", 1)] {
            let (b, c) = (
                base.get(k).copied().unwrap_or(0),
                now.get(k).copied().unwrap_or(0),
            );
            assert_eq!(c, b + n, "{k}: {now:?} vs {base:?}");
        }
        drop((ah, srq_qp, qps, srq, vmr, mr));
        drop((cq, cq2, ch, pd));
    }
    assert_eq!(kernel_objects(&name), base);
}

/// Two RC QPs created over write() and connected by hand: SEND with immediate, RDMA WRITE and
/// READ, payload checked; nothing left in the kernel after drop.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rc_pair_over_write_commands_moves_data() {
    let _serial = serial();
    let name = dev_name();
    let ctx = legacy_ctx(&name);
    let base = kernel_objects(&name);
    {
        let pd = Pd::alloc(&ctx).unwrap();
        let ch = CompChannel::create(&ctx).unwrap();
        let cq_a = Cq::create(&ctx, 64, CqOptions::default()).unwrap();
        let cq_b = Cq::create(
            &ctx,
            64,
            CqOptions {
                channel: Some(ch.clone()),
                comp_vector: 0,
            },
        )
        .unwrap();
        let a = Qp::create(&pd, QpInit::rc(&cq_a, caps())).unwrap();
        let b = Qp::create(&pd, QpInit::rc(&cq_b, caps())).unwrap();
        let (sgid, gid) = roce_v2_gid(&ctx);
        connect(&a, b.qp_num(), gid, sgid, ALL_ACCESS);
        connect(&b, a.qp_num(), gid, sgid, ALL_ACCESS);

        send_write_read(
            &pd,
            (&a, &cq_a),
            (&b, &cq_b),
            b"legacy writes!",
            0x0bad_cafe,
        );
        drop((a, b));
        drop((cq_a, cq_b, ch, pd));
    }
    assert_eq!(kernel_objects(&name), base);
}
