//! Waking the other waiters of a shared stream.
//!
//! Handles of one stream (`try_clone`, the halves of an `AsyncRdmaStream`) share its CQ, its
//! completion channel and its ledger. Whoever runs `progress` consumes the channel's events
//! and the completions for everybody, so a waiter cannot rely on the readiness fd alone: the
//! event it sleeps for may be read, and the completion it needs processed, by another
//! thread whose own call then returns — and nothing would wake the sleeper. So every
//! `progress` that consumed something tells the others, under the state lock:
//!
//! - blocking waiters: one of them (the leader) sleeps on the stream's fds (the completion
//!   channel and the rdma_cm channel) *and* on an eventfd of its own, all in one epoll that
//!   tells it which are ready; the others wait on a condvar. Progress writes the eventfd
//!   (once per sleep, and only while a leader sleeps) and notifies the condvar (only when
//!   followers wait); a leader that wakes up hands the fds on (notifies the condvar) so that
//!   a follower can lead. A lone waiter does no eventfd or condvar work.
//! - non-blocking callers that passed a [`Waker`] when they got `WouldBlock` (the tokio
//!   layer): progress wakes those wakers, in addition to the readiness fd.
//!
//! A waiter checks its condition, under the lock, after every wake-up; since progress and
//! the registration of a sleeper happen under the same lock, no progress falls between a
//! waiter's last check and its sleep unnoticed.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Instant;

use rustix::event::{eventfd, EventfdFlags};
use rustix::io::Errno;

/// Who waits on a stream; kept in the stream's locked state.
#[derive(Debug, Default)]
pub(crate) struct Sleepers {
    /// A blocking thread sleeps on the readiness fd and the eventfd.
    leader: bool,
    /// The eventfd was written since the leader went to sleep (its count is 1).
    signalled: bool,
    /// Blocking threads waiting on the condvar.
    followers: u32,
    /// Bumped on every progress: followers wait for it to change.
    gen: u64,
    /// Wakers of non-blocking callers that got `WouldBlock`; taken by the next progress.
    wakers: Vec<Waker>,
}

/// The eventfd and condvar that wake a stream's waiters (see the module doc).
#[derive(Debug)]
pub(crate) struct Wake {
    fd: OwnedFd,
    cv: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn os(op: &str, e: Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{op}: {e}"))
}

impl Wake {
    pub(crate) fn new() -> io::Result<Wake> {
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| os("eventfd", e))?;
        Ok(Wake {
            fd,
            cv: Condvar::new(),
        })
    }

    /// Progress was made (the caller holds the state lock): wakes every waiter, so that each
    /// checks its condition again.
    pub(crate) fn progressed(&self, s: &mut Sleepers) {
        s.gen = s.gen.wrapping_add(1);
        if s.leader && !s.signalled {
            s.signalled = true;
            // Cannot fail: the count is 0 here (the leader reads it back when it wakes).
            if let Err(e) = rustix::io::write(&self.fd, &1u64.to_ne_bytes()) {
                tracing::warn!("waking a stream's waiter: write eventfd: {e}");
            }
        }
        if s.followers > 0 {
            self.cv.notify_all();
        }
        for w in s.wakers.drain(..) {
            w.wake();
        }
    }

    /// Remembers `w` for the next progress (the caller holds the state lock and returns
    /// `WouldBlock`).
    pub(crate) fn register(&self, s: &mut Sleepers, w: &Waker) {
        if !s.wakers.iter().any(|x| x.will_wake(w)) {
            s.wakers.push(w.clone());
        }
    }

    /// Sleeps, with the lock `m` released, until `wait` returns (it waits on the stream's
    /// fds and on this eventfd, [`AsFd`], until one is readable or `deadline` passes; it is
    /// called again on `EINTR`), or another thread reports progress, or `deadline` passes;
    /// `sleepers` finds the [`Sleepers`] in the state. Returns the guard again, and what
    /// `wait` returned if this thread slept on the fds (then the ready ones should be read).
    /// The caller checks its condition and the deadline again.
    pub(crate) fn sleep<'a, S, T>(
        &self,
        m: &'a Mutex<S>,
        mut g: MutexGuard<'a, S>,
        sleepers: impl Fn(&mut S) -> &mut Sleepers,
        mut wait: impl FnMut(Option<Instant>) -> Result<T, Errno>,
        deadline: Option<Instant>,
    ) -> io::Result<(MutexGuard<'a, S>, Option<T>)> {
        let s = sleepers(&mut g);
        if s.leader {
            let gen = s.gen;
            s.followers += 1;
            loop {
                let left = match deadline {
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(l) if !l.is_zero() => Some(l),
                        _ => break,
                    },
                    None => None,
                };
                g = match left {
                    Some(l) => {
                        self.cv
                            .wait_timeout(g, l)
                            .unwrap_or_else(|p| p.into_inner())
                            .0
                    }
                    None => self.cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                };
                let s = sleepers(&mut g);
                if s.gen != gen || !s.leader {
                    break;
                }
            }
            sleepers(&mut g).followers -= 1;
            return Ok((g, None));
        }
        s.leader = true;
        s.signalled = false;
        drop(g);
        let r = loop {
            match wait(deadline) {
                Err(Errno::INTR) => continue,
                r => break r,
            }
        };
        let mut g = lock(m);
        let s = sleepers(&mut g);
        s.leader = false;
        if s.signalled {
            s.signalled = false;
            let mut b = [0u8; 8];
            if let Err(e) = rustix::io::read(&self.fd, &mut b) {
                tracing::warn!("waking a stream's waiter: read eventfd: {e}");
            }
        }
        if s.followers > 0 {
            // One of them may have to sleep on the fd now.
            self.cv.notify_all();
        }
        let t = r.map_err(|e| os("wait on the stream's fds", e))?;
        Ok((g, Some(t)))
    }
}

impl AsFd for Wake {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{PollFd, PollFlags};
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;
    use std::time::Duration;

    struct St {
        s: Sleepers,
        /// Stands in for the ledger: what the waiters wait for.
        items: u32,
    }

    struct Shared {
        m: Mutex<St>,
        w: Wake,
        /// Stands in for the completion channel: readable when an "event" is pending.
        rd: UnixStream,
    }

    fn shared() -> (Arc<Shared>, UnixStream) {
        let (rd, wr) = UnixStream::pair().unwrap();
        rd.set_nonblocking(true).unwrap();
        let sh = Shared {
            m: Mutex::new(St {
                s: Sleepers::default(),
                items: 0,
            }),
            w: Wake::new().unwrap(),
            rd,
        };
        (Arc::new(sh), wr)
    }

    /// As `progress`: consume the pending "event" and take what arrived.
    fn progress(sh: &Shared, st: &mut St, arrived: &Mutex<u32>) {
        let mut b = [0u8; 16];
        let mut moved = false;
        while (&sh.rd).read(&mut b).is_ok() {
            moved = true;
        }
        let n = std::mem::take(&mut *lock(arrived));
        if n > 0 || moved {
            st.items += n;
            sh.w.progressed(&mut st.s);
        }
    }

    /// As the stream's wait: until the "channel" or the eventfd is readable.
    fn poll_both(sh: &Shared, deadline: Option<Instant>) -> Result<(), Errno> {
        let mut fds = [
            PollFd::new(&sh.rd, PollFlags::IN),
            PollFd::new(&sh.w, PollFlags::IN),
        ];
        rverbs_uverbs::kernel::fd::poll_until(&mut fds, deadline).map(drop)
    }

    /// Waits (as `wait_for`) for `items > 0` and takes one; `None` on the deadline.
    fn wait_item(sh: &Shared, arrived: &Mutex<u32>, deadline: Instant) -> Option<()> {
        let mut g = lock(&sh.m);
        loop {
            progress(sh, &mut g, arrived);
            if g.items > 0 {
                g.items -= 1;
                return Some(());
            }
            if Instant::now() >= deadline {
                return None;
            }
            g =
                sh.w.sleep(&sh.m, g, |s| &mut s.s, |d| poll_both(sh, d), Some(deadline))
                    .unwrap()
                    .0;
        }
    }

    /// The lost wake-up: a thread sleeps on the readiness fd; another thread consumes the
    /// event (and the item) the sleeper waits for. Without the eventfd the sleeper sleeps
    /// until its deadline.
    #[test]
    fn progress_by_another_thread_wakes_the_fd_sleeper() {
        let (sh, _wr) = shared();
        let arrived = Arc::new(Mutex::new(0u32));
        let t0 = Instant::now();
        let (sh2, a2) = (sh.clone(), arrived.clone());
        let sleeper = std::thread::spawn(move || {
            wait_item(&sh2, &a2, Instant::now() + Duration::from_secs(20))
        });
        // Wait until it sleeps on the fd.
        while !lock(&sh.m).s.leader {
            std::thread::sleep(Duration::from_millis(1));
        }
        // "A completion" arrives and this thread's progress takes it (as if it had also read
        // the channel's event before the sleeper's poll saw the fd readable): the fd stays
        // quiet.
        {
            let mut g = lock(&sh.m);
            *lock(&arrived) += 1;
            progress(&sh, &mut g, &arrived);
            assert_eq!(g.items, 1);
        }
        assert_eq!(sleeper.join().unwrap(), Some(()));
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the sleeper was not woken"
        );
        assert_eq!(lock(&sh.m).items, 0);
    }

    /// Several blocking waiters (one on the fd, the others on the condvar) and a producer
    /// that delivers items by progress of its own only: every item reaches a waiter, none
    /// waits out its deadline.
    #[test]
    fn every_waiter_is_woken_by_progress() {
        let (sh, _wr) = shared();
        let arrived = Arc::new(Mutex::new(0u32));
        let t0 = Instant::now();
        let per = 200;
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let (sh, a) = (sh.clone(), arrived.clone());
                std::thread::spawn(move || {
                    let d = Instant::now() + Duration::from_secs(30);
                    (0..per).all(|_| wait_item(&sh, &a, d).is_some())
                })
            })
            .collect();
        for i in 0..3 * per {
            *lock(&arrived) += 1;
            let mut g = lock(&sh.m);
            progress(&sh, &mut g, &arrived);
            drop(g);
            if i % 7 == 0 {
                std::thread::yield_now();
            }
        }
        for w in waiters {
            assert!(w.join().unwrap(), "a waiter waited out its deadline");
        }
        assert!(t0.elapsed() < Duration::from_secs(20));
        let g = lock(&sh.m);
        assert_eq!((g.items, g.s.followers, g.s.leader), (0, 0, false));
    }

    /// A follower's deadline is kept while the leader sleeps on.
    #[test]
    fn a_follower_times_out() {
        let (sh, _wr) = shared();
        let arrived = Mutex::new(0u32);
        let sh2 = sh.clone();
        let leader = std::thread::spawn(move || {
            let a = Mutex::new(0u32);
            wait_item(&sh2, &a, Instant::now() + Duration::from_secs(1))
        });
        while !lock(&sh.m).s.leader {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t0 = Instant::now();
        assert_eq!(
            wait_item(&sh, &arrived, Instant::now() + Duration::from_millis(100)),
            None
        );
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert_eq!(leader.join().unwrap(), None);
    }

    /// A registered waker is woken by the next progress, once.
    #[test]
    fn wakers_are_woken_by_progress() {
        struct Count(std::sync::atomic::AtomicU32);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let c = Arc::new(Count(Default::default()));
        let w = Waker::from(c.clone());
        let wake = Wake::new().unwrap();
        let mut s = Sleepers::default();
        wake.register(&mut s, &w);
        wake.register(&mut s, &w);
        wake.progressed(&mut s);
        wake.progressed(&mut s);
        assert_eq!(c.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
