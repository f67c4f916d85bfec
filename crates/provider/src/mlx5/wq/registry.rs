//! The `wr_id` registry: per QP and SRQ, what the CQ poller needs to turn a CQE into a
//! completion (the send slots' `wr_id`s and heads, the receive `wr_id`s, the SRQ free list),
//! found by QP or SRQ number or user index; the user index table.

#![allow(unsafe_code)]

use super::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use rverbs_uverbs::Error;
use rverbs_uverbs::WcOpcode;

use crate::mlx5::cqe::{Cqe64, CqeOpcode, WorkQueue, WqeRef, WrIdLookup};

/// A send WQE's completion entry: the caller's `wr_id` and the work request count at its
/// post (libmlx5 `sq.wrid`, `sq.wqe_head`), indexed by the WQE's first block.
#[derive(Debug, Default)]
pub(super) struct SqSlot {
    pub(super) wr_id: AtomicU64,
    pub(super) head: AtomicU32,
    /// For a UMR WQE: the completion opcode (`WcOpcode` BIND_MW or LOCAL_INV, libmlx5's
    /// `wr_data`); written only for UMR WQEs and read only for CQEs naming a UMR WQE.
    pub(super) wr_data: AtomicU8,
}

/// A QP's completion-side state, shared between its post path and the CQ poller.
///
/// The post path (under the QP's lock) writes a slot of `sq` only while it is free; the poller
/// (under its CQ's lock, which is another lock) reads it after its completion. They are
/// atomics because the two sides run under different locks; Relaxed ones are plain moves on
/// x86-64 and aarch64, so they cost the post path nothing over plain stores.
#[derive(Debug)]
pub struct QpShared {
    pub(super) qpn: u32,
    pub(super) sq_mask: u32,
    pub(super) sq: Box<[SqSlot]>,
    /// Work requests completed (libmlx5 `sq.tail`): written by the poller.
    pub(super) sq_tail: AtomicU32,
    pub(super) rq_mask: u32,
    pub(super) rq_wrid: Box<[AtomicU64]>,
    pub(super) rq_tail: AtomicU32,
    pub(super) srq: Option<Arc<SrqShared>>,
    /// With CQE version 1: the QP's user index (what its CQEs carry in `srqn_uidx`).
    pub(super) uidx: Option<u32>,
}

impl QpShared {
    pub(super) fn send_done(&self, counter: u16, wr_data: &mut u8) -> Option<u64> {
        let slot = self.sq.get((u32::from(counter) & self.sq_mask) as usize)?;
        // Relaxed: the post stored it before the doorbell record's Release store; the device
        // wrote the CQE after reading the record and the poller's Acquire load of the CQE's
        // owner byte orders this read after it.
        let wr = slot.wr_id.load(Ordering::Relaxed);
        let head = slot.head.load(Ordering::Relaxed);
        // Relaxed, as above; read before the tail store below lets a post reuse the slot.
        *wr_data = slot.wr_data.load(Ordering::Relaxed);
        // Release: our reads of the slot tables happen before a post that sees the freed
        // space reuses them.
        self.sq_tail.store(head.wrapping_add(1), Ordering::Release);
        Some(wr)
    }

    pub(super) fn recv_done(&self, counter: u16, reg: &Registry, srqn: u32) -> Option<u64> {
        if let Some(srq) = &self.srq {
            return srq.done(counter);
        }
        if srqn != 0 {
            return reg.srq(srqn)?.done(counter);
        }
        if self.rq_wrid.is_empty() {
            return None;
        }
        // The receive queue completes in order; only this QP's receive CQ poller moves it.
        let t = self.rq_tail.load(Ordering::Relaxed);
        let wr = self.rq_wrid[(t & self.rq_mask) as usize].load(Ordering::Relaxed);
        // Release: as for the send queue.
        self.rq_tail.store(t.wrapping_add(1), Ordering::Release);
        Some(wr)
    }
}

/// A context's QPs and SRQs by number, for the CQ poller.
#[derive(Debug, Default)]
pub struct Registry {
    pub(super) qps: RwLock<HashMap<u32, Arc<QpShared>>>,
    pub(super) srqs: RwLock<HashMap<u32, Arc<SrqShared>>>,
    /// Bumped on every change, so a poller's cached entry is never a stale one.
    pub(super) generation: AtomicU64,
}

impl Registry {
    pub(super) fn insert_qp(&self, qp: Arc<QpShared>) {
        let mut m = self.qps.write().unwrap_or_else(|e| e.into_inner());
        m.insert(qp.qpn, qp);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
    /// Removes `qp`'s entry if it is still `qp`'s: the QP is dropped after the kernel
    /// destroyed it, and by then the kernel may have given its number to a new QP, whose
    /// entry must stay.
    pub(super) fn remove_qp(&self, qp: &Arc<QpShared>) {
        let mut m = self.qps.write().unwrap_or_else(|e| e.into_inner());
        if m.get(&qp.qpn).is_some_and(|e| Arc::ptr_eq(e, qp)) {
            m.remove(&qp.qpn);
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
    pub(super) fn insert_srq(&self, srq: Arc<SrqShared>) {
        let mut m = self.srqs.write().unwrap_or_else(|e| e.into_inner());
        m.insert(srq.srqn, srq);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
    /// Removes `srq`'s entry if it is still `srq`'s (as [`Registry::remove_qp`]: SRQ
    /// numbers are reused too).
    pub(super) fn remove_srq(&self, srq: &Arc<SrqShared>) {
        let mut m = self.srqs.write().unwrap_or_else(|e| e.into_inner());
        if m.get(&srq.srqn).is_some_and(|e| Arc::ptr_eq(e, srq)) {
            m.remove(&srq.srqn);
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
    pub(super) fn qp(&self, qpn: u32) -> Option<Arc<QpShared>> {
        self.qps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&qpn)
            .cloned()
    }
    pub(super) fn srq(&self, srqn: u32) -> Option<Arc<SrqShared>> {
        self.srqs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&srqn)
            .cloned()
    }
}

/// A context's QP table lock (libmlx5's `qp_table_mutex`, [`Driver::qp_table_lock`]), with
/// CQE version 0: held by a QP's drop from the kernel's DESTROY_QP until the QP's CQs are
/// clean, and by `create_qp` from the kernel's CREATE_QP until the new QP is in the
/// [`Registry`]. With CQE version 0 a completion names its QP by number only, and the kernel may give a
/// destroyed QP's number to the next QP at once: without the lock that QP could be in the
/// registry (a poller reading the old QP's completions against its tables) and post (the
/// clean then dropping its completions) before the old QP's completions are out.
///
/// Lock order (see `Driver::qp_table_lock`): this lock, then a CQ's lock (the clean: the
/// core's lock of the CQ, which every poller holds), then the registry's and the SRQs' locks.
/// A poller never takes this lock.
///
/// [`Driver::qp_table_lock`]: rverbs_uverbs::driver::Driver::qp_table_lock
#[derive(Debug, Default)]
pub(crate) struct QpTableLock {
    lock: Mutex<()>,
    /// Threads waiting in [`lock`](Self::lock) (for tests to see a create wait).
    waiting: AtomicUsize,
}

impl QpTableLock {
    /// Takes the lock (a poisoned one too: it guards no data, only an order).
    pub(crate) fn lock(&self) -> MutexGuard<'_, ()> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        g
    }

    /// How many threads wait in [`lock`](Self::lock) now.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

/// The CQ poller's [`WrIdLookup`] for a context: QP number → the QP's tables (the last one
/// used cached), then the WQE counter → `wr_id` as libmlx5 does.
#[derive(Debug)]
pub struct CqLookup {
    pub(super) reg: Arc<Registry>,
    pub(super) cache: Option<(u64, Arc<QpShared>)>,
    /// CQE version 1: `srqn_uidx` is the QP's user index, not an SRQ number (the SRQ of a
    /// receive is found through its QP).
    pub(super) cqe_v1: bool,
    /// The `wr_data` of the send WQE the last lookup found (0: none).
    pub(super) wr_data: u8,
}

impl CqLookup {
    /// A lookup over `reg` for CQEs of `cqe_version` (0 or 1).
    pub fn new(reg: Arc<Registry>, cqe_version: u8) -> Self {
        Self {
            reg,
            cache: None,
            cqe_v1: cqe_version != 0,
            wr_data: 0,
        }
    }
}

impl WrIdLookup for CqLookup {
    #[inline]
    fn wr_id(&mut self, w: WqeRef) -> Option<u64> {
        // Acquire: pairs with the AcqRel bump after a change, so a matching generation means
        // the cached QP is still the registered one.
        let g = self.reg.generation.load(Ordering::Acquire);
        self.wr_data = 0;
        let qp = match &self.cache {
            Some((cg, qp)) if *cg == g && qp.qpn == w.qpn => qp.clone(),
            _ => {
                let qp = self.reg.qp(w.qpn)?;
                self.cache = Some((g, qp.clone()));
                qp
            }
        };
        match w.queue {
            WorkQueue::Send => qp.send_done(w.wqe_counter, &mut self.wr_data),
            _ => qp.recv_done(
                w.wqe_counter,
                &self.reg,
                if self.cqe_v1 { 0 } else { w.srqn_uidx },
            ),
        }
    }

    #[inline]
    fn wr_data(&self) -> Option<WcOpcode> {
        (self.wr_data != 0).then_some(WcOpcode(u32::from(self.wr_data)))
    }
}

impl CqLookup {
    /// What to remove from this CQ now that QP `qpn` is in RESET ([`ResetFilter`]); `recv`:
    /// the CQ is the QP's receive CQ. `None` when no QP of the context has that number.
    pub fn reset_filter(&self, qpn: u32, recv: bool) -> Option<ResetFilter> {
        let qp = self.reg.qp(qpn)?;
        Some(ResetFilter {
            // libmlx5's `rsc.rsn`: the user index with CQE version 1, else the QP number.
            rsn: if self.cqe_v1 {
                qp.uidx.unwrap_or(qpn)
            } else {
                qpn
            },
            cqe_v1: self.cqe_v1,
            srq: if recv { qp.srq.clone() } else { None },
        })
    }

    /// What to remove from this CQ now that QP `qp` is destroyed (libmlx5 `mlx5_destroy_qp`
    /// → `__mlx5_cq_clean`): as [`reset_filter`](Self::reset_filter), but from the QP's own
    /// tables, not by its number (the kernel may already have given the number to a new QP,
    /// whose entry then stands in the registry).
    pub fn destroy_filter(&self, qp: &QpShared, recv: bool) -> ResetFilter {
        ResetFilter {
            rsn: if self.cqe_v1 {
                qp.uidx.unwrap_or(qp.qpn)
            } else {
                qp.qpn
            },
            cqe_v1: self.cqe_v1,
            srq: if recv { qp.srq.clone() } else { None },
        }
    }
}

/// The entries of a QP moved to RESET, as libmlx5's `free_res_cqe` picks them for
/// `mlx5_cq_clean`: with CQE version 1 those whose `srqn_uidx` is the QP's user index, with
/// version 0 those whose QP number is the QP's. A removed receive completion of an SRQ (on
/// the QP's receive CQ; version 1: a responder opcode, version 0: a non-zero `srqn`) gives
/// its WQE back to the SRQ's free list, as its poll would have.
#[derive(Debug)]
pub struct ResetFilter {
    pub(super) rsn: u32,
    pub(super) cqe_v1: bool,
    pub(super) srq: Option<Arc<SrqShared>>,
}

impl ResetFilter {
    /// Whether `cqe` goes (and frees its SRQ WQE when it does, see above).
    pub fn removes(&self, cqe: &Cqe64) -> bool {
        self.removes_reporting(cqe, &mut |_| {})
    }

    /// As [`removes`](Self::removes), giving the `wr_id` of each SRQ WQE it frees to
    /// `srq_done` (what the core then releases, [`CqOps::qp_destroyed`]).
    ///
    /// [`CqOps::qp_destroyed`]: rverbs_uverbs::driver::CqOps::qp_destroyed
    pub fn removes_reporting(&self, cqe: &Cqe64, srq_done: &mut dyn FnMut(u64)) -> bool {
        let (ours, srq_wqe) = if self.cqe_v1 {
            let responder = matches!(
                cqe.opcode(),
                CqeOpcode::RESP_WR_IMM
                    | CqeOpcode::RESP_SEND
                    | CqeOpcode::RESP_SEND_IMM
                    | CqeOpcode::RESP_SEND_INV
                    | CqeOpcode::RESP_ERR
            );
            (cqe.srqn_uidx() & 0xff_ffff == self.rsn, responder)
        } else {
            (cqe.qpn() == self.rsn, cqe.srqn_uidx() & 0xff_ffff != 0)
        };
        if ours && srq_wqe {
            // Version 0: only a receive of this SRQ (its number in the CQE). The QP's own
            // always are; a QP that got the destroyed one's number on another SRQ before the
            // clean ran must not free a WQE of this one that is still posted.
            let srq = self
                .srq
                .as_ref()
                .filter(|s| self.cqe_v1 || cqe.srqn_uidx() & 0xff_ffff == s.srqn);
            if let Some(wr_id) = srq.and_then(|s| s.done(cqe.wqe_counter())) {
                srq_done(wr_id);
            }
        }
        ours
    }
}

/// A user index (CQE version 1: what the CQEs of a QP carry in `srqn_uidx`), taken from
/// its context's table and freed on drop.
#[derive(Debug)]
pub struct UserIndex {
    pub(super) idx: u32,
    pub(super) table: Arc<Mutex<Vec<bool>>>,
}

/// User indices fit 24 bits (the CQE field).
pub(super) const MAX_UIDX: usize = 0xff_ffff;

impl UserIndex {
    /// The lowest free index of `table` (libmlx5 `mlx5_store_uidx`).
    pub fn take(table: &Arc<Mutex<Vec<bool>>>) -> rverbs_uverbs::Result<Self> {
        let mut t = table.lock().unwrap_or_else(|e| e.into_inner());
        let i = match t.iter().position(|used| !used) {
            Some(i) => i,
            None if t.len() < MAX_UIDX => {
                t.push(false);
                t.len() - 1
            }
            None => {
                return Err(Error::invalid(
                    "create QP on mlx5",
                    format!("all {MAX_UIDX} user indices of the context are in use"),
                )
                .into())
            }
        };
        t[i] = true;
        Ok(Self {
            idx: i as u32,
            table: table.clone(),
        })
    }

    /// The index.
    pub fn get(&self) -> u32 {
        self.idx
    }
}

impl Drop for UserIndex {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t[self.idx as usize] = false;
    }
}
