//! Device discovery: which RDMA devices exist, their uverbs char device, driver and identity.
//!
//! Sources, in the order rdma-core uses them:
//! - `/sys/class/infiniband_verbs/abi_version`: the uverbs ABI (must be 6);
//! - `/sys/class/infiniband_verbs/uverbsN/{ibdev, abi_version, dev}`: one entry per device
//!   that has a uverbs char device `/dev/infiniband/uverbsN`;
//! - `/sys/class/infiniband/<ibdev>/{node_type, node_guid, sys_image_guid, fw_ver, node_desc,
//!   ports/, device/vendor, device/device}`: the device's identity. rxe (6.1) has no
//!   `device/` link (its vendor id 0xffffff comes from the device query) but a `parent`
//!   file naming its netdev;
//! - RDMA netlink `RDMA_NLDEV_CMD_GET_CHARDEV`: the driver id (`RDMA_DRIVER_*`), which sysfs
//!   does not show. When netlink fails the driver is guessed from the device name (`rxe*`,
//!   `mlx5_*`, `siw*`, …) and `Device::driver_id_source` says so.
//!
//! The sysfs root is injectable (`Sysfs::at`, `unsafe`: a tree that lies about a device's
//! driver chooses the provider) so discovery can be tested on a fake tree.

#![allow(unsafe_code)] // unsafe fns: a fake tree chooses providers

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::netlink::{existing_list, RdmaNetlink};
use crate::newtype::raw_newtype;

internal! {
/// The uverbs ABI version rverbs speaks (`IB_USER_VERBS_ABI_VERSION`).
pub const UVERBS_ABI_VERSION: u32 = 6;
}

internal! {
pub use crate::values::DriverId;
}

internal! {
/// Where a device's [`DriverId`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverIdSource {
    /// RDMA netlink `GET_CHARDEV` (`RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID`): authoritative.
    Netlink,
    /// Guessed from the device name because netlink did not answer.
    NamePrefix,
}
}

raw_newtype! {
    /// `RDMA_NODE_*`: the node type in `/sys/class/infiniband/<dev>/node_type`.
    NodeType(u32) {
        IB_CA = 1, "CA";
        IB_SWITCH = 2, "switch";
        IB_ROUTER = 3, "router";
        RNIC = 4, "RNIC";
        USNIC = 5, "usNIC";
        USNIC_UDP = 6, "usNIC UDP";
        UNSPECIFIED = 7, "unspecified";
    }
}

raw_newtype! {
    /// `enum ibv_transport_type`, derived from the node type as libibverbs does.
    Transport(i32) {
        UNKNOWN = -1, "invalid transport";
        IB = 0, "InfiniBand";
        IWARP = 1, "iWARP";
        USNIC = 2, "usNIC";
        USNIC_UDP = 3, "usNIC UDP";
        UNSPECIFIED = 4, "unspecified";
    }
}

impl NodeType {
    internal! {
    /// The transport libibverbs reports for this node type.
    pub fn transport(self) -> Transport {
        match self {
            NodeType::IB_CA | NodeType::IB_SWITCH | NodeType::IB_ROUTER => Transport::IB,
            NodeType::RNIC => Transport::IWARP,
            NodeType::USNIC => Transport::USNIC,
            NodeType::USNIC_UDP => Transport::USNIC_UDP,
            NodeType::UNSPECIFIED => Transport::UNSPECIFIED,
            _ => Transport::UNKNOWN,
        }
    }
    }
}

/// One RDMA device with a uverbs char device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    name: String,
    uverbs_index: u32,
    dev_path: PathBuf,
    ibdev_path: PathBuf,
    dev_t: Option<(u32, u32)>,
    abi_version: u32,
    driver_id: DriverId,
    driver_id_source: DriverIdSource,
    nl_index: Option<u32>,
    node_type: NodeType,
    node_guid: u64,
    sys_image_guid: u64,
    fw_ver: String,
    node_desc: String,
    vendor_id: Option<u32>,
    vendor_part_id: Option<u32>,
    parent: Option<String>,
    port_count: u32,
}

impl Device {
    /// The device called `name` (e.g. "rxe0"). The error names the unknown device and lists
    /// the existing ones.
    pub fn by_name(name: &str) -> io::Result<Device> {
        Sysfs::system().device(name)
    }

    /// The kernel name, e.g. "rxe0", "mlx5_0".
    pub fn name(&self) -> &str {
        &self.name
    }

    internal! {
    /// N of `uverbsN`.
    pub fn uverbs_index(&self) -> u32 {
        self.uverbs_index
    }
    }

    internal! {
    /// The char device to open, `/dev/infiniband/uverbsN`.
    pub fn dev_path(&self) -> &Path {
        &self.dev_path
    }
    }

    internal! {
    /// `/sys/class/infiniband/<name>`.
    pub fn ibdev_path(&self) -> &Path {
        &self.ibdev_path
    }
    }

    internal! {
    /// `(major, minor)` of the char device, from sysfs `uverbsN/dev`.
    pub fn dev_t(&self) -> Option<(u32, u32)> {
        self.dev_t
    }
    }

    internal! {
    /// The driver's uverbs ABI version (`uverbsN/abi_version`: rxe 2, mlx5 1).
    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }
    }

    internal! {
    /// The kernel driver.
    pub fn driver_id(&self) -> DriverId {
        self.driver_id
    }
    }

    internal! {
    /// Whether [`Device::driver_id`] came from netlink or from the name.
    pub fn driver_id_source(&self) -> DriverIdSource {
        self.driver_id_source
    }
    }

    internal! {
    /// The kernel's RDMA device index (netlink `RDMA_NLDEV_ATTR_DEV_INDEX`), when netlink
    /// answered.
    pub fn netlink_index(&self) -> Option<u32> {
        self.nl_index
    }
    }

    /// `RDMA_NODE_*` from sysfs.
    pub fn node_type(&self) -> NodeType {
        self.node_type
    }

    /// The transport libibverbs derives from the node type.
    pub fn transport(&self) -> Transport {
        self.node_type.transport()
    }

    /// Node GUID as a number (the sysfs text `0250:b6ff:fe41:2a10` is 0x0250b6fffe412a10).
    pub fn node_guid(&self) -> u64 {
        self.node_guid
    }

    /// System image GUID as a number.
    pub fn sys_image_guid(&self) -> u64 {
        self.sys_image_guid
    }

    /// Firmware version text from sysfs (empty for software devices).
    pub fn fw_ver(&self) -> &str {
        &self.fw_ver
    }

    /// Node description from sysfs.
    pub fn node_desc(&self) -> &str {
        &self.node_desc
    }

    /// PCI vendor id (`device/vendor`), absent for software devices such as rxe.
    pub fn vendor_id(&self) -> Option<u32> {
        self.vendor_id
    }

    /// PCI device id (`device/device`), absent for software devices.
    pub fn vendor_part_id(&self) -> Option<u32> {
        self.vendor_part_id
    }

    /// The netdev a software device sits on (sysfs `parent`, which rxe has; hardware devices
    /// have a PCI `device/` link instead).
    pub fn parent(&self) -> Option<&str> {
        self.parent.as_deref()
    }

    /// Number of ports under `ports/` in sysfs.
    pub fn port_count(&self) -> u32 {
        self.port_count
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// All RDMA devices with a uverbs char device. Fails with "no RDMA devices found" (and a
/// hint on how to create one) when there is none.
pub fn devices() -> io::Result<Vec<Device>> {
    Sysfs::system().devices()
}

internal! {
/// Netlink's view of one device: its index and the driver id from `GET_CHARDEV`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetlinkInfo {
    /// The kernel's device index (the same as netlink's).
    pub index: u32,
    /// The driver that owns the device, when the kernel reports one.
    pub driver_id: Option<DriverId>,
}
}

internal! {
/// A sysfs tree to discover devices in: `/sys` normally, a fake tree in tests.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
    dev_dir: PathBuf,
}
}

#[cfg_attr(not(feature = "internals"), allow(dead_code))]
impl Sysfs {
    /// The real `/sys`, with char devices under `/dev/infiniband`.
    pub fn system() -> Self {
        // SAFETY: the kernel's own sysfs and device directory.
        unsafe { Self::at("/sys") }
    }

    /// A sysfs tree rooted at `root` (the directory holding `class/`): for tests with a fake
    /// tree, not for programs (they use [`Sysfs::system`]).
    ///
    /// # Safety
    /// The tree must tell the truth about the devices it lists, as the kernel's `/sys` does:
    /// above all each device's driver (the provider chosen by it interprets the kernel's
    /// responses and maps memory by that driver's layout) and its `dev` number. What a
    /// [`Context`](crate::context::Context) opens is checked (the node must be the character
    /// device whose number `dev` gives, and every fd the kernel names is validated), but a
    /// tree that names a real uverbs device with another driver's name or id is not caught.
    pub unsafe fn at(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            dev_dir: PathBuf::from("/dev/infiniband"),
        }
    }

    /// Where the `uverbsN` char devices are (default `/dev/infiniband`): for tests.
    ///
    /// # Safety
    /// As for `Sysfs::at`: the directory's `uverbsN` must be the devices the tree describes.
    #[must_use]
    pub unsafe fn with_dev_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dev_dir = dir.into();
        self
    }

    fn verbs_class(&self) -> PathBuf {
        self.root.join("class/infiniband_verbs")
    }

    fn ib_class(&self) -> PathBuf {
        self.root.join("class/infiniband")
    }

    /// The uverbs ABI version of the running kernel; an error when it is not the one rverbs
    /// speaks (6).
    pub fn check_abi_version(&self) -> io::Result<u32> {
        let path = self.verbs_class().join("abi_version");
        let v: u32 = read_num(&path).map_err(|e| {
            Error::unsupported(
                "read uverbs ABI version",
                format!("{}: {e}", path.display()),
            )
        })?;
        if v != UVERBS_ABI_VERSION {
            return Err(Error::unsupported(
                "check uverbs ABI version",
                format!(
                    "the kernel speaks uverbs ABI version {v} ({}), rverbs speaks version \
                     {UVERBS_ABI_VERSION}",
                    path.display()
                ),
            )
            .into());
        }
        Ok(v)
    }

    /// All devices, asking netlink for driver ids. Errors when there is none.
    pub fn devices(&self) -> io::Result<Vec<Device>> {
        // SAFETY: the kernel's netlink view.
        let devs = unsafe { self.list(&netlink_info()) }?;
        if devs.is_empty() {
            return Err(self.no_devices_error());
        }
        Ok(devs)
    }

    /// The device `name`, asking netlink for its driver id.
    pub fn device(&self, name: &str) -> io::Result<Device> {
        // SAFETY: the kernel's netlink view.
        unsafe { self.find(name, &netlink_info()) }
    }

    /// The device `name` with the given netlink view (tests pass their own).
    ///
    /// # Safety
    /// `nl` must be the kernel's view (or empty: drivers are then guessed from names, as
    /// rdma-core does): its driver ids choose the provider, as for `Sysfs::at`.
    pub unsafe fn find(&self, name: &str, nl: &HashMap<String, NetlinkInfo>) -> io::Result<Device> {
        // SAFETY: forwarded contract.
        let devs = unsafe { self.list(nl) }?;
        if devs.is_empty() {
            return Err(self.no_devices_error());
        }
        if let Some(d) = devs.iter().find(|d| d.name == name) {
            return Ok(d.clone());
        }
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        Err(
            Error::not_found("find RDMA device", format!("no RDMA device named {name:?}"))
                .with_detail(existing_list(&names))
                .into(),
        )
    }

    /// The error for "nothing found", with what to do about it.
    pub fn no_devices_error(&self) -> io::Error {
        let ib = self.ib_class();
        let unbound: Vec<String> = fs::read_dir(&ib)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let hint = if unbound.is_empty() {
            "hint: load the soft-RoCE driver (`modprobe rdma_rxe`) and create a device on a \
             network interface: `rverbs link add rxe0 type rxe netdev <netdev>`"
                .to_string()
        } else {
            format!(
                "{} has {} but no uverbs char device: load ib_uverbs (`modprobe ib_uverbs`)",
                ib.display(),
                unbound.join(", ")
            )
        };
        Error::not_found("find RDMA devices", "no RDMA devices found")
            .with_detail(hint)
            .into()
    }

    /// All devices (possibly none) with the given netlink view; devices netlink does not
    /// know get a driver id guessed from their name.
    ///
    /// # Safety
    /// As for [`Sysfs::find`].
    pub unsafe fn list(&self, nl: &HashMap<String, NetlinkInfo>) -> io::Result<Vec<Device>> {
        let class = self.verbs_class();
        let rd = match fs::read_dir(&class) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(Error::os(
                    "list uverbs devices",
                    rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO),
                )
                .with_detail(class.display().to_string())
                .into())
            }
        };
        self.check_abi_version()?;
        let mut devs = Vec::new();
        for entry in rd {
            let entry = entry?;
            let fname = entry.file_name();
            let Some(idx) = fname
                .to_str()
                .and_then(|s| s.strip_prefix("uverbs"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = entry.path();
            // A uverbs entry without ibdev is being torn down; rdma-core skips it too.
            let Ok(name) = read_str(&dir.join("ibdev")) else {
                continue;
            };
            devs.push(self.load(idx, &dir, name, nl)?);
        }
        devs.sort_by_key(|d| d.uverbs_index);
        Ok(devs)
    }

    fn load(
        &self,
        idx: u32,
        dir: &Path,
        name: String,
        nl: &HashMap<String, NetlinkInfo>,
    ) -> io::Result<Device> {
        let ctx = |what: &str, p: &Path, e: io::Error| -> io::Error {
            Error::protocol(
                "read RDMA device from sysfs",
                format!("{name}: {what} ({}): {e}", p.display()),
            )
            .into()
        };
        let abi_path = dir.join("abi_version");
        let abi_version =
            read_num(&abi_path).map_err(|e| ctx("driver ABI version", &abi_path, e))?;
        let dev_t = read_str(&dir.join("dev"))
            .ok()
            .and_then(|s| parse_dev_t(&s));
        let ibdev_path = self.ib_class().join(&name);
        let node_type = read_str(&ibdev_path.join("node_type"))
            .ok()
            .map_or(NodeType(0), |s| parse_node_type(&s));
        let guid = |file: &str| -> io::Result<u64> {
            let p = ibdev_path.join(file);
            let s = read_str(&p).map_err(|e| ctx(file, &p, e))?;
            parse_guid(&s).ok_or_else(|| ctx(file, &p, io::Error::other(format!("bad GUID {s:?}"))))
        };
        let node_guid = guid("node_guid")?;
        let sys_image_guid = guid("sys_image_guid").unwrap_or(0);
        let hex = |p: PathBuf| -> Option<u32> { parse_hex_id(&read_str(&p).ok()?) };
        let port_count = fs::read_dir(ibdev_path.join("ports"))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| {
                        e.file_name()
                            .to_str()
                            .is_some_and(|s| s.parse::<u32>().is_ok())
                    })
                    .count() as u32
            })
            .unwrap_or(0);
        let info = nl.get(&name).copied();
        let (driver_id, driver_id_source) = match info.and_then(|i| i.driver_id) {
            Some(d) => (d, DriverIdSource::Netlink),
            None => (
                DriverId::from_device_name(&name),
                DriverIdSource::NamePrefix,
            ),
        };
        Ok(Device {
            uverbs_index: idx,
            dev_path: self.dev_dir.join(format!("uverbs{idx}")),
            dev_t,
            abi_version,
            driver_id,
            driver_id_source,
            nl_index: info.map(|i| i.index),
            node_type,
            node_guid,
            sys_image_guid,
            fw_ver: read_str(&ibdev_path.join("fw_ver")).unwrap_or_default(),
            node_desc: read_str(&ibdev_path.join("node_desc")).unwrap_or_default(),
            vendor_id: hex(ibdev_path.join("device/vendor")),
            vendor_part_id: hex(ibdev_path.join("device/device")),
            parent: read_str(&ibdev_path.join("parent"))
                .ok()
                .filter(|p| !p.is_empty()),
            port_count,
            ibdev_path,
            name,
        })
    }
}

internal! {
/// Netlink's index and driver id of every device, or an empty map when netlink fails (the
/// caller then guesses drivers from names).
pub fn netlink_info() -> HashMap<String, NetlinkInfo> {
    let mut map = HashMap::new();
    let mut nl = match RdmaNetlink::open() {
        Ok(nl) => nl,
        Err(e) => {
            tracing::debug!("RDMA netlink unavailable, guessing drivers from names: {e}");
            return map;
        }
    };
    let devs = match nl.devices() {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!("RDMA netlink device dump failed: {e}");
            return map;
        }
    };
    for d in devs {
        let driver_id = match nl.chardev(d.index, "uverbs") {
            Ok(c) => c.driver_id,
            Err(e) => {
                tracing::debug!("GET_CHARDEV uverbs of {} failed: {e}", d.name);
                None
            }
        };
        map.insert(
            d.name,
            NetlinkInfo {
                index: d.index,
                driver_id,
            },
        );
    }
    map
}
}

internal! {
/// Parses a sysfs GUID "xxxx:xxxx:xxxx:xxxx" into its numeric value.
pub fn parse_guid(s: &str) -> Option<u64> {
    let mut v = 0u64;
    let mut n = 0;
    for part in s.trim().split(':') {
        if part.is_empty() || part.len() > 4 {
            return None;
        }
        v = (v << 16) | u64::from(u16::from_str_radix(part, 16).ok()?);
        n += 1;
    }
    (n == 4).then_some(v)
}
}

/// Parses a char device's sysfs `dev` text, "MAJOR:MINOR".
pub(crate) fn parse_dev_t(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Parses sysfs `node_type` text ("1: CA"): the number it starts with, 0 when none.
pub(crate) fn parse_node_type(s: &str) -> NodeType {
    s.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .map_or(NodeType(0), NodeType)
}

/// Parses a PCI vendor or device id as sysfs shows it ("0x15b3").
pub(crate) fn parse_hex_id(s: &str) -> Option<u32> {
    u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

internal! {
/// Formats a GUID as sysfs and ibv_devinfo print it: "xxxx:xxxx:xxxx:xxxx".
pub fn format_guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}
}

pub(crate) fn read_str(p: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(p)?.trim_end_matches('\n').to_string())
}

fn read_num(p: &Path) -> io::Result<u32> {
    let s = read_str(p)?;
    s.trim()
        .parse()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("not a number: {s:?}")))
}

/// A fake sysfs tree in a temporary directory, removed on drop (tests only).
#[cfg(test)]
pub(crate) mod fake {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Debug)]
    pub struct Tree(pub PathBuf);

    impl Tree {
        /// A tree holding `files` (path relative to the root, content).
        pub fn new(files: &[(&str, &str)]) -> Tree {
            static N: AtomicU32 = AtomicU32::new(0);
            let root = std::env::temp_dir().join(format!(
                "rverbs-sysfs-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&root);
            for (p, content) in files {
                let f = root.join(p);
                std::fs::create_dir_all(f.parent().unwrap()).unwrap();
                std::fs::write(&f, content).unwrap();
            }
            std::fs::create_dir_all(&root).unwrap();
            Tree(root)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// What a Linux 6.1 sysfs shows for soft-RoCE `rxe0` on dummy netdev `d0` (MAC
    /// 52:54:00:12:34:56, ifindex 3, 10.10.0.1/24), plus an mlx5 device without a uverbs
    /// char device entry of its own.
    pub const RXE0: &[(&str, &str)] = &[
        ("class/infiniband_verbs/abi_version", "6\n"),
        ("class/infiniband_verbs/uverbs0/ibdev", "rxe0\n"),
        ("class/infiniband_verbs/uverbs0/abi_version", "2\n"),
        ("class/infiniband_verbs/uverbs0/dev", "231:192\n"),
        ("class/infiniband/rxe0/node_type", "1: CA\n"),
        ("class/infiniband/rxe0/node_guid", "5054:00ff:fe12:3456\n"),
        (
            "class/infiniband/rxe0/sys_image_guid",
            "5054:00ff:fe12:3456\n",
        ),
        ("class/infiniband/rxe0/fw_ver", "\n"),
        ("class/infiniband/rxe0/node_desc", "rxe0\n"),
        ("class/infiniband/rxe0/parent", "d0\n"),
        ("class/infiniband/rxe0/ports/1/state", "4: ACTIVE\n"),
        ("class/infiniband/rxe0/ports/1/phys_state", "5: LinkUp\n"),
        ("class/infiniband/rxe0/ports/1/link_layer", "Ethernet\n"),
        (
            "class/infiniband/rxe0/ports/1/gids/0",
            "fe80:0000:0000:0000:5054:00ff:fe12:3456\n",
        ),
        (
            "class/infiniband/rxe0/ports/1/gids/1",
            "0000:0000:0000:0000:0000:ffff:0a0a:0001\n",
        ),
        (
            "class/infiniband/rxe0/ports/1/gids/2",
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        ),
        (
            "class/infiniband/rxe0/ports/1/gid_attrs/types/0",
            "RoCE v2\n",
        ),
        (
            "class/infiniband/rxe0/ports/1/gid_attrs/types/1",
            "RoCE v2\n",
        ),
        ("class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "d0\n"),
        ("class/infiniband/rxe0/ports/1/gid_attrs/ndevs/1", "d0\n"),
        ("class/net/d0/ifindex", "3\n"),
    ];

    /// A second device, mlx5_0 (uverbs1) with PCI ids and two ports.
    pub const MLX5_0: &[(&str, &str)] = &[
        ("class/infiniband_verbs/uverbs1/ibdev", "mlx5_0\n"),
        ("class/infiniband_verbs/uverbs1/abi_version", "1\n"),
        ("class/infiniband_verbs/uverbs1/dev", "231:193\n"),
        ("class/infiniband/mlx5_0/node_type", "1: CA\n"),
        ("class/infiniband/mlx5_0/node_guid", "b8ce:f603:0012:3456\n"),
        (
            "class/infiniband/mlx5_0/sys_image_guid",
            "b8ce:f603:0012:3456\n",
        ),
        ("class/infiniband/mlx5_0/fw_ver", "16.35.2000\n"),
        ("class/infiniband/mlx5_0/node_desc", "host mlx5_0\n"),
        ("class/infiniband/mlx5_0/device/vendor", "0x15b3\n"),
        ("class/infiniband/mlx5_0/device/device", "0x1017\n"),
        ("class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n"),
        ("class/infiniband/mlx5_0/ports/2/state", "1: DOWN\n"),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_round_trip() {
        assert_eq!(
            parse_guid("0250:b6ff:fe41:2a10\n"),
            Some(0x0250_b6ff_fe41_2a10)
        );
        assert_eq!(format_guid(0x0250_b6ff_fe41_2a10), "0250:b6ff:fe41:2a10");
        assert_eq!(parse_guid("0250:b6ff:fe41"), None);
        assert_eq!(parse_guid("0250:b6ff:fe41:2a10:0000"), None);
        assert_eq!(parse_guid("zz50:b6ff:fe41:2a10"), None);
    }

    #[test]
    fn driver_from_name() {
        assert_eq!(DriverId::from_device_name("rxe0"), DriverId::RXE);
        assert_eq!(DriverId::from_device_name("mlx5_1"), DriverId::MLX5);
        assert_eq!(DriverId::from_device_name("siw_eth0"), DriverId::SIW);
        assert_eq!(DriverId::from_device_name("foo"), DriverId::UNKNOWN);
        assert_eq!(DriverId::RXE.name(), Some("rxe"));
        assert_eq!(format!("{}", DriverId(99)), "unknown DriverId 99 (0x63)");
    }

    use super::fake::{Tree, MLX5_0, RXE0};

    /// The fake tree's sysfs (device nodes in `/dev/infiniband`).
    fn sysfs(t: &Tree) -> Sysfs {
        // SAFETY: test trees are only listed here, never opened.
        unsafe { Sysfs::at(t.path()).with_dev_dir("/dev/infiniband") }
    }

    fn list(t: &Tree) -> io::Result<Vec<Device>> {
        // SAFETY: as above; an empty netlink view.
        unsafe { sysfs(t).list(&HashMap::new()) }
    }

    fn find(t: &Tree, name: &str, nl: &HashMap<String, NetlinkInfo>) -> io::Result<Device> {
        // SAFETY: as above; the test's own netlink view.
        unsafe { sysfs(t).find(name, nl) }
    }

    fn both() -> Tree {
        Tree::new(&[RXE0, MLX5_0].concat())
    }

    #[test]
    fn lists_devices_from_sysfs() {
        let t = both();
        let devs = list(&t).unwrap();
        assert_eq!(devs.len(), 2);
        let rxe = &devs[0];
        assert_eq!(rxe.name(), "rxe0");
        assert_eq!(rxe.uverbs_index(), 0);
        assert_eq!(rxe.dev_path(), Path::new("/dev/infiniband/uverbs0"));
        assert_eq!(rxe.dev_t(), Some((231, 192)));
        assert_eq!(rxe.abi_version(), 2);
        assert_eq!(rxe.node_type(), NodeType::IB_CA);
        assert_eq!(rxe.transport(), Transport::IB);
        assert_eq!(rxe.node_guid(), 0x5054_00ff_fe12_3456);
        assert_eq!(rxe.fw_ver(), "");
        assert_eq!(rxe.node_desc(), "rxe0");
        assert_eq!((rxe.vendor_id(), rxe.vendor_part_id()), (None, None));
        assert_eq!(rxe.parent(), Some("d0"));
        assert_eq!(rxe.port_count(), 1);
        assert_eq!(rxe.driver_id(), DriverId::RXE);
        assert_eq!(rxe.driver_id_source(), DriverIdSource::NamePrefix);
        assert_eq!(rxe.netlink_index(), None);
        let mlx = &devs[1];
        assert_eq!((mlx.name(), mlx.uverbs_index()), ("mlx5_0", 1));
        assert_eq!(
            (mlx.vendor_id(), mlx.vendor_part_id()),
            (Some(0x15b3), Some(0x1017))
        );
        assert_eq!((mlx.port_count(), mlx.abi_version()), (2, 1));
        assert_eq!(mlx.fw_ver(), "16.35.2000");
        assert_eq!(mlx.driver_id(), DriverId::MLX5);
        assert_eq!(mlx.parent(), None);
    }

    #[test]
    fn netlink_driver_id_wins_over_the_name() {
        let t = both();
        let mut nl = HashMap::new();
        // A device whose name says nothing about its driver.
        nl.insert(
            "rxe0".to_string(),
            NetlinkInfo {
                index: 7,
                driver_id: Some(DriverId::SIW),
            },
        );
        let d = find(&t, "rxe0", &nl).unwrap();
        assert_eq!(d.driver_id(), DriverId::SIW);
        assert_eq!(d.driver_id_source(), DriverIdSource::Netlink);
        assert_eq!(d.netlink_index(), Some(7));
    }

    #[test]
    fn unknown_name_lists_the_existing_devices() {
        let t = both();
        let e = find(&t, "mlx9_9", &HashMap::new()).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("\"mlx9_9\""), "{s}");
        assert!(s.contains("existing devices: rxe0, mlx5_0"), "{s}");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn wrong_abi_version_names_both_versions() {
        let mut files = RXE0.to_vec();
        files[0] = ("class/infiniband_verbs/abi_version", "7\n");
        let t = Tree::new(&files);
        let e = list(&t).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("uverbs ABI version 7"), "{s}");
        assert!(s.contains("rverbs speaks version 6"), "{s}");
        assert_eq!(e.kind(), io::ErrorKind::Unsupported);
    }

    #[test]
    fn no_devices_gives_a_hint() {
        let t = Tree::new(&[("class/net/lo/ifindex", "1\n")]);
        let s = sysfs(&t).devices().unwrap_err().to_string();
        assert!(s.contains("no RDMA devices found"), "{s}");
        assert!(s.contains("modprobe rdma_rxe"), "{s}");
        assert!(
            s.contains("rverbs link add rxe0 type rxe netdev <netdev>"),
            "{s}"
        );
        let s = find(&t, "rxe0", &HashMap::new()).unwrap_err().to_string();
        assert!(s.contains("no RDMA devices found"), "{s}");
    }

    #[test]
    fn devices_without_uverbs_point_at_ib_uverbs() {
        let only_ib: Vec<_> = RXE0
            .iter()
            .copied()
            .filter(|(p, _)| !p.starts_with("class/infiniband_verbs"))
            .collect();
        let t = Tree::new(&only_ib);
        let s = sysfs(&t).devices().unwrap_err().to_string();
        assert!(s.contains("no RDMA devices found"), "{s}");
        assert!(s.contains("rxe0 but no uverbs char device"), "{s}");
        assert!(s.contains("modprobe ib_uverbs"), "{s}");
    }

    #[test]
    fn entries_without_ibdev_are_skipped() {
        let mut files = RXE0.to_vec();
        files.push(("class/infiniband_verbs/uverbs5/abi_version", "2\n"));
        files.push(("class/infiniband_verbs/not-uverbs/ibdev", "x\n"));
        let t = Tree::new(&files);
        let devs = list(&t).unwrap();
        assert_eq!(devs.len(), 1);
    }

    #[test]
    fn missing_node_guid_is_an_error_naming_the_file() {
        let files: Vec<_> = RXE0
            .iter()
            .copied()
            .filter(|(p, _)| !p.ends_with("rxe0/node_guid"))
            .collect();
        let t = Tree::new(&files);
        let s = list(&t).unwrap_err().to_string();
        assert!(s.contains("rxe0: node_guid"), "{s}");
    }

    #[test]
    fn transport_from_node_type() {
        assert_eq!(NodeType::IB_CA.transport(), Transport::IB);
        assert_eq!(NodeType::RNIC.transport(), Transport::IWARP);
        assert_eq!(NodeType(42).transport(), Transport::UNKNOWN);
        assert_eq!(Transport::IB.to_string(), "InfiniBand");
    }
}
