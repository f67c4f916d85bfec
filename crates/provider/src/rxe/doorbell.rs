//! The rxe send doorbell.
//!
//! rxe has no hardware doorbell: after producing send WQEs, userspace tells the kernel with
//! the legacy POST_SEND write() command carrying no work requests (`wr_count` 0). For a user
//! QP the 6.1 kernel then runs the requester on the WQEs in the ring; it answers `EINVAL` when
//! the QP is not (yet) ready to send. Receives need no doorbell.

use std::io;
use std::os::fd::BorrowedFd;

use rustix::io::Errno;
use rverbs_uverbs::kernel::abi::cmd::{ib_uverbs_cmd_hdr, nr};
use rverbs_uverbs::Error;
use zerocopy::{Immutable, IntoBytes, KnownLayout};

use super::abi::{ib_uverbs_post_send, ib_uverbs_post_send_resp, IB_UVERBS_SEND_WR_SIZE};

/// The whole write(): command header and `ib_uverbs_post_send`, no WRs, no SGEs.
#[repr(C)]
#[derive(Clone, Copy, Debug, IntoBytes, Immutable, KnownLayout)]
struct PostSendCmd {
    hdr: ib_uverbs_cmd_hdr,
    body: ib_uverbs_post_send,
}

/// Bytes of the doorbell write().
pub const POST_SEND_CMD_LEN: usize = core::mem::size_of::<PostSendCmd>();

/// The doorbell command for the QP with kernel handle `qp_handle`; `response` is the address
/// of an `ib_uverbs_post_send_resp` the kernel writes.
///
/// Layout: `{u32 command = 28; u16 in_words = 8; u16 out_words = 1}` then
/// `{u64 response; u32 qp_handle; u32 wr_count = 0; u32 sge_count = 0;
/// u32 wqe_size = sizeof(ib_uverbs_send_wr)}` (the kernel rejects a smaller `wqe_size` even
/// when there are no WRs). siw's doorbell is the same command, built once per QP.
pub(crate) fn post_send_cmd(qp_handle: u32, response: u64) -> [u8; POST_SEND_CMD_LEN] {
    let mut out = [0u8; POST_SEND_CMD_LEN];
    out.copy_from_slice(cmd(qp_handle, response).as_bytes());
    out
}

#[inline]
fn cmd(qp_handle: u32, response: u64) -> PostSendCmd {
    PostSendCmd {
        hdr: ib_uverbs_cmd_hdr {
            command: nr::POST_SEND,
            in_words: (POST_SEND_CMD_LEN / 4) as u16,
            out_words: (core::mem::size_of::<ib_uverbs_post_send_resp>() / 4) as u16,
        },
        body: ib_uverbs_post_send {
            response,
            qp_handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: IB_UVERBS_SEND_WR_SIZE,
        },
    }
}

/// Rings the send doorbell of the QP with kernel handle `qp_handle` on the uverbs command fd:
/// one write() of 32 bytes from the stack. Does not allocate unless it fails.
#[inline]
pub fn post_send_doorbell(cmd_fd: BorrowedFd<'_>, qp_handle: u32) -> io::Result<()> {
    let mut resp = ib_uverbs_post_send_resp::default();
    // The kernel writes the response through this address during the write() below
    // (write_cmd tells the compiler that the call may write memory).
    let resp_addr = core::ptr::addr_of_mut!(resp) as usize as u64;
    let cmd = cmd(qp_handle, resp_addr);
    // SAFETY: the command's only address is `resp`, a live local the kernel writes 4 bytes
    // into during the call; POST_SEND on an rxe QP handle changes nothing a safe type owns.
    #[allow(unsafe_code)]
    let r = unsafe { rverbs_uverbs::kernel::write::write_cmd(cmd_fd, cmd.as_bytes()) };
    // Keep the response buffer alive (and considered possibly written) past the syscall.
    std::hint::black_box(&mut resp);
    match r {
        Ok(POST_SEND_CMD_LEN) => Ok(()),
        other => Err(doorbell_error(
            "rxe post send doorbell",
            other,
            qp_handle,
            (Errno::INVAL, " (is the QP in RTS?)"),
        )),
    }
}

/// The error `op` (a provider's doorbell) reports for a doorbell write() that failed or was
/// short (write_cmd retried EINTR); `hint.1` follows the QP handle when the errno is `hint.0`.
#[cold]
#[inline(never)]
pub(crate) fn doorbell_error(
    op: &'static str,
    r: Result<usize, Errno>,
    qp_handle: u32,
    hint: (Errno, &'static str),
) -> io::Error {
    match r {
        Ok(n) => Error::protocol(
            op,
            format!("QP handle {qp_handle}: short write of {n} of {POST_SEND_CMD_LEN} bytes"),
        )
        .into(),
        Err(e) => {
            let hint = if e == hint.0 { hint.1 } else { "" };
            Error::os(op, e)
                .with_detail(format!("QP handle {qp_handle}{hint}"))
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rxe_doorbell_bytes() {
        let b = post_send_cmd(0x0102_0304, 0x1122_3344_5566_7788);
        assert_eq!(b.len(), 32);
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        let u16_at = |o: usize| u16::from_ne_bytes(b[o..o + 2].try_into().unwrap());
        assert_eq!(u32_at(0), 28, "command POST_SEND");
        assert_eq!(u16_at(4), 8, "in_words");
        assert_eq!(u16_at(6), 1, "out_words");
        assert_eq!(
            u64::from_ne_bytes(b[8..16].try_into().unwrap()),
            0x1122_3344_5566_7788,
            "response"
        );
        assert_eq!(u32_at(16), 0x0102_0304, "qp_handle");
        assert_eq!(u32_at(20), 0, "wr_count");
        assert_eq!(u32_at(24), 0, "sge_count");
        assert_eq!(u32_at(28), 56, "wqe_size");
    }

    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("rverbs-{}-{name}", std::process::id()))
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
    fn rxe_doorbell_writes_one_command() {
        use std::os::fd::AsFd;
        let path = temp_path("doorbell");
        let f = std::fs::File::create(&path).unwrap();
        post_send_doorbell(f.as_fd(), 77).unwrap();
        drop(f);
        let buf = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(buf.len(), 32);
        let expect = post_send_cmd(77, 0);
        // Everything but the (stack) response address matches.
        assert_eq!(buf[..8], expect[..8]);
        assert_ne!(&buf[8..16], &[0u8; 8]);
        assert_eq!(buf[16..32], expect[16..32]);
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
    fn rxe_doorbell_reports_errno() {
        use std::os::fd::AsFd;
        let path = temp_path("doorbell-ro");
        std::fs::write(&path, b"").unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // Writing to a read-only descriptor fails with EBADF.
        let e = post_send_doorbell(f.as_fd(), 5).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(Error::errno_of(&e), Some(Errno::BADF));
        assert!(e.to_string().contains("QP handle 5"), "{e}");
    }
}
