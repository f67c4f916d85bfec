//! Work requests: what is posted to a send or receive queue. Provider-neutral; each provider
//! turns them into its own WQE format.

use bitflags::bitflags;

/// One scatter/gather element: a range of a registered memory region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

bitflags! {
    /// `ibv_send_flags` (same numbers as `IB_UVERBS_SEND_*`... and rxe's WQE).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        const FENCE = 1 << 0;
        const SIGNALED = 1 << 1;
        const SOLICITED = 1 << 2;
        const INLINE = 1 << 3;
        const IP_CSUM = 1 << 4;
    }
}

/// The operation of a send work request, with its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    Send,
    /// `imm` in host byte order.
    SendWithImm {
        imm: u32,
    },
    SendWithInv {
        invalidate_rkey: u32,
    },
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    /// The 8-byte local buffer receives the old value.
    AtomicCmpSwp {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// The 8-byte local buffer receives the old value.
    AtomicFetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    LocalInv {
        invalidate_rkey: u32,
    },
}

impl SendOp {
    /// `IB_UVERBS_WR_*` opcode number.
    pub const fn wr_opcode(&self) -> u32 {
        match self {
            SendOp::RdmaWrite { .. } => 0,
            SendOp::RdmaWriteWithImm { .. } => 1,
            SendOp::Send => 2,
            SendOp::SendWithImm { .. } => 3,
            SendOp::RdmaRead { .. } => 4,
            SendOp::AtomicCmpSwp { .. } => 5,
            SendOp::AtomicFetchAdd { .. } => 6,
            SendOp::LocalInv { .. } => 7,
            SendOp::SendWithInv { .. } => 9,
        }
    }
}

/// The destination of a UD send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// Provider handle of the address handle (rxe: `ah_num`; filled from an `Ah`).
    pub ah_num: u32,
    /// Kernel handle of the address handle.
    pub ah_handle: u32,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// One send work request.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: SendOp,
    pub sge: &'a [Sge],
    pub flags: SendFlags,
    pub ud: Option<UdDest>,
}

impl<'a> SendWr<'a> {
    /// A signaled SEND of `sge`.
    pub fn send(wr_id: u64, sge: &'a [Sge]) -> Self {
        Self {
            wr_id,
            op: SendOp::Send,
            sge,
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }

    /// Total bytes of the gather list.
    pub fn total_len(&self) -> u64 {
        self.sge.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// One receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sge: &'a [Sge],
}
