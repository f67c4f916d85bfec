//! Memory windows (issue #15): type 1 bound with `Qp::bind_mw` and unbound with a zero-length
//! bind, type 2 bound with a BIND_MW work request (`Qp::bind_mw`, and a raw one in a list) and
//! invalidated by LOCAL_INV and by a peer's SEND_WITH_INV; RDMA WRITE and READ through a window's rkey, and what the peer sees after
//! the window is gone. Loopback only (two QPs on one device): the window logic is the
//! responder's and the same across devices.

use super::*;
use rverbs::uverbs::mr::register_raw;
use rverbs::uverbs::mw::{inc_rkey, Mw, MwBind, MwBinding, MwType};

/// Whether `pd`'s dropped regions with remote access wait for the QPs of the PD of then
/// (rverbs_uverbs' `ledger::Fence`): on rxe, whose deregistration waits for a packet in
/// progress only until a 50 s timeout (`__rxe_cleanup`), and on siw.
fn fenced(pd: &Pd) -> bool {
    let id = pd.context().device().driver_id();
    id == rverbs::uverbs::device::DriverId::RXE || id == rverbs::uverbs::device::DriverId::SIW
}

/// The loopback topology (the first one there is).
fn loopback() -> Topo {
    topologies().swap_remove(0)
}

const WIN: std::ops::Range<usize> = 4096..8192;
const RW: AccessFlags = AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_READ);

fn fast() -> Opts {
    Opts {
        path: FAST_FAIL,
        ..Opts::default()
    }
}

/// Posts `bind` with `bind_mw` on `qp` and checks the BIND_MW completion.
fn bind_ok(qp: &Qp, cq: &Cq, bind: MwBinding, wr_id: u64) {
    let (mw, rkey) = (bind.mw().clone(), bind.rkey());
    qp.bind_mw(bind, wr_id, SendFlags::SIGNALED)
        .unwrap_or_else(|e| panic!("bind {mw:?}: {e}"));
    assert_wc(&poll1(cq), wr_id, WcOpcode::BIND_MW);
    assert_eq!(mw.rkey(), rkey);
}

/// Posts the raw bind `raw` of `mw` as a BIND_MW work request in a list on `qp`, checks its
/// completion and notes its key in `mw`.
fn raw_bind_ok(qp: &Qp, cq: &Cq, mw: &Mw, raw: MwBind, wr_id: u64) {
    send_raw_ok(
        qp,
        &[SendWr {
            wr_id,
            op: SendOp::BindMw(raw),
            sge: &[],
            flags: SendFlags::SIGNALED,
            ud: None,
        }],
    );
    assert_wc(&poll1(cq), wr_id, WcOpcode::BIND_MW);
    mw.set_rkey(raw.rkey());
}

/// A writes `data` to `remote_addr` under `rkey`, then reads it back: returns both statuses
/// (the read is skipped once the write failed: the QP is then in ERR).
fn write_then_read(a: &End, remote_addr: u64, rkey: u32, data: &[u8]) -> WcStatus {
    a.mr.write_at(0, data);
    let s = [a.mr.sge(0..data.len())];
    let op = SendOp::RdmaWrite { remote_addr, rkey };
    send_ok(&a.qp, &[wr(11, op, &s)]);
    let w = poll1(&a.cq);
    if w.status != WcStatus::SUCCESS {
        return w.status;
    }
    let back = data.len()..2 * data.len();
    let d = [a.mr.sge(back.clone())];
    let op = SendOp::RdmaRead { remote_addr, rkey };
    send_ok(&a.qp, &[wr(12, op, &d)]);
    assert_wc(&poll1(&a.cq), 12, WcOpcode::RDMA_READ);
    assert_eq!(
        a.mr.read_vec(back),
        data,
        "read back through rkey {rkey:#x}"
    );
    WcStatus::SUCCESS
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn type1_window_write_read_unbind() {
    let t = loopback();
    let (a, b) = rc_pair(&t, &fast());
    let mr = reg(&b.side.pd, MR_LEN, ALL_ACCESS | AccessFlags::MW_BIND);
    let mw = Mw::alloc(&b.side.pd, MwType::TYPE_1).expect("alloc type 1 MW");
    assert_eq!(mw.mw_type(), MwType::TYPE_1);
    let bind = mw.bind_info(&mr, WIN, RW).expect("bind info");
    let bound_rkey = bind.rkey();
    assert_ne!(bound_rkey, mr.rkey());
    bind_ok(&b.qp, &b.cq, bind, 1);

    let base = mr.addr() + WIN.start as u64;
    let data = pattern(1, 512);
    assert_eq!(
        write_then_read(&a, base + 100, mw.rkey(), &data),
        WcStatus::SUCCESS
    );
    assert_eq!(mr.read_vec(WIN.start + 100..WIN.start + 612), data);
    // rxe's responder checks the access against the *region's* range, not the window's
    // (`check_rkey` → `mr_check_range`, 6.1 and 6.12): a write outside the window but inside
    // the region goes through. Why the safe API lets a window grant only the region's own
    // rights: this cannot reach more than the region's rkey already could.
    let outside = write_then_read(&a, mr.addr() + 64, mw.rkey(), b"outside the window");
    eprintln!("RDMA WRITE outside the window, inside the MR: {outside:?}");
    assert_eq!(outside, WcStatus::SUCCESS);
    assert_eq!(mr.read_vec(64..82), b"outside the window");

    // While bound, the region cannot be deregistered (IBA 10.6.7.2.6): checked on a raw
    // registration, whose deregister gives the region back.
    let buf = PageBuf::new(8192).unwrap();
    let addr = buf.as_slice().as_ptr() as u64;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND | RW;
    // SAFETY: `buf` outlives the registration (deregistered or dropped below, before `buf`).
    let raw = unsafe { register_raw(&b.side.pd, addr, 8192, access) }.expect("raw MR");
    let mw2 = Mw::alloc(&b.side.pd, MwType::TYPE_1).unwrap();
    // SAFETY: the range is inside `buf`, which stays allocated until the window is gone.
    let raw_bind = unsafe {
        MwBind::from_raw(
            MwType::TYPE_1,
            mw2.rkey(),
            inc_rkey(mw2.rkey()),
            raw.lkey(),
            addr,
            4096,
            RW,
        )
    };
    raw_bind_ok(&b.qp, &b.cq, &mw2, raw_bind, 2);
    let (raw, e) = raw
        .deregister()
        .expect_err("deregister with a bound window");
    let msg = e.to_string();
    assert!(msg.contains("memory window may still be bound"), "{msg}");
    assert!(msg.contains(&b.side.ctx.name().to_string()), "{msg}");
    // Deallocating the window unbinds it; then the region goes.
    drop(mw2);
    raw.deregister()
        .expect("deregister after the window is gone");
    drop(buf);

    // Unbind (zero-length bind): the old rkey fails at the responder.
    let unbind = mw.unbind_info().unwrap();
    bind_ok(&b.qp, &b.cq, unbind, 3);
    assert_eq!(
        write_then_read(&a, base, bound_rkey, b"gone"),
        WcStatus::REM_ACCESS_ERR
    );
    assert_eq!(
        mr.read_vec(WIN.start..WIN.start + 4),
        [0; 4],
        "written after unbind"
    );
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn type2_window_local_inv_and_send_with_inv() {
    let t = loopback();
    for remote in [false, true] {
        let (a, b) = rc_pair(&t, &fast());
        let mr = reg(&b.side.pd, MR_LEN, ALL_ACCESS | AccessFlags::MW_BIND);
        let mw = Mw::alloc(&b.side.pd, MwType::TYPE_2).expect("alloc type 2 MW");
        // A type 2 window is bound by a BIND_MW work request (Qp::bind_mw).
        let bind = mw.bind_info(&mr, WIN, RW).unwrap();
        bind_ok(&b.qp, &b.cq, bind, 1);
        let base = mr.addr() + WIN.start as u64;
        let data = pattern(2, 256);
        assert_eq!(
            write_then_read(&a, base, mw.rkey(), &data),
            WcStatus::SUCCESS
        );
        assert_eq!(mr.read_vec(WIN.start..WIN.start + 256), data);
        if remote {
            // The peer invalidates it with SEND_WITH_INV: B's receive says which rkey.
            let r = [b.mr.sge(0..64)];
            recv_ok(&b.qp, &[recv(7, &r)]);
            let s = [a.mr.sge(0..4)];
            let op = SendOp::SendWithInv {
                invalidate_rkey: mw.rkey(),
            };
            send_ok(&a.qp, &[wr(2, op, &s)]);
            assert_wc(&poll1(&a.cq), 2, WcOpcode::SEND);
            let rw = poll1(&b.cq);
            assert_wc(&rw, 7, WcOpcode::RECV);
            assert_eq!(rw.invalidated_rkey(), Some(mw.rkey()), "{rw:?}");
        } else {
            let op = SendOp::LocalInv {
                invalidate_rkey: mw.rkey(),
            };
            send_ok(&b.qp, &[wr(2, op, &[])]);
            assert_wc(&poll1(&b.cq), 2, WcOpcode::LOCAL_INV);
        }
        assert_eq!(
            write_then_read(&a, base, mw.rkey(), b"gone"),
            WcStatus::REM_ACCESS_ERR,
            "after {}",
            if remote { "SEND_WITH_INV" } else { "LOCAL_INV" }
        );
        assert_eq!(mr.read_vec(WIN.start..WIN.start + 4), &data[..4]);
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn window_errors_are_named_and_leak_nothing() {
    let t = loopback();
    let (_a, b) = rc_pair(&t, &fast());
    let dev = b.side.ctx.name().to_string();
    let fds = common::fd_count();
    // A type the kernel does not have.
    let e = Mw::alloc(&b.side.pd, MwType(3)).unwrap_err().to_string();
    assert!(e.contains("MwType 3") && e.contains(&dev), "{e}");
    assert!(e.contains("type must be 1 or 2"), "{e}");

    let mr = reg(&b.side.pd, MR_LEN, ALL_ACCESS | AccessFlags::MW_BIND);
    let mw = Mw::alloc(&b.side.pd, MwType::TYPE_1).unwrap();
    let expect = |r: rverbs::uverbs::Result<MwBinding>, what: &str| {
        let e = r.expect_err(what).to_string();
        assert!(e.contains(&dev) && e.contains("type 1 MW"), "{what}: {e}");
        e
    };
    // Past the region's end, and empty.
    let e = expect(
        mw.bind_info(&mr, MR_LEN - 8..MR_LEN + 8, RW),
        "past the end",
    );
    assert!(e.contains("outside the MR of 65536 bytes"), "{e}");
    expect(mw.bind_info(&mr, 10..10, RW), "empty range");
    // A region without MW_BIND.
    let e = expect(mw.bind_info(&b.mr, WIN, RW), "no MW_BIND");
    assert!(e.contains("without MW_BIND"), "{e}");
    // More remote rights than the region has.
    let ro = reg(
        &b.side.pd,
        4096 * 4,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::MW_BIND,
    );
    let e = expect(
        mw.bind_info(&ro, 0..4096, RW),
        "remote write on a read-only MR",
    );
    assert!(
        e.contains("REMOTE_WRITE") && e.contains("region's own"),
        "{e}"
    );
    // Bits a window cannot carry.
    for bad in [
        AccessFlags::ZERO_BASED,
        AccessFlags::from_bits_retain(1 << 15),
    ] {
        let e = expect(mw.bind_info(&mr, WIN, RW | bad), "bad access bit");
        assert!(e.contains("a window takes only"), "{e}");
    }
    // A region of another PD.
    let other_pd = Pd::alloc(&b.side.ctx).unwrap();
    let foreign = reg(&other_pd, 8192, ALL_ACCESS | AccessFlags::MW_BIND);
    let e = expect(mw.bind_info(&foreign, 0..4096, RW), "foreign PD MR");
    assert!(e.contains("belongs to PD handle"), "{e}");
    // A window of another PD than the QP's.
    let mw_other = Mw::alloc(&other_pd, MwType::TYPE_1).unwrap();
    let bind = mw_other.bind_info(&foreign, 0..4096, RW).unwrap();
    let e =
        b.qp.bind_mw(bind, 1, SendFlags::SIGNALED)
            .unwrap_err()
            .to_string();
    assert!(e.contains("the QP on PD handle") && e.contains(&dev), "{e}");
    // Unbinding a type 2 window.
    let mw2 = Mw::alloc(&b.side.pd, MwType::TYPE_2).unwrap();
    let e = mw2.unbind_info().unwrap_err().to_string();
    assert!(e.contains("type 2") && e.contains("invalidate"), "{e}");
    // None of these posted anything.
    assert_quiet(&b.cq, "refused binds");
    // A bind made before another bind of its window was posted names an older key.
    let first = mw.bind_info(&mr, WIN, RW).unwrap();
    let stale = mw.bind_info(&mr, WIN, RW).unwrap();
    bind_ok(&b.qp, &b.cq, first, 8);
    let e =
        b.qp.bind_mw(stale, 1, SendFlags::SIGNALED)
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("the bind was made for") && e.contains("posted since"),
        "{e}"
    );
    assert_quiet(&b.cq, "a stale bind");

    // What only the kernel sees: a raw bind past the region's end fails with MW_BIND_ERR.
    // SAFETY: the kernel refuses the bind (range outside the MR), so nothing is granted.
    let raw = unsafe {
        MwBind::from_raw(
            MwType::TYPE_1,
            mw.rkey(),
            inc_rkey(mw.rkey()),
            mr.lkey(),
            mr.addr() + MR_LEN as u64 - 8,
            16,
            RW,
        )
    };
    send_raw_ok(
        &b.qp,
        &[SendWr {
            wr_id: 9,
            op: SendOp::BindMw(raw),
            sge: &[],
            flags: SendFlags::SIGNALED,
            ud: None,
        }],
    );
    // 6.1: MW_BIND_ERR; 6.12 flushes the failed request with the rest of the queue, as for
    // every request that fails at the requester (errors::requester_local_error).
    let wc = poll1(&b.cq);
    let want = match super::errors::requester_local_error() {
        WcStatus::WR_FLUSH_ERR => WcStatus::WR_FLUSH_ERR,
        _ => WcStatus::MW_BIND_ERR,
    };
    eprintln!("raw bind past the MR's end: {wc:?}");
    assert_status(&wc, 9, want);
    drop((mw, mw2, mw_other));
    // Every window and region deregisters: nothing stayed bound. Where remote memory waits
    // for the PD's QPs (fenced), the regions of b's PD are deregistered but their memory is
    // not given back while b's QP lives: EBUSY, naming why.
    let waits = fenced(&b.side.pd);
    for (m, of_b) in [(mr, true), (ro, true), (foreign, false)] {
        match m.deregister() {
            Ok(_) => assert!(!(waits && of_b), "remote memory given back under a live QP"),
            Err(e) => {
                let e = e.to_string();
                assert!(waits && of_b, "deregister after the windows are gone: {e}");
                assert!(
                    e.contains("(EBUSY)") && e.contains("through a QP of its PD"),
                    "{e}"
                );
            }
        }
    }
    assert_eq!(common::fd_count(), fds, "descriptors leaked");
}

/// What each [`Watched`] buffer held when its memory was given back, by buffer id.
static FREED: std::sync::Mutex<Vec<(usize, Vec<u8>)>> = std::sync::Mutex::new(Vec::new());

/// Owned memory that records its bytes when it is given back (freed): shows when a region's
/// memory really went, and what had landed in it by then.
struct Watched {
    id: usize,
    bytes: Box<[u8]>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        FREED.lock().unwrap().push((self.id, self.bytes.to_vec()));
    }
}

// SAFETY: the Box's allocation given up whole (Box::into_raw) and taken back by
// Box::from_raw; the id travels in `extra`. Owned: leaking keeps the memory allocated.
unsafe impl rverbs::uverbs::mr::MrMemory for Watched {
    fn into_raw(self) -> rverbs::uverbs::mr::RawMemory {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again.
        let bytes = unsafe { std::ptr::read(&me.bytes) };
        let len = bytes.len();
        let p = Box::into_raw(bytes).cast::<u8>();
        rverbs::uverbs::mr::RawMemory {
            ptr: std::ptr::NonNull::new(p).unwrap(),
            len,
            extra: me.id,
        }
    }
    unsafe fn from_raw(raw: rverbs::uverbs::mr::RawMemory) -> Self {
        let p = std::ptr::slice_from_raw_parts_mut(raw.ptr.as_ptr(), raw.len);
        Watched {
            id: raw.extra,
            // SAFETY: the pointer Box::into_raw returned in into_raw.
            bytes: unsafe { Box::from_raw(p) },
        }
    }
}

/// The bytes buffer `id` held when it was freed, if it was.
fn freed(id: usize) -> Option<Vec<u8>> {
    let f = FREED.lock().unwrap();
    f.iter().find(|(i, _)| *i == id).map(|(_, b)| b.clone())
}

fn watched(pd: &Arc<Pd>, id: usize) -> Mr<Watched> {
    let w = Watched {
        id,
        bytes: vec![0u8; 2 * WIN.end].into_boxed_slice(),
    };
    Mr::register(pd, w, ALL_ACCESS | AccessFlags::MW_BIND).expect("register watched memory")
}

/// Issue #31: a window keeps every region it was bound into. The `Mr` dropped after the bind
/// frees nothing; a peer's RDMA WRITE through the window after that drop succeeds and lands in
/// memory the process still owns (its bytes are seen when it is finally freed); the memory
/// goes only when the window is deallocated. Type 1 (rebound from one region to another:
/// both kept) and type 2 (bound by a work request, then invalidated: kept until dealloc).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn window_keeps_its_regions_after_the_mr_is_dropped() {
    const ID: usize = 3100;
    let t = loopback();
    for mw_type in [MwType::TYPE_1, MwType::TYPE_2] {
        let id = ID + 10 * mw_type.0 as usize;
        let (a, b) = rc_pair(&t, &fast());
        let first = watched(&b.side.pd, id);
        let second = watched(&b.side.pd, id + 1);
        let mw = Mw::alloc(&b.side.pd, mw_type).expect("alloc MW");
        // Bound in `first`, then rebound in `second` (type 2 via a work request each time,
        // invalidated in between).
        for (n, mr) in [&first, &second].into_iter().enumerate() {
            let bind = mw.bind_info(mr, WIN, RW).unwrap();
            if mw_type == MwType::TYPE_2 && n > 0 {
                let op = SendOp::LocalInv {
                    invalidate_rkey: mw.rkey(),
                };
                send_ok(&b.qp, &[wr(20, op, &[])]);
                assert_wc(&poll1(&b.cq), 20, WcOpcode::LOCAL_INV);
            }
            bind_ok(&b.qp, &b.cq, bind, 1 + n as u64);
        }
        let base = second.addr() + WIN.start as u64;
        drop(first);
        drop(second);
        assert_eq!(
            freed(id),
            None,
            "{mw_type}: first region freed under its window"
        );
        assert_eq!(
            freed(id + 1),
            None,
            "{mw_type}: bound region freed under its window"
        );
        // The peer writes through the window after the user dropped the Mr.
        let data = pattern(7 + mw_type.0, 1024);
        assert_eq!(
            write_then_read(&a, base + 8, mw.rkey(), &data),
            WcStatus::SUCCESS,
            "{mw_type}: write through the window after the Mr's drop"
        );
        assert_eq!(
            freed(id + 1),
            None,
            "{mw_type}: freed before the window went"
        );
        let key = mw.rkey();
        drop(mw);
        // The window's key reaches nothing any more.
        assert_eq!(
            write_then_read(&a, base, key, b"x"),
            WcStatus::REM_ACCESS_ERR,
            "{mw_type}: write through the deallocated window"
        );
        if fenced(&b.side.pd) {
            // Deregistered with the window, but the memory of a remote region waits for the
            // QPs of its PD of then (rxe's deregistration waits for a packet in progress only
            // until a timeout): b's QP is the PD's only one.
            assert_eq!(
                freed(id + 1),
                None,
                "{mw_type}: a remote region freed while a QP of its PD lives"
            );
            drop(b);
        }
        let bytes = freed(id + 1).expect("the region is freed once its window is deallocated");
        assert_eq!(
            &bytes[WIN.start + 8..WIN.start + 8 + data.len()],
            &data[..],
            "{mw_type}: the write landed in the memory the process still owned"
        );
        assert!(freed(id).is_some(), "{mw_type}: the first region goes too");
    }
}

/// A `'static` borrow bound into a window: kept too (before the fix it was not: the `Mr`'s drop
/// deregistered under the bound window, which rxe refuses, and a failed deregistration of
/// borrowed memory aborts; `deregister` would have handed the borrow back while the window
/// still reached it).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn window_keeps_a_static_borrow() {
    let t = loopback();
    let (a, b) = rc_pair(&t, &fast());
    let mem: &'static mut [u8] = Box::leak(vec![0u8; 2 * WIN.end].into_boxed_slice());
    let mr = Mr::register(&b.side.pd, mem, ALL_ACCESS | AccessFlags::MW_BIND).unwrap();
    let mw = Mw::alloc(&b.side.pd, MwType::TYPE_1).unwrap();
    let bind = mw.bind_info(&mr, WIN, RW).unwrap();
    bind_ok(&b.qp, &b.cq, bind, 1);
    let base = mr.addr() + WIN.start as u64;
    let e = mr
        .deregister()
        .expect_err("deregister under a bound window must not give the borrow back");
    let msg = e.to_string();
    assert!(
        msg.contains("(EBUSY)") && msg.contains("memory window"),
        "{msg}"
    );
    assert_eq!(
        write_then_read(&a, base, mw.rkey(), b"still mine"),
        WcStatus::SUCCESS
    );
    drop(mw);
}

/// Issue #31: a posted bind keeps its window, and so the region it binds, until the bind is
/// over. The `Mw` and the `Mr` are dropped while the bind is posted and its completion not yet
/// polled: nothing is deallocated or freed (a window deallocated under a queued bind hands
/// its key to the next window, which the bind would then bind to whatever region got the
/// region's key). The region goes when the bind's completion is polled, or, never polled,
/// when the QP is destroyed.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_posted_bind_keeps_its_window_and_region_until_it_is_over() {
    const ID: usize = 3200;
    let t = loopback();
    for (n, poll) in [true, false].into_iter().enumerate() {
        let id = ID + n;
        let (a, b) = rc_pair(&t, &fast());
        let mr = watched(&b.side.pd, id);
        let mw = Mw::alloc(&b.side.pd, MwType::TYPE_1).expect("alloc MW");
        let bind = mw.bind_info(&mr, WIN, RW).unwrap();
        let key = bind.rkey();
        let base = mr.addr() + WIN.start as u64;
        b.qp.bind_mw(bind, 1, SendFlags::SIGNALED).unwrap();
        drop(mw);
        drop(mr);
        assert_eq!(
            freed(id),
            None,
            "region freed while its bind's completion was not yet polled"
        );
        if poll {
            assert_wc(&poll1(&b.cq), 1, WcOpcode::BIND_MW);
            // The window is gone: its key reaches nothing.
            assert_eq!(
                write_then_read(&a, base, key, b"x"),
                WcStatus::REM_ACCESS_ERR,
                "write through the deallocated window"
            );
            if fenced(&b.side.pd) {
                // Deregistered, but remote memory waits for the PD's QPs of then (b's).
                assert_eq!(
                    freed(id),
                    None,
                    "remote memory freed while a QP of its PD lives"
                );
                drop(b);
            }
            assert!(
                freed(id).is_some(),
                "the bind's completion lets go of the window and its region"
            );
        } else {
            // Never polled: the QP's destroy ends it.
            drop(b);
            assert!(
                freed(id).is_some(),
                "the QP's destroy lets go of what its bind kept"
            );
        }
    }
}
