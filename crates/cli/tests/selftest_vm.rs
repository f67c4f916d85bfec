//! `rverbs selftest` on the guest's device: rxe in the rxe stages (every case passes), siw
//! in the siw stage (the RC cases iWARP can do pass, over rdma_cm connections: SEND, WRITE,
//! READ, inline, SRQ, events, the wrong-rkey, wrong-lkey and flush errors, and the rdma_cm
//! case; the others are skipped with iWARP's reasons), the JSON report parsed by Python with
//! the same case list, and a case made to fail (one the device cannot do, forced; an address
//! that is not the device's) failing with exit status 1; on siw also the RC cases given an
//! address that is not the device's.

mod common;
use common::{run, skipped, stderr, stdout, which};

use std::path::PathBuf;
use std::process::{Command, Output};

fn siw() -> bool {
    std::env::var("RVERBS_PROVIDER").as_deref() == Ok("siw")
}

fn dev() -> String {
    assert_eq!(
        std::env::var("RVERBS_VM").as_deref(),
        Ok("1"),
        "runs in the VM"
    );
    std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into())
}

/// What iWARP cannot do: skipped on siw, each with its reason.
const IWARP_SKIPS: [(&str, &str); 7] = [
    ("rc-send-imm", "iWARP has no immediate data"),
    ("rc-write-imm", "iWARP has no immediate data"),
    ("rc-atomic-fetch-add", "iWARP has no atomic operations"),
    ("rc-atomic-cmp-swap", "iWARP has no atomic operations"),
    ("uc-send", "iWARP has no UC QPs"),
    ("uc-write-imm", "iWARP has no UC QPs"),
    ("ud-send", "iWARP has no UD QPs"),
];

/// Every case and what it must end as on this guest's device.
fn expected() -> Vec<(&'static str, &'static str)> {
    const ALL: [&str; 18] = [
        "rc-send",
        "rc-send-imm",
        "rc-write",
        "rc-write-imm",
        "rc-read",
        "rc-inline",
        "rc-atomic-fetch-add",
        "rc-atomic-cmp-swap",
        "rc-srq",
        "rc-events",
        "rc-error-rkey",
        "rc-error-lkey",
        "rc-error-flush",
        "uc-send",
        "uc-write-imm",
        "ud-send",
        "cm-rc",
        "srd-send",
    ];
    ALL.into_iter()
        .map(|c| {
            // srd-send: EFA's; skipped on rxe and siw.
            let r = if c == "srd-send" || siw() && IWARP_SKIPS.iter().any(|(s, _)| *s == c) {
                "SKIP"
            } else {
                "PASS"
            };
            (c, r)
        })
        .collect()
}

struct Report(PathBuf);

impl Report {
    fn new(tag: &str) -> Report {
        Report(std::env::temp_dir().join(format!("selftest-{tag}-{}.json", std::process::id())))
    }
    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `rverbs selftest -d DEV -o REPORT ARGS`.
fn selftest(report: &Report, args: &[&str]) -> Output {
    let dev = dev();
    let mut a = vec!["selftest", "-d", &dev, "-o", report.path()];
    a.extend_from_slice(args);
    let t = std::time::Instant::now();
    let o = run(&a);
    eprintln!(
        "rverbs {a:?}: {:?}\n{}{}",
        t.elapsed(),
        stdout(&o),
        stderr(&o)
    );
    o
}

/// `(name, result)` of each case in the JSON report, read by Python (None where the guest
/// has no python3: said so, and only allowed outside the host guest). One interpreter without
/// `site` (`-S`): Python's start-up is most of this test's time in the emulated guest.
/// `json.load` is the parser of `python3 -m json.tool`: strict JSON or an exception.
fn json_cases(report: &Report) -> Option<Vec<(String, String)>> {
    let Some(py) = which("python3") else {
        let guest = std::env::var("RVERBS_GUEST").unwrap_or_default();
        assert_ne!(guest, "host", "python3 missing in the host guest");
        skipped(&format!("python3 not available in this guest ({guest})"));
        return None;
    };
    let script = "import json,sys\n\
        r=json.load(open(sys.argv[1]))\n\
        d=r['device']\n\
        assert d['name']==sys.argv[2], d['name']\n\
        assert d['ports'][0]['gids'] is not None and d['attr']['max_qp']>0\n\
        assert r['ok']==(r['summary']['failed']==0)\n\
        for c in r['cases']: print(c['name'], c['result'])\n";
    let o = Command::new(&py)
        .args(["-S", "-c", script, report.path(), &dev()])
        .output()
        .unwrap();
    assert!(o.status.success(), "report check: {}", stderr(&o));
    Some(
        stdout(&o)
            .lines()
            .map(|l| {
                let (a, b) = l.split_once(' ').unwrap();
                (a.to_string(), b.to_string())
            })
            .collect(),
    )
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn selftest_passes_every_case_the_device_supports() {
    let report = Report::new("all");
    let o = selftest(&report, &[]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    let want = expected();
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with(&format!("rverbs selftest on {} ", dev())),
        "{out}"
    );
    assert_eq!(lines.len(), want.len() + 2, "{out}");
    for ((case, result), l) in want.iter().zip(&lines[1..]) {
        assert!(l.starts_with(&format!("{result}  {case} ")), "{case}: {l}");
    }
    let pass = want.iter().filter(|w| w.1 == "PASS").count();
    assert_eq!(
        lines[want.len() + 1],
        format!("{pass} passed, 0 failed, {} skipped", want.len() - pass)
    );
    if let Ok(addr) = std::env::var("RVERBS_ADDR_A") {
        // siw: found by binding the machine's addresses; rxe: its RoCE v2 IPv4 GID's.
        assert!(
            lines[0].ends_with(&format!(", rdma_cm at {addr}")),
            "{}",
            lines[0]
        );
    }
    assert!(
        out.contains(&format!(
            "SKIP  {:<20} SRD is EFA's transport\n",
            "srd-send"
        )),
        "{out}"
    );
    if siw() {
        for (case, why) in IWARP_SKIPS {
            assert!(
                out.contains(&format!("SKIP  {case:<20} {why}\n")),
                "{case}: {out}"
            );
        }
    }
    if let Some(got) = json_cases(&report) {
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(got, want);
    }
}

/// A case made to fail: on siw a UD case forced (the device cannot do it); on rxe the
/// rdma_cm case pointed at an address that is not the device's. FAIL with the reason, the
/// summary line, exit status 1, and a report saying so.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn selftest_reports_a_failing_case_and_exits_1() {
    let report = Report::new("fail");
    let (args, case): (&[&str], &str) = if siw() {
        (&["-c", "cm-rc", "--force", "ud-send", "-t", "5"], "ud-send")
    } else {
        (
            &["-c", "rc-send", "-c", "cm-rc", "-a", "192.0.2.1", "-t", "5"],
            "cm-rc",
        )
    };
    let o = selftest(&report, args);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    let fail = out
        .lines()
        .find(|l| l.starts_with(&format!("FAIL  {case} ")))
        .unwrap_or_else(|| panic!("no FAIL line for {case}: {out}"));
    if siw() {
        assert!(fail.contains("UD"), "{fail}");
    } else {
        assert!(fail.contains("192.0.2.1"), "{fail}");
    }
    assert!(out.contains("1 passed, 1 failed, 0 skipped"), "{out}");
    assert!(
        stderr(&o).contains(&format!(
            "rverbs selftest: 1 of 2 cases failed on {}",
            dev()
        )),
        "{}",
        stderr(&o)
    );
    // The report says so too (read as text: one Python start-up per stage is enough).
    let j = std::fs::read_to_string(&report.0).unwrap();
    assert!(j.contains("\n  \"ok\": false,\n"), "{j}");
    let entry = format!("\"name\": \"{case}\",\n      \"result\": \"FAIL\"");
    assert!(j.contains(&entry), "{j}");
}

/// On iWARP the RC cases connect through the rdma_cm: given an address that is not the
/// device's, each FAILs naming it (on rxe `-a` concerns only `cm-rc`: the test above).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn selftest_on_iwarp_fails_the_rc_cases_at_a_wrong_address() {
    if !siw() {
        skipped("iWARP only: elsewhere the RC cases connect by hand, without an address");
        return;
    }
    let report = Report::new("addr");
    let o = selftest(
        &report,
        &[
            "-c",
            "rc-send",
            "-c",
            "rc-srq",
            "-a",
            "192.0.2.1",
            "-t",
            "5",
        ],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    for case in ["rc-send", "rc-srq"] {
        let fail = out
            .lines()
            .find(|l| l.starts_with(&format!("FAIL  {case} ")))
            .unwrap_or_else(|| panic!("no FAIL line for {case}: {out}"));
        assert!(
            fail.contains("rdma_cm") && fail.contains("192.0.2.1"),
            "{fail}"
        );
    }
    assert!(out.contains("0 passed, 2 failed, 0 skipped"), "{out}");
}
