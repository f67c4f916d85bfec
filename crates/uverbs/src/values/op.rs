//! The kinds of send operation, the device's extended capabilities, and a FLUSH's operands.

/// The kind of a send operation, without its operands: one per [`SendOp`](crate::wr::SendOp) variant.
///
/// Exhaustive on purpose (unlike [`SendOp`](crate::wr::SendOp)): [`SendOp::kind`](crate::wr::SendOp::kind) matches every operation, so a
/// new operation adds a variant here, and each provider's capability table (an exhaustive
/// `match` over `OpKind`) stops compiling until it says whether it encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum OpKind {
    /// `IBV_WR_RDMA_WRITE`.
    RdmaWrite = 0,
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    RdmaWriteWithImm = 1,
    /// `IBV_WR_SEND`.
    Send = 2,
    /// `IBV_WR_SEND_WITH_IMM`.
    SendWithImm = 3,
    /// `IBV_WR_RDMA_READ`.
    RdmaRead = 4,
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    AtomicCmpSwp = 5,
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    AtomicFetchAdd = 6,
    /// `IBV_WR_LOCAL_INV`.
    LocalInv = 7,
    /// `IBV_WR_BIND_MW`.
    BindMw = 8,
    /// `IBV_WR_SEND_WITH_INV`.
    SendWithInv = 9,
    /// `IBV_WR_FLUSH` (IBTA 1.5).
    Flush = 14,
    /// `IBV_WR_ATOMIC_WRITE` (IBTA 1.5).
    AtomicWrite = 15,
}

impl OpKind {
    /// Every kind, in `IBV_WR_*` order.
    pub const ALL: [OpKind; 12] = [
        OpKind::RdmaWrite,
        OpKind::RdmaWriteWithImm,
        OpKind::Send,
        OpKind::SendWithImm,
        OpKind::RdmaRead,
        OpKind::AtomicCmpSwp,
        OpKind::AtomicFetchAdd,
        OpKind::LocalInv,
        OpKind::BindMw,
        OpKind::SendWithInv,
        OpKind::Flush,
        OpKind::AtomicWrite,
    ];

    /// The verbs name (`IBV_WR_` left off).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::RdmaWrite => "RDMA_WRITE",
            OpKind::RdmaWriteWithImm => "RDMA_WRITE_WITH_IMM",
            OpKind::Send => "SEND",
            OpKind::SendWithImm => "SEND_WITH_IMM",
            OpKind::RdmaRead => "RDMA_READ",
            OpKind::AtomicCmpSwp => "ATOMIC_CMP_AND_SWP",
            OpKind::AtomicFetchAdd => "ATOMIC_FETCH_AND_ADD",
            OpKind::LocalInv => "LOCAL_INV",
            OpKind::BindMw => "BIND_MW",
            OpKind::SendWithInv => "SEND_WITH_INV",
            OpKind::Flush => "FLUSH",
            OpKind::AtomicWrite => "ATOMIC_WRITE",
        }
    }

    /// The `IB_UVERBS_WR_*` / `IBV_WR_*` number.
    pub const fn wr_opcode(self) -> u32 {
        self as u32
    }

    /// The `IBV_QP_EX_WITH_*` bit: `1 << wr_opcode` up to SEND_WITH_INV, then
    /// `IBV_QP_EX_WITH_FLUSH` (bit 11) and `IBV_QP_EX_WITH_ATOMIC_WRITE` (bit 12).
    pub const fn qp_ex_bit(self) -> u64 {
        match self {
            OpKind::Flush => 1 << 11,
            OpKind::AtomicWrite => 1 << 12,
            k => 1 << k as u64,
        }
    }

    /// The `device_cap_flags_ex` bits of which the device must report one for it to have this
    /// operation (empty: no device capability is needed).
    pub const fn device_caps(self) -> DeviceCapsEx {
        match self {
            OpKind::Flush => {
                DeviceCapsEx(DeviceCapsEx::FLUSH_GLOBAL.0 | DeviceCapsEx::FLUSH_PERSISTENT.0)
            }
            OpKind::AtomicWrite => DeviceCapsEx::ATOMIC_WRITE,
            _ => DeviceCapsEx(0),
        }
    }

    /// Local operations: they act on this side only and take no SGEs.
    pub const fn is_local(self) -> bool {
        matches!(self, OpKind::LocalInv | OpKind::BindMw)
    }

    /// The operations that carry outbound payload (the ones INLINE applies to).
    pub const fn carries_payload(self) -> bool {
        matches!(
            self,
            OpKind::Send
                | OpKind::SendWithImm
                | OpKind::SendWithInv
                | OpKind::RdmaWrite
                | OpKind::RdmaWriteWithImm
        )
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `IBV_FLUSH_*` placement types of a FLUSH (`ibv_wr_flush`'s `type`): where the flushed
/// writes must have got to. Bits; a FLUSH names one or both, and the target region must have
/// been registered with the matching [`AccessFlags`](crate::mr::AccessFlags)
/// (`FLUSH_GLOBAL`, `FLUSH_PERSISTENT`): the responder refuses others (a remote access error
/// completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlushType(pub u8);

impl FlushType {
    /// `IBV_FLUSH_GLOBAL`: the global visibility point.
    pub const GLOBAL: FlushType = FlushType(1);
    /// `IBV_FLUSH_PERSISTENT`: persistence (memory the kernel knows to be persistent only).
    pub const PERSISTENT: FlushType = FlushType(2);
}

/// `IBV_FLUSH_*` selectivity levels of a FLUSH (`ibv_wr_flush`'s `level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlushLevel(pub u8);

impl FlushLevel {
    /// `IBV_FLUSH_RANGE`: the `len` bytes at `remote_addr`.
    pub const RANGE: FlushLevel = FlushLevel(0);
    /// `IBV_FLUSH_MR`: the whole region `rkey` names.
    pub const MR: FlushLevel = FlushLevel(1);
}

/// `device_cap_flags_ex` of the extended device query (`enum ib_uverbs_device_cap_flags`): a
/// value the kernel writes, so a newtype with the bits rverbs reads as constants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceCapsEx(pub u64);

impl DeviceCapsEx {
    /// `IB_UVERBS_DEVICE_FLUSH_GLOBAL`: FLUSH to the global visibility point.
    pub const FLUSH_GLOBAL: DeviceCapsEx = DeviceCapsEx(1 << 38);
    /// `IB_UVERBS_DEVICE_FLUSH_PERSISTENT`: FLUSH to persistence.
    pub const FLUSH_PERSISTENT: DeviceCapsEx = DeviceCapsEx(1 << 39);
    /// `IB_UVERBS_DEVICE_ATOMIC_WRITE`: ATOMIC_WRITE.
    pub const ATOMIC_WRITE: DeviceCapsEx = DeviceCapsEx(1 << 40);

    /// Whether any bit of `other` is set here.
    pub const fn intersects(self, other: DeviceCapsEx) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: DeviceCapsEx) -> bool {
        self.0 & other.0 == other.0
    }
}
