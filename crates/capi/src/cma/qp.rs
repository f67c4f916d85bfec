//! QPs and SRQs of an id (`rdma_create_qp`, `rdma_create_srq`, …) and their state changes.

use super::*;

pub(super) const IBV_QP_STATE: c_int = 1;
const IBV_QP_SQ_PSN: c_int = 1 << 16;
const IBV_QP_INIT_ATTR_PD: u32 = 1;

/// Moves the id's QP to `state` with the attributes the kernel gives for it.
fn modify_qp_to(c: &IdGuard<'_>, state: QpState) -> io::Result<()> {
    let a = c.id()?.init_qp_attr(state)?;
    // SAFETY: [object] the id's QP, not destroyed during the call.
    let r = unsafe { ibverbs::modify_qp_with(c.c.qp, &a) };
    from_errno("rdma_cm: modify QP", r)
}

pub(super) fn modify_qp_plain(c: &IdGuard<'_>, state: QpState, mask: c_int) -> io::Result<()> {
    let mut attr = ibv_qp_attr {
        qp_state: u32::from(state.0),
        ..Default::default()
    };
    // SAFETY: [object] the id's QP, not destroyed during the call.
    let r = unsafe { ibverbs::ibv_modify_qp(c.c.qp, &mut attr, mask) };
    from_errno("rdma_cm: modify QP", r)
}

fn init_qp(c: &IdGuard<'_>) -> io::Result<()> {
    modify_qp_to(c, QpState::INIT)?;
    if c.c.qp_type == u32::from(QpType::UD.0) {
        modify_qp_plain(c, QpState::RTR, IBV_QP_STATE)?;
        modify_qp_plain(c, QpState::RTS, IBV_QP_STATE | IBV_QP_SQ_PSN)?;
    }
    Ok(())
}

/// INIT again (the attributes now reflect the peer's parameters: remote read access once
/// the peer may read), then RTR and RTS.
/// Whether the id's device is iWARP (siw, irdma, cxgb4): the iw_cm connects its QP (to RTS)
/// and reports ESTABLISHED, with no CONNECT_RESPONSE and no RTU.
pub(super) fn iwarp(c: &IdGuard<'_>) -> bool {
    let verbs = c.c.verbs;
    // SAFETY: [object] a non-NULL `verbs` of an id is the context our rdma_cm opened for it,
    // alive while the id is; its device is set at open and never changed.
    !verbs.is_null() && unsafe { (*(*verbs).device).transport_type } == 1
}

/// After ESTABLISHED on an iWARP id with a QP (and after `rdma_accept`): the kernel's QP is
/// in RTS already (the iw_cm moved it); the state is recorded on our side only, so sends are
/// accepted. Never a MODIFY_QP here: siw would hold its QP state lock for it, and the peer's
/// first message, which may arrive right then (perftest's client sends as soon as it sees
/// ESTABLISHED), would be left unread in the socket for good (`Qp::note_iwarp_connected`).
pub(super) fn iwarp_established(c: &IdGuard<'_>) -> io::Result<()> {
    if c.c.qp.is_null() || !iwarp(c) {
        return Ok(());
    }
    // SAFETY: [object] the id's QP, not destroyed during the call.
    let r = unsafe { ibverbs::note_iwarp_connected(c.c.qp) };
    from_errno("rdma_cm: record the iWARP QP's RTS", r)
}

pub(super) fn rtr_rts(c: &IdGuard<'_>) -> io::Result<()> {
    modify_qp_to(c, QpState::INIT)?;
    modify_qp_to(c, QpState::RTR)?;
    modify_qp_to(c, QpState::RTS)
}

fn destroy_cqs(c: &mut IdGuard<'_>) {
    // SAFETY: [destroy] CQs and channels the rdma_cm created for this id (the only ones stored here).
    unsafe {
        if !c.c.recv_cq.is_null() {
            ibverbs::ibv_destroy_cq(c.c.recv_cq);
        }
        if !c.c.send_cq.is_null() && c.c.send_cq != c.c.recv_cq {
            ibverbs::ibv_destroy_cq(c.c.send_cq);
        }
        if !c.c.recv_cq_channel.is_null() {
            ibverbs::ibv_destroy_comp_channel(c.c.recv_cq_channel);
        }
        if !c.c.send_cq_channel.is_null() && c.c.send_cq_channel != c.c.recv_cq_channel {
            ibverbs::ibv_destroy_comp_channel(c.c.send_cq_channel);
        }
    }
    c.c.recv_cq = null_mut();
    c.c.send_cq = null_mut();
    c.c.recv_cq_channel = null_mut();
    c.c.send_cq_channel = null_mut();
}

/// A completion channel and CQ for one side of the id (`cq_context` = the id, which
/// `rdma_get_send_comp`/`rdma_get_recv_comp` assert).
fn create_cq(c: &mut IdGuard<'_>, cqe: u32) -> io::Result<(*mut ibv_comp_channel, *mut ibv_cq)> {
    let ctx = c.c.verbs;
    // SAFETY: [object] the id's context (never closed).
    let ch = unsafe { ibverbs::ibv_create_comp_channel(ctx) };
    if ch.is_null() {
        return Err(io::Error::last_os_error());
    }
    let me = c.me.cast::<c_void>();
    // SAFETY: [object] ctx and ch.
    let cq = unsafe { ibverbs::ibv_create_cq(ctx, cqe.max(1) as c_int, me, ch, 0) };
    if cq.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: [destroy] just created, unused.
        unsafe { ibverbs::ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((ch, cq))
}

fn create_qp(c: &mut IdGuard<'_>, attr: &mut ibv_qp_init_attr_ex) -> io::Result<()> {
    if c.c.verbs.is_null() {
        if let Some(why) = &c.st.device_error {
            return Err(
                rverbs_uverbs::Error::os("rdma_create_qp", rustix::io::Errno::NODEV)
                    .with_detail(format!("the id's device cannot be opened: {why}"))
                    .into(),
            );
        }
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "rdma_create_qp: the id has no device yet (bind, resolve the address or take a \
             connection request first)",
        ));
    }
    if !c.c.qp.is_null() {
        return Err(einval("rdma_create_qp: the id already has a QP"));
    }
    if attr.qp_type == 0 {
        // Callers of rdma_create_ep often leave it zero: the id's type.
        attr.qp_type = c.c.qp_type;
    }
    let pd = if attr.comp_mask & IBV_QP_INIT_ATTR_PD != 0 && !attr.pd.is_null() {
        attr.pd
    } else {
        default_pd(c.c.verbs)?
    };
    // SAFETY: [object] pd.
    if unsafe { (*pd).context } != c.c.verbs {
        return Err(einval(
            "rdma_create_qp: the PD belongs to another device than the id",
        ));
    }
    if attr.recv_cq.is_null() {
        let (ch, cq) = create_cq(c, attr.cap.max_recv_wr)?;
        c.c.recv_cq_channel = ch;
        c.c.recv_cq = cq;
        attr.recv_cq = cq;
    }
    if attr.send_cq.is_null() {
        match create_cq(c, attr.cap.max_send_wr) {
            Ok((ch, cq)) => {
                c.c.send_cq_channel = ch;
                c.c.send_cq = cq;
                attr.send_cq = cq;
            }
            Err(e) => {
                destroy_cqs(c);
                return Err(e);
            }
        }
    }
    let mut plain = attr.base();
    if plain.srq.is_null() {
        plain.srq = c.c.srq;
    }
    // SAFETY: [object] pd; [in] plain names [object] CQs.
    let qp = unsafe { ibverbs::ibv_create_qp(pd, &mut plain) };
    if qp.is_null() {
        let e = io::Error::last_os_error();
        destroy_cqs(c);
        return Err(e);
    }
    attr.cap = plain.cap;
    c.c.qp = qp;
    c.c.pd = pd;
    if let Err(e) = init_qp(c) {
        // SAFETY: [destroy] just created.
        unsafe { ibverbs::ibv_destroy_qp(qp) };
        c.c.qp = null_mut();
        destroy_cqs(c);
        return Err(e);
    }
    Ok(())
}

symver!(rdma_create_qp_ex => "RDMACM_1.0");
/// `rdma_create_qp_ex`: the QP on the id's device, moved to INIT (UD: RTS). Missing CQs are
/// created (with completion channels) and owned by the id; no PD means the device's
/// default one.
///
/// # Safety
/// `id` is ours; `attr` readable and writable, naming objects of ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_init_attr_ex,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    // SAFETY: [in] [out] attr.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        set_errno(null_arg("ibv_qp_init_attr_ex"));
        return -1;
    };
    if a.comp_mask & !IBV_QP_INIT_ATTR_PD != 0 {
        return ret(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "rdma_create_qp_ex: comp_mask {:#x} (only IBV_QP_INIT_ATTR_PD is supported)",
                a.comp_mask
            ),
        )));
    }
    ret(create_qp(&mut c, a))
}

symver!(rdma_create_qp => "RDMACM_1.0");
/// `rdma_create_qp`: [`rdma_create_qp_ex`] with `pd`; the CQs used and the granted
/// capabilities are written back into `qp_init_attr`.
///
/// # Safety
/// As [`rdma_create_qp_ex`].
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    // SAFETY: [in] [out] qp_init_attr.
    let Some(a) = (unsafe { qp_init_attr.as_mut() }) else {
        set_errno(null_arg("ibv_qp_init_attr"));
        return -1;
    };
    let mut ex = ibv_qp_init_attr_ex::with_pd(a, pd);
    let r = create_qp(&mut c, &mut ex);
    if r.is_ok() {
        a.send_cq = ex.send_cq;
        a.recv_cq = ex.recv_cq;
        a.cap = ex.cap;
    }
    ret(r)
}

symver!(rdma_destroy_qp => "RDMACM_1.0");
/// `rdma_destroy_qp`: the QP and the CQs the rdma_cm created for it.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, unit).lock();
    if !c.c.qp.is_null() {
        // SAFETY: the id's QP, an [object] of ours.
        unsafe { ibverbs::ibv_destroy_qp(c.c.qp) };
        c.c.qp = null_mut();
    }
    destroy_cqs(&mut c);
}

symver!(rdma_init_qp_attr => "RDMACM_1.2");
/// `rdma_init_qp_attr`: the attributes (and mask) for `qp_attr.qp_state`.
///
/// # Safety
/// `id` is ours; `qp_attr` readable and writable; `qp_attr_mask` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    // SAFETY: [in] qp_attr.
    let state = unsafe { (*qp_attr).qp_state };
    let r = c.id().and_then(|i| i.init_qp_attr(QpState(state as u8)));
    match r {
        Ok(a) => {
            // SAFETY: [out] qp_attr and qp_attr_mask.
            unsafe {
                *qp_attr = to_ibv_qp_attr(&a);
                *qp_attr_mask = a.mask().bits() as c_int;
            }
            0
        }
        Err(e) => ret(Err(e)),
    }
}

/// The C view of the attributes `INIT_QP_ATTR` returned (fields outside the mask zero).
fn to_ibv_qp_attr(a: &rverbs_uverbs::qp::QpAttr) -> ibv_qp_attr {
    let mut o = ibv_qp_attr::default();
    let st = |s: Option<QpState>| s.map_or(0, |s| u32::from(s.0));
    o.qp_state = st(a.qp_state);
    o.cur_qp_state = st(a.cur_qp_state);
    o.en_sqd_async_notify = a.en_sqd_async_notify.map_or(0, u8::from);
    o.qp_access_flags = a.access_flags.map_or(0, |f| f.bits());
    o.pkey_index = a.pkey_index.unwrap_or(0);
    o.port_num = a.port_num.unwrap_or(0);
    o.qkey = a.qkey.unwrap_or(0);
    if let Some(ah) = &a.ah_attr {
        o.ah_attr = ibverbs::ah_attr_to(ah);
    }
    o.path_mtu = a.path_mtu.map_or(0, |m| u32::from(m.0));
    o.timeout = a.timeout.unwrap_or(0);
    o.retry_cnt = a.retry_cnt.unwrap_or(0);
    o.rnr_retry = a.rnr_retry.unwrap_or(0);
    o.rq_psn = a.rq_psn.unwrap_or(0);
    o.max_rd_atomic = a.max_rd_atomic.unwrap_or(0);
    o.min_rnr_timer = a.min_rnr_timer.unwrap_or(0);
    o.sq_psn = a.sq_psn.unwrap_or(0);
    o.max_dest_rd_atomic = a.max_dest_rd_atomic.unwrap_or(0);
    o.dest_qp_num = a.dest_qp_num.unwrap_or(0);
    o
}

symver!(rdma_create_srq => "RDMACM_1.0");
/// `rdma_create_srq`: an SRQ on the id's device (PD NULL: the default one), kept in
/// `id->srq` for the QP created next.
///
/// # Safety
/// `id` is ours; `pd` NULL or ours; `attr` readable and writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> c_int {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    let pd = if pd.is_null() {
        match default_pd(c.c.verbs) {
            Ok(p) => p,
            Err(e) => return ret(Err(e)),
        }
    } else {
        pd
    };
    // SAFETY: forwarded: [object] pd, [in] [out] attr.
    let srq = unsafe { ibverbs::ibv_create_srq(pd, attr) };
    if srq.is_null() {
        return -1;
    }
    c.c.srq = srq;
    c.c.pd = pd;
    0
}

/// `IBV_SRQ_INIT_ATTR_TYPE` and `IBV_SRQ_INIT_ATTR_PD` of `enum ibv_srq_init_attr_mask`.
const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// `IBV_SRQT_BASIC` of `enum ibv_srq_type`.
const IBV_SRQT_BASIC: u32 = 0;

symver!(rdma_create_srq_ex => "RDMACM_1.0");
/// `rdma_create_srq_ex`: [`rdma_create_srq`] with the extended attributes. Without
/// `IBV_SRQ_INIT_ATTR_TYPE` in `comp_mask`: `EINVAL`, as rdma-core. A basic SRQ only
/// (`IBV_SRQT_BASIC`; the PD from `attr->pd` with `IBV_SRQ_INIT_ATTR_PD`, else the device's
/// default one, written back with the bit as rdma-core does); XRC and tag-matching SRQs, and
/// any other `comp_mask` bit, fail with `EOPNOTSUPP`, as on a device without them.
///
/// # Safety
/// `id` is ours; `attr` readable and writable, its `pd` (with the bit) NULL or ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_srq_ex(
    id: *mut rdma_cm_id,
    attr: *mut ibv_srq_init_attr_ex,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg);
    // SAFETY: [in] [out] attr.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        set_errno(null_arg("ibv_srq_init_attr_ex"));
        return -1;
    };
    if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 {
        return ret(Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "rdma_create_srq_ex: comp_mask lacks IBV_SRQ_INIT_ATTR_TYPE",
        )));
    }
    let known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    if a.srq_type != IBV_SRQT_BASIC || a.comp_mask & !known != 0 {
        return ret(Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "rdma_create_srq_ex: srq_type {} comp_mask {:#x} (only a basic SRQ, with \
                 IBV_SRQ_INIT_ATTR_TYPE and IBV_SRQ_INIT_ATTR_PD)",
                a.srq_type, a.comp_mask
            ),
        )));
    }
    let pd = if a.comp_mask & IBV_SRQ_INIT_ATTR_PD != 0 {
        a.pd
    } else {
        null_mut()
    };
    let mut basic = ibv_srq_init_attr {
        srq_context: a.srq_context,
        attr: a.attr,
    };
    // SAFETY: forwarded: [object] id and pd; [in] [out] basic, a local.
    if unsafe { rdma_create_srq(id, pd, &mut basic) } != 0 {
        return -1;
    }
    a.attr = basic.attr;
    a.pd = c.lock().c.pd;
    a.comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    0
}

symver!(rdma_destroy_srq => "RDMACM_1.0");
/// `rdma_destroy_srq`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    // SAFETY: [object] id.
    let mut c = obj!(unsafe { CCmId::from_c(id) }, unit).lock();
    if !c.c.srq.is_null() {
        // SAFETY: [object] the id's SRQ.
        unsafe { ibverbs::ibv_destroy_srq(c.c.srq) };
        c.c.srq = null_mut();
    }
}
