//! The rdma_cm case: a listener and a client on the device's own address (the only way an
//! iWARP QP is connected), SEND/RECV both ways, an RDMA WRITE and an RDMA READ of the
//! server's region, a disconnect. Every rdma_cm wait is bounded by the case's deadline.
//!
//! Also [`link`]: the other RC cases' two QPs connected through the rdma_cm on iWARP, where
//! an RC QP cannot be connected by hand.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rverbs::cm::{create_ep, getaddrinfo, AddrHints, CmId, ConnParam, Endpoint, EndpointAttr};
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::qp::{Qp, QpAttr, QpCaps, QpState};
use rverbs::uverbs::{SendFlags, WcOpcode, WorkCompletion};

use super::cases::{check_wc, ctx, pattern, same_bytes, CaseResult, Env, Outcome};

const LEN: usize = 1000;

fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
    }
}

fn left(end: Instant) -> Duration {
    end.saturating_duration_since(Instant::now())
}

fn comp(
    got: std::io::Result<Option<WorkCompletion>>,
    wr_id: u64,
    op: WcOpcode,
    what: &str,
) -> Result<WorkCompletion, String> {
    let wc = got
        .map_err(ctx(what))?
        .ok_or_else(|| format!("no completion for {what} within the case's timeout"))?;
    check_wc(&wc, wr_id, op, what)?;
    Ok(wc)
}

/// The server's side: takes the connection, posts a receive, accepts with its region's address
/// and rkey as private data, gets the client's message, answers it, waits for the disconnect.
fn server(lis: rverbs::cm::CmId, end: Instant, client_failed: &AtomicBool) -> Result<(), String> {
    // In short waits, so that a client that failed before connecting ends this one too.
    lis.set_sync_timeout(Some(Duration::from_millis(100)));
    let req = loop {
        match lis.get_request() {
            Ok(req) => break req,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                // Acquire: pairs with the client's Release store.
                if client_failed.load(Ordering::Acquire) {
                    return Err("server: no connect request (the client failed)".into());
                }
                if Instant::now() >= end {
                    return Err("server: no connect request within the case's timeout".into());
                }
            }
            Err(e) => return Err(format!("server: get the connect request: {e}")),
        }
    };
    let ep = Endpoint::create(req, &attr()).map_err(ctx("server: create the endpoint"))?;
    ep.id().set_sync_timeout(Some(left(end)));
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let buf = PageBuf::new(8192).map_err(ctx("server: allocate"))?;
    let mr = Mr::register(ep.pd(), buf, access).map_err(ctx("server: register"))?;
    mr.write_at(4096, &pattern(7, LEN));
    ep.post_recv(1, &[mr.sge(0..LEN)])
        .map_err(ctx("server: post a receive"))?;
    let mut pd = mr.addr().to_le_bytes().to_vec();
    pd.extend_from_slice(&mr.rkey().to_le_bytes());
    ep.accept(&ConnParam {
        private_data: pd,
        ..Default::default()
    })
    .map_err(ctx("server: accept"))?;
    let wc = comp(
        ep.get_recv_comp_timeout(left(end)),
        1,
        WcOpcode::RECV,
        "server: the client's SEND",
    )?;
    if wc.byte_len as usize != LEN {
        return Err(format!("server: byte_len {}, expected {LEN}", wc.byte_len));
    }
    same_bytes(
        &mr.read_vec(0..LEN),
        &pattern(8, LEN),
        "server: received bytes",
    )?;
    mr.write_at(0, b"pong");
    ep.post_send(2, &[mr.sge(0..4)], SendFlags::SIGNALED)
        .map_err(ctx("server: post a SEND"))?;
    comp(
        ep.get_send_comp_timeout(left(end)),
        2,
        WcOpcode::SEND,
        "server: its SEND",
    )?;
    // The client disconnects when it is done with this region.
    match ep.id().get_event(Some(left(end))) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("server: no DISCONNECTED within the case's timeout".into()),
        Err(e) => Err(format!("server: wait for the disconnect: {e}")),
    }
}

pub fn rc(env: &Env, end: Instant) -> CaseResult {
    let Some(addr) = env.cm_addr.as_deref() else {
        return Ok(Outcome::Skip(
            "no address for the rdma_cm: give -a ADDR".into(),
        ));
    };
    let (lis, port) = listen_any(addr)?;
    let client_failed = Arc::new(AtomicBool::new(false));
    let failed = client_failed.clone();
    let srv = std::thread::spawn(move || server(lis, end, &failed));

    let client = (|| -> Result<(), String> {
        // Bound to the address itself: the connection stays on the device of that address
        // (without a source, the route to the address decides, and it may leave through
        // another device, as in the bed's two-node topology).
        let hints = AddrHints {
            src: addr.parse().ok().map(|ip| SocketAddr::new(ip, 0)),
            ..Default::default()
        };
        let ai = getaddrinfo(Some(addr), Some(&port), &hints)
            .map_err(|e| format!("getaddrinfo {addr} port {port}: {e}"))?;
        let id = create_ep(&ai[0]).map_err(ctx("client: resolve the address"))?;
        id.set_sync_timeout(Some(left(end)));
        let ep = Endpoint::create(id, &attr()).map_err(ctx("client: create the endpoint"))?;
        let dev = ep.pd().context().name().to_string();
        if dev != env.dev {
            return Err(format!(
                "{addr} is an address of {dev}, not of {}: give -a with an address of {}",
                env.dev, env.dev
            ));
        }
        // Also the sink of the RDMA READs below: iWARP requires a READ's sink to be
        // registered for remote write (the peer places the data by its steering tag).
        let mr = ep
            .reg_write(PageBuf::new(8192).map_err(ctx("client: allocate"))?)
            .map_err(|e| format!("client: register: {e}"))?;
        ep.post_recv(3, &[mr.sge(4096..4096 + 64)])
            .map_err(ctx("client: post a receive"))?;
        ep.connect(&ConnParam::default())
            .map_err(ctx("client: connect"))?;
        let ev = ep.id().take_event().ok_or("client: ESTABLISHED not kept")?;
        let pd = ev.private_data();
        if pd.len() < 12 {
            return Err(format!(
                "client: {} bytes of private data, expected 12",
                pd.len()
            ));
        }
        let raddr = u64::from_le_bytes(pd[0..8].try_into().unwrap_or_default());
        let rkey = u32::from_le_bytes(pd[8..12].try_into().unwrap_or_default());

        mr.write_at(0, &pattern(8, LEN));
        ep.post_send(4, &[mr.sge(0..LEN)], SendFlags::SIGNALED)
            .map_err(ctx("client: post a SEND"))?;
        comp(
            ep.get_send_comp_timeout(left(end)),
            4,
            WcOpcode::SEND,
            "client: its SEND",
        )?;
        let wc = comp(
            ep.get_recv_comp_timeout(left(end)),
            3,
            WcOpcode::RECV,
            "client: the server's SEND",
        )?;
        same_bytes(
            &mr.read_vec(4096..4096 + wc.byte_len as usize),
            b"pong",
            "client: received",
        )?;
        // WRITE into the server's region at 2048, READ it back, and READ what the server put
        // at 4096.
        mr.write_at(1024, &pattern(9, LEN));
        ep.post_write(
            5,
            &[mr.sge(1024..1024 + LEN)],
            raddr + 2048,
            rkey,
            SendFlags::SIGNALED,
        )
        .map_err(ctx("client: post an RDMA WRITE"))?;
        comp(
            ep.get_send_comp_timeout(left(end)),
            5,
            WcOpcode::RDMA_WRITE,
            "client: the RDMA WRITE",
        )?;
        // READ back what the WRITE put at 2048, then what the server put at 4096.
        for (wr_id, at, from, seed, what) in [
            (6, 5120, 2048, 9, "client: written then read"),
            (7, 6144, 4096, 7, "client: read"),
        ] {
            ep.post_read(
                wr_id,
                &[mr.sge(at..at + LEN)],
                raddr + from,
                rkey,
                SendFlags::SIGNALED,
            )
            .map_err(ctx("client: post an RDMA READ"))?;
            comp(
                ep.get_send_comp_timeout(left(end)),
                wr_id,
                WcOpcode::RDMA_READ,
                "client: the RDMA READ",
            )?;
            same_bytes(&mr.read_vec(at..at + LEN), &pattern(seed, LEN), what)?;
        }
        ep.disconnect().map_err(ctx("client: disconnect"))?;
        Ok(())
    })();
    if client.is_err() {
        // Release: the server's Acquire load sees it.
        client_failed.store(true, Ordering::Release);
    }
    let served = srv
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    client?;
    served?;
    Ok(Outcome::Pass)
}

/// The rdma_cm ids of two QPs connected by [`link`]. Dropped after the QPs (the ids end the
/// connection when destroyed).
pub struct Link {
    _client: CmId,
    _server: CmId,
    _listener: CmId,
}

/// A listener on `addr` at a port the rdma_cm picks (bound to port 0), and that port. Each
/// connection of a run gets a port of its own, and so does every selftest running beside it:
/// ports chosen here (once the process id plus the case's index) collided between two
/// selftests started close together, `EADDRINUSE` at the listen (seen in `cli/selftest_vm`,
/// whose tests run at the same time).
fn listen_any(addr: &str) -> Result<(CmId, String), String> {
    let lis = create_ep(&resolve(addr, "0", true)?)
        .map_err(|e| format!("rdma_cm: listen on {addr}: {e}"))?;
    lis.listen(1)
        .map_err(|e| format!("rdma_cm: listen on {addr}: {e}"))?;
    let src = lis
        .query_addr()
        .map_err(ctx("rdma_cm: the listener's address"))?
        .src;
    match src {
        rverbs::cm::CmAddr::Ip(sa) if sa.port() != 0 => Ok((lis, sa.port().to_string())),
        other => Err(format!(
            "rdma_cm: the listener on {addr} is bound to {other:?}, not to an IP port"
        )),
    }
}

/// `getaddrinfo` for the case's address and port: passive (the listener's), or active from
/// the address itself (the connection then stays on the device of that address: without a
/// source, the route to the address decides, and it may leave through another device).
fn resolve(addr: &str, port: &str, passive: bool) -> Result<rverbs::cm::AddrInfo, String> {
    let hints = AddrHints {
        passive,
        src: if passive {
            None
        } else {
            addr.parse().ok().map(|ip| SocketAddr::new(ip, 0))
        },
        ..Default::default()
    };
    getaddrinfo(Some(addr), Some(port), &hints)
        .map_err(|e| format!("getaddrinfo {addr} port {port}: {e}"))?
        .into_iter()
        .next()
        .ok_or_else(|| format!("getaddrinfo {addr} port {port}: no address"))
}

/// Connects `a` (the client's QP) and `b` (the server's, `srq` when it takes its receives
/// from an SRQ) through the rdma_cm on the device's address, as librdmacm does on iWARP:
/// each QP to INIT with the kernel's attributes, then CONNECT and ACCEPT, after which the
/// iw_cm has moved both QPs to RTS (recorded here with a modify to RTS, which the kernel
/// takes as a no-op). The client connects in a thread of its own; every wait ends at `end`.
pub fn link(env: &Env, end: Instant, a: &Arc<Qp>, b: &Arc<Qp>, srq: bool) -> Result<Link, String> {
    let addr = env
        .cm_addr
        .as_deref()
        .ok_or("no address for the rdma_cm: give -a ADDR")?;
    let (listener, port) = listen_any(addr)?;
    let client = create_ep(&resolve(addr, &port, false)?)
        .map_err(|e| format!("rdma_cm: resolve {addr} port {port}: {e}"))?;
    let dev = client
        .query_addr()
        .and_then(|q| q.ib_device_name())
        .map_err(ctx("rdma_cm: the client's device"))?;
    if dev != env.dev {
        return Err(format!(
            "{addr} is an address of {dev}, not of {}: give -a with an address of {}",
            env.dev, env.dev
        ));
    }
    client.set_sync_timeout(Some(left(end)));
    let init = client
        .init_qp_attr(QpState::INIT)
        .map_err(ctx("rdma_cm: the client QP's INIT attributes"))?;
    a.modify(&init).map_err(ctx("the client QP to INIT"))?;
    let qpn = a.qp_num();
    let connecting = std::thread::Builder::new()
        .name("selftest rdma_cm client".into())
        .spawn(move || {
            client
                .connect(&ConnParam::with_qp_num(qpn))
                .map(|()| client)
                .map_err(ctx("rdma_cm: connect"))
        })
        .map_err(ctx("start the client's thread"))?;
    // In short waits, so that a client that failed before its request arrived ends this one.
    listener.set_sync_timeout(Some(Duration::from_millis(100)));
    let server = loop {
        match listener.get_request() {
            Ok(req) => break req,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                if connecting.is_finished() {
                    let why = match connecting.join() {
                        Ok(Err(e)) => e,
                        Ok(Ok(_)) => "connected without a request at the listener".into(),
                        Err(_) => "the client's thread panicked".into(),
                    };
                    return Err(format!("rdma_cm: no connect request: {why}"));
                }
                if Instant::now() >= end {
                    return Err("rdma_cm: no connect request within the case's timeout".into());
                }
            }
            Err(e) => return Err(format!("rdma_cm: get the connect request: {e}")),
        }
    };
    server.set_sync_timeout(Some(left(end)));
    let init = server
        .init_qp_attr(QpState::INIT)
        .map_err(ctx("rdma_cm: the server QP's INIT attributes"))?;
    b.modify(&init).map_err(ctx("the server QP to INIT"))?;
    let accepted = server.accept(&ConnParam {
        srq,
        ..ConnParam::with_qp_num(b.qp_num())
    });
    let client = connecting
        .join()
        .map_err(|_| "the client's thread panicked".to_string())?;
    accepted.map_err(ctx("rdma_cm: accept"))?;
    let client = client?;
    let rts = QpAttr {
        qp_state: Some(QpState::RTS),
        ..Default::default()
    };
    for (qp, who) in [(a, "client"), (b, "server")] {
        qp.modify(&rts)
            .map_err(|e| format!("the {who} QP to RTS after ESTABLISHED: {e}"))?;
    }
    Ok(Link {
        _client: client,
        _server: server,
        _listener: listener,
    })
}
