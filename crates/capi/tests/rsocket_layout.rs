//! The C structures the rsockets functions read and write (`msghdr`, `iovec`, `pollfd`,
//! `fd_set`, `timeval`, `linger`, `sockaddr_in`, `sockaddr_in6`), as the Rust side sees them
//! (the `libc` crate), checked against the C headers with a compiled probe, like
//! `tests/layout.rs`; and the constants of `<rdma/rsocket.h>` (librdmacm-dev) against ours.
//!
//! Host test: the VM builds mark it ignored (the guests have no C compiler).

use std::mem::{offset_of, size_of};
use std::process::Command;

use rverbs_capi::rsocket::{
    RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_ROUTE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA,
};

const HEADER: &str = "/usr/include/rdma/rsocket.h";

/// `(C expression, Rust value)`.
fn expected() -> Vec<(&'static str, usize)> {
    vec![
        ("sizeof(struct msghdr)", size_of::<libc::msghdr>()),
        (
            "offsetof(struct msghdr, msg_name)",
            offset_of!(libc::msghdr, msg_name),
        ),
        (
            "offsetof(struct msghdr, msg_namelen)",
            offset_of!(libc::msghdr, msg_namelen),
        ),
        (
            "offsetof(struct msghdr, msg_iov)",
            offset_of!(libc::msghdr, msg_iov),
        ),
        (
            "offsetof(struct msghdr, msg_iovlen)",
            offset_of!(libc::msghdr, msg_iovlen),
        ),
        (
            "offsetof(struct msghdr, msg_control)",
            offset_of!(libc::msghdr, msg_control),
        ),
        (
            "offsetof(struct msghdr, msg_controllen)",
            offset_of!(libc::msghdr, msg_controllen),
        ),
        (
            "offsetof(struct msghdr, msg_flags)",
            offset_of!(libc::msghdr, msg_flags),
        ),
        (
            "sizeof(((struct msghdr *)0)->msg_iovlen)",
            size_of::<usize>(),
        ),
        ("sizeof(struct iovec)", size_of::<libc::iovec>()),
        (
            "offsetof(struct iovec, iov_base)",
            offset_of!(libc::iovec, iov_base),
        ),
        (
            "offsetof(struct iovec, iov_len)",
            offset_of!(libc::iovec, iov_len),
        ),
        ("sizeof(struct pollfd)", size_of::<libc::pollfd>()),
        ("offsetof(struct pollfd, fd)", offset_of!(libc::pollfd, fd)),
        (
            "offsetof(struct pollfd, events)",
            offset_of!(libc::pollfd, events),
        ),
        (
            "offsetof(struct pollfd, revents)",
            offset_of!(libc::pollfd, revents),
        ),
        ("sizeof(nfds_t)", size_of::<libc::nfds_t>()),
        ("sizeof(fd_set)", size_of::<libc::fd_set>()),
        ("FD_SETSIZE", libc::FD_SETSIZE),
        ("sizeof(struct timeval)", size_of::<libc::timeval>()),
        (
            "offsetof(struct timeval, tv_usec)",
            offset_of!(libc::timeval, tv_usec),
        ),
        ("sizeof(struct linger)", size_of::<libc::linger>()),
        (
            "offsetof(struct linger, l_linger)",
            offset_of!(libc::linger, l_linger),
        ),
        ("sizeof(struct sockaddr_in)", size_of::<libc::sockaddr_in>()),
        (
            "offsetof(struct sockaddr_in, sin_port)",
            offset_of!(libc::sockaddr_in, sin_port),
        ),
        (
            "offsetof(struct sockaddr_in, sin_addr)",
            offset_of!(libc::sockaddr_in, sin_addr),
        ),
        (
            "sizeof(struct sockaddr_in6)",
            size_of::<libc::sockaddr_in6>(),
        ),
        (
            "offsetof(struct sockaddr_in6, sin6_port)",
            offset_of!(libc::sockaddr_in6, sin6_port),
        ),
        (
            "offsetof(struct sockaddr_in6, sin6_flowinfo)",
            offset_of!(libc::sockaddr_in6, sin6_flowinfo),
        ),
        (
            "offsetof(struct sockaddr_in6, sin6_addr)",
            offset_of!(libc::sockaddr_in6, sin6_addr),
        ),
        (
            "offsetof(struct sockaddr_in6, sin6_scope_id)",
            offset_of!(libc::sockaddr_in6, sin6_scope_id),
        ),
        ("sizeof(socklen_t)", size_of::<libc::socklen_t>()),
        ("sizeof(off_t)", size_of::<libc::off_t>()),
        ("SOL_RDMA", SOL_RDMA as usize),
        ("RDMA_SQSIZE", RDMA_SQSIZE as usize),
        ("RDMA_RQSIZE", RDMA_RQSIZE as usize),
        ("RDMA_INLINE", RDMA_INLINE as usize),
        ("RDMA_IOMAPSIZE", RDMA_IOMAPSIZE as usize),
        ("RDMA_ROUTE", RDMA_ROUTE as usize),
    ]
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "host only: needs cc and librdmacm-dev")]
fn rsocket_structs_and_constants_match_the_c_headers() {
    assert!(
        std::path::Path::new(HEADER).exists(),
        "{HEADER} is missing: install librdmacm-dev (.ci/run does)"
    );
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <poll.h>\n#include <sys/select.h>\n\
         #include <sys/socket.h>\n#include <sys/uio.h>\n#include <netinet/in.h>\n\
         #include <rdma/rsocket.h>\nint main(void) {\n",
    );
    let want = expected();
    for (expr, _) in &want {
        src.push_str(&format!("  printf(\"%zu\\n\", (size_t)({expr}));\n"));
    }
    src.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("rverbs-rsocket-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{cc}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let got: Vec<usize> = String::from_utf8_lossy(&run.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got.len(), want.len());
    let bad: Vec<String> = want
        .iter()
        .zip(&got)
        .filter(|((_, r), c)| r != *c)
        .map(|((e, r), c)| format!("{e}: C {c}, Rust {r}"))
        .collect();
    assert!(bad.is_empty(), "layouts differ:\n{}", bad.join("\n"));
}
