//! Safe code cannot reach the holes the soundness review found: each program under `tests/ui/`
//! must fail to compile with the error in its `.stderr` file (the reason, not only "it fails").
//! Regenerate the expected text after a compiler upgrade with
//! `TRYBUILD=overwrite cargo test -p rverbs-uverbs --test compile_fail` and review the diff.

#[test]
#[cfg_attr(
    rverbs_vm,
    ignore = "compiles programs with cargo and rustc: runs with the host tests, not in the guests"
)]
fn unsound_uses_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
