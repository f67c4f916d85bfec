//! Fuzzes ucma events (`rdma_ucm_event_resp`) as users see them, and the channel's dispatcher.
//! The checks live in `rverbs_cm::fuzzing::events`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_cm::fuzzing::events(data));
