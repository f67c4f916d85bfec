//! Fuzzes RDMA netlink replies (messages, attributes, device/port/chardev/resource-summary decoders, the reply absorber).
//! The checks live in `rverbs_uverbs::fuzzing::netlink`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rverbs_uverbs::fuzzing::netlink(data));
