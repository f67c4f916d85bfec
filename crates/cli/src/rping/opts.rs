//! The command line of `rverbs rping` (the C tool's options, numbers checked).

use std::ffi::OsString;

use super::{BUFSIZE, DEFAULT_PORT, MIN_SIZE};
use crate::usage_err;

/// Parsed options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    /// `Some(true)` server, `Some(false)` client.
    pub server: Option<bool>,
    pub addr: Option<String>,
    pub src: Option<String>,
    pub port: u16,
    pub count: u32,
    pub size: u32,
    pub verbose: bool,
    pub validate: bool,
    pub debug: bool,
    pub persistent: bool,
    pub self_qp: bool,
    pub help: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            server: None,
            addr: None,
            src: None,
            port: DEFAULT_PORT,
            count: 0,
            size: 64,
            verbose: false,
            validate: false,
            debug: false,
            persistent: false,
            self_qp: false,
            help: false,
        }
    }
}

fn number(opt: &str, s: &str) -> Result<i64, Box<dyn std::error::Error>> {
    crate::rc_pingpong::parse_c_int(s)
        .ok_or_else(|| usage_err(format!("-{opt} {s:?}: not a number")))
}

/// Parses the arguments after `rping` (getopt style: clustered flags, attached values).
pub fn parse(args: Vec<OsString>) -> Result<Opts, Box<dyn std::error::Error>> {
    use lexopt::prelude::*;
    let mut o = Opts::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Short('a') => o.addr = Some(p.value()?.string()?),
            Short('I') => o.src = Some(p.value()?.string()?),
            Short('P') => o.persistent = true,
            Short('p') => {
                let v = number("p", &p.value()?.string()?)?;
                o.port = u16::try_from(v)
                    .map_err(|_| usage_err(format!("-p {v}: the port must be in 0..=65535")))?;
            }
            Short('C') => {
                let v = number("C", &p.value()?.string()?)?;
                o.count = u32::try_from(v)
                    .ok()
                    .filter(|&c| c <= i32::MAX as u32)
                    .ok_or_else(|| usage_err(format!("Invalid count {v}")))?;
            }
            Short('S') => {
                let v = number("S", &p.value()?.string()?)?;
                o.size = u32::try_from(v)
                    .ok()
                    .filter(|s| (MIN_SIZE..BUFSIZE).contains(s))
                    .ok_or_else(|| {
                        usage_err(format!(
                            "Invalid size {v} (valid range is {MIN_SIZE} to {})",
                            BUFSIZE - 1
                        ))
                    })?;
            }
            Short('s') => o.server = Some(true),
            Short('c') => o.server = Some(false),
            Short('v') => o.verbose = true,
            Short('V') => o.validate = true,
            Short('d') => o.debug = true,
            Short('q') => o.self_qp = true,
            Short('h') | Long("help") => o.help = true,
            Short('t') => {
                return Err(usage_err(
                    "option -t is not supported (rping v44 lists it in its option string but \
                     rejects it too)",
                ))
            }
            Value(v) => {
                return Err(usage_err(format!(
                    "unexpected argument {:?} (the address goes after -a)",
                    v.to_string_lossy()
                )))
            }
            other => return Err(other.unexpected().into()),
        }
    }
    if o.help {
        return Ok(o);
    }
    match o.server {
        None => return Err(usage_err("choose a side: -s (server) or -c (client)")),
        Some(false) if o.addr.is_none() => {
            return Err(usage_err("the client needs the server's address: -a ADDR"))
        }
        Some(false) if o.persistent => {
            return Err(usage_err(
                "-P (persistent server) is for the server side (-s)",
            ))
        }
        _ => {}
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
    fn options() {
        let o = parse(args(&["-s"])).unwrap();
        assert_eq!(
            (o.server, o.port, o.size, o.count, o.addr),
            (Some(true), 7174, 64, 0, None)
        );
        let o = parse(args(&[
            "-c",
            "-a",
            "10.10.0.1",
            "-p",
            "9000",
            "-C",
            "5",
            "-S",
            "1024",
            "-v",
            "-V",
            "-d",
            "-q",
            "-I",
            "10.10.0.2",
        ]))
        .unwrap();
        assert_eq!(
            o,
            Opts {
                server: Some(false),
                addr: Some("10.10.0.1".into()),
                src: Some("10.10.0.2".into()),
                port: 9000,
                count: 5,
                size: 1024,
                verbose: true,
                validate: true,
                debug: true,
                persistent: false,
                self_qp: true,
                help: false,
            }
        );
        // getopt style: clustered flags and attached values.
        let o = parse(args(&["-cvVC3", "-a10.10.0.1", "-S26"])).unwrap();
        assert_eq!(
            (o.count, o.size, o.verbose, o.validate),
            (3, 26, true, true)
        );
        let o = parse(args(&["-sP"])).unwrap();
        assert!(o.persistent);
        assert!(parse(args(&["-h"])).unwrap().help);
    }

    #[test]
    fn bad_options_are_refused_by_name() {
        assert!(err(&[]).contains("-s (server) or -c (client)"));
        assert!(err(&["-c"]).contains("-a ADDR"));
        assert!(err(&["-s", "-p", "70000"]).contains("-p 70000"));
        assert!(err(&["-s", "-p", "x"]).contains("-p \"x\": not a number"));
        assert!(err(&["-s", "-S", "25"]).contains("Invalid size 25 (valid range is 26 to 65535)"));
        assert!(err(&["-s", "-S", "65536"]).contains("Invalid size 65536"));
        assert!(err(&["-s", "-C", "-1"]).contains("Invalid count -1"));
        assert!(err(&["-s", "-t", "5"]).contains("-t is not supported"));
        assert!(err(&["-s", "-x"]).contains("-x"));
        assert!(err(&["-s", "host"]).contains("unexpected argument \"host\""));
        assert!(err(&["-c", "-P", "-a", "h"]).contains("-P"));
        let e = err(&["-s", "-S"]);
        assert!(e.contains("missing argument"), "{e}");
    }
}
