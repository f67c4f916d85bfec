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

/// `cargo` of the nightly toolchain, through rustup (the stages that need nightly: public
/// api, miri, fuzz). A `cargo +nightly` could reach the stable toolchain's cargo binary
/// directly when `cargo xtask` put it first in PATH, and the variables the outer (stable)
/// cargo sets would pick the stable tools: the nightly cargo picks its own.
pub fn nightly_cargo() -> Command {
    let mut c = Command::new("rustup");
    c.args(["run", "nightly", "cargo"]);
    c.env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC");
    c
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

/// Bytes free for an unprivileged writer on the file system holding `dir` (`df`), or `None`
/// where `df` cannot tell (no such program, or text it does not print).
pub fn free_bytes(dir: &Path) -> Option<u64> {
    let out = Command::new("df")
        .args(["-P", "-B1", "--output=avail"])
        .arg(dir)
        .output()
        .ok()?;
    parse_df_avail(&String::from_utf8_lossy(&out.stdout))
}

/// The number of `df --output=avail`'s text: a header line, then the count.
fn parse_df_avail(text: &str) -> Option<u64> {
    text.lines().nth(1)?.trim().parse().ok()
}

/// What a whole `cargo xtask test` writes under the target directory from a fresh clone (the
/// host build, Miri, rustdoc JSON, the fuzz and static builds, the kernels and the guests'
/// run directories), with room to spare: measured at 7.1 GiB.
pub const TEST_RUN_BYTES: u64 = 12 << 30;

/// A warning line when the disk holding the target directory has less room than a whole run
/// needs: a full disk otherwise shows up as link errors and bus errors in whichever stage
/// comes first.
pub fn disk_warning() -> Option<String> {
    let dir = target_dir();
    let probe = if dir.exists() { dir } else { workspace_root() };
    let free = free_bytes(&probe)?;
    (free < TEST_RUN_BYTES).then(|| {
        format!(
            "WARNING: {} has {:.1} GiB free; a whole test run writes about {} GiB under {}: \
             stages may fail with 'No space left on device'",
            probe.display(),
            free as f64 / f64::from(1u32 << 30),
            TEST_RUN_BYTES >> 30,
            target_dir().display()
        )
    })
}

pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    cmd
}

#[cfg(test)]
mod disk_tests {
    #[test]
    fn df_avail_text_is_read() {
        assert_eq!(
            super::parse_df_avail("   Avail\n1048576000\n"),
            Some(1_048_576_000)
        );
        assert_eq!(super::parse_df_avail("Avail\n"), None);
        assert_eq!(super::parse_df_avail("Avail\n-\n"), None);
    }
}
