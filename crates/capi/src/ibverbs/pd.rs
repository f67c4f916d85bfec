//! Protection domains (`ibv_pd`).

use super::*;

/// An `ibv_pd` and its rverbs PD.
#[repr(C)]
pub struct CPd {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_pd>,
    /// The rverbs PD.
    pub pd: Arc<Pd>,
}

from_c!(CPd => ibv_pd, "ibv_pd");

symver!(ibv_alloc_pd => "IBVERBS_1.1");
/// `ibv_alloc_pd`.
///
/// # Safety
/// `context` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, null);
    match Pd::alloc(&c.ctx) {
        Ok(pd) => {
            let b = Box::new(CPd {
                c: UnsafeCell::new(ibv_pd {
                    context,
                    handle: pd.handle(),
                }),
                pd,
            });
            Box::into_raw(b).cast()
        }
        Err(e) => null_with(&e),
    }
}

impl CPd {
    /// The C structure (\[c-struct\]: for raw reads and writes only).
    pub(crate) fn c_ptr(&self) -> *mut ibv_pd {
        self.c.get()
    }

    /// The context C sees in `ibv_pd.context` (set at creation).
    pub(crate) fn context(&self) -> *mut ibv_context {
        // SAFETY: [c-struct] a read through the raw pointer, no reference.
        unsafe { (*self.c.get()).context }
    }
}

symver!(ibv_dealloc_pd => "IBVERBS_1.1");
/// `ibv_dealloc_pd`: `EBUSY` while MRs, QPs, SRQs or AHs still use it.
///
/// # Safety
/// `pd` came from [`ibv_alloc_pd`]; on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: [destroy] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, errno);
    if Arc::strong_count(&p.pd) > 1 {
        return libc::EBUSY;
    }
    // SAFETY: [destroy] pd: boxed by ibv_alloc_pd ([owner]); `p` is not used any more.
    drop(unsafe { Box::from_raw(pd.cast::<CPd>()) });
    0
}
