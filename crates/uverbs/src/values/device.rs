//! Which kernel driver serves a device: [`DriverId`]; what its on-demand paging covers
//! ([`OdpGeneralCaps`], [`OdpTransportCaps`]).

// The driver ids are for the crates of this workspace (provider selection): without the
// feature `internals` some are named nowhere.
#![cfg_attr(not(feature = "internals"), allow(dead_code))]

use crate::newtype::{flag_set, raw_newtype};

raw_newtype! {
    /// `enum rdma_driver_id` (`rdma/ib_user_ioctl_verbs.h`): which kernel driver serves a
    /// device. Sent in every `RDMA_VERBS_IOCTL` header.
    DriverId(u32) {
        UNKNOWN = 0, "unknown";
        MLX5 = 1, "mlx5";
        MLX4 = 2, "mlx4";
        CXGB3 = 3, "cxgb3";
        CXGB4 = 4, "cxgb4";
        MTHCA = 5, "mthca";
        BNXT_RE = 6, "bnxt_re";
        OCRDMA = 7, "ocrdma";
        NES = 8, "nes";
        /// Also `RDMA_DRIVER_IRDMA`.
        I40IW = 9, "irdma";
        VMW_PVRDMA = 10, "vmw_pvrdma";
        QEDR = 11, "qedr";
        HNS = 12, "hns";
        USNIC = 13, "usnic";
        RXE = 14, "rxe";
        HFI1 = 15, "hfi1";
        QIB = 16, "qib";
        EFA = 17, "efa";
        SIW = 18, "siw";
        ERDMA = 19, "erdma";
    }
}

impl DriverId {
    /// `RDMA_DRIVER_IRDMA` (= `RDMA_DRIVER_I40IW`).
    pub const IRDMA: Self = Self::I40IW;

    /// The driver a device name suggests (the kernel drivers' default names), for when
    /// netlink cannot tell. `UNKNOWN` when the name says nothing.
    pub fn from_device_name(name: &str) -> Self {
        const PREFIXES: &[(&str, DriverId)] = &[
            ("rxe", DriverId::RXE),
            ("siw", DriverId::SIW),
            ("mlx5_", DriverId::MLX5),
            ("mlx4_", DriverId::MLX4),
            ("efa_", DriverId::EFA),
            ("bnxt_re", DriverId::BNXT_RE),
            ("irdma", DriverId::IRDMA),
            ("i40iw", DriverId::I40IW),
            ("hns_", DriverId::HNS),
            ("hns", DriverId::HNS),
            ("qedr", DriverId::QEDR),
            ("erdma_", DriverId::ERDMA),
            ("vmw_pvrdma", DriverId::VMW_PVRDMA),
            ("cxgb4_", DriverId::CXGB4),
            ("mthca", DriverId::MTHCA),
            ("ocrdma", DriverId::OCRDMA),
            ("usnic_", DriverId::USNIC),
            ("hfi1_", DriverId::HFI1),
            ("qib", DriverId::QIB),
        ];
        PREFIXES
            .iter()
            .find(|(p, _)| name.starts_with(p))
            .map_or(DriverId::UNKNOWN, |&(_, d)| d)
    }
}

flag_set! {
    /// `odp_caps.general_caps` (`IBV_ODP_SUPPORT*`, `enum ib_odp_general_cap_bits`): whether
    /// the device pages memory on demand at all, and whether it takes implicit regions.
    pub struct OdpGeneralCaps: u64 {
        /// `IBV_ODP_SUPPORT`: regions registered with `AccessFlags::ON_DEMAND`.
        const SUPPORT = 1 << 0;
        /// `IBV_ODP_SUPPORT_IMPLICIT`: one region over the whole address space (address 0,
        /// length `u64::MAX`; rverbs registers it only through the `unsafe`
        /// `mr::register_raw`).
        const SUPPORT_IMPLICIT = 1 << 1;
    }
}

flag_set! {
    /// Per-transport ODP capabilities (`enum ibv_odp_transport_cap_bits`): the operations
    /// that may touch on-demand-paged memory on a QP of that transport.
    pub struct OdpTransportCaps: u32 {
        /// `IBV_ODP_SUPPORT_SEND`: a SEND's source.
        const SEND = 1 << 0;
        /// `IBV_ODP_SUPPORT_RECV`: a receive's buffer.
        const RECV = 1 << 1;
        /// `IBV_ODP_SUPPORT_WRITE`: the target of a peer's RDMA WRITE.
        const WRITE = 1 << 2;
        /// `IBV_ODP_SUPPORT_READ`: the target of a peer's RDMA READ.
        const READ = 1 << 3;
        /// `IBV_ODP_SUPPORT_ATOMIC`: the target of a peer's atomic.
        const ATOMIC = 1 << 4;
        /// `IBV_ODP_SUPPORT_SRQ_RECV`: an SRQ receive's buffer.
        const SRQ_RECV = 1 << 5;
        /// `IBV_ODP_SUPPORT_FLUSH`: the target of a peer's FLUSH.
        const FLUSH = 1 << 6;
        /// `IBV_ODP_SUPPORT_ATOMIC_WRITE`: the target of a peer's ATOMIC_WRITE.
        const ATOMIC_WRITE = 1 << 7;
    }
}
