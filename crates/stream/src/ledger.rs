//! The protocol state of one stream, without any verbs: credits, the send ring, the target
//! SGL, the receive ring and its published halves. The stream (`stream.rs`) feeds it every
//! completion and asks it what to post; everything a peer sends is checked here before it
//! is used, so these checks are unit tested without a device.
//!
//! Accounting (the receive side), in bytes of the receive ring: the sum of `rbuf_avail`
//! (read by the application, not yet published again), `room` (published, not yet written by
//! the peer) and the queued data is `rbuf_size`, always. The peer may write only into `room`; a data message
//! claiming more is a protocol error, and so are more messages than the credits allow.

use std::collections::VecDeque;

use crate::wire::{
    Ctrl, IoMapEntry, Msg, MsgOp, RsSge, WireError, IOMAP_ENTRY_LEN, SGE_LEN, SGL_ENTRIES,
};

/// rsockets' `RS_QP_CTRL_SIZE`: send queue entries kept for control messages.
pub(crate) const CTRL_SLOTS: u32 = 4;
/// rsockets' `RS_SNDLOWAT`: free send ring bytes needed before a transfer starts.
pub(crate) const SNDLOWAT: u32 = 2048;
/// First transfer size of a large write; doubles up to [`MAX_TRANSFER`].
pub(crate) const OLAP_START: u32 = 2048;
/// Largest single RDMA WRITE (rsockets' `RS_MAX_TRANSFER`).
pub(crate) const MAX_TRANSFER: u32 = 65536;

/// The flag in a receive's `wr_id` (sends carry their message in the low 32 bits).
pub(crate) const WR_ID_RECV: u64 = 1 << 63;

/// What happened to the connection, from the protocol's side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The peer broke the protocol.
    Wire(WireError),
    /// A work request failed (status text).
    Io(String),
}

/// Sizes the ledger works with, as granted by the device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    pub sbuf: u32,
    pub rbuf: u32,
    pub sq: u32,
    pub rq: u32,
    pub inline: u32,
    /// Entries of our iomap table (what the peer may map into).
    pub iomap: u16,
}

/// One data transfer to post: ring ranges to send, where to write, and the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Transfer {
    /// First ring range (offset, length).
    pub first: (u32, u32),
    /// Second ring range after the wrap (length 0 when none).
    pub second: u32,
    /// Remote address and key.
    pub remote: (u64, u32),
    /// Immediate data (host order); also the `wr_id`.
    pub imm: u32,
    /// Whether to post it INLINE.
    pub inline: bool,
}

/// A credit update to post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CreditUpdate {
    /// Immediate data (host order); also the `wr_id`.
    pub imm: u32,
    /// A new target SGL entry for the peer: the entry's bytes (in the peer's order) and the
    /// remote address and key of its slot, plus which control slot of our send buffer to
    /// stage it in when it cannot go INLINE.
    pub entry: Option<([u8; SGE_LEN], u64, u32, u32)>,
}

/// One slot of the peer's iomap table, as we use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Free,
    /// Taken while its buffer is being registered.
    Reserved,
    /// Our mapping: the entry the peer's table gets (or has).
    Mapped(IoMapEntry),
}

pub(crate) struct Ledger {
    pub sizes: Sizes,
    // --- send side
    sseq_no: u16,
    sseq_comp: u16,
    sqe_avail: u32,
    sbuf_avail: u32,
    sbuf_head: u32,
    target: [RsSge; SGL_ENTRIES as usize],
    target_sge: usize,
    next_update_slot: usize,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    /// Size of the next transfer of a large write (see [`Ledger::next_olen`]).
    olen: u32,
    // --- receive side
    rseq_no: u16,
    rseq_comp: u16,
    rbuf_avail: u32,
    rbuf_free_offset: u32,
    rbuf_offset: u32,
    room: u32,
    rmsg: VecDeque<u32>,
    remote_sgl: RsSge,
    remote_sge: u32,
    /// The peer's iomap table (address, rkey, entries).
    pub remote_iomap: RsSge,
    pub peer_big_endian: bool,
    // --- our mappings: one slot per entry of the peer's iomap table, and the slots whose
    // announcement is still to be posted, in order
    slots: Vec<Slot>,
    pending: VecDeque<u16>,
    // --- state
    pub readable: bool,
    pub writable: bool,
    pub connected: bool,
    pub fault: Option<Fault>,
}

impl Ledger {
    /// The state after the connection data exchange: `peer` is what the peer sent (already
    /// checked by [`crate::wire::ConnData::parse`]).
    pub fn new(sizes: Sizes, peer: &crate::wire::ConnData) -> Ledger {
        let half = sizes.rbuf / 2;
        Ledger {
            sizes,
            sseq_no: 0,
            sseq_comp: peer.credits,
            sqe_avail: sizes.sq - CTRL_SLOTS,
            sbuf_avail: sizes.sbuf,
            sbuf_head: 0,
            target: [peer.data_buf, RsSge::default()],
            target_sge: 0,
            next_update_slot: 1,
            ctrl_seqno: 0,
            ctrl_max_seqno: CTRL_SLOTS,
            olen: OLAP_START,
            rseq_no: 0,
            rseq_comp: (sizes.rq / 2) as u16,
            rbuf_avail: half,
            rbuf_free_offset: half,
            rbuf_offset: 0,
            room: half,
            // One more than the credits: the most a well-behaved peer can have queued.
            rmsg: VecDeque::with_capacity(sizes.rq as usize + 1),
            remote_sgl: peer.target_sgl,
            remote_sge: 1 % peer.target_sgl.length,
            remote_iomap: peer.iomap_table(),
            peer_big_endian: peer.peer_big_endian(),
            slots: vec![Slot::Free; peer.iomap_entries() as usize],
            pending: VecDeque::new(),
            readable: true,
            writable: true,
            connected: true,
            fault: None,
        }
    }

    fn fail(&mut self, f: Fault) {
        if self.fault.is_none() {
            self.fault = Some(f);
        }
        self.readable = false;
        self.writable = false;
        self.connected = false;
    }

    /// The peer went away (rdma_cm DISCONNECTED, or its DISCONNECT message): queued data
    /// can still be read, nothing can be sent.
    pub fn peer_gone(&mut self) {
        self.connected = false;
        self.writable = false;
        self.readable = false;
    }

    /// A successful receive completion: immediate data `imm` (if any) and the length of the
    /// RDMA WRITE that carried it. `slot` reads target SGL entry `i` from our registered
    /// target SGL (in our byte order). A protocol error ends the stream.
    pub fn on_recv(&mut self, imm: Option<u32>, byte_len: u32, slot: impl FnOnce(usize) -> RsSge) {
        if let Err(e) = self.recv_inner(imm, byte_len, slot) {
            self.fail(Fault::Wire(e));
        }
    }

    fn recv_inner(
        &mut self,
        imm: Option<u32>,
        byte_len: u32,
        slot: impl FnOnce(usize) -> RsSge,
    ) -> Result<(), WireError> {
        let msg = Msg::decode(imm.ok_or(WireError::NoImmediate)?);
        match msg.op {
            MsgOp::DATA => {
                if msg.data == 0 {
                    self.rseq_no = self.rseq_no.wrapping_add(1);
                    return Ok(());
                }
                if self.rmsg.len() > self.sizes.rq as usize {
                    return Err(WireError::TooManyMessages(self.rmsg.len() as u32 + 1));
                }
                if msg.data > self.room {
                    return Err(WireError::Overrun {
                        len: msg.data,
                        room: self.room,
                    });
                }
                self.room -= msg.data;
                self.rmsg.push_back(msg.data);
            }
            MsgOp::SGL => {
                self.sseq_comp = msg.data as u16;
                match byte_len {
                    0 => {}
                    n if n as usize == SGE_LEN => {
                        let i = self.next_update_slot;
                        self.target[i] = slot(i);
                        self.next_update_slot = (i + 1) % SGL_ENTRIES as usize;
                    }
                    n => return Err(WireError::SglWriteLength(n)),
                }
            }
            MsgOp::CTRL => match Ctrl(msg.data) {
                Ctrl::DISCONNECT => self.peer_gone(),
                Ctrl::SHUTDOWN => {
                    if self.writable {
                        self.readable = false;
                    } else {
                        self.peer_gone();
                    }
                }
                _ => {} // keepalive, and controls we do not know: nothing to do
            },
            MsgOp::IOMAP_SGL => {
                // The peer wrote entry `data` of our table (read when we write into its
                // mappings); the message itself used one of its credits: counted as read.
                if msg.data >= self.sizes.iomap as u32 {
                    return Err(WireError::IomapIndex {
                        index: msg.data,
                        size: self.sizes.iomap,
                    });
                }
                if byte_len as usize != IOMAP_ENTRY_LEN {
                    return Err(WireError::IomapWriteLength(byte_len));
                }
                self.rseq_no = self.rseq_no.wrapping_add(1);
            }
            op => return Err(WireError::ReservedOp(op)),
        }
        Ok(())
    }

    /// A send completion (`wr_id` as posted).
    pub fn on_send(&mut self, wr_id: u64, ok: bool, status: &dyn std::fmt::Display) {
        let msg = Msg::decode(wr_id as u32);
        match msg.op {
            MsgOp::SGL | MsgOp::CTRL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
            MsgOp::IOMAP_SGL => {
                self.sqe_avail += 1;
                self.sbuf_avail += IOMAP_ENTRY_LEN as u32;
            }
            _ => {
                self.sqe_avail += 1;
                self.sbuf_avail += msg.data;
            }
        }
        if !ok && self.connected {
            self.fail(Fault::Io(format!(
                "an RDMA WRITE to the peer failed: {status}"
            )));
        }
    }

    /// Whether queued data waits to be read.
    pub fn has_data(&self) -> bool {
        !self.rmsg.is_empty()
    }

    /// Takes up to `want` (> 0) queued bytes that lie contiguously in the receive ring:
    /// their ring offset and length. The caller copies them out.
    pub fn take(&mut self, want: usize) -> Option<(usize, usize)> {
        let ring = self.sizes.rbuf;
        let head = self.rmsg.front_mut()?;
        let n = (want.min(u32::MAX as usize) as u32)
            .min(*head)
            .min(ring - self.rbuf_offset);
        let off = self.rbuf_offset;
        *head -= n;
        if *head == 0 {
            self.rmsg.pop_front();
            self.rseq_no = self.rseq_no.wrapping_add(1);
        }
        self.rbuf_offset = (self.rbuf_offset + n) % ring;
        self.rbuf_avail += n;
        Some((off as usize, n as usize))
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// Whether a credit update is due (rsockets' `rs_give_credits`).
    pub fn credits_due(&self) -> bool {
        let half = self.sizes.rbuf / 2;
        (self.rbuf_avail >= half || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0)
            && self.ctrl_avail()
            && self.connected
    }

    /// The credit update to post now (rsockets' `rs_send_credits`); call when
    /// [`Ledger::credits_due`]. `rbuf_addr`/`rkey` describe our receive ring.
    pub fn credit_update(&mut self, rbuf_addr: u64, rkey: u32) -> CreditUpdate {
        let half = self.sizes.rbuf / 2;
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add((self.sizes.rq / 2) as u16);
        let imm = Msg::encode(MsgOp::SGL, self.rseq_no as u32 + self.sizes.rq);
        let entry = if self.rbuf_avail >= half {
            let sge = RsSge {
                addr: rbuf_addr + self.rbuf_free_offset as u64,
                key: rkey,
                length: half,
            };
            let at = self
                .remote_sgl
                .addr
                .wrapping_add(self.remote_sge as u64 * SGE_LEN as u64);
            let out = (
                sge.to_bytes(self.peer_big_endian),
                at,
                self.remote_sgl.key,
                self.ctrl_seqno % CTRL_SLOTS,
            );
            self.rbuf_avail -= half;
            self.room += half;
            self.rbuf_free_offset = (self.rbuf_free_offset + half) % self.sizes.rbuf;
            self.remote_sge = (self.remote_sge + 1) % self.remote_sgl.length;
            Some(out)
        } else {
            None
        };
        CreditUpdate { imm, entry }
    }

    /// Whether a control message (shutdown, disconnect) can be posted now.
    pub fn can_send_ctrl(&self) -> bool {
        self.ctrl_avail()
    }

    /// Takes a control slot for `ctrl`; returns its immediate data.
    pub fn ctrl_message(&mut self, ctrl: Ctrl) -> u32 {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        Msg::encode(MsgOp::CTRL, ctrl.0)
    }

    /// Whether every posted send has completed.
    pub fn all_sends_done(&self) -> bool {
        self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) + self.sqe_avail == self.sizes.sq
    }

    /// Whether a data transfer can start (rsockets' `rs_can_send`).
    pub fn can_send(&self) -> bool {
        self.pending.is_empty() && self.can_send_any()
    }

    /// [`Ledger::can_send`] whatever is queued before data.
    fn can_send_any(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_avail >= SNDLOWAT.min(self.sizes.sbuf)
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_sge].length != 0
    }

    /// Takes `len` bytes of send ring space at its head: (offset, length) of the first range
    /// and the length of the second one after the wrap.
    fn take_ring(&mut self, len: u32) -> ((u32, u32), u32) {
        self.sbuf_avail -= len;
        let head = self.sbuf_head;
        let first = len.min(self.sizes.sbuf - head);
        self.sbuf_head = (head + len) % self.sizes.sbuf;
        ((head, first), len - first)
    }

    /// Plans the announcement of our mapping in slot `index` of the peer's iomap table (call
    /// when [`Ledger::can_send`] and `index` < the table's entries): an RDMA WRITE WITH IMM of
    /// one entry, staged in the send ring, which takes a credit as rsockets' does.
    pub fn plan_iomap(&mut self, index: u16) -> Transfer {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        let (first, second) = self.take_ring(IOMAP_ENTRY_LEN as u32);
        let t = &self.remote_iomap;
        Transfer {
            first,
            second,
            remote: (
                t.addr.wrapping_add(index as u64 * IOMAP_ENTRY_LEN as u64),
                t.key,
            ),
            imm: Msg::encode(MsgOp::IOMAP_SGL, index as u32),
            inline: IOMAP_ENTRY_LEN as u32 <= self.sizes.inline,
        }
    }

    /// Entries of the peer's iomap table (how many mappings we may have).
    pub fn peer_iomap_entries(&self) -> usize {
        self.slots.len()
    }

    /// Takes a free slot of the peer's iomap table, if any.
    pub fn reserve_slot(&mut self) -> Option<u16> {
        let i = self.slots.iter().position(|s| *s == Slot::Free)?;
        self.slots[i] = Slot::Reserved;
        Some(i as u16)
    }

    /// Our reserved slot `i` now maps `entry`: its announcement is queued.
    pub fn fill_slot(&mut self, i: u16, entry: IoMapEntry) {
        self.slots[i as usize] = Slot::Mapped(entry);
        self.pending.push_back(i);
    }

    /// Slot `i` is free again (an announcement not yet posted is dropped; one posted stays
    /// in the peer's table, as rsockets' `riounmap` sends nothing).
    pub fn free_slot(&mut self, i: u16) {
        if let Some(s) = self.slots.get_mut(i as usize) {
            *s = Slot::Free;
        }
        self.pending.retain(|&p| p != i);
    }

    /// Whether slot `i`'s announcement is still to be posted.
    pub fn is_pending(&self, i: u16) -> bool {
        self.pending.contains(&i)
    }

    /// The next announcement to post now, if one is queued and can be sent: its transfer
    /// and the entry (rsockets sends them before any later data).
    pub fn next_announcement(&mut self) -> Option<(Transfer, IoMapEntry)> {
        let &i = self.pending.front()?;
        if !(self.can_send_any() && self.writable && self.connected) {
            return None;
        }
        self.pending.pop_front();
        let Slot::Mapped(e) = self.slots[i as usize] else {
            return None;
        };
        Some((self.plan_iomap(i), e))
    }

    /// Whether a direct write (into a peer's mapping) can start: a send queue entry and
    /// the send ring's low-water mark; no credit (nothing is received at the peer).
    pub fn can_write_direct(&self) -> bool {
        self.sqe_avail > 0 && self.sbuf_avail >= SNDLOWAT.min(self.sizes.sbuf)
    }

    /// Plans a direct write of at most `left`, `olen` and `room` bytes (call when
    /// [`Ledger::can_write_direct`]) to `remote`: ring space and a send queue entry. Its
    /// `imm` is only the `wr_id` (a plain RDMA WRITE carries none).
    pub fn plan_direct(
        &mut self,
        left: usize,
        olen: u32,
        room: u32,
        remote: (u64, u32),
    ) -> Transfer {
        let xfer = (left.min(u32::MAX as usize) as u32)
            .min(olen)
            .min(self.sbuf_avail)
            .min(room);
        self.sqe_avail -= 1;
        let (first, second) = self.take_ring(xfer);
        Transfer {
            first,
            second,
            remote,
            imm: Msg::encode(MsgOp::WRITE, xfer),
            inline: xfer <= self.sizes.inline,
        }
    }

    /// Whether no data transfer is in flight (every one posted has completed).
    fn sends_idle(&self) -> bool {
        self.sqe_avail == self.sizes.sq - CTRL_SLOTS
    }

    /// A write starts: if no transfer is in flight, its transfers start at [`OLAP_START`]
    /// again, so that its first bytes go out while the rest is copied (rsockets' overlap).
    /// Unlike rsockets, which restarts at `OLAP_START` in every `rsend`, the size carries
    /// over from the previous write while its transfers are still in flight: the pipe is
    /// busy then, and a small transfer gains no overlap. Restarting in every call made a
    /// stream of 32 KB writes (or a tokio writer's partial writes) five messages each; per
    /// message the peers pay a post, an ACK, two completions and a receive repost.
    pub fn start_write(&mut self) {
        if self.sends_idle() {
            self.olen = OLAP_START;
        }
    }

    /// The most bytes the next transfer of this write may carry (pass it to
    /// [`Ledger::plan`]); each transfer doubles it, up to [`MAX_TRANSFER`].
    pub fn next_olen(&mut self) -> u32 {
        let o = self.olen;
        if self.olen < MAX_TRANSFER {
            self.olen <<= 1;
        }
        o
    }

    /// Whether a write with `left` bytes still to send may post its next transfer now:
    /// [`Ledger::can_send`], and, while earlier transfers are in flight, as much free send
    /// ring as that transfer may carry (`left`, [`Ledger::next_olen`]'s size, at most half
    /// the ring). Without the second part a full ring is refilled by the bytes each single
    /// completion frees, so once its transfers are small (a ramp, a short write) they stay
    /// small for as long as the writer keeps the ring full: a 32 KB writer on tokio sent
    /// 2 KB messages. Completions of the transfers in flight free the space, so the wait
    /// ends; an idle sending side starts at once.
    pub fn can_send_for(&self, left: usize) -> bool {
        if !self.can_send() {
            return false;
        }
        if self.sends_idle() {
            return true;
        }
        let want = (left.min(self.olen as usize) as u32).min(self.sizes.sbuf / 2);
        self.sbuf_avail >= want
    }

    /// Plans the next transfer of at most `left` and `olen` bytes (call when
    /// [`Ledger::can_send`]): takes send ring space, a credit, and target SGL space.
    pub fn plan(&mut self, left: usize, olen: u32) -> Transfer {
        let t = &mut self.target[self.target_sge];
        let xfer = (left.min(u32::MAX as usize) as u32)
            .min(olen)
            .min(self.sbuf_avail)
            .min(t.length);
        let remote = (t.addr, t.key);
        t.addr = t.addr.wrapping_add(xfer as u64);
        t.length -= xfer;
        if t.length == 0 {
            self.target_sge = (self.target_sge + 1) % SGL_ENTRIES as usize;
        }
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        let (first, second) = self.take_ring(xfer);
        Transfer {
            first,
            second,
            remote,
            imm: Msg::encode(MsgOp::DATA, xfer),
            inline: xfer <= self.sizes.inline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ConnData, FLAG_NET};

    fn sizes() -> Sizes {
        Sizes {
            sbuf: 8192,
            rbuf: 8192,
            sq: 16,
            rq: 16,
            inline: 64,
            iomap: 2,
        }
    }

    fn peer(credits: u16, buf: u32) -> ConnData {
        ConnData {
            version: 1,
            flags: 0,
            credits,
            target_iomap_size: 0,
            target_sgl: RsSge {
                addr: 0x10_000,
                key: 7,
                length: 2,
            },
            data_buf: RsSge {
                addr: 0x20_000,
                key: 9,
                length: buf,
            },
        }
    }

    const NONE: fn(usize) -> RsSge = |_| panic!("no slot read expected");

    #[test]
    fn data_within_room_is_queued_and_read_in_order() {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::DATA, 3000)), 3000, NONE);
        l.on_recv(Some(Msg::encode(MsgOp::DATA, 1096)), 1096, NONE);
        assert_eq!(l.fault, None);
        assert_eq!(l.take(100), Some((0, 100)));
        assert_eq!(l.take(5000), Some((100, 2900)));
        assert_eq!(l.take(5000), Some((3000, 1096)));
        assert_eq!(l.take(1), None);
        // The whole first half was read: a credit update with a new entry is due.
        assert!(l.credits_due());
        let u = l.credit_update(0x5000_0000, 0x42);
        let (bytes, at, key, _) = u.entry.unwrap();
        assert_eq!(
            RsSge::from_bytes(&bytes, false),
            RsSge {
                addr: 0x5000_0000 + 4096,
                key: 0x42,
                length: 4096
            }
        );
        // The peer's slot 1 first (slot 0 was the connection data's buffer).
        assert_eq!((at, key), (0x10_000 + 16, 7));
        assert_eq!(
            Msg::decode(u.imm),
            Msg {
                op: MsgOp::SGL,
                data: 2 + 16
            }
        );
    }

    #[test]
    fn overrun_is_refused() {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        // Only half the ring (4096) is published at first.
        l.on_recv(Some(Msg::encode(MsgOp::DATA, 4097)), 4097, NONE);
        assert_eq!(
            l.fault,
            Some(Fault::Wire(WireError::Overrun {
                len: 4097,
                room: 4096
            }))
        );
        assert!(!l.readable && !l.writable && !l.has_data());
        // Lying sizes of every kind never panic.
        for len in [u32::MAX, 1 << 29, 8193, 4096 + 1] {
            let mut l = Ledger::new(sizes(), &peer(16, 4096));
            l.on_recv(Some(Msg::encode(MsgOp::DATA, len)), len, NONE);
            assert!(l.fault.is_some() || len & ((1 << 29) - 1) <= 4096, "{len}");
        }
    }

    #[test]
    fn more_messages_than_credits_are_refused() {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        for _ in 0..17 {
            l.on_recv(Some(Msg::encode(MsgOp::DATA, 1)), 1, NONE);
        }
        assert_eq!(l.fault, None);
        l.on_recv(Some(Msg::encode(MsgOp::DATA, 1)), 1, NONE);
        assert_eq!(l.fault, Some(Fault::Wire(WireError::TooManyMessages(18))));
    }

    #[test]
    fn reserved_types_missing_immediate_and_odd_sgl_writes_are_refused() {
        for op in [1u8, 2, 3, 5] {
            let mut l = Ledger::new(sizes(), &peer(16, 4096));
            l.on_recv(Some(Msg::encode(MsgOp(op), 0)), 0, NONE);
            assert_eq!(l.fault, Some(Fault::Wire(WireError::ReservedOp(MsgOp(op)))));
        }
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(None, 0, NONE);
        assert_eq!(l.fault, Some(Fault::Wire(WireError::NoImmediate)));
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::SGL, 3)), 17, NONE);
        assert_eq!(l.fault, Some(Fault::Wire(WireError::SglWriteLength(17))));
        // Unknown control values are ignored, as rsockets does; so are iomap updates of an
        // entry of our table.
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::CTRL, 99)), 0, NONE);
        l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 1)), 24, NONE);
        assert_eq!(l.fault, None);
        // An update beyond our table (2 entries here; none without RDMA_IOMAPSIZE), or one
        // whose write is not one entry, ends the stream naming it.
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 2)), 24, NONE);
        let want = WireError::IomapIndex { index: 2, size: 2 };
        assert_eq!(l.fault, Some(Fault::Wire(want.clone())));
        assert!(want.to_string().contains("entry 2"), "{want}");
        let mut no_table = sizes();
        no_table.iomap = 0;
        let mut l = Ledger::new(no_table, &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 0)), 24, NONE);
        assert_eq!(
            l.fault,
            Some(Fault::Wire(WireError::IomapIndex { index: 0, size: 0 }))
        );
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 0)), 16, NONE);
        assert_eq!(l.fault, Some(Fault::Wire(WireError::IomapWriteLength(16))));
        // A direct write's local tag is no message.
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::WRITE, 8)), 8, NONE);
        assert_eq!(
            l.fault,
            Some(Fault::Wire(WireError::ReservedOp(MsgOp::WRITE)))
        );
    }

    #[test]
    fn iomap_announcements_and_direct_writes() {
        let mut p = peer(3, 4096);
        p.flags = crate::wire::FLAG_IOMAP;
        p.target_iomap_size = 4;
        let mut l = Ledger::new(sizes(), &p);
        // The entry goes after the peer's 2-entry SGL, under its rkey, and takes a credit
        // and 24 bytes of ring (INLINE: 24 <= 64).
        let t = l.plan_iomap(3);
        assert_eq!(t.remote, (0x10_000 + 2 * 16 + 3 * 24, 7));
        assert_eq!((t.first, t.second, t.inline), ((0, 24), 0, true));
        assert_eq!(
            Msg::decode(t.imm),
            Msg {
                op: MsgOp::IOMAP_SGL,
                data: 3
            }
        );
        assert_eq!(l.sseq_no, 1);
        // A direct write: no credit, bounded by the room left in the mapping.
        let d = l.plan_direct(10_000, MAX_TRANSFER, 100, (0xaa_0000, 5));
        assert_eq!(
            (d.first, d.second, d.remote),
            ((24, 100), 0, (0xaa_0000, 5))
        );
        assert_eq!(
            Msg::decode(d.imm),
            Msg {
                op: MsgOp::WRITE,
                data: 100
            }
        );
        assert_eq!(l.sseq_no, 1);
        // Ring space comes back with the completions.
        l.on_send(t.imm as u64, true, &"ok");
        l.on_send(d.imm as u64, true, &"ok");
        assert_eq!(l.sbuf_avail, 8192);
        assert!(l.all_sends_done());
        // A direct write wraps the ring like data does.
        l.sbuf_head = 8100;
        let d = l.plan_direct(10_000, MAX_TRANSFER, 200, (0, 0));
        assert_eq!((d.first, d.second), ((8100, 92), 108));
        assert!(!d.inline);
        // Credits do not bound direct writes, the send queue does.
        let mut l = Ledger::new(sizes(), &p);
        for _ in 0..3 {
            l.plan(1, MAX_TRANSFER);
        }
        assert!(!l.can_send() && l.can_write_direct());
        for _ in 0..(16 - CTRL_SLOTS - 3) {
            l.plan_direct(1, MAX_TRANSFER, 1, (0, 0));
        }
        assert!(!l.can_write_direct());
    }

    #[test]
    fn mapping_slots_and_announcements_go_before_data() {
        let mut p = peer(16, 4096);
        p.flags = crate::wire::FLAG_IOMAP;
        p.target_iomap_size = 2;
        let mut l = Ledger::new(sizes(), &p);
        assert_eq!(l.peer_iomap_entries(), 2);
        assert_eq!(
            (l.reserve_slot(), l.reserve_slot(), l.reserve_slot()),
            (Some(0), Some(1), None)
        );
        let e = |o| IoMapEntry {
            offset: o,
            sge: RsSge {
                addr: 0x9000,
                key: 3,
                length: 64,
            },
        };
        l.fill_slot(1, e(100));
        l.fill_slot(0, e(200));
        // Queued announcements hold data back until they are posted, in order.
        assert!(l.is_pending(1) && !l.can_send());
        let (t, got) = l.next_announcement().unwrap();
        assert_eq!((Msg::decode(t.imm).data, got), (1, e(100)));
        // Slot 0 is unmapped before its announcement went out: it is dropped.
        l.free_slot(0);
        assert!(!l.is_pending(0) && l.next_announcement().is_none());
        assert!(l.can_send());
        assert_eq!(l.reserve_slot(), Some(0));
        // A peer without a table (flag clear, whatever the size says) gives no slots.
        p.flags = 0;
        let mut l = Ledger::new(sizes(), &p);
        assert_eq!((l.peer_iomap_entries(), l.reserve_slot()), (0, None));
    }

    #[test]
    fn sends_stop_at_credits_and_target_space_and_resume_on_updates() {
        let mut l = Ledger::new(sizes(), &peer(2, 3000));
        assert!(l.can_send());
        let t = l.plan(10_000, MAX_TRANSFER);
        assert_eq!(t.first, (0, 3000));
        assert_eq!((t.second, t.remote), (0, (0x20_000, 9)));
        assert_eq!(
            Msg::decode(t.imm),
            Msg {
                op: MsgOp::DATA,
                data: 3000
            }
        );
        // Target entry 0 is used up and entry 1 is still empty: nothing more to send.
        assert!(!l.can_send());
        // The peer publishes slot 1 and grants credits up to 5.
        l.on_recv(Some(Msg::encode(MsgOp::SGL, 5)), 16, |i| {
            assert_eq!(i, 1);
            RsSge {
                addr: 0x30_000,
                key: 11,
                length: 100,
            }
        });
        assert!(l.can_send());
        let t = l.plan(10_000, MAX_TRANSFER);
        assert_eq!((t.first, t.remote), ((3000, 100), (0x30_000, 11)));
        assert!(!l.can_send());
        // Slot 0 next; credits: sseq_no is 2, the limit 2 would stop us.
        l.on_recv(Some(Msg::encode(MsgOp::SGL, 2)), 16, |i| {
            assert_eq!(i, 0);
            RsSge {
                addr: 0x40_000,
                key: 12,
                length: 9000,
            }
        });
        assert!(!l.can_send(), "no credits left");
        l.on_recv(Some(Msg::encode(MsgOp::SGL, 9)), 0, NONE);
        assert!(l.can_send());
        // The ring (8192 bytes) has 8192 - 3100 free; a transfer wraps at its end.
        let t = l.plan(10_000, MAX_TRANSFER);
        assert_eq!(t.first, (3100, 5092));
        assert_eq!(t.second, 0);
        assert!(!l.can_send(), "ring full");
        l.on_send(Msg::encode(MsgOp::DATA, 3000) as u64, true, &"ok");
        let t = l.plan(10_000, MAX_TRANSFER);
        assert_eq!((t.first, t.second), ((0, 3000), 0));
    }

    /// Writes of 32,000 bytes while earlier transfers are still in flight: the first write
    /// ramps up from `OLAP_START` (five transfers), every later one goes out as one transfer;
    /// with the ramp restarted in every write (rsockets' `rsend`), each was five.
    #[test]
    fn writes_while_sends_are_in_flight_keep_their_transfer_size() {
        let big = Sizes {
            sbuf: 1 << 20,
            sq: 384,
            ..sizes()
        };
        let mut l = Ledger::new(big, &peer(1000, 1 << 30));
        let mut inflight = VecDeque::new();
        let mut per_write = Vec::new();
        for _ in 0..20 {
            let (mut left, mut n) = (32_000usize, 0);
            l.start_write();
            while left > 0 {
                assert!(l.can_send());
                let olen = l.next_olen();
                let t = l.plan(left, olen);
                left -= (t.first.1 + t.second) as usize;
                inflight.push_back(t.imm);
                n += 1;
            }
            per_write.push(n);
            // The oldest transfer completes: the pipe stays busy.
            let done = inflight.pop_front().unwrap();
            l.on_send(done as u64, true, &"ok");
        }
        assert_eq!(per_write[0], 5, "{per_write:?}");
        assert!(per_write[1..].iter().all(|&n| n == 1), "{per_write:?}");
        // Once every transfer has completed, a write starts small again (its first bytes go
        // out at once).
        while let Some(imm) = inflight.pop_front() {
            l.on_send(imm as u64, true, &"ok");
        }
        l.start_write();
        let olen = l.next_olen();
        assert_eq!(olen, OLAP_START);
        l.plan(32_000, olen);
        assert_eq!(l.next_olen(), 2 * OLAP_START);
    }

    /// A writer that always has more to send and keeps the 128 KiB ring full, one
    /// completion at a time: after the first ring's worth, every transfer is a full 64 KiB.
    /// Posting as soon as `can_send` (2 KiB free) held, each completion's bytes went out
    /// again as one transfer of the same size, so the ramp's 2 KiB to 32 KiB transfers
    /// recurred for as long as the ring stayed full.
    #[test]
    fn a_full_ring_is_refilled_in_large_transfers() {
        let s = Sizes {
            sbuf: 128 * 1024,
            sq: 384,
            ..sizes()
        };
        let mut l = Ledger::new(s, &peer(60_000, 1 << 30));
        let mut inflight = VecDeque::new();
        let mut lens = Vec::new();
        l.start_write();
        for _ in 0..100 {
            while l.can_send_for(usize::MAX) {
                let olen = l.next_olen();
                let t = l.plan(1 << 30, olen);
                lens.push(t.first.1 + t.second);
                inflight.push_back(t.imm);
            }
            let done = inflight.pop_front().unwrap();
            l.on_send(done as u64, true, &"ok");
        }
        assert_eq!(&lens[..6], &[2048, 4096, 8192, 16384, 32768, 65536]);
        assert!(
            lens[7..].iter().all(|&n| n == MAX_TRANSFER),
            "{:?}",
            &lens[..20]
        );
        // A short write still goes out at once (a transfer as large as it needs fits).
        let done = inflight.pop_front().unwrap();
        l.on_send(done as u64, true, &"ok");
        assert!(l.can_send_for(100));
    }

    #[test]
    fn shutdown_and_disconnect_messages() {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::DATA, 5)), 5, NONE);
        l.on_recv(Some(Msg::encode(MsgOp::CTRL, Ctrl::SHUTDOWN.0)), 0, NONE);
        // Queued data stays readable, then EOF; we may still send.
        assert!(l.has_data() && !l.readable && l.writable);
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::CTRL, Ctrl::DISCONNECT.0)), 0, NONE);
        assert!(!l.readable && !l.writable && !l.connected && l.fault.is_none());
        assert!(!l.credits_due());
    }

    #[test]
    fn failed_send_completion_ends_the_stream() {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        let t = l.plan(10, MAX_TRANSFER);
        assert!(t.inline);
        l.on_send(t.imm as u64, false, &"RETRY_EXC_ERR");
        assert!(matches!(l.fault, Some(Fault::Io(ref s)) if s.contains("RETRY_EXC_ERR")));
        assert!(l.all_sends_done());
    }

    #[test]
    fn entries_for_a_big_endian_peer_are_swapped() {
        let mut p = peer(16, 4096);
        p.flags = FLAG_NET;
        let mut l = Ledger::new(sizes(), &p);
        l.on_recv(Some(Msg::encode(MsgOp::DATA, 4096)), 4096, NONE);
        while l.take(usize::MAX).is_some() {}
        let (bytes, ..) = l.credit_update(0x1000, 5).entry.unwrap();
        assert_eq!(RsSge::from_bytes(&bytes, true).length, 4096);
    }

    /// Fuzz-style: a hostile peer's arbitrary message sequence (fixed-seed generator) with
    /// reads and credit updates interleaved never panics, never hands out a range outside
    /// the ring, and keeps the ring accounting whole until it faults.
    #[test]
    fn arbitrary_message_sequences_keep_the_ring_whole() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2_000 {
            let mut l = Ledger::new(sizes(), &peer(16, 4096));
            for _ in 0..64 {
                let r = next();
                let imm = match r % 5 {
                    0 => Msg::encode(MsgOp::DATA, (r >> 8) as u32 % 5000),
                    1 => r as u32,
                    2 => Msg::encode(MsgOp::SGL, (r >> 8) as u32),
                    3 => Msg::encode(MsgOp::IOMAP_SGL, (r >> 8) as u32 % 4),
                    _ => Msg::encode(MsgOp::CTRL, (r >> 8) as u32 % 4),
                };
                let bl = if r & 0x100 != 0 {
                    if r & 0x200 != 0 {
                        24
                    } else {
                        16
                    }
                } else {
                    (r >> 40) as u32 % 20
                };
                l.on_recv(Some(imm), bl, |_| RsSge {
                    addr: r,
                    key: 1,
                    length: (r >> 3) as u32,
                });
                if let Some((off, n)) = l.take((r >> 20) as usize % 9000 + 1) {
                    assert!(off + n <= 8192);
                }
                if l.credits_due() {
                    l.credit_update(0, 0);
                }
                if l.fault.is_none() {
                    let queued: u32 = l.rmsg.iter().sum();
                    assert_eq!(l.rbuf_avail + l.room + queued, 8192);
                }
                if l.can_send() {
                    let t = l.plan((r >> 30) as usize % 70_000 + 1, MAX_TRANSFER);
                    assert!(t.first.0 + t.first.1 <= 8192 && t.second <= t.first.0);
                }
            }
        }
    }
}
