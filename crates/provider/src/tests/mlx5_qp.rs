//! mlx5 QPs, SRQs and AHs through the provider seam, with a fake kernel (the `create`
//! callbacks) and ordinary memory behind the UAR: sizing, driver data, WQE bytes, doorbell
//! record and UAR/BlueFlame writes, completions resolving `wr_id`, every bad input, and no
//! allocation on the post/poll path.
//!
//! Expected bytes come from reading rdma-core v44 `providers/mlx5/qp.c` (`_mlx5_post_send`,
//! `set_data_inl_seg`, `post_send_db`, `mlx5_post_recv`), `srq.c` and `verbs.c` (sizing);
//! each test names the rule it checks.

use super::allocs::allocs;
use super::mlx5_fake::{fd, kobj, FakeCreate, FakeUars};

use std::sync::Arc;

use crate::mlx5::driver::Mlx5Driver;
use crate::mlx5::uar::{DynUarPool, UarKernel};
use crate::mlx5::wq::{qp_sizing, srq_sizing, BfPolicy, WqLimits};
use crate::mlx5::Mlx5ContextInfo;
use rverbs_uverbs::ah::{AhAttr, GlobalRoute};
use rverbs_uverbs::driver::{CqCreated, CqOps, QpCreated, QpOps, QpRequest, SrqCreated, SrqOps};
use rverbs_uverbs::mr::AccessFlags;
use rverbs_uverbs::mw::{MwBind, MwType};
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::PostQueue;
use rverbs_uverbs::{
    RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion,
};

fn info() -> Mlx5ContextInfo {
    Mlx5ContextInfo {
        qp_tab_size: 1 << 18,
        bf_reg_size: 512,
        tot_bfregs: 16,
        cache_line_size: 64,
        max_sq_desc_sz: 512,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
        num_ports: 1,
        comp_mask: 0,
        cqe_version: 0,
        cmds_supp_uhw: 0,
        eth_min_inline: 0,
        clock_info_versions: 0,
        hca_core_clock_offset: None,
        uar_size: 4096,
        num_uars_per_page: 1,
        num_dyn_bfregs: 0,
        dump_fill_mkey: None,
        filled_len: 72,
        page_size: 4096,
    }
}

/// Eight 4 KiB static UAR pages of ordinary memory.
struct Uars(Box<[u64]>);

impl Uars {
    fn new() -> Self {
        Self(vec![0u64; 8 * 512].into_boxed_slice())
    }
    fn pages(&mut self) -> Vec<(*mut u8, usize)> {
        let base = self.0.as_mut_ptr().cast::<u8>();
        // SAFETY: 8 pages of 4096 bytes inside the box.
        (0..8)
            .map(|i| (unsafe { base.add(i * 4096) }, 4096))
            .collect()
    }
    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        // SAFETY: reads of our own memory after the posting thread is done.
        let b = unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast::<u8>(), 8 * 4096) };
        b[off..off + len].to_vec()
    }
}

fn driver(uars: &mut Uars, policy: BfPolicy, eth: bool) -> Mlx5Driver {
    // SAFETY: every test drops the driver and its objects before `uars`.
    unsafe { Mlx5Driver::from_parts(info(), &uars.pages(), policy, vec![eth]) }.unwrap()
}

/// A CQ through the driver; returns its ops and the ring address from the driver data.
fn cq(d: &Mlx5Driver, cqn: u32) -> (Box<dyn CqOps>, *mut u8) {
    let mut buf = 0u64;
    let ops = d
        .sim_create_cq(fd(), 15, &mut |uin, uout| {
            buf = u64::from_ne_bytes(uin[0..8].try_into().unwrap());
            uout[0..4].copy_from_slice(&cqn.to_ne_bytes());
            Ok(CqCreated { handle: 1, cqe: 15 })
        })
        .unwrap();
    (ops, buf as usize as *mut u8)
}

struct Created {
    ops: Box<dyn QpOps>,
    udata: Vec<u8>,
}

fn qp(d: &Mlx5Driver, qp_type: QpType, caps: QpCaps, qpn: u32, bfreg: u32, srq: bool) -> Created {
    let mut udata = Vec::new();
    let req = QpRequest {
        qp_type,
        caps,
        sq_sig_all: false,
        has_srq: srq,
        srq_handle: srq.then_some(1),
    };
    let ops = d
        .sim_create_qp(fd(), &req, &mut |uin, uout| {
            udata = uin.to_vec();
            uout[0..4].copy_from_slice(&bfreg.to_ne_bytes());
            Ok(QpCreated {
                handle: 7,
                qp_num: qpn,
                caps,
            })
        })
        .unwrap();
    Created { ops, udata }
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().unwrap())
}

/// Reads `len` bytes at `addr` (a queue buffer this test created).
fn mem(addr: u64, len: usize) -> Vec<u8> {
    // SAFETY: the queue buffers stay mapped while their ops objects live (callers keep them).
    unsafe { std::slice::from_raw_parts(addr as usize as *const u8, len) }.to_vec()
}

fn caps(send: u32, recv: u32, ssge: u32, rsge: u32, inl: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: ssge,
        max_recv_sge: rsge,
        max_inline_data: inl,
    }
}

/// libmlx5 `mlx5_calc_send_wqe` / `mlx5_calc_sq_size` / `mlx5_calc_rq_size`.
#[test]
fn sizing_follows_libmlx5() {
    let lim = WqLimits::from(&info());
    // RC: 192 bytes of overhead (control + memory-window bind), + 1 SGE = 208 → 256.
    let s = qp_sizing(&lim, QpType::RC, &caps(16, 10, 1, 3, 0), false).unwrap();
    assert_eq!(
        (s.sq_wqe_cnt, s.sq_max_post, s.max_inline),
        (64, 16, 256 - 192 - 4)
    );
    // RQ: 3 SGEs = 48 → 64-byte WQEs, 16 of them (next power of two of 10).
    assert_eq!((s.rq_wqe_cnt, s.rq_wqe_shift, s.rq_max_gs), (16, 6, 4));
    assert_eq!((s.sq_offset, s.buf_size), (1024, 1024 + 4096));
    // UD: control + datagram = 64; inline 100 → 64 + align(104, 16) = 176 → 192.
    let s = qp_sizing(&lim, QpType::UD, &caps(4, 0, 1, 0, 100), false).unwrap();
    assert_eq!((s.max_inline, s.sq_wqe_cnt, s.sq_max_post), (124, 16, 5));
    assert_eq!(s.rq_wqe_cnt, 0);
    // A QP with an SRQ has no RQ; UC sizes like RC.
    let s = qp_sizing(&lim, QpType::UC, &caps(1, 0, 2, 0, 0), true).unwrap();
    assert_eq!(
        (s.sq_wqe_cnt, s.max_inline, s.buf_size),
        (4, 256 - 196, 256)
    );
    // Too many SGEs, too much inline data, too deep: clear errors.
    let e = qp_sizing(&lim, QpType::RC, &caps(1, 0, 21, 0, 0), false).unwrap_err();
    assert!(e.to_string().contains("max_send_sge 21"), "{e}");
    let e = qp_sizing(&lim, QpType::RC, &caps(1, 0, 1, 0, 400), false).unwrap_err();
    assert!(e.to_string().contains("max_inline_data 400"), "{e}");
    let e = qp_sizing(&lim, QpType::RC, &caps(1 << 20, 0, 1, 0, 0), false).unwrap_err();
    assert!(e.to_string().contains("max_send_wr"), "{e}");
    let e = qp_sizing(&lim, QpType::RC, &caps(1, 1 << 16, 1, 1, 0), false).unwrap_err();
    assert!(e.to_string().contains("max_recv_wr 65536"), "{e}");
    // SRQ: 16 + 2·16 = 48 → 64-byte WQEs; ring of roundup(max_wr + 1).
    let s = srq_sizing(&lim, 10, 2).unwrap();
    assert_eq!((s.max, s.wqe_shift, s.max_gs, s.max_wr), (16, 6, 3, 15));
}

/// CREATE_QP driver data (`mlx5_ib_create_qp`): buffer, doorbell, counts, uidx 0xffffff with
/// CQE version 0, no flags (static UAR, no scatter-to-CQE).
#[test]
fn create_qp_driver_data() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let q = qp(&d, QpType::RC, caps(16, 10, 1, 3, 0), 0x123, 1, false);
    let b = &q.udata;
    assert_eq!(b.len(), 56);
    let (buf, db) = (u64_at(b, 0), u64_at(b, 8));
    assert_eq!(buf % 4096, 0);
    assert!(db >= buf + 5120);
    assert_eq!((u32_at(b, 16), u32_at(b, 20), u32_at(b, 24)), (64, 16, 6));
    assert_eq!(
        (u32_at(b, 28), u32_at(b, 32), u32_at(b, 36)),
        (0, 0xff_ffff, 0)
    );
    assert_eq!(&b[40..56], &[0u8; 16]);
    // The caps posts are checked against are libmlx5's, not the kernel's echo.
    assert_eq!(q.ops.caps(), Some(caps(16, 16, 1, 4, 60)));
    // Buffer and doorbell record start zeroed.
    assert!(mem(buf, 5120).iter().all(|&x| x == 0));
    assert_eq!(mem(db, 8), [0; 8]);
}

fn ctrl(wqe: &[u8]) -> (u32, u32, u8, u32) {
    let be = |o: usize| u32::from_be_bytes(wqe[o..o + 4].try_into().unwrap());
    (be(0), be(4), wqe[11], be(12))
}

/// One SEND with two SGEs (one empty, skipped), BlueFlame (single WR, prefer_bf default):
/// the WQE bytes, the send doorbell record, the 64-byte copy into the BlueFlame buffer, then
/// a list of three rings the 64-bit doorbell in the other half.
#[test]
fn send_wqe_bytes_doorbell_and_blueflame() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let mut q = qp(&d, QpType::RC, caps(16, 0, 2, 0, 0), 0x123, 1, false);
    let buf = u64_at(&q.udata, 0);
    let db = u64_at(&q.udata, 8);
    let sge = [
        Sge {
            addr: 0x1000_2000,
            length: 100,
            lkey: 0x55,
        },
        Sge {
            addr: 0x9999,
            length: 0,
            lkey: 0x66,
        },
    ];
    let wr = SendWr {
        wr_id: 42,
        op: SendOp::SendWithImm { imm: 0x1122_3344 },
        sge: &sge,
        flags: SendFlags::SIGNALED | SendFlags::SOLICITED | SendFlags::FENCE,
        ud: None,
    };
    // SAFETY: non-inline SGEs are not read by the provider; the "device" is this test.
    unsafe { q.ops.post_send(kobj(), &[wr]) }.unwrap();
    let wqe = mem(buf, 64);
    // opmod_idx_opcode: index 0 << 8 | SEND_IMM 0x0b; qpn_ds: qpn << 8 | 2 units;
    // fm_ce_se: FENCE 0x80 | CQ_UPDATE 0x08 | SOLICITED 0x02; imm as given (big-endian).
    assert_eq!(ctrl(&wqe), (0x0b, 0x12302, 0x8a, 0x1122_3344));
    assert_eq!(&wqe[8..11], &[0, 0, 0]);
    assert_eq!(&wqe[16..20], &100u32.to_be_bytes());
    assert_eq!(&wqe[20..24], &0x55u32.to_be_bytes());
    assert_eq!(&wqe[24..32], &0x1000_2000u64.to_be_bytes());
    assert!(
        wqe[32..].iter().all(|&x| x == 0),
        "the empty SGE is skipped"
    );
    // Doorbell record: [recv, send] = [0, be32(1)] (one 64-byte block).
    assert_eq!(mem(db, 8), [0, 0, 0, 0, 0, 0, 0, 1]);
    // bfreg 1: UAR 0 + 0x800 + 1 · 512; BlueFlame copies the whole 64-byte block.
    assert_eq!(u.bytes(0x800 + 512, 64), wqe);
    assert_eq!(u.bytes(0x800 + 512 + 256, 64), [0; 64]);

    // A list of three RDMA WRITEs: one doorbell, the 64-bit one, in the other buffer half.
    let one = [Sge {
        addr: 0x2000,
        length: 8,
        lkey: 9,
    }];
    let w = |id| SendWr {
        wr_id: id,
        op: SendOp::RdmaWrite {
            remote_addr: 0xabc0,
            rkey: 0x77,
        },
        sge: &one,
        flags: SendFlags::empty(),
        ud: None,
    };
    // SAFETY: as above.
    unsafe { q.ops.post_send(kobj(), &[w(1), w(2), w(3)]) }.unwrap();
    let last = mem(buf + 3 * 64, 64);
    assert_eq!(ctrl(&last), ((3 << 8) | 0x08, 0x12303, 0, 0));
    assert_eq!(&last[16..24], &0xabc0u64.to_be_bytes());
    assert_eq!(&last[24..28], &0x77u32.to_be_bytes());
    assert_eq!(mem(db, 8)[4..], 4u32.to_be_bytes());
    assert_eq!(u.bytes(0x800 + 512 + 256, 8), last[..8]);
    assert_eq!(
        u.bytes(0x800 + 512 + 264, 56),
        [0; 56],
        "only 8 bytes: a doorbell"
    );
    drop(q);
}

/// Atomics: raddr then the atomic segment (swap, compare; fetch-and-add leaves compare as it
/// was), the data segment's byte count forced to 8.
#[test]
fn atomics_layout() {
    let mut u = Uars::new();
    let d = driver(
        &mut u,
        BfPolicy {
            shut_up_bf: true,
            prefer_bf: false,
        },
        false,
    );
    let mut q = qp(&d, QpType::RC, caps(4, 0, 1, 0, 0), 5, 0, false);
    let buf = u64_at(&q.udata, 0);
    let s = [Sge {
        addr: 0x4000,
        length: 64,
        lkey: 3,
    }];
    let cs = SendWr {
        wr_id: 1,
        op: SendOp::AtomicCmpSwp {
            remote_addr: 0x8000,
            rkey: 4,
            compare: 11,
            swap: 22,
        },
        sge: &s,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    let fa = SendWr {
        op: SendOp::AtomicFetchAdd {
            remote_addr: 0x8008,
            rkey: 4,
            add: 33,
        },
        ..cs
    };
    // SAFETY: non-inline SGEs are not read.
    unsafe { q.ops.post_send(kobj(), &[cs, fa]) }.unwrap();
    let w = mem(buf, 128);
    assert_eq!(ctrl(&w).0, 0x11);
    assert_eq!(ctrl(&w).1, (5 << 8) | 4);
    assert_eq!(&w[32..40], &22u64.to_be_bytes());
    assert_eq!(&w[40..48], &11u64.to_be_bytes());
    assert_eq!(&w[48..52], &8u32.to_be_bytes());
    assert_eq!(ctrl(&w[64..]).0, (1 << 8) | 0x12);
    assert_eq!(&w[96..104], &33u64.to_be_bytes());
    assert_eq!(&w[104..112], &[0; 8], "compare left as it was (zero)");
    // bfreg 0: no BlueFlame buffer; the doorbell goes to UAR 0 + 0x800.
    assert_eq!(u.bytes(0x800, 8), w[64..72]);
}

/// Inline data that crosses the end of the SQ continues at its start (libmlx5
/// `set_data_inl_seg`); the BlueFlame copy wraps the same way.
#[test]
fn inline_wraps_past_the_sq_end() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    // UD needs an AV; use UC: overhead 192, inline 100 → 192 + 112 = 304 → 320 (5 blocks);
    // 2 WRs → roundup(640) = 1024: 16 blocks.
    let mut q = qp(&d, QpType::UC, caps(2, 0, 1, 0, 100), 9, 1, false);
    let buf = u64_at(&q.udata, 0);
    let (mut send_cq, ring) = cq(&d, 1);
    let payload: Vec<u8> = (0..100u8).collect();
    let s = [Sge {
        addr: payload.as_ptr() as u64,
        length: 100,
        lkey: 0,
    }];
    let filler = [Sge {
        addr: 0,
        length: 8,
        lkey: 0,
    }];
    let plain = SendWr {
        wr_id: 0,
        op: SendOp::Send,
        sge: &filler,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    // 15 one-block sends (two at a time, completed in between) bring cur_post to 15.
    for i in 0..15u32 {
        // SAFETY: non-inline SGEs are not read.
        unsafe {
            q.ops.post_send(
                kobj(),
                &[SendWr {
                    wr_id: u64::from(i),
                    ..plain
                }],
            )
        }
        .unwrap();
        write_cqe(ring, i, 0x00, 9, i as u16, 0);
        let mut wc = [WorkCompletion::default(); 1];
        assert_eq!(send_cq.poll(&mut wc), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status),
            (u64::from(i), WcStatus::SUCCESS)
        );
    }
    let wr = SendWr {
        wr_id: 77,
        op: SendOp::Send,
        sge: &s,
        flags: SendFlags::INLINE,
        ud: None,
    };
    // SAFETY: the inline SGE names `payload`, alive.
    unsafe { q.ops.post_send(kobj(), &[wr]) }.unwrap();
    let sq = mem(buf, 1024);
    let last = &sq[15 * 64..];
    // 1 ctrl + align(100 + 4, 16) / 16 = 7 → 8 units.
    assert_eq!(ctrl(last), ((15 << 8) | 0x0a, (9 << 8) | 8, 0, 0));
    assert_eq!(&last[16..20], &(100u32 | 0x8000_0000).to_be_bytes());
    assert_eq!(&last[20..64], &payload[..44]);
    assert_eq!(&sq[..56], &payload[44..]);
    // The record counts 15 + 2 blocks.
    // BlueFlame: 128 bytes, the second block taken from the SQ's start.
    // Fifteen doorbells before this one: the buffer half toggled to the second (offset 256).
    let bf = u.bytes(0x800 + 512 + 256, 128);
    assert_eq!(&bf[..64], last);
    assert_eq!(&bf[64..], &sq[..64]);
    drop(q);
    drop(send_cq);
}

/// Writes a CQE64 the way the device does (fields then the owner byte) into slot `ci`.
fn write_cqe(ring: *mut u8, ci: u32, opcode: u8, qpn: u32, counter: u16, srqn: u32) {
    write_cqe_wqe(ring, ci, opcode, qpn, counter, srqn, 0x0a, 0)
}

/// [`write_cqe`] naming the send WQE opcode `wqe_op`, with error syndrome `syndrome`.
#[allow(clippy::too_many_arguments)]
fn write_cqe_wqe(
    ring: *mut u8,
    ci: u32,
    opcode: u8,
    qpn: u32,
    counter: u16,
    srqn: u32,
    wqe_op: u8,
    syndrome: u8,
) {
    let mut b = [0u8; 64];
    b[32..36].copy_from_slice(&srqn.to_be_bytes());
    b[44..48].copy_from_slice(&16u32.to_be_bytes());
    b[55] = syndrome;
    b[56..60].copy_from_slice(&((u32::from(wqe_op) << 24) | qpn).to_be_bytes());
    b[60..62].copy_from_slice(&counter.to_be_bytes());
    // 16-entry ring: owner bit = lap parity.
    b[63] = (opcode << 4) | ((ci >> 4) & 1) as u8;
    // SAFETY: slot ci & 15 of a 16-entry ring the test's CQ owns; the poller is not running.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), ring.add((ci as usize & 15) * 64), 64) };
}

/// A full SQ is refused with a clear error and nothing is overwritten; the WRs before the
/// failing one are rung. Completion of a signalled WR frees the unsignalled ones before it.
#[test]
fn full_sq_refused_then_freed_by_completion() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    // 3 WRs of 256 bytes → roundup(768) = 1024: max_post 4.
    let mut q = qp(&d, QpType::RC, caps(3, 0, 1, 0, 0), 0x42, 1, false);
    assert_eq!(q.ops.caps().unwrap().max_send_wr, 4);
    let buf = u64_at(&q.udata, 0);
    let (mut cq, ring) = cq(&d, 2);
    let s = [Sge {
        addr: 0x10,
        length: 1,
        lkey: 1,
    }];
    let w = |id| SendWr {
        wr_id: id,
        op: SendOp::Send,
        sge: &s,
        flags: SendFlags::empty(),
        ud: None,
    };
    // SAFETY: non-inline SGEs are not read.
    unsafe { q.ops.post_send(kobj(), &[w(0), w(1), w(2), w(3)]) }.unwrap();
    let before = mem(buf, 1024);
    // SAFETY: as above.
    let e = unsafe { q.ops.post_send(kobj(), &[w(4)]) }.unwrap_err();
    assert_eq!(e.posted(), 0);
    let msg = e.at("mlx5_0", PostQueue::Send, 0x42).to_string();
    assert_eq!(
        msg,
        "post send to QP 0x42 on mlx5_0: work request #0: queue full (4 requests outstanding) \
         (ENOMEM); 0 posted"
    );
    assert_eq!(mem(buf, 1024), before, "a refused post writes nothing");
    // Completion of WQE 2 frees 0, 1 and 2 (unsignalled ones before it).
    write_cqe(ring, 0, 0x00, 0x42, 2, 0);
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].qp_num), (2, 0x42));
    // SAFETY: as above.
    unsafe { q.ops.post_send(kobj(), &[w(5), w(6), w(7)]) }.unwrap();
    // An error CQE (flush) resolves and frees the same way.
    let mut b = [0u8; 64];
    b[55] = 0x05;
    b[56..60].copy_from_slice(&((0x0a << 24) | 0x42u32).to_be_bytes());
    b[60..62].copy_from_slice(&6u16.to_be_bytes());
    b[63] = 0xd0;
    // SAFETY: slot 1 of the CQ ring, not being polled.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), ring.add(64), 64) };
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::WR_FLUSH_ERR));
    drop(q);
    drop(cq);
}

/// Bad input on post: too many SGEs, inline over max, a UD send without an AH, an unknown AH,
/// an opcode the QP type cannot carry; each error names the QP and the limit, and the
/// requests before it are rung.
#[test]
fn bad_posts_are_refused_clearly() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let mut rc = qp(&d, QpType::RC, caps(8, 4, 1, 1, 16), 0x77, 1, false);
    let buf = u64_at(&rc.udata, 0) + 64; // SQ after a 64-byte RQ (4 × 16)
    let data = [0u8; 200];
    let one = [Sge {
        addr: data.as_ptr() as u64,
        length: 8,
        lkey: 1,
    }];
    let two = [one[0], one[0]];
    let big = [Sge {
        addr: data.as_ptr() as u64,
        length: 200,
        lkey: 0,
    }];
    let ok = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sge: &one,
        flags: SendFlags::empty(),
        ud: None,
    };
    let cases: [(SendWr<'_>, &str); 3] = [
        (SendWr { sge: &two, ..ok }, "2 SGEs, the queue allows 1"),
        (
            SendWr {
                sge: &big,
                flags: SendFlags::INLINE,
                ..ok
            },
            "200 bytes of inline data, the QP's max_inline_data is 60",
        ),
        (
            SendWr {
                op: SendOp::BindMw(bind(MwType::TYPE_2, (1 << 31) + 1, AccessFlags::empty())),
                sge: &[],
                ..ok
            },
            "a memory-window bind of 2147483649 bytes exceeds mlx5's 2147483648",
        ),
    ];
    for (n, (bad, what)) in cases.into_iter().enumerate() {
        // SAFETY: SGEs name `data`, alive.
        let e = unsafe { rc.ops.post_send(kobj(), &[ok, bad, ok]) }.unwrap_err();
        assert_eq!(e.posted(), 1);
        let msg = e.at("mlx5_0", PostQueue::Send, 0x77).to_string();
        assert!(
            msg.starts_with("post send to QP 0x77 on mlx5_0: work request #1: ")
                && msg.contains(what)
                && msg.ends_with("; 1 posted"),
            "{msg}"
        );
        // The good one before was written and rung: the record counts it.
        let db = u64_at(&rc.udata, 8);
        assert_eq!(mem(db, 8)[4..], ((n + 1) as u32).to_be_bytes());
    }
    let _ = buf;
    // Receives: too many SGEs.
    let three = [one[0]; 3];
    // SAFETY: as above.
    let e = unsafe {
        rc.ops.post_recv(
            kobj(),
            &[RecvWr {
                wr_id: 1,
                sge: &three,
            }],
        )
    }
    .unwrap_err();
    assert!(e.to_string().contains("3 SGEs, the queue allows 1"), "{e}");

    let mut ud = qp(&d, QpType::UD, caps(4, 0, 1, 0, 0), 0x78, 1, false);
    // SAFETY: as above.
    let e = unsafe { ud.ops.post_send(kobj(), &[ok]) }.unwrap_err();
    assert!(e.to_string().contains("UD send needs a destination"), "{e}");
    let dest = UdDest {
        ah_num: 99,
        ah_handle: 1,
        remote_qpn: 5,
        remote_qkey: 6,
    };
    // SAFETY: as above.
    let e = unsafe {
        ud.ops.post_send(
            kobj(),
            &[SendWr {
                ud: Some(dest),
                ..ok
            }],
        )
    }
    .unwrap_err();
    assert!(e.to_string().contains("AH number 99"), "{e}");
    // Every operation a UD QP cannot carry (RDMA, atomics, SEND_WITH_INV, the local ones),
    // and those a UC QP cannot (READ, atomics, SEND_WITH_INV): not in what the QP accepts,
    // so uverbs' `Qp` refuses them before the encoder runs (QpOps::post_send's contract;
    // the encoder does not check again).
    let raddr = (0x1000, 5);
    let write = SendOp::RdmaWrite {
        remote_addr: raddr.0,
        rkey: raddr.1,
    };
    let read = SendOp::RdmaRead {
        remote_addr: raddr.0,
        rkey: raddr.1,
    };
    let cs = SendOp::AtomicCmpSwp {
        remote_addr: raddr.0,
        rkey: raddr.1,
        compare: 1,
        swap: 2,
    };
    let fa = SendOp::AtomicFetchAdd {
        remote_addr: raddr.0,
        rkey: raddr.1,
        add: 1,
    };
    let inv = SendOp::SendWithInv { invalidate_rkey: 9 };
    let linv = SendOp::LocalInv { invalidate_rkey: 9 };
    let bmw = SendOp::BindMw(bind(MwType::TYPE_2, 64, AccessFlags::REMOTE_READ));
    let mut uc = qp(&d, QpType::UC, caps(8, 0, 2, 0, 16), 0x79, 1, false);
    let caps = crate::mlx5::wq::send_caps();
    for (ty, ops) in [
        (QpType::UD, &[write, read, cs, fa, inv, linv, bmw][..]),
        (QpType::UC, &[read, cs, fa, inv][..]),
    ] {
        for op in ops {
            assert!(!caps.allowed(ty).contains(op.kind()), "{ty} {op:?}");
        }
    }
    // What UC does carry: WRITE, LOCAL_INV and memory-window binds.
    for op in [write, linv, bmw] {
        // SAFETY: as above.
        unsafe { uc.ops.post_send(kobj(), &[SendWr { op, ..ok }]) }.unwrap();
    }
    // Inline data over the max across two SGEs: the total is what counts (and is named).
    let forty = [Sge {
        addr: data.as_ptr() as u64,
        length: 40,
        lkey: 0,
    }; 2];
    let wr = SendWr {
        sge: &forty,
        flags: SendFlags::INLINE,
        ..ok
    };
    // SAFETY: as above.
    let e = unsafe { uc.ops.post_send(kobj(), &[wr]) }.unwrap_err();
    assert!(
        e.to_string()
            .contains("80 bytes of inline data, the QP's max_inline_data is 60"),
        "{e}"
    );
}

/// `MLX5_CQE_SIZE` (`Mlx5Driver::with_cqe_size`): 64 and 128 go into the CREATE_CQ driver
/// data's `cqe_size`; any other size is refused before the kernel is asked (libmlx5: EINVAL),
/// naming the value.
#[test]
fn cqe_size_is_64_or_128() {
    for size in [64u32, 128] {
        let mut u = Uars::new();
        let d = driver(&mut u, BfPolicy::default(), false).with_cqe_size(size);
        let mut asked = 0;
        d.sim_create_cq(fd(), 15, &mut |uin, uout| {
            asked = u32_at(uin, 16);
            uout[0..4].copy_from_slice(&7u32.to_ne_bytes());
            Ok(CqCreated { handle: 1, cqe: 15 })
        })
        .unwrap();
        assert_eq!(asked, size);
    }
    for size in [0u32, 32, 96, 256] {
        let mut u = Uars::new();
        let d = driver(&mut u, BfPolicy::default(), false).with_cqe_size(size);
        let e = d
            .sim_create_cq(fd(), 15, &mut |_, _| panic!("no kernel call"))
            .unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "MLX5_CQE_SIZE is {size}: mlx5 CQEs are 64 or 128 bytes"
            )),
            "{e}"
        );
    }
}

/// UD: the datagram segment is the AH's address vector with the remote QPN (extended-AV bit)
/// and Q_Key; on RoCE the AV carries the MAC the kernel's create-AH response gave.
#[test]
fn ud_send_carries_the_av() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), true);
    let attr = AhAttr {
        port_num: 1,
        sl: 3,
        grh: Some(GlobalRoute {
            dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            flow_label: 0x12345,
            sgid_index: 2,
            hop_limit: 64,
            traffic_class: 0x10,
        }),
        ..Default::default()
    };
    let ah = d
        .sim_create_ah(&attr, &mut |_, out| {
            out[0..4].copy_from_slice(&16u32.to_ne_bytes());
            out[4..10].copy_from_slice(&[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
            Ok(3)
        })
        .unwrap();
    // Without a GRH on RoCE: refused before the kernel is asked.
    let e = d
        .sim_create_ah(
            &AhAttr {
                port_num: 1,
                ..Default::default()
            },
            &mut |_, _| panic!("no kernel call expected"),
        )
        .unwrap_err();
    assert!(e.to_string().contains("needs a GRH"), "{e}");
    let e = d
        .sim_create_ah(
            &AhAttr {
                port_num: 2,
                ..attr
            },
            &mut |_, _| panic!("no kernel call"),
        )
        .unwrap_err();
    assert!(e.to_string().contains("ports 1..=1"), "{e}");

    let mut q = qp(&d, QpType::UD, caps(4, 0, 1, 0, 0), 0x80, 1, false);
    let buf = u64_at(&q.udata, 0);
    let s = [Sge {
        addr: 0x5000,
        length: 32,
        lkey: 2,
    }];
    let dest = UdDest {
        ah_num: ah,
        ah_handle: 3,
        remote_qpn: 0x99,
        remote_qkey: 0x1111_1111,
    };
    let wr = SendWr {
        wr_id: 5,
        op: SendOp::Send,
        sge: &s,
        flags: SendFlags::SIGNALED,
        ud: Some(dest),
    };
    // SAFETY: non-inline SGEs are not read.
    unsafe { q.ops.post_send(kobj(), &[wr]) }.unwrap();
    let w = mem(buf, 128);
    assert_eq!(ctrl(&w).1, (0x80 << 8) | 5);
    let av = &w[16..64];
    assert_eq!(&av[0..4], &0x1111_1111u32.to_be_bytes());
    assert_eq!(&av[8..12], &(0x99u32 | 0x8000_0000).to_be_bytes());
    assert_eq!(av[12], 3 << 1, "RoCE: sl in bits 1-3, static rate 0");
    assert_eq!(&av[20..26], &[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    assert_eq!((av[26], av[27]), (0x10, 64));
    assert_eq!(
        &av[28..32],
        &((2u32 << 20) | 0x12345).to_be_bytes(),
        "no GRH bit on RoCE"
    );
    assert_eq!(&av[32..48], &attr.grh.unwrap().dgid);
    assert_eq!(&w[64..68], &32u32.to_be_bytes());
}

/// Receives: data segments, the terminator when fewer than max, the receive doorbell record
/// and no UAR write; completions come back in order with their wr_id.
#[test]
fn recv_wqes_and_in_order_completion() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let mut q = qp(&d, QpType::RC, caps(1, 4, 1, 3, 0), 0x31, 1, false);
    let (buf, db) = (u64_at(&q.udata, 0), u64_at(&q.udata, 8));
    let (mut cq, ring) = cq(&d, 3);
    let s = [
        Sge {
            addr: 0x100,
            length: 16,
            lkey: 1,
        },
        Sge {
            addr: 0x200,
            length: 0,
            lkey: 2,
        },
    ];
    let full = [Sge {
        addr: 0x300,
        length: 4,
        lkey: 3,
    }; 4];
    // SAFETY: the SGEs are never touched (no device).
    unsafe {
        q.ops.post_recv(
            kobj(),
            &[
                RecvWr { wr_id: 10, sge: &s },
                RecvWr {
                    wr_id: 11,
                    sge: &full,
                },
            ],
        )
    }
    .unwrap();
    let r = mem(buf, 128);
    assert_eq!(&r[0..4], &16u32.to_be_bytes());
    assert_eq!(
        &r[16..20],
        &[0; 4],
        "terminator after the one non-empty SGE"
    );
    assert_eq!(&r[20..24], &0x100u32.to_be_bytes());
    assert!(
        r[64..128].chunks(16).all(|c| c[4..8] == 3u32.to_be_bytes()),
        "four SGEs, no terminator"
    );
    assert_eq!(mem(db, 8), [0, 0, 0, 2, 0, 0, 0, 0]);
    assert!(
        u.bytes(0, 4096).iter().all(|&x| x == 0),
        "receives ring no UAR"
    );
    // Posting more than the RQ holds (4) is refused.
    let one = [s[0]];
    let many = [RecvWr {
        wr_id: 0,
        sge: &one,
    }; 3];
    // SAFETY: as above.
    let e = unsafe { q.ops.post_recv(kobj(), &many) }.unwrap_err();
    assert_eq!(e.posted(), 2);
    assert_eq!(
        e.at("mlx5_0", PostQueue::Recv, 0x42).to_string(),
        "post receive to QP 0x42 on mlx5_0: work request #2: queue full (4 requests \
         outstanding) (ENOMEM); 2 posted"
    );
    write_cqe(ring, 0, 0x2, 0x31, 0, 0);
    write_cqe(ring, 1, 0x2, 0x31, 0, 0);
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc), 2);
    assert_eq!((wc[0].wr_id, wc[1].wr_id), (10, 11));
    drop(q);
}

/// SRQ: the free list linked at creation, a post takes the head and writes every SGE, the
/// doorbell record counts posts, a completion (by srqn) gives back the wr_id of that WQE and
/// returns it to the tail, so a full SRQ can be reposted.
#[test]
fn srq_post_complete_repost() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let mut udata = Vec::new();
    let mut srq: Box<dyn SrqOps> = d
        .sim_create_srq(fd(), 3, 1, &mut |uin, uout| {
            udata = uin.to_vec();
            uout[0..4].copy_from_slice(&0x66u32.to_ne_bytes());
            Ok(SrqCreated {
                handle: 2,
                max_wr: 3,
                max_sge: 1,
                srq_num: 0x66,
            })
        })
        .unwrap();
    assert_eq!(udata.len(), 32);
    let (buf, db) = (u64_at(&udata, 0), u64_at(&udata, 8));
    // 32-byte WQEs (16 + 1 SGE → 32), 4 of them: next indices 1, 2, 3 in WQEs 0..3.
    let b = mem(buf, 128);
    assert_eq!([&b[2..4], &b[34..36], &b[66..68]], [[0, 1], [0, 2], [0, 3]]);
    let q = qp(&d, QpType::RC, caps(1, 0, 1, 0, 0), 0x51, 1, true);
    let (mut cq, ring) = cq(&d, 4);
    let s = [Sge {
        addr: 0x700,
        length: 0,
        lkey: 7,
    }];
    let r = |id| RecvWr { wr_id: id, sge: &s };
    // SAFETY: the SGEs are never touched.
    unsafe { srq.post_recv(kobj(), &[r(100), r(101), r(102)]) }.unwrap();
    let b = mem(buf, 128);
    assert_eq!(
        &b[16..20],
        &[0; 4],
        "SRQ copies every SGE, even an empty one"
    );
    assert_eq!(&b[20..24], &7u32.to_be_bytes());
    assert_eq!(mem(db, 4), 3u32.to_be_bytes());
    // SAFETY: as above.
    let e = unsafe { srq.post_recv(kobj(), &[r(103)]) }.unwrap_err();
    let msg = e.at("mlx5_0", PostQueue::Srq, 0x66).to_string();
    assert!(
        msg.starts_with("post receive to SRQ 0x66 on mlx5_0: work request #0: queue full (")
            && msg.ends_with("requests outstanding) (ENOMEM); 0 posted"),
        "{msg}"
    );
    // Complete WQE 1 (receive through the SRQ: srqn in the CQE).
    write_cqe(ring, 0, 0x2, 0x51, 1, 0x66);
    let mut wc = [WorkCompletion::default(); 2];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].qp_num), (101, 0x51));
    // WQE 1 went to the tail (WQE 3 now links to it); a repost takes WQE 3 then 1.
    assert_eq!(&mem(buf + 96, 4)[2..4], &[0, 1]);
    // SAFETY: as above.
    unsafe { srq.post_recv(kobj(), &[r(200)]) }.unwrap();
    write_cqe(ring, 1, 0x2, 0x51, 3, 0x66);
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 200);
    let _ = q.ops.caps();
    drop(q);
    drop(srq);
}

/// A create response naming a blue-flame register the context does not have, or an SRQ
/// answer smaller than the ring: refused, with the QP/SRQ named (the core then destroys the
/// kernel object; the buffer is freed with the error).
#[test]
fn bad_create_responses_are_refused() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let req = QpRequest {
        qp_type: QpType::RC,
        caps: caps(1, 1, 1, 1, 0),
        sq_sig_all: false,
        has_srq: false,
        srq_handle: None,
    };
    for bad in [2u32, 3, 32, 1000] {
        let e = d
            .sim_create_qp(fd(), &req, &mut |_, out| {
                out[0..4].copy_from_slice(&bad.to_ne_bytes());
                Ok(QpCreated {
                    handle: 1,
                    qp_num: 0x10,
                    caps: req.caps,
                })
            })
            .unwrap_err();
        assert!(
            e.to_string().contains("QP 0x10") && e.to_string().contains("register"),
            "{e}"
        );
    }
    let e = d
        .sim_create_qp(fd(), &req, &mut |_, _| {
            Ok(QpCreated {
                handle: 1,
                qp_num: 1 << 24,
                caps: req.caps,
            })
        })
        .unwrap_err();
    assert!(e.to_string().contains("24 bits"), "{e}");
    let e = d
        .sim_create_srq(fd(), 8, 1, &mut |_, out| {
            out[0..4].copy_from_slice(&5u32.to_ne_bytes());
            Ok(SrqCreated {
                handle: 1,
                max_wr: 8,
                max_sge: 1,
                srq_num: 5,
            })
        })
        .unwrap_err();
    assert!(
        e.to_string().contains("max_wr 8") && e.to_string().contains("SRQ 0x5"),
        "{e}"
    );
    let e = d
        .sim_create_srq(fd(), 0, 1, &mut |_, _| panic!("no kernel call"))
        .unwrap_err();
    assert!(e.to_string().contains("max_wr 0"), "{e}");
}

/// post_send, post_recv, SRQ post and polling their completions allocate nothing.
#[test]
fn post_and_poll_do_not_allocate() {
    let mut u = Uars::new();
    let d = Arc::new(driver(&mut u, BfPolicy::default(), false));
    let mut q = qp(&d, QpType::RC, caps(64, 64, 2, 2, 64), 0x21, 1, false);
    let (mut cq, ring) = cq(&d, 5);
    let data = [7u8; 64];
    let s = [Sge {
        addr: data.as_ptr() as u64,
        length: 64,
        lkey: 1,
    }];
    let inl = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sge: &s,
        flags: SendFlags::INLINE | SendFlags::SIGNALED,
        ud: None,
    };
    let list = [SendWr {
        flags: SendFlags::SIGNALED,
        ..inl
    }; 4];
    let mut wc = [WorkCompletion::default(); 8];
    let before = allocs();
    // SAFETY: SGEs name `data`, alive.
    unsafe {
        q.ops.post_send(kobj(), &[inl]).unwrap();
        q.ops.post_send(kobj(), &list).unwrap();
        q.ops
            .post_recv(kobj(), &[RecvWr { wr_id: 9, sge: &s }])
            .unwrap();
    }
    write_cqe(ring, 0, 0x0, 0x21, 0, 0);
    write_cqe(ring, 1, 0x2, 0x21, 0, 0);
    let n = cq.poll(&mut wc);
    let after = allocs();
    assert_eq!(n, 2);
    assert_eq!((wc[0].wr_id, wc[1].wr_id), (1, 9));
    assert_eq!(after - before, 0, "the post/poll path allocated");
    drop(q);
    drop(cq);
}

// ---- dynamic UARs (tot_bfregs 0): every failure is a clear error and leaves no UAR ----

fn dyn_info() -> Mlx5ContextInfo {
    Mlx5ContextInfo {
        tot_bfregs: 0,
        ..info()
    }
}

fn pool(k: &Arc<FakeUars>) -> std::io::Result<DynUarPool> {
    let kernel: Arc<dyn UarKernel> = k.clone();
    DynUarPool::new(kernel, "mlx5_0", 16, 4, 512, 1)
}

fn dyn_driver(k: &Arc<FakeUars>) -> Mlx5Driver {
    Mlx5Driver::from_dynamic(
        dyn_info(),
        pool(k).unwrap(),
        BfPolicy::default(),
        vec![false],
    )
}

fn rc_req() -> QpRequest {
    QpRequest {
        qp_type: QpType::RC,
        caps: caps(4, 4, 1, 1, 0),
        sq_sig_all: false,
        has_srq: false,
        srq_handle: None,
    }
}

/// Creates an RC QP; returns it (or the error) and whether the kernel create was reached.
fn dyn_qp(d: &Mlx5Driver, qpn: u32) -> (std::io::Result<Box<dyn QpOps>>, Vec<u8>) {
    let mut udata = Vec::new();
    let r = d.sim_create_qp(fd(), &rc_req(), &mut |uin, _| {
        udata = uin.to_vec();
        Ok(QpCreated {
            handle: 1,
            qp_num: qpn,
            caps: rc_req().caps,
        })
    });
    (r, udata)
}

#[test]
fn mlx5_dyn_uar_nc_alloc_refused_fails_open_and_leaks_nothing() {
    let k = Arc::new(FakeUars::default());
    k.st.lock().unwrap().fail_at = 1;
    let e = pool(&k).unwrap_err();
    assert!(
        e.to_string()
            .contains("allocate a non-cached UAR on mlx5_0"),
        "{e}"
    );
    assert_eq!(k.st.lock().unwrap().live(), 0);
}

#[test]
fn mlx5_dyn_uar_bad_answers_destroy_the_uar() {
    // A length that is not whole 4 KiB UARs.
    let k = Arc::new(FakeUars::default());
    k.st.lock().unwrap().bad_len = Some(100);
    let e = pool(&k).unwrap_err();
    assert!(e.to_string().contains("UAR of 100 bytes"), "{e}");
    assert_eq!(k.st.lock().unwrap().live(), 0);
    // A page id CREATE_CQ cannot carry.
    let k = Arc::new(FakeUars::default());
    k.st.lock().unwrap().page_base = Some(0x1_0000);
    let e = pool(&k).unwrap_err();
    assert!(e.to_string().contains("16-bit uar_page_index"), "{e}");
    assert_eq!(k.st.lock().unwrap().live(), 0);
    // The mapping fails.
    let k = Arc::new(FakeUars::default());
    k.st.lock().unwrap().map_fail = true;
    let e = pool(&k).unwrap_err();
    assert!(e.to_string().contains("non-cached UAR on mlx5_0"), "{e}");
    assert_eq!(k.st.lock().unwrap().live(), 0);
}

#[test]
fn mlx5_dyn_uar_qp_alloc_refused_creates_no_qp() {
    let k = Arc::new(FakeUars::default());
    let d = dyn_driver(&k);
    k.st.lock().unwrap().fail_at = 2;
    let (r, udata) = dyn_qp(&d, 0x100);
    let e = r.unwrap_err();
    assert!(
        e.to_string()
            .contains("allocate a write-combining UAR on mlx5_0"),
        "{e}"
    );
    assert!(udata.is_empty(), "the kernel QP must not be created");
    assert_eq!(k.st.lock().unwrap().live(), 1, "only the non-cached UAR");
    // The next QP allocates again and gets it.
    let (r, udata) = dyn_qp(&d, 0x101);
    let qp = r.unwrap();
    // bfreg_index: the first write-combining UAR's page id; flags: MLX5_QP_FLAG_UAR_PAGE_INDEX.
    assert_eq!(u32::from_ne_bytes(udata[36..40].try_into().unwrap()), 0x31);
    assert_eq!(
        u32::from_ne_bytes(udata[28..32].try_into().unwrap()),
        1 << 10
    );
    drop(qp);
    drop(d);
    let s = k.st.lock().unwrap();
    assert_eq!(s.live(), 0, "the driver destroys every UAR it allocated");
    assert_eq!(s.destroyed.len(), 2);
}

#[test]
fn mlx5_dyn_uar_dedicated_register_comes_back() {
    let k = Arc::new(FakeUars::default());
    let d = dyn_driver(&k);
    let page = |u: &[u8]| u32::from_ne_bytes(u[36..40].try_into().unwrap());
    let qps: Vec<_> = (0..4).map(|i| dyn_qp(&d, 0x100 + i)).collect();
    let pages: Vec<u32> = qps.iter().map(|(_, u)| page(u)).collect();
    // Four dedicated registers: two UARs, two registers each.
    assert_eq!(pages, [0x31, 0x31, 0x32, 0x32]);
    assert_eq!(k.st.lock().unwrap().live(), 3);
    // Dropping a QP gives its register back: the next QP takes it, no new UAR.
    let mut qps = qps;
    drop(qps.remove(1).0.unwrap());
    let (r, u) = dyn_qp(&d, 0x200);
    r.unwrap();
    assert_eq!(page(&u), 0x31);
    assert_eq!(k.st.lock().unwrap().live(), 3);
}

/// RoCE v2 UDP source ports (libmlx5 `mlx5_ah_set_udp_sport`): from the flow label, else
/// random, always in 0xC000..=0xFFFF.
#[test]
fn mlx5_roce_v2_udp_sport() {
    use crate::mlx5::wq::roce_v2_udp_sport;
    assert_eq!(roce_v2_udp_sport(0x12345), 0xe341);
    assert_eq!(roce_v2_udp_sport(0xfffff), 0xffc0);
    assert_eq!(roce_v2_udp_sport(1), 0xc001);
    let ports: Vec<u16> = (0..64).map(|_| roce_v2_udp_sport(0)).collect();
    assert!(ports.iter().all(|&p| p >= 0xc000), "{ports:x?}");
    assert!(
        ports.iter().any(|&p| p != ports[0]),
        "random ports: {ports:x?}"
    );
}

/// A bind of window rkey 0x500 (new key 0x501) over region lkey 0x66 at 0x7000_0000.
fn bind(mw_type: MwType, length: u64, access: AccessFlags) -> MwBind {
    // SAFETY: nothing is bound: no device reads these WQEs.
    unsafe { MwBind::from_raw(mw_type, 0x500, 0x501, 0x66, 0x7000_0000, length, access) }
}

/// LOCAL_INV and memory-window binds: libmlx5's UMR WQEs field by field (control, UMR
/// control, mkey context, KLM), the small fence on the next request, BlueFlame for a single
/// UMR WQE, the refusal of a zero-based type 1 bind, and the completions (the CQE says UMR;
/// the opcode is the one recorded at post).
#[test]
fn umr_wqe_layouts_and_completions() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let mut q = qp(&d, QpType::RC, caps(8, 0, 1, 0, 0), 0x123, 1, false);
    let buf = u64_at(&q.udata, 0);
    let db = u64_at(&q.udata, 8);
    let (mut cq, ring) = cq(&d, 2);
    let be32 = |w: &[u8], o: usize| u32::from_be_bytes(w[o..o + 4].try_into().unwrap());
    let be64 = |w: &[u8], o: usize| u64::from_be_bytes(w[o..o + 8].try_into().unwrap());
    let wr = |id, op, flags| SendWr {
        wr_id: id,
        op,
        sge: &[],
        flags,
        ud: None,
    };
    // LOCAL_INV: 128 bytes (8 units).
    let linv = wr(
        1,
        SendOp::LocalInv {
            invalidate_rkey: 0xabcd_1234,
        },
        SendFlags::SIGNALED,
    );
    // SAFETY: no SGEs.
    unsafe { q.ops.post_send(kobj(), &[linv]) }.unwrap();
    let w = mem(buf, 128);
    // opcode UMR 0x25 at index 0; 8 units; CQ_UPDATE; the invalidated key as immediate.
    assert_eq!(ctrl(&w), (0x25, 0x12308, 0x08, 0xabcd_1234));
    assert_eq!(&w[8..11], &[0, 0, 0]);
    // UMR control: INLINE 0x80 | TRANSLATION_OFFSET 0x10 | CHECK_QPN 0x08 (a type 2
    // unbind), no KLM, translation offset 0, mask FREE | MKEY | QPN, reserved zero.
    assert_eq!(w[16], 0x98);
    assert_eq!(&w[17..24], &[0; 7]);
    assert_eq!(be64(&w, 24), (1 << 29) | (1 << 13) | (1 << 14));
    assert!(w[32..64].iter().all(|&x| x == 0));
    // Mkey context: free 0x40, key 0 under QPN 0xffffff, nothing else written.
    assert_eq!(w[64], 0x40);
    assert_eq!(be32(&w, 68), 0xffff_ff00);
    assert!(w[65..68].iter().chain(&w[72..128]).all(|&x| x == 0));
    // Doorbell record 2 blocks; BlueFlame copies both blocks (8 units ≤ 256 / 16).
    assert_eq!(mem(db, 8)[4..], 2u32.to_be_bytes());
    assert_eq!(u.bytes(0x800 + 512, 128), w);

    // The next request (another post) carries the small initiator fence 0x20.
    let one = [Sge {
        addr: 0x2000,
        length: 8,
        lkey: 9,
    }];
    let send = SendWr {
        sge: &one,
        ..wr(2, SendOp::Send, SendFlags::empty())
    };
    // SAFETY: non-inline SGEs are not read.
    unsafe { q.ops.post_send(kobj(), &[send]) }.unwrap();
    assert_eq!(
        ctrl(&mem(buf + 128, 64)),
        ((2 << 8) | 0x0a, 0x12302, 0x20, 0)
    );

    // A type 2 bind, full fence asked: 192 bytes (12 units) at block 3.
    let b2 = bind(
        MwType::TYPE_2,
        0x3000,
        AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
    );
    let bw = wr(
        3,
        SendOp::BindMw(b2),
        SendFlags::SIGNALED | SendFlags::FENCE,
    );
    // SAFETY: no SGEs.
    unsafe { q.ops.post_send(kobj(), &[bw]) }.unwrap();
    let w = mem(buf + 3 * 64, 192);
    // the window's old key as immediate; FENCE 0x80 | CQ_UPDATE.
    assert_eq!(ctrl(&w), ((3 << 8) | 0x25, 0x1230c, 0x88, 0x500));
    // UMR control: INLINE | CHECK_FREE 0x20 | TRANSLATION_OFFSET; one KLM (4 octowords);
    // mask FREE | MKEY | QPN | LEN | START_ADDR | the four access bits.
    assert_eq!(w[16], 0xb0);
    assert_eq!(&w[17..20], &[0; 3]);
    assert_eq!(&w[20..22], &4u16.to_be_bytes());
    assert_eq!(&w[22..24], &[0; 2]);
    assert_eq!(be64(&w, 24), 0x203c_6041);
    // Mkey context: not free, access REMOTE_WRITE 0x20 | REMOTE_READ 0x10, the new key's
    // low byte under this QP's number, start, length.
    assert_eq!((w[64], w[66]), (0, 0x30));
    assert_eq!(be32(&w, 68), 0x1_2301);
    assert_eq!(be64(&w, 80), 0x7000_0000);
    assert_eq!(be64(&w, 88), 0x3000);
    // KLM: byte count, the region's lkey, the address; zeros to the block's end.
    assert_eq!(be32(&w, 128), 0x3000);
    assert_eq!(be32(&w, 132), 0x66);
    assert_eq!(be64(&w, 136), 0x7000_0000);
    assert!(w[144..192].iter().all(|&x| x == 0));
    assert_eq!(mem(db, 8)[4..], 6u32.to_be_bytes());

    // A zero-based type 1 bind: refused before anything is written (libmlx5 ibv_bind_mw).
    let before = (mem(buf, 2048), mem(db, 8));
    let zb = wr(
        4,
        SendOp::BindMw(bind(
            MwType::TYPE_1,
            0x100,
            AccessFlags::REMOTE_READ | AccessFlags::ZERO_BASED,
        )),
        SendFlags::SIGNALED,
    );
    // SAFETY: no SGEs.
    let e = unsafe { q.ops.post_send(kobj(), &[zb]) }.unwrap_err();
    assert_eq!(
        e.at("mlx5_0", PostQueue::Send, 0x123).to_string(),
        "post send to QP 0x123 on mlx5_0: work request #0: a type 1 memory window cannot be \
         bound zero-based on mlx5; 0 posted"
    );
    assert_eq!(
        (mem(buf, 2048), mem(db, 8)),
        before,
        "nothing written or rung"
    );

    // A type 1 bind: no QPN (0xffffff), no QPN mask bit, no CHECK_FREE; the small fence
    // from the previous bind.
    let b1 = bind(MwType::TYPE_1, 0x40, AccessFlags::LOCAL_WRITE);
    // SAFETY: no SGEs.
    unsafe {
        q.ops
            .post_send(kobj(), &[wr(5, SendOp::BindMw(b1), SendFlags::empty())])
    }
    .unwrap();
    let w = mem(buf + 6 * 64, 192);
    assert_eq!(ctrl(&w), ((6 << 8) | 0x25, 0x1230c, 0x20, 0x500));
    assert_eq!(w[16], 0x90);
    assert_eq!(be64(&w, 24), 0x203c_2041);
    assert_eq!((w[64], w[66]), (0, 0x08));
    assert_eq!(be32(&w, 68), 0xffff_ff01);

    // Completions: LOCAL_INV, BIND_MW, then a bind error (MW_BIND_ERR) reported as BIND_MW.
    write_cqe_wqe(ring, 0, 0x00, 0x123, 0, 0, 0x25, 0);
    write_cqe_wqe(ring, 1, 0x00, 0x123, 3, 0, 0x25, 0);
    write_cqe_wqe(ring, 2, 0x0d, 0x123, 6, 0, 0x25, 0x06);
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc), 3);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].status, wc[0].byte_len),
        (1, WcOpcode::LOCAL_INV, WcStatus::SUCCESS, 0)
    );
    assert_eq!(
        (wc[1].wr_id, wc[1].opcode, wc[1].status),
        (3, WcOpcode::BIND_MW, WcStatus::SUCCESS)
    );
    assert_eq!(
        (wc[2].wr_id, wc[2].opcode, wc[2].status),
        (5, WcOpcode::BIND_MW, WcStatus::MW_BIND_ERR)
    );
    drop(q);
    drop(cq);
}

/// A modify to RESET (the core calls `CqOps::qp_reset` on the receive CQ, then on the send
/// CQ, then `QpOps::reset`): the QP's pending completions leave both CQs, another QP's stay;
/// the doorbell records are zero and the queues empty, so the whole SQ is free again and a
/// new post starts at WQE 0; old work requests never come back.
#[test]
fn reset_forgets_posted_work_and_cleans_the_cqs() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let (mut scq, sring) = cq(&d, 2);
    let (mut rcq, rring) = cq(&d, 3);
    // max_post 4, 4 receives.
    let mut q = qp(&d, QpType::RC, caps(3, 4, 1, 1, 0), 0x42, 1, false);
    let mut other = qp(&d, QpType::RC, caps(3, 4, 1, 1, 0), 0x43, 1, false);
    let db = u64_at(&q.udata, 8);
    let s = [Sge {
        addr: 0x10,
        length: 1,
        lkey: 1,
    }];
    let w = |id| SendWr {
        wr_id: id,
        op: SendOp::Send,
        sge: &s,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    let r = |id| RecvWr { wr_id: id, sge: &s };
    // SAFETY: SGEs are never dereferenced (no device, no inline).
    unsafe {
        q.ops.post_send(kobj(), &[w(1), w(2), w(3), w(4)]).unwrap();
        q.ops.post_recv(kobj(), &[r(11), r(12)]).unwrap();
        other.ops.post_send(kobj(), &[w(21)]).unwrap();
    }
    assert_ne!(mem(db, 8), [0; 8]);
    write_cqe(sring, 0, 0x00, 0x42, 0, 0);
    write_cqe(sring, 1, 0x00, 0x43, 0, 0);
    write_cqe(sring, 2, 0x00, 0x42, 1, 0);
    write_cqe(rring, 0, 0x02, 0x42, 0, 0);
    // A QP number nobody has: nothing happens.
    scq.qp_reset(0x99, false);
    rcq.qp_reset(0x42, true);
    scq.qp_reset(0x42, false);
    q.ops.reset();
    assert_eq!(mem(db, 8), [0; 8], "both doorbell records are zero");
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(rcq.poll(&mut wc), 0, "the receive completion was dropped");
    assert_eq!(scq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].qp_num),
        (21, 0x43),
        "the other QP's stays"
    );
    // The whole SQ is free again and posting starts at WQE 0.
    // SAFETY: as above.
    unsafe { q.ops.post_send(kobj(), &[w(5), w(6), w(7), w(8)]) }.unwrap();
    // SAFETY: as above.
    let e = unsafe { q.ops.post_send(kobj(), &[w(9)]) }.unwrap_err();
    assert!(e.to_string().contains("4 requests outstanding"), "{e}");
    assert_eq!(u32::from_be_bytes(mem(db + 4, 4).try_into().unwrap()), 4);
    // SAFETY: as above.
    unsafe { q.ops.post_recv(kobj(), &[r(13)]) }.unwrap();
    assert_eq!(u32::from_be_bytes(mem(db, 4).try_into().unwrap()), 1);
    write_cqe(sring, 3, 0x00, 0x42, 1, 0);
    write_cqe(rring, 1, 0x02, 0x42, 0, 0);
    assert_eq!(scq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].qp_num),
        (6, 0x42),
        "the new request, not the old"
    );
    assert_eq!(rcq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 13);
    drop((q, other, scq, rcq));
}

/// A reset racing the poller: the core resets the QP under the QP's lock, and the CQ's poller
/// runs under the CQ's lock, a different one, so the two may run at once. Here CQEs of the
/// QP are still in the CQ (as a device that broke the RESET rule would leave them) while
/// one thread polls and the other resets and posts again: no data race (Miri), no access
/// outside the tables, every completion names a `wr_id` the QP posted, old or new.
#[test]
fn reset_racing_the_poller_is_sound() {
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let (mut scq, sring) = cq(&d, 2);
    let mut q = qp(&d, QpType::RC, caps(3, 4, 1, 1, 0), 0x42, 1, false);
    let s = [Sge {
        addr: 0x10,
        length: 1,
        lkey: 1,
    }];
    let w = |id| SendWr {
        wr_id: id,
        op: SendOp::Send,
        sge: &s,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    // SAFETY: SGEs are never dereferenced (no device, no inline).
    unsafe { q.ops.post_send(kobj(), &[w(1), w(2), w(3), w(4)]) }.unwrap();
    for c in 0..4u16 {
        write_cqe(sring, u32::from(c), 0x00, 0x42, c, 0);
    }
    let (cq_ops, qp_ops) = (&mut scq, &mut q.ops);
    std::thread::scope(|sc| {
        sc.spawn(move || {
            let mut wc = [WorkCompletion::default(); 2];
            let mut got = 0;
            while got < 4 {
                let n = cq_ops.poll(&mut wc);
                for c in &wc[..n] {
                    assert!((1..=8).contains(&c.wr_id), "{c:?}");
                }
                got += n;
                std::thread::yield_now();
            }
        });
        sc.spawn(move || {
            qp_ops.reset();
            // SAFETY: as above. The poller may have freed nothing yet: a full SQ is a
            // clean refusal, not an error of this test.
            let _ = unsafe { qp_ops.post_send(kobj(), &[w(5), w(6), w(7), w(8)]) };
        });
    });
    drop((q, scq));
}

/// Issue 31: QP 0x77 is destroyed with two completions still in its CQ, and the kernel gives
/// 0x77 to a new QP before the old one's clean has run (CQE version 0: a completion names
/// its QP by number only). This test does what `Qp`'s drop does — the driver's QP table
/// lock from the kernel destroy until the clean — while another thread creates the new QP,
/// posts on it and has the device complete that post. The new QP's create waits for the lock
/// (libmlx5's `qp_table_mutex`), so the old QP's completions are read against the old QP's
/// tables (`poll_between`: a poller before the clean) or cleaned out, and the new QP's
/// completion survives the clean. Without the lock the new QP is in the registry and posts
/// first: a poller reads the old completions against it, and the clean drops its own.
fn reused_qpn_waits_for_the_clean(poll_between: bool) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let mut old = qp(&d, QpType::RC, caps(4, 0, 1, 0, 0), 0x77, 1, false);
    let (mut cq, ring) = cq(&d, 3);
    let s = [Sge {
        addr: 0x10,
        length: 1,
        lkey: 1,
    }];
    let w = |id| SendWr {
        wr_id: id,
        op: SendOp::Send,
        sge: &s,
        flags: SendFlags::SIGNALED,
        ud: None,
    };
    // SAFETY: non-inline SGEs are not read.
    unsafe { old.ops.post_send(kobj(), &[w(0xa0), w(0xa1)]) }.unwrap();
    write_cqe(ring, 0, 0x0, 0x77, 0, 0);
    write_cqe(ring, 1, 0x0, 0x77, 1, 0);
    let ids = |wc: &[WorkCompletion]| wc.iter().map(|c| c.wr_id).collect::<Vec<_>>();
    let mut wc = [WorkCompletion::default(); 4];
    let posted = AtomicBool::new(false);
    let ring_addr = ring as usize;
    let new = std::thread::scope(|sc| {
        // The core's drop of the old QP: the lock, then the kernel's DESTROY_QP (0x77 is
        // free from here on).
        let table = rverbs_uverbs::driver::Driver::qp_table_lock(&d).expect("mlx5 orders");
        let (d, posted) = (&d, &posted);
        let b = sc.spawn(move || {
            let mut new = qp(d, QpType::RC, caps(4, 0, 1, 0, 0), 0x77, 1, false);
            // SAFETY: as above.
            unsafe { new.ops.post_send(kobj(), &[w(0xb0)]) }.unwrap();
            // The device completes it, after the old QP's two.
            write_cqe(ring_addr as *mut u8, 2, 0x0, 0x77, 0, 0);
            posted.store(true, Ordering::SeqCst);
            new
        });
        // Until the create waits for the lock, or (without it) has posted.
        while d.qp_table_waiting() == 0 && !posted.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        if poll_between {
            let n = cq.poll(&mut wc);
            assert_eq!(
                ids(&wc[..n]),
                [0xa0, 0xa1],
                "a poll between the destroy and the clean reads the old QP's completions \
                 against the old QP, and nothing of the new one"
            );
        }
        // The clean (the CQ is the QP's send and receive CQ), then the lock goes.
        cq.qp_destroyed(&*old.ops, 0x77, true, &mut |_| {});
        drop(table);
        drop(old);
        b.join().unwrap()
    });
    let n = cq.poll(&mut wc);
    assert_eq!(
        ids(&wc[..n]),
        [0xb0],
        "the new QP's completion survives the old QP's clean"
    );
    assert_eq!(wc[0].qp_num, 0x77);
    drop(new);
    drop(cq);
}

#[test]
fn reused_qpn_created_during_a_destroy_keeps_its_completions() {
    reused_qpn_waits_for_the_clean(false);
}

#[test]
fn reused_qpn_created_during_a_destroy_is_not_read_for_the_old() {
    reused_qpn_waits_for_the_clean(true);
}

/// Issue 31, the SRQ case: the old and the new QP 0x77 receive through the same SRQ. The old
/// QP's pending receive completion goes with its clean (its WQE back to the SRQ, its `wr_id`
/// to the core); the new QP's receive, completed by the device once the new QP exists, is
/// neither cleaned out nor reported to the core as dropped (without the lock both were:
/// a receive "completed" with no completion ever polled).
#[test]
fn reused_qpn_on_the_same_srq_keeps_its_receive() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut u = Uars::new();
    let d = driver(&mut u, BfPolicy::default(), false);
    let mut srq: Box<dyn SrqOps> = d
        .sim_create_srq(fd(), 3, 1, &mut |_, uout| {
            uout[0..4].copy_from_slice(&0x66u32.to_ne_bytes());
            Ok(SrqCreated {
                handle: 1,
                max_wr: 3,
                max_sge: 1,
                srq_num: 0x66,
            })
        })
        .unwrap();
    let old = qp(&d, QpType::RC, caps(1, 0, 1, 0, 0), 0x77, 1, true);
    let (mut cq, ring) = cq(&d, 4);
    let s = [Sge {
        addr: 0x700,
        length: 0,
        lkey: 7,
    }];
    let r = |id| RecvWr { wr_id: id, sge: &s };
    // SAFETY: the SGEs are never touched.
    unsafe { srq.post_recv(kobj(), &[r(100), r(101)]) }.unwrap();
    // The old QP's receive took SRQ WQE 0.
    write_cqe(ring, 0, 0x2, 0x77, 0, 0x66);
    let posted = AtomicBool::new(false);
    let ring_addr = ring as usize;
    let mut dropped = Vec::new();
    let new = std::thread::scope(|sc| {
        let table = rverbs_uverbs::driver::Driver::qp_table_lock(&d).expect("mlx5 orders");
        let (d, posted) = (&d, &posted);
        let b = sc.spawn(move || {
            let new = qp(d, QpType::RC, caps(1, 0, 1, 0, 0), 0x77, 1, true);
            // The new QP's receive takes SRQ WQE 1.
            write_cqe(ring_addr as *mut u8, 1, 0x2, 0x77, 1, 0x66);
            posted.store(true, Ordering::SeqCst);
            new
        });
        while d.qp_table_waiting() == 0 && !posted.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        cq.qp_destroyed(&*old.ops, 0x77, true, &mut |w| dropped.push(w));
        drop(table);
        drop(old);
        b.join().unwrap()
    });
    assert_eq!(dropped, [100], "the clean drops the old QP's receive only");
    let mut wc = [WorkCompletion::default(); 2];
    let n = cq.poll(&mut wc);
    assert_eq!(
        wc[..n]
            .iter()
            .map(|c| (c.wr_id, c.qp_num))
            .collect::<Vec<_>>(),
        [(101, 0x77)],
        "the new QP's receive is polled"
    );
    drop(new);
    drop(cq);
    drop(srq);
}

/// With CQE version 1 a completion names its QP by user index, freed only after the clean:
/// nothing to order, and (as libmlx5) no QP table lock is taken.
#[test]
fn cqe_v1_takes_no_qp_table_lock() {
    let mut u = Uars::new();
    let i = Mlx5ContextInfo {
        cqe_version: 1,
        ..info()
    };
    // SAFETY: the driver is dropped before `u`.
    let d =
        unsafe { Mlx5Driver::from_parts(i, &u.pages(), BfPolicy::default(), vec![false]) }.unwrap();
    assert!(rverbs_uverbs::driver::Driver::qp_table_lock(&d).is_none());
    assert!(rverbs_uverbs::driver::Driver::qp_table_lock(&driver(
        &mut u,
        BfPolicy::default(),
        false
    ))
    .is_some());
}
