//! Address vectors and address handles (for UD).

use std::fmt;
use std::net::Ipv6Addr;
use std::sync::Arc;

use zerocopy::{FromBytes, IntoBytes};

use crate::context::{Context, Method};
use crate::error::{Error, Result};
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::obj::ah;
use crate::kernel::abi::obj::ib_uverbs_destroy_ah;
use crate::kernel::abi::obj::{
    ib_uverbs_ah_attr, ib_uverbs_create_ah, ib_uverbs_create_ah_resp, ib_uverbs_global_route,
    ib_uverbs_qp_dest,
};
use crate::kernel::write;
use crate::pd::Pd;
use crate::wc::WorkCompletion;

pub use crate::values::{AhAttr, GlobalRoute};

impl AhAttr {
    /// A RoCE address vector: port, destination GID, our GID index.
    pub fn roce(port_num: u8, dgid: [u8; 16], sgid_index: u8) -> Self {
        Self {
            port_num,
            grh: Some(GlobalRoute {
                dgid,
                sgid_index,
                hop_limit: 64,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) fn to_qp_dest(self) -> ib_uverbs_qp_dest {
        let g = self.grh.unwrap_or_default();
        ib_uverbs_qp_dest {
            dgid: g.dgid,
            flow_label: g.flow_label,
            dlid: self.dlid,
            reserved: 0,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: u8::from(self.grh.is_some()),
            port_num: self.port_num,
        }
    }

    pub(crate) fn from_qp_dest(d: &ib_uverbs_qp_dest) -> Self {
        Self {
            dlid: d.dlid,
            sl: d.sl,
            src_path_bits: d.src_path_bits,
            static_rate: d.static_rate,
            port_num: d.port_num,
            grh: (d.is_global != 0).then_some(GlobalRoute {
                dgid: d.dgid,
                flow_label: d.flow_label,
                sgid_index: d.sgid_index,
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
            }),
        }
    }

    fn to_abi(self) -> ib_uverbs_ah_attr {
        let g = self.grh.unwrap_or_default();
        ib_uverbs_ah_attr {
            grh: ib_uverbs_global_route {
                dgid: g.dgid,
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
                reserved: 0,
            },
            dlid: self.dlid,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: u8::from(self.grh.is_some()),
            port_num: self.port_num,
            reserved: 0,
        }
    }
}

/// Bytes of the header area at the start of every UD receive buffer (`struct ibv_grh`).
pub const GRH_LEN: usize = 40;

/// IPv6 next-header value of a RoCE v2 packet (UDP).
const NEXT_HDR_UDP: u8 = 17;
/// IPv6 next-header value of an InfiniBand or RoCE v1 GRH (the BTH follows).
const NEXT_HDR_IB: u8 = 0x1b;

impl AhAttr {
    /// The address vector of a reply to a UD receive (`ibv_init_ah_from_wc`): to the sender
    /// of the datagram `wc` completed, from our GID it was addressed to, on `port` of `ctx`.
    /// `grh` holds the first [`GRH_LEN`] bytes of the receive buffer; they are read only when
    /// the completion has [`WcFlags::GRH`](crate::wc::WcFlags::GRH).
    ///
    /// With a GRH, the route comes from the header: an IPv4 header in the last 20 bytes
    /// (RoCE v2 over IPv4: our RoCE v2 GID `::ffff:` + its destination address, hop limit
    /// from its TTL, traffic class from its TOS) or an IPv6 / InfiniBand GRH (the GID of its
    /// destination with the GID type its next header names: UDP for RoCE v2, the BTH for
    /// IB/RoCE v1). The LID, SL and path bits come from the completion. Without a GRH the
    /// result has none (as in libibverbs; an AH on a RoCE port needs one, so creating it then
    /// fails).
    ///
    /// Errors name what was wrong: a multicast destination (no GID of ours), a header that is
    /// neither IPv4 nor IPv6, a next header that is neither UDP nor the BTH, or no GID of
    /// ours matching the destination.
    pub fn reply_to(
        ctx: &Context,
        port: u8,
        wc: &WorkCompletion,
        grh: &[u8; GRH_LEN],
    ) -> Result<AhAttr> {
        let op = || {
            format!(
                "build a reply address from a UD completion (QP {:#x}, source QP {:#x}) on {} \
                 port {port}",
                wc.qp_num,
                wc.src_qp,
                ctx.name()
            )
        };
        let table = if wc.wc_flags.contains(crate::wc::WcFlags::GRH) {
            ctx.query_gid_table()?
        } else {
            Vec::new()
        };
        reply_attr(port, wc, grh, &table).map_err(|(kind, detail)| {
            let e = match kind {
                std::io::ErrorKind::NotFound => Error::not_found(op(), detail),
                _ => Error::invalid(op(), detail),
            };
            e.into()
        })
    }
}

/// The header version of a receive's GRH area: 4 when its last 20 bytes hold an IPv4 header,
/// 6 when all 40 hold an IPv6/IB GRH. An area that could be both (version nibble 6 in front
/// and a 20-byte IPv4 header behind) is IPv4 only if that header's checksum is right.
fn grh_version(grh: &[u8; GRH_LEN]) -> Option<u8> {
    let ip4 = &grh[20..40];
    let ip4_version = ip4[0] >> 4;
    if grh[0] >> 4 != 6 {
        return (ip4_version == 4).then_some(4);
    }
    if ip4[0] & 0x0f != 5 {
        return Some(6);
    }
    // The ones' complement sum over the header, its checksum included, is 0xffff when the
    // checksum is right.
    let mut sum: u32 = ip4
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    Some(if sum == 0xffff { 4 } else { 6 })
}

fn v4_mapped(addr: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&addr);
    g
}

/// A GID index as an address vector holds it (8 bits).
fn index_u8(index: u32) -> std::result::Result<u8, (std::io::ErrorKind, String)> {
    u8::try_from(index).map_err(|_| {
        (
            std::io::ErrorKind::InvalidInput,
            format!("our GID the datagram was addressed to has index {index}: an address vector holds 0..=255"),
        )
    })
}

/// [`AhAttr::reply_to`] on a given GID table: no kernel involved (unit-tested).
fn reply_attr(
    port: u8,
    wc: &WorkCompletion,
    grh: &[u8; GRH_LEN],
    table: &[crate::gid::GidEntry],
) -> std::result::Result<AhAttr, (std::io::ErrorKind, String)> {
    use crate::gid::GidType;
    use std::io::ErrorKind::{InvalidInput, NotFound};
    let mut attr = AhAttr {
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        port_num: port,
        ..Default::default()
    };
    if !wc.wc_flags.contains(crate::wc::WcFlags::GRH) {
        return Ok(attr);
    }
    let word0 = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
    let find = |gid: [u8; 16], types: &[GidType]| {
        table
            .iter()
            .find(|e| u32::from(port) == e.port && e.gid.0 == gid && types.contains(&e.gid_type))
            .map(|e| e.index)
            .ok_or_else(|| {
                let names: Vec<String> = types.iter().map(|t| t.to_string()).collect();
                (
                    NotFound,
                    format!(
                        "the datagram was addressed to {}, which is no {} GID of port {port}",
                        Ipv6Addr::from(gid),
                        names.join(" or ")
                    ),
                )
            })
    };
    let route = match grh_version(grh) {
        Some(4) => {
            let ip4 = &grh[20..40];
            let (src, dst) = (
                [ip4[12], ip4[13], ip4[14], ip4[15]],
                [ip4[16], ip4[17], ip4[18], ip4[19]],
            );
            if dst[0] >> 4 == 0xe {
                return Err((
                    InvalidInput,
                    format!(
                        "the datagram went to the multicast address {}: a reply needs a \
                         unicast GID of ours",
                        std::net::Ipv4Addr::from(dst)
                    ),
                ));
            }
            let index = find(v4_mapped(dst), &[GidType::ROCE_V2])?;
            GlobalRoute {
                dgid: v4_mapped(src),
                flow_label: word0 & 0xf_ffff,
                sgid_index: index_u8(index)?,
                hop_limit: ip4[8],
                traffic_class: ip4[1],
            }
        }
        Some(_) => {
            let mut sgid = [0u8; 16];
            sgid.copy_from_slice(&grh[8..24]);
            let mut dgid = [0u8; 16];
            dgid.copy_from_slice(&grh[24..40]);
            if dgid[0] == 0xff {
                return Err((
                    InvalidInput,
                    format!(
                        "the datagram went to the multicast GID {}: a reply needs a unicast \
                         GID of ours",
                        Ipv6Addr::from(dgid)
                    ),
                ));
            }
            let types: &[GidType] = match grh[6] {
                NEXT_HDR_UDP => &[GidType::ROCE_V2],
                NEXT_HDR_IB => &[GidType::IB, GidType::ROCE_V1],
                other => {
                    return Err((
                        InvalidInput,
                        format!(
                            "the GRH's next header is {other:#04x}, neither UDP (RoCE v2) nor \
                             the BTH (InfiniBand, RoCE v1)"
                        ),
                    ))
                }
            };
            let index = find(dgid, types)?;
            GlobalRoute {
                dgid: sgid,
                flow_label: word0 & 0xf_ffff,
                sgid_index: index_u8(index)?,
                hop_limit: grh[7],
                traffic_class: (word0 >> 20) as u8,
            }
        }
        None => {
            return Err((
                InvalidInput,
                format!(
                    "the receive buffer's first 40 bytes hold neither an IPv6/IB GRH \
                     (version {}) nor an IPv4 header in their last 20 (version {})",
                    grh[0] >> 4,
                    grh[20] >> 4
                ),
            ))
        }
    };
    attr.grh = Some(route);
    Ok(attr)
}

/// An address handle: where UD sends go.
pub struct Ah {
    pd: Arc<Pd>,
    handle: u32,
    ah_num: u32,
    attr: AhAttr,
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ah")
            .field("handle", &self.handle)
            .field("ah_num", &self.ah_num)
            .field("attr", &self.attr)
            .finish()
    }
}

impl Ah {
    /// Creates an address handle.
    pub fn create(pd: &Arc<Pd>, attr: AhAttr) -> Result<Arc<Ah>> {
        let ctx = pd.context();
        let op = || {
            let to = attr
                .grh
                .map(|g| g.dgid_addr().to_string())
                .unwrap_or_else(|| format!("LID {}", attr.dlid));
            let sgid = attr
                .grh
                .map(|g| format!(" from GID index {}", g.sgid_index))
                .unwrap_or_default();
            format!(
                "create AH to {to}{sgid} on {} port {}",
                ctx.name(),
                attr.port_num
            )
        };
        let driver = ctx.driver()?;
        let user_handle = crate::util::next_user_handle();
        let mut handle: Option<u32> = None;
        // SAFETY: the driver is the one attached to this context, and the
        // callback issues CREATE_AH on its command fd with the driver's data and returns the
        // kernel's answer unaltered (the create contract).
        #[allow(unsafe_code)]
        let res = unsafe {
            driver.create_ah(&attr, &mut |uhw_in, uhw_out| {
                let req = ib_uverbs_create_ah {
                    response: 0,
                    user_handle,
                    pd_handle: pd.handle(),
                    reserved: 0,
                    attr: attr.to_abi(),
                };
                let core_len = size_of::<ib_uverbs_create_ah_resp>();
                let mut resp = vec![0u8; core_len + uhw_out.len()];
                write::cmd_legacy(
                    ctx.cmd_fd(),
                    nr::CREATE_AH,
                    req.as_bytes(),
                    uhw_in,
                    &mut resp,
                )
                .map_err(|e| {
                    let mut err = Error::os(op(), e);
                    if e == rustix::io::Errno::INVAL {
                        err = err.with_detail("check the port and that the GID index exists");
                    }
                    err
                })?;
                let r = ib_uverbs_create_ah_resp::read_from_prefix(&resp)
                    .map(|(r, _)| r)
                    .map_err(|_| Error::protocol(op(), "short response"))?;
                uhw_out.copy_from_slice(&resp[core_len..]);
                handle = Some(r.ah_handle);
                Ok(r.ah_handle)
            })
        };
        match res {
            Ok(ah_num) => Ok(Arc::new(Ah {
                pd: pd.clone(),
                handle: handle.expect("provider built an AH without creating it"),
                ah_num,
                attr,
            })),
            Err(e) => {
                if let Some(h) = handle {
                    let _ = destroy_ah(pd, h);
                }
                Err(e)
            }
        }
    }

    internal! {
    /// The kernel's handle for this AH.
    pub fn handle(&self) -> u32 {
        self.handle
    }
    }
    internal! {
    /// The provider's number for this AH (what UD work requests carry).
    pub fn ah_num(&self) -> u32 {
        self.ah_num
    }
    }
    /// The address vector the AH was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The destination for a UD send through this AH.
    pub fn ud_dest(&self, remote_qpn: u32, remote_qkey: u32) -> crate::wr::UdDest {
        crate::wr::UdDest {
            ah_num: self.ah_num,
            ah_handle: self.handle,
            remote_qpn,
            remote_qkey,
        }
    }
}

fn destroy_ah(pd: &Pd, handle: u32) -> Result<()> {
    let ctx = pd.context();
    let r = ctx.ioctl_or_write(
        Method::DestroyAh,
        &mut (),
        |c, _| c.idr(ah::ATTR_DESTROY_HANDLE, handle),
        |_| {
            let req = ib_uverbs_destroy_ah { ah_handle: handle };
            write::cmd_legacy(ctx.cmd_fd(), nr::DESTROY_AH, req.as_bytes(), &[], &mut [])
        },
    );
    r.map(drop)
        .map_err(|e| Error::os(format!("destroy AH {handle} on {}", ctx.name()), e).into())
}

impl Drop for Ah {
    fn drop(&mut self) {
        if let Err(e) = destroy_ah(&self.pd, self.handle) {
            tracing::error!("{e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gid::{Gid, GidEntry, GidType};
    use crate::wc::WcFlags;
    use std::io::ErrorKind;

    /// An IPv4 header of a RoCE v2 datagram from 10.20.0.1 to 10.20.0.2: TOS 0x02, TTL 64,
    /// UDP, checksum 0x1389 (computed independently for this fixture).
    const IP4: [u8; 20] = [
        0x45, 0x02, 0x01, 0x04, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x13, 0x89, 10, 20, 0, 1, 10,
        20, 0, 2,
    ];

    fn v4_area(ip4: [u8; 20]) -> [u8; GRH_LEN] {
        let mut g = [0u8; GRH_LEN];
        g[20..].copy_from_slice(&ip4);
        g
    }

    fn entry(index: u32, gid: [u8; 16], gid_type: GidType) -> GidEntry {
        GidEntry {
            index,
            port: 1,
            gid: Gid(gid),
            gid_type,
            ndev_ifindex: 3,
        }
    }

    const LINK_LOCAL: [u8; 16] = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
    ];

    fn table() -> Vec<GidEntry> {
        vec![
            entry(0, LINK_LOCAL, GidType::ROCE_V1),
            entry(1, LINK_LOCAL, GidType::ROCE_V2),
            entry(2, v4_mapped([10, 20, 0, 2]), GidType::ROCE_V1),
            entry(3, v4_mapped([10, 20, 0, 2]), GidType::ROCE_V2),
        ]
    }

    fn ud_wc(flags: WcFlags) -> WorkCompletion {
        WorkCompletion {
            wc_flags: flags,
            slid: 7,
            sl: 3,
            dlid_path_bits: 1,
            src_qp: 0x11,
            qp_num: 0x12,
            ..Default::default()
        }
    }

    /// An IPv6 GRH: version 6, traffic class 0xa4, flow label 0x12345, `next` header, hop
    /// limit 9, from `src` to `dst`.
    fn v6_area(next: u8, src: [u8; 16], dst: [u8; 16]) -> [u8; GRH_LEN] {
        let mut g = [0u8; GRH_LEN];
        let word0: u32 = (6 << 28) | (0xa4 << 20) | 0x12345;
        g[..4].copy_from_slice(&word0.to_be_bytes());
        g[4..6].copy_from_slice(&100u16.to_be_bytes());
        g[6] = next;
        g[7] = 9;
        g[8..24].copy_from_slice(&src);
        g[24..].copy_from_slice(&dst);
        g
    }

    #[test]
    fn an_ipv4_datagram_is_answered_from_our_roce_v2_gid_of_its_destination() {
        let a = reply_attr(1, &ud_wc(WcFlags::GRH), &v4_area(IP4), &table()).unwrap();
        assert_eq!((a.dlid, a.sl, a.src_path_bits, a.port_num), (7, 3, 1, 1));
        assert_eq!(
            a.grh,
            Some(GlobalRoute {
                dgid: v4_mapped([10, 20, 0, 1]),
                flow_label: 0,
                sgid_index: 3,
                hop_limit: 64,
                traffic_class: 0x02,
            })
        );
    }

    #[test]
    fn an_ipv6_grh_gives_its_source_flow_label_class_and_hop_limit() {
        let peer = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9];
        let a = reply_attr(
            1,
            &ud_wc(WcFlags::GRH),
            &v6_area(17, peer, LINK_LOCAL),
            &table(),
        )
        .unwrap();
        let g = a.grh.unwrap();
        assert_eq!(g.dgid, peer);
        assert_eq!(g.sgid_index, 1, "UDP: the RoCE v2 entry of the GID");
        assert_eq!(
            (g.flow_label, g.traffic_class, g.hop_limit),
            (0x12345, 0xa4, 9)
        );
        // The BTH as next header: an InfiniBand / RoCE v1 GRH.
        let a = reply_attr(
            1,
            &ud_wc(WcFlags::GRH),
            &v6_area(0x1b, peer, LINK_LOCAL),
            &table(),
        )
        .unwrap();
        assert_eq!(a.grh.unwrap().sgid_index, 0);
    }

    #[test]
    fn a_version_6_area_is_ipv4_only_when_its_ipv4_checksum_holds() {
        // Version nibble 6 in front *and* a valid IPv4 header behind: IPv4.
        let mut g = v4_area(IP4);
        g[0] = 0x60;
        assert_eq!(grh_version(&g), Some(4));
        // A wrong checksum makes it an IPv6 GRH.
        g[30] ^= 1;
        assert_eq!(grh_version(&g), Some(6));
        assert_eq!(grh_version(&v4_area(IP4)), Some(4));
        assert_eq!(grh_version(&[0u8; GRH_LEN]), None);
    }

    #[test]
    fn no_grh_means_no_global_route() {
        // The area is not read then (it is garbage here).
        let a = reply_attr(2, &ud_wc(WcFlags::empty()), &[0x77; GRH_LEN], &[]).unwrap();
        assert_eq!(a.grh, None);
        assert_eq!((a.dlid, a.port_num), (7, 2));
    }

    #[test]
    fn bad_headers_and_unknown_destinations_are_named() {
        let wc = ud_wc(WcFlags::GRH);
        let err =
            |area: [u8; GRH_LEN], table: &[GidEntry]| reply_attr(1, &wc, &area, table).unwrap_err();
        let (k, m) = err([0u8; GRH_LEN], &table());
        assert_eq!(k, ErrorKind::InvalidInput);
        assert!(
            m.contains("neither an IPv6/IB GRH (version 0) nor an IPv4 header"),
            "{m}"
        );
        // Addressed to 10.20.0.9, which we do not have.
        let mut ip4 = IP4;
        ip4[19] = 9;
        let (k, m) = err(v4_area(ip4), &table());
        assert_eq!(k, ErrorKind::NotFound);
        assert!(
            m.contains("::ffff:10.20.0.9, which is no RoCE v2 GID of port 1"),
            "{m}"
        );
        // Only a RoCE v1 entry for the address: still not found for RoCE v2.
        let (k, _) = err(v4_area(IP4), &table()[2..3]);
        assert_eq!(k, ErrorKind::NotFound);
        // Multicast destinations.
        let mut ip4 = IP4;
        ip4[16] = 239;
        let (k, m) = err(v4_area(ip4), &table());
        assert_eq!(k, ErrorKind::InvalidInput);
        assert!(m.contains("multicast address 239.20.0.2"), "{m}");
        let mut mc = LINK_LOCAL;
        mc[0] = 0xff;
        let (_, m) = err(v6_area(17, LINK_LOCAL, mc), &table());
        assert!(m.contains("multicast GID ff80::"), "{m}");
        let (k, m) = err(v6_area(6, LINK_LOCAL, LINK_LOCAL), &table());
        assert_eq!(k, ErrorKind::InvalidInput);
        assert!(m.contains("next header is 0x06"), "{m}");
        // A GID on another port does not count.
        let mut other = table();
        for e in &mut other {
            e.port = 2;
        }
        assert_eq!(err(v4_area(IP4), &other).0, ErrorKind::NotFound);
        // An index beyond what an address vector holds.
        let big = [entry(300, v4_mapped([10, 20, 0, 2]), GidType::ROCE_V2)];
        let (k, m) = err(v4_area(IP4), &big);
        assert_eq!(k, ErrorKind::InvalidInput);
        assert!(m.contains("index 300"), "{m}");
    }
}
