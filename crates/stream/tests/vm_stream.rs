//! `RdmaStream` / `RdmaListener` on rxe (issue 24): every byte checked across sizes and odd
//! splits, half-close both ways, a peer killed mid-stream, connect to nobody, an unknown
//! rsockets version both ways, and interop with rdma-core's `rstream` both ways. Runs in the
//! VM (`cargo xtask test`); the interop tests need the host guest.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::Shutdown;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use rverbs_cm::{CmId, ConnParam, PortSpace};
use rverbs_cm::{Endpoint, EndpointAttr};
use rverbs_stream::{RdmaListener, RdmaStream, StreamOptions};

mod common;
use common::{addr_a, at, conn_data, pattern};

#[path = "../examples/rstream.rs"]
#[allow(dead_code)]
mod rstream_role;

/// A listener on `port` and a connected pair (client, server).
fn pair(port: u16, opts: &StreamOptions) -> (RdmaStream, RdmaStream) {
    let l = RdmaListener::bind_with(at(port), opts).unwrap();
    let o = *opts;
    let c = thread::spawn(move || RdmaStream::connect_with(at(port), &o).unwrap());
    let (s, from) = l.accept().unwrap();
    let c = c.join().unwrap();
    assert_eq!(from, c.local_addr().unwrap());
    assert_eq!(s.local_addr().unwrap(), at(port));
    assert_eq!(c.peer_addr().unwrap(), at(port));
    (c, s)
}

/// 1 B to 4 MiB, each sent by the client, checked and echoed by the server, checked again.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_sizes_echoed_byte_checked() {
    let (mut c, mut s) = pair(7601, &StreamOptions::default());
    let sizes = [1usize, 2, 63, 64, 65, 4095, 4096, 65_537, 1 << 20, 4 << 20];
    let server = thread::spawn(move || {
        for &n in &sizes {
            let mut b = vec![0u8; n];
            s.read_exact(&mut b).unwrap();
            assert_eq!(b, pattern(n as u64, n), "server got {n} bytes wrong");
            s.write_all(&b).unwrap();
        }
        // EOF after the client's shutdown.
        let mut one = [0u8; 1];
        assert_eq!(s.read(&mut one).unwrap(), 0);
    });
    for &n in &sizes {
        let p = pattern(n as u64, n);
        c.write_all(&p).unwrap();
        let mut b = vec![0u8; n];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b, p, "echo of {n} bytes wrong");
    }
    c.shutdown(Shutdown::Write).unwrap();
    server.join().unwrap();
}

/// Rounds of the concurrency tests below, and bytes each way per round.
const ROUNDS: usize = 20;
const ROUND_BYTES: usize = 2 << 20;

/// A stream read by one thread while another writes to it (`try_clone`), on both sides: the
/// client's writer sends, its reader takes the echo; the server's reader hands chunks to its
/// writer. Every thread waits at once for its direction (ring space, credits, data), so one
/// thread's progress keeps taking the completions and events the other waits for — the
/// missed wake-up this once hung on. 20 rounds of 2 MiB each way, every byte checked; a
/// 20 s timeout on every wait turns a hang into a failure.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_read_and_write_at_once_from_two_threads() {
    let l = RdmaListener::bind(at(7613)).unwrap();
    let t0 = Instant::now();
    for round in 0..ROUNDS {
        let client = thread::spawn(|| RdmaStream::connect(at(7613)).unwrap());
        let (s, _) = l.accept().unwrap();
        let c = client.join().unwrap();
        for x in [&c, &s] {
            x.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            x.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        }
        // Server: reader thread -> channel -> writer thread.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(4);
        let mut sr = s.try_clone().unwrap();
        let s_reader = thread::spawn(move || {
            let mut b = vec![0u8; 50_000];
            loop {
                let n = sr.read(&mut b).expect("server read");
                if n == 0 {
                    break;
                }
                tx.send(b[..n].to_vec()).unwrap();
            }
        });
        let mut sw = s;
        let s_writer = thread::spawn(move || {
            for chunk in rx {
                sw.write_all(&chunk).expect("server write");
            }
            sw.shutdown(Shutdown::Write).unwrap();
        });
        let data = pattern(round as u64 + 1, ROUND_BYTES);
        let mut cw = c.try_clone().unwrap();
        let d2 = data.clone();
        let c_writer = thread::spawn(move || {
            for part in d2.chunks(30_000) {
                cw.write_all(part).expect("client write");
            }
            cw.shutdown(Shutdown::Write).unwrap();
        });
        let mut cr = c;
        let mut got = Vec::with_capacity(ROUND_BYTES);
        cr.read_to_end(&mut got).expect("client read");
        c_writer.join().unwrap();
        s_reader.join().unwrap();
        s_writer.join().unwrap();
        assert_eq!(got.len(), data.len(), "round {round}: echo length");
        assert!(got == data, "round {round}: echo differs");
    }
    eprintln!(
        "{ROUNDS} rounds of {ROUND_BYTES} bytes each way, two threads a side: {:?}",
        t0.elapsed()
    );
}

/// Small rings (4 KiB each side, 16 credits) and 1-byte and odd-sized writes: the ring
/// wraps hundreds of times, reads take odd sizes; every byte arrives once, in order.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_one_byte_writes_and_ring_wrap() {
    let small = StreamOptions {
        send_buffer: 4096,
        recv_buffer: 4096,
        send_queue: 16,
        recv_queue: 16,
        inline: 64,
        iomap_entries: 0,
    };
    let (mut c, mut s) = pair(7602, &small);
    let data = pattern(7, 300_000);
    let d2 = data.clone();
    let w = thread::spawn(move || {
        let mut at = 0;
        // 2,000 single bytes, then odd sizes up to 5,000 (more than a ring).
        for _ in 0..2000 {
            c.write_all(&d2[at..at + 1]).unwrap();
            at += 1;
        }
        let mut k = 1usize;
        while at < d2.len() {
            k = (k * 7 + 3) % 5001 + 1;
            let n = k.min(d2.len() - at);
            c.write_all(&d2[at..at + n]).unwrap();
            at += n;
        }
        c
    });
    let mut got = Vec::with_capacity(data.len());
    let mut k = 5usize;
    while got.len() < data.len() {
        k = (k * 13 + 1) % 3001 + 1;
        let mut b = vec![0u8; k];
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "early EOF after {} bytes", got.len());
        got.extend_from_slice(&b[..n]);
    }
    assert!(got == data, "bytes differ");
    drop(w.join().unwrap());
}

/// `write_vectored` gathers three slices (one empty) into the stream; `read_vectored`
/// scatters them into two buffers.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_vectored() {
    let (mut c, mut s) = pair(7603, &StreamOptions::default());
    let a = pattern(1, 1000);
    let b = pattern(2, 70_000);
    // More than the half of the receive ring published at first: the reader must run
    // meanwhile (it publishes the other half), so the writer has a thread of its own.
    let (a2, b2) = (a.clone(), b.clone());
    let w = thread::spawn(move || {
        let n = c
            .write_vectored(&[IoSlice::new(&a2), IoSlice::new(&[]), IoSlice::new(&b2)])
            .unwrap();
        assert_eq!(n, 71_000);
        c
    });
    let mut x = vec![0u8; 1500];
    let mut y = vec![0u8; 69_500];
    let mut got = 0;
    while got < 71_000 {
        let (x1, y1) = if got < 1500 {
            (&mut x[got..], &mut y[..])
        } else {
            (&mut x[1500..], &mut y[got - 1500..])
        };
        got += s
            .read_vectored(&mut [IoSliceMut::new(x1), IoSliceMut::new(y1)])
            .unwrap();
    }
    let mut all = x;
    all.extend_from_slice(&y);
    let mut want = a;
    want.extend_from_slice(&b);
    assert!(all == want);
    drop(w.join().unwrap());
}

/// This thread's read and write system calls so far (`syscr`, `syscw` of
/// /proc/thread-self/io: every `read(2)` and `write(2)`, failed ones included; reading the
/// file counts too: see `rw_calls_since`).
fn thread_rw_calls() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
    let field = |name: &str| -> u64 {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /proc/thread-self/io: {io}"))
    };
    (field("syscr:"), field("syscw:"))
}

/// The reads and writes since `(r, w)` (an earlier `thread_rw_calls`) less `overhead`
/// (what two `thread_rw_calls` in a row count: the reads of the file itself).
fn rw_calls_since((r, w): (u64, u64), overhead: (u64, u64)) -> (u64, u64) {
    let (r1, w1) = thread_rw_calls();
    (
        (r1 - r).saturating_sub(overhead.0),
        (w1 - w).saturating_sub(overhead.1),
    )
}

/// Non-blocking `recv_vectored` and `send_vectored` (the C API's `MSG_DONTWAIT`) make no
/// system call when nothing is to be read (issue 37): 200 `WouldBlock` reads of an idle
/// stream read or write no fd, nor do 100 small non-blocking writes but for their posts
/// (rxe's doorbell, a `write(2)` each); the rdma_cm channel is read on every 16384th call
/// at most. Every byte then arrives. The old code read the completion channel (a `read(2)`)
/// and the rdma_cm channel (a `write(2)` command) on every non-blocking call, and armed.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_nonblocking_calls_make_no_system_call() {
    let (mut c, mut s) = pair(7614, &StreamOptions::default());
    // Settled: one blocking exchange each way.
    c.write_all(b"x").unwrap();
    let mut one = [0u8; 1];
    s.read_exact(&mut one).unwrap();
    s.write_all(b"y").unwrap();
    c.read_exact(&mut one).unwrap();

    let a = thread_rw_calls();
    let b = thread_rw_calls();
    let overhead = (b.0 - a.0, b.1 - a.1);

    let start = thread_rw_calls();
    let mut b = [0u8; 64];
    for _ in 0..200 {
        let e = s
            .recv_vectored(&mut [IoSliceMut::new(&mut b)], true)
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
    }
    let (r, w) = rw_calls_since(start, overhead);
    assert!(
        r <= 2 && w <= 2,
        "200 non-blocking reads of an idle stream made {r} read(2) and {w} write(2) calls \
         (less {overhead:?} for reading /proc/thread-self/io)"
    );

    let msg = pattern(14, 8);
    let start = thread_rw_calls();
    let mut sent = 0usize;
    for _ in 0..100 {
        match c.send_vectored(&[IoSlice::new(&msg)], true) {
            Ok(n) => {
                assert_eq!(n, msg.len());
                sent += 1;
            }
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
        }
    }
    let (r, w) = rw_calls_since(start, overhead);
    assert!(sent > 0, "no non-blocking write went out");
    // Each post rings rxe's doorbell (one write); credit updates the peer sends are read
    // from the CQ, not from an fd.
    assert!(
        r <= 2 && w <= sent as u64 + 2,
        "{sent} non-blocking writes made {r} read(2) and {w} write(2) calls"
    );
    let mut got = vec![0u8; sent * msg.len()];
    s.read_exact(&mut got).unwrap();
    assert!(got.chunks(msg.len()).all(|m| m == msg.as_slice()));
}

/// `set_poll_time` (issue 37): whole microseconds, shared by the stream's handles, at most a
/// second (more is refused, naming the value, and changes nothing); the default is 50 µs
/// unless `RVERBS_STREAM_POLL_US` says otherwise. With 0 and with the longest budget, 200
/// round trips of 64 bytes arrive, every byte checked (the client's budget changes between
/// the rounds, the echo's stays a second), and the budget is what decides
/// whether the client's blocked reads sleep, counted by the `read(2)` of the completion
/// event that every sleep ends with (arm, `epoll_wait`, that read; `syscr` of
/// /proc/thread-self/io): with 0 a read that finds nothing sleeps at once, and a reply needs
/// the peer's reply first, so the 200 reads make at least 100 such calls (290–330
/// measured in a TCG guest); with a second each reply is caught while polling, so at most 20
/// (0 measured; a reply slower than a second only in a starved guest). A budget that were
/// ignored (any one fixed budget in both rounds) fails one of the two counts: the same
/// replies cannot be mostly slower than it in the first round and nearly all faster in the
/// second (a fixed 50 µs: 329 and 319 calls; a fixed second: 0 and 0; docs/measurements.md).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_poll_time_set_shared_refused_and_both_extremes_work() {
    let (c, s) = pair(7617, &StreamOptions::default());
    if std::env::var_os("RVERBS_STREAM_POLL_US").is_none() {
        assert_eq!(c.poll_time().unwrap(), Duration::from_micros(50));
    }
    let c2 = c.try_clone().unwrap();
    c.set_poll_time(Duration::from_nanos(1_500)).unwrap();
    assert_eq!(
        c2.poll_time().unwrap(),
        Duration::from_micros(1),
        "rounded down, shared"
    );
    c.set_poll_time(Duration::from_secs(1)).unwrap();
    assert_eq!(c2.poll_time().unwrap(), Duration::from_secs(1));
    let e = c2
        .set_poll_time(Duration::from_secs(1) + Duration::from_nanos(1))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("poll time 1.000000001s"), "{e}");
    assert_eq!(c.poll_time().unwrap(), Duration::from_secs(1), "unchanged");

    let a = thread_rw_calls();
    let b = thread_rw_calls();
    let overhead = (b.0 - a.0, b.1 - a.1);
    let (mut c, mut s) = (c, s);
    let mut sleeps = Vec::new();
    for (round, poll) in [(0u64, Duration::ZERO), (1, Duration::from_secs(1))] {
        // Only the client's budget changes: the echo polls for up to a second in both rounds,
        // so its replies come as fast in both, and a client budget that were ignored (any
        // one fixed budget) would count the same sleeps in both.
        c.set_poll_time(poll).unwrap();
        s.set_poll_time(Duration::from_secs(1)).unwrap();
        let echo = thread::spawn(move || {
            let mut b = [0u8; 64];
            for _ in 0..200 {
                s.read_exact(&mut b).unwrap();
                s.write_all(&b).unwrap();
            }
            s
        });
        let start = thread_rw_calls();
        for i in 0..200u64 {
            let p = pattern(round * 1000 + i, 64);
            c.write_all(&p).unwrap();
            let mut b = [0u8; 64];
            c.read_exact(&mut b).unwrap();
            assert_eq!(
                b.as_slice(),
                p.as_slice(),
                "poll time {poll:?}: round trip {i}"
            );
        }
        sleeps.push(rw_calls_since(start, overhead).0);
        s = echo.join().unwrap();
    }
    let (at_zero, at_second) = (sleeps[0], sleeps[1]);
    eprintln!("200 round trips: {at_zero} event reads at poll time 0, {at_second} at 1 s");
    assert!(
        at_zero >= 100,
        "at poll time 0 the 200 blocked reads made only {at_zero} read(2) calls ({at_second} \
         at 1 s): the budget of 0 did not make them sleep"
    );
    assert!(
        at_second <= 20,
        "at poll time 1 s the 200 blocked reads made {at_second} read(2) calls ({at_zero} at \
         0): the budget did not make them poll"
    );
}

/// Half-close each way: after `shutdown(Write)` the peer reads our data then EOF and can
/// still send to us; our writes are refused.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_half_close_each_way() {
    for (port, client_closes) in [(7604u16, true), (7605, false)] {
        let (c, s) = pair(port, &StreamOptions::default());
        let (mut closer, mut other) = if client_closes { (c, s) } else { (s, c) };
        closer.write_all(b"last words").unwrap();
        closer.shutdown(Shutdown::Write).unwrap();
        let e = closer.write(b"more").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        let mut got = Vec::new();
        other.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last words");
        // The other direction still works.
        other.write_all(b"reply").unwrap();
        let mut r = [0u8; 5];
        closer.read_exact(&mut r).unwrap();
        assert_eq!(&r, b"reply");
        other.shutdown(Shutdown::Write).unwrap();
        assert_eq!(closer.read(&mut r).unwrap(), 0);
    }
}

/// The child side of `stream_peer_killed_mid_stream` (does nothing unless asked).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_child_peer_process() {
    let Ok(port) = std::env::var("RVERBS_STREAM_CHILD_PORT") else {
        return;
    };
    let mut c = RdmaStream::connect(at(port.parse().unwrap())).unwrap();
    c.write_all(b"hello").unwrap();
    thread::sleep(Duration::from_secs(60));
}

/// Runs [`stream_child_peer_process`] as a separate process (this test binary) connecting to
/// `port`, so a test can kill it with SIGKILL.
fn spawn_child_peer(port: u16) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "stream_child_peer_process",
            "--include-ignored",
            "--nocapture",
        ])
        .env("RVERBS_STREAM_CHILD_PORT", port.to_string())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// The peer process is killed (SIGKILL) while we are blocked in `read`: the read returns
/// (EOF or an error) within a second, and a write then fails.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_peer_killed_mid_stream() {
    let l = RdmaListener::bind(at(7606)).unwrap();
    let mut child = spawn_child_peer(7606);
    let (mut s, _) = l.accept().unwrap();
    let mut b = [0u8; 5];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"hello");
    let pid = child.id();
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        let killed_at = Instant::now();
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        killed_at
    });
    let r = s.read(&mut b);
    let returned = Instant::now();
    let killed_at = killer.join().unwrap();
    let _ = child.wait();
    let took = returned.duration_since(killed_at);
    assert!(matches!(r, Ok(0) | Err(_)), "read after the kill: {r:?}");
    // That the read returns at all is the point (a hang is the stage's timeout); how soon
    // depends on the machine's load (1.19 s seen on 6.12 with two busy processes beside
    // the run), so it is reported, not bounded.
    eprintln!("the blocked read returned {took:?} after the kill");
    let e = s.write_all(&[0u8; 100]).unwrap_err();
    eprintln!("write after the peer died: {e}");
}

/// Nobody listens: connect fails (the CM's reject) quickly.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_connect_to_nobody() {
    let t = Instant::now();
    let e = RdmaStream::connect(at(7607)).unwrap_err();
    eprintln!("connect to nobody: {e} after {:?}", t.elapsed());
    assert!(e.to_string().contains("connect to"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(30));
}

/// Options out of range are refused before anything is created, naming the option.
#[test]
fn stream_options_refused() {
    for (o, what) in [
        (
            StreamOptions {
                send_buffer: 100,
                ..Default::default()
            },
            "send_buffer",
        ),
        (
            StreamOptions {
                recv_buffer: 5001,
                ..Default::default()
            },
            "recv_buffer",
        ),
        (
            StreamOptions {
                send_queue: 8,
                ..Default::default()
            },
            "send_queue",
        ),
        (
            StreamOptions {
                recv_queue: 70_000,
                ..Default::default()
            },
            "recv_queue",
        ),
        (
            StreamOptions {
                iomap_entries: 32513,
                ..Default::default()
            },
            "iomap_entries",
        ),
    ] {
        let e = RdmaListener::bind_with(at(7608), &o).unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
        let e = RdmaStream::connect_with(at(7608), &o).unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
    }
    let s = StreamOptions::default();
    assert!(s.check().is_ok());
}

fn raw_attr() -> EndpointAttr {
    EndpointAttr::default()
}

/// A client speaking rsockets version 2: our listener rejects it, `accept` says why, the
/// client sees the rejection, and the listener then accepts a good client.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_unknown_version_refused_by_listener() {
    let l = RdmaListener::bind(at(7609)).unwrap();
    let c = thread::spawn(|| {
        let id = CmId::create(None, PortSpace::TCP).unwrap();
        id.resolve_addr(None, at(7609), Duration::from_secs(2))
            .unwrap();
        id.resolve_route(Duration::from_secs(2)).unwrap();
        let ep = Endpoint::create(id, &raw_attr()).unwrap();
        ep.connect(&ConnParam {
            private_data: conn_data(2),
            ..Default::default()
        })
    });
    let e = l.accept().unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("version 2"), "{e}");
    let ce = c.join().unwrap().unwrap_err();
    eprintln!("the version-2 client: {ce}");
    let g = thread::spawn(|| RdmaStream::connect(at(7609)).unwrap());
    let (mut s, _) = l.accept().unwrap();
    let mut g = g.join().unwrap();
    g.write_all(b"ok").unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).unwrap();
}

/// A listener answering with version 2: our connect fails with `InvalidData` naming it.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_unknown_version_refused_by_connect() {
    let lid = CmId::create(None, PortSpace::TCP).unwrap();
    lid.bind(at(7610)).unwrap();
    lid.listen(0).unwrap();
    let srv = thread::spawn(move || {
        let id = lid.get_request().unwrap();
        let ep = Endpoint::create(id, &raw_attr()).unwrap();
        let r = ep.accept(&ConnParam {
            private_data: conn_data(2),
            ..Default::default()
        });
        eprintln!("the version-2 listener's accept: {r:?}");
        thread::sleep(Duration::from_millis(500));
    });
    let e = RdmaStream::connect(at(7610)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
    assert!(e.to_string().contains("version 2"), "{e}");
    srv.join().unwrap();
}

// --- interop with rdma-core's rstream ------------------------------------------------------

/// rdma-core's rstream; missing only in the minimal guest (which skips `interop` tests).
fn rstream() -> Option<&'static str> {
    let found = ["/usr/bin/rstream", "/usr/local/bin/rstream"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        let guest = std::env::var("RVERBS_GUEST").unwrap_or_default();
        assert_eq!(
            guest, "minimal",
            "rstream (rdmacm-utils) is missing in the {guest:?} guest"
        );
        eprintln!("skipped: rstream not in this guest");
    }
    found
}

fn finish(c: std::process::Child) -> (Option<i32>, String) {
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

/// The custom tests the suite runs with rstream (size, iterations, count): its default
/// table takes over 5 minutes a direction under emulation (run by hand: see
/// `examples/rstream.rs`); these cover inline, ring-wrapping and multi-half transfers.
const CUSTOM: &[(usize, usize, usize)] = &[
    (64, 200, 1),
    (4096, 10, 20),
    (100_000, 2, 10),
    (1 << 20, 1, 5),
];

fn cfg(connect: bool, port: u16, custom: (usize, usize, usize)) -> rstream_role::Config {
    rstream_role::Config {
        connect: connect.then(|| at(port)),
        bind: at(port),
        all_sizes: false,
        custom: Some(custom),
        verify: true,
        zero_copy: false,
    }
}

fn tool_args(t: (usize, usize, usize)) -> Vec<String> {
    vec![
        "-S".into(),
        t.0.to_string(),
        "-I".into(),
        t.1.to_string(),
        "-C".into(),
        t.2.to_string(),
        "-T".into(),
        "v".into(),
    ]
}

/// rdma-core's `rstream -b` serves, ours connects: custom tests of 64 B to 1 MiB, every
/// byte checked on both sides (`-T v`).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_stream_rstream_server_rust_client() {
    let Some(tool) = rstream() else { return };
    let a = addr_a().to_string();
    for (k, &t) in CUSTOM.iter().enumerate() {
        let port = 7611 + 2 * k as u16;
        let srv = Command::new("timeout")
            .args(["100", tool, "-b", &a, "-p", &port.to_string()])
            .args(tool_args(t))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut out = Vec::new();
            let r = rstream_role::run(&cfg(true, port, t), &mut out);
            let _ = tx.send((r, String::from_utf8_lossy(&out).into_owned()));
        });
        // rstream ends within its `timeout`; our client must end with it.
        let (code, text) = finish(srv);
        let (r, ours) = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| {
                panic!("our client did not finish; rstream server ({code:?}): {text}")
            });
        eprintln!("{t:?} ours:\n{ours}\nrstream:\n{text}");
        r.unwrap();
        assert_eq!(code, Some(0), "rstream server: {text}");
        assert!(
            text.contains("custom") && !text.contains("failed"),
            "{text}"
        );
    }
}

/// Ours serves, rdma-core's `rstream -s` connects, the same tests and checks.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_stream_rust_server_rstream_client() {
    let Some(tool) = rstream() else { return };
    let a = addr_a().to_string();
    for (k, &t) in CUSTOM.iter().enumerate() {
        let port = 7612 + 2 * k as u16;
        let c = cfg(false, port, t);
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let mut out = Vec::new();
            let r = rstream_role::run(&c, &mut out);
            let _ = tx.send((r, String::from_utf8_lossy(&out).into_owned()));
        });
        thread::sleep(Duration::from_millis(500));
        let cl = Command::new("timeout")
            .args(["100", tool, "-s", &a, "-p", &port.to_string()])
            .args(tool_args(t))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (code, text) = finish(cl);
        // Our server waits in accept if the client never came: bounded here.
        let (r, ours) = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| {
                panic!("our server did not finish; rstream client ({code:?}): {text}")
            });
        eprintln!("{t:?} ours:\n{ours}\nrstream:\n{text}");
        r.unwrap();
        assert_eq!(code, Some(0), "rstream client: {text}");
        assert!(
            text.contains("custom") && !text.contains("failed"),
            "{text}"
        );
    }
}

// --- tokio (feature `tokio`) ----------------------------------------------------------------

#[cfg(feature = "tokio")]
mod on_tokio {
    use super::*;
    use rverbs_stream::tokio::AsyncRdmaStream;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Eight streams on one current-thread runtime, each split into a writer task and a
    /// reader task, 300 KB each way per stream, every byte checked.
    #[test]
    #[cfg_attr(
        not(rverbs_vm),
        ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
    )]
    fn tokio_split_streams_concurrently() {
        const N: u16 = 8;
        let l = RdmaListener::bind(at(7630)).unwrap();
        let acc = thread::spawn(move || {
            (0..N)
                .map(|_| l.accept().unwrap().0)
                .collect::<Vec<RdmaStream>>()
        });
        rt().block_on(async {
            let mut clients = Vec::new();
            for _ in 0..N {
                clients.push(
                    AsyncRdmaStream::connect(at(7630), &StreamOptions::default())
                        .await
                        .unwrap(),
                );
            }
            let servers = acc.join().unwrap();
            let mut tasks = Vec::new();
            for (i, (c, s)) in clients.into_iter().zip(servers).enumerate() {
                let s = AsyncRdmaStream::from_std(s).unwrap();
                let data = pattern(i as u64 + 100, 300_000);
                let (mut cr, mut cw) = c.into_split();
                let (mut sr, mut sw) = s.into_split();
                // Server: echo what it reads.
                tasks.push(tokio::spawn(async move {
                    let mut b = vec![0u8; 7000];
                    loop {
                        let n = sr.read(&mut b).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        sw.write_all(&b[..n]).await.unwrap();
                    }
                    sw.shutdown().await.unwrap();
                }));
                let d2 = data.clone();
                tasks.push(tokio::spawn(async move {
                    cw.write_all(&d2).await.unwrap();
                    cw.shutdown().await.unwrap();
                }));
                tasks.push(tokio::spawn(async move {
                    let mut got = Vec::new();
                    cr.read_to_end(&mut got).await.unwrap();
                    assert!(got == data, "stream {i}: echo differs");
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
    }

    /// The split echo both ways on a two-worker runtime, so that a stream's two halves run
    /// at the same time on different threads and each may consume what the other waits for:
    /// 20 rounds of 2 MiB each way, every byte checked, each round under a 30 s timeout.
    #[test]
    #[cfg_attr(
        not(rverbs_vm),
        ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
    )]
    fn tokio_split_halves_wait_at_once_repeatedly() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let l = RdmaListener::bind(at(7632)).unwrap();
        let t0 = Instant::now();
        for round in 0..ROUNDS {
            let client = thread::spawn(|| RdmaStream::connect(at(7632)).unwrap());
            let (s, _) = l.accept().unwrap();
            let c = client.join().unwrap();
            let data = pattern(round as u64 + 500, ROUND_BYTES);
            let r = rt.block_on(async move {
                let (mut sr, mut sw) = AsyncRdmaStream::from_std(s).unwrap().into_split();
                let (mut cr, mut cw) = AsyncRdmaStream::from_std(c).unwrap().into_split();
                let echo = tokio::spawn(async move {
                    let mut b = vec![0u8; 40_000];
                    loop {
                        let n = sr.read(&mut b).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        sw.write_all(&b[..n]).await.unwrap();
                    }
                    sw.shutdown().await.unwrap();
                });
                let d2 = data.clone();
                let writer = tokio::spawn(async move {
                    for part in d2.chunks(30_000) {
                        cw.write_all(part).await.unwrap();
                    }
                    cw.shutdown().await.unwrap();
                });
                let reader = tokio::spawn(async move {
                    let mut got = Vec::with_capacity(ROUND_BYTES);
                    cr.read_to_end(&mut got).await.unwrap();
                    got
                });
                let all = async {
                    writer.await.unwrap();
                    echo.await.unwrap();
                    reader.await.unwrap()
                };
                tokio::time::timeout(Duration::from_secs(30), all)
                    .await
                    .map(|got| got == data)
            });
            assert_eq!(r, Ok(true), "round {round}: stalled (Err) or echo differs");
        }
        eprintln!(
            "{ROUNDS} rounds of {ROUND_BYTES} bytes each way, split halves on 2 workers: {:?}",
            t0.elapsed()
        );
    }

    /// Write futures dropped mid-way (a 1 ms timer wins the `select!` while the peer is
    /// slow to read): the reader still gets every byte exactly once, in order.
    #[test]
    #[cfg_attr(
        not(rverbs_vm),
        ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
    )]
    fn tokio_dropped_write_futures_lose_and_duplicate_nothing() {
        let small = StreamOptions {
            send_buffer: 8192,
            recv_buffer: 8192,
            ..StreamOptions::default()
        };
        let (c, mut s) = pair(7631, &small);
        let data = pattern(77, 200_000);
        let want = data.clone();
        let reader = thread::spawn(move || {
            let mut got = Vec::new();
            let mut b = vec![0u8; 3000];
            loop {
                thread::sleep(Duration::from_millis(3));
                let n = s.read(&mut b).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&b[..n]);
            }
            got
        });
        let dropped = rt().block_on(async move {
            let mut c = AsyncRdmaStream::from_std(c).unwrap();
            let (mut off, mut dropped) = (0, 0u32);
            while off < data.len() {
                tokio::select! {
                    r = c.write(&data[off..]) => off += r.unwrap(),
                    _ = tokio::time::sleep(Duration::from_millis(1)) => dropped += 1,
                }
            }
            c.shutdown().await.unwrap();
            dropped
        });
        let got = reader.join().unwrap();
        eprintln!("{dropped} write futures dropped");
        assert!(
            dropped > 0,
            "no write future was dropped: the test proved nothing"
        );
        assert_eq!(got.len(), want.len());
        assert!(got == want, "bytes differ");
    }

    /// Polls of a tokio read on an idle stream make no system call once the first has armed
    /// the stream (issue 37): a try reads the stream's channels only when its fd fired, and
    /// does not poll the CQ for a while. The old code read both channels (a `read(2)` and a
    /// `write(2)` command) and polled for up to 50 µs on every poll. Then a message arrives
    /// and wakes the read through the fd.
    #[test]
    #[cfg_attr(
        not(rverbs_vm),
        ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
    )]
    fn tokio_idle_read_polls_make_no_system_call() {
        use std::future::Future;
        let (mut c, s) = pair(7615, &StreamOptions::default());
        rt().block_on(async {
            let mut s = AsyncRdmaStream::from_std(s).unwrap();
            let mut b = [0u8; 64];
            let mut read = std::pin::pin!(s.read(&mut b));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            // The first poll arms the stream (rxe: a write(2)).
            assert!(read.as_mut().poll(&mut cx).is_pending());
            let a = thread_rw_calls();
            let o = thread_rw_calls();
            let overhead = (o.0 - a.0, o.1 - a.1);
            let start = thread_rw_calls();
            for _ in 0..200 {
                assert!(read.as_mut().poll(&mut cx).is_pending());
            }
            let (r, w) = rw_calls_since(start, overhead);
            assert!(
                r <= 2 && w <= 2,
                "200 polls of a read on an idle stream made {r} read(2) and {w} write(2) calls"
            );
            c.write_all(b"hello").unwrap();
            let n = read.await.unwrap();
            assert_eq!(&b[..n], &b"hello"[..n]);
            assert!(n > 0);
        });
    }

    /// The peer process is killed (SIGKILL) while a tokio read is pending: no completion
    /// comes, only the rdma_cm channel's DISCONNECTED, which fires the fd; the read returns
    /// (EOF or an error).
    #[test]
    #[cfg_attr(
        not(rverbs_vm),
        ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
    )]
    fn tokio_read_ends_when_peer_killed() {
        let l = RdmaListener::bind(at(7616)).unwrap();
        let mut child = spawn_child_peer(7616);
        let (s, _) = l.accept().unwrap();
        let pid = child.id();
        let r = rt().block_on(async {
            let mut s = AsyncRdmaStream::from_std(s).unwrap();
            let mut b = [0u8; 5];
            s.read_exact(&mut b).await.unwrap();
            assert_eq!(&b, b"hello");
            let killer = thread::spawn(move || {
                thread::sleep(Duration::from_millis(300));
                Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status()
                    .unwrap();
            });
            let r = s.read(&mut b).await;
            killer.join().unwrap();
            r
        });
        let _ = child.wait();
        assert!(matches!(r, Ok(0) | Err(_)), "read after the kill: {r:?}");
    }
}
