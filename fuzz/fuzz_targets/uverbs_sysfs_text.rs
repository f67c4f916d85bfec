//! Fuzzes sysfs text: GUIDs, GIDs, MTUs, driver names.
//! The checks live in `rverbs_uverbs::fuzzing::sysfs_text`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_uverbs::fuzzing::sysfs_text(data));
