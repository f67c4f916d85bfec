//! The tokio layer on soft-iWARP (siw): `AsyncEndpoint::connect` / `accept` over the rdma_cm on
//! iWARP, where ESTABLISHED (not CONNECT_RESPONSE) answers a connect and the iw_cm moves the QP
//! to RTS itself; then SEND/RECV, RDMA WRITE and RDMA READ awaited with `send_comp` /
//! `recv_comp`. Ignored everywhere but the siw stage (`cargo xtask test --stage siw`, which
//! runs this binary with `--include-ignored`); run elsewhere it fails, never passes silently.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use rverbs_async::{AsyncEndpoint, AsyncEventChannel};
use rverbs_cm::EndpointAttr;
use rverbs_cm::{CmEventKind, ConnParam, PortSpace, QpState};
use rverbs_uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::{SendFlags, WcOpcode, WcStatus};

/// The guest's siw address, after checking that this is a siw guest.
fn siw_addr(port: u16) -> SocketAddr {
    assert_eq!(
        std::env::var("RVERBS_PROVIDER").as_deref(),
        Ok("siw"),
        "these tests need a guest with siw devices (rverbs-vm --provider siw)"
    );
    let a = std::env::var("RVERBS_ADDR_A").unwrap_or_else(|_| "10.10.0.1".into());
    SocketAddr::new(
        IpAddr::V4(a.parse::<Ipv4Addr>().expect("RVERBS_ADDR_A")),
        port,
    )
}

fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        sq_sig_all: true,
    }
}

/// Server: accepts, answers the client's "ping" with its buffer's address and rkey, then
/// waits for the client's "done", sent after its RDMA READ and RDMA WRITE of that buffer.
async fn server(ch: std::sync::Arc<AsyncEventChannel>, port: u16) {
    let lis = ch.create_id(PortSpace::TCP).unwrap();
    lis.bind(siw_addr(port)).unwrap();
    lis.listen(0).unwrap();
    let (id, _req) = lis.get_request().await.unwrap();
    let ep = AsyncEndpoint::create(id, &attr()).unwrap();
    let e = ep.endpoint();
    let buf = Mr::register(
        e.pd(),
        PageBuf::new(4096).unwrap(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    )
    .unwrap();
    buf.write_at(100, b"server!!");
    e.post_recv(1, &[buf.sge(0..64)]).unwrap();
    e.post_recv(2, &[buf.sge(64..96)]).unwrap();
    ep.accept(&ConnParam::default()).await.unwrap();
    // The async accept recorded the RTS the iw_cm set: sends are accepted.
    assert_eq!(e.cached_qp_state(), QpState::RTS);
    let wc = ep.get_recv_comp().await.unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len, wc.opcode),
        (1, WcStatus::SUCCESS, 4, WcOpcode::RECV)
    );
    assert_eq!(&buf.to_vec()[..4], b"ping");
    let mut adv = Vec::new();
    adv.extend_from_slice(&buf.addr().to_le_bytes());
    adv.extend_from_slice(&buf.rkey().to_le_bytes());
    e.post_send_inline(3, &adv, SendFlags::empty()).unwrap();
    let wc = ep.get_send_comp().await.unwrap();
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::SUCCESS));
    let wc = ep.get_recv_comp().await.unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (2, WcStatus::SUCCESS, 4)
    );
    assert_eq!(&buf.to_vec()[64..68], b"done");
    assert_eq!(&buf.to_vec()[200..208], b"written!");
    tokio::time::timeout(Duration::from_secs(10), ep.disconnect())
        .await
        .expect("no DISCONNECTED within 10 s")
        .unwrap();
}

/// Async connect and accept on iWARP, then SEND/RECV both ways, RDMA READ and RDMA WRITE,
/// every completion awaited.
#[test]
#[ignore = "needs a siw device: runs in the siw stage (cargo xtask test --stage siw)"]
fn siw_async_connect_accept_send_recv_read_write() {
    let port = 7731;
    let addr = siw_addr(port);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sch = AsyncEventChannel::new().unwrap();
        let srv = tokio::spawn(server(sch, port));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let ch = AsyncEventChannel::new().unwrap();
        let id = ch.create_id(PortSpace::TCP).unwrap();
        id.resolve_addr(None, addr, Duration::from_secs(2))
            .await
            .unwrap();
        id.resolve_route(Duration::from_secs(2)).await.unwrap();
        let ep = AsyncEndpoint::create(id, &attr()).unwrap();
        let e = ep.endpoint();
        assert_eq!(e.connect_answer(), CmEventKind::ESTABLISHED);
        // The READ sink is registered for remote write, as iWARP requires.
        let mr = Mr::register(
            e.pd(),
            PageBuf::new(4096).unwrap(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        e.post_recv(10, &[mr.sge(1024..1088)]).unwrap();
        tokio::time::timeout(Duration::from_secs(10), ep.connect(&ConnParam::default()))
            .await
            .expect("async connect on iWARP hung")
            .unwrap();
        assert_eq!(e.cached_qp_state(), QpState::RTS);
        mr.write_at(0, b"ping");
        e.post_send(11, &[mr.sge(0..4)], SendFlags::empty())
            .unwrap();
        let wc = ep.get_send_comp().await.unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (11, WcStatus::SUCCESS, WcOpcode::SEND)
        );
        let wc = ep.get_recv_comp().await.unwrap();
        assert_eq!((wc.wr_id, wc.byte_len), (10, 12));
        let adv = mr.read_vec(1024..1036);
        let raddr = u64::from_le_bytes(adv[0..8].try_into().unwrap());
        let rkey = u32::from_le_bytes(adv[8..12].try_into().unwrap());
        // RDMA READ of the server's bytes 100..108.
        e.post_read(12, &[mr.sge(16..24)], raddr + 100, rkey, SendFlags::empty())
            .unwrap();
        let wc = ep.get_send_comp().await.unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (12, WcStatus::SUCCESS, WcOpcode::RDMA_READ),
            "{wc:?}"
        );
        assert_eq!(&mr.to_vec()[16..24], b"server!!");
        // RDMA WRITE into the server's bytes 200..208, then "done".
        mr.write_at(32, b"written!");
        e.post_write(13, &[mr.sge(32..40)], raddr + 200, rkey, SendFlags::empty())
            .unwrap();
        let wc = ep.get_send_comp().await.unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (13, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE)
        );
        e.post_send_inline(14, b"done", SendFlags::empty()).unwrap();
        assert_eq!(ep.get_send_comp().await.unwrap().wr_id, 14);
        tokio::time::timeout(Duration::from_secs(10), srv)
            .await
            .expect("the server did not finish within 10 s")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), ep.disconnect())
            .await
            .expect("disconnect hung")
            .unwrap();
    });
}
