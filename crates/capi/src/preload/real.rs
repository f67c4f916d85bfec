//! The next definitions of the interposed functions (`dlsym(RTLD_NEXT, name)`: glibc's),
//! looked up once.

use std::sync::OnceLock;

use libc::{
    c_int, c_ulong, c_void, fd_set, iovec, msghdr, nfds_t, off_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec, timeval,
};

macro_rules! real {
    ($($name:ident : fn($($a:ty),*) -> $r:ty;)*) => {
        /// The next definition of each interposed function.
        pub(crate) struct Real {
            $(pub $name: unsafe extern "C" fn($($a),*) -> $r,)*
            pub fcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int,
            pub ioctl: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int,
        }

        fn load() -> Real {
            Real {
                // SAFETY: each name is looked up with glibc's type of it (<sys/socket.h>,
                // <unistd.h>, <poll.h>, …), which the field's type spells out.
                $($name: unsafe {
                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($a),*) -> $r>(
                        next(concat!(stringify!($name), "\0")),
                    )
                },)*
                // SAFETY: as above: `int fcntl(int, int, ...)`.
                fcntl: unsafe {
                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int, c_int, ...) -> c_int>(
                        next("fcntl\0"),
                    )
                },
                // SAFETY: as above: `int ioctl(int, unsigned long, ...)`.
                ioctl: unsafe {
                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int>(
                        next("ioctl\0"),
                    )
                },
            }
        }
    };
}

real! {
    socket: fn(c_int, c_int, c_int) -> c_int;
    bind: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    listen: fn(c_int, c_int) -> c_int;
    accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    connect: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    readv: fn(c_int, *const iovec, c_int) -> ssize_t;
    writev: fn(c_int, *const iovec, c_int) -> ssize_t;
    recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t;
    sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t;
    poll: fn(*mut pollfd, nfds_t, c_int) -> c_int;
    ppoll: fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int;
    select: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *mut timeval) -> c_int;
    pselect: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *const timespec, *const sigset_t) -> c_int;
    setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    getsockname: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getpeername: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    shutdown: fn(c_int, c_int) -> c_int;
    close: fn(c_int) -> c_int;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    pread: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    epoll_ctl: fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    epoll_pwait: fn(c_int, *mut libc::epoll_event, c_int, c_int, *const sigset_t) -> c_int;
}

/// `dlsym(RTLD_NEXT, name)`; a missing one ends the process (glibc defines them all).
fn next(name: &str) -> *mut c_void {
    debug_assert!(name.ends_with('\0'));
    // SAFETY: `name` is NUL-terminated (every caller's literal ends with "\0").
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
    if p.is_null() {
        eprintln!(
            "librspreload: no next definition of {}",
            name.trim_end_matches('\0')
        );
        std::process::abort();
    }
    p
}

static REAL: OnceLock<Real> = OnceLock::new();

/// The next definitions.
pub(crate) fn real() -> &'static Real {
    REAL.get_or_init(load)
}
