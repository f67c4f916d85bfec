//! The raw kernel ABI: the bottom of the kernel layer ([`crate::kernel`]), outside the user's
//! API (as rustix keeps its `backend` apart).
//!
//! Everything here mirrors a structure or constant of the Linux uapi headers in
//! `include/rdma/` (`ib_user_verbs.h`, `ib_user_ioctl_cmds.h`, `ib_user_ioctl_verbs.h`,
//! `rdma_user_ioctl_cmds.h`). Sizes and field offsets are checked against the real headers by
//! `tests/abi_layout.rs` (which compiles a small C probe when a C compiler is available).
//!
//! Names keep the kernel's spelling in `snake_case`/`CamelCase` so the two can be read side by
//! side. Nothing here is meant for users; the safe API lives in the crate root's modules.

pub mod cmd;
pub mod device;
pub mod ioctl;
pub mod netlink;
pub mod obj;
