//! A device context: the open `/dev/infiniband/uverbsN`, its async event fd, and the choice
//! between an ioctl method and its write() fallback that every query and object makes. The
//! queries themselves live with what they answer: [`Context::query_device`] in
//! [`device_attr`](crate::device_attr), [`Context::query_port`] in [`port`](crate::port),
//! [`Context::query_gid_table`] and [`Context::query_gid`] in [`gid`](crate::gid).
//!
//! Which ABI each operation speaks (rdma-core's order; see docs/abi.md):
//!
//! | operation        | first try                              | fallback                     |
//! |------------------|----------------------------------------|------------------------------|
//! | open context     | ioctl `DEVICE/GET_CONTEXT`             | write `GET_CONTEXT` (0)      |
//! | async event fd   | ioctl `ASYNC_EVENT/ALLOC`              | (write path returns it)      |
//! | query device     | extended write `QUERY_DEVICE`          | legacy write `QUERY_DEVICE`  |
//! | query port       | ioctl `DEVICE/QUERY_PORT`              | write `QUERY_PORT` (2)       |
//! | GID table        | ioctl `DEVICE/QUERY_GID_TABLE`         | sysfs `gids/`, `gid_attrs/`  |
//! | one GID          | ioctl `DEVICE/QUERY_GID_ENTRY`         | sysfs                        |
//! | create CQ        | ioctl `CQ/CREATE`                      | write `CREATE_CQ` (18)       |
//! | create QP        | ioctl `QP/CREATE`                      | write `CREATE_QP` (24)       |
//! | destroy PD/MR    | ioctl `PD/DESTROY`, `MR/DESTROY`       | write `DEALLOC_PD` (4), `DEREG_MR` (13) |
//! | destroy CQ/QP    | ioctl `CQ/DESTROY`, `QP/DESTROY`       | write `DESTROY_CQ` (20), `DESTROY_QP` (27) |
//! | destroy SRQ/AH   | ioctl `SRQ/DESTROY`, `AH/DESTROY`      | write `DESTROY_SRQ` (35), `DESTROY_AH` (8) |
//!
//! An ioctl failing with `ENOTTY` means the kernel has no ioctl interface at all; with
//! `EPROTONOSUPPORT` that this method is missing. Both switch to the fallback (and remember
//! it); any other error is the answer.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use zerocopy::{FromBytes, IntoBytes};

use crate::device::{Device, DriverId};
use crate::driver::Driver;
use crate::error::Error;
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::device::{ib_uverbs_get_context, ib_uverbs_get_context_resp};
use crate::kernel::abi::ioctl::{object, UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT};
use crate::kernel::abi::obj::{ah, async_event, cq, device as dev_m, mr, mw, pd, qp, srq};
use crate::kernel::ioctl::{Answer, IoctlCall};
use crate::kernel::write;

/// Declares the ioctl methods that have a write() command (or another fallback) doing the
/// same, each once with its object and method ids (from the object's module of the kernel
/// ABI, `kernel::abi::obj::<object>`, beside its write() structures): the enum [`Method`], its ids, and the list of all
/// (for the tests). A method's bit in [`Context`]'s `no_ioctl` mask is its place in the
/// declaration, so adding a verbs object with both paths is one line here and one
/// [`Context::ioctl_or_write`] call.
macro_rules! methods {
    ($($(#[$d:meta])* $v:ident = ($object:expr, $method:expr),)*) => {
        /// An ioctl method with a fallback (see `methods!`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Method {
            $($(#[$d])* $v,)*
        }

        impl Method {
            /// Every method, in declaration order.
            #[cfg(test)]
            const ALL: &'static [Method] = &[$(Method::$v,)*];

            /// How many there are.
            const COUNT: u32 = [$(Method::$v,)*].len() as u32;

            /// The (object, method) ids of the ioctl.
            const fn ids(self) -> (u16, u16) {
                match self {
                    $(Method::$v => ($object, $method),)*
                }
            }
        }
    };
}

methods! {
    /// `QUERY_PORT` (write: `QUERY_PORT`).
    QueryPort = (object::DEVICE, dev_m::METHOD_QUERY_PORT),
    /// `QUERY_GID_TABLE` (fallback: sysfs).
    GidTable = (object::DEVICE, dev_m::METHOD_QUERY_GID_TABLE),
    /// `QUERY_GID_ENTRY` (fallback: sysfs).
    GidEntry = (object::DEVICE, dev_m::METHOD_QUERY_GID_ENTRY),
    /// `CQ_CREATE` (write: `CREATE_CQ`/`CREATE_CQ_EX`).
    CreateCq = (object::CQ, cq::METHOD_CREATE),
    /// `QP_CREATE` (write: `CREATE_QP`).
    CreateQp = (object::QP, qp::METHOD_CREATE),
    /// `PD_DESTROY` (write: `DEALLOC_PD`).
    DestroyPd = (object::PD, pd::METHOD_DESTROY),
    /// `MR_DESTROY` (write: `DEREG_MR`).
    DestroyMr = (object::MR, mr::METHOD_DESTROY),
    /// `CQ_DESTROY` (write: `DESTROY_CQ`).
    DestroyCq = (object::CQ, cq::METHOD_DESTROY),
    /// `QP_DESTROY` (write: `DESTROY_QP`).
    DestroyQp = (object::QP, qp::METHOD_DESTROY),
    /// `SRQ_DESTROY` (write: `DESTROY_SRQ`).
    DestroySrq = (object::SRQ, srq::METHOD_DESTROY),
    /// `AH_DESTROY` (write: `DESTROY_AH`).
    DestroyAh = (object::AH, ah::METHOD_DESTROY),
    /// `MW_DESTROY` (write: `DEALLOC_MW`).
    DestroyMw = (object::MW, mw::METHOD_DESTROY),
}

impl Method {
    /// Its bit in the `no_ioctl` mask: its place in the declaration (bit 31 is
    /// [`M_EX_QUERY_DEVICE`]'s).
    const fn bit(self) -> u32 {
        1 << self as u32
    }
}

const _: () = assert!(Method::COUNT < 31, "the no_ioctl mask holds 31 methods");

/// ENOTTY: no ioctl interface at all, so every ioctl method is missing.
const M_ALL: u32 = !M_EX_QUERY_DEVICE;
/// Not an ioctl: the extended write `QUERY_DEVICE` is missing (or the legacy ABI was asked
/// for), use the legacy one.
pub(crate) const M_EX_QUERY_DEVICE: u32 = 1 << 31;

/// Which path a [`Context::ioctl_or_write`] took, with what it brought back.
///
/// 320 bytes when the ioctl did it (the call's attributes): moved once per create or destroy,
/// beside a system call; boxing it would allocate instead.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Via<R, W> {
    /// The ioctl did it: what the kernel wrote into the call's own attributes (a new
    /// object's handle), and what the attribute builder returned (where to read it).
    Ioctl(Answer, R),
    /// The method is missing; the fallback did it and returned this.
    Write(W),
}

/// An open device: the uverbs command fd with its user context, and the async event fd.
/// Closing it (drop) destroys the context and everything created in it.
///
/// # Soundness
///
/// A `Context` owns two fds and lends them only as [`BorrowedFd`]s, so safe code can neither
/// close them nor make them outlive it. The command fd is the device node sysfs names, opened
/// and `fstat`ed before the first command: it must be the character device whose number sysfs
/// gives, so the write() commands that make the kernel write responses into our memory go to
/// the uverbs driver and nowhere else. The async event fd comes from the kernel's answer,
/// pre-set to -1 and validated before it becomes an `OwnedFd` (docs/architecture.md, "File
/// descriptors"). Which sysfs tree is read is not a safe choice (`device::Sysfs::at`
/// is `unsafe`). The attached driver (`driver::Driver`, the provider seam) is reached through `Context::driver`, whose methods
/// that map or trust kernel answers are `unsafe`.
#[derive(Debug)]
pub struct Context {
    device: Device,
    cmd_fd: OwnedFd,
    async_fd: OwnedFd,
    num_comp_vectors: u32,
    core_support: u64,
    /// ioctl methods (and the extended `QUERY_DEVICE`) known to be missing (bits `M_*`), so
    /// later calls go straight to the fallback, as rdma-core remembers them.
    pub(crate) no_ioctl: AtomicU32,
    /// The provider's per-context driver, attached once by the provider that opened us.
    driver: OnceLock<Box<dyn Driver>>,
    /// Device limits used to check object sizes before the kernel sees them.
    limits: OnceLock<Option<Limits>>,
}

internal! {
/// The device limits objects are checked against (from [`Context::query_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most work requests per queue of a QP.
    pub max_qp_wr: u32,
    /// Most SGEs per work request.
    pub max_sge: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most work requests per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// The extended capability bits (FLUSH, ATOMIC_WRITE: [`OpSet`](crate::OpSet)).
    pub device_cap_flags_ex: crate::op::DeviceCapsEx,
    /// On-demand paging at all, implicit regions (what a registration with
    /// `AccessFlags::ON_DEMAND` is checked against).
    pub odp_general_caps: crate::values::OdpGeneralCaps,
}
}

impl Context {
    /// Opens `dev` without driver data (enough for rxe; siw needs room for its response).
    pub fn open(dev: &Device) -> io::Result<Context> {
        Self::open_with_udata(dev, &[], &mut [])
    }

    internal! {
    /// Opens `dev`, passing the provider's `alloc_ucontext` request (`uhw_in`) and receiving
    /// its response (`uhw_out`, filled by the kernel). With the write fallback both lengths
    /// must be multiples of 4.
    pub fn open_with_udata(dev: &Device, uhw_in: &[u8], uhw_out: &mut [u8]) -> io::Result<Context> {
        Self::open_impl(dev, uhw_in, uhw_out, false)
    }
    }

    internal! {
    /// Opens `dev` speaking only what the oldest uverbs kernels have: write `GET_CONTEXT`,
    /// legacy write `QUERY_DEVICE` and `QUERY_PORT`, GIDs from sysfs, and the write commands
    /// that create CQs and QPs and destroy every object. It exists to test the
    /// fallback paths against a kernel that has the new ones.
    #[doc(hidden)]
    pub fn open_legacy_abi(dev: &Device) -> io::Result<Context> {
        Self::open_impl(dev, &[], &mut [], true)
    }
    }

    fn open_impl(
        dev: &Device,
        uhw_in: &[u8],
        uhw_out: &mut [u8],
        legacy: bool,
    ) -> io::Result<Context> {
        let path = dev.dev_path();
        let cmd_fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).map_err(|e| {
            let err = Error::os(format!("open {}", dev.name()), e).with_detail(path.display().to_string());
            match e {
                Errno::NOENT => err.with_detail(
                    "the char device does not exist (is devtmpfs mounted on /dev? is ib_uverbs loaded?)",
                ),
                Errno::ACCESS | Errno::PERM => {
                    err.with_detail("no permission (RDMA char devices are usually root or group rdma)")
                }
                _ => err,
            }
        })?;
        check_device_node(dev, &cmd_fd)?;
        let op = || format!("open context on {}", dev.name());
        let driver_id = dev.driver_id().0;

        let mut num_comp_vectors = 0u32;
        let mut core_support = 0u64;
        let r = if legacy {
            Err(Errno::NOTTY)
        } else {
            let mut c = IoctlCall::new(object::DEVICE, dev_m::METHOD_GET_CONTEXT);
            c.ptr_out(
                dev_m::ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
                &mut num_comp_vectors,
            );
            c.ptr_out(dev_m::ATTR_GET_CONTEXT_CORE_SUPPORT, &mut core_support);
            if !uhw_in.is_empty() {
                c.ptr_in_bytes(UVERBS_ATTR_UHW_IN, uhw_in);
            }
            if !uhw_out.is_empty() {
                c.ptr_out_bytes(UVERBS_ATTR_UHW_OUT, &mut *uhw_out);
            }
            c.call_checked(&cmd_fd, driver_id)
        };
        let (async_fd, no_ioctl) = match r {
            Ok(()) => {
                let mut c = IoctlCall::new(object::ASYNC_EVENT, async_event::METHOD_ALLOC);
                let i = c.fd_new(async_event::ATTR_ALLOC_FD_HANDLE);
                c.call_checked(&cmd_fd, driver_id).map_err(|e| {
                    Error::os(format!("create async event fd on {}", dev.name()), e)
                })?;
                // SAFETY: the FD-out attribute of a successful ASYNC_EVENT/ALLOC on the
                // uverbs device check_device_node verified: a new fd the kernel installed.
                let fd = unsafe { kernel_fd(c.new_fd(i) as u32, cmd_fd.as_fd()) }.map_err(|d| {
                    Error::protocol(format!("create async event fd on {}", dev.name()), d)
                })?;
                (fd, 0)
            }
            Err(e @ (Errno::NOTTY | Errno::PROTONOSUPPORT)) => {
                tracing::debug!("GET_CONTEXT ioctl: {e}; using the write() command");
                let mut resp = vec![0u8; size_of::<ib_uverbs_get_context_resp>() + uhw_out.len()];
                // The fd field starts as FD_NOT_WRITTEN: a write that "succeeds" without a
                // response must not read as fd 0.
                let pre = ib_uverbs_get_context_resp {
                    async_fd: FD_NOT_WRITTEN,
                    num_comp_vectors: 0,
                };
                resp[..size_of::<ib_uverbs_get_context_resp>()].copy_from_slice(pre.as_bytes());
                let req = ib_uverbs_get_context::default();
                write::cmd_legacy(&cmd_fd, nr::GET_CONTEXT, req.as_bytes(), uhw_in, &mut resp)
                    .map_err(|e| Error::os(op(), e).with_detail("write GET_CONTEXT"))?;
                let (core, drv) = resp.split_at(size_of::<ib_uverbs_get_context_resp>());
                let core = ib_uverbs_get_context_resp::read_from_bytes(core).expect("sized above");
                uhw_out.copy_from_slice(drv);
                num_comp_vectors = core.num_comp_vectors;
                // SAFETY: the response of a successful legacy GET_CONTEXT on the uverbs
                // device check_device_node verified: the kernel installs a new async event fd
                // and names it here.
                let fd = unsafe { kernel_fd(core.async_fd, cmd_fd.as_fd()) }
                    .map_err(|d| Error::protocol(op(), format!("write GET_CONTEXT: {d}")))?;
                let no_ioctl = match (legacy, e) {
                    (true, _) => M_ALL | M_EX_QUERY_DEVICE,
                    (false, Errno::NOTTY) => M_ALL,
                    (false, _) => 0,
                };
                (fd, no_ioctl)
            }
            Err(e) => {
                return Err(Error::os(op(), e)
                    .with_detail(format!(
                        "driver {} ({})",
                        dev.driver_id(),
                        dev.driver_id().0
                    ))
                    .into())
            }
        };
        // Non-blocking, so that an event loop can read it to EAGAIN (see try_get_async_event);
        // get_async_event polls before reading.
        crate::kernel::fd::set_nonblocking(&async_fd, true)
            .map_err(|e| Error::os("make the async event fd non-blocking", e))?;
        Ok(Context {
            device: dev.clone(),
            cmd_fd,
            async_fd,
            num_comp_vectors,
            core_support,
            no_ioctl: AtomicU32::new(no_ioctl),
            driver: OnceLock::new(),
            limits: OnceLock::new(),
        })
    }

    /// The device this context is open on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's name, e.g. "rxe0".
    pub fn name(&self) -> &str {
        self.device.name()
    }

    /// Completion vectors the device offers.
    pub fn num_comp_vectors(&self) -> u32 {
        self.num_comp_vectors
    }

    internal! {
    /// `IB_UVERBS_CORE_SUPPORT_*` bits (0 after the write fallback).
    pub fn core_support(&self) -> u64 {
        self.core_support
    }
    }

    internal! {
    /// The async event fd (port and QP events are read from it), non-blocking. Readiness
    /// protocol: when it is readable, call [`Context::try_get_async_event`] until `None`;
    /// only then wait again.
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.async_fd.as_fd()
    }
    }

    internal! {
    /// Attaches the provider's driver (done once, by the provider that opened the context).
    ///
    /// # Safety
    /// `driver` must be the provider for this context's device (its kernel driver id and ABI
    /// version): its data path writes the rings and doorbells the kernel driver mapped and
    /// trusts their layout, so a driver for another device (rxe's data path on an mlx5
    /// context) would read and write memory by the wrong layout.
    pub unsafe fn set_driver(&self, driver: Box<dyn Driver>) -> io::Result<()> {
        self.driver.set(driver).map_err(|d| {
            Error::invalid(
                format!("attach provider to {}", self.name()),
                format!("a {} driver is attached already", d.name()),
            )
            .into()
        })
    }
    }

    internal! {
    /// The provider's driver. A context opened without a provider (plain
    /// [`Context::open`]) can query the device but not create CQs, QPs, SRQs or AHs.
    ///
    /// Only the driver's queries are safe to call; its create methods are `unsafe fn`s
    /// (the provider maps what their kernel responses name: see `rverbs_uverbs::driver`).
    pub fn driver(&self) -> io::Result<&dyn Driver> {
        self.driver.get().map(|d| d.as_ref()).ok_or_else(|| {
            Error::unsupported(
                format!("use {} for data-path objects", self.name()),
                format!(
                    "the context was opened without a provider for driver {}: open it with \
                     rverbs_provider::open",
                    self.driver_id()
                ),
            )
            .into()
        })
    }
    }

    /// The device limits (queried once; `None` if the query failed).
    pub(crate) fn cached_limits(&self) -> Option<&Limits> {
        self.limits
            .get_or_init(|| {
                self.query_device().ok().map(|a| Limits {
                    max_qp_wr: a.max_qp_wr,
                    max_sge: a.max_sge,
                    max_cqe: a.max_cqe,
                    max_srq_wr: a.max_srq_wr,
                    max_srq_sge: a.max_srq_sge,
                    device_cap_flags_ex: crate::op::DeviceCapsEx(a.device_cap_flags_ex),
                    odp_general_caps: a.odp_caps.general_caps,
                })
            })
            .as_ref()
    }

    /// The device's max_cqe, when known.
    pub(crate) fn cached_max_cqe(&self) -> Option<u32> {
        self.cached_limits().map(|l| l.max_cqe)
    }

    internal! {
    /// The uverbs command fd (ioctl, write commands, mmap of provider queues).
    #[inline]
    pub fn cmd_fd(&self) -> BorrowedFd<'_> {
        self.cmd_fd.as_fd()
    }
    }

    /// The device's driver id (sent in every ioctl header).
    pub(crate) fn driver_id(&self) -> DriverId {
        self.device.driver_id()
    }

    /// Issues `call` on this context's command fd.
    pub(crate) fn ioctl(&self, call: &mut IoctlCall) -> Result<(), Errno> {
        call.call_checked(self.cmd_fd(), self.driver_id().0)
    }

    /// Runs `method` as an ioctl unless the kernel is known to lack it, and otherwise (or
    /// when this ioctl says the method is missing) its fallback; the one place that decides.
    ///
    /// `attrs` adds the call's attributes; `write` is the fallback (usually the legacy write()
    /// command). Buffers both paths fill (responses, driver data) live in `bufs`, lent to one
    /// path at a time: the ioctl's attributes borrow them for the call only, so `write` and
    /// the caller can use them afterwards. An ioctl failing with `ENOTTY` (no ioctl interface:
    /// every method is remembered as missing) or `EPROTONOSUPPORT` (this method is missing,
    /// remembered) runs `write`; any other error is returned as the answer.
    ///
    /// What the attributes point to is in `bufs` or outlives the borrows `bufs` holds: when
    /// `B` holds none (a plain response struct) the compiler asks a captured local to be
    /// `'static`; put such a value in `bufs` too (`&mut (resp, flags)`).
    pub(crate) fn ioctl_or_write<B: ?Sized, R, W>(
        &self,
        method: Method,
        bufs: &mut B,
        attrs: impl for<'b> FnOnce(&mut IoctlCall<'b>, &'b mut B) -> R,
        write: impl FnOnce(&mut B) -> Result<W, Errno>,
    ) -> Result<Via<R, W>, Errno> {
        ioctl_or_write(
            &self.no_ioctl,
            |c| self.ioctl(c),
            method,
            bufs,
            attrs,
            write,
        )
    }
}

/// [`Context::ioctl_or_write`] over a `no_ioctl` mask and a way to issue the call (the
/// context's command fd, or a test's kernel).
fn ioctl_or_write<B: ?Sized, R, W>(
    no_ioctl: &AtomicU32,
    issue: impl FnOnce(&mut IoctlCall<'_>) -> Result<(), Errno>,
    method: Method,
    bufs: &mut B,
    attrs: impl for<'b> FnOnce(&mut IoctlCall<'b>, &'b mut B) -> R,
    write: impl FnOnce(&mut B) -> Result<W, Errno>,
) -> Result<Via<R, W>, Errno> {
    // Relaxed: the mask is a cache of what the kernel answered; a stale read only costs one
    // more ioctl that fails the same way.
    if no_ioctl.load(Ordering::Relaxed) & method.bit() == 0 {
        let (object, id) = method.ids();
        let mut c = IoctlCall::new(object, id);
        let r = attrs(&mut c, bufs);
        match issue(&mut c) {
            Ok(()) => return Ok(Via::Ioctl(c.answer(), r)),
            Err(Errno::NOTTY) => {
                no_ioctl.fetch_or(M_ALL, Ordering::Relaxed);
            }
            Err(Errno::PROTONOSUPPORT) => {
                no_ioctl.fetch_or(method.bit(), Ordering::Relaxed);
            }
            Err(e) => return Err(e),
        }
    }
    write(bufs).map(Via::Write)
}

/// What a response field that names an fd is set to before the command: -1, never an fd.
/// Still there after a command that "succeeded", the kernel did not write the response.
pub(crate) const FD_NOT_WRITTEN: u32 = u32::MAX;

/// Checks that the file `cmd_fd` opened for `dev` is the character device whose number
/// sysfs gives (`dev`), so that a file that merely sits where the device node should be (a
/// fake tree, a plain file, `/dev/null`) never gets a command written to it or an fd taken
/// from its answers. The error names the device, the path and what the file is.
fn check_device_node(dev: &Device, cmd_fd: &OwnedFd) -> io::Result<()> {
    let path = dev.dev_path().display();
    let op = || format!("open {}", dev.name());
    let st = rustix::fs::fstat(cmd_fd)
        .map_err(|e| Error::os(op(), e).with_detail(format!("fstat {path}")))?;
    let kind = FileType::from_raw_mode(st.st_mode);
    let Some((major, minor)) = dev.dev_t() else {
        return Err(Error::protocol(
            op(),
            format!(
                "sysfs gives no device number (`dev`) for uverbs{}, so {path} cannot be checked",
                dev.uverbs_index()
            ),
        )
        .into());
    };
    if kind == FileType::CharacterDevice && st.st_rdev == rustix::fs::makedev(major, minor) {
        return Ok(());
    }
    let is = if kind == FileType::CharacterDevice {
        format!(
            "the character device {}:{}",
            rustix::fs::major(st.st_rdev),
            rustix::fs::minor(st.st_rdev)
        )
    } else {
        format!("a {kind:?} (not a character device)")
    };
    Err(Error::protocol(
        op(),
        format!("{path} is {is}, not the uverbs character device {major}:{minor} that sysfs gives"),
    )
    .into())
}

/// Takes ownership of an fd a kernel response names, after checking that the kernel wrote
/// it (not [`FD_NOT_WRITTEN`]), that it is an fd number (non-negative) and not the command
/// fd itself. Returns what was wrong otherwise (the caller names the operation).
///
/// # Safety
/// `raw` must come from the response of a successful command on `cmd_fd`, a file checked
/// by [`check_device_node`], which installs a new fd and names it there (the field pre-set
/// to [`FD_NOT_WRITTEN`] for commands that answer through a response buffer): a number the
/// kernel has just given us alone.
pub(crate) unsafe fn kernel_fd(
    raw: u32,
    cmd_fd: BorrowedFd<'_>,
) -> std::result::Result<OwnedFd, String> {
    if raw == FD_NOT_WRITTEN {
        return Err(
            "the command succeeded but the kernel wrote no fd into the response (is the \
                    device node a uverbs device?)"
                .into(),
        );
    }
    let fd = raw as RawFd;
    if fd < 0 {
        return Err(format!("the response names fd {fd}, which is no fd"));
    }
    if fd == cmd_fd.as_raw_fd() {
        return Err(format!("the response names fd {fd}, the command fd itself"));
    }
    // SAFETY: a new fd the kernel installed for us (the caller's contract), checked above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response field the kernel did not write, a negative number and the command fd
    /// itself are refused, and nothing is taken over (the command fd stays open).
    #[test]
    fn kernel_fds_are_validated() {
        let cmd = std::fs::File::open("/dev/null").unwrap();
        let b = cmd.as_fd();
        // SAFETY: each call is refused before it takes anything (asserted).
        unsafe {
            let e = kernel_fd(FD_NOT_WRITTEN, b).unwrap_err();
            assert!(e.contains("the kernel wrote no fd"), "{e}");
            let e = kernel_fd(-5i32 as u32, b).unwrap_err();
            assert!(e.contains("fd -5, which is no fd"), "{e}");
            let e = kernel_fd(b.as_raw_fd() as u32, b).unwrap_err();
            assert!(e.contains("the command fd itself"), "{e}");
        }
        assert!(rustix::io::fcntl_getfd(&cmd).is_ok());
    }

    /// A test kernel: answers every call with `answer`, writing `handle` into the first
    /// attribute (an IDR-new) when it succeeds; counts the calls.
    fn kernel(
        answer: Result<(), Errno>,
        calls: &std::cell::Cell<u32>,
    ) -> impl FnOnce(&mut IoctlCall<'_>) -> Result<(), Errno> + '_ {
        move |c| {
            calls.set(calls.get() + 1);
            if answer.is_ok() {
                c.attrs_mut()[0].data = 0x1234;
            }
            answer
        }
    }

    /// Runs a "create" (`Method::CreateCq`) against `answer`: the ioctl path reads the handle the
    /// kernel wrote, the write path fills `bufs` itself.
    fn create(
        mask: &AtomicU32,
        answer: Result<(), Errno>,
        calls: &std::cell::Cell<u32>,
        writes: &std::cell::Cell<u32>,
    ) -> Result<u32, Errno> {
        let mut resp = 0u32;
        let via = ioctl_or_write(
            mask,
            kernel(answer, calls),
            Method::CreateCq,
            &mut resp,
            |c, resp| {
                let h = c.idr_new(cq::ATTR_CREATE_HANDLE);
                c.ptr_out(cq::ATTR_CREATE_RESP_CQE, resp);
                h
            },
            |resp| {
                writes.set(writes.get() + 1);
                *resp = 77;
                Ok(())
            },
        )?;
        Ok(match via {
            Via::Ioctl(a, h) => a.handle(h),
            Via::Write(()) => resp,
        })
    }

    /// The ioctl's answer is taken when it succeeds, and the write command is not run.
    #[test]
    fn ioctl_success_is_the_answer() {
        let (mask, calls, writes) = (AtomicU32::new(0), Default::default(), Default::default());
        assert_eq!(create(&mask, Ok(()), &calls, &writes), Ok(0x1234));
        assert_eq!((calls.get(), writes.get()), (1, 0));
        assert_eq!(mask.load(Ordering::Relaxed), 0);
    }

    /// EPROTONOSUPPORT: this method is missing, remembered for it alone; the fallback runs
    /// now and from then on without another ioctl; other methods still try theirs.
    #[test]
    fn missing_method_falls_back_and_is_remembered() {
        let (mask, calls, writes) = (AtomicU32::new(0), Default::default(), Default::default());
        let missing = Err(Errno::PROTONOSUPPORT);
        assert_eq!(create(&mask, missing, &calls, &writes), Ok(77));
        assert_eq!((calls.get(), writes.get()), (1, 1));
        assert_eq!(mask.load(Ordering::Relaxed), Method::CreateCq.bit());
        assert_eq!(create(&mask, Ok(()), &calls, &writes), Ok(77));
        assert_eq!((calls.get(), writes.get()), (1, 2), "no second ioctl");
        let mut unit = ();
        let other = ioctl_or_write(
            &mask,
            kernel(Ok(()), &calls),
            Method::DestroyCq,
            &mut unit,
            |c, _| c.idr_new(cq::ATTR_DESTROY_HANDLE),
            |_| Ok(()),
        );
        assert!(matches!(other, Ok(Via::Ioctl(..))));
        assert_eq!(calls.get(), 2);
    }

    /// ENOTTY: no ioctl interface at all; every method is remembered as missing (the
    /// extended QUERY_DEVICE, not an ioctl, is not).
    #[test]
    fn no_ioctl_interface_marks_every_method() {
        let (mask, calls, writes) = (AtomicU32::new(0), Default::default(), Default::default());
        assert_eq!(create(&mask, Err(Errno::NOTTY), &calls, &writes), Ok(77));
        let m = mask.load(Ordering::Relaxed);
        for &method in Method::ALL {
            assert_ne!(m & method.bit(), 0, "{method:?}");
        }
        assert_eq!(m & M_EX_QUERY_DEVICE, 0);
    }

    /// Any other error is the kernel's answer: returned as is, the fallback not run, nothing
    /// remembered.
    #[test]
    fn other_errors_are_the_answer() {
        let (mask, calls, writes) = (AtomicU32::new(0), Default::default(), Default::default());
        for e in [Errno::INVAL, Errno::NOMEM, Errno::PERM, Errno::NOSYS] {
            assert_eq!(create(&mask, Err(e), &calls, &writes), Err(e));
        }
        assert_eq!((calls.get(), writes.get()), (4, 0));
        assert_eq!(mask.load(Ordering::Relaxed), 0);
    }

    /// A fallback's own error is returned too.
    #[test]
    fn fallback_errors_are_returned() {
        let mask = AtomicU32::new(Method::DestroyPd.bit());
        let calls = Default::default();
        let r: Result<Via<(), ()>, Errno> = ioctl_or_write(
            &mask,
            kernel(Ok(()), &calls),
            Method::DestroyPd,
            &mut (),
            |c, _| {
                c.idr(pd::ATTR_DESTROY_HANDLE, 3);
            },
            |_| Err(Errno::BADF),
        );
        assert_eq!(r.unwrap_err(), Errno::BADF);
        assert_eq!(calls.get(), 0);
    }

    /// Each method has its own bit, and none is the extended QUERY_DEVICE's.
    #[test]
    fn method_bits_are_distinct() {
        let mut seen = M_EX_QUERY_DEVICE;
        for &m in Method::ALL {
            assert_eq!(seen & m.bit(), 0, "{m:?}");
            seen |= m.bit();
        }
    }
}
