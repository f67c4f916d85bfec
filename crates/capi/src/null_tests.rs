//! NULL object pointers (the \[object\] contract allows them): each function refuses them
//! with `EINVAL` in its error convention and dereferences nothing. Needs no device.

use std::ffi::c_void;
use std::mem::zeroed;
use std::ptr::null_mut;

use crate::abi::*;
use crate::cma::*;
use crate::ibverbs::*;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap()
}

/// Runs `f`, which must fail with `errno` EINVAL.
fn sets_einval(what: &str, f: impl FnOnce() -> bool) {
    set_errno(0);
    assert!(f(), "{what}: did not fail");
    assert_eq!(errno(), libc::EINVAL, "{what}: errno");
}

#[test]
fn constructors_give_null_and_einval() {
    // SAFETY: NULL objects (allowed by [object]); the other pointers are valid locals.
    unsafe {
        let mut buf = [0u8; 64];
        let mut srq_attr: ibv_srq_init_attr = zeroed();
        let mut qp_attr: ibv_qp_init_attr = zeroed();
        let mut ah_attr: ibv_ah_attr = zeroed();
        let p = buf.as_mut_ptr().cast::<c_void>();
        sets_einval("ibv_open_device", || ibv_open_device(null_mut()).is_null());
        sets_einval("ibv_alloc_pd", || ibv_alloc_pd(null_mut()).is_null());
        sets_einval("ibv_create_comp_channel", || {
            ibv_create_comp_channel(null_mut()).is_null()
        });
        sets_einval("ibv_create_cq", || {
            ibv_create_cq(null_mut(), 1, null_mut(), null_mut(), 0).is_null()
        });
        sets_einval("ibv_create_srq", || {
            ibv_create_srq(null_mut(), &mut srq_attr).is_null()
        });
        sets_einval("ibv_create_qp", || {
            ibv_create_qp(null_mut(), &mut qp_attr).is_null()
        });
        sets_einval("ibv_create_ah", || {
            ibv_create_ah(null_mut(), &mut ah_attr).is_null()
        });
        sets_einval("ibv_reg_mr", || ibv_reg_mr(null_mut(), p, 64, 1).is_null());
        sets_einval("ibv_reg_dmabuf_mr", || {
            ibv_reg_dmabuf_mr(null_mut(), 0, 64, 0, 0, 1).is_null()
        });
        sets_einval("ibv_create_ah_from_wc", || {
            ibv_create_ah_from_wc(null_mut(), null_mut(), null_mut(), 1).is_null()
        });
        sets_einval("ibv_qp_to_qp_ex", || ibv_qp_to_qp_ex(null_mut()).is_null());
    }
}

#[test]
fn destroy_query_modify_give_a_positive_einval() {
    // SAFETY: NULL objects (allowed by [object]); the other pointers are valid locals.
    unsafe {
        let mut dattr: ibv_device_attr = zeroed();
        let mut qattr = ibv_qp_attr::default();
        let mut qinit: ibv_qp_init_attr = zeroed();
        let mut sattr: ibv_srq_attr = zeroed();
        let e = libc::EINVAL;
        assert_eq!(ibv_close_device(null_mut()), e);
        assert_eq!(ibv_dealloc_pd(null_mut()), e);
        assert_eq!(ibv_dereg_mr(null_mut()), e);
        assert_eq!(ibv_destroy_comp_channel(null_mut()), e);
        assert_eq!(ibv_destroy_cq(null_mut()), e);
        assert_eq!(ibv_destroy_srq(null_mut()), e);
        assert_eq!(ibv_destroy_qp(null_mut()), e);
        assert_eq!(ibv_destroy_ah(null_mut()), e);
        assert_eq!(ibv_query_device(null_mut(), &mut dattr), e);
        assert_eq!(ibv_resize_cq(null_mut(), 4), e);
        assert_eq!(ibv_modify_qp(null_mut(), &mut qattr, 1), e);
        assert_eq!(ibv_query_qp(null_mut(), &mut qattr, 0, &mut qinit), e);
        assert_eq!(ibv_modify_srq(null_mut(), &mut sattr, 2), e);
        assert_eq!(ibv_query_srq(null_mut(), &mut sattr), e);
    }
}

#[test]
fn event_calls_give_minus_one_and_einval_or_do_nothing() {
    // SAFETY: NULL objects (allowed by [object]); the other pointers are valid locals.
    unsafe {
        let mut cq = null_mut();
        let mut ctx = null_mut();
        let mut ev: ibv_async_event = zeroed();
        let mut gid = [0u8; 16];
        sets_einval("ibv_get_cq_event", || {
            ibv_get_cq_event(null_mut(), &mut cq, &mut ctx) == -1
        });
        sets_einval("ibv_get_async_event", || {
            ibv_get_async_event(null_mut(), &mut ev) == -1
        });
        sets_einval("ibv_query_gid", || {
            ibv_query_gid(null_mut(), 1, 0, &mut gid) == -1
        });
        sets_einval("ibv_get_device_index", || {
            ibv_get_device_index(null_mut()) == -1
        });
        sets_einval("ibv_get_device_guid", || {
            ibv_get_device_guid(null_mut()) == 0
        });
        // No return value: nothing happens.
        ibv_ack_cq_events(null_mut(), 1);
        ibv_ack_async_event(null_mut());
        // An event naming no object (a port event): nothing to count.
        let mut port_ev = ibv_async_event {
            element: null_mut(),
            event_type: 9,
        };
        ibv_ack_async_event(&mut port_ev);
    }
}

#[test]
fn rdma_cm_calls_give_minus_one_and_einval() {
    // SAFETY: NULL objects (allowed by [object]); the other pointers are valid locals.
    unsafe {
        let mut ia: ibv_qp_init_attr = zeroed();
        let mut ev = null_mut();
        let mut id = null_mut();
        let mut qattr = ibv_qp_attr::default();
        let mut mask = 0;
        sets_einval("rdma_destroy_id", || rdma_destroy_id(null_mut()) == -1);
        sets_einval("rdma_connect", || {
            rdma_connect(null_mut(), null_mut()) == -1
        });
        sets_einval("rdma_accept", || rdma_accept(null_mut(), null_mut()) == -1);
        sets_einval("rdma_disconnect", || rdma_disconnect(null_mut()) == -1);
        sets_einval("rdma_listen", || rdma_listen(null_mut(), 1) == -1);
        sets_einval("rdma_resolve_route", || {
            rdma_resolve_route(null_mut(), 10) == -1
        });
        sets_einval("rdma_create_qp", || {
            rdma_create_qp(null_mut(), null_mut(), &mut ia) == -1
        });
        sets_einval("rdma_init_qp_attr", || {
            rdma_init_qp_attr(null_mut(), &mut qattr, &mut mask) == -1
        });
        sets_einval("rdma_migrate_id", || {
            rdma_migrate_id(null_mut(), null_mut()) == -1
        });
        sets_einval("rdma_get_cm_event", || {
            rdma_get_cm_event(null_mut(), &mut ev) == -1
        });
        sets_einval("rdma_get_request", || {
            rdma_get_request(null_mut(), &mut id) == -1
        });
        assert_eq!(rdma_get_src_port(null_mut()), 0);
        assert_eq!(rdma_get_dst_port(null_mut()), 0);
        rdma_destroy_qp(null_mut());
        rdma_destroy_srq(null_mut());
        let mut srq_ex: ibv_srq_init_attr_ex = zeroed();
        srq_ex.comp_mask = 1; // IBV_SRQ_INIT_ATTR_TYPE, basic
        sets_einval("rdma_create_srq_ex", || {
            rdma_create_srq_ex(null_mut(), &mut srq_ex) == -1
        });
    }
}

#[test]
fn multicast_calls_refuse_null() {
    // SAFETY: NULL objects (allowed by [object]); the other pointers are valid locals.
    unsafe {
        let gid = ibv_gid::default();
        let mut sin: libc::sockaddr_in = zeroed();
        sin.sin_family = libc::AF_INET as u16;
        let sa = (&raw mut sin).cast::<libc::sockaddr>();
        assert_eq!(ibv_attach_mcast(null_mut(), &gid, 0), libc::EINVAL);
        assert_eq!(ibv_detach_mcast(null_mut(), &gid, 0), libc::EINVAL);
        sets_einval("rdma_join_multicast", || {
            rdma_join_multicast(null_mut(), sa, null_mut()) == -1
        });
        sets_einval("rdma_leave_multicast", || {
            rdma_leave_multicast(null_mut(), sa) == -1
        });
        sets_einval("rdma_join_multicast_ex without attributes", || {
            rdma_join_multicast_ex(null_mut(), null_mut(), null_mut()) == -1
        });
        let mut ex = rdma_cm_join_mc_attr_ex {
            comp_mask: RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
            join_flags: 0,
            addr: sa,
        };
        sets_einval("rdma_join_multicast_ex", || {
            rdma_join_multicast_ex(null_mut(), &mut ex, null_mut()) == -1
        });
        // comp_mask is checked first, as librdmacm does: unknown bits are EOPNOTSUPP.
        ex.comp_mask |= 1 << 2;
        set_errno(0);
        assert_eq!(rdma_join_multicast_ex(null_mut(), &mut ex, null_mut()), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
    }
}

#[test]
fn memory_window_ops_give_a_positive_einval() {
    // SAFETY: NULL objects (allowed by [object]); the bind request is a valid local.
    unsafe {
        let mut bind: ibv_mw_bind = zeroed();
        assert_eq!(dealloc_mw_op(null_mut()), libc::EINVAL);
        assert_eq!(bind_mw_op(null_mut(), null_mut(), &mut bind), libc::EINVAL);
    }
}

#[test]
fn null_is_refused_for_every_type() {
    use crate::handle::FromC;
    // SAFETY: [object] NULL is allowed and refused.
    unsafe {
        assert!(CDevice::from_c(null_mut()).is_none());
        assert!(CContext::from_c(null_mut()).is_none());
        assert!(CPd::from_c(null_mut()).is_none());
        assert!(CChannel::from_c(null_mut()).is_none());
        assert!(CCq::from_c(null_mut()).is_none());
        assert!(CSrq::from_c(null_mut()).is_none());
        assert!(CQp::from_c(null_mut()).is_none());
        assert!(CMr::from_c(null_mut()).is_none());
        assert!(CAh::from_c(null_mut()).is_none());
        assert!(CMw::from_c(null_mut()).is_none());
        assert!(CMr::from_c_or_none(null_mut()).is_none());
        assert!(CEventChannel::from_c(null_mut()).is_none());
        assert!(CCmId::from_c(null_mut()).is_none());
    }
}

/// The functions of rdma-core 59–64 (`ibverbs/mr_ex.rs`, `ibv_query_port_speed`,
/// `cma/addrinfo.rs`) refuse NULL objects and outputs with `EINVAL`.
#[test]
fn rdma_core_64s_functions_refuse_null() {
    // SAFETY: NULL objects (allowed by [object]); the other pointers are valid locals.
    unsafe {
        let mut speed = 7u64;
        assert_eq!(
            ibv_query_port_speed(null_mut(), 1, &mut speed),
            libc::EINVAL
        );
        assert_eq!(speed, 7, "nothing written");
        let mut a: ibv_mr_init_attr = zeroed();
        sets_einval("ibv_reg_mr_ex", || {
            ibv_reg_mr_ex(null_mut(), &mut a).is_null()
        });
        let mut b = null_mut();
        sets_einval("ibv_alloc_buf", || {
            ibv_alloc_buf(null_mut(), 64, &mut b).is_null()
        });
        assert!(b.is_null(), "no handle written");
        sets_einval("ibv_reg_buf_mr", || {
            ibv_reg_buf_mr(null_mut(), null_mut(), null_mut(), 64, 1).is_null()
        });
        ibv_free_buf(null_mut());
        sets_einval("ibv_alloc_dmah", || {
            ibv_alloc_dmah(null_mut(), null_mut()).is_null()
        });
        assert_eq!(ibv_dealloc_dmah(null_mut()), libc::EINVAL);
        sets_einval("rdma_write_cm_event", || {
            rdma_write_cm_event(null_mut(), 18, 0, 1) == -1
        });
        sets_einval("rdma_resolve_addrinfo", || {
            rdma_resolve_addrinfo(null_mut(), null_mut(), null_mut(), null_mut()) == -1
        });
        let mut ai = null_mut();
        sets_einval("rdma_query_addrinfo", || {
            rdma_query_addrinfo(null_mut(), &mut ai) == -1
        });
    }
}
