//! The Echo service (proto/echo.proto) over RDMA: tonic's server on an `AsyncRdmaListener`.
//!
//!     cargo run -p rverbs-grpc-example --example grpc_server -- 10.10.0.1:7471
//!
//! Needs an RDMA device with that address (rxe works: `rverbs` CLI or `rdma link add`).

use std::net::SocketAddr;

use rverbs_stream::tokio::AsyncRdmaListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .ok_or("usage: grpc_server ADDR:PORT")?
        .parse()?;
    let listener = AsyncRdmaListener::bind(addr)?;
    eprintln!("grpc_server: listening on {}", listener.local_addr()?);
    rverbs_grpc_example::serve(listener).await?;
    Ok(())
}
