//! Shared receive queues.

use super::*;

/// Two QPs on one SRQ: each receives from it (the completion names the QP); posting to such
/// a QP is refused; the SRQ fills up with a clear error and wraps around five times.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn srq_shared_by_two_qps() {
    each_topo("srq_shared_by_two_qps", |t| {
        let sa = Side::open(&t.dev_a);
        let sb = Side::open(&t.dev_b);
        let srq = Srq::create(
            &sb.pd,
            SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap_or_else(|e| panic!("create SRQ: {e}"));
        // rxe sizes the ring to 2^n - 1 >= max_wr; the create response repeats the request,
        // query tells the ring's capacity.
        let cap = srq.query().unwrap().max_wr as usize;
        assert!(cap >= srq.attr().max_wr as usize);
        assert!((cap + 1).is_power_of_two(), "SRQ capacity {cap}");
        let (ca, cb) = (cq(&sa, 64, None), cq(&sb, 64, None));
        let on_srq = |c: &Arc<Cq>| QpInit {
            srq: Some(srq.clone()),
            ..QpInit::rc(c, caps(16, 0, 1, 0))
        };
        let a: Vec<Arc<Qp>> = (0..2)
            .map(|_| qp(&sa, QpInit::rc(&ca, caps(16, 1, 1, 0))))
            .collect();
        let b: Vec<Arc<Qp>> = (0..2).map(|_| qp(&sb, on_srq(&cb))).collect();
        for i in 0..2 {
            rc_connect(&a[i], &sa, b[i].qp_num(), sb.gid, NORMAL);
            rc_connect(&b[i], &sb, a[i].qp_num(), sa.gid, NORMAL);
        }
        let ma = reg(&sa.pd, 4096, ALL_ACCESS);
        let mb = reg(&sb.pd, 4096, ALL_ACCESS);
        const MSG: usize = 64;
        let r = sge_slots(&mb, cap + 1, MSG);

        let e = post_recv(&b[0], &[recv(0, &r[0])]).unwrap_err();
        assert_eq!(e.posted(), 0);
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        let what = "the QP uses an SRQ: post receives to the SRQ";
        assert_eq!(
            e.to_string(),
            qp_post_msg(&b[0], "post receive", 0, what, 0)
        );

        // Full: `cap` accepted, the next refused.
        let rw = recvs(0, &r);
        let e = post_srq(&srq, &rw).unwrap_err();
        assert_eq!(e.posted(), cap, "{e}");
        assert_eq!(errno(&e), Some(12), "ENOMEM: {e}");
        assert_eq!(
            e.to_string(),
            format!(
                "post receive to SRQ {:#x} on {}: work request #{cap}: queue full ({cap} requests \
                 outstanding) (ENOMEM); {cap} posted",
                srq.srq_num(),
                srq.pd().context().name()
            )
        );

        // Rounds of `cap` messages alternating between the two QPs; the SRQ holds `cap`
        // receives at the start of each round. Each message names its sender and number.
        let slots = cap + 1;
        let rounds = (5 * slots).div_ceil(cap) + 1;
        let mut seq = 0u64;
        for round in 0..rounds {
            if round > 0 {
                let rw = recvs(0, &r[..cap]);
                post_srq(&srq, &rw).unwrap_or_else(|e| panic!("post to SRQ: {e}"));
            }
            for i in 0..cap {
                ma.write_at(i * MSG, &(seq + i as u64).to_ne_bytes());
                ma.write_at(i * MSG + 8, &[(i % 2) as u8]);
            }
            let s = sge_slots(&ma, cap, MSG);
            for (i, sg) in s.iter().enumerate() {
                send_ok(&a[i % 2], &[SendWr::send(seq + i as u64, sg)]);
            }
            poll_n(&ca, cap);
            let rc = poll_n(&cb, cap);
            let mut got: Vec<u64> = rc
                .iter()
                .map(|w| {
                    assert_eq!((w.status, w.opcode), (WcStatus::SUCCESS, WcOpcode::RECV));
                    let buf = mb.read_vec(w.wr_id as usize * MSG..(w.wr_id as usize + 1) * MSG);
                    let from = buf[8] as usize;
                    assert_eq!(w.qp_num, b[from].qp_num(), "{w:?}");
                    u64_at(&buf, 0)
                })
                .collect();
            got.sort_unstable();
            let want: Vec<u64> = (seq..seq + cap as u64).collect();
            assert_eq!(got, want);
            seq += cap as u64;
        }
        eprintln!("  SRQ of {cap}: {seq} receives through it");
        assert_quiet(&cb, "after the last round");
    });
}
