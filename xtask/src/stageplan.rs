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
//!
//! A user's test filter (`cargo xtask test -- FILTER`) turns both off: every binary then runs
//! once, in order, with the user's arguments only.

use crate::build::Artifact;
use crate::testcmd::Counts;

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
/// streams on one device; neither the guest nor the topology changes what they check.
pub const ONCE_PER_KERNEL: &[(&str, &str)] = &[
    ("rverbs/verbs_errors", "ten_thousand_cycles_leak_nothing"),
    (
        "stream/vm_stream_interop",
        "tokio_64_streams_on_one_runtime_byte_checked",
    ),
];

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
    /// Once-per-kernel tests skipped in this entry, with the stage each ran in.
    pub skipped_here: Vec<(&'static str, String)>,
}

/// The entries of a stage. `once_ran_in`: the earlier stage of this kernel that ran the
/// once-per-kernel tests (None: this stage runs them). `special`: background and once-per-kernel
/// placement (false when the user filters tests).
pub fn plan(tests: &[Artifact], once_ran_in: Option<&str>, special: bool) -> Vec<Entry> {
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
        if let Some(stage) = once_ran_in {
            for &(bin, test) in ONCE_PER_KERNEL {
                if bin == a.name {
                    e.args.extend(["--skip".to_string(), test.to_string()]);
                    e.skipped_here.push((test, stage.to_string()));
                }
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
    for (test, stage) in &e.skipped_here {
        c.filtered = c.filtered.saturating_sub(1);
        c.ignored += 1;
        notes.push(format!(
            "{} `{test}` runs once per kernel: ran in stage {stage}, counted as skipped here",
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
            .map(|&(b, t)| (b, Some(t)))
            .chain(COUNTS_DEVICE_OBJECTS.iter().map(|&b| (b, None)));
        for (bin, test) in all {
            let (krate, file) = bin.split_once('/').unwrap();
            let path = root.join(format!("crates/{krate}/tests/{file}.rs"));
            let src = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{bin}: {}: {e}", path.display()));
            if let Some(t) = test {
                assert!(src.contains(&format!("fn {t}(")), "{bin} has no test {t}");
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
        let p = plan(&tests, None, true);
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

    #[test]
    fn later_stages_of_a_kernel_skip_the_once_per_kernel_tests_and_say_so() {
        let p = plan(
            &[art("rverbs/verbs_errors")],
            Some("vm 6.1 minimal/one"),
            true,
        );
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
    fn a_background_test_that_did_not_run_fails() {
        let p = plan(&[art("cm/vm_cm")], None, true);
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
        let p = plan(&tests, Some("earlier"), false);
        assert_eq!(p.len(), 2);
        assert!(p
            .iter()
            .all(|e| e.args.is_empty() && !e.background && e.role == Role::Whole));
    }
}
