//! Every error a C caller of the rsockets API can reach without an RDMA device, and the
//! registry's behaviour under `rclose` races. (Connecting, listening and data: the VM tests
//! in `tests/vm_rsocket.rs`.)

use std::mem::size_of;
use std::net::SocketAddr;
use std::ptr::{null, null_mut};

use libc::{c_int, c_void, sockaddr, socklen_t};

use super::*;

/// The tests of this module one at a time: they close rsockets and look at the numbers
/// again, which a parallel test's new rsocket could reuse.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn errno() -> c_int {
    io::Error::last_os_error().raw_os_error().unwrap()
}

/// `r` is -1 with `errno` `e`.
#[track_caller]
fn refused<T: Into<i64>>(r: T, e: c_int) {
    let r = r.into();
    let got = errno();
    assert_eq!(
        (r, got),
        (-1, e),
        "wanted -1 and {}, got {r} and {}",
        io::Error::from_raw_os_error(e),
        io::Error::from_raw_os_error(got)
    );
}

fn new() -> c_int {
    // SAFETY: integers only.
    let fd = unsafe { rsocket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(fd >= 0, "rsocket: {}", io::Error::last_os_error());
    fd
}

fn close(fd: c_int) {
    // SAFETY: integers only.
    assert_eq!(unsafe { rclose(fd) }, 0);
}

fn sin(a: &str) -> libc::sockaddr_in {
    let SocketAddr::V4(v) = a.parse::<SocketAddr>().unwrap() else {
        panic!()
    };
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// A pipe (an ordinary fd pair), closed on drop.
struct Pipe([c_int; 2]);
impl Pipe {
    fn new() -> Pipe {
        let mut p = [0; 2];
        // SAFETY: p has room for two fds.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        Pipe(p)
    }
}
impl Drop for Pipe {
    fn drop(&mut self) {
        // SAFETY: our fds.
        unsafe {
            libc::close(self.0[0]);
            libc::close(self.0[1]);
        }
    }
}

#[test]
fn rsocket_refuses_other_domains_types_and_protocols() {
    let _serial = serial();
    // SAFETY: integers only.
    unsafe {
        refused(
            rsocket(libc::AF_UNIX, libc::SOCK_STREAM, 0),
            libc::EAFNOSUPPORT,
        );
        refused(
            rsocket(libc::AF_INET, libc::SOCK_DGRAM, 0),
            libc::ESOCKTNOSUPPORT,
        );
        refused(
            rsocket(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_UDP),
            libc::EPROTONOSUPPORT,
        );
        let fd = rsocket(
            libc::AF_INET6,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_TCP,
        );
        assert!(fd >= 0);
        assert_eq!(
            rfcntl(fd, libc::F_GETFL, 0),
            libc::O_RDWR | libc::O_NONBLOCK
        );
        close(fd);
    }
}

#[test]
fn the_number_is_a_real_fd_and_rclose_twice_is_ebadf() {
    let _serial = serial();
    let fd = new();
    // SAFETY: F_GETFD on a number we own.
    assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0);
    close(fd);
    // SAFETY: integers only.
    refused(unsafe { rclose(fd) }, libc::EBADF);
}

#[test]
fn every_call_refuses_a_number_that_is_no_rsocket() {
    let _serial = serial();
    let p = Pipe::new();
    let mut b = [0u8; 4];
    let mut a = sin("1.2.3.4:5");
    let mut al = size_of::<libc::sockaddr_in>() as socklen_t;
    let ap = std::ptr::addr_of_mut!(a).cast::<sockaddr>();
    let iov = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 4,
    };
    let mut v: c_int = 1;
    let mut vl = 4 as socklen_t;
    let vp = std::ptr::addr_of_mut!(v).cast::<c_void>();
    // SAFETY: the zeroed msghdr has no iovecs and no control data.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    for fd in [-1, 1 << 20, p.0[0]] {
        // SAFETY: every pointer is valid for its call.
        unsafe {
            refused(rclose(fd), libc::EBADF);
            refused(rbind(fd, ap, al), libc::EBADF);
            refused(rlisten(fd, 1), libc::EBADF);
            refused(raccept(fd, null_mut(), null_mut()), libc::EBADF);
            refused(rconnect(fd, ap, al), libc::EBADF);
            refused(rshutdown(fd, libc::SHUT_RDWR), libc::EBADF);
            refused(rrecv(fd, b.as_mut_ptr().cast(), 4, 0) as i64, libc::EBADF);
            refused(rread(fd, b.as_mut_ptr().cast(), 4) as i64, libc::EBADF);
            refused(
                rrecvfrom(fd, b.as_mut_ptr().cast(), 4, 0, null_mut(), null_mut()) as i64,
                libc::EBADF,
            );
            refused(rrecvmsg(fd, &mut m, 0) as i64, libc::EBADF);
            refused(rreadv(fd, &iov, 1) as i64, libc::EBADF);
            refused(rsend(fd, b.as_ptr().cast(), 4, 0) as i64, libc::EBADF);
            refused(rwrite(fd, b.as_ptr().cast(), 4) as i64, libc::EBADF);
            refused(
                rsendto(fd, b.as_ptr().cast(), 4, 0, null(), 0) as i64,
                libc::EBADF,
            );
            refused(rsendmsg(fd, &m, 0) as i64, libc::EBADF);
            refused(rwritev(fd, &iov, 1) as i64, libc::EBADF);
            refused(rgetpeername(fd, ap, &mut al), libc::EBADF);
            refused(rgetsockname(fd, ap, &mut al), libc::EBADF);
            refused(
                rsetsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, vp, 4),
                libc::EBADF,
            );
            refused(
                rgetsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, vp, &mut vl),
                libc::EBADF,
            );
            refused(rfcntl(fd, libc::F_GETFL, 0), libc::EBADF);
        }
    }
    // The pipe is untouched.
    // SAFETY: our fd.
    assert!(unsafe { libc::fcntl(p.0[0], libc::F_GETFD) } >= 0);
}

#[test]
fn bad_addresses_are_refused() {
    let _serial = serial();
    let fd = new();
    let a = sin("10.0.0.1:7471");
    let ap = std::ptr::addr_of!(a).cast::<sockaddr>();
    let full = size_of::<libc::sockaddr_in>() as socklen_t;
    // SAFETY: every pointer is valid for its length.
    unsafe {
        refused(rbind(fd, null(), full), libc::EFAULT);
        refused(rconnect(fd, null(), full), libc::EFAULT);
        refused(rbind(fd, ap, 1), libc::EINVAL);
        refused(rbind(fd, ap, full - 1), libc::EINVAL);
        refused(rconnect(fd, ap, 4), libc::EINVAL);
        let mut un: libc::sockaddr_un = std::mem::zeroed();
        un.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let up = std::ptr::addr_of!(un).cast::<sockaddr>();
        refused(
            rbind(fd, up, size_of::<libc::sockaddr_un>() as socklen_t),
            libc::EAFNOSUPPORT,
        );
        refused(
            rconnect(fd, up, size_of::<libc::sockaddr_un>() as socklen_t),
            libc::EAFNOSUPPORT,
        );
        assert_eq!(rbind(fd, ap, full), 0);
        refused(rbind(fd, ap, full), libc::EINVAL);
    }
    close(fd);
}

#[test]
fn names_are_written_as_getsockname_writes_them() {
    let _serial = serial();
    let fd = new();
    let mut out = sin("9.9.9.9:9");
    let op = std::ptr::addr_of_mut!(out).cast::<sockaddr>();
    let full = size_of::<libc::sockaddr_in>() as socklen_t;
    let mut len = full;
    // SAFETY: every pointer is valid for its length.
    unsafe {
        // Unbound: 0.0.0.0:0.
        assert_eq!(rgetsockname(fd, op, &mut len), 0);
        assert_eq!((len, out.sin_port, out.sin_addr.s_addr), (full, 0, 0));
        let a = sin("10.1.2.3:7471");
        assert_eq!(rbind(fd, std::ptr::addr_of!(a).cast(), full), 0);
        assert_eq!(rgetsockname(fd, op, &mut len), 0);
        assert_eq!(
            (out.sin_port, out.sin_addr.s_addr),
            (a.sin_port, a.sin_addr.s_addr)
        );
        // Truncated to the room given; the full size reported.
        let mut small = [0xaau8; 6];
        let mut sl = 4 as socklen_t;
        assert_eq!(rgetsockname(fd, small.as_mut_ptr().cast(), &mut sl), 0);
        assert_eq!(sl, full);
        assert_eq!(small[4..], [0xaa, 0xaa], "wrote past the room given");
        refused(rgetsockname(fd, null_mut(), &mut len), libc::EFAULT);
        refused(rgetsockname(fd, op, null_mut()), libc::EFAULT);
        refused(rgetpeername(fd, op, &mut len), libc::ENOTCONN);
    }
    close(fd);
}

#[test]
fn data_calls_on_an_unconnected_rsocket() {
    let _serial = serial();
    let fd = new();
    let mut b = [0u8; 8];
    let bp = b.as_mut_ptr().cast::<c_void>();
    // SAFETY: every pointer is valid for its length (or NULL, refused).
    unsafe {
        refused(rrecv(fd, bp, 8, 0) as i64, libc::ENOTCONN);
        refused(rsend(fd, bp, 8, 0) as i64, libc::ENOTCONN);
        refused(rrecv(fd, null_mut(), 8, 0) as i64, libc::EFAULT);
        refused(rsend(fd, null(), 8, 0) as i64, libc::EFAULT);
        refused(rrecv(fd, bp, usize::MAX, 0) as i64, libc::EINVAL);
        refused(rrecv(fd, bp, 8, libc::MSG_PEEK) as i64, libc::EOPNOTSUPP);
        refused(rsend(fd, bp, 8, libc::MSG_OOB) as i64, libc::EOPNOTSUPP);
        let a = sin("10.0.0.1:1");
        refused(
            rsendto(
                fd,
                bp,
                8,
                0,
                std::ptr::addr_of!(a).cast(),
                size_of::<libc::sockaddr_in>() as socklen_t,
            ) as i64,
            libc::EISCONN,
        );
        let mut al: socklen_t = 0;
        refused(
            rrecvfrom(fd, bp, 8, 0, bp.cast(), null_mut()) as i64,
            libc::EFAULT,
        );
        let _ = &mut al;
        // iovecs
        let iov = [libc::iovec {
            iov_base: bp,
            iov_len: 8,
        }];
        refused(rreadv(fd, iov.as_ptr(), -1) as i64, libc::EINVAL);
        refused(rreadv(fd, iov.as_ptr(), IOV_MAX + 1) as i64, libc::EINVAL);
        refused(rwritev(fd, null(), 1) as i64, libc::EFAULT);
        let nul = [libc::iovec {
            iov_base: null_mut(),
            iov_len: 8,
        }];
        refused(rwritev(fd, nul.as_ptr(), 1) as i64, libc::EFAULT);
        let huge = [
            libc::iovec {
                iov_base: bp,
                iov_len: isize::MAX as usize,
            },
            libc::iovec {
                iov_base: bp,
                iov_len: 2,
            },
        ];
        refused(rreadv(fd, huge.as_ptr(), 2) as i64, libc::EINVAL);
        // Overlapping receive buffers: two `&mut` may not alias, refused.
        let lap = [
            libc::iovec {
                iov_base: bp,
                iov_len: 8,
            },
            libc::iovec {
                iov_base: bp.cast::<u8>().add(4).cast(),
                iov_len: 4,
            },
        ];
        refused(rreadv(fd, lap.as_ptr(), 2) as i64, libc::EINVAL);
        // Sending from overlapping buffers is fine (not connected here).
        refused(rwritev(fd, lap.as_ptr(), 2) as i64, libc::ENOTCONN);
        refused(rreadv(fd, iov.as_ptr(), 1) as i64, libc::ENOTCONN);
        // msghdr
        refused(rrecvmsg(fd, null_mut(), 0) as i64, libc::EFAULT);
        refused(rsendmsg(fd, null(), 0) as i64, libc::EFAULT);
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_iov = iov.as_ptr().cast_mut();
        m.msg_iovlen = 1;
        m.msg_control = bp;
        m.msg_controllen = 8;
        refused(rrecvmsg(fd, &mut m, 0) as i64, libc::EOPNOTSUPP);
        refused(rsendmsg(fd, &m, 0) as i64, libc::EOPNOTSUPP);
        m.msg_control = null_mut();
        m.msg_controllen = 0;
        refused(rsendmsg(fd, &m, 0) as i64, libc::ENOTCONN);
        // shutdown
        refused(rshutdown(fd, 7), libc::EINVAL);
        refused(rshutdown(fd, libc::SHUT_WR), libc::ENOTCONN);
        // accept on a socket that does not listen
        refused(raccept(fd, null_mut(), null_mut()), libc::EINVAL);
        refused(raccept(fd, bp.cast(), null_mut()), libc::EFAULT);
        // iomap: bad prot first, then not connected (rsockets: EINVAL without a PD), an
        // unknown range to unmap, and riowrite without a connection.
        refused(riomap(fd, bp, 8, libc::PROT_READ, 0, 0), libc::EINVAL);
        refused(riomap(fd, bp, 8, libc::PROT_WRITE, 0, 0), libc::EINVAL);
        refused(riomap(fd, bp, 8, libc::PROT_NONE, 0, -1), libc::EINVAL);
        refused(riounmap(fd, bp, 8), libc::EINVAL);
        refused(riowrite(fd, bp, 8, 0, 0) as i64, libc::ENOTCONN);
        refused(riomap(-1, bp, 8, libc::PROT_WRITE, 0, 0), libc::EBADF);
        refused(riounmap(-1, bp, 8), libc::EBADF);
        refused(riowrite(-1, bp, 8, 0, 0) as i64, libc::EBADF);
        // Zero bytes on an unconnected rsocket: still not connected.
        refused(rrecv(fd, null_mut(), 0, 0) as i64, libc::ENOTCONN);
    }
    close(fd);
}

fn getint(fd: c_int, level: c_int, name: c_int) -> c_int {
    let mut v: c_int = -7;
    let mut l = 4 as socklen_t;
    // SAFETY: v and l are valid.
    let r = unsafe { rgetsockopt(fd, level, name, std::ptr::addr_of_mut!(v).cast(), &mut l) };
    assert_eq!(
        (r, l),
        (0, 4),
        "rgetsockopt {level} {name}: {}",
        io::Error::last_os_error()
    );
    v
}

fn setint(fd: c_int, level: c_int, name: c_int, v: c_int) -> c_int {
    // SAFETY: v is a readable int.
    unsafe { rsetsockopt(fd, level, name, std::ptr::addr_of!(v).cast(), 4) }
}

#[test]
fn options_as_rsockets_keeps_them() {
    let _serial = serial();
    let fd = new();
    // Buffer sizes are doubled, and at least 4 KiB.
    assert_eq!(getint(fd, libc::SOL_SOCKET, libc::SO_SNDBUF), 128 * 1024);
    assert_eq!(setint(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 1 << 19), 0);
    assert_eq!(getint(fd, libc::SOL_SOCKET, libc::SO_SNDBUF), 1 << 20);
    assert_eq!(setint(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 100), 0);
    assert_eq!(getint(fd, libc::SOL_SOCKET, libc::SO_RCVBUF), 4096);
    assert_eq!(setint(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, -1), 0);
    assert_eq!(getint(fd, libc::SOL_SOCKET, libc::SO_RCVBUF), 1 << 30);
    for (level, name) in [
        (libc::SOL_SOCKET, libc::SO_REUSEADDR),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY),
    ] {
        assert_eq!(getint(fd, level, name), 0);
        assert_eq!(setint(fd, level, name, 5), 0);
        assert_eq!(getint(fd, level, name), 1);
    }
    for (name, v, want) in [
        (RDMA_SQSIZE, 1, 16),
        (RDMA_SQSIZE, 100, 100),
        (RDMA_RQSIZE, 1 << 20, 0xfffe),
        (RDMA_INLINE, 0, 0),
        (RDMA_INLINE, 1 << 20, 0xfffe),
        (RDMA_IOMAPSIZE, 8, 8),
        // rsockets' scaled size: above 128 rounded down to a multiple of 256.
        (RDMA_IOMAPSIZE, 128, 128),
        (RDMA_IOMAPSIZE, 1000, 768),
        (RDMA_IOMAPSIZE, 1 << 20, 32512),
        (RDMA_IOMAPSIZE, -5, 0),
    ] {
        assert_eq!(setint(fd, SOL_RDMA, name, v), 0);
        assert_eq!(getint(fd, SOL_RDMA, name), want, "SOL_RDMA {name} = {v}");
    }
    // A route is accepted (and not read).
    // SAFETY: RDMA_ROUTE's value is not read.
    let r = unsafe { rsetsockopt(fd, SOL_RDMA, RDMA_ROUTE, null(), 0) };
    assert_eq!(r, 0);
    for n in [libc::TCP_KEEPCNT, libc::TCP_KEEPINTVL, libc::TCP_MAXSEG] {
        assert_eq!(setint(fd, libc::IPPROTO_TCP, n, 3), 0);
    }
    assert_eq!(getint(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG), 2048);
    assert_eq!(setint(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 30), 0);
    assert_eq!(getint(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 30);
    refused(
        setint(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 0),
        libc::EINVAL,
    );
    assert_eq!(getint(fd, libc::SOL_SOCKET, libc::SO_ERROR), 0);
    // SO_LINGER: a struct linger.
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 7,
    };
    let mut back = libc::linger {
        l_onoff: 0,
        l_linger: 0,
    };
    let mut bl = size_of::<libc::linger>() as socklen_t;
    // SAFETY: every pointer is valid for its length.
    unsafe {
        assert_eq!(
            rsetsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                std::ptr::addr_of!(l).cast(),
                8
            ),
            0
        );
        assert_eq!(
            rgetsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                std::ptr::addr_of_mut!(back).cast(),
                &mut bl
            ),
            0
        );
        assert_eq!((back.l_onoff, back.l_linger, bl), (1, 7, 8));
        refused(
            rsetsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                std::ptr::addr_of!(l).cast(),
                4,
            ),
            libc::EINVAL,
        );
    }
    close(fd);
}

#[test]
fn bad_options_are_refused() {
    let _serial = serial();
    let fd = new();
    let v: c_int = 1;
    let vp = std::ptr::addr_of!(v).cast::<c_void>();
    let mut out: c_int = 0;
    let op = std::ptr::addr_of_mut!(out).cast::<c_void>();
    let mut ol = 4 as socklen_t;
    // SAFETY: every pointer is valid for its length (or NULL, refused).
    unsafe {
        refused(
            rsetsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, null(), 4),
            libc::EFAULT,
        );
        refused(
            rsetsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, vp, 2),
            libc::EINVAL,
        );
        refused(
            rsetsockopt(fd, libc::SOL_SOCKET, libc::SO_BROADCAST, vp, 4),
            libc::ENOPROTOOPT,
        );
        refused(
            rsetsockopt(fd, libc::IPPROTO_IP, libc::IP_TTL, vp, 4),
            libc::ENOPROTOOPT,
        );
        refused(rsetsockopt(fd, 12345, 1, vp, 4), libc::ENOPROTOOPT);
        refused(rsetsockopt(fd, SOL_RDMA, 99, vp, 4), libc::ENOPROTOOPT);
        refused(
            rgetsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, null_mut(), &mut ol),
            libc::EFAULT,
        );
        refused(
            rgetsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, op, null_mut()),
            libc::EFAULT,
        );
        refused(
            rgetsockopt(fd, libc::SOL_SOCKET, libc::SO_BROADCAST, op, &mut ol),
            libc::ENOPROTOOPT,
        );
        refused(
            rgetsockopt(fd, SOL_RDMA, RDMA_ROUTE, op, &mut ol),
            libc::ENOPROTOOPT,
        );
        let mut neg = -1i32 as socklen_t;
        refused(
            rgetsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, op, &mut neg),
            libc::EINVAL,
        );
        // A short optlen truncates, as getsockopt(2).
        let mut two = [0xaau8; 4];
        let mut tl = 2 as socklen_t;
        assert_eq!(
            rgetsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                two.as_mut_ptr().cast(),
                &mut tl
            ),
            0
        );
        assert_eq!((tl, two[2], two[3]), (2, 0xaa, 0xaa));
        // fcntl
        assert_eq!(rfcntl(fd, libc::F_GETFL, 0), libc::O_RDWR);
        assert_eq!(rfcntl(fd, libc::F_SETFL, libc::O_NONBLOCK), 0);
        assert_eq!(
            rfcntl(fd, libc::F_GETFL, 0),
            libc::O_RDWR | libc::O_NONBLOCK
        );
        assert_eq!(rfcntl(fd, libc::F_SETFL, 0), 0);
        assert_eq!(rfcntl(fd, libc::F_GETFL, 0), libc::O_RDWR);
        refused(rfcntl(fd, libc::F_SETLK, 0), libc::EOPNOTSUPP);
        refused(rfcntl(fd, libc::F_DUPFD, 0), libc::EOPNOTSUPP);
    }
    close(fd);
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no poll(2)")]
fn rpoll_mixes_rsockets_and_ordinary_fds() {
    let _serial = serial();
    let p = Pipe::new();
    let fd = new();
    let mut fds = [
        libc::pollfd {
            fd: p.0[0],
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: fds is valid for its length; the pipe's fds are ours.
    unsafe {
        // Nothing ready: the timeout.
        let t0 = std::time::Instant::now();
        assert_eq!(rpoll(fds.as_mut_ptr(), 1, 50), 0);
        assert!(t0.elapsed() >= std::time::Duration::from_millis(45));
        assert_eq!(fds[0].revents, 0);
        assert_eq!(libc::write(p.0[1], b"x".as_ptr().cast(), 1), 1);
        fds[1].fd = fd;
        assert_eq!(rpoll(fds.as_mut_ptr(), 2, -1), 2);
        assert_eq!(fds[0].revents, libc::POLLIN);
        // An rsocket neither connected nor listening: a hangup, as an unconnected socket.
        assert_eq!(fds[1].revents, libc::POLLHUP);
        refused(rpoll(null_mut(), 1, 0), libc::EFAULT);
        assert_eq!(rpoll(null_mut(), 0, 0), 0);
        refused(rpoll(fds.as_mut_ptr(), 1 << 21, 0), libc::EINVAL);
    }
    close(fd);
}

#[test]
#[cfg_attr(miri, ignore = "Miri has no poll(2)")]
fn rselect_reports_ready_fds_and_refuses_bad_arguments() {
    let _serial = serial();
    let p = Pipe::new();
    let fd = new();
    // SAFETY: the sets and timevals are local and valid.
    unsafe {
        let mut r: libc::fd_set = std::mem::zeroed();
        let mut w: libc::fd_set = std::mem::zeroed();
        libc::FD_SET(p.0[0], &mut r);
        libc::FD_SET(p.0[1], &mut w);
        let mut t = libc::timeval {
            tv_sec: 0,
            tv_usec: 20_000,
        };
        let n = p.0[0].max(p.0[1]).max(fd) + 1;
        // The write end is writable, the read end is not readable yet.
        assert_eq!(rselect(n, &mut r, &mut w, null_mut(), &mut t), 1);
        assert!(!libc::FD_ISSET(p.0[0], &r));
        assert!(libc::FD_ISSET(p.0[1], &w));
        // An unconnected rsocket in the write set: a hangup counts as writable.
        let mut w2: libc::fd_set = std::mem::zeroed();
        libc::FD_SET(fd, &mut w2);
        assert_eq!(rselect(n, null_mut(), &mut w2, null_mut(), &mut t), 1);
        assert!(libc::FD_ISSET(fd, &w2));
        let mut r3: libc::fd_set = std::mem::zeroed();
        libc::FD_SET(p.0[0], &mut r3);
        refused(
            rselect(-1, &mut r3, null_mut(), null_mut(), &mut t),
            libc::EINVAL,
        );
        refused(
            rselect(
                libc::FD_SETSIZE as c_int + 1,
                &mut r3,
                null_mut(),
                null_mut(),
                &mut t,
            ),
            libc::EINVAL,
        );
        let mut bad = libc::timeval {
            tv_sec: -1,
            tv_usec: 0,
        };
        refused(
            rselect(n, &mut r3, null_mut(), null_mut(), &mut bad),
            libc::EINVAL,
        );
        bad = libc::timeval {
            tv_sec: 0,
            tv_usec: 1_000_000,
        };
        refused(
            rselect(n, &mut r3, null_mut(), null_mut(), &mut bad),
            libc::EINVAL,
        );
    }
    close(fd);
}

/// rclose racing calls on the same rsocket from other threads: each call either works on
/// the rsocket (it keeps it alive to its end) or finds the number gone (`EBADF`); never
/// anything else, and the number is closed once the last call is done.
#[test]
fn rclose_racing_calls_on_the_same_rsocket() {
    let _serial = serial();
    let (rounds, calls) = if cfg!(miri) { (3, 20) } else { (50, 200) };
    for _ in 0..rounds {
        let fd = new();
        let go = std::sync::Arc::new(std::sync::Barrier::new(4));
        let threads: Vec<_> = (0..3)
            .map(|k| {
                let go = go.clone();
                std::thread::spawn(move || {
                    go.wait();
                    for _ in 0..calls {
                        let r = match k {
                            0 => setint(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4096),
                            1 => {
                                let mut a = sin("0.0.0.0:0");
                                let mut l = size_of::<libc::sockaddr_in>() as socklen_t;
                                // SAFETY: a and l are valid.
                                unsafe {
                                    rgetsockname(fd, std::ptr::addr_of_mut!(a).cast(), &mut l)
                                }
                            }
                            // Miri has no poll(2): rfcntl there.
                            // SAFETY: integers only.
                            _ if cfg!(miri) => unsafe { rfcntl(fd, libc::F_GETFL, 0) }.min(0),
                            _ => {
                                let mut p = [libc::pollfd {
                                    fd,
                                    events: libc::POLLIN,
                                    revents: 0,
                                }];
                                // SAFETY: p is valid.
                                let n = unsafe { rpoll(p.as_mut_ptr(), 1, 0) };
                                if n >= 0 {
                                    0
                                } else {
                                    n
                                }
                            }
                        };
                        if r != 0 {
                            assert_eq!((r, errno()), (-1, libc::EBADF));
                        }
                    }
                })
            })
            .collect();
        go.wait();
        close(fd);
        for t in threads {
            t.join().unwrap();
        }
        // SAFETY: integers only.
        refused(unsafe { rclose(fd) }, libc::EBADF);
    }
}

#[test]
fn errno_of_stream_errors() {
    use io::ErrorKind as K;
    for (k, e) in [
        (K::WouldBlock, libc::EAGAIN),
        (K::BrokenPipe, libc::EPIPE),
        (K::ConnectionRefused, libc::ECONNREFUSED),
        (K::NotConnected, libc::ENOTCONN),
        (K::TimedOut, libc::ETIMEDOUT),
        (K::InvalidData, libc::EPROTO),
        (K::InvalidInput, libc::EINVAL),
    ] {
        assert_eq!(errno_of(&io::Error::new(k, "x")), e, "{k:?}");
    }
    assert_eq!(
        errno_of(&io::Error::from_raw_os_error(libc::ENODEV)),
        libc::ENODEV
    );
}
