// A dma-buf region is not CPU memory Rust may reference: it has no copy accessors, and its
// SGEs are plain `Sge`s, which the safe post path (whose INLINE copies read the SGE's address
// as CPU memory) does not take.
use rverbs_uverbs::dmabuf::DmabufMr;
use rverbs_uverbs::qp::Qp;
use rverbs_uverbs::SendWr;

fn read(mr: &DmabufMr) {
    let mut head = [0u8; 8];
    mr.read_at(0, &mut head);
}

fn post_inline(qp: &Qp, mr: &DmabufMr) {
    let sge = [mr.sge(0..8).unwrap()];
    let _ = qp.post_send(&[SendWr::send(1, &sge[..])]);
}

fn main() {
    let _ = (read, post_inline);
}
