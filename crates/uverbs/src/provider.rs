//! The seam between the core (kernel objects) and a provider (rings and data path).
//!
//! rdma-core finds providers by scanning driver files and calling constructors; rverbs instead
//! keeps a static table keyed by the kernel's driver id (in `rverbs-provider`). A provider hands
//! the core a [`Driver`] for each context it opens. The core makes every kernel object; for the
//! objects whose driver data and data path belong to the provider (CQ, QP, SRQ, AH) the core
//! asks the driver to take part:
//!
//! 1. the driver prepares its request driver data (and whatever memory it has to give the
//!    kernel, e.g. mlx5's CQ buffer);
//! 2. it calls the `create` callback, which issues the kernel command with that driver data and
//!    returns the core response and the driver response bytes;
//! 3. it builds its data-path state (maps rings, …) and returns it as a boxed ops object.
//!
//! If step 3 fails after step 2 succeeded, the core destroys the kernel object: nothing leaks.

#![allow(unsafe_code)] // unsafe fns: posting hands memory to the device

use std::fmt;
use std::os::fd::BorrowedFd;

use crate::error::Result;
use crate::wc::{RawWc, WorkCompletion};
use crate::wr::{RecvWr, SendWr};

/// What the data path needs to address a kernel object (for doorbells through write()).
#[derive(Clone, Copy, Debug)]
pub struct KernelObj<'a> {
    /// The context's command fd (`/dev/infiniband/uverbsN`).
    pub fd: BorrowedFd<'a>,
    /// The object's kernel handle.
    pub handle: u32,
}

/// The kernel's answer to a CQ create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqCreated {
    /// The CQ's kernel handle.
    pub handle: u32,
    /// Entries the kernel actually gave (≥ requested).
    pub cqe: u32,
}

/// The kernel's answer to a QP create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCreated {
    /// The QP's kernel handle.
    pub handle: u32,
    /// The QP number peers address.
    pub qp_num: u32,
    /// Capacities the kernel granted (≥ requested).
    pub caps: QpCaps,
}

/// The kernel's answer to an SRQ create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqCreated {
    /// The SRQ's kernel handle.
    pub handle: u32,
    /// Work requests the SRQ holds, as the kernel answered.
    pub max_wr: u32,
    /// Most SGEs per work request, as the kernel answered.
    pub max_sge: u32,
    /// The SRQ number the kernel reported (what XRC senders address; may be 0 otherwise).
    pub srq_num: u32,
}

/// Queue pair capacities (`ib_uverbs_qp_cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCaps {
    /// Outstanding work requests the send queue holds.
    pub max_send_wr: u32,
    /// Outstanding work requests the receive queue holds.
    pub max_recv_wr: u32,
    /// Most SGEs per send work request.
    pub max_send_sge: u32,
    /// Most SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Most bytes of inline data per send.
    pub max_inline_data: u32,
}

/// What a driver learns about a QP being created.
#[derive(Clone, Copy, Debug)]
pub struct QpRequest {
    /// RC, UC, UD, …
    pub qp_type: crate::qp::QpType,
    /// Capacities the caller asked for.
    pub caps: QpCaps,
    /// Every send produces a completion, whatever its SIGNALED flag.
    pub sq_sig_all: bool,
    /// The QP takes receives from an SRQ (so it has no receive queue).
    pub has_srq: bool,
}

/// The callback that creates the kernel object with the driver's data. Arguments: request
/// driver data, response driver data buffer.
pub type CreateFn<'a, T> = dyn FnMut(&[u8], &mut [u8]) -> Result<T> + 'a;

/// A provider's per-context driver.
pub trait Driver: Send + Sync + fmt::Debug {
    /// Provider name, e.g. `"rxe"`.
    fn name(&self) -> &'static str;

    /// The CQ depth to ask the kernel for when the caller wants `cqe` entries (mlx5 sizes its
    /// ring to a power of two and tells the kernel one less). Default: `cqe` itself.
    fn adjust_cqe(&self, cqe: u32) -> Result<u32> {
        Ok(cqe)
    }

    /// Creates a CQ's data path. `cqe` is the depth the caller asked for.
    fn create_cq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> Result<Box<dyn CqOps>>;

    /// Creates a QP's data path.
    fn create_qp(
        &self,
        cmd_fd: BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> Result<Box<dyn QpOps>>;

    /// Creates an SRQ's data path.
    fn create_srq(
        &self,
        cmd_fd: BorrowedFd<'_>,
        max_wr: u32,
        max_sge: u32,
        create: &mut CreateFn<'_, SrqCreated>,
    ) -> Result<Box<dyn SrqOps>>;

    /// Creates an address handle; returns the provider's number for it (rxe: `ah_num`), which
    /// UD sends carry.
    fn create_ah(&self, create: &mut CreateFn<'_, u32>) -> Result<u32>;

    /// Creates an address handle for `attr` (mlx5 builds its address vector from it).
    /// Default: [`Driver::create_ah`].
    fn create_ah_for(
        &self,
        attr: &crate::ah::AhAttr,
        create: &mut CreateFn<'_, u32>,
    ) -> Result<u32> {
        let _ = attr;
        self.create_ah(create)
    }
}

/// A CQ's data path.
pub trait CqOps: Send + fmt::Debug {
    /// Moves up to `out.len()` completions into `out`; returns how many.
    fn poll(&mut self, out: &mut [WorkCompletion]) -> usize;

    /// Copies up to `out.len()` completions into `out` undecoded, in the kernel's
    /// `ib_uverbs_wc` layout ([`RawWc`]), oldest first; returns how many. Publishes the
    /// consumer index at most once per call (one batch). This is the path of
    /// [`Cq::poll_raw`](crate::cq::Cq::poll_raw) and [`CqView`](crate::cq::CqView).
    ///
    /// Default: [`poll`](Self::poll) in chunks of eight, each completion re-encoded with
    /// [`RawWc::from_work_completion`] (correct for any provider, and no faster than `poll`).
    fn poll_raw(&mut self, out: &mut [RawWc]) -> usize {
        let mut wc = [WorkCompletion::default(); 8];
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(wc.len());
            let n = self.poll(&mut wc[..want]).min(want);
            for (o, w) in out[done..done + n].iter_mut().zip(&wc[..n]) {
                *o = RawWc::from_work_completion(w);
            }
            done += n;
            if n < want {
                break;
            }
        }
        done
    }

    /// Requests a completion event for the next (solicited) completion.
    fn arm(&mut self, cq: KernelObj<'_>, solicited_only: bool) -> Result<()> {
        crate::cq::req_notify_write(cq, solicited_only)
    }

    /// Called once per completion event read from the channel (mlx5 advances its arm
    /// sequence number here).
    fn event_received(&mut self) {}

    /// True when this provider arms with the default [`arm`](Self::arm) (the kernel's
    /// REQ_NOTIFY_CQ) and keeps no event state ([`event_received`](Self::event_received) does
    /// nothing). The CQ then arms and counts events without taking its lock or calling the
    /// provider: a kernel command on the CQ's handle touches nothing the lock guards. Asked
    /// once, when the CQ is created. Default: false.
    fn arms_in_kernel(&self) -> bool {
        false
    }

    /// Resizes the CQ to at least `cqe` entries: the driver calls `resize` (which issues the
    /// kernel's RESIZE_CQ with the driver data given and returns the new depth), then moves
    /// its ring to what the kernel answered. Completions not yet polled are kept. Default: the
    /// provider cannot resize.
    fn resize(
        &mut self,
        _cmd_fd: BorrowedFd<'_>,
        _cqe: u32,
        _resize: &mut CreateFn<'_, u32>,
    ) -> Result<()> {
        Err(crate::Error::unsupported("resize CQ", "the provider does not resize CQs").into())
    }
}

/// The queue a post went to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive] // more queue kinds can come (e.g. XRC SRQs, WQs)
pub enum PostQueue {
    /// A QP's send queue.
    Send,
    /// A QP's receive queue.
    Recv,
    /// A shared receive queue.
    Srq,
}

#[derive(Debug)]
struct PostTarget {
    device: Box<str>,
    queue: PostQueue,
    number: u32,
}

/// Why a post stopped: the device and queue posted to, the failing work request, what was
/// wrong with it, and how many requests of the list went in before it.
///
/// A provider makes one with [`PostError::invalid`], [`PostError::unsupported`],
/// [`PostError::queue_full`] or [`PostError::failed`]; the core adds the device and queue
/// ([`PostError::at`]) before the caller sees it. Converts to [`std::io::Error`] keeping its
/// kind, and [`Error::errno_of`](crate::Error::errno_of) finds its errno (a full queue's
/// `ENOMEM`, as libibverbs reports it) through the conversion.
#[derive(Debug)]
pub struct PostError {
    target: Option<PostTarget>,
    index: Option<usize>,
    posted: usize,
    kind: std::io::ErrorKind,
    errno: Option<rustix::io::Errno>,
    what: String,
    source: Option<std::io::Error>,
}

impl PostError {
    fn new(index: Option<usize>, posted: usize, kind: std::io::ErrorKind, what: String) -> Self {
        Self {
            target: None,
            index,
            posted,
            kind,
            errno: None,
            what,
            source: None,
        }
    }

    /// Work request `index` of the list is malformed for this queue (too many SGEs, inline
    /// data too long, wrong state, …); the `index` requests before it were posted.
    #[cold]
    pub fn invalid(index: usize, what: impl Into<String>) -> Self {
        Self::new(
            Some(index),
            index,
            std::io::ErrorKind::InvalidInput,
            what.into(),
        )
    }

    /// Work request `index` asks for something the provider does not implement; the `index`
    /// requests before it were posted.
    #[cold]
    pub fn unsupported(index: usize, what: impl Into<String>) -> Self {
        Self::new(
            Some(index),
            index,
            std::io::ErrorKind::Unsupported,
            what.into(),
        )
    }

    /// Work request `index` found the queue full, with `outstanding` requests not yet consumed;
    /// the `index` requests before it were posted. Carries `ENOMEM`, as libibverbs reports it.
    #[cold]
    pub fn queue_full(index: usize, outstanding: u32) -> Self {
        let mut e = Self::new(
            Some(index),
            index,
            std::io::ErrorKind::OutOfMemory,
            format!("queue full ({outstanding} requests outstanding)"),
        );
        e.errno = Some(rustix::io::Errno::NOMEM);
        e
    }

    /// `posted` requests went into the queue, then `what` failed with `source` (e.g. the
    /// doorbell write); no single work request is at fault.
    #[cold]
    pub fn failed(posted: usize, what: impl Into<String>, source: std::io::Error) -> Self {
        let mut e = Self::new(None, posted, source.kind(), what.into());
        e.errno = crate::Error::errno_of(&source);
        e.source = Some(source);
        e
    }

    /// Names the device and the queue (its QP or SRQ number) the post went to.
    #[cold]
    #[must_use]
    pub fn at(mut self, device: &str, queue: PostQueue, number: u32) -> Self {
        self.target = Some(PostTarget {
            device: device.into(),
            queue,
            number,
        });
        self
    }

    /// The device's name, once [`PostError::at`] named it.
    pub fn device(&self) -> Option<&str> {
        self.target.as_ref().map(|t| &*t.device)
    }

    /// The queue posted to, once [`PostError::at`] named it.
    pub fn queue(&self) -> Option<PostQueue> {
        self.target.as_ref().map(|t| t.queue)
    }

    /// The QP number (SRQ number for [`PostQueue::Srq`]), once [`PostError::at`] named it.
    pub fn number(&self) -> Option<u32> {
        self.target.as_ref().map(|t| t.number)
    }

    /// Index in the list of the work request that failed; `None` when the failure came after
    /// queueing (see [`PostError::failed`]).
    pub fn index(&self) -> Option<usize> {
        self.index
    }

    /// Work requests posted (and, for sends, rung) before the failure.
    pub fn posted(&self) -> usize {
        self.posted
    }

    /// What was wrong, without the device, queue or counts.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The errno this failure corresponds to, if any (`ENOMEM` for a full queue).
    pub fn errno(&self) -> Option<rustix::io::Errno> {
        self.errno
    }

    /// The `io::ErrorKind` the conversion to `io::Error` keeps.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.kind
    }
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Some(t) => {
                let (op, obj) = match t.queue {
                    PostQueue::Send => ("post send", "QP"),
                    PostQueue::Recv => ("post receive", "QP"),
                    PostQueue::Srq => ("post receive", "SRQ"),
                };
                write!(f, "{op} to {obj} {:#x} on {}: ", t.number, t.device)?;
            }
            None => f.write_str("post: ")?,
        }
        if let Some(i) = self.index {
            write!(f, "work request #{i}: ")?;
        }
        f.write_str(&self.what)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        } else if let Some(e) = self.errno {
            write!(f, " ({})", crate::error::errno_name(e))?;
        }
        write!(f, "; {} posted", self.posted)
    }
}

impl std::error::Error for PostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

impl From<PostError> for std::io::Error {
    fn from(e: PostError) -> Self {
        std::io::Error::new(e.kind, e)
    }
}

/// A QP's data path.
pub trait QpOps: Send + fmt::Debug {
    /// Posts send work requests and rings the doorbell once.
    ///
    /// # Safety
    /// Every SGE must name memory inside a live memory region registered with this QP's
    /// protection domain, and that memory must stay valid (not freed, not deregistered) until
    /// the work request's completion has been polled or the QP destroyed. The device reads
    /// (and for RDMA READ / atomics, writes) it asynchronously.
    unsafe fn post_send(
        &mut self,
        qp: KernelObj<'_>,
        wrs: &[SendWr<'_>],
    ) -> std::result::Result<(), PostError>;

    /// Posts receive work requests.
    ///
    /// # Safety
    /// As for [`QpOps::post_send`]; the device writes into the memory.
    unsafe fn post_recv(
        &mut self,
        qp: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> std::result::Result<(), PostError>;

    /// The capacities the provider really gives, when they differ from what the kernel's
    /// create response says (mlx5: libmlx5's sizing is what posts are checked against).
    /// Default: `None` (the kernel's answer).
    fn caps(&self) -> Option<QpCaps> {
        None
    }
}

/// An SRQ's data path.
pub trait SrqOps: Send + fmt::Debug {
    /// Driver data for a modify-SRQ command that changes only the limit (rxe 6.1 refuses the
    /// command with EINVAL unless it carries its 8-byte `rxe_modify_srq_cmd`). Default: none.
    fn modify_udata(&self) -> &[u8] {
        &[]
    }

    /// Posts receive work requests.
    ///
    /// # Safety
    /// As for [`QpOps::post_recv`].
    unsafe fn post_recv(
        &mut self,
        srq: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> std::result::Result<(), PostError>;
}

/// The lock around a CQ's or QP's ops object: one compare-and-swap to take it and one store
/// to release it when uncontended (the data path's case), no poisoning.
///
/// Cheaper than `std::sync::Mutex` on the post/poll path, which also checks and records
/// panics for poisoning. Poisoning would not help here anyway: the rings publish their indices
/// atomically, so a panic inside a critical section cannot leave a ring half-updated for the
/// next holder (the guard still releases the lock while unwinding). A contended `lock` spins
/// briefly, then yields the CPU until the holder is done: critical sections are short (ring
/// work, at most one syscall for an arm, doorbell or resize), so nobody waits long.
pub(crate) struct OpsLock<T> {
    locked: std::sync::atomic::AtomicBool,
    value: std::cell::UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one thread at a time (see `lock`), so
// sharing an `OpsLock` between threads only ever moves the use of `T` between threads, which
// `T: Send` allows.
unsafe impl<T: Send> Sync for OpsLock<T> {}

impl<T> OpsLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self {
            locked: std::sync::atomic::AtomicBool::new(false),
            value: std::cell::UnsafeCell::new(value),
        }
    }

    /// Takes the lock (waiting while another thread holds it).
    #[inline]
    pub(crate) fn lock(&self) -> OpsGuard<'_, T> {
        use std::sync::atomic::Ordering;
        // Acquire: what the previous holder did to `value` (released by its Release store in
        // OpsGuard::drop) happens before our use of it.
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        OpsGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        use std::sync::atomic::Ordering;
        let mut spins = 0u32;
        loop {
            // Relaxed: only a hint of when to try again; the compare-and-swap below acquires.
            while self.locked.load(Ordering::Relaxed) {
                if spins < 64 {
                    spins += 1;
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
            // Acquire: as in `lock`.
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Access to the value of a locked [`OpsLock`]; releases the lock when dropped.
pub(crate) struct OpsGuard<'a, T> {
    lock: &'a OpsLock<T>,
}

impl<T> std::ops::Deref for OpsGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard exists only while its thread holds the lock, so no other
        // reference to the value exists (see `OpsLock::lock`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> std::ops::DerefMut for OpsGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference made through the
        // guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for OpsGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: our uses of the value happen before the next holder's Acquire.
        self.lock
            .locked
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::{OpsLock, PostError, PostQueue};
    use std::io;
    use std::sync::Arc;

    /// Each post error says device, queue, request, what and count once, and converts to an
    /// `io::Error` that keeps its kind and errno.
    #[test]
    fn post_error_messages() {
        let state = PostError::invalid(0, "the QP is in INIT: sends need RTS (connect first)").at(
            "rxe0",
            PostQueue::Send,
            0x11,
        );
        assert_eq!(
            state.to_string(),
            "post send to QP 0x11 on rxe0: work request #0: the QP is in INIT: sends need RTS \
             (connect first); 0 posted"
        );
        let sge =
            PostError::invalid(2, "3 SGEs, the queue allows 2").at("rxe0", PostQueue::Recv, 7);
        assert_eq!(
            sge.to_string(),
            "post receive to QP 0x7 on rxe0: work request #2: 3 SGEs, the queue allows 2; 2 posted"
        );
        assert_eq!(
            (sge.index(), sge.posted(), sge.number()),
            (Some(2), 2, Some(7))
        );
        let full = PostError::queue_full(4, 4).at("mlx5_0", PostQueue::Srq, 0x20);
        assert_eq!(
            full.to_string(),
            "post receive to SRQ 0x20 on mlx5_0: work request #4: queue full (4 requests \
             outstanding) (ENOMEM); 4 posted"
        );
        assert_eq!(full.device(), Some("mlx5_0"));
        assert_eq!(full.queue(), Some(PostQueue::Srq));
        let io: io::Error = full.into();
        assert_eq!(io.kind(), io::ErrorKind::OutOfMemory);
        assert_eq!(crate::Error::errno_of(&io), Some(rustix::io::Errno::NOMEM));
        let unsup = PostError::unsupported(1, "send flags 0x10 are not supported by rxe");
        assert_eq!(
            unsup.to_string(),
            "post: work request #1: send flags 0x10 are not supported by rxe; 1 posted"
        );
        assert_eq!(io::Error::from(unsup).kind(), io::ErrorKind::Unsupported);
        let bell = crate::Error::os("rxe send doorbell for QP handle 3", rustix::io::Errno::BADF);
        let late = PostError::failed(5, "the send doorbell failed", bell.into()).at(
            "rxe0",
            PostQueue::Send,
            0x11,
        );
        assert_eq!(late.index(), None);
        let s = late.to_string();
        assert!(
            s.starts_with(
                "post send to QP 0x11 on rxe0: the send doorbell failed: rxe send doorbell for \
                 QP handle 3: "
            ),
            "{s}"
        );
        assert!(s.ends_with("(EBADF); 5 posted"), "{s}");
        assert!(std::error::Error::source(&late).is_some());
    }

    /// Threads incrementing a plain counter under the lock never lose an increment.
    #[test]
    fn ops_lock_excludes() {
        let l = Arc::new(OpsLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 80_000);
    }

    /// A panic while holding the lock releases it (no poisoning).
    #[test]
    fn ops_lock_released_by_panic() {
        let l = Arc::new(OpsLock::new(1u32));
        let l2 = l.clone();
        let r = std::thread::spawn(move || {
            let _g = l2.lock();
            panic!("while holding the lock");
        })
        .join();
        assert!(r.is_err());
        *l.lock() += 1;
        assert_eq!(*l.lock(), 2);
    }
}
