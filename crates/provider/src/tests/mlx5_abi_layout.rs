//! The mlx5 driver-data structs against the real `/usr/include/rdma/mlx5-abi.h`: a C probe
//! prints `sizeof` and every `offsetof`, and the Rust layout must match each one.

use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::process::Command;

use crate::mlx5::abi::*;

/// (C struct name, Rust size, [(field, Rust offset)]).
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

macro_rules! layout {
    ($t:ident { $($f:ident),* $(,)? }) => {
        (
            stringify!($t),
            size_of::<$t>(),
            vec![$((stringify!($f), offset_of!($t, $f))),*],
        )
    };
}

fn layouts() -> Vec<Layout> {
    vec![
        layout!(mlx5_ib_alloc_ucontext_req_v2 {
            total_num_bfregs,
            num_low_latency_bfregs,
            flags,
            comp_mask,
            max_cqe_version,
            reserved0,
            reserved1,
            reserved2,
            lib_caps,
        }),
        layout!(mlx5_ib_alloc_ucontext_resp {
            qp_tab_size,
            bf_reg_size,
            tot_bfregs,
            cache_line_size,
            max_sq_desc_sz,
            max_rq_desc_sz,
            max_send_wqebb,
            max_recv_wr,
            max_srq_recv_wr,
            num_ports,
            flow_action_flags,
            comp_mask,
            response_length,
            cqe_version,
            cmds_supp_uhw,
            eth_min_inline,
            clock_info_versions,
            hca_core_clock_offset,
            log_uar_size,
            num_uars_per_page,
            num_dyn_bfregs,
            dump_fill_mkey,
        }),
        layout!(mlx5_ib_create_cq {
            buf_addr,
            db_addr,
            cqe_size,
            cqe_comp_en,
            cqe_comp_res_format,
            flags,
            uar_page_index,
            reserved0,
            reserved1,
        }),
        layout!(mlx5_ib_create_cq_resp { cqn, reserved }),
    ]
}

/// Constants of the header that the Rust side repeats.
fn constants() -> Vec<(&'static str, u64)> {
    vec![
        (
            "MLX5_IB_UVERBS_ABI_VERSION",
            MLX5_IB_UVERBS_ABI_VERSION as u64,
        ),
        ("MLX5_LIB_CAP_4K_UAR", MLX5_LIB_CAP_4K_UAR),
        ("MLX5_LIB_CAP_DYN_UAR", MLX5_LIB_CAP_DYN_UAR),
        ("MLX5_IB_ALLOC_UCTX_DEVX", MLX5_IB_ALLOC_UCTX_DEVX as u64),
        (
            "MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET",
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET as u64,
        ),
        (
            "MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_DUMP_FILL_MKEY",
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_DUMP_FILL_MKEY as u64,
        ),
        (
            "MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE",
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_ECE as u64,
        ),
        (
            "MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_SQD2RTS",
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_SQD2RTS as u64,
        ),
        (
            "MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_REAL_TIME_TS",
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_REAL_TIME_TS as u64,
        ),
        (
            "MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_MKEY_UPDATE_TAG",
            MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_MKEY_UPDATE_TAG as u64,
        ),
        (
            "MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD",
            MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD as u64,
        ),
        (
            "MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX",
            MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX as u64,
        ),
        (
            "MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS",
            MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS as u64,
        ),
        ("MLX5_IB_OBJECT_UAR", MLX5_IB_OBJECT_UAR as u64),
        (
            "MLX5_IB_METHOD_UAR_OBJ_ALLOC",
            MLX5_IB_METHOD_UAR_OBJ_ALLOC as u64,
        ),
        (
            "MLX5_IB_METHOD_UAR_OBJ_DESTROY",
            MLX5_IB_METHOD_UAR_OBJ_DESTROY as u64,
        ),
        (
            "MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE",
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE as u64,
        ),
        (
            "MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE",
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE as u64,
        ),
        (
            "MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET",
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET as u64,
        ),
        (
            "MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH",
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH as u64,
        ),
        (
            "MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID",
            MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID as u64,
        ),
        (
            "MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE",
            MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE as u64,
        ),
        (
            "MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF",
            MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF as u64,
        ),
        (
            "MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC",
            MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC as u64,
        ),
        (
            "MLX5_QP_FLAG_UAR_PAGE_INDEX",
            MLX5_QP_FLAG_UAR_PAGE_INDEX as u64,
        ),
    ]
}

fn probe_source() -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/mlx5-abi.h>\n#include <rdma/mlx5_user_ioctl_cmds.h>\n#include <rdma/mlx5_user_ioctl_verbs.h>\nint main(void) {\n",
    );
    for (name, _, fields) in layouts() {
        c += &format!("printf(\"{name} sizeof %zu\\n\", sizeof(struct {name}));\n");
        for (f, _) in fields {
            c += &format!("printf(\"{name} {f} %zu\\n\", offsetof(struct {name}, {f}));\n");
        }
    }
    for (k, _) in constants() {
        c += &format!("printf(\"const {k} %llu\\n\", (unsigned long long)({k}));\n");
    }
    c += "return 0;\n}\n";
    c
}

/// Compiles and runs the probe; `None` when no C compiler is installed.
fn run_probe() -> Option<HashMap<String, u64>> {
    let dir = std::env::temp_dir().join(format!("rverbs-mlx5-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, probe_source()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc).arg(&src).arg("-o").arg(&exe).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIPPED: mlx5 ABI layout probe: no C compiler ({cc}: {e})");
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
    };
    assert!(
        out.status.success(),
        "C probe failed to compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the C probe");
    assert!(run.status.success());
    let _ = std::fs::remove_dir_all(&dir);
    let mut m = HashMap::new();
    for line in String::from_utf8(run.stdout).unwrap().lines() {
        let (k, v) = line.rsplit_once(' ').unwrap();
        m.insert(k.to_string(), v.parse().unwrap());
    }
    Some(m)
}

#[test]
#[cfg_attr(
    rverbs_vm,
    ignore = "a host test: needs the uapi headers and a C compiler"
)]
#[cfg_attr(miri, ignore = "Miri cannot run a C compiler")]
fn mlx5_abi_matches_the_kernel_header() {
    let Some(c) = run_probe() else { return };
    let mut checked = 0;
    for (name, size, fields) in layouts() {
        assert_eq!(
            c[&format!("{name} sizeof")],
            size as u64,
            "sizeof(struct {name})"
        );
        for (f, off) in fields {
            assert_eq!(
                c[&format!("{name} {f}")],
                off as u64,
                "offsetof(struct {name}, {f})"
            );
            checked += 1;
        }
    }
    for (k, v) in constants() {
        assert_eq!(c[&format!("const {k}")], v, "{k}");
    }
    assert_eq!(checked, 9 + 22 + 9 + 2);
}

#[test]
fn mlx5_abi_field_lists_are_complete() {
    // Fields, in order, must tile each struct without gaps (no padding the header does not
    // have): each offset is the previous one plus that field's size, the last ends at sizeof.
    let sizes: HashMap<&str, Vec<usize>> = [
        (
            "mlx5_ib_alloc_ucontext_req_v2",
            vec![4, 4, 4, 4, 1, 1, 2, 4, 8],
        ),
        (
            "mlx5_ib_alloc_ucontext_resp",
            vec![
                4, 4, 4, 4, 2, 2, 4, 4, 4, 2, 2, 4, 4, 1, 1, 1, 1, 8, 4, 4, 4, 4,
            ],
        ),
        ("mlx5_ib_create_cq", vec![8, 8, 4, 1, 1, 2, 2, 2, 4]),
        ("mlx5_ib_create_cq_resp", vec![4, 4]),
    ]
    .into_iter()
    .collect();
    for (name, size, fields) in layouts() {
        let s = &sizes[name];
        assert_eq!(s.len(), fields.len(), "{name}");
        let mut at = 0;
        for ((f, off), len) in fields.iter().zip(s) {
            assert_eq!(*off, at, "{name}.{f}");
            at += len;
        }
        assert_eq!(at, size, "{name} size");
    }
}
