//! The siw send doorbell: the legacy POST_SEND write() with no work requests. For a user QP
//! the kernel then processes the SQEs in the mapped ring (it refuses work requests in the
//! command itself for a user-mapped SQ). The command is built once per QP and kept, as
//! libsiw does; it is written only when the SQ looked idle ([`super::ring::Posted`]).

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::io;
use std::os::fd::BorrowedFd;

use rustix::io::Errno;
use rverbs_uverbs::abi::cmd::{ib_uverbs_cmd_hdr, nr};
use rverbs_uverbs::Error;
use zerocopy::{Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_post_send` without its flexible `send_wr[]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, IntoBytes, Immutable, KnownLayout)]
pub struct ib_uverbs_post_send {
    /// Address of the 4-byte response the kernel writes.
    pub response: u64,
    /// Kernel handle of the QP.
    pub qp_handle: u32,
    /// Work requests following: 0.
    pub wr_count: u32,
    /// SGEs following: 0.
    pub sge_count: u32,
    /// `sizeof(struct ib_uverbs_send_wr)`: the kernel checks it even with no requests.
    pub wqe_size: u32,
}

/// `sizeof(struct ib_uverbs_send_wr)`.
pub const IB_UVERBS_SEND_WR_SIZE: u32 = 56;

#[repr(C)]
#[derive(Clone, Copy, Debug, IntoBytes, Immutable, KnownLayout)]
struct PostSendCmd {
    hdr: ib_uverbs_cmd_hdr,
    body: ib_uverbs_post_send,
}

/// Bytes of the doorbell write().
pub const POST_SEND_CMD_LEN: usize = size_of::<PostSendCmd>();

/// One QP's prebuilt doorbell: the command bytes and the response word they point at.
pub struct Doorbell {
    cmd: [u8; POST_SEND_CMD_LEN],
    qp_handle: u32,
    // The kernel writes the response here during the write(); boxed so its address, which
    // the prebuilt command holds, stays put when the doorbell moves. Never read.
    _resp: Box<UnsafeCell<u32>>,
}

// SAFETY: the response word is written only by the kernel during `ring`, which takes `&mut
// self`; nothing else reaches it, so moving the doorbell between threads is fine.
unsafe impl Send for Doorbell {}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Doorbell(QP handle {})", self.qp_handle)
    }
}

impl Doorbell {
    /// The doorbell of the QP with kernel handle `qp_handle`.
    pub fn new(qp_handle: u32) -> Self {
        let resp = Box::new(UnsafeCell::new(0u32));
        let c = PostSendCmd {
            hdr: ib_uverbs_cmd_hdr {
                command: nr::POST_SEND,
                in_words: (POST_SEND_CMD_LEN / 4) as u16,
                out_words: 1,
            },
            body: ib_uverbs_post_send {
                response: resp.get() as usize as u64,
                qp_handle,
                wr_count: 0,
                sge_count: 0,
                wqe_size: IB_UVERBS_SEND_WR_SIZE,
            },
        };
        let mut cmd = [0u8; POST_SEND_CMD_LEN];
        cmd.copy_from_slice(c.as_bytes());
        Doorbell {
            cmd,
            qp_handle,
            _resp: resp,
        }
    }

    /// The command bytes (tests).
    pub fn bytes(&self) -> &[u8; POST_SEND_CMD_LEN] {
        &self.cmd
    }

    /// Writes the command to `cmd_fd`.
    pub fn ring(&mut self, cmd_fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: the command's only address is the boxed response word we own, valid for
        // the kernel's 4-byte write during the call (write_cmd tells the compiler memory may
        // change); POST_SEND on a siw QP handle changes nothing a safe type owns.
        let r = unsafe { rverbs_uverbs::write::write_cmd(cmd_fd, &self.cmd) };
        match r {
            Ok(POST_SEND_CMD_LEN) => Ok(()),
            other => Err(doorbell_error(other, self.qp_handle)),
        }
    }
}

#[cold]
#[inline(never)]
fn doorbell_error(r: Result<usize, Errno>, qp_handle: u32) -> io::Error {
    const OP: &str = "siw post send doorbell";
    match r {
        Ok(n) => Error::protocol(
            OP,
            format!("QP handle {qp_handle}: short write of {n} of {POST_SEND_CMD_LEN} bytes"),
        )
        .into(),
        Err(e) => {
            let hint = if e == Errno::NOTCONN {
                " (siw sends only on a connected QP in RTS: connect it through rdma_cm)"
            } else {
                ""
            };
            Error::os(OP, e)
                .with_detail(format!("QP handle {qp_handle}{hint}"))
                .into()
        }
    }
}
