//! Work requests: what is posted to a send or receive queue. Provider-neutral; each provider
//! turns them into its own WQE format.

#![allow(unsafe_code)] // the zero-cost views of MrSge lists as raw lists

use crate::newtype::flag_set;

use std::marker::PhantomData;

/// One raw scatter/gather element: an address range and the local key of the memory region
/// that covers it. Nothing checks a raw `Sge`, so only the `unsafe` posting functions
/// (`post_send_raw`, `post_recv_raw`) take lists of them; the safe ones take [`MrSge`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    /// Start address (the region's iova space: for rverbs' regions, the virtual address).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// A scatter/gather element that names a range of a live, registered memory region: made only
/// by [`Mr::sge`](crate::mr::Mr::sge) / [`Mr::try_sge`](crate::mr::Mr::try_sge), which check
/// the range, and borrowing that `Mr` for `'a`.
///
/// `#[repr(transparent)]` over [`Sge`]: a list of them is handed to the provider as a list of
/// raw SGEs at no cost. Why posting them is safe: docs/architecture.md, "Why this is sound".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct MrSge<'a> {
    sge: Sge,
    _mr: PhantomData<&'a ()>,
}

impl<'a> MrSge<'a> {
    /// Wraps `sge`.
    ///
    /// # Safety
    /// `sge` must lie inside a memory region that stays registered for `'a`, and the memory
    /// must never be accessed through Rust references while it is registered.
    pub(crate) const unsafe fn new_unchecked(sge: Sge) -> Self {
        MrSge {
            sge,
            _mr: PhantomData,
        }
    }

    internal! {
    /// The raw element.
    pub const fn raw(&self) -> Sge {
        self.sge
    }
    }

    internal! {
    /// The raw elements of a list (no copy).
    pub fn raw_slice<'s>(list: &'s [MrSge<'a>]) -> &'s [Sge] {
        // SAFETY: MrSge is repr(transparent) over Sge (the PhantomData is a ZST), so the
        // slices have the same layout and length.
        unsafe { std::slice::from_raw_parts(list.as_ptr().cast::<Sge>(), list.len()) }
    }
    }
}

impl From<MrSge<'_>> for Sge {
    fn from(s: MrSge<'_>) -> Sge {
        s.sge
    }
}

impl std::ops::Deref for MrSge<'_> {
    type Target = Sge;
    fn deref(&self) -> &Sge {
        &self.sge
    }
}

/// The element types a work request's gather/scatter list can hold: [`Sge`] (raw, unsafe to
/// post) and [`MrSge`] (checked, safe to post). Sealed.
pub trait SgeList: sealed::Sealed + Copy {
    /// The raw element.
    fn raw_sge(&self) -> Sge;
}
impl SgeList for Sge {
    fn raw_sge(&self) -> Sge {
        *self
    }
}
impl SgeList for MrSge<'_> {
    fn raw_sge(&self) -> Sge {
        self.sge
    }
}
mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Sge {}
    impl Sealed for super::MrSge<'_> {}
}

flag_set! {
    /// `ibv_send_flags` (same numbers as `IB_UVERBS_SEND_*`... and rxe's WQE).
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics before this request.
        const FENCE = 1 << 0;
        /// Generate a completion for this request.
        const SIGNALED = 1 << 1;
        /// Ask the receiver for a solicited event.
        const SOLICITED = 1 << 2;
        /// Copy the payload into the work queue entry at post time.
        const INLINE = 1 << 3;
        /// Offload the IP checksum (UD/raw packet QPs).
        const IP_CSUM = 1 << 4;
    }
}

/// The operation of a send work request, with its operands.
#[allow(missing_docs)] // operand fields: the names are the verbs' own (remote_addr, rkey, ...)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// More operations may be added (as atomic write and flush were), so code outside rverbs
// matches with a wildcard arm. Each variant is a row of the op table (`values/op.rs`), which
// makes `SendOp::kind` (`op.rs`): a variant without a row does not compile.
#[non_exhaustive]
pub enum SendOp {
    /// SEND: consumes a receive at the peer.
    Send,
    /// SEND with immediate data; `imm` in host byte order.
    SendWithImm { imm: u32 },
    /// SEND that invalidates `invalidate_rkey` at the peer.
    SendWithInv { invalidate_rkey: u32 },
    /// RDMA WRITE to the peer's `remote_addr` (under `rkey`).
    RdmaWrite { remote_addr: u64, rkey: u32 },
    /// RDMA WRITE with immediate data (consumes a receive at the peer).
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    /// RDMA READ from the peer into the local SGEs.
    RdmaRead { remote_addr: u64, rkey: u32 },
    /// Atomic compare-and-swap; the 8-byte local buffer receives the old value.
    AtomicCmpSwp {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// Atomic fetch-and-add; the 8-byte local buffer receives the old value.
    AtomicFetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    /// Local invalidation of `invalidate_rkey` (a type 2 memory window's rkey, or a
    /// fast-registration MR's).
    LocalInv { invalidate_rkey: u32 },
    /// Binds a memory window (`IB_WR_BIND_MW`): its operands come from
    /// [`Mw::bind_info`](crate::mw::Mw::bind_info) (checked, posted by
    /// [`Qp::bind_mw`](crate::qp::Qp::bind_mw)) or, in the C drop-in, the `unsafe`
    /// `MwBind::from_raw` (feature `internals`). Takes no SGEs.
    BindMw(crate::values::MwBind),
    /// FLUSH (IBTA 1.5, RC): the peer makes the writes that reached it before this request
    /// reach the placement `flush_type` names, for the `len` bytes at `remote_addr`
    /// ([`FlushLevel::RANGE`](crate::op::FlushLevel::RANGE)) or the whole region `rkey` names
    /// ([`FlushLevel::MR`](crate::op::FlushLevel::MR)). The region must have been
    /// registered with the matching `FLUSH_*` access flag. Takes no SGEs. Only on a device
    /// that reports FLUSH ([`OpSet`](crate::OpSet)).
    Flush {
        remote_addr: u64,
        rkey: u32,
        len: u32,
        flush_type: crate::values::FlushType,
        level: crate::values::FlushLevel,
    },
    /// ATOMIC_WRITE (IBTA 1.5, RC): the 8 bytes of `value` are written at the peer's
    /// `remote_addr` (8-byte aligned, under `rkey`, which needs remote write access) as one
    /// unit, after the writes before it. Takes no SGEs. Only on a device that reports
    /// ATOMIC_WRITE ([`OpSet`](crate::OpSet)).
    AtomicWrite {
        remote_addr: u64,
        rkey: u32,
        value: [u8; 8],
    },
}

impl SendOp {
    internal! {
    /// `IB_UVERBS_WR_*` opcode number.
    pub const fn wr_opcode(&self) -> u32 {
        self.kind().wr_opcode()
    }
    }
}

internal_fields! {
/// The destination of a UD send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// Provider handle of the address handle (rxe: `ah_num`; filled from an `Ah`).
    pub ah_num: u32,
    /// Kernel handle of the address handle.
    pub ah_handle: u32,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}
}

/// One send work request whose gather list holds `S`: [`MrSge`] for the safe
/// `Qp::post_send`, raw [`Sge`] (the default, and what providers see) for `post_send_raw`.
///
/// `#[repr(C)]` so that `SendWr<MrSge>` and `SendWr<Sge>` have the same layout.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct SendWr<'a, S = Sge> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation and operands.
    pub op: SendOp,
    /// Gather list.
    pub sge: &'a [S],
    /// Send flags.
    pub flags: SendFlags,
    /// Destination of a UD send.
    pub ud: Option<UdDest>,
}

/// A send work request that can be posted in safe code (its SGEs name live `Mr`s).
pub type MrSendWr<'a> = SendWr<'a, MrSge<'a>>;
/// A receive work request that can be posted in safe code (its SGEs name live `Mr`s).
pub type MrRecvWr<'a> = RecvWr<'a, MrSge<'a>>;

impl<'a, 'm> SendWr<'a, MrSge<'m>> {
    internal! {
    /// The same list as raw work requests, for the provider (no copy).
    pub fn raw_list<'s>(list: &'s [SendWr<'a, MrSge<'m>>]) -> &'s [SendWr<'a, Sge>] {
        // SAFETY: SendWr is repr(C); `&[MrSge]` and `&[Sge]` have the same layout (MrSge is
        // repr(transparent) over Sge), so both instantiations have the same layout.
        unsafe { std::slice::from_raw_parts(list.as_ptr().cast(), list.len()) }
    }
    }
}

impl<'a, 'm> RecvWr<'a, MrSge<'m>> {
    internal! {
    /// The same list as raw work requests, for the provider (no copy).
    pub fn raw_list<'s>(list: &'s [RecvWr<'a, MrSge<'m>>]) -> &'s [RecvWr<'a, Sge>] {
        // SAFETY: as for SendWr::raw_list.
        unsafe { std::slice::from_raw_parts(list.as_ptr().cast(), list.len()) }
    }
    }
}

impl<'a, S: SgeList> SendWr<'a, S> {
    /// A signaled SEND of `sge`.
    pub fn send(wr_id: u64, sge: &'a [S]) -> Self {
        Self {
            wr_id,
            op: SendOp::Send,
            sge,
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }

    internal! {
    /// Total bytes of the gather list.
    pub fn total_len(&self) -> u64 {
        self.sge.iter().map(|s| u64::from(s.raw_sge().length)).sum()
    }
    }
}

/// One receive work request (`S` as for [`SendWr`]). `#[repr(C)]` for the same reason.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct RecvWr<'a, S = Sge> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list.
    pub sge: &'a [S],
}

impl<'a, S: SgeList> RecvWr<'a, S> {
    /// A receive into `sge`.
    pub fn new(wr_id: u64, sge: &'a [S]) -> Self {
        RecvWr { wr_id, sge }
    }
}
