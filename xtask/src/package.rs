//! The `package` stage of `cargo xtask test`: every library crate packages as crates.io would
//! take it, and the packages build on their own.
//!
//! 1. `cargo package --no-verify` of the library crates ([`LIBRARIES`]): cargo itself refuses a
//!    path dependency without a version, and writes each `.crate`.
//! 2. What crates.io requires of each, read from the packaged (normalized) manifest: a
//!    `description`, a `license`, a `readme` that is in the package, and at most 10 MiB.
//! 3. What `cargo package`'s own verification would catch, more cheaply: the `.crate` files are
//!    unpacked into `target/package/check/`, made one workspace whose `[patch.crates-io]`
//!    points each crate's dependency on the others at their unpacked packages (a local
//!    overlay, as `cargo package --workspace` verifies against), and `cargo check`ed — lib,
//!    bins and build scripts, as verification builds them — with the workspace's target directory and lock file.
//!    That finds a file the package leaves out (an `include_str!` or `#[path]` outside the
//!    crate, a module not packaged) and a dependency that resolves differently once published.
//!    Cargo's verification instead *builds* each package with a fresh target directory: every
//!    dependency (rustix, zerocopy, tokio, ...) compiled again, in release-less debug codegen,
//!    which costs minutes on the CI's two cores; `check` with the shared target directory reuses
//!    what the clippy stage compiled, and codegen errors are not what packaging can introduce.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::testcmd::{fail_stage, Counts, Report};
use crate::util::{self, Context, Result};

/// The crates meant for crates.io (the CLI and the xtask have `publish = false` or are not
/// libraries), in dependency order.
const LIBRARIES: &[&str] = &[
    "rverbs-uverbs",
    "rverbs-provider",
    "rverbs-cm",
    "rverbs-async",
    "rverbs-stream",
    "rverbs",
    "rverbs-capi",
    "rverbs-testbed",
];

/// crates.io's limit on a `.crate` file.
const MAX_CRATE_BYTES: u64 = 10 << 20;

pub fn stage(report: &mut Report) {
    const NAME: &str = "package";
    if !report.wants(NAME) {
        return;
    }
    println!(
        "xtask: ==== {NAME}: cargo package of {}",
        LIBRARIES.join(", ")
    );
    let t = Instant::now();
    match run() {
        Ok(notes) => report.add(
            NAME,
            Counts {
                passed: LIBRARIES.len() as u64,
                ..Default::default()
            },
            notes,
            t.elapsed(),
        ),
        Err(e) => fail_stage(report, NAME, e.0, t),
    }
}

fn run() -> Result<Vec<String>> {
    let root = util::workspace_root();
    let target = util::target_dir();
    let package = |offline: bool| {
        let mut cmd = util::cargo();
        // --allow-dirty: the check is about what gets packaged, also from a work tree with
        // changes.
        cmd.args(["package", "--no-verify", "--allow-dirty", "--quiet"]);
        if offline {
            cmd.arg("--offline");
        }
        for l in LIBRARIES {
            cmd.args(["-p", l]);
        }
        cmd
    };
    // Offline first: each package's lock file needs index entries, which the earlier stages'
    // builds have normally cached (online, cargo fetches the index once per package: about
    // 20 s). Online when that fails.
    let t = Instant::now();
    let mut how = "offline";
    if util::output(&mut package(true)).is_err() {
        how = "online";
        util::run(&mut package(false))?;
    }
    let packaged = t.elapsed();

    let version = workspace_version(&root)?;
    let check = target.join("package/check");
    if check.exists() {
        std::fs::remove_dir_all(&check).context(|| format!("remove {}", check.display()))?;
    }
    std::fs::create_dir_all(&check).context(|| format!("create {}", check.display()))?;
    let mut notes = Vec::new();
    let mut sizes = Vec::new();
    for l in LIBRARIES {
        let file = target.join(format!("package/{l}-{version}.crate"));
        let bytes = std::fs::metadata(&file)
            .context(|| format!("{}: not written by cargo package", file.display()))?
            .len();
        if bytes > MAX_CRATE_BYTES {
            crate::bail!("{l}: {bytes} bytes, over crates.io's limit of {MAX_CRATE_BYTES}");
        }
        sizes.push(format!("{l} {} KiB", bytes.div_ceil(1024)));
        util::run(
            std::process::Command::new("tar")
                .arg("-xzf")
                .arg(&file)
                .arg("-C")
                .arg(&check),
        )?;
        let dir = check.join(format!("{l}-{version}"));
        required_metadata(l, &dir)?;
    }
    notes.push(format!("packages: {}", sizes.join(", ")));

    // One workspace of the unpacked packages, each dependency on a sibling patched to it.
    let mut manifest = String::from(
        "# Written by `cargo xtask test` (xtask/src/package.rs): the packaged crates, checked\n\
         # against each other as crates.io would resolve them.\n[workspace]\nresolver = \"2\"\nmembers = [\n",
    );
    for l in LIBRARIES {
        manifest.push_str(&format!("    \"{l}-{version}\",\n"));
    }
    manifest.push_str("]\n\n[patch.crates-io]\n");
    for l in LIBRARIES {
        manifest.push_str(&format!("{l} = {{ path = \"{l}-{version}\" }}\n"));
    }
    write(&check.join("Cargo.toml"), &manifest)?;
    // The workspace's lock file: the same versions of every registry dependency as the
    // other stages (cargo drops what does not apply).
    std::fs::copy(root.join("Cargo.lock"), check.join("Cargo.lock"))
        .context(|| "copy Cargo.lock".into())?;
    let t = Instant::now();
    util::run(
        util::cargo()
            .current_dir(&check)
            .env("CARGO_TARGET_DIR", &target)
            // What cargo's verification builds: libraries, binaries, build scripts. Tests and
            // examples are not what a dependent builds, and cargo drops path dev-dependencies
            // from a package, so some tests (rverbs-provider's) cannot build from it.
            .args(["check", "--quiet", "--workspace", "--lib", "--bins"]),
    )
    .map_err(|e| {
        util::Error(format!(
            "the packaged crates do not build on their own: {e}"
        ))
    })?;
    notes.push(format!(
        "cargo package ({how}) {}, cargo check of the unpacked packages (in {}) {}",
        util::fmt_secs(packaged),
        check.display(),
        util::fmt_secs(t.elapsed())
    ));
    Ok(notes)
}

/// The workspace's `version` (`[workspace.package]`), which every library inherits.
fn workspace_version(root: &Path) -> Result<String> {
    let text = read(&root.join("Cargo.toml"))?;
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[workspace.package]";
        } else if in_package {
            if let Some(v) = line.strip_prefix("version") {
                let v = v
                    .trim_start()
                    .trim_start_matches('=')
                    .trim()
                    .trim_matches('"');
                return Ok(v.to_string());
            }
        }
    }
    crate::bail!("Cargo.toml: no version in [workspace.package]")
}

/// What crates.io refuses a crate without, read from the packaged manifest (cargo wrote it
/// with every inherited value filled in): `description` and `license` in `[package]`, and the
/// `readme` file, when one is named, inside the package.
fn required_metadata(name: &str, dir: &Path) -> Result<()> {
    let text = read(&dir.join("Cargo.toml"))?;
    let mut in_package = false;
    let (mut description, mut license, mut readme) = (false, false, None::<String>);
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if !in_package {
            continue;
        }
        let key = line.split('=').next().unwrap_or("").trim();
        let value = || {
            line.split_once('=')
                .map(|(_, v)| v.trim().trim_matches('"').to_string())
        };
        match key {
            "description" => description = value().is_some_and(|v| !v.is_empty()),
            "license" | "license-file" => license = value().is_some_and(|v| !v.is_empty()),
            "readme" => readme = value().filter(|v| v != "false"),
            _ => {}
        }
    }
    if !description {
        crate::bail!("{name}: no description (crates.io requires one)");
    }
    if !license {
        crate::bail!("{name}: no license or license-file (crates.io requires one)");
    }
    if let Some(r) = readme {
        if !dir.join(&r).is_file() {
            crate::bail!("{name}: its readme {r} is not in the package");
        }
    }
    Ok(())
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).context(|| format!("read {}", p.display()))
}

fn write(p: &PathBuf, s: &str) -> Result<()> {
    std::fs::write(p, s).context(|| format!("write {}", p.display()))
}
