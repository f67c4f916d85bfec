//! [`StreamOptions`]: the sizes of a stream.

use super::*;

/// Sizes of a stream, as rsockets' socket options and `/etc/rdma/rsocket/*` defaults.
///
/// The defaults are rsockets' own: 128 KiB send and receive rings (`SO_SNDBUF`/`SO_RCVBUF`,
/// `RDMA_SQSIZE`/`RDMA_RQSIZE` 384, `RDMA_INLINE` 64). Both sides may choose differently:
/// what crosses the wire is the receive ring's halves and the receive queue's credits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    /// Bytes of the send ring (registered once per stream): 4 KiB to 1 GiB.
    pub send_buffer: u32,
    /// Bytes of the receive ring the peer writes into (registered once per stream; published
    /// half by half): an even number from 4 KiB to 1 GiB.
    pub recv_buffer: u32,
    /// Send queue entries: 16 to 65534 (4 are kept for control messages).
    pub send_queue: u32,
    /// Receive queue entries, the credits the peer gets: 16 to 65534.
    pub recv_queue: u32,
    /// Transfers up to this size are posted INLINE (the device may grant less).
    pub inline: u32,
    /// Entries of our iomap table (rsockets' `RDMA_IOMAPSIZE`): how many buffers the peer
    /// may map for [`RdmaStream::iowrite`] into them (0, the default: none). 0 to
    /// [`MAX_IOMAP_ENTRIES`](crate::wire::MAX_IOMAP_ENTRIES); as rsockets, sizes above 128
    /// are rounded down to a multiple of 256 (what the connection data can announce).
    pub iomap_entries: u16,
}

impl Default for StreamOptions {
    fn default() -> Self {
        StreamOptions {
            send_buffer: 128 * 1024,
            recv_buffer: 128 * 1024,
            send_queue: 384,
            recv_queue: 384,
            inline: 64,
            iomap_entries: 0,
        }
    }
}

impl StreamOptions {
    /// Checks the sizes; the error names the first one out of range.
    pub fn check(&self) -> io::Result<()> {
        let bad = |what: &str, v: u32, range: &str| {
            Err(invalid(format!(
                "stream option {what} = {v}: must be {range}"
            )))
        };
        const GIB: u32 = 1 << 30;
        if !(4096..=GIB).contains(&self.send_buffer) {
            return bad("send_buffer", self.send_buffer, "4096 to 2^30 bytes");
        }
        if !(4096..=GIB).contains(&self.recv_buffer) || self.recv_buffer % 2 != 0 {
            return bad("recv_buffer", self.recv_buffer, "even, 4096 to 2^30 bytes");
        }
        if !(16..=0xfffe).contains(&self.send_queue) {
            return bad("send_queue", self.send_queue, "16 to 65534 entries");
        }
        if !(16..=0xfffe).contains(&self.recv_queue) {
            return bad("recv_queue", self.recv_queue, "16 to 65534 entries");
        }
        if self.iomap_entries > MAX_IOMAP_ENTRIES {
            return bad(
                "iomap_entries",
                self.iomap_entries as u32,
                "0 to 32512 entries",
            );
        }
        Ok(())
    }
}
