//! From a C object pointer to its Rust owner: one conversion per object type, [`FromC`].
//!
//! Every C object this library hands out is a field of a `#[repr(C)]` owner allocated with
//! `Box` (\[owner\]); [`FromC::from_c`] turns an \[object\] pointer back into a shared
//! reference to that owner, and refuses NULL (logged, `None`: the caller fails with `EINVAL`
//! in its error convention, see the crate's `obj!` macro). Adding an object type is one line
//! of the `from_c!` table below.

use std::mem::offset_of;

use crate::abi::*;
use crate::cma::{CCmId, CEventChannel};
use crate::ibverbs::{null_arg, CAh, CChannel, CContext, CCq, CDevice, CMr, CPd, CQp, CSrq};
use crate::mw::CMw;

/// A Rust owner of a C object, reached from a pointer to that C object.
///
/// # Safety
/// Implementors are `#[repr(C)]` types whose values C only ever sees through a pointer to
/// their C structure [`FromC::C`], which sits [`FromC::OFFSET`] bytes into the owner (0: the
/// first field); every such pointer this library hands out points into a live, `Box`ed owner
/// until the object's destroy call.
pub(crate) unsafe trait FromC: Sized {
    /// The C structure C callers hold pointers to.
    type C;
    /// The C type's name, for the NULL diagnostic.
    const NAME: &'static str;
    /// Bytes from the start of the owner to its C structure.
    const OFFSET: usize = 0;

    /// The owner's address for the C object `p` points at, computed without reading
    /// anything (NULL gives a recognisably wrong address; check it first).
    fn owner_ptr(p: *mut Self::C) -> *mut Self {
        p.wrapping_byte_sub(Self::OFFSET).cast()
    }

    /// The owner of the C object `p` points at, or `None` (logged) for NULL.
    ///
    /// # Safety
    /// `p` is NULL or an \[object\] pointer of this type, alive for `'a`.
    #[inline(always)]
    unsafe fn from_c<'a>(p: *mut Self::C) -> Option<&'a Self> {
        if p.is_null() {
            null_arg(Self::NAME);
            return None;
        }
        // SAFETY: [object] p is a live object of ours, not destroyed during the call; [owner]
        // (the trait's contract) it sits OFFSET bytes into a live Self, so owner_ptr points at
        // that Self. Only a shared reference: other threads may use the object too, and its C
        // part is an UnsafeCell ([c-struct]).
        Some(unsafe { &*Self::owner_ptr(p) })
    }

    /// The owner of the C object `p` points at, or `None` for NULL where NULL is a valid
    /// argument (not logged).
    ///
    /// # Safety
    /// As [`FromC::from_c`].
    #[inline(always)]
    unsafe fn from_c_or_none<'a>(p: *mut Self::C) -> Option<&'a Self> {
        if p.is_null() {
            return None;
        }
        // SAFETY: forwarded (the caller's contract); p is not NULL.
        unsafe { Self::from_c(p) }
    }
}

/// `owner => C type, "name" [, offset];` for each object type.
macro_rules! from_c {
    ($($owner:ty => $c:ty, $name:literal $(, $off:expr)?;)*) => {$(
        // SAFETY: [owner] the owner is repr(C) with its C structure at OFFSET (the first
        // field where none is given), Box-allocated by the object's constructor and freed
        // only by its destroy call.
        unsafe impl FromC for $owner {
            type C = $c;
            const NAME: &'static str = $name;
            $(const OFFSET: usize = $off;)?
        }
    )*};
}

from_c! {
    CDevice => ibv_device, "ibv_device";
    // The ibv_context is the first field of the verbs_context, CContext's first field.
    CContext => ibv_context, "ibv_context",
        offset_of!(CContext, vctx) + offset_of!(verbs_context, context);
    CPd => ibv_pd, "ibv_pd";
    CChannel => ibv_comp_channel, "ibv_comp_channel";
    CCq => ibv_cq, "ibv_cq";
    CSrq => ibv_srq, "ibv_srq";
    CQp => ibv_qp, "ibv_qp";
    CMr => ibv_mr, "ibv_mr";
    CAh => ibv_ah, "ibv_ah";
    CMw => ibv_mw, "ibv_mw";
    CEventChannel => rdma_event_channel, "rdma_event_channel";
    CCmId => rdma_cm_id, "rdma_cm_id";
}

#[cfg(test)]
mod tests {
    use std::cell::UnsafeCell;
    use std::mem::MaybeUninit;
    use std::ptr::{addr_of, null_mut};

    use super::*;

    #[test]
    fn context_offset_leads_back_to_its_owner() {
        let m = MaybeUninit::<CContext>::uninit();
        let owner = m.as_ptr().cast_mut();
        // SAFETY: addr_of! and raw_get only compute addresses inside the (uninitialised)
        // allocation; nothing is read and no reference is formed.
        let c = unsafe { addr_of!((*UnsafeCell::raw_get(addr_of!((*owner).vctx))).context) };
        let c = c.cast_mut();
        assert_eq!(CContext::owner_ptr(c), owner);
        assert_ne!(
            c.cast::<u8>(),
            owner.cast::<u8>(),
            "the context is not the first byte"
        );
    }

    #[test]
    fn null_is_refused_for_every_type() {
        // SAFETY: [object] NULL is allowed and refused.
        unsafe {
            assert!(CDevice::from_c(null_mut()).is_none());
            assert!(CContext::from_c(null_mut()).is_none());
            assert!(CPd::from_c(null_mut()).is_none());
            assert!(CChannel::from_c(null_mut()).is_none());
            assert!(CCq::from_c(null_mut()).is_none());
            assert!(CSrq::from_c(null_mut()).is_none());
            assert!(CQp::from_c(null_mut()).is_none());
            assert!(CMr::from_c(null_mut()).is_none());
            assert!(CAh::from_c(null_mut()).is_none());
            assert!(CMw::from_c(null_mut()).is_none());
            assert!(CMr::from_c_or_none(null_mut()).is_none());
            assert!(CEventChannel::from_c(null_mut()).is_none());
            assert!(CCmId::from_c(null_mut()).is_none());
        }
    }
}
