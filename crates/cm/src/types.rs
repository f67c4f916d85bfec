//! Values the kernel hands back (event kinds, reject reasons, port spaces) as newtypes with
//! named constants: an unknown number stays an unknown number instead of becoming a wrong
//! variant. The QP's type, state and attribute mask are the verbs ones (`rverbs_uverbs::qp`),
//! re-exported here: the rdma_cm speaks of the same QPs.

pub use rverbs_uverbs::qp::{QpAttrMask, QpState, QpType};
use rverbs_uverbs::raw_newtype;

raw_newtype! {
    /// `enum rdma_cm_event_type` (kernel `include/rdma/rdma_cm.h`; librdmacm uses the same
    /// numbers). Not part of the uapi header, so the numbers are pinned by a unit test.
    CmEventKind(u32) {
        ADDR_RESOLVED = 0;
        ADDR_ERROR = 1;
        ROUTE_RESOLVED = 2;
        ROUTE_ERROR = 3;
        /// On a listening id: a peer wants to connect. The event carries the new id.
        CONNECT_REQUEST = 4;
        /// On an active RC id: the peer accepted (REP received); the QP goes to RTR/RTS, then
        /// [`crate::CmId::establish`] sends the RTU.
        CONNECT_RESPONSE = 5;
        CONNECT_ERROR = 6;
        UNREACHABLE = 7;
        REJECTED = 8;
        ESTABLISHED = 9;
        DISCONNECTED = 10;
        DEVICE_REMOVAL = 11;
        MULTICAST_JOIN = 12;
        MULTICAST_ERROR = 13;
        ADDR_CHANGE = 14;
        TIMEWAIT_EXIT = 15;
        // 16 and 17 (ADDRINFO_RESOLVED, ADDRINFO_ERROR) answer RESOLVE_IB_SERVICE, which
        // rverbs does not issue; 19 (INTERNAL) is librdmacm's own (`CmId::write_internal_event`).
        /// Written by the program itself ([`crate::CmId::write_event`]), carrying a status and
        /// a 64-bit argument ([`crate::CmEvent::arg`]); 7.x kernels.
        USER = 18;
    }
}

raw_newtype! {
    /// The join state of [`crate::CmId::join_multicast`] (`RDMA_MC_JOIN_FLAG_*` of
    /// `rdma_user_cm.h`).
    McJoinFlags(u16) {
        /// Send to and receive from the group.
        FULL_MEMBER = 0;
        /// Send only: the port does not receive the group's traffic (InfiniBand SA
        /// send-only full member; on RoCE no IGMP join is made).
        SENDONLY_FULL_MEMBER = 1;
    }
}

raw_newtype! {
    /// `enum rdma_ucm_port_space`: the namespace of ports (and the IB service id's high bits).
    PortSpace(u16) {
        /// Reliable connected (RC) ids.
        TCP = 0x0106;
        /// Unreliable datagram (UD) ids.
        UDP = 0x0111;
        /// Any QP type, chosen at creation.
        IB = 0x013F;
        IPOIB = 0x0002;
    }
}

impl PortSpace {
    /// The QP type the kernel implies for this port space (`RDMA_PS_IB` has none: RC by
    /// default, as librdmacm's `rdma_create_id`).
    pub const fn default_qp_type(self) -> QpType {
        match self.0 {
            0x0111 | 0x0002 => QpType::UD,
            _ => QpType::RC,
        }
    }
}

raw_newtype! {
    /// `enum ib_cm_rej_reason` (kernel `include/rdma/ib_cm.h`): the `status` of a REJECTED
    /// event on IB/RoCE.
    RejectReason(u32) {
        NO_QP = 1;
        NO_EEC = 2;
        NO_RESOURCES = 3;
        TIMEOUT = 4;
        UNSUPPORTED = 5;
        INVALID_COMM_ID = 6;
        INVALID_COMM_INSTANCE = 7;
        /// Nobody listens on that port (service id).
        INVALID_SERVICE_ID = 8;
        INVALID_TRANSPORT_TYPE = 9;
        STALE_CONN = 10;
        RDC_NOT_EXIST = 11;
        INVALID_GID = 12;
        INVALID_LID = 13;
        INVALID_SL = 14;
        INVALID_TRAFFIC_CLASS = 15;
        INVALID_HOP_LIMIT = 16;
        INVALID_PACKET_RATE = 17;
        INVALID_ALT_GID = 18;
        INVALID_ALT_LID = 19;
        INVALID_ALT_SL = 20;
        INVALID_ALT_TRAFFIC_CLASS = 21;
        INVALID_ALT_HOP_LIMIT = 22;
        INVALID_ALT_PACKET_RATE = 23;
        PORT_CM_REDIRECT = 24;
        PORT_REDIRECT = 25;
        INVALID_MTU = 26;
        INSUFFICIENT_RESP_RESOURCES = 27;
        /// The peer's application rejected ([`crate::CmId::reject`]).
        CONSUMER_DEFINED = 28;
        INVALID_RNR_RETRY = 29;
        DUPLICATE_LOCAL_COMM_ID = 30;
        INVALID_CLASS_VERSION = 31;
        INVALID_FLOW_LABEL = 32;
        INVALID_ALT_FLOW_LABEL = 33;
        VENDOR_OPTION_NOT_SUPPORTED = 35;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_numbers_are_the_kernels() {
        // include/rdma/rdma_cm.h `enum rdma_cm_event_type` (the uapi header has no copy).
        let all = [
            (CmEventKind::ADDR_RESOLVED, 0),
            (CmEventKind::ADDR_ERROR, 1),
            (CmEventKind::ROUTE_RESOLVED, 2),
            (CmEventKind::ROUTE_ERROR, 3),
            (CmEventKind::CONNECT_REQUEST, 4),
            (CmEventKind::CONNECT_RESPONSE, 5),
            (CmEventKind::CONNECT_ERROR, 6),
            (CmEventKind::UNREACHABLE, 7),
            (CmEventKind::REJECTED, 8),
            (CmEventKind::ESTABLISHED, 9),
            (CmEventKind::DISCONNECTED, 10),
            (CmEventKind::DEVICE_REMOVAL, 11),
            (CmEventKind::MULTICAST_JOIN, 12),
            (CmEventKind::MULTICAST_ERROR, 13),
            (CmEventKind::ADDR_CHANGE, 14),
            (CmEventKind::TIMEWAIT_EXIT, 15),
            (CmEventKind::USER, 18),
        ];
        for (k, n) in all {
            assert_eq!(k.0, n, "{k}");
        }
        assert_eq!(
            crate::id::INTERNAL_EVENT,
            19,
            "librdmacm's RDMA_CM_EVENT_INTERNAL"
        );
    }

    #[test]
    fn unknown_values_stay_unknown() {
        assert_eq!(CmEventKind(99).name(), None);
        assert_eq!(format!("{:?}", CmEventKind(99)), "CmEventKind(0x63)");
        assert_eq!(CmEventKind(99).to_string(), "unknown CmEventKind 99 (0x63)");
        assert_eq!(CmEventKind::ESTABLISHED.to_string(), "ESTABLISHED");
        assert_eq!(RejectReason(28), RejectReason::CONSUMER_DEFINED);
        assert_eq!(RejectReason(34).name(), None);
    }

    #[test]
    fn port_space_qp_types() {
        assert_eq!(PortSpace::TCP.default_qp_type(), QpType::RC);
        assert_eq!(PortSpace::UDP.default_qp_type(), QpType::UD);
        assert_eq!(PortSpace::IPOIB.default_qp_type(), QpType::UD);
        assert_eq!(PortSpace::IB.default_qp_type(), QpType::RC);
    }

    #[test]
    fn qp_attr_mask_bits() {
        assert_eq!(QpAttrMask::DEST_QPN.bits(), 0x100000);
        assert_eq!(QpAttrMask::MAX_DEST_RD_ATOMIC.bits(), 0x20000);
        assert_eq!(
            QpAttrMask::from_bits_retain(0x4000_0000).bits(),
            0x4000_0000
        );
    }
}
