//! A device context: the open `/dev/infiniband/uverbsN`, its async event fd, and the device,
//! port and GID queries.
//!
//! Which ABI each operation speaks (rdma-core's order; see docs/abi.md):
//!
//! | operation        | first try                              | fallback                     |
//! |------------------|----------------------------------------|------------------------------|
//! | open context     | ioctl `DEVICE/GET_CONTEXT`             | write `GET_CONTEXT` (0)      |
//! | async event fd   | ioctl `ASYNC_EVENT/ALLOC`              | (write path returns it)      |
//! | query device     | extended write `QUERY_DEVICE`          | legacy write `QUERY_DEVICE`  |
//! | query port       | ioctl `DEVICE/QUERY_PORT`              | write `QUERY_PORT` (2)       |
//! | GID table        | ioctl `DEVICE/QUERY_GID_TABLE`         | sysfs `gids/`, `gid_attrs/`  |
//! | one GID          | ioctl `DEVICE/QUERY_GID_ENTRY`         | sysfs                        |
//! | create CQ        | ioctl `CQ/CREATE`                      | write `CREATE_CQ` (18)       |
//! | create QP        | ioctl `QP/CREATE`                      | write `CREATE_QP` (24)       |
//! | destroy PD/MR    | ioctl `PD/DESTROY`, `MR/DESTROY`       | write `DEALLOC_PD` (4), `DEREG_MR` (13) |
//! | destroy CQ/QP    | ioctl `CQ/DESTROY`, `QP/DESTROY`       | write `DESTROY_CQ` (20), `DESTROY_QP` (27) |
//! | destroy SRQ/AH   | ioctl `SRQ/DESTROY`, `AH/DESTROY`      | write `DESTROY_SRQ` (35), `DESTROY_AH` (8) |
//!
//! An ioctl failing with `ENOTTY` means the kernel has no ioctl interface at all; with
//! `EPROTONOSUPPORT` that this method is missing. Both switch to the fallback (and remember
//! it); any other error is the answer.

#![allow(unsafe_code)]

use std::fmt;
use std::fs;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::abi::cmd::{ex_nr, nr};
use crate::abi::ioctl::{
    async_event, device as dev_m, object, UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT,
};
use crate::abi::verbs::{
    ib_uverbs_ex_query_device, ib_uverbs_ex_query_device_resp, ib_uverbs_get_context,
    ib_uverbs_get_context_resp, ib_uverbs_gid_entry, ib_uverbs_query_device,
    ib_uverbs_query_device_resp, ib_uverbs_query_port, ib_uverbs_query_port_resp,
    ib_uverbs_query_port_resp_ex,
};
use crate::device::{read_str, Device, DriverId};
use crate::error::Error;
use crate::ioctl::IoctlCall;
use crate::provider::Driver;
use crate::wc::raw_newtype;
use crate::write;

// ---------------------------------------------------------------------------------------------
// Value types
// ---------------------------------------------------------------------------------------------

raw_newtype! {
    /// `enum ib_port_state` (`ibv_port_state`).
    PortState(u8) {
        NOP = 0, "PORT_NOP";
        DOWN = 1, "PORT_DOWN";
        INIT = 2, "PORT_INIT";
        ARMED = 3, "PORT_ARMED";
        ACTIVE = 4, "PORT_ACTIVE";
        ACTIVE_DEFER = 5, "PORT_ACTIVE_DEFER";
    }
}

raw_newtype! {
    /// `enum ib_mtu` (`ibv_mtu`): the path MTU code; [`Mtu::bytes`] gives the size.
    Mtu(u8) {
        MTU_256 = 1, "256";
        MTU_512 = 2, "512";
        MTU_1024 = 3, "1024";
        MTU_2048 = 4, "2048";
        MTU_4096 = 5, "4096";
    }
}

impl Mtu {
    /// The MTU in bytes, or `None` for a code this crate does not know.
    pub fn bytes(self) -> Option<u32> {
        match self.0 {
            1..=5 => Some(128 << self.0),
            _ => None,
        }
    }
}

raw_newtype! {
    /// `IB_LINK_LAYER_*` (`ibv_link_layer`).
    LinkLayer(u8) {
        UNSPECIFIED = 0, "unspecified";
        INFINIBAND = 1, "InfiniBand";
        ETHERNET = 2, "Ethernet";
    }
}

raw_newtype! {
    /// `enum ib_port_phys_state`.
    PhysState(u8) {
        SLEEP = 1, "SLEEP";
        POLLING = 2, "POLLING";
        DISABLED = 3, "DISABLED";
        PORT_CONFIGURATION_TRAINING = 4, "PORT_CONFIGURATION_TRAINING";
        LINK_UP = 5, "LINK_UP";
        LINK_ERROR_RECOVERY = 6, "LINK_ERROR_RECOVERY";
        PHY_TEST = 7, "PHY_TEST";
    }
}

raw_newtype! {
    /// `enum ib_uverbs_gid_type`: what a GID table entry is for.
    GidType(u32) {
        IB = 0, "IB";
        ROCE_V1 = 1, "RoCE v1";
        ROCE_V2 = 2, "RoCE v2";
    }
}

raw_newtype! {
    /// `enum ib_atomic_cap` (`ibv_atomic_cap`).
    AtomicCap(u32) {
        NONE = 0, "ATOMIC_NONE";
        HCA = 1, "ATOMIC_HCA";
        GLOB = 2, "ATOMIC_GLOB";
    }
}

/// A 16-byte GID in network order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// All bytes zero (an unused table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// Parses the sysfs form "fe80:0000:0000:0000:0250:b6ff:fe41:2a10" (8 groups of 4 hex
    /// digits; any IPv6 text is accepted too).
    pub fn parse(s: &str) -> Option<Gid> {
        s.trim()
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(|a| Gid(a.octets()))
    }
}

impl fmt::Display for Gid {
    /// The text glibc's `inet_ntop(AF_INET6)` gives (what ibv_devinfo prints for RoCE v2
    /// GIDs): the longest run of two or more zero groups (the first on ties) is "::", and an
    /// IPv4-mapped (`::ffff:a.b.c.d`) or IPv4-compatible (`::a.b.c.d`) address ends in
    /// dotted decimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w: [u16; 8] =
            std::array::from_fn(|i| u16::from_be_bytes([self.0[2 * i], self.0[2 * i + 1]]));
        // Longest run of zero words (length >= 2), first one on ties.
        let (mut best, mut best_len, mut cur, mut cur_len) = (usize::MAX, 0, 0, 0);
        for (i, &x) in w.iter().enumerate() {
            if x == 0 {
                if cur_len == 0 {
                    cur = i;
                }
                cur_len += 1;
                if cur_len > best_len {
                    best = cur;
                    best_len = cur_len;
                }
            } else {
                cur_len = 0;
            }
        }
        if best_len < 2 {
            best = usize::MAX;
        }
        let v4 = Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15]);
        for (i, word) in w.iter().enumerate() {
            if best != usize::MAX && i >= best && i < best + best_len {
                if i == best {
                    f.write_str(":")?;
                }
                continue;
            }
            if i != 0 {
                f.write_str(":")?;
            }
            // glibc ends ::a.b.c.d and ::ffff:a.b.c.d in dotted decimal.
            if i == 6 && best == 0 && (best_len == 6 || (best_len == 5 && w[5] == 0xffff)) {
                return write!(f, "{v4}");
            }
            write!(f, "{word:x}")?;
        }
        if best != usize::MAX && best + best_len == 8 {
            f.write_str(":")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// One entry of a port's GID table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub port: u32,
    pub gid: Gid,
    pub gid_type: GidType,
    /// ifindex of the netdev behind the GID (RoCE), 0 when none.
    pub ndev_ifindex: u32,
}

/// `ibv_odp_caps` plus `xrc_odp_caps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
    pub xrc_odp_caps: u32,
}

/// `ibv_rss_caps` as the kernel reports it (the hash fields are mlx5 driver data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
}

/// `ibv_tm_caps` (tag matching).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TmCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `ibv_cq_moderation_caps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqModerationCaps {
    pub max_cq_count: u16,
    /// Microseconds.
    pub max_cq_period: u16,
}

/// Device attributes: `ibv_device_attr` and the extended fields of `ibv_device_attr_ex` that
/// the kernel reports (driver-specific ones such as mlx5's TSO caps are not here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version as the driver's rdma-core provider formats it.
    pub fw_ver: String,
    /// The kernel's raw 64-bit firmware version.
    pub fw_ver_raw: u64,
    /// Host-order GUIDs.
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: AtomicCap,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    /// Bytes of the extended response the kernel filled; 0 when only the legacy query
    /// worked (then every field below is 0).
    pub ex_response_length: u32,
    pub odp_caps: OdpCaps,
    pub completion_timestamp_mask: u64,
    /// kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub rss_caps: RssCaps,
    pub max_wq_type_rq: u32,
    pub raw_packet_caps: u32,
    pub tm_caps: TmCaps,
    pub cq_mod_caps: CqModerationCaps,
    pub max_dm_size: u64,
}

/// Port attributes (`ibv_port_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortAttr {
    pub state: PortState,
    pub max_mtu: Mtu,
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: PhysState,
    pub link_layer: LinkLayer,
    /// `IB_UVERBS_QPF_*` (bit 0: GRH required).
    pub flags: u8,
    /// Only the ioctl path reports it (0 after the write fallback).
    pub port_cap_flags2: u16,
}

impl PortAttr {
    fn from_resp(r: &ib_uverbs_query_port_resp, cap_flags2: u16) -> Self {
        Self {
            state: PortState(r.state),
            max_mtu: Mtu(r.max_mtu),
            active_mtu: Mtu(r.active_mtu),
            gid_tbl_len: r.gid_tbl_len,
            port_cap_flags: r.port_cap_flags,
            max_msg_sz: r.max_msg_sz,
            bad_pkey_cntr: r.bad_pkey_cntr,
            qkey_viol_cntr: r.qkey_viol_cntr,
            pkey_tbl_len: r.pkey_tbl_len,
            lid: r.lid,
            sm_lid: r.sm_lid,
            lmc: r.lmc,
            max_vl_num: r.max_vl_num,
            sm_sl: r.sm_sl,
            subnet_timeout: r.subnet_timeout,
            init_type_reply: r.init_type_reply,
            active_width: r.active_width,
            active_speed: r.active_speed,
            phys_state: PhysState(r.phys_state),
            link_layer: LinkLayer(r.link_layer),
            flags: r.flags,
            port_cap_flags2: cap_flags2,
        }
    }
}

/// The firmware version text rdma-core's provider for `driver` prints for `raw`
/// (major.minor.sub_minor from bits 47:32, 31:16, 15:0; mlx5 pads sub_minor to 4 digits,
/// mlx4 to 3).
pub fn format_fw_ver(driver: DriverId, raw: u64) -> String {
    let (major, minor, sub) = ((raw >> 32) & 0xffff, (raw >> 16) & 0xffff, raw & 0xffff);
    match driver {
        DriverId::MLX5 => format!("{major}.{minor}.{sub:04}"),
        DriverId::MLX4 => format!("{major}.{minor}.{sub:03}"),
        _ => format!("{major}.{minor}.{sub}"),
    }
}

impl DeviceAttr {
    fn from_resp(driver: DriverId, r: &ib_uverbs_ex_query_device_resp, ex_len: u32) -> Self {
        let b = &r.base;
        Self {
            fw_ver: format_fw_ver(driver, b.fw_ver),
            fw_ver_raw: b.fw_ver,
            node_guid: u64::from_be(b.node_guid),
            sys_image_guid: u64::from_be(b.sys_image_guid),
            max_mr_size: b.max_mr_size,
            page_size_cap: b.page_size_cap,
            vendor_id: b.vendor_id,
            vendor_part_id: b.vendor_part_id,
            hw_ver: b.hw_ver,
            max_qp: b.max_qp,
            max_qp_wr: b.max_qp_wr,
            device_cap_flags: b.device_cap_flags,
            max_sge: b.max_sge,
            max_sge_rd: b.max_sge_rd,
            max_cq: b.max_cq,
            max_cqe: b.max_cqe,
            max_mr: b.max_mr,
            max_pd: b.max_pd,
            max_qp_rd_atom: b.max_qp_rd_atom,
            max_ee_rd_atom: b.max_ee_rd_atom,
            max_res_rd_atom: b.max_res_rd_atom,
            max_qp_init_rd_atom: b.max_qp_init_rd_atom,
            max_ee_init_rd_atom: b.max_ee_init_rd_atom,
            atomic_cap: AtomicCap(b.atomic_cap),
            max_ee: b.max_ee,
            max_rdd: b.max_rdd,
            max_mw: b.max_mw,
            max_raw_ipv6_qp: b.max_raw_ipv6_qp,
            max_raw_ethy_qp: b.max_raw_ethy_qp,
            max_mcast_grp: b.max_mcast_grp,
            max_mcast_qp_attach: b.max_mcast_qp_attach,
            max_total_mcast_qp_attach: b.max_total_mcast_qp_attach,
            max_ah: b.max_ah,
            max_fmr: b.max_fmr,
            max_map_per_fmr: b.max_map_per_fmr,
            max_srq: b.max_srq,
            max_srq_wr: b.max_srq_wr,
            max_srq_sge: b.max_srq_sge,
            max_pkeys: b.max_pkeys,
            local_ca_ack_delay: b.local_ca_ack_delay,
            phys_port_cnt: b.phys_port_cnt,
            ex_response_length: ex_len,
            // Fields past `ex_len` were never written by the kernel and are still zero.
            odp_caps: OdpCaps {
                general_caps: r.odp_caps.general_caps,
                rc_odp_caps: r.odp_caps.per_transport_caps.rc_odp_caps,
                uc_odp_caps: r.odp_caps.per_transport_caps.uc_odp_caps,
                ud_odp_caps: r.odp_caps.per_transport_caps.ud_odp_caps,
                xrc_odp_caps: r.xrc_odp_caps,
            },
            completion_timestamp_mask: r.timestamp_mask,
            hca_core_clock: r.hca_core_clock,
            device_cap_flags_ex: r.device_cap_flags_ex,
            rss_caps: RssCaps {
                supported_qpts: r.rss_caps.supported_qpts,
                max_rwq_indirection_tables: r.rss_caps.max_rwq_indirection_tables,
                max_rwq_indirection_table_size: r.rss_caps.max_rwq_indirection_table_size,
            },
            max_wq_type_rq: r.max_wq_type_rq,
            raw_packet_caps: r.raw_packet_caps,
            tm_caps: TmCaps {
                max_rndv_hdr_size: r.tm_caps.max_rndv_hdr_size,
                max_num_tags: r.tm_caps.max_num_tags,
                flags: r.tm_caps.flags,
                max_ops: r.tm_caps.max_ops,
                max_sge: r.tm_caps.max_sge,
            },
            cq_mod_caps: CqModerationCaps {
                max_cq_count: r.cq_moderation_caps.max_cq_moderation_count,
                max_cq_period: r.cq_moderation_caps.max_cq_moderation_period,
            },
            max_dm_size: r.max_dm_size,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------------

/// Bits of [`Context`]'s `no_ioctl` mask: ioctl methods the kernel said it lacks.
const M_QUERY_PORT: u32 = 1 << 0;
const M_GID_TABLE: u32 = 1 << 1;
const M_GID_ENTRY: u32 = 1 << 2;
/// CQ/QP create and the objects' destroy methods, each with a legacy write() command.
pub(crate) const M_CREATE_CQ: u32 = 1 << 3;
pub(crate) const M_CREATE_QP: u32 = 1 << 4;
pub(crate) const M_DESTROY_PD: u32 = 1 << 5;
pub(crate) const M_DESTROY_MR: u32 = 1 << 6;
pub(crate) const M_DESTROY_CQ: u32 = 1 << 7;
pub(crate) const M_DESTROY_QP: u32 = 1 << 8;
pub(crate) const M_DESTROY_SRQ: u32 = 1 << 9;
pub(crate) const M_DESTROY_AH: u32 = 1 << 10;
/// ENOTTY: no ioctl interface at all.
const M_ALL: u32 = M_QUERY_PORT
    | M_GID_TABLE
    | M_GID_ENTRY
    | M_CREATE_CQ
    | M_CREATE_QP
    | M_DESTROY_PD
    | M_DESTROY_MR
    | M_DESTROY_CQ
    | M_DESTROY_QP
    | M_DESTROY_SRQ
    | M_DESTROY_AH;
/// Not an ioctl: the extended write `QUERY_DEVICE` is missing (or the legacy ABI was asked
/// for), use the legacy one.
const M_EX_QUERY_DEVICE: u32 = 1 << 31;

/// What an ioctl with a fallback came to.
enum Outcome {
    Done,
    Fallback,
}

/// An open device: the uverbs command fd with its user context, and the async event fd.
/// Closing it (drop) destroys the context and everything created in it.
#[derive(Debug)]
pub struct Context {
    device: Device,
    cmd_fd: OwnedFd,
    async_fd: OwnedFd,
    num_comp_vectors: u32,
    core_support: u64,
    /// ioctl methods (and the extended `QUERY_DEVICE`) known to be missing (bits `M_*`), so
    /// later calls go straight to the fallback, as rdma-core remembers them.
    no_ioctl: AtomicU32,
    /// The provider's per-context driver, attached once by the provider that opened us.
    driver: OnceLock<Box<dyn Driver>>,
    /// Device limits used to check object sizes before the kernel sees them.
    limits: OnceLock<Option<Limits>>,
}

/// The device limits objects are checked against (from [`Context::query_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
}

impl Context {
    /// Opens `dev` without driver data (enough for rxe and siw).
    pub fn open(dev: &Device) -> io::Result<Context> {
        Self::open_with_udata(dev, &[], &mut [])
    }

    /// Opens `dev`, passing the provider's `alloc_ucontext` request (`uhw_in`) and receiving
    /// its response (`uhw_out`, filled by the kernel). With the write fallback both lengths
    /// must be multiples of 4.
    pub fn open_with_udata(dev: &Device, uhw_in: &[u8], uhw_out: &mut [u8]) -> io::Result<Context> {
        Self::open_impl(dev, uhw_in, uhw_out, false)
    }

    /// Opens `dev` speaking only what the oldest uverbs kernels have: write `GET_CONTEXT`,
    /// legacy write `QUERY_DEVICE` and `QUERY_PORT`, GIDs from sysfs, and the write commands
    /// that create CQs and QPs and destroy every object. It exists to test the
    /// fallback paths against a kernel that has the new ones.
    #[doc(hidden)]
    pub fn open_legacy_abi(dev: &Device) -> io::Result<Context> {
        Self::open_impl(dev, &[], &mut [], true)
    }

    fn open_impl(
        dev: &Device,
        uhw_in: &[u8],
        uhw_out: &mut [u8],
        legacy: bool,
    ) -> io::Result<Context> {
        let path = dev.dev_path();
        let cmd_fd = rustix::fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).map_err(|e| {
            let err = Error::os(format!("open {}", dev.name()), e).with_detail(path.display().to_string());
            match e {
                Errno::NOENT => err.with_detail(
                    "the char device does not exist (is devtmpfs mounted on /dev? is ib_uverbs loaded?)",
                ),
                Errno::ACCESS | Errno::PERM => {
                    err.with_detail("no permission (RDMA char devices are usually root or group rdma)")
                }
                _ => err,
            }
        })?;
        let op = || format!("open context on {}", dev.name());
        let driver_id = dev.driver_id().0;

        let mut num_comp_vectors = 0u32;
        let mut core_support = 0u64;
        let r = if legacy {
            Err(Errno::NOTTY)
        } else {
            let mut c = IoctlCall::new(object::DEVICE, dev_m::METHOD_GET_CONTEXT);
            c.ptr_out(
                dev_m::ATTR_GET_CONTEXT_NUM_COMP_VECTORS,
                &mut num_comp_vectors,
            );
            c.ptr_out(dev_m::ATTR_GET_CONTEXT_CORE_SUPPORT, &mut core_support);
            if !uhw_in.is_empty() {
                c.ptr_in_bytes(UVERBS_ATTR_UHW_IN, uhw_in);
            }
            if !uhw_out.is_empty() {
                c.ptr_out_bytes(UVERBS_ATTR_UHW_OUT, &mut *uhw_out);
            }
            c.call_checked(&cmd_fd, driver_id)
        };
        let (async_fd, no_ioctl) = match r {
            Ok(()) => {
                let mut c = IoctlCall::new(object::ASYNC_EVENT, async_event::METHOD_ALLOC);
                let i = c.fd_new(async_event::ATTR_ALLOC_FD_HANDLE);
                c.call_checked(&cmd_fd, driver_id).map_err(|e| {
                    Error::os(format!("create async event fd on {}", dev.name()), e)
                })?;
                // SAFETY: the kernel just installed this fd for us (FD-out attribute of a
                // successful ASYNC_EVENT/ALLOC) and nothing else owns it.
                (unsafe { owned(c.new_fd(i)) }, 0)
            }
            Err(e @ (Errno::NOTTY | Errno::PROTONOSUPPORT)) => {
                tracing::debug!("GET_CONTEXT ioctl: {e}; using the write() command");
                let mut resp = vec![0u8; size_of::<ib_uverbs_get_context_resp>() + uhw_out.len()];
                let req = ib_uverbs_get_context::default();
                write::cmd_legacy(&cmd_fd, nr::GET_CONTEXT, req.as_bytes(), uhw_in, &mut resp)
                    .map_err(|e| Error::os(op(), e).with_detail("write GET_CONTEXT"))?;
                let (core, drv) = resp.split_at(size_of::<ib_uverbs_get_context_resp>());
                let core = ib_uverbs_get_context_resp::read_from_bytes(core).expect("sized above");
                uhw_out.copy_from_slice(drv);
                num_comp_vectors = core.num_comp_vectors;
                // SAFETY: the legacy GET_CONTEXT installs a new async event fd and returns
                // its number; it is ours alone.
                let fd = unsafe { owned(core.async_fd as RawFd) };
                let no_ioctl = match (legacy, e) {
                    (true, _) => M_ALL | M_EX_QUERY_DEVICE,
                    (false, Errno::NOTTY) => M_ALL,
                    (false, _) => 0,
                };
                (fd, no_ioctl)
            }
            Err(e) => {
                return Err(Error::os(op(), e)
                    .with_detail(format!(
                        "driver {} ({})",
                        dev.driver_id(),
                        dev.driver_id().0
                    ))
                    .into())
            }
        };
        // Non-blocking, so that an event loop can read it to EAGAIN (see try_get_async_event);
        // get_async_event polls before reading.
        let fl = rustix::fs::fcntl_getfl(&async_fd)
            .map_err(|e| Error::os("get async event fd flags", e))?;
        rustix::fs::fcntl_setfl(&async_fd, fl | rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| Error::os("make the async event fd non-blocking", e))?;
        Ok(Context {
            device: dev.clone(),
            cmd_fd,
            async_fd,
            num_comp_vectors,
            core_support,
            no_ioctl: AtomicU32::new(no_ioctl),
            driver: OnceLock::new(),
            limits: OnceLock::new(),
        })
    }

    /// The device this context is open on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's name, e.g. "rxe0".
    pub fn name(&self) -> &str {
        self.device.name()
    }

    /// Completion vectors the device offers.
    pub fn num_comp_vectors(&self) -> u32 {
        self.num_comp_vectors
    }

    /// `IB_UVERBS_CORE_SUPPORT_*` bits (0 after the write fallback).
    pub fn core_support(&self) -> u64 {
        self.core_support
    }

    /// The async event fd (port and QP events are read from it), non-blocking. Readiness
    /// protocol: when it is readable, call [`Context::try_get_async_event`] until `None`;
    /// only then wait again.
    pub fn async_fd(&self) -> BorrowedFd<'_> {
        self.async_fd.as_fd()
    }

    /// Attaches the provider's driver (done once, by the provider that opened the context).
    ///
    /// # Safety
    /// `driver` must be the provider for this context's device (its kernel driver id and ABI
    /// version): its data path writes the rings and doorbells the kernel driver mapped and
    /// trusts their layout, so a driver for another device (rxe's data path on an mlx5
    /// context) would read and write memory by the wrong layout.
    pub unsafe fn set_driver(&self, driver: Box<dyn Driver>) -> io::Result<()> {
        self.driver.set(driver).map_err(|d| {
            Error::invalid(
                format!("attach provider to {}", self.name()),
                format!("a {} driver is attached already", d.name()),
            )
            .into()
        })
    }

    /// The provider's driver. A context opened without a provider (plain
    /// [`Context::open`]) can query the device but not create CQs, QPs, SRQs or AHs.
    pub fn driver(&self) -> io::Result<&dyn Driver> {
        self.driver.get().map(|d| d.as_ref()).ok_or_else(|| {
            Error::unsupported(
                format!("use {} for data-path objects", self.name()),
                format!(
                    "the context was opened without a provider for driver {}: open it with \
                     rverbs_provider::open",
                    self.driver_id()
                ),
            )
            .into()
        })
    }

    /// The device limits (queried once; `None` if the query failed).
    pub(crate) fn cached_limits(&self) -> Option<&Limits> {
        self.limits
            .get_or_init(|| {
                self.query_device().ok().map(|a| Limits {
                    max_qp_wr: a.max_qp_wr,
                    max_sge: a.max_sge,
                    max_cqe: a.max_cqe,
                    max_srq_wr: a.max_srq_wr,
                    max_srq_sge: a.max_srq_sge,
                })
            })
            .as_ref()
    }

    /// The device's max_cqe, when known.
    pub(crate) fn cached_max_cqe(&self) -> Option<u32> {
        self.cached_limits().map(|l| l.max_cqe)
    }

    /// The uverbs command fd (ioctl, write commands, mmap of provider queues).
    #[inline]
    pub fn cmd_fd(&self) -> BorrowedFd<'_> {
        self.cmd_fd.as_fd()
    }

    /// The device's driver id (sent in every ioctl header).
    pub(crate) fn driver_id(&self) -> DriverId {
        self.device.driver_id()
    }

    /// Issues `call` on this context's command fd.
    pub(crate) fn ioctl(&self, call: &mut IoctlCall) -> Result<(), Errno> {
        call.call_checked(self.cmd_fd(), self.driver_id().0)
    }

    /// Whether the ioctl method `method` (an `M_*` bit) is worth trying: false once the
    /// kernel said it lacks it (or the context was opened with [`Context::open_legacy_abi`]).
    pub(crate) fn use_ioctl(&self, method: u32) -> bool {
        // Relaxed: the mask is a cache of what the kernel answered; a stale read only costs
        // one more ioctl that fails the same way.
        self.no_ioctl.load(Ordering::Relaxed) & method == 0
    }

    /// Records what an ioctl for `method` failed with: ENOTTY (no ioctl interface at all)
    /// and EPROTONOSUPPORT (this method is missing) are remembered and return true, meaning
    /// "use the write() command"; any other error returns false.
    pub(crate) fn ioctl_missing(&self, method: u32, e: Errno) -> bool {
        // Relaxed: see `use_ioctl`.
        match e {
            Errno::NOTTY => {
                self.no_ioctl.fetch_or(M_ALL, Ordering::Relaxed);
                true
            }
            Errno::PROTONOSUPPORT => {
                self.no_ioctl.fetch_or(method, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// Runs `call` unless `method` is known to be missing. `Ok(true)`: the ioctl did it;
    /// `Ok(false)`: the method is missing (now remembered), use the write() command.
    pub(crate) fn try_ioctl(&self, method: u32, call: &mut IoctlCall) -> Result<bool, Errno> {
        if !self.use_ioctl(method) {
            return Ok(false);
        }
        match self.ioctl(call) {
            Ok(()) => Ok(true),
            Err(e) if self.ioctl_missing(method, e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`Context::try_ioctl`] for the queries below.
    fn ioctl_or_fallback(&self, method: u32, call: &mut IoctlCall) -> Result<Outcome, Errno> {
        Ok(if self.try_ioctl(method, call)? {
            Outcome::Done
        } else {
            Outcome::Fallback
        })
    }

    /// Device attributes: extended `QUERY_DEVICE`, or the legacy one on kernels without it.
    pub fn query_device(&self) -> io::Result<DeviceAttr> {
        let op = || format!("query device {}", self.device.name());
        let mut resp = ib_uverbs_ex_query_device_resp::new_zeroed();
        let req = ib_uverbs_ex_query_device::default();
        let core_len = size_of::<ib_uverbs_ex_query_device_resp>();
        // Relaxed: see `ioctl_or_fallback`.
        let ex = if self.no_ioctl.load(Ordering::Relaxed) & M_EX_QUERY_DEVICE != 0 {
            Err(Errno::NOTSUP)
        } else {
            write::cmd_extended(
                self.cmd_fd(),
                ex_nr::QUERY_DEVICE,
                req.as_bytes(),
                &[],
                resp.as_mut_bytes(),
                core_len,
            )
        };
        match ex {
            Ok(()) => {
                let len = resp.response_length;
                if (len as usize) < size_of::<ib_uverbs_query_device_resp>() {
                    return Err(Error::protocol(
                        op(),
                        format!("extended QUERY_DEVICE filled only {len} bytes"),
                    )
                    .into());
                }
                Ok(DeviceAttr::from_resp(self.driver_id(), &resp, len))
            }
            // As rdma-core: only "not supported" falls back; EINVAL would be our own bug.
            Err(Errno::NOTSUP | Errno::NOSYS) => {
                self.no_ioctl.fetch_or(M_EX_QUERY_DEVICE, Ordering::Relaxed);
                let mut base = ib_uverbs_query_device_resp::new_zeroed();
                write::cmd_legacy_simple(
                    self.cmd_fd(),
                    nr::QUERY_DEVICE,
                    &ib_uverbs_query_device::default(),
                    &mut base,
                )
                .map_err(|e| Error::os(op(), e))?;
                let mut resp = ib_uverbs_ex_query_device_resp::new_zeroed();
                resp.base = base;
                Ok(DeviceAttr::from_resp(self.driver_id(), &resp, 0))
            }
            Err(e) => Err(Error::os(op(), e).into()),
        }
    }

    fn bad_port(&self, port: u32, op: String) -> io::Error {
        let n = self.port_count();
        Error::invalid(
            op,
            format!(
                "{} has {n} port{} (valid: 1..={n}), there is no port {port}",
                self.device.name(),
                if n == 1 { "" } else { "s" }
            ),
        )
        .into()
    }

    /// Number of ports: from sysfs, or from the device query when sysfs did not say.
    fn port_count(&self) -> u32 {
        match self.device.port_count() {
            0 => self
                .query_device()
                .map_or(0, |a| u32::from(a.phys_port_cnt)),
            n => n,
        }
    }

    /// Attributes of port `port` (1-based).
    pub fn query_port(&self, port: u32) -> io::Result<PortAttr> {
        let op = || format!("query port {port} of {}", self.device.name());
        let known = self.device.port_count();
        if port == 0 || port > u32::from(u8::MAX) || (known > 0 && port > known) {
            return Err(self.bad_port(port, op()));
        }
        let mut resp = ib_uverbs_query_port_resp_ex::new_zeroed();
        let outcome = {
            let mut c = IoctlCall::new(object::DEVICE, dev_m::METHOD_QUERY_PORT);
            c.const_in(dev_m::ATTR_QUERY_PORT_PORT_NUM, u64::from(port));
            c.ptr_out(dev_m::ATTR_QUERY_PORT_RESP, &mut resp);
            self.ioctl_or_fallback(M_QUERY_PORT, &mut c)
        };
        let map = |e: Errno| -> io::Error {
            if e == Errno::INVAL && port > self.port_count() {
                self.bad_port(port, op())
            } else {
                Error::os(op(), e).into()
            }
        };
        match outcome.map_err(map)? {
            Outcome::Done => Ok(PortAttr::from_resp(&resp.legacy_resp, resp.port_cap_flags2)),
            Outcome::Fallback => {
                let mut r = ib_uverbs_query_port_resp::new_zeroed();
                let req = ib_uverbs_query_port {
                    port_num: port as u8,
                    ..Default::default()
                };
                write::cmd_legacy_simple(self.cmd_fd(), nr::QUERY_PORT, &req, &mut r)
                    .map_err(map)?;
                Ok(PortAttr::from_resp(&r, 0))
            }
        }
    }

    /// Every populated GID of every port (`ibv_query_gid_table`).
    pub fn query_gid_table(&self) -> io::Result<Vec<GidEntry>> {
        let op = || format!("query GID table of {}", self.device.name());
        let attr = self.query_device()?;
        let mut ports = Vec::new();
        for p in 1..=u32::from(attr.phys_port_cnt) {
            let pa = self.query_port(p)?;
            ports.push((p, pa.gid_tbl_len, pa.link_layer));
        }
        let total: usize = ports.iter().map(|p| p.1 as usize).sum();
        // An attribute carries at most 64 KiB; the kernel returns only populated entries,
        // so this is a limit on the populated ones.
        let max = total.clamp(1, usize::from(u16::MAX) / size_of::<ib_uverbs_gid_entry>());
        let mut entries = vec![ib_uverbs_gid_entry::default(); max];
        let mut n: u64 = 0;
        let outcome = {
            let mut c = IoctlCall::new(object::DEVICE, dev_m::METHOD_QUERY_GID_TABLE);
            c.const_in(
                dev_m::ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
                size_of::<ib_uverbs_gid_entry>() as u64,
            );
            c.ptr_out_bytes(
                dev_m::ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
                entries.as_mut_bytes(),
            );
            c.ptr_out(dev_m::ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, &mut n);
            self.ioctl_or_fallback(M_GID_TABLE, &mut c)
        };
        match outcome.map_err(|e| Error::os(op(), e))? {
            Outcome::Done => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                if n > entries.len() {
                    return Err(Error::protocol(
                        op(),
                        format!(
                            "kernel reported {n} entries for a buffer of {}",
                            entries.len()
                        ),
                    )
                    .into());
                }
                Ok(entries[..n].iter().map(entry_from_abi).collect())
            }
            Outcome::Fallback => sysfs_gid_table(self.device.ibdev_path(), &ports),
        }
    }

    /// GID `index` of port `port` (`ibv_query_gid_ex`).
    pub fn query_gid(&self, port: u32, index: u32) -> io::Result<GidEntry> {
        let op = || format!("query GID {index} of {} port {port}", self.device.name());
        let known = self.device.port_count();
        if port == 0 || (known > 0 && port > known) {
            return Err(self.bad_port(port, op()));
        }
        let mut e = ib_uverbs_gid_entry::default();
        let flags: u32 = 0;
        let outcome = {
            let mut c = IoctlCall::new(object::DEVICE, dev_m::METHOD_QUERY_GID_ENTRY);
            c.const_in(dev_m::ATTR_QUERY_GID_ENTRY_PORT, u64::from(port));
            c.const_in(dev_m::ATTR_QUERY_GID_ENTRY_GID_INDEX, u64::from(index));
            c.ptr_in(dev_m::ATTR_QUERY_GID_ENTRY_FLAGS, &flags);
            c.ptr_out(dev_m::ATTR_QUERY_GID_ENTRY_RESP_ENTRY, &mut e);
            self.ioctl_or_fallback(M_GID_ENTRY, &mut c)
        };
        match outcome {
            Ok(Outcome::Done) => Ok(entry_from_abi(&e)),
            Ok(Outcome::Fallback) => {
                let pa = self.query_port(port)?;
                sysfs_gid_entry(self.device.ibdev_path(), port, index, pa.link_layer)?
                    .ok_or_else(|| empty_gid(op(), index, pa.gid_tbl_len))
            }
            // The kernel says ENODATA for an empty slot and EINVAL past the table's end.
            Err(errno @ (Errno::NODATA | Errno::INVAL)) => {
                let len = self.query_port(port).map_or(0, |p| p.gid_tbl_len);
                if errno == Errno::NODATA || index >= len {
                    Err(empty_gid(op(), index, len))
                } else {
                    Err(Error::os(op(), errno).into())
                }
            }
            Err(err) => Err(Error::os(op(), err).into()),
        }
    }
}

fn empty_gid(op: String, index: u32, tbl_len: u32) -> io::Error {
    let detail = if index >= tbl_len {
        format!("index {index} is past the table's {tbl_len} entries")
    } else {
        format!("entry {index} is empty")
    };
    Error::not_found(op, detail).into()
}

fn entry_from_abi(e: &ib_uverbs_gid_entry) -> GidEntry {
    let mut gid = [0u8; 16];
    gid.copy_from_slice(e.gid.as_bytes());
    GidEntry {
        index: e.gid_index,
        port: e.port_num,
        gid: Gid(gid),
        gid_type: GidType(e.gid_type),
        ndev_ifindex: e.netdev_ifindex,
    }
}

/// Takes ownership of an fd the kernel returned.
///
/// # Safety
/// `fd` must be open and owned by nobody else.
unsafe fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: guaranteed by the caller.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// One GID from sysfs (`ports/P/gids/I`, `gid_attrs/types/I`, `gid_attrs/ndevs/I`); `None`
/// for an empty slot.
pub fn sysfs_gid_entry(
    ibdev: &Path,
    port: u32,
    index: u32,
    link_layer: LinkLayer,
) -> io::Result<Option<GidEntry>> {
    let pdir = ibdev.join(format!("ports/{port}"));
    let gpath = pdir.join(format!("gids/{index}"));
    let text = read_str(&gpath).map_err(|e| {
        Error::not_found(
            format!("read GID {index} of port {port}"),
            format!("{}: {e}", gpath.display()),
        )
    })?;
    let gid = Gid::parse(&text).ok_or_else(|| {
        Error::protocol(
            format!("read GID {index} of port {port}"),
            format!("{}: not a GID: {text:?}", gpath.display()),
        )
    })?;
    if gid.is_zero() {
        return Ok(None);
    }
    // The kernel shows "IB/RoCE v1" for both IB and RoCE v1; the link layer decides.
    let gid_type = match read_str(&pdir.join(format!("gid_attrs/types/{index}"))).as_deref() {
        Ok("RoCE v2") => GidType::ROCE_V2,
        _ if link_layer == LinkLayer::ETHERNET => GidType::ROCE_V1,
        _ => GidType::IB,
    };
    let ndev_ifindex = read_str(&pdir.join(format!("gid_attrs/ndevs/{index}")))
        .ok()
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .and_then(|ndev| {
            // <root>/class/infiniband/<dev> -> <root>/class/net/<ndev>/ifindex
            let net = ibdev
                .parent()?
                .parent()?
                .join("net")
                .join(ndev)
                .join("ifindex");
            read_str(&net).ok()?.trim().parse().ok()
        })
        .unwrap_or(0);
    Ok(Some(GidEntry {
        index,
        port,
        gid,
        gid_type,
        ndev_ifindex,
    }))
}

/// The populated GIDs of `ports` (`(port, gid_tbl_len, link_layer)`) from sysfs.
pub fn sysfs_gid_table(ibdev: &Path, ports: &[(u32, u32, LinkLayer)]) -> io::Result<Vec<GidEntry>> {
    let mut out = Vec::new();
    for &(port, len, ll) in ports {
        let gids = ibdev.join(format!("ports/{port}/gids"));
        if fs::metadata(&gids).is_err() {
            return Err(Error::not_found(
                "read GID table from sysfs",
                format!("{} does not exist", gids.display()),
            )
            .into());
        }
        for i in 0..len {
            if let Some(e) = sysfs_gid_entry(ibdev, port, i, ll)? {
                out.push(e);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Gid {
        Gid(s.parse::<std::net::Ipv6Addr>().unwrap().octets())
    }

    #[test]
    fn gid_text_matches_inet_ntop() {
        // Expected strings are what glibc 2.36's inet_ntop printed for these addresses.
        assert_eq!(g("::ffff:10.10.0.1").to_string(), "::ffff:10.10.0.1");
        assert_eq!(
            g("fe80::250:b6ff:fe41:2a10").to_string(),
            "fe80::250:b6ff:fe41:2a10"
        );
        assert_eq!(g("::").to_string(), "::");
        assert_eq!(g("::1").to_string(), "::1");
        assert_eq!(g("::10.1.2.3").to_string(), "::10.1.2.3");
        assert_eq!(g("1:0:0:2::3").to_string(), "1:0:0:2::3");
        assert_eq!(g("::0.0.0.2").to_string(), "::2");
        assert_eq!(g("::ffff:0:0").to_string(), "::ffff:0.0.0.0");
        assert_eq!(g("::1:0:0:0").to_string(), "::1:0:0:0");
        assert_eq!(g("1:0:2:3:4:5:6:7").to_string(), "1:0:2:3:4:5:6:7");
        assert_eq!(g("1:2:3:4:5:6:7:0").to_string(), "1:2:3:4:5:6:7:0");
        assert_eq!(g("1:2:3:4:5:6::").to_string(), "1:2:3:4:5:6::");
        assert_eq!(g("2001:db8::").to_string(), "2001:db8::");
    }

    #[test]
    fn gid_parses_sysfs_form() {
        let x = Gid::parse("fe80:0000:0000:0000:0250:b6ff:fe41:2a10\n").unwrap();
        assert_eq!(x.to_string(), "fe80::250:b6ff:fe41:2a10");
        assert!(Gid::parse("0000:0000:0000:0000:0000:0000:0000:0000")
            .unwrap()
            .is_zero());
        assert!(Gid::parse("garbage").is_none());
    }

    #[test]
    fn gid_table_from_sysfs() {
        use crate::device::fake::{Tree, RXE0};
        let t = Tree::new(RXE0);
        let ibdev = t.path().join("class/infiniband/rxe0");
        // The fixture has slots 0..3; slot 2 is all zero (skipped).
        let table = sysfs_gid_table(&ibdev, &[(1, 3, LinkLayer::ETHERNET)]).unwrap();
        assert_eq!(table.len(), 2);
        let e = table[1];
        assert_eq!((e.index, e.port), (1, 1));
        assert_eq!(e.gid.to_string(), "::ffff:10.10.0.1");
        assert_eq!(e.gid_type, GidType::ROCE_V2);
        assert_eq!(e.ndev_ifindex, 3);
        assert_eq!(table[0].gid.to_string(), "fe80::5054:ff:fe12:3456");
        assert!(sysfs_gid_entry(&ibdev, 1, 2, LinkLayer::ETHERNET)
            .unwrap()
            .is_none());
        let err = sysfs_gid_table(&ibdev, &[(1, 4, LinkLayer::ETHERNET)]).unwrap_err();
        assert!(err.to_string().contains("ports/1/gids/3"), "{err}");
        let err = sysfs_gid_table(&ibdev, &[(2, 3, LinkLayer::ETHERNET)]).unwrap_err();
        assert!(
            err.to_string().contains("ports/2/gids does not exist"),
            "{err}"
        );
    }

    #[test]
    fn mtu_and_names() {
        assert_eq!(Mtu::MTU_1024.bytes(), Some(1024));
        assert_eq!(Mtu::MTU_4096.bytes(), Some(4096));
        assert_eq!(Mtu(9).bytes(), None);
        assert_eq!(PortState::ACTIVE.to_string(), "PORT_ACTIVE");
        assert_eq!(LinkLayer::ETHERNET.to_string(), "Ethernet");
        assert_eq!(GidType::ROCE_V2.to_string(), "RoCE v2");
    }

    #[test]
    fn fw_ver_like_the_providers() {
        let raw = (16u64 << 32) | (35 << 16) | 2000;
        assert_eq!(format_fw_ver(DriverId::MLX5, raw), "16.35.2000");
        assert_eq!(format_fw_ver(DriverId::MLX5, (1 << 32) | 7), "1.0.0007");
        assert_eq!(format_fw_ver(DriverId::RXE, 0), "0.0.0");
    }

    #[test]
    fn device_attr_converts_guids_and_ex_fields() {
        let mut r = ib_uverbs_ex_query_device_resp::new_zeroed();
        r.base.node_guid = 0x0250_b6ff_fe41_2a10u64.to_be();
        r.base.phys_port_cnt = 1;
        r.base.atomic_cap = 1;
        r.hca_core_clock = 156_250;
        r.odp_caps.per_transport_caps.rc_odp_caps = 3;
        let a = DeviceAttr::from_resp(DriverId::RXE, &r, 232);
        assert_eq!(a.node_guid, 0x0250_b6ff_fe41_2a10);
        assert_eq!(a.atomic_cap, AtomicCap::HCA);
        assert_eq!((a.hca_core_clock, a.odp_caps.rc_odp_caps), (156_250, 3));
        assert_eq!(a.ex_response_length, 232);
    }
}
