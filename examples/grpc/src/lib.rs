//! gRPC over RDMA: tonic on rverbs' tokio layer (`rverbs_stream::tokio`).
//!
//! tonic needs two things from a transport, and the stream's tokio layer has both:
//!
//! - **Server**: `Server::serve_with_incoming` takes a `Stream` of connections that are
//!   `AsyncRead + AsyncWrite + Connected`. [`AsyncRdmaListener::incoming`] is that stream;
//!   `Connected` is tonic's trait, so a newtype ([`RdmaIo`]) implements it (tonic's own
//!   implementations cover its own and tokio's types only). [`serve`] does it all.
//! - **Client**: `Endpoint::connect_with_connector` takes a tower service from a `Uri` to
//!   hyper's I/O traits: a `service_fn` that opens an [`AsyncRdmaStream`] and wraps it in
//!   hyper-util's `TokioIo` ([`connect`]). The endpoint's URI only names the `:authority`
//!   of the requests; where the connection goes is the connector's address.
//!
//! Nothing else changes: the generated client and server (`proto/echo.proto`, compiled by
//! `build.rs` without `protoc`) are the ones a TCP service uses. docs/stream.md ("gRPC with
//! tonic") walks through it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use hyper_util::rt::TokioIo;
use rverbs_stream::tokio::{AsyncRdmaListener, AsyncRdmaStream, Incoming};
use rverbs_stream::StreamOptions;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint, Server, Uri};
use tonic::{Request, Response, Status, Streaming};

/// The generated messages, client ([`pb::echo_client::EchoClient`]) and server
/// ([`pb::echo_server::EchoServer`]).
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("rverbs.echo");
}

use pb::echo_server::{Echo, EchoServer};
use pb::{EchoReply, EchoRequest, StreamRequest};

/// The largest message either side sends or accepts here: 32 MiB (tonic's default limit on
/// what it decodes is 4 MiB; the guest test sends 16 MiB).
pub const MAX_MESSAGE: usize = 32 << 20;

/// The bytes of message `seq` of a server stream: `size` bytes, each a function of `seq`
/// and its offset, so a reordered, duplicated or corrupted message does not check.
pub fn pattern(seq: u64, size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

/// An accepted RDMA stream as tonic's server takes it: `Connected` (the peer's address is
/// its connect info) besides `AsyncRead + AsyncWrite`.
#[derive(Debug)]
pub struct RdmaIo(pub AsyncRdmaStream);

impl Connected for RdmaIo {
    /// The peer's address, if the stream still knows it.
    type ConnectInfo = Option<SocketAddr>;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.peer_addr().ok()
    }
}

impl AsyncRead for RdmaIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RdmaIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// [`AsyncRdmaListener::incoming`] with each stream as an [`RdmaIo`].
#[derive(Debug)]
pub struct RdmaIncoming(pub Incoming);

impl Stream for RdmaIncoming {
    type Item = io::Result<RdmaIo>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.0)
            .poll_next(cx)
            .map(|o| o.map(|r| r.map(RdmaIo)))
    }
}

/// The Echo service with the message limits of this crate ([`MAX_MESSAGE`]).
pub fn echo_server() -> EchoServer<EchoService> {
    EchoServer::new(EchoService)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}

/// Serves the Echo service on `listener`'s connections until the listener fails for good
/// (it does not: an accept error is skipped by tonic and the listener goes on).
pub async fn serve(listener: AsyncRdmaListener) -> Result<(), tonic::transport::Error> {
    Server::builder()
        .serve_with_incoming(echo_server(), RdmaIncoming(listener.incoming()))
        .await
}

/// A channel whose connection is an [`AsyncRdmaStream`] to `addr` (made when the channel is
/// created, and again if it breaks and a call is made).
pub async fn connect(addr: SocketAddr) -> Result<Channel, tonic::transport::Error> {
    connect_with(addr, StreamOptions::default()).await
}

/// [`connect`] with the stream's options (buffer sizes, ...).
pub async fn connect_with(
    addr: SocketAddr,
    opts: StreamOptions,
) -> Result<Channel, tonic::transport::Error> {
    // Only the requests' `:authority` comes from this URI; the connector decides where to go.
    let endpoint = Endpoint::try_from(format!("http://{addr}"))?;
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| async move {
            AsyncRdmaStream::connect(addr, &opts)
                .await
                .map(TokioIo::new)
        }))
        .await
}

/// A client of `channel` with this crate's message limits.
pub fn echo_client(channel: Channel) -> pb::echo_client::EchoClient<Channel> {
    pb::echo_client::EchoClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE)
}

/// The service: see proto/echo.proto for what each call does.
#[derive(Debug, Default, Clone, Copy)]
pub struct EchoService;

/// A stream of a channel's items (what the streaming calls return).
#[derive(Debug)]
pub struct ReplyStream(mpsc::Receiver<Result<EchoReply, Status>>);

impl Stream for ReplyStream {
    type Item = Result<EchoReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

#[tonic::async_trait]
impl Echo for EchoService {
    async fn unary(&self, req: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        let EchoRequest { seq, payload } = req.into_inner();
        Ok(Response::new(EchoReply { seq, payload }))
    }

    type ServerStreamStream = ReplyStream;

    async fn server_stream(
        &self,
        req: Request<StreamRequest>,
    ) -> Result<Response<ReplyStream>, Status> {
        let StreamRequest {
            count,
            size,
            hold_open,
        } = req.into_inner();
        if size as usize > MAX_MESSAGE {
            return Err(Status::invalid_argument(format!(
                "size {size} is over the limit of {MAX_MESSAGE} bytes"
            )));
        }
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            for seq in 0..count {
                let reply = EchoReply {
                    seq,
                    payload: pattern(seq, size as usize),
                };
                if tx.send(Ok(reply)).await.is_err() {
                    return; // the client went away
                }
            }
            if hold_open {
                // Open until the call ends (the client drops it, or the connection dies).
                tx.closed().await;
            }
        });
        Ok(Response::new(ReplyStream(rx)))
    }

    async fn client_stream(
        &self,
        req: Request<Streaming<EchoRequest>>,
    ) -> Result<Response<EchoReply>, Status> {
        let mut input = req.into_inner();
        let mut seq = 0;
        let mut payload = Vec::new();
        while let Some(m) = input.message().await? {
            seq += 1;
            payload.extend_from_slice(&m.payload);
            if payload.len() > MAX_MESSAGE {
                return Err(Status::resource_exhausted(format!(
                    "the payloads add up to more than {MAX_MESSAGE} bytes"
                )));
            }
        }
        Ok(Response::new(EchoReply { seq, payload }))
    }

    type BidiStream = ReplyStream;

    async fn bidi(
        &self,
        req: Request<Streaming<EchoRequest>>,
    ) -> Result<Response<ReplyStream>, Status> {
        let mut input = req.into_inner();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let item = match input.message().await {
                    Ok(Some(EchoRequest { seq, payload })) => Ok(EchoReply { seq, payload }),
                    Ok(None) => return,
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.send(item).await.is_err() || failed {
                    return;
                }
            }
        });
        Ok(Response::new(ReplyStream(rx)))
    }
}
