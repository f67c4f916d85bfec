//! The one lock of the data path: [`SpinLock`], around each CQ's, QP's and SRQ's provider
//! object and around each mlx5 BlueFlame register.

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A lock for short critical sections on the data path: one compare-and-swap to take it and
/// one store to release it when uncontended, no poisoning.
///
/// Cheaper than `std::sync::Mutex` on the post/poll path, which also checks and records
/// panics for poisoning. Poisoning would not help here anyway: the rings publish their indices
/// atomically, so a panic inside a critical section cannot leave a ring half-updated for the
/// next holder (the guard still releases the lock while unwinding). A contended `lock` spins
/// briefly, then yields the CPU until the holder is done: critical sections are short (ring
/// work, a doorbell or BlueFlame copy, at most one syscall for an arm, doorbell or resize), so
/// nobody waits long.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out access to `value` to one thread at a time (see `lock`), so
// sharing a `SpinLock` between threads only ever moves the use of `T` between threads, which
// `T: Send` allows.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> fmt::Debug for SpinLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: a snapshot for printing only.
        let locked = self.locked.load(Ordering::Relaxed);
        f.debug_struct("SpinLock")
            .field("locked", &locked)
            .finish_non_exhaustive()
    }
}

impl<T> SpinLock<T> {
    /// An unlocked lock around `value`.
    pub const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock (waiting while another thread holds it).
    #[inline(always)]
    pub fn lock(&self) -> SpinGuard<'_, T> {
        // Acquire: what the previous holder did to `value` (released by its Release store in
        // SpinGuard::drop) happens before our use of it.
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        SpinGuard {
            lock: self,
            _value: PhantomData,
        }
    }

    /// True while a guard of this lock lives (tests: what runs under which lock).
    #[cfg(test)]
    pub(crate) fn is_locked(&self) -> bool {
        self.locked.load(Ordering::SeqCst)
    }

    /// The value, through exclusive access to the lock (no locking needed).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
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

/// Access to the value of a locked [`SpinLock`]; releases the lock when dropped.
///
/// Shared between threads (`Sync`) only when `T` is `Sync`, as `std`'s `MutexGuard`: a
/// `&SpinGuard` hands out `&T`.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
    /// Makes the guard `Sync` only for `T: Sync` (and `Send` only for `T: Send`).
    _value: PhantomData<&'a mut T>,
}

impl<T: fmt::Debug> fmt::Debug for SpinGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard exists only while its thread holds the lock, so no other
        // reference to the value exists but those made through this guard (see `lock`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference made through the
        // guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        // Release: our uses of the value happen before the next holder's Acquire.
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SpinLock;
    use std::sync::Arc;

    /// Threads incrementing a plain counter under the lock never lose an increment.
    #[test]
    fn spin_lock_excludes() {
        let l = Arc::new(SpinLock::new(0u64));
        let n = if cfg!(miri) { 200 } else { 20_000 };
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for _ in 0..n {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*l.lock(), 4 * n);
    }

    /// A panic while holding the lock releases it (no poisoning).
    #[test]
    fn spin_lock_released_by_panic() {
        let l = Arc::new(SpinLock::new(1u32));
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
