//! Fuzzes kernel-layout completion entries (`RawWc`) and async event descriptors.
//! The checks live in `rverbs_uverbs::fuzzing::completions`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_uverbs::fuzzing::completions(data));
