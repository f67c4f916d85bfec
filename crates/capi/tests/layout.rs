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

/// The C type a row names: a type expression as it stands, else the tag with its keyword.
fn c_type(cname: &str) -> String {
    if cname.contains(['(', ' ']) {
        cname.to_string()
    } else if cname == "ibv_gid" {
        format!("union {cname}")
    } else {
        format!("struct {cname}")
    }
}

fn probe_source() -> String {
    let mut s = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\n#include <infiniband/sa.h>\n#include <rdma/rdma_cma.h>\n#include <infiniband/efadv.h>\n\
         int main(void) {\n",
    );
    for (cname, rname, _, fields) in LAYOUTS {
        let ty = c_type(cname);
        writeln!(s, "  printf(\"{rname} %zu\\n\", sizeof({ty}));").unwrap();
        for (f, _) in *fields {
            writeln!(s, "  printf(\"{rname}.{f} %zu\\n\", offsetof({ty}, {f}));").unwrap();
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
    for (_, name, size, fields) in LAYOUTS {
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

/// The `#[repr(C)]` structs and unions declared in `src/abi/` (name, file), read from the
/// source: a C type added there without a layout row would go unchecked.
fn repr_c_types() -> Vec<(String, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/abi");
    let mut found = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let mut repr_c = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with("#[repr(C") {
                repr_c = true;
            } else if repr_c && !line.starts_with("#[") {
                let decl = line.strip_prefix("pub ").unwrap_or(line);
                let name = decl
                    .strip_prefix("struct ")
                    .or_else(|| decl.strip_prefix("union "))
                    .and_then(|r| r.split([' ', '{', '(', '<', ';']).next());
                if let Some(name) = name {
                    found.push((name.to_string(), path.display().to_string()));
                }
                repr_c = false;
            }
        }
    }
    found
}

#[test]
#[cfg_attr(rverbs_vm, ignore = "host only: needs the source tree")]
fn every_repr_c_type_of_abi_has_a_layout_row() {
    let declared = repr_c_types();
    assert!(
        declared.len() > 60,
        "only {} repr(C) types found",
        declared.len()
    );
    let rows: std::collections::HashSet<&str> = LAYOUTS.iter().map(|r| r.1).collect();
    let missing: Vec<String> = declared
        .iter()
        .filter(|(n, _)| !rows.contains(n.as_str()))
        .map(|(n, f)| format!("{n} ({f})"))
        .collect();
    assert!(
        missing.is_empty(),
        "repr(C) types of src/abi without a row in abi::LAYOUTS (src/abi/layout.rs), so \
         unchecked against rdma-core's headers:\n{}",
        missing.join("\n")
    );
}
