//! Host tests of the preload's table and fallbacks (no RDMA device: every rsocket here is
//! unconnected, or falls back to TCP on loopback). The functions are called by their Rust
//! paths; the `preload` feature (C names) is never on in tests.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::AsRawFd;

use libc::{c_int, c_void, socklen_t};

use super as p;
use super::get;

fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

fn tcp_socket() -> c_int {
    // SAFETY: integers only.
    let fd = unsafe { p::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    fd
}

fn sin(addr: std::net::SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

const SIN_LEN: socklen_t = size_of::<libc::sockaddr_in>() as socklen_t;

fn close(fd: c_int) {
    // SAFETY: integers only; fd is this test's.
    let v = unsafe { p::close(fd) };
    assert_eq!(v, 0, "close {fd}: {}", std::io::Error::last_os_error());
}

#[test]
fn only_tcp_streams_become_rsockets() {
    let fd = tcp_socket();
    assert!(get(fd).is_some(), "a TCP stream socket is an rsocket");
    // The number is a real socket: F_GETFD answers, the close-on-exec flag asked for is set.
    // SAFETY: integers only.
    let fl = unsafe { p::fcntl(fd, libc::F_GETFD, 0) };
    assert_eq!(fl & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    let rs = get(fd).unwrap().rs;
    close(fd);
    assert!(get(fd).is_none());
    // The rsocket closed with the number.
    assert!(crate::rsocket::lookup(rs).is_none());
    for (d, t, pr) in [
        (libc::AF_UNIX, libc::SOCK_STREAM, 0),
        (libc::AF_INET, libc::SOCK_DGRAM, 0),
        (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
        (libc::AF_INET6, libc::SOCK_DGRAM, 0),
    ] {
        // SAFETY: integers only.
        let fd = unsafe { p::socket(d, t, pr) };
        if fd < 0 {
            // SCTP may be missing on the machine: the next socket's answer, passed on.
            assert_eq!(
                pr,
                libc::IPPROTO_SCTP,
                "socket({d}, {t}, {pr}): {}",
                errno()
            );
            continue;
        }
        assert!(get(fd).is_none(), "socket({d}, {t}, {pr}) is no rsocket");
        close(fd);
    }
    // An error of the next socket comes back as it is.
    // SAFETY: integers only.
    assert_eq!(unsafe { p::socket(12345, libc::SOCK_STREAM, 0) }, -1);
    assert_eq!(errno(), libc::EAFNOSUPPORT);
}

#[test]
fn other_fds_pass_through_untouched() {
    let mut fds = [0; 2];
    // SAFETY: [out] two c_ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let msg = b"through the next write";
    // SAFETY: [buf] msg.
    let n = unsafe { p::write(fds[1], msg.as_ptr().cast(), msg.len()) };
    assert_eq!(n, msg.len() as isize);
    let mut got = [0u8; 64];
    // SAFETY: [buf] got.
    let n = unsafe { p::read(fds[0], got.as_mut_ptr().cast(), got.len()) };
    assert_eq!(&got[..n as usize], msg);
    // poll and select of plain fds: the next definitions.
    let mut pf = [libc::pollfd {
        fd: fds[1],
        events: libc::POLLOUT,
        revents: 0,
    }];
    // SAFETY: [buf] one pollfd.
    assert_eq!(unsafe { p::poll(pf.as_mut_ptr(), 1, 0) }, 1);
    assert_eq!(pf[0].revents, libc::POLLOUT);
    // Errors are the next definition's: a read of a closed number.
    close(fds[0]);
    close(fds[1]);
    // SAFETY: [buf] got.
    assert_eq!(unsafe { p::read(fds[0], got.as_mut_ptr().cast(), 1) }, -1);
    assert_eq!(errno(), libc::EBADF);
}

#[test]
fn loopback_connect_falls_back_to_tcp_and_moves_bytes() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let std::net::SocketAddr::V4(at) = l.local_addr().unwrap() else {
        unreachable!()
    };
    let fd = tcp_socket();
    let a = sin(at);
    // SAFETY: [buf] a sockaddr_in.
    let r = unsafe { p::connect(fd, (&a as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
    assert!(get(fd).is_none(), "a loopback connection stays TCP");
    let (mut peer, _) = l.accept().unwrap();
    let msg = b"over plain TCP";
    // SAFETY: [buf] msg.
    let v = unsafe { p::send(fd, msg.as_ptr().cast(), msg.len(), libc::MSG_NOSIGNAL) };
    assert_eq!(v, 14);
    let mut got = [0u8; 14];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, msg);
    peer.write_all(b"back").unwrap();
    let mut back = [0u8; 4];
    // SAFETY: [buf] back.
    let v = unsafe { p::recv(fd, back.as_mut_ptr().cast(), 4, libc::MSG_WAITALL) };
    assert_eq!(v, 4);
    assert_eq!(&back, b"back");
    // getpeername is the kernel's.
    // SAFETY: all-zero bytes are a sockaddr_in.
    let mut name: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = SIN_LEN;
    // SAFETY: [out] name, len.
    let r = unsafe { p::getpeername(fd, (&mut name as *mut libc::sockaddr_in).cast(), &mut len) };
    assert_eq!((r, u16::from_be(name.sin_port)), (0, at.port()));
    close(fd);
}

#[test]
fn loopback_bind_and_listen_serve_tcp() {
    let fd = tcp_socket();
    let a = sin("127.0.0.1:0".parse().unwrap());
    // SAFETY: [buf] a sockaddr_in.
    let r = unsafe { p::bind(fd, (&a as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
    assert!(get(fd).is_none(), "bound to loopback: TCP");
    // SAFETY: integers only.
    assert_eq!(unsafe { p::listen(fd, 4) }, 0);
    // SAFETY: all-zero bytes are a sockaddr_in.
    let mut name: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = SIN_LEN;
    // SAFETY: [out] name, len.
    let r = unsafe { p::getsockname(fd, (&mut name as *mut libc::sockaddr_in).cast(), &mut len) };
    assert_eq!(r, 0);
    let port = u16::from_be(name.sin_port);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // SAFETY: NULL address and length are allowed.
    let s = unsafe {
        p::accept4(
            fd,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC,
        )
    };
    assert!(s >= 0, "accept4: {}", std::io::Error::last_os_error());
    c.write_all(b"hello").unwrap();
    let mut got = [0u8; 5];
    // SAFETY: [buf] got.
    assert_eq!(unsafe { p::read(s, got.as_mut_ptr().cast(), 5) }, 5);
    assert_eq!(&got, b"hello");
    close(s);
    close(fd);
}

#[test]
fn bind_errors_are_tcps() {
    let held = TcpListener::bind("0.0.0.0:0").unwrap();
    let std::net::SocketAddr::V4(at) = held.local_addr().unwrap() else {
        unreachable!()
    };
    let fd = tcp_socket();
    let a = sin(at);
    // SAFETY: [buf] a sockaddr_in.
    let r = unsafe { p::bind(fd, (&a as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!((r, errno()), (-1, libc::EADDRINUSE));
    assert!(get(fd).is_some(), "a refused bind leaves the rsocket");
    // A short address: EINVAL from the kernel.
    // SAFETY: [buf] a sockaddr_in, 2 bytes of it named.
    let r = unsafe { p::bind(fd, (&a as *const libc::sockaddr_in).cast(), 2) };
    assert_eq!((r, errno()), (-1, libc::EINVAL));
    // A wildcard bind with port 0: the rsocket gets the port TCP chose.
    let any = sin("0.0.0.0:0".parse().unwrap());
    // SAFETY: [buf] a sockaddr_in.
    let r = unsafe { p::bind(fd, (&any as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
    let s = get(fd).expect("a wildcard bind keeps the rsocket");
    let mut tcp: libc::sockaddr_in = sin("0.0.0.0:0".parse().unwrap());
    let mut rsn: libc::sockaddr_in = tcp;
    let (mut l1, mut l2) = (SIN_LEN, SIN_LEN);
    // SAFETY: [out] the names and their lengths.
    unsafe {
        libc::getsockname(fd, (&mut tcp as *mut libc::sockaddr_in).cast(), &mut l1);
        crate::rsocket::rgetsockname(s.rs, (&mut rsn as *mut libc::sockaddr_in).cast(), &mut l2);
    }
    assert_ne!(tcp.sin_port, 0);
    assert_eq!(tcp.sin_port, rsn.sin_port);
    drop(s);
    close(fd);
}

#[test]
fn dup_shares_the_rsocket_until_the_last_number_closes() {
    let fd = tcp_socket();
    let rs = get(fd).unwrap().rs;
    // SAFETY: integers only.
    let d = unsafe { p::dup(fd) };
    assert!(d >= 0);
    // SAFETY: integers only.
    let f = unsafe { p::fcntl(fd, libc::F_DUPFD_CLOEXEC, 100) };
    assert!(f >= 100);
    let other = tcp_socket();
    let other_rs = get(other).unwrap().rs;
    // dup2 onto a table number: that number's rsocket goes (its last number).
    // SAFETY: integers only.
    assert_eq!(unsafe { p::dup2(fd, other) }, other);
    assert!(crate::rsocket::lookup(other_rs).is_none());
    // dup3 onto a fresh number.
    let spare = tcp_socket();
    // SAFETY: integers only.
    assert_eq!(unsafe { p::dup3(fd, spare, libc::O_CLOEXEC) }, spare);
    for n in [fd, d, f, other, spare] {
        assert_eq!(get(n).map(|s| s.rs), Some(rs), "fd {n}");
    }
    for n in [fd, d, f, other] {
        close(n);
        assert!(
            crate::rsocket::lookup(rs).is_some(),
            "closed {n}: others remain"
        );
    }
    close(spare);
    assert!(crate::rsocket::lookup(rs).is_none());
    // dup2 of a plain fd onto a table number forgets the rsocket.
    let t = tcp_socket();
    let trs = get(t).unwrap().rs;
    let mut fds = [0; 2];
    // SAFETY: [out] two c_ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: integers only.
    assert_eq!(unsafe { p::dup2(fds[0], t) }, t);
    assert!(get(t).is_none() && crate::rsocket::lookup(trs).is_none());
    for n in [t, fds[0], fds[1]] {
        close(n);
    }
}

#[test]
fn options_and_blocking_reach_both_sockets() {
    let fd = tcp_socket();
    let rs = get(fd).unwrap().rs;
    // SAFETY: integers only.
    let fl = unsafe { p::fcntl(fd, libc::F_GETFL, 0) };
    // SAFETY: integers only.
    let v = unsafe { p::fcntl(fd, libc::F_SETFL, (fl | libc::O_NONBLOCK) as _) };
    assert_eq!(v, 0);
    // SAFETY: integers only.
    let v = unsafe { crate::rsocket::rfcntl(rs, libc::F_GETFL, 0) } & libc::O_NONBLOCK;
    assert_ne!(v, 0);
    // SAFETY: integers only.
    let v = unsafe { libc::fcntl(fd, libc::F_GETFL) } & libc::O_NONBLOCK;
    assert_ne!(v, 0);
    let one: c_int = 1;
    let p1 = (&one as *const c_int).cast::<c_void>();
    // SAFETY: [buf] a c_int.
    let r = unsafe { p::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, p1, 4) };
    assert_eq!(r, 0);
    let mut v: c_int = 0;
    let mut len: socklen_t = 4;
    let pv = (&mut v as *mut c_int).cast::<c_void>();
    // SAFETY: [out] a c_int and its length.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, pv, &mut len) };
    assert_eq!((r, v), (0, 1), "the real socket has TCP_NODELAY too");
    // SO_TYPE, which rsockets does not keep: the real socket's answer.
    // SAFETY: [out] a c_int and its length.
    let r = unsafe { p::getsockopt(fd, libc::SOL_SOCKET, libc::SO_TYPE, pv, &mut len) };
    assert_eq!((r, v), (0, libc::SOCK_STREAM));
    // An option neither keeps: the rsocket's refusal.
    // SAFETY: [buf] a c_int.
    let r = unsafe { p::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, p1, 4) };
    assert_eq!((r, errno()), (-1, libc::ENOPROTOOPT));
    // A non-blocking read of an unconnected rsocket: ENOTCONN, as TCP.
    let mut b = [0u8; 4];
    // SAFETY: [buf] b.
    let r = unsafe { p::read(fd, b.as_mut_ptr().cast(), 4) };
    assert_eq!((r, errno()), (-1, libc::ENOTCONN));
    close(fd);
}

#[test]
fn poll_and_select_mix_rsockets_and_plain_fds() {
    let fd = tcp_socket();
    let mut fds = [0; 2];
    // SAFETY: [out] two c_ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: [buf] one byte.
    assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
    let mut pf = [
        libc::pollfd {
            fd,
            events: libc::POLLIN | libc::POLLOUT,
            revents: 0,
        },
        libc::pollfd {
            fd: fds[0],
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: [buf] two pollfds.
    assert_eq!(unsafe { p::poll(pf.as_mut_ptr(), 2, 1000) }, 2);
    // An unconnected rsocket: as an unconnected TCP socket, POLLOUT | POLLHUP.
    assert_eq!(pf[0].revents, libc::POLLOUT | libc::POLLHUP);
    assert_eq!(pf[1].revents, libc::POLLIN);
    // ppoll with a timespec and a signal mask.
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1000,
    };
    // SAFETY: all-zero bytes are a sigset_t.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: [out] mask.
    unsafe { libc::sigemptyset(&mut mask) };
    // SAFETY: [buf] two pollfds; [in] ts, mask.
    assert_eq!(unsafe { p::ppoll(pf.as_mut_ptr(), 2, &ts, &mask) }, 2);
    let bad = libc::timespec {
        tv_sec: 0,
        tv_nsec: 2_000_000_000,
    };
    // SAFETY: [buf] two pollfds; [in] bad.
    let r = unsafe { p::ppoll(pf.as_mut_ptr(), 2, &bad, std::ptr::null()) };
    assert_eq!((r, errno()), (-1, libc::EINVAL));
    // select: readable pipe, rsocket readable (hangup) and writable.
    // SAFETY: all-zero bytes are an fd_set.
    let (mut rset, mut wset): (libc::fd_set, libc::fd_set) = unsafe { std::mem::zeroed() };
    // SAFETY: [out] the sets; the numbers are below FD_SETSIZE.
    unsafe {
        libc::FD_SET(fd, &mut rset);
        libc::FD_SET(fds[0], &mut rset);
        libc::FD_SET(fd, &mut wset);
    }
    let mut tv = libc::timeval {
        tv_sec: 1,
        tv_usec: 0,
    };
    let n = fd.max(fds[0]) + 1;
    // SAFETY: [out] the sets and tv.
    let r = unsafe { p::select(n, &mut rset, &mut wset, std::ptr::null_mut(), &mut tv) };
    assert_eq!(r, 3);
    // SAFETY: [in] the sets.
    unsafe {
        assert!(libc::FD_ISSET(fd, &rset) && libc::FD_ISSET(fds[0], &rset));
        assert!(libc::FD_ISSET(fd, &wset));
    }
    assert!(tv.tv_sec <= 1);
    let mut bad_tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 1_000_000,
    };
    // SAFETY: [out] the sets and bad_tv.
    let r = unsafe { p::select(n, &mut rset, &mut wset, std::ptr::null_mut(), &mut bad_tv) };
    assert_eq!((r, errno()), (-1, libc::EINVAL));
    for x in [fd, fds[0], fds[1]] {
        close(x);
    }
}

#[test]
fn epoll_sets_hold_rsockets_beside_kernel_fds() {
    let fd = tcp_socket();
    // SAFETY: integers only.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let mut fds = [0; 2];
    // SAFETY: [out] two c_ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: [buf] one byte.
    assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
    let ctl = |op: c_int, n: c_int, events: c_int, data: u64| {
        let mut ev = libc::epoll_event {
            events: events as u32,
            u64: data,
        };
        // SAFETY: [in] ev.
        unsafe { p::epoll_ctl(ep, op, n, &mut ev) }
    };
    assert_eq!(
        ctl(
            libc::EPOLL_CTL_ADD,
            fd,
            libc::EPOLLOUT | libc::EPOLLONESHOT,
            7
        ),
        0
    );
    assert_eq!(
        (ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLOUT, 7), errno()),
        (-1, libc::EEXIST)
    );
    assert_eq!(ctl(libc::EPOLL_CTL_ADD, fds[0], libc::EPOLLIN, 9), 0);
    let wait = |t: c_int| -> Vec<(u32, u64)> {
        // SAFETY: all-zero bytes are epoll_events.
        let mut out: [libc::epoll_event; 4] = unsafe { std::mem::zeroed() };
        // SAFETY: [out] four epoll_events.
        let n = unsafe { p::epoll_wait(ep, out.as_mut_ptr(), 4, t) };
        assert!(n >= 0, "epoll_wait: {}", std::io::Error::last_os_error());
        let mut v: Vec<(u32, u64)> = out[..n as usize]
            .iter()
            .map(|e| (e.events, e.u64))
            .collect();
        v.sort_by_key(|e| e.1);
        v
    };
    // The unconnected rsocket (writable, hung up) and the readable pipe.
    let hup_out = (libc::EPOLLOUT | libc::EPOLLHUP) as u32;
    assert_eq!(wait(1000), [(hup_out, 7), (libc::EPOLLIN as u32, 9)]);
    // One-shot: disarmed until MOD.
    assert_eq!(wait(0), [(libc::EPOLLIN as u32, 9)]);
    assert_eq!(ctl(libc::EPOLL_CTL_MOD, fd, libc::EPOLLOUT, 8), 0);
    assert_eq!(wait(0), [(hup_out, 8), (libc::EPOLLIN as u32, 9)]);
    assert_eq!(ctl(libc::EPOLL_CTL_DEL, fd, 0, 0), 0);
    assert_eq!(
        (ctl(libc::EPOLL_CTL_DEL, fd, 0, 0), errno()),
        (-1, libc::ENOENT)
    );
    assert_eq!(
        (ctl(libc::EPOLL_CTL_MOD, fd, 0, 0), errno()),
        (-1, libc::ENOENT)
    );
    assert_eq!((ctl(99, fd, 0, 0), errno()), (-1, libc::EINVAL));
    // SAFETY: a NULL event for ADD.
    let r = unsafe { p::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, std::ptr::null_mut()) };
    assert_eq!((r, errno()), (-1, libc::EFAULT));
    assert_eq!(wait(0), [(libc::EPOLLIN as u32, 9)]);
    // A closed rsocket leaves the set.
    assert_eq!(ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLOUT, 7), 0);
    close(fd);
    assert_eq!(wait(0), [(libc::EPOLLIN as u32, 9)]);
    // An epfd that is not open.
    let other = tcp_socket();
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    // SAFETY: [in] ev.
    let r = unsafe { p::epoll_ctl(1 << 20, libc::EPOLL_CTL_ADD, other, &mut ev) };
    assert_eq!((r, errno()), (-1, libc::EBADF));
    // Kernel fds pass through: a listener added, its errors the kernel's.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    assert_eq!(ctl(libc::EPOLL_CTL_ADD, l.as_raw_fd(), libc::EPOLLIN, 1), 0);
    let r = ctl(libc::EPOLL_CTL_ADD, l.as_raw_fd(), libc::EPOLLIN, 1);
    assert_eq!((r, errno()), (-1, libc::EEXIST));
    // Added as an rsocket, then fallen back to TCP by a loopback connect: still waited on
    // (as the plain socket it is now) and deleted from the set.
    let (ls, lport) = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(at) = l.local_addr().unwrap() else {
            unreachable!()
        };
        (l, at)
    };
    let c = tcp_socket();
    assert_eq!(ctl(libc::EPOLL_CTL_ADD, c, libc::EPOLLOUT, 5), 0);
    let sa = sin(lport);
    // SAFETY: [buf] a sockaddr_in.
    let r = unsafe { p::connect(c, (&sa as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
    assert!(get(c).is_none());
    assert!(wait(1000).contains(&(libc::EPOLLOUT as u32, 5)));
    assert_eq!(ctl(libc::EPOLL_CTL_DEL, c, 0, 0), 0);
    drop(ls);
    for n in [ep, other, c, fds[0], fds[1]] {
        close(n);
    }
}

#[test]
fn sendfile_to_a_plain_socket_is_the_kernels() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut peer, _) = l.accept().unwrap();
    let path = std::env::temp_dir().join(format!("rspreload-sendfile-{}", std::process::id()));
    std::fs::write(&path, b"0123456789").unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let mut off: libc::off_t = 2;
    // SAFETY: [out] off.
    let n = unsafe { p::sendfile(c.as_raw_fd(), f.as_raw_fd(), &mut off, 5) };
    assert_eq!((n, off), (5, 7));
    let mut got = [0u8; 5];
    peer.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"23456");
    std::fs::remove_file(&path).unwrap();
}

/// `ioctl(FIONREAD)`: on a plain fd the kernel's answer; on an unconnected rsocket 0 (TCP's
/// answer before a connection); a NULL pointer `EFAULT`. `FIONBIO` reaches both sockets.
#[test]
fn ioctl_fionread_and_fionbio() {
    let mut fds = [0 as c_int; 2];
    // SAFETY: [out] two ints.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: [buf] 5 bytes.
    let r = unsafe { libc::write(fds[1], b"hello".as_ptr().cast(), 5) };
    assert_eq!(r, 5);
    let mut n: c_int = -1;
    // SAFETY: [out] an int.
    let r = unsafe {
        p::ioctl(
            fds[0],
            super::calls::FIONREAD,
            (&mut n as *mut c_int).cast(),
        )
    };
    assert_eq!(r, 0);
    assert_eq!(n, 5, "a pipe's FIONREAD is the kernel's");
    close(fds[0]);
    close(fds[1]);

    let fd = tcp_socket();
    n = -1;
    // SAFETY: [out] an int.
    let r = unsafe { p::ioctl(fd, super::calls::FIONREAD, (&mut n as *mut c_int).cast()) };
    assert_eq!(r, 0);
    assert_eq!(n, 0, "an unconnected rsocket has nothing to read");
    // SAFETY: NULL is refused before anything is written.
    let r = unsafe { p::ioctl(fd, super::calls::FIONREAD, std::ptr::null_mut()) };
    assert_eq!(r, -1);
    assert_eq!(errno(), libc::EFAULT);
    let rs = get(fd).unwrap().rs;
    for on in [1 as c_int, 0] {
        let mut v = on;
        // SAFETY: [in] an int.
        let r = unsafe { p::ioctl(fd, super::calls::FIONBIO, (&mut v as *mut c_int).cast()) };
        assert_eq!(r, 0);
        // SAFETY: integers only.
        let real_fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: integers only.
        let rs_fl = unsafe { crate::rsocket::rfcntl(rs, libc::F_GETFL, 0) };
        let want = if on != 0 { libc::O_NONBLOCK } else { 0 };
        assert_eq!(
            real_fl & libc::O_NONBLOCK,
            want,
            "FIONBIO {on}: the real socket"
        );
        assert_eq!(rs_fl & libc::O_NONBLOCK, want, "FIONBIO {on}: the rsocket");
    }
    close(fd);
}

/// After `fork`, the child holds none of the parent's rsockets: its copy of the number is the
/// unconnected placeholder (a read fails with `ENOTCONN`), and closing it closes no rsocket
/// (the child's registry still has it; nothing of the parent's is touched). New sockets in
/// the child are rsockets. The parent's number is still its rsocket.
#[test]
fn fork_leaves_the_parents_rsockets_alone() {
    let fd = tcp_socket();
    let rs = get(fd).unwrap().rs;
    // SAFETY: the child below calls only this crate's functions on its own fds and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = (|| {
            if get(fd).is_some() {
                return 10;
            }
            let mut b = [0u8; 4];
            // SAFETY: [buf] 4 bytes.
            if unsafe { p::read(fd, b.as_mut_ptr().cast(), 4) } != -1 || errno() != libc::ENOTCONN {
                return 11;
            }
            // SAFETY: integers only.
            if unsafe { p::close(fd) } != 0 {
                return 12;
            }
            if crate::rsocket::lookup(rs).is_none() {
                return 13; // closed the parent's rsocket
            }
            // SAFETY: integers only.
            let n = unsafe { p::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            if n < 0 || get(n).is_none() {
                return 14;
            }
            // SAFETY: integers only.
            if unsafe { p::close(n) } != 0 {
                return 15;
            }
            0
        })();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: [out] an int.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's check failed: status {status:#x} (exit code {})",
        libc::WEXITSTATUS(status)
    );
    assert_eq!(
        get(fd).map(|s| s.rs),
        Some(rs),
        "the parent's number is still its rsocket"
    );
    assert!(crate::rsocket::lookup(rs).is_some());
    close(fd);
    assert!(crate::rsocket::lookup(rs).is_none());
}

/// Review: a child that closes every inherited number (`closefrom(3)`, a daemon's or a
/// `close_fds` spawn's habit) closes the parent's rsocket numbers too; its next rsocket gets
/// such a number, and the registry the child copied still holds the parent's rsocket there:
/// the new one replaces it, the old `RSocket` is dropped in the child (on a device: its
/// stream's QP and cm id destroyed through the files shared with the parent) and its
/// `OwnedFd` closes the number the new rsocket now owns.
#[test]
fn fork_a_childs_closefrom_and_new_rsocket_leave_the_parents_alone() {
    let fd = tcp_socket();
    let rs = get(fd).unwrap().rs;
    // SAFETY: the child below calls only this crate's functions and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = (|| {
            // SAFETY: integers only; what closefrom does to the child's numbers.
            unsafe {
                p::close(fd);
                p::close(rs);
            }
            // The child is single-threaded: new numbers fill the lowest gaps, then `rs`.
            for _ in 0..4096 {
                // SAFETY: integers only.
                let n = unsafe { crate::rsocket::rsocket(libc::AF_INET, libc::SOCK_STREAM, 0) };
                if n < 0 {
                    return 20;
                }
                if n == rs {
                    // SAFETY: F_GETFD on the new rsocket's number.
                    if unsafe { libc::fcntl(rs, libc::F_GETFD) } < 0 {
                        return 21; // the stale entry's drop closed the new rsocket's number
                    }
                    return 0;
                }
            }
            22
        })();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: [out] an int.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's check failed: status {status:#x} (exit code {})",
        libc::WEXITSTATUS(status)
    );
    close(fd);
}

/// rsockets' configuration files (`/etc/rdma/rsocket/*`, rdma-core's `rs_configure`): read
/// as rdma-core reads them, brought into the ranges the options take.
#[test]
fn config_files_set_new_rsockets_defaults() {
    let dir = std::env::temp_dir().join(format!("rverbs-rsconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = rverbs_stream::StreamOptions::default();
    assert_eq!(
        crate::rsocket::conf_options(&dir),
        d,
        "no files: rsockets' defaults"
    );
    assert_eq!(
        crate::rsocket::conf_poll_time(&dir),
        None,
        "no polling_time file: the stream's default"
    );
    for (f, v) in [
        ("inline_default", "200\n"),
        ("sqsize_default", " 1000"),
        ("rqsize_default", "4"),
        ("mem_default", "65537 trailing"),
        ("wmem_default", "100"),
        ("iomap_size", "300"),
        ("polling_time", "7"),
    ] {
        std::fs::write(dir.join(f), v).unwrap();
    }
    let o = crate::rsocket::conf_options(&dir);
    assert_eq!(o.inline, 200);
    assert_eq!(o.send_queue, 1000);
    assert_eq!(o.recv_queue, 16, "below the least queue: raised to 16");
    assert_eq!(o.recv_buffer, 65536, "the receive ring is even");
    assert_eq!(o.send_buffer, 4096, "below rsockets' low water mark: 4 KiB");
    assert_eq!(o.iomap_entries, 256, "rounded as rsockets rounds");
    assert_eq!(
        crate::rsocket::conf_poll_time(&dir),
        Some(std::time::Duration::from_micros(7)),
        "polling_time: microseconds"
    );
    std::fs::write(dir.join("polling_time"), "5000000").unwrap();
    assert_eq!(
        crate::rsocket::conf_poll_time(&dir),
        Some(std::time::Duration::from_secs(1)),
        "polling_time above a second: a second"
    );
    std::fs::write(dir.join("inline_default"), "lots").unwrap();
    std::fs::write(dir.join("polling_time"), "soon").unwrap();
    assert_eq!(
        crate::rsocket::conf_poll_time(&dir),
        None,
        "polling_time without a number: the stream's default"
    );
    assert_eq!(
        crate::rsocket::conf_options(&dir).inline,
        d.inline,
        "no number: the default"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// rdma-core's `preload_config` (`program domain type protocol`): parsed as its
/// `scan_config`, matched as its `intercept_socket` (a name is a case-insensitive prefix of
/// the program's; no rules: every socket).
#[test]
fn preload_config_picks_programs_and_sockets() {
    use super::config::{intercepted, parse_preload_config, Rule};
    let rules = parse_preload_config(
        "# comment\n\
         redis INET STREAM TCP\n\
         * af_inet6 sock_stream *\n\
         bad INET RAW TCP\n\
         short INET\n\
         memc * * ipproto_tcp\n",
    );
    assert_eq!(
        rules,
        vec![
            Rule {
                name: Some("redis".into()),
                domain: libc::AF_INET,
                type_: libc::SOCK_STREAM,
                protocol: libc::IPPROTO_TCP
            },
            Rule {
                name: None,
                domain: libc::AF_INET6,
                type_: libc::SOCK_STREAM,
                protocol: 0
            },
            Rule {
                name: Some("memc".into()),
                domain: 0,
                type_: 0,
                protocol: libc::IPPROTO_TCP
            },
        ],
        "the comment, the unknown type and the short line are dropped"
    );
    let (i4, i6, st) = (libc::AF_INET, libc::AF_INET6, libc::SOCK_STREAM);
    assert!(
        intercepted(&rules, "redis-server", i4, st, 0),
        "a prefix; protocol 0 is TCP"
    );
    assert!(intercepted(
        &rules,
        "REDIS-cli",
        i4,
        st | libc::SOCK_CLOEXEC,
        libc::IPPROTO_TCP
    ));
    assert!(
        !intercepted(&rules, "iperf3", i4, st, 0),
        "no rule names it for IPv4"
    );
    assert!(
        intercepted(&rules, "iperf3", i6, st, 0),
        "the wildcard rule, IPv6"
    );
    assert!(intercepted(&rules, "memcached", i4, st, 0));
    assert!(
        !intercepted(&rules, "red", i4, st, 0),
        "the name is a prefix of the program's, not the reverse"
    );
    assert!(
        intercepted(&[], "anything", i4, st, 0),
        "no rules: every socket"
    );
}

/// A real TCP socket (not the preload's `socket`) recorded in fork mode's `st`, as the
/// preload's `socket` makes one with `RDMAV_FORK_SAFE` set (the mode is read once per
/// process, so the tests record the states themselves).
fn fork_mode_socket(st: p::forksafe::State) -> c_int {
    // SAFETY: integers only.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    p::forksafe::set(fd, st);
    fd
}

fn connect_to(fd: c_int, at: std::net::SocketAddrV4) {
    let a = sin(at);
    // SAFETY: [buf] a sockaddr_in.
    let r = unsafe { p::connect(fd, (&a as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
}

fn read_n(fd: c_int, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    // SAFETY: [buf] b.
    let v = unsafe { p::recv(fd, b.as_mut_ptr().cast(), n, libc::MSG_WAITALL) };
    assert_eq!(v, n as isize, "recv: {}", std::io::Error::last_os_error());
    b
}

#[test]
fn fork_mode_reads_rdmav_fork_safe_as_atoi() {
    use p::forksafe::atoi;
    for (s, v) in [
        ("1", 1),
        ("0", 0),
        ("", 0),
        ("yes", 0),
        (" 2x", 2),
        ("-1", -1),
        ("+7", 7),
    ] {
        assert_eq!(atoi(s), v, "{s:?}");
    }
}

/// The connecting side's switch reads the peer's first 4 bytes without taking them: a peer
/// that sends anything else first (a plain TCP server with a greeting) keeps the
/// connection TCP, its bytes intact; one that closes keeps it TCP too (end of stream).
#[test]
fn fork_mode_connecting_side_stays_tcp_unless_the_peer_switches() {
    use p::forksafe::{state, State};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let std::net::SocketAddr::V4(at) = l.local_addr().unwrap() else {
        unreachable!()
    };
    // A loopback connect leaves the mode at once.
    let fd = fork_mode_socket(State::Fresh);
    connect_to(fd, at);
    assert_eq!(state(fd), None, "a loopback connection stays TCP");
    close(fd);
    let _ = l.accept().unwrap();
    // Recorded as connected (as after a connect to another host): the first read switches.
    let fd = fork_mode_socket(State::Fresh);
    connect_to(fd, at);
    p::forksafe::set(fd, State::Active);
    let (mut peer, _) = l.accept().unwrap();
    peer.write_all(b"hello").unwrap();
    assert_eq!(read_n(fd, 5), b"hello");
    assert_eq!(state(fd), None);
    assert!(get(fd).is_none(), "stayed TCP");
    close(fd);
    // The peer closes: end of stream, as TCP.
    let fd = fork_mode_socket(State::Fresh);
    connect_to(fd, at);
    p::forksafe::set(fd, State::Active);
    drop(l.accept().unwrap());
    let mut b = [0u8; 4];
    // SAFETY: [buf] b.
    assert_eq!(unsafe { p::read(fd, b.as_mut_ptr().cast(), 4) }, 0);
    assert_eq!(state(fd), None);
    close(fd);
    // The switch message, then no rsockets listener where it points (no RDMA device here):
    // the message is the protocol's and is taken; the program reads the peer's data.
    let fd = fork_mode_socket(State::Fresh);
    connect_to(fd, at);
    p::forksafe::set(fd, State::Active);
    let (mut peer, _) = l.accept().unwrap();
    peer.write_all(&[0, 0, 0, 0]).unwrap();
    peer.write_all(b"data").unwrap();
    assert_eq!(read_n(fd, 4), b"data");
    assert_eq!(state(fd), None);
    assert!(get(fd).is_none());
    close(fd);
}

/// The accepting side: a listener in fork mode (bound to the wildcard address) marks what it
/// accepts; the first data call on a loopback connection leaves it TCP without sending the
/// switch message; a `dup` of the listener is a fork-mode listener too; `close` forgets; a
/// forked child keeps the accepted socket's state (it switches in the child).
#[test]
fn fork_mode_accepting_side_marks_switches_and_survives_fork() {
    use p::forksafe::{state, State};
    let l = fork_mode_socket(State::Fresh);
    let any = sin("0.0.0.0:0".parse().unwrap());
    // SAFETY: [buf] a sockaddr_in.
    let r = unsafe { p::bind(l, (&any as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
    // SAFETY: integers only.
    assert_eq!(unsafe { p::listen(l, 4) }, 0);
    assert_eq!(state(l), Some(State::Listening));
    // SAFETY: integers only.
    let l2 = unsafe { p::dup(l) };
    assert!(l2 >= 0);
    assert_eq!(state(l2), Some(State::Listening));
    close(l2);
    assert_eq!(state(l2), None, "close forgets");
    // SAFETY: all-zero bytes are a sockaddr_in.
    let mut name: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = SIN_LEN;
    // SAFETY: [out] name, len.
    unsafe { p::getsockname(l, (&mut name as *mut libc::sockaddr_in).cast(), &mut len) };
    let port = u16::from_be(name.sin_port);
    let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // SAFETY: NULL address.
    let c = unsafe { p::accept4(l, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
    assert!(c >= 0, "accept: {}", std::io::Error::last_os_error());
    assert_eq!(state(c), Some(State::Passive));
    // SAFETY: the child below calls only this crate's functions on its own fds and `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = (|| {
            if state(c) != Some(State::Passive) {
                return 10;
            }
            // The child serves the connection: a loopback one stays TCP, no message sent.
            let msg = b"from the child";
            // SAFETY: [buf] msg.
            if unsafe { p::write(c, msg.as_ptr().cast(), msg.len()) } != msg.len() as isize {
                return 11;
            }
            if state(c).is_some() || get(c).is_some() {
                return 12;
            }
            0
        })();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: [out] an int.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child's check failed: exit code {}",
        libc::WEXITSTATUS(status)
    );
    let mut got = [0u8; 14];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"from the child", "no switch message before the data");
    assert_eq!(
        state(c),
        Some(State::Passive),
        "the parent's copy is untouched"
    );
    close(c);
    assert_eq!(state(c), None);
    close(l);
    assert_eq!(state(l), None);
}

/// A switch another thread of the parent was making at the fork is forgotten in the child
/// (that thread is not there to finish it: a wait for it would never end).
#[test]
fn fork_mode_child_forgets_switches_in_progress() {
    use p::forksafe::State;
    let mut m = std::collections::BTreeMap::new();
    m.insert(70001, State::Switching(3));
    m.insert(70002, State::Passive);
    m.insert(70003, State::Listening);
    p::forksafe::child_after_fork(&mut m);
    assert_eq!(
        m.into_iter().collect::<Vec<_>>(),
        vec![(70002, State::Passive), (70003, State::Listening)]
    );
}

/// A non-blocking connect still in progress that reaches the connecting side's switch from
/// `poll` and is then refused: the switch leaves the socket TCP with the error in place,
/// so the program's `SO_ERROR` reads `ECONNREFUSED` (a `recv` there would have taken it).
#[test]
fn fork_mode_switch_leaves_a_refused_connects_error_to_the_program() {
    use p::forksafe::{state, State};
    // A port nothing listens on: bound, never listening, and held until the end, so no test
    // beside this one can listen there meanwhile (a SYN to it is answered with a reset).
    // SAFETY: integers only.
    let hole = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(hole >= 0);
    let any = sin(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::LOCALHOST,
        0,
    ));
    // SAFETY: [buf] a sockaddr_in and its size.
    let r = unsafe { libc::bind(hole, (&any as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "bind: {}", std::io::Error::last_os_error());
    // SAFETY: sockaddr_in is plain data; all zeros is a valid value.
    let mut bound: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut blen = SIN_LEN;
    // SAFETY: [out] a sockaddr_in and its size.
    let r = unsafe {
        libc::getsockname(
            hole,
            (&mut bound as *mut libc::sockaddr_in).cast(),
            &mut blen,
        )
    };
    assert_eq!(r, 0, "getsockname: {}", std::io::Error::last_os_error());
    let at =
        std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, u16::from_be(bound.sin_port));
    // SAFETY: integers only.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    assert!(fd >= 0);
    let a = sin(at);
    // SAFETY: [buf] a sockaddr_in; the real connect (a loopback one through the preload
    // would leave the mode at once).
    let r = unsafe { libc::connect(fd, (&a as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(
        (r, errno()),
        (-1, libc::EINPROGRESS),
        "a non-blocking connect on loopback is answered after it returns"
    );
    p::forksafe::set(fd, State::Active);
    let mut pf = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: [buf] one pollfd.
    let n = unsafe { p::poll(&mut pf, 1, -1) };
    assert_eq!(n, 1, "poll: {}", std::io::Error::last_os_error());
    assert_eq!(state(fd), None, "stays TCP");
    assert!(get(fd).is_none());
    let mut err: c_int = 0;
    let mut len = size_of::<c_int>() as socklen_t;
    // SAFETY: [out] a c_int and its size.
    let r = unsafe {
        p::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut c_int).cast(),
            &mut len,
        )
    };
    assert_eq!((r, err), (0, libc::ECONNREFUSED), "the connect's error");
    close(fd);
    // SAFETY: integers only; our socket.
    unsafe { libc::close(hole) };
}

/// A fork-mode socket added to an epoll set while still TCP is in the kernel's set; once
/// switched (an rsocket) `EPOLL_CTL_MOD` moves it to the preload's half and
/// `EPOLL_CTL_DEL` deletes it from whichever half holds it (was: `ENOENT`).
#[test]
fn fork_mode_epoll_mod_and_del_after_the_switch() {
    use p::forksafe::{state, State};
    // SAFETY: integers only.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let ctl = |op: c_int, n: c_int| {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 5,
        };
        // SAFETY: [in] ev.
        unsafe { p::epoll_ctl(ep, op, n, &mut ev) }
    };
    // What the switch leaves: the number in the rsocket table, out of fork mode's.
    let switched = |fd: c_int| {
        // SAFETY: integers only.
        let rs = unsafe { crate::rsocket::rsocket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        assert!(rs >= 0, "rsocket: {}", std::io::Error::last_os_error());
        assert!(p::insert(
            fd,
            std::sync::Arc::new(p::Sock {
                rs,
                domain: libc::AF_INET
            })
        )
        .is_none());
        p::forksafe::forget(fd);
        assert_eq!(state(fd), None);
    };
    for mod_first in [true, false] {
        let fd = fork_mode_socket(State::Fresh);
        assert_eq!(ctl(libc::EPOLL_CTL_ADD, fd), 0, "{}", errno());
        switched(fd);
        if mod_first {
            assert_eq!(ctl(libc::EPOLL_CTL_MOD, fd), 0, "MOD: {}", errno());
            assert_eq!(
                (ctl(libc::EPOLL_CTL_ADD, fd), errno()),
                (-1, libc::EEXIST),
                "in the preload's half now"
            );
        }
        // SAFETY: NULL event for DEL.
        let del = |n| unsafe { p::epoll_ctl(ep, libc::EPOLL_CTL_DEL, n, std::ptr::null_mut()) };
        assert_eq!(del(fd), 0, "DEL: {}", errno());
        assert_eq!((del(fd), errno()), (-1, libc::ENOENT), "deleted from both");
        assert_eq!(
            (ctl(libc::EPOLL_CTL_MOD, fd), errno()),
            (-1, libc::ENOENT),
            "MOD of a number in neither half"
        );
        close(fd);
    }
    close(ep);
}

/// `dup2` onto a number another thread is switching: the switch works on its own copy of
/// the socket and, finding the number replaced when it ends, leaves the new socket's state
/// alone (was: it forgot it, and would have put its rsocket under the reused number).
#[test]
fn fork_mode_switch_of_a_number_replaced_meanwhile_leaves_it_alone() {
    use p::forksafe::{state, State};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let std::net::SocketAddr::V4(at) = l.local_addr().unwrap() else {
        unreachable!()
    };
    let fd = fork_mode_socket(State::Fresh);
    let a = sin(at);
    // SAFETY: [buf] a sockaddr_in; the real connect (the preload's would leave the mode on
    // loopback).
    let r = unsafe { libc::connect(fd, (&a as *const libc::sockaddr_in).cast(), SIN_LEN) };
    assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
    p::forksafe::set(fd, State::Active);
    let (mut peer, _) = l.accept().unwrap();
    // The switch waits for the peer's first bytes.
    let reader = std::thread::spawn(move || {
        let mut b = [0u8; 4];
        // SAFETY: [buf] b.
        unsafe { p::read(fd, b.as_mut_ptr().cast(), 4) }
    });
    while !matches!(state(fd), Some(State::Switching(_))) {
        std::thread::yield_now();
    }
    let other = fork_mode_socket(State::Fresh);
    // SAFETY: integers only.
    assert_eq!(unsafe { p::dup2(other, fd) }, fd);
    assert_eq!(state(fd), Some(State::Fresh), "the new socket's");
    // The switch message; the rconnect fails (no RDMA device here), the switch ends.
    peer.write_all(&[0, 0, 0, 0]).unwrap();
    let _ = reader.join().unwrap();
    assert_eq!(state(fd), Some(State::Fresh), "left alone by the switch");
    assert!(get(fd).is_none());
    close(fd);
    close(other);
}

/// The machine-wide lock's file descriptor is closed in a forked child (whose switching
/// thread is not there to release it), and its record freed when the lock is released.
#[test]
fn fork_mode_lock_is_not_inherited_by_a_forked_child() {
    super::fork::register();
    let lock = p::forksafe::PortLock::take();
    let fd = lock.fd();
    assert!(fd >= 0, "the lock file {} is taken", p::forksafe::LOCK_FILE);
    // SAFETY: the child below calls only `fcntl` and `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: integers only.
        let closed = unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 && errno() == libc::EBADF;
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(if closed { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: [out] an int.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child still had the lock's file descriptor"
    );
    // SAFETY: integers only.
    let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
    assert!(open, "the parent's is open");
    drop(lock);
}
