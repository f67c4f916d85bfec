//! `cargo xtask mlx5-oracle` and `cargo xtask efa-oracle`: rdma-core's provider (libmlx5,
//! libefa), run against a fake kernel by the test harness
//! `crates/provider/tests/harnesses/<kind>_oracle/harness.c`, tells the bytes every script of
//! `crates/provider/tests/<kind>_oracle/` must produce; rverbs' provider must produce the same
//! (`crates/provider/src/tests/<kind>_oracle.rs`, a unit test of the provider: what it drives
//! is crate-private).
//!
//! - no option: regenerates the golden dumps (`NAME.golden` beside each `NAME.script`);
//! - `--check`: proves the committed dumps are what the C provider produces today (a stage of
//!   `cargo xtask test`);
//! - `--script FILE`: runs FILE through the C provider and rverbs and prints `identical` or
//!   the first differing byte with its step and meaning;
//! - `--bench`: the posting benchmark of `docs/mlx5.md` and `docs/efa.md`
//!   (`crates/provider/benches/<kind>_post/`): instructions per work request inside
//!   `bench_post` (EFA's receive lists: `bench_post_recv`) (callgrind) and ns per work request
//!   (median of five alternating native runs of each side), the C provider and rverbs side by
//!   side, with the check that both runs left the same bytes (needs valgrind).
//!
//! Needs a C compiler, libibverbs-dev (headers, libibverbs.so, libefa.so) and
//! ibverbs-providers (libmlx5, libefa): `.ci/run` installs them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Result};

/// One oracle: the C provider, its harness and scripts, and rverbs' side of it.
pub struct Kind {
    /// `mlx5`, `efa`: the command is `<name>-oracle`, the directories `<name>_oracle`.
    name: &'static str,
    /// The C provider, as reports name it.
    lib: &'static str,
    /// The provider's oracle test (a unit test: `cargo test -p rverbs-provider --lib`).
    test: &'static str,
    /// Headers the harness needs.
    headers: &'static [&'static str],
    /// Libraries it links besides libibverbs and libdl.
    libs: &'static [&'static str],
    /// The environment variables of the test's one-script mode.
    env_script: &'static str,
    env_out: &'static str,
    /// Environment the C provider reads (removed from the harness's).
    env_prefix: &'static str,
}

/// libmlx5 (docs/mlx5.md).
pub const MLX5: Kind = Kind {
    name: "mlx5",
    lib: "libmlx5",
    test: "tests::mlx5_oracle::mlx5_oracle_scripts_match_libmlx5",
    headers: &[
        "/usr/include/infiniband/verbs.h",
        "/usr/include/rdma/mlx5-abi.h",
    ],
    libs: &[],
    env_script: "MLX5_ORACLE_SCRIPT",
    env_out: "MLX5_ORACLE_OUT",
    env_prefix: "MLX5_",
};

/// libefa (docs/efa.md).
pub const EFA: Kind = Kind {
    name: "efa",
    lib: "libefa",
    test: "tests::efa_oracle::efa_oracle_scripts_match_libefa",
    headers: &[
        "/usr/include/infiniband/verbs.h",
        "/usr/include/infiniband/efadv.h",
        "/usr/include/rdma/efa-abi.h",
    ],
    libs: &["-lefa"],
    env_script: "EFA_ORACLE_SCRIPT",
    env_out: "EFA_ORACLE_OUT",
    env_prefix: "EFA_",
};

impl Kind {
    /// Its source, which lists the scripts (`SCRIPTS`).
    fn oracle_src(&self) -> PathBuf {
        util::workspace_root().join(format!("crates/provider/src/tests/{}_oracle.rs", self.name))
    }

    fn scripts_dir(&self) -> PathBuf {
        util::workspace_root().join(format!("crates/provider/tests/{}_oracle", self.name))
    }

    fn harness_src(&self) -> PathBuf {
        util::workspace_root().join(format!(
            "crates/provider/tests/harnesses/{}_oracle/harness.c",
            self.name
        ))
    }

    fn out_dir(&self) -> PathBuf {
        util::target_dir().join(format!("{}-oracle", self.name))
    }
}

fn build_harness(k: &Kind) -> Result<PathBuf> {
    for file in k.headers {
        if !Path::new(file).exists() {
            crate::bail!(
                "{}-oracle: {file} is missing (install libibverbs-dev)",
                k.name
            );
        }
    }
    let out_dir = k.out_dir();
    fs::create_dir_all(&out_dir)
        .map_err(|e| util::Error(format!("create {}: {e}", out_dir.display())))?;
    let exe = out_dir.join("harness");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    util::run(
        Command::new(cc)
            .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(k.harness_src())
            .args(k.libs)
            .args(["-libverbs", "-ldl"]),
    )?;
    Ok(exe)
}

/// The harness run on `script` with nothing the C provider or libibverbs would read from the
/// environment (the harness pins what the script's `env` lines give).
fn harness_cmd(kind: &Kind, harness: &Path, script: &Path) -> Command {
    let mut cmd = Command::new(harness);
    cmd.arg(script);
    for (k, _) in std::env::vars() {
        if k.starts_with(kind.env_prefix)
            || k.starts_with("RDMAV_")
            || k.starts_with("IBV_")
            || k == "SYSFS_PATH"
        {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// The C provider's dump of `script`.
fn c_dump(k: &Kind, harness: &Path, script: &Path) -> Result<String> {
    let out = harness_cmd(k, harness, script)
        .output()
        .map_err(|e| util::Error(format!("run {}: {e}", harness.display())))?;
    if !out.status.success() {
        crate::bail!(
            "{}-oracle: {} harness failed on {} ({}): {}",
            k.name,
            k.lib,
            script.display(),
            util::describe_status(out.status),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).map_err(|_| util::Error("harness printed non-UTF-8".into()))
}

/// rverbs' dump of `script` (the provider's oracle test in its one-script mode).
fn rverbs_dump(k: &Kind, script: &Path) -> Result<String> {
    let out = k.out_dir().join("rverbs.dump");
    let script =
        fs::canonicalize(script).map_err(|e| util::Error(format!("{}: {e}", script.display())))?;
    util::run(
        util::cargo()
            .args([
                "test",
                "-q",
                "-p",
                "rverbs-provider",
                "--lib",
                "--",
                "--exact",
                k.test,
            ])
            .env(k.env_script, &script)
            .env(k.env_out, &out),
    )?;
    fs::read_to_string(&out).map_err(|e| util::Error(format!("{}: {e}", out.display())))
}

/// What a dump line means, for the report of a difference.
fn meaning(line: &str, col: usize) -> String {
    let t: Vec<&str> = line.split_whitespace().collect();
    match t.first() {
        Some(&"udata") => format!("CREATE driver data, byte {}", col.saturating_sub(8) / 2),
        Some(&"wc") => "a completion polled".into(),
        Some(&"caps") | Some(&"max_wr") => "the capacities reported to the caller".into(),
        Some(&"=") => "the post's result (err at N: the failing work request)".into(),
        Some(region) if t.len() == 3 => {
            let start = line.find(t[2]).unwrap_or(0);
            let chunk = u64::from_str_radix(t[1].trim_start_matches('+'), 16).unwrap_or(0);
            format!(
                "{region} (SQ/RQ/SRQ/CQ buffer, doorbell record or UAR page) byte {:#x}",
                chunk + (col.saturating_sub(start) / 2) as u64
            )
        }
        _ => "the step line".into(),
    }
}

/// `Ok(())` if identical, else the first difference described.
fn compare(lib: &str, golden: &str, ours: &str) -> std::result::Result<(), String> {
    let mut step = "before the first step".to_string();
    for (a, b) in golden.lines().zip(ours.lines()) {
        if a.starts_with("step ") {
            step = a.to_string();
        }
        if a != b {
            let col = a
                .bytes()
                .zip(b.bytes())
                .position(|(x, y)| x != y)
                .unwrap_or(a.len().min(b.len()));
            return Err(format!(
                "{step}\n  first difference: {}\n  {lib}: {a}\n  other:   {b}",
                meaning(a, col)
            ));
        }
    }
    let (g, o) = (golden.lines().count(), ours.lines().count());
    if g != o {
        return Err(format!("{lib} printed {g} lines, the other {o}"));
    }
    Ok(())
}

fn scripts(k: &Kind) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = fs::read_dir(k.scripts_dir())
        .map_err(|e| util::Error(format!("{}: {e}", k.scripts_dir().display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "script"))
        .collect();
    v.sort();
    Ok(v)
}

/// The release build of the provider's oracle test (the rverbs side of the benchmark).
fn rverbs_bench_exe() -> Result<PathBuf> {
    let out = util::cargo()
        .args([
            "test",
            "--release",
            "-p",
            "rverbs-provider",
            "--lib",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| util::Error(format!("run cargo: {e}")))?;
    if !out.status.success() {
        crate::bail!("building the release oracle test failed");
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(j) = crate::json::Json::parse(line) else {
            continue;
        };
        if j.get("target").get("name").as_str() == Some("rverbs_provider")
            && j.get("profile").get("test").as_bool() == Some(true)
        {
            if let Some(exe) = j.get("executable").as_str() {
                return Ok(PathBuf::from(exe));
            }
        }
    }
    crate::bail!("cargo named no executable for the provider's unit tests")
}

/// Work requests a benchmark script posts: `n` lists of as many WRs as its `bench` line
/// (EFA's receive benchmark: `rbench`) has.
fn bench_wrs(script: &str) -> Option<u64> {
    let line = script
        .lines()
        .find(|l| l.starts_with("bench ") || l.starts_with("rbench "))?;
    let n: u64 = line
        .split_whitespace()
        .find_map(|t| t.strip_prefix("n="))?
        .parse()
        .ok()?;
    Some(n * line.matches(" id=").count() as u64)
}

/// Instructions callgrind counted (its `summary:` line) in `out`.
fn callgrind_total(out: &Path) -> Result<u64> {
    let text =
        fs::read_to_string(out).map_err(|e| util::Error(format!("{}: {e}", out.display())))?;
    text.lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| util::Error(format!("{}: no callgrind summary", out.display())))
}

/// `bench: X ns per WR` from a run's stderr.
fn ns_per_wr(stderr: &[u8]) -> Option<f64> {
    String::from_utf8_lossy(stderr)
        .lines()
        .find_map(|l| l.strip_prefix("bench: "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

fn run_ok(cmd: &mut Command, what: &str) -> Result<std::process::Output> {
    let out = cmd
        .output()
        .map_err(|e| util::Error(format!("run {what}: {e}")))?;
    if !out.status.success() {
        crate::bail!(
            "{what} failed ({}): {}",
            util::describe_status(out.status),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out)
}

/// `--bench`: see the module documentation.
fn bench(k: &Kind, harness: &Path) -> Result<u8> {
    let exe = rverbs_bench_exe()?;
    let dir = util::workspace_root().join(format!("crates/provider/benches/{}_post", k.name));
    let out_dir = k.out_dir();
    let (n, lib_name) = (k.name, k.lib);
    let mut scripts: Vec<PathBuf> = fs::read_dir(&dir)
        .map_err(|e| util::Error(format!("{}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "script"))
        .collect();
    scripts.sort();
    let rverbs_cmd = |s: &Path, dump: &Path| {
        let mut c = Command::new(&exe);
        c.args(["--exact", k.test, "--nocapture"])
            .env(k.env_script, s)
            .env(k.env_out, dump);
        c
    };
    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "xtask: {n}-oracle: posting benchmark, load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "| script | {lib_name} Ir/WR | rverbs Ir/WR | ratio | {lib_name} ns/WR | rverbs ns/WR |"
    );
    println!("|---|---|---|---|---|---|");
    let mut bad = 0;
    for s in scripts {
        let s = fs::canonicalize(&s).map_err(|e| util::Error(format!("{}: {e}", s.display())))?;
        let name = s.file_stem().unwrap().to_string_lossy().to_string();
        let text = fs::read_to_string(&s).unwrap_or_default();
        let Some(wrs) = bench_wrs(&text) else {
            crate::bail!("{n}-oracle: {} has no `bench ... n=N` line", s.display());
        };
        let (cg_c, cg_r) = (
            out_dir.join(format!("{name}.{lib_name}.callgrind")),
            out_dir.join(format!("{name}.rverbs.callgrind")),
        );
        let rdump = out_dir.join(format!("{name}.rverbs.dump"));
        let mut c = harness_cmd(k, harness, &s);
        let mut vg = Command::new("valgrind");
        vg.args([
            "--tool=callgrind",
            "--toggle-collect=bench_post",
            "--toggle-collect=bench_post_recv",
        ])
        .arg(format!("--callgrind-out-file={}", cg_c.display()))
        .arg(c.get_program())
        .args(c.get_args());
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => vg.env(k, v),
                None => vg.env_remove(k),
            };
        }
        let lib = run_ok(&mut vg, &format!("valgrind on the {lib_name} harness"))?;
        let mut r = rverbs_cmd(&s, &rdump);
        let mut vg = Command::new("valgrind");
        vg.args(["--tool=callgrind", "--toggle-collect=*bench_post*"])
            .arg(format!("--callgrind-out-file={}", cg_r.display()))
            .arg(r.get_program())
            .args(r.get_args());
        for (k, v) in r.get_envs() {
            if let Some(v) = v {
                vg.env(k, v);
            }
        }
        run_ok(&mut vg, "valgrind on the rverbs oracle test")?;
        let ours = fs::read_to_string(&rdump).unwrap_or_default();
        let same = String::from_utf8_lossy(&lib.stdout) == ours;
        if !same {
            println!("xtask: {n}-oracle: {name}: the two runs left different bytes");
            bad += 1;
        }
        let (ic, ir) = (callgrind_total(&cg_c)?, callgrind_total(&cg_r)?);
        let (mut nc, mut nr) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let o = run_ok(&mut c, &format!("the {lib_name} harness"))?;
            nc.extend(ns_per_wr(&o.stderr));
            let o = run_ok(&mut r, "the rverbs oracle test")?;
            nr.extend(ns_per_wr(&o.stderr));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        };
        println!(
            "| {name} | {:.1} | {:.1} | **{:.2}** | {:.1} | {:.1} |",
            ic as f64 / wrs as f64,
            ir as f64 / wrs as f64,
            ir as f64 / ic as f64,
            median(&mut nc),
            median(&mut nr)
        );
    }
    Ok(u8::from(bad > 0))
}

/// `cargo xtask <kind>-oracle [--check | --script FILE | --bench]`.
pub fn run(k: &Kind, args: &[String]) -> Result<u8> {
    let mut check = false;
    let mut bench_mode = false;
    let mut script = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--check" => check = true,
            "--bench" => bench_mode = true,
            "--script" => script = it.next().cloned(),
            other => crate::bail!(
                "unknown option `{other}` for `cargo xtask {}-oracle`",
                k.name
            ),
        }
    }
    let harness = build_harness(k)?;
    if bench_mode {
        return bench(k, &harness);
    }
    if let Some(s) = script {
        let s = PathBuf::from(s);
        let lib = c_dump(k, &harness, &s)?;
        let ours = rverbs_dump(k, &s)?;
        return Ok(match compare(k.lib, &lib, &ours) {
            Ok(()) => {
                println!("identical");
                0
            }
            Err(e) => {
                println!("{}: rverbs differs from {} at {e}", s.display(), k.lib);
                1
            }
        });
    }
    let list = fs::read_to_string(k.oracle_src()).unwrap_or_default();
    let mut bad = 0;
    let n = k.name;
    for s in scripts(k)? {
        let name = s.file_stem().unwrap().to_string_lossy().to_string();
        let golden = s.with_extension("golden");
        let dump = c_dump(k, &harness, &s)?;
        if !list.contains(&format!("\"{name}\"")) {
            println!("xtask: {n}-oracle: {name}.script is not in SCRIPTS of {n}_oracle.rs");
            bad += 1;
        }
        if check {
            let committed = fs::read_to_string(&golden).unwrap_or_default();
            match compare(k.lib, &dump, &committed) {
                Ok(()) => println!(
                    "xtask: {n}-oracle: {name}: {} gives the committed dump",
                    k.lib
                ),
                Err(e) => {
                    println!("xtask: {n}-oracle: {name}: the committed dump is stale: {e}");
                    bad += 1;
                }
            }
        } else {
            fs::write(&golden, dump)
                .map_err(|e| util::Error(format!("{}: {e}", golden.display())))?;
            println!("xtask: {n}-oracle: wrote {}", golden.display());
        }
    }
    Ok(u8::from(bad > 0))
}
