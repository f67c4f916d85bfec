//! One owner of memory mappings: every `mmap` and `munmap` of the rverbs crates is here.
//!
//! A [`Mapping`] is a range the kernel mapped for us (page-aligned anonymous memory for
//! buffers and rings we allocate, or a shared mapping of a device's command fd for queues and
//! doorbell pages the kernel offers) and unmaps it when dropped. It lends raw pointers only:
//! memory a device or a peer may touch is never behind a Rust reference, so whoever builds a
//! view over it (an rxe or siw ring, an mlx5 UAR register, [`crate::mr::PageBuf`]'s slices)
//! states in its own `unsafe` contract what makes that view sound, and drops it before the
//! mapping.

#![allow(unsafe_code)]

use std::fmt;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use rustix::io::Errno;
use rustix::mm::{MapFlags, ProtFlags};

/// What a shared mapping of a file allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapAccess {
    /// Read and write (queues, rings).
    ReadWrite,
    /// Write only (doorbell registers, which nothing reads: libmlx5 maps UARs so).
    WriteOnly,
}

/// One memory mapping, unmapped on drop. See the [module docs](self).
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a mapping is process memory, not tied to a thread; the owner only unmaps it, once.
unsafe impl Send for Mapping {}
// SAFETY: shared access only reads the pointer and the length; using the memory takes
// `unsafe` code with its own contract.
unsafe impl Sync for Mapping {}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mapping({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl Mapping {
    /// `len` bytes of private anonymous memory, zero-filled, page aligned, at an address the
    /// kernel picks (rounded up to whole pages by the kernel). Returns the raw errno; the
    /// caller names what it allocates.
    pub fn anonymous(len: usize) -> Result<Mapping, Errno> {
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks (no
        // MAP_FIXED): no existing memory is affected.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?;
        Ok(Mapping::from_mmap(p, len))
    }

    /// `len` bytes of `fd` at `offset`, shared with the kernel (and, for a device's command
    /// fd, the device), at an address the kernel picks. Returns the raw errno; the caller
    /// names what it maps.
    pub fn shared(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        access: MapAccess,
    ) -> Result<Mapping, Errno> {
        let prot = match access {
            MapAccess::ReadWrite => ProtFlags::READ | ProtFlags::WRITE,
            MapAccess::WriteOnly => ProtFlags::WRITE,
        };
        // SAFETY: a fresh shared mapping at an address the kernel picks (no MAP_FIXED): no
        // existing memory is affected. What the file's owner may do to the pages is the
        // concern of whoever reads or writes them (raw pointers only).
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        Ok(Mapping::from_mmap(p, len))
    }

    fn from_mmap(p: *mut std::ffi::c_void, len: usize) -> Mapping {
        Mapping {
            // mmap without MAP_FIXED never answers address 0 with success.
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        }
    }

    /// The first byte.
    #[inline]
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Bytes mapped (as asked; the kernel maps whole pages).
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: the kernel maps no empty range.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Gives the mapping up without unmapping it: its start and length, for
    /// [`Mapping::from_raw`].
    pub fn into_raw(self) -> (NonNull<u8>, usize) {
        let m = std::mem::ManuallyDrop::new(self);
        (m.ptr, m.len)
    }

    /// Takes back a mapping [`Mapping::into_raw`] gave up.
    ///
    /// # Safety
    /// `ptr` and `len` must be exactly what one `into_raw` returned, taken back once; the
    /// mapping is unmapped when the result is dropped, so nothing may use it after that.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Mapping {
        Mapping { ptr, len }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + len` is the mapping this value owns (made by `anonymous` or
        // `shared`, or handed back to `from_raw` under its contract), unmapped only here.
        // Views over it are dropped before their mapping (each view's contract).
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) } {
            tracing::error!("munmap {:p} ({} bytes): {e}", self.ptr, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Anonymous memory: page aligned, zeroed, writable through the pointer; given up and
    /// taken back unchanged.
    #[test]
    fn anonymous_is_aligned_zeroed_and_round_trips() {
        let m = Mapping::anonymous(100).unwrap();
        assert_eq!(m.len(), 100);
        assert_eq!(m.ptr().as_ptr() as usize % rustix::param::page_size(), 0);
        // SAFETY: 100 bytes of our mapping, no reference into it elsewhere.
        unsafe {
            assert!((0..100).all(|i| m.ptr().as_ptr().add(i).read() == 0));
            m.ptr().as_ptr().add(99).write(7);
        }
        let (p, len) = m.into_raw();
        // SAFETY: what into_raw returned, once.
        let m = unsafe { Mapping::from_raw(p, len) };
        // SAFETY: as above.
        assert_eq!(unsafe { m.ptr().as_ptr().add(99).read() }, 7);
    }

    /// A refused mapping is an error, not a panic or a bogus pointer: an empty range, and a
    /// file that cannot be mapped.
    #[test]
    #[cfg_attr(miri, ignore = "Miri maps no files")]
    fn refused_mappings_are_errors() {
        use std::os::fd::AsFd;
        assert_eq!(Mapping::anonymous(0).unwrap_err(), Errno::INVAL);
        // Opened read-only: a shared writable mapping is refused (EACCES).
        let f = std::fs::File::open("/dev/null").unwrap();
        let e = Mapping::shared(f.as_fd(), 0, 4096, MapAccess::ReadWrite).unwrap_err();
        assert_eq!(e, Errno::ACCESS);
        // A plain file past its end maps (the kernel checks nothing), a directory does not.
        let d = std::fs::File::open("/").unwrap();
        assert!(Mapping::shared(d.as_fd(), 0, 4096, MapAccess::ReadWrite).is_err());
    }
}
