//! Device attributes: [`Context::query_device`] and what it answers ([`DeviceAttr`] with its
//! capability groups), and `format_fw_ver`.

use std::io;
use std::sync::atomic::Ordering;

use rustix::io::Errno;
use zerocopy::{FromZeros, IntoBytes};

use crate::context::{Context, M_EX_QUERY_DEVICE};
use crate::device::DriverId;
use crate::error::Error;
use crate::kernel::abi::cmd::{ex_nr, nr};
use crate::kernel::abi::device::{
    ib_uverbs_ex_query_device, ib_uverbs_ex_query_device_resp, ib_uverbs_query_device,
    ib_uverbs_query_device_resp,
};
use crate::kernel::write;
use crate::newtype::raw_newtype;

raw_newtype! {
    /// `enum ib_atomic_cap` (`ibv_atomic_cap`).
    AtomicCap(u32) {
        NONE = 0, "ATOMIC_NONE";
        HCA = 1, "ATOMIC_HCA";
        GLOB = 2, "ATOMIC_GLOB";
    }
}

pub use crate::values::{OdpGeneralCaps, OdpTransportCaps};

/// On-demand paging capabilities: `ibv_odp_caps` plus `xrc_odp_caps` of the extended device
/// query (all empty where the kernel's response stops before them, or the device has none:
/// rxe reports them from about Linux 6.15 on, built with `CONFIG_INFINIBAND_ON_DEMAND_PAGING`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OdpCaps {
    /// On-demand paging at all, implicit regions.
    pub general_caps: OdpGeneralCaps,
    /// Operations that may use ODP memory on RC QPs.
    pub rc_odp_caps: OdpTransportCaps,
    /// As `rc_odp_caps`, for UC QPs.
    pub uc_odp_caps: OdpTransportCaps,
    /// As `rc_odp_caps`, for UD QPs.
    pub ud_odp_caps: OdpTransportCaps,
    /// As `rc_odp_caps`, for XRC QPs.
    pub xrc_odp_caps: OdpTransportCaps,
}

internal! {
/// `ibv_rss_caps` as the kernel reports it (the hash fields are mlx5 driver data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RssCaps {
    /// QP types that support RSS (bit per `ib_qp_type`).
    pub supported_qpts: u32,
    /// Most receive WQ indirection tables.
    pub max_rwq_indirection_tables: u32,
    /// Most entries in one indirection table.
    pub max_rwq_indirection_table_size: u32,
}
}

internal! {
/// `ibv_tm_caps` (tag matching).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TmCaps {
    /// Largest rendezvous header tag matching accepts, in bytes.
    pub max_rndv_hdr_size: u32,
    /// Most tags in the tag list.
    pub max_num_tags: u32,
    /// `IBV_TM_CAP_*` bits.
    pub flags: u32,
    /// Most outstanding tag-list operations.
    pub max_ops: u32,
    /// Most SGEs in a tagged buffer.
    pub max_sge: u32,
}
}

internal! {
/// `ibv_cq_moderation_caps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqModerationCaps {
    /// Most completions that moderation may coalesce into one event.
    pub max_cq_count: u16,
    /// Microseconds.
    pub max_cq_period: u16,
}
}

some_internal_fields! {
/// Device attributes: `ibv_device_attr` and the extended fields of `ibv_device_attr_ex` that
/// the kernel reports (driver-specific ones such as mlx5's TSO caps are not here).
///
/// Non-exhaustive: the kernel adds fields. Outside this crate start from
/// `DeviceAttr::default()` (all zero) and set the fields you need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version as the driver's rdma-core provider formats it.
    pub fw_ver: String,
    /// The kernel's raw 64-bit firmware version.
    pub(crate) fw_ver_raw: u64,
    /// Host-order GUIDs.
    pub node_guid: u64,
    /// System image GUID (host order): shared by the ports of one system.
    pub sys_image_guid: u64,
    /// Largest memory region, in bytes.
    pub max_mr_size: u64,
    /// Page sizes the device supports (bit n = 2^n bytes).
    pub page_size_cap: u64,
    /// IEEE vendor OUI.
    pub vendor_id: u32,
    /// The vendor's part number.
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Most outstanding work requests per queue of a QP.
    pub max_qp_wr: u32,
    /// `IBV_DEVICE_*` capability bits (the low 32 bits of the kernel's flags).
    pub device_cap_flags: u32,
    /// Most SGEs per send or receive work request.
    pub max_sge: u32,
    /// Most SGEs per RDMA READ work request.
    pub max_sge_rd: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most memory regions.
    pub max_mr: u32,
    /// Most protection domains.
    pub max_pd: u32,
    /// Most outstanding RDMA READ/atomic requests a QP can be the target of.
    pub max_qp_rd_atom: u32,
    /// As `max_qp_rd_atom`, for EE contexts (unused by Linux drivers).
    pub(crate) max_ee_rd_atom: u32,
    /// Most outstanding RDMA READ/atomic requests the device can be the target of, over all QPs.
    pub max_res_rd_atom: u32,
    /// Most outstanding RDMA READ/atomic requests a QP can initiate.
    pub max_qp_init_rd_atom: u32,
    /// As `max_qp_init_rd_atom`, for EE contexts (unused by Linux drivers).
    pub(crate) max_ee_init_rd_atom: u32,
    /// How atomics are guaranteed (none, within the HCA, globally).
    pub atomic_cap: AtomicCap,
    /// Most EE contexts (reliable datagram; 0 on Linux drivers).
    pub(crate) max_ee: u32,
    /// Most RD domains (0 on Linux drivers).
    pub(crate) max_rdd: u32,
    /// Most memory windows.
    pub max_mw: u32,
    /// Most raw IPv6 QPs.
    pub(crate) max_raw_ipv6_qp: u32,
    /// Most raw Ethertype QPs.
    pub(crate) max_raw_ethy_qp: u32,
    /// Most multicast groups.
    pub max_mcast_grp: u32,
    /// Most QPs attached to one multicast group.
    pub max_mcast_qp_attach: u32,
    /// Most QP attachments to multicast groups in total.
    pub max_total_mcast_qp_attach: u32,
    /// Most address handles.
    pub max_ah: u32,
    /// Most fast memory regions (a retired feature; 0 on current kernels).
    pub(crate) max_fmr: u32,
    /// Most remaps per FMR before it must be unmapped.
    pub(crate) max_map_per_fmr: u32,
    /// Most shared receive queues.
    pub max_srq: u32,
    /// Most work requests per SRQ.
    pub max_srq_wr: u32,
    /// Most SGEs per SRQ work request.
    pub max_srq_sge: u32,
    /// Entries of each port's P_Key table.
    pub max_pkeys: u16,
    /// Local CA ACK delay (4.096 µs × 2^value).
    pub local_ca_ack_delay: u8,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Bytes of the extended response the kernel filled; 0 when only the legacy query
    /// worked (then every field below is 0).
    pub(crate) ex_response_length: u32,
    /// On-demand paging capabilities.
    pub odp_caps: OdpCaps,
    /// Bits of the completion timestamp the device fills (0: no timestamps).
    pub(crate) completion_timestamp_mask: u64,
    /// kHz.
    pub(crate) hca_core_clock: u64,
    /// All `IB_DEVICE_*` capability bits (64-bit).
    pub device_cap_flags_ex: u64,
    /// Receive-side scaling capabilities.
    pub(crate) rss_caps: RssCaps,
    /// Most receive work queues (WQ type RQ).
    pub(crate) max_wq_type_rq: u32,
    /// `IBV_RAW_PACKET_CAP_*` bits.
    pub(crate) raw_packet_caps: u32,
    /// Tag matching capabilities.
    pub(crate) tm_caps: TmCaps,
    /// CQ moderation limits.
    pub(crate) cq_mod_caps: CqModerationCaps,
    /// Largest device memory allocation, in bytes.
    pub(crate) max_dm_size: u64,
}
}

internal! {
/// The firmware version text rdma-core's provider for `driver` prints for `raw`
/// (major.minor.sub_minor from bits 47:32, 31:16, 15:0; mlx5 pads sub_minor to 4 digits,
/// mlx4 to 3; EFA prints the first four bytes of the field, dot-separated).
pub fn format_fw_ver(driver: DriverId, raw: u64) -> String {
    let (major, minor, sub) = ((raw >> 32) & 0xffff, (raw >> 16) & 0xffff, raw & 0xffff);
    match driver {
        DriverId::MLX5 => format!("{major}.{minor}.{sub:04}"),
        DriverId::MLX4 => format!("{major}.{minor}.{sub:03}"),
        // libefa's `efa_query_device_ex`: the first four bytes of the field, in memory order.
        DriverId::EFA => {
            let b = raw.to_ne_bytes();
            format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3])
        }
        _ => format!("{major}.{minor}.{sub}"),
    }
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
                general_caps: OdpGeneralCaps::from_bits_retain(r.odp_caps.general_caps),
                rc_odp_caps: OdpTransportCaps::from_bits_retain(
                    r.odp_caps.per_transport_caps.rc_odp_caps,
                ),
                uc_odp_caps: OdpTransportCaps::from_bits_retain(
                    r.odp_caps.per_transport_caps.uc_odp_caps,
                ),
                ud_odp_caps: OdpTransportCaps::from_bits_retain(
                    r.odp_caps.per_transport_caps.ud_odp_caps,
                ),
                xrc_odp_caps: OdpTransportCaps::from_bits_retain(r.xrc_odp_caps),
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

impl Context {
    /// Device attributes: extended `QUERY_DEVICE`, or the legacy one on kernels without it.
    pub fn query_device(&self) -> io::Result<DeviceAttr> {
        let op = || format!("query device {}", self.device().name());
        let mut resp = ib_uverbs_ex_query_device_resp::new_zeroed();
        let req = ib_uverbs_ex_query_device::default();
        let core_len = size_of::<ib_uverbs_ex_query_device_resp>();
        // Relaxed: see `Context::ioctl_or_write`.
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fw_ver_like_the_providers() {
        let raw = (16u64 << 32) | (35 << 16) | 2000;
        assert_eq!(format_fw_ver(DriverId::MLX5, raw), "16.35.2000");
        assert_eq!(format_fw_ver(DriverId::MLX5, (1 << 32) | 7), "1.0.0007");
        assert_eq!(format_fw_ver(DriverId::RXE, 0), "0.0.0");
        let efa = u64::from_ne_bytes([1, 2, 3, 44, 9, 9, 9, 9]);
        assert_eq!(format_fw_ver(DriverId::EFA, efa), "1.2.3.44");
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
        assert_eq!(
            (a.hca_core_clock, a.odp_caps.rc_odp_caps),
            (
                156_250,
                OdpTransportCaps::SEND.union(OdpTransportCaps::RECV)
            )
        );
        assert_eq!(a.ex_response_length, 232);
    }
}
