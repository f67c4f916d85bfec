//! A queue pair's type, state and capacities.

use crate::newtype::raw_newtype;

raw_newtype! {
    /// `ib_uverbs_qp_type`.
    QpType(u8) {
        RC = 2, "RC";
        UC = 3, "UC";
        UD = 4, "UD";
        RAW_PACKET = 8, "RAW_PACKET";
        XRC_INI = 9, "XRC_INI";
        XRC_TGT = 10, "XRC_TGT";
        /// `IBV_QPT_DRIVER`: a type of the provider's own, named by its driver data (EFA: SRD,
        /// made through [`SrdQp`](crate::srd::SrdQp)).
        DRIVER = 0xff, "DRIVER";
    }
}

raw_newtype! {
    /// `ib_qp_state` (the kernel reports it in query).
    QpState(u8) {
        RESET = 0, "RESET";
        INIT = 1, "INIT";
        RTR = 2, "RTR";
        RTS = 3, "RTS";
        SQD = 4, "SQD";
        SQE = 5, "SQE";
        ERR = 6, "ERR";
    }
}

/// Queue pair capacities (`ib_uverbs_qp_cap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCaps {
    /// Outstanding work requests the send queue holds.
    pub max_send_wr: u32,
    /// Outstanding work requests the receive queue holds.
    pub max_recv_wr: u32,
    /// Most SGEs per send work request.
    pub max_send_sge: u32,
    /// Most SGEs per receive work request.
    pub max_recv_sge: u32,
    /// Most bytes of inline data per send.
    pub max_inline_data: u32,
}
