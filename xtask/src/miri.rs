//! The `miri` stage of `cargo xtask test`: the unit tests of the code that touches memory
//! shared with the kernel or a device (memory regions and the shared-memory copies with their
//! race tests, INLINE posts racing `Mr::write_at` on rxe, siw and mlx5, `PageBuf` and the
//! mapping owner it sits on, the data path's spin lock, the rxe and
//! siw rings and their completion views, the mlx5 CQ ring and its clean at RESET, the CQE
//! parsers, the mlx5 queue buffers' sizing checks, the lazy completion `RawWc`, the private
//! copy behind `Endpoint::post_send_inline`) under Miri, each suite under both aliasing
//! models: Stacked Borrows (Miri's default) and Tree Borrows.
//!
//! Needs the nightly toolchain's `miri` and `rust-src` components. If they are missing the
//! stage tries `rustup +nightly component add miri rust-src` once; if Miri still cannot run,
//! the stage says `skipped: no miri` and counts one skipped, never a pass.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::testcmd::{parse_results, Counts};
use crate::util;

/// (package, libtest arguments: name filters and skips) run under Miri.
const SUITES: &[(&str, &[&str])] = &[
    (
        "rverbs-uverbs",
        &[
            "mr::",
            "shared::",
            "wr::",
            "wc::",
            "mapping::",
            "sync::",
            "ledger::",
        ],
    ),
    // The exhaustive fast-path/general-rule comparison takes over 10 minutes under Miri even
    // with its Miri-reduced input set; it runs natively in the host tests.
    (
        "rverbs-provider",
        &[
            "rxe::",
            "mlx5::cqe",
            // The buffers handed lying geometries (issue 21): a refusal missed is UB here.
            "mlx5::wq::tests",
            // The CQ ring: poll, the simulated device thread, the clean of a QP moved to RESET.
            "mlx5::cq::",
            // The siw rings against the simulated kernel thread, the INLINE copy racing a
            // shared writer, the refusals and lying geometries.
            "tests::siw_",
            "--skip",
            "fast_paths_agree_with_the_general_rules",
        ],
    ),
    // The INLINE source of `Endpoint::post_send_inline`: a private copy of the `&[u8]` that
    // the providers' byte-wise atomic copy may read under Stacked Borrows too (issue 31).
    ("rverbs-cm", &["endpoint::inline::"]),
    // The C drop-in's event counting (a destroy waiting for acks on another thread), its
    // NULL object pointers refused, rdma_getaddrinfo's lists freed whole (Miri's leak check),
    // the rsockets shims (bad buffers, addresses and options refused; rclose racing calls
    // on the same rsocket), and `ibv_poll_cq` into an uninitialised C array (no entry past
    // the count returned written).
    (
        "rverbs-capi",
        &[
            "ibverbs::cq::",
            "events::",
            "null_tests::",
            "cma::endpoint::",
            "rsocket::tests",
        ],
    ),
];

/// The aliasing models every suite runs under: (name, MIRIFLAGS).
const MODELS: &[(&str, &str)] = &[
    ("Stacked Borrows", ""),
    ("Tree Borrows", "-Zmiri-tree-borrows"),
];

/// How many Miri runs go at once: the machine CI runs on has two cores.
const WORKERS: usize = 2;

type RunResult = (std::io::Result<std::process::Output>, Duration);

/// Runs `cargo miri test -p PKG --lib -- FILTERS` with `MIRIFLAGS` for each entry of `runs`
/// (package, filters, model, flags), `workers` at a time, in the order given; returns each
/// run's output and duration in the same order.
fn run_on_workers(runs: &[(&str, &[&str], &str, &str)], workers: usize) -> Vec<RunResult> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<RunResult>>> =
        runs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((pkg, filters, _, flags)) = runs.get(i) else {
                    break;
                };
                let started = Instant::now();
                let out = util::nightly_cargo()
                    .args(["miri", "test", "-p", pkg, "--lib", "--"])
                    .args(filters.iter())
                    .env("MIRIFLAGS", flags)
                    .output();
                *results[i].lock().unwrap() = Some((out, started.elapsed()));
            });
        }
    });
    results
        .into_iter()
        .map(|r| r.into_inner().unwrap().expect("every run ran"))
        .collect()
}

fn miri_works() -> bool {
    let ok = |c: &mut Command| c.output().map(|o| o.status.success()).unwrap_or(false);
    ok(util::nightly_cargo().args(["miri", "--version"]))
}

/// Runs the stage; returns its counts, notes and duration.
pub fn stage() -> (Counts, Vec<String>, Duration) {
    let t = Instant::now();
    println!(
        "xtask: ==== miri: cargo +nightly miri test, MIRIFLAGS= (Stacked Borrows) and MIRIFLAGS=-Zmiri-tree-borrows"
    );
    if !miri_works() {
        let _ = Command::new("rustup")
            .args(["+nightly", "component", "add", "miri", "rust-src"])
            .status();
    }
    if !miri_works() {
        println!("xtask: miri: skipped: no miri");
        let c = Counts {
            ignored: 1,
            ..Default::default()
        };
        return (c, vec!["skipped: no miri".to_string()], t.elapsed());
    }
    // The four packages' unit tests built for Miri first (the aliasing model is a
    // flag of the interpreter, not of the build), then the eight runs (each suite under each
    // model) on two workers: Miri interprets a test binary on one host thread, so one run at a
    // time left the machine's second core idle. The outputs are printed in the fixed order
    // below once every run has ended; what each run checks is unchanged.
    let mut total = Counts::default();
    let mut notes = Vec::new();
    for (pkg, _) in SUITES {
        // Package by package, as the runs build it (features are unified per invocation).
        let out = util::nightly_cargo()
            .args(["miri", "test", "-p", pkg, "--lib", "--no-run"])
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                // The runs below build again and report the failure with the compiler's
                // words; this says where it began.
                println!(
                    "xtask: miri: the build of -p {pkg} failed ({}); its runs will say why",
                    out.status
                );
            }
            Err(e) => {
                notes.push(format!("FAILED: cannot run cargo miri: {e}"));
                total.failed += 1;
                return (total, notes, t.elapsed());
            }
        }
    }
    let runs: Vec<(&str, &[&str], &str, &str)> = SUITES
        .iter()
        .flat_map(|(pkg, filters)| {
            MODELS
                .iter()
                .map(move |(model, flags)| (*pkg, *filters, *model, *flags))
        })
        .collect();
    let results = run_on_workers(&runs, WORKERS);
    for ((pkg, _, model, _), (out, took)) in runs.iter().zip(results) {
        println!(
            "xtask: miri: -p {pkg} under {model} ({:.1} s)",
            took.as_secs_f64()
        );
        match out {
            Ok(out) => {
                let text = String::from_utf8_lossy(&out.stdout);
                print!("{text}");
                let c = parse_results(&text).unwrap_or_default();
                if !out.status.success() || c.passed == 0 {
                    let err = String::from_utf8_lossy(&out.stderr);
                    let tail: Vec<&str> = err.lines().rev().take(30).collect();
                    for l in tail.iter().rev() {
                        eprintln!("{l}");
                    }
                    notes.push(format!(
                        "FAILED: miri test -p {pkg} under {model} ({})",
                        out.status
                    ));
                    total.failed += 1;
                }
                total += c;
            }
            Err(e) => {
                notes.push(format!("FAILED: cannot run cargo miri: {e}"));
                total.failed += 1;
            }
        }
    }
    (total, notes, t.elapsed())
}
