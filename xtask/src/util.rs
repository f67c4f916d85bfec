//! The xtask's helpers: the bed's own (errors, running programs, quoting; from
//! `rverbs_testbed::util`) plus the workspace's paths.

use rverbs_testbed::kernel::KernelSpec;
pub use rverbs_testbed::util::*;
use rverbs_testbed::vm::BedConfig;
use std::path::{Path, PathBuf};
use std::process::Command;

#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::util::Error(format!($($arg)*))) };
}

/// The workspace root (the parent of the xtask package).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Cargo's target directory: `$CARGO_TARGET_DIR` when set, else `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => absolute(PathBuf::from(d)),
        _ => workspace_root().join("target"),
    }
}

/// Where the xtask keeps the bed's cache (kernels, package lists) and its run directories.
pub fn vm_dir() -> PathBuf {
    target_dir().join("vm")
}

/// The bed of this workspace: cache in `target/vm/`, runs in `target/vm/runs/`.
pub fn bed_config(kernel: KernelSpec) -> BedConfig {
    BedConfig {
        cache_dir: vm_dir(),
        runs_dir: vm_dir().join("runs"),
        kernel,
        provider: rverbs_testbed::vm::Provider::Rxe,
    }
}

pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    cmd
}
