//! The send flags and shapes of a post: signaled and unsignaled, FENCE, INLINE, gather and
//! scatter, many work requests in one post (one doorbell).

use super::*;

/// With sq_sig_all off, unsignaled WRs produce no completion; with it on, every WR does.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn signaled_and_unsignaled() {
    each_topo("signaled_and_unsignaled", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        assert!(!a.qp.query().unwrap().sq_sig_all);
        let r = sge_slots(&b.mr, 3, 64);
        let rw = recvs(30, &r);
        recv_ok(&b.qp, &rw);
        let s = [a.mr.sge(0..16)];
        let unsignaled = |id| SendWr {
            flags: SendFlags::empty(),
            ..SendWr::send(id, &s)
        };
        send_ok(&a.qp, &[unsignaled(1), unsignaled(2), SendWr::send(3, &s)]);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::SEND);
        assert_quiet(&a.cq, "unsignaled sends");
        let r = poll_n(&b.cq, 3);
        for (i, wc) in r.iter().enumerate() {
            assert_wc(wc, 30 + i as u64, WcOpcode::RECV);
        }

        let (a, b) = rc_pair(
            t,
            &Opts {
                sq_sig_all: true,
                ..Opts::default()
            },
        );
        assert!(a.qp.query().unwrap().sq_sig_all);
        let r = [b.mr.sge(0..64)];
        recv_ok(&b.qp, &[recv(1, &r), recv(2, &r)]);
        let s = [a.mr.sge(0..16)];
        let unsignaled = |id| SendWr {
            flags: SendFlags::empty(),
            ..SendWr::send(id, &s)
        };
        send_ok(&a.qp, &[unsignaled(1), unsignaled(2)]);
        let wc = poll_n(&a.cq, 2);
        assert_wc(&wc[0], 1, WcOpcode::SEND);
        assert_wc(&wc[1], 2, WcOpcode::SEND);
        poll_n(&b.cq, 2);
    });
}

/// FENCE: a SEND fenced behind an RDMA READ into the buffer it sends carries the read data,
/// and a fenced SEND does not leave while a READ is outstanding (an unfenced one does).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn fence_orders_send_after_read() {
    each_topo("fence_orders_send_after_read", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        const N: usize = 8192;
        let fresh = pattern(5, N);
        b.mr.write_at(0, &fresh);
        a.mr.fill(0..2 * N, 0xaa);
        let r0 = [b.mr.sge(2 * N..3 * N)];
        recv_ok(&b.qp, &[recv(1, &r0)]);
        let read = SendOp::RdmaRead {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        };
        // The READ lands in the very bytes the SEND after it sends.
        let l0 = [a.mr.sge(0..N)];
        send_ok(
            &a.qp,
            &[
                wr(10, read, &l0),
                SendWr {
                    flags: SendFlags::SIGNALED | SendFlags::FENCE,
                    ..SendWr::send(11, &l0)
                },
            ],
        );
        let wc = poll_n(&a.cq, 2);
        assert_wc(&wc[0], 10, WcOpcode::RDMA_READ);
        assert_wc(&wc[1], 11, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 1, WcOpcode::RECV);
        assert!(
            b.mr.to_vec()[2 * N..3 * N] == fresh[..],
            "the fenced SEND carried data from before the READ completed"
        );

        // rxe answers a READ within the doorbell call here (loopback and veth alike), so the
        // data above would be fresh even without FENCE. What shows the fence is the QP's next
        // PSN (query's sq_psn is rxe's req.psn) with a READ that stays outstanding because
        // the peer QP does not exist: the READ takes 2 PSNs (2048 bytes at MTU 1024), an
        // unfenced SEND goes out behind it (+1), a fenced one waits.
        for fence in [false, true] {
            let s = Side::open(&t.dev_a);
            let c = cq(&s, 8, None);
            let q = qp(&s, QpInit::rc(&c, caps(4, 1, 1, 0)));
            let slow = RcPath {
                timeout: 18, // ~1 s before the READ is retried
                ..NORMAL
            };
            rc_connect(&q, &s, 0x00ff_ff00, b.side.gid, slow);
            let m = reg(&s.pd, 4096, ALL_ACCESS);
            let (d, sg) = ([m.sge(0..2048)], [m.sge(2048..2056)]);
            let op = SendOp::RdmaRead {
                remote_addr: 0x1000,
                rkey: 0x1234,
            };
            let flags = if fence {
                SendFlags::SIGNALED | SendFlags::FENCE
            } else {
                SendFlags::SIGNALED
            };
            send_ok(
                &q,
                &[
                    wr(1, op, &d),
                    SendWr {
                        flags,
                        ..SendWr::send(2, &sg)
                    },
                ],
            );
            let sq_psn = || q.query().unwrap().sq_psn;
            let end = Instant::now() + WAIT;
            while sq_psn() < 0x102 {
                assert!(
                    Instant::now() < end,
                    "the READ never went out: {:#x}",
                    sq_psn()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(QUIET);
            let want = if fence { 0x102 } else { 0x103 };
            assert_eq!(sq_psn(), want, "fence {fence}: next PSN");
            q.modify(&QpAttr {
                qp_state: Some(QpState::ERR),
                ..Default::default()
            })
            .unwrap();
            let wc = poll_n(&c, 2);
            assert_status(&wc[0], 1, WcStatus::WR_FLUSH_ERR);
            assert_status(&wc[1], 2, WcStatus::WR_FLUSH_ERR);
            drop(q);
        }
    });
}

/// INLINE: data up to max_inline_data is copied at post time from unregistered memory;
/// one byte more is refused with a clear error and nothing of it is posted.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn inline_data() {
    each_topo("inline_data", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let m = a.qp.caps().max_inline_data as usize;
        assert!(m >= 64, "max_inline_data {m} < 64 asked");
        let want = pattern(6, m + 1);
        // Not registered: INLINE needs no lkey.
        let mut src = want.clone();
        let inline = |id, len: usize, src: &[u8]| {
            let sge = Sge {
                addr: src.as_ptr() as u64,
                length: len as u32,
                lkey: 0,
            };
            (id, sge)
        };
        let r = sge_slots(&b.mr, 3, 4096);
        let rw = recvs(0, &r);
        recv_ok(&b.qp, &rw);
        let (id, sge) = inline(1, m, &src);
        let sg = [sge];
        send_raw_ok(
            &a.qp,
            &[SendWr {
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..SendWr::send(id, &sg)
            }],
        );
        // Copied at post: changing the source now changes nothing.
        src.fill(0);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);
        let wc = poll1(&b.cq);
        assert_wc(&wc, 0, WcOpcode::RECV);
        assert_eq!(wc.byte_len as usize, m);
        assert_eq!(&b.mr.to_vec()[..m], &want[..m]);

        // [m bytes, m + 1 bytes]: the first goes, the second is refused.
        src.copy_from_slice(&want);
        let ok = [inline(2, m, &src).1];
        let big = [inline(3, m + 1, &src).1];
        let iw = |id, s| SendWr {
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ..SendWr::send(id, s)
        };
        let e = post_send_raw(&a.qp, &[iw(2, &ok), iw(3, &big)]).unwrap_err();
        assert_eq!(e.posted(), 1, "{e}");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        assert_eq!(
            e.fault(),
            Some(rverbs::uverbs::PostFault::InlineTooLong {
                len: m as u64 + 1,
                max_inline: m as u32
            }),
            "{e}"
        );
        let what = format!(
            "{} bytes of inline data, the QP's max_inline_data is {m}",
            m + 1
        );
        assert_eq!(e.to_string(), qp_post_msg(&a.qp, "post send", 1, &what, 1));
        assert_wc(&poll1(&a.cq), 2, WcOpcode::SEND);
        assert_quiet(&a.cq, "refused inline WR");
        let wc = poll1(&b.cq);
        assert_wc(&wc, 1, WcOpcode::RECV);
        assert_eq!(wc.byte_len as usize, m);

        // Inline RDMA WRITE; then the third receive is still there for the next SEND.
        let w = [inline(4, 16, &src).1];
        let op = SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 20000,
            rkey: b.mr.rkey(),
        };
        send_raw_ok(
            &a.qp,
            &[SendWr {
                op,
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..SendWr::send(4, &w)
            }],
        );
        assert_wc(&poll1(&a.cq), 4, WcOpcode::RDMA_WRITE);
        assert_eq!(&b.mr.to_vec()[20000..20016], &want[..16]);
        let s = [a.mr.sge(0..1)];
        send_ok(&a.qp, &[SendWr::send(5, &s)]);
        assert_wc(&poll1(&a.cq), 5, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 2, WcOpcode::RECV);

        // Inline data gathered from two unregistered buffers.
        let (x, y) = (*b"gather", *b" inline");
        let two = [
            Sge {
                addr: x.as_ptr() as u64,
                length: 6,
                lkey: 0,
            },
            Sge {
                addr: y.as_ptr() as u64,
                length: 7,
                lkey: 0,
            },
        ];
        let r4 = [b.mr.sge(30000..30100)];
        recv_ok(&b.qp, &[recv(3, &r4)]);
        send_raw_ok(&a.qp, &[iw(7, &two)]);
        assert_wc(&poll1(&a.cq), 7, WcOpcode::SEND);
        let wc = poll1(&b.cq);
        assert_wc(&wc, 3, WcOpcode::RECV);
        assert_eq!(
            &b.mr.to_vec()[30000..30000 + wc.byte_len as usize],
            b"gather inline"
        );

        // INLINE makes no sense for a READ: refused.
        let d = [a.mr.sge(0..8)];
        let op = SendOp::RdmaRead {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        };
        let e = post_send(
            &a.qp,
            &[SendWr {
                op,
                flags: SendFlags::SIGNALED | SendFlags::INLINE,
                ..SendWr::send(6, &d)
            }],
        )
        .unwrap_err();
        assert_eq!(e.posted(), 0);
        assert!(
            e.to_string()
                .contains("INLINE is not possible with RDMA_READ"),
            "{e}"
        );
        assert_quiet(&a.cq, "refused inline READ");
    });
}

/// Gather (3 SGEs over two MRs) into scatter (3 SGEs); RDMA WRITE gathering and RDMA READ
/// scattering; one SGE over max_send_sge is refused.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn gather_and_scatter() {
    each_topo("gather_and_scatter", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let a2 = reg(&a.side.pd, 4096, AccessFlags::LOCAL_WRITE);
        let (p1, p2, p3) = (pattern(7, 10), pattern(8, 1000), pattern(9, 7));
        a.mr.write_at(0, &p1);
        a.mr.write_at(100, &p2);
        a2.write_at(0, &p3);
        let all: Vec<u8> = [&p1[..], &p2[..], &p3[..]].concat();
        b.mr.fill(0..4000, 0xee);

        let gather = [a.mr.sge(0..10), a.mr.sge(100..1100), a2.sge(0..7)];
        let scatter = [b.mr.sge(0..3), b.mr.sge(500..504), b.mr.sge(2000..3010)];
        recv_ok(&b.qp, &[recv(1, &scatter)]);
        send_ok(&a.qp, &[SendWr::send(1, &gather)]);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::SEND);
        let wc = poll1(&b.cq);
        assert_wc(&wc, 1, WcOpcode::RECV);
        assert_eq!(wc.byte_len, 1017);
        let bm = b.mr.to_vec();
        assert_eq!(&bm[..3], &all[..3]);
        assert_eq!(&bm[500..504], &all[3..7]);
        assert_eq!(&bm[2000..3010], &all[7..]);
        for edge in [3, 499, 504, 1999, 3010] {
            assert_eq!(
                bm[edge], 0xee,
                "byte {edge} outside the scatter list was written"
            );
        }

        // RDMA WRITE from two SGEs, RDMA READ back into two SGEs.
        let g = [a.mr.sge(0..10), a2.sge(0..7)];
        let op = SendOp::RdmaWrite {
            remote_addr: b.mr.addr() + 10000,
            rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(2, op, &g)]);
        assert_wc(&poll1(&a.cq), 2, WcOpcode::RDMA_WRITE);
        let written: Vec<u8> = [&p1[..], &p3[..]].concat();
        assert_eq!(&b.mr.to_vec()[10000..10017], &written[..]);
        let s = [a.mr.sge(20000..20005), a.mr.sge(21000..21012)];
        let op = SendOp::RdmaRead {
            remote_addr: b.mr.addr() + 10000,
            rkey: b.mr.rkey(),
        };
        send_ok(&a.qp, &[wr(3, op, &s)]);
        let wc = poll1(&a.cq);
        assert_wc(&wc, 3, WcOpcode::RDMA_READ);
        assert_eq!(wc.byte_len, 17);
        assert_eq!(&a.mr.to_vec()[20000..20005], &written[..5]);
        assert_eq!(&a.mr.to_vec()[21000..21012], &written[5..]);

        // One SGE too many, for the send and the receive queue.
        let n = a.qp.caps().max_send_sge as usize + 1;
        let many: Vec<MrSge<'_>> = (0..n).map(|i| a.mr.sge(i..i + 1)).collect();
        let e = post_send(&a.qp, &[SendWr::send(4, &many)]).unwrap_err();
        assert_eq!(e.posted(), 0);
        let what = format!("{n} SGEs, the queue allows {}", n - 1);
        assert_eq!(e.to_string(), qp_post_msg(&a.qp, "post send", 0, &what, 0));
        let n = b.qp.caps().max_recv_sge as usize + 1;
        let many: Vec<MrSge<'_>> = (0..n).map(|i| b.mr.sge(i..i + 1)).collect();
        let e = post_recv(&b.qp, &[recv(5, &many)]).unwrap_err();
        assert_eq!(e.posted(), 0);
        let what = format!("{n} SGEs, the queue allows {}", n - 1);
        assert_eq!(
            e.to_string(),
            qp_post_msg(&b.qp, "post receive", 0, &what, 0)
        );
        assert_quiet(&a.cq, "refused WRs");
        drop(a);
        drop(a2);
    });
}

/// Write syscalls this thread has made (`/proc/thread-self/io`): the rxe send doorbell is one
/// write() on the command fd.
fn write_syscalls() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("read /proc/thread-self/io");
    io.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no syscw in /proc/thread-self/io: {io}"))
}

/// Eight WRs of every kind in one post call: one doorbell, completions in order. Receives
/// need no doorbell; a list that fails part-way rings once for the part posted, and one
/// that fails at its first WR not at all.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn many_wrs_one_doorbell() {
    each_topo("many_wrs_one_doorbell", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        let (rb, rkey) = (b.mr.addr(), b.mr.rkey());
        a.mr.write_at(0, &pattern(10, 4096));
        b.mr.write_at(8192, &5u64.to_ne_bytes());
        b.mr.write_at(8200, &9u64.to_ne_bytes());
        b.mr.write_at(12288, &pattern(11, 100));

        let r = sge_slots(&b.mr, 4, 1024);
        let rw = recvs(100, &r);
        let before = write_syscalls();
        recv_ok(&b.qp, &rw);
        assert_eq!(write_syscalls() - before, 0, "receives need no doorbell");

        let s = |r: std::ops::Range<usize>| [a.mr.sge(r)];
        let (s0, s1, s2, s3, s4, s5, s6, s7) = (
            s(0..100),
            s(100..200),
            s(200..300),
            s(20000..20100),
            s(20100..20108),
            s(300..400),
            s(400..500),
            s(20108..20116),
        );
        let wrs = [
            SendWr::send(0, &s0),
            wr(1, SendOp::SendWithImm { imm: 1 }, &s1),
            wr(
                2,
                SendOp::RdmaWrite {
                    remote_addr: rb + 16384,
                    rkey,
                },
                &s2,
            ),
            wr(
                3,
                SendOp::RdmaRead {
                    remote_addr: rb + 12288,
                    rkey,
                },
                &s3,
            ),
            wr(
                4,
                SendOp::AtomicFetchAdd {
                    remote_addr: rb + 8192,
                    rkey,
                    add: 2,
                },
                &s4,
            ),
            wr(
                5,
                SendOp::RdmaWriteWithImm {
                    remote_addr: rb + 16484,
                    rkey,
                    imm: 5,
                },
                &s5,
            ),
            SendWr::send(6, &s6),
            wr(
                7,
                SendOp::AtomicCmpSwp {
                    remote_addr: rb + 8200,
                    rkey,
                    compare: 9,
                    swap: 10,
                },
                &s7,
            ),
        ];
        let before = write_syscalls();
        send_ok(&a.qp, &wrs);
        assert_eq!(write_syscalls() - before, 1, "one doorbell for eight WRs");
        let wc = poll_n(&a.cq, 8);
        let ops = [
            WcOpcode::SEND,
            WcOpcode::SEND,
            WcOpcode::RDMA_WRITE,
            WcOpcode::RDMA_READ,
            WcOpcode::FETCH_ADD,
            WcOpcode::RDMA_WRITE,
            WcOpcode::SEND,
            WcOpcode::COMP_SWAP,
        ];
        for (i, (w, op)) in wc.iter().zip(ops).enumerate() {
            assert_wc(w, i as u64, op);
        }
        let r = poll_n(&b.cq, 4);
        assert_wc(&r[0], 100, WcOpcode::RECV);
        assert_wc(&r[1], 101, WcOpcode::RECV);
        assert_eq!(r[1].imm(), Some(1));
        assert_wc(&r[2], 102, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!(r[2].imm(), Some(5));
        assert_wc(&r[3], 103, WcOpcode::RECV);
        let am = a.mr.to_vec();
        let bm = b.mr.to_vec();
        assert_eq!(&bm[..100], &am[..100]);
        assert_eq!(&bm[1024..1124], &am[100..200]);
        assert_eq!(&bm[16384..16484], &am[200..300]);
        assert_eq!(&bm[16484..16584], &am[300..400]);
        assert_eq!(&bm[3072..3172], &am[400..500]);
        assert_eq!(&am[20000..20100], &pattern(11, 100)[..]);
        assert_eq!((u64_at(&am, 20100), u64_at(&bm, 8192)), (5, 7));
        assert_eq!((u64_at(&am, 20108), u64_at(&bm, 8200)), (9, 10));

        // Fails at the second WR: one doorbell for the first.
        let bad: Vec<MrSge<'_>> = (0..a.qp.caps().max_send_sge as usize + 1)
            .map(|i| a.mr.sge(i..i + 1))
            .collect();
        let rr = [b.mr.sge(4096..5120)];
        recv_ok(&b.qp, &[recv(104, &rr)]);
        let before = write_syscalls();
        let e = post_send(&a.qp, &[SendWr::send(8, &s0), SendWr::send(9, &bad)]).unwrap_err();
        assert_eq!(write_syscalls() - before, 1);
        assert_eq!(e.posted(), 1);
        assert_wc(&poll1(&a.cq), 8, WcOpcode::SEND);
        assert_wc(&poll1(&b.cq), 104, WcOpcode::RECV);
        // Fails at the first: no doorbell.
        let before = write_syscalls();
        let e = post_send(&a.qp, &[SendWr::send(10, &bad), SendWr::send(11, &s0)]).unwrap_err();
        assert_eq!(write_syscalls() - before, 0);
        assert_eq!(e.posted(), 0);
        assert_quiet(&a.cq, "nothing posted");
    });
}
