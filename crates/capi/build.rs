//! For the cdylib build (`--features symver`, see `cargo xtask capi`): the soname
//! `libibverbs.so.1` and a linker version script that defines rdma-core's version nodes
//! (IBVERBS_1.0 … IBVERBS_1.14 and IBVERBS_PRIVATE_34). The symbols get their versions from
//! `.symver` directives of `src/symver.rs`; the script only declares the nodes and
//! their order, since rustc passes its own script for the export list.

use std::fmt::Write as _;

/// The public version nodes, oldest first; each depends on the one before.
const PUBLIC: &[&str] = &[
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
];

/// The private node of rdma-core 44 (Debian bookworm): `IBVERBS_PRIVATE_<PABI>`.
const PRIVATE: &str = "IBVERBS_PRIVATE_34";

/// librdmacm's version nodes (rdma-core 44), oldest first.
pub const RDMACM: &[&str] = &["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"];

/// Declares `nodes` in order, each depending on the one before.
fn chain(script: &mut String, nodes: &[&str]) {
    let mut prev: Option<&str> = None;
    for v in nodes {
        match prev {
            None => writeln!(script, "{v} {{ }};").unwrap(),
            Some(p) => writeln!(script, "{v} {{ }} {p};").unwrap(),
        }
        prev = Some(v);
    }
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_PRELOAD").is_some() {
        // librspreload.so.1 (src/preload/): the soname only, no version nodes.
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librspreload.so.1");
        return;
    }
    if std::env::var_os("CARGO_FEATURE_SYMVER").is_none() {
        return;
    }
    let mut script = String::new();
    chain(&mut script, PUBLIC);
    writeln!(script, "{PRIVATE} {{ }};").unwrap();
    // librdmacm's functions live in this library too (one copy of the verbs objects); the
    // librdmacm.so.1 that `cargo xtask capi` builds declares the same nodes and needs this
    // library, so the loader binds `rdma_*@RDMACM_*` here.
    chain(&mut script, RDMACM);
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("libibverbs.map");
    std::fs::write(&out, script).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        out.display()
    );
}
