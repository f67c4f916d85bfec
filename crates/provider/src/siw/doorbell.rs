//! The siw send doorbell: the legacy POST_SEND write() with no work requests. For a user QP
//! the kernel then processes the SQEs in the mapped ring (it refuses work requests in the
//! command itself for a user-mapped SQ). The command is built once per QP and kept, as
//! libsiw does ([`Doorbell`], rxe's too); it is written only when the SQ looked idle
//! ([`super::ring::Posted`]).

use rustix::io::Errno;

pub use crate::rxe::doorbell::{Doorbell, Who};

/// siw's doorbell, for its errors.
pub static SIW: Who = Who {
    op: "siw post send doorbell",
    hint: (
        Errno::NOTCONN,
        " (siw sends only on a connected QP in RTS: connect it through rdma_cm)",
    ),
};
