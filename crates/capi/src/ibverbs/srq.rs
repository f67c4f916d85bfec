//! Shared receive queues (`ibv_srq`) and the receive-list conversion that QPs share.

use super::*;

/// An `ibv_srq` and its rverbs SRQ.
#[repr(C)]
pub struct CSrq {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_srq>,
    /// The rverbs SRQ.
    pub srq: Arc<Srq>,
    /// Async events handed to C and acknowledged: destroy waits for them.
    pub(super) events: EventCount,
}

from_c!(CSrq => ibv_srq, "ibv_srq");

symver!(ibv_create_srq => "IBVERBS_1.1");
/// `ibv_create_srq`; writes the granted sizes back into `attr.attr`.
///
/// # Safety
/// `pd` is ours; `attr` is readable and writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: [object] pd.
    let p = obj!(unsafe { CPd::from_c(pd) }, null);
    // SAFETY: [in] [out] attr.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        set_errno(null_arg("ibv_srq_init_attr"));
        return null_mut();
    };
    let want = SrqAttr {
        max_wr: a.attr.max_wr,
        max_sge: a.attr.max_sge,
        srq_limit: a.attr.srq_limit,
    };
    let srq = match Srq::create(&p.pd, want) {
        Ok(s) => s,
        Err(e) => return null_with(&e),
    };
    let got = srq.attr();
    a.attr.max_wr = got.max_wr;
    a.attr.max_sge = got.max_sge;
    // SAFETY: integers, pointers, zeroed pthread objects.
    let mut c: ibv_srq = unsafe { std::mem::zeroed() };
    c.context = p.context();
    c.srq_context = a.srq_context;
    c.pd = pd;
    c.handle = srq.handle();
    let h = srq.user_handle();
    let p = Box::into_raw(Box::new(CSrq {
        c: UnsafeCell::new(c),
        srq,
        events: EventCount::default(),
    }));
    register(SRQ, h, p as usize);
    p.cast()
}

symver!(ibv_modify_srq => "IBVERBS_1.1");
/// `ibv_modify_srq`: only the limit (`IBV_SRQ_LIMIT`) can change; `IBV_SRQ_MAX_WR` (resize)
/// is `EOPNOTSUPP`.
///
/// # Safety
/// `srq` is ours; `attr` is readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: [object] srq.
    let s = obj!(unsafe { CSrq::from_c(srq) }, errno);
    // SAFETY: [in] attr.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return null_arg("ibv_srq_attr");
    };
    if mask & 1 != 0 {
        return libc::EOPNOTSUPP;
    }
    if mask & 2 != 0 {
        if let Err(e) = s.srq.set_limit(a.srq_limit) {
            return fail(&e);
        }
    }
    0
}

symver!(ibv_query_srq => "IBVERBS_1.1");
/// `ibv_query_srq`.
///
/// # Safety
/// `srq` is ours; `attr` is writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: [object] srq.
    let s = obj!(unsafe { CSrq::from_c(srq) }, errno);
    match s.srq.query() {
        Ok(a) => {
            // SAFETY: [out] attr.
            unsafe {
                attr.write(ibv_srq_attr {
                    max_wr: a.max_wr,
                    max_sge: a.max_sge,
                    srq_limit: a.srq_limit,
                })
            };
            0
        }
        Err(e) => fail(&e),
    }
}

symver!(ibv_destroy_srq => "IBVERBS_1.1");
/// `ibv_destroy_srq`: `EBUSY` while a QP uses it. Waits until every async event delivered
/// for the SRQ was acknowledged (`ibv_ack_async_event`), as libibverbs does.
///
/// # Safety
/// `srq` came from [`ibv_create_srq`] (\[destroy\]); on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: [destroy] srq.
    let s = obj!(unsafe { CSrq::from_c(srq) }, errno);
    if Arc::strong_count(&s.srq) > 1 {
        return libc::EBUSY;
    }
    // Out of the registry first: no event is handed out for it afterwards ([registry]).
    unregister(SRQ, s.srq.user_handle());
    s.events.wait_acked();
    // SAFETY: [destroy] srq: boxed by ibv_create_srq ([owner]); `s` is not used any more.
    drop(unsafe { Box::from_raw(srq.cast::<CSrq>()) });
    0
}

/// A C request's gather/scatter list as rverbs' SGEs (`ibv_sge` is `Sge`), or
/// `None` when its count is negative or its pointer NULL with entries.
///
/// # Safety
/// `sg_list` has `num_sge` entries, alive for `'a`.
#[inline(always)]
pub(super) unsafe fn sge_list<'a>(sg_list: *const ibv_sge, num_sge: c_int) -> Option<&'a [Sge]> {
    if num_sge < 0 || (num_sge > 0 && sg_list.is_null()) {
        return None;
    }
    Some(if num_sge == 0 {
        &[]
    } else {
        // SAFETY: [wr] sg_list has num_sge readable entries (ibv_sge is Sge; its layout is in the layout test).
        unsafe { std::slice::from_raw_parts(sg_list, num_sge as usize) }
    })
}

/// The rverbs request of one C receive request, or `None` when its SGE list is negative
/// or dangling.
///
/// # Safety
/// `w` is a valid request: `sg_list` has `num_sge` entries.
#[inline(always)]
unsafe fn recv_wr(w: &ibv_recv_wr) -> Option<RecvWr<'_>> {
    // SAFETY: [wr] sg_list has num_sge entries.
    let sge = unsafe { sge_list(w.sg_list, w.num_sge) }?;
    Some(RecvWr {
        wr_id: w.wr_id,
        sge,
    })
}

/// Builds `RecvWr`s from a C list (a single request directly, a list `BATCH` at a time), and posts each batch with `post`.
/// Returns 0, or the errno with `*bad` set to the first request not posted; the requests
/// before a malformed one are posted (as rdma-core's providers do).
///
/// # Safety
/// `wr` is a valid NULL-terminated list whose SGEs name registered memory (the caller's
/// `ibv_post_recv` contract); `bad` is writable.
pub(super) unsafe fn post_recv_list(
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl Fn(&[RecvWr<'_>]) -> Result<(), rverbs_uverbs::PostError>,
) -> c_int {
    // One request (the common case): converted and posted without the batch arrays.
    // SAFETY: [wr] wr is NULL or a valid request.
    if let Some(w) = unsafe { wr.as_ref() }.filter(|w| w.next.is_null()) {
        // SAFETY: [wr] w's SGE list.
        let Some(r) = (unsafe { recv_wr(w) }) else {
            // SAFETY: [out] bad.
            unsafe { *bad = wr };
            return libc::EINVAL;
        };
        return match post(std::slice::from_ref(&r)) {
            Ok(()) => 0,
            Err(e) => {
                // SAFETY: [out] bad.
                unsafe { *bad = wr };
                fail(&io::Error::from(e))
            }
        };
    }
    while !wr.is_null() {
        let mut ptrs = [null_mut::<ibv_recv_wr>(); BATCH];
        let mut wrs = [RecvWr { wr_id: 0, sge: &[] }; BATCH];
        let mut n = 0;
        while n < BATCH && !wr.is_null() {
            // SAFETY: [wr] wr is a valid request.
            let w = unsafe { &*wr };
            // SAFETY: [wr] w's SGE list.
            let Some(r) = (unsafe { recv_wr(w) }) else {
                // The valid requests before it are posted first, as rdma-core's providers
                // do: they post request by request and stop at the bad one.
                // SAFETY: [out] bad.
                return match unsafe { post_recvs(&post, &wrs[..n], &ptrs[..n], bad) } {
                    0 => {
                        // SAFETY: [out] bad.
                        unsafe { *bad = wr };
                        libc::EINVAL
                    }
                    e => e,
                };
            };
            ptrs[n] = wr;
            wrs[n] = r;
            n += 1;
            wr = w.next;
        }
        // SAFETY: [out] bad.
        let r = unsafe { post_recvs(&post, &wrs[..n], &ptrs[..n], bad) };
        if r != 0 {
            return r;
        }
    }
    0
}

/// Posts `wrs`, converted from the C requests `ptrs`, with `post`; 0, or the errno with
/// `*bad` at the first request not posted. Nothing to post is 0.
///
/// # Safety
/// `bad` is writable.
#[inline(always)]
unsafe fn post_recvs(
    post: &impl Fn(&[RecvWr<'_>]) -> Result<(), rverbs_uverbs::PostError>,
    wrs: &[RecvWr<'_>],
    ptrs: &[*mut ibv_recv_wr],
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if wrs.is_empty() {
        return 0;
    }
    match post(wrs) {
        Ok(()) => 0,
        Err(e) => {
            let failed = e.posted().min(wrs.len() - 1);
            // SAFETY: [out] bad.
            unsafe { *bad = ptrs[failed] };
            fail(&io::Error::from(e))
        }
    }
}

/// `ops.post_srq_recv`.
pub(super) unsafe extern "C" fn post_srq_recv_op(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: [object] srq.
    let s = obj!(unsafe { CSrq::from_c(srq) }, errno);
    // SAFETY: [registered] [wr] the SGEs name registered memory that stays valid
    // until the completions are polled.
    unsafe { post_recv_list(wr, bad, |w| s.srq.post_recv_raw(w)) }
}
