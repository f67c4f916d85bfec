//! Synchronous endpoints: `rdma_getaddrinfo`, `rdma_create_ep`, `rdma_get_request`.

use super::*;

const RAI_PASSIVE: c_int = 1;

fn alloc_sockaddr(a: &SocketAddr) -> *mut libc::sockaddr {
    let s = to_storage(a);
    // SAFETY: plain allocation; checked for NULL.
    let p = unsafe { libc::calloc(1, size_of::<libc::sockaddr_storage>()) }
        .cast::<libc::sockaddr_storage>();
    if !p.is_null() {
        // SAFETY: fresh allocation of the right size.
        unsafe { p.write(s) };
    }
    p.cast()
}

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
    let r = (|| -> io::Result<*mut rdma_addrinfo> {
        let s = |p: *const c_char| -> io::Result<Option<String>> {
            if p.is_null() {
                return Ok(None);
            }
            // SAFETY: [str] p.
            let c = unsafe { CStr::from_ptr(p) };
            Ok(Some(
                c.to_str()
                    .map_err(|_| einval("rdma_getaddrinfo: not UTF-8"))?
                    .to_string(),
            ))
        };
        let (node, service) = (s(node)?, s(service)?);
        let mut h = AddrHints::default();
        let mut flags = 0;
        if !hints.is_null() {
            // SAFETY: [in] hints (non-NULL).
            let hi = unsafe { &*hints };
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
            // SAFETY: [in] hints' source address (NULL allowed).
            h.src = unsafe { from_sockaddr(hi.ai_src_addr) }?;
        }
        let list = rverbs_cm::getaddrinfo(node.as_deref(), service.as_deref(), &h)?;
        let mut head: *mut rdma_addrinfo = null_mut();
        for ai in list.iter().rev() {
            // SAFETY: calloc of the struct's size; all-zero is a valid rdma_addrinfo.
            let n = unsafe { libc::calloc(1, size_of::<rdma_addrinfo>()) }.cast::<rdma_addrinfo>();
            if n.is_null() {
                // SAFETY: our list so far.
                unsafe { rdma_freeaddrinfo(head) };
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            // SAFETY: fresh, zeroed.
            let r = unsafe { &mut *n };
            r.ai_flags = flags;
            r.ai_qp_type = c_int::from(ai.qp_type.0);
            r.ai_port_space = c_int::from(ai.port_space.0);
            let fam = ai.dst.or(ai.src).map(|a| a.is_ipv6());
            r.ai_family = match fam {
                Some(true) => libc::AF_INET6,
                _ => libc::AF_INET,
            };
            if let Some(a) = &ai.src {
                r.ai_src_addr = alloc_sockaddr(a);
                r.ai_src_len = sockaddr_len(a);
            }
            if let Some(a) = &ai.dst {
                r.ai_dst_addr = alloc_sockaddr(a);
                r.ai_dst_len = sockaddr_len(a);
            }
            r.ai_next = head;
            head = n;
        }
        Ok(head)
    })();
    match r {
        Ok(h) => {
            // SAFETY: [out] res.
            unsafe { *res = h };
            0
        }
        Err(e) => ret(Err(e)),
    }
}

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
