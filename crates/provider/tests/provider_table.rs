//! A device whose driver rverbs has no provider for is refused with an error that names the
//! device, the driver and the providers there are — before anything is opened. Host test on a
//! fake sysfs tree.

use std::collections::HashMap;
use std::io::ErrorKind;

fn fake_bnxt_tree() -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("rverbs-provider-table-{}", std::process::id()));
    let files = [
        ("class/infiniband_verbs/abi_version", "6\n"),
        ("class/infiniband_verbs/uverbs0/ibdev", "bnxt_re0\n"),
        ("class/infiniband_verbs/uverbs0/abi_version", "1\n"),
        ("class/infiniband_verbs/uverbs0/dev", "231:192\n"),
        ("class/infiniband/bnxt_re0/node_type", "1: CA\n"),
        (
            "class/infiniband/bnxt_re0/node_guid",
            "5054:00ff:fe12:3456\n",
        ),
        (
            "class/infiniband/bnxt_re0/sys_image_guid",
            "5054:00ff:fe12:3456\n",
        ),
        ("class/infiniband/bnxt_re0/fw_ver", "0.0.0\n"),
        ("class/infiniband/bnxt_re0/node_desc", "bnxt_re0\n"),
        ("class/infiniband/bnxt_re0/ports/1/state", "4: ACTIVE\n"),
        ("class/infiniband/bnxt_re0/ports/1/link_layer", "Ethernet\n"),
    ];
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    root
}

#[test]
fn unsupported_driver_is_named() {
    let root = fake_bnxt_tree();
    // SAFETY: the fake tree names a driver no provider has: nothing is opened from it.
    let dev = unsafe { rverbs_uverbs::device::Sysfs::at(&root).find("bnxt_re0", &HashMap::new()) }
        .unwrap();
    let e = rverbs_provider::open(&dev).unwrap_err();
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    let s = e.to_string();
    assert!(s.contains("open bnxt_re0"), "{s}");
    assert!(s.contains("no rverbs provider for driver"), "{s}");
    assert!(s.contains("(id 6)"), "{s}");
    assert!(s.contains("rverbs has: rxe, mlx5, efa, siw"), "{s}");
}
