//! `cargo xtask fuzz` and the `fuzz` stage of `cargo xtask test`: the fuzz targets of `fuzz/`
//! (one per parser family of kernel-, device- and peer-written bytes; each calls the
//! `fuzzing` module of its crate, there with `--cfg rverbs_fuzzing`) built with the nightly toolchain as cargo-fuzz builds them
//! (libFuzzer, SanitizerCoverage, AddressSanitizer, debug assertions and overflow checks), then
//! each run for a fixed time over a scratch corpus plus the committed seeds.
//!
//! A target that exits non-zero or leaves a new file in its artifact directory
//! (`target/fuzz/artifacts/<target>/`, where libFuzzer saves the input that crashed) is a
//! failure whose note names the saved input. Without the nightly toolchain or a C++ compiler
//! (libfuzzer-sys compiles libFuzzer) the stage counts one skipped, with a note, never a pass.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::testcmd::{Counts, Report};
use crate::util::{self, fmt_secs, Result};

/// The fuzz targets (`fuzz/fuzz_targets/<name>.rs`), in the order they run.
pub const TARGETS: &[&str] = &[
    "uverbs_netlink",
    "uverbs_sysfs_text",
    "uverbs_completions",
    "cm_events",
    "cm_addresses",
    "cm_queries",
    "mlx5_cqe",
    "mlx5_responses",
    "rxe_queue",
];

/// Seconds per target in `cargo xtask test` and by default in `cargo xtask fuzz`: nine targets
/// of 10 s, two at a time, plus the build keep the stage near three minutes on a 2-core
/// machine.
pub const DEFAULT_SECONDS: u64 = 10;

/// Targets run at once (at most one per core).
const JOBS: usize = 2;

/// What cargo-fuzz passes (its `BuildOptions`, sanitizer address, with debug assertions), and
/// `--cfg rverbs_fuzzing`, which adds the crates' hidden `fuzzing` modules the targets call.
const RUSTFLAGS: &[&str] = &[
    "--cfg",
    "rverbs_fuzzing",
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "--cfg",
    "fuzzing",
    "-Cdebug-assertions",
    "-Coverflow-checks",
    "-Zsanitizer=address",
];

/// The build target: given explicitly so that RUSTFLAGS skip build scripts and proc macros
/// (as cargo-fuzz does).
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// `target/fuzz/`: the build, the scratch corpora, the artifacts and the logs.
fn fuzz_dir() -> PathBuf {
    util::target_dir().join("fuzz")
}

/// The nightly toolchain's cargo ([`util::nightly_cargo`]), without the caller's
/// RUSTFLAGS: the fuzz build sets its own.
fn nightly_cargo() -> Command {
    let mut c = util::nightly_cargo();
    c.env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    c
}

fn works(c: &mut Command) -> bool {
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why the targets cannot be built here, if they cannot.
fn missing_tools() -> Option<String> {
    if !works(nightly_cargo().arg("--version")) {
        return Some("no nightly toolchain (`rustup toolchain install nightly`)".into());
    }
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    if !works(Command::new(&cxx).arg("--version")) {
        return Some(format!(
            "no C++ compiler (`{cxx}`; libfuzzer-sys compiles libFuzzer; Debian: g++)"
        ));
    }
    None
}

/// `cargo xtask fuzz [--seconds N] [TARGET...]`.
pub fn cmd(args: &[String]) -> Result<u8> {
    let mut secs = DEFAULT_SECONDS;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let v = it.next().ok_or("--seconds needs a value")?;
                secs = v
                    .parse()
                    .ok()
                    .filter(|&s| s > 0)
                    .ok_or_else(|| format!("--seconds takes a positive number, not `{v}`"))?;
            }
            "--help" | "-h" => {
                print!("{}", crate::HELP);
                return Ok(0);
            }
            t if TARGETS.contains(&t) => targets.push(t),
            other => crate::bail!(
                "`{other}` is no fuzz target (they are: {})",
                TARGETS.join(", ")
            ),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    let t = Instant::now();
    let (counts, notes) = run(secs, &targets);
    for n in &notes {
        println!("xtask:     {n}");
    }
    println!(
        "xtask: fuzz: {} passed, {} failed, {} skipped ({})",
        counts.passed,
        counts.failed,
        counts.ignored,
        fmt_secs(t.elapsed())
    );
    Ok(if counts.failed == 0 && counts.passed > 0 {
        0
    } else {
        1
    })
}

/// The `fuzz` stage of `cargo xtask test`: every target for [`DEFAULT_SECONDS`].
pub fn stage(report: &mut Report) {
    if !report.wants("fuzz") {
        return;
    }
    let t = Instant::now();
    let (counts, notes) = run(DEFAULT_SECONDS, TARGETS);
    report.add("fuzz", counts, notes, t.elapsed());
}

/// Builds `targets` and runs each for `secs`: one passed or failed per target, or one
/// skipped for all when the tools are missing.
fn run(secs: u64, targets: &[&str]) -> (Counts, Vec<String>) {
    println!(
        "xtask: ==== fuzz: {} target(s), {secs} s each (nightly, libFuzzer, ASan)",
        targets.len()
    );
    if let Some(why) = missing_tools() {
        let note = format!("skipped: {why}");
        eprintln!("xtask: fuzz: WARNING: {note}: the fuzz targets did NOT run");
        let c = Counts {
            ignored: 1,
            ..Default::default()
        };
        return (c, vec![note]);
    }
    let failed = |note: String| {
        let c = Counts {
            failed: 1,
            ..Default::default()
        };
        (c, vec![note])
    };
    let dir = fuzz_dir();
    if let Err(e) = build(&dir, targets) {
        return failed(format!("FAILED: building the fuzz targets: {}", e.0));
    }
    // libFuzzer runs one input at a time: one target per core, at most JOBS at once.
    let jobs = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, JOBS);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(vec![None; targets.len()]);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(t) = targets.get(i) else { break };
                let r = run_one(&dir, t, secs);
                match &r {
                    Ok(summary) => println!("xtask: fuzz {t}: ok: {summary}"),
                    Err(note) => eprintln!("xtask: fuzz {t}: {note}"),
                }
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    let mut counts = Counts::default();
    let mut notes = Vec::new();
    for r in results.into_inner().unwrap_or_else(|e| e.into_inner()) {
        match r {
            Some(Ok(_)) => counts.passed += 1,
            Some(Err(note)) => {
                counts.failed += 1;
                notes.push(note);
            }
            None => {
                counts.failed += 1;
                notes.push("FAILED: a fuzz target did not run".into());
            }
        }
    }
    (counts, notes)
}

fn build(dir: &Path, targets: &[&str]) -> Result<()> {
    let manifest = util::workspace_root().join("fuzz/Cargo.toml");
    let mut cmd = nightly_cargo();
    cmd.args(["build", "--release", "--target", TRIPLE, "--manifest-path"])
        .arg(&manifest)
        .env("RUSTFLAGS", RUSTFLAGS.join(" "))
        .env("CARGO_TARGET_DIR", dir.join("build"));
    for t in targets {
        cmd.args(["--bin", t]);
    }
    println!(
        "xtask: RUSTFLAGS='{}' {}",
        RUSTFLAGS.join(" "),
        util::show(&cmd)
    );
    let t = Instant::now();
    util::run(&mut cmd)?;
    println!("xtask: fuzz targets built in {}", fmt_secs(t.elapsed()));
    Ok(())
}

fn files(d: &Path) -> BTreeSet<PathBuf> {
    fs::read_dir(d)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Runs one target; `Ok` with libFuzzer's last status line, or the failure's note.
fn run_one(dir: &Path, target: &str, secs: u64) -> std::result::Result<String, String> {
    let bin = dir.join("build").join(TRIPLE).join("release").join(target);
    let seeds = util::workspace_root().join("fuzz/corpus").join(target);
    let scratch = dir.join("corpus").join(target);
    let artifacts = dir.join("artifacts").join(target);
    let log = dir.join("logs").join(format!("{target}.log"));
    for d in [&scratch, &artifacts, &dir.join("logs")] {
        fs::create_dir_all(d).map_err(|e| format!("FAILED: {}: {e}", d.display()))?;
    }
    let before = files(&artifacts);
    let out = fs::File::create(&log).map_err(|e| format!("FAILED: {}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("FAILED: {}: {e}", log.display()))?;
    let mut cmd = Command::new(&bin);
    cmd.arg(format!("-max_total_time={secs}"))
        // One input taking 10 s is a hang: a failure with the input saved.
        .arg("-timeout=10")
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg(&scratch)
        .arg(&seeds)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    println!("xtask: {}", util::show(&cmd));
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("FAILED: cannot run {}: {e}", bin.display()))?;
    // libFuzzer stops itself after max_total_time (an input it is running finishes first, and
    // a hanging input is cut by -timeout); a minute more is a hang of its own.
    let deadline = Instant::now() + Duration::from_secs(secs + 60);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        };
    };
    let text = fs::read_to_string(&log).unwrap_or_default();
    let new: Vec<PathBuf> = files(&artifacts).difference(&before).cloned().collect();
    let ok = status.is_some_and(|s| s.success()) && new.is_empty();
    if ok {
        let last = text
            .lines()
            .rev()
            .find(|l| l.contains("DONE"))
            .unwrap_or("(no summary line)");
        return Ok(last.trim().to_string());
    }
    // The reason, as libFuzzer and the panic put it, for the report.
    for l in text
        .lines()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        eprintln!("    {l}");
    }
    let how = match status {
        Some(s) => util::describe_status(s),
        None => format!("still running after {} s: killed", secs + 60),
    };
    let input = match new.as_slice() {
        [] => "no input saved".to_string(),
        paths => format!(
            "input saved at {} (rerun: {} {})",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            bin.display(),
            paths[0].display()
        ),
    };
    Err(format!(
        "FAILED: fuzz target {target} ({how}): {input}; log: {}",
        log.display()
    ))
}
