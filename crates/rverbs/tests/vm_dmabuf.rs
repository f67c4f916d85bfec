//! dma-buf memory regions (`DmabufMr`) on rxe, which has no dma-buf support: files that are
//! not dma-bufs and ranges past a dma-buf's end are refused before the kernel with errors
//! naming the device, the fd and what is wrong; a genuine dma-buf (from the kernel's
//! `udmabuf` driver: a sealed memfd turned into a dma-buf) reaches the kernel, which refuses
//! it, and the error says that the device does not support dma-buf regions. Nothing is left
//! registered and no fd leaks. Runs in the VM.
//!
//! `udmabuf`: built into Debian's 6.12 kernel (trixie); bookworm's 6.1 is configured without
//! it (`# CONFIG_UDMABUF is not set`, no dma-buf heaps either), so there the kernel's answer to
//! the method itself is checked with a raw call instead.

mod common;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use common::*;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::io::Errno;
use rverbs::uverbs::dmabuf::{dmabuf_info, DmabufMr};
use rverbs::uverbs::mr::AccessFlags;
use rverbs::uverbs::netlink::RdmaNetlink;
use rverbs::uverbs::pd::Pd;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn kernel_mrs(dev: &str) -> u64 {
    let mut nl = RdmaNetlink::open().unwrap();
    let d = nl.device_by_name(dev, "dma-buf test").unwrap();
    let m: HashMap<String, u64> = nl.resource_summary(d.index).unwrap().into_iter().collect();
    m["mr"]
}

/// A memfd of `len` bytes with `F_SEAL_SHRINK`, as udmabuf requires.
fn sealed_memfd(len: u64) -> OwnedFd {
    let fd = rustix::fs::memfd_create(
        "rverbs-dmabuf",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
    fd
}

/// `struct udmabuf_create` of `linux/udmabuf.h`.
#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}

/// `UDMABUF_CREATE`: `_IOW('u', 0x42, struct udmabuf_create)`; returns the new dma-buf fd.
struct Create(UdmabufCreate);

// SAFETY: UDMABUF_CREATE reads a `struct udmabuf_create` at the pointer and writes nothing
// back (IS_MUTATING false); its return value is the new fd, handed over as an owned fd below.
unsafe impl rustix::ioctl::Ioctl for Create {
    type Output = RawFd;
    const IS_MUTATING: bool = false;
    fn opcode(&self) -> rustix::ioctl::Opcode {
        rustix::ioctl::opcode::write::<UdmabufCreate>(b'u', 0x42)
    }
    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        (&mut self.0 as *mut UdmabufCreate).cast()
    }
    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut std::ffi::c_void,
    ) -> rustix::io::Result<RawFd> {
        Ok(out)
    }
}

/// A dma-buf of `len` bytes from `/dev/udmabuf`, or `None` where the kernel has no udmabuf.
fn udmabuf(len: u64) -> Option<OwnedFd> {
    let dev = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/udmabuf")
    {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return None,
        Err(e) => panic!("/dev/udmabuf: {e}"),
    };
    let memfd = sealed_memfd(len);
    let req = Create(UdmabufCreate {
        memfd: memfd.as_raw_fd() as u32,
        flags: 1, // UDMABUF_FLAGS_CLOEXEC
        offset: 0,
        size: len,
    });
    // SAFETY: the ioctl is UDMABUF_CREATE on the udmabuf device with a valid request.
    let fd = unsafe { rustix::ioctl::ioctl(&dev, req) }.expect("UDMABUF_CREATE");
    assert!(fd >= 0);
    // SAFETY: the kernel just created this fd for us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

/// Files that are not dma-bufs, an empty range and bad access bits: refused before the
/// kernel, each error naming the device, the fd and what is wrong; nothing registered or
/// leaked.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn not_a_dmabuf_is_refused_before_the_kernel() {
    let _serial = serial();
    let dev = dev_name();
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let mrs = kernel_mrs(&dev);
    let fds = fd_count();
    let memfd = sealed_memfd(8192);
    let n = memfd.as_raw_fd();
    let e = DmabufMr::register(&pd, &memfd, 0, 4096, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
    let m = e.to_string();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{m}");
    assert!(m.contains(&dev), "{m}");
    assert!(m.contains(&format!("fd {n} is not a dma-buf")), "{m}");
    assert!(m.contains("memfd:rverbs-dmabuf"), "{m}");

    let file = std::fs::File::open("/proc/self/exe").unwrap();
    let e = DmabufMr::register(&pd, &file, 0, 4096, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("fd {} is not a dma-buf", file.as_raw_fd())),
        "{e}"
    );

    let e = DmabufMr::register(&pd, &memfd, 0, 0, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert!(e.to_string().contains("length 0"), "{e}");
    let e = DmabufMr::register(&pd, &memfd, 0, 4096, 0, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert!(e.to_string().contains("LOCAL_WRITE"), "{e}");

    drop((memfd, file));
    assert_eq!(kernel_mrs(&dev), mrs, "no MR left");
    assert_eq!(fd_count(), fds, "no fd leaked");
}

/// A genuine dma-buf: checked against its size first, then refused by rxe with an error
/// that says the device does not support dma-buf regions. Where the kernel has no udmabuf
/// (6.1), the kernel's answer to the method on rxe is checked with a raw call.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rxe_refuses_dmabuf_regions() {
    let _serial = serial();
    let dev = dev_name();
    let ctx = ctx();
    let pd = Pd::alloc(&ctx).unwrap();
    let mrs = kernel_mrs(&dev);
    let fds = fd_count();
    let Some(buf) = udmabuf(8192) else {
        let release = kernel_release();
        assert!(
            release.starts_with("6.1."),
            "no /dev/udmabuf on {release}: only bookworm's 6.1 is built without it"
        );
        raw_call_is_refused(&ctx, &pd);
        assert_eq!(kernel_mrs(&dev), mrs, "no MR left");
        return;
    };
    let info = dmabuf_info(buf.as_fd()).unwrap().expect("/proc says");
    assert_eq!((info.size, info.exporter.as_str()), (8192, "udmabuf"));
    let n = buf.as_raw_fd();

    let e = DmabufMr::register(&pd, &buf, 4096, 8192, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
    let m = e.to_string();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{m}");
    assert!(m.contains(&dev) && m.contains(&format!("fd {n}")), "{m}");
    assert!(m.contains("past the dma-buf's size of 8192 bytes"), "{m}");
    assert!(m.contains("udmabuf"), "{m}");

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let e = DmabufMr::register(&pd, &buf, 0, 8192, 0x10_0000, access).unwrap_err();
    let m = e.to_string();
    assert_eq!(
        rverbs::uverbs::Error::errno_of(&e),
        Some(Errno::OPNOTSUPP),
        "{m}"
    );
    assert!(
        m.contains(&format!("{dev} does not support dma-buf memory regions")),
        "{m}"
    );
    assert!(m.contains(&format!("register dma-buf MR (fd {n}")), "{m}");
    drop(buf);
    assert_eq!(kernel_mrs(&dev), mrs, "no MR left");
    assert_eq!(fd_count(), fds, "no fd leaked");
}

/// 6.1 without udmabuf: the REG_DMABUF_MR method exists and rxe answers EOPNOTSUPP, the
/// errno `DmabufMr::register` turns into "does not support dma-buf memory regions".
fn raw_call_is_refused(ctx: &rverbs::uverbs::context::Context, pd: &Pd) {
    use rverbs::uverbs::dmabuf::{reg_dmabuf_call, DmabufArgs};
    let memfd = sealed_memfd(4096);
    let args = DmabufArgs {
        offset: 0,
        length: 4096,
        iova: 0,
        fd: memfd.as_raw_fd(),
        access: AccessFlags::LOCAL_WRITE.bits(),
    };
    let (mut l, mut r) = (0, 0);
    let mut c = reg_dmabuf_call(pd.handle(), &args, &mut l, &mut r);
    let driver = ctx.device().driver_id().0;
    // SAFETY: the call is built by reg_dmabuf_call (the kernel's attribute kinds, outputs into
    // live u32s) and creates an MR at most, which this test would leak, nothing it owns.
    let res = unsafe { c.call(ctx.cmd_fd(), driver) };
    assert_eq!(res, Err(Errno::OPNOTSUPP), "rxe on {}", kernel_release());
}
