//! An echo server and its client over `rverbs::stream`, with threads and `std::io`.
//! The async version (tokio) is `stream_echo_async.rs`; both speak the same bytes, so either
//! client works with either server (and with rsocket programs such as rdma-core's `rstream`).
//!
//! ```text
//! cargo run -p rverbs --example stream_echo -- server 10.10.0.1:7471      # serves until killed
//! echo hello | cargo run -p rverbs --example stream_echo -- client 10.10.0.1:7471
//! ```
//!
//! The client sends its standard input and prints what comes back. `server ADDR N` serves
//! `N` connections, then exits (as `crates/rverbs/tests/vm_examples.rs` runs it).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::process::ExitCode;
use std::thread;

use rverbs::stream::{RdmaListener, RdmaStream};

/// Sends back everything, then closes our side when the client closes its side.
fn echo(mut stream: RdmaStream) -> io::Result<u64> {
    // A second handle on the same stream: one reads, the other writes.
    let mut reader = stream.try_clone()?;
    let n = io::copy(&mut reader, &mut stream)?;
    stream.shutdown(Shutdown::Write)?;
    Ok(n)
}

fn server(addr: SocketAddr, connections: Option<usize>) -> io::Result<()> {
    let listener = RdmaListener::bind(addr)?;
    eprintln!("echoing on {addr}");
    let mut threads = Vec::new();
    for _ in 0..connections.unwrap_or(usize::MAX) {
        let (stream, peer) = listener.accept()?;
        threads.push(thread::spawn(move || match echo(stream) {
            Ok(n) => eprintln!("{peer}: echoed {n} bytes"),
            Err(e) => eprintln!("{peer}: {e}"),
        }));
    }
    for t in threads {
        t.join().expect("an echo thread panicked");
    }
    Ok(())
}

fn client(addr: SocketAddr) -> io::Result<()> {
    let mut stream = RdmaStream::connect(addr)?;
    let (mut input, mut out) = (io::stdin().lock(), io::stdout().lock());
    // One chunk at a time: send it, read its echo, print it. A chunk is smaller than the
    // stream's rings (128 KiB by default), so the server's echo never waits for us. (To send
    // and receive at once, see the tokio version's `into_split`.)
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        stream.write_all(&buf[..n])?;
        stream.read_exact(&mut buf[..n])?;
        out.write_all(&buf[..n])?;
    }
    // Our half-close: the server sees EOF, closes its side, and we read EOF.
    stream.shutdown(Shutdown::Write)?;
    let rest = io::copy(&mut stream, &mut out)?;
    if rest != 0 {
        return Err(io::Error::other(format!(
            "{rest} bytes more than were sent"
        )));
    }
    out.flush()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream_echo: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let usage = "usage: stream_echo server ADDR:PORT [CONNECTIONS] | stream_echo client ADDR:PORT";
    let (role, addr, rest) = match &args[..] {
        [role, addr, rest @ ..] => (role.as_str(), addr, rest),
        _ => return Err(bad(usage.into())),
    };
    let addr: SocketAddr = addr.parse().map_err(|e| bad(format!("{addr}: {e}")))?;
    match (role, rest) {
        ("server", []) => server(addr, None),
        ("server", [n]) => server(addr, Some(n.parse().map_err(|e| bad(format!("{n}: {e}")))?)),
        ("client", []) => client(addr),
        _ => Err(bad(usage.into())),
    }
}
