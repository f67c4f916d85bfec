//! Stream interop breadth and concurrency (issue 24): rdma-core's `rstream` against ours both
//! ways across the two-node topology (the veth between `rxe1` and `rxe2`), rdma-core's
//! `riostream` (rsockets' iomap) against ours playing its peer both ways, on one node and
//! across the two, and 64 streams of 1 MB each on one tokio runtime with every byte checked.
//! Runs in the VM (`cargo xtask test`): `two_node` tests in the two-node stages, `interop`
//! tests in the host guest.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rverbs_stream::{RdmaListener, RdmaStream, StreamOptions};

#[path = "../examples/rstream.rs"]
#[allow(dead_code)]
mod rstream_role;

fn env_addr(v: &str, default: &str) -> Ipv4Addr {
    let s = std::env::var(v).unwrap_or_else(|_| default.into());
    s.parse().unwrap_or_else(|e| panic!("{v}={s}: {e}"))
}

/// `$RVERBS_ADDR_A` (set by the VM), else 10.10.0.1.
fn addr_a() -> IpAddr {
    IpAddr::V4(env_addr("RVERBS_ADDR_A", "10.10.0.1"))
}

fn at(port: u16) -> SocketAddr {
    SocketAddr::new(addr_a(), port)
}

/// An rdma-core tool from rdmacm-utils; missing only in the minimal guest (which skips
/// `interop` tests).
fn tool(name: &str) -> Option<String> {
    let found = ["/usr/bin", "/usr/local/bin"]
        .into_iter()
        .map(|d| format!("{d}/{name}"))
        .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        let guest = std::env::var("RVERBS_GUEST").unwrap_or_default();
        assert_eq!(
            guest, "minimal",
            "{name} (rdmacm-utils) is missing in the {guest:?} guest"
        );
        eprintln!("skipped: {name} not in this guest");
    }
    found
}

fn finish(c: Child) -> (Option<i32>, String) {
    let o = c.wait_with_output().unwrap();
    (
        o.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

fn spawn_tool(tool: &str, secs: u32, args: &[String]) -> Child {
    Command::new("timeout")
        .arg(secs.to_string())
        .arg(tool)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

// --- two nodes: rstream across the veth ---------------------------------------------------

/// Node A's and node B's addresses, or `None` (and a note) in the one-node topology.
fn two_nodes(test: &str) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if std::env::var("RVERBS_TOPO").as_deref() != Ok("two") {
        eprintln!("skipped: {test} needs the two-node topology (RVERBS_TOPO=two)");
        return None;
    }
    Some((
        env_addr("RVERBS_ADDR_A", "10.20.0.1"),
        env_addr("RVERBS_ADDR_B", "10.20.0.2"),
    ))
}

/// Bytes node B's netdev has sent (`ve2` in the two-node topology).
fn b_tx_bytes() -> u64 {
    let dev = std::env::var("RVERBS_NETDEV_B").unwrap_or_else(|_| "ve2".into());
    let p = format!("/sys/class/net/{dev}/statistics/tx_bytes");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// The size table of the two-node runs (size, iterations, count): a short latency run
/// (inline sizes), ring-wrapping and multi-half bandwidth runs, 1 MiB transfers.
const TWO_NODE: &[(usize, usize, usize)] = &[
    (64, 100, 1),
    (4096, 5, 20),
    (100_000, 2, 6),
    (1 << 20, 1, 3),
];

fn cfg(
    connect: Option<SocketAddr>,
    bind: SocketAddr,
    t: (usize, usize, usize),
) -> rstream_role::Config {
    rstream_role::Config {
        connect,
        bind,
        all_sizes: false,
        custom: Some(t),
        verify: true,
        zero_copy: false,
    }
}

fn tool_args(addr_opt: &str, addr: Ipv4Addr, port: u16, t: (usize, usize, usize)) -> Vec<String> {
    [
        addr_opt,
        &addr.to_string(),
        "-p",
        &port.to_string(),
        "-S",
        &t.0.to_string(),
        "-I",
        &t.1.to_string(),
        "-C",
        &t.2.to_string(),
        "-T",
        "v",
    ]
    .map(String::from)
    .to_vec()
}

/// Runs one custom test of rstream's on node A (`-b A`) against our client, which connects
/// to A from node B (the route to A's address leaves through B's veth end).
fn rstream_on_a_ours_from_b(
    tool: &str,
    a: Ipv4Addr,
    b: Ipv4Addr,
    port: u16,
    t: (usize, usize, usize),
) {
    let srv = spawn_tool(tool, 60, &tool_args("-b", a, port, t));
    let dst = SocketAddr::new(IpAddr::V4(a), port);
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut out = Vec::new();
        let r = rstream_role::run(&cfg(Some(dst), dst, t), &mut out);
        let _ = tx.send((r, String::from_utf8_lossy(&out).into_owned()));
    });
    let (code, text) = finish(srv);
    let (r, ours) = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("our client did not finish; rstream on A ({code:?}): {text}"));
    eprintln!("{t:?} ours (client on {b}):\n{ours}\nrstream (server on {a}):\n{text}");
    r.unwrap();
    assert_eq!(code, Some(0), "rstream server on A: {text}");
    assert!(
        text.contains("custom") && !text.contains("failed"),
        "{text}"
    );
}

/// Ours serves on node A, rdma-core's `rstream -s A` runs on node B.
fn ours_on_a_rstream_from_b(
    tool: &str,
    a: Ipv4Addr,
    b: Ipv4Addr,
    port: u16,
    t: (usize, usize, usize),
) {
    let bind = SocketAddr::new(IpAddr::V4(a), port);
    let c = cfg(None, bind, t);
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        let mut out = Vec::new();
        let r = rstream_role::run(&c, &mut out);
        let _ = tx.send((r, String::from_utf8_lossy(&out).into_owned()));
    });
    thread::sleep(Duration::from_millis(500));
    let cl = spawn_tool(tool, 60, &tool_args("-s", a, port, t));
    let (code, text) = finish(cl);
    let (r, ours) = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("our server did not finish; rstream on B ({code:?}): {text}"));
    eprintln!("{t:?} ours (server on {a}):\n{ours}\nrstream (client on {b}):\n{text}");
    r.unwrap();
    assert_eq!(code, Some(0), "rstream client on B: {text}");
    assert!(
        text.contains("custom") && !text.contains("failed"),
        "{text}"
    );
}

/// rdma-core's `rstream` and ours across the two nodes, both ways, each byte checked by
/// both (`-T v`), sizes 64 B to 1 MiB; node B's veth end carried at least the payload.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_stream_two_node_rstream_both_ways() {
    let Some((a, b)) = two_nodes("interop_stream_two_node_rstream_both_ways") else {
        return;
    };
    let Some(tool) = tool("rstream") else { return };
    // Our client's route to A leaves from B: its local address says so.
    {
        let l = RdmaListener::bind(SocketAddr::new(IpAddr::V4(a), 7700)).unwrap();
        let c = thread::spawn(move || RdmaStream::connect(SocketAddr::new(IpAddr::V4(a), 7700)));
        let (_s, from) = l.accept().unwrap();
        let c = c.join().unwrap().unwrap();
        assert_eq!(
            from.ip(),
            IpAddr::V4(b),
            "our client did not come from node B"
        );
        assert_eq!(c.local_addr().unwrap().ip(), IpAddr::V4(b));
    }
    for (k, &t) in TWO_NODE.iter().enumerate() {
        let payload = (t.0 * t.1 * t.2) as u64;
        let before = b_tx_bytes();
        rstream_on_a_ours_from_b(&tool, a, b, 7701 + 2 * k as u16, t);
        let sent = b_tx_bytes() - before;
        assert!(
            sent >= payload,
            "node B's netdev sent {sent} bytes for {payload} of payload"
        );
        let before = b_tx_bytes();
        ours_on_a_rstream_from_b(&tool, a, b, 7702 + 2 * k as u16, t);
        let sent = b_tx_bytes() - before;
        assert!(
            sent >= payload,
            "node B's netdev sent {sent} bytes for {payload} of payload"
        );
    }
}

// --- riostream: iomap refused at connect -------------------------------------------------

/// Retries `connect` for 10 s while nobody listens yet (a tool may still be starting).
fn connect_retrying(to: SocketAddr, opts: &StreamOptions) -> io::Result<RdmaStream> {
    let t0 = Instant::now();
    loop {
        match RdmaStream::connect_with(to, opts) {
            Err(e)
                if e.kind() == io::ErrorKind::ConnectionRefused
                    && t0.elapsed() < Duration::from_secs(10) =>
            {
                thread::sleep(Duration::from_millis(200))
            }
            r => return r,
        }
    }
}

/// The pid of the process named `name` whose parent is `ppid`, if there is one now.
fn child_named(ppid: u32, name: &str) -> Option<u32> {
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

/// Whether process `pid` holds a socket in non-blocking mode (`O_NONBLOCK` in its
/// `/proc/<pid>/fdinfo` flags).
fn has_nonblocking_socket(pid: u32) -> bool {
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

/// `O_NONBLOCK` on Linux (x86-64, aarch64).
const O_NONBLOCK: u32 = 0o4000;

/// Waits until `riostream -b` (run by `timeout`, the child `srv`) has set its listener's
/// options. riostream listens first (`rlisten`, whose service thread then accepts every
/// request at once with the listener's options of that moment) and only then sets them
/// (`set_options(lrs)`: its buffer sizes, `RDMA_IOMAPSIZE` 1, last `O_NONBLOCK`), so a
/// client that connects as soon as the port listens may get a connection without an iomap
/// table. The `O_NONBLOCK` of the listener's accept queue (a socket; rsockets' other
/// sockets stay blocking) says that set_options has run. Fails if riostream exits first.
fn riostream_listener_ready(srv: &mut Child) {
    loop {
        if let Some(st) = srv.try_wait().unwrap() {
            let (_, text) = finish_exited(srv);
            panic!("riostream -b exited ({st}) before it listened: {text}");
        }
        if child_named(srv.id(), "riostream").is_some_and(has_nonblocking_socket) {
            return;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// What an exited child wrote.
fn finish_exited(c: &mut Child) -> (Option<i32>, String) {
    let mut text = String::new();
    if let Some(o) = c.stdout.as_mut() {
        let _ = o.read_to_string(&mut text);
    }
    if let Some(e) = c.stderr.as_mut() {
        let _ = e.read_to_string(&mut text);
    }
    (c.try_wait().ok().flatten().and_then(|s| s.code()), text)
}

/// `riostream -S size -I iters -C count -T v`: riostream checks each iteration's last transfer
/// (ours) as soon as its marker is there, which [`riostream_role`] makes sound.
fn riostream_args(
    opt: &str,
    addr: IpAddr,
    port: u16,
    (size, iters, count): (usize, usize, usize),
) -> Vec<String> {
    let (p, s, i, c) = (
        port.to_string(),
        size.to_string(),
        iters.to_string(),
        count.to_string(),
    );
    [
        opt,
        &addr.to_string(),
        "-p",
        &p,
        "-S",
        &s,
        "-I",
        &i,
        "-C",
        &c,
        "-T",
        "v",
    ]
    .map(String::from)
    .to_vec()
}

/// Runs `role` while the tool `c` runs, then waits for the tool: its exit status and
/// output. If `role` panics, ends the tool first (SIGTERM to `timeout`, which passes it on)
/// and prints what the tool said before the panic goes on.
fn beside_tool(c: Child, role: impl FnOnce()) -> (Option<i32>, String) {
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(role)) {
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let (code, text) = finish(c);
        eprintln!("the tool, ended after our side failed ({code:?}): {text}");
        std::panic::resume_unwind(p);
    }
    finish(c)
}

/// The nonzero hardware counters of every RDMA device (rxe's retries, RNRs, sequence
/// errors): evidence for a failure.
fn rxe_counters() -> String {
    let mut out = String::new();
    let Ok(devs) = std::fs::read_dir("/sys/class/infiniband") else {
        return out;
    };
    for d in devs.flatten() {
        let dir = d.path().join("ports/1/hw_counters");
        let Ok(cs) = std::fs::read_dir(&dir) else {
            continue;
        };
        for c in cs.flatten() {
            let v = std::fs::read_to_string(c.path()).unwrap_or_default();
            let v = v.trim();
            if v != "0" {
                out += &format!(
                    "{}:{}={v} ",
                    d.file_name().to_string_lossy(),
                    c.file_name().to_string_lossy()
                );
            }
        }
    }
    out
}

/// The size table of the riostream runs (size, iterations, count): inline, ring-wrapping
/// and 1 MiB transfers.
const RIOSTREAM: &[(usize, usize, usize)] = &[(64, 10, 10), (4096, 2, 10), (1 << 20, 1, 2)];

/// riostream's options: 512 KiB rings (its SO_SNDBUF / SO_RCVBUF) and an iomap table of one
/// entry (its RDMA_IOMAPSIZE).
fn riostream_opts() -> StreamOptions {
    StreamOptions {
        send_buffer: 1 << 19,
        recv_buffer: 1 << 19,
        iomap_entries: 1,
        ..StreamOptions::default()
    }
}

/// riostream's `run_test` on an `RdmaStream`: map `size` bytes at offset 0 (last byte
/// 0xff), exchange 16 bytes, then per iteration the client writes `count` transfers into the
/// peer's mapping (the last one with the next marker in its last byte, the rest with another
/// value) and waits for the marker after it in its own mapping's last byte, and the server
/// the other way round. The bytes before the marker of each iteration's last transfer follow
/// riostream's `format_buf` counter (one byte counting up, across iterations).
///
/// A marker that has arrived says nothing of the bytes in front of it *in the same RDMA
/// WRITE*: no device promises the order in which it places one message's bytes, and rxe
/// copies a packet's payload with the kernel's `memcpy`, which on a CPU without FSRM (the
/// bed's TCG guests) copies 32 bytes and more from the tail down whenever the low byte of
/// the source address is below the destination's. riostream's `-T v` checks them as soon
/// as the marker is there (one CI run saw riostream on our C drop-in fail `data verification
/// failed byte 252`, the first byte of a 64-byte transfer that rdma-core's library had
/// written). So each side orders its bytes by RC's order of messages
/// instead: we write each last transfer's bytes, then its marker in a write of its own (RC
/// places the first write before the second), so riostream's check of ours is sound; and
/// we check what the peer wrote only once its end of the stream has come, a message after
/// its last write: its last transfer's bytes are all in the mapping then (the bytes of the
/// earlier iterations are gone, written over by the transfers after them).
fn riostream_role(mut s: RdmaStream, client: bool, (size, iters, count): (usize, usize, usize)) {
    let map = s.iomap(size, 0).unwrap();
    map.write_at(size - 1, &[0xff]).unwrap();
    let mut sync = [0u8; 16];
    if client {
        s.write_all(&sync).unwrap();
        s.read_exact(&mut sync).unwrap();
    } else {
        s.read_exact(&mut sync).unwrap();
        s.write_all(&sync).unwrap();
    }
    let mut formatted = 0u8;
    let send = |marker: u8, formatted: &mut u8| {
        let mut b = vec![marker.wrapping_sub(1); size];
        for _ in 1..count {
            assert_eq!(s.iowrite(0, &b).unwrap(), size);
        }
        for x in &mut b[..size - 1] {
            *x = *formatted;
            *formatted = formatted.wrapping_add(1);
        }
        b[size - 1] = marker;
        // The bytes, then the marker after them (see above).
        assert_eq!(s.iowrite(0, &b[..size - 1]).unwrap(), size - 1);
        assert_eq!(s.iowrite(size as u64 - 1, &b[size - 1..]).unwrap(), 1);
    };
    let wait = |marker: u8| {
        let t0 = Instant::now();
        let (mut last, mut one) = ([0u8], [0u8]);
        loop {
            // riostream sends nothing while it writes into our mapping: whatever the stream
            // has to say (one of our writes failed, the peer ended or sent data) means the
            // marker will not come, unless it is there already. Asked first: what the
            // stream reports arrived after the peer's earlier writes (RC order), so a marker
            // written before it is in the mapping when we look below. The non-blocking read
            // also reaps our completions.
            let said = match s.recv_vectored(&mut [io::IoSliceMut::new(&mut one)], true) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                r => Some(r),
            };
            map.read_at(size - 1, &mut last).unwrap();
            if last[0] == marker {
                break;
            }
            if let Some(r) = said {
                panic!(
                    "waiting for marker {marker} (last byte {}): the stream says {r:?}; \
                     rxe counters: {}",
                    last[0],
                    rxe_counters()
                );
            }
            // Only against a hang of the stream itself: riostream's own `timeout` ends it
            // first, and its end reaches us as the end of the stream.
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "marker {marker} never came (last byte {}) and the stream stayed quiet; \
                 stream: {:?}; rxe counters: {}",
                last[0],
                s.poll_ready(false, false),
                rxe_counters()
            );
            thread::yield_now();
        }
    };
    let mut marker = 0u8;
    for _ in 0..iters {
        if client {
            send(marker, &mut formatted);
            wait(marker.wrapping_add(1));
        } else {
            wait(marker);
            send(marker.wrapping_add(1), &mut formatted);
        }
        marker = marker.wrapping_add(2);
    }
    // riostream ends (`rshutdown`) after its last transfer, or once it has our last marker:
    // nothing else comes, and the end of the stream says every write of the peer is placed.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(
        rest.is_empty(),
        "riostream sent {} bytes at the end",
        rest.len()
    );
    // The peer's last transfer: its `format_buf` counter had formatted `size - 1` bytes per
    // iteration before it.
    let mut want = ((iters - 1) * (size - 1)) as u8;
    let mut got = vec![0u8; size - 1];
    map.read_at(0, &mut got).unwrap();
    for (i, &g) in got.iter().enumerate() {
        assert_eq!(g, want, "byte {i} of the peer's last {size}-byte transfer");
        want = want.wrapping_add(1);
    }
    drop(map);
    s.shutdown(std::net::Shutdown::Both).unwrap();
}

/// rdma-core's `riostream -s` (iomap: it maps its buffer, `riowrite`s into ours, polls the
/// last byte of its own) against our listener playing riostream's server, over
/// [`RIOSTREAM`]: every marker arrives, riostream checks each of our last transfers, we
/// check its last one at the end of the stream; riostream's exit status is checked.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_stream_iomap_riostream_client() {
    let Some(tool) = tool("riostream") else {
        return;
    };
    for (i, &t) in RIOSTREAM.iter().enumerate() {
        let port = 7720 + 2 * i as u16;
        let l = RdmaListener::bind_with(at(port), &riostream_opts()).unwrap();
        let cl = spawn_tool(&tool, 60, &riostream_args("-s", addr_a(), port, t));
        let (s, _) = l.accept().unwrap();
        let (code, text) = beside_tool(cl, || riostream_role(s, false, t));
        eprintln!("riostream client {t:?} ({code:?}): {text}");
        assert!(
            code == Some(0) && text.contains("custom"),
            "riostream client: {code:?} {text}"
        );
    }
}

/// Our client playing riostream's client against rdma-core's `riostream -b`, as above.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_stream_iomap_riostream_server() {
    let Some(tool) = tool("riostream") else {
        return;
    };
    for (i, &t) in RIOSTREAM.iter().enumerate() {
        let port = 7721 + 2 * i as u16;
        let mut srv = spawn_tool(&tool, 60, &riostream_args("-b", addr_a(), port, t));
        riostream_listener_ready(&mut srv);
        let c = connect_retrying(at(port), &riostream_opts()).unwrap();
        let (code, text) = beside_tool(srv, || riostream_role(c, true, t));
        eprintln!("riostream server {t:?} ({code:?}): {text}");
        assert!(
            code == Some(0) && text.contains("custom"),
            "riostream server: {code:?} {text}"
        );
    }
}

/// riostream across the two nodes, both ways: rdma-core's `riostream -b A` on node A against
/// our client from node B, then ours serving on A against `riostream -s A` from node B, over
/// [`RIOSTREAM`], as above; node B's veth end carried at least the payload of each
/// direction's iomap writes.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_stream_two_node_riostream_both_ways() {
    let Some((a, b)) = two_nodes("interop_stream_two_node_riostream_both_ways") else {
        return;
    };
    let Some(tool) = tool("riostream") else {
        return;
    };
    let a = IpAddr::V4(a);
    for (i, &t) in RIOSTREAM.iter().enumerate() {
        // Each side writes size * count bytes per iteration into the other's mapping.
        let payload = (t.0 * t.1 * t.2) as u64;
        let port = 7740 + 2 * i as u16;
        let before = b_tx_bytes();
        let mut srv = spawn_tool(&tool, 60, &riostream_args("-b", a, port, t));
        riostream_listener_ready(&mut srv);
        let c = connect_retrying(SocketAddr::new(a, port), &riostream_opts()).unwrap();
        assert_eq!(
            c.local_addr().unwrap().ip(),
            IpAddr::V4(b),
            "our client did not leave from node B"
        );
        let (code, text) = beside_tool(srv, || riostream_role(c, true, t));
        eprintln!("riostream server on {a} {t:?} ({code:?}): {text}");
        assert!(
            code == Some(0) && text.contains("custom"),
            "riostream server on A: {code:?} {text}"
        );
        let sent = b_tx_bytes() - before;
        assert!(
            sent >= payload,
            "node B's netdev sent {sent} bytes for {payload} of payload"
        );

        let port = port + 1;
        let before = b_tx_bytes();
        let l = RdmaListener::bind_with(SocketAddr::new(a, port), &riostream_opts()).unwrap();
        let cl = spawn_tool(&tool, 60, &riostream_args("-s", a, port, t));
        let (s, from) = l.accept().unwrap();
        assert_eq!(
            from.ip(),
            IpAddr::V4(b),
            "riostream did not come from node B"
        );
        let (code, text) = beside_tool(cl, || riostream_role(s, false, t));
        eprintln!("riostream client from {b} {t:?} ({code:?}): {text}");
        assert!(
            code == Some(0) && text.contains("custom"),
            "riostream client on B: {code:?} {text}"
        );
        let sent = b_tx_bytes() - before;
        assert!(
            sent >= payload,
            "node B's netdev sent {sent} bytes for {payload} of payload"
        );
    }
}

// --- many streams on one tokio runtime -----------------------------------------------------

#[cfg(feature = "tokio")]
mod on_tokio {
    use super::*;
    use rverbs_stream::tokio::AsyncRdmaStream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A random table of prime length: stream `i`'s byte at offset `o` is
    /// `TABLE[(o + i * 7919) % len]`, so a lost, duplicated or misplaced chunk (of any size
    /// below the table's) is a mismatch, and both sides compare whole slices.
    fn table() -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..1_048_573)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// 64 streams (`RVERBS_STREAM_CONC_N`), 1 MB each (`RVERBS_STREAM_CONC_MB`), all on one
    /// current-thread tokio runtime (`RVERBS_STREAM_CONC_WORKERS`: that many workers of a
    /// multi-thread one instead), connected all at once: a writer task and a reader task per
    /// stream, odd write and read sizes, every byte checked at the reader; prints the set-up
    /// and total times. The 10 MB each is 640 MB at the 3.5–5.5 MB/s that 64 streams
    /// reach in the emulated guest (rxe's per-packet work; docs/perf.md, "Many streams at
    /// once"): minutes, so the suite runs 1 MB.
    #[test]
    #[cfg_attr(
        not(rverbs_vm),
        ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
    )]
    fn tokio_64_streams_on_one_runtime_byte_checked() {
        let n: usize = std::env::var("RVERBS_STREAM_CONC_N").map_or(64, |v| v.parse().unwrap());
        let mb: usize = std::env::var("RVERBS_STREAM_CONC_MB").map_or(1, |v| v.parse().unwrap());
        let total = mb * 1_000_000;
        let table = std::sync::Arc::new(table());
        let l = RdmaListener::bind(at(7730)).unwrap();
        let acc = thread::spawn(move || {
            (0..n)
                .map(|_| l.accept().unwrap())
                .collect::<Vec<(RdmaStream, SocketAddr)>>()
        });
        let workers: usize =
            std::env::var("RVERBS_STREAM_CONC_WORKERS").map_or(0, |v| v.parse().unwrap());
        let rt = if workers == 0 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .unwrap()
        };
        let t0 = Instant::now();
        let got: Vec<usize> = rt.block_on(async {
            // All connects at once (each on tokio's blocking pool); the listener accepts
            // them in whatever order they come, so each server is paired with its client by
            // address.
            let connects: Vec<_> = (0..n)
                .map(|_| {
                    tokio::spawn(async {
                        AsyncRdmaStream::connect(at(7730), &StreamOptions::default()).await
                    })
                })
                .collect();
            let mut clients = Vec::new();
            for c in connects {
                clients.push(c.await.unwrap().unwrap());
            }
            let mut accepted = acc.join().unwrap();
            let servers: Vec<RdmaStream> = clients
                .iter()
                .map(|c| {
                    let me = c.local_addr().unwrap();
                    let k = accepted.iter().position(|(_, from)| *from == me).unwrap();
                    accepted.swap_remove(k).0
                })
                .collect();
            let connected = t0.elapsed();
            let mut tasks = Vec::new();
            for (i, (c, s)) in clients.into_iter().zip(servers).enumerate() {
                let s = AsyncRdmaStream::from_std(s).unwrap();
                let (cr, mut cw) = c.into_split();
                let (mut sr, sw) = s.into_split();
                let t = table.clone();
                let w = tokio::spawn(async move {
                    let (mut off, mut k) = (0usize, i);
                    while off < total {
                        k = (k * 31 + 17) % 65_521 + 1;
                        let at = (off + i * 7919) % t.len();
                        let len = k.min(total - off).min(t.len() - at);
                        cw.write_all(&t[at..at + len]).await.unwrap();
                        off += len;
                    }
                    cw.shutdown().await.unwrap();
                    // Both halves live until the reader is done.
                    (cr, cw)
                });
                let t = table.clone();
                let r = tokio::spawn(async move {
                    let mut b = vec![0u8; 50_000];
                    let (mut off, mut k) = (0usize, i + 3);
                    loop {
                        k = (k * 13 + 7) % 49_999 + 1;
                        let got = sr.read(&mut b[..k]).await.unwrap();
                        if got == 0 {
                            break;
                        }
                        let mut checked = 0;
                        while checked < got {
                            let at = (off + i * 7919) % t.len();
                            let len = (got - checked).min(t.len() - at);
                            assert!(
                                b[checked..checked + len] == t[at..at + len],
                                "stream {i}: bytes {off}..{} differ",
                                off + len
                            );
                            off += len;
                            checked += len;
                        }
                    }
                    (off, sr, sw)
                });
                tasks.push((w, r));
            }
            let mut got = Vec::new();
            for (w, r) in tasks {
                let (off, _sr, _sw) = r.await.unwrap();
                drop(w.await.unwrap());
                got.push(off);
            }
            eprintln!("{n} streams connected in {connected:?}");
            got
        });
        let took = t0.elapsed();
        eprintln!(
            "{n} streams x {mb} MB on one tokio runtime: {took:?} ({:.1} MB/s in all)",
            (n * total) as f64 / took.as_secs_f64() / 1e6
        );
        for (i, g) in got.iter().enumerate() {
            assert_eq!(*g, total, "stream {i} delivered {g} of {total} bytes");
        }
    }
}
