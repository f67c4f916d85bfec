//! The rxe ABI structs against the real uapi headers (`rdma/rdma_user_rxe.h`,
//! `rdma/ib_user_verbs.h`): every size, alignment and field offset, and the uapi constants we
//! use, compared with values printed by a C probe compiled with `cc`.

use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use crate::rxe::abi::*;
use rverbs_uverbs::RawWc;

/// (C expression, value on the Rust side).
type Check = (String, u64);

fn checks() -> Vec<Check> {
    let mut v: Vec<Check> = Vec::new();
    macro_rules! st {
        ($c:literal, $t:ty) => {
            v.push((
                concat!("sizeof(struct ", $c, ")").into(),
                size_of::<$t>() as u64,
            ));
            v.push((
                concat!("__alignof__(struct ", $c, ")").into(),
                align_of::<$t>() as u64,
            ));
        };
    }
    macro_rules! off {
        ($c:expr, $cf:expr, $val:expr) => {
            v.push((format!("offsetof(struct {}, {})", $c, $cf), ($val) as u64));
        };
    }
    // Every field of `$t` at the same name in C.
    macro_rules! fields {
        ($c:literal, $t:ty, [$($f:ident),+ $(,)?]) => {
            $( off!($c, stringify!($f), offset_of!($t, $f)); )+
        };
    }
    macro_rules! constant {
        ($c:literal, $val:expr) => {
            v.push(($c.into(), ($val) as u64));
        };
    }

    st!("mminfo", mminfo);
    fields!("mminfo", mminfo, [offset, size, pad]);
    st!("rxe_create_cq_resp", rxe_create_cq_resp);
    fields!("rxe_create_cq_resp", rxe_create_cq_resp, [mi]);
    st!("rxe_resize_cq_resp", rxe_resize_cq_resp);
    fields!("rxe_resize_cq_resp", rxe_resize_cq_resp, [mi]);
    st!("rxe_create_qp_resp", rxe_create_qp_resp);
    fields!("rxe_create_qp_resp", rxe_create_qp_resp, [rq_mi, sq_mi]);
    st!("rxe_create_srq_resp", rxe_create_srq_resp);
    fields!(
        "rxe_create_srq_resp",
        rxe_create_srq_resp,
        [mi, srq_num, reserved]
    );
    st!("rxe_modify_srq_cmd", rxe_modify_srq_cmd);
    fields!("rxe_modify_srq_cmd", rxe_modify_srq_cmd, [mmap_info_addr]);
    st!("rxe_create_ah_resp", rxe_create_ah_resp);
    fields!("rxe_create_ah_resp", rxe_create_ah_resp, [ah_num, reserved]);

    v.push(("sizeof(union rxe_gid)".into(), size_of::<rxe_gid>() as u64));
    st!("rxe_global_route", rxe_global_route);
    fields!(
        "rxe_global_route",
        rxe_global_route,
        [dgid, flow_label, sgid_index, hop_limit, traffic_class]
    );
    st!("rxe_av", rxe_av);
    fields!(
        "rxe_av",
        rxe_av,
        [port_num, network_type, dmac, grh, sgid_addr, dgid_addr]
    );
    v.push((
        "sizeof(((struct rxe_av *)0)->sgid_addr)".into(),
        size_of::<[u8; 28]>() as u64,
    ));

    st!("rxe_send_wr", rxe_send_wr);
    fields!(
        "rxe_send_wr",
        rxe_send_wr,
        [wr_id, reserved, opcode, send_flags, wr]
    );
    let ex = offset_of!(rxe_send_wr, ex);
    off!("rxe_send_wr", "ex.imm_data", ex);
    off!("rxe_send_wr", "ex.invalidate_rkey", ex);
    v.push((
        "sizeof(((struct rxe_send_wr *)0)->ex)".into(),
        size_of::<u32>() as u64,
    ));
    let wr = offset_of!(rxe_send_wr, wr);
    v.push((
        "sizeof(((struct rxe_send_wr *)0)->wr)".into(),
        size_of::<rxe_send_wr_union>() as u64,
    ));
    v.push((
        "__alignof__(((struct rxe_send_wr *)0)->wr)".into(),
        align_of::<rxe_send_wr_union>() as u64,
    ));
    macro_rules! arm {
        ($arm:literal, $t:ty, [$($f:ident),+]) => {
            v.push((
                concat!("sizeof(((struct rxe_send_wr *)0)->wr.", $arm, ")").into(),
                size_of::<$t>() as u64,
            ));
            v.push((
                concat!("__alignof__(((struct rxe_send_wr *)0)->wr.", $arm, ")").into(),
                align_of::<$t>() as u64,
            ));
            $( off!("rxe_send_wr", concat!("wr.", $arm, ".", stringify!($f)), wr + offset_of!($t, $f)); )+
        };
    }
    arm!("rdma", rxe_wr_rdma, [remote_addr, rkey, reserved]);
    arm!(
        "atomic",
        rxe_wr_atomic,
        [remote_addr, compare_add, swap, rkey, reserved]
    );
    arm!(
        "ud",
        rxe_wr_ud,
        [
            remote_qpn,
            remote_qkey,
            pkey_index,
            reserved,
            ah_num,
            pad,
            av
        ]
    );
    arm!(
        "mw",
        rxe_wr_mw,
        [addr, length, mr_lkey, mw_rkey, rkey, access]
    );

    st!("rxe_sge", rxe_sge);
    fields!("rxe_sge", rxe_sge, [addr, length, lkey]);
    st!("rxe_dma_info", rxe_dma_info);
    fields!(
        "rxe_dma_info",
        rxe_dma_info,
        [length, resid, cur_sge, num_sge, sge_offset, reserved]
    );
    off!("rxe_dma_info", "sge", RXE_DMA_INFO_SGE_OFFSET);
    off!("rxe_dma_info", "inline_data", RXE_DMA_INFO_SGE_OFFSET);

    st!("rxe_send_wqe", rxe_send_wqe);
    fields!(
        "rxe_send_wqe",
        rxe_send_wqe,
        [
            wr,
            status,
            state,
            iova,
            mask,
            first_psn,
            last_psn,
            ack_length,
            ssn,
            has_rd_atomic,
            dma
        ]
    );
    off!("rxe_send_wqe", "dma.sge", RXE_SEND_WQE_SGE_OFFSET);
    off!("rxe_send_wqe", "dma.inline_data", RXE_SEND_WQE_SGE_OFFSET);

    st!("rxe_recv_wqe", rxe_recv_wqe);
    fields!(
        "rxe_recv_wqe",
        rxe_recv_wqe,
        [wr_id, reserved, padding, dma]
    );
    off!("rxe_recv_wqe", "dma.sge", RXE_RECV_WQE_SGE_OFFSET);

    st!("rxe_queue_buf", rxe_queue_buf);
    fields!(
        "rxe_queue_buf",
        rxe_queue_buf,
        [
            log2_elem_size,
            index_mask,
            pad_1,
            producer_index,
            pad_2,
            consumer_index,
            pad_3
        ]
    );
    off!(
        "rxe_queue_buf",
        "log2_elem_size",
        QUEUE_LOG2_ELEM_SIZE_OFFSET
    );
    off!("rxe_queue_buf", "index_mask", QUEUE_INDEX_MASK_OFFSET);
    off!(
        "rxe_queue_buf",
        "producer_index",
        QUEUE_PRODUCER_INDEX_OFFSET
    );
    off!(
        "rxe_queue_buf",
        "consumer_index",
        QUEUE_CONSUMER_INDEX_OFFSET
    );
    off!("rxe_queue_buf", "data", QUEUE_DATA_OFFSET);

    st!("ib_uverbs_wc", RawWc);
    fields!(
        "ib_uverbs_wc",
        RawWc,
        [
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len,
            qp_num,
            src_qp,
            wc_flags,
            pkey_index,
            slid,
            sl,
            dlid_path_bits,
            port_num,
            reserved
        ]
    );
    let ex = offset_of!(RawWc, ex);
    off!("ib_uverbs_wc", "ex.imm_data", ex);
    off!("ib_uverbs_wc", "ex.invalidate_rkey", ex);

    st!("ib_uverbs_post_send", ib_uverbs_post_send);
    fields!(
        "ib_uverbs_post_send",
        ib_uverbs_post_send,
        [response, qp_handle, wr_count, sge_count, wqe_size]
    );
    off!(
        "ib_uverbs_post_send",
        "send_wr",
        size_of::<ib_uverbs_post_send>()
    );
    st!("ib_uverbs_post_send_resp", ib_uverbs_post_send_resp);
    fields!(
        "ib_uverbs_post_send_resp",
        ib_uverbs_post_send_resp,
        [bad_wr]
    );
    v.push((
        "sizeof(struct ib_uverbs_send_wr)".into(),
        IB_UVERBS_SEND_WR_SIZE as u64,
    ));
    v.push((
        "sizeof(struct ib_uverbs_cmd_hdr) + sizeof(struct ib_uverbs_post_send)".into(),
        crate::rxe::doorbell::POST_SEND_CMD_LEN as u64,
    ));

    constant!(
        "IB_USER_VERBS_CMD_POST_SEND",
        rverbs_uverbs::kernel::abi::cmd::nr::POST_SEND
    );
    constant!("RXE_NETWORK_TYPE_IPV4", RXE_NETWORK_TYPE_IPV4);
    constant!("RXE_NETWORK_TYPE_IPV6", RXE_NETWORK_TYPE_IPV6);
    constant!("IB_UVERBS_WR_RDMA_WRITE", wr_opcode::RDMA_WRITE);
    constant!(
        "IB_UVERBS_WR_RDMA_WRITE_WITH_IMM",
        wr_opcode::RDMA_WRITE_WITH_IMM
    );
    constant!("IB_UVERBS_WR_SEND", wr_opcode::SEND);
    constant!("IB_UVERBS_WR_SEND_WITH_IMM", wr_opcode::SEND_WITH_IMM);
    constant!("IB_UVERBS_WR_RDMA_READ", wr_opcode::RDMA_READ);
    constant!(
        "IB_UVERBS_WR_ATOMIC_CMP_AND_SWP",
        wr_opcode::ATOMIC_CMP_AND_SWP
    );
    constant!(
        "IB_UVERBS_WR_ATOMIC_FETCH_AND_ADD",
        wr_opcode::ATOMIC_FETCH_AND_ADD
    );
    constant!("IB_UVERBS_WR_LOCAL_INV", wr_opcode::LOCAL_INV);
    constant!("IB_UVERBS_WR_BIND_MW", wr_opcode::BIND_MW);
    constant!("IB_UVERBS_WR_SEND_WITH_INV", wr_opcode::SEND_WITH_INV);
    v
}

fn cc_available() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot run a C compiler")]
fn rxe_abi_matches_uapi_headers() {
    if !cc_available() {
        eprintln!("SKIPPED rxe_abi_matches_uapi_headers: no `cc` on PATH — the rxe ABI layout is NOT checked");
        return;
    }
    let checks = checks();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/ib_user_verbs.h>\n\
         #include <rdma/rdma_user_rxe.h>\nint main(void) {\n",
    );
    for (expr, _) in &checks {
        src.push_str(&format!(
            "  printf(\"%llu\\n\", (unsigned long long)({expr}));\n"
        ));
    }
    src.push_str("  return 0;\n}\n");

    let dir: PathBuf = std::env::temp_dir().join(format!("rverbs-rxe-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&c, &src).unwrap();
    let out = Command::new("cc")
        .arg("-std=gnu11")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "C probe failed to compile:\n{}\n{src}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run probe");
    assert!(run.status.success());
    std::fs::remove_dir_all(&dir).ok();

    let text = String::from_utf8(run.stdout).unwrap();
    let values: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(
        values.len(),
        checks.len(),
        "probe printed a different count"
    );
    let bad: Vec<String> = checks
        .iter()
        .zip(&values)
        .filter(|((_, rust), c)| rust != *c)
        .map(|((expr, rust), c)| format!("{expr}: C {c}, Rust {rust}"))
        .collect();
    assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
    eprintln!(
        "rxe ABI: {} sizes/alignments/offsets/constants match the C headers",
        checks.len()
    );
}
