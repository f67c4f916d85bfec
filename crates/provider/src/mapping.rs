//! Shared mappings of the uverbs command fd (rxe queues, mlx5 UAR pages), unmapped on drop.

#![allow(unsafe_code)]

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

use rverbs_uverbs::Error;

/// One `MAP_SHARED` read/write mapping of the command fd.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; access goes through views (queues, doorbells)
// that follow the device's protocol. Moving the owner between threads is fine.
unsafe impl Send for Mapping {}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mapping({:p}, {} bytes)", self.ptr, self.len)
    }
}

impl Mapping {
    /// Maps `len` bytes of `fd` at `offset`; `what` names it in errors.
    pub(crate) fn map(fd: BorrowedFd<'_>, offset: u64, len: usize, what: &str) -> io::Result<Self> {
        // SAFETY: a new shared mapping at an address the kernel picks; no existing memory is
        // affected.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd,
                offset,
            )
        }
        .map_err(|e| {
            Error::os(format!("map {what}"), e)
                .with_detail(format!("offset {offset:#x}, {len} bytes"))
        })?;
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }

    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; every view over it was dropped before its owner.
        if let Err(e) = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) } {
            tracing::error!("munmap {:p}: {e}", self.ptr);
        }
    }
}
