//! `cargo xtask mlx5-oracle`: rdma-core's libmlx5, run against a fake kernel by the test
//! harness `crates/provider/tests/harnesses/mlx5_oracle/harness.c`, tells the bytes every
//! script of `crates/provider/tests/mlx5_oracle/` must produce; rverbs' mlx5 provider must
//! produce the same (`crates/provider/tests/mlx5_oracle.rs`).
//!
//! - no option: regenerates the golden dumps (`NAME.golden` beside each `NAME.script`);
//! - `--check`: proves the committed dumps are what libmlx5 produces today (a stage of
//!   `cargo xtask test`);
//! - `--script FILE`: runs FILE through libmlx5 and rverbs and prints `identical` or the
//!   first differing byte with its step and meaning.
//!
//! Needs a C compiler, libibverbs-dev (headers, libibverbs.so) and ibverbs-providers
//! (libmlx5): `.ci/run` installs them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Result};

fn scripts_dir() -> PathBuf {
    util::workspace_root().join("crates/provider/tests/mlx5_oracle")
}

fn harness_src() -> PathBuf {
    util::workspace_root().join("crates/provider/tests/harnesses/mlx5_oracle/harness.c")
}

fn build_harness() -> Result<PathBuf> {
    for (file, pkg) in [
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        ("/usr/include/rdma/mlx5-abi.h", "libibverbs-dev"),
    ] {
        if !Path::new(file).exists() {
            crate::bail!("mlx5-oracle: {file} is missing (install {pkg})");
        }
    }
    let out_dir = util::target_dir().join("mlx5-oracle");
    fs::create_dir_all(&out_dir)
        .map_err(|e| util::Error(format!("create {}: {e}", out_dir.display())))?;
    let exe = out_dir.join("harness");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    util::run(
        Command::new(cc)
            .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(harness_src())
            .args(["-libverbs", "-ldl"]),
    )?;
    Ok(exe)
}

/// libmlx5's dump of `script` (the harness pins the environment the script's `env` lines
/// give; everything else libmlx5 or libibverbs would read from the environment is removed).
fn libmlx5_dump(harness: &Path, script: &Path) -> Result<String> {
    let mut cmd = Command::new(harness);
    cmd.arg(script);
    for (k, _) in std::env::vars() {
        if k.starts_with("MLX5_")
            || k.starts_with("RDMAV_")
            || k.starts_with("IBV_")
            || k == "SYSFS_PATH"
        {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .output()
        .map_err(|e| util::Error(format!("run {}: {e}", harness.display())))?;
    if !out.status.success() {
        crate::bail!(
            "mlx5-oracle: libmlx5 harness failed on {} ({}): {}",
            script.display(),
            util::describe_status(out.status),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).map_err(|_| util::Error("harness printed non-UTF-8".into()))
}

/// rverbs' dump of `script` (the provider's oracle test in its one-script mode).
fn rverbs_dump(script: &Path) -> Result<String> {
    let out = util::target_dir().join("mlx5-oracle").join("rverbs.dump");
    let script =
        fs::canonicalize(script).map_err(|e| util::Error(format!("{}: {e}", script.display())))?;
    util::run(
        util::cargo()
            .args([
                "test",
                "-q",
                "-p",
                "rverbs-provider",
                "--test",
                "mlx5_oracle",
            ])
            .env("MLX5_ORACLE_SCRIPT", &script)
            .env("MLX5_ORACLE_OUT", &out),
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
fn compare(golden: &str, ours: &str) -> std::result::Result<(), String> {
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
                "{step}\n  first difference: {}\n  libmlx5: {a}\n  other:   {b}",
                meaning(a, col)
            ));
        }
    }
    let (g, o) = (golden.lines().count(), ours.lines().count());
    if g != o {
        return Err(format!("libmlx5 printed {g} lines, the other {o}"));
    }
    Ok(())
}

fn scripts() -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = fs::read_dir(scripts_dir())
        .map_err(|e| util::Error(format!("{}: {e}", scripts_dir().display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "script"))
        .collect();
    v.sort();
    Ok(v)
}

/// `cargo xtask mlx5-oracle [--check | --script FILE]`.
pub fn run(args: &[String]) -> Result<u8> {
    let mut check = false;
    let mut script = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--check" => check = true,
            "--script" => script = it.next().cloned(),
            other => crate::bail!("unknown option `{other}` for `cargo xtask mlx5-oracle`"),
        }
    }
    let harness = build_harness()?;
    if let Some(s) = script {
        let s = PathBuf::from(s);
        let lib = libmlx5_dump(&harness, &s)?;
        let ours = rverbs_dump(&s)?;
        return Ok(match compare(&lib, &ours) {
            Ok(()) => {
                println!("identical");
                0
            }
            Err(e) => {
                println!("{}: rverbs differs from libmlx5 at {e}", s.display());
                1
            }
        });
    }
    let list =
        fs::read_to_string(util::workspace_root().join("crates/provider/tests/mlx5_oracle.rs"))
            .unwrap_or_default();
    let mut bad = 0;
    for s in scripts()? {
        let name = s.file_stem().unwrap().to_string_lossy().to_string();
        let golden = s.with_extension("golden");
        let dump = libmlx5_dump(&harness, &s)?;
        if !list.contains(&format!("\"{name}\"")) {
            println!("xtask: mlx5-oracle: {name}.script is not in SCRIPTS of mlx5_oracle.rs");
            bad += 1;
        }
        if check {
            let committed = fs::read_to_string(&golden).unwrap_or_default();
            match compare(&dump, &committed) {
                Ok(()) => println!("xtask: mlx5-oracle: {name}: libmlx5 gives the committed dump"),
                Err(e) => {
                    println!("xtask: mlx5-oracle: {name}: the committed dump is stale: {e}");
                    bad += 1;
                }
            }
        } else {
            fs::write(&golden, dump)
                .map_err(|e| util::Error(format!("{}: {e}", golden.display())))?;
            println!("xtask: mlx5-oracle: wrote {}", golden.display());
        }
    }
    Ok(u8::from(bad > 0))
}
