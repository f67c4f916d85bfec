//! `AsyncRead` / `AsyncWrite` for [`RdmaStream`] on tokio (feature `tokio`).
//!
//! [`AsyncRdmaStream`] drives the same protocol in non-blocking mode and waits on the
//! stream's readiness fd (see [`RdmaStream`], "Readiness") through tokio's `AsyncFd`. Each
//! half of [`AsyncRdmaStream::into_split`] registers its own duplicate of that fd, so a
//! reading task and a writing task are each woken by the device.
//!
//! The fd alone is not enough when both halves wait: one half's progress may consume the
//! completion event (and the completions) the other half's wake-up depends on, before tokio
//! sees the fd readable. So a half that gets `WouldBlock` also leaves its task's waker with
//! the stream, under the stream's lock, and whichever handle next makes progress wakes it.
//!
//! Cancel safety: `poll_read` takes bytes out of the receive ring only in the poll that
//! returns them, and `poll_write` posts bytes only in the poll that returns their count, so
//! dropping a read or write future loses and duplicates nothing.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use crate::{RdmaStream, StreamOptions};

mod iowrite;
mod listener;
pub use listener::{AsyncRdmaListener, Incoming};

/// One direction: the stream and a registration of its readiness fd.
#[derive(Debug)]
struct Half {
    stream: RdmaStream,
    fd: AsyncFd<OwnedFd>,
}

impl Half {
    fn new(stream: RdmaStream) -> io::Result<Half> {
        let fd = stream.as_fd().try_clone_to_owned()?;
        // SAFETY: the `OwnedFd` (our own duplicate of the stream's epoll fd) is owned by the
        // AsyncFd, so the file stays open while it is registered, and `as_raw_fd` always
        // returns that descriptor (tokio's I/O-safety contract for `register_with_interest`).
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Half { fd, stream })
    }

    /// Runs `op` (non-blocking; on `WouldBlock` it has armed the stream and registered the
    /// task's waker for other handles' progress) until it does not return `WouldBlock`. In
    /// between: pending until the fd is readable or the waker is woken; a readiness already
    /// seen is cleared before `op` runs again, so that an event after that try is not lost.
    ///
    /// `op`'s `bool` says whether the fd fired since the last try (tokio's readiness, taken
    /// and cleared here before the try): only then does the try read the stream's channels
    /// (two system calls). Sound because the registration is edge-triggered: an event on
    /// either channel after the clear, read or not, sets the readiness again and wakes the
    /// task; a try that is not told of one polls the CQ, which holds what a completion
    /// event would announce, and reads the completion channel before it re-arms when an
    /// event may be queued. A try never polls for a while: it arms and returns (the runtime's
    /// thread is not held).
    fn poll_op<T>(
        &self,
        cx: &mut Context<'_>,
        mut op: impl FnMut(&RdmaStream, &Waker, bool) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        let mut fired = match self.fd.poll_read_ready(cx) {
            Poll::Ready(r) => {
                r?.clear_ready();
                true
            }
            Poll::Pending => false,
        };
        loop {
            match op(&self.stream, cx.waker(), fired) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return Poll::Ready(r),
            }
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            guard.clear_ready();
            fired = true;
        }
    }
}

/// An [`RdmaStream`] for tokio: `AsyncRead` + `AsyncWrite`, splittable into owned halves.
#[derive(Debug)]
pub struct AsyncRdmaStream {
    r: ReadHalf,
    w: WriteHalf,
}

/// The reading half of an [`AsyncRdmaStream`].
#[derive(Debug)]
pub struct ReadHalf(Half);

/// The writing half of an [`AsyncRdmaStream`]. Dropping it does not shut the stream down;
/// `shutdown()` (`AsyncWriteExt::shutdown`) sends rsockets' SHUTDOWN.
#[derive(Debug)]
pub struct WriteHalf(Half);

impl AsyncRdmaStream {
    /// Wraps a connected stream; must be called within a tokio runtime (registers its fd).
    pub fn from_std(stream: RdmaStream) -> io::Result<AsyncRdmaStream> {
        Ok(AsyncRdmaStream {
            r: ReadHalf(Half::new(stream.clone())?),
            w: WriteHalf(Half::new(stream)?),
        })
    }

    /// [`RdmaStream::connect_with`] on tokio's blocking pool.
    pub async fn connect(addr: SocketAddr, opts: &StreamOptions) -> io::Result<AsyncRdmaStream> {
        let opts = *opts;
        let s = tokio::task::spawn_blocking(move || RdmaStream::connect_with(addr, &opts))
            .await
            .map_err(io::Error::other)??;
        Self::from_std(s)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.r.0.stream.peer_addr()
    }

    /// Our address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.r.0.stream.local_addr()
    }

    /// The two halves, each usable from its own task.
    pub fn into_split(self) -> (ReadHalf, WriteHalf) {
        (self.r, self.w)
    }
}

fn read_buf(s: &RdmaStream, buf: &mut ReadBuf<'_>, w: &Waker, fired: bool) -> io::Result<()> {
    let n = s
        .inner
        .read_waking(&mut [IoSliceMut::new(buf.initialize_unfilled())], w, fired)?;
    buf.advance(n);
    Ok(())
}

impl AsyncRead for ReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0.poll_op(cx, |s, w, f| read_buf(s, buf, w, f))
    }
}

impl AsyncRead for AsyncRdmaStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.r).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.poll_op(cx, |s, w, f| {
            s.inner.write_waking(&[IoSlice::new(buf)], w, f)
        })
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.0
            .poll_op(cx, |s, w, f| s.inner.write_waking(bufs, w, f))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Data is posted by `poll_write`; nothing is held back.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// rsockets' SHUTDOWN of our sending side; waits (at most a second, blocking the task)
    /// for the sends posted so far.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.0.stream.shutdown(Shutdown::Write))
    }
}

impl AsyncWrite for AsyncRdmaStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.w).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.w).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.w).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.w).poll_shutdown(cx)
    }
}
