//! Fuzzes mlx5 driver responses: alloc_ucontext, create_cq, create_qp, create_srq.
//! The checks live in `rverbs_provider::fuzzing::mlx5_responses`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_provider::fuzzing::mlx5_responses(data));
