//! The address vector: where a UD send or a connected QP's path goes.

use std::net::Ipv6Addr;

/// The global route header of an address vector (mandatory on RoCE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID (for RoCE v2 over IPv4: `::ffff:a.b.c.d`).
    pub dgid: [u8; 16],
    /// IPv6 flow label (20 bits) for the GRH.
    pub flow_label: u32,
    /// Index of our own GID to send from.
    pub sgid_index: u8,
    /// Hop limit (IPv6 TTL) of the GRH.
    pub hop_limit: u8,
    /// Traffic class (DSCP and ECN bits) of the GRH.
    pub traffic_class: u8,
}

impl GlobalRoute {
    internal! {
    /// The destination GID as an IPv6 address.
    pub fn dgid_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dgid)
    }
    }
}

/// An address vector (`ibv_ah_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination LID (InfiniBand; 0 on RoCE).
    pub dlid: u16,
    /// Service level (InfiniBand; on RoCE the kernel maps it to a VLAN priority).
    pub sl: u8,
    /// Low bits of the source LID (InfiniBand LMC paths).
    pub src_path_bits: u8,
    /// Static rate limit (`ib_rate`; 0 = port rate).
    pub static_rate: u8,
    /// Local port (1-based) the packets leave from.
    pub port_num: u8,
    /// Global route header; `Some` is required on RoCE.
    pub grh: Option<GlobalRoute>,
}
