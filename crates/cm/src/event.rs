//! rdma_cm events: what `GET_EVENT` returns, decoded.
//!
//! ## Acknowledging
//! librdmacm's `rdma_ack_cm_event` is userspace bookkeeping only: its event structure points at
//! the id, so `rdma_destroy_id` waits until as many events were acked as the kernel reported
//! (`DESTROY_ID` returns `events_reported`). The kernel itself has no ack: `GET_EVENT` removes
//! the event from the queue, and `DESTROY_ID` discards the id's unread events. Here a
//! [`CmEvent`] is a plain value that does not borrow its id (it names it by kernel handle and
//! uid), so there is nothing to acknowledge and dropping a [`crate::CmId`] never waits.

use std::fmt;
use std::sync::Arc;

use rustix::io::Errno;
use zerocopy::{FromBytes, FromZeros};

use crate::abi::{self, rdma_ucm_conn_param, rdma_ucm_event_resp, rdma_ucm_ud_param};
use crate::channel::Channel;
use crate::id::{uid_info, CmId};
use crate::types::{CmEventKind, PortSpace, QpType, RejectReason};

/// Connection parameters reported by CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED,
/// REJECTED, DISCONNECTED… on connected (RC/UC) ids. Private data: [`CmEvent::private_data`].
///
/// For CONNECT_REQUEST the kernel already swaps the peer's resources into the local view:
/// `responder_resources` is how many RDMA reads the peer will have outstanding toward us.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ConnEventParam {
    /// The peer's QP number.
    pub qp_num: u32,
    /// Whether the peer's QP takes receives from an SRQ.
    pub srq: bool,
    /// RDMA reads/atomics the peer may have outstanding toward us.
    pub responder_resources: u8,
    /// RDMA reads/atomics we may have outstanding toward the peer.
    pub initiator_depth: u8,
    /// Whether the peer supports end-to-end flow control.
    pub flow_control: u8,
    /// Transport retries the peer asked for.
    pub retry_count: u8,
    /// RNR retries the peer asked for (7 = infinite).
    pub rnr_retry_count: u8,
}

/// UD parameters reported by ESTABLISHED (SIDR reply), CONNECT_REQUEST and multicast events on
/// UD ids: the remote QP and the address handle attributes to reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UdEventParam {
    /// The remote QP number to send datagrams to.
    pub qp_num: u32,
    /// The Q_Key the remote QP accepts.
    pub qkey: u32,
    /// Field names as the kernel's `ib_uverbs_ah_attr`, ready for creating an AH.
    pub ah_attr: abi::ib_uverbs_ah_attr,
}

impl UdEventParam {
    /// `ah_attr` as the verbs address vector, ready for
    /// [`Ah::create`](rverbs_uverbs::ah::Ah::create): for a multicast event, the AH that sends
    /// to the group.
    pub fn ah(&self) -> rverbs_uverbs::ah::AhAttr {
        crate::qp_attr::ah_from_kernel(&self.ah_attr)
    }

    /// For a multicast event: the group's GID and LID, what a receiving QP attaches to
    /// ([`Qp::attach_mcast`](rverbs_uverbs::qp::Qp::attach_mcast)).
    pub fn mcast_group(&self) -> (rverbs_uverbs::gid::Gid, u16) {
        (
            rverbs_uverbs::gid::Gid(self.ah_attr.grh.dgid),
            self.ah_attr.dlid,
        )
    }
}

/// One rdma_cm event.
///
/// `status` is what the kernel put there: 0, a negative errno (e.g. −110 ETIMEDOUT for
/// ADDR_ERROR/UNREACHABLE), or for REJECTED on IB/RoCE the positive IB CM reject reason.
pub struct CmEvent {
    raw: rdma_ucm_event_resp,
    qp_type: QpType,
    new_id: Option<CmId>,
}

impl CmEvent {
    pub(crate) fn decode(raw: rdma_ucm_event_resp, chan: &Arc<Channel>) -> Self {
        let (ps, qp_type) = uid_info(raw.uid);
        let kind = CmEventKind(raw.event);
        // For a connection request the kernel created a new id (raw.id) on this channel; the
        // event's uid is the listener's. We own the new id from here: dropping the event
        // without taking it destroys it (the peer then sees a reject or a timeout).
        let new_id = (kind == CmEventKind::CONNECT_REQUEST).then(|| {
            let p = conn_param(&raw);
            CmId::from_request(
                chan.clone(),
                raw.id,
                ps.unwrap_or(PortSpace::TCP),
                qp_type.unwrap_or(QpType::RC),
                (p.initiator_depth, p.responder_resources),
            )
        });
        Self {
            raw,
            qp_type: qp_type.unwrap_or(QpType::RC),
            new_id,
        }
    }

    /// What happened.
    pub fn kind(&self) -> CmEventKind {
        CmEventKind(self.raw.event)
    }

    /// The kernel's status, unchanged (see the type's documentation).
    pub fn status(&self) -> i32 {
        self.raw.status as i32
    }

    /// The errno of a negative status (`None` for a status below −4095, which is no errno).
    pub fn errno(&self) -> Option<Errno> {
        let s = self.status();
        (-4095..0)
            .contains(&s)
            .then(|| Errno::from_raw_os_error(-s))
    }

    /// The 64-bit argument of a USER event (what
    /// [`CmId::write_event`](crate::CmId::write_event) wrote) or of librdmacm's INTERNAL one;
    /// `None` for other events.
    pub fn arg(&self) -> Option<u64> {
        let k = self.kind();
        (k == CmEventKind::USER || k.0 == crate::id::INTERNAL_EVENT).then(|| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.raw.param[..8]);
            u64::from_ne_bytes(b)
        })
    }

    /// The IB CM reject reason of a REJECTED event.
    pub fn reject_reason(&self) -> Option<RejectReason> {
        (self.kind() == CmEventKind::REJECTED && self.status() > 0)
            .then_some(RejectReason(self.raw.status))
    }

    internal! {
    /// The kernel handle of the id the event is about: for CONNECT_REQUEST the **new** id,
    /// for MULTICAST_JOIN / MULTICAST_ERROR the join's ([`CmId::multicast_handle`]), else
    /// the id the event was reported on.
    pub fn id_handle(&self) -> u32 {
        self.raw.id
    }
    }

    /// The uid of the id the event was reported on (for CONNECT_REQUEST: the listener's).
    pub fn uid(&self) -> u64 {
        self.raw.uid
    }

    /// True if the event was reported on `id` (for CONNECT_REQUEST: `id` is the listener).
    pub fn is_for(&self, id: &CmId) -> bool {
        self.raw.uid == id.uid()
    }

    /// The connection parameters, for events of connected (non-UD) ids (`None` for USER and
    /// INTERNAL events, whose parameter is [`CmEvent::arg`]).
    pub fn conn(&self) -> Option<ConnEventParam> {
        (self.qp_type != QpType::UD && self.arg().is_none()).then(|| {
            let p = conn_param(&self.raw);
            ConnEventParam {
                qp_num: p.qp_num,
                srq: p.srq != 0,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                flow_control: p.flow_control,
                retry_count: p.retry_count,
                rnr_retry_count: p.rnr_retry_count,
            }
        })
    }

    /// The UD parameters, for events of UD ids (`None` for USER and INTERNAL events).
    pub fn ud(&self) -> Option<UdEventParam> {
        (self.qp_type == QpType::UD && self.arg().is_none()).then(|| {
            let p = ud_param(&self.raw);
            UdEventParam {
                qp_num: p.qp_num,
                qkey: p.qkey,
                ah_attr: p.ah_attr,
            }
        })
    }

    /// The private data the event carries, with the length the kernel reported.
    ///
    /// On IB/RoCE the CM messages have fixed-size private-data fields and no length, so the
    /// kernel reports the whole field: 56 bytes for a CONNECT_REQUEST of an IP-addressed RC id
    /// (92 minus rdma_cm's 36-byte header), 196 for CONNECT_RESPONSE/ESTABLISHED-by-REP, 148
    /// for REJECTED — what the peer sent, zero-padded.
    pub fn private_data(&self) -> &[u8] {
        // Both union members start with qp_num, qkey; the private data sits at offset 8 (conn)
        // or 40 (ud), its length after the 256 bytes.
        let (start, len_at) = if self.qp_type == QpType::UD {
            (40, 40 + abi::RDMA_MAX_PRIVATE_DATA)
        } else {
            (8, 8 + abi::RDMA_MAX_PRIVATE_DATA)
        };
        let len = usize::from(self.raw.param[len_at]).min(abi::RDMA_MAX_PRIVATE_DATA);
        &self.raw.param[start..start + len]
    }

    /// Enhanced connection establishment data `(vendor_id, attr_mod)`.
    pub fn ece(&self) -> (u32, u32) {
        (self.raw.ece.vendor_id, self.raw.ece.attr_mod)
    }

    /// The id the kernel created for a CONNECT_REQUEST (once; later calls return `None`).
    /// It uses the listener's channel; accept or reject it, or drop it to refuse.
    pub fn take_id(&mut self) -> Option<CmId> {
        self.new_id.take()
    }

    /// The new id of a CONNECT_REQUEST, if not taken yet.
    pub fn new_id(&self) -> Option<&CmId> {
        self.new_id.as_ref()
    }

    internal! {
    /// The raw `rdma_ucm_event_resp`.
    pub fn raw(&self) -> &rdma_ucm_event_resp {
        &self.raw
    }
    }

    /// `Ok` if the event is one of `ok` with status 0; otherwise the error a synchronous call
    /// `op` reports for it (REJECTED → ECONNREFUSED naming the reason, a negative status → its
    /// errno, anything else → a protocol error naming the event and what was awaited).
    pub fn check(&self, op: &'static str, ok: &[CmEventKind]) -> std::io::Result<()> {
        crate::id::check_event(op, self, ok)
    }
}

fn conn_param(raw: &rdma_ucm_event_resp) -> rdma_ucm_conn_param {
    // The union is only 4-byte aligned at offset 20: copy out instead of referencing.
    rdma_ucm_conn_param::read_from_prefix(&raw.param[..])
        .map(|(p, _)| p)
        .unwrap_or_default()
}

fn ud_param(raw: &rdma_ucm_event_resp) -> rdma_ucm_ud_param {
    rdma_ucm_ud_param::read_from_prefix(&raw.param[..])
        .map(|(p, _)| p)
        .unwrap_or_else(|_| rdma_ucm_ud_param::new_zeroed())
}

impl fmt::Debug for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmEvent")
            .field("kind", &self.kind())
            .field("status", &self.status())
            .field("id", &self.raw.id)
            .field("uid", &format_args!("{:#x}", self.raw.uid))
            .field("private_data_len", &self.private_data().len())
            .field("new_id", &self.new_id.as_ref().map(|i| i.handle()))
            .finish()
    }
}

impl fmt::Display for CmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on rdma_cm id {}", self.kind(), self.raw.id)?;
        if let Some(r) = self.reject_reason() {
            write!(f, " (reject reason {} {r})", r.0)?;
        } else if let Some(e) = self.errno() {
            write!(
                f,
                " (status {}: {})",
                self.status(),
                std::io::Error::from(e)
            )?;
        } else if self.status() != 0 {
            write!(f, " (status {})", self.status())?;
        }
        Ok(())
    }
}
