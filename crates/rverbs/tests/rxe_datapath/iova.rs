//! A region the device addresses at an iova other than its address (`register_raw_iova`;
//! the C drop-in's `ibv_reg_mr_iova2`): local SGEs and a peer's RDMA WRITE and READ name the
//! iova range and reach the memory at the address; the address itself is not the region's
//! range on the device.

use super::*;
use rverbs::uverbs::mr::register_raw_iova;
use std::io::ErrorKind;

const PAGE: usize = 4096;
/// Far from any address of the process's heap or mappings, so that a request reaching the
/// memory through the address instead of the iova (or the reverse) cannot pass.
const IOVA: u64 = 0x7_0000_0000;

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_region_at_another_iova_is_reached_through_the_iova() {
    each_topo("iova", |t| {
        let (a, b) = rc_pair(t, &Opts::default());
        // B's memory: the middle page of a safe region whose two other pages are guards.
        let guard = reg(&b.side.pd, 3 * PAGE, ALL_ACCESS);
        guard.fill(0..3 * PAGE, 0x77);
        let base = guard.addr() + PAGE as u64;
        assert_ne!(base, IOVA);
        // SAFETY: the range is the middle page of `guard`'s mapping, which outlives the region
        // (deregistered below, before `guard` drops); every request naming it has completed
        // by then; no Rust reference to it exists (guard's copies only).
        let raw = unsafe { register_raw_iova(&b.side.pd, base, PAGE, IOVA, ALL_ACCESS) }
            .unwrap_or_else(|e| panic!("register at iova {IOVA:#x}: {e}"));
        assert_eq!((raw.addr(), raw.iova(), raw.len()), (base, IOVA, PAGE));

        // A peer's RDMA WRITE at iova + 100.
        let w = pattern(1, 600);
        a.mr.write_at(0, &w);
        let s = [a.mr.sge(0..600)];
        let op = SendOp::RdmaWrite {
            remote_addr: IOVA + 100,
            rkey: raw.rkey(),
        };
        send_ok(&a.qp, &[wr(1, op, &s)]);
        assert_wc(&poll1(&a.cq), 1, WcOpcode::RDMA_WRITE);

        // A receive whose SGE names iova + 2000 (B's local key and the iova space).
        let rs = [Sge {
            addr: IOVA + 2000,
            length: 1000,
            lkey: raw.lkey(),
        }];
        // SAFETY: the SGE lies inside `raw`, registered until after the completion below.
        unsafe { b.qp.post_recv_raw(&[RecvWr { wr_id: 9, sge: &rs }]) }.unwrap();
        let m = pattern(2, 1000);
        a.mr.write_at(1000, &m);
        let s = [a.mr.sge(1000..2000)];
        send_ok(&a.qp, &[wr(2, SendOp::Send, &s)]);
        assert_wc(&poll1(&a.cq), 2, WcOpcode::SEND);
        let wc = poll1(&b.cq);
        assert_wc(&wc, 9, WcOpcode::RECV);
        assert_eq!(wc.byte_len, 1000);

        // A peer's RDMA READ of iova + 3000 .. + 3200, bytes B wrote at the address.
        let r = pattern(3, 200);
        let g = {
            let mut g = guard.to_vec();
            g[PAGE + 3000..PAGE + 3200].copy_from_slice(&r);
            g
        };
        guard.write_at(PAGE + 3000, &r);
        let d = [a.mr.sge(4000..4200)];
        let op = SendOp::RdmaRead {
            remote_addr: IOVA + 3000,
            rkey: raw.rkey(),
        };
        send_ok(&a.qp, &[wr(3, op, &d)]);
        assert_wc(&poll1(&a.cq), 3, WcOpcode::RDMA_READ);
        assert_eq!(&a.mr.to_vec()[4000..4200], &r[..]);

        // Every byte of B's three pages: the WRITE and the SEND landed at the address plus
        // their offsets into the iova range, nothing else changed (guard pages included).
        let got = guard.to_vec();
        let mut want = g;
        want[PAGE + 100..PAGE + 700].copy_from_slice(&w);
        want[PAGE + 2000..PAGE + 3000].copy_from_slice(&m);
        assert_eq!(got.len(), want.len());
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "byte {i} of the three pages (region page from {PAGE}): {:#x}, expected {:#x}",
                got[i], want[i]
            );
        }

        // The address is not the region's range on the device: a WRITE there with its rkey
        // is refused by the responder (last: it ends the connection).
        let s = [a.mr.sge(0..8)];
        let op = SendOp::RdmaWrite {
            remote_addr: base,
            rkey: raw.rkey(),
        };
        send_ok(&a.qp, &[wr(4, op, &s)]);
        assert_status(&poll1(&a.cq), 4, WcStatus::REM_ACCESS_ERR);
        assert_eq!(guard.to_vec(), got, "a WRITE at the address changed memory");
        drop(a);
        drop(b.qp);
        raw.deregister()
            .unwrap_or_else(|(_, e)| panic!("deregister: {e}"));
    });
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn an_iova_region_is_refused_by_name_for_odp_another_page_offset_and_past_the_end() {
    let sa = Side::open(&dev_name());
    let buf = reg(&sa.pd, 2 * PAGE, ALL_ACCESS);
    let dev = sa.ctx.name().to_string();
    let cases = [
        (
            AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND,
            IOVA,
            ErrorKind::Unsupported,
            "an on-demand-paging region at an iova other than its address",
        ),
        (
            AccessFlags::LOCAL_WRITE,
            IOVA + 8,
            ErrorKind::InvalidInput,
            "the iova's offset in a page (0x8) differs from the address's (0x0)",
        ),
        (
            AccessFlags::LOCAL_WRITE,
            // Two pages from the last page of the 64-bit space.
            u64::MAX - 4095,
            ErrorKind::InvalidInput,
            "the iova range passes the end of the 64-bit space",
        ),
    ];
    for (access, iova, kind, what) in cases {
        // SAFETY: refused before the kernel: nothing is registered.
        let e = unsafe { register_raw_iova(&sa.pd, buf.addr(), 2 * PAGE, iova, access) }
            .map(|_| ())
            .expect_err(what);
        let msg = e.to_string();
        assert_eq!(e.kind(), kind, "{msg}");
        assert!(msg.contains(what), "{msg}");
        assert!(msg.contains(&format!("(iova {iova:#x}) on {dev}")), "{msg}");
    }
}
