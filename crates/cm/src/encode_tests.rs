//! Byte-level tests of every command a `CmId` sends and of event decoding, without a device:
//! the "device" is one end of a Unix socket pair, and the test reads the exact bytes written.
//! (No kernel answers, so response buffers stay zeroed: the created id's handle is 0, which
//! is why most tests build ids with a chosen handle through `CmId::from_request`.)

use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use zerocopy::{FromBytes, FromZeros, IntoBytes};

use crate::abi::{self, cmd};
use crate::channel::{Channel, EventChannel};
use crate::conn_param::ConnParam;
use crate::event::CmEvent;
use crate::id::{check_event, CmId};
use crate::types::{CmEventKind, PortSpace, QpState, QpType, RejectReason};

struct Fake {
    chan: Arc<Channel>,
    peer: UnixStream,
}

impl Fake {
    fn new() -> Self {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        Self {
            chan: Channel::for_test(OwnedFd::from(a)),
            peer: b,
        }
    }

    fn channel(&self) -> EventChannel {
        EventChannel {
            chan: self.chan.clone(),
        }
    }

    /// An asynchronous id with handle `h` on this channel.
    fn id(&self, h: u32, ps: PortSpace, qp: QpType) -> CmId {
        CmId::from_request(self.chan.clone(), h, ps, qp, (0, 0))
    }

    /// Every command written since the last call: (cmd, in, out, payload).
    fn commands(&mut self) -> Vec<(u32, u16, u16, Vec<u8>)> {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.peer.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        let mut out = Vec::new();
        let mut rest = &all[..];
        while !rest.is_empty() {
            let (hdr, tail) = abi::rdma_ucm_cmd_hdr::read_from_prefix(rest).unwrap();
            let n = usize::from(hdr.r#in);
            out.push((hdr.cmd, hdr.r#in, hdr.out, tail[..n].to_vec()));
            rest = &tail[n..];
        }
        out
    }

    /// The single command written since the last call.
    fn one(&mut self) -> (u32, u16, u16, Vec<u8>) {
        let mut v = self.commands();
        assert_eq!(v.len(), 1, "{v:?}");
        v.remove(0)
    }
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_ne_bytes(b[o..o + 8].try_into().unwrap())
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_ne_bytes(b[o..o + 2].try_into().unwrap())
}

#[test]
fn create_and_destroy() {
    let mut f = Fake::new();
    let ch = f.channel();
    let id = CmId::create(Some(&ch), PortSpace::UDP).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::CREATE_ID, 24, 4));
    assert_eq!(u64_at(&p, 0), id.uid());
    assert_ne!(u64_at(&p, 8), 0, "response pointer");
    assert_eq!(u16_at(&p, 16), 0x0111);
    assert_eq!(p[18], 4, "qp_type UD");
    assert_eq!(&p[19..24], &[0; 5]);
    assert!(!id.is_sync());
    drop(id);
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::DESTROY_ID, 16, 4));
    assert_ne!(u64_at(&p, 0), 0);
    assert_eq!(u32_at(&p, 8), 0, "handle from the (silent) fake kernel");
    assert_eq!(u32_at(&p, 12), 0);
}

#[test]
fn create_checks_port_space_against_qp_type() {
    let f = Fake::new();
    let ch = f.channel();
    let e = CmId::create_with_qp_type(Some(&ch), PortSpace::TCP, QpType::UD).unwrap_err();
    assert!(e.to_string().contains("implies QP type RC"), "{e}");
    let id = CmId::create_with_qp_type(Some(&ch), PortSpace::IB, QpType::UC).unwrap();
    assert_eq!(id.qp_type(), QpType::UC);
}

#[test]
fn bind_and_resolve() {
    let mut f = Fake::new();
    let id = f.id(7, PortSpace::TCP, QpType::RC);
    id.bind("10.10.0.1:7471".parse().unwrap()).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::BIND, 136, 0));
    assert_eq!(u32_at(&p, 0), 7);
    assert_eq!(u16_at(&p, 4), 16, "addr_size of sockaddr_in");
    assert_eq!(u16_at(&p, 6), 0);
    assert_eq!(u16_at(&p, 8), abi::AF_INET);
    assert_eq!(&p[10..16], &[0x1d, 0x2f, 10, 10, 0, 1]);

    id.bind("[fe80::2]:1".parse().unwrap()).unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!(u16_at(&p, 4), 28);
    assert_eq!(u16_at(&p, 8), abi::AF_INET6);

    let src: SocketAddr = "10.10.0.1:0".parse().unwrap();
    let dst: SocketAddr = "10.10.0.2:7471".parse().unwrap();
    id.resolve_addr(Some(src), dst, Duration::from_millis(2000))
        .unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::RESOLVE_ADDR, 272, 0));
    assert_eq!((u32_at(&p, 0), u32_at(&p, 4)), (7, 2000));
    assert_eq!((u16_at(&p, 8), u16_at(&p, 10), u32_at(&p, 12)), (16, 16, 0));
    assert_eq!(&p[16 + 4..16 + 8], &[10, 10, 0, 1]);
    assert_eq!(&p[144 + 2..144 + 8], &[0x1d, 0x2f, 10, 10, 0, 2]);

    id.resolve_addr(None, dst, Duration::from_millis(5))
        .unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!((u32_at(&p, 4), u16_at(&p, 8)), (5, 0), "no source: size 0");
    assert!(p[16..144].iter().all(|&b| b == 0));

    let e = id
        .resolve_addr(None, dst, Duration::from_secs(5_000_000))
        .unwrap_err();
    assert!(
        e.to_string().contains("exceeds u32::MAX milliseconds"),
        "{e}"
    );

    id.resolve_route(Duration::from_millis(1500)).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::RESOLVE_ROUTE, 8, 0));
    assert_eq!((u32_at(&p, 0), u32_at(&p, 4)), (7, 1500));
}

#[test]
fn listen_connect_establish_disconnect() {
    let mut f = Fake::new();
    let id = f.id(3, PortSpace::TCP, QpType::RC);
    id.listen(16).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!(
        (c, i, o, u32_at(&p, 0), u32_at(&p, 4)),
        (cmd::LISTEN, 8, 0, 3, 16)
    );

    let param = ConnParam {
        private_data: vec![0xab; 56],
        qp_num: 0x11,
        ..ConnParam::default()
    };
    id.connect(&param).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::CONNECT, 288, 0));
    assert_eq!(u32_at(&p, 0), 0x11);
    assert_eq!(&p[8..64], &[0xab; 56]);
    // len, srq, responder_resources, initiator_depth, flow_control, retry, rnr_retry, valid:
    // without device limits both depths are FALLBACK_RD_ATOMIC.
    assert_eq!(&p[264..272], &[56, 0, 1, 1, 0, 7, 7, 1]);
    assert_eq!((u32_at(&p, 272), u32_at(&p, 276)), (3, 0));
    assert_eq!(u64_at(&p, 280), 0, "ece");

    id.set_rd_atomic_max(16, 8);
    id.connect(&ConnParam::default()).unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!((p[266], p[267]), (8, 16), "device maxima when known");

    let e = id
        .connect(&ConnParam {
            private_data: vec![0; 57],
            ..ConnParam::default()
        })
        .unwrap_err();
    assert!(
        e.to_string().contains("57 bytes") && e.to_string().contains("56"),
        "{e}"
    );
    assert!(f.commands().is_empty(), "nothing sent for invalid input");

    id.establish().unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::ACCEPT, 296, 0));
    assert_eq!(u64_at(&p, 0), 0, "no uid");
    assert_eq!(p[8 + 271], 0, "conn_param.valid = 0: RTU");
    assert_eq!(u32_at(&p, 280), 3);

    id.disconnect().unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o, u32_at(&p, 0)), (cmd::DISCONNECT, 4, 0, 3));
}

#[test]
fn accept_uses_request_depths_and_sets_uid() {
    let mut f = Fake::new();
    // As from a CONNECT_REQUEST that offered initiator_depth 4, responder_resources 2.
    let id = CmId::from_request(f.chan.clone(), 9, PortSpace::TCP, QpType::RC, (4, 2));
    id.accept(&ConnParam {
        private_data: b"welcome".to_vec(),
        qp_num: 0x22,
        ..ConnParam::default()
    })
    .unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::ACCEPT, 296, 0));
    assert_eq!(u64_at(&p, 0), id.uid());
    let cp = &p[8..280];
    assert_eq!(u32_at(cp, 0), 0x22);
    assert_eq!(&cp[8..15], b"welcome");
    assert_eq!(&cp[264..272], &[7, 0, 2, 4, 0, 7, 7, 1]);
    assert_eq!(u32_at(&p, 280), 9);

    id.set_rd_atomic_max(3, 1);
    id.accept(&ConnParam::default()).unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!((p[8 + 266], p[8 + 267]), (1, 3), "min(request, device)");

    id.accept(&ConnParam {
        responder_resources: Some(9),
        initiator_depth: Some(0),
        ..ConnParam::default()
    })
    .unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!((p[8 + 266], p[8 + 267]), (9, 0), "caller's values win");
}

#[test]
fn reject_bytes_and_limit() {
    let mut f = Fake::new();
    let id = f.id(4, PortSpace::TCP, QpType::RC);
    id.reject(b"go away").unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::REJECT, 264, 0));
    assert_eq!((u32_at(&p, 0), p[4], p[5]), (4, 7, 0));
    assert_eq!(&p[8..15], b"go away");
    let e = id.reject(&[1; 149]).unwrap_err();
    assert!(
        e.to_string().contains("149 bytes") && e.to_string().contains("148"),
        "{e}"
    );
    let ud = f.id(5, PortSpace::UDP, QpType::UD);
    let e = ud.reject(&[1; 137]).unwrap_err();
    assert!(e.to_string().contains("limit of 136"), "{e}");
}

#[test]
fn init_qp_attr_query_options_notify() {
    let mut f = Fake::new();
    let id = f.id(6, PortSpace::TCP, QpType::RC);
    let a = id.init_qp_attr(QpState::RTR).unwrap();
    assert_eq!(a.mask().bits(), 0, "silent kernel: zeroed response");
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::INIT_QP_ATTR, 16, 144));
    assert_ne!(u64_at(&p, 0), 0);
    assert_eq!((u32_at(&p, 8), u32_at(&p, 12)), (6, 2));

    id.query_addr().unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!(
        (c, i, o, u32_at(&p, 8), u32_at(&p, 12)),
        (cmd::QUERY, 16, 280, 6, 0)
    );
    id.query_path().unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o, u32_at(&p, 12)), (cmd::QUERY, 16, 8 + 6 * 72, 1));
    id.query_gid().unwrap();
    let (_, _, o, p) = f.one();
    assert_eq!((o, u32_at(&p, 12)), (280, 2));
    id.query_route().unwrap();
    let (c, i, o, _) = f.one();
    assert_eq!((c, i, o), (cmd::QUERY_ROUTE, 16, 208));

    id.set_tos(0x20).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::SET_OPTION, 24, 0));
    assert_ne!(u64_at(&p, 0), 0, "optval pointer");
    assert_eq!(
        (
            u32_at(&p, 8),
            u32_at(&p, 12),
            u32_at(&p, 16),
            u32_at(&p, 20)
        ),
        (6, 0, 0, 1)
    );
    id.set_reuseaddr(true).unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!((u32_at(&p, 16), u32_at(&p, 20)), (1, 4));
    id.set_afonly(false).unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!((u32_at(&p, 16), u32_at(&p, 20)), (2, 4));
    id.set_ack_timeout(14).unwrap();
    let (_, _, _, p) = f.one();
    assert_eq!((u32_at(&p, 16), u32_at(&p, 20)), (3, 1));

    id.notify(4).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!(
        (c, i, o, u32_at(&p, 0), u32_at(&p, 4)),
        (cmd::NOTIFY, 8, 0, 6, 4)
    );
}

#[test]
fn migrate_writes_to_the_destination_with_the_source_fd() {
    let mut from = Fake::new();
    let mut to = Fake::new();
    let mut id = from.id(8, PortSpace::TCP, QpType::RC);
    let old_fd = from.chan.raw_fd();
    let dest = to.channel();
    id.migrate(Some(&dest)).unwrap();
    assert!(from.commands().is_empty());
    let (c, i, o, p) = to.one();
    assert_eq!((c, i, o), (cmd::MIGRATE_ID, 16, 4));
    assert_ne!(u64_at(&p, 0), 0);
    assert_eq!((u32_at(&p, 8), u32_at(&p, 12)), (8, old_fd as u32));
    assert_eq!(id.channel_fd().as_raw_fd(), to.chan.raw_fd());
    drop(id);
    assert_eq!(to.one().0, cmd::DESTROY_ID, "commands follow the id");
}

#[test]
fn get_event_command() {
    let mut f = Fake::new();
    // The fake accepts the write, so a (zeroed) event comes back: ADDR_RESOLVED, id 0.
    let ev = f.channel().try_get_event().unwrap().unwrap();
    assert_eq!(ev.kind(), CmEventKind::ADDR_RESOLVED);
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::GET_EVENT, 8, 336));
    assert_ne!(u64_at(&p, 0), 0);
}

// --- events ----------------------------------------------------------------------------------

fn event(
    uid: u64,
    id: u32,
    kind: CmEventKind,
    status: i32,
    param: &[u8],
) -> abi::rdma_ucm_event_resp {
    let mut r = abi::rdma_ucm_event_resp::new_zeroed();
    r.uid = uid;
    r.id = id;
    r.event = kind.0;
    r.status = status as u32;
    r.param[..param.len()].copy_from_slice(param);
    r
}

fn conn(pd: &[u8], len: u8, init: u8, resp: u8) -> abi::rdma_ucm_conn_param {
    let mut c = abi::rdma_ucm_conn_param::new_zeroed();
    c.qp_num = 0x1234;
    c.private_data[..pd.len()].copy_from_slice(pd);
    c.private_data_len = len;
    c.initiator_depth = init;
    c.responder_resources = resp;
    c.retry_count = 7;
    c.rnr_retry_count = 6;
    c.srq = 1;
    c
}

#[test]
fn event_resp_bytes_decode() {
    // The raw layout: uid @0, id @8, event @12, status @16, param @20, ece @328.
    let f = Fake::new();
    let listener = f.id(1, PortSpace::TCP, QpType::RC);
    let mut bytes = [0u8; 336];
    bytes[0..8].copy_from_slice(&listener.uid().to_ne_bytes());
    bytes[8..12].copy_from_slice(&5u32.to_ne_bytes());
    bytes[12..16].copy_from_slice(&9u32.to_ne_bytes());
    bytes[16..20].copy_from_slice(&0u32.to_ne_bytes());
    bytes[20..24].copy_from_slice(&0x77u32.to_ne_bytes());
    bytes[20 + 8..20 + 10].copy_from_slice(b"hi");
    bytes[20 + 264] = 196;
    bytes[20 + 265] = 1; // srq
    bytes[20 + 266] = 2; // responder_resources
    bytes[20 + 267] = 3; // initiator_depth
    bytes[328..332].copy_from_slice(&0x15b3u32.to_ne_bytes());
    bytes[332..336].copy_from_slice(&0x5u32.to_ne_bytes());
    let raw = abi::rdma_ucm_event_resp::read_from_bytes(&bytes[..]).unwrap();
    let ev = CmEvent::decode(raw, &f.chan);
    assert_eq!(ev.kind(), CmEventKind::ESTABLISHED);
    assert!(ev.is_for(&listener));
    assert_eq!(ev.id_handle(), 5);
    let c = ev.conn().unwrap();
    assert_eq!(
        (c.qp_num, c.srq, c.responder_resources, c.initiator_depth),
        (0x77, true, 2, 3)
    );
    assert_eq!(ev.private_data().len(), 196);
    assert_eq!(&ev.private_data()[..2], b"hi");
    assert!(ev.ud().is_none());
    assert_eq!(ev.ece(), (0x15b3, 5));
    assert!(ev.new_id().is_none());
    check_event("connect", &ev, &[CmEventKind::ESTABLISHED]).unwrap();
}

#[test]
fn connect_request_carries_the_new_id() {
    let mut f = Fake::new();
    let listener = f.id(1, PortSpace::TCP, QpType::RC);
    let c = conn(b"client hello", 56, 4, 2);
    let raw = event(
        listener.uid(),
        42,
        CmEventKind::CONNECT_REQUEST,
        0,
        c.as_bytes(),
    );
    let mut ev = CmEvent::decode(raw, &f.chan);
    assert!(
        ev.is_for(&listener),
        "CONNECT_REQUEST is reported on the listener's uid"
    );
    assert_eq!(ev.id_handle(), 42);
    assert_eq!(ev.private_data().len(), 56);
    assert_eq!(&ev.private_data()[..12], b"client hello");
    let c = ev.conn().unwrap();
    assert_eq!(
        (
            c.initiator_depth,
            c.responder_resources,
            c.retry_count,
            c.rnr_retry_count
        ),
        (4, 2, 7, 6)
    );
    let new = ev.take_id().unwrap();
    assert!(ev.take_id().is_none());
    assert_eq!(new.handle(), 42);
    assert_ne!(new.uid(), listener.uid());
    assert_eq!(
        (new.port_space(), new.qp_type()),
        (PortSpace::TCP, QpType::RC)
    );
    assert!(format!("{ev:?}").contains("CONNECT_REQUEST"));
    // Accept defaults to the request's depths.
    new.accept(&ConnParam::default()).unwrap();
    let (c, _, _, p) = f.one();
    assert_eq!(c, cmd::ACCEPT);
    assert_eq!((p[8 + 266], p[8 + 267]), (2, 4));
    // Dropping an event that still owns its new id destroys that id.
    let raw = event(listener.uid(), 43, CmEventKind::CONNECT_REQUEST, 0, &[]);
    drop(CmEvent::decode(raw, &f.chan));
    let (c, _, _, p) = f.one();
    assert_eq!((c, u32_at(&p, 8)), (cmd::DESTROY_ID, 43));
}

#[test]
fn rejected_event_and_its_error() {
    let f = Fake::new();
    let id = f.id(2, PortSpace::TCP, QpType::RC);
    let c = conn(b"nope", 148, 0, 0);
    let raw = event(id.uid(), 2, CmEventKind::REJECTED, 28, c.as_bytes());
    let ev = CmEvent::decode(raw, &f.chan);
    assert_eq!(ev.reject_reason(), Some(RejectReason::CONSUMER_DEFINED));
    assert_eq!(ev.errno(), None);
    assert_eq!(ev.private_data().len(), 148);
    assert_eq!(&ev.private_data()[..4], b"nope");
    assert!(
        ev.to_string().contains("reject reason 28 CONSUMER_DEFINED"),
        "{ev}"
    );
    let e = check_event("connect", &ev, &[CmEventKind::CONNECT_RESPONSE]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    assert!(e.to_string().contains("reject reason 28"), "{e}");

    let raw = event(id.uid(), 2, CmEventKind::REJECTED, 8, &[]);
    let e = check_event(
        "connect",
        &CmEvent::decode(raw, &f.chan),
        &[CmEventKind::ESTABLISHED],
    )
    .unwrap_err();
    assert!(e.to_string().contains("nobody listens"), "{e}");
}

#[test]
fn statuses_that_are_no_errno_are_protocol_errors() {
    // Found by the fuzz target cm_events: rustix asserts an errno is 1..=4095, and -i32::MIN
    // overflows.
    let f = Fake::new();
    let id = f.id(2, PortSpace::TCP, QpType::RC);
    for status in [i32::MIN, -4096, 4096, i32::MAX] {
        let raw = event(id.uid(), 2, CmEventKind::ADDR_ERROR, status, &[]);
        let ev = CmEvent::decode(raw, &f.chan);
        assert_eq!(ev.errno(), None);
        let e = check_event("resolve_addr", &ev, &[CmEventKind::ADDR_RESOLVED]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        assert!(
            e.to_string()
                .contains(&format!("ADDR_ERROR event (status {status}) while waiting")),
            "{e}"
        );
        assert!(ev.to_string().starts_with("ADDR_ERROR"), "{ev}");
    }
}

#[test]
fn error_statuses() {
    let f = Fake::new();
    let id = f.id(2, PortSpace::TCP, QpType::RC);
    let raw = event(id.uid(), 2, CmEventKind::ADDR_ERROR, -110, &[]);
    let ev = CmEvent::decode(raw, &f.chan);
    assert_eq!(ev.status(), -110);
    assert_eq!(ev.errno(), Some(rustix::io::Errno::TIMEDOUT));
    let e = check_event("resolve_addr", &ev, &[CmEventKind::ADDR_RESOLVED]).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert!(
        e.to_string()
            .contains("ADDR_ERROR event instead of ADDR_RESOLVED"),
        "{e}"
    );

    // An unexpected event with status 0 is a protocol error naming both kinds.
    let raw = event(id.uid(), 2, CmEventKind::DISCONNECTED, 0, &[]);
    let e = check_event(
        "accept",
        &CmEvent::decode(raw, &f.chan),
        &[CmEventKind::ESTABLISHED],
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("DISCONNECTED event (status 0) while waiting for ESTABLISHED"),
        "{e}"
    );

    // Unknown numbers survive as such.
    let raw = event(id.uid(), 2, CmEventKind(99), 0, &[]);
    let ev = CmEvent::decode(raw, &f.chan);
    assert_eq!(ev.kind().name(), None);
    assert!(ev.to_string().starts_with("unknown CmEventKind 99"), "{ev}");
}

#[test]
fn ud_events_decode_the_ud_member() {
    let f = Fake::new();
    let id = f.id(3, PortSpace::UDP, QpType::UD);
    let mut u = abi::rdma_ucm_ud_param::new_zeroed();
    u.qp_num = 0x42;
    u.qkey = 0x0111_1111;
    u.ah_attr.dlid = 0x10;
    u.ah_attr.is_global = 1;
    u.ah_attr.grh.dgid[15] = 2;
    u.ah_attr.grh.hop_limit = 64;
    u.ah_attr.port_num = 1;
    u.private_data[..2].copy_from_slice(b"ok");
    u.private_data_len = 2;
    let raw = event(id.uid(), 3, CmEventKind::ESTABLISHED, 0, u.as_bytes());
    let ev = CmEvent::decode(raw, &f.chan);
    assert!(ev.conn().is_none());
    let d = ev.ud().unwrap();
    assert_eq!((d.qp_num, d.qkey), (0x42, 0x0111_1111));
    assert_eq!(d.ah_attr, u.ah_attr);
    assert_eq!(ev.private_data(), b"ok");
}

#[test]
fn events_of_foreign_uids_decode_as_connected() {
    let f = Fake::new();
    let raw = event(0, 3, CmEventKind::ESTABLISHED, 0, &[]);
    let ev = CmEvent::decode(raw, &f.chan);
    assert!(ev.conn().is_some());
    assert!(ev.private_data().is_empty());
}

/// JOIN_MCAST and LEAVE_MCAST bytes; the refusals send nothing; leaving drops the join's
/// events the dispatcher already read.
#[test]
fn multicast_join_and_leave() {
    use crate::types::McJoinFlags;
    let mut f = Fake::new();
    let id = f.id(7, PortSpace::UDP, QpType::UD);
    let grp: SocketAddr = "239.1.2.3:0".parse().unwrap();
    assert!(id
        .join_multicast(grp, McJoinFlags::SENDONLY_FULL_MEMBER)
        .unwrap()
        .is_none());
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::JOIN_MCAST, 152, 4));
    let req = abi::rdma_ucm_join_mcast::read_from_bytes(&p).unwrap();
    assert_ne!(req.response, 0);
    assert_eq!(req.uid, id.uid(), "the join's events carry the id's uid");
    assert_eq!((req.id, req.addr_size, req.join_flags), (7, 16, 1));
    assert_eq!(u16_at(req.addr.as_bytes(), 0), abi::AF_INET);
    assert_eq!(&req.addr.as_bytes()[4..8], &[239, 1, 2, 3]);
    // No kernel answered: the join's kernel id is 0.
    assert_eq!(id.multicast_handle(grp), Some(0));

    // Refused without a command: the same group again, a unicast address, bad flags, a
    // non-UD id, a leave of a group not joined.
    let e = id
        .join_multicast(grp, McJoinFlags::FULL_MEMBER)
        .unwrap_err();
    assert!(e.to_string().contains("already joined"), "{e}");
    let e = id
        .join_multicast("10.1.2.3:0".parse().unwrap(), McJoinFlags::FULL_MEMBER)
        .unwrap_err();
    assert!(e.to_string().contains("not a multicast address"), "{e}");
    let e = id
        .join_multicast("[ff02::1]:0".parse().unwrap(), McJoinFlags(2))
        .unwrap_err();
    assert!(e.to_string().contains("unknown join flags 2"), "{e}");
    let rc = f.id(8, PortSpace::TCP, QpType::RC);
    let e = rc
        .join_multicast(grp, McJoinFlags::FULL_MEMBER)
        .unwrap_err();
    assert!(e.to_string().contains("needs a UD id"), "{e}");
    assert!(e.to_string().contains("rdma_cm id 8"), "{e}");
    let e = id
        .leave_multicast("239.9.9.9:0".parse().unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("has not joined"), "{e}");
    assert!(f.commands().is_empty());

    // A MULTICAST_JOIN of the join already read by the dispatcher, and another event.
    for (kind, h) in [
        (CmEventKind::MULTICAST_JOIN, 0),
        (CmEventKind::ADDR_CHANGE, 7),
    ] {
        let mut r = abi::rdma_ucm_event_resp::new_zeroed();
        r.uid = id.uid();
        r.id = h;
        r.event = kind.0;
        f.chan.lock().queue_for_test(r);
    }
    id.leave_multicast(grp).unwrap();
    let (c, i, o, p) = f.one();
    assert_eq!((c, i, o), (cmd::LEAVE_MCAST, 16, 4));
    assert_eq!(u32_at(&p, 8), 0, "the join's kernel id");
    assert_eq!(id.multicast_handle(grp), None);
    let left: Vec<u32> = std::iter::from_fn(|| f.chan.lock().take_for(id.uid()))
        .map(|e| e.event)
        .collect();
    assert_eq!(left, vec![CmEventKind::ADDR_CHANGE.0]);
}
