//! Symbol versions: each exported function (or static) declares its own, on the line above
//! its definition, `symver!(name => "VERSION");` — the newest version rdma-core 44's
//! `libibverbs.map.in` or `librdmacm.map` gives the name. With the `symver` feature (the
//! cdylib) that line becomes one `.symver NAME, NAME@@VERSION` directive, which makes
//! `VERSION` the default version of `NAME` in `libibverbs.so.1`. A `.symver` must sit in the
//! object that defines its symbol: the cdylib is built as one codegen unit (`cargo xtask
//! capi`), and the line sits in the defining module anyway.
//!
//! The nodes themselves are the one list of [`nodes`], from which `build.rs` writes the version
//! script that declares them. `symver!` checks at compile time that the name is defined in
//! the module and that the version is one of those nodes; `cargo xtask capi` checks that
//! every exported symbol of the built library has a version.

pub(crate) mod nodes;

/// `symver!(name => "VERSION");`, on the line above the exported function or static `name`:
/// its symbol version (see the module's doc). A `name` not defined in the module, or a
/// version that is not one of [`nodes`], does not compile.
macro_rules! symver {
    ($name:ident => $ver:literal) => {
        #[cfg(feature = "symver")]
        ::std::arch::global_asm!(concat!(
            ".symver ",
            stringify!($name),
            ", ",
            stringify!($name),
            "@@",
            $ver
        ));
        #[allow(unused_imports)]
        use self::$name as _;
        const _: () = assert!(
            $crate::symver::nodes::is_node($ver),
            concat!(
                "symver!: ",
                $ver,
                " is no version node of src/symver/nodes.rs"
            )
        );
    };
}

#[cfg(test)]
mod tests {
    use super::nodes;

    #[test]
    fn the_nodes_are_known_and_nothing_else_is() {
        for v in nodes::IBVERBS.iter().chain(nodes::RDMACM).chain(nodes::EFA) {
            assert!(nodes::is_node(v), "{v}");
        }
        assert!(nodes::is_node(nodes::IBVERBS_PRIVATE));
        for v in [
            "",
            "IBVERBS_1.2",
            "IBVERBS_1.1 ",
            "IBVERBS_PRIVATE_33",
            "RDMACM_1.5",
            "IBVERBS_1.18",
            "EFA_1.4",
            "ibverbs_1.1",
        ] {
            assert!(!nodes::is_node(v), "{v:?}");
        }
    }

    #[test]
    fn the_script_chains_each_list_and_leaves_the_private_node_alone() {
        let s = nodes::libibverbs_script();
        assert!(
            s.starts_with("IBVERBS_1.0 { };\nIBVERBS_1.1 { } IBVERBS_1.0;\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "IBVERBS_1.17 { } IBVERBS_1.16;\nIBVERBS_PRIVATE_34 { };\nRDMACM_1.0 { };\n"
            ),
            "{s}"
        );
        assert!(
            s.ends_with(
                "RDMACM_1.4 { } RDMACM_1.3;\nEFA_1.0 { };\nEFA_1.1 { } EFA_1.0;\n\
                 EFA_1.2 { } EFA_1.1;\nEFA_1.3 { } EFA_1.2;\n"
            ),
            "{s}"
        );
        assert_eq!(
            s.lines().count(),
            nodes::IBVERBS.len() + 1 + nodes::RDMACM.len() + nodes::EFA.len()
        );
        assert_eq!(nodes::libefa_script().lines().count(), nodes::EFA.len());
        assert_eq!(
            nodes::librdmacm_script().lines().count(),
            nodes::RDMACM.len()
        );
    }
}
