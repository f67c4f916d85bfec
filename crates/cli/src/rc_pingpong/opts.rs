//! The command line of `rverbs rc-pingpong` (the C tool's options, numbers read as
//! `strtol(s, NULL, 0)`) and the environment knobs of a run.

use std::ffi::OsString;
use std::time::Duration;

use rverbs::uverbs::port::Mtu;

use super::exchange::DEFAULT_PORT;
use crate::usage_err;

/// A run with no completion for this long has lost its peer (unless RVERBS_PINGPONG_IDLE_SECS
/// says otherwise).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The value of the environment variable `var`: `None` if it is unset, an error naming it if
/// it is not a whole number `what` from `min` to `max`.
fn env_number(var: &str, min: u64, max: u64, what: &str) -> Result<Option<u64>, String> {
    let Some(v) = std::env::var_os(var) else {
        return Ok(None);
    };
    match v.to_str().and_then(|s| s.parse::<u64>().ok()) {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(format!(
            "{var}={}: expected a whole number of {what}, from {min} to {max}",
            v.to_string_lossy()
        )),
    }
}

/// The idle limit of this run: RVERBS_PINGPONG_IDLE_SECS, else [`IDLE_TIMEOUT`].
pub(super) fn idle_timeout() -> Result<Duration, String> {
    let secs = env_number("RVERBS_PINGPONG_IDLE_SECS", 1, u64::MAX, "seconds")?;
    Ok(secs.map_or(IDLE_TIMEOUT, Duration::from_secs))
}

/// RVERBS_PINGPONG_PAD: extra polls of the empty CQ before every send (default 0). A
/// measurement aid, not a feature: `ci/bench-pingpong.sh pad` adds a known number of
/// userspace instructions of the library's own hot code to the critical path this way and
/// measures what they cost in latency (docs/perf.md).
pub(super) fn send_padding() -> Result<u32, String> {
    let n = env_number("RVERBS_PINGPONG_PAD", 0, u32::MAX.into(), "CQ polls")?;
    Ok(n.map_or(0, |n| n as u32))
}

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// The server to connect to; `None` runs the server.
    pub server: Option<String>,
    pub port: u16,
    pub ib_dev: Option<String>,
    pub ib_port: u8,
    pub size: u32,
    pub mtu: Mtu,
    pub rx_depth: u32,
    pub iters: u32,
    pub sl: u8,
    pub events: bool,
    /// `-g`: our GID index; `None` (the C tool's -1) sends a zero GID.
    pub gid_idx: Option<u32>,
    pub chk: bool,
    pub help: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            server: None,
            port: DEFAULT_PORT,
            ib_dev: None,
            ib_port: 1,
            size: 4096,
            mtu: Mtu::MTU_1024,
            rx_depth: 500,
            iters: 1000,
            sl: 0,
            events: false,
            gid_idx: None,
            chk: false,
            help: false,
        }
    }
}

/// Parses a number as C's `strtol(s, NULL, 0)` reads it (decimal, `0x` hex, leading-`0`
/// octal, optional sign), but refuses trailing garbage and empty strings.
pub fn parse_c_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8).ok()?
    } else {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn num_in(
    opt: &str,
    s: &str,
    min: i64,
    max: i64,
    what: &str,
) -> Result<i64, Box<dyn std::error::Error>> {
    match parse_c_int(s) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        Some(v) => Err(usage_err(format!(
            "{opt} {v}: {what} must be in {min}..={max}"
        ))),
        None => Err(usage_err(format!("{opt} {s:?}: not a number"))),
    }
}

/// The C options rverbs does not implement, with what they do.
const UNSUPPORTED: &[(char, &str, &str)] = &[
    ('o', "odp", "on-demand paging"),
    ('O', "iodp", "implicit on-demand paging"),
    ('P', "prefetch", "prefetching an ODP MR"),
    ('t', "ts", "completion timestamps"),
    ('j', "dm", "device memory"),
    ('N', "new_send", "the new post-send API"),
];

fn unsupported(short: char, long: &str, what: &str) -> Box<dyn std::error::Error> {
    usage_err(format!(
        "option -{short}/--{long} ({what}) of ibv_rc_pingpong is not supported by rverbs \
         rc-pingpong"
    ))
}

/// Parses the arguments after `rc-pingpong`.
pub fn parse(args: Vec<OsString>) -> Result<Opts, Box<dyn std::error::Error>> {
    use lexopt::prelude::*;
    let mut o = Opts::default();
    let mut p = lexopt::Parser::from_args(args);
    let mut positional: Vec<String> = Vec::new();
    while let Some(arg) = p.next()? {
        match arg {
            Short('p') | Long("port") => {
                o.port = num_in("-p", &p.value()?.string()?, 0, 65535, "the TCP port")? as u16
            }
            Short('d') | Long("ib-dev") => o.ib_dev = Some(p.value()?.string()?),
            Short('i') | Long("ib-port") => {
                o.ib_port = num_in("-i", &p.value()?.string()?, 1, 255, "the port")? as u8
            }
            Short('s') | Long("size") => {
                o.size = num_in("-s", &p.value()?.string()?, 1, i32::MAX.into(), "the size")? as u32
            }
            Short('m') | Long("mtu") => {
                let v = p.value()?.string()?;
                o.mtu = parse_c_int(&v)
                    .and_then(|n| u32::try_from(n).ok())
                    .and_then(Mtu::from_bytes)
                    .ok_or_else(|| {
                        usage_err(format!(
                            "-m {v:?}: the MTU must be 256, 512, 1024, 2048 or 4096"
                        ))
                    })?;
            }
            Short('r') | Long("rx-depth") => {
                o.rx_depth = num_in(
                    "-r",
                    &p.value()?.string()?,
                    1,
                    i32::MAX.into(),
                    "the receive depth",
                )? as u32
            }
            Short('n') | Long("iters") => {
                o.iters = num_in(
                    "-n",
                    &p.value()?.string()?,
                    1,
                    i32::MAX.into(),
                    "the iteration count",
                )? as u32
            }
            Short('l') | Long("sl") => {
                o.sl = num_in("-l", &p.value()?.string()?, 0, 15, "the service level")? as u8
            }
            Short('e') | Long("events") => o.events = true,
            Short('g') | Long("gid-idx") => {
                let v = num_in(
                    "-g",
                    &p.value()?.string()?,
                    -1,
                    255,
                    "the GID index (-1: none)",
                )?;
                o.gid_idx = (v >= 0).then_some(v as u32);
            }
            Short('c') | Long("chk") => o.chk = true,
            Short('h') | Long("help") => o.help = true,
            Short(c) => match UNSUPPORTED.iter().find(|u| u.0 == c) {
                Some(&(s, l, w)) => return Err(unsupported(s, l, w)),
                None => return Err(Short(c).unexpected().into()),
            },
            Long(l) => match UNSUPPORTED.iter().find(|u| u.1 == l) {
                Some(&(s, l, w)) => return Err(unsupported(s, l, w)),
                None => return Err(Long(l).unexpected().into()),
            },
            Value(v) => positional.push(v.string()?),
        }
    }
    match positional.len() {
        0 => {}
        1 => o.server = positional.pop(),
        _ => {
            return Err(usage_err(format!(
                "one server host at most, got {}: {}",
                positional.len(),
                positional.join(" ")
            )))
        }
    }
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    fn err(s: &[&str]) -> String {
        parse(args(s)).unwrap_err().to_string()
    }

    #[test]
    fn defaults_are_the_c_tools() {
        let o = parse(vec![]).unwrap();
        assert_eq!(o, Opts::default());
        assert_eq!(
            (o.port, o.ib_port, o.size, o.mtu, o.rx_depth, o.iters, o.sl),
            (18515, 1, 4096, Mtu::MTU_1024, 500, 1000, 0)
        );
        assert_eq!(
            (o.server, o.gid_idx, o.events, o.chk),
            (None, None, false, false)
        );
    }

    #[test]
    fn every_option_short_and_long() {
        let o = parse(args(&[
            "-p",
            "9000",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-s",
            "64",
            "-m",
            "2048",
            "-r",
            "10",
            "-n",
            "0x10",
            "-l",
            "3",
            "-e",
            "-g",
            "1",
            "-c",
            "10.10.0.1",
        ]))
        .unwrap();
        let want = Opts {
            server: Some("10.10.0.1".into()),
            port: 9000,
            ib_dev: Some("rxe0".into()),
            ib_port: 1,
            size: 64,
            mtu: Mtu::MTU_2048,
            rx_depth: 10,
            iters: 16,
            sl: 3,
            events: true,
            gid_idx: Some(1),
            chk: true,
            help: false,
        };
        assert_eq!(o, want);
        let o = parse(args(&[
            "--port=9000",
            "--ib-dev",
            "rxe0",
            "--ib-port=1",
            "--size=64",
            "--mtu=2048",
            "--rx-depth=10",
            "--iters=16",
            "--sl=3",
            "--events",
            "--gid-idx=1",
            "--chk",
            "10.10.0.1",
        ]))
        .unwrap();
        assert_eq!(o, want);
        // Clustered short flags and attached values, as getopt takes them.
        let o = parse(args(&["-ecg1", "-s64", "host"])).unwrap();
        assert_eq!(
            (o.events, o.chk, o.gid_idx, o.size),
            (true, true, Some(1), 64)
        );
        assert_eq!(parse(args(&["-g", "-1"])).unwrap().gid_idx, None);
        assert!(parse(args(&["-h"])).unwrap().help);
    }

    #[test]
    fn refuses_bad_values_by_name() {
        assert!(err(&["-s", "abc"]).contains("-s \"abc\": not a number"));
        assert!(err(&["-s", "0"]).contains("-s 0: the size must be in 1..="));
        assert!(err(&["-p", "70000"]).contains("-p 70000"));
        assert!(err(&["-i", "0"]).contains("-i 0"));
        assert!(err(&["-m", "1000"]).contains("256, 512, 1024, 2048 or 4096"));
        assert!(err(&["-n", "0"]).contains("-n 0"));
        assert!(err(&["-n", "12x"]).contains("not a number"));
        assert!(err(&["-l", "16"]).contains("-l 16"));
        assert!(err(&["-g", "-2"]).contains("-g -2"));
        assert!(err(&["-r", "0"]).contains("-r 0"));
        assert!(err(&["a", "b"]).contains("one server host at most, got 2: a b"));
        assert!(err(&["-x"]).contains("-x"));
        assert!(
            err(&["-s"]).contains("missing argument"),
            "{}",
            err(&["-s"])
        );
    }

    #[test]
    fn names_the_unsupported_c_options() {
        for (s, l, what) in UNSUPPORTED {
            let e = err(&[&format!("-{s}")]);
            assert!(e.contains(&format!("-{s}/--{l}")), "{e}");
            assert!(e.contains(what), "{e}");
            assert!(e.contains("not supported"), "{e}");
            let e = err(&[&format!("--{l}")]);
            assert!(e.contains(&format!("-{s}/--{l}")), "{e}");
        }
    }

    #[test]
    fn c_numbers() {
        assert_eq!(parse_c_int("4096"), Some(4096));
        assert_eq!(parse_c_int("0x1000"), Some(4096));
        assert_eq!(parse_c_int("010"), Some(8));
        assert_eq!(parse_c_int("0"), Some(0));
        assert_eq!(parse_c_int("-1"), Some(-1));
        assert_eq!(parse_c_int(""), None);
        assert_eq!(parse_c_int("0x"), None);
        assert_eq!(parse_c_int("12 3"), None);
        assert_eq!(parse_c_int("09"), None);
    }
}
