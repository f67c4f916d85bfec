//! The table the layout test (`tests/layout.rs`) checks every struct of [`super`] against.

use super::*;

/// The structs the layout test checks: the C type (a tag such as `ibv_qp`, or a C type
/// expression for an anonymous member's type, such as
/// `__typeof__(((struct ibv_send_wr *)0)->wr)`), the Rust type's name, its size, and
/// (C field designator, Rust offset) pairs.
pub type LayoutRow = (
    &'static str,
    &'static str,
    usize,
    &'static [(&'static str, usize)],
);

macro_rules! layouts {
    ($($cname:literal => $ty:ident { $($cf:literal : $($rf:ident).+),* $(,)? })*) => {
        /// Every struct and union of [`crate::abi`] with its size and field offsets, named as
        /// in C. `tests/layout.rs` fails when a `#[repr(C)]` type of `abi` has no row here.
        pub const LAYOUTS: &[LayoutRow] = &[
            $(($cname, stringify!($ty), std::mem::size_of::<$ty>(),
                &[$(($cf, std::mem::offset_of!($ty, $($rf).+))),*]),)*
        ];
    };
}

layouts! {
    "rdma_event_channel" => rdma_event_channel { "fd": fd }
    "rdma_ib_addr" => rdma_ib_addr { "sgid": sgid, "dgid": dgid, "pkey": pkey }
    "rdma_addr" => rdma_addr { "src_storage": src_storage, "dst_storage": dst_storage,
        "addr": ibaddr }
    "rdma_route" => rdma_route { "addr": addr, "path_rec": path_rec, "num_paths": num_paths }
    "rdma_cm_id" => rdma_cm_id { "verbs": verbs, "channel": channel, "context": context,
        "qp": qp, "route": route, "ps": ps, "port_num": port_num, "event": event,
        "send_cq_channel": send_cq_channel, "send_cq": send_cq,
        "recv_cq_channel": recv_cq_channel, "recv_cq": recv_cq, "srq": srq, "pd": pd,
        "qp_type": qp_type }
    "rdma_conn_param" => rdma_conn_param { "private_data": private_data,
        "private_data_len": private_data_len, "responder_resources": responder_resources,
        "initiator_depth": initiator_depth, "flow_control": flow_control,
        "retry_count": retry_count, "rnr_retry_count": rnr_retry_count, "srq": srq,
        "qp_num": qp_num }
    "rdma_ud_param" => rdma_ud_param { "private_data": private_data,
        "private_data_len": private_data_len, "ah_attr": ah_attr, "qp_num": qp_num,
        "qkey": qkey }
    "rdma_cm_join_mc_attr_ex" => rdma_cm_join_mc_attr_ex { "comp_mask": comp_mask,
        "join_flags": join_flags, "addr": addr }
    "rdma_cm_event" => rdma_cm_event { "id": id, "listen_id": listen_id, "event": event,
        "status": status, "param": param }
    "rdma_addrinfo" => rdma_addrinfo { "ai_flags": ai_flags, "ai_family": ai_family,
        "ai_qp_type": ai_qp_type, "ai_port_space": ai_port_space, "ai_src_len": ai_src_len,
        "ai_dst_len": ai_dst_len, "ai_src_addr": ai_src_addr, "ai_dst_addr": ai_dst_addr,
        "ai_src_canonname": ai_src_canonname, "ai_dst_canonname": ai_dst_canonname,
        "ai_route_len": ai_route_len, "ai_route": ai_route, "ai_connect_len": ai_connect_len,
        "ai_connect": ai_connect, "ai_next": ai_next }
    "ibv_gid" => ibv_gid { "raw": raw }
    "ibv_device" => ibv_device { "node_type": node_type, "transport_type": transport_type,
        "name": name, "dev_name": dev_name, "dev_path": dev_path, "ibdev_path": ibdev_path }
    "ibv_context_ops" => ibv_context_ops { "alloc_mw": alloc_mw, "bind_mw": bind_mw,
        "dealloc_mw": dealloc_mw, "poll_cq": poll_cq,
        "req_notify_cq": req_notify_cq, "post_srq_recv": post_srq_recv,
        "post_send": post_send, "post_recv": post_recv, "_compat_async_event": _compat_async_event }
    "ibv_context" => ibv_context { "device": device, "ops": ops, "cmd_fd": cmd_fd,
        "async_fd": async_fd, "num_comp_vectors": num_comp_vectors, "mutex": mutex,
        "abi_compat": abi_compat }
    "verbs_context" => verbs_context { "query_port": query_port, "advise_mr": advise_mr,
        "create_cq_ex": create_cq_ex,
        "priv": priv_, "query_device_ex": query_device_ex, "open_qp": open_qp,
        "create_qp_ex": create_qp_ex, "close_xrcd": close_xrcd, "sz": sz, "context": context }
    "ibv_device_attr" => ibv_device_attr { "fw_ver": fw_ver, "node_guid": node_guid,
        "sys_image_guid": sys_image_guid, "max_mr_size": max_mr_size, "vendor_id": vendor_id,
        "max_qp": max_qp, "device_cap_flags": device_cap_flags, "atomic_cap": atomic_cap,
        "max_srq_sge": max_srq_sge, "max_pkeys": max_pkeys,
        "local_ca_ack_delay": local_ca_ack_delay, "phys_port_cnt": phys_port_cnt }
    "ibv_device_attr_ex" => ibv_device_attr_ex { "orig_attr": orig_attr, "comp_mask": comp_mask,
        "odp_caps": odp_caps, "completion_timestamp_mask": completion_timestamp_mask,
        "hca_core_clock": hca_core_clock, "device_cap_flags_ex": device_cap_flags_ex,
        "tso_caps": tso_caps, "rss_caps": rss_caps, "max_wq_type_rq": max_wq_type_rq,
        "packet_pacing_caps": packet_pacing_caps, "raw_packet_caps": raw_packet_caps,
        "tm_caps": tm_caps, "cq_mod_caps": cq_mod_caps, "max_dm_size": max_dm_size,
        "pci_atomic_caps": pci_atomic_caps, "xrc_odp_caps": xrc_odp_caps,
        "phys_port_cnt_ex": phys_port_cnt_ex }
    "ibv_rss_caps" => ibv_rss_caps { "rx_hash_fields_mask": rx_hash_fields_mask,
        "rx_hash_function": rx_hash_function }
    "ibv_port_attr" => ibv_port_attr { "state": state, "max_mtu": max_mtu,
        "active_mtu": active_mtu, "gid_tbl_len": gid_tbl_len, "port_cap_flags": port_cap_flags,
        "max_msg_sz": max_msg_sz, "pkey_tbl_len": pkey_tbl_len, "lid": lid, "sm_lid": sm_lid,
        "lmc": lmc, "active_width": active_width, "active_speed": active_speed,
        "phys_state": phys_state, "link_layer": link_layer, "flags": flags,
        "port_cap_flags2": port_cap_flags2 }
    "ibv_wc" => ibv_wc { "wr_id": wr_id, "status": status, "opcode": opcode,
        "vendor_err": vendor_err, "byte_len": byte_len, "imm_data": imm_data, "qp_num": qp_num,
        "src_qp": src_qp, "wc_flags": wc_flags, "pkey_index": pkey_index, "slid": slid, "sl": sl,
        "dlid_path_bits": dlid_path_bits }
    "ibv_pd" => ibv_pd { "context": context, "handle": handle }
    "ibv_mr" => ibv_mr { "context": context, "pd": pd, "addr": addr, "length": length,
        "handle": handle, "lkey": lkey, "rkey": rkey }
    "ibv_global_route" => ibv_global_route { "dgid": dgid, "flow_label": flow_label,
        "sgid_index": sgid_index, "hop_limit": hop_limit, "traffic_class": traffic_class }
    "ibv_ah_attr" => ibv_ah_attr { "grh": grh, "dlid": dlid, "sl": sl,
        "src_path_bits": src_path_bits, "static_rate": static_rate, "is_global": is_global,
        "port_num": port_num }
    "ibv_srq_attr" => ibv_srq_attr { "max_wr": max_wr, "max_sge": max_sge,
        "srq_limit": srq_limit }
    "ibv_srq_init_attr" => ibv_srq_init_attr { "srq_context": srq_context, "attr": attr }
    "ibv_tm_cap" => ibv_tm_cap { "max_num_tags": max_num_tags, "max_ops": max_ops }
    "ibv_srq_init_attr_ex" => ibv_srq_init_attr_ex { "srq_context": srq_context, "attr": attr,
        "comp_mask": comp_mask, "srq_type": srq_type, "pd": pd, "xrcd": xrcd, "cq": cq,
        "tm_cap": tm_cap }
    "ibv_qp_cap" => ibv_qp_cap { "max_send_wr": max_send_wr, "max_recv_wr": max_recv_wr,
        "max_send_sge": max_send_sge, "max_recv_sge": max_recv_sge,
        "max_inline_data": max_inline_data }
    "ibv_qp_init_attr" => ibv_qp_init_attr { "qp_context": qp_context, "send_cq": send_cq,
        "recv_cq": recv_cq, "srq": srq, "cap": cap, "qp_type": qp_type, "sq_sig_all": sq_sig_all }
    "ibv_qp_init_attr_ex" => ibv_qp_init_attr_ex { "qp_context": qp_context,
        "send_cq": send_cq, "cap": cap, "qp_type": qp_type, "sq_sig_all": sq_sig_all,
        "comp_mask": comp_mask,
        "pd": pd, "xrcd": xrcd, "create_flags": create_flags, "max_tso_header": max_tso_header,
        "rwq_ind_tbl": rwq_ind_tbl, "rx_hash_conf": rx_hash_conf, "source_qpn": source_qpn,
        "send_ops_flags": send_ops_flags }
    "ibv_rx_hash_conf" => ibv_rx_hash_conf { "rx_hash_function": rx_hash_function,
        "rx_hash_key_len": rx_hash_key_len, "rx_hash_key": rx_hash_key,
        "rx_hash_fields_mask": rx_hash_fields_mask }
    "ibv_qp_attr" => ibv_qp_attr { "qp_state": qp_state, "cur_qp_state": cur_qp_state,
        "path_mtu": path_mtu, "path_mig_state": path_mig_state, "qkey": qkey, "rq_psn": rq_psn,
        "sq_psn": sq_psn, "dest_qp_num": dest_qp_num, "qp_access_flags": qp_access_flags,
        "cap": cap, "ah_attr": ah_attr, "alt_ah_attr": alt_ah_attr, "pkey_index": pkey_index,
        "alt_pkey_index": alt_pkey_index, "en_sqd_async_notify": en_sqd_async_notify,
        "sq_draining": sq_draining, "max_rd_atomic": max_rd_atomic,
        "max_dest_rd_atomic": max_dest_rd_atomic, "min_rnr_timer": min_rnr_timer,
        "port_num": port_num, "timeout": timeout, "retry_cnt": retry_cnt,
        "rnr_retry": rnr_retry, "alt_port_num": alt_port_num, "alt_timeout": alt_timeout,
        "rate_limit": rate_limit }
    "ibv_sge" => ibv_sge { "addr": addr, "length": length, "lkey": lkey }
    "ibv_send_wr" => ibv_send_wr { "wr_id": wr_id, "next": next, "sg_list": sg_list,
        "num_sge": num_sge, "opcode": opcode, "send_flags": send_flags, "imm_data": imm_data,
        "wr": wr, "qp_type": remote_srqn, "bind_mw": bind_mw, "bind_mw.mw": bind_mw.mw,
        "bind_mw.rkey": bind_mw.rkey, "bind_mw.bind_info": bind_mw.bind_info }
    "ibv_mw_bind_info" => ibv_mw_bind_info { "mr": mr, "addr": addr, "length": length,
        "mw_access_flags": mw_access_flags }
    "ibv_mw_bind" => ibv_mw_bind { "wr_id": wr_id, "send_flags": send_flags,
        "bind_info": bind_info }
    "ibv_mw" => ibv_mw { "context": context, "pd": pd, "rkey": rkey, "handle": handle,
        "type": mw_type }
    "ibv_recv_wr" => ibv_recv_wr { "wr_id": wr_id, "next": next, "sg_list": sg_list,
        "num_sge": num_sge }
    "ibv_srq" => ibv_srq { "context": context, "srq_context": srq_context, "pd": pd,
        "handle": handle, "mutex": mutex, "cond": cond, "events_completed": events_completed }
    "ibv_qp" => ibv_qp { "context": context, "qp_context": qp_context, "pd": pd,
        "send_cq": send_cq, "recv_cq": recv_cq, "srq": srq, "handle": handle, "qp_num": qp_num,
        "state": state, "qp_type": qp_type, "mutex": mutex, "cond": cond,
        "events_completed": events_completed }
    "ibv_qp_ex" => ibv_qp_ex { "qp_base": qp_base, "comp_mask": comp_mask, "wr_id": wr_id,
        "wr_flags": wr_flags, "wr_atomic_cmp_swp": wr_atomic_cmp_swp,
        "wr_atomic_fetch_add": wr_atomic_fetch_add, "wr_bind_mw": wr_bind_mw,
        "wr_local_inv": wr_local_inv, "wr_rdma_read": wr_rdma_read,
        "wr_rdma_write": wr_rdma_write, "wr_rdma_write_imm": wr_rdma_write_imm,
        "wr_send": wr_send, "wr_send_imm": wr_send_imm, "wr_send_inv": wr_send_inv,
        "wr_send_tso": wr_send_tso, "wr_set_ud_addr": wr_set_ud_addr,
        "wr_set_xrc_srqn": wr_set_xrc_srqn, "wr_set_inline_data": wr_set_inline_data,
        "wr_set_inline_data_list": wr_set_inline_data_list, "wr_set_sge": wr_set_sge,
        "wr_set_sge_list": wr_set_sge_list, "wr_start": wr_start, "wr_complete": wr_complete,
        "wr_abort": wr_abort, "wr_atomic_write": wr_atomic_write }
    "ibv_data_buf" => ibv_data_buf { "addr": addr, "length": length }
    "ibv_cq_ex" => ibv_cq_ex { "context": context, "channel": channel,
        "cq_context": cq_context, "handle": handle, "cqe": cqe, "mutex": mutex, "cond": cond,
        "comp_events_completed": comp_events_completed,
        "async_events_completed": async_events_completed, "comp_mask": comp_mask,
        "status": status, "wr_id": wr_id, "start_poll": start_poll, "next_poll": next_poll,
        "end_poll": end_poll, "read_opcode": read_opcode, "read_vendor_err": read_vendor_err,
        "read_byte_len": read_byte_len, "read_imm_data": read_imm_data,
        "read_qp_num": read_qp_num, "read_src_qp": read_src_qp,
        "read_wc_flags": read_wc_flags, "read_slid": read_slid, "read_sl": read_sl,
        "read_dlid_path_bits": read_dlid_path_bits, "read_completion_ts": read_completion_ts,
        "read_cvlan": read_cvlan, "read_flow_tag": read_flow_tag,
        "read_tm_info": read_tm_info,
        "read_completion_wallclock_ns": read_completion_wallclock_ns }
    "ibv_poll_cq_attr" => ibv_poll_cq_attr { "comp_mask": comp_mask }
    "ibv_cq_init_attr_ex" => ibv_cq_init_attr_ex { "cqe": cqe, "cq_context": cq_context,
        "channel": channel, "comp_vector": comp_vector, "wc_flags": wc_flags,
        "comp_mask": comp_mask, "flags": flags, "parent_domain": parent_domain }
    "ibv_comp_channel" => ibv_comp_channel { "context": context, "fd": fd, "refcnt": refcnt }
    "ibv_cq" => ibv_cq { "context": context, "channel": channel, "cq_context": cq_context,
        "handle": handle, "cqe": cqe, "mutex": mutex, "cond": cond,
        "comp_events_completed": comp_events_completed,
        "async_events_completed": async_events_completed }
    "ibv_ah" => ibv_ah { "context": context, "pd": pd, "handle": handle }
    "ibv_gid_entry" => ibv_gid_entry { "gid": gid, "gid_index": gid_index,
        "port_num": port_num, "gid_type": gid_type, "ndev_ifindex": ndev_ifindex }
    "ibv_async_event" => ibv_async_event { "element": element, "event_type": event_type }
    "ibv_sa_path_rec" => ibv_sa_path_rec { "dgid": dgid, "sgid": sgid, "dlid": dlid,
        "slid": slid, "raw_traffic": raw_traffic, "flow_label": flow_label,
        "hop_limit": hop_limit, "traffic_class": traffic_class, "reversible": reversible,
        "numb_path": numb_path, "pkey": pkey, "sl": sl, "mtu_selector": mtu_selector,
        "mtu": mtu, "rate_selector": rate_selector, "rate": rate,
        "packet_life_time_selector": packet_life_time_selector,
        "packet_life_time": packet_life_time, "preference": preference }
    "efadv_device_attr" => efadv_device_attr { "comp_mask": comp_mask,
        "max_sq_wr": max_sq_wr, "max_rq_wr": max_rq_wr, "max_sq_sge": max_sq_sge,
        "max_rq_sge": max_rq_sge, "inline_buf_size": inline_buf_size, "reserved": reserved,
        "device_caps": device_caps, "max_rdma_size": max_rdma_size }
    "efadv_qp_init_attr" => efadv_qp_init_attr { "comp_mask": comp_mask,
        "driver_qp_type": driver_qp_type, "reserved": reserved }
    "efadv_ah_attr" => efadv_ah_attr { "comp_mask": comp_mask, "ahn": ahn,
        "reserved": reserved }
    "_ibv_device_ops" => _ibv_device_ops { "_dummy1": _dummy1, "_dummy2": _dummy2 }
    "ibv_query_device_ex_input" => ibv_query_device_ex_input { "comp_mask": comp_mask }
    "ibv_odp_caps" => ibv_odp_caps { "general_caps": general_caps,
        "per_transport_caps.rc_odp_caps": rc_odp_caps,
        "per_transport_caps.uc_odp_caps": uc_odp_caps,
        "per_transport_caps.ud_odp_caps": ud_odp_caps }
    "ibv_tso_caps" => ibv_tso_caps { "max_tso": max_tso, "supported_qpts": supported_qpts }
    "ibv_packet_pacing_caps" => ibv_packet_pacing_caps {
        "qp_rate_limit_min": qp_rate_limit_min, "qp_rate_limit_max": qp_rate_limit_max,
        "supported_qpts": supported_qpts }
    "ibv_tm_caps" => ibv_tm_caps { "max_rndv_hdr_size": max_rndv_hdr_size,
        "max_num_tags": max_num_tags, "flags": flags, "max_ops": max_ops, "max_sge": max_sge }
    "ibv_cq_moderation_caps" => ibv_cq_moderation_caps { "max_cq_count": max_cq_count,
        "max_cq_period": max_cq_period }
    "ibv_pci_atomic_caps" => ibv_pci_atomic_caps { "fetch_add": fetch_add, "swap": swap,
        "compare_swap": compare_swap }
    "__typeof__(((struct ibv_send_wr *)0)->wr.rdma)" => wr_rdma {
        "remote_addr": remote_addr, "rkey": rkey }
    "__typeof__(((struct ibv_send_wr *)0)->wr.atomic)" => wr_atomic {
        "remote_addr": remote_addr, "compare_add": compare_add, "swap": swap, "rkey": rkey }
    "__typeof__(((struct ibv_send_wr *)0)->wr.ud)" => wr_ud { "ah": ah,
        "remote_qpn": remote_qpn, "remote_qkey": remote_qkey }
    "__typeof__(((struct ibv_send_wr *)0)->wr)" => wr_union { "rdma": rdma,
        "atomic": atomic, "ud": ud }
    "__typeof__(((struct ibv_send_wr *)0)->bind_mw)" => wr_bind_mw { "mw": mw,
        "rkey": rkey, "bind_info": bind_info }
    "__typeof__(((struct rdma_cm_event *)0)->param)" => rdma_cm_event_param {
        "conn": conn, "ud": ud }
}
