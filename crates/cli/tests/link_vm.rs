//! `rverbs link add/show/delete` against the kernel, in the VM: a second rxe device on a dummy
//! netdev of its own, listed, then removed; and the errors for a missing netdev or a taken
//! name. On the host these show as ignored.

mod common;
use common::{run, stderr, stdout};

use std::path::Path;
use std::process::Command;

fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Removes the test's netdev (and with it any rxe left on it) even when the test fails.
struct Netdev(&'static str);

impl Drop for Netdev {
    fn drop(&mut self) {
        let _ = run(&["link", "delete", "rvtest0"]);
        let _ = Command::new("ip").args(["link", "del", self.0]).output();
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn link_add_show_delete_on_a_second_netdev() {
    assert_eq!(std::env::var("RVERBS_VM").as_deref(), Ok("1"));
    let _nd = Netdev("rvtestd");
    ip(&["link", "add", "rvtestd", "type", "dummy"]);
    ip(&["link", "set", "rvtestd", "up"]);

    let o = run(&["link", "add", "rvtest0", "type", "rxe", "netdev", "rvtestd"]);
    assert!(o.status.success(), "link add: {}", stderr(&o));
    assert!(Path::new("/sys/class/infiniband/rvtest0").exists());

    let o = run(&["link", "show"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s = stdout(&o);
    assert!(
        s.lines()
            .any(|l| l.starts_with("link rvtest0/1 state ") && l.ends_with(" netdev rvtestd")),
        "{s}"
    );
    let o = run(&["link", "show", "rvtest0"]);
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));

    // The same netdev cannot carry a second rxe; the name cannot be reused.
    let o = run(&["link", "add", "rvtest1", "type", "rxe", "netdev", "rvtestd"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("netdev rvtestd already has an rxe device"),
        "{}",
        stderr(&o)
    );
    let o = run(&["link", "add", "rvtest0", "type", "rxe", "netdev", "lo"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("an RDMA device named rvtest0 already exists"),
        "{}",
        stderr(&o)
    );

    // rverbs devices sees it too.
    let o = run(&["devices"]);
    assert!(stdout(&o).contains("    rvtest0 "), "{}", stdout(&o));

    let o = run(&["link", "delete", "rvtest0"]);
    assert!(o.status.success(), "link delete: {}", stderr(&o));
    assert!(!Path::new("/sys/class/infiniband/rvtest0").exists());
    let o = run(&["link", "show"]);
    assert!(!stdout(&o).contains("rvtest0"), "{}", stdout(&o));

    let o = run(&["link", "delete", "rvtest0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no RDMA device named \"rvtest0\""),
        "{}",
        stderr(&o)
    );
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn link_add_on_a_missing_netdev_says_so() {
    assert_eq!(std::env::var("RVERBS_VM").as_deref(), Ok("1"));
    let o = run(&[
        "link",
        "add",
        "rvtest9",
        "type",
        "rxe",
        "netdev",
        "nosuchnd9",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.starts_with("rverbs link: link add rvtest9: netdev nosuchnd9 not found"),
        "{e}"
    );
    assert!(!Path::new("/sys/class/infiniband/rvtest9").exists());
}
