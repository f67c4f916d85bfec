//! rxe rings against a simulated kernel running in another thread with the kernel's index
//! protocol: small rings wrapped many times, producers and consumers racing. Counts are cut
//! down under Miri, which checks the orderings for data races.

mod rxe {
    use std::thread;

    use crate::rxe::sim::SimQueue;
    use crate::rxe::{QueueKind, RxeCq, RxeQpType, RxeRq, RxeSq, RxeSqConfig};
    use rverbs_uverbs::PostFault;
    use rverbs_uverbs::RawWc;
    use rverbs_uverbs::{
        RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
    };

    const N: u64 = if cfg!(miri) { 40 } else { 200_000 };

    fn cqe(i: u64) -> RawWc {
        RawWc {
            wr_id: i,
            status: (i % 3) as u32,
            opcode: if i % 2 == 0 { 0 } else { 128 },
            byte_len: i as u32,
            ex: (i as u32).wrapping_mul(7).to_be(),
            qp_num: 0x11,
            src_qp: (i as u32) & 0xff_ffff,
            wc_flags: if i % 2 == 0 { 0 } else { 1 | 2 },
            ..Default::default()
        }
    }

    fn check(wc: &WorkCompletion, i: u64) {
        assert_eq!(wc.wr_id, i);
        assert_eq!(wc.status, WcStatus((i % 3) as u32));
        assert_eq!(wc.byte_len, i as u32);
        assert_eq!(wc.src_qp, (i as u32) & 0xff_ffff);
        if i % 2 == 1 {
            assert_eq!(wc.opcode, WcOpcode::RECV);
            assert_eq!(wc.imm(), Some((i as u32).wrapping_mul(7)));
        } else {
            assert_eq!(wc.opcode, WcOpcode::SEND);
            assert_eq!(wc.imm(), None);
        }
    }

    #[test]
    fn cq_poll_against_kernel_thread() {
        let mut q = SimQueue::new(6, 8).unwrap();
        // SAFETY: `q` outlives the view; this thread is the only user side.
        let mut cq = RxeCq::new(unsafe { q.view(QueueKind::Completion) }.unwrap()).unwrap();
        let mut k = q.kernel();
        thread::scope(|s| {
            s.spawn(move || {
                for i in 0..N {
                    while !k.produce_cqe(&cqe(i)) {
                        thread::yield_now();
                    }
                }
            });
            let mut next = 0u64;
            let mut out = [WorkCompletion::default(); 5];
            let mut round = 0usize;
            while next < N {
                // Alternate batch polling, the iterator and single polls.
                match round % 3 {
                    0 => {
                        let want = 1 + round % out.len();
                        let n = cq.poll(&mut out[..want]);
                        for wc in &out[..n] {
                            check(wc, next);
                            next += 1;
                        }
                    }
                    1 => {
                        for wc in cq.iter() {
                            check(&wc, next);
                            next += 1;
                        }
                    }
                    _ => {
                        if let Some(wc) = cq.poll_one() {
                            check(&wc, next);
                            next += 1;
                        }
                    }
                }
                round += 1;
                thread::yield_now();
            }
        });
        assert_eq!(cq.pending(), 0);
        assert_eq!(q.producer(), q.consumer());
        assert_eq!(u64::from(q.producer()), N % 8);
    }

    #[test]
    fn sq_post_against_kernel_thread() {
        let mut q = SimQueue::new(9, 4).unwrap();
        // SAFETY: `q` outlives the view; this thread is the only user side.
        let view = unsafe { q.view(QueueKind::Send) }.unwrap();
        let mut sq = RxeSq::new(
            view,
            RxeSqConfig {
                qp_type: RxeQpType::Rc,
                max_sge: 3,
                max_inline: 64,
                sig_all: false,
            },
        )
        .unwrap();
        let mut k = q.kernel();
        thread::scope(|s| {
            let kernel = s.spawn(move || {
                let mut w = [0u8; 512];
                let mut i = 0u64;
                while i < N {
                    if !k.consume(&mut w) {
                        thread::yield_now();
                        continue;
                    }
                    let u32_at = |o: usize| u32::from_ne_bytes(w[o..o + 4].try_into().unwrap());
                    let u64_at = |o: usize| u64::from_ne_bytes(w[o..o + 8].try_into().unwrap());
                    assert_eq!(u64_at(0), i, "wr_id");
                    assert_eq!(u32_at(176), i as u32, "ssn");
                    let nsge = (i % 4) as u32;
                    if nsge == 3 {
                        // Inline: 24 bytes of pattern.
                        assert_eq!(u32_at(16), 8, "INLINE");
                        assert_eq!(u32_at(184), 24);
                        assert!(w[208..232].iter().all(|&b| b == i as u8));
                    } else {
                        assert_eq!(u32_at(12), 0, "RDMA_WRITE");
                        assert_eq!(u64_at(24), i * 8, "remote_addr");
                        assert_eq!(u64_at(152), i * 8, "iova");
                        assert_eq!(u32_at(196), nsge, "num_sge");
                        for j in 0..nsge as usize {
                            assert_eq!(u64_at(208 + 16 * j), i + j as u64);
                            assert_eq!(u32_at(208 + 16 * j + 8), j as u32 + 1);
                        }
                        assert_eq!(u32_at(184), (1..=nsge).sum::<u32>(), "length");
                    }
                    i += 1;
                }
            });
            let mut i = 0u64;
            while i < N {
                let mut pattern = [i as u8; 24];
                let sges: Vec<Sge> = (0..3)
                    .map(|j| Sge {
                        addr: i + j,
                        length: j as u32 + 1,
                        lkey: j as u32 + 1,
                    })
                    .collect();
                let inline = [Sge {
                    addr: pattern.as_mut_ptr() as u64,
                    length: 24,
                    lkey: 0,
                }];
                let nsge = (i % 4) as usize;
                let wr = if nsge == 3 {
                    SendWr {
                        wr_id: i,
                        op: SendOp::Send,
                        sge: &inline,
                        flags: SendFlags::INLINE,
                        ud: None,
                    }
                } else {
                    SendWr {
                        wr_id: i,
                        op: SendOp::RdmaWrite {
                            remote_addr: i * 8,
                            rkey: 1,
                        },
                        sge: &sges[..nsge],
                        flags: SendFlags::SIGNALED,
                        ud: None,
                    }
                };
                // SAFETY: the simulated kernel never dereferences SGE addresses; the inline
                // pattern is live during the call.
                match unsafe { sq.post(&[wr]) } {
                    Ok(1) => i += 1,
                    Ok(n) => panic!("posted {n}"),
                    Err(e) => {
                        assert_eq!(e.posted(), 0);
                        assert_eq!(e.fault().unwrap(), PostFault::QueueFull { outstanding: 3 });
                        thread::yield_now();
                    }
                }
            }
            kernel.join().unwrap();
        });
        assert_eq!(sq.free_slots(), 3);
    }

    #[test]
    fn rq_batches_against_kernel_thread() {
        let mut q = SimQueue::new(7, 8).unwrap();
        // SAFETY: `q` outlives the view; this thread is the only user side.
        let mut rq = RxeRq::new(unsafe { q.view(QueueKind::Recv) }.unwrap(), 2).unwrap();
        let mut k = q.kernel();
        thread::scope(|s| {
            s.spawn(move || {
                let mut w = [0u8; 128];
                let mut i = 0u64;
                while i < N {
                    if !k.consume(&mut w) {
                        thread::yield_now();
                        continue;
                    }
                    assert_eq!(u64::from_ne_bytes(w[0..8].try_into().unwrap()), i);
                    assert_eq!(
                        u32::from_ne_bytes(w[16..20].try_into().unwrap()),
                        i as u32 % 1000
                    );
                    assert_eq!(u32::from_ne_bytes(w[28..32].try_into().unwrap()), 1);
                    i += 1;
                }
            });
            let mut i = 0u64;
            while i < N {
                // Up to 5 at once; whatever fits goes in, the rest is retried.
                let batch = (N - i).min(5);
                let sges: Vec<[Sge; 1]> = (i..i + batch)
                    .map(|j| {
                        [Sge {
                            addr: j,
                            length: j as u32 % 1000,
                            lkey: 9,
                        }]
                    })
                    .collect();
                let wrs: Vec<RecvWr<'_>> = sges
                    .iter()
                    .enumerate()
                    .map(|(n, s)| RecvWr {
                        wr_id: i + n as u64,
                        sge: s,
                    })
                    .collect();
                // SAFETY: the simulated kernel never dereferences SGE addresses.
                match unsafe { rq.post(&wrs) } {
                    Ok(n) => i += n as u64,
                    Err(e) => {
                        assert!(matches!(e.fault(), Some(PostFault::QueueFull { .. })));
                        i += e.posted() as u64;
                        thread::yield_now();
                    }
                }
            }
        });
        assert_eq!(rq.free_slots(), 7);
    }
}

/// The doorbell's errors (the function siw's doorbell shares): the errno, the QP handle, and
/// rxe's hint when the kernel answers `EINVAL` (an eventfd refuses a 32-byte write with it).
#[test]
#[cfg_attr(miri, ignore = "Miri cannot run raw syscalls")]
fn rxe_doorbell_errors_name_the_qp_and_the_hint() {
    use rustix::event::{eventfd, EventfdFlags};
    let fd = eventfd(0, EventfdFlags::CLOEXEC).unwrap();
    let e = crate::rxe::doorbell::Doorbell::new(9, &crate::rxe::doorbell::RXE)
        .ring(std::os::fd::AsFd::as_fd(&fd))
        .unwrap_err();
    assert_eq!(
        rverbs_uverbs::Error::errno_of(&e),
        Some(rustix::io::Errno::INVAL)
    );
    let s = e.to_string();
    assert!(
        s.starts_with("rxe post send doorbell") && s.contains("QP handle 9 (is the QP in RTS?)"),
        "{s}"
    );
}
