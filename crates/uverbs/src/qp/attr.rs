//! What a QP is created and modified with: [`QpAttr`], [`QpInit`], [`QpInfo`] and the IBTA
//! table of required attributes ([`required_for`]).

use super::*;

/// Attributes for [`Qp::modify`]. Each `Some` field is sent and sets its mask bit, so the mask
/// can never disagree with the values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// The state to move to.
    pub qp_state: Option<QpState>,
    /// The state the caller believes the QP is in (checked by the kernel).
    pub cur_qp_state: Option<QpState>,
    /// In SQD: raise an SQ_DRAINED async event when the send queue has drained.
    pub en_sqd_async_notify: Option<bool>,
    /// What remote peers may do through this QP (REMOTE_READ/WRITE/ATOMIC).
    pub access_flags: Option<AccessFlags>,
    /// Index in the port's P_Key table.
    pub pkey_index: Option<u16>,
    /// Local port (1-based).
    pub port_num: Option<u8>,
    /// Q_Key of a UD QP: datagrams must carry it to be accepted.
    pub qkey: Option<u32>,
    /// Address vector of the primary path (with GRH for RoCE).
    pub ah_attr: Option<AhAttr>,
    /// Path MTU (RC, UC).
    pub path_mtu: Option<Mtu>,
    /// Local ACK timeout: 4.096 µs × 2^timeout.
    pub timeout: Option<u8>,
    /// Transport retries before a send fails with RETRY_EXC_ERR (0-7).
    pub retry_cnt: Option<u8>,
    /// 7 = retry forever.
    pub rnr_retry: Option<u8>,
    /// First packet sequence number the receive side expects.
    pub rq_psn: Option<u32>,
    /// Outstanding RDMA READ/atomic requests this QP may initiate.
    pub max_rd_atomic: Option<u8>,
    /// RNR NAK timer the responder asks peers to wait (`IB_RNR_TIMER_*` code).
    pub min_rnr_timer: Option<u8>,
    /// First packet sequence number of the send side.
    pub sq_psn: Option<u32>,
    /// Outstanding RDMA READ/atomic requests this QP accepts as target.
    pub max_dest_rd_atomic: Option<u8>,
    /// The remote QP number (RC, UC).
    pub dest_qp_num: Option<u32>,
}

impl QpAttr {
    internal! {
    /// The mask this attribute set sends.
    pub fn mask(&self) -> QpAttrMask {
        let mut m = QpAttrMask::empty();
        let mut set = |on: bool, bit| {
            if on {
                m |= bit
            }
        };
        set(self.qp_state.is_some(), QpAttrMask::STATE);
        set(self.cur_qp_state.is_some(), QpAttrMask::CUR_STATE);
        set(
            self.en_sqd_async_notify.is_some(),
            QpAttrMask::EN_SQD_ASYNC_NOTIFY,
        );
        set(self.access_flags.is_some(), QpAttrMask::ACCESS_FLAGS);
        set(self.pkey_index.is_some(), QpAttrMask::PKEY_INDEX);
        set(self.port_num.is_some(), QpAttrMask::PORT);
        set(self.qkey.is_some(), QpAttrMask::QKEY);
        set(self.ah_attr.is_some(), QpAttrMask::AV);
        set(self.path_mtu.is_some(), QpAttrMask::PATH_MTU);
        set(self.timeout.is_some(), QpAttrMask::TIMEOUT);
        set(self.retry_cnt.is_some(), QpAttrMask::RETRY_CNT);
        set(self.rnr_retry.is_some(), QpAttrMask::RNR_RETRY);
        set(self.rq_psn.is_some(), QpAttrMask::RQ_PSN);
        set(self.max_rd_atomic.is_some(), QpAttrMask::MAX_QP_RD_ATOMIC);
        set(self.min_rnr_timer.is_some(), QpAttrMask::MIN_RNR_TIMER);
        set(self.sq_psn.is_some(), QpAttrMask::SQ_PSN);
        set(
            self.max_dest_rd_atomic.is_some(),
            QpAttrMask::MAX_DEST_RD_ATOMIC,
        );
        set(self.dest_qp_num.is_some(), QpAttrMask::DEST_QPN);
        m
    }
    }

    pub(crate) fn to_modify(&self, qp_handle: u32) -> ib_uverbs_modify_qp {
        ib_uverbs_modify_qp {
            dest: self.ah_attr.map(|a| a.to_qp_dest()).unwrap_or_default(),
            alt_dest: ib_uverbs_qp_dest::default(),
            qp_handle,
            attr_mask: self.mask().bits(),
            qkey: self.qkey.unwrap_or(0),
            rq_psn: self.rq_psn.unwrap_or(0),
            sq_psn: self.sq_psn.unwrap_or(0),
            dest_qp_num: self.dest_qp_num.unwrap_or(0),
            qp_access_flags: self.access_flags.map_or(0, |a| a.bits()),
            pkey_index: self.pkey_index.unwrap_or(0),
            alt_pkey_index: 0,
            qp_state: self.qp_state.map_or(0, |s| s.0),
            cur_qp_state: self.cur_qp_state.map_or(0, |s| s.0),
            path_mtu: self.path_mtu.map_or(0, |m| m.0),
            path_mig_state: 0,
            en_sqd_async_notify: u8::from(self.en_sqd_async_notify.unwrap_or(false)),
            max_rd_atomic: self.max_rd_atomic.unwrap_or(0),
            max_dest_rd_atomic: self.max_dest_rd_atomic.unwrap_or(0),
            min_rnr_timer: self.min_rnr_timer.unwrap_or(0),
            port_num: self.port_num.unwrap_or(0),
            timeout: self.timeout.unwrap_or(0),
            retry_cnt: self.retry_cnt.unwrap_or(0),
            rnr_retry: self.rnr_retry.unwrap_or(0),
            alt_port_num: 0,
            alt_timeout: 0,
            reserved: [0; 2],
        }
    }
}

/// What [`Qp::query`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The QP's state.
    pub state: QpState,
    /// The state the kernel last recorded as current.
    pub cur_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Receive packet sequence number.
    pub rq_psn: u32,
    /// Send packet sequence number.
    pub sq_psn: u32,
    /// The remote QP number.
    pub dest_qp_num: u32,
    /// What remote peers may do through this QP.
    pub access_flags: AccessFlags,
    /// Index in the port's P_Key table.
    pub pkey_index: u16,
    /// Local port (1-based).
    pub port_num: u8,
    /// Local ACK timeout: 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// Transport retries before a send fails.
    pub retry_cnt: u8,
    /// RNR retries before a send fails (7 = forever).
    pub rnr_retry: u8,
    /// RNR NAK timer code the responder sends.
    pub min_rnr_timer: u8,
    /// Outstanding RDMA READ/atomic requests this QP may initiate.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomic requests this QP accepts as target.
    pub max_dest_rd_atomic: u8,
    /// In SQD: whether the send queue is still draining.
    pub sq_draining: bool,
    /// Every send produces a completion.
    pub sq_sig_all: bool,
    /// Address vector of the primary path.
    pub ah_attr: AhAttr,
    /// Capacities of the queues.
    pub caps: QpCaps,
}

internal! {
/// Attributes each transition needs (IBTA, as the kernel's `ib_modify_qp_is_ok` checks):
/// returns the attributes required, or `None` if the transition itself is illegal.
pub fn required_for(qp_type: QpType, cur: QpState, next: QpState) -> Option<QpAttrMask> {
    use QpAttrMask as M;
    // EFA's kernel checks its driver QPs (SRD) against a table of its own
    // (`srd_qp_state_table`, efa_verbs.c) whose required attributes are the UD rows'; EFA is
    // the only provider here with a DRIVER QP type.
    let (rc, uc, ud) = (
        qp_type == QpType::RC,
        qp_type == QpType::UC,
        qp_type == QpType::UD || qp_type == QpType::DRIVER,
    );
    match (cur, next) {
        (_, QpState::RESET) | (_, QpState::ERR) => Some(M::empty()),
        (QpState::RESET, QpState::INIT) => Some(if ud {
            M::PKEY_INDEX | M::PORT | M::QKEY
        } else {
            M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS
        }),
        (QpState::INIT, QpState::INIT) => Some(M::empty()),
        (QpState::INIT, QpState::RTR) => Some(if rc {
            M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
        } else if uc {
            M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN
        } else {
            M::empty()
        }),
        (QpState::RTR, QpState::RTS) => Some(if rc {
            M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
        } else {
            M::SQ_PSN
        }),
        (QpState::RTS, QpState::RTS)
        | (QpState::RTS, QpState::SQD)
        | (QpState::SQD, QpState::SQD)
        | (QpState::SQD, QpState::RTS)
        | (QpState::SQE, QpState::RTS) => Some(M::empty()),
        _ => None,
    }
}
}

/// How to create a QP.
#[derive(Clone, Debug)]
pub struct QpInit {
    /// Transport type (RC, UC, UD).
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: Arc<Cq>,
    /// CQ for receive completions.
    pub recv_cq: Arc<Cq>,
    /// SRQ to take receives from (then the QP has no receive queue).
    pub srq: Option<Arc<Srq>>,
    /// Capacities to ask for (the kernel may grant more).
    pub caps: QpCaps,
    /// Every send WR produces a completion, whatever its SIGNALED flag.
    pub sq_sig_all: bool,
}

impl QpInit {
    /// An RC QP with the same CQ for sends and receives.
    pub fn rc(cq: &Arc<Cq>, caps: QpCaps) -> Self {
        Self {
            qp_type: QpType::RC,
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            caps,
            sq_sig_all: false,
        }
    }
}
