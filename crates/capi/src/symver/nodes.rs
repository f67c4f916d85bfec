//! The symbol-version nodes of the C drop-in, the one list: `build.rs` writes
//! `libibverbs.so.1`'s version script from it, `cargo xtask capi` (`xtask/src/capi.rs`, which
//! includes this file) writes `librdmacm.so.1`'s and checks the libraries against it, and
//! `symver!` refuses a version that is not here (at compile time).
//!
//! The nodes are rdma-core 44's (Debian bookworm): `libibverbs.map.in` and `librdmacm.map`,
//! and the later ones of the functions the drop-in has from rdma-core 59 to 64
//! (`IBVERBS_1.15` … `IBVERBS_1.17`, `RDMACM_1.4`). A new node goes into its list in order;
//! nothing else names it.

#![allow(dead_code)] // each includer uses a part

/// libibverbs' public nodes, oldest first; each depends on the one before.
pub const IBVERBS: &[&str] = &[
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
    "IBVERBS_1.15",
    "IBVERBS_1.16",
    "IBVERBS_1.17",
];

/// libibverbs' private node, `IBVERBS_PRIVATE_<PABI>` (the provider interface); it depends on
/// no other.
pub const IBVERBS_PRIVATE: &str = "IBVERBS_PRIVATE_34";

/// librdmacm's nodes, oldest first; each depends on the one before. `libibverbs.so.1`
/// declares them too: librdmacm's functions are defined there (docs/capi.md, "librdmacm.so.1").
pub const RDMACM: &[&str] = &[
    "RDMACM_1.0",
    "RDMACM_1.1",
    "RDMACM_1.2",
    "RDMACM_1.3",
    "RDMACM_1.4",
];

/// libefa's nodes (`providers/efa/libefa.map`: rdma-core 44's `EFA_1.0` … `EFA_1.2`, and
/// `EFA_1.3` of rdma-core 50 to 56): the `efadv_*` functions are defined in `libibverbs.so.1`
/// (`src/ibverbs/efadv.rs`; those of `EFA_1.2` and `EFA_1.3` refuse), and the `libefa.so.1` of
/// `cargo xtask capi` declares the same nodes and needs libibverbs.so.1.
pub const EFA: &[&str] = &["EFA_1.0", "EFA_1.1", "EFA_1.2", "EFA_1.3"];

/// Version-script lines declaring `nodes` in order, each depending on the one before.
pub fn chain(nodes: &[&str]) -> String {
    let mut script = String::new();
    for (i, v) in nodes.iter().enumerate() {
        match i {
            0 => script.push_str(&format!("{v} {{ }};\n")),
            _ => script.push_str(&format!("{v} {{ }} {};\n", nodes[i - 1])),
        }
    }
    script
}

/// The version script of `libibverbs.so.1`: every node, declared only (rustc's own script is
/// the export list; the symbols get their nodes from `.symver` directives).
pub fn libibverbs_script() -> String {
    format!(
        "{}{IBVERBS_PRIVATE} {{ }};\n{}{}",
        chain(IBVERBS),
        chain(RDMACM),
        chain(EFA)
    )
}

/// The version script of `libefa.so.1`: libefa's nodes that the drop-in fills.
pub fn libefa_script() -> String {
    chain(EFA)
}

/// The version script of `librdmacm.so.1`: librdmacm's nodes.
pub fn librdmacm_script() -> String {
    chain(RDMACM)
}

/// Whether `v` is one of the nodes above (a `const fn`, for `symver!`'s compile-time check).
pub const fn is_node(v: &str) -> bool {
    if str_eq(v, IBVERBS_PRIVATE) {
        return true;
    }
    let mut i = 0;
    while i < IBVERBS.len() {
        if str_eq(v, IBVERBS[i]) {
            return true;
        }
        i += 1;
    }
    let mut i = 0;
    while i < RDMACM.len() {
        if str_eq(v, RDMACM[i]) {
            return true;
        }
        i += 1;
    }
    let mut i = 0;
    while i < EFA.len() {
        if str_eq(v, EFA[i]) {
            return true;
        }
        i += 1;
    }
    false
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
