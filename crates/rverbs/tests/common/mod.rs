//! Shared helpers of the device tests (they run in the VM; see docs/testing.md).
#![allow(dead_code)]

use std::sync::Arc;

use rverbs::uverbs::ah::AhAttr;
use rverbs::uverbs::context::{Context, GidType, Mtu};
use rverbs::uverbs::cq::Cq;
use rverbs::uverbs::mr::AccessFlags;
use rverbs::uverbs::qp::{Qp, QpAttr, QpState};

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

/// Moves `qp` RESET→INIT→RTR→RTS towards the remote QP `rqpn` at `rgid`, sending from our GID
/// index `sgid`.
pub fn connect(qp: &Qp, rqpn: u32, rgid: [u8; 16], sgid: u8, access: AccessFlags) {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::INIT),
        pkey_index: Some(0),
        port_num: Some(1),
        access_flags: Some(access),
        ..Default::default()
    })
    .expect("to INIT");
    qp.modify(&QpAttr {
        qp_state: Some(QpState::RTR),
        path_mtu: Some(Mtu::MTU_1024),
        dest_qp_num: Some(rqpn),
        rq_psn: Some(0),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(12),
        ah_attr: Some(AhAttr::roce(1, rgid, sgid)),
        ..Default::default()
    })
    .expect("to RTR");
    qp.modify(&QpAttr {
        qp_state: Some(QpState::RTS),
        sq_psn: Some(0),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(4),
        ..Default::default()
    })
    .expect("to RTS");
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
