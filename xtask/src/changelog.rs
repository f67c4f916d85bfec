//! The `changelog` stage of `cargo xtask test`: a change to the public-API inventory
//! (`api/*.txt`) comes with a line in CHANGELOG.md.
//!
//! The rule, checked on git's history: every commit of the main line since the one that added
//! CHANGELOG.md (`git log --first-parent BASE..HEAD`) that changes a file under `api/` also
//! adds at least one line to CHANGELOG.md that is neither blank nor a heading; and so do the
//! uncommitted changes of the working tree (`git diff HEAD`). A merge on the main line is
//! judged by everything it brings in (its diff against its first parent), so a branch's commits
//! count together, as one submission, and a conflict resolved inside `api/` is seen too. Each
//! commit of the main line is judged alone, so a later commit's line does not excuse an earlier
//! one, and a line added once does not cover the crate's later changes.
//!
//! Without git, outside a git checkout, or in a shallow clone (the base commit is not there),
//! the stage says so and counts one skipped, never a pass.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::testcmd::Counts;
use crate::util;

/// One commit's changes to `api/` and CHANGELOG.md, as `git log -p` shows them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// The abbreviated or full commit id and its subject ("the working tree" for uncommitted
    /// changes).
    pub what: String,
    /// Files under `api/` it changes.
    pub api_files: Vec<String>,
    /// Lines it adds to CHANGELOG.md that are neither blank nor a heading.
    pub changelog_lines: usize,
}

/// The marker that starts a commit in the `git log` text this module asks for.
const COMMIT_MARK: &str = "\u{0}commit ";

/// Parses `git log -p --format=%x00commit %h %s` (or `git diff` text after one such header
/// line) into one [`Change`] per commit.
pub fn parse(text: &str) -> Vec<Change> {
    let mut out: Vec<Change> = Vec::new();
    let mut file = String::new();
    for line in text.lines() {
        if let Some(head) = line.strip_prefix(COMMIT_MARK) {
            out.push(Change {
                what: head.to_string(),
                ..Change::default()
            });
            file.clear();
            continue;
        }
        let Some(cur) = out.last_mut() else { continue };
        if let Some(rest) = line.strip_prefix("diff --git a/") {
            // `diff --git a/PATH b/PATH`: the paths have no spaces here (api/*.txt, CHANGELOG.md).
            file = rest.split(" b/").next().unwrap_or("").to_string();
            if file.starts_with("api/") && !cur.api_files.contains(&file) {
                cur.api_files.push(file.clone());
            }
        } else if file == "CHANGELOG.md" && !line.starts_with("+++") {
            if let Some(added) = line.strip_prefix('+') {
                let t = added.trim();
                if !t.is_empty() && !t.starts_with('#') {
                    cur.changelog_lines += 1;
                }
            }
        }
    }
    out
}

/// The changes that break the rule, each as a sentence naming it.
pub fn violations(changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .filter(|c| !c.api_files.is_empty() && c.changelog_lines == 0)
        .map(|c| {
            format!(
                "{} changes {} without a line in CHANGELOG.md",
                c.what,
                c.api_files.join(", ")
            )
        })
        .collect()
}

/// What the check found in a checkout.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The rule holds: how many commits it looked at, and since which.
    Passed(String),
    /// The rule is broken (or the history is not what it should be), one line each.
    Failed(Vec<String>),
    /// It could not be checked here: why.
    Skipped(String),
}

fn git(root: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .map_err(|e| format!("git could not be run ({e})"))?;
    if !out.status.success() {
        return Err(format!(
            "`git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Checks the rule on the git checkout at `root`.
pub fn check(root: &Path) -> Outcome {
    if let Err(e) = Command::new("git").arg("--version").output() {
        return Outcome::Skipped(format!(
            "no git ({e}): the CHANGELOG rule needs the history"
        ));
    }
    if git(root, &["rev-parse", "--is-inside-work-tree"]).is_err() {
        return Outcome::Skipped(format!(
            "{} is not a git checkout: the CHANGELOG rule needs the history",
            root.display()
        ));
    }
    match git(root, &["rev-parse", "--is-shallow-repository"]) {
        Ok(s) if s.trim() == "false" => {}
        Ok(_) => {
            return Outcome::Skipped(
                "a shallow clone: the history since CHANGELOG.md appeared is not all here \
                 (git fetch --unshallow, or clone without --depth)"
                    .to_string(),
            )
        }
        Err(e) => return Outcome::Failed(vec![e]),
    }
    let added = match git(
        root,
        &[
            "log",
            "--diff-filter=A",
            "--format=%H",
            "--",
            "CHANGELOG.md",
        ],
    ) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(vec![e]),
    };
    let Some(base) = added.lines().last().map(str::to_string) else {
        return Outcome::Failed(vec![
            "no commit of HEAD's history adds CHANGELOG.md".to_string()
        ]);
    };
    let range = format!("{base}..HEAD");
    let log = match git(
        root,
        &[
            "log",
            "--first-parent",
            "--diff-merges=first-parent",
            "--no-renames",
            "-p",
            "--unified=0",
            "--format=%x00commit %h %s",
            &range,
            "--",
            "api",
            "CHANGELOG.md",
        ],
    ) {
        Ok(s) => s,
        Err(e) => return Outcome::Failed(vec![e]),
    };
    let commits = match git(root, &["rev-list", "--first-parent", "--count", &range]) {
        Ok(s) => s.trim().to_string(),
        Err(e) => return Outcome::Failed(vec![e]),
    };
    let mut changes = parse(&log);
    match git(
        root,
        &[
            "diff",
            "--no-renames",
            "--unified=0",
            "HEAD",
            "--",
            "api",
            "CHANGELOG.md",
        ],
    ) {
        Ok(d) => changes.extend(parse(&format!(
            "{COMMIT_MARK}the working tree (uncommitted)\n{d}"
        ))),
        Err(e) => return Outcome::Failed(vec![e]),
    }
    let bad = violations(&changes);
    if bad.is_empty() {
        let short = &base[..base.len().min(9)];
        Outcome::Passed(format!(
            "{commits} commits of the main line since CHANGELOG.md appeared ({short}), {} touching api/ or \
             CHANGELOG.md, each api/ change with a CHANGELOG line",
            changes
                .iter()
                .filter(|c| !c.what.starts_with("the working tree"))
                .count()
        ))
    } else {
        Outcome::Failed(bad)
    }
}

/// The `changelog` stage: 1 passed, 1 failed, or 1 skipped with the reason.
pub fn stage() -> (Counts, Vec<String>, Duration) {
    let t = Instant::now();
    println!("xtask: ==== changelog: every commit that changes api/*.txt adds a CHANGELOG.md line");
    let mut c = Counts::default();
    let mut notes = Vec::new();
    match check(&util::workspace_root()) {
        Outcome::Passed(s) => {
            println!("xtask: changelog: {s}");
            c.passed = 1;
        }
        Outcome::Failed(lines) => {
            for l in &lines {
                println!("xtask: changelog: {l}");
                notes.push(format!("FAILED: {l}"));
            }
            notes.push(
                "a public API change gets a line under \"## Unreleased\" in CHANGELOG.md, in the \
                 same commit (breaking changes say what a user writes instead)"
                    .to_string(),
            );
            c.failed = 1;
        }
        Outcome::Skipped(why) => {
            println!("xtask: changelog: WARNING: skipped: {why}");
            notes.push(format!("skipped: {why}"));
            c.ignored = 1;
        }
    }
    (c, notes, t.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const LOG: &str = "\u{0}commit aaaa1 api and a line
diff --git a/api/rverbs-cm.txt b/api/rverbs-cm.txt
--- a/api/rverbs-cm.txt
+++ b/api/rverbs-cm.txt
@@ -3 +3 @@
-fn rverbs_cm::a()
+fn rverbs_cm::b()
diff --git a/CHANGELOG.md b/CHANGELOG.md
--- a/CHANGELOG.md
+++ b/CHANGELOG.md
@@ -6,0 +7 @@
+- rverbs-cm: `a` is `b`.
\u{0}commit bbbb2 api alone
diff --git a/api/rverbs-cm.txt b/api/rverbs-cm.txt
--- a/api/rverbs-cm.txt
+++ b/api/rverbs-cm.txt
@@ -3 +3 @@
+fn rverbs_cm::c()
diff --git a/api/rverbs.txt b/api/rverbs.txt
--- a/api/rverbs.txt
+++ b/api/rverbs.txt
@@ -3 +3 @@
+fn rverbs::c()
\u{0}commit cccc3 a changelog line alone
diff --git a/CHANGELOG.md b/CHANGELOG.md
--- a/CHANGELOG.md
+++ b/CHANGELOG.md
@@ -6,0 +7 @@
+- fixed a word
\u{0}commit dddd4 api with only a heading and a blank line
diff --git a/api/rverbs-stream.txt b/api/rverbs-stream.txt
--- a/api/rverbs-stream.txt
+++ b/api/rverbs-stream.txt
@@ -3 +3 @@
-fn rverbs_stream::x()
diff --git a/CHANGELOG.md b/CHANGELOG.md
--- a/CHANGELOG.md
+++ b/CHANGELOG.md
@@ -6,0 +7,2 @@
+## 0.2.0
+
-- an old line removed
";

    #[test]
    fn parses_each_commit_with_its_api_files_and_changelog_lines() {
        let c = parse(LOG);
        assert_eq!(c.len(), 4);
        assert_eq!(c[0].what, "aaaa1 api and a line");
        assert_eq!(c[0].api_files, ["api/rverbs-cm.txt"]);
        assert_eq!(c[0].changelog_lines, 1);
        assert_eq!(c[1].api_files, ["api/rverbs-cm.txt", "api/rverbs.txt"]);
        assert_eq!(c[1].changelog_lines, 0);
        assert!(c[2].api_files.is_empty());
        assert_eq!(c[2].changelog_lines, 1);
        // A heading, a blank line and a removed line are not a changelog line.
        assert_eq!(c[3].changelog_lines, 0);
    }

    #[test]
    fn an_api_change_without_a_changelog_line_is_named() {
        let v = violations(&parse(LOG));
        assert_eq!(
            v,
            [
                "bbbb2 api alone changes api/rverbs-cm.txt, api/rverbs.txt without a line in \
                 CHANGELOG.md",
                "dddd4 api with only a heading and a blank line changes api/rverbs-stream.txt \
                 without a line in CHANGELOG.md"
            ]
        );
        // A later commit's line does not excuse an earlier commit: each is judged alone.
        assert!(violations(&parse(LOG)[..1]).is_empty());
        assert!(violations(&[]).is_empty());
    }

    /// A scratch directory of its own for each test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("xtask-changelog-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn run_git(dir: &Path, args: &[&str]) {
        let st = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.invalid",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .status()
            .unwrap();
        assert!(st.success(), "git {args:?}");
    }

    fn commit(dir: &Path, files: &[(&str, &str)], msg: &str) {
        for (f, text) in files {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            let mut old = std::fs::read_to_string(&p).unwrap_or_default();
            old.push_str(text);
            std::fs::write(&p, old).unwrap();
            run_git(dir, &["add", f]);
        }
        run_git(dir, &["commit", "-q", "-m", msg]);
    }

    /// The whole check on a real repository: passes, then fails on a commit (and on the
    /// working tree) that changes api/ alone, and is skipped in a shallow clone and outside git.
    #[test]
    fn checks_a_real_history() {
        let d = scratch("repo");
        run_git(&d, &["init", "-q"]);
        // Before CHANGELOG.md appeared, api/ changes are not judged.
        commit(&d, &[("api/a.txt", "fn a()\n")], "api before the changelog");
        commit(
            &d,
            &[("CHANGELOG.md", "# Changelog\n\n## Unreleased\n")],
            "changelog",
        );
        commit(
            &d,
            &[("api/a.txt", "fn b()\n"), ("CHANGELOG.md", "- b added\n")],
            "b, with its line",
        );
        commit(&d, &[("README", "x\n")], "no api change");
        assert!(matches!(check(&d), Outcome::Passed(_)), "{:?}", check(&d));

        // Uncommitted: an api/ change alone fails, naming the working tree.
        std::fs::write(d.join("api/a.txt"), "fn a()\nfn b()\nfn c()\n").unwrap();
        match check(&d) {
            Outcome::Failed(v) => assert!(v[0].starts_with("the working tree"), "{v:?}"),
            o => panic!("{o:?}"),
        }
        run_git(&d, &["add", "api/a.txt"]);
        run_git(&d, &["commit", "-q", "-m", "c alone"]);
        commit(
            &d,
            &[("CHANGELOG.md", "- c added\n")],
            "the line, one commit late",
        );
        match check(&d) {
            Outcome::Failed(v) => {
                assert_eq!(v.len(), 1, "{v:?}");
                assert!(v[0].contains("c alone changes api/a.txt"), "{v:?}");
            }
            o => panic!("{o:?}"),
        }

        // A branch merged into the main line counts as one: its api/ change and its line in
        // two commits pass together; a merge that brings an api/ change and no line fails.
        commit(&d, &[("CHANGELOG.md", "- c again\n")], "main line mended");
        let main = String::from_utf8(
            Command::new("git")
                .args(["-C"])
                .arg(&d)
                .args(["rev-parse", "--abbrev-ref", "HEAD"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        let main = main.trim();
        // The mended line does not excuse `c alone`: reset the history to before it.
        run_git(&d, &["reset", "-q", "--hard", "HEAD~3"]);
        run_git(&d, &["checkout", "-q", "-b", "topic"]);
        commit(&d, &[("api/a.txt", "fn d()\n")], "d");
        commit(&d, &[("CHANGELOG.md", "- d added\n")], "d's line");
        run_git(&d, &["checkout", "-q", main]);
        run_git(
            &d,
            &["merge", "-q", "--no-ff", "-m", "merge topic", "topic"],
        );
        assert!(matches!(check(&d), Outcome::Passed(_)), "{:?}", check(&d));
        run_git(&d, &["checkout", "-q", "-b", "topic2"]);
        commit(&d, &[("api/a.txt", "fn e()\n")], "e");
        run_git(&d, &["checkout", "-q", main]);
        run_git(
            &d,
            &["merge", "-q", "--no-ff", "-m", "merge topic2", "topic2"],
        );
        match check(&d) {
            Outcome::Failed(v) => {
                assert_eq!(v.len(), 1, "{v:?}");
                assert!(v[0].contains("merge topic2 changes api/a.txt"), "{v:?}");
            }
            o => panic!("{o:?}"),
        }

        // A shallow clone lacks the base: skipped, saying why.
        let s = scratch("shallow");
        let url = format!("file://{}", d.display());
        let st = Command::new("git")
            .args(["clone", "-q", "--depth", "1", &url])
            .arg(s.join("c"))
            .status()
            .unwrap();
        assert!(st.success());
        match check(&s.join("c")) {
            Outcome::Skipped(why) => assert!(why.contains("shallow"), "{why}"),
            o => panic!("{o:?}"),
        }

        // Not a checkout at all: skipped, saying why.
        let plain = scratch("plain");
        match check(&plain) {
            Outcome::Skipped(why) => assert!(why.contains("not a git checkout"), "{why}"),
            o => panic!("{o:?}"),
        }
        for p in [d, s, plain] {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}
