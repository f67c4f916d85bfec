//! `cargo xtask test --load N` (or `RVERBS_TEST_LOAD=N`): N CPU-bound processes beside the
//! run, for its whole duration, so that the suite is shown to pass on a loaded machine (a test
//! that fails only under load is a bug in the test or the library, docs/testing.md).
//!
//! Each busy process is this xtask binary again (`cargo xtask __busy`), spinning. They are
//! killed and reaped when the run ends ([`Load`]'s drop, on every return path), and each one
//! also exits by itself once its parent is gone (it checks its parent id between spins), so
//! that a killed xtask leaves no spinner behind.

use std::process::{Child, Command, Stdio};

use crate::util::{Error, Result};

/// The variable that asks for load when `--load` is not given.
pub const LOAD_ENV: &str = "RVERBS_TEST_LOAD";

/// The busy processes of a run; dropping it kills and reaps them.
pub struct Load {
    children: Vec<Child>,
}

/// Parses a load count (`--load N`, `RVERBS_TEST_LOAD=N`): a number of processes, at most 64.
pub fn parse(v: &str, what: &str) -> Result<usize> {
    match v.trim().parse::<usize>() {
        Ok(n) if n <= 64 => Ok(n),
        _ => Err(Error(format!(
            "{what} needs a number of busy processes from 0 to 64, not `{v}`"
        ))),
    }
}

/// The load asked for by the environment (`RVERBS_TEST_LOAD`), 0 when unset.
pub fn from_env() -> Result<usize> {
    match std::env::var(LOAD_ENV) {
        Ok(v) if !v.trim().is_empty() => parse(&v, LOAD_ENV),
        _ => Ok(0),
    }
}

impl Load {
    /// Starts `n` busy processes (none for 0).
    pub fn start(n: usize) -> Result<Load> {
        let mut load = Load {
            children: Vec::with_capacity(n),
        };
        if n == 0 {
            return Ok(load);
        }
        let exe = std::env::current_exe()
            .map_err(|e| Error(format!("--load: where is the xtask binary: {e}")))?;
        for _ in 0..n {
            let child = Command::new(&exe)
                .arg("__busy")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| Error(format!("--load: start a busy process: {e}")))?;
            // Pushed at once: an error later still kills the ones started (drop).
            load.children.push(child);
        }
        let pids: Vec<String> = load.children.iter().map(|c| c.id().to_string()).collect();
        println!(
            "xtask: load: {n} CPU-bound process{} beside the run (pid {})",
            if n == 1 { "" } else { "es" },
            pids.join(", ")
        );
        Ok(load)
    }

    /// How many busy processes run.
    pub fn count(&self) -> usize {
        self.children.len()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for c in &mut self.children {
            // Each is killed and reaped by its own id (never by name).
            let _ = c.kill();
            let _ = c.wait();
        }
        if !self.children.is_empty() {
            println!(
                "xtask: load: the {} busy process{} stopped",
                self.children.len(),
                if self.children.len() == 1 { "" } else { "es" }
            );
        }
    }
}

/// `cargo xtask __busy`: spins until killed, or until its parent (the xtask run) is gone.
pub fn busy() -> ! {
    let parent = std::os::unix::process::parent_id();
    let mut x: u64 = 1;
    loop {
        for _ in 0..10_000_000u32 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
        if std::os::unix::process::parent_id() != parent {
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_and_bad_ones_are_named() {
        assert_eq!(parse("2", "--load").unwrap(), 2);
        assert_eq!(parse(" 0 ", "--load").unwrap(), 0);
        for bad in ["", "two", "-1", "65"] {
            let e = parse(bad, "--load").unwrap_err().0;
            assert!(
                e.contains("--load") && e.contains(&format!("`{bad}`")),
                "{e}"
            );
        }
    }

    #[test]
    fn zero_starts_nothing() {
        assert_eq!(Load::start(0).unwrap().count(), 0);
    }
}
