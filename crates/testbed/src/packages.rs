//! The Debian packages the test bed and the test stages need: ONE table, [`PACKAGES`].
//!
//! To need another package, add one line to the table (package, who needs it, why). Every
//! command that boots a guest (`rverbs-vm`, `cargo xtask vm|demo|setup`) installs the
//! [`Need::Bed`] rows; `cargo xtask test` installs every row. Installing happens only as
//! root; otherwise the command stops at once with the exact `apt-get install` line.

use crate::util::{self, Result};
use std::process::Command;

/// Who needs a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// Booting any guest (the runner, `cargo xtask vm`, `cargo xtask demo`).
    Bed,
    /// Guests with soft-iWARP (`--provider siw`): the bed builds `siw.ko` for the guest
    /// kernel (see [`crate::siw`]; the kernel's headers and sources are downloaded into the
    /// cache, not installed).
    Siw,
    /// Only the test suite (`cargo xtask test`): interop peers, compilers for ABI probes, ...
    Test,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Package {
    /// The Debian package name.
    pub name: &'static str,
    /// Who needs it.
    pub need: Need,
    /// What for (shown when it is missing).
    pub why: &'static str,
}

const fn p(name: &'static str, need: Need, why: &'static str) -> Package {
    Package { name, need, why }
}

use Need::{Bed, Siw, Test};

/// Every Debian package the project's commands need (sorted by need, then by purpose).
#[rustfmt::skip]
pub const PACKAGES: &[Package] = &[
    // ---- the bed itself ------------------------------------------------------------------
    p("qemu-system-x86",   Bed,  "qemu-system-x86_64 boots the guests"),
    p("busybox-static",    Bed,  "the minimal guest's userland and stage 1 (/init)"),
    p("kmod",              Bed,  "depmod: the kernel packages ship no modules.dep"),
    p("xz-utils",          Bed,  "xz: the kernels' payloads and 6.12's .ko.xz modules"),
    p("iproute2",          Bed,  "ip and rdma in the host guest (netdevs, rxe without rverbs)"),
    // ---- guests with siw (siw.ko built out of tree for the guest kernel) -----------------
    p("make",              Siw,  "make: kbuild builds siw.ko against the guest kernel's headers"),
    p("gcc-12",            Siw,  "the compiler of Debian 12's kernel (linux-compiler-gcc-12-x86)"),
    p("binutils",          Siw,  "ld for kbuild, strip for siw.ko's debug info"),
    p("libelf1",           Siw,  "the kernel's kbuild tools (objtool, modpost) link it"),
    // ---- cargo xtask test ----------------------------------------------------------------
    p("rdmacm-utils",      Test, "rping, rdma_client/server, udaddy: interop peers"),
    p("ibverbs-utils",     Test, "ibv_rc_pingpong, ibv_devinfo: interop peers"),
    p("ibverbs-providers", Test, "librxe for rdma-core's tools; libmlx5, libefa for the oracles"),
    p("perftest",          Test, "ib_send_lat & co: interop and reference latency"),
    p("valgrind",          Test, "callgrind instruction counts in the guest"),
    p("strace",            Test, "syscall traces in the guest"),
    p("iperf3",            Test, "an unmodified TCP program on librspreload (capi vm_preload)"),
    p("redis-server",      Test, "redis on librspreload (capi vm_preload)"),
    p("redis-tools",       Test, "redis-cli, redis-benchmark on librspreload (capi vm_preload)"),
    p("memcached",         Test, "memcached on librspreload (capi vm_preload)"),
    p("libmemcached-tools", Test, "memccp, memccapable, memcslap on librspreload (capi vm_preload)"),
    p("curl",              Test, "curl against Python's http.server on librspreload (capi vm_preload)"),
    p("gcc",               Test, "cc for the ABI layout probes"),
    p("g++",               Test, "c++: libfuzzer-sys compiles libFuzzer for the fuzz stage"),
    p("libc6-dev",         Test, "C headers for the ABI layout probes"),
    p("linux-libc-dev",    Test, "the kernel uapi headers the ABI is checked against"),
    p("libibverbs-dev",    Test, "verbs.h, efadv.h, libibverbs.so, libefa.so: oracle harnesses, capi layout tests"),
    p("librdmacm-dev",     Test, "rdma_cma.h: the capi layout tests"),
    p("python3-pyverbs",   Test, "rdma-core's Python suite, run on both libraries (docs/capi.md)"),
];

/// The package names needed for `need` (a `Test` run needs the `Bed` rows too), in table
/// order, without duplicates.
pub fn needed(need: Need) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for row in PACKAGES.iter().filter(|r| r.need <= need) {
        if !out.contains(&row.name) {
            out.push(row.name);
        }
    }
    out
}

/// The exact command line that installs `missing`.
pub fn install_line(missing: &[&str]) -> String {
    format!(
        "apt-get install -y --no-install-recommends {}",
        missing.join(" ")
    )
}

/// Which of `names` dpkg does not list as installed (all of them when dpkg cannot say).
pub fn missing(names: &[&'static str]) -> Vec<&'static str> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${db:Status-Abbrev}\\n"])
        .args(names)
        .stderr(std::process::Stdio::null())
        .output();
    let text = match out {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(_) => String::new(),
    };
    missing_from_query(names, &text)
}

/// Parses `dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n'` output: `ii` is installed.
fn missing_from_query(names: &[&'static str], text: &str) -> Vec<&'static str> {
    names
        .iter()
        .copied()
        .filter(|n| {
            !text.lines().any(|l| {
                let mut w = l.split_whitespace();
                // Multi-arch packages print as `name` (the query names no architecture).
                w.next().map(|p| p.split(':').next() == Some(n)) == Some(true)
                    && w.next().is_some_and(|s| s.starts_with("ii"))
            })
        })
        .collect()
}

/// Makes sure the packages for `need` are installed: installs the missing ones with apt-get
/// when running as root (after `apt-get update` if apt does not know them yet), and fails at
/// once with the exact `apt-get install` line otherwise (also as root with
/// `RVERBS_TESTBED_NO_INSTALL=1`). `who` names the command for messages.
pub fn ensure(need: Need, who: &str) -> Result<()> {
    if util::which("dpkg-query").is_none() {
        eprintln!(
            "{who}: note: no dpkg on this machine: cannot check the Debian packages it needs ({})",
            needed(need).join(" ")
        );
        return Ok(());
    }
    let miss = missing(&needed(need));
    if miss.is_empty() {
        return Ok(());
    }
    let line = install_line(&miss);
    let no_install = std::env::var_os("RVERBS_TESTBED_NO_INSTALL").is_some_and(|v| v == "1");
    if !util::is_root() || no_install {
        crate::bail!(
            "missing Debian package(s): {}\n{}\nInstall them as root:\n    {line}\n\
             (or run this command as root: it then installs them itself)",
            miss.join(" "),
            why_lines(&miss)
        );
    }
    if util::which("apt-get").is_none() {
        crate::bail!(
            "missing Debian package(s) {} and no apt-get to install them",
            miss.join(" ")
        );
    }
    eprintln!("{who}: installing {} (apt-get)", miss.join(" "));
    let install = || {
        util::run(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                // Another apt or dpkg may be running: wait for its lock instead of failing.
                .args(["-o", "DPkg::Lock::Timeout=900"])
                .args(&miss)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    // A fresh machine may have no package lists yet: update and retry once.
    if install().is_err() {
        eprintln!("{who}: running `apt-get update`, then installing again");
        util::run(Command::new("apt-get").args(["update", "-q"]))?;
        install().map_err(|e| {
            util::Error(format!(
                "cannot install {}: {e}\nInstall them: {line}",
                miss.join(" ")
            ))
        })?;
    }
    let still = missing(&miss);
    if !still.is_empty() {
        crate::bail!("apt-get did not install {}", still.join(" "));
    }
    Ok(())
}

fn why_lines(miss: &[&str]) -> String {
    miss.iter()
        .map(|m| {
            let why = PACKAGES.iter().find(|r| r.name == *m).map_or("", |r| r.why);
            format!("    {m:<18} {why}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_needs_include_the_bed() {
        let bed = needed(Need::Bed);
        let all = needed(Need::Test);
        assert!(bed.iter().all(|b| all.contains(b)), "{bed:?} {all:?}");
        assert!(bed.contains(&"kmod") && bed.contains(&"qemu-system-x86"));
        assert!(!bed.contains(&"perftest") && !bed.contains(&"make"));
        let siw = needed(Need::Siw);
        assert!(bed.iter().all(|b| siw.contains(b)) && siw.contains(&"gcc-12"));
        assert!(siw.iter().all(|b| all.contains(b)), "{siw:?}");
        assert!(all.contains(&"ibverbs-utils") && all.contains(&"perftest"));
    }

    #[test]
    fn query_output_is_parsed() {
        let text = "kmod ii \nxz-utils rc \nibverbs-providers:amd64 ii \n";
        assert_eq!(
            missing_from_query(&["kmod", "xz-utils", "ibverbs-providers", "perftest"], text),
            ["xz-utils", "perftest"]
        );
        assert_eq!(
            install_line(&["kmod", "perftest"]),
            "apt-get install -y --no-install-recommends kmod perftest"
        );
    }
}
