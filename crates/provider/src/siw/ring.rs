//! Views over siw's mapped rings and the user side of each: the send queue ([`SiwSq`]), the
//! receive queues of a QP or an SRQ ([`SiwRq`]) and the completion queue ([`SiwCq`]).
//!
//! # The protocol (Linux `drivers/infiniband/sw/siw/`, rdma-core `providers/siw/siw.c`)
//!
//! A ring is `n` elements (`n` a power of two, from the create response) in kernel memory
//! mapped from the command fd; a CQ's ring is followed by its 8-byte notify word
//! ([`siw_cq_ctrl`]). There are no shared indices: each element's `flags` word is the
//! handshake.
//!
//! - Work queues (SQ, RQ, SRQ): we produce. Our producer count `put` is private; the slot
//!   `put % n` is ours while its `VALID` bit is clear. We write the element's other fields,
//!   then store `flags` with `VALID` (Release, pairing with the kernel's read of the flags
//!   before the fields). The kernel clears `flags` to 0 once it has taken the element; a
//!   slot whose `VALID` is still set means the ring is full.
//! - The CQ: the kernel produces. Our consumer count `get` is private; the element at
//!   `get % n` is ready when its `flags` byte has `VALID` (Acquire load, pairing with the
//!   kernel's write barrier before it sets the byte). We copy the element out, then store 0
//!   into `flags` (Release: our copy is done before the kernel may reuse the slot).
//! - Arming: we store `SOLICITED` or `SOLICITED | NEXT_COMPLETION` into the notify word; the
//!   kernel resets it to `NOT` when it raises the event (one-shot).
//!
//! Memory the kernel shares is never behind a Rust reference: elements are written through
//! raw pointers into slots that are ours by the protocol and copied out of slots that the
//! kernel leaves alone by the protocol; only the `flags` words and the notify word are
//! reached as atomics (`AtomicU16`/`AtomicU8`/`AtomicU32::from_ptr`). None of these types
//! locks: each has one user at a time (`&mut self`, inside the verbs objects' locks).

#![allow(unsafe_code)]

use std::fmt;
use std::io;
use std::ptr::{self, NonNull};
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU8, Ordering};

use rverbs_uverbs::kernel::shared::copy_from_shared_raw;
use rverbs_uverbs::qp::QpType;
use rverbs_uverbs::{
    Error, OpKind, OpTable, RecvWr, SendFlags, SendOp, SendWr, Transports, WcFlags, WcOpcode,
    WcStatus, WorkCompletion,
};
use rverbs_uverbs::{PostError, PostFault};

use super::abi::{
    notify, opcode, siw_cqe, siw_rqe, siw_sge, siw_sqe, wc_status, wqe_flags, FLAGS_OFFSET,
    SIW_MAX_INLINE, SIW_MAX_SGE,
};
use super::SiwQueue;

/// What siw encodes, per operation: RC only; SEND, SEND_WITH_INV, RDMA WRITE and READ
/// (rdma-core's libsiw maps exactly these; siw has no immediate data, no atomics, no
/// userspace LOCAL_INV or BIND_MW, and neither of IBTA 1.5's FLUSH and ATOMIC_WRITE). Every
/// operation of the op table has a field: a new one does not compile until this says whether
/// siw encodes it, and [`SiwSq`]'s encoder how.
pub(crate) const OPS: OpTable<Transports> = OpTable {
    rdma_write: Transports::RC,
    rdma_write_with_imm: Transports::NONE,
    send: Transports::RC,
    send_with_imm: Transports::NONE,
    rdma_read: Transports::RC,
    atomic_cmp_swp: Transports::NONE,
    atomic_fetch_add: Transports::NONE,
    local_inv: Transports::NONE,
    bind_mw: Transports::NONE,
    send_with_inv: Transports::RC,
    flush: Transports::NONE,
    atomic_write: Transports::NONE,
};

/// The most elements a ring may have (the kernel's largest queues are far smaller); bounds
/// every size computation from a create response.
pub const MAX_RING_SLOTS: u32 = 1 << 22;

/// A validated view over one mapped ring of `slots` elements of `elem_size` bytes.
pub struct Ring {
    base: NonNull<u8>,
    slots: u32,
    elem_size: usize,
}

// SAFETY: the view holds only a pointer to memory valid for its whole life (the contract of
// `Ring::new`); moving it to another thread moves the right to be the single userspace side
// of the ring with it. Not `Sync`: the users take `&mut self` for everything that touches it.
unsafe impl Send for Ring {}

impl fmt::Debug for Ring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ring")
            .field("base", &self.base)
            .field("slots", &self.slots)
            .field("elem_size", &self.elem_size)
            .finish()
    }
}

/// Bytes a ring of `slots` elements of `elem` bytes plus `tail` bytes needs, if `slots` is a
/// power of two no larger than [`MAX_RING_SLOTS`].
pub fn ring_bytes(slots: u32, elem: usize, tail: usize) -> Option<usize> {
    if slots == 0 || !slots.is_power_of_two() || slots > MAX_RING_SLOTS {
        return None;
    }
    (slots as usize).checked_mul(elem)?.checked_add(tail)
}

impl Ring {
    /// Checks the geometry and returns a view: `slots` a non-zero power of two (at most
    /// [`MAX_RING_SLOTS`]), `slots * elem_size + tail` within `len`, `base` 8-aligned.
    ///
    /// # Safety
    /// `base..base + len` must stay mapped readable and writable while the view (and anything
    /// built from it) is used, and hold a siw ring of such elements: mapped from the kernel's
    /// create response, or plain memory laid out the same way for tests. Nothing else in this
    /// process may write the ring while the view is in use.
    pub unsafe fn new(
        base: NonNull<u8>,
        len: usize,
        slots: u32,
        elem_size: usize,
        tail: usize,
        what: SiwQueue,
    ) -> io::Result<Self> {
        let op = || format!("map siw {what}");
        let Some(need) = ring_bytes(slots, elem_size, tail) else {
            return Err(Error::protocol(
                op(),
                format!("{slots} elements: not a power of two between 1 and {MAX_RING_SLOTS}"),
            )
            .into());
        };
        if need > len {
            return Err(Error::protocol(
                op(),
                format!(
                    "{slots} elements of {elem_size} bytes (+{tail}) need {need} bytes, the \
                     mapping has {len}"
                ),
            )
            .into());
        }
        if base.as_ptr() as usize % 8 != 0 {
            return Err(Error::invalid(
                op(),
                format!("ring base {:p} is not 8-byte aligned", base.as_ptr()),
            )
            .into());
        }
        Ok(Ring {
            base,
            slots,
            elem_size,
        })
    }

    /// The element for the free-running count `i`.
    #[inline]
    fn slot(&self, i: u32) -> *mut u8 {
        // In bounds: (i & (slots - 1)) * elem_size < slots * elem_size <= len (new).
        self.base
            .as_ptr()
            .wrapping_add((i & (self.slots - 1)) as usize * self.elem_size)
    }

    /// The 16-bit `flags` word of a work queue element.
    #[inline]
    fn flags16(&self, i: u32) -> &AtomicU16 {
        // SAFETY: in bounds (slot), 8-aligned element + offset 8: 2-aligned; the word is
        // shared with the kernel and reached by Rust only as this atomic.
        unsafe { AtomicU16::from_ptr(self.slot(i).add(FLAGS_OFFSET).cast()) }
    }

    /// The 8-bit `flags` byte of a CQE.
    #[inline]
    fn flags8(&self, i: u32) -> &AtomicU8 {
        // SAFETY: in bounds (slot); the byte is shared with the kernel and reached by Rust
        // only as this atomic.
        unsafe { AtomicU8::from_ptr(self.slot(i).add(FLAGS_OFFSET)) }
    }

    /// The `u32` right after the last element (a CQ's notify word).
    #[inline]
    fn tail_word(&self) -> &AtomicU32 {
        // SAFETY: `new` checked slots * elem_size + tail <= len with tail = 8 for CQs (the
        // only users); 8-aligned base and 32-byte elements keep it aligned; the word is
        // shared with the kernel and reached by Rust only as this atomic.
        unsafe {
            AtomicU32::from_ptr(
                self.base
                    .as_ptr()
                    .add(self.slots as usize * self.elem_size)
                    .cast(),
            )
        }
    }
}

/// What a send queue knows of its QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqConfig {
    /// SGEs per request (`max_send_sge` as created; at most [`SIW_MAX_SGE`]).
    pub max_sge: u32,
    /// Inline bytes per request (`max_inline_data` as created; at most [`SIW_MAX_INLINE`],
    /// the room of an SQE's `sge[1..]`).
    pub max_inline: u32,
    /// Every request completes (`sq_sig_all`).
    pub sig_all: bool,
}

/// The user side of one siw send queue.
#[derive(Debug)]
pub struct SiwSq {
    ring: Ring,
    put: u32,
    cfg: SqConfig,
}

const ALLOWED_SEND_FLAGS: SendFlags = SendFlags::FENCE
    .union(SendFlags::SIGNALED)
    .union(SendFlags::SOLICITED)
    .union(SendFlags::INLINE);

/// What a send post did: requests written, whether the kernel must be told (the doorbell),
/// and why the request after them was refused, if one was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Posted {
    /// Requests written into the ring (the refused request's index, if one was refused).
    pub count: usize,
    /// The SQ looked idle, so the doorbell must be rung (libsiw's rule) for the `count`
    /// requests written, refusal or not.
    pub ring_doorbell: bool,
    /// Why request number `count` was refused; `None` when every request went in.
    pub refused: Option<PostFault>,
}

impl Posted {
    /// The refusal as the core reports it ([`PostError::refused`]), if there was one.
    pub fn error(&self) -> Option<PostError> {
        self.refused.map(|f| PostError::refused(self.count, f))
    }
}

impl SiwSq {
    /// Wraps a ring of [`siw_sqe`]s.
    pub fn new(ring: Ring, cfg: SqConfig) -> io::Result<Self> {
        if ring.elem_size != size_of::<siw_sqe>()
            || cfg.max_sge as usize > SIW_MAX_SGE
            || cfg.max_inline as usize > SIW_MAX_INLINE
        {
            return Err(Error::invalid(
                "siw send queue",
                format!(
                    "elements of {} bytes, {} SGEs and {} inline bytes; siw has {}, at most \
                     {SIW_MAX_SGE} and at most {SIW_MAX_INLINE}",
                    ring.elem_size,
                    cfg.max_sge,
                    cfg.max_inline,
                    size_of::<siw_sqe>()
                ),
            )
            .into());
        }
        Ok(SiwSq { ring, put: 0, cfg })
    }

    /// Checks `wr` and returns its SQE flags (without `VALID`) and opcode.
    fn check(&self, wr: &SendWr<'_>) -> Result<(u16, u8), PostFault> {
        let extra = wr.flags.difference(ALLOWED_SEND_FLAGS);
        if !extra.is_empty() {
            return Err(PostFault::FlagsNotEncoded {
                flags: extra.bits(),
                provider: "siw",
            });
        }
        let kind = wr.op.kind();
        let code = match wr.op {
            SendOp::Send => opcode::SEND,
            SendOp::SendWithInv { .. } => opcode::SEND_REMOTE_INV,
            SendOp::RdmaWrite { .. } => opcode::WRITE,
            SendOp::RdmaRead { .. } => opcode::READ,
            // The operation is one this QP accepts (checked once, by rverbs-uverbs' `Qp`,
            // against [`OPS`]; asserted in debug builds by the driver's `post_send`). What
            // `OPS` refuses (a direct caller) is refused here, never written into the ring;
            // `SendOp` is non_exhaustive outside rverbs-uverbs, so the refused kinds are
            // listed by name and a new operation does not compile here.
            other => match other.kind() {
                OpKind::Send
                | OpKind::SendWithInv
                | OpKind::RdmaWrite
                | OpKind::RdmaRead
                | OpKind::SendWithImm
                | OpKind::RdmaWriteWithImm
                | OpKind::AtomicCmpSwp
                | OpKind::AtomicFetchAdd
                | OpKind::LocalInv
                | OpKind::BindMw
                | OpKind::Flush
                | OpKind::AtomicWrite => {
                    return Err(PostFault::OpNotEncoded {
                        op: kind,
                        qp_type: QpType::RC,
                        provider: "siw",
                    })
                }
            },
        };
        let inline = wr.flags.contains(SendFlags::INLINE);
        let n = wr.sge.len();
        if inline {
            if !kind.carries_payload() {
                return Err(PostFault::InlineNotAllowed { op: kind });
            }
            let len: u64 = wr.sge.iter().map(|s| u64::from(s.length)).sum();
            // The QP's own limit, as rxe and mlx5 keep it (siw's kernel only refuses more than
            // SIW_MAX_INLINE, which `new` checked `max_inline` against).
            if len > u64::from(self.cfg.max_inline) {
                return Err(PostFault::InlineTooLong {
                    len,
                    max_inline: self.cfg.max_inline,
                });
            }
        } else if n > self.cfg.max_sge as usize {
            return Err(PostFault::TooManySges {
                num_sge: n,
                max_sge: self.cfg.max_sge,
            });
        }
        if kind == OpKind::RdmaRead && n != 1 {
            return Err(PostFault::ReadSinkSges {
                num_sge: n,
                provider: "siw",
            });
        }
        let mut flags = 0;
        if wr.flags.contains(SendFlags::SIGNALED) || self.cfg.sig_all {
            flags |= wqe_flags::SIGNALLED;
        }
        if wr.flags.contains(SendFlags::SOLICITED) {
            flags |= wqe_flags::SOLICITED;
        }
        if wr.flags.contains(SendFlags::FENCE) {
            flags |= wqe_flags::READ_FENCE;
        }
        if inline {
            flags |= wqe_flags::INLINE;
        }
        Ok((flags, code))
    }

    /// Writes `wrs` into the ring in order and makes each valid. Stops at the first request
    /// that is invalid or finds the ring full: [`Posted::refused`] says why, and the requests
    /// before it ([`Posted::count`]) still need the doorbell when [`Posted::ring_doorbell`]
    /// says so.
    ///
    /// # Safety
    /// As `QpOps::post_send`: every non-INLINE SGE names registered memory that stays valid
    /// until the request completes; every INLINE SGE names `length` readable bytes during
    /// the call, written meanwhile by no one except through `rverbs_uverbs::kernel::shared`, the
    /// kernel or a device.
    pub unsafe fn post(&mut self, wrs: &[SendWr<'_>]) -> Posted {
        let start = self.put;
        let mut refused = None;
        for wr in wrs {
            refused = match self.check(wr) {
                Ok(plan) => {
                    // SeqCst, as libsiw's load: ordered after our earlier VALID stores.
                    if self.ring.flags16(self.put).load(Ordering::SeqCst) & wqe_flags::VALID != 0 {
                        Some(PostFault::QueueFull {
                            outstanding: self.ring.slots,
                        })
                    } else {
                        // SAFETY: the slot's VALID is clear, so it is ours (the kernel does not
                        // read it until we set VALID); the caller's contract covers the SGEs.
                        unsafe { self.write(wr, plan) };
                        self.put = self.put.wrapping_add(1);
                        None
                    }
                }
                Err(f) => Some(f),
            };
            if refused.is_some() {
                break;
            }
        }
        let count = self.put.wrapping_sub(start) as usize;
        Posted {
            count,
            ring_doorbell: count > 0 && self.was_idle(start, count),
            refused,
        }
    }

    /// libsiw's doorbell rule: ring when the element before the first new one is no longer
    /// valid (the kernel has taken it, so it may have gone idle), or when the whole ring was
    /// written in this call.
    fn was_idle(&self, start: u32, count: usize) -> bool {
        if count >= self.ring.slots as usize {
            return true;
        }
        // SeqCst: ordered after the VALID stores of this post (StoreLoad), as libsiw's
        // sequentially consistent atomics are; the kernel clears a flag and then looks at the
        // next slot, so one of the two sides sees the other.
        self.ring
            .flags16(start.wrapping_sub(1))
            .load(Ordering::SeqCst)
            & wqe_flags::VALID
            == 0
    }

    /// Writes one SQE into the slot at `put`, then sets its flags with `VALID`.
    ///
    /// # Safety
    /// The slot's `VALID` is clear (it is ours); `wr` passed [`check`](Self::check); the SGE
    /// contract of [`post`](Self::post).
    unsafe fn write(&mut self, wr: &SendWr<'_>, (flags, code): (u16, u8)) {
        let sqe = self.ring.slot(self.put).cast::<siw_sqe>();
        let (raddr, rkey) = match wr.op {
            SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaRead { remote_addr, rkey } => {
                (remote_addr, rkey)
            }
            SendOp::SendWithInv { invalidate_rkey } => (0, invalidate_rkey),
            _ => (0, 0),
        };
        let inline = flags & wqe_flags::INLINE != 0;
        // SAFETY: (every write through `sqe` below) the slot is inside the ring and 8-aligned
        // (`Ring::new`), and ours until VALID is set (the protocol, this function's
        // contract): the kernel neither reads nor writes it meanwhile, so plain raw-pointer
        // writes race with nothing. No reference into the ring is formed.
        unsafe {
            ptr::addr_of_mut!((*sqe).id).write(wr.wr_id);
            ptr::addr_of_mut!((*sqe).opcode).write(code);
            ptr::addr_of_mut!((*sqe).rkey).write(rkey);
            ptr::addr_of_mut!((*sqe).raddr).write(raddr);
            let sges = ptr::addr_of_mut!((*sqe).sge).cast::<siw_sge>();
            if inline {
                let data = sges.add(1).cast::<u8>();
                let mut off = 0usize;
                for s in wr.sge {
                    let len = s.length as usize;
                    if len == 0 {
                        continue;
                    }
                    // `check` bounded the total by max_inline <= SIW_MAX_INLINE (`new`), the
                    // bytes of sge[1..];
                    // the caller guarantees the source (read with shared's 1-byte atomics).
                    copy_from_shared_raw(s.addr as usize as *const u8, data.add(off), len);
                    off += len;
                }
                sges.write(siw_sge {
                    laddr: 0,
                    length: off as u32,
                    lkey: 0,
                });
                ptr::addr_of_mut!((*sqe).num_sge).write(1);
            } else {
                for (k, s) in wr.sge.iter().enumerate() {
                    // k < num_sge <= max_sge <= SIW_MAX_SGE (check).
                    sges.add(k).write(siw_sge {
                        laddr: s.addr,
                        length: s.length,
                        lkey: s.lkey,
                    });
                }
                ptr::addr_of_mut!((*sqe).num_sge).write(wr.sge.len() as u8);
            }
        }
        // SeqCst (a Release store, and ordered before the doorbell check's load, as libsiw's
        // sequentially consistent store is): the fields above are visible before the kernel
        // sees VALID.
        self.ring
            .flags16(self.put)
            .store(flags | wqe_flags::VALID, Ordering::SeqCst);
    }
}

/// The user side of a receive ring: a QP's RQ or an SRQ.
#[derive(Debug)]
pub struct SiwRq {
    ring: Ring,
    put: u32,
    max_sge: u32,
}

impl SiwRq {
    /// Wraps a ring of [`siw_rqe`]s taking requests of at most `max_sge` SGEs.
    pub fn new(ring: Ring, max_sge: u32, queue: SiwQueue) -> io::Result<Self> {
        if ring.elem_size != size_of::<siw_rqe>() || max_sge as usize > SIW_MAX_SGE {
            return Err(Error::invalid(
                format!("siw {queue}"),
                format!(
                    "elements of {} bytes and {max_sge} SGEs; siw has {} and at most {SIW_MAX_SGE}",
                    ring.elem_size,
                    size_of::<siw_rqe>()
                ),
            )
            .into());
        }
        Ok(SiwRq {
            ring,
            put: 0,
            max_sge,
        })
    }

    /// Writes `wrs` into the ring in order, each made valid as it is written (receives need
    /// no doorbell). Stops at the first invalid request or a full ring.
    ///
    /// # Safety
    /// Every SGE names registered memory that stays valid until the request completes (the
    /// kernel writes into it).
    pub unsafe fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<usize, PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            let fail = |fault| PostError::refused(i, fault);
            if wr.sge.len() > self.max_sge as usize {
                return Err(fail(PostFault::TooManySges {
                    num_sge: wr.sge.len(),
                    max_sge: self.max_sge,
                }));
            }
            let flags = self.ring.flags16(self.put);
            // Acquire: the kernel's use of the slot is over before we rewrite it.
            if flags.load(Ordering::Acquire) & wqe_flags::VALID != 0 {
                return Err(fail(PostFault::QueueFull {
                    outstanding: self.ring.slots,
                }));
            }
            let rqe = self.ring.slot(self.put).cast::<siw_rqe>();
            // SAFETY: the slot is in the ring, 8-aligned, and ours while VALID is clear (the
            // protocol): no one reads or writes it until the store below; k < num_sge <=
            // max_sge <= SIW_MAX_SGE.
            unsafe {
                ptr::addr_of_mut!((*rqe).id).write(wr.wr_id);
                ptr::addr_of_mut!((*rqe).num_sge).write(wr.sge.len() as u8);
                ptr::addr_of_mut!((*rqe).opcode).write(0);
                ptr::addr_of_mut!((*rqe).unused).write(0);
                let sges = ptr::addr_of_mut!((*rqe).sge).cast::<siw_sge>();
                for (k, s) in wr.sge.iter().enumerate() {
                    sges.add(k).write(siw_sge {
                        laddr: s.addr,
                        length: s.length,
                        lkey: s.lkey,
                    });
                }
            }
            // Release: the element is complete before the kernel sees VALID.
            flags.store(wqe_flags::VALID, Ordering::Release);
            self.put = self.put.wrapping_add(1);
        }
        Ok(wrs.len())
    }
}

/// The user side of a siw CQ.
#[derive(Debug)]
pub struct SiwCq {
    ring: Ring,
    get: u32,
}

/// A `WcOpcode` for a CQE opcode siw does not define for userspace: the siw number plus this,
/// so it cannot be mistaken for a verbs opcode and stays visible.
pub const UNKNOWN_OPCODE_BASE: u32 = 0x1_0000;

impl SiwCq {
    /// Wraps a ring of [`siw_cqe`]s followed by its notify word.
    pub fn new(ring: Ring) -> io::Result<Self> {
        if ring.elem_size != size_of::<siw_cqe>() {
            return Err(Error::invalid(
                "siw completion queue",
                format!("elements of {} bytes, siw has 32", ring.elem_size),
            )
            .into());
        }
        Ok(SiwCq { ring, get: 0 })
    }

    /// Moves up to `out.len()` completions into `out`; returns how many.
    #[inline]
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        // The empty poll (about half of a ping-pong's polls) is one flag load here, without
        // the decoding loop's frame. Relaxed: only whether to go on is decided by it;
        // `take` loads the flags again with Acquire before it reads the element.
        if out.is_empty()
            || u16::from(self.ring.flags8(self.get).load(Ordering::Relaxed)) & wqe_flags::VALID == 0
        {
            return 0;
        }
        self.poll_some(out)
    }

    /// [`poll`](Self::poll) once a completion was seen.
    #[inline(never)]
    fn poll_some(&mut self, out: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Some(cqe) = self.take() else { break };
            out[n] = decode(&cqe);
            n += 1;
        }
        n
    }

    /// The next CQE, copied out and its slot handed back, if the kernel has produced one.
    #[inline]
    pub fn take(&mut self) -> Option<siw_cqe> {
        let flags = self.ring.flags8(self.get);
        // Acquire: pairs with the kernel's barrier before setting VALID, so the element's
        // bytes are visible.
        if u16::from(flags.load(Ordering::Acquire)) & wqe_flags::VALID == 0 {
            return None;
        }
        // SAFETY: in bounds and aligned (Ring::new); while VALID is set the kernel does not
        // write the element (it writes only slots whose flags are 0), so this copy races
        // with nothing. Read by value: no reference into the ring.
        let mut cqe = unsafe { self.ring.slot(self.get).cast::<siw_cqe>().read() };
        // The flags as loaded atomically above (the copy's byte is the same value).
        cqe.flags = flags.load(Ordering::Relaxed);
        // Release: our copy is done before the kernel may see the slot free and rewrite it.
        flags.store(0, Ordering::Release);
        self.get = self.get.wrapping_add(1);
        Some(cqe)
    }

    /// Arms the CQ: an event for the next solicited completion, or for the next completion.
    pub fn arm(&mut self, solicited_only: bool) {
        let v = if solicited_only {
            notify::SOLICITED
        } else {
            notify::SOLICITED | notify::NEXT_COMPLETION
        };
        // SeqCst and a full fence: the arm is visible before our next look at the ring
        // (poll, arm, poll again must not miss a completion produced in between).
        self.ring.tail_word().store(v, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The notify word as it is now (tests).
    #[cfg(test)]
    pub fn notify_word(&self) -> u32 {
        self.ring.tail_word().load(Ordering::SeqCst)
    }
}

/// A CQE as a [`WorkCompletion`]: siw's status and opcode numbers to the verbs ones
/// (unknown statuses become `GENERAL_ERR` with the siw number in `vendor_err`), the
/// invalidated STag of a receive with remote invalidate in `imm_data` with `WITH_INV`.
pub fn decode(c: &siw_cqe) -> WorkCompletion {
    let (status, vendor_err) = match c.status {
        wc_status::SUCCESS => (WcStatus::SUCCESS, 0),
        wc_status::LOC_LEN_ERR => (WcStatus::LOC_LEN_ERR, 0),
        wc_status::LOC_PROT_ERR => (WcStatus::LOC_PROT_ERR, 0),
        wc_status::LOC_QP_OP_ERR => (WcStatus::LOC_QP_OP_ERR, 0),
        wc_status::WR_FLUSH_ERR => (WcStatus::WR_FLUSH_ERR, 0),
        wc_status::BAD_RESP_ERR => (WcStatus::BAD_RESP_ERR, 0),
        wc_status::LOC_ACCESS_ERR => (WcStatus::LOC_ACCESS_ERR, 0),
        wc_status::REM_ACCESS_ERR => (WcStatus::REM_ACCESS_ERR, 0),
        wc_status::REM_INV_REQ_ERR => (WcStatus::REM_INV_REQ_ERR, 0),
        wc_status::GENERAL_ERR => (WcStatus::GENERAL_ERR, 0),
        other => (WcStatus::GENERAL_ERR, u32::from(other)),
    };
    let op = match c.opcode {
        opcode::WRITE => WcOpcode::RDMA_WRITE,
        opcode::READ | opcode::READ_LOCAL_INV => WcOpcode::RDMA_READ,
        opcode::SEND | opcode::SEND_WITH_IMM | opcode::SEND_REMOTE_INV => WcOpcode::SEND,
        opcode::FETCH_AND_ADD => WcOpcode::FETCH_ADD,
        opcode::COMP_AND_SWAP => WcOpcode::COMP_SWAP,
        opcode::RECEIVE => WcOpcode::RECV,
        opcode::INVAL_STAG => WcOpcode::LOCAL_INV,
        other => WcOpcode(UNKNOWN_OPCODE_BASE + u32::from(other)),
    };
    let (wc_flags, imm_data) = if u16::from(c.flags) & wqe_flags::REM_INVAL != 0 {
        // `inval_stag` is the union's first 4 bytes (whatever the host's byte order).
        let b = c.imm_data.to_ne_bytes();
        (
            WcFlags::WITH_INV,
            u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        )
    } else {
        (WcFlags::empty(), 0)
    };
    WorkCompletion {
        wr_id: c.id,
        opcode: op,
        byte_len: c.bytes,
        qp_num: c.qp_id as u32,
        wc_flags,
        status,
        vendor_err,
        imm_data,
        ..WorkCompletion::default()
    }
}
