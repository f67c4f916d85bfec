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

use std::io::{self, Write};
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
    // A second handle: a thread sends standard input while this one prints what comes back,
    // so the stream is written and read at once (and no chunk size matters).
    let mut sender = stream.try_clone()?;
    let send = thread::spawn(move || -> io::Result<u64> {
        let n = io::copy(&mut io::stdin().lock(), &mut sender)?;
        // Our half-close: the server sees EOF, closes its side, and we read EOF.
        sender.shutdown(Shutdown::Write)?;
        Ok(n)
    });
    let mut out = io::stdout().lock();
    let got = io::copy(&mut stream, &mut out)?;
    out.flush()?;
    let sent = send
        .join()
        .map_err(|_| io::Error::other("the sending thread panicked"))??;
    if got != sent {
        return Err(io::Error::other(format!(
            "sent {sent} bytes, {got} came back"
        )));
    }
    Ok(())
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
