//! rverbs on soft-iWARP (siw): the siw provider under the verbs objects and the rdma_cm, in a
//! guest with siw devices. Ignored everywhere but the siw stage (`cargo xtask test --stage
//! siw`, which runs this binary with `--include-ignored`); run elsewhere they fail, never
//! pass silently.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{addrinfo, listener};
use rverbs_cm::{create_ep, ConnParam};
use rverbs_cm::{Endpoint, EndpointAttr};
use rverbs_uverbs::cq::{Cq, CqOptions};
use rverbs_uverbs::device::Transport;
use rverbs_uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs_uverbs::pd::Pd;
use rverbs_uverbs::qp::{Qp, QpAttr, QpCaps, QpInit, QpState, QpType};
use rverbs_uverbs::{OpKind, PostFault, SendFlags, SendOp, SendWr, WcOpcode, WcStatus};

/// The guest's siw device, after checking that this is a siw guest.
fn siw_dev() -> String {
    assert_eq!(
        std::env::var("RVERBS_PROVIDER").as_deref(),
        Ok("siw"),
        "these tests need a guest with siw devices (rverbs-vm --provider siw)"
    );
    std::env::var("RVERBS_DEV_A").expect("RVERBS_DEV_A")
}

fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        sq_sig_all: true,
    }
}

fn caps() -> QpCaps {
    attr().caps
}

/// Opening, every object siw maps (CQ ring and notify word, SQ, RQ, SRQ), a registration
/// (siw's driver data), and the device saying iWARP.
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn siw_opens_with_its_provider_and_maps_its_rings() {
    let dev = siw_dev();
    let ctx = rverbs_provider::open_by_name(&dev).unwrap();
    assert_eq!(ctx.driver().unwrap().name(), "siw");
    assert_eq!(ctx.device().transport(), Transport::IWARP);
    let pd = Pd::alloc(&ctx).unwrap();
    let mr = Mr::register(
        &pd,
        PageBuf::new(4096).unwrap(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    )
    .unwrap();
    assert_ne!(mr.lkey(), 0);
    let ch = rverbs_uverbs::channel::CompChannel::create(&ctx).unwrap();
    let cq = Cq::create(
        &ctx,
        10,
        CqOptions {
            channel: Some(ch.clone()),
            comp_vector: 0,
        },
    )
    .unwrap();
    assert!(cq.cqe() >= 10);
    cq.req_notify(false).unwrap();
    let srq = rverbs_uverbs::srq::Srq::create(
        &pd,
        rverbs_uverbs::srq::SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        },
    )
    .unwrap();
    srq.post_recv(&[rverbs_uverbs::RecvWr::new(1, &[mr.sge(0..64)][..])])
        .unwrap();
    let qp = Qp::create(&pd, QpInit::rc(&cq, caps())).unwrap();
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
    drop((srq_qp, qp, srq, cq, ch, mr, pd));
}

/// Every ring page offset a context hands out is mapped, 0x90000 included (page 144, which is
/// also `SIW_INVAL_UOBJ_KEY`: rdma-core's libsiw refuses it, and so did we, so pyverbs'
/// random-sized `test_query_rc_qp` failed with EINVAL whenever a ring landed there): 100 QPs
/// of one-page rings, all alive on one context, cover pages 1 to 200. Then the queue sizes at
/// siw's boundaries (1, a page of elements and one more, `max_qp_wr / 8` and `max_qp_wr`
/// WRs; 1 and `max_sge` SGEs; no and the most inline data; no receive queue), each granted
/// at least what was asked.
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn siw_maps_rings_at_every_offset_and_boundary_size() {
    let dev = siw_dev();
    let ctx = rverbs_provider::open_by_name(&dev).unwrap();
    let a = ctx.query_device().unwrap();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 8, CqOptions::default()).unwrap();
    let one = QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut held = Vec::new();
    for i in 0..100 {
        let q = Qp::create(&pd, QpInit::rc(&cq, one))
            .unwrap_or_else(|e| panic!("QP {i} of one-page rings on one context: {e}"));
        held.push(q);
    }
    drop(held);
    let (max_wr, max_sge) = (a.max_qp_wr, a.max_sge);
    // Rings are a power of two of elements: 32 SQEs (120 bytes) or RQEs (112) fit a page, 33
    // are rounded up to 64, two pages.
    let wrs = [1, 2, 31, 32, 33, max_wr / 8, max_wr];
    let mut asked = Vec::new();
    for &w in &wrs {
        asked.push(QpCaps {
            max_send_wr: w,
            ..one
        });
        asked.push(QpCaps {
            max_recv_wr: w,
            ..one
        });
    }
    for sge in [1, 2, max_sge / 2, max_sge] {
        asked.push(QpCaps {
            max_send_sge: sge,
            max_recv_sge: sge,
            ..one
        });
    }
    for inline in [0, 1, 64, 80] {
        asked.push(QpCaps {
            max_inline_data: inline,
            ..one
        });
    }
    asked.push(QpCaps {
        max_recv_wr: 0,
        max_recv_sge: 0,
        ..one
    });
    for c in asked {
        let q = Qp::create(&pd, QpInit::rc(&cq, c))
            .unwrap_or_else(|e| panic!("create with {c:?} on {dev}: {e}"));
        let g = q.caps();
        assert!(
            g.max_send_wr >= c.max_send_wr
                && g.max_recv_wr >= c.max_recv_wr
                && g.max_send_sge >= c.max_send_sge
                && g.max_recv_sge >= c.max_recv_sge
                && g.max_inline_data >= c.max_inline_data,
            "asked {c:?}, granted {g:?}"
        );
    }
}

/// What iWARP does not allow, each refused with an error naming the device, the QP and the
/// rule: UD and UC QPs, an RC QP connected by hand.
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn siw_refuses_ud_uc_and_rc_by_hand() {
    let dev = siw_dev();
    let ctx = rverbs_provider::open_by_name(&dev).unwrap();
    let pd = Pd::alloc(&ctx).unwrap();
    let cq = Cq::create(&ctx, 8, CqOptions::default()).unwrap();
    for t in [QpType::UD, QpType::UC] {
        let e = Qp::create(
            &pd,
            QpInit {
                qp_type: t,
                ..QpInit::rc(&cq, caps())
            },
        )
        .unwrap_err();
        let s = e.to_string();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{s}");
        assert!(s.contains(&format!("create {t} QP on {dev}")), "{s}");
        assert!(s.contains("iWARP, which has only RC QPs"), "{s}");
    }
    // RC by hand, as rverbs::rc would: INIT is fine, RTR with a destination is refused.
    let qp = Qp::create(&pd, QpInit::rc(&cq, caps())).unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::INIT),
        pkey_index: Some(0),
        port_num: Some(1),
        access_flags: Some(AccessFlags::REMOTE_WRITE),
        ..Default::default()
    })
    .unwrap();
    let e = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::RTR),
            dest_qp_num: Some(qp.qp_num()),
            rq_psn: Some(0),
            path_mtu: Some(rverbs_uverbs::port::Mtu::MTU_1024),
            ..Default::default()
        })
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains(&dev) && s.contains(&format!("{:#x}", qp.qp_num())),
        "{s}"
    );
    assert!(s.contains("connected only through the rdma_cm"), "{s}");
    // A bare move to RTS: the kernel refuses (no connection), and the error says why.
    let e = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::RTS),
            ..Default::default()
        })
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("reaches RTS only when the rdma_cm connects it"),
        "{s}"
    );
    // Sends before any connection: refused before the ring (nothing left queued).
    let buf = Mr::register(&pd, vec![0u8; 64], AccessFlags::LOCAL_WRITE).unwrap();
    let e = qp
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sge: &[buf.sge(0..8)],
            flags: SendFlags::empty(),
            ud: None,
        }])
        .unwrap_err();
    assert!(e.to_string().contains("sends need RTS"), "{e}");
}

/// rdma_cm over siw: create_ep, Endpoint, SEND/RECV, RDMA READ and WRITE with
/// get_send_comp/get_recv_comp; then what iWARP refuses on a connected QP (a READ into a sink
/// without remote write, atomics, immediate data, inline over 64 here and over siw's 80, a
/// READ into two SGEs).
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn siw_endpoint_send_recv_read_write_and_refusals() {
    let dev = siw_dev();
    let port = 7711;
    let lis = listener(port);
    let step = Arc::new(Barrier::new(2));
    let s2 = step.clone();
    let server = thread::spawn(move || {
        let req = lis.get_request().unwrap();
        let ep = Endpoint::create(req, &attr()).unwrap();
        let buf = Mr::register(
            ep.pd(),
            PageBuf::new(4096).unwrap(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        buf.write_at(100, b"server!!");
        ep.post_recv(11, &[buf.sge(0..64)]).unwrap();
        let mut pd = Vec::new();
        pd.extend_from_slice(&buf.addr().to_le_bytes());
        pd.extend_from_slice(&buf.rkey().to_le_bytes());
        ep.accept(&ConnParam {
            private_data: pd,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(ep.cached_qp_state(), QpState::RTS);
        let wc = ep.get_recv_comp().unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len, wc.opcode),
            (11, WcStatus::SUCCESS, 5, WcOpcode::RECV)
        );
        assert_eq!(&buf.to_vec()[..5], b"hello");
        ep.post_recv(12, &[buf.sge(0..64)]).unwrap();
        s2.wait();
        let wc = ep.get_recv_comp().unwrap();
        assert_eq!((wc.wr_id, wc.status), (12, WcStatus::SUCCESS));
        assert_eq!(&buf.to_vec()[200..208], b"written!");
        // A send from the server, the other way.
        ep.post_send_inline(13, b"pong", SendFlags::empty())
            .unwrap();
        assert_eq!(ep.get_send_comp().unwrap().wr_id, 13);
        let ev = ep.id().get_event(Some(Duration::from_secs(10))).unwrap();
        assert!(ev.is_some(), "no DISCONNECTED within 10 s");
    });
    let ep = Endpoint::create(create_ep(&addrinfo(port, false)[0]).unwrap(), &attr()).unwrap();
    let mr = ep.reg_msgs(PageBuf::new(4096).unwrap()).unwrap();
    ep.connect(&ConnParam::default()).unwrap();
    assert_eq!(ep.cached_qp_state(), QpState::RTS);
    let ev = ep.id().take_event().expect("ESTABLISHED kept");
    let pdata = ev.private_data();
    let raddr = u64::from_le_bytes(pdata[0..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(pdata[8..12].try_into().unwrap());
    ep.post_recv(31, &[mr.sge(1024..1088)]).unwrap();

    ep.post_send_inline(21, b"hello", SendFlags::empty())
        .unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (21, WcStatus::SUCCESS, WcOpcode::SEND)
    );
    // RDMA READ of the server's bytes 100..108 into a sink registered for local write only
    // (reg_msgs): refused before the ring, naming device, QP, key and iWARP's rule; nothing
    // posted (the sink's bytes stay as they were).
    let qpn = format!("{:#x}", ep.qp().qp_num());
    let read = SendOp::RdmaRead {
        remote_addr: raddr + 100,
        rkey,
    };
    let e = ep
        .qp()
        .post_send(&[SendWr {
            wr_id: 22,
            op: read,
            sge: &[mr.sge(0..8)],
            flags: SendFlags::empty(),
            ud: None,
        }])
        .unwrap_err();
    assert_eq!(
        e.fault(),
        Some(PostFault::ReadSinkNotRemoteWrite { lkey: mr.lkey() })
    );
    assert_eq!(e.posted(), 0);
    let e = ep
        .post_read(22, &[mr.sge(0..8)], raddr + 100, rkey, SendFlags::empty())
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    let s = e.to_string();
    assert!(s.contains(&dev) && s.contains(&qpn), "{s}");
    assert!(
        s.contains(&format!(
            "RDMA_READ into lkey {:#x}, a region registered without REMOTE_WRITE",
            mr.lkey()
        )) && s.contains("the sink must be registered with REMOTE_WRITE"),
        "{s}"
    );
    // The same through the raw path (what the C drop-in's ibv_post_send takes): refused too.
    let raw_sink = [mr.sge(0..8).raw()];
    // SAFETY: the SGE lies in `mr`, alive until the end of the test; nothing is posted.
    let e = unsafe {
        ep.qp().post_send_raw(&[SendWr {
            wr_id: 22,
            op: read,
            sge: &raw_sink,
            flags: SendFlags::empty(),
            ud: None,
        }])
    }
    .unwrap_err();
    assert_eq!(
        e.fault(),
        Some(PostFault::ReadSinkNotRemoteWrite { lkey: mr.lkey() })
    );
    // Into a sink registered with REMOTE_WRITE: read.
    let sink = ep.reg_write(PageBuf::new(4096).unwrap()).unwrap();
    ep.post_read(22, &[sink.sge(0..8)], raddr + 100, rkey, SendFlags::empty())
        .unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (22, WcStatus::SUCCESS, WcOpcode::RDMA_READ),
        "{wc:?}"
    );
    assert_eq!(&sink.to_vec()[..8], b"server!!");
    assert_eq!(&mr.to_vec()[..8], [0u8; 8]);
    // Dropping another region leaves this one's record alone.
    drop(sink);
    let e = ep
        .post_read(22, &[mr.sge(0..8)], raddr + 100, rkey, SendFlags::empty())
        .unwrap_err();
    assert!(e.to_string().contains("without REMOTE_WRITE"), "{e}");
    // RDMA WRITE into the server's bytes 200..208, then a send to say so.
    mr.write_at(8, b"written!");
    ep.post_write(23, &[mr.sge(8..16)], raddr + 200, rkey, SendFlags::empty())
        .unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (23, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE)
    );
    step.wait();
    ep.post_send(24, &[mr.sge(16..20)], SendFlags::empty())
        .unwrap();
    assert_eq!(ep.get_send_comp().unwrap().wr_id, 24);
    let wc = ep.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (31, 4));
    assert_eq!(&mr.to_vec()[1024..1028], b"pong");

    // What iWARP refuses on the connected QP: named device, QP, request and rule.
    let qp = ep.qp();
    let one = [mr.sge(0..8)];
    for (op, kind) in [
        (
            SendOp::AtomicFetchAdd {
                remote_addr: raddr,
                rkey,
                add: 1,
            },
            OpKind::AtomicFetchAdd,
        ),
        (
            SendOp::AtomicCmpSwp {
                remote_addr: raddr,
                rkey,
                compare: 0,
                swap: 1,
            },
            OpKind::AtomicCmpSwp,
        ),
        (SendOp::SendWithImm { imm: 7 }, OpKind::SendWithImm),
    ] {
        let e = qp
            .post_send(&[SendWr {
                wr_id: 40,
                op,
                sge: &one,
                flags: SendFlags::empty(),
                ud: None,
            }])
            .unwrap_err();
        assert_eq!(
            e.fault(),
            Some(PostFault::OpNotEncoded {
                op: kind,
                qp_type: QpType::RC,
                provider: "siw"
            })
        );
        let s = e.to_string();
        assert!(s.contains(&dev) && s.contains(&qpn), "{s}");
        assert!(s.contains(&format!("siw does not support {kind}")), "{s}");
    }
    let big = [0u8; 81];
    let e = ep
        .post_send_inline(41, &big, SendFlags::empty())
        .unwrap_err();
    assert!(e.to_string().contains("max_inline_data is 64"), "{e}");
    let e = ep
        .post_send_inline(41, &big[..65], SendFlags::empty())
        .unwrap_err();
    assert!(e.to_string().contains(&dev), "{e}");
    let big_mr = Mr::register(ep.pd(), vec![0u8; 128], AccessFlags::LOCAL_WRITE).unwrap();
    let e = qp
        .post_send(&[SendWr {
            wr_id: 42,
            op: SendOp::Send,
            sge: &[big_mr.sge(0..81)],
            flags: SendFlags::INLINE,
            ud: None,
        }])
        .unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("81 bytes of inline data, the QP's max_inline_data is 64"),
        "{s}"
    );
    assert!(s.contains(&dev) && s.contains(&qpn), "{s}");
    let wmr = ep.reg_write(vec![0u8; 64]).unwrap();
    let e = ep
        .post_read(
            43,
            &[wmr.sge(0..4), wmr.sge(4..8)],
            raddr,
            rkey,
            SendFlags::empty(),
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("RDMA_READ with 2 sink SGEs: siw (iWARP) reads into exactly one"),
        "{e}"
    );
    // Nothing of the refused requests went out: the next send completes as the next one.
    ep.post_send_inline(44, b"last", SendFlags::empty())
        .unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (44, WcStatus::SUCCESS));
    ep.disconnect().unwrap();
    server.join().unwrap();
}
