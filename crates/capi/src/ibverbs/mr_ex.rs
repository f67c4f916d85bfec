//! rdma-core 59–64's registration entry points: `ibv_reg_mr_ex` (`IBVERBS_1.15`), the
//! provider-allocated buffers `ibv_alloc_buf` / `ibv_free_buf` / `ibv_reg_buf_mr`
//! (`IBVERBS_1.17`) and DMA handles (`ibv_alloc_dmah` / `ibv_dealloc_dmah`, `IBVERBS_1.15`,
//! refused).
//!
//! `ibv_reg_mr_ex` checks its attributes as libibverbs does for a provider without a
//! `reg_mr_ex` of its own (rxe, siw: libibverbs' default translates the request into the
//! older registrations), then registers through [`ibv_reg_mr_iova2`] (an address) or
//! [`ibv_reg_dmabuf_mr`] (a dma-buf fd), so the regions, their errors and `ibv_dereg_mr` are
//! those functions'. The structures are rdma-core 64's (`verbs.h`), which the installed
//! rdma-core 44 headers lack: their layout is pinned by the tests below, by hand from that
//! header, and the C test program `tests/c/new_verbs.c` declares and uses them.

use super::*;

/// `struct ibv_mr_init_attr` (rdma-core 59, `verbs.h`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mr_init_attr {
    /// Bytes to register.
    pub length: usize,
    /// `IBV_ACCESS_*`.
    pub access: c_int,
    /// `IBV_REG_MR_MASK_*`: which of the fields below are given.
    pub comp_mask: u64,
    /// The address SGEs and peers use for the first byte (`IBV_REG_MR_MASK_IOVA`).
    pub iova: u64,
    /// The memory (`IBV_REG_MR_MASK_ADDR`).
    pub addr: *mut c_void,
    /// A dma-buf (`IBV_REG_MR_MASK_FD`).
    pub fd: c_int,
    /// The offset in the dma-buf (`IBV_REG_MR_MASK_FD_OFFSET`).
    pub fd_offset: u64,
    /// A DMA handle (`IBV_REG_MR_MASK_DMAH`).
    pub dmah: *mut c_void,
    /// A buffer of `ibv_alloc_buf` (`IBV_REG_MR_MASK_BUF`; `addr` is given too).
    pub buf: *mut ibv_buf,
}

/// `IBV_REG_MR_MASK_*` (`enum ibv_mr_init_attr_mask`).
pub const IBV_REG_MR_MASK_IOVA: u64 = 1 << 0;
#[allow(missing_docs)]
pub const IBV_REG_MR_MASK_ADDR: u64 = 1 << 1;
#[allow(missing_docs)]
pub const IBV_REG_MR_MASK_FD: u64 = 1 << 2;
#[allow(missing_docs)]
pub const IBV_REG_MR_MASK_FD_OFFSET: u64 = 1 << 3;
#[allow(missing_docs)]
pub const IBV_REG_MR_MASK_DMAH: u64 = 1 << 4;
#[allow(missing_docs)]
pub const IBV_REG_MR_MASK_BUF: u64 = 1 << 5;

/// What libibverbs' default `reg_mr_ex` (a provider without its own: rxe, siw) translates;
/// any other bit (a DMA handle, an unknown one) is `EOPNOTSUPP` there.
const TRANSLATED: u64 =
    IBV_REG_MR_MASK_IOVA | IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_FD | IBV_REG_MR_MASK_FD_OFFSET;

/// `struct ibv_buf` (libibverbs' `driver.h`): what `ibv_alloc_buf` hands out, opaque to its
/// callers. Ours is allocated as libibverbs' default allocator does (page-aligned heap
/// memory); `dmabuf_fd` is always -1 (no provider of ours backs buffers by a dma-buf).
#[repr(C)]
pub struct ibv_buf {
    addr: *mut c_void,
    size: usize,
    pd: *mut ibv_pd,
    dmabuf_fd: c_int,
}

/// The error of a refused request, named (logged with `RVERBS_CAPI_LOG`), as an errno.
fn refuse(kind: io::ErrorKind, what: String) -> c_int {
    fail(&io::Error::new(kind, what))
}

symver!(ibv_reg_mr_ex => "IBVERBS_1.15");
/// `ibv_reg_mr_ex` (rdma-core 59): registers what `mr_init_attr` describes, NULL and errno
/// on failure. An address (`ADDR`, with `IOVA` where the device addresses it, the address
/// itself when absent) registers as [`ibv_reg_mr_iova2`] does; a dma-buf (`FD`, `FD_OFFSET` and `IOVA`, without `ADDR`) as
/// [`ibv_reg_dmabuf_mr`]; a buffer of [`ibv_alloc_buf`] (`BUF` and `ADDR`) is the address
/// range, checked to lie inside the buffer. Refused as libibverbs refuses on rxe and siw:
/// `EINVAL` for a buffer of another PD, a range outside it, `BUF` without `ADDR` or with
/// `FD`/`FD_OFFSET`, `FD` without `FD_OFFSET` or `IOVA` or with `ADDR`, neither `ADDR` nor
/// `FD`, `FD_OFFSET` without `FD`; `EOPNOTSUPP` for a DMA handle (`DMAH`) or an unknown bit,
/// and on-demand paging at an `iova` other than `addr` (as `ibv_reg_mr_iova2`). NULL `pd` or
/// `mr_init_attr`: `EINVAL`.
///
/// # Safety
/// `pd` is ours; `mr_init_attr` is NULL or readable; the memory it names is the caller's and
/// stays mapped while the MR lives (\[registered\]); a `buf` came from [`ibv_alloc_buf`] and
/// was not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_ex(
    pd: *mut ibv_pd,
    mr_init_attr: *mut ibv_mr_init_attr,
) -> *mut ibv_mr {
    // SAFETY: [object] pd.
    obj!(unsafe { CPd::from_c(pd) }, null);
    if mr_init_attr.is_null() {
        set_errno(null_arg("ibv_mr_init_attr"));
        return null_mut();
    }
    // SAFETY: [in] mr_init_attr: readable, copied (libibverbs never writes the caller's).
    let a = unsafe { read_init_attr(mr_init_attr) };
    // SAFETY: [registered] forwarded; [in] a.buf as the caller promised.
    match unsafe { reg_mr_ex(pd, a) } {
        Ok(mr) => mr,
        Err(errno) => {
            set_errno(errno);
            null_mut()
        }
    }
}

/// A copy of the caller's attributes, read field by field: `buf` only when `comp_mask` has
/// `IBV_REG_MR_MASK_BUF`, since rdma-core 64 appended it to the struct at the same symbol
/// version (a program built against rdma-core 59–63 passes the 64 bytes before it), as
/// libibverbs reads each field only when its bit asks for it.
///
/// # Safety
/// `p` is readable for the fields before `buf`, and for `buf` too when `comp_mask` has
/// `IBV_REG_MR_MASK_BUF`.
unsafe fn read_init_attr(p: *const ibv_mr_init_attr) -> ibv_mr_init_attr {
    // SAFETY: each read is of a field the caller's struct has (the contract above); raw
    // place projections, so no reference to the whole (possibly shorter) struct is made.
    unsafe {
        let comp_mask = (&raw const (*p).comp_mask).read_unaligned();
        ibv_mr_init_attr {
            length: (&raw const (*p).length).read_unaligned(),
            access: (&raw const (*p).access).read_unaligned(),
            comp_mask,
            iova: (&raw const (*p).iova).read_unaligned(),
            addr: (&raw const (*p).addr).read_unaligned(),
            fd: (&raw const (*p).fd).read_unaligned(),
            fd_offset: (&raw const (*p).fd_offset).read_unaligned(),
            dmah: (&raw const (*p).dmah).read_unaligned(),
            buf: if comp_mask & IBV_REG_MR_MASK_BUF != 0 {
                (&raw const (*p).buf).read_unaligned()
            } else {
                null_mut()
            },
        }
    }
}

/// [`ibv_reg_mr_ex`] on a copy of the attributes; the errno on failure.
///
/// # Safety
/// As [`ibv_reg_mr_ex`].
unsafe fn reg_mr_ex(pd: *mut ibv_pd, mut a: ibv_mr_init_attr) -> Result<*mut ibv_mr, c_int> {
    let mask = a.comp_mask;
    let has = |bit| mask & bit != 0;
    if has(IBV_REG_MR_MASK_BUF) {
        // SAFETY: [in] a.buf came from ibv_alloc_buf (the caller's promise), or is NULL.
        unsafe { from_buf(pd, &mut a)? };
    }
    let mask = a.comp_mask;
    let has = |bit| mask & bit != 0;
    if mask & !TRANSLATED != 0 {
        let what = if has(IBV_REG_MR_MASK_DMAH) {
            "a DMA handle (IBV_REG_MR_MASK_DMAH): rverbs has no DMA handles (ibv_alloc_dmah)"
                .to_string()
        } else {
            format!("unknown comp_mask bits {:#x}", mask & !TRANSLATED)
        };
        return Err(refuse(
            io::ErrorKind::Unsupported,
            format!("ibv_reg_mr_ex: {what}"),
        ));
    }
    let r = if has(IBV_REG_MR_MASK_FD) {
        if has(IBV_REG_MR_MASK_ADDR)
            || !has(IBV_REG_MR_MASK_FD_OFFSET)
            || !has(IBV_REG_MR_MASK_IOVA)
        {
            return Err(refuse(
                io::ErrorKind::InvalidInput,
                "ibv_reg_mr_ex: a dma-buf (IBV_REG_MR_MASK_FD) needs FD_OFFSET and IOVA, and no \
                 ADDR"
                    .into(),
            ));
        }
        // SAFETY: [object] pd; [fd] a.fd is the caller's.
        unsafe { ibv_reg_dmabuf_mr(pd, a.fd_offset, a.length, a.iova, a.fd, a.access) }
    } else {
        if !has(IBV_REG_MR_MASK_ADDR) || has(IBV_REG_MR_MASK_FD_OFFSET) {
            return Err(refuse(
                io::ErrorKind::InvalidInput,
                "ibv_reg_mr_ex: needs an address (IBV_REG_MR_MASK_ADDR) or a dma-buf \
                 (IBV_REG_MR_MASK_FD); FD_OFFSET goes only with FD"
                    .into(),
            ));
        }
        let iova = if has(IBV_REG_MR_MASK_IOVA) {
            a.iova
        } else {
            a.addr as u64
        };
        // SAFETY: [object] pd; [registered] the caller's range.
        unsafe { ibv_reg_mr_iova2(pd, a.addr, a.length, iova, a.access as c_uint) }
    };
    if r.is_null() {
        // errno is the registration's (set by the function above).
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL));
    }
    Ok(r)
}

/// Turns `BUF` into the address range it stands for (libibverbs'
/// `fill_mr_init_attr_from_buf`): the buffer must be the PD's, `ADDR` given and the range
/// inside the buffer, without `FD`/`FD_OFFSET`.
///
/// # Safety
/// `a.buf` is NULL or came from [`ibv_alloc_buf`] and was not freed.
unsafe fn from_buf(pd: *mut ibv_pd, a: &mut ibv_mr_init_attr) -> Result<(), c_int> {
    let bad = |what: String| {
        refuse(
            io::ErrorKind::InvalidInput,
            format!("ibv_reg_mr_ex: {what}"),
        )
    };
    if a.buf.is_null() {
        return Err(bad("IBV_REG_MR_MASK_BUF with a NULL buf".into()));
    }
    // SAFETY: [in] a buffer handle of ibv_alloc_buf (the caller's promise), read only.
    let b = unsafe { &*a.buf };
    if b.pd != pd {
        return Err(bad(format!(
            "the buffer was allocated on PD {:p}, not on {pd:p}",
            b.pd
        )));
    }
    if a.comp_mask & IBV_REG_MR_MASK_ADDR == 0 {
        return Err(bad(
            "IBV_REG_MR_MASK_BUF needs IBV_REG_MR_MASK_ADDR (the start inside the buffer)".into(),
        ));
    }
    let (base, addr) = (b.addr as usize, a.addr as usize);
    let inside = addr
        .checked_sub(base)
        .filter(|off| *off <= b.size && a.length <= b.size - off);
    if inside.is_none() {
        return Err(bad(format!(
            "{} bytes at {addr:#x} are not inside the buffer ({} bytes at {base:#x})",
            a.length, b.size
        )));
    }
    if a.comp_mask & (IBV_REG_MR_MASK_FD | IBV_REG_MR_MASK_FD_OFFSET) != 0 {
        return Err(bad(
            "IBV_REG_MR_MASK_BUF goes with neither FD nor FD_OFFSET".into(),
        ));
    }
    a.comp_mask &= !IBV_REG_MR_MASK_BUF;
    Ok(())
}

symver!(ibv_alloc_buf => "IBVERBS_1.17");
/// `ibv_alloc_buf` (rdma-core 64): `size` bytes of page-aligned memory for registration with
/// [`ibv_reg_buf_mr`], as libibverbs' default allocator gives them (rxe and siw have no
/// allocator of their own); `*buf` gets the handle for [`ibv_free_buf`]. NULL and errno on
/// failure: `EINVAL` for a NULL `pd` or `buf`, `ENOMEM` (or `posix_memalign`'s error).
///
/// # Safety
/// `pd` is ours; `buf` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_buf(
    pd: *mut ibv_pd,
    size: usize,
    buf: *mut *mut ibv_buf,
) -> *mut c_void {
    // SAFETY: [object] pd.
    obj!(unsafe { CPd::from_c(pd) }, null);
    if buf.is_null() {
        set_errno(null_arg("ibv_buf *"));
        return null_mut();
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut mem = null_mut();
    // SAFETY: mem is writable; page is a power of two and a multiple of the pointer size.
    let r = unsafe { libc::posix_memalign(&mut mem, page, size) };
    if r != 0 {
        // Logged; the allocator's own error is what C gets.
        fail(&io::Error::from_raw_os_error(r));
        set_errno(r);
        return null_mut();
    }
    let handle = Box::into_raw(Box::new(ibv_buf {
        addr: mem,
        size,
        pd,
        dmabuf_fd: -1,
    }));
    // SAFETY: [out] buf (non-NULL, checked above).
    unsafe { buf.write(handle) };
    mem
}

symver!(ibv_free_buf => "IBVERBS_1.17");
/// `ibv_free_buf` (rdma-core 64): frees a buffer of [`ibv_alloc_buf`] and its handle. NULL is
/// ignored (logged with `RVERBS_CAPI_LOG`).
///
/// # Safety
/// `buf` is NULL or came from [`ibv_alloc_buf`], is not used afterwards, and no region over
/// it is still registered (libibverbs' contract: deregister first).
#[no_mangle]
pub unsafe extern "C" fn ibv_free_buf(buf: *mut ibv_buf) {
    if buf.is_null() {
        null_arg("ibv_buf");
        return;
    }
    // SAFETY: [destroy] buf was boxed by ibv_alloc_buf and is not used afterwards.
    let b = unsafe { Box::from_raw(buf) };
    // SAFETY: b.addr came from posix_memalign and is freed once, here.
    unsafe { libc::free(b.addr) };
}

symver!(ibv_reg_buf_mr => "IBVERBS_1.17");
/// `ibv_reg_buf_mr` (rdma-core 64): registers `length` bytes at `addr` inside a buffer of
/// [`ibv_alloc_buf`]: [`ibv_reg_mr_ex`] with `BUF` and `ADDR`, so its errors (`EINVAL` for a
/// range outside the buffer or a buffer of another PD, NULL `buf`).
///
/// # Safety
/// `pd` is ours; `buf` came from [`ibv_alloc_buf`] and stays allocated while the MR lives.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_buf_mr(
    pd: *mut ibv_pd,
    buf: *mut ibv_buf,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    let mut a = ibv_mr_init_attr {
        length,
        access,
        comp_mask: IBV_REG_MR_MASK_BUF | IBV_REG_MR_MASK_ADDR,
        iova: 0,
        addr,
        fd: -1,
        fd_offset: 0,
        dmah: null_mut(),
        buf,
    };
    // SAFETY: forwarded ([object] pd, [in] buf); a is readable.
    unsafe { ibv_reg_mr_ex(pd, &mut a) }
}

/// `struct ibv_dmah_init_attr` (rdma-core 59): what a DMA handle would steer.
#[repr(C)]
pub struct ibv_dmah_init_attr {
    /// `IBV_DMAH_INIT_ATTR_MASK_*`.
    pub comp_mask: u32,
    /// The CPU whose cache the device's writes should reach.
    pub cpu_id: u32,
    /// The PCIe TPH processing hint.
    pub ph: u8,
    /// `enum ibv_tph_mem_type`.
    pub tph_mem_type: u8,
}

symver!(ibv_alloc_dmah => "IBVERBS_1.15");
/// `ibv_alloc_dmah` (rdma-core 59): refused, NULL and `EOPNOTSUPP` (`EINVAL` for a NULL
/// context), as libibverbs answers for rxe and siw, whose kernel drivers have no DMA handles
/// (PCIe TPH steering of a device's writes); rverbs does not issue the kernel's
/// `UVERBS_METHOD_DMAH_ALLOC` for any device. The reason is logged with `RVERBS_CAPI_LOG`.
///
/// # Safety
/// `context` is ours; `attr` is not read.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_dmah(
    context: *mut ibv_context,
    _attr: *mut ibv_dmah_init_attr,
) -> *mut c_void {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, null);
    set_errno(refuse(
        io::ErrorKind::Unsupported,
        format!(
            "ibv_alloc_dmah on {}: DMA handles are not supported (rxe and siw have none; \
             rverbs allocates none for any device)",
            c.ctx.name()
        ),
    ));
    null_mut()
}

symver!(ibv_dealloc_dmah => "IBVERBS_1.15");
/// `ibv_dealloc_dmah` (rdma-core 59): `EOPNOTSUPP` (no DMA handle is ever handed out;
/// `EINVAL` for NULL).
///
/// # Safety
/// Any pointer (not dereferenced).
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_dmah(dmah: *mut c_void) -> c_int {
    if dmah.is_null() {
        return null_arg("ibv_dmah");
    }
    refuse(
        io::ErrorKind::Unsupported,
        "ibv_dealloc_dmah: not a DMA handle of rverbs (it allocates none)".into(),
    )
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// The layouts of rdma-core 64's `verbs.h` (x86-64), by hand: the installed rdma-core 44
    /// headers have neither struct, so `tests/layout.rs` cannot compare them.
    #[test]
    fn layouts_are_rdma_core_64s() {
        assert_eq!(size_of::<ibv_mr_init_attr>(), 72);
        let o = [
            offset_of!(ibv_mr_init_attr, length),
            offset_of!(ibv_mr_init_attr, access),
            offset_of!(ibv_mr_init_attr, comp_mask),
            offset_of!(ibv_mr_init_attr, iova),
            offset_of!(ibv_mr_init_attr, addr),
            offset_of!(ibv_mr_init_attr, fd),
            offset_of!(ibv_mr_init_attr, fd_offset),
            offset_of!(ibv_mr_init_attr, dmah),
            offset_of!(ibv_mr_init_attr, buf),
        ];
        assert_eq!(o, [0, 8, 16, 24, 32, 40, 48, 56, 64]);
        assert_eq!(size_of::<ibv_dmah_init_attr>(), 12);
        assert_eq!(offset_of!(ibv_dmah_init_attr, cpu_id), 4);
        assert_eq!(offset_of!(ibv_dmah_init_attr, ph), 8);
        assert_eq!(offset_of!(ibv_dmah_init_attr, tph_mem_type), 9);
        assert_eq!(size_of::<ibv_buf>(), 32);
        assert_eq!(offset_of!(ibv_buf, pd), 16);
        assert_eq!(offset_of!(ibv_buf, dmabuf_fd), 24);
    }

    /// rdma-core 59–63's `ibv_mr_init_attr`: the 64 bytes before `buf`.
    #[repr(C, align(8))]
    struct Attr63([u8; 64]);

    /// The attributes of a program built against rdma-core 59–63 end before `buf`: the copy
    /// reads no byte past them unless `IBV_REG_MR_MASK_BUF` asks for `buf` (Miri checks the
    /// bounds of the 64-byte allocation; the test below checks a guard page natively).
    #[test]
    fn a_59_to_63_struct_is_read_without_its_missing_buf() {
        let mut short = Box::new(Attr63([0; 64]));
        let p = (&raw mut *short).cast::<ibv_mr_init_attr>();
        // SAFETY: the fields before `buf` lie inside the 64 bytes.
        unsafe {
            (&raw mut (*p).length).write(4096);
            (&raw mut (*p).comp_mask).write(IBV_REG_MR_MASK_ADDR | IBV_REG_MR_MASK_IOVA);
            (&raw mut (*p).iova).write(0x1000);
        }
        // SAFETY: no BUF bit, so only the 64 bytes are read.
        let a = unsafe { read_init_attr(p) };
        assert_eq!((a.length, a.iova, a.comp_mask), (4096, 0x1000, 3));
        assert!(a.buf.is_null());
    }

    /// The same struct as the last 64 bytes before an inaccessible page: the old whole-struct
    /// copy (72 bytes) faulted here.
    #[test]
    #[cfg_attr(miri, ignore = "mmap")]
    fn a_59_to_63_struct_before_a_guard_page_is_read() {
        // SAFETY: an anonymous private mapping of two pages, the second made inaccessible,
        // unmapped at the end; the struct is written and read inside the first.
        unsafe {
            let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap();
            let m = libc::mmap(
                null_mut(),
                2 * page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            assert_eq!(
                libc::mprotect(m.cast::<u8>().add(page).cast(), page, libc::PROT_NONE),
                0
            );
            let p = m.cast::<u8>().add(page - 64).cast::<ibv_mr_init_attr>();
            (&raw mut (*p).length).write(64);
            (&raw mut (*p).comp_mask).write(IBV_REG_MR_MASK_ADDR);
            let a = read_init_attr(p);
            assert_eq!((a.length, a.comp_mask), (64, IBV_REG_MR_MASK_ADDR));
            assert!(a.buf.is_null());
            libc::munmap(m, 2 * page);
        }
    }
}
