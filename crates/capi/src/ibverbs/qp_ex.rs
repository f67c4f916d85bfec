//! The extended QP send API: `ibv_create_qp_ex` (the `verbs_context.create_qp_ex` slot),
//! `ibv_qp_to_qp_ex` and the `ibv_qp_ex` builders the inline `ibv_wr_*` functions of
//! `verbs.h` call.
//!
//! A QP made with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` gets a [`QpEx`]: storage kept for the
//! QP's lifetime in which the builders between `wr_start` and `wr_complete` accumulate work
//! requests (operation, flags, `wr_id`, UD address, SGEs, a copy of inline data). Nothing is
//! allocated per request once the storage has grown to the largest batch seen.
//! `wr_complete` checks the whole batch, then posts it through `Qp::post_send_raw` (16
//! requests per doorbell); `wr_abort` discards it.
//!
//! Errors follow librxe: a builder that cannot take its request (batch longer than the send
//! queue, more SGEs than `max_send_sge`, more inline data than `max_inline_data`) records
//! `ENOSPC`; a setter with no request before it, a UD request without an address, or a
//! builder outside `wr_start`…`wr_complete` records `EINVAL`. The first error recorded is
//! what `wr_complete` returns, and then nothing of the batch is posted. An error of the post
//! itself (the QP not in RTS: `EINVAL`; the ring full: `ENOMEM`) is returned as the post
//! reports it; requests of earlier doorbells of the same batch stay posted.
//!
//! Which operations a QP type takes is rverbs' one classification (`rverbs_uverbs::op`: the
//! transport's operations that the provider encodes; with rxe, binds on RC and UC, local
//! invalidation on RC). Memory-window binds (`wr_bind_mw`) and local invalidation
//! (`wr_local_inv`) go through `mw.rs`' bind conversion and rverbs' post path as `ibv_post_send`'s do.
//! Builders for atomic write, TSO and XRC are NULL, and `ibv_create_qp_ex` refuses their
//! `send_ops_flags` with `EOPNOTSUPP` (as a provider without them does).

use std::ffi::{c_int, c_void};
use std::io;
use std::ptr::null_mut;
use std::sync::Mutex;

use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::{OpKind, OpSet, SendCaps, SendFlags, SendOp, SendWr, Sge, UdDest};

use super::{fail, ibv_create_qp, CAh, CPd, CQp};
use crate::abi::*;
use crate::handle::FromC;

/// `IBV_QP_INIT_ATTR_PD`.
const INIT_ATTR_PD: u32 = 1 << 0;
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
const INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
const INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// The `comp_mask` bits [`create_qp_ex_op`] carries (librxe's set).
const INIT_ATTR_SUPPORTED: u32 = INIT_ATTR_PD | INIT_ATTR_CREATE_FLAGS | INIT_ATTR_SEND_OPS_FLAGS;

/// `IBV_QP_EX_WITH_*` bits.
mod with {
    pub const RDMA_WRITE: u64 = 1 << 0;
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    pub const SEND: u64 = 1 << 2;
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    pub const RDMA_READ: u64 = 1 << 4;
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    pub const LOCAL_INV: u64 = 1 << 7;
    pub const BIND_MW: u64 = 1 << 8;
    pub const SEND_WITH_INV: u64 = 1 << 9;
    pub const ATOMIC_WRITE: u64 = 1 << 12;
}

/// The send operations (`IBV_QP_EX_WITH_*` bits) a `qp_type` QP takes through the builders:
/// what rverbs' classification accepts for the provider's `caps`
/// ([`SendCaps::allowed`]: the transport's operations that the provider encodes; the
/// `IBV_QP_EX_WITH_*` bits: [`OpKind::qp_ex_bit`]). FLUSH is left out: rdma-core 44's
/// `ibv_qp_ex` has no `wr_flush` builder. Whether the device has ATOMIC_WRITE is checked once
/// the QP exists. `None` for QP types without the extended send API here (XRC, raw packet).
fn supported_ops(caps: SendCaps, qp_type: u32) -> Option<u64> {
    let t = QpType(u8::try_from(qp_type).ok()?);
    matches!(t, QpType::RC | QpType::UC | QpType::UD)
        .then(|| caps.allowed(t).bits() & !OpKind::Flush.qp_ex_bit())
}

/// A provider that encodes every operation: what the transport alone allows.
const ANY_PROVIDER: SendCaps = SendCaps {
    rc: OpSet::of(&OpKind::ALL),
    uc: OpSet::of(&OpKind::ALL),
    ud: OpSet::of(&OpKind::ALL),
};

/// Whether the `send_ops` bits are all supported on a `qp_type` QP of a provider with `caps`.
fn fits(caps: SendCaps, send_ops: u64, qp_type: u32) -> bool {
    supported_ops(caps, qp_type).is_some_and(|s| send_ops & !s == 0)
}

/// One request of a batch.
#[derive(Clone, Copy)]
struct Pending {
    wr_id: u64,
    op: SendOp,
    flags: SendFlags,
    ud: Option<UdDest>,
    /// `Batch::sges[sge_start..sge_start + sge_len]`.
    sge_start: usize,
    sge_len: usize,
    /// The SGEs hold offsets into `Batch::inline` (made absolute at `wr_complete`).
    inline: bool,
}

/// The requests built since `wr_start`.
#[derive(Default)]
struct Batch {
    open: bool,
    err: c_int,
    wrs: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

impl Batch {
    fn reset(&mut self) {
        self.err = 0;
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
    }

    /// Records `e` unless an earlier error is recorded.
    fn error(&mut self, e: c_int) {
        if self.err == 0 {
            self.err = e;
        }
    }
}

/// The extended send API's state of one QP.
pub struct QpEx {
    batch: Mutex<Batch>,
    max_wr: usize,
    max_sge: usize,
    max_inline: usize,
}

/// # Safety
/// `qp` is the `ibv_qp_ex` of a live QP of ours (\[ops\]: the builders are reached only
/// through the `ibv_qp_ex` they are set in, which C dereferenced to find them).
unsafe fn parts<'a>(qp: *mut ibv_qp_ex) -> (&'a CQp, &'a QpEx) {
    // SAFETY: [ops] [object] qp; the ibv_qp_ex begins with the ibv_qp, the first field of
    // its CQp ([owner]).
    let q = unsafe { CQp::from_c(qp.cast()) }.expect("[ops]: C found this function through the QP");
    let ex =
        q.ex.get()
            .expect("the ibv_wr_* builders are only set on QPs with the extended send API");
    (q, ex)
}

/// Runs `f` on the QP's batch (the caller serialises its `ibv_wr_*` calls on one QP, as
/// libibverbs requires; the lock only keeps a careless caller from corrupting memory).
///
/// # Safety
/// As [`parts`].
unsafe fn with_batch<R>(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpEx, &mut Batch) -> R) -> R {
    // SAFETY: [ops] qp.
    let (_, ex) = unsafe { parts(qp) };
    let mut b = ex.batch.lock().unwrap_or_else(|p| p.into_inner());
    f(ex, &mut b)
}

/// A builder: appends a request with the caller's `wr_id` and `wr_flags`.
///
/// # Safety
/// As [`parts`].
unsafe fn build(qp: *mut ibv_qp_ex, op: SendOp) {
    // SAFETY: [ops] qp; [c-struct] raw reads of the fields the caller set before calling the builder.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    // SAFETY: [ops] qp.
    unsafe {
        with_batch(qp, |ex, b| {
            if !b.open {
                b.error(libc::EINVAL);
            } else if b.wrs.len() >= ex.max_wr {
                b.error(libc::ENOSPC);
            }
            if b.err != 0 {
                return;
            }
            b.wrs.push(Pending {
                wr_id,
                op,
                // With IBV_SEND_INLINE in wr_flags and SGEs from wr_set_sge*, the provider
                // copies the SGEs' bytes at wr_complete (as ibv_post_send does).
                flags: SendFlags::from_bits_retain(flags),
                ud: None,
                sge_start: b.sges.len(),
                sge_len: 0,
                inline: false,
            });
        })
    }
}

/// A setter: changes the last request built, or records `EINVAL` when there is none.
///
/// # Safety
/// As [`parts`].
unsafe fn set_last(qp: *mut ibv_qp_ex, f: impl FnOnce(&QpEx, &mut Batch, usize)) {
    // SAFETY: [ops] qp.
    unsafe {
        with_batch(qp, |ex, b| {
            if b.err != 0 {
                return;
            }
            if !b.open || b.wrs.is_empty() {
                b.error(libc::EINVAL);
                return;
            }
            let last = b.wrs.len() - 1;
            f(ex, b, last);
        })
    }
}

/// Replaces the last request's gather list with `sges` (taken from the pool's end).
fn set_sges(b: &mut Batch, last: usize, sges: impl Iterator<Item = Sge>, inline: bool) {
    // The last request's SGEs are the pool's tail: drop any set before, then append.
    let start = b.wrs[last].sge_start;
    b.sges.truncate(start);
    b.sges.extend(sges);
    let w = &mut b.wrs[last];
    w.sge_len = b.sges.len() - start;
    w.inline = inline;
    if inline {
        w.flags |= SendFlags::INLINE;
    }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: [ops] reached only through the ops of a QP of ours.
    unsafe { build(qp, SendOp::Send) }
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp_ex, imm_be: u32) {
    let imm = u32::from_be(imm_be);
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, SendOp::SendWithImm { imm }) }
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, SendOp::SendWithInv { invalidate_rkey }) }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp_ex, invalidate_rkey: u32) {
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, SendOp::LocalInv { invalidate_rkey }) }
}

/// `wr_bind_mw`: a bind of `mw` (type 2: `rkey` is its new key, `mw->rkey` stays as it is, as
/// with `IBV_WR_BIND_MW` in `ibv_post_send`); a NULL window or bind info records `EINVAL`.
///
/// # Safety
/// As [`parts`]; `mw` is NULL or a window of ours, `info` NULL or readable with its region
/// NULL or ours (the C caller's contract of `ibv_wr_bind_mw`).
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    if mw.is_null() || info.is_null() {
        // SAFETY: [ops] qp.
        unsafe { with_batch(qp, |_, b| b.error(libc::EINVAL)) };
        return;
    }
    // SAFETY: [ops] qp; [object] window and region, [in] bind info.
    let op = SendOp::BindMw(unsafe { super::mw::raw_bind(mw, rkey, &*info) });
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, op) }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, SendOp::RdmaWrite { remote_addr, rkey }) }
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_be: u32,
) {
    let imm = u32::from_be(imm_be);
    let op = SendOp::RdmaWriteWithImm {
        remote_addr,
        rkey,
        imm,
    };
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, op) }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, SendOp::RdmaRead { remote_addr, rkey }) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let op = SendOp::AtomicCmpSwp {
        remote_addr,
        rkey,
        compare,
        swap,
    };
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, op) }
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    let op = SendOp::AtomicFetchAdd {
        remote_addr,
        rkey,
        add,
    };
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, op) }
}

/// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` (read now, as librxe does) go to the
/// peer's `remote_addr` as one unit. A NULL `atomic_wr` fails the batch with `EINVAL`.
///
/// # Safety
/// As `wr_send`; `atomic_wr` is NULL or names 8 readable bytes (ordinary memory of the caller:
/// a plain copy).
unsafe extern "C" fn wr_atomic_write(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    if atomic_wr.is_null() {
        // SAFETY: [ops] as wr_send.
        let (_, ex) = unsafe { parts(qp) };
        ex.batch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .error(libc::EINVAL);
        return;
    }
    // SAFETY: non-NULL: 8 readable bytes (the caller's contract).
    let value = unsafe { atomic_wr.cast::<[u8; 8]>().read_unaligned() };
    let op = SendOp::AtomicWrite {
        remote_addr,
        rkey,
        value,
    };
    // SAFETY: [ops] as wr_send.
    unsafe { build(qp, op) }
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: [ops] as wr_send.
    let (q, _) = unsafe { parts(qp) };
    if !matches!(q.qp.qp_type(), QpType::UD | QpType::DRIVER) {
        // Connected QPs have their destination: nothing to set (librxe ignores it too).
        return;
    }
    // SAFETY: [object] ah (ibv_wr_set_ud_addr's argument); NULL is refused when posting.
    let dest = unsafe { CAh::from_c_or_none(ah) }.map(|a| a.ah.ud_dest(remote_qpn, remote_qkey));
    // SAFETY: [ops] as wr_send.
    unsafe {
        set_last(qp, |_, b, last| match dest {
            Some(d) => b.wrs[last].ud = Some(d),
            None => b.error(libc::EINVAL),
        })
    }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // As librxe: a zero-length element is no element.
    let sge = (length != 0).then_some(Sge { addr, length, lkey });
    // SAFETY: [ops] as wr_send.
    unsafe { set_last(qp, |_, b, last| set_sges(b, last, sge.into_iter(), false)) }
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: [ops] as wr_send.
    unsafe {
        set_last(qp, |ex, b, last| {
            if num_sge > ex.max_sge {
                return b.error(libc::ENOSPC);
            }
            if num_sge > 0 && sg_list.is_null() {
                return b.error(libc::EINVAL);
            }
            let list: &[Sge] = if num_sge == 0 {
                &[]
            } else {
                // SAFETY: [buf] ibv_wr_set_sge_list's sg_list: num_sge readable elements (copied
                // here, so the caller may reuse the array at once, as with librxe).
                std::slice::from_raw_parts(sg_list, num_sge)
            };
            set_sges(b, last, list.iter().copied(), false);
        })
    }
}

/// Copies inline buffers into the batch's pool as the last request's gather list.
///
/// # Safety
/// As [`parts`]; each `(addr, len)` is readable.
unsafe fn set_inline(qp: *mut ibv_qp_ex, bufs: &[(*const u8, usize)]) {
    // SAFETY: [ops] qp; [wr] sg_list has num_sge readable entries.
    unsafe {
        set_last(qp, |ex, b, last| {
            let total: usize = bufs.iter().map(|&(_, n)| n).sum();
            if total > ex.max_inline {
                return b.error(libc::ENOSPC);
            }
            if bufs.iter().any(|&(p, n)| n > 0 && p.is_null()) {
                return b.error(libc::EINVAL);
            }
            let mut sges = [Sge::default(); 1];
            let mut n = 0;
            if total > 0 {
                let off = b.inline.len();
                for &(p, len) in bufs.iter().filter(|&&(_, len)| len > 0) {
                    // SAFETY: [buf] len readable bytes at p.
                    b.inline
                        .extend_from_slice(std::slice::from_raw_parts(p, len));
                }
                // One element over the copied bytes; addr is the offset in the pool.
                sges[0] = Sge {
                    addr: off as u64,
                    length: total as u32,
                    lkey: 0,
                };
                n = 1;
            }
            set_sges(b, last, sges[..n].iter().copied(), true);
        })
    }
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    // SAFETY: [ops] as wr_send; [buf] addr has length readable bytes.
    unsafe { set_inline(qp, &[(addr.cast_const().cast(), length)]) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    if num_buf > 0 && buf_list.is_null() {
        // SAFETY: [ops] as wr_send.
        return unsafe { set_last(qp, |_, b, _| b.error(libc::EINVAL)) };
    }
    let list: &[ibv_data_buf] = if num_buf == 0 {
        &[]
    } else {
        // SAFETY: [buf] buf_list has num_buf readable entries.
        unsafe { std::slice::from_raw_parts(buf_list, num_buf) }
    };
    // Few buffers in practice; an inline list longer than 16 is copied through a Vec.
    let mut small = [(std::ptr::null::<u8>(), 0usize); 16];
    let mut big = Vec::new();
    let bufs: &[(*const u8, usize)] = if list.len() <= small.len() {
        for (d, s) in small.iter_mut().zip(list) {
            *d = (s.addr.cast_const().cast(), s.length);
        }
        &small[..list.len()]
    } else {
        big.extend(list.iter().map(|s| (s.addr.cast_const().cast(), s.length)));
        &big
    };
    // SAFETY: [ops] as wr_send; [buf] each buffer is readable.
    unsafe { set_inline(qp, bufs) }
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: [ops] as wr_send.
    unsafe {
        with_batch(qp, |_, b| {
            b.reset();
            b.open = true;
        })
    }
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: [ops] as wr_send.
    unsafe {
        with_batch(qp, |_, b| {
            b.reset();
            b.open = false;
        })
    }
}

/// How many requests one doorbell of `wr_complete` posts.
const BATCH: usize = 16;

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: [ops] as wr_send.
    let (q, _) = unsafe { parts(qp) };
    // UD and a provider's datagram QP (EFA's SRD) need each request's address.
    let ud = matches!(q.qp.qp_type(), QpType::UD | QpType::DRIVER);
    // SAFETY: [ops] as wr_send.
    unsafe {
        with_batch(qp, |_, b| {
            let ret = post_batch(q, b, ud);
            b.reset();
            b.open = false;
            ret
        })
    }
}

/// Checks and posts the batch; 0 or a positive errno.
fn post_batch(q: &CQp, b: &mut Batch, ud: bool) -> c_int {
    if !b.open {
        return libc::EINVAL;
    }
    if b.err != 0 {
        return b.err;
    }
    if ud && b.wrs.iter().any(|w| w.ud.is_none()) {
        return libc::EINVAL;
    }
    // The pool no longer grows: inline requests' offsets become addresses.
    let base = b.inline.as_ptr() as u64;
    for w in b.wrs.iter().filter(|w| w.inline) {
        for s in &mut b.sges[w.sge_start..w.sge_start + w.sge_len] {
            s.addr += base;
        }
    }
    for chunk in b.wrs.chunks(BATCH) {
        let mut wrs = [SendWr::send(0, &[]); BATCH];
        for (d, w) in wrs.iter_mut().zip(chunk) {
            *d = SendWr {
                wr_id: w.wr_id,
                op: w.op,
                sge: &b.sges[w.sge_start..w.sge_start + w.sge_len],
                flags: w.flags,
                ud: w.ud,
            };
        }
        // SAFETY: [registered] the SGEs of non-inline requests are the caller's (ibv_wr_set_sge*'s
        // contract: registered memory valid until the completion); those of inline requests
        // point into `b.inline`, which is not touched until this call returns (the provider
        // copies inline data during the post).
        if let Err(e) = unsafe { q.qp.post_send_raw(&wrs[..chunk.len()]) } {
            return fail(&io::Error::from(e));
        }
    }
    0
}

/// `verbs_context.create_qp_ex` (the inline `ibv_create_qp_ex`): librxe's extensions — a PD
/// (required), create flags (none: any flag is `EOPNOTSUPP`), and the extended send API
/// (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, see [`supported_ops`]). Others (XRC, TSO, RSS, …)
/// fail with `EOPNOTSUPP`.
///
/// # Safety
/// `attr` is readable and writable and names a PD and CQs (and an SRQ) of ours.
pub(crate) unsafe extern "C" fn create_qp_ex_op(
    _context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: [ops] [in] [out] the inline wrapper passes the caller's attributes.
    unsafe { create_qp_ex(&mut *attr, false) }
}

/// [`create_qp_ex_op`]'s work; with `driver` (`efadv_create_qp_ex`) the extended send API is
/// offered on `IBV_QPT_DRIVER` QPs too, with the operations the provider's own QP type
/// encodes (EFA's SRD: SEND, SEND with immediate, RDMA READ where the device has it).
///
/// # Safety
/// As [`create_qp_ex_op`].
pub(crate) unsafe fn create_qp_ex(a: &mut ibv_qp_init_attr_ex, driver: bool) -> *mut ibv_qp {
    let send_ops = (a.comp_mask & INIT_ATTR_SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
    // SAFETY: [in] a.pd is NULL or names an [object] PD.
    if !unsafe { qp_ex_offered(a, send_ops, driver) } {
        super::set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let mut base = a.base();
    // SAFETY: [in] attr names an [object] PD and CQs (and SRQ).
    let qp = unsafe { ibv_create_qp(a.pd, &mut base) };
    a.cap = base.cap;
    if qp.is_null() {
        return qp;
    }
    // SAFETY: [owner] just made by ibv_create_qp, alive.
    let q = unsafe { &*(qp as *const CQp) };
    if let Some(f) = send_ops.filter(|f| f & !q.qp.send_ops().bits() != 0) {
        // The provider encodes them, the device does not have them (ATOMIC_WRITE on a
        // kernel whose rxe lacks it): the QP goes again, nothing is left.
        super::fail(&ops_not_on_device(q, f));
        // SAFETY: [destroy] just made, never handed to C.
        unsafe { super::ibv_destroy_qp(qp) };
        super::set_errno(libc::EOPNOTSUPP);
        return null_mut();
    }
    let ex = qp_ex_state(q.qp.caps());
    let _ = q.ex.set(Box::new(ex));
    if let Some(f) = send_ops {
        // SAFETY: [c-struct] the C structure of a QP not yet handed to C: nobody else reads
        // or writes it (an async event that finds the QP touches only `events`), so a
        // short-lived exclusive reference to it is sound.
        set_ops(unsafe { &mut *q.c_ptr() }, f);
    }
    qp
}

/// Whether `ibv_create_qp_ex` offers what `a` asks: the attributes it takes, a PD, no create
/// flags, and `send_ops` (when asked) that some provider encodes and then this PD's does.
///
/// # Safety
/// `a.pd` is NULL or an \[object\] PD.
unsafe fn qp_ex_offered(a: &ibv_qp_init_attr_ex, send_ops: Option<u64>, driver: bool) -> bool {
    let unsupported = a.comp_mask & !INIT_ATTR_SUPPORTED != 0
        || a.comp_mask & INIT_ATTR_PD == 0
        || a.pd.is_null()
        || (a.comp_mask & INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0);
    let ops_ok = match send_ops {
        None => true,
        Some(f) if !unsupported && driver && a.qp_type == u32::from(QpType::DRIVER.0) => {
            // SAFETY: [in] a.pd is non-NULL (checked in `unsupported`) and names an [object]
            // PD.
            unsafe { CPd::from_c(a.pd) }
                .and_then(|pd| pd.pd.context().driver().ok().and_then(|d| d.driver_qp()))
                .is_some_and(|t| f & !(t.ops.bits() & !OpKind::Flush.qp_ex_bit()) == 0)
        }
        // What no provider could take is refused before the PD is looked at; then what this
        // PD's provider does not encode.
        Some(f) if !unsupported && fits(ANY_PROVIDER, f, a.qp_type) => {
            // SAFETY: [in] a.pd is non-NULL (checked in `unsupported`) and names an [object]
            // PD.
            unsafe { CPd::from_c(a.pd) }
                .and_then(|pd| pd.pd.context().driver().ok().map(|d| d.send_caps()))
                .is_some_and(|caps| fits(caps, f, a.qp_type))
        }
        Some(_) => false,
    };
    !unsupported && ops_ok
}

/// The refusal of send ops `f` that the provider encodes but `q`'s device does not report.
fn ops_not_on_device(q: &CQp, f: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!(
            "ibv_create_qp_ex: send ops {:#x} are not supported by this kernel's {} \
             (the device does not report them)",
            f & !q.qp.send_ops().bits(),
            q.qp.pd().context().name()
        ),
    )
}

/// The extended QP's batch state for a QP of capabilities `caps`.
fn qp_ex_state(caps: rverbs_uverbs::qp::QpCaps) -> QpEx {
    QpEx {
        batch: Mutex::new(Batch {
            // Grown on demand up to the send queue's size, then kept.
            wrs: Vec::with_capacity((caps.max_send_wr as usize).min(64)),
            ..Batch::default()
        }),
        max_wr: caps.max_send_wr as usize,
        max_sge: caps.max_send_sge as usize,
        max_inline: caps.max_inline_data as usize,
    }
}

/// Fills the builders of `ops` (the send operations asked for) and the setters.
fn set_ops(c: &mut ibv_qp_ex, ops: u64) {
    let on = |bit: u64| ops & bit != 0;
    if on(with::SEND) {
        c.wr_send = Some(wr_send);
    }
    if on(with::SEND_WITH_IMM) {
        c.wr_send_imm = Some(wr_send_imm);
    }
    if on(with::SEND_WITH_INV) {
        c.wr_send_inv = Some(wr_send_inv);
    }
    if on(with::RDMA_WRITE) {
        c.wr_rdma_write = Some(wr_rdma_write);
    }
    if on(with::RDMA_WRITE_WITH_IMM) {
        c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    }
    if on(with::RDMA_READ) {
        c.wr_rdma_read = Some(wr_rdma_read);
    }
    if on(with::ATOMIC_CMP_AND_SWP) {
        c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    }
    if on(with::ATOMIC_FETCH_AND_ADD) {
        c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    }
    if on(with::LOCAL_INV) {
        c.wr_local_inv = Some(wr_local_inv);
    }
    if on(with::BIND_MW) {
        c.wr_bind_mw = Some(wr_bind_mw);
    }
    if on(with::ATOMIC_WRITE) {
        c.wr_atomic_write = Some(wr_atomic_write);
    }
    c.wr_set_ud_addr = Some(wr_set_ud_addr);
    c.wr_set_sge = Some(wr_set_sge);
    c.wr_set_sge_list = Some(wr_set_sge_list);
    c.wr_set_inline_data = Some(wr_set_inline_data);
    c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    c.wr_start = Some(wr_start);
    c.wr_complete = Some(wr_complete);
    c.wr_abort = Some(wr_abort);
}

symver!(ibv_qp_to_qp_ex => "IBVERBS_1.6");
/// `ibv_qp_to_qp_ex`: the `ibv_qp_ex` of a QP made by `ibv_create_qp_ex` (its builders are
/// those its `send_ops_flags` asked for), NULL for one made by `ibv_create_qp` — as
/// libibverbs does.
///
/// # Safety
/// `qp` is a live QP of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, null);
    if q.ex.get().is_some() {
        qp.cast()
    } else {
        null_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    /// What is refused is refused before any object is looked at (NULL PD and CQs here).
    #[test]
    fn refused_extensions_are_eopnotsupp() {
        let pd = std::ptr::NonNull::<ibv_pd>::dangling().as_ptr();
        let base = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: null_mut(),
            recv_cq: null_mut(),
            srq: null_mut(),
            cap: ibv_qp_cap::default(),
            qp_type: u32::from(QpType::UD.0),
            sq_sig_all: 0,
        };
        let cases: &[(u32, u32, u64, &str)] = &[
            (INIT_ATTR_PD | 1 << 1, 0, 0, "XRCD"),
            (INIT_ATTR_PD | 1 << 3, 0, 0, "TSO header"),
            (INIT_ATTR_PD | INIT_ATTR_CREATE_FLAGS, 2, 0, "a create flag"),
            (INIT_ATTR_SEND_OPS_FLAGS, 0, with::SEND, "no PD"),
            (
                INIT_ATTR_PD | INIT_ATTR_SEND_OPS_FLAGS,
                0,
                with::RDMA_WRITE,
                "RDMA WRITE on UD",
            ),
            (
                INIT_ATTR_PD | INIT_ATTR_SEND_OPS_FLAGS,
                0,
                1 << 8,
                "bind MW on UD",
            ),
        ];
        for &(mask, create_flags, ops, what) in cases {
            let mut a = ibv_qp_init_attr_ex::with_pd(&base, pd);
            a.comp_mask = mask;
            a.create_flags = create_flags;
            a.send_ops_flags = ops;
            // SAFETY: refused before the PD or CQs are dereferenced.
            let qp = unsafe { create_qp_ex_op(null_mut(), &mut a) };
            assert!(qp.is_null(), "{what}");
            assert_eq!(errno(), libc::EOPNOTSUPP, "{what}");
        }
        // SEND_WITH_INV on UC: the transport has no invalidate opcodes (rverbs_uverbs::op).
        let uc = ibv_qp_init_attr {
            qp_type: u32::from(QpType::UC.0),
            ..base
        };
        let mut a = ibv_qp_init_attr_ex::with_pd(&uc, pd);
        a.comp_mask = INIT_ATTR_PD | INIT_ATTR_SEND_OPS_FLAGS;
        a.send_ops_flags = with::SEND | with::SEND_WITH_INV;
        // SAFETY: refused before the PD or CQs are dereferenced.
        let qp = unsafe { create_qp_ex_op(null_mut(), &mut a) };
        assert!(qp.is_null(), "SEND_WITH_INV on UC");
        assert_eq!(errno(), libc::EOPNOTSUPP, "SEND_WITH_INV on UC");
    }

    #[test]
    fn send_ops_per_qp_type_follow_the_classification() {
        let caps = ANY_PROVIDER;
        let rc = supported_ops(caps, 2).unwrap();
        // Every operation of rdma-core 44's IBV_QP_EX_WITH_*, atomic write (bit 12) included;
        // whether the device has atomic write is checked when the QP exists.
        assert_eq!(rc, 0b11_1111_1111 | with::ATOMIC_WRITE);
        // UC: sends, writes, local invalidation and binds; no SEND_WITH_INV (the UC transport
        // has no invalidate opcodes), whatever the provider claims.
        assert_eq!(supported_ops(caps, 3).unwrap(), 0b01_1000_1111);
        assert_eq!(supported_ops(caps, 3).unwrap() & with::SEND_WITH_INV, 0);
        assert_eq!(
            supported_ops(caps, 4).unwrap(),
            with::SEND | with::SEND_WITH_IMM
        );
        // What the provider does not encode is not offered (rxe: LOCAL_INV on RC only).
        let rxe_like = SendCaps {
            uc: OpSet::from_fn(|k| k != OpKind::LocalInv),
            ..ANY_PROVIDER
        };
        assert_eq!(supported_ops(rxe_like, 3).unwrap(), 0b01_0000_1111);
        assert_eq!(supported_ops(caps, 9), None, "XRC send");
        assert_eq!(supported_ops(caps, 0x102), None, "not a QP type");
    }
}
