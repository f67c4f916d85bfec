//! [`AsyncRdmaListener`]: `accept().await` on tokio.
//!
//! The listening rdma_cm id's event channel is registered with tokio (a duplicate of its fd,
//! readable when a connection request is queued). A poll takes every queued request at once
//! (reading the kernel's queue to its end, as tokio's edge-triggered readiness needs) and
//! hands each to tokio's blocking pool for the rsockets handshake, which waits for the peer
//! (the rdma_cm's REP and ESTABLISHED, the peer's connection data): the runtime's threads never
//! wait on a peer.
//!
//! **Cancel safety.** A request taken from the channel is held by the listener, not by the
//! future: its handshake runs to its end whatever happens to the `accept` future, and the
//! stream it gives is returned by the next `accept` (or [`AsyncRdmaListener::poll_accept`])
//! that finds it done. A dropped `accept` future loses no connection. Dropping the listener
//! drops the handshakes' results (each connection is closed).

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::Stream;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::task::JoinHandle;

use super::AsyncRdmaStream;
use crate::{RdmaListener, RdmaStream, StreamOptions};

/// At most this many handshakes of one listener in flight: more requests wait in the
/// kernel's queue (its backlog) until one ends, so a flood of requests that no `accept`
/// takes does not grow the blocking pool.
const MAX_HANDSHAKES: usize = 16;

type Handshake = JoinHandle<io::Result<(RdmaStream, SocketAddr)>>;

/// Listens for rsockets connections on tokio: [`AsyncRdmaListener::accept`] is a future,
/// cancel-safe (see the module's documentation), and gives [`AsyncRdmaStream`]s. At most 16
/// handshakes of one listener run at once; more requests wait in the kernel's queue.
///
/// [`AsyncRdmaListener::incoming`] turns it into a [`Stream`] of connections, what tonic's
/// `serve_with_incoming` and other frameworks take.
#[derive(Debug)]
pub struct AsyncRdmaListener {
    listener: RdmaListener,
    fd: AsyncFd<OwnedFd>,
    handshakes: VecDeque<Handshake>,
}

impl AsyncRdmaListener {
    /// Binds to `addr` (port 0: a free port) and listens, with the default options for the
    /// streams it accepts. Must be called within a tokio runtime (registers the listener's
    /// fd). Errors name the address (`listen on ADDR: ...`), e.g. `AddrNotAvailable` for an
    /// address no RDMA device has.
    pub fn bind(addr: SocketAddr) -> io::Result<AsyncRdmaListener> {
        Self::from_std(RdmaListener::bind(addr)?)
    }

    /// [`AsyncRdmaListener::bind`] with `opts` for the accepted streams (checked now).
    pub fn bind_with(addr: SocketAddr, opts: &StreamOptions) -> io::Result<AsyncRdmaListener> {
        Self::from_std(RdmaListener::bind_with(addr, opts)?)
    }

    /// Wraps a blocking listener; must be called within a tokio runtime (registers its fd).
    pub fn from_std(listener: RdmaListener) -> io::Result<AsyncRdmaListener> {
        let fd = listener.as_fd().try_clone_to_owned()?;
        // SAFETY: the `OwnedFd` (our own duplicate of the listener's event channel fd) is
        // owned by the AsyncFd, so the file stays open while it is registered, and `as_raw_fd`
        // always returns that descriptor (tokio's I/O-safety contract for
        // `register_with_interest`).
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(AsyncRdmaListener {
            listener,
            fd,
            handshakes: VecDeque::new(),
        })
    }

    /// The bound address (with the port chosen when bound to port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection: the stream and the peer's address. Cancel-safe. A request whose
    /// connection data we do not speak is rejected and reported as `InvalidData` naming the
    /// peer (as [`RdmaListener::accept`]); the listener stays usable after any error.
    pub async fn accept(&mut self) -> io::Result<(AsyncRdmaStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connection; `Pending` registers `cx`'s waker (the last poller's
    /// only, as tokio's `poll_*` methods). What [`AsyncRdmaListener::accept`] does.
    pub fn poll_accept(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<(AsyncRdmaStream, SocketAddr)>> {
        loop {
            // Every queued request to a handshake of its own (up to MAX_HANDSHAKES).
            while self.handshakes.len() < MAX_HANDSHAKES {
                match self.listener.try_request() {
                    Ok(Some((id, ev))) => {
                        let opts = self.listener.options();
                        self.handshakes
                            .push_back(tokio::task::spawn_blocking(move || {
                                RdmaListener::accept_request(id, ev, &opts)
                            }));
                    }
                    Ok(None) => break,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            // The first handshake done, whichever it is; each not done keeps our waker.
            for i in 0..self.handshakes.len() {
                if let Poll::Ready(r) = Pin::new(&mut self.handshakes[i]).poll(cx) {
                    self.handshakes.remove(i);
                    return Poll::Ready(finish(r));
                }
            }
            if self.handshakes.len() >= MAX_HANDSHAKES {
                // Woken when one of them ends; the kernel keeps the other requests.
                return Poll::Pending;
            }
            // The kernel's queue was read to its end above: a readiness seen now is cleared
            // and the queue read again, so a request that came in between is not missed.
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            guard.clear_ready();
        }
    }

    /// The listener as a [`Stream`] of connections (`futures_core`'s trait, which tonic's
    /// `Server::serve_with_incoming`, hyper-util and tokio-stream take): each item is
    /// [`AsyncRdmaListener::accept`]'s stream, or its error (the stream goes on after an error:
    /// the listener stays usable). It never ends. Owns the listener, so a server future built
    /// on it can be spawned; [`Incoming::into_inner`] gives it back. Cancel-safe as `accept`: a
    /// dropped `next()` loses no connection.
    pub fn incoming(self) -> Incoming {
        Incoming(self)
    }
}

/// [`AsyncRdmaListener::incoming`]: the listener's connections as a [`Stream`].
#[derive(Debug)]
pub struct Incoming(AsyncRdmaListener);

impl Incoming {
    /// The listener (e.g. for its [`AsyncRdmaListener::local_addr`]).
    pub fn get_ref(&self) -> &AsyncRdmaListener {
        &self.0
    }

    /// The listener, mutably (an `accept` in between items is fine).
    pub fn get_mut(&mut self) -> &mut AsyncRdmaListener {
        &mut self.0
    }

    /// The listener back, with the handshakes it holds.
    pub fn into_inner(self) -> AsyncRdmaListener {
        self.0
    }
}

impl Stream for Incoming {
    type Item = io::Result<AsyncRdmaStream>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .0
            .poll_accept(cx)
            .map(|r| Some(r.map(|(s, _)| s)))
    }
}

fn finish(
    r: Result<io::Result<(RdmaStream, SocketAddr)>, tokio::task::JoinError>,
) -> io::Result<(AsyncRdmaStream, SocketAddr)> {
    match r {
        Ok(Ok((s, from))) => Ok((AsyncRdmaStream::from_std(s)?, from)),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(io::Error::other(format!(
            "accept: the handshake task ended without a result: {e}"
        ))),
    }
}
