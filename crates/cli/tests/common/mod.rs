//! Helpers shared by the CLI integration tests (included with `mod common;`).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `rverbs` binary: the one cargo built for this test when it exists here, else the one
/// on PATH (the VM guests put theirs there).
pub fn rverbs() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_BIN_EXE_rverbs"));
    if built.exists() {
        built
    } else {
        PathBuf::from("rverbs")
    }
}

/// Runs `rverbs ARGS...`.
pub fn run(args: &[&str]) -> Output {
    Command::new(rverbs())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", rverbs().display()))
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Where a program is on PATH.
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

/// Says a test skipped part of its work, on the real stderr: libtest captures `eprintln!`
/// of passing tests, and a skip must not go unnoticed.
pub fn skipped(why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "skipped: {why}");
}
