//! `rverbs selftest`: a loopback battery of what a device supports, on any device rverbs
//! opens (rxe, siw, mlx5, ...), one PASS / FAIL / SKIP line per case and, with `--json`, a
//! report with the device's attributes, ports and GIDs and each case's result.
//!
//! The cases are chosen from the device's transport and attributes ([`plan`]); each runs on
//! its own objects in a thread of its own, under a deadline its waits respect and a watchdog
//! that gives up on it (FAIL) when a call into a dead device never returns.

use std::ffi::OsString;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rverbs::uverbs::device::{devices, format_guid, Device, Transport};
use rverbs::uverbs::device_attr::AtomicCap;
use rverbs::uverbs::gid::{GidEntry, GidType};
use rverbs::uverbs::port::{LinkLayer, PortState};

use crate::devinfo::{gather, HcaInfo};
use crate::{usage_err, CmdResult};

mod addr;
mod cases;
mod cm;
mod json;
mod plan;

use cases::{Env, Outcome};
use json::Json;
use plan::{Case, Facts, Plan};

pub const USAGE: &str = "\
Usage: rverbs selftest [-d DEV] [-i PORT] [-g GID_IDX] [-a ADDR] [-t SECS]
                       [-c CASE]... [--force CASE]... [-o FILE]

Run a loopback battery on one device: RC SEND/RECV, immediate data, RDMA WRITE/READ,
inline, atomics, SRQ, completion events, error completions (wrong rkey, wrong lkey,
flush), UC, UD, SRD (EFA: there only UD and SRD run),
and RC through the rdma_cm (the only way iWARP connects: there, the RC cases connect
their QPs through it too). Cases the device cannot do (by its transport and attributes)
are skipped with the reason. One line per case; exit status 1 when any case fails.

  -d, --ib-dev DEV     the device (default: the first one)
  -i, --ib-port PORT   its port (default 1)
  -g, --gid-idx IDX    GID index of the loopback address (default: the port's first
                       RoCE v2 IPv4 GID, else 0)
  -a, --addr ADDR      IP address of the device for the rdma_cm (default: that of
                       its RoCE v2 IPv4 GID, else the first local IPv4 address the
                       rdma_cm binds to the device)
  -t, --timeout SECS   per-case time limit (default 10)
  -c, --case CASE      run only CASE (repeatable)
      --force CASE     run CASE even where it would be skipped (repeatable): it then
                       shows what the device does when asked for it
  -o, --json FILE      write a JSON report to FILE
  -l, --list           list the cases and exit

Cases: rc-send rc-send-imm rc-write rc-write-imm rc-read rc-inline rc-atomic-fetch-add
       rc-atomic-cmp-swap rc-srq rc-events rc-error-rkey rc-error-lkey rc-error-flush
       uc-send uc-write-imm ud-send cm-rc srd-send
";

/// Parsed `rverbs selftest` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opts {
    pub dev: Option<String>,
    pub port: u8,
    pub gid_idx: Option<u8>,
    pub addr: Option<String>,
    pub timeout: Duration,
    pub cases: Vec<Case>,
    pub force: Vec<Case>,
    pub json: Option<OsString>,
    pub list: bool,
    pub help: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            dev: None,
            port: 1,
            gid_idx: None,
            addr: None,
            timeout: Duration::from_secs(10),
            cases: Vec::new(),
            force: Vec::new(),
            json: None,
            list: false,
            help: false,
        }
    }
}

fn case_arg(v: &str) -> Result<Case, Box<dyn std::error::Error>> {
    Case::from_name(v).ok_or_else(|| {
        let all: Vec<&str> = Case::ALL.iter().map(|c| c.name()).collect();
        usage_err(format!(
            "unknown case {v:?}; the cases are: {}",
            all.join(" ")
        ))
    })
}

fn number<T: std::str::FromStr + PartialOrd + Copy>(
    what: &str,
    v: &str,
    min: T,
) -> Result<T, Box<dyn std::error::Error>> {
    match v.parse::<T>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(usage_err(format!("bad {what} {v:?}"))),
    }
}

/// Parses the arguments after `selftest`.
pub fn parse(args: Vec<OsString>) -> Result<Opts, Box<dyn std::error::Error>> {
    use lexopt::prelude::*;
    let mut o = Opts::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Short('d') | Long("ib-dev") => o.dev = Some(p.value()?.string()?),
            Short('i') | Long("ib-port") => {
                o.port = number("port (ports are numbered from 1)", &p.value()?.string()?, 1)?
            }
            Short('g') | Long("gid-idx") => {
                o.gid_idx = Some(number("GID index", &p.value()?.string()?, 0)?)
            }
            Short('a') | Long("addr") => o.addr = Some(p.value()?.string()?),
            Short('t') | Long("timeout") => {
                let s: u64 = number(
                    "timeout (whole seconds, at least 1)",
                    &p.value()?.string()?,
                    1,
                )?;
                o.timeout = Duration::from_secs(s);
            }
            Short('c') | Long("case") => o.cases.push(case_arg(&p.value()?.string()?)?),
            Long("force") => o.force.push(case_arg(&p.value()?.string()?)?),
            Short('o') | Long("json") => o.json = Some(p.value()?),
            Short('l') | Long("list") => o.list = true,
            Short('h') | Long("help") => o.help = true,
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(o)
}

/// What became of one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail(String),
    Skip(String),
}

impl Verdict {
    fn word(&self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail(_) => "FAIL",
            Verdict::Skip(_) => "SKIP",
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Pass => None,
            Verdict::Fail(r) | Verdict::Skip(r) => Some(r),
        }
    }
}

/// How long the watchdog waits past a case's deadline for calls that block in the kernel.
const GRACE: Duration = Duration::from_secs(2);

/// Runs `f` in a thread of its own and waits up to `limit` for it: `None` when it panicked
/// or is still running (the thread is then left behind: it is blocked in a call that does
/// not return, and ends with the process).
pub fn bounded<T, F>(name: &str, limit: Duration, f: F) -> Result<T, String>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("selftest {name}"))
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        })
        .map_err(|e| format!("cannot start its thread: {e}"))?;
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err("panicked (message above)".into()),
        Err(_) => Err(format!(
            "timed out: still running after {} s (a call into the device did not return)",
            limit.as_secs()
        )),
    }
}

/// Runs a case (given its deadline) under [`bounded`], `GRACE` past the deadline.
pub fn with_watchdog<F>(name: &str, timeout: Duration, f: F) -> Verdict
where
    F: FnOnce(Instant) -> cases::CaseResult + Send + 'static,
{
    let end = Instant::now() + timeout;
    match bounded(name, timeout + GRACE, move || f(end)) {
        Ok(Ok(Outcome::Pass)) => Verdict::Pass,
        Ok(Ok(Outcome::Skip(why))) => Verdict::Skip(why),
        Ok(Err(why)) | Err(why) => Verdict::Fail(why),
    }
}

/// The line printed for a case.
pub fn line(case: Case, v: &Verdict, took: Duration) -> String {
    match v.reason() {
        None => format!(
            "{}  {:<20} ({} ms)",
            v.word(),
            case.name(),
            took.as_millis()
        ),
        Some(r) => format!("{}  {:<20} {r}", v.word(), case.name()),
    }
}

/// The GID of the loopback address: `-g`, else the port's first RoCE v2 IPv4-mapped GID,
/// else its first RoCE v2 GID, else index 0.
fn pick_gid(gids: &[GidEntry], port: u32, want: Option<u8>) -> Option<&GidEntry> {
    let on_port = || gids.iter().filter(move |e| e.port == port);
    if let Some(i) = want {
        return on_port().find(|e| e.index == u32::from(i));
    }
    on_port()
        .find(|e| e.gid_type == GidType::ROCE_V2 && e.gid.to_ipv4_mapped().is_some())
        .or_else(|| on_port().find(|e| e.gid_type == GidType::ROCE_V2))
        .or_else(|| on_port().find(|e| e.index == 0))
}

/// The device of `-d`, or the first.
fn device(o: &Opts) -> Result<Device, Box<dyn std::error::Error>> {
    match &o.dev {
        Some(d) => Device::by_name(d).map_err(|e| format!("device {d:?}: {e}").into()),
        None => devices()?
            .into_iter()
            .next()
            .ok_or_else(|| "no RDMA devices found".into()),
    }
}

/// The report's `device` member.
fn device_json(h: &HcaInfo, driver: &str) -> Json {
    let a = &h.attr;
    let u = |v: u32| Json::UInt(u64::from(v));
    let attr = Json::obj([
        ("fw_ver", Json::str(&a.fw_ver)),
        ("node_guid", Json::str(format_guid(a.node_guid))),
        ("sys_image_guid", Json::str(format_guid(a.sys_image_guid))),
        ("max_mr_size", Json::str(format!("0x{:x}", a.max_mr_size))),
        (
            "page_size_cap",
            Json::str(format!("0x{:x}", a.page_size_cap)),
        ),
        ("vendor_id", Json::str(format!("0x{:04x}", a.vendor_id))),
        ("vendor_part_id", u(a.vendor_part_id)),
        ("hw_ver", Json::str(format!("0x{:x}", a.hw_ver))),
        ("max_qp", u(a.max_qp)),
        ("max_qp_wr", u(a.max_qp_wr)),
        (
            "device_cap_flags",
            Json::str(format!("0x{:08x}", a.device_cap_flags)),
        ),
        (
            "device_cap_flags_ex",
            Json::str(format!("0x{:x}", a.device_cap_flags_ex)),
        ),
        ("max_sge", u(a.max_sge)),
        ("max_sge_rd", u(a.max_sge_rd)),
        ("max_cq", u(a.max_cq)),
        ("max_cqe", u(a.max_cqe)),
        ("max_mr", u(a.max_mr)),
        ("max_pd", u(a.max_pd)),
        ("max_qp_rd_atom", u(a.max_qp_rd_atom)),
        ("max_res_rd_atom", u(a.max_res_rd_atom)),
        ("max_qp_init_rd_atom", u(a.max_qp_init_rd_atom)),
        ("atomic_cap", Json::str(a.atomic_cap.to_string())),
        ("max_mw", u(a.max_mw)),
        ("max_mcast_grp", u(a.max_mcast_grp)),
        ("max_mcast_qp_attach", u(a.max_mcast_qp_attach)),
        ("max_ah", u(a.max_ah)),
        ("max_srq", u(a.max_srq)),
        ("max_srq_wr", u(a.max_srq_wr)),
        ("max_srq_sge", u(a.max_srq_sge)),
        ("max_pkeys", u(u32::from(a.max_pkeys))),
        ("local_ca_ack_delay", u(u32::from(a.local_ca_ack_delay))),
        ("phys_port_cnt", u(u32::from(a.phys_port_cnt))),
    ]);
    let ports = h
        .ports
        .iter()
        .map(|p| {
            let pa = &p.attr;
            let gids = p
                .gids
                .iter()
                .map(|g| {
                    Json::obj([
                        ("index", u(g.index)),
                        ("gid", Json::str(g.gid.to_string())),
                        ("type", Json::str(g.gid_type.to_string())),
                    ])
                })
                .collect();
            Json::obj([
                ("port", u(p.port)),
                ("state", Json::str(pa.state.to_string())),
                ("phys_state", u(u32::from(pa.phys_state.0))),
                ("max_mtu", Json::str(pa.max_mtu.to_string())),
                ("active_mtu", Json::str(pa.active_mtu.to_string())),
                ("link_layer", Json::str(pa.link_layer.to_string())),
                ("lid", u(u32::from(pa.lid))),
                ("sm_lid", u(u32::from(pa.sm_lid))),
                ("lmc", u(u32::from(pa.lmc))),
                ("gid_tbl_len", u(pa.gid_tbl_len)),
                ("max_msg_sz", u(pa.max_msg_sz)),
                (
                    "port_cap_flags",
                    Json::str(format!("0x{:08x}", pa.port_cap_flags)),
                ),
                ("active_width", u(u32::from(pa.active_width))),
                ("active_speed", u(u32::from(pa.active_speed))),
                ("gids", Json::Array(gids)),
            ])
        })
        .collect();
    Json::obj([
        ("name", Json::str(&h.name)),
        ("driver", Json::str(driver)),
        (
            "transport",
            Json::str(h.transport.name().unwrap_or("unknown")),
        ),
        (
            "board_id",
            h.board_id.as_deref().map_or(Json::Null, Json::str),
        ),
        ("num_comp_vectors", u(h.num_comp_vectors)),
        ("attr", attr),
        ("ports", Json::Array(ports)),
    ])
}

/// The report's `cases` member and its counts.
fn results_json(results: &[(Case, Verdict, Duration)]) -> (Json, [u64; 3]) {
    let mut n = [0u64; 3];
    let list = results
        .iter()
        .map(|(c, v, took)| {
            n[match v {
                Verdict::Pass => 0,
                Verdict::Fail(_) => 1,
                Verdict::Skip(_) => 2,
            }] += 1;
            Json::obj([
                ("name", Json::str(c.name())),
                ("result", Json::str(v.word())),
                ("reason", v.reason().map_or(Json::Null, Json::str)),
                ("ms", Json::UInt(took.as_millis() as u64)),
            ])
        })
        .collect();
    (Json::Array(list), n)
}

/// The whole report.
pub fn report(device: Json, env: Option<&Env>, results: &[(Case, Verdict, Duration)]) -> Json {
    let (cases, [pass, fail, skip]) = results_json(results);
    Json::obj([
        ("tool", Json::str("rverbs selftest")),
        ("version", Json::str(env!("CARGO_PKG_VERSION"))),
        ("device", device),
        (
            "port",
            env.map_or(Json::Null, |e| Json::UInt(u64::from(e.port))),
        ),
        (
            "gid_index",
            env.map_or(Json::Null, |e| Json::UInt(u64::from(e.sgid_index))),
        ),
        (
            "cm_addr",
            env.and_then(|e| e.cm_addr.as_deref())
                .map_or(Json::Null, Json::str),
        ),
        ("ok", Json::Bool(fail == 0)),
        ("cases", cases),
        (
            "summary",
            Json::obj([
                ("passed", Json::UInt(pass)),
                ("failed", Json::UInt(fail)),
                ("skipped", Json::UInt(skip)),
            ]),
        ),
    ])
}

pub fn run(args: Vec<OsString>) -> CmdResult {
    let o = parse(args)?;
    if o.help {
        print!("{USAGE}");
        return Ok(());
    }
    if o.list {
        for c in Case::ALL {
            println!("{}", c.name());
        }
        return Ok(());
    }
    let dev = device(&o)?;
    let name = dev.name().to_string();
    // Bounded like the cases: a device that does not answer its queries ends the command.
    let d = dev.clone();
    let (hca, driver) = bounded("set-up", o.timeout, move || {
        let hca = gather(&d, None, true)?;
        let ctx = rverbs::provider::open(&d)?;
        let driver = ctx.driver()?.name().to_string();
        Ok::<_, std::io::Error>((hca, driver))
    })
    .map_err(|e| format!("query {name}: {e}"))?
    .map_err(|e| format!("{name}: {e}"))?;
    let port = hca
        .ports
        .iter()
        .find(|p| p.port == u32::from(o.port))
        .ok_or_else(|| {
            usage_err(format!(
                "{name} has no port {} (it has {})",
                o.port, hca.attr.phys_port_cnt
            ))
        })?;
    if port.attr.state != PortState::ACTIVE {
        return Err(format!(
            "port {} of {name} is {}, not ACTIVE: nothing can be tested",
            o.port, port.attr.state
        )
        .into());
    }
    let gid = pick_gid(&port.gids, port.port, o.gid_idx);
    if let (Some(i), None) = (o.gid_idx, gid) {
        return Err(usage_err(format!(
            "port {} of {name} has no GID {i}",
            o.port
        )));
    }
    let roce = port.attr.link_layer == LinkLayer::ETHERNET;
    let cm_addr = o
        .addr
        .clone()
        .or_else(|| {
            gid.filter(|_| roce)
                .and_then(|g| g.gid.to_ipv4_mapped())
                .map(|a| a.to_string())
        })
        .or_else(|| addr::find(&name));
    let env = Env {
        dev: name.clone(),
        port: o.port,
        link_layer: port.attr.link_layer,
        lid: port.attr.lid,
        sgid_index: gid.map_or(0, |g| g.index as u8),
        gid: gid.map_or([0; 16], |g| g.gid.0),
        mtu: port.attr.active_mtu,
        atomics: hca.attr.atomic_cap != AtomicCap::NONE,
        iwarp: hca.transport == Transport::IWARP,
        efa: driver == "efa",
        cm_addr: cm_addr.clone(),
    };
    let facts = Facts {
        transport: hca.transport,
        atomic_cap: hca.attr.atomic_cap,
        max_srq: hca.attr.max_srq,
        cm_addr,
        efa: driver == "efa",
    };
    println!(
        "rverbs selftest on {name} (driver {driver}, transport {}, link layer {}, port {}{}){}",
        hca.transport.name().unwrap_or("unknown"),
        port.attr.link_layer,
        o.port,
        gid.map_or(String::new(), |g| format!(", GID {} {}", g.index, g.gid)),
        env.cm_addr
            .as_deref()
            .map_or(String::new(), |a| format!(", rdma_cm at {a}"))
    );
    let env = Arc::new(env);
    let mut results = Vec::new();
    for (case, p) in plan::battery(&facts, &o.cases, &o.force) {
        let t = Instant::now();
        let v = match p {
            Plan::Skip(why) => Verdict::Skip(why),
            Plan::Run => {
                let env = env.clone();
                with_watchdog(case.name(), o.timeout, move |end| {
                    cases::run(case, &env, end)
                })
            }
        };
        let took = t.elapsed();
        println!("{}", line(case, &v, took));
        results.push((case, v, took));
    }
    let j = report(device_json(&hca, &driver), Some(&env), &results);
    let (_, [pass, fail, skip]) = results_json(&results);
    println!("{pass} passed, {fail} failed, {skip} skipped");
    if let Some(path) = &o.json {
        let mut text = j.to_text();
        text.push('\n');
        std::fs::write(path, text)
            .map_err(|e| format!("write the report to {}: {e}", path.to_string_lossy()))?;
    }
    if fail > 0 {
        return Err(format!("{fail} of {} cases failed on {name}", results.len()).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
