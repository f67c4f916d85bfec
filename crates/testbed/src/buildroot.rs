//! A Debian build root: the compiler and tools of one Debian release, unpacked from Debian's
//! archive into the cache (`<cache>/buildroot/<release>/`), for building kernel modules for a
//! guest kernel of another Debian release than the host's. Debian 13's kernels (6.12 and
//! trixie-backports' newest) need gcc-14 and kbuild tools linked against glibc 2.38, which a
//! Debian 12 host has not; in a Debian 13 root they build as on Debian 13 itself.
//!
//! The root is made without root privileges and without running any package's scripts:
//! `apt-get install --download-only` with the release's private apt state ([`Apt`], an empty
//! dpkg status, so apt resolves the whole closure) into a scratch directory, then `dpkg-deb -x`
//! of every package. Then what the packages' scripts would have made and a build needs: the
//! merged-/usr links (`bin`, `lib`, `lib64`, `sbin` → `usr/…`) where the packages did not ship
//! those directories, `awk` → `mawk` (an alternative, made by mawk's postinst), and `dev/`,
//! `proc/`, `tmp/`. Documentation and translations are left out. About 52 packages, 66 MB to
//! download, 200 MB unpacked for trixie's gcc-14.
//!
//! A build runs in a copy of the root ([`copy`]: hard links, so no second 200 MB) with the
//! kernel's headers unpacked into it, through [`command`]: `unshare -m` (a private mount
//! namespace: nothing stays mounted on the host, however the build ends; `unshare -r -m` when
//! not root), `/dev/null` and `/proc` bound in (kbuild redirects to /dev/null, objtool reads
//! /proc), then `chroot` with a clean environment.

use crate::bail;
use crate::kernel::Apt;
use crate::util::{self, output, say, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// What every build root has besides the compiler and the packages a build asks for: what
/// kbuild runs (make, the binutils, a POSIX shell and the usual text tools).
pub(crate) const TOOLS: &[&str] = &[
    "make",
    "binutils",
    "coreutils",
    "dash",
    "sed",
    "grep",
    "mawk",
    "findutils",
    "diffutils",
];

/// The cached build root of `suite` that has at least `packages` (and [`TOOLS`]); made (or
/// made again, with the union of what it had and what is asked now) when it has not. Returns
/// the root directory.
pub(crate) fn prepare(cache: &Path, suite: &'static str, packages: &[String]) -> Result<PathBuf> {
    let mut wanted: Vec<String> = TOOLS.iter().map(|t| t.to_string()).collect();
    wanted.extend(packages.iter().cloned());
    prepare_in(cache, "buildroot", "build root", suite, wanted, &[])
}

/// The cached root `<cache>/<kind>/<suite>/root` of `suite` with at least `wanted` (see
/// [`prepare`]); `what` names it in messages; the documentation directories of `keep_docs`
/// (packages under `usr/share/doc`) stay, every other one goes.
pub(crate) fn prepare_in(
    cache: &Path,
    kind: &str,
    what: &str,
    suite: &'static str,
    mut wanted: Vec<String>,
    keep_docs: &[&str],
) -> Result<PathBuf> {
    let dir = cache.join(kind).join(suite);
    let had = fs::read_to_string(dir.join("READY")).ok();
    if let Some(had) = &had {
        if wanted.iter().all(|w| had.lines().any(|l| l == w)) && dir.join("root").is_dir() {
            return Ok(dir.join("root"));
        }
        // Asked for more than it has: made again with everything.
        wanted.extend(had.lines().filter(|l| !l.is_empty()).map(str::to_string));
    }
    wanted.sort();
    wanted.dedup();
    let t = Instant::now();
    say(format!(
        "making a Debian {suite} {what} ({}; once; cached in {})",
        wanted.join(" "),
        dir.display()
    ));
    let tmp = cache
        .join(kind)
        .join(format!("{suite}.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    let res = make(cache, suite, &wanted, &tmp, keep_docs);
    let _ = fs::remove_dir_all(tmp.join("debs"));
    if let Err(e) = res {
        let _ = fs::remove_dir_all(&tmp);
        return Err(util::Error(format!(
            "cannot make the Debian {suite} {what}: {e}"
        )));
    }
    // The old root (if any) goes; a bed copying from it at this moment fails its build, which
    // says so, rather than using a half-removed root.
    let _ = fs::remove_dir_all(&dir);
    if fs::rename(&tmp, &dir).is_err() {
        // Another bed finished first: use its root.
        let _ = fs::remove_dir_all(&tmp);
    }
    say(format!(
        "Debian {suite} {what} ready in {}",
        util::fmt_secs(t.elapsed())
    ));
    if !dir.join("READY").exists() {
        bail!(
            "the Debian {suite} {what} in {} is not ready",
            dir.display()
        );
    }
    Ok(dir.join("root"))
}

fn make(
    cache: &Path,
    suite: &'static str,
    wanted: &[String],
    out: &Path,
    keep_docs: &[&str],
) -> Result<()> {
    for (tool, package) in [("apt-get", "apt"), ("dpkg-deb", "dpkg")] {
        if util::which(tool).is_none() {
            bail!("`{tool}` is missing: it is needed to make a build root (install {package})");
        }
    }
    let apt = Apt::new(cache, suite)?;
    apt.ensure_lists()?;
    let debs = out.join("debs");
    fs::create_dir_all(debs.join("partial"))
        .context(|| format!("cannot create {}", debs.display()))?;
    let t = Instant::now();
    output(
        apt.cmd("apt-get")
            .args(["install", "--download-only", "-y", "-q"])
            .arg("--no-install-recommends")
            .arg("-o")
            .arg(format!("Dir::Cache::archives={}", debs.display()))
            .args(wanted),
    )
    .context(|| format!("the packages of the build root are not obtainable from {suite}"))?;
    let mut files: Vec<PathBuf> = fs::read_dir(&debs)
        .context(|| format!("cannot list {}", debs.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "`apt-get install --download-only` left no .deb in {}",
            debs.display()
        );
    }
    let bytes: u64 = files
        .iter()
        .filter_map(|f| f.metadata().ok())
        .map(|m| m.len())
        .sum();
    say(format!(
        "downloaded {} packages ({} MB) in {}; unpacking",
        files.len(),
        bytes / 1_000_000,
        util::fmt_secs(t.elapsed())
    ));
    let root = out.join("root");
    fs::create_dir_all(&root).context(|| format!("cannot create {}", root.display()))?;
    for f in &files {
        util::run(Command::new("dpkg-deb").arg("-x").arg(f).arg(&root))?;
    }
    finish(&root, keep_docs)?;
    let mut musts = vec![("a shell", "usr/bin/sh"), ("env", "usr/bin/env")];
    if wanted.iter().any(|w| w == "make") {
        musts.extend([("make", "usr/bin/make"), ("awk", "usr/bin/awk")]);
    }
    for (what, path) in musts {
        if fs::symlink_metadata(root.join(path)).is_err() {
            bail!("the root has no {what} ({path})");
        }
    }
    let mut ready = wanted.join("\n");
    ready.push('\n');
    fs::write(out.join("READY"), ready).context(|| "cannot mark the build root ready".into())?;
    Ok(())
}

/// What the packages' scripts would have made, and the mount points (`dev`, `proc`, `sys`,
/// `tmp`, `run`, and `host`, where a guest binds its own root); docs (but `keep_docs`' of
/// `usr/share/doc`) and translations out.
fn finish(root: &Path, keep_docs: &[&str]) -> Result<()> {
    for d in ["usr/share/man", "usr/share/info", "usr/share/locale"] {
        let _ = fs::remove_dir_all(root.join(d));
    }
    if let Ok(docs) = fs::read_dir(root.join("usr/share/doc")) {
        for e in docs.flatten() {
            if !keep_docs.iter().any(|k| e.file_name() == *k) {
                let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
            }
        }
    }
    if keep_docs.is_empty() {
        let _ = fs::remove_dir_all(root.join("usr/share/doc"));
    }
    for l in ["bin", "lib", "lib64", "sbin"] {
        if fs::symlink_metadata(root.join(l)).is_err() && root.join("usr").join(l).is_dir() {
            std::os::unix::fs::symlink(format!("usr/{l}"), root.join(l))
                .context(|| format!("cannot link {l} in the build root"))?;
        }
    }
    let awk = root.join("usr/bin/awk");
    if fs::symlink_metadata(&awk).is_err() && root.join("usr/bin/mawk").exists() {
        std::os::unix::fs::symlink("mawk", &awk).context(|| "cannot link awk".into())?;
    }
    for d in ["dev", "proc", "sys", "tmp", "run", "host"] {
        fs::create_dir_all(root.join(d)).context(|| format!("cannot create {d} in the root"))?;
    }
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777))
        .context(|| "cannot make the root's tmp writable".into())?;
    // The mount point of the host's /dev/null.
    fs::write(root.join("dev/null"), "").context(|| "cannot create dev/null".into())?;
    Ok(())
}

/// A copy of `root` at `to` to build in (hard links where `to` is on the same file system: the
/// build writes new files only, and dpkg-deb replaces a file rather than writing into it).
pub(crate) fn copy(root: &Path, to: &Path) -> Result<()> {
    let _ = fs::remove_dir_all(to);
    if util::output(Command::new("cp").arg("-al").arg(root).arg(to)).is_ok() {
        return Ok(());
    }
    let _ = fs::remove_dir_all(to);
    util::run(Command::new("cp").arg("-a").arg(root).arg(to))
        .context(|| format!("cannot copy the build root {}", root.display()))
}

/// The host programs [`command`] runs, and their Debian packages.
pub(crate) const HOST_TOOLS: &[(&str, &str)] = &[
    ("unshare", "util-linux"),
    ("mount", "mount"),
    ("chroot", "coreutils"),
    ("cp", "coreutils"),
];

/// `args` run in `root` (a [`copy`]): in a private mount namespace with the host's /dev/null
/// and /proc bound in, `chroot`ed, with a clean environment (`PATH` of the root, `LANG=C.UTF-8`).
pub(crate) fn command<S: AsRef<std::ffi::OsStr>>(root: &Path, args: &[S]) -> Command {
    let mut c = Command::new("unshare");
    if !util::is_root() {
        // A user namespace in which this user is root: mounts and chroot are allowed there.
        c.arg("-r");
    }
    c.arg("-m")
        .arg("sh")
        .arg("-c")
        .arg(
            r#"r=$1; shift
mount --bind /dev/null "$r/dev/null" && mount --rbind /proc "$r/proc" &&
exec chroot "$r" /usr/bin/env -i PATH=/usr/bin:/usr/sbin:/bin:/sbin LANG=C.UTF-8 HOME=/ "$@""#,
        )
        .arg("sh")
        .arg(root)
        .args(args);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_gets_what_package_scripts_would_make() {
        let dir = std::env::temp_dir().join(format!("rverbs-testbed-br-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        // A trixie-like tree: everything under usr/, mawk but no awk, docs.
        for d in [
            "usr/bin",
            "usr/lib/x86_64-linux-gnu",
            "usr/share/doc/make",
            "etc",
        ] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        fs::write(dir.join("usr/bin/mawk"), "").unwrap();
        // A bookworm-like one has /bin itself: left as it is.
        fs::create_dir_all(dir.join("sbin")).unwrap();
        finish(&dir, &[]).unwrap();
        assert_eq!(
            fs::read_link(dir.join("bin")).unwrap(),
            Path::new("usr/bin")
        );
        assert_eq!(
            fs::read_link(dir.join("lib")).unwrap(),
            Path::new("usr/lib")
        );
        assert!(
            fs::symlink_metadata(dir.join("lib64")).is_err(),
            "no usr/lib64"
        );
        assert!(!fs::symlink_metadata(dir.join("sbin")).unwrap().is_symlink());
        assert_eq!(
            fs::read_link(dir.join("usr/bin/awk")).unwrap(),
            Path::new("mawk")
        );
        assert!(!dir.join("usr/share/doc").exists());
        assert!(dir.join("dev/null").is_file() && dir.join("proc").is_dir());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.join("tmp")).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o1777);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn commands_run_chrooted_in_a_private_mount_namespace() {
        let c = command(Path::new("/r"), &["make", "-C", "/usr/src/x"]);
        assert_eq!(c.get_program(), "unshare");
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let m = args.iter().position(|a| a == "-m").unwrap();
        assert_eq!(&args[m + 1..m + 3], ["sh", "-c"]);
        assert!(args[m + 3].contains(r#"exec chroot "$r" /usr/bin/env -i"#));
        assert_eq!(&args[m + 4..], ["sh", "/r", "make", "-C", "/usr/src/x"]);
    }
}
