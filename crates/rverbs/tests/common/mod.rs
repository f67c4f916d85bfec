//! Shared helpers of the device tests (they run in the VM; see docs/testing.md).
#![allow(dead_code)]

use std::sync::Arc;

use rverbs::rc::{RcPath, RcRemote};
use rverbs::uverbs::ah::AhAttr;
use rverbs::uverbs::context::Context;
use rverbs::uverbs::cq::Cq;
use rverbs::uverbs::gid::GidType;
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::port::Mtu;
use rverbs::uverbs::qp::Qp;
use rverbs::uverbs::{RecvWr, SendOp, SendWr, WcOpcode, WcStatus};

/// The device under test: `$RVERBS_DEV_A` (set by the VM), else `rxe0`.
pub fn dev_name() -> String {
    std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into())
}

/// The second device of the two-node topology, when there is one.
pub fn dev_b() -> Option<String> {
    std::env::var("RVERBS_DEV_B").ok().filter(|s| !s.is_empty())
}

/// Opens `name` with its provider; a missing device is a failure (these tests run only in
/// the VM, where the device must exist).
pub fn open(name: &str) -> Arc<Context> {
    rverbs::provider::open_by_name(name)
        .unwrap_or_else(|e| panic!("open {name} (the VM must provide it): {e}"))
}

pub fn ctx() -> Arc<Context> {
    open(&dev_name())
}

/// Index and GID of the first RoCE v2 IPv4-mapped GID of port 1.
pub fn roce_v2_gid(ctx: &Context) -> (u8, [u8; 16]) {
    let table = ctx.query_gid_table().expect("query GID table");
    let e = table
        .iter()
        .find(|e| {
            e.port == 1
                && e.gid_type == GidType::ROCE_V2
                && e.gid.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
        })
        .unwrap_or_else(|| panic!("no RoCE v2 IPv4 GID on {}: {table:?}", ctx.name()));
    (e.index as u8, e.gid.0)
}

pub const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// The RC path of the device tests: port 1, MTU 1024, `access` granted to the peer, four
/// outstanding RDMA READ/atomics each way, ACK timeout 14, 7 retries, RNR retries forever.
pub const fn rc_path(access: AccessFlags) -> RcPath {
    RcPath {
        port_num: 1,
        pkey_index: 0,
        access,
        path_mtu: Mtu::MTU_1024,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
    }
}

/// Moves `qp` RESET→INIT→RTR→RTS towards the remote QP `rqpn` at `rgid`, sending from our GID
/// index `sgid` ([`rverbs::rc::connect`], both first PSNs 0).
pub fn connect(qp: &Qp, rqpn: u32, rgid: [u8; 16], sgid: u8, access: AccessFlags) {
    let remote = RcRemote {
        qp_num: rqpn,
        psn: 0,
        ah: AhAttr::roce(1, rgid, sgid),
    };
    rverbs::rc::connect(qp, &rc_path(access), 0, &remote)
        .unwrap_or_else(|e| panic!("connect QP {:#x}: {e}", qp.qp_num()));
}

/// Polls `cq` until `n` completions arrived or 10 s passed (a hang is a failure, not a wait).
pub fn poll_n(cq: &Cq, n: usize) -> Vec<rverbs::uverbs::WorkCompletion> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut buf = [rverbs::uverbs::WorkCompletion::default(); 16];
    while out.len() < n {
        let k = cq.poll(&mut buf[..(n - out.len()).min(16)]);
        out.extend_from_slice(&buf[..k]);
        if k == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out: {} of {n} completions: {out:?}",
                out.len()
            );
            std::thread::yield_now();
        }
    }
    out
}

/// Open fds of this process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Mappings of this process.
pub fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

/// Mappings of the uverbs device (provider rings, doorbell pages) in this process.
pub fn device_map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("/dev/infiniband/"))
        .count()
}

/// Bytes of address space this process has mapped (the sum of /proc/self/maps ranges).
pub fn mapped_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let range = l.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            Some(u64::from_str_radix(b, 16).ok()? - u64::from_str_radix(a, 16).ok()?)
        })
        .sum()
}

/// Moves data between two connected RC QPs `a` → `b` (CQs `cq_a`, `cq_b`) through two 4 KiB
/// MRs of `pd` (every access), `ma` on a's side and `mb` on b's: a SEND with immediate of
/// `msg` (checked at the receiver with its immediate, length and QP number), an RDMA WRITE
/// into `mb` at 2048 and an RDMA READ of it back into `ma` at 1024, each completion and
/// payload checked. The MRs are dropped after the QPs are done with them (every request has
/// completed when this returns).
pub fn send_write_read(
    pd: &Arc<Pd>,
    (a, cq_a): (&Qp, &Cq),
    (b, cq_b): (&Qp, &Cq),
    msg: &[u8],
    imm: u32,
) {
    let ma = Mr::register(pd, PageBuf::new(4096).unwrap(), ALL_ACCESS).unwrap();
    let mb = Mr::register(pd, PageBuf::new(4096).unwrap(), ALL_ACCESS).unwrap();
    let n = msg.len();
    ma.write_at(0, msg);
    let recv_sge = [mb.sge(0..1024)];
    // SAFETY: mb outlives the completion polled below.
    b.post_recv(&[RecvWr {
        wr_id: 7,
        sge: &recv_sge,
    }])
    .unwrap();
    let send_sge = [ma.sge(0..n)];
    let wr = SendWr {
        op: SendOp::SendWithImm { imm },
        ..SendWr::send(1, &send_sge)
    };
    a.post_send(&[wr]).unwrap();
    let wc = poll_n(cq_a, 1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::SUCCESS, WcOpcode::SEND)
    );
    let wc = poll_n(cq_b, 1)[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::SUCCESS, WcOpcode::RECV)
    );
    assert_eq!(wc.byte_len as usize, n);
    assert_eq!(wc.imm(), Some(imm));
    assert_eq!(wc.qp_num, b.qp_num());
    assert_eq!(&mb.to_vec()[..n], msg);

    // RDMA WRITE a → b at offset 2048, then RDMA READ it back into a at offset 1024.
    ma.write_at(0, b"written!");
    let s = [ma.sge(0..8)];
    let w = SendWr {
        op: SendOp::RdmaWrite {
            remote_addr: mb.addr() + 2048,
            rkey: mb.rkey(),
        },
        ..SendWr::send(2, &s)
    };
    a.post_send(&[w]).unwrap();
    let wc = poll_n(cq_a, 1)[0];
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::SUCCESS, WcOpcode::RDMA_WRITE)
    );
    assert_eq!(&mb.to_vec()[2048..2056], b"written!");
    let d = [ma.sge(1024..1032)];
    let r = SendWr {
        op: SendOp::RdmaRead {
            remote_addr: mb.addr() + 2048,
            rkey: mb.rkey(),
        },
        ..SendWr::send(3, &d)
    };
    a.post_send(&[r]).unwrap();
    let wc = poll_n(cq_a, 1)[0];
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len),
        (WcStatus::SUCCESS, WcOpcode::RDMA_READ, 8)
    );
    assert_eq!(&ma.to_vec()[1024..1032], b"written!");
}
