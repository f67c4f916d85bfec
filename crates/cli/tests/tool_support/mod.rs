//! Helpers of the tests that run the tools as processes (`rdma_examples.rs`, `rping.rs`,
//! `rc_pingpong.rs`): children whose every wait is bounded (killed on timeout, with what they
//! printed in the failure), rdma-core's C tools found or reported missing, and the VM's
//! addresses.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub fn rverbs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rverbs"))
}

pub fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// The server's address (node A).
pub fn addr_a() -> String {
    env_or("RVERBS_ADDR_A", "10.10.0.1")
}

/// The client's address (node B; A itself in the one-node topology).
pub fn addr_b() -> String {
    env_or("RVERBS_ADDR_B", &addr_a())
}

pub fn two_nodes() -> bool {
    env_or("RVERBS_TOPO", "one") == "two"
}

/// Where rdma-core's `tool` is: `Some(path)`, or `None` in the minimal guest, which has no C
/// tools (the test prints that it skipped). Missing anywhere else fails the test.
pub fn c_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join(tool))
        .find(|p| p.is_file());
    if found.is_none() {
        let guest = std::env::var("RVERBS_GUEST").unwrap_or_default();
        assert_eq!(
            guest, "minimal",
            "{tool} (rdma-core) is not on PATH in the {guest:?} guest: install rdmacm-utils and \
             ibverbs-utils on this machine"
        );
        eprintln!("skipped: {tool} not in this guest");
    }
    found
}

/// A running child whose stdout and stderr are collected by threads, so a timeout still
/// shows what it printed. Dropping it kills it.
pub struct Running {
    pub what: String,
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

/// A finished child.
pub struct Done {
    pub what: String,
    pub status: ExitStatus,
    pub out: String,
    pub err: String,
    pub elapsed: Duration,
}

impl Done {
    /// The exit code (`None` when killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl std::fmt::Display for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}, after {:.1} s):\n--- stdout\n{}--- stderr\n{}---",
            self.what,
            self.status,
            self.elapsed.as_secs_f64(),
            self.out,
            self.err
        )
    }
}

fn collect(r: impl Read + Send + 'static, into: Arc<Mutex<String>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            let mut s = into.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    })
}

pub fn spawn<S: AsRef<str>>(prog: &PathBuf, args: &[S]) -> Running {
    spawn_env(prog, args, &[])
}

pub fn spawn_env<S: AsRef<str>>(prog: &PathBuf, args: &[S], env: &[(&str, &str)]) -> Running {
    let args: Vec<&str> = args.iter().map(|a| a.as_ref()).collect();
    let what = format!("{} {}", prog.display(), args.join(" "));
    let mut cmd = Command::new(prog);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let out = Arc::new(Mutex::new(String::new()));
    let err = Arc::new(Mutex::new(String::new()));
    let readers = vec![
        collect(child.stdout.take().unwrap(), out.clone()),
        collect(child.stderr.take().unwrap(), err.clone()),
    ];
    Running {
        what,
        child,
        out,
        err,
        readers,
    }
}

/// `rverbs ARGS...`.
pub fn rverbs<S: AsRef<str>>(args: &[S]) -> Running {
    spawn(&rverbs_bin(), args)
}

impl Running {
    pub fn snapshot(&self) -> String {
        format!(
            "{}:\n--- stdout\n{}--- stderr\n{}---",
            self.what,
            self.out.lock().unwrap(),
            self.err.lock().unwrap()
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stdout and stderr so far.
    pub fn output_so_far(&self) -> String {
        format!("{}{}", self.out.lock().unwrap(), self.err.lock().unwrap())
    }

    /// Has it exited?
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().expect("wait").is_some()
    }

    /// Waits until its output contains `pat`; fails the test (killing it) if it exits first
    /// or `timeout` passes.
    pub fn wait_output(&mut self, pat: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if self.output_so_far().contains(pat) {
                return;
            }
            if let Some(st) = self.child.try_wait().expect("wait") {
                std::thread::sleep(Duration::from_millis(100));
                if self.output_so_far().contains(pat) {
                    return;
                }
                panic!("exited ({st}) before printing {pat:?}: {}", self.snapshot());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "no {pat:?} within {} s, killed: {}",
                    timeout.as_secs(),
                    self.snapshot()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGSTOP: a peer that stops answering without going away.
    pub fn stop(&self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid"),
            rustix::process::Signal::STOP,
        );
    }

    /// Waits until something listens on TCP `port` (via /proc/net/tcp{,6}); fails the test
    /// if the child exits first or 20 s pass.
    pub fn wait_listening(&mut self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if listening(port) {
                return;
            }
            if let Some(st) = self.child.try_wait().expect("wait") {
                std::thread::sleep(Duration::from_millis(50));
                panic!("server exited ({st}) before listening: {}", self.snapshot());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "server not listening on port {port} after 20 s: {}",
                    self.snapshot()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, as a crashing peer.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM.
    pub fn terminate(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid"),
            rustix::process::Signal::TERM,
        );
    }

    /// Waits for the exit; after `timeout` kills it and fails the test.
    pub fn finish(mut self, timeout: Duration) -> Done {
        let start = Instant::now();
        let deadline = start + timeout;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                panic!(
                    "timed out after {} s, killed: {}",
                    timeout.as_secs(),
                    self.snapshot()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = start.elapsed();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let out = std::mem::take(&mut *self.out.lock().unwrap());
        let err = std::mem::take(&mut *self.err.lock().unwrap());
        Done {
            what: self.what.clone(),
            status,
            out,
            err,
            elapsed,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // A test that panics must not leave its child behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether some socket listens on TCP `port` (any address, IPv4 or IPv6).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

/// True if a client's output says nobody listened (yet): the server is still starting.
pub fn was_refused(d: &Done) -> bool {
    let s = format!("{}{}", d.out, d.err);
    !d.status.success()
        && (s.contains("REJECTED") || s.contains("Connection refused"))
        && (s.contains("error 8") || s.contains("reason 8") || s.contains("refused"))
}

/// Runs a client against a server that was just started: while the client is refused
/// because the server does not listen yet, tries again (up to 30 s; the C tools take a few
/// seconds to start under emulation). Every run is bounded by `timeout`.
pub fn client_once_server_listens(
    server: &mut Running,
    prog: &PathBuf,
    args: &[String],
    timeout: Duration,
) -> Done {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = spawn(prog, args).finish(timeout);
        if !was_refused(&d) || Instant::now() >= deadline {
            return d;
        }
        if server.exited() {
            panic!(
                "the server exited while the client was refused: {}\nclient: {d}",
                server.snapshot()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Bytes received by a network device (to see that traffic crossed the two-node veth).
pub fn rx_bytes(netdev: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{netdev}/statistics/rx_bytes"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

pub fn args(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
