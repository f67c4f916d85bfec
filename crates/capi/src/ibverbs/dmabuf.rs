//! `ibv_reg_dmabuf_mr`: a memory region over a dma-buf, through rverbs' [`DmabufMr`]: the
//! same checks (the fd must be a dma-buf and the range inside it, before the kernel sees it)
//! and the same errors. The region is an ordinary [`CMr`]: `ibv_dereg_mr` deregisters it. As in libibverbs, its `addr` is the
//! offset in the dma-buf and `length` the length; SGEs name it by lkey and iova.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::os::fd::BorrowedFd;
use std::ptr::null_mut;

use rverbs_uverbs::dmabuf::DmabufMr;
use rverbs_uverbs::mr::AccessFlags;

use super::{fail, set_errno, CMr, CPd};
use crate::abi::{ibv_mr, ibv_pd};
use crate::handle::FromC;

/// `IBV_ACCESS_OPTIONAL_RANGE`: access bits a device may ignore (as `ibv_reg_mr`).
const ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

symver!(ibv_reg_dmabuf_mr => "IBVERBS_1.12");
/// `ibv_reg_dmabuf_mr`: registers `length` bytes at `offset` of the dma-buf `fd`, at `iova`.
/// Fails with `EBADF` for a negative or closed fd, `EINVAL` for a file that is not a
/// dma-buf or a range past its end, `EOPNOTSUPP` where the device has no dma-buf support
/// (rxe, siw); `RVERBS_CAPI_LOG=1` prints the error naming device, fd and reason.
///
/// # Safety
/// `pd` is an \[object\] of ours; `fd` is \[fd\]: open (or not) and not closed by another
/// thread during the call.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, null);
    // SAFETY: [fd] fd is not closed by another thread during the call.
    let Some(bfd) = (unsafe { open_fd(fd) }) else {
        fail(&bad_fd(fd));
        set_errno(libc::EBADF);
        return null_mut();
    };
    let access = AccessFlags::from_bits_retain(access as u32 & !ACCESS_OPTIONAL_RANGE);
    match DmabufMr::register(&p.pd, bfd, offset, length, iova, access) {
        Ok(mr) => Box::into_raw(c_mr(p, pd, offset, length, mr)).cast(),
        Err(e) => {
            set_errno(fail(&e));
            null_mut()
        }
    }
}

/// `fd` as a borrowed file when it is an open file number (`fcntl(F_GETFD)` succeeds);
/// `None` for a negative or closed one.
///
/// # Safety
/// An open `fd` stays open for `'a`.
unsafe fn open_fd<'a>(fd: c_int) -> Option<BorrowedFd<'a>> {
    if fd < 0 {
        return None;
    }
    // SAFETY: fd >= 0 (not -1); only asked whether it is open, then kept open for `'a` by
    // the caller's contract.
    let b = unsafe { BorrowedFd::borrow_raw(fd) };
    rustix::io::fcntl_getfd(b).is_ok().then_some(b)
}

/// The error for a dma-buf fd that is not an open file.
fn bad_fd(fd: c_int) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("ibv_reg_dmabuf_mr: fd {fd} is not an open file"),
    )
}

/// The C region over a registered dma-buf region: its `addr` the offset in the dma-buf, as
/// libibverbs fills it.
fn c_mr(p: &CPd, pd: *mut ibv_pd, offset: u64, length: usize, mr: DmabufMr) -> Box<CMr> {
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    Box::new(CMr {
        c: UnsafeCell::new(ibv_mr {
            context: p.context(),
            pd,
            addr: offset as usize as *mut c_void,
            length,
            handle: 0,
            lkey,
            rkey,
        }),
        mr: mr.into_raw(),
    })
}
