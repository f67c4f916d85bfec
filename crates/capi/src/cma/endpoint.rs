//! Synchronous endpoints: `rdma_getaddrinfo`, `rdma_create_ep`, `rdma_get_request`.

use super::*;

const RAI_PASSIVE: c_int = 1;

symver!(rdma_getaddrinfo => "RDMACM_1.0");
/// `rdma_getaddrinfo`: numeric or resolvable IPv4/IPv6 nodes and numeric services; 0, or -1
/// and `errno`. Free the list with [`rdma_freeaddrinfo`].
///
/// # Safety
/// `node`/`service` NULL or C strings; `hints` NULL or readable; `res` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    if res.is_null() {
        return ret(Err(einval("rdma_getaddrinfo: NULL res pointer")));
    }
    let r = (|| {
        // SAFETY: [str] node and service, each NULL or a C string.
        let (node, service) = unsafe { (str_arg(node)?, str_arg(service)?) };
        // SAFETY: [in] hints: NULL or readable.
        let hints = match unsafe { hints.as_ref() } {
            None => None,
            // SAFETY: [in] hints' source address (NULL allowed).
            Some(h) => Some((h, unsafe { from_sockaddr(h.ai_src_addr) }?)),
        };
        getaddrinfo(node, service, hints)
    })();
    ret(r.map(|list| {
        // SAFETY: [out] res (non-NULL).
        unsafe { *res = list.into_raw() }
    }))
}

/// A C string argument of `rdma_getaddrinfo` as UTF-8 (`None` for NULL).
///
/// # Safety
/// `p` is NULL or a C string alive for `'a`.
unsafe fn str_arg<'a>(p: *const c_char) -> io::Result<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: [str] p (the caller's contract).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str()
        .map(Some)
        .map_err(|_| einval("rdma_getaddrinfo: not UTF-8"))
}

/// The core of [`rdma_getaddrinfo`]: the C hints (with their source address read) to
/// [`AddrHints`], the lookup, and its answers as a C list.
fn getaddrinfo(
    node: Option<&str>,
    service: Option<&str>,
    hints: Option<(&rdma_addrinfo, Option<SocketAddr>)>,
) -> io::Result<CAddrInfoList> {
    let mut h = AddrHints::default();
    let mut flags = 0;
    if let Some((hi, src)) = hints {
        flags = hi.ai_flags;
        h.passive = hi.ai_flags & RAI_PASSIVE != 0;
        if hi.ai_port_space != 0 {
            h.port_space = PortSpace(hi.ai_port_space as u16);
        }
        if hi.ai_qp_type != 0 {
            h.qp_type = Some(QpType(hi.ai_qp_type as u8));
        }
        h.family = match hi.ai_family {
            0 => None,
            libc::AF_INET => Some(IpFamily::V4),
            libc::AF_INET6 => Some(IpFamily::V6),
            f => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("rdma_getaddrinfo: family {f} (AF_INET and AF_INET6 only)"),
                ))
            }
        };
        h.src = src;
    }
    let list = rverbs_cm::getaddrinfo(node, service, &h)?;
    let mut out = CAddrInfoList(null_mut());
    for ai in list.iter().rev() {
        out.push_front(ai, flags)?;
    }
    Ok(out)
}

/// A list of `rdma_addrinfo` nodes (and their addresses) allocated with `calloc`, as
/// [`rdma_freeaddrinfo`] frees them; freed on drop unless handed to C by `into_raw`.
struct CAddrInfoList(*mut rdma_addrinfo);

impl CAddrInfoList {
    /// Adds the C node of `ai` at the head; `ENOMEM` (the list kept whole) when `calloc`
    /// fails.
    fn push_front(&mut self, ai: &AddrInfo, flags: c_int) -> io::Result<()> {
        let n = calloc_one::<rdma_addrinfo>()?;
        // SAFETY: n is a fresh, zeroed allocation of the struct's size (all-zero is a valid
        // rdma_addrinfo), owned by the list from here on, so it is freed with it.
        let r = unsafe {
            (*n).ai_next = self.0;
            self.0 = n;
            &mut *n
        };
        r.ai_flags = flags;
        r.ai_qp_type = c_int::from(ai.qp_type.0);
        r.ai_port_space = c_int::from(ai.port_space.0);
        r.ai_family = match ai.dst.or(ai.src).map(|a| a.is_ipv6()) {
            Some(true) => libc::AF_INET6,
            _ => libc::AF_INET,
        };
        if let Some(a) = &ai.src {
            r.ai_src_addr = alloc_sockaddr(a)?;
            r.ai_src_len = sockaddr_len(a);
        }
        if let Some(a) = &ai.dst {
            r.ai_dst_addr = alloc_sockaddr(a)?;
            r.ai_dst_len = sockaddr_len(a);
        }
        Ok(())
    }

    /// The list's head, for C to free with [`rdma_freeaddrinfo`].
    fn into_raw(self) -> *mut rdma_addrinfo {
        std::mem::ManuallyDrop::new(self).0
    }
}

impl Drop for CAddrInfoList {
    fn drop(&mut self) {
        // SAFETY: [destroy] every node and address of the list was calloc'ed by it.
        unsafe { rdma_freeaddrinfo(self.0) };
    }
}

/// A zeroed `calloc` allocation for one `T`, or `ENOMEM`.
fn calloc_one<T>() -> io::Result<*mut T> {
    // SAFETY: a plain allocation, checked for NULL.
    let p = unsafe { libc::calloc(1, size_of::<T>()) }.cast::<T>();
    match p.is_null() {
        true => Err(io::Error::from_raw_os_error(libc::ENOMEM)),
        false => Ok(p),
    }
}

/// `a` in a `calloc`ed `sockaddr_storage`, or `ENOMEM`.
fn alloc_sockaddr(a: &SocketAddr) -> io::Result<*mut libc::sockaddr> {
    let p = calloc_one::<libc::sockaddr_storage>()?;
    // SAFETY: a fresh allocation of the right size and alignment (calloc's).
    unsafe { p.write(to_storage(a)) };
    Ok(p.cast())
}

symver!(rdma_freeaddrinfo => "RDMACM_1.0");
/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `res` came from [`rdma_getaddrinfo`] (or is NULL).
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: [destroy] res: nodes and addresses were calloc'ed by rdma_getaddrinfo.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free(p.cast());
            p = next;
        }
    }
}

/// # Safety
/// `res` is a readable `rdma_addrinfo`.
unsafe fn addrinfo_of(res: *const rdma_addrinfo) -> io::Result<AddrInfo> {
    // SAFETY: [in] res (non-NULL): an rdma_addrinfo of ours or the caller's.
    let r = unsafe { &*res };
    let ps = if r.ai_port_space == 0 {
        PortSpace::TCP
    } else {
        PortSpace(r.ai_port_space as u16)
    };
    Ok(AddrInfo {
        passive: r.ai_flags & RAI_PASSIVE != 0,
        port_space: ps,
        qp_type: if r.ai_qp_type == 0 {
            ps.default_qp_type()
        } else {
            QpType(r.ai_qp_type as u8)
        },
        // SAFETY: [in] res: the addresses of an rdma_addrinfo are sockaddrs (or NULL).
        src: unsafe { from_sockaddr(r.ai_src_addr) }?,
        // SAFETY: as above.
        dst: unsafe { from_sockaddr(r.ai_dst_addr) }?,
    })
}

symver!(rdma_create_ep => "RDMACM_1.0");
/// `rdma_create_ep`: a synchronous id for `res` (active: address and route resolved, and
/// with `qp_init_attr` its QP; passive: bound, and `qp_init_attr` kept for the ids
/// `rdma_get_request` returns).
///
/// # Safety
/// `id` writable; `res` readable; `pd` NULL or ours; `qp_init_attr` NULL or readable and
/// writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [in] res.
    let ai = match unsafe { addrinfo_of(res) } {
        Ok(a) => a,
        Err(e) => return ret(Err(e)),
    };
    let cm = match rverbs_cm::create_ep(&ai) {
        Ok(i) => i,
        Err(e) => return ret(Err(e)),
    };
    let p = wrap_id(cm, null_mut(), null_mut());
    if !qp_init_attr.is_null() {
        // SAFETY: [in] [out] qp_init_attr (non-NULL).
        let a = unsafe { &mut *qp_init_attr };
        if ai.passive {
            // SAFETY: [owner] just made, alive.
            unsafe { &*p }.lock().ep_qp = Some((*a, pd));
        // SAFETY: [object] p; [in] a, the caller's attr.
        } else if unsafe { rdma_create_qp(p.cast(), pd, a) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: [destroy] ours, no QP.
            unsafe { rdma_destroy_id(p.cast()) };
            set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
            return -1;
        }
    }
    // SAFETY: [out] id.
    unsafe { *id = p.cast() };
    0
}

symver!(rdma_destroy_ep => "RDMACM_1.0");
/// `rdma_destroy_ep`: QP, SRQ, CQs and the id.
///
/// # Safety
/// `id` is ours and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: [destroy] id, destroyed in order: QP, SRQ, the id.
    unsafe {
        rdma_destroy_qp(id);
        rdma_destroy_srq(id);
        rdma_destroy_id(id);
    }
}

symver!(rdma_get_request => "RDMACM_1.0");
/// `rdma_get_request`: on a synchronous listening id, waits for the next connection request
/// and returns its (synchronous) id, with its QP when the listener came from
/// `rdma_create_ep` with QP attributes. `id->event` is the CONNECT_REQUEST.
///
/// # Safety
/// `listen` is ours; `id` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    // SAFETY: [object] listen.
    let lc = obj!(unsafe { CCmId::from_c(listen) }, neg);
    if id.is_null() {
        set_errno(null_arg("rdma_cm_id output"));
        return -1;
    }
    let (new, ep_qp) = {
        let l = lc.lock();
        match l.id().and_then(|i| i.get_request()) {
            Ok(n) => (n, l.ep_qp),
            Err(e) => return ret(Err(e)),
        }
    };
    let ev = new.take_event();
    let p = wrap_id(new, null_mut(), lc.context());
    // SAFETY: [owner] just made, alive.
    let c = unsafe { &*p };
    if let Some(ev) = ev {
        c.lock().c.event = make_event(ev, p, listen.cast()).cast();
    }
    if let Some((mut a, pd)) = ep_qp {
        // SAFETY: p is an [object] id of ours (not locked here); a is a copy.
        if unsafe { rdma_create_qp(p.cast(), pd, &mut a) } != 0 {
            let e = io::Error::last_os_error();
            if let Ok(i) = c.lock().id() {
                let _ = i.reject(&[]);
            }
            // SAFETY: [destroy] ours, no QP.
            unsafe { rdma_destroy_id(p.cast()) };
            set_errno(e.raw_os_error().unwrap_or(libc::EINVAL));
            return -1;
        }
    }
    // SAFETY: [out] id.
    unsafe { *id = p.cast() };
    0
}

#[cfg(test)]
mod tests {
    use std::ptr::{null, null_mut};

    use super::*;

    fn errno() -> i32 {
        io::Error::last_os_error().raw_os_error().unwrap()
    }

    /// The nodes of a list: (family, source, destination).
    ///
    /// # Safety
    /// `p` is a list from rdma_getaddrinfo.
    unsafe fn nodes(
        mut p: *mut rdma_addrinfo,
    ) -> Vec<(c_int, Option<SocketAddr>, Option<SocketAddr>)> {
        let mut v = Vec::new();
        while !p.is_null() {
            // SAFETY: [in] a node of the list and its addresses.
            unsafe {
                let r = &*p;
                v.push((
                    r.ai_family,
                    from_sockaddr(r.ai_src_addr).unwrap(),
                    from_sockaddr(r.ai_dst_addr).unwrap(),
                ));
                p = r.ai_next;
            }
        }
        v
    }

    #[test]
    fn numeric_lookups_give_a_list_c_frees() {
        let mut res = null_mut();
        // SAFETY: C strings, NULL hints, a writable res.
        let r =
            unsafe { rdma_getaddrinfo(c"127.0.0.1".as_ptr(), c"7471".as_ptr(), null(), &mut res) };
        assert_eq!(r, 0);
        // SAFETY: our list.
        let got = unsafe { nodes(res) };
        assert_eq!(
            got,
            vec![(libc::AF_INET, None, Some("127.0.0.1:7471".parse().unwrap()))]
        );
        // SAFETY: [destroy] our list.
        unsafe { rdma_freeaddrinfo(res) };

        // Passive, no node: both wildcards; an AF_INET6 hint keeps the IPv6 one.
        // SAFETY: all-zero is a valid rdma_addrinfo.
        let mut h: rdma_addrinfo = unsafe { std::mem::zeroed() };
        h.ai_flags = RAI_PASSIVE;
        // SAFETY: as above.
        let r = unsafe { rdma_getaddrinfo(null(), c"7471".as_ptr(), &h, &mut res) };
        assert_eq!(r, 0);
        // SAFETY: our list.
        assert_eq!(unsafe { nodes(res) }.len(), 2);
        // SAFETY: [destroy] our list.
        unsafe { rdma_freeaddrinfo(res) };
        h.ai_family = libc::AF_INET6;
        // SAFETY: as above.
        let r = unsafe { rdma_getaddrinfo(null(), c"7471".as_ptr(), &h, &mut res) };
        assert_eq!(r, 0);
        // SAFETY: our list.
        let got = unsafe { nodes(res) };
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, libc::AF_INET6);
        assert_eq!(got[0].1, Some("[::]:7471".parse().unwrap()));
        // SAFETY: [destroy] our list.
        unsafe { rdma_freeaddrinfo(res) };
    }

    #[test]
    fn bad_arguments_give_minus_one_and_errno_and_leave_res() {
        let marker = std::ptr::dangling_mut::<rdma_addrinfo>();
        let mut res = marker;
        // SAFETY: C strings (or NULL), a writable res where one is given.
        unsafe {
            assert_eq!(
                rdma_getaddrinfo(c"127.0.0.1".as_ptr(), null(), null(), null_mut()),
                -1
            );
            assert_eq!(errno(), libc::EINVAL, "NULL res");
            assert_eq!(
                rdma_getaddrinfo(c"\xff".as_ptr(), null(), null(), &mut res),
                -1
            );
            assert_eq!(errno(), libc::EINVAL, "node not UTF-8");
            let mut h: rdma_addrinfo = std::mem::zeroed();
            h.ai_family = libc::AF_UNIX;
            assert_eq!(
                rdma_getaddrinfo(c"127.0.0.1".as_ptr(), null(), &h, &mut res),
                -1
            );
            assert_eq!(errno(), libc::EOPNOTSUPP, "family AF_UNIX");
        }
        assert_eq!(res, marker, "res untouched on failure");
    }
}
