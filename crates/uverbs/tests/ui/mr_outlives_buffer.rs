// An MR over a borrowed buffer cannot outlive the buffer: `register` needs `'static` memory.
use rverbs_uverbs::mr::{AccessFlags, Mr};

fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>) {
    let mr;
    {
        let mut buf = vec![0u8; 4096];
        mr = Mr::register(pd, &mut buf[..], AccessFlags::LOCAL_WRITE).unwrap();
    }
    drop(mr);
}

fn main() {
    let _ = demo;
}
