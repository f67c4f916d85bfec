//! Memory regions (`ibv_mr`).

use super::*;
use rverbs_uverbs::mr::{AdviseFlags, MrAdvice};

/// An `ibv_mr` and the registration behind it.
#[repr(C)]
pub struct CMr {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_mr>,
    /// The registration (deregistered on drop).
    pub mr: RawMr,
}

from_c!(CMr => ibv_mr, "ibv_mr");

/// `IBV_ACCESS_OPTIONAL_RANGE`: access bits a device may ignore.
const ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

symver!(ibv_reg_mr => "IBVERBS_1.1");
/// `ibv_reg_mr`.
///
/// # Safety
/// `pd` is ours; `addr..addr+length` is memory of the caller that stays mapped while the MR
/// lives (the device reads and writes it).
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded: [object] pd, [registered] addr..addr+length.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, addr as u64, access as c_uint) }
}

symver!(ibv_reg_mr_iova => "IBVERBS_1.7");
/// `ibv_reg_mr_iova`: the region at `addr`, addressed by the device (SGEs, a peer's
/// requests) at `iova`.
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded: [object] pd, [registered] addr..addr+length.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as c_uint) }
}

symver!(ibv_reg_mr_iova2 => "IBVERBS_1.8");
/// `ibv_reg_mr_iova2`: the region at `addr`, addressed by the device (SGEs, a peer's
/// requests) at `iova`; `ibv_mr.addr` is `addr`, as libibverbs'. With
/// `IBV_ACCESS_ON_DEMAND`, and on siw (whose kernel driver ignores the iova), `iova != addr`
/// is refused (`EOPNOTSUPP`).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, null);
    let access = AccessFlags::from_bits_retain(access & !ACCESS_OPTIONAL_RANGE);
    // SAFETY: [registered] the caller keeps the range mapped while the MR lives (ibv_reg_mr's contract).
    match unsafe { register_raw_iova(&p.pd, addr as u64, length, iova, access) } {
        Ok(mr) => {
            let b = Box::new(CMr {
                c: UnsafeCell::new(ibv_mr {
                    context: p.context(),
                    pd,
                    addr,
                    length,
                    handle: 0,
                    lkey: mr.lkey(),
                    rkey: mr.rkey(),
                }),
                mr,
            });
            Box::into_raw(b).cast()
        }
        Err(e) => null_with(&e),
    }
}

symver!(ibv_dereg_mr => "IBVERBS_1.1");
/// `ibv_dereg_mr`: fails (EINVAL, the region kept) while a memory window is bound in it.
///
/// # Safety
/// `mr` came from [`ibv_reg_mr`] and is not used afterwards unless this fails.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: [destroy] mr (checked for NULL only: the registration is moved out below).
    obj!(unsafe { CMr::from_c(mr) }, errno);
    let p = CMr::owner_ptr(mr);
    // SAFETY: [destroy] mr: boxed by ibv_reg_mr_iova2 ([owner]); the registration is moved out and either consumed
    // (then the box is freed without dropping it again) or written back.
    let raw = unsafe { std::ptr::read(&raw const (*p).mr) };
    match raw.deregister() {
        Ok(()) => {
            // SAFETY: ManuallyDrop<CMr> has CMr's layout; its moved-out field is not dropped.
            drop(unsafe { Box::from_raw(p.cast::<std::mem::ManuallyDrop<CMr>>()) });
            0
        }
        Err((raw, e)) => {
            // Still registered (a memory window is bound in it, EINVAL as on rdma-core): the
            // caller keeps the region.
            // SAFETY: the slot read above, still allocated.
            unsafe { std::ptr::write(&raw mut (*p).mr, raw) };
            fail(&e)
        }
    }
}

/// `verbs_context.advise_mr` (what the inline `ibv_advise_mr` of `verbs.h` calls):
/// [`rverbs_uverbs::pd::Pd::advise_mr`], which refuses, before the kernel sees them, an SGE
/// whose lkey is not an on-demand-paging region of `pd` or whose range lies outside it
/// (`EINVAL`), no SGE, an unknown advice or flag (`EINVAL`), and a device without ODP
/// (`EOPNOTSUPP`). Returns 0 or the errno value, as rdma-core's.
///
/// # Safety
/// `pd` is a live PD of ours; `sg_list` holds `num_sge` readable SGEs (or is NULL with 0).
pub(crate) unsafe extern "C" fn advise_mr_op(
    pd: *mut ibv_pd,
    advice: c_uint,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // SAFETY: [ops] [object] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, errno);
    let sges: &[ibv_sge] = match (sg_list.is_null(), num_sge) {
        (_, 0) => &[],
        (true, _) => return null_arg("ibv_advise_mr's sg_list"),
        // SAFETY: [in] sg_list holds num_sge SGEs (the caller's contract).
        (false, n) => unsafe { std::slice::from_raw_parts(sg_list, n as usize) },
    };
    match p
        .pd
        .advise_mr(MrAdvice(advice), AdviseFlags::from_bits_retain(flags), sges)
    {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}
