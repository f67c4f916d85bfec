//! Fuzzes QUERY (ADDR, GID, PATH) and QUERY_ROUTE replies.
//! The checks live in `rverbs_cm::fuzzing::queries`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_cm::fuzzing::queries(data));
