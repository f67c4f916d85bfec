//! rdma-core's EFA direct verbs (`infiniband/efadv.h`, libefa 44's `efadv_*`): what users need
//! to create SRD QPs and query an EFA device. Defined in `libibverbs.so.1` with libefa's symbol
//! versions (`EFA_1.0` … `EFA_1.3`); the `libefa.so.1` that `cargo xtask capi` builds declares
//! those nodes and needs this library, so a program linked against libefa binds them here
//! (as `librdmacm.so.1` does for `rdma_*`).
//!
//! Each follows libefa 44 (`providers/efa/verbs.c`): a context (PD, AH) of another device is
//! `EOPNOTSUPP`; an `inlen` that does not reach the fields libefa requires, a non-zero
//! `comp_mask` or reserved byte, is `EINVAL`; the output is zeroed over `inlen` bytes, then
//! the fields that fit are written. Not offered, refused: `efadv_create_cq` (`EFA_1.2`, CQs
//! with source GIDs: `EOPNOTSUPP`, and `efadv_cq_from_ibv_cq_ex` finds no such CQ: NULL), so
//! `EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID` is never reported; `efadv_query_mr` (`EFA_1.3`,
//! rdma-core 50 on: `EOPNOTSUPP`). They are exported because programs and modules bound at
//! load (perftest, pyverbs' `efadv` module: `BIND_NOW`, `RTLD_NOW`) must find every symbol
//! they import from libefa, called or not.

use std::ffi::c_int;
use std::mem::{offset_of, size_of};
use std::ptr::null_mut;

use rverbs_uverbs::qp::QpType;

use super::{ibv_create_qp, set_errno, CAh, CContext, CPd};
use crate::abi::*;
use crate::handle::FromC;

/// `EFADV_QP_DRIVER_TYPE_SRD`.
pub const EFADV_QP_DRIVER_TYPE_SRD: u32 = 0;

/// libefa's `vext_field_avail`: whether a caller's structure of `inlen` bytes reaches the end
/// of the field at `off` of `size` bytes.
const fn reaches(off: usize, size: usize, inlen: u32) -> bool {
    off + size <= inlen as usize
}

/// Zeroes `inlen` bytes at `p` (libefa: `memset(attr, 0, inlen)`).
///
/// # Safety
/// `p` is writable for `inlen` bytes.
unsafe fn zero(p: *mut u8, inlen: u32) {
    // SAFETY: the caller's.
    unsafe { p.write_bytes(0, inlen as usize) };
}

symver!(efadv_query_device => "EFA_1.1");
/// `efadv_query_device`: the EFA device's limits and capabilities
/// (`rverbs_provider::efa_device_attr`). 0, `EOPNOTSUPP` for a context of another device,
/// `EINVAL` for an `inlen` short of `inline_buf_size` or a NULL argument. `device_caps` is
/// written where `inlen` reaches it (RNR retry), `max_rdma_size` and the RDMA READ bit where
/// it reaches `max_rdma_size`, as libefa 44 does.
///
/// # Safety
/// `context` is ours; `attr` is writable for `inlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn efadv_query_device(
    context: *mut ibv_context,
    attr: *mut efadv_device_attr,
    inlen: u32,
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, errno);
    let Some(d) = rverbs_provider::efa_device_attr(&c.ctx) else {
        return libc::EOPNOTSUPP;
    };
    type A = efadv_device_attr;
    if attr.is_null() || !reaches(offset_of!(A, inline_buf_size), 2, inlen) {
        return libc::EINVAL;
    }
    let p = attr.cast::<u8>();
    // SAFETY: [out] attr: inlen writable bytes.
    unsafe { zero(p, inlen) };
    let put = |off: usize, bytes: &[u8]| {
        // SAFETY: every caller's field ends within inlen (checked before each).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(off), bytes.len()) };
    };
    put(offset_of!(A, max_sq_wr), &d.max_sq_wr.to_ne_bytes());
    put(offset_of!(A, max_rq_wr), &d.max_rq_wr.to_ne_bytes());
    put(offset_of!(A, max_sq_sge), &d.max_sq_sge.to_ne_bytes());
    put(offset_of!(A, max_rq_sge), &d.max_rq_sge.to_ne_bytes());
    put(
        offset_of!(A, inline_buf_size),
        &d.inline_buf_size.to_ne_bytes(),
    );
    let read = rverbs_provider::EfaDeviceAttr::CAPS_RDMA_READ;
    if reaches(offset_of!(A, device_caps), 4, inlen) {
        put(
            offset_of!(A, device_caps),
            &(d.device_caps & !read).to_ne_bytes(),
        );
    }
    if reaches(offset_of!(A, max_rdma_size), 4, inlen) {
        put(offset_of!(A, max_rdma_size), &d.max_rdma_size.to_ne_bytes());
        put(offset_of!(A, device_caps), &d.device_caps.to_ne_bytes());
    }
    0
}

symver!(efadv_query_ah => "EFA_1.1");
/// `efadv_query_ah`: the AH's number as the EFA kernel gave it (`ahn`). 0, `EOPNOTSUPP` for
/// an AH of another device, `EINVAL` for an `inlen` short of `ahn` or a NULL argument.
///
/// # Safety
/// `ah` is ours; `attr` is writable for `inlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn efadv_query_ah(
    ah: *mut ibv_ah,
    attr: *mut efadv_ah_attr,
    inlen: u32,
) -> c_int {
    // SAFETY: [object] ah.
    let a = obj!(unsafe { CAh::from_c(ah) }, errno);
    // SAFETY: [c-struct] the context pointer we set at creation.
    let c = obj!(unsafe { CContext::from_c((*a.c.get()).context) }, errno);
    if rverbs_provider::efa_device_attr(&c.ctx).is_none() {
        return libc::EOPNOTSUPP;
    }
    if attr.is_null() || !reaches(offset_of!(efadv_ah_attr, ahn), 2, inlen) {
        return libc::EINVAL;
    }
    let ahn = a.ah.ud_dest(0, 0).ah_num as u16;
    // SAFETY: [out] attr: inlen writable bytes; ahn's field ends within them (checked).
    unsafe {
        zero(attr.cast(), inlen);
        attr.cast::<u8>()
            .add(offset_of!(efadv_ah_attr, ahn))
            .cast::<u16>()
            .write_unaligned(ahn);
    }
    0
}

/// Whether `pd`'s context is an EFA one (`None`: not a PD of ours).
///
/// # Safety
/// `pd` is NULL or ours.
unsafe fn pd_is_efa(pd: *mut ibv_pd) -> Option<bool> {
    // SAFETY: [object] pd.
    let p = unsafe { CPd::from_c(pd) }?;
    Some(rverbs_provider::efa_device_attr(p.pd.context()).is_some())
}

symver!(efadv_create_driver_qp => "EFA_1.0");
/// `efadv_create_driver_qp`: an SRD QP (`attr.qp_type` must be `IBV_QPT_DRIVER`, EINVAL
/// otherwise; `driver_qp_type` must be `EFADV_QP_DRIVER_TYPE_SRD`, EOPNOTSUPP otherwise; a PD
/// of another device: EOPNOTSUPP). Then as `ibv_create_qp`.
///
/// # Safety
/// As `ibv_create_qp`.
#[no_mangle]
pub unsafe extern "C" fn efadv_create_driver_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
    driver_qp_type: u32,
) -> *mut ibv_qp {
    // SAFETY: [object] pd.
    match unsafe { pd_is_efa(pd) } {
        None => return fail_null(libc::EINVAL),
        Some(false) => return fail_null(libc::EOPNOTSUPP),
        Some(true) => {}
    }
    // SAFETY: [in] attr.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return fail_null(libc::EINVAL);
    };
    if a.qp_type != u32::from(QpType::DRIVER.0) {
        return fail_null(libc::EINVAL);
    }
    if driver_qp_type != EFADV_QP_DRIVER_TYPE_SRD {
        return fail_null(libc::EOPNOTSUPP);
    }
    // SAFETY: forwarded.
    unsafe { ibv_create_qp(pd, attr) }
}

symver!(efadv_create_qp_ex => "EFA_1.1");
/// `efadv_create_qp_ex`: an SRD QP with the extended attributes (`ibv_create_qp_ex`'s, the
/// extended send API included: `IBV_QP_EX_WITH_SEND`, `_SEND_WITH_IMM`, and `_RDMA_READ`
/// where the device reports it, else EOPNOTSUPP). `attr_ex.qp_type` must be
/// `IBV_QPT_DRIVER`, `efa_attr` reach `driver_qp_type` with `comp_mask`, the reserved bytes
/// and anything past the structure zero (EINVAL otherwise); the type must be SRD
/// (EOPNOTSUPP); a context of another device: EOPNOTSUPP.
///
/// # Safety
/// `context` is ours; `attr_ex` as for `ibv_create_qp_ex` (its PD of that context);
/// `efa_attr` readable for `inlen` bytes.
#[no_mangle]
pub unsafe extern "C" fn efadv_create_qp_ex(
    context: *mut ibv_context,
    attr_ex: *mut ibv_qp_init_attr_ex,
    efa_attr: *const efadv_qp_init_attr,
    inlen: u32,
) -> *mut ibv_qp {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, null);
    if rverbs_provider::efa_device_attr(&c.ctx).is_none() {
        return fail_null(libc::EOPNOTSUPP);
    }
    // SAFETY: [in] [out] attr_ex.
    let Some(a) = (unsafe { attr_ex.as_mut() }) else {
        return fail_null(libc::EINVAL);
    };
    type E = efadv_qp_init_attr;
    if efa_attr.is_null()
        || a.qp_type != u32::from(QpType::DRIVER.0)
        || !reaches(offset_of!(E, driver_qp_type), 4, inlen)
    {
        return fail_null(libc::EINVAL);
    }
    // SAFETY: [in] efa_attr: inlen readable bytes (at least up to driver_qp_type).
    let bytes = unsafe { std::slice::from_raw_parts(efa_attr.cast::<u8>(), inlen as usize) };
    let word = |off: usize, n: usize| bytes.get(off..off + n).unwrap_or(&[]);
    let comp_mask_set = word(0, 8).iter().any(|&b| b != 0);
    let reserved_set = word(offset_of!(E, reserved), 4).iter().any(|&b| b != 0);
    let ext_set = bytes
        .get(size_of::<E>()..)
        .unwrap_or(&[])
        .iter()
        .any(|&b| b != 0);
    if comp_mask_set || reserved_set || ext_set {
        return fail_null(libc::EINVAL);
    }
    let t = word(offset_of!(E, driver_qp_type), 4);
    if u32::from_ne_bytes([t[0], t[1], t[2], t[3]]) != EFADV_QP_DRIVER_TYPE_SRD {
        return fail_null(libc::EOPNOTSUPP);
    }
    // SAFETY: [in] [out] attr_ex as ibv_create_qp_ex's.
    unsafe { super::qp_ex::create_qp_ex(a, true) }
}

symver!(efadv_create_cq => "EFA_1.2");
/// `efadv_create_cq`: not offered (the extended CQ with source GIDs): NULL with errno
/// `EOPNOTSUPP`, whatever the arguments.
///
/// # Safety
/// None beyond C's: nothing is read.
#[no_mangle]
pub unsafe extern "C" fn efadv_create_cq(
    _context: *mut ibv_context,
    _attr_ex: *mut std::ffi::c_void,
    _efa_attr: *mut std::ffi::c_void,
    _inlen: u32,
) -> *mut std::ffi::c_void {
    fail_null(libc::EOPNOTSUPP)
}

symver!(efadv_cq_from_ibv_cq_ex => "EFA_1.2");
/// `efadv_cq_from_ibv_cq_ex`: the EFA view of a CQ made by `efadv_create_cq`; there are none
/// (above): NULL.
///
/// # Safety
/// None beyond C's: nothing is read.
#[no_mangle]
pub unsafe extern "C" fn efadv_cq_from_ibv_cq_ex(
    _cq: *mut std::ffi::c_void,
) -> *mut std::ffi::c_void {
    null_mut()
}

symver!(efadv_query_mr => "EFA_1.3");
/// `efadv_query_mr` (rdma-core 50 on: an MR's interconnect ids): not offered, `EOPNOTSUPP`.
///
/// # Safety
/// None beyond C's: nothing is read.
#[no_mangle]
pub unsafe extern "C" fn efadv_query_mr(
    _mr: *mut ibv_mr,
    _attr: *mut std::ffi::c_void,
    _inlen: u32,
) -> c_int {
    libc::EOPNOTSUPP
}

fn fail_null<T>(e: c_int) -> *mut T {
    set_errno(e);
    null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> i32 {
        // SAFETY: the calling thread's errno slot.
        unsafe { *libc::__errno_location() }
    }

    /// NULL objects are EINVAL, never a dereference.
    #[test]
    fn null_objects_are_einval() {
        let mut d = efadv_device_attr::default();
        // SAFETY: NULL context: refused before any access.
        let r = unsafe { efadv_query_device(null_mut(), &mut d, 32) };
        assert_eq!(r, libc::EINVAL);
        let mut h = efadv_ah_attr::default();
        // SAFETY: NULL AH: refused before any access.
        let r = unsafe { efadv_query_ah(null_mut(), &mut h, 16) };
        assert_eq!(r, libc::EINVAL);
        // SAFETY: NULL PD / context: refused before any access.
        unsafe {
            assert!(efadv_create_driver_qp(null_mut(), null_mut(), 0).is_null());
            assert_eq!(errno(), libc::EINVAL);
            assert!(efadv_create_qp_ex(null_mut(), null_mut(), std::ptr::null(), 16).is_null());
            assert_eq!(errno(), libc::EINVAL);
        }
    }

    /// What is not offered says so.
    #[test]
    fn the_cq_and_mr_extensions_are_refused() {
        // SAFETY: nothing is read.
        unsafe {
            assert!(efadv_create_cq(null_mut(), null_mut(), null_mut(), 16).is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert!(efadv_cq_from_ibv_cq_ex(null_mut()).is_null());
            assert_eq!(efadv_query_mr(null_mut(), null_mut(), 16), libc::EOPNOTSUPP);
        }
    }

    #[test]
    fn field_reach_is_libefas_vext_field_avail() {
        type A = efadv_device_attr;
        assert!(!reaches(offset_of!(A, inline_buf_size), 2, 21));
        assert!(reaches(offset_of!(A, inline_buf_size), 2, 22));
        assert!(!reaches(offset_of!(A, max_rdma_size), 4, 31));
        assert!(reaches(offset_of!(A, max_rdma_size), 4, 32));
    }
}
