//! Fuzz entry points for the decoders of what the ucma kernel module writes: events
//! (`rdma_ucm_event_resp`), socket addresses, and the `QUERY` / `QUERY_ROUTE` replies.
//!
//! **Not for users: no stability, fuzz support only.** This module exists only with
//! `--cfg rverbs_fuzzing` (set by `cargo xtask fuzz` for the fuzz targets of the repository's
//! `fuzz/` crate; no Cargo feature, so no dependent crate turns it on) and in this crate's
//! unit tests, which run it over the committed seeds. Each
//! function is safe, takes the fuzzer's bytes and runs the crate's own (crate-private) decoders
//! on them, asserting what must hold for any input: no panic other than these asserts, values
//! in range, and round trips where an encoder exists. A failed assert is a finding.

use std::collections::HashSet;
use std::os::fd::OwnedFd;

use zerocopy::{FromBytes, IntoBytes};

use crate::abi::{
    self, rdma_ucm_event_resp, rdma_ucm_query_addr_resp, rdma_ucm_query_route_resp,
    RDMA_MAX_PRIVATE_DATA,
};
use crate::addr::{self, CmAddr};
use crate::channel::{ends_connection, Channel, Dispatch};
use crate::event::CmEvent;
use crate::id::check_event;
use crate::query::{decode_path_resp, AddrQuery, PathRecord, RouteQuery};
use crate::types::{CmEventKind, RejectReason};

/// `T` from the front of `data`, zero-filled where `data` is short (as a response buffer the
/// kernel filled only partly).
fn padded<T: FromBytes + IntoBytes>(data: &[u8]) -> T {
    let mut v = T::new_zeroed();
    let b = v.as_mut_bytes();
    let n = b.len().min(data.len());
    b[..n].copy_from_slice(&data[..n]);
    v
}

/// A sequence of events as `GET_EVENT` returns them (336 bytes each, the last zero-filled):
/// each decoded as a user sees it (kind, status, errno, reject reason, connection or UD
/// parameters, private data, the new id of a CONNECT_REQUEST, the error a synchronous call
/// reports), and all of them queued and taken back through the channel's dispatcher, which
/// loses none and keeps each id's order.
pub fn events(data: &[u8]) {
    const N: usize = size_of::<rdma_ucm_event_resp>();
    // The decoded CONNECT_REQUEST owns a new id whose drop writes DESTROY_ID: on /dev/null
    // here (no kernel answers; the command is consumed whole).
    let Ok(null) = std::fs::File::open("/dev/null") else {
        return;
    };
    let chan = Channel::for_test(OwnedFd::from(null));
    let raws: Vec<rdma_ucm_event_resp> = data.chunks(N).map(padded).collect();
    for raw in &raws {
        let mut ev = CmEvent::decode(*raw, &chan);
        let kind = CmEventKind(raw.event);
        let status = raw.status as i32;
        assert_eq!((ev.kind(), ev.status()), (kind, status));
        assert_eq!((ev.id_handle(), ev.uid()), (raw.id, raw.uid));
        assert_eq!(ev.errno().is_some(), (-4095..0).contains(&status));
        assert_eq!(
            ev.reject_reason(),
            (kind == CmEventKind::REJECTED && status > 0).then_some(RejectReason(raw.status))
        );
        // A USER or INTERNAL event's parameter is its argument; every other has exactly one
        // of the two parameter views.
        if ev.arg().is_some() {
            assert!(ev.conn().is_none() && ev.ud().is_none());
        } else {
            assert!(ev.conn().is_some() != ev.ud().is_some());
        }
        let pd = ev.private_data();
        assert!(pd.len() <= RDMA_MAX_PRIVATE_DATA);
        let at = pd.as_ptr() as usize - ev.raw().param.as_ptr() as usize;
        assert!(at == 8 || at == 40, "private data at {at}");
        let _ = format!("{ev} {ev:?} {kind} {:?}", ev.ece());
        match check_event("fuzz", &ev, &[kind]) {
            Ok(()) => assert_eq!(status, 0),
            Err(e) => {
                assert_ne!(status, 0);
                assert!(!e.to_string().is_empty());
            }
        }
        if kind != CmEventKind::ESTABLISHED {
            assert!(check_event("fuzz", &ev, &[CmEventKind::ESTABLISHED]).is_err());
        }
        let is_request = kind == CmEventKind::CONNECT_REQUEST;
        assert_eq!(ev.new_id().is_some(), is_request);
        if let Some(id) = ev.new_id() {
            assert_eq!(id.handle(), raw.id);
        }
        assert_eq!(ev.take_id().is_some(), is_request);
        assert!(ev.take_id().is_none());
    }

    // The dispatcher: queue everything as one id's migrated events, then take them back.
    let mut d = Dispatch::default();
    let owner = raws.first().map_or(0, |r| r.uid);
    d.adopt(owner, true, raws.clone());
    assert!(d.is_claimed(owner));
    if raws.iter().any(|r| ends_connection(CmEventKind(r.event))) {
        let (k, _) = d.ended(owner).expect("a connection end is recorded");
        assert!(ends_connection(k));
    }
    let uids: HashSet<u64> = raws.iter().map(|r| r.uid).collect();
    let mut taken = 0;
    for &uid in &uids {
        let mine: Vec<_> = raws.iter().filter(|r| r.uid == uid).collect();
        if uid == owner {
            // Half through take_for, the rest through forget, in order.
            let half = mine.len() / 2;
            for want in &mine[..half] {
                let got = d.take_for(uid).expect("queued");
                assert_eq!(got.as_bytes(), want.as_bytes());
            }
            let rest = d.forget(uid);
            assert_eq!(rest.len(), mine.len() - half);
            assert!(!d.is_claimed(uid) && d.ended(uid).is_none());
            taken += mine.len();
        } else {
            while let Some(got) = d.take_unclaimed() {
                assert!(uids.contains(&got.uid) && got.uid != owner);
                taken += 1;
            }
        }
    }
    assert!(d.take_unclaimed().is_none());
    assert_eq!(taken, raws.len());
    // Dropping the channel closes /dev/null; the new ids were destroyed above.
    drop(chan);
}

/// Socket addresses as the kernel reports them (`sockaddr_in`, `sockaddr_in6`, `sockaddr_ib`
/// in a `sockaddr_storage`, with or without a size): IP addresses encode back to the same
/// bytes' meaning.
pub fn addresses(data: &[u8]) {
    let a = addr::decode(data);
    if let CmAddr::Ip(ip) = a {
        let (storage, n) = addr::to_storage(&ip);
        assert_eq!(addr::decode(&storage.bytes), a);
        assert_eq!(addr::decode_sized(&storage.bytes, n), a);
    }
    let _ = a.to_string();
    let size = data
        .get(2..4)
        .map_or(0, |b| u16::from_ne_bytes([b[0], b[1]]));
    let body = data.get(4..).unwrap_or(&[]);
    match addr::decode_sized(body, size) {
        CmAddr::Unspecified => assert!(size == 0 || body.len() < 2),
        CmAddr::Other(_) => {}
        sized => {
            assert_eq!(
                addr::family_size(u16::from_ne_bytes([body[0], body[1]])),
                Some(size.into())
            );
            assert_eq!(addr::decode(&body[..size.into()]), sized);
        }
    }
}

/// Replies of `QUERY` (ADDR, GID and PATH) and `QUERY_ROUTE`, zero-filled where short.
pub fn queries(data: &[u8]) {
    let q = AddrQuery::from_raw(&padded::<rdma_ucm_query_addr_resp>(data));
    assert_eq!(q.has_device(), q.node_guid != 0);
    assert_eq!(q.node_guid_string().len(), 19);
    let route = RouteQuery::from_raw(&padded::<rdma_ucm_query_route_resp>(data));
    assert!((1..=2).contains(&route.paths.len()));
    for p in &route.paths {
        check_path(p, false);
    }
    let paths = decode_path_resp(data);
    let hdr = size_of::<abi::rdma_ucm_query_path_resp>();
    let rec = size_of::<abi::ib_path_rec_data>();
    assert!(paths.len() <= data.len().saturating_sub(hdr) / rec);
    for p in &paths {
        check_path(p, true);
    }
    if let Some(w) = data.get(..64) {
        let p = PathRecord::from_wire(0, w.try_into().expect("64 bytes"));
        check_path(&p, true);
        assert_eq!(p.service_id.to_be_bytes(), w[..8]);
        assert_eq!(
            (p.dgid.0, p.sgid.0),
            (w[8..24].try_into().unwrap(), w[24..40].try_into().unwrap())
        );
    }
}

/// The bit fields of a path record are within their widths (`wire`: decoded from the packed
/// SA PathRecord, not from an `ib_user_path_rec`).
fn check_path(p: &PathRecord, wire: bool) {
    assert_eq!(p.mtu_bytes().is_some(), (1..=5).contains(&p.mtu));
    if wire {
        assert!(p.flow_label < 1 << 20 && p.numb_path < 1 << 7 && p.qos_class < 1 << 12);
        assert!(p.sl < 16 && p.mtu < 64 && p.rate < 64 && p.packet_life_time < 64);
        assert!(p.mtu_selector < 4 && p.rate_selector < 4 && p.packet_life_time_selector < 4);
    }
}

#[cfg(test)]
#[path = "../../../fuzz/seeds.rs"]
mod seeds;

#[cfg(test)]
mod tests {
    use super::seeds::seeds;
    use super::*;

    #[test]
    fn event_seeds_decode() {
        let null = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let chan = Channel::for_test(null);
        for (name, b) in seeds("cm_events") {
            events(&b);
            let raw: rdma_ucm_event_resp = padded(&b);
            let ev = CmEvent::decode(raw, &chan);
            match name.as_str() {
                "connect_request" => {
                    assert!(ev.new_id().is_some());
                    assert_eq!(&ev.private_data()[..12], b"client hello");
                }
                "established_then_disconnected" => {
                    assert_eq!(ev.conn().unwrap().qp_num, 0x1234);
                    assert_eq!(ev.ece(), (0x15b3, 5));
                }
                "rejected_and_addr_error" => {
                    assert_eq!(ev.reject_reason(), Some(RejectReason::CONSUMER_DEFINED))
                }
                "ud_established" => {
                    let ud = ev.ud().unwrap();
                    assert_eq!((ud.qp_num, ud.qkey), (0x55, 0x1111_1111));
                    assert_eq!(ev.private_data(), b"ud data");
                }
                "user_event_after_rejected" => {
                    // The fuzzer's find (its crash before the fix): a USER event, rdma-core
                    // 60's WRITE_CM_EVENT, carries an argument and neither parameter view.
                    assert_eq!(ev.kind(), CmEventKind::REJECTED);
                    let user: rdma_ucm_event_resp = padded(&b[size_of::<rdma_ucm_event_resp>()..]);
                    let u = CmEvent::decode(user, &chan);
                    assert_eq!(u.kind(), CmEventKind::USER);
                    assert!(u.arg().is_some() && u.conn().is_none() && u.ud().is_none());
                }
                other => panic!("a seed without a check: {other}"),
            }
        }
    }

    #[test]
    fn address_and_query_seeds_decode() {
        for (name, b) in seeds("cm_addresses") {
            addresses(&b);
            let want = match name.as_str() {
                "ipv4" | "sized_ipv4" => "10.10.0.1:7471",
                "ipv6" => "[::1]:7471",
                "ib" => "ib:::ffff:10.10.0.1 sid 0x1061d2f",
                other => panic!("a seed without a check: {other}"),
            };
            let at = if name == "sized_ipv4" { 4 } else { 0 };
            assert_eq!(addr::decode(&b[at..]).to_string(), want, "{name}");
        }
        for (name, b) in seeds("cm_queries") {
            queries(&b);
            match name.as_str() {
                "query_addr" => {
                    let q = AddrQuery::from_raw(&padded(&b));
                    assert_eq!(q.src.to_string(), "10.10.0.1:7471");
                    assert_eq!(q.node_guid_string(), "5054:00ff:fe12:3456");
                }
                "path_record" => {
                    let p = decode_path_resp(&b);
                    assert_eq!(p.len(), 1);
                    assert_eq!((p[0].flow_label, p[0].mtu_bytes()), (0x12345, Some(1024)));
                }
                other => panic!("a seed without a check: {other}"),
            }
        }
    }
}
