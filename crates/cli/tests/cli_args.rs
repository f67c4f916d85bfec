//! The `rverbs` command line on the host: dispatch, help and argument errors (no device
//! needed).

mod common;
use common::{run, stderr, stdout};

#[test]
fn help_lists_the_commands() {
    let o = run(&["help"]);
    assert!(o.status.success());
    let s = stdout(&o);
    for c in ["devices", "devinfo", "link", "help"] {
        assert!(s.contains(&format!("  {c}")), "{s}");
    }
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1), "no command is an error");
    assert!(stderr(&o).contains("Commands:"));
}

#[test]
fn help_for_one_command_shows_its_usage() {
    let o = run(&["help", "devinfo"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("Usage: rverbs devinfo [-d DEV] [-i PORT] [-v] [-l]"));
}

#[test]
fn unknown_command_is_named() {
    let o = run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("rverbs: unknown command \"frobnicate\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn argument_errors_name_the_command_and_the_problem() {
    for (args, want) in [
        (
            &["devinfo", "-i", "0"][..],
            "rverbs devinfo: bad port \"0\"",
        ),
        (
            &["devinfo", "--bogus"][..],
            "rverbs devinfo: invalid option '--bogus'",
        ),
        (
            &["link", "add", "rxe9"][..],
            "rverbs link: link add: missing `type TYPE`",
        ),
        (
            &["link", "delete"][..],
            "rverbs link: link delete: missing device NAME",
        ),
        (
            &["devices", "extra"][..],
            "rverbs devices: unexpected argument \"extra\"",
        ),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(e.starts_with(want), "{args:?}: {e}");
    }
}

#[test]
fn no_devices_is_explained() {
    if std::path::Path::new("/sys/class/infiniband_verbs").exists() {
        common::skipped("this machine has RDMA devices");
        return;
    }
    let o = run(&["devinfo"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.starts_with("rverbs devinfo: "), "{e}");
    assert!(e.contains("no RDMA devices found"), "{e}");
    assert!(
        e.contains("rverbs link add rxe0 type rxe netdev <netdev>"),
        "{e}"
    );
}
