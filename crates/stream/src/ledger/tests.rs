//! The ledger's unit tests, without a device: what a peer sends is checked (overruns, credits,
//! reserved types), what is posted follows credits and target space, and random message
//! sequences keep the receive ring whole.

use super::*;
use crate::wire::{ConnData, FLAG_NET};

fn sizes() -> Sizes {
    Sizes {
        sbuf: 8192,
        rbuf: 8192,
        sq: 16,
        rq: 16,
        inline: 64,
        iomap: 2,
    }
}

fn peer(credits: u16, buf: u32) -> ConnData {
    ConnData {
        version: 1,
        flags: 0,
        credits,
        target_iomap_size: 0,
        target_sgl: RsSge {
            addr: 0x10_000,
            key: 7,
            length: 2,
        },
        data_buf: RsSge {
            addr: 0x20_000,
            key: 9,
            length: buf,
        },
    }
}

const NONE: fn(usize) -> RsSge = |_| panic!("no slot read expected");

#[test]
fn data_within_room_is_queued_and_read_in_order() {
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::DATA, 3000)), 3000, NONE);
    l.on_recv(Some(Msg::encode(MsgOp::DATA, 1096)), 1096, NONE);
    assert_eq!(l.fault, None);
    assert_eq!(l.queued(), 4096, "what FIONREAD reports");
    assert_eq!(l.take(100), Some((0, 100)));
    assert_eq!(l.queued(), 3996);
    assert_eq!(l.take(5000), Some((100, 2900)));
    assert_eq!(l.queued(), 1096);
    assert_eq!(l.take(5000), Some((3000, 1096)));
    assert_eq!(l.take(1), None);
    assert_eq!(l.queued(), 0);
    // The whole first half was read: a credit update with a new entry is due.
    assert!(l.credits_due());
    let u = l.credit_update(0x5000_0000, 0x42);
    let (bytes, at, key, _) = u.entry.unwrap();
    assert_eq!(
        RsSge::from_bytes(&bytes, false),
        RsSge {
            addr: 0x5000_0000 + 4096,
            key: 0x42,
            length: 4096
        }
    );
    // The peer's slot 1 first (slot 0 was the connection data's buffer).
    assert_eq!((at, key), (0x10_000 + 16, 7));
    assert_eq!(
        Msg::decode(u.imm),
        Msg {
            op: MsgOp::SGL,
            data: 2 + 16
        }
    );
}

#[test]
fn overrun_is_refused() {
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    // Only half the ring (4096) is published at first.
    l.on_recv(Some(Msg::encode(MsgOp::DATA, 4097)), 4097, NONE);
    assert_eq!(
        l.fault,
        Some(Fault::Wire(WireError::Overrun {
            len: 4097,
            room: 4096
        }))
    );
    assert!(!l.readable && !l.writable && !l.has_data());
    // Lying sizes of every kind never panic.
    for len in [u32::MAX, 1 << 29, 8193, 4096 + 1] {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp::DATA, len)), len, NONE);
        assert!(l.fault.is_some() || len & ((1 << 29) - 1) <= 4096, "{len}");
    }
}

#[test]
fn more_messages_than_credits_are_refused() {
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    for _ in 0..17 {
        l.on_recv(Some(Msg::encode(MsgOp::DATA, 1)), 1, NONE);
    }
    assert_eq!(l.fault, None);
    l.on_recv(Some(Msg::encode(MsgOp::DATA, 1)), 1, NONE);
    assert_eq!(l.fault, Some(Fault::Wire(WireError::TooManyMessages(18))));
}

#[test]
fn reserved_types_missing_immediate_and_odd_sgl_writes_are_refused() {
    for op in [1u8, 2, 3, 5] {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        l.on_recv(Some(Msg::encode(MsgOp(op), 0)), 0, NONE);
        assert_eq!(l.fault, Some(Fault::Wire(WireError::ReservedOp(MsgOp(op)))));
    }
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(None, 0, NONE);
    assert_eq!(l.fault, Some(Fault::Wire(WireError::NoImmediate)));
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::SGL, 3)), 17, NONE);
    assert_eq!(l.fault, Some(Fault::Wire(WireError::SglWriteLength(17))));
    // Unknown control values are ignored, as rsockets does; so are iomap updates of an
    // entry of our table.
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::CTRL, 99)), 0, NONE);
    l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 1)), 24, NONE);
    assert_eq!(l.fault, None);
    // An update beyond our table (2 entries here; none without RDMA_IOMAPSIZE), or one
    // whose write is not one entry, ends the stream naming it.
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 2)), 24, NONE);
    let want = WireError::IomapIndex { index: 2, size: 2 };
    assert_eq!(l.fault, Some(Fault::Wire(want.clone())));
    assert!(want.to_string().contains("entry 2"), "{want}");
    let mut no_table = sizes();
    no_table.iomap = 0;
    let mut l = Ledger::new(no_table, &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 0)), 24, NONE);
    assert_eq!(
        l.fault,
        Some(Fault::Wire(WireError::IomapIndex { index: 0, size: 0 }))
    );
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::IOMAP_SGL, 0)), 16, NONE);
    assert_eq!(l.fault, Some(Fault::Wire(WireError::IomapWriteLength(16))));
    // A direct write's local tag is no message.
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::WRITE, 8)), 8, NONE);
    assert_eq!(
        l.fault,
        Some(Fault::Wire(WireError::ReservedOp(MsgOp::WRITE)))
    );
}

#[test]
fn iomap_announcements_and_direct_writes() {
    let mut p = peer(3, 4096);
    p.flags = crate::wire::FLAG_IOMAP;
    p.target_iomap_size = 4;
    let mut l = Ledger::new(sizes(), &p);
    // The entry goes after the peer's 2-entry SGL, under its rkey, and takes a credit
    // and 24 bytes of ring (INLINE: 24 <= 64).
    let t = l.plan_iomap(3);
    assert_eq!(t.remote, (0x10_000 + 2 * 16 + 3 * 24, 7));
    assert_eq!((t.first, t.second, t.inline), ((0, 24), 0, true));
    assert_eq!(
        Msg::decode(t.imm),
        Msg {
            op: MsgOp::IOMAP_SGL,
            data: 3
        }
    );
    assert_eq!(l.sseq_no, 1);
    // A direct write: no credit, bounded by the room left in the mapping.
    let d = l.plan_direct(10_000, MAX_TRANSFER, 100, (0xaa_0000, 5));
    assert_eq!(
        (d.first, d.second, d.remote),
        ((24, 100), 0, (0xaa_0000, 5))
    );
    assert_eq!(
        Msg::decode(d.imm),
        Msg {
            op: MsgOp::WRITE,
            data: 100
        }
    );
    assert_eq!(l.sseq_no, 1);
    // Ring space comes back with the completions.
    l.on_send(t.imm as u64, true, &"ok");
    l.on_send(d.imm as u64, true, &"ok");
    assert_eq!(l.sbuf_avail, 8192);
    assert!(l.all_sends_done());
    // A direct write wraps the ring like data does.
    l.sbuf_head = 8100;
    let d = l.plan_direct(10_000, MAX_TRANSFER, 200, (0, 0));
    assert_eq!((d.first, d.second), ((8100, 92), 108));
    assert!(!d.inline);
    // Credits do not bound direct writes, the send queue does.
    let mut l = Ledger::new(sizes(), &p);
    for _ in 0..3 {
        l.plan(1, MAX_TRANSFER);
    }
    assert!(!l.can_send() && l.can_write_direct());
    for _ in 0..(16 - CTRL_SLOTS - 3) {
        l.plan_direct(1, MAX_TRANSFER, 1, (0, 0));
    }
    assert!(!l.can_write_direct());
}

#[test]
fn mapping_slots_and_announcements_go_before_data() {
    let mut p = peer(16, 4096);
    p.flags = crate::wire::FLAG_IOMAP;
    p.target_iomap_size = 2;
    let mut l = Ledger::new(sizes(), &p);
    assert_eq!(l.peer_iomap_entries(), 2);
    assert_eq!(
        (l.reserve_slot(), l.reserve_slot(), l.reserve_slot()),
        (Some(0), Some(1), None)
    );
    let e = |o| IoMapEntry {
        offset: o,
        sge: RsSge {
            addr: 0x9000,
            key: 3,
            length: 64,
        },
    };
    l.fill_slot(1, e(100));
    l.fill_slot(0, e(200));
    // Queued announcements hold data back until they are posted, in order.
    assert!(l.is_pending(1) && !l.can_send());
    let (t, got) = l.next_announcement().unwrap();
    assert_eq!((Msg::decode(t.imm).data, got), (1, e(100)));
    // Slot 0 is unmapped before its announcement went out: it is dropped.
    l.free_slot(0);
    assert!(!l.is_pending(0) && l.next_announcement().is_none());
    assert!(l.can_send());
    assert_eq!(l.reserve_slot(), Some(0));
    // A peer without a table (flag clear, whatever the size says) gives no slots.
    p.flags = 0;
    let mut l = Ledger::new(sizes(), &p);
    assert_eq!((l.peer_iomap_entries(), l.reserve_slot()), (0, None));
}

#[test]
fn sends_stop_at_credits_and_target_space_and_resume_on_updates() {
    let mut l = Ledger::new(sizes(), &peer(2, 3000));
    assert!(l.can_send());
    let t = l.plan(10_000, MAX_TRANSFER);
    assert_eq!(t.first, (0, 3000));
    assert_eq!((t.second, t.remote), (0, (0x20_000, 9)));
    assert_eq!(
        Msg::decode(t.imm),
        Msg {
            op: MsgOp::DATA,
            data: 3000
        }
    );
    // Target entry 0 is used up and entry 1 is still empty: nothing more to send.
    assert!(!l.can_send());
    // The peer publishes slot 1 and grants credits up to 5.
    l.on_recv(Some(Msg::encode(MsgOp::SGL, 5)), 16, |i| {
        assert_eq!(i, 1);
        RsSge {
            addr: 0x30_000,
            key: 11,
            length: 100,
        }
    });
    assert!(l.can_send());
    let t = l.plan(10_000, MAX_TRANSFER);
    assert_eq!((t.first, t.remote), ((3000, 100), (0x30_000, 11)));
    assert!(!l.can_send());
    // Slot 0 next; credits: sseq_no is 2, the limit 2 would stop us.
    l.on_recv(Some(Msg::encode(MsgOp::SGL, 2)), 16, |i| {
        assert_eq!(i, 0);
        RsSge {
            addr: 0x40_000,
            key: 12,
            length: 9000,
        }
    });
    assert!(!l.can_send(), "no credits left");
    l.on_recv(Some(Msg::encode(MsgOp::SGL, 9)), 0, NONE);
    assert!(l.can_send());
    // The ring (8192 bytes) has 8192 - 3100 free; a transfer wraps at its end.
    let t = l.plan(10_000, MAX_TRANSFER);
    assert_eq!(t.first, (3100, 5092));
    assert_eq!(t.second, 0);
    assert!(!l.can_send(), "ring full");
    l.on_send(Msg::encode(MsgOp::DATA, 3000) as u64, true, &"ok");
    let t = l.plan(10_000, MAX_TRANSFER);
    assert_eq!((t.first, t.second), ((0, 3000), 0));
}

/// Writes of 32,000 bytes while earlier transfers are still in flight: the first write
/// ramps up from `OLAP_START` (five transfers), every later one goes out as one transfer;
/// with the ramp restarted in every write (rsockets' `rsend`), each was five.
#[test]
fn writes_while_sends_are_in_flight_keep_their_transfer_size() {
    let big = Sizes {
        sbuf: 1 << 20,
        sq: 384,
        ..sizes()
    };
    let mut l = Ledger::new(big, &peer(1000, 1 << 30));
    let mut inflight = VecDeque::new();
    let mut per_write = Vec::new();
    for _ in 0..20 {
        let (mut left, mut n) = (32_000usize, 0);
        l.start_write();
        while left > 0 {
            assert!(l.can_send());
            let olen = l.next_olen();
            let t = l.plan(left, olen);
            left -= (t.first.1 + t.second) as usize;
            inflight.push_back(t.imm);
            n += 1;
        }
        per_write.push(n);
        // The oldest transfer completes: the pipe stays busy.
        let done = inflight.pop_front().unwrap();
        l.on_send(done as u64, true, &"ok");
    }
    assert_eq!(per_write[0], 5, "{per_write:?}");
    assert!(per_write[1..].iter().all(|&n| n == 1), "{per_write:?}");
    // Once every transfer has completed, a write starts small again (its first bytes go
    // out at once).
    while let Some(imm) = inflight.pop_front() {
        l.on_send(imm as u64, true, &"ok");
    }
    l.start_write();
    let olen = l.next_olen();
    assert_eq!(olen, OLAP_START);
    l.plan(32_000, olen);
    assert_eq!(l.next_olen(), 2 * OLAP_START);
}

/// A writer that always has more to send and keeps the 128 KiB ring full, one
/// completion at a time: after the first ring's worth, every transfer is a full 64 KiB.
/// Posting as soon as `can_send` (2 KiB free) held, each completion's bytes went out
/// again as one transfer of the same size, so the ramp's 2 KiB to 32 KiB transfers
/// recurred for as long as the ring stayed full.
#[test]
fn a_full_ring_is_refilled_in_large_transfers() {
    let s = Sizes {
        sbuf: 128 * 1024,
        sq: 384,
        ..sizes()
    };
    let mut l = Ledger::new(s, &peer(60_000, 1 << 30));
    let mut inflight = VecDeque::new();
    let mut lens = Vec::new();
    l.start_write();
    for _ in 0..100 {
        while l.can_send_for(usize::MAX) {
            let olen = l.next_olen();
            let t = l.plan(1 << 30, olen);
            lens.push(t.first.1 + t.second);
            inflight.push_back(t.imm);
        }
        let done = inflight.pop_front().unwrap();
        l.on_send(done as u64, true, &"ok");
    }
    assert_eq!(&lens[..6], &[2048, 4096, 8192, 16384, 32768, 65536]);
    assert!(
        lens[7..].iter().all(|&n| n == MAX_TRANSFER),
        "{:?}",
        &lens[..20]
    );
    // A short write still goes out at once (a transfer as large as it needs fits).
    let done = inflight.pop_front().unwrap();
    l.on_send(done as u64, true, &"ok");
    assert!(l.can_send_for(100));
}

#[test]
fn shutdown_and_disconnect_messages() {
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::DATA, 5)), 5, NONE);
    l.on_recv(Some(Msg::encode(MsgOp::CTRL, Ctrl::SHUTDOWN.0)), 0, NONE);
    // Queued data stays readable, then EOF; we may still send.
    assert!(l.has_data() && !l.readable && l.writable);
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    l.on_recv(Some(Msg::encode(MsgOp::CTRL, Ctrl::DISCONNECT.0)), 0, NONE);
    assert!(!l.readable && !l.writable && !l.connected && l.fault.is_none());
    assert!(!l.credits_due());
}

#[test]
fn failed_send_completion_ends_the_stream() {
    let mut l = Ledger::new(sizes(), &peer(16, 4096));
    let t = l.plan(10, MAX_TRANSFER);
    assert!(t.inline);
    l.on_send(t.imm as u64, false, &"RETRY_EXC_ERR");
    assert!(matches!(l.fault, Some(Fault::Io(ref s)) if s.contains("RETRY_EXC_ERR")));
    assert!(l.all_sends_done());
}

#[test]
fn entries_for_a_big_endian_peer_are_swapped() {
    let mut p = peer(16, 4096);
    p.flags = FLAG_NET;
    let mut l = Ledger::new(sizes(), &p);
    l.on_recv(Some(Msg::encode(MsgOp::DATA, 4096)), 4096, NONE);
    while l.take(usize::MAX).is_some() {}
    let (bytes, ..) = l.credit_update(0x1000, 5).entry.unwrap();
    assert_eq!(RsSge::from_bytes(&bytes, true).length, 4096);
}

/// Fuzz-style: a hostile peer's arbitrary message sequence (fixed-seed generator) with
/// reads and credit updates interleaved never panics, never hands out a range outside
/// the ring, and keeps the ring accounting whole until it faults.
#[test]
fn arbitrary_message_sequences_keep_the_ring_whole() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2_000 {
        let mut l = Ledger::new(sizes(), &peer(16, 4096));
        for _ in 0..64 {
            let r = next();
            let imm = match r % 5 {
                0 => Msg::encode(MsgOp::DATA, (r >> 8) as u32 % 5000),
                1 => r as u32,
                2 => Msg::encode(MsgOp::SGL, (r >> 8) as u32),
                3 => Msg::encode(MsgOp::IOMAP_SGL, (r >> 8) as u32 % 4),
                _ => Msg::encode(MsgOp::CTRL, (r >> 8) as u32 % 4),
            };
            let bl = if r & 0x100 != 0 {
                if r & 0x200 != 0 {
                    24
                } else {
                    16
                }
            } else {
                (r >> 40) as u32 % 20
            };
            l.on_recv(Some(imm), bl, |_| RsSge {
                addr: r,
                key: 1,
                length: (r >> 3) as u32,
            });
            if let Some((off, n)) = l.take((r >> 20) as usize % 9000 + 1) {
                assert!(off + n <= 8192);
            }
            if l.credits_due() {
                l.credit_update(0, 0);
            }
            if l.fault.is_none() {
                let queued: u32 = l.rmsg.iter().sum();
                assert_eq!(l.rbuf_avail + l.room + queued, 8192);
            }
            if l.can_send() {
                let t = l.plan((r >> 30) as usize % 70_000 + 1, MAX_TRANSFER);
                assert!(t.first.0 + t.first.1 <= 8192 && t.second <= t.first.0);
            }
        }
    }
}

/// A transfer from the caller's registration: the same DATA message as a ring transfer, a
/// credit, a send queue entry and target space, no ring space; its completion (flagged
/// `WR_ID_REG`) gives back the queue entry only and counts as done, in order.
#[test]
fn registered_transfers_take_credits_but_no_ring() {
    let mut l = Ledger::new(sizes(), &peer(2, 100_000));
    let ring = l.sbuf_avail;
    assert!(l.can_send_registered());
    let t = l.plan_registered(70_000);
    assert_eq!(t.first, (0, MAX_TRANSFER), "at most MAX_TRANSFER");
    assert_eq!(t.second, 0);
    assert_eq!(t.remote, (0x20_000, 9));
    assert_eq!(t.imm, Msg::encode(MsgOp::DATA, MAX_TRANSFER));
    assert!(!t.inline);
    assert_eq!(l.sbuf_avail, ring, "no ring space taken");
    let t2 = l.plan_registered(70_000 - MAX_TRANSFER as usize);
    assert_eq!(t2.first, (0, 70_000 - MAX_TRANSFER));
    assert_eq!(t2.remote, (0x20_000 + MAX_TRANSFER as u64, 9));
    // Two credits only: the third transfer waits for the peer's update.
    let mut l = Ledger::new(sizes(), &peer(2, 100_000));
    l.plan_registered(10);
    l.plan_registered(10);
    assert!(!l.can_send_registered(), "out of credits");
    assert_eq!((l.reg_posted, l.reg_done), (2, 0));
    let sqe = l.sqe_avail;
    l.on_send(Msg::encode(MsgOp::DATA, 10) as u64 | WR_ID_REG, true, &"ok");
    assert_eq!((l.reg_done, l.sqe_avail, l.sbuf_avail), (1, sqe + 1, ring));
    // A failed one ends the stream, and still counts as done (the device is through with it).
    l.on_send(
        Msg::encode(MsgOp::DATA, 10) as u64 | WR_ID_REG,
        false,
        &"retry exceeded",
    );
    assert_eq!(l.reg_done, 2);
    assert!(matches!(l.fault, Some(Fault::Io(_))));
}
