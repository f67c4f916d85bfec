//! From a C object pointer to its Rust owner: one conversion per object type, [`FromC`].
//!
//! Every C object this library hands out is a field of a `#[repr(C)]` owner allocated with
//! `Box` (\[owner\]); [`FromC::from_c`] turns an \[object\] pointer back into a shared
//! reference to that owner, and refuses NULL (logged, `None`: the caller fails with `EINVAL`
//! in its error convention, see the crate's `obj!` macro). Adding an object type is one line
//! beside the owner type's definition, `from_c!(CPd => ibv_pd, "ibv_pd");` (this module names
//! no object: the object modules use it, not the other way round).

use crate::errno::null_arg;

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

/// `from_c!(Owner => c_type, "name" [, offset]);` beside an owner type's definition: its
/// [`FromC`] (the C structure at `offset` bytes into the owner, its first field where none is
/// given).
macro_rules! from_c {
    ($owner:ty => $c:ty, $name:literal $(, $off:expr)?) => {
        // SAFETY: [owner] the owner is repr(C) with its C structure at OFFSET (the first
        // field where none is given), Box-allocated by the object's constructor and freed
        // only by its destroy call.
        unsafe impl $crate::handle::FromC for $owner {
            type C = $c;
            const NAME: &'static str = $name;
            $(const OFFSET: usize = $off;)?
        }
    };
}
pub(crate) use from_c;
