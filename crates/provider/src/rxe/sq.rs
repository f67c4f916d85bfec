//! Posting to an rxe send queue: build `rxe_send_wqe`s in the mapped ring, then ring the
//! doorbell ([`super::doorbell::Doorbell`]).
//!
//! What the Linux 6.1 kernel reads from a user send WQE (`rxe_req.c`, `rxe_comp.c`): `wr`
//! (`wr_id`, `opcode`, `send_flags`, `ex`, the `wr` union arm of the opcode; for UD `remote_qpn`,
//! `remote_qkey`, `ah_num`), `iova` (remote address of RDMA and atomic operations), `dma`
//! (`length` = `resid` = payload bytes, `num_sge`, `cur_sge` = `sge_offset` = 0) and the SGE
//! array or inline data after the header; `state` must be 0 (posted). It recomputes `mask`
//! from the opcode itself and owns `status`, `first_psn`, `last_psn`, `ack_length`,
//! `has_rd_atomic`; `ssn` is not read. We write the whole 208-byte header each time (kernel
//! fields zeroed) so nothing is left over from the slot's previous use, in place: the slot at
//! our producer index is ours until we publish a producer index past it, so it is written
//! field by field in place, through the typed view of `wqe.rs` (`WqeSlot`: safe setters,
//! one `unsafe` step to make it; no WQE is built on the stack and copied).
//!
//! Which operations a QP takes is decided once, before this code runs: rverbs-uverbs'
//! classification (`rverbs_uverbs::op`) intersected with what rxe encodes
//! (`OPS`, the 6.1 requester's table). Here only the operands are checked.
//!
//! INLINE is possible for the SEND and RDMA_WRITE families (the opcodes that carry outbound
//! payload). Immediate data goes into the WQE in network byte order, as rxe puts it on the wire.

#![allow(unsafe_code)]

use std::io;

use super::abi::{
    rxe_dma_info, rxe_sge, rxe_wr_atomic, rxe_wr_flush, rxe_wr_mw, rxe_wr_rdma, send_flags,
    RXE_SEND_WQE_SGE_OFFSET,
};
use super::queue::{QueueKind, RxeQueue};
use super::wqe::WqeSlot;
use rverbs_uverbs::{Error, OpKind, OpTable, SendFlags, SendOp, SendWr, Sge, Transports};
use rverbs_uverbs::{PostError, PostFault};

/// What rxe's requester runs, per operation (Linux 6.1 `rxe_wr_opcode_info`: LOCAL_INV on RC
/// only, memory-window binds on RC and UC; FLUSH and ATOMIC_WRITE as Linux 6.2's table has
/// them, RC only, whether this kernel's rxe has them being the device's capability bits,
/// `rverbs_uverbs::op`). Every operation of the op table has a field: a new one does not
/// compile until this says whether rxe encodes it, and [`RxeSq::write`] how.
pub(crate) const OPS: OpTable<Transports> = OpTable {
    rdma_write: Transports::RC_UC,
    rdma_write_with_imm: Transports::RC_UC,
    send: Transports::RC_UC_UD,
    send_with_imm: Transports::RC_UC_UD,
    rdma_read: Transports::RC,
    atomic_cmp_swp: Transports::RC,
    atomic_fetch_add: Transports::RC,
    local_inv: Transports::RC,
    bind_mw: Transports::RC_UC,
    send_with_inv: Transports::RC,
    flush: Transports::RC,
    atomic_write: Transports::RC,
};

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

/// The parameters of a send queue, as the kernel returned them at QP creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxeSqConfig {
    /// The QP's transport: whether a UD destination is needed.
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

/// What [`RxeSq::check_and_plan`] decided about one work request (a few words, cheap to return).
#[derive(Clone, Copy)]
struct Plan {
    /// `send_flags`, with SIGNALED added for `sq_sig_all`.
    flags: u32,
    /// `dma.length` and `dma.resid`: payload bytes (0 for local operations).
    len: u32,
    payload: Payload,
}

/// Where the bytes after the WQE header come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Payload {
    None,
    Sges,
    Inline,
    /// ATOMIC_WRITE's 8 bytes, in `dma.atomic_wr` (where the SGEs would be).
    AtomicWrite,
}

const ALLOWED_FLAGS: u32 =
    send_flags::FENCE | send_flags::SIGNALED | send_flags::SOLICITED | send_flags::INLINE;

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

    /// Slots free right now (the kernel may free more at any time).
    #[cfg(test)]
    pub fn free_slots(&self) -> u32 {
        self.queue.capacity() - self.queue.len()
    }

    /// Checks `wr` against the queue's limits and decides what its WQE holds, without
    /// touching the ring. Small on purpose: the WQE itself is written in place by
    /// [`write`](Self::write), never built on the stack and copied.
    ///
    /// `UD` is whether the queue is a UD QP's (the caller's `cfg.qp_type == Ud`, made a
    /// constant so that the connected path carries no destination code).
    #[inline(always)]
    fn check_and_plan<const UD: bool>(&self, wr: &SendWr<'_>) -> Result<Plan, PostFault> {
        // The operation is one this QP accepts (checked once, by rverbs-uverbs' `Qp`, against
        // [`OPS`]): only its operands are checked here.
        let op = &wr.op;
        let kind = op.kind();
        let mut flags = wr.flags.bits();
        if flags & !ALLOWED_FLAGS != 0 {
            return Err(PostFault::FlagsNotEncoded {
                flags: flags & !ALLOWED_FLAGS,
                provider: "rxe",
            });
        }
        if self.cfg.sig_all {
            flags |= send_flags::SIGNALED;
        }
        let inline = wr.flags.contains(SendFlags::INLINE);
        let num_sge = wr.sge.len();
        let is_local = kind.is_local();
        let takes_no_sge = !kind.takes_sges();
        if takes_no_sge && num_sge != 0 {
            return Err(PostFault::SgesOnLocalOp { op: kind, num_sge });
        }
        if num_sge > self.cfg.max_sge as usize {
            return Err(PostFault::TooManySges {
                num_sge,
                max_sge: self.cfg.max_sge,
            });
        }
        let len = sge_len(wr.sge);
        let Ok(len32) = u32::try_from(len) else {
            return Err(PostFault::LengthOverflow { len });
        };
        if inline {
            if !kind.carries_payload() {
                return Err(PostFault::InlineNotAllowed { op: kind });
            }
            if len > u64::from(self.cfg.max_inline) {
                return Err(PostFault::InlineTooLong {
                    len,
                    max_inline: self.cfg.max_inline,
                });
            }
        }
        if UD {
            match wr.ud {
                None => return Err(PostFault::NoUdDest),
                Some(ud) if ud.ah_num == 0 => {
                    return Err(PostFault::UnknownAh {
                        ah_num: 0,
                        provider: "rxe",
                    })
                }
                Some(_) => {}
            }
        }
        // The operands of the atomics and what follows the header, in one match (one jump
        // on the operation instead of a chain of compares; atomics are RC only, so the UD
        // check above never precedes one of their refusals).
        let (payload, len) = match *op {
            SendOp::AtomicCmpSwp { remote_addr, .. }
            | SendOp::AtomicFetchAdd { remote_addr, .. } => {
                check_atomic(len, remote_addr)?;
                // Their SGE is the local sink; INLINE was refused above (no payload).
                (Payload::Sges, len32)
            }
            // The 8 bytes go where the SGEs would: there is room for them in every slot,
            // whose size is a power of two (`RxeQueue`) holding the 208-byte header (`new`),
            // so at least 256 bytes.
            SendOp::AtomicWrite { remote_addr, .. } => {
                if remote_addr & 7 != 0 {
                    return Err(PostFault::AtomicAlignment { remote_addr });
                }
                (Payload::AtomicWrite, 8)
            }
            // FLUSH carries no payload; dma.length names the range (as librxe sets it).
            SendOp::Flush { len, .. } => (Payload::None, len),
            _ if is_local => (Payload::None, 0),
            _ if inline => (Payload::Inline, len32),
            _ => (Payload::Sges, len32),
        };
        Ok(Plan {
            flags,
            len,
            payload,
        })
    }

    /// Writes the WQE of `wr` (checked by [`check_and_plan`](Self::check_and_plan) into `plan`) and its payload
    /// straight into slot `index`: every field of the 208-byte header once (the kernel-owned
    /// ones zeroed, so nothing is left from the slot's previous use), then the SGEs or the
    /// inline bytes.
    ///
    /// # Safety
    ///
    /// The slot must be ours: at or past our producer index and not yet published, and not
    /// between the kernel's consumer and our producer (the kernel neither reads nor writes it
    /// until we publish a producer index past it). For an inline payload every SGE must name
    /// `length` readable bytes at `addr`. `UD` as for [`check_and_plan`](Self::check_and_plan), which checked
    /// that a UD request has its destination.
    #[inline(always)]
    unsafe fn write<const UD: bool>(&self, index: u32, ssn: u32, plan: &Plan, wr: &SendWr<'_>) {
        // SAFETY: the slot is 8-aligned and in bounds for elem_size bytes (`RxeQueue::slot`),
        // which `new` checked hold the 208-byte header plus max_sge SGEs or max_inline bytes;
        // per this function's contract nobody else reads or writes it until we publish it.
        let mut slot = unsafe { WqeSlot::new(self.queue.slot(index), self.queue.elem_size()) };
        // The union: zeroed, then the arm of the opcode (or of UD) written over it.
        slot.clear_arm();
        let (ex, iova) = match wr.op {
            SendOp::Send => (0, 0),
            // Immediate data travels big-endian: rxe copies `ex` into the packet unchanged.
            SendOp::SendWithImm { imm } => (imm.to_be(), 0),
            SendOp::SendWithInv { invalidate_rkey } | SendOp::LocalInv { invalidate_rkey } => {
                (invalidate_rkey, 0)
            }
            SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaRead { remote_addr, rkey } => {
                slot.set_rdma(rdma(remote_addr, rkey));
                (0, remote_addr)
            }
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => {
                slot.set_rdma(rdma(remote_addr, rkey));
                (imm.to_be(), remote_addr)
            }
            SendOp::AtomicCmpSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            } => {
                slot.set_atomic(rxe_wr_atomic {
                    remote_addr,
                    compare_add: compare,
                    swap,
                    rkey,
                    reserved: 0,
                });
                (0, remote_addr)
            }
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => {
                slot.set_atomic(rxe_wr_atomic {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                    reserved: 0,
                });
                (0, remote_addr)
            }
            SendOp::BindMw(b) => {
                slot.set_mw(rxe_wr_mw {
                    addr: b.addr(),
                    length: b.length(),
                    mr_lkey: b.mr_lkey(),
                    mw_rkey: b.mw_rkey(),
                    rkey: b.rkey(),
                    access: b.access().bits(),
                });
                // librxe puts the window's start here too; the 6.1 and 6.12 kernels read the
                // bind only from the union.
                (0, b.addr())
            }
            SendOp::Flush {
                remote_addr,
                rkey,
                len,
                flush_type,
                level,
            } => {
                slot.set_flush(rxe_wr_flush {
                    remote_addr,
                    length: len,
                    rkey,
                    flush_type: flush_type.0,
                    level: level.0,
                    pad: [0; 6],
                });
                (0, remote_addr)
            }
            // The target in the rdma arm; the value after the header (Payload::AtomicWrite).
            SendOp::AtomicWrite {
                remote_addr, rkey, ..
            } => {
                slot.set_rdma(rdma(remote_addr, rkey));
                (0, remote_addr)
            }
            // SendOp is non_exhaustive outside rverbs-uverbs: every operation is named above,
            // and this arm lists every kind, so a new operation does not compile here.
            other => match other.kind() {
                OpKind::Send
                | OpKind::SendWithImm
                | OpKind::SendWithInv
                | OpKind::RdmaWrite
                | OpKind::RdmaWriteWithImm
                | OpKind::RdmaRead
                | OpKind::AtomicCmpSwp
                | OpKind::AtomicFetchAdd
                | OpKind::LocalInv
                | OpKind::BindMw
                | OpKind::Flush
                | OpKind::AtomicWrite => (0, 0),
            },
        };
        slot.set_wr(wr.wr_id, wr.op.wr_opcode(), plan.flags, ex);
        if let (true, Some(ud)) = (UD, wr.ud) {
            slot.set_ud(ud.remote_qpn, ud.remote_qkey, ud.ah_num);
        }
        let num_sge = if plan.payload == Payload::None {
            0
        } else {
            wr.sge.len() as u32
        };
        slot.set_rest(
            iova,
            ssn,
            rxe_dma_info {
                length: plan.len,
                resid: plan.len,
                cur_sge: 0,
                num_sge,
                sge_offset: 0,
                reserved: 0,
            },
        );
        let sge = |s: &Sge| rxe_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
        match plan.payload {
            Payload::None => {}
            Payload::AtomicWrite => {
                if let SendOp::AtomicWrite { value, .. } = wr.op {
                    slot.set_atomic_value(value);
                }
            }
            // The common case, without the loop.
            Payload::Sges if wr.sge.len() == 1 => slot.set_sge(0, sge(&wr.sge[0])),
            Payload::Sges => {
                for (i, s) in wr.sge.iter().enumerate() {
                    slot.set_sge(i, sge(s));
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
                    // SAFETY: the caller guarantees `addr` names `len` readable bytes that
                    // Rust touches meanwhile only through `rverbs_uverbs::kernel::shared`;
                    // user memory and the ring never overlap. The total is at most
                    // max_inline (checked by the plan), which the slot holds.
                    unsafe { slot.copy_inline(off, s.addr as usize as *const u8, len) };
                    off += len;
                }
            }
        }
    }

    /// Posts `wrs` in order and publishes them to the kernel with one producer-index store.
    /// Returns `wrs.len()`. Stops at the first request that is invalid or finds the queue
    /// full: the [`PostError`] (a [`PostFault`]) says how many were posted before it. Does not ring the
    /// doorbell (see [`Doorbell`](super::doorbell::Doorbell)). Never allocates.
    ///
    /// # Safety
    ///
    /// For every posted request without INLINE, the memory its SGEs name must stay allocated
    /// (and registered under the given lkey) until its completion is polled or the QP is
    /// destroyed: the kernel reads it (sends, writes) or writes it (RDMA READ and atomic
    /// results) at any time in between, so it must not be freed, and memory the device writes
    /// must not be accessed meanwhile. For requests with INLINE, each SGE's `addr` must point
    /// to `length` readable bytes during this call (they are copied into the WQE with
    /// [`rverbs_uverbs::kernel::shared`]'s 1-byte atomic loads; the lkey is ignored), and no one may
    /// write those bytes during the call except through [`rverbs_uverbs::kernel::shared`] (as
    /// `Mr::write_at` does), the kernel or a device: a plain write racing the copy is a data
    /// race.
    #[inline]
    pub unsafe fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<usize, PostError> {
        // SAFETY: forwarded contract; the constant matches the queue's QP type.
        unsafe {
            if self.cfg.qp_type == RxeQpType::Ud {
                self.post_list::<true>(wrs)
            } else {
                self.post_list::<false>(wrs)
            }
        }
    }

    /// [`post`](Self::post) for a queue whose QP type is UD exactly when `UD`.
    ///
    /// # Safety
    ///
    /// As for [`post`](Self::post); `UD` must be `self.cfg.qp_type == RxeQpType::Ud`.
    #[inline(always)]
    unsafe fn post_list<const UD: bool>(&mut self, wrs: &[SendWr<'_>]) -> Result<usize, PostError> {
        if let [wr] = wrs {
            // SAFETY: forwarded contract.
            return unsafe { self.post_one::<UD>(wr) };
        }
        let start = self.queue.load_own();
        let mut prod = start;
        let mut cons = self.queue.load_peer();
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |fault| PostError::refused(i, fault);
            let plan = match self.check_and_plan::<UD>(wr) {
                Ok(p) => p,
                Err(fault) => {
                    self.publish(start, prod);
                    return Err(fail(fault));
                }
            };
            let Some(next) = self.queue.next_free(prod, &mut cons) else {
                self.publish(start, prod);
                let outstanding = self.queue.capacity();
                return Err(fail(PostFault::QueueFull { outstanding }));
            };
            // SAFETY: `prod` is at our producer index, not yet published, and free
            // (next != cons): the kernel does not touch it until the Release store of a
            // producer index past it in `publish`. The inline contract is the caller's.
            unsafe { self.write::<UD>(prod, self.ssn, &plan, wr) };
            self.ssn = self.ssn.wrapping_add(1);
            prod = next;
        }
        self.publish(start, prod);
        Ok(wrs.len())
    }

    /// [`post_list`](Self::post_list) of one request, the common case: nothing is carried
    /// from one request to the next, so everything stays in registers.
    ///
    /// # Safety
    ///
    /// As for [`post_list`](Self::post_list).
    #[inline(always)]
    unsafe fn post_one<const UD: bool>(&mut self, wr: &SendWr<'_>) -> Result<usize, PostError> {
        let fail = |fault| PostError::refused(0, fault);
        let plan = self.check_and_plan::<UD>(wr).map_err(fail)?;
        let prod = self.queue.load_own();
        let next = self.queue.next(prod);
        if next == self.queue.load_peer() {
            return Err(fail(PostFault::QueueFull {
                outstanding: self.queue.capacity(),
            }));
        }
        // SAFETY: as in post_list: `prod` is our unpublished producer index and its slot is
        // free (next != the kernel's consumer, loaded with Acquire).
        unsafe { self.write::<UD>(prod, self.ssn, &plan, wr) };
        self.ssn = self.ssn.wrapping_add(1);
        self.queue.publish_own(next);
        Ok(1)
    }

    #[inline(always)]
    fn publish(&self, start: u32, prod: u32) {
        if prod != start {
            self.queue.publish_own(prod);
        }
    }
}

/// The RDMA arm of an RDMA WRITE, READ or ATOMIC_WRITE.
#[inline(always)]
fn rdma(remote_addr: u64, rkey: u32) -> rxe_wr_rdma {
    rxe_wr_rdma {
        remote_addr,
        rkey,
        reserved: 0,
    }
}

/// The bytes of a gather list (`SendWr::total_len`, here so that it inlines): one SGE, the
/// common case, without the loop.
#[inline(always)]
pub(super) fn sge_len(sge: &[rverbs_uverbs::Sge]) -> u64 {
    match sge {
        [] => 0,
        [s] => u64::from(s.length),
        many => many.iter().map(|s| u64::from(s.length)).sum(),
    }
}

fn check_atomic(len: u64, remote_addr: u64) -> Result<(), PostFault> {
    if len < 8 {
        return Err(PostFault::AtomicLength { len });
    }
    if remote_addr & 7 != 0 {
        return Err(PostFault::AtomicAlignment { remote_addr });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::sim::SimQueue;
    use super::*;
    use rverbs_uverbs::kernel::shared::copy_to_shared;
    use rverbs_uverbs::Sge;

    /// Issue 21, finding 3: an INLINE post copies the SGE's bytes while another thread
    /// writes the same memory as `Mr::write_at` does (`shared::copy_to_shared`, here at
    /// another offset so that the call edges differ). A plain copy of the source is a data
    /// race Miri reports; the post copies with the same 1-byte atomics, so it is none, and
    /// each byte lands as an old or a new value.
    #[test]
    fn inline_post_races_write_at() {
        let mut q = SimQueue::new(9, 8).unwrap();
        // SAFETY: `q` outlives the view's use (both end with this test).
        let view = unsafe { q.view(QueueKind::Send) }.unwrap();
        let cfg = RxeSqConfig {
            qp_type: RxeQpType::Rc,
            max_sge: 4,
            max_inline: 128,
            sig_all: false,
        };
        let mut sq = RxeSq::new(view, cfg).unwrap();
        // Word-aligned "registered memory", reached only through rverbs_uverbs::kernel::shared.
        let mut mem = vec![0u64; 8];
        let base = mem.as_mut_ptr().cast::<u8>().expose_provenance();
        let sge = [Sge {
            addr: base as u64,
            length: 40,
            lkey: 0,
        }];
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sge: &sge,
            flags: SendFlags::INLINE,
            ud: None,
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let p = std::ptr::with_exposed_provenance_mut::<u8>(base);
                // SAFETY: 3..35 lies in the 64 bytes of `mem`, which Rust reaches only
                // through `shared` until the scope ends.
                unsafe { copy_to_shared(&[0xaa; 32], p.add(3)) };
            });
            // SAFETY: the inline SGE names 40 readable bytes of `mem`, written meanwhile only
            // through `shared`.
            unsafe { sq.post(std::slice::from_ref(&wr)) }.unwrap();
        });
        let mut w = vec![0u8; 512];
        assert!(q.kernel().consume(&mut w));
        // The inline bytes follow the WQE header (offset 208 in `rxe_send_wqe`).
        let data = &w[208..248];
        assert!(data[..3].iter().all(|&b| b == 0));
        assert!(data[3..35].iter().all(|&b| b == 0 || b == 0xaa));
        assert!(data[35..].iter().all(|&b| b == 0));
        drop(mem);
    }
}
