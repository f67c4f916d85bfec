//! Our `librspreload.so.1` (`crates/capi/src/preload`) under unmodified socket programs in
//! the host guest (`interop` in the names), against itself and against rdma-core's
//! `librspreload.so` (package librdmacm1), both ways, results checked on both ends:
//!
//! - `iperf3` (TCP mode, one stream and `-P 4`): the client's and the server's JSON reports
//!   (`-J`) must name the same, nonzero count of received bytes, at most what the client
//!   sent; the server's preload must have listened on the rdma_cm (and, where it is ours,
//!   never fallen back to TCP), so the bytes moved over rsockets.
//!
//! Each run also prints its throughput, with plain TCP on the same addresses beside it (the
//! table in docs/capi.md).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;
use common::{env_or, lib_dir, tcp_listening, Proc};

/// rdma-core's preload (package librdmacm1).
const RDMA_CORE_PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

fn addr_a() -> String {
    env_or("RVERBS_ADDR_A", "10.10.0.1")
}

/// Which socket layer a program runs on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    /// Our `librspreload.so.1`.
    Ours,
    /// rdma-core's `librspreload.so`.
    RdmaCore,
    /// No preload: the kernel's TCP.
    Tcp,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::RdmaCore => "rdma-core's",
            Side::Tcp => "TCP",
        }
    }
}

/// `prog` (from /usr/bin, under `timeout`) on `side`.
fn program(prog: &str, side: Side, args: &[&str]) -> Command {
    let path = PathBuf::from("/usr/bin").join(prog);
    assert!(
        path.is_file(),
        "{} missing in the host guest: `cargo xtask test` installs it",
        path.display()
    );
    let mut c = Command::new("timeout");
    c.arg("90").arg(path).args(args);
    c.env_remove("LD_LIBRARY_PATH");
    match side {
        Side::Ours => {
            let lib = lib_dir().join("librspreload.so.1");
            assert!(
                lib.is_file(),
                "{} missing: run `cargo xtask capi`",
                lib.display()
            );
            c.env("LD_PRELOAD", lib).env("RVERBS_CAPI_LOG", "1");
        }
        Side::RdmaCore => {
            assert!(
                std::path::Path::new(RDMA_CORE_PRELOAD).is_file(),
                "{RDMA_CORE_PRELOAD} missing: install librdmacm1"
            );
            c.env("LD_PRELOAD", RDMA_CORE_PRELOAD);
        }
        Side::Tcp => {
            c.env_remove("LD_PRELOAD");
        }
    }
    c
}

/// Waits until `port` listens: on the rdma_cm (`rdma resource show cm_id`) for a preloaded
/// server, in TCP otherwise. Panics with the server's output if it does not within 30 s.
fn wait_server(server: &mut Option<Proc>, port: u16, side: Side) {
    let want = format!(":{port}");
    let t0 = Instant::now();
    loop {
        let up = match side {
            Side::Tcp => tcp_listening(port),
            _ => Command::new("rdma")
                .args(["resource", "show", "cm_id"])
                .output()
                .is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout).lines().any(|l| {
                        l.contains("LISTEN") && l.split_whitespace().any(|w| w.ends_with(&want))
                    })
                }),
        };
        if up {
            return;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let (_, out) = server.take().unwrap().finish(Duration::ZERO);
            panic!(
                "the server on {} does not listen on {port} after 30 s:\n{out}",
                side.name()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The JSON value at `path` (object keys) in `text`, as a number; panics naming `what`.
fn number(text: &str, path: &[&str], what: &str) -> f64 {
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("{what}: no JSON in:\n{text}"));
    let v = json_path(&text[start..], path)
        .unwrap_or_else(|| panic!("{what}: no {path:?} in:\n{text}"));
    v.parse()
        .unwrap_or_else(|_| panic!("{what}: {path:?} is {v:?}, not a number"))
}

/// A small lookup in iperf3's JSON: follows `path` through nested objects by key (the
/// first occurrence of each key after the previous one, inside its object) and returns the
/// number written there.
fn json_path<'a>(text: &'a str, path: &[&str]) -> Option<&'a str> {
    let mut at = 0;
    for key in path {
        let k = format!("\"{key}\":");
        at += text[at..].find(&k)? + k.len();
    }
    let rest = text[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// One iperf3 test: a server (`-s -1`) on `server`, a client sending for 2 s with
/// `streams` parallel streams on `client`, to the guest's address A. Returns the client's
/// sending rate in Gbit/s after checking the bytes on both ends.
fn iperf3(server: Side, client: Side, port: u16, streams: u32) -> f64 {
    let a = addr_a();
    let p = port.to_string();
    let mut s = Some(Proc::spawn(program(
        "iperf3",
        server,
        &["-s", "-1", "-J", "-p", &p],
    )));
    wait_server(&mut s, port, server);
    let n = streams.to_string();
    let c = program(
        "iperf3",
        client,
        &["-c", &a, "-p", &p, "-t", "2", "-J", "-P", &n],
    );
    let t0 = Instant::now();
    let (cok, cout) = Proc::spawn(c).finish(Duration::from_secs(95));
    let (sok, sout) = s.take().unwrap().finish(Duration::from_secs(30));
    let who = format!(
        "iperf3 -P {streams}: server {}, client {}",
        server.name(),
        client.name()
    );
    eprintln!("{who}: {:?}", t0.elapsed());
    assert!(cok && sok, "{who}:\nclient:\n{cout}\nserver:\n{sout}");
    let sent = number(&cout, &["end", "sum_sent", "bytes"], &who);
    let received = number(&cout, &["end", "sum_received", "bytes"], &who);
    let server_received = number(&sout, &["end", "sum_received", "bytes"], &who);
    let secs = number(&cout, &["end", "sum_sent", "seconds"], &who);
    assert!(
        received > 0.0 && received <= sent && received == server_received,
        "{who}: the client sent {sent} B, and reports {received} B received; the server \
         reports {server_received} B:\nclient:\n{cout}\nserver:\n{sout}"
    );
    for (side, out) in [(server, &sout), (client, &cout)] {
        if side == Side::Ours {
            assert!(
                !out.contains("plain TCP"),
                "{who}: our preload fell back to TCP:\n{out}"
            );
        }
    }
    let gbits = sent * 8.0 / secs / 1e9;
    eprintln!("{who}: sent {sent} B, received {received} B (both ends agree), {gbits:.3} Gbit/s");
    gbits
}

/// iperf3 on our preload against itself and against rdma-core's preload both ways, one
/// stream and four, bytes checked on both ends; then rdma-core's against itself and plain
/// TCP for the table of docs/capi.md.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn iperf3_on_our_preload_interop() {
    use Side::*;
    let mut port = 5300;
    let mut next = || {
        port += 1;
        port
    };
    let mut table = Vec::new();
    for (server, client) in [
        (Ours, Ours),
        (Ours, RdmaCore),
        (RdmaCore, Ours),
        (RdmaCore, RdmaCore),
        (Tcp, Tcp),
    ] {
        for streams in [1, 4] {
            let g = iperf3(server, client, next(), streams);
            table.push(format!(
                "| {} | {} | {streams} | {g:.2} |",
                server.name(),
                client.name()
            ));
        }
    }
    eprintln!(
        "| server | client | streams | Gbit/s |\n| --- | --- | --- | --- |\n{}",
        table.join("\n")
    );
}
