//! Connections: connect, accept, reject, disconnect, options, migration, ports.

use super::*;

fn depth(v: u8) -> Option<u8> {
    (v != 0xff).then_some(v)
}

/// # Safety
/// `p` is NULL or a readable `rdma_conn_param` whose private data is readable.
unsafe fn conn_param(c: &IdGuard<'_>, p: *const rdma_conn_param) -> ConnParam {
    let mut cp = ConnParam::default();
    if !p.is_null() {
        // SAFETY: [in] p (non-NULL).
        let p = unsafe { &*p };
        if !p.private_data.is_null() && p.private_data_len > 0 {
            // SAFETY: [buf] private_data has private_data_len readable bytes.
            cp.private_data = unsafe {
                std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into())
            }
            .to_vec();
        }
        cp.responder_resources = depth(p.responder_resources);
        cp.initiator_depth = depth(p.initiator_depth);
        cp.flow_control = p.flow_control != 0;
        cp.retry_count = p.retry_count.min(7);
        cp.rnr_retry_count = p.rnr_retry_count.min(7);
        cp.srq = p.srq != 0;
        cp.qp_num = p.qp_num;
    }
    if !c.c.qp.is_null() {
        // SAFETY: [object] the id's QP; [c-struct] raw reads, no reference.
        let (qp_num, srq) = unsafe { ((*c.c.qp).qp_num, (*c.c.qp).srq) };
        cp.qp_num = qp_num;
        cp.srq = !srq.is_null();
    }
    cp
}

symver!(rdma_connect => "RDMACM_1.0");
/// `rdma_connect`. With a QP, synchronous ids move it to RTR/RTS between the peer's reply and
/// the RTU; asynchronous ids do it when `rdma_get_cm_event` reads CONNECT_RESPONSE.
///
/// # Safety
/// `id` is ours; `conn_param` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    // SAFETY: [in] conn_param (NULL allowed).
    let p = unsafe { self::conn_param(&c, conn_param) };
    let r = c.id().and_then(|i| {
        if i.is_sync() && !c.c.qp.is_null() {
            // On iWARP the hook does not run: ESTABLISHED comes instead of CONNECT_RESPONSE.
            i.connect_with(&p, |_, _| rtr_rts(&c))?;
            iwarp_established(&c)
        } else {
            i.connect(&p)
        }
    });
    ret(traced("rdma_connect", id as *const c_void, r))
}

symver!(rdma_establish => "RDMACM_1.2");
/// `rdma_establish`: sends the RTU after CONNECT_RESPONSE (ids whose QP the caller manages).
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    ret(c.id().and_then(|i| i.establish()))
}

symver!(rdma_accept => "RDMACM_1.0");
/// `rdma_accept`. With a (connected) QP, moves it to RTR and RTS first. On iWARP the accept
/// itself connects the QP (siw moves it to RTS and queues ESTABLISHED before the command
/// returns, so programs such as perftest post sends right after it): the RTS is recorded
/// then, for synchronous and asynchronous ids alike.
///
/// # Safety
/// `id` is ours; `conn_param` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    // SAFETY: [in] conn_param (NULL allowed).
    let p = unsafe { self::conn_param(&c, conn_param) };
    let r = (|| {
        if !c.c.qp.is_null() && c.c.qp_type != u32::from(QpType::UD.0) {
            rtr_rts(&c)?;
        }
        c.id()?.accept(&p)?;
        if c.c.qp_type != u32::from(QpType::UD.0) {
            iwarp_established(&c)?;
        }
        Ok(())
    })();
    ret(traced("rdma_accept", id as *const c_void, r))
}

symver!(rdma_reject => "RDMACM_1.0");
/// `rdma_reject`.
///
/// # Safety
/// `id` is ours; `private_data` NULL or `private_data_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    private_data_len: u8,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    let data: &[u8] = if private_data.is_null() {
        &[]
    } else {
        // SAFETY: [buf] private_data has private_data_len readable bytes.
        unsafe { std::slice::from_raw_parts(private_data.cast(), private_data_len.into()) }
    };
    ret(c.id().and_then(|i| i.reject(data)))
}

symver!(rdma_disconnect => "RDMACM_1.0");
/// `rdma_disconnect`: the QP (if any, connected) goes to ERR first.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    let r = (|| {
        if !c.c.qp.is_null() && c.c.qp_type != u32::from(QpType::UD.0) {
            modify_qp_plain(&c, QpState::ERR, IBV_QP_STATE)?;
        }
        c.id()?.disconnect()
    })();
    ret(traced("rdma_disconnect", id as *const c_void, r))
}

symver!(rdma_notify => "RDMACM_1.0");
/// `rdma_notify`.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    ret(c.id().and_then(|i| i.notify(event as u32)))
}

symver!(rdma_set_option => "RDMACM_1.0");
/// `rdma_set_option`: `RDMA_OPTION_ID` TOS, REUSEADDR, AFONLY, ACK_TIMEOUT; `RDMA_OPTION_IB`
/// PATH (passed to the kernel).
///
/// # Safety
/// `id` is ours; `optval` has `optlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    // SAFETY: [object] id.
    let c = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    if optval.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: [buf] optval has optlen readable bytes (NULL checked above).
    let v = unsafe { std::slice::from_raw_parts(optval.cast::<u8>(), optlen) };
    let int = || -> io::Result<c_int> {
        let b: [u8; 4] = v
            .try_into()
            .map_err(|_| einval("rdma_set_option: this option takes an int"))?;
        Ok(c_int::from_ne_bytes(b))
    };
    let byte = || -> io::Result<u8> {
        match v {
            [b] => Ok(*b),
            _ => Err(einval("rdma_set_option: this option takes a uint8_t")),
        }
    };
    let r = c.id().and_then(|i| match (level, optname) {
        (0, 0) => i.set_tos(byte()?),
        (0, 1) => i.set_reuseaddr(int()? != 0),
        (0, 2) => i.set_afonly(int()? != 0),
        (0, 3) => i.set_ack_timeout(byte()?),
        _ => i.set_option_raw(level as u32, optname as u32, v),
    });
    ret(r)
}

symver!(rdma_migrate_id => "RDMACM_1.0");
/// `rdma_migrate_id`: moves the id (and its events) to `channel`; NULL makes it synchronous.
///
/// # Safety
/// `id` is ours; `channel` NULL or ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    // SAFETY: [object] id.
    let mut g = obj!(unsafe { CCmId::from_c(id) }, neg).lock();
    let IdGuard { st, c, .. } = &mut g;
    let st = &mut **st;
    let Some(i) = st.id.as_mut() else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let to = if channel.is_null() {
        None
    } else {
        // SAFETY: [object] channel.
        Some(&obj!(unsafe { CEventChannel::from_c(channel) }, neg).ch)
    };
    if let Err(e) = i.migrate(to) {
        return ret(Err(e));
    }
    let old = st.own_channel;
    if channel.is_null() {
        let own = new_channel(i.event_channel());
        st.own_channel = own;
        c.channel = own.cast();
    } else {
        st.own_channel = null_mut();
        c.channel = channel;
    }
    if !old.is_null() {
        // SAFETY: [owner] the old private channel, boxed by wrap_id/here, no longer named by the id.
        drop(unsafe { Box::from_raw(old) });
    }
    0
}

symver!(rdma_get_src_port => "RDMACM_1.0");
/// `rdma_get_src_port`: the local port, network order.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: [object] id.
    unsafe { CCmId::from_c(id) }.map_or(0, |c| port_of(&c.lock().c.route.addr.src_storage))
}

symver!(rdma_get_dst_port => "RDMACM_1.0");
/// `rdma_get_dst_port`: the peer's port, network order.
///
/// # Safety
/// `id` is ours.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    // SAFETY: [object] id.
    unsafe { CCmId::from_c(id) }.map_or(0, |c| port_of(&c.lock().c.route.addr.dst_storage))
}

fn port_of(s: &libc::sockaddr_storage) -> u16 {
    // SAFETY: sockaddr_storage is large enough for either view.
    unsafe { from_sockaddr((s as *const libc::sockaddr_storage).cast()) }
        .ok()
        .flatten()
        .map_or(0, |a| a.port().to_be())
}
