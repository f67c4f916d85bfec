//! The ucma device `/dev/infiniband/rdma_cm`: opening it, sending write() commands, and the
//! [`EventChannel`] events are read from.
//!
//! Each open of the device is an event channel: the kernel queues the events of every id
//! created through (or migrated to) that file descriptor, and `GET_EVENT` hands them out in
//! order. The descriptor is always non-blocking inside rverbs (`GET_EVENT` then fails with
//! EAGAIN instead of sleeping); blocking waits are `poll()` + `GET_EVENT`.

use std::fs::File;
use std::io::{self, Write as _};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rverbs_uverbs::Error;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

use crate::abi::{self, rdma_ucm_cmd_hdr};
use crate::event::CmEvent;

/// Path of the ucma character device.
pub const DEVICE_PATH: &str = "/dev/infiniband/rdma_cm";
/// Where the kernel publishes the ucma ABI version.
pub const ABI_VERSION_PATH: &str = "/sys/class/misc/rdma_cm/abi_version";

/// One open file of the ucma device. Ids keep it alive through an `Arc`: commands for an id
/// must be written to the file its events are queued on.
#[derive(Debug)]
pub(crate) struct Channel {
    /// Writes go through `std::fs::File` (a libc `write()` call) on purpose: several commands
    /// make the kernel write a response through a pointer carried *inside* the written buffer.
    /// rustix's `write` is an inline-asm syscall declared `readonly` (it promises the compiler
    /// that no memory changes), which would let the compiler assume the response buffer still
    /// holds what it held before the call. An opaque libc call carries no such promise, and the
    /// response buffer's address is exposed (cast to an integer) before the call.
    file: File,
}

impl Channel {
    pub(crate) fn open() -> Result<Arc<Self>, io::Error> {
        check_abi_version()?;
        let fd = rustix::fs::open(DEVICE_PATH, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| match e {
                Errno::NOENT | Errno::NODEV | Errno::NXIO => Error::not_found(
                    "open rdma_cm",
                    format!("rdma_cm not available: load rdma_ucm ({DEVICE_PATH}: {e})"),
                ),
                Errno::ACCESS | Errno::PERM => Error::os("open rdma_cm", e)
                    .with_detail(format!("no permission to open {DEVICE_PATH}")),
                _ => Error::os("open rdma_cm", e).with_detail(DEVICE_PATH.to_string()),
            })?;
        // GET_EVENT sleeps unless the file is non-blocking; rverbs waits with poll() instead so
        // that every wait can have a deadline and callers can put the fd in their own epoll.
        let flags =
            rustix::fs::fcntl_getfl(&fd).map_err(|e| Error::os("rdma_cm: fcntl(F_GETFL)", e))?;
        rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK)
            .map_err(|e| Error::os("rdma_cm: fcntl(F_SETFL, O_NONBLOCK)", e))?;
        Ok(Arc::new(Self {
            file: File::from(fd),
        }))
    }

    /// A channel over any file (tests: one end of a socket pair records the commands).
    #[cfg(test)]
    pub(crate) fn for_test(file: File) -> Arc<Self> {
        Arc::new(Self { file })
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Sends one command: header `{cmd, in = size_of::<Req>(), out = out_len}` then the request.
    /// A request with a response pointer must have it set to a live buffer of `out_len` bytes
    /// (see [`resp_ptr`]).
    pub(crate) fn command<Req: IntoBytes + Immutable>(
        &self,
        cmd: u32,
        req: &Req,
        out_len: usize,
    ) -> Result<(), Errno> {
        let buf = command_bytes(cmd, req.as_bytes(), out_len)?;
        let n = (&self.file)
            .write(&buf)
            .map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
        // ucma consumes a command whole or fails it; anything else is a protocol error.
        if n != buf.len() {
            return Err(Errno::IO);
        }
        Ok(())
    }

    /// `GET_EVENT` without waiting: `Ok(None)` when the queue is empty.
    pub(crate) fn try_get_raw(&self) -> Result<Option<abi::rdma_ucm_event_resp>, Errno> {
        let mut resp = abi::rdma_ucm_event_resp::new_zeroed();
        let req = abi::rdma_ucm_get_event {
            response: resp_ptr(&mut resp),
        };
        match self.command(abi::cmd::GET_EVENT, &req, size_of_val(&resp)) {
            Ok(()) => Ok(Some(resp)),
            Err(Errno::AGAIN) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Waits until the fd is readable or `deadline` passes. `Ok(false)` on timeout.
    pub(crate) fn wait_readable(&self, deadline: Option<Instant>) -> Result<bool, Errno> {
        loop {
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    Some(rustix::event::Timespec {
                        tv_sec: left.as_secs() as i64,
                        tv_nsec: i64::from(left.subsec_nanos()),
                    })
                }
            };
            let mut fds = [PollFd::new(&self.file, PollFlags::IN)];
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(0) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(false);
                    }
                }
                Ok(_) => {
                    let rev = fds[0].revents();
                    if rev.intersects(PollFlags::ERR | PollFlags::NVAL) {
                        return Err(Errno::IO);
                    }
                    return Ok(true);
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// `GET_EVENT`, waiting up to `timeout` (`None`: forever). `Ok(None)` on timeout.
    pub(crate) fn get_raw(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Option<abi::rdma_ucm_event_resp>, Errno> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(r) = self.try_get_raw()? {
                return Ok(Some(r));
            }
            if !self.wait_readable(deadline)? {
                return Ok(None);
            }
        }
    }
}

/// The integer address of a response buffer, for the `response` field of a request. Taking it
/// from `&mut` marks the buffer as written-to for the reader of the code; the kernel writes at
/// most the `out` size given in the header.
pub(crate) fn resp_ptr<T: IntoBytes + FromBytes>(resp: &mut T) -> u64 {
    resp.as_mut_bytes().as_mut_ptr() as u64
}

/// The bytes of one ucma command (exposed to the crate's tests).
pub(crate) fn command_bytes(cmd: u32, payload: &[u8], out_len: usize) -> Result<Vec<u8>, Errno> {
    let hdr = rdma_ucm_cmd_hdr {
        cmd,
        r#in: u16::try_from(payload.len()).map_err(|_| Errno::INVAL)?,
        out: u16::try_from(out_len).map_err(|_| Errno::INVAL)?,
    };
    let mut buf = Vec::with_capacity(size_of::<rdma_ucm_cmd_hdr>() + payload.len());
    buf.extend_from_slice(hdr.as_bytes());
    buf.extend_from_slice(payload);
    Ok(buf)
}

/// Checks `/sys/class/misc/rdma_cm/abi_version` == 4. A missing file with a present device is
/// tolerated (old kernels), as librdmacm does; a missing module is reported as such.
fn check_abi_version() -> Result<(), io::Error> {
    match std::fs::read_to_string(ABI_VERSION_PATH) {
        Ok(s) => {
            let v: u32 = s.trim().parse().map_err(|_| {
                Error::protocol(
                    "open rdma_cm",
                    format!("{ABI_VERSION_PATH} holds {:?}, not a number", s.trim()),
                )
            })?;
            if v != abi::RDMA_USER_CM_ABI_VERSION {
                return Err(Error::unsupported(
                    "open rdma_cm",
                    format!(
                        "the kernel's rdma_cm ABI is version {v} ({ABI_VERSION_PATH}); rverbs \
                         speaks version {} only",
                        abi::RDMA_USER_CM_ABI_VERSION
                    ),
                )
                .into());
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if std::path::Path::new(DEVICE_PATH).exists() {
                tracing::warn!("{ABI_VERSION_PATH} missing; assuming rdma_cm ABI version 4");
                Ok(())
            } else {
                Err(Error::not_found(
                    "open rdma_cm",
                    format!(
                        "rdma_cm not available: load rdma_ucm (no {DEVICE_PATH}, no \
                         {ABI_VERSION_PATH})"
                    ),
                )
                .into())
            }
        }
        Err(e) => {
            Err(Error::protocol("open rdma_cm", format!("reading {ABI_VERSION_PATH}: {e}")).into())
        }
    }
}

/// An rdma_cm event channel: an open file of `/dev/infiniband/rdma_cm` on which the kernel
/// queues the events of the ids created with (or migrated to) it.
///
/// Ids hold a reference to their channel, so dropping the `EventChannel` while ids still use it
/// only drops this handle; the file is closed with the last id. Events are plain values: there
/// is nothing to acknowledge (see [`CmEvent`]).
///
/// The file descriptor ([`AsFd`]) can be put into a caller's poll/epoll set: it is readable when
/// an event is queued. It is non-blocking; use [`EventChannel::try_get_event`] after readiness.
#[derive(Debug)]
pub struct EventChannel {
    pub(crate) chan: Arc<Channel>,
}

impl EventChannel {
    /// Opens `/dev/infiniband/rdma_cm` after checking the kernel speaks ucma ABI 4.
    ///
    /// Errors: `NotFound` "rdma_cm not available: load rdma_ucm" when the module is not loaded,
    /// `Unsupported` naming both versions when the ABI differs.
    pub fn new() -> io::Result<Self> {
        Ok(Self {
            chan: Channel::open()?,
        })
    }

    /// Waits for the next event (forever).
    pub fn get_event(&self) -> io::Result<CmEvent> {
        match self.get_event_timeout_inner(None)? {
            Some(ev) => Ok(ev),
            None => Err(Error::protocol("get rdma_cm event", "woke up without an event").into()),
        }
    }

    /// Waits up to `timeout` for the next event; `Ok(None)` when none arrived in time.
    pub fn get_event_timeout(&self, timeout: Duration) -> io::Result<Option<CmEvent>> {
        self.get_event_timeout_inner(Some(timeout))
    }

    /// Returns the next event if one is queued, without waiting.
    pub fn try_get_event(&self) -> io::Result<Option<CmEvent>> {
        let raw = self
            .chan
            .try_get_raw()
            .map_err(|e| Error::os("get rdma_cm event", e))?;
        Ok(raw.map(|r| CmEvent::decode(r, &self.chan)))
    }

    fn get_event_timeout_inner(&self, timeout: Option<Duration>) -> io::Result<Option<CmEvent>> {
        let raw = self
            .chan
            .get_raw(timeout)
            .map_err(|e| Error::os("get rdma_cm event", e))?;
        Ok(raw.map(|r| CmEvent::decode(r, &self.chan)))
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.chan.file.as_fd()
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.chan.raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_counts_payload_bytes_only() {
        let req = abi::rdma_ucm_resolve_route {
            id: 7,
            timeout_ms: 2000,
        };
        let b = command_bytes(abi::cmd::RESOLVE_ROUTE, req.as_bytes(), 0).unwrap();
        assert_eq!(b.len(), 8 + 8);
        let hdr = rdma_ucm_cmd_hdr::read_from_bytes(&b[..8]).unwrap();
        assert_eq!((hdr.cmd, hdr.r#in, hdr.out), (4, 8, 0));
        assert_eq!(&b[8..12], &7u32.to_ne_bytes());
        assert_eq!(&b[12..16], &2000u32.to_ne_bytes());
    }

    #[test]
    fn header_rejects_oversized() {
        assert_eq!(command_bytes(0, &[0u8; 70000], 0), Err(Errno::INVAL));
        assert_eq!(command_bytes(0, &[0u8; 8], 70000), Err(Errno::INVAL));
    }

    #[test]
    fn get_event_request_points_at_its_response() {
        let mut resp = abi::rdma_ucm_event_resp::new_zeroed();
        let ptr = resp_ptr(&mut resp);
        let req = abi::rdma_ucm_get_event { response: ptr };
        let b = command_bytes(abi::cmd::GET_EVENT, req.as_bytes(), size_of_val(&resp)).unwrap();
        let hdr = rdma_ucm_cmd_hdr::read_from_bytes(&b[..8]).unwrap();
        assert_eq!((hdr.cmd, hdr.r#in, hdr.out), (12, 8, 336));
        assert_eq!(&b[8..16], &ptr.to_ne_bytes());
    }
}
