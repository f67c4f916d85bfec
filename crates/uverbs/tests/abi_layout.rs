//! Every raw ABI struct and number of `src/kernel/abi/` (and the kernel-defined numbers elsewhere)
//! checked against the real uapi headers in `/usr/include/rdma/` and `<linux/netlink.h>`.
//!
//! A C probe is generated from the tables below, compiled with `cc` (or `$CC`) and run; it
//! prints `sizeof` of each struct, `offsetof` and `sizeof` of each field, and the value of each
//! constant. The Rust side must match every one. Without a C compiler the test says SKIPPED
//! loudly (it exists on the development machine and in CI).
//!
//! # Adding your struct or constant (one line each)
//!
//! - Struct: add to [`layouts`]
//!   `layout!(ib_uverbs_foo { field_a, field_b, field_c }),`
//!   listing every field in order (rustfmt may spread it over several lines). The C struct
//!   must be `struct ib_uverbs_foo`; for a C type spelled differently write
//!   `layout!(rust_name = "C type" { ... })` and give it a name in `PRELUDE` if needed.
//! - Constant: add to [`constants`] `c!("C_EXPRESSION", rust_value),` — any C expression
//!   the headers make valid, compared as a signed 64-bit number.
//!
//! Two guards keep the tables honest: `abi_structs_are_all_checked` fails when a struct
//! defined in `src/kernel/abi/*.rs` has no `layout!` line, and `field_lists_cover_each_struct` fails
//! when a `layout!` line forgets a field (the listed fields must tile the struct exactly,
//! which holds because every ABI struct derives zerocopy's `IntoBytes`, i.e. has no padding).
//!
//! These are host tests: the VM builds (`--cfg rverbs_vm`) mark them ignored, as the guests
//! have neither the sources nor (the minimal one) a C compiler.

use std::collections::{BTreeSet, HashMap};
use std::mem::{offset_of, size_of};
use std::process::Command;
use std::sync::OnceLock;

use rverbs_uverbs::device::{DriverId, UVERBS_ABI_VERSION};
use rverbs_uverbs::gid::GidType;
use rverbs_uverbs::kernel::abi::cmd::*;
use rverbs_uverbs::kernel::abi::device::*;
use rverbs_uverbs::kernel::abi::ioctl::*;
use rverbs_uverbs::kernel::abi::netlink::*;
use rverbs_uverbs::kernel::abi::obj::*;

/// Size of a field, from a projection closure (no value of the struct needed).
fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    size_of::<F>()
}

struct Layout {
    rust: &'static str,
    c_type: String,
    size: usize,
    /// (field, offset, size)
    fields: Vec<(&'static str, usize, usize)>,
}

macro_rules! layout {
    ($t:ident = $c:literal { $($f:ident),* $(,)? }) => {
        Layout {
            rust: stringify!($t),
            c_type: $c.to_string(),
            size: size_of::<$t>(),
            fields: vec![$((stringify!($f), offset_of!($t, $f), field_size(|s: &$t| &s.$f))),*],
        }
    };
    ($t:ident { $($f:ident),* $(,)? }) => {
        Layout {
            rust: stringify!($t),
            c_type: concat!("struct ", stringify!($t)).to_string(),
            size: size_of::<$t>(),
            fields: vec![$((stringify!($f), offset_of!($t, $f), field_size(|s: &$t| &s.$f))),*],
        }
    };
}

/// C prelude: the headers, and names for C types that have none.
const PRELUDE: &str = "\
#include <stddef.h>
#include <stdio.h>
#include <linux/netlink.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_user_ioctl_cmds.h>
#include <rdma/ib_user_ioctl_cmds.h>
#include <rdma/rdma_netlink.h>
typedef __typeof__(((struct ib_uverbs_odp_caps *)0)->per_transport_caps) odp_per_transport_t;
";

fn layouts() -> Vec<Layout> {
    vec![
        // abi/ioctl.rs
        layout!(ib_uverbs_attr {
            attr_id,
            len,
            flags,
            attr_data,
            data
        }),
        layout!(ib_uverbs_ioctl_hdr {
            length,
            object_id,
            method_id,
            num_attrs,
            reserved1,
            driver_id,
            reserved2
        }),
        // abi/cmd.rs
        layout!(ib_uverbs_cmd_hdr {
            command,
            in_words,
            out_words
        }),
        layout!(ib_uverbs_ex_cmd_hdr {
            response,
            provider_in_words,
            provider_out_words,
            cmd_hdr_reserved
        }),
        // abi/netlink.rs
        layout!(nlmsghdr {
            nlmsg_len,
            nlmsg_type,
            nlmsg_flags,
            nlmsg_seq,
            nlmsg_pid
        }),
        layout!(nlmsgerr { error, msg }),
        layout!(nlattr { nla_len, nla_type }),
        // abi/device.rs
        layout!(ib_uverbs_get_context { response }),
        layout!(ib_uverbs_get_context_resp {
            async_fd,
            num_comp_vectors
        }),
        layout!(ib_uverbs_query_device { response }),
        layout!(ib_uverbs_query_device_resp {
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_ee_init_rd_atom,
            atomic_cap,
            max_ee,
            max_rdd,
            max_mw,
            max_raw_ipv6_qp,
            max_raw_ethy_qp,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach,
            max_ah,
            max_fmr,
            max_map_per_fmr,
            max_srq,
            max_srq_wr,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt,
            reserved,
        }),
        layout!(ib_uverbs_ex_query_device {
            comp_mask,
            reserved
        }),
        layout!(ib_uverbs_odp_per_transport_caps = "odp_per_transport_t" { rc_odp_caps, uc_odp_caps, ud_odp_caps }),
        layout!(ib_uverbs_odp_caps {
            general_caps,
            per_transport_caps,
            reserved
        }),
        layout!(ib_uverbs_rss_caps {
            supported_qpts,
            max_rwq_indirection_tables,
            max_rwq_indirection_table_size,
            reserved
        }),
        layout!(ib_uverbs_tm_caps {
            max_rndv_hdr_size,
            max_num_tags,
            flags,
            max_ops,
            max_sge,
            reserved
        }),
        layout!(ib_uverbs_cq_moderation_caps {
            max_cq_moderation_count,
            max_cq_moderation_period,
            reserved
        }),
        layout!(ib_uverbs_ex_query_device_resp {
            base,
            comp_mask,
            response_length,
            odp_caps,
            timestamp_mask,
            hca_core_clock,
            device_cap_flags_ex,
            rss_caps,
            max_wq_type_rq,
            raw_packet_caps,
            tm_caps,
            cq_moderation_caps,
            max_dm_size,
            xrc_odp_caps,
            reserved,
        }),
        layout!(ib_uverbs_query_port {
            response,
            port_num,
            reserved
        }),
        layout!(ib_uverbs_query_port_resp {
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            gid_tbl_len,
            pkey_tbl_len,
            lid,
            sm_lid,
            state,
            max_mtu,
            active_mtu,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            reserved,
        }),
        layout!(ib_uverbs_query_port_resp_ex {
            legacy_resp,
            port_cap_flags2,
            reserved
        }),
        layout!(ib_uverbs_gid_entry {
            gid,
            gid_index,
            port_num,
            gid_type,
            netdev_ifindex
        }), // abi/obj.rs
        layout!(ib_uverbs_alloc_pd { response }),
        layout!(ib_uverbs_dealloc_pd { pd_handle }),
        layout!(ib_uverbs_dereg_mr { mr_handle }),
        layout!(ib_uverbs_alloc_mw {
            response,
            pd_handle,
            mw_type,
            reserved
        }),
        layout!(ib_uverbs_alloc_mw_resp { mw_handle, rkey }),
        layout!(ib_uverbs_dealloc_mw { mw_handle }),
        layout!(ib_uverbs_create_cq {
            response,
            user_handle,
            cqe,
            comp_vector,
            comp_channel,
            reserved
        }),
        layout!(ib_uverbs_create_cq_resp { cq_handle, cqe }),
        layout!(ib_uverbs_destroy_cq {
            response,
            cq_handle,
            reserved
        }),
        layout!(ib_uverbs_create_qp {
            response,
            user_handle,
            pd_handle,
            send_cq_handle,
            recv_cq_handle,
            srq_handle,
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
            sq_sig_all,
            qp_type,
            is_srq,
            reserved
        }),
        layout!(ib_uverbs_create_qp_resp {
            qp_handle,
            qpn,
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
            reserved
        }),
        layout!(ib_uverbs_destroy_qp {
            response,
            qp_handle,
            reserved
        }),
        layout!(ib_uverbs_attach_mcast {
            gid,
            qp_handle,
            mlid,
            reserved
        }),
        layout!(ib_uverbs_detach_mcast = "struct ib_uverbs_detach_mcast" {
            gid,
            qp_handle,
            mlid,
            reserved
        }),
        layout!(ib_uverbs_destroy_ah { ah_handle }),
        layout!(ib_uverbs_destroy_srq {
            response,
            srq_handle,
            reserved
        }),
        layout!(ib_uverbs_alloc_pd_resp { pd_handle }),
        layout!(ib_uverbs_reg_mr {
            response,
            start,
            length,
            hca_va,
            pd_handle,
            access_flags
        }),
        layout!(ib_uverbs_reg_mr_resp {
            mr_handle,
            lkey,
            rkey
        }),
        layout!(ib_uverbs_create_comp_channel { response }),
        layout!(ib_uverbs_create_comp_channel_resp { fd }),
        layout!(ib_uverbs_req_notify_cq {
            cq_handle,
            solicited_only
        }),
        layout!(ib_uverbs_resize_cq {
            response,
            cq_handle,
            cqe
        }),
        layout!(ib_uverbs_resize_cq_resp { cqe, reserved }),
        layout!(ib_uverbs_destroy_cq_resp {
            comp_events_reported,
            async_events_reported
        }),
        layout!(ib_uverbs_qp_cap {
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data
        }),
        layout!(ib_uverbs_destroy_qp_resp { events_reported }),
        layout!(ib_uverbs_qp_dest {
            dgid,
            flow_label,
            dlid,
            reserved,
            sgid_index,
            hop_limit,
            traffic_class,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num,
        }),
        layout!(ib_uverbs_modify_qp {
            dest,
            alt_dest,
            qp_handle,
            attr_mask,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            pkey_index,
            alt_pkey_index,
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            en_sqd_async_notify,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            reserved,
        }),
        layout!(ib_uverbs_query_qp {
            response,
            qp_handle,
            attr_mask
        }),
        layout!(ib_uverbs_query_qp_resp {
            dest,
            alt_dest,
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            pkey_index,
            alt_pkey_index,
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            sq_sig_all,
            reserved,
        }),
        layout!(ib_uverbs_global_route {
            dgid,
            flow_label,
            sgid_index,
            hop_limit,
            traffic_class,
            reserved
        }),
        layout!(ib_uverbs_ah_attr {
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num,
            reserved
        }),
        layout!(ib_uverbs_qp_attr {
            qp_attr_mask,
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            ah_attr,
            alt_ah_attr,
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            reserved
        }),
        layout!(ib_uverbs_create_ah {
            response,
            user_handle,
            pd_handle,
            reserved,
            attr
        }),
        layout!(ib_uverbs_create_ah_resp { ah_handle }),
        layout!(ib_uverbs_create_srq {
            response,
            user_handle,
            pd_handle,
            max_wr,
            max_sge,
            srq_limit
        }),
        layout!(ib_uverbs_create_srq_resp {
            srq_handle,
            max_wr,
            max_sge,
            srqn
        }),
        layout!(ib_uverbs_modify_srq {
            srq_handle,
            attr_mask,
            max_wr,
            srq_limit
        }),
        layout!(ib_uverbs_query_srq {
            response,
            srq_handle,
            reserved
        }),
        layout!(ib_uverbs_query_srq_resp {
            max_wr,
            max_sge,
            srq_limit,
            reserved
        }),
        layout!(ib_uverbs_destroy_srq_resp { events_reported }),
        layout!(ib_uverbs_async_event_desc {
            element,
            event_type,
            reserved
        }),
        layout!(ib_uverbs_comp_event_desc { cq_handle }),
        layout!(ib_uverbs_post_send_resp { bad_wr }),
    ]
}

macro_rules! c {
    ($e:literal, $v:expr) => {
        ($e, i128::from($v))
    };
}

fn constants() -> Vec<(&'static str, i128)> {
    vec![
        // abi/ioctl.rs
        c!("RDMA_IOCTL_MAGIC", RDMA_IOCTL_MAGIC),
        c!("RDMA_VERBS_IOCTL", RDMA_VERBS_IOCTL),
        c!("UVERBS_ATTR_F_MANDATORY", UVERBS_ATTR_F_MANDATORY),
        c!("UVERBS_ATTR_F_VALID_OUTPUT", UVERBS_ATTR_F_VALID_OUTPUT),
        c!("UVERBS_UDATA_DRIVER_DATA_FLAG", UVERBS_ID_NS_DRIVER),
        c!("UVERBS_ATTR_UHW_IN", UVERBS_ATTR_UHW_IN),
        c!("UVERBS_ATTR_UHW_OUT", UVERBS_ATTR_UHW_OUT),
        c!("UVERBS_OBJECT_DEVICE", object::DEVICE),
        c!("UVERBS_OBJECT_PD", object::PD),
        c!("UVERBS_OBJECT_COMP_CHANNEL", object::COMP_CHANNEL),
        c!("UVERBS_OBJECT_CQ", object::CQ),
        c!("UVERBS_OBJECT_QP", object::QP),
        c!("UVERBS_OBJECT_SRQ", object::SRQ),
        c!("UVERBS_OBJECT_AH", object::AH),
        c!("UVERBS_OBJECT_MR", object::MR),
        c!("UVERBS_OBJECT_MW", object::MW),
        c!("UVERBS_OBJECT_FLOW", object::FLOW),
        c!("UVERBS_OBJECT_XRCD", object::XRCD),
        c!("UVERBS_OBJECT_RWQ_IND_TBL", object::RWQ_IND_TBL),
        c!("UVERBS_OBJECT_WQ", object::WQ),
        c!("UVERBS_OBJECT_FLOW_ACTION", object::FLOW_ACTION),
        c!("UVERBS_OBJECT_DM", object::DM),
        c!("UVERBS_OBJECT_COUNTERS", object::COUNTERS),
        c!("UVERBS_OBJECT_ASYNC_EVENT", object::ASYNC_EVENT),
        c!("UVERBS_METHOD_INVOKE_WRITE", device::METHOD_INVOKE_WRITE),
        c!("UVERBS_METHOD_INFO_HANDLES", device::METHOD_INFO_HANDLES),
        c!("UVERBS_METHOD_QUERY_PORT", device::METHOD_QUERY_PORT),
        c!("UVERBS_METHOD_GET_CONTEXT", device::METHOD_GET_CONTEXT),
        c!("UVERBS_METHOD_QUERY_CONTEXT", device::METHOD_QUERY_CONTEXT),
        c!(
            "UVERBS_METHOD_QUERY_GID_TABLE",
            device::METHOD_QUERY_GID_TABLE
        ),
        c!(
            "UVERBS_METHOD_QUERY_GID_ENTRY",
            device::METHOD_QUERY_GID_ENTRY
        ),
        c!("UVERBS_ATTR_CORE_IN", device::ATTR_CORE_IN),
        c!("UVERBS_ATTR_CORE_OUT", device::ATTR_CORE_OUT),
        c!("UVERBS_ATTR_WRITE_CMD", device::ATTR_WRITE_CMD),
        c!(
            "UVERBS_ATTR_GET_CONTEXT_NUM_COMP_VECTORS",
            device::ATTR_GET_CONTEXT_NUM_COMP_VECTORS
        ),
        c!(
            "UVERBS_ATTR_GET_CONTEXT_CORE_SUPPORT",
            device::ATTR_GET_CONTEXT_CORE_SUPPORT
        ),
        c!(
            "UVERBS_ATTR_QUERY_PORT_PORT_NUM",
            device::ATTR_QUERY_PORT_PORT_NUM
        ),
        c!("UVERBS_ATTR_QUERY_PORT_RESP", device::ATTR_QUERY_PORT_RESP),
        c!(
            "UVERBS_ATTR_QUERY_GID_TABLE_ENTRY_SIZE",
            device::ATTR_QUERY_GID_TABLE_ENTRY_SIZE
        ),
        c!(
            "UVERBS_ATTR_QUERY_GID_TABLE_FLAGS",
            device::ATTR_QUERY_GID_TABLE_FLAGS
        ),
        c!(
            "UVERBS_ATTR_QUERY_GID_TABLE_RESP_ENTRIES",
            device::ATTR_QUERY_GID_TABLE_RESP_ENTRIES
        ),
        c!(
            "UVERBS_ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES",
            device::ATTR_QUERY_GID_TABLE_RESP_NUM_ENTRIES
        ),
        c!(
            "UVERBS_ATTR_QUERY_GID_ENTRY_PORT",
            device::ATTR_QUERY_GID_ENTRY_PORT
        ),
        c!(
            "UVERBS_ATTR_QUERY_GID_ENTRY_GID_INDEX",
            device::ATTR_QUERY_GID_ENTRY_GID_INDEX
        ),
        c!(
            "UVERBS_ATTR_QUERY_GID_ENTRY_FLAGS",
            device::ATTR_QUERY_GID_ENTRY_FLAGS
        ),
        c!(
            "UVERBS_ATTR_QUERY_GID_ENTRY_RESP_ENTRY",
            device::ATTR_QUERY_GID_ENTRY_RESP_ENTRY
        ),
        c!("UVERBS_METHOD_ASYNC_EVENT_ALLOC", async_event::METHOD_ALLOC),
        c!(
            "UVERBS_ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE",
            async_event::ATTR_ALLOC_FD_HANDLE
        ),
        c!("UVERBS_METHOD_PD_DESTROY", pd::METHOD_DESTROY),
        c!("UVERBS_ATTR_DESTROY_PD_HANDLE", pd::ATTR_DESTROY_HANDLE),
        c!("UVERBS_METHOD_DM_MR_REG", mr::METHOD_DM_MR_REG),
        c!("UVERBS_METHOD_MR_DESTROY", mr::METHOD_DESTROY),
        c!("UVERBS_ATTR_DESTROY_MR_HANDLE", mr::ATTR_DESTROY_HANDLE),
        c!("UVERBS_METHOD_ADVISE_MR", mr::METHOD_ADVISE),
        c!("UVERBS_METHOD_QUERY_MR", mr::METHOD_QUERY),
        c!("UVERBS_METHOD_REG_DMABUF_MR", mr::METHOD_REG_DMABUF),
        c!(
            "UVERBS_ATTR_REG_DMABUF_MR_HANDLE",
            mr::ATTR_REG_DMABUF_HANDLE
        ),
        c!(
            "UVERBS_ATTR_REG_DMABUF_MR_PD_HANDLE",
            mr::ATTR_REG_DMABUF_PD_HANDLE
        ),
        c!(
            "UVERBS_ATTR_REG_DMABUF_MR_OFFSET",
            mr::ATTR_REG_DMABUF_OFFSET
        ),
        c!(
            "UVERBS_ATTR_REG_DMABUF_MR_LENGTH",
            mr::ATTR_REG_DMABUF_LENGTH
        ),
        c!("UVERBS_ATTR_REG_DMABUF_MR_IOVA", mr::ATTR_REG_DMABUF_IOVA),
        c!("UVERBS_ATTR_REG_DMABUF_MR_FD", mr::ATTR_REG_DMABUF_FD),
        c!(
            "UVERBS_ATTR_REG_DMABUF_MR_ACCESS_FLAGS",
            mr::ATTR_REG_DMABUF_ACCESS_FLAGS
        ),
        c!(
            "UVERBS_ATTR_REG_DMABUF_MR_RESP_LKEY",
            mr::ATTR_REG_DMABUF_RESP_LKEY
        ),
        c!(
            "UVERBS_ATTR_REG_DMABUF_MR_RESP_RKEY",
            mr::ATTR_REG_DMABUF_RESP_RKEY
        ),
        c!("UVERBS_METHOD_MW_DESTROY", mw::METHOD_DESTROY),
        c!("UVERBS_ATTR_DESTROY_MW_HANDLE", mw::ATTR_DESTROY_HANDLE),
        c!("UVERBS_METHOD_CQ_CREATE", cq::METHOD_CREATE),
        c!("UVERBS_METHOD_CQ_DESTROY", cq::METHOD_DESTROY),
        c!("UVERBS_ATTR_CREATE_CQ_HANDLE", cq::ATTR_CREATE_HANDLE),
        c!("UVERBS_ATTR_CREATE_CQ_CQE", cq::ATTR_CREATE_CQE),
        c!(
            "UVERBS_ATTR_CREATE_CQ_USER_HANDLE",
            cq::ATTR_CREATE_USER_HANDLE
        ),
        c!(
            "UVERBS_ATTR_CREATE_CQ_COMP_CHANNEL",
            cq::ATTR_CREATE_COMP_CHANNEL
        ),
        c!(
            "UVERBS_ATTR_CREATE_CQ_COMP_VECTOR",
            cq::ATTR_CREATE_COMP_VECTOR
        ),
        c!("UVERBS_ATTR_CREATE_CQ_FLAGS", cq::ATTR_CREATE_FLAGS),
        c!("UVERBS_ATTR_CREATE_CQ_RESP_CQE", cq::ATTR_CREATE_RESP_CQE),
        c!("UVERBS_ATTR_CREATE_CQ_EVENT_FD", cq::ATTR_CREATE_EVENT_FD),
        c!("UVERBS_ATTR_DESTROY_CQ_HANDLE", cq::ATTR_DESTROY_HANDLE),
        c!("UVERBS_ATTR_DESTROY_CQ_RESP", cq::ATTR_DESTROY_RESP),
        c!("UVERBS_METHOD_QP_CREATE", qp::METHOD_CREATE),
        c!("UVERBS_METHOD_QP_DESTROY", qp::METHOD_DESTROY),
        c!("UVERBS_ATTR_CREATE_QP_HANDLE", qp::ATTR_CREATE_HANDLE),
        c!(
            "UVERBS_ATTR_CREATE_QP_XRCD_HANDLE",
            qp::ATTR_CREATE_XRCD_HANDLE
        ),
        c!("UVERBS_ATTR_CREATE_QP_PD_HANDLE", qp::ATTR_CREATE_PD_HANDLE),
        c!(
            "UVERBS_ATTR_CREATE_QP_SRQ_HANDLE",
            qp::ATTR_CREATE_SRQ_HANDLE
        ),
        c!(
            "UVERBS_ATTR_CREATE_QP_SEND_CQ_HANDLE",
            qp::ATTR_CREATE_SEND_CQ_HANDLE
        ),
        c!(
            "UVERBS_ATTR_CREATE_QP_RECV_CQ_HANDLE",
            qp::ATTR_CREATE_RECV_CQ_HANDLE
        ),
        c!(
            "UVERBS_ATTR_CREATE_QP_IND_TABLE_HANDLE",
            qp::ATTR_CREATE_IND_TABLE_HANDLE
        ),
        c!(
            "UVERBS_ATTR_CREATE_QP_USER_HANDLE",
            qp::ATTR_CREATE_USER_HANDLE
        ),
        c!("UVERBS_ATTR_CREATE_QP_CAP", qp::ATTR_CREATE_CAP),
        c!("UVERBS_ATTR_CREATE_QP_TYPE", qp::ATTR_CREATE_TYPE),
        c!("UVERBS_ATTR_CREATE_QP_FLAGS", qp::ATTR_CREATE_FLAGS),
        c!(
            "UVERBS_ATTR_CREATE_QP_SOURCE_QPN",
            qp::ATTR_CREATE_SOURCE_QPN
        ),
        c!("UVERBS_ATTR_CREATE_QP_EVENT_FD", qp::ATTR_CREATE_EVENT_FD),
        c!("UVERBS_ATTR_CREATE_QP_RESP_CAP", qp::ATTR_CREATE_RESP_CAP),
        c!(
            "UVERBS_ATTR_CREATE_QP_RESP_QP_NUM",
            qp::ATTR_CREATE_RESP_QP_NUM
        ),
        c!("UVERBS_ATTR_DESTROY_QP_HANDLE", qp::ATTR_DESTROY_HANDLE),
        c!("UVERBS_ATTR_DESTROY_QP_RESP", qp::ATTR_DESTROY_RESP),
        c!("UVERBS_METHOD_SRQ_CREATE", srq::METHOD_CREATE),
        c!("UVERBS_METHOD_SRQ_DESTROY", srq::METHOD_DESTROY),
        c!("UVERBS_ATTR_DESTROY_SRQ_HANDLE", srq::ATTR_DESTROY_HANDLE),
        c!("UVERBS_ATTR_DESTROY_SRQ_RESP", srq::ATTR_DESTROY_RESP),
        c!("UVERBS_METHOD_AH_DESTROY", ah::METHOD_DESTROY),
        c!("UVERBS_ATTR_DESTROY_AH_HANDLE", ah::ATTR_DESTROY_HANDLE),
        // abi/cmd.rs
        c!("IB_USER_VERBS_CMD_GET_CONTEXT", nr::GET_CONTEXT),
        c!("IB_USER_VERBS_CMD_QUERY_DEVICE", nr::QUERY_DEVICE),
        c!("IB_USER_VERBS_CMD_QUERY_PORT", nr::QUERY_PORT),
        c!("IB_USER_VERBS_CMD_ALLOC_PD", nr::ALLOC_PD),
        c!("IB_USER_VERBS_CMD_DEALLOC_PD", nr::DEALLOC_PD),
        c!("IB_USER_VERBS_CMD_CREATE_AH", nr::CREATE_AH),
        c!("IB_USER_VERBS_CMD_MODIFY_AH", nr::MODIFY_AH),
        c!("IB_USER_VERBS_CMD_QUERY_AH", nr::QUERY_AH),
        c!("IB_USER_VERBS_CMD_DESTROY_AH", nr::DESTROY_AH),
        c!("IB_USER_VERBS_CMD_REG_MR", nr::REG_MR),
        c!("IB_USER_VERBS_CMD_REG_SMR", nr::REG_SMR),
        c!("IB_USER_VERBS_CMD_REREG_MR", nr::REREG_MR),
        c!("IB_USER_VERBS_CMD_QUERY_MR", nr::QUERY_MR),
        c!("IB_USER_VERBS_CMD_DEREG_MR", nr::DEREG_MR),
        c!("IB_USER_VERBS_CMD_ALLOC_MW", nr::ALLOC_MW),
        c!("IB_USER_VERBS_CMD_BIND_MW", nr::BIND_MW),
        c!("IB_USER_VERBS_CMD_DEALLOC_MW", nr::DEALLOC_MW),
        c!(
            "IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL",
            nr::CREATE_COMP_CHANNEL
        ),
        c!("IB_USER_VERBS_CMD_CREATE_CQ", nr::CREATE_CQ),
        c!("IB_USER_VERBS_CMD_RESIZE_CQ", nr::RESIZE_CQ),
        c!("IB_USER_VERBS_CMD_DESTROY_CQ", nr::DESTROY_CQ),
        c!("IB_USER_VERBS_CMD_POLL_CQ", nr::POLL_CQ),
        c!("IB_USER_VERBS_CMD_PEEK_CQ", nr::PEEK_CQ),
        c!("IB_USER_VERBS_CMD_REQ_NOTIFY_CQ", nr::REQ_NOTIFY_CQ),
        c!("IB_USER_VERBS_CMD_CREATE_QP", nr::CREATE_QP),
        c!("IB_USER_VERBS_CMD_QUERY_QP", nr::QUERY_QP),
        c!("IB_USER_VERBS_CMD_MODIFY_QP", nr::MODIFY_QP),
        c!("IB_USER_VERBS_CMD_DESTROY_QP", nr::DESTROY_QP),
        c!("IB_USER_VERBS_CMD_POST_SEND", nr::POST_SEND),
        c!("IB_USER_VERBS_CMD_POST_RECV", nr::POST_RECV),
        c!("IB_USER_VERBS_CMD_ATTACH_MCAST", nr::ATTACH_MCAST),
        c!("IB_USER_VERBS_CMD_DETACH_MCAST", nr::DETACH_MCAST),
        c!("IB_USER_VERBS_CMD_CREATE_SRQ", nr::CREATE_SRQ),
        c!("IB_USER_VERBS_CMD_MODIFY_SRQ", nr::MODIFY_SRQ),
        c!("IB_USER_VERBS_CMD_QUERY_SRQ", nr::QUERY_SRQ),
        c!("IB_USER_VERBS_CMD_DESTROY_SRQ", nr::DESTROY_SRQ),
        c!("IB_USER_VERBS_CMD_POST_SRQ_RECV", nr::POST_SRQ_RECV),
        c!("IB_USER_VERBS_CMD_OPEN_XRCD", nr::OPEN_XRCD),
        c!("IB_USER_VERBS_CMD_CLOSE_XRCD", nr::CLOSE_XRCD),
        c!("IB_USER_VERBS_CMD_CREATE_XSRQ", nr::CREATE_XSRQ),
        c!("IB_USER_VERBS_CMD_OPEN_QP", nr::OPEN_QP),
        c!("IB_USER_VERBS_CMD_FLAG_EXTENDED", CMD_FLAG_EXTENDED),
        c!("IB_USER_VERBS_EX_CMD_QUERY_DEVICE", ex_nr::QUERY_DEVICE),
        c!("IB_USER_VERBS_EX_CMD_CREATE_CQ", ex_nr::CREATE_CQ),
        c!("IB_USER_VERBS_EX_CMD_CREATE_QP", ex_nr::CREATE_QP),
        c!("IB_USER_VERBS_EX_CMD_MODIFY_QP", ex_nr::MODIFY_QP),
        c!("IB_USER_VERBS_EX_CMD_MODIFY_CQ", ex_nr::MODIFY_CQ),
        c!("IB_USER_VERBS_ABI_VERSION", UVERBS_ABI_VERSION),
        // abi/device.rs
        c!("IB_UVERBS_GID_TYPE_IB", gid_type::IB),
        c!("IB_UVERBS_GID_TYPE_ROCE_V1", gid_type::ROCE_V1),
        c!("IB_UVERBS_GID_TYPE_ROCE_V2", gid_type::ROCE_V2),
        c!("IB_UVERBS_GID_TYPE_IB", GidType::IB.0),
        c!("IB_UVERBS_GID_TYPE_ROCE_V1", GidType::ROCE_V1.0),
        c!("IB_UVERBS_GID_TYPE_ROCE_V2", GidType::ROCE_V2.0),
        c!(
            "IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS",
            IB_UVERBS_CORE_SUPPORT_OPTIONAL_MR_ACCESS
        ),
        c!("IB_UVERBS_QPF_GRH_REQUIRED", IB_UVERBS_QPF_GRH_REQUIRED),
        // abi/obj.rs
        c!(
            "IB_UVERBS_QP_CREATE_SQ_SIG_ALL",
            IB_UVERBS_QP_CREATE_SQ_SIG_ALL
        ),
        // device.rs: enum rdma_driver_id
        c!("RDMA_DRIVER_UNKNOWN", DriverId::UNKNOWN.0),
        c!("RDMA_DRIVER_MLX5", DriverId::MLX5.0),
        c!("RDMA_DRIVER_MLX4", DriverId::MLX4.0),
        c!("RDMA_DRIVER_CXGB3", DriverId::CXGB3.0),
        c!("RDMA_DRIVER_CXGB4", DriverId::CXGB4.0),
        c!("RDMA_DRIVER_MTHCA", DriverId::MTHCA.0),
        c!("RDMA_DRIVER_BNXT_RE", DriverId::BNXT_RE.0),
        c!("RDMA_DRIVER_OCRDMA", DriverId::OCRDMA.0),
        c!("RDMA_DRIVER_NES", DriverId::NES.0),
        c!("RDMA_DRIVER_I40IW", DriverId::I40IW.0),
        c!("RDMA_DRIVER_IRDMA", DriverId::IRDMA.0),
        c!("RDMA_DRIVER_VMW_PVRDMA", DriverId::VMW_PVRDMA.0),
        c!("RDMA_DRIVER_QEDR", DriverId::QEDR.0),
        c!("RDMA_DRIVER_HNS", DriverId::HNS.0),
        c!("RDMA_DRIVER_USNIC", DriverId::USNIC.0),
        c!("RDMA_DRIVER_RXE", DriverId::RXE.0),
        c!("RDMA_DRIVER_HFI1", DriverId::HFI1.0),
        c!("RDMA_DRIVER_QIB", DriverId::QIB.0),
        c!("RDMA_DRIVER_EFA", DriverId::EFA.0),
        c!("RDMA_DRIVER_SIW", DriverId::SIW.0),
        c!("RDMA_DRIVER_ERDMA", DriverId::ERDMA.0),
        // abi/netlink.rs
        c!("NETLINK_RDMA", NETLINK_RDMA),
        c!("NLMSG_ALIGNTO", NLMSG_ALIGNTO as u64),
        c!("NLA_ALIGNTO", NLA_ALIGNTO as u64),
        c!("NLM_F_REQUEST", NLM_F_REQUEST),
        c!("NLM_F_MULTI", NLM_F_MULTI),
        c!("NLM_F_ACK", NLM_F_ACK),
        c!("NLM_F_DUMP_INTR", NLM_F_DUMP_INTR),
        c!("NLM_F_ROOT", NLM_F_ROOT),
        c!("NLM_F_MATCH", NLM_F_MATCH),
        c!("NLM_F_DUMP", NLM_F_DUMP),
        c!("NLMSG_NOOP", NLMSG_NOOP),
        c!("NLMSG_ERROR", NLMSG_ERROR),
        c!("NLMSG_DONE", NLMSG_DONE),
        c!("NLMSG_OVERRUN", NLMSG_OVERRUN),
        c!("NLA_F_NESTED", NLA_F_NESTED),
        c!("NLA_F_NET_BYTEORDER", NLA_F_NET_BYTEORDER),
        c!("RDMA_NLA_F_MANDATORY", RDMA_NLA_F_MANDATORY),
        c!("RDMA_NLA_TYPE_MASK & 0xffff", RDMA_NLA_TYPE_MASK),
        c!("RDMA_NL_NLDEV", RDMA_NL_NLDEV),
        c!(
            "RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET_CHARDEV)",
            rdma_nl_get_type(RDMA_NL_NLDEV, cmd::GET_CHARDEV)
        ),
        c!(
            "RDMA_NL_GET_CLIENT(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_PORT_GET))",
            rdma_nl_get_client(rdma_nl_get_type(RDMA_NL_NLDEV, cmd::PORT_GET))
        ),
        c!(
            "RDMA_NL_GET_OP(RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_PORT_GET))",
            rdma_nl_get_op(rdma_nl_get_type(RDMA_NL_NLDEV, cmd::PORT_GET))
        ),
        c!("RDMA_NLDEV_CMD_GET", cmd::GET),
        c!("RDMA_NLDEV_CMD_SET", cmd::SET),
        c!("RDMA_NLDEV_CMD_NEWLINK", cmd::NEWLINK),
        c!("RDMA_NLDEV_CMD_DELLINK", cmd::DELLINK),
        c!("RDMA_NLDEV_CMD_PORT_GET", cmd::PORT_GET),
        c!("RDMA_NLDEV_CMD_SYS_GET", cmd::SYS_GET),
        c!("RDMA_NLDEV_CMD_SYS_SET", cmd::SYS_SET),
        c!("RDMA_NLDEV_CMD_RES_GET", cmd::RES_GET),
        c!("RDMA_NLDEV_CMD_GET_CHARDEV", cmd::GET_CHARDEV),
        c!("RDMA_NLDEV_ATTR_PAD", attr::PAD),
        c!("RDMA_NLDEV_ATTR_DEV_INDEX", attr::DEV_INDEX),
        c!("RDMA_NLDEV_ATTR_DEV_NAME", attr::DEV_NAME),
        c!("RDMA_NLDEV_ATTR_PORT_INDEX", attr::PORT_INDEX),
        c!("RDMA_NLDEV_ATTR_CAP_FLAGS", attr::CAP_FLAGS),
        c!("RDMA_NLDEV_ATTR_FW_VERSION", attr::FW_VERSION),
        c!("RDMA_NLDEV_ATTR_NODE_GUID", attr::NODE_GUID),
        c!("RDMA_NLDEV_ATTR_SYS_IMAGE_GUID", attr::SYS_IMAGE_GUID),
        c!("RDMA_NLDEV_ATTR_SUBNET_PREFIX", attr::SUBNET_PREFIX),
        c!("RDMA_NLDEV_ATTR_LID", attr::LID),
        c!("RDMA_NLDEV_ATTR_SM_LID", attr::SM_LID),
        c!("RDMA_NLDEV_ATTR_LMC", attr::LMC),
        c!("RDMA_NLDEV_ATTR_PORT_STATE", attr::PORT_STATE),
        c!("RDMA_NLDEV_ATTR_PORT_PHYS_STATE", attr::PORT_PHYS_STATE),
        c!("RDMA_NLDEV_ATTR_DEV_NODE_TYPE", attr::DEV_NODE_TYPE),
        c!("RDMA_NLDEV_ATTR_NDEV_INDEX", attr::NDEV_INDEX),
        c!("RDMA_NLDEV_ATTR_NDEV_NAME", attr::NDEV_NAME),
        c!("RDMA_NLDEV_ATTR_LINK_TYPE", attr::LINK_TYPE),
        c!("RDMA_NLDEV_ATTR_DEV_PROTOCOL", attr::DEV_PROTOCOL),
        c!("RDMA_NLDEV_ATTR_CHARDEV_TYPE", attr::CHARDEV_TYPE),
        c!("RDMA_NLDEV_ATTR_CHARDEV_NAME", attr::CHARDEV_NAME),
        c!("RDMA_NLDEV_ATTR_CHARDEV_ABI", attr::CHARDEV_ABI),
        c!("RDMA_NLDEV_ATTR_CHARDEV", attr::CHARDEV),
        c!("RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID", attr::UVERBS_DRIVER_ID),
        c!("RDMA_NLDEV_ATTR_DEV_DIM", attr::DEV_DIM),
    ]
}

fn probe_source() -> String {
    let mut c = String::from(PRELUDE);
    c += "int main(void) {\n";
    for l in layouts() {
        let (r, t) = (l.rust, &l.c_type);
        c += &format!("printf(\"S\\t{r}\\t%zu\\n\", sizeof({t}));\n");
        for (f, _, _) in &l.fields {
            c += &format!(
                "printf(\"F\\t{r}\\t{f}\\t%zu\\t%zu\\n\", offsetof({t}, {f}), sizeof((({t} *)0)->{f}));\n"
            );
        }
    }
    for (k, _) in constants() {
        c += &format!("printf(\"C\\t{k}\\t%lld\\n\", (long long)({k}));\n");
    }
    c += "return 0;\n}\n";
    c
}

/// What the C probe printed, keyed by its first columns; `None` when there is no compiler.
/// Compiled and run once for all tests.
fn run_probe() -> Option<&'static HashMap<String, Vec<i128>>> {
    static PROBE: OnceLock<Option<HashMap<String, Vec<i128>>>> = OnceLock::new();
    PROBE.get_or_init(compile_and_run_probe).as_ref()
}

fn compile_and_run_probe() -> Option<HashMap<String, Vec<i128>>> {
    let dir = std::env::temp_dir().join(format!("rverbs-uverbs-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, probe_source()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc)
        .arg("-Wall")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("\n*** SKIPPED: uverbs ABI layout check: no C compiler ({cc}: {e}) ***\n");
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
    };
    assert!(
        out.status.success(),
        "the C probe did not compile (a name in the tables is not in the headers?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the C probe");
    assert!(run.status.success(), "the C probe failed");
    let _ = std::fs::remove_dir_all(&dir);
    let mut m = HashMap::new();
    for line in String::from_utf8(run.stdout).unwrap().lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        let (key, nums) = match cols[0] {
            "S" => (format!("S {}", cols[1]), &cols[2..]),
            "F" => (format!("F {}.{}", cols[1], cols[2]), &cols[3..]),
            "C" => (format!("C {}", cols[1]), &cols[2..]),
            other => panic!("probe printed {other:?}"),
        };
        m.insert(key, nums.iter().map(|n| n.parse().unwrap()).collect());
    }
    Some(m)
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "a host test: needs the sources and a C compiler")]
#[cfg_attr(miri, ignore = "Miri cannot run a C compiler")]
fn structs_match_the_kernel_headers() {
    let Some(c) = run_probe() else { return };
    let mut bad = Vec::new();
    let mut checked = 0;
    for l in layouts() {
        let want = c[&format!("S {}", l.rust)][0];
        if want != l.size as i128 {
            bad.push(format!("sizeof({}): C {want}, Rust {}", l.c_type, l.size));
        }
        for (f, off, size) in &l.fields {
            let v = &c[&format!("F {}.{f}", l.rust)];
            if v[0] != *off as i128 || v[1] != *size as i128 {
                bad.push(format!(
                    "{}.{f}: C offset {} size {}, Rust offset {off} size {size}",
                    l.rust, v[0], v[1]
                ));
            }
            checked += 1;
        }
    }
    assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
    assert!(checked > 100, "only {checked} fields checked");
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "a host test: needs the sources and a C compiler")]
#[cfg_attr(miri, ignore = "Miri cannot run a C compiler")]
fn constants_match_the_kernel_headers() {
    let Some(c) = run_probe() else { return };
    let bad: Vec<String> = constants()
        .into_iter()
        .filter_map(|(k, v)| {
            let want = c[&format!("C {k}")][0];
            (want != v).then(|| format!("{k}: C {want}, Rust {v}"))
        })
        .collect();
    assert!(bad.is_empty(), "constant mismatches:\n{}", bad.join("\n"));
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "a host test: needs the sources and a C compiler")]
fn field_lists_cover_each_struct() {
    for l in layouts() {
        let mut fields = l.fields.clone();
        fields.sort_by_key(|f| f.1);
        let mut at = 0;
        for (f, off, size) in &fields {
            assert_eq!(
                *off, at,
                "{}: field {f} at {off}, expected one at {at} (a field is missing from its layout! line)",
                l.rust
            );
            at += size;
        }
        assert_eq!(
            at, l.size,
            "{}: listed fields end at {at} of {} bytes",
            l.rust, l.size
        );
    }
}

/// Struct names defined in a Rust source: `pub struct NAME` and the lead's
/// `abi_struct!(NAME {`, the two ways src/kernel/abi/ defines ABI structs.
fn structs_in(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in src.lines() {
        let l = line.trim_start();
        let rest = if let Some(r) = l.strip_prefix("pub struct ") {
            r
        } else if let Some(r) = l.strip_prefix("abi_struct!(") {
            r
        } else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // `pub struct $name` inside a macro definition is not a struct.
        if !name.is_empty() {
            out.push(name);
        }
    }
    out
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "a host test: needs the sources and a C compiler")]
fn abi_structs_are_all_checked() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/kernel/abi");
    let listed: BTreeSet<&str> = layouts().iter().map(|l| l.rust).collect();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            for s in structs_in(&std::fs::read_to_string(&p).unwrap()) {
                if !listed.contains(s.as_str()) {
                    missing.push(format!("{} ({})", s, p.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "ABI structs without a layout! line in tests/abi_layout.rs:\n{}",
        missing.join("\n")
    );
}
