// A scoped MR cannot be moved out of its closure (to be forgotten or kept past the borrow).
use rverbs_uverbs::mr::{AccessFlags, Mr};

fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
    let mut buf = [0u8; 64];
    let mut keep = None;
    let _ = Mr::scoped(pd, &mut buf[..], AccessFlags::LOCAL_WRITE, |mr| keep = Some(mr));
    if let Some(mr) = keep {
        std::mem::forget(mr);
    }
}

fn main() {
    let _ = demo;
}
