//! Soft-iWARP (siw) in the guest: rdma-core's own tools on it, `rverbs devinfo` listing it,
//! and the C drop-in facing it. These tests need a siw device: they are ignored everywhere
//! but in the stage that boots a guest with `--provider siw` (`cargo xtask test --stage siw`,
//! which runs this binary with `--include-ignored`); run anywhere else they fail, never pass
//! silently.
//!
//! Whether rverbs drives siw decides what the drop-in test expects: without a provider for
//! driver siw, every program must get errors it can handle (NULL + errno, rdma_cm error
//! events), never a crash; with one, Debian's rping must work on it.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rverbs::provider::provider_for;
use rverbs::uverbs::device::DriverId;

mod common;
use common::{run, stdout};

/// The guest's siw device and its address, after checking that this is a siw guest.
fn siw_env() -> (String, String) {
    assert_eq!(
        std::env::var("RVERBS_PROVIDER").as_deref(),
        Ok("siw"),
        "these tests need a guest with siw devices (rverbs-vm --provider siw)"
    );
    let var = |v: &str| std::env::var(v).unwrap_or_else(|_| panic!("{v} is not set"));
    (var("RVERBS_DEV_A"), var("RVERBS_ADDR_A"))
}

fn rverbs_drives_siw() -> bool {
    provider_for(DriverId::SIW).is_some()
}

/// rdma-core's tool `name` from /usr/bin, on our C drop-in (`ours`) or on rdma-core.
fn tool(name: &str, ours: bool) -> Command {
    let path = PathBuf::from("/usr/bin").join(name);
    assert!(
        path.is_file(),
        "{} is missing: install rdma-core's tools",
        path.display()
    );
    let mut c = Command::new(path);
    if ours {
        c.env("LD_LIBRARY_PATH", capi_lib())
            .env("RVERBS_CAPI_LOG", "1");
    } else {
        c.env_remove("LD_LIBRARY_PATH");
    }
    c
}

/// Our `libibverbs.so.1`/`librdmacm.so.1` (`cargo xtask capi`), or `$RVERBS_CAPI_LIB`.
fn capi_lib() -> PathBuf {
    if let Some(d) = std::env::var_os("RVERBS_CAPI_LIB") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .map(|a| a.join("capi/lib"))
        .find(|d| d.join("librdmacm.so.1").is_file())
        .unwrap_or_else(|| {
            panic!(
                "no capi/lib above {}: run `cargo xtask capi`",
                exe.display()
            )
        })
}

struct Ran {
    status: Option<ExitStatus>,
    out: String,
}

impl Ran {
    /// Ended by itself with an exit code (not a signal, not our timeout).
    fn exited(&self) -> Option<i32> {
        let s = self.status?;
        assert_eq!(
            s.signal(),
            None,
            "killed by a signal (crash?):\n{}",
            self.out
        );
        s.code()
    }
}

/// A started program whose stdout and stderr are read to their end by threads while it
/// runs, so one that writes a lot never blocks in `write(2)` on a full pipe.
struct Spawned {
    child: Child,
    readers: [std::thread::JoinHandle<Vec<u8>>; 2],
}

fn spawn(mut c: Command) -> Spawned {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    }
    let readers = [
        drain(child.stdout.take().unwrap()),
        drain(child.stderr.take().unwrap()),
    ];
    Spawned { child, readers }
}

/// Waits up to `limit` (then kills) and collects the output (stdout, then stderr).
fn finish(p: Spawned, limit: Duration) -> Ran {
    let Spawned { mut child, readers } = p;
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    for r in readers {
        out.push_str(&String::from_utf8_lossy(&r.join().unwrap_or_default()));
    }
    Ran { status, out }
}

/// Whether something listens on TCP `port` (siw's rdma_cm listeners are kernel TCP sockets).
fn tcp_listening(port: u16) -> bool {
    // Lines: `sl local_address rem_address st ...`, addresses `HEXADDR:HEXPORT`, LISTEN = 0A.
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[1].ends_with(&want) && w[3] == "0A"
            })
        })
    })
}

/// Starts an rping server on `addr` and `port` and waits until it listens. Each use has a
/// port of its own: the tests of this binary run at the same time, and with rping's default
/// port (7174) for all of them one test's client was served by another test's server, whose
/// own client was then refused (or whose server waited for ever for a client that had gone
/// elsewhere: seen in the siw stage on 7.3.4, docs/testing.md, "siw on the newest kernel").
fn rping_server(addr: &str, port: u16, ours: bool) -> Spawned {
    let mut c = tool("rping", ours);
    let p = port.to_string();
    c.args(["-s", "-a", addr, "-p", &p, "-C", "5", "-v"]);
    let mut child = spawn(c);
    let t0 = Instant::now();
    while !tcp_listening(port) {
        if child.child.try_wait().unwrap().is_some() || t0.elapsed() > Duration::from_secs(30) {
            let r = finish(child, Duration::ZERO);
            panic!(
                "the rping server did not listen on TCP {port}: {:?}\n{}",
                r.status, r.out
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn rping_client(addr: &str, port: u16, ours: bool) -> Ran {
    let mut c = tool("rping", ours);
    let p = port.to_string();
    c.args(["-c", "-a", addr, "-p", &p, "-C", "5", "-v"]);
    finish(spawn(c), Duration::from_secs(60))
}

#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn rdma_core_tools_run_on_siw_interop() {
    let (dev, addr) = siw_env();
    let info = finish(
        spawn({
            let mut c = tool("ibv_devinfo", false);
            c.args(["-d", &dev]);
            c
        }),
        Duration::from_secs(30),
    );
    assert_eq!(info.exited(), Some(0), "{}", info.out);
    assert!(
        info.out.contains("transport:\t\t\tiWARP (1)"),
        "{}",
        info.out
    );
    assert!(info.out.contains("PORT_ACTIVE"), "{}", info.out);

    let server = rping_server(&addr, 7181, false);
    let client = rping_client(&addr, 7181, false);
    let server = finish(server, Duration::from_secs(30));
    assert_eq!(client.exited(), Some(0), "client:\n{}", client.out);
    assert_eq!(server.exited(), Some(0), "server:\n{}", server.out);
    assert_eq!(
        client.out.matches("ping data: rdma-ping-").count(),
        5,
        "{}",
        client.out
    );
}

#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn devinfo_lists_the_siw_device() {
    let (dev, _) = siw_env();
    let o = run(&["devinfo"]);
    let text = stdout(&o);
    assert!(o.status.success(), "{o:?}");
    assert!(text.contains(&format!("hca_id:\t{dev}\n")), "{text}");
    assert!(text.contains("transport:\t\t\tiWARP (1)"), "{text}");
    let unsupported = "support:\t\t\tunsupported: rverbs has no provider for driver siw (18)";
    if rverbs_drives_siw() {
        assert!(!text.contains("unsupported"), "{text}");
        assert!(text.contains("PORT_ACTIVE"), "{text}");
    } else {
        assert!(text.contains(unsupported), "{text}");
    }
    let one = run(&["devinfo", "-d", &dev]);
    assert!(one.status.success(), "{one:?}");
    assert_eq!(
        stdout(&one).contains(unsupported),
        !rverbs_drives_siw(),
        "{one:?}"
    );
    let list = stdout(&run(&["devinfo", "-l"]));
    assert!(list.contains(&format!("\t{dev}")), "{list}");
}

#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn debian_programs_on_the_drop_in_handle_siw_interop() {
    let (dev, addr) = siw_env();
    if rverbs_drives_siw() {
        // Driven: Debian's rping on our libraries against rdma-core's, both ways.
        let server = rping_server(&addr, 7182, false);
        let client = rping_client(&addr, 7182, true);
        let server = finish(server, Duration::from_secs(30));
        assert_eq!(client.exited(), Some(0), "client (ours):\n{}", client.out);
        assert_eq!(server.exited(), Some(0), "server:\n{}", server.out);
        let server = rping_server(&addr, 7183, true);
        let client = rping_client(&addr, 7183, false);
        let server = finish(server, Duration::from_secs(30));
        assert_eq!(client.exited(), Some(0), "client:\n{}", client.out);
        assert_eq!(server.exited(), Some(0), "server (ours):\n{}", server.out);
        return;
    }
    let why = "no rverbs provider for driver siw (id 18)";
    // ibv_open_device: NULL with errno, which the programs report and exit on.
    let mut c = tool("ibv_devinfo", true);
    c.args(["-d", &dev]);
    let r = finish(spawn(c), Duration::from_secs(30));
    assert_eq!(r.exited(), Some(1), "{}", r.out);
    assert!(
        r.out.contains("Failed to open device") && r.out.contains(why),
        "{}",
        r.out
    );
    let mut c = tool("ibv_rc_pingpong", true);
    c.args(["-d", &dev, "-g", "0"]);
    let r = finish(spawn(c), Duration::from_secs(30));
    assert_eq!(r.exited(), Some(1), "{}", r.out);
    assert!(r.out.contains("Couldn't get context for"), "{}", r.out);
    // rdma_cm: address resolution ends in an ADDR_ERROR event with ENODEV.
    let server = rping_server(&addr, 7184, false);
    let client = rping_client(&addr, 7184, true);
    let _ = finish(server, Duration::ZERO);
    assert!(
        matches!(client.exited(), Some(c) if c != 0),
        "{}",
        client.out
    );
    assert!(
        client.out.contains("RDMA_CM_EVENT_ADDR_ERROR, error -19"),
        "{}",
        client.out
    );
    assert!(client.out.contains(why), "{}", client.out);
    // rdma_create_ep: the id resolves to siw, whose context cannot be opened: ENODEV.
    let mut c = tool("rdma_client", true);
    c.args(["-s", &addr]);
    let r = finish(spawn(c), Duration::from_secs(30));
    assert!(matches!(r.exited(), Some(c) if c != 0), "{}", r.out);
    assert!(
        r.out.contains("rdma_create_ep: No such device"),
        "{}",
        r.out
    );
    // A server on our library: the connection is refused, the server reports and exits.
    let server = rping_server(&addr, 7185, true);
    let client = rping_client(&addr, 7185, false);
    let server = finish(server, Duration::from_secs(30));
    assert!(
        matches!(client.exited(), Some(c) if c != 0),
        "{}",
        client.out
    );
    assert!(
        matches!(server.exited(), Some(c) if c != 0),
        "{}",
        server.out
    );
    assert!(server.out.contains("ibv_alloc_pd failed"), "{}", server.out);
}
