//! For the cdylib build (`--features symver`, see `cargo xtask capi`): the soname
//! `libibverbs.so.1` and a linker version script that declares the version nodes of
//! `src/symver/nodes.rs` (rdma-core's IBVERBS_1.0 … IBVERBS_1.14, IBVERBS_PRIVATE_34 and
//! RDMACM_1.0 … RDMACM_1.3) and their order. The symbols get their versions from the
//! `.symver` directives of the `symver!` lines beside their definitions; the script only
//! declares the nodes, since rustc passes its own script for the export list.

#[path = "src/symver/nodes.rs"]
mod nodes;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/symver/nodes.rs");
    if std::env::var_os("CARGO_FEATURE_PRELOAD").is_some() {
        // librspreload.so.1 (src/preload/): the soname only, no version nodes.
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librspreload.so.1");
        return;
    }
    if std::env::var_os("CARGO_FEATURE_SYMVER").is_none() {
        return;
    }
    // librdmacm's functions live in this library too (one copy of the verbs objects); the
    // librdmacm.so.1 that `cargo xtask capi` builds declares the same nodes and needs this
    // library, so the loader binds `rdma_*@RDMACM_*` here.
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap()).join("libibverbs.map");
    std::fs::write(&out, nodes::libibverbs_script()).unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        out.display()
    );
}
