//! The test harness's [`common::Proc`] drains its child's pipes while the child runs: a child
//! that writes far more than a pipe holds (64 KiB on Linux) before it exits must finish, and a
//! line it prints after megabytes of output must be seen while it still runs. Before, `Proc`
//! read the pipes only once the child had ended, so such a child blocked in `write(2)` for
//! ever (the vm_preload iperf3 hang of 2026-12-07). Runs on the host and in the guests.

use std::process::Command;
use std::time::Duration;

mod common;
use common::Proc;

/// 8 MiB to stderr, 8 MiB to stdout, then a line: it ends, and all of it comes back.
#[test]
fn a_child_that_writes_megabytes_finishes() {
    let mut c = Command::new("sh");
    c.args([
        "-c",
        "head -c 8388608 /dev/zero | tr '\\0' E >&2; \
         head -c 8388608 /dev/zero | tr '\\0' O; echo; echo the end",
    ]);
    // The limit only bounds a hang (the old harness's): the child's exit decides.
    let (ok, text) = Proc::spawn(c).finish(Duration::from_secs(120));
    let head: String = text.chars().take(300).collect();
    assert!(ok, "the child did not end by itself: {head}");
    assert!(text.contains("the end"), "{head}");
    // After the head line (the command line and its status): stdout, then stderr.
    let (_, body) = text.split_once('\n').unwrap();
    let o = "O".repeat(8 << 20);
    let e = "E".repeat(8 << 20);
    assert!(body == format!("{o}\nthe end\n{e}"), "{head}");
}

/// A line printed after 8 MiB of stderr is seen while the child still runs (it waits on its
/// stdin, which only the end of the test closes), and its exit is seen after the kill.
#[test]
fn output_is_seen_while_the_child_runs() {
    let mut c = Command::new("sh");
    c.args([
        "-c",
        "head -c 8388608 /dev/zero >&2; echo joined; exec sleep 600",
    ]);
    let mut p = Proc::spawn(c);
    p.wait_output("joined", Duration::from_secs(120));
    let (ok, text) = p.finish(Duration::ZERO);
    assert!(!ok, "sleep 600 cannot have ended");
    assert!(text.contains("killed after"), "{}", &text[..200]);
}
