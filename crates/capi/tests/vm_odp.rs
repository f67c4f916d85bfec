//! On-demand paging through the C API, called from Rust as C would: `ibv_query_device_ex`'s
//! `odp_caps`, `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND` and the `advise_mr` slot that the
//! inline `ibv_advise_mr` calls (its errors positive errno values, as rdma-core's); and
//! `ibv_create_qp` with an SRQ, which ignores the receive capabilities as `ibv_create_qp(3)`
//! says (pyverbs' `test_odp_rc_srq_traffic` asks for `max_recv_wr` 1000 beside an SRQ). The
//! traffic into ODP memory through the drop-in is pyverbs' `test_odp` on the newest kernel
//! (docs/capi.md). Runs in every guest.

#![allow(unsafe_code)]

use std::ptr::null_mut;

use rverbs_capi::abi::*;
use rverbs_capi::ibverbs::*;

const IBV_ACCESS_LOCAL_WRITE: i32 = 1;
const IBV_ACCESS_ON_DEMAND: i32 = 1 << 6;

mod common;
use common::{errno, open_dev_a};

/// The `verbs_context` around `ctx` (what libibverbs' inline functions reach).
///
/// # Safety
/// `ctx` is a context of ours.
unsafe fn vctx(ctx: *mut ibv_context) -> *mut verbs_context {
    // SAFETY: our contexts sit at the end of a verbs_context.
    unsafe {
        ctx.cast::<u8>()
            .sub(std::mem::offset_of!(verbs_context, context))
            .cast::<verbs_context>()
    }
}

fn kernel_has_odp() -> bool {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    r.split('.').next().unwrap().parse::<u32>().unwrap() >= 7
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn qps_on_an_srq_ignore_the_receive_caps() {
    let ctx = open_dev_a();
    // SAFETY: objects of ours, created here; writable locals.
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 1000, null_mut(), null_mut(), 0);
        assert!(!pd.is_null() && !cq.is_null());
        let mut sa = ibv_srq_init_attr {
            srq_context: null_mut(),
            attr: ibv_srq_attr {
                max_wr: 2000,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        let srq = ibv_create_srq(pd, &mut sa);
        assert!(!srq.is_null(), "ibv_create_srq: errno {}", errno());
        let mut qps = Vec::new();
        for _ in 0..2 {
            // pyverbs' OdpSrqRc: RC, one CQ for both queues, max_recv_wr 1000 beside the SRQ
            let mut ia = ibv_qp_init_attr {
                qp_context: null_mut(),
                send_cq: cq,
                recv_cq: cq,
                srq,
                cap: ibv_qp_cap {
                    max_send_wr: 1,
                    max_recv_wr: 1000,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                qp_type: 2,
                sq_sig_all: 0,
            };
            let qp = ibv_create_qp(pd, &mut ia);
            assert!(!qp.is_null(), "ibv_create_qp on an SRQ: errno {}", errno());
            assert_eq!((*qp).srq, srq);
            assert!(ia.cap.max_send_wr >= 1);
            assert_eq!(
                (ia.cap.max_recv_wr, ia.cap.max_recv_sge),
                (0, 0),
                "the QP has no receive queue of its own"
            );
            qps.push(qp);
        }
        for qp in qps {
            assert_eq!(ibv_destroy_qp(qp), 0);
        }
        assert_eq!(ibv_destroy_srq(srq), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// `odp_caps` of `ibv_query_device_ex`, `ibv_reg_mr` with `IBV_ACCESS_ON_DEMAND` and
/// `ibv_advise_mr` (the slot): on a kernel with ODP (7.x) the caps, a registration of untouched
/// memory, prefetch, and every refusal; on one without, the caps empty and both refused with
/// `EOPNOTSUPP`.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn odp_caps_registration_and_advice_through_the_c_api() {
    let ctx = open_dev_a();
    let odp = kernel_has_odp();
    // SAFETY: objects of ours, created here; writable locals; the mapping outlives the MRs.
    unsafe {
        let v = vctx(ctx);
        let q = (*v).query_device_ex.expect("query_device_ex");
        let mut a: ibv_device_attr_ex = std::mem::zeroed();
        assert_eq!(
            q(
                ctx,
                std::ptr::null(),
                &mut a,
                size_of::<ibv_device_attr_ex>()
            ),
            0
        );
        let advise = (*v).advise_mr.expect("advise_mr");
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let len = 4 * 4096;
        let mem = libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(mem, libc::MAP_FAILED);
        let access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND;
        if !odp {
            assert_eq!(a.odp_caps.general_caps, 0);
            assert!(ibv_reg_mr(pd, mem, len, access).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
            let mr = ibv_reg_mr(pd, mem, len, IBV_ACCESS_LOCAL_WRITE);
            assert!(!mr.is_null());
            let mut sge = ibv_sge {
                addr: mem as u64,
                length: 4096,
                lkey: (*mr).lkey,
            };
            assert_eq!(advise(pd, 0, 1, &mut sge, 1), libc::EOPNOTSUPP);
            assert_eq!(ibv_dereg_mr(mr), 0);
        } else {
            assert_eq!(a.odp_caps.general_caps & 3, 1, "ODP, not implicit");
            assert_eq!(a.odp_caps.rc_odp_caps & 0x3f, 0x3f, "SEND..SRQ_RECV on RC");
            let mr = ibv_reg_mr(pd, mem, len, access);
            assert!(!mr.is_null(), "ibv_reg_mr(ON_DEMAND): errno {}", errno());
            let mut sge = ibv_sge {
                addr: mem as u64,
                length: len as u32,
                lkey: (*mr).lkey,
            };
            for advice in 0..3 {
                for flags in [0, 1] {
                    assert_eq!(
                        advise(pd, advice, flags, &mut sge, 1),
                        0,
                        "{advice} {flags}"
                    );
                }
            }
            // refusals: positive errno values
            assert_eq!(advise(pd, 0, 1, &mut sge, 0), libc::EINVAL, "no SGE");
            assert_eq!(advise(pd, 0, 1, null_mut(), 1), libc::EINVAL, "NULL list");
            assert_eq!(advise(pd, 3, 1, &mut sge, 1), libc::EINVAL, "advice 3");
            assert_eq!(advise(pd, 0, 2, &mut sge, 1), libc::EINVAL, "flag 2");
            let mut past = ibv_sge {
                addr: mem as u64 + 1,
                ..sge
            };
            assert_eq!(advise(pd, 0, 1, &mut past, 1), libc::EINVAL, "past the end");
            assert_eq!(
                advise(null_mut(), 0, 1, &mut sge, 1),
                libc::EINVAL,
                "NULL pd"
            );
            let pinned = ibv_reg_mr(pd, mem, 4096, IBV_ACCESS_LOCAL_WRITE);
            assert!(!pinned.is_null());
            let mut p = ibv_sge {
                addr: mem as u64,
                length: 4096,
                lkey: (*pinned).lkey,
            };
            assert_eq!(
                advise(pd, 0, 1, &mut p, 1),
                libc::EINVAL,
                "not an ODP region"
            );
            assert_eq!(ibv_dereg_mr(pinned), 0);
            assert_eq!(ibv_dereg_mr(mr), 0);
            assert_eq!(advise(pd, 0, 1, &mut sge, 1), libc::EINVAL, "deregistered");
            // implicit ODP (rxe does not report it): refused, EOPNOTSUPP
            assert!(ibv_reg_mr(pd, null_mut(), usize::MAX, access).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
        }
        assert_eq!(libc::munmap(mem, len), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
