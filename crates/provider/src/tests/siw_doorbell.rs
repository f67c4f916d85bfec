//! The siw doorbell: the prebuilt POST_SEND command's bytes, one write() per ring, and its
//! errors naming the QP.

use std::os::fd::AsFd;

use crate::rxe::doorbell::POST_SEND_CMD_LEN;
use crate::siw::doorbell::{Doorbell, SIW};
use rverbs_uverbs::Error;

#[test]
fn siw_doorbell_bytes() {
    let d = Doorbell::new(0x0102_0304, &SIW);
    let b = d.bytes();
    assert_eq!(b.len(), 32);
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    let u16_at = |o: usize| u16::from_ne_bytes(b[o..o + 2].try_into().unwrap());
    assert_eq!(u32_at(0), 28, "command POST_SEND");
    assert_eq!((u16_at(4), u16_at(6)), (8, 1), "in_words, out_words");
    assert_ne!(
        u64::from_ne_bytes(b[8..16].try_into().unwrap()),
        0,
        "response"
    );
    assert_eq!(u32_at(16), 0x0102_0304, "qp_handle");
    assert_eq!((u32_at(20), u32_at(24)), (0, 0), "no WRs, no SGEs");
    assert_eq!(u32_at(28), 56, "wqe_size");
    // The response address stays put when the doorbell moves (it is boxed).
    let before = b[8..16].to_vec();
    let moved = Box::new(d);
    assert_eq!(&moved.bytes()[8..16], &before[..]);
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rverbs-siw-{}-{name}", std::process::id()))
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
fn siw_doorbell_writes_its_command_each_time() {
    let path = temp_path("doorbell");
    let f = std::fs::File::create(&path).unwrap();
    let mut d = Doorbell::new(77, &SIW);
    d.ring(f.as_fd()).unwrap();
    d.ring(f.as_fd()).unwrap();
    drop(f);
    let buf = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(buf.len(), 2 * POST_SEND_CMD_LEN);
    assert_eq!(&buf[..32], &d.bytes()[..]);
    assert_eq!(&buf[32..], &d.bytes()[..]);
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
fn siw_doorbell_reports_errno_and_qp() {
    let path = temp_path("doorbell-ro");
    std::fs::write(&path, b"").unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let e = Doorbell::new(5, &SIW).ring(f.as_fd()).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(Error::errno_of(&e), Some(rustix::io::Errno::BADF));
    let s = e.to_string();
    assert!(s.contains("siw post send doorbell"), "{s}");
    assert!(s.contains("QP handle 5"), "{s}");
}
