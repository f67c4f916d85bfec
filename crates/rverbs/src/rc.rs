//! Connecting an RC queue pair by hand, without rdma_cm: RESET → INIT → RTR → RTS.
//!
//! rdma_cm ([`crate::cm`]) moves a QP through these states itself. Without it, the two sides
//! exchange their QP number, first PSN and address (LID or GID) some other way (a TCP socket
//! for `ibv_rc_pingpong`, a variable for two QPs of one process) and then each side calls
//! [`connect`] with the other's values — or [`to_init`] early (receives can be posted in INIT)
//! and [`to_rtr`] / [`to_rts`] once the peer is known.
//!
//! ```no_run
//! use rverbs::rc::{self, RcPath, RcRemote};
//! use rverbs::uverbs::ah::AhAttr;
//! # fn demo(qp: &rverbs::uverbs::qp::Qp, peer_qpn: u32, peer_gid: [u8; 16]) -> std::io::Result<()> {
//! let path = RcPath::default(); // port 1, MTU 1024, no remote access
//! let remote = RcRemote { qp_num: peer_qpn, psn: 0, ah: AhAttr::roce(1, peer_gid, 1) };
//! rc::connect(qp, &path, 0, &remote)?; // our first PSN is 0 too
//! # Ok(()) }
//! ```
//!
//! Each step is one [`Qp::modify`]; its error names the QP, the device and the transition.

use rverbs_uverbs::ah::AhAttr;
use rverbs_uverbs::mr::AccessFlags;
use rverbs_uverbs::port::Mtu;
use rverbs_uverbs::qp::{Qp, QpAttr, QpState};
use rverbs_uverbs::Result;

/// The local choices of an RC connection: port, what the peer may do, path MTU, retries.
///
/// The default is what `ibv_rc_pingpong` uses: port 1, P_Key index 0, no remote access, MTU
/// 1024, ACK timeout 14 (4.096 µs × 2^14 ≈ 67 ms), 7 transport and 7 (= endless) RNR
/// retries, RNR timer 12 (0.64 ms), one outstanding RDMA READ/atomic each way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcPath {
    /// Local port (1-based).
    pub port_num: u8,
    /// Index in the port's P_Key table.
    pub pkey_index: u16,
    /// What the peer may do to our memory through this QP (REMOTE_READ/WRITE/ATOMIC).
    pub access: AccessFlags,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Local ACK timeout: 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// Transport retries before a send fails with RETRY_EXC_ERR (0-7).
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// RNR NAK timer we ask the peer to wait (`IB_RNR_TIMER_*` code).
    pub min_rnr_timer: u8,
    /// RDMA READ/atomic requests this QP may have outstanding (as requester).
    pub max_rd_atomic: u8,
    /// RDMA READ/atomic requests this QP accepts at once (as responder).
    pub max_dest_rd_atomic: u8,
}

impl Default for RcPath {
    fn default() -> Self {
        RcPath {
            port_num: 1,
            pkey_index: 0,
            access: AccessFlags::empty(),
            path_mtu: Mtu::MTU_1024,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

/// What the peer told us: its QP number, the first PSN it sends with, and how to reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcRemote {
    /// The peer's QP number.
    pub qp_num: u32,
    /// The first packet sequence number the peer sends (our receive side expects it).
    pub psn: u32,
    /// The address vector of the peer (a GRH on RoCE: [`AhAttr::roce`]; a LID on
    /// InfiniBand). Its `port_num` is the local port.
    pub ah: AhAttr,
}

/// RESET → INIT on `path.port_num`, granting the peer `path.access`. Receives may be posted
/// from here on.
pub fn to_init(qp: &Qp, path: &RcPath) -> Result<()> {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::INIT),
        pkey_index: Some(path.pkey_index),
        port_num: Some(path.port_num),
        access_flags: Some(path.access),
        ..Default::default()
    })
}

/// INIT → RTR (ready to receive) towards `remote`.
pub fn to_rtr(qp: &Qp, path: &RcPath, remote: &RcRemote) -> Result<()> {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::RTR),
        path_mtu: Some(path.path_mtu),
        dest_qp_num: Some(remote.qp_num),
        rq_psn: Some(remote.psn),
        max_dest_rd_atomic: Some(path.max_dest_rd_atomic),
        min_rnr_timer: Some(path.min_rnr_timer),
        ah_attr: Some(remote.ah),
        ..Default::default()
    })
}

/// RTR → RTS (ready to send), our first packet sequence number being `psn`.
pub fn to_rts(qp: &Qp, path: &RcPath, psn: u32) -> Result<()> {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::RTS),
        sq_psn: Some(psn),
        timeout: Some(path.timeout),
        retry_cnt: Some(path.retry_cnt),
        rnr_retry: Some(path.rnr_retry),
        max_rd_atomic: Some(path.max_rd_atomic),
        ..Default::default()
    })
}

/// The whole sequence from RESET: [`to_init`], [`to_rtr`] towards `remote`, [`to_rts`] with
/// our first PSN `psn`. The peer does the same with our QP number and `psn`.
pub fn connect(qp: &Qp, path: &RcPath, psn: u32, remote: &RcRemote) -> Result<()> {
    to_init(qp, path)?;
    to_rtr(qp, path, remote)?;
    to_rts(qp, path, psn)
}
