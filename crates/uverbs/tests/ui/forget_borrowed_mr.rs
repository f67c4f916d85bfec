// A registration of borrowed memory cannot be forgotten (and so stay registered after the
// borrow): `register` refuses borrows, and a scoped MR cannot leave its closure.
use rverbs_uverbs::mr::{AccessFlags, Mr};

fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
    let mut buf = [0u8; 64];
    let mr = Mr::register(pd, &mut buf[..], AccessFlags::LOCAL_WRITE).unwrap();
    std::mem::forget(mr);
}

fn main() {
    let _ = demo;
}
