//! Events handed to C and acknowledged by C, counted per object so that destroying the
//! object waits until each one was acknowledged (libibverbs' contract for
//! `ibv_get_cq_event`/`ibv_ack_cq_events` and `ibv_get_async_event`/`ibv_ack_async_event`,
//! librdmacm's for `rdma_get_cm_event`/`rdma_ack_cm_event`: an event's object pointer stays
//! valid until the event is acknowledged).
//!
//! Destroy frees the object the moment its wait sees the last ack, on its own thread, so an
//! ack must not touch the object once its count can be seen. rdma-core counts under the
//! object's mutex, which destroy re-takes, and touches nothing after the unlock. Here the ack
//! is one atomic addition, its last access to the object; the wake-up of a waiting destroy
//! goes through a lock and a condition variable that are never freed ([`WAKE`]), the one the
//! destroy re-takes to check the count.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};

/// Set in [`EventCount::acked`] once a destroy waits for the object's acks.
const WAITING: u64 = 1 << 63;

/// The lock a waiting destroy checks the count under, and the condition variable it waits
/// on: shared by all objects (a destroy that waits is rare, and wakes only to re-check), and
/// static, so that an ack can wake a destroy without touching the object it may free.
static WAKE: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

/// How many events of one object were delivered and how many acknowledged. Delivering and
/// acknowledging an event are one atomic addition each; an ack takes [`WAKE`]'s lock only
/// while a destroy waits for the object.
#[derive(Default)]
pub(crate) struct EventCount {
    delivered: AtomicU64,
    /// Acknowledged events (the low 63 bits) and [`WAITING`].
    acked: AtomicU64,
}

impl EventCount {
    /// One event of the object was handed to C. Called while the object is in its registry
    /// (under the registry's lock), so a destroy that took it out afterwards sees the count.
    pub(crate) fn delivered(&self) {
        self.delivered.fetch_add(1, SeqCst);
    }

    /// C acknowledged `n` events. The addition is the last access to `self`: from then on a
    /// destroy may have seen it and freed the object.
    pub(crate) fn ack(&self, n: u32) {
        let before = self.acked.fetch_add(u64::from(n), SeqCst);
        // `self` may be gone from here on. A destroy that set WAITING before our addition
        // (in the one order of `acked`'s changes) is woken here; one that set it after saw
        // the addition in that same read-modify-write.
        if before & WAITING != 0 {
            // The lock the waiter checks under: taken after our addition, so the waiter is
            // either before its check (which sees the addition) or in its wait (notified).
            drop(WAKE.0.lock().unwrap_or_else(|p| p.into_inner()));
            WAKE.1.notify_all();
        }
    }

    /// Whether every delivered event was acknowledged (`delivered` is final: see
    /// [`wait_acked`](Self::wait_acked)).
    fn all_acked(&self, delivered: u64) -> bool {
        self.acked.load(SeqCst) & !WAITING >= delivered
    }

    /// Blocks until every delivered event was acknowledged. Called by destroy after the
    /// object left its registry (so no event is delivered for it any more); the caller may
    /// free the object as soon as this returns.
    pub(crate) fn wait_acked(&self) {
        let delivered = self.delivered.load(SeqCst);
        if self.all_acked(delivered) {
            return;
        }
        self.acked.fetch_or(WAITING, SeqCst);
        let mut g = WAKE.0.lock().unwrap_or_else(|p| p.into_inner());
        while !self.all_acked(delivered) {
            g = WAKE.1.wait(g).unwrap_or_else(|p| p.into_inner());
        }
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

    /// The object is freed as soon as destroy's wait returns (`ibv_destroy_cq` after the
    /// last `ibv_ack_cq_events`, `rdma_destroy_id` after the last `rdma_ack_cm_event`): the
    /// ack must not touch it once its count can be seen (issue 31: the old `ack` loaded
    /// its waiter count after the addition, a use-after-free Miri reports as a data race
    /// with the deallocation). `ack_first`: destroy starts only once the ack counted (the
    /// interleaving that lost); otherwise destroy waits first and is woken.
    #[test]
    fn destroy_frees_the_moment_the_last_ack_counts() {
        for ack_first in [true, false] {
            let e = Box::into_raw(Box::new(EventCount::default()));
            // SAFETY: a fresh allocation, freed below only after these uses.
            unsafe { &*e }.delivered();
            struct Obj(*const EventCount);
            // SAFETY: EventCount is Sync; the pointer is only dereferenced as below.
            unsafe impl Send for Obj {}
            let obj = Obj(e);
            let acker = std::thread::spawn(move || {
                let obj = obj;
                // SAFETY: alive until destroy's wait returns, which it does only once this
                // ack counted: what this test checks is that nothing after that touches it.
                unsafe { &*obj.0 }.ack(1);
            });
            if ack_first {
                // SAFETY: alive (freed below).
                while unsafe { &*e }.acked.load(SeqCst) == 0 {
                    std::thread::yield_now();
                }
            }
            // SAFETY: alive (freed below).
            unsafe { &*e }.wait_acked();
            // SAFETY: boxed above; the wait returned, as destroy frees its object.
            drop(unsafe { Box::from_raw(e) });
            acker.join().unwrap();
        }
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
