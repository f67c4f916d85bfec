//! Proves the VM test bed end to end: inside the guest (`cargo xtask test`) the rxe device the
//! test bed created is there, with its uverbs character device, an ACTIVE port and the
//! IPv4-mapped RoCE v2 GID at index 1. On the host this test shows as ignored.

use std::fs;
use std::path::Path;

fn read(path: &Path) -> String {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .trim()
        .to_string()
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn test_bed_device_is_ready() {
    assert_eq!(
        std::env::var("RVERBS_VM").as_deref(),
        Ok("1"),
        "RVERBS_VM=1 is not set"
    );
    let dev = std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".to_string());
    let ibdev = Path::new("/sys/class/infiniband").join(&dev);
    assert!(ibdev.exists(), "{} does not exist", ibdev.display());
    assert!(
        Path::new("/dev/infiniband/uverbs0").exists(),
        "/dev/infiniband/uverbs0 does not exist"
    );

    // The uverbs node that belongs to this device (ibdev names it).
    let node = fs::read_dir("/sys/class/infiniband_verbs")
        .expect("cannot list /sys/class/infiniband_verbs")
        .flatten()
        .find(|e| e.path().join("ibdev").exists() && read(&e.path().join("ibdev")) == dev)
        .unwrap_or_else(|| panic!("no /sys/class/infiniband_verbs/uverbsN names {dev}"));
    let cdev = Path::new("/dev/infiniband").join(node.file_name());
    assert!(
        cdev.exists(),
        "{} (for {dev}) does not exist",
        cdev.display()
    );

    let state = read(&ibdev.join("ports/1/state"));
    assert!(
        state.contains("ACTIVE"),
        "{dev} port 1 is not active: {state}"
    );

    if let Ok(addr) = std::env::var("RVERBS_ADDR_A") {
        let o: Vec<u8> = addr
            .split('.')
            .map(|p| {
                p.parse()
                    .unwrap_or_else(|_| panic!("bad RVERBS_ADDR_A {addr}"))
            })
            .collect();
        assert_eq!(o.len(), 4, "bad RVERBS_ADDR_A {addr}");
        let want = format!(
            "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
            o[0], o[1], o[2], o[3]
        );
        let gid = read(&ibdev.join("ports/1/gids/1"));
        assert_eq!(
            gid, want,
            "{dev} GID index 1 is not the IPv4-mapped GID of {addr}"
        );
    }
}
