//! The extended CQ: `ibv_create_cq_ex` (the `verbs_context.create_cq_ex` slot) and the
//! `ibv_cq_ex` polling functions the inline `ibv_start_poll`, `ibv_next_poll`,
//! `ibv_end_poll` and `ibv_wc_read_*` of `verbs.h` call.
//!
//! An extended CQ is an ordinary CQ of ours ([`CCq`], so `ibv_poll_cq`, `ibv_req_notify_cq`,
//! completion events and `ibv_destroy_cq` work on `ibv_cq_ex_to_cq(cq)` as on any other)
//! with a [`CqEx`]: the current completion. `start_poll` takes the CQ's poll lock (held until
//! `end_poll`, as librxe holds its CQ lock, so two threads' poll sessions do not interleave)
//! and polls one completion into it; `next_poll` polls the next; the `read_*` functions read
//! its fields. Both return `ENOENT` when the CQ is empty, as libibverbs' providers do (after
//! `ENOENT` from `start_poll` the lock is not held and `end_poll` is not needed).
//!
//! `wc_flags`: librxe's set, `IBV_WC_STANDARD_FLAGS` (byte_len, imm, qp_num, src_qp, slid,
//! sl, dlid_path_bits); each asked-for field gets its `read_*`, the others stay NULL.
//! Completion timestamps and the rest are `EOPNOTSUPP`. Creation flags:
//! `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` is accepted (a hint), `IGNORE_OVERRUN` is
//! `EOPNOTSUPP` (what rxe's kernel driver answers), parent domains are `EOPNOTSUPP`.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};

use rverbs_uverbs::{WcFlags, WorkCompletion};

use super::{ibv_create_cq, set_errno, CCq};
use crate::abi::*;
use crate::handle::FromC;

/// `IBV_WC_STANDARD_FLAGS`: what [`create_cq_ex_op`] offers.
const WC_STANDARD_FLAGS: u64 = 0x7f;
/// `IBV_WC_EX_WITH_*` bits of the standard set.
mod with {
    pub const BYTE_LEN: u64 = 1 << 0;
    pub const IMM: u64 = 1 << 1;
    pub const QP_NUM: u64 = 1 << 2;
    pub const SRC_QP: u64 = 1 << 3;
    pub const SLID: u64 = 1 << 4;
    pub const SL: u64 = 1 << 5;
    pub const DLID_PATH_BITS: u64 = 1 << 6;
}
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
const CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
/// `IBV_CQ_INIT_ATTR_MASK_PD`.
const CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`.
const CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;

/// The polling state of an extended CQ.
pub struct CqEx {
    /// Held from a successful `start_poll` to `end_poll`.
    busy: AtomicBool,
    /// The current completion: written by `start_poll`/`next_poll`, read by `read_*`, all
    /// by the thread holding `busy`.
    cur: UnsafeCell<WorkCompletion>,
}

/// # Safety
/// `cq` is the `ibv_cq_ex` of a live extended CQ of ours (\[ops\]: these functions are
/// reached only through the `ibv_cq_ex` they are set in, which C dereferenced to find them).
unsafe fn parts<'a>(cq: *mut ibv_cq_ex) -> (&'a CCq, &'a CqEx) {
    // SAFETY: [ops] [object] cq; the ibv_cq_ex begins with the ibv_cq fields, the first
    // field of its CCq ([owner]).
    let c = unsafe { CCq::from_c(cq.cast()) }.expect("[ops]: C found this function through the CQ");
    let ex =
        c.ex.get()
            .expect("the ibv_cq_ex functions are only set on CQs made by ibv_create_cq_ex");
    (c, ex)
}

/// Polls one completion into the current one; 0, or `ENOENT` when the CQ is empty.
///
/// # Safety
/// As [`parts`], and the caller holds `busy`.
unsafe fn poll_one(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: [ops] cq.
    let (c, ex) = unsafe { parts(cq) };
    let mut wc = [WorkCompletion::default()];
    if c.cq.poll(&mut wc) == 0 {
        set_errno(libc::ENOENT);
        return libc::ENOENT;
    }
    // SAFETY: [ops] the caller holds `busy`: no other thread touches `cur`; status and wr_id of the
    // C struct are the caller's to read after this returns (libibverbs' providers write them
    // the same way).
    unsafe {
        *ex.cur.get() = wc[0];
        (*cq).status = wc[0].status.0;
        (*cq).wr_id = wc[0].wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: [in] attr (NULL allowed).
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        set_errno(libc::EINVAL);
        return libc::EINVAL;
    }
    // SAFETY: [ops] reached only through the ops of a CQ of ours.
    let (_, ex) = unsafe { parts(cq) };
    // Acquire: pairs with end_poll's Release, so the previous holder's writes to `cur` happen
    // before ours.
    while ex
        .busy
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
    // SAFETY: [ops] we hold busy.
    let r = unsafe { poll_one(cq) };
    if r != 0 {
        // Release: as end_poll.
        ex.busy.store(false, Ordering::Release);
    }
    r
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: [ops] the caller holds the lock since its successful start_poll (the API's contract).
    unsafe { poll_one(cq) }
}

unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: [ops] as start_poll.
    let (_, ex) = unsafe { parts(cq) };
    // Release: our writes to `cur` happen before the next holder's Acquire.
    ex.busy.store(false, Ordering::Release);
}

/// The current completion.
///
/// # Safety
/// As [`parts`]; the caller is inside a poll session (after a successful `start_poll`).
unsafe fn cur<'a>(cq: *mut ibv_cq_ex) -> &'a WorkCompletion {
    // SAFETY: [ops] cq; this thread holds `busy`, so nobody writes `cur` now.
    unsafe { &*parts(cq).1.cur.get() }
}

unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] the read_* functions are called inside a poll session (the API's contract).
    unsafe { cur(cq) }.opcode.0
}

unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] as read_opcode.
    unsafe { cur(cq) }.vendor_err
}

unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] as read_opcode.
    unsafe { cur(cq) }.byte_len
}

unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] as read_opcode.
    let w = unsafe { cur(cq) };
    // Ours keeps immediate data in host order; libibverbs hands it out big-endian. An
    // invalidated rkey (WITH_INV) is a plain number in both.
    if w.wc_flags.contains(WcFlags::WITH_IMM) {
        w.imm_data.to_be()
    } else {
        w.imm_data
    }
}

unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] as read_opcode.
    unsafe { cur(cq) }.qp_num
}

unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] as read_opcode.
    unsafe { cur(cq) }.src_qp
}

unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] as read_opcode.
    unsafe { cur(cq) }.wc_flags.bits()
}

unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: [ops] as read_opcode.
    u32::from(unsafe { cur(cq) }.slid)
}

unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: [ops] as read_opcode.
    unsafe { cur(cq) }.sl
}

unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: [ops] as read_opcode.
    unsafe { cur(cq) }.dlid_path_bits
}

/// `verbs_context.create_cq_ex` (the inline `ibv_create_cq_ex`): NULL and `errno` on failure
/// (`EOPNOTSUPP` for what is not offered, see the module docs; the kernel's `EINVAL` for too
/// many entries or a bad completion vector).
///
/// # Safety
/// `context` is ours; `attr` is readable and names a channel of this context (or NULL).
pub(crate) unsafe extern "C" fn create_cq_ex_op(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: [ops] [in] [out] the inline wrapper passes the caller's attributes.
    let a = unsafe { &*attr };
    let (cqe, vector) = match cq_ex_args(a) {
        Ok(v) => v,
        Err(errno) => {
            set_errno(errno);
            return null_mut();
        }
    };
    // SAFETY: forwarded: [object] context and channel.
    let cq = unsafe { ibv_create_cq(context, cqe, a.cq_context, a.channel, vector) };
    if cq.is_null() {
        return null_mut();
    }
    // SAFETY: [owner] just made by ibv_create_cq, alive.
    let c = unsafe { &*(cq as *const CCq) };
    let _ = c.ex.set(Box::new(CqEx {
        busy: AtomicBool::new(false),
        cur: UnsafeCell::new(WorkCompletion::default()),
    }));
    // SAFETY: [c-struct] the C structure of a CQ not yet handed to C: nobody else reads or
    // writes it (what may find the CQ meanwhile, an event for its handle, touches only
    // `events`), so a short-lived exclusive reference to it is sound.
    let x = unsafe { &mut *c.c_ptr() };
    set_ops(x, a.wc_flags);
    cq.cast()
}

/// The entries and completion vector of an extended CQ's attributes, or the errno for what
/// is not offered (`EOPNOTSUPP`) or out of range (`EINVAL`).
fn cq_ex_args(a: &ibv_cq_init_attr_ex) -> Result<(i32, i32), c_int> {
    let flags = if a.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0 {
        a.flags
    } else {
        0
    };
    let unsupported = a.wc_flags & !WC_STANDARD_FLAGS != 0
        || a.comp_mask & !(CQ_INIT_ATTR_MASK_FLAGS | CQ_INIT_ATTR_MASK_PD) != 0
        || (a.comp_mask & CQ_INIT_ATTR_MASK_PD != 0 && !a.parent_domain.is_null())
        || flags & !CREATE_CQ_ATTR_SINGLE_THREADED != 0;
    if unsupported {
        return Err(libc::EOPNOTSUPP);
    }
    match (i32::try_from(a.cqe), i32::try_from(a.comp_vector)) {
        (Ok(cqe), Ok(vector)) => Ok((cqe, vector)),
        _ => Err(libc::EINVAL),
    }
}

/// The extended CQ's polling functions: the `read_*` of the fields `wc_flags` asks for,
/// NULL for the others.
fn set_ops(x: &mut ibv_cq_ex, wc_flags: u64) {
    let on = |bit: u64| wc_flags & bit != 0;
    x.start_poll = Some(start_poll);
    x.next_poll = Some(next_poll);
    x.end_poll = Some(end_poll);
    x.read_opcode = Some(read_opcode);
    x.read_vendor_err = Some(read_vendor_err);
    x.read_wc_flags = Some(read_wc_flags);
    x.read_byte_len = on(with::BYTE_LEN).then_some(read_byte_len as ReadU32Fn);
    x.read_imm_data = on(with::IMM).then_some(read_imm_data as ReadU32Fn);
    x.read_qp_num = on(with::QP_NUM).then_some(read_qp_num as ReadU32Fn);
    x.read_src_qp = on(with::SRC_QP).then_some(read_src_qp as ReadU32Fn);
    x.read_slid = on(with::SLID).then_some(read_slid as ReadU32Fn);
    x.read_sl = on(with::SL).then_some(read_sl as ReadU8Fn);
    x.read_dlid_path_bits = on(with::DLID_PATH_BITS).then_some(read_dlid_path_bits as ReadU8Fn);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }

    /// What is refused is refused before the context is looked at (NULL here).
    #[test]
    fn refused_attributes_are_eopnotsupp() {
        let cases: &[(u64, u32, u32, &str)] = &[
            (1 << 7, 0, 0, "completion timestamp"),
            (1 << 11, 0, 0, "wallclock timestamp"),
            (1 << 8, 0, 0, "cvlan"),
            (0, CQ_INIT_ATTR_MASK_FLAGS, 1 << 1, "IGNORE_OVERRUN"),
            (0, 1 << 2, 0, "an unknown comp_mask bit"),
        ];
        for &(wc_flags, comp_mask, flags, what) in cases {
            let mut a = ibv_cq_init_attr_ex {
                cqe: 4,
                cq_context: null_mut(),
                channel: null_mut(),
                comp_vector: 0,
                wc_flags,
                comp_mask,
                flags,
                parent_domain: null_mut(),
            };
            // SAFETY: refused before the context is dereferenced.
            let cq = unsafe { create_cq_ex_op(null_mut(), &mut a) };
            assert!(cq.is_null(), "{what}");
            assert_eq!(errno(), libc::EOPNOTSUPP, "{what}");
        }
    }
}
