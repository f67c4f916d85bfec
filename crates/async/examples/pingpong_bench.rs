//! Ping-pong latency of the async completion path (`AsyncEndpoint` on a tokio current-thread
//! runtime) against the blocking one (`Endpoint::get_send_comp` / `get_recv_comp`), same
//! build, same server, one process: 64-byte inline messages, one outstanding at a time.
//!
//! ```sh
//! pingpong_bench ADDR PORT ITERS ROUNDS [both|blocking|async]
//! ```
//!
//! Each round runs one blocking and one async client connection of ITERS round trips each
//! (the order alternates between rounds) against a blocking echo server thread; it prints the
//! microseconds per round trip of both and their ratio, then the medians. With `blocking` or
//! `async` only that client runs (for callgrind: instructions per iteration are the
//! difference between two ITERS).

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rverbs_async::{AsyncEndpoint, AsyncEventChannel};
use rverbs_cm::verbs::{Endpoint, EndpointAttr};
use rverbs_cm::{create_ep, getaddrinfo, AddrHints, ConnParam, PortSpace};
use rverbs_uverbs::mr::PageBuf;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::SendFlags;

const MSG: usize = 64;

fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: MSG as u32,
        },
        sq_sig_all: true,
    }
}

/// Blocking echo of `conns` connections, one after the other, `iters` messages each.
fn server(addr: SocketAddr, conns: u32, iters: u32, ready: std::sync::mpsc::Sender<()>) {
    let ai = getaddrinfo(
        Some(&addr.ip().to_string()),
        Some(&addr.port().to_string()),
        &AddrHints {
            passive: true,
            ..AddrHints::default()
        },
    )
    .unwrap();
    let lis = create_ep(&ai[0]).unwrap();
    lis.listen(0).unwrap();
    ready.send(()).unwrap();
    for _ in 0..conns {
        let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
        let mr = ep
            .reg_msgs(PageBuf::new(4096).unwrap())
            .map_err(std::io::Error::from)
            .unwrap();
        let sge = [mr.sge(0..MSG)];
        ep.post_recv(0, &sge).unwrap();
        ep.accept(&ConnParam::default()).unwrap();
        let msg = [0x5au8; MSG];
        for _ in 0..iters {
            assert!(ep.get_recv_comp().unwrap().status.is_success());
            ep.post_recv(0, &sge).unwrap();
            ep.post_send_inline(0, &msg, SendFlags::empty()).unwrap();
            assert!(ep.get_send_comp().unwrap().status.is_success());
        }
        let _ = ep.id().get_event(Some(Duration::from_secs(10)));
        drop(ep);
        drop(mr);
    }
}

fn blocking_client(addr: SocketAddr, iters: u32) -> Duration {
    let ai = getaddrinfo(
        Some(&addr.ip().to_string()),
        Some(&addr.port().to_string()),
        &AddrHints::default(),
    )
    .unwrap();
    let ep = Endpoint::create(create_ep(&ai[0]).unwrap(), &attr()).unwrap();
    let mr = ep
        .reg_msgs(PageBuf::new(4096).unwrap())
        .map_err(std::io::Error::from)
        .unwrap();
    let sge = [mr.sge(0..MSG)];
    ep.post_recv(0, &sge).unwrap();
    ep.connect(&ConnParam::default()).unwrap();
    let msg = [0xa5u8; MSG];
    let t0 = Instant::now();
    for _ in 0..iters {
        ep.post_send_inline(0, &msg, SendFlags::empty()).unwrap();
        assert!(ep.get_send_comp().unwrap().status.is_success());
        assert!(ep.get_recv_comp().unwrap().status.is_success());
        ep.post_recv(0, &sge).unwrap();
    }
    let dt = t0.elapsed();
    ep.disconnect().unwrap();
    drop(ep);
    drop(mr);
    dt
}

fn async_client(rt: &tokio::runtime::Runtime, addr: SocketAddr, iters: u32) -> Duration {
    rt.block_on(async {
        let ch = AsyncEventChannel::new().unwrap();
        let id = ch.create_id(PortSpace::TCP).unwrap();
        id.resolve_addr(None, addr, Duration::from_secs(2))
            .await
            .unwrap();
        id.resolve_route(Duration::from_secs(2)).await.unwrap();
        let ep = AsyncEndpoint::create(id, &attr()).unwrap();
        let mr = ep
            .endpoint()
            .reg_msgs(PageBuf::new(4096).unwrap())
            .map_err(std::io::Error::from)
            .unwrap();
        let sge = [mr.sge(0..MSG)];
        ep.endpoint().post_recv(0, &sge).unwrap();
        ep.connect(&ConnParam::default()).await.unwrap();
        let msg = [0xa5u8; MSG];
        let t0 = Instant::now();
        for _ in 0..iters {
            ep.endpoint()
                .post_send_inline(0, &msg, SendFlags::empty())
                .unwrap();
            assert!(ep.send_comp().await.unwrap().status.is_success());
            assert!(ep.recv_comp().await.unwrap().status.is_success());
            ep.endpoint().post_recv(0, &sge).unwrap();
        }
        let dt = t0.elapsed();
        ep.disconnect().await.unwrap();
        drop(ep);
        drop(mr);
        dt
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> io::Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let get = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let addr: SocketAddr = format!("{}:{}", get(0, "10.10.0.1"), get(1, "7950"))
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("address: {e}")))?;
    let iters: u32 = get(2, "1000").parse().unwrap_or(1000);
    let rounds: u32 = get(3, "5").parse().unwrap_or(5);
    let mode = get(4, "both");
    let per_round = if mode == "both" { 2 } else { 1 };
    let (tx, rx) = std::sync::mpsc::channel();
    let srv = std::thread::spawn(move || server(addr, rounds * per_round, iters, tx));
    rx.recv().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let us = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(iters);
    let (mut b, mut s, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (tb, ta) = match mode.as_str() {
            "blocking" => (Some(blocking_client(addr, iters)), None),
            "async" => (None, Some(async_client(&rt, addr, iters))),
            _ if round % 2 == 0 => {
                let tb = blocking_client(addr, iters);
                (Some(tb), Some(async_client(&rt, addr, iters)))
            }
            _ => {
                let ta = async_client(&rt, addr, iters);
                (Some(blocking_client(addr, iters)), Some(ta))
            }
        };
        match (tb, ta) {
            (Some(tb), Some(ta)) => {
                let (ub, ua) = (us(tb), us(ta));
                println!(
                    "round {round}: blocking {ub:.1} us, async {ua:.1} us per round trip, async/blocking {:.3}",
                    ua / ub
                );
                b.push(ub);
                s.push(ua);
                r.push(ua / ub);
            }
            (Some(tb), None) => println!("round {round}: blocking {:.1} us", us(tb)),
            (None, Some(ta)) => println!("round {round}: async {:.1} us", us(ta)),
            (None, None) => {}
        }
    }
    if !r.is_empty() {
        println!(
            "median over {rounds} rounds of {iters}: blocking {:.1} us, async {:.1} us, ratio of the medians {:.3}, median of the ratios {:.3}",
            median(&mut b.clone()),
            median(&mut s.clone()),
            median(&mut s) / median(&mut b),
            median(&mut r)
        );
    }
    srv.join().unwrap();
    Ok(())
}
