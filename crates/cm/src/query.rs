//! Results of the `QUERY` / `QUERY_ROUTE` commands, decoded.

use std::fs;
use std::io;
use std::path::PathBuf;

use rverbs_uverbs::Error;
use zerocopy::FromBytes;

use crate::abi;
use crate::addr::{self, CmAddr, Gid, IbAddr};
use crate::id::format_guid;

/// `QUERY` / ADDR: where an id is bound or connected, and on which device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddrQuery {
    /// The local (bound or source) address.
    pub src: CmAddr,
    /// The peer (destination) address; unspecified on a listening or merely bound id.
    pub dst: CmAddr,
    /// The device's node GUID in host order (0 while the id has no device).
    pub node_guid: u64,
    /// The device port (0 while the id has no device).
    pub port_num: u8,
    /// The P_Key of the partition in use.
    pub pkey: u16,
    /// The kernel's device index (as in RDMA netlink); meaningful when `node_guid != 0`.
    pub ibdev_index: u32,
}

impl AddrQuery {
    pub(crate) fn from_raw(r: &abi::rdma_ucm_query_addr_resp) -> Self {
        Self {
            src: addr::decode_sized(&r.src_addr.bytes, r.src_size),
            dst: addr::decode_sized(&r.dst_addr.bytes, r.dst_size),
            node_guid: u64::from_be_bytes(r.node_guid),
            port_num: r.port_num,
            pkey: u16::from_be_bytes(r.pkey),
            ibdev_index: r.ibdev_index,
        }
    }

    /// True once the id is attached to an RDMA device.
    pub fn has_device(&self) -> bool {
        self.node_guid != 0
    }

    /// The node GUID as sysfs prints it (`/sys/class/infiniband/<dev>/node_guid`).
    pub fn node_guid_string(&self) -> String {
        format_guid(self.node_guid)
    }

    /// The name of the RDMA device (e.g. `rxe0`) with this node GUID, found in
    /// `/sys/class/infiniband`. Errors if there is no device yet, none matches, or several do.
    pub fn ib_device_name(&self) -> io::Result<String> {
        const OP: &str = "find the rdma_cm id's device";
        if !self.has_device() {
            return Err(Error::not_found(OP, "the id is not attached to a device yet").into());
        }
        let want = self.node_guid_string();
        let mut found = Vec::new();
        let dir = fs::read_dir("/sys/class/infiniband")
            .map_err(|e| Error::not_found(OP, format!("/sys/class/infiniband: {e}")))?;
        for ent in dir.flatten() {
            let guid = fs::read_to_string(ent.path().join("node_guid")).unwrap_or_default();
            if guid.trim() == want {
                found.push(ent.file_name().to_string_lossy().into_owned());
            }
        }
        found.sort();
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(Error::not_found(OP, format!("no device has node GUID {want}")).into()),
            _ => Err(Error::not_found(
                OP,
                format!(
                    "devices {} share node GUID {want} (device index {})",
                    found.join(", "),
                    self.ibdev_index
                ),
            )
            .into()),
        }
    }

    /// The uverbs character device of [`AddrQuery::ib_device_name`] (e.g.
    /// `/dev/infiniband/uverbs0`), from `/sys/class/infiniband_verbs/uverbs*/ibdev`.
    pub fn uverbs_device(&self) -> io::Result<PathBuf> {
        let name = self.ib_device_name()?;
        let dir = fs::read_dir("/sys/class/infiniband_verbs").map_err(|e| {
            Error::not_found(
                "find uverbs device",
                format!("/sys/class/infiniband_verbs: {e}"),
            )
        })?;
        for ent in dir.flatten() {
            let ibdev = fs::read_to_string(ent.path().join("ibdev")).unwrap_or_default();
            if ibdev.trim() == name {
                return Ok(PathBuf::from("/dev/infiniband").join(ent.file_name()));
            }
        }
        Err(Error::not_found("find uverbs device", format!("no uverbs device for {name}")).into())
    }
}

/// `QUERY` / GID: the local and peer GIDs, P_Key and service ids as AF_IB addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidQuery {
    /// The local GID, P_Key and service id.
    pub src: IbAddr,
    /// The peer's GID, P_Key and service id.
    pub dst: IbAddr,
    /// The sizes the kernel reported (48 = `sockaddr_ib`).
    pub src_size: u16,
    /// Size of `dst` as the kernel reported it.
    pub dst_size: u16,
}

/// One path record: an SA PathRecord (`QUERY` / PATH) or an `ib_user_path_rec`
/// (`QUERY_ROUTE`), all in host order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PathRecord {
    /// `IB_PATH_*` flags for `QUERY`/PATH records (0 for `QUERY_ROUTE`).
    pub flags: u32,
    /// The service id (host order).
    pub service_id: u64,
    /// Destination GID.
    pub dgid: Gid,
    /// Source GID.
    pub sgid: Gid,
    /// Destination LID (InfiniBand; 0 on RoCE).
    pub dlid: u16,
    /// Source LID (InfiniBand; 0 on RoCE).
    pub slid: u16,
    /// Raw traffic (not IBA transport).
    pub raw_traffic: bool,
    /// GRH flow label.
    pub flow_label: u32,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH traffic class.
    pub traffic_class: u8,
    /// Whether the path is reversible.
    pub reversible: bool,
    /// Number of paths the SA was asked for.
    pub numb_path: u8,
    /// The partition key.
    pub pkey: u16,
    /// QoS class.
    pub qos_class: u16,
    /// Service level.
    pub sl: u8,
    /// How `mtu` is to be read (`IB_SA_EQ` etc.).
    pub mtu_selector: u8,
    /// IB MTU enum: 1 = 256 … 5 = 4096 bytes.
    pub mtu: u8,
    /// How `rate` is to be read.
    pub rate_selector: u8,
    /// Static rate code (`IB_RATE_*`).
    pub rate: u8,
    /// How `packet_life_time` is to be read.
    pub packet_life_time_selector: u8,
    /// Packet lifetime code (4.096 µs × 2^value).
    pub packet_life_time: u8,
    /// Preference among several paths (0 = best).
    pub preference: u8,
}

impl PathRecord {
    /// The MTU in bytes (`None` for an unknown code).
    pub fn mtu_bytes(&self) -> Option<u32> {
        (1..=5).contains(&self.mtu).then(|| 128 << self.mtu)
    }

    internal! {
    /// Decodes the 64-byte big-endian, bit-packed SA PathRecord (IBA 15.2.5.16).
    pub fn from_wire(flags: u32, w: &[u8; 64]) -> Self {
        let be16 = |i: usize| u16::from_be_bytes([w[i], w[i + 1]]);
        let word11 = u32::from_be_bytes([w[44], w[45], w[46], w[47]]);
        let mut dgid = [0u8; 16];
        dgid.copy_from_slice(&w[8..24]);
        let mut sgid = [0u8; 16];
        sgid.copy_from_slice(&w[24..40]);
        let mut sid = [0u8; 8];
        sid.copy_from_slice(&w[0..8]);
        Self {
            flags,
            service_id: u64::from_be_bytes(sid),
            dgid: Gid(dgid),
            sgid: Gid(sgid),
            dlid: be16(40),
            slid: be16(42),
            raw_traffic: word11 >> 31 != 0,
            flow_label: (word11 >> 8) & 0xf_ffff,
            hop_limit: word11 as u8,
            traffic_class: w[48],
            reversible: w[49] >> 7 != 0,
            numb_path: w[49] & 0x7f,
            pkey: be16(50),
            qos_class: be16(52) >> 4,
            sl: w[53] & 0xf,
            mtu_selector: w[54] >> 6,
            mtu: w[54] & 0x3f,
            rate_selector: w[55] >> 6,
            rate: w[55] & 0x3f,
            packet_life_time_selector: w[56] >> 6,
            packet_life_time: w[56] & 0x3f,
            preference: w[57],
        }
    }
    }

    fn from_user(r: &abi::ib_user_path_rec) -> Self {
        Self {
            flags: 0,
            service_id: 0,
            dgid: Gid(r.dgid),
            sgid: Gid(r.sgid),
            dlid: u16::from_be_bytes(r.dlid),
            slid: u16::from_be_bytes(r.slid),
            raw_traffic: r.raw_traffic != 0,
            flow_label: u32::from_be_bytes(r.flow_label),
            hop_limit: r.hop_limit,
            traffic_class: r.traffic_class,
            reversible: r.reversible != 0,
            numb_path: r.numb_path,
            pkey: u16::from_be_bytes(r.pkey),
            qos_class: 0,
            sl: r.sl,
            mtu_selector: r.mtu_selector,
            mtu: r.mtu as u8,
            rate_selector: r.rate_selector,
            rate: r.rate,
            packet_life_time_selector: r.packet_life_time_selector,
            packet_life_time: r.packet_life_time,
            preference: r.preference,
        }
    }
}

/// Decodes a `rdma_ucm_query_path_resp` followed by its path records.
pub(crate) fn decode_path_resp(buf: &[u8]) -> Vec<PathRecord> {
    let Ok((hdr, mut rest)) = abi::rdma_ucm_query_path_resp::read_from_prefix(buf) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for _ in 0..hdr.num_paths {
        let Ok((rec, tail)) = abi::ib_path_rec_data::read_from_prefix(rest) else {
            break;
        };
        out.push(PathRecord::from_wire(rec.flags, &rec.path_rec));
        rest = tail;
    }
    out
}

/// `QUERY_ROUTE`: the pre-AF_IB view of an id's route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteQuery {
    /// The device's node GUID in host order.
    pub node_guid: u64,
    /// The device port.
    pub port_num: u8,
    /// The kernel's device index (as in RDMA netlink).
    pub ibdev_index: u32,
    /// How many path records the route holds (0 before ROUTE_RESOLVED; then `paths[0]` still
    /// carries the GIDs the kernel derived from the addresses).
    pub num_paths: u32,
    /// Up to two records (primary, alternate); `max(num_paths, 1)` of them.
    pub paths: Vec<PathRecord>,
    /// The local (source) address.
    pub src: CmAddr,
    /// The peer (destination) address.
    pub dst: CmAddr,
}

impl RouteQuery {
    pub(crate) fn from_raw(r: &abi::rdma_ucm_query_route_resp) -> Self {
        let n = (r.num_paths as usize).clamp(1, 2);
        Self {
            node_guid: u64::from_be_bytes(r.node_guid),
            port_num: r.port_num,
            ibdev_index: r.ibdev_index,
            num_paths: r.num_paths,
            paths: r.ib_route[..n].iter().map(PathRecord::from_user).collect(),
            src: addr::decode(zerocopy::IntoBytes::as_bytes(&r.src_addr)),
            dst: addr::decode(zerocopy::IntoBytes::as_bytes(&r.dst_addr)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    fn wire_fixture() -> [u8; 64] {
        let mut w = [0u8; 64];
        w[0..8].copy_from_slice(&0x0000_0000_0106_1d2fu64.to_be_bytes());
        w[8..24].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 10, 0, 2]);
        w[24..40].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 10, 0, 1]);
        w[40..42].copy_from_slice(&0x1234u16.to_be_bytes());
        w[42..44].copy_from_slice(&0x5678u16.to_be_bytes());
        // raw_traffic 1, reserved 0, flow_label 0xabcde, hop_limit 64
        w[44..48].copy_from_slice(&((1u32 << 31) | (0xabcde << 8) | 64).to_be_bytes());
        w[48] = 0x20; // traffic class
        w[49] = 0x80 | 1; // reversible, numb_path 1
        w[50..52].copy_from_slice(&0xffffu16.to_be_bytes());
        w[52..54].copy_from_slice(&((0x123u16 << 4) | 5).to_be_bytes()); // qos 0x123, sl 5
        w[54] = (2 << 6) | 3; // mtu selector 2 (exactly), mtu 1024
        w[55] = (2 << 6) | 7; // rate selector 2, rate 7
        w[56] = (2 << 6) | 18; // packet life time 18
        w[57] = 9; // preference
        w
    }

    #[test]
    fn path_record_bits() {
        let p = PathRecord::from_wire(7, &wire_fixture());
        assert_eq!(p.flags, 7);
        assert_eq!(p.service_id, 0x0106_1d2f);
        assert_eq!(p.dgid.to_ipv4_mapped(), Some("10.10.0.2".parse().unwrap()));
        assert_eq!(p.sgid.to_ipv4_mapped(), Some("10.10.0.1".parse().unwrap()));
        assert_eq!((p.dlid, p.slid), (0x1234, 0x5678));
        assert!(p.raw_traffic);
        assert_eq!(p.flow_label, 0xabcde);
        assert_eq!(p.hop_limit, 64);
        assert_eq!(p.traffic_class, 0x20);
        assert!(p.reversible);
        assert_eq!(p.numb_path, 1);
        assert_eq!(p.pkey, 0xffff);
        assert_eq!((p.qos_class, p.sl), (0x123, 5));
        assert_eq!((p.mtu_selector, p.mtu, p.mtu_bytes()), (2, 3, Some(1024)));
        assert_eq!((p.rate_selector, p.rate), (2, 7));
        assert_eq!((p.packet_life_time_selector, p.packet_life_time), (2, 18));
        assert_eq!(p.preference, 9);
    }

    #[test]
    fn path_resp_decodes_count_records() {
        let mut buf = Vec::new();
        buf.extend_from_slice(
            abi::rdma_ucm_query_path_resp {
                num_paths: 2,
                reserved: 0,
            }
            .as_bytes(),
        );
        for flags in [abi::path_flags::GMP | abi::path_flags::PRIMARY, 0x38] {
            let r = abi::ib_path_rec_data {
                flags,
                reserved: 0,
                path_rec: wire_fixture(),
            };
            buf.extend_from_slice(r.as_bytes());
        }
        let v = decode_path_resp(&buf);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].flags, 3);
        assert_eq!(v[1].flags, 0x38);
        // A truncated buffer yields what fits, never a panic.
        assert_eq!(decode_path_resp(&buf[..8 + 72 + 10]).len(), 1);
        assert!(decode_path_resp(&buf[..4]).is_empty());
    }

    #[test]
    fn addr_resp_decodes() {
        let mut r = <abi::rdma_ucm_query_addr_resp as zerocopy::FromZeros>::new_zeroed();
        r.node_guid = 0x0211_22ff_fe33_4455u64.to_be_bytes();
        r.port_num = 1;
        r.pkey = 0xffffu16.to_be_bytes();
        let (s, n) = addr::to_storage(&"10.10.0.1:7471".parse().unwrap());
        r.src_addr = s;
        r.src_size = n;
        r.ibdev_index = 3;
        let q = AddrQuery::from_raw(&r);
        assert_eq!(q.src, CmAddr::Ip("10.10.0.1:7471".parse().unwrap()));
        assert_eq!(q.dst, CmAddr::Unspecified);
        assert_eq!(q.node_guid_string(), "0211:22ff:fe33:4455");
        assert_eq!((q.port_num, q.pkey, q.ibdev_index), (1, 0xffff, 3));
        assert!(q.has_device());
    }

    #[test]
    fn route_resp_decodes() {
        let mut r = <abi::rdma_ucm_query_route_resp as zerocopy::FromZeros>::new_zeroed();
        r.num_paths = 1;
        r.ib_route[0].dgid[15] = 2;
        r.ib_route[0].pkey = 0xffffu16.to_be_bytes();
        r.ib_route[0].mtu = 3;
        r.src_addr = addr::to_in6_slot(&"10.10.0.1:1".parse().unwrap());
        r.port_num = 1;
        let q = RouteQuery::from_raw(&r);
        assert_eq!(q.paths.len(), 1);
        assert_eq!(q.paths[0].dgid.0[15], 2);
        assert_eq!(q.paths[0].pkey, 0xffff);
        assert_eq!(q.paths[0].mtu_bytes(), Some(1024));
        assert_eq!(q.src, CmAddr::Ip("10.10.0.1:1".parse().unwrap()));
    }
}
