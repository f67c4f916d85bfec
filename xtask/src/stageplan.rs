//! The plan of one VM stage: which test binaries the guest runs, in which order, with which
//! extra arguments, and which test runs in the background while the others run.
//!
//! Two kinds of tests are placed specially, each to save minutes without checking less:
//! - [`BACKGROUND`]: a test that spends its time waiting on a kernel timer (the CM's REQ
//!   retries to an address nobody has take 80–100 s). It runs alone (`--exact`) in a second
//!   process started before everything else, and the binary's own run skips it. The guest's
//!   CPUs are idle while it waits, so the stage does not get longer by its wait.
//!   [`COUNTS_DEVICE_OBJECTS`] binaries compare the device's kernel objects (netlink resource
//!   summary) before and after: they run after the background test has ended.
//! - [`ONCE_PER_KERNEL`]: a long test whose result depends on the kernel but not on the guest
//!   or the topology. It runs in the first stage of each kernel; the later stages of that kernel
//!   skip it and count it as skipped, with a note naming the stage it ran in.
//! - [`ONCE_PER_RUN`]: a long test whose path the other kernels' stages prove with shorter
//!   tests. It runs in the first stage that can run it; the later stages skip it and count it
//!   as skipped, with a note naming the stage it ran in.
//! - [`IN_TWO_NODE_STAGES`]: a long test that runs its one-node case inside a two-node stage
//!   too. A one-node stage skips it when its kernel has a two-node stage in the run, and
//!   counts it as skipped with a note naming that stage.
//!
//! A user's test filter (`cargo xtask test -- FILTER`) turns all of these off: every binary
//! then runs once, in order, with the user's arguments only.

use crate::build::Artifact;
use crate::testcmd::{Counts, INTEROP, TWO_NODE};

/// Tests that wait on kernel timers for most of their time: (binary, test name).
pub const BACKGROUND: &[(&str, &str)] =
    &[("cm/vm_cm", "address_nobody_has_times_out_or_is_unreachable")];

/// Binaries whose tests compare the device's kernel object counts: no other process may
/// create or destroy objects on the device meanwhile, so they run after the background tests.
pub const COUNTS_DEVICE_OBJECTS: &[&str] = &[
    "rverbs/verbs_errors",
    "rverbs/verbs_legacy",
    "rverbs/vm_dmabuf",
];

/// Long tests run once per kernel: (binary, test name). `ten_thousand_cycles_leak_nothing`
/// (about 20 s a stage) counts fds, mappings and kernel objects over 10,000 create/destroy
/// cycles; `tokio_64_streams_on_one_runtime_byte_checked` (30–60 s) moves 64 MB through 64
/// streams on one device; `vm_grpc`'s tests (tonic over the stream, examples/grpc: 1,000 calls,
/// the 16 MiB message, the killed server; 30 s and more a stage under load) run one node's
/// stream under a framework; neither the guest nor the topology changes what they check.
pub const ONCE_PER_KERNEL: &[(&str, &str)] = &[
    ("rverbs/verbs_errors", "ten_thousand_cycles_leak_nothing"),
    (
        "stream/vm_stream_interop",
        "tokio_64_streams_on_one_runtime_byte_checked",
    ),
    ("grpc/vm_grpc", "grpc_unary_1000_calls_checked"),
    ("grpc/vm_grpc", "grpc_streaming_calls_and_16_mib_message"),
    ("grpc/vm_grpc", "grpc_server_killed_mid_stream"),
];

/// Long tests run once per run: (binary, test). What each proves is our library's, and the
/// other kernels' stages still prove the same path with shorter tests:
/// - `perftest_interop`: perftest's four tools on our libibverbs with perftest's own TCP
///   exchange. The other kernels run the same four tools on ours through the rdma_cm
///   (`perftest_rdma_cm_interop`, once per host-guest stage) and QPs connected by hand with
///   rdma-core's `ibv_*_pingpong` (`vm_capi`).
/// - `rstream_on_our_rsockets_interop`: rdma-core's rstream on our rsockets over its table of
///   sizes and its three modes. The other kernels run our rsockets under rcopy, riostream and
///   the C calls of `vm_rsocket`'s other tests.
/// - `vm_preload`'s programs (iperf3, redis, memcached, curl and Python's http.server on
///   librspreload.so.1, about 2 min together; the forking server of the fork mode): what
///   they prove is the preload's and our rsockets', which `vm_rsocket` runs on every
///   kernel.
///
/// Such a test runs in the first stage of the run that can run it (an `interop` test needs
/// the host guest, a `two_node` one the two-node topology); the later stages skip it and
/// count it as skipped, with a note naming the stage it ran in.
pub const ONCE_PER_RUN: &[(&str, &str)] = &[
    ("capi/vm_capi", "perftest_interop"),
    ("capi/vm_rsocket", "rstream_on_our_rsockets_interop"),
    ("capi/vm_preload", "iperf3_on_our_preload_interop"),
    ("capi/vm_preload", "redis_on_our_preload_interop"),
    (
        "capi/vm_preload",
        "curl_and_http_server_on_our_preload_interop",
    ),
    ("capi/vm_preload", "fork_mode_forking_server_interop"),
];

/// Tests that run both the one-node and the two-node case themselves (rxe_datapath's
/// `each_topo`: QPs on one device, then on the two devices of the two-node topology), whose
/// guest does not matter (no C tools), and that are long: (binary, test path). In a two-node
/// stage they run both cases, so a one-node stage of the same kernel adds nothing: it skips
/// them when the run has a two-node stage of its kernel, and counts them as skipped with a
/// note naming that stage. (The threads tests are about 10 s per case under emulation.)
pub const IN_TWO_NODE_STAGES: &[(&str, &str)] = &[
    (
        "rverbs/rxe_datapath",
        "threads::threads_share_a_qp_and_its_cqs",
    ),
    ("rverbs/rxe_datapath", "threads::threads_share_an_srq"),
    ("rverbs/rxe_datapath", "rings::full_send_and_recv_queues"),
    ("rverbs/rxe_datapath", "rings::rings_wrap_around"),
    (
        "rverbs/rxe_datapath",
        "reset::qp_cycled_through_reset_works_and_forgets_old_requests",
    ),
];

/// One VM stage of a run, as the placement sees it.
#[derive(Debug, Clone)]
pub struct StageKey {
    pub name: String,
    pub kernel: &'static str,
    pub host_guest: bool,
    pub two_node: bool,
}

impl StageKey {
    /// Whether this stage runs `test` at all: the minimal guest skips the `interop` tests,
    /// the one-node topology the `two_node` ones (testcmd's `--skip` arguments).
    fn runs(&self, test: &str) -> bool {
        (self.host_guest || !test.contains(INTEROP)) && (self.two_node || !test.contains(TWO_NODE))
    }
}

/// A test that this stage leaves to another one: (binary, test, the note's words, e.g. "runs
/// once per kernel: ran in stage vm 6.1 minimal/one").
pub type Elsewhere = (&'static str, &'static str, String);

/// The tests the stage `stages[this]` leaves to another stage of the run (`stages`: the VM
/// stages this run runs, in order): a [`ONCE_PER_RUN`] test when an earlier stage ran it, a
/// [`ONCE_PER_KERNEL`] test when an earlier stage of its kernel ran it, an
/// [`IN_TWO_NODE_STAGES`] test in a one-node stage when the run has a two-node stage of its
/// kernel.
pub fn elsewhere(stages: &[StageKey], this: usize) -> Vec<Elsewhere> {
    let me = &stages[this];
    let mut out = Vec::new();
    // The first stage (of `among`) that runs `test`, when it is an earlier one.
    let ran_before = |test: &str, among: &dyn Fn(&StageKey) -> bool| {
        stages[..this]
            .iter()
            .find(|s| among(s) && s.runs(test))
            .map(|s| s.name.clone())
    };
    // A test this stage's guest or topology skips anyway needs no note of its own.
    for &(bin, test) in ONCE_PER_RUN.iter().filter(|(_, t)| me.runs(t)) {
        if let Some(first) = ran_before(test, &|_| true) {
            out.push((
                bin,
                test,
                format!("runs once per run: ran in stage {first}"),
            ));
        }
    }
    for &(bin, test) in ONCE_PER_KERNEL.iter().filter(|(_, t)| me.runs(t)) {
        if let Some(first) = ran_before(test, &|s| s.kernel == me.kernel) {
            out.push((
                bin,
                test,
                format!("runs once per kernel: ran in stage {first}"),
            ));
        }
    }
    if !me.two_node {
        if let Some(two) = stages.iter().find(|s| s.kernel == me.kernel && s.two_node) {
            for &(bin, test) in IN_TWO_NODE_STAGES {
                out.push((
                    bin,
                    test,
                    format!(
                        "runs its one-node case in the two-node stage {} (with the two-node case)",
                        two.name
                    ),
                ));
            }
        }
    }
    out
}

/// What an entry's run is, for the counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The binary, whole (or without its once-per-kernel tests, see `skipped_here`).
    Whole,
    /// The binary without its background test, which the entry named here runs.
    WithoutBackground(&'static str),
    /// One test of the binary alone, in the background.
    Background(&'static str),
}

/// One run of a test binary in the guest.
#[derive(Debug, Clone)]
pub struct Entry {
    pub artifact: Artifact,
    /// Arguments after the stage's own (`--test-threads`, `--skip interop`, ...).
    pub args: Vec<String>,
    pub role: Role,
    /// Started with `&` before the foreground entries.
    pub background: bool,
    /// Waits for the background entries before it starts (the first of these prints `wait`).
    pub after_background: bool,
    /// Tests left to another stage ([`elsewhere`]), with the note's words.
    pub skipped_here: Vec<(&'static str, String)>,
}

/// The entries of a stage. `elsewhere`: the tests another stage runs instead ([`elsewhere`]);
/// `special`: background placement and `elsewhere` applied (false when the user filters
/// tests).
pub fn plan(tests: &[Artifact], elsewhere: &[Elsewhere], special: bool) -> Vec<Entry> {
    let whole = |a: &Artifact| Entry {
        artifact: a.clone(),
        args: Vec::new(),
        role: Role::Whole,
        background: false,
        after_background: false,
        skipped_here: Vec::new(),
    };
    if !special {
        return tests.iter().map(whole).collect();
    }
    let mut bg = Vec::new();
    let mut fg = Vec::new();
    let mut last = Vec::new();
    for a in tests {
        let mut e = whole(a);
        for (bin, test, why) in elsewhere {
            if *bin == a.name {
                e.args.extend(["--skip".to_string(), test.to_string()]);
                e.skipped_here.push((test, why.clone()));
            }
        }
        for &(bin, test) in BACKGROUND {
            if bin == a.name {
                e.args.extend(["--skip".to_string(), test.to_string()]);
                e.role = Role::WithoutBackground(test);
                let mut b = whole(a);
                b.args.extend(["--exact".to_string(), test.to_string()]);
                b.role = Role::Background(test);
                b.background = true;
                bg.push(b);
            }
        }
        if COUNTS_DEVICE_OBJECTS.contains(&a.name.as_str()) {
            last.push(e);
        } else {
            fg.push(e);
        }
    }
    if bg.is_empty() {
        // Nothing to wait for: keep the build's order.
        fg.append(&mut last);
        return fg;
    }
    if let Some(first) = last.first_mut() {
        first.after_background = true;
    }
    bg.into_iter().chain(fg).chain(last).collect()
}

/// Corrects one entry's libtest counts for what the plan filtered on purpose, so that only a
/// user's filters and the minimal guest's `--skip interop` remain in `filtered`. Returns a
/// failure note if a planned test did not run (renamed or removed: never a silent pass).
pub fn adjust(e: &Entry, c: &mut Counts, notes: &mut Vec<String>) -> Option<String> {
    let mut failure = None;
    match e.role {
        Role::Whole => {}
        Role::WithoutBackground(_) => c.filtered = c.filtered.saturating_sub(1),
        Role::Background(test) => {
            // `--exact test`: everything else of the binary is filtered out by design.
            c.filtered = 0;
            let ran = c.passed + c.failed + c.ignored;
            if ran != 1 {
                c.failed += 1;
                failure = Some(format!(
                    "the background test `{test}` ran {ran} time(s), not once"
                ));
            }
        }
    }
    for (test, why) in &e.skipped_here {
        c.filtered = c.filtered.saturating_sub(1);
        c.ignored += 1;
        notes.push(format!(
            "{} `{test}` {why}, counted as skipped here",
            e.artifact.name
        ));
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn art(name: &str) -> Artifact {
        Artifact {
            executable: PathBuf::from(format!("/t/{name}")),
            package_dir: PathBuf::from("/w"),
            name: name.into(),
            kind: "test".into(),
            test_harness: true,
        }
    }

    /// Every named binary and test exists (a renamed test would otherwise run in every stage,
    /// or, for a background test, fail as "ran 0 times").
    #[test]
    fn planned_names_exist() {
        let root = crate::util::workspace_root();
        let all = BACKGROUND
            .iter()
            .chain(ONCE_PER_KERNEL)
            .chain(IN_TWO_NODE_STAGES)
            .map(|&(b, t)| (b, Some(t)))
            .chain(COUNTS_DEVICE_OBJECTS.iter().map(|&b| (b, None)));
        for (bin, test) in all {
            let (krate, file) = bin.split_once('/').unwrap();
            // crates/<krate>, or the example crates' examples/<krate> (examples/grpc).
            let mut tests = root.join(format!("crates/{krate}/tests"));
            if !tests.is_dir() {
                tests = root.join(format!("examples/{krate}/tests"));
            }
            // A test `module::name` of a binary with modules (tests/<bin>/main.rs and
            // tests/<bin>/module.rs) is in tests/<bin>/module.rs.
            let (path, name) = match test.and_then(|t| t.rsplit_once("::")) {
                Some((module, name)) => (tests.join(file).join(format!("{module}.rs")), name),
                None if tests.join(file).is_dir() => {
                    (tests.join(file).join("main.rs"), test.unwrap_or(""))
                }
                None => (tests.join(format!("{file}.rs")), test.unwrap_or("")),
            };
            let src = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{bin}: {}: {e}", path.display()));
            if test.is_some() {
                assert!(
                    src.contains(&format!("fn {name}(")),
                    "{bin} has no test {name} in {}",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn background_runs_first_and_object_counters_after_it() {
        let tests = [
            art("rverbs/verbs_errors"),
            art("cm/vm_cm"),
            art("cli/rping"),
            art("rverbs/verbs_legacy"),
        ];
        let p = plan(&tests, &[], true);
        let names: Vec<_> = p
            .iter()
            .map(|e| (e.artifact.name.as_str(), e.background, e.after_background))
            .collect();
        assert_eq!(
            names,
            [
                ("cm/vm_cm", true, false),
                ("cm/vm_cm", false, false),
                ("cli/rping", false, false),
                ("rverbs/verbs_errors", false, true),
                ("rverbs/verbs_legacy", false, false),
            ]
        );
        let (bg_test, main) = (&p[0], &p[1]);
        assert_eq!(
            bg_test.args,
            ["--exact", "address_nobody_has_times_out_or_is_unreachable"]
        );
        assert_eq!(
            main.args,
            ["--skip", "address_nobody_has_times_out_or_is_unreachable"]
        );
        // The first stage of a kernel runs the long test; nothing is skipped.
        assert!(p.iter().all(|e| e.skipped_here.is_empty()));
        assert!(p[3].args.is_empty());
    }

    fn key(name: &str, kernel: &'static str, two_node: bool) -> StageKey {
        StageKey {
            name: name.into(),
            kernel,
            host_guest: name.contains("host"),
            two_node,
        }
    }

    /// The default split: 6.1 minimal/one, 6.1 host/two, 6.12 host/one, 6.12 minimal/two,
    /// newest host/one.
    fn default_split() -> Vec<StageKey> {
        vec![
            key("vm 6.1 minimal/one", "6.1", false),
            key("vm 6.1 host/two", "6.1", true),
            key("vm 6.12 host/one", "6.12", false),
            key("vm 6.12 minimal/two", "6.12", true),
            key("vm newest host/one", "newest", false),
        ]
    }

    fn tests_of(e: &[Elsewhere]) -> Vec<&str> {
        e.iter().map(|(_, t, _)| *t).collect()
    }

    #[test]
    fn each_long_test_runs_once_per_run_or_kernel_and_the_topology_tests_in_two_node_stages() {
        let stages = default_split();
        let per_run: Vec<&str> = ONCE_PER_RUN.iter().map(|(_, t)| *t).collect();
        let per_kernel: Vec<&str> = ONCE_PER_KERNEL.iter().map(|(_, t)| *t).collect();
        let topo: Vec<&str> = IN_TWO_NODE_STAGES.iter().map(|(_, t)| *t).collect();
        // 6.1 minimal/one, the first stage: runs the once-per-kernel tests (its guest skips
        // the interop ones of ONCE_PER_RUN), leaves the topology tests to 6.1 host/two.
        let e = elsewhere(&stages, 0);
        assert_eq!(tests_of(&e), topo);
        assert!(e.iter().all(|(_, _, why)| why.contains("vm 6.1 host/two")));
        // 6.1 host/two, the first host guest: runs the once-per-run interop tests and the
        // topology tests; the once-per-kernel ones ran in 6.1 minimal/one.
        let e = elsewhere(&stages, 1);
        assert_eq!(tests_of(&e), per_kernel);
        assert!(e
            .iter()
            .all(|(_, _, why)| why.contains("vm 6.1 minimal/one")));
        // 6.12 host/one: the once-per-run tests ran in 6.1 host/two; it runs 6.12's
        // once-per-kernel tests; the topology tests go to 6.12 minimal/two.
        let e = elsewhere(&stages, 2);
        assert_eq!(tests_of(&e), [per_run.clone(), topo].concat());
        assert!(
            e[0].2
                .contains("once per run: ran in stage vm 6.1 host/two"),
            "{e:?}"
        );
        assert!(e.last().unwrap().2.contains("vm 6.12 minimal/two"), "{e:?}");
        // 6.12 minimal/two: skips the once-per-kernel tests (its guest skips the interop
        // ones of ONCE_PER_RUN anyway: no second note for them).
        let e = elsewhere(&stages, 3);
        assert_eq!(tests_of(&e), per_kernel);
        assert!(e.last().unwrap().2.contains("vm 6.12 host/one"), "{e:?}");
        // newest host/one, its kernel's only stage: the once-per-run tests ran in 6.1
        // host/two; it runs its kernel's once-per-kernel tests and, with no two-node stage of
        // its kernel, the topology tests' one-node case.
        let e = elsewhere(&stages, 4);
        assert_eq!(tests_of(&e), per_run);
        assert!(e
            .iter()
            .all(|(_, _, why)| why.contains("once per run: ran in stage vm 6.1 host/two")));
    }

    #[test]
    fn a_once_per_run_interop_test_waits_for_the_first_host_guest() {
        // `--kernel 6.12`: minimal/one, host/one, host/two.
        let stages = [
            key("vm 6.12 minimal/one", "6.12", false),
            key("vm 6.12 host/one", "6.12", false),
            key("vm 6.12 host/two", "6.12", true),
        ];
        let per_run = |i| {
            elsewhere(&stages, i)
                .into_iter()
                .filter(|(_, t, _)| ONCE_PER_RUN.iter().any(|(_, o)| o == t))
                .count()
        };
        assert_eq!(
            (per_run(0), per_run(1), per_run(2)),
            (0, 0, ONCE_PER_RUN.len())
        );
    }

    #[test]
    fn a_one_node_stage_without_a_two_node_stage_of_its_kernel_runs_everything() {
        // `--stage "6.1 minimal"`: the only stage runs all of it.
        let only = [key("vm 6.1 minimal/one", "6.1", false)];
        assert!(elsewhere(&only, 0).is_empty());
        // The other kernel's two-node stage does not count.
        let stages = [
            key("vm 6.1 minimal/one", "6.1", false),
            key("vm 6.12 minimal/two", "6.12", true),
        ];
        assert!(elsewhere(&stages, 0).is_empty());
        assert!(elsewhere(&stages, 1).is_empty());
    }

    #[test]
    fn later_stages_of_a_kernel_skip_the_once_per_kernel_tests_and_say_so() {
        let stages = default_split();
        let p = plan(&[art("rverbs/verbs_errors")], &elsewhere(&stages, 1), true);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].args, ["--skip", "ten_thousand_cycles_leak_nothing"]);
        let mut c = Counts {
            passed: 7,
            filtered: 1,
            ..Default::default()
        };
        let mut notes = Vec::new();
        assert_eq!(adjust(&p[0], &mut c, &mut notes), None);
        assert_eq!((c.passed, c.ignored, c.filtered), (7, 1, 0));
        assert!(
            notes[0].contains("ran in stage vm 6.1 minimal/one"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_one_node_stage_skips_the_topology_tests_and_counts_them() {
        let stages = default_split();
        let p = plan(&[art("rverbs/rxe_datapath")], &elsewhere(&stages, 2), true);
        let n = IN_TWO_NODE_STAGES.len();
        assert_eq!(p[0].args.len(), 2 * n);
        assert!(p[0]
            .args
            .contains(&"threads::threads_share_an_srq".to_string()));
        let mut c = Counts {
            passed: 29,
            filtered: n as u64,
            ..Default::default()
        };
        let mut notes = Vec::new();
        assert_eq!(adjust(&p[0], &mut c, &mut notes), None);
        assert_eq!((c.passed, c.ignored, c.filtered), (29, n as u64, 0));
        assert_eq!(notes.len(), n);
        assert!(
            notes[0].contains("two-node stage vm 6.12 minimal/two"),
            "{notes:?}"
        );
    }

    #[test]
    fn a_background_test_that_did_not_run_fails() {
        let p = plan(&[art("cm/vm_cm")], &[], true);
        let mut c = Counts {
            filtered: 14,
            ..Default::default()
        };
        let mut notes = Vec::new();
        let why = adjust(&p[0], &mut c, &mut notes).unwrap();
        assert!(why.contains("ran 0 time(s)"), "{why}");
        assert_eq!((c.failed, c.filtered), (1, 0));
        // Its binary's run without it: the one skip is not a user's filter.
        let mut c = Counts {
            passed: 13,
            filtered: 1,
            ..Default::default()
        };
        assert_eq!(adjust(&p[1], &mut c, &mut notes), None);
        assert_eq!(c.filtered, 0);
    }

    #[test]
    fn a_user_filter_turns_the_plan_off() {
        let tests = [art("rverbs/verbs_errors"), art("cm/vm_cm")];
        let p = plan(&tests, &elsewhere(&default_split(), 1), false);
        assert_eq!(p.len(), 2);
        assert!(p
            .iter()
            .all(|e| e.args.is_empty() && !e.background && e.role == Role::Whole));
    }
}
