//! Completion queues as futures: [`AsyncCompChannel`] (a completion channel registered with
//! tokio) and [`AsyncCq`] (`next().await`, `next_batch(&mut buf).await`).
//!
//! ## How a wait works, and why nothing is lost
//!
//! 1. Apply the events the channel's reader counted for this CQ (`event_received` and
//!    `ack_events`, so that a provider's arm sequence stays right).
//! 2. Poll the CQ; return what is there.
//! 3. Register for the channel's wake-up ([`tokio::sync::Notify`], *enabled* before the next
//!    step, so a wake-up sent by another task from now on is kept).
//! 4. Arm the CQ, poll again: a completion that arrived between 2 and the arm raised no event,
//!    this poll finds it.
//! 5. Sleep until the channel's fd is readable (tokio, edge-triggered) or another task that
//!    read the channel wakes us. The task that finds the fd readable reads *every* event
//!    until `EAGAIN` (so the edge is not lost), counts each for the CQ it names — several CQs
//!    may share the channel: an event for another CQ is counted for that CQ, never dropped —
//!    and wakes every waiter of the channel. Back to 1.
//!
//! **Cancel safety.** Completions stay in the CQ until a poll hands them to the caller, and
//! the poll and the return happen in one step with no `.await` between: dropping a
//! `next()` / `next_batch()` future at any point loses no completion (the next call returns
//! it). Events read by a dropped future were counted for their CQ and are applied by the
//! next wait; a CQ left armed produces one event too many at worst, which the next wait reads.

use std::fmt;
use std::io;
use std::ops::Deref;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rverbs_uverbs::channel::CompChannel;
use rverbs_uverbs::cq::Cq;
use rverbs_uverbs::{Error, WorkCompletion};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

/// The completion channel's fd, for tokio's registration.
struct ChanFd(Arc<CompChannel>);

impl AsRawFd for ChanFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A completion channel registered with the current tokio runtime. Share it (`Arc`) between
/// the [`AsyncCq`]s of the CQs attached to the channel: one registration, one reader, events
/// counted per CQ.
///
/// Soundness: tokio's registration holds the channel (`Arc<CompChannel>`), so the fd it polls
/// lives as long as the registration; events are read through `CompChannel::try_get_event`
/// (copies), and completions through the CQ's locked poll. Nothing here is `unsafe`.
pub struct AsyncCompChannel {
    fd: AsyncFd<ChanFd>,
    /// Events read and not yet applied: (CQ user handle, count). A channel serves few CQs,
    /// so a short list beats hashing.
    pending: Mutex<Vec<(u64, u32)>>,
    /// True while `pending` may be non-empty: the common wait finds nothing to apply without
    /// taking the lock.
    has_pending: AtomicBool,
    pub(crate) notify: Notify,
}

impl fmt::Debug for AsyncCompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCompChannel")
            .field("channel", &self.fd.get_ref().0)
            .finish_non_exhaustive()
    }
}

impl AsyncCompChannel {
    /// Registers `channel` with the current tokio runtime (call it inside one). The channel
    /// must be non-blocking (its default); this makes sure it is.
    pub fn new(channel: Arc<CompChannel>) -> io::Result<Arc<AsyncCompChannel>> {
        channel.set_blocking(false)?;
        // SAFETY: the Arc keeps the CompChannel, and so its OwnedFd, alive as long as the
        // AsyncFd holds this ChanFd, and `as_raw_fd` always returns that fd.
        #[allow(unsafe_code)]
        let fd = unsafe { AsyncFd::register_with_interest(ChanFd(channel), Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Arc::new(AsyncCompChannel {
            fd,
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
            notify: Notify::new(),
        }))
    }

    /// The completion channel.
    pub fn channel(&self) -> &Arc<CompChannel> {
        &self.fd.get_ref().0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, u32)>> {
        // Plain counters: nothing half-updated survives a panic.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies the events counted for `cq` (`event_received` once each, then `ack_events`).
    pub(crate) fn apply(&self, cq: &Cq) {
        // Acquire: pairs with the Release store in read_all, so the counts pushed before it are
        // seen by the lock below (the lock orders them anyway; the flag only skips it).
        if !self.has_pending.load(Ordering::Acquire) {
            return;
        }
        let n = {
            let mut p = self.lock();
            let h = cq.user_handle();
            let n = match p.iter().position(|e| e.0 == h) {
                Some(i) => p.swap_remove(i).1,
                None => 0,
            };
            if p.is_empty() {
                // Relaxed: written under the lock; a stale `true` only costs a lock.
                self.has_pending.store(false, Ordering::Relaxed);
            }
            n
        };
        for _ in 0..n {
            cq.event_received();
        }
        if n > 0 {
            cq.ack_events(n);
        }
    }

    /// Reads every queued event (to `EAGAIN`), counting each for its CQ; wakes every waiter
    /// if any came. Returns `WouldBlock` at the end, which tells tokio the readiness is used
    /// up.
    fn read_all(&self) -> io::Result<()> {
        let mut got = false;
        while let Some(ev) = self.channel().try_get_event()? {
            let mut p = self.lock();
            match p.iter_mut().find(|e| e.0 == ev.cq_user_handle) {
                Some(e) => e.1 += 1,
                None => p.push((ev.cq_user_handle, 1)),
            }
            // Release: the count above is visible to whoever sees the flag (see apply).
            self.has_pending.store(true, Ordering::Release);
            got = true;
        }
        if got {
            self.notify.notify_waiters();
        }
        Err(io::ErrorKind::WouldBlock.into())
    }

    /// Waits until the channel is readable (then reads it) or another task read it.
    /// `notified` must have been enabled before the caller's last check.
    pub(crate) async fn wait(
        &self,
        notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
    ) -> io::Result<()> {
        crate::readable_or_notified(&self.fd, notified, |_| self.read_all()).await
    }
}

/// Polls `cq` into `out`, arming and sleeping on `ch` until at least one completion is there.
pub(crate) async fn wait_batch(
    cq: &Cq,
    ch: &AsyncCompChannel,
    out: &mut [WorkCompletion],
) -> io::Result<usize> {
    if out.is_empty() {
        return Err(Error::invalid("poll CQ", "empty completion buffer").into());
    }
    loop {
        ch.apply(cq);
        let n = cq.poll(out);
        if n > 0 {
            return Ok(n);
        }
        let mut notified = pin!(ch.notify.notified());
        notified.as_mut().enable();
        cq.req_notify(false)?;
        let n = cq.poll(out);
        if n > 0 {
            return Ok(n);
        }
        ch.wait(notified).await?;
    }
}

/// A CQ as a stream of completions, for any handle to the CQ (`Arc<Cq>`, `&Cq`).
///
/// Several `AsyncCq`s may share one [`AsyncCompChannel`] (CQs attached to one completion
/// channel). One task at a time should wait on a given `AsyncCq` (the CQ's ring lock makes
/// concurrent waits safe, but they compete for the same completions).
pub struct AsyncCq<C: Deref<Target = Cq>> {
    cq: C,
    ch: Arc<AsyncCompChannel>,
}

impl<C: Deref<Target = Cq>> fmt::Debug for AsyncCq<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCq")
            .field("cq", &*self.cq)
            .finish_non_exhaustive()
    }
}

impl<C: Deref<Target = Cq>> AsyncCq<C> {
    /// An async view of `cq`, whose completion channel `ch` wraps. Fails if the CQ has no
    /// channel or another one.
    pub fn new(cq: C, ch: Arc<AsyncCompChannel>) -> io::Result<AsyncCq<C>> {
        match cq.channel() {
            Some(c) if Arc::ptr_eq(c, ch.channel()) => Ok(AsyncCq { cq, ch }),
            Some(_) => Err(Error::invalid(
                format!("async CQ {}", cq.handle()),
                "the CQ reports to another completion channel than the one given",
            )
            .into()),
            None => Err(Error::invalid(
                format!("async CQ {}", cq.handle()),
                "the CQ has no completion channel",
            )
            .into()),
        }
    }

    /// An async view of `cq` with a registration of its own channel (the CQ must be the
    /// channel's only user in async code; for shared channels use [`AsyncCq::new`]).
    pub fn with_own_channel(cq: C) -> io::Result<AsyncCq<C>> {
        let ch = cq.channel().cloned().ok_or_else(|| {
            Error::invalid(
                format!("async CQ {}", cq.handle()),
                "the CQ has no completion channel",
            )
        })?;
        let ch = AsyncCompChannel::new(ch)?;
        Self::new(cq, ch)
    }

    /// The CQ.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// The channel registration.
    pub fn channel(&self) -> &Arc<AsyncCompChannel> {
        &self.ch
    }

    /// The next completion. Cancel-safe: dropping the future loses nothing.
    pub async fn next(&self) -> io::Result<WorkCompletion> {
        let mut wc = [WorkCompletion::default()];
        self.next_batch(&mut wc).await?;
        Ok(wc[0])
    }

    /// Waits for at least one completion and returns up to `out.len()` of them (how many are
    /// in `out`). Cancel-safe: completions are taken from the CQ only by the poll that returns.
    pub async fn next_batch(&self, out: &mut [WorkCompletion]) -> io::Result<usize> {
        wait_batch(&self.cq, &self.ch, out).await
    }
}
