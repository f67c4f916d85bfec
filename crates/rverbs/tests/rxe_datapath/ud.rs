//! UD: datagrams through an AH, the GRH in the receive buffer, the Q_Key.

use super::*;

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
        let sa = Side::open(&t.dev_a);
        let sb = Side::open(&t.dev_b);
        let (ca, cb) = (cq(&sa, 16, None), cq(&sb, 16, None));
        let ud = |s: &Side, c: &Arc<Cq>| {
            qp(
                s,
                QpInit {
                    qp_type: QpType::UD,
                    ..QpInit::rc(c, caps(8, 8, 1, 0))
                },
            )
        };
        let (qa, qb) = (ud(&sa, &ca), ud(&sb, &cb));
        ud_ready(&qa);
        ud_ready(&qb);
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
        assert!(
            e.to_string().contains("UD send without a destination"),
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
        assert_quiet(&ca, "refused UD WRs");
        drop((qa, qb, ah));
    });
}
