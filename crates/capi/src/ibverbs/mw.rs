//! Memory windows: the `alloc_mw`, `bind_mw` and `dealloc_mw` slots of `ibv_context_ops`
//! (which the inline `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw` of `verbs.h` call) and
//! the `IBV_WR_BIND_MW` arm of `ibv_post_send`'s conversion.
//!
//! The rkey bookkeeping is librxe's: `ibv_bind_mw` (type 1) posts a bind work request with
//! the new key `ibv_inc_rkey(mw->rkey)` and stores that key in `mw->rkey` once posted; a type
//! 2 bind posted with `ibv_post_send` carries the caller's new key (`wr.bind_mw.rkey`) and
//! leaves `mw->rkey` alone. Binds are checked by the kernel when it executes them (a bad one
//! completes with `IBV_WC_MW_BIND_ERR`), as on rdma-core.

use std::ffi::{c_int, c_uint};
use std::io;
use std::ptr::null_mut;
use std::sync::Arc;

use rverbs_uverbs::mr::AccessFlags;
use rverbs_uverbs::mw::{inc_rkey, Mw, MwBind, MwType};
use rverbs_uverbs::{Error, SendFlags, SendOp, SendWr, Sge};

use crate::abi::*;
use std::cell::UnsafeCell;

use super::{c_write, fail, null_arg, set_errno, CMr, CPd, CQp};
use crate::handle::{from_c, FromC};

/// An `ibv_mw` and its rverbs window.
#[repr(C)]
pub struct CMw {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_mw>,
    /// The rverbs window (deallocated on drop).
    pub mw: Arc<Mw>,
}

from_c!(CMw => ibv_mw, "ibv_mw");

/// `ops.alloc_mw` (the inline `ibv_alloc_mw`): types 1 and 2; any other type fails with
/// `EINVAL`.
///
/// # Safety
/// `pd` is a live PD of ours.
pub(crate) unsafe extern "C" fn alloc_mw_op(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw {
    // SAFETY: [ops] [object] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, null);
    let Ok(t) = u8::try_from(mw_type) else {
        set_errno(fail(&io::Error::from(Error::invalid(
            "allocate MW",
            format!("type {mw_type}: the type must be 1 or 2"),
        ))));
        return null_mut();
    };
    match Mw::alloc(&p.pd, MwType(t)) {
        Ok(mw) => {
            let b = Box::new(CMw {
                c: UnsafeCell::new(ibv_mw {
                    context: p.context(),
                    pd,
                    rkey: mw.rkey(),
                    handle: mw.handle(),
                    mw_type,
                }),
                mw,
            });
            Box::into_raw(b).cast()
        }
        Err(e) => {
            set_errno(fail(&e));
            null_mut()
        }
    }
}

/// `ops.dealloc_mw` (the inline `ibv_dealloc_mw`): 0; a bound window is invalidated by the
/// kernel (its region can be deregistered afterwards).
///
/// # Safety
/// `mw` came from [`alloc_mw_op`]; it is gone afterwards.
pub(crate) unsafe extern "C" fn dealloc_mw_op(mw: *mut ibv_mw) -> c_int {
    // SAFETY: [destroy] mw.
    obj!(unsafe { CMw::from_c(mw) }, errno);
    // SAFETY: [destroy] mw: boxed by alloc_mw_op ([owner]).
    drop(unsafe { Box::from_raw(CMw::owner_ptr(mw)) });
    0
}

/// The window's new binding, as the kernel reads it from `rxe_send_wr.wr.mw` (also what an
/// `ibv_qp_ex` `wr_bind_mw` builder needs: `SendOp::BindMw(raw_bind(mw, rkey, info))`).
///
/// # Safety
/// `mw` is a window of ours; `info.mr` is NULL or a region of ours.
pub(crate) unsafe fn raw_bind(mw: *mut ibv_mw, rkey: u32, info: &ibv_mw_bind_info) -> MwBind {
    // SAFETY: [object] mw and, in [in] info, the MR (NULL allowed); [c-struct] raw reads of
    // their C structures, no references.
    let (mw_type, mw_rkey, lkey) = unsafe {
        let lkey = if info.mr.is_null() {
            0
        } else {
            (*info.mr).lkey
        };
        ((*mw).mw_type, (*mw).rkey, lkey)
    };
    // SAFETY: [registered] (ibv_bind_mw / ibv_post_send): the region's memory is
    // the caller's, registered with MW_BIND, and stays mapped while a window is bound in it;
    // the kernel checks the rest when it executes the bind.
    unsafe {
        MwBind::from_raw(
            MwType(mw_type as u8),
            mw_rkey,
            rkey,
            lkey,
            info.addr,
            info.length,
            AccessFlags::from_bits_retain(info.mw_access_flags),
        )
    }
}

/// The `IBV_WR_BIND_MW` operation of a send request (type 2 windows; `wr.bind_mw.rkey` is the
/// new key, `mw->rkey` stays as it is), or `None` without a window.
///
/// # Safety
/// `w.bind_mw.mw` is NULL or a window of ours, `w.bind_mw.bind_info.mr` NULL or a region of
/// ours.
pub(crate) unsafe fn bind_op(w: &ibv_send_wr) -> Option<SendOp> {
    let b = &w.bind_mw;
    if b.mw.is_null() {
        return None;
    }
    // SAFETY: [object] window and region, [in] bind info (ibv_post_send's [wr]).
    Some(SendOp::BindMw(unsafe {
        raw_bind(b.mw, b.rkey, &b.bind_info)
    }))
}

/// `ops.bind_mw` (the inline `ibv_bind_mw`, which has checked the type, a NULL region's zero
/// range and the region's PD): posts a bind of the type 1 window and, once posted, sets
/// `mw->rkey` to its new key. Zero-based windows are refused with `EINVAL` (type 1 windows
/// cannot be zero-based).
///
/// # Safety
/// `qp`, `mw` and `mw_bind->bind_info.mr` (or NULL) are ours; `mw_bind` is readable.
pub(crate) unsafe extern "C" fn bind_mw_op(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: [ops] [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    // SAFETY: [object] mw.
    let w = obj!(unsafe { CMw::from_c(mw) }, errno);
    // SAFETY: [in] mw_bind.
    let Some(req) = (unsafe { mw_bind.as_ref() }) else {
        return null_arg("ibv_mw_bind");
    };
    // SAFETY: [object] region (NULL allowed: an unbind).
    let mr = unsafe { CMr::from_c_or_none(req.bind_info.mr) };
    match bind_type1(q, w, req, mr) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

/// The core of [`bind_mw_op`]: `req` with its region `mr` (if any) looked up.
fn bind_type1(q: &CQp, w: &CMw, req: &ibv_mw_bind, mr: Option<&CMr>) -> io::Result<()> {
    let info = &req.bind_info;
    if info.mw_access_flags & AccessFlags::ZERO_BASED.bits() != 0 {
        return Err(
            Error::invalid("bind type 1 MW", "a type 1 window cannot be zero-based").into(),
        );
    }
    let mw = w.c.get();
    // SAFETY: [c-struct] a raw read of our window's C structure.
    let rkey = inc_rkey(unsafe { (*mw).rkey });
    let (addr, length) = match mr {
        Some(_) => (info.addr, info.length),
        None => (0, 0),
    };
    let info = ibv_mw_bind_info {
        addr,
        length,
        ..*info
    };
    // SAFETY: mw is a window of ours (w); info.mr is NULL or the region `mr` of ours.
    let bind = unsafe { raw_bind(mw, rkey, &info) };
    let wr = SendWr::<Sge> {
        wr_id: req.wr_id,
        op: SendOp::BindMw(bind),
        sge: &[],
        flags: SendFlags::from_bits_retain(req.send_flags),
        ud: None,
    };
    // SAFETY: [registered] no SGEs; what the bind grants is the C caller's (raw_bind).
    unsafe { q.qp.post_send_raw(&[wr]) }?;
    // SAFETY: [c-struct] a raw write of our window's C structure, serialised by c_write.
    c_write(|| unsafe { (*mw).rkey = rkey });
    Ok(())
}
