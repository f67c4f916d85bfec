//! The siw send doorbell: the legacy POST_SEND write() with no work requests. For a user QP
//! the kernel then processes the SQEs in the mapped ring (it refuses work requests in the
//! command itself for a user-mapped SQ). The command is built once per QP and kept, as
//! libsiw does; it is written only when the SQ looked idle ([`super::ring::Posted`]).

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::io;
use std::os::fd::BorrowedFd;

use rustix::io::Errno;

pub use crate::rxe::doorbell::POST_SEND_CMD_LEN;
use crate::rxe::doorbell::{doorbell_error, post_send_cmd};

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
        // The command rxe writes too (`rxe::doorbell`); its response is our boxed word.
        let cmd = post_send_cmd(qp_handle, resp.get() as usize as u64);
        Doorbell {
            cmd,
            qp_handle,
            _resp: resp,
        }
    }

    /// The command bytes (tests).
    #[cfg(test)]
    pub fn bytes(&self) -> &[u8; POST_SEND_CMD_LEN] {
        &self.cmd
    }

    /// Writes the command to `cmd_fd`.
    pub fn ring(&mut self, cmd_fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: the command's only address is the boxed response word we own, valid for
        // the kernel's 4-byte write during the call (write_cmd tells the compiler memory may
        // change); POST_SEND on a siw QP handle changes nothing a safe type owns.
        let r = unsafe { rverbs_uverbs::kernel::write::write_cmd(cmd_fd, &self.cmd) };
        match r {
            Ok(POST_SEND_CMD_LEN) => Ok(()),
            other => Err(doorbell_error(
                "siw post send doorbell",
                other,
                self.qp_handle,
                (
                    Errno::NOTCONN,
                    " (siw sends only on a connected QP in RTS: connect it through rdma_cm)",
                ),
            )),
        }
    }
}
