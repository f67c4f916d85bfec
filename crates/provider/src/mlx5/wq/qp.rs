//! The mlx5 QP: its buffer and parts, what it encodes ([`send_caps`]), and its data path
//! ([`QpOps`]: posting sends and receives, ringing the doorbell).

#![allow(unsafe_code)]

use super::*;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rverbs_uverbs::driver::{KernelObj, QpOps};
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::Error;
use rverbs_uverbs::{OpSet, SendCaps};
use rverbs_uverbs::{PostError, PostFault};
use rverbs_uverbs::{RecvWr, SendFlags, SendWr};

use crate::mlx5::abi::mlx5_ib_create_qp;
use crate::mlx5::cq::Region;

/// An mlx5 QP's data path: the buffer (RQ then SQ) and doorbell record, the posting state,
/// its BlueFlame register.
pub struct Mlx5Qp {
    // The send path's state and constants first (one or two cache lines).
    pub(super) sq_start: *mut u8,
    pub(super) sq_end: *mut u8,
    /// `shared.sq`'s slots (kept alive by `shared`).
    pub(super) sq_slots: *const SqSlot,
    pub(super) dbrec: *mut u32,
    /// The control segment's bytes 4–7 for this QP as a little-endian u64's high half:
    /// `be32(qpn << 8)`; the size in 16-byte units goes into its low byte (byte 7).
    pub(super) qpn_ds: u64,
    pub(super) sq_mask: u32,
    pub(super) cur_post: u32,
    pub(super) sq_head: u32,
    pub(super) max_post: u32,
    pub(super) max_gs: u32,
    pub(super) max_inline: u32,
    /// `fm_ce_se` by `SendFlags` bits 0–2 (FENCE, SIGNALED, SOLICITED), sq_sig_all included.
    pub(super) fm_ce_se: [u8; 8],
    /// The fence the next work request gets unless it asks for the full one: the small
    /// initiator fence after a UMR, across posts (libmlx5 `fm_cache`), else 0.
    pub(super) fm_cache: u8,
    /// The operations this QP takes ([`SendCaps::allowed`] of [`send_caps`]): uverbs' `Qp`
    /// refuses the others before posting (`QpOps::post_send`'s contract), so the encoder
    /// does not check them again; debug builds assert the contract.
    pub(super) ops_ok: OpSet,
    pub(super) ud: bool,
    /// The largest WQE (16-byte units) BlueFlame copies, for inline and other single WRs (0:
    /// never: `MLX5_SHUT_UP_BF`, register without BlueFlame, or `prefer_bf` off for non-inline).
    pub(super) bf_max_inl: u32,
    pub(super) bf_max_plain: u32,
    pub(super) bf: Arc<BfReg>,
    pub(super) region: Region,
    pub(super) qpn: u32,
    pub(super) qp_type: QpType,
    pub(super) sz: QpSizing,
    pub(super) rq_head: u32,
    pub(super) ahs: Arc<AhTable>,
    pub(super) shared: Arc<QpShared>,
    pub(super) reg: Arc<Registry>,
    pub(super) _lease: Option<crate::mlx5::uar::UarLease>,
    pub(super) _uidx: Option<UserIndex>,
}

/// What mlx5 encodes, per QP type (the data `Driver::send_caps` returns).
/// Its op table, [`super::wqe::OPS`], is beside the encoder.
pub(crate) fn send_caps() -> SendCaps {
    SendCaps::from_table(&super::wqe::OPS)
}

// SAFETY: the raw pointers point into `region`, which this value owns, and (`sq_slots`) into
// `shared`'s slot table of atomics, which it keeps alive; the BlueFlame register is Sync.
// Moving the QP between threads moves all of it.
unsafe impl Send for Mlx5Qp {}

impl fmt::Debug for Mlx5Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlx5Qp")
            .field("qpn", &self.qpn)
            .field("sizing", &self.sz)
            .field("bf", &self.bf)
            .finish_non_exhaustive()
    }
}

/// Memory and driver data of a QP being created, before the kernel has answered.
pub struct QpBuf {
    pub(super) region: Region,
    pub(super) sz: QpSizing,
    pub(super) dbrec_off: usize,
}

impl QpBuf {
    /// Allocates the zeroed buffer and doorbell record for `sz`.
    pub fn new(sz: QpSizing) -> rverbs_uverbs::Result<Self> {
        sz.check_layout()
            .map_err(|d| Error::invalid("allocate mlx5 QP buffer", d))?;
        let page = rustix::param::page_size();
        let dbrec_off = align(sz.buf_size.max(1), page);
        let region = Region::new(dbrec_off + page)?;
        Ok(Self {
            region,
            sz,
            dbrec_off,
        })
    }

    /// The buffer's start (the receive queue, then the send queue at `sq_offset`).
    #[cfg(test)]
    pub fn buf_ptr(&self) -> *mut u8 {
        self.region.ptr()
    }

    /// The CREATE_QP driver data. `uidx`: the user index CQEs of version 1 carry (`None`
    /// with CQE version 0: 0xffffff). `uar_page`: with dynamic UARs, the page id of the UAR
    /// whose register the QP uses (`MLX5_QP_FLAG_UAR_PAGE_INDEX`); `None` with static UARs
    /// (the kernel picks the register and answers it).
    pub fn create_udata(&self, uidx: Option<u32>, uar_page: Option<u32>) -> mlx5_ib_create_qp {
        mlx5_ib_create_qp {
            buf_addr: self.region.ptr() as u64,
            // SAFETY: in bounds of the region.
            db_addr: unsafe { self.region.ptr().add(self.dbrec_off) } as u64,
            sq_wqe_count: self.sz.sq_wqe_cnt,
            rq_wqe_count: self.sz.rq_wqe_cnt,
            rq_wqe_shift: self.sz.rq_wqe_shift,
            flags: if uar_page.is_some() {
                crate::mlx5::abi::MLX5_QP_FLAG_UAR_PAGE_INDEX
            } else {
                0
            },
            uidx: uidx.unwrap_or(0xff_ffff),
            bfreg_index: uar_page.unwrap_or(0),
            ..Default::default()
        }
    }
}

/// Everything [`Mlx5Qp::new`] needs besides the buffer.
pub struct QpParts {
    /// The QP number the kernel gave.
    pub qpn: u32,
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Every send is signalled.
    pub sq_sig_all: bool,
    /// The QP's BlueFlame register.
    pub bf: Arc<BfReg>,
    /// Doorbell policy.
    pub policy: BfPolicy,
    /// The context's AHs.
    pub ahs: Arc<AhTable>,
    /// The context's registry (the QP registers itself).
    pub reg: Arc<Registry>,
    /// The SRQ's shared state, if the QP receives through one.
    pub srq: Option<Arc<SrqShared>>,
    /// With dynamic UARs: the pool's lease on `bf`, given back when the QP is dropped.
    pub lease: Option<crate::mlx5::uar::UarLease>,
    /// With CQE version 1: the QP's user index, freed when the QP is dropped.
    pub uidx: Option<UserIndex>,
}

impl Mlx5Qp {
    /// The data path over `buf`, registered under its QP number.
    pub fn new(buf: QpBuf, p: QpParts) -> rverbs_uverbs::Result<Self> {
        if p.qpn > 0xff_ffff {
            return Err(Error::protocol(
                "create QP on mlx5",
                format!("QP number {:#x} does not fit 24 bits", p.qpn),
            )
            .into());
        }
        let sz = buf.sz;
        // `QpBuf::new` checked the layout; the WQE sizes depend on the QP type as well.
        sz.check_for(p.qp_type)
            .map_err(|d| Error::invalid("create QP on mlx5", d))?;
        let base = buf.region.ptr();
        let atomics = |n: u32| (0..n).map(|_| AtomicU64::new(0)).collect::<Box<[_]>>();
        let shared = Arc::new(QpShared {
            qpn: p.qpn,
            sq_mask: sz.sq_wqe_cnt.wrapping_sub(1),
            sq: (0..sz.sq_wqe_cnt).map(|_| SqSlot::default()).collect(),
            sq_tail: AtomicU32::new(0),
            rq_mask: sz.rq_wqe_cnt.wrapping_sub(1),
            rq_wrid: atomics(sz.rq_wqe_cnt),
            rq_tail: AtomicU32::new(0),
            srq: p.srq,
            uidx: p.uidx.as_ref().map(UserIndex::get),
        });
        p.reg.insert_qp(shared.clone());
        let sig = if p.sq_sig_all { CTRL_CQ_UPDATE } else { 0 };
        let fm_ce_se: [u8; 8] = std::array::from_fn(|f| {
            let f = SendFlags::from_bits_truncate(f as u32);
            sig | if f.contains(SendFlags::FENCE) {
                CTRL_FENCE
            } else {
                0
            } | if f.contains(SendFlags::SIGNALED) {
                CTRL_CQ_UPDATE
            } else {
                0
            } | if f.contains(SendFlags::SOLICITED) {
                CTRL_SOLICITED
            } else {
                0
            }
        });
        let ops_ok = send_caps().allowed(p.qp_type);
        // BlueFlame (libmlx5 `post_send_db`): a WQE of more than one unit that fits the
        // register's half; inline WQEs unless `MLX5_SHUT_UP_BF`, others only with `prefer_bf`.
        // Whole 64-byte blocks of the half only (the copy writes whole blocks; a half is 256
        // bytes on every ConnectX, but the kernel's bf_reg_size is not checked to be a
        // multiple of 128).
        let bf_units = if p.policy.shut_up_bf {
            0
        } else {
            ((p.bf.bf_size() & !63) / 16) as u32
        };
        Ok(Self {
            // SAFETY: both inside the region (sq_offset + SQ bytes = buf_size ≤ dbrec_off,
            // checked by `QpBuf::new`).
            sq_start: unsafe { base.add(sz.sq_offset) },
            // SAFETY: as above.
            sq_end: unsafe { base.add(sz.buf_size) },
            sq_slots: shared.sq.as_ptr(),
            // SAFETY: the doorbell record page follows the buffer inside the region.
            dbrec: unsafe { base.add(buf.dbrec_off) }.cast(),
            qpn_ds: u64::from((p.qpn << 8).to_be()) << 32,
            sq_mask: sz.sq_wqe_cnt.wrapping_sub(1),
            cur_post: 0,
            sq_head: 0,
            // No SQ: no room (the full-queue refusal).
            max_post: if sz.sq_wqe_cnt == 0 {
                0
            } else {
                sz.sq_max_post
            },
            max_gs: sz.sq_max_gs,
            max_inline: sz.max_inline,
            fm_ce_se,
            fm_cache: 0,
            ops_ok,
            ud: p.qp_type == QpType::UD,
            bf_max_inl: bf_units,
            bf_max_plain: if p.policy.prefer_bf { bf_units } else { 0 },
            bf: p.bf,
            region: buf.region,
            qpn: p.qpn,
            qp_type: p.qp_type,
            sz,
            rq_head: 0,
            ahs: p.ahs,
            shared,
            reg: p.reg,
            _lease: p.lease,
            _uidx: p.uidx,
        })
    }
}

impl QpOps for Mlx5Qp {
    unsafe fn post_send(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[SendWr<'_>],
    ) -> Result<(), PostError> {
        debug_assert!(
            wrs.iter().all(|w| self.ops_ok.contains(w.op.kind())),
            "QpOps::post_send's contract: every operation is one the QP accepts"
        );
        // Acquire: the poller's reads of the slots it freed happen before we reuse them.
        let tail = self.shared.sq_tail.load(Ordering::Acquire);
        let outstanding = self.sq_head.wrapping_sub(tail);
        // Full SQ, as libmlx5 counts it (work requests, not blocks): request `n` of the list
        // is refused when `outstanding + n >= max_send_wr`; one test for the whole list.
        let room = self.max_post.saturating_sub(outstanding) as usize;
        let take = wrs.len().min(room);
        let mut cur = self.cur_post;
        let mut fence = self.fm_cache;
        let mut last = (cur, 0);
        let mut fault = None;
        let mut nreq = 0;
        while nreq < take {
            // SAFETY: nreq < take ≤ wrs.len().
            let wr = unsafe { wrs.get_unchecked(nreq) };
            // SAFETY: room checked above; the SGE contract is the caller's.
            match unsafe { self.build_send(wr, cur, &mut fence) } {
                Ok(size) => {
                    // SAFETY: the slot index is masked to the SQ's blocks, the table's length.
                    let slot = unsafe { &*self.sq_slots.add((cur & self.sq_mask) as usize) };
                    // Relaxed: published by the doorbell record's Release store below.
                    slot.wr_id.store(wr.wr_id, Ordering::Relaxed);
                    slot.head
                        .store(self.sq_head.wrapping_add(nreq as u32), Ordering::Relaxed);
                    last = (cur, size);
                    cur = cur.wrapping_add(size.div_ceil(4) as u32);
                    nreq += 1;
                }
                Err(f) => {
                    fault = Some(f);
                    break;
                }
            }
        }
        self.fm_cache = fence;
        if nreq > 0 {
            self.cur_post = cur;
            self.sq_head = self.sq_head.wrapping_add(nreq as u32);
            // SAFETY: the doorbell record lives in our region.
            let db = unsafe { AtomicU32::from_ptr(self.dbrec.add(SND_DBR)) };
            // Release: the WQEs are written before the device can see the new counter
            // (libmlx5 `udma_to_device_barrier` before the record store).
            db.store((cur & 0xffff).to_be(), Ordering::Release);
            // The last WQE (the only one when BlueFlame may copy it) and its size.
            let (last, size) = last;
            // SAFETY: the block of the last WQE built, in the SQ.
            let ctrl = unsafe { self.sq_start.add(((last & self.sq_mask) as usize) << 6) };
            let bf = nreq == 1 && {
                // SAFETY: nreq == 1 ≤ wrs.len().
                let w = unsafe { wrs.get_unchecked(0) };
                let max = if w.flags.contains(SendFlags::INLINE) && !w.sge.is_empty() {
                    self.bf_max_inl
                } else {
                    self.bf_max_plain
                };
                size > 1 && size <= max as usize
            };
            // SAFETY: `ctrl` is the last WQE written, of `size` units, inside the SQ; with
            // `bf` it fits the register's BlueFlame half (bf_max_* ≤ bf_size / 16).
            unsafe { self.bf.ring(ctrl, size, bf, self.sq_start, self.sq_end) };
        }
        if let Some(f) = fault {
            return Err(PostError::refused(nreq, f));
        }
        if take < wrs.len() {
            return Err(PostError::queue_full(
                take,
                outstanding.wrapping_add(take as u32),
            ));
        }
        Ok(())
    }

    unsafe fn post_recv(
        &mut self,
        _qp: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        let mut nreq = 0;
        let mut err = None;
        // Acquire: as for the send queue.
        let tail = self.shared.rq_tail.load(Ordering::Acquire);
        for wr in wrs {
            if self.sz.rq_wqe_cnt == 0
                || self.rq_head.wrapping_sub(tail) as usize + nreq >= self.sz.rq_wqe_cnt as usize
            {
                let outstanding = self.rq_head.wrapping_sub(tail) as usize + nreq;
                err = Some(PostError::queue_full(nreq, outstanding as u32));
                break;
            }
            if wr.sge.len() > self.sz.rq_max_gs as usize {
                err = Some(PostError::refused(
                    nreq,
                    PostFault::TooManySges {
                        num_sge: wr.sge.len(),
                        max_sge: self.sz.rq_max_gs,
                    },
                ));
                break;
            }
            let ind = self.rq_head.wrapping_add(nreq as u32) & self.shared.rq_mask;
            // SAFETY: the WQE lies in the RQ (ind masked); at most max_gs segments.
            unsafe {
                let scat = self
                    .region
                    .ptr()
                    .add((ind as usize) << self.sz.rq_wqe_shift);
                write_scatter(scat, wr.sge, self.sz.rq_max_gs as usize, true);
            }
            // Relaxed: published by the record's Release store.
            self.shared.rq_wrid[ind as usize].store(wr.wr_id, Ordering::Relaxed);
            nreq += 1;
        }
        if nreq > 0 {
            self.rq_head = self.rq_head.wrapping_add(nreq as u32);
            // SAFETY: in our region.
            let db = unsafe { AtomicU32::from_ptr(self.dbrec.add(RCV_DBR)) };
            // Release: the WQEs before the counter the device reads (no UAR doorbell for
            // receives).
            db.store((self.rq_head & 0xffff).to_be(), Ordering::Release);
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn caps(&self) -> Option<QpCaps> {
        Some(self.sz.caps())
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn reset(&mut self) {
        // libmlx5 `mlx5_init_qp_indices` and the doorbell records after a modify to RESET.
        // The pending fence (`fm_cache`) and the BlueFlame half stay, as in libmlx5.
        self.cur_post = 0;
        self.sq_head = 0;
        self.rq_head = 0;
        // Release: pairs with the post paths' Acquire loads of the tails (the next post
        // here, under the same lock, sees them anyway). The CQs no longer hold entries of
        // this QP (`CqOps::qp_reset` ran first) and the device makes none in RESET, so no
        // poller moves these tails now; a CQE the device still wrote would only name a
        // masked slot.
        self.shared.sq_tail.store(0, Ordering::Release);
        self.shared.rq_tail.store(0, Ordering::Release);
        for i in [RCV_DBR, SND_DBR] {
            // SAFETY: the doorbell record lives in our region, 4-byte aligned; the device
            // reads it concurrently, so it is written as an atomic.
            unsafe { AtomicU32::from_ptr(self.dbrec.add(i)) }.store(0, Ordering::Release);
        }
    }
}

impl Mlx5Qp {
    /// What the CQ poller knows of this QP (its tables, its SRQ, its user index).
    pub fn shared(&self) -> &Arc<QpShared> {
        &self.shared
    }
}

impl Drop for Mlx5Qp {
    fn drop(&mut self) {
        self.reg.remove_qp(&self.shared);
    }
}
