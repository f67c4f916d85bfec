//! Queue pairs (`ibv_qp`): create, modify, query, destroy, and the post entries of the
//! context's ops table.

use super::*;
use rverbs_uverbs::OpKind;

/// An `ibv_qp` (inside an `ibv_qp_ex`, which begins with it) and its rverbs QP.
#[repr(C)]
pub struct CQp {
    /// What C sees: `c.qp_base`, and for a QP made by `ibv_create_qp_ex` all of the
    /// `ibv_qp_ex` (\[c-struct\]).
    pub c: UnsafeCell<ibv_qp_ex>,
    /// The rverbs QP.
    pub qp: Arc<Qp>,
    /// The extended send API's state (`ibv_create_qp_ex` only, set once at creation).
    pub ex: OnceLock<Box<super::qp_ex::QpEx>>,
    /// Async events handed to C and acknowledged: destroy waits for them.
    pub(super) events: EventCount,
}

from_c!(CQp => ibv_qp, "ibv_qp");

impl CQp {
    /// The C structure (\[c-struct\]: for raw reads and writes only).
    pub(crate) fn c_ptr(&self) -> *mut ibv_qp_ex {
        self.c.get()
    }
}

symver!(ibv_create_qp => "IBVERBS_1.1");
/// `ibv_create_qp`: RC, UC and UD; writes the granted capabilities back into
/// `init_attr.cap`.
///
/// # Safety
/// `pd` is ours; `init_attr` is readable and writable and names CQs (and an SRQ) of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, null);
    // SAFETY: [in] [out] init_attr.
    let Some(a) = (unsafe { init_attr.as_mut() }) else {
        set_errno(null_arg("ibv_qp_init_attr"));
        return null_mut();
    };
    // SAFETY: [in] init_attr names [object] CQs (NULL is refused).
    let scq = obj!(unsafe { CCq::from_c(a.send_cq) }, null);
    // SAFETY: as above.
    let rcq = obj!(unsafe { CCq::from_c(a.recv_cq) }, null);
    let srq = match a.srq.is_null() {
        true => None,
        // SAFETY: [in] init_attr names an [object] SRQ.
        false => Some(obj!(unsafe { CSrq::from_c(a.srq) }, null)),
    };
    match CQp::create(p, a, scq, rcq, srq) {
        Ok(q) => q,
        Err(e) => null_with(&e),
    }
}

impl CQp {
    /// The core of [`ibv_create_qp`]: `a` with its CQs and SRQ looked up (`pd` owns `a.pd`'s
    /// place in the new `ibv_qp`); writes the granted capabilities into `a.cap`.
    fn create(
        pd: &CPd,
        a: &mut ibv_qp_init_attr,
        send_cq: &CCq,
        recv_cq: &CCq,
        srq: Option<&CSrq>,
    ) -> io::Result<*mut ibv_qp> {
        let qp_type = u8::try_from(a.qp_type).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ibv_create_qp: qp_type {} is not a QP type", a.qp_type),
            )
        })?;
        let init = QpInit {
            qp_type: QpType(qp_type),
            send_cq: send_cq.cq.clone(),
            recv_cq: recv_cq.cq.clone(),
            srq: srq.map(|s| s.srq.clone()),
            caps: caps_from_c(&a.cap, srq.is_some()),
            sq_sig_all: a.sq_sig_all != 0,
        };
        let qp = Qp::create(&pd.pd, init)?;
        a.cap = caps_to_c(&qp.caps());
        // SAFETY: integers, pointers, zeroed pthread objects.
        let mut c: ibv_qp = unsafe { std::mem::zeroed() };
        c.context = pd.context();
        c.qp_context = a.qp_context;
        c.pd = pd.c_ptr();
        c.send_cq = a.send_cq;
        c.recv_cq = a.recv_cq;
        c.srq = a.srq;
        c.handle = qp.handle();
        c.qp_num = qp.qp_num();
        c.state = u32::from(QpState::RESET.0);
        c.qp_type = a.qp_type;
        let h = qp.user_handle();
        let p = Box::into_raw(Box::new(CQp {
            c: UnsafeCell::new(ibv_qp_ex::from_base(c)),
            qp,
            ex: OnceLock::new(),
            events: EventCount::default(),
        }));
        register(QP, h, p as usize);
        Ok(p.cast())
    }

    /// The core of [`ibv_query_qp`]: every attribute, and the creation attributes (those C
    /// gave, read back from the `ibv_qp`, with today's capabilities). Keeps `ibv_qp.state`
    /// current, as libibverbs does.
    fn query(&self) -> io::Result<(ibv_qp_attr, ibv_qp_init_attr)> {
        let i = self.qp.query()?;
        let cap = caps_to_c(&i.caps);
        let o = ibv_qp_attr {
            qp_state: u32::from(i.state.0),
            cur_qp_state: u32::from(i.cur_state.0),
            path_mtu: u32::from(i.path_mtu.0),
            path_mig_state: 0,
            qkey: i.qkey,
            rq_psn: i.rq_psn,
            sq_psn: i.sq_psn,
            dest_qp_num: i.dest_qp_num,
            qp_access_flags: i.access_flags.bits(),
            cap,
            ah_attr: ah_attr_to(&i.ah_attr),
            alt_ah_attr: ibv_ah_attr::default(),
            pkey_index: i.pkey_index,
            alt_pkey_index: 0,
            en_sqd_async_notify: 0,
            sq_draining: u8::from(i.sq_draining),
            max_rd_atomic: i.max_rd_atomic,
            max_dest_rd_atomic: i.max_dest_rd_atomic,
            min_rnr_timer: i.min_rnr_timer,
            port_num: i.port_num,
            timeout: i.timeout,
            retry_cnt: i.retry_cnt,
            rnr_retry: i.rnr_retry,
            alt_port_num: 0,
            alt_timeout: 0,
            rate_limit: 0,
        };
        let qp = self.c_ptr().cast::<ibv_qp>();
        // SAFETY: [c-struct] a raw write of our live QP's C structure (the ibv_qp begins
        // the ibv_qp_ex), serialised by c_write.
        c_write(|| unsafe { (*qp).state = o.qp_state });
        // SAFETY: [c-struct] raw reads of fields set at creation and never written again.
        let ia = unsafe {
            ibv_qp_init_attr {
                qp_context: (*qp).qp_context,
                send_cq: (*qp).send_cq,
                recv_cq: (*qp).recv_cq,
                srq: (*qp).srq,
                cap,
                qp_type: (*qp).qp_type,
                sq_sig_all: c_int::from(i.sq_sig_all),
            }
        };
        Ok((o, ia))
    }
}

/// The rverbs capabilities a C `ibv_qp_cap` asks for. With an SRQ the receive fields are
/// ignored, as `ibv_create_qp(3)` says (the QP has no receive queue of its own: rdma-core's
/// providers and the kernel ignore them too), where rverbs' `Qp::create` refuses a nonzero
/// `max_recv_wr` beside an SRQ; the granted receive capabilities read back as 0 then.
pub(crate) fn caps_from_c(c: &ibv_qp_cap, has_srq: bool) -> QpCaps {
    QpCaps {
        max_send_wr: c.max_send_wr,
        max_recv_wr: if has_srq { 0 } else { c.max_recv_wr },
        max_send_sge: c.max_send_sge,
        max_recv_sge: if has_srq { 0 } else { c.max_recv_sge },
        max_inline_data: c.max_inline_data,
    }
}

/// The C `ibv_qp_cap` of rverbs capabilities.
pub(crate) fn caps_to_c(c: &QpCaps) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

pub(super) fn ah_attr_from(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: a.grh.dgid.raw,
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
    }
}

pub(crate) fn ah_attr_to(a: &AhAttr) -> ibv_ah_attr {
    let g = a.grh.unwrap_or_default();
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: g.dgid },
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: u8::from(a.grh.is_some()),
        port_num: a.port_num,
    }
}

/// The `ibv_qp_attr_mask` bits [`ibv_modify_qp`] carries.
const MODIFY_SUPPORTED: u32 = QpAttrMask::STATE.bits()
    | QpAttrMask::CUR_STATE.bits()
    | QpAttrMask::EN_SQD_ASYNC_NOTIFY.bits()
    | QpAttrMask::ACCESS_FLAGS.bits()
    | QpAttrMask::PKEY_INDEX.bits()
    | QpAttrMask::PORT.bits()
    | QpAttrMask::QKEY.bits()
    | QpAttrMask::AV.bits()
    | QpAttrMask::PATH_MTU.bits()
    | QpAttrMask::TIMEOUT.bits()
    | QpAttrMask::RETRY_CNT.bits()
    | QpAttrMask::RNR_RETRY.bits()
    | QpAttrMask::RQ_PSN.bits()
    | QpAttrMask::MAX_QP_RD_ATOMIC.bits()
    | QpAttrMask::MIN_RNR_TIMER.bits()
    | QpAttrMask::SQ_PSN.bits()
    | QpAttrMask::MAX_DEST_RD_ATOMIC.bits()
    | QpAttrMask::DEST_QPN.bits();

/// The rverbs attributes of a C modify: one `Some` per mask bit.
fn qp_attr_from(a: &ibv_qp_attr, mask: u32) -> QpAttr {
    let on = |m: QpAttrMask| mask & m.bits() != 0;
    QpAttr {
        qp_state: on(QpAttrMask::STATE).then_some(QpState(a.qp_state as u8)),
        cur_qp_state: on(QpAttrMask::CUR_STATE).then_some(QpState(a.cur_qp_state as u8)),
        en_sqd_async_notify: on(QpAttrMask::EN_SQD_ASYNC_NOTIFY)
            .then_some(a.en_sqd_async_notify != 0),
        access_flags: on(QpAttrMask::ACCESS_FLAGS)
            .then_some(AccessFlags::from_bits_retain(a.qp_access_flags)),
        pkey_index: on(QpAttrMask::PKEY_INDEX).then_some(a.pkey_index),
        port_num: on(QpAttrMask::PORT).then_some(a.port_num),
        qkey: on(QpAttrMask::QKEY).then_some(a.qkey),
        ah_attr: on(QpAttrMask::AV).then(|| ah_attr_from(&a.ah_attr)),
        path_mtu: on(QpAttrMask::PATH_MTU).then_some(Mtu(a.path_mtu as u8)),
        timeout: on(QpAttrMask::TIMEOUT).then_some(a.timeout),
        retry_cnt: on(QpAttrMask::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: on(QpAttrMask::RNR_RETRY).then_some(a.rnr_retry),
        rq_psn: on(QpAttrMask::RQ_PSN).then_some(a.rq_psn),
        max_rd_atomic: on(QpAttrMask::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        min_rnr_timer: on(QpAttrMask::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        sq_psn: on(QpAttrMask::SQ_PSN).then_some(a.sq_psn),
        max_dest_rd_atomic: on(QpAttrMask::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        dest_qp_num: on(QpAttrMask::DEST_QPN).then_some(a.dest_qp_num),
    }
}

/// Applies rverbs attributes to our QP, keeping `ibv_qp.state` as libibverbs does; a
/// positive errno on failure.
///
/// # Safety
/// `qp` is a live QP of ours.
pub(crate) unsafe fn modify_qp_with(qp: *mut ibv_qp, a: &QpAttr) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    match q.qp.modify(a) {
        Ok(()) => {
            if let Some(st) = a.qp_state {
                // SAFETY: [object] qp; [c-struct] a raw write (libibverbs updates this field
                // the same way), serialised by c_write.
                c_write(|| unsafe { (*qp).state = u32::from(st.0) });
            }
            0
        }
        Err(e) => fail(&e),
    }
}

/// iWARP: records the RTS the rdma_cm's iw_cm gave the QP, with no kernel command
/// ([`Qp::note_iwarp_connected`](rverbs_uverbs::qp::Qp::note_iwarp_connected) says why),
/// keeping `ibv_qp.state` as [`modify_qp_with`] does; a positive errno on failure.
///
/// # Safety
/// `qp` is a live QP of ours.
pub(crate) unsafe fn note_iwarp_connected(qp: *mut ibv_qp) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    match q.qp.note_iwarp_connected() {
        Ok(()) => {
            // SAFETY: [object] qp; [c-struct] a raw write, as in modify_qp_with, serialised
            // by c_write.
            c_write(|| unsafe { (*qp).state = u32::from(QpState::RTS.0) });
            0
        }
        Err(e) => fail(&e),
    }
}

symver!(ibv_modify_qp => "IBVERBS_1.1");
/// `ibv_modify_qp`: positive errno on failure. Alternate paths, path migration, `IBV_QP_CAP`
/// and rate limits are `EOPNOTSUPP`.
///
/// # Safety
/// `qp` is ours; `attr` is readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: [in] attr.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return null_arg("ibv_qp_attr");
    };
    let mask = mask as u32;
    if mask & !MODIFY_SUPPORTED != 0 {
        return libc::EOPNOTSUPP;
    }
    // SAFETY: [object] qp.
    unsafe { modify_qp_with(qp, &qp_attr_from(a, mask)) }
}

symver!(ibv_query_qp => "IBVERBS_1.1");
/// `ibv_query_qp`: fills every attribute (whatever `mask`) and `init_attr`.
///
/// # Safety
/// `qp` is ours; `attr` and `init_attr` are writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    if attr.is_null() || init_attr.is_null() {
        return null_arg("ibv_query_qp output");
    }
    match q.query() {
        Ok((o, ia)) => {
            // SAFETY: [out] attr and init_attr (non-NULL).
            unsafe {
                attr.write(o);
                init_attr.write(ia);
            }
            0
        }
        Err(e) => fail(&e),
    }
}

symver!(ibv_destroy_qp => "IBVERBS_1.1");
/// `ibv_destroy_qp`. Waits until every async event delivered for the QP was acknowledged
/// (`ibv_ack_async_event`), as libibverbs does.
///
/// # Safety
/// `qp` came from [`ibv_create_qp`] (\[destroy\]) and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: [destroy] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    // Out of the registry first: no event is handed out for it afterwards ([registry]).
    unregister(QP, q.qp.user_handle());
    q.events.wait_acked();
    // SAFETY: [destroy] qp: boxed by ibv_create_qp ([owner]); `q` is not used any more.
    drop(unsafe { Box::from_raw(qp.cast::<CQp>()) });
    0
}

/// One past the largest `IBV_WR_*` number of uverbs' operation kinds.
const OPCODES: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < OpKind::ALL.len() {
        let o = OpKind::ALL[i].wr_opcode() as usize;
        if o >= n {
            n = o + 1;
        }
        i += 1;
    }
    n
};

/// `IBV_WR_*` number → operation kind, made from uverbs' kinds ([`OpKind::wr_opcode`]): the
/// numbers are written in one place, uverbs' `op.rs`.
const KIND_OF_OPCODE: [Option<OpKind>; OPCODES] = {
    let mut t = [None; OPCODES];
    let mut i = 0;
    while i < OpKind::ALL.len() {
        let k = OpKind::ALL[i];
        t[k.wr_opcode() as usize] = Some(k);
        i += 1;
    }
    t
};

/// The operation kind of an `IBV_WR_*` number, `None` for a number no kind has.
#[inline(always)]
fn kind_of_opcode(opcode: u32) -> Option<OpKind> {
    KIND_OF_OPCODE.get(opcode as usize).copied().flatten()
}

/// The rverbs operation of a C send request, or `None` for an opcode we do not carry.
///
/// The `match` lists every [`OpKind`] (no `_` arm): a new operation in uverbs does not
/// compile here until this conversion says what `ibv_post_send` does with it.
///
/// # Safety
/// For UD QPs, `w.wr.ud.ah` is an AH of ours; for BIND_MW, `w.bind_mw` names a window and
/// region of ours.
unsafe fn send_op(w: &ibv_send_wr) -> Option<SendOp> {
    // SAFETY: reading a union of plain integers: every bit pattern is valid.
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    Some(match kind_of_opcode(w.opcode)? {
        OpKind::RdmaWrite => SendOp::RdmaWrite {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        OpKind::RdmaWriteWithImm => SendOp::RdmaWriteWithImm {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
            imm: u32::from_be(w.imm_data),
        },
        OpKind::Send => SendOp::Send,
        OpKind::SendWithImm => SendOp::SendWithImm {
            imm: u32::from_be(w.imm_data),
        },
        OpKind::RdmaRead => SendOp::RdmaRead {
            remote_addr: rdma.remote_addr,
            rkey: rdma.rkey,
        },
        OpKind::AtomicCmpSwp => SendOp::AtomicCmpSwp {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        OpKind::AtomicFetchAdd => SendOp::AtomicFetchAdd {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            add: atomic.compare_add,
        },
        OpKind::LocalInv => SendOp::LocalInv {
            invalidate_rkey: w.imm_data,
        },
        // SAFETY: [wr] a BIND_MW request names an [object] window (and region).
        OpKind::BindMw => return unsafe { super::mw::bind_op(w) },
        OpKind::SendWithInv => SendOp::SendWithInv {
            invalidate_rkey: w.imm_data,
        },
        // `ibv_send_wr` has no operands for these (a FLUSH's type and level, the 8 bytes of
        // an ATOMIC_WRITE): rdma-core posts them through the `ibv_wr_*` API only (librxe's
        // `ibv_post_send` refuses them), so do we (`qp_ex.rs`).
        OpKind::Flush | OpKind::AtomicWrite => return None,
    })
}

/// The rverbs request of one C send request, or `None` when it is malformed (an opcode we
/// do not carry, a negative or dangling SGE list, a UD request without an AH).
///
/// # Safety
/// `w` is a valid request (`ibv_post_send`'s contract): `sg_list` has `num_sge` entries;
/// for UD QPs `w.wr.ud.ah` is NULL or an AH of ours.
#[inline(always)]
unsafe fn send_wr(w: &ibv_send_wr, ud: bool) -> Option<SendWr<'_>> {
    // SAFETY: [wr] for UD QPs the request names an [object] AH (checked non-NULL below).
    let op = unsafe { send_op(w) }?;
    // SAFETY: [wr] sg_list has num_sge entries.
    let sge = unsafe { sge_list(w.sg_list, w.num_sge) }?;
    let ud_dest = if ud {
        // SAFETY: reading a union of plain data (a UD request uses its `ud` member).
        let u = unsafe { w.wr.ud };
        // SAFETY: [wr] a UD request's AH is an [object] AH (NULL refused).
        let a = unsafe { CAh::from_c(u.ah) }?;
        Some(a.ah.ud_dest(u.remote_qpn, u.remote_qkey))
    } else {
        None
    };
    Some(SendWr {
        wr_id: w.wr_id,
        op,
        sge,
        flags: SendFlags::from_bits_retain(w.send_flags),
        ud: ud_dest,
    })
}

/// `ops.post_send` (the inline `ibv_post_send`). A single request (the common case of
/// latency-bound programs) is converted and posted without the batch arrays; a list goes in
/// batches of `BATCH`. At a malformed request, the requests before it are posted and `*bad`
/// points at it (`EINVAL`), as rdma-core's providers do.
pub(super) unsafe extern "C" fn post_send_op(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    let ud = q.qp.qp_type() == QpType::UD;
    // SAFETY: [wr] wr is NULL or a valid request.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // SAFETY: [wr] as above; AHs of UD requests are [object] AHs.
        let Some(s) = (unsafe { send_wr(w, ud) }) else {
            // SAFETY: [out] bad.
            unsafe { *bad = wr };
            return libc::EINVAL;
        };
        // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid until the
        // completions are polled, and INLINE sources are not written during the call (C code
        // that writes them concurrently races libibverbs' own copy just the same).
        return match unsafe { q.qp.post_send_raw(std::slice::from_ref(&s)) } {
            Ok(()) => 0,
            Err(e) => {
                // SAFETY: [out] bad.
                unsafe { *bad = wr };
                fail(&io::Error::from(e))
            }
        };
    }
    while !wr.is_null() {
        let mut ptrs = [null_mut::<ibv_send_wr>(); BATCH];
        let mut wrs = [SendWr::send(0, &[]); BATCH];
        let mut n = 0;
        while n < BATCH && !wr.is_null() {
            // SAFETY: [wr] wr is a valid request.
            let w = unsafe { &*wr };
            // SAFETY: as above.
            let Some(s) = (unsafe { send_wr(w, ud) }) else {
                // The valid requests before it are posted (and rung) first, as rdma-core's
                // providers do: they post request by request and stop at the bad one.
                // SAFETY: as below; [out] bad.
                return match unsafe { post_sends(q, &wrs[..n], &ptrs[..n], bad) } {
                    0 => {
                        // SAFETY: [out] bad.
                        unsafe { *bad = wr };
                        libc::EINVAL
                    }
                    e => e,
                };
            };
            ptrs[n] = wr;
            wrs[n] = s;
            n += 1;
            wr = w.next;
        }
        // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid until the
        // completions are polled, and INLINE sources are not written during the call (C code
        // that writes them concurrently races libibverbs' own copy just the same); [out] bad.
        let r = unsafe { post_sends(q, &wrs[..n], &ptrs[..n], bad) };
        if r != 0 {
            return r;
        }
    }
    0
}

/// Posts `wrs`, converted from the C requests `ptrs` (one doorbell); 0, or the errno with
/// `*bad` at the first request not posted. Nothing to post is 0.
///
/// # Safety
/// As [`Qp::post_send_raw`](rverbs_uverbs::qp::Qp::post_send_raw) for `wrs` (\[registered\]
/// \[wr\]); `bad` is writable.
#[inline(always)]
unsafe fn post_sends(
    q: &CQp,
    wrs: &[SendWr<'_>],
    ptrs: &[*mut ibv_send_wr],
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    if wrs.is_empty() {
        return 0;
    }
    // SAFETY: the caller's promise.
    match unsafe { q.qp.post_send_raw(wrs) } {
        Ok(()) => 0,
        Err(e) => {
            let failed = e.posted().min(wrs.len() - 1);
            // SAFETY: [out] bad.
            unsafe { *bad = ptrs[failed] };
            fail(&io::Error::from(e))
        }
    }
}

/// `ops.post_recv` (the inline `ibv_post_recv`).
pub(super) unsafe extern "C" fn post_recv_op(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: [object] qp.
    let q = obj!(unsafe { CQp::from_c(qp) }, errno);
    // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid
    // until the completions are polled.
    unsafe { post_recv_list(wr, bad, |w| q.qp.post_recv_raw(w)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_are_uverbs_kinds_and_nothing_else() {
        for k in OpKind::ALL {
            assert_eq!(kind_of_opcode(k.wr_opcode()), Some(k), "{k}");
        }
        // rdma-core's numbers (enum ibv_wr_opcode of verbs.h).
        assert_eq!(kind_of_opcode(0), Some(OpKind::RdmaWrite));
        assert_eq!(kind_of_opcode(2), Some(OpKind::Send));
        assert_eq!(kind_of_opcode(9), Some(OpKind::SendWithInv));
        assert_eq!(kind_of_opcode(15), Some(OpKind::AtomicWrite));
        // IBV_WR_TSO, IBV_WR_DRIVER1, gaps, past the end.
        for n in [10, 11, 12, 13, 16, 255, u32::MAX] {
            assert_eq!(kind_of_opcode(n), None, "{n}");
        }
    }
}
