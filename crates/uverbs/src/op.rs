//! What a send operation is, which QP types allow it, and what each provider can encode: the
//! one classification every post is checked against ([`Qp::post_send_raw`](crate::qp::Qp::post_send_raw)
//! runs it before any provider code), and what the C drop-in's extended send API
//! (`IBV_QP_EX_WITH_*`) accepts.
//!
//! Which QP types allow an operation ([`OpSet::for_transport`]) is the InfiniBand
//! Architecture's transport table (IBTA vol. 1, the packet opcodes per transport): RC carries
//! every operation; UC carries SEND and RDMA WRITE (each also with immediate data) and the
//! local operations (LOCAL_INV, BIND_MW), but no RDMA READ, no atomics, and no
//! SEND_WITH_INVALIDATE (the "with invalidate" packet opcodes exist for RC and XRC only; the
//! kernel's rdmavt lists `IB_WR_SEND_WITH_INV` as RC-only and `IB_WR_LOCAL_INV` as RC and UC,
//! and rxe's requester builds no UC packet for SEND_WITH_INV); UD carries SEND and SEND with
//! immediate only. FLUSH and ATOMIC_WRITE (IBTA 1.5) are RC operations.
//!
//! Whether the **device** has an IBTA 1.5 operation is a third question: its
//! `device_cap_flags_ex` ([`DeviceCapsEx`], from the extended device query) must report it
//! (rxe does from Linux 6.2 on; the 6.1 kernel's rxe has neither operation). A QP accepts
//! FLUSH and ATOMIC_WRITE only on a device that reports them ([`OpSet::on_device`]).
//!
//! What a provider can encode on top of that is its [`SendCaps`], data it returns from
//! `Driver::send_caps` (the provider seam, `driver`); a QP accepts the intersection.
//!
//! One rule looks at the memory a request names rather than its operation: on **iWARP** an
//! RDMA READ's sink must be registered with `REMOTE_WRITE` ([`PostFault::ReadSinkNotRemoteWrite`]).
//! iWARP's RDMAP (RFC 5040) carries a READ's data back as a tagged message that the peer
//! places into the requester's sink by the steering tag the READ request advertised, as an
//! RDMA WRITE would; the kernel's own RDMA READ users register their sinks with remote write
//! on iWARP devices for that reason, and iWARP hardware refuses the READ otherwise (siw itself
//! checks only local write). An [`MrSge`](crate::wr::MrSge) is a bare SGE (it is passed to the
//! provider as one, without a copy), so it cannot carry its region's access flags; instead a
//! PD on an iWARP device keeps the local keys of its regions registered without
//! `REMOTE_WRITE` (`ReadSinks`, filled and emptied by registration and deregistration), and
//! [`Qp::post_send_raw`](crate::qp::Qp::post_send_raw) looks up the sinks of each READ in it.
//! Every path that registers through this crate (safe `Mr`s, [`crate::mr::register_raw`] and
//! so the C drop-in's `ibv_reg_mr`) and every path that posts (the safe and raw posts, the C
//! drop-in's `ibv_post_send` and `ibv_wr_*`) is covered; an lkey this process did not register
//! here (another PD's, a made-up number) is not in the set and is left to the device.

use std::collections::HashSet;
use std::sync::Mutex;

use crate::error::PostFault;
use crate::values::{send_op_table, AccessFlags, QpType};
use crate::wc::WcOpcode;
use crate::wr::{SendOp, SendWr};

pub use crate::values::{DeviceCapsEx, FlushLevel, FlushType, OpKind};
internal! {
    pub use crate::values::{OpTable, Transports};
}

/// `SendOp::kind` and `OpKind::wc_opcode` from the op table's rows (`values/op.rs`): a
/// `SendOp` variant without a row, or a row without a variant, does not compile.
macro_rules! op_floor2 {
    ($(
        $(#[$doc:meta])*
        $v:ident / $f:ident { name: $name:literal, wr: $wr:literal, wc: $wc:ident, $($rest:tt)* }
    )*) => {
        impl SendOp {
            /// What kind of operation this is.
            #[inline]
            pub const fn kind(&self) -> OpKind {
                match self {
                    $( SendOp::$v { .. } => OpKind::$v, )*
                }
            }
        }

        impl OpKind {
            internal! {
            /// The `ibv_wc_opcode` of the requester's completion of this operation.
            pub const fn wc_opcode(self) -> WcOpcode {
                match self {
                    $( OpKind::$v => WcOpcode::$wc, )*
                }
            }
            }
        }
    };
}
send_op_table!(op_floor2);

/// A set of [`OpKind`]s (bit `k` is `OpKind` number `k`, as `IBV_QP_EX_WITH_*` numbers them).
///
/// A user reads one ([`Qp::send_ops`](crate::qp::Qp::send_ops)) and asks it
/// [`contains`](OpSet::contains); no user API takes one. Making sets is the providers' side
/// of the op table (their `SendCaps`) and the C drop-in's, so the constructors are for the
/// crates of this workspace (feature `internals`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OpSet(u16);

impl OpSet {
    internal! {
    /// No operation.
    pub const EMPTY: OpSet = OpSet(0);
    }

    internal! {
    /// The set of `kinds`.
    pub const fn of(kinds: &[OpKind]) -> OpSet {
        let mut bits = 0u16;
        let mut i = 0;
        while i < kinds.len() {
            bits |= 1 << kinds[i] as u16;
            i += 1;
        }
        OpSet(bits)
    }
    }

    internal! {
    /// The set whose members are the kinds `f` says yes to.
    pub fn from_fn(f: impl Fn(OpKind) -> bool) -> OpSet {
        OpSet(
            OpKind::ALL
                .iter()
                .filter(|&&k| f(k))
                .fold(0, |b, &k| b | 1 << k as u16),
        )
    }
    }

    /// Whether `kind` is in the set.
    #[inline]
    pub const fn contains(self, kind: OpKind) -> bool {
        self.0 & (1 << kind as u16) != 0
    }

    internal! {
    /// The kinds in both sets.
    pub const fn intersection(self, other: OpSet) -> OpSet {
        OpSet(self.0 & other.0)
    }
    }

    internal! {
    /// The set as `IBV_QP_EX_WITH_*` bits ([`OpKind::qp_ex_bit`]).
    pub const fn bits(self) -> u64 {
        let mut bits = 0;
        let mut i = 0;
        while i < OpKind::ALL.len() {
            if self.contains(OpKind::ALL[i]) {
                bits |= OpKind::ALL[i].qp_ex_bit();
            }
            i += 1;
        }
        bits
    }
    }

    internal! {
    /// The set of the `IBV_QP_EX_WITH_*` bits `bits` (bits naming no [`OpKind`] are left out).
    pub fn from_bits(bits: u64) -> OpSet {
        OpSet::from_fn(|k| bits & k.qp_ex_bit() != 0)
    }
    }

    internal! {
    /// The members a device with `caps` has: those that need no device capability, and those
    /// whose capability ([`OpKind::device_caps`]) the device reports.
    pub fn on_device(self, caps: DeviceCapsEx) -> OpSet {
        OpSet::from_fn(|k| {
            self.contains(k) && (k.device_caps().0 == 0 || caps.intersects(k.device_caps()))
        })
    }
    }

    internal! {
    /// What the transport of `qp_type` carries (the op table's transports column; the module
    /// documentation gives the sources); empty for types rverbs does not post sends on
    /// (RAW_PACKET, XRC).
    pub const fn for_transport(qp_type: QpType) -> OpSet {
        // A provider's own transport (EFA's SRD): what it carries is what its provider says it
        // encodes there (the seam's `driver_qp`).
        if let QpType::DRIVER = qp_type {
            return OpSet::of(&OpKind::ALL);
        }
        let mut bits = 0u16;
        let mut i = 0;
        while i < OpKind::ALL.len() {
            if OpKind::ALL[i].transports().contains(qp_type) {
                bits |= 1 << OpKind::ALL[i] as u16;
            }
            i += 1;
        }
        OpSet(bits)
    }
    }
}

internal! {
/// What a provider can encode, per QP type: data, returned by
/// `Driver::send_caps` (the provider seam, `driver`). A QP of type `t` accepts
/// `OpSet::for_transport(t) ∩ caps.for_type(t)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendCaps {
    /// Operations the provider encodes on RC QPs.
    pub rc: OpSet,
    /// On UC QPs.
    pub uc: OpSet,
    /// On UD QPs.
    pub ud: OpSet,
}
}

impl SendCaps {
    internal! {
    /// The capabilities a provider's table says: for each operation, the QP types it encodes
    /// it on (a struct literal of [`OpTable`] names every operation, so a provider cannot
    /// leave one out).
    pub const fn from_table(table: &OpTable<Transports>) -> SendCaps {
        let (mut rc, mut uc, mut ud) = (0u16, 0u16, 0u16);
        let mut i = 0;
        while i < OpKind::ALL.len() {
            let k = OpKind::ALL[i];
            let t = table.get(k);
            if t.contains(QpType::RC) {
                rc |= 1 << k as u16;
            }
            if t.contains(QpType::UC) {
                uc |= 1 << k as u16;
            }
            if t.contains(QpType::UD) {
                ud |= 1 << k as u16;
            }
            i += 1;
        }
        SendCaps {
            rc: OpSet(rc),
            uc: OpSet(uc),
            ud: OpSet(ud),
        }
    }
    }

    internal! {
    /// What the provider encodes on a `qp_type` QP (empty for other types).
    pub const fn for_type(&self, qp_type: QpType) -> OpSet {
        match qp_type {
            QpType::RC => self.rc,
            QpType::UC => self.uc,
            QpType::UD => self.ud,
            _ => OpSet::EMPTY,
        }
    }
    }

    internal! {
    /// What a `qp_type` QP accepts: what its transport carries and the provider encodes.
    pub const fn allowed(&self, qp_type: QpType) -> OpSet {
        OpSet::for_transport(qp_type).intersection(self.for_type(qp_type))
    }
    }
}

/// Why a `qp_type` QP of `provider` refuses `op` (which it does not accept): its transport
/// does not carry it, the provider does not encode it (`encoded`: what the provider encodes on
/// the type), or the device does not have it.
#[cold]
pub(crate) fn refusal(
    op: OpKind,
    qp_type: QpType,
    provider: &'static str,
    encoded: OpSet,
) -> PostFault {
    if OpSet::for_transport(qp_type).contains(op) && encoded.contains(op) {
        PostFault::OpNotOnDevice { op, provider }
    } else if OpSet::for_transport(qp_type).contains(op) {
        PostFault::OpNotEncoded {
            op,
            qp_type,
            provider,
        }
    } else {
        PostFault::OpForTransport { op, qp_type }
    }
}

/// The local keys of a PD's regions that may not be an RDMA READ's sink on iWARP: those
/// registered without `REMOTE_WRITE` (module docs). Kept only by PDs on iWARP devices.
#[derive(Debug, Default)]
pub(crate) struct ReadSinks {
    unwritable: Mutex<HashSet<u32>>,
}

impl ReadSinks {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<u32>> {
        // A panic while holding the lock left a set of plain numbers: still usable.
        self.unwritable.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A region `lkey` was registered with `access`.
    pub(crate) fn registered(&self, lkey: u32, access: AccessFlags) {
        if !access.contains(AccessFlags::REMOTE_WRITE) {
            self.set().insert(lkey);
        }
    }

    /// The region `lkey` is about to be deregistered (before the kernel may give its key to a
    /// new region); true if it was in the set, so that a failed deregistration can put it
    /// back with [`ReadSinks::restore`].
    pub(crate) fn deregistering(&self, lkey: u32) -> bool {
        self.set().remove(&lkey)
    }

    /// Puts back `lkey` after a failed deregistration (`was` from
    /// [`ReadSinks::deregistering`]).
    pub(crate) fn restore(&self, lkey: u32, was: bool) {
        if was {
            self.set().insert(lkey);
        }
    }

    /// The first RDMA READ of `wrs` with a sink registered without `REMOTE_WRITE`: its index
    /// and the fault. A list without a READ costs a scan of the opcodes; the lock is taken
    /// only from the first READ on.
    #[inline]
    pub(crate) fn check(&self, wrs: &[SendWr<'_>]) -> Option<(usize, PostFault)> {
        let first = wrs
            .iter()
            .position(|w| matches!(w.op, SendOp::RdmaRead { .. }))?;
        self.check_reads(wrs, first)
    }

    #[inline(never)]
    fn check_reads(&self, wrs: &[SendWr<'_>], first: usize) -> Option<(usize, PostFault)> {
        let set = self.set();
        for (i, w) in wrs.iter().enumerate().skip(first) {
            if !matches!(w.op, SendOp::RdmaRead { .. }) {
                continue;
            }
            if let Some(s) = w.sge.iter().find(|s| set.contains(&s.lkey)) {
                return Some((i, PostFault::ReadSinkNotRemoteWrite { lkey: s.lkey }));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::{SendFlags, Sge};

    fn read<'a>(sge: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            wr_id: 0,
            op: SendOp::RdmaRead {
                remote_addr: 0x1000,
                rkey: 9,
            },
            sge,
            flags: SendFlags::empty(),
            ud: None,
        }
    }

    fn sge(lkey: u32) -> Sge {
        Sge {
            addr: 0x2000,
            length: 8,
            lkey,
        }
    }

    #[test]
    fn iwarp_read_sinks_need_remote_write() {
        let sinks = ReadSinks::default();
        sinks.registered(1, AccessFlags::LOCAL_WRITE);
        sinks.registered(2, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
        sinks.registered(3, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
        let (one, two, three) = ([sge(1)], [sge(2)], [sge(3)]);
        // A READ into a region with REMOTE_WRITE passes; with only local write (or remote
        // read) it is refused, at its index, naming the key.
        assert_eq!(sinks.check(&[read(&two)]), None);
        assert_eq!(
            sinks.check(&[read(&two), read(&one)]),
            Some((1, PostFault::ReadSinkNotRemoteWrite { lkey: 1 }))
        );
        assert_eq!(
            sinks.check(&[read(&three)]),
            Some((0, PostFault::ReadSinkNotRemoteWrite { lkey: 3 }))
        );
        // The same regions as the source of a SEND or RDMA WRITE: not the rule's business.
        let send = SendWr {
            op: SendOp::Send,
            ..read(&one)
        };
        let write = SendWr {
            op: SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 1,
            },
            ..read(&three)
        };
        assert_eq!(sinks.check(&[send, write]), None);
        // A key this PD did not register (another PD's, a made-up one): left to the device.
        assert_eq!(sinks.check(&[read(&[sge(77)])]), None);
        // Deregistered: the key may belong to a new region next, which is judged afresh.
        assert!(sinks.deregistering(1));
        assert_eq!(sinks.check(&[read(&one)]), None);
        sinks.registered(1, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
        assert_eq!(sinks.check(&[read(&one)]), None);
        // A failed deregistration puts the key back.
        let was = sinks.deregistering(3);
        sinks.restore(3, was);
        assert!(sinks.check(&[read(&three)]).is_some());
        assert!(
            !sinks.deregistering(2),
            "registered with REMOTE_WRITE: never in the set"
        );
        sinks.restore(2, false);
        assert_eq!(sinks.check(&[read(&two)]), None);
        let f = PostFault::ReadSinkNotRemoteWrite { lkey: 0x1234 };
        assert_eq!(f.kind(), std::io::ErrorKind::InvalidInput);
        let e = crate::PostError::refused(0, f).at("siw0", crate::PostQueue::Send, 0x15);
        assert_eq!(
            e.to_string(),
            "post send to QP 0x15 on siw0: work request #0: RDMA_READ into lkey 0x1234, a \
             region registered without REMOTE_WRITE: on iWARP the peer places a READ's data \
             into its sink as it would an RDMA WRITE's, so the sink must be registered with \
             REMOTE_WRITE; 0 posted"
        );
    }

    #[test]
    fn kinds_number_as_the_verbs() {
        for (i, k) in OpKind::ALL[..10].iter().enumerate() {
            assert_eq!(k.wr_opcode(), i as u32, "{k}");
            assert_eq!(k.qp_ex_bit(), 1 << i, "{k}");
        }
        // IB_UVERBS_WR_FLUSH, IB_UVERBS_WR_ATOMIC_WRITE; IBV_QP_EX_WITH_FLUSH, _ATOMIC_WRITE.
        assert_eq!(OpKind::Flush.wr_opcode(), 14);
        assert_eq!(OpKind::AtomicWrite.wr_opcode(), 15);
        assert_eq!(OpKind::Flush.qp_ex_bit(), 2048);
        assert_eq!(OpKind::AtomicWrite.qp_ex_bit(), 4096);
        let all = OpSet::from_fn(|k| k.wr_opcode() < 10 || k.ibta() == "1.5");
        assert_eq!(all.bits(), 0x3ff | 2048 | 4096);
        assert_eq!(
            OpSet::from_bits(all.bits() | 1 << 10),
            all,
            "TSO names no kind"
        );
    }

    #[test]
    fn the_table_says_each_operations_facts() {
        use crate::wc::WcOpcode;
        // ibv_wc_opcode of each requester completion (verbs.h): a SEND family op completes
        // as SEND, an RDMA WRITE with immediate as RDMA_WRITE.
        for (k, wc) in [
            (OpKind::RdmaWrite, WcOpcode::RDMA_WRITE),
            (OpKind::RdmaWriteWithImm, WcOpcode::RDMA_WRITE),
            (OpKind::Send, WcOpcode::SEND),
            (OpKind::SendWithImm, WcOpcode::SEND),
            (OpKind::RdmaRead, WcOpcode::RDMA_READ),
            (OpKind::AtomicCmpSwp, WcOpcode::COMP_SWAP),
            (OpKind::AtomicFetchAdd, WcOpcode::FETCH_ADD),
            (OpKind::LocalInv, WcOpcode::LOCAL_INV),
            (OpKind::BindMw, WcOpcode::BIND_MW),
            (OpKind::SendWithInv, WcOpcode::SEND),
            (OpKind::Flush, WcOpcode::FLUSH),
            (OpKind::AtomicWrite, WcOpcode::ATOMIC_WRITE),
        ] {
            assert_eq!(k.wc_opcode(), wc, "{k}");
        }
        for k in [
            OpKind::LocalInv,
            OpKind::BindMw,
            OpKind::Flush,
            OpKind::AtomicWrite,
        ] {
            assert!(!k.takes_sges(), "{k}");
        }
        for k in [
            OpKind::Send,
            OpKind::RdmaWrite,
            OpKind::RdmaRead,
            OpKind::AtomicCmpSwp,
        ] {
            assert!(k.takes_sges(), "{k}");
        }
        assert!(OpKind::ALL.iter().all(|k| !k.is_local() || !k.takes_sges()));
        assert!(OpKind::ALL
            .iter()
            .all(|k| !k.carries_payload() || k.takes_sges()));
        assert_eq!(
            OpSet::from_fn(|k| k.ibta() == "1.5"),
            OpSet::from_fn(|k| k.linux() == Some("6.2"))
        );
        assert_eq!(
            OpSet::from_fn(|k| k.ibta() == "1.5"),
            OpSet::from_fn(|k| k.device_caps().0 != 0)
        );
        let names: Vec<&str> = OpKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names[0], "RDMA_WRITE");
        assert_eq!(
            names.iter().collect::<HashSet<_>>().len(),
            OpKind::ALL.len()
        );
        // The kinds are in IBV_WR_* order and their qp_ex bits are distinct.
        assert!(OpKind::ALL
            .windows(2)
            .all(|w| w[0].wr_opcode() < w[1].wr_opcode()));
        let bits = OpKind::ALL.iter().fold(0u64, |b, k| {
            assert_eq!(b & k.qp_ex_bit(), 0, "{k}");
            b | k.qp_ex_bit()
        });
        assert_eq!(bits.count_ones() as usize, OpKind::ALL.len());
    }

    #[test]
    fn a_providers_table_is_its_send_caps() {
        let mut t = OpTable::splat(Transports::NONE);
        t.rdma_write = Transports::RC_UC;
        t.send = Transports::RC_UC_UD;
        t.send_with_imm = Transports::UD;
        t.rdma_read = Transports::RC;
        t.local_inv = Transports::UC;
        t.atomic_write = Transports::RC;
        let caps = SendCaps::from_table(&t);
        assert_eq!(
            caps.rc,
            OpSet::of(&[
                OpKind::RdmaWrite,
                OpKind::Send,
                OpKind::RdmaRead,
                OpKind::AtomicWrite
            ])
        );
        assert_eq!(
            caps.uc,
            OpSet::of(&[OpKind::RdmaWrite, OpKind::Send, OpKind::LocalInv])
        );
        assert_eq!(caps.ud, OpSet::of(&[OpKind::Send, OpKind::SendWithImm]));
        assert_eq!(t.get(OpKind::LocalInv), Transports::UC);
        t.local_inv = Transports::NONE;
        assert!(!SendCaps::from_table(&t).uc.contains(OpKind::LocalInv));
        assert!(!Transports::RC_UC_UD.contains(QpType::XRC_INI));
        assert!(!Transports::RC_UC_UD.contains(QpType::RAW_PACKET));
        assert!(Transports::RC_UC.contains(QpType::UC) && !Transports::RC_UC.contains(QpType::UD));
    }

    #[test]
    fn ibta_1_5_operations_need_the_device_capability() {
        let rc = OpSet::for_transport(QpType::RC);
        assert!(rc.contains(OpKind::Flush) && rc.contains(OpKind::AtomicWrite));
        assert!(!OpSet::for_transport(QpType::UC).contains(OpKind::AtomicWrite));
        assert!(!OpSet::for_transport(QpType::UD).contains(OpKind::Flush));
        // A 6.1 kernel's rxe reports neither bit.
        let old = rc.on_device(DeviceCapsEx(0));
        assert!(!old.contains(OpKind::Flush) && !old.contains(OpKind::AtomicWrite));
        assert!(old.contains(OpKind::AtomicCmpSwp));
        let aw = rc.on_device(DeviceCapsEx::ATOMIC_WRITE);
        assert!(aw.contains(OpKind::AtomicWrite) && !aw.contains(OpKind::Flush));
        let fl = rc.on_device(DeviceCapsEx::FLUSH_GLOBAL);
        assert!(fl.contains(OpKind::Flush) && !fl.contains(OpKind::AtomicWrite));
        // Refused by the device, named as such.
        let f = refusal(OpKind::AtomicWrite, QpType::RC, "rxe", rc);
        assert_eq!(
            f.to_string(),
            "ATOMIC_WRITE is not supported by this kernel's rxe (the device does not report \
             the IBTA 1.5 capability in device_cap_flags_ex)"
        );
        assert_eq!(
            refusal(OpKind::AtomicWrite, QpType::RC, "mlx5", OpSet::EMPTY),
            PostFault::OpNotEncoded {
                op: OpKind::AtomicWrite,
                qp_type: QpType::RC,
                provider: "mlx5"
            }
        );
        assert_eq!(
            refusal(OpKind::Flush, QpType::UC, "rxe", rc),
            PostFault::OpForTransport {
                op: OpKind::Flush,
                qp_type: QpType::UC
            }
        );
    }

    #[test]
    fn transports_follow_the_ibta() {
        let rc = OpSet::for_transport(QpType::RC);
        let uc = OpSet::for_transport(QpType::UC);
        let ud = OpSet::for_transport(QpType::UD);
        assert!(OpKind::ALL.iter().all(|&k| rc.contains(k)));
        // The disagreement this table settles: SEND_WITH_INV is RC-only.
        assert!(!uc.contains(OpKind::SendWithInv));
        assert!(!uc.contains(OpKind::RdmaRead));
        assert!(!uc.contains(OpKind::AtomicCmpSwp));
        assert!(!uc.contains(OpKind::AtomicFetchAdd));
        assert!(uc.contains(OpKind::LocalInv) && uc.contains(OpKind::BindMw));
        assert_eq!(ud, OpSet::of(&[OpKind::Send, OpKind::SendWithImm]));
        assert_eq!(OpSet::for_transport(QpType::RAW_PACKET), OpSet::EMPTY);
        assert_eq!(OpSet::for_transport(QpType::XRC_INI), OpSet::EMPTY);
    }

    #[test]
    fn allowed_is_transport_and_provider() {
        let caps = SendCaps {
            rc: OpSet::of(&[OpKind::Send]),
            uc: OpSet::of(&[OpKind::Send, OpKind::RdmaRead]),
            ud: OpSet::EMPTY,
        };
        assert_eq!(caps.allowed(QpType::RC), OpSet::of(&[OpKind::Send]));
        // A provider claiming READ on UC does not make the transport carry it.
        assert_eq!(caps.allowed(QpType::UC), OpSet::of(&[OpKind::Send]));
        assert_eq!(caps.allowed(QpType::UD), OpSet::EMPTY);
        assert_eq!(
            OpSet::from_fn(|k| k.is_local()),
            OpSet::of(&[OpKind::LocalInv, OpKind::BindMw])
        );
    }

    #[test]
    fn refusals_say_whose_limit_it_is() {
        let f = refusal(OpKind::SendWithInv, QpType::UC, "mlx5", OpSet::EMPTY);
        assert_eq!(
            f,
            PostFault::OpForTransport {
                op: OpKind::SendWithInv,
                qp_type: QpType::UC
            }
        );
        let e = crate::PostError::refused(2, f).at("mlx5_0", crate::PostQueue::Send, 0x11);
        assert_eq!(e.fault(), Some(f));
        assert_eq!((e.index(), e.posted()), (Some(2), 2));
        assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
        let s = e.to_string();
        assert_eq!(
            s,
            "post send to QP 0x11 on mlx5_0: work request #2: a UC QP does not support \
             SEND_WITH_INV (the UC transport does not carry it); 2 posted"
        );
        let f = refusal(OpKind::LocalInv, QpType::UC, "rxe", OpSet::EMPTY);
        assert_eq!(
            f.to_string(),
            "rxe does not support LOCAL_INV on UC QPs",
            "the transport carries it, rxe does not encode it"
        );
        assert!(matches!(
            f,
            PostFault::OpNotEncoded {
                provider: "rxe",
                ..
            }
        ));
    }
}
