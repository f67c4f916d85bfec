//! The rxe send doorbell.
//!
//! rxe has no hardware doorbell: after producing send WQEs, userspace tells the kernel with
//! the legacy POST_SEND write() command carrying no work requests (`wr_count` 0). For a user
//! QP the 6.1 kernel then runs the requester on the WQEs in the ring; it answers `EINVAL` when
//! the QP is not (yet) ready to send. Receives need no doorbell.

use std::cell::UnsafeCell;
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
/// when there are no WRs). rxe's and siw's [`Doorbell`] is this command, built once per QP.
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

/// Which provider's doorbell a [`Doorbell`] is, for its errors: the operation named, and a
/// hint that follows the QP handle when the write() fails with that errno.
#[derive(Debug)]
pub struct Who {
    /// The operation an error names ("rxe post send doorbell").
    pub op: &'static str,
    /// The errno that gets the hint, and the hint.
    pub hint: (Errno, &'static str),
}

/// rxe's doorbell, for its errors.
pub(crate) static RXE: Who = Who {
    op: "rxe post send doorbell",
    hint: (Errno::INVAL, " (is the QP in RTS?)"),
};

/// One QP's prebuilt doorbell: the command bytes and the response word they point at, built
/// once when the QP is created (as libsiw does) instead of on every post.
pub struct Doorbell {
    cmd: [u8; POST_SEND_CMD_LEN],
    qp_handle: u32,
    who: &'static Who,
    // The kernel writes the response here during the write(); boxed so its address, which
    // the prebuilt command holds, stays put when the doorbell moves. Never read.
    _resp: Box<UnsafeCell<u32>>,
}

// Send without an `unsafe impl`: its parts (bytes, a `Box<UnsafeCell<u32>>`, a `&'static`
// of a `Sync` type) are; it is not `Sync`, as `ring` takes `&mut self`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Doorbell>();
};

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Doorbell({}, QP handle {})", self.who.op, self.qp_handle)
    }
}

impl Doorbell {
    /// The doorbell of the QP with kernel handle `qp_handle`, of provider `who`.
    pub fn new(qp_handle: u32, who: &'static Who) -> Self {
        let resp = Box::new(UnsafeCell::new(0u32));
        let cmd = post_send_cmd(qp_handle, resp.get() as usize as u64);
        Doorbell {
            cmd,
            qp_handle,
            who,
            _resp: resp,
        }
    }

    /// The command bytes (tests).
    #[cfg(test)]
    pub fn bytes(&self) -> &[u8; POST_SEND_CMD_LEN] {
        &self.cmd
    }

    /// Writes the command to `cmd_fd`: one write() of 32 bytes.
    #[inline]
    pub fn ring(&mut self, cmd_fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: the command's only address is the boxed response word we own, valid for
        // the kernel's 4-byte write during the call (write_cmd tells the compiler memory may
        // change); POST_SEND on an rxe or siw QP handle changes nothing a safe type owns.
        #[allow(unsafe_code)]
        let r = unsafe { rverbs_uverbs::kernel::write::write_cmd(cmd_fd, &self.cmd) };
        match r {
            Ok(POST_SEND_CMD_LEN) => Ok(()),
            other => Err(doorbell_error(
                self.who.op,
                other,
                self.qp_handle,
                self.who.hint,
            )),
        }
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
    fn rxe_doorbell_writes_its_prebuilt_command_each_time() {
        use std::os::fd::AsFd;
        let path = temp_path("doorbell");
        let f = std::fs::File::create(&path).unwrap();
        let mut d = Doorbell::new(77, &RXE);
        d.ring(f.as_fd()).unwrap();
        d.ring(f.as_fd()).unwrap();
        drop(f);
        let buf = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(buf.len(), 2 * POST_SEND_CMD_LEN);
        let expect = post_send_cmd(77, 0);
        for one in buf.chunks(POST_SEND_CMD_LEN) {
            assert_eq!(one, &d.bytes()[..]);
            // Everything but the (boxed) response address is the command.
            assert_eq!(one[..8], expect[..8]);
            assert_ne!(&one[8..16], &[0u8; 8]);
            assert_eq!(one[16..32], expect[16..32]);
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
    fn rxe_doorbell_reports_errno() {
        use std::os::fd::AsFd;
        let path = temp_path("doorbell-ro");
        std::fs::write(&path, b"").unwrap();
        let f = std::fs::File::open(&path).unwrap();
        // Writing to a read-only descriptor fails with EBADF.
        let e = Doorbell::new(5, &RXE).ring(f.as_fd()).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(Error::errno_of(&e), Some(Errno::BADF));
        assert!(e.to_string().contains("QP handle 5"), "{e}");
    }
}
