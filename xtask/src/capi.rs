//! `cargo xtask capi`: builds the C drop-in (`crates/capi`) and checks its exports.
//!
//! - `libibverbs.so.1`: `cargo rustc -p rverbs-capi --features symver --crate-type cdylib`
//!   (one codegen unit, so that each `.symver` directive sits in the object that defines its
//!   function), copied to `<target>/capi/lib/libibverbs.so.1` with a `libibverbs.so` link.
//! - `librverbs.a`: the same crate as `--crate-type staticlib`, without `.symver`.
//! - The check: every `ibv_*@IBVERBS_*` symbol that rdma-core's programs installed here import
//!   (`readelf --dyn-syms`) must be exported by our library with the same version; the
//!   library must carry the soname `libibverbs.so.1`, export nothing without a version (a
//!   `symver!` line left out) and define every node of `crates/capi/src/symver/nodes.rs`;
//!   the functions of rdma-core 59–64 it has, which no installed program imports, must carry
//!   rdma-core 64's versions ([`RDMA_CORE_64_VERSIONS`]).
//!
//! - `librdmacm.so.1`: `crates/capi/rdmacm/librdmacm.rs` built with `rustc` (soname, the
//!   RDMACM_1.0 … 1.4 nodes, needs our libibverbs.so.1, which defines the `rdma_*`
//!   functions); checked against the `rdma_*@RDMACM_*` imports of [`CM_PROGRAMS`].
//! - `static_pingpong`, `qp_ex`: our C test programs (`crates/capi/tests/c/*.c`) linked
//!   `-static` against `librverbs.a` into `<target>/capi/bin/`; `cargo xtask test` puts them
//!   into the guests (the minimal one has no rdma-core library at all).
//!
//! `cargo xtask test` runs the same build and check (stage `capi`) before the VM stages,
//! whose interop tests load the library from `<target>/capi/lib`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{self, Result};

/// The programs and libraries whose imports the library must satisfy (Debian's ibverbs-utils
/// and ibverbs-providers).
pub const PROGRAMS: &[&str] = &[
    "ibv_devices",
    "ibv_devinfo",
    "ibv_rc_pingpong",
    "ibv_uc_pingpong",
    "ibv_ud_pingpong",
    "ibv_srq_pingpong",
    // rdma-core's provider libraries, which perftest and pyverbs link directly: they must load.
    "/usr/lib/x86_64-linux-gnu/libmlx5.so.1",
    "/usr/lib/x86_64-linux-gnu/libefa.so.1",
];

/// The programs whose `rdma_*@RDMACM_*` and rsockets (`r*@RDMACM_1.0`) imports our librdmacm
/// must satisfy (Debian's rdmacm-utils and perftest).
pub const CM_PROGRAMS: &[&str] = &[
    "rping",
    "rdma_client",
    "rdma_server",
    "ucmatose",
    "mckey",
    "ib_send_lat",
    "ib_write_lat",
    "ib_read_lat",
    "ib_write_bw",
    // rsockets (crates/capi/src/rsocket)
    "rstream",
    "riostream",
    "rcopy",
];

/// The C drop-in's version nodes, the one list (`crates/capi/build.rs` declares them in
/// libibverbs.so.1 from the same file).
#[path = "../../crates/capi/src/symver/nodes.rs"]
mod nodes;

/// Builds `librdmacm.so.1` (`crates/capi/rdmacm/librdmacm.rs`: soname, the RDMACM version
/// nodes, `DT_NEEDED` on our `libibverbs.so.1`, which defines the functions) into `dir`.
fn build_rdmacm(dir: &Path, release: bool) -> Result<PathBuf> {
    build_shim(
        dir,
        release,
        "rdmacm",
        &nodes::librdmacm_script(),
        "rdmacm/librdmacm.rs",
    )
}

/// Builds `libefa.so.1` (`crates/capi/efa/libefa.rs`: soname, libefa's version nodes that the
/// drop-in fills, `DT_NEEDED` on our `libibverbs.so.1`, which defines `efadv_*`) into `dir`.
fn build_efa(dir: &Path, release: bool) -> Result<PathBuf> {
    build_shim(
        dir,
        release,
        "efa",
        &nodes::libefa_script(),
        "efa/libefa.rs",
    )
}

/// Builds `lib<name>.so.1` from `crates/capi/<src>` with version script `script`: a library
/// that only declares version nodes and needs our `libibverbs.so.1`, which defines the
/// functions of those nodes.
fn build_shim(dir: &Path, release: bool, name: &str, script: &str, src: &str) -> Result<PathBuf> {
    let root = util::workspace_root();
    let obj = util::target_dir().join("capi").join(name);
    std::fs::create_dir_all(&obj).map_err(|e| util::Error(format!("{}: {e}", obj.display())))?;
    let map = obj.join(format!("lib{name}.map"));
    std::fs::write(&map, script).map_err(|e| util::Error(format!("{}: {e}", map.display())))?;
    let soname = format!("lib{name}.so.1");
    let out = obj.join(&soname);
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let mut cmd = Command::new(rustc);
    cmd.args([
        "--edition",
        "2021",
        "--crate-type",
        "cdylib",
        "--crate-name",
        name,
    ])
    .args(["-C", "panic=abort", "-C", "strip=debuginfo"])
    .args([
        "-C",
        if release {
            "opt-level=2"
        } else {
            "opt-level=1"
        },
    ])
    .arg("-C")
    .arg(format!("link-arg=-Wl,-soname,{soname}"))
    .arg("-C")
    .arg(format!("link-arg=-Wl,--version-script={}", map.display()))
    .args(["-C", "link-arg=-Wl,--no-as-needed"])
    .arg("-C")
    .arg(format!(
        "link-arg={}",
        dir.join("libibverbs.so.1").display()
    ))
    .arg("-o")
    .arg(&out)
    .arg(root.join("crates/capi").join(src));
    util::run(&mut cmd)?;
    Ok(out)
}

/// Checks `libefa.so.1` (soname, libefa's nodes, needs libibverbs.so.1) and that our
/// libibverbs.so.1 defines each `efadv_*` function the drop-in offers with libefa 44's
/// version, where the loader binds it.
fn check_efa(efa: &Path, verbs: &Path, notes: &mut Vec<String>) -> Result<()> {
    let d = util::output(Command::new("readelf").args(["-d", "-V", "-W"]).arg(efa))?;
    if !d.contains("Library soname: [libefa.so.1]") {
        crate::bail!("{} has no soname libefa.so.1", efa.display());
    }
    if !d.contains("Shared library: [libibverbs.so.1]") {
        crate::bail!("{} does not need libibverbs.so.1", efa.display());
    }
    let names = version_names(efa)?;
    for v in nodes::EFA {
        if !names.contains(*v) {
            crate::bail!("{} does not define version {v}", efa.display());
        }
    }
    let exports = versioned_with(verbs, false, "EFA_")?;
    for (name, ver) in [
        ("efadv_create_driver_qp", "EFA_1.0"),
        ("efadv_create_qp_ex", "EFA_1.1"),
        ("efadv_query_ah", "EFA_1.1"),
        ("efadv_query_device", "EFA_1.1"),
        ("efadv_create_cq", "EFA_1.2"),
        ("efadv_cq_from_ibv_cq_ex", "EFA_1.2"),
        ("efadv_query_mr", "EFA_1.3"),
    ] {
        if !exports.contains(&(name.to_string(), ver.to_string())) {
            crate::bail!("{} does not export {name}@{ver}", verbs.display());
        }
    }
    notes.push(format!(
        "{} ({} efadv symbols)",
        efa.display(),
        exports.len()
    ));
    Ok(())
}

/// Checks `librdmacm.so.1` (soname, version nodes, needs libibverbs.so.1) and that every
/// `rdma_*@RDMACM_*` import of [`CM_PROGRAMS`] is defined with its version by our
/// libibverbs.so.1, where the loader binds it.
fn check_rdmacm(cm: &Path, verbs: &Path, notes: &mut Vec<String>) -> Result<()> {
    let d = util::output(Command::new("readelf").args(["-d", "-V", "-W"]).arg(cm))?;
    if !d.contains("Library soname: [librdmacm.so.1]") {
        crate::bail!("{} has no soname librdmacm.so.1", cm.display());
    }
    if !d.contains("Shared library: [libibverbs.so.1]") {
        crate::bail!("{} does not need libibverbs.so.1", cm.display());
    }
    let names = version_names(cm)?;
    for v in nodes::RDMACM {
        if !names.contains(*v) {
            crate::bail!("{} does not define version {v}", cm.display());
        }
    }
    let exports = versioned_with(verbs, false, "RDMACM_")?;
    let mut missing = Vec::new();
    for p in CM_PROGRAMS {
        let path = Path::new("/usr/bin").join(p);
        if !path.exists() {
            crate::bail!(
                "{} is not installed (packages rdmacm-utils, perftest; `cargo xtask test` installs them)",
                path.display()
            );
        }
        let imports = versioned_with(&path, true, "RDMACM_")?;
        let lacking = not_exported(&imports, &exports, notes, p, "rdma_cm imports");
        if !lacking.is_empty() {
            missing.push(format!("{p}: {}", lacking.join(" ")));
        }
    }
    if !missing.is_empty() {
        crate::bail!(
            "rdma_cm imports our libraries lack:\n  {}",
            missing.join("\n  ")
        );
    }
    Ok(())
}

/// Where the libraries go.
pub fn lib_dir() -> PathBuf {
    util::target_dir().join("capi").join("lib")
}

/// Our C test programs (`crates/capi/tests/c/NAME.c`), each linked `-static` against
/// `librverbs.a` into `<target>/capi/bin/NAME`.
pub const C_PROGRAMS: &[&str] = &[
    "static_pingpong",
    "qp_ex",
    "ah_from_wc",
    "destroy_waits",
    "dmabuf_mr",
    "mcast",
    "batch_post",
    "cm_destroy_waits",
    "new_verbs",
];

/// The C test programs also linked dynamically against rdma-core's own libibverbs, into
/// `<target>/capi/bin/NAME-rdma-core`: the host guest runs both builds and compares what
/// they print (the reference behaviour).
pub const RDMA_CORE_PROGRAMS: &[&str] = &[
    "ah_from_wc",
    "destroy_waits",
    "mcast",
    "batch_post",
    "cm_destroy_waits",
];

/// The functions of rdma-core 59 to 64 that the drop-in has, with the version rdma-core 64's
/// `libibverbs.map.in` and `librdmacm.map` give them: no installed program imports them
/// (Debian's rdma-core is 44 and 56), so their versions are checked against this list.
pub const RDMA_CORE_64_VERSIONS: &[(&str, &str)] = &[
    ("ibv_reg_mr_ex", "IBVERBS_1.15"),
    ("ibv_alloc_dmah", "IBVERBS_1.15"),
    ("ibv_dealloc_dmah", "IBVERBS_1.15"),
    ("ibv_query_port_speed", "IBVERBS_1.16"),
    ("ibv_alloc_buf", "IBVERBS_1.17"),
    ("ibv_free_buf", "IBVERBS_1.17"),
    ("ibv_reg_buf_mr", "IBVERBS_1.17"),
    ("rdma_write_cm_event", "RDMACM_1.4"),
    ("rdma_resolve_addrinfo", "RDMACM_1.4"),
    ("rdma_query_addrinfo", "RDMACM_1.4"),
];

/// Debian's `ibv_rc_pingpong` (ibverbs-utils), copied unmodified to
/// `<target>/capi/bin/ibv_rc_pingpong.debian`: the guests run that copy on our
/// `libibverbs.so.1` (crates/capi/tests/vm_static.rs). A copy, not `/usr/bin`'s path, so the
/// minimal guest does not seem to have rdma-core's tools (tests that need them look there).
pub const DEBIAN_RC_PINGPONG: &str = "/usr/bin/ibv_rc_pingpong";

/// Files the guests need besides the test binaries (the static C programs and the copy of
/// Debian's ibv_rc_pingpong, once built).
pub fn guest_files() -> Vec<PathBuf> {
    C_PROGRAMS
        .iter()
        .map(|n| n.to_string())
        .chain(["ibv_rc_pingpong.debian".to_string()])
        .map(|n| util::target_dir().join("capi/bin").join(n))
        .filter(|p| p.is_file())
        .collect()
}

/// Links the static C program `name` against `archive` with `$CC` (default `cc`).
fn link_static_program(archive: &Path, name: &str) -> Result<PathBuf> {
    let out = util::target_dir().join("capi/bin").join(name);
    let dir = out.parent().unwrap();
    std::fs::create_dir_all(dir).map_err(|e| util::Error(format!("{}: {e}", dir.display())))?;
    let src = util::workspace_root().join(format!("crates/capi/tests/c/{name}.c"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-O2", "-Wall", "-static", "-s", "-o"])
        .arg(&out)
        .arg(&src)
        .arg(archive)
        .args(["-lpthread", "-ldl", "-lm"]);
    // The linker warns that std's getaddrinfo/getpwuid_r want glibc's NSS at run time; the
    // program never reaches them.
    util::output(&mut cmd)?;
    Ok(out)
}

/// Links the C program `name` dynamically against rdma-core's libibverbs and librdmacm
/// (libibverbs-dev, librdmacm-dev).
fn link_rdma_core_program(name: &str) -> Result<PathBuf> {
    let out = util::target_dir()
        .join("capi/bin")
        .join(format!("{name}-rdma-core"));
    let src = util::workspace_root().join(format!("crates/capi/tests/c/{name}.c"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut cmd = Command::new(&cc);
    cmd.args(["-O2", "-Wall", "-o"])
        .arg(&out)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"]);
    util::output(&mut cmd)?;
    Ok(out)
}

/// What [`build_and_check`] did, for the report.
pub struct Outcome {
    /// One line per program checked, and the library paths.
    pub notes: Vec<String>,
}

/// rdma-core's preload library (package librdmacm1): ours must define every function it
/// defines.
pub const RDMA_CORE_PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";

/// Builds `librspreload.so.1` (`crates/capi/src/preload/`: the crate as a cdylib with the
/// `preload` feature, soname `librspreload.so.1`) into `dir` and checks it: the soname, and
/// every function rdma-core's `librspreload.so` defines is defined by ours.
fn build_preload(dir: &Path, release: bool, notes: &mut Vec<String>) -> Result<()> {
    let so = build_with("cdylib", Some("preload"), release)?;
    let dst = dir.join("librspreload.so.1");
    let tmp = dst.with_extension("tmp");
    std::fs::copy(&so, &tmp)
        .and_then(|_| std::fs::rename(&tmp, &dst))
        .map_err(|e| util::Error(format!("copy {} to {}: {e}", so.display(), dst.display())))?;
    let d = util::output(Command::new("readelf").args(["-d", "-W"]).arg(&dst))?;
    if !d.contains("Library soname: [librspreload.so.1]") {
        crate::bail!("{} has no soname librspreload.so.1", dst.display());
    }
    let functions = |p: &Path| -> Result<BTreeSet<String>> {
        let text = util::output(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(p))?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 8 && f[3] == "FUNC" && f[6] != "UND")
                    .then(|| f[7].split('@').next().unwrap_or("").to_string())
            })
            .collect())
    };
    let ours = functions(&dst)?;
    let theirs = functions(Path::new(RDMA_CORE_PRELOAD))
        .map_err(|e| util::Error(format!("{RDMA_CORE_PRELOAD} (package librdmacm1): {}", e.0)))?;
    let lacking: Vec<&String> = theirs.iter().filter(|f| !ours.contains(*f)).collect();
    if !lacking.is_empty() {
        crate::bail!(
            "{} lacks functions rdma-core's preload defines: {lacking:?}",
            dst.display()
        );
    }
    notes.push(format!(
        "{}: all {} functions of rdma-core's preload",
        dst.display(),
        theirs.len()
    ));
    Ok(())
}

fn build(crate_type: &str, symver: bool, release: bool) -> Result<PathBuf> {
    build_with(crate_type, symver.then_some("symver"), release)
}

fn build_with(crate_type: &str, feature: Option<&str>, release: bool) -> Result<PathBuf> {
    let mut cmd = util::cargo();
    cmd.args([
        "rustc",
        "-p",
        "rverbs-capi",
        "--lib",
        "--crate-type",
        crate_type,
    ]);
    if let Some(f) = feature {
        cmd.args(["--features", f]);
    }
    if release {
        cmd.arg("--release");
    }
    cmd.args(["--", "-C", "codegen-units=1"]);
    util::run(&mut cmd)?;
    let profile = if release { "release" } else { "debug" };
    let file = match crate_type {
        "cdylib" => "librverbs_capi.so",
        _ => "librverbs_capi.a",
    };
    Ok(util::target_dir().join(profile).join(file))
}

/// `name@VERSION` pairs of a `readelf --dyn-syms -W` listing: the undefined ones (imports)
/// or the defined ones (exports).
/// The `imports` that `exports` lacks, as `name@version`; notes how many of them are exported
/// (`{program}: N of M {what} exported`).
fn not_exported(
    imports: &BTreeSet<(String, String)>,
    exports: &BTreeSet<(String, String)>,
    notes: &mut Vec<String>,
    program: &str,
    what: &str,
) -> Vec<String> {
    let lacking: Vec<String> = imports
        .iter()
        .filter(|s| !exports.contains(*s))
        .map(|(n, v)| format!("{n}@{v}"))
        .collect();
    notes.push(format!(
        "{program}: {} of {} {what} exported",
        imports.len() - lacking.len(),
        imports.len()
    ));
    lacking
}

fn versioned(path: &Path, undefined: bool) -> Result<BTreeSet<(String, String)>> {
    versioned_with(path, undefined, "IBVERBS_")
}

fn versioned_with(
    path: &Path,
    undefined: bool,
    prefix: &str,
) -> Result<BTreeSet<(String, String)>> {
    let text = util::output(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(path))?;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || (f[6] == "UND") != undefined {
            continue;
        }
        let sym = f[7];
        let Some((name, ver)) = sym.split_once('@') else {
            continue;
        };
        let ver = ver.trim_start_matches('@');
        if ver.starts_with(prefix) {
            out.insert((name.to_string(), ver.to_string()));
        }
    }
    Ok(out)
}

/// The version names `readelf -V` lists for `path` (those it defines and those it needs).
fn version_names(path: &Path) -> Result<BTreeSet<String>> {
    let text = util::output(Command::new("readelf").args(["-V", "-W"]).arg(path))?;
    Ok(text
        .split("Name: ")
        .skip(1)
        .filter_map(|t| t.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// The symbols `path` defines (exports) without a version.
fn unversioned(path: &Path) -> Result<Vec<String>> {
    let text = util::output(Command::new("readelf").args(["--dyn-syms", "-W"]).arg(path))?;
    Ok(text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| {
            f.len() >= 8
                && f[0]
                    .trim_end_matches(':')
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                && f[6] != "UND"
                && f[4] != "LOCAL"
                && !f[7].contains('@')
        })
        .map(|f| f[7].to_string())
        .collect())
}

/// Builds both libraries into [`lib_dir`] and checks the exports against [`PROGRAMS`].
pub fn build_and_check(release: bool) -> Result<Outcome> {
    let so = build("cdylib", true, release)?;
    let a = build("staticlib", false, release)?;
    let dir = lib_dir();
    std::fs::create_dir_all(&dir).map_err(|e| util::Error(format!("{}: {e}", dir.display())))?;
    let so_dst = dir.join("libibverbs.so.1");
    let a_dst = dir.join("librverbs.a");
    for (from, to) in [(&so, &so_dst), (&a, &a_dst)] {
        // Replace, never overwrite in place: a running guest may have the old file mapped.
        let tmp = to.with_extension("tmp");
        std::fs::copy(from, &tmp)
            .and_then(|_| std::fs::rename(&tmp, to))
            .map_err(|e| {
                util::Error(format!("copy {} to {}: {e}", from.display(), to.display()))
            })?;
    }
    let link = dir.join("libibverbs.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libibverbs.so.1", &link)
        .map_err(|e| util::Error(format!("{}: {e}", link.display())))?;

    let prog = link_static_program(&a_dst, C_PROGRAMS[0])?;
    for name in &C_PROGRAMS[1..] {
        link_static_program(&a_dst, name)?;
    }
    for name in RDMA_CORE_PROGRAMS {
        link_rdma_core_program(name)?;
    }
    let debian = util::target_dir().join("capi/bin/ibv_rc_pingpong.debian");
    std::fs::copy(DEBIAN_RC_PINGPONG, &debian).map_err(|e| {
        util::Error(format!(
            "copy {DEBIAN_RC_PINGPONG} to {} (install ibverbs-utils): {e}",
            debian.display()
        ))
    })?;
    let cm = build_rdmacm(&dir, release)?;
    let cm_dst = dir.join("librdmacm.so.1");
    let tmp = cm_dst.with_extension("tmp");
    std::fs::copy(&cm, &tmp)
        .and_then(|_| std::fs::rename(&tmp, &cm_dst))
        .map_err(|e| {
            util::Error(format!(
                "copy {} to {}: {e}",
                cm.display(),
                cm_dst.display()
            ))
        })?;

    let dynamic = util::output(Command::new("readelf").args(["-d", "-W"]).arg(&so_dst))?;
    if !dynamic.contains("Library soname: [libibverbs.so.1]") {
        crate::bail!("{} has no soname libibverbs.so.1", so_dst.display());
    }
    let bare = unversioned(&so_dst)?;
    if !bare.is_empty() {
        crate::bail!(
            "{} exports without a version (a `symver!` line missing beside the definition): {}",
            so_dst.display(),
            bare.join(" ")
        );
    }
    let defined = version_names(&so_dst)?;
    for v in nodes::IBVERBS
        .iter()
        .chain([&nodes::IBVERBS_PRIVATE])
        .chain(nodes::RDMACM)
        .chain(nodes::EFA)
    {
        if !defined.contains(*v) {
            crate::bail!("{} does not define version {v}", so_dst.display());
        }
    }
    let exports = versioned(&so_dst, false)?;
    let cm_exports = versioned_with(&so_dst, false, "RDMACM_")?;
    for (name, ver) in RDMA_CORE_64_VERSIONS {
        let set = if ver.starts_with("RDMACM_") {
            &cm_exports
        } else {
            &exports
        };
        if !set.contains(&(name.to_string(), ver.to_string())) {
            crate::bail!(
                "{} does not export {name}@@{ver} (rdma-core 64's version of it)",
                so_dst.display()
            );
        }
    }
    let mut notes = vec![format!(
        "{} ({} versioned ibv symbols), {}, {}",
        so_dst.display(),
        exports.len(),
        a_dst.display(),
        prog.display()
    )];
    check_rdmacm(&cm_dst, &so_dst, &mut notes)?;
    let efa = build_efa(&dir, release)?;
    let efa_dst = dir.join("libefa.so.1");
    std::fs::copy(&efa, &efa_dst).map_err(|e| {
        util::Error(format!(
            "copy {} to {}: {e}",
            efa.display(),
            efa_dst.display()
        ))
    })?;
    check_efa(&efa_dst, &so_dst, &mut notes)?;
    // Last: it rebuilds the cdylib that libibverbs.so.1 was copied from.
    build_preload(&dir, release, &mut notes)?;
    let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in PROGRAMS {
        let path = Path::new("/usr/bin").join(p); // an absolute p replaces the directory
        if !path.exists() {
            crate::bail!(
                "{} is not installed (packages ibverbs-utils, ibverbs-providers; `cargo xtask test` installs them)",
                path.display()
            );
        }
        let imports = versioned(&path, true)?;
        let lacking = not_exported(&imports, &exports, &mut notes, p, "imports");
        if !lacking.is_empty() {
            missing.insert(p.to_string(), lacking);
        }
    }
    // rdma-core 56's (the Debian 13 userland of the trixie stage, when it is cached: `cargo
    // xtask setup` and the stage make it): the same programs and provider libraries, and
    // pyverbs 56's modules, which link libmlx5/libefa/libhns 56 and our libibverbs directly.
    let trixie = util::vm_dir().join("userland/trixie/root");
    if trixie.join("usr/bin/ibv_devinfo").is_file() {
        let mut imports56 = Vec::new();
        for p in PROGRAMS
            .iter()
            .chain(["/usr/lib/x86_64-linux-gnu/libhns.so.1"].iter())
        {
            let path = Path::new("/usr/bin").join(p); // an absolute p replaces the directory
            imports56.push(trixie.join(path.strip_prefix("/").unwrap_or(&path)));
        }
        imports56.extend(pyverbs_modules(
            &trixie.join("usr/lib/python3/dist-packages/pyverbs"),
        ));
        for path in imports56 {
            let what = path
                .strip_prefix(&trixie)
                .unwrap_or(&path)
                .display()
                .to_string();
            let imports = versioned(&path, true)?;
            let lacking = not_exported(
                &imports,
                &exports,
                &mut notes,
                &what,
                "imports (rdma-core 56)",
            );
            if !lacking.is_empty() {
                missing.insert(format!("rdma-core 56 {what}"), lacking);
            }
        }
    }
    if !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|(p, l)| format!("{p}: {}", l.join(" ")))
            .collect();
        crate::bail!(
            "imports our libibverbs.so.1 lacks:\n  {}",
            list.join("\n  ")
        );
    }
    Ok(Outcome { notes })
}

/// The extension modules (`*.so`) under `dir`, recursively, sorted.
fn pyverbs_modules(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "so") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `cargo xtask capi [--release]`.
pub fn cmd(args: &[String]) -> Result<u8> {
    let mut release = false;
    for a in args {
        match a.as_str() {
            "--release" => release = true,
            other => crate::bail!("unknown option `{other}` for `cargo xtask capi`"),
        }
    }
    let o = build_and_check(release)?;
    for n in &o.notes {
        println!("xtask capi: {n}");
    }
    println!("xtask capi: ok");
    Ok(0)
}
