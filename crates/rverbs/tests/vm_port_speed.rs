//! `Context::query_port_speed` (`ibv_query_port_speed` of rdma-core 62) on rxe and siw: the
//! kernel's `UVERBS_METHOD_QUERY_PORT_SPEED` exists from the 7.x kernels on (6.1 and 6.12
//! have none), and rxe and siw report no speed where it does, so every kernel of the bed
//! refuses, each for its own named reason; ports the device lacks are refused before the
//! kernel. Runs in the VM.

mod common;

use std::io::ErrorKind;

use common::*;
use rustix::io::Errno;
use rverbs::uverbs::Error;

/// The major version of the running kernel.
fn kernel_major() -> u32 {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    release.split('.').next().unwrap().parse().unwrap()
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn port_speed_is_refused_by_name_where_kernel_or_device_has_none() {
    let ctx = ctx();
    let e = ctx.query_port_speed(1).unwrap_err();
    let m = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{m}");
    assert!(m.contains("query the speed of port 1 of"), "{m}");
    if kernel_major() >= 7 {
        // The method is there; rxe's and siw's kernel drivers answer EOPNOTSUPP.
        assert_eq!(Error::errno_of(&e), Some(Errno::OPNOTSUPP), "{m}");
        assert!(m.contains("reports no effective port speed"), "{m}");
    } else {
        assert_eq!(Error::errno_of(&e), None, "refused before the kernel: {m}");
        assert!(
            m.contains("this kernel has no QUERY_PORT_SPEED method"),
            "{m}"
        );
    }
    for port in [0, 2, 300] {
        let e = ctx.query_port_speed(port).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "port {port}: {e}");
        assert!(
            e.to_string().contains(&format!("there is no port {port}")),
            "{e}"
        );
    }
}
