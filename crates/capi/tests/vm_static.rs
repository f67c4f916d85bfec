//! Our own small C program (`tests/c/static_pingpong.c`), linked `-static` against
//! `librverbs.a` by `cargo xtask capi`, runs an RC ping-pong against `rverbs rc-pingpong`
//! in both guests — the minimal one has no rdma-core library and no dynamic loader, so
//! nothing but our archive can serve it — and against rdma-core's `ibv_rc_pingpong` in the
//! host guest (test named `interop`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

mod common;
use common::{env_or, Proc};

/// `<target>/capi/bin/static_pingpong`, found above this test binary (the guests place
/// both at their host paths), or `$RVERBS_CAPI_STATIC`.
fn program() -> PathBuf {
    if let Some(p) = std::env::var_os("RVERBS_CAPI_STATIC") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .map(|a| a.join("capi/bin/static_pingpong"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no capi/bin/static_pingpong above {}: run `cargo xtask capi`",
                exe.display()
            )
        })
}

/// The peer tool (`rverbs rc-pingpong` or `ibv_rc_pingpong`) with its device and port.
fn peer(kind: &str, dev: &str, port: u16) -> Command {
    let mut c = match kind {
        "rverbs" => {
            let mut c = Command::new("rverbs");
            c.arg("rc-pingpong");
            c
        }
        _ => {
            let p = PathBuf::from("/usr/bin/ibv_rc_pingpong");
            assert!(
                p.is_file(),
                "{} missing: install ibverbs-utils",
                p.display()
            );
            Command::new(p)
        }
    };
    c.args(["-d", dev, "-g", "1", "-n", "50", "-p", &port.to_string()]);
    c
}

fn ours(dev: &str, port: u16) -> Command {
    let mut c = Command::new(program());
    c.args(["-d", dev, "-g", "1", "-n", "50", "-p", &port.to_string()]);
    c
}

/// Our program as client of `kind`'s server, then as server of `kind`'s client.
fn both_roles(kind: &str, port: u16) {
    let (dev_a, dev_b) = (
        env_or("RVERBS_DEV_A", "rxe0"),
        env_or("RVERBS_DEV_B", "rxe0"),
    );
    let addr_a = env_or("RVERBS_ADDR_A", "10.10.0.1");
    for ours_is_server in [false, true] {
        let p = port + u16::from(ours_is_server);
        let mut server = if ours_is_server {
            Proc::spawn(ours(&dev_a, p))
        } else {
            Proc::spawn(peer(kind, &dev_a, p))
        };
        // The peer's client needs the server up first.
        server.wait_listening(p);
        let mut c = if ours_is_server {
            peer(kind, &dev_b, p)
        } else {
            ours(&dev_b, p)
        };
        c.arg(&addr_a);
        let (cok, cout) = Proc::spawn(c).finish(Duration::from_secs(120));
        let (sok, sout) = server.finish(Duration::from_secs(60));
        assert!(cok && sok, "client:\n{cout}\nserver:\n{sout}");
        let mine = if ours_is_server { &sout } else { &cout };
        assert!(mine.contains("50 iters done"), "ours printed:\n{mine}");
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn static_c_program_pingpongs_with_rverbs() {
    both_roles("rverbs", 18710);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn static_c_program_pingpongs_with_ibv_rc_pingpong_interop() {
    both_roles("ibv_rc_pingpong", 18720);
}
