//! The extended QP send API and the extended CQ through the inline functions of `verbs.h`:
//! our C program `tests/c/qp_ex.c`, linked `-static` against `librverbs.a` by
//! `cargo xtask capi`, runs two connected RC QPs on one device (`ibv_wr_*` SEND, SEND with
//! immediate, inline data, RDMA WRITE with and without immediate, RDMA READ, atomics, UD; an
//! `ibv_start_poll` loop; `ibv_poll_cq` and events on the same CQ; `ibv_wr_complete`'s
//! errors with nothing posted) and checks every byte and completion. Runs in every guest
//! (static: no rdma-core library needed).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

mod common;
use common::{env_or, Proc};

/// `<target>/capi/bin/qp_ex`, found above this test binary (the guests place both at their
/// host paths).
fn program() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .map(|a| a.join("capi/bin/qp_ex"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no capi/bin/qp_ex above {}: run `cargo xtask capi`",
                exe.display()
            )
        })
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_posts_with_ibv_wr_and_polls_ibv_cq_ex() {
    let mut c = Command::new(program());
    c.args([env_or("RVERBS_DEV_A", "rxe0").as_str(), "1"]);
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains("all checks passed"), "{out}");
}
