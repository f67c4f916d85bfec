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
/// The flag in the `wr_id` of a data transfer sent from the caller's registration
/// ([`Ledger::plan_registered`]): it took a send queue entry, no send ring space.
pub(crate) const WR_ID_REG: u64 = 1 << 62;

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
    /// Transfers from callers' registrations posted, and completed (in order: one RC send
    /// queue completes in posting order).
    pub reg_posted: u64,
    pub reg_done: u64,
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
            reg_posted: 0,
            reg_done: 0,
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
            _ if wr_id & WR_ID_REG != 0 => {
                self.sqe_avail += 1;
                self.reg_done += 1;
            }
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

    /// Bytes queued to be read (received, not yet taken).
    pub fn queued(&self) -> usize {
        self.rmsg.iter().map(|&n| n as usize).sum()
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

    /// Whether a transfer from the caller's registration can start: as [`Ledger::can_send`]
    /// but without send ring space (it takes none).
    pub fn can_send_registered(&self) -> bool {
        self.pending.is_empty()
            && self.sqe_avail > 0
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_sge].length != 0
    }

    /// Plans the next transfer of at most `left` bytes (and [`MAX_TRANSFER`]) straight from
    /// the caller's registration (call when [`Ledger::can_send_registered`]): the same DATA
    /// message as [`Ledger::plan`]'s (the peer cannot tell), taking a credit, a send queue
    /// entry and target SGL space but no send ring. `first.1` is the length (`first.0` and
    /// `second` are 0); post it with `wr_id` `imm | WR_ID_REG`.
    pub fn plan_registered(&mut self, left: usize) -> Transfer {
        let t = &mut self.target[self.target_sge];
        let xfer = (left.min(u32::MAX as usize) as u32)
            .min(MAX_TRANSFER)
            .min(t.length);
        let remote = (t.addr, t.key);
        t.addr = t.addr.wrapping_add(xfer as u64);
        t.length -= xfer;
        if t.length == 0 {
            self.target_sge = (self.target_sge + 1) % SGL_ENTRIES as usize;
        }
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.reg_posted += 1;
        Transfer {
            first: (0, xfer),
            second: 0,
            remote,
            imm: Msg::encode(MsgOp::DATA, xfer),
            inline: xfer <= self.sizes.inline,
        }
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
mod tests;
