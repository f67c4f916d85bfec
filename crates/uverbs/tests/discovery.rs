//! Device discovery, RDMA netlink and the context queries against a real rxe device. They need
//! the VM (`cargo xtask test`): rxe0 on dummy netdev d0 with 10.10.0.1/24, so GID index 1 is
//! the IPv4-mapped RoCE v2 GID `::ffff:10.10.0.1`. On the host they show as ignored.

use std::io;
use std::path::Path;

use rverbs_uverbs::context::Context;
use rverbs_uverbs::device::{devices, Device, DriverId, DriverIdSource};
use rverbs_uverbs::gid::GidType;
use rverbs_uverbs::netlink::RdmaNetlink;
use rverbs_uverbs::port::{LinkLayer, Mtu, PhysState, PortState};

/// The one-node topology's device (the two-node one names its first device in
/// RVERBS_DEV_A) and its address.
fn dev_and_addr() -> (String, String, String) {
    assert_eq!(
        std::env::var("RVERBS_VM").as_deref(),
        Ok("1"),
        "these tests run in the VM (RVERBS_VM=1)"
    );
    let dev = std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into());
    let addr = std::env::var("RVERBS_ADDR_A").unwrap_or_else(|_| "10.10.0.1".into());
    let netdev = std::env::var("RVERBS_NETDEV_A").unwrap_or_else(|_| "d0".into());
    (dev, addr, netdev)
}

fn ifindex(netdev: &str) -> u32 {
    let p = Path::new("/sys/class/net").join(netdev).join("ifindex");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .unwrap()
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn finds_the_rxe_device_with_its_driver_from_netlink() {
    let (name, _, _) = dev_and_addr();
    let all = devices().expect("devices()");
    assert!(
        all.iter().any(|d| d.name() == name),
        "{name} not in {all:?}"
    );
    let d = Device::by_name(&name).unwrap();
    assert_eq!(d.driver_id(), DriverId::RXE);
    assert_eq!(d.driver_id_source(), DriverIdSource::Netlink);
    assert_eq!(d.abi_version(), 2, "rxe's uverbs ABI version");
    assert!(d.dev_path().exists(), "{} missing", d.dev_path().display());
    assert_eq!(d.port_count(), 1);
    assert_ne!(d.node_guid(), 0);
    assert!(d.netlink_index().is_some());
    let (_, _, netdev) = dev_and_addr();
    assert_eq!(
        d.parent(),
        Some(netdev.as_str()),
        "rxe's sysfs parent is its netdev"
    );
    assert_eq!(d.vendor_id(), None, "rxe has no PCI device link");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn unknown_device_error_lists_the_real_ones() {
    let (name, _, _) = dev_and_addr();
    let e = Device::by_name("no_such_dev9").unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound);
    let s = e.to_string();
    assert!(s.contains("\"no_such_dev9\""), "{s}");
    assert!(s.contains(&name), "{s}");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn netlink_agrees_with_sysfs() {
    let (name, _, netdev) = dev_and_addr();
    let d = Device::by_name(&name).unwrap();
    let mut nl = RdmaNetlink::open().unwrap();
    let nd = nl.device_by_name(&name, "test").unwrap();
    assert_eq!(Some(nd.index), d.netlink_index());
    assert_eq!(nd.node_guid, Some(d.node_guid()));
    assert_eq!(nd.port_count, Some(1));
    assert_eq!(nd.protocol.as_deref(), Some("roce"));
    let c = nl.chardev(nd.index, "uverbs").unwrap();
    assert_eq!(c.name, format!("uverbs{}", d.uverbs_index()));
    assert_eq!(c.driver_id, Some(DriverId::RXE));
    assert_eq!(c.abi, u64::from(d.abi_version()));
    assert_eq!(Some((c.major(), c.minor())), d.dev_t());
    let ports = nl.ports(nd.index).unwrap();
    assert_eq!(ports.len(), 1);
    let p = &ports[0];
    assert_eq!(
        (p.port, p.state, p.phys_state),
        (1, Some(PortState::ACTIVE), Some(PhysState::LINK_UP))
    );
    assert_eq!(p.netdev.as_deref(), Some(netdev.as_str()));
    assert_eq!(p.netdev_index, Some(ifindex(&netdev)));
    assert_eq!(
        p.link_line(),
        format!("link {name}/1 state ACTIVE physical_state LINK_UP netdev {netdev}")
    );
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn opens_and_queries_device_and_port() {
    let (name, _, _) = dev_and_addr();
    let d = Device::by_name(&name).unwrap();
    let ctx = Context::open(&d).unwrap();
    assert!(ctx.num_comp_vectors() >= 1);
    // The async event fd is a real, open fd.
    rustix::fs::fstat(ctx.async_fd()).expect("async fd is open");

    let a = ctx.query_device().unwrap();
    assert_eq!(
        a.node_guid,
        d.node_guid(),
        "query_device vs sysfs node_guid"
    );
    assert_eq!(a.sys_image_guid, d.sys_image_guid());
    assert_eq!(a.phys_port_cnt, 1);
    assert_eq!(a.vendor_id, 0xffffff, "rxe's vendor id");
    assert_eq!(a.fw_ver, "0.0.0");
    assert!(a.max_qp > 0 && a.max_cqe > 0 && a.max_sge > 0 && a.max_mr > 0);
    eprintln!(
        "extended QUERY_DEVICE response_length: {}",
        a.ex_response_length
    );
    assert!(a.ex_response_length > 176, "the extended query answered");

    let p = ctx.query_port(1).unwrap();
    assert_eq!(p.state, PortState::ACTIVE);
    assert_eq!(p.link_layer, LinkLayer::ETHERNET);
    assert_eq!(p.max_mtu, Mtu::MTU_4096);
    // A dummy netdev has MTU 1500: the largest IB MTU that fits is 1024.
    assert_eq!(p.active_mtu, Mtu::MTU_1024);
    assert!(p.gid_tbl_len >= 2);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn out_of_range_port_names_port_and_count() {
    let (name, _, _) = dev_and_addr();
    let ctx = Context::open(&Device::by_name(&name).unwrap()).unwrap();
    for port in [0, 2, 300] {
        let e = ctx.query_port(port).unwrap_err();
        let s = e.to_string();
        assert!(s.contains(&format!("port {port}")), "{s}");
        assert!(s.contains("has 1 port"), "{s}");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
    let s = ctx.query_gid(3, 0).unwrap_err().to_string();
    assert!(s.contains("no port 3") && s.contains("has 1 port"), "{s}");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn gid_table_has_the_ipv4_mapped_roce_v2_gid_at_index_1() {
    let (name, addr, netdev) = dev_and_addr();
    let d = Device::by_name(&name).unwrap();
    let ctx = Context::open(&d).unwrap();
    let table = ctx.query_gid_table().unwrap();
    let e = table
        .iter()
        .find(|e| e.port == 1 && e.index == 1)
        .unwrap_or_else(|| panic!("no GID 1 in {table:?}"));
    assert_eq!(e.gid.to_string(), format!("::ffff:{addr}"));
    assert_eq!(e.gid_type, GidType::ROCE_V2);
    assert_eq!(e.ndev_ifindex, ifindex(&netdev));

    // One entry through QUERY_GID_ENTRY says the same.
    assert_eq!(ctx.query_gid(1, 1).unwrap(), *e);

    // And sysfs (the fallback path) agrees with the kernel's table entry by entry.
    let p = ctx.query_port(1).unwrap();
    let sysfs =
        rverbs_uverbs::gid::sysfs_gid_table(d.ibdev_path(), &[(1, p.gid_tbl_len, p.link_layer)])
            .unwrap();
    assert_eq!(sysfs, table);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn empty_or_past_the_end_gid_is_a_clear_error() {
    let (name, _, _) = dev_and_addr();
    let ctx = Context::open(&Device::by_name(&name).unwrap()).unwrap();
    let len = ctx.query_port(1).unwrap().gid_tbl_len;
    for index in [len - 1, len + 5] {
        let e = ctx.query_gid(1, index).unwrap_err();
        let s = e.to_string();
        eprintln!("GID {index} of a {len}-entry table: {s}");
        assert!(
            s.contains(&format!("query GID {index} of {name} port 1")),
            "{s}"
        );
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{s}");
    }
    let s = ctx.query_gid(1, len - 1).unwrap_err().to_string();
    assert!(s.ends_with(&format!("entry {} is empty", len - 1)), "{s}");
    let s = ctx.query_gid(1, len + 5).unwrap_err().to_string();
    assert!(
        s.ends_with(&format!(
            "index {} is past the table's {len} entries",
            len + 5
        )),
        "{s}"
    );
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn legacy_write_paths_agree_with_ioctl_paths() {
    // The fallbacks (write GET_CONTEXT, legacy QUERY_DEVICE, write QUERY_PORT, sysfs GIDs)
    // against the same device as the ioctl/extended paths.
    let (name, _, _) = dev_and_addr();
    let d = Device::by_name(&name).unwrap();
    let new = Context::open(&d).unwrap();
    let old = Context::open_legacy_abi(&d).unwrap();
    rustix::fs::fstat(old.async_fd()).expect("the write GET_CONTEXT's async fd is open");
    assert_eq!(old.num_comp_vectors(), new.num_comp_vectors());

    let (a_new, a_old) = (new.query_device().unwrap(), old.query_device().unwrap());
    assert_eq!(a_old.ex_response_length, 0, "legacy QUERY_DEVICE was used");
    let mut base_only = a_new.clone();
    base_only.ex_response_length = 0;
    base_only.odp_caps = Default::default();
    base_only.completion_timestamp_mask = 0;
    base_only.hca_core_clock = 0;
    base_only.device_cap_flags_ex = 0;
    base_only.rss_caps = Default::default();
    base_only.max_wq_type_rq = 0;
    base_only.raw_packet_caps = 0;
    base_only.tm_caps = Default::default();
    base_only.cq_mod_caps = Default::default();
    base_only.max_dm_size = 0;
    assert_eq!(a_old, base_only);

    let (p_new, p_old) = (new.query_port(1).unwrap(), old.query_port(1).unwrap());
    let mut p_base = p_new;
    p_base.port_cap_flags2 = 0;
    assert_eq!(p_old, p_base, "write QUERY_PORT has no port_cap_flags2");
    assert_eq!(
        old.query_gid_table().unwrap(),
        new.query_gid_table().unwrap()
    );
    assert_eq!(old.query_gid(1, 1).unwrap(), new.query_gid(1, 1).unwrap());
}
