//! The page allocator: [`PageBuf`], page-aligned zeroed memory for RDMA buffers.

#![allow(unsafe_code)]

use std::fmt;
use std::ptr::NonNull;

use super::{MrMemory, RawMemory};
use crate::error::{Error, Result};

/// Page-aligned, zeroed memory from an anonymous mapping (what RDMA buffers usually want).
pub struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
}

// SAFETY: PageBuf is plain owned memory, like Box<[u8]>.
unsafe impl Send for PageBuf {}
// SAFETY: shared access only hands out &[u8]; mutation requires &mut.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// Maps `len` zeroed bytes (rounded up to whole pages for the mapping).
    pub fn new(len: usize) -> Result<PageBuf> {
        if len == 0 {
            return Err(Error::invalid("allocate page buffer", "length 0").into());
        }
        let page = rustix::param::page_size();
        let map_len = len.div_ceil(page) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                map_len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }
        .map_err(|e| Error::os(format!("allocate page buffer of {len} bytes"), e))?;
        Ok(PageBuf {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
            map_len,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is our mapping, initialised (zero-filled) and alive.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageBuf")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: we own this mapping and nothing refers to it any more.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.map_len) } {
            tracing::error!("munmap page buffer: {e}");
        }
    }
}

// SAFETY: the mapping is taken over (with the pointer mmap returned) and rebuilt unchanged;
// it is unmapped only by PageBuf's Drop.
unsafe impl MrMemory for PageBuf {
    fn into_raw(self) -> RawMemory {
        let b = std::mem::ManuallyDrop::new(self);
        RawMemory {
            ptr: b.ptr,
            len: b.len,
            extra: b.map_len,
        }
    }
    unsafe fn from_raw(raw: RawMemory) -> Self {
        PageBuf {
            ptr: raw.ptr,
            len: raw.len,
            map_len: raw.extra,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_buf_is_aligned_and_zeroed() {
        let mut b = PageBuf::new(100).unwrap();
        assert_eq!(b.as_slice().len(), 100);
        assert_eq!(b.ptr.as_ptr() as usize % rustix::param::page_size(), 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[99] = 7;
        assert_eq!(b.as_slice()[99], 7);
        assert!(PageBuf::new(0).is_err());
    }
}
