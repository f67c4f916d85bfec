// `SrdQp::post_send` takes SRD work requests only: a generic send work request (which may
// carry an atomic, an RDMA WRITE, ...) is not one, and cannot be wrapped into one.
use rverbs_uverbs::srd::{SrdQp, SrdSendWr};
use rverbs_uverbs::{MrSendWr, SendOp};

fn post(qp: &SrdQp, mut wr: MrSendWr<'_>) {
    wr.op = SendOp::AtomicFetchAdd {
        remote_addr: 0,
        rkey: 0,
        add: 1,
    };
    let _ = qp.post_send(&[wr]);
    let _ = SrdSendWr(wr);
}

fn main() {}
