//! UD address vectors: the datagram segment's AV built from an AH's attributes, and the
//! context's table of them (what a UD send's `ah_num` names).

#![allow(unsafe_code)]

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use rverbs_uverbs::ah::AhAttr;

/// A UD address vector as the send WQE's datagram segment carries it (48 bytes).
pub type Av = [u8; AV_SIZE];

/// libmlx5's `ib_to_mlx5_rate_table`: `enum ibv_rate` → the device's rate code (0 =
/// unlimited).
pub(super) const RATE: [u8; 23] = [
    0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11, 13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0,
];

/// The lowest UDP source port of RoCE v2 (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`): ports are
/// chosen in `0xC000..=0xFFFF`.
pub const ROCE_V2_SPORT_MIN: u16 = 0xc000;

/// The RoCE v2 UDP source port of an AH (libmlx5 `mlx5_ah_set_udp_sport`): from a non-zero
/// flow label, its low 14 bits XOR its high 6 bits, in the valid range
/// (`ibv_flow_label_to_udp_sport`); with flow label 0 a random port of that range (it spreads
/// flows over the fabric's paths; nothing on the receiving side depends on it).
pub fn roce_v2_udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & 0xfffff;
    if fl != 0 {
        let low = (fl & 0x3fff) ^ ((fl & 0xfc000) >> 14);
        return low as u16 | ROCE_V2_SPORT_MIN;
    }
    use std::hash::{BuildHasher, Hasher};
    // A per-process random key (std's hasher seed) hashing a counter: random enough to
    // spread flows, no dependency.
    static N: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(N.fetch_add(1, Ordering::Relaxed));
    (h.finish() % (0x1_0000 - u64::from(ROCE_V2_SPORT_MIN))) as u16 + ROCE_V2_SPORT_MIN
}

/// Builds the address vector of an AH (libmlx5 `mlx5_create_ah`); `dmac` is the RoCE
/// destination MAC the kernel's create-AH response gave (`None` on InfiniBand); `roce_v2`:
/// the source GID is a RoCE v2 one, so the AV carries a UDP source port where InfiniBand has
/// the destination LID.
pub fn build_av(attr: &AhAttr, dmac: Option<[u8; 6]>, roce_v2: bool) -> Av {
    let mut av = [0u8; AV_SIZE];
    let rate = RATE.get(attr.static_rate as usize).copied().unwrap_or(0);
    let grh_bit;
    if let Some(mac) = dmac {
        grh_bit = 0;
        if roce_v2 {
            let fl = attr.grh.map_or(0, |g| g.flow_label);
            av[14..16].copy_from_slice(&roce_v2_udp_sport(fl).to_be_bytes());
        }
        av[12] = (rate << 4) | ((attr.sl & 7) << 1);
        av[20..26].copy_from_slice(&mac);
    } else {
        av[13] = attr.src_path_bits & 0x7f;
        av[14..16].copy_from_slice(&attr.dlid.to_be_bytes());
        grh_bit = 1u32;
        av[12] = (rate << 4) | (attr.sl & 0xf);
    }
    if let Some(g) = attr.grh {
        av[26] = g.traffic_class;
        av[27] = g.hop_limit;
        let w = (grh_bit << 30) | (u32::from(g.sgid_index) << 20) | (g.flow_label & 0xfffff);
        av[28..32].copy_from_slice(&w.to_be_bytes());
        av[32..48].copy_from_slice(&g.dgid);
    }
    av
}

/// Address vectors of a context's AHs, indexed by the number the driver gave each AH.
#[derive(Debug, Default)]
pub struct AhTable {
    pub(super) avs: RwLock<Vec<Av>>,
}

impl AhTable {
    /// Stores `av`; returns its number.
    pub fn insert(&self, av: Av) -> u32 {
        let mut t = self.avs.write().unwrap_or_else(|e| e.into_inner());
        t.push(av);
        (t.len() - 1) as u32
    }

    pub(super) fn get(&self, n: u32) -> Option<Av> {
        let t = self.avs.read().unwrap_or_else(|e| e.into_inner());
        t.get(n as usize).copied()
    }
}
