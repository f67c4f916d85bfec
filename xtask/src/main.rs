//! `cargo xtask`: the rverbs test bed. Boots QEMU guests with soft-RoCE (rxe) devices and runs
//! our binaries and tests in them; see `cargo xtask help` and docs/testing.md.

mod alone;
mod build;
mod capi;
mod changelog;
mod fuzz;
mod json;
mod load;
mod miri;
mod mlx5_oracle;
mod package;
mod publicapi;
mod stageplan;
mod testcmd;
mod usercrate;
mod util;

// The bed itself is the crate rverbs-testbed (crates/testbed), shared with `rverbs-vm`.
pub use rverbs_testbed::{kernel, packages, siw, vm};

use kernel::KernelSpec;
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
    cargo xtask test [--no-vm | --vm-only] [--kernel 6.1|6.12|newest|all] [--stage PART,...]
                     [--load N] [-- TEST-ARGS...]
        Installs the Debian packages it needs (as root; otherwise it stops with the apt-get
        line), then cargo fmt --check, clippy -D warnings, cargo doc -D warnings, host tests,
        then every integration test built with --cfg rverbs_vm in the guests (the stages of
        testcmd.rs: per kernel, the minimal and host guests, one and two nodes), the runner's
        boot tests and examples/user-crate through `rverbs-vm`. Ends with
        `xtask: N passed, N failed, N skipped`; exits non-zero on any failure. TEST-ARGS go to
        each libtest binary in the guests (e.g. a test name filter).
        --no-vm: the host stages only (fmt, clippy, crates alone, doc, host tests, ...);
        --vm-only: the VM stages only;
        --kernel: only that kernel's VM stages (default all: three kernels); --stage: only
        the stages whose name contains one of the PARTs (e.g. `--stage 6.12,user`);
        --load N: N CPU-bound processes run beside the whole run and are killed at its end
        (default: RVERBS_TEST_LOAD, else 0): the suite must pass on a loaded machine.
    cargo xtask demo [--kernel 6.1|6.12|newest]
        Boots the minimal guest, brings up rxe0 and runs: rverbs devinfo -v, then an
        rverbs rdma-server / rdma-client exchange over 10.10.0.1
    cargo xtask vm [--guest minimal|host] [--topo one|two] [--kernel K] [--timeout SECS]
                   [--provider rxe|siw] [--verbose] [--shell | -- CMD...]
        Boots a guest, brings up the topology and runs CMD (by sh; a single argument is a
        shell command line). Prints CMD's output and exits with its exit code. Without CMD:
        runs `rverbs link show; rverbs devinfo`.
            --guest host      (default) this machine's root, read-only over 9p: rdma-core's
                              tools (ibv_*, rping, ib_*_lat...) and any host path are there
            --guest minimal   busybox, the kernel modules and our static rverbs binary only
            --topo one        (default) rxe0 on dummy netdev d0, 10.10.0.1/24
            --topo two        also rxe1 on ve1 (10.20.0.1) and rxe2 on ve2 (10.20.0.2), a
                              veth pair that the traffic between them really crosses
            --kernel 6.1      (default) Debian 12's kernel; 6.12: Debian 13's; newest:
                              the newest stable kernel of Debian 13 backports (what its
                              linux-image-amd64 depends on: 7.3 in December 2026);
                              6.12-bpo: Debian 12 backports' 6.12
            --provider siw    siw devices instead of rxe (siw0 on d0, siw1/siw2 on ve1/ve2);
                              siw.ko is built for the kernel once and cached (for a
                              kernel of another Debian release than the host's, in a
                              build root of that release made from Debian's archive)
            --timeout SECS    kill the guest after SECS (default 600); a hang is a failure
            --verbose         show the whole console (kernel messages included)
            --shell           an interactive shell in the guest on this terminal (no
                              timeout; its exit status is the command's)
    cargo xtask capi [--release]
        Builds the C drop-in (crates/capi): target/capi/lib/libibverbs.so.1 and librverbs.a,
        and checks that it exports every ibv_* symbol version rdma-core's tools import
        (docs/capi.md). `cargo xtask test` runs it as its `capi` stage.
    cargo xtask mlx5-oracle [--check | --script FILE | --bench]
        Regenerates the golden dumps of libmlx5 for crates/provider/tests/mlx5_oracle/*.script
        (--check: proves the committed ones are what libmlx5 gives; --script: runs FILE
        through libmlx5 and rverbs and prints `identical` or the first difference; --bench:
        the posting benchmark of docs/mlx5.md, libmlx5 and rverbs side by side).
    cargo xtask efa-oracle [--check | --script FILE | --bench]
        The same for libefa (rdma-core 44) and crates/provider/tests/efa_oracle/*.script
        (docs/efa.md; --bench: crates/provider/benches/efa_post/).
    cargo xtask public-api [--bless]
        Compares the public surface of the library crates (rustdoc JSON, nightly) with the
        committed inventory api/<crate>.txt; --bless rewrites it. `cargo xtask test` runs it
        as its `public api` stage: every new public item is a reviewed change.
        Its `changelog` stage checks that every commit changing api/ adds a CHANGELOG.md line.
    cargo xtask fuzz [--seconds N] [TARGET...]
        Builds the fuzz targets of fuzz/ (nightly toolchain, libFuzzer, AddressSanitizer) and
        runs each (default: all) for N seconds (default 10) over target/fuzz/corpus/TARGET
        plus the seeds in fuzz/corpus/TARGET; a crash is a failure and its input is saved in
        target/fuzz/artifacts/TARGET/. `cargo xtask test` runs it as its `fuzz` stage.
    cargo xtask setup [--kernel 6.1|6.12|newest|all]
        Prepares everything (packages, kernels, modules, KVM verdict, static build), says where.
    cargo xtask help

Everything is set up by the xtask itself and cached in target/vm/ (the Debian packages of
crates/testbed/src/packages.rs are installed with apt when missing and running as root).
Each guest run keeps its console log and outputs in target/vm/runs/<run>/. Environment:
    RVERBS_VM_KVM=0|1         skip the KVM probe (0: software emulation, 1: KVM)
    RVERBS_VM_KVM_REPROBE=1   probe KVM again (once per run) although a verdict is cached
    RVERBS_GUEST_TARGET=gnu   build the guest binaries with glibc + crt-static, not musl
    RVERBS_VM_FAST_BOOT=0     boot the compressed kernel with SeaBIOS (slower)
    RVERBS_VM_STAGE_TIMEOUT   seconds for each VM stage of `cargo xtask test` (default 900)
    RVERBS_VM_TEST_TIMEOUT    seconds for each test binary in a guest (default 300)
    RVERBS_VM_TEST_THREADS    libtest threads in the guests (default 1)
    RVERBS_TEST_LOAD=N        `cargo xtask test --load N` when --load is not given
Inside the guests: RVERBS_VM=1, RVERBS_TOPO, RVERBS_GUEST, RVERBS_KERNEL, RVERBS_DEV_A/B,
RVERBS_ADDR_A/B, RVERBS_NETDEV_A/B (see docs/testing.md).
";

fn main() -> ExitCode {
    util::set_prefix("xtask");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        None | Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(0)
        }
        Some("vm") => cmd_vm(&args[1..]),
        Some("demo") => cmd_demo(&args[1..]),
        Some("test") => testcmd::run(&args[1..]),
        Some("capi") => capi::cmd(&args[1..]),
        Some("mlx5-oracle") => mlx5_oracle::run(&mlx5_oracle::MLX5, &args[1..]),
        Some("efa-oracle") => mlx5_oracle::run(&mlx5_oracle::EFA, &args[1..]),
        Some("public-api") => publicapi::cmd(&args[1..]),
        Some("fuzz") => fuzz::cmd(&args[1..]),
        Some("setup") => cmd_setup(&args[1..]),
        // `--load`'s busy processes (not for people: see load.rs).
        Some("__busy") => load::busy(),
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

/// `--kernel K` (`all` when `allow_all`): the kernels it names; `default` when absent.
pub fn parse_kernels(v: &str, allow_all: bool) -> Result<Vec<KernelSpec>> {
    if v == "all" && allow_all {
        return Ok(kernel::KERNELS.to_vec());
    }
    let all = if allow_all { "|all" } else { "" };
    KernelSpec::parse(v).map(|k| vec![k]).ok_or_else(|| {
        util::Error(format!(
            "--kernel must be {}{all}, not `{v}`",
            KernelSpec::names()
        ))
    })
}

/// Takes `--kernel K` out of `args` (for commands without other options).
fn kernel_arg(args: &[String], allow_all: bool, default: &[KernelSpec]) -> Result<Vec<KernelSpec>> {
    match args {
        [] => Ok(default.to_vec()),
        [k, v] if k == "--kernel" => parse_kernels(v, allow_all),
        [a, ..] => bail!("unexpected `{a}` (see `cargo xtask help`)"),
    }
}

fn cmd_setup(args: &[String]) -> Result<u8> {
    let t0 = std::time::Instant::now();
    let kernels = kernel_arg(args, true, kernel::KERNELS)?;
    packages::ensure(packages::Need::Test, "xtask")?;
    let mut beds = Vec::new();
    for k in kernels {
        beds.push(vm::Bed::prepare(&util::bed_config(k))?);
    }
    // The Debian 13 userland (rdma-core 56, pyverbs 56) of the host guests' trixie stage.
    let t_user = std::time::Instant::now();
    let userland = rverbs_testbed::userland::prepare(&util::vm_dir())?;
    let user_secs = t_user.elapsed();
    let (target, rverbs) = build::rverbs_any()?;
    let bed = &beds[0];
    println!("qemu:     {}", bed.tools.qemu.display());
    println!("busybox:  {}", bed.tools.busybox.display());
    for bed in &beds {
        println!(
            "kernel {}: {} {} ({}, {} modules)",
            bed.kernel.spec.name,
            bed.kernel.package,
            bed.kernel.release,
            bed.kernel.vmlinuz.display(),
            bed.kernel.modules.len()
        );
    }
    println!("accel:    {:?}: {}", bed.accel, bed.accel_why);
    println!(
        "userland: Debian 13 (rdma-core 56, pyverbs 56) in {} ({})",
        userland.display(),
        fmt_secs(user_secs)
    );
    println!("rverbs:   {} ({})", rverbs.display(), target.triple());
    println!("ready in {}", fmt_secs(t0.elapsed()));
    Ok(0)
}

fn cmd_vm(args: &[String]) -> Result<u8> {
    let mut guest = Guest::Host;
    let mut topo = Topo::One;
    let mut kernel = kernel::DEFAULT_KERNEL;
    let mut provider = vm::Provider::Rxe;
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
            "--kernel" => kernel = parse_kernels(&value("--kernel")?, false)?[0],
            "--provider" => {
                let v = value("--provider")?;
                provider = vm::Provider::parse(&v)
                    .ok_or_else(|| format!("--provider must be rxe or siw, not `{v}`"))?;
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
    let bed = vm::Bed::prepare(&vm::BedConfig {
        provider,
        ..util::bed_config(kernel)
    })?;
    let (_, rverbs) = build::rverbs_any()?;
    // Files named by path on the command line go into the minimal guest at that path, and
    // the host guest sees them even under /tmp or /run.
    let named: Vec<std::path::PathBuf> = cmd
        .iter()
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute() && p.is_file())
        .collect();
    let mut host_paths = vec![util::workspace_root(), util::target_dir()];
    host_paths.extend(named.iter().cloned());
    let payload = Payload {
        rverbs: Some(rverbs),
        files: if guest == Guest::Minimal {
            named
        } else {
            vec![]
        },
        host_paths,
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
        "xtask: booting the {} guest ({} topology, {}, {:?}, kernel {} {}: {})",
        guest.name(),
        topo.name(),
        provider.name(),
        bed.accel,
        bed.kernel.spec.name,
        bed.kernel.release,
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

fn cmd_demo(args: &[String]) -> Result<u8> {
    let kernel = kernel_arg(args, false, &[kernel::DEFAULT_KERNEL])?[0];
    let bed = vm::Bed::prepare(&util::bed_config(kernel))?;
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
        "xtask: demo: booting the minimal guest ({:?}, kernel {} {}), creating rxe0 with `rverbs link add`",
        bed.accel, bed.kernel.spec.name, bed.kernel.release
    );
    let out = bed.run(&spec)?;
    report_vm(&out);
    Ok(if out.success() { 0 } else { 1 })
}
