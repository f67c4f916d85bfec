//! Small helpers shared by the object modules.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

/// Waits until `fd` is readable (`Ok(true)`) or `timeout` passes (`Ok(false)`); `None` waits
/// forever. Retries on EINTR with the remaining time.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<bool, Errno> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let ts = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            }
        });
        match poll(&mut fds, ts.as_ref()) {
            Ok(0) => return Ok(false),
            Ok(_) => {
                let r = fds[0].revents();
                if r.intersects(PollFlags::ERR | PollFlags::NVAL) {
                    return Err(Errno::IO);
                }
                return Ok(true);
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// A process-wide unique user handle for objects whose events name them.
pub fn next_user_handle() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: only uniqueness matters, not ordering with other memory.
    NEXT.fetch_add(1, Ordering::Relaxed)
}
