//! Completion waits that end with the connection (issues #14, #31): a peer killed while the
//! other side is blocked in get_recv_comp / get_send_comp, timeouts, a flushed QP, and one
//! event dispatcher per channel (a completion waiter does not steal accept's ESTABLISHED). The
//! peer is this test binary started again (see `maybe_be_the_peer`). Runs in the VM on rxe.
//!
//! After the end a wait moves the QP to ERR and drains the queue: each request outstanding
//! at the end comes back as its completion (flushed: WR_FLUSH_ERR, or the error the peer
//! answered with), and only then does the wait fail. No outcome here depends on timing: none
//! of these tests bounds how long a wait takes (a hung wait is the stage's timeout).

mod common;

use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::listener;
use rverbs_cm::{CmEventKind, ConnParam};
use rverbs_cm::{EndReason, Endpoint, EndpointAttr, END_MARKER};
use rverbs_uverbs::mr::{Mr, PageBuf};
use rverbs_uverbs::PostQueue;
use rverbs_uverbs::{SendFlags, WcStatus, WorkCompletion};

/// The endpoints of these tests: 4 sends and receives, 64 inline bytes.
fn attr() -> EndpointAttr {
    common::attr(4, 64)
}

/// Connects to `port`, retrying while nobody listens yet (the peer process starts up).
fn connect(port: u16, before: impl Fn(&Endpoint)) -> Endpoint {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ep = common::client(port, &attr());
        before(&ep);
        match ep.connect(&ConnParam::default()) {
            Ok(()) => return ep,
            Err(e) if Instant::now() < deadline => {
                eprintln!("connect: {e}; again");
                thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

fn post_recv(ep: &Endpoint, mr: &Mr<PageBuf>, wr_id: u64) {
    let sge = [mr.sge(0..64)];
    ep.post_recv(wr_id, &sge).unwrap();
}

const PEER_ENV: &str = "RVERBS_WAITS_END_PEER";

struct Peer {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    /// This binary again, running `test` as the peer `role` on `port`.
    fn spawn(test: &str, role: &str, port: u16) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(PEER_ENV, format!("{role}:{port}"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Peer { child, lines }
    }

    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains(what) => return,
                Ok(_) => {}
                Err(e) => panic!("the peer never printed {what:?}: {e}"),
            }
        }
    }

    fn kill(mut self) -> Instant {
        self.child.kill().unwrap();
        let t = Instant::now();
        self.child.wait().unwrap();
        t
    }
}

/// Runs the peer role if this process was started as one; never returns then.
fn maybe_be_the_peer() {
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return;
    };
    let (role, port) = spec.split_once(':').unwrap();
    let port: u16 = port.parse().unwrap();
    match role {
        // Connects, sends one message, then waits to be killed.
        "client" => {
            let ep = connect(port, |_| {});
            ep.post_send_inline(1, b"hello", SendFlags::empty())
                .unwrap();
            assert!(ep.get_send_comp().unwrap().status.is_success());
            println!("PEER SENT");
            thread::sleep(Duration::from_secs(120));
            drop(ep);
        }
        // Accepts with a receive posted (or none: "server-norecv", so the client's send is
        // stuck in RNR retries), takes the message if any, then waits to be killed.
        "server" | "server-norecv" => {
            let lis = listener(port);
            println!("PEER LISTENING");
            let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
            let mr = ep
                .reg_msgs(PageBuf::new(4096).unwrap())
                .map_err(std::io::Error::from)
                .unwrap();
            if role == "server" {
                post_recv(&ep, &mr, 1);
            }
            ep.accept(&ConnParam::default()).unwrap();
            println!("PEER ACCEPTED");
            if role == "server" {
                assert!(ep.get_recv_comp().unwrap().status.is_success());
                println!("PEER GOT MESSAGE");
            }
            thread::sleep(Duration::from_secs(120));
            drop(ep);
            drop(mr);
        }
        other => panic!("unknown peer role {other}"),
    }
    std::process::exit(0);
}

fn assert_disconnect_error(e: &io::Error, op: &str) {
    let s = e.to_string();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{s}");
    assert!(
        s.contains(op)
            && s.contains("DISCONNECTED")
            && s.contains("peer disconnected")
            && s.contains("QP 0x")
            && s.contains("no completion is left to come"),
        "{s}"
    );
}

/// The end error of `op` after the completions of every request were returned.
fn assert_ends(r: io::Result<WorkCompletion>, op: &str) {
    match r {
        Ok(wc) => panic!("{op} returned {wc:?} after every request had completed"),
        Err(e) => assert_disconnect_error(&e, op),
    }
}

/// The receive `wr_id`, outstanding when the connection ended, comes back flushed.
fn assert_flushed(r: io::Result<WorkCompletion>, wr_id: u64) {
    let wc = r.unwrap_or_else(|e| {
        panic!("the wait ended ({e}) instead of returning the flush of receive {wr_id}")
    });
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::WR_FLUSH_ERR));
}

/// A server blocked in get_recv_comp when its client is killed gets an error naming the
/// disconnect within a second, then serves the next client.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn server_blocked_in_get_recv_comp_sees_its_client_die() {
    maybe_be_the_peer();
    let port = 7711;
    let lis = listener(port);
    let peer = Peer::spawn(
        "server_blocked_in_get_recv_comp_sees_its_client_die",
        "client",
        port,
    );
    let buf = PageBuf::new(4096).unwrap();
    let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
    let mr = ep.reg_msgs(buf).map_err(std::io::Error::from).unwrap();
    post_recv(&ep, &mr, 1);
    post_recv(&ep, &mr, 2);
    ep.accept(&ConnParam::default()).unwrap();
    let wc = ep.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::SUCCESS));
    peer.wait_for("PEER SENT");
    let r = thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(300));
            peer.kill();
        });
        ep.get_recv_comp()
    });
    // Receive 2 was outstanding: it comes back flushed, then the wait fails with the end.
    assert_flushed(r, 2);
    assert!(matches!(
        ep.ended(),
        Some(EndReason::Event(CmEventKind::DISCONNECTED, _))
    ));
    assert_ends(ep.get_recv_comp(), "get_recv_comp");
    // The same error again: the wait does not start over.
    assert_ends(ep.get_recv_comp(), "get_recv_comp");
    drop(ep);
    drop(mr);

    // The next client is served.
    let next = thread::spawn(move || {
        let buf = PageBuf::new(4096).unwrap();
        let c = connect(port, |_| {});
        let mr = c.reg_msgs(buf).map_err(std::io::Error::from).unwrap();
        post_recv(&c, &mr, 7);
        c.post_send_inline(3, b"next", SendFlags::empty()).unwrap();
        assert!(c.get_send_comp().unwrap().status.is_success());
        let wc = c.get_recv_comp().unwrap();
        assert_eq!((wc.wr_id, wc.status), (7, WcStatus::SUCCESS));
        assert_eq!(&mr.read_vec(0..5)[..], b"again");
        c.disconnect().unwrap();
        drop(c);
    });
    let buf = PageBuf::new(4096).unwrap();
    let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
    let mr = ep.reg_msgs(buf).map_err(std::io::Error::from).unwrap();
    post_recv(&ep, &mr, 9);
    ep.accept(&ConnParam::default()).unwrap();
    let wc = ep.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::SUCCESS));
    assert_eq!(&mr.read_vec(0..4)[..], b"next");
    ep.post_send_inline(4, b"again", SendFlags::empty())
        .unwrap();
    assert!(ep.get_send_comp().unwrap().status.is_success());
    next.join().unwrap();
}

/// A client blocked in get_recv_comp when its server is killed gets the error within a second.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn client_blocked_in_get_recv_comp_sees_its_server_die() {
    maybe_be_the_peer();
    let port = 7712;
    let peer = Peer::spawn(
        "client_blocked_in_get_recv_comp_sees_its_server_die",
        "server",
        port,
    );
    peer.wait_for("PEER LISTENING");
    let buf = PageBuf::new(4096).unwrap();
    let ep = connect(port, |_| {});
    let mr = ep.reg_msgs(buf).map_err(std::io::Error::from).unwrap();
    post_recv(&ep, &mr, 1);
    ep.post_send_inline(1, b"hello", SendFlags::empty())
        .unwrap();
    assert!(ep.get_send_comp().unwrap().status.is_success());
    peer.wait_for("PEER GOT MESSAGE");
    let r = thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(300));
            peer.kill();
        });
        ep.get_recv_comp()
    });
    assert_flushed(r, 1);
    assert_ends(ep.get_recv_comp(), "get_recv_comp");
}

/// A client blocked in get_send_comp (its send retried for ever: the server posted no
/// receive, RNR retry 7 = infinite) when the server is killed gets the error within a second.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn client_blocked_in_get_send_comp_sees_its_server_die() {
    maybe_be_the_peer();
    let port = 7713;
    let peer = Peer::spawn(
        "client_blocked_in_get_send_comp_sees_its_server_die",
        "server-norecv",
        port,
    );
    peer.wait_for("PEER LISTENING");
    let ep = connect(port, |_| {});
    peer.wait_for("PEER ACCEPTED");
    ep.post_send_inline(1, b"nobody receives", SendFlags::empty())
        .unwrap();
    // Nothing completes while the peer lives: the timeout variant says so.
    assert_eq!(
        ep.get_send_comp_timeout(Duration::from_millis(300))
            .unwrap(),
        None
    );
    let r = thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(300));
            peer.kill();
        });
        ep.get_send_comp()
    });
    // The send was outstanding at the end: its completion comes first, never the end. The
    // outcomes the protocol allows for it: flushed by the move to ERR after DISCONNECTED
    // (WR_FLUSH_ERR); or, if the dying peer's QP answered the retried send before that, the
    // NAK's error (remote operation/access error), or the transport's retries ran out
    // (RETRY_EXC_ERR). Never success: nobody posted a receive for it.
    let wc = r.unwrap_or_else(|e| panic!("the wait ended ({e}) instead of returning the send"));
    assert_eq!(wc.wr_id, 1, "{wc:?}");
    assert!(
        [
            WcStatus::WR_FLUSH_ERR,
            WcStatus::REM_OP_ERR,
            WcStatus::REM_ACCESS_ERR,
            WcStatus::RETRY_EXC_ERR
        ]
        .contains(&wc.status),
        "{wc:?}"
    );
    assert_ends(ep.get_send_comp(), "get_send_comp");
}

/// get_recv_comp_timeout returns None in time when nothing comes; a QP moved to ERR by
/// disconnect() from another thread flushes the blocked receive (WR_FLUSH_ERR), and the wait
/// after that fails with ConnectionAborted instead of sleeping.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn timeout_and_flushed_qp() {
    let port = 7714;
    let lis = listener(port);
    let server = thread::spawn(move || {
        let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
        ep.accept(&ConnParam::default()).unwrap();
        // Hold the connection until the client is done.
        let _ = ep.id().get_event(Some(Duration::from_secs(30)));
    });
    let buf = PageBuf::new(4096).unwrap();
    let ep = connect(port, |_| {});
    let mr = ep.reg_msgs(buf).map_err(std::io::Error::from).unwrap();
    // The waits' marker wr_id is refused by every post helper, by name; nothing is posted.
    let sge = [mr.sge(0..64)];
    for r in [
        ep.post_recv(END_MARKER, &sge),
        ep.post_send(END_MARKER, &sge, SendFlags::empty()),
        ep.post_send_inline(END_MARKER, b"x", SendFlags::empty()),
    ] {
        let e = r.expect_err("END_MARKER accepted as a wr_id");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("END_MARKER"), "{e}");
    }
    // An endpoint has no shared receive queue to poll or drain.
    let mut wcs = [WorkCompletion::default()];
    let e = ep.poll_comps(PostQueue::Srq, &mut wcs).unwrap_err();
    assert!(e.to_string().contains("no shared receive queue"), "{e}");
    let e = ep.drain_on_end(PostQueue::Srq).unwrap_err();
    assert!(e.to_string().contains("no shared receive queue"), "{e}");
    // Before the end the drain-aware poll is a plain poll: nothing there yet.
    assert_eq!(ep.poll_comps(PostQueue::Recv, &mut wcs).unwrap(), 0);
    post_recv(&ep, &mr, 5);
    let t = Instant::now();
    assert_eq!(
        ep.get_recv_comp_timeout(Duration::from_millis(200))
            .unwrap(),
        None
    );
    // A timeout never ends early (how late it ends is the machine's load).
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    let wc = thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(200));
            ep.disconnect().unwrap();
        });
        ep.get_recv_comp().unwrap()
    });
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::WR_FLUSH_ERR));
    let e = ep.get_recv_comp().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted, "{e}");
    assert!(e.to_string().contains("flushed"), "{e}");
    server.join().unwrap();
}

/// One dispatcher per channel: a thread blocked in get_recv_comp before accept does not take
/// the ESTABLISHED event accept waits for, and still gets its completion afterwards.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn a_completion_waiter_does_not_steal_accepts_event() {
    let port = 7715;
    let lis = listener(port);
    let client = thread::spawn(move || {
        let c = connect(port, |_| {});
        thread::sleep(Duration::from_millis(300));
        c.post_send_inline(1, b"late", SendFlags::empty()).unwrap();
        assert!(c.get_send_comp().unwrap().status.is_success());
        // Wait for the server's disconnect.
        let ev = c.id().get_event(Some(Duration::from_secs(30))).unwrap();
        assert_eq!(ev.map(|e| e.kind()), Some(CmEventKind::DISCONNECTED));
    });
    let buf = PageBuf::new(4096).unwrap();
    let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
    let mr = ep.reg_msgs(buf).map_err(std::io::Error::from).unwrap();
    post_recv(&ep, &mr, 8);
    let wc = thread::scope(|s| {
        let waiter = s.spawn(|| ep.get_recv_comp());
        thread::sleep(Duration::from_millis(200));
        ep.accept(&ConnParam::default()).unwrap();
        waiter.join().unwrap().unwrap()
    });
    assert_eq!((wc.wr_id, wc.status), (8, WcStatus::SUCCESS));
    assert_eq!(&mr.read_vec(0..4)[..], b"late");
    assert!(ep.ended().is_none());
    ep.disconnect().unwrap();
    client.join().unwrap();
}

/// Dropping a connected endpoint without `disconnect` (Endpoint's "Dropping" doc): the peer
/// blocked in get_recv_comp sees DISCONNECTED, as after a disconnect.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn dropping_a_connected_endpoint_disconnects_the_peer() {
    let port = 7717;
    let lis = listener(port);
    // The client drops its endpoint only once the server's accept has returned: dropping it
    // earlier is a different case (the server's accept then sees DISCONNECTED instead of
    // ESTABLISHED, and fails as librdmacm's does; seen once under load on 6.1).
    let (accepted, wait_accepted) = std::sync::mpsc::channel::<()>();
    let client = thread::spawn(move || {
        let c = connect(port, |_| {});
        c.post_send_inline(1, b"bye", SendFlags::empty()).unwrap();
        assert!(c.get_send_comp().unwrap().status.is_success());
        wait_accepted.recv().unwrap();
        drop(c); // no disconnect
    });
    let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
    let mr = ep
        .reg_msgs(PageBuf::new(4096).unwrap())
        .map_err(std::io::Error::from)
        .unwrap();
    post_recv(&ep, &mr, 1);
    post_recv(&ep, &mr, 2);
    ep.accept(&ConnParam::default()).unwrap();
    let wc = ep.get_recv_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::SUCCESS));
    accepted.send(()).unwrap();
    client.join().unwrap();
    assert_flushed(ep.get_recv_comp(), 2);
    assert_ends(ep.get_recv_comp(), "get_recv_comp");
    assert!(
        matches!(
            ep.ended(),
            Some(EndReason::Event(CmEventKind::DISCONNECTED, _))
        ),
        "{:?}",
        ep.ended()
    );
}
