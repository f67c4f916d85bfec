//! Builds our binaries for the guests: fully static (musl; glibc with crt-static as a
//! reported fallback), and the integration tests with `--cfg rverbs_vm`.

use crate::json::Json;
use crate::util::{self, Context, Result};
use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub const MUSL: &str = "x86_64-unknown-linux-musl";
const GNU: &str = "x86_64-unknown-linux-gnu";

/// The target the guest binaries are built for, chosen once per xtask run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestTarget {
    Musl,
    /// glibc with `-C target-feature=+crt-static`, used when the musl target is unavailable.
    GnuStatic,
}

impl GuestTarget {
    pub fn triple(self) -> &'static str {
        match self {
            GuestTarget::Musl => MUSL,
            GuestTarget::GnuStatic => GNU,
        }
    }

    /// `--config` value with the rustflags for this target, plus extra flags.
    fn rustflags_config(self, extra: &[&str]) -> Option<String> {
        let mut flags: Vec<&str> = Vec::new();
        if self == GuestTarget::GnuStatic {
            flags.extend(["-C", "target-feature=+crt-static"]);
        }
        flags.extend(extra);
        if flags.is_empty() {
            return None;
        }
        let list = flags
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect::<Vec<_>>()
            .join(",");
        Some(format!("target.{}.rustflags=[{list}]", self.triple()))
    }
}

/// Whether the toolchain has the standard library for `triple`.
fn has_std_for(triple: &str) -> bool {
    util::output(
        Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
            .args(["--print", "sysroot"]),
    )
    .map(|root| {
        PathBuf::from(root.trim())
            .join("lib/rustlib")
            .join(triple)
            .join("lib")
            .is_dir()
    })
    .unwrap_or(false)
}

/// Chooses the guest target: musl, installing it with rustup when missing; glibc with
/// crt-static (reported) only when the musl standard library cannot be had.
pub fn guest_target() -> GuestTarget {
    if std::env::var("RVERBS_GUEST_TARGET").as_deref() == Ok("gnu") {
        eprintln!(
            "xtask: note: guest binaries are glibc with crt-static (RVERBS_GUEST_TARGET=gnu)"
        );
        return GuestTarget::GnuStatic;
    }
    if has_std_for(MUSL) {
        return GuestTarget::Musl;
    }
    eprintln!("xtask: adding the Rust target {MUSL} (rustup target add {MUSL})");
    if let Err(e) = util::run(Command::new("rustup").args(["target", "add", MUSL])) {
        eprintln!("xtask: cannot add {MUSL}: {e}");
    }
    if has_std_for(MUSL) {
        return GuestTarget::Musl;
    }
    eprintln!(
        "xtask: WARNING: the Rust target {MUSL} is not available: building the guest binaries \
         for glibc with -C target-feature=+crt-static instead"
    );
    GuestTarget::GnuStatic
}

#[derive(Clone, Debug)]
pub struct Artifact {
    pub executable: PathBuf,
    /// Directory of the package's Cargo.toml (cargo runs tests there).
    pub package_dir: PathBuf,
    /// `<package dir name>/<target name>`, e.g. `uverbs/vm_smoke`.
    pub name: String,
    pub kind: String,
    /// Built with the test profile: a test harness (of a test target, or a bin's unit tests).
    pub test_harness: bool,
}

/// The executable a `compiler-artifact` message of cargo describes, if it made one.
fn artifact_of(j: &Json) -> Option<Artifact> {
    let exe = j.get("executable").as_str()?;
    let kind = j
        .get("target")
        .get("kind")
        .as_array()
        .first()
        .and_then(Json::as_str)
        .unwrap_or("");
    let tname = j.get("target").get("name").as_str().unwrap_or("?");
    // A bin target's unit tests are an artifact of kind "bin" too, built with the test
    // profile: not the program.
    let test_harness = j.get("profile").get("test").as_bool() == Some(true);
    let manifest = PathBuf::from(j.get("manifest_path").as_str().unwrap_or(""));
    let package_dir = manifest.parent().map(PathBuf::from).unwrap_or_default();
    let pkg = package_dir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    Some(Artifact {
        executable: PathBuf::from(exe),
        package_dir,
        name: format!("{pkg}/{tname}"),
        kind: kind.to_string(),
        test_harness,
    })
}

/// Runs a cargo build with `--message-format=json-render-diagnostics` and collects the
/// executables it produced. Diagnostics go to the terminal.
fn cargo_artifacts(mut cmd: Command) -> Result<Vec<Artifact>> {
    cmd.arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped());
    let shown = util::show(&cmd);
    let mut child = cmd.spawn().context(|| format!("cannot run `{shown}`"))?;
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Ok(j) = Json::parse(&line) else { continue };
            if j.get("reason").as_str() != Some("compiler-artifact") {
                continue;
            }
            let Some(a) = artifact_of(&j) else { continue };
            if seen.insert(a.executable.clone()) {
                out.push(a);
            }
        }
    }
    let status = child
        .wait()
        .context(|| format!("cannot wait for `{shown}`"))?;
    if !status.success() {
        crate::bail!("`{shown}` failed ({})", util::describe_status(status));
    }
    Ok(out)
}

fn cargo_for(target: GuestTarget, args: &[&str], extra_flags: &[&str]) -> Command {
    let mut cmd = util::cargo();
    cmd.args(args).args(["--target", target.triple()]);
    if let Some(cfg) = target.rustflags_config(extra_flags) {
        cmd.args(["--config", &cfg]);
    }
    cmd
}

/// `cargo build --release --target <guest> -p rverbs-cli` → the static `rverbs` binary.
pub fn rverbs(target: GuestTarget) -> Result<PathBuf> {
    let cmd = cargo_for(
        target,
        &["build", "--release", "-p", "rverbs-cli", "--bin", "rverbs"],
        &[],
    );
    let arts = cargo_artifacts(cmd)?;
    let exe = arts
        .into_iter()
        .find(|a| a.kind == "bin" && a.name.ends_with("/rverbs"))
        .map(|a| a.executable)
        .ok_or("cargo built no `rverbs` binary")?;
    static_for_guests(exe)
}

pub struct VmTests {
    pub tests: Vec<Artifact>,
    /// Programs the tests run: binaries built alongside (`CARGO_BIN_EXE_*` of the tests) and
    /// the examples of [`vm_examples`].
    pub bins: Vec<Artifact>,
}

/// Builds every integration test (crates/*/tests/*.rs) for the guest with `--cfg rverbs_vm`.
pub fn vm_tests(target: GuestTarget) -> Result<VmTests> {
    if std::env::var_os("RUSTFLAGS").is_some()
        || std::env::var_os("CARGO_ENCODED_RUSTFLAGS").is_some()
    {
        eprintln!("xtask: WARNING: RUSTFLAGS is set and overrides the `--cfg rverbs_vm` of the VM test build");
    }
    let cmd = cargo_for(
        target,
        &[
            "test",
            "--no-run",
            "--workspace",
            "--exclude",
            "xtask",
            // The bed's own tests boot guests from the host (stage "runner boot tests").
            "--exclude",
            "rverbs-testbed",
            "--tests",
        ],
        // Line tables keep backtraces useful at a fifth of the size (the minimal guest holds the
        // binaries in its initramfs).
        &["--cfg", "rverbs_vm", "-C", "debuginfo=line-tables-only"],
    );
    let (tests, bins) = split(cargo_artifacts(cmd)?);
    Ok(VmTests { tests, bins })
}

/// The facade's examples for the guest: `crates/rverbs/tests/vm_examples.rs` runs them as
/// programs, from `target/<triple>/debug/examples/` beside its own `deps/`. Built with the
/// packages and flags of [`vm_tests`] (the same features, so the same dependency builds);
/// only the facade's examples go to the guests.
pub fn vm_examples(target: GuestTarget) -> Result<Vec<Artifact>> {
    let cmd = cargo_for(
        target,
        &[
            "build",
            "--workspace",
            "--exclude",
            "xtask",
            "--exclude",
            "rverbs-testbed",
            "--examples",
        ],
        &["--cfg", "rverbs_vm", "-C", "debuginfo=line-tables-only"],
    );
    let arts = cargo_artifacts(cmd)?;
    let examples: Vec<Artifact> = arts
        .into_iter()
        .filter(|a| a.kind == "example" && a.name.starts_with("rverbs/"))
        .collect();
    if examples.is_empty() {
        crate::bail!("cargo built no example of rverbs");
    }
    Ok(examples)
}

/// Integration tests, and programs (not their unit-test harnesses).
fn split(arts: Vec<Artifact>) -> (Vec<Artifact>, Vec<Artifact>) {
    let (tests, rest): (Vec<_>, Vec<_>) = arts.into_iter().partition(|a| a.kind == "test");
    let bins = rest
        .into_iter()
        .filter(|a| a.kind == "bin" && !a.test_harness)
        .collect();
    (tests, bins)
}

/// `exe`, if it is statically linked (the minimal guest has no shared libraries).
fn static_for_guests(exe: PathBuf) -> Result<PathBuf> {
    if !util::elf_is_static(&exe)? {
        crate::bail!(
            "{} is dynamically linked; the guests need a static binary",
            exe.display()
        );
    }
    Ok(exe)
}

/// The static `rverbs` binary the VM test build produced (the CLI tests' `CARGO_BIN_EXE_rverbs`).
pub fn static_rverbs_of(tests: &VmTests) -> Result<PathBuf> {
    let exe = static_rverbs_path(tests)?;
    static_for_guests(exe)
}

fn static_rverbs_path(tests: &VmTests) -> Result<PathBuf> {
    Ok(tests
        .bins
        .iter()
        .find(|a| a.name.ends_with("/rverbs") && !a.test_harness)
        .map(|a| a.executable.clone())
        .ok_or("the VM test build made no `rverbs` binary")?)
}

/// Builds the static rverbs binary for the guests (see [`guest_target`]).
pub fn rverbs_any() -> Result<(GuestTarget, PathBuf)> {
    let t = guest_target();
    Ok((t, rverbs(t)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: &str, test: bool, exe: &str) -> Json {
        Json::parse(&format!(
            r#"{{"reason":"compiler-artifact","manifest_path":"/w/crates/cli/Cargo.toml",
               "target":{{"kind":["{kind}"],"name":"rverbs"}},"profile":{{"test":{test}}},
               "executable":"{exe}"}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_bins_unit_test_harness_is_not_the_program() {
        let prog = artifact_of(&line("bin", false, "/t/debug/rverbs")).unwrap();
        let harness = artifact_of(&line("bin", true, "/t/debug/deps/rverbs-1f2e")).unwrap();
        assert_eq!(prog.name, "cli/rverbs");
        assert!(!prog.test_harness && harness.test_harness);
        // Whichever order cargo reports them in, the guests get the program.
        for arts in [vec![harness.clone(), prog.clone()], vec![prog, harness]] {
            let (tests, bins) = split(arts);
            assert!(tests.is_empty());
            let t = VmTests { tests, bins };
            assert_eq!(
                static_rverbs_path(&t).unwrap(),
                PathBuf::from("/t/debug/rverbs")
            );
        }
    }
}
