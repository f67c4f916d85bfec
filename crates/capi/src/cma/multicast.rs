//! Multicast joins and leaves (`rdma_join_multicast`, …).

use super::*;

/// The join of `c` whose kernel handle is `handle` (a multicast event's `id`).
fn join_by_handle<'a>(c: &'a mut IdGuard<'_>, handle: u32) -> Option<&'a mut CJoin> {
    let IdGuard { st, .. } = c;
    let st = &mut **st;
    let id = st.id.as_ref()?;
    st.joins
        .iter_mut()
        .find(|j| id.multicast_handle(j.addr) == Some(handle))
}

/// Completes a MULTICAST_JOIN / MULTICAST_ERROR event of the join with kernel handle
/// `handle` as librdmacm does: `param.ud.private_data` is the join's `context`, and on JOIN
/// the id's QP (if it has one and the join is not send-only) is attached to the group the
/// event names; when that fails the event becomes MULTICAST_ERROR with the negative errno as
/// status.
pub(super) fn multicast_event(
    c: &mut IdGuard<'_>,
    ev: &mut rdma_cm_event,
    handle: u32,
    ud: Option<UdEventParam>,
) {
    let Some(addr) = join_by_handle(c, handle).map(|j| {
        // A write of a union field (of the `ud` member make_event wrote, or zeroed): safe.
        ev.param.ud.private_data = j.context;
        j.addr
    }) else {
        return;
    };
    if ev.event != CmEventKind::MULTICAST_JOIN.0 {
        return;
    }
    let r = match ud {
        Some(ud) => attach_join(c, addr, &ud),
        None => Err(einval("MULTICAST_JOIN without UD parameters")),
    };
    if let Err(e) = r {
        ev.event = CmEventKind::MULTICAST_ERROR.0;
        ev.status = -fail(&e);
    }
}

symver!(rdma_join_multicast => "RDMACM_1.0");
/// `rdma_join_multicast`: joins the group `addr` as a full member
/// ([`rdma_join_multicast_ex`] with `RDMA_MC_JOIN_FLAG_FULLMEMBER`).
///
/// # Safety
/// `id` is NULL or ours; `addr` NULL or a readable sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: [object] id; [in] addr.
    unsafe { join(id, addr, McJoinFlags::FULL_MEMBER, context) }
}

symver!(rdma_join_multicast_ex => "RDMACM_1.1");
/// `rdma_join_multicast_ex`: joins `attr.addr` with `attr.join_flags`. `comp_mask` must name
/// both fields (`EINVAL` otherwise; unknown bits `EOPNOTSUPP`, as librdmacm).
///
/// # Safety
/// `id` is NULL or ours; `attr` NULL or a readable `rdma_cm_join_mc_attr_ex` whose `addr` is
/// NULL or a readable sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut rdma_cm_id,
    attr: *mut rdma_cm_join_mc_attr_ex,
    context: *mut c_void,
) -> c_int {
    if attr.is_null() {
        set_errno(null_arg("rdma_cm_join_mc_attr_ex"));
        return -1;
    }
    // SAFETY: [in] attr, non-NULL.
    let a = unsafe { attr.read_unaligned() };
    let known = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
    if a.comp_mask & !known != 0 {
        return ret(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "rdma_join_multicast_ex: unknown comp_mask bits {:#x}",
                a.comp_mask & !known
            ),
        )));
    }
    if a.comp_mask != known {
        return ret(Err(einval(
            "rdma_join_multicast_ex: comp_mask must name both the address and the join flags",
        )));
    }
    let Ok(flags) = u16::try_from(a.join_flags) else {
        return ret(Err(einval(&format!(
            "rdma_join_multicast_ex: unknown join flags {}",
            a.join_flags
        ))));
    };
    // SAFETY: [object] id; [in] a.addr (the caller's contract).
    unsafe { join(id, a.addr, McJoinFlags(flags), context) }
}

/// # Safety
/// `id` is NULL or ours; `addr` NULL or a readable sockaddr.
unsafe fn join(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
    flags: McJoinFlags,
    context: *mut c_void,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    // SAFETY: [in] addr.
    let a = match unsafe { from_sockaddr(addr) } {
        Ok(Some(a)) => a,
        Ok(None) => return ret(Err(einval("rdma_join_multicast: NULL group address"))),
        Err(e) => return ret(Err(e)),
    };
    let r = c.id().and_then(|i| i.join_multicast(a, flags));
    let ud = match r {
        Ok(ud) => ud,
        Err(e) => return ret(Err(e)),
    };
    c.joins.push(CJoin {
        addr: a,
        context,
        flags,
        attached: None,
    });
    if let Some(ud) = ud {
        // A synchronous id waited for MULTICAST_JOIN: attach its QP now (the event itself is
        // not kept).
        if let Ok(i) = c.id() {
            drop(i.take_event());
        }
        if let Err(e) = attach_join(&mut c, a, &ud) {
            let n = fail(&e);
            if let Err(l) = leave_join(&mut c, a) {
                fail(&l);
            }
            set_errno(n);
            return -1;
        }
    }
    0
}

/// Attaches the id's QP (if any, and unless the join of `addr` is send-only) to the group of
/// `ud`.
fn attach_join(c: &mut IdGuard<'_>, addr: SocketAddr, ud: &UdEventParam) -> io::Result<()> {
    let qp = c.c.qp;
    let Some(j) = c.joins.iter_mut().find(|j| j.addr.ip() == addr.ip()) else {
        return Ok(());
    };
    if qp.is_null() || j.flags == McJoinFlags::SENDONLY_FULL_MEMBER {
        return Ok(());
    }
    // SAFETY: [object] the id's QP, made by rdma_create_qp (alive while the id has it).
    let Some(q) = (unsafe { ibverbs::CQp::from_c(qp) }) else {
        return Ok(());
    };
    let (gid, lid) = ud.mcast_group();
    q.qp.attach_mcast(&gid, lid)?;
    j.attached = Some((gid, lid));
    Ok(())
}

/// Detaches the id's QP from the group `addr` if it was attached, leaves it and forgets the
/// join (nothing for a group not joined); the first error (the leave is tried also when the
/// detach failed).
fn leave_join(c: &mut IdGuard<'_>, addr: SocketAddr) -> io::Result<()> {
    let qp = c.c.qp;
    let Some(k) = c.joins.iter().position(|j| j.addr.ip() == addr.ip()) else {
        return Ok(());
    };
    let j = c.joins.remove(k);
    let mut r = Ok(());
    if let (Some((gid, lid)), false) = (j.attached, qp.is_null()) {
        // SAFETY: [object] the id's QP.
        if let Some(q) = unsafe { ibverbs::CQp::from_c(qp) } {
            r = q.qp.detach_mcast(&gid, lid);
        }
    }
    let l = c.id().and_then(|i| i.leave_multicast(addr).map(drop));
    r.and(l)
}

symver!(rdma_leave_multicast => "RDMACM_1.0");
/// `rdma_leave_multicast`: detaches the id's QP from the group (if the join attached it) and
/// leaves it; `EADDRNOTAVAIL` for a group the id has not joined (as librdmacm).
///
/// # Safety
/// `id` is NULL or ours; `addr` NULL or a readable sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    // SAFETY: [in] addr.
    let a = match unsafe { from_sockaddr(addr) } {
        Ok(Some(a)) => a,
        Ok(None) => return ret(Err(einval("rdma_leave_multicast: NULL group address"))),
        Err(e) => return ret(Err(e)),
    };
    if !c.joins.iter().any(|j| j.addr.ip() == a.ip()) {
        fail(&einval(&format!(
            "rdma_leave_multicast: this id has not joined {}",
            a.ip()
        )));
        set_errno(libc::EADDRNOTAVAIL);
        return -1;
    }
    ret(leave_join(&mut c, a))
}
