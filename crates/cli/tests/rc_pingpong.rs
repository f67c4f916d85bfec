//! `rverbs rc-pingpong` end to end (issue #4): Rust against Rust, against rdma-core's
//! `ibv_rc_pingpong` in both directions, polling and with `-e`, at 64 and 4096 bytes; across
//! the veth of the two-node topology; and the errors. The device tests run in the VM (on the
//! host they show as ignored); the argument errors run everywhere.
//!
//! Every pair runs the server on `$RVERBS_DEV_A` and the client on `$RVERBS_DEV_B` connecting
//! to `$RVERBS_ADDR_A` (the same rxe0 in the one-node topology), each with `-g` set to its
//! device's RoCE v2 IPv4 GID index, and checks: both exit 0, each side's "remote address" is
//! the other's "local address", the GIDs are the devices' own, and the summary lines parse
//! with the right byte and iteration counts. Each test has its own TCP ports, so they may run
//! in parallel.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod tool_support;
use tool_support::{addr_a, c_tool, env_or, rverbs_bin, spawn, spawn_env, Done, Running};

use rverbs::uverbs::gid::GidType;

/// Iterations per pair: what is checked is the exchange, the summary lines' format and their
/// byte and iteration counts, none of which needs many; under emulation each round trip costs
/// milliseconds. Below the default receive depth (500) either way, as the earlier 200 were.
const ITERS: u32 = 50;

fn dev_a() -> String {
    env_or("RVERBS_DEV_A", "rxe0")
}
fn dev_b() -> String {
    env_or("RVERBS_DEV_B", &dev_a())
}

/// Index and text of the first RoCE v2 IPv4-mapped GID of port 1 of `dev`.
fn roce_v2_gid(dev: &str) -> (u32, String) {
    let ctx = rverbs::provider::open_by_name(dev)
        .unwrap_or_else(|e| panic!("open {dev} (the VM must provide it): {e}"));
    let table = ctx.query_gid_table().expect("query GID table");
    let e = table
        .iter()
        .find(|e| {
            e.port == 1
                && e.gid_type == GidType::ROCE_V2
                && e.gid.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]
        })
        .unwrap_or_else(|| panic!("no RoCE v2 IPv4 GID on {dev}: {table:?}"));
    (e.index, e.gid.to_string())
}

/// What one side printed.
#[derive(Debug)]
struct Report {
    local: String,
    remote: String,
    bytes: u64,
    secs: f64,
    mbit: f64,
    iters: u32,
    usec_per_iter: f64,
}

fn field<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.trim_start().strip_prefix(prefix).map(str::trim)
}

/// Parses the four lines both tools print; panics naming the output if one is missing or
/// malformed.
fn parse_report(d: &Done) -> Report {
    let mut local = None;
    let mut remote = None;
    let mut bytes_line = None;
    let mut iters_line = None;
    for l in d.out.lines() {
        if let Some(v) = field(l, "local address:") {
            local = Some(v.to_string());
        } else if let Some(v) = field(l, "remote address:") {
            remote = Some(v.to_string());
        } else if l.contains(" bytes in ") {
            bytes_line = Some(l.to_string());
        } else if l.contains(" iters in ") {
            iters_line = Some(l.to_string());
        }
    }
    let (Some(local), Some(remote), Some(b), Some(i)) = (local, remote, bytes_line, iters_line)
    else {
        panic!("missing output lines from {d}");
    };
    // "<bytes> bytes in <secs> seconds = <mbit> Mbit/sec"
    let w: Vec<&str> = b.split_whitespace().collect();
    assert!(
        w.len() == 8 && w[1] == "bytes" && w[2] == "in" && w[4] == "seconds" && w[7] == "Mbit/sec",
        "bad bytes line {b:?} from {d}"
    );
    // "<iters> iters in <secs> seconds = <usec> usec/iter"
    let v: Vec<&str> = i.split_whitespace().collect();
    assert!(
        v.len() == 8 && v[1] == "iters" && v[4] == "seconds" && v[7] == "usec/iter",
        "bad iters line {i:?} from {d}"
    );
    let num = |s: &str| -> f64 { s.parse().unwrap_or_else(|_| panic!("{s:?} in {d}")) };
    let r = Report {
        local,
        remote,
        bytes: w[0].parse().unwrap_or_else(|_| panic!("{b:?}")),
        secs: num(w[3]),
        mbit: num(w[6]),
        iters: v[0].parse().unwrap_or_else(|_| panic!("{i:?}")),
        usec_per_iter: num(v[6]),
    };
    assert_eq!(w[3], v[3], "the two lines disagree on the time: {d}");
    r
}

/// Checks an address line "LID 0x…, QPN 0x……, PSN 0x……, GID <gid>" and its GID.
fn check_address(addr: &str, gid: &str, d: &Done) {
    let parts: Vec<&str> = addr.split(", ").collect();
    assert_eq!(parts.len(), 4, "address {addr:?} in {d}");
    for (p, (name, digits)) in parts[..3].iter().zip([("LID", 4), ("QPN", 6), ("PSN", 6)]) {
        let hex = p
            .strip_prefix(name)
            .and_then(|s| s.strip_prefix(" 0x"))
            .unwrap_or_else(|| panic!("{name} in {addr:?} of {d}"));
        assert!(
            hex.len() == digits && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{name} {hex:?} in {d}"
        );
    }
    assert_eq!(parts[3], format!("GID {gid}"), "GID of {addr:?} in {d}");
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Rust,
    C,
}

struct Pair {
    server: Tool,
    client: Tool,
    server_events: bool,
    client_events: bool,
    size: u32,
    iters: u32,
    port: u16,
}

fn side_args(p: &Pair, dev: &str, gid_idx: u32, events: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "-d",
        dev,
        "-g",
        &gid_idx.to_string(),
        "-s",
        &p.size.to_string(),
        "-n",
        &p.iters.to_string(),
        "-p",
        &p.port.to_string(),
        "-c",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if events {
        a.push("-e".into());
    }
    a
}

fn command(t: Tool, c: &Option<PathBuf>, args: Vec<String>) -> (PathBuf, Vec<String>) {
    match t {
        Tool::Rust => {
            let mut v = vec!["rc-pingpong".to_string()];
            v.extend(args);
            (rverbs_bin(), v)
        }
        Tool::C => (c.clone().expect("ibv_rc_pingpong"), args),
    }
}

/// Runs one ping-pong and checks everything both sides printed. Returns (server, client).
fn run_pair(p: Pair) -> Option<(Report, Report)> {
    let c = if p.server == Tool::C || p.client == Tool::C {
        match c_tool("ibv_rc_pingpong") {
            Some(c) => Some(c),
            None => return None,
        }
    } else {
        None
    };
    let (da, db) = (dev_a(), dev_b());
    let (ga, gid_a) = roce_v2_gid(&da);
    let (gb, gid_b) = roce_v2_gid(&db);
    let (sprog, sargs) = command(p.server, &c, side_args(&p, &da, ga, p.server_events));
    let mut cargs = side_args(&p, &db, gb, p.client_events);
    cargs.push(addr_a());
    let (cprog, cargs) = command(p.client, &c, cargs);

    let mut server = spawn(&sprog, &sargs);
    server.wait_listening(p.port);
    let client = spawn(&cprog, &cargs).finish(Duration::from_secs(120));
    // Captured by libtest, shown when the test fails: should the server then time out (seen
    // once on 7.3.4: ibv_rc_pingpong -e as the server, ours the client), what the client did.
    eprintln!("client ended: {client}");
    let server = server.finish(Duration::from_secs(60));
    assert!(
        client.status.success(),
        "client failed: {client}\nserver: {server}"
    );
    assert!(
        server.status.success(),
        "server failed: {server}\nclient: {client}"
    );
    for d in [&server, &client] {
        assert!(!d.out.contains("invalid data"), "buffer check failed: {d}");
    }
    let s = parse_report(&server);
    let cl = parse_report(&client);
    check_address(&s.local, &gid_a, &server);
    check_address(&cl.local, &gid_b, &client);
    assert_eq!(
        s.remote, cl.local,
        "server's remote is not the client's local: {server}\n{client}"
    );
    assert_eq!(
        cl.remote, s.local,
        "client's remote is not the server's local: {server}\n{client}"
    );
    for (r, d) in [(&s, &server), (&cl, &client)] {
        assert_eq!(r.iters, p.iters, "{d}");
        assert_eq!(r.bytes, u64::from(p.size) * u64::from(p.iters) * 2, "{d}");
        // The seconds are printed with two decimals, so a run shorter than 5 ms (50 tries on
        // an idle machine) prints 0.00: only the unrounded figures must be positive.
        assert!(
            r.secs >= 0.0 && r.usec_per_iter > 0.0 && r.mbit > 0.0,
            "{r:?} {d}"
        );
        // usec/iter × iters is the time (both are rounded to 2 decimals).
        let t = r.usec_per_iter * f64::from(r.iters) / 1e6;
        assert!((t - r.secs).abs() <= 0.006 + t * 1e-4, "{r:?} {d}");
    }
    eprintln!(
        "{:?} server{} <- {:?} client{}, {} B: server {:.2} usec/iter, client {:.2} usec/iter",
        p.server,
        if p.server_events { " -e" } else { "" },
        p.client,
        if p.client_events { " -e" } else { "" },
        p.size,
        s.usec_per_iter,
        cl.usec_per_iter
    );
    Some((s, cl))
}

fn matrix(server: Tool, client: Tool, events: bool, base_port: u16) {
    for (i, size) in [64u32, 4096].into_iter().enumerate() {
        let r = run_pair(Pair {
            server,
            client,
            server_events: events,
            client_events: events,
            size,
            iters: ITERS,
            port: base_port + i as u16,
        });
        if r.is_none() {
            return;
        }
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rust_to_rust_polling() {
    matrix(Tool::Rust, Tool::Rust, false, 18600);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rust_to_rust_events() {
    matrix(Tool::Rust, Tool::Rust, true, 18602);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_rust_server_c_client_polling() {
    matrix(Tool::Rust, Tool::C, false, 18604);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_rust_server_c_client_events() {
    matrix(Tool::Rust, Tool::C, true, 18606);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_c_server_rust_client_polling() {
    matrix(Tool::C, Tool::Rust, false, 18608);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_c_server_rust_client_events() {
    matrix(Tool::C, Tool::Rust, true, 18610);
}

/// One side sleeping on events, the other polling (both ways), with the default size.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn mixed_events_and_polling() {
    for (i, (se, ce)) in [(true, false), (false, true)].into_iter().enumerate() {
        run_pair(Pair {
            server: Tool::Rust,
            client: Tool::Rust,
            server_events: se,
            client_events: ce,
            size: 4096,
            iters: 200,
            port: 18612 + i as u16,
        });
    }
}

fn counter(netdev: &str, which: &str) -> u64 {
    let p = format!("/sys/class/net/{netdev}/statistics/{which}");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// Two-node topology: server on DEV_A, client on DEV_B, and the messages really cross the
/// veth between them (its byte counters grow by at least the payload each way).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn two_nodes_across_the_veth() {
    if dev_b() == dev_a() {
        eprintln!(
            "skipped: one-node topology (RVERBS_DEV_B is RVERBS_DEV_A = {}); runs in --topo two",
            dev_a()
        );
        return;
    }
    let (na, nb) = (
        env_or("RVERBS_NETDEV_A", "ve1"),
        env_or("RVERBS_NETDEV_B", "ve2"),
    );
    let before = (counter(&na, "tx_bytes"), counter(&nb, "tx_bytes"));
    for (i, events) in [false, true].into_iter().enumerate() {
        run_pair(Pair {
            server: Tool::Rust,
            client: Tool::Rust,
            server_events: events,
            client_events: events,
            size: 4096,
            iters: ITERS,
            port: 18620 + i as u16,
        });
    }
    let after = (counter(&na, "tx_bytes"), counter(&nb, "tx_bytes"));
    let payload = 2 * 4096 * u64::from(ITERS);
    assert!(
        after.0 - before.0 >= payload && after.1 - before.1 >= payload,
        "{na} sent {} and {nb} sent {} bytes; each should have sent at least {payload}",
        after.0 - before.0,
        after.1 - before.1
    );
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

fn rverbs(args: &[&str]) -> Running {
    let mut v = vec!["rc-pingpong".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    spawn(&rverbs_bin(), &v)
}

fn fails_with(d: &Done, needles: &[&str]) {
    assert_eq!(d.status.code(), Some(1), "{d}");
    assert!(
        d.err.starts_with("rverbs rc-pingpong: "),
        "the error names the command: {d}"
    );
    for n in needles {
        assert!(d.err.contains(n), "stderr lacks {n:?}: {d}");
    }
}

/// Bad flags fail before any device is touched, so this runs on the host too.
#[test]
fn bad_flags_are_refused() {
    let t = Duration::from_secs(20);
    fails_with(
        &rverbs(&["-o"]).finish(t),
        &["-o/--odp", "on-demand paging", "not supported"],
    );
    fails_with(&rverbs(&["--new_send"]).finish(t), &["-N/--new_send"]);
    fails_with(&rverbs(&["-x"]).finish(t), &["-x", "Usage:"]);
    fails_with(
        &rverbs(&["-s", "12k"]).finish(t),
        &["-s \"12k\": not a number"],
    );
    fails_with(&rverbs(&["-m", "1500"]).finish(t), &["-m \"1500\""]);
    fails_with(&rverbs(&["a", "b"]).finish(t), &["one server host at most"]);
    let d = rverbs(&["--help"]).finish(t);
    assert!(d.status.success() && d.out.contains("--gid-idx"), "{d}");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn unknown_device_lists_the_devices() {
    let d = rverbs(&["-d", "nosuchdev0", "-p", "18630"]).finish(Duration::from_secs(20));
    fails_with(&d, &["nosuchdev0", &dev_a()]);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn connection_refused() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (g, _) = roce_v2_gid(&dev_a());
    let d = rverbs(&[
        "-d",
        &dev_a(),
        "-g",
        &g.to_string(),
        "-p",
        &port.to_string(),
        "127.0.0.1",
    ])
    .finish(Duration::from_secs(30));
    fails_with(
        &d,
        &[&format!("couldn't connect to 127.0.0.1:{port}"), "refused"],
    );
}

/// A fake server that reads the client's message, answers `reply` and closes; returns what
/// the client sent.
fn fake_server(reply: Vec<u8>) -> (u16, JoinHandle<Vec<u8>>) {
    let l = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut m = vec![0u8; 52];
        s.read_exact(&mut m).unwrap();
        s.write_all(&reply).unwrap();
        m
    });
    (port, t)
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn remote_closes_early() {
    let (g, gid) = roce_v2_gid(&dev_a());
    let (port, t) = fake_server(b"0000:0000".to_vec());
    let d = rverbs(&[
        "-d",
        &dev_a(),
        "-g",
        &g.to_string(),
        "-p",
        &port.to_string(),
        "127.0.0.1",
    ])
    .finish(Duration::from_secs(60));
    fails_with(
        &d,
        &["closed the connection after 9 of the 52 bytes of the remote address"],
    );
    // What the client sent is the C tool's message: 51 characters and a NUL.
    let sent = t.join().unwrap();
    let text = std::str::from_utf8(&sent[..51]).unwrap();
    assert_eq!(sent[51], 0);
    let f: Vec<&str> = text.split(':').collect();
    assert_eq!(f.len(), 4, "{text}");
    assert_eq!(
        (f[0].len(), f[1].len(), f[2].len(), f[3].len()),
        (4, 6, 6, 32),
        "{text}"
    );
    // The wire GID of ::ffff:a.b.c.d is 20 zeros, ffff and the address in hex.
    let v4: Vec<u8> = gid
        .strip_prefix("::ffff:")
        .unwrap()
        .split('.')
        .map(|o| o.parse().unwrap())
        .collect();
    let want = format!(
        "00000000000000000000ffff{:02x}{:02x}{:02x}{:02x}",
        v4[0], v4[1], v4[2], v4[3]
    );
    assert_eq!(f[3], want, "{text} (GID {gid})");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn garbage_from_the_client() {
    let (g, _) = roce_v2_gid(&dev_a());
    let port = 18632;
    let mut server = rverbs(&[
        "-d",
        &dev_a(),
        "-g",
        &g.to_string(),
        "-p",
        &port.to_string(),
    ]);
    server.wait_listening(port);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&[b'x'; 52]).unwrap();
    let d = server.finish(Duration::from_secs(30));
    fails_with(&d, &["bad remote address message \"xxxx"]);
}

/// The "Failed status <name> (<n>) for wr_id <id>" line of `d`'s stderr, checked for shape.
fn failed_status_line(d: &Done, wr_id: u32) -> String {
    let line = d
        .err
        .lines()
        .find(|l| l.contains("Failed status "))
        .unwrap_or_else(|| panic!("no \"Failed status\" line: {d}"));
    let line = line[line.find("Failed status ").unwrap()..].to_string();
    let tail = format!(") for wr_id {wr_id}");
    assert!(
        line.ends_with(&tail),
        "{line:?} should end with {tail:?}: {d}"
    );
    let open = line.rfind('(').unwrap();
    let n: u32 = line[open + 1..line.len() - tail.len()]
        .parse()
        .unwrap_or_else(|_| panic!("status number in {line:?}"));
    assert!(n != 0, "a failed status is not success: {line:?}");
    line
}

/// A client sending 4096-byte messages to a server that receives into 64 bytes: the server's
/// receive completes with an error status, and so does the client's send; both report it as
/// the C tool does ("Failed status <ibv_wc_status_str> (<n>) for wr_id <id>") and exit 1.
/// With ibv_rc_pingpong as the server, its line must be the same as ours.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn failed_completion_status() {
    let (g, _) = roce_v2_gid(&dev_a());
    let args = |port: u16, size: &str| -> Vec<String> {
        let p = port.to_string();
        let g = g.to_string();
        let a = ["-d", &dev_a(), "-g", &g, "-p", &p, "-n", "10", "-s", size];
        a.iter().map(|s| s.to_string()).collect()
    };
    let run = |server_prog: PathBuf, mut sargs: Vec<String>, port: u16| -> (Done, Done) {
        sargs.extend(args(port, "64"));
        let mut server = spawn(&server_prog, &sargs);
        server.wait_listening(port);
        let mut cargs = vec!["rc-pingpong".to_string()];
        cargs.extend(args(port, "4096"));
        cargs.push("127.0.0.1".into());
        let client = spawn(&rverbs_bin(), &cargs).finish(Duration::from_secs(60));
        (server.finish(Duration::from_secs(60)), client)
    };
    let (server, client) = run(rverbs_bin(), vec!["rc-pingpong".into()], 18634);
    fails_with(&server, &["Failed status "]);
    fails_with(&client, &["Failed status "]);
    let ours = failed_status_line(&server, 1);
    failed_status_line(&client, 2);
    eprintln!("rverbs server: {ours}");
    if let Some(c) = c_tool("ibv_rc_pingpong") {
        let (server, client) = run(c, vec![], 18635);
        assert_eq!(server.status.code(), Some(1), "{server}");
        fails_with(&client, &["Failed status "]);
        assert_eq!(failed_status_line(&server, 1), ours, "{server}");
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn bad_port_and_gid_index() {
    let t = Duration::from_secs(30);
    let d = rverbs(&["-d", &dev_a(), "-i", "2", "-p", "18636", "127.0.0.1"]).finish(t);
    fails_with(&d, &["Couldn't get port info", "there is no port 2"]);
    let d = rverbs(&["-d", &dev_a(), "-g", "200", "-p", "18636", "127.0.0.1"]).finish(t);
    fails_with(&d, &["can't read sgid of index 200"]);
}

/// Without -g on RoCE the server cannot move its QP to RTR: it says why, and the client, whose
/// server hung up, says what probably happened. Neither hangs.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn roce_without_gid_fails_clearly() {
    let port = 18638u16;
    let p = port.to_string();
    let mut server = rverbs(&["-d", &dev_a(), "-p", &p]);
    server.wait_listening(port);
    let client = rverbs(&["-d", &dev_a(), "-p", &p, "127.0.0.1"]).finish(Duration::from_secs(30));
    let server = server.finish(Duration::from_secs(30));
    fails_with(
        &server,
        &["Failed to modify QP to RTR", "RoCE needs GIDs: give -g"],
    );
    fails_with(
        &client,
        &[
            "closed the connection after 0 of the 52 bytes",
            "RoCE needs -g",
        ],
    );
}

/// Runs rc-pingpong with each of `bads` as the value of the environment variable `var`: it
/// must fail before anything is opened (so this runs on the host too), naming the variable,
/// the value and `what` was expected.
fn bad_env_is_refused(var: &str, bads: &[&str], what: &str, port: u16) {
    let args: Vec<String> = vec!["rc-pingpong".into(), "-p".into(), port.to_string()];
    for bad in bads {
        let d = spawn_env(&rverbs_bin(), &args, &[(var, bad)]).finish(Duration::from_secs(20));
        fails_with(&d, &[&format!("{var}={bad}"), what]);
    }
}

/// A bad idle limit is refused.
#[test]
fn bad_idle_limit_is_refused() {
    bad_env_is_refused(
        "RVERBS_PINGPONG_IDLE_SECS",
        &["0", "soon", "-3"],
        "whole number of seconds",
        18640,
    );
}

/// A bad padding of the latency measurement (RVERBS_PINGPONG_PAD) is refused.
#[test]
fn bad_padding_is_refused() {
    bad_env_is_refused(
        "RVERBS_PINGPONG_PAD",
        &["lots", "-1", "4294967296"],
        "whole number of CQ polls, from 0 to 4294967295",
        18643,
    );
}

/// A peer that stops answering mid-run (SIGSTOP) ends the other side's run with the idle
/// error instead of a hang: polling (the loop's own clock) and with `-e` (the watchdog of the
/// blocking event wait). The limit is 2 s here (RVERBS_PINGPONG_IDLE_SECS).
fn peer_stops(events: bool, port: u16) {
    let dev = dev_a();
    let (g, _) = roce_v2_gid(&dev);
    let p = port.to_string();
    let g = g.to_string();
    let mut base = vec![
        "rc-pingpong",
        "-d",
        &dev,
        "-g",
        &g,
        "-p",
        &p,
        "-n",
        "100000000",
    ];
    if events {
        base.push("-e");
    }
    let sargs: Vec<String> = base.iter().map(|s| s.to_string()).collect();
    let env = [("RVERBS_PINGPONG_IDLE_SECS", "2")];
    let mut server = spawn_env(&rverbs_bin(), &sargs, &env);
    server.wait_listening(port);
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1".into());
    let client = spawn_env(&rverbs_bin(), &cargs, &env);
    // Let the exchange get going, then freeze the client.
    std::thread::sleep(Duration::from_secs(2));
    client.stop();
    let t0 = Instant::now();
    let d = server.finish(Duration::from_secs(30));
    let took = t0.elapsed();
    fails_with(&d, &["no completion for 2 s", "the remote side stopped"]);
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(15),
        "the server gave up after {took:?}, not about 2 s: {d}"
    );
    // The stopped client is killed when `client` drops.
    drop(client);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn peer_stops_polling() {
    peer_stops(false, 18641);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn peer_stops_events() {
    peer_stops(true, 18642);
}

/// RVERBS_PINGPONG_PAD=N (the latency measurement of docs/perf.md) polls the empty CQ N more
/// times before every send: the run completes and its poll count shows the padding.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn padding_polls_before_each_send() {
    let dev = dev_a();
    let (g, _) = roce_v2_gid(&dev);
    let g = g.to_string();
    let sargs: Vec<String> = ["rc-pingpong", "-d", &dev, "-g", &g, "-p", "18644"]
        .iter()
        .chain(&["-s", "64", "-n", "200"])
        .map(|s| s.to_string())
        .collect();
    let env = [
        ("RVERBS_PINGPONG_PAD", "25"),
        ("RVERBS_PINGPONG_STATS", "1"),
    ];
    let mut server = spawn_env(&rverbs_bin(), &sargs, &env);
    server.wait_listening(18644);
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1".into());
    let client = spawn_env(&rverbs_bin(), &cargs, &env).finish(Duration::from_secs(120));
    let server = server.finish(Duration::from_secs(30));
    for d in [&client, &server] {
        assert_eq!(d.code(), Some(0), "{d}");
        assert!(d.out.contains("200 iters in"), "no summary: {d}");
        // 200 sends, each after 25 padding polls.
        assert!(
            d.err.contains("rc-pingpong stats: 5000 padding polls"),
            "{d}"
        );
    }
}
