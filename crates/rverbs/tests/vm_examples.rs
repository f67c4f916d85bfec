//! The stream examples (`examples/stream_*.rs`) as users run them: each server and client is
//! started as its own program, the bytes that come out are checked (the copied file
//! identical, the echo identical, the HTTP status and body right) and every program must
//! exit, successfully, within seconds. Runs in the VM: `cargo xtask test` builds the
//! examples for the guests next to this test (`target/<triple>/debug/examples/`).
//! One node, server and client on `$RVERBS_ADDR_A`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How long any example program may take here (they take well under a second each).
const LIMIT: Duration = Duration::from_secs(30);

/// `$RVERBS_ADDR_A:port` (the VM sets the address), else 10.10.0.1.
fn at(port: u16) -> String {
    let a = std::env::var("RVERBS_ADDR_A").unwrap_or_else(|_| "10.10.0.1".into());
    format!("{a}:{port}")
}

/// An example program built with this test: `target/<triple>/debug/examples/<name>`, beside
/// this test's `deps/`.
fn example(name: &str) -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let path = me
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo xtask test` builds the examples with the VM tests",
        path.display()
    );
    path
}

/// A running example; killed if still running when dropped (a failed test leaves nothing).
struct Prog {
    name: String,
    child: Child,
    /// Its standard error, line by line, read by a thread.
    stderr: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Prog {
    fn start(name: &str, args: &[&str]) -> Prog {
        let mut child = Command::new(example(name))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stderr = lines(child.stderr.take().unwrap());
        Prog {
            name: format!("{name} {}", args.join(" ")),
            child,
            stderr,
            seen: Vec::new(),
        }
    }

    /// Waits for a line of its standard error that contains `what` (a server's "listening").
    fn wait_for(&mut self, what: &str) {
        let end = Instant::now() + LIMIT;
        while !self.seen.iter().any(|l| l.contains(what)) {
            let left = end.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("{}: no {what:?} on stderr: {:?}", self.name, self.seen),
            }
        }
    }

    /// Feeds `input` to its standard input on a thread and closes it; returns the thread.
    fn feed(&mut self, input: Vec<u8>) -> thread::JoinHandle<()> {
        let mut stdin = self.child.stdin.take().unwrap();
        // An error here (the program is gone) shows in its exit status.
        thread::spawn(move || {
            let _ = stdin.write_all(&input);
        })
    }

    /// Reads its standard output to the end on a thread.
    fn output(&mut self) -> thread::JoinHandle<Vec<u8>> {
        let mut stdout = self.child.stdout.take().unwrap();
        thread::spawn(move || {
            let mut v = Vec::new();
            let _ = stdout.read_to_end(&mut v);
            v
        })
    }

    /// Waits (at most [`LIMIT`]) for it to exit; its status and its standard error.
    fn exit(mut self) -> (ExitStatus, String) {
        drop(self.child.stdin.take());
        let end = Instant::now() + LIMIT;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > end {
                self.seen.extend(self.stderr.try_iter());
                panic!(
                    "{} did not exit within {LIMIT:?}: {:?}",
                    self.name, self.seen
                );
            }
            thread::sleep(Duration::from_millis(20));
        };
        // The reader thread ends at EOF (the program is gone).
        self.seen.extend(self.stderr.iter());
        (status, self.seen.join("\n"))
    }

    /// Waits for it to exit and checks that it succeeded; its standard error.
    fn success(self) -> String {
        let name = self.name.clone();
        let (status, err) = self.exit();
        assert!(status.success(), "{name}: {status}; stderr:\n{err}");
        err
    }
}

impl Drop for Prog {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn lines(err: ChildStderr) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for l in BufReader::new(err).lines() {
            let Ok(l) = l else { break };
            eprintln!("  | {l}");
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `stream_copy`: a file of 1 MiB and a bit (eight times the stream's receive ring, not a
/// multiple of anything) arrives identical, and both programs exit successfully.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_stream_copy_file_arrives_identical() {
    let dir = std::env::temp_dir().join(format!("vm_examples_copy_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, dst) = (dir.join("source"), dir.join("copy"));
    let data = pattern(1, 1024 * 1024 + 12_345);
    std::fs::write(&src, &data).unwrap();

    let addr = at(7961);
    let mut server = Prog::start("stream_copy", &["server", &addr, dst.to_str().unwrap()]);
    server.wait_for("waiting for a file");
    let client = Prog::start("stream_copy", &["client", &addr, src.to_str().unwrap()]);
    let said = client.success();
    assert!(
        said.contains(&format!("sent {} bytes", data.len())),
        "{said}"
    );
    server.success();

    let copy = std::fs::read(&dst).unwrap();
    assert_eq!(copy.len(), data.len());
    assert!(copy == data, "the copy differs from the source");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `clients` at once against `server`'s echo server (which serves that many
/// connections, then exits): each gets back exactly what it sent.
fn echo(server: &str, port: u16, clients: &[&str]) {
    let addr = at(port);
    let n = clients.len().to_string();
    let mut srv = Prog::start(server, &["server", &addr, &n]);
    srv.wait_for("echoing on");
    let mut runs = Vec::new();
    for (i, &client) in clients.iter().enumerate() {
        // 256 KiB and an odd tail: two ring-fulls and more, both ways.
        let data = pattern(10 + i as u64, (256 << 10) + 4_321);
        let mut c = Prog::start(client, &["client", &addr]);
        let fed = c.feed(data.clone());
        let out = c.output();
        runs.push((client, c, fed, out, data));
    }
    for (client, c, fed, out, data) in runs {
        // Exited (or killed at the limit) first: then the pipes' threads end.
        c.success();
        fed.join().unwrap();
        let got = out.join().unwrap();
        assert_eq!(got.len(), data.len(), "{client} against {server}");
        assert!(got == data, "{client} against {server}: the echo differs");
    }
    let said = srv.success();
    let echoed = said.matches("echoed 266465 bytes").count();
    assert_eq!(echoed, clients.len(), "{said}");
}

/// `stream_echo` (threads) serving two `stream_echo` clients at once.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_stream_echo_threaded_server() {
    echo("stream_echo", 7962, &["stream_echo", "stream_echo"]);
}

/// `stream_echo_async` (tokio) serving two `stream_echo` clients at once.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_stream_echo_tokio_server() {
    echo("stream_echo_async", 7963, &["stream_echo", "stream_echo"]);
}

/// The tokio client (sending and receiving at once) against both servers.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_stream_echo_tokio_client() {
    echo("stream_echo", 7966, &["stream_echo_async"]);
    echo("stream_echo_async", 7967, &["stream_echo_async"]);
}

/// `stream_http`: hyper's server and client over the stream. `GET /` answers 200 with the
/// greeting, `POST /echo` 200 with the request's 256 KiB body, an unknown path 404; the server
/// exits after its three connections. hyper reads while it writes: both halves of each
/// stream wait at once.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_stream_http_status_and_body() {
    let addr = at(7964);
    let mut srv = Prog::start("stream_http", &["server", &addr, "3"]);
    srv.wait_for("serving HTTP/1.1");
    let body = pattern(20, (256 << 10) + 99);
    let cases = [
        (
            "GET",
            "/",
            vec![],
            "< 200 OK",
            b"hello over RDMA\n".to_vec(),
        ),
        ("POST", "/echo", body.clone(), "< 200 OK", body),
        (
            "GET",
            "/nothing",
            vec![],
            "< 404 Not Found",
            b"not found\n".to_vec(),
        ),
    ];
    for (method, path, input, status, want) in cases {
        let mut c = Prog::start("stream_http", &["client", &addr, method, path]);
        let fed = c.feed(input);
        let out = c.output();
        let said = c.success();
        fed.join().unwrap();
        let got = out.join().unwrap();
        assert!(said.lines().any(|l| l == status), "{method} {path}: {said}");
        assert_eq!(got.len(), want.len(), "{method} {path}");
        assert!(got == want, "{method} {path}: the body differs");
    }
    let said = srv.success();
    // hyper saw each connection end cleanly: the server printed no error.
    assert!(said.lines().all(|l| l.starts_with("serving")), "{said}");
}

/// The examples' errors: a client whose server is not there, and a file that does not
/// exist, each end the program with a non-zero status and a message naming the problem;
/// usage errors name the usage.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_errors_are_reported() {
    let nobody = at(7965);
    let cases: [(&str, Vec<&str>, &str); 5] = [
        ("stream_echo", vec!["client", &nobody], "connect to"),
        (
            "stream_http",
            vec!["client", &nobody, "GET", "/"],
            "connect to",
        ),
        (
            "stream_copy",
            vec!["client", &nobody, "/nonexistent/file"],
            "stream_copy: /nonexistent/file: No such file",
        ),
        (
            "stream_copy",
            vec!["send", &nobody, "x"],
            "usage: stream_copy",
        ),
        (
            "stream_echo_async",
            vec!["client", "10.10.0.1"],
            "stream_echo_async: 10.10.0.1: invalid socket address",
        ),
    ];
    let runs: Vec<_> = cases
        .into_iter()
        .map(|(name, args, what)| (name, Prog::start(name, &args), args, what))
        .collect();
    for (name, prog, args, what) in runs {
        let (status, err) = prog.exit();
        assert!(!status.success(), "{name} {args:?} succeeded");
        assert!(err.contains(what), "{name} {args:?}: {err}");
    }
}
