//! The runner as its users meet it: `rverbs-vm` run as a program. The tests that boot a guest
//! (a few seconds to a minute each under emulation) are ignored in plain `cargo test`;
//! `cargo xtask test` runs them (stage "runner boot tests", `--include-ignored`) with the
//! xtask's kernel cache. `RVERBS_VM_BIN` names the binary when the test is not run by cargo.

use std::path::PathBuf;
use std::process::{Command, Output};

fn runner() -> Command {
    let bin = std::env::var_os("RVERBS_VM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_rverbs-vm")));
    Command::new(bin)
}

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = runner()
        .args(args)
        .output()
        .expect("cannot start rverbs-vm");
    let (out, err) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    eprintln!("---- stdout\n{out}---- stderr\n{err}----");
    (status.code(), out, err)
}

fn busybox() -> &'static str {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("no busybox (busybox-static) on this machine")
}

#[test]
fn usage_errors_exit_2_and_say_what_is_wrong() {
    let (code, _, err) = run(&["run", "--topo", "three", "--", "true"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--topo must be one or two, not `three`"),
        "{err}"
    );
    let (code, _, err) = run(&["run"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("needs a PROGRAM"), "{err}");
    let (code, _, err) = run(&["run", "--", "/no/such/test-binary"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/no/such/test-binary: no such file"), "{err}");
    let (code, _, err) = run(&["frobnicate"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown command `frobnicate`"), "{err}");
    let (code, out, _) = run(&["help"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUNNER"),
        "{out}"
    );
}

/// No kernel package to be had (a mirror nobody serves, an empty cache): a clear error that
/// names the kernel, exit 2, no guest.
#[test]
fn a_kernel_that_cannot_be_obtained_is_named() {
    let cache =
        std::env::temp_dir().join(format!("rverbs-testbed-nokernel-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let out = runner()
        .args(["prepare", "--kernel", "6.12"])
        .env("RVERBS_TESTBED_CACHE", &cache)
        .env("RVERBS_TESTBED_MIRROR", "http://127.0.0.1:9/debian")
        .output()
        .expect("cannot start rverbs-vm");
    let _ = std::fs::remove_dir_all(&cache);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    // Without the bed's packages (and not root) the runner stops earlier, naming those.
    assert!(
        err.contains("guest kernel 6.12 is not obtainable")
            || err.contains("missing Debian package"),
        "{err}"
    );
}

/// Packages missing and no installing (not root, or RVERBS_TESTBED_NO_INSTALL=1): stop at
/// once with the exact apt-get line. A dpkg-query that knows nothing stands in for a fresh
/// machine.
#[test]
fn missing_packages_stop_with_the_apt_get_line() {
    let dir = std::env::temp_dir().join(format!("rverbs-testbed-nodpkg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("dpkg-query");
    std::fs::write(&fake, "#!/bin/sh\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let t = std::time::Instant::now();
    let out = runner()
        .args(["run", "--", "/bin/true"])
        .env("PATH", path)
        .env("RVERBS_TESTBED_NO_INSTALL", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "apt-get install -y --no-install-recommends qemu-system-x86 busybox-static kmod xz-utils iproute2\n"
        ),
        "{err}"
    );
    assert!(
        err.contains("kmod") && err.contains("depmod"),
        "the why column: {err}"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "not at once: {:?}",
        t.elapsed()
    );
}

/// `--provider siw` needs the packages that build siw.ko: without them it stops at once with
/// their `apt-get install` line, before any kernel is fetched; the rxe guests do not need them.
#[test]
fn siw_without_its_build_packages_names_them() {
    let dir = std::env::temp_dir().join(format!("rverbs-testbed-nosiw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("dpkg-query");
    // Every package is installed except the ones that build siw.ko.
    let script = "#!/bin/sh\nfor a; do case $a in -*) ;; make|gcc-12|binutils|libelf1) ;; \
                  *) echo \"$a ii \" ;; esac; done\n";
    std::fs::write(&fake, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let cache = dir.join("cache");
    let t = std::time::Instant::now();
    let out = runner()
        .args(["run", "--provider", "siw", "--", "/bin/true"])
        .env("PATH", path)
        .env("RVERBS_TESTBED_NO_INSTALL", "1")
        .env("RVERBS_TESTBED_CACHE", &cache)
        .output()
        .unwrap();
    let fetched = cache.join("kernel").exists();
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("apt-get install -y --no-install-recommends make gcc-12 binutils libelf1\n"),
        "{err}"
    );
    assert!(
        err.contains("kbuild builds siw.ko"),
        "the why column: {err}"
    );
    assert!(
        !fetched,
        "a kernel was fetched before the packages were checked"
    );
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t.elapsed()
    );
    let (code, _, err) = run(&["run", "--provider", "iwarp", "--", "true"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--provider must be rxe or siw, not `iwarp`"),
        "{err}"
    );
}

#[test]
#[ignore = "boots a guest: run by cargo xtask test (stage runner boot tests)"]
fn siw_devices_in_the_minimal_guest_two_nodes() {
    // No rverbs binary given: the devices are made with iproute2's `rdma link add ... type siw`.
    let script = "echo in-$RVERBS_PROVIDER-$RVERBS_DEV_A-$RVERBS_DEV_B; \
                  cat /sys/class/infiniband/$RVERBS_DEV_A/node_type \
                  /sys/class/infiniband/$RVERBS_DEV_B/ports/1/state";
    let (code, out, err) = run(&[
        "run",
        "--provider",
        "siw",
        "--topo",
        "two",
        "--",
        busybox(),
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("in-siw-siw1-siw2"), "{out}");
    assert!(out.contains("4: RNIC"), "iWARP devices are RNICs: {out}");
    assert!(out.contains("4: ACTIVE"), "{out}");
    assert!(err.contains("(two topology, siw, kernel 6.1"), "{err}");
}

#[test]
#[ignore = "boots a guest: run by cargo xtask test (stage runner boot tests)"]
fn exit_code_output_and_variables_come_back() {
    // A static program: the minimal guest.
    // Output piped to this test, not a terminal: the guest's programs must not colour it.
    let script = "echo out-$RVERBS_GUEST-$RVERBS_TOPO-$RVERBS_DEV_A-$RVERBS_TEST_X; \
                  echo term-$TERM-nocolor-$NO_COLOR; \
                  test -e /sys/class/infiniband/$RVERBS_DEV_A/ports/1/gids/1 || exit 9; exit 7";
    let out = runner()
        .args(["run", "--", busybox(), "sh", "-c", script])
        .env("RVERBS_TEST_X", "passed")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("out-minimal-one-rxe0-passed"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("term-dumb-nocolor-1"), "{stdout}\n{stderr}");
    assert!(stderr.contains("booting the minimal guest"), "{stderr}");
}

/// `--kernel newest`: whatever Debian 13 backports' `linux-image-amd64` depends on (from 7.x a
/// meta package whose vmlinuz, modules and modules.builtin are in three other packages) boots,
/// its rxe port comes up, and the release the runner names is the one the guest runs.
/// `cargo xtask test` skips it when the run does not include the newest kernel.
#[test]
#[ignore = "boots a guest: run by cargo xtask test (stage runner boot tests)"]
fn the_newest_kernel_boots_with_an_active_rxe_port() {
    let script = "echo release-$(uname -r)-end; \
                  cat /sys/class/infiniband/$RVERBS_DEV_A/ports/1/state";
    let (code, out, err) = run(&[
        "run",
        "--kernel",
        "newest",
        "--",
        busybox(),
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("4: ACTIVE"), "{out}");
    let release = err
        .split("kernel newest ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("the runner names no release of the newest kernel: {err}"));
    assert!(out.contains(&format!("release-{release}-end")), "{out}");
    // Newer than Debian 13's own 6.12: its backports kernel, not trixie's.
    assert!(!release.starts_with("6."), "{release}");
}

#[test]
#[ignore = "boots a guest: run by cargo xtask test (stage runner boot tests)"]
fn a_dynamic_program_runs_in_the_host_guest_two_nodes() {
    // /bin/sh of this machine is dynamically linked: the host guest, from the current dir.
    let dir = std::env::current_dir().unwrap();
    let (code, out, err) = run(&[
        "run",
        "--topo",
        "two",
        "--",
        "/bin/sh",
        "-c",
        "echo in-$RVERBS_GUEST-$RVERBS_DEV_A-$RVERBS_DEV_B; pwd",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("in-host-rxe1-rxe2"), "{out}");
    assert!(out.contains(&dir.to_string_lossy().into_owned()), "{out}");
}

#[test]
#[ignore = "boots a guest: run by cargo xtask test (stage runner boot tests)"]
fn a_crashing_program_fails_with_its_signal_and_the_console_tail() {
    let (code, _, err) = run(&[
        "run",
        "--",
        busybox(),
        "sh",
        "-c",
        "echo about-to-crash; kill -SEGV $$",
    ]);
    assert_eq!(code, Some(128 + 11), "{err}");
    assert!(err.contains("killed by signal 11"), "{err}");
    assert!(
        err.contains("---- last") && err.contains("about-to-crash"),
        "{err}"
    );
}

#[test]
#[ignore = "boots a guest: run by cargo xtask test (stage runner boot tests)"]
fn a_hanging_program_is_killed_at_the_timeout_and_fails() {
    let (code, out, err) = run(&[
        "run",
        "--timeout",
        "30",
        "--",
        busybox(),
        "sh",
        "-c",
        "echo hanging-now; sleep 1000",
    ]);
    assert_eq!(code, Some(125), "{err}");
    assert!(out.contains("hanging-now"), "{out}");
    assert!(err.contains("hung and was killed after 30.0 s"), "{err}");
    assert!(err.contains("---- last"), "{err}");
}

/// `rverbs-vm local` (no VM: the machine's own kernel) proven inside a guest, which is such a
/// machine: rdma-core's rping over the device it makes, for rxe (initial namespace) and siw
/// (private namespace), the program's exit code, and nothing left behind.
#[test]
#[ignore = "boots a guest: run by cargo xtask test (stage runner boot tests)"]
fn local_mode_runs_rping_on_the_guests_own_kernel() {
    let dir = std::env::temp_dir().join(format!("rverbs-testbed-local-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("local.sh");
    std::fs::write(
        &script,
        r#"B=$1; P=$2
$B local --provider $P --timeout 120 -- /bin/sh -c '
echo "inner-$RVERBS_GUEST-$RVERBS_PROVIDER-$RVERBS_DEV_A"
(timeout 60 rping -s -a $RVERBS_ADDR_A -C 3 > /dev/null 2>&1 &)
# The server may not listen yet (a loaded host): a refused client is tried again.
i=0
until timeout 30 rping -c -a $RVERBS_ADDR_A -C 3 -v; do
    i=$((i + 1)); [ $i -ge 20 ] && exit 3; sleep 0.5
done
exit 7'
rc=$?
echo "left: $(rdma link show | grep -c _l) devices, $(ip netns list | wc -l) namespaces"
exit $rc
"#,
    )
    .unwrap();
    let me = env!("CARGO_BIN_EXE_rverbs-vm");
    for p in ["rxe", "siw"] {
        let sh = script.to_string_lossy().into_owned();
        let (code, out, err) = run(&[
            "run",
            "--guest",
            "host",
            "--provider",
            p,
            "--",
            "/bin/sh",
            &sh,
            me,
            p,
        ]);
        assert_eq!(code, Some(7), "{p}: {out}\n{err}");
        assert!(out.contains(&format!("inner-local-{p}-{p}_l")), "{out}");
        assert!(out.contains("ping data: rdma-ping-2"), "{out}");
        assert!(out.contains("left: 0 devices, 0 namespaces"), "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
