//! EFA's data path: the send queue (descriptors built in a local copy, then copied to the
//! LLQ window in 8-byte stores, the doorbell after them), the receive queue (descriptors in
//! the host ring, the doorbell after them) and the CQ poller (sub-CQs polled round robin,
//! phase bits, the CQ doorbell). Each follows rdma-core 44's libefa (`efa_post_send`,
//! `efa_post_recv`, `efa_poll_cq`) step by step; docs/efa.md lists the facts.

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use rverbs_uverbs::driver::{CqOps, KernelObj, QpOps};
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::PostError;
use rverbs_uverbs::{Error, RecvWr, SendFlags, SendOp, SendWr, Sge, WorkCompletion};
use rverbs_uverbs::{WcFlags, WcOpcode, WcStatus};

use super::abi::*;
use super::driver::{EfaMap, QpTable};
use crate::mlx5::barrier::{dma_rmb_device, mmio_wmb, wc_store_barrier};

/// A work queue's bookkeeping, shared by the poster and the poller (libefa `struct efa_wq`
/// under `wqlock`): the `wr_id` of each request id and the pool of free ids (a stack: a
/// completed id is the next one used, as in libefa). `pool_next` is the number of requests
/// outstanding (libefa's `wqe_posted - wqe_completed`): ids `pool[..pool_next]` are taken.
#[derive(Debug)]
pub(crate) struct Wq {
    wrid: Vec<u64>,
    pool: Vec<u32>,
    pool_next: usize,
}

impl Wq {
    pub(crate) fn new(n: u32) -> Wq {
        Wq {
            wrid: vec![0; n as usize],
            pool: (0..n).collect(),
            pool_next: 0,
        }
    }

    #[inline(always)]
    fn full(&self) -> bool {
        self.pool_next >= self.pool.len()
    }

    /// Requests outstanding.
    fn outstanding(&self) -> u32 {
        self.pool_next as u32
    }

    /// Takes the next free request id for `wr_id` (never when full).
    #[inline(always)]
    fn take(&mut self, wr_id: u64) -> u16 {
        let id = self.pool[self.pool_next];
        self.wrid[id as usize] = wr_id;
        self.pool_next += 1;
        id as u16
    }

    /// Gives request id `id` back; its `wr_id`, or `None` when the device named an id that is
    /// not outstanding (out of range, or nothing outstanding).
    fn complete(&mut self, id: u16) -> Option<u64> {
        let id = u32::from(id);
        if id as usize >= self.wrid.len() || self.pool_next == 0 {
            return None;
        }
        self.pool_next -= 1;
        self.pool[self.pool_next] = id;
        Some(self.wrid[id as usize])
    }
}

/// A work queue under libefa's kind of lock (`pthread_spin_lock` on `wqlock`): a spin lock
/// held for one post or one completion, shared by the poster and the poller.
#[derive(Debug)]
pub(crate) struct WqLock {
    locked: AtomicBool,
    wq: UnsafeCell<Wq>,
}

// SAFETY: the `Wq` inside is reached only through a `WqGuard`, of which one exists at a time
// (the `locked` flag, taken with Acquire and given back with Release); `Wq` is `Send`.
unsafe impl Sync for WqLock {}

impl WqLock {
    pub(crate) fn new(wq: Wq) -> WqLock {
        WqLock {
            locked: AtomicBool::new(false),
            wq: UnsafeCell::new(wq),
        }
    }

    #[inline(always)]
    fn lock(&self) -> WqGuard<'_> {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        WqGuard(self)
    }
}

/// The lock of a [`WqLock`], held: the queue, until dropped.
struct WqGuard<'a>(&'a WqLock);

impl std::ops::Deref for WqGuard<'_> {
    type Target = Wq;
    #[inline(always)]
    fn deref(&self) -> &Wq {
        // SAFETY: this guard holds the lock: nobody else reaches the Wq.
        unsafe { &*self.0.wq.get() }
    }
}

impl std::ops::DerefMut for WqGuard<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Wq {
        // SAFETY: as for deref; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.0.wq.get() }
    }
}

impl Drop for WqGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.0.locked.store(false, Ordering::Release);
    }
}

/// A 32-bit doorbell register: `map` + `off` (checked 4-byte aligned, inside the map).
#[derive(Debug)]
struct Doorbell {
    map: EfaMap,
    off: usize,
}

impl Doorbell {
    fn ring(&self, v: u32) {
        debug_assert!(self.off + 4 <= self.map.len());
        // SAFETY: inside the doorbell mapping (offset checked at creation), aligned; device
        // memory, written with one volatile 4-byte store as libefa's `mmio_write32`.
        unsafe {
            self.map
                .ptr()
                .add(self.off)
                .cast::<u32>()
                .write_volatile(v.to_le())
        };
    }
}

/// The send queue.
#[derive(Debug)]
pub(crate) struct Sq {
    wq: Arc<WqLock>,
    llq: EfaMap,
    desc_off: usize,
    db: Doorbell,
    mask: u16,
    pc: u16,
    phase: u8,
    max_sge: u32,
    max_inline: u32,
    max_batch: u32,
    /// `ctrl2` of this lap's descriptors (phase, first, last, completion requested), at its
    /// place in word 0.
    ctrl2: u64,
    /// RDMA READ is encoded on this queue: an SRD QP of a device that reports
    /// `EFA_QUERY_DEVICE_CAPS_RDMA_READ` (libefa `efa_check_qp_attr`).
    read: bool,
}

impl Sq {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        wq: Arc<WqLock>,
        llq: EfaMap,
        desc_off: usize,
        db: EfaMap,
        db_off: usize,
        wqes: u32,
        max_sge: u32,
        max_inline: u32,
        max_batch: u32,
        read: bool,
    ) -> Sq {
        assert!(desc_off + wqes as usize * TX_WQE <= llq.len());
        Sq {
            wq,
            llq,
            desc_off,
            db: Doorbell {
                map: db,
                off: db_off,
            },
            mask: (wqes - 1) as u16,
            pc: 0,
            phase: 0,
            max_sge,
            max_inline,
            max_batch,
            ctrl2: Sq::ctrl2_of(0),
            read,
        }
    }

    /// Moves the producer (`pc`, `phase`, `ctrl2`) past the descriptor just written; a new
    /// lap flips the phase. Takes the fields, not `&mut self`: the post holds the WQ's lock
    /// through `self.wq` meanwhile.
    #[inline(always)]
    fn advance(pc: &mut u16, phase: &mut u8, ctrl2: &mut u64, mask: u16) {
        *pc = pc.wrapping_add(1);
        if *pc & mask == 0 {
            *phase = phase.wrapping_add(1);
            *ctrl2 = Sq::ctrl2_of(*phase);
        }
    }

    /// Word 0's `ctrl2` bits for a lap of phase `phase`.
    fn ctrl2_of(phase: u8) -> u64 {
        u64::from((phase & TX_CTRL2_PHASE) | TX_CTRL2_FIRST | TX_CTRL2_LAST | TX_CTRL2_COMP_REQ)
            << 24
    }

    /// Copies one descriptor (eight little-endian words) to LLQ slot `pc & mask` in eight
    /// 8-byte stores, in address order (libefa's `mmio_memcpy_x64` on 64-bit machines).
    #[inline(always)]
    fn copy_to_llq(&self, d: &[u64; 8]) {
        let slot = usize::from(self.pc & self.mask);
        // SAFETY: slot ≤ mask, and desc_off + (mask + 1) · 64 ≤ the LLQ mapping (checked at
        // creation); 8-byte aligned (desc_off and the mapping are); device memory, written
        // with volatile stores only.
        unsafe {
            let dst = self
                .llq
                .ptr()
                .add(self.desc_off + slot * TX_WQE)
                .cast::<u64>();
            dst.write_volatile(d[0]);
            dst.add(1).write_volatile(d[1]);
            dst.add(2).write_volatile(d[2]);
            dst.add(3).write_volatile(d[3]);
            dst.add(4).write_volatile(d[4]);
            dst.add(5).write_volatile(d[5]);
            dst.add(6).write_volatile(d[6]);
            dst.add(7).write_volatile(d[7]);
        }
    }
}

/// The receive queue.
#[derive(Debug)]
pub(crate) struct Rq {
    wq: Arc<WqLock>,
    ring: EfaMap,
    db: Doorbell,
    mask: u16,
    pc: u16,
    max_sge: u32,
}

impl Rq {
    pub(crate) fn new(
        wq: Arc<WqLock>,
        ring: EfaMap,
        db: EfaMap,
        db_off: usize,
        descs: u32,
        _wqes: u32,
        max_sge: u32,
    ) -> Rq {
        assert!(descs as usize * RX_DESC <= ring.len());
        Rq {
            wq,
            ring,
            db: Doorbell {
                map: db,
                off: db_off,
            },
            mask: (descs - 1) as u16,
            pc: 0,
            max_sge,
        }
    }
}

/// An EFA QP (UD or SRD).
#[derive(Debug)]
pub(crate) struct EfaQp {
    qpn: u32,
    sig_all: bool,
    sq: Sq,
    rq: Rq,
    caps: QpCaps,
    table: Arc<QpTable>,
}

impl EfaQp {
    pub(crate) fn new(
        qpn: u32,
        sig_all: bool,
        sq: Sq,
        rq: Rq,
        caps: QpCaps,
        table: Arc<QpTable>,
    ) -> EfaQp {
        EfaQp {
            qpn,
            sig_all,
            sq,
            rq,
            caps,
            table,
        }
    }

    /// Builds the descriptor of `wr` as eight little-endian words (libefa `efa_post_send`'s
    /// checks in its order, then the descriptor) and copies it to LLQ slot `pc & mask`, or
    /// says why it is refused ([`Refusal`], made into a [`PostError`] off the hot path) with
    /// nothing written. Takes a request id only once it is accepted.
    ///
    /// Words (`efa_io_tx_wqe`): 0 = `req_id` | `ctrl1` << 16 | `ctrl2` << 24 | `dest_qp_num`
    /// << 32 | `length` << 48; 1 = `immediate_data` | `ah` << 32; 2 = `qkey`; 3 = 0; 4–7 = two
    /// buffer descriptors (`length` | `lkey` << 32, then the address), the inline bytes, or a
    /// READ's remote buffer (total length | `rkey` << 32, address) and its local one.
    #[inline(always)]
    fn build(sq: &Sq, sig_all: bool, wr: &SendWr<'_>, wq: &mut Wq) -> Result<(), Refusal> {
        #[inline(always)]
        fn buf(s: &Sge) -> u64 {
            (u64::from(s.length) | u64::from(s.lkey & LKEY_MASK) << 32).to_le()
        }
        // libefa's order: unsignaled first, then the flags.
        if !sig_all && !wr.flags.contains(SendFlags::SIGNALED) {
            return Err(Refusal::Unsignaled);
        }
        if !(SendFlags::SIGNALED | SendFlags::INLINE).contains(wr.flags) {
            return Err(Refusal::Flags);
        }
        if wq.full() {
            return Err(Refusal::Full);
        }
        let inline = wr.flags.contains(SendFlags::INLINE);
        let (ctrl1, imm, length, hi) = match wr.op {
            SendOp::Send | SendOp::SendWithImm { .. } => {
                let (ctrl1, imm) = match wr.op {
                    SendOp::SendWithImm { imm } => {
                        (TX_CTRL1_META_DESC | TX_OP_SEND | TX_CTRL1_HAS_IMM, imm)
                    }
                    _ => (TX_CTRL1_META_DESC | TX_OP_SEND, 0),
                };
                if inline {
                    let total = match wr.sge {
                        [s] => s.length as usize,
                        l => l.iter().map(|s| s.length as usize).sum(),
                    };
                    if total > sq.max_inline as usize {
                        return Err(Refusal::InlineOver);
                    }
                    // The descriptor's second half, built in local memory.
                    let mut bytes = [0u64; 4];
                    let p = bytes.as_mut_ptr().cast::<u8>();
                    let copy = |s: &Sge, at: usize| {
                        // SAFETY: the caller's post_send contract: an inline SGE's bytes are
                        // readable for the call and touched by others only through `shared`;
                        // every SGE's bytes land inside `bytes` (their total ≤ 32:
                        // max_inline ≤ 32).
                        unsafe {
                            rverbs_uverbs::kernel::shared::copy_from_shared_raw(
                                s.addr as usize as *const u8,
                                p.add(at),
                                s.length as usize,
                            )
                        }
                    };
                    if let [s] = wr.sge {
                        copy(s, 0);
                    } else {
                        let mut at = 0;
                        for s in wr.sge {
                            copy(s, at);
                            at += s.length as usize;
                        }
                    }
                    (ctrl1 | TX_CTRL1_INLINE_MSG, imm, total as u64, bytes)
                } else {
                    // The usual one SGE tested first; max_sge ≤ TX_DESC_NUM_BUFS (2).
                    let hi = match wr.sge {
                        [a] if sq.max_sge != 0 => [buf(a), a.addr.to_le(), 0, 0],
                        [] => [0; 4],
                        [a, b] if sq.max_sge >= 2 => {
                            [buf(a), a.addr.to_le(), buf(b), b.addr.to_le()]
                        }
                        _ => return Err(Refusal::Sges),
                    };
                    (ctrl1, imm, wr.sge.len() as u64, hi)
                }
            }
            SendOp::RdmaRead { remote_addr, rkey } if sq.read => {
                // libefa's `efa_send_wr_set_sge_list`: at most `max_wr_rdma_sge` (≤ 1) local
                // buffers. Inline data makes no sense for a READ (libefa would copy it over
                // the remote buffer's descriptor): refused.
                if inline {
                    return Err(Refusal::InlineRead);
                }
                let (total, local) = match wr.sge {
                    [] => (0, [0, 0]),
                    [s] => (s.length, [buf(s), s.addr.to_le()]),
                    _ => return Err(Refusal::ReadSges),
                };
                let remote = [
                    (u64::from(total) | u64::from(rkey) << 32).to_le(),
                    remote_addr.to_le(),
                ];
                let hi = [remote[0], remote[1], local[0], local[1]];
                (
                    TX_CTRL1_META_DESC | TX_OP_RDMA_READ,
                    0,
                    wr.sge.len() as u64,
                    hi,
                )
            }
            _ => return Err(Refusal::Op),
        };
        let Some(ud) = wr.ud else {
            return Err(Refusal::NoDest);
        };
        let req_id = wq.take(wr.wr_id);
        let w0 = (u64::from(req_id)
            | u64::from(ctrl1) << 16
            | sq.ctrl2
            | u64::from(ud.remote_qpn as u16) << 32
            | (length & 0xffff) << 48)
            .to_le();
        let w1 = (u64::from(imm) | u64::from(ud.ah_num as u16) << 32).to_le();
        let w2 = u64::from(ud.remote_qkey).to_le();
        sq.copy_to_llq(&[w0, w1, w2, 0, hi[0], hi[1], hi[2], hi[3]]);
        Ok(())
    }

    /// One request: no batch to count (`max_batch` ≥ 1, so a list of one rings once, after
    /// its descriptor, as [`EfaQp::post_list`] would).
    #[inline(never)]
    fn post_one(sq: &mut Sq, sig_all: bool, wr: &SendWr<'_>) -> Result<(), PostError> {
        // The queue's fields borrowed apart: the WQ locked through its field, no `Arc`
        // clone.
        let mut wq = sq.wq.lock();
        if let Err(r) = EfaQp::build(sq, sig_all, wr, &mut wq) {
            return Err(refused(sq, &wq, 0, 0, wr, r));
        }
        Sq::advance(&mut sq.pc, &mut sq.phase, &mut sq.ctrl2, sq.mask);
        // libefa: mmio_flush_writes (`sfence`), then the doorbell. The descriptor's
        // stores reach the device before the doorbell's; nothing is read back.
        wc_store_barrier();
        sq.db.ring(u32::from(sq.pc));
        Ok(())
    }

    /// A list of several requests: each built and copied in turn, the doorbell rung every
    /// `max_batch` of them and after the last. Out of line so that the one-request post
    /// keeps its registers.
    #[inline(never)]
    fn post_list(sq: &mut Sq, sig_all: bool, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let mut wq = sq.wq.lock();
        let mut batch = 0u32;
        for wr in wrs {
            if let Err(r) = EfaQp::build(sq, sig_all, wr, &mut wq) {
                // The requests before it are posted: rung (libefa's `ring_db`). Its index
                // from its address: no counter to keep in the loop.
                let i = (wr as *const SendWr<'_> as usize - wrs.as_ptr() as usize)
                    / std::mem::size_of::<SendWr<'_>>();
                return Err(refused(sq, &wq, batch, i, wr, r));
            }
            Sq::advance(&mut sq.pc, &mut sq.phase, &mut sq.ctrl2, sq.mask);
            batch += 1;
            if batch == sq.max_batch {
                batch = 0;
                // libefa: mmio_flush_writes, the doorbell, mmio_wc_start (both `sfence`: the
                // batch's descriptors before the doorbell, the doorbell before the next
                // batch's descriptors).
                wc_store_barrier();
                sq.db.ring(u32::from(sq.pc));
                wc_store_barrier();
            }
        }
        if batch != 0 {
            wc_store_barrier();
            sq.db.ring(u32::from(sq.pc));
        }
        Ok(())
    }
}

/// A post's refusal of request `i` (`r`), off the hot path: the `batch` requests written
/// since the last doorbell are rung first, then the error says why.
#[cold]
#[inline(never)]
fn refused(sq: &Sq, wq: &Wq, batch: u32, i: usize, wr: &SendWr<'_>, r: Refusal) -> PostError {
    if batch != 0 {
        wc_store_barrier();
        sq.db.ring(u32::from(sq.pc));
    }
    r.error(i, wr, sq, wq)
}

/// Why a send was refused, as found on the hot path; [`Refusal::error`] names it.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    Unsignaled,
    Flags,
    Full,
    Op,
    InlineRead,
    ReadSges,
    InlineOver,
    Sges,
    NoDest,
}

impl Refusal {
    /// The error of request `i`, `wr`, refused for `self` on `sq` (`wq` its locked pool).
    #[cold]
    #[inline(never)]
    fn error(self, i: usize, wr: &SendWr<'_>, sq: &Sq, wq: &Wq) -> PostError {
        match self {
            Refusal::Unsignaled => PostError::unsupported(
                i,
                "an unsignaled send (EFA completes every send; libefa: EINVAL)",
            ),
            Refusal::Flags => {
                let extra = wr.flags - (SendFlags::SIGNALED | SendFlags::INLINE);
                PostError::unsupported(
                    i,
                    format!("send flags {extra:?} (EFA takes SIGNALED and INLINE only)"),
                )
            }
            Refusal::Full => PostError::queue_full(i, wq.outstanding()),
            Refusal::Op => PostError::unsupported(
                i,
                if sq.read {
                    "an operation other than SEND, SEND with immediate and RDMA READ (libefa 44 \
                     on SRD)"
                } else {
                    "an operation other than SEND and SEND with immediate (libefa 44 on UD, or \
                     on SRD without the device's RDMA READ)"
                },
            ),
            Refusal::InlineRead => PostError::invalid(i, "an inline RDMA READ"),
            Refusal::ReadSges => PostError::invalid(
                i,
                format!(
                    "an RDMA READ into {} SGEs, EFA takes at most {TX_DESC_NUM_RDMA_BUFS}",
                    wr.sge.len()
                ),
            ),
            Refusal::InlineOver => {
                let total: u64 = wr.sge.iter().map(|s| u64::from(s.length)).sum();
                PostError::invalid(
                    i,
                    format!(
                        "{total} inline bytes, the QP takes at most {}",
                        sq.max_inline
                    ),
                )
            }
            Refusal::Sges => PostError::invalid(
                i,
                format!("{} SGEs, the QP takes at most {}", wr.sge.len(), sq.max_sge),
            ),
            Refusal::NoDest => {
                PostError::invalid(i, "a send without a destination (AH, remote QPN, Q_Key)")
            }
        }
    }
}

impl Drop for EfaQp {
    fn drop(&mut self) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.qpn);
    }
}

impl QpOps for EfaQp {
    unsafe fn post_send(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[SendWr<'_>],
    ) -> Result<(), PostError> {
        // Two out-of-line bodies, each with the registers its case needs (a dispatcher
        // without a frame of its own): one request, the usual post, and a list.
        match wrs {
            [wr] => EfaQp::post_one(&mut self.sq, self.sig_all, wr),
            _ => EfaQp::post_list(&mut self.sq, self.sig_all, wrs),
        }
    }
    unsafe fn post_recv(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        let rq = &mut self.rq;
        let mut wq = rq.wq.lock();
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if wr.sge.len() > rq.max_sge as usize {
                result = Err(PostError::invalid(
                    i,
                    format!("{} SGEs, the QP takes at most {}", wr.sge.len(), rq.max_sge),
                ));
                break;
            }
            if wq.full() {
                result = Err(PostError::queue_full(i, wq.outstanding()));
                break;
            }
            let req_id = wq.take(wr.wr_id);
            // `efa_io_rx_desc` as two little-endian words: the address; then `req_id` (first
            // descriptor only) | `length` << 16 | (`lkey` | first | last) << 32.
            let desc = |s: &Sge, id: u16, ctrl: u32| {
                let w1 = u64::from(id)
                    | u64::from(s.length as u16) << 16
                    | u64::from(s.lkey & LKEY_MASK | ctrl) << 32;
                [s.addr.to_le(), w1.to_le()]
            };
            let last = wr.sge.len().wrapping_sub(1);
            for (k, s) in wr.sge.iter().enumerate() {
                let d = match (k == 0, k == last) {
                    (true, true) => desc(s, req_id, RX_FIRST | RX_LAST),
                    (true, false) => desc(s, req_id, RX_FIRST),
                    (false, true) => desc(s, 0, RX_LAST),
                    (false, false) => desc(s, 0, 0),
                };
                let slot = usize::from(rq.pc & rq.mask);
                // SAFETY: slot ≤ mask and (mask + 1) · 16 ≤ the ring's mapping (checked at
                // creation), 16-byte aligned (the mapping is page-aligned); the ring is memory
                // the device reads, written through a raw pointer only.
                unsafe {
                    rq.ring
                        .ptr()
                        .add(slot * RX_DESC)
                        .cast::<[u64; 2]>()
                        .write(d)
                };
                rq.pc = rq.pc.wrapping_add(1);
            }
        }
        // libefa rings the RQ doorbell on every post, after `udma_to_device_barrier`.
        mmio_wmb();
        rq.db.ring(u32::from(rq.pc));
        result
    }

    fn caps(&self) -> Option<QpCaps> {
        Some(self.caps)
    }

    fn reset(&mut self) {
        // libefa `efa_qp_init_indices`: counts and producer counters to 0 (the phase and
        // the id pool's order stay as they were).
        for wq in [&self.sq.wq, &self.rq.wq] {
            wq.lock().pool_next = 0;
        }
        self.sq.pc = 0;
        self.rq.pc = 0;
    }
}

/// One sub-CQ's cursor (libefa `struct efa_sub_cq`).
#[derive(Debug)]
struct SubCq {
    consumed: u16,
    phase: u8,
}

/// An EFA CQ.
#[derive(Debug)]
pub(crate) struct EfaCq {
    ring: EfaMap,
    db: Option<Doorbell>,
    subs: Vec<SubCq>,
    /// Entries per sub-CQ (a power of two).
    n: u32,
    next_poll: usize,
    cc: u16,
    cmd_sn: u8,
    table: Arc<QpTable>,
}

/// One completion as the device wrote it.
struct Cqe {
    req_id: u16,
    status: u8,
    flags: u8,
    qp_num: u16,
    length: u16,
    ah: u16,
    src_qp: u16,
    imm: u32,
}

/// libefa `to_ibv_status`.
fn status(s: u8) -> WcStatus {
    match s {
        0 => WcStatus::SUCCESS,
        1 => WcStatus::WR_FLUSH_ERR,
        2..=4 => WcStatus::LOC_QP_OP_ERR,
        5 => WcStatus::LOC_PROT_ERR,
        6 => WcStatus::LOC_LEN_ERR,
        8 => WcStatus::REM_ABORT_ERR,
        10 => WcStatus::RNR_RETRY_EXC_ERR,
        9 => WcStatus::REM_INV_RD_REQ_ERR,
        12 => WcStatus::BAD_RESP_ERR,
        11 => WcStatus::REM_INV_REQ_ERR,
        13 => WcStatus::RESP_TIMEOUT_ERR,
        _ => WcStatus::GENERAL_ERR,
    }
}

impl EfaCq {
    pub(crate) fn new(
        ring: EfaMap,
        db: Option<(EfaMap, usize)>,
        subs: u16,
        n: u32,
        table: Arc<QpTable>,
    ) -> EfaCq {
        assert!(usize::from(subs) * n as usize * RX_CDESC <= ring.len());
        EfaCq {
            ring,
            db: db.map(|(map, off)| Doorbell { map, off }),
            subs: (0..subs)
                .map(|_| SubCq {
                    consumed: 0,
                    phase: 1,
                })
                .collect(),
            n,
            next_poll: 0,
            cc: 0,
            cmd_sn: 0,
            table,
        }
    }

    /// The next completion of sub-CQ `k`, if the device has written it (libefa
    /// `cq_next_sub_cqe_get`).
    fn next_of(&mut self, k: usize) -> Option<Cqe> {
        let n = self.n as usize;
        let sub = &mut self.subs[k];
        let slot = (k * n + (usize::from(sub.consumed) & (n - 1))) * RX_CDESC;
        // SAFETY: slot + 16 ≤ subs · n · 16 ≤ the ring's mapping (checked at creation);
        // memory the device writes, read through raw pointers only (the flags byte as an
        // atomic, the rest as volatile loads after it).
        let p = unsafe { self.ring.ptr().add(slot) };
        // SAFETY: as above; byte 3 is the flags byte.
        let flags = unsafe { AtomicU8::from_ptr(p.add(3)) }.load(Ordering::Acquire);
        if flags & CDESC_PHASE != sub.phase & 1 {
            return None;
        }
        dma_rmb_device();
        let mut b = [0u8; RX_CDESC];
        for (i, x) in b.iter_mut().enumerate() {
            // SAFETY: as above.
            *x = unsafe { p.add(i).read_volatile() };
        }
        sub.consumed = sub.consumed.wrapping_add(1);
        if usize::from(sub.consumed) & (n - 1) == 0 {
            sub.phase ^= 1;
        }
        let u16at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        Some(Cqe {
            req_id: u16at(0),
            status: b[2],
            flags,
            qp_num: u16at(4),
            length: u16at(6),
            ah: u16at(8),
            src_qp: u16at(10),
            imm: u32::from_le_bytes(b[12..16].try_into().unwrap()),
        })
    }

    /// One completion into `wc` (libefa `efa_poll_sub_cqs`): `None` when every sub-CQ is
    /// empty, `Some(false)` when the device named a QP or request that is not there.
    fn poll_one(&mut self, wc: &mut WorkCompletion) -> Option<bool> {
        let subs = self.subs.len();
        for _ in 0..subs {
            let k = self.next_poll;
            self.next_poll = (self.next_poll + 1) % subs;
            let Some(c) = self.next_of(k) else { continue };
            let send = (c.flags >> CDESC_Q_TYPE_SHIFT) & 3 == IO_SEND_QUEUE;
            let wq = {
                let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
                match t.get(&u32::from(c.qp_num)) {
                    Some((sq, rq)) => {
                        if send {
                            sq.clone()
                        } else {
                            rq.clone()
                        }
                    }
                    None => return Some(false),
                }
            };
            let Some(wr_id) = wq.lock().complete(c.req_id) else {
                return Some(false);
            };
            *wc = WorkCompletion {
                wr_id,
                status: status(c.status),
                vendor_err: u32::from(c.status),
                qp_num: u32::from(c.qp_num),
                ..WorkCompletion::default()
            };
            if send {
                wc.opcode = WcOpcode::SEND;
            } else {
                wc.opcode = WcOpcode::RECV;
                wc.byte_len = u32::from(c.length);
                wc.src_qp = u32::from(c.src_qp);
                wc.slid = c.ah;
                if c.flags & CDESC_HAS_IMM != 0 {
                    wc.imm_data = c.imm;
                    wc.wc_flags = WcFlags::WITH_IMM;
                }
            }
            self.cc = self.cc.wrapping_add(1);
            return Some(true);
        }
        None
    }

    fn update_db(&self, arm: bool) {
        if let Some(db) = &self.db {
            let mut v = u32::from(self.cc) & CQ_DB_CONSUMER_INDEX_MASK;
            v |= u32::from(self.cmd_sn & 3) << CQ_DB_CMD_SN_SHIFT;
            if arm {
                v |= CQ_DB_ARM;
            }
            // Completions read before the doorbell says they are consumed.
            fence(Ordering::Release);
            db.ring(v);
        }
    }
}

impl CqOps for EfaCq {
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        let mut got = 0;
        while got < out.len() {
            match self.poll_one(&mut out[got]) {
                Some(true) => got += 1,
                // A completion naming no live QP or request (libefa: EINVAL): stop here.
                Some(false) | None => break,
            }
        }
        if got != 0 {
            self.update_db(false);
        }
        got
    }

    fn arm(&mut self, _cq: KernelObj<'_>, solicited_only: bool) -> rverbs_uverbs::Result<()> {
        if solicited_only {
            return Err(
                Error::unsupported("arm CQ on efa", "EFA has no solicited-only events").into(),
            );
        }
        if self.db.is_none() {
            return Err(Error::unsupported(
                "arm CQ on efa",
                "the kernel gave this CQ no doorbell (no CQ notifications)",
            )
            .into());
        }
        self.update_db(true);
        Ok(())
    }

    fn event_received(&mut self) {
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
    }
}
