//! Obtains the guest kernel: the Debian package that `linux-image-amd64` depends on, its
//! vmlinuz and the modules the test bed needs (with their dependencies from modules.dep),
//! cached under `target/vm/kernel/<package>/`.

use crate::bail;
use crate::util::{self, output, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Modules the guests load (their dependencies are added from modules.dep).
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
    "crc32_generic",
];

const META_PACKAGE: &str = "linux-image-amd64";

#[derive(Debug, Clone)]
pub struct Kernel {
    pub package: String,
    pub release: String,
    pub vmlinuz: PathBuf,
    /// The uncompressed kernel (ELF with a PVH entry point) taken out of vmlinuz: QEMU boots
    /// it directly, which saves the guest several seconds of decompression under emulation.
    pub vmlinux: Option<PathBuf>,
    /// Uncompressed module files, in load order.
    pub modules: Vec<PathBuf>,
}

/// Returns the cached kernel, downloading and preparing it when the package changed.
pub fn prepare(vm_dir: &Path) -> Result<Kernel> {
    let kdir = vm_dir.join("kernel");
    let package = match current_package() {
        Ok(p) => p,
        Err(e) => match newest_cached(&kdir) {
            Some(p) => {
                eprintln!("xtask: warning: {e}; using the cached kernel package {p}");
                p
            }
            None => bail!(
                "the guest kernel package is not obtainable: {e}\n\
                 (the test bed boots the kernel package that Debian's `{META_PACKAGE}` depends on; \
                 it needs apt's package lists: run `apt-get update` as root)"
            ),
        },
    };
    let dir = kdir.join(&package);
    if let Ok(k) = load(&dir, &package) {
        return Ok(k);
    }
    eprintln!("xtask: preparing guest kernel {package} (download and module extraction, once)");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).context(|| format!("cannot create {}", dir.display()))?;
    let res = extract(&dir, &package);
    let _ = fs::remove_dir_all(dir.join("dl"));
    if let Err(e) = res {
        let _ = fs::remove_dir_all(&dir);
        return Err(e);
    }
    // Older kernels are not needed any more.
    if let Ok(rd) = fs::read_dir(&kdir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy() != package {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    load(&dir, &package)
}

/// `apt-cache depends linux-image-amd64` → `linux-image-6.1.0-NN-amd64`.
fn current_package() -> Result<String> {
    let query = || output(Command::new("apt-cache").args(["depends", META_PACKAGE]));
    let text = match query().map(|t| parse_depends(&t)) {
        Ok(Some(p)) => return Ok(p),
        Ok(None) | Err(_) if util::is_root() && util::which("apt-get").is_some() => {
            eprintln!("xtask: apt knows no {META_PACKAGE}; running `apt-get update`");
            util::run(Command::new("apt-get").arg("update").arg("-q"))?;
            query()?
        }
        Ok(None) => bail!("`apt-cache depends {META_PACKAGE}` names no kernel package"),
        Err(e) => return Err(e),
    };
    parse_depends(&text)
        .ok_or_else(|| format!("`apt-cache depends {META_PACKAGE}` names no kernel package").into())
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

fn newest_cached(kdir: &Path) -> Option<String> {
    let mut best: Option<(std::time::SystemTime, String)> = None;
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

fn load(dir: &Path, package: &str) -> Result<Kernel> {
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
        package: package.to_string(),
        release,
        vmlinuz,
        vmlinux,
        modules,
    })
}

fn extract(dir: &Path, package: &str) -> Result<()> {
    let dl = dir.join("dl");
    fs::create_dir_all(&dl).context(|| format!("cannot create {}", dl.display()))?;
    for tool in ["apt-get", "dpkg-deb", "depmod"] {
        if util::which(tool).is_none() {
            bail!("`{tool}` is missing: it is needed to unpack the guest kernel (install apt, dpkg and kmod)");
        }
    }
    output(
        Command::new("apt-get")
            .current_dir(&dl)
            .args(["download", "-q", package]),
    )
    .context(|| format!("the guest kernel package {package} is not obtainable"))?;
    let deb = fs::read_dir(&dl)
        .context(|| format!("cannot list {}", dl.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| {
            format!(
                "`apt-get download {package}` left no .deb in {}",
                dl.display()
            )
        })?;
    let root = dl.join("root");
    util::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    let _ = fs::remove_file(&deb);

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
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
    fs::copy(&vmlinuz, dir.join("vmlinuz"))
        .context(|| format!("cannot copy {}", vmlinuz.display()))?;
    match uncompressed_kernel(&vmlinuz) {
        Ok(elf) => {
            fs::write(dir.join("vmlinux"), elf).context(|| "cannot write vmlinux".to_string())?
        }
        Err(e) => eprintln!("xtask: note: booting the compressed kernel ({e})"),
    }
    fs::write(dir.join("READY"), format!("{release}\n"))
        .context(|| "cannot mark kernel ready".to_string())?;
    Ok(())
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
fn read_module(path: &Path) -> Result<(String, Vec<u8>)> {
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

fn module_name(path: &str) -> String {
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
        let w = w.replace('-', "_");
        if !deps.contains_key(&w) && builtin.contains(&w) {
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
