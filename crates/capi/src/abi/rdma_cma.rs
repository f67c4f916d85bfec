//! `<rdma/rdma_cma.h>` (librdmacm-dev).

use super::*;

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    /// The ucma file's descriptor (poll it; `rdma_get_cm_event` reads it).
    pub fd: c_int,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdma_ib_addr {
    #[allow(missing_docs)]
    pub sgid: ibv_gid,
    #[allow(missing_docs)]
    pub dgid: ibv_gid,
    /// Big-endian.
    pub pkey: u16,
}

/// `struct rdma_addr`: the source and destination unions (each as large as a
/// `sockaddr_storage`), then the IB address.
#[repr(C)]
pub struct rdma_addr {
    /// `src_addr` / `src_sin` / `src_sin6` / `src_storage`.
    pub src_storage: libc::sockaddr_storage,
    /// `dst_addr` / `dst_sin` / `dst_sin6` / `dst_storage`.
    pub dst_storage: libc::sockaddr_storage,
    /// `addr.ibaddr`.
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
pub struct rdma_route {
    #[allow(missing_docs)]
    pub addr: rdma_addr,
    #[allow(missing_docs)]
    pub path_rec: *mut ibv_sa_path_rec,
    #[allow(missing_docs)]
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`: what `rdma_cma.h`'s and `rdma_verbs.h`'s inline functions read.
#[repr(C)]
pub struct rdma_cm_id {
    #[allow(missing_docs)]
    pub verbs: *mut ibv_context,
    #[allow(missing_docs)]
    pub channel: *mut rdma_event_channel,
    #[allow(missing_docs)]
    pub context: *mut c_void,
    #[allow(missing_docs)]
    pub qp: *mut ibv_qp,
    #[allow(missing_docs)]
    pub route: rdma_route,
    /// `enum rdma_port_space`.
    pub ps: u32,
    #[allow(missing_docs)]
    pub port_num: u8,
    #[allow(missing_docs)]
    pub event: *mut rdma_cm_event,
    #[allow(missing_docs)]
    pub send_cq_channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq_channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_conn_param {
    #[allow(missing_docs)]
    pub private_data: *const c_void,
    #[allow(missing_docs)]
    pub private_data_len: u8,
    #[allow(missing_docs)]
    pub responder_resources: u8,
    #[allow(missing_docs)]
    pub initiator_depth: u8,
    #[allow(missing_docs)]
    pub flow_control: u8,
    #[allow(missing_docs)]
    pub retry_count: u8,
    #[allow(missing_docs)]
    pub rnr_retry_count: u8,
    #[allow(missing_docs)]
    pub srq: u8,
    #[allow(missing_docs)]
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_ud_param {
    #[allow(missing_docs)]
    pub private_data: *const c_void,
    #[allow(missing_docs)]
    pub private_data_len: u8,
    #[allow(missing_docs)]
    pub ah_attr: ibv_ah_attr,
    #[allow(missing_docs)]
    pub qp_num: u32,
    #[allow(missing_docs)]
    pub qkey: u32,
}

/// `struct rdma_cm_join_mc_attr_ex` (`rdma_join_multicast_ex`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_cm_join_mc_attr_ex {
    /// Which fields are valid: [`RDMA_CM_JOIN_MC_ATTR_ADDRESS`] and
    /// [`RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`], both required.
    pub comp_mask: u32,
    /// `enum rdma_cm_mc_join_flags`: 0 full member, 1 send-only full member.
    pub join_flags: u32,
    /// The group's address.
    pub addr: *mut libc::sockaddr,
}

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`: `rdma_cm_join_mc_attr_ex::addr` is valid.
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
/// `RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`: `rdma_cm_join_mc_attr_ex::join_flags` is valid.
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;

/// The `param` union of `struct rdma_cm_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    #[allow(missing_docs)]
    pub conn: rdma_conn_param,
    #[allow(missing_docs)]
    pub ud: rdma_ud_param,
    /// The argument of `RDMA_CM_EVENT_USER` (rdma-core 60; not in rdma-core 44's header):
    /// the union's first 8 bytes.
    pub arg: u64,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    #[allow(missing_docs)]
    pub id: *mut rdma_cm_id,
    #[allow(missing_docs)]
    pub listen_id: *mut rdma_cm_id,
    /// `enum rdma_cm_event_type`.
    pub event: u32,
    #[allow(missing_docs)]
    pub status: c_int,
    #[allow(missing_docs)]
    pub param: rdma_cm_event_param,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct rdma_addrinfo {
    /// `RAI_*`.
    pub ai_flags: c_int,
    #[allow(missing_docs)]
    pub ai_family: c_int,
    #[allow(missing_docs)]
    pub ai_qp_type: c_int,
    #[allow(missing_docs)]
    pub ai_port_space: c_int,
    #[allow(missing_docs)]
    pub ai_src_len: u32,
    #[allow(missing_docs)]
    pub ai_dst_len: u32,
    #[allow(missing_docs)]
    pub ai_src_addr: *mut libc::sockaddr,
    #[allow(missing_docs)]
    pub ai_dst_addr: *mut libc::sockaddr,
    #[allow(missing_docs)]
    pub ai_src_canonname: *mut c_char,
    #[allow(missing_docs)]
    pub ai_dst_canonname: *mut c_char,
    #[allow(missing_docs)]
    pub ai_route_len: usize,
    #[allow(missing_docs)]
    pub ai_route: *mut c_void,
    #[allow(missing_docs)]
    pub ai_connect_len: usize,
    #[allow(missing_docs)]
    pub ai_connect: *mut c_void,
    #[allow(missing_docs)]
    pub ai_next: *mut rdma_addrinfo,
}
