//! Soft-iWARP for the guests: Debian's kernels do not build `siw` (`CONFIG_RDMA_SIW` is not
//! set), so the bed builds it out of tree for each guest kernel and caches it beside the
//! kernel (`<cache>/kernel/<suite>/<package>/siw/`).
//!
//! From the Debian registry (the kernel release's private apt state, [`crate::kernel`]), at the
//! version of the kernel package: `linux-headers-<release>` and what it depends on
//! (`linux-headers-<abi>-common`, `linux-kbuild-<x.y>`) and `linux-source-<x.y>` (only
//! `drivers/infiniband/sw/siw/` is taken out of its tarball); where siw.ko depends on
//! `libcrc32c` (up to 6.x), also the kernel package itself, for the modules siw needs that the
//! guests do not load otherwise (`crc32c_generic`, `libcrc32c`). The packages are unpacked,
//! not installed. Then `make -C <headers> M=<siw> CONFIG_RDMA_SIW=m modules`: for a kernel of
//! the host's Debian release with the host's tools (`make`, the kernel's compiler `gcc-NN`,
//! `strip`), for any other (Debian 13's 6.12 and trixie-backports' newest kernel on a Debian 12
//! host) in a build root of the kernel's release made from Debian's archive (`buildroot.rs`:
//! its compiler, make, binutils, the kbuild tools' libraries; `chroot` in a private mount
//! namespace). The host needs `modinfo` either way.
//!
//! Four changes are made to the extracted sources before `make` ([`PATCHES`], `patch_source`,
//! `patch_tx`, `patch_last`): `siw_accept` hands the socket to the QP before it sends the MPA
//! reply, as its own comment requires ([`PATCH`], docs/testing.md, "siw on the newest
//! kernel"), an initiator leaves the bytes that follow the MPA reply to its QP
//! ([`REPLY_PATCH`]), siw's transmit thread no longer copies a short FPDU with
//! `copy_from_user` when a thread is posting on the same QP: whether the caller is the posting
//! thread becomes a parameter of the transmit path instead of the QP's `in_syscall` bit
//! ([`TX_PATCH`]), and a WQE whose last segment went out is complete even when the peer closes
//! the connection right after ([`LAST_PATCH`]; docs/testing.md, "The bed's patches to siw").
//! Everything else is Debian's.

use crate::bail;
use crate::buildroot;
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

/// The first change the bed makes to siw's sources: its name, written into `READY` (a cached
/// module without it is rebuilt) and into the module (`modinfo -F rverbs_patch siw.ko`).
pub const PATCH: &str = "siw-accept-assoc-1";

/// What [`PATCH`] does and why, for the build's output, the stage header and the module.
pub const PATCH_WHY: &str = "siw_accept hands the socket to the QP before it sends the MPA \
    reply (its own comment requires it; sent first, an initiator's first message can land \
    while the connection manager's upcall still owns the socket and is never read)";

/// The second change: the initiator's connection manager reads the MPA reply and not a byte
/// more, and its QP reads what is already queued behind it.
pub const REPLY_PATCH: &str = "siw-mpa-reply-fpdu-1";

/// What [`REPLY_PATCH`] does and why.
pub const REPLY_PATCH_WHY: &str = "an initiator reads the MPA reply and no further, and its QP \
    reads the FPDUs already queued behind it (unpatched, siw reads 4 bytes past the reply and \
    fails the connection with CONNECT_ERROR -22 when a responder's first FPDU, sent as soon \
    as it is ESTABLISHED, is already there)";

/// The third change, in `siw.h`, `siw_qp_tx.c` and `siw_verbs.c`: a short FPDU's payload is
/// copied from user memory only by the thread that posted it, never by siw's transmit
/// thread; whether the caller is the posting thread is a parameter of the transmit path, not
/// a bit of the QP (`TX_EDITS`). (`-1` was a narrower form of the same fix, which kept the
/// bit.)
pub const TX_PATCH: &str = "siw-tx-1seg-kthread-2";

/// What [`TX_PATCH`] does and why.
pub const TX_PATCH_WHY: &str = "whether siw's transmit path runs in the posting thread is a \
    parameter of siw_qp_sq_process, not the QP's in_syscall bit, so siw's transmit thread \
    copies a short FPDU's payload (32 bytes or less) through the pinned pages, never with \
    copy_from_user (unpatched, it takes copy_from_user when a thread posting on the same QP \
    has the bit up: -EFAULT in the kernel thread, the QP terminates and both peers see \
    DISCONNECTED; and setting the bit, which shares a byte with tx_suspend, was one more \
    unlocked writer of that byte)";

/// The fourth change, in `siw_qp_tx.c`: a WQE whose last segment went out is complete, even
/// when the connection went down meanwhile (`LAST_EDITS`).
/// (`-1` completed such a WQE and then activated the next one, which let siw complete a READ
/// activated meanwhile twice, from the ORQ and as the in-progress WQE: `-2` stops first.)
pub const LAST_PATCH: &str = "siw-tx-last-segment-2";

/// What [`LAST_PATCH`] does and why.
pub const LAST_PATCH_WHY: &str = "a SEND, WRITE or READ response whose last segment went out \
    is complete when the peer closes the connection right after (unpatched, siw checks \
    tx_suspend, set by the peer's FIN, before it looks whether the segment was the last, and \
    completes a fully sent WQE with LOC_QP_OP_ERR: perftest's closing exchange failed so on \
    7.3.4); the next WQE is then not activated while tx_suspend is set, so the SQ flush \
    completes it once (activated, a READ would be completed twice: from the ORQ and as the \
    in-progress WQE)";

/// Every change the bed makes to siw's sources, in the order they are applied: name and why.
pub const PATCHES: [(&str, &str); 4] = [
    (PATCH, PATCH_WHY),
    (REPLY_PATCH, REPLY_PATCH_WHY),
    (TX_PATCH, TX_PATCH_WHY),
    (LAST_PATCH, LAST_PATCH_WHY),
];

/// The names of [`PATCHES`], space-separated: what `READY`, the build log's first line and
/// the module's `rverbs_patch` carry.
pub fn patch_names() -> String {
    PATCHES.map(|(n, _)| n).join(" ")
}

/// The cached siw modules of `kernel`, in load order (after the kernel's own modules), built
/// on first use. Progress goes to stderr.
pub fn prepare(cache: &Path, kernel: &Kernel) -> Result<Vec<PathBuf>> {
    let dir = kernel.dir().join("siw");
    let stale = match load(&dir) {
        Ok(m) => return Ok(m),
        Err(e) => e,
    };
    let t = Instant::now();
    say(format!(
        "building siw.ko for guest kernel {} ({}): Debian's kernels do not build siw \
         (once; cached in {}; {stale})",
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
    if load(&dir).is_err() {
        // A cached build the bed no longer uses (one without [`PATCHES`]): set aside and removed.
        let old = kernel
            .dir()
            .join(format!("siw.stale-{}", std::process::id()));
        if fs::rename(&dir, &old).is_ok() {
            let _ = fs::remove_dir_all(&old);
        }
    }
    if fs::rename(&tmp, &dir).is_err() {
        // Another bed finished first: use its build.
        let _ = fs::remove_dir_all(&tmp);
    }
    say(format!("siw.ko ready in {}", util::fmt_secs(t.elapsed())));
    load(&dir)
}

fn load(dir: &Path) -> Result<Vec<PathBuf>> {
    let ready = fs::read_to_string(dir.join("READY")).context(|| "no cached siw.ko".into())?;
    for (name, _) in PATCHES {
        if !ready.split_whitespace().any(|w| w == name) {
            bail!("the cached siw.ko is not built with the bed's patch {name}");
        }
    }
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
    // A kernel of the host's Debian release builds with the host's compiler and tools; any
    // other in a build root of its release (Debian 13's kbuild needs gcc-14 and glibc 2.38).
    let release = debian_release(kernel.spec.suite);
    let in_root = host_release().as_deref() != Some(release);
    if in_root {
        need_tools(buildroot::HOST_TOOLS)?;
    } else {
        need_tools(&[("make", "make"), ("strip", "binutils")])?;
        need_tools(&[(compiler.as_str(), compiler.as_str())]).map_err(|e| {
            util::Error(format!(
                "{e}\n(kernel {} was built with {compiler}, and siw.ko must be built with the \
                 same compiler; see docs/testing.md, \"Soft-iWARP (siw)\")",
                kernel.release
            ))
        })?;
    }
    let source = format!("linux-source-{}", major_minor(&kernel.release)?);

    let dl = out.join("dl");
    fs::create_dir_all(&dl).context(|| format!("cannot create {}", dl.display()))?;
    let mut wanted = vec![headers.clone()];
    wanted.extend(deps.iter().cloned());
    wanted.push(source.clone());
    download(&apt, &dl, &wanted, &version)?;

    // Headers and kbuild tools, unpacked (not installed) into dl/root: on the host's tools, a
    // directory of their own; otherwise a copy of the build root.
    let root = dl.join("root");
    if in_root {
        let mut packages = vec![compiler.clone()];
        for k in deps.iter().filter(|d| d.starts_with("linux-kbuild-")) {
            packages.extend(kbuild_libraries(&apt, k, &version)?);
        }
        let br = buildroot::prepare(cache, release, &packages)?;
        let t = Instant::now();
        buildroot::copy(&br, &root)?;
        say(format!(
            "building in a copy of the Debian {release} build root (copied in {})",
            util::fmt_secs(t.elapsed())
        ));
    }
    say("unpacking the headers and siw's sources".to_string());
    for name in wanted.iter().filter(|w| **w != source) {
        util::run(
            Command::new("dpkg-deb")
                .arg("-x")
                .arg(deb(&dl, name)?)
                .arg(&root),
        )?;
    }
    let hdir = root.join("usr/src").join(&headers);
    if !in_root {
        // The headers' Makefile includes the -common one by its installed (absolute) path.
        let mk = hdir.join("Makefile");
        let text = fs::read_to_string(&mk).context(|| format!("cannot read {}", mk.display()))?;
        fs::write(&mk, relocate_makefile(&text, &root))
            .context(|| format!("cannot write {}", mk.display()))?;
    }

    // drivers/infiniband/sw/siw out of linux-source's tarball (one pass over ~150 MB of xz),
    // into usr/src/rverbs-siw.
    let siw_src = root.join("usr/src/rverbs-siw");
    fs::create_dir_all(&siw_src).context(|| format!("cannot create {}", siw_src.display()))?;
    let member = format!("{source}/drivers/infiniband/sw/siw");
    let tarball = format!("./usr/src/{source}.tar.xz");
    util::run(
        Command::new("sh")
            .arg("-c")
            .arg(
                r#"dpkg-deb --fsys-tarfile "$1" | tar -xOf - "$2" |
                   tar -xJf - -C "$3" --strip-components=5 "$4""#,
            )
            .arg("sh")
            .arg(deb(&dl, &source)?)
            .arg(&tarball)
            .arg(&siw_src)
            .arg(&member),
    )?;
    if !siw_src.join("Makefile").exists() {
        bail!("{source}'s {tarball} has no {member}/Makefile");
    }
    let cm = siw_src.join("siw_cm.c");
    let text = fs::read_to_string(&cm).context(|| format!("cannot read {}", cm.display()))?;
    let patched = patch_source(&text).map_err(|e| {
        util::Error(format!(
            "cannot apply the bed's patches to {source}'s siw_cm.c: {e}\n\
             (siw's source has changed: read the new siw_cm.c, and either adapt \
             patch_accept or patch_reply in crates/testbed/src/siw.rs or drop the patch if \
             the kernel fixed it; docs/testing.md, \"The bed's patches to siw\")"
        ))
    })?;
    fs::write(&cm, patched).context(|| format!("cannot write {}", cm.display()))?;
    for file in TX_FILES {
        let path = siw_src.join(file);
        let text =
            fs::read_to_string(&path).context(|| format!("cannot read {}", path.display()))?;
        let patched = patch_tx(file, &text).map_err(|e| {
            util::Error(format!(
                "cannot apply the bed's patches to {source}'s {file}: {TX_PATCH}: {e}\n\
                 (siw's source has changed: read the new {file}, and either adapt TX_EDITS \
                 in crates/testbed/src/siw.rs or drop the patch if the kernel fixed it; \
                 docs/testing.md, \"The bed's patches to siw\")"
            ))
        })?;
        fs::write(&path, patched).context(|| format!("cannot write {}", path.display()))?;
    }
    let path = siw_src.join("siw_qp_tx.c");
    let text = fs::read_to_string(&path).context(|| format!("cannot read {}", path.display()))?;
    let patched = patch_last(&text).map_err(|e| {
        util::Error(format!(
            "cannot apply the bed's patches to {source}'s siw_qp_tx.c: {LAST_PATCH}: {e}\n\
             (siw's source has changed: read the new siw_qp_tx.c, and either adapt LAST_EDITS \
             in crates/testbed/src/siw.rs or drop the patch if the kernel fixed it; \
             docs/testing.md, \"The bed's patches to siw\")"
        ))
    })?;
    fs::write(&path, patched).context(|| format!("cannot write {}", path.display()))?;
    for (name, why) in PATCHES {
        let file = match name {
            TX_PATCH => "siw.h, siw_qp_tx.c, siw_verbs.c",
            LAST_PATCH => "siw_qp_tx.c",
            _ => "siw_cm.c",
        };
        say(format!("patched {file} ({name}): {why}"));
    }

    // The paths make sees: in the build root, its own.
    let (h, m) = if in_root {
        (
            PathBuf::from("/usr/src").join(&headers),
            PathBuf::from("/usr/src/rverbs-siw"),
        )
    } else {
        (hdir.clone(), siw_src.clone())
    };
    // siw's eight sources compile in parallel, one job per CPU.
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut args: Vec<std::ffi::OsString> = vec![
        "make".into(),
        format!("-j{jobs}").into(),
        "-C".into(),
        h.into(),
    ];
    args.push(format!("M={}", m.display()).into());
    // No BTF for the module: it would need pahole (dwarves), and the module loads without.
    for a in [
        "CONFIG_RDMA_SIW=m",
        "CONFIG_DEBUG_INFO_BTF_MODULES=",
        "modules",
    ] {
        args.push(a.into());
    }
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    say(format!(
        "{shown} ({compiler}{})",
        if in_root {
            format!(", in the Debian {release} build root")
        } else {
            String::new()
        }
    ));
    let t = Instant::now();
    let mut cmd = if in_root {
        buildroot::command(&root, &args)
    } else {
        let mut c = Command::new(&args[0]);
        c.args(&args[1..]);
        c
    };
    let log = out.join("build.log");
    let mut logf = fs::File::create(&log).context(|| format!("cannot create {}", log.display()))?;
    {
        use std::io::Write as _;
        writeln!(
            logf,
            "# {source} {version}, drivers/infiniband/sw/siw, with the bed's patches {}",
            patch_names()
        )
        .context(|| format!("cannot write {}", log.display()))?;
        for (name, why) in PATCHES {
            writeln!(logf, "# {name}: {why}")
                .context(|| format!("cannot write {}", log.display()))?;
        }
        writeln!(logf, "# {shown}").context(|| format!("cannot write {}", log.display()))?;
    }
    let errf = logf
        .try_clone()
        .context(|| format!("cannot write {}", log.display()))?;
    let st = cmd
        .stdout(logf)
        .stderr(errf)
        .status()
        .context(|| format!("cannot run {}", args[0].to_string_lossy()))?;
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
    if in_root {
        // The root's strip: it knows what the root's binutils wrote.
        util::run(&mut buildroot::command(
            &root,
            &[
                "strip",
                "--strip-debug",
                "-o",
                "/usr/src/rverbs-siw/siw.stripped.ko",
                "/usr/src/rverbs-siw/siw.ko",
            ],
        ))?;
        fs::copy(siw_src.join("siw.stripped.ko"), out.join("siw.ko"))
            .context(|| "cannot copy siw.ko out of the build root".into())?;
    } else {
        util::run(
            Command::new("strip")
                .arg("--strip-debug")
                .arg("-o")
                .arg(out.join("siw.ko"))
                .arg(siw_src.join("siw.ko")),
        )?;
    }
    say(format!("siw.ko built in {}", util::fmt_secs(t.elapsed())));
    let mark = output(
        Command::new("modinfo")
            .args(["-F", "rverbs_patch"])
            .arg(out.join("siw.ko")),
    )?;
    if mark.trim() != patch_names() {
        bail!(
            "the built siw.ko names patches `{}`, not {}: the patched source was not built",
            mark.trim(),
            patch_names()
        );
    }

    // What siw.ko depends on. Up to 6.x that includes libcrc32c, which is not among the
    // guests' modules: it and crc32c_generic come from the kernel package itself.
    let siw_deps = output(
        Command::new("modinfo")
            .args(["-F", "depends"])
            .arg(out.join("siw.ko")),
    )?;
    let siw_deps: Vec<&str> = siw_deps
        .trim()
        .split(',')
        .filter(|d| !d.is_empty())
        .collect();
    let mut order = Vec::new();
    if siw_deps.contains(&"libcrc32c") {
        order = crc_modules(&apt, kernel, &version, &dl, out)?;
    }
    order.push("siw.ko".into());

    // Every module siw.ko depends on must be one the guest loads.
    let have: Vec<String> = kernel
        .modules
        .iter()
        .map(|p| kernel::module_name(&p.to_string_lossy()))
        .chain(order.iter().map(|o| kernel::module_name(o)))
        .collect();
    for d in siw_deps {
        if !have.iter().any(|h| h == d) {
            bail!("siw.ko depends on {d}, which the guest does not load");
        }
    }
    fs::write(out.join("modules.order"), order.join("\n") + "\n")
        .context(|| "cannot write modules.order".to_string())?;
    fs::write(
        out.join("READY"),
        format!("{} {version} {}\n", kernel.release, patch_names()),
    )
    .context(|| "cannot mark siw ready".to_string())?;
    Ok(())
}

/// The tail of `siw_accept` as Debian's 6.1, 6.12 and 7.3 have it (`siw_cm.c`): the MPA reply
/// is sent, then the socket's upcalls go to the QP (or, in MPA v2's peer-to-peer mode, to the
/// ready-to-receive upcall) and the ESTABLISHED event is given.
const ACCEPT_TAIL: &str = "\trv = siw_send_mpareqrep(cep, params->private_data,
\t\t\t\tparams->private_data_len);
\tif (rv != 0)
\t\tgoto error;

\tif (wait_for_peer_rts) {
\t\tsiw_sk_assign_rtr_upcalls(cep);
\t} else {
\t\tsiw_qp_socket_assoc(cep, qp);
\t\trv = siw_cm_upcall(cep, IW_CM_EVENT_ESTABLISHED, 0);
\t\tif (rv)
\t\t\tgoto error;
\t}
";

/// [`ACCEPT_TAIL`] with the socket handed over first: the same calls, the upcalls moved in
/// front of the reply. On a failed reply the error path restores the socket's upcalls as
/// before (`siw_socket_disassoc`), and the ESTABLISHED event still follows the reply.
const ACCEPT_TAIL_PATCHED: &str = "\t/*
\t * rverbs testbed patch siw-accept-assoc-1: the socket's upcalls go to the QP (or to the
\t * RTR upcall) before the MPA reply is sent, as the comment above siw_accept requires; sent
\t * first, an initiator's first message could arrive while siw_cm_llp_data_ready, which
\t * ignores data in RDMA_MODE, still owned the socket, and stay unread.
\t */
\tif (wait_for_peer_rts)
\t\tsiw_sk_assign_rtr_upcalls(cep);
\telse
\t\tsiw_qp_socket_assoc(cep, qp);

\trv = siw_send_mpareqrep(cep, params->private_data,
\t\t\t\tparams->private_data_len);
\tif (rv != 0)
\t\tgoto error;

\tif (!wait_for_peer_rts) {
\t\trv = siw_cm_upcall(cep, IW_CM_EVENT_ESTABLISHED, 0);
\t\tif (rv)
\t\t\tgoto error;
\t}
";

/// [`PATCH`] applied to the text of `siw_cm.c`: [`ACCEPT_TAIL`], which must occur exactly
/// once, becomes [`ACCEPT_TAIL_PATCHED`]. Any other text is an error naming what was not
/// found.
fn patch_accept(text: &str) -> Result<String> {
    if !text.contains("int siw_accept(struct iw_cm_id *id, struct iw_cm_conn_param *params)") {
        bail!("no siw_accept definition");
    }
    match text.matches(ACCEPT_TAIL).count() {
        1 => {}
        0 => bail!(
            "siw_accept's tail (siw_send_mpareqrep, then siw_sk_assign_rtr_upcalls or \
             siw_qp_socket_assoc and the ESTABLISHED upcall) is not there as the bed knows it"
        ),
        n => bail!("siw_accept's tail occurs {n} times, not once"),
    }
    Ok(text.replacen(ACCEPT_TAIL, ACCEPT_TAIL_PATCHED, 1))
}

/// The three places [`REPLY_PATCH`] changes, as Debian's 6.1, 6.12 and 7.3 have them, each
/// with what it becomes and where it is (for the error). First, in `siw_recv_mpa_rr`, a
/// header without private data: the 4-byte read that looks for bytes past the frame.
const REPLY_NO_PDATA: &str = "\t\tu32 word;

\t\trcvd = ksock_recv(s, (char *)&word, sizeof(word), MSG_DONTWAIT);
";

const REPLY_NO_PDATA_PATCHED: &str = "\t\tu32 word;

\t\t/*
\t\t * rverbs testbed patch siw-mpa-reply-fpdu-1: behind an MPA reply the responder
\t\t * may already have sent its first FPDUs; they are the QP's, not an error.
\t\t */
\t\tif (cep->state == SIW_EPSTATE_AWAIT_MPAREP)
\t\t\treturn 0;

\t\trcvd = ksock_recv(s, (char *)&word, sizeof(word), MSG_DONTWAIT);
";

/// Second, in `siw_recv_mpa_rr`, the read of the private data, which asks for 4 bytes more
/// (and fails the frame if they come).
const REPLY_PDATA: &str = "\t\tto_rcv + 4, MSG_DONTWAIT);\n";

const REPLY_PDATA_PATCHED: &str =
    "\t\t/* rverbs testbed patch siw-mpa-reply-fpdu-1: no further than a reply */
\t\tto_rcv + (cep->state == SIW_EPSTATE_AWAIT_MPAREP ? 0 : 4), MSG_DONTWAIT);
";

/// Third, in `siw_proc_mpareply`, the hand-over of the socket to the QP: what arrived before
/// it raised no data-ready upcall the QP could see.
const REPLY_ASSOC: &str = "\trv = siw_qp_modify(qp, &qp_attrs, qp_attr_mask);

\tsiw_qp_socket_assoc(cep, qp);

\tup_write(&qp->state_lock);
";

const REPLY_ASSOC_PATCHED: &str = "\trv = siw_qp_modify(qp, &qp_attrs, qp_attr_mask);

\tsiw_qp_socket_assoc(cep, qp);

\tup_write(&qp->state_lock);

\t/*
\t * rverbs testbed patch siw-mpa-reply-fpdu-1: FPDUs queued behind the MPA reply
\t * arrived while the connection manager owned the socket; the QP's receive path
\t * reads them now (under the socket lock, as the upcall would be).
\t */
\tif (!rv) {
\t\tstruct sock *sk = cep->sock->sk;

\t\tlock_sock(sk);
\t\tif (!skb_queue_empty(&sk->sk_receive_queue))
\t\t\tsk->sk_data_ready(sk);
\t\trelease_sock(sk);
\t}
";

/// [`REPLY_PATCH`] applied to the text of `siw_cm.c`: each of its three places must occur
/// exactly once, else an error names the one that does not.
fn patch_reply(text: &str) -> Result<String> {
    let mut out = text.to_string();
    for (from, to, what) in [
        (
            REPLY_NO_PDATA,
            REPLY_NO_PDATA_PATCHED,
            "siw_recv_mpa_rr's read past a frame without private data",
        ),
        (
            REPLY_PDATA,
            REPLY_PDATA_PATCHED,
            "siw_recv_mpa_rr's read of the private data (to_rcv + 4)",
        ),
        (
            REPLY_ASSOC,
            REPLY_ASSOC_PATCHED,
            "siw_proc_mpareply's hand-over of the socket to the QP",
        ),
    ] {
        match out.matches(from).count() {
            1 => out = out.replacen(from, to, 1),
            0 => bail!("{what} is not there as the bed knows it"),
            n => bail!("{what} occurs {n} times, not once"),
        }
    }
    Ok(out)
}

/// One textual change of a patch to siw's sources: in `file`, `from` must occur exactly
/// `count` times, and each occurrence becomes `to`; `what` names the place for the error.
struct Edit {
    file: &'static str,
    from: &'static str,
    to: &'static str,
    count: usize,
    what: &'static str,
}

/// The files [`TX_PATCH`] changes, in the order the bed applies it.
const TX_FILES: [&str; 3] = ["siw.h", "siw_qp_tx.c", "siw_verbs.c"];

/// [`TX_PATCH`] as Debian's 6.1, 6.12 and 7.3 have the places it changes (the same text in
/// all three; `crates/testbed/patches/0003-*.patch` is the same change against 7.3.4).
/// Unpatched, `siw_try_1seg` takes `copy_from_user` for a short FPDU's payload in user
/// memory when the QP's `in_syscall` bit is set, which `siw_post_send` sets around its own
/// call of `siw_qp_sq_process` and clears after it. siw's transmit thread (`siw_sq_resume`,
/// under the same read-held `state_lock`) can process the QP meanwhile — a READ response that
/// `siw_init_rresp` handed it — and then copies from a user address in a kernel thread:
/// `-EFAULT`, the WQE fails, the QP terminates and the connection is dropped. And the bit
/// shares a byte with `tx_suspend`, `pad`, `do_crc` and `orq_fence`, which other contexts
/// write without the QP's lock (`siw_cm_llp_state_change` sets `tx_suspend` from the socket's
/// upcall): setting and clearing it can lose their updates. The patch drops the bit and
/// passes whether the caller is the posting thread down the transmit path as a parameter:
/// `siw_qp_sq_process(qp, in_syscall)` → `siw_qp_sq_proc_tx` → `siw_qp_prepare_tx` →
/// `siw_try_1seg`; `siw_post_send` passes `true` (a user QP only, as before), the transmit
/// thread `false`. That removes one unlocked writer of the byte, not the race: `tx_suspend`
/// still shares it with `use_sendpage`, `do_crc` and `pad`, which the transmit path writes
/// for every FPDU, and `orq_fence` (a field of its own with `READ_ONCE`/`WRITE_ONCE` would
/// close it; not done).
const TX_EDITS: &[Edit] = &[
    Edit {
        file: "siw.h",
        from: "\tu8 in_syscall : 1; /* TX out of user context */\n",
        to: "",
        count: 1,
        what: "struct siw_iwarp_tx's in_syscall bit",
    },
    Edit {
        file: "siw.h",
        from: "int siw_qp_sq_process(struct siw_qp *qp);\n",
        to: "int siw_qp_sq_process(struct siw_qp *qp, bool in_syscall);\n",
        count: 1,
        what: "siw_qp_sq_process's declaration",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "/*
 * Copy short payload at provided destination payload address
 */
static int siw_try_1seg(struct siw_iwarp_tx *c_tx, void *paddr)
",
        to: "/*
 * Copy short payload at provided destination payload address.
 * A user buffer is read with copy_from_user() only if @in_syscall
 * says the caller is the posting thread (its address space is the
 * buffer's); any other caller goes through the pinned pages.
 */
static int siw_try_1seg(struct siw_iwarp_tx *c_tx, void *paddr,
\t\t\tbool in_syscall)
",
        count: 1,
        what: "siw_try_1seg's definition",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "\t\t} else if (c_tx->in_syscall) {\n",
        to: "\t\t} else if (in_syscall) {\n",
        count: 1,
        what: "siw_try_1seg's in_syscall test",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "static int siw_qp_prepare_tx(struct siw_iwarp_tx *c_tx)\n",
        to: "static int siw_qp_prepare_tx(struct siw_iwarp_tx *c_tx, bool in_syscall)\n",
        count: 1,
        what: "siw_qp_prepare_tx's definition",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "\t\tdata = siw_try_1seg(c_tx, crc);\n",
        to: "\t\tdata = siw_try_1seg(c_tx, crc, in_syscall);\n",
        count: 4,
        what: "siw_qp_prepare_tx's calls of siw_try_1seg (SEND, SEND_REMOTE_INV, WRITE, READ response)",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "static int siw_qp_sq_proc_tx(struct siw_qp *qp, struct siw_wqe *wqe)\n",
        to: "static int siw_qp_sq_proc_tx(struct siw_qp *qp, struct siw_wqe *wqe,\n\t\t\t     bool in_syscall)\n",
        count: 1,
        what: "siw_qp_sq_proc_tx's definition",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "\t\trv = siw_qp_prepare_tx(c_tx);\n",
        to: "\t\trv = siw_qp_prepare_tx(c_tx, in_syscall);\n",
        count: 1,
        what: "siw_qp_sq_proc_tx's call of siw_qp_prepare_tx",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: " * Must be called with the QP state read-locked.\n",
        to: concat!(
            " * @in_syscall is true only when called by the thread posting the WQEs\n",
            " * (siw_post_send() of a user QP), false from siw_tx_thread.\n",
            " *\n",
            " * Must be called with the QP state read-locked.\n",
        ),
        count: 1,
        what: "siw_qp_sq_process's comment",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "int siw_qp_sq_process(struct siw_qp *qp)\n",
        to: "int siw_qp_sq_process(struct siw_qp *qp, bool in_syscall)\n",
        count: 1,
        what: "siw_qp_sq_process's definition",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "\t\trv = siw_qp_sq_proc_tx(qp, wqe);\n",
        to: "\t\trv = siw_qp_sq_proc_tx(qp, wqe, in_syscall);\n",
        count: 1,
        what: "siw_qp_sq_process's call of siw_qp_sq_proc_tx",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "\t\t\tint rv = siw_qp_sq_process(qp);\n",
        to: "\t\t\tint rv = siw_qp_sq_process(qp, false);\n",
        count: 1,
        what: "siw_sq_resume's call of siw_qp_sq_process (the transmit thread)",
    },
    Edit {
        file: "siw_verbs.c",
        from: "\t\tqp->tx_ctx.in_syscall = 1;

\t\tif (siw_qp_sq_process(qp) != 0 && !(qp->tx_ctx.tx_suspend))
\t\t\tsiw_qp_cm_drop(qp, 0);

\t\tqp->tx_ctx.in_syscall = 0;
",
        to: "\t\tif (siw_qp_sq_process(qp, true) != 0 &&
\t\t    !(qp->tx_ctx.tx_suspend))
\t\t\tsiw_qp_cm_drop(qp, 0);
",
        count: 1,
        what: "siw_post_send's in_syscall around siw_qp_sq_process",
    },
];

/// [`LAST_PATCH`] (Debian's 6.1, 6.12 and 7.3 have the same text; `crates/testbed/patches/0004-*`
/// is the same change against 7.3.4): in `siw_qp_sq_proc_tx`, after a segment went out, the
/// test of `DDP_FLAG_LAST` (the WQE is done) comes before the test of `tx_suspend` (stop
/// between segments: `-ECONNABORTED`, which `siw_qp_sq_process` completes as
/// LOC_QP_OP_ERR). `siw_cm_llp_state_change` sets `tx_suspend` when the peer's FIN arrives,
/// from the socket's upcall, at any time: unpatched, a WQE whose last segment is already in
/// TCP's hands fails when the peer, having received it, closes before the sending thread
/// reaches the test. Then, in `siw_qp_sq_process`, a completed WQE's successor is not
/// activated while `tx_suspend` is set (what the `-ECONNABORTED` did before): activation puts a
/// READ into the ORQ and leaves it `QUEUED`, the check at `next_wqe` returns, and
/// `siw_sq_flush` completes that READ from the ORQ and again as the in-progress WQE.
const LAST_EDITS: &[Edit] = &[
    Edit {
        file: "siw_qp_tx.c",
        from: "\t\tif (unlikely(c_tx->tx_suspend)) {
\t\t\t/*
\t\t\t * Verbs, 6.4.: Try stopping sending after a full
\t\t\t * DDP segment if the connection goes down
\t\t\t * (== peer halfclose)
\t\t\t */
\t\t\trv = -ECONNABORTED;
\t\t\tgoto tx_done;
\t\t}
\t\tif (c_tx->pkt.ctrl.ddp_rdmap_ctrl & DDP_FLAG_LAST) {
\t\t\tsiw_dbg_qp(qp, \"WQE completed\\n\");
\t\t\tgoto tx_done;
\t\t}
",
        to: "\t\tif (c_tx->pkt.ctrl.ddp_rdmap_ctrl & DDP_FLAG_LAST) {
\t\t\t/*
\t\t\t * All of the WQE is sent: it is complete, even
\t\t\t * if the connection went down meanwhile.
\t\t\t */
\t\t\tsiw_dbg_qp(qp, \"WQE completed\\n\");
\t\t\tgoto tx_done;
\t\t}
\t\tif (unlikely(c_tx->tx_suspend)) {
\t\t\t/*
\t\t\t * Verbs, 6.4.: Try stopping sending after a full
\t\t\t * DDP segment if the connection goes down
\t\t\t * (== peer halfclose)
\t\t\t */
\t\t\trv = -ECONNABORTED;
\t\t\tgoto tx_done;
\t\t}
",
        count: 1,
        what: "siw_qp_sq_proc_tx's tests after a segment went out (tx_suspend, then DDP_FLAG_LAST)",
    },
    Edit {
        file: "siw_qp_tx.c",
        from: "\t\twqe->wr_status = SIW_WR_IDLE;
\t\trv = siw_activate_tx(qp);
",
        to: "\t\twqe->wr_status = SIW_WR_IDLE;
\t\tif (unlikely(qp->tx_ctx.tx_suspend)) {
\t\t\t/*
\t\t\t * The connection is going down: leave the next
\t\t\t * WQE to the SQ flush, which completes it once.
\t\t\t */
\t\t\tspin_unlock_irqrestore(&qp->sq_lock, flags);
\t\t\tgoto done;
\t\t}
\t\trv = siw_activate_tx(qp);
",
        count: 1,
        what: "siw_qp_sq_process's activation of the next WQE after a completed one",
    },
];

/// The edits of `edits` for `file` applied to its text: each `from` must occur exactly its
/// `count` times (checked on the text as the edits before it left it), else an error names
/// the place.
fn apply_edits(edits: &[Edit], file: &str, text: &str) -> Result<String> {
    let mut out = text.to_string();
    for e in edits.iter().filter(|e| e.file == file) {
        match out.matches(e.from).count() {
            n if n == e.count => out = out.replace(e.from, e.to),
            0 => bail!("{file}: {} is not there as the bed knows it", e.what),
            n => bail!(
                "{file}: {} occurs {n} times, not {}",
                e.what,
                if e.count == 1 {
                    "once".to_string()
                } else {
                    format!("{} times", e.count)
                }
            ),
        }
    }
    Ok(out)
}

/// [`TX_PATCH`] applied to the text of `file` (one of [`TX_FILES`]).
fn patch_tx(file: &str, text: &str) -> Result<String> {
    apply_edits(TX_EDITS, file, text)
}

/// [`LAST_PATCH`] applied to the text of `siw_qp_tx.c` (after [`TX_PATCH`]).
fn patch_last(text: &str) -> Result<String> {
    apply_edits(LAST_EDITS, "siw_qp_tx.c", text)
}

/// [`PATCHES`] applied to the text of `siw_cm.c` (but [`TX_PATCH`], which is `siw_qp_tx.c`'s:
/// [`patch_tx`]), and a `MODULE_INFO(rverbs_patch, ...)` line
/// appended naming them, so the module says it is patched. A source already patched, or one
/// a patch does not know, is an error.
fn patch_source(text: &str) -> Result<String> {
    if text.contains("rverbs_patch") {
        bail!("already patched");
    }
    let mut out = patch_accept(text).map_err(|e| util::Error(format!("{PATCH}: {e}")))?;
    out = patch_reply(&out).map_err(|e| util::Error(format!("{REPLY_PATCH}: {e}")))?;
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "\n#include <linux/module.h>\nMODULE_INFO(rverbs_patch, \"{}\");\n",
        patch_names()
    ));
    Ok(out)
}

/// `apt-get download` of `names` at `version` into `dl`.
fn download(apt: &Apt, dl: &Path, names: &[String], version: &str) -> Result<()> {
    say(format!("downloading {} ({version})", names.join(", ")));
    let t = Instant::now();
    util::run(
        apt.cmd("apt-get")
            .current_dir(dl)
            .arg("download")
            .arg("-q")
            .args(names.iter().map(|w| format!("{w}={version}"))),
    )
    .context(|| format!("the packages to build siw for kernel {version} are not obtainable"))?;
    say(format!("downloaded in {}", util::fmt_secs(t.elapsed())));
    Ok(())
}

/// The .deb of package `name` in `dl`.
fn deb(dl: &Path, name: &str) -> Result<PathBuf> {
    fs::read_dir(dl)
        .context(|| format!("cannot list {}", dl.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with(&format!("{name}_")))
        })
        .ok_or_else(|| util::Error(format!("`apt-get download {name}` left no .deb")))
}

/// [`KERNEL_MODULES`] out of the kernel package (and the packages it is split into, from
/// 7.x), into `out`; their file names, in load order.
fn crc_modules(
    apt: &Apt,
    kernel: &Kernel,
    version: &str,
    dl: &Path,
    out: &Path,
) -> Result<Vec<String>> {
    let mut packages = vec![kernel.package.clone()];
    packages.extend(apt.kernel_parts(&kernel.package)?);
    download(apt, dl, &packages, version)?;
    let kroot = dl.join("kernel");
    fs::create_dir_all(&kroot).context(|| format!("cannot create {}", kroot.display()))?;
    let mut patterns: Vec<String> = KERNEL_MODULES
        .iter()
        .map(|m| format!("*/{m}.ko*"))
        .collect();
    patterns.push("*/modules.builtin".into());
    for p in &packages {
        // A part without any of the patterns makes tar fail: that is not an error here.
        let _ = output(
            Command::new("sh")
                .arg("-c")
                .arg(r#"f=$1; d=$2; shift 2; dpkg-deb --fsys-tarfile "$f" | tar -xf - -C "$d" --wildcards "$@""#)
                .arg("sh")
                .arg(deb(dl, p)?)
                .arg(&kroot)
                .args(&patterns),
        );
    }
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
    Ok(order)
}

/// The libraries a `linux-kbuild-*` package's tools need (its Depends but `pahole`, which only
/// BTF needs: the build asks for none), for the build root.
fn kbuild_libraries(apt: &Apt, kbuild: &str, version: &str) -> Result<Vec<String>> {
    let show = output(
        apt.cmd("apt-cache")
            .args(["show", "--no-all-versions"])
            .arg(format!("{kbuild}={version}")),
    )
    .context(|| format!("{kbuild} {version} is not in Debian's package lists"))?;
    Ok(depends_names(&show)
        .into_iter()
        .filter(|d| d != "pahole")
        .collect())
}

/// The first package of each `Depends:` entry (`a (>= 1) | b` → `a`).
fn depends_names(show: &str) -> Vec<String> {
    field(show, "Depends")
        .unwrap_or("")
        .split(',')
        .filter_map(|d| d.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The Debian release a suite belongs to: `trixie-backports` → `trixie`.
fn debian_release(suite: &'static str) -> &'static str {
    let base = suite.split('-').next().unwrap_or(suite);
    kernel::KERNELS
        .iter()
        .chain(kernel::EXTRA_KERNELS)
        .map(|k| k.suite)
        .find(|s| *s == base)
        .unwrap_or(suite)
}

/// The host's Debian release (`VERSION_CODENAME` of /etc/os-release).
fn host_release() -> Option<String> {
    codename(&fs::read_to_string("/etc/os-release").ok()?).map(str::to_string)
}

fn codename(os_release: &str) -> Option<&str> {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim().trim_matches('"'))
        .filter(|v| !v.is_empty())
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
mod tests;
