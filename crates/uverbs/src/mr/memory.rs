//! What a memory region can be registered over: [`AccessFlags`], and [`MrMemory`], a buffer
//! that gives itself up as a [`RawMemory`] while it is registered (implemented here for
//! `&mut [u8]`, `Box<[u8]>` and `Vec<u8>`; [`PageBuf`](super::PageBuf) in `page.rs`).

#![allow(unsafe_code)]

use std::ptr::NonNull;

pub use crate::values::{AccessFlags, RawMemory};

/// Memory that can be registered: a buffer that gives itself up as a [`RawMemory`] for the
/// time it is registered and is rebuilt from it after deregistration.
///
/// Registration captures the pointer once, from the owned (or exclusively borrowed) value, so
/// the pointer the device and the copy accessors use carries write provenance, and no Rust
/// reference to the bytes exists while they are registered.
///
/// # Safety
/// `into_raw` must return a range that is valid for reads and writes, initialised, and not
/// accessed by anything else until `from_raw` is called with the same parts; the range must
/// not move or change size meanwhile. `from_raw` must accept exactly what `into_raw`
/// returned. [`MrMemory::OWNED`] must be `false` for a type whose memory can be reused by
/// someone else when the value is leaked (a borrow). `from_raw` (and dropping its result) may
/// run on any thread, later than the `Mr`'s drop: the memory of a dropped region that a posted
/// request may still write is given back on the thread that polls that request's completion,
/// inside that poll (or when a [`CqView`](crate::cq::CqView) is dropped: a view that lives
/// long keeps what its batches released until then), inside the drop of its QP or SRQ or of
/// any QP of the protection domain (which fences the domain's deferred memory), inside a
/// `Qp::create` (a failed creation lets go of what it took), inside a post (a bind's or a
/// receive's last handle on a window or region), after the CQ's, the QP table's and the
/// ledgers' locks were released (`ledger::Freed`): so it may poll, post or create a QP. A
/// panic in it inside a poll loses that poll's count (the completions it took from the ring
/// are settled but not returned).
pub unsafe trait MrMemory: Sized {
    /// True when leaking the value keeps the memory allocated forever (owned memory); false
    /// for borrows, whose memory goes back to its owner when the borrow ends.
    const OWNED: bool = true;
    /// Gives up the buffer.
    fn into_raw(self) -> RawMemory;
    /// Rebuilds the buffer.
    ///
    /// # Safety
    /// `raw` must come from `into_raw` of this type, and be used once.
    unsafe fn from_raw(raw: RawMemory) -> Self;
}

// SAFETY: the pointer comes from the exclusive borrow (write provenance) and the borrow is held
// (as the lifetime of the rebuilt value) until from_raw; OWNED is false, so a failed
// deregistration aborts rather than hand the memory back to its owner.
unsafe impl MrMemory for &mut [u8] {
    const OWNED: bool = false;
    fn into_raw(self) -> RawMemory {
        RawMemory {
            ptr: NonNull::new(self.as_mut_ptr()).expect("slice pointer is non-null"),
            len: self.len(),
            extra: 0,
        }
    }
    unsafe fn from_raw(raw: RawMemory) -> Self {
        // SAFETY: the caller passes what into_raw returned; the borrow lives as long as Self.
        unsafe { std::slice::from_raw_parts_mut(raw.ptr.as_ptr(), raw.len) }
    }
}

// SAFETY: Box::into_raw gives up the allocation with full provenance; Box::from_raw takes it
// back. The heap block never moves.
unsafe impl MrMemory for Box<[u8]> {
    fn into_raw(self) -> RawMemory {
        let len = self.len();
        let p = Box::into_raw(self);
        RawMemory {
            ptr: NonNull::new(p.cast::<u8>()).expect("Box pointer is non-null"),
            len,
            extra: 0,
        }
    }
    unsafe fn from_raw(raw: RawMemory) -> Self {
        let p = std::ptr::slice_from_raw_parts_mut(raw.ptr.as_ptr(), raw.len);
        // SAFETY: `p` is the pointer Box::into_raw returned.
        unsafe { Box::from_raw(p) }
    }
}

// SAFETY: the Vec is taken apart (pointer, length, capacity) and rebuilt by from_raw_parts;
// nothing can grow or shrink it meanwhile.
unsafe impl MrMemory for Vec<u8> {
    fn into_raw(self) -> RawMemory {
        let mut v = std::mem::ManuallyDrop::new(self);
        RawMemory {
            ptr: NonNull::new(v.as_mut_ptr()).expect("Vec pointer is non-null"),
            len: v.len(),
            extra: v.capacity(),
        }
    }
    unsafe fn from_raw(raw: RawMemory) -> Self {
        // SAFETY: the parts of a Vec<u8> taken apart by into_raw.
        unsafe { Vec::from_raw_parts(raw.ptr.as_ptr(), raw.len, raw.extra) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::shared::copy_to_shared;
    use crate::mr::PageBuf;

    fn round_trip<M: MrMemory>(m: M) -> M {
        let raw = m.into_raw();
        // SAFETY: writes through the captured pointer (write provenance) inside the range.
        unsafe { copy_to_shared(b"xyz", raw.ptr.as_ptr().add(1)) };
        // SAFETY: the parts into_raw returned, used once.
        unsafe { M::from_raw(raw) }
    }

    #[test]
    fn memory_round_trips_keep_contents() {
        let v = round_trip(vec![0u8; 10]);
        assert_eq!(&v[..5], b"\0xyz\0");
        let b = round_trip(vec![0u8; 10].into_boxed_slice());
        assert_eq!(&b[..5], b"\0xyz\0");
        let mut arr = [0u8; 10];
        let s = round_trip(&mut arr[..]);
        assert_eq!(&s[..5], b"\0xyz\0");
        assert_eq!(&arr[..5], b"\0xyz\0");
        let p = round_trip(PageBuf::new(10).unwrap());
        assert_eq!(&p.as_slice()[..5], b"\0xyz\0");
    }
}
