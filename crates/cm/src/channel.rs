//! The ucma device `/dev/infiniband/rdma_cm`: opening it, sending write() commands, and the
//! [`EventChannel`] events are read from.
//!
//! Each open of the device is an event channel: the kernel queues the events of every id
//! created through (or migrated to) that file descriptor, and `GET_EVENT` hands them out in
//! order. The descriptor is always non-blocking inside rverbs (`GET_EVENT` then fails with
//! EAGAIN instead of sleeping); blocking waits are `poll()` + `GET_EVENT`.
//!
//! ## One dispatcher per channel
//!
//! Several readers may want a channel's events at once: a synchronous id waiting for its
//! ESTABLISHED, an `Endpoint` blocked in `get_recv_comp` that must notice DISCONNECTED, a
//! caller reading the channel, async tasks each waiting for their own id. `GET_EVENT` has no
//! peek: whoever reads an event from the kernel takes it from everyone else. So every read
//! goes through the channel's [`Dispatch`]: it reads *all* queued kernel events at once
//! ([`Channel::pump`]) into a userspace queue, records the events that end a connection per
//! id (DISCONNECTED, DEVICE_REMOVAL), and wakes every registered waiter, which then looks in
//! the queue for what is its own:
//!
//! - per-id readers (synchronous ids, ids with [`crate::CmId::claim_events`]) take the first
//!   queued event of their uid;
//! - channel-wide readers ([`EventChannel::get_event`]) take the first event of an id that is
//!   not claimed;
//! - completion waiters only look at the end record, taking nothing.
//!
//! A blocking waiter registers an eventfd (kept by the channel for the next wait) before it checks the queue and sleeps in
//! `poll()` on the channel fd *and* that eventfd: an event that another thread pumps between
//! the check and the sleep writes the eventfd, so no wake-up is lost. Async runtimes register
//! a callback instead ([`EventChannel::on_dispatch`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use rverbs_uverbs::Error;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

use crate::abi::{self, rdma_ucm_cmd_hdr};
use crate::event::CmEvent;
use crate::types::CmEventKind;

/// Path of the ucma character device.
pub const DEVICE_PATH: &str = "/dev/infiniband/rdma_cm";
/// Where the kernel publishes the ucma ABI version.
pub const ABI_VERSION_PATH: &str = "/sys/class/misc/rdma_cm/abi_version";

/// One open file of the ucma device. Ids keep it alive through an `Arc`: commands for an id
/// must be written to the file its events are queued on.
#[derive(Debug)]
pub(crate) struct Channel {
    /// The open ucma file. Commands are written with uverbs' one command writer,
    /// [`rverbs_uverbs::kernel::write::write_cmd`]: several commands make the kernel write a response
    /// through a pointer carried *inside* the written buffer, and that writer is declared able
    /// to write any memory (rustix's `write` is declared `readonly`, which would let the
    /// compiler assume the response buffer still holds what it held before the call).
    fd: OwnedFd,
    disp: Mutex<Dispatch>,
}

/// A callback run after a pump queued events (see [`EventChannel::on_dispatch`]).
type DispatchHook = Arc<dyn Fn() + Send + Sync>;

/// The userspace side of a channel's event queue (see the module documentation).
#[derive(Default)]
pub(crate) struct Dispatch {
    /// Events read from the kernel and not taken yet, in the kernel's order.
    queue: VecDeque<abi::rdma_ucm_event_resp>,
    /// Uids whose events only their own id reads.
    claimed: HashSet<u64>,
    /// Per uid: the event that ended its connection (kind, status), once read.
    ended: HashMap<u64, (CmEventKind, i32)>,
    /// Blocking waiters' eventfds, written after each pump that queued something.
    wakers: Vec<Arc<OwnedFd>>,
    /// Eventfds of finished waits, for the next ones (closed with the channel).
    spare: Vec<Arc<OwnedFd>>,
    /// Callbacks run after each pump that queued something.
    hooks: Vec<(u64, DispatchHook)>,
    next_hook: u64,
}

impl fmt::Debug for Dispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatch")
            .field("queued", &self.queue.len())
            .field("claimed", &self.claimed.len())
            .field("ended", &self.ended.len())
            .field("waiters", &self.wakers.len())
            .field("hooks", &self.hooks.len())
            .finish()
    }
}

/// Event kinds after which a connection carries no more traffic.
pub(crate) fn ends_connection(kind: CmEventKind) -> bool {
    kind == CmEventKind::DISCONNECTED || kind == CmEventKind::DEVICE_REMOVAL
}

impl Dispatch {
    /// Takes the first queued event of `uid`.
    pub(crate) fn take_for(&mut self, uid: u64) -> Option<abi::rdma_ucm_event_resp> {
        let i = self.queue.iter().position(|e| e.uid == uid)?;
        self.queue.remove(i)
    }

    /// Takes the first queued event of an id that is not claimed.
    pub(crate) fn take_unclaimed(&mut self) -> Option<abi::rdma_ucm_event_resp> {
        let i = self
            .queue
            .iter()
            .position(|e| !self.claimed.contains(&e.uid))?;
        self.queue.remove(i)
    }

    /// The event that ended `uid`'s connection, if read.
    pub(crate) fn ended(&self, uid: u64) -> Option<(CmEventKind, i32)> {
        self.ended.get(&uid).copied()
    }

    pub(crate) fn claim(&mut self, uid: u64) {
        self.claimed.insert(uid);
    }

    pub(crate) fn is_claimed(&self, uid: u64) -> bool {
        self.claimed.contains(&uid)
    }

    /// Drops the queued MULTICAST_JOIN / MULTICAST_ERROR events of the join `mc_id` of
    /// `uid` (the group was left; the kernel discarded those it still held).
    pub(crate) fn drop_multicast_events(&mut self, uid: u64, mc_id: u32) {
        self.queue.retain(|e| {
            let kind = CmEventKind(e.event);
            !(e.uid == uid
                && e.id == mc_id
                && (kind == CmEventKind::MULTICAST_JOIN || kind == CmEventKind::MULTICAST_ERROR))
        });
    }

    /// Queues an event as if read from the kernel (tests).
    #[cfg(test)]
    pub(crate) fn queue_for_test(&mut self, e: abi::rdma_ucm_event_resp) {
        self.queue.push_back(e);
    }

    /// Forgets `uid` (its id is destroyed or moved): returns its queued events.
    pub(crate) fn forget(&mut self, uid: u64) -> Vec<abi::rdma_ucm_event_resp> {
        self.claimed.remove(&uid);
        self.ended.remove(&uid);
        let mut out = Vec::new();
        self.queue.retain(|e| {
            if e.uid == uid {
                out.push(*e);
                false
            } else {
                true
            }
        });
        out
    }

    /// Puts events of a migrated id in front (they are older than anything the kernel still
    /// holds for it).
    pub(crate) fn adopt(&mut self, uid: u64, claimed: bool, events: Vec<abi::rdma_ucm_event_resp>) {
        for e in events.into_iter().rev() {
            if ends_connection(CmEventKind(e.event)) {
                self.ended
                    .insert(uid, (CmEventKind(e.event), e.status as i32));
            }
            self.queue.push_front(e);
        }
        if claimed {
            self.claimed.insert(uid);
        }
    }

    fn wake(&self) {
        for w in &self.wakers {
            // An eventfd write fails only when the counter would overflow (it is then
            // readable anyway) or with EAGAIN for the same reason.
            let _ = rustix::io::write(&**w, &1u64.to_ne_bytes());
        }
        for (_, h) in &self.hooks {
            h();
        }
    }
}

/// What [`Channel::wait_until`] saw.
#[derive(Debug)]
pub(crate) enum Woke<T> {
    /// The check found what it looked for.
    Found(T),
    /// One of the extra fds is readable.
    Extra,
    /// The deadline passed.
    TimedOut,
}

fn new_wake_fd() -> Result<Arc<OwnedFd>, Errno> {
    let fd = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )?;
    Ok(Arc::new(fd))
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
        rverbs_uverbs::kernel::fd::set_nonblocking(&fd, true)
            .map_err(|e| Error::os("make the rdma_cm fd non-blocking", e))?;
        Ok(Arc::new(Self {
            fd,
            disp: Mutex::new(Dispatch::default()),
        }))
    }

    /// A channel over any file (tests: one end of a socket pair records the commands; the
    /// fuzz entry points: /dev/null).
    #[cfg(any(test, rverbs_fuzzing))]
    pub(crate) fn for_test(fd: OwnedFd) -> Arc<Self> {
        Arc::new(Self {
            fd,
            disp: Mutex::new(Dispatch::default()),
        })
    }

    /// The dispatcher, locked. Plain data: a panic while holding it leaves nothing
    /// half-updated that matters, so poisoning is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Dispatch> {
        self.disp.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads every event the kernel has queued into `d`, records connection ends, and wakes
    /// the waiters if anything came. Returns how many events were read.
    pub(crate) fn pump(&self, d: &mut Dispatch) -> Result<usize, Errno> {
        let mut n = 0;
        while self.read_one(d)? {
            n += 1;
        }
        if n > 0 {
            d.wake();
        }
        Ok(n)
    }

    /// Reads one event from the kernel into `d` (no wake-up); `false` when none is there.
    fn read_one(&self, d: &mut Dispatch) -> Result<bool, Errno> {
        let Some(raw) = self.try_get_raw()? else {
            return Ok(false);
        };
        let kind = CmEventKind(raw.event);
        if ends_connection(kind) {
            d.ended.insert(raw.uid, (kind, raw.status as i32));
        }
        tracing::trace!(uid = raw.uid, %kind, "rdma_cm event queued");
        d.queue.push_back(raw);
        Ok(true)
    }

    /// The first event `pick` takes: from the queue, else reading the kernel's queue one event
    /// at a time until `pick` takes one or the kernel has none. Waiters are woken when events
    /// for others were queued on the way.
    fn pick_or_read(
        &self,
        d: &mut Dispatch,
        mut pick: impl FnMut(&mut Dispatch) -> Option<abi::rdma_ucm_event_resp>,
    ) -> Result<Option<abi::rdma_ucm_event_resp>, Errno> {
        if let Some(r) = pick(d) {
            return Ok(Some(r));
        }
        let mut found = None;
        let mut read = 0;
        while self.read_one(d)? {
            read += 1;
            if let Some(r) = pick(d) {
                found = Some(r);
                break;
            }
        }
        if read > 0 && !d.queue.is_empty() {
            d.wake();
        }
        Ok(found)
    }

    /// Blocks until `check` (run on the dispatcher, after each pump or wake-up) returns
    /// something, one of `extra` is readable, or `deadline` passes. The channel is pumped
    /// whenever its fd is readable, so other waiters' events are queued for them.
    pub(crate) fn wait_until<T>(
        &self,
        deadline: Option<Instant>,
        extra: &[BorrowedFd<'_>],
        mut check: impl FnMut(&mut Dispatch) -> Option<T>,
    ) -> Result<Woke<T>, Errno> {
        let spare = self.lock().spare.pop();
        let wake = match spare {
            Some(fd) => fd,
            None => new_wake_fd()?,
        };
        let r = self.wait_with(&wake, deadline, extra, &mut check);
        let mut buf = [0u8; 8];
        // Non-blocking: EAGAIN when nobody woke us. Drained before reuse.
        let _ = rustix::io::read(&*wake, &mut buf);
        self.lock().spare.push(wake);
        r
    }

    fn wait_with<T>(
        &self,
        wake: &Arc<OwnedFd>,
        deadline: Option<Instant>,
        extra: &[BorrowedFd<'_>],
        check: &mut impl FnMut(&mut Dispatch) -> Option<T>,
    ) -> Result<Woke<T>, Errno> {
        let mut pump = false;
        loop {
            {
                let mut d = self.lock();
                if pump {
                    self.pump(&mut d)?;
                }
                if let Some(t) = check(&mut d) {
                    return Ok(Woke::Found(t));
                }
                d.wakers.push(wake.clone());
            }
            let mut fds = Vec::with_capacity(2 + extra.len());
            fds.push(PollFd::new(&self.fd, PollFlags::IN));
            fds.push(PollFd::new(&**wake, PollFlags::IN));
            for e in extra {
                fds.push(PollFd::new(e, PollFlags::IN));
            }
            let r = rverbs_uverbs::kernel::fd::poll_until(&mut fds, deadline);
            self.lock().wakers.retain(|w| !Arc::ptr_eq(w, wake));
            let mut buf = [0u8; 8];
            // Non-blocking: EAGAIN when nobody woke us.
            let _ = rustix::io::read(&**wake, &mut buf);
            match r {
                Ok(0) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        // A last look: a wake-up may have raced with the timeout.
                        let mut d = self.lock();
                        self.pump(&mut d)?;
                        return Ok(check(&mut d).map_or(Woke::TimedOut, Woke::Found));
                    }
                    pump = false;
                }
                Ok(_) => {
                    if fds[0]
                        .revents()
                        .intersects(PollFlags::ERR | PollFlags::NVAL)
                    {
                        return Err(Errno::IO);
                    }
                    pump = !fds[0].revents().is_empty();
                    if fds[2..].iter().any(|f| !f.revents().is_empty()) {
                        if pump {
                            // Queue what came for the others before returning.
                            self.pump(&mut self.lock())?;
                        }
                        return Ok(Woke::Extra);
                    }
                }
                Err(Errno::INTR) => pump = false,
                Err(e) => return Err(e),
            }
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Sends one command: header `{cmd, in = size_of::<Req>(), out = out_len}` then the request.
    ///
    /// Contract (crate-internal, which is why this is not an `unsafe fn`): a request with a
    /// response pointer must have it set with [`resp_ptr`] to a buffer of at least `out_len`
    /// bytes that lives until this returns; every caller in this crate builds its request
    /// that way, from a response struct on its own stack.
    #[allow(unsafe_code)]
    pub(crate) fn command<Req: IntoBytes + Immutable>(
        &self,
        cmd: u32,
        req: &Req,
        out_len: usize,
    ) -> Result<(), Errno> {
        with_command_bytes(cmd, req.as_bytes(), out_len, |buf| {
            // SAFETY: the only address ucma follows in a command is the request's response
            // pointer, which by this function's contract names a live buffer of `out_len`
            // bytes (the kernel writes at most `out_len`, the size in the header); the ids and
            // fds the command carries are the crate's own, so no safe rverbs object is changed
            // behind its back.
            let n = unsafe { rverbs_uverbs::kernel::write::write_cmd(self.fd.as_fd(), buf) }?;
            // ucma consumes a command whole or fails it; anything else is a protocol error.
            if n != buf.len() {
                return Err(Errno::IO);
            }
            Ok(())
        })?
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

    /// Waits up to `timeout` (`None`: forever) for the first queued event that `pick` takes.
    pub(crate) fn get_with(
        &self,
        timeout: Option<Duration>,
        mut pick: impl FnMut(&mut Dispatch) -> Option<abi::rdma_ucm_event_resp>,
    ) -> Result<Option<abi::rdma_ucm_event_resp>, Errno> {
        let deadline = timeout.map(|t| Instant::now() + t);
        {
            // Read first: the caller may not have polled the fd.
            let mut d = self.lock();
            if let Some(r) = self.pick_or_read(&mut d, &mut pick)? {
                return Ok(Some(r));
            }
        }
        match self.wait_until(deadline, &[], pick)? {
            Woke::Found(r) => Ok(Some(r)),
            Woke::TimedOut | Woke::Extra => Ok(None),
        }
    }

    /// The first queued event that `pick` takes, pumping the kernel's queue first; never
    /// waits.
    pub(crate) fn try_get_with(
        &self,
        pick: impl FnMut(&mut Dispatch) -> Option<abi::rdma_ucm_event_resp>,
    ) -> Result<Option<abi::rdma_ucm_event_resp>, Errno> {
        let mut d = self.lock();
        self.pick_or_read(&mut d, pick)
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
    let hdr = command_header(cmd, payload, out_len)?;
    let mut buf = Vec::with_capacity(size_of::<rdma_ucm_cmd_hdr>() + payload.len());
    buf.extend_from_slice(hdr.as_bytes());
    buf.extend_from_slice(payload);
    Ok(buf)
}

fn command_header(cmd: u32, payload: &[u8], out_len: usize) -> Result<rdma_ucm_cmd_hdr, Errno> {
    Ok(rdma_ucm_cmd_hdr {
        cmd,
        r#in: u16::try_from(payload.len()).map_err(|_| Errno::INVAL)?,
        out: u16::try_from(out_len).map_err(|_| Errno::INVAL)?,
    })
}

/// The bytes of [`command_bytes`] handed to `f`, from a stack buffer when they fit in
/// [`CMD_STACK`] bytes (ucma's requests are a few hundred bytes), else from a `Vec`: no
/// allocation per command on the event path.
pub(crate) fn with_command_bytes<R>(
    cmd: u32,
    payload: &[u8],
    out_len: usize,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R, Errno> {
    let hdr = command_header(cmd, payload, out_len)?;
    let h = size_of::<rdma_ucm_cmd_hdr>();
    let len = h + payload.len();
    if len > CMD_STACK {
        return Ok(f(&command_bytes(cmd, payload, out_len)?));
    }
    let mut stack = [0u8; CMD_STACK];
    stack[..h].copy_from_slice(hdr.as_bytes());
    stack[h..len].copy_from_slice(payload);
    Ok(f(&stack[..len]))
}

/// Commands up to this size are built on the stack.
pub(crate) const CMD_STACK: usize = 512;

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
/// ## Readiness protocol (poll, epoll, any async runtime)
///
/// The file descriptor ([`AsFd`]) is non-blocking and readable while the kernel holds an event
/// for this channel. Events already read from the kernel wait in the channel's userspace queue
/// (see [`EventChannel::dispatch`]), which does not make the fd readable. So:
///
/// - **when the fd is readable**: call [`EventChannel::try_get_event`] (or, for an id whose
///   events are claimed, [`crate::CmId::try_next_event`]) until it returns `None`;
/// - **before waiting again**: make sure it did return `None`. Waiting after taking only one
///   event can sleep with the next one already queued.
///
/// For edge-triggered readiness (tokio, epoll with `EPOLLET`) the same rule is what makes it
/// work: `try_get_event` reads the kernel queue until `EAGAIN` every time. Waiters in other
/// threads or tasks, which may miss the fd's readiness because somebody else read the
/// kernel's queue, are woken by the dispatcher: blocking waits inside rverbs register
/// themselves, async layers through [`EventChannel::on_dispatch`].
///
/// ## Soundness
///
/// The channel opens the fixed path `DEVICE_PATH` itself (nothing lets safe code hand it
/// another file) and lends its fd only borrowed. Each ucma command's response is written by
/// the kernel into a local, zero-initialised struct and copied into the channel's queue by
/// value; events' private data are copied into owned buffers; nothing the kernel writes is
/// referenced in place, and every decoder of those bytes is fuzzed (`fuzz/`, stage `fuzz`).
#[derive(Debug, Clone)]
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

    /// Waits for the next event of an unclaimed id (forever).
    pub fn get_event(&self) -> io::Result<CmEvent> {
        match self.get_event_timeout_inner(None)? {
            Some(ev) => Ok(ev),
            None => Err(Error::protocol("get rdma_cm event", "woke up without an event").into()),
        }
    }

    /// Waits up to `timeout` for the next event of an unclaimed id; `Ok(None)` when none
    /// arrived in time.
    pub fn get_event_timeout(&self, timeout: Duration) -> io::Result<Option<CmEvent>> {
        self.get_event_timeout_inner(Some(timeout))
    }

    /// Returns the next event of an unclaimed id if one is queued, without waiting. Events of
    /// synchronous ids and of ids with [`crate::CmId::claim_events`] are left for them.
    pub fn try_get_event(&self) -> io::Result<Option<CmEvent>> {
        let raw = self
            .chan
            .try_get_with(Dispatch::take_unclaimed)
            .map_err(|e| Error::os("get rdma_cm event", e))?;
        Ok(raw.map(|r| CmEvent::decode(r, &self.chan)))
    }

    /// Reads every event the kernel holds for this channel into its userspace queue, notes the
    /// ends of connections, and wakes every waiter; takes nothing. Returns how many events were
    /// read. This is what an event loop calls when the fd is readable if it serves per-id
    /// readers ([`crate::CmId::try_next_event`]) rather than taking events itself.
    pub fn dispatch(&self) -> io::Result<usize> {
        let mut d = self.chan.lock();
        self.chan
            .pump(&mut d)
            .map_err(|e| Error::os("read rdma_cm events", e).into())
    }

    /// Registers `hook`, run (on the thread that read them, with the channel's dispatcher
    /// locked: it must not call back into this channel) after each read that queued events,
    /// whoever read them. An async layer uses it to wake its tasks when a blocking call in
    /// another thread consumed the fd's readiness. Returns a key for
    /// [`EventChannel::remove_dispatch_hook`].
    pub fn on_dispatch(&self, hook: Arc<dyn Fn() + Send + Sync>) -> u64 {
        let mut d = self.chan.lock();
        d.next_hook += 1;
        let key = d.next_hook;
        d.hooks.push((key, hook));
        key
    }

    /// Removes a hook registered with [`EventChannel::on_dispatch`].
    pub fn remove_dispatch_hook(&self, key: u64) {
        self.chan.lock().hooks.retain(|(k, _)| *k != key);
    }

    /// True if both handles name the same open file.
    pub fn same_channel(&self, other: &EventChannel) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }

    fn get_event_timeout_inner(&self, timeout: Option<Duration>) -> io::Result<Option<CmEvent>> {
        let raw = self
            .chan
            .get_with(timeout, Dispatch::take_unclaimed)
            .map_err(|e| Error::os("get rdma_cm event", e))?;
        Ok(raw.map(|r| CmEvent::decode(r, &self.chan)))
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.chan.fd()
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

    fn ev(uid: u64, kind: CmEventKind) -> abi::rdma_ucm_event_resp {
        let mut r = abi::rdma_ucm_event_resp::new_zeroed();
        r.uid = uid;
        r.event = kind.0;
        r
    }

    #[test]
    fn dispatch_gives_each_reader_its_own_events() {
        let mut d = Dispatch::default();
        for (uid, k) in [
            (1, CmEventKind::ESTABLISHED),
            (2, CmEventKind::ADDR_RESOLVED),
            (1, CmEventKind::DISCONNECTED),
            (3, CmEventKind::ROUTE_RESOLVED),
        ] {
            d.queue.push_back(ev(uid, k));
        }
        d.claim(1);
        d.claim(2);
        // A channel reader skips claimed ids.
        assert_eq!(d.take_unclaimed().map(|e| e.uid), Some(3));
        assert!(d.take_unclaimed().is_none());
        // Per-id readers take their own, in order.
        assert_eq!(
            d.take_for(1).map(|e| e.event),
            Some(CmEventKind::ESTABLISHED.0)
        );
        assert_eq!(
            d.take_for(1).map(|e| e.event),
            Some(CmEventKind::DISCONNECTED.0)
        );
        assert!(d.take_for(1).is_none());
        assert_eq!(d.take_for(2).map(|e| e.uid), Some(2));
    }

    #[test]
    fn forget_and_adopt_move_an_ids_events_and_end() {
        let mut a = Dispatch::default();
        a.queue.push_back(ev(7, CmEventKind::ESTABLISHED));
        a.queue.push_back(ev(8, CmEventKind::ESTABLISHED));
        a.queue.push_back(ev(7, CmEventKind::DISCONNECTED));
        a.claim(7);
        let moved = a.forget(7);
        assert_eq!(moved.len(), 2);
        assert!(!a.is_claimed(7));
        assert_eq!(a.queue.len(), 1);
        let mut b = Dispatch::default();
        b.queue.push_back(ev(9, CmEventKind::ADDR_RESOLVED));
        b.adopt(7, true, moved);
        assert!(b.is_claimed(7));
        assert_eq!(b.ended(7).map(|e| e.0), Some(CmEventKind::DISCONNECTED));
        // The adopted events come first, in their order.
        assert_eq!(b.queue[0].event, CmEventKind::ESTABLISHED.0);
        assert_eq!(b.queue[1].event, CmEventKind::DISCONNECTED.0);
        assert_eq!(b.take_unclaimed().map(|e| e.uid), Some(9));
    }

    #[test]
    fn a_blocked_waiter_is_woken_by_another_readers_dispatch() {
        // The fake channel answers every GET_EVENT (a socket pair that accepts writes), so
        // only the waker path is tested here: a thread waiting on the dispatcher sees an
        // event another thread queued, although the fd readiness it polls says nothing.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let chan = Channel::for_test(std::os::fd::OwnedFd::from(a));
        let c2 = chan.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = c2.wait_until(None, &[], |d| d.take_for(42).map(|e| e.event));
            let _ = tx.send(r);
        });
        std::thread::sleep(Duration::from_millis(100));
        {
            let mut d = chan.lock();
            d.queue.push_back(ev(42, CmEventKind::ESTABLISHED));
            d.wake();
        }
        // Without the wake-up the waiter sleeps for ever: fail after 5 s instead.
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(Woke::Found(k))) => assert_eq!(k, CmEventKind::ESTABLISHED.0),
            Ok(other) => panic!("{other:?}"),
            Err(_) => panic!("the waiter was not woken by the other reader's dispatch"),
        }
    }

    #[test]
    fn header_rejects_oversized() {
        assert_eq!(command_bytes(0, &[0u8; 70000], 0), Err(Errno::INVAL));
        assert_eq!(command_bytes(0, &[0u8; 8], 70000), Err(Errno::INVAL));
        let f = |b: &[u8]| b.to_vec();
        assert_eq!(
            with_command_bytes(0, &[0u8; 70000], 0, f),
            Err(Errno::INVAL)
        );
        assert_eq!(
            with_command_bytes(0, &[0u8; 8], 70000, f),
            Err(Errno::INVAL)
        );
        // The stack buffer and the Vec give the same bytes, at the edge and past it.
        let h = size_of::<rdma_ucm_cmd_hdr>();
        for n in [
            0,
            1,
            304,
            CMD_STACK - h - 1,
            CMD_STACK - h,
            CMD_STACK - h + 1,
            4000,
        ] {
            let p: Vec<u8> = (0..n).map(|i| i as u8 ^ 0x5a).collect();
            assert_eq!(
                with_command_bytes(7, &p, 12, f).unwrap(),
                command_bytes(7, &p, 12).unwrap(),
                "payload of {n} bytes"
            );
        }
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
