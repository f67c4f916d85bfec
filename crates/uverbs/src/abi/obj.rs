//! Request and response structures of the verbs objects' write() commands and ioctl payloads
//! (`ib_user_verbs.h`, `ib_user_ioctl_verbs.h`). Flexible `driver_data[]` tails are not part of
//! these structs: driver data is appended by the write layer.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

macro_rules! abi_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident : $t:ty),* $(,)? }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
        pub struct $name { $($(#[$fm])* pub $f: $t,)* }
    };
}

abi_struct!(ib_uverbs_alloc_pd { response: u64 });
abi_struct!(ib_uverbs_alloc_pd_resp { pd_handle: u32 });
abi_struct!(ib_uverbs_dealloc_pd { pd_handle: u32 });
abi_struct!(ib_uverbs_dereg_mr { mr_handle: u32 });

abi_struct!(ib_uverbs_create_cq {
    response: u64,
    user_handle: u64,
    cqe: u32,
    comp_vector: u32,
    comp_channel: i32,
    reserved: u32,
});
abi_struct!(ib_uverbs_create_cq_resp {
    cq_handle: u32,
    cqe: u32
});
abi_struct!(ib_uverbs_destroy_cq {
    response: u64,
    cq_handle: u32,
    reserved: u32,
});

abi_struct!(ib_uverbs_create_qp {
    response: u64,
    user_handle: u64,
    pd_handle: u32,
    send_cq_handle: u32,
    recv_cq_handle: u32,
    srq_handle: u32,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
    sq_sig_all: u8,
    qp_type: u8,
    is_srq: u8,
    reserved: u8,
});
abi_struct!(ib_uverbs_create_qp_resp {
    qp_handle: u32,
    qpn: u32,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
    reserved: u32,
});
abi_struct!(ib_uverbs_destroy_qp {
    response: u64,
    qp_handle: u32,
    reserved: u32,
});
abi_struct!(ib_uverbs_destroy_ah { ah_handle: u32 });
abi_struct!(ib_uverbs_destroy_srq {
    response: u64,
    srq_handle: u32,
    reserved: u32,
});

abi_struct!(ib_uverbs_reg_mr {
    response: u64,
    start: u64,
    length: u64,
    hca_va: u64,
    pd_handle: u32,
    access_flags: u32,
});
abi_struct!(ib_uverbs_reg_mr_resp {
    mr_handle: u32,
    lkey: u32,
    rkey: u32
});

abi_struct!(ib_uverbs_create_comp_channel { response: u64 });
abi_struct!(ib_uverbs_create_comp_channel_resp { fd: u32 });

abi_struct!(ib_uverbs_req_notify_cq {
    cq_handle: u32,
    solicited_only: u32
});

abi_struct!(ib_uverbs_resize_cq {
    response: u64,
    cq_handle: u32,
    cqe: u32
});
abi_struct!(ib_uverbs_resize_cq_resp {
    cqe: u32,
    reserved: u32
});

abi_struct!(ib_uverbs_destroy_cq_resp {
    comp_events_reported: u32,
    async_events_reported: u32
});

abi_struct!(ib_uverbs_qp_cap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
});

abi_struct!(ib_uverbs_destroy_qp_resp {
    events_reported: u32
});

abi_struct!(ib_uverbs_qp_dest {
    dgid: [u8; 16],
    flow_label: u32,
    dlid: u16,
    reserved: u16,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
});

abi_struct!(ib_uverbs_modify_qp {
    dest: ib_uverbs_qp_dest,
    alt_dest: ib_uverbs_qp_dest,
    qp_handle: u32,
    attr_mask: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    pkey_index: u16,
    alt_pkey_index: u16,
    qp_state: u8,
    cur_qp_state: u8,
    path_mtu: u8,
    path_mig_state: u8,
    en_sqd_async_notify: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    reserved: [u8; 2],
});

abi_struct!(ib_uverbs_query_qp {
    response: u64,
    qp_handle: u32,
    attr_mask: u32
});

abi_struct!(ib_uverbs_query_qp_resp {
    dest: ib_uverbs_qp_dest,
    alt_dest: ib_uverbs_qp_dest,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    pkey_index: u16,
    alt_pkey_index: u16,
    qp_state: u8,
    cur_qp_state: u8,
    path_mtu: u8,
    path_mig_state: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    sq_sig_all: u8,
    reserved: [u8; 5],
});

abi_struct!(ib_uverbs_global_route {
    dgid: [u8; 16],
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
    reserved: u8,
});

abi_struct!(ib_uverbs_ah_attr {
    grh: ib_uverbs_global_route,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
    reserved: u8,
});

abi_struct!(ib_uverbs_create_ah {
    response: u64,
    user_handle: u64,
    pd_handle: u32,
    reserved: u32,
    attr: ib_uverbs_ah_attr,
});
abi_struct!(ib_uverbs_create_ah_resp { ah_handle: u32 });

abi_struct!(ib_uverbs_create_srq {
    response: u64,
    user_handle: u64,
    pd_handle: u32,
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
});
abi_struct!(ib_uverbs_create_srq_resp {
    srq_handle: u32,
    max_wr: u32,
    max_sge: u32,
    srqn: u32
});
abi_struct!(ib_uverbs_modify_srq {
    srq_handle: u32,
    attr_mask: u32,
    max_wr: u32,
    srq_limit: u32
});
abi_struct!(ib_uverbs_query_srq {
    response: u64,
    srq_handle: u32,
    reserved: u32
});
abi_struct!(ib_uverbs_query_srq_resp {
    max_wr: u32,
    max_sge: u32,
    srq_limit: u32,
    reserved: u32
});
abi_struct!(ib_uverbs_destroy_srq_resp {
    events_reported: u32
});

abi_struct!(ib_uverbs_async_event_desc {
    element: u64,
    event_type: u32,
    reserved: u32
});
abi_struct!(ib_uverbs_comp_event_desc { cq_handle: u64 });

abi_struct!(ib_uverbs_post_send_resp { bad_wr: u32 });

/// `IB_UVERBS_QP_CREATE_SQ_SIG_ALL` (ioctl QP create flags).
pub const IB_UVERBS_QP_CREATE_SQ_SIG_ALL: u32 = 1 << 12;
