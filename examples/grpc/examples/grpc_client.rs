//! A client of the Echo service (proto/echo.proto) over RDMA: tonic's channel with an
//! `AsyncRdmaStream` connector. One call of each kind, replies checked.
//!
//!     cargo run -p rverbs-grpc-example --example grpc_client -- 10.10.0.1:7471

use std::net::SocketAddr;

use rverbs_grpc_example::pb::{EchoRequest, StreamRequest};
use rverbs_grpc_example::{connect, echo_client, pattern};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .ok_or("usage: grpc_client ADDR:PORT")?
        .parse()?;
    let mut client = echo_client(connect(addr).await?);

    let reply = client
        .unary(EchoRequest {
            seq: 1,
            payload: b"hello over RDMA".to_vec(),
        })
        .await?
        .into_inner();
    if reply.payload != b"hello over RDMA" {
        return Err("unary: wrong reply".into());
    }
    println!("unary: {}", String::from_utf8_lossy(&reply.payload));

    let mut replies = client
        .server_stream(StreamRequest {
            count: 5,
            size: 64,
            hold_open: false,
        })
        .await?
        .into_inner();
    let mut n = 0;
    while let Some(r) = replies.message().await? {
        if r.seq != n || r.payload != pattern(n, 64) {
            return Err(format!("server stream: message {n} is wrong").into());
        }
        n += 1;
    }
    println!("server stream: {n} messages");

    let requests: Vec<EchoRequest> = (0..5)
        .map(|seq| EchoRequest {
            seq,
            payload: vec![b'a' + seq as u8],
        })
        .collect();
    let iter = Iter(requests.clone().into_iter());
    let reply = client.client_stream(iter).await?.into_inner();
    if reply.seq != 5 || reply.payload != b"abcde" {
        return Err("client stream: wrong reply".into());
    }
    println!(
        "client stream: {} messages, {}",
        reply.seq,
        String::from_utf8_lossy(&reply.payload)
    );

    let mut echoes = client.bidi(Iter(requests.into_iter())).await?.into_inner();
    let mut n = 0;
    while let Some(r) = echoes.message().await? {
        if r.seq != n {
            return Err(format!("bidi: reply {n} is wrong").into());
        }
        n += 1;
    }
    if n != 5 {
        return Err(format!("bidi: {n} echoes, not 5").into());
    }
    println!("bidi: {n} echoes");
    Ok(())
}

/// An iterator as a `Stream` (every item ready at once).
struct Iter<I>(I);

impl<I: Iterator + Unpin> futures_core::Stream for Iter<I> {
    type Item = I::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<I::Item>> {
        std::task::Poll::Ready(self.0.next())
    }
}
