//! A posted request keeps what it may write allocated (issue #31): a receive buffer or an RDMA
//! READ sink whose `Mr` is dropped while the request is outstanding is not given back to the
//! allocator before the request's completion is polled. A recording global allocator says
//! when the buffer is freed, so the order is checked, not timed. Runs in the VM on rxe, and in
//! the siw stage on siw (where deregistration does not stop a READ already placing data).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use common::{addrinfo, listener};
use rverbs_cm::{create_ep, ConnParam, Endpoint, EndpointAttr};
use rverbs_uverbs::device::DriverId;
use rverbs_uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::{PostFault, SendFlags, WcOpcode, WcStatus};

/// Watched allocations: a slot holds an address (0: free) and whether it was deallocated.
const SLOTS: usize = 8;
static WATCHED: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];
static FREED: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];

/// The system allocator, noting the deallocation of a watched address.
struct Recording;

// SAFETY: every call is forwarded to `System` unchanged; the bookkeeping only reads and
// writes atomics (no allocation, no lock).
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        for (w, f) in WATCHED.iter().zip(&FREED) {
            if w.load(Ordering::SeqCst) == ptr as usize {
                f.store(true, Ordering::SeqCst);
            }
        }
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Recording = Recording;

/// Watches the allocation at `addr`; the slot's "freed" flag.
fn watch(addr: u64) -> &'static AtomicBool {
    for (w, f) in WATCHED.iter().zip(&FREED) {
        if w.compare_exchange(0, addr as usize, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            f.store(false, Ordering::SeqCst);
            return f;
        }
    }
    panic!("more than {SLOTS} watched buffers");
}

/// Endpoints with separate CQs (the Endpoint's), 8 requests each way, sends signaled.
fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 16,
        },
        sq_sig_all: true,
    }
}

const RW: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE);

/// An endpoint for `id` in a PD of its own. Not `Endpoint::create`: that uses rverbs_cm's
/// default PD of the device, which every endpoint of this process on the device shares — the
/// other end of the pair on one node, and the endpoints of the tests that run at the same
/// time. On siw and rxe a deregistered remote region's memory waits for every QP of its PD
/// that existed at its deregistration (`fenced`), so with the shared PD whether it is freed
/// when this endpoint is dropped would depend on when the other tests' QPs are destroyed
/// (seen in the siw stage: "the sink was not freed when its QP was destroyed").
fn endpoint(id: rverbs_cm::CmId) -> Endpoint {
    let dev = id.query_addr().unwrap().ib_device_name().unwrap();
    let ctx = rverbs_provider::open_by_name(&dev).unwrap();
    let pd = rverbs_uverbs::pd::Pd::alloc(&ctx).unwrap();
    Endpoint::create_with_pd(id, &pd, &attr()).unwrap()
}

/// A connected pair over `port`, each end in a PD of its own: the server's endpoint goes to
/// `server` (in its thread), the client's is returned with the private data the server
/// accepted with.
fn pair(
    port: u16,
    server: impl FnOnce(Endpoint, &Barrier) + Send + 'static,
    private: Vec<u8>,
) -> (Endpoint, thread::JoinHandle<()>, Arc<Barrier>, Vec<u8>) {
    let lis = listener(port);
    let step = Arc::new(Barrier::new(2));
    let s2 = step.clone();
    let h = thread::spawn(move || {
        let req = lis.get_request().unwrap();
        let ep = endpoint(req);
        server(ep, &s2);
    });
    let ep = endpoint(create_ep(&addrinfo(port, false)[0]).unwrap());
    ep.connect(&ConnParam {
        private_data: private,
        ..Default::default()
    })
    .unwrap();
    let pdata = ep
        .id()
        .take_event()
        .map(|ev| ev.private_data().to_vec())
        .unwrap_or_default();
    (ep, h, step, pdata)
}

/// True on siw.
fn on_siw(ep: &Endpoint) -> bool {
    ep.pd().context().device().driver_id() == DriverId::SIW
}

/// Whether the endpoint's PD keeps a dropped remote region's memory (every READ sink, on
/// iWARP) until the QPs of then are destroyed (rverbs_uverbs' `ledger::Fence`): siw (its
/// deregistration waits for nothing) and rxe (its deregistration waits for a packet in progress
/// only until a 50 s timeout, `__rxe_cleanup`).
fn fenced(ep: &Endpoint) -> bool {
    let id = ep.pd().context().device().driver_id();
    id == DriverId::SIW || id == DriverId::RXE
}

/// A receive buffer whose `Mr` is dropped right after the post stays allocated until the
/// receive's completion is polled; then it is freed. (Before issue #31 the drop freed it at
/// once, while the receive could still be written.)
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_dropped_receive_buffer_is_freed_only_after_its_completion() {
    let (ep, server, step, _) = pair(
        7931,
        |ep, step| {
            ep.accept(&ConnParam::default()).unwrap();
            step.wait(); // the client's receive is posted and its Mr dropped
            ep.post_send_inline(1, b"ping", SendFlags::empty()).unwrap();
            assert_eq!(ep.get_send_comp().unwrap().status, WcStatus::SUCCESS);
            step.wait();
        },
        Vec::new(),
    );
    let buf = ep.reg_msgs(vec![0u8; 4096]).unwrap();
    let freed = watch(buf.addr());
    ep.post_recv(5, &[buf.sge(0..64)]).unwrap();
    drop(buf);
    assert!(
        !freed.load(Ordering::SeqCst),
        "a receive buffer was freed while its receive was posted"
    );
    step.wait();
    let wc = ep.get_recv_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (5, WcStatus::SUCCESS, WcOpcode::RECV)
    );
    assert!(
        freed.load(Ordering::SeqCst),
        "the receive buffer was not freed when its completion was polled"
    );
    unwatch(freed);
    step.wait();
    ep.disconnect().unwrap();
    server.join().unwrap();
}

/// A receive whose buffer was dropped and which never completes: freed when the QP is
/// destroyed (every provider stops placing data for a QP before its destroy returns).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_dropped_receive_buffer_is_freed_with_its_qp() {
    let (ep, server, step, _) = pair(
        7932,
        |ep, step| {
            ep.accept(&ConnParam::default()).unwrap();
            step.wait();
        },
        Vec::new(),
    );
    let buf = ep.reg_msgs(vec![0u8; 4096]).unwrap();
    let freed = watch(buf.addr());
    ep.post_recv(5, &[buf.sge(0..64)]).unwrap();
    drop(buf);
    assert!(!freed.load(Ordering::SeqCst));
    step.wait();
    ep.disconnect().unwrap();
    drop(ep);
    assert!(
        freed.load(Ordering::SeqCst),
        "the receive buffer was not freed when its QP was destroyed"
    );
    unwatch(freed);
    server.join().unwrap();
}

/// An RDMA READ's sink dropped right after the post stays allocated until the READ's
/// completion is polled, and the READ completes with its data: the region stays registered
/// meanwhile.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_dropped_read_sink_is_freed_only_after_its_completion() {
    let (ep, server, step, pdata) = pair(
        7933,
        |ep, step| {
            let src = Mr::register(ep.pd(), PageBuf::new(4096).unwrap(), RW).unwrap();
            src.write_at(0, b"from the server!");
            let mut pd = src.addr().to_le_bytes().to_vec();
            pd.extend_from_slice(&src.rkey().to_le_bytes());
            ep.accept(&ConnParam {
                private_data: pd,
                ..Default::default()
            })
            .unwrap();
            step.wait(); // the client has read
        },
        Vec::new(),
    );
    let raddr = u64::from_le_bytes(pdata[0..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(pdata[8..12].try_into().unwrap());
    // A sink registered for remote write, as iWARP requires of a READ's sink.
    let sink = ep.reg_remote(vec![0u8; 4096]).unwrap();
    let freed = watch(sink.addr());
    ep.post_read(7, &[sink.sge(0..16)], raddr, rkey, SendFlags::SIGNALED)
        .unwrap();
    drop(sink);
    assert!(
        !freed.load(Ordering::SeqCst),
        "a READ sink was freed while its READ was posted"
    );
    let wc = ep.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (7, WcStatus::SUCCESS, WcOpcode::RDMA_READ)
    );
    if fenced(&ep) {
        // The sink has REMOTE_WRITE (iWARP places a READ's response through its key): a peer
        // may still write it until the QP is destroyed (siw waits for nothing at
        // deregistration, rxe only until a timeout).
        assert!(
            !freed.load(Ordering::SeqCst),
            "a remote sink was freed on siw/rxe while its QP lives"
        );
    } else {
        assert!(
            freed.load(Ordering::SeqCst),
            "the sink was not freed when its READ's completion was polled"
        );
    }
    step.wait();
    ep.disconnect().unwrap();
    drop(ep);
    assert!(
        freed.load(Ordering::SeqCst),
        "the sink was not freed when its QP was destroyed"
    );
    unwatch(freed);
    server.join().unwrap();
}

/// Borrowed memory cannot wait for a request's end: a receive or READ into a region of
/// `Mr::scoped` is refused, naming the key, and nothing is posted.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn borrowed_memory_is_refused_as_a_sink() {
    let (ep, server, step, _) = pair(
        7934,
        |ep, step| {
            let buf = ep.reg_msgs(vec![0u8; 4096]).unwrap();
            ep.post_recv(9, &[buf.sge(0..64)]).unwrap();
            ep.accept(&ConnParam::default()).unwrap();
            assert_eq!(ep.get_recv_comp().unwrap().wr_id, 9);
            step.wait();
        },
        Vec::new(),
    );
    let mut local = [0u8; 64];
    let siw = on_siw(&ep);
    if fenced(&ep) {
        // siw does not fence a peer's transfer at deregistration, rxe only until a timeout
        // (before this was known, rxe took the registration): borrowed memory may not have
        // remote access there at all.
        let e = Mr::scoped(ep.pd(), &mut local[..], RW, |_| ()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
        assert!(e.to_string().contains("owned memory"), "{e}");
        let why = if siw {
            "siw does not wait for a peer's RDMA WRITE or READ in progress"
        } else {
            "rxe waits for a peer's RDMA WRITE, READ or atomic in progress only until a timeout"
        };
        assert!(e.to_string().contains(why), "{e}");
    }
    let access = if fenced(&ep) {
        AccessFlags::LOCAL_WRITE
    } else {
        RW
    };
    Mr::scoped(ep.pd(), &mut local[..], access, |mr| {
        let e = ep
            .qp()
            .post_recv(&[rverbs_uverbs::RecvWr::new(1, &[mr.sge(0..64)])]);
        let e = e.unwrap_err();
        assert_eq!(e.fault(), Some(PostFault::BorrowedSink { lkey: mr.lkey() }));
        assert_eq!(e.posted(), 0);
        assert!(e.to_string().contains("borrowed memory"), "{e}");
        if !siw {
            // (On iWARP a READ's sink needs REMOTE_WRITE, which this region lacks there.)
            let e = ep
                .post_read(2, &[mr.sge(0..8)], 0, 0, SendFlags::SIGNALED)
                .unwrap_err();
            assert!(e.to_string().contains("borrowed memory"), "{e}");
        }
        // A SEND from borrowed memory is fine: the device only reads it.
        ep.post_send(3, &[mr.sge(0..8)], SendFlags::SIGNALED)
            .unwrap();
        assert_eq!(ep.get_send_comp().unwrap().wr_id, 3);
    })
    .unwrap();
    step.wait();
    ep.disconnect().unwrap();
    server.join().unwrap();
}

/// The review's scenario (issue #31): a 96 KiB READ whose sink is dropped once its first bytes
/// have landed, then a fresh allocation of the same size. The sink stays allocated (and
/// registered) until the READ's completion is polled, so the fresh allocation is other memory
/// and stays untouched, and the READ completes with SUCCESS (the only outcome the protocol
/// leaves: nothing invalidated the sink). Repeated, since when the drop falls (before, during
/// or after the placement) is up to the device; each outcome is checked the same way.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_read_sink_dropped_mid_read_never_writes_a_fresh_allocation() {
    const LEN: usize = 96 * 1024;
    const ROUNDS: u64 = 20;
    let (ep, server, step, pdata) = pair(
        7935,
        |ep, step| {
            let src = Mr::register(ep.pd(), vec![0u8; LEN], RW).unwrap();
            src.fill(0..LEN, 0xa5);
            let mut pd = src.addr().to_le_bytes().to_vec();
            pd.extend_from_slice(&src.rkey().to_le_bytes());
            ep.accept(&ConnParam {
                private_data: pd,
                ..Default::default()
            })
            .unwrap();
            step.wait(); // the client is done
        },
        Vec::new(),
    );
    let raddr = u64::from_le_bytes(pdata[0..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(pdata[8..12].try_into().unwrap());
    for round in 0..ROUNDS {
        let sink = ep.reg_remote(vec![0u8; LEN]).unwrap();
        let freed = watch(sink.addr());
        ep.post_read(round, &[sink.sge(0..LEN)], raddr, rkey, SendFlags::SIGNALED)
            .unwrap();
        // Until the first byte lands (the READ's placement has begun) or the READ is over.
        let mut b = [0u8; 1];
        let mut polls = 0u64;
        while b[0] == 0 && polls < 1 << 24 {
            sink.read_at(0, &mut b);
            polls += 1;
        }
        drop(sink);
        let fresh = vec![0u8; LEN];
        assert!(
            !freed.load(Ordering::SeqCst),
            "round {round}: sink freed before its completion"
        );
        let wc = ep.get_send_comp().unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (round, WcStatus::SUCCESS, WcOpcode::RDMA_READ),
            "round {round}"
        );
        // On siw and rxe the sink (REMOTE_WRITE) waits for the QP's destroy instead (fenced).
        assert_eq!(
            freed.load(Ordering::SeqCst),
            !fenced(&ep),
            "round {round}: sink freed (true) or kept (false) after its completion"
        );
        let hit = fresh.iter().filter(|&&x| x != 0).count();
        assert_eq!(
            hit, 0,
            "round {round}: {hit} bytes of a fresh allocation written"
        );
        // The slot is reused by the next round.
        unwatch(freed);
    }
    step.wait();
    ep.disconnect().unwrap();
    server.join().unwrap();
}

/// A peer's RDMA WRITE names our rkey, not a request we posted, and siw's deregistration does
/// not wait for a WRITE that passed its key check and is still copying (`siw_proc_write`,
/// `siw_mr_drop_mem`), rxe's only until a 50 s timeout (`__rxe_cleanup`). So on siw and rxe a
/// region with remote access whose `Mr` is dropped is deregistered at once but its memory stays
/// allocated until the QPs of its PD of then are destroyed; elsewhere (mlx5: the firmware
/// destroys the mkey first) it is freed at the drop. Before issue #31 both freed it at the drop
/// (rxe until the fix for its timeout: this test failed there).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_dropped_remote_region_stays_allocated_while_a_peer_may_write_it() {
    // The server's region, watched: its "freed" flag comes to this thread.
    let (tx, rx) = std::sync::mpsc::channel::<&'static AtomicBool>();
    let (ep, server, step, pdata) = pair(
        7936,
        move |ep, step| {
            let region = ep.reg_remote(vec![0u8; 64 * 1024]).unwrap();
            let freed = watch(region.addr());
            tx.send(freed).unwrap();
            let msg = ep.reg_msgs(vec![0u8; 64]).unwrap();
            ep.post_recv(1, &[msg.sge(0..64)]).unwrap();
            let mut pd = region.addr().to_le_bytes().to_vec();
            pd.extend_from_slice(&region.rkey().to_le_bytes());
            ep.accept(&ConnParam {
                private_data: pd,
                ..Default::default()
            })
            .unwrap();
            // The client's SEND after its WRITE: the WRITE is placed (RDMA ordering).
            let wc = ep.get_recv_comp().unwrap();
            assert_eq!((wc.wr_id, wc.status), (1, WcStatus::SUCCESS));
            assert_eq!(region.read_vec(0..16), b"written by peer!");
            let fenced = fenced(&ep);
            drop(region);
            if fenced {
                assert!(
                    !freed.load(Ordering::SeqCst),
                    "siw/rxe: a region a peer may still write was freed while its QP lives"
                );
            } else {
                assert!(
                    freed.load(Ordering::SeqCst),
                    "the region was not freed at its drop (the device fences it)"
                );
            }
            step.wait(); // the client is done
            ep.disconnect().ok();
            drop(ep); // this QP is destroyed
            step.wait();
        },
        Vec::new(),
    );
    let freed = rx.recv().unwrap();
    let raddr = u64::from_le_bytes(pdata[0..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(pdata[8..12].try_into().unwrap());
    let src = ep.reg_msgs(vec![0u8; 64]).unwrap();
    src.write_at(0, b"written by peer!");
    ep.post_write(2, &[src.sge(0..16)], raddr, rkey, SendFlags::SIGNALED)
        .unwrap();
    ep.post_send(3, &[src.sge(0..16)], SendFlags::SIGNALED)
        .unwrap();
    for id in [2, 3] {
        let wc = ep.get_send_comp().unwrap();
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::SUCCESS));
    }
    step.wait();
    step.wait(); // the server's QP, its PD's only one (`pair`), is destroyed
    assert!(
        freed.load(Ordering::SeqCst),
        "the region was not freed when the QP that could reach it was destroyed"
    );
    ep.disconnect().ok();
    drop(ep);
    server.join().unwrap();
    unwatch(freed);
}

/// Gives back the slot of `freed`.
fn unwatch(freed: &AtomicBool) {
    for (w, f) in WATCHED.iter().zip(&FREED) {
        if std::ptr::eq(f, freed) {
            w.store(0, Ordering::SeqCst);
        }
    }
}
