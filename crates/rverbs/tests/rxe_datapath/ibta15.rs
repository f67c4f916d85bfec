//! The IBTA 1.5 operations ATOMIC_WRITE and FLUSH: on a kernel whose rxe has them (Linux 6.2
//! and later, the 6.12 guest) the value lands and the completions are right; where the device
//! does not report them (the 6.1 guest) every use is refused by name before anything reaches
//! the queue: no hang, no completion.

use super::*;
use rverbs::uverbs::{DeviceCapsEx, FlushLevel, FlushType, OpKind};

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn device_caps(s: &Side) -> DeviceCapsEx {
    DeviceCapsEx(
        s.ctx
            .query_device()
            .expect("query device")
            .device_cap_flags_ex,
    )
}

fn atomic_write(remote_addr: u64, rkey: u32, value: [u8; 8]) -> SendOp {
    SendOp::AtomicWrite {
        remote_addr,
        rkey,
        value,
    }
}

fn flush(remote_addr: u64, rkey: u32, len: u32, flush_type: FlushType) -> SendOp {
    SendOp::Flush {
        remote_addr,
        rkey,
        len,
        flush_type,
        level: FlushLevel::RANGE,
    }
}

/// ATOMIC_WRITE writes its 8 bytes at the peer (completion opcode ATOMIC_WRITE); FLUSH of a
/// region registered with FLUSH_GLOBAL completes (opcode FLUSH). Refused before posting: a
/// misaligned ATOMIC_WRITE, SGEs on either. On a kernel without them, everything is refused
/// by name (the QP does not accept them, a FLUSH_GLOBAL registration is refused).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn atomic_write_and_flush() {
    each_topo("atomic_write_and_flush", |t| {
        let path = common::rc_path(ALL_ACCESS | AccessFlags::FLUSH_GLOBAL);
        let (a, b) = rc_pair(
            t,
            &Opts {
                path,
                ..Opts::default()
            },
        );
        let caps = device_caps(&b.side);
        let k = kernel();
        let value = 0x1122_3344_5566_7788u64.to_ne_bytes();
        let (raddr, rkey) = (b.mr.addr() + 64, b.mr.rkey());
        if !caps.contains(DeviceCapsEx::ATOMIC_WRITE) {
            // rxe before 6.2: neither operation, and the QP says so.
            assert!(k.starts_with("6.1."), "no ATOMIC_WRITE on {k}: {caps:?}");
            assert!(!caps.intersects(DeviceCapsEx::FLUSH_GLOBAL));
            let ops = a.qp.send_ops();
            assert!(!ops.contains(OpKind::AtomicWrite) && !ops.contains(OpKind::Flush));
            for op in [
                atomic_write(raddr, rkey, value),
                flush(raddr, rkey, 8, FlushType::GLOBAL),
            ] {
                let e = post_send(&a.qp, &[wr(1, op, &[])]).unwrap_err();
                assert_eq!((e.posted(), e.kind()), (0, std::io::ErrorKind::Unsupported));
                let m = e.to_string();
                assert!(m.contains("is not supported by this kernel's rxe"), "{m}");
                assert!(m.contains(op.kind().name()), "{m}");
            }
            assert_quiet(&a.cq, "refused IBTA 1.5 operations");
            let e = Mr::register(
                &b.side.pd,
                PageBuf::new(4096).unwrap(),
                ALL_ACCESS | AccessFlags::FLUSH_GLOBAL,
            )
            .unwrap_err();
            assert_eq!(e.error().kind(), std::io::ErrorKind::Unsupported, "{e}");
            assert!(
                e.to_string()
                    .contains("FLUSH_GLOBAL is not supported by this kernel's rxe"),
                "{e}"
            );
            eprintln!("{k}: ATOMIC_WRITE and FLUSH refused by name");
            return;
        }
        assert!(caps.contains(DeviceCapsEx::FLUSH_GLOBAL), "{caps:?}");
        assert!(a.qp.send_ops().contains(OpKind::AtomicWrite));

        // ATOMIC_WRITE: the 8 bytes land; nothing around them changes.
        b.mr.fill(56..80, 0xee);
        send_ok(&a.qp, &[wr(1, atomic_write(raddr, rkey, value), &[])]);
        let c = poll1(&a.cq);
        assert_wc(&c, 1, WcOpcode::ATOMIC_WRITE);
        let m = b.mr.to_vec();
        assert_eq!(&m[64..72], &value);
        assert_eq!((&m[56..64], &m[72..80]), (&[0xee; 8][..], &[0xee; 8][..]));

        // Refused before posting: misaligned, SGEs.
        let l = [a.mr.sge(0..8)];
        for (op, sges, why) in [
            (
                atomic_write(raddr + 4, rkey, value),
                &[][..],
                "not 8-byte aligned",
            ),
            (atomic_write(raddr, rkey, value), &l[..], "takes no SGEs"),
            (
                flush(raddr, rkey, 8, FlushType::GLOBAL),
                &l[..],
                "takes no SGEs",
            ),
        ] {
            let e = post_send(&a.qp, &[wr(2, op, sges)]).unwrap_err();
            assert_eq!(e.posted(), 0);
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
            assert!(e.to_string().contains(why), "{e}");
        }
        assert_quiet(&a.cq, "refused ATOMIC_WRITE/FLUSH");

        // FLUSH to the global visibility point of a region registered for it.
        let fm = reg(&b.side.pd, 4096, ALL_ACCESS | AccessFlags::FLUSH_GLOBAL);
        send_ok(
            &a.qp,
            &[wr(
                3,
                flush(fm.addr(), fm.rkey(), 4096, FlushType::GLOBAL),
                &[],
            )],
        );
        assert_wc(&poll1(&a.cq), 3, WcOpcode::FLUSH);
        // FLUSH_PERSISTENT of ordinary memory: the kernel refuses the registration (EINVAL).
        let e = Mr::register(
            &b.side.pd,
            PageBuf::new(4096).unwrap(),
            ALL_ACCESS | AccessFlags::FLUSH_PERSISTENT,
        )
        .unwrap_err();
        assert_eq!(
            rverbs::uverbs::Error::errno_of(e.error()).map(|n| n.raw_os_error()),
            Some(22),
            "EINVAL: {e}"
        );
        // A FLUSH the region was not registered for (PERSISTENT on a GLOBAL region, over a
        // QP allowing only GLOBAL): an error completion, not a hang.
        let (a2, b2) = rc_pair(
            t,
            &Opts {
                path: RcPath {
                    access: path.access,
                    ..FAST_FAIL
                },
                ..Opts::default()
            },
        );
        let fm2 = reg(&b2.side.pd, 4096, ALL_ACCESS | AccessFlags::FLUSH_GLOBAL);
        send_ok(
            &a2.qp,
            &[wr(
                4,
                flush(fm2.addr(), fm2.rkey(), 4096, FlushType::PERSISTENT),
                &[],
            )],
        );
        let c = poll1(&a2.cq);
        assert_eq!(c.wr_id, 4);
        assert_eq!(c.status, WcStatus::REM_INV_REQ_ERR, "{k}: {c:?}");
        // Lying sizes: a FLUSH range past the end of the region is the responder's to refuse
        // (an error completion, not a hang); nothing is read or written locally.
        let (a3, b3) = rc_pair(
            t,
            &Opts {
                path: RcPath {
                    access: path.access,
                    ..FAST_FAIL
                },
                ..Opts::default()
            },
        );
        let fm3 = reg(&b3.side.pd, 4096, ALL_ACCESS | AccessFlags::FLUSH_GLOBAL);
        send_ok(
            &a3.qp,
            &[wr(
                5,
                flush(fm3.addr(), fm3.rkey(), u32::MAX, FlushType::GLOBAL),
                &[],
            )],
        );
        let c = poll1(&a3.cq);
        assert_eq!(c.wr_id, 5);
        assert_eq!(c.status, WcStatus::REM_INV_REQ_ERR, "{k}: {c:?}");
        drop(fm3);
        drop(fm2);
        drop(fm);
    });
}
