//! SRD (Scalable Reliable Datagram, EFA's transport) in the safe API: [`SrdQp`] creates a QP of
//! the provider's `IBV_QPT_DRIVER` type where the provider's is SRD, brings it to RTS as a UD
//! QP is brought there (a Q_Key, no peer: every send names its destination), and posts only
//! what an SRD QP carries, each send with its destination ([`SrdDest`]: AH, remote QPN, Q_Key).
//!
//! The types refuse at compile time what SRD never carries: an [`SrdSendWr`] is made only by
//! [`SrdSendWr::send`], [`SrdSendWr::send_with_imm`] and [`SrdSendWr::rdma_read`], so an RDMA
//! WRITE or an atomic cannot be posted through [`SrdQp::post_send`]:
//!
//! ```compile_fail,E0599
//! # fn f(qp: &rverbs_uverbs::srd::SrdQp, dest: rverbs_uverbs::srd::SrdDest,
//! #      sge: &[rverbs_uverbs::MrSge<'_>]) {
//! let w = rverbs_uverbs::srd::SrdSendWr::rdma_write(1, sge, 0x1000, 7, dest);
//! # }
//! ```
//!
//! (`tests/ui/srd_*.rs` check the same with the compiler's message.) What the provider and the
//! device refuse is refused at run time, by name: another provider's DRIVER type or none
//! (`Qp::create`), capacities over the device's (`Qp::create` and the provider), an RDMA READ
//! the provider does not encode or the device does not have
//! ([`PostFault::OpNotEncoded`](crate::PostFault::OpNotEncoded) /
//! [`PostFault::OpNotOnDevice`](crate::PostFault::OpNotOnDevice)), inline data over the QP's
//! limit and SGE counts over its limit (the provider's [`PostError`]).

#![allow(unsafe_code)] // the zero-cost view of an SrdSendWr list as a MrSendWr list

use std::sync::Arc;

use crate::cq::Cq;
use crate::error::{Error, PostError, Result};
use crate::pd::Pd;
use crate::qp::{Qp, QpAttr, QpCaps, QpInit, QpState, QpType};
use crate::wr::{MrRecvWr, MrSendWr, MrSge, SendFlags, SendOp, SendWr, UdDest};

/// Where an SRD send goes: the AH of the peer's address, its QP number and Q_Key (what a UD
/// send carries: [`Ah::ud_dest`](crate::ah::Ah::ud_dest) makes one).
pub type SrdDest = UdDest;

/// How to create an SRD QP.
#[derive(Clone, Debug)]
pub struct SrdInit {
    /// CQ for send completions.
    pub send_cq: Arc<Cq>,
    /// CQ for receive completions.
    pub recv_cq: Arc<Cq>,
    /// Capacities to ask for (the provider rounds them up: [`SrdQp::caps`]).
    pub caps: QpCaps,
    /// Every send produces a completion (EFA completes every send anyway: its sends must be
    /// signaled, which [`SrdSendWr`] always is).
    pub sq_sig_all: bool,
}

/// An SRD QP: a [`Qp`] of the provider's SRD type, posted to through the SRD operations only.
#[derive(Debug)]
pub struct SrdQp {
    qp: Arc<Qp>,
}

impl SrdQp {
    /// Creates an SRD QP on `pd`. Refused (before any kernel command) when the device's
    /// provider has no QP type of its own or its own is not SRD.
    pub fn create(pd: &Arc<Pd>, init: SrdInit) -> Result<SrdQp> {
        let ctx = pd.context();
        let driver = ctx.driver()?;
        match driver.driver_qp() {
            Some(t) if t.name == "SRD" => {}
            other => {
                return Err(Error::unsupported(
                    format!("create SRD QP on {}", ctx.name()),
                    match other {
                        Some(t) => format!(
                            "the {} provider's own QP type is {}, not SRD",
                            driver.name(),
                            t.name
                        ),
                        None => format!(
                            "the {} provider has no SRD QPs (SRD is EFA's)",
                            driver.name()
                        ),
                    },
                )
                .into())
            }
        }
        let qp = Qp::create(
            pd,
            QpInit {
                qp_type: QpType::DRIVER,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                srq: None,
                caps: init.caps,
                sq_sig_all: init.sq_sig_all,
            },
        )?;
        Ok(SrdQp { qp })
    }

    /// The underlying QP (its number, caps, CQs, query, modify, destroy on last drop). Its
    /// generic [`Qp::post_send`] takes any operation and refuses those SRD does not carry at
    /// run time; [`SrdQp::post_send`] cannot be handed them.
    pub fn qp(&self) -> &Arc<Qp> {
        &self.qp
    }

    /// The QP number peers address.
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The capacities the QP got.
    pub fn caps(&self) -> QpCaps {
        self.qp.caps()
    }

    /// RESET → INIT (port `port`, P_Key index 0, Q_Key `qkey`) → RTR → RTS (SQ PSN 0): the
    /// attributes EFA's kernel requires of an SRD QP at each step (its `srd_qp_state_table`).
    pub fn ready(&self, port: u8, qkey: u32) -> Result<()> {
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::INIT),
            pkey_index: Some(0),
            port_num: Some(port),
            qkey: Some(qkey),
            ..Default::default()
        })?;
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::RTR),
            ..Default::default()
        })?;
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::RTS),
            sq_psn: Some(0),
            ..Default::default()
        })
    }

    /// Posts SRD sends (one doorbell per batch the provider allows); safe for the reasons
    /// given at [`Qp::post_send`], whose checks and refusals these go through.
    #[inline]
    pub fn post_send(&self, wrs: &[SrdSendWr<'_>]) -> std::result::Result<(), PostError> {
        self.qp.post_send(SrdSendWr::as_send_wrs(wrs))
    }

    /// Posts receives ([`Qp::post_recv`]).
    #[inline]
    pub fn post_recv(&self, wrs: &[MrRecvWr<'_>]) -> std::result::Result<(), PostError> {
        self.qp.post_recv(wrs)
    }
}

/// One SRD send work request: a SEND (± immediate data) or an RDMA READ, signaled, to an
/// [`SrdDest`]. `#[repr(transparent)]` over [`MrSendWr`]: a list is posted without a copy.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct SrdSendWr<'a>(MrSendWr<'a>);

impl<'a> SrdSendWr<'a> {
    fn new(wr_id: u64, op: SendOp, sge: &'a [MrSge<'a>], dest: SrdDest) -> Self {
        SrdSendWr(SendWr {
            wr_id,
            op,
            sge,
            flags: SendFlags::SIGNALED,
            ud: Some(dest),
        })
    }

    /// A SEND of `sge` to `dest`.
    pub fn send(wr_id: u64, sge: &'a [MrSge<'a>], dest: SrdDest) -> Self {
        Self::new(wr_id, SendOp::Send, sge, dest)
    }

    /// A SEND with immediate data `imm` (host order).
    pub fn send_with_imm(wr_id: u64, sge: &'a [MrSge<'a>], imm: u32, dest: SrdDest) -> Self {
        Self::new(wr_id, SendOp::SendWithImm { imm }, sge, dest)
    }

    /// An RDMA READ of the peer's `remote_addr` (under `rkey`) into `sge`. Taken only where
    /// the provider encodes it and the device reports it (else refused at post, by name).
    pub fn rdma_read(
        wr_id: u64,
        sge: &'a [MrSge<'a>],
        remote_addr: u64,
        rkey: u32,
        dest: SrdDest,
    ) -> Self {
        Self::new(wr_id, SendOp::RdmaRead { remote_addr, rkey }, sge, dest)
    }

    /// The same request with its payload copied into the descriptor at post time (at most the
    /// QP's `max_inline_data` bytes; more is refused at post).
    pub fn inline(mut self) -> Self {
        self.0.flags |= SendFlags::INLINE;
        self
    }

    /// The request as a generic send work request.
    pub fn as_send_wr(&self) -> &MrSendWr<'a> {
        &self.0
    }

    fn as_send_wrs<'s>(list: &'s [SrdSendWr<'a>]) -> &'s [MrSendWr<'a>] {
        // SAFETY: SrdSendWr is repr(transparent) over MrSendWr: same layout and length.
        unsafe { std::slice::from_raw_parts(list.as_ptr().cast(), list.len()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{OpKind, OpSet};

    fn dest() -> SrdDest {
        SrdDest {
            ah_num: 3,
            ah_handle: 9,
            remote_qpn: 0x12,
            remote_qkey: 0x1234,
        }
    }

    #[test]
    fn srd_wrs_carry_their_op_destination_and_signaled() {
        let cases = [
            (SrdSendWr::send(1, &[], dest()), SendOp::Send),
            (
                SrdSendWr::send_with_imm(2, &[], 0xabcd, dest()),
                SendOp::SendWithImm { imm: 0xabcd },
            ),
            (
                SrdSendWr::rdma_read(3, &[], 0x1000, 7, dest()),
                SendOp::RdmaRead {
                    remote_addr: 0x1000,
                    rkey: 7,
                },
            ),
        ];
        for (w, op) in cases {
            assert_eq!(w.as_send_wr().op, op);
            assert_eq!(w.as_send_wr().flags, SendFlags::SIGNALED);
            assert_eq!(w.as_send_wr().ud, Some(dest()));
            assert_eq!(
                w.inline().as_send_wr().flags,
                SendFlags::SIGNALED | SendFlags::INLINE
            );
        }
        let list = [cases[0].0, cases[2].0];
        let raw = SrdSendWr::as_send_wrs(&list);
        assert_eq!(raw.len(), 2);
        assert_eq!(raw[1].wr_id, 3);
    }

    #[test]
    fn driver_transport_is_what_its_provider_encodes() {
        // DRIVER's transport defers to the provider: a refusal names the provider (not
        // encoded), never the transport.
        assert_eq!(
            OpSet::for_transport(QpType::DRIVER),
            OpSet::of(&OpKind::ALL)
        );
        let encoded = OpSet::of(&[OpKind::Send, OpKind::SendWithImm]);
        let f = crate::op::refusal(OpKind::RdmaWrite, QpType::DRIVER, "efa", encoded);
        assert!(
            matches!(
                f,
                crate::PostFault::OpNotEncoded {
                    op: OpKind::RdmaWrite,
                    ..
                }
            ),
            "{f:?}"
        );
        let f = crate::op::refusal(
            OpKind::RdmaRead,
            QpType::DRIVER,
            "efa",
            OpSet::of(&[OpKind::Send, OpKind::SendWithImm, OpKind::RdmaRead]),
        );
        assert!(
            matches!(
                f,
                crate::PostFault::OpNotOnDevice {
                    op: OpKind::RdmaRead,
                    ..
                }
            ),
            "{f:?}"
        );
    }

    #[test]
    fn srd_transitions_need_what_efa_requires() {
        use crate::qp::{required_for, QpAttrMask as M};
        assert_eq!(
            required_for(QpType::DRIVER, QpState::RESET, QpState::INIT),
            Some(M::PKEY_INDEX | M::PORT | M::QKEY)
        );
        assert_eq!(
            required_for(QpType::DRIVER, QpState::INIT, QpState::RTR),
            Some(M::empty())
        );
        assert_eq!(
            required_for(QpType::DRIVER, QpState::RTR, QpState::RTS),
            Some(M::SQ_PSN)
        );
    }
}
