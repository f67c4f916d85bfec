//! Fuzzes the rxe queue header of every queue kind and the rxe CQ poller.
//! The checks live in `rverbs_provider::fuzzing::rxe_queue`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_provider::fuzzing::rxe_queue(data));
