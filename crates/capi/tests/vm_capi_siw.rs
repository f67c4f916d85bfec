//! rdma-core's own, unmodified programs on our C drop-in over soft-iWARP (siw), against the
//! same programs on rdma-core's libraries (libsiw), both ways: rdmacm-utils (`rdma_server` /
//! `rdma_client`, `ucmatose`), perftest over the rdma_cm (`-R`: an iWARP QP connects only
//! through the rdma_cm), and rdma-core's Python suite (pyverbs) on both libraries, test by
//! test. (Debian's rping on the drop-in over siw: `cli/siw_vm`.)
//!
//! These tests need a siw device: they are ignored everywhere but in the stage that boots a
//! guest with `--provider siw` (`cargo xtask test --stage siw`, which runs this binary with
//! `--include-ignored`); run anywhere else they fail, never pass silently.

mod common;
use common::{
    counts, env_or, outcomes, perftest_both_ways, pyverbs_on_both, pyverbs_suite_copy,
    rdmacm_utils_both_ways, siw, siw_trace_upcalls, Outcome,
};

/// The siw device's address, after checking that this is a siw guest.
fn siw_addr() -> String {
    assert!(
        siw(),
        "these tests need a guest with siw devices (rverbs-vm --provider siw)"
    );
    env_or("RVERBS_ADDR_A", "10.10.0.1")
}

/// `rdma_server`/`rdma_client` and `ucmatose` over siw, each side on ours against the other
/// on rdma-core's ([`rdmacm_utils_both_ways`]).
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn rdmacm_utils_on_the_drop_in_over_siw_interop() {
    let a = siw_addr();
    rdmacm_utils_both_ways(&a);
}

/// perftest over the rdma_cm on siw, 20 iterations: latency of SEND, WRITE and READ and
/// bandwidth of WRITE (`ib_send_bw` and `ib_read_bw` pass as well, left out for the stage's
/// time), our side as the server and as the client ([`perftest_both_ways`]).
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn perftest_rdma_cm_over_siw_interop() {
    siw_addr();
    siw_trace_upcalls();
    perftest_both_ways(18760, true, 20);
}

/// Tests that error on ours and skip on rdma-core's, with why (reviewed): libsiw has no
/// `ibv_create_qp_ex` and no `ibv_create_cq_ex`, so on rdma-core these tests skip at creation;
/// ours creates the extended QP and CQ on any device, and the tests then connect the RC QP by
/// hand (a modify to RTR with the peer's QP number), which an iWARP QP does not allow: ours
/// refuses it (EOPNOTSUPP, naming the rule). That is the step where the same tests on plain
/// verbs (`test_cq_events_rc`, `test_ro_rc_traffic`, `test_mr_rereg_*`) error on both
/// libraries (rdma-core's at RTS: EINVAL).
const EXPECTED_OURS_ONLY_ERRORS: &[&str] = &[
    "test_cqex.CqExTestCase.test_rc_traffic_cq_ex",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_read",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_read_zero_size",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write",
    "test_qpex.QpExTestCase.test_qp_ex_rc_rdma_write_zero_length",
    "test_qpex.QpExTestCase.test_qp_ex_rc_send",
];

/// The suite's modules with a test that does not skip on siw on either library (the others,
/// mlx5, efa, ODP, flow steering, multicast, AH, atomics, ..., skip entirely on both: see
/// docs/capi.md for the whole suite's counts, made by `ci/capi/pyverbs.sh`).
const PYVERBS_MODULES: &[&str] = &[
    "test_cq",
    "test_cq_events",
    "test_cqex",
    "test_device",
    "test_fork",
    "test_mr",
    "test_pd",
    "test_qp",
    "test_qpex",
    "test_relaxed_ordering",
];

/// rdma-core's Python suite ([`PYVERBS_MODULES`]) on siw0 on rdma-core's libraries and on
/// ours at the same time:
/// fails when a test passes on rdma-core's but not on ours, or fails/errors on ours but not
/// on rdma-core's, unless it is in [`EXPECTED_OURS_ONLY_ERRORS`] (each entry must still
/// be such a difference, so the list stays true). The counts of both are printed.
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn pyverbs_over_siw_on_both_libraries_interop() {
    siw_addr();
    let dir = pyverbs_suite_copy("rverbs-pyverbs-siw");
    let dev = env_or("RVERBS_DEV_A", "siw0");
    let select: Vec<String> = PYVERBS_MODULES
        .iter()
        .flat_map(|m| ["-k".into(), format!("tests.{m}.")])
        .collect();
    // siw's one GID (its MAC) is index 0.
    let [theirs_run, ours_run] = pyverbs_on_both(&dir, &dev, "0", 300, &select);
    let (theirs_log, ours_log) = (theirs_run.out, ours_run.out);
    let _ = std::fs::remove_dir_all(&dir);
    let theirs = outcomes(&theirs_log);
    let ours = outcomes(&ours_log);
    eprintln!("pyverbs on siw, rdma-core's: {}", counts(&theirs));
    eprintln!("pyverbs on siw, ours:        {}", counts(&ours));
    assert!(
        theirs.len() > 100,
        "rdma-core's run did not complete:\n{theirs_log}"
    );
    assert_eq!(
        theirs.keys().collect::<Vec<_>>(),
        ours.keys().collect::<Vec<_>>(),
        "the two runs ran different tests:\nours:\n{ours_log}"
    );
    let mut wrong = Vec::new();
    for (name, &t) in &theirs {
        let o = ours[name];
        if o != t || o.bad() {
            eprintln!("  {name}: rdma-core's {t:?}, ours {o:?}");
        }
        let expected = EXPECTED_OURS_ONLY_ERRORS.contains(&name.as_str());
        if t == Outcome::Pass && o != Outcome::Pass {
            wrong.push(format!("{name}: passes on rdma-core's, {o:?} on ours"));
        } else if o.bad() && !t.bad() && !expected {
            wrong.push(format!("{name}: {o:?} on ours, {t:?} on rdma-core's"));
        }
        if expected && !(o == Outcome::Error && t == Outcome::Skip) {
            wrong.push(format!(
                "{name} is listed as erroring on ours only, but is {o:?} on ours and {t:?} on \
                 rdma-core's: update EXPECTED_OURS_ONLY_ERRORS"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\n--- ours:\n{ours_log}",
        wrong.join("\n")
    );
}

#[test]
fn outcomes_reads_unittest_logs() {
    let log = "test_a (tests.test_x.C.test_a) ... ok\n\
               test_b (tests.test_x.C.test_b)\n\
               A docstring ... (not a verdict) ... ERROR\n\
               test_c (tests.test_y.D.test_c) ... skipped 'Device rxe0 has no net'\n\
               test_d (tests.test_y.D.test_d) ... FAIL\n\
               noise ... ok\n";
    let o = outcomes(log);
    assert_eq!(o.len(), 4, "{o:?}");
    assert_eq!(o["test_x.C.test_a"], Outcome::Pass);
    assert_eq!(o["test_x.C.test_b"], Outcome::Error);
    assert_eq!(o["test_y.D.test_c"], Outcome::Skip);
    assert_eq!(o["test_y.D.test_d"], Outcome::Fail);
}
