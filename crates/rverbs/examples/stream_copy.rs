//! Copies a file over RDMA, like rdma-core's `rcopy`: the client sends a file, the server
//! writes it to a path and confirms. Both ends use `rverbs::stream`, a plain
//! `std::io::{Read, Write}` byte stream — the same code as over a `TcpStream`, with the
//! bytes moved by RDMA WRITEs into registered rings (rsockets' protocol).
//!
//! ```text
//! cargo run -p rverbs --example stream_copy -- server 10.10.0.1:7471 /tmp/received.iso
//! cargo run -p rverbs --example stream_copy -- client 10.10.0.1:7471 ./big.iso
//! ```
//!
//! The server takes one file and exits. On the stream: the file's length (8 bytes,
//! big-endian), its bytes, then the server's answer, the length it wrote (once the file is
//! on disk). `crates/rverbs/tests/vm_examples.rs` runs both sides in the test guests.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Instant;

use rverbs::stream::{RdmaListener, RdmaStream};

/// The size of the reads and writes on both ends.
const CHUNK: usize = 64 * 1024;

fn server(addr: SocketAddr, path: &str) -> io::Result<()> {
    let listener = RdmaListener::bind(addr)?;
    eprintln!("waiting for a file on {addr}");
    let (mut stream, peer) = listener.accept()?;

    let mut len = [0u8; 8];
    stream.read_exact(&mut len)?;
    let len = u64::from_be_bytes(len);

    // Exactly `len` bytes from the stream into the file, 64 KiB at a time (each `read` of
    // the stream is one copy out of its receive ring).
    let mut file = BufWriter::with_capacity(CHUNK, File::create(path).map_err(|e| named(path, e))?);
    let mut body = BufReader::with_capacity(CHUNK, (&mut stream).take(len));
    let got = io::copy(&mut body, &mut file)?;
    if got != len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{peer} announced {len} bytes and sent {got}"),
        ));
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;

    stream.write_all(&got.to_be_bytes())?;
    eprintln!("received {got} bytes from {peer} into {path}");
    Ok(())
}

fn client(addr: SocketAddr, path: &str) -> io::Result<()> {
    let file = File::open(path).map_err(|e| named(path, e))?;
    let len = file.metadata()?.len();
    // 64 KiB writes: fewer, larger RDMA WRITEs than `io::copy`'s default 8 KiB.
    let mut file = BufReader::with_capacity(CHUNK, file);
    let start = Instant::now();
    let mut stream = RdmaStream::connect(addr)?;

    stream.write_all(&len.to_be_bytes())?;
    let sent = io::copy(&mut file, &mut stream)?;
    if sent != len {
        return Err(io::Error::other(format!(
            "{path} changed while sent ({len} bytes, then {sent})"
        )));
    }

    // The server's answer: what it wrote to its disk.
    let mut ack = [0u8; 8];
    stream.read_exact(&mut ack)?;
    if u64::from_be_bytes(ack) != len {
        return Err(io::Error::other("the server wrote another length"));
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "sent {len} bytes in {secs:.3} s ({:.1} MB/s)",
        len as f64 / secs / 1e6
    );
    Ok(())
}

/// `e`, with the file it is about.
fn named(path: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{path}: {e}"))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream_copy: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "usage: stream_copy server ADDR:PORT DEST | stream_copy client ADDR:PORT FILE",
        )
    };
    let [role, addr, path] = &args[..] else {
        return Err(usage());
    };
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: {e}")))?;
    match role.as_str() {
        "server" => server(addr, path),
        "client" => client(addr, path),
        _ => Err(usage()),
    }
}
