//! A device whose kernel driver rverbs has no provider for (bnxt_re here; efa and siw
//! before their providers): listed like any device, and `ibv_open_device` answers NULL with `EOPNOTSUPP`,
//! opening nothing. Host test on a fake sysfs tree (the guest's siw stage checks the same
//! with Debian's programs while siw has no provider). And the functions rverbs does not
//! support: -1 (or NULL) and `EOPNOTSUPP`, whatever the arguments.

use std::collections::HashMap;

use crate::ibverbs::*;

fn fake_bnxt_re_tree() -> std::path::PathBuf {
    let root = std::env::temp_dir().join(format!("rverbs-capi-bnxt-re-{}", std::process::id()));
    let files = [
        ("class/infiniband_verbs/abi_version", "6\n"),
        ("class/infiniband_verbs/uverbs0/ibdev", "bnxt_re0\n"),
        ("class/infiniband_verbs/uverbs0/abi_version", "1\n"),
        ("class/infiniband_verbs/uverbs0/dev", "231:192\n"),
        ("class/infiniband/bnxt_re0/node_type", "1: CA\n"),
        (
            "class/infiniband/bnxt_re0/node_guid",
            "0250:b6ff:fe41:2a10\n",
        ),
        (
            "class/infiniband/bnxt_re0/sys_image_guid",
            "0250:b6ff:fe41:2a10\n",
        ),
        ("class/infiniband/bnxt_re0/fw_ver", "0.0.0\n"),
        ("class/infiniband/bnxt_re0/node_desc", "bnxt_re0\n"),
        ("class/infiniband/bnxt_re0/ports/1/state", "4: ACTIVE\n"),
    ];
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    root
}

#[test]
fn open_device_without_provider_is_null_with_eopnotsupp() {
    let root = fake_bnxt_re_tree();
    // SAFETY: the fake tree names a driver no provider has (bnxt_re, guessed from the name where
    // netlink does not know the device): nothing is opened from it.
    let dev = unsafe { rverbs_uverbs::device::Sysfs::at(&root).find("bnxt_re0", &HashMap::new()) }
        .unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    assert_eq!(dev.driver_id(), rverbs_uverbs::device::DriverId::BNXT_RE);
    let d = new_device(dev);
    set_errno(0);
    // SAFETY: d is one of ours (new_device), alive for the process.
    let ctx = unsafe { ibv_open_device(d.cast()) };
    assert!(ctx.is_null());
    let e = std::io::Error::last_os_error().raw_os_error();
    assert_eq!(e, Some(libc::EOPNOTSUPP));
    // The device itself stays usable: its name and GUID answer.
    // SAFETY: d is ours; the name is a NUL-terminated array inside it.
    let name = unsafe { std::ffi::CStr::from_ptr(ibv_get_device_name(d.cast())) };
    assert_eq!(name.to_str(), Ok("bnxt_re0"));
    // SAFETY: d is ours.
    let guid = unsafe { ibv_get_device_guid(d.cast()) };
    assert_eq!(u64::from_be(guid), 0x0250_b6ff_fe41_2a10);
}

#[test]
fn ece_calls_fail_with_eopnotsupp() {
    use crate::cma::{rdma_get_remote_ece, rdma_reject_ece, rdma_set_local_ece};
    use std::ptr::{null, null_mut};
    let fails = |what: &str, r: i32| {
        assert_eq!(r, -1, "{what}");
        let e = std::io::Error::last_os_error().raw_os_error();
        assert_eq!(e, Some(libc::EOPNOTSUPP), "{what}: errno");
        set_errno(0);
    };
    set_errno(0);
    // SAFETY: none of them touches its arguments (cma/unsupported.rs).
    unsafe {
        fails(
            "rdma_set_local_ece",
            rdma_set_local_ece(null_mut(), null_mut()),
        );
        fails(
            "rdma_get_remote_ece",
            rdma_get_remote_ece(null_mut(), null_mut()),
        );
        fails("rdma_reject_ece", rdma_reject_ece(null_mut(), null(), 0));
    }
}
