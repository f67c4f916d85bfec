//! The two things every rverbs file descriptor needs (uverbs' async event fd and completion
//! channels, the rdma_cm's event channel): switching `O_NONBLOCK`, and waiting for
//! readability with a deadline. One implementation, used by this crate and `rverbs-cm`.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::OFlags;
use rustix::io::Errno;

/// Sets or clears `O_NONBLOCK` on `fd`, keeping its other status flags. The flag belongs to
/// the open file, so it applies to every holder of a duplicate of `fd`.
pub fn set_nonblocking(fd: impl AsFd, nonblocking: bool) -> Result<(), Errno> {
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    let want = if nonblocking {
        flags | OFlags::NONBLOCK
    } else {
        flags - OFlags::NONBLOCK
    };
    if want != flags {
        rustix::fs::fcntl_setfl(&fd, want)?;
    }
    Ok(())
}

/// One `poll(2)` of `fds` that returns at `deadline` at the latest (`None`: no deadline).
/// Returns how many fds have events (0: the deadline passed). `EINTR` is returned as is, so
/// that a caller with state to refresh can do so before polling again.
pub fn poll_until(fds: &mut [PollFd<'_>], deadline: Option<Instant>) -> Result<usize, Errno> {
    let ts = deadline.map(|d| {
        let left = d.saturating_duration_since(Instant::now());
        Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        }
    });
    poll(fds, ts.as_ref())
}

/// Waits until `fd` is readable (`Ok(true)`) or `timeout` passes (`Ok(false)`); `None` waits
/// forever. Retries on EINTR with the remaining time; `POLLERR`/`POLLNVAL` are `EIO`.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<bool, Errno> {
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll_until(&mut fds, deadline) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonblocking_flag_and_readable_wait() {
        let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        set_nonblocking(&r, true).unwrap();
        assert!(rustix::fs::fcntl_getfl(&r)
            .unwrap()
            .contains(OFlags::NONBLOCK));
        assert_eq!(
            rustix::io::read(&r, &mut [0u8; 1]).unwrap_err(),
            Errno::AGAIN
        );
        assert!(!poll_readable(r.as_fd(), Some(Duration::from_millis(1))).unwrap());
        rustix::io::write(&w, b"x").unwrap();
        assert!(poll_readable(r.as_fd(), None).unwrap());
        set_nonblocking(&r, false).unwrap();
        assert!(!rustix::fs::fcntl_getfl(&r)
            .unwrap()
            .contains(OFlags::NONBLOCK));
        let mut fds = [PollFd::new(&r, PollFlags::IN)];
        assert_eq!(poll_until(&mut fds, Some(Instant::now())).unwrap(), 1);
    }
}
