//! Posting to an rxe receive queue or SRQ: `rxe_recv_wqe`s in the mapped ring. No doorbell:
//! the 6.1 kernel's responder looks at the ring when a packet arrives.
//!
//! The kernel reads `wr_id`, `dma.num_sge` (checked against the queue's `max_sge`),
//! `dma.length`/`resid` (total bytes, equal at post), `cur_sge` = `sge_offset` = 0 and the SGE
//! array after the 40-byte header.

#![allow(unsafe_code)]

use std::io;
use std::ptr;

use rverbs_uverbs::{Error, RecvWr};
use rverbs_uverbs::{PostError, PostFault};

use super::abi::{rxe_dma_info, rxe_recv_wqe, rxe_sge, RXE_RECV_WQE_SGE_OFFSET};
use super::queue::{QueueKind, RxeQueue};

/// The user side of one rxe receive queue or shared receive queue.
#[derive(Debug)]
pub struct RxeRq {
    queue: RxeQueue,
    max_sge: u32,
}

impl RxeRq {
    /// Wraps a validated view of a receive queue ([`QueueKind::Recv`]) or SRQ
    /// ([`QueueKind::Srq`]) mapping; `max_sge` is the queue's `max_recv_sge` / SRQ `max_sge`
    /// as the kernel returned it. Fails if the elements cannot hold that many SGEs.
    pub fn new(queue: RxeQueue, max_sge: u32) -> io::Result<Self> {
        const OP: &str = "rxe receive queue";
        if !matches!(queue.kind(), QueueKind::Recv | QueueKind::Srq) {
            return Err(Error::invalid(
                OP,
                format!("a {} view cannot be used as a receive queue", queue.kind()),
            )
            .into());
        }
        let need = RXE_RECV_WQE_SGE_OFFSET as u64
            + u64::from(max_sge) * core::mem::size_of::<rxe_sge>() as u64;
        if need > queue.elem_size() as u64 {
            return Err(Error::protocol(
                OP,
                format!(
                    "{}-byte elements cannot hold a {RXE_RECV_WQE_SGE_OFFSET}-byte receive WQE \
                     with {max_sge} SGEs",
                    queue.elem_size()
                ),
            )
            .into());
        }
        Ok(Self { queue, max_sge })
    }

    /// Slots free right now (the kernel may free more at any time).
    #[cfg(test)]
    pub fn free_slots(&self) -> u32 {
        self.queue.capacity() - self.queue.len()
    }

    /// Posts `wrs` in order and publishes them with one producer-index store. Returns
    /// `wrs.len()`, or stops at the first request with too many SGEs (or too long a list) or
    /// that finds the queue full; the [`PostError`] (a [`PostFault`]) says how many were posted before it.
    /// Never allocates.
    ///
    /// # Safety
    ///
    /// The memory each SGE names must stay allocated (and registered under its lkey) and must
    /// not be accessed until the request's completion is polled or the QP/SRQ is destroyed:
    /// the kernel writes received data into it at any time in between.
    pub unsafe fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<usize, PostError> {
        let start = self.queue.load_own();
        let mut prod = start;
        let mut cons = self.queue.load_peer();
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |fault| PostError::refused(i, fault);
            let num_sge = wr.sge.len();
            let fault = if num_sge > self.max_sge as usize {
                Some(PostFault::TooManySges {
                    num_sge,
                    max_sge: self.max_sge,
                })
            } else {
                None
            };
            let len = super::sq::sge_len(wr.sge);
            let fault = fault.or(match u32::try_from(len) {
                Ok(_) => None,
                Err(_) => Some(PostFault::LengthOverflow { len }),
            });
            if let Some(fault) = fault {
                self.publish(start, prod);
                return Err(fail(fault));
            }
            let Some(next) = self.queue.next_free(prod, &mut cons) else {
                self.publish(start, prod);
                let outstanding = self.queue.capacity();
                return Err(fail(PostFault::QueueFull { outstanding }));
            };
            let wqe = rxe_recv_wqe {
                wr_id: wr.wr_id,
                reserved: 0,
                padding: 0,
                dma: rxe_dma_info {
                    length: len as u32,
                    resid: len as u32,
                    cur_sge: 0,
                    num_sge: num_sge as u32,
                    sge_offset: 0,
                    reserved: 0,
                },
            };
            let slot = self.queue.slot(prod);
            // SAFETY: the slot is free (next != cons: the kernel released it with the consumer
            // index we loaded with Acquire), 8-aligned and in bounds for elem_size bytes, which
            // `new` checked hold the header plus max_sge SGEs; num_sge <= max_sge. The kernel
            // does not read it before we publish the producer index.
            unsafe {
                ptr::write(slot.cast::<rxe_recv_wqe>(), wqe);
                let sges = slot.add(RXE_RECV_WQE_SGE_OFFSET).cast::<rxe_sge>();
                if let [s] = wr.sge {
                    // The common case, without the loop.
                    ptr::write(
                        sges,
                        rxe_sge {
                            addr: s.addr,
                            length: s.length,
                            lkey: s.lkey,
                        },
                    );
                    prod = next;
                    continue;
                }
                for (j, s) in wr.sge.iter().enumerate() {
                    ptr::write(
                        sges.add(j),
                        rxe_sge {
                            addr: s.addr,
                            length: s.length,
                            lkey: s.lkey,
                        },
                    );
                }
            }
            prod = next;
        }
        self.publish(start, prod);
        Ok(wrs.len())
    }

    fn publish(&self, start: u32, prod: u32) {
        if prod != start {
            self.queue.publish_own(prod);
        }
    }
}
