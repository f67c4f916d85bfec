//! The echo server and client of `stream_echo.rs`, on tokio: `AsyncRdmaListener` accepts with
//! `accept().await` as a `TcpListener` does, and `AsyncRdmaStream` is `AsyncRead + AsyncWrite`,
//! so `tokio::io::copy`, `into_split` and every tokio-based codec work on it as on a
//! `TcpStream`. The same bytes on the wire as the threaded version: mix
//! them freely.
//!
//! ```text
//! cargo run -p rverbs --example stream_echo_async -- server 10.10.0.1:7471
//! echo hello | cargo run -p rverbs --example stream_echo_async -- client 10.10.0.1:7471
//! ```
//!
//! `server ADDR N` serves `N` connections, then exits (as `crates/rverbs/tests/vm_examples.rs`
//! runs it).

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use rverbs::stream::tokio::{AsyncRdmaListener, AsyncRdmaStream};
use rverbs::stream::StreamOptions;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

async fn server(addr: SocketAddr, connections: Option<usize>) -> io::Result<()> {
    let mut listener = AsyncRdmaListener::bind(addr)?;
    eprintln!("echoing on {}", listener.local_addr()?);
    let mut tasks = JoinSet::new();
    for _ in 0..connections.unwrap_or(usize::MAX) {
        // The runtime goes on serving the connections it has while this waits (the rdma_cm
        // handshake runs on tokio's blocking pool); `accept` is cancel-safe, so it can also be
        // one branch of a `select!`.
        let (stream, peer) = listener.accept().await?;
        tasks.spawn(async move {
            // Each half in the hands of `copy`; our shutdown follows the client's.
            let (mut rd, mut wr) = stream.into_split();
            let echoed = tokio::io::copy(&mut rd, &mut wr).await;
            match (echoed, wr.shutdown().await) {
                (Ok(n), Ok(())) => eprintln!("{peer}: echoed {n} bytes"),
                (Err(e), _) | (_, Err(e)) => eprintln!("{peer}: {e}"),
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

async fn client(addr: SocketAddr) -> io::Result<()> {
    let stream = AsyncRdmaStream::connect(addr, &StreamOptions::default()).await?;
    let (mut rd, mut wr) = stream.into_split();
    // Standard input up, then our half-close; the echo down to standard output, until the
    // server's half-close. Both at once, on this task.
    let up = async {
        tokio::io::copy(&mut tokio::io::stdin(), &mut wr).await?;
        wr.shutdown().await
    };
    let down = async {
        let mut out = tokio::io::stdout();
        tokio::io::copy(&mut rd, &mut out).await?;
        out.flush().await
    };
    tokio::try_join!(up, down)?;
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream_echo_async: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    let usage =
        "usage: stream_echo_async server ADDR:PORT [CONNECTIONS] | stream_echo_async client ADDR:PORT";
    let (role, addr, rest) = match &args[..] {
        [role, addr, rest @ ..] => (role.as_str(), addr, rest),
        _ => return Err(bad(usage.into())),
    };
    let addr: SocketAddr = addr.parse().map_err(|e| bad(format!("{addr}: {e}")))?;
    match (role, rest) {
        ("server", []) => server(addr, None).await,
        ("server", [n]) => {
            let n = n.parse().map_err(|e| bad(format!("{n}: {e}")))?;
            server(addr, Some(n)).await
        }
        ("client", []) => client(addr).await,
        _ => Err(bad(usage.into())),
    }
}
