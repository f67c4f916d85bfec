//! `AsyncRdmaListener`, the async `iowrite` and one task driving both directions of one
//! stream (as h2 does) on rxe (issue 34): many connections accepted
//! at once, a dropped `accept` future whose connection request is returned by the next
//! `accept`, `incoming()` as a `Stream` (an error item, then the stream goes on), the errors a user can reach (an address without an RDMA device, bad options, a
//! peer speaking another rsockets version), and `iowrite` on `AsyncRdmaStream` into the
//! peer's mapping, bytes checked. Runs in the VM (`cargo xtask test`).
#![cfg(feature = "tokio")]

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::pin;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rverbs_cm::{CmEventKind, CmId, ConnParam, Endpoint, EndpointAttr, EventChannel, PortSpace};
use rverbs_stream::tokio::{AsyncRdmaListener, AsyncRdmaStream};
use rverbs_stream::{RdmaListener, RdmaStream, StreamOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{at, conn_data, pattern};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Twelve clients connect at once (each from its own task); twelve `accept().await`s give
/// twelve streams, each from a client's address, each echoing its own bytes, checked.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_listener_accepts_many() {
    const N: usize = 12;
    rt().block_on(async {
        let mut l = AsyncRdmaListener::bind(at(7650)).unwrap();
        assert_eq!(l.local_addr().unwrap(), at(7650));
        let mut clients = Vec::new();
        for i in 0..N {
            clients.push(tokio::spawn(async move {
                let mut c = AsyncRdmaStream::connect(at(7650), &StreamOptions::default())
                    .await
                    .unwrap();
                let data = pattern(i as u64 + 500, 20_000 + i * 777);
                c.write_all(&data).await.unwrap();
                c.shutdown().await.unwrap();
                let mut back = Vec::new();
                c.read_to_end(&mut back).await.unwrap();
                assert!(back == data, "client {i}: the echo differs");
                c.local_addr().unwrap()
            }));
        }
        let mut servers = Vec::new();
        let mut peers = Vec::new();
        for _ in 0..N {
            let (s, from) = l.accept().await.unwrap();
            assert_eq!(s.local_addr().unwrap(), at(7650));
            assert_eq!(s.peer_addr().unwrap(), from);
            peers.push(from);
            servers.push(tokio::spawn(async move {
                let (mut rd, mut wr) = s.into_split();
                tokio::io::copy(&mut rd, &mut wr).await.unwrap();
                wr.shutdown().await.unwrap();
            }));
        }
        let mut locals = Vec::new();
        for c in clients {
            locals.push(c.await.unwrap());
        }
        for s in servers {
            s.await.unwrap();
        }
        peers.sort();
        locals.sort();
        assert_eq!(peers, locals, "each accepted stream is one client's");
    });
}

/// A raw rdma_cm client that sends its connection request and, once the listener has
/// answered it (CONNECT_RESPONSE: the listener took the request and is waiting for our RTU),
/// reports on `answered` and waits for `go` before completing the connection. Returns the
/// client's address.
fn held_client(port: u16, answered: mpsc::Sender<()>, go: mpsc::Receiver<()>) -> SocketAddr {
    let ch = EventChannel::new().unwrap();
    let id = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
    id.claim_events();
    let ev = |id: &CmId, want: CmEventKind| {
        let e = id.get_event(None).unwrap().expect("an event");
        assert_eq!(e.kind(), want, "{e}");
    };
    id.resolve_addr(None, at(port), Duration::from_secs(2))
        .unwrap();
    ev(&id, CmEventKind::ADDR_RESOLVED);
    id.resolve_route(Duration::from_secs(2)).unwrap();
    ev(&id, CmEventKind::ROUTE_RESOLVED);
    let ep = Endpoint::create(id, &EndpointAttr::default()).unwrap();
    ep.start_connect(&ConnParam {
        private_data: conn_data(1),
        flow_control: true,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    })
    .unwrap();
    ev(ep.id(), CmEventKind::CONNECT_RESPONSE);
    answered.send(()).unwrap();
    go.recv().unwrap();
    ep.complete_connect().unwrap();
    let local = ep.id().query_addr().unwrap().src.ip().expect("our address");
    // Keep the connection until the listener's side has been checked.
    go.recv().unwrap();
    local
}

/// An `accept` future that took a connection request (the listener answered it) is dropped
/// before the connection is established; the next `accept` returns that connection. Then the
/// same after a dropped `accept` that had only waited.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_listener_dropped_accept_loses_no_connection() {
    rt().block_on(async {
        let mut l = AsyncRdmaListener::bind(at(7651)).unwrap();
        let (answered_tx, answered_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        let client = thread::spawn(move || held_client(7651, answered_tx, go_rx));
        let answered = tokio::task::spawn_blocking(move || answered_rx.recv().unwrap());
        {
            // The accept can only end after the client's RTU, which waits for `go`: the
            // answer comes first, with the request inside the listener.
            let acc = pin!(l.accept());
            tokio::select! {
                biased;
                r = answered => r.unwrap(),
                r = acc => panic!("accept ended before the client completed: {:?}", r.map(|x| x.1)),
            }
        } // the accept future is dropped here
        go_tx.send(()).unwrap();
        // A listener that lost the connection would wait here for good: bounded, so that
        // such a bug fails (60 s is far beyond a handshake's time).
        let (s, from) = tokio::time::timeout(Duration::from_secs(60), l.accept())
            .await
            .expect("the connection of the dropped accept was lost")
            .unwrap();
        go_tx.send(()).unwrap();
        let local = tokio::task::spawn_blocking(move || client.join().unwrap())
            .await
            .unwrap();
        assert_eq!(from, local);
        assert_eq!(s.peer_addr().unwrap(), local);
        drop(s);

        // A future that waited with nothing queued, dropped; then a client; then accept.
        {
            let acc = pin!(l.accept());
            let first = poll_once(acc).await;
            assert!(first.is_none(), "no client yet, but accept returned");
        }
        let c = tokio::spawn(async {
            AsyncRdmaStream::connect(at(7651), &StreamOptions::default()).await
        });
        let (mut s, from) = l.accept().await.unwrap();
        let mut c = c.await.unwrap().unwrap();
        assert_eq!(from, c.local_addr().unwrap());
        c.write_all(b"ok").await.unwrap();
        let mut b = [0u8; 2];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ok");
    });
}

/// The next item of `s` (`StreamExt::next` without a combinator crate).
async fn next<S: futures_core::Stream + Unpin>(s: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *s).poll_next(cx)).await
}

/// `incoming()`: three clients at once come out as three streams, each a client's (echo
/// checked); a peer speaking rsockets version 2 is an error item naming why, after which the
/// stream goes on with a good client; the listener comes back out with `into_inner` and
/// accepts again.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_listener_incoming_is_a_stream() {
    rt().block_on(async {
        let mut inc = AsyncRdmaListener::bind(at(7655)).unwrap().incoming();
        assert_eq!(inc.get_ref().local_addr().unwrap(), at(7655));
        let mut clients = Vec::new();
        for i in 0..3u8 {
            clients.push(tokio::spawn(async move {
                let mut c = AsyncRdmaStream::connect(at(7655), &StreamOptions::default())
                    .await
                    .unwrap();
                c.write_all(&[i; 100]).await.unwrap();
                let mut back = [0u8; 100];
                c.read_exact(&mut back).await.unwrap();
                assert_eq!(back, [i; 100], "client {i}: the echo differs");
                c.local_addr().unwrap()
            }));
        }
        let mut peers = Vec::new();
        for _ in 0..3 {
            let mut s = next(&mut inc).await.expect("never ends").unwrap();
            peers.push(s.peer_addr().unwrap());
            let mut b = [0u8; 100];
            s.read_exact(&mut b).await.unwrap();
            s.write_all(&b).await.unwrap();
            // Kept until the client has read the echo (checked when joined below).
            tokio::spawn(async move {
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest).await;
            });
        }
        let mut locals = Vec::new();
        for c in clients {
            locals.push(c.await.unwrap());
        }
        peers.sort();
        locals.sort();
        assert_eq!(peers, locals, "each item is one client's stream");

        let v2 = tokio::task::spawn_blocking(|| {
            let id = CmId::create(None, PortSpace::TCP).unwrap();
            id.resolve_addr(None, at(7655), Duration::from_secs(2))
                .unwrap();
            id.resolve_route(Duration::from_secs(2)).unwrap();
            let ep = Endpoint::create(id, &EndpointAttr::default()).unwrap();
            ep.connect(&ConnParam {
                private_data: conn_data(2),
                ..Default::default()
            })
        });
        let e = next(&mut inc).await.expect("never ends").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("version 2"), "{e}");
        assert!(
            v2.await.unwrap().is_err(),
            "the version-2 client was rejected"
        );
        let c = tokio::spawn(async {
            AsyncRdmaStream::connect(at(7655), &StreamOptions::default()).await
        });
        let s = next(&mut inc).await.expect("never ends").unwrap();
        let c = c.await.unwrap().unwrap();
        assert_eq!(s.peer_addr().unwrap(), c.local_addr().unwrap());

        let mut l = inc.into_inner();
        let c = tokio::spawn(async {
            AsyncRdmaStream::connect(at(7655), &StreamOptions::default()).await
        });
        let (_s, from) = l.accept().await.unwrap();
        assert_eq!(from, c.await.unwrap().unwrap().local_addr().unwrap());
    });
}

/// Polls `f` once: `Some` if it was ready.
async fn poll_once<F: Future>(mut f: std::pin::Pin<&mut F>) -> Option<F::Output> {
    std::future::poll_fn(|cx| match f.as_mut().poll(cx) {
        std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
        std::task::Poll::Pending => std::task::Poll::Ready(None),
    })
    .await
}

/// The errors of the async listener: an address no RDMA device has (named in the error),
/// options out of range (named), and a peer speaking rsockets version 2 (rejected, the
/// `accept` says why, and the listener then accepts a good client).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_listener_errors() {
    rt().block_on(async {
        let nowhere = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 7652);
        let e = AsyncRdmaListener::bind(nowhere).unwrap_err();
        assert!(e.to_string().contains("192.0.2.1:7652"), "{e}");
        assert_eq!(e.kind(), ErrorKind::AddrNotAvailable, "{e}");

        let bad = StreamOptions {
            send_queue: 0,
            ..Default::default()
        };
        let e = AsyncRdmaListener::bind_with(at(7653), &bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("send_queue"), "{e}");

        let mut l = AsyncRdmaListener::bind(at(7653)).unwrap();
        let v2 = tokio::task::spawn_blocking(|| {
            let id = CmId::create(None, PortSpace::TCP).unwrap();
            id.resolve_addr(None, at(7653), Duration::from_secs(2))
                .unwrap();
            id.resolve_route(Duration::from_secs(2)).unwrap();
            let ep = Endpoint::create(id, &EndpointAttr::default()).unwrap();
            ep.connect(&ConnParam {
                private_data: conn_data(2),
                ..Default::default()
            })
        });
        let e = l.accept().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
        assert!(e.to_string().contains("version 2"), "{e}");
        assert!(
            v2.await.unwrap().is_err(),
            "the version-2 client was rejected"
        );
        let c = tokio::spawn(async {
            AsyncRdmaStream::connect(at(7653), &StreamOptions::default()).await
        });
        let (_s, from) = l.accept().await.unwrap();
        assert_eq!(from, c.await.unwrap().unwrap().local_addr().unwrap());
    });
}

/// `iowrite_all` on an `AsyncRdmaStream` into the peer's 1 MiB mapping (more than the send
/// ring: it waits for ring space without blocking the runtime), at an odd offset too; then a
/// message, after which the mapping holds every byte. An offset the peer did not map is
/// refused naming it.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_iowrite_into_peer_mapping_byte_checked() {
    const MAP: usize = 1 << 20;
    let opts = StreamOptions {
        iomap_entries: 2,
        ..Default::default()
    };
    let l = RdmaListener::bind_with(at(7654), &opts).unwrap();
    let c = thread::spawn(move || RdmaStream::connect_with(at(7654), &opts).unwrap());
    let (mut s, _) = l.accept().unwrap();
    let mut c = c.join().unwrap();
    let map = s.iomap(MAP, 0x40_0000).unwrap();
    // A message each way: the mapping's announcement has arrived at the client.
    let mut one = [0u8; 1];
    s.write_all(b"m").unwrap();
    c.read_exact(&mut one).unwrap();
    let data = pattern(77, MAP - 3);
    let server = thread::spawn(move || {
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"done");
        (s, map.to_vec())
    });
    let want = data.clone();
    let (_s, got) = rt().block_on(async move {
        let mut c = AsyncRdmaStream::from_std(c).unwrap();
        let e = c.iowrite(0x10, b"x").await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("0x10"), "{e}");
        let n = c.iowrite(0x40_0000, &data[..1]).await.unwrap();
        assert_eq!(n, 1);
        c.iowrite_all(0x40_0001, &data[1..]).await.unwrap();
        c.write_all(b"done").await.unwrap();
        // Keep the stream until the server has read.
        tokio::task::spawn_blocking(move || server.join().unwrap())
            .await
            .unwrap()
    });
    assert_eq!(got.len(), MAP);
    assert!(got[..MAP - 3] == want[..], "the mapping's bytes differ");
    assert_eq!(
        &got[MAP - 3..],
        &[0, 0, 0],
        "bytes past the write were written"
    );
}

/// One unsplit `AsyncRdmaStream` per side, read and written from one task (as h2 drives its
/// connection: `tokio::io::split` halves polled by `join!`, the same task's waker for both
/// directions): the client pipelines thousands of small messages while it reads the echo;
/// the server echoes through an in-memory pipe with its reader and writer joined in one
/// task. Every byte comes back in order; a lost wake-up of either direction leaves the test
/// hanging (no timer decides it).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn async_one_task_reads_and_writes_one_stream() {
    const N: usize = 5_000;
    let sizes: Vec<usize> = (0..N).map(|i| 1 + (i * 37) % 300).collect();
    let total: usize = sizes.iter().sum();
    let data = pattern(4242, total);
    rt().block_on(async move {
        let mut l = AsyncRdmaListener::bind(at(7656)).unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (mut rd, mut wr) = tokio::io::split(s);
            let (a, b) = tokio::io::duplex(4096);
            let (mut b_rd, _b_wr) = tokio::io::split(b);
            let mut a = a;
            let (x, y) = tokio::join!(
                async {
                    let n = tokio::io::copy(&mut rd, &mut a).await;
                    drop(a);
                    n
                },
                tokio::io::copy(&mut b_rd, &mut wr),
            );
            (x.unwrap(), y.unwrap())
        });
        let c = AsyncRdmaStream::connect(at(7656), &StreamOptions::default())
            .await
            .unwrap();
        let (mut rd, mut wr) = tokio::io::split(c);
        let (_, back) = tokio::join!(
            async {
                let mut at = 0;
                for n in &sizes {
                    wr.write_all(&data[at..at + n]).await.unwrap();
                    at += n;
                }
            },
            async {
                let mut back = vec![0u8; total];
                rd.read_exact(&mut back).await.unwrap();
                back
            },
        );
        assert!(back == data, "the echo differs");
        let mut c = rd.unsplit(wr);
        c.shutdown().await.unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert_eq!(server.await.unwrap(), (total as u64, total as u64));
    });
}
