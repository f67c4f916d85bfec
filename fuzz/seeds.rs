//! The seeds of the fuzz targets, for the unit tests of the crates' `fuzzing` modules: each of
//! rverbs-uverbs, rverbs-cm and rverbs-provider includes this file in its tests
//! (`#[cfg(test)] #[path = "../../../fuzz/seeds.rs"] mod seeds;` in its `src/fuzzing.rs`), so it
//! is written once, beside the corpus it reads, and is no public item of any crate.

/// The committed seeds of fuzz target `target` (`fuzz/corpus/<target>/` of the repository), by
/// name. The unit tests of the fuzz entry points (of rverbs-uverbs, rverbs-cm and
/// rverbs-provider) run every entry point over its seeds on the stable toolchain, so each seed
/// stays valid input that reaches deep, and a saved crash input added there stays fixed.
/// Panics when the directory is missing or empty.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.expect("directory entry").path();
            let name = p
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&p).expect("readable seed"))
        })
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no seeds in {}", dir.display());
    v
}
