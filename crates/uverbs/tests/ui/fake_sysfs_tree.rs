//! Issue 21, finding 4: safe code cannot choose the sysfs tree or the device directory a
//! context is opened from (a fake tree chooses the provider and the file that stands for the
//! uverbs device), nor the netlink view that names a device's driver: `Sysfs::at`,
//! `with_dev_dir`, `find` and `list` are `unsafe`.
#![forbid(unsafe_code)]

use std::collections::HashMap;

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{DriverId, NetlinkInfo, Sysfs};

fn main() {
    let dev = Sysfs::at("/tmp/fake").with_dev_dir("/tmp").device("rxe0").unwrap();
    let _ = Context::open(&dev);
    let lie = NetlinkInfo {
        index: 0,
        driver_id: Some(DriverId::MLX5),
    };
    let nl = HashMap::from([("rxe0".to_string(), lie)]);
    let _ = Sysfs::system().find("rxe0", &nl);
    let _ = Sysfs::system().list(&nl);
}
