//! `rverbs-vm`: runs any program — typically a crate's test binary, as cargo's target runner —
//! in a guest with rxe devices, streams its output and returns its exit code.

use crate::kernel::{KernelSpec, DEFAULT_KERNEL};
use crate::util::{self, fmt_secs, say, Result};
use crate::vm::{
    self, Bed, BedConfig, Display, Guest, GuestStatus, Payload, Provider, RunSpec, Topo,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Exit code when the guest failed before or while running the program (set-up failure,
/// crash, hang), as opposed to the program's own exit code.
pub const GUEST_FAILED: u8 = 125;
/// Exit code for a usage or set-up error of the runner itself.
pub const RUNNER_ERROR: u8 = 2;

/// `rverbs-vm help`.
pub const HELP: &str = "\
rverbs-vm: run programs on soft-RoCE (rxe) or soft-iWARP (siw) devices in a QEMU guest
booting Debian's kernel

USAGE:
    rverbs-vm run [OPTIONS] [--] PROGRAM [ARGS...]
        Boots a guest, creates its RDMA devices, runs PROGRAM ARGS from the current directory
        and exits with PROGRAM's exit code; its output is streamed. As cargo's runner:
            CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUNNER=\"rverbs-vm run --\" \\
                cargo test --target x86_64-unknown-linux-musl
    rverbs-vm test [OPTIONS] [-- CARGO-TEST-ARGS...]
        The same, spelled out: `cargo test --target x86_64-unknown-linux-musl` with
        `rverbs-vm run OPTIONS --` as the runner (--target gnu: the host's glibc target).
    rverbs-vm prepare [--kernel K] [--provider siw]
        Installs what is missing (as root), downloads and unpacks the kernel (and builds
        siw.ko for it), and says where.
    rverbs-vm local [--provider rxe|siw] [--timeout SECS] [--] PROGRAM [ARGS...]
        No VM: runs PROGRAM on this machine's own kernel, as root, with one device named
        <provider>_l<pid> on a dummy netdev: siw in a private network namespace (d0,
        10.10.0.1/24), rxe in the initial one (rvl<pid>, 10.233.x.y/32: rxe routes in the
        initial namespace only); the same RVERBS_* variables (RVERBS_GUEST=local, one node);
        everything removed after. Needs the siw (rdma_rxe) module and iproute2.
    rverbs-vm help

OPTIONS (each also from the environment variable named after it):
    --guest auto|minimal|host  RVERBS_VM_GUEST; auto (default): a static PROGRAM runs in the
                           minimal guest (busybox, the modules, PROGRAM), a dynamically linked
                           one in the host guest (this machine's root, read-only)
    --topo one|two         RVERBS_VM_TOPO; one (default): rxe0 on d0, 10.10.0.1; two: rxe1 on
                           ve1 (10.20.0.1) and rxe2 on ve2 (10.20.0.2), joined by a veth pair
    --kernel 6.1|6.12|newest  RVERBS_VM_KERNEL; Debian 12's (default) or Debian 13's kernel,
                           or the newest stable one of Debian 13 backports (what its
                           linux-image-amd64 depends on); 6.12-bpo: Debian 12 backports' 6.12,
                           siw-capable, when named
    --provider rxe|siw     RVERBS_VM_PROVIDER; rxe (default) or siw devices, named the same
                           way (siw0 on d0, siw1/siw2 on ve1/ve2); siw.ko is built for the
                           guest kernel on first use (Debian's kernels do not build siw)
    --timeout SECS         RVERBS_VM_TIMEOUT; kill the guest after SECS (default 600): a hang
                           fails with exit code 125 and the console's last lines
    --rverbs PATH          RVERBS_VM_RVERBS; a static `rverbs` binary to create the devices
                           with (default: iproute2's `rdma link add`)
    --env NAME             pass NAME from this environment into the guest (repeatable; RUST_*,
                           CARGO_* and RVERBS_TEST_* variables are always passed)
    --verbose              show the whole console (kernel messages included)

In the guest: RVERBS_VM=1, RVERBS_GUEST, RVERBS_TOPO, RVERBS_KERNEL, RVERBS_PROVIDER,
RVERBS_DEV_A/B,
RVERBS_ADDR_A/B, RVERBS_NETDEV_A/B. Kernels and package lists are cached in
$RVERBS_TESTBED_CACHE, else $XDG_CACHE_HOME/rverbs-testbed, else ~/.cache/rverbs-testbed.
Exit codes: PROGRAM's; 125 when the guest failed; 2 for a usage or set-up error.
";

/// The guest choice of `--guest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestChoice {
    /// By the program: static → minimal, dynamic → host.
    Auto,
    /// The guest given with `--guest`.
    Fixed(Guest),
}

/// Parsed options of `run` and `test`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// `--guest`.
    pub guest: GuestChoice,
    /// `--topo`.
    pub topo: Topo,
    /// `--kernel`.
    pub kernel: KernelSpec,
    /// `--provider`.
    pub provider: Provider,
    /// `--timeout`: the whole guest run, boot included.
    pub timeout: Duration,
    /// `--rverbs`: a static rverbs binary to create the rxe devices with.
    pub rverbs: Option<PathBuf>,
    /// `--env NAME`s.
    pub env: Vec<String>,
    /// `--verbose`: the whole console.
    pub verbose: bool,
    /// The rest: PROGRAM ARGS for `run`, cargo's arguments for `test`.
    pub rest: Vec<String>,
    /// `test --target gnu`.
    pub gnu: bool,
}

impl Opts {
    /// The bed these options boot (the user's cache).
    pub fn bed_config(&self) -> BedConfig {
        BedConfig {
            provider: self.provider,
            ..BedConfig::user(self.kernel)
        }
    }
}

/// Parses options, starting from the `RVERBS_VM_*` environment given by `env`.
pub fn parse(args: &[String], env: impl Fn(&str) -> Option<String>) -> Result<Opts> {
    let mut o = Opts {
        guest: GuestChoice::Auto,
        topo: Topo::One,
        kernel: DEFAULT_KERNEL,
        provider: Provider::Rxe,
        timeout: Duration::from_secs(600),
        rverbs: None,
        env: Vec::new(),
        verbose: false,
        rest: Vec::new(),
        gnu: false,
    };
    let set = |o: &mut Opts, name: &str, v: &str| -> Result<()> {
        match name {
            "--guest" => {
                o.guest = match v {
                    "auto" => GuestChoice::Auto,
                    _ => GuestChoice::Fixed(Guest::parse(v).ok_or_else(|| {
                        format!("--guest must be auto, minimal or host, not `{v}`")
                    })?),
                }
            }
            "--topo" => {
                o.topo =
                    Topo::parse(v).ok_or_else(|| format!("--topo must be one or two, not `{v}`"))?
            }
            "--kernel" => {
                o.kernel = KernelSpec::parse(v)
                    .ok_or_else(|| format!("--kernel must be {}, not `{v}`", KernelSpec::names()))?
            }
            "--provider" => {
                o.provider = Provider::parse(v)
                    .ok_or_else(|| format!("--provider must be rxe or siw, not `{v}`"))?
            }
            "--timeout" => {
                let s: u64 = v
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("--timeout takes seconds (> 0), not `{v}`"))?;
                o.timeout = Duration::from_secs(s);
            }
            "--rverbs" => o.rverbs = Some(util::absolute(PathBuf::from(v))),
            "--env" => o.env.push(v.to_string()),
            "--target" => {
                o.gnu = match v {
                    "gnu" => true,
                    "musl" => false,
                    _ => crate::bail!("--target must be musl or gnu, not `{v}`"),
                }
            }
            _ => unreachable!(),
        }
        Ok(())
    };
    for (var, opt) in [
        ("RVERBS_VM_GUEST", "--guest"),
        ("RVERBS_VM_TOPO", "--topo"),
        ("RVERBS_VM_KERNEL", "--kernel"),
        ("RVERBS_VM_PROVIDER", "--provider"),
        ("RVERBS_VM_TIMEOUT", "--timeout"),
        ("RVERBS_VM_RVERBS", "--rverbs"),
    ] {
        if let Some(v) = env(var).filter(|v| !v.is_empty()) {
            set(&mut o, opt, &v).map_err(|e| util::Error(format!("{var}: {e}")))?;
        }
    }
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        match name {
            "--guest" | "--topo" | "--kernel" | "--provider" | "--timeout" | "--rverbs"
            | "--env" | "--target" => {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("{name} needs a value (see `rverbs-vm help`)"))?,
                };
                set(&mut o, name, &v)?;
            }
            "--verbose" | "-v" => o.verbose = true,
            "--" => {
                o.rest.extend(it.by_ref().cloned());
            }
            other if other.starts_with('-') && o.rest.is_empty() => {
                crate::bail!("unknown option `{other}` (see `rverbs-vm help`)")
            }
            _ => {
                o.rest.push(a.clone());
                o.rest.extend(it.by_ref().cloned());
            }
        }
    }
    Ok(o)
}

/// Which variables of this environment go into the guest.
pub fn passed_env(
    vars: impl Iterator<Item = (String, String)>,
    named: &[String],
) -> Vec<(String, String)> {
    vars.filter(|(k, _)| {
        named.contains(k)
            || k.starts_with("RUST_")
            || k.starts_with("CARGO_")
            || k.starts_with("RVERBS_TEST_")
    })
    .collect()
}

/// The guest a program runs in when `--guest auto`.
pub fn auto_guest(program: &Path) -> Result<Guest> {
    Ok(if util::elf_is_static(program)? {
        Guest::Minimal
    } else {
        Guest::Host
    })
}

/// Finds PROGRAM as a shell would: a path (made absolute), or a name on `$PATH`.
fn resolve_program(p: &str) -> Result<PathBuf> {
    if p.contains('/') {
        let abs = util::absolute(PathBuf::from(p));
        if !abs.exists() {
            crate::bail!("{p}: no such file");
        }
        return Ok(abs);
    }
    util::which(p).ok_or_else(|| util::Error(format!("{p}: not found on PATH")))
}

/// `rverbs-vm run`: returns the exit code to exit with.
pub fn run(o: &Opts) -> Result<u8> {
    let Some(prog) = o.rest.first() else {
        crate::bail!("`rverbs-vm run` needs a PROGRAM (see `rverbs-vm help`)");
    };
    let program = resolve_program(prog)?;
    let guest = match o.guest {
        GuestChoice::Fixed(g) => g,
        GuestChoice::Auto => auto_guest(&program)?,
    };
    if let Some(r) = &o.rverbs {
        if !util::elf_is_static(r)? {
            crate::bail!(
                "--rverbs {}: not a static binary (the minimal guest has no libraries)",
                r.display()
            );
        }
    }
    let bed = Bed::prepare(&o.bed_config())?;
    let cwd = std::env::current_dir()
        .map_err(|e| format!("no current directory: {e}"))?
        .to_string_lossy()
        .into_owned();
    // Other files named by absolute path in the arguments come along too.
    let mut files = vec![program.clone()];
    files.extend(
        o.rest[1..]
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_file()),
    );
    let payload = Payload {
        rverbs: o.rverbs.clone(),
        files: files.clone(),
        dirs: vec![cwd.clone()],
        host_paths: files,
        env: passed_env(std::env::vars(), &o.env),
        lib_path: vec![],
    };
    let mut words = vec![program.to_string_lossy().into_owned()];
    words.extend(o.rest[1..].iter().cloned());
    let spec = RunSpec {
        guest,
        topo: o.topo,
        label: "run",
        script: format!("{}\n", util::shell_join(&words)),
        cwd: Some(cwd),
        timeout: o.timeout,
        display: if o.verbose {
            Display::Verbose
        } else {
            Display::Command
        },
        payload: &payload,
    };
    say(format!(
        "{}: booting the {} guest ({} topology, {}, kernel {} {}, {:?})",
        program.file_name().unwrap_or_default().to_string_lossy(),
        guest.name(),
        o.topo.name(),
        o.provider.name(),
        bed.kernel.spec.name,
        bed.kernel.release,
        bed.accel
    ));
    let out = bed.run(&spec)?;
    Ok(report(&out))
}

/// Prints how a run ended (and the console's tail when the guest or the program failed
/// badly) and returns the exit code.
pub fn report(out: &vm::Outcome) -> u8 {
    for d in &out.fallback {
        say(format!("WARNING: {d} was created with iproute2's `rdma link add` (FALLBACK), not `rverbs link add`"));
    }
    let ready = out.ready_after.map(fmt_secs).unwrap_or_else(|| "-".into());
    say(format!(
        "{} (guest ready after {ready}, {} in all); console log: {}",
        out.describe(),
        fmt_secs(out.elapsed),
        out.console_log.display()
    ));
    match out.status {
        GuestStatus::Exited(c) => {
            if c >= 128 {
                say(format!("the program was killed by signal {}", c - 128));
                vm::print_tail(&out.console_log, 30);
            }
            u8::try_from(c.clamp(0, 255)).unwrap_or(1)
        }
        _ => {
            vm::print_tail(&out.console_log, 40);
            eprintln!("{}", out.where_to_look());
            GUEST_FAILED
        }
    }
}

/// The value of `CARGO_TARGET_<TRIPLE>_RUNNER` that makes cargo run binaries through us.
pub fn runner_value(me: &Path, args: &[String]) -> String {
    let mut words = vec![me.to_string_lossy().into_owned(), "run".to_string()];
    words.extend(args.iter().cloned());
    words.push("--".into());
    // cargo splits the runner on whitespace (no quoting): refuse words it would split.
    words.join(" ")
}

/// The `run` options that reproduce `o` (for the runner variable of `test`).
pub fn run_args(o: &Opts) -> Vec<String> {
    let mut a = Vec::new();
    if let GuestChoice::Fixed(g) = o.guest {
        a.extend(["--guest".to_string(), g.name().to_string()]);
    }
    a.extend(["--topo".to_string(), o.topo.name().to_string()]);
    a.extend(["--kernel".to_string(), o.kernel.name.to_string()]);
    if o.provider != Provider::Rxe {
        a.extend(["--provider".to_string(), o.provider.name().to_string()]);
    }
    a.extend(["--timeout".to_string(), o.timeout.as_secs().to_string()]);
    if let Some(r) = &o.rverbs {
        a.extend(["--rverbs".to_string(), r.to_string_lossy().into_owned()]);
    }
    for e in &o.env {
        a.extend(["--env".to_string(), e.clone()]);
    }
    if o.verbose {
        a.push("--verbose".into());
    }
    a
}

/// `rverbs-vm test`: `cargo test --target ...` with this program as the runner.
pub fn test(o: &Opts) -> Result<u8> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
    let run_args = run_args(o);
    if run_args
        .iter()
        .chain([&me.to_string_lossy().into_owned()])
        .any(|a| a.contains(char::is_whitespace))
    {
        crate::bail!(
            "cargo splits its runner at spaces: paths and options with spaces cannot be passed"
        );
    }
    let triple = if o.gnu {
        "x86_64-unknown-linux-gnu"
    } else {
        "x86_64-unknown-linux-musl"
    };
    let var = format!(
        "CARGO_TARGET_{}_RUNNER",
        triple.to_uppercase().replace('-', "_")
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["test", "--target", triple])
        .args(&o.rest)
        .env(&var, runner_value(&me, &run_args));
    say(util::show(&cmd));
    let st = cmd.status().map_err(|e| format!("cannot run cargo: {e}"))?;
    Ok(st
        .code()
        .map_or(1, |c| u8::try_from(c.clamp(0, 255)).unwrap_or(1)))
}

/// `rverbs-vm local`: returns the exit code to exit with.
pub fn local(o: &Opts) -> Result<u8> {
    let Some(prog) = o.rest.first() else {
        crate::bail!("`rverbs-vm local` needs a PROGRAM (see `rverbs-vm help`)");
    };
    if o.topo != Topo::One {
        crate::bail!("`rverbs-vm local` has one node only: use `rverbs-vm run --topo two`");
    }
    let mut words = vec![resolve_program(prog)?.to_string_lossy().into_owned()];
    words.extend(o.rest[1..].iter().cloned());
    crate::local::run(o.provider, &words, o.timeout)
}

/// `rverbs-vm prepare`.
pub fn prepare(o: &Opts) -> Result<u8> {
    let t = std::time::Instant::now();
    let cfg = o.bed_config();
    let bed = Bed::prepare(&cfg)?;
    println!("qemu:     {}", bed.tools.qemu.display());
    println!("busybox:  {}", bed.tools.busybox.display());
    println!(
        "kernel:   {} {} ({})",
        bed.kernel.package,
        bed.kernel.release,
        bed.kernel.vmlinuz.display()
    );
    println!("modules:  {}", bed.kernel.modules.len());
    println!("provider: {}", o.provider.name());
    println!("accel:    {:?}", bed.accel);
    println!("cache:    {}", cfg.cache_dir.display());
    println!("ready in {}", fmt_secs(t.elapsed()));
    Ok(0)
}

/// The whole command line of `rverbs-vm`.
pub fn main(args: &[String]) -> u8 {
    util::set_prefix("rverbs-vm");
    let env = |k: &str| std::env::var(k).ok();
    let res = match args.first().map(String::as_str) {
        None | Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(0)
        }
        Some("run") => parse(&args[1..], env).and_then(|o| run(&o)),
        Some("test") => parse(&args[1..], env).and_then(|o| test(&o)),
        Some("prepare") => parse(&args[1..], env).and_then(|o| prepare(&o)),
        Some("local") => parse(&args[1..], env).and_then(|o| local(&o)),
        Some(other) => Err(util::Error(format!(
            "unknown command `{other}` (see `rverbs-vm help`)"
        ))),
    };
    match res {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rverbs-vm: error: {e}");
            RUNNER_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_then_program() {
        let o = parse(
            &args(&[
                "--topo",
                "two",
                "--kernel=6.12",
                "--",
                "/bin/x",
                "--exact",
                "t",
            ]),
            |_| None,
        )
        .unwrap();
        assert_eq!(o.topo, Topo::Two);
        assert_eq!(o.kernel.name, "6.12");
        assert_eq!(o.rest, args(&["/bin/x", "--exact", "t"]));
        // The program's own options are not ours, even without `--`.
        let o = parse(&args(&["./t", "--nocapture"]), |_| None).unwrap();
        assert_eq!(o.rest, args(&["./t", "--nocapture"]));
        assert_eq!(o.guest, GuestChoice::Auto);
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse(&args(&["--topo", "three", "x"]), |_| None).unwrap_err();
        assert!(e.0.contains("--topo") && e.0.contains("three"), "{e}");
        let e = parse(&args(&["--kernel", "5.10"]), |_| None).unwrap_err();
        assert!(e.0.contains("6.1|6.12|newest"), "{e}");
        let o = parse(&args(&["--kernel", "newest", "x"]), |_| None).unwrap();
        assert_eq!(o.kernel.suite, "trixie-backports");
        let e = parse(&args(&["--provider", "efa", "x"]), |_| None).unwrap_err();
        assert!(
            e.0.contains("--provider must be rxe or siw, not `efa`"),
            "{e}"
        );
        let e = parse(&args(&["--timeout"]), |_| None).unwrap_err();
        assert!(e.0.contains("needs a value"), "{e}");
        let e = parse(&args(&["--bogus", "x"]), |_| None).unwrap_err();
        assert!(e.0.contains("unknown option `--bogus`"), "{e}");
        let e = parse(&args(&["x"]), |k| {
            (k == "RVERBS_VM_GUEST").then(|| "big".into())
        })
        .unwrap_err();
        assert!(e.0.starts_with("RVERBS_VM_GUEST:"), "{e}");
    }

    #[test]
    fn environment_then_arguments() {
        let env = |k: &str| match k {
            "RVERBS_VM_TOPO" => Some("two".to_string()),
            "RVERBS_VM_GUEST" => Some("host".to_string()),
            "RVERBS_VM_TIMEOUT" => Some("30".to_string()),
            _ => None,
        };
        let o = parse(&args(&["--topo", "one", "p"]), env).unwrap();
        assert_eq!(o.topo, Topo::One);
        assert_eq!(o.guest, GuestChoice::Fixed(Guest::Host));
        assert_eq!(o.timeout, Duration::from_secs(30));
        assert_eq!(o.provider, Provider::Rxe);
        let o = parse(&args(&["p"]), |k| {
            (k == "RVERBS_VM_PROVIDER").then(|| "siw".into())
        })
        .unwrap();
        assert_eq!(o.provider, Provider::Siw);
        assert_eq!(o.bed_config().provider, Provider::Siw);
        assert!(run_args(&o).windows(2).any(|w| w == ["--provider", "siw"]));
        let o = parse(&args(&["--provider=rxe", "p"]), |k| {
            (k == "RVERBS_VM_PROVIDER").then(|| "siw".into())
        })
        .unwrap();
        assert_eq!(o.provider, Provider::Rxe);
    }

    #[test]
    fn environment_passed_to_the_guest() {
        let vars = [
            ("RUST_LOG", "debug"),
            ("CARGO_MANIFEST_DIR", "/w"),
            ("PATH", "/bin"),
            ("RVERBS_TEST_PEER", "x"),
            ("MY_VAR", "1"),
            ("OTHER", "2"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()));
        let got = passed_env(vars.into_iter(), &args(&["MY_VAR"]));
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "RUST_LOG",
                "CARGO_MANIFEST_DIR",
                "RVERBS_TEST_PEER",
                "MY_VAR"
            ]
        );
    }

    #[test]
    fn runner_variable() {
        let v = runner_value(Path::new("/u/bin/rverbs-vm"), &args(&["--topo", "two"]));
        assert_eq!(v, "/u/bin/rverbs-vm run --topo two --");
        let o = parse(
            &args(&[
                "--topo",
                "two",
                "--guest",
                "host",
                "--target",
                "gnu",
                "--",
                "--release",
            ]),
            |_| None,
        )
        .unwrap();
        assert!(o.gnu);
        assert_eq!(o.rest, args(&["--release"]));
        assert_eq!(
            run_args(&o),
            args(&[
                "--guest",
                "host",
                "--topo",
                "two",
                "--kernel",
                "6.1",
                "--timeout",
                "600"
            ])
        );
    }

    #[test]
    fn static_programs_go_to_the_minimal_guest() {
        let me = std::env::current_exe().unwrap();
        let want = if cfg!(target_env = "musl") {
            Guest::Minimal
        } else {
            Guest::Host
        };
        assert_eq!(auto_guest(&me).unwrap(), want);
        assert!(resolve_program("/no/such/prog")
            .unwrap_err()
            .0
            .contains("no such file"));
        assert!(resolve_program("sh").is_ok());
    }
}
