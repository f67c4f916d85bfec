//! The watchdog of the `-e` loop: ends the process when the ping-pong stops moving.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bounds the `-e` loop's waits without a timeout on each one: the loop sleeps in a plain
/// blocking `read(2)` of the channel (one system call per event, as the C tool), and this
/// thread ends the process with the idle error if the loop's counters do not move for the
/// idle limit (checked every [`WATCHDOG_CHECK`], or a quarter of a shorter limit). A blocked
/// read cannot be interrupted soundly from another thread without a signal handler; exiting
/// is what the loop would do anyway (print the error, exit 1), and the kernel releases the
/// QP, CQ, MR and mappings of an exiting process.
pub(super) struct Watchdog {
    shared: Arc<WatchShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct WatchShared {
    /// `scnt << 32 | rcnt`, stored by the loop after every event.
    progress: AtomicU64,
    stop: AtomicBool,
}

/// How often the watchdog looks at the loop's progress.
const WATCHDOG_CHECK: Duration = Duration::from_secs(10);

impl Watchdog {
    pub(super) fn start(iters: u32, idle: Duration) -> io::Result<Watchdog> {
        let check = WATCHDOG_CHECK.min(idle / 4);
        let shared = Arc::new(WatchShared {
            progress: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("rc-pingpong watchdog".into())
            .spawn(move || {
                let mut last = u64::MAX;
                let mut since = Instant::now();
                loop {
                    std::thread::park_timeout(check);
                    // Relaxed: the flag carries no data; a late look only delays the exit.
                    if sh.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    // Relaxed: a plain counter; all we need is to see it change eventually.
                    let p = sh.progress.load(Ordering::Relaxed);
                    let now = Instant::now();
                    if p != last {
                        last = p;
                        since = now;
                    } else if now.duration_since(since) >= idle {
                        eprintln!(
                            "rverbs rc-pingpong: {}",
                            idle_message(idle, (p >> 32) as u32, p as u32, iters)
                        );
                        std::process::exit(1);
                    }
                }
            })?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
        })
    }

    #[inline]
    pub(super) fn progress(&self, scnt: u32, rcnt: u32) {
        // Relaxed: read only by the watchdog, which needs no other memory with it.
        self.shared
            .progress
            .store(u64::from(scnt) << 32 | u64::from(rcnt), Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

pub(super) fn idle_message(idle: Duration, scnt: u32, rcnt: u32, iters: u32) -> String {
    format!(
        "no completion for {} s: the remote side stopped or cannot reach us (sent {scnt}, \
         received {rcnt} of {iters} messages)",
        idle.as_secs(),
    )
}
