//! rdma-core 56 (Debian 13's rdma-core, ibverbs-utils, rdmacm-utils, perftest 25.01 and
//! python3-pyverbs 56) as the second judge of the C drop-in: the same interop matrix as
//! against the host's rdma-core 44 (`vm_capi`, `vm_rsocket`) — rping, `ibv_rc_pingpong` /
//! `ibv_ud_pingpong`, `rdma_server`/`rdma_client`, `ucmatose`, `udaddy`, `mckey`, `rstream`,
//! `riostream`, perftest — each of rdma-core 56's programs on our libraries against the same
//! program on rdma-core 56's, both ways; then rdma-core 56's Python suite on both libraries,
//! module by module, compared test by test.
//!
//! rdma-core 56 lives in the Debian 13 userland the bed builds from the archive
//! (crates/testbed/src/userland.rs); the programs run in it through `chroot`
//! (`common::in_trixie`). These tests need it: they are ignored everywhere but in the stage
//! that carries it (`cargo xtask test --stage trixie`, which runs this binary with
//! `--include-ignored`); run anywhere else they fail, never pass silently.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod common;
use common::{
    both_ways, cm_tool, counts, env_or, in_trixie, lib_dir, ours_in_trixie, outcomes,
    perftest_both_ways, rdmacm_utils_both_ways, run, tool, trixie_root, use_rdma_core_56,
    wait_cm_listening, Outcome, Proc,
};

fn addr() -> String {
    use_rdma_core_56();
    env_or("RVERBS_ADDR_A", "10.10.0.1")
}

/// rdma-core 56's `ibv_devices` and `ibv_devinfo` print the same on both libraries, and on
/// ours the loader really maps our libibverbs (ldd's view of the same environment).
#[test]
#[ignore = "needs the Debian 13 userland: runs in the trixie stage (cargo xtask test --stage trixie)"]
fn rdma_core_56_tools_see_the_same_devices_interop() {
    addr();
    let mut env = ours_in_trixie();
    env.push("LD_TRACE_LOADED_OBJECTS=1".into());
    let loaded =
        String::from_utf8_lossy(&run(in_trixie(&env, &["/usr/bin/rping"])).stdout).into_owned();
    for lib in ["libibverbs.so.1", "librdmacm.so.1"] {
        let want = format!("{lib} => /host{}/{lib}", lib_dir().display());
        assert!(loaded.contains(&want), "{want} not in:\n{loaded}");
    }
    for prog in ["ibv_devices", "ibv_devinfo"] {
        let [theirs, ours] = [false, true].map(|ours| {
            let o = run(tool(prog, ours));
            String::from_utf8_lossy(&o.stdout).into_owned()
        });
        assert!(theirs.contains("rxe0"), "{prog} on rdma-core 56:\n{theirs}");
        assert_eq!(theirs, ours, "{prog}: rdma-core 56's, then ours");
    }
}

/// `ibv_rc_pingpong` (polling and events) and `ibv_ud_pingpong` of rdma-core 56, each side on
/// ours against the other on rdma-core 56's.
#[test]
#[ignore = "needs the Debian 13 userland: runs in the trixie stage (cargo xtask test --stage trixie)"]
fn pingpongs_against_rdma_core_56_interop() {
    addr();
    both_ways("ibv_rc_pingpong", &[], 18810);
    both_ways("ibv_rc_pingpong", &["-e"], 18820);
    both_ways("ibv_ud_pingpong", &["-s", "512"], 18830);
}

/// rping, `rdma_server`/`rdma_client`, `ucmatose` and `udaddy` of rdma-core 56, each side on
/// ours against the other on rdma-core 56's.
#[test]
#[ignore = "needs the Debian 13 userland: runs in the trixie stage (cargo xtask test --stage trixie)"]
fn rdmacm_utils_against_rdma_core_56_interop() {
    let a = addr();
    let a = a.as_str();
    for ours_client in [true, false] {
        cm_tool(
            &["rping", "-s", "-a", a, "-C", "10", "-v"],
            &["rping", "-c", "-a", a, "-C", "10", "-v"],
            7174,
            ours_client,
            "rdma-ping-9",
        );
        cm_tool(
            &["udaddy", "-b", a],
            &["udaddy", "-s", a],
            7174,
            ours_client,
            "data transfers complete",
        );
    }
    rdmacm_utils_both_ways(a);
}

/// rdma-core 56's `mckey`: a receiver on one library, a sender on the other, each way. The
/// sender must send all ten datagrams and end; the receiver asks for one of them, but rxe on
/// 6.12 and later flushes a UD sender's unsignaled sends at its teardown (vm_capi's
/// `mckey_on_our_librdmacm_interop`), so that it gets one of mckey's is asserted on 6.1 only.
/// Elsewhere our Rust side then sends to the group until the receiver has ended
/// ([`common::mcast_send_until`]), so the receiver ends by the protocol, not by being killed
/// after 30 s, and that it joined and receives is asserted on every kernel.
#[test]
#[ignore = "needs the Debian 13 userland: runs in the trixie stage (cargo xtask test --stage trixie)"]
fn mckey_against_rdma_core_56_interop() {
    let a = addr();
    // Multicast leaves through the rxe device's netdev.
    let o = std::process::Command::new("ip")
        .args(["route", "replace", "224.0.0.0/4", "dev", "d0"])
        .status();
    assert!(
        o.as_ref().is_ok_and(|s| s.success()),
        "ip route replace 224.0.0.0/4 dev d0: {o:?}"
    );
    let on_6_1 = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .starts_with("6.1.");
    for (g, ours_sends) in [("239.1.2.56", true), ("239.1.2.57", false)] {
        // The receiver line-buffered (coreutils' stdbuf, in the userland): mckey prints
        // `joined dgid` with printf once its join is done, which a pipe would keep in the
        // buffer until the program ends (and lose if it is killed).
        let env = if ours_sends { vec![] } else { ours_in_trixie() };
        let mut r = in_trixie(&env, &["/usr/bin/stdbuf", "-oL", "/usr/bin/mckey"]);
        r.args(["-m", g, "-b", &a, "-C", "1"]);
        let mut recv = Proc::spawn(r);
        // The sender starts once the receiver's join is done: librdmacm attaches the QP to
        // the group before it hands MULTICAST_JOIN to mckey, whose handler prints the line.
        // A datagram sent before the attach is dropped by the receiving device.
        recv.wait_output("mckey: joined dgid", Duration::from_secs(60));
        let mut s = tool("mckey", ours_sends);
        s.args(["-s", "-m", g, "-b", &a, "-C", "10"]);
        let (sok, sout) = Proc::spawn(s).finish(Duration::from_secs(60));
        // Where all of mckey's datagrams may be flushed (not 6.1), a receiver that got none
        // would spin until killed: our Rust side sends until it has ended, so it ends by the
        // protocol, and that it receives is asserted on every kernel.
        let woke = if on_6_1 || !sok {
            0
        } else {
            common::mcast_send_until(
                a.parse().unwrap(),
                format!("{g}:0").parse().unwrap(),
                || recv.has_exited(),
            )
        };
        let (rok, rout) = recv.finish(Duration::from_secs(30));
        let who = if ours_sends {
            "ours sending to rdma-core 56's"
        } else {
            "rdma-core 56's sending to ours"
        };
        eprintln!(
            "mckey {who}: receiver ended by itself: {rok} ({woke} datagram(s) of ours sent after mckey's)"
        );
        assert!(
            sok && sout.contains("data transfers complete"),
            "mckey sender, {who}:\n{sout}\nreceiver:\n{rout}"
        );
        assert!(
            rout.contains("mckey: joined dgid"),
            "mckey receiver, {who}:\n{rout}"
        );
        assert!(
            rok && rout.contains("data transfers complete"),
            "mckey receiver, {who}:\n{rout}"
        );
    }
}

/// rdma-core 56's `rstream` (non-blocking and blocking) and `riostream` (iomap), server on ours
/// and client on rdma-core 56's, then the other way round; rstream's bytes verified by the
/// tool (`-T v`); riostream without `-T v`, which checks bytes the device has not promised to
/// have placed yet (see `capi/vm_rsocket`'s `riostream`).
#[test]
#[ignore = "needs the Debian 13 userland: runs in the trixie stage (cargo xtask test --stage trixie)"]
fn rstream_and_riostream_against_rdma_core_56_interop() {
    let a = addr();
    let mut port = 7810;
    for server_ours in [true, false] {
        for (prog, size, mode) in [
            ("rstream", "4096", "v"),
            ("rstream", "100000", "b"),
            ("riostream", "65536", "n"),
        ] {
            port += 1;
            let p = port.to_string();
            let args = |role: &'static str| {
                [
                    role,
                    a.as_str(),
                    "-p",
                    &p,
                    "-S",
                    size,
                    "-I",
                    "2",
                    "-C",
                    "4",
                    "-T",
                    mode,
                ]
                .map(String::from)
            };
            let mut s = tool(prog, server_ours);
            s.args(args("-b"));
            let mut server = Proc::spawn(s);
            wait_cm_listening(port);
            if prog == "riostream" && !server_ours {
                server.wait_riostream_listener_ready();
            }
            let mut c = tool(prog, !server_ours);
            c.args(args("-s"));
            let (cok, cout) = Proc::spawn(c).finish(Duration::from_secs(70));
            let (sok, sout) = server.finish(Duration::from_secs(70));
            // What a pipe read only at the end used to have to hold (64 KiB): our side logs
            // each `EAGAIN` of a non-blocking `raccept` (`RVERBS_CAPI_LOG=1`).
            eprintln!(
                "{prog} -T {mode}, server {}: server wrote {} bytes, client {}",
                if server_ours {
                    "ours"
                } else {
                    "rdma-core 56's"
                },
                sout.len(),
                cout.len()
            );
            let who = if server_ours {
                "server ours"
            } else {
                "client ours"
            };
            assert!(
                cok && sok,
                "{prog} -S {size} -T {mode}, {who}:\nclient:\n{cout}\nserver:\n{sout}"
            );
            for out in [&cout, &sout] {
                assert!(
                    out.contains("custom") && !out.contains("failed"),
                    "{prog}, {who}:\n{out}"
                );
            }
        }
    }
}

/// perftest 25.01's four tools (SEND/WRITE/READ latency, WRITE bandwidth) with its TCP
/// exchange, 100 iterations, and over the rdma_cm (`-R`), 20: ours as the server against
/// rdma-core 56's client and, at the same time, as the client against its server.
#[test]
#[ignore = "needs the Debian 13 userland: runs in the trixie stage (cargo xtask test --stage trixie)"]
fn perftest_against_rdma_core_56_interop() {
    addr();
    perftest_both_ways(18860, false, 100);
    perftest_both_ways(18880, true, 20);
}

/// Tests of rdma-core 56's suite that pass on rdma-core 56's libraries and not on ours, or
/// fail or error on ours only, with why (reviewed). Each entry must still be such a
/// difference, so the list stays true.
const EXPECTED_DIFFERENCES: &[(&str, &str)] = &[];

/// The suite's modules (`test_*.py[.gz]` of Debian's python3-pyverbs 56), in groups of one
/// process each: every generic module alone (one module's crash, rdma-core's own
/// `test_flow` and `test_parent_domain` among them, ends only its own process), the
/// vendor modules (`test_mlx5_*`, `test_efa*`: they skip as a whole on rxe) in one.
fn module_groups() -> Vec<Vec<String>> {
    let dir = trixie_root().join("usr/share/doc/rdma-core/tests");
    let mut generic = Vec::new();
    let mut vendor = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(m) = name
            .strip_suffix(".py.gz")
            .or_else(|| name.strip_suffix(".py"))
            .filter(|m| m.starts_with("test_"))
        else {
            continue;
        };
        if m.starts_with("test_mlx5") || m.starts_with("test_efa") {
            vendor.push(m.to_string());
        } else {
            generic.push(m.to_string());
        }
    }
    generic.sort();
    vendor.sort();
    let mut groups: Vec<Vec<String>> = generic.into_iter().map(|m| vec![m]).collect();
    groups.push(vendor);
    groups
}

/// Unpacks the suite's gzipped modules in the current directory (the userland has no gzip).
const GUNZIP: &str = r#"import glob, gzip, os
for f in glob.glob("*.gz"):
    open(f[:-3], "wb").write(gzip.open(f).read()); os.remove(f)"#;

/// rdma-core 56's suite on `modules` in the userland, on ours or on rdma-core 56's libraries,
/// in a copy of the suite (a tmpfs of its own), killed after `limit_s` (`timeout`): whether it
/// exited 0, and its stdout and stderr.
fn pyverbs56(ours: bool, modules: &[String], limit_s: u32) -> (bool, String) {
    let script = format!(
        r#"cp -r /usr/share/doc/rdma-core/tests /tmp/t && cd /tmp/t &&
python3 -c '{GUNZIP}' &&
exec timeout {limit_s} python3 run_tests.py --dev rxe0 --gid 1 -v "$@""#
    );
    let mut args: Vec<&str> = vec!["/usr/bin/sh", "-c", &script, "sh"];
    args.extend(modules.iter().map(String::as_str));
    let env = if ours { ours_in_trixie() } else { vec![] };
    // Both pipes read as the suite writes (`output`): a verbose log outgrows a pipe's buffer.
    let o = in_trixie(&env, &args)
        .output()
        .unwrap_or_else(|e| panic!("the suite in the userland: {e}"));
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), log)
}

/// rdma-core 56's Python suite, module by module ([`module_groups`]), on rdma-core 56's
/// libraries and on ours at the same time: fails when a test passes on rdma-core 56's and
/// not on ours, or fails/errors on ours and not on rdma-core 56's, unless it is in
/// [`EXPECTED_DIFFERENCES`]. Also proves that pyverbs imports on ours (its `mlx5dv` module
/// links rdma-core 56's libmlx5, which needs `ibv_cmd_create_cq_ex2@IBVERBS_PRIVATE_34`).
#[test]
#[ignore = "needs the Debian 13 userland: runs in the trixie stage (cargo xtask test --stage trixie)"]
fn pyverbs_56_on_both_libraries_interop() {
    addr();
    // pyverbs with its mlx5dv module imports on ours, and ours is what it maps.
    let mut env = ours_in_trixie();
    env.push("PYTHONDONTWRITEBYTECODE=1".into());
    let probe = "import pyverbs.device, pyverbs.providers.mlx5.mlx5dv; \
                 print(open('/proc/self/maps').read())";
    let maps =
        String::from_utf8_lossy(&run(in_trixie(&env, &["/usr/bin/python3", "-c", probe])).stdout)
            .into_owned();
    let ours_lib = format!("/host{}/libibverbs.so.1", lib_dir().display());
    assert!(maps.contains(&ours_lib), "{ours_lib} not mapped:\n{maps}");
    assert!(maps.contains("libmlx5.so.1"), "libmlx5 not mapped:\n{maps}");

    let t0 = Instant::now();
    let mut theirs = BTreeMap::new();
    let mut ours = BTreeMap::new();
    let mut logs = String::new();
    let mut crashed = Vec::new();
    for group in module_groups() {
        let g = &group;
        let [(tok, tlog), (ook, olog)] = std::thread::scope(|sc| {
            [false, true]
                .map(|o| sc.spawn(move || pyverbs56(o, g, 600)))
                .map(|h| h.join().unwrap())
        });
        let (t, o) = (outcomes(&tlog), outcomes(&olog));
        eprintln!(
            "{}: rdma-core 56's {} ({}), ours {} ({}), {:?}",
            group.join(" "),
            counts(&t),
            if tok { "exit 0" } else { "failed" },
            counts(&o),
            if ook { "exit 0" } else { "failed" },
            t0.elapsed()
        );
        // unittest exits 1 when a test failed; a run with no verdict line at its end crashed.
        for (lib, log) in [("rdma-core 56's", &tlog), ("ours", &olog)] {
            if !log.lines().any(|l| l.starts_with("Ran ")) {
                crashed.push(format!("{} on {lib}", group.join(" ")));
            }
        }
        logs.push_str(&format!("=== {}: ours\n{olog}\n", group.join(" ")));
        theirs.extend(t);
        ours.extend(o);
    }
    eprintln!("pyverbs 56, rdma-core 56's: {}", counts(&theirs));
    eprintln!("pyverbs 56, ours:           {}", counts(&ours));
    eprintln!("crashed (no unittest summary): {crashed:?}");
    let passes = theirs.values().filter(|o| **o == Outcome::Pass).count();
    assert!(
        passes > 50,
        "rdma-core 56's runs passed only {passes}:\n{logs}"
    );
    let mut wrong = Vec::new();
    for (name, &t) in &theirs {
        let o = ours.get(name).copied();
        let expected = EXPECTED_DIFFERENCES.iter().find(|(n, _)| n == name);
        let differs = (t == Outcome::Pass && o != Some(Outcome::Pass))
            || (o.is_some_and(Outcome::bad) && !t.bad());
        if o != Some(t) {
            eprintln!("  {name}: rdma-core 56's {t:?}, ours {o:?}");
        }
        match (differs, expected) {
            (true, None) => wrong.push(format!("{name}: {t:?} on rdma-core 56's, {o:?} on ours")),
            (false, Some(_)) => wrong.push(format!(
                "{name} is listed in EXPECTED_DIFFERENCES but is {t:?} on rdma-core 56's and \
                 {o:?} on ours: update the list"
            )),
            _ => {}
        }
    }
    for (name, &o) in &ours {
        if o.bad() && !theirs.contains_key(name) {
            wrong.push(format!("{name}: {o:?} on ours, not run on rdma-core 56's"));
        }
    }
    assert!(wrong.is_empty(), "{}\n--- ours:\n{logs}", wrong.join("\n"));
}
