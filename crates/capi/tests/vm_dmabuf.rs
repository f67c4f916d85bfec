//! `ibv_reg_dmabuf_mr` from C: our program `tests/c/dmabuf_mr.c`, linked `-static` against
//! `librverbs.a` by `cargo xtask capi`, checks the errno of every refusal (NULL PD, bad fds,
//! a memfd that is not a dma-buf, and with the kernel's udmabuf a range past the dma-buf's
//! end and rxe's EOPNOTSUPP) and that no region stays on the PD. Runs in every guest; the
//! 6.12 kernel has udmabuf, bookworm's 6.1 does not.

use std::process::Command;
use std::time::Duration;

mod common;
use common::{capi_bin, env_or, Proc};

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_gets_rdma_core_errnos_from_ibv_reg_dmabuf_mr() {
    let mut c = Command::new(capi_bin("dmabuf_mr"));
    c.arg(env_or("RVERBS_DEV_A", "rxe0"));
    c.env("RVERBS_CAPI_LOG", "1");
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains("dmabuf_mr: all checks passed"), "{out}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    if release.starts_with("6.1.") {
        assert!(out.contains("udmabuf: none in this kernel"), "{out}");
    } else {
        assert!(out.contains("udmabuf: refused with EOPNOTSUPP"), "{out}");
        assert!(
            out.contains("does not support dma-buf memory regions"),
            "{out}"
        );
    }
    // RVERBS_CAPI_LOG names the fd and the reason of the memfd's refusal.
    assert!(out.contains("is not a dma-buf (/memfd:dmabuf_mr"), "{out}");
}
