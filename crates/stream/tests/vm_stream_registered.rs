//! `RdmaStream::write_registered` (issue 33): zero-copy writes from the caller's
//! registration, every byte checked — against another `RdmaStream` (interleaved with ordinary
//! writes, across the ring halves the peer publishes), against rdma-core's own rsockets
//! (a Python `ctypes` echo over the system's `librdmacm.so.1`: the receiver cannot tell),
//! and every error a caller can reach. Runs in the VM (`cargo xtask test`); the `interop`
//! test needs the host guest.

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::process::{Command, Stdio};
use std::thread;

use rverbs_stream::{RdmaListener, RdmaStream, StreamOptions};
use rverbs_uverbs::mr::{AccessFlags, Mr};

mod common;
use common::{at, pattern};

/// A connected pair (client, server).
fn pair(port: u16) -> (RdmaStream, RdmaStream) {
    let l = RdmaListener::bind_with(at(port), &StreamOptions::default()).unwrap();
    let c = thread::spawn(move || RdmaStream::connect(at(port)).unwrap());
    let (s, _) = l.accept().unwrap();
    (c.join().unwrap(), s)
}

fn region(s: &RdmaStream, bytes: Vec<u8>) -> Mr<Vec<u8>> {
    Mr::register(s.pd(), bytes, AccessFlags::empty()).unwrap()
}

/// Sizes from 1 B to 4 MiB (more than the peer's 512 KiB receive ring, so transfers wait for
/// its credits and wrap its halves), each sent from a registration at an odd offset and
/// followed by an ordinary write; the region is overwritten as soon as the call returns (the
/// device is done with it then), and the server checks every byte of both.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_write_registered_byte_checked() {
    let (c, mut s) = pair(7660);
    let sizes = [1usize, 63, 64, 4095, 65_536, 65_537, 1 << 20, (4 << 20) + 3];
    let server = thread::spawn(move || {
        for (i, &n) in sizes.iter().enumerate() {
            let mut b = vec![0u8; n];
            s.read_exact(&mut b).unwrap();
            assert!(
                b == pattern(i as u64 + 1, n),
                "registered write {i} ({n} B) wrong"
            );
            let mut tail = [0u8; 7];
            s.read_exact(&mut tail).unwrap();
            assert_eq!(&tail, b"between", "ordinary write after {i}");
        }
        let mut one = [0u8; 1];
        assert_eq!(s.read(&mut one).unwrap(), 0, "EOF after the shutdown");
    });
    let mut w = c.clone();
    let mut mr = region(&c, vec![0u8; (4 << 20) + 16]);
    for (i, &n) in sizes.iter().enumerate() {
        let off = 5 + i;
        mr.write_at(off, &pattern(i as u64 + 1, n));
        assert_eq!(w.write_registered(&mut mr, off..off + n).unwrap(), n);
        // Returned: the device is done, so overwriting cannot reach the peer.
        mr.fill(0..mr.len(), 0xee);
        w.write_all(b"between").unwrap();
    }
    assert_eq!(w.write_registered(&mut mr, 3..3).unwrap(), 0, "empty range");
    w.shutdown(Shutdown::Write).unwrap();
    server.join().unwrap();
}

/// What a caller can get wrong: a range outside the region, a region of another protection
/// domain, a stream shut down for writing.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn stream_write_registered_errors() {
    let (c, s) = pair(7661);
    let mut mr = region(&c, vec![1u8; 4096]);
    #[allow(clippy::reversed_empty_ranges)]
    for r in [0..4097, 4096..4097, 9..8] {
        let e = c.write_registered(&mut mr, r.clone()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{r:?}: {e}");
        assert!(e.to_string().contains("not inside the region"), "{e}");
    }
    // A PD of our own on the same device: not the stream's.
    let other = rverbs_uverbs::pd::Pd::alloc(c.pd().context()).unwrap();
    let mut foreign = Mr::register(&other, vec![2u8; 64], AccessFlags::empty()).unwrap();
    let e = c.write_registered(&mut foreign, 0..64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("protection domain"), "{e}");
    c.shutdown(Shutdown::Write).unwrap();
    let e = c.write_registered(&mut mr, 0..64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BrokenPipe, "{e}");
    drop(s);
}

/// rdma-core's rsockets as the receiver: a Python `ctypes` program over the system's
/// `librdmacm.so.1` accepts, echoes every byte back with `rrecv`/`rsend`, and closes at
/// EOF. We send 1 MiB + 1 from a registration (and a small one), read the echo with ordinary
/// reads and compare every byte.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_stream_write_registered_rdma_core_echo() {
    const LIB: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";
    assert!(
        std::path::Path::new(LIB).exists(),
        "{LIB}: rdma-core's librdmacm (the host guest has it)"
    );
    let port = 7662u16;
    let addr = at(port).ip().to_string();
    let script = format!(
        r#"
import ctypes, socket, struct, sys
l = ctypes.CDLL("{LIB}", use_errno=True)
l.rrecv.restype = ctypes.c_ssize_t
l.rsend.restype = ctypes.c_ssize_t
l.rrecv.argtypes = l.rsend.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
def ok(r, what):
    if r < 0:
        sys.exit(what + ": " + str(ctypes.get_errno()))
    return r
fd = ok(l.rsocket(socket.AF_INET, socket.SOCK_STREAM, 0), "rsocket")
sa = struct.pack("=H", socket.AF_INET) + struct.pack("!H", {port}) + socket.inet_aton("{addr}") + bytes(8)
ok(l.rbind(fd, sa, len(sa)), "rbind")
ok(l.rlisten(fd, 1), "rlisten")
print("listening", flush=True)
c = ok(l.raccept(fd, None, None), "raccept")
buf = ctypes.create_string_buffer(65536)
total = 0
while True:
    n = ok(l.rrecv(c, buf, 65536, 0), "rrecv")
    if n == 0:
        break
    total += n
    at = 0
    while at < n:
        at += ok(l.rsend(c, ctypes.byref(buf, at), n - at, 0), "rsend")
l.rclose(c)
l.rclose(fd)
print("echoed", total, flush=True)
"#
    );
    let mut py = Command::new("python3")
        .args(["-c", &script])
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (the host guest has it)");
    let mut out = py.stdout.take().unwrap();
    let mut line = [0u8; 10];
    out.read_exact(&mut line).unwrap();
    assert_eq!(&line, b"listening\n");
    let c = RdmaStream::connect(at(port)).unwrap();
    let sizes = [(1usize << 20) + 1, 100];
    let total: usize = sizes.iter().sum();
    let mut reader = c.clone();
    let echo = thread::spawn(move || {
        let mut b = vec![0u8; total];
        reader.read_exact(&mut b).unwrap();
        let mut one = [0u8; 1];
        assert_eq!(reader.read(&mut one).unwrap(), 0, "EOF after the echo");
        b
    });
    let mut sent = Vec::new();
    let mut mr = region(&c, vec![0u8; (1 << 20) + 64]);
    for (i, &n) in sizes.iter().enumerate() {
        let p = pattern(40 + i as u64, n);
        mr.write_at(3, &p);
        assert_eq!(c.write_registered(&mut mr, 3..3 + n).unwrap(), n);
        sent.extend_from_slice(&p);
    }
    c.shutdown(Shutdown::Write).unwrap();
    let got = echo.join().unwrap();
    assert!(got == sent, "rdma-core's rsockets echoed other bytes");
    let o = py.wait_with_output().unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(
        o.status.success() && rest.contains(&format!("echoed {total}")),
        "python: {:?} {rest} {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}
