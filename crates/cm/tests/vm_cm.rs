//! rdma_cm against the kernel, in the VM (`cargo xtask test`): ids, bind, address and route
//! resolution, a full RC handshake without user QPs (the CM only carries `qp_num` in its
//! messages), reject with private data, refused and unreachable peers, wrong-state errors,
//! channel migration, UD (SIDR) and leaks.
//!
//! Addresses come from the test bed: RVERBS_ADDR_A (listener) and RVERBS_ADDR_B (client; the
//! same in the one-node topology), devices RVERBS_DEV_A/B. Every wait is bounded: a hang is a
//! failure, never a stuck test run. The tests share one lock: they count file descriptors and
//! use fixed ports.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use rverbs_cm::*;
use rverbs_uverbs::Error;

const WAIT: Duration = Duration::from_secs(20);

static SERIAL: Mutex<()> = Mutex::new(());

/// Serializes the tests and insists on a device: in the VM a missing rdma_cm is a failure.
fn setup() -> MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert!(
        std::path::Path::new(DEVICE_PATH).exists(),
        "{DEVICE_PATH} missing (RVERBS_VM={:?}): rdma_ucm not loaded in the test bed",
        std::env::var("RVERBS_VM")
    );
    g
}

fn env_addr(var: &str) -> Ipv4Addr {
    std::env::var(var)
        .unwrap_or_else(|_| "10.10.0.1".into())
        .parse()
        .unwrap_or_else(|e| panic!("{var}: {e}"))
}

fn addr_a(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(env_addr("RVERBS_ADDR_A")), port)
}

fn addr_b(port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(env_addr("RVERBS_ADDR_B")), port)
}

fn dev_a() -> String {
    std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into())
}

/// An address in A's /24 that nobody has.
fn nobody() -> SocketAddr {
    let o = env_addr("RVERBS_ADDR_A").octets();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], 77)), 4791)
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The next event on `ch` (bounded), which must be `kind` for `id` with status 0.
fn expect(ch: &EventChannel, kind: CmEventKind, id: &CmId) -> CmEvent {
    let ev = ch
        .get_event_timeout(WAIT)
        .unwrap()
        .unwrap_or_else(|| panic!("no {kind} event within {WAIT:?} (id {})", id.handle()));
    assert_eq!(
        ev.kind(),
        kind,
        "{ev} (waiting for {kind} on id {})",
        id.handle()
    );
    assert_eq!(ev.status(), 0, "{ev}");
    assert!(
        ev.is_for(id),
        "{ev} is not for id {} (uid {:#x})",
        id.handle(),
        id.uid()
    );
    ev
}

/// An async client id on `ch`, resolved (address and route) toward A from B.
fn resolved_client(ch: &EventChannel, ps: PortSpace, port: u16) -> CmId {
    let id = CmId::create(Some(ch), ps).unwrap();
    id.resolve_addr(Some(addr_b(0)), addr_a(port), Duration::from_millis(2000))
        .unwrap();
    expect(ch, CmEventKind::ADDR_RESOLVED, &id);
    id.resolve_route(Duration::from_millis(2000)).unwrap();
    expect(ch, CmEventKind::ROUTE_RESOLVED, &id);
    id
}

fn sysfs_gid(dev: &str, index: u32) -> String {
    std::fs::read_to_string(format!("/sys/class/infiniband/{dev}/ports/1/gids/{index}"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn create_and_destroy_ids() {
    let _g = setup();
    let ch = EventChannel::new().unwrap();
    for (ps, qp) in [
        (PortSpace::TCP, QpType::RC),
        (PortSpace::UDP, QpType::UD),
        (PortSpace::IPOIB, QpType::UD),
        (PortSpace::IB, QpType::UC),
    ] {
        let id = CmId::create_with_qp_type(Some(&ch), ps, qp).unwrap();
        assert_eq!((id.port_space(), id.qp_type()), (ps, qp));
        assert!(!id.is_sync());
        assert_eq!(id.destroy().unwrap(), 0, "no events were reported");
    }
    let sync = CmId::create(None, PortSpace::TCP).unwrap();
    assert!(sync.is_sync());
    use std::os::fd::AsRawFd;
    assert_ne!(sync.channel_fd().as_raw_fd(), ch.as_raw_fd());
    let a = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
    let b = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
    assert_ne!(a.handle(), b.handle());
    assert_ne!(a.uid(), b.uid());
    // The kernel knows nothing about an id after destroy: nothing for the channel either.
    drop((a, b, sync));
    assert!(ch.try_get_event().unwrap().is_none());
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn bind_to_the_device_address() {
    let _g = setup();
    let id = CmId::create(None, PortSpace::TCP).unwrap();
    id.bind(addr_a(0)).unwrap();
    let q = id.query_addr().unwrap();
    let src = q.src.ip().expect("an IP source");
    assert_eq!(src.ip(), addr_a(0).ip());
    assert_ne!(src.port(), 0, "the kernel picked a port");
    assert!(
        q.has_device(),
        "binding a device address attaches the device: {q:?}"
    );
    assert_eq!(q.port_num, 1);
    assert_eq!(q.ib_device_name().unwrap(), dev_a());
    let uverbs = q.uverbs_device().unwrap();
    assert!(uverbs.exists(), "{}", uverbs.display());
    let guid =
        std::fs::read_to_string(format!("/sys/class/infiniband/{}/node_guid", dev_a())).unwrap();
    assert_eq!(q.node_guid_string(), guid.trim());

    // Binding again is a wrong-state error naming the operation.
    let e = id.bind(addr_a(0)).unwrap_err();
    assert_eq!(Error::errno_of(&e), Some(rustix::io::Errno::INVAL), "{e}");
    assert!(e.to_string().contains("bind refused"), "{e}");

    // An address no interface has.
    let other = CmId::create(None, PortSpace::TCP).unwrap();
    let e = other.bind(nobody()).unwrap_err();
    assert_eq!(
        Error::errno_of(&e),
        Some(rustix::io::Errno::ADDRNOTAVAIL),
        "{e}"
    );
    assert!(e.to_string().contains(&nobody().to_string()), "{e}");

    // The same port twice in one port space; a UDP id may use it.
    let port = src.port();
    let dup = CmId::create(None, PortSpace::TCP).unwrap();
    let e = dup.bind(addr_a(port)).unwrap_err();
    assert_eq!(
        Error::errno_of(&e),
        Some(rustix::io::Errno::ADDRINUSE),
        "{e}"
    );
    let udp = CmId::create(None, PortSpace::UDP).unwrap();
    udp.bind(addr_a(port)).unwrap();

    // IPv6 wildcard: bound, no device yet.
    let v6 = CmId::create(None, PortSpace::TCP).unwrap();
    v6.set_afonly(true).unwrap();
    v6.bind("[::]:0".parse().unwrap()).unwrap();
    let q6 = v6.query_addr().unwrap();
    assert!(matches!(q6.src, CmAddr::Ip(SocketAddr::V6(_))), "{q6:?}");
    assert!(!q6.has_device());
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn resolve_address_and_route_to_self() {
    let _g = setup();
    let id = CmId::create(None, PortSpace::TCP).unwrap();
    id.set_sync_timeout(Some(WAIT));
    id.resolve_addr(Some(addr_b(0)), addr_a(7400), Duration::from_millis(2000))
        .unwrap();
    let ev = id.take_event().expect("the ADDR_RESOLVED event");
    assert_eq!(ev.kind(), CmEventKind::ADDR_RESOLVED);
    let q = id.query_addr().unwrap();
    assert_eq!(q.dst, CmAddr::Ip(addr_a(7400)));
    assert!(q.has_device());

    // INIT attributes are available once the address is resolved.
    let init = id.init_qp_attr(QpState::INIT).unwrap();
    assert!(
        init.mask().contains(
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS
        ),
        "{init:?}"
    );
    assert_eq!(init.qp_state, Some(QpState::INIT));
    assert_eq!(init.port_num, Some(1));

    assert!(
        id.query_path().unwrap().is_empty(),
        "no path before ROUTE_RESOLVED"
    );
    id.resolve_route(Duration::from_millis(2000)).unwrap();
    assert_eq!(id.take_event().unwrap().kind(), CmEventKind::ROUTE_RESOLVED);

    let want_dgid = Gid({
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&env_addr("RVERBS_ADDR_A").octets());
        g
    });
    let paths = id.query_path().unwrap();
    assert_eq!(paths.len(), 1, "{paths:?}");
    assert_eq!(paths[0].dgid, want_dgid, "{paths:?}");
    assert_eq!(
        paths[0].sgid.to_ipv4_mapped(),
        Some(env_addr("RVERBS_ADDR_B")),
        "{paths:?}"
    );
    assert!(paths[0].mtu_bytes().is_some(), "{paths:?}");

    let gids = id.query_gid().unwrap();
    assert_eq!((gids.src_size, gids.dst_size), (48, 48));
    assert_eq!(gids.dst.gid, want_dgid);
    assert_eq!(gids.dst.port(), 7400);
    // The local GID is the device's IPv4-mapped RoCE v2 GID, as sysfs shows it.
    let dev_b = std::env::var("RVERBS_DEV_B").unwrap_or_else(|_| "rxe0".into());
    assert_eq!(gids.src.gid.to_sysfs_string(), sysfs_gid(&dev_b, 1));

    let route = id.query_route().unwrap();
    assert_eq!(route.num_paths, 1);
    assert_eq!(route.paths[0].dgid, want_dgid);
    assert_eq!(route.dst, CmAddr::Ip(addr_a(7400)));
    assert_eq!(route.port_num, 1);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_events_and_nonblocking_reads() {
    let _g = setup();
    let ch = EventChannel::new().unwrap();
    assert!(ch.try_get_event().unwrap().is_none(), "empty channel");
    let t = Instant::now();
    assert!(ch
        .get_event_timeout(Duration::from_millis(200))
        .unwrap()
        .is_none());
    assert!(t.elapsed() >= Duration::from_millis(190));
    let id = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
    id.resolve_addr(None, addr_a(7401), Duration::from_millis(2000))
        .unwrap();
    let ev = expect(&ch, CmEventKind::ADDR_RESOLVED, &id);
    assert_eq!(ev.id_handle(), id.handle());
    assert!(ch.try_get_event().unwrap().is_none());
    // Wrong-state: connect before the route is resolved.
    let e = id.connect(&ConnParam::default()).unwrap_err();
    assert_eq!(Error::errno_of(&e), Some(rustix::io::Errno::INVAL), "{e}");
    assert!(e.to_string().contains("route must be resolved"), "{e}");
    id.resolve_route(Duration::from_millis(2000)).unwrap();
    expect(&ch, CmEventKind::ROUTE_RESOLVED, &id);
    // 2 events reported for this id.
    assert_eq!(id.destroy().unwrap(), 2);
}

struct Pair {
    lch: EventChannel,
    cch: EventChannel,
    listener: CmId,
    client: CmId,
    server: CmId,
}

/// Listener on A:`port`, client from B, CONNECT_REQUEST taken: the server id, not accepted.
fn request(port: u16, client_param: &ConnParam) -> (Pair, CmEvent) {
    let lch = EventChannel::new().unwrap();
    let cch = EventChannel::new().unwrap();
    let listener = CmId::create(Some(&lch), PortSpace::TCP).unwrap();
    listener.bind(addr_a(port)).unwrap();
    listener.listen(4).unwrap();
    let client = resolved_client(&cch, PortSpace::TCP, port);
    client.connect(client_param).unwrap();
    let mut req = expect(&lch, CmEventKind::CONNECT_REQUEST, &listener);
    let server = req.take_id().expect("the new id");
    assert_eq!(server.handle(), req.id_handle());
    assert_ne!(server.handle(), listener.handle());
    (
        Pair {
            lch,
            cch,
            listener,
            client,
            server,
        },
        req,
    )
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn connect_accept_establish_disconnect_without_qps() {
    let _g = setup();
    let hello = ConnParam {
        private_data: b"hello from the client".to_vec(),
        qp_num: 0x123,
        initiator_depth: Some(2),
        responder_resources: Some(3),
        ..ConnParam::default()
    };
    let (p, req) = request(7410, &hello);
    // The REQ's private data field is 56 bytes on an IP-addressed RC id: ours, zero-padded.
    assert_eq!(req.private_data().len(), 56);
    assert_eq!(&req.private_data()[..21], b"hello from the client");
    assert!(req.private_data()[21..].iter().all(|&b| b == 0));
    let c = req.conn().unwrap();
    assert_eq!(c.qp_num, 0x123, "the fake QP number travels in the REQ");
    // Swapped into the passive side's view.
    assert_eq!((c.initiator_depth, c.responder_resources), (3, 2));
    assert_eq!((c.retry_count, c.rnr_retry_count), (7, 7));

    // The server id answers queries: its addresses are the connection's.
    let q = p.server.query_addr().unwrap();
    assert_eq!(q.src.ip().unwrap().port(), 7410);
    assert_eq!(q.dst.ip().unwrap().ip(), addr_b(0).ip());

    p.server
        .accept(&ConnParam {
            private_data: b"welcome".to_vec(),
            qp_num: 0x456,
            ..ConnParam::default()
        })
        .unwrap();
    let resp = expect(&p.cch, CmEventKind::CONNECT_RESPONSE, &p.client);
    assert_eq!(resp.private_data().len(), 196);
    assert_eq!(&resp.private_data()[..7], b"welcome");
    assert_eq!(resp.conn().unwrap().qp_num, 0x456);
    // After the REP the kernel has the peer's parameters: RTR attributes name its QP.
    let rtr = p.client.init_qp_attr(QpState::RTR).unwrap();
    assert!(
        rtr.mask().contains(QpAttrMask::DEST_QPN | QpAttrMask::AV),
        "{rtr:?}"
    );
    assert_eq!(rtr.dest_qp_num, Some(0x456));
    let rts = p.client.init_qp_attr(QpState::RTS).unwrap();
    assert!(rts.mask().contains(QpAttrMask::SQ_PSN), "{rts:?}");

    p.client.establish().unwrap();
    expect(&p.lch, CmEventKind::ESTABLISHED, &p.server);

    // Accepting an established connection again is a wrong-state error.
    let e = p.server.accept(&ConnParam::default()).unwrap_err();
    assert_eq!(Error::errno_of(&e), Some(rustix::io::Errno::INVAL), "{e}");
    assert!(e.to_string().contains("accept refused"), "{e}");

    p.client.disconnect().unwrap();
    expect(&p.lch, CmEventKind::DISCONNECTED, &p.server);
    p.server.disconnect().unwrap();
    expect(&p.cch, CmEventKind::DISCONNECTED, &p.client);

    // events_reported counts what GET_EVENT handed out per id: the CONNECT_REQUEST belongs to
    // the listener; ESTABLISHED + DISCONNECTED to the server id.
    let Pair {
        listener,
        client,
        server,
        ..
    } = p;
    assert_eq!(server.destroy().unwrap(), 2);
    assert_eq!(client.destroy().unwrap(), 4);
    assert_eq!(listener.destroy().unwrap(), 1);
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn synchronous_client_and_server() {
    let _g = setup();
    let fds = open_fds();
    run_sync_pair(7420);
    assert_eq!(
        open_fds(),
        fds,
        "a synchronous connection cycle leaks no fd"
    );
}

fn run_sync_pair(port: u16) {
    let hints = AddrHints {
        passive: true,
        ..AddrHints::default()
    };
    let node = addr_a(0).ip().to_string();
    let ai = getaddrinfo(Some(&node), Some(&port.to_string()), &hints).unwrap();
    let listener = create_ep(&ai[0]).unwrap();
    listener.set_sync_timeout(Some(WAIT));
    listener.listen(0).unwrap();

    let server = thread::spawn(move || -> io::Result<Vec<u8>> {
        let id = listener.get_request()?;
        assert!(id.is_sync());
        id.set_sync_timeout(Some(WAIT));
        let req = id.take_event().expect("the CONNECT_REQUEST");
        assert_eq!(req.kind(), CmEventKind::CONNECT_REQUEST);
        id.accept(&ConnParam {
            private_data: b"server says hi".to_vec(),
            qp_num: 0x99,
            ..ConnParam::default()
        })?;
        assert_eq!(id.take_event().unwrap().kind(), CmEventKind::ESTABLISHED);
        let ev = id.get_event(Some(WAIT))?.expect("DISCONNECTED");
        assert_eq!(ev.kind(), CmEventKind::DISCONNECTED);
        id.disconnect()?;
        Ok(req.private_data().to_vec())
    });

    let chints = AddrHints {
        src: Some(addr_b(0)),
        ..AddrHints::default()
    };
    let ai = getaddrinfo(Some(&node), Some(&port.to_string()), &chints).unwrap();
    let client = create_ep(&ai[0]).unwrap();
    client.set_sync_timeout(Some(WAIT));
    let mut hook_ran = false;
    client
        .connect_with(
            &ConnParam {
                private_data: b"client says hi".to_vec(),
                qp_num: 0x42,
                ..ConnParam::default()
            },
            |id, ev| {
                // The place for QP → RTR → RTS.
                assert_eq!(ev.kind(), CmEventKind::CONNECT_RESPONSE);
                assert_eq!(&ev.private_data()[..14], b"server says hi");
                assert_eq!(id.init_qp_attr(QpState::RTR)?.dest_qp_num, Some(0x99));
                hook_ran = true;
                Ok(())
            },
        )
        .unwrap();
    assert!(hook_ran);
    client.disconnect().unwrap();
    let ev = client.get_event(Some(WAIT)).unwrap().expect("DISCONNECTED");
    assert_eq!(ev.kind(), CmEventKind::DISCONNECTED);
    let got = server.join().unwrap().unwrap();
    assert_eq!(&got[..14], b"client says hi");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn reject_with_private_data() {
    let _g = setup();
    let port = 7430;
    let lch = EventChannel::new().unwrap();
    let listener = CmId::create(Some(&lch), PortSpace::TCP).unwrap();
    listener.bind(addr_a(port)).unwrap();
    listener.listen(1).unwrap();

    let client = create_ep(&AddrInfo {
        passive: false,
        port_space: PortSpace::TCP,
        qp_type: QpType::RC,
        src: Some(addr_b(0)),
        dst: Some(addr_a(port)),
    })
    .unwrap();
    client.set_sync_timeout(Some(WAIT));
    let t = thread::spawn(move || {
        let r = client.connect(&ConnParam::with_qp_num(1));
        (r, client.take_event())
    });
    let mut req = expect(&lch, CmEventKind::CONNECT_REQUEST, &listener);
    let server = req.take_id().unwrap();
    let e = server.reject(&[7u8; 149]).unwrap_err();
    assert!(e.to_string().contains("limit of 148"), "{e}");
    server.reject(b"no thanks").unwrap();
    let (r, ev) = t.join().unwrap();
    let e = r.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    assert!(e.to_string().contains("reject reason 28"), "{e}");
    let ev = ev.expect("the REJECTED event is kept");
    assert_eq!(ev.kind(), CmEventKind::REJECTED);
    assert_eq!(ev.reject_reason(), Some(RejectReason::CONSUMER_DEFINED));
    assert_eq!(ev.status(), 28);
    assert_eq!(ev.private_data().len(), 148);
    assert_eq!(&ev.private_data()[..9], b"no thanks");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn connect_to_a_port_nobody_listens_on() {
    let _g = setup();
    let ch = EventChannel::new().unwrap();
    let id = resolved_client(&ch, PortSpace::TCP, 7439);
    id.connect(&ConnParam::with_qp_num(5)).unwrap();
    let t = Instant::now();
    let ev = ch
        .get_event_timeout(Duration::from_secs(90))
        .unwrap()
        .expect("an error event, not a hang");
    eprintln!("connect to an unused port: {ev} after {:?}", t.elapsed());
    assert!(ev.is_for(&id));
    match ev.kind() {
        CmEventKind::REJECTED => {
            assert_eq!(
                ev.reject_reason(),
                Some(RejectReason::INVALID_SERVICE_ID),
                "{ev}"
            )
        }
        CmEventKind::UNREACHABLE | CmEventKind::CONNECT_ERROR => assert!(ev.status() != 0),
        k => panic!("unexpected {k}: {ev}"),
    }

    // The synchronous form reports it as an error (bounded by the id's timeout).
    let sync = create_ep(&AddrInfo {
        passive: false,
        port_space: PortSpace::TCP,
        qp_type: QpType::RC,
        src: Some(addr_b(0)),
        dst: Some(addr_a(7439)),
    })
    .unwrap();
    sync.set_sync_timeout(Some(Duration::from_secs(90)));
    let e = sync.connect(&ConnParam::default()).unwrap_err();
    eprintln!("synchronous connect to an unused port: {e}");
    assert!(!e.to_string().contains("no rdma_cm event"), "{e}");
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::ConnectionRefused
                | io::ErrorKind::TimedOut
                | io::ErrorKind::HostUnreachable
        ),
        "{e}"
    );
}

/// True when A's netdev resolves neighbours without ARP (IFF_NOARP, e.g. the dummy netdev of
/// the one-node topology): any address in its subnet then "resolves".
fn netdev_a_is_noarp() -> bool {
    let dev = std::env::var("RVERBS_NETDEV_A").unwrap_or_else(|_| "d0".into());
    let flags = std::fs::read_to_string(format!("/sys/class/net/{dev}/flags")).unwrap();
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
    flags & 0x80 != 0
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn unroutable_destination_fails_at_once() {
    let _g = setup();
    // TEST-NET-1: no route in the guest. The kernel fails the command itself.
    let dst: SocketAddr = "192.0.2.1:1".parse().unwrap();
    let id = CmId::create(None, PortSpace::TCP).unwrap();
    let e = id
        .resolve_addr(None, dst, Duration::from_millis(500))
        .unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NetworkUnreachable, "{e}");
    assert!(e.to_string().contains("192.0.2.1:1"), "{e}");
    assert!(id.take_event().is_none(), "no event: the command failed");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn address_nobody_has_times_out_or_is_unreachable() {
    let _g = setup();
    if !netdev_a_is_noarp() {
        // ARP is asked and never answered: ADDR_ERROR after the resolution timeout.
        let id = CmId::create(None, PortSpace::TCP).unwrap();
        id.set_sync_timeout(Some(WAIT));
        let t = Instant::now();
        let e = id
            .resolve_addr(Some(addr_b(0)), nobody(), Duration::from_millis(500))
            .unwrap_err();
        let took = t.elapsed();
        eprintln!("resolve {}: {e} after {took:?}", nobody());
        assert!(took < WAIT, "{took:?}");
        assert!(e.to_string().contains("ADDR_ERROR"), "{e}");
        assert!(e.to_string().contains(&nobody().to_string()), "{e}");
        let ev = id.take_event().unwrap();
        assert_eq!(ev.kind(), CmEventKind::ADDR_ERROR);
        assert!(ev.status() < 0, "{ev}");
        return;
    }
    // A NOARP netdev "resolves" any neighbour, so address and route resolution succeed and the
    // connection attempt is what fails: the CM retries its REQ and reports UNREACHABLE with
    // -ETIMEDOUT (about 100 s on the 6.1 kernel).
    let ch = EventChannel::new().unwrap();
    let id = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
    id.resolve_addr(Some(addr_b(0)), nobody(), Duration::from_millis(500))
        .unwrap();
    expect(&ch, CmEventKind::ADDR_RESOLVED, &id);
    id.resolve_route(Duration::from_millis(500)).unwrap();
    expect(&ch, CmEventKind::ROUTE_RESOLVED, &id);

    // First the synchronous form with our own bound: TimedOut, and dropping the id cancels.
    let sync = create_ep(&AddrInfo {
        passive: false,
        port_space: PortSpace::TCP,
        qp_type: QpType::RC,
        src: Some(addr_b(0)),
        dst: Some(nobody()),
    })
    .unwrap();
    sync.set_sync_timeout(Some(Duration::from_secs(2)));
    let t = Instant::now();
    let e = sync.connect(&ConnParam::default()).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("no rdma_cm event"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10));
    drop(sync);

    // The kernel's own verdict takes 80-100 s of CM retries. `cargo xtask test` runs this test
    // in a process of its own in the background while the stage's other binaries run
    // (xtask/src/stageplan.rs), so the wait costs the stage little.
    id.connect(&ConnParam::default()).unwrap();
    let t = Instant::now();
    let ev = ch
        .get_event_timeout(Duration::from_secs(240))
        .unwrap()
        .expect("UNREACHABLE, not a hang");
    eprintln!("connect to {}: {ev} after {:?}", nobody(), t.elapsed());
    assert!(ev.is_for(&id));
    assert_eq!(ev.kind(), CmEventKind::UNREACHABLE, "{ev}");
    assert_eq!(ev.errno(), Some(rustix::io::Errno::TIMEDOUT), "{ev}");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn wrong_state_operations() {
    let _g = setup();
    let ch = EventChannel::new().unwrap();
    let id = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
    let check = |r: io::Result<()>, needle: &str| {
        let e = r.unwrap_err();
        assert_eq!(Error::errno_of(&e), Some(rustix::io::Errno::INVAL), "{e}");
        let s = e.to_string();
        assert!(s.contains(needle), "{s}");
        assert!(s.contains(&format!("rdma_cm id {}", id.handle())), "{s}");
        assert!(s.contains("created"), "names the id's progress: {s}");
    };
    check(
        id.resolve_route(Duration::from_millis(100)),
        "the address must be resolved first",
    );
    check(id.connect(&ConnParam::default()), "route must be resolved");
    check(
        id.accept(&ConnParam::default()),
        "pending connection request",
    );
    check(id.reject(b""), "pending connection request");
    check(id.disconnect(), "needs a connection");
    check(id.establish(), "CONNECT_RESPONSE");
    check(id.init_qp_attr(QpState::INIT).map(|_| ()), "needs a device");
    let e = id.get_request().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("explicit EventChannel"), "{e}");
    let e = id.get_event(None).unwrap_err();
    assert!(e.to_string().contains("explicit EventChannel"), "{e}");
    // Unknown option level: the kernel says ENOSYS.
    let e = id.set_option_raw(9, 0, &[0]).unwrap_err();
    assert_eq!(Error::errno_of(&e), Some(rustix::io::Errno::NOSYS), "{e}");
    assert!(e.to_string().contains("level 9"), "{e}");
    // Valid options.
    id.set_tos(32).unwrap();
    id.set_reuseaddr(true).unwrap();
    id.set_ack_timeout(14).unwrap();
    assert!(
        ch.try_get_event().unwrap().is_none(),
        "failed commands queue no events"
    );
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn migrate_moves_the_id_and_its_events() {
    let _g = setup();
    let a = EventChannel::new().unwrap();
    let b = EventChannel::new().unwrap();
    let mut id = CmId::create(Some(&a), PortSpace::TCP).unwrap();
    id.resolve_addr(None, addr_a(7440), Duration::from_millis(2000))
        .unwrap();
    // Let the event be queued on `a`, then move the id (and the queued event) to `b`.
    let t = Instant::now();
    while !readable(&a) {
        assert!(t.elapsed() < WAIT, "no event on a");
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(id.migrate(Some(&b)).unwrap(), 0);
    assert!(
        a.try_get_event().unwrap().is_none(),
        "the event moved away from a"
    );
    expect(&b, CmEventKind::ADDR_RESOLVED, &id);
    // To a private channel: synchronous from now on.
    assert_eq!(id.migrate(None).unwrap(), 1);
    assert!(id.is_sync());
    id.set_sync_timeout(Some(WAIT));
    id.resolve_route(Duration::from_millis(2000)).unwrap();
    assert!(b.try_get_event().unwrap().is_none());
}

fn readable(ch: &EventChannel) -> bool {
    let mut fds = [rustix::event::PollFd::new(ch, rustix::event::PollFlags::IN)];
    rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())).unwrap() == 1
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ud_service_id_resolution() {
    let _g = setup();
    let port = 7450;
    let lch = EventChannel::new().unwrap();
    let cch = EventChannel::new().unwrap();
    let listener = CmId::create(Some(&lch), PortSpace::UDP).unwrap();
    assert_eq!(listener.qp_type(), QpType::UD);
    listener.bind(addr_a(port)).unwrap();
    listener.listen(1).unwrap();
    let client = resolved_client(&cch, PortSpace::UDP, port);
    let e = client
        .connect(&ConnParam {
            private_data: vec![1; 181],
            ..ConnParam::default()
        })
        .unwrap_err();
    assert!(e.to_string().contains("limit of 180"), "{e}");
    client
        .connect(&ConnParam {
            private_data: b"sidr".to_vec(),
            qp_num: 0x31,
            ..ConnParam::default()
        })
        .unwrap();
    let mut req = expect(&lch, CmEventKind::CONNECT_REQUEST, &listener);
    assert!(req.conn().is_none(), "a UD id's events carry the ud member");
    let ud = req.ud().unwrap();
    assert_eq!(&req.private_data()[..4], b"sidr");
    eprintln!(
        "SIDR request: {ud:?}, {} bytes private data",
        req.private_data().len()
    );
    let server = req.take_id().unwrap();
    assert_eq!(server.qp_type(), QpType::UD);
    server
        .accept(&ConnParam {
            private_data: b"sidr-rep".to_vec(),
            qp_num: 0x77,
            ..ConnParam::default()
        })
        .unwrap();
    let est = expect(&cch, CmEventKind::ESTABLISHED, &client);
    let ud = est.ud().expect("ud parameters");
    assert_eq!(ud.qp_num, 0x77);
    assert_eq!(
        ud.qkey, 0x0123_4567,
        "RDMA_UDP_QKEY for IP-addressed UD ids"
    );
    assert_eq!(ud.ah_attr.is_global, 1, "RoCE address handles are global");
    assert_eq!(&est.private_data()[..8], b"sidr-rep");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn no_fd_or_id_leaks() {
    let _g = setup();
    // Warm up lazily opened things (none expected, but be fair to the count).
    drop(EventChannel::new().unwrap());
    let before = open_fds();
    for i in 0..20u16 {
        let ch = EventChannel::new().unwrap();
        let a = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
        let s = CmId::create(None, PortSpace::UDP).unwrap();
        s.bind(addr_a(0)).unwrap();
        a.resolve_addr(None, addr_a(7460 + i), Duration::from_millis(2000))
            .unwrap();
        // Dropped with its ADDR_RESOLVED event possibly still queued: the kernel discards it.
        let fail = CmId::create(None, PortSpace::TCP).unwrap();
        assert!(fail.bind(nobody()).is_err());
        drop((a, s, fail, ch));
    }
    assert_eq!(open_fds(), before, "fds leaked");
    // A dropped CONNECT_REQUEST event destroys its id (the client sees a reject or an error).
    let lch = EventChannel::new().unwrap();
    let listener = CmId::create(Some(&lch), PortSpace::TCP).unwrap();
    listener.bind(addr_a(7480)).unwrap();
    listener.listen(1).unwrap();
    let cch = EventChannel::new().unwrap();
    let client = resolved_client(&cch, PortSpace::TCP, 7480);
    client.connect(&ConnParam::default()).unwrap();
    drop(expect(&lch, CmEventKind::CONNECT_REQUEST, &listener));
    let ev = cch
        .get_event_timeout(Duration::from_secs(90))
        .unwrap()
        .expect("an answer");
    eprintln!("client of a dropped request: {ev}");
    assert!(
        matches!(
            ev.kind(),
            CmEventKind::REJECTED | CmEventKind::UNREACHABLE | CmEventKind::CONNECT_ERROR
        ),
        "{ev}"
    );
    drop((client, cch, listener, lch));
    assert_eq!(open_fds(), before, "fds leaked");
}
