//! `rverbs rdma-server` / `rverbs rdma-client` (librdmacm's rdma_server / rdma_client
//! examples) end to end: Rust with Rust, with rdma-core's tools in both directions, and the
//! errors (nobody listening, unreachable address, bad input, a peer killed mid-run).
//!
//! The server runs on `$RVERBS_ADDR_A` and the client connects to it; in the two-node
//! topology its route leaves from `$RVERBS_ADDR_B`, so the exchange crosses the veth (checked
//! with the netdevs' byte counters). Every child is bounded by a timeout and killed on
//! expiry; each test has its own port.

mod tool_support;

use std::time::Duration;

use tool_support::*;

const T: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Rust,
    C,
}

fn server_cmd(t: Tool, port: u16) -> Option<(std::path::PathBuf, Vec<String>)> {
    let a = args(&["-s", &addr_a(), "-p", &port.to_string()]);
    Some(match t {
        Tool::Rust => {
            let mut v = args(&["rdma-server"]);
            v.extend(a);
            (rverbs_bin(), v)
        }
        Tool::C => (c_tool("rdma_server")?, a),
    })
}

fn client_cmd(t: Tool, port: u16) -> Option<(std::path::PathBuf, Vec<String>)> {
    let a = args(&["-s", &addr_a(), "-p", &port.to_string()]);
    Some(match t {
        Tool::Rust => {
            let mut v = args(&["rdma-client"]);
            v.extend(a);
            (rverbs_bin(), v)
        }
        Tool::C => (c_tool("rdma_client")?, a),
    })
}

/// In the two-node topology: the veth's receive counters before a run.
fn veth_counters() -> Option<(u64, u64)> {
    two_nodes().then(|| {
        (
            rx_bytes(&env_or("RVERBS_NETDEV_A", "ve1")),
            rx_bytes(&env_or("RVERBS_NETDEV_B", "ve2")),
        )
    })
}

fn check_crossed(before: Option<(u64, u64)>) {
    if let Some((a, b)) = before {
        let (a2, b2) = veth_counters().unwrap();
        assert!(
            a2 > a && b2 > b,
            "two-node run, but the veth counters did not grow: A {a}->{a2}, B {b}->{b2}"
        );
    }
}

/// One exchange; checks both sides' exact output. Returns false if a C tool is missing in
/// the minimal guest.
fn pair(server: Tool, client: Tool, port: u16) -> bool {
    let (Some((sp, sa)), Some((cp, ca))) = (server_cmd(server, port), client_cmd(client, port))
    else {
        return false;
    };
    let before = veth_counters();
    // (The C server's "start" line sits in its stdio buffer until it exits: the client's
    // retries are what wait for it to listen.)
    let mut s = spawn(&sp, &sa);
    let c = client_once_server_listens(&mut s, &cp, &ca, T);
    let s = s.finish(T);
    assert_eq!(c.code(), Some(0), "client failed: {c}\nserver: {s}");
    assert_eq!(s.code(), Some(0), "server failed: {s}\nclient: {c}");
    assert_eq!(c.out, "rdma_client: start\nrdma_client: end 0\n", "{c}");
    assert_eq!(s.out, "rdma_server: start\nrdma_server: end 0\n", "{s}");
    for d in [&c, &s] {
        if d.what.contains("rverbs") {
            // One line is allowed, our rdma_server's note that the client hung up before the
            // answer's ACK reached it (rxe posts the client's receive completion before it
            // sends the ACK, so the answer's completion can come back flushed under load;
            // `rdma_server::answer`): the client's exit status and "end 0", asserted above,
            // are what say the answer arrived.
            let raced = d.what.contains("rdma-server")
                && d.err.starts_with(
                    "rdma_server: the client disconnected before the answer's completion (",
                )
                && d.err
                    .ends_with("its exit status tells whether it got the answer\n")
                && d.err.lines().count() == 1;
            assert!(
                d.err.is_empty() || raced,
                "nothing on stderr when all went well: {d}"
            );
        }
    }
    check_crossed(before);
    true
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rust_server_rust_client() {
    assert!(pair(Tool::Rust, Tool::Rust, 7811));
    // Twice more: nothing of the first run lingers (port, ids, devices).
    assert!(pair(Tool::Rust, Tool::Rust, 7811));
    assert!(pair(Tool::Rust, Tool::Rust, 7812));
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_rust_server_c_client() {
    pair(Tool::Rust, Tool::C, 7813);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn interop_c_server_rust_client() {
    pair(Tool::C, Tool::Rust, 7814);
}

/// Nobody listens: REJECTED (reason 8) at once, a message that says so, `end -1`, exit 255.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn connect_to_a_port_nobody_listens_on() {
    let d = rverbs(&["rdma-client", "-s", &addr_a(), "-p", "7815"]).finish(T);
    assert_eq!(d.code(), Some(255), "{d}");
    assert_eq!(d.out, "rdma_client: start\nrdma_client: end -1\n", "{d}");
    assert!(
        d.err.contains("rdma_connect") && d.err.contains("nobody listens on that port"),
        "{d}"
    );
    assert!(d.elapsed < Duration::from_secs(20), "took too long: {d}");
}

/// An address nothing answers for: one node has no route to it (ENETUNREACH at once); on the
/// two-node veth, an unused address of the subnet times out in address resolution (ARP).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn unreachable_address() {
    let (addr, want) = if two_nodes() {
        ("10.20.0.99", "timed out")
    } else {
        ("192.0.2.1", "unreachable")
    };
    let d = rverbs(&["rdma-client", "-s", addr, "-p", "7816"]).finish(T);
    assert_eq!(d.code(), Some(255), "{d}");
    assert!(d.out.ends_with("rdma_client: end -1\n"), "{d}");
    assert!(
        d.err.contains("rdma_create_ep")
            && d.err.contains(addr)
            && d.err.to_lowercase().contains(want),
        "{d}"
    );
    assert!(d.elapsed < Duration::from_secs(20), "took too long: {d}");
}

/// A host name that does not resolve: `end -2` (EAI_NONAME) naming it. (In the VM: no name
/// server answers; the guests' resolv.conf bounds the lookup to 1 s, crates/testbed/guest/init.sh.)
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn malformed_address() {
    for tool in ["rdma-client", "rdma-server"] {
        let d = rverbs(&[tool, "-s", "10.10.0.300", "-p", "7817"]).finish(T);
        assert_eq!(d.code(), Some(254), "{d}");
        assert!(d.out.ends_with(" end -2\n"), "{d}");
        assert!(
            d.err.contains("rdma_getaddrinfo") && d.err.contains("\"10.10.0.300\""),
            "{d}"
        );
    }
}

/// Port out of range and unknown options: refused before anything else (runs anywhere).
#[test]
fn bad_arguments() {
    for tool in ["rdma-client", "rdma-server"] {
        let d = rverbs(&[tool, "-s", "10.10.0.1", "-p", "70000"]).finish(T);
        assert_eq!(d.code(), Some(248), "{d}");
        assert!(d.out.ends_with(" end -8\n"), "{d}");
        assert!(d.err.contains("port 70000 out of range 0..=65535"), "{d}");

        let d = rverbs(&[tool, "-x"]).finish(T);
        assert_eq!(d.code(), Some(1), "{d}");
        assert!(
            d.err.contains("-x") && d.err.contains("Usage: rverbs rdma-"),
            "{d}"
        );
        assert_eq!(d.out, "", "{d}");

        let d = rverbs(&[tool, "-s"]).finish(T);
        assert_eq!(d.code(), Some(1), "{d}");
        assert!(d.err.contains("missing argument"), "{d}");

        let d = rverbs(&[tool, "-h"]).finish(T);
        assert_eq!(d.code(), Some(0), "{d}");
        assert!(d.out.contains("-p PORT"), "{d}");
    }
}

// --- a peer killed mid-run ---------------------------------------------------------------

/// When this variable is set, the test named in it runs as the peer process of a kill test
/// (this same binary, started by the test) instead of as the test.
const PEER_ENV: &str = "RVERBS_CMTOOLS_PEER";

/// Starts this test binary again as the peer of `test` (role "client" or "server"), on
/// `port`.
fn spawn_peer(test: &str, role: &str, port: u16) -> Running {
    let exe = std::env::current_exe().expect("current_exe");
    spawn_env(
        &exe,
        &[test, "--exact", "--nocapture", "--test-threads=1"],
        &[(PEER_ENV, &format!("{role}:{port}"))],
    )
}

/// Runs the peer role if this process was started as one; never returns then.
fn maybe_be_the_peer() {
    use rverbs::cm::{create_ep, getaddrinfo, AddrHints, ConnParam};
    use rverbs::cm::{Endpoint, EndpointAttr};
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return;
    };
    let (role, port) = spec.split_once(':').expect("role:port");
    let port = port.to_string();
    let a = addr_a();
    if role == "client" {
        // Connect (retrying while the server is not listening yet), then wait to be killed.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let ep = loop {
            let ai = getaddrinfo(Some(&a), Some(&port), &AddrHints::default()).unwrap();
            let ep =
                Endpoint::create(create_ep(&ai[0]).unwrap(), &EndpointAttr::default()).unwrap();
            match ep.connect(&ConnParam::default()) {
                Ok(()) => break ep,
                Err(e) if std::time::Instant::now() < deadline => {
                    eprintln!("peer: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("peer: connect: {e}"),
            }
        };
        println!("PEER CONNECTED");
        std::thread::sleep(Duration::from_secs(60));
        drop(ep);
    } else {
        let hints = AddrHints {
            passive: true,
            ..AddrHints::default()
        };
        let ai = getaddrinfo(Some(&a), Some(&port), &hints).unwrap();
        let lis = create_ep(&ai[0]).unwrap();
        lis.listen(0).unwrap();
        println!("PEER LISTENING");
        let ep = Endpoint::create(lis.get_request().unwrap(), &EndpointAttr::default()).unwrap();
        let mr = ep.reg_msgs(vec![0u8; 16]).unwrap();
        let sge = [mr.sge(0..16)];
        ep.post_recv(1, &sge).unwrap();
        ep.accept(&ConnParam::default()).unwrap();
        let wc = ep.get_recv_comp().unwrap();
        assert!(wc.status.is_success());
        println!("PEER GOT MESSAGE");
        std::thread::sleep(Duration::from_secs(60));
        drop(ep);
        drop(mr);
    }
    std::process::exit(0);
}

/// The client dies after connecting, before sending: the server, waiting for the message,
/// sees DISCONNECTED and ends with an error (the C tool would wait forever).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn server_survives_a_killed_client() {
    maybe_be_the_peer();
    let port = 7818;
    let mut s = rverbs(&["rdma-server", "-s", &addr_a(), "-p", &port.to_string()]);
    s.wait_output("rdma_server: start", T);
    let mut peer = spawn_peer("server_survives_a_killed_client", "client", port);
    peer.wait_output("PEER CONNECTED", T);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !s.exited(),
        "the server ended before its client died: {}",
        s.snapshot()
    );
    peer.kill9();
    let d = s.finish(Duration::from_secs(30));
    assert_eq!(d.code(), Some(255), "{d}");
    assert_eq!(d.out, "rdma_server: start\nrdma_server: end -1\n", "{d}");
    assert!(
        d.err.contains("rdma_get_recv_comp") && d.err.contains("the peer disconnected"),
        "{d}"
    );
}

/// The server dies after receiving the message, before answering: the client, waiting for
/// the answer, sees DISCONNECTED and ends with an error.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn client_survives_a_killed_server() {
    maybe_be_the_peer();
    let port = 7819;
    let mut peer = spawn_peer("client_survives_a_killed_server", "server", port);
    peer.wait_output("PEER LISTENING", T);
    let mut c = rverbs(&["rdma-client", "-s", &addr_a(), "-p", &port.to_string()]);
    peer.wait_output("PEER GOT MESSAGE", T);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !c.exited(),
        "the client ended before its server died: {}",
        c.snapshot()
    );
    peer.kill9();
    let d = c.finish(Duration::from_secs(30));
    assert_eq!(d.code(), Some(255), "{d}");
    assert_eq!(d.out, "rdma_client: start\nrdma_client: end -1\n", "{d}");
    assert!(
        d.err.contains("rdma_get_recv_comp") && d.err.contains("the peer disconnected"),
        "{d}"
    );
}

// ---------------------------------------------------------------------------------------------
// The facade's examples (crates/rverbs/examples), built into this binary so they run in every
// guest: their functions are called here as the programs' `main`s call them.

#[path = "../../rverbs/examples/client.rs"]
mod example_client;
#[path = "../../rverbs/examples/rdma_write_read.rs"]
mod example_rdma_write_read;
#[path = "../../rverbs/examples/server.rs"]
mod example_server;

/// examples/server.rs answers examples/client.rs (the README's example).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_client_and_server() {
    let port = "7830";
    let listener = example_server::listen(&addr_a(), port).expect("example server: listen");
    let server = std::thread::spawn(move || example_server::serve_one(&listener, b"world"));
    let reply = example_client::run(&addr_a(), port, b"hello").expect("example client");
    assert_eq!(reply, b"world");
    let got = server.join().unwrap().expect("example server");
    assert_eq!(got, b"hello");
}

/// examples/rdma_write_read.rs: the client's RDMA WRITE lands in the server's buffer and its
/// RDMA READ brings the same bytes back.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn example_rdma_write_read() {
    use example_rdma_write_read as ex;
    let port = "7831";
    let data = b"written by RDMA WRITE, read back by RDMA READ";
    let listener = ex::listen(&addr_a(), port).expect("example server: listen");
    let server = std::thread::spawn(move || ex::server(&listener));
    let back = ex::client(&addr_a(), port, data).expect("example client");
    assert_eq!(back, data);
    let written = server.join().unwrap().expect("example server");
    assert_eq!(written, data);
    let key = ex::RemoteBuf {
        addr: 0x1122_3344_5566_7788,
        rkey: 0x99aa_bbcc,
        len: 4096,
    };
    assert_eq!(ex::RemoteBuf::decode(&key.encode()), Some(key));
}
