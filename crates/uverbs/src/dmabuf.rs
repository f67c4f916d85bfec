//! Memory regions over dma-buf memory (`UVERBS_METHOD_REG_DMABUF_MR`): a GPU's memory, or any
//! other exporter's, registered by file descriptor.
//!
//! # What [`DmabufMr`] promises
//!
//! A dma-buf is memory another driver exports; it need not be CPU memory at all (a GPU's
//! VRAM), and Rust has no pointer to it. So a `DmabufMr` is a registration without memory on
//! the Rust side: it has keys, an iova range and a length, and **no** copy accessors
//! (`read_at`, `write_at`, …) and no safe SGEs ([`crate::wr::MrSge`]): the safe post path
//! copies INLINE sources from an SGE's address as CPU memory, and an iova is not one. SGEs
//! over the region are plain [`Sge`]s ([`DmabufMr::sge`]), posted through the `unsafe`
//! raw paths (`Qp::post_send_raw`, `Qp::post_recv_raw`) whose contract already says INLINE
//! sources must be readable memory of ours. Peers reach the region through its rkey; the
//! device checks every access against the region, as for any MR. This holds even for
//! exporters that allow `mmap` of the dma-buf (udmabuf does): such a mapping is made by the
//! caller, outside this type, and its reads and writes are the caller's to make sound.
//!
//! The fd is only borrowed for the call: the kernel takes its own reference to the dma-buf
//! (and pins or maps what the exporter allows) for as long as the registration lives, so
//! closing the fd afterwards changes nothing and cannot free the memory under the device.
//! Dropping the `DmabufMr` deregisters it (a failure is logged; no Rust memory is involved,
//! so nothing is leaked but the kernel object).
//!
//! # Checks before the kernel
//!
//! The fd must be a dma-buf: its `/proc/self/fdinfo` entry names an exporter (`exp_name`)
//! and a size, and the range `offset..offset+len` must lie inside that size. Where `/proc`
//! cannot be read, the kernel alone judges (it refuses a file that is not a dma-buf and a
//! range past its end with `EINVAL`). These checks give clear errors; soundness does not rest
//! on them (another thread may replace the fd between the check and the call: the kernel's
//! own check is what counts).

use std::fmt;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::kernel::abi::ioctl::object;
use crate::kernel::abi::obj::mr;
use crate::kernel::ioctl::IoctlCall;
use crate::mr::{check_access, AccessFlags, RawMr};
use crate::pd::Pd;
use crate::wr::Sge;

internal! {
/// What a dma-buf's `/proc/self/fdinfo` entry says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmabufInfo {
    /// Size of the buffer in bytes (`size:`).
    pub size: u64,
    /// The exporting driver (`exp_name:`, e.g. `udmabuf`, `amdgpu`).
    pub exporter: String,
}
}

internal! {
/// Parses a `/proc/<pid>/fdinfo/<fd>` text: `Some` when it describes a dma-buf (it has both
/// `size:` and `exp_name:` lines; ordinary files, memfds and sockets have neither).
pub fn parse_fdinfo(text: &str) -> Option<DmabufInfo> {
    let mut size = None;
    let mut exporter = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "size" => size = v.trim().parse::<u64>().ok(),
            "exp_name" => exporter = Some(v.trim().to_string()),
            _ => {}
        }
    }
    Some(DmabufInfo {
        size: size?,
        exporter: exporter?,
    })
}
}

internal! {
/// What the process's `/proc` says about `fd`: `Ok(Some)` a dma-buf, `Err` a description of
/// what the file is instead, `Ok(None)` when `/proc` cannot tell (not mounted).
pub fn dmabuf_info(fd: BorrowedFd<'_>) -> std::result::Result<Option<DmabufInfo>, String> {
    let n = fd.as_raw_fd();
    let text = match std::fs::read_to_string(format!("/proc/self/fdinfo/{n}")) {
        Ok(t) => t,
        Err(_) => return Ok(None),
    };
    if let Some(info) = parse_fdinfo(&text) {
        return Ok(Some(info));
    }
    let what = std::fs::read_link(format!("/proc/self/fd/{n}"))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "a file".to_string());
    Err(format!(
        "fd {n} is not a dma-buf ({what}: its /proc/self/fdinfo names no exporter)"
    ))
}
}

internal! {
/// Checks `offset..offset+len` against a dma-buf of `size` bytes.
pub fn check_range(size: u64, offset: u64, len: usize) -> std::result::Result<(), String> {
    if len == 0 {
        return Err("length 0".into());
    }
    match offset.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        Some(end) => Err(format!(
            "offset {offset} + length {len} = {end} is past the dma-buf's size of {size} bytes"
        )),
        None => Err(format!("offset {offset} + length {len} overflows")),
    }
}
}

internal! {
/// The arguments of a dma-buf registration, as the kernel takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmabufArgs {
    /// Offset of the region in the dma-buf.
    pub offset: u64,
    /// Length of the region in bytes.
    pub length: u64,
    /// The address SGEs and peers use for the region's first byte.
    pub iova: u64,
    /// The dma-buf's file descriptor.
    pub fd: RawFd,
    /// `IB_UVERBS_ACCESS_*` bits.
    pub access: u32,
}
}

internal! {
/// Builds the `REG_DMABUF_MR` call [`DmabufMr::register`] issues, attribute for attribute
/// (the order is libibverbs', so the oracle can compare the bytes): the new MR's IDR, the
/// lkey and rkey outputs, the PD, offset, length, iova, fd and access. Building is safe;
/// issuing it is `IoctlCall::call`'s contract (`kernel::ioctl`). The new handle is read with
/// `IoctlCall::handle` of attribute 0.
pub fn reg_dmabuf_call<'a>(
    pd_handle: u32,
    args: &'a DmabufArgs,
    lkey: &'a mut u32,
    rkey: &'a mut u32,
) -> IoctlCall<'a> {
    let mut c = IoctlCall::new(object::MR, mr::METHOD_REG_DMABUF);
    c.idr_new(mr::ATTR_REG_DMABUF_HANDLE);
    c.ptr_out(mr::ATTR_REG_DMABUF_RESP_LKEY, lkey);
    c.ptr_out(mr::ATTR_REG_DMABUF_RESP_RKEY, rkey);
    c.idr(mr::ATTR_REG_DMABUF_PD_HANDLE, pd_handle);
    c.ptr_in(mr::ATTR_REG_DMABUF_OFFSET, &args.offset);
    c.ptr_in(mr::ATTR_REG_DMABUF_LENGTH, &args.length);
    c.ptr_in(mr::ATTR_REG_DMABUF_IOVA, &args.iova);
    c.ptr_in(mr::ATTR_REG_DMABUF_FD, &args.fd);
    c.ptr_in(mr::ATTR_REG_DMABUF_ACCESS_FLAGS, &args.access);
    c
}
}

/// What the kernel's refusal of a dma-buf registration means, for the error's detail.
fn kernel_refusal(dev: &str, e: Errno) -> Option<String> {
    Some(match e {
        Errno::OPNOTSUPP => format!(
            "{dev} does not support dma-buf memory regions (its kernel driver has no dma-buf \
             registration; rxe and siw have none)"
        ),
        Errno::PROTONOSUPPORT | Errno::NOTTY => {
            "this kernel has no REG_DMABUF_MR method (Linux 5.12 or later has it)".into()
        }
        Errno::BADF => "the kernel found no open file at this fd".into(),
        Errno::INVAL => {
            "the kernel refused the fd, range or access (not a dma-buf, a range past its end, \
             or access the exporter does not allow)"
                .into()
        }
        _ => return None,
    })
}

/// A memory region over a dma-buf: keys and an iova range, no Rust-visible memory (see the
/// [module documentation](self) for what it promises).
pub struct DmabufMr {
    raw: RawMr,
    offset: u64,
    access: AccessFlags,
    exporter: Option<String>,
}

impl fmt::Debug for DmabufMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmabufMr")
            .field("handle", &self.raw.handle())
            .field("offset", &self.offset)
            .field("len", &self.raw.len)
            .field("iova", &format_args!("{:#x}", self.raw.addr))
            .field("lkey", &format_args!("{:#x}", self.raw.lkey))
            .field("rkey", &format_args!("{:#x}", self.raw.rkey))
            .field("access", &self.access)
            .field("exporter", &self.exporter)
            .finish()
    }
}

impl DmabufMr {
    /// Registers `len` bytes at `offset` of the dma-buf `fd` on `pd`, at address `iova` for
    /// SGEs and peers, with `access`.
    ///
    /// The fd is borrowed for the call only (the kernel keeps its own reference to the
    /// buffer). Refused before the kernel sees it: length 0, unknown or inconsistent access
    /// bits, an fd that is not a dma-buf, a range past the buffer's size. A device without
    /// dma-buf support (rxe, siw) fails with `EOPNOTSUPP` and an error saying so. Every error
    /// names the device, the fd and what was wrong; nothing is left registered.
    pub fn register(
        pd: &Arc<Pd>,
        fd: impl AsFd,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<DmabufMr> {
        let fd = fd.as_fd();
        let ctx = pd.context();
        let n = fd.as_raw_fd();
        let op = || {
            format!(
                "register dma-buf MR (fd {n}, offset {offset}, {len} bytes, iova {iova:#x}) on {}",
                ctx.name()
            )
        };
        if len == 0 {
            return Err(Error::invalid(op(), "length 0").into());
        }
        check_access(access).map_err(|d| Error::invalid(op(), d))?;
        let info = dmabuf_info(fd).map_err(|d| Error::invalid(op(), d))?;
        if let Some(info) = &info {
            check_range(info.size, offset, len).map_err(|d| {
                Error::invalid(op(), format!("{d} (exported by {})", info.exporter))
            })?;
        }
        let args = DmabufArgs {
            offset,
            length: len as u64,
            iova,
            fd: n,
            access: access.bits(),
        };
        let (mut lkey, mut rkey) = (0u32, 0u32);
        let mut c = reg_dmabuf_call(pd.handle(), &args, &mut lkey, &mut rkey);
        if let Err(e) = ctx.ioctl(&mut c) {
            let err = Error::os(op(), e);
            return Err(match kernel_refusal(ctx.name(), e) {
                Some(d) => err.with_detail(d),
                None => err,
            }
            .into());
        }
        // The new MR's IDR is the call's first attribute; the kernel wrote its handle there.
        let handle = c.attrs()[0].data as u32;
        if let Some(sinks) = pd.read_sinks() {
            sinks.registered(lkey, access);
        }
        Ok(DmabufMr {
            raw: RawMr::from_parts(pd.clone(), handle, lkey, rkey, iova, len),
            offset,
            access,
            exporter: info.map(|i| i.exporter),
        })
    }

    /// Local key: what SGEs over this region carry.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey
    }
    /// Remote key: what a peer's RDMA READ/WRITE/atomic names.
    pub fn rkey(&self) -> u32 {
        self.raw.rkey
    }
    internal! {
    /// The kernel's handle of the region.
    pub fn handle(&self) -> u32 {
        self.raw.handle()
    }
    }
    /// The address of the region's first byte for SGEs and peers.
    pub fn iova(&self) -> u64 {
        self.raw.iova
    }
    /// The region's offset in the dma-buf.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.raw.len
    }
    /// Always false: a registration has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }
    /// The access the region was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// The exporter `/proc` named at registration (`None` when `/proc` could not be read).
    pub fn exporter(&self) -> Option<&str> {
        self.exporter.as_deref()
    }
    /// The PD the region belongs to.
    pub fn pd(&self) -> &Arc<Pd> {
        self.raw.pd()
    }

    /// A raw SGE over `range` of the region (offsets from its start), `None` when the range
    /// is inverted or reaches past the region's end. It is a plain [`Sge`]: posting it goes through the
    /// `unsafe` raw paths, and never with `SendFlags::INLINE` (its address is an iova, not CPU
    /// memory).
    pub fn sge(&self, range: Range<usize>) -> Option<Sge> {
        if range.start > range.end || range.end > self.raw.len {
            return None;
        }
        Some(Sge {
            addr: self.raw.addr.checked_add(range.start as u64)?,
            length: u32::try_from(range.end - range.start).ok()?,
            lkey: self.raw.lkey,
        })
    }

    /// Deregisters the region; on failure gives it back, still registered, with the error.
    pub fn deregister(self) -> std::result::Result<(), (DmabufMr, std::io::Error)> {
        let DmabufMr {
            raw,
            offset,
            access,
            exporter,
        } = self;
        raw.deregister().map_err(|(raw, e)| {
            (
                DmabufMr {
                    raw,
                    offset,
                    access,
                    exporter,
                },
                e,
            )
        })
    }

    /// The registration as a [`RawMr`] (what the C drop-in keeps): same keys, `addr` is the
    /// iova. Dropping it deregisters.
    pub fn into_raw(self) -> RawMr {
        self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UDMABUF: &str = "pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1063\nsize:\t8192\n\
                           count:\t1\nexp_name:\tudmabuf\nname:\t\n";
    const MEMFD: &str = "pos:\t0\nflags:\t0100002\nmnt_id:\t1\nino:\t2048\n";

    #[test]
    fn fdinfo_of_a_dmabuf_and_of_other_files() {
        assert_eq!(
            parse_fdinfo(UDMABUF),
            Some(DmabufInfo {
                size: 8192,
                exporter: "udmabuf".into()
            })
        );
        assert_eq!(parse_fdinfo(MEMFD), None);
        assert_eq!(parse_fdinfo("size:\t10\n"), None, "no exporter");
        assert_eq!(parse_fdinfo("exp_name:\tx\n"), None, "no size");
        assert_eq!(parse_fdinfo("size:\tlots\nexp_name:\tx\n"), None);
        assert_eq!(parse_fdinfo(""), None);
    }

    #[test]
    fn ranges_are_checked_against_the_size() {
        assert!(check_range(8192, 0, 8192).is_ok());
        assert!(check_range(8192, 4096, 4096).is_ok());
        let e = check_range(8192, 4096, 4097).unwrap_err();
        assert!(e.contains("8193") && e.contains("8192"), "{e}");
        assert_eq!(check_range(8192, 0, 0).unwrap_err(), "length 0");
        let e = check_range(u64::MAX, u64::MAX, 1).unwrap_err();
        assert!(e.contains("overflows"), "{e}");
    }

    /// A real file of this process (not a dma-buf) is named as such, with what it is.
    #[test]
    fn a_plain_file_is_not_a_dmabuf() {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        match dmabuf_info(f.as_fd()) {
            Err(e) => assert!(
                e.contains(&format!("fd {} is not a dma-buf", f.as_raw_fd())),
                "{e}"
            ),
            Ok(None) => {} // no /proc: nothing to say
            Ok(Some(i)) => panic!("a plain file read as a dma-buf: {i:?}"),
        }
    }

    /// Each refusal the kernel can give says what it means; other errnos stay bare.
    #[test]
    fn kernel_refusals_are_explained() {
        let t = |e| kernel_refusal("rxe0", e).unwrap();
        assert!(t(Errno::OPNOTSUPP).starts_with("rxe0 does not support dma-buf memory regions"));
        assert!(t(Errno::PROTONOSUPPORT).contains("no REG_DMABUF_MR method"));
        assert!(t(Errno::NOTTY).contains("no REG_DMABUF_MR method"));
        assert!(t(Errno::BADF).contains("no open file"));
        assert!(t(Errno::INVAL).contains("not a dma-buf"));
        assert_eq!(kernel_refusal("rxe0", Errno::NOMEM), None);
    }

    /// The call carries libibverbs' attributes in its order, each of the kernel's kind: the
    /// fd and access as 4-byte PTR_INs (the kernel's RAW_FD and FLAGS_IN), the 64-bit
    /// values inline, lkey and rkey as 4-byte outputs.
    #[test]
    fn the_call_is_the_kernels_method() {
        let args = DmabufArgs {
            offset: 0x1000,
            length: 0x2000,
            iova: 0xdead_0000,
            fd: 7,
            access: 7,
        };
        let (mut l, mut r) = (0, 0);
        let mut c = reg_dmabuf_call(3, &args, &mut l, &mut r);
        let h = c.header(1);
        assert_eq!((h.object_id, h.method_id, h.num_attrs), (7, 4, 9));
        let got: Vec<(u16, u16)> = c.attrs().iter().map(|a| (a.attr_id, a.len)).collect();
        assert_eq!(
            got,
            [
                (0, 0),
                (7, 4),
                (8, 4),
                (1, 0),
                (2, 8),
                (3, 8),
                (4, 8),
                (5, 4),
                (6, 4)
            ]
        );
        let data: Vec<u64> = c.attrs()[3..].iter().map(|a| a.data).collect();
        assert_eq!(data, [3, 0x1000, 0x2000, 0xdead_0000, 7, 7]);
    }
}
