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

mod common;

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{attr, MsgBuf, MSG};
use rverbs_cm::Endpoint;
use rverbs_cm::{create_ep, getaddrinfo, AddrHints, ConnParam};
use rverbs_uverbs::SendFlags;

/// An endpoint of a synchronous id (`create_ep` on `addr`; `passive` for a listener).
fn sync_id(addr: SocketAddr, passive: bool) -> rverbs_cm::CmId {
    let ai = getaddrinfo(
        Some(&addr.ip().to_string()),
        Some(&addr.port().to_string()),
        &AddrHints {
            passive,
            ..AddrHints::default()
        },
    )
    .unwrap();
    create_ep(&ai[0]).unwrap()
}

/// Blocking echo of `conns` connections, one after the other, `iters` messages each.
fn server(addr: SocketAddr, conns: u32, iters: u32, ready: std::sync::mpsc::Sender<()>) {
    let lis = sync_id(addr, true);
    lis.listen(0).unwrap();
    ready.send(()).unwrap();
    for _ in 0..conns {
        let ep = Endpoint::create(lis.get_request().unwrap(), &attr()).unwrap();
        let buf = MsgBuf::new(&ep).unwrap();
        buf.post_recv(&ep).unwrap();
        ep.accept(&ConnParam::default()).unwrap();
        let msg = [0x5au8; MSG];
        for _ in 0..iters {
            assert!(ep.get_recv_comp().unwrap().status.is_success());
            buf.post_recv(&ep).unwrap();
            ep.post_send_inline(0, &msg, SendFlags::empty()).unwrap();
            assert!(ep.get_send_comp().unwrap().status.is_success());
        }
        let _ = ep.id().get_event(Some(Duration::from_secs(10)));
        drop(ep);
        drop(buf);
    }
}

fn blocking_client(addr: SocketAddr, iters: u32) -> Duration {
    let ep = Endpoint::create(sync_id(addr, false), &attr()).unwrap();
    let buf = MsgBuf::new(&ep).unwrap();
    buf.post_recv(&ep).unwrap();
    ep.connect(&ConnParam::default()).unwrap();
    let msg = [0xa5u8; MSG];
    let t0 = Instant::now();
    for _ in 0..iters {
        ep.post_send_inline(0, &msg, SendFlags::empty()).unwrap();
        assert!(ep.get_send_comp().unwrap().status.is_success());
        assert!(ep.get_recv_comp().unwrap().status.is_success());
        buf.post_recv(&ep).unwrap();
    }
    let dt = t0.elapsed();
    ep.disconnect().unwrap();
    drop(ep);
    drop(buf);
    dt
}

fn async_client(rt: &tokio::runtime::Runtime, addr: SocketAddr, iters: u32) -> Duration {
    rt.block_on(async {
        let (ep, buf) = common::connect(addr).await.unwrap();
        let msg = [0xa5u8; MSG];
        let t0 = Instant::now();
        for _ in 0..iters {
            ep.endpoint()
                .post_send_inline(0, &msg, SendFlags::empty())
                .unwrap();
            assert!(ep.get_send_comp().await.unwrap().status.is_success());
            assert!(ep.get_recv_comp().await.unwrap().status.is_success());
            buf.post_recv(ep.endpoint()).unwrap();
        }
        let dt = t0.elapsed();
        ep.disconnect().await.unwrap();
        drop(ep);
        drop(buf);
        dt
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> io::Result<()> {
    let (addr, a) = common::addr_and_args(7950)?;
    let get = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let iters: u32 = get(0, "1000").parse().unwrap_or(1000);
    let rounds: u32 = get(1, "5").parse().unwrap_or(5);
    let mode = get(2, "both");
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
