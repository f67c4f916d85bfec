//! The EFA driver against a fake kernel that lies or refuses: every create answer it cannot
//! use is refused with an error naming what was wrong (and the core then destroys the kernel
//! object), every refusal of libefa's is rverbs' too, and a device naming a QP or request
//! that is not there stops the poll. The bytes of the accepted paths are the oracle's
//! (`efa_oracle.rs`).

use super::efa_oracle::{FakeMem, PAGE};
use super::mlx5_fake::{fd, kobj};

use std::sync::Arc;

use crate::efa::abi::*;
use crate::efa::driver::{EfaDriver, EfaInfo, QP_TYPE_DRIVER};
use rverbs_uverbs::driver::{CqCreated, CqOps, Driver, QpCreated, QpOps, QpRequest};
use rverbs_uverbs::qp::{QpCaps, QpType};
use rverbs_uverbs::{SendFlags, SendOp, SendWr, Sge, UdDest, WorkCompletion};
use zerocopy::IntoBytes;

fn info() -> EfaInfo {
    let ctx = efa_ibv_alloc_ucontext_resp {
        cmds_supp_udata_mask: EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE
            | EFA_USER_CMDS_SUPP_UDATA_CREATE_AH,
        sub_cqs_per_cq: 2,
        inline_buf_size: 32,
        max_llq_size: 1 << 16,
        ..Default::default()
    };
    let q = efa_ibv_ex_query_device_resp {
        max_sq_wr: 64,
        max_rq_wr: 64,
        max_sq_sge: 2,
        max_rq_sge: 2,
        ..Default::default()
    };
    EfaInfo::new("efa_0", &ctx, Some(&q)).unwrap()
}

fn driver() -> (EfaDriver, Arc<FakeMem>) {
    let mem = Arc::new(FakeMem::default());
    (EfaDriver::new(info(), mem.clone(), PAGE), mem)
}

/// A CQ of 4 entries per sub-CQ, the answer changed by `f` (cqe, response).
fn cq(
    d: &EfaDriver,
    mem: &FakeMem,
    f: impl Fn(&mut u32, &mut efa_ibv_create_cq_resp),
) -> std::io::Result<Box<dyn CqOps>> {
    // SAFETY: the fake keeps the create contract: keys name its memory of the sizes given
    // (where a test lies about a size, the driver must refuse before mapping).
    unsafe {
        d.create_cq(fd(), 4, &mut |_, uout| {
            let mut n = 4;
            let mut r = efa_ibv_create_cq_resp {
                q_mmap_size: PAGE as u64,
                q_mmap_key: mem.new_mem(PAGE),
                comp_mask: EFA_CREATE_CQ_RESP_DB_OFF,
                db_off: 0x10,
                db_mmap_key: mem.new_mem(PAGE),
                ..Default::default()
            };
            f(&mut n, &mut r);
            uout.copy_from_slice(r.as_bytes());
            Ok(CqCreated { handle: 1, cqe: n })
        })
    }
}

fn ud_req(qp_type: QpType) -> QpRequest {
    QpRequest {
        qp_type,
        caps: QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 32,
        },
        sq_sig_all: false,
        has_srq: false,
        srq_handle: None,
    }
}

/// A QP for `req`, the answer changed by `f` (QP number, response).
fn qp(
    d: &EfaDriver,
    mem: &FakeMem,
    req: &QpRequest,
    f: impl Fn(&mut u32, &mut efa_ibv_create_qp_resp),
) -> std::io::Result<Box<dyn QpOps>> {
    let caps = d.qp_caps_for_kernel(req)?;
    // SAFETY: as for `cq`.
    unsafe {
        d.create_qp(fd(), req, &mut |_, uout| {
            let mut qpn = 0x42;
            let mut r = efa_ibv_create_qp_resp {
                rq_mmap_size: PAGE as u64,
                rq_mmap_key: mem.new_mem(PAGE),
                rq_db_mmap_key: mem.new_mem(PAGE),
                sq_db_mmap_key: mem.new_mem(PAGE),
                llq_desc_mmap_key: mem.new_mem(PAGE),
                recv_sub_cq_idx: 1,
                ..Default::default()
            };
            f(&mut qpn, &mut r);
            uout.copy_from_slice(r.as_bytes());
            Ok(QpCreated {
                handle: 1,
                qp_num: qpn,
                caps,
            })
        })
    }
}

fn err(r: std::io::Result<impl Sized>) -> String {
    match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_kernel_without_ah_driver_data_is_refused() {
    let ctx = efa_ibv_alloc_ucontext_resp {
        cmds_supp_udata_mask: EFA_USER_CMDS_SUPP_UDATA_QUERY_DEVICE,
        sub_cqs_per_cq: 1,
        ..Default::default()
    };
    let e = EfaInfo::new("efa_0", &ctx, None).unwrap_err().to_string();
    assert!(e.contains("open efa_0 with the efa provider"), "{e}");
    assert!(e.contains("CREATE_AH"), "{e}");
}

#[test]
fn lying_cq_answers_are_refused() {
    let (d, mem) = driver();
    assert!(cq(&d, &mem, |_, _| {}).is_ok());
    let e = err(cq(&d, &mem, |n, _| *n = 3));
    assert!(e.contains("3 entries per sub-CQ"), "{e}");
    let e = err(cq(&d, &mem, |_, r| r.q_mmap_size = 64));
    assert!(
        e.contains("ring is 64 bytes") && e.contains("need 128"),
        "{e}"
    );
    let e = err(cq(&d, &mem, |_, r| r.db_off = PAGE as u32));
    assert!(e.contains("CQ doorbell offset 0x1000"), "{e}");
    // A key the kernel never made: the fake's mmap refuses it (EINVAL), the create fails.
    let e = err(cq(&d, &mem, |_, r| r.q_mmap_key = 0x7000_0000));
    assert!(e.contains("Invalid argument"), "{e}");
}

#[test]
fn lying_qp_answers_are_refused() {
    let (d, mem) = driver();
    let req = ud_req(QpType::UD);
    assert!(qp(&d, &mem, &req, |_, _| {}).is_ok());
    let e = err(qp(&d, &mem, &req, |n, _| *n = 0x10000));
    assert!(e.contains("QP number 0x10000 above 16 bits"), "{e}");
    let e = err(qp(&d, &mem, &req, |_, r| r.recv_sub_cq_idx = 2));
    assert!(
        e.contains("receive sub-CQ 2, the context's CQs have 2"),
        "{e}"
    );
    let e = err(qp(&d, &mem, &req, |_, r| r.sq_db_offset = 4094));
    assert!(
        e.contains("SQ doorbell offset 0xffe outside its page"),
        "{e}"
    );
    let e = err(qp(&d, &mem, &req, |_, r| r.llq_desc_offset = 0x20));
    assert!(e.contains("LLQ descriptor offset 0x20"), "{e}");
    let e = err(qp(&d, &mem, &req, |_, r| r.rq_mmap_size = 32));
    assert!(e.contains("RQ ring of 32 bytes, 64 needed"), "{e}");
    // A key the kernel never made: the mapping fails, named.
    let e = err(qp(&d, &mem, &req, |_, r| r.llq_desc_mmap_key = 0x7000_0000));
    assert!(e.contains("Invalid argument"), "{e}");
}

#[test]
fn libefa_refuses_these_qps_and_so_does_rverbs() {
    let (d, _) = driver();
    for (t, want) in [
        (QpType::RC, "EFA has UD and SRD QPs, not RC"),
        (QpType::UC, "EFA has UD and SRD QPs, not UC"),
    ] {
        let e = d.qp_caps_for_kernel(&ud_req(t)).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    let mut r = ud_req(QP_TYPE_DRIVER);
    r.has_srq = true;
    let e = d.qp_caps_for_kernel(&r).unwrap_err().to_string();
    assert!(
        e.contains("create SRD QP on efa") && e.contains("no SRQ"),
        "{e}"
    );
    for (f, want) in [
        (
            (|c: &mut QpCaps| c.max_send_sge = 3) as fn(&mut QpCaps),
            "3 send SGEs asked, the device takes at most 2",
        ),
        (|c| c.max_recv_sge = 3, "3 receive SGEs asked"),
        (|c| c.max_send_wr = 65, "65 send work requests asked"),
        (|c| c.max_recv_wr = 65, "65 receive work requests asked"),
        (|c| c.max_recv_sge = 0, "at least one"),
    ] {
        let mut r = ud_req(QP_TYPE_DRIVER);
        f(&mut r.caps);
        let e = d.qp_caps_for_kernel(&r).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
    }
    // What the kernel is told: libefa's rounding.
    let mut r = ud_req(QpType::UD);
    r.caps.max_send_wr = 5;
    r.caps.max_recv_wr = 3;
    r.caps.max_recv_sge = 2;
    let c = d.qp_caps_for_kernel(&r).unwrap();
    assert_eq!((c.max_send_wr, c.max_recv_wr, c.max_recv_sge), (8, 4, 2));
}

#[test]
fn posts_libefa_refuses_are_refused() {
    let (d, mem) = driver();
    let mut q = qp(&d, &mem, &ud_req(QpType::UD), |_, _| {}).unwrap();
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    }];
    let dest = Some(UdDest {
        ah_num: 1,
        ah_handle: 1,
        remote_qpn: 2,
        remote_qkey: 3,
    });
    let wr = |op, flags, ud| SendWr {
        wr_id: 1,
        op,
        sge: &sge,
        flags,
        ud,
    };
    for (w, want) in [
        (wr(SendOp::Send, SendFlags::empty(), dest), "unsignaled"),
        // libefa's order: an unsignaled request with another flag is refused as unsignaled.
        (wr(SendOp::Send, SendFlags::SOLICITED, dest), "unsignaled"),
        (
            wr(
                SendOp::Send,
                SendFlags::SIGNALED | SendFlags::SOLICITED,
                dest,
            ),
            "SOLICITED",
        ),
        (
            wr(
                SendOp::RdmaWrite {
                    remote_addr: 0,
                    rkey: 0,
                },
                SendFlags::SIGNALED,
                dest,
            ),
            "other than SEND",
        ),
        (
            wr(SendOp::Send, SendFlags::SIGNALED, None),
            "without a destination",
        ),
    ] {
        // SAFETY: nothing is dereferenced (refused before any copy; no device).
        let e = unsafe { q.post_send(kobj(), &[w]) }.unwrap_err();
        assert_eq!(e.posted(), 0);
        assert!(e.to_string().contains(want), "{e}");
    }
}

#[test]
fn a_completion_naming_nothing_stops_the_poll() {
    let (d, mem) = driver();
    let keys = std::cell::Cell::new(0u64);
    let mut c = cq(&d, &mem, |_, r| keys.set(r.q_mmap_key)).unwrap();
    let ring = mem.ptr(keys.get());
    // A send completion of QP 0x99 (none), phase 1, in sub-CQ 0's first slot.
    let cqe: [u8; 16] = [0, 0, 0, 0x03, 0x99, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    // SAFETY: the fake ring's first slot; the poller is not running.
    unsafe { std::ptr::copy_nonoverlapping(cqe.as_ptr(), ring, 16) };
    let mut wc = [WorkCompletion::default(); 2];
    assert_eq!(c.poll(&mut wc), 0);
    // A request id that is not outstanding, for a QP that exists.
    let _q = qp(&d, &mem, &ud_req(QpType::UD), |n, _| *n = 0x98).unwrap();
    let cqe: [u8; 16] = [0, 0, 0, 0x03, 0x98, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    // SAFETY: as above, the next slot.
    unsafe { std::ptr::copy_nonoverlapping(cqe.as_ptr(), ring.add(16), 16) };
    assert_eq!(c.poll(&mut wc), 0);
}

#[test]
fn arming_follows_libefa() {
    let (d, mem) = driver();
    let db_key = std::cell::Cell::new(0u64);
    let mut c = cq(&d, &mem, |_, r| db_key.set(r.db_mmap_key)).unwrap();
    let e = c.arm(kobj(), true).unwrap_err().to_string();
    assert!(e.contains("solicited"), "{e}");
    c.event_received();
    c.arm(kobj(), false).unwrap();
    // SAFETY: the fake doorbell page, offset 0x10.
    let v = unsafe { mem.ptr(db_key.get()).add(0x10).cast::<u32>().read() };
    assert_eq!(v, 0x8000_0000 | 1 << 29);
    let mut nodb = cq(&d, &mem, |_, r| r.comp_mask = 0).unwrap();
    let e = nodb.arm(kobj(), false).unwrap_err().to_string();
    assert!(e.contains("no doorbell"), "{e}");
}

/// SRD on the seam: the driver's own QP type is SRD with SEND (± immediate), and RDMA READ
/// only where the device reports EFA_QUERY_DEVICE_CAPS_RDMA_READ (libefa's
/// `efa_check_qp_attr`); an SRD QP refuses inline data over its limit and SGEs over its
/// count by name, the requests before them posted.
#[test]
fn srd_is_the_driver_type_and_refuses_over_its_limits() {
    use rverbs_uverbs::{OpKind, OpSet};
    let (d, mem) = driver();
    let t = d.driver_qp().expect("EFA has a driver QP type");
    assert_eq!(t.name, "SRD");
    assert_eq!(t.ops, OpSet::of(&[OpKind::Send, OpKind::SendWithImm]));
    let mut with_read = info();
    with_read.device_caps |= EFA_QUERY_DEVICE_CAPS_RDMA_READ;
    let dr = EfaDriver::new(with_read, mem.clone(), PAGE);
    assert_eq!(
        dr.driver_qp().unwrap().ops,
        OpSet::of(&[OpKind::Send, OpKind::SendWithImm, OpKind::RdmaRead])
    );
    // UD never takes READ, whatever the device has.
    assert!(!dr
        .send_caps()
        .for_type(QpType::UD)
        .contains(OpKind::RdmaRead));

    let mut q = qp(&d, &mem, &ud_req(QP_TYPE_DRIVER), |_, _| {}).unwrap();
    // The QP's inline limit is the kernel's echo (32 here), its SGE count the request's (1).
    let mut buf = [0u8; 64];
    let base = buf.as_mut_ptr() as u64;
    let at = |off: usize, length: u32| Sge {
        addr: base + off as u64,
        length,
        lkey: 1,
    };
    let (fits, over) = ([at(0, 32)], [at(0, 16), at(16, 17)]);
    let sges = [at(0, 8), at(8, 8)];
    let dest = Some(UdDest {
        ah_num: 1,
        ah_handle: 1,
        remote_qpn: 2,
        remote_qkey: 3,
    });
    let wr = |sge, flags| SendWr {
        wr_id: 7,
        op: SendOp::Send,
        sge,
        flags,
        ud: dest,
    };
    let inline = SendFlags::SIGNALED | SendFlags::INLINE;
    for (list, posted, want) in [
        (
            vec![wr(&fits[..], inline), wr(&over[..], inline)],
            1,
            "33 inline bytes, the QP takes at most 32",
        ),
        (
            vec![wr(&sges[..], SendFlags::SIGNALED)],
            0,
            "2 SGEs, the QP takes at most 1",
        ),
    ] {
        // SAFETY: the inline SGEs name `buf`, readable for the call; the others are refused
        // before anything reads them.
        let e = unsafe { q.post_send(kobj(), &list) }.unwrap_err();
        assert_eq!(e.posted(), posted, "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
}

/// RDMA READ's refusals at the provider, each by name and before anything is written: on a
/// UD QP and on an SRD QP of a device without the RDMA READ bit (not encoded there), into
/// more than one SGE (EFA's READ descriptor has one local buffer), inline (a READ has no
/// payload to copy), unsignaled; a READ the QP takes after them is written and rung.
#[test]
fn rdma_read_refusals_are_named() {
    let mem = Arc::new(FakeMem::default());
    let mut with_read = info();
    with_read.device_caps |= EFA_QUERY_DEVICE_CAPS_RDMA_READ;
    let dr = EfaDriver::new(with_read, mem.clone(), PAGE);
    let (d, mem0) = driver();
    let dest = Some(UdDest {
        ah_num: 1,
        ah_handle: 1,
        remote_qpn: 2,
        remote_qkey: 3,
    });
    let one = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    }];
    let two = [one[0], one[0]];
    let read = |sge, flags| SendWr {
        wr_id: 9,
        op: SendOp::RdmaRead {
            remote_addr: 0x2000,
            rkey: 5,
        },
        sge,
        flags,
        ud: dest,
    };
    let sig = SendFlags::SIGNALED;
    for (drv, m, ty, wr, want) in [
        (
            &dr,
            &mem,
            QpType::UD,
            read(&one[..], sig),
            "an operation other than SEND and SEND with immediate",
        ),
        (
            &d,
            &mem0,
            QP_TYPE_DRIVER,
            read(&one[..], sig),
            "without the device's RDMA READ",
        ),
        (
            &dr,
            &mem,
            QP_TYPE_DRIVER,
            read(&two[..], sig),
            "an RDMA READ into 2 SGEs, EFA takes at most 1",
        ),
        (
            &dr,
            &mem,
            QP_TYPE_DRIVER,
            read(&one[..], sig | SendFlags::INLINE),
            "an inline RDMA READ",
        ),
        (
            &dr,
            &mem,
            QP_TYPE_DRIVER,
            read(&one[..], SendFlags::empty()),
            "an unsignaled send",
        ),
    ] {
        let mut q = qp(drv, m, &ud_req(ty), |_, _| {}).unwrap();
        // SAFETY: refused before anything reads the SGEs.
        let e = unsafe { q.post_send(kobj(), &[wr]) }.unwrap_err();
        assert_eq!(e.posted(), 0, "{e}");
        assert!(e.to_string().contains(want), "{ty:?}: {e}");
        let ok = read(&one[..], sig);
        if ty == QP_TYPE_DRIVER && drv.reads() {
            // SAFETY: a READ's sink is never touched (no device).
            unsafe { q.post_send(kobj(), &[ok]) }.unwrap();
        }
    }
}
