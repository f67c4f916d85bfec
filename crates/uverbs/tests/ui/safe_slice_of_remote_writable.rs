// Safe code gets no `&[u8]` over memory a remote peer may write: `as_slice` is `unsafe`.
use rverbs_uverbs::mr::{AccessFlags, Mr, PageBuf};

fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = Mr::register(pd, PageBuf::new(4096).unwrap(), access).unwrap();
    let bytes: &[u8] = mr.as_slice();
    let _ = bytes;
}

fn main() {
    let _ = demo;
}
