// A memory window cannot be bound in a scoped (borrowed) region: `Mw::bind_info` takes only
// regions over owned memory (`M: 'static`), because the kernel refuses to deregister a region
// with a bound window and a scoped region's failed deregistration would have to abort.
use rverbs_uverbs::mr::{AccessFlags, Mr};
use rverbs_uverbs::mw::Mw;

fn demo(pd: &std::sync::Arc<rverbs_uverbs::pd::Pd>, mw: &std::sync::Arc<Mw>) {
    let mut buf = [0u8; 4096];
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::MW_BIND;
    let _ = Mr::scoped(pd, &mut buf[..], access, |mr| {
        mw.bind_info(mr, 0..64, AccessFlags::REMOTE_READ).is_ok()
    });
}

fn main() {
    let _ = demo;
}
