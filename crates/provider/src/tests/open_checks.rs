//! Issue 31, item 2: each provider's `open` attaches its driver (`unsafe set_driver`) only to
//! a device of its own kernel driver. Before the fix mlx5's `open` did not check: it opened
//! the device with mlx5's driver data and trusted the kernel to have refused a foreign
//! device. Here every provider's entry is given a device of every other driver (a fake sysfs
//! tree, no device node behind it) and must refuse it by name before opening anything; its
//! own driver's device passes the check and fails only later, at the missing node.

use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::path::PathBuf;
use std::sync::Arc;

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{Device, Sysfs};

/// (device name, uverbs index, driver name) of the fake tree.
const DEVICES: &[(&str, u32, &str)] = &[
    ("rxe0", 0, "rxe"),
    ("siw0", 1, "siw"),
    ("mlx5_0", 2, "mlx5"),
    ("efa_0", 3, "efa"),
];

/// A sysfs tree with one device of each provider's driver (drivers guessed from the names),
/// and an empty device directory: no `uverbsN` node exists.
fn tree() -> PathBuf {
    let root = std::env::temp_dir().join(format!("rverbs-open-checks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut files = vec![(
        "class/infiniband_verbs/abi_version".to_string(),
        "6\n".to_string(),
    )];
    for &(name, n, _) in DEVICES {
        let v = format!("class/infiniband_verbs/uverbs{n}");
        files.push((format!("{v}/ibdev"), format!("{name}\n")));
        files.push((format!("{v}/abi_version"), "1\n".into()));
        files.push((format!("{v}/dev"), format!("231:{}\n", 192 + n)));
        let d = format!("class/infiniband/{name}");
        files.push((format!("{d}/node_type"), "1: CA\n".into()));
        files.push((format!("{d}/node_guid"), "5054:00ff:fe12:3456\n".into()));
        files.push((
            format!("{d}/sys_image_guid"),
            "5054:00ff:fe12:3456\n".into(),
        ));
    }
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(root.join("dev")).unwrap();
    root
}

#[test]
fn each_provider_opens_only_its_own_drivers_devices() {
    let root = tree();
    // SAFETY: the tree's devices have no device node (an empty device directory): nothing is
    // opened from it, so no provider can act on what it says about a driver.
    let sysfs = unsafe { Sysfs::at(&root).with_dev_dir(root.join("dev")) };
    let devs: Vec<Device> = DEVICES
        .iter()
        // SAFETY: an empty netlink view (drivers guessed from the names), as above.
        .map(|&(name, ..)| unsafe { sysfs.find(name, &HashMap::new()) }.unwrap())
        .collect();
    type Open = fn(&Device) -> io::Result<Arc<Context>>;
    let entries: [(&str, Open); 4] = [
        ("rxe", crate::rxe::driver::open),
        ("siw", crate::siw::driver::open),
        ("mlx5", crate::mlx5::driver::open),
        ("efa", crate::efa::driver::open),
    ];
    for (provider, open) in entries {
        let table = crate::PROVIDERS
            .iter()
            .find(|p| p.name == provider)
            .unwrap();
        for (dev, &(name, _, driver)) in devs.iter().zip(DEVICES) {
            for (how, r) in [("entry", open(dev)), ("table", table.open(dev))] {
                let e = r.map(|_| ()).unwrap_err();
                let s = e.to_string();
                let refusal = format!("open {name} with the {provider} provider");
                if driver == provider {
                    // Past the check: the open fails at the missing device node.
                    assert_ne!(e.kind(), ErrorKind::Unsupported, "{how} {provider}: {s}");
                    assert!(!s.contains(&refusal), "{how} {provider}: {s}");
                } else {
                    assert_eq!(e.kind(), ErrorKind::Unsupported, "{how} {provider}: {s}");
                    assert!(s.contains(&refusal), "{how} {provider}: {s}");
                    assert!(
                        s.contains(&format!("its driver is {driver} (id ")),
                        "{how} {provider}: {s}"
                    );
                }
            }
        }
    }
    std::fs::remove_dir_all(&root).unwrap();
}
