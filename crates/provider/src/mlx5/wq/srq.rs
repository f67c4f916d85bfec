//! The mlx5 SRQ: its buffer, the free list shared with the CQ poller, and posting receives.

#![allow(unsafe_code)]

use super::*;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use rverbs_uverbs::driver::{KernelObj, SrqOps};
use rverbs_uverbs::Error;
use rverbs_uverbs::RecvWr;
use rverbs_uverbs::{PostError, PostFault};

use crate::mlx5::abi::mlx5_ib_create_srq;
use crate::mlx5::cq::Region;

/// The part of an SRQ both its post path and the CQ poller touch: the free list.
pub struct SrqShared {
    pub(super) srqn: u32,
    pub(super) inner: Mutex<SrqList>,
}

pub(super) struct SrqList {
    /// The SRQ buffer: owned here, so that it stays mapped while a poller may still hold
    /// this state.
    pub(super) _region: Region,
    pub(super) buf: *mut u8,
    pub(super) shift: u32,
    pub(super) head: u32,
    pub(super) tail: u32,
    pub(super) wrid: Box<[u64]>,
}

// SAFETY: `buf` points into `region`, which this value owns; access is under the mutex.
unsafe impl Send for SrqList {}

impl fmt::Debug for SrqShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SrqShared({:#x})", self.srqn)
    }
}

impl SrqList {
    pub(super) fn next_of(&self, i: u32) -> *mut u8 {
        // SAFETY: i < max (indices come from the free list or a masked CQE counter).
        unsafe { self.buf.add((i as usize) << self.shift) }
    }
}

impl SrqShared {
    pub(super) fn done(&self, counter: u16) -> Option<u64> {
        let mut l = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let ind = u32::from(counter);
        if ind as usize >= l.wrid.len() {
            return None;
        }
        let wr = l.wrid[ind as usize];
        // Put the WQE back at the tail of the free list (libmlx5 `mlx5_free_srq_wqe`).
        let t = l.next_of(l.tail);
        // SAFETY: `t` is a WQE of the SRQ buffer; the device is done with the free list's
        // tail WQE (it only consumes from the head).
        unsafe { t.add(2).cast::<u16>().write((ind as u16).to_be()) };
        l.tail = ind;
        Some(wr)
    }
}

/// An mlx5 SRQ's data path.
pub struct Mlx5Srq {
    pub(super) dbrec: *mut u32,
    pub(super) sz: SrqSizing,
    pub(super) counter: u32,
    pub(super) shared: Arc<SrqShared>,
    pub(super) reg: Arc<Registry>,
}

// SAFETY: the pointers point into the region `shared` owns, which this value keeps alive.
unsafe impl Send for Mlx5Srq {}

impl fmt::Debug for Mlx5Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mlx5Srq")
            .field("srqn", &self.shared.srqn)
            .field("sizing", &self.sz)
            .finish_non_exhaustive()
    }
}

/// An SRQ's memory before the kernel has answered.
pub struct SrqBuf {
    pub(super) region: Region,
    pub(super) sz: SrqSizing,
    pub(super) dbrec_off: usize,
}

impl SrqBuf {
    /// Allocates the buffer, links the free list (and the wait queue) as libmlx5 does.
    pub fn new(sz: SrqSizing) -> rverbs_uverbs::Result<Self> {
        sz.check()
            .map_err(|d| Error::invalid("allocate mlx5 SRQ buffer", d))?;
        let page = rustix::param::page_size();
        let bytes = (sz.max as usize) << sz.wqe_shift;
        let dbrec_off = align(bytes, page);
        let region = Region::new(dbrec_off + page)?;
        let link = |from: u32, to: u32| {
            for i in from..to {
                // SAFETY: i < max_wr < max (checked above): inside the buffer of max WQEs.
                unsafe {
                    let p = region.ptr().add((i as usize) << sz.wqe_shift);
                    p.add(2).cast::<u16>().write(((i + 1) as u16).to_be());
                }
            }
        };
        link(0, sz.max_wr);
        Ok(Self {
            region,
            sz,
            dbrec_off,
        })
    }

    /// The CREATE_SRQ driver data.
    pub fn create_udata(&self) -> mlx5_ib_create_srq {
        mlx5_ib_create_srq {
            buf_addr: self.region.ptr() as u64,
            // SAFETY: in the region.
            db_addr: unsafe { self.region.ptr().add(self.dbrec_off) } as u64,
            ..Default::default()
        }
    }
}

impl Mlx5Srq {
    /// The data path over `buf`, known to the device as `srqn`.
    pub fn new(buf: SrqBuf, srqn: u32, reg: Arc<Registry>) -> Self {
        let base = buf.region.ptr();
        // SAFETY: in the region.
        let dbrec = unsafe { base.add(buf.dbrec_off) }.cast();
        let sz = buf.sz;
        let shared = Arc::new(SrqShared {
            srqn,
            inner: Mutex::new(SrqList {
                _region: buf.region,
                buf: base,
                shift: buf.sz.wqe_shift,
                head: 0,
                tail: buf.sz.max_wr,
                wrid: vec![0u64; buf.sz.max as usize].into_boxed_slice(),
            }),
        });
        reg.insert_srq(shared.clone());
        Self {
            dbrec,
            sz,
            counter: 0,
            shared,
            reg,
        }
    }

    /// The shared part (for QPs attached to this SRQ).
    pub fn shared(&self) -> &Arc<SrqShared> {
        &self.shared
    }
}

impl SrqOps for Mlx5Srq {
    unsafe fn post_recv(
        &mut self,
        _srq: KernelObj<'_>,
        wrs: &[RecvWr<'_>],
    ) -> Result<(), PostError> {
        let mut nreq = 0;
        let mut err = None;
        {
            let mut l = self.shared.inner.lock().unwrap_or_else(|e| e.into_inner());
            for wr in wrs {
                if wr.sge.len() > self.sz.max_gs as usize {
                    err = Some(PostError::refused(
                        nreq,
                        PostFault::TooManySges {
                            num_sge: wr.sge.len(),
                            max_sge: self.sz.max_gs,
                        },
                    ));
                    break;
                }
                if l.head == l.tail {
                    err = Some(PostError::queue_full(nreq, self.sz.max_wr));
                    break;
                }
                let h = l.head;
                l.wrid[h as usize] = wr.wr_id;
                let next = l.next_of(h);
                // SAFETY: `next` is the free WQE at the list head, ours until the record
                // store; its scatter list holds max_gs segments.
                unsafe {
                    l.head = u32::from(u16::from_be(next.add(2).cast::<u16>().read()));
                    write_scatter(
                        next.add(SRQ_NEXT_SEG),
                        wr.sge,
                        self.sz.max_gs as usize,
                        false,
                    );
                }
                nreq += 1;
            }
        }
        if nreq > 0 {
            self.counter = self.counter.wrapping_add(nreq as u32);
            // SAFETY: in our region.
            let db = unsafe { AtomicU32::from_ptr(self.dbrec) };
            // Release: the WQEs are written before the device sees the counter.
            db.store(self.counter.to_be(), Ordering::Release);
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Mlx5Srq {
    fn drop(&mut self) {
        self.reg.remove_srq(&self.shared);
    }
}
