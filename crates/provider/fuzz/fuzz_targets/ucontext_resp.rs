//! Fuzzes the parsers of kernel driver responses: alloc_ucontext and create_cq. Any input
//! must give a value or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rverbs_provider::internals::mlx5::parse_create_cq_resp;
use rverbs_provider::internals::mlx5::Mlx5ContextUdata;

fuzz_target!(|data: &[u8]| {
    for page in [4096usize, 65536] {
        let mut u = Mlx5ContextUdata::new(page);
        if let Ok(info) = u.parse_response(data, page) {
            assert!(info.filled_len <= data.len());
            assert!(info.cqe_version <= u.max_cqe_version);
            assert!(info.uar_size.is_power_of_two());
            assert!(info.tot_bfregs != 0);
        }
        u.max_cqe_version = 1;
        let _ = u.parse_response(data, page);
    }
    if let Ok(cqn) = parse_create_cq_resp(data) {
        assert!(cqn <= 0xff_ffff);
    }
});
