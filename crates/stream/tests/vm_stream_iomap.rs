//! rsockets' iomap on `RdmaStream` (issue 24): buffers mapped with `iomap`, written by the
//! peer's `iowrite`, every byte checked both ways and across the send ring's wrap; every
//! error a user can reach (bad lengths and offsets, a peer without an iomap table, a full
//! table, writes outside the peer's mappings, a shut-down stream, a mapping dropped before
//! the peer's write). Runs in the VM (`cargo xtask test`); the C API and rdma-core's
//! `riostream` are crates/capi/tests/vm_rsocket.rs's.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::thread;
use std::time::Duration;

use rverbs_stream::{RdmaListener, RdmaStream, StreamOptions};

mod common;
use common::{at, pattern};

fn with_iomap(entries: u16) -> StreamOptions {
    StreamOptions {
        iomap_entries: entries,
        ..Default::default()
    }
}

/// A connected pair (client, server), each with its own options.
fn pair(port: u16, client: StreamOptions, server: StreamOptions) -> (RdmaStream, RdmaStream) {
    let l = RdmaListener::bind_with(at(port), &server).unwrap();
    let c = thread::spawn(move || RdmaStream::connect_with(at(port), &client).unwrap());
    let (s, _) = l.accept().unwrap();
    (c.join().unwrap(), s)
}

/// Sends a one-byte message and waits for the peer's: whatever either side posted before
/// (mapping announcements, direct writes) has arrived once this returns on both.
fn handshake(a: &mut RdmaStream, b: &mut RdmaStream) {
    let mut one = [0u8; 1];
    a.write_all(b"a").unwrap();
    b.read_exact(&mut one).unwrap();
    b.write_all(b"b").unwrap();
    a.read_exact(&mut one).unwrap();
}

fn kind(r: std::io::Result<impl std::fmt::Debug>) -> (ErrorKind, String) {
    let e = r.unwrap_err();
    (e.kind(), e.to_string())
}

/// Each side maps a buffer; the other writes it with `iowrite` at odd offsets and sizes (1 B
/// to the whole 1 MiB mapping, more than the 128 KiB send ring, so transfers wrap the ring and
/// wait for its space), then a message; the mapping's bytes are then checked. A dropped
/// mapping's slot is taken by the next one, at another offset.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_iomap_rust_to_rust_byte_checked() {
    let (mut c, mut s) = pair(7640, with_iomap(2), with_iomap(2));
    const MAP: usize = 1 << 20;
    let sm = s.iomap(MAP, 0x10_0000).unwrap();
    assert_eq!(
        (sm.offset(), sm.len(), sm.is_empty()),
        (0x10_0000, MAP, false)
    );
    let cm = c.iomap(64 * 1024, 0).unwrap();
    handshake(&mut c, &mut s);
    // Client → server: pieces that add up to the whole mapping, checked after each round.
    let mut want = vec![0u8; MAP];
    let mut at = 0usize;
    for (i, n) in [1usize, 63, 64, 65, 4095, 4096, 65_537, 200_000, 300_000]
        .into_iter()
        .enumerate()
    {
        let p = pattern(i as u64 + 1, n);
        assert_eq!(c.iowrite(0x10_0000 + at as u64, &p).unwrap(), n);
        want[at..at + n].copy_from_slice(&p);
        at += n;
    }
    let rest = pattern(99, MAP - at);
    assert_eq!(c.iowrite(0x10_0000 + at as u64, &rest).unwrap(), rest.len());
    want[at..].copy_from_slice(&rest);
    handshake(&mut c, &mut s);
    assert!(
        sm.to_vec() == want,
        "server mapping differs from what was written"
    );
    let mut head = [0u8; 64];
    sm.read_at(0, &mut head).unwrap();
    assert_eq!(&head[..], &want[..64]);
    // The whole mapping in one call.
    let all = pattern(7, MAP);
    assert_eq!(c.iowrite(0x10_0000, &all).unwrap(), MAP);
    handshake(&mut c, &mut s);
    assert!(sm.to_vec() == all, "whole-mapping write differs");
    // Server → client, with a marker the client set locally and the write replaces.
    cm.write_at(64 * 1024 - 1, &[0xee]).unwrap();
    let p = pattern(3, 64 * 1024);
    assert_eq!(s.iowrite(0, &p).unwrap(), p.len());
    handshake(&mut s, &mut c);
    assert!(cm.to_vec() == p, "client mapping differs");
    // Unmapped: the slot is free for a mapping at another offset (the table has 2).
    drop(sm);
    let sm2 = s.iomap(4096, 0x9000_0000).unwrap();
    let sm3 = s.iomap(4096, 0x9100_0000).unwrap();
    handshake(&mut s, &mut c);
    let p = pattern(5, 4096);
    c.iowrite(0x9100_0000, &p).unwrap();
    c.iowrite(0x9000_0000, &p[..100]).unwrap();
    handshake(&mut c, &mut s);
    assert!(sm3.to_vec() == p);
    assert_eq!(&sm2.to_vec()[..100], &p[..100]);
    // Data still flows both ways afterwards.
    c.write_all(b"end").unwrap();
    let mut b = [0u8; 3];
    s.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"end");
}

/// Every user-reachable error of `iomap`, `iowrite` and the mappings, each naming what was
/// wrong; the stream keeps working after each refusal.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_iomap_errors_name_the_fault() {
    // The client has a table of 1 entry, the server none.
    let (mut c, mut s) = pair(7641, with_iomap(1), StreamOptions::default());
    // Arguments: empty, longer than an entry can describe, overflowing offsets.
    let (k, m) = kind(s.iomap(0, 0));
    assert!(k == ErrorKind::InvalidInput && m.contains("len 0"), "{m}");
    let (k, m) = kind(s.iomap(u32::MAX as usize + 1, 0));
    assert!(k == ErrorKind::InvalidInput && m.contains("at most"), "{m}");
    let (k, m) = kind(s.iomap(16, u64::MAX - 8));
    assert!(
        k == ErrorKind::InvalidInput && m.contains("overflows"),
        "{m}"
    );
    // Our peer (the server) has no table: the client cannot map.
    let (k, m) = kind(c.iomap(16, 0));
    assert!(
        k == ErrorKind::Unsupported && m.contains("no iomap table"),
        "{m}"
    );
    // The server maps into the client's only entry; a second mapping finds it full.
    let sm = s.iomap(4096, 0x1000).unwrap();
    let (k, m) = kind(s.iomap(16, 0));
    assert!(
        k == ErrorKind::OutOfMemory && m.contains("all 1 entries"),
        "{m}"
    );
    // The server announced no table: it has nothing to write into.
    let (k, m) = kind(s.iowrite(0, b"x"));
    assert!(
        k == ErrorKind::InvalidInput && m.contains("no iomap table"),
        "{m}"
    );
    // Offsets no mapping covers: refused.
    handshake(&mut s, &mut c);
    let (k, m) = kind(c.iowrite(0xfff, b"x"));
    assert!(
        k == ErrorKind::InvalidInput && m.contains("no mapping"),
        "{m}"
    );
    let (k, m) = kind(c.iowrite(0x2000, b"x"));
    assert!(
        k == ErrorKind::InvalidInput && m.contains("no mapping"),
        "{m}"
    );
    // Running past the mapping's end.
    let (k, m) = kind(c.iowrite(0x1ff0, &[1u8; 17]));
    assert!(
        k == ErrorKind::InvalidInput && m.contains("covers only"),
        "{m}"
    );
    assert_eq!(c.iowrite(0x1ff0, &[1u8; 16]).unwrap(), 16);
    assert_eq!(c.iowrite(0x1000, &[]).unwrap(), 0);
    handshake(&mut c, &mut s);
    let mut tail = [0u8; 16];
    sm.read_at(4080, &mut tail).unwrap();
    assert_eq!(tail, [1u8; 16]);
    // Copies outside the mapping.
    let (k, m) = kind(sm.read_at(4090, &mut [0u8; 7]));
    assert!(k == ErrorKind::InvalidInput && m.contains("outside"), "{m}");
    let (k, _) = kind(sm.write_at(usize::MAX, &[0u8; 2]));
    assert_eq!(k, ErrorKind::InvalidInput);
    // Dropping the mapping frees the entry.
    drop(sm);
    let _sm = s.iomap(64, 0).unwrap();
    handshake(&mut s, &mut c);
    // Shut down for writing: no mapping, no write.
    s.shutdown(Shutdown::Write).unwrap();
    let (k, m) = kind(s.iomap(64, 0));
    assert!(
        k == ErrorKind::NotConnected && m.contains("shut down"),
        "{m}"
    );
    c.shutdown(Shutdown::Write).unwrap();
    let (k, _) = kind(c.iowrite(0, b"x"));
    assert_eq!(k, ErrorKind::BrokenPipe);
}

/// The server drops its mapping (deregistering the buffer) while the client still has the
/// entry: the client's next write into it fails at the server's device, never reaching the
/// freed memory, and the client's stream ends with that error.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_iomap_write_after_unmap_fails_at_the_device() {
    let (mut c, mut s) = pair(7642, with_iomap(1), with_iomap(1));
    let sm = s.iomap(8192, 0).unwrap();
    handshake(&mut s, &mut c);
    c.iowrite(0, &pattern(1, 8192)).unwrap();
    handshake(&mut c, &mut s);
    assert!(sm.to_vec() == pattern(1, 8192));
    drop(sm);
    // The write is posted (the entry is still in our table: rsockets' riounmap tells the
    // peer nothing) and then fails: the stream reports the failure. The server sends
    // nothing, so a blocking read ends with the failure the stream records when the write's
    // completion comes back (the read timeout only guards against a hang).
    c.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(c.iowrite(0, &[7u8; 1024]).unwrap(), 1024);
    c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut one = [0u8; 1];
    let e = match c.read(&mut one) {
        Err(e) => e,
        Ok(n) => panic!("the write into a dropped mapping did not fail: a read gave {n} bytes"),
    };
    eprintln!("after a write into a dropped mapping: {e}");
    assert!(
        e.to_string().contains("failed") || e.kind() == ErrorKind::BrokenPipe,
        "{e}"
    );
    // The ended stream neither maps nor writes directly any more.
    let (_, m) = kind(c.iomap(64, 0));
    assert!(m.contains("failed") || m.contains("disconnected"), "{m}");
    let (_, m) = kind(c.iowrite(0, b"x"));
    assert!(m.contains("failed") || m.contains("disconnected"), "{m}");
}

/// A non-blocking stream's `iomap` does not wait: its announcement goes out with the next
/// progress (here a `write`), before that write's data.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_iomap_nonblocking_announcement_precedes_data() {
    let (mut c, mut s) = pair(7643, with_iomap(4), with_iomap(4));
    s.set_nonblocking(true).unwrap();
    let maps: Vec<_> = (0..4u64).map(|i| s.iomap(256, i << 20).unwrap()).collect();
    let mut n = 0;
    while n == 0 {
        match s.write(b"m") {
            Ok(k) => n = k,
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
    let mut one = [0u8; 1];
    c.read_exact(&mut one).unwrap();
    for (i, m) in maps.iter().enumerate() {
        let p = pattern(i as u64, 256);
        c.iowrite(m.offset(), &p).unwrap();
    }
    c.write_all(b"d").unwrap();
    s.set_nonblocking(false).unwrap();
    s.read_exact(&mut one).unwrap();
    for (i, m) in maps.iter().enumerate() {
        assert!(m.to_vec() == pattern(i as u64, 256), "mapping {i}");
    }
}
