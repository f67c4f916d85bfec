//! Completion queues (`ibv_cq`): create, resize, destroy, completion events, and the
//! polling and notification entries of the context's ops table.

use super::*;

/// An `ibv_cq` (room for an `ibv_cq_ex`, whose first fields are those of `ibv_cq`) and its
/// rverbs CQ.
#[repr(C)]
pub struct CCq {
    /// What C sees: an `ibv_cq`, or all of the `ibv_cq_ex` for a CQ made by
    /// `ibv_create_cq_ex` (\[c-struct\]).
    pub c: UnsafeCell<ibv_cq_ex>,
    /// The rverbs CQ.
    pub cq: Arc<Cq>,
    /// The extended CQ's polling state (`ibv_create_cq_ex` only, set once at creation).
    pub ex: OnceLock<Box<super::cq_ex::CqEx>>,
    /// Completion and async events handed to C and acknowledged: destroy waits for them.
    pub(super) events: EventCount,
}

from_c!(CCq => ibv_cq, "ibv_cq");

impl CCq {
    /// The C structure (\[c-struct\]: for raw reads and writes only).
    pub(crate) fn c_ptr(&self) -> *mut ibv_cq_ex {
        self.c.get()
    }
}

symver!(ibv_create_cq => "IBVERBS_1.1");
/// `ibv_create_cq`.
///
/// # Safety
/// `context` is an \[object\] context; `channel` is NULL or an \[object\] channel of this
/// context.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, null);
    // SAFETY: [object] channel (NULL allowed: no channel).
    let ch = unsafe { CChannel::from_c_or_none(channel) };
    match CCq::create(c, context, cqe, cq_context, ch, comp_vector) {
        Ok(cq) => cq,
        Err(e) => null_with(&e),
    }
}

impl CCq {
    /// The core of [`ibv_create_cq`]: `context` is the C pointer of `c`, `channel` the owner
    /// of the C channel (if any).
    fn create(
        c: &CContext,
        context: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: Option<&CChannel>,
        comp_vector: c_int,
    ) -> io::Result<*mut ibv_cq> {
        let (Ok(n), Ok(comp_vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ibv_create_cq: cqe {cqe}, comp_vector {comp_vector}: not negative"),
            ));
        };
        let opts = CqOptions {
            channel: channel.map(|ch| ch.ch.clone()),
            comp_vector,
        };
        let cq = Cq::create(&c.ctx, n, opts)?;
        let cch = channel.map_or(null_mut(), |ch| ch.c.get());
        if let Some(ch) = channel {
            // SAFETY: [c-struct] a raw write of our channel's C structure, serialised by
            // c_write.
            c_write(|| unsafe { (*ch.c.get()).refcnt += 1 });
        }
        // SAFETY: ibv_cq_ex is integers, pointers, NULL fn pointers (Option) and
        // zero-initialised pthread objects.
        let mut ic: ibv_cq_ex = unsafe { std::mem::zeroed() };
        ic.context = context;
        ic.channel = cch;
        ic.cq_context = cq_context;
        ic.handle = cq.handle();
        ic.cqe = cq.cqe() as c_int;
        let handle = cq.user_handle();
        let p = Box::into_raw(Box::new(CCq {
            c: UnsafeCell::new(ic),
            cq,
            ex: OnceLock::new(),
            events: EventCount::default(),
        }));
        cqs()
            .get_or_insert_with(HashMap::default)
            .insert(handle, CqPtr(p));
        Ok(p.cast())
    }
}

symver!(ibv_resize_cq => "IBVERBS_1.1");
/// `ibv_resize_cq`.
///
/// # Safety
/// `cq` is an \[object\] CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    if cqe <= 0 {
        return libc::EINVAL;
    }
    // SAFETY: [object] cq.
    let c = obj!(unsafe { CCq::from_c(cq) }, errno);
    match c.cq.resize(cqe as u32) {
        Ok(n) => {
            // SAFETY: [c-struct] a raw write, serialised by c_write.
            c_write(|| unsafe { (*c.c_ptr()).cqe = n as c_int });
            0
        }
        Err(e) => fail(&e),
    }
}

symver!(ibv_destroy_cq => "IBVERBS_1.1");
/// `ibv_destroy_cq`: `EBUSY` while a QP uses it. Waits until every completion and async
/// event delivered for the CQ was acknowledged (`ibv_ack_cq_events`,
/// `ibv_ack_async_event`), as libibverbs does.
///
/// # Safety
/// `cq` came from [`ibv_create_cq`] (\[destroy\]); on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: [destroy] cq.
    let c = obj!(unsafe { CCq::from_c(cq) }, errno);
    if Arc::strong_count(&c.cq) > 1 {
        return libc::EBUSY;
    }
    // Out of the registry first: no event is handed out for it afterwards ([registry]).
    if let Some(m) = cqs().as_mut() {
        m.remove(&c.cq.user_handle());
    }
    c.events.wait_acked();
    // SAFETY: [destroy] cq: boxed by ibv_create_cq ([owner]); `c` is not used any more.
    let b = unsafe { Box::from_raw(cq.cast::<CCq>()) };
    // SAFETY: [c-struct] a raw read of the channel we set at creation.
    let channel = unsafe { (*b.c.get()).channel };
    if !channel.is_null() {
        // SAFETY: the channel outlives its CQs (destroying it fails while they hold it);
        // [c-struct] a raw write, serialised by c_write.
        c_write(|| unsafe { (*channel).refcnt -= 1 });
    }
    drop(b);
    0
}

symver!(ibv_get_cq_event => "IBVERBS_1.1");
/// `ibv_get_cq_event`: reads one event from the channel (blocking unless the caller made
/// the fd non-blocking); 0, or -1 with errno. The CQ stays valid until the event is
/// acknowledged ([`ibv_ack_cq_events`]): destroying it waits for that.
///
/// # Safety
/// `channel` is an \[object\] channel; `cq` and `cq_context` are \[out\] pointers.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: [object] channel.
    let ch = obj!(unsafe { CChannel::from_c(channel) }, neg);
    if cq.is_null() || cq_context.is_null() {
        set_errno(null_arg("ibv_get_cq_event output"));
        return -1;
    }
    let p = loop {
        let mut buf = [0u8; 8];
        match rustix::io::read(ch.ch.as_fd(), &mut buf) {
            Ok(8) => {}
            Ok(_) => {
                set_errno(libc::EIO);
                return -1;
            }
            Err(e) => {
                set_errno(e.raw_os_error());
                return -1;
            }
        }
        let p = deliver_cq_event(u64::from_ne_bytes(buf));
        if !p.is_null() {
            break p;
        }
        // The event of a CQ being destroyed (out of the registry, not yet destroyed in the
        // kernel, which drops the events it still queues for it): skipped, as those are.
    };
    // SAFETY: the event was counted as delivered while the CQ was in the registry, so its
    // destroy waits for our caller's ack: the CQ is alive ([registry]).
    let c = unsafe { &*p };
    c.cq.event_received();
    // SAFETY: [out] cq and cq_context; [c-struct] a raw read of cq_context.
    unsafe {
        *cq = p.cast();
        *cq_context = (*c.c_ptr()).cq_context;
    }
    0
}

symver!(ibv_ack_cq_events => "IBVERBS_1.1");
/// `ibv_ack_cq_events`: acknowledges `nevents` events of `cq` (a destroy waiting for them
/// returns once all are).
///
/// # Safety
/// `cq` is an \[object\] CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // SAFETY: [object] cq.
    let c = obj!(unsafe { CCq::from_c(cq) }, unit);
    c.cq.ack_events(nevents);
    // SAFETY: [c-struct] the field libibverbs counts in, an aligned u32 of the live CQ.
    unsafe { add_to_c_counter(&raw mut (*c.c_ptr()).comp_events_completed, nevents) };
    c.events.ack(nevents);
}

// `ibv_wc` is the kernel's `ib_uverbs_wc` (which `RawWc` is) field for field, but for the
// two padding bytes at its end where `ib_uverbs_wc` has `port_num` and a reserved byte
// (the layout test checks `ibv_wc` against the header; `RawWc`'s offsets are asserted in
// rverbs-uverbs).
const _: () = {
    assert!(size_of::<ibv_wc>() == size_of::<RawWc>());
    assert!(std::mem::align_of::<ibv_wc>() == std::mem::align_of::<RawWc>());
    assert!(offset_of!(ibv_wc, imm_data) == 24 && offset_of!(ibv_wc, dlid_path_bits) == 45);
};

/// How many completions or work requests one step of the data path handles on the stack.
pub(super) const BATCH: usize = 16;

/// Polls up to `want` completions with `poll_raw` (`Cq::poll_raw`: rxe copies its ring
/// entries unchanged) into a stack buffer of `N` raw entries a step, and writes each polled
/// one out as an `ibv_wc` ([`to_ibv_wc`]: each field of the buffered entry read once, the
/// caller's entry written once, whole, and never read); returns how many.
///
/// Only the entries it returns are written, as rdma-core's providers do: a caller's array
/// past the returned count is not touched (programs pass a one-entry `ibv_wc` with a larger
/// `num_entries`, and work on rdma-core while at most one completion is ready). Polling
/// straight into the caller's array saved about 6 instructions per call but had to make the
/// entries it offered valid `RawWc`s first, i.e. write them all.
///
/// # Safety
/// `wc` is valid for writing `want` `ibv_wc`.
#[inline(always)]
unsafe fn poll_into<const N: usize>(
    mut poll_raw: impl FnMut(&mut [RawWc]) -> usize,
    want: usize,
    wc: *mut ibv_wc,
) -> usize {
    let mut buf = [RawWc::default(); N];
    let mut done = 0usize;
    while done < want {
        let n = (want - done).min(N);
        let got = poll_raw(&mut buf[..n]).min(n);
        for (i, w) in buf[..got].iter().enumerate() {
            let e = to_ibv_wc(w);
            // SAFETY: [out] wc has `want` entries and done + i < want, aligned for ibv_wc.
            unsafe { wc.add(done + i).write(e) };
        }
        done += got;
        if got < n {
            break;
        }
    }
    done
}

/// The `ibv_wc` of a polled entry: each field of `w` read once, the flags renumbered (kernel
/// → userspace), the immediate data left big-endian as on the wire and the invalidated rkey
/// in host order, as `ibv_wc` keeps them. `RawWc`'s `port_num` and `reserved` (rverbs' own
/// bit) fall in `ibv_wc`'s tail padding and are not copied.
#[inline(always)]
fn to_ibv_wc(w: &RawWc) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status,
        opcode: w.opcode,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: w.ex,
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags().bits(),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// `ops.poll_cq` (the inline `ibv_poll_cq`), through [`poll_into`]: a 4-entry stack buffer for
/// a caller asking for a few (the latency-bound case: zeroed with a few inline stores), a
/// `BATCH`-entry one for a larger request.
pub(super) unsafe extern "C" fn poll_cq_op(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    // SAFETY: [object] cq.
    let c = obj!(unsafe { CCq::from_c(cq) }, neg);
    let want = num_entries.max(0) as usize;
    // SAFETY: [out] num_entries writable ibv_wc.
    let done = unsafe {
        if want <= 4 {
            poll_into::<4>(|s| c.cq.poll_raw(s), want, wc)
        } else {
            poll_into::<BATCH>(|s| c.cq.poll_raw(s), want, wc)
        }
    };
    done as c_int
}

/// `ops.req_notify_cq`.
pub(super) unsafe extern "C" fn req_notify_cq_op(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: [object] cq.
    let c = obj!(unsafe { CCq::from_c(cq) }, errno);
    match c.cq.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        Err(e) => fail(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    /// The kernel's `IB_WC_WITH_IMM | IB_WC_WITH_INVALIDATE`: the second is 4 in the kernel's
    /// numbering and `IBV_WC_WITH_INV` (8) in the userspace one.
    const KFLAGS: u32 = 2 | 4;

    /// A ring entry as the kernel writes it: `n` in every word that identifies it, the
    /// flags [`KFLAGS`].
    fn raw(n: u32) -> RawWc {
        RawWc {
            wr_id: u64::from(n),
            byte_len: n,
            ex: n.to_be(),
            qp_num: n,
            wc_flags: KFLAGS,
            port_num: 1,
            ..Default::default()
        }
    }

    /// `ibv_poll_cq` into a C array: the completions polled are written, in steps of at most
    /// `N`, the flags renumbered, and no entry past the count returned is touched (as
    /// rdma-core's providers: a caller may pass one entry with a larger count).
    fn poll_into_case<const N: usize>(want: usize) {
        // 37 completions in the "ring".
        let mut ring = (0..37).map(raw).collect::<Vec<_>>().into_iter();
        let mut steps = Vec::new();
        let poll = |s: &mut [RawWc]| {
            steps.push(s.len());
            let mut n = 0;
            for slot in s.iter_mut() {
                let Some(w) = ring.next() else { break };
                *slot = w;
                n += 1;
            }
            n
        };
        // The caller's array, one entry longer than it says, every entry a canary.
        let mut wc = vec![MaybeUninit::<ibv_wc>::uninit(); want + 1];
        for e in &mut wc {
            // SAFETY: a valid ibv_wc (plain integers), written through the MaybeUninit.
            unsafe { ptr::write_bytes(e.as_mut_ptr(), 0xa5, 1) };
        }
        // SAFETY: `want` writable, aligned entries that nothing else touches.
        let got = unsafe { poll_into::<N>(poll, want, wc.as_mut_ptr().cast()) };
        assert_eq!(got, want.min(37), "want {want}");
        for (i, w) in wc[..got].iter().enumerate() {
            // SAFETY: written by poll_into.
            let w = unsafe { w.assume_init_ref() };
            let n = i as u32;
            assert_eq!((w.wr_id, w.byte_len, w.qp_num), (u64::from(n), n, n));
            assert_eq!(w.imm_data, n.to_be(), "immediate data stays big-endian");
            assert_eq!(w.wc_flags, 2 | 8, "flags in the userspace numbering");
        }
        for (i, c) in wc[got..].iter().enumerate() {
            // SAFETY: initialised above.
            let c = unsafe { c.assume_init_ref() };
            assert_eq!(
                (c.wr_id, c.wc_flags),
                (0xa5a5_a5a5_a5a5_a5a5, 0xa5a5_a5a5),
                "entry {} past the {got} returned (want {want}) was written",
                got + i
            );
        }
        assert!(steps.iter().all(|&s| s <= N), "{steps:?}");
    }

    #[test]
    fn poll_into_fills_the_callers_array_and_stops_at_the_end_of_the_ring() {
        // Every step size of the few-entry path (1 to 4), several steps, the ring's end.
        for want in [0usize, 1, 2, 3, 4, 5, 7, 16, 17, 40] {
            poll_into_case::<4>(want);
        }
        // The BATCH path: steps of up to 16.
        for want in [5usize, 16, 20, 40] {
            poll_into_case::<BATCH>(want);
        }
    }
}
