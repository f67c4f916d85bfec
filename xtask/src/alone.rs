//! The `crates alone` stage of `cargo xtask test`: each crate of the workspace builds on its
//! own, with its default features, and with none where it has defaults.
//!
//! A workspace build unifies features: when `rverbs-capi` asks for `rverbs-cm/internals`,
//! every crate of `cargo build --workspace` sees `internals` on, so a crate that uses an item
//! behind that feature without asking for it builds there and fails alone (the static `rverbs`
//! CLI once did: E0624). `cargo check -p <crate>` resolves that crate's graph only, so each
//! crate gets one `cargo check` of its own (lib, bins and build script, as a dependent or an
//! install builds them; not its tests). `check` with the shared target directory reuses what
//! an earlier check of the same crate with the same features left (docs/testing.md has its
//! cost).

use std::time::Instant;

use crate::json::Json;
use crate::testcmd::{fail_stage, Counts, Report};
use crate::util::{self, Context, Result};

const NAME: &str = "crates alone";

pub fn stage(report: &mut Report) {
    if !report.wants(NAME) {
        return;
    }
    let t = Instant::now();
    let checks = match workspace_checks() {
        Ok(c) => c,
        Err(e) => return fail_stage(report, NAME, e.0, t),
    };
    println!(
        "xtask: ==== {NAME}: cargo check -p <crate> of {} crate/feature set(s)",
        checks.len()
    );
    let mut counts = Counts::default();
    let mut notes = Vec::new();
    for args in &checks {
        let mut cmd = util::cargo();
        cmd.arg("check").arg("--quiet").args(args);
        match cmd.status() {
            Ok(s) if s.success() => counts.passed += 1,
            Ok(s) => {
                counts.failed += 1;
                notes.push(format!(
                    "FAILED: `{}` {}",
                    util::show(&cmd),
                    util::describe_status(s)
                ));
            }
            Err(e) => {
                counts.failed += 1;
                notes.push(format!("FAILED: cannot run `{}`: {e}", util::show(&cmd)));
            }
        }
    }
    report.add(NAME, counts, notes, t.elapsed());
}

/// The `cargo check` arguments, one list per check: every workspace member with its default
/// features, and once more without them where it declares defaults.
fn workspace_checks() -> Result<Vec<Vec<String>>> {
    let out = util::cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .context(|| "cannot run `cargo metadata`".to_string())?;
    if !out.status.success() {
        return Err(format!(
            "`cargo metadata` {}: {}",
            util::describe_status(out.status),
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    checks_of(&text)
}

/// [`workspace_checks`] from `cargo metadata`'s output.
fn checks_of(metadata: &str) -> Result<Vec<Vec<String>>> {
    let json = Json::parse(metadata).map_err(|e| format!("cargo metadata's output: {e}"))?;
    let mut checks = Vec::new();
    for p in json.get("packages").as_array() {
        let name = p
            .get("name")
            .as_str()
            .ok_or("cargo metadata: a package without a name")?;
        checks.push(vec!["-p".to_string(), name.to_string()]);
        if !p.get("features").get("default").as_array().is_empty() {
            checks.push(vec![
                "-p".to_string(),
                name.to_string(),
                "--no-default-features".to_string(),
            ]);
        }
    }
    if checks.is_empty() {
        return Err("cargo metadata lists no package".to_string().into());
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_package_once_and_without_defaults_where_it_has_them() {
        let meta = r#"{"packages":[
            {"name":"a","features":{}},
            {"name":"b","features":{"default":["x"],"x":[]}},
            {"name":"c","features":{"default":[],"y":[]}}
        ],"workspace_members":[]}"#;
        let got = checks_of(meta).unwrap();
        let got: Vec<String> = got.iter().map(|a| a.join(" ")).collect();
        assert_eq!(got, ["-p a", "-p b", "-p b --no-default-features", "-p c"]);
        assert!(checks_of(r#"{"packages":[]}"#).is_err());
        assert!(checks_of("not json").is_err());
    }
}
