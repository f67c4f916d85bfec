//! GIDs: the [`Gid`] type, a port's GID table ([`Context::query_gid_table`],
//! [`Context::query_gid`], [`GidEntry`]) and its sysfs fallback (`sysfs_gid_table`).

use std::fmt;
use std::fs;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;

use rustix::io::Errno;
use zerocopy::IntoBytes;

use crate::context::{Context, Method, Via};
use crate::device::read_str;
use crate::error::Error;
use crate::kernel::abi::device::ib_uverbs_gid_entry;
use crate::kernel::abi::obj::device as dev_m;
use crate::newtype::raw_newtype;
use crate::port::LinkLayer;

raw_newtype! {
    /// `enum ib_uverbs_gid_type`: what a GID table entry is for.
    GidType(u32) {
        IB = 0, "IB";
        ROCE_V1 = 1, "RoCE v1";
        ROCE_V2 = 2, "RoCE v2";
    }
}

/// A 16-byte InfiniBand/RoCE GID in network byte order, as the wire, the kernel and the
/// rdma_cm carry it: the one GID type of rverbs (`rverbs_cm` uses it too).
///
/// `Display` prints the IPv6 text `inet_ntop(AF_INET6)` gives, which is what `ibv_devinfo`
/// shows for RoCE v2 GIDs (`::ffff:10.10.0.1`, `fe80::5054:ff:fe12:3456`);
/// `Gid::to_sysfs_string` gives sysfs' fixed-width form, [`Gid::parse`] reads either.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// True for a multicast GID, the only kind a QP can be attached to
    /// ([`Qp::attach_mcast`](crate::qp::Qp::attach_mcast)): `ff00::/8`, or an IPv4-mapped
    /// multicast address (`::ffff:224.0.0.0/100`), which is how rdma_cm names an IPv4 group on
    /// RoCE v2 (the kernel's `rdma_is_multicast_addr` accepts the same two).
    pub fn is_multicast(&self) -> bool {
        match self.to_ipv4_mapped() {
            Some(v4) => v4.is_multicast(),
            None => self.0[0] == 0xff,
        }
    }

    internal! {
    /// All bytes zero (an unused table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    }

    /// Parses the sysfs form "fe80:0000:0000:0000:0250:b6ff:fe41:2a10" (8 groups of 4 hex
    /// digits; any IPv6 text is accepted too).
    pub fn parse(s: &str) -> Option<Gid> {
        s.trim()
            .parse::<std::net::Ipv6Addr>()
            .ok()
            .map(|a| Gid(a.octets()))
    }

    internal! {
    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`, what RoCE v2 uses for IPv4).
    // The name is `Ipv6Addr::to_ipv4_mapped`'s; clippy asks it of crate-private methods only.
    #[allow(clippy::wrong_self_convention)]
    pub fn to_ipv4_mapped(&self) -> Option<Ipv4Addr> {
        std::net::Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
    }

    internal! {
    /// The text sysfs shows (`/sys/class/infiniband/*/ports/*/gids/*`): eight groups of four
    /// hex digits, e.g. `0000:0000:0000:0000:0000:ffff:0a0a:0001`.
    // (clippy asks crate-private `to_*` of a `Copy` type to take `self`; with `internals` it is
    // public, where `&self` is the signature it had.)
    #[allow(clippy::wrong_self_convention)]
    pub fn to_sysfs_string(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::with_capacity(39);
        for (i, pair) in self.0.chunks(2).enumerate() {
            if i > 0 {
                s.push(':');
            }
            let _ = write!(s, "{:02x}{:02x}", pair[0], pair[1]);
        }
        s
    }
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
    /// Index in the port's GID table.
    pub index: u32,
    /// Port number (1-based).
    pub port: u32,
    /// The GID itself.
    pub gid: Gid,
    /// Whether the GID is InfiniBand/RoCE v1 or RoCE v2.
    pub gid_type: GidType,
    /// ifindex of the netdev behind the GID (RoCE), 0 when none.
    pub ndev_ifindex: u32,
}

impl Context {
    /// Every populated GID of every port (`ibv_query_gid_table`).
    pub fn query_gid_table(&self) -> io::Result<Vec<GidEntry>> {
        let op = || format!("query GID table of {}", self.device().name());
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
        let via = self.ioctl_or_write(
            Method::GidTable,
            &mut (entries.as_mut_slice(), &mut n),
            |c, (entries, n)| {
                c.const_in(
                    dev_m::ATTR_QUERY_GID_TABLE_ENTRY_SIZE,
                    size_of::<ib_uverbs_gid_entry>() as u64,
                );
                c.ptr_out_bytes(
                    dev_m::ATTR_QUERY_GID_TABLE_RESP_ENTRIES,
                    entries.as_mut_bytes(),
                );
                c.ptr_out(dev_m::ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES, &mut **n);
            },
            |_| Ok(sysfs_gid_table(self.device().ibdev_path(), &ports)),
        );
        match via.map_err(|e| Error::os(op(), e))? {
            Via::Ioctl(..) => {
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
            Via::Write(table) => table,
        }
    }

    /// GID `index` of port `port` (`ibv_query_gid_ex`).
    pub fn query_gid(&self, port: u32, index: u32) -> io::Result<GidEntry> {
        let op = || format!("query GID {index} of {} port {port}", self.device().name());
        let known = self.device().port_count();
        if port == 0 || (known > 0 && port > known) {
            return Err(self.bad_port(port, op()));
        }
        // The entry the kernel fills and the flags it reads.
        let mut q = (ib_uverbs_gid_entry::default(), 0u32);
        let via = self.ioctl_or_write(
            Method::GidEntry,
            &mut q,
            |c, (e, flags)| {
                c.const_in(dev_m::ATTR_QUERY_GID_ENTRY_PORT, u64::from(port));
                c.const_in(dev_m::ATTR_QUERY_GID_ENTRY_GID_INDEX, u64::from(index));
                c.ptr_in(dev_m::ATTR_QUERY_GID_ENTRY_FLAGS, flags);
                c.ptr_out(dev_m::ATTR_QUERY_GID_ENTRY_RESP_ENTRY, e);
            },
            |_| {
                Ok(self.query_port(port).and_then(|pa| {
                    sysfs_gid_entry(self.device().ibdev_path(), port, index, pa.link_layer)?
                        .ok_or_else(|| empty_gid(op(), index, pa.gid_tbl_len))
                }))
            },
        );
        match via {
            Ok(Via::Ioctl(..)) => Ok(entry_from_abi(&q.0)),
            Ok(Via::Write(entry)) => entry,
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

internal! {
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
}

internal! {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> Gid {
        Gid(s.parse::<std::net::Ipv6Addr>().unwrap().octets())
    }

    #[test]
    fn multicast_gids() {
        for m in [
            "ff0e::ffff:239.1.2.3",
            "ff02::1",
            "::ffff:239.1.25.1",
            "::ffff:224.0.0.1",
        ] {
            assert!(g(m).is_multicast(), "{m}");
        }
        for u in [
            "::ffff:10.10.0.1",
            "fe80::1",
            "::",
            "::ffff:223.255.255.255",
            "fe00::1",
        ] {
            assert!(!g(u).is_multicast(), "{u}");
        }
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
    fn gid_sysfs_text_and_mapped_ipv4() {
        let gid = g("::ffff:10.10.0.1");
        assert_eq!(gid.to_ipv4_mapped(), Some(Ipv4Addr::new(10, 10, 0, 1)));
        assert_eq!(
            gid.to_sysfs_string(),
            "0000:0000:0000:0000:0000:ffff:0a0a:0001"
        );
        assert_eq!(Gid::parse(&gid.to_sysfs_string()), Some(gid));
        assert_eq!(g("fe80::1").to_ipv4_mapped(), None);
    }

    #[test]
    fn gid_type_names() {
        assert_eq!(GidType::ROCE_V2.to_string(), "RoCE v2");
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
}
