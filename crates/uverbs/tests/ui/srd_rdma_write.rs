// An SRD QP carries SEND (± immediate) and RDMA READ only: there is no way to make an SRD
// RDMA WRITE (or atomic) work request, so none can be posted through `SrdQp::post_send`.
use rverbs_uverbs::srd::{SrdDest, SrdSendWr};
use rverbs_uverbs::MrSge;

fn write<'a>(sge: &'a [MrSge<'a>], dest: SrdDest) -> SrdSendWr<'a> {
    SrdSendWr::rdma_write(1, sge, 0x1000, 7, dest)
}

fn main() {}
