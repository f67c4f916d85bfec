//! Fuzzes socket addresses the ucma module reports (IPv4, IPv6, AF_IB).
//! The checks live in `rverbs_cm::fuzzing::addresses`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_cm::fuzzing::addresses(data));
