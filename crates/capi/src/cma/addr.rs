//! Socket addresses: conversions between `sockaddr` and [`SocketAddr`], and the addresses
//! an id shows to C.

use super::*;

pub(super) fn to_storage(a: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut s: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { ptr::write(&raw mut s as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(v) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as u16,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo().to_be(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { ptr::write(&raw mut s as *mut libc::sockaddr_in6, sin6) };
        }
    }
    s
}

pub(super) fn sockaddr_len(a: &SocketAddr) -> u32 {
    match a {
        SocketAddr::V4(_) => size_of::<libc::sockaddr_in>() as u32,
        SocketAddr::V6(_) => size_of::<libc::sockaddr_in6>() as u32,
    }
}

use std::mem::size_of;

/// # Safety
/// `sa` is NULL or points at a sockaddr whose family says how much is readable.
pub(super) unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> io::Result<Option<SocketAddr>> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: [in] sa: at least the family is readable, and as much as it names.
    let family = c_int::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { (sa as *const libc::sockaddr_in).read_unaligned() };
            Ok(Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(s.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(s.sin_port),
            ))))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { (sa as *const libc::sockaddr_in6).read_unaligned() };
            Ok(Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                u32::from_be(s.sin6_flowinfo),
                s.sin6_scope_id,
            ))))
        }
        f => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("rdma_cm: address family {f} (only AF_INET and AF_INET6)"),
        )),
    }
}

/// Refreshes what the id exposes from the kernel (`QUERY` ADDR and ROUTE): addresses, the
/// device (`verbs`, opened on first use), the port and the path records.
pub(super) fn update_addr(g: &mut IdGuard<'_>) {
    let IdGuard { st, c, .. } = g;
    let st = &mut **st;
    let Some(id) = st.id.as_ref() else { return };
    let Ok(q) = id.query_addr() else { return };
    if let Some(a) = q.src.ip() {
        c.route.addr.src_storage = to_storage(&a);
    }
    if let Some(a) = q.dst.ip() {
        c.route.addr.dst_storage = to_storage(&a);
    }
    c.route.addr.ibaddr.pkey = q.pkey.to_be();
    if q.has_device() {
        c.port_num = q.port_num;
        if c.verbs.is_null() {
            match device_for(q.node_guid) {
                Ok(ctx) => {
                    c.verbs = ctx;
                    let mut a: ibv_device_attr =
                        // SAFETY: plain data; all-zero is valid.
                        unsafe { std::mem::zeroed() };
                    // SAFETY: [object] ctx (the device list's, never closed); [out] a.
                    if unsafe { ibverbs::ibv_query_device(ctx, &mut a) } == 0 {
                        id.set_rd_atomic_max(
                            a.max_qp_init_rd_atom.clamp(0, 255) as u8,
                            a.max_qp_rd_atom.clamp(0, 255) as u8,
                        );
                    }
                }
                Err(e) => {
                    fail(&e);
                    st.device_error = Some(e.to_string());
                }
            }
        }
    }
    if let Ok(r) = id.query_route() {
        if let Some(p) = r.paths.first() {
            c.route.addr.ibaddr.sgid = ibv_gid { raw: p.sgid.0 };
            c.route.addr.ibaddr.dgid = ibv_gid { raw: p.dgid.0 };
        }
        st.paths = r
            .paths
            .iter()
            .take(r.num_paths as usize)
            .map(|p| ibv_sa_path_rec {
                dgid: ibv_gid { raw: p.dgid.0 },
                sgid: ibv_gid { raw: p.sgid.0 },
                dlid: p.dlid.to_be(),
                slid: p.slid.to_be(),
                raw_traffic: c_int::from(p.raw_traffic),
                flow_label: p.flow_label.to_be(),
                hop_limit: p.hop_limit,
                traffic_class: p.traffic_class,
                reversible: c_int::from(p.reversible),
                numb_path: p.numb_path,
                pkey: p.pkey.to_be(),
                sl: p.sl,
                mtu_selector: p.mtu_selector,
                mtu: p.mtu,
                rate_selector: p.rate_selector,
                rate: p.rate,
                packet_life_time_selector: p.packet_life_time_selector,
                packet_life_time: p.packet_life_time,
                preference: p.preference,
            })
            .collect();
        c.route.num_paths = st.paths.len() as c_int;
        c.route.path_rec = if st.paths.is_empty() {
            null_mut()
        } else {
            st.paths.as_mut_ptr()
        };
    }
}
