//! `iowrite` (rsockets' `riowrite`) on tokio: [`AsyncRdmaStream::iowrite`] and
//! [`WriteHalf::iowrite`].

use std::future::poll_fn;
use std::io;

use super::{AsyncRdmaStream, WriteHalf};

impl WriteHalf {
    /// [`RdmaStream::iowrite`](crate::RdmaStream::iowrite) on tokio: RDMA WRITEs of `buf` into
    /// the peer's mapping at `offset`, waiting (without blocking the thread) for ring space.
    /// Returns how many bytes were posted (at least one; fewer than `buf.len()` when the ring
    /// filled: continue at `offset + n`, or use [`WriteHalf::iowrite_all`]). The same errors
    /// as the blocking `iowrite` (`InvalidInput` naming the offset when no mapping of the peer
    /// covers the range).
    ///
    /// Cancel-safe: bytes are posted only in the poll that returns their count, so a dropped
    /// future posted nothing.
    pub async fn iowrite(&mut self, offset: u64, buf: &[u8]) -> io::Result<usize> {
        poll_fn(|cx| {
            self.0
                .poll_op(cx, |s, w, f| s.inner.iowrite_waking(offset, buf, w, f))
        })
        .await
    }

    /// [`WriteHalf::iowrite`] until every byte of `buf` is posted. Not cancel-safe: a dropped
    /// future may have posted a part (as tokio's `write_all`).
    pub async fn iowrite_all(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.iowrite(offset + done as u64, &buf[done..]).await? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => done += n,
            }
        }
        Ok(())
    }
}

impl AsyncRdmaStream {
    /// [`WriteHalf::iowrite`] on the whole stream. Cancel-safe.
    pub async fn iowrite(&mut self, offset: u64, buf: &[u8]) -> io::Result<usize> {
        self.w.iowrite(offset, buf).await
    }

    /// [`WriteHalf::iowrite_all`] on the whole stream. Not cancel-safe.
    pub async fn iowrite_all(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.w.iowrite_all(offset, buf).await
    }
}
