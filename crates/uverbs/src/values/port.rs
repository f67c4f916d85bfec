//! A port's state, MTU and link layer, as the kernel reports them.

use crate::newtype::raw_newtype;

raw_newtype! {
    /// `enum ib_port_state` (`ibv_port_state`).
    PortState(u8) {
        NOP = 0, "PORT_NOP";
        DOWN = 1, "PORT_DOWN";
        INIT = 2, "PORT_INIT";
        ARMED = 3, "PORT_ARMED";
        ACTIVE = 4, "PORT_ACTIVE";
        ACTIVE_DEFER = 5, "PORT_ACTIVE_DEFER";
    }
}

impl PortState {
    internal! {
    /// The name `rdma link show` prints for this state (the constant's name without `PORT_`:
    /// "ACTIVE"), "UNKNOWN" for a value it does not know.
    pub fn link_name(self) -> &'static str {
        match self.name() {
            Some(n) => n.strip_prefix("PORT_").unwrap_or(n),
            None => "UNKNOWN",
        }
    }
    }
}

raw_newtype! {
    /// `enum ib_mtu` (`ibv_mtu`): the path MTU code; [`Mtu::bytes`] gives the size.
    Mtu(u8) {
        MTU_256 = 1, "256";
        MTU_512 = 2, "512";
        MTU_1024 = 3, "1024";
        MTU_2048 = 4, "2048";
        MTU_4096 = 5, "4096";
    }
}

impl Mtu {
    /// The `Mtu` of a byte count (256, 512, 1024, 2048, 4096).
    pub const fn from_bytes(b: u32) -> Option<Mtu> {
        match b {
            256 => Some(Mtu::MTU_256),
            512 => Some(Mtu::MTU_512),
            1024 => Some(Mtu::MTU_1024),
            2048 => Some(Mtu::MTU_2048),
            4096 => Some(Mtu::MTU_4096),
            _ => None,
        }
    }

    /// The MTU in bytes, or `None` for a code this crate does not know.
    pub fn bytes(self) -> Option<u32> {
        match self.0 {
            1..=5 => Some(128 << self.0),
            _ => None,
        }
    }
}

raw_newtype! {
    /// `IB_LINK_LAYER_*` (`ibv_link_layer`).
    LinkLayer(u8) {
        UNSPECIFIED = 0, "unspecified";
        INFINIBAND = 1, "InfiniBand";
        ETHERNET = 2, "Ethernet";
    }
}

raw_newtype! {
    /// `enum ib_port_phys_state`.
    PhysState(u8) {
        SLEEP = 1, "SLEEP";
        POLLING = 2, "POLLING";
        DISABLED = 3, "DISABLED";
        PORT_CONFIGURATION_TRAINING = 4, "PORT_CONFIGURATION_TRAINING";
        LINK_UP = 5, "LINK_UP";
        LINK_ERROR_RECOVERY = 6, "LINK_ERROR_RECOVERY";
        PHY_TEST = 7, "PHY_TEST";
        /// Omni-Path: the port is offline (`OPA_PORTPHYSSTATE_OFFLINE`).
        OPA_OFFLINE = 9, "OPA_OFFLINE";
        /// Omni-Path: the port is in a test state.
        OPA_TEST = 11, "OPA_TEST";
    }
}

impl PhysState {
    internal! {
    /// The name `rdma link show` prints for this state, which differs from the kernel's for
    /// 4 ("ARMED") and 6 ("LINK_ERROR_RECOVER"); "NOP" for 0 and "UNKNOWN" for a value it
    /// does not know.
    pub fn link_name(self) -> &'static str {
        match self {
            PhysState(0) => "NOP",
            PhysState::PORT_CONFIGURATION_TRAINING => "ARMED",
            PhysState::LINK_ERROR_RECOVERY => "LINK_ERROR_RECOVER",
            s => s.name().unwrap_or("UNKNOWN"),
        }
    }
    }
}
