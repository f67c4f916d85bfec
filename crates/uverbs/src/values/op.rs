//! The send operations: **the op table** (`send_op_table!`), one declaration per operation
//! from which the rest follows, the device's extended capabilities, and a FLUSH's operands.
//!
//! # The op table
//!
//! Each send operation is declared once, in `send_op_table!`, as io-uring's `opcode!`
//! declares one operation in one block: its Rust names, its verbs name, its numbers
//! (`ibv_wr_opcode` / `ib_uverbs_wr_opcode`, the `ibv_wc_opcode` of its completion, its
//! `IBV_QP_EX_WITH_*` bit), the transports that carry it, whether it takes SGEs and outbound
//! payload, the device capability it needs, and since when it exists (IBTA, Linux). From
//! that table follow, without a second list anywhere:
//!
//! - [`OpKind`], its `ALL`, numbers, name and facts (this file);
//! - [`OpTable`], a struct with one field per operation, which is how each provider writes
//!   its capability table (the transports it encodes each operation on): a literal without a
//!   field for a declared operation does not compile, so a new operation cannot be forgotten
//!   by a provider, nor silently refused by a `_` arm;
//! - `SendOp::kind` and `OpKind::wc_opcode` (`op.rs`, which sees the completion types), and
//!   `OpSet::for_transport` from the transports column.
//!
//! Written by hand, because they carry operands the table does not describe: the `SendOp`
//! variant (`wr.rs`), the C drop-in's `ibv_post_send` conversion (an exhaustive `match` over
//! `OpKind`), and each provider's encoder.

use super::qp::QpType;

/// The op table: every send operation, declared once (module docs). A callback macro: it
/// hands the rows to the macro named `$then`, which picks the columns it needs (this file
/// makes [`OpKind`] and [`OpTable`] from them, `op.rs` `SendOp::kind` and the completion
/// opcodes).
///
/// A row: `Variant / field { name, wr, wc, qp_ex, transports, sges, payload, local, device,
/// ibta, linux }`:
/// - `Variant` names the [`OpKind`] and `SendOp` variant, `field` the [`OpTable`] field;
/// - `name`: the verbs name, `IBV_WR_` left off;
/// - `wr`: the `IBV_WR_*` / `IB_UVERBS_WR_*` number (rdma-core's `enum ibv_wr_opcode` and the
///   kernel's `enum ib_uverbs_wr_opcode` agree on every one);
/// - `wc`: the `WcOpcode` constant (`ibv_wc_opcode`) of its requester completion;
/// - `qp_ex`: the bit number of its `IBV_QP_EX_WITH_*` flag (`ibv_qp_init_attr_ex::send_ops_flags`);
/// - `transports`: the QP types whose transport carries it (IBTA vol. 1's packet opcodes per
///   transport, `op.rs`'s docs): RC, UC, UD. XRC and SRD are not columns: rverbs posts sends on
///   neither yet (an XRC initiator carries what RC does);
/// - `sges`: whether it takes SGEs; `payload`: whether its SGEs are outbound payload (the
///   operations INLINE applies to); `local`: whether it acts on this side only;
/// - `device`: the `device_cap_flags_ex` bits ([`DeviceCapsEx`]) of which the device must
///   report one (empty: none needed);
/// - `ibta`: the IBTA vol. 1 release that defined it; `linux`: the first kernel whose uverbs
///   ABI carries it, `None` where every kernel rverbs runs on has it.
macro_rules! send_op_table {
    ($then:ident) => {
        $then! {
            /// RDMA WRITE: the local SGEs written at the peer's address (`IBV_WR_RDMA_WRITE`).
            RdmaWrite / rdma_write {
                name: "RDMA_WRITE", wr: 0, wc: RDMA_WRITE, qp_ex: 0,
                transports: [RC | UC], sges: true, payload: true, local: false,
                device: [], ibta: "1.0", linux: None,
            }
            /// RDMA WRITE with immediate data, which consumes a receive at the peer
            /// (`IBV_WR_RDMA_WRITE_WITH_IMM`).
            RdmaWriteWithImm / rdma_write_with_imm {
                name: "RDMA_WRITE_WITH_IMM", wr: 1, wc: RDMA_WRITE, qp_ex: 1,
                transports: [RC | UC], sges: true, payload: true, local: false,
                device: [], ibta: "1.0", linux: None,
            }
            /// SEND (`IBV_WR_SEND`).
            Send / send {
                name: "SEND", wr: 2, wc: SEND, qp_ex: 2,
                transports: [RC | UC | UD], sges: true, payload: true, local: false,
                device: [], ibta: "1.0", linux: None,
            }
            /// SEND with immediate data (`IBV_WR_SEND_WITH_IMM`).
            SendWithImm / send_with_imm {
                name: "SEND_WITH_IMM", wr: 3, wc: SEND, qp_ex: 3,
                transports: [RC | UC | UD], sges: true, payload: true, local: false,
                device: [], ibta: "1.0", linux: None,
            }
            /// RDMA READ into the local SGEs (`IBV_WR_RDMA_READ`).
            RdmaRead / rdma_read {
                name: "RDMA_READ", wr: 4, wc: RDMA_READ, qp_ex: 4,
                transports: [RC], sges: true, payload: false, local: false,
                device: [], ibta: "1.0", linux: None,
            }
            /// Atomic compare-and-swap (`IBV_WR_ATOMIC_CMP_AND_SWP`).
            AtomicCmpSwp / atomic_cmp_swp {
                name: "ATOMIC_CMP_AND_SWP", wr: 5, wc: COMP_SWAP, qp_ex: 5,
                transports: [RC], sges: true, payload: false, local: false,
                device: [], ibta: "1.0", linux: None,
            }
            /// Atomic fetch-and-add (`IBV_WR_ATOMIC_FETCH_AND_ADD`).
            AtomicFetchAdd / atomic_fetch_add {
                name: "ATOMIC_FETCH_AND_ADD", wr: 6, wc: FETCH_ADD, qp_ex: 6,
                transports: [RC], sges: true, payload: false, local: false,
                device: [], ibta: "1.0", linux: None,
            }
            /// Local invalidation of an rkey (`IBV_WR_LOCAL_INV`; the kernel's rdmavt lists it
            /// for RC and UC).
            LocalInv / local_inv {
                name: "LOCAL_INV", wr: 7, wc: LOCAL_INV, qp_ex: 7,
                transports: [RC | UC], sges: false, payload: false, local: true,
                device: [], ibta: "1.2", linux: None,
            }
            /// A memory window bind (`IBV_WR_BIND_MW`).
            BindMw / bind_mw {
                name: "BIND_MW", wr: 8, wc: BIND_MW, qp_ex: 8,
                transports: [RC | UC], sges: false, payload: false, local: true,
                device: [], ibta: "1.0", linux: None,
            }
            /// SEND that invalidates an rkey at the peer (`IBV_WR_SEND_WITH_INV`; the "with
            /// invalidate" packet opcodes exist for RC and XRC only).
            SendWithInv / send_with_inv {
                name: "SEND_WITH_INV", wr: 9, wc: SEND, qp_ex: 9,
                transports: [RC], sges: true, payload: true, local: false,
                device: [], ibta: "1.2", linux: None,
            }
            /// FLUSH to a placement type (`IBV_WR_FLUSH`, IBTA 1.5).
            Flush / flush {
                name: "FLUSH", wr: 14, wc: FLUSH, qp_ex: 11,
                transports: [RC], sges: false, payload: false, local: false,
                device: [FLUSH_GLOBAL | FLUSH_PERSISTENT], ibta: "1.5", linux: Some("6.2"),
            }
            /// An 8-byte write done as one unit (`IBV_WR_ATOMIC_WRITE`, IBTA 1.5).
            AtomicWrite / atomic_write {
                name: "ATOMIC_WRITE", wr: 15, wc: ATOMIC_WRITE, qp_ex: 12,
                transports: [RC], sges: false, payload: false, local: false,
                device: [ATOMIC_WRITE], ibta: "1.5", linux: Some("6.2"),
            }
        }
    };
}
pub(crate) use send_op_table;

/// Makes [`OpKind`] and [`OpTable`] from the op table's rows.
macro_rules! op_kinds {
    ($(
        $(#[$doc:meta])*
        $v:ident / $f:ident {
            name: $name:literal, wr: $wr:literal, wc: $wc:ident, qp_ex: $qp_ex:literal,
            transports: [$($t:ident)|*], sges: $sges:literal, payload: $payload:literal,
            local: $local:literal, device: [$($cap:ident)|*], ibta: $ibta:literal,
            linux: $linux:expr,
        }
    )*) => {
        /// The kind of a send operation, without its operands: one per
        /// [`SendOp`](crate::wr::SendOp) variant, one per row of the op table (module docs).
        ///
        /// Exhaustive on purpose (unlike [`SendOp`](crate::wr::SendOp)): a match over it
        /// names every operation, so the C drop-in's conversion stops compiling until it says
        /// what it does with a new one. Numbered as its `IBV_WR_*`.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum OpKind {
            $( $(#[$doc])* $v = $wr, )*
        }

        /// How many operations the op table declares.
        const OP_COUNT: usize = [$(OpKind::$v),*].len();

        impl OpKind {
            /// Every kind, in `IBV_WR_*` order.
            pub const ALL: [OpKind; OP_COUNT] = [$(OpKind::$v),*];

            /// The verbs name (`IBV_WR_` left off).
            pub const fn name(self) -> &'static str {
                match self { $( OpKind::$v => $name, )* }
            }

            internal! {
            /// The `IB_UVERBS_WR_*` / `IBV_WR_*` number.
            pub const fn wr_opcode(self) -> u32 {
                self as u32
            }
            }

            internal! {
            /// The `IBV_QP_EX_WITH_*` bit: `1 << wr_opcode` up to SEND_WITH_INV, then
            /// `IBV_QP_EX_WITH_FLUSH` (bit 11) and `IBV_QP_EX_WITH_ATOMIC_WRITE` (bit 12).
            pub const fn qp_ex_bit(self) -> u64 {
                match self { $( OpKind::$v => 1 << $qp_ex, )* }
            }
            }

            internal! {
            /// The `device_cap_flags_ex` bits of which the device must report one for it to
            /// have this operation (empty: no device capability is needed).
            pub const fn device_caps(self) -> DeviceCapsEx {
                match self { $( OpKind::$v => DeviceCapsEx(0 $(| DeviceCapsEx::$cap.0)*), )* }
            }
            }

            internal! {
            /// Local operations: they act on this side only and take no SGEs.
            pub const fn is_local(self) -> bool {
                match self { $( OpKind::$v => $local, )* }
            }
            }

            internal! {
            /// Whether the operation takes SGEs (local operations, FLUSH and ATOMIC_WRITE
            /// take none).
            pub const fn takes_sges(self) -> bool {
                match self { $( OpKind::$v => $sges, )* }
            }
            }

            internal! {
            /// The operations that carry outbound payload (the ones INLINE applies to).
            pub const fn carries_payload(self) -> bool {
                match self { $( OpKind::$v => $payload, )* }
            }
            }

            internal! {
            /// The IBTA vol. 1 release that defined the operation ("1.0", "1.2", "1.5").
            pub const fn ibta(self) -> &'static str {
                match self { $( OpKind::$v => $ibta, )* }
            }
            }

            internal! {
            /// The first Linux release whose uverbs ABI carries the operation, `None` where
            /// every kernel rverbs runs on has it.
            pub const fn linux(self) -> Option<&'static str> {
                match self { $( OpKind::$v => $linux, )* }
            }
            }

            /// The QP types whose transport carries the operation (the op table's column).
            pub(crate) const fn transports(self) -> Transports {
                match self { $( OpKind::$v => Transports(0 $(| Transports::$t.0)*), )* }
            }
        }

        internal! {
        /// One `T` per send operation: a field per row of the op table (module docs).
        ///
        /// How a provider writes its capability table (`OpTable<Transports>`: the QP types it
        /// encodes each operation on): a struct literal names every field, so a provider that
        /// does not say whether it encodes a declared operation does not compile.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct OpTable<T> {
            $( #[doc = concat!("For ", $name, ".")] pub $f: T, )*
        }
        }

        impl<T: Copy> OpTable<T> {
            /// The entry of `kind`.
            pub const fn get(&self, kind: OpKind) -> T {
                match kind { $( OpKind::$v => self.$f, )* }
            }

            /// A table with `value` for every operation (tests only: a provider names each).
            #[cfg(test)]
            pub(crate) const fn splat(value: T) -> OpTable<T> {
                OpTable { $( $f: value, )* }
            }
        }
    };
}
send_op_table!(op_kinds);

internal! {
/// A set of the QP types rverbs posts sends on (RC, UC, UD): the transports column of the op
/// table, and the cells of a provider's capability table ([`OpTable`]). Not a value the
/// kernel writes: rverbs' own set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Transports(u8);
}

// Without `internals`, only the crate's own tables name some of these.
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
impl Transports {
    /// No QP type: the operation is not encoded at all.
    pub const NONE: Transports = Transports(0);
    /// Reliable connected.
    pub const RC: Transports = Transports(1);
    /// Unreliable connected.
    pub const UC: Transports = Transports(2);
    /// Unreliable datagram.
    pub const UD: Transports = Transports(4);
    /// The connected types, RC and UC.
    pub const RC_UC: Transports = Transports(1 | 2);
    /// RC, UC and UD.
    pub const RC_UC_UD: Transports = Transports(1 | 2 | 4);

    /// Whether `qp_type` is in the set (false for types rverbs does not post sends on).
    pub const fn contains(self, qp_type: QpType) -> bool {
        let bit = match qp_type {
            QpType::RC => Transports::RC.0,
            QpType::UC => Transports::UC.0,
            QpType::UD => Transports::UD.0,
            _ => 0,
        };
        self.0 & bit != 0
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
