//! Fuzz entry points for the parsers of bytes the kernel or a device writes: mlx5 CQEs and the
//! mlx5 CQ poller over a ring of them, the rxe queue header and CQ ring, and the mlx5 driver
//! responses (alloc_ucontext, create_cq, create_qp, create_srq).
//!
//! **Not for users: no stability, fuzz support only.** This module exists only with
//! `--cfg rverbs_fuzzing` (set by `cargo xtask fuzz` for the fuzz targets of the repository's
//! `fuzz/` crate; no Cargo feature, so no dependent crate turns it on) and in this crate's
//! unit tests, which run it over the committed seeds. Each
//! function is safe, takes the fuzzer's bytes and runs the crate's own (crate-private) parsers
//! on them, asserting what must hold for any input: no panic other than these asserts, values
//! in range, and no access outside the memory given (the fuzz build runs under
//! AddressSanitizer). A failed assert is a finding.
//!
//! The rings here are ordinary heap memory standing in for the device's or the kernel's: the
//! input is copied in before any view of it exists, and nothing else touches it while the
//! view is used, which is what the views' `unsafe` constructors ask.

#![allow(unsafe_code)]

use std::os::fd::AsFd;
use std::ptr::NonNull;

use rverbs_uverbs::driver::{CqCreated, Driver, QpCreated, QpRequest, SrqCreated};
use rverbs_uverbs::qp::{QpCaps, QpType};
use rverbs_uverbs::RawWc;
use rverbs_uverbs::{WcStatus, WorkCompletion};
use zerocopy::IntoBytes;

use crate::mlx5::abi::{mlx5_ib_alloc_ucontext_resp, MLX5_LIB_CAP_DYN_UAR};
use crate::mlx5::cq::parse_create_cq_resp;
use crate::mlx5::driver::{static_uar_pages, Mlx5Driver};
use crate::mlx5::wq::BfPolicy;
use crate::mlx5::{
    parse_cqe, CqBuf, Cqe64, CqeSize, Mlx5ContextUdata, Mlx5Cq, ParseFault, UarPage, WqeRef,
};
use crate::rxe::abi::QUEUE_DATA_OFFSET;
use crate::rxe::{QueueKind, RxeCq, RxeQueue};

/// What every completion decoded from `cqe` must satisfy.
fn check_mlx5_wc(cqe: &Cqe64, wc: &WorkCompletion) {
    assert_eq!(wc.qp_num, cqe.qpn());
    assert!(wc.qp_num <= 0xff_ffff);
    if wc.status == WcStatus::SUCCESS {
        assert_eq!(wc.vendor_err, 0);
    }
    if let Some((fault, _)) = ParseFault::from_vendor_err(wc.vendor_err) {
        assert_eq!(wc.status, WcStatus::GENERAL_ERR);
        assert!(fault.name().is_some(), "unnamed fault {fault:?}");
    }
}

/// The mlx5 CQE parser (the one the CQ poller runs on hardware) on one CQE slot, then the
/// poller over an 8-entry ring holding the input.
///
/// Input: bytes 0..64, or 0..128 when there are that many, are a CQE slot; the byte after it
/// steers the `wr_id` lookup (even: found, odd: not found); all of it is also copied into the
/// ring in 64-byte chunks and polled (lap 0: the owner bit must be 0 for a CQE to count).
pub fn mlx5_cqe(data: &[u8]) {
    let slot_len = if data.len() >= 128 { 128 } else { 64 };
    if data.len() >= slot_len {
        let cqe = Cqe64::from_slot(&data[..slot_len]).expect("64 or 128 bytes");
        let found = data.get(slot_len).map_or(true, |b| b & 1 == 0);
        let mut calls = 0;
        let wc = parse_cqe(&cqe, &mut |_w: WqeRef| {
            calls += 1;
            found.then_some(0x1234)
        });
        assert!(calls <= 1, "{calls} lookups for one CQE");
        check_mlx5_wc(&cqe, &wc);
    } else {
        assert!(Cqe64::from_slot(data).is_err());
    }

    let buf = CqBuf::new(7, CqeSize::B64).expect("CQ buffer");
    let chunks: Vec<&[u8]> = data.chunks_exact(64).take(8).collect();
    for (i, c) in chunks.iter().enumerate() {
        // SAFETY: slot i < 8 lies in the 8-entry ring `buf` owns; nothing reads it yet.
        unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), buf.ring_ptr().add(i * 64), 64) };
    }
    let mut uar_mem = vec![0u64; 512];
    // SAFETY: `uar_mem` outlives the CQ (dropped after it below) and is only reached through
    // this pointer while the CQ lives.
    let uar = unsafe { UarPage::new(uar_mem.as_mut_ptr().cast(), 4096) }.expect("UAR");
    let mut cq = Mlx5Cq::new(buf, 1, uar, |_w: WqeRef| Some(7)).expect("CQ");
    let mut out = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut out);
    assert!(n <= chunks.len());
    for (c, wc) in chunks.iter().zip(&out[..n]) {
        check_mlx5_wc(&Cqe64::from_slot(c).expect("64 bytes"), wc);
    }
    let mut raw = [RawWc::default(); 16];
    assert_eq!(cq.poll_raw(&mut raw), 0, "polled completions came back");
    cq.arm(data.first().is_some_and(|b| b & 1 == 1));
    drop(cq);
    drop(uar_mem);
}

/// The rxe queue header validation for every queue kind, then the rxe CQ poller, over a
/// mapping holding the input (header at 0: `log2_elem_size`, `index_mask`, producer index at
/// 128, consumer index at 256; elements from 384).
pub fn rxe_queue(data: &[u8]) {
    // 8-aligned as the mapping is; at least the header so the lengths below vary only past it.
    let len = data.len().max(QUEUE_DATA_OFFSET);
    let mut mem = vec![0u64; len.div_ceil(8)];
    let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).expect("Vec pointer");
    // SAFETY: `mem` holds at least `data.len()` bytes; no view of it exists yet.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base.as_ptr(), data.len()) };
    for kind in [
        QueueKind::Send,
        QueueKind::Recv,
        QueueKind::Srq,
        QueueKind::Completion,
    ] {
        // SAFETY: `mem` is live, readable and writable for `len` bytes, and outlives every
        // view (all dropped before it); each view is the only user of the buffer while used.
        let Ok(q) = (unsafe { RxeQueue::new(base, len, kind) }) else {
            continue;
        };
        assert!(q.elem_size() >= kind.min_elem_size());
        assert!(q.slots().is_power_of_two());
        let end = q.slots() as usize * q.elem_size() + QUEUE_DATA_OFFSET;
        assert!(end <= len, "{end} bytes of queue in a {len}-byte mapping");
        assert!(q.len() <= q.capacity());
        if kind != QueueKind::Completion {
            continue;
        }
        let mut cq = RxeCq::new(q).expect("a completion view");
        let pending = cq.pending();
        let mut out = [WorkCompletion::default(); 8];
        let mut raw = [RawWc::default(); 8];
        let (mut got, mut rounds) = (0u64, 0);
        loop {
            let n = if rounds % 2 == 0 {
                cq.poll(&mut out)
            } else {
                cq.poll_raw(&mut raw)
            };
            if n == 0 {
                break;
            }
            got += n as u64;
            rounds += 1;
            assert!(got <= u64::from(pending), "{got} completions of {pending}");
        }
        assert_eq!(got, u64::from(pending));
        assert_eq!(cq.pending(), 0);
        assert!(cq.poll_one().is_none());
    }
    drop(mem);
}

/// The driver responses: `alloc_ucontext` (both page sizes, both CQE versions asked for),
/// `create_cq`'s CQ number, and a whole mlx5 driver creating a CQ, a QP and an SRQ from
/// responses the input gives.
///
/// Input for the creates: byte 0 picks the object (0 CQ, 1 QP on a CQ, 2 SRQ); bytes 1..25
/// are the core response (a QP's number and caps, an SRQ's max_wr, max_sge and number);
/// the rest is the driver response buffer the kernel fills.
pub fn mlx5_responses(data: &[u8]) {
    for page in [4096usize, 65536] {
        for max in [0, 1] {
            let mut u = Mlx5ContextUdata::new(page);
            u.max_cqe_version = max;
            if let Ok(info) = u.parse_response(data, page) {
                assert!(info.filled_len <= data.len());
                assert!(info.cqe_version <= u.max_cqe_version);
                assert!(info.uar_size.is_power_of_two());
                assert!(info.num_uars_per_page != 0);
                // tot_bfregs 0 only where dynamic UARs were asked for (then there are no
                // static UAR pages to ring doorbells through).
                assert!(info.tot_bfregs != 0 || u.lib_caps & MLX5_LIB_CAP_DYN_UAR != 0);
            }
        }
    }
    if let Ok(cqn) = parse_create_cq_resp(data) {
        assert!(cqn <= 0xff_ffff);
    }
    let _ = mlx5_creates(data);
}

/// A little-endian u32 at `at`, 0 past the end.
fn word(data: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    for (i, x) in b.iter_mut().enumerate() {
        *x = data.get(at + i).copied().unwrap_or(0);
    }
    u32::from_le_bytes(b)
}

/// The create part of [`mlx5_responses`]; true when the object was created.
fn mlx5_creates(data: &[u8]) -> bool {
    let Some(&which) = data.first() else {
        return false;
    };
    let core = |i: usize| word(data, 1 + 4 * i);
    let driver_resp = data.get(25..).unwrap_or(&[]);
    // A context as a ConnectX answers it (two static UAR pages).
    let ctx = mlx5_ib_alloc_ucontext_resp {
        qp_tab_size: 1 << 18,
        bf_reg_size: 512,
        tot_bfregs: 8,
        cache_line_size: 64,
        max_sq_desc_sz: 512,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
        num_ports: 1,
        response_length: 72,
        cqe_version: 1,
        log_uar_size: 12,
        num_uars_per_page: 1,
        ..Default::default()
    };
    let mut udata = Mlx5ContextUdata::new(4096);
    udata.max_cqe_version = 1;
    let info = udata
        .parse_response(ctx.as_bytes(), 4096)
        .expect("a valid context response");
    let pages = static_uar_pages(&info);
    let mut uar_mem = vec![0u64; pages * 512];
    let base = uar_mem.as_mut_ptr().cast::<u8>();
    // SAFETY: page i is `uar_mem[i * 4096..][..4096]`, in bounds.
    let uars: Vec<(*mut u8, usize)> = (0..pages)
        .map(|i| (unsafe { base.add(i * 4096) }, 4096))
        .collect();
    // SAFETY: `uar_mem` outlives the driver and every object made through it (all dropped
    // before it below) and is only reached through these pointers meanwhile.
    let Ok(driver) =
        (unsafe { Mlx5Driver::from_parts(info, &uars, BfPolicy::default(), vec![true]) })
    else {
        return false;
    };
    let null = std::fs::File::open("/dev/null").expect("/dev/null");
    let fd = null.as_fd();
    let fill = |resp: &mut [u8]| {
        let n = resp.len().min(driver_resp.len());
        resp[..n].copy_from_slice(&driver_resp[..n]);
    };
    let created = match which % 3 {
        0 => {
            let mut create = |_req: &[u8], resp: &mut [u8]| {
                fill(resp);
                Ok(CqCreated {
                    handle: 1,
                    cqe: core(0),
                })
            };
            // SAFETY: the callback stands in for the kernel's CREATE_CQ (see the module doc):
            // it fills the response buffer it is given, and the CQ maps nothing from it.
            #[allow(unused_unsafe)]
            let mut cq = unsafe { driver.create_cq(fd, 16, &mut create) };
            if let Ok(cq) = &mut cq {
                let mut out = [WorkCompletion::default(); 4];
                assert_eq!(cq.poll(&mut out), 0, "a new CQ is empty");
            }
            cq.is_ok()
        }
        1 => {
            let req = QpRequest {
                qp_type: [QpType::RC, QpType::UC, QpType::UD][(which as usize / 3) % 3],
                caps: QpCaps {
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    max_send_sge: 2,
                    max_recv_sge: 2,
                    max_inline_data: 64,
                },
                sq_sig_all: which & 0x80 != 0,
                has_srq: false,
                srq_handle: None,
            };
            let mut create = |_req: &[u8], resp: &mut [u8]| {
                fill(resp);
                Ok(QpCreated {
                    handle: 2,
                    qp_num: core(0),
                    caps: QpCaps {
                        max_send_wr: core(1),
                        max_recv_wr: core(2),
                        max_send_sge: core(3),
                        max_recv_sge: core(4),
                        max_inline_data: core(5),
                    },
                })
            };
            // SAFETY: as for the CQ: the callback stands in for CREATE_QP, and the QP maps
            // nothing the response names (its blue-flame register is checked against the
            // context's UAR pages).
            #[allow(unused_unsafe)]
            let qp = unsafe { driver.create_qp(fd, &req, &mut create) };
            qp.is_ok()
        }
        _ => {
            let mut create = |_req: &[u8], resp: &mut [u8]| {
                fill(resp);
                Ok(SrqCreated {
                    handle: 3,
                    max_wr: core(0),
                    max_sge: core(1),
                    srq_num: core(2),
                })
            };
            // SAFETY: as for the CQ: the callback stands in for CREATE_SRQ.
            #[allow(unused_unsafe)]
            let srq = unsafe { driver.create_srq(fd, 32, 2, &mut create) };
            if srq.is_ok() {
                assert!(core(2) <= 0xff_ffff, "SRQ {:#x} accepted", core(2));
            }
            srq.is_ok()
        }
    };
    drop(driver);
    drop(uar_mem);
    created
}

#[cfg(test)]
#[path = "../../../fuzz/seeds.rs"]
mod seeds;

#[cfg(test)]
mod tests {
    use super::seeds::seeds;
    use super::*;

    #[test]
    fn mlx5_cqe_seeds_parse() {
        for (name, b) in seeds("mlx5_cqe") {
            mlx5_cqe(&b);
            let cqe = Cqe64::from_slot(&b[..64]).unwrap();
            let wc = parse_cqe(&cqe, &mut |_w: WqeRef| Some(9));
            match name.as_str() {
                "req_send_lookup_found" | "ring_of_five" => {
                    assert_eq!(
                        (wc.status, wc.qp_num, wc.wr_id),
                        (WcStatus::SUCCESS, 0x123, 9)
                    )
                }
                "error_cqe" => assert_eq!(wc.status, WcStatus::LOC_PROT_ERR),
                other => panic!("a seed without a check: {other}"),
            }
        }
    }

    #[test]
    fn mlx5_response_seeds_parse() {
        for (name, b) in seeds("mlx5_responses") {
            mlx5_responses(&b);
            let mut u = Mlx5ContextUdata::new(4096);
            u.max_cqe_version = 1;
            let info = u.parse_response(&b, 4096);
            match name.as_str() {
                "ucontext_full" => {
                    let i = info.unwrap();
                    assert_eq!((i.tot_bfregs, i.cqe_version, i.filled_len), (16, 1, 72));
                    assert_eq!(i.hca_core_clock_offset, Some(0x1010));
                }
                "ucontext_legacy_36" => assert_eq!(info.unwrap().cqe_version, 0),
                "create_cq" | "create_qp" | "create_srq" => {
                    assert!(mlx5_creates(&b), "{name} creates nothing")
                }
                other => panic!("a seed without a check: {other}"),
            }
        }
    }

    #[test]
    fn rxe_queue_seeds_parse() {
        for (name, b) in seeds("rxe_queue") {
            rxe_queue(&b);
            let mut mem = vec![0u64; b.len().div_ceil(8)];
            let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
            // SAFETY: `mem` holds `b.len()` bytes; no view exists yet.
            unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), base.as_ptr(), b.len()) };
            let kind = if name.starts_with("cq") {
                QueueKind::Completion
            } else {
                QueueKind::Send
            };
            // SAFETY: `mem` outlives the view, the only user of it.
            let q = unsafe { RxeQueue::new(base, b.len(), kind) }.unwrap();
            match name.as_str() {
                "cq_three_completions" => assert_eq!(q.len(), 3),
                "cq_wrapped" => assert_eq!(q.len(), 3),
                "send_queue_header" => assert_eq!((q.slots(), q.elem_size()), (4, 256)),
                other => panic!("a seed without a check: {other}"),
            }
            drop(mem);
        }
    }
}
