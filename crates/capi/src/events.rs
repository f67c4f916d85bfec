//! Events handed to C and acknowledged by C, counted per object so that destroying the
//! object waits until each one was acknowledged (libibverbs' contract for
//! `ibv_get_cq_event`/`ibv_ack_cq_events` and `ibv_get_async_event`/`ibv_ack_async_event`:
//! an event's object pointer stays valid until the event is acknowledged).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};

/// How many events of one object were delivered and how many acknowledged. The hot path
/// (an event delivered, an event acknowledged) is two atomic additions; only a destroy that
/// has to wait takes the lock, and an ack takes it only while a destroy waits.
#[derive(Default)]
pub(crate) struct EventCount {
    delivered: AtomicU64,
    acked: AtomicU64,
    /// Destroys waiting in [`wait_acked`](Self::wait_acked).
    waiters: AtomicU32,
    lock: Mutex<()>,
    all_acked: Condvar,
}

impl EventCount {
    /// One event of the object was handed to C. Called while the object is in its registry
    /// (under the registry's lock), so a destroy that took it out afterwards sees the count.
    pub(crate) fn delivered(&self) {
        self.delivered.fetch_add(1, SeqCst);
    }

    /// C acknowledged `n` events.
    pub(crate) fn ack(&self, n: u32) {
        self.acked.fetch_add(u64::from(n), SeqCst);
        // SeqCst: either this load sees a waiter's increment, or that waiter's check (after
        // its increment) sees our addition. Taking the lock before notifying keeps a waiter
        // from being between its check and its wait.
        if self.waiters.load(SeqCst) != 0 {
            drop(self.lock.lock().unwrap_or_else(|p| p.into_inner()));
            self.all_acked.notify_all();
        }
    }

    /// Blocks until every delivered event was acknowledged. Called by destroy after the
    /// object left its registry (so no event is delivered for it any more).
    pub(crate) fn wait_acked(&self) {
        self.waiters.fetch_add(1, SeqCst);
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.acked.load(SeqCst) < self.delivered.load(SeqCst) {
            g = self.all_acked.wait(g).unwrap_or_else(|p| p.into_inner());
        }
        drop(g);
        self.waiters.fetch_sub(1, SeqCst);
    }
}

/// Adds `n` to a counter field of a C structure (`comp_events_completed`, …) with one atomic
/// addition, so that concurrent acks of one object do not race among our threads.
///
/// # Safety
/// `field` points to a live, 4-byte aligned `u32` of a C structure (\[c-struct\]) that this
/// library accesses only through this function after the object's creation.
pub(crate) unsafe fn add_to_c_counter(field: *mut u32, n: u32) {
    // SAFETY: caller's promise above ([c-struct]): valid and aligned for AtomicU32, and no
    // non-atomic access of ours to it races with this one.
    unsafe { AtomicU32::from_ptr(field) }.fetch_add(n, SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn wait_returns_only_after_the_last_ack() {
        let e = Arc::new(EventCount::default());
        e.delivered();
        e.delivered();
        let t0 = Instant::now();
        let e2 = e.clone();
        let acker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            e2.ack(1);
            std::thread::sleep(Duration::from_millis(100));
            let at = Instant::now();
            e2.ack(1);
            at
        });
        e.wait_acked();
        let returned = Instant::now();
        let last_ack = acker.join().unwrap();
        assert!(
            returned >= last_ack,
            "destroy's wait returned before the last ack"
        );
        assert!(t0.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn nothing_delivered_means_no_wait_and_extra_acks_do_not_block() {
        let mut field = 5u32;
        // SAFETY: a live, aligned local.
        unsafe { add_to_c_counter(&mut field, 2) };
        assert_eq!(field, 7);
        let e = EventCount::default();
        e.wait_acked();
        e.ack(3);
        e.delivered();
        e.wait_acked();
    }
}
