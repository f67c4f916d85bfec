//! The parts of a memory buffer given up for registration: [`RawMemory`], a plain value that
//! the PD's region bookkeeping (`pd/region.rs`) and the memory regions (`mr`) both carry.

use std::ptr::NonNull;

/// The parts of a memory buffer given up for registration: a pointer with read and write
/// provenance over `len` bytes, and one word the type may use to rebuild itself (a `Vec`'s
/// capacity, a mapping's length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawMemory {
    /// Start of the range.
    pub ptr: NonNull<u8>,
    /// Length in bytes.
    pub len: usize,
    /// Type-specific word for [`MrMemory::from_raw`](crate::mr::MrMemory::from_raw).
    pub extra: usize,
}
