//! HTTP/1.1 over RDMA: a hyper server and client on `AsyncRdmaStream`. hyper runs over any
//! `AsyncRead + AsyncWrite` connection (through hyper-util's `TokioIo` adapter), so a stack
//! written for TCP gets an RDMA transport by changing how its connections are made — nothing
//! in the request handling knows.
//!
//! ```text
//! cargo run -p rverbs --example stream_http -- server 10.10.0.1:8080
//! cargo run -p rverbs --example stream_http -- client 10.10.0.1:8080 GET /
//! cargo run -p rverbs --example stream_http -- client 10.10.0.1:8080 POST /echo < file
//! ```
//!
//! The server answers `GET /` with a greeting, `POST /echo` with the request's body, and
//! anything else with 404. The client prints the status line on standard error (`< 200 OK`)
//! and the body on standard output; a POST sends standard input. `server ADDR N` serves `N`
//! connections, then exits (as `crates/rverbs/tests/vm_examples.rs` runs it).

use std::io;
use std::net::SocketAddr;
use std::process::ExitCode;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{header, Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rverbs::stream::tokio::{AsyncRdmaListener, AsyncRdmaStream};
use rverbs::stream::StreamOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

/// The whole application: the same function a TCP server would have.
async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let response = match (req.method(), req.uri().path()) {
        (&Method::GET, "/") => Response::new(Full::new(Bytes::from_static(b"hello over RDMA\n"))),
        (&Method::POST, "/echo") => {
            let body = req.into_body().collect().await?.to_bytes();
            Response::new(Full::new(body))
        }
        _ => {
            let mut r = Response::new(Full::new(Bytes::from_static(b"not found\n")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    };
    Ok(response)
}

async fn server(addr: SocketAddr, connections: Option<usize>) -> io::Result<()> {
    let mut listener = AsyncRdmaListener::bind(addr)?;
    eprintln!("serving HTTP/1.1 on {addr}");
    let mut tasks = JoinSet::new();
    for _ in 0..connections.unwrap_or(usize::MAX) {
        let (stream, peer) = listener.accept().await?;
        let io = TokioIo::new(stream);
        tasks.spawn(async move {
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(io, service_fn(handle));
            if let Err(e) = conn.await {
                eprintln!("{peer}: {e}");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

async fn client(addr: SocketAddr, method: Method, path: &str) -> Result<(), BoxError> {
    let body = if method == Method::POST {
        let mut body = Vec::new();
        tokio::io::stdin().read_to_end(&mut body).await?;
        body
    } else {
        Vec::new()
    };

    let stream = AsyncRdmaStream::connect(addr, &StreamOptions::default()).await?;
    // hyper's client connection: `sender` sends requests, `conn` drives the stream.
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(conn);

    let req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, addr.to_string())
        .body(Full::new(Bytes::from(body)))?;
    let res = sender.send_request(req).await?;
    eprintln!("< {}", res.status());
    let body = res.into_body().collect().await?.to_bytes();
    let mut out = tokio::io::stdout();
    out.write_all(&body).await?;
    out.flush().await?;

    // Done: dropping the sender lets the connection end, which closes the stream.
    drop(sender);
    driver.await??;
    Ok(())
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stream_http: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: stream_http server ADDR:PORT [CONNECTIONS] | \
                 stream_http client ADDR:PORT GET|POST PATH";
    let (role, addr, rest) = match &args[..] {
        [role, addr, rest @ ..] => (role.as_str(), addr, rest),
        _ => return Err(usage.into()),
    };
    let addr: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    match (role, rest) {
        ("server", []) => Ok(server(addr, None).await?),
        ("server", [n]) => {
            let n = n.parse().map_err(|e| format!("{n}: {e}"))?;
            Ok(server(addr, Some(n)).await?)
        }
        ("client", [method, path]) => {
            let method = match method.as_str() {
                "GET" => Method::GET,
                "POST" => Method::POST,
                m => return Err(format!("{m}: GET or POST").into()),
            };
            client(addr, method, path).await
        }
        _ => Err(usage.into()),
    }
}
