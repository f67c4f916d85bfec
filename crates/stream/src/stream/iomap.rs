//! rsockets' iomap: buffers a stream maps for its peer to write into ([`IoMap`], and
//! [`RawIoMap`] over memory the caller registers), and direct writes into the peer's
//! mappings ([`RdmaStream::iowrite`]).
//!
//! The peer's iomap table has one slot per mapping we may announce (the ledger's slots);
//! each handle owns its slot and its registration. Dropping a handle deregisters the buffer
//! first and only then frees the slot, so a late write of the peer (its table keeps the entry:
//! rsockets' `riounmap` tells the peer nothing) fails at the device instead of reaching
//! memory that was given back.

use std::sync::Weak;

use rverbs_uverbs::mr::RawMr;
use rverbs_uverbs::pd::Pd;

use super::*;
use crate::ledger::{MAX_TRANSFER, OLAP_START};
use crate::wire::IoMapEntry;

impl Conn {
    /// A plain RDMA WRITE (a direct write into a peer's mapping).
    pub(super) fn post_write(
        &self,
        wr_id: u64,
        sge: &[MrSge<'_>],
        remote: (u64, u32),
        flags: SendFlags,
    ) -> io::Result<()> {
        self.qp
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::RdmaWrite {
                    remote_addr: remote.0,
                    rkey: remote.1,
                },
                sge,
                flags,
                ud: None,
            }])
            .map_err(io::Error::from)
    }

    /// Copies `src` into the send ring ranges of `t` and posts it: a write with immediate
    /// (`imm`) or, without, a plain RDMA WRITE.
    pub(super) fn post_transfer(
        &self,
        t: &crate::ledger::Transfer,
        src: &[u8],
        imm: bool,
    ) -> io::Result<()> {
        let (h, l1) = (t.first.0 as usize, t.first.1 as usize);
        let l2 = t.second as usize;
        self.smr.write_at(h, &src[..l1]);
        self.smr.write_at(0, &src[l1..l1 + l2]);
        let flags = if t.inline {
            SendFlags::INLINE
        } else {
            SendFlags::empty()
        };
        let s1 = self.smr.sge(h..h + l1);
        let two;
        let sges: &[MrSge<'_>] = if l2 > 0 {
            two = [s1, self.smr.sge(0..l2)];
            &two
        } else {
            two = [s1, s1];
            &two[..1]
        };
        if imm {
            self.post_write_imm(t.imm as u64, sges, t.remote, t.imm, flags)
        } else {
            self.post_write(t.imm as u64, sges, t.remote, flags)
        }
    }
}

/// A slot of the peer's iomap table held by a mapping; frees it when dropped.
struct SlotGuard {
    stream: Weak<Inner>,
    index: u16,
    offset: u64,
    len: u32,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Some(inner) = self.stream.upgrade() {
            lock(&inner.st).l.free_slot(self.index);
        }
    }
}

/// A buffer the peer of an [`RdmaStream`] can write into with its `riowrite` (or
/// [`RdmaStream::iowrite`]), made by [`RdmaStream::iomap`].
///
/// The buffer is registered memory owned by the mapping, readable only through copies
/// ([`IoMap::read_at`]): the peer may write it at any time. Dropping the mapping
/// deregisters it before the memory is freed; the peer is not told (as rsockets), and a
/// write it still makes fails at its device.
pub struct IoMap {
    // Field order is drop order: the registration before the slot.
    mr: Mr<Vec<u8>>,
    slot: SlotGuard,
}

impl fmt::Debug for IoMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoMap")
            .field("offset", &self.slot.offset)
            .field("len", &self.slot.len)
            .field("index", &self.slot.index)
            .finish_non_exhaustive()
    }
}

impl IoMap {
    /// Where the mapping starts in the offset space the peer's writes name.
    pub fn offset(&self) -> u64 {
        self.slot.offset
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.slot.len as usize
    }

    /// Always false: an empty mapping is refused.
    pub fn is_empty(&self) -> bool {
        self.slot.len == 0
    }

    fn range(&self, at: usize, n: usize, what: &str) -> io::Result<()> {
        match at.checked_add(n) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(invalid(format!(
                "IoMap::{what}: bytes {at}..{} are outside the {}-byte mapping",
                at as u128 + n as u128,
                self.len()
            ))),
        }
    }

    /// Copies the mapped bytes at `at` (0: the mapping's first byte) into `dst`, with
    /// `rverbs_uverbs::kernel::shared`'s copies (a write of the peer may be under way: bytes it
    /// has not finished may be old or new). `InvalidInput` if the range is outside the
    /// mapping.
    pub fn read_at(&self, at: usize, dst: &mut [u8]) -> io::Result<()> {
        self.range(at, dst.len(), "read_at")?;
        self.mr.read_at(at, dst);
        Ok(())
    }

    /// Copies `src` into the mapped bytes at `at` (to set a marker the peer's write will
    /// change, as `riostream` does). `InvalidInput` if the range is outside the mapping.
    pub fn write_at(&self, at: usize, src: &[u8]) -> io::Result<()> {
        self.range(at, src.len(), "write_at")?;
        self.mr.write_at(at, src);
        Ok(())
    }

    /// A copy of the whole mapping.
    pub fn to_vec(&self) -> Vec<u8> {
        self.mr.to_vec()
    }
}

/// A mapping of memory the caller registered ([`RdmaStream::iomap_raw`]): the C API's
/// `riomap` of a caller's buffer. Dropping it deregisters the memory, then frees the slot.
pub struct RawIoMap {
    // Field order is drop order: the registration before the slot.
    mr: RawMr,
    slot: SlotGuard,
}

impl fmt::Debug for RawIoMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawIoMap")
            .field("offset", &self.slot.offset)
            .field("addr", &format_args!("{:#x}", self.mr.addr()))
            .field("len", &self.slot.len)
            .finish_non_exhaustive()
    }
}

impl RawIoMap {
    /// Where the mapping starts in the offset space the peer's writes name.
    pub fn offset(&self) -> u64 {
        self.slot.offset
    }

    /// The registered memory's address.
    pub fn addr(&self) -> u64 {
        self.mr.addr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.mr.len()
    }

    /// Always false: an empty mapping is refused.
    pub fn is_empty(&self) -> bool {
        self.mr.is_empty()
    }
}

impl RdmaStream {
    /// Maps a new buffer of `len` zeroed bytes for the peer to write into (rsockets'
    /// `riomap` with `PROT_WRITE`): the peer's writes at offsets `offset..offset + len` land
    /// in it. The mapping takes one slot of the peer's iomap table (the peer's
    /// `RDMA_IOMAPSIZE` / [`StreamOptions::iomap_entries`]) and is announced to the peer by
    /// one message, posted before any data written after this call; a blocking stream waits
    /// (up to its write timeout) until it is posted, a non-blocking one leaves it queued for
    /// the next progress of the stream (any read, write or poll). The peer knows of it once
    /// it has received something sent after it.
    ///
    /// Errors (`InvalidInput`, else as named): `len` 0 or over `u32::MAX`, `offset + len`
    /// overflowing; `Unsupported`: the peer has no iomap table; `OutOfMemory`: every slot of
    /// its table is in use; `NotConnected`: the stream is shut down for writing or the peer
    /// is gone; the stream's error if it has failed; a registration error; `TimedOut`.
    pub fn iomap(&self, len: usize, offset: u64) -> io::Result<IoMap> {
        check_map(len, offset)?;
        let nb = self.inner.nonblocking.load(Ordering::Relaxed);
        self.map(offset, nb, |pd, access| {
            let mr = Mr::register(pd, vec![0u8; len], access).map_err(io::Error::from)?;
            let sge = RsSge {
                addr: mr.addr(),
                key: mr.rkey(),
                length: len as u32,
            };
            Ok((mr, sge))
        })
        .map(|(mr, slot)| IoMap { mr, slot })
    }

    /// Maps memory the caller registers, for the C API's `riomap` of its caller's buffer:
    /// `register` gets the stream's protection domain and the access the mapping needs
    /// (local and remote write) and returns the registration (whose `unsafe` contract,
    /// [`rverbs_uverbs::mr::register_raw`]'s, is the caller's: the memory stays mapped and
    /// unused by anyone else until the [`RawIoMap`] is dropped). `nonblocking`: as
    /// [`RdmaStream::iomap`] in non-blocking mode (the announcement may stay queued).
    /// Errors as [`RdmaStream::iomap`]'s (the registration is dropped on an error after it).
    pub fn iomap_raw(
        &self,
        offset: u64,
        nonblocking: bool,
        register: impl FnOnce(&Arc<Pd>, AccessFlags) -> io::Result<RawMr>,
    ) -> io::Result<RawIoMap> {
        self.map(offset, nonblocking, |pd, access| {
            let mr = register(pd, access)?;
            check_map(mr.len(), offset)?;
            let sge = RsSge {
                addr: mr.addr(),
                key: mr.rkey(),
                length: mr.len() as u32,
            };
            Ok((mr, sge))
        })
        .map(|(mr, slot)| RawIoMap { mr, slot })
    }

    /// Takes a slot, registers (`register` returns the registration and its address, rkey
    /// and length), fills the slot, and waits for the announcement unless `nonblocking`.
    fn map<M>(
        &self,
        offset: u64,
        nonblocking: bool,
        register: impl FnOnce(&Arc<Pd>, AccessFlags) -> io::Result<(M, RsSge)>,
    ) -> io::Result<(M, SlotGuard)> {
        let inner = &self.inner;
        let index = {
            let mut st = lock(&inner.st);
            if let Some(f) = &st.l.fault {
                return Err(Inner::fault_error(f));
            }
            if !st.l.writable {
                return Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "iomap: the stream is shut down for writing or the peer disconnected",
                ));
            }
            if st.l.peer_iomap_entries() == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "iomap: the peer has no iomap table (its RDMA_IOMAPSIZE / \
                     StreamOptions::iomap_entries is 0)",
                ));
            }
            let n = st.l.peer_iomap_entries();
            st.l.reserve_slot().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!("iomap: all {n} entries of the peer's iomap table are in use"),
                )
            })?
        };
        // Declared first, dropped last: on every error below the registration is dropped
        // (deregistered) and the lock released before the guard frees the slot.
        let mut slot = SlotGuard {
            stream: Arc::downgrade(inner),
            index,
            offset,
            len: 0,
        };
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let (mr, sge) = register(&inner.conn.pd, access)?;
        slot.len = sge.length;
        let mut st = lock(&inner.st);
        st.l.fill_slot(index, IoMapEntry { offset, sge });
        inner.progress(&mut st, 0)?;
        if !nonblocking {
            let deadline = lock(&inner.write_timeout).map(|t| Instant::now() + t);
            st = inner.wait_for(st, deadline, Mode::Block, |l| {
                !l.is_pending(index) || l.fault.is_some() || !l.writable
            })?;
            if st.l.is_pending(index) {
                return Err(match &st.l.fault {
                    Some(f) => Inner::fault_error(f),
                    None => io::Error::new(
                        io::ErrorKind::NotConnected,
                        "iomap: the stream was shut down before the mapping was announced",
                    ),
                });
            }
        }
        drop(st);
        Ok((mr, slot))
    }
}

impl RdmaStream {
    /// Writes `buf` into the peer's mapping at `offset` (rsockets' `riowrite`): RDMA WRITEs
    /// straight into the buffer the peer mapped there (with its `riomap` or
    /// [`RdmaStream::iomap`]), copied once through the send ring; the peer gets no message
    /// (it sees the bytes change; order them with a later `write`, which RC delivers after
    /// them). A peer that polls a flag byte in its mapping (as rdma-core's `riostream` polls
    /// the last) learns only that the flag arrived: no device promises the order in which it
    /// places the bytes of one write (rxe may copy them from the tail down), so write the
    /// flag with an `iowrite` of its own after the data's, which an InfiniBand or RoCE RC QP
    /// places after them (rxe, and mlx5 on a mapping not registered with relaxed ordering);
    /// iWARP (siw) does not order the placement of two writes, so there order with a later
    /// `write` (a message), which every transport delivers after the writes before it.
    /// `offset..offset + buf.len()` must lie in one of the peer's mappings, which we know of
    /// once anything the peer sent after mapping has arrived.
    ///
    /// Blocking, it returns once every byte is posted; non-blocking (see
    /// [`RdmaStream::set_nonblocking`]), it posts what it can (`WouldBlock` when nothing).
    /// Errors: `InvalidInput` naming the offset when no mapping of the peer covers the
    /// range (also when we announced no iomap table: [`StreamOptions::iomap_entries`] 0);
    /// `BrokenPipe` once shut down for writing or the peer is gone; the stream's error
    /// after a failure (a write the peer's device refused, for a mapping it dropped, ends
    /// the stream); `TimedOut` after the write timeout.
    pub fn iowrite(&self, offset: u64, buf: &[u8]) -> io::Result<usize> {
        self.inner.iowrite_mode(
            offset,
            buf,
            Mode::of(self.inner.nonblocking.load(Ordering::Relaxed)),
        )
    }

    /// [`RdmaStream::iowrite`] in non-blocking mode or blocking, for this call only (the C
    /// API's `riowrite` with `MSG_DONTWAIT`); non-blocking, a `WouldBlock` does not arm the
    /// stream (see [`RdmaStream::recv_vectored`]).
    pub fn iowrite_with(&self, offset: u64, buf: &[u8], nonblocking: bool) -> io::Result<usize> {
        self.inner
            .iowrite_mode(offset, buf, Mode::or_try(nonblocking))
    }
}

impl Inner {
    /// The peer's mapping covering `offset..offset + len`, from our iomap table (entries
    /// the peer wrote, in our byte order: they only name where our writes go in the peer's
    /// memory, under its keys).
    fn peer_mapping(&self, offset: u64, len: usize) -> io::Result<IoMapEntry> {
        let entries = lock(&self.st).l.sizes.iomap as usize;
        if entries == 0 {
            return Err(invalid(format!(
                "iowrite at offset {offset:#x}: this stream announced no iomap table \
                 (StreamOptions::iomap_entries / RDMA_IOMAPSIZE is 0), so the peer has no \
                 mapping"
            )));
        }
        let base = SGL_ENTRIES as usize * SGE_LEN;
        let mut b = [0u8; IOMAP_ENTRY_LEN];
        for i in 0..entries {
            self.conn.tmr.read_at(base + i * IOMAP_ENTRY_LEN, &mut b);
            let e = IoMapEntry::from_bytes(&b, HOST_IS_BIG_ENDIAN);
            if !e.covers(offset) {
                continue;
            }
            let end = e.offset + e.sge.length as u64;
            return match offset.checked_add(len as u64) {
                Some(last) if last <= end => Ok(e),
                _ => Err(invalid(format!(
                    "iowrite of {len} bytes at offset {offset:#x}: the peer's mapping there \
                     covers only {:#x}..{end:#x}",
                    e.offset
                ))),
            };
        }
        Err(invalid(format!(
            "iowrite at offset {offset:#x}: no mapping of the peer covers it (of the {entries} \
             entries of our iomap table)"
        )))
    }

    /// Non-blocking `iowrite`; on `WouldBlock`, `waker` is woken by the next progress another
    /// handle makes (as `write_waking`, `fd_ready` too).
    #[cfg(feature = "tokio")]
    pub(crate) fn iowrite_waking(
        &self,
        offset: u64,
        buf: &[u8],
        waker: &Waker,
        fd_ready: bool,
    ) -> io::Result<usize> {
        self.iowrite_mode(offset, buf, Mode::waking(waker, fd_ready))
    }

    fn iowrite_mode(&self, offset: u64, buf: &[u8], mode: Mode<'_>) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let e = self.peer_mapping(offset, buf.len())?;
        let deadline = mode.deadline(&self.write_timeout);
        let mut st = lock(&self.st);
        let mut written = 0usize;
        let mut olen = OLAP_START;
        while written < buf.len() {
            st = match self.wait_to_write(st, deadline, mode, written, Ledger::can_write_direct) {
                Ok(s) => s,
                Err(end) => return end,
            };
            let at = offset + written as u64;
            let room = (e.offset + e.sge.length as u64 - at) as u32;
            let remote = (e.sge.addr.wrapping_add(at - e.offset), e.sge.key);
            let t = st.l.plan_direct(buf.len() - written, olen, room, remote);
            if olen < MAX_TRANSFER {
                olen <<= 1;
            }
            let n = (t.first.1 + t.second) as usize;
            if let Err(err) = self
                .conn
                .post_transfer(&t, &buf[written..written + n], false)
            {
                return if written > 0 { Ok(written) } else { Err(err) };
            }
            written += n;
        }
        Ok(written)
    }
}

/// `len` and `offset` of a new mapping checked.
fn check_map(len: usize, offset: u64) -> io::Result<()> {
    if len == 0 {
        return Err(invalid("iomap: an empty mapping (len 0)"));
    }
    if len > u32::MAX as usize {
        return Err(invalid(format!(
            "iomap: {len} bytes; a mapping is at most {} bytes",
            u32::MAX
        )));
    }
    if offset.checked_add(len as u64).is_none() {
        return Err(invalid(format!(
            "iomap: offset {offset:#x} + {len} bytes overflows"
        )));
    }
    Ok(())
}
