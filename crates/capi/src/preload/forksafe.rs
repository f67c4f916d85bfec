//! rdma-core's fork mode (`RDMAV_FORK_SAFE` set to a nonzero number, as rdma-core's
//! `atoi` reads it): TCP connections start as ordinary TCP and move to an rsocket on their
//! first data call, in whichever process makes it, so a server that accepts and then forks
//! (the child serving the connection) works.
//!
//! In this mode `socket` makes only the real socket, and this module's table (beside the
//! rsocket table of `super`) remembers it as [`State::Fresh`]; `listen` makes it
//! [`State::Listening`], whose `accept`ed connections are [`State::Passive`]; `connect` makes
//! it [`State::Active`]. Until the switch every call goes to the real socket. The switch
//! ([`resolve`], from the data calls, the readiness calls, `dup*` and `epoll_ctl`) speaks
//! rdma-core's protocol, so either end may be rdma-core's preload in the same mode:
//!
//! - **passive** (the accepting side): an rsocket listens on the wildcard address of the
//!   connection's family at the connection's local port, then a 4-byte zero goes over the
//!   TCP connection; the peer's rsocket connection is accepted, the TCP connection shut down,
//!   and the number is the rsocket's from then on. Listening on the port is serialized
//!   between processes: rdma-core takes the named semaphore `/rsocket_fork`, ours an
//!   `flock` on [`LOCK_FILE`], which the kernel releases when its holder dies (a process
//!   killed mid-switch leaves no lock held). Where rdma-core then blocks in `raccept` until
//!   some rsocket connects, ours waits for the listener *or* the TCP connection: a peer that
//!   does not switch (it sends on TCP, or closes) ends the wait, and the number stays TCP.
//! - **active** (the connecting side): a wait (libc's `poll`, blocking) for the TCP
//!   connection's first bytes, then a `MSG_PEEK` of 4 bytes; an error on the connection (a
//!   refused non-blocking `connect`) ends the wait and stays for the program (`SO_ERROR`,
//!   its next call), the number TCP. A zero means the peer listens on rsockets: `rconnect` to the TCP peer's
//!   address, then the TCP connection is shut down. Anything else (other bytes, end of
//!   stream, an error): the number stays TCP with the peeked bytes unread. Where `rconnect`
//!   fails after the zero, ours reads the zero (rdma-core leaves it in the stream) and stays
//!   TCP (the passive side, if ours, sees the TCP data and stays TCP too); a plain TCP
//!   server whose data begins with four zero bytes loses them to the program so.
//!
//! A switch works on a private `F_DUPFD_CLOEXEC` copy of the socket and settles the number
//! only if it is still its own ([`State::Switching`]'s generation): a `close` or `dup2` onto
//! the number meanwhile leaves the new file alone (the switch's rsocket is closed).
//!
//! Loopback connections stay TCP (as everywhere in the preload). After a switch the
//! program's number keeps the shut-down TCP socket as its placeholder (as every table
//! number has one), and `O_NONBLOCK`, `SO_REUSEADDR` and `TCP_NODELAY` are copied to the
//! rsocket (rdma-core's `copysockopts`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use libc::{c_int, socklen_t};

use super::Sock;
use crate::ibverbs::set_errno;
use crate::preload::errno;
use crate::preload::real::real;
use crate::rsocket as r;

/// Where a fork-mode TCP socket is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Made by `socket`: neither listening nor connected yet.
    Fresh,
    /// Listening (on TCP): what it accepts is [`State::Passive`].
    Listening,
    /// Connected by `connect`: switches as the connecting side.
    Active,
    /// Accepted: switches as the accepting side.
    Passive,
    /// A thread is switching it now (others wait for it); the number tells this switch from
    /// a later one of the same fd number (the program may `close` or `dup2` onto the number
    /// meanwhile, and a new socket get it).
    Switching(u64),
}

/// Whether the mode is on: `RDMAV_FORK_SAFE` set to a number other than 0, read once
/// (rdma-core reads it with `atoi`: a leading integer, anything else is 0).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var("RDMAV_FORK_SAFE")
            .ok()
            .is_some_and(|v| atoi(&v) != 0)
    })
}

/// C's `atoi` (leading blanks, a sign, digits; the rest ignored; nothing: 0).
pub(crate) fn atoi(s: &str) -> i64 {
    let t = s.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let mut n: i64 = 0;
    for b in t.bytes().take_while(u8::is_ascii_digit) {
        n = n.saturating_mul(10).saturating_add(i64::from(b - b'0'));
    }
    if neg {
        -n
    } else {
        n
    }
}

/// The fork-mode sockets by the program's number.
static PENDING: Mutex<BTreeMap<c_int, State>> = Mutex::new(BTreeMap::new());
/// Signalled when a [`State::Switching`] entry is settled.
static SETTLED: Condvar = Condvar::new();

thread_local! {
    /// Set while this thread switches a socket.
    static SWITCHING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marked while [`PENDING`] holds the number.
static MARKS: super::FdMarks = super::FdMarks::new();

pub(crate) fn pending() -> MutexGuard<'static, BTreeMap<c_int, State>> {
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

fn mark(fd: c_int, on: bool) {
    MARKS.set(fd, on);
}

/// Whether [`PENDING`] may hold `fd` (one atomic load below 65536).
pub(crate) fn maybe(fd: c_int) -> bool {
    MARKS.maybe(fd)
}

/// `fd`'s state, if it is a fork-mode socket.
pub(crate) fn state(fd: c_int) -> Option<State> {
    if !maybe(fd) {
        return None;
    }
    pending().get(&fd).copied()
}

/// Records `fd` in `st`.
pub(crate) fn set(fd: c_int, st: State) {
    super::fork::register();
    let mut p = pending();
    mark(fd, true);
    p.insert(fd, st);
}

/// Forgets `fd` (closed, or staying TCP): from now on a plain number.
pub(crate) fn forget(fd: c_int) {
    if !maybe(fd) {
        return;
    }
    let mut p = pending();
    if p.remove(&fd).is_some() {
        mark(fd, false);
    }
    drop(p);
    SETTLED.notify_all();
}

/// `new` is a `dup` of `old`: a fresh or listening fork-mode `old` makes `new` the same
/// (accepted and connected ones were switched or left before the `dup`).
pub(crate) fn copy(old: c_int, new: c_int) {
    if let Some(st @ (State::Fresh | State::Listening)) = state(old) {
        set(new, st);
    }
}

/// Whether the real socket `fd` is bound to a loopback address (a fork-mode listener there
/// stays TCP, as the preload's loopback rule).
pub(crate) fn name_is_loopback(fd: c_int) -> bool {
    name_of(fd, false).is_ok_and(|(ss, len)| is_loopback(&ss, len))
}

/// In the child of a fork: forgets the switches that another thread of the parent was
/// making (that thread is not in the child; the parent finishes them and shuts the TCP
/// connection, so the child's copy reads end of stream). Called with the lock held.
pub(crate) fn child_after_fork(p: &mut BTreeMap<c_int, State>) {
    p.retain(|&fd, st| {
        let keep = !matches!(st, State::Switching(_));
        if !keep {
            mark(fd, false);
        }
        keep
    });
}

/// Switches `fd` to an rsocket if it is an accepted or connected fork-mode socket that has
/// not switched yet (see the module's doc); waits while another thread switches it. On
/// return `fd` is in the rsocket table (switched) or a plain number (stayed TCP), or still
/// a fresh or listening fork-mode socket. `errno` is kept.
pub(crate) fn resolve(fd: c_int) {
    if !maybe(fd) || SWITCHING_HERE.get() {
        // Not pending; or a call the switch itself makes (our rsockets' `rpoll` calls
        // `poll`, which is the preload's own in the library): it must not wait for itself.
        return;
    }
    let saved = errno();
    let mut p = pending();
    let st = loop {
        match p.get(&fd).copied() {
            Some(State::Switching(_)) => {
                p = SETTLED.wait(p).unwrap_or_else(|e| e.into_inner());
            }
            other => break other,
        }
    };
    let passive = match st {
        Some(State::Passive) => true,
        Some(State::Active) => false,
        _ => return,
    };
    // The switch works on a private copy of the socket, made while the lock keeps `close`
    // (which forgets the number before closing it) out: the program may close the number,
    // or `dup2` onto it, and a new socket get it, while the switch runs.
    // The copy's number is 3 or above: a daemon without standard streams must not find its
    // stderr writes in the connection.
    // SAFETY: integers only.
    let copy = unsafe { (real().fcntl)(fd, libc::F_DUPFD_CLOEXEC, 3) };
    // No number for a copy (EMFILE, ENFILE): the switch runs on `fd` itself, as rdma-core's
    // does (a close of the number meanwhile is then the program's race). Letting this call
    // through to TCP instead would put the switch's 4-byte zero, or the peer's, in the
    // middle of the program's data when a later call switched.
    let own = if copy < 0 {
        super::calls::log(&format!(
            "fd {fd}: fork mode: switching on the number itself (F_DUPFD_CLOEXEC: {})",
            std::io::Error::last_os_error()
        ));
        fd
    } else {
        copy
    };
    static GENERATION: AtomicU64 = AtomicU64::new(0);
    let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
    p.insert(fd, State::Switching(generation));
    drop(p);
    SWITCHING_HERE.set(true);
    let outcome = if passive {
        switch_passive(own)
    } else {
        switch_active(own)
    };
    SWITCHING_HERE.set(false);
    let domain = domain_of(own);
    if copy >= 0 {
        // SAFETY: integers only; the copy is ours.
        unsafe { (real().close)(copy) };
    }
    // The number is settled only if it is still this switch's (not closed or replaced
    // since); the locks in `fork::prepare`'s order (the table's, then this module's).
    let mut t = super::table();
    let mut p = pending();
    let ours = p.get(&fd) == Some(&State::Switching(generation));
    if ours {
        p.remove(&fd);
        mark(fd, false);
    }
    let (before, orphan) = match outcome {
        Ok(rs) if ours => {
            // The rsocket table first (both locks held: a concurrent call sees it in one
            // of them).
            super::mark(fd, true);
            (t.insert(fd, Arc::new(Sock { rs, domain })), None)
        }
        Ok(rs) => (None, Some(rs)),
        Err(_) => (None, None),
    };
    drop(p);
    drop(t);
    SETTLED.notify_all();
    drop(before);
    if let Some(rs) = orphan {
        // SAFETY: integers only; the rsocket is ours, the number it was for is gone.
        unsafe { r::rclose(rs) };
    }
    let side = if passive {
        "accepting side"
    } else {
        "connecting side"
    };
    match (&outcome, ours) {
        (Ok(_), true) => {
            super::calls::log(&format!("fd {fd}: fork mode: moved to an rsocket ({side})"))
        }
        (Ok(_), false) => super::calls::log(&format!(
            "fd {fd}: fork mode: switched ({side}), but the number was closed or replaced \
             meanwhile: the rsocket is closed"
        )),
        (Err(why), _) => super::calls::log(&format!("fd {fd}: fork mode: stays TCP ({why})")),
    }
    set_errno(saved);
}

/// The address family of the real socket `fd` (`AF_INET` when it cannot be read).
fn domain_of(fd: c_int) -> c_int {
    let mut d: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: [out] a c_int of ours and its size.
    let ret = unsafe {
        (real().getsockopt)(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut d as *mut c_int).cast(),
            &mut len,
        )
    };
    if ret == 0 {
        d
    } else {
        libc::AF_INET
    }
}

/// The real socket's local (`peer` false) or peer address.
fn name_of(fd: c_int, peer: bool) -> Result<(libc::sockaddr_storage, socklen_t), String> {
    // SAFETY: all-zero bytes are a sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as socklen_t;
    let f = if peer {
        real().getpeername
    } else {
        real().getsockname
    };
    // SAFETY: [out] ss has len bytes.
    if unsafe {
        f(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    } < 0
    {
        return Err(format!(
            "{}: {}",
            if peer { "getpeername" } else { "getsockname" },
            std::io::Error::last_os_error()
        ));
    }
    Ok((ss, len))
}

/// Whether `(ss, len)` is a loopback address.
fn is_loopback(ss: &libc::sockaddr_storage, len: socklen_t) -> bool {
    // SAFETY: [buf] ss has len (≤ its size) bytes.
    unsafe { super::calls::loopback((ss as *const libc::sockaddr_storage).cast(), len) }
}

/// An rsocket of `domain` with the preload's `RS_*` options; closed on drop unless taken.
struct Made(c_int);

impl Made {
    fn new(domain: c_int) -> Result<Made, String> {
        // SAFETY: integers only.
        let rs = unsafe { r::rsocket(domain, libc::SOCK_STREAM, 0) };
        if rs < 0 {
            return Err(format!("rsocket: {}", std::io::Error::last_os_error()));
        }
        super::calls::apply_env_options(rs);
        Ok(Made(rs))
    }

    fn take(self) -> c_int {
        let rs = self.0;
        std::mem::forget(self);
        rs
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        // SAFETY: integers only; our own rsocket.
        unsafe { r::rclose(self.0) };
    }
}

/// Copies `O_NONBLOCK`, `SO_REUSEADDR` and `TCP_NODELAY` of the real socket `fd` to `rs`.
fn copy_options(fd: c_int, rs: c_int) {
    let rl = real();
    // SAFETY: integers only.
    let fl = unsafe { (rl.fcntl)(fd, libc::F_GETFL) };
    if fl >= 0 {
        // SAFETY: integers only.
        unsafe { r::rfcntl(rs, libc::F_SETFL, fl & libc::O_NONBLOCK) };
    }
    for (level, name) in [
        (libc::SOL_SOCKET, libc::SO_REUSEADDR),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY),
    ] {
        let mut v: c_int = 0;
        let mut len = size_of::<c_int>() as socklen_t;
        // SAFETY: [out] a c_int of ours and its size.
        let got =
            unsafe { (rl.getsockopt)(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
        if got == 0 && v != 0 {
            // SAFETY: [buf] a c_int of ours and its size.
            unsafe { r::rsetsockopt(rs, level, name, (&v as *const c_int).cast(), len) };
        }
    }
}

/// The file whose `flock` serializes the passive switches of this machine's processes.
pub(crate) const LOCK_FILE: &str = "/dev/shm/rverbs-rsocket-fork.lock";

/// Holds [`LOCK_FILE`]'s `flock` until dropped (`None` inside: the file could not be
/// opened or locked, so the switch goes on unserialized, said once on stderr).
pub(crate) struct PortLock(Option<(std::fs::File, usize)>);

/// The lock file descriptors this process has open (-1: a free slot), for the child of a
/// `fork` to close: a copy of one left open in the child (whose switching thread is not
/// there to release it) would keep the machine-wide lock held after the parent dies.
static LOCK_FDS: [AtomicI32; 16] = [const { AtomicI32::new(-1) }; 16];

/// In the child of a fork: closes the copies of the parent's lock file descriptors (`close`
/// only: async-signal-safe).
pub(crate) fn close_lock_fds_in_child() {
    for s in &LOCK_FDS {
        let fd = s.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: integers only; the child's copy of a lock file descriptor.
            unsafe { libc::close(fd) };
        }
    }
}

/// Says once on stderr that the switches run without the machine-wide lock.
fn unserialized(why: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        // The real write(2), errors ignored: `eprintln!` panics on a broken stderr (an abort
        // in an `extern "C"` call) and takes std's stderr lock, which a forked child may
        // have inherited held.
        let line = format!(
            "librspreload: fork mode: {LOCK_FILE}: {why}; the accepting side's switches run \
             without the machine-wide lock (two processes may take the same port)\n"
        );
        // SAFETY: [buf] `line`'s bytes, alive for the call.
        let _ = unsafe { (real().write)(2, line.as_ptr().cast(), line.len()) };
    }
}

impl PortLock {
    pub(crate) fn take() -> PortLock {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        // Never through a link, never blocking on a FIFO put there: /dev/shm is everyone's.
        let flags = libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o666)
            .custom_flags(flags)
            .open(LOCK_FILE)
            .or_else(|_| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(flags)
                    .open(LOCK_FILE)
            });
        let f = match f {
            Ok(f) => f,
            Err(e) => {
                unserialized(&format!("cannot be opened ({e})"));
                return PortLock(None);
            }
        };
        match f.metadata() {
            Ok(m) if m.file_type().is_file() => {}
            Ok(m) => {
                let kind = if m.file_type().is_fifo() {
                    "a FIFO"
                } else {
                    "not a regular file"
                };
                unserialized(kind);
                return PortLock(None);
            }
            Err(e) => {
                unserialized(&format!("fstat: {e}"));
                return PortLock(None);
            }
        }
        // Recorded before it is locked: a fork from now on closes the child's copy.
        let Some(slot) = LOCK_FDS.iter().position(|s| {
            s.compare_exchange(-1, f.as_raw_fd(), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            unserialized("more than 16 switches at once in this process");
            return PortLock(None);
        };
        let held = PortLock(Some((f, slot)));
        loop {
            // SAFETY: integers only; the file is ours.
            if unsafe { libc::flock(held.fd(), libc::LOCK_EX) } == 0 {
                return held;
            }
            if errno() != libc::EINTR {
                unserialized(&format!("flock: {}", std::io::Error::last_os_error()));
                drop(held);
                return PortLock(None);
            }
        }
    }

    pub(crate) fn fd(&self) -> c_int {
        use std::os::fd::AsRawFd;
        self.0.as_ref().map_or(-1, |(f, _)| f.as_raw_fd())
    }
}

impl Drop for PortLock {
    fn drop(&mut self) {
        if let Some((f, slot)) = self.0.take() {
            use std::os::fd::AsRawFd;
            // SAFETY: integers only; the file is ours (closing it would release it too).
            unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
            // Out of the record before it is closed (a fork between the two leaves the
            // child an unlocked copy, harmless).
            LOCK_FDS[slot].store(-1, Ordering::Release);
            drop(f);
        }
    }
}

/// `rpoll` until one of `fds` has an event; `EINTR` is retried.
fn wait_any(fds: &mut [libc::pollfd]) -> Result<(), String> {
    loop {
        for p in fds.iter_mut() {
            p.revents = 0;
        }
        // SAFETY: [buf] our own array of fds.len() pollfds.
        let n = unsafe { r::rpoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n > 0 {
            return Ok(());
        }
        if n < 0 && errno() != libc::EINTR {
            return Err(format!("rpoll: {}", std::io::Error::last_os_error()));
        }
    }
}

/// The accepting side's switch: the new rsocket's number, or why `fd` stays TCP.
fn switch_passive(fd: c_int) -> Result<c_int, String> {
    let rl = real();
    let (mut ss, len) = name_of(fd, false)?;
    if is_loopback(&ss, len) {
        return Err("a loopback connection".into());
    }
    let domain = c_int::from(ss.ss_family);
    // The wildcard address of the family, at the connection's port.
    match domain {
        libc::AF_INET => {
            // SAFETY: an AF_INET sockaddr_storage holds a sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_addr.s_addr = 0;
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 sockaddr_storage holds a sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_addr.s6_addr = [0; 16];
            sin6.sin6_flowinfo = 0;
            sin6.sin6_scope_id = 0;
        }
        d => return Err(format!("address family {d}")),
    }
    // The lock before the listener: locals drop in reverse order, so on every path the
    // listener is closed (its port free again) before another process may take the lock.
    let _lock = PortLock::take();
    let l = Made::new(domain)?;
    let one: c_int = 1;
    // SAFETY: [buf] a c_int of ours and its size.
    unsafe {
        r::rsetsockopt(
            l.0,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const c_int).cast(),
            size_of::<c_int>() as socklen_t,
        )
    };
    // SAFETY: [buf] ss, len bytes of it.
    if unsafe { r::rbind(l.0, (&ss as *const libc::sockaddr_storage).cast(), len) } < 0 {
        return Err(format!("rbind: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: integers only.
    if unsafe { r::rlisten(l.0, 1) } < 0 {
        return Err(format!("rlisten: {}", std::io::Error::last_os_error()));
    }
    let zero = [0u8; 4];
    // SAFETY: [buf] our 4 bytes.
    let n = unsafe { (rl.send)(fd, zero.as_ptr().cast(), 4, libc::MSG_NOSIGNAL) };
    if n != 4 {
        return Err(format!(
            "sending the switch message: {}",
            if n < 0 {
                std::io::Error::last_os_error().to_string()
            } else {
                format!("{n} of 4 bytes")
            }
        ));
    }
    // The peer's rsocket connection, or the peer staying TCP (data or end of stream on
    // the TCP connection), whichever comes first: the protocol decides, no timer.
    let mut fds = [
        libc::pollfd {
            fd: l.0,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    wait_any(&mut fds)?;
    if fds[0].revents & libc::POLLIN == 0 {
        return Err("the peer did not switch (data or end of stream on TCP)".into());
    }
    // SAFETY: NULL address and length.
    let rs = unsafe { r::raccept(l.0, std::ptr::null_mut(), std::ptr::null_mut()) };
    if rs < 0 {
        return Err(format!("raccept: {}", std::io::Error::last_os_error()));
    }
    drop(l);
    copy_options(fd, rs);
    // SAFETY: integers only.
    unsafe { (rl.shutdown)(fd, libc::SHUT_RDWR) };
    Ok(rs)
}

/// The connecting side's switch: the new rsocket's number, or why `fd` stays TCP.
fn switch_active(fd: c_int) -> Result<c_int, String> {
    let rl = real();
    let mut msg = [0xffu8; 4];
    // Wait (blocking, whatever `O_NONBLOCK` says, as rdma-core's blocking peek) for the
    // first bytes with libc's `poll` on the real socket, not by a blocking `recv`: a
    // connection still being made (a non-blocking `connect` whose socket reached here from
    // `poll`, `select` or `epoll_ctl`) that fails has its error read by `recv`, so the
    // program's `SO_ERROR` would then say 0 and a refused connection look made.
    let mut pf = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        pf.revents = 0;
        // SAFETY: [buf] one pollfd of ours.
        let n = unsafe { (rl.poll)(&mut pf, 1, -1) };
        if n > 0 {
            break;
        }
        if n < 0 && errno() != libc::EINTR {
            return Err(format!("poll: {}", std::io::Error::last_os_error()));
        }
    }
    if pf.revents & libc::POLLERR != 0 {
        // The connection failed (or was reset): the error stays for the program.
        return Err("the connection has an error (left for the program)".into());
    }
    if pf.revents & libc::POLLIN == 0 {
        return Err("the connection was closed before the peer sent anything".into());
    }
    let n = loop {
        // SAFETY: [buf] our 4 bytes.
        let n = unsafe {
            (rl.recv)(
                fd,
                msg.as_mut_ptr().cast(),
                4,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 || errno() != libc::EINTR {
            break n;
        }
    };
    let e = errno();
    if n < 0 {
        return Err(format!("peeking: {}", std::io::Error::from_raw_os_error(e)));
    }
    if n != 4 || msg != [0; 4] {
        return Err("the peer sent no switch message".into());
    }
    let (ss, len) = name_of(fd, true)?;
    let c = Made::new(c_int::from(ss.ss_family))?;
    // SAFETY: [buf] ss, len bytes of it.
    if unsafe { r::rconnect(c.0, (&ss as *const libc::sockaddr_storage).cast(), len) } < 0 {
        let why = format!("rconnect: {}", std::io::Error::last_os_error());
        drop(c);
        // The switch message is the protocol's, not the program's: read it.
        // SAFETY: [buf] our 4 bytes.
        unsafe { (rl.recv)(fd, msg.as_mut_ptr().cast(), 4, libc::MSG_DONTWAIT) };
        return Err(why);
    }
    let rs = c.take();
    copy_options(fd, rs);
    // SAFETY: integers only.
    unsafe { (rl.shutdown)(fd, libc::SHUT_RDWR) };
    Ok(rs)
}
