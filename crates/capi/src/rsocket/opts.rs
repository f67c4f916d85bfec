//! `rsetsockopt`, `rgetsockopt` and `rfcntl`.
//!
//! The options rsockets honours or accepts (rdma-core's `rsetsockopt`), and what each does
//! here:
//!
//! | level / option | here |
//! |---|---|
//! | `SOL_SOCKET` `SO_SNDBUF`, `SO_RCVBUF` | twice the value (as Linux and rsockets), 4 KiB to 1 GiB: the send and receive rings of the stream connected or accepted next |
//! | `SOL_SOCKET` `SO_REUSEADDR`, `SO_KEEPALIVE`, `SO_OOBINLINE`, `SO_LINGER` | stored and read back; no effect (the rdma_cm reuses ports; no keepalive messages are sent) |
//! | `SOL_SOCKET` `SO_ERROR` (get only) | always 0 (`rconnect` completes before it returns) |
//! | `IPPROTO_TCP` `TCP_NODELAY` | stored (every `rsend` is posted at once anyway) |
//! | `IPPROTO_TCP` `TCP_KEEPIDLE` | stored (> 0, else `EINVAL`) |
//! | `IPPROTO_TCP` `TCP_KEEPCNT`, `TCP_KEEPINTVL`, `TCP_MAXSEG`, `TCP_CONGESTION` | accepted, no effect (set); `TCP_MAXSEG` reads 2048 |
//! | `IPPROTO_IPV6` `IPV6_V6ONLY` | stored |
//! | `SOL_RDMA` `RDMA_SQSIZE`, `RDMA_RQSIZE` | queue entries, 16 to 65534, for the next stream; `EINVAL` once connected |
//! | `SOL_RDMA` `RDMA_INLINE` | the inline limit, up to 65534 (the device may grant less) |
//! | `SOL_RDMA` `RDMA_IOMAPSIZE` | entries of the iomap table the next stream announces (for the peer's `riomap`), 0 to 32512, rounded as rsockets rounds (above 128: down to a multiple of 256); `EINVAL` once connected |
//! | `SOL_RDMA` `RDMA_ROUTE` | accepted; no effect (the route is resolved at connect) |
//!
//! Anything else: `ENOPROTOOPT` (rsockets answers `ENOTSUP`).

use std::sync::atomic::Ordering;

use libc::{c_int, c_void, socklen_t};
use rverbs_stream::wire::{iomap_size_from_wire, iomap_size_to_wire, MAX_IOMAP_ENTRIES};

use super::{
    refuse, rs, Opts, Role, RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_ROUTE, RDMA_RQSIZE, RDMA_SQSIZE,
    SOL_RDMA,
};

const MIN_BUF: u64 = 4096;
const MAX_BUF: u64 = 1 << 30;
const MIN_QUEUE: u32 = 16;
const MAX_QUEUE: u32 = 0xfffe;

/// A buffer size option's value as the ring size: doubled, clamped to 4 KiB … 1 GiB.
fn ring_size(v: c_int) -> u32 {
    ((v as u32 as u64) << 1).clamp(MIN_BUF, MAX_BUF) as u32
}

/// rsockets' configuration directory: rdma-core's `RS_CONF_DIR` (`<sysconfdir>/rdma/rsocket`,
/// `/etc/rdma/rsocket` in Debian's build).
pub(crate) const CONF_DIR: &str = "/etc/rdma/rsocket";

/// The stream options a new rsocket starts with: rsockets' defaults, changed by the files of
/// rsockets' configuration directory that rdma-core reads when its first rsocket is made —
/// `inline_default`, `sqsize_default`, `rqsize_default`, `mem_default` (the receive ring's
/// bytes), `wmem_default` (the send ring's bytes) and `iomap_size` (and `polling_time`,
/// [`default_poll_time`], not a size) — each a number
/// (leading blanks allowed); a missing file, or one that does not start with a number,
/// leaves the default, as rdma-core's `fscanf`. Values are brought into the ranges the
/// matching `rsetsockopt` accepts (queues 16 to 65534, inline up to 65534, rings 4 KiB to
/// 1 GiB, the receive ring even, the iomap size rounded as rsockets rounds it), where
/// rdma-core stores the number as it is (a `%hu` above 65535 wraps there). Read once per
/// process, from `RVERBS_RSOCKET_CONF_DIR` if set (ours only, for tests), else
/// [`CONF_DIR`].
pub(crate) fn default_stream() -> rverbs_stream::StreamOptions {
    static OPTS: std::sync::OnceLock<rverbs_stream::StreamOptions> = std::sync::OnceLock::new();
    // Miri's isolation refuses every file open, so under Miri (the rsocket unit tests) the
    // defaults stand; the files' reading is `conf_options`' and its host tests'.
    if cfg!(miri) {
        return rverbs_stream::StreamOptions::default();
    }
    *OPTS.get_or_init(|| conf_options(&conf_dir()))
}

/// rsockets' configuration directory: `RVERBS_RSOCKET_CONF_DIR` if set (ours only, for
/// tests), else [`CONF_DIR`].
pub(crate) fn conf_dir() -> std::path::PathBuf {
    std::env::var_os("RVERBS_RSOCKET_CONF_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| CONF_DIR.into())
}

/// [`default_stream`] from the files of `dir`.
pub(crate) fn conf_options(dir: &std::path::Path) -> rverbs_stream::StreamOptions {
    let num = |name: &str| conf_num(dir, name);
    let mut o = rverbs_stream::StreamOptions::default();
    let queue = |v: u64| v.clamp(MIN_QUEUE as u64, MAX_QUEUE as u64) as u32;
    if let Some(v) = num("inline_default") {
        o.inline = v.min(MAX_QUEUE as u64) as u32;
    }
    if let Some(v) = num("sqsize_default") {
        o.send_queue = queue(v);
    }
    if let Some(v) = num("rqsize_default") {
        o.recv_queue = queue(v);
    }
    if let Some(v) = num("mem_default") {
        o.recv_buffer = (v.clamp(MIN_BUF, MAX_BUF) & !1) as u32;
    }
    if let Some(v) = num("wmem_default") {
        o.send_buffer = v.clamp(MIN_BUF, MAX_BUF) as u32;
    }
    if let Some(v) = num("iomap_size") {
        let n = v.min(MAX_IOMAP_ENTRIES as u64) as u16;
        o.iomap_entries = iomap_size_from_wire(iomap_size_to_wire(n));
    }
    o
}

/// rsockets' `polling_time` file (a number of microseconds, read as the others): how long a
/// blocked call polls before it sleeps ([`rverbs_stream::RdmaStream::set_poll_time`]), for
/// every rsocket connected or accepted in this process; `None` when there is no number or
/// when `RVERBS_STREAM_POLL_US` is set (ours, for the process: it wins). Read once per
/// process, from [`conf_dir`]; a value above a second is cut to a second.
pub(crate) fn default_poll_time() -> Option<std::time::Duration> {
    static POLL: std::sync::OnceLock<Option<std::time::Duration>> = std::sync::OnceLock::new();
    if cfg!(miri) {
        return None;
    }
    *POLL.get_or_init(|| {
        if std::env::var_os("RVERBS_STREAM_POLL_US").is_some() {
            return None;
        }
        conf_poll_time(&conf_dir())
    })
}

/// The `polling_time` file of `dir` ([`default_poll_time`]).
pub(crate) fn conf_poll_time(dir: &std::path::Path) -> Option<std::time::Duration> {
    let us = conf_num(dir, "polling_time")?;
    Some(std::time::Duration::from_micros(us).min(std::time::Duration::from_secs(1)))
}

/// The number at the start of the file `name` of `dir` (leading blanks allowed), as
/// rdma-core's `fscanf`; `None` if there is no file or no number.
fn conf_num(dir: &std::path::Path, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join(name)).ok()?;
    let t = text.trim_start();
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    t[..end].parse::<u64>().ok()
}

/// What `rsetsockopt` does with an option: `Ok` (set), or the errno.
fn set(
    o: &mut Opts,
    connected: bool,
    level: c_int,
    name: c_int,
    v: c_int,
    linger: Option<libc::linger>,
) -> Result<(), c_int> {
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => o.stream.send_buffer = ring_size(v),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => o.stream.recv_buffer = ring_size(v),
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => o.reuseaddr = v != 0,
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => o.keepalive = v != 0,
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => o.oobinline = v != 0,
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let l = linger.ok_or(libc::EINVAL)?;
            o.linger = (l.l_onoff != 0).then_some(l.l_linger);
        }
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => o.nodelay = v != 0,
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            if v <= 0 {
                return Err(libc::EINVAL);
            }
            o.keepidle = v;
        }
        (
            libc::IPPROTO_TCP,
            libc::TCP_KEEPCNT | libc::TCP_KEEPINTVL | libc::TCP_MAXSEG | libc::TCP_CONGESTION,
        ) => {}
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => o.v6only = v != 0,
        (SOL_RDMA, RDMA_SQSIZE | RDMA_RQSIZE | RDMA_INLINE | RDMA_IOMAPSIZE | RDMA_ROUTE)
            if connected =>
        {
            return Err(libc::EINVAL)
        }
        (SOL_RDMA, RDMA_SQSIZE) => o.stream.send_queue = (v as u32).clamp(MIN_QUEUE, MAX_QUEUE),
        (SOL_RDMA, RDMA_RQSIZE) => o.stream.recv_queue = (v as u32).clamp(MIN_QUEUE, MAX_QUEUE),
        (SOL_RDMA, RDMA_INLINE) => o.stream.inline = (v as u32).min(MAX_QUEUE),
        (SOL_RDMA, RDMA_IOMAPSIZE) => {
            let n = v.clamp(0, MAX_IOMAP_ENTRIES as c_int) as u16;
            o.stream.iomap_entries = iomap_size_from_wire(iomap_size_to_wire(n));
        }
        (SOL_RDMA, RDMA_ROUTE) => {}
        _ => return Err(libc::ENOPROTOOPT),
    }
    Ok(())
}

/// The value `rgetsockopt` reads: an int, or a `linger`.
enum Value {
    Int(c_int),
    Linger(libc::linger),
}

fn get(o: &Opts, level: c_int, name: c_int) -> Result<Value, c_int> {
    let b = |x: bool| Value::Int(x as c_int);
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => Value::Int(o.stream.send_buffer as c_int),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => Value::Int(o.stream.recv_buffer as c_int),
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => b(o.reuseaddr),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => b(o.keepalive),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => b(o.oobinline),
        (libc::SOL_SOCKET, libc::SO_LINGER) => Value::Linger(libc::linger {
            l_onoff: o.linger.is_some() as c_int,
            l_linger: o.linger.unwrap_or(0),
        }),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => b(o.nodelay),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => Value::Int(o.keepidle),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => Value::Int(2048),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => b(o.v6only),
        (SOL_RDMA, RDMA_SQSIZE) => Value::Int(o.stream.send_queue as c_int),
        (SOL_RDMA, RDMA_RQSIZE) => Value::Int(o.stream.recv_queue as c_int),
        (SOL_RDMA, RDMA_INLINE) => Value::Int(o.stream.inline as c_int),
        (SOL_RDMA, RDMA_IOMAPSIZE) => Value::Int(o.stream.iomap_entries as c_int),
        _ => return Err(libc::ENOPROTOOPT),
    })
}

symver!(rsetsockopt => "RDMACM_1.0");
/// `rsetsockopt`: the options of the table above. -1 and `EBADF`, `EFAULT` (NULL
/// `optval`), `EINVAL` (`optlen` shorter than an `int`, or than a `linger` for
/// `SO_LINGER`; a `SOL_RDMA` option once connected; `TCP_KEEPIDLE` ≤ 0), `ENOPROTOOPT`
/// (an option not in the table).
///
/// # Safety
/// \[buf\] `optval` NULL or `optlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    let s = rs!(socket);
    if level == SOL_RDMA && optname == RDMA_ROUTE {
        // A route of any length: accepted, not read.
    } else if optval.is_null() {
        return refuse(libc::EFAULT, "rsetsockopt: NULL optval");
    } else if (optlen as usize) < std::mem::size_of::<c_int>() {
        return refuse(libc::EINVAL, "rsetsockopt: optlen shorter than an int");
    }
    let mut linger = None;
    let mut v = 0;
    if !optval.is_null() && optlen as usize >= std::mem::size_of::<c_int>() {
        // SAFETY: [buf] at least an int's bytes are readable (checked above).
        v = unsafe { optval.cast::<c_int>().read_unaligned() };
    }
    if level == libc::SOL_SOCKET && optname == libc::SO_LINGER {
        if (optlen as usize) < std::mem::size_of::<libc::linger>() {
            return refuse(
                libc::EINVAL,
                "rsetsockopt SO_LINGER: optlen shorter than a linger",
            );
        }
        // SAFETY: [buf] optlen covers a linger.
        linger = Some(unsafe { optval.cast::<libc::linger>().read_unaligned() });
    }
    let mut st = s.lock();
    let connected = matches!(st.role, Role::Connected(_));
    match set(&mut st.opts, connected, level, optname, v, linger) {
        Ok(()) => 0,
        Err(n) => refuse(n, &format!("rsetsockopt level {level} option {optname}")),
    }
}

symver!(rgetsockopt => "RDMACM_1.0");
/// `rgetsockopt`: the options of the table above (and `SO_ERROR`), written as
/// `getsockopt(2)` does (truncated to `*optlen`, which is set to the size written). -1
/// and `EBADF`, `EFAULT` (NULL `optval` or `optlen`), `EINVAL` (`*optlen` negative as an
/// int), `ENOPROTOOPT`.
///
/// # Safety
/// \[out\] `optlen` NULL or a readable and writable `socklen_t`; `optval` NULL or
/// `*optlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    let s = rs!(socket);
    if optval.is_null() || optlen.is_null() {
        return refuse(libc::EFAULT, "rgetsockopt: NULL optval or optlen");
    }
    // SAFETY: [out] optlen is readable.
    let room = unsafe { optlen.read_unaligned() };
    if (room as c_int) < 0 {
        return refuse(libc::EINVAL, "rgetsockopt: negative optlen");
    }
    let v = if level == libc::SOL_SOCKET && optname == libc::SO_ERROR {
        Ok(Value::Int(s.so_error.swap(0, Ordering::Relaxed)))
    } else {
        get(&s.lock().opts, level, optname)
    };
    let v = match v {
        Ok(v) => v,
        Err(n) => return refuse(n, &format!("rgetsockopt level {level} option {optname}")),
    };
    let (bytes, len): ([u8; 8], usize) = match v {
        Value::Int(i) => {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&i.to_ne_bytes());
            (b, 4)
        }
        Value::Linger(l) => {
            let mut b = [0u8; 8];
            b[..4].copy_from_slice(&l.l_onoff.to_ne_bytes());
            b[4..].copy_from_slice(&l.l_linger.to_ne_bytes());
            (b, 8)
        }
    };
    let n = len.min(room as usize);
    // SAFETY: [out] optval has `room` writable bytes; n ≤ room.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), optval.cast::<u8>(), n);
        optlen.write_unaligned(n as socklen_t);
    }
    0
}

symver!(rfcntl => "RDMACM_1.0");
/// `rfcntl`: `F_GETFL` (`O_RDWR`, with `O_NONBLOCK` when set) and `F_SETFL` (`O_NONBLOCK`
/// honoured, other flags ignored). -1 and `EBADF`, `EOPNOTSUPP` for other commands (as
/// rsockets).
///
/// C declares `rfcntl(int, int, ...)`. Stable Rust cannot define a variadic function; on
/// the x86-64 and AArch64 Linux ABIs a variadic `int` argument travels in the register a
/// third `int` parameter is read from, so this definition receives it (for `F_GETFL`, which
/// passes none, the value is ignored).
///
/// # Safety
/// Takes integers only.
#[no_mangle]
pub unsafe extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: c_int) -> c_int {
    let s = rs!(socket);
    match cmd {
        libc::F_GETFL => {
            libc::O_RDWR
                | if s.nonblocking.load(Ordering::Relaxed) {
                    libc::O_NONBLOCK
                } else {
                    0
                }
        }
        libc::F_SETFL => {
            s.nonblocking
                .store(arg & libc::O_NONBLOCK != 0, Ordering::Relaxed);
            0
        }
        _ => refuse(libc::EOPNOTSUPP, &format!("rfcntl: command {cmd}")),
    }
}
