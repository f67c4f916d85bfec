//! The rxe post and poll paths do not allocate: a counting global allocator watches this
//! thread while work requests are posted (SGE lists, inline data, a full queue) and completions
//! polled (batch, iterator, single).

use super::allocs::allocs;

mod rxe {
    use super::allocs;
    use crate::rxe::sim::SimQueue;
    use crate::rxe::{QueueKind, RxeCq, RxeQpType, RxeRq, RxeSq, RxeSqConfig};
    use rverbs_uverbs::RawWc;
    use rverbs_uverbs::{RecvWr, SendFlags, SendOp, SendWr, Sge, WorkCompletion};

    #[test]
    fn post_and_poll_do_not_allocate() {
        let sq_mem = SimQueue::new(9, 8).unwrap();
        let rq_mem = SimQueue::new(7, 8).unwrap();
        let mut cq_mem = SimQueue::new(7, 16).unwrap();
        // SAFETY: the queues outlive the views (declared first, dropped last).
        let (sqv, rqv, cqv) = unsafe {
            (
                sq_mem.view(QueueKind::Send).unwrap(),
                rq_mem.view(QueueKind::Recv).unwrap(),
                cq_mem.view(QueueKind::Completion).unwrap(),
            )
        };
        let mut sq = RxeSq::new(
            sqv,
            RxeSqConfig {
                qp_type: RxeQpType::Rc,
                max_sge: 4,
                max_inline: 64,
                sig_all: true,
            },
        )
        .unwrap();
        let mut rq = RxeRq::new(rqv, 4).unwrap();
        let mut cq = RxeCq::new(cqv).unwrap();
        let mut payload = [7u8; 40];
        let sges = [
            Sge {
                addr: 0x1000,
                length: 100,
                lkey: 1,
            },
            Sge {
                addr: 0x2000,
                length: 200,
                lkey: 1,
            },
        ];
        let inline = [Sge {
            addr: payload.as_mut_ptr() as u64,
            length: 40,
            lkey: 0,
        }];
        let wrs = [
            SendWr::send(1, &sges),
            SendWr {
                wr_id: 2,
                op: SendOp::RdmaWriteWithImm {
                    remote_addr: 0x9000,
                    rkey: 3,
                    imm: 5,
                },
                sge: &inline,
                flags: SendFlags::INLINE,
                ud: None,
            },
            SendWr::send(3, &sges[..1]),
        ];
        let rwrs = [RecvWr {
            wr_id: 9,
            sge: &sges,
        }; 3];
        let mut out = [WorkCompletion::default(); 4];

        let before = allocs();
        // SAFETY: nothing dereferences the non-inline SGEs; the inline payload is live.
        unsafe {
            assert_eq!(sq.post(&wrs).unwrap(), 3);
            assert_eq!(rq.post(&rwrs).unwrap(), 3);
            // Fill the send queue up: the error path (a typed PostFault) allocates nothing
            // either.
            assert_eq!(sq.post(&wrs).unwrap(), 3);
            let e = sq.post(&wrs).unwrap_err();
            assert_eq!(e.posted(), 1);
        }
        let mut k = cq_mem.kernel();
        for i in 0..10 {
            assert!(k.produce_cqe(&RawWc {
                wr_id: i,
                ..Default::default()
            }));
        }
        let mut seen = 0;
        seen += cq.poll(&mut out);
        seen += cq.iter().take(3).count();
        seen += usize::from(cq.poll_one().is_some());
        for _wc in cq.iter() {
            seen += 1;
        }
        let after = allocs();
        assert_eq!(seen, 10);
        assert_eq!(after - before, 0, "the post/poll path allocated");
    }
}
