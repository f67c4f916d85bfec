//! A memory window's type and the operands of a bind.

#![allow(unsafe_code)] // MwBind::from_raw: an unsafe constructor, no unsafe block

use crate::newtype::raw_newtype;
use crate::values::AccessFlags;

raw_newtype! {
    /// `ib_uverbs_mw_type` / `ibv_mw_type`.
    MwType(u8) {
        /// Bound by `ibv_bind_mw`, usable through any QP of the PD.
        TYPE_1 = 1, "type 1";
        /// Bound by a bind work request, usable only through the QP that bound it.
        TYPE_2 = 2, "type 2";
    }
}

/// The operands of a bind work request (`IB_WR_BIND_MW`; rxe's `rxe_send_wr.wr.mw`): which
/// window, its new rkey, which region, the range and the window's access.
///
/// Plain numbers, as [`SendOp`](crate::wr::SendOp)'s other operands: made only by the
/// `unsafe` `MwBind::from_raw` (and inside [`MwBinding`](crate::mw::MwBinding), the checked
/// bind that [`Mw::bind_info`](crate::mw::Mw::bind_info) makes and
/// [`Qp::bind_mw`](crate::qp::Qp::bind_mw) consumes, which never hands its copy out), so that
/// a copy posted after its window or region is gone is its maker's promise broken, never safe
/// code's doing.
///
/// `from_raw` and the accessors are for the crates of this workspace (feature `internals`):
/// the C drop-in, whose `ibv_bind_mw` and `IBV_WR_BIND_MW` leave the window and region to the
/// C program as libibverbs does, and the providers that encode the bind. A Rust user binds
/// with [`Mw::bind_info`](crate::mw::Mw::bind_info) and [`Qp::bind_mw`](crate::qp::Qp::bind_mw),
/// which keep both (types 1 and 2); a user does not build a `SendOp::BindMw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MwBind {
    pub(crate) mw_type: MwType,
    pub(crate) mw_rkey: u32,
    pub(crate) rkey: u32,
    pub(crate) mr_lkey: u32,
    pub(crate) addr: u64,
    pub(crate) length: u64,
    pub(crate) access: AccessFlags,
}

impl MwBind {
    internal! {
    /// A bind from raw numbers, as a C caller gives them (`ibv_bind_mw`, `IBV_WR_BIND_MW`).
    ///
    /// # Safety
    /// Once bound, peers may read and write `addr..addr + length` as `access` allows, also
    /// where the region's own flags would not let them (the kernel only requires `MW_BIND` on
    /// the region, and LOCAL_WRITE for remote write). The region `mr_lkey` must therefore be
    /// memory that Rust code never references while a peer may write it through the window,
    /// and that stays allocated until the window is unbound, invalidated or deallocated — the
    /// kernel refuses to deregister it meanwhile, so for an [`Mr`](crate::mr::Mr) (not a
    /// [`RawMr`](crate::mr::RawMr), whose drop only logs that failure) the allocation is kept.
    ///
    /// For every post of it (it is `Copy`), the window `mw_rkey` names and the region
    /// `mr_lkey` names must stay allocated until that bind is over (its completion, or a later
    /// one of the same send queue, polled; or the QP destroyed): keys are reused, and a bind
    /// still queued when its window or region is gone binds whichever window or region got
    /// the key next. [`Qp::bind_mw`](crate::qp::Qp::bind_mw) with an
    /// [`MwBinding`](crate::mw::MwBinding) keeps both for you.
    pub const unsafe fn from_raw(
        mw_type: MwType,
        mw_rkey: u32,
        rkey: u32,
        mr_lkey: u32,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> Self {
        MwBind {
            mw_type,
            mw_rkey,
            rkey,
            mr_lkey,
            addr,
            length,
            access,
        }
    }
    }
    internal! {
    /// Type of the window being bound.
    pub const fn mw_type(&self) -> MwType {
        self.mw_type
    }
    }
    internal! {
    /// The window's rkey before the bind (what the kernel looks the window up by).
    pub const fn mw_rkey(&self) -> u32 {
        self.mw_rkey
    }
    }
    internal! {
    /// The window's rkey after the bind: what peers name.
    pub const fn rkey(&self) -> u32 {
        self.rkey
    }
    }
    internal! {
    /// Local key of the region the window is bound in (0 for an unbind).
    pub const fn mr_lkey(&self) -> u32 {
        self.mr_lkey
    }
    }
    internal! {
    /// Start address of the window (the region's iova space).
    pub const fn addr(&self) -> u64 {
        self.addr
    }
    }
    internal! {
    /// Length in bytes (0: unbind a type 1 window).
    pub const fn length(&self) -> u64 {
        self.length
    }
    }
    internal! {
    /// The window's access flags.
    pub const fn access(&self) -> AccessFlags {
        self.access
    }
    }
}
