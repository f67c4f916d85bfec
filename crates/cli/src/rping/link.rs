//! The QP of a connection: made by the rdma_cm helpers on the id (rping's default) or by
//! rping itself (`-q`), and what rping does with it either way.

use std::io;
use std::sync::Arc;

use rverbs::cm::{CmId, ConnParam, QpState as CmQpState};
use rverbs::cm::{Endpoint, UserCqs};
use rverbs::uverbs::device::Transport;
use rverbs::uverbs::qp::{self as vqp, Qp};
use rverbs::uverbs::{MrSge, RecvWr, SendFlags, SendOp, SendWr};

/// The QP: made by the rdma_cm helpers on the id (rping's default) or by rping itself (`-q`).
pub(super) enum Link {
    Cm(Endpoint<UserCqs>),
    Own { qp: Arc<Qp>, id: CmId },
}

impl Link {
    pub(super) fn id(&self) -> &CmId {
        match self {
            Link::Cm(ep) => ep.id(),
            Link::Own { id, .. } => id,
        }
    }

    pub(super) fn qp_num(&self) -> u32 {
        match self {
            Link::Cm(ep) => ep.qp_num(),
            Link::Own { qp, .. } => qp.qp_num(),
        }
    }

    /// The QP, whoever made it.
    fn qp(&self) -> &Qp {
        match self {
            Link::Cm(ep) => ep.qp(),
            Link::Own { qp, .. } => qp,
        }
    }

    /// One signaled send request (what the endpoint's `post_send`/`post_read`/`post_write`
    /// post on its QP), straight to the QP whichever made it.
    pub(super) fn post_send(&self, op: SendOp, sge: &[MrSge<'_>]) -> io::Result<()> {
        self.qp()
            .post_send(&[SendWr {
                wr_id: 0,
                op,
                sge,
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .map_err(io::Error::from)
    }

    pub(super) fn post_recv(&self, sge: &[MrSge<'_>]) -> io::Result<()> {
        self.qp()
            .post_recv(&[RecvWr { wr_id: 0, sge }])
            .map_err(io::Error::from)
    }

    pub(super) fn param(&self) -> ConnParam {
        // rping_init_conn_param: 1 outstanding RDMA READ each way, retries 7; the QP number
        // only with a self-created QP (the helpers fill it in otherwise).
        ConnParam {
            responder_resources: Some(1),
            initiator_depth: Some(1),
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: match self {
                Link::Own { qp, .. } => qp.qp_num(),
                Link::Cm(_) => 0,
            },
            ..ConnParam::default()
        }
    }

    pub(super) fn self_modify(qp: &Qp, id: &CmId) -> io::Result<()> {
        for s in [CmQpState::INIT, CmQpState::RTR, CmQpState::RTS] {
            qp.modify(&id.init_qp_attr(s)?)?;
        }
        Ok(())
    }

    /// On iWARP the iw_cm connects a QP to RTS itself (ESTABLISHED, no CONNECT_RESPONSE):
    /// record that state on our own QP (a modify that changes nothing in the kernel), as the
    /// endpoint does for its QP.
    fn iwarp_established(qp: &Qp) -> io::Result<()> {
        if qp.pd().context().device().transport() != Transport::IWARP {
            return Ok(());
        }
        qp.modify(&vqp::QpAttr {
            qp_state: Some(vqp::QpState::RTS),
            ..Default::default()
        })
    }

    pub(super) fn connect(&self) -> io::Result<()> {
        let p = self.param();
        match self {
            Link::Cm(ep) => ep.connect(&p),
            Link::Own { qp, id } => {
                id.connect_with(&p, |id, _| Self::self_modify(qp, id))?;
                Self::iwarp_established(qp)
            }
        }
    }

    pub(super) fn accept(&self) -> io::Result<()> {
        match self {
            // rping accepts with librdmacm's defaults unless it made the QP itself.
            Link::Cm(ep) => ep.accept(&ConnParam::default()),
            Link::Own { qp, id } => {
                Self::self_modify(qp, id)?;
                id.accept(&self.param())?;
                Self::iwarp_established(qp)
            }
        }
    }

    pub(super) fn disconnect(&self) -> io::Result<()> {
        match self {
            Link::Cm(ep) => ep.disconnect(),
            Link::Own { qp, id } => {
                qp.modify(&vqp::QpAttr {
                    qp_state: Some(vqp::QpState::ERR),
                    ..Default::default()
                })?;
                id.disconnect()
            }
        }
    }
}
