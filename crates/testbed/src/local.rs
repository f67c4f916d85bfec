//! `rverbs-vm local`: RDMA tests without a VM. Runs a program on this machine's own kernel
//! when it has `siw` (or `rdma_rxe`) and the user may create devices (root): one dummy netdev,
//! one siw or rxe device on it, the program with the guests' `RVERBS_*` variables
//! (`RVERBS_GUEST=local`, one node), and everything removed after.
//!
//! - siw: in a private network namespace (`rverbs-<pid>`), netdev `d0` with 10.10.0.1/24; the
//!   program runs in that namespace.
//! - rxe: in the initial namespace, netdev `rvl<pid>` with an address of its own
//!   (10.233.x.y/32, from the pid), because rxe routes even its looped-back packets in the
//!   initial namespace: measured on Debian's 6.1 and 6.12, an rxe device on a netdev of a
//!   private namespace gets `RDMA_CM_EVENT_UNREACHABLE` from rping and a "local QP operation
//!   error" from `ibv_rc_pingpong`, while siw there works.
//!
//! One node only (docs/testing.md, "The two-node topology").

use crate::util::{self, output, say, Result};
use crate::vm::Provider;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The address of `d0` in siw's private namespace.
pub const ADDR: &str = "10.10.0.1";

/// Where the device goes: (namespace, `None` for the initial one; netdev; address; prefix).
pub fn place(p: Provider, pid: u32) -> (Option<String>, String, String, u8) {
    match p {
        Provider::Siw => (Some(format!("rverbs-{pid}")), "d0".into(), ADDR.into(), 24),
        Provider::Rxe => (
            None,
            format!("rvl{pid}"),
            format!("10.233.{}.{}", (pid / 254) % 256, pid % 254 + 1),
            32,
        ),
    }
}

/// The kernel module a provider's devices need.
pub fn module_of(p: Provider) -> &'static str {
    match p {
        Provider::Rxe => "rdma_rxe",
        Provider::Siw => "siw",
    }
}

/// The device name of the run of process `pid` (device names are global, so it carries the
/// pid: runs side by side, or beside the guests' `rxe0`, do not collide).
pub fn device_name(p: Provider, pid: u32) -> String {
    format!("{}_l{pid}", p.name())
}

/// The `RVERBS_*` variables the program gets.
pub fn variables(p: Provider, dev: &str, netdev: &str, addr: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = [
        ("RVERBS_VM", "1"),
        ("RVERBS_GUEST", "local"),
        ("RVERBS_TOPO", "one"),
        ("RVERBS_PROVIDER", p.name()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for s in ["A", "B"] {
        v.push((format!("RVERBS_DEV_{s}"), dev.into()));
        v.push((format!("RVERBS_ADDR_{s}"), addr.into()));
        v.push((format!("RVERBS_NETDEV_{s}"), netdev.into()));
    }
    if let Ok(k) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        v.push(("RVERBS_KERNEL".into(), k.trim().to_string()));
    }
    v
}

/// Checks that this machine can do it: root, `ip` and `rdma` (iproute2), the module loaded
/// or loadable.
pub fn check(p: Provider) -> Result<()> {
    if !util::is_root() {
        crate::bail!(
            "`rverbs-vm local` creates a netdev and an RDMA device: it must run as root (or use \
             `rverbs-vm run`, which boots a guest)"
        );
    }
    for tool in ["ip", "rdma"] {
        if util::which(tool).is_none() {
            crate::bail!(
                "`{tool}` is missing: install iproute2 ({})",
                crate::packages::install_line(&["iproute2"])
            );
        }
    }
    let m = module_of(p);
    if !Path::new("/sys/module").join(m).exists() {
        let ok = Command::new("modprobe")
            .arg(m)
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok || !Path::new("/sys/module").join(m).exists() {
            crate::bail!(
                "this kernel has no {m} module (or it cannot be loaded: `modprobe {m}` failed): \
                 {} devices cannot be made here; use `rverbs-vm run`, which boots a guest",
                p.name()
            );
        }
    }
    Ok(())
}

/// A command run in `ns` (or here when `None`).
fn in_ns(ns: Option<&str>, prog: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, prog]);
            c
        }
        None => Command::new(prog),
    }
}

fn ip(ns: Option<&str>, args: &[&str]) -> Result<()> {
    output(in_ns(ns, "ip").args(args)).map(|_| ())
}

/// Creates the netdev (in its namespace) and the device, runs `program`, removes everything;
/// returns the program's exit code (125 when it was killed at the timeout).
pub fn run(p: Provider, program: &[String], timeout: Duration) -> Result<u8> {
    check(p)?;
    let pid = std::process::id();
    let (ns, netdev, addr, prefix) = place(p, pid);
    let dev = device_name(p, pid);
    let ns = ns.as_deref();
    if let Some(ns) = ns {
        ip(None, &["netns", "add", ns])?;
    }
    let cidr = format!("{addr}/{prefix}");
    let res = run_in(p, ns, &dev, &netdev, &cidr, program, timeout);
    // Removal: the device (blocks while a process still has a context on it: rxe has no
    // disassociate), then the netdev, or the namespace with it.
    let del = output(in_ns(ns, "rdma").args(["link", "delete", &dev]));
    if let Err(e) = del {
        if Path::new("/sys/class/infiniband").join(&dev).exists() {
            say(format!("warning: could not delete {dev}: {e}"));
        }
    }
    let gone = match ns {
        Some(ns) => ip(None, &["netns", "delete", ns]),
        None => ip(None, &["link", "delete", &netdev]),
    };
    if let Err(e) = gone {
        say(format!(
            "warning: could not remove {}: {e}",
            ns.unwrap_or(&netdev)
        ));
    }
    res
}

fn run_in(
    p: Provider,
    ns: Option<&str>,
    dev: &str,
    netdev: &str,
    cidr: &str,
    program: &[String],
    timeout: Duration,
) -> Result<u8> {
    if ns.is_some() {
        ip(ns, &["link", "set", "lo", "up"])?;
    }
    ip(ns, &["link", "add", netdev, "type", "dummy"])?;
    ip(ns, &["addr", "add", cidr, "dev", netdev])?;
    ip(ns, &["link", "set", netdev, "up"])?;
    output(in_ns(ns, "rdma").args(["link", "add", dev, "type", p.name(), "netdev", netdev]))?;
    let addr = cidr.split('/').next().unwrap_or(cidr);
    let port = Path::new("/sys/class/infiniband").join(dev).join("ports/1");
    let want = gid_of(addr);
    let t0 = Instant::now();
    loop {
        let state = std::fs::read_to_string(port.join("state")).unwrap_or_default();
        let gid = std::fs::read_to_string(port.join("gids/1")).unwrap_or_default();
        if state.contains("ACTIVE") && (p == Provider::Siw || gid.trim() == want) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            crate::bail!(
                "{dev} not ready after 20 s: port state '{}', GID 1 '{}' (want {want})",
                state.trim(),
                gid.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    say(format!(
        "{dev} on {netdev} ({addr}) in {}, ready in {}",
        ns.map_or("the initial network namespace".to_string(), |n| format!(
            "network namespace {n}"
        )),
        util::fmt_secs(t0.elapsed())
    ));
    let mut cmd = in_ns(ns, &program[0]);
    cmd.args(&program[1..]);
    cmd.envs(variables(p, dev, netdev, addr));
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program[0]))?;
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            break s;
        }
        if t0.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            say(format!(
                "{} killed after {} (timeout)",
                program[0],
                util::fmt_secs(timeout)
            ));
            return Ok(crate::runner::GUEST_FAILED);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c.clamp(0, 255)).unwrap_or(1),
        (None, Some(s)) => u8::try_from((128 + s).clamp(0, 255)).unwrap_or(1),
        _ => 1,
    })
}

/// The IPv4-mapped GID of `addr` as sysfs prints it.
fn gid_of(addr: &str) -> String {
    let o: Vec<u8> = addr.split('.').filter_map(|x| x.parse().ok()).collect();
    match o[..] {
        [a, b, c, d] => format!("0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_variables() {
        assert_eq!(device_name(Provider::Siw, 42), "siw_l42");
        assert_eq!(
            place(Provider::Siw, 42),
            (
                Some("rverbs-42".into()),
                "d0".into(),
                "10.10.0.1".into(),
                24
            )
        );
        assert_eq!(
            place(Provider::Rxe, 300),
            (None, "rvl300".into(), "10.233.1.47".into(), 32)
        );
        assert!(place(Provider::Rxe, 4_194_304).1.len() < 16, "IFNAMSIZ");
        assert_eq!(
            gid_of("10.233.1.47"),
            "0000:0000:0000:0000:0000:ffff:0ae9:012f"
        );
        let v = variables(Provider::Rxe, "rxe_l42", "rvl42", "10.233.0.43");
        let get = |k: &str| v.iter().find(|(n, _)| n == k).map(|(_, x)| x.as_str());
        assert_eq!(get("RVERBS_DEV_A"), Some("rxe_l42"));
        assert_eq!(get("RVERBS_DEV_B"), Some("rxe_l42"));
        assert_eq!(get("RVERBS_ADDR_B"), Some("10.233.0.43"));
        assert_eq!(get("RVERBS_NETDEV_A"), Some("rvl42"));
        assert_eq!(get("RVERBS_GUEST"), Some("local"));
        assert_eq!(get("RVERBS_PROVIDER"), Some("rxe"));
        assert_eq!(module_of(Provider::Siw), "siw");
    }
}
