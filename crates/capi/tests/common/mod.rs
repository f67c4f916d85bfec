//! What the VM tests of this crate share: environment defaults and child processes with a
//! deadline.

#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `$var`, or `default` when it is unset or empty.
pub fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// A child with a deadline; its output is read when it ends.
pub struct Proc {
    child: Child,
    what: String,
}

impl Proc {
    /// Starts `c` with its stdout and stderr captured.
    pub fn spawn(mut c: Command) -> Proc {
        let what = format!("{c:?}");
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        Proc { child, what }
    }

    /// Waits up to `limit`; kills on timeout. Returns (success, the command line and status,
    /// then stdout + stderr).
    pub fn finish(mut self, limit: Duration) -> (bool, String) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut text = String::new();
        let _ = self.child.stdout.take().unwrap().read_to_string(&mut text);
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut text);
        let ok = status.is_some_and(|s| s.success());
        let head = match status {
            Some(s) => format!("{}: {s}", self.what),
            None => format!("{}: killed after {limit:?}", self.what),
        };
        (ok, format!("{head}\n{text}"))
    }
}
