// A `SpinGuard` lends `&T` through `&self`; sharing a guard between threads must need
// `T: Sync`, or two threads could use a `Cell` (here, behind the lock) at once.
use std::cell::Cell;
use rverbs_uverbs::kernel::sync::SpinLock;

fn main() {
    let lock = SpinLock::new(Cell::new(0u32));
    let guard = lock.lock();
    std::thread::scope(|s| {
        s.spawn(|| guard.set(1));
        guard.set(2);
    });
}
