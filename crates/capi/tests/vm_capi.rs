//! rdma-core's own, unmodified programs (Debian's ibverbs-utils) run on our
//! `libibverbs.so.1` (and rdmacm-utils on our `librdmacm.so.1`) through `LD_LIBRARY_PATH`, against the same programs on rdma-core's
//! libraries. Host guest only (the tests' names carry `interop`, which the minimal guest
//! skips); the library is the one `cargo xtask capi` (stage `capi` of `cargo xtask test`)
//! put in `<target>/capi/lib`, or `$RVERBS_CAPI_LIB`.

mod common;
use common::{
    both_ways, cm_tool, counts, env_or, lib_dir, outcomes, perftest_both_ways, pyverbs_on_both,
    pyverbs_suite_copy, rdmacm_utils_both_ways, run, tool, Outcome,
};

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_devices_and_devinfo_print_the_same_interop() {
    let dev = env_or("RVERBS_DEV_A", "rxe0");
    // The dynamic loader really picks our library (ldd's view of the same environment).
    let mut c = tool("ibv_devinfo", true);
    c.env("LD_TRACE_LOADED_OBJECTS", "1");
    let loaded = String::from_utf8_lossy(&run(c).stdout).into_owned();
    let want = format!("libibverbs.so.1 => {}/libibverbs.so.1", lib_dir().display());
    assert!(loaded.contains(&want), "{want} not in:\n{loaded}");
    for args in [&[][..], &["-v"][..]] {
        for prog in ["ibv_devices", "ibv_devinfo"] {
            if prog == "ibv_devices" && !args.is_empty() {
                continue;
            }
            let mut c = tool(prog, false);
            c.args(args);
            let theirs = run(c).stdout;
            let mut c = tool(prog, true);
            c.args(args);
            let ours = run(c).stdout;
            let (t, o) = (
                String::from_utf8_lossy(&theirs),
                String::from_utf8_lossy(&ours),
            );
            assert!(
                t.contains(&dev),
                "{prog} {args:?} on rdma-core lists no {dev}:\n{t}"
            );
            assert_eq!(
                o, t,
                "{prog} {args:?}: ours (left) differs from rdma-core's (right)"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_rc_pingpong_polling_interop() {
    both_ways("ibv_rc_pingpong", &[], 18610);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_rc_pingpong_events_interop() {
    both_ways("ibv_rc_pingpong", &["-e"], 18620);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_uc_pingpong_interop() {
    both_ways("ibv_uc_pingpong", &[], 18630);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_ud_pingpong_interop() {
    both_ways("ibv_ud_pingpong", &["-s", "512"], 18640);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_srq_pingpong_interop() {
    both_ways("ibv_srq_pingpong", &[], 18650);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn our_librdmacm_runs_rdmacm_utils_interop() {
    let a = env_or("RVERBS_ADDR_A", "10.10.0.1");
    let a = a.as_str();
    // The loader really maps our librdmacm (ldd's view of the same environment).
    let mut c = tool("rping", true);
    c.env("LD_TRACE_LOADED_OBJECTS", "1");
    let loaded = String::from_utf8_lossy(&run(c).stdout).into_owned();
    let want = format!("librdmacm.so.1 => {}/librdmacm.so.1", lib_dir().display());
    assert!(loaded.contains(&want), "{want} not in:\n{loaded}");
    for ours_client in [true, false] {
        cm_tool(
            &["rping", "-s", "-a", a, "-C", "10", "-v"],
            &["rping", "-c", "-a", a, "-C", "10", "-v"],
            7174,
            ours_client,
            "rdma-ping-9",
        );
    }
    rdmacm_utils_both_ways(a);
}

/// perftest's four tools ([`common::PERFTEST_TOOLS`]), 100 iterations, out-of-band exchange
/// over TCP: ours as the server against rdma-core's client and, at the same time, as the
/// client against rdma-core's server.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn perftest_interop() {
    perftest_both_ways(18660, false, 100);
}

/// The same four tools over the rdma_cm (`-R`), 20 iterations: our librdmacm and libibverbs
/// as the server against rdma-core's client and, at the same time, as the client against
/// rdma-core's server.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn perftest_rdma_cm_interop() {
    perftest_both_ways(18670, true, 20);
}

// --- multicast: rdma-core's mckey on our librdmacm -------------------------------------------

mod mcast {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use rverbs_cm::{CmEventKind, Endpoint, McJoinFlags};
    use rverbs_uverbs::mr::{Mr, PageBuf};
    use rverbs_uverbs::{WcFlags, WcStatus};

    /// Bytes of the GRH in front of every UD receive; mckey's datagrams carry 100 bytes.
    const GRH: usize = 40;
    const MSG: usize = 100;

    pub fn local() -> Ipv4Addr {
        super::env_or("RVERBS_ADDR_A", "10.10.0.1").parse().unwrap()
    }

    /// The route to 224.0.0.0/4 that resolving a group's address needs (idempotent).
    pub fn route() {
        let out = Command::new("ip")
            .args(["route", "replace", "224.0.0.0/4", "dev", "d0"])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            o => eprintln!("WARNING: ip route replace 224.0.0.0/4 dev d0: {o:?}"),
        }
    }

    /// rdma-core's mckey on our libraries (`ours`) or on rdma-core's, with a 120 s limit (a
    /// bound for a failure only: a receiver ends by receiving, a sender by sending), its
    /// stdout line-buffered (coreutils' stdbuf) so that [`joined`] sees its join line when
    /// it prints it.
    pub fn mckey(ours: bool, args: &[&str]) -> std::process::Child {
        let c = super::tool("mckey", ours);
        let path = c.get_program().to_owned();
        let mut t = Command::new("timeout");
        t.args(["120", "/usr/bin/stdbuf", "-oL"])
            .arg(path)
            .args(args);
        for (k, v) in c.get_envs() {
            match v {
                Some(v) => t.env(k, v),
                None => t.env_remove(k),
            };
        }
        t.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Reads mckey's stdout until its `mckey: joined dgid` line: the join is done, and the
    /// librdmacm (ours and rdma-core's) attaches the QP to the group before it hands
    /// MULTICAST_JOIN to mckey, whose handler prints the line; a receiver has posted its
    /// receives before it joins. A datagram sent before that is dropped, so a sender starts
    /// only now (the line decides, not a sleep). Its end (mckey exited, or its `timeout`
    /// killed it) ends the wait too, and the caller's checks then fail with the output.
    /// Returns what was read, to put in front of [`finish`]'s.
    pub fn joined(c: &mut std::process::Child) -> String {
        use std::io::Read;
        let out = c.stdout.as_mut().unwrap();
        let mut seen = Vec::new();
        let mut byte = [0u8; 1];
        while !String::from_utf8_lossy(&seen).contains("mckey: joined dgid") {
            match out.read(&mut byte) {
                Ok(1) => seen.push(byte[0]),
                _ => break,
            }
        }
        // The rest of the line.
        while seen.last().is_some_and(|b| *b != b'\n') {
            match out.read(&mut byte) {
                Ok(1) => seen.push(byte[0]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    }

    pub fn finish(c: std::process::Child) -> (Option<i32>, String) {
        let o = c.wait_with_output().unwrap();
        (
            o.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }

    /// Our Rust side joins `grp` send-only and sends `n` datagrams of 100 bytes, each waited
    /// for.
    pub fn rust_sends(grp: SocketAddr, n: usize) {
        let s = crate::common::McastSender::join(local(), grp);
        for i in 0..n as u64 {
            s.send(i);
        }
    }

    /// Our Rust side joined to `grp` with 12 receives posted.
    pub fn rust_receiver(grp: SocketAddr) -> (Endpoint, Mr<PageBuf>) {
        let r = crate::common::mcast_endpoint(local(), grp);
        r.join_multicast(grp, McJoinFlags::FULL_MEMBER).unwrap();
        assert!(r
            .id()
            .take_event()
            .is_some_and(|e| e.kind() == CmEventKind::MULTICAST_JOIN));
        let mr = r.reg_msgs(PageBuf::new(4096 * 4).unwrap()).unwrap();
        for i in 0..12usize {
            r.post_recv(i as u64, &[mr.sge(i * 256..i * 256 + GRH + MSG)])
                .unwrap();
        }
        (r, mr)
    }

    /// The datagrams `r` receives until `sender` has exited for 1 s (at most 20 s), each
    /// checked to be mckey's (100 bytes with immediate data).
    pub fn rust_receives(r: &Endpoint, sender: &mut std::process::Child) -> usize {
        let mut got = 0;
        let end = Instant::now() + Duration::from_secs(20);
        let mut exited_at = None;
        while got < 10 && Instant::now() < end {
            if exited_at.is_none() && sender.try_wait().unwrap().is_some() {
                exited_at = Some(Instant::now());
            }
            if exited_at.is_some_and(|t| t.elapsed() > Duration::from_secs(1)) {
                break;
            }
            let Some(wc) = r.get_recv_comp_timeout(Duration::from_millis(200)).unwrap() else {
                continue;
            };
            assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
            assert_eq!(wc.byte_len as usize, GRH + MSG, "{wc:?}");
            assert!(wc.wc_flags.contains(WcFlags::WITH_IMM), "{wc:?}");
            got += 1;
        }
        got
    }

    pub fn group(last: u8) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(239, 1, 26, last)), 0)
    }
}

/// rdma-core's `mckey` on our librdmacm and libibverbs, one node: as a receiver (it exits 0
/// only after polling all 10 completions) of our Rust side's sends and of mckey on
/// rdma-core's libraries; as a sender to our Rust side and to mckey on rdma-core's.
///
/// mckey's sender posts unsignaled sends and tears down without waiting for them: rxe on 6.12
/// flushes what it has not sent yet (`rverbs-cm`'s `vm_mcast` documents it for rdma-core's
/// own mckey), so where mckey sends, that its datagrams arrive is asserted on 6.1 only; on
/// other kernels the counts are printed, and an mckey receiver that got none of mckey's gets
/// one from our Rust side afterwards ([`common::mcast_send_until`]): it ends by itself
/// (exit 0) on every kernel instead of being killed by its `timeout`. Where ours sends
/// from Rust (each send waited for), every datagram must arrive on every kernel.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn mckey_on_our_librdmacm_interop() {
    use mcast::*;
    route();
    let a = local().to_string();
    let a = a.as_str();
    let on_6_1 = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .starts_with("6.1.");

    // 1. mckey on ours receives 10 datagrams our Rust side sends.
    let grp = group(10);
    let g = grp.ip().to_string();
    let mut recv = mckey(true, &["-m", &g, "-b", a, "-C", "10"]);
    let head = joined(&mut recv);
    rust_sends(grp, 10);
    let (code, out) = finish(recv);
    let out = head + &out;
    assert_eq!(code, Some(0), "mckey on ours, receiving from Rust: {out}");
    assert!(out.contains("data transfers complete"), "{out}");

    // 2. mckey on ours sends to our Rust side.
    let grp = group(11);
    let g = grp.ip().to_string();
    let (r, _mr) = rust_receiver(grp);
    let mut send = mckey(true, &["-s", "-m", &g, "-b", a, "-C", "10"]);
    let got = rust_receives(&r, &mut send);
    let (code, out) = finish(send);
    assert_eq!(code, Some(0), "mckey on ours, sending to Rust: {out}");
    assert!(out.contains("data transfers complete"), "{out}");
    eprintln!("Rust received {got} of the 10 datagrams of mckey on ours");
    if on_6_1 {
        assert!(got > 0, "no datagram of mckey on ours arrived: {out}");
    }
    drop(r);

    // 3. and 4. mckey on ours and mckey on rdma-core's, each way: the receiver asks for one
    // datagram of the sender's ten (see above for why not all).
    for (n, ours_sends) in [(12u8, true), (13, false)] {
        let grp = group(n);
        let g = grp.ip().to_string();
        let mut recv = mckey(!ours_sends, &["-m", &g, "-b", a, "-C", "1"]);
        let head = joined(&mut recv);
        let send = mckey(ours_sends, &["-s", "-m", &g, "-b", a, "-C", "10"]);
        let (scode, sout) = finish(send);
        let who = if ours_sends {
            "ours sending to rdma-core's"
        } else {
            "rdma-core's sending to ours"
        };
        assert_eq!(scode, Some(0), "mckey sender, {who}: {sout}");
        assert!(sout.contains("data transfers complete"), "{sout}");
        // Where mckey's datagrams may all be flushed (not 6.1), a receiver that got none
        // would spin until its `timeout`: our Rust side sends until it has ended, so it
        // ends by the protocol, and that it receives is asserted on every kernel.
        let woke = if on_6_1 {
            0
        } else {
            crate::common::mcast_send_until(local(), grp, || recv.try_wait().unwrap().is_some())
        };
        let (rcode, rout) = finish(recv);
        let rout = head + &rout;
        eprintln!(
            "mckey {who}: receiver exit {rcode:?} ({woke} datagram(s) of ours sent after mckey's)"
        );
        assert_eq!(rcode, Some(0), "mckey receiver, {who}: {rout}");
        assert!(rout.contains("data transfers complete"), "{rout}");
    }
}

/// Two nodes: `mckey` on our libraries on node A and `mckey` on rdma-core's on node B, both
/// directions, two receivers each time (one on each library, on the receiving node). Skipped
/// (`--skip two_node` in the one-node stages; run by hand there it returns at once).
///
/// Both senders are mckey, whose unsignaled sends rxe on 6.12 flushes at its teardown (see
/// `mckey_on_our_librdmacm_interop`): each receiver asks for one datagram of the ten, and
/// that it gets it is asserted on 6.1 only; elsewhere the receivers' exits are printed.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn mckey_two_node_on_our_librdmacm_interop() {
    use mcast::*;
    if std::env::var("RVERBS_TOPO").as_deref() != Ok("two") {
        eprintln!("skipped: needs the two-node topology (RVERBS_TOPO=two)");
        return;
    }
    route();
    let a = env_or("RVERBS_ADDR_A", "10.20.0.1");
    let b = env_or("RVERBS_ADDR_B", "10.20.0.2");
    let on_6_1 = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .starts_with("6.1.");
    // (group, sender on ours?, sender's node, receivers' node)
    for (n, ours_sends, from, to) in [(30u8, true, &a, &b), (31, false, &b, &a)] {
        let g = group(n).ip().to_string();
        let recv: Vec<_> = [true, false]
            .into_iter()
            .map(|ours| {
                let mut c = mckey(ours, &["-m", &g, "-b", to, "-C", "1"]);
                let head = joined(&mut c);
                (ours, c, head)
            })
            .collect();
        let send = mckey(ours_sends, &["-s", "-m", &g, "-b", from, "-C", "10"]);
        let (scode, sout) = finish(send);
        let lib = |o: bool| if o { "ours" } else { "rdma-core's" };
        assert_eq!(
            scode,
            Some(0),
            "mckey sender on {} ({from}): {sout}",
            lib(ours_sends)
        );
        assert!(sout.contains("data transfers complete"), "{sout}");
        for (ours, c, head) in recv {
            let (rcode, rout) = finish(c);
            let rout = head + &rout;
            let who = format!(
                "mckey on {} ({to}) receiving from mckey on {} ({from})",
                lib(ours),
                lib(ours_sends)
            );
            eprintln!("{who}: exit {rcode:?}");
            if on_6_1 {
                assert_eq!(rcode, Some(0), "{who}: {rout}");
                assert!(rout.contains("data transfers complete"), "{who}: {rout}");
            } else {
                assert!(rcode == Some(0) || rcode == Some(124), "{who}: {rout}");
            }
        }
    }
}

/// pyverbs' `test_qpex.test_qp_ex_rc_atomic_write` (rdma-core's Python suite, one test) on
/// rdma-core's libraries and on ours, at the same time: on a kernel whose rxe has
/// atomic write (6.12 and the newest, 7.x) it must pass on both. The 6.1 stages skip it (its
/// name has `needs_atomic_write`; run there by hand it fails, saying why): there
/// rdma-core's errors, librxe offering the builder to a kernel without the operation, and ours
/// refuses: `vm_errors::ibv_wr_atomic_write_follows_the_device` checks that refusal.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn pyverbs_atomic_write_needs_atomic_write_interop() {
    const TEST: &str = "test_qp_ex_rc_atomic_write";
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    assert!(
        !release.starts_with("6.1."),
        "{TEST} is checked from 6.12 on (rxe of 6.1 has no atomic write), this is {}: the bed \
         skips `needs_atomic_write` tests on 6.1",
        release.trim()
    );
    let dir = pyverbs_suite_copy("rverbs-pyverbs-aw");
    let dev = env_or("RVERBS_DEV_A", "rxe0");
    let select = ["-k".to_string(), TEST.to_string()];
    for py in pyverbs_on_both(&dir, &dev, "1", 120, &select) {
        let lib = if py.ours { "ours" } else { "rdma-core's" };
        let out = &py.out;
        eprintln!("pyverbs {TEST} on {lib}: {}", py.status);
        assert!(
            out.contains("Ran 1 test"),
            "{TEST} on {lib}: not run once: {out}"
        );
        // unittest's summary, its last line: "OK", "OK (skipped=1)", "FAILED (errors=1)".
        let summary = out
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        assert!(
            py.status.success() && summary.trim() == "OK",
            "{TEST} on {lib} must pass on {}: {out}",
            release.trim()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// pyverbs' `test_odp` module (rdma-core's Python suite, on-demand paging) on rdma-core's
/// libraries and on ours, at the same time, on a kernel whose rxe has ODP (7.x, the bed's
/// newest): every test that passes on rdma-core's passes on ours, none fails or errors on
/// ours, and `test_odp_rc_srq_traffic` (two RC QPs on an SRQ over ODP regions; it once failed
/// on ours at `ibv_create_qp`) passes on both. On older kernels the module skips alike on
/// both (no ODP): it returns at once, saying so.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn pyverbs_odp_needs_odp_interop() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if release
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok())
        < Some(7)
    {
        panic!(
            "test_odp is compared from 7.x on (rxe has no ODP before about 6.15), this is {}: \
             the bed skips `needs_odp` tests on such kernels",
            release.trim()
        );
    }
    let dir = pyverbs_suite_copy("rverbs-pyverbs-odp");
    let dev = env_or("RVERBS_DEV_A", "rxe0");
    let select = ["-k".to_string(), "tests.test_odp.".to_string()];
    let [theirs, ours] = pyverbs_on_both(&dir, &dev, "1", 300, &select);
    let (t, o) = (outcomes(&theirs.out), outcomes(&ours.out));
    eprintln!(
        "test_odp on rdma-core's: {}; on ours: {}",
        counts(&t),
        counts(&o)
    );
    for (name, want) in &t {
        if o.get(name) != Some(want) {
            eprintln!(
                "  {name}: {want:?} on rdma-core's, {:?} on ours",
                o.get(name)
            );
        }
    }
    assert!(
        t.len() >= 17,
        "test_odp not run on rdma-core's: {}",
        theirs.out
    );
    for (name, want) in &t {
        let got = o.get(name).copied();
        assert!(
            *want != Outcome::Pass || got == Some(Outcome::Pass),
            "{name}: passes on rdma-core's, {got:?} on ours: {}",
            ours.out
        );
        assert!(
            !got.is_some_and(Outcome::bad),
            "{name}: {got:?} on ours: {}",
            ours.out
        );
    }
    let srq = "test_odp.OdpTestCase.test_odp_rc_srq_traffic";
    assert_eq!(
        (t.get(srq), o.get(srq)),
        (Some(&Outcome::Pass), Some(&Outcome::Pass)),
        "{}",
        ours.out
    );
    let _ = std::fs::remove_dir_all(&dir);
}
