//! The page allocator: [`PageBuf`], page-aligned zeroed memory for RDMA buffers.

#![allow(unsafe_code)]

use std::fmt;

use super::{MrMemory, RawMemory};
use crate::error::{Error, Result};
use crate::kernel::mapping::Mapping;

/// Page-aligned, zeroed memory from an anonymous mapping (what RDMA buffers usually want).
pub struct PageBuf {
    /// Whole pages; the buffer is its first `len` bytes.
    map: Mapping,
    len: usize,
}

impl PageBuf {
    /// Maps `len` zeroed bytes (rounded up to whole pages for the mapping).
    pub fn new(len: usize) -> Result<PageBuf> {
        if len == 0 {
            return Err(Error::invalid("allocate page buffer", "length 0").into());
        }
        let page = rustix::param::page_size();
        let map_len = len.div_ceil(page) * page;
        let map = Mapping::anonymous(map_len)
            .map_err(|e| Error::os(format!("allocate page buffer of {len} bytes"), e))?;
        Ok(PageBuf { map, len })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of our mapping (`len` ≤ its length), initialised
        // (zero-filled) and alive; the mapping is not registered while a PageBuf exists (a
        // registration takes it apart with `into_raw`), so nothing else writes it.
        unsafe { std::slice::from_raw_parts(self.map.ptr().as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.map.ptr().as_ptr(), self.len) }
    }
}

impl fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageBuf")
            .field("addr", &self.map.ptr())
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the mapping is given up (its pointer, with the provenance mmap gave it, and its
// length in `extra`) and taken back unchanged; it is unmapped only when the rebuilt
// PageBuf's Mapping drops.
unsafe impl MrMemory for PageBuf {
    fn into_raw(self) -> RawMemory {
        let len = self.len;
        let (ptr, map_len) = self.map.into_raw();
        RawMemory {
            ptr,
            len,
            extra: map_len,
        }
    }
    unsafe fn from_raw(raw: RawMemory) -> Self {
        PageBuf {
            // SAFETY: `ptr` and `extra` are what `Mapping::into_raw` returned in `into_raw`
            // (the caller's contract: the parts `into_raw` returned, used once).
            map: unsafe { Mapping::from_raw(raw.ptr, raw.extra) },
            len: raw.len,
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
        assert_eq!(
            b.map.ptr().as_ptr() as usize % rustix::param::page_size(),
            0
        );
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[99] = 7;
        assert_eq!(b.as_slice()[99], 7);
        assert!(PageBuf::new(0).is_err());
    }
}
