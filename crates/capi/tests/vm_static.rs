//! Our own small C program (`tests/c/static_pingpong.c`), linked `-static` against
//! `librverbs.a` by `cargo xtask capi`, runs an RC ping-pong against `rverbs rc-pingpong`
//! in both guests — the minimal one has no rdma-core library, so nothing but our archive can
//! serve it — against rdma-core's `ibv_rc_pingpong` on rdma-core's libraries in the host guest
//! (test named `interop`), and against that same Debian binary running on our
//! `libibverbs.so.1` in every guest (the bed brings it into the minimal guest with our library
//! as its only libibverbs).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

mod common;
use common::{capi_bin, env_or, lib_dir, Proc};

/// `<target>/capi/bin/static_pingpong` ([`capi_bin`]), or `$RVERBS_CAPI_STATIC`.
fn program() -> PathBuf {
    match std::env::var_os("RVERBS_CAPI_STATIC") {
        Some(p) => PathBuf::from(p),
        None => capi_bin("static_pingpong"),
    }
}

/// The peer tool (`rverbs rc-pingpong` or `ibv_rc_pingpong`) with its device and port.
fn peer(kind: &str, dev: &str, port: u16) -> Command {
    let mut c = match kind {
        "rverbs" => {
            let mut c = Command::new("rverbs");
            c.arg("rc-pingpong");
            c
        }
        "ibv_rc_pingpong on ours" => {
            // `cargo xtask capi`'s unmodified copy of Debian's binary.
            let mut c = Command::new(lib_dir().join("../bin/ibv_rc_pingpong.debian"));
            c.env("LD_LIBRARY_PATH", lib_dir());
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
        if kind == "ibv_rc_pingpong on ours" && !ours_is_server {
            // The loader really mapped our library into Debian's program.
            let maps =
                std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).unwrap_or_default();
            let want = lib_dir().join("libibverbs.so.1");
            assert!(
                maps.contains(&*want.to_string_lossy()),
                "ibv_rc_pingpong did not map {}:\n{maps}",
                want.display()
            );
        }
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

/// Debian's unmodified `ibv_rc_pingpong` on our `libibverbs.so.1` (`LD_LIBRARY_PATH`)
/// against our static program, both roles, in every guest. In the minimal guest no library
/// of rdma-core's is present at all (the bed brings the program with our library as its
/// libibverbs), so both sides of the ping-pong run on rverbs alone.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn static_c_program_pingpongs_with_ibv_rc_pingpong_on_our_libibverbs() {
    if std::env::var("RVERBS_GUEST").as_deref() == Ok("minimal") {
        for p in [
            "/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
            "/usr/lib/x86_64-linux-gnu/libibverbs",
            "/etc/libibverbs.d",
        ] {
            assert!(
                !std::path::Path::new(p).exists(),
                "{p} exists in the minimal guest: rdma-core's library must not be there"
            );
        }
    }
    both_roles("ibv_rc_pingpong on ours", 18730);
}
