//! Boots a test-bed guest under QEMU, runs a command inside and gets its output and exit
//! status back (status file on the run share, console marker as a backup).

use crate::cpio::Cpio;
use crate::host::{self, HostTools};
use crate::kernel::{self, Kernel, KernelSpec};
use crate::packages::{self, Need};
use crate::util::{self, fmt_secs, say, Context, Result};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const INIT: &str = include_str!("../guest/init.sh");
const STAGE2: &str = include_str!("../guest/stage2.sh");
/// Runs kept under target/vm/runs/ (older ones are deleted).
const KEEP_RUNS: usize = 30;
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// The two guests.
pub enum Guest {
    /// busybox, the modules and our static binaries only.
    Minimal,
    /// This machine's root, read-only over 9p, so rdma-core's tools are there too.
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// The two topologies (docs/testing.md).
pub enum Topo {
    /// `rxe0` on the dummy netdev `d0`.
    One,
    /// `rxe1`/`rxe2` on the veth pair `ve1`/`ve2` (and `rxe0`).
    Two,
}

impl Guest {
    /// `minimal` or `host`.
    pub fn parse(s: &str) -> Option<Guest> {
        match s {
            "minimal" => Some(Guest::Minimal),
            "host" => Some(Guest::Host),
            _ => None,
        }
    }
    /// The name `parse` takes.
    pub fn name(self) -> &'static str {
        match self {
            Guest::Minimal => "minimal",
            Guest::Host => "host",
        }
    }
}

impl Topo {
    /// `one` or `two`.
    pub fn parse(s: &str) -> Option<Topo> {
        match s {
            "one" => Some(Topo::One),
            "two" => Some(Topo::Two),
            _ => None,
        }
    }
    /// The name `parse` takes.
    pub fn name(self) -> &'static str {
        match self {
            Topo::One => "one",
            Topo::Two => "two",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// The software RDMA device the guests get (docs/testing.md).
pub enum Provider {
    /// Soft-RoCE: `rxe0` on `d0` (and `rxe1`/`rxe2` in the two-node topology).
    Rxe,
    /// Soft-iWARP: `siw0` on `d0` (and `siw1`/`siw2`), with `siw.ko` built for the guest
    /// kernel ([`crate::siw`]).
    Siw,
}

impl Provider {
    /// `rxe` or `siw`.
    pub fn parse(s: &str) -> Option<Provider> {
        match s {
            "rxe" => Some(Provider::Rxe),
            "siw" => Some(Provider::Siw),
            _ => None,
        }
    }
    /// The name `parse` takes (also the device names' prefix and the link type).
    pub fn name(self) -> &'static str {
        match self {
            Provider::Rxe => "rxe",
            Provider::Siw => "siw",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// How QEMU runs the guest.
pub enum Accel {
    /// Software emulation.
    Tcg,
    /// KVM (only when a test boot proved it works).
    Kvm,
}

/// What to show on the terminal while the guest runs (everything goes to console.log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// The command's output on stdout, test-bed messages on stderr, kernel messages hidden.
    Command,
    /// Test-bed messages and test progress lines only.
    Progress,
    /// The whole console.
    Verbose,
    /// The console is this terminal (stdin included); nothing is logged.
    Interactive,
}

/// Where a bed keeps things and which kernel it boots.
#[derive(Debug, Clone)]
pub struct BedConfig {
    /// Kernels, package lists and the KVM verdict (kept between runs).
    pub cache_dir: PathBuf,
    /// One directory per guest run (console log, outputs); the newest 30 are kept.
    pub runs_dir: PathBuf,
    /// The kernel to boot.
    pub kernel: KernelSpec,
    /// The RDMA devices the guests get.
    pub provider: Provider,
}

impl BedConfig {
    /// The runner's defaults: everything under the user's cache directory
    /// ([`util::user_cache_dir`]), runs in its `runs/`.
    pub fn user(kernel: KernelSpec) -> BedConfig {
        let cache_dir = util::user_cache_dir();
        BedConfig {
            runs_dir: cache_dir.join("runs"),
            cache_dir,
            kernel,
            provider: Provider::Rxe,
        }
    }
}

/// Everything a boot needs that does not change between runs.
pub struct Bed {
    /// QEMU and busybox.
    pub tools: HostTools,
    /// The kernel and its modules.
    pub kernel: Kernel,
    /// TCG or KVM (probed once, cached).
    pub accel: Accel,
    /// Why [`Bed::accel`] is what it is: the probe's outcome (a boot that reached init, one
    /// that ended without, one that hung until its limit, one that could not start), read
    /// from the cache or just probed, or the setting that skipped the probe.
    pub accel_why: String,
    /// Where things are kept.
    pub config: BedConfig,
    base_initrd: Vec<u8>,
}

/// Our binaries for a run.
#[derive(Default, Clone)]
pub struct Payload {
    /// The static `rverbs` binary: /bin/rverbs in the minimal guest, on `$PATH` in both; the
    /// guests create their rxe devices with it (`rverbs link add`). Without it they use
    /// iproute2's `rdma link add` (the host's, with its libraries, in the minimal guest).
    pub rverbs: Option<PathBuf>,
    /// Files the minimal guest needs at the same absolute path as on this machine (test
    /// binaries, the binaries they run; a dynamically linked one brings its libraries); the
    /// host guest sees them through its root share.
    pub files: Vec<PathBuf>,
    /// Directories to create in the minimal guest (the tests' working directories).
    pub dirs: Vec<String>,
    /// Host paths the host guest must see although they are under /tmp or /run (which it
    /// covers with a tmpfs): a workspace, a target directory.
    pub host_paths: Vec<PathBuf>,
    /// Environment variables exported to the command in the guest (after the bed's own).
    pub env: Vec<(String, String)>,
    /// Directories searched first (as `LD_LIBRARY_PATH`) when the libraries of the dynamic
    /// `files` are looked up for the minimal guest: a program is brought along with, say, the
    /// C drop-in's `libibverbs.so.1` instead of the system's.
    pub lib_path: Vec<PathBuf>,
}

/// One guest run.
pub struct RunSpec<'a> {
    /// Which guest.
    pub guest: Guest,
    /// Which topology.
    pub topo: Topo,
    /// Short name for the run directory.
    pub label: &'a str,
    /// Shell script run by stage 2 as cmd.sh.
    pub script: String,
    /// Working directory for the script (when it exists in the guest).
    pub cwd: Option<String>,
    /// Killed after this (boot included); a hang is reported as such.
    pub timeout: Duration,
    /// What the terminal shows.
    pub display: Display,
    /// The binaries to bring.
    pub payload: &'a Payload,
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// How a guest run ended.
pub enum GuestStatus {
    /// The command ran; its exit code.
    Exited(i32),
    /// Stage 1 or 2 failed before the command ran (modules, mounts, rxe).
    SetupFailed,
    /// No status came back: crash, panic, hang (timeout) or QEMU failure.
    Lost(String),
}

/// What a guest run produced.
pub struct Outcome {
    /// How it ended.
    pub status: GuestStatus,
    /// Its run directory (kept).
    pub run_dir: PathBuf,
    /// The whole serial console.
    pub console_log: PathBuf,
    /// From QEMU's start to the guest's "ready" (command about to run).
    pub ready_after: Option<Duration>,
    /// QEMU's start to its end.
    pub elapsed: Duration,
    /// rxe devices that were created with iproute2's fallback instead of `rverbs link add`.
    pub fallback: Vec<String>,
    /// Lines of the console marked as errors by the guest scripts.
    pub errors: Vec<String>,
    /// The console log of an earlier boot of this run whose kernel crashed on an `int3` trap
    /// ([`Bed::run`] boots once more then).
    pub crashed_boot: Option<PathBuf>,
}

impl Outcome {
    /// The command ran and exited 0.
    pub fn success(&self) -> bool {
        self.status == GuestStatus::Exited(0)
    }

    /// One line saying how the run ended.
    pub fn describe(&self) -> String {
        match &self.status {
            GuestStatus::Exited(c) => format!("command exited with code {c}"),
            GuestStatus::SetupFailed => format!(
                "guest set-up failed before the command ran{}",
                self.errors
                    .first()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
            GuestStatus::Lost(why) => format!("guest returned no status: {why}"),
        }
    }

    /// A report of where to look; printed for every failure.
    pub fn where_to_look(&self) -> String {
        format!(
            "console log: {}\nrun directory: {}",
            self.console_log.display(),
            self.run_dir.display()
        )
    }
}

impl Bed {
    /// Host tools (installed when missing and root), kernel, base initramfs and the KVM
    /// verdict (all cached in `config.cache_dir`). Says what it does on stderr.
    pub fn prepare(config: &BedConfig) -> Result<Bed> {
        let mut bed = Bed::set_up(config)?;
        (bed.accel, bed.accel_why) = bed.choose_accel(&config.cache_dir);
        Ok(bed)
    }

    /// [`Bed::prepare`] for several configurations, with their KVM probes at the same time:
    /// everything else is set up one configuration after the other (downloads, packages),
    /// then one probe per kernel whose verdict is not cached runs, all at once. A probe on a
    /// host where KVM hangs waits its whole limit (20 s) on an idle QEMU, so three kernels
    /// probed in turn cost a fresh cache a minute; at once they cost the limit once. The
    /// verdicts are the same: each kernel is still probed with its own boot.
    pub fn prepare_all(configs: &[BedConfig]) -> Vec<Result<Bed>> {
        let mut beds: Vec<Result<Bed>> = configs.iter().map(Bed::set_up).collect();
        // One probe per verdict file; a second configuration with the same file reads it
        // afterwards.
        let mut probing: Vec<usize> = Vec::new();
        for (i, b) in beds.iter().enumerate() {
            if let Ok(b) = b {
                let file = b.verdict_file(&b.config.cache_dir);
                let dup = probing.iter().any(|&j| match &beds[j] {
                    Ok(o) => o.verdict_file(&o.config.cache_dir) == file,
                    Err(_) => false,
                });
                if !dup {
                    probing.push(i);
                }
            }
        }
        let verdicts: Vec<(usize, (Accel, String))> = std::thread::scope(|s| {
            let handles: Vec<_> = probing
                .iter()
                .filter_map(|&i| {
                    let b = beds[i].as_ref().ok()?;
                    Some((i, s.spawn(move || b.choose_accel(&b.config.cache_dir))))
                })
                .collect();
            handles
                .into_iter()
                .map(|(i, h)| {
                    let v = h.join();
                    (
                        i,
                        v.unwrap_or((Accel::Tcg, "the KVM probe panicked".into())),
                    )
                })
                .collect()
        });
        for (i, verdict) in verdicts {
            if let Ok(b) = &mut beds[i] {
                (b.accel, b.accel_why) = verdict;
            }
        }
        for (i, b) in beds.iter_mut().enumerate() {
            if let Ok(b) = b {
                if !probing.contains(&i) {
                    (b.accel, b.accel_why) = b.choose_accel(&b.config.cache_dir);
                }
            }
        }
        beds
    }

    /// Everything of [`Bed::prepare`] but the KVM verdict (left at TCG).
    fn set_up(config: &BedConfig) -> Result<Bed> {
        let vm_dir = &config.cache_dir;
        fs::create_dir_all(vm_dir).context(|| format!("cannot create {}", vm_dir.display()))?;
        let tools = host::ensure()?;
        if config.provider == Provider::Siw {
            // Before the kernel: a missing package stops the command at once.
            packages::ensure(Need::Siw, util::prefix())?;
        }
        let mut kernel = kernel::prepare(vm_dir, config.kernel)?;
        if config.provider == Provider::Siw {
            let siw = crate::siw::prepare(vm_dir, &kernel)?;
            kernel.modules.extend(siw);
        }
        let base_initrd = base_initramfs(&tools, &kernel)?;
        Ok(Bed {
            tools,
            kernel,
            accel: Accel::Tcg,
            accel_why: "not chosen yet".into(),
            config: config.clone(),
            base_initrd,
        })
    }

    /// Where the KVM verdict for this bed's kernel is cached.
    fn verdict_file(&self, vm_dir: &Path) -> PathBuf {
        vm_dir.join(format!("kvm-verdict-{}", self.kernel.spec.suite))
    }

    /// The accelerator and why: `RVERBS_VM_KVM` if set, TCG without a usable /dev/kvm, else
    /// the cached verdict for this kernel package and QEMU, else a probe boot's, cached with
    /// its reason. A cached verdict stands, whatever it is, until `RVERBS_VM_KVM_REPROBE=1`
    /// (or a new kernel package or QEMU) asks for a new probe: a probe that hung costs its
    /// whole limit (20 s) on every run that repeated it.
    fn choose_accel(&self, vm_dir: &Path) -> (Accel, String) {
        match std::env::var("RVERBS_VM_KVM").as_deref() {
            Ok("0") => return (Accel::Tcg, "RVERBS_VM_KVM=0".into()),
            Ok("1") => return (Accel::Kvm, "RVERBS_VM_KVM=1".into()),
            _ => {}
        }
        if let Err(e) = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
        {
            return (Accel::Tcg, format!("/dev/kvm: {e}"));
        }
        let cache = self.verdict_file(vm_dir);
        let key = format!("{} {}", self.kernel.package, self.tools.qemu.display());
        // Once per verdict file and process: the stages that prepare a bed again (siw,
        // trixie, the runner) take the verdict the first probe of this run cached.
        static REPROBED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
        let reprobe = std::env::var("RVERBS_VM_KVM_REPROBE").as_deref() == Ok("1") && {
            let mut done = REPROBED.lock().unwrap_or_else(|e| e.into_inner());
            let first = !done.contains(&cache);
            if first {
                done.push(cache.clone());
            }
            first
        };
        if let Ok(v) = fs::read_to_string(&cache) {
            match v.trim().strip_prefix(&key).and_then(parse_verdict) {
                Some(_) if reprobe => say(format!(
                    "RVERBS_VM_KVM_REPROBE=1: probing KVM again (cached: {})",
                    v.trim()
                )),
                Some((accel, why)) => {
                    return (accel, format!("{why} (cached in {})", cache.display()));
                }
                None => {}
            }
        }
        say(format!(
            "probing KVM with a test boot ({} s at most, the verdict is cached in {})",
            KVM_PROBE_TIMEOUT.as_secs(),
            cache.display()
        ));
        let (verdict, why) = match self.probe_kvm(vm_dir) {
            Ok(Probe::Booted) => (Accel::Kvm, "the KVM probe boot reached init".to_string()),
            Ok(Probe::Ended) => (
                Accel::Tcg,
                "the KVM probe boot ended without reaching init".to_string(),
            ),
            Ok(Probe::Hung(t)) => (
                Accel::Tcg,
                format!(
                    "the KVM probe boot timed out (killed after {})",
                    fmt_secs(t)
                ),
            ),
            Err(e) => (Accel::Tcg, format!("the KVM probe failed: {e}")),
        };
        say(if verdict == Accel::Kvm {
            "KVM works: using it".to_string()
        } else {
            format!("{why}: using software emulation (TCG)")
        });
        // One line: the key, the verdict, and after a colon why (no line break in it).
        let why_line = why.replace('\n', " ");
        let _ = fs::write(
            &cache,
            format!(
                "{key} {}: {why_line}\n",
                if verdict == Accel::Kvm { "kvm" } else { "tcg" }
            ),
        );
        (verdict, why)
    }

    fn probe_kvm(&self, vm_dir: &Path) -> Result<Probe> {
        // Named by the suite: the probes of several kernels may run at once (prepare_all).
        let suite = self.kernel.spec.suite;
        let initrd = vm_dir.join(format!("probe-initrd-{suite}.img"));
        fs::write(&initrd, &self.base_initrd)
            .context(|| format!("cannot write {}", initrd.display()))?;
        let mut cmd = self.qemu(Accel::Kvm, &initrd, "rverbs.probe=1");
        let log = vm_dir.join(format!("kvm-probe-{suite}.log"));
        let mut seen = false;
        let started = Instant::now();
        let r = drive(&mut cmd, &log, KVM_PROBE_TIMEOUT, |line| {
            if line.contains("RVERBS-VM-PROBE-OK") {
                seen = true;
            }
        });
        let _ = fs::remove_file(&initrd);
        let (_, timed_out) = r?;
        Ok(if timed_out {
            Probe::Hung(started.elapsed())
        } else if seen {
            Probe::Booted
        } else {
            Probe::Ended
        })
    }

    fn qemu(&self, accel: Accel, initrd: &Path, extra_append: &str) -> Command {
        let mut cmd = Command::new(&self.tools.qemu);
        match accel {
            Accel::Tcg => cmd.args(["-accel", "tcg", "-cpu", "max"]),
            Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "host"]),
        };
        cmd.args(["-smp", "2", "-m", &guest_memory(initrd)]);
        cmd.args(["-nographic", "-no-reboot", "-nic", "none"]);
        // Fast boot (several seconds less under emulation): the uncompressed kernel through its
        // PVH entry and, when QEMU ships it, the minimal qboot firmware instead of SeaBIOS.
        let fast = std::env::var("RVERBS_VM_FAST_BOOT").as_deref() != Ok("0");
        match &self.kernel.vmlinux {
            Some(elf) if fast => cmd.arg("-kernel").arg(elf),
            _ => cmd.arg("-kernel").arg(&self.kernel.vmlinuz),
        };
        let qboot = Path::new("/usr/share/qemu/qboot.rom");
        if fast && qboot.exists() {
            cmd.arg("-bios").arg(qboot);
        }
        cmd.arg("-initrd").arg(initrd);
        // no_timer_check: under emulation on a loaded host the kernel's early check that the
        // 8254 timer interrupt arrives can miss its window ("MP-BIOS bug: 8254 timer not
        // connected to IO-APIC") and the boot then stalls; the timer does work in QEMU.
        let append =
            format!("console=ttyS0 panic=-1 no_timer_check quiet loglevel=4 {extra_append}");
        cmd.arg("-append").arg(append.trim_end());
        cmd
    }

    /// Boots a guest, runs `spec.script` in it and collects the result.
    ///
    /// A guest whose kernel dies of an `int3` trap in its own code (`Oops: int3`) is booted
    /// once more, saying so on stderr; the outcome names the crashed boot's console. That
    /// trap is how Linux's run-time code patching (static keys flipped while the other vCPU
    /// runs: seen on 6.12 at boot and when rxe enables UDP encapsulation) meets QEMU's
    /// multi-threaded TCG now and then; no test of ours sets a breakpoint in the kernel, and
    /// any other crash, or a second one, is reported as it is (docs/testing.md).
    pub fn run(&self, spec: &RunSpec) -> Result<Outcome> {
        let first = self.run_once(spec)?;
        if !matches!(first.status, GuestStatus::Lost(_)) || !int3_oops(&first.console_log) {
            return Ok(first);
        }
        eprintln!(
            "rverbs-vm: WARNING: the guest kernel crashed on an int3 trap (run-time code \
             patching under TCG; console: {}): booting once more",
            first.console_log.display()
        );
        let mut again = self.run_once(spec)?;
        again.crashed_boot = Some(first.console_log);
        Ok(again)
    }

    fn run_once(&self, spec: &RunSpec) -> Result<Outcome> {
        let run_dir = new_run_dir(&self.config.runs_dir, spec.label)?;
        let console_log = run_dir.join("console.log");
        // The run share: scripts in, status and logs out.
        let mut env = format!(
            "RVERBS_GUEST={}\nRVERBS_TOPO={}\n",
            spec.guest.name(),
            spec.topo.name()
        );
        if spec.guest == Guest::Host {
            let mut needed = spec.payload.host_paths.clone();
            needed.extend(spec.cwd.iter().map(PathBuf::from));
            needed.extend(spec.payload.files.iter().cloned());
            needed.extend(spec.payload.rverbs.iter().cloned());
            let binds = hidden_host_paths(&needed);
            env.push_str(&format!(
                "RVERBS_HOST_BINDS={}\n",
                util::shell_quote(&binds.join(" "))
            ));
        }
        if let Some(cwd) = &spec.cwd {
            env.push_str(&format!("RVERBS_CWD={}\n", util::shell_quote(cwd)));
        }
        env.push_str(&format!(
            "RVERBS_RXE_TOOL={}\nRVERBS_KERNEL={}\nRVERBS_PROVIDER={}\n",
            if spec.payload.rverbs.is_some() {
                "rverbs"
            } else {
                "rdma"
            },
            self.kernel.spec.name,
            self.config.provider.name()
        ));
        env.push_str(&format!("RVERBS_TERM={}\n", guest_term()));
        let mut names = Vec::new();
        for (k, v) in &spec.payload.env {
            if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                env.push_str(&format!("{k}={}\n", util::shell_quote(v)));
                names.push(k.as_str());
            }
        }
        if !names.is_empty() {
            env.push_str(&format!("RVERBS_EXPORT='{}'\n", names.join(" ")));
        }
        write(&run_dir.join("guest.env"), env.as_bytes())?;
        write(&run_dir.join("stage2.sh"), STAGE2.as_bytes())?;
        write(&run_dir.join("cmd.sh"), spec.script.as_bytes())?;
        fs::create_dir_all(run_dir.join("bin"))
            .context(|| "cannot create the run's bin dir".to_string())?;

        let mut extra = Cpio::new();
        if let Some(rverbs) = &spec.payload.rverbs {
            match spec.guest {
                Guest::Minimal => {
                    let bytes =
                        fs::read(rverbs).context(|| format!("cannot read {}", rverbs.display()))?;
                    extra.file("/bin/rverbs", 0o755, &bytes);
                }
                Guest::Host => {
                    let dst = run_dir.join("bin/rverbs");
                    fs::copy(rverbs, &dst)
                        .context(|| format!("cannot copy {}", rverbs.display()))?;
                }
            }
        }
        if spec.guest == Guest::Minimal {
            for d in &spec.payload.dirs {
                extra.dir(d);
            }
            let mut files: Vec<PathBuf> = spec.payload.files.clone();
            if spec.payload.rverbs.is_none() {
                let rdma = util::which("rdma").ok_or(
                    "the minimal guest needs a static `rverbs` binary or iproute2's `rdma` to \
                     create its rxe devices (install iproute2, or give the rverbs binary)",
                )?;
                files.push(rdma);
            }
            let mut added = std::collections::BTreeSet::new();
            for f in &files {
                let key = f.to_string_lossy().into_owned();
                if added.insert(key.clone()) {
                    let bytes = fs::read(f).context(|| format!("cannot read {}", f.display()))?;
                    extra.file(&key, 0o755, &bytes);
                }
                // A dynamically linked binary brings its loader and libraries along.
                if !util::elf_is_static(f).unwrap_or(true) {
                    for lib in util::shared_libs(f, &spec.payload.lib_path)? {
                        let key = lib.to_string_lossy().into_owned();
                        if added.insert(key.clone()) {
                            let bytes = fs::read(&lib)
                                .context(|| format!("cannot read {}", lib.display()))?;
                            extra.file(&key, 0o755, &bytes);
                        }
                    }
                }
            }
        }
        let initrd = run_dir.join("initrd.img");
        {
            let mut out = fs::File::create(&initrd)
                .context(|| format!("cannot create {}", initrd.display()))?;
            // The kernel unpacks concatenated cpio archives one after the other.
            out.write_all(&self.base_initrd)
                .and_then(|_| extra.write_to(&mut out))
                .context(|| format!("cannot write {}", initrd.display()))?;
        }

        let mut cmd = self.qemu(self.accel, &initrd, "");
        cmd.arg("-virtfs").arg(format!(
            "local,path={},mount_tag=rverbs,security_model=none",
            qemu_escape(&run_dir.to_string_lossy())
        ));
        if spec.guest == Guest::Host {
            cmd.args([
                "-virtfs",
                "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
            ]);
        }
        write(
            &run_dir.join("qemu.cmdline"),
            (util::show(&cmd) + "\n").as_bytes(),
        )?;

        let started = Instant::now();
        let mut ready_after = None;
        let mut in_cmd = false;
        let mut marker_status: Option<(String, i32)> = None;
        let mut errors = Vec::new();
        let display = spec.display;
        let interactive = display == Display::Interactive;
        let (exit, timed_out) = if interactive {
            let _ = fs::write(
                &console_log,
                "(interactive run: the console was the terminal)\n",
            );
            let st = cmd
                .status()
                .context(|| format!("cannot start `{}`", util::show(&cmd)))?;
            (Some(st), false)
        } else {
            drive(&mut cmd, &console_log, spec.timeout, |line| {
                // Output without a final newline runs into the end marker: split it off.
                let line = match line.strip_suffix("RVERBS-VM-END") {
                    Some(rest) if !rest.is_empty() && in_cmd => {
                        if display == Display::Command {
                            println!("{rest}");
                        }
                        "RVERBS-VM-END"
                    }
                    _ => line,
                };
                let tagged = line.starts_with("RVERBS-VM");
                if line == "RVERBS-VM-BEGIN" {
                    in_cmd = true;
                    ready_after = Some(started.elapsed());
                } else if line == "RVERBS-VM-END" {
                    in_cmd = false;
                } else if let Some(rest) = line.strip_prefix("RVERBS-VM-STATUS: ") {
                    let mut it = rest.split_whitespace();
                    if let (Some(stage), Some(Ok(code))) = (it.next(), it.next().map(str::parse)) {
                        marker_status = Some((stage.to_string(), code));
                    }
                } else if let Some(e) = line.strip_prefix("RVERBS-VM-ERROR: ") {
                    errors.push(e.to_string());
                }
                let markers = ["RVERBS-VM-BEGIN", "RVERBS-VM-END"];
                let tagged = tagged && !line.starts_with("RVERBS-VM-STATUS");
                match display {
                    Display::Verbose => println!("{line}"),
                    Display::Command if in_cmd && !markers.contains(&line) => println!("{line}"),
                    Display::Command | Display::Progress if tagged && !markers.contains(&line) => {
                        eprintln!("{line}")
                    }
                    Display::Command | Display::Progress | Display::Interactive => {}
                }
            })?
        };
        let elapsed = started.elapsed();
        let _ = fs::remove_file(&initrd);

        let file_status = fs::read_to_string(run_dir.join("status"))
            .ok()
            .and_then(|s| {
                let mut it = s.split_whitespace();
                Some((it.next()?.to_string(), it.next()?.parse::<i32>().ok()?))
            });
        let status = match file_status.or(marker_status) {
            Some((stage, code)) if stage == "cmd" => GuestStatus::Exited(code),
            Some(_) => GuestStatus::SetupFailed,
            None if timed_out => GuestStatus::Lost(format!(
                "the guest hung and was killed after {} (timeout)",
                fmt_secs(spec.timeout)
            )),
            None => GuestStatus::Lost(format!(
                "QEMU ended ({}) without the guest writing a status (crash, panic or QEMU error)",
                exit.map(util::describe_status)
                    .unwrap_or_else(|| "unknown".into())
            )),
        };
        let fallback = fs::read_to_string(run_dir.join("fallback"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        Ok(Outcome {
            status,
            run_dir,
            console_log,
            ready_after,
            elapsed,
            fallback,
            errors,
            crashed_boot: None,
        })
    }
}

/// Whether the console shows the kernel dying of an `int3` trap in kernel mode.
fn int3_oops(console: &Path) -> bool {
    let text = fs::read_to_string(console).unwrap_or_default();
    console_has_int3_oops(&text)
}

fn console_has_int3_oops(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start_matches(|c: char| {
            c == '[' || c == ' ' || c == '.' || c.is_ascii_digit() || c == ']'
        });
        l.starts_with("Oops: int3") || l.starts_with("int3: 0000")
    })
}

/// Prints the end of a console log (for failures).
pub fn print_tail(path: &Path, lines: usize) {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    eprintln!(
        "---- last {} lines of {} ----",
        all.len() - from,
        path.display()
    );
    for l in &all[from..] {
        eprintln!("{l}");
    }
    eprintln!("----");
}

/// Runs QEMU with the console piped into `log` and `on_line`; kills it at `timeout`.
/// Returns its exit status (None when killed) and whether it timed out.
/// How a KVM probe boot went.
enum Probe {
    /// It reached init.
    Booted,
    /// QEMU exited before init said so (KVM refused, or the guest died).
    Ended,
    /// It was killed at its limit, after this long.
    Hung(Duration),
}

/// A cached verdict after its key: `kvm` or `tcg`, then `: why` (caches written before the
/// reason was kept have none). `None`: not a verdict (a new probe is due).
fn parse_verdict(rest: &str) -> Option<(Accel, String)> {
    let rest = rest.trim();
    let (word, why) = match rest.split_once(':') {
        Some((w, why)) => (w.trim(), why.trim()),
        None => (rest, ""),
    };
    let accel = match word {
        "kvm" => Accel::Kvm,
        "tcg" => Accel::Tcg,
        _ => return None,
    };
    let why = if why.is_empty() {
        format!("{word}: probed before the reason was kept")
    } else {
        why.to_string()
    };
    Some((accel, why))
}

fn drive(
    cmd: &mut Command,
    log: &Path,
    timeout: Duration,
    mut on_line: impl FnMut(&str),
) -> Result<(Option<std::process::ExitStatus>, bool)> {
    let mut logf = fs::File::create(log).context(|| format!("cannot create {}", log.display()))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(|| format!("cannot start `{}`", util::show(cmd)))?;
    let (tx, rx) = mpsc::channel::<String>();
    let mut readers = Vec::new();
    let stdout = child
        .stdout
        .take()
        .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
    let stderr = child
        .stderr
        .take()
        .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>);
    for (stream, prefix) in [(stdout, ""), (stderr, "qemu: ")] {
        let Some(stream) = stream else { continue };
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            let _ = util::for_each_line(stream, |l| {
                let _ = tx.send(format!("{prefix}{l}"));
            });
        }));
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let _ = writeln!(logf, "{line}");
                on_line(&line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                let _ = writeln!(
                    logf,
                    "{}: TIMEOUT after {}: killing QEMU",
                    util::prefix(),
                    fmt_secs(timeout)
                );
                let _ = child.kill();
                break;
            }
        }
    }
    let status = child
        .wait()
        .context(|| "cannot wait for QEMU".to_string())?;
    // Drain what the readers still hold (they end once QEMU's pipes close).
    for line in rx.try_iter() {
        let _ = writeln!(logf, "{line}");
        if !timed_out {
            on_line(&line);
        }
    }
    for r in readers {
        let _ = r.join();
    }
    Ok((if timed_out { None } else { Some(status) }, timed_out))
}

fn base_initramfs(tools: &HostTools, kernel: &Kernel) -> Result<Vec<u8>> {
    let mut c = Cpio::new();
    for d in [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/run",
        "/mnt",
        "/root",
        "/etc",
        "/sbin",
        "/usr/bin",
        "/usr/sbin",
    ] {
        c.dir(d);
    }
    c.char_dev("/dev/console", 0o600, 5, 1);
    let bb =
        fs::read(&tools.busybox).context(|| format!("cannot read {}", tools.busybox.display()))?;
    c.file("/bin/busybox", 0o755, &bb);
    c.symlink("/bin/sh", "busybox");
    c.file("/init", 0o755, INIT.as_bytes());
    let mut order = String::new();
    for m in &kernel.modules {
        let name = m
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let bytes = fs::read(m).context(|| format!("cannot read {}", m.display()))?;
        c.file(&format!("/lib/modules/{name}"), 0o644, &bytes);
        order.push_str(&name);
        order.push('\n');
    }
    c.file("/lib/modules/order", 0o644, order.as_bytes());
    Ok(c.finish())
}

/// The host guest covers /tmp and /run of the host root with a tmpfs; these are the entries
/// directly below them that hold something the run needs and must be bound back.
fn hidden_host_paths(needed: &[PathBuf]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in needed {
        let mut comps = p
            .components()
            .skip(1)
            .map(|c| c.as_os_str().to_string_lossy());
        if let (Some(top), Some(entry)) = (comps.next(), comps.next()) {
            let keep = format!("/{top}/{entry}");
            if (top == "tmp" || top == "run")
                && !keep.contains(char::is_whitespace)
                && !out.contains(&keep)
            {
                out.push(keep);
            }
        }
    }
    out
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    fs::write(path, data).context(|| format!("cannot write {}", path.display()))
}

fn qemu_escape(s: &str) -> String {
    s.replace(',', ",,")
}

fn new_run_dir(runs: &Path, label: &str) -> Result<PathBuf> {
    fs::create_dir_all(runs).context(|| format!("cannot create {}", runs.display()))?;
    // Keep the newest runs only (names sort by time).
    if let Ok(rd) = fs::read_dir(runs) {
        let mut names: Vec<_> = rd.flatten().map(|e| e.path()).collect();
        names.sort();
        let excess = names.len().saturating_sub(KEEP_RUNS - 1);
        for old in &names[..excess] {
            let _ = fs::remove_dir_all(old);
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    for n in 0.. {
        let dir = runs.join(format!(
            "{}.{:03}-{label}-{n}",
            now.as_secs(),
            now.subsec_millis()
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => crate::bail!("cannot create {}: {e}", dir.display()),
        }
    }
    unreachable!()
}

/// The `TERM` a guest's programs see. The guest console is a tty, so programs would colour
/// their output (libtest, tracing); what reads the console is the host's stdout, which is often a
/// CI log: `dumb` (no colours, and `NO_COLOR` set) unless the host's stdout is a terminal, and
/// then the host's own `TERM`.
fn guest_term() -> String {
    use std::io::IsTerminal;
    let host = std::env::var("TERM").unwrap_or_default();
    let plain = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b))
    };
    if std::io::stdout().is_terminal() && plain(&host) && std::env::var_os("NO_COLOR").is_none() {
        host
    } else {
        "dumb".to_string()
    }
}

/// The guest's memory: 2 GiB, or more when the initramfs is large. The kernel keeps the
/// archive in memory while it unpacks it into the rootfs (a tmpfs of at most half the memory),
/// so a minimal guest carrying every test binary needs the archive twice over plus room to
/// run: with 45 test binaries (536 MB) the rootfs of a 2 GiB guest filled up ("Initramfs
/// unpacking failed: write error") and every test died on its first write to its log.
fn guest_memory(initrd: &Path) -> String {
    let archive_mib = fs::metadata(initrd).map_or(0, |m| m.len() >> 20);
    let mib = (1024 + 3 * archive_mib).max(2048).next_multiple_of(256);
    format!("{mib}M")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_int3_oops_counts_as_the_patching_crash() {
        let crash = "[    3.001923] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
                     [    3.008029] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert!(console_has_int3_oops(crash));
        let other = "[   14.2] Oops: general protection fault, probably for non-canonical \
                     address\n[   14.3] Kernel panic - not syncing: Fatal exception\n";
        assert!(!console_has_int3_oops(other));
        assert!(!console_has_int3_oops(
            "RVERBS-VM: a test printed Oops: int3 mid-line\n"
        ));
    }

    #[test]
    fn host_paths_under_tmp_and_run_are_bound_back() {
        let needed = [
            "/tmp/ci/main",
            "/tmp/ci/main/target",
            "/work/main",
            "/run/user/0/x",
            "/tmp",
            "/tmp/ci/other",
        ]
        .map(PathBuf::from);
        assert_eq!(hidden_host_paths(&needed), ["/tmp/ci", "/run/user"]);
    }
}

#[cfg(test)]
mod verdict_tests {
    use super::{parse_verdict, Accel};

    #[test]
    fn cached_verdicts_keep_their_reason() {
        assert_eq!(
            parse_verdict(" tcg: the KVM probe boot timed out (killed after 20.0 s)\n"),
            Some((
                Accel::Tcg,
                "the KVM probe boot timed out (killed after 20.0 s)".into()
            ))
        );
        assert_eq!(
            parse_verdict(" kvm: the KVM probe boot reached init"),
            Some((Accel::Kvm, "the KVM probe boot reached init".into()))
        );
        // A cache from before the reason was kept still stands, saying so.
        assert_eq!(
            parse_verdict(" tcg\n"),
            Some((Accel::Tcg, "tcg: probed before the reason was kept".into()))
        );
        // Anything else is no verdict: the caller probes again.
        assert_eq!(parse_verdict(" maybe: who knows"), None);
        assert_eq!(parse_verdict(""), None);
    }
}
