//! Events handed to C and acknowledged by C, counted per object so that destroying the
//! object waits until each one was acknowledged (libibverbs' contract for
//! `ibv_get_cq_event`/`ibv_ack_cq_events` and `ibv_get_async_event`/`ibv_ack_async_event`:
//! an event's object pointer stays valid until the event is acknowledged).

use std::sync::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct Counts {
    delivered: u64,
    acked: u64,
}

/// How many events of one object were delivered and how many acknowledged.
#[derive(Default)]
pub(crate) struct EventCount {
    counts: Mutex<Counts>,
    acked: Condvar,
}

impl EventCount {
    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One event of the object was handed to C. Called while the object is in its registry
    /// (under the registry's lock), so a destroy that took it out afterwards sees the count.
    pub(crate) fn delivered(&self) {
        self.lock().delivered += 1;
    }

    /// C acknowledged `n` events; `under_lock` runs while the count is locked (it updates
    /// the C structure's own counters, so concurrent acks do not race on them).
    pub(crate) fn ack(&self, n: u32, under_lock: impl FnOnce()) {
        let mut c = self.lock();
        c.acked += u64::from(n);
        under_lock();
        drop(c);
        self.acked.notify_all();
    }

    /// Blocks until every delivered event was acknowledged. Called by destroy after the
    /// object left its registry (so no event is delivered for it any more).
    pub(crate) fn wait_acked(&self) {
        let mut c = self.lock();
        while c.acked < c.delivered {
            c = self.acked.wait(c).unwrap_or_else(|p| p.into_inner());
        }
    }
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
            e2.ack(1, || {});
            std::thread::sleep(Duration::from_millis(100));
            let at = Instant::now();
            e2.ack(1, || {});
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
        let e = EventCount::default();
        e.wait_acked();
        let mut ran = false;
        e.ack(3, || ran = true);
        assert!(ran);
        e.delivered();
        e.wait_acked();
    }
}
