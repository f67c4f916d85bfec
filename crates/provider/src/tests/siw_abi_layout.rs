//! The siw ABI structs against the installed uapi header (`rdma/siw-abi.h`): every size,
//! alignment and field offset and the constants, compared with values printed by a C probe
//! compiled with `cc`; and the doorbell command against `rdma/ib_user_verbs.h`.

use std::mem::{align_of, offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use crate::siw::abi::*;

fn checks() -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = Vec::new();
    macro_rules! st {
        ($c:literal, $t:ty, [$($f:ident),* $(,)?]) => {
            v.push((concat!("sizeof(struct ", $c, ")").into(), size_of::<$t>() as u64));
            v.push((concat!("__alignof__(struct ", $c, ")").into(), align_of::<$t>() as u64));
            $( v.push((
                concat!("offsetof(struct ", $c, ", ", stringify!($f), ")").into(),
                offset_of!($t, $f) as u64,
            )); )*
        };
    }
    macro_rules! constant {
        ($c:literal, $val:expr) => {
            v.push(($c.into(), ($val) as u64));
        };
    }
    st!(
        "siw_uresp_create_cq",
        siw_uresp_create_cq,
        [cq_id, num_cqe, cq_key]
    );
    st!(
        "siw_uresp_create_qp",
        siw_uresp_create_qp,
        [qp_id, num_sqe, num_rqe, pad, sq_key, rq_key]
    );
    st!(
        "siw_ureq_reg_mr",
        siw_ureq_reg_mr,
        [stag_key, reserved, pad]
    );
    st!("siw_uresp_reg_mr", siw_uresp_reg_mr, [stag, pad]);
    st!(
        "siw_uresp_create_srq",
        siw_uresp_create_srq,
        [num_rqe, pad, srq_key]
    );
    st!("siw_uresp_alloc_ctx", siw_uresp_alloc_ctx, [dev_id, pad]);
    st!("siw_sge", siw_sge, [laddr, length, lkey]);
    st!(
        "siw_sqe",
        siw_sqe,
        [id, flags, num_sge, opcode, rkey, raddr, sge]
    );
    v.push((
        "offsetof(struct siw_sqe, base_mr)".into(),
        offset_of!(siw_sqe, raddr) as u64,
    ));
    v.push((
        "offsetof(struct siw_sqe, access)".into(),
        offset_of!(siw_sqe, sge) as u64,
    ));
    st!(
        "siw_rqe",
        siw_rqe,
        [id, flags, num_sge, opcode, unused, sge]
    );
    st!(
        "siw_cqe",
        siw_cqe,
        [id, flags, opcode, status, bytes, imm_data, qp_id]
    );
    v.push((
        "offsetof(struct siw_cqe, inval_stag)".into(),
        offset_of!(siw_cqe, imm_data) as u64,
    ));
    v.push((
        "offsetof(struct siw_cqe, base_qp)".into(),
        offset_of!(siw_cqe, qp_id) as u64,
    ));
    st!("siw_cq_ctrl", siw_cq_ctrl, [flags, pad]);

    constant!("SIW_ABI_VERSION", SIW_ABI_VERSION);
    constant!("SIW_MAX_SGE", SIW_MAX_SGE);
    constant!("SIW_UOBJ_MAX_KEY", SIW_UOBJ_MAX_KEY);
    constant!("SIW_INVAL_UOBJ_KEY", SIW_INVAL_UOBJ_KEY);
    constant!("SIW_MAX_INLINE", SIW_MAX_INLINE);
    constant!("SIW_OP_WRITE", opcode::WRITE);
    constant!("SIW_OP_READ", opcode::READ);
    constant!("SIW_OP_READ_LOCAL_INV", opcode::READ_LOCAL_INV);
    constant!("SIW_OP_SEND", opcode::SEND);
    constant!("SIW_OP_SEND_WITH_IMM", opcode::SEND_WITH_IMM);
    constant!("SIW_OP_SEND_REMOTE_INV", opcode::SEND_REMOTE_INV);
    constant!("SIW_OP_FETCH_AND_ADD", opcode::FETCH_AND_ADD);
    constant!("SIW_OP_COMP_AND_SWAP", opcode::COMP_AND_SWAP);
    constant!("SIW_OP_RECEIVE", opcode::RECEIVE);
    constant!("SIW_OP_READ_RESPONSE", opcode::READ_RESPONSE);
    constant!("SIW_OP_INVAL_STAG", opcode::INVAL_STAG);
    constant!("SIW_OP_REG_MR", opcode::REG_MR);
    constant!("SIW_NUM_OPCODES", opcode::NUM_OPCODES);
    constant!("SIW_WQE_VALID", wqe_flags::VALID);
    constant!("SIW_WQE_INLINE", wqe_flags::INLINE);
    constant!("SIW_WQE_SIGNALLED", wqe_flags::SIGNALLED);
    constant!("SIW_WQE_SOLICITED", wqe_flags::SOLICITED);
    constant!("SIW_WQE_READ_FENCE", wqe_flags::READ_FENCE);
    constant!("SIW_WQE_REM_INVAL", wqe_flags::REM_INVAL);
    constant!("SIW_WQE_COMPLETED", wqe_flags::COMPLETED);
    constant!("SIW_NOTIFY_NOT", notify::NOT);
    constant!("SIW_NOTIFY_SOLICITED", notify::SOLICITED);
    constant!("SIW_NOTIFY_NEXT_COMPLETION", notify::NEXT_COMPLETION);
    constant!("SIW_NOTIFY_MISSED_EVENTS", notify::MISSED_EVENTS);
    constant!("SIW_NOTIFY_ALL", notify::ALL);
    constant!("SIW_WC_SUCCESS", wc_status::SUCCESS);
    constant!("SIW_WC_LOC_LEN_ERR", wc_status::LOC_LEN_ERR);
    constant!("SIW_WC_LOC_PROT_ERR", wc_status::LOC_PROT_ERR);
    constant!("SIW_WC_LOC_QP_OP_ERR", wc_status::LOC_QP_OP_ERR);
    constant!("SIW_WC_WR_FLUSH_ERR", wc_status::WR_FLUSH_ERR);
    constant!("SIW_WC_BAD_RESP_ERR", wc_status::BAD_RESP_ERR);
    constant!("SIW_WC_LOC_ACCESS_ERR", wc_status::LOC_ACCESS_ERR);
    constant!("SIW_WC_REM_ACCESS_ERR", wc_status::REM_ACCESS_ERR);
    constant!("SIW_WC_REM_INV_REQ_ERR", wc_status::REM_INV_REQ_ERR);
    constant!("SIW_WC_GENERAL_ERR", wc_status::GENERAL_ERR);
    constant!("SIW_NUM_WC_STATUS", wc_status::NUM_WC_STATUS);

    // The doorbell's command is rxe's (`rxe::doorbell`, checked in rxe_abi_layout too).
    use crate::rxe::abi::{ib_uverbs_post_send, IB_UVERBS_SEND_WR_SIZE};
    use crate::rxe::doorbell::POST_SEND_CMD_LEN;
    st!(
        "ib_uverbs_post_send",
        ib_uverbs_post_send,
        [response, qp_handle, wr_count, sge_count, wqe_size]
    );
    constant!("sizeof(struct ib_uverbs_send_wr)", IB_UVERBS_SEND_WR_SIZE);
    constant!(
        "sizeof(struct ib_uverbs_cmd_hdr) + sizeof(struct ib_uverbs_post_send)",
        POST_SEND_CMD_LEN
    );
    constant!(
        "IB_USER_VERBS_CMD_POST_SEND",
        rverbs_uverbs::kernel::abi::cmd::nr::POST_SEND
    );
    v
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot run a C compiler")]
fn siw_abi_matches_uapi_header() {
    let has_cc = Command::new("cc")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_cc {
        eprintln!("SKIPPED siw_abi_matches_uapi_header: no `cc` on PATH — the siw ABI layout is NOT checked");
        return;
    }
    let checks = checks();
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <rdma/ib_user_verbs.h>\n\
         #include <rdma/siw-abi.h>\nint main(void) {\n",
    );
    for (expr, _) in &checks {
        src.push_str(&format!(
            "  printf(\"%llu\\n\", (unsigned long long)({expr}));\n"
        ));
    }
    src.push_str("  return 0;\n}\n");
    let dir: PathBuf = std::env::temp_dir().join(format!("rverbs-siw-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let c = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&c, &src).unwrap();
    let out = Command::new("cc")
        .args(["-std=gnu11", "-o"])
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
    std::fs::remove_dir_all(&dir).ok();
    assert!(run.status.success());
    let values: Vec<u64> = String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
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
        "siw ABI: {} sizes/alignments/offsets/constants match the C header",
        checks.len()
    );
}
