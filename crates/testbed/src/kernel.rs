//! Obtains a guest kernel: the Debian package that `linux-image-amd64` of a Debian release
//! depends on (6.1 of bookworm, 6.12 of trixie, the newest stable kernel of trixie-backports),
//! its vmlinuz and the modules the bed needs (with their dependencies from modules.dep), cached
//! under `<cache>/kernel/<suite>/<package>/`. From Linux 7.x Debian's `linux-image-<release>`
//! is itself a meta package: the files are in the packages of the same release it depends on
//! (`linux-binary-<release>`: vmlinuz; `linux-modules-<release>`: the modules;
//! `linux-base-<release>`: modules.builtin, config), which are fetched and unpacked together.
//! The package lists come from a private apt state per release (`<cache>/apt/<suite>/`), so
//! neither root nor the host's own sources are needed, whatever Debian release the host runs.

use crate::bail;
use crate::util::{self, output, say, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

/// Modules the guests load (their dependencies are added from modules.dep). A name ending in
/// `?` is optional: left out when the kernel has neither the module nor the built-in.
pub const WANTED_MODULES: &[&str] = &[
    // virtio PCI transport and 9p, for the shares
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    // RDMA core, user verbs, connection manager and soft-RoCE
    "ib_core",
    "ib_uverbs",
    "iw_cm",
    "ib_cm",
    "rdma_cm",
    "rdma_ucm",
    "udp_tunnel",
    "ip6_udp_tunnel",
    "rdma_rxe",
    // netdevs for the topologies; rxe computes its ICRC with the kernel's "crc32"
    "dummy",
    "veth",
    "crc32_generic?",
];

const META_PACKAGE: &str = "linux-image-amd64";
/// Package lists older than this are fetched again (a newer kernel may have been published).
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// A kernel the bed can boot: a name for the command line and the Debian release it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSpec {
    /// What `--kernel` takes: `6.1`, `6.12`, `newest`.
    pub name: &'static str,
    /// The Debian release whose `linux-image-amd64` names the package.
    pub suite: &'static str,
}

/// The kernels the bed knows, oldest first.
pub const KERNELS: &[KernelSpec] = &[
    KernelSpec {
        name: "6.1",
        suite: "bookworm",
    },
    KernelSpec {
        name: "6.12",
        suite: "trixie",
    },
    // Whatever trixie-backports' `linux-image-amd64` depends on: the newest stable kernel
    // Debian builds for Debian 13 (7.3 in December 2026). It moves forward when Debian's does;
    // the release booted is printed in every stage header and by `rverbs-vm prepare`.
    KernelSpec {
        name: "newest",
        suite: "trixie-backports",
    },
];

/// Kernels the bed boots only when asked by name (`--kernel 6.12-bpo`): not in `all`, nor in
/// the test stages. Debian 12 backports' 6.12 is built with Debian 12's compiler (gcc-12) and
/// kbuild, so siw can be built for it on a Debian 12 machine (docs/testing.md, "Soft-iWARP").
pub const EXTRA_KERNELS: &[KernelSpec] = &[KernelSpec {
    name: "6.12-bpo",
    suite: "bookworm-backports",
}];

/// The default kernel of single-guest commands (`rverbs-vm run`, `cargo xtask vm`).
pub const DEFAULT_KERNEL: KernelSpec = KERNELS[0];

impl KernelSpec {
    /// `6.1`, `6.12`, `newest`, or a release name (`bookworm`, `trixie`, `trixie-backports`).
    pub fn parse(s: &str) -> Option<KernelSpec> {
        KERNELS
            .iter()
            .chain(EXTRA_KERNELS)
            .copied()
            .find(|k| k.name == s || k.suite == s)
    }

    /// The accepted names, for messages.
    pub fn names() -> String {
        KERNELS
            .iter()
            .chain(EXTRA_KERNELS)
            .map(|k| k.name)
            .collect::<Vec<_>>()
            .join("|")
    }
}

#[derive(Debug, Clone)]
/// A prepared guest kernel in the cache.
pub struct Kernel {
    /// Which kernel it is.
    pub spec: KernelSpec,
    /// The Debian package it came from (`linux-image-6.1.0-57-amd64`).
    pub package: String,
    /// The kernel release (`uname -r` in the guest).
    pub release: String,
    /// The compressed kernel (bzImage) as the package ships it.
    pub vmlinuz: PathBuf,
    /// The uncompressed kernel (ELF with a PVH entry point) taken out of vmlinuz: QEMU boots
    /// it directly, which saves the guest several seconds of decompression under emulation.
    pub vmlinux: Option<PathBuf>,
    /// Uncompressed module files, in load order.
    pub modules: Vec<PathBuf>,
}

impl Kernel {
    /// Its directory in the cache (`<cache>/kernel/<suite>/<package>/`); things built for this
    /// kernel (siw.ko) are kept below it and go with it.
    pub fn dir(&self) -> &Path {
        self.vmlinuz.parent().unwrap_or(Path::new("."))
    }
}

/// A private apt configuration for one Debian release: its own sources.list, lists and cache.
pub(crate) struct Apt {
    dir: PathBuf,
    suite: &'static str,
}

impl Apt {
    pub(crate) fn new(cache: &Path, suite: &'static str) -> Result<Apt> {
        let dir = cache.join("apt").join(suite);
        for d in [
            "state/lists/partial",
            "cache/archives/partial",
            "parts",
            "prefs",
        ] {
            fs::create_dir_all(dir.join(d))
                .context(|| format!("cannot create {}", dir.join(d).display()))?;
        }
        if !Path::new(KEYRING).exists() {
            bail!("{KEYRING} is missing: it is needed to check Debian's package lists (install debian-archive-keyring)");
        }
        let mut list = String::new();
        for (uri, suffix) in mirrors() {
            if suffix == "-security" && suite.ends_with("-backports") {
                continue; // backports have no security suite of their own
            }
            list.push_str(&format!(
                "deb [signed-by={KEYRING}] {uri} {}{suffix} main\n",
                suite
            ));
        }
        let sources = dir.join("sources.list");
        if fs::read_to_string(&sources).ok().as_deref() != Some(list.as_str()) {
            fs::write(&sources, &list).context(|| format!("cannot write {}", sources.display()))?;
        }
        let status = dir.join("status");
        if !status.exists() {
            fs::write(&status, "").context(|| format!("cannot write {}", status.display()))?;
        }
        Ok(Apt { dir, suite })
    }

    pub(crate) fn cmd(&self, prog: &str) -> Command {
        let d = |p: &str| self.dir.join(p).to_string_lossy().into_owned();
        let mut c = Command::new(prog);
        for (k, v) in [
            ("Dir::Etc::SourceList", d("sources.list")),
            ("Dir::Etc::SourceParts", d("parts")),
            ("Dir::Etc::PreferencesParts", d("prefs")),
            ("Dir::Etc::Preferences", d("prefs/none")),
            ("Dir::State", d("state")),
            ("Dir::State::status", d("status")),
            ("Dir::Cache", d("cache")),
            ("Debug::NoLocking", "1".into()),
            ("Acquire::Languages", "none".into()),
            // Only the Packages indices: no AppStream metadata or icons (apt.conf.d may add them).
            (
                "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled",
                "false".into(),
            ),
            (
                "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled",
                "false".into(),
            ),
            (
                "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled",
                "false".into(),
            ),
            (
                "Acquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled",
                "false".into(),
            ),
            ("APT::Architecture", "amd64".into()),
            ("APT::Architectures", "amd64".into()),
        ] {
            c.arg("-o").arg(format!("{k}={v}"));
        }
        if util::is_root() {
            // Downloads into a user's cache: apt's _apt sandbox user could not write there.
            c.args(["-o", "APT::Sandbox::User=root"]);
        }
        c
    }

    /// Time since the last successful `update` (apt dates the list files by the archive's
    /// clock, so a stamp of our own says when we fetched them).
    fn lists_age(&self) -> Option<Duration> {
        let t = fs::metadata(self.dir.join("updated"))
            .ok()?
            .modified()
            .ok()?;
        SystemTime::now().duration_since(t).ok()
    }

    fn update(&self) -> Result<()> {
        let t = Instant::now();
        say(format!(
            "fetching Debian {}'s package lists (apt-get update, private state in {})",
            self.suite,
            self.dir.display()
        ));
        output(self.cmd("apt-get").args(["update", "-q"]))?;
        let _ = fs::write(self.dir.join("updated"), "");
        say(format!(
            "package lists of {} fetched in {}",
            self.suite,
            util::fmt_secs(t.elapsed())
        ));
        Ok(())
    }

    /// Fetches the package lists when there are none or they are older than a day; with
    /// lists there but the fetch failing, goes on with them (saying so).
    pub(crate) fn ensure_lists(&self) -> Result<()> {
        match self.lists_age() {
            Some(a) if a < LISTS_MAX_AGE => Ok(()),
            Some(_) => {
                if let Err(e) = self.update() {
                    say(format!("warning: {e}; using the package lists there are"));
                }
                Ok(())
            }
            None => self.update(),
        }
    }

    /// `apt-cache depends linux-image-amd64` → `linux-image-6.1.0-NN-amd64`.
    fn kernel_package(&self) -> Result<String> {
        let text = output(self.cmd("apt-cache").args(["depends", META_PACKAGE]))?;
        parse_depends(&text).ok_or_else(|| {
            format!(
                "`apt-cache depends {META_PACKAGE}` of {} names no kernel package",
                self.suite
            )
            .into()
        })
    }

    /// The packages of the same release that `package` depends on (from Linux 7.x:
    /// `linux-base-`, `linux-binary-` and `linux-modules-<release>`; none before).
    pub(crate) fn kernel_parts(&self, package: &str) -> Result<Vec<String>> {
        let text = output(self.cmd("apt-cache").args(["depends", package]))?;
        Ok(parse_parts(&text, package))
    }
}

/// The Debian mirrors the host's apt uses (`$RVERBS_TESTBED_MIRROR` first), with the suite
/// suffix each serves: the main archive ("") and, when the host names one, the security one.
fn mirrors() -> Vec<(String, &'static str)> {
    if let Ok(m) = std::env::var("RVERBS_TESTBED_MIRROR") {
        if !m.is_empty() {
            return vec![(m, "")];
        }
    }
    let mut text = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    if let Ok(rd) = fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let name = f.to_string_lossy();
            if name.ends_with(".list") || name.ends_with(".sources") {
                text.push_str(&fs::read_to_string(&f).unwrap_or_default());
                text.push('\n');
            }
        }
    }
    mirrors_from(&text)
}

fn mirrors_from(sources: &str) -> Vec<(String, &'static str)> {
    let mut main = None;
    let mut security = None;
    for line in sources.lines() {
        let line = line.trim();
        let uris: Vec<&str> = if let Some(rest) = line.strip_prefix("URIs:") {
            rest.split_whitespace().collect()
        } else if let Some(rest) = line.strip_prefix("deb ") {
            let rest = rest.trim_start();
            let rest = match rest.strip_prefix('[') {
                Some(r) => r.split_once(']').map_or("", |x| x.1),
                None => rest,
            };
            rest.split_whitespace().take(1).collect()
        } else {
            continue;
        };
        for u in uris {
            let u = u.trim_end_matches('/');
            if u.ends_with("/debian-security") {
                security.get_or_insert_with(|| u.to_string());
            } else if u.ends_with("/debian") {
                main.get_or_insert_with(|| u.to_string());
            }
        }
    }
    let mut out = vec![(
        main.unwrap_or_else(|| "http://deb.debian.org/debian".to_string()),
        "",
    )];
    if let Some(s) = security {
        out.push((s, "-security"));
    }
    out
}

/// Returns the cached kernel of `spec`, downloading and preparing it when Debian's package
/// changed. Progress goes to stderr.
pub fn prepare(cache: &Path, spec: KernelSpec) -> Result<Kernel> {
    let kdir = cache.join("kernel").join(spec.suite);
    // Kernels cached directly under kernel/ (one release only) are an older layout.
    if let Ok(rd) = fs::read_dir(cache.join("kernel")) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("linux-image-") {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let apt = Apt::new(cache, spec.suite)?;
    let fresh = apt.lists_age().is_some_and(|a| a < LISTS_MAX_AGE);
    let mut found = if fresh {
        apt.kernel_package()
    } else {
        Err("stale lists".into())
    };
    if found.is_err() {
        found = apt.update().and_then(|_| apt.kernel_package());
    }
    let package = match found {
        Ok(p) => p,
        Err(e) => match newest_cached(&kdir) {
            Some(p) => {
                say(format!("warning: {e}; using the cached kernel package {p}"));
                p
            }
            None => bail!(
                "the guest kernel {} is not obtainable: {e}\n\
                 (the bed boots the kernel package that Debian {}'s `{META_PACKAGE}` depends on, \
                 from the Debian mirror the host's apt uses or $RVERBS_TESTBED_MIRROR)",
                spec.name,
                spec.suite
            ),
        },
    };
    let dir = kdir.join(&package);
    if let Ok(k) = load(&dir, &package, spec) {
        return Ok(k);
    }
    let t = Instant::now();
    say(format!(
        "preparing guest kernel {} ({package}): download, unpack, modules (once; cached in {})",
        spec.name,
        kdir.display()
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).context(|| format!("cannot create {}", dir.display()))?;
    let res = extract(&apt, &dir, &package);
    let _ = fs::remove_dir_all(dir.join("dl"));
    if let Err(e) = res {
        let _ = fs::remove_dir_all(&dir);
        return Err(e);
    }
    // Older kernels of this release are not needed any more.
    if let Ok(rd) = fs::read_dir(&kdir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy() != package {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    say(format!(
        "guest kernel {} ready in {}",
        spec.name,
        util::fmt_secs(t.elapsed())
    ));
    load(&dir, &package, spec)
}

fn parse_depends(text: &str) -> Option<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(|p| {
            p.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
        .find(|p| p.starts_with("linux-image-"))
}

/// The `Depends:` of `apt-cache depends linux-image-<release>` that name a real package
/// `linux-<part>-<release>` (alternatives and virtual packages, `<...>`, are left out).
fn parse_parts(text: &str, package: &str) -> Vec<String> {
    let Some(release) = package.strip_prefix("linux-image-") else {
        return Vec::new();
    };
    let suffix = format!("-{release}");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends:"))
        .map(str::trim)
        .filter(|p| p.starts_with("linux-") && p.ends_with(&suffix) && *p != package)
        .map(str::to_string)
        .collect()
}

fn newest_cached(kdir: &Path) -> Option<String> {
    let mut best: Option<(SystemTime, String)> = None;
    for e in fs::read_dir(kdir).ok()?.flatten() {
        if e.path().join("READY").exists() {
            let t = e.metadata().and_then(|m| m.modified()).ok()?;
            if best.as_ref().map_or(true, |b| t > b.0) {
                best = Some((t, e.file_name().to_string_lossy().into_owned()));
            }
        }
    }
    best.map(|b| b.1)
}

fn load(dir: &Path, package: &str, spec: KernelSpec) -> Result<Kernel> {
    let ready = fs::read_to_string(dir.join("READY")).context(|| "no cached kernel".into())?;
    let release = ready.trim().to_string();
    let order =
        fs::read_to_string(dir.join("modules.order")).context(|| "no module list".into())?;
    let modules = order
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| dir.join("modules").join(l))
        .collect::<Vec<_>>();
    let vmlinuz = dir.join("vmlinuz");
    for p in modules.iter().chain([&vmlinuz]) {
        if !p.exists() {
            bail!("cached kernel is incomplete: {} is missing", p.display());
        }
    }
    let vmlinux = Some(dir.join("vmlinux")).filter(|p| p.exists());
    Ok(Kernel {
        spec,
        package: package.to_string(),
        release,
        vmlinuz,
        vmlinux,
        modules,
    })
}

fn extract(apt: &Apt, dir: &Path, package: &str) -> Result<()> {
    let dl = dir.join("dl");
    fs::create_dir_all(&dl).context(|| format!("cannot create {}", dl.display()))?;
    for tool in ["apt-get", "dpkg-deb", "depmod", "xz"] {
        if util::which(tool).is_none() {
            bail!("`{tool}` is missing: it is needed to unpack the guest kernel (install apt, dpkg, kmod and xz-utils)");
        }
    }
    let parts = apt.kernel_parts(package)?;
    let mut packages = vec![package.to_string()];
    packages.extend(parts);
    say(format!(
        "downloading {} (apt-get download)",
        packages.join(", ")
    ));
    let t = Instant::now();
    util::run(
        apt.cmd("apt-get")
            .current_dir(&dl)
            .arg("download")
            .args(&packages),
    )
    .context(|| format!("the guest kernel package {package} is not obtainable"))?;
    let mut debs: Vec<PathBuf> = fs::read_dir(&dl)
        .context(|| format!("cannot list {}", dl.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    debs.sort();
    if debs.len() != packages.len() {
        bail!(
            "`apt-get download {}` left {} .deb file(s) in {}, not {}",
            packages.join(" "),
            debs.len(),
            dl.display(),
            packages.len()
        );
    }
    say(format!(
        "downloaded {} package(s) in {}; unpacking",
        debs.len(),
        util::fmt_secs(t.elapsed())
    ));
    let root = dl.join("root");
    for deb in &debs {
        util::run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))?;
        let _ = fs::remove_file(deb);
    }

    let (base, moddir) = ["lib/modules", "usr/lib/modules"]
        .iter()
        .find_map(|m| {
            let d = root.join(m);
            let release = fs::read_dir(&d).ok()?.flatten().next()?.file_name();
            Some((
                m.trim_end_matches("/modules").trim_end_matches("lib"),
                d.join(release),
            ))
        })
        .ok_or_else(|| format!("{package} contains no lib/modules/<release> directory"))?;
    let release = moddir
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    if !moddir.join("modules.dep").exists() {
        // Debian's package ships no modules.dep (postinst runs depmod); make one here.
        let mut cmd = Command::new(util::which("depmod").unwrap_or("depmod".into()));
        cmd.arg("-b").arg(root.join(base)).arg(&release);
        output(&mut cmd)?;
    }
    let dep_text = fs::read_to_string(moddir.join("modules.dep"))
        .context(|| format!("cannot read modules.dep of {package}"))?;
    let builtin = fs::read_to_string(moddir.join("modules.builtin")).unwrap_or_default();
    let order = resolve(&dep_text, &builtin, WANTED_MODULES)?;

    say(format!(
        "{} modules for the guests (with their dependencies), decompressed",
        order.len()
    ));
    let out = dir.join("modules");
    fs::create_dir_all(&out).context(|| format!("cannot create {}", out.display()))?;
    let mut names = Vec::new();
    for rel in &order {
        let (name, bytes) = read_module(&moddir.join(rel))?;
        fs::write(out.join(&name), bytes).context(|| format!("cannot write module {name}"))?;
        names.push(name);
    }
    fs::write(dir.join("modules.order"), names.join("\n") + "\n")
        .context(|| "cannot write modules.order".to_string())?;
    let vmlinuz = vmlinuz_in(&root, &moddir, &release)
        .ok_or_else(|| format!("{package} and its parts contain no vmlinuz of {release}"))?;
    fs::copy(&vmlinuz, dir.join("vmlinuz"))
        .context(|| format!("cannot copy {}", vmlinuz.display()))?;
    match uncompressed_kernel(&vmlinuz) {
        Ok(elf) => {
            fs::write(dir.join("vmlinux"), elf).context(|| "cannot write vmlinux".to_string())?
        }
        Err(e) => say(format!("note: booting the compressed kernel ({e})")),
    }
    fs::write(dir.join("READY"), format!("{release}\n"))
        .context(|| "cannot mark kernel ready".to_string())?;
    Ok(())
}

/// The kernel image: `/boot/vmlinuz-<release>` (Debian's packages up to 6.x) or
/// `/usr/lib/modules/<release>/vmlinuz` (`linux-binary-<release>`, from 7.x).
fn vmlinuz_in(root: &Path, moddir: &Path, release: &str) -> Option<PathBuf> {
    [
        root.join("boot").join(format!("vmlinuz-{release}")),
        moddir.join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Takes the kernel ELF out of a bzImage (the payload is the first xz or zstd stream) and
/// checks that it has a PVH entry point, which QEMU needs to boot an ELF kernel.
fn uncompressed_kernel(bzimage: &Path) -> Result<Vec<u8>> {
    let data = fs::read(bzimage).context(|| format!("cannot read {}", bzimage.display()))?;
    let find = |magic: &[u8]| data.windows(magic.len()).position(|w| w == magic);
    let (at, tool, args): (usize, &str, &[&str]) = if let Some(at) = find(b"\xfd7zXZ\x00") {
        (at, "xz", &["-dc", "--single-stream"])
    } else if let Some(at) = find(b"\x28\xb5\x2f\xfd") {
        (at, "zstd", &["-dc"])
    } else {
        bail!("no xz or zstd payload found in {}", bzimage.display());
    };
    let mut child = Command::new(tool)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context(|| format!("cannot run `{tool}`"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let payload = data[at..].to_vec();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        // zstd stops reading at the end of its frame; a broken pipe then is expected.
        let _ = stdin.write_all(&payload);
    });
    let out = child
        .wait_with_output()
        .context(|| format!("`{tool}` failed"))?;
    let _ = feeder.join();
    let elf = out.stdout;
    if !util::elf_has_pvh_entry(&elf) {
        bail!(
            "the kernel inside {} has no PVH entry point",
            bzimage.display()
        );
    }
    Ok(elf)
}

/// Reads a module file, decompressing `.ko.xz`/`.ko.zst`/`.ko.gz` with the usual tools
/// (busybox's insmod in the guest is not trusted to handle every compression).
pub(crate) fn read_module(path: &Path) -> Result<(String, Vec<u8>)> {
    let file = path
        .file_name()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned();
    let (stem, tool) = if let Some(s) = file.strip_suffix(".xz") {
        (s, Some("xz"))
    } else if let Some(s) = file.strip_suffix(".zst") {
        (s, Some("zstd"))
    } else if let Some(s) = file.strip_suffix(".gz") {
        (s, Some("gzip"))
    } else {
        (file.as_str(), None)
    };
    let bytes = match tool {
        None => fs::read(path).context(|| format!("cannot read {}", path.display()))?,
        Some(t) => {
            let out = Command::new(t).arg("-dc").arg(path).output().context(|| {
                format!(
                    "cannot run `{t}` to decompress {} (install it)",
                    path.display()
                )
            })?;
            if !out.status.success() {
                bail!("`{t} -dc {}` failed", path.display());
            }
            out.stdout
        }
    };
    Ok((stem.to_string(), bytes))
}

pub(crate) fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

/// Orders the wanted modules and everything they depend on (per modules.dep) so that each
/// module comes after its dependencies. Returns paths relative to the modules directory.
/// Modules built into the kernel are left out; a wanted module that is neither a module nor
/// built in is an error.
pub fn resolve(modules_dep: &str, modules_builtin: &str, wanted: &[&str]) -> Result<Vec<String>> {
    let mut deps: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for line in modules_dep.lines() {
        let Some((m, rest)) = line.split_once(':') else {
            continue;
        };
        let d = rest.split_whitespace().map(module_name).collect();
        deps.insert(module_name(m), (m.trim().to_string(), d));
    }
    let builtin: BTreeSet<String> = modules_builtin.lines().map(module_name).collect();
    let mut order = Vec::new();
    let mut done = BTreeSet::new();
    fn visit(
        name: &str,
        deps: &BTreeMap<String, (String, Vec<String>)>,
        done: &mut BTreeSet<String>,
        order: &mut Vec<String>,
        stack: &mut Vec<String>,
    ) -> Result<()> {
        if done.contains(name) {
            return Ok(());
        }
        if stack.iter().any(|s| s == name) {
            bail!("modules.dep has a dependency cycle through {name}");
        }
        let Some((path, ds)) = deps.get(name) else {
            bail!(
                "module {name} (needed by {}) is not in modules.dep",
                stack.last().map_or("the test bed", |s| s)
            );
        };
        stack.push(name.to_string());
        for d in ds {
            visit(d, deps, done, order, stack)?;
        }
        stack.pop();
        done.insert(name.to_string());
        order.push(path.clone());
        Ok(())
    }
    for w in wanted {
        let (w, optional) = match w.strip_suffix('?') {
            Some(w) => (w, true),
            None => (*w, false),
        };
        let w = w.replace('-', "_");
        if !deps.contains_key(&w) && (builtin.contains(&w) || optional) {
            continue;
        }
        if !deps.contains_key(&w) {
            bail!("the kernel has no module {w}, and it is not built in either");
        }
        visit(&w, &deps, &mut done, &mut order, &mut Vec::new())?;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/net/9p/9pnet.ko:
kernel/drivers/net/dummy.ko:
";

    #[test]
    fn dependencies_come_first() {
        let order = resolve(
            DEP,
            "kernel/crypto/crc32_generic.ko\n",
            &["virtio_pci", "9pnet-virtio", "crc32_generic", "dummy"],
        )
        .unwrap();
        assert_eq!(
            order,
            [
                "kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
                "kernel/drivers/virtio/virtio_ring.ko",
                "kernel/drivers/virtio/virtio.ko",
                "kernel/drivers/virtio/virtio_pci.ko",
                "kernel/net/9p/9pnet.ko",
                "kernel/net/9p/9pnet_virtio.ko.xz",
                "kernel/drivers/net/dummy.ko",
            ]
        );
        let pos = |m: &str| order.iter().position(|o| o.contains(m)).unwrap();
        assert!(pos("virtio_ring") < pos("/virtio.ko"));
    }

    #[test]
    fn missing_module_is_named() {
        let e = resolve(DEP, "", &["rdma_rxe"]).unwrap_err();
        assert!(e.0.contains("rdma_rxe"), "{e}");
        let e = resolve("a.ko: b.ko\n", "", &["a"]).unwrap_err();
        assert!(
            e.0.contains("module b") && e.0.contains("needed by a"),
            "{e}"
        );
    }

    #[test]
    fn mirrors_come_from_the_hosts_sources() {
        let deb822 = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n\n\
                      Types: deb\nURIs: http://security.example/debian-security/\n";
        assert_eq!(
            mirrors_from(deb822),
            [
                ("http://deb.debian.org/debian".to_string(), ""),
                (
                    "http://security.example/debian-security".to_string(),
                    "-security"
                )
            ]
        );
        let one_line =
            "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n\
                        deb https://packages.cloud.google.com/apt cloud-sdk main\n";
        assert_eq!(
            mirrors_from(one_line),
            [("http://m.example/debian".to_string(), "")]
        );
        assert_eq!(mirrors_from("")[0].0, "http://deb.debian.org/debian");
    }

    #[test]
    fn the_cache_is_used_only_when_complete() {
        let dir =
            std::env::temp_dir().join(format!("rverbs-testbed-kcache-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let k = dir.join("linux-image-6.12.1-amd64");
        fs::create_dir_all(k.join("modules")).unwrap();
        let spec = KernelSpec::parse("6.12").unwrap();
        // Not READY: not a cached kernel (a download was interrupted).
        assert!(load(&k, "linux-image-6.12.1-amd64", spec).is_err());
        assert_eq!(newest_cached(&dir), None);
        fs::write(k.join("READY"), "6.12.1-amd64\n").unwrap();
        fs::write(k.join("modules.order"), "rdma_rxe.ko\n").unwrap();
        fs::write(k.join("vmlinuz"), "").unwrap();
        let e = load(&k, "linux-image-6.12.1-amd64", spec).unwrap_err();
        assert!(e.0.contains("rdma_rxe.ko is missing"), "{e}");
        fs::write(k.join("modules/rdma_rxe.ko"), "").unwrap();
        let got = load(&k, "linux-image-6.12.1-amd64", spec).unwrap();
        assert_eq!(
            (got.release.as_str(), got.modules.len()),
            ("6.12.1-amd64", 1)
        );
        assert_eq!(
            newest_cached(&dir).as_deref(),
            Some("linux-image-6.12.1-amd64")
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn optional_modules_may_be_absent() {
        assert_eq!(
            resolve(DEP, "", &["dummy", "crc32_generic?"]).unwrap(),
            ["kernel/drivers/net/dummy.ko"]
        );
        assert!(resolve(DEP, "", &["crc32_generic"]).is_err());
        assert_eq!(KernelSpec::parse("trixie"), KernelSpec::parse("6.12"));
        assert_eq!(KernelSpec::parse("5.10"), None);
        assert_eq!(
            KernelSpec::parse("6.12-bpo").map(|k| k.suite),
            Some("bookworm-backports")
        );
        assert!(!KERNELS.iter().any(|k| k.name == "6.12-bpo"), "opt-in only");
        assert_eq!(
            KernelSpec::parse("newest").map(|k| k.suite),
            Some("trixie-backports")
        );
    }

    /// `apt-cache depends linux-image-amd64`, then `apt-cache depends` of what it names, as
    /// trixie-backports answered on 2026-12-06 (7.3.4: the image package is a meta package).
    const BPO_META: &str = "\
linux-image-amd64
  Depends: linux-base-amd64
  Depends: linux-image-7.3.4+deb13-amd64
  Depends: linux-modules-amd64
";
    const BPO_IMAGE: &str = "\
linux-image-7.3.4+deb13-amd64
  PreDepends: linux-base
 |Depends: <dracut>
 |Depends: <initramfs-tools>
  Depends: <linux-initramfs-tool>
  Depends: linux-base-7.3.4+deb13-amd64
  Depends: linux-binary-7.3.4+deb13-amd64
  Depends: linux-modules-7.3.4+deb13-amd64
  Breaks: <fwupdate>
  Breaks: <initramfs-tools>
  Recommends: <apparmor>
  Suggests: linux-doc-7.3
";
    /// The same for trixie's 6.12 (2026-12-06): one package holds everything.
    const TRIXIE_IMAGE: &str = "\
linux-image-6.12.118+deb13-amd64
  PreDepends: linux-base
  Depends: kmod
 |Depends: initramfs-tools
  Depends: <linux-initramfs-tool>
    dracut
    initramfs-tools
    tiny-initramfs
  Conflicts: linux-image-6.12.118+deb13-amd64-unsigned
  Suggests: linux-doc-6.12
  Replaces: linux-image-6.12.118+deb13-amd64-unsigned
";

    #[test]
    fn a_split_kernel_package_names_its_parts() {
        let image = parse_depends(BPO_META).unwrap();
        assert_eq!(image, "linux-image-7.3.4+deb13-amd64");
        assert_eq!(
            parse_parts(BPO_IMAGE, &image),
            [
                "linux-base-7.3.4+deb13-amd64",
                "linux-binary-7.3.4+deb13-amd64",
                "linux-modules-7.3.4+deb13-amd64"
            ]
        );
        // 6.x: no parts (`-unsigned` is a Conflicts/Replaces, `linux-base` has no release).
        assert!(parse_parts(TRIXIE_IMAGE, "linux-image-6.12.118+deb13-amd64").is_empty());
        assert!(parse_parts(BPO_IMAGE, "not-a-kernel").is_empty());
    }

    /// modules.dep of 7.3.4 (2026-12-06), the lines the bed needs: `ib_uverbs_support` sits
    /// between ib_core and ib_uverbs, virtio_pci is built in (listed in linux-base's
    /// modules.builtin), and crc32_generic is gone (rxe uses the crc32 library).
    const DEP_7_3: &str = "\
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/net/9p/9pnet.ko.xz: kernel/fs/netfs/netfs.ko.xz
kernel/fs/netfs/netfs.ko.xz:
kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/drivers/infiniband/core/ib_core.ko.xz:
kernel/drivers/infiniband/core/ib_uverbs_support.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/ib_uverbs.ko.xz: kernel/drivers/infiniband/core/ib_uverbs_support.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/iw_cm.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/ib_cm.ko.xz: kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/fs/configfs/configfs.ko.xz:
kernel/drivers/infiniband/core/rdma_cm.ko.xz: kernel/drivers/infiniband/core/iw_cm.ko.xz kernel/drivers/infiniband/core/ib_cm.ko.xz kernel/fs/configfs/configfs.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/infiniband/core/rdma_ucm.ko.xz: kernel/drivers/infiniband/core/ib_uverbs.ko.xz kernel/drivers/infiniband/core/ib_uverbs_support.ko.xz kernel/drivers/infiniband/core/rdma_cm.ko.xz kernel/drivers/infiniband/core/iw_cm.ko.xz kernel/drivers/infiniband/core/ib_cm.ko.xz kernel/fs/configfs/configfs.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/net/ipv4/udp_tunnel.ko.xz:
kernel/net/ipv6/ip6_udp_tunnel.ko.xz:
kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko.xz: kernel/net/ipv6/ip6_udp_tunnel.ko.xz kernel/net/ipv4/udp_tunnel.ko.xz kernel/drivers/infiniband/core/ib_core.ko.xz
kernel/drivers/net/dummy.ko.xz:
kernel/drivers/net/veth.ko.xz:
";

    #[test]
    fn the_newest_kernels_modules_resolve_with_ib_uverbs_support_first() {
        let builtin = "kernel/drivers/virtio/virtio_pci.ko\nkernel/lib/crc/crc32.ko\n";
        let order = resolve(DEP_7_3, builtin, WANTED_MODULES).unwrap();
        let names: Vec<String> = order.iter().map(|p| module_name(p)).collect();
        let pos = |m: &str| names.iter().position(|n| n == m).unwrap();
        assert!(pos("ib_core") < pos("ib_uverbs_support"), "{names:?}");
        assert!(pos("ib_uverbs_support") < pos("ib_uverbs"), "{names:?}");
        assert!(pos("netfs") < pos("9pnet"), "{names:?}");
        assert!(!names
            .iter()
            .any(|n| n == "virtio_pci" || n == "crc32_generic"));
        assert_eq!(names.len(), 17, "{names:?}");
        // Without linux-base's modules.builtin, the built-in virtio_pci is an error, named.
        let e = resolve(DEP_7_3, "", WANTED_MODULES).unwrap_err();
        assert!(e.0.contains("virtio_pci"), "{e}");
    }

    #[test]
    fn vmlinuz_is_found_in_boot_or_beside_the_modules() {
        let dir =
            std::env::temp_dir().join(format!("rverbs-testbed-vmlinuz-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let moddir = dir.join("usr/lib/modules/7.3.4+deb13-amd64");
        fs::create_dir_all(&moddir).unwrap();
        assert_eq!(vmlinuz_in(&dir, &moddir, "7.3.4+deb13-amd64"), None);
        fs::write(moddir.join("vmlinuz"), "").unwrap();
        assert_eq!(
            vmlinuz_in(&dir, &moddir, "7.3.4+deb13-amd64"),
            Some(moddir.join("vmlinuz"))
        );
        fs::create_dir_all(dir.join("boot")).unwrap();
        fs::write(dir.join("boot/vmlinuz-7.3.4+deb13-amd64"), "").unwrap();
        assert_eq!(
            vmlinuz_in(&dir, &moddir, "7.3.4+deb13-amd64"),
            Some(dir.join("boot/vmlinuz-7.3.4+deb13-amd64"))
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn depends_output() {
        let t = "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n";
        assert_eq!(
            parse_depends(t).as_deref(),
            Some("linux-image-6.1.0-57-amd64")
        );
        assert_eq!(parse_depends("linux-image-amd64\n"), None);
        assert_eq!(
            module_name("kernel/net/9p/9pnet_virtio.ko.xz"),
            "9pnet_virtio"
        );
    }
}
