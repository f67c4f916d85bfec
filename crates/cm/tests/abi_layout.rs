//! Every ucma ABI structure of `rverbs_cm::abi` against the real uapi header: a C probe
//! including `/usr/include/rdma/rdma_user_cm.h` prints sizeof / _Alignof / offsetof of each
//! structure and field, and the values of the command, port-space, query, option and path-flag
//! constants; the test compares them with Rust's `size_of` / `align_of` / `offset_of!`.
//!
//! `sockaddr_ib` is not a uapi structure (kernel `include/rdma/ib.h`): it is pinned by a unit
//! test in `src/addr.rs` and exercised by the VM tests. The rdma_cm event numbers are not in the
//! uapi header either: `src/types.rs` pins them.

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use rverbs_cm::abi::*;

struct Entry {
    c: &'static str,
    size: usize,
    align: usize,
    fields: Vec<(&'static str, usize)>,
}

macro_rules! entry {
    ($t:ident, $c:literal, [$($f:ident),* $(,)?]) => {
        Entry {
            c: $c,
            size: size_of::<$t>(),
            align: align_of::<$t>(),
            fields: vec![$((stringify!($f).trim_start_matches("r#"), offset_of!($t, $f))),*],
        }
    };
}

fn table() -> Vec<Entry> {
    vec![
        entry!(
            rdma_ucm_cmd_hdr,
            "struct rdma_ucm_cmd_hdr",
            [cmd, r#in, out]
        ),
        entry!(
            sockaddr_in,
            "struct sockaddr_in",
            [sin_family, sin_port, sin_addr, sin_zero]
        ),
        entry!(
            sockaddr_in6,
            "struct sockaddr_in6",
            [
                sin6_family,
                sin6_port,
                sin6_flowinfo,
                sin6_addr,
                sin6_scope_id
            ]
        ),
        entry!(sockaddr_storage, "struct __kernel_sockaddr_storage", []),
        entry!(
            rdma_ucm_create_id,
            "struct rdma_ucm_create_id",
            [uid, response, ps, qp_type, reserved]
        ),
        entry!(
            rdma_ucm_create_id_resp,
            "struct rdma_ucm_create_id_resp",
            [id]
        ),
        entry!(
            rdma_ucm_destroy_id,
            "struct rdma_ucm_destroy_id",
            [response, id, reserved]
        ),
        entry!(
            rdma_ucm_destroy_id_resp,
            "struct rdma_ucm_destroy_id_resp",
            [events_reported]
        ),
        entry!(
            rdma_ucm_bind_ip,
            "struct rdma_ucm_bind_ip",
            [response, addr, id]
        ),
        entry!(
            rdma_ucm_bind,
            "struct rdma_ucm_bind",
            [id, addr_size, reserved, addr]
        ),
        entry!(
            rdma_ucm_join_mcast,
            "struct rdma_ucm_join_mcast",
            [response, uid, id, addr_size, join_flags, addr]
        ),
        entry!(
            rdma_ucm_join_ip_mcast,
            "struct rdma_ucm_join_ip_mcast",
            [response, uid, addr, id]
        ),
        entry!(
            rdma_ucm_resolve_ip,
            "struct rdma_ucm_resolve_ip",
            [src_addr, dst_addr, id, timeout_ms]
        ),
        entry!(
            rdma_ucm_resolve_addr,
            "struct rdma_ucm_resolve_addr",
            [id, timeout_ms, src_size, dst_size, reserved, src_addr, dst_addr]
        ),
        entry!(
            rdma_ucm_resolve_route,
            "struct rdma_ucm_resolve_route",
            [id, timeout_ms]
        ),
        entry!(
            rdma_ucm_query,
            "struct rdma_ucm_query",
            [response, id, option]
        ),
        entry!(
            ib_user_path_rec,
            "struct ib_user_path_rec",
            [
                dgid,
                sgid,
                dlid,
                slid,
                raw_traffic,
                flow_label,
                reversible,
                mtu,
                pkey,
                hop_limit,
                traffic_class,
                numb_path,
                sl,
                mtu_selector,
                rate_selector,
                rate,
                packet_life_time_selector,
                packet_life_time,
                preference
            ]
        ),
        entry!(
            ib_path_rec_data,
            "struct ib_path_rec_data",
            [flags, reserved, path_rec]
        ),
        entry!(
            rdma_ucm_query_route_resp,
            "struct rdma_ucm_query_route_resp",
            [
                node_guid,
                ib_route,
                src_addr,
                dst_addr,
                num_paths,
                port_num,
                reserved,
                ibdev_index,
                reserved1
            ]
        ),
        entry!(
            rdma_ucm_query_addr_resp,
            "struct rdma_ucm_query_addr_resp",
            [
                node_guid,
                port_num,
                reserved,
                pkey,
                src_size,
                dst_size,
                src_addr,
                dst_addr,
                ibdev_index,
                reserved1
            ]
        ),
        entry!(
            rdma_ucm_query_path_resp,
            "struct rdma_ucm_query_path_resp",
            [num_paths, reserved]
        ),
        entry!(
            rdma_ucm_conn_param,
            "struct rdma_ucm_conn_param",
            [
                qp_num,
                qkey,
                private_data,
                private_data_len,
                srq,
                responder_resources,
                initiator_depth,
                flow_control,
                retry_count,
                rnr_retry_count,
                valid
            ]
        ),
        entry!(
            ib_uverbs_global_route,
            "struct ib_uverbs_global_route",
            [
                dgid,
                flow_label,
                sgid_index,
                hop_limit,
                traffic_class,
                reserved
            ]
        ),
        entry!(
            ib_uverbs_ah_attr,
            "struct ib_uverbs_ah_attr",
            [
                grh,
                dlid,
                sl,
                src_path_bits,
                static_rate,
                is_global,
                port_num,
                reserved
            ]
        ),
        entry!(
            rdma_ucm_ud_param,
            "struct rdma_ucm_ud_param",
            [
                qp_num,
                qkey,
                ah_attr,
                private_data,
                private_data_len,
                reserved
            ]
        ),
        entry!(rdma_ucm_ece, "struct rdma_ucm_ece", [vendor_id, attr_mod]),
        entry!(
            rdma_ucm_connect,
            "struct rdma_ucm_connect",
            [conn_param, id, reserved, ece]
        ),
        entry!(rdma_ucm_listen, "struct rdma_ucm_listen", [id, backlog]),
        entry!(
            rdma_ucm_accept,
            "struct rdma_ucm_accept",
            [uid, conn_param, id, reserved, ece]
        ),
        entry!(
            rdma_ucm_reject,
            "struct rdma_ucm_reject",
            [id, private_data_len, reason, reserved, private_data]
        ),
        entry!(rdma_ucm_disconnect, "struct rdma_ucm_disconnect", [id]),
        entry!(
            rdma_ucm_init_qp_attr,
            "struct rdma_ucm_init_qp_attr",
            [response, id, qp_state]
        ),
        entry!(
            ib_uverbs_qp_attr,
            "struct ib_uverbs_qp_attr",
            [
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
            ]
        ),
        entry!(rdma_ucm_notify, "struct rdma_ucm_notify", [id, event]),
        entry!(rdma_ucm_get_event, "struct rdma_ucm_get_event", [response]),
        entry!(
            rdma_ucm_event_resp,
            "struct rdma_ucm_event_resp",
            [uid, id, event, status, param, reserved, ece]
        ),
        entry!(
            rdma_ucm_set_option,
            "struct rdma_ucm_set_option",
            [optval, id, level, optname, optlen]
        ),
        entry!(
            rdma_ucm_migrate_id,
            "struct rdma_ucm_migrate_id",
            [response, id, fd]
        ),
        entry!(
            rdma_ucm_migrate_resp,
            "struct rdma_ucm_migrate_resp",
            [events_reported]
        ),
    ]
}

/// (C expression, Rust value) pairs printed as `const NAME VALUE`.
fn constants() -> Vec<(&'static str, u64)> {
    vec![
        (
            "RDMA_USER_CM_ABI_VERSION",
            u64::from(RDMA_USER_CM_ABI_VERSION),
        ),
        ("RDMA_MAX_PRIVATE_DATA", RDMA_MAX_PRIVATE_DATA as u64),
        ("RDMA_USER_CM_CMD_CREATE_ID", cmd::CREATE_ID.into()),
        ("RDMA_USER_CM_CMD_DESTROY_ID", cmd::DESTROY_ID.into()),
        ("RDMA_USER_CM_CMD_BIND_IP", cmd::BIND_IP.into()),
        ("RDMA_USER_CM_CMD_RESOLVE_IP", cmd::RESOLVE_IP.into()),
        ("RDMA_USER_CM_CMD_RESOLVE_ROUTE", cmd::RESOLVE_ROUTE.into()),
        ("RDMA_USER_CM_CMD_QUERY_ROUTE", cmd::QUERY_ROUTE.into()),
        ("RDMA_USER_CM_CMD_CONNECT", cmd::CONNECT.into()),
        ("RDMA_USER_CM_CMD_LISTEN", cmd::LISTEN.into()),
        ("RDMA_USER_CM_CMD_ACCEPT", cmd::ACCEPT.into()),
        ("RDMA_USER_CM_CMD_REJECT", cmd::REJECT.into()),
        ("RDMA_USER_CM_CMD_DISCONNECT", cmd::DISCONNECT.into()),
        ("RDMA_USER_CM_CMD_INIT_QP_ATTR", cmd::INIT_QP_ATTR.into()),
        ("RDMA_USER_CM_CMD_GET_EVENT", cmd::GET_EVENT.into()),
        ("RDMA_USER_CM_CMD_GET_OPTION", cmd::GET_OPTION.into()),
        ("RDMA_USER_CM_CMD_SET_OPTION", cmd::SET_OPTION.into()),
        ("RDMA_USER_CM_CMD_NOTIFY", cmd::NOTIFY.into()),
        ("RDMA_USER_CM_CMD_JOIN_IP_MCAST", cmd::JOIN_IP_MCAST.into()),
        ("RDMA_USER_CM_CMD_LEAVE_MCAST", cmd::LEAVE_MCAST.into()),
        ("RDMA_USER_CM_CMD_MIGRATE_ID", cmd::MIGRATE_ID.into()),
        ("RDMA_USER_CM_CMD_QUERY", cmd::QUERY.into()),
        ("RDMA_USER_CM_CMD_BIND", cmd::BIND.into()),
        ("RDMA_USER_CM_CMD_RESOLVE_ADDR", cmd::RESOLVE_ADDR.into()),
        ("RDMA_USER_CM_CMD_JOIN_MCAST", cmd::JOIN_MCAST.into()),
        (
            "RDMA_MC_JOIN_FLAG_FULLMEMBER",
            rverbs_cm::McJoinFlags::FULL_MEMBER.0.into(),
        ),
        (
            "RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER",
            rverbs_cm::McJoinFlags::SENDONLY_FULL_MEMBER.0.into(),
        ),
        ("RDMA_PS_IPOIB", ps::IPOIB.into()),
        ("RDMA_PS_IB", ps::IB.into()),
        ("RDMA_PS_TCP", ps::TCP.into()),
        ("RDMA_PS_UDP", ps::UDP.into()),
        ("RDMA_USER_CM_QUERY_ADDR", query::ADDR.into()),
        ("RDMA_USER_CM_QUERY_PATH", query::PATH.into()),
        ("RDMA_USER_CM_QUERY_GID", query::GID.into()),
        ("RDMA_OPTION_ID", opt::LEVEL_ID.into()),
        ("RDMA_OPTION_IB", opt::LEVEL_IB.into()),
        ("RDMA_OPTION_ID_TOS", opt::ID_TOS.into()),
        ("RDMA_OPTION_ID_REUSEADDR", opt::ID_REUSEADDR.into()),
        ("RDMA_OPTION_ID_AFONLY", opt::ID_AFONLY.into()),
        ("RDMA_OPTION_ID_ACK_TIMEOUT", opt::ID_ACK_TIMEOUT.into()),
        ("RDMA_OPTION_IB_PATH", opt::IB_PATH.into()),
        ("IB_PATH_GMP", path_flags::GMP.into()),
        ("IB_PATH_PRIMARY", path_flags::PRIMARY.into()),
        ("IB_PATH_ALTERNATE", path_flags::ALTERNATE.into()),
        ("IB_PATH_OUTBOUND", path_flags::OUTBOUND.into()),
        ("IB_PATH_INBOUND", path_flags::INBOUND.into()),
        (
            "IB_PATH_INBOUND_REVERSE",
            path_flags::INBOUND_REVERSE.into(),
        ),
        ("IB_PATH_BIDIRECTIONAL", path_flags::BIDIRECTIONAL.into()),
        ("AF_INET", AF_INET.into()),
        ("AF_INET6", AF_INET6.into()),
        ("AF_IB", AF_IB.into()),
        (
            "sizeof(((struct rdma_ucm_event_resp *)0)->param)",
            EVENT_PARAM_SIZE as u64,
        ),
    ]
}

fn probe_source(table: &[Entry], consts: &[(&str, u64)]) -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <sys/socket.h>\n\
         #include <linux/in.h>\n#include <rdma/rdma_user_cm.h>\n\nint main(void) {\n",
    );
    for e in table {
        s += &format!(
            "  printf(\"size {c} %zu\\n\", sizeof({c}));\n  printf(\"align {c} %zu\\n\", _Alignof({c}));\n",
            c = e.c
        );
        for (f, _) in &e.fields {
            s += &format!(
                "  printf(\"off {c}.{f} %zu\\n\", offsetof({c}, {f}));\n",
                c = e.c
            );
        }
    }
    for (name, _) in consts {
        s += &format!("  printf(\"const {name} %llu\\n\", (unsigned long long)({name}));\n");
    }
    s += "  return 0;\n}\n";
    s
}

#[test]
fn ucma_abi_matches_rdma_user_cm_h() {
    let table = table();
    let consts = constants();
    let dir = std::env::temp_dir().join(format!("rverbs-cm-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, probe_source(&table, &consts)).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc).arg("-o").arg(&exe).arg(&src).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "\n*** SKIPPED: ucma ABI layout check: C compiler {cc:?} not runnable ({e}) ***\n"
            );
            return;
        }
    };
    assert!(
        out.status.success(),
        "C probe failed to compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let c: BTreeMap<String, u64> = text
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect();
    let mut mismatches = Vec::new();
    let mut checked = 0;
    let mut expect = |key: String, rust: u64| {
        checked += 1;
        match c.get(&key) {
            Some(&v) if v == rust => {}
            other => mismatches.push(format!("{key}: C {other:?}, Rust {rust}")),
        }
    };
    for e in &table {
        expect(format!("size {}", e.c), e.size as u64);
        expect(format!("align {}", e.c), e.align as u64);
        for (f, off) in &e.fields {
            expect(format!("off {}.{f}", e.c), *off as u64);
        }
    }
    for (name, v) in &consts {
        expect(format!("const {name}"), *v);
    }
    assert!(
        mismatches.is_empty(),
        "ABI mismatches:\n{}",
        mismatches.join("\n")
    );
    // Guard against a vacuous pass: every line the probe printed was compared.
    assert_eq!(checked, c.len());
    assert!(checked > 300, "only {checked} values checked");
    eprintln!("ucma ABI: {checked} sizes, alignments, offsets and constants match");
}
