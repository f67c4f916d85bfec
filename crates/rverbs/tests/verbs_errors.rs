//! Bad input to the verbs objects gives clear errors and leaves everything usable; nothing
//! leaks over many create/destroy cycles (issue #3). Runs in the VM.

mod common;

use std::collections::HashMap;
use std::io::ErrorKind;

use common::*;
use rverbs::uverbs::ah::{Ah, AhAttr};
use rverbs::uverbs::context::Context;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::mr::{self, AccessFlags, Mr, PageBuf};
use rverbs::uverbs::netlink::RdmaNetlink;
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{Qp, QpAttr, QpInit, QpState};
use rverbs::uverbs::srq::{Srq, SrqAttr};

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// The tests of this file count the device's kernel objects, so they run one at a time
/// (libtest runs tests on several threads).
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn msg(e: &std::io::Error) -> String {
    e.to_string()
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn mr_bad_input() {
    let _serial = serial();
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();

    let (e, v) = Mr::register(&pd, Vec::with_capacity(77), AccessFlags::LOCAL_WRITE)
        .unwrap_err()
        .into_parts();
    assert!(v.capacity() >= 77, "the buffer comes back with the error");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    // `?` converts the error (giving up the buffer) in functions returning io::Result.
    let via_q = || -> std::io::Result<()> {
        let _mr = Mr::register(&pd, PageBuf::new(4096)?, AccessFlags::REMOTE_WRITE)?;
        Ok(())
    };
    let e2 = via_q().unwrap_err();
    assert!(msg(&e2).contains("LOCAL_WRITE"), "{e2}");
    assert!(
        msg(&e).contains("length 0") && msg(&e).contains("rxe"),
        "{e}"
    );

    let (e, _b) = Mr::register(
        &pd,
        PageBuf::new(4096).unwrap(),
        AccessFlags::from_bits_retain(1 << 15),
    )
    .unwrap_err()
    .into_parts();
    assert!(msg(&e).contains("unknown access bits 0x8000"), "{e}");

    let (e, _b) = Mr::register(&pd, PageBuf::new(4096).unwrap(), AccessFlags::REMOTE_WRITE)
        .unwrap_err()
        .into_parts();
    assert!(msg(&e).contains("LOCAL_WRITE"), "{e}");

    // A range nothing is mapped at: the kernel refuses to pin it.
    // SAFETY: the registration is expected to fail; nothing is accessed.
    let e = unsafe { mr::register_raw(&pd, 0x1000, 8192, AccessFlags::LOCAL_WRITE) }.unwrap_err();
    assert!(
        msg(&e).contains("0x1000") && msg(&e).contains("8192 bytes"),
        "{e}"
    );
    assert_eq!(
        rverbs::uverbs::Error::errno_of(&e),
        Some(rustix::io::Errno::FAULT),
        "{e}"
    );

    // The PD is still usable.
    let ok = Mr::register(&pd, vec![0u8; 64], AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(ok.len(), 64);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn cq_and_qp_over_limits() {
    let _serial = serial();
    let ctx = ctx();
    let attr = ctx.query_device().unwrap();
    let e = Cq::create(&ctx, attr.max_cqe + 1, CqOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        msg(&e).contains(&format!("max_cqe is {}", attr.max_cqe)),
        "{e}"
    );
    let e = Cq::create(&ctx, 0, CqOptions::default()).unwrap_err();
    assert!(msg(&e).contains("at least 1"), "{e}");

    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 16, CqOptions::default()).unwrap();
    let over = QpCaps {
        max_send_wr: attr.max_qp_wr + 1,
        ..caps()
    };
    let e = Qp::create(&pd, QpInit::rc(&cq, over)).unwrap_err();
    assert!(
        msg(&e).contains(&format!(
            "max_send_wr {} exceeds the device limit {}",
            attr.max_qp_wr + 1,
            attr.max_qp_wr
        )),
        "{e}"
    );
    let over = QpCaps {
        max_recv_sge: attr.max_sge + 1,
        ..caps()
    };
    let e = Qp::create(&pd, QpInit::rc(&cq, over)).unwrap_err();
    assert!(msg(&e).contains("max_recv_sge"), "{e}");
    // Inline data beyond what rxe offers: the kernel refuses; the error names the caps.
    let over = QpCaps {
        max_inline_data: 1 << 20,
        ..caps()
    };
    let e = Qp::create(&pd, QpInit::rc(&cq, over)).unwrap_err();
    assert!(msg(&e).contains("inline 1048576"), "{e}");
    // Everything involved is still usable.
    let qp = Qp::create(&pd, QpInit::rc(&cq, caps())).unwrap();
    assert_eq!(qp.cached_state(), QpState::RESET);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn illegal_transitions_are_named() {
    let _serial = serial();
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 16, CqOptions::default()).unwrap();
    let qp = Qp::create(&pd, QpInit::rc(&cq, caps())).unwrap();
    let e = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::RTS),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        msg(&e).contains("from RESET to RTS: illegal state transition"),
        "{e}"
    );
    // Only the rdma_cm connects an iWARP QP without a modify; anywhere else the note is
    // refused, and the state stays what the modifies made it.
    let e = qp.note_iwarp_connected().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(
        msg(&e).contains("not an iWARP device: a QP reaches RTS by a modify"),
        "{e}"
    );
    assert_eq!(qp.cached_state(), QpState::RESET);
    let e = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            access_flags: Some(AccessFlags::empty()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        msg(&e).contains("missing attributes") && msg(&e).contains("PORT"),
        "{e}"
    );
    // The kernel is the final judge: a port that does not exist.
    let e = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(9),
            access_flags: Some(AccessFlags::empty()),
            ..Default::default()
        })
        .unwrap_err();
    assert!(msg(&e).contains("RESET to INIT"), "{e}");
    assert_eq!(qp.query().unwrap().state, QpState::RESET);
    // Still usable.
    let (sgid, gid) = roce_v2_gid(&ctx);
    connect(&qp, qp.qp_num(), gid, sgid, ALL_ACCESS);
    assert_eq!(qp.query().unwrap().state, QpState::RTS);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ah_with_missing_gid_index() {
    let _serial = serial();
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let (sgid, gid) = roce_v2_gid(&ctx);
    let e = Ah::create(&pd, AhAttr::roce(1, gid, 200)).unwrap_err();
    assert!(msg(&e).contains("GID index 200"), "{e}");
    let ah = Ah::create(&pd, AhAttr::roce(1, gid, sgid)).unwrap();
    assert_ne!(ah.handle(), u32::MAX);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn cq_in_use_cannot_be_destroyed() {
    let _serial = serial();
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 16, CqOptions::default()).unwrap();
    let qp = Qp::create(&pd, QpInit::rc(&cq, caps())).unwrap();
    let (e, cq) = cq.try_destroy().unwrap_err();
    assert!(
        msg(&e).contains("still in use: 2 other reference(s)"),
        "{e}"
    );
    // The CQ still works.
    assert!(cq.poll_one().is_none());
    drop(qp);
    cq.try_destroy().unwrap();
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn context_without_provider_says_so() {
    let _serial = serial();
    let dev = rverbs::uverbs::device::Device::by_name(&dev_name()).unwrap();
    let ctx = std::sync::Arc::new(Context::open(&dev).unwrap());
    let e = Cq::create(&ctx, 4, CqOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(msg(&e).contains("rverbs_provider::open"), "{e}");
    // Control-path objects need no provider.
    Pd::alloc(&ctx).unwrap();
}

fn kernel_objects(dev: &str) -> HashMap<String, u64> {
    let mut nl = RdmaNetlink::open().unwrap();
    let d = nl.device_by_name(dev, "resource test").unwrap();
    nl.resource_summary(d.index).unwrap().into_iter().collect()
}

/// The kernel holds exactly the objects we think, and none after drop.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn kernel_holds_exactly_our_objects() {
    let _serial = serial();
    let name = dev_name();
    let ctx = ctx();
    let base = kernel_objects(&name);
    {
        let pd = Pd::alloc(&ctx).unwrap();
        let pd2 = Pd::alloc(&ctx).unwrap();
        let cqs: Vec<_> = (0..3)
            .map(|_| Cq::create(&ctx, 8, CqOptions::default()).unwrap())
            .collect();
        let _mr = Mr::register(&pd2, vec![0u8; 4096], AccessFlags::LOCAL_WRITE).unwrap();
        let _qp = Qp::create(&pd, QpInit::rc(&cqs[0], caps())).unwrap();
        let now = kernel_objects(&name);
        for (k, n) in [("pd", 2), ("cq", 3), ("mr", 1), ("qp", 1)] {
            assert_eq!(now[k], base[k] + n, "{k}: {now:?} vs {base:?}");
        }
    }
    assert_eq!(kernel_objects(&name), base);
}

/// 10,000 create/destroy cycles of PD+MR+CQ+QP: no growth in fds, mappings or kernel objects.
///
/// The counting runs in a child process running only this test on one thread: in the parent,
/// libtest's other test threads come and go and their stacks would change the mapping count.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ten_thousand_cycles_leak_nothing() {
    if std::env::var_os("RVERBS_CYCLES_CHILD").is_none() {
        let _serial = serial();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "ten_thousand_cycles_leak_nothing",
                "--test-threads=1",
                "--nocapture",
            ])
            .env("RVERBS_CYCLES_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child run failed:\n{text}");
        assert!(text.contains("1 passed"), "child ran no test:\n{text}");
        return;
    }
    let name = dev_name();
    let ctx = ctx();
    let cycle = || {
        let pd = Pd::alloc(&ctx).unwrap();
        let mr = Mr::register(&pd, PageBuf::new(4096).unwrap(), AccessFlags::LOCAL_WRITE).unwrap();
        let cq = Cq::create(&ctx, 8, CqOptions::default()).unwrap();
        let qp = Qp::create(&pd, QpInit::rc(&cq, caps())).unwrap();
        drop((qp, mr, cq, pd));
    };
    cycle();
    {
        // The device-mapping count does see the rings (so it can see them leak).
        let before = device_map_count();
        let _cq = Cq::create(&ctx, 8, CqOptions::default()).unwrap();
        assert_eq!(
            device_map_count(),
            before + 1,
            "a CQ ring maps the device once"
        );
    }
    let (fds, dev_maps, bytes, objs) = (
        fd_count(),
        device_map_count(),
        mapped_bytes(),
        kernel_objects(&name),
    );
    let t = std::time::Instant::now();
    for _ in 0..10_000 {
        cycle();
    }
    eprintln!("10000 cycles in {:?}", t.elapsed());
    assert_eq!(fd_count(), fds, "fds grew");
    assert_eq!(device_map_count(), dev_maps, "device mappings (rings) grew");
    // The number of anonymous VMAs is no leak measure (the kernel merges and splits adjacent
    // ones, the allocator keeps some); the mapped size is: leaking one 4 KiB page buffer or
    // ring per cycle would add 40 MiB, so 1 MiB of slack cannot hide a per-cycle leak.
    let grew = mapped_bytes().saturating_sub(bytes);
    assert!(
        grew < 1 << 20,
        "mapped memory grew by {grew} bytes over 10,000 cycles"
    );
    assert_eq!(kernel_objects(&name), objs, "kernel objects grew");
}

/// A QP refuses CQs and an SRQ of another context (another open of the same device): kernel
/// handles are per context, so another context's handle would name an unrelated object of
/// this one. Nothing is created, and the objects stay usable.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn qp_refuses_objects_of_another_context() {
    let _serial = serial();
    let (a, b) = (ctx(), ctx());
    let (pd_a, pd_b) = (Pd::alloc(&a).unwrap(), Pd::alloc(&b).unwrap());
    let (cq_a, cq_b) = (
        Cq::create(&a, 16, CqOptions::default()).unwrap(),
        Cq::create(&b, 16, CqOptions::default()).unwrap(),
    );
    let srq_attr = SrqAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq_a = Srq::create(&pd_a, srq_attr).unwrap();
    let no_rq = QpCaps {
        max_recv_wr: 0,
        ..caps()
    };
    let e = Qp::create(&pd_b, QpInit::rc(&cq_a, caps())).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        msg(&e).contains("send CQ belongs to another context"),
        "{e}"
    );
    let e = Qp::create(
        &pd_b,
        QpInit {
            recv_cq: cq_a.clone(),
            ..QpInit::rc(&cq_b, caps())
        },
    )
    .unwrap_err();
    assert!(
        msg(&e).contains("recv CQ belongs to another context"),
        "{e}"
    );
    let e = Qp::create(
        &pd_b,
        QpInit {
            srq: Some(srq_a.clone()),
            ..QpInit::rc(&cq_b, no_rq)
        },
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        msg(&e).contains("the SRQ belongs to another context"),
        "{e}"
    );
    // The same objects in their own context work.
    Qp::create(
        &pd_a,
        QpInit {
            srq: Some(srq_a),
            ..QpInit::rc(&cq_a, no_rq)
        },
    )
    .unwrap();
    Qp::create(&pd_b, QpInit::rc(&cq_b, caps())).unwrap();
}
