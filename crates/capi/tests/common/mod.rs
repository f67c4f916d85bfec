//! What the VM tests of this crate share: environment defaults, child processes with a
//! deadline, and rdma-core's programs (rdmacm-utils, perftest) run on our library or on
//! rdma-core's (`vm_capi` on rxe, `vm_capi_siw` on siw).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// Node A's device (`RVERBS_DEV_A`, else `rxe0`) opened through the C API, as a C program
/// would: `ibv_get_device_list`, `ibv_open_device`, `ibv_free_device_list`.
#[allow(unsafe_code)]
pub fn open_dev_a() -> *mut rverbs_capi::abi::ibv_context {
    use rverbs_capi::ibverbs::*;
    let want = std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into());
    let mut n = 0;
    // SAFETY: n is writable.
    let list = unsafe { ibv_get_device_list(&mut n) };
    assert!(!list.is_null(), "ibv_get_device_list: errno {}", errno());
    let mut ctx = std::ptr::null_mut();
    for i in 0..n as usize {
        // SAFETY: list has n entries of ours.
        let d = unsafe { *list.add(i) };
        // SAFETY: a device of ours: its name is a C string.
        let name = unsafe { std::ffi::CStr::from_ptr(ibv_get_device_name(d)) };
        if name.to_str().unwrap() == want {
            // SAFETY: a device of ours.
            ctx = unsafe { ibv_open_device(d) };
        }
    }
    // SAFETY: the list came from ibv_get_device_list.
    unsafe { ibv_free_device_list(list) };
    assert!(!ctx.is_null(), "{want} not found or not opened");
    ctx
}

/// `$var`, or `default` when it is unset or empty.
pub fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// A child with a deadline. Its stdout and stderr are read while it runs, each by a thread of
/// its own, so a child that writes a lot never blocks in `write(2)` on a full pipe (the
/// iperf3 hang of 2026-12-07: a server logging each `EAGAIN` filled a pipe read only at the
/// end, and stopped mid-transfer).
pub struct Proc {
    child: Child,
    what: String,
    out: Drained,
    err: Drained,
}

/// One pipe of a [`Proc`], read to its end by a thread into a buffer others may look at.
struct Drained {
    text: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Drained {
    fn start(mut r: impl Read + Send + 'static) -> Drained {
        let text = Arc::new(Mutex::new(Vec::new()));
        let into = text.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 64 * 1024];
            loop {
                match r.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => into.lock().unwrap().extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
        Drained {
            text,
            reader: Some(reader),
        }
    }

    /// What was read so far.
    fn so_far(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }

    /// Everything, once every writer has closed the pipe.
    fn all(&mut self) -> String {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.so_far()
    }
}

impl Proc {
    /// Starts `c` with its stdout and stderr captured (drained while it runs), in a process
    /// group of its own (its id is the child's pid), so that a kill on timeout reaches what
    /// it started too (`timeout PROG`: a killed `timeout` leaves PROG running, holding the
    /// pipes, and reading them to their end would then wait for PROG for ever).
    pub fn spawn(mut c: Command) -> Proc {
        use std::os::unix::process::CommandExt;
        let what = format!("{c:?}");
        let mut child = c
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let out = Drained::start(child.stdout.take().unwrap());
        let err = Drained::start(child.stderr.take().unwrap());
        Proc {
            child,
            what,
            out,
            err,
        }
    }

    /// Whether the child has exited (reaped then).
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stdout, then its stderr, as read so far.
    pub fn output_so_far(&self) -> String {
        format!("{}{}", self.out.so_far(), self.err.so_far())
    }

    /// Kills the child's whole process group, reaps the child and returns all it wrote
    /// (stdout, then stderr): for a panic's message.
    fn kill_and_collect(&mut self) -> String {
        // SAFETY: integers only; the group is this child's own (`process_group(0)`).
        unsafe { libc::kill(-(self.pid() as i32), libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
        format!("{}{}", self.out.all(), self.err.all())
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
                let text = self.kill_and_collect();
                panic!(
                    "server {what} before listening on TCP port {port}: {}\n{text}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the child's output (stdout or stderr) holds `pat`: a line it prints once
    /// a step of its protocol is done (mckey's `joined dgid` after its join). Panics, with
    /// its output, if it exits first; `limit` only bounds a child that never says it (a
    /// hang), the line decides.
    pub fn wait_output(&mut self, pat: &str, limit: Duration) {
        let t0 = Instant::now();
        loop {
            if self.output_so_far().contains(pat) {
                return;
            }
            if let Some(st) = self.child.try_wait().unwrap() {
                let text = self.kill_and_collect();
                if text.contains(pat) {
                    panic!(
                        "{} printed {pat:?} but had exited ({st}) by then:\n{text}",
                        self.what
                    );
                }
                panic!(
                    "{} exited ({st}) before printing {pat:?}:\n{text}",
                    self.what
                );
            }
            if t0.elapsed() > limit {
                let text = self.kill_and_collect();
                panic!(
                    "{} did not print {pat:?} in {limit:?}, killed:\n{text}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until rdma-core's `riostream -b` has set
    /// its listener's options. riostream listens first (`rlisten`, whose service thread then
    /// accepts every request at once, with the listener's options of that moment) and only
    /// then sets them (`set_options(lrs)`: its buffer sizes, `RDMA_IOMAPSIZE` 1, last
    /// `O_NONBLOCK`), so a client that connects as soon as the id listens may get a
    /// connection without an iomap table. The `O_NONBLOCK` of the listener's accept queue (a
    /// socket; rsockets' other sockets stay blocking) says that `set_options` has run.
    /// riostream is this child itself (rdma-core 56's in the Debian 13 userland: each step
    /// `exec`s the next) or its child (under `timeout`). Panics, with riostream's output, if
    /// it exits first, or if no riostream is seen with the option set in 60 s (a bound on a
    /// hang, not the decision: before the child itself was looked at, the trixie stage's
    /// riostream was never found and this waited until the binary's time ran out).
    pub fn wait_riostream_listener_ready(&mut self) {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let text = self.kill_and_collect();
                panic!(
                    "{} exited ({st}) before its listener was set up:\n{text}",
                    self.what
                );
            }
            let pid = self.child.id();
            let rio = if comm(pid).as_deref() == Some("riostream") {
                Some(pid)
            } else {
                child_named(pid, "riostream")
            };
            if rio.is_some_and(has_nonblocking_socket) {
                return;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let text = self.kill_and_collect();
                panic!(
                    "{}: no riostream with a non-blocking listener in 60 s (found: {rio:?}):\n{text}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits up to `limit`; kills on timeout. Returns (success, the command line and status,
    /// then stdout + stderr).
    pub fn finish(self, limit: Duration) -> (bool, String) {
        self.finish_watching(limit, &[])
    }

    /// [`finish`](Self::finish); on timeout, before the kill, what this child and the
    /// `others` (still running, e.g. its server) are doing ([`snapshot`]) heads the output,
    /// so a hang says where each side waits.
    pub fn finish_watching(mut self, limit: Duration, others: &[&Proc]) -> (bool, String) {
        let t0 = Instant::now();
        let mut seen = String::new();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if t0.elapsed() > limit {
                let mut pids = vec![("this".to_string(), self.pid())];
                pids.extend(group_members(self.pid()).map(|p| ("this one's child".to_string(), p)));
                for o in others {
                    pids.push((o.what.clone(), o.pid()));
                    pids.extend(
                        group_members(o.pid()).map(|p| (format!("child of {}", o.what), p)),
                    );
                }
                seen = snapshot(&pids);
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = if status.is_none() {
            // The whole group: the program under `timeout` included.
            format!("{seen}{}", self.kill_and_collect())
        } else {
            format!("{}{}", self.out.all(), self.err.all())
        };
        let ok = status.is_some_and(|s| s.success());
        let head = match status {
            Some(s) => format!("{}: {s}", self.what),
            None => format!("{}: killed after {limit:?}", self.what),
        };
        (ok, format!("{head}\n{text}"))
    }
}

/// The processes of the process group `pgid` other than its leader, now.
fn group_members(pgid: u32) -> impl Iterator<Item = u32> {
    let v: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                    let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                    // "pid (comm) state ppid pgrp ...": comm may hold spaces.
                    let (_, rest) = stat.rsplit_once(')')?;
                    let pgrp: u32 = rest.split_whitespace().nth(2)?.parse().ok()?;
                    (pgrp == pgid && pid != pgid).then_some(pid)
                })
                .collect()
        })
        .unwrap_or_default();
    v.into_iter()
}

/// The name (`comm`) of process `pid`, if it runs now.
pub fn comm(pid: u32) -> Option<String> {
    let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(c.trim_end().to_string())
}

/// The pid of the process named `name` whose parent is `ppid`, if there is one now.
pub fn child_named(ppid: u32, name: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1;
        let parent: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (parent == ppid && comm == name).then_some(pid)
    })
}

/// Whether process `pid` holds a socket in non-blocking mode (`O_NONBLOCK`, octal 04000 on
/// Linux, in its `/proc/<pid>/fdinfo` flags).
pub fn has_nonblocking_socket(pid: u32) -> bool {
    const O_NONBLOCK: u32 = 0o4000;
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let is_socket =
            std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        is_socket && flags & O_NONBLOCK != 0
    })
}

/// What the processes `pids` (a name and a pid each) and the rdma_cm are doing now, for a
/// hang's report: each thread's state, kernel wait channel, system call and kernel stack
/// (`/proc`, the stack as root), the CPU time spent (a thread polling memory or a CQ burns
/// it; one waiting for an rdma_cm event sleeps in `ucma_get_event`), then iproute2's
/// `rdma resource show cm_id` and `qp`, and the TCP sockets (iWARP connects over TCP).
pub fn snapshot(pids: &[(String, u32)]) -> String {
    use std::fmt::Write;
    let mut out = String::from("==== snapshot before the kill ====\n");
    let read = |p: String| std::fs::read_to_string(&p).unwrap_or_else(|e| format!("({p}: {e})"));
    for (what, pid) in pids {
        let _ = writeln!(out, "-- pid {pid}: {what}");
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                let mut v: Vec<String> = d
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                v.sort();
                v
            })
            .unwrap_or_default();
        for t in tasks {
            let base = format!("/proc/{pid}/task/{t}");
            // stat: state is field 3, utime/stime fields 14 and 15 (after the ")").
            let stat = read(format!("{base}/stat"));
            let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = after.split_whitespace().collect();
            let _ = writeln!(
                out,
                "  tid {t} {} state {} utime {} stime {} wchan {} syscall {}",
                read(format!("{base}/comm")).trim(),
                f.first().unwrap_or(&"?"),
                f.get(11).unwrap_or(&"?"),
                f.get(12).unwrap_or(&"?"),
                read(format!("{base}/wchan")).trim(),
                read(format!("{base}/syscall")).trim()
            );
            for l in read(format!("{base}/stack")).lines().take(16) {
                let _ = writeln!(out, "      {l}");
            }
        }
    }
    for args in [
        &["resource", "show", "cm_id"][..],
        &["resource", "show", "qp"][..],
    ] {
        let _ = writeln!(out, "-- rdma {}", args.join(" "));
        match Command::new("rdma").args(args).output() {
            Ok(o) => {
                out.push_str(&String::from_utf8_lossy(&o.stdout));
                out.push_str(&String::from_utf8_lossy(&o.stderr));
            }
            Err(e) => {
                let _ = writeln!(out, "(rdma: {e})");
            }
        }
    }
    let _ = writeln!(out, "-- /proc/net/tcp");
    out.push_str(&read("/proc/net/tcp".into()));
    if siw() {
        // What siw's socket upcalls did ([`siw_trace_upcalls`]): a line
        // `siw_cm_llp_data_ready: cep state: 7` is a first FPDU that arrived while siw_accept
        // had sent its MPA reply but not yet handed the socket to the QP (docs/capi.md).
        let _ = writeln!(out, "-- siw's kernel log (last 60 lines)");
        match Command::new("dmesg").output() {
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout);
                let lines: Vec<&str> = text.lines().filter(|l| l.contains("siw")).collect();
                for l in &lines[lines.len().saturating_sub(60)..] {
                    let _ = writeln!(out, "{l}");
                }
            }
            Err(e) => {
                let _ = writeln!(out, "(dmesg: {e})");
            }
        }
    }
    out.push_str("==== end of snapshot ====\n");
    out
}

/// Turns on (dynamic debug) the kernel log lines of siw's socket upcalls and accept: each
/// call of the connection manager's `siw_cm_llp_data_ready` with the endpoint's state, the
/// QP's `siw_qp_llp_data_ready` when it cannot read (a held QP state lock), `siw_accept`'s
/// steps and `siw_rtr_data_ready`. A few lines per connection; [`snapshot`] prints them on a
/// hang. Diagnostics only: a guest without debugfs or dynamic debug gets a note on stderr.
pub fn siw_trace_upcalls() {
    let control = "/sys/kernel/debug/dynamic_debug/control";
    if !Path::new(control).exists() {
        let _ = Command::new("mount")
            .args(["-t", "debugfs", "none", "/sys/kernel/debug"])
            .status();
    }
    for f in [
        "siw_cm_llp_data_ready",
        "siw_qp_llp_data_ready",
        "siw_accept",
        "siw_rtr_data_ready",
    ] {
        if let Err(e) = std::fs::write(control, format!("func {f} +p\n")) {
            eprintln!("siw_trace_upcalls: {control}: func {f}: {e}");
        }
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

/// The guest's devices are siw (`RVERBS_PROVIDER=siw`, the siw stage).
pub fn siw() -> bool {
    std::env::var("RVERBS_PROVIDER").as_deref() == Ok("siw")
}

// --- rdma-core's programs on our library or on rdma-core's ---------------------------------

/// The directory holding our `libibverbs.so.1`.
pub fn lib_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("RVERBS_CAPI_LIB") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .map(|a| a.join("capi/lib"))
        .find(|d| d.join("libibverbs.so.1").is_file())
        .unwrap_or_else(|| {
            panic!(
                "no capi/lib/libibverbs.so.1 above {}: run `cargo xtask capi` (or set RVERBS_CAPI_LIB)",
                exe.display()
            )
        })
}

/// `<target>/capi/bin/NAME` (a program `cargo xtask capi` built), found above this test
/// binary: the guests place both at their host paths.
pub fn capi_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .map(|a| a.join("capi/bin").join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no capi/bin/{name} above {}: run `cargo xtask capi`",
                exe.display()
            )
        })
}

/// A command for rdma-core's `tool`, on our library (`ours`) or on rdma-core's.
pub fn tool(name: &str, ours: bool) -> Command {
    if RDMA_CORE_56.load(std::sync::atomic::Ordering::Relaxed) {
        return tool56(name, ours);
    }
    let path = PathBuf::from("/usr/bin").join(name);
    assert!(
        path.is_file(),
        "{} missing in the {:?} guest: install ibverbs-utils",
        path.display(),
        std::env::var("RVERBS_GUEST").unwrap_or_default()
    );
    // Not under coreutils' stdbuf (line-buffered output would keep what a killed program
    // printed): the callers give this command's program to `ldd`-style checks and to
    // `timeout` wrappers by its path, which stdbuf in front broke (the fresh-clone run).
    let mut c = Command::new(path);
    if ours {
        c.env("LD_LIBRARY_PATH", lib_dir());
        c.env("RVERBS_CAPI_LOG", "1");
    } else {
        c.env_remove("LD_LIBRARY_PATH");
    }
    c
}

/// Whether [`tool`] runs rdma-core 56's programs (the Debian 13 userland, [`tool56`]) instead
/// of the host's rdma-core 44 ([`use_rdma_core_56`]).
static RDMA_CORE_56: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, in this process, [`tool`] (and so every helper here that runs rdma-core's
/// programs) runs rdma-core 56's programs in the Debian 13 userland ([`tool56`]).
pub fn use_rdma_core_56() {
    trixie_root();
    RDMA_CORE_56.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The Debian 13 userland's root (`RVERBS_TRIXIE_ROOT`, set by the stage that carries it:
/// crates/testbed/src/userland.rs). Panics, naming what is missing, when it is not there.
pub fn trixie_root() -> PathBuf {
    let root = std::env::var_os("RVERBS_TRIXIE_ROOT").map(PathBuf::from);
    let Some(root) = root.filter(|r| r.join("usr/bin/ibv_devinfo").is_file()) else {
        panic!(
            "no Debian 13 userland: RVERBS_TRIXIE_ROOT is {:?} (its stage sets it: cargo xtask \
             test --stage trixie; `cargo xtask setup` makes it)",
            std::env::var_os("RVERBS_TRIXIE_ROOT")
        );
    };
    root
}

/// `args` run in the Debian 13 userland ([`trixie_root`]): in a private mount namespace
/// (`unshare -m`: nothing stays mounted, however the command ends) the guest's root is bound
/// at the userland's `/host`, its `/dev`, `/proc`, `/sys` at theirs, fresh tmpfs on `/tmp` and
/// `/run`; then `chroot` with a clean environment plus `env` (`NAME=value` pairs). The
/// command's process is the program itself (each step `exec`s the next), so killing it kills
/// the program.
pub fn in_trixie(env: &[String], args: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args(["-m", "sh", "-c"])
        .arg(
            r#"r=$1; shift
mount --rbind / "$r/host" && mount --rbind /dev "$r/dev" && mount --rbind /proc "$r/proc" &&
mount --rbind /sys "$r/sys" && mount -t tmpfs tmpfs "$r/tmp" && mount -t tmpfs tmpfs "$r/run" &&
exec chroot "$r" /usr/bin/env -i PATH=/usr/bin:/usr/sbin LANG=C.UTF-8 HOME=/tmp "$@""#,
        )
        .arg("sh")
        .arg(trixie_root())
        .args(env)
        .args(args);
    c
}

/// The environment that puts our libraries in front of rdma-core 56's inside the userland:
/// our `lib_dir()` as the userland sees it (under `/host`), and the drop-in's log.
pub fn ours_in_trixie() -> Vec<String> {
    vec![
        format!("LD_LIBRARY_PATH=/host{}", lib_dir().display()),
        "RVERBS_CAPI_LOG=1".into(),
    ]
}

/// rdma-core 56's program `name` (Debian 13's `/usr/bin/NAME`) in the userland
/// ([`in_trixie`]), on our libraries (`ours`) or on rdma-core 56's.
pub fn tool56(name: &str, ours: bool) -> Command {
    let path = format!("/usr/bin/{name}");
    assert!(
        trixie_root().join(&path[1..]).is_file(),
        "{path} missing in the Debian 13 userland"
    );
    let env = if ours { ours_in_trixie() } else { vec![] };
    in_trixie(&env, &[&path])
}

pub fn run(mut c: Command) -> Output {
    let what = format!("{c:?}");
    let o = c.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        o.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// perftest's `prog` (which links rdma-core's libmlx5/libefa too: they must load on ours)
/// between a server on A and a client from B, one side on ours, `iters` iterations; with
/// `cm`, over the rdma_cm (`-R`: the exchange and the test QP both connect through
/// librdmacm, so the side on ours runs our `librdmacm.so.1`).
///
/// `-F`: perftest calibrates its cycle counter against `gettimeofday` and, without `-F`,
/// exits ("Can't produce a report") when the fit is poor, which TCG's clock sometimes makes
/// it; the test checks that the run completes, not the figures.
///
/// Retries, all of them perftest's own races, never a failure of either library: the client
/// may start before the server listens (plain: "Couldn't connect"; `-R`: the exchange's
/// connect is rejected, "Unexpected CM event"), then the client is run again. With `-R` the
/// server also opens a second listener for the test QP only after the exchange, while the
/// client connects to it as soon as its side of the exchange is done: when the client wins
/// that race its connect is rejected (`RDMA_CM_EVENT_REJECTED`, status 8: no listener) and
/// perftest's client crashes in its retry path (on iWARP: "Connection refused", a TCP
/// connection to a port nobody listens on); then both are started again.
pub fn perftest(prog: &str, port: u16, server_ours: bool, cm: bool, iters: u32) {
    let (dev_a, dev_b) = (
        env_or("RVERBS_DEV_A", "rxe0"),
        env_or("RVERBS_DEV_B", "rxe0"),
    );
    let addr_a = env_or("RVERBS_ADDR_A", "10.10.0.1");
    let iters = iters.to_string();
    let args = |c: &mut Command, dev: &str, port: u16| {
        c.args(["-d", dev, "-F", "-n", &iters, "-p", &port.to_string()]);
        if !siw() {
            // rxe's IPv4 GID (siw has one GID, index 0, perftest's default).
            c.args(["-x", "1"]);
        }
        if cm {
            c.arg("-R");
        }
    };
    let t0 = Instant::now();
    let mut port = port;
    let mut clients = 0;
    let (client_out, server) = 'pair: loop {
        let mut s = tool(prog, server_ours);
        args(&mut s, &dev_a, port);
        let mut server = Proc::spawn(s);
        if cm {
            wait_cm_listening(port);
        } else {
            server.wait_listening(port);
        }
        eprintln!("{prog}: server listening after {:?}", t0.elapsed());
        loop {
            clients += 1;
            let mut c = tool(prog, !server_ours);
            args(&mut c, &dev_b, port);
            c.arg(&addr_a);
            let (ok, out) = Proc::spawn(c).finish_watching(Duration::from_secs(120), &[&server]);
            if ok {
                break 'pair (out, server);
            }
            let early = out.contains("Couldn't connect") || out.contains("Unexpected CM event");
            // On iWARP a connect to a port nobody listens on is a refused TCP connection.
            let raced = cm
                && (out.contains("RDMA_CM_EVENT_REJECTED")
                    || out.contains("ERRNO: Connection refused"));
            if !(early || raced) || t0.elapsed() > Duration::from_secs(60) {
                let (_, sout) = server.finish(Duration::from_secs(1));
                panic!("client failed:\n{out}\nserver:\n{sout}");
            }
            // Listening was seen, so a rejected start is rare: try again shortly.
            std::thread::sleep(Duration::from_millis(300));
            if raced {
                // The server waits on a listener the next client cannot use: start over,
                // on a fresh port (the old one may linger in the kernel briefly).
                let _ = server.finish(Duration::ZERO);
                eprintln!(
                    "{prog} (server on {}): the client's rdma_cm connect beat the server's \
                     second listen; both again",
                    if server_ours { "ours" } else { "rdma-core" }
                );
                port += 100;
                continue 'pair;
            }
        }
    };
    let client_done = t0.elapsed();
    let (ok, sout) = server.finish(Duration::from_secs(120));
    eprintln!(
        "{prog} (server on {}): {clients} client run(s), client done after {client_done:?}, \
         server after {:?}",
        if server_ours { "ours" } else { "rdma-core" },
        t0.elapsed()
    );
    assert!(ok, "server failed:\n{sout}\nclient:\n{client_out}");
    // The client reports; of the latency tests only ib_send_lat's server reports too.
    assert!(
        client_out.contains("#bytes"),
        "no result table in:\n{client_out}"
    );
    if prog == "ib_send_lat" {
        assert!(sout.contains("#bytes"), "no result table in:\n{sout}");
    }
    if cm {
        // The run really went over the rdma_cm.
        for (side, out) in [("client", &client_out), ("server", &sout)] {
            assert!(
                out.contains("rdma_cm QPs\t : ON"),
                "{side} did not use rdma_cm QPs:\n{out}"
            );
        }
    }
}

/// The perftest tools the interop tests run: latency of SEND, WRITE and READ, bandwidth of
/// WRITE.
pub const PERFTEST_TOOLS: [&str; 4] = ["ib_send_lat", "ib_write_lat", "ib_read_lat", "ib_write_bw"];

/// Each of [`PERFTEST_TOOLS`] with our side as the server (port `base + 2i`) and, at the same
/// time, as the client (port `base + 2i + 1`): one perftest start costs seconds under
/// emulation, so the two directions overlap. `cm` and `iters` as for [`perftest`].
pub fn perftest_both_ways(base: u16, cm: bool, iters: u32) {
    for (i, prog) in PERFTEST_TOOLS.iter().enumerate() {
        let port = base + 2 * i as u16;
        std::thread::scope(|s| {
            s.spawn(|| perftest(prog, port, true, cm, iters));
            perftest(prog, port + 1, false, cm, iters);
        });
    }
}

/// Waits (at most 20 s) until an rdma_cm id listens on `port`, as iproute2's
/// `rdma resource show cm_id` lists it (`state LISTEN … src-addr <ip>:<port>`); the rdma_cm's
/// listen is not a TCP socket — except on iWARP (siw): there the listener is the kernel's TCP
/// socket, which is waited for instead. A timeout is not an error here: the caller's retries
/// decide.
pub fn wait_cm_listening(port: u16) {
    let want = format!(":{port}");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        if siw() {
            if tcp_listening(port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        if let Ok(o) = Command::new("rdma")
            .args(["resource", "show", "cm_id"])
            .output()
        {
            let text = String::from_utf8_lossy(&o.stdout);
            if text
                .lines()
                .any(|l| l.contains("LISTEN") && l.split_whitespace().any(|w| w.ends_with(&want)))
            {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `prog`'s client (`ours_client`) or server on our `librdmacm.so.1` and `libibverbs.so.1`
/// against the same program entirely on rdma-core. `check` must appear in the output of the
/// side on ours.
/// The client starts once the server's rdma_cm id listens on `port` (the tool's default).
pub fn cm_tool(server: &[&str], client: &[&str], port: u16, ours_client: bool, check: &str) {
    let mut s = tool(server[0], !ours_client);
    s.args(&server[1..]);
    let server_p = Proc::spawn(s);
    wait_cm_listening(port);
    let mut c = tool(client[0], ours_client);
    c.args(&client[1..]);
    let (cok, cout) = Proc::spawn(c).finish(Duration::from_secs(120));
    let (sok, sout) = server_p.finish(Duration::from_secs(60));
    assert!(cok && sok, "client:\n{cout}\nserver:\n{sout}");
    let mine = if ours_client { &cout } else { &sout };
    assert!(mine.contains(check), "{check:?} not in:\n{mine}");
}

/// rdmacm-utils' `rdma_server`/`rdma_client` (rdma_create_ep, rdma_get_request, inline
/// sends, rdma_get_*_comp) and `ucmatose` (asynchronous ids, events) on `addr`, each side on
/// ours against the other on rdma-core's ([`cm_tool`]).
pub fn rdmacm_utils_both_ways(addr: &str) {
    for ours_client in [true, false] {
        cm_tool(
            &["rdma_server", "-s", addr],
            &["rdma_client", "-s", addr],
            7471,
            ours_client,
            "end 0",
        );
        cm_tool(
            &["ucmatose", "-b", addr],
            &["ucmatose", "-s", addr],
            7471,
            ours_client,
            "test complete",
        );
    }
}

/// One run of rdma-core's Python suite: on which library, its exit status, and its stdout
/// followed by its stderr.
pub struct PyverbsRun {
    pub ours: bool,
    pub status: std::process::ExitStatus,
    pub out: String,
}

/// rdma-core's Python suite in `dir` (a [`pyverbs_suite_copy`]), `-v`, on device `dev` with
/// GID index `gid`, the tests chosen by `select` (`-k` arguments), each run killed after
/// `limit_s` seconds: on rdma-core's libraries and on ours at the same time. Returns
/// rdma-core's run, then ours.
pub fn pyverbs_on_both(
    dir: &std::path::Path,
    dev: &str,
    gid: &str,
    limit_s: u32,
    select: &[String],
) -> [PyverbsRun; 2] {
    let limit = limit_s.to_string();
    let runs = [false, true].map(|ours| {
        let mut c = Command::new("timeout");
        c.args([limit.as_str(), "python3", "run_tests.py", "--dev", dev])
            .args(["--gid", gid, "-v"])
            .args(select)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if ours {
            c.env("LD_LIBRARY_PATH", lib_dir());
        } else {
            c.env_remove("LD_LIBRARY_PATH");
        }
        (
            ours,
            c.spawn()
                .unwrap_or_else(|e| panic!("python3 run_tests.py: {e}")),
        )
    });
    runs.map(|(ours, child)| {
        let o = child.wait_with_output().unwrap();
        PyverbsRun {
            ours,
            status: o.status,
            out: format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        }
    })
}

/// rdma-core's Python suite (Debian's python3-pyverbs) copied into a fresh folder
/// `$TMPDIR/<name>` with its gzipped modules unpacked, ready for `python3 run_tests.py`.
/// Panics, naming the guest, when the suite is not installed.
pub fn pyverbs_suite_copy(name: &str) -> PathBuf {
    let suite = PathBuf::from("/usr/share/doc/rdma-core/tests");
    assert!(
        suite.join("run_tests.py").is_file(),
        "{} missing in the {:?} guest: install python3-pyverbs",
        suite.display(),
        std::env::var("RVERBS_GUEST").unwrap_or_default()
    );
    let dir = std::env::temp_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(r#"cp -r "$1"/. "$2"/ && cd "$2" && for f in ./*.gz; do [ -e "$f" ] && gunzip -f "$f"; done; true"#)
        .arg("sh")
        .arg(&suite)
        .arg(&dir);
    run(c);
    dir
}

/// A test's outcome in unittest's verbose log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Pass,
    Skip,
    Fail,
    Error,
}

impl Outcome {
    pub fn bad(self) -> bool {
        matches!(self, Outcome::Fail | Outcome::Error)
    }
}

/// Each test of a `run_tests.py -v` log (`module.Class.test`) and its outcome. unittest prints
/// `name (tests.module.Class.name)`, then (on the same line, or after a docstring line)
/// ` ... ok`, ` ... ERROR`, ` ... FAIL`, ` ... skipped 'why'` or ` ... expected failure`.
pub fn outcomes(log: &str) -> BTreeMap<String, Outcome> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in log.lines() {
        if let (Some(open), true) = (line.find(" (tests."), line.starts_with("test")) {
            let rest = &line[open + " (tests.".len()..];
            if let Some(close) = rest.find(')') {
                current = Some(rest[..close].to_string());
            }
        }
        let Some(at) = line.rfind(" ... ") else {
            continue;
        };
        let verdict = &line[at + " ... ".len()..];
        let o = match verdict {
            "ok" | "expected failure" => Outcome::Pass,
            "ERROR" => Outcome::Error,
            "FAIL" => Outcome::Fail,
            v if v.starts_with("skipped") => Outcome::Skip,
            _ => continue,
        };
        if let Some(name) = current.take() {
            out.insert(name, o);
        }
    }
    out
}

/// The counts of a run's outcomes, for the log.
pub fn counts(m: &BTreeMap<String, Outcome>) -> String {
    let n = |o| m.values().filter(|v| **v == o).count();
    format!(
        "{} pass / {} fail / {} error / {} skip",
        n(Outcome::Pass),
        n(Outcome::Fail),
        n(Outcome::Error),
        n(Outcome::Skip)
    )
}

/// One ping-pong of `prog` between a server on A and a client to A's address from B, each on
/// our library or rdma-core's. The client is retried while the server is not listening yet.
pub fn pingpong(prog: &str, extra: &[&str], port: u16, server_ours: bool, client_ours: bool) {
    let (dev_a, dev_b) = (
        env_or("RVERBS_DEV_A", "rxe0"),
        env_or("RVERBS_DEV_B", "rxe0"),
    );
    let addr_a = env_or("RVERBS_ADDR_A", "10.10.0.1");
    let port = port.to_string();
    let common = |c: &mut Command, dev: &str| {
        c.args(["-d", dev, "-g", "1", "-n", "50", "-p", &port])
            .args(extra);
    };
    let mut s = tool(prog, server_ours);
    common(&mut s, &dev_a);
    let server = Proc::spawn(s);
    let t0 = Instant::now();
    let client_out = loop {
        std::thread::sleep(Duration::from_millis(500));
        let mut c = tool(prog, client_ours);
        common(&mut c, &dev_b);
        c.arg(&addr_a);
        let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(120));
        if ok {
            break out;
        }
        if !out.contains("Couldn't connect") || t0.elapsed() > Duration::from_secs(30) {
            let (_, sout) = server.finish(Duration::from_secs(1));
            panic!("client failed:\n{out}\nserver:\n{sout}");
        }
    };
    let (ok, sout) = server.finish(Duration::from_secs(120));
    assert!(ok, "server failed:\n{sout}\nclient:\n{client_out}");
    for out in [&sout, &client_out] {
        assert!(out.contains("50 iters in"), "no iteration count in:\n{out}");
    }
}

/// Both directions: server on rdma-core and client on ours, then the other way round.
pub fn both_ways(prog: &str, extra: &[&str], port: u16) {
    pingpong(prog, extra, port, false, true);
    pingpong(prog, extra, port + 1, true, false);
}

/// A UD endpoint (16 sends and receives of one SGE, every send signaled) whose rdma_cm id is
/// bound to `local` and resolved towards the multicast group `grp`, as mckey's is.
pub fn mcast_endpoint(local: std::net::Ipv4Addr, grp: std::net::SocketAddr) -> rverbs_cm::Endpoint {
    use rverbs_cm::{CmId, Endpoint, EndpointAttr, PortSpace};
    use rverbs_uverbs::qp::QpCaps;
    let id = CmId::create(None, PortSpace::UDP).unwrap();
    id.resolve_addr(
        Some(std::net::SocketAddr::new(local.into(), 0)),
        grp,
        Duration::from_secs(10),
    )
    .unwrap();
    let attr = EndpointAttr {
        caps: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
    };
    Endpoint::create(id, &attr).unwrap()
}

/// Our Rust side joined to a group send-only ([`McastSender::join`]), with one datagram of
/// [`McastSender::MSG`] bytes (0x5a) registered that [`McastSender::send`] sends.
pub struct McastSender {
    // Dropped in this order: the message's MR and the AH before the endpoint (its PD).
    mr: rverbs_uverbs::mr::Mr<rverbs_uverbs::mr::PageBuf>,
    _ah: std::sync::Arc<rverbs_uverbs::ah::Ah>,
    dest: rverbs_uverbs::UdDest,
    ep: rverbs_cm::Endpoint,
}

impl McastSender {
    /// Bytes of each datagram (what mckey sends and expects).
    pub const MSG: usize = 100;

    /// An endpoint bound to `local` ([`mcast_endpoint`]) joined to `grp` send-only.
    pub fn join(local: std::net::Ipv4Addr, grp: std::net::SocketAddr) -> McastSender {
        use rverbs_cm::McJoinFlags;
        use rverbs_uverbs::ah::Ah;
        use rverbs_uverbs::mr::PageBuf;
        let ep = mcast_endpoint(local, grp);
        let ud = ep
            .join_multicast(grp, McJoinFlags::SENDONLY_FULL_MEMBER)
            .unwrap()
            .expect("a synchronous join returns the event's UD parameters");
        let ah = Ah::create(ep.pd(), ud.ah()).unwrap();
        let dest = ah.ud_dest(ud.qp_num, ud.qkey);
        let mr = ep.reg_msgs(PageBuf::new(4096).unwrap()).unwrap();
        mr.write_at(0, &[0x5a; Self::MSG]);
        McastSender {
            mr,
            _ah: ah,
            dest,
            ep,
        }
    }

    /// Sends the datagram as work request `wr_id` and waits for its successful completion.
    pub fn send(&self, wr_id: u64) {
        use rverbs_uverbs::{SendFlags, WcStatus};
        self.ep
            .post_ud_send(
                wr_id,
                &[self.mr.sge(0..Self::MSG)],
                self.dest,
                SendFlags::empty(),
            )
            .unwrap();
        let wc = self.ep.get_send_comp().unwrap();
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::SUCCESS));
    }
}

/// For an mckey receiver (`-C 1`) whose sender was mckey on a kernel where all of mckey's
/// datagrams may be flushed at its teardown (rxe from 6.12 on: mckey posts its sends
/// unsignaled and destroys its QP without waiting for them): our Rust side, bound to `local`,
/// joins `grp` send-only and sends 100-byte datagrams, each waited for, until `ended()` says
/// the receiver has exited. The receiver then ends by the protocol (it polled one
/// completion) instead of spinning until its `timeout` kills it. The loop also stops after
/// 90 s (a receiver that never gets a datagram must fail the test, not hang it: the caller
/// then finds the receiver still running). Returns how many were sent.
pub fn mcast_send_until(
    local: std::net::Ipv4Addr,
    grp: std::net::SocketAddr,
    mut ended: impl FnMut() -> bool,
) -> u64 {
    let t0 = std::time::Instant::now();
    let s = McastSender::join(local, grp);
    let mut sent = 0;
    while !ended() && t0.elapsed() < Duration::from_secs(90) {
        s.send(sent);
        sent += 1;
        // The receiver's poll loop sees the datagram and exits; look again shortly.
        std::thread::sleep(Duration::from_millis(100));
    }
    sent
}
