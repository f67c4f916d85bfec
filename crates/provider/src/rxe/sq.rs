//! Posting to an rxe send queue: build `rxe_send_wqe`s in the mapped ring, then ring the
//! doorbell ([`super::post_send_doorbell`]).
//!
//! What the Linux 6.1 kernel reads from a user send WQE (`rxe_req.c`, `rxe_comp.c`): `wr`
//! (`wr_id`, `opcode`, `send_flags`, `ex`, the `wr` union arm of the opcode; for UD `remote_qpn`,
//! `remote_qkey`, `ah_num`), `iova` (remote address of RDMA and atomic operations), `dma`
//! (`length` = `resid` = payload bytes, `num_sge`, `cur_sge` = `sge_offset` = 0) and the SGE
//! array or inline data after the header; `state` must be 0 (posted). It recomputes `mask`
//! from the opcode itself and owns `status`, `first_psn`, `last_psn`, `ack_length`,
//! `has_rd_atomic`; `ssn` is not read. We write the whole 208-byte header each time (kernel
//! fields zeroed) so nothing is left over from the slot's previous use.
//!
//! Operations per QP type that the 6.1 requester runs (anything else would complete with
//! `LOC_QP_OP_ERR` and move the QP to error, so it is refused here):
//!
//! | op | RC | UC | UD |
//! |----|----|----|----|
//! | SEND, SEND_WITH_IMM | yes | yes | yes |
//! | RDMA_WRITE, RDMA_WRITE_WITH_IMM | yes | yes | no |
//! | SEND_WITH_INV, RDMA_READ, ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD, LOCAL_INV | yes | no | no |
//!
//! INLINE is possible for the SEND and RDMA_WRITE families (the opcodes that carry outbound
//! payload). Immediate data goes into the WQE in network byte order, as rxe puts it on the wire.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::BorrowedFd;
use std::ptr;

use rverbs_uverbs::{Error, SendFlags, SendOp, SendWr};
use zerocopy::FromZeros;

use super::abi::{
    rxe_send_wqe, rxe_sge, rxe_wr_atomic, rxe_wr_rdma, rxe_wr_ud, send_flags,
    RXE_SEND_WQE_SGE_OFFSET,
};
use super::doorbell::post_send_doorbell;
use super::queue::{QueueKind, RxeQueue};
use super::{PostError, PostErrorReason};

/// The transport of the QP a send queue belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RxeQpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl RxeQpType {
    /// From the `ib_uverbs_qp_type` number (RC 2, UC 3, UD 4); `None` for types rxe user QPs
    /// cannot be.
    pub const fn from_ib_qp_type(raw: u8) -> Option<Self> {
        match raw {
            2 => Some(RxeQpType::Rc),
            3 => Some(RxeQpType::Uc),
            4 => Some(RxeQpType::Ud),
            _ => None,
        }
    }
}

/// The parameters of a send queue, as the kernel returned them at QP creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxeSqConfig {
    pub qp_type: RxeQpType,
    /// `max_send_sge` from the create QP response (rxe rounds it up).
    pub max_sge: u32,
    /// `max_inline_data` from the create QP response (rxe rounds it up).
    pub max_inline: u32,
    /// The QP was created with `sq_sig_all`: every WQE is posted SIGNALED.
    pub sig_all: bool,
}

/// The user side of one rxe send queue.
#[derive(Debug)]
pub struct RxeSq {
    queue: RxeQueue,
    cfg: RxeSqConfig,
    ssn: u32,
}

/// Where the bytes after the WQE header come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Payload {
    None,
    Sges,
    Inline,
}

const ALLOWED_FLAGS: u32 =
    send_flags::FENCE | send_flags::SIGNALED | send_flags::SOLICITED | send_flags::INLINE;

fn op_name(op: &SendOp) -> &'static str {
    match op {
        SendOp::Send => "SEND",
        SendOp::SendWithImm { .. } => "SEND_WITH_IMM",
        SendOp::SendWithInv { .. } => "SEND_WITH_INV",
        SendOp::RdmaWrite { .. } => "RDMA_WRITE",
        SendOp::RdmaWriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
        SendOp::RdmaRead { .. } => "RDMA_READ",
        SendOp::AtomicCmpSwp { .. } => "ATOMIC_CMP_AND_SWP",
        SendOp::AtomicFetchAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        SendOp::LocalInv { .. } => "LOCAL_INV",
    }
}

fn supported(op: &SendOp, qp_type: RxeQpType) -> bool {
    match op {
        SendOp::Send | SendOp::SendWithImm { .. } => true,
        SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => qp_type != RxeQpType::Ud,
        SendOp::SendWithInv { .. }
        | SendOp::RdmaRead { .. }
        | SendOp::AtomicCmpSwp { .. }
        | SendOp::AtomicFetchAdd { .. }
        | SendOp::LocalInv { .. } => qp_type == RxeQpType::Rc,
    }
}

impl RxeSq {
    /// Wraps a validated view of a send queue mapping. Fails if the view is not a send queue
    /// or its elements cannot hold `max_sge` SGEs / `max_inline` bytes after the WQE header.
    pub fn new(queue: RxeQueue, cfg: RxeSqConfig) -> io::Result<Self> {
        const OP: &str = "rxe send queue";
        if queue.kind() != QueueKind::Send {
            return Err(Error::invalid(
                OP,
                format!("a {} view cannot be used as a send queue", queue.kind()),
            )
            .into());
        }
        let sges = u64::from(cfg.max_sge) * core::mem::size_of::<rxe_sge>() as u64;
        let need = RXE_SEND_WQE_SGE_OFFSET as u64 + sges.max(u64::from(cfg.max_inline));
        if need > queue.elem_size() as u64 {
            return Err(Error::protocol(
                OP,
                format!(
                    "{}-byte elements cannot hold a {RXE_SEND_WQE_SGE_OFFSET}-byte WQE with {} \
                     SGEs or {} inline bytes",
                    queue.elem_size(),
                    cfg.max_sge,
                    cfg.max_inline
                ),
            )
            .into());
        }
        Ok(Self { queue, cfg, ssn: 0 })
    }

    /// The underlying queue view.
    pub fn queue(&self) -> &RxeQueue {
        &self.queue
    }

    /// The parameters given at creation.
    pub fn config(&self) -> RxeSqConfig {
        self.cfg
    }

    /// Slots free right now (the kernel may free more at any time).
    pub fn free_slots(&self) -> u32 {
        self.queue.capacity() - self.queue.len()
    }

    /// Checks `wr` and builds its WQE header, without touching the ring.
    fn build(&self, wr: &SendWr<'_>) -> Result<(rxe_send_wqe, Payload), PostErrorReason> {
        let op = &wr.op;
        let name = op_name(op);
        let qp_type = self.cfg.qp_type;
        if !supported(op, qp_type) {
            return Err(PostErrorReason::UnsupportedOp { op: name, qp_type });
        }
        let mut flags = wr.flags.bits();
        if flags & !ALLOWED_FLAGS != 0 {
            return Err(PostErrorReason::UnsupportedFlags {
                flags: flags & !ALLOWED_FLAGS,
            });
        }
        if self.cfg.sig_all {
            flags |= send_flags::SIGNALED;
        }
        let inline = wr.flags.contains(SendFlags::INLINE);
        let num_sge = wr.sge.len();
        let is_local = matches!(op, SendOp::LocalInv { .. });
        if is_local && num_sge != 0 {
            return Err(PostErrorReason::SgeOnLocalOp { op: name, num_sge });
        }
        if num_sge > self.cfg.max_sge as usize {
            return Err(PostErrorReason::TooManySge {
                num_sge,
                max_sge: self.cfg.max_sge,
            });
        }
        let len = wr.total_len();
        let Ok(len32) = u32::try_from(len) else {
            return Err(PostErrorReason::LengthOverflow { len });
        };
        if inline {
            let payload_op = matches!(
                op,
                SendOp::Send
                    | SendOp::SendWithImm { .. }
                    | SendOp::SendWithInv { .. }
                    | SendOp::RdmaWrite { .. }
                    | SendOp::RdmaWriteWithImm { .. }
            );
            if !payload_op {
                return Err(PostErrorReason::InlineNotAllowed { op: name });
            }
            if len > u64::from(self.cfg.max_inline) {
                return Err(PostErrorReason::InlineTooLong {
                    len,
                    max_inline: self.cfg.max_inline,
                });
            }
        }

        let mut wqe = rxe_send_wqe::new_zeroed();
        wqe.wr.wr_id = wr.wr_id;
        wqe.wr.opcode = op.wr_opcode();
        wqe.wr.send_flags = flags;
        match *op {
            SendOp::Send => {}
            // Immediate data travels big-endian: rxe copies `ex` into the packet unchanged.
            SendOp::SendWithImm { imm } => wqe.wr.ex = imm.to_be(),
            SendOp::SendWithInv { invalidate_rkey } | SendOp::LocalInv { invalidate_rkey } => {
                wqe.wr.ex = invalidate_rkey;
            }
            SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaRead { remote_addr, rkey } => {
                wqe.wr.wr.set_rdma(&rxe_wr_rdma {
                    remote_addr,
                    rkey,
                    reserved: 0,
                });
                wqe.iova = remote_addr;
            }
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                wqe.wr.ex = imm.to_be();
                wqe.wr.wr.set_rdma(&rxe_wr_rdma {
                    remote_addr,
                    rkey,
                    reserved: 0,
                });
                wqe.iova = remote_addr;
            }
            SendOp::AtomicCmpSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                check_atomic(len, remote_addr)?;
                wqe.wr.wr.set_atomic(&rxe_wr_atomic {
                    remote_addr,
                    compare_add: compare,
                    swap,
                    rkey,
                    reserved: 0,
                });
                wqe.iova = remote_addr;
            }
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                check_atomic(len, remote_addr)?;
                wqe.wr.wr.set_atomic(&rxe_wr_atomic {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                    reserved: 0,
                });
                wqe.iova = remote_addr;
            }
        }
        if qp_type == RxeQpType::Ud {
            let Some(ud) = wr.ud else {
                return Err(PostErrorReason::MissingUdDest);
            };
            if ud.ah_num == 0 {
                return Err(PostErrorReason::NoAhNum);
            }
            let mut arm = rxe_wr_ud::new_zeroed();
            arm.remote_qpn = ud.remote_qpn;
            arm.remote_qkey = ud.remote_qkey;
            arm.ah_num = ud.ah_num;
            wqe.wr.wr.set_ud(&arm);
        }
        let payload = if is_local {
            Payload::None
        } else {
            wqe.dma.length = len32;
            wqe.dma.resid = len32;
            wqe.dma.num_sge = num_sge as u32;
            if inline {
                Payload::Inline
            } else {
                Payload::Sges
            }
        };
        wqe.ssn = self.ssn;
        Ok((wqe, payload))
    }

    /// Writes a built WQE and its payload into slot `index`.
    ///
    /// # Safety
    ///
    /// The slot must be free (not between the kernel's consumer and our producer); for an
    /// inline payload every SGE must name `length` readable bytes at `addr`.
    unsafe fn write(&self, index: u32, wqe: &rxe_send_wqe, payload: Payload, wr: &SendWr<'_>) {
        let slot = self.queue.slot(index);
        // SAFETY: the slot is 8-aligned and in bounds for elem_size bytes, which `new` checked
        // hold the header plus max_sge SGEs or max_inline bytes, and `build` checked the WR
        // against those limits. The kernel does not read the slot before we publish it.
        unsafe { ptr::write(slot.cast::<rxe_send_wqe>(), *wqe) };
        let data = slot.wrapping_add(RXE_SEND_WQE_SGE_OFFSET);
        match payload {
            Payload::None => {}
            Payload::Sges => {
                for (i, s) in wr.sge.iter().enumerate() {
                    let sge = rxe_sge {
                        addr: s.addr,
                        length: s.length,
                        lkey: s.lkey,
                    };
                    // SAFETY: i < num_sge <= max_sge, so the SGE is inside the slot; the SGE
                    // array starts 8-aligned at offset 208.
                    unsafe { ptr::write(data.cast::<rxe_sge>().add(i), sge) };
                }
            }
            Payload::Inline => {
                let mut off = 0usize;
                for s in wr.sge {
                    let len = s.length as usize;
                    if len == 0 {
                        // Nothing to copy, and `addr` need not be a valid pointer.
                        continue;
                    }
                    // SAFETY: the caller guarantees `addr` names `len` readable bytes; the
                    // total is at most max_inline, which fits in the slot after the header;
                    // user memory and the ring never overlap.
                    unsafe {
                        ptr::copy_nonoverlapping(s.addr as usize as *const u8, data.add(off), len)
                    };
                    off += len;
                }
            }
        }
    }

    /// Posts `wrs` in order and publishes them to the kernel with one producer-index store.
    /// Returns `wrs.len()`. Stops at the first request that is invalid or finds the queue
    /// full: the [`PostError`] says how many were posted before it. Does not ring the
    /// doorbell (see [`post_send_doorbell`] / [`RxeSq::post_and_ring`]). Never allocates.
    ///
    /// # Safety
    ///
    /// For every posted request without INLINE, the memory its SGEs name must stay allocated
    /// (and registered under the given lkey) until its completion is polled or the QP is
    /// destroyed: the kernel reads it (sends, writes) or writes it (RDMA READ and atomic
    /// results) at any time in between, so it must not be freed, and memory the device writes
    /// must not be accessed meanwhile. For requests with INLINE, each SGE's `addr` must point
    /// to `length` readable bytes during this call (they are copied into the WQE; the lkey is
    /// ignored).
    pub unsafe fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<usize, PostError> {
        let start = self.queue.load_own();
        let mut prod = start;
        let mut cons = self.queue.load_peer();
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |reason| PostError {
                queue: QueueKind::Send,
                posted: i,
                reason,
            };
            let (wqe, payload) = match self.build(wr) {
                Ok(b) => b,
                Err(reason) => {
                    self.publish(start, prod);
                    return Err(fail(reason));
                }
            };
            let next = self.queue.next(prod);
            if next == cons {
                cons = self.queue.load_peer();
                if next == cons {
                    self.publish(start, prod);
                    return Err(fail(PostErrorReason::QueueFull {
                        capacity: self.queue.capacity(),
                    }));
                }
            }
            // SAFETY: `prod` is free (next != cons); the inline contract is the caller's.
            unsafe { self.write(prod, &wqe, payload, wr) };
            self.ssn = self.ssn.wrapping_add(1);
            prod = next;
        }
        self.publish(start, prod);
        Ok(wrs.len())
    }

    fn publish(&self, start: u32, prod: u32) {
        if prod != start {
            self.queue.publish_own(prod);
        }
    }

    /// [`post`](Self::post), then the doorbell on `cmd_fd` for the QP with kernel handle
    /// `qp_handle` if anything was posted (also when a later request failed). A doorbell
    /// failure is reported in preference to the post error.
    ///
    /// # Safety
    ///
    /// As for [`post`](Self::post).
    pub unsafe fn post_and_ring(
        &mut self,
        cmd_fd: BorrowedFd<'_>,
        qp_handle: u32,
        wrs: &[SendWr<'_>],
    ) -> io::Result<usize> {
        // SAFETY: forwarded contract.
        let r = unsafe { self.post(wrs) };
        let posted = match &r {
            Ok(n) => *n,
            Err(e) => e.posted,
        };
        if posted > 0 {
            post_send_doorbell(cmd_fd, qp_handle)?;
        }
        r.map_err(io::Error::from)
    }
}

fn check_atomic(len: u64, remote_addr: u64) -> Result<(), PostErrorReason> {
    if len < 8 {
        return Err(PostErrorReason::AtomicLength { len });
    }
    if remote_addr & 7 != 0 {
        return Err(PostErrorReason::AtomicAlignment { remote_addr });
    }
    Ok(())
}
