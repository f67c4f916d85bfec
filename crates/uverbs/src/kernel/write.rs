//! The write() command layer: legacy (`ib_uverbs_cmd_hdr`) and extended
//! (`ib_uverbs_cmd_hdr` + `ib_uverbs_ex_cmd_hdr`) commands.
//!
//! Legacy commands put the response pointer in the first 8 bytes of the payload; callers pass
//! the core request struct with that field present (any value: it is overwritten here). Driver
//! data follows the core data in both directions.

#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use rustix::io::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::kernel::abi::cmd::{ib_uverbs_cmd_hdr, ib_uverbs_ex_cmd_hdr, CMD_FLAG_EXTENDED};

/// The bytes of one legacy command, ready for write(): header, core request, driver request.
/// Exposed for tests; [`legacy`] builds and sends it.
pub fn legacy_bytes(
    command: u32,
    core_in: &[u8],
    driver_in: &[u8],
    resp_ptr: Option<u64>,
    resp_len: usize,
) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; size_of::<ib_uverbs_cmd_hdr>() + core_in.len() + driver_in.len()];
    fill_legacy(&mut buf, command, core_in, driver_in, resp_ptr, resp_len)?;
    Ok(buf)
}

/// Writes the legacy command into `buf`, which must be exactly its length.
fn fill_legacy(
    buf: &mut [u8],
    command: u32,
    core_in: &[u8],
    driver_in: &[u8],
    resp_ptr: Option<u64>,
    resp_len: usize,
) -> Result<(), Errno> {
    let hdr_len = size_of::<ib_uverbs_cmd_hdr>();
    let total = hdr_len + core_in.len() + driver_in.len();
    debug_assert_eq!(buf.len(), total);
    if total % 4 != 0 || resp_len % 4 != 0 || total / 4 > u16::MAX as usize {
        return Err(Errno::INVAL);
    }
    let hdr = ib_uverbs_cmd_hdr {
        command,
        in_words: (total / 4) as u16,
        out_words: (resp_len / 4) as u16,
    };
    buf[..hdr_len].copy_from_slice(hdr.as_bytes());
    buf[hdr_len..hdr_len + core_in.len()].copy_from_slice(core_in);
    buf[hdr_len + core_in.len()..].copy_from_slice(driver_in);
    if let Some(p) = resp_ptr {
        if core_in.len() < 8 {
            return Err(Errno::INVAL);
        }
        buf[hdr_len..hdr_len + 8].copy_from_slice(&p.to_ne_bytes());
    }
    Ok(())
}

/// Legacy commands up to this many bytes are built on the stack: the data-path ones
/// (REQ_NOTIFY_CQ when a CQ is re-armed after every event, rxe's POST_SEND doorbell) then
/// never allocate.
const STACK_CMD_LEN: usize = 64;

/// Sends a legacy command. `resp` receives the core response followed by the driver response;
/// pass an empty slice for commands without a response (the request then has no response
/// field to patch, `has_resp = false`).
pub(crate) fn cmd_legacy(
    fd: impl AsFd,
    command: u32,
    core_in: &[u8],
    driver_in: &[u8],
    resp: &mut [u8],
) -> Result<(), Errno> {
    let has_resp = !resp.is_empty();
    let ptr = has_resp.then_some(resp.as_mut_ptr() as u64);
    let total = size_of::<ib_uverbs_cmd_hdr>() + core_in.len() + driver_in.len();
    if total <= STACK_CMD_LEN {
        let mut buf = [0u8; STACK_CMD_LEN];
        fill_legacy(
            &mut buf[..total],
            command,
            core_in,
            driver_in,
            ptr,
            resp.len(),
        )?;
        return write_all(fd, &buf[..total]);
    }
    let buf = legacy_bytes(command, core_in, driver_in, ptr, resp.len())?;
    write_all(fd, &buf)
}

/// Sends a legacy command whose request and response are plain structs (no driver data).
pub(crate) fn cmd_legacy_simple<Req, Resp>(
    fd: impl AsFd,
    command: u32,
    req: &Req,
    resp: &mut Resp,
) -> Result<(), Errno>
where
    Req: IntoBytes + Immutable,
    Resp: IntoBytes + FromBytes,
{
    cmd_legacy(fd, command, req.as_bytes(), &[], resp.as_mut_bytes())
}

/// The bytes of one extended command: header, extended header, core and driver requests.
pub fn extended_bytes(
    command: u32,
    core_in: &[u8],
    driver_in: &[u8],
    resp_ptr: u64,
    core_out_len: usize,
    driver_out_len: usize,
) -> Result<Vec<u8>, Errno> {
    for n in [core_in.len(), driver_in.len(), core_out_len, driver_out_len] {
        if n % 8 != 0 || n / 8 > u16::MAX as usize {
            return Err(Errno::INVAL);
        }
    }
    let hdr = ib_uverbs_cmd_hdr {
        command: command | CMD_FLAG_EXTENDED,
        in_words: (core_in.len() / 8) as u16,
        out_words: (core_out_len / 8) as u16,
    };
    let ex = ib_uverbs_ex_cmd_hdr {
        response: resp_ptr,
        provider_in_words: (driver_in.len() / 8) as u16,
        provider_out_words: (driver_out_len / 8) as u16,
        cmd_hdr_reserved: 0,
    };
    let mut buf = Vec::with_capacity(24 + core_in.len() + driver_in.len());
    buf.extend_from_slice(hdr.as_bytes());
    buf.extend_from_slice(ex.as_bytes());
    buf.extend_from_slice(core_in);
    buf.extend_from_slice(driver_in);
    Ok(buf)
}

/// Sends an extended command; `resp` holds `core_out_len` bytes of core response followed by
/// the driver response.
pub(crate) fn cmd_extended(
    fd: impl AsFd,
    command: u32,
    core_in: &[u8],
    driver_in: &[u8],
    resp: &mut [u8],
    core_out_len: usize,
) -> Result<(), Errno> {
    if core_out_len > resp.len() {
        return Err(Errno::INVAL);
    }
    let driver_out_len = resp.len() - core_out_len;
    let ptr = if resp.is_empty() {
        0
    } else {
        resp.as_mut_ptr() as u64
    };
    let buf = extended_bytes(
        command,
        core_in,
        driver_in,
        ptr,
        core_out_len,
        driver_out_len,
    )?;
    write_all(fd, &buf)
}

/// Writes one command to a uverbs (or ucma) fd and returns the byte count the kernel took.
/// Retries on EINTR.
///
/// Not `rustix::io::write`: rustix declares its write syscall as not modifying memory, but
/// these commands make the kernel write the response through a pointer carried inside `buf`,
/// so the compiler must not assume the response buffer unchanged. On x86-64 Linux this is the
/// `write` system call made directly (an `asm!` block that may read and write any memory, as
/// an opaque call would: a few instructions, where going through the C library and
/// `std::fs::File` costs about a hundred — it is the rxe send doorbell, once per post); on
/// other targets std's `write()`, an opaque call into the C library.
#[inline]
pub(crate) fn cmd_write(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<usize, Errno> {
    loop {
        match sys_write(fd, buf) {
            Err(Errno::INTR) => continue,
            r => return r,
        }
    }
}

/// Sends a legacy command: `core_in` (whose first 8 bytes, if `resp` is not empty, are
/// replaced by `resp`'s address), then `driver_in`; the kernel writes its response into
/// `resp`.
///
/// # Safety
/// The command bytes (core and driver request) are interpreted by the kernel and the driver:
/// every address they carry (the response pointer, and driver fields such as a CQ or QP
/// buffer address, a doorbell record, a user-memory range to pin) must point to memory that
/// is valid for what the kernel and the device do with it — writes of the response during the
/// call, and for buffers handed to the driver, device reads and writes until the kernel
/// object is destroyed — and that Rust does not reference in a way those accesses would
/// break. A command may also change kernel objects that safe rverbs types rely on (destroy a
/// handle an `Mr` or `Qp` owns, move a QP's state); that must not be done behind their back.
pub unsafe fn legacy(
    fd: impl AsFd,
    command: u32,
    core_in: &[u8],
    driver_in: &[u8],
    resp: &mut [u8],
) -> Result<(), Errno> {
    cmd_legacy(fd, command, core_in, driver_in, resp)
}

/// Sends a legacy command whose request and response are plain structs (no driver data).
///
/// # Safety
/// As for [`legacy`].
pub unsafe fn legacy_simple<Req, Resp>(
    fd: impl AsFd,
    command: u32,
    req: &Req,
    resp: &mut Resp,
) -> Result<(), Errno>
where
    Req: IntoBytes + Immutable,
    Resp: IntoBytes + FromBytes,
{
    cmd_legacy_simple(fd, command, req, resp)
}

/// Sends an extended command; `resp` holds `core_out_len` bytes of core response followed by
/// the driver response.
///
/// # Safety
/// As for [`legacy`].
pub unsafe fn extended(
    fd: impl AsFd,
    command: u32,
    core_in: &[u8],
    driver_in: &[u8],
    resp: &mut [u8],
    core_out_len: usize,
) -> Result<(), Errno> {
    cmd_extended(fd, command, core_in, driver_in, resp, core_out_len)
}

/// Writes one command (the bytes of [`legacy_bytes`] / [`extended_bytes`], or a provider's
/// doorbell) to a uverbs fd; see `cmd_write` for why this is not `rustix::io::write`.
///
/// # Safety
/// As for [`legacy`].
#[inline]
pub unsafe fn write_cmd(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<usize, Errno> {
    cmd_write(fd, buf)
}

#[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
#[inline]
fn sys_write(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<usize, Errno> {
    /// `__NR_write` on x86-64.
    const NR_WRITE: usize = 1;
    let ret: isize;
    // SAFETY: write(2) reads `buf.len()` bytes at `buf.as_ptr()`, which `buf` makes valid,
    // from an fd that `fd` keeps open for the call. The command may make the kernel write a
    // response through an address inside `buf`; the caller passes only addresses of live
    // buffers it owns, and this block is declared able to write memory (no `nomem` or
    // `readonly`), so the compiler assumes such buffers changed. `syscall` clobbers rcx and
    // r11 (declared) and does not touch the stack.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") NR_WRITE as isize => ret,
            in("rdi") fd.as_raw_fd(),
            in("rsi") buf.as_ptr(),
            in("rdx") buf.len(),
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    if (-4095..0).contains(&ret) {
        Err(Errno::from_raw_os_error(-ret as i32))
    } else {
        Ok(ret as usize)
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64", not(miri))))]
fn sys_write(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<usize, Errno> {
    use std::fs::File;
    use std::io::Write;
    use std::mem::ManuallyDrop;
    use std::os::fd::FromRawFd;
    // SAFETY: the `File` borrows the raw fd only for this call (while `fd` is borrowed) and
    // is never dropped, so it never closes the fd.
    let mut f = ManuallyDrop::new(unsafe { File::from_raw_fd(fd.as_raw_fd()) });
    f.write(buf)
        .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))
}

fn write_all(fd: impl AsFd, buf: &[u8]) -> Result<(), Errno> {
    // uverbs consumes a command in one write() or fails it; a short count is a protocol error.
    let n = cmd_write(fd.as_fd(), buf)?;
    if n != buf.len() {
        return Err(Errno::IO);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_header_counts_words_and_patches_response() {
        let core = [0u8; 16];
        let b = legacy_bytes(3, &core, &[1, 2, 3, 4], Some(0x1122_3344_5566_7788), 8).unwrap();
        assert_eq!(b.len(), 8 + 16 + 4);
        let hdr = ib_uverbs_cmd_hdr::read_from_bytes(&b[..8]).unwrap();
        assert_eq!((hdr.command, hdr.in_words, hdr.out_words), (3, 7, 2));
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(&b[24..], &[1, 2, 3, 4]);
    }

    #[test]
    fn legacy_rejects_unaligned() {
        assert_eq!(legacy_bytes(3, &[0u8; 6], &[], None, 0), Err(Errno::INVAL));
        assert_eq!(legacy_bytes(3, &[0u8; 8], &[], None, 6), Err(Errno::INVAL));
        assert_eq!(
            legacy_bytes(3, &[0u8; 4], &[], Some(1), 8),
            Err(Errno::INVAL)
        );
    }

    /// `legacy` sends the bytes `legacy_bytes` builds, from the stack for a small command and
    /// from the heap for a large one (written into a socket pair here).
    #[test]
    fn legacy_sends_the_built_bytes() {
        let (mut r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut resp = [0u8; 8];
        for core_len in [16usize, 24, 72] {
            let core: Vec<u8> = (0..core_len as u8).collect();
            cmd_legacy(&w, 9, &core, &[7, 7, 7, 7], &mut resp).unwrap();
            let want =
                legacy_bytes(9, &core, &[7, 7, 7, 7], Some(resp.as_ptr() as u64), 8).unwrap();
            let mut got = vec![0u8; want.len()];
            std::io::Read::read_exact(&mut r, &mut got).unwrap();
            assert_eq!(got, want, "core of {core_len} bytes");
        }
        assert_eq!(
            cmd_legacy(&w, 9, &[0u8; 6], &[], &mut []),
            Err(Errno::INVAL)
        );
    }

    #[test]
    fn extended_header_uses_8_byte_words() {
        let b = extended_bytes(1, &[0u8; 8], &[0u8; 16], 0xabc, 24, 8).unwrap();
        assert_eq!(b.len(), 8 + 16 + 8 + 16);
        let hdr = ib_uverbs_cmd_hdr::read_from_bytes(&b[..8]).unwrap();
        assert_eq!(hdr.command, 1 | CMD_FLAG_EXTENDED);
        assert_eq!((hdr.in_words, hdr.out_words), (1, 3));
        let ex = ib_uverbs_ex_cmd_hdr::read_from_bytes(&b[8..24]).unwrap();
        assert_eq!(ex.response, 0xabc);
        assert_eq!((ex.provider_in_words, ex.provider_out_words), (2, 1));
        assert!(extended_bytes(1, &[0u8; 4], &[], 0, 0, 0).is_err());
    }
}
