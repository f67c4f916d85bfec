//! Fuzzes the mlx5 CQE parser and the CQ poller over a ring of input bytes.
//! The checks live in `rverbs_provider::fuzzing::mlx5_cqe`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_provider::fuzzing::mlx5_cqe(data));
