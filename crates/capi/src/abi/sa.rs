//! `<infiniband/sa.h>`: path records.

use super::*;

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_sa_path_rec {
    #[allow(missing_docs)]
    pub dgid: ibv_gid,
    #[allow(missing_docs)]
    pub sgid: ibv_gid,
    /// Big-endian.
    pub dlid: u16,
    /// Big-endian.
    pub slid: u16,
    #[allow(missing_docs)]
    pub raw_traffic: c_int,
    /// Big-endian.
    pub flow_label: u32,
    #[allow(missing_docs)]
    pub hop_limit: u8,
    #[allow(missing_docs)]
    pub traffic_class: u8,
    #[allow(missing_docs)]
    pub reversible: c_int,
    #[allow(missing_docs)]
    pub numb_path: u8,
    /// Big-endian.
    pub pkey: u16,
    #[allow(missing_docs)]
    pub sl: u8,
    #[allow(missing_docs)]
    pub mtu_selector: u8,
    #[allow(missing_docs)]
    pub mtu: u8,
    #[allow(missing_docs)]
    pub rate_selector: u8,
    #[allow(missing_docs)]
    pub rate: u8,
    #[allow(missing_docs)]
    pub packet_life_time_selector: u8,
    #[allow(missing_docs)]
    pub packet_life_time: u8,
    #[allow(missing_docs)]
    pub preference: u8,
}
