//! Host tests of `rverbs selftest`: options, the watchdog, the lines, the report.

use super::*;
use rverbs::uverbs::device::Transport;
use rverbs::uverbs::gid::Gid;

fn opts(args: &[&str]) -> Result<Opts, String> {
    parse(args.iter().map(OsString::from).collect()).map_err(|e| e.to_string())
}

#[test]
fn options() {
    assert_eq!(opts(&[]).unwrap(), Opts::default());
    let o = opts(&[
        "-d", "mlx5_0", "-i", "2", "-g", "3", "-a", "10.0.0.1", "-t", "4", "-c", "ud-send",
        "--case", "cm-rc", "--force", "rc-srq", "-o", "r.json",
    ])
    .unwrap();
    assert_eq!(o.dev.as_deref(), Some("mlx5_0"));
    assert_eq!((o.port, o.gid_idx), (2, Some(3)));
    assert_eq!(o.addr.as_deref(), Some("10.0.0.1"));
    assert_eq!(o.timeout, Duration::from_secs(4));
    assert_eq!(o.cases, [Case::UdSend, Case::CmRc]);
    assert_eq!(o.force, [Case::RcSrq]);
    assert_eq!(o.json, Some(OsString::from("r.json")));
    assert!(opts(&["--json", "x", "-l"]).unwrap().list);
}

#[test]
fn bad_options_say_what_was_wrong() {
    let e = opts(&["-c", "rc-sned"]).unwrap_err();
    assert!(
        e.starts_with("unknown case \"rc-sned\"; the cases are: rc-send "),
        "{e}"
    );
    assert!(opts(&["--force", "x"])
        .unwrap_err()
        .contains("unknown case \"x\""));
    assert_eq!(
        opts(&["-i", "0"]).unwrap_err(),
        "bad port (ports are numbered from 1) \"0\""
    );
    assert!(opts(&["-t", "0"]).unwrap_err().contains("bad timeout"));
    assert!(opts(&["-t", "1.5"]).unwrap_err().contains("whole seconds"));
    assert!(opts(&["-g", "256"]).unwrap_err().contains("bad GID index"));
    assert!(opts(&["-z"]).unwrap_err().contains("-z"));
    assert!(opts(&["-d"]).unwrap_err().contains("-d"));
}

#[test]
fn a_usage_error_goes_with_the_usage_text() {
    let e = run(vec!["-c".into(), "nope".into()]).unwrap_err();
    assert!(e.is::<crate::UsageError>(), "{e}");
}

#[test]
fn usage_names_every_case() {
    for c in Case::ALL {
        assert!(
            USAGE.contains(&format!(" {} ", c.name()))
                || USAGE.contains(&format!(" {}\n", c.name())),
            "{}",
            c.name()
        );
    }
}

#[test]
fn watchdog_passes_fails_and_skips() {
    let t = Duration::from_secs(5);
    assert_eq!(with_watchdog("a", t, |_| Ok(Outcome::Pass)), Verdict::Pass);
    assert_eq!(
        with_watchdog("b", t, |_| Ok(Outcome::Skip("no".into()))),
        Verdict::Skip("no".into())
    );
    assert_eq!(
        with_watchdog("c", t, |_| Err("bad".into())),
        Verdict::Fail("bad".into())
    );
    // The deadline handed to the case is the limit from now.
    let v = with_watchdog("d", t, move |end| {
        let left = end.saturating_duration_since(Instant::now());
        if left > t - Duration::from_secs(1) && left <= t {
            Ok(Outcome::Pass)
        } else {
            Err(format!("{left:?} left"))
        }
    });
    assert_eq!(v, Verdict::Pass);
}

#[test]
fn a_panicking_case_fails() {
    let v = with_watchdog("p", Duration::from_secs(5), |_| panic!("on purpose"));
    assert!(
        matches!(v, Verdict::Fail(ref r) if r.contains("panicked")),
        "{v:?}"
    );
}

#[test]
fn bounded_returns_the_value_or_says_it_timed_out() {
    assert_eq!(bounded("v", Duration::from_secs(5), || 7), Ok(7));
    let t0 = Instant::now();
    let e = bounded("stuck", Duration::from_millis(300), || loop {
        std::thread::park();
    })
    .unwrap_err();
    assert!(e.starts_with("timed out: still running after 0 s"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

/// A case stuck in a call that never returns (as in a dead device) is abandoned: FAIL after
/// its limit and the grace, not a hang.
#[test]
fn a_case_that_never_returns_fails_on_time() {
    let t0 = Instant::now();
    let v = with_watchdog("stuck", Duration::from_secs(1), |_| loop {
        std::thread::park();
    });
    let took = t0.elapsed();
    assert!(
        matches!(v, Verdict::Fail(ref r) if r.contains("timed out")),
        "{v:?}"
    );
    assert!(took >= Duration::from_secs(1) + GRACE, "{took:?}");
    assert!(
        took < Duration::from_secs(1) + GRACE + Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn lines() {
    let ms = Duration::from_millis(12);
    assert_eq!(
        line(Case::RcSend, &Verdict::Pass, ms),
        "PASS  rc-send              (12 ms)"
    );
    assert_eq!(
        line(
            Case::UdSend,
            &Verdict::Skip("iWARP has no UD QPs".into()),
            ms
        ),
        "SKIP  ud-send              iWARP has no UD QPs"
    );
    assert_eq!(
        line(Case::RcErrRkey, &Verdict::Fail("why".into()), ms),
        "FAIL  rc-error-rkey        why"
    );
}

fn entry(index: u32, port: u32, gid: &str, t: GidType) -> GidEntry {
    GidEntry {
        index,
        port,
        gid: Gid::parse(gid).unwrap(),
        gid_type: t,
        ndev_ifindex: 0,
    }
}

#[test]
fn the_loopback_gid_prefers_roce_v2_ipv4() {
    let table = [
        entry(0, 1, "fe80::5054:ff:fe12:3456", GidType::ROCE_V1),
        entry(1, 1, "fe80::5054:ff:fe12:3456", GidType::ROCE_V2),
        entry(2, 1, "::ffff:10.0.0.1", GidType::ROCE_V1),
        entry(3, 1, "::ffff:10.0.0.1", GidType::ROCE_V2),
        entry(0, 2, "::ffff:10.0.0.2", GidType::ROCE_V2),
    ];
    assert_eq!(pick_gid(&table, 1, None).map(|e| e.index), Some(3));
    assert_eq!(pick_gid(&table[..2], 1, None).map(|e| e.index), Some(1));
    assert_eq!(pick_gid(&table[..1], 1, None).map(|e| e.index), Some(0));
    assert_eq!(
        pick_gid(&table, 2, None).map(|e| (e.port, e.index)),
        Some((2, 0))
    );
    assert_eq!(pick_gid(&table, 1, Some(2)).map(|e| e.index), Some(2));
    assert!(pick_gid(&table, 1, Some(9)).is_none());
    assert!(pick_gid(&table, 3, None).is_none());
}

#[test]
fn the_report_lists_each_case_and_counts_them() {
    let results = [
        (Case::RcSend, Verdict::Pass, Duration::from_millis(3)),
        (
            Case::UdSend,
            Verdict::Skip("iWARP has no UD QPs".into()),
            Duration::ZERO,
        ),
        (
            Case::CmRc,
            Verdict::Fail("client: connect: \"x\"\n".into()),
            Duration::from_millis(9),
        ),
    ];
    let t = report(Json::obj([("name", Json::str("siw0"))]), None, &results).to_text();
    for want in [
        "\"tool\": \"rverbs selftest\"",
        "\"device\": {\n    \"name\": \"siw0\"\n  }",
        "\"name\": \"rc-send\",\n      \"result\": \"PASS\",\n      \"reason\": null,\n      \"ms\": 3",
        "\"name\": \"ud-send\",\n      \"result\": \"SKIP\",\n      \"reason\": \"iWARP has no UD QPs\"",
        "\"result\": \"FAIL\",\n      \"reason\": \"client: connect: \\\"x\\\"\\n\"",
        "\"ok\": false,",
        "\"summary\": {\n    \"passed\": 1,\n    \"failed\": 1,\n    \"skipped\": 1\n  }",
    ] {
        assert!(t.contains(want), "{want}\nnot in\n{t}");
    }
}

#[test]
fn the_device_member_has_attributes_ports_and_gids() {
    let mut h = HcaInfo {
        name: "rxe0".into(),
        transport: Transport::IB,
        ..Default::default()
    };
    h.attr.max_srq = 7;
    h.attr.atomic_cap = AtomicCap::HCA;
    h.ports.push(crate::devinfo::PortInfo {
        port: 1,
        attr: Default::default(),
        gids: vec![entry(1, 1, "::ffff:10.0.0.1", GidType::ROCE_V2)],
    });
    let t = device_json(&h, "rxe").to_text();
    for want in [
        "\"name\": \"rxe0\"",
        "\"driver\": \"rxe\"",
        "\"transport\": \"InfiniBand\"",
        "\"max_srq\": 7",
        "\"atomic_cap\": \"",
        "\"gid\": \"::ffff:10.0.0.1\"",
        "\"type\": \"RoCE v2\"",
        "\"board_id\": null",
    ] {
        assert!(t.contains(want), "{want}\nnot in\n{t}");
    }
}

#[test]
fn a_device_that_does_not_exist_is_named() {
    let e = run(vec!["-d".into(), "nosuch\"dev0".into()]).unwrap_err();
    assert!(
        e.to_string().starts_with(r#"device "nosuch\"dev0": "#),
        "{e}"
    );
}
