//! Soft-iWARP for the guests: Debian's kernels do not build `siw` (`CONFIG_RDMA_SIW` is not
//! set), so the bed builds it out of tree for each guest kernel and caches it beside the
//! kernel (`<cache>/kernel/<suite>/<package>/siw/`).
//!
//! From the Debian registry (the kernel release's private apt state, [`crate::kernel`]), at the
//! version of the kernel package: `linux-headers-<release>` and what it depends on
//! (`linux-headers-<abi>-common`, `linux-kbuild-<x.y>`), `linux-source-<x.y>` (only
//! `drivers/infiniband/sw/siw/` is taken out of its tarball) and the kernel package itself,
//! for the modules siw needs that the guests do not load otherwise (`crc32c_generic`,
//! `libcrc32c`). The packages are unpacked into the cache, not installed; the host needs
//! `make`, the kernel's compiler (`gcc-NN`, named by `linux-compiler-gcc-NN-x86`), `strip`
//! and `modinfo`. Then `make -C <headers> M=<siw> CONFIG_RDMA_SIW=m modules`.

use crate::bail;
use crate::kernel::{self, Apt, Kernel};
use crate::packages;
use crate::util::{self, output, say, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Modules of the kernel package that siw needs, in load order. `libcrc32c` asks the crypto
/// API for `crc32c` when it loads, and nothing in the guest loads modules on demand, so
/// `crc32c_generic` comes first.
pub const KERNEL_MODULES: &[&str] = &["crc32c_generic", "libcrc32c"];

/// The cached siw modules of `kernel`, in load order (after the kernel's own modules), built
/// on first use. Progress goes to stderr.
pub fn prepare(cache: &Path, kernel: &Kernel) -> Result<Vec<PathBuf>> {
    let dir = kernel.dir().join("siw");
    if let Ok(m) = load(&dir) {
        return Ok(m);
    }
    let t = Instant::now();
    say(format!(
        "building siw.ko for guest kernel {} ({}): Debian's kernels do not build siw \
         (once; cached in {})",
        kernel.spec.name,
        kernel.release,
        dir.display()
    ));
    // Built beside the cache entry and renamed into place: two beds preparing at once (or an
    // interrupted build) never leave a half-made entry.
    let tmp = kernel.dir().join(format!("siw.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).context(|| format!("cannot create {}", tmp.display()))?;
    let res = build(cache, kernel, &tmp);
    let _ = fs::remove_dir_all(tmp.join("dl"));
    if let Err(e) = res {
        let kept = tmp.with_file_name("siw.failed");
        let _ = fs::remove_dir_all(&kept);
        let _ = fs::rename(&tmp, &kept);
        return Err(util::Error(format!(
            "cannot build siw.ko for kernel {} ({}): {e}\n(what was built is kept in {})",
            kernel.spec.name,
            kernel.release,
            kept.display()
        )));
    }
    if fs::rename(&tmp, &dir).is_err() {
        // Another bed finished first: use its build.
        let _ = fs::remove_dir_all(&tmp);
    }
    say(format!("siw.ko ready in {}", util::fmt_secs(t.elapsed())));
    load(&dir)
}

fn load(dir: &Path) -> Result<Vec<PathBuf>> {
    fs::read_to_string(dir.join("READY")).context(|| "no cached siw.ko".into())?;
    let order =
        fs::read_to_string(dir.join("modules.order")).context(|| "no siw module list".into())?;
    let mods: Vec<PathBuf> = order
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| dir.join(l))
        .collect();
    if let Some(m) = mods.iter().find(|m| !m.exists()) {
        bail!("cached siw build is incomplete: {} is missing", m.display());
    }
    Ok(mods)
}

/// A host program the build runs, and the Debian package that has it.
fn need_tools(tools: &[(&str, &str)]) -> Result<()> {
    let missing: Vec<&str> = tools
        .iter()
        .filter(|(t, _)| util::which(t).is_none())
        .map(|(_, p)| *p)
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing Debian package(s) to build siw: {}; install them as root:\n    {}\n\
             (the rxe guests do not need them)",
            missing.join(" "),
            packages::install_line(&missing)
        );
    }
    Ok(())
}

fn build(cache: &Path, kernel: &Kernel, out: &Path) -> Result<()> {
    need_tools(&[
        ("make", "make"),
        ("strip", "binutils"),
        ("modinfo", "kmod"),
        ("dpkg-deb", "dpkg"),
        ("tar", "tar"),
        ("xz", "xz-utils"),
    ])?;
    let apt = Apt::new(cache, kernel.spec.suite)?;
    let version = package_version(&apt, &kernel.package)?;
    let headers = format!("linux-headers-{}", kernel.release);
    let show = output(
        apt.cmd("apt-cache")
            .args(["show", "--no-all-versions"])
            .arg(format!("{headers}={version}")),
    )
    .context(|| {
        format!("the kernel headers {headers} {version} are not in Debian's package lists")
    })?;
    let deps = header_depends(&show);
    let compiler = compiler_of(&show).ok_or_else(|| {
        format!(
            "{headers} names no linux-compiler-gcc-NN or gcc-NN package: cannot tell its compiler"
        )
    })?;
    need_tools(&[(compiler.as_str(), compiler.as_str())]).map_err(|e| {
        util::Error(format!(
            "{e}\n(kernel {} was built with {compiler}, and siw.ko must be built with the same \
             compiler; where this machine's release has no {compiler}, see docs/testing.md, \
             \"Soft-iWARP (siw)\")",
            kernel.release
        ))
    })?;
    let source = format!("linux-source-{}", major_minor(&kernel.release)?);

    let dl = out.join("dl");
    fs::create_dir_all(&dl).context(|| format!("cannot create {}", dl.display()))?;
    let mut wanted = vec![headers.clone()];
    wanted.extend(deps);
    wanted.push(source.clone());
    wanted.push(kernel.package.clone());
    say(format!(
        "downloading {} ({version})",
        wanted
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let t = Instant::now();
    util::run(
        apt.cmd("apt-get")
            .current_dir(&dl)
            .arg("download")
            .arg("-q")
            .args(wanted.iter().map(|w| format!("{w}={version}"))),
    )
    .context(|| format!("the packages to build siw for kernel {version} are not obtainable"))?;
    let deb = |name: &str| -> Result<PathBuf> {
        fs::read_dir(&dl)
            .context(|| format!("cannot list {}", dl.display()))?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with(&format!("{name}_")))
            })
            .ok_or_else(|| util::Error(format!("`apt-get download {name}` left no .deb")))
    };
    say(format!(
        "downloaded in {}; unpacking the headers and siw's sources",
        util::fmt_secs(t.elapsed())
    ));

    // Headers and kbuild tools, unpacked (not installed) into dl/root.
    let root = dl.join("root");
    for name in wanted
        .iter()
        .filter(|w| **w != source && **w != kernel.package)
    {
        util::run(
            Command::new("dpkg-deb")
                .arg("-x")
                .arg(deb(name)?)
                .arg(&root),
        )?;
    }
    let hdir = root.join("usr/src").join(&headers);
    let mk = hdir.join("Makefile");
    let text = fs::read_to_string(&mk).context(|| format!("cannot read {}", mk.display()))?;
    // The headers' Makefile includes the -common one by its installed (absolute) path.
    let fixed = relocate_makefile(&text, &root);
    fs::write(&mk, fixed).context(|| format!("cannot write {}", mk.display()))?;

    // drivers/infiniband/sw/siw out of linux-source's tarball (one pass over ~140 MB).
    let src = dl.join("src");
    fs::create_dir_all(&src).context(|| format!("cannot create {}", src.display()))?;
    let member = format!("{source}/drivers/infiniband/sw/siw");
    let tarball = format!("./usr/src/{source}.tar.xz");
    util::run(
        Command::new("sh")
            .arg("-c")
            .arg(r#"dpkg-deb --fsys-tarfile "$1" | tar -xOf - "$2" | tar -xJf - -C "$3" "$4""#)
            .arg("sh")
            .arg(deb(&source)?)
            .arg(&tarball)
            .arg(&src)
            .arg(&member),
    )?;
    let siw_src = src.join(&member);
    if !siw_src.join("Makefile").exists() {
        bail!(
            "{source}'s {tarball} has no {member}/Makefile",
            source = source
        );
    }

    say(format!(
        "make -C {} M={} CONFIG_RDMA_SIW=m CONFIG_DEBUG_INFO_BTF_MODULES= modules ({compiler})",
        hdir.display(),
        siw_src.display()
    ));
    let log = out.join("build.log");
    let logf = fs::File::create(&log).context(|| format!("cannot create {}", log.display()))?;
    let errf = logf
        .try_clone()
        .context(|| format!("cannot write {}", log.display()))?;
    let st = Command::new("make")
        .arg("-C")
        .arg(&hdir)
        .arg(format!("M={}", siw_src.display()))
        // No BTF for the module: it would need pahole (dwarves), and the module loads without.
        .args([
            "CONFIG_RDMA_SIW=m",
            "CONFIG_DEBUG_INFO_BTF_MODULES=",
            "modules",
        ])
        .stdout(logf)
        .stderr(errf)
        .status()
        .context(|| "cannot run make".into())?;
    if !st.success() {
        let text = fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        bail!(
            "make failed ({}); the end of {}:\n{}",
            util::describe_status(st),
            log.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    util::run(
        Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(out.join("siw.ko"))
            .arg(siw_src.join("siw.ko")),
    )?;

    // crc32c_generic and libcrc32c from the kernel package itself.
    let kroot = dl.join("kernel");
    fs::create_dir_all(&kroot).context(|| format!("cannot create {}", kroot.display()))?;
    let mut patterns: Vec<String> = KERNEL_MODULES
        .iter()
        .map(|m| format!("*/{m}.ko*"))
        .collect();
    patterns.push("*/modules.builtin".into());
    util::run(
        Command::new("sh")
            .arg("-c")
            .arg(r#"f=$1; d=$2; shift 2; dpkg-deb --fsys-tarfile "$f" | tar -xf - -C "$d" --wildcards "$@""#)
            .arg("sh")
            .arg(deb(&kernel.package)?)
            .arg(&kroot)
            .args(&patterns),
    )?;
    let files = walk(&kroot);
    let builtin = files
        .iter()
        .find(|p| p.ends_with("modules.builtin"))
        .map(|p| fs::read_to_string(p).unwrap_or_default())
        .unwrap_or_default();
    let mut order = Vec::new();
    for m in KERNEL_MODULES {
        let found = files.iter().find(|p| {
            p.file_name()
                .is_some_and(|f| kernel::module_name(&f.to_string_lossy()) == *m)
        });
        match found {
            Some(p) => {
                let (name, bytes) = kernel::read_module(p)?;
                fs::write(out.join(&name), bytes)
                    .context(|| format!("cannot write module {name}"))?;
                order.push(name);
            }
            None if builtin.lines().any(|l| kernel::module_name(l) == *m) => {}
            None => bail!(
                "{} has no module {m} and does not build it in",
                kernel.package
            ),
        }
    }
    order.push("siw.ko".into());

    // Every module siw.ko depends on must be one the guest loads.
    let deps = output(
        Command::new("modinfo")
            .args(["-F", "depends"])
            .arg(out.join("siw.ko")),
    )?;
    let have: Vec<String> = kernel
        .modules
        .iter()
        .map(|p| kernel::module_name(&p.to_string_lossy()))
        .chain(order.iter().map(|o| kernel::module_name(o)))
        .collect();
    for d in deps.trim().split(',').filter(|d| !d.is_empty()) {
        if !have.iter().any(|h| h == d) {
            bail!("siw.ko depends on {d}, which the guest does not load");
        }
    }
    fs::write(out.join("modules.order"), order.join("\n") + "\n")
        .context(|| "cannot write modules.order".to_string())?;
    fs::write(out.join("READY"), format!("{} {version}\n", kernel.release))
        .context(|| "cannot mark siw ready".to_string())?;
    Ok(())
}

/// All files under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The version of `package` in the release's lists (`apt-cache show`'s first `Version:`).
fn package_version(apt: &Apt, package: &str) -> Result<String> {
    let text = output(
        apt.cmd("apt-cache")
            .args(["show", "--no-all-versions"])
            .arg(package),
    )?;
    field(&text, "Version")
        .map(str::to_string)
        .ok_or_else(|| format!("`apt-cache show {package}` gives no Version").into())
}

fn field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// The headers and kbuild packages a `linux-headers-<release>` depends on.
fn header_depends(show: &str) -> Vec<String> {
    field(show, "Depends")
        .unwrap_or("")
        .split(',')
        .filter_map(|d| d.split_whitespace().next())
        .filter(|d| d.starts_with("linux-headers-") || d.starts_with("linux-kbuild-"))
        .map(str::to_string)
        .collect()
}

/// The kernel's compiler from the headers' Depends: `linux-compiler-gcc-12-x86` (Debian 12)
/// or `gcc-14` itself (Debian 13) → `gcc-12`, `gcc-14`.
fn compiler_of(show: &str) -> Option<String> {
    field(show, "Depends")?
        .split(',')
        .filter_map(|d| d.split_whitespace().next())
        .find_map(|d| {
            let v = d
                .strip_prefix("linux-compiler-gcc-")
                .or_else(|| d.strip_prefix("gcc-"))?;
            let n = v.split('-').next()?;
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| format!("gcc-{n}"))
        })
}

/// `6.1.0-57-amd64` → `6.1`; `6.12.118+deb13-amd64` → `6.12`.
fn major_minor(release: &str) -> Result<String> {
    let mut it = release.split(|c: char| !c.is_ascii_digit());
    match (it.next(), it.next()) {
        (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => Ok(format!("{a}.{b}")),
        _ => bail!("cannot tell the kernel version of release `{release}`"),
    }
}

/// Points the headers' `include /usr/src/...` lines at the unpacked copy under `root`.
fn relocate_makefile(text: &str, root: &Path) -> String {
    text.lines()
        .map(|l| match l.strip_prefix("include /usr/src/") {
            Some(rest) => format!("include {}/usr/src/{rest}", root.display()),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW: &str = "Package: linux-headers-6.1.0-57-amd64\nVersion: 6.1.192-3\n\
        Depends: linux-headers-6.1.0-57-common (= 6.1.192-3), linux-kbuild-6.1 (>= 6.1.192-3), \
        linux-compiler-gcc-12-x86\nDescription: x\n";

    #[test]
    fn the_headers_name_their_packages_and_compiler() {
        assert_eq!(
            header_depends(SHOW),
            ["linux-headers-6.1.0-57-common", "linux-kbuild-6.1"]
        );
        assert_eq!(compiler_of(SHOW).as_deref(), Some("gcc-12"));
        assert_eq!(compiler_of("Depends: linux-kbuild-6.1\n"), None);
        let trixie = "Depends: linux-base (>= 4.12~), linux-kbuild-6.12.118+deb13, gcc-14\n";
        assert_eq!(compiler_of(trixie).as_deref(), Some("gcc-14"));
        assert_eq!(field(SHOW, "Version"), Some("6.1.192-3"));
    }

    #[test]
    fn release_to_source_version() {
        assert_eq!(major_minor("6.1.0-57-amd64").unwrap(), "6.1");
        assert_eq!(major_minor("6.12.118+deb13-amd64").unwrap(), "6.12");
        assert!(major_minor("amd64").is_err());
    }

    #[test]
    fn the_makefile_include_is_relocated() {
        let t = "include /usr/src/linux-headers-6.1.0-57-common/Makefile\n";
        assert_eq!(
            relocate_makefile(t, Path::new("/c/dl/root")),
            "include /c/dl/root/usr/src/linux-headers-6.1.0-57-common/Makefile\n"
        );
    }

    #[test]
    fn an_incomplete_cache_is_not_used() {
        let dir = std::env::temp_dir().join(format!("rverbs-testbed-siw-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        assert!(load(&dir).is_err());
        fs::write(dir.join("READY"), "6.1.0-57-amd64 6.1.192-3\n").unwrap();
        fs::write(dir.join("modules.order"), "libcrc32c.ko\nsiw.ko\n").unwrap();
        fs::write(dir.join("siw.ko"), "").unwrap();
        let e = load(&dir).unwrap_err();
        assert!(e.0.contains("libcrc32c.ko is missing"), "{e}");
        fs::write(dir.join("libcrc32c.ko"), "").unwrap();
        assert_eq!(load(&dir).unwrap().len(), 2);
        let _ = fs::remove_dir_all(&dir);
    }
}
