//! `cargo xtask`: the rverbs test bed. Boots QEMU guests with soft-RoCE (rxe) devices and runs
//! our binaries and tests in them; see `cargo xtask help` and docs/testing.md.

mod build;
mod cpio;
mod host;
mod json;
mod kernel;
mod miri;
mod testcmd;
mod util;
mod vm;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;
use util::{fmt_secs, Result};
use vm::{Display, Guest, Payload, RunSpec, Topo};

/// What `cargo xtask vm --shell` runs: an interactive shell that owns the console, so that
/// Ctrl-C reaches its foreground program (util-linux and busybox `setsid -c` both do that).
const SHELL_SCRIPT: &str = "\
echo 'xtask: guest shell; leave with exit (or Ctrl-A x to kill QEMU)'
if command -v bash >/dev/null; then exec setsid -c bash -i; fi
exec setsid -c sh -i
";

/// Commands `cargo xtask demo` runs in the minimal guest, one per line of output section.
/// The second is a whole rdma_cm connection: server in the background, client, then the
/// server's exit status.
const DEMO_COMMANDS: &[&str] = &[
    "rverbs devinfo -v",
    "rverbs rdma-server -s 10.10.0.1 & sleep 1; rverbs rdma-client -s 10.10.0.1 && wait $!",
];

pub const HELP: &str = "\
cargo xtask: the rverbs test bed (QEMU guests with soft-RoCE devices)

USAGE:
    cargo xtask test [--no-vm | --vm-only] [-- TEST-ARGS...]
        cargo fmt --check, clippy -D warnings, cargo doc -D warnings, host tests, then every
        integration test built with --cfg rverbs_vm in the minimal guest, the host guest and
        the two-node topology. Ends with `xtask: N passed, N failed, N skipped`; exits non-zero on any
        failure. TEST-ARGS go to each libtest binary in the guests (e.g. a test name filter).
        --no-vm: fmt, clippy, doc and host tests only; --vm-only: the VM stages only.
    cargo xtask demo
        Boots the minimal guest, brings up rxe0 and runs: rverbs devinfo -v, then an
        rverbs rdma-server / rdma-client exchange over 10.10.0.1
    cargo xtask vm [--guest minimal|host] [--topo one|two] [--timeout SECS] [--verbose]
                   [--shell | -- CMD...]
        Boots a guest, brings up the topology and runs CMD (by sh; a single argument is a
        shell command line). Prints CMD's output and exits with its exit code. Without CMD:
        runs `rverbs link show; rverbs devinfo`.
            --guest host      (default) this machine's root, read-only over 9p: rdma-core's
                              tools (ibv_*, rping, ib_*_lat...) and any host path are there
            --guest minimal   busybox, the kernel modules and our static rverbs binary only
            --topo one        (default) rxe0 on dummy netdev d0, 10.10.0.1/24
            --topo two        also rxe1 on ve1 (10.20.0.1) and rxe2 on ve2 (10.20.0.2), a
                              veth pair that the traffic between them really crosses
            --timeout SECS    kill the guest after SECS (default 600); a hang is a failure
            --verbose         show the whole console (kernel messages included)
            --shell           an interactive shell in the guest on this terminal (no
                              timeout; its exit status is the command's)
    cargo xtask setup
        Prepares everything (tools, kernel, modules, KVM verdict, static build) and says where.
    cargo xtask help

Everything is set up by the xtask itself and cached in target/vm/ (QEMU and busybox-static
are installed with apt when missing and running as root). Each guest run keeps its console
log and outputs in target/vm/runs/<run>/. Environment:
    RVERBS_VM_KVM=0|1         skip the KVM probe (0: software emulation, 1: KVM)
    RVERBS_GUEST_TARGET=gnu   build the guest binaries with glibc + crt-static, not musl
    RVERBS_VM_FAST_BOOT=0     boot the compressed kernel with SeaBIOS (slower)
    RVERBS_VM_STAGE_TIMEOUT   seconds for each VM stage of `cargo xtask test` (default 900)
    RVERBS_VM_TEST_TIMEOUT    seconds for each test binary in a guest (default 300)
    RVERBS_VM_TEST_THREADS    libtest threads in the guests (default 1)
Inside the guests: RVERBS_VM=1, RVERBS_TOPO, RVERBS_GUEST, RVERBS_DEV_A/B, RVERBS_ADDR_A/B,
RVERBS_NETDEV_A/B (see docs/testing.md).
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        None | Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(0)
        }
        Some("vm") => cmd_vm(&args[1..]),
        Some("demo") => cmd_demo(),
        Some("test") => testcmd::run(&args[1..]),
        Some("setup") => cmd_setup(),
        Some(other) => Err(util::Error(format!(
            "unknown command `{other}` (see `cargo xtask help`)"
        ))),
    };
    match res {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::from(2)
        }
    }
}

fn cmd_setup() -> Result<u8> {
    let t0 = std::time::Instant::now();
    let bed = vm::Bed::prepare()?;
    let (target, rverbs) = build::rverbs_any()?;
    println!("qemu:     {}", bed.tools.qemu.display());
    println!("busybox:  {}", bed.tools.busybox.display());
    println!(
        "kernel:   {} {} ({})",
        bed.kernel.package,
        bed.kernel.release,
        bed.kernel.vmlinuz.display()
    );
    println!("modules:  {}", bed.kernel.modules.len());
    println!("accel:    {:?}", bed.accel);
    println!("rverbs:   {} ({})", rverbs.display(), target.triple());
    println!("ready in {}", fmt_secs(t0.elapsed()));
    Ok(0)
}

fn cmd_vm(args: &[String]) -> Result<u8> {
    let mut guest = Guest::Host;
    let mut topo = Topo::One;
    let mut timeout = Duration::from_secs(600);
    let mut verbose = false;
    let mut shell = false;
    let mut cmd: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next().cloned().ok_or_else(|| {
                util::Error(format!(
                    "{name} needs a value (see `cargo xtask vm --help`)"
                ))
            })
        };
        match a.as_str() {
            "--help" | "-h" => {
                print!("{HELP}");
                return Ok(0);
            }
            "--guest" => {
                let v = value("--guest")?;
                guest = Guest::parse(&v)
                    .ok_or_else(|| format!("--guest must be minimal or host, not `{v}`"))?;
            }
            "--topo" => {
                let v = value("--topo")?;
                topo = Topo::parse(&v)
                    .ok_or_else(|| format!("--topo must be one or two, not `{v}`"))?;
            }
            "--timeout" => {
                let v = value("--timeout")?;
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("--timeout takes seconds, not `{v}`"))?;
                timeout = Duration::from_secs(secs);
            }
            "--verbose" | "-v" => verbose = true,
            "--shell" => shell = true,
            "--" => {
                cmd.extend(it.by_ref().cloned());
            }
            other if other.starts_with('-') => {
                bail!("unknown option `{other}` (see `cargo xtask vm --help`)")
            }
            _ => {
                cmd.push(a.clone());
                cmd.extend(it.by_ref().cloned());
            }
        }
    }
    if shell && !cmd.is_empty() {
        bail!("--shell takes no command");
    }
    if shell && !std::io::stdin().is_terminal() {
        bail!("--shell needs a terminal on stdin");
    }
    let script = match cmd.len() {
        _ if shell => SHELL_SCRIPT.to_string(),
        0 => "rverbs link show; rverbs devinfo\n".to_string(),
        1 => format!("{}\n", cmd[0]),
        _ => format!("{}\n", util::shell_join(&cmd)),
    };
    let bed = vm::Bed::prepare()?;
    let (_, rverbs) = build::rverbs_any()?;
    let payload = Payload {
        rverbs: Some(rverbs),
        ..Default::default()
    };
    let cwd = std::env::current_dir()
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    let spec = RunSpec {
        guest,
        topo,
        label: "vm",
        script,
        cwd: if guest == Guest::Host { cwd } else { None },
        timeout,
        display: if shell {
            Display::Interactive
        } else if verbose {
            Display::Verbose
        } else {
            Display::Command
        },
        payload: &payload,
    };
    eprintln!(
        "xtask: booting the {} guest ({} topology, {:?}, kernel {})",
        guest.name(),
        topo.name(),
        bed.accel,
        bed.kernel.package
    );
    let out = bed.run(&spec)?;
    report_vm(&out);
    Ok(match out.status {
        vm::GuestStatus::Exited(c) => u8::try_from(c.clamp(0, 255)).unwrap_or(1),
        _ => 125,
    })
}

fn report_vm(out: &vm::Outcome) {
    for d in &out.fallback {
        eprintln!("xtask: WARNING: {d} was created with iproute2's `rdma link add` (FALLBACK), not `rverbs link add`");
    }
    let ready = out.ready_after.map(fmt_secs).unwrap_or_else(|| "-".into());
    eprintln!(
        "xtask: {} (ready after {ready}, {} in all); console log: {}",
        out.describe(),
        fmt_secs(out.elapsed),
        out.console_log.display()
    );
    if !matches!(out.status, vm::GuestStatus::Exited(_)) {
        vm::print_tail(&out.console_log, 40);
        eprintln!("{}", out.where_to_look());
    }
}

fn cmd_demo() -> Result<u8> {
    let bed = vm::Bed::prepare()?;
    let (_, rverbs) = build::rverbs_any()?;
    let payload = Payload {
        rverbs: Some(rverbs),
        ..Default::default()
    };
    let mut script = String::new();
    for c in DEMO_COMMANDS {
        script.push_str(&format!(
            "echo '$ {}'\n{c} || exit $?\n",
            c.replace('\'', "")
        ));
    }
    let spec = RunSpec {
        guest: Guest::Minimal,
        topo: Topo::One,
        label: "demo",
        script,
        cwd: None,
        timeout: Duration::from_secs(600),
        display: Display::Command,
        payload: &payload,
    };
    eprintln!(
        "xtask: demo: booting the minimal guest ({:?}), creating rxe0 with `rverbs link add`",
        bed.accel
    );
    let out = bed.run(&spec)?;
    report_vm(&out);
    Ok(if out.success() { 0 } else { 1 })
}
