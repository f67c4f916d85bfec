//! The verbs of rdma-core 59–64 from C: our program `tests/c/new_verbs.c` (rdma-core 64's
//! prototypes and structures declared in it, linked `-static` against `librverbs.a` by
//! `cargo xtask capi`) checks `ibv_query_port_speed`, `ibv_reg_mr_ex`, `ibv_alloc_buf` /
//! `ibv_reg_buf_mr` / `ibv_free_buf`, the refused DMA handles and librdmacm's `RDMACM_1.4`
//! (`rdma_write_cm_event`, `rdma_resolve_addrinfo`, `rdma_query_addrinfo`), each errno; here
//! its output is judged per kernel: `QUERY_PORT_SPEED` and `WRITE_CM_EVENT` are in the 7.x
//! kernels (not in 6.1 and 6.12), and rxe and siw report no port speed where the method
//! exists, so that verb is refused with `EOPNOTSUPP` everywhere in the bed, for the reason the
//! log names. Runs in every guest.

use std::process::Command;
use std::time::Duration;

mod common;
use common::{capi_bin, env_or, Proc};

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
fn c_program_checks_the_verbs_of_rdma_core_59_to_64() {
    let dev = env_or("RVERBS_DEV_A", "rxe0");
    let mut c = Command::new(capi_bin("new_verbs"));
    c.arg(&dev).arg(env_or("RVERBS_ADDR_A", "10.10.0.1"));
    c.env("RVERBS_CAPI_LOG", "1");
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains("new_verbs: all checks passed"), "{out}");
    assert!(
        out.contains("reg_mr_ex: checked") && out.contains("bufs: checked"),
        "{out}"
    );
    // rxe and siw: refused on every kernel of the bed, for the reason of that kernel.
    assert!(
        out.contains(&format!("port_speed: rc {}", libc::EOPNOTSUPP)),
        "{out}"
    );
    if kernel_major() >= 7 {
        assert!(
            out.contains("reports no effective port speed (rxe and siw report none)"),
            "{out}"
        );
    } else {
        assert!(
            out.contains("this kernel has no QUERY_PORT_SPEED method"),
            "{out}"
        );
    }
    // The logged reasons of the named refusals.
    assert!(out.contains("there is no port 77"), "{out}");
    assert!(out.contains("NULL port_speed pointer"), "{out}");
    assert!(
        out.contains("ibv_reg_mr_ex: a DMA handle (IBV_REG_MR_MASK_DMAH)"),
        "{out}"
    );
    assert!(out.contains("unknown comp_mask bits 0x40"), "{out}");
    assert!(out.contains("are not inside the buffer"), "{out}");
    assert!(out.contains("the buffer was allocated on PD"), "{out}");
    assert!(
        out.contains("DMA handles are not supported (rxe and siw have none"),
        "{out}"
    );
    assert!(out.contains("dmah: refused"), "{out}");
    // RDMACM_1.4: WRITE_CM_EVENT is a command of the 7.x kernels.
    if kernel_major() >= 7 {
        assert!(out.contains("cm: WRITE_CM_EVENT"), "{out}");
        // rdma_event_str as librdmacm's: USER has no name, ADDRINFO_RESOLVED has.
        assert!(out.contains("cm: USER event, UNKNOWN EVENT"), "{out}");
        assert!(out.contains("cm: RDMA_CM_EVENT_ADDRINFO_RESOLVED"), "{out}");
        assert!(out.contains("the id is resolving already"), "{out}");
    } else {
        assert!(out.contains("cm: no WRITE_CM_EVENT (EOPNOTSUPP)"), "{out}");
        assert!(
            out.contains("this kernel's rdma_cm has no WRITE_CM_EVENT command"),
            "{out}"
        );
    }
    assert!(
        out.contains("only RDMA_CM_EVENT_USER, 18, can be written"),
        "{out}"
    );
    assert!(
        out.contains("rdma_resolve_addrinfo: RAI_SA: resolution through the InfiniBand SA"),
        "{out}"
    );
    assert!(out.contains("RAI_SA and RAI_DNS together"), "{out}");
    assert!(
        out.contains("no resolved address information on the id"),
        "{out}"
    );
}
