//! `cargo xtask test`: formatting and lints, host tests, then the integration tests built with
//! `--cfg rverbs_vm` in the guests. Ends with one summary line
//! `xtask: N passed, N failed, N skipped` (skipped = ignored) and a non-zero exit on any failure.
//!
//! The stages are the list in [`run`]. To add one: write `pub fn stage(report: &mut Report,
//! opts: &Opts)` in a new file (see usercrate.rs), add its `mod` line in main.rs and one call
//! in that list; count its results with [`Report::add`] (or [`check`] for a command that
//! passes or fails as a whole, [`parse_results`] for libtest output).

use crate::build::{self, GuestTarget};
use crate::kernel::{KernelSpec, KERNELS};
use crate::stageplan::{self, Entry};
use crate::util::{self, fmt_secs, Context, Result};
use crate::vm::{self, Bed, Display, Guest, GuestStatus, Payload, RunSpec, Topo};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Tests whose name contains this need rdma-core's C tools: not run in the minimal guest.
pub(crate) const INTEROP: &str = "interop";
/// Tests with this in their names need the two-node topology; one-node stages skip them.
pub(crate) const TWO_NODE: &str = "two_node";
/// What some tests need of rxe that the bed's older kernels lack: a test whose name contains
/// the marker is skipped (`--skip`), and counted skipped with the reason, in the rxe stages of
/// the kernels listed; run there by hand it fails, saying why.
pub(crate) const KERNEL_NEEDS: &[(&str, &[&str], &str)] = &[
    (
        "needs_odp",
        &["6.1", "6.12"],
        "has no on-demand paging (rxe from about 6.15)",
    ),
    (
        "needs_atomic_write",
        &["6.1"],
        "has no atomic write (rxe from 6.2)",
    ),
];

/// The markers of [`KERNEL_NEEDS`] that kernel `name` lacks, with their reasons.
fn lacking(name: &str) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    KERNEL_NEEDS
        .iter()
        .filter(move |(_, kernels, _)| kernels.contains(&name))
        .map(|&(marker, _, why)| (marker, why))
}

/// Integration-test binaries that open no RDMA device: simulators, fixtures, the mlx5 oracle,
/// allocation counters and the C layout probes. Nothing in them depends on the kernel, the
/// guest or the topology, so a run boots them in its first VM stage only (the static build in
/// a guest, besides their run on the host in "host tests") and counts their tests as skipped in
/// the later VM stages, with a note naming the stage they ran in. A test binary missing from
/// this list runs in every stage (slower, never less checked); `device_free_names_exist`
/// keeps the list true.
const DEVICE_FREE: &[&str] = &[
    "capi/layout",
    "cm/abi_layout",
    "provider/provider_table",
    "uverbs/abi_layout",
    "uverbs/compile_fail",
];

/// The VM stages of a default run (no `--kernel`), in order: every integration test binary
/// runs in each. 6.1 and 6.12 get both topologies and the host guest (so the interop tests)
/// once, and every guest/topology pair runs once on them: four stages instead of six; the
/// newest kernel gets the host guest, one node (its interop tests; docs/testing.md).
const VM_STAGES: &[(&str, Guest, Topo)] = &[
    ("6.1", Guest::Minimal, Topo::One),
    ("6.1", Guest::Host, Topo::Two),
    ("6.12", Guest::Host, Topo::One),
    ("6.12", Guest::Minimal, Topo::Two),
    ("newest", Guest::Host, Topo::One),
];

/// The VM stages per kernel with `--kernel K` or `--kernel all`: the whole matrix.
const FULL_MATRIX: &[(Guest, Topo)] = &[
    (Guest::Minimal, Topo::One),
    (Guest::Host, Topo::One),
    (Guest::Host, Topo::Two),
];

#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// Tests left out by a name filter (libtest's "filtered out").
    pub filtered: u64,
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.ignored += o.ignored;
        self.filtered += o.filtered;
    }
}

pub struct Stage {
    name: String,
    counts: Counts,
    notes: Vec<String>,
    took: Duration,
}

/// The results of a `cargo xtask test` run, stage by stage.
#[derive(Default)]
pub struct Report {
    stages: Vec<Stage>,
    /// `--stage A,B`: only the stages whose name contains A or B.
    only: Option<Vec<String>>,
}

impl Report {
    /// Whether the stage called `name` is to run (`--stage`).
    pub fn wants(&self, name: &str) -> bool {
        self.only
            .as_ref()
            .map_or(true, |o| o.iter().any(|p| name.contains(p.as_str())))
    }

    /// Records (and prints) one stage's counts and notes.
    pub fn add(&mut self, name: &str, counts: Counts, notes: Vec<String>, took: Duration) {
        let line = format!(
            "xtask: stage {name}: {} passed, {} failed, {} skipped ({})",
            counts.passed,
            counts.failed,
            counts.ignored,
            fmt_secs(took)
        );
        println!("{line}");
        for n in &notes {
            println!("xtask:     {n}");
        }
        self.stages.push(Stage {
            name: name.to_string(),
            counts,
            notes,
            took,
        });
    }

    fn total(&self) -> Counts {
        let mut t = Counts::default();
        for s in &self.stages {
            t += s.counts;
        }
        t
    }
}

/// Sums the `test result:` lines of libtest output.
pub fn parse_results(text: &str) -> Option<Counts> {
    let mut found = None;
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            continue;
        };
        let mut c = Counts::default();
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            // "ok. 3 passed" / "FAILED. 1 passed" / " 0 failed" / " 2 ignored"
            let (n, what) = match words.as_slice() {
                [_, n, what, ..] if part.contains('.') && words[0].ends_with('.') => (n, what),
                [n, what, ..] => (n, what),
                _ => continue,
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match *what {
                "passed" => c.passed += n,
                "failed" => c.failed += n,
                "ignored" => c.ignored += n,
                "filtered" => c.filtered += n,
                _ => {}
            }
        }
        *found.get_or_insert_with(Counts::default) += c;
    }
    found
}

/// Options of `cargo xtask test`.
pub struct Opts {
    pub host: bool,
    pub vm: bool,
    /// The VM stages: (kernel, guest, topology).
    pub vm_stages: Vec<(KernelSpec, Guest, Topo)>,
    /// The kernels the VM stages boot, in order (each at least once).
    pub kernels: Vec<KernelSpec>,
    /// The kernels of the siw stages ([`SIW_KERNELS`], or those of `--kernel`).
    pub siw_kernels: Vec<KernelSpec>,
    pub test_args: Vec<String>,
}

pub fn run(args: &[String]) -> Result<u8> {
    let mut opts = Opts {
        host: true,
        vm: true,
        vm_stages: VM_STAGES
            .iter()
            .map(|&(k, g, t)| (KernelSpec::parse(k).expect("a known kernel"), g, t))
            .collect(),
        kernels: KERNELS.to_vec(),
        siw_kernels: SIW_KERNELS
            .iter()
            .map(|k| KernelSpec::parse(k).expect("a known kernel"))
            .collect(),
        test_args: Vec::new(),
    };
    let mut only = None;
    let mut load = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--no-vm" => opts.vm = false,
            "--vm-only" => opts.host = false,
            "--stage" => {
                let v = it
                    .next()
                    .ok_or("--stage needs a value: part of a stage name")?;
                only = Some(v.split(',').map(str::to_string).collect());
            }
            "--kernel" => {
                let v = it
                    .next()
                    .ok_or("--kernel needs a value: 6.1, 6.12, newest or all")?;
                opts.kernels = crate::parse_kernels(v, true)?;
                opts.siw_kernels = opts.kernels.clone();
                opts.vm_stages = opts
                    .kernels
                    .iter()
                    .flat_map(|&k| FULL_MATRIX.iter().map(move |&(g, t)| (k, g, t)))
                    .collect();
            }
            "--load" => {
                let v = it
                    .next()
                    .ok_or("--load needs a value: how many CPU-bound processes")?;
                load = Some(crate::load::parse(v, "--load")?);
            }
            "--" => opts.test_args.extend(it.by_ref().cloned()),
            "--help" | "-h" => {
                print!("{}", crate::HELP);
                return Ok(0);
            }
            other => crate::bail!(
                "unknown option `{other}` for `cargo xtask test` (see `cargo xtask help`)"
            ),
        }
    }
    let load = match load {
        Some(n) => n,
        None => crate::load::from_env()?,
    };
    let t0 = Instant::now();
    // Everything the stages use, installed first (or a stop right here with the apt-get line).
    crate::packages::ensure(crate::packages::Need::Test, "xtask")?;
    if let Some(w) = util::disk_warning() {
        eprintln!("xtask: {w}");
    }
    let mut report = Report {
        only,
        ..Report::default()
    };
    // Killed and reaped when this function returns, however it returns.
    let load = crate::load::Load::start(load)?;
    // ---- the stages, in order ----
    if opts.host {
        check(
            &mut report,
            "fmt",
            util::cargo().args(["fmt", "--all", "--", "--check"]),
        );
        check(
            &mut report,
            "clippy",
            util::cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        );
        // Each crate builds on its own, without the features the workspace unifies
        // (xtask/src/alone.rs).
        crate::alone::stage(&mut report);
        // The API docs must build without a broken link or a stray HTML tag.
        check(
            &mut report,
            "doc",
            util::cargo()
                .args(["doc", "--workspace", "--no-deps"])
                .env("RUSTDOCFLAGS", "-D warnings"),
        );
        host_tests(&mut report);
        // rdma-core's libmlx5 still produces the committed mlx5 dumps (xtask/src/mlx5_oracle.rs).
        let exe = std::env::current_exe().unwrap_or_else(|_| "cargo-xtask".into());
        check(
            &mut report,
            "mlx5 oracle",
            Command::new(&exe).args(["mlx5-oracle", "--check"]),
        );
        // rdma-core's libefa still produces the committed EFA dumps (docs/efa.md).
        check(
            &mut report,
            "efa oracle",
            Command::new(&exe).args(["efa-oracle", "--check"]),
        );
        // Every public item of the library crates is in the committed inventory api/*.txt.
        if report.wants("public api") {
            let (counts, notes, took) = crate::publicapi::stage();
            report.add("public api", counts, notes, took);
        }
        // Every commit that changes api/*.txt adds a line to CHANGELOG.md (xtask/src/changelog.rs).
        if report.wants("changelog") {
            let (counts, notes, took) = crate::changelog::stage();
            report.add("changelog", counts, notes, took);
        }
        if report.wants("miri") {
            let (counts, notes, took) = crate::miri::stage();
            report.add("miri", counts, notes, took);
        }
        // The parsers of kernel- and device-written bytes under libFuzzer (xtask/src/fuzz.rs).
        crate::fuzz::stage(&mut report);
    }
    // The C drop-in (crates/capi, xtask/src/capi.rs): built and checked here, loaded by the
    // interop tests of the host guest.
    if report.wants("capi") {
        let t = Instant::now();
        match crate::capi::build_and_check(false) {
            Ok(o) => report.add(
                "capi",
                Counts {
                    passed: 1,
                    ..Default::default()
                },
                o.notes,
                t.elapsed(),
            ),
            Err(e) => fail_stage(&mut report, "capi", e.0, t),
        }
    }
    // The library crates package as crates.io would take them (xtask/src/package.rs).
    if opts.host {
        crate::package::stage(&mut report);
    }
    if opts.vm {
        if !report.wants("capi") {
            // The host guests load the C drop-in from here: a targeted run without the capi
            // stage tests whatever was built last, which may predate the tree.
            let lib = crate::capi::lib_dir().join("libibverbs.so.1");
            let age = std::fs::metadata(&lib)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .map_or("not built".to_string(), |d| {
                    format!("built {} min ago", d.as_secs() / 60)
                });
            println!(
                "xtask: note: the C drop-in is not rebuilt by this run (no `capi` in --stage): \
                 the guests load {} ({age})",
                crate::capi::lib_dir().display()
            );
        }
        vm_stages(&mut report, &opts);
        crate::usercrate::stage(&mut report, &opts);
    }
    // ---- end of the stages ----
    let total = report.total();
    if total.failed > 0 {
        if let Some(w) = util::disk_warning() {
            println!("xtask: {w}");
        }
    }
    let mut text = String::new();
    for s in &report.stages {
        let _ = writeln!(
            text,
            "{}: {} passed, {} failed, {} skipped ({})",
            s.name,
            s.counts.passed,
            s.counts.failed,
            s.counts.ignored,
            fmt_secs(s.took)
        );
        for n in &s.notes {
            let _ = writeln!(text, "    {n}");
        }
    }
    if load.count() > 0 {
        let _ = writeln!(
            text,
            "under load: {} CPU-bound processes beside the run",
            load.count()
        );
    }
    let _ = writeln!(text, "total time {}", fmt_secs(t0.elapsed()));
    let report_path = util::vm_dir().join("last-test-report.txt");
    if fs::create_dir_all(util::vm_dir()).is_ok() && fs::write(&report_path, &text).is_ok() {
        println!(
            "xtask: report: {} (total time {})",
            report_path.display(),
            fmt_secs(t0.elapsed())
        );
    }
    println!(
        "xtask: {} passed, {} failed, {} skipped",
        total.passed, total.failed, total.ignored
    );
    Ok(if total.failed == 0 && total.passed > 0 {
        0
    } else {
        1
    })
}

/// Runs `cmd` as one stage that passes (exit 0) or fails as a whole.
pub fn check(report: &mut Report, name: &str, cmd: &mut Command) {
    if !report.wants(name) {
        return;
    }
    println!("xtask: ==== {name}: {}", util::show(cmd));
    let t = Instant::now();
    let (counts, notes) = match cmd.status() {
        Ok(s) if s.success() => (
            Counts {
                passed: 1,
                ..Default::default()
            },
            vec![],
        ),
        Ok(s) => (
            Counts {
                failed: 1,
                ..Default::default()
            },
            vec![format!("FAILED: {}", util::describe_status(s))],
        ),
        Err(e) => (
            Counts {
                failed: 1,
                ..Default::default()
            },
            vec![format!("FAILED: cannot run: {e}")],
        ),
    };
    report.add(name, counts, notes, t.elapsed());
}

/// Runs a command with its output shown and returns its stdout text and success.
pub fn tee(cmd: &mut Command) -> Result<(String, std::process::ExitStatus)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(|| format!("cannot run `{}`", util::show(cmd)))?;
    let err = child.stderr.take().map(|e| {
        std::thread::spawn(move || {
            let _ = util::for_each_line(e, |l| eprintln!("{l}"));
        })
    });
    let mut text = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = util::for_each_line(out, |l| {
            println!("{l}");
            text.push_str(&l);
            text.push('\n');
        });
    }
    if let Some(e) = err {
        let _ = e.join();
    }
    let status = child
        .wait()
        .context(|| "cannot wait for cargo".to_string())?;
    Ok((text, status))
}

fn host_tests(report: &mut Report) {
    if !report.wants("host tests") {
        return;
    }
    let mut cmd = util::cargo();
    cmd.args(["test", "--workspace", "--no-fail-fast"]);
    println!("xtask: ==== host tests: {}", util::show(&cmd));
    let t = Instant::now();
    let mut notes = Vec::new();
    let counts = match tee(&mut cmd) {
        Ok((text, status)) => {
            let mut c = parse_results(&text).unwrap_or_default();
            if !status.success() && c.failed == 0 {
                c.failed += 1;
                notes.push(format!(
                    "FAILED: `cargo test` {} (build error?)",
                    util::describe_status(status)
                ));
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
    report.add("host tests", counts, notes, t.elapsed());
}

pub fn fail_stage(report: &mut Report, name: &str, why: String, t: Instant) {
    report.add(
        name,
        Counts {
            failed: 1,
            ..Default::default()
        },
        vec![format!("FAILED: {why}")],
        t.elapsed(),
    );
}

fn vm_stages(report: &mut Report, opts: &Opts) {
    let wanted = |k: &KernelSpec, g: &Guest, t: &Topo| {
        report.wants(&format!("vm {} {}/{}", k.name, g.name(), t.name()))
    };
    let siw: Vec<KernelSpec> = opts
        .siw_kernels
        .iter()
        .copied()
        .filter(|k| report.wants(&siw_stage_name(*k)))
        .collect();
    let trixie: Option<KernelSpec> = opts
        .kernels
        .iter()
        .copied()
        .find(|k| k.name == TRIXIE_KERNEL)
        .filter(|k| report.wants(&trixie_stage_name(*k)));
    if !report.wants("vm build")
        && siw.is_empty()
        && trixie.is_none()
        && !opts.vm_stages.iter().any(|(k, g, t)| wanted(k, g, t))
    {
        return;
    }
    // Every kernel of the run's rxe VM stages is set up (packages, kernel, initramfs, the KVM
    // probes of a fresh cache all at once: Bed::prepare_all, 20 s instead of 20 s a kernel
    // where KVM hangs) on a thread beside the build, which needs none of it: the probes' idle
    // QEMUs and the downloads wait while the build computes. What is left of it after the
    // build counts in the first VM stage.
    let mut kernels: Vec<KernelSpec> = Vec::new();
    for &(kernel, guest, topo) in &opts.vm_stages {
        let name = format!("vm {} {}/{}", kernel.name, guest.name(), topo.name());
        if report.wants(&name) && !kernels.contains(&kernel) {
            kernels.push(kernel);
        }
    }
    println!("xtask: ==== VM tests: static build of rverbs and of the integration tests (--cfg rverbs_vm)");
    let t = Instant::now();
    let (built, set_up) = std::thread::scope(|s| {
        let set_up = (!kernels.is_empty()).then(|| {
            let names: Vec<&str> = kernels.iter().map(|k| k.name).collect();
            println!(
                "xtask: ==== vm set-up {} beside the build: packages, kernels, initramfs, KVM \
                 probes at once",
                names.join(", ")
            );
            let configs: Vec<_> = kernels.iter().map(|&k| util::bed_config(k)).collect();
            s.spawn(move || {
                let t = Instant::now();
                let beds = Bed::prepare_all(&configs);
                (beds, t.elapsed())
            })
        });
        let built = (|| -> Result<(GuestTarget, PathBuf, build::VmTests)> {
            // The test build makes the static `rverbs` the CLI tests run
            // (CARGO_BIN_EXE_rverbs); the guests use that one to create their rxe devices
            // too: no release build here.
            let target = build::guest_target();
            let mut tests = build::vm_tests(target)?;
            let rverbs = build::static_rverbs_of(&tests)?;
            // The example programs the guests run (crates/rverbs/tests/vm_examples.rs).
            tests.bins.extend(build::vm_examples(target)?);
            Ok((target, rverbs, tests))
        })();
        let build_time = t.elapsed();
        // Joined on every way out (a failed build too): no probe's QEMU outlives xtask.
        let waited = Instant::now();
        let set_up = set_up.map(|h| (h.join(), waited));
        ((built, build_time), set_up)
    });
    let (built, build_time) = built;
    let (target, rverbs, tests) = match built {
        Ok(b) => b,
        Err(e) => return fail_stage(report, "vm build", e.0, t),
    };
    let mut notes = vec![format!(
        "{} test binaries for {}",
        tests.tests.len(),
        target.triple()
    )];
    if target == GuestTarget::GnuStatic {
        notes.push(
            "WARNING: glibc + crt-static binaries (the musl target was not available)".into(),
        );
    }
    // Counted like fmt and clippy: one check, passed (a failed build is one failure).
    report.add(
        "vm build",
        Counts {
            passed: 1,
            ..Default::default()
        },
        notes,
        build_time,
    );

    // One bed per kernel, prepared on first use (download and unpacking are cached).
    let mut beds: Vec<(KernelSpec, std::result::Result<Bed, String>)> = Vec::new();

    let mut dirs = BTreeSet::new();
    for a in &tests.tests {
        dirs.insert(a.package_dir.to_string_lossy().into_owned());
    }
    let mut files: Vec<_> = tests
        .tests
        .iter()
        .chain(&tests.bins)
        .map(|a| a.executable.clone())
        .collect();
    // With the copy of Debian's ibv_rc_pingpong, whose libraries are looked up in our C
    // drop-in's directory first (`lib_path`): it arrives in the minimal guest with our
    // libibverbs.so.1 and no library of rdma-core's (crates/capi/tests/vm_static.rs).
    files.extend(crate::capi::guest_files());
    let payload = Payload {
        rverbs: Some(rverbs),
        files,
        dirs: dirs.into_iter().collect(),
        host_paths: vec![util::workspace_root(), util::target_dir()],
        env: vec![],
        lib_path: vec![crate::capi::lib_dir()],
    };
    let stage_timeout = env_secs("RVERBS_VM_STAGE_TIMEOUT", 900);
    let test_timeout = env_secs("RVERBS_VM_TEST_TIMEOUT", 300);
    let threads = std::env::var("RVERBS_VM_TEST_THREADS").unwrap_or_else(|_| "1".into());
    let mut args = vec![format!("--test-threads={threads}")];
    // Per-test times (`test name ... ok <1.234s>` in the logs): libtest's `--report-time` is
    // unstable, so this diagnostic is opt-in and sets RUSTC_BOOTSTRAP for the test binaries only.
    let test_times = std::env::var("RVERBS_VM_TEST_TIMES").as_deref() == Ok("1");
    if test_times {
        args.extend(["-Z", "unstable-options", "--report-time"].map(String::from));
    }
    args.extend(opts.test_args.iter().cloned());
    let user_filter = !opts.test_args.is_empty();
    // After the first VM stage: its name and the counts of the device-free binaries in it.
    let mut device_free_ran: Option<(String, Counts)> = None;
    // The VM stages this run runs (`--stage`), for the placement of the long tests.
    let planned: Vec<stageplan::StageKey> = opts
        .vm_stages
        .iter()
        .map(|&(kernel, guest, topo)| stageplan::StageKey {
            name: format!("vm {} {}/{}", kernel.name, guest.name(), topo.name()),
            kernel: kernel.name,
            host_guest: guest == Guest::Host,
            two_node: topo == Topo::Two,
        })
        .filter(|s| report.wants(&s.name))
        .collect();

    // The set-up beside the build: its beds, and the wait for it after the build (which
    // counts in the first VM stage).
    let mut set_up_started = None;
    if let Some((joined, waited)) = set_up {
        set_up_started = Some(waited);
        match joined {
            Ok((prepared, took)) => {
                for (kernel, b) in kernels.iter().zip(prepared) {
                    let b = b.map_err(|e| e.0);
                    if let Ok(b) = &b {
                        println!(
                            "xtask: guest kernel {} {} ({}), {:?}: {}",
                            kernel.name, b.kernel.release, b.kernel.package, b.accel, b.accel_why,
                        );
                    }
                    beds.push((*kernel, b));
                }
                println!(
                    "xtask: set-up of {} kernels took {} beside the build, {} after it",
                    kernels.len(),
                    fmt_secs(took),
                    fmt_secs(waited.elapsed())
                );
            }
            // Each stage then sets its kernel up itself (below) and says what failed.
            Err(_) => println!("xtask: the set-up beside the build panicked"),
        }
    }

    for &(kernel, guest, topo) in &opts.vm_stages {
        let name = format!("vm {} {}/{}", kernel.name, guest.name(), topo.name());
        if !report.wants(&name) {
            continue;
        }
        let t = set_up_started.take().unwrap_or_else(Instant::now);
        if !beds.iter().any(|(k, _)| *k == kernel) {
            println!(
                "xtask: ==== vm set-up {}: packages, kernel, initramfs",
                kernel.name
            );
            let b = Bed::prepare(&util::bed_config(kernel)).map_err(|e| e.0);
            if let Ok(b) = &b {
                println!(
                    "xtask: guest kernel {} {} ({}), {:?}: {}, set-up took {}",
                    kernel.name,
                    b.kernel.release,
                    b.kernel.package,
                    b.accel,
                    b.accel_why,
                    fmt_secs(t.elapsed())
                );
            }
            beds.push((kernel, b));
        }
        let bed = match beds.iter().find(|(k, _)| *k == kernel).map(|(_, b)| b) {
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                fail_stage(
                    report,
                    &name,
                    format!("vm set-up of kernel {}: {e}", kernel.name),
                    t,
                );
                continue;
            }
            None => unreachable!(),
        };
        println!(
            "xtask: ==== {name}: booting the {} guest, {} topology, kernel {} ({})",
            guest.name(),
            topo.name(),
            kernel.name,
            bed.kernel.release
        );
        let mut stage_args = args.clone();
        if guest == Guest::Minimal {
            // Interop tests need rdma-core's C tools, which only the host guest has.
            stage_args.extend(["--skip".to_string(), INTEROP.to_string()]);
        }
        if topo == Topo::One {
            stage_args.extend(["--skip".to_string(), TWO_NODE.to_string()]);
        }
        for (marker, _) in lacking(kernel.name) {
            stage_args.extend(["--skip".to_string(), marker.to_string()]);
        }
        let mut stage_payload = payload.clone();
        stage_payload.env.push(async_load(kernel));
        let stage_tests: Vec<build::Artifact> = tests
            .tests
            .iter()
            .filter(|a| device_free_ran.is_none() || !DEVICE_FREE.contains(&a.name.as_str()))
            .cloned()
            .collect();
        // Background, once-per-kernel and two-node placement (xtask/src/stageplan.rs).
        let this = planned.iter().position(|s| s.name == name).unwrap_or(0);
        let elsewhere = stageplan::elsewhere(&planned, this);
        let entries = stageplan::plan(&stage_tests, &elsewhere, !user_filter);
        let spec = RunSpec {
            guest,
            topo,
            label: &format!("test-{}-{}-{}", kernel.name, guest.name(), topo.name()),
            script: runner_script(&entries, &stage_args, test_timeout),
            cwd: None,
            timeout: stage_timeout,
            display: Display::Progress,
            payload: &stage_payload,
        };
        match bed.run(&spec) {
            Ok(out) => {
                let (per_entry, guest_counts, mut notes) = collect(&out, &entries);
                let mut counts = guest_counts;
                let mut free = Counts::default();
                for (e, c) in entries.iter().zip(&per_entry) {
                    counts += *c;
                    if DEVICE_FREE.contains(&e.artifact.name.as_str()) {
                        free += *c;
                    }
                }
                if !user_filter && counts.filtered > 0 {
                    let mut why = Vec::new();
                    if guest == Guest::Minimal {
                        why.push(format!("`{INTEROP}` (the minimal guest has no C tools)"));
                    }
                    if topo == Topo::One {
                        why.push(format!("`{TWO_NODE}` (one-node topology)"));
                    }
                    for (marker, reason) in lacking(kernel.name) {
                        why.push(format!(
                            "`{marker}` (rxe of kernel {} {reason})",
                            kernel.name
                        ));
                    }
                    let why = why.join(" and ");
                    notes.push(format!("{} test(s) skipped: {why}", counts.filtered));
                    counts.ignored += counts.filtered;
                }
                match &device_free_ran {
                    None => device_free_ran = Some((name.clone(), free)),
                    Some((first, c)) => {
                        let n = c.passed + c.failed + c.ignored;
                        counts.ignored += n;
                        notes.push(format!(
                            "the device-free binaries (simulators, fixtures, layout probes) \
                             ran in stage {first}: their {n} test(s) counted as skipped here"
                        ));
                    }
                }
                report.add(&name, counts, notes, t.elapsed());
            }
            Err(e) => fail_stage(report, &name, e.0, t),
        }
    }
    let bins = Binaries {
        tests: &tests.tests,
        payload: &payload,
        args: &args,
        test_timeout,
        stage_timeout,
    };
    if let Some(kernel) = trixie {
        trixie_stage(report, kernel, &bins);
    }
    for kernel in siw {
        siw_stage(report, kernel, &bins);
    }
}

/// The kernels of the siw stages in the default run: all three. The newest kernel's (7.3.4)
/// joined when every failure seen there was explained and fixed (the last, perftest's
/// `ib_read_lat` ending in LOC_QP_OP_ERR at its closing exchange, by the bed's fourth siw
/// patch; docs/testing.md, "siw on the newest kernel").
pub const SIW_KERNELS: &[&str] = &["6.1", "6.12", "newest"];

/// The name of the siw stage of `kernel`: `vm 6.1 siw host/one`.
pub fn siw_stage_name(kernel: KernelSpec) -> String {
    format!("vm {} siw host/one", kernel.name)
}

/// The test binaries the siw stages run with `--include-ignored` (their siw tests are
/// `#[ignore]`d everywhere else).
// cm/vm_siw: the siw provider under the verbs objects and the rdma_cm; cm/vm_endpoint and
// cli/rping: the Endpoint suite and `rverbs rping` (with rdma-core's rping both ways) on siw
// (their tests are not ignored: in the rxe stages they run on rxe); cm/vm_sink: what a posted
// receive or READ may write stays allocated until its completion (issue #31), on rxe in the
// rxe stages and on siw here; cli/selftest_vm: `rverbs
// selftest` on siw (on rxe in the rxe stages); capi/vm_capi_siw: Debian's rdmacm tools, perftest
// with -R and rdma-core's Python suite on our C drop-in over siw, against rdma-core's libsiw;
// async/vm_siw: the tokio layer's connect/accept on iWARP; capi/vm_new_verbs and
// rverbs/vm_port_speed: the verbs of rdma-core 59–64 and their refusals on siw (on rxe in the
// rxe stages).
pub const SIW_TESTS: &[&str] = &[
    "cli/siw_vm",
    "cm/vm_siw",
    "cm/vm_endpoint",
    "cm/vm_sink",
    "cli/rping",
    "cli/selftest_vm",
    "capi/vm_capi_siw",
    "async/vm_siw",
    "capi/vm_new_verbs",
    "rverbs/vm_port_speed",
];

/// Boots the host guest of `kernel` with siw devices (`--provider siw`: siw.ko is built for
/// the kernel on first use and cached) and runs [`SIW_TESTS`] there.
fn siw_stage(report: &mut Report, kernel: KernelSpec, bins: &Binaries) {
    let t = Instant::now();
    let name = &siw_stage_name(kernel);
    println!(
        "xtask: ==== {name}: siw.ko for kernel {} (built once from Debian's sources with the \
         bed's patches {}; cached), host guest, one node",
        kernel.name,
        crate::siw::PATCHES
            .map(|(n, why)| format!("{n}: {why}"))
            .join("; "),
    );
    let config = vm::BedConfig {
        provider: vm::Provider::Siw,
        ..util::bed_config(kernel)
    };
    let setup = format!(
        "siw set-up of kernel {} (the rxe stages do not need it)",
        kernel.name
    );
    let Some(bed) = prepare_bed(report, name, &config, &setup, "siw guest", t) else {
        return;
    };
    let label = format!("test-{}-siw-host-one", kernel.name);
    let run = bins.run(
        &bed,
        SIW_TESTS,
        &label,
        bins.payload,
        &[],
        bins.test_timeout,
    );
    match run {
        Ok((counts, notes)) => report.add(name, counts, notes, t.elapsed()),
        Err(e) => fail_stage(report, name, e, t),
    }
}

/// Prepares the bed of `config` for stage `name` and says which kernel it got (`guest`: what
/// the line calls it); `None` once the stage is recorded as failed, the error prefixed with
/// `setup` (what was being set up).
fn prepare_bed(
    report: &mut Report,
    name: &str,
    config: &vm::BedConfig,
    setup: &str,
    guest: &str,
    t: Instant,
) -> Option<Bed> {
    match Bed::prepare(config) {
        Ok(bed) => {
            println!(
                "xtask: {guest} kernel {} {} ({}), set-up took {}",
                config.kernel.name,
                bed.kernel.release,
                bed.kernel.package,
                fmt_secs(t.elapsed())
            );
            Some(bed)
        }
        Err(e) => {
            fail_stage(report, name, format!("{setup}: {e}"), t);
            None
        }
    }
}

/// What the stages that run only some test binaries of the VM build share (the siw and trixie
/// stages): the build's binaries, the payload, the run's test arguments and timeouts.
struct Binaries<'a> {
    tests: &'a [build::Artifact],
    payload: &'a Payload,
    args: &'a [String],
    test_timeout: Duration,
    stage_timeout: Duration,
}

impl Binaries<'_> {
    /// Runs the binaries `names` (all of which the VM build must have: [`pick_tests`]) in the
    /// host guest of `bed`, one node, with `payload`, the run's arguments, `extra` ones and
    /// `--include-ignored` (their tests are `#[ignore]`d outside their stage), each binary
    /// under `binary_timeout`: the stage's counts and notes.
    fn run(
        &self,
        bed: &Bed,
        names: &[&str],
        label: &str,
        payload: &Payload,
        extra: &[String],
        binary_timeout: Duration,
    ) -> Result<(Counts, Vec<String>), String> {
        let picked = pick_tests(self.tests, names)?;
        let entries = stageplan::plan(&picked, &[], false);
        let mut args = self.args.to_vec();
        args.extend_from_slice(extra);
        args.push("--include-ignored".into());
        let spec = RunSpec {
            guest: Guest::Host,
            topo: Topo::One,
            label,
            script: runner_script(&entries, &args, binary_timeout),
            cwd: None,
            timeout: self.stage_timeout,
            display: Display::Progress,
            payload,
        };
        let out = bed.run(&spec).map_err(|e| e.0)?;
        let (per_entry, mut counts, notes) = collect(&out, &entries);
        for c in &per_entry {
            counts += *c;
        }
        Ok((counts, notes))
    }
}

/// The kernel of the trixie stage: Debian 13's own, as the userland is Debian 13's.
pub const TRIXIE_KERNEL: &str = "6.12";

/// The name of the trixie stage: `vm 6.12 trixie host/one`.
pub fn trixie_stage_name(kernel: KernelSpec) -> String {
    format!("vm {} trixie host/one", kernel.name)
}

/// The test binary of the trixie stage, run there with `--include-ignored` (its tests are
/// `#[ignore]`d everywhere else): rdma-core 56's tools against ours both ways, and
/// rdma-core 56's Python suite on both libraries.
pub const TRIXIE_TESTS: &[&str] = &["capi/vm_trixie"];

/// Boots the host guest of `kernel` (rxe, one node) with the Debian 13 userland
/// (crates/testbed/src/userland.rs: made once from the archive, cached) named to the tests by
/// `RVERBS_TRIXIE_ROOT`, and runs [`TRIXIE_TESTS`] there, once per run.
fn trixie_stage(report: &mut Report, kernel: KernelSpec, bins: &Binaries) {
    let t = Instant::now();
    let name = &trixie_stage_name(kernel);
    println!(
        "xtask: ==== {name}: rdma-core 56 and pyverbs 56 (the Debian 13 userland, made once, \
         cached), host guest, one node"
    );
    let root = match rverbs_testbed::userland::prepare(&util::vm_dir()) {
        Ok(r) => r,
        Err(e) => return fail_stage(report, name, format!("the Debian 13 userland: {e}"), t),
    };
    let setup = format!("vm set-up of kernel {}", kernel.name);
    let config = util::bed_config(kernel);
    let Some(bed) = prepare_bed(report, name, &config, &setup, "guest", t) else {
        return;
    };
    let mut payload = bins.payload.clone();
    payload.env.push((
        rverbs_testbed::userland::ROOT_ENV.to_string(),
        root.to_string_lossy().into_owned(),
    ));
    payload.host_paths.push(root);
    // Tests of the binary that run only when asked ([`TRIXIE_OPT_IN`]), skipped otherwise.
    let mut skip = Vec::new();
    let mut held = Vec::new();
    for (test, var, why) in TRIXIE_OPT_IN {
        if std::env::var(var).as_deref() != Ok("1") {
            skip.extend(["--skip".to_string(), test.to_string()]);
            held.push(format!("`{test}` runs with {var}=1 only: {why}"));
        }
    }
    let label = format!("test-{}-trixie-host-one", kernel.name);
    // The stage is its one binary: it gets the stage's time, not one binary's.
    let binary_timeout =
        (bins.test_timeout).max(bins.stage_timeout.saturating_sub(Duration::from_secs(60)));
    match bins.run(&bed, TRIXIE_TESTS, &label, &payload, &skip, binary_timeout) {
        Ok((mut counts, mut notes)) => {
            if counts.filtered > 0 {
                notes.push(format!(
                    "{} test(s) skipped: {}",
                    counts.filtered,
                    held.join("; ")
                ));
                counts.ignored += counts.filtered;
            }
            report.add(name, counts, notes, t.elapsed());
        }
        Err(e) => fail_stage(report, name, e, t),
    }
}

/// The test binaries named `names` of the VM build, all of them or an error naming the list (a
/// stage that runs only some binaries: siw, trixie).
fn pick_tests(tests: &[build::Artifact], names: &[&str]) -> Result<Vec<build::Artifact>, String> {
    let picked: Vec<build::Artifact> = tests
        .iter()
        .filter(|a| names.contains(&a.name.as_str()))
        .cloned()
        .collect();
    if picked.len() == names.len() {
        Ok(picked)
    } else {
        Err(format!("the VM build has not all of {names:?}"))
    }
}

/// Tests of `capi/vm_trixie` the trixie stage runs only when their variable is `1`, and counts
/// as skipped (with the reason in a note) otherwise: (test, variable, why).
pub const TRIXIE_OPT_IN: &[(&str, &str, &str)] = &[(
    "pyverbs_56_on_both_libraries_interop",
    "RVERBS_TRIXIE_PYVERBS",
    "in its first run it had not ended when the stage's 840 s ran out (docs/testing.md)",
)];

/// The async load test (crates/async/tests/vm_async.rs: 64 clients, 100 messages each by
/// default) runs one of its two runtimes with 1,000 messages per client in each VM stage: the
/// multi-thread runtime on 6.1, the current-thread one on 6.12. The default split has each
/// kernel in both topologies, so every runtime/topology pair gets its 1,000-message run once
/// per run; both in every stage would not fit the time budget (docs/testing.md).
fn async_load(kernel: KernelSpec) -> (String, String) {
    let var = if kernel.name == "6.1" {
        "RVERBS_ASYNC_MSGS_MULTI"
    } else {
        "RVERBS_ASYNC_MSGS_CURRENT"
    };
    (var.to_string(), "1000".to_string())
}

pub fn env_secs(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// The script the guest runs: the background entries started first (`&`), then every other
/// test binary in turn, from its package directory; `wait` before the entries that must not
/// overlap the background ones, and before the end.
///
/// A binary's output goes to the guest's own memory (`/tmp/rverbs-logs`) while it runs and is
/// copied to `tests/<i>.log` on the run share, with its exit code in `tests/<i>.rc`, when it
/// ends; its exit code and libtest summary line also go to the console. A binary therefore
/// runs even when the share cannot take a file, and its result still reaches the host
/// (`collect` reads the console line then, and says so). Should the copy fail, the console
/// gets the reason and the log's last lines.
fn runner_script(entries: &[Entry], args: &[String], timeout: Duration) -> String {
    // libtest's unstable `--report-time` (RVERBS_VM_TEST_TIMES=1) needs RUSTC_BOOTSTRAP.
    let test_env = if args.iter().any(|a| a == "--report-time") {
        "RUSTC_BOOTSTRAP=1"
    } else {
        ""
    };
    let mut s = format!("RVERBS_TEST_ENV={test_env}\n");
    s.push_str(
        "T=/tmp/rverbs-vm/tests\nL=/tmp/rverbs-logs\n\
         mkdir -p \"$T\" || echo \"RVERBS-VM-ERROR: cannot create $T on the run share\"\n\
         mkdir -p \"$L\"\n\
         run_one() {\n\
         \x20   i=$1; name=$2; dir=$3; shift 3\n\
         \x20   echo \"RVERBS-VM-TEST: [$i] $name\"\n\
         \x20   t0=$(cut -d' ' -f1 /proc/uptime)\n\
         \x20   ( cd \"$dir\" 2>/dev/null || cd /; exec env $RVERBS_TEST_ENV \"$@\" ) > \"$L/$i.log\" 2>&1\n\
         \x20   rc=$?\n\
         \x20   dt=$(awk -v t0=\"$t0\" '{ printf \"%.1f\", $1 - t0 }' /proc/uptime)\n\
         \x20   echo \"RVERBS-VM-TEST: [$i] $name: exit $rc after $dt s; $(grep '^test result:' \"$L/$i.log\" | tail -n 1)\"\n\
         \x20   if ! { cp \"$L/$i.log\" \"$T/$i.log\" && echo $rc > \"$T/$i.rc\"; }; then\n\
         \x20       echo \"RVERBS-VM-ERROR: the results of [$i] $name did not reach the run share\"\n\
         \x20       tail -n 40 \"$L/$i.log\" | sed \"s/^/RVERBS-VM-LOG [$i]: /\"\n\
         \x20   fi\n\
         }\n",
    );
    for (i, e) in entries.iter().enumerate() {
        if e.after_background {
            s.push_str("wait\n");
        }
        let a = &e.artifact;
        let mut all = args.to_vec();
        all.extend(e.args.iter().cloned());
        let label = if e.background {
            format!("{} (background)", a.name)
        } else {
            a.name.clone()
        };
        let _ = writeln!(
            s,
            "run_one {i} {} {} timeout {} {} {}{}",
            util::shell_quote(&label),
            util::shell_quote(&a.package_dir.to_string_lossy()),
            timeout.as_secs(),
            util::shell_quote(&a.executable.to_string_lossy()),
            util::shell_join(&all),
            if e.background { " &" } else { "" },
        );
    }
    s.push_str("wait\nexit 0\n");
    s
}

/// Turns a guest run into counts: per test binary from its log and exit code; a binary
/// without a result, and a guest that did not finish, count as failures.
/// Returns the counts per binary (in the order of `tests`) and the guest's own (one failure
/// when it did not end cleanly).
fn collect(out: &vm::Outcome, entries: &[Entry]) -> (Vec<Counts>, Counts, Vec<String>) {
    let mut per_binary = Vec::with_capacity(entries.len());
    let mut guest = Counts::default();
    let mut notes = Vec::new();
    if let Some(r) = out.ready_after {
        notes.push(format!("guest ready after {}", fmt_secs(r)));
    }
    if let Some(c) = &out.crashed_boot {
        notes.push(format!(
            "WARNING: the first boot's kernel died of an int3 trap (run-time code patching \
             under TCG), so the stage ran in a second boot; that console: {}",
            c.display()
        ));
    }
    for d in &out.fallback {
        notes.push(format!("WARNING: {d} was created with iproute2's `rdma link add` (FALLBACK), not `rverbs link add`"));
    }
    let dir = out.run_dir.join("tests");
    let console = console_results(&fs::read_to_string(&out.console_log).unwrap_or_default());
    let mut unfinished = false;
    for (i, e) in entries.iter().enumerate() {
        let a = &e.artifact;
        let log = dir.join(format!("{i}.log"));
        let mut text = fs::read_to_string(&log).unwrap_or_default();
        let mut rc = fs::read_to_string(dir.join(format!("{i}.rc")))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if rc.is_none() {
            // The binary's files did not reach the run share: its console line still tells
            // how it ended (runner_script).
            if let Some((code, result)) = console.get(&i) {
                rc = Some(*code);
                text = result.clone();
                notes.push(format!(
                    "WARNING: {}: its log and exit code did not reach the run share; its \
                     result comes from the console (exit {code}{})",
                    a.name,
                    if result.is_empty() {
                        ", no summary line"
                    } else {
                        ""
                    }
                ));
            }
        }
        let res = parse_results(&text);
        let mut c = res.unwrap_or_default();
        let mut why = None;
        match (rc, res) {
            (None, _) => {
                c.failed += 1;
                unfinished = true;
                why = Some("did not finish (the guest ended before it)".to_string());
            }
            (Some(0), None) => {
                c.passed += 1;
                notes.push(format!(
                    "{}: no libtest summary; counted as 1 passed by its exit code 0",
                    a.name
                ));
            }
            (Some(rc), None) => {
                c.failed += 1;
                let timeout = if rc == 124 || rc == 143 {
                    " (timed out?)"
                } else {
                    ""
                };
                why = Some(format!("died without a result line: exit {rc}{timeout}"));
            }
            (Some(rc), Some(r)) if rc != 0 && r.failed == 0 => {
                c.failed += 1;
                why = Some(format!(
                    "exit {rc} although its result line shows no failure"
                ));
            }
            (Some(_), Some(r)) if r.failed > 0 => {
                why = Some(format!("{} test(s) failed", r.failed))
            }
            _ => {}
        }
        if res.is_some() {
            if let Some(f) = stageplan::adjust(e, &mut c, &mut notes) {
                why = Some(why.map_or(f.clone(), |w| format!("{w}; {f}")));
            }
        }
        if let Some(why) = why {
            notes.push(format!("FAILED: {}: {why}; log: {}", a.name, log.display()));
            print_log_tail(&log, 60);
        }
        per_binary.push(c);
    }
    if matches!(out.status, GuestStatus::Exited(0)) {
        // A guest that did not end cleanly lists all its errors below; one that did names
        // only those about the run share, and shows its console when a binary has no result.
        let share_errors: Vec<&String> = out
            .errors
            .iter()
            .filter(|e| e.contains("run share"))
            .collect();
        for e in &share_errors {
            notes.push(format!("guest error: {e}"));
        }
        if unfinished || !share_errors.is_empty() {
            notes.push(out.where_to_look().replace('\n', "; "));
            vm::print_tail(&out.console_log, 80);
        }
    }
    match &out.status {
        GuestStatus::Exited(0) => {}
        _ => {
            guest.failed += 1;
            notes.push(format!("FAILED: {}", out.describe()));
            for e in &out.errors {
                notes.push(format!("guest error: {e}"));
            }
            notes.push(out.where_to_look().replace('\n', "; "));
            vm::print_tail(&out.console_log, 40);
        }
    }
    (per_binary, guest, notes)
}

/// The exit code and libtest summary of each binary from the guest's console lines
/// `RVERBS-VM-TEST: [i] NAME: exit RC after T s; SUMMARY` (runner_script), by index.
fn console_results(console: &str) -> std::collections::HashMap<usize, (i32, String)> {
    let mut out = std::collections::HashMap::new();
    for line in console.lines() {
        let Some(rest) = line
            .trim_end_matches('\r')
            .strip_prefix("RVERBS-VM-TEST: [")
        else {
            continue;
        };
        let Some((index, rest)) = rest.split_once("] ") else {
            continue;
        };
        let Some((_name, rest)) = rest.split_once(": exit ") else {
            continue;
        };
        let Some((code, rest)) = rest.split_once(" after ") else {
            continue;
        };
        let (Ok(index), Ok(code)) = (index.parse::<usize>(), code.parse::<i32>()) else {
            continue;
        };
        let summary = rest.split_once("; ").map_or("", |(_, s)| s).trim();
        out.insert(index, (code, summary.to_string()));
    }
    out
}

fn print_log_tail(path: &Path, lines: usize) {
    if path.exists() {
        vm::print_tail(path, lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_skips_the_tests_of_what_its_rxe_lacks() {
        let of = |k| lacking(k).map(|(m, _)| m).collect::<Vec<_>>();
        assert_eq!(of("6.1"), ["needs_odp", "needs_atomic_write"]);
        assert_eq!(of("6.12"), ["needs_odp"]);
        assert!(of("newest").is_empty());
    }

    #[test]
    fn result_lines_are_summed() {
        let text = "\
running 2 tests
test a ... ok
test b ... ignored, needs an RDMA device
test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s

test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 5 filtered out; finished in 1.20s
";
        assert_eq!(
            parse_results(text),
            Some(Counts {
                passed: 4,
                failed: 2,
                ignored: 1,
                filtered: 5
            })
        );
        assert_eq!(parse_results("running 1 test\nthread panicked\n"), None);
    }

    #[test]
    fn console_lines_give_exit_codes_and_summaries() {
        let console = "\
RVERBS-VM-TEST: [0] cm/vm_cm (background)
RVERBS-VM-TEST: [1] uverbs/vm_smoke: exit 0 after 0.7 s; test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.05s\r
RVERBS-VM-TEST: [2] cli/rping: exit 124 after 300.0 s; 
RVERBS-VM-TEST: [0] cm/vm_cm (background): exit 101 after 78.5 s; test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 13 filtered out; finished in 77.71s
RVERBS-VM-TEST: [x] bad: exit 0 after 1 s; 
";
        let r = console_results(console);
        assert_eq!(r.len(), 3);
        assert_eq!(r[&1].0, 0);
        assert_eq!(
            parse_results(&r[&1].1).map(|c| (c.passed, c.failed)),
            Some((1, 0))
        );
        assert_eq!(r[&2], (124, String::new()));
        assert_eq!(r[&0].0, 101);
        assert_eq!(
            parse_results(&r[&0].1).map(|c| (c.failed, c.filtered)),
            Some((1, 13))
        );
    }

    #[test]
    fn device_free_names_exist() {
        for name in DEVICE_FREE.iter().chain(SIW_TESTS) {
            let (krate, file) = name.split_once('/').unwrap();
            let path = util::workspace_root()
                .join("crates")
                .join(krate)
                .join("tests")
                .join(format!("{file}.rs"));
            assert!(
                path.is_file(),
                "DEVICE_FREE or SIW_TESTS names {name}: no {}",
                path.display()
            );
        }
    }

    #[test]
    fn runner_quotes_paths_and_records_status() {
        let a = build::Artifact {
            executable: PathBuf::from("/t/deps/vm smoke-1"),
            package_dir: PathBuf::from("/w/crates/uverbs"),
            name: "uverbs/vm_smoke".into(),
            kind: "test".into(),
            test_harness: true,
        };
        let entries = stageplan::plan(&[a], &[], true);
        let s = runner_script(
            &entries,
            &["--test-threads=1".into(), "a b".into()],
            Duration::from_secs(30),
        );
        assert!(
            s.contains("run_one 0 uverbs/vm_smoke /w/crates/uverbs timeout 30 '/t/deps/vm smoke-1' --test-threads=1 'a b'\n"),
            "{s}"
        );
        assert!(s.contains("> \"$T/$i.rc\""));
        // The binary writes into guest memory; the share gets a copy when it ends.
        assert!(s.contains("> \"$L/$i.log\" 2>&1"), "{s}");
        assert!(s.contains("cp \"$L/$i.log\" \"$T/$i.log\""), "{s}");
        assert!(s.trim_end().ends_with("wait\nexit 0"), "{s}");
    }

    #[test]
    fn background_entries_start_first_and_are_waited_for() {
        let art = |name: &str| build::Artifact {
            executable: PathBuf::from(format!("/t/{name}")),
            package_dir: PathBuf::from("/w"),
            name: name.into(),
            kind: "test".into(),
            test_harness: true,
        };
        let entries = stageplan::plan(
            &[
                art("rverbs/verbs_errors"),
                art("cm/vm_cm"),
                art("cli/rping"),
            ],
            &[],
            true,
        );
        let s = runner_script(
            &entries,
            &["--test-threads=1".into()],
            Duration::from_secs(30),
        );
        let lines: Vec<&str> = s
            .lines()
            .filter(|l| l.starts_with("run_one ") || *l == "wait")
            .collect();
        assert_eq!(
            lines,
            [
                "run_one 0 'cm/vm_cm (background)' /w timeout 30 /t/cm/vm_cm --test-threads=1 --exact address_nobody_has_times_out_or_is_unreachable &",
                "run_one 1 cm/vm_cm /w timeout 30 /t/cm/vm_cm --test-threads=1 --skip address_nobody_has_times_out_or_is_unreachable",
                "run_one 2 cli/rping /w timeout 30 /t/cli/rping --test-threads=1",
                "wait",
                "run_one 3 rverbs/verbs_errors /w timeout 30 /t/rverbs/verbs_errors --test-threads=1",
                "wait",
            ]
        );
    }
}
