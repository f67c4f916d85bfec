//! Unary gRPC calls over RDMA against the same calls over TCP, side by side in one run (not a
//! test: ci/bench-grpc.sh runs it in a guest and docs/perf.md has the table).
//!
//!     grpc_bench ADDR [CALLS] [ROUNDS] [SIZE]
//!
//! Serves the Echo service on ADDR twice, on an `AsyncRdmaListener` (port 7480) and on a tokio
//! `TcpListener` (port 7481, `TCP_NODELAY` on both ends), in this process; then, each round,
//! for each transport (the order alternating by round) opens a channel, makes 100 calls to warm
//! it up and times CALLS (default 2000) sequential unary calls of SIZE (default 64) payload
//! bytes, each reply checked. Prints one line per run and the medians: calls/s and µs per call.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use hyper_util::rt::TokioIo;
use rverbs_grpc_example::pb::EchoRequest;
use rverbs_grpc_example::{connect, echo_client, echo_server, pattern};
use rverbs_stream::tokio::AsyncRdmaListener;
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::{Channel, Endpoint, Server, Uri};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: grpc_bench ADDR [CALLS] [ROUNDS] [SIZE]";
    let ip: std::net::IpAddr = args.next().ok_or(usage)?.parse()?;
    let calls: u64 = args.next().map_or(Ok(2000), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let size: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let rdma = SocketAddr::new(ip, 7480);
    let tcp = SocketAddr::new(ip, 7481);

    let listener = AsyncRdmaListener::bind(rdma)?;
    tokio::spawn(rverbs_grpc_example::serve(listener));
    let tcp_listener = TcpListener::bind(tcp).await?;
    tokio::spawn(Server::builder().serve_with_incoming(echo_server(), TcpIncoming(tcp_listener)));

    println!("grpc_bench: {calls} unary calls of {size} B per run, {rounds} rounds, server {ip}");
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let channel = if which == 0 {
                connect(rdma).await?
            } else {
                connect_tcp(tcp).await?
            };
            let mut client = echo_client(channel);
            let payload = pattern(7, size);
            let mut t = Instant::now();
            for seq in 0..100 + calls {
                if seq == 100 {
                    t = Instant::now(); // the first 100 calls warm up
                }
                let req = EchoRequest {
                    seq,
                    payload: payload.clone(),
                };
                let r = client.unary(req).await?.into_inner();
                if r.seq != seq || r.payload != payload {
                    return Err(format!("call {seq}: wrong reply").into());
                }
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
            let name = ["rdma", "tcp"][which];
            println!(
                "round {}: {name}: {:.0} calls/s, {us:.1} us/call",
                round + 1,
                1e6 / us
            );
            times[which].push(us);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let (r, t) = (med(&mut times[0]), med(&mut times[1]));
    println!("median: rdma {:.0} calls/s, {r:.1} us/call", 1e6 / r);
    println!("median: tcp {:.0} calls/s, {t:.1} us/call", 1e6 / t);
    println!("rdma/tcp time per call: {:.2}", r / t);
    Ok(())
}

/// A channel over TCP made the same way as the RDMA one (a connector), `TCP_NODELAY` on.
async fn connect_tcp(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    Endpoint::try_from(format!("http://{addr}"))?
        .connect_with_connector(tower::service_fn(move |_: Uri| async move {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok::<_, io::Error>(TokioIo::new(s))
        }))
        .await
}

/// A TCP listener's connections, `TCP_NODELAY` on (tonic's `tcp_nodelay` setting does not
/// apply to `serve_with_incoming`).
struct TcpIncoming(TcpListener);

impl futures_core::Stream for TcpIncoming {
    type Item = io::Result<TcpStream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0
            .poll_accept(cx)
            .map(|r| Some(r.and_then(|(s, _)| s.set_nodelay(true).map(|()| s))))
    }
}
