//! Shared mappings of the uverbs command fd (rxe and siw queues, mlx5 UAR pages): the one
//! mapping owner, [`rverbs_uverbs::kernel::mapping::Mapping`], with the error naming what was mapped.

use std::io;
use std::os::fd::BorrowedFd;

use rverbs_uverbs::kernel::mapping::MapAccess;
pub(crate) use rverbs_uverbs::kernel::mapping::Mapping;
use rverbs_uverbs::Error;

/// Maps `len` bytes of `fd` at `offset`, shared, read and write; `what` names it in errors.
pub(crate) fn map_shared(
    fd: BorrowedFd<'_>,
    offset: u64,
    len: usize,
    what: &str,
) -> io::Result<Mapping> {
    Mapping::shared(fd, offset, len, MapAccess::ReadWrite).map_err(|e| {
        Error::os(format!("map {what}"), e)
            .with_detail(format!("offset {offset:#x}, {len} bytes"))
            .into()
    })
}
