//! librdmacm's rsockets API (`rsocket`, `rconnect`, `rsend`, `rpoll`, …) over
//! `rverbs-stream`'s [`RdmaStream`] / [`RdmaListener`], which speak rsockets' protocol.
//!
//! An rsocket is an `int`: a real file descriptor this library owns (an empty epoll
//! instance, `O_CLOEXEC`), so its number is never that of an ordinary fd while it is open and
//! `rpoll` / `rselect` can tell the two apart. The registry maps the number to an
//! `Arc<RSocket>` (a table indexed by the number) under one reader-writer lock. Every call
//! clones the `Arc` and releases the lock before it works (the lock is held for the lookup
//! only: a program that `longjmp`s out of a call from a signal handler, as iperf3 does on
//! SIGTERM, leaves no lock held that its next `close` would wait for), so `rclose` racing a
//! call on the same rsocket only removes the entry: the call finishes on its own reference,
//! and the stream (and the fd number) is released when the last reference goes. A
//! non-blocking data call clones nothing else: the stream is read from the rsocket's
//! `OnceLock` without its lock. No cache outside the registry.
//!
//! Error convention: rsockets' (the socket calls'): -1 and `errno`.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use libc::{c_int, sockaddr, socklen_t};
use rverbs_stream::{RdmaListener, RdmaStream, StreamOptions};

use crate::ibverbs::set_errno;

mod io_calls;
mod opts;
mod poll;
#[cfg(test)]
mod tests;

pub use io_calls::*;
pub use opts::*;
pub use poll::*;

/// `SOL_RDMA`, rsockets' own option level (`<rdma/rsocket.h>`).
pub const SOL_RDMA: c_int = 0x10000;
/// `RDMA_SQSIZE`: send queue entries.
pub const RDMA_SQSIZE: c_int = 0;
/// `RDMA_RQSIZE`: receive queue entries (the credits the peer gets).
pub const RDMA_RQSIZE: c_int = 1;
/// `RDMA_INLINE`: the largest transfer posted inline.
pub const RDMA_INLINE: c_int = 2;
/// `RDMA_IOMAPSIZE`: entries of the iomap table (the peer's `riomap`s).
pub const RDMA_IOMAPSIZE: c_int = 3;
/// `RDMA_ROUTE`: a resolved route (accepted; the route is resolved anew at connect).
pub const RDMA_ROUTE: c_int = 4;

/// Options of one rsocket, set by `rsetsockopt` and read by `rgetsockopt`; an accepted
/// rsocket inherits its listener's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opts {
    pub stream: StreamOptions,
    pub reuseaddr: bool,
    pub keepalive: bool,
    pub keepidle: c_int,
    pub oobinline: bool,
    pub nodelay: bool,
    pub v6only: bool,
    pub linger: Option<c_int>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            stream: opts::default_stream(),
            reuseaddr: false,
            keepalive: false,
            keepidle: 7200,
            oobinline: false,
            nodelay: false,
            v6only: false,
            linger: None,
        }
    }
}

/// Where an rsocket is in its life.
pub(crate) enum Role {
    /// From `rsocket`: options may be set.
    New,
    /// `rbind` gave it a local address.
    Bound(SocketAddr),
    /// `rlisten`.
    Listening(Arc<RdmaListener>),
    /// `rconnect` or `raccept`.
    Connected(RdmaStream),
}

pub(crate) struct State {
    pub role: Role,
    pub opts: Opts,
    /// The `riomap`s of this rsocket, found again by `riounmap`'s `(buf, len)`.
    pub maps: Vec<io_calls::CMap>,
}

/// One rsocket: its fd number and its state.
pub(crate) struct RSocket {
    /// The number C knows it by, held open (so never another fd's) until the rsocket's
    /// last reference goes.
    _number: OwnedFd,
    /// `AF_INET` or `AF_INET6`.
    domain: c_int,
    pub nonblocking: AtomicBool,
    /// `SO_ERROR`, cleared when read.
    pub so_error: AtomicI32,
    pub st: Mutex<State>,
    /// The stream once connected (`Role::Connected` holds the same): read without `st`'s
    /// lock by the data calls.
    pub conn: OnceLock<RdmaStream>,
}

impl RSocket {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The stream, if connected (a clone: the lock is not held while it is used).
    pub fn stream(&self) -> Option<RdmaStream> {
        self.conn.get().cloned()
    }

    /// Connected: the role, and the stream for the data calls.
    fn connected(&self, st: &mut State, stream: RdmaStream) {
        // rsockets' `polling_time` file, if any: a second at most, which `set_poll_time`
        // cannot refuse.
        if let Some(t) = opts::default_poll_time() {
            let _ = stream.set_poll_time(t);
        }
        // Set once: `Role::Connected` is never left (rconnect refuses a connected rsocket).
        let _ = self.conn.set(stream.clone());
        st.role = Role::Connected(stream);
    }
}

/// Every open rsocket, at the index of its number.
static REGISTRY: RwLock<Vec<Option<Arc<RSocket>>>> = RwLock::new(Vec::new());

fn registry() -> RwLockReadGuard<'static, Vec<Option<Arc<RSocket>>>> {
    REGISTRY.read().unwrap_or_else(|p| p.into_inner())
}

pub(crate) fn registry_mut() -> RwLockWriteGuard<'static, Vec<Option<Arc<RSocket>>>> {
    REGISTRY.write().unwrap_or_else(|p| p.into_inner())
}

/// The rsocket numbered `fd`, or `None` (an ordinary fd, or none): a clone of its `Arc`,
/// taken under the registry's read lock, which is released before it returns.
pub(crate) fn lookup(fd: c_int) -> Option<Arc<RSocket>> {
    let reg = registry();
    reg.get(usize::try_from(fd).ok()?)?.clone()
}

/// `f` on the rsocket numbered `fd` (`None`: no such rsocket), on a clone of its `Arc`
/// ([`lookup`]): the registry's lock is *not* held while `f` runs. A program may leave any
/// call at any point: iperf3's SIGTERM handler `longjmp`s out of whatever it interrupted
/// and then closes its sockets, so a lock held across a data call (a CQ poll, a post, a
/// system call) would be left held and the next `rclose` (a writer) would wait for it
/// forever. The lock is held for the lookup only, as long as a `Mutex` was before.
pub(crate) fn with_rsocket<R>(fd: c_int, f: impl FnOnce(&Arc<RSocket>) -> R) -> Option<R> {
    let s = lookup(fd)?;
    Some(f(&s))
}

/// Whether `RVERBS_CAPI_LOG` is set (read once: a failed non-blocking call, rstream's
/// every `EAGAIN`, would otherwise read the environment, an allocation and a lock).
fn log_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RVERBS_CAPI_LOG").is_some())
}

/// A failed call: `e` logged as the rest of the library logs (`RVERBS_CAPI_LOG`), `errno`
/// set to its socket errno, -1.
pub(crate) fn fail(e: &io::Error) -> c_int {
    let n = errno_of(e);
    if log_on() {
        eprintln!("rverbs rsockets: {e}");
    }
    set_errno(n);
    -1
}

/// -1 with `errno` `n`, and a log line naming `what` when `RVERBS_CAPI_LOG` is set.
pub(crate) fn refuse(n: c_int, what: &str) -> c_int {
    if log_on() {
        eprintln!(
            "rverbs rsockets: {what}: {}",
            io::Error::from_raw_os_error(n)
        );
    }
    set_errno(n);
    -1
}

/// The socket errno of a stream error: the kernel's when it gave one, else from its kind
/// (`ECONNREFUSED`, `EPIPE`, `EAGAIN`, `ETIMEDOUT`, `EPROTO` for a peer breaking the
/// protocol, …).
pub fn errno_of(e: &io::Error) -> c_int {
    use io::ErrorKind as K;
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        K::WouldBlock => libc::EAGAIN,
        K::BrokenPipe => libc::EPIPE,
        K::ConnectionRefused => libc::ECONNREFUSED,
        K::ConnectionReset => libc::ECONNRESET,
        K::ConnectionAborted => libc::ECONNABORTED,
        K::NotConnected => libc::ENOTCONN,
        K::TimedOut => libc::ETIMEDOUT,
        K::InvalidData => libc::EPROTO,
        K::AddrInUse => libc::EADDRINUSE,
        K::AddrNotAvailable => libc::EADDRNOTAVAIL,
        K::Interrupted => libc::EINTR,
        _ => crate::ibverbs::errno_of(e),
    }
}

/// The rsocket numbered `fd`, or a return of -1 with `errno` `EBADF`.
macro_rules! rs {
    ($fd:expr) => {
        match $crate::rsocket::lookup($fd) {
            Some(s) => s,
            None => return $crate::rsocket::refuse(libc::EBADF, "not an rsocket") as _,
        }
    };
}
pub(crate) use rs;

// ---------------------------------------------------------------------------------------
// Socket addresses

/// The address C passes in `(addr, len)`.
///
/// # Safety
/// \[buf\] `addr` is NULL or has `len` readable bytes.
pub(crate) unsafe fn sockaddr_in(
    addr: *const sockaddr,
    len: socklen_t,
) -> Result<SocketAddr, c_int> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    let len = len as usize;
    if len < std::mem::size_of::<libc::sa_family_t>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: [buf] at least the family's bytes are readable; read unaligned, C's sockaddr
    // storage may be any buffer.
    let family = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) };
    match c_int::from(family) {
        libc::AF_INET => {
            if len < std::mem::size_of::<libc::sockaddr_in>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: [buf] len covers a sockaddr_in.
            let a = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in>()) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            if len < std::mem::size_of::<libc::sockaddr_in6>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: [buf] len covers a sockaddr_in6.
            let a = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sockaddr_in6>()) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// Writes `a` to `(addr, *len)` as `getsockname(2)` does: at most `*len` bytes (truncated),
/// `*len` set to the full size.
///
/// # Safety
/// \[out\] `len` NULL or a readable and writable `socklen_t`; `addr` NULL or `*len` writable
/// bytes.
pub(crate) unsafe fn sockaddr_out(
    a: SocketAddr,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> c_int {
    if addr.is_null() || len.is_null() {
        return refuse(libc::EFAULT, "NULL address or address length");
    }
    // SAFETY: [out] len is readable.
    let room = unsafe { len.read_unaligned() } as usize;
    let mut st: libc::sockaddr_storage = unsafe_zeroed();
    let size = match a {
        SocketAddr::V4(v) => {
            let p = std::ptr::addr_of_mut!(st).cast::<libc::sockaddr_in>();
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than, and aligned for, every sockaddr.
            unsafe { p.write(sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v) => {
            let p = std::ptr::addr_of_mut!(st).cast::<libc::sockaddr_in6>();
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: as above.
            unsafe { p.write(sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: [out] addr has `room` writable bytes; at most that many are copied from the
    // local storage, which has `size` initialised bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            std::ptr::addr_of!(st).cast::<u8>(),
            addr.cast::<u8>(),
            room.min(size),
        );
        len.write_unaligned(size as socklen_t);
    }
    0
}

/// A zeroed `sockaddr_storage` (all-zero bytes are a valid value of it).
fn unsafe_zeroed() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain integers; all zeroes is a valid value.
    unsafe { std::mem::zeroed() }
}

fn unspecified(domain: c_int) -> SocketAddr {
    if domain == libc::AF_INET6 {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    }
}

// ---------------------------------------------------------------------------------------
// Life cycle

symver!(rsocket => "RDMACM_1.0");
/// `rsocket`: a new rsocket of `domain` (`AF_INET`, `AF_INET6`) and `type` `SOCK_STREAM`
/// (with `SOCK_NONBLOCK`, `SOCK_CLOEXEC` allowed; rsockets are always close-on-exec), protocol
/// 0 or `IPPROTO_TCP`. -1 and `EAFNOSUPPORT`, `ESOCKTNOSUPPORT` (datagram rsockets are not
/// supported), `EPROTONOSUPPORT`, or the `epoll_create1` errno.
///
/// # Safety
/// Takes integers only; `unsafe` as every exported function.
#[no_mangle]
pub unsafe extern "C" fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return refuse(
            libc::EAFNOSUPPORT,
            "rsocket: domain must be AF_INET or AF_INET6",
        );
    }
    let kind = type_ & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    if kind != libc::SOCK_STREAM {
        return refuse(
            libc::ESOCKTNOSUPPORT,
            "rsocket: only SOCK_STREAM rsockets are supported",
        );
    }
    if protocol != 0 && protocol != libc::IPPROTO_TCP {
        return refuse(
            libc::EPROTONOSUPPORT,
            "rsocket: protocol must be 0 or IPPROTO_TCP",
        );
    }
    match open(domain, type_ & libc::SOCK_NONBLOCK != 0) {
        Ok(n) => n,
        Err(e) => fail(&e),
    }
}

/// A new rsocket in the registry: its number.
fn open(domain: c_int, nonblocking: bool) -> io::Result<c_int> {
    let fd = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)?;
    let n = fd.as_raw_fd();
    let s = RSocket {
        _number: fd,
        domain,
        nonblocking: AtomicBool::new(nonblocking),
        so_error: AtomicI32::new(0),
        st: Mutex::new(State {
            role: Role::New,
            opts: Opts::default(),
            maps: Vec::new(),
        }),
        conn: OnceLock::new(),
    };
    let i = usize::try_from(n).map_err(|_| io::Error::other("a negative fd number"))?;
    let mut reg = registry_mut();
    if reg.len() <= i {
        reg.resize_with(i + 1, || None);
    }
    // A slot still taken means its number was closed behind the registry's back (a forked
    // child's `closefrom`, or a raw `close` of the hidden number) and the kernel has handed it
    // to this rsocket. The stale rsocket is leaked, never dropped: its `OwnedFd` would close the
    // number that is ours now, and in a forked child its drop would destroy the parent's QP and
    // cm id through the device files the two processes share.
    if let Some(stale) = reg[i].replace(Arc::new(s)) {
        std::mem::forget(stale);
    }
    Ok(n)
}

symver!(rclose => "RDMACM_1.0");
/// `rclose`: closes the rsocket (a connected one sends its DISCONNECT, as `rshutdown`
/// `SHUT_RDWR`, once no other call uses it). -1 and `EBADF` for a number that is no open
/// rsocket (a second `rclose` included).
///
/// # Safety
/// Takes integers only.
#[no_mangle]
pub unsafe extern "C" fn rclose(socket: c_int) -> c_int {
    let s = usize::try_from(socket)
        .ok()
        .and_then(|i| registry_mut().get_mut(i).and_then(Option::take));
    match s {
        // Dropped here, outside the registry's lock: the stream's close may wait a second.
        // The mappings first, and now even if a call still holds the rsocket: the caller
        // may free their memory once rclose returns (rsockets unmaps them here too).
        Some(s) => {
            let maps = std::mem::take(&mut s.lock().maps);
            drop(maps);
            drop(s);
            0
        }
        None => refuse(libc::EBADF, "rclose: not an rsocket"),
    }
}

symver!(rbind => "RDMACM_1.0");
/// `rbind`: the local address for `rlisten` or `rconnect`. -1 and `EBADF`, `EFAULT` (NULL
/// address), `EINVAL` (short length, or already bound, listening or connected),
/// `EAFNOSUPPORT`.
///
/// # Safety
/// \[buf\] `addr` NULL or `addrlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    let s = rs!(socket);
    // SAFETY: [buf] as this function's contract.
    let a = match unsafe { sockaddr_in(addr, addrlen) } {
        Ok(a) => a,
        Err(n) => return refuse(n, "rbind: the address"),
    };
    let mut st = s.lock();
    match st.role {
        Role::New => {
            st.role = Role::Bound(a);
            0
        }
        _ => refuse(libc::EINVAL, "rbind: the rsocket is bound already"),
    }
}

symver!(rlisten => "RDMACM_1.0");
/// `rlisten`: listens on the bound address (an unbound rsocket on every address, a port
/// chosen). `backlog` is not used (the rdma_cm's). -1 and `EBADF`, `EINVAL` (connected),
/// or the rdma_cm's errno (`EADDRINUSE`, `ENODEV`: no RDMA device, …).
///
/// # Safety
/// Takes integers only.
#[no_mangle]
pub unsafe extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    let _ = backlog;
    let s = rs!(socket);
    let mut st = s.lock();
    let at = match st.role {
        Role::New => unspecified(s.domain),
        Role::Bound(a) => a,
        Role::Listening(_) => return 0,
        Role::Connected(_) => return refuse(libc::EINVAL, "rlisten: the rsocket is connected"),
    };
    match RdmaListener::bind_with(at, &st.opts.stream) {
        Ok(l) => {
            st.role = Role::Listening(Arc::new(l));
            0
        }
        Err(e) => fail(&e),
    }
}

symver!(raccept => "RDMACM_1.0");
/// `raccept`: the next connection on a listening rsocket, as a new rsocket (with the
/// listener's options); its peer's address in `(addr, *addrlen)` as `accept(2)` writes it
/// (both may be NULL). Non-blocking (`O_NONBLOCK`): -1 and `EAGAIN` when no request waits.
/// -1 and `EBADF`, `EINVAL` (not listening), `EFAULT` (`addr` without `addrlen`), `EPROTO`
/// (a peer speaking another rsockets version: refused), or the rdma_cm's errno.
///
/// # Safety
/// \[out\] `addrlen` NULL or a `socklen_t`; `addr` NULL or `*addrlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn raccept(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    let s = rs!(socket);
    if !addr.is_null() && addrlen.is_null() {
        return refuse(libc::EFAULT, "raccept: an address without its length");
    }
    let (l, opts) = {
        let st = s.lock();
        match &st.role {
            Role::Listening(l) => (l.clone(), st.opts),
            _ => return refuse(libc::EINVAL, "raccept: the rsocket is not listening"),
        }
    };
    if s.nonblocking.load(Ordering::Relaxed) {
        use std::os::fd::AsFd;
        match rverbs_uverbs::kernel::fd::poll_readable(l.as_fd(), Some(std::time::Duration::ZERO)) {
            Ok(true) => {}
            Ok(false) => return refuse(libc::EAGAIN, "raccept: no connection request yet"),
            Err(e) => return fail(&io::Error::from(e)),
        }
    }
    let (stream, peer) = match l.accept_with(&opts.stream) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let n = match open(s.domain, false) {
        Ok(n) => n,
        Err(e) => return fail(&e),
    };
    let new = lookup(n).expect("the rsocket just made");
    {
        let mut st = new.lock();
        new.connected(&mut st, stream);
        st.opts = opts;
    }
    if !addr.is_null() {
        // SAFETY: [out] as this function's contract.
        unsafe { sockaddr_out(peer, addr, addrlen) };
    }
    n
}

symver!(rconnect => "RDMACM_1.0");
/// `rconnect`: connects to an rsockets listener at `addr` (from the `rbind` address if
/// any), blocking until the peer accepted, also on a non-blocking rsocket (it never returns
/// `EINPROGRESS`; `SO_ERROR` stays 0). -1 and `EBADF`, `EFAULT`, `EINVAL` (short address,
/// listening), `EISCONN`, `EAFNOSUPPORT`, `ECONNREFUSED` (nobody listens), `EPROTO` (the
/// listener speaks another rsockets version), `ETIMEDOUT`, `ENODEV`, ….
///
/// # Safety
/// \[buf\] `addr` NULL or `addrlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rconnect(
    socket: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> c_int {
    let s = rs!(socket);
    // SAFETY: [buf] as this function's contract.
    let to = match unsafe { sockaddr_in(addr, addrlen) } {
        Ok(a) => a,
        Err(n) => return refuse(n, "rconnect: the address"),
    };
    // The lock is held while connecting: other calls on this rsocket wait (at most the
    // resolution and connection timeouts); rclose does not (it only unlists the rsocket).
    let mut st = s.lock();
    let from = match st.role {
        Role::New => None,
        Role::Bound(a) => Some(a),
        Role::Listening(_) => return refuse(libc::EINVAL, "rconnect: the rsocket is listening"),
        Role::Connected(_) => return refuse(libc::EISCONN, "rconnect"),
    };
    match RdmaStream::connect_from(from, to, &st.opts.stream) {
        Ok(c) => {
            s.connected(&mut st, c);
            0
        }
        Err(e) => fail(&e),
    }
}

symver!(rshutdown => "RDMACM_1.0");
/// `rshutdown`: `SHUT_RD`, `SHUT_WR` or `SHUT_RDWR` (rsockets' SHUTDOWN and DISCONNECT
/// messages). -1 and `EBADF`, `EINVAL` (another `how`), `ENOTCONN`.
///
/// # Safety
/// Takes integers only.
#[no_mangle]
pub unsafe extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    let s = rs!(socket);
    let how = match how {
        libc::SHUT_RD => Shutdown::Read,
        libc::SHUT_WR => Shutdown::Write,
        libc::SHUT_RDWR => Shutdown::Both,
        _ => {
            return refuse(
                libc::EINVAL,
                "rshutdown: how must be SHUT_RD, SHUT_WR or SHUT_RDWR",
            )
        }
    };
    let Some(c) = s.stream() else {
        return refuse(libc::ENOTCONN, "rshutdown");
    };
    match c.shutdown(how) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

symver!(rgetpeername => "RDMACM_1.0");
/// `rgetpeername`: the peer's address, as `getpeername(2)` writes it. -1 and `EBADF`,
/// `EFAULT` (NULL), `ENOTCONN`.
///
/// # Safety
/// \[out\] `addrlen` NULL or a `socklen_t`; `addr` NULL or `*addrlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rgetpeername(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    let s = rs!(socket);
    let peer = match s.stream().map(|c| c.peer_addr()) {
        Some(Ok(a)) => a,
        Some(Err(e)) => return fail(&e),
        None => return refuse(libc::ENOTCONN, "rgetpeername"),
    };
    // SAFETY: [out] as this function's contract.
    unsafe { sockaddr_out(peer, addr, addrlen) }
}

symver!(rgetsockname => "RDMACM_1.0");
/// `rgetsockname`: the local address (an unbound rsocket: the unspecified address, port
/// 0). -1 and `EBADF`, `EFAULT` (NULL).
///
/// # Safety
/// \[out\] `addrlen` NULL or a `socklen_t`; `addr` NULL or `*addrlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rgetsockname(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    let s = rs!(socket);
    let local = match &s.lock().role {
        Role::New => Ok(unspecified(s.domain)),
        Role::Bound(a) => Ok(*a),
        Role::Listening(l) => l.local_addr(),
        Role::Connected(c) => c.local_addr(),
    };
    match local {
        // SAFETY: [out] as this function's contract.
        Ok(a) => unsafe { sockaddr_out(a, addr, addrlen) },
        Err(e) => fail(&e),
    }
}
