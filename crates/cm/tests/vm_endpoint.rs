//! librdmacm's verbs helpers on an rdma_cm id: Endpoint with its own send/recv CQs and the
//! blocking get_send_comp / get_recv_comp (issue #5). Runs in the VM on rxe.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use common::{addrinfo, listener};
use rverbs_cm::{create_ep, ConnParam};
use rverbs_cm::{Endpoint, EndpointAttr};
use rverbs_uverbs::cq::{Cq, CqOptions};
use rverbs_uverbs::mr::{AccessFlags, PageBuf};
use rverbs_uverbs::pd::Pd;
use rverbs_uverbs::{SendFlags, WcOpcode, WcStatus};

/// The endpoints of these tests: 8 sends and receives, 16 inline bytes.
fn attr() -> EndpointAttr {
    common::attr(8, 16)
}

fn client(port: u16) -> Endpoint {
    common::client(port, &attr())
}

/// Thread CPU time: proves a waiter slept instead of spinning.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Sends, RDMA reads and RDMA writes all complete through get_send_comp with their wr_id;
/// receives through get_recv_comp.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn send_read_write_completions_carry_wr_id() {
    let port = 7601;
    let lis = listener(port);
    let ready = Arc::new(Barrier::new(2));
    let r2 = ready.clone();
    let server = thread::spawn(move || {
        let req = lis.get_request().unwrap();
        let ep = Endpoint::create(req, &attr()).unwrap();
        let buf = rverbs_uverbs::mr::Mr::register(
            ep.pd(),
            PageBuf::new(4096).unwrap(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        buf.write_at(100, b"server!!");
        let recv = [buf.sge(0..64)];
        ep.post_recv(11, &recv).unwrap();
        // Advertise addr/rkey in the REP's private data.
        let mut pd = Vec::new();
        pd.extend_from_slice(&buf.addr().to_le_bytes());
        pd.extend_from_slice(&buf.rkey().to_le_bytes());
        ep.accept(&ConnParam {
            private_data: pd,
            ..Default::default()
        })
        .unwrap();
        let wc = ep.get_recv_comp().unwrap();
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (11, WcStatus::SUCCESS, 5)
        );
        assert_eq!(&buf.to_vec()[..5], b"hello");
        r2.wait(); // the client RDMA-writes, then tells us via a second send
        let recv = [buf.sge(0..64)];
        ep.post_recv(12, &recv).unwrap();
        r2.wait();
        let wc = ep.get_recv_comp().unwrap();
        assert_eq!(wc.wr_id, 12);
        assert_eq!(&buf.to_vec()[200..208], b"written!");
        let ev = ep.id().get_event(Some(Duration::from_secs(10))).unwrap();
        assert!(ev.is_some(), "no DISCONNECTED within 10 s");
    });
    let ep = client(port);
    // The RDMA READ's sink: registered for remote write, which iWARP requires (this test
    // also runs on siw).
    let mr = ep.reg_write(PageBuf::new(4096).unwrap()).unwrap();
    let param = ConnParam::default();
    ep.connect(&param).unwrap();
    let ev = ep.id().take_event().expect("CONNECT_RESPONSE kept");
    let pdata = ev.private_data();
    let raddr = u64::from_le_bytes(pdata[0..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(pdata[8..12].try_into().unwrap());
    ep.post_send_inline(21, b"hello", SendFlags::empty())
        .unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (21, WcStatus::SUCCESS, WcOpcode::SEND)
    );
    // RDMA READ of the server's bytes 100..108.
    let dst = [mr.sge(0..8)];
    ep.post_read(22, &dst, raddr + 100, rkey, SendFlags::empty())
        .unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (22, WcStatus::SUCCESS, WcOpcode::RDMA_READ)
    );
    assert_eq!(&mr.to_vec()[..8], b"server!!");
    // RDMA WRITE into the server's bytes 200..208.
    ready.wait();
    mr.write_at(8, b"written!");
    let src = [mr.sge(8..16)];
    ep.post_write(23, &src, raddr + 200, rkey, SendFlags::empty())
        .unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (23, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE)
    );
    ready.wait();
    ep.post_send_inline(24, b"done", SendFlags::empty())
        .unwrap();
    assert_eq!(ep.get_send_comp().unwrap().wr_id, 24);
    ep.disconnect().unwrap();
    server.join().unwrap();
}

/// get_recv_comp blocks, asleep, until the peer's send arrives from another thread.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn get_recv_comp_sleeps_until_a_completion() {
    let port = 7602;
    let lis = listener(port);
    let server = thread::spawn(move || {
        let req = lis.get_request().unwrap();
        let ep = Endpoint::create(req, &attr()).unwrap();
        ep.accept(&ConnParam::default()).unwrap();
        thread::sleep(Duration::from_millis(500));
        ep.post_send_inline(1, b"wake", SendFlags::empty()).unwrap();
        assert_eq!(ep.get_send_comp().unwrap().status, WcStatus::SUCCESS);
        thread::sleep(Duration::from_millis(200));
    });
    let ep = client(port);
    let buf = ep.reg_msgs(PageBuf::new(4096).unwrap()).unwrap();
    let sge = [buf.sge(0..64)];
    ep.post_recv(5, &sge).unwrap();
    ep.connect(&ConnParam::default()).unwrap();
    let (t0, c0) = (Instant::now(), thread_cpu());
    let wc = ep.get_recv_comp().unwrap();
    let (waited, cpu) = (t0.elapsed(), thread_cpu() - c0);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::SUCCESS));
    assert_eq!(&buf.to_vec()[..4], b"wake");
    assert!(
        waited >= Duration::from_millis(300),
        "returned after {waited:?}"
    );
    assert!(
        cpu < waited / 4,
        "the waiter burned {cpu:?} of CPU in {waited:?}: it spun instead of sleeping"
    );
    server.join().unwrap();
}

/// Caller-supplied CQs give an Endpoint<UserCqs>, which has no get_send_comp; turning it into
/// one with its own CQs refuses combined and shared CQs with a clear error.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn shared_or_combined_cqs_are_refused() {
    let ai = addrinfo(7603, false);
    let dev = std::env::var("RVERBS_DEV_A").unwrap_or_else(|_| "rxe0".into());
    let ctx = rverbs_provider::open_by_name(&dev).unwrap();
    let pd = Pd::alloc(&ctx).unwrap();
    let ch = rverbs_uverbs::channel::CompChannel::create(&ctx).unwrap();
    let combined = Cq::create(
        &ctx,
        16,
        CqOptions {
            channel: Some(ch.clone()),
            comp_vector: 0,
        },
    )
    .unwrap();
    let ep = Endpoint::with_cqs(
        create_ep(&ai[0]).unwrap(),
        &pd,
        &combined,
        &combined,
        &attr(),
    )
    .unwrap();
    let (e, _ep) = ep.into_own_cqs().unwrap_err();
    assert!(e.to_string().contains("combined CQ"), "{e}");

    let ch2 = rverbs_uverbs::channel::CompChannel::create(&ctx).unwrap();
    let recv_cq = Cq::create(
        &ctx,
        16,
        CqOptions {
            channel: Some(ch2),
            comp_vector: 0,
        },
    )
    .unwrap();
    // `combined` is also held by this test (and the first endpoint): shared.
    let ep2 = Endpoint::with_cqs(
        create_ep(&ai[0]).unwrap(),
        &pd,
        &combined,
        &recv_cq,
        &attr(),
    )
    .unwrap();
    let (e, _ep2) = ep2.into_own_cqs().unwrap_err();
    assert!(e.to_string().contains("a CQ is shared"), "{e}");
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn inline_over_the_limit_is_refused() {
    let ai = addrinfo(7604, false);
    let ep = Endpoint::create(create_ep(&ai[0]).unwrap(), &attr()).unwrap();
    let big = vec![0u8; ep.caps().max_inline_data as usize + 1];
    let e = ep
        .post_send_inline(1, &big, SendFlags::empty())
        .unwrap_err();
    let want = format!(
        "post send to QP {:#x} on {}: work request #0: {} bytes of inline data, the QP's \
         max_inline_data is {}; 0 posted",
        ep.qp_num(),
        ep.pd().context().name(),
        big.len(),
        big.len() - 1
    );
    assert_eq!(e.to_string(), want);
}

/// Operations in the wrong state: a send posted before connecting, and accepting twice,
/// fail with errors that say so; the connection still works afterwards.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn post_before_connect_and_accept_twice_are_refused() {
    let port = 7605;
    let lis = listener(port);
    let server = thread::spawn(move || {
        let req = lis.get_request().unwrap();
        let ep = Endpoint::create(req, &attr()).unwrap();
        let buf = ep.reg_msgs(PageBuf::new(4096).unwrap()).unwrap();
        let sge = [buf.sge(0..64)];
        ep.post_recv(1, &sge).unwrap();
        ep.accept(&ConnParam::default()).unwrap();
        let e = ep.accept(&ConnParam::default()).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("accept on rdma_cm id"), "{s}");
        assert!(s.contains("already connected or accepted"), "{s}");
        let wc = ep.get_recv_comp().unwrap();
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::SUCCESS));
        assert_eq!(&buf.to_vec()[..2], b"ok");
        e.to_string()
    });
    let ep = client(port);
    // The QP is in INIT: the send is refused before anything is queued.
    let e = ep
        .post_send_inline(9, b"early", SendFlags::empty())
        .unwrap_err();
    let want = format!(
        "post send to QP {:#x} on {}: work request #0: the QP is in INIT: sends need RTS \
         (connect first); 0 posted",
        ep.qp_num(),
        ep.pd().context().name()
    );
    assert_eq!(e.to_string(), want);
    ep.connect(&ConnParam::default()).unwrap();
    ep.post_send_inline(10, b"ok", SendFlags::empty()).unwrap();
    let wc = ep.get_send_comp().unwrap();
    assert_eq!((wc.wr_id, wc.status), (10, WcStatus::SUCCESS));
    let accept_twice = server.join().unwrap();
    eprintln!("second accept: {accept_twice}");
}
