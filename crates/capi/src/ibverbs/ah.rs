//! Address handles (`ibv_ah`), also from a received work completion.

use super::*;

/// An `ibv_ah` and its rverbs AH.
#[repr(C)]
pub struct CAh {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_ah>,
    /// The rverbs AH.
    pub ah: Arc<Ah>,
}

from_c!(CAh => ibv_ah, "ibv_ah");

symver!(ibv_create_ah => "IBVERBS_1.1");
/// `ibv_create_ah`.
///
/// # Safety
/// `pd` is ours; `attr` is readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, null);
    // SAFETY: [in] attr.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        set_errno(null_arg("ibv_ah_attr"));
        return null_mut();
    };
    match Ah::create(&p.pd, ah_attr_from(a)) {
        Ok(ah) => {
            let c = ibv_ah {
                context: p.context(),
                pd,
                handle: ah.handle(),
            };
            Box::into_raw(Box::new(CAh {
                c: UnsafeCell::new(c),
                ah,
            }))
            .cast()
        }
        Err(e) => null_with(&e),
    }
}

/// The fields of a C completion that a reply address needs.
fn wc_for_reply(wc: &ibv_wc) -> WorkCompletion {
    WorkCompletion {
        qp_num: wc.qp_num,
        src_qp: wc.src_qp,
        // The userspace numbering (IBV_WC_GRH = 1), which WcFlags uses too.
        wc_flags: WcFlags::from_bits_truncate(wc.wc_flags),
        slid: wc.slid,
        sl: wc.sl,
        dlid_path_bits: wc.dlid_path_bits,
        ..Default::default()
    }
}

symver!(ibv_init_ah_from_wc => "IBVERBS_1.1");
/// `ibv_init_ah_from_wc`: the address vector of a reply to the UD receive `wc`, whose
/// receive buffer starts with `grh` (read only when `wc` has `IBV_WC_GRH`); see
/// `AhAttr::reply_to`. 0, or -1 with `errno` (`ENOENT`: no GID of ours matches the
/// destination; `EINVAL`: a multicast destination or a header that is not IPv4/IPv6).
///
/// # Safety
/// `context` is a live context of ours; `wc` and `ah_attr` are valid; `grh` points to 40
/// readable bytes when `wc` has `IBV_WC_GRH`.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, neg);
    // SAFETY: [in] wc.
    let Some(wc) = (unsafe { wc.as_ref() }).map(wc_for_reply) else {
        set_errno(null_arg("ibv_wc"));
        return -1;
    };
    let mut area = [0u8; rverbs_uverbs::ah::GRH_LEN];
    if wc.wc_flags.contains(WcFlags::GRH) {
        // SAFETY: [buf] grh has 40 readable bytes (a copy: the buffer is the device's
        // to write while other receives are posted on it).
        unsafe { std::ptr::copy_nonoverlapping(grh as *const u8, area.as_mut_ptr(), area.len()) };
    }
    match AhAttr::reply_to(&c.ctx, port_num, &wc, &area) {
        Ok(a) => {
            // SAFETY: [out] ah_attr.
            unsafe { ah_attr.write(ah_attr_to(&a)) };
            0
        }
        Err(e) => {
            set_errno(fail(&e));
            -1
        }
    }
}

symver!(ibv_create_ah_from_wc => "IBVERBS_1.1");
/// `ibv_create_ah_from_wc`: [`ibv_init_ah_from_wc`] on `pd`'s context, then
/// [`ibv_create_ah`]; NULL with `errno` when either fails.
///
/// # Safety
/// As [`ibv_init_ah_from_wc`], with `pd` a live PD of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut c_void,
    port_num: u8,
) -> *mut ibv_ah {
    // SAFETY: [object] pd.
    let context = obj!(unsafe { CPd::from_c(pd) }, null).context();
    let mut attr = std::mem::MaybeUninit::<ibv_ah_attr>::zeroed();
    // SAFETY: forwarded: [object] context, [in] wc, [buf] grh as our caller's; `attr` is writable.
    if unsafe { ibv_init_ah_from_wc(context, port_num, wc, grh, attr.as_mut_ptr()) } != 0 {
        return null_mut();
    }
    // SAFETY: initialized by ibv_init_ah_from_wc; [object] pd.
    unsafe { ibv_create_ah(pd, attr.as_mut_ptr()) }
}

symver!(ibv_destroy_ah => "IBVERBS_1.1");
/// `ibv_destroy_ah`.
///
/// # Safety
/// `ah` came from [`ibv_create_ah`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: [destroy] ah.
    obj!(unsafe { CAh::from_c(ah) }, errno);
    // SAFETY: [destroy] ah: boxed by ibv_create_ah ([owner]).
    drop(unsafe { Box::from_raw(CAh::owner_ptr(ah)) });
    0
}
