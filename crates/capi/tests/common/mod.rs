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

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until something listens on TCP `port` (the out-of-band exchange of
    /// ibv_*_pingpong, perftest and `rverbs rc-pingpong`), at most 30 s. Panics, with the
    /// server's output, if it exits first or does not listen in time.
    pub fn wait_listening(&mut self, port: u16) {
        let t0 = Instant::now();
        while !tcp_listening(port) {
            let exited = self.child.try_wait().unwrap().is_some();
            if exited || t0.elapsed() > Duration::from_secs(30) {
                let what = if exited {
                    "exited"
                } else {
                    "did not listen in 30 s"
                };
                let _ = self.child.kill();
                let _ = self.child.wait();
                let mut text = String::new();
                let _ = self.child.stdout.take().unwrap().read_to_string(&mut text);
                let _ = self.child.stderr.take().unwrap().read_to_string(&mut text);
                panic!(
                    "server {what} before listening on TCP port {port}: {}\n{text}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// Whether a socket listens on TCP `port` (IPv4 or IPv6), from /proc/net/tcp{,6}.
pub fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local_address is column 1, st column 3; 0A is TCP_LISTEN.
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}
