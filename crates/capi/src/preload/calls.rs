//! The interposed socket calls (C names with the `preload` feature, see the module's doc):
//! a number the table holds goes to its rsocket (`crate::rsocket`), any other to the next
//! definition untouched. Error convention: the calls' own (-1 and `errno`).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use libc::{
    c_int, c_ulong, c_void, fd_set, iovec, msghdr, nfds_t, off_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec, timeval,
};

use super::real::real;
use super::{errno, get, insert, maybe, remove, Sock};
use crate::ibverbs::set_errno;
use crate::rsocket as r;

/// Logs `what` when `RVERBS_CAPI_LOG` is set (as the rest of the library).
fn log(what: &str) {
    if std::env::var_os("RVERBS_CAPI_LOG").is_some() {
        eprintln!("librspreload: {what}");
    }
}

/// Whether `(domain, type, protocol)` asks for a TCP stream over IP.
fn tcp_stream(domain: c_int, type_: c_int, protocol: c_int) -> bool {
    (domain == libc::AF_INET || domain == libc::AF_INET6)
        && type_ & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) == libc::SOCK_STREAM
        && (protocol == 0 || protocol == libc::IPPROTO_TCP)
}

/// rdma-core's preload environment: `RS_SQ_SIZE`, `RS_RQ_SIZE`, `RS_INLINE`, each for its
/// rsockets option (unset or unparsable: the default).
fn env_options() -> &'static [(c_int, Option<c_int>); 3] {
    static OPTS: OnceLock<[(c_int, Option<c_int>); 3]> = OnceLock::new();
    OPTS.get_or_init(|| {
        let v = |n: &str| std::env::var(n).ok().and_then(|s| s.trim().parse().ok());
        [
            (r::RDMA_SQSIZE, v("RS_SQ_SIZE")),
            (r::RDMA_RQSIZE, v("RS_RQ_SIZE")),
            (r::RDMA_INLINE, v("RS_INLINE")),
        ]
    })
}

/// One line of rdma-core's `preload_config`: `program domain type protocol`, `*` (here
/// `None` / 0) matching anything.
#[derive(Debug, PartialEq)]
pub(crate) struct Rule {
    /// A case-insensitive prefix of the program's short name.
    pub name: Option<String>,
    pub domain: c_int,
    pub type_: c_int,
    pub protocol: c_int,
}

/// The rules of a `preload_config` text, as rdma-core's `scan_config` reads them: a line
/// starting with `#` is a comment; a line needs four words, and a word that is neither `*`
/// nor a known name (`INET`/`AF_INET`/`PF_INET`, `INET6`…, `IB`…; `STREAM`/`SOCK_STREAM`,
/// `DGRAM`…; `TCP`/`IPPROTO_TCP`, `UDP`…, in any case) drops its line.
pub(crate) fn parse_preload_config(text: &str) -> Vec<Rule> {
    let word = |w: &str, names: &[(&[&str], c_int)]| -> Option<c_int> {
        if w == "*" {
            return Some(0);
        }
        names
            .iter()
            .find(|(ns, _)| ns.iter().any(|n| n.eq_ignore_ascii_case(w)))
            .map(|(_, v)| *v)
    };
    let mut rules = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 4 {
            continue;
        }
        let Some(domain) = word(
            w[1],
            &[
                (&["INET", "AF_INET", "PF_INET"], libc::AF_INET),
                (&["INET6", "AF_INET6", "PF_INET6"], libc::AF_INET6),
                (&["IB", "AF_IB", "PF_IB"], 27),
            ],
        ) else {
            continue;
        };
        let Some(type_) = word(
            w[2],
            &[
                (&["STREAM", "SOCK_STREAM"], libc::SOCK_STREAM),
                (&["DGRAM", "SOCK_DGRAM"], libc::SOCK_DGRAM),
            ],
        ) else {
            continue;
        };
        let Some(protocol) = word(
            w[3],
            &[
                (&["TCP", "IPPROTO_TCP"], libc::IPPROTO_TCP),
                (&["UDP", "IPPROTO_UDP"], libc::IPPROTO_UDP),
            ],
        ) else {
            continue;
        };
        rules.push(Rule {
            name: (w[0] != "*").then(|| w[0].to_string()),
            domain,
            type_,
            protocol,
        });
    }
    rules
}

/// Whether `rules` let `program` have an rsocket for `(domain, type, protocol)`: no rules,
/// or one that matches (rdma-core's `intercept_socket`; `type`'s `SOCK_NONBLOCK` and
/// `SOCK_CLOEXEC` are not compared, where rdma-core compares them too).
pub(crate) fn intercepted(
    rules: &[Rule],
    program: &str,
    domain: c_int,
    type_: c_int,
    protocol: c_int,
) -> bool {
    if rules.is_empty() {
        return true;
    }
    let type_ = type_ & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let protocol = match (protocol, type_) {
        (0, libc::SOCK_STREAM) => libc::IPPROTO_TCP,
        (0, libc::SOCK_DGRAM) => libc::IPPROTO_UDP,
        (p, _) => p,
    };
    rules.iter().any(|r| {
        r.name.as_ref().map_or(true, |n| {
            program.len() >= n.len()
                && program.as_bytes()[..n.len()].eq_ignore_ascii_case(n.as_bytes())
        }) && (r.domain == 0 || r.domain == domain)
            && (r.type_ == 0 || r.type_ == type_)
            && (r.protocol == 0 || r.protocol == protocol)
    })
}

/// Whether this program may have an rsocket for `(domain, type, protocol)` by
/// `preload_config` in rsockets' configuration directory (read once; absent: yes).
fn config_allows(domain: c_int, type_: c_int, protocol: c_int) -> bool {
    static RULES: OnceLock<(Vec<Rule>, String)> = OnceLock::new();
    let (rules, program) = RULES.get_or_init(|| {
        let text =
            std::fs::read_to_string(r::conf_dir().join("preload_config")).unwrap_or_default();
        // glibc's `program_invocation_short_name`, as rdma-core's matches it.
        let program = std::env::args_os()
            .next()
            .map(|a| {
                let p = std::path::PathBuf::from(a);
                p.file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        (parse_preload_config(&text), program)
    });
    intercepted(rules, program, domain, type_, protocol)
}

/// Whether C's `(addr, len)` is a loopback address (127.0.0.0/8, `::1`, `::ffff:127.x`):
/// such connections stay TCP.
///
/// # Safety
/// \[buf\] `addr` NULL or `len` readable bytes.
unsafe fn loopback(addr: *const sockaddr, len: socklen_t) -> bool {
    // SAFETY: [buf] as this function's contract.
    match unsafe { r::sockaddr_in(addr, len) } {
        Ok(std::net::SocketAddr::V4(a)) => a.ip().is_loopback(),
        Ok(std::net::SocketAddr::V6(a)) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// Gives up the rsocket of `fd`: the number is its real TCP socket from now on.
fn fall_back(fd: c_int, why: &str) {
    let saved = errno();
    if let Some(s) = remove(fd) {
        log(&format!("fd {fd}: plain TCP ({why})"));
        drop(s);
    }
    set_errno(saved);
}

// ---------------------------------------------------------------------------------------
// Life cycle

/// `socket(2)`: a TCP stream socket over IPv4 or IPv6 becomes an rsocket behind a real
/// socket's number (the module's doc); anything else, or when no rsocket can be made, the
/// next `socket`.
///
/// # Safety
/// Takes integers only.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
    // SAFETY: integers only.
    let fd = unsafe { (real().socket)(domain, type_, protocol) };
    if fd < 0 || !tcp_stream(domain, type_, protocol) {
        return fd;
    }
    if !config_allows(domain, type_, protocol) {
        log("socket: not for this program by preload_config, a plain TCP socket");
        return fd;
    }
    // SAFETY: integers only.
    let rs = unsafe { r::rsocket(domain, libc::SOCK_STREAM | (type_ & libc::SOCK_NONBLOCK), 0) };
    if rs < 0 {
        log("socket: no rsocket, a plain TCP socket");
        return fd;
    }
    for &(opt, v) in env_options() {
        if let Some(v) = v {
            // SAFETY: [buf] a c_int of ours, its size given. Failure keeps the default, as
            // rdma-core's preload.
            unsafe {
                r::rsetsockopt(
                    rs,
                    r::SOL_RDMA,
                    opt,
                    (&v as *const c_int).cast(),
                    size_of::<c_int>() as socklen_t,
                )
            };
        }
    }
    drop(insert(fd, Arc::new(Sock { rs, domain })));
    fd
}

/// `bind(2)`: binds the real socket (its errors are TCP's, and a port 0 is chosen there),
/// then gives the rsocket the same address and port. A loopback address, or an rsocket that
/// refuses it: the number stays a TCP socket.
///
/// # Safety
/// \[buf\] `addr` NULL or `addrlen` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    let rl = real();
    // SAFETY: [buf] as this function's contract.
    let ret = unsafe { (rl.bind)(fd, addr, addrlen) };
    let Some(s) = get(fd) else { return ret };
    if ret < 0 {
        return ret;
    }
    // SAFETY: [buf] as this function's contract.
    if unsafe { loopback(addr, addrlen) } {
        fall_back(fd, "bound to a loopback address");
        return 0;
    }
    // SAFETY: all-zero bytes are a sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as socklen_t;
    // SAFETY: [out] ss has len bytes; the number is the caller's open fd.
    let got = unsafe {
        (rl.getsockname)(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    // SAFETY: [buf] ss, len bytes of it written by getsockname.
    if got < 0 || unsafe { r::rbind(s.rs, (&ss as *const libc::sockaddr_storage).cast(), len) } < 0
    {
        fall_back(fd, "the rsocket refused the address");
    }
    0
}

/// `listen(2)`: `rlisten`; where that fails (no RDMA device for the address, …), or on a
/// loopback address, the real socket listens instead.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    if let Some(s) = get(fd) {
        // SAFETY: integers only.
        if unsafe { r::rlisten(s.rs, backlog) } == 0 {
            return 0;
        }
        drop(s);
        fall_back(fd, "rlisten failed");
    }
    // SAFETY: integers only.
    unsafe { (real().listen)(fd, backlog) }
}

/// `accept4(2)`: a listening rsocket's next connection, as an rsocket behind a new real
/// socket's number (`SOCK_NONBLOCK`, `SOCK_CLOEXEC` as asked); else the next `accept4`.
///
/// # Safety
/// \[out\] `addrlen` NULL or a `socklen_t`; `addr` NULL or `*addrlen` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let rl = real();
    let Some(s) = get(fd) else {
        // SAFETY: [out] as this function's contract.
        return unsafe { (rl.accept4)(fd, addr, addrlen, flags) };
    };
    if flags & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [out] as this function's contract.
    let rs = unsafe { r::raccept(s.rs, addr, addrlen) };
    if rs < 0 {
        return -1;
    }
    let nb = flags & libc::SOCK_NONBLOCK;
    // SAFETY: integers only.
    unsafe {
        r::rfcntl(
            rs,
            libc::F_SETFL,
            if nb != 0 { libc::O_NONBLOCK } else { 0 },
        )
    };
    // SAFETY: integers only.
    let n = unsafe { (rl.socket)(s.domain, libc::SOCK_STREAM | flags, 0) };
    if n < 0 {
        let e = errno();
        // SAFETY: integers only; the rsocket just made.
        unsafe { r::rclose(rs) };
        set_errno(e);
        return -1;
    }
    drop(insert(
        n,
        Arc::new(Sock {
            rs,
            domain: s.domain,
        }),
    ));
    n
}

/// `accept(2)`: [`accept4`] without flags.
///
/// # Safety
/// As [`accept4`].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { accept4(fd, addr, addrlen, 0) }
}

/// `connect(2)`: `rconnect` (which completes before it returns, also on a non-blocking
/// socket); a loopback address, or an `rconnect` that fails (no RDMA device for the
/// address, no rsockets listener there, …): the real socket connects instead.
///
/// # Safety
/// \[buf\] `addr` NULL or `addrlen` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    if let Some(s) = get(fd) {
        // SAFETY: [buf] as this function's contract.
        if unsafe { loopback(addr, addrlen) } {
            drop(s);
            fall_back(fd, "connect to a loopback address");
        } else {
            // SAFETY: [buf] as this function's contract.
            if unsafe { r::rconnect(s.rs, addr, addrlen) } == 0 {
                return 0;
            }
            let e = errno();
            if e == libc::EISCONN || e == libc::EFAULT {
                return -1;
            }
            drop(s);
            fall_back(
                fd,
                &format!("rconnect: {}", std::io::Error::from_raw_os_error(e)),
            );
        }
    }
    // SAFETY: [buf] as this function's contract.
    unsafe { (real().connect)(fd, addr, addrlen) }
}

/// `shutdown(2)`: `rshutdown` or the next `shutdown`.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    match get(fd) {
        // SAFETY: integers only.
        Some(s) => unsafe { r::rshutdown(s.rs, how) },
        // SAFETY: integers only.
        None => unsafe { (real().shutdown)(fd, how) },
    }
}

/// `close(2)`: forgets the number (the rsocket closes with its last number), then closes
/// the real fd.
///
/// # Safety
/// \[fd\]: closing a number another thread still uses is the caller's race, as with any
/// `close`.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    drop(remove(fd));
    super::epoll::forget(fd);
    // SAFETY: integers only.
    unsafe { (real().close)(fd) }
}

/// `dup(2)`: the new number shares the rsocket.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: integers only.
    let n = unsafe { (real().dup)(fd) };
    if n >= 0 {
        if let Some(s) = get(fd) {
            drop(insert(n, s));
        }
    }
    n
}

/// `dup3` and `dup2`: `new` forgets what it was and shares `old`'s rsocket.
fn dup_onto(old: c_int, new: c_int, f: impl FnOnce() -> c_int) -> c_int {
    let s = get(old);
    let n = f();
    if n >= 0 && old != new {
        let before = match s {
            Some(s) => insert(new, s),
            None => remove(new),
        };
        super::epoll::forget(new);
        drop(before);
    }
    n
}

/// `dup2(2)`.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: integers only.
    dup_onto(old, new, || unsafe { (real().dup2)(old, new) })
}

/// `dup3(2)`.
///
/// # Safety
/// Takes integers only; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: integers only.
    dup_onto(old, new, || unsafe { (real().dup3)(old, new, flags) })
}

// ---------------------------------------------------------------------------------------
// Data

/// `read(2)`: `rread` or the next `read`.
///
/// # Safety
/// \[buf\] `buf` with `count` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rread(s.rs, buf, count) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().read)(fd, buf, count) },
    }
}

/// `write(2)`: `rwrite` or the next `write`.
///
/// # Safety
/// \[buf\] `buf` with `count` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rwrite(s.rs, buf, count) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().write)(fd, buf, count) },
    }
}

/// `readv(2)`: `rreadv` or the next `readv`.
///
/// # Safety
/// \[in\] `iov` with `iovcnt` entries, each \[buf\] writable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rreadv(s.rs, iov, iovcnt) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().readv)(fd, iov, iovcnt) },
    }
}

/// `writev(2)`: `rwritev` or the next `writev`.
///
/// # Safety
/// \[in\] `iov` with `iovcnt` entries, each \[buf\] readable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rwritev(s.rs, iov, iovcnt) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().writev)(fd, iov, iovcnt) },
    }
}

/// `recv(2)`: `rrecv` or the next `recv`.
///
/// # Safety
/// \[buf\] `buf` with `len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rrecv(s.rs, buf, len, flags) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().recv)(fd, buf, len, flags) },
    }
}

/// `send(2)`: `rsend` or the next `send` (`MSG_NOSIGNAL` and the other flags rsockets
/// ignores are accepted; an rsocket never raises `SIGPIPE`).
///
/// # Safety
/// \[buf\] `buf` with `len` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rsend(s.rs, buf, len, flags) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().send)(fd, buf, len, flags) },
    }
}

/// `recvfrom(2)`: `rrecvfrom` or the next `recvfrom`.
///
/// # Safety
/// \[buf\] `buf` with `len` writable bytes; \[out\] `addrlen` NULL or a `socklen_t`, `addr`
/// NULL or `*addrlen` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] [out] as this function's contract.
        Some(s) => unsafe { r::rrecvfrom(s.rs, buf, len, flags, addr, addrlen) },
        // SAFETY: [buf] [out] as this function's contract.
        None => unsafe { (real().recvfrom)(fd, buf, len, flags, addr, addrlen) },
    }
}

/// `sendto(2)`: on an rsocket `rsend` (the address is ignored, as TCP ignores it on a
/// connected socket), else the next `sendto`.
///
/// # Safety
/// \[buf\] `buf` with `len` readable bytes, `addr` NULL or `addrlen` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    match get(fd) {
        // SAFETY: [buf] as this function's contract.
        Some(s) => unsafe { r::rsend(s.rs, buf, len, flags) },
        // SAFETY: [buf] as this function's contract.
        None => unsafe { (real().sendto)(fd, buf, len, flags, addr, addrlen) },
    }
}

/// `recvmsg(2)`: `rrecvmsg` or the next `recvmsg`.
///
/// # Safety
/// \[in\] `msg` a `msghdr` whose iovecs are \[buf\] writable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rrecvmsg(s.rs, msg, flags) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().recvmsg)(fd, msg, flags) },
    }
}

/// `sendmsg(2)`: `rsendmsg` or the next `sendmsg`.
///
/// # Safety
/// \[in\] `msg` a `msghdr` whose iovecs are \[buf\] readable; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    match get(fd) {
        // SAFETY: [in] [buf] as this function's contract.
        Some(s) => unsafe { r::rsendmsg(s.rs, msg, flags) },
        // SAFETY: [in] [buf] as this function's contract.
        None => unsafe { (real().sendmsg)(fd, msg, flags) },
    }
}

/// `sendfile(2)` to an rsocket: one chunk (at most 256 KiB) read from `in_fd` (at
/// `*offset`, which advances by what was sent, or at its file position, which ends after
/// what was sent) and `rwrite`n; to anything else the next `sendfile`.
///
/// # Safety
/// \[out\] `offset` NULL or an `off_t`; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendfile(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    let rl = real();
    let Some(s) = get(out_fd) else {
        // SAFETY: [out] as this function's contract.
        return unsafe { (rl.sendfile)(out_fd, in_fd, offset, count) };
    };
    let mut buf = vec![0u8; count.min(256 << 10)];
    let got = if offset.is_null() {
        // SAFETY: [buf] our buffer, its length.
        unsafe { (rl.read)(in_fd, buf.as_mut_ptr().cast(), buf.len()) }
    } else {
        // SAFETY: [out] offset is an off_t; [buf] our buffer.
        unsafe {
            (rl.pread)(
                in_fd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                offset.read_unaligned(),
            )
        }
    };
    if got <= 0 {
        return got;
    }
    // SAFETY: [buf] the `got` bytes just read.
    let sent = unsafe { r::rwrite(s.rs, buf.as_ptr().cast(), got as size_t) };
    let back = got - sent.max(0);
    if offset.is_null() {
        if back > 0 {
            let e = errno();
            // SAFETY: integers only: the file position moves back over what was not sent.
            unsafe { libc::lseek(in_fd, -(back as off_t), libc::SEEK_CUR) };
            set_errno(e);
        }
    } else if sent > 0 {
        // SAFETY: [out] offset is an off_t.
        unsafe { offset.write_unaligned(offset.read_unaligned() + sent as off_t) };
    }
    sent
}

/// `sendfile64`: [`sendfile`] (`off64_t` is `off_t` on 64-bit Linux).
///
/// # Safety
/// As [`sendfile`].
#[cfg(target_pointer_width = "64")]
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn sendfile64(
    out_fd: c_int,
    in_fd: c_int,
    offset: *mut off_t,
    count: size_t,
) -> ssize_t {
    // SAFETY: as this function's contract.
    unsafe { sendfile(out_fd, in_fd, offset, count) }
}

// ---------------------------------------------------------------------------------------
// Readiness

/// Runs `rpoll` over `fds` with the table's numbers replaced by their rsockets (kept alive
/// for the call); the results go back into `fds`.
pub(crate) fn poll_translated(fds: &mut [pollfd], timeout: c_int) -> c_int {
    let socks: Vec<Option<Arc<Sock>>> = fds.iter().map(|p| get(p.fd)).collect();
    let mut tr: Vec<pollfd> = fds
        .iter()
        .zip(&socks)
        .map(|(p, s)| pollfd {
            fd: s.as_ref().map_or(p.fd, |s| s.rs),
            events: p.events,
            revents: 0,
        })
        .collect();
    // SAFETY: [buf] our own array of tr.len() pollfds.
    let n = unsafe { r::rpoll(tr.as_mut_ptr(), tr.len() as nfds_t, timeout) };
    if n >= 0 {
        for (p, t) in fds.iter_mut().zip(&tr) {
            p.revents = t.revents;
        }
    }
    n
}

/// The milliseconds of a `timespec` (NULL: -1, forever), rounded up.
///
/// # Safety
/// \[in\] `ts` NULL or a `timespec`.
unsafe fn ms_of(ts: *const timespec) -> Result<c_int, ()> {
    if ts.is_null() {
        return Ok(-1);
    }
    // SAFETY: [in] as this function's contract.
    let t = unsafe { ts.read_unaligned() };
    if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
        return Err(());
    }
    let ms = (t.tv_sec as i128) * 1000 + (t.tv_nsec as i128 + 999_999) / 1_000_000;
    Ok(ms.min(c_int::MAX as i128) as c_int)
}

/// `poll(2)`: with a table number among `fds`, `rpoll` over them all; else the next `poll`.
///
/// # Safety
/// \[buf\] `fds` NULL or `nfds` readable and writable `pollfd`s; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() || nfds == 0 || nfds > 1 << 20 {
        // SAFETY: as this function's contract.
        return unsafe { (real().poll)(fds, nfds, timeout) };
    }
    // SAFETY: [buf] as this function's contract: nfds pollfds, ours for the call.
    let v = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
    if !v.iter().any(|p| maybe(p.fd)) {
        // SAFETY: as this function's contract.
        return unsafe { (real().poll)(fds, nfds, timeout) };
    }
    poll_translated(v, timeout)
}

/// Runs `f` with the thread's signal mask `mask` (NULL: unchanged), then restores it. Not
/// atomic as `ppoll`'s and `pselect`'s are: a signal the mask unblocks that arrives before
/// the wait starts is handled then, and the wait runs its full time.
///
/// # Safety
/// \[in\] `mask` NULL or a `sigset_t`.
pub(crate) unsafe fn with_mask(mask: *const sigset_t, f: impl FnOnce() -> c_int) -> c_int {
    if mask.is_null() {
        return f();
    }
    // SAFETY: all-zero bytes are a sigset_t.
    let mut old: sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: [in] mask; [out] old, ours.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) };
    let n = f();
    let e = errno();
    // SAFETY: [in] old, the mask read above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    set_errno(e);
    n
}

/// `ppoll(2)`: as [`poll`], the timeout a `timespec`, `sigmask` set around the wait.
///
/// # Safety
/// As [`poll`]; \[in\] `ts` and `sigmask` NULL or their types.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    nfds: nfds_t,
    ts: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    let plain = fds.is_null() || nfds == 0 || nfds > 1 << 20 || {
        // SAFETY: [buf] as this function's contract.
        let v = unsafe { std::slice::from_raw_parts(fds, nfds as usize) };
        !v.iter().any(|p| maybe(p.fd))
    };
    if plain {
        // SAFETY: as this function's contract.
        return unsafe { (real().ppoll)(fds, nfds, ts, sigmask) };
    }
    // SAFETY: [in] as this function's contract.
    let Ok(ms) = (unsafe { ms_of(ts) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: [buf] as this function's contract: nfds pollfds, ours for the call.
    let v = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
    // SAFETY: [in] as this function's contract.
    unsafe { with_mask(sigmask, || poll_translated(v, ms)) }
}

/// The `select` work over rsockets: the sets as pollfds, [`poll_translated`], the sets
/// rewritten. `None` when no table number is in the sets (the caller asks the next
/// definition).
///
/// # Safety
/// \[out\] each set NULL or an `fd_set`; `nfds` at most `FD_SETSIZE`.
unsafe fn select_translated(
    nfds: c_int,
    sets: [*mut fd_set; 3],
    ms: c_int,
    mask: *const sigset_t,
) -> Option<c_int> {
    let mut fds = Vec::new();
    let mut any = false;
    for fd in 0..nfds {
        let mut events = 0;
        for (set, ev) in sets
            .iter()
            .zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI])
        {
            // SAFETY: [out] a non-NULL set is an fd_set; fd < nfds <= FD_SETSIZE.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, *set) } {
                events |= ev;
            }
        }
        if events != 0 {
            any |= maybe(fd);
            fds.push(pollfd {
                fd,
                events,
                revents: 0,
            });
        }
    }
    if !any {
        return None;
    }
    // SAFETY: [in] mask as the caller's contract.
    let n = unsafe { with_mask(mask, || poll_translated(&mut fds, ms)) };
    if n < 0 {
        return Some(n);
    }
    if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        set_errno(libc::EBADF);
        return Some(-1);
    }
    for set in sets.iter().filter(|s| !s.is_null()) {
        // SAFETY: [out] a non-NULL set is an fd_set.
        unsafe { libc::FD_ZERO(*set) };
    }
    let mut count = 0;
    let kinds = [
        libc::POLLIN | libc::POLLHUP | libc::POLLERR,
        libc::POLLOUT | libc::POLLERR,
        libc::POLLPRI,
    ];
    for p in &fds {
        for ((set, ev), want) in
            sets.iter()
                .zip(kinds)
                .zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI])
        {
            if !set.is_null() && p.events & want != 0 && p.revents & ev != 0 {
                // SAFETY: [out] a non-NULL set is an fd_set; p.fd < nfds.
                unsafe { libc::FD_SET(p.fd, *set) };
                count += 1;
            }
        }
    }
    Some(count)
}

/// `select(2)`: with a table number in the sets, [`poll`]'s work over them (an error or
/// hangup counts as readable, an error as writable, as Linux's select); `timeout` is
/// updated to the time left, as Linux does. Else the next `select`.
///
/// # Safety
/// \[out\] each set NULL or an `fd_set`; `timeout` NULL or a `timeval`; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    let rl = real();
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        // SAFETY: as this function's contract.
        return unsafe { (rl.select)(nfds, readfds, writefds, exceptfds, timeout) };
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: [out] timeout is a timeval.
        let t = unsafe { timeout.read_unaligned() };
        if t.tv_sec < 0 || !(0..1_000_000).contains(&t.tv_usec) {
            set_errno(libc::EINVAL);
            return -1;
        }
        ((t.tv_sec as i128) * 1000 + (t.tv_usec as i128 + 999) / 1000).min(c_int::MAX as i128)
            as c_int
    };
    let t0 = Instant::now();
    let sets = [readfds, writefds, exceptfds];
    // SAFETY: [out] as this function's contract; nfds checked.
    match unsafe { select_translated(nfds, sets, ms, std::ptr::null()) } {
        None => {
            // SAFETY: as this function's contract.
            unsafe { (rl.select)(nfds, readfds, writefds, exceptfds, timeout) }
        }
        Some(n) => {
            if !timeout.is_null() && n >= 0 {
                let left = std::time::Duration::from_millis(ms as u64).saturating_sub(t0.elapsed());
                // SAFETY: [out] timeout is a timeval.
                let mut tv: timeval = unsafe { timeout.read_unaligned() };
                tv.tv_sec = left.as_secs() as _;
                tv.tv_usec = left.subsec_micros() as _;
                // SAFETY: [out] timeout is a timeval.
                unsafe { timeout.write_unaligned(tv) };
            }
            n
        }
    }
}

/// `pselect(2)`: as [`select`], the timeout a `timespec` (not updated), `sigmask` set
/// around the wait.
///
/// # Safety
/// As [`select`]; \[in\] `ts`, `sigmask` NULL or their types.
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    ts: *const timespec,
    sigmask: *const sigset_t,
) -> c_int {
    let rl = real();
    if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
        // SAFETY: as this function's contract.
        return unsafe { (rl.pselect)(nfds, readfds, writefds, exceptfds, ts, sigmask) };
    }
    // SAFETY: [in] as this function's contract.
    let Ok(ms) = (unsafe { ms_of(ts) }) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let sets = [readfds, writefds, exceptfds];
    // SAFETY: [out] [in] as this function's contract; nfds checked.
    match unsafe { select_translated(nfds, sets, ms, sigmask) } {
        // SAFETY: as this function's contract.
        None => unsafe { (rl.pselect)(nfds, readfds, writefds, exceptfds, ts, sigmask) },
        Some(n) => n,
    }
}

// ---------------------------------------------------------------------------------------
// Options and names

/// `fcntl(2)` (declared `(int, int, unsigned long)`: stable Rust cannot define a variadic
/// function, and on x86-64 and AArch64 Linux the variadic argument, an integer or a
/// pointer, arrives where that third parameter is read). On a table number `F_SETFL` sets
/// the rsocket's `O_NONBLOCK` and the real socket's flags, `F_DUPFD` and
/// `F_DUPFD_CLOEXEC` share the rsocket with the new number; everything else (and every
/// other fd) goes to the next `fcntl`.
///
/// # Safety
/// `arg` as `fcntl(2)` reads it for `cmd`; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let rl = real();
    // SAFETY: as this function's contract.
    let n = unsafe { (rl.fcntl)(fd, cmd, arg) };
    if n < 0 {
        return n;
    }
    if let Some(s) = get(fd) {
        match cmd {
            libc::F_SETFL => {
                // SAFETY: integers only.
                unsafe { r::rfcntl(s.rs, libc::F_SETFL, (arg as c_int) & libc::O_NONBLOCK) };
            }
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => drop(insert(n, s)),
            _ => {}
        }
    }
    n
}

/// `FIONREAD` as glibc's `ioctl` takes it (libc's constant is an `int` on musl, whose
/// `ioctl` takes an `int`).
#[allow(clippy::unnecessary_cast)]
pub(crate) const FIONREAD: c_ulong = libc::FIONREAD as c_ulong;
/// `FIONBIO`, as [`FIONREAD`].
#[allow(clippy::unnecessary_cast)]
pub(crate) const FIONBIO: c_ulong = libc::FIONBIO as c_ulong;

/// `ioctl(2)` (glibc's `int ioctl(int, unsigned long, ...)`, whose one argument after the
/// request arrives here as a pointer). On a table number: `FIONREAD` (`SIOCINQ`) writes the
/// bytes a read would return now without waiting (0 before the connection, -1 and `EINVAL`
/// on a listening socket, as TCP; rdma-core's preload does not interpose `ioctl`), `FIONBIO`
/// sets `O_NONBLOCK` on the rsocket and
/// the real socket as `fcntl(F_SETFL)` does; every other request, and every other fd, goes
/// to the next `ioctl`.
///
/// # Safety
/// `arg` as `ioctl(2)` reads or writes it for `request` (`FIONREAD`: an `int` written;
/// `FIONBIO`: an `int` read); \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let rl = real();
    let Some(s) = get(fd) else {
        // SAFETY: as this function's contract.
        return unsafe { (rl.ioctl)(fd, request, arg) };
    };
    match request {
        FIONREAD => {
            if arg.is_null() {
                set_errno(libc::EFAULT);
                return -1;
            }
            let n = r::bytes_readable(s.rs);
            if n < 0 {
                return -1;
            }
            // SAFETY: [out] `arg` is the caller's `int` (FIONREAD's contract), checked non-NULL.
            unsafe { arg.cast::<c_int>().write_unaligned(n) };
            0
        }
        FIONBIO => {
            if arg.is_null() {
                set_errno(libc::EFAULT);
                return -1;
            }
            // SAFETY: [in] `arg` is the caller's `int` (FIONBIO's contract), checked non-NULL.
            let on = unsafe { arg.cast::<c_int>().read_unaligned() } != 0;
            // SAFETY: as this function's contract: the real socket first (its errors are
            // the call's).
            let n = unsafe { (rl.ioctl)(fd, request, arg) };
            if n < 0 {
                return n;
            }
            // SAFETY: integers only.
            unsafe { r::rfcntl(s.rs, libc::F_SETFL, if on { libc::O_NONBLOCK } else { 0 }) };
            0
        }
        // SAFETY: as this function's contract.
        _ => unsafe { (rl.ioctl)(fd, request, arg) },
    }
}

/// `fcntl64`: [`fcntl`] (the same on 64-bit Linux).
///
/// # Safety
/// As [`fcntl`].
#[cfg(target_pointer_width = "64")]
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: as this function's contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// `setsockopt(2)`: `rsetsockopt`, and the same option on the real socket (for the
/// fallback; its answer is not used); else the next `setsockopt`.
///
/// # Safety
/// \[buf\] `val` NULL or `len` readable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    let rl = real();
    let Some(s) = get(fd) else {
        // SAFETY: [buf] as this function's contract.
        return unsafe { (rl.setsockopt)(fd, level, name, val, len) };
    };
    // SAFETY: [buf] as this function's contract.
    let ret = unsafe { r::rsetsockopt(s.rs, level, name, val, len) };
    let e = errno();
    if level != r::SOL_RDMA {
        // SAFETY: [buf] as this function's contract.
        unsafe { (rl.setsockopt)(fd, level, name, val, len) };
    }
    set_errno(e);
    ret
}

/// `getsockopt(2)`: `rgetsockopt`; a socket-level option rsockets does not keep
/// (`SO_TYPE`, `SO_DOMAIN`, `SO_PROTOCOL`, …) is the real socket's; else the next
/// `getsockopt`.
///
/// # Safety
/// \[out\] `len` a `socklen_t`, `val` `*len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    let rl = real();
    let Some(s) = get(fd) else {
        // SAFETY: [out] as this function's contract.
        return unsafe { (rl.getsockopt)(fd, level, name, val, len) };
    };
    // SAFETY: [out] as this function's contract.
    let ret = unsafe { r::rgetsockopt(s.rs, level, name, val, len) };
    if ret < 0 && errno() == libc::ENOPROTOOPT && level == libc::SOL_SOCKET {
        // SAFETY: [out] as this function's contract.
        return unsafe { (rl.getsockopt)(fd, level, name, val, len) };
    }
    ret
}

/// `getsockname(2)`: `rgetsockname` or the next `getsockname`.
///
/// # Safety
/// \[out\] `len` a `socklen_t`, `addr` `*len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match get(fd) {
        // SAFETY: [out] as this function's contract.
        Some(s) => unsafe { r::rgetsockname(s.rs, addr, len) },
        // SAFETY: [out] as this function's contract.
        None => unsafe { (real().getsockname)(fd, addr, len) },
    }
}

/// `getpeername(2)`: `rgetpeername` or the next `getpeername`.
///
/// # Safety
/// \[out\] `len` a `socklen_t`, `addr` `*len` writable bytes; \[fd\].
#[cfg_attr(feature = "preload", no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    match get(fd) {
        // SAFETY: [out] as this function's contract.
        Some(s) => unsafe { r::rgetpeername(s.rs, addr, len) },
        // SAFETY: [out] as this function's contract.
        None => unsafe { (real().getpeername)(fd, addr, len) },
    }
}
