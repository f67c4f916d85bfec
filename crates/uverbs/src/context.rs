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

use crate::abi::cmd::nr;
use crate::abi::device::{ib_uverbs_get_context, ib_uverbs_get_context_resp};
use crate::abi::ioctl::{
    async_event, device as dev_m, object, UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT,
};
use crate::device::{Device, DriverId};
use crate::driver::Driver;
use crate::error::Error;
use crate::ioctl::IoctlCall;
use crate::write;

/// Bits of [`Context`]'s `no_ioctl` mask: ioctl methods the kernel said it lacks.
pub(crate) const M_QUERY_PORT: u32 = 1 << 0;
pub(crate) const M_GID_TABLE: u32 = 1 << 1;
pub(crate) const M_GID_ENTRY: u32 = 1 << 2;
/// CQ/QP create and the objects' destroy methods, each with a legacy write() command.
pub(crate) const M_CREATE_CQ: u32 = 1 << 3;
pub(crate) const M_CREATE_QP: u32 = 1 << 4;
pub(crate) const M_DESTROY_PD: u32 = 1 << 5;
pub(crate) const M_DESTROY_MR: u32 = 1 << 6;
pub(crate) const M_DESTROY_CQ: u32 = 1 << 7;
pub(crate) const M_DESTROY_QP: u32 = 1 << 8;
pub(crate) const M_DESTROY_SRQ: u32 = 1 << 9;
pub(crate) const M_DESTROY_AH: u32 = 1 << 10;
pub(crate) const M_DESTROY_MW: u32 = 1 << 11;
/// ENOTTY: no ioctl interface at all.
const M_ALL: u32 = M_QUERY_PORT
    | M_GID_TABLE
    | M_GID_ENTRY
    | M_CREATE_CQ
    | M_CREATE_QP
    | M_DESTROY_PD
    | M_DESTROY_MR
    | M_DESTROY_CQ
    | M_DESTROY_QP
    | M_DESTROY_SRQ
    | M_DESTROY_AH
    | M_DESTROY_MW;
/// Not an ioctl: the extended write `QUERY_DEVICE` is missing (or the legacy ABI was asked
/// for), use the legacy one.
pub(crate) const M_EX_QUERY_DEVICE: u32 = 1 << 31;

/// What an ioctl with a fallback came to.
pub(crate) enum Outcome {
    Done,
    Fallback,
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
/// descriptors"). Which sysfs tree is read is not a safe choice ([`crate::device::Sysfs::at`]
/// is `unsafe`). The attached [`Driver`] is reached through [`Context::driver`], whose methods
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
    /// The extended capability bits (FLUSH, ATOMIC_WRITE: [`crate::op`]).
    pub device_cap_flags_ex: crate::op::DeviceCapsEx,
}

impl Context {
    /// Opens `dev` without driver data (enough for rxe; siw needs room for its response).
    pub fn open(dev: &Device) -> io::Result<Context> {
        Self::open_with_udata(dev, &[], &mut [])
    }

    /// Opens `dev`, passing the provider's `alloc_ucontext` request (`uhw_in`) and receiving
    /// its response (`uhw_out`, filled by the kernel). With the write fallback both lengths
    /// must be multiples of 4.
    pub fn open_with_udata(dev: &Device, uhw_in: &[u8], uhw_out: &mut [u8]) -> io::Result<Context> {
        Self::open_impl(dev, uhw_in, uhw_out, false)
    }

    /// Opens `dev` speaking only what the oldest uverbs kernels have: write `GET_CONTEXT`,
    /// legacy write `QUERY_DEVICE` and `QUERY_PORT`, GIDs from sysfs, and the write commands
    /// that create CQs and QPs and destroy every object. It exists to test the
    /// fallback paths against a kernel that has the new ones.
    #[doc(hidden)]
    pub fn open_legacy_abi(dev: &Device) -> io::Result<Context> {
        Self::open_impl(dev, &[], &mut [], true)
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
        crate::fd::set_nonblocking(&async_fd, true)
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

    /// `IB_UVERBS_CORE_SUPPORT_*` bits (0 after the write fallback).
    pub fn core_support(&self) -> u64 {
        self.core_support
    }

    /// The async event fd (port and QP events are read from it), non-blocking. Readiness
    /// protocol: when it is readable, call [`Context::try_get_async_event`] until `None`;
    /// only then wait again.
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.async_fd.as_fd()
    }

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

    /// The provider's driver. A context opened without a provider (plain
    /// [`Context::open`]) can query the device but not create CQs, QPs, SRQs or AHs.
    ///
    /// Only the driver's queries are safe to call; its create methods are `unsafe fn`s
    /// (the provider maps what their kernel responses name: see [`crate::driver`]).
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
                })
            })
            .as_ref()
    }

    /// The device's max_cqe, when known.
    pub(crate) fn cached_max_cqe(&self) -> Option<u32> {
        self.cached_limits().map(|l| l.max_cqe)
    }

    /// The uverbs command fd (ioctl, write commands, mmap of provider queues).
    #[inline]
    pub fn cmd_fd(&self) -> BorrowedFd<'_> {
        self.cmd_fd.as_fd()
    }

    /// The device's driver id (sent in every ioctl header).
    pub(crate) fn driver_id(&self) -> DriverId {
        self.device.driver_id()
    }

    /// Issues `call` on this context's command fd.
    pub(crate) fn ioctl(&self, call: &mut IoctlCall) -> Result<(), Errno> {
        call.call_checked(self.cmd_fd(), self.driver_id().0)
    }

    /// Whether the ioctl method `method` (an `M_*` bit) is worth trying: false once the
    /// kernel said it lacks it (or the context was opened with [`Context::open_legacy_abi`]).
    pub(crate) fn use_ioctl(&self, method: u32) -> bool {
        // Relaxed: the mask is a cache of what the kernel answered; a stale read only costs
        // one more ioctl that fails the same way.
        self.no_ioctl.load(Ordering::Relaxed) & method == 0
    }

    /// Records what an ioctl for `method` failed with: ENOTTY (no ioctl interface at all)
    /// and EPROTONOSUPPORT (this method is missing) are remembered and return true, meaning
    /// "use the write() command"; any other error returns false.
    pub(crate) fn ioctl_missing(&self, method: u32, e: Errno) -> bool {
        // Relaxed: see `use_ioctl`.
        match e {
            Errno::NOTTY => {
                self.no_ioctl.fetch_or(M_ALL, Ordering::Relaxed);
                true
            }
            Errno::PROTONOSUPPORT => {
                self.no_ioctl.fetch_or(method, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// Runs `call` unless `method` is known to be missing. `Ok(true)`: the ioctl did it;
    /// `Ok(false)`: the method is missing (now remembered), use the write() command.
    pub(crate) fn try_ioctl(&self, method: u32, call: &mut IoctlCall) -> Result<bool, Errno> {
        if !self.use_ioctl(method) {
            return Ok(false);
        }
        match self.ioctl(call) {
            Ok(()) => Ok(true),
            Err(e) if self.ioctl_missing(method, e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`Context::try_ioctl`] for the queries below.
    pub(crate) fn ioctl_or_fallback(
        &self,
        method: u32,
        call: &mut IoctlCall,
    ) -> Result<Outcome, Errno> {
        Ok(if self.try_ioctl(method, call)? {
            Outcome::Done
        } else {
            Outcome::Fallback
        })
    }
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
}
