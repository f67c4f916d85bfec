//! Every struct of `rverbs_capi::abi` checked against the installed rdma-core headers
//! (`<infiniband/verbs.h>` from libibverbs-dev, which `.ci/run` installs): a C probe generated
//! from `abi::LAYOUTS` prints `sizeof` of each struct and `offsetof` of each listed field;
//! the Rust side must match every number. Also checks a few constants the code relies on.
//!
//! Host test: the VM builds mark it ignored (the guests have no sources or C compiler).

use std::fmt::Write as _;
use std::process::Command;

use rverbs_capi::abi::{COMPAT_PORT_ATTR_SIZE, LAYOUTS};

const HEADER: &str = "/usr/include/infiniband/verbs.h";

fn probe_source() -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n#include <infiniband/sa.h>\n#include <rdma/rdma_cma.h>\n#include <infiniband/efadv.h>\n\
         int main(void) {\n",
    );
    for (name, _, fields) in LAYOUTS {
        let kw = if *name == "ibv_gid" {
            "union"
        } else {
            "struct"
        };
        writeln!(s, "  printf(\"{name} %zu\\n\", sizeof({kw} {name}));").unwrap();
        for (f, _) in *fields {
            writeln!(
                s,
                "  printf(\"{name}.{f} %zu\\n\", offsetof({kw} {name}, {f}));"
            )
            .unwrap();
        }
    }
    // The compat port struct ends where port_cap_flags2 begins; the verbs_context extension
    // is reached at this negative offset from the ibv_context.
    s.push_str("  printf(\"IBV_ACCESS_OPTIONAL_RANGE %d\\n\", (int)IBV_ACCESS_OPTIONAL_RANGE);\n");
    s.push_str("  return 0;\n}\n");
    s
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "host only: needs the source tree and cc")]
fn structs_match_rdma_core_headers() {
    assert!(
        std::path::Path::new(HEADER).exists(),
        "{HEADER} is missing: install libibverbs-dev (.ci/run does)"
    );
    let dir = std::env::temp_dir().join(format!("rverbs-capi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("probe.c");
    let exe = dir.join("probe");
    std::fs::write(&src, probe_source()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e} (a C compiler is needed for this test)"));
    assert!(
        out.status.success(),
        "probe did not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let c: std::collections::HashMap<&str, usize> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    let mut bad = Vec::new();
    let mut checked = 0;
    for (name, size, fields) in LAYOUTS {
        checked += 1;
        if c[name] != *size {
            bad.push(format!("sizeof {name}: C {} Rust {size}", c[name]));
        }
        for (f, off) in *fields {
            checked += 1;
            let key = format!("{name}.{f}");
            if c[key.as_str()] != *off {
                bad.push(format!("offsetof {key}: C {} Rust {off}", c[key.as_str()]));
            }
        }
    }
    assert!(bad.is_empty(), "layout mismatches:\n{}", bad.join("\n"));
    assert!(checked > 150, "only {checked} numbers checked");
    assert_eq!(c["IBV_ACCESS_OPTIONAL_RANGE"], 0x3ff0_0000);
    // _compat_ibv_port_attr (rdma-core's verbs.c): everything before port_cap_flags2.
    assert_eq!(COMPAT_PORT_ATTR_SIZE, c["ibv_port_attr.port_cap_flags2"]);
}
