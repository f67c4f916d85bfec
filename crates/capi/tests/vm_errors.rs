//! The C API's error paths, called from Rust through the exported functions and the ops
//! table exactly as C would: rdma-core's conventions (NULL + errno, positive errno, -1 +
//! errno), and nothing destroyed when a destroy is refused. Runs in every guest.

#![allow(unsafe_code)]

use std::ptr::{null, null_mut};

use rverbs_capi::abi::*;
use rverbs_capi::ibverbs::*;

mod common;
use common::{errno, open_dev_a};

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn errors_follow_rdma_core_conventions() {
    let ctx = open_dev_a();
    // SAFETY: every call below gets objects of ours, created here, and writable outputs.
    unsafe {
        // The async fd blocks, as libibverbs' does, until the caller makes it non-blocking;
        // then ibv_get_async_event returns -1 and EAGAIN once no event is queued.
        let afd = (*ctx).async_fd;
        let fl = libc::fcntl(afd, libc::F_GETFL);
        assert_eq!(fl & libc::O_NONBLOCK, 0, "async_fd blocks as libibverbs'");
        assert_eq!(libc::fcntl(afd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        let mut ev: ibv_async_event = std::mem::zeroed();
        let mut n = 0;
        while ibv_get_async_event(ctx, &mut ev) == 0 {
            ibv_ack_async_event(&mut ev);
            n += 1;
            assert!(n < 64, "endless async events");
        }
        assert_eq!(errno(), libc::EAGAIN);
        assert_eq!(libc::fcntl(afd, libc::F_SETFL, fl), 0);

        // Constructors: NULL and errno.
        assert!(ibv_create_cq(ctx, -1, null_mut(), null_mut(), 0).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        let mut buf = vec![0u8; 4096];
        let p = buf.as_mut_ptr().cast();
        // Another iova is taken (the device addresses the region there; rxe_datapath's
        // `iova` tests move bytes through one), except for on-demand paging.
        // (The iova keeps the address's offset in its page, as the kernel requires.)
        let iova = 0x7_0000_0000 + (p as u64 & 0xfff);
        let mr_iova = ibv_reg_mr_iova2(pd, p, 4096, iova, 1);
        assert!(!mr_iova.is_null(), "ibv_reg_mr_iova2: errno {}", errno());
        assert_eq!(
            (*mr_iova).addr,
            p,
            "ibv_mr.addr is the address, as libibverbs'"
        );
        assert_eq!((*mr_iova).length, 4096);
        assert_eq!(ibv_dereg_mr(mr_iova), 0);
        // IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND
        assert!(ibv_reg_mr_iova2(pd, p, 4096, iova, 1 | 0x40).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert!(ibv_reg_mr(pd, p, 0, 1).is_null(), "a zero-length MR");
        assert_eq!(errno(), libc::EINVAL);
        let mr = ibv_reg_mr(pd, p, 4096, 1);
        assert!(!mr.is_null());

        // Destroys refused while in use: positive EBUSY, object intact.
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY);
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 16, null_mut(), ch, 0);
        assert!(!cq.is_null());
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EBUSY);
        let mut ia = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: 2,
            sq_sig_all: 0,
        };
        let qp = ibv_create_qp(pd, &mut ia);
        assert!(!qp.is_null(), "ibv_create_qp: errno {}", errno());
        assert!(ia.cap.max_send_wr >= 4, "granted caps written back");
        assert_eq!(ibv_destroy_cq(cq), libc::EBUSY);

        // Posting on a QP in RESET: positive errno, bad_wr names the request.
        let mut sge = ibv_sge {
            addr: p as u64,
            length: 64,
            lkey: (*mr).lkey,
        };
        let mut wr: ibv_send_wr = std::mem::zeroed();
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = 2;
        let mut bad = null_mut();
        let post = (*ctx).ops.post_send.unwrap();
        assert_eq!(post(qp, &mut wr, &mut bad), libc::EINVAL);
        assert_eq!(bad, &raw mut wr);
        // An opcode rverbs does not carry (TSO), and a BIND_MW without a window: EINVAL,
        // bad_wr set.
        for op in [10, 8] {
            wr.opcode = op;
            bad = null_mut();
            assert_eq!(post(qp, &mut wr, &mut bad), libc::EINVAL, "opcode {op}");
            assert_eq!(bad, &raw mut wr);
        }

        // Memory windows: a type the kernel does not have is NULL + EINVAL; a window keeps
        // its PD (EBUSY); a bind on a QP that is not connected yet is a positive errno and
        // leaves the rkey alone.
        let alloc_mw = (*ctx).ops.alloc_mw.unwrap();
        let dealloc_mw = (*ctx).ops.dealloc_mw.unwrap();
        assert!(alloc_mw(pd, 3).is_null());
        assert_eq!(errno(), libc::EINVAL);
        let mw = alloc_mw(pd, 1);
        assert!(!mw.is_null(), "alloc_mw: errno {}", errno());
        assert_eq!(((*mw).mw_type, (*mw).pd, (*mw).context), (1, pd, ctx));
        let rkey = (*mw).rkey;
        let mut b = ibv_mw_bind {
            wr_id: 1,
            send_flags: 2,
            bind_info: ibv_mw_bind_info {
                mr,
                addr: p as u64,
                length: 64,
                mw_access_flags: 4,
            },
        };
        let bind_mw = (*ctx).ops.bind_mw.unwrap();
        assert_eq!(bind_mw(qp, mw, &mut b), libc::EINVAL);
        assert_eq!((*mw).rkey, rkey, "rkey unchanged by a refused bind");
        let mw2 = alloc_mw(pd, 2);
        assert!(!mw2.is_null());
        assert_eq!(dealloc_mw(mw2), 0);

        // Modify with a mask bit we do not carry (ALT_PATH), and an illegal transition.
        let mut a = ibv_qp_attr::default();
        assert_eq!(ibv_modify_qp(qp, &mut a, 1 << 14), libc::EOPNOTSUPP);
        a.qp_state = 3; // RESET -> RTS
        assert_eq!(ibv_modify_qp(qp, &mut a, 1), libc::EINVAL);
        assert_eq!((*qp).state, 0, "state unchanged after a failed modify");

        // Polling an empty CQ; arming it.
        let mut wc = [ibv_wc::default(); 4];
        assert_eq!(((*ctx).ops.poll_cq.unwrap())(cq, 4, wc.as_mut_ptr()), 0);
        assert_eq!(((*ctx).ops.req_notify_cq.unwrap())(cq, 0), 0);

        // GID queries: a bad port is -1 + errno; past the table too.
        let mut gid = [0u8; 16];
        assert_eq!(ibv_query_gid(ctx, 9, 0, &mut gid), -1);
        assert_ne!(errno(), 0);
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        assert_ne!(gid, [0; 16], "GID 1 is the RoCE v2 address");
        let mut e = ibv_gid_entry::default();
        assert_eq!(
            _ibv_query_gid_ex(ctx, 1, 100_000, &mut e, 0, 32),
            libc::ENODATA
        );

        // Now the teardown in order succeeds.
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY, "the window holds its PD");
        assert_eq!(dealloc_mw(mw), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
        let _ = null::<u8>();
    }
}

/// A function of rdma-core's own libibverbs.so.1 (loaded once with `dlopen`), the oracle of
/// the tests below.
///
/// # Safety
/// `F` is the function's C signature.
unsafe fn rdma_core<F: Copy>(name: &std::ffi::CStr) -> F {
    use std::sync::OnceLock;
    static LIB: OnceLock<usize> = OnceLock::new();
    let h = *LIB.get_or_init(|| {
        // SAFETY: dlopen of a system library by name; checked for NULL below.
        let h = unsafe {
            libc::dlopen(
                c"libibverbs.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            )
        };
        assert!(
            !h.is_null(),
            "rdma-core's libibverbs.so.1 is not installed (libibverbs1)"
        );
        h as usize
    });
    // SAFETY: h is a live handle (never closed).
    let p = unsafe { libc::dlsym(h as *mut libc::c_void, name.as_ptr()) };
    assert!(!p.is_null(), "{name:?} missing in rdma-core");
    assert_eq!(
        std::mem::size_of::<F>(),
        std::mem::size_of::<*mut libc::c_void>()
    );
    // SAFETY: a function pointer of the caller's signature (its contract).
    unsafe { std::mem::transmute_copy::<*mut libc::c_void, F>(&p) }
}

/// `ibv_copy_path_rec_to_kern` and `ibv_copy_path_rec_from_kern` against rdma-core's: every
/// field of a record of distinct bytes comes out the same, both ways.
#[test]
#[cfg_attr(
    rverbs_vm,
    ignore = "host only: needs rdma-core's libibverbs.so.1 and dlopen"
)]
fn path_record_copies_match_rdma_core() {
    type CopyFn = unsafe extern "C" fn(*mut u8, *const u8);
    // SAFETY: both take (destination, source) struct pointers.
    let (from_kern, to_kern) = unsafe {
        (
            rdma_core::<CopyFn>(c"ibv_copy_path_rec_from_kern"),
            rdma_core::<CopyFn>(c"ibv_copy_path_rec_to_kern"),
        )
    };
    const KERN: usize = 64; // struct ib_user_path_rec
    let user = std::mem::size_of::<ibv_sa_path_rec>();
    // The kernel's record from distinct bytes.
    let kern: Vec<u8> = (1..=KERN as u8).collect();
    let (mut a, mut b, mut b2) = (vec![0u8; user], vec![0u8; user], vec![0xffu8; user]);
    // SAFETY: buffers of the structs' sizes.
    unsafe {
        ibv_copy_path_rec_from_kern(a.as_mut_ptr().cast(), kern.as_ptr().cast());
        from_kern(b.as_mut_ptr(), kern.as_ptr());
        from_kern(b2.as_mut_ptr(), kern.as_ptr());
    }
    // The bytes rdma-core leaves as they were (0 in one run, 0xff in the other) are the C
    // struct's padding, which holds no value: compare the others.
    let fields: Vec<usize> = (0..user).filter(|&i| b[i] == b2[i]).collect();
    assert!(fields.len() >= 60, "{fields:?}");
    let pick = |v: &[u8]| fields.iter().map(|&i| v[i]).collect::<Vec<u8>>();
    assert_eq!(pick(&a), pick(&b), "ibv_copy_path_rec_from_kern");
    // And back: rdma-core's user record, converted by both.
    let (mut ka, mut kb) = (vec![0u8; KERN], vec![0u8; KERN]);
    // SAFETY: as above.
    unsafe {
        ibv_copy_path_rec_to_kern(ka.as_mut_ptr().cast(), b.as_ptr().cast());
        to_kern(kb.as_mut_ptr(), b.as_ptr());
    }
    assert_eq!(ka, kb, "ibv_copy_path_rec_to_kern");
}

/// The rate conversions against rdma-core's library, over every rate value and every
/// multiple and Mb/s figure up to past the largest.
#[test]
#[cfg_attr(
    rverbs_vm,
    ignore = "host only: needs rdma-core's libibverbs.so.1 and dlopen"
)]
fn rates_match_rdma_core() {
    type IntFn = unsafe extern "C" fn(i32) -> i32;
    let ours: [(&std::ffi::CStr, IntFn, std::ops::Range<i32>); 4] = [
        (c"ibv_rate_to_mult", ibv_rate_to_mult, -1..40),
        (c"ibv_rate_to_mbps", ibv_rate_to_mbps, -1..40),
        (c"mult_to_ibv_rate", mult_to_ibv_rate, -1..600),
        (c"mbps_to_ibv_rate", mbps_to_ibv_rate, -1..1_400_000),
    ];
    for (name, f, range) in ours {
        // SAFETY: int (int) functions.
        let theirs = unsafe { rdma_core::<IntFn>(name) };
        for v in range {
            // SAFETY: both are pure functions of an int.
            let (a, b) = unsafe { (f(v), theirs(v)) };
            assert_eq!(a, b, "{name:?}({v})");
        }
    }
}

/// The `*_str` functions return what rdma-core's own library returns, for every value and a
/// few past the end.
#[test]
#[cfg_attr(
    rverbs_vm,
    ignore = "host only: needs rdma-core's libibverbs.so.1 and dlopen"
)]
fn strings_match_rdma_core() {
    type StrFn = unsafe extern "C" fn(i32) -> *const std::ffi::c_char;
    let ours: [(&std::ffi::CStr, StrFn, i32); 4] = [
        (c"ibv_wc_status_str", ibv_wc_status_str, 26),
        (c"ibv_port_state_str", ibv_port_state_str, 8),
        (c"ibv_event_type_str", ibv_event_type_str, 22),
        (c"ibv_node_type_str", ibv_node_type_str, 9),
    ];
    for (name, f, upto) in ours {
        // SAFETY: const char *(int) functions.
        let theirs = unsafe { rdma_core::<StrFn>(name) };
        for v in -1..upto {
            // SAFETY: both return static C strings for any value.
            let (a, b) = unsafe {
                (
                    std::ffi::CStr::from_ptr(f(v)),
                    std::ffi::CStr::from_ptr(theirs(v)),
                )
            };
            assert_eq!(a, b, "{name:?}({v})");
        }
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rdma_cm_errors_follow_librdmacm_conventions() {
    use rverbs_capi::cma::*;
    let a = addr_a();
    // SAFETY: every call below gets ids and channels of ours, created here, and writable
    // outputs.
    unsafe {
        let ch = rdma_create_event_channel();
        assert!(
            !ch.is_null(),
            "rdma_create_event_channel: errno {}",
            errno()
        );
        let mut id = null_mut();
        assert_eq!(rdma_create_id(ch, &mut id, null_mut(), -5), -1);
        assert_eq!(errno(), libc::EINVAL, "a negative port space");
        assert_eq!(rdma_create_id(ch, null_mut(), null_mut(), 0x106), -1);
        assert_eq!(errno(), libc::EINVAL, "no place for the id");
        assert_eq!(rdma_create_id(ch, &mut id, null_mut(), 0x106), 0);
        // No device yet: no QP.
        let mut attr: ibv_qp_init_attr = std::mem::zeroed();
        attr.cap.max_send_wr = 1;
        attr.cap.max_recv_wr = 1;
        attr.qp_type = 2;
        assert_eq!(rdma_create_qp(id, null_mut(), &mut attr), -1);
        assert_eq!(
            errno(),
            libc::EINVAL,
            "rdma_create_qp before the id has a device"
        );
        // A family it does not speak.
        let mut un: libc::sockaddr = std::mem::zeroed();
        un.sa_family = libc::AF_UNIX as u16;
        assert_eq!(rdma_bind_addr(id, &mut un), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        // Bound to the device's address: the id has its device, the QP its CQs.
        let mut sin = sockaddr_of(a);
        assert_eq!(
            rdma_bind_addr(id, (&raw mut sin).cast()),
            0,
            "bind {a}: errno {}",
            errno()
        );
        assert!(!(*id).verbs.is_null(), "bound to {a}: no device");
        assert_ne!(rdma_get_src_port(id), 0);
        assert_eq!(
            rdma_create_qp(id, null_mut(), &mut attr),
            0,
            "errno {}",
            errno()
        );
        assert!(!(*id).qp.is_null() && !(*id).send_cq.is_null() && !(*id).pd.is_null());
        assert_eq!(rdma_create_qp(id, null_mut(), &mut attr), -1);
        assert_eq!(errno(), libc::EINVAL, "a second QP on the id");
        // A second id on the same address and port.
        let mut id2 = null_mut();
        assert_eq!(rdma_create_id(ch, &mut id2, null_mut(), 0x106), 0);
        sin.sin_port = rdma_get_src_port(id);
        assert_eq!(rdma_bind_addr(id2, (&raw mut sin).cast()), -1);
        assert_eq!(errno(), libc::EADDRINUSE);
        assert_eq!(rdma_destroy_id(id2), 0);
        // Multicast on a connected-mode (TCP) id: refused, for a unicast address and for a
        // group alike.
        assert_eq!(
            rdma_join_multicast(id, (&raw mut sin).cast(), null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EINVAL, "a unicast address");
        let mut grp = sin;
        grp.sin_addr.s_addr = u32::from_ne_bytes([239, 1, 26, 20]);
        assert_eq!(
            rdma_join_multicast(id, (&raw mut grp).cast(), null_mut()),
            -1
        );
        assert_eq!(errno(), libc::EINVAL, "a join on an RC id");
        assert_eq!(rdma_leave_multicast(id, (&raw mut grp).cast()), -1);
        assert_eq!(errno(), libc::EADDRNOTAVAIL, "nothing was joined");
        let mut one: i32 = 1;
        assert_eq!(rdma_set_option(id, 0, 1, (&raw mut one).cast(), 2), -1);
        assert_eq!(errno(), libc::EINVAL, "REUSEADDR takes an int");
        assert_eq!(rdma_set_option(id, 0, 1, (&raw mut one).cast(), 4), 0);
        // rdma_getaddrinfo: an active lookup needs a node; a bad service is refused.
        let mut res = null_mut();
        assert_eq!(
            rdma_getaddrinfo(null(), c"7471".as_ptr(), null(), &mut res),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(
            rdma_getaddrinfo(
                c"127.0.0.1".as_ptr(),
                c"no-such-port".as_ptr(),
                null(),
                &mut res
            ),
            -1
        );
        assert_ne!(errno(), 0);
        rdma_destroy_qp(id);
        assert!((*id).qp.is_null() && (*id).send_cq.is_null());
        assert_eq!(rdma_destroy_id(id), 0);
        assert_eq!(rdma_destroy_id(null_mut()), -1);
        assert_eq!(errno(), libc::EINVAL);
        rdma_destroy_event_channel(ch);
        assert_eq!(
            std::ffi::CStr::from_ptr(rdma_event_str(9))
                .to_str()
                .unwrap(),
            "RDMA_CM_EVENT_ESTABLISHED"
        );
    }
}

/// `rdma_create_srq_ex`: without `IBV_SRQ_INIT_ATTR_TYPE` `EINVAL`, a NULL `attr` `EINVAL`, an
/// XRC SRQ or another `comp_mask` bit `EOPNOTSUPP`, none of them leaving an SRQ on the id; a
/// basic SRQ is the id's, with the default PD written back (and the PD bit), or with the PD
/// given.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rdma_create_srq_ex_makes_a_basic_srq_and_refuses_the_rest() {
    use rverbs_capi::cma::*;
    const TYPE: u32 = 1 << 0; // IBV_SRQ_INIT_ATTR_TYPE
    const PD: u32 = 1 << 1; // IBV_SRQ_INIT_ATTR_PD
    const CQ: u32 = 1 << 3; // IBV_SRQ_INIT_ATTR_CQ
    let a = addr_a();
    // SAFETY: every call below gets ids, channels and PDs of ours, created here, and writable
    // locals.
    unsafe {
        let ch = rdma_create_event_channel();
        assert!(!ch.is_null(), "errno {}", errno());
        let mut id = null_mut();
        assert_eq!(rdma_create_id(ch, &mut id, null_mut(), 0x106), 0);
        let mut sin = sockaddr_of(a);
        assert_eq!(
            rdma_bind_addr(id, (&raw mut sin).cast()),
            0,
            "errno {}",
            errno()
        );
        let attr = || {
            let mut x: ibv_srq_init_attr_ex = std::mem::zeroed();
            x.attr.max_wr = 4;
            x.attr.max_sge = 1;
            x.comp_mask = TYPE;
            x
        };
        let mut x = attr();
        x.comp_mask = 0;
        assert_eq!(rdma_create_srq_ex(id, &mut x), -1);
        assert_eq!(errno(), libc::EINVAL, "no IBV_SRQ_INIT_ATTR_TYPE");
        assert_eq!(rdma_create_srq_ex(id, null_mut()), -1);
        assert_eq!(errno(), libc::EINVAL, "NULL attr");
        let mut x = attr();
        x.srq_type = 1; // IBV_SRQT_XRC
        assert_eq!(rdma_create_srq_ex(id, &mut x), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP, "an XRC SRQ");
        let mut x = attr();
        x.comp_mask |= CQ;
        assert_eq!(rdma_create_srq_ex(id, &mut x), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP, "IBV_SRQ_INIT_ATTR_CQ");
        assert!((*id).srq.is_null(), "a refused call left an SRQ");
        // A basic SRQ on the default PD, written back.
        let mut x = attr();
        assert_eq!(rdma_create_srq_ex(id, &mut x), 0, "errno {}", errno());
        assert!(!(*id).srq.is_null() && !(*id).pd.is_null());
        assert_eq!(x.pd, (*id).pd);
        assert_eq!(x.comp_mask, TYPE | PD);
        assert!(x.attr.max_wr >= 4, "max_wr {}", x.attr.max_wr);
        rdma_destroy_srq(id);
        assert!((*id).srq.is_null());
        // With a PD of the caller's.
        let pd = ibv_alloc_pd((*id).verbs);
        assert!(!pd.is_null());
        let mut x = attr();
        x.comp_mask |= PD;
        x.pd = pd;
        assert_eq!(rdma_create_srq_ex(id, &mut x), 0, "errno {}", errno());
        assert_eq!(x.pd, pd);
        assert_eq!((*id).pd, pd);
        rdma_destroy_srq(id);
        assert_eq!(rdma_destroy_id(id), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        rdma_destroy_event_channel(ch);
    }
}

/// The multicast calls' refusals on a UD id with a QP: NULL arguments, an address that is
/// not multicast, `rdma_join_multicast_ex` with a bad `comp_mask` or join flags, a second
/// join of the same group, a leave of a group not joined; `ibv_attach_mcast` with a unicast
/// GID, on an RC QP, NULL; `ibv_detach_mcast` of a group not attached. None leaves a join or
/// an attachment behind: after them the group is joined once, the QP attached once, and one
/// leave undoes both.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn multicast_errors_follow_librdmacm_conventions() {
    use rverbs_capi::cma::*;
    let a = addr_a();
    let _ = std::process::Command::new("ip")
        .args(["route", "replace", "224.0.0.0/4", "dev", "d0"])
        .output();
    let wait = |ch: *mut rdma_event_channel, want: u32| -> *mut rdma_cm_event {
        // SAFETY: ch is ours; the fd is readable once an event is queued.
        unsafe {
            let mut p = libc::pollfd {
                fd: (*ch).fd,
                events: libc::POLLIN,
                revents: 0,
            };
            assert_eq!(libc::poll(&mut p, 1, 5000), 1, "no event in 5 s");
            let mut ev = null_mut();
            assert_eq!(rdma_get_cm_event(ch, &mut ev), 0);
            assert_eq!((*ev).event, want, "status {}", (*ev).status);
            ev
        }
    };
    // SAFETY: every call below gets ids, channels and QPs of ours, created here, and
    // readable or writable locals.
    unsafe {
        let ch = rdma_create_event_channel();
        assert!(!ch.is_null());
        let mut id = null_mut();
        let mut ctx = 7u8;
        let ctx_p = (&raw mut ctx).cast::<std::ffi::c_void>();
        assert_eq!(
            rdma_create_id(ch, &mut id, null_mut(), 0x111),
            0,
            "RDMA_PS_UDP"
        );
        let mut src = sockaddr_of(a);
        let mut grp = src;
        grp.sin_addr.s_addr = u32::from_ne_bytes([239, 1, 26, 21]);
        assert_eq!(
            rdma_resolve_addr(id, (&raw mut src).cast(), (&raw mut grp).cast(), 2000),
            0
        );
        rdma_ack_cm_event(wait(ch, 0));
        let mut attr: ibv_qp_init_attr = std::mem::zeroed();
        attr.cap.max_send_wr = 1;
        attr.cap.max_recv_wr = 1;
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.qp_type = 4; // IBV_QPT_UD
        assert_eq!(
            rdma_create_qp(id, null_mut(), &mut attr),
            0,
            "errno {}",
            errno()
        );
        let qp = (*id).qp;
        let groups = || (*qp.cast::<CQp>()).qp.mcast_groups();

        // NULL arguments.
        assert_eq!(
            rdma_join_multicast(null_mut(), (&raw mut grp).cast(), ctx_p),
            -1
        );
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_join_multicast(id, null_mut(), ctx_p), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_join_multicast_ex(id, null_mut(), ctx_p), -1);
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(rdma_leave_multicast(id, null_mut()), -1);
        assert_eq!(errno(), libc::EINVAL);
        // Not a multicast address.
        assert_eq!(rdma_join_multicast(id, (&raw mut src).cast(), ctx_p), -1);
        assert_eq!(errno(), libc::EINVAL);
        // rdma_join_multicast_ex: comp_mask without the flags, unknown bits, unknown flags.
        let mut ex = rdma_cm_join_mc_attr_ex {
            comp_mask: RDMA_CM_JOIN_MC_ATTR_ADDRESS,
            join_flags: 0,
            addr: (&raw mut grp).cast(),
        };
        assert_eq!(rdma_join_multicast_ex(id, &mut ex, ctx_p), -1);
        assert_eq!(errno(), libc::EINVAL, "comp_mask without JOIN_FLAGS");
        ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS | 1 << 2;
        assert_eq!(rdma_join_multicast_ex(id, &mut ex, ctx_p), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP, "an unknown comp_mask bit");
        ex.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
        ex.join_flags = 5;
        assert_eq!(rdma_join_multicast_ex(id, &mut ex, ctx_p), -1);
        assert_eq!(errno(), libc::EINVAL, "unknown join flags");
        assert_eq!(rdma_leave_multicast(id, (&raw mut grp).cast()), -1);
        assert_eq!(errno(), libc::EADDRNOTAVAIL, "no refused join was recorded");
        assert!(groups().is_empty());

        // The join: its event carries the context; the QP is attached once.
        ex.join_flags = 0;
        assert_eq!(rdma_join_multicast_ex(id, &mut ex, ctx_p), 0);
        let ev = wait(ch, 12); // RDMA_CM_EVENT_MULTICAST_JOIN
        assert_eq!((*ev).id, id);
        assert_eq!((*ev).param.ud.private_data, ctx_p.cast_const());
        let mgid = (*ev).param.ud.ah_attr.grh.dgid;
        rdma_ack_cm_event(ev);
        assert_eq!(groups().len(), 1);
        assert_eq!(groups()[0].0 .0, mgid.raw);
        // A second join of the group: refused, the first stands.
        assert_eq!(rdma_join_multicast(id, (&raw mut grp).cast(), ctx_p), -1);
        assert_eq!(errno(), libc::EINVAL, "a second join");

        // ibv_attach_mcast / ibv_detach_mcast: positive errnos.
        let mut unicast = ibv_gid::default();
        unicast.raw[10] = 0xff;
        unicast.raw[11] = 0xff;
        unicast.raw[12..].copy_from_slice(&a.octets());
        assert_eq!(ibv_attach_mcast(qp, &unicast, 0), libc::EINVAL);
        assert_eq!(ibv_attach_mcast(qp, null(), 0), libc::EINVAL);
        assert_eq!(ibv_attach_mcast(null_mut(), &mgid, 0), libc::EINVAL);
        assert_eq!(ibv_detach_mcast(null_mut(), &mgid, 0), libc::EINVAL);
        let mut other = mgid;
        other.raw[15] ^= 1;
        assert_eq!(
            ibv_detach_mcast(qp, &other, 0),
            libc::EINVAL,
            "not attached"
        );
        let pd = (*id).pd;
        let cq = ibv_create_cq((*id).verbs, 2, null_mut(), null_mut(), 0);
        assert!(!cq.is_null());
        let mut rc_attr = attr;
        rc_attr.qp_type = 2; // IBV_QPT_RC
        rc_attr.send_cq = cq;
        rc_attr.recv_cq = cq;
        let rc = ibv_create_qp(pd, &mut rc_attr);
        assert!(!rc.is_null(), "errno {}", errno());
        assert_eq!(ibv_attach_mcast(rc, &mgid, 0), libc::EINVAL, "an RC QP");
        assert_eq!(ibv_destroy_qp(rc), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(groups().len(), 1, "the refusals changed the attachment");

        // The leave detaches and leaves: a second leave has nothing to leave.
        assert_eq!(rdma_leave_multicast(id, (&raw mut grp).cast()), 0);
        assert!(groups().is_empty(), "the leave did not detach the QP");
        assert_eq!(rdma_leave_multicast(id, (&raw mut grp).cast()), -1);
        assert_eq!(errno(), libc::EADDRNOTAVAIL);

        // Hostile: four threads join the same group on the same id at once. The id's lock
        // makes one of them win; the others are refused as a second join. One leave undoes
        // it, and detaches the QP the event attached.
        let (idp, grpp) = (id as usize, (&raw mut grp) as usize);
        let won: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(move || {
                        let r = rdma_join_multicast(
                            idp as *mut rdma_cm_id,
                            grpp as *mut libc::sockaddr,
                            null_mut(),
                        );
                        (r == 0) as usize
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(won, 1, "racing joins of one group");
        rdma_ack_cm_event(wait(ch, 12));
        assert_eq!(groups().len(), 1);
        assert_eq!(rdma_leave_multicast(id, (&raw mut grp).cast()), 0);
        assert!(groups().is_empty());
        rdma_destroy_qp(id);
        assert_eq!(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
    }
}

/// rxe0's QPs as the kernel counts them (netlink resource summary).
fn kernel_qps() -> u64 {
    let dev = std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into());
    let mut nl = rverbs_uverbs::netlink::RdmaNetlink::open().unwrap();
    let d = nl.device_by_name(&dev, "atomic write test").unwrap();
    nl.resource_summary(d.index)
        .unwrap()
        .into_iter()
        .find(|(k, _)| k == "qp")
        .map_or(0, |(_, n)| n)
}

/// `ibv_create_qp_ex` with `IBV_QP_EX_WITH_ATOMIC_WRITE` follows the device: where the kernel's
/// rxe lacks atomic write (6.1) it fails with `EOPNOTSUPP` and leaves no QP in the kernel;
/// where it has it (6.12) the QP gets `wr_atomic_write`, and a NULL value fails the batch with
/// `EINVAL`, nothing posted. (A request that runs: pyverbs' `test_qp_ex_rc_atomic_write` on
/// both libraries, docs/capi.md.)
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_wr_atomic_write_follows_the_device() {
    let ctx = open_dev_a();
    let on_6_1 = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .starts_with("6.1.");
    // SAFETY: every call below gets objects of ours, created here, and writable locals; the
    // verbs_context holds the ibv_context at its end (what libibverbs' inline
    // ibv_create_qp_ex finds it by).
    unsafe {
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 4, null_mut(), null_mut(), 0);
        assert!(!pd.is_null() && !cq.is_null());
        let vctx = ctx
            .cast::<u8>()
            .sub(std::mem::offset_of!(verbs_context, context))
            .cast::<verbs_context>();
        let create = (*vctx).create_qp_ex.expect("create_qp_ex");
        let mut a: ibv_qp_init_attr_ex = std::mem::zeroed();
        a.send_cq = cq;
        a.recv_cq = cq;
        a.cap.max_send_wr = 4;
        a.cap.max_recv_wr = 1;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        a.qp_type = 2; // IBV_QP_RC
        a.comp_mask = 1 | 1 << 6; // IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
        a.pd = pd;
        a.send_ops_flags = 1 << 12 | 1 << 2; // ATOMIC_WRITE | SEND
        let before = kernel_qps();
        let qp = create(ctx, &mut a);
        if on_6_1 {
            assert!(qp.is_null(), "atomic write on 6.1's rxe");
            assert_eq!(errno(), libc::EOPNOTSUPP);
            assert_eq!(
                kernel_qps(),
                before,
                "the refused QP was left in the kernel"
            );
        } else {
            assert!(!qp.is_null(), "errno {}", errno());
            let qpx = ibv_qp_to_qp_ex(qp);
            let aw = (*qpx).wr_atomic_write.expect("wr_atomic_write");
            (*qpx).wr_start.unwrap()(qpx);
            (*qpx).wr_id = 1;
            aw(qpx, 1, 0x1000, std::ptr::null());
            assert_eq!((*qpx).wr_complete.unwrap()(qpx), libc::EINVAL, "NULL value");
            assert_eq!(ibv_destroy_qp(qp), 0);
            assert_eq!(kernel_qps(), before);
        }
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
    }
}

/// `a` as an IPv4 `sockaddr_in`, port 0 (the kernel picks one at bind).
fn sockaddr_of(a: std::net::Ipv4Addr) -> libc::sockaddr_in {
    // SAFETY: `sockaddr_in` is plain integers; all zeros is a valid value.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sin.sin_family = libc::AF_INET as u16;
    sin.sin_addr.s_addr = u32::from_ne_bytes(a.octets());
    sin
}

/// Node A's address in the guest (`RVERBS_ADDR_A`, else the one-node topology's).
fn addr_a() -> std::net::Ipv4Addr {
    std::env::var("RVERBS_ADDR_A")
        .unwrap_or_else(|_| "10.10.0.1".into())
        .parse()
        .unwrap()
}
