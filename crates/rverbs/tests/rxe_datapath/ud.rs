//! UD: datagrams through an AH, the GRH in the receive buffer, the Q_Key.

use super::*;
use rverbs::uverbs::{OpKind, OpSet, PostFault};

/// RESET → INIT → RTR → RTS for a UD QP with our qkey.
pub(super) fn ud_ready(qp: &Qp) {
    for a in [
        QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(QKEY),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTR),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::RTS),
            sq_psn: Some(0),
            ..Default::default()
        },
    ] {
        qp.modify(&a)
            .unwrap_or_else(|e| panic!("UD QP {:#x}: {e}", qp.qp_num()));
    }
}

/// A UD QP on each side of `t` (each with a CQ of 16), in RTS with our qkey, with room for
/// `depth` work requests each way.
struct UdPair {
    // Field order is drop order: QPs, then CQs, then the sides.
    qa: Arc<Qp>,
    qb: Arc<Qp>,
    ca: Arc<Cq>,
    cb: Arc<Cq>,
    sa: Side,
    sb: Side,
}

impl UdPair {
    fn new(t: &Topo, depth: u32) -> UdPair {
        let sa = Side::open(&t.dev_a);
        let sb = Side::open(&t.dev_b);
        let (ca, cb) = (cq(&sa, 16, None), cq(&sb, 16, None));
        let ud = |s: &Side, c: &Arc<Cq>| {
            qp(
                s,
                QpInit {
                    qp_type: QpType::UD,
                    ..QpInit::rc(c, caps(depth, depth, 1, 0))
                },
            )
        };
        let (qa, qb) = (ud(&sa, &ca), ud(&sb, &cb));
        ud_ready(&qa);
        ud_ready(&qb);
        UdPair {
            qa,
            qb,
            ca,
            cb,
            sa,
            sb,
        }
    }
}

/// UD through an AH to the peer's GID: the 40-byte GRH heads the receive buffer (rxe puts the
/// IPv4 header in its last 20 bytes), byte_len counts it, the completion has GRH and src_qp;
/// a datagram with the wrong qkey is dropped.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ud_send_recv_with_grh() {
    each_topo("ud_send_recv_with_grh", |t| {
        let UdPair {
            sa,
            sb,
            ca,
            cb,
            qa,
            qb,
        } = UdPair::new(t, 8);
        assert_eq!(qb.query().unwrap().qkey, QKEY);
        let ma = reg(&sa.pd, 4096, ALL_ACCESS);
        let mb = reg(&sb.pd, 8192, ALL_ACCESS);
        mb.fill(0..mb.len(), 0xee);
        let ah = Ah::create(&sa.pd, AhAttr::roce(1, sb.gid, sa.sgid))
            .unwrap_or_else(|e| panic!("create AH: {e}"));
        assert_ne!(ah.ah_num(), 0);

        let (m1, m2) = (pattern(12, 300), pattern(13, 200));
        ma.write_at(0, &m1);
        ma.write_at(512, &m2);
        let (r0, r1) = ([mb.sge(0..40 + 1024)], [mb.sge(4096..4096 + 40 + 1024)]);
        recv_ok(&qb, &[recv(1, &r0), recv(2, &r1)]);
        let (s1, s2) = ([ma.sge(0..300)], [ma.sge(512..712)]);
        send_ok(
            &qa,
            &[
                SendWr {
                    ud: Some(ah.ud_dest(qb.qp_num(), QKEY ^ 1)),
                    ..SendWr::send(10, &s1)
                },
                SendWr {
                    ud: Some(ah.ud_dest(qb.qp_num(), QKEY)),
                    ..SendWr::send(11, &s2)
                },
            ],
        );
        // UD has no ACK: both sends complete.
        let wc = poll_n(&ca, 2);
        assert_wc(&wc[0], 10, WcOpcode::SEND);
        assert_wc(&wc[1], 11, WcOpcode::SEND);
        let wc = poll1(&cb);
        assert_wc(&wc, 1, WcOpcode::RECV);
        assert_eq!(wc.byte_len, 40 + 200, "byte_len counts the GRH: {wc:?}");
        assert!(wc.wc_flags.contains(WcFlags::GRH), "{wc:?}");
        assert_eq!(wc.src_qp, qa.qp_num());
        assert_eq!(wc.qp_num, qb.qp_num());
        assert_quiet(&cb, "the datagram with the wrong qkey");
        let buf = mb.to_vec();
        assert_eq!(&buf[40..240], &m2[..]);
        assert_eq!(buf[240], 0xee);
        // RoCE v2 over IPv4: 20 zero bytes, then the IPv4 header.
        assert!(buf[..20].iter().all(|&x| x == 0), "{:?}", &buf[..20]);
        assert_eq!(buf[20], 0x45, "IPv4, 20-byte header");
        assert_eq!(buf[20 + 9], 17, "UDP");
        assert_eq!(&buf[32..36], &sa.ipv4(), "source address");
        assert_eq!(&buf[36..40], &sb.ipv4(), "destination address");

        // What UD cannot do is refused at post time.
        let e = post_send(&qa, &[SendWr::send(12, &s2)]).unwrap_err();
        assert_eq!(e.fault(), Some(PostFault::NoUdDest), "{e}");
        assert!(
            e.to_string()
                .contains("a UD send needs a destination (an AH)"),
            "{e}"
        );
        let op = SendOp::RdmaWrite {
            remote_addr: mb.addr(),
            rkey: mb.rkey(),
        };
        let e = post_send(
            &qa,
            &[SendWr {
                ud: Some(ah.ud_dest(qb.qp_num(), QKEY)),
                ..wr(13, op, &s2)
            }],
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
        assert_eq!(
            e.fault(),
            Some(PostFault::OpForTransport {
                op: OpKind::RdmaWrite,
                qp_type: QpType::UD
            }),
            "{e}"
        );
        assert_quiet(&ca, "refused UD WRs");
        // The requests before a refused one are posted (and complete); the refusal names the
        // device, the QP and the request.
        let dest = Some(ah.ud_dest(qb.qp_num(), QKEY));
        let e = post_send(
            &qa,
            &[
                SendWr {
                    ud: dest,
                    ..SendWr::send(14, &s2)
                },
                SendWr {
                    ud: dest,
                    ..wr(15, op, &s2)
                },
            ],
        )
        .unwrap_err();
        assert_eq!((e.index(), e.posted()), (Some(1), 1), "{e}");
        assert!(
            e.to_string().contains(&format!(
                "QP {:#x} on {}: work request #1: a UD QP does not support RDMA_WRITE",
                qa.qp_num(),
                t.dev_a
            )),
            "{e}"
        );
        assert_wc(&poll1(&ca), 14, WcOpcode::SEND);
        assert_quiet(&ca, "the refused RDMA WRITE");
        drop((qa, qb, ah));
    });
}

/// A reply to a datagram through the address vector its completion and GRH give
/// (`AhAttr::reply_to`, libibverbs' `ibv_init_ah_from_wc`): to the sender's GID, from our
/// GID the datagram was addressed to; the reply arrives at the sender.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ud_reply_through_the_address_of_a_received_datagram() {
    each_topo("ud_reply_through_the_address_of_a_received_datagram", |t| {
        let UdPair {
            sa,
            sb,
            ca,
            cb,
            qa,
            qb,
        } = UdPair::new(t, 4);
        let ma = reg(&sa.pd, 4096, ALL_ACCESS);
        let mb = reg(&sb.pd, 4096, ALL_ACCESS);
        let (ping, pong) = (pattern(21, 64), pattern(22, 96));
        ma.write_at(0, &ping);
        mb.write_at(0, &pong);
        let ah = Ah::create(&sa.pd, AhAttr::roce(1, sb.gid, sa.sgid)).unwrap();
        recv_ok(&qb, &[recv(1, &[mb.sge(1024..1024 + 40 + 512)])]);
        recv_ok(&qa, &[recv(2, &[ma.sge(1024..1024 + 40 + 512)])]);
        send_ok(
            &qa,
            &[SendWr {
                ud: Some(ah.ud_dest(qb.qp_num(), QKEY)),
                ..SendWr::send(10, &[ma.sge(0..64)])
            }],
        );
        assert_wc(&poll1(&ca), 10, WcOpcode::SEND);
        let wc = poll1(&cb);
        assert_wc(&wc, 1, WcOpcode::RECV);
        let mut grh = [0u8; rverbs::uverbs::ah::GRH_LEN];
        grh.copy_from_slice(&mb.to_vec()[1024..1024 + 40]);
        let attr = AhAttr::reply_to(&sb.ctx, 1, &wc, &grh)
            .unwrap_or_else(|e| panic!("reply address from {wc:?}: {e}"));
        let g = attr.grh.expect("RoCE: a global route");
        assert_eq!(g.dgid, sa.gid, "to the sender's GID");
        assert_eq!(
            g.sgid_index, sb.sgid,
            "from the GID the datagram was sent to"
        );
        assert_eq!(attr.port_num, 1);
        let back = Ah::create(&sb.pd, attr).unwrap_or_else(|e| panic!("AH {attr:?}: {e}"));
        send_ok(
            &qb,
            &[SendWr {
                ud: Some(back.ud_dest(wc.src_qp, QKEY)),
                ..SendWr::send(11, &[mb.sge(0..96)])
            }],
        );
        assert_wc(&poll1(&cb), 11, WcOpcode::SEND);
        let wc = poll1(&ca);
        assert_wc(&wc, 2, WcOpcode::RECV);
        assert_eq!(wc.src_qp, qb.qp_num());
        assert_eq!(wc.byte_len, 40 + 96);
        assert_eq!(&ma.to_vec()[1024 + 40..1024 + 40 + 96], &pong[..]);

        // A completion without a GRH gives an address without one, which a RoCE port
        // refuses to make an AH of.
        let no_grh = WorkCompletion {
            wc_flags: WcFlags::empty(),
            ..wc
        };
        let attr = AhAttr::reply_to(&sa.ctx, 1, &no_grh, &grh).unwrap();
        assert_eq!(attr.grh, None);
        assert!(Ah::create(&sa.pd, attr).is_err());
        // A header addressed to a GID we do not have is named.
        let mut stranger = grh;
        // rxe's area starts with 20 zero bytes, so the IPv4 header counts without its checksum.
        stranger[39] ^= 0x5a;
        let e = AhAttr::reply_to(&sb.ctx, 1, &wc_with_grh(&wc), &stranger).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
        assert!(
            e.to_string().contains("which is no RoCE v2 GID of port 1"),
            "{e}"
        );
        drop((qa, qb, ah, back));
    });
}

fn wc_with_grh(wc: &WorkCompletion) -> WorkCompletion {
    WorkCompletion {
        wc_flags: wc.wc_flags | WcFlags::GRH,
        ..*wc
    }
}

/// What each QP type takes on rxe (rverbs_uverbs::op: the transport's operations that rxe
/// encodes), read from QPs the kernel made; a UC QP refuses SEND_WITH_INV (the transport has
/// no invalidate opcodes) and LOCAL_INV (rxe runs it on RC only) before posting anything.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn send_ops_per_qp_type() {
    each_topo("send_ops_per_qp_type", |t| {
        let s = Side::open(&t.dev_a);
        let c = cq(&s, 8, None);
        let mk = |qp_type| {
            qp(
                &s,
                QpInit {
                    qp_type,
                    ..QpInit::rc(&c, caps(8, 8, 1, 0))
                },
            )
        };
        let (rc, uc, ud) = (mk(QpType::RC), mk(QpType::UC), mk(QpType::UD));
        // RC: every operation; FLUSH and ATOMIC_WRITE only where the device reports them
        // (rxe from Linux 6.2: not on the 6.1 kernel).
        let caps = rverbs::uverbs::DeviceCapsEx(s.ctx.query_device().unwrap().device_cap_flags_ex);
        let ibta15 = OpSet::of(&[OpKind::Flush, OpKind::AtomicWrite]);
        let want = if caps.contains(rverbs::uverbs::DeviceCapsEx::ATOMIC_WRITE) {
            OpSet::of(&OpKind::ALL)
        } else {
            OpSet::from_fn(|k| !ibta15.contains(k))
        };
        assert_eq!(rc.send_ops(), want, "{caps:?}");
        assert_eq!(
            uc.send_ops(),
            OpSet::of(&[
                OpKind::Send,
                OpKind::SendWithImm,
                OpKind::RdmaWrite,
                OpKind::RdmaWriteWithImm,
                OpKind::BindMw,
            ])
        );
        assert_eq!(
            ud.send_ops(),
            OpSet::of(&[OpKind::Send, OpKind::SendWithImm])
        );
        drop((rc, uc, ud, c));
    });
}
