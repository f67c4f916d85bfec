//! Completion channels: the fd a CQ's completion events arrive on.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::io::Errno;
use zerocopy::FromBytes;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::obj::{
    ib_uverbs_comp_event_desc, ib_uverbs_create_comp_channel, ib_uverbs_create_comp_channel_resp,
};
use crate::kernel::write;

/// A completion channel (`ibv_comp_channel`). Its fd becomes readable when a CQ attached to it
/// and armed with [`crate::cq::Cq::req_notify`] gets a completion.
///
/// ## Readiness protocol (poll, epoll, any async runtime)
///
/// The fd ([`AsFd`]) is non-blocking by default and readable while the kernel holds a
/// completion event. For each CQ attached to the channel:
///
/// - **before waiting**: poll the CQ until empty, then arm it ([`crate::cq::Cq::req_notify`]),
///   then poll it once more — a completion that arrived between the last poll and the arm
///   raised no event and would otherwise wait for the next one;
/// - **when the fd is readable**: read events with [`CompChannel::try_get_event`] until
///   `None` (edge-triggered readiness such as tokio's needs the queue read to `EAGAIN`); for
///   each, call [`crate::cq::Cq::event_received`] and [`crate::cq::Cq::ack_events`] on the
///   CQ its `cq_user_handle` names — which may be *another* CQ of the same channel: keep a
///   map, never drop an event for a CQ you do not serve — then poll that CQ (it is disarmed
///   now) and go back to "before waiting".
///
/// ## Soundness
///
/// The channel owns the fd the kernel's CREATE_COMP_CHANNEL answer names (pre-set to -1,
/// checked non-negative and not the command fd before it becomes an `OwnedFd`) and lends it
/// only borrowed ([`AsFd`]). Events are read by `read()` into a local buffer and decoded by
/// value; nothing the kernel writes is referenced in place. Reads from several threads are
/// serialised by the kernel, each returning whole events.
pub struct CompChannel {
    ctx: Arc<Context>,
    fd: OwnedFd,
    /// Set by [`CompChannel::set_blocking`]; decides whether a read must be preceded by a poll.
    blocking: AtomicBool,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompChannel")
            .field("device", &self.ctx.name())
            .field("fd", &self.fd)
            .finish()
    }
}

/// One completion event: the CQ (by its user handle, see [`crate::cq::Cq::user_handle`]) that
/// has a new completion. Acknowledge it on that CQ with [`crate::cq::Cq::ack_events`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompEvent {
    /// The user handle of the CQ that has a new completion.
    pub cq_user_handle: u64,
}

impl CompChannel {
    /// Creates a completion channel on `ctx`.
    pub fn create(ctx: &Arc<Context>) -> Result<Arc<CompChannel>> {
        let op = || format!("create completion channel on {}", ctx.name());
        let req = ib_uverbs_create_comp_channel { response: 0 };
        let mut resp = ib_uverbs_create_comp_channel_resp {
            fd: crate::context::FD_NOT_WRITTEN,
        };
        write::cmd_legacy_simple(ctx.cmd_fd(), nr::CREATE_COMP_CHANNEL, &req, &mut resp)
            .map_err(|e| Error::os(op(), e))?;
        #[allow(unsafe_code)]
        // SAFETY: the response of a successful CREATE_COMP_CHANNEL on the context's command
        // fd, which Context::open checked is the uverbs device: a new fd, ours alone.
        let fd = unsafe { crate::context::kernel_fd(resp.fd, ctx.cmd_fd()) }
            .map_err(|d| Error::protocol(op(), d))?;
        // Non-blocking by default, so that a read never sleeps past a wait(); see
        // set_blocking for the other mode.
        crate::kernel::fd::set_nonblocking(&fd, true)
            .map_err(|e| Error::os("set completion channel non-blocking", e))?;
        Ok(Arc::new(CompChannel {
            ctx: ctx.clone(),
            fd,
            blocking: AtomicBool::new(false),
        }))
    }

    /// The context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Makes reads of the channel block (`true`) or not (`false`, the default).
    ///
    /// Non-blocking (the default), [`get_event`](Self::get_event) tries a read and, when no
    /// event is there, waits with `poll(2)` and reads again: three system calls when it has to
    /// wait. Blocking, it is one `read(2)` that sleeps until an event arrives, as
    /// libibverbs' `ibv_get_cq_event` does — but then a wait cannot be bounded by this type:
    /// bound it from outside if needed (e.g. a watchdog). [`try_get_event`](Self::try_get_event)
    /// still never blocks unless another thread takes the event between its `poll(2)` and its
    /// read; when several threads read one blocking channel, use `poll(2)` on
    /// [`as_fd`](AsFd::as_fd) yourself.
    ///
    /// The flag belongs to the open file, so it applies to every user of this channel.
    pub fn set_blocking(&self, blocking: bool) -> Result<()> {
        // Relaxed: a hint for try_get_event; the file flag itself is the kernel's.
        self.blocking.store(blocking, Ordering::Relaxed);
        crate::kernel::fd::set_nonblocking(&self.fd, !blocking).map_err(|e| {
            Error::os(
                format!(
                    "make completion channel of {} {}",
                    self.ctx.name(),
                    if blocking { "blocking" } else { "non-blocking" }
                ),
                e,
            )
            .into()
        })
    }

    /// Blocks until a completion event arrives (one `read(2)` on a channel made blocking with
    /// [`set_blocking`](Self::set_blocking)).
    pub fn get_event(&self) -> Result<CompEvent> {
        loop {
            match self.read_event() {
                Err(Errno::AGAIN) => {
                    self.wait(None)?;
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(Error::os("read completion event", e).into()),
                Ok(ev) => return Ok(ev),
            }
        }
    }

    /// Returns an event if one is ready, without blocking (one `read(2)` on a non-blocking
    /// channel; `poll(2)` first on a blocking one).
    pub fn try_get_event(&self) -> Result<Option<CompEvent>> {
        // Relaxed: see set_blocking.
        if self.blocking.load(Ordering::Relaxed) && !self.wait(Some(Duration::ZERO))? {
            return Ok(None);
        }
        match self.read_event() {
            Ok(ev) => Ok(Some(ev)),
            Err(Errno::AGAIN) | Err(Errno::INTR) => Ok(None),
            Err(e) => Err(Error::os("read completion event", e).into()),
        }
    }

    /// Waits until an event is ready (`true`) or `timeout` passes (`false`).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        crate::kernel::fd::poll_readable(self.fd.as_fd(), timeout)
            .map_err(|e| Error::os("wait for completion event", e).into())
    }

    fn read_event(&self) -> std::result::Result<CompEvent, Errno> {
        let mut buf = [0u8; 8];
        let n = rustix::io::read(&self.fd, &mut buf)?;
        if n != buf.len() {
            return Err(Errno::IO);
        }
        let d = ib_uverbs_comp_event_desc::read_from_bytes(&buf).map_err(|_| Errno::IO)?;
        Ok(CompEvent {
            cq_user_handle: d.cq_handle,
        })
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
