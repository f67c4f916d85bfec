//! Queues shared between threads: posting and polling one QP, its CQs or an SRQ from
//! several threads at once.

use super::*;

/// Work requests a thread may have outstanding on one queue of [`threads_share_queues`]: a
/// request counts from its post until its completion is polled.
struct Credits(std::sync::atomic::AtomicUsize);

impl Credits {
    fn take(&self) -> bool {
        use std::sync::atomic::Ordering::{AcqRel, Relaxed};
        self.0
            .fetch_update(AcqRel, Relaxed, |c| c.checked_sub(1))
            .is_ok()
    }
    fn give(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Threads share one QP, its CQs and (in the SRQ variant) one SRQ, as the `Sync` objects
/// allow: three threads post inline sends to the same send queue, two post receives to the
/// same receive queue (or SRQ), one thread polls each CQ. The queues hold 15 requests and the
/// posters may have 32 outstanding, so they keep finding a queue full and retrying while the
/// kernel drains it. Every send and receive must complete exactly once, and each sender's
/// messages must arrive in the order that thread posted them: a WQE overwritten or published
/// twice by two posters racing on one ring would break one or the other.
///
/// The credits are what keeps the CQs from overflowing: rxe frees a work queue slot when the
/// kernel completes the request, before its completion is polled, so a queue that accepts a
/// post says nothing about room in the CQ (with 64-entry CQs and only the queue-full
/// retries, this test overflowed both CQs at 127 completions and stalled). A request counts
/// against its CQ until it is polled, as the verbs rules have it.
fn threads_share_queues(t: &Topo, use_srq: bool) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    const SENDERS: u64 = 3;
    // The concurrency is what is tested, not the count.
    const PER_SENDER: u64 = 100;
    const TOTAL: usize = (SENDERS * PER_SENDER) as usize;
    const SLOT: usize = 64;
    const DEPTH: u32 = 8;
    const OUTSTANDING: usize = 32;
    const LIMIT: Duration = Duration::from_secs(60);
    const _: () = assert!(TOTAL * SLOT <= MR_LEN);
    let sa = Side::open(&t.dev_a);
    let sb = Side::open(&t.dev_b);
    let srq = use_srq.then(|| {
        Srq::create(
            &sb.pd,
            SrqAttr {
                max_wr: DEPTH,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap_or_else(|e| panic!("create SRQ: {e}"))
    });
    let (ca, cb) = (cq(&sa, 64, None), cq(&sb, 64, None));
    let qa = qp(&sa, QpInit::rc(&ca, caps(DEPTH, 1, 1, 64)));
    let rq_depth = if use_srq { 0 } else { DEPTH };
    let qb = qp(
        &sb,
        QpInit {
            srq: srq.clone(),
            ..QpInit::rc(&cb, caps(DEPTH, rq_depth, 1, 64))
        },
    );
    rc_connect(&qa, &sa, qb.qp_num(), sb.gid, NORMAL);
    rc_connect(&qb, &sb, qa.qp_num(), sa.gid, NORMAL);
    let mb = reg(&sb.pd, MR_LEN, ALL_ACCESS);
    let (send_credits, recv_credits) = (
        Credits(AtomicUsize::new(OUTSTANDING)),
        Credits(AtomicUsize::new(OUTSTANDING)),
    );
    // Progress, for the message of a run that does not finish.
    let posted: [AtomicUsize; SENDERS as usize] = Default::default();
    let (nfull, nsent, nrposted, nrecv) = (
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    );
    let start = Instant::now();
    let in_time = |what: &str| {
        assert!(
            start.elapsed() < LIMIT,
            "{what}: not done after {LIMIT:?}: sends posted per thread {:?}, send \
             completions {}, receives posted {}, receive completions {}",
            posted.iter().map(|p| p.load(Relaxed)).collect::<Vec<_>>(),
            nsent.load(Relaxed),
            nrposted.load(Relaxed),
            nrecv.load(Relaxed)
        );
        // Sleep, not spin: seven threads yielding on the guest's two vCPUs starve the kernel
        // work of rxe (its requester and completer) under emulation.
        std::thread::sleep(Duration::from_micros(200));
    };
    let full = |e: &PostError| {
        let f = e.posted() == 0 && errno(e) == Some(12);
        if f {
            nfull.fetch_add(1, Relaxed);
        }
        f
    };

    let (sent, arrived) = std::thread::scope(|sc| {
        for tid in 0..SENDERS {
            let (qa, credits, posted) = (&qa, &send_credits, &posted[tid as usize]);
            let (in_time, full) = (&in_time, &full);
            sc.spawn(move || {
                for seq in 0..PER_SENDER {
                    // Inline: the bytes are copied into the WQE during the post.
                    let msg = (tid << 32 | seq).to_ne_bytes();
                    let sge = [Sge {
                        addr: msg.as_ptr() as u64,
                        length: msg.len() as u32,
                        lkey: 0,
                    }];
                    let wr = SendWr {
                        flags: SendFlags::SIGNALED | SendFlags::INLINE,
                        ..SendWr::send(tid << 32 | seq, &sge)
                    };
                    while !credits.take() {
                        in_time("sender, waiting for a send completion");
                    }
                    while let Err(e) = post_send_raw(qa, &[wr]) {
                        assert!(full(&e), "sender {tid}, message {seq}: {e}");
                        in_time("sender, send queue full");
                    }
                    posted.fetch_add(1, Relaxed);
                }
            });
        }
        for half in 0..2 {
            let (qb, srq, mb, credits) = (&qb, &srq, &mb, &recv_credits);
            let (in_time, full, nrposted) = (&in_time, &full, &nrposted);
            sc.spawn(move || {
                for slot in (half..TOTAL).step_by(2) {
                    let sge = [mb.sge(slot * SLOT..(slot + 1) * SLOT)];
                    let wr = [recv(slot as u64, &sge)];
                    while !credits.take() {
                        in_time("receive poster, waiting for a receive completion");
                    }
                    loop {
                        let r = match srq {
                            Some(s) => post_srq(s, &wr),
                            None => post_recv(qb, &wr),
                        };
                        match r {
                            Ok(()) => break,
                            Err(e) => assert!(full(&e), "receive slot {slot}: {e}"),
                        }
                        in_time("receive poster, receive queue full");
                    }
                    nrposted.fetch_add(1, Relaxed);
                }
            });
        }
        let sends = sc.spawn(|| {
            let mut seen = std::collections::HashSet::new();
            let mut wc = [WorkCompletion::default(); 16];
            while seen.len() < TOTAL {
                let n = ca.poll(&mut wc);
                for w in &wc[..n] {
                    assert_wc(w, w.wr_id, WcOpcode::SEND);
                    assert!(seen.insert(w.wr_id), "send {:#x} completed twice", w.wr_id);
                    nsent.fetch_add(1, Relaxed);
                    send_credits.give();
                }
                if n == 0 {
                    in_time("send completions");
                }
            }
            seen
        });
        let recvs = sc.spawn(|| {
            let mut order = Vec::with_capacity(TOTAL);
            let mut wc = [WorkCompletion::default(); 16];
            while order.len() < TOTAL {
                let n = cb.poll(&mut wc);
                for w in &wc[..n] {
                    assert_wc(w, w.wr_id, WcOpcode::RECV);
                    assert_eq!(w.byte_len, 8, "receive slot {}", w.wr_id);
                    assert_eq!(w.qp_num, qb.qp_num());
                    order.push(w.wr_id as usize);
                    nrecv.fetch_add(1, Relaxed);
                    recv_credits.give();
                }
                if n == 0 {
                    in_time("receive completions");
                }
            }
            order
        });
        (sends.join().unwrap(), recvs.join().unwrap())
    });

    let want: std::collections::HashSet<u64> = (0..SENDERS)
        .flat_map(|tid| (0..PER_SENDER).map(move |seq| tid << 32 | seq))
        .collect();
    assert_eq!(sent, want, "the send completions");
    let mut slots = arrived.clone();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), TOTAL, "a receive slot completed twice");
    // Nothing is in flight now: the receive buffer can be read.
    let mut next = [0u64; SENDERS as usize];
    for slot in arrived {
        let v = u64_at(&mb.to_vec()[slot * SLOT..], 0);
        let (tid, seq) = ((v >> 32) as usize, v & 0xffff_ffff);
        assert!(tid < SENDERS as usize, "slot {slot} holds {v:#x}");
        assert_eq!(
            seq, next[tid],
            "sender {tid}'s messages out of order (slot {slot})"
        );
        next[tid] += 1;
    }
    assert_eq!(next, [PER_SENDER; SENDERS as usize]);
    assert_quiet(&ca, "send CQ after the run");
    assert_quiet(&cb, "receive CQ after the run");
    // The posters did meet full queues (what makes this a test of racing on a full ring).
    assert!(
        nfull.load(Relaxed) > 0,
        "no post found its queue full: the run did not exercise the full-queue retries"
    );
    eprintln!(
        "threads_share_queues (SRQ: {use_srq}): {} posts found their queue full",
        nfull.load(Relaxed)
    );
    drop((qa, qb));
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn threads_share_a_qp_and_its_cqs() {
    each_topo("threads_share_a_qp_and_its_cqs", |t| {
        threads_share_queues(t, false)
    });
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn threads_share_an_srq() {
    each_topo("threads_share_an_srq", |t| threads_share_queues(t, true));
}
