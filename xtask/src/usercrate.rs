//! Stages of `cargo xtask test` that use the bed as a user's crate does, through the
//! `rverbs-vm` runner (crates/testbed): the runner's own boot tests (a program that crashes,
//! one that hangs, exit codes and variables), then examples/user-crate's tests, built for musl
//! and run by cargo with `rverbs-vm run` as the target runner, one node and two.

use crate::testcmd::{fail_stage, parse_results, tee, Counts, Opts, Report};
use crate::util::{self, fmt_secs};
use crate::vm::Topo;
use std::time::Instant;

pub fn stage(report: &mut Report, opts: &Opts) {
    let first = opts.kernels[0];
    let last = *opts.kernels.last().unwrap_or(&first);
    let boot = format!("runner boot tests (kernel {})", first.name);
    let users = [(Topo::One, first), (Topo::Two, last)]
        .map(|(t, k)| (t, k, format!("user crate {}/{}", k.name, t.name())));
    if !report.wants(&boot) && !users.iter().any(|u| report.wants(&u.2)) {
        return;
    }
    let t = Instant::now();
    println!("xtask: ==== runner: building rverbs-vm (crates/testbed)");
    let built = util::run(util::cargo().args([
        "build",
        "-q",
        "-p",
        "rverbs-testbed",
        "--bin",
        "rverbs-vm",
    ]));
    let runner = util::target_dir().join("debug/rverbs-vm");
    if let Err(e) = built {
        return fail_stage(report, "runner", e.0, t);
    }
    // The runner shares the xtask's kernel cache (target/vm) instead of the user's.
    let cache = util::vm_dir();

    // The runner's boot tests: ignored in the host-test stage, run here.
    let mut cmd = util::cargo();
    cmd.args([
        "test",
        "-p",
        "rverbs-testbed",
        "--test",
        "boot",
        "--",
        "--include-ignored",
        "--test-threads=1",
    ]);
    // The boot of the newest kernel only when the run includes that kernel (no download else).
    if !opts.kernels.iter().any(|k| k.name == "newest") {
        cmd.args(["--skip", "the_newest_kernel_boots"]);
    }
    cmd.env("RVERBS_TESTBED_CACHE", &cache)
        .env("RVERBS_VM_KERNEL", first.name)
        .env("RVERBS_VM_BIN", &runner);
    libtest_stage(
        report,
        &format!("runner boot tests (kernel {})", first.name),
        &mut cmd,
    );

    // examples/user-crate, as its users run it: cargo test --target musl with our runner.
    let dir = util::workspace_root().join("examples/user-crate");
    for (topo, kernel, name) in users {
        if !report.wants(&name) {
            continue;
        }
        let var = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUNNER";
        let value = format!(
            "{} run --topo {} --kernel {} --",
            runner.display(),
            topo.name(),
            kernel.name
        );
        let mut cmd = util::cargo();
        cmd.current_dir(&dir)
            .args(["test", "--target", "x86_64-unknown-linux-musl"])
            .env("CARGO_TARGET_DIR", util::target_dir().join("user-crate"))
            .env("RVERBS_TESTBED_CACHE", &cache)
            .env(var, &value);
        println!("xtask: {var}=\"{value}\"");
        libtest_stage(report, &name, &mut cmd);
    }
    println!("xtask: runner stages took {}", fmt_secs(t.elapsed()));
}

/// Runs a `cargo test` and counts its libtest results; a failing cargo without a failed test
/// (build error, a binary that died) counts as one failure.
fn libtest_stage(report: &mut Report, name: &str, cmd: &mut std::process::Command) {
    println!("xtask: ==== {name}: {}", util::show(cmd));
    let t = Instant::now();
    let mut notes = Vec::new();
    let counts = match tee(cmd) {
        Ok((text, status)) => {
            let mut c = parse_results(&text).unwrap_or_default();
            if !status.success() && c.failed == 0 {
                c.failed += 1;
                notes.push(format!(
                    "FAILED: `cargo test` {}",
                    util::describe_status(status)
                ));
            }
            if status.success() && c.passed == 0 {
                c.failed += 1;
                notes.push("FAILED: no test ran".to_string());
            }
            c
        }
        Err(e) => {
            notes.push(format!("FAILED: {e}"));
            Counts {
                failed: 1,
                ..Default::default()
            }
        }
    };
    report.add(name, counts, notes, t.elapsed());
}
