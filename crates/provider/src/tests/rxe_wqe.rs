//! rxe send and receive WQEs as the kernel reads them: every opcode's bytes checked at the
//! offsets of the 6.1 uapi header (`rdma_user_rxe.h`, measured with a C probe: see
//! `rxe_abi_layout.rs`), limits and errors, the full-queue rule. Runs on simulated queues in
//! ordinary memory (and under Miri).

mod rxe {
    use std::io;

    use crate::rxe::abi::wr_opcode;
    use crate::rxe::sim::SimQueue;
    use crate::rxe::{QueueKind, RxeQpType, RxeRq, RxeSq, RxeSqConfig};
    use rustix::io::Errno;
    use rverbs_uverbs::OpKind;
    use rverbs_uverbs::{Error, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};
    use rverbs_uverbs::{PostError, PostFault, PostQueue};

    // Byte offsets in `struct rxe_send_wqe` (Linux 6.1 uapi, x86-64).
    const WR_ID: usize = 0;
    const WR_RESERVED: usize = 8;
    const OPCODE: usize = 12;
    const SEND_FLAGS: usize = 16;
    const EX: usize = 20;
    const U: usize = 24; // the wr union
    const STATUS: usize = 144;
    const STATE: usize = 148;
    const IOVA: usize = 152;
    const MASK: usize = 160;
    const FIRST_PSN: usize = 164;
    const LAST_PSN: usize = 168;
    const ACK_LENGTH: usize = 172;
    const SSN: usize = 176;
    const HAS_RD_ATOMIC: usize = 180;
    const DMA: usize = 184; // length, resid, cur_sge, num_sge, sge_offset, reserved
    const SEND_DATA: usize = 208;
    // `struct rxe_recv_wqe`.
    const RECV_DMA: usize = 16;
    const RECV_DATA: usize = 40;

    fn u16_at(b: &[u8], o: usize) -> u16 {
        u16::from_ne_bytes(b[o..o + 2].try_into().unwrap())
    }
    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_ne_bytes(b[o..o + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_ne_bytes(b[o..o + 8].try_into().unwrap())
    }

    /// Fills every element with 0xff, as if left over from earlier WQEs.
    fn dirty(q: &SimQueue) {
        let data = q.len() - 384;
        // SAFETY: the buffer is `q.len()` bytes and no view is in use yet.
        unsafe { std::ptr::write_bytes(q.base().as_ptr().add(384), 0xff, data) };
    }

    struct Sq {
        q: SimQueue,
        sq: RxeSq,
    }

    /// 512-byte elements, 8 slots (7 usable), max_sge 4, max_inline 128.
    fn sq(qp_type: RxeQpType, sig_all: bool) -> Sq {
        let q = SimQueue::new(9, 8).unwrap();
        dirty(&q);
        // SAFETY: `q` lives in the same struct and outlives the view's use.
        let view = unsafe { q.view(QueueKind::Send) }.unwrap();
        let sq = RxeSq::new(
            view,
            RxeSqConfig {
                qp_type,
                max_sge: 4,
                max_inline: 128,
                sig_all,
            },
        )
        .unwrap();
        Sq { q, sq }
    }

    impl Sq {
        fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<usize, PostError> {
            // SAFETY: the SGEs name no memory the simulated kernel touches, except inline
            // SGEs, which point at live test buffers.
            unsafe { self.sq.post(wrs) }
        }

        /// The next WQE the kernel would read (512 bytes).
        fn take(&mut self) -> Vec<u8> {
            let mut buf = vec![0u8; 512];
            assert!(self.q.kernel().consume(&mut buf), "no WQE posted");
            buf
        }
    }

    fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    fn wr<'a>(wr_id: u64, op: SendOp, sge: &'a [Sge], flags: SendFlags) -> SendWr<'a> {
        SendWr {
            wr_id,
            op,
            sge,
            flags,
            ud: None,
        }
    }

    /// The kernel-owned and fixed fields every fresh send WQE must have zeroed.
    fn assert_kernel_fields_clear(w: &[u8]) {
        for (name, off) in [
            ("wr.reserved", WR_RESERVED),
            ("status", STATUS),
            ("state", STATE),
            ("mask", MASK),
            ("first_psn", FIRST_PSN),
            ("last_psn", LAST_PSN),
            ("ack_length", ACK_LENGTH),
            ("has_rd_atomic", HAS_RD_ATOMIC),
            ("dma.cur_sge", DMA + 8),
            ("dma.sge_offset", DMA + 16),
            ("dma.reserved", DMA + 20),
        ] {
            assert_eq!(u32_at(w, off), 0, "{name}");
        }
    }

    fn assert_dma(w: &[u8], length: u32, num_sge: u32) {
        assert_eq!(u32_at(w, DMA), length, "dma.length");
        assert_eq!(u32_at(w, DMA + 4), length, "dma.resid");
        assert_eq!(u32_at(w, DMA + 12), num_sge, "dma.num_sge");
    }

    fn assert_sges(w: &[u8], sges: &[Sge]) {
        for (i, s) in sges.iter().enumerate() {
            let o = SEND_DATA + 16 * i;
            assert_eq!(
                (u64_at(w, o), u32_at(w, o + 8), u32_at(w, o + 12)),
                (s.addr, s.length, s.lkey),
                "sge {i}"
            );
        }
    }

    #[test]
    fn opcode_numbers_match_uapi() {
        let cases = [
            (SendOp::Send, wr_opcode::SEND),
            (SendOp::SendWithImm { imm: 0 }, wr_opcode::SEND_WITH_IMM),
            (
                SendOp::SendWithInv { invalidate_rkey: 0 },
                wr_opcode::SEND_WITH_INV,
            ),
            (
                SendOp::RdmaWrite {
                    remote_addr: 0,
                    rkey: 0,
                },
                wr_opcode::RDMA_WRITE,
            ),
            (
                SendOp::RdmaWriteWithImm {
                    remote_addr: 0,
                    rkey: 0,
                    imm: 0,
                },
                wr_opcode::RDMA_WRITE_WITH_IMM,
            ),
            (
                SendOp::RdmaRead {
                    remote_addr: 0,
                    rkey: 0,
                },
                wr_opcode::RDMA_READ,
            ),
            (
                SendOp::AtomicCmpSwp {
                    remote_addr: 0,
                    rkey: 0,
                    compare: 0,
                    swap: 0,
                },
                wr_opcode::ATOMIC_CMP_AND_SWP,
            ),
            (
                SendOp::AtomicFetchAdd {
                    remote_addr: 0,
                    rkey: 0,
                    add: 0,
                },
                wr_opcode::ATOMIC_FETCH_AND_ADD,
            ),
            (
                SendOp::LocalInv { invalidate_rkey: 0 },
                wr_opcode::LOCAL_INV,
            ),
        ];
        for (op, n) in cases {
            assert_eq!(op.wr_opcode(), n, "{op:?}");
        }
    }

    #[test]
    fn send_and_send_with_imm() {
        let mut s = sq(RxeQpType::Rc, false);
        let sg = [sge(0x1000, 100, 0x11), sge(0x2000, 28, 0x22)];
        s.post(&[
            wr(1, SendOp::Send, &sg, SendFlags::SIGNALED),
            wr(
                2,
                SendOp::SendWithImm { imm: 0x0102_0304 },
                &sg[..1],
                SendFlags::SOLICITED | SendFlags::FENCE,
            ),
        ])
        .unwrap();
        assert_eq!(s.q.producer(), 2);

        let w = s.take();
        assert_eq!(u64_at(&w, WR_ID), 1);
        assert_eq!(u32_at(&w, OPCODE), 2);
        assert_eq!(u32_at(&w, SEND_FLAGS), 2);
        assert_eq!(u32_at(&w, EX), 0);
        assert!(w[U..U + 120].iter().all(|&b| b == 0), "wr union zero");
        assert_eq!(u64_at(&w, IOVA), 0);
        assert_eq!(u32_at(&w, SSN), 0);
        assert_dma(&w, 128, 2);
        assert_sges(&w, &sg);
        assert_kernel_fields_clear(&w);

        let w = s.take();
        assert_eq!(u64_at(&w, WR_ID), 2);
        assert_eq!(u32_at(&w, OPCODE), 3);
        assert_eq!(u32_at(&w, SEND_FLAGS), 4 | 1);
        // Immediate data in network byte order.
        assert_eq!(w[EX..EX + 4], [1, 2, 3, 4]);
        assert_eq!(u32_at(&w, SSN), 1);
        assert_dma(&w, 100, 1);
        assert_sges(&w, &sg[..1]);
        assert_kernel_fields_clear(&w);
    }

    #[test]
    fn bind_mw_fills_the_mw_arm() {
        use rverbs_uverbs::mr::AccessFlags;
        use rverbs_uverbs::mw::{MwBind, MwType};
        let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        // SAFETY: test only: the WQE is inspected, never run by a kernel.
        let bind = unsafe {
            MwBind::from_raw(
                MwType::TYPE_2,
                0x0001_2345,
                0x0001_2346,
                0x0000_7788,
                0x7f00_1000,
                0x2000,
                access,
            )
        };
        assert_eq!(SendOp::BindMw(bind).wr_opcode(), wr_opcode::BIND_MW);
        for qp_type in [RxeQpType::Rc, RxeQpType::Uc] {
            let mut s = sq(qp_type, false);
            s.post(&[wr(5, SendOp::BindMw(bind), &[], SendFlags::SIGNALED)])
                .unwrap();
            let w = s.take();
            assert_eq!(u64_at(&w, WR_ID), 5);
            assert_eq!(u32_at(&w, OPCODE), 8);
            assert_eq!(u32_at(&w, SEND_FLAGS), 2);
            assert_eq!(u32_at(&w, EX), 0);
            // rxe_send_wr.wr.mw: addr, length, mr_lkey, mw_rkey, rkey, access.
            assert_eq!(u64_at(&w, U), 0x7f00_1000);
            assert_eq!(u64_at(&w, U + 8), 0x2000);
            assert_eq!(u32_at(&w, U + 16), 0x7788);
            assert_eq!(u32_at(&w, U + 20), 0x0001_2345);
            assert_eq!(u32_at(&w, U + 24), 0x0001_2346);
            assert_eq!(u32_at(&w, U + 28), access.bits());
            assert!(
                w[U + 32..U + 120].iter().all(|&b| b == 0),
                "rest of the union"
            );
            assert_eq!(u64_at(&w, IOVA), 0x7f00_1000);
            assert_dma(&w, 0, 0);
            assert_kernel_fields_clear(&w);
        }
        // No SGEs, and not on UD.
        let sg = [sge(0x1000, 8, 1)];
        let mut s = sq(RxeQpType::Rc, false);
        let e = s
            .post(&[wr(6, SendOp::BindMw(bind), &sg, SendFlags::empty())])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::SgesOnLocalOp {
                op: OpKind::BindMw,
                num_sge: 1
            }
        );
    }

    #[test]
    fn send_with_inv_and_local_inv() {
        let mut s = sq(RxeQpType::Rc, false);
        let sg = [sge(0x1000, 8, 1)];
        s.post(&[
            wr(
                7,
                SendOp::SendWithInv {
                    invalidate_rkey: 0xdead_beef,
                },
                &sg,
                SendFlags::SIGNALED,
            ),
            wr(
                8,
                SendOp::LocalInv {
                    invalidate_rkey: 0x1234,
                },
                &[],
                SendFlags::SIGNALED,
            ),
        ])
        .unwrap();
        let w = s.take();
        assert_eq!(u32_at(&w, OPCODE), 9);
        // The rkey is host order.
        assert_eq!(u32_at(&w, EX), 0xdead_beef);
        assert_dma(&w, 8, 1);
        assert_sges(&w, &sg);
        assert_kernel_fields_clear(&w);

        let w = s.take();
        assert_eq!(u64_at(&w, WR_ID), 8);
        assert_eq!(u32_at(&w, OPCODE), 7);
        assert_eq!(u32_at(&w, EX), 0x1234);
        assert_dma(&w, 0, 0);
        assert_eq!(u64_at(&w, IOVA), 0);
        assert_kernel_fields_clear(&w);

        let e = s
            .post(&[wr(
                9,
                SendOp::LocalInv { invalidate_rkey: 1 },
                &sg,
                SendFlags::empty(),
            )])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::SgesOnLocalOp {
                op: OpKind::LocalInv,
                num_sge: 1
            }
        );
    }

    #[test]
    fn rdma_write_read_and_write_with_imm() {
        let mut s = sq(RxeQpType::Rc, false);
        let sg = [sge(0x5000, 4096, 0x77)];
        let (ra, rkey) = (0x7f00_1234_5678_0000, 0xabcd_0001);
        s.post(&[
            wr(
                1,
                SendOp::RdmaWrite {
                    remote_addr: ra,
                    rkey,
                },
                &sg,
                SendFlags::SIGNALED,
            ),
            wr(
                2,
                SendOp::RdmaWriteWithImm {
                    remote_addr: ra + 8,
                    rkey,
                    imm: 0xaabb_ccdd,
                },
                &sg,
                SendFlags::SIGNALED,
            ),
            wr(
                3,
                SendOp::RdmaRead {
                    remote_addr: ra + 16,
                    rkey,
                },
                &sg,
                SendFlags::SIGNALED,
            ),
        ])
        .unwrap();
        for (opcode, off, imm) in [
            (0u32, 0u64, None),
            (1, 8, Some(0xaabb_ccddu32)),
            (4, 16, None),
        ] {
            let w = s.take();
            assert_eq!(u32_at(&w, OPCODE), opcode);
            assert_eq!(u64_at(&w, U), ra + off, "wr.rdma.remote_addr");
            assert_eq!(u32_at(&w, U + 8), rkey, "wr.rdma.rkey");
            assert_eq!(u32_at(&w, U + 12), 0, "wr.rdma.reserved");
            assert_eq!(u64_at(&w, IOVA), ra + off, "iova");
            match imm {
                Some(v) => assert_eq!(w[EX..EX + 4], v.to_be_bytes()),
                None => assert_eq!(u32_at(&w, EX), 0),
            }
            assert_dma(&w, 4096, 1);
            assert_sges(&w, &sg);
            assert_kernel_fields_clear(&w);
        }
    }

    #[test]
    fn atomics() {
        let mut s = sq(RxeQpType::Rc, false);
        let sg = [sge(0x9000, 8, 5)];
        s.post(&[
            wr(
                1,
                SendOp::AtomicCmpSwp {
                    remote_addr: 0x4000,
                    rkey: 9,
                    compare: 0x1111,
                    swap: 0x2222,
                },
                &sg,
                SendFlags::SIGNALED,
            ),
            wr(
                2,
                SendOp::AtomicFetchAdd {
                    remote_addr: 0x4008,
                    rkey: 10,
                    add: 5,
                },
                &sg,
                SendFlags::SIGNALED,
            ),
        ])
        .unwrap();
        for (opcode, ra, rkey, cmp_add, swap) in [
            (5u32, 0x4000u64, 9u32, 0x1111u64, 0x2222u64),
            (6, 0x4008, 10, 5, 0),
        ] {
            let w = s.take();
            assert_eq!(u32_at(&w, OPCODE), opcode);
            assert_eq!(u64_at(&w, U), ra, "wr.atomic.remote_addr");
            assert_eq!(u64_at(&w, U + 8), cmp_add, "wr.atomic.compare_add");
            assert_eq!(u64_at(&w, U + 16), swap, "wr.atomic.swap");
            assert_eq!(u32_at(&w, U + 24), rkey, "wr.atomic.rkey");
            assert_eq!(u64_at(&w, IOVA), ra);
            assert_dma(&w, 8, 1);
            assert_sges(&w, &sg);
            assert_kernel_fields_clear(&w);
        }

        let short = [sge(0x9000, 4, 5)];
        let e = s
            .post(&[wr(
                3,
                SendOp::AtomicFetchAdd {
                    remote_addr: 0x4000,
                    rkey: 1,
                    add: 1,
                },
                &short,
                SendFlags::empty(),
            )])
            .unwrap_err();
        assert_eq!(e.fault().unwrap(), PostFault::AtomicLength { len: 4 });
        let e = s
            .post(&[wr(
                3,
                SendOp::AtomicCmpSwp {
                    remote_addr: 0x4004,
                    rkey: 1,
                    compare: 0,
                    swap: 0,
                },
                &sg,
                SendFlags::empty(),
            )])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::AtomicAlignment {
                remote_addr: 0x4004
            }
        );
        assert_eq!(s.q.producer(), 2, "rejected WRs take no slot");
    }

    /// ATOMIC_WRITE and FLUSH (Linux 6.2 uapi): the target in the union (`wr.rdma` /
    /// `wr.flush`: remote_addr, length, rkey, type, level), `iova` the remote address, the 8
    /// bytes of ATOMIC_WRITE in `dma.atomic_wr` (where the SGEs are) with `dma.length` 8, a
    /// FLUSH's range length in `dma.length` and no SGE. Refused without taking a slot:
    /// SGEs, INLINE, a misaligned ATOMIC_WRITE.
    #[test]
    fn atomic_write_and_flush() {
        let mut s = sq(RxeQpType::Rc, false);
        let value = *b"12345678";
        s.post(&[
            wr(
                1,
                SendOp::AtomicWrite {
                    remote_addr: 0x4010,
                    rkey: 9,
                    value,
                },
                &[],
                SendFlags::SIGNALED,
            ),
            wr(
                2,
                SendOp::Flush {
                    remote_addr: 0x5000,
                    rkey: 10,
                    len: 4096,
                    flush_type: rverbs_uverbs::FlushType::GLOBAL,
                    level: rverbs_uverbs::FlushLevel::MR,
                },
                &[],
                SendFlags::SIGNALED,
            ),
        ])
        .unwrap();
        let w = s.take();
        assert_eq!(u32_at(&w, OPCODE), 15, "IB_UVERBS_WR_ATOMIC_WRITE");
        assert_eq!(u64_at(&w, U), 0x4010, "wr.rdma.remote_addr");
        assert_eq!(u32_at(&w, U + 8), 9, "wr.rdma.rkey");
        assert_eq!(u64_at(&w, IOVA), 0x4010);
        assert_dma(&w, 8, 0);
        assert_eq!(w[SEND_DATA..SEND_DATA + 8], value, "dma.atomic_wr");
        assert_kernel_fields_clear(&w);
        let w = s.take();
        assert_eq!(u32_at(&w, OPCODE), 14, "IB_UVERBS_WR_FLUSH");
        assert_eq!(u64_at(&w, U), 0x5000, "wr.flush.remote_addr");
        assert_eq!(u32_at(&w, U + 8), 4096, "wr.flush.length");
        assert_eq!(u32_at(&w, U + 12), 10, "wr.flush.rkey");
        assert_eq!((w[U + 16], w[U + 17]), (1, 1), "wr.flush.type, level");
        assert!(
            w[U + 18..U + 120].iter().all(|&b| b == 0),
            "rest of the union"
        );
        assert_eq!(u64_at(&w, IOVA), 0x5000);
        assert_dma(&w, 4096, 0);
        assert_kernel_fields_clear(&w);

        let sg = [sge(0x9000, 8, 5)];
        let aw = |remote_addr| SendOp::AtomicWrite {
            remote_addr,
            rkey: 1,
            value,
        };
        let e = s
            .post(&[wr(3, aw(0x4000), &sg, SendFlags::empty())])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::SgesOnLocalOp {
                op: OpKind::AtomicWrite,
                num_sge: 1
            }
        );
        let e = s
            .post(&[wr(3, aw(0x4000), &[], SendFlags::INLINE)])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::InlineNotAllowed {
                op: OpKind::AtomicWrite
            }
        );
        let e = s
            .post(&[wr(3, aw(0x4004), &[], SendFlags::empty())])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::AtomicAlignment {
                remote_addr: 0x4004
            }
        );
        let fl = SendOp::Flush {
            remote_addr: 0,
            rkey: 1,
            len: 8,
            flush_type: rverbs_uverbs::FlushType::GLOBAL,
            level: rverbs_uverbs::FlushLevel::RANGE,
        };
        let e = s.post(&[wr(3, fl, &sg, SendFlags::empty())]).unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::SgesOnLocalOp {
                op: OpKind::Flush,
                num_sge: 1
            }
        );
        assert_eq!(s.q.producer(), 2, "rejected WRs take no slot");
    }

    #[test]
    fn ud_send_carries_ah_num() {
        let mut s = sq(RxeQpType::Ud, false);
        let sg = [sge(0x1000, 64, 3)];
        let dest = UdDest {
            ah_num: 42,
            ah_handle: 7,
            remote_qpn: 0x12_3456,
            remote_qkey: 0x1111_2222,
        };
        let mut w0 = wr(5, SendOp::SendWithImm { imm: 9 }, &sg, SendFlags::SIGNALED);
        w0.ud = Some(dest);
        s.post(&[w0]).unwrap();
        let w = s.take();
        assert_eq!(u32_at(&w, OPCODE), 3);
        assert_eq!(u32_at(&w, U), 0x12_3456, "wr.ud.remote_qpn");
        assert_eq!(u32_at(&w, U + 4), 0x1111_2222, "wr.ud.remote_qkey");
        assert_eq!(u16_at(&w, U + 8), 0, "wr.ud.pkey_index");
        assert_eq!(u16_at(&w, U + 10), 0, "wr.ud.reserved");
        assert_eq!(u32_at(&w, U + 12), 42, "wr.ud.ah_num");
        assert!(
            w[U + 16..U + 120].iter().all(|&b| b == 0),
            "pad and av zero"
        );
        assert_eq!(w[EX..EX + 4], 9u32.to_be_bytes());
        assert_dma(&w, 64, 1);
        assert_kernel_fields_clear(&w);

        let e = s
            .post(&[wr(6, SendOp::Send, &sg, SendFlags::empty())])
            .unwrap_err();
        assert_eq!(e.fault().unwrap(), PostFault::NoUdDest);
        let mut w1 = wr(6, SendOp::Send, &sg, SendFlags::empty());
        w1.ud = Some(UdDest { ah_num: 0, ..dest });
        assert_eq!(
            s.post(&[w1]).unwrap_err().fault().unwrap(),
            PostFault::UnknownAh {
                ah_num: 0,
                provider: "rxe"
            }
        );
    }

    #[test]
    fn operations_per_qp_type_are_the_6_1_requesters() {
        use rverbs_uverbs::qp::QpType;
        use rverbs_uverbs::{OpKind, OpSet};
        // What a QP accepts: the transport's operations that rxe encodes (refused by
        // rverbs-uverbs' Qp before this provider is called; `RxeSq` only encodes).
        let caps = crate::rxe::driver::send_caps();
        assert_eq!(caps.allowed(QpType::RC), OpSet::of(&OpKind::ALL));
        assert_eq!(
            caps.allowed(QpType::UC),
            OpSet::of(&[
                OpKind::Send,
                OpKind::SendWithImm,
                OpKind::RdmaWrite,
                OpKind::RdmaWriteWithImm,
                OpKind::BindMw,
            ]),
            "UC: no READ, atomics, SEND_WITH_INV; LOCAL_INV is RC-only in rxe_wr_opcode_info"
        );
        assert_eq!(
            caps.allowed(QpType::UD),
            OpSet::of(&[OpKind::Send, OpKind::SendWithImm])
        );
        assert_eq!(caps.allowed(QpType::XRC_INI), OpSet::EMPTY);
    }

    #[test]
    fn flags_and_sig_all() {
        let mut s = sq(RxeQpType::Rc, true);
        let sg = [sge(0x1000, 8, 3)];
        s.post(&[wr(1, SendOp::Send, &sg, SendFlags::SOLICITED)])
            .unwrap();
        let w = s.take();
        assert_eq!(u32_at(&w, SEND_FLAGS), 2 | 4, "sq_sig_all adds SIGNALED");

        let e = s
            .post(&[wr(2, SendOp::Send, &sg, SendFlags::IP_CSUM)])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::FlagsNotEncoded {
                flags: 16,
                provider: "rxe"
            }
        );
    }

    #[test]
    fn inline_data_is_copied() {
        let mut s = sq(RxeQpType::Rc, false);
        let mut a: Vec<u8> = (0..100u8).collect();
        let mut b: Vec<u8> = (100..128u8).collect();
        let sg = [
            sge(a.as_mut_ptr() as u64, a.len() as u32, 0),
            sge(0, 0, 0), // empty SGE: nothing to read, address never used
            sge(b.as_mut_ptr() as u64, b.len() as u32, 0),
        ];
        s.post(&[wr(
            1,
            SendOp::RdmaWriteWithImm {
                remote_addr: 0x8000,
                rkey: 4,
                imm: 1,
            },
            &sg,
            SendFlags::INLINE | SendFlags::SIGNALED,
        )])
        .unwrap();
        let w = s.take();
        assert_eq!(u32_at(&w, SEND_FLAGS), 8 | 2);
        assert_dma(&w, 128, 3);
        let expect: Vec<u8> = (0..128u8).collect();
        assert_eq!(&w[SEND_DATA..SEND_DATA + 128], &expect[..]);
        assert_kernel_fields_clear(&w);

        // Over max_inline (128).
        let mut big = [0u8; 129];
        let sg = [sge(big.as_mut_ptr() as u64, 129, 0)];
        let e = s
            .post(&[wr(2, SendOp::Send, &sg, SendFlags::INLINE)])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::InlineTooLong {
                len: 129,
                max_inline: 128
            }
        );
        assert_eq!(
            e.to_string(),
            "post: work request #0: 129 bytes of inline data, the QP's max_inline_data is 128; 0 posted"
        );
        // Not for READ.
        let sg = [sge(big.as_mut_ptr() as u64, 8, 0)];
        let e = s
            .post(&[wr(
                3,
                SendOp::RdmaRead {
                    remote_addr: 0,
                    rkey: 0,
                },
                &sg,
                SendFlags::INLINE,
            )])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::InlineNotAllowed {
                op: OpKind::RdmaRead
            }
        );
    }

    #[test]
    fn sge_limits() {
        let mut s = sq(RxeQpType::Rc, false);
        let four = [
            sge(1, 1, 1),
            sge(2, 2, 2),
            sge(3, 3, 3),
            sge(4, 4, 4),
            sge(5, 5, 5),
        ];
        s.post(&[wr(1, SendOp::Send, &four[..4], SendFlags::empty())])
            .unwrap();
        let w = s.take();
        assert_dma(&w, 10, 4);
        assert_sges(&w, &four[..4]);
        let e = s
            .post(&[wr(2, SendOp::Send, &four, SendFlags::empty())])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::TooManySges {
                num_sge: 5,
                max_sge: 4
            }
        );
        let post = e.at("rxe0", PostQueue::Send, 0x11);
        assert_eq!(
            post.to_string(),
            "post send to QP 0x11 on rxe0: work request #0: 5 SGEs, the queue allows 4; 0 posted"
        );
        assert_eq!(post.kind(), io::ErrorKind::InvalidInput);
        let huge = [sge(1, u32::MAX, 1), sge(2, 1, 1)];
        let e = s
            .post(&[wr(2, SendOp::Send, &huge, SendFlags::empty())])
            .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::LengthOverflow {
                len: u64::from(u32::MAX) + 1
            }
        );
    }

    #[test]
    fn full_queue_never_overwrites() {
        let mut s = sq(RxeQpType::Rc, false);
        let sg = [sge(0x1000, 1, 1)];
        let wrs: Vec<SendWr<'_>> = (0..10)
            .map(|i| wr(100 + i, SendOp::Send, &sg, SendFlags::empty()))
            .collect();
        let e = s.post(&wrs).unwrap_err();
        assert_eq!(e.posted(), 7);
        assert_eq!(e.fault().unwrap(), PostFault::QueueFull { outstanding: 7 });
        assert_eq!(s.q.producer(), 7);
        // A list of one request (posted without the list loop) is refused the same way.
        let e1 = s.post(&wrs[..1]).unwrap_err();
        assert_eq!(
            (e1.posted(), e1.fault()),
            (0, Some(PostFault::QueueFull { outstanding: 7 }))
        );
        assert_eq!(s.q.producer(), 7);
        let post = e.at("rxe0", PostQueue::Send, 0x11);
        assert_eq!(
            post.to_string(),
            "post send to QP 0x11 on rxe0: work request #7: queue full (7 requests \
             outstanding) (ENOMEM); 7 posted"
        );
        let io: io::Error = post.into();
        assert_eq!(Error::errno_of(&io), Some(Errno::NOMEM));

        // The kernel frees two slots: exactly two more fit, and they carry on in order.
        assert_eq!(u64_at(&s.take(), WR_ID), 100);
        assert_eq!(u64_at(&s.take(), WR_ID), 101);
        let e = s.post(&wrs[7..]).unwrap_err();
        assert_eq!(e.posted(), 2);
        for id in 102..109 {
            assert_eq!(u64_at(&s.take(), WR_ID), id);
        }
        assert!(!s.q.kernel().consume(&mut [0u8; 8]));
        assert_eq!(s.sq.free_slots(), 7);
    }

    #[test]
    fn partial_post_publishes_the_good_prefix() {
        let mut s = sq(RxeQpType::Rc, false);
        let sg = [sge(0x1000, 1, 1)];
        let bad = [sge(0, 1, 1); 5];
        let e = s
            .post(&[
                wr(1, SendOp::Send, &sg, SendFlags::empty()),
                wr(2, SendOp::Send, &sg, SendFlags::empty()),
                wr(3, SendOp::Send, &bad, SendFlags::empty()),
                wr(4, SendOp::Send, &sg, SendFlags::empty()),
            ])
            .unwrap_err();
        assert_eq!(e.posted(), 2);
        assert_eq!(s.q.producer(), 2);
        assert_eq!(u64_at(&s.take(), WR_ID), 1);
        assert_eq!(u64_at(&s.take(), WR_ID), 2);
    }

    #[test]
    fn sq_element_must_fit_caps() {
        let q = SimQueue::new(8, 8).unwrap();
        let cfg = RxeSqConfig {
            qp_type: RxeQpType::Rc,
            max_sge: 4,
            max_inline: 0,
            sig_all: false,
        };
        // 208 + 4 * 16 = 272 > 256.
        // SAFETY: `q` outlives the view.
        let e = RxeSq::new(unsafe { q.view(QueueKind::Send) }.unwrap(), cfg).unwrap_err();
        assert!(
            e.to_string().contains("256-byte elements cannot hold"),
            "{e}"
        );
        let cfg = RxeSqConfig {
            max_sge: 3,
            max_inline: 48,
            ..cfg
        };
        // SAFETY: as above.
        RxeSq::new(unsafe { q.view(QueueKind::Send) }.unwrap(), cfg).unwrap();
        // SAFETY: as above.
        let e = RxeSq::new(unsafe { q.view(QueueKind::Recv) }.unwrap(), cfg).unwrap_err();
        assert!(e.to_string().contains("cannot be used as a send queue"));
    }

    fn rq(kind: QueueKind) -> (SimQueue, RxeRq) {
        let q = SimQueue::new(7, 4).unwrap();
        dirty(&q);
        // SAFETY: the caller keeps `q` alive as long as the RxeRq.
        let rq = RxeRq::new(unsafe { q.view(kind) }.unwrap(), 5).unwrap();
        (q, rq)
    }

    #[test]
    fn recv_wqes_for_rq_and_srq() {
        for kind in [QueueKind::Recv, QueueKind::Srq] {
            let (mut q, mut r) = rq(kind);
            let sg = [sge(0x1000, 4096, 1), sge(0x3000, 40, 2)];
            // SAFETY: no simulated kernel writes through these SGEs.
            unsafe {
                r.post(&[
                    RecvWr {
                        wr_id: 77,
                        sge: &sg,
                    },
                    RecvWr {
                        wr_id: 78,
                        sge: &[],
                    },
                ])
            }
            .unwrap();
            let mut w = [0u8; 128];
            assert!(q.kernel().consume(&mut w));
            assert_eq!(u64_at(&w, 0), 77, "wr_id");
            assert_eq!(u32_at(&w, 8), 0, "reserved");
            assert_eq!(u32_at(&w, 12), 0, "padding");
            assert_eq!(u32_at(&w, RECV_DMA), 4136, "dma.length");
            assert_eq!(u32_at(&w, RECV_DMA + 4), 4136, "dma.resid");
            assert_eq!(u32_at(&w, RECV_DMA + 8), 0, "dma.cur_sge");
            assert_eq!(u32_at(&w, RECV_DMA + 12), 2, "dma.num_sge");
            assert_eq!(u32_at(&w, RECV_DMA + 16), 0, "dma.sge_offset");
            assert_eq!(u32_at(&w, RECV_DMA + 20), 0, "dma.reserved");
            for (i, s) in sg.iter().enumerate() {
                let o = RECV_DATA + 16 * i;
                assert_eq!(
                    (u64_at(&w, o), u32_at(&w, o + 8), u32_at(&w, o + 12)),
                    (s.addr, s.length, s.lkey)
                );
            }
            assert!(q.kernel().consume(&mut w));
            assert_eq!(u64_at(&w, 0), 78);
            assert_eq!(u32_at(&w, RECV_DMA), 0);
            assert_eq!(u32_at(&w, RECV_DMA + 12), 0);
        }
    }

    #[test]
    fn recv_limits_and_full() {
        let (q, mut r) = rq(QueueKind::Srq);
        let six = [sge(1, 1, 1); 6];
        // SAFETY: no simulated kernel writes through these SGEs.
        let e = unsafe {
            r.post(&[RecvWr {
                wr_id: 1,
                sge: &six,
            }])
        }
        .unwrap_err();
        assert_eq!(
            e.fault().unwrap(),
            PostFault::TooManySges {
                num_sge: 6,
                max_sge: 5
            }
        );
        let wrs = [RecvWr {
            wr_id: 1,
            sge: &six[..1],
        }; 5];
        // SAFETY: as above.
        let e = unsafe { r.post(&wrs) }.unwrap_err();
        assert_eq!(e.posted(), 3);
        assert_eq!(e.fault().unwrap(), PostFault::QueueFull { outstanding: 3 });
        assert_eq!(q.producer(), 3);
        assert_eq!(r.free_slots(), 0);
        assert_eq!(
            e.at("rxe0", PostQueue::Srq, 0x5).to_string(),
            "post receive to SRQ 0x5 on rxe0: work request #3: queue full (3 requests \
             outstanding) (ENOMEM); 3 posted"
        );

        // 40 + 6 * 16 = 136 > 128.
        // SAFETY: `q` outlives the view.
        let e = RxeRq::new(unsafe { q.view(QueueKind::Recv) }.unwrap(), 6).unwrap_err();
        assert!(e.to_string().contains("cannot hold"), "{e}");
    }
}
