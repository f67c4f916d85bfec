//! `<infiniband/verbs.h>`: the objects and their attributes (PD, MR, AH, SRQ, QP with its
//! work requests and `ibv_qp_ex`, completion channel, CQ with `ibv_wc` and `ibv_cq_ex`), GID
//! entries and asynchronous events.

use super::*;

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_wc {
    #[allow(missing_docs)]
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    #[allow(missing_docs)]
    pub vendor_err: u32,
    #[allow(missing_docs)]
    pub byte_len: u32,
    /// Big-endian immediate data, or the invalidated rkey.
    pub imm_data: u32,
    #[allow(missing_docs)]
    pub qp_num: u32,
    #[allow(missing_docs)]
    pub src_qp: u32,
    #[allow(missing_docs)]
    pub wc_flags: c_uint,
    #[allow(missing_docs)]
    pub pkey_index: u16,
    #[allow(missing_docs)]
    pub slid: u16,
    #[allow(missing_docs)]
    pub sl: u8,
    #[allow(missing_docs)]
    pub dlid_path_bits: u8,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub addr: *mut c_void,
    #[allow(missing_docs)]
    pub length: usize,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub lkey: u32,
    #[allow(missing_docs)]
    pub rkey: u32,
}

/// `union ibv_gid`: 16 bytes, aligned as its `__be64` view (which makes `ibv_qp_attr` 144
/// bytes, not 140).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid {
    /// The GID in network order.
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_global_route {
    #[allow(missing_docs)]
    pub dgid: ibv_gid,
    #[allow(missing_docs)]
    pub flow_label: u32,
    #[allow(missing_docs)]
    pub sgid_index: u8,
    #[allow(missing_docs)]
    pub hop_limit: u8,
    #[allow(missing_docs)]
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_ah_attr {
    #[allow(missing_docs)]
    pub grh: ibv_global_route,
    #[allow(missing_docs)]
    pub dlid: u16,
    #[allow(missing_docs)]
    pub sl: u8,
    #[allow(missing_docs)]
    pub src_path_bits: u8,
    #[allow(missing_docs)]
    pub static_rate: u8,
    #[allow(missing_docs)]
    pub is_global: u8,
    #[allow(missing_docs)]
    pub port_num: u8,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_srq_attr {
    #[allow(missing_docs)]
    pub max_wr: u32,
    #[allow(missing_docs)]
    pub max_sge: u32,
    #[allow(missing_docs)]
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct ibv_srq_init_attr {
    #[allow(missing_docs)]
    pub srq_context: *mut c_void,
    #[allow(missing_docs)]
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap` (tag matching; rverbs creates no tag-matching SRQ).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_tm_cap {
    #[allow(missing_docs)]
    pub max_num_tags: u32,
    #[allow(missing_docs)]
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
pub struct ibv_srq_init_attr_ex {
    #[allow(missing_docs)]
    pub srq_context: *mut c_void,
    #[allow(missing_docs)]
    pub attr: ibv_srq_attr,
    /// `enum ibv_srq_init_attr_mask`.
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: u32,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    /// `struct ibv_xrcd *` (rverbs has no XRC domains).
    pub xrcd: *mut c_void,
    #[allow(missing_docs)]
    pub cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_cap {
    #[allow(missing_docs)]
    pub max_send_wr: u32,
    #[allow(missing_docs)]
    pub max_recv_wr: u32,
    #[allow(missing_docs)]
    pub max_send_sge: u32,
    #[allow(missing_docs)]
    pub max_recv_sge: u32,
    #[allow(missing_docs)]
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_qp_init_attr {
    #[allow(missing_docs)]
    pub qp_context: *mut c_void,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    #[allow(missing_docs)]
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_rx_hash_conf {
    #[allow(missing_docs)]
    pub rx_hash_function: u8,
    #[allow(missing_docs)]
    pub rx_hash_key_len: u8,
    #[allow(missing_docs)]
    pub rx_hash_key: *mut u8,
    #[allow(missing_docs)]
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: the fields of [`ibv_qp_init_attr`], then the extension.
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    #[allow(missing_docs)]
    pub qp_context: *mut c_void,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    /// Not padded to 8 here, unlike the end of [`ibv_qp_init_attr`]: `comp_mask` follows.
    pub sq_sig_all: c_int,
    /// `IBV_QP_INIT_ATTR_*`.
    pub comp_mask: u32,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub xrcd: *mut c_void,
    #[allow(missing_docs)]
    pub create_flags: u32,
    #[allow(missing_docs)]
    pub max_tso_header: u16,
    #[allow(missing_docs)]
    pub rwq_ind_tbl: *mut c_void,
    #[allow(missing_docs)]
    pub rx_hash_conf: ibv_rx_hash_conf,
    #[allow(missing_docs)]
    pub source_qpn: u32,
    #[allow(missing_docs)]
    pub send_ops_flags: u64,
}

impl ibv_qp_init_attr_ex {
    /// The fields it shares with [`ibv_qp_init_attr`].
    pub fn base(&self) -> ibv_qp_init_attr {
        ibv_qp_init_attr {
            qp_context: self.qp_context,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
            srq: self.srq,
            cap: self.cap,
            qp_type: self.qp_type,
            sq_sig_all: self.sq_sig_all,
        }
    }

    /// `a` with the PD extension (`comp_mask` = `IBV_QP_INIT_ATTR_PD`), the rest zero.
    pub fn with_pd(a: &ibv_qp_init_attr, pd: *mut ibv_pd) -> Self {
        Self {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
            comp_mask: 1,
            pd,
            xrcd: std::ptr::null_mut(),
            create_flags: 0,
            max_tso_header: 0,
            rwq_ind_tbl: std::ptr::null_mut(),
            rx_hash_conf: ibv_rx_hash_conf {
                rx_hash_function: 0,
                rx_hash_key_len: 0,
                rx_hash_key: std::ptr::null_mut(),
                rx_hash_fields_mask: 0,
            },
            source_qpn: 0,
            send_ops_flags: 0,
        }
    }
}

/// `create_qp_ex` slot of [`verbs_context`].
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_qp_attr {
    /// `enum ibv_qp_state`.
    pub qp_state: u32,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: u32,
    /// `enum ibv_mtu`.
    pub path_mtu: u32,
    /// `enum ibv_mig_state`.
    pub path_mig_state: u32,
    #[allow(missing_docs)]
    pub qkey: u32,
    #[allow(missing_docs)]
    pub rq_psn: u32,
    #[allow(missing_docs)]
    pub sq_psn: u32,
    #[allow(missing_docs)]
    pub dest_qp_num: u32,
    #[allow(missing_docs)]
    pub qp_access_flags: c_uint,
    #[allow(missing_docs)]
    pub cap: ibv_qp_cap,
    #[allow(missing_docs)]
    pub ah_attr: ibv_ah_attr,
    #[allow(missing_docs)]
    pub alt_ah_attr: ibv_ah_attr,
    #[allow(missing_docs)]
    pub pkey_index: u16,
    #[allow(missing_docs)]
    pub alt_pkey_index: u16,
    #[allow(missing_docs)]
    pub en_sqd_async_notify: u8,
    #[allow(missing_docs)]
    pub sq_draining: u8,
    #[allow(missing_docs)]
    pub max_rd_atomic: u8,
    #[allow(missing_docs)]
    pub max_dest_rd_atomic: u8,
    #[allow(missing_docs)]
    pub min_rnr_timer: u8,
    #[allow(missing_docs)]
    pub port_num: u8,
    #[allow(missing_docs)]
    pub timeout: u8,
    #[allow(missing_docs)]
    pub retry_cnt: u8,
    #[allow(missing_docs)]
    pub rnr_retry: u8,
    #[allow(missing_docs)]
    pub alt_port_num: u8,
    #[allow(missing_docs)]
    pub alt_timeout: u8,
    #[allow(missing_docs)]
    pub rate_limit: u32,
}

/// `struct ibv_sge`: the same layout as [`rverbs_uverbs::Sge`] (checked by the layout test),
/// so a C gather list is used in place.
pub type ibv_sge = rverbs_uverbs::Sge;

/// `wr.rdma` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_rdma {
    #[allow(missing_docs)]
    pub remote_addr: u64,
    #[allow(missing_docs)]
    pub rkey: u32,
}

/// `wr.atomic` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_atomic {
    #[allow(missing_docs)]
    pub remote_addr: u64,
    #[allow(missing_docs)]
    pub compare_add: u64,
    #[allow(missing_docs)]
    pub swap: u64,
    #[allow(missing_docs)]
    pub rkey: u32,
}

/// `wr.ud` of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_ud {
    #[allow(missing_docs)]
    pub ah: *mut ibv_ah,
    #[allow(missing_docs)]
    pub remote_qpn: u32,
    #[allow(missing_docs)]
    pub remote_qkey: u32,
}

/// The `wr` union of [`ibv_send_wr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union wr_union {
    #[allow(missing_docs)]
    pub rdma: wr_rdma,
    #[allow(missing_docs)]
    pub atomic: wr_atomic,
    #[allow(missing_docs)]
    pub ud: wr_ud,
}

/// `bind_mw` of [`ibv_send_wr`] (`IBV_WR_BIND_MW`; the union's `tso` arm is not read).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_bind_mw {
    /// The window to bind.
    pub mw: *mut ibv_mw,
    /// Its new rkey (`ibv_inc_rkey(mw->rkey)`).
    pub rkey: u32,
    #[allow(missing_docs)]
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind_info {
    /// The region (NULL with length 0: unbind a type 1 window).
    pub mr: *mut ibv_mr,
    #[allow(missing_docs)]
    pub addr: u64,
    #[allow(missing_docs)]
    pub length: u64,
    /// `ibv_access_flags` of the window.
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw_bind` (`ibv_bind_mw`'s request).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_mw_bind {
    #[allow(missing_docs)]
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub send_flags: c_uint,
    #[allow(missing_docs)]
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_mw`.
#[repr(C)]
pub struct ibv_mw {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub rkey: u32,
    #[allow(missing_docs)]
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub mw_type: c_uint,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct ibv_send_wr {
    #[allow(missing_docs)]
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub next: *mut ibv_send_wr,
    #[allow(missing_docs)]
    pub sg_list: *mut ibv_sge,
    #[allow(missing_docs)]
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    #[allow(missing_docs)]
    pub send_flags: c_uint,
    /// Big-endian immediate data, or the rkey to invalidate.
    pub imm_data: u32,
    #[allow(missing_docs)]
    pub wr: wr_union,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// The `bind_mw` / `tso` union.
    pub bind_mw: wr_bind_mw,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    #[allow(missing_docs)]
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub next: *mut ibv_recv_wr,
    #[allow(missing_docs)]
    pub sg_list: *mut ibv_sge,
    #[allow(missing_docs)]
    pub num_sge: c_int,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub srq_context: *mut c_void,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub qp_context: *mut c_void,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub send_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub recv_cq: *mut ibv_cq,
    #[allow(missing_docs)]
    pub srq: *mut ibv_srq,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub events_completed: u32,
}

/// `struct ibv_data_buf`: one buffer of `ibv_wr_set_inline_data_list`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_data_buf {
    #[allow(missing_docs)]
    pub addr: *mut c_void,
    #[allow(missing_docs)]
    pub length: usize,
}

/// A builder of [`ibv_qp_ex`] with no operands (`wr_send`, `wr_start`, `wr_abort`).
pub type WrFn = unsafe extern "C" fn(*mut ibv_qp_ex);
/// A builder of [`ibv_qp_ex`] with one 32-bit operand (`wr_send_imm`, `wr_send_inv`,
/// `wr_local_inv`).
pub type WrU32Fn = unsafe extern "C" fn(*mut ibv_qp_ex, u32);
/// `wr_bind_mw`: the window, its new rkey, the bind (region, range, access).
pub type WrBindMwFn =
    unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_mw, u32, *const ibv_mw_bind_info);
/// `wr_rdma_read` / `wr_rdma_write`: rkey, remote address.
pub type WrRdmaFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64);
/// `wr_rdma_write_imm`: rkey, remote address, big-endian immediate data.
pub type WrRdmaImmFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
/// `wr_atomic_cmp_swp`: rkey, remote address, compare, swap.
pub type WrCmpSwpFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64);
/// `wr_atomic_fetch_add`: rkey, remote address, add.
pub type WrFetchAddFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64);
/// `wr_atomic_write`: rkey, remote address, the 8 bytes to write.
pub type WrAtomicWriteFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, *const c_void);
/// `wr_set_ud_addr`: AH, remote QPN, remote Q_Key.
pub type WrUdAddrFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32);
/// `wr_set_inline_data`: address, length.
pub type WrInlineFn = unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize);
/// `wr_set_inline_data_list`: count, buffers.
pub type WrInlineListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf);
/// `wr_set_sge`: lkey, address, length.
pub type WrSgeFn = unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32);
/// `wr_set_sge_list`: count, SGEs.
pub type WrSgeListFn = unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge);
/// `wr_complete`: 0 or a positive errno.
pub type WrCompleteFn = unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int;

/// `struct ibv_qp_ex`: an [`ibv_qp`] followed by the extended send API's fields and builders
/// (what the inline `ibv_wr_*` functions of `verbs.h` call). A NULL slot is an operation the
/// QP was not created with.
#[repr(C)]
pub struct ibv_qp_ex {
    /// The QP itself (`ibv_qp_to_qp_ex` returns a pointer to it).
    pub qp_base: ibv_qp,
    #[allow(missing_docs)]
    pub comp_mask: u64,
    /// The `wr_id` of the next work request built (the caller sets it).
    pub wr_id: u64,
    /// The `IBV_SEND_*` flags of the next work request built (the caller sets them).
    pub wr_flags: c_uint,
    #[allow(missing_docs)]
    pub wr_atomic_cmp_swp: Option<WrCmpSwpFn>,
    #[allow(missing_docs)]
    pub wr_atomic_fetch_add: Option<WrFetchAddFn>,
    /// A memory-window bind (RC, UC QPs that asked for `IBV_QP_EX_WITH_BIND_MW`).
    pub wr_bind_mw: Option<WrBindMwFn>,
    /// A local invalidation (RC QPs that asked for `IBV_QP_EX_WITH_LOCAL_INV`).
    pub wr_local_inv: Option<WrU32Fn>,
    #[allow(missing_docs)]
    pub wr_rdma_read: Option<WrRdmaFn>,
    #[allow(missing_docs)]
    pub wr_rdma_write: Option<WrRdmaFn>,
    #[allow(missing_docs)]
    pub wr_rdma_write_imm: Option<WrRdmaImmFn>,
    #[allow(missing_docs)]
    pub wr_send: Option<WrFn>,
    #[allow(missing_docs)]
    pub wr_send_imm: Option<WrU32Fn>,
    #[allow(missing_docs)]
    pub wr_send_inv: Option<WrU32Fn>,
    /// TSO: NULL.
    pub wr_send_tso: VoidFn,
    #[allow(missing_docs)]
    pub wr_set_ud_addr: Option<WrUdAddrFn>,
    /// XRC: NULL.
    pub wr_set_xrc_srqn: VoidFn,
    #[allow(missing_docs)]
    pub wr_set_inline_data: Option<WrInlineFn>,
    #[allow(missing_docs)]
    pub wr_set_inline_data_list: Option<WrInlineListFn>,
    #[allow(missing_docs)]
    pub wr_set_sge: Option<WrSgeFn>,
    #[allow(missing_docs)]
    pub wr_set_sge_list: Option<WrSgeListFn>,
    #[allow(missing_docs)]
    pub wr_start: Option<WrFn>,
    #[allow(missing_docs)]
    pub wr_complete: Option<WrCompleteFn>,
    #[allow(missing_docs)]
    pub wr_abort: Option<WrFn>,
    /// Atomic write (IBTA 1.5), where the QP was created with
    /// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
    pub wr_atomic_write: Option<WrAtomicWriteFn>,
}

impl ibv_qp_ex {
    /// `qp` with every extended field zero and every builder NULL.
    pub fn from_base(qp: ibv_qp) -> Self {
        Self {
            qp_base: qp,
            comp_mask: 0,
            wr_id: 0,
            wr_flags: 0,
            wr_atomic_cmp_swp: None,
            wr_atomic_fetch_add: None,
            wr_bind_mw: None,
            wr_local_inv: None,
            wr_rdma_read: None,
            wr_rdma_write: None,
            wr_rdma_write_imm: None,
            wr_send: None,
            wr_send_imm: None,
            wr_send_inv: None,
            wr_send_tso: None,
            wr_set_ud_addr: None,
            wr_set_xrc_srqn: None,
            wr_set_inline_data: None,
            wr_set_inline_data_list: None,
            wr_set_sge: None,
            wr_set_sge_list: None,
            wr_start: None,
            wr_complete: None,
            wr_abort: None,
            wr_atomic_write: None,
        }
    }
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub fd: c_int,
    #[allow(missing_docs)]
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub cq_context: *mut c_void,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub cqe: c_int,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub comp_events_completed: u32,
    #[allow(missing_docs)]
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_poll_cq_attr {
    /// Must be 0.
    pub comp_mask: u32,
}

/// `start_poll` of [`ibv_cq_ex`]: 0, `ENOENT` when empty, or another errno.
pub type StartPollFn = unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int;
/// `next_poll` of [`ibv_cq_ex`].
pub type NextPollFn = unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int;
/// `end_poll` of [`ibv_cq_ex`].
pub type EndPollFn = unsafe extern "C" fn(*mut ibv_cq_ex);
/// A 32-bit `read_*` of [`ibv_cq_ex`].
pub type ReadU32Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u32;
/// An 8-bit `read_*` of [`ibv_cq_ex`].
pub type ReadU8Fn = unsafe extern "C" fn(*mut ibv_cq_ex) -> u8;

/// `struct ibv_cq_ex`: the fields of [`ibv_cq`] (same names), then the current completion's
/// status and `wr_id` and the polling functions. A NULL `read_*` is a field the CQ was not
/// created to report.
#[repr(C)]
pub struct ibv_cq_ex {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub cq_context: *mut c_void,
    #[allow(missing_docs)]
    pub handle: u32,
    #[allow(missing_docs)]
    pub cqe: c_int,
    #[allow(missing_docs)]
    pub mutex: pthread_mutex_t,
    #[allow(missing_docs)]
    pub cond: pthread_cond_t,
    #[allow(missing_docs)]
    pub comp_events_completed: u32,
    #[allow(missing_docs)]
    pub async_events_completed: u32,
    #[allow(missing_docs)]
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: u32,
    /// `wr_id` of the current completion.
    pub wr_id: u64,
    #[allow(missing_docs)]
    pub start_poll: Option<StartPollFn>,
    #[allow(missing_docs)]
    pub next_poll: Option<NextPollFn>,
    #[allow(missing_docs)]
    pub end_poll: Option<EndPollFn>,
    /// `enum ibv_wc_opcode`.
    pub read_opcode: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_vendor_err: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_byte_len: Option<ReadU32Fn>,
    /// Big-endian immediate data, or the invalidated rkey.
    pub read_imm_data: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_qp_num: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_src_qp: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_wc_flags: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_slid: Option<ReadU32Fn>,
    #[allow(missing_docs)]
    pub read_sl: Option<ReadU8Fn>,
    #[allow(missing_docs)]
    pub read_dlid_path_bits: Option<ReadU8Fn>,
    /// Completion timestamps: NULL (rxe has none).
    pub read_completion_ts: VoidFn,
    /// NULL.
    pub read_cvlan: VoidFn,
    /// NULL.
    pub read_flow_tag: VoidFn,
    /// NULL.
    pub read_tm_info: VoidFn,
    /// NULL.
    pub read_completion_wallclock_ns: VoidFn,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    #[allow(missing_docs)]
    pub cqe: u32,
    #[allow(missing_docs)]
    pub cq_context: *mut c_void,
    #[allow(missing_docs)]
    pub channel: *mut ibv_comp_channel,
    #[allow(missing_docs)]
    pub comp_vector: u32,
    /// `IBV_WC_EX_WITH_*`.
    pub wc_flags: u64,
    /// `IBV_CQ_INIT_ATTR_MASK_*`.
    pub comp_mask: u32,
    /// `IBV_CREATE_CQ_ATTR_*`.
    pub flags: u32,
    #[allow(missing_docs)]
    pub parent_domain: *mut ibv_pd,
}

/// `create_cq_ex` slot of [`verbs_context`].
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;

/// `struct ibv_ah`.
#[repr(C)]
pub struct ibv_ah {
    #[allow(missing_docs)]
    pub context: *mut ibv_context,
    #[allow(missing_docs)]
    pub pd: *mut ibv_pd,
    #[allow(missing_docs)]
    pub handle: u32,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ibv_gid_entry {
    #[allow(missing_docs)]
    pub gid: ibv_gid,
    #[allow(missing_docs)]
    pub gid_index: u32,
    #[allow(missing_docs)]
    pub port_num: u32,
    /// `enum ibv_gid_type` (the kernel's numbers).
    pub gid_type: u32,
    #[allow(missing_docs)]
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event`: `element` is the union of `cq`, `qp`, `srq`, `wq` pointers and
/// `port_num`.
#[repr(C)]
pub struct ibv_async_event {
    /// The object (a pointer) or the port number (an `int` in the low bytes).
    pub element: *mut c_void,
    /// `enum ibv_event_type` (the kernel's numbers).
    pub event_type: u32,
}
