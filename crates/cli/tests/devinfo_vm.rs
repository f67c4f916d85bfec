//! `rverbs devinfo` against rdma-core's `ibv_devinfo` on the same device, in the VM. Where
//! ibv_devinfo is missing: the host guest (this machine's root, which has rdma-core) FAILS,
//! any other guest prints "skipped" and passes. On the host these show as ignored.

mod common;
use common::{run, stderr, stdout, which};

use std::process::Command;

/// ibv_devinfo's output for `args`, or `None` (after saying so) where it is not installed.
fn ibv_devinfo(args: &[&str]) -> Option<String> {
    let Some(prog) = which("ibv_devinfo") else {
        let guest = std::env::var("RVERBS_GUEST").unwrap_or_default();
        assert_ne!(
            guest, "host",
            "ibv_devinfo is not in PATH in the host guest, which should have rdma-core"
        );
        common::skipped(&format!(
            "ibv_devinfo not available in this guest ({guest})"
        ));
        return None;
    };
    let o = Command::new(prog)
        .args(args)
        .output()
        .expect("run ibv_devinfo");
    assert!(o.status.success(), "ibv_devinfo {args:?} failed");
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

fn field<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.trim_start().starts_with(&format!("{key}:")))
        .collect()
}

fn dev() -> String {
    assert_eq!(std::env::var("RVERBS_VM").as_deref(), Ok("1"));
    std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into())
}

fn compare(args: &[&str]) {
    let Some(theirs) = ibv_devinfo(args) else {
        return;
    };
    let mut ours_args = vec!["devinfo"];
    ours_args.extend_from_slice(args);
    let o = run(&ours_args);
    assert!(o.status.success(), "rverbs {ours_args:?}: {}", stderr(&o));
    let ours = stdout(&o);
    for key in [
        "hca_id",
        "node_guid",
        "sys_image_guid",
        "phys_port_cnt",
        "port",
        "state",
        "max_mtu",
        "active_mtu",
        "link_layer",
    ] {
        assert_eq!(field(&ours, key), field(&theirs, key), "{key} differs");
    }
    let gids = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.contains("GID["))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(gids(&ours), gids(&theirs), "GID tables differ");
    // On rxe every line is the kernel's data (no provider-private caps): all must agree.
    if ours.contains("vendor_id:\t\t\t0xffffff") && ours != theirs {
        let diff: Vec<String> = ours
            .lines()
            .zip(theirs.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("rverbs: {a:?}\nibv:    {b:?}"))
            .collect();
        panic!(
            "outputs differ ({} vs {} lines):\n{}",
            ours.lines().count(),
            theirs.lines().count(),
            diff.join("\n")
        );
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn devinfo_verbose_matches_ibv_devinfo() {
    let d = dev();
    compare(&["-v", "-d", &d]);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn devinfo_short_and_port_forms_match_ibv_devinfo() {
    let d = dev();
    compare(&["-d", &d]);
    compare(&["-d", &d, "-i", "1"]);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn devinfo_shows_gid_1_and_rejects_bad_input() {
    let d = dev();
    let addr = std::env::var("RVERBS_ADDR_A").unwrap_or_else(|_| "10.10.0.1".into());
    let o = run(&["devinfo", "-v", "-d", &d]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("\t\t\tGID[  1]:\t\t::ffff:{addr}, RoCE v2\n")),
        "{}",
        stdout(&o)
    );
    let o = run(&["devinfo", "-d", "nosuchdev"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.starts_with("rverbs devinfo: "), "{e}");
    assert!(e.contains("\"nosuchdev\"") && e.contains(&d), "{e}");
    let o = run(&["devinfo", "-d", &d, "-i", "2"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("port 2") && e.contains("has 1 port"), "{e}");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn devices_matches_ibv_devices() {
    let Some(prog) = which("ibv_devices") else {
        let guest = std::env::var("RVERBS_GUEST").unwrap_or_default();
        assert_ne!(
            guest, "host",
            "ibv_devices is not in PATH in the host guest"
        );
        common::skipped(&format!(
            "ibv_devices not available in this guest ({guest})"
        ));
        return;
    };
    let theirs = Command::new(prog).output().expect("run ibv_devices");
    let o = run(&["devices"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), String::from_utf8_lossy(&theirs.stdout));
}
