//! Issue 21, finding 4: a fake sysfs tree whose device node is not the uverbs device must not
//! make a `Context` own an fd it was never given. Before the fix a plain file failed the
//! ioctl, took the legacy GET_CONTEXT write (the command bytes landed in the file), and the
//! zeroed response named fd 0: the context then owned stdin and closed it on drop. Both
//! hostile trees here are refused with an error naming device and path, stdin stays open and
//! no fd leaks.
//!
//! One test function, so that no other test of this binary opens or closes fds while the fd
//! table is counted.

use std::collections::HashMap;
use std::fs;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{Device, Sysfs};

/// A fake tree for `rxe0` = `uverbs0` with the given `dev` number, its device directory
/// `dev/` holding nothing yet.
fn tree(dev: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("rverbs-fake-node-{}-{dev}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let files = [
        ("class/infiniband_verbs/abi_version", "6\n"),
        ("class/infiniband_verbs/uverbs0/ibdev", "rxe0\n"),
        ("class/infiniband_verbs/uverbs0/abi_version", "2\n"),
        ("class/infiniband_verbs/uverbs0/dev", &format!("{dev}\n")),
        ("class/infiniband/rxe0/node_type", "1: CA\n"),
        ("class/infiniband/rxe0/node_guid", "5054:00ff:fe12:3456\n"),
        (
            "class/infiniband/rxe0/sys_image_guid",
            "5054:00ff:fe12:3456\n",
        ),
    ];
    for (path, text) in files {
        let p = root.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    fs::create_dir_all(root.join("dev")).unwrap();
    root
}

fn device(root: &Path) -> Device {
    // SAFETY: the tree names a device node that is not a uverbs device: exactly what this
    // test shows is refused before anything is trusted; it lies about no driver of a real
    // device.
    let sysfs = unsafe { Sysfs::at(root).with_dev_dir(root.join("dev")) };
    // SAFETY: an empty netlink view (drivers guessed from names).
    unsafe { sysfs.find("rxe0", &HashMap::new()) }.unwrap()
}

/// The errors of opening `dev` with the ioctl path and with the legacy write() ABI; each open
/// must fail.
fn open_both_ways(dev: &Device) -> [std::io::Error; 2] {
    [Context::open(dev), Context::open_legacy_abi(dev)].map(|r| r.map(|_| ()).unwrap_err())
}

fn open_fds() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir("/proc/self/fd")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// (device, inode) of fd 0: which file stdin is.
fn stdin_identity() -> (u64, u64) {
    let st = rustix::fs::fstat(std::io::stdin().as_fd()).expect("fd 0 is open");
    (st.st_dev, st.st_ino)
}

#[test]
fn fake_device_nodes_are_refused_and_own_no_fd() {
    // Make sure fd 0 is open (CI may start us without stdin): the lowest free fd, so the
    // file lands on 0 if it was closed; kept open to the end.
    let _keep = if rustix::io::fcntl_getfd(std::io::stdin().as_fd()).is_err() {
        let f = fs::File::open("/dev/null").unwrap();
        assert_eq!(f.as_fd().as_raw_fd(), 0);
        Some(f)
    } else {
        None
    };
    let stdin = stdin_identity();

    // 1. A plain file where uverbs0 should be.
    let root = tree("231:192");
    let node = root.join("dev/uverbs0");
    fs::write(&node, b"not a device").unwrap();
    let dev = device(&root);
    let before = open_fds();
    for e in open_both_ways(&dev) {
        let s = e.to_string();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{s}");
        assert!(s.contains("open rxe0"), "{s}");
        assert!(s.contains(&node.display().to_string()), "{s}");
        assert!(s.contains("RegularFile"), "{s}");
        assert!(s.contains("not the uverbs character device 231:192"), "{s}");
    }
    assert_eq!(open_fds(), before, "an fd leaked");
    assert_eq!(
        fs::read(&node).unwrap(),
        b"not a device",
        "a command was written"
    );
    assert_eq!(stdin_identity(), stdin, "stdin was closed or replaced");
    fs::remove_dir_all(&root).unwrap();

    // 2. /dev/null (character device 1:3) with a matching `dev`: passes the node check; the
    // ioctl fails (ENOTTY), the legacy write "succeeds" without writing a response.
    let null = rustix::fs::stat("/dev/null").unwrap().st_rdev;
    let (major, minor) = (rustix::fs::major(null), rustix::fs::minor(null));
    let root = tree(&format!("{major}:{minor}"));
    std::os::unix::fs::symlink("/dev/null", root.join("dev/uverbs0")).unwrap();
    let dev = device(&root);
    let before = open_fds();
    for e in open_both_ways(&dev) {
        let s = e.to_string();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{s}");
        assert!(s.contains("open context on rxe0"), "{s}");
        assert!(s.contains("write GET_CONTEXT"), "{s}");
        assert!(s.contains("the kernel wrote no fd"), "{s}");
    }
    assert_eq!(open_fds(), before, "an fd leaked");
    assert_eq!(stdin_identity(), stdin, "stdin was closed or replaced");
    fs::remove_dir_all(&root).unwrap();
}
