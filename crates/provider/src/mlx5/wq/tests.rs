//! Sizing, buffers, lying sizes, INLINE posts racing `Mr::write_at` (also under Miri) and the
//! encoder's refusal of operations mlx5 does not encode.

#![allow(unsafe_code)]

use super::*;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};

use rverbs_uverbs::driver::{KernelObj, QpOps};
use rverbs_uverbs::kernel::shared::copy_to_shared;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::{SendFlags, SendOp, SendWr, Sge};
use std::os::fd::AsFd;

const LIM: WqLimits = WqLimits {
    max_sq_desc_sz: 512,
    max_rq_desc_sz: 512,
    max_send_wqebb: 1 << 15,
    max_recv_wr: 1 << 15,
    max_srq_recv_wr: 1 << 15,
};

fn caps(send: u32, recv: u32, ssge: u32, rsge: u32, inl: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: ssge,
        max_recv_sge: rsge,
        max_inline_data: inl,
    }
}

/// Issue 21, finding 1: a sizing whose free list is longer than its ring (250 links of
/// 64 bytes in a 64-byte ring) is refused before anything is written.
#[test]
fn srq_buf_refuses_a_lying_sizing() {
    let lie = SrqSizing {
        max: 1,
        wqe_shift: 6,
        max_gs: 0,
        max_wr: 250,
    };
    let e = SrqBuf::new(lie).err().expect("refused");
    assert!(e.to_string().contains("allocate mlx5 SRQ buffer"), "{e}");
    assert!(e.to_string().contains("max 1 "), "{e}");
    // The free list past the ring, scatter lists past the WQE, WQEs the u16 links cannot
    // address: each refused with what is wrong.
    let ok = srq_sizing(&LIM, 10, 2).unwrap();
    for (lie, what) in [
        (SrqSizing { max_wr: 16, ..ok }, "max_wr 16"),
        (SrqSizing { max_gs: 4, ..ok }, "max_gs 4"),
        (
            SrqSizing {
                wqe_shift: 40,
                ..ok
            },
            "2^40",
        ),
        (SrqSizing { max: 12, ..ok }, "max 12 "),
        (
            SrqSizing {
                max: 1 << 17,
                max_wr: (1 << 17) - 1,
                ..ok
            },
            "max 131072",
        ),
    ] {
        let e = SrqBuf::new(lie).err().expect("refused");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    SrqBuf::new(ok).unwrap();
    let e = srq_sizing(&SrqLimitsHuge::LIM, 1 << 16, 1).unwrap_err();
    assert!(e.to_string().contains("65536 the free list"), "{e}");
}

struct SrqLimitsHuge;
impl SrqLimitsHuge {
    const LIM: WqLimits = WqLimits {
        max_srq_recv_wr: 1 << 20,
        ..LIM
    };
}

/// Finding 1's QP shape: an SQ offset past the buffer, queue sizes that are not powers of
/// two (the slot tables are indexed by a mask), more SGEs or inline bytes than the
/// WQEs hold — refused by `QpBuf::new` or by the check `Mlx5Qp::new` runs.
#[test]
fn qp_buf_refuses_a_lying_sizing() {
    let ok = qp_sizing(&LIM, QpType::RC, &caps(16, 10, 1, 3, 0), false).unwrap();
    ok.check_for(QpType::RC).unwrap();
    for (lie, what) in [
        (
            QpSizing {
                sq_offset: 1 << 20,
                ..ok
            },
            "send queue at 1048576",
        ),
        (QpSizing { buf_size: 64, ..ok }, "buffer of 64 bytes"),
        (
            QpSizing {
                sq_wqe_cnt: 48,
                ..ok
            },
            "48 (send blocks)",
        ),
        (
            QpSizing {
                rq_wqe_cnt: 3,
                ..ok
            },
            "3 (receive WQEs)",
        ),
        (QpSizing { rq_max_gs: 5, ..ok }, "rq_max_gs 5"),
        (
            QpSizing {
                rq_wqe_shift: 70,
                ..ok
            },
            "2^70",
        ),
        (
            QpSizing {
                sq_max_post: 65,
                ..ok
            },
            "sq_max_post 65",
        ),
    ] {
        let e = QpBuf::new(lie).err().expect("refused");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }
    // Layout right, WQEs too small for the SGEs or inline bytes claimed.
    for lie in [
        QpSizing {
            sq_max_gs: 100,
            ..ok
        },
        QpSizing {
            max_inline: 4000,
            ..ok
        },
    ] {
        QpBuf::new(lie).unwrap();
        let e = lie.check_for(QpType::RC).unwrap_err();
        assert!(e.contains("exceed the 64-block send queue"), "{e}");
    }
}

fn shared(qpn: u32) -> Arc<QpShared> {
    Arc::new(QpShared {
        qpn,
        sq_mask: 0,
        sq: Box::new([SqSlot::default()]),
        sq_tail: AtomicU32::new(0),
        rq_mask: 0,
        rq_wrid: Box::new([AtomicU64::new(0)]),
        rq_tail: AtomicU32::new(0),
        srq: None,
        uidx: None,
    })
}

/// A QP is dropped after the kernel destroyed it; a QP created in between may have been
/// given the same number. Dropping the old one leaves the new one's entry (its
/// completions must still find their work requests).
#[test]
fn registry_keeps_the_entry_of_a_reused_qp_number() {
    let reg = Registry::default();
    let (old, new) = (shared(0x42), shared(0x42));
    reg.insert_qp(old.clone());
    reg.insert_qp(new.clone());
    reg.remove_qp(&old);
    assert!(Arc::ptr_eq(&reg.qp(0x42).expect("new QP's entry"), &new));
    reg.remove_qp(&new);
    assert!(reg.qp(0x42).is_none());
    // SRQ numbers alike.
    let srq = |n| {
        let buf = SrqBuf::new(srq_sizing(&LIM, 3, 1).unwrap()).unwrap();
        Arc::new(SrqShared {
            srqn: n,
            inner: Mutex::new(SrqList {
                buf: buf.region.ptr(),
                _region: buf.region,
                shift: 5,
                head: 0,
                tail: 3,
                wrid: Box::new([0; 4]),
            }),
        })
    };
    let (old, new) = (srq(7), srq(7));
    reg.insert_srq(old.clone());
    reg.insert_srq(new.clone());
    reg.remove_srq(&old);
    assert!(Arc::ptr_eq(&reg.srq(7).expect("new SRQ's entry"), &new));
    reg.remove_srq(&new);
    assert!(reg.srq(7).is_none());
}

/// Every geometry `qp_sizing` gives passes the checks `QpBuf::new` and `Mlx5Qp::new` run;
/// no SGEs and no inline data (`wqe_size - overhead - 4` underflowed when the overhead is
/// whole blocks: UD's 64 bytes, RC's 192) gives a send queue with no inline room.
#[test]
fn qp_sizing_output_passes_the_checks() {
    for t in [QpType::RC, QpType::UC, QpType::UD] {
        for send in [0, 1, 3, 64] {
            for ssge in [0, 1, 5] {
                for inl in [0, 1, 60, 200] {
                    for (recv, rsge, srq) in [(0, 0, false), (7, 0, false), (9, 4, true)] {
                        let c = caps(send, recv, ssge, rsge, inl);
                        let s = qp_sizing(&LIM, t, &c, srq).unwrap();
                        s.check_for(t).unwrap_or_else(|e| panic!("{t} {c:?}: {e}"));
                        assert!(send == 0 || s.max_inline >= inl, "{t} {c:?}");
                    }
                }
            }
        }
    }
    let s = qp_sizing(&LIM, QpType::UD, &caps(4, 0, 0, 0, 0), false).unwrap();
    assert_eq!((s.max_inline, s.sq_wqe_cnt, s.sq_max_post), (0, 4, 4));
    // RC's 192 bytes of overhead are three whole blocks too.
    let s = qp_sizing(&LIM, QpType::RC, &caps(4, 0, 0, 0, 0), false).unwrap();
    assert_eq!((s.max_inline, s.sq_wqe_cnt), (0, 16));
    let s = qp_sizing(&LIM, QpType::RC, &caps(4, 0, 1, 0, 0), false).unwrap();
    assert_eq!(s.max_inline, 256 - 192 - 4);
}

/// Issue 21, finding 3 on mlx5: an INLINE post on a QP in ordinary memory copies the
/// SGE's bytes into the SQ while another thread writes the same memory as `Mr::write_at`
/// does (`shared::copy_to_shared`, other call edges). The post copies with the same
/// 1-byte atomics, so Miri finds no race; the bytes land as old or new values.
#[test]
fn inline_post_races_write_at() {
    let lim = WqLimits {
        max_sq_desc_sz: 512,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
    };
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: 64,
    };
    let sz = qp_sizing(&lim, QpType::RC, &caps, false).unwrap();
    let buf = QpBuf::new(sz).unwrap();
    let sq = buf.buf_ptr().expose_provenance() + sz.sq_offset as usize;
    // One UAR page of ordinary memory: doorbell and BlueFlame register 1.
    let mut uar = vec![0u64; 512];
    // SAFETY: `uar` outlives the QP (dropped after it) and is not referenced meanwhile.
    let bf = unsafe { BfReg::new(uar.as_mut_ptr().cast(), 4096, 1, 512) }.unwrap();
    let mut qp = Mlx5Qp::new(
        buf,
        QpParts {
            qpn: 9,
            qp_type: QpType::RC,
            sq_sig_all: false,
            bf: Arc::new(bf),
            policy: BfPolicy::default(),
            ahs: Arc::new(AhTable::default()),
            reg: Arc::new(Registry::default()),
            srq: None,
            lease: None,
            uidx: None,
        },
    )
    .unwrap();
    // Word-aligned "registered memory", reached only through rverbs_uverbs::kernel::shared.
    let mut mem = vec![0u64; 8];
    let base = mem.as_mut_ptr().cast::<u8>().expose_provenance();
    let sge = [Sge {
        addr: base as u64,
        length: 40,
        lkey: 0,
    }];
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sge: &sge,
        flags: SendFlags::INLINE,
        ud: None,
    };
    let stdin = std::io::stdin();
    let k = KernelObj {
        fd: stdin.as_fd(),
        handle: 1,
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let p = std::ptr::with_exposed_provenance_mut::<u8>(base);
            // SAFETY: 3..35 lies in the 64 bytes of `mem`, which Rust reaches only
            // through `shared` until the scope ends.
            unsafe { copy_to_shared(&[0xaa; 32], p.add(3)) };
        });
        // SAFETY: the inline SGE names 40 readable bytes of `mem`, written meanwhile only
        // through `shared`; the mlx5 data path does not use the fd.
        unsafe { qp.post_send(k, std::slice::from_ref(&wr)) }.unwrap();
    });
    // The first WQE: control segment (16 bytes), inline header (4), then the bytes.
    let p = std::ptr::with_exposed_provenance::<u8>(sq);
    let mut data = [0u8; 40];
    // SAFETY: the SQ's first 64-byte block holds 20 + 40 bytes; nothing writes it now.
    unsafe { std::ptr::copy_nonoverlapping(p.add(20), data.as_mut_ptr(), 40) };
    assert!(data[..3].iter().all(|&b| b == 0));
    assert!(data[3..35].iter().all(|&b| b == 0 || b == 0xaa));
    assert!(data[35..].iter().all(|&b| b == 0));
    drop(qp);
    drop(uar);
    drop(mem);
}

/// The operations mlx5 has no layout for (FLUSH, ATOMIC_WRITE: never offered by its send
/// caps, so unreachable through `Qp`) reach the encoder's out-of-line builder, which refuses
/// them by name and leaves the pending fence alone; a LOCAL_INV, through the same builder,
/// arms the small fence for the next request.
#[test]
fn encoder_refuses_unencoded_operations_by_name() {
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    let sz = qp_sizing(&LIM, QpType::RC, &caps, false).unwrap();
    let buf = QpBuf::new(sz).unwrap();
    let mut uar = vec![0u64; 512];
    // SAFETY: `uar` outlives the QP (dropped after it) and is not referenced meanwhile.
    let bf = unsafe { BfReg::new(uar.as_mut_ptr().cast(), 4096, 1, 512) }.unwrap();
    let qp = Mlx5Qp::new(
        buf,
        QpParts {
            qpn: 9,
            qp_type: QpType::RC,
            sq_sig_all: false,
            bf: Arc::new(bf),
            policy: BfPolicy::default(),
            ahs: Arc::new(AhTable::default()),
            reg: Arc::new(Registry::default()),
            srq: None,
            lease: None,
            uidx: None,
        },
    )
    .unwrap();
    let ops = [
        SendOp::Flush {
            remote_addr: 0x1000,
            rkey: 5,
            len: 64,
            flush_type: rverbs_uverbs::FlushType::GLOBAL,
            level: rverbs_uverbs::FlushLevel::RANGE,
        },
        SendOp::AtomicWrite {
            remote_addr: 0x1000,
            rkey: 5,
            value: [7; 8],
        },
    ];
    for op in ops {
        let wr = SendWr {
            wr_id: 1,
            op,
            sge: &[],
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        let mut fence = CTRL_SMALL_FENCE;
        // SAFETY: block 0 lies in the SQ; no inline SGEs.
        let r = unsafe { qp.build_send(&wr, 0, &mut fence) };
        assert_eq!(
            r,
            Err(rverbs_uverbs::PostFault::OpNotEncoded {
                op: op.kind(),
                qp_type: QpType::RC,
                provider: "mlx5",
            })
        );
        assert_eq!(
            fence, CTRL_SMALL_FENCE,
            "a refused {op:?} keeps the pending fence"
        );
    }
    let wr = SendWr {
        wr_id: 2,
        op: SendOp::LocalInv { invalidate_rkey: 9 },
        sge: &[],
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    let mut fence = 0;
    // SAFETY: blocks 0 and 1 lie in the SQ; no inline SGEs.
    assert_eq!(unsafe { qp.build_send(&wr, 0, &mut fence) }, Ok(8));
    assert_eq!(fence, CTRL_SMALL_FENCE);
    drop(qp);
    drop(uar);
}
