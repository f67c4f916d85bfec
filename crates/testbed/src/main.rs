//! `rverbs-vm`: see `rverbs-vm help` and docs/testing.md ("Testing your crate on RDMA").

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    ExitCode::from(rverbs_testbed::runner::main(&args))
}
