//! Ports: [`Context::query_port`] and what it answers ([`PortAttr`]: state, MTUs, link layer,
//! table sizes), and the port values the kernel reports as newtypes ([`PortState`], [`Mtu`],
//! [`LinkLayer`], [`PhysState`]).

use std::io;

use rustix::io::Errno;
use zerocopy::FromZeros;

use crate::context::{Context, Method, Via};
use crate::error::Error;
use crate::kernel::abi::cmd::nr;
use crate::kernel::abi::device::{
    ib_uverbs_query_port, ib_uverbs_query_port_resp, ib_uverbs_query_port_resp_ex,
};
use crate::kernel::abi::ioctl::object;
use crate::kernel::abi::obj::device as dev_m;
use crate::kernel::ioctl::IoctlCall;
use crate::kernel::write;

pub use crate::values::{LinkLayer, Mtu, PhysState, PortState};

some_internal_fields! {
/// Port attributes (`ibv_port_attr`).
///
/// Non-exhaustive: the kernel adds fields. Outside this crate start from
/// `PortAttr::default()` (all zero) and set the fields you need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttr {
    /// Logical port state (DOWN, INIT, ARMED, ACTIVE).
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// Entries of the port's GID table.
    pub gid_tbl_len: u32,
    /// `IB_PORT_*` capability bits.
    pub port_cap_flags: u32,
    /// Largest message, in bytes.
    pub max_msg_sz: u32,
    /// Packets dropped for a bad P_Key.
    pub(crate) bad_pkey_cntr: u32,
    /// Packets dropped for a Q_Key violation.
    pub(crate) qkey_viol_cntr: u32,
    /// Entries of the port's P_Key table.
    pub pkey_tbl_len: u16,
    /// The port's base LID (InfiniBand).
    pub lid: u16,
    /// LID of the subnet manager (InfiniBand).
    pub sm_lid: u16,
    /// LID mask control: 2^lmc LIDs per port (InfiniBand).
    pub lmc: u8,
    /// Most virtual lanes.
    pub max_vl_num: u8,
    /// Service level for talking to the subnet manager.
    pub sm_sl: u8,
    /// Subnet propagation timeout (4.096 µs × 2^value).
    pub subnet_timeout: u8,
    /// InitTypeReply from the subnet manager.
    pub(crate) init_type_reply: u8,
    /// Link width (`IB_WIDTH_*`: 1 = 1x, 2 = 4x, …).
    pub active_width: u8,
    /// Link speed per lane (`IB_SPEED_*`).
    pub active_speed: u8,
    /// Physical link state (POLLING, LINK_UP, …).
    pub phys_state: PhysState,
    /// InfiniBand or Ethernet (RoCE).
    pub link_layer: LinkLayer,
    /// `IB_UVERBS_QPF_*` (bit 0: GRH required).
    pub flags: u8,
    /// Only the ioctl path reports it (0 after the write fallback).
    pub(crate) port_cap_flags2: u16,
}
}

impl PortAttr {
    fn from_resp(r: &ib_uverbs_query_port_resp, cap_flags2: u16) -> Self {
        Self {
            state: PortState(r.state),
            max_mtu: Mtu(r.max_mtu),
            active_mtu: Mtu(r.active_mtu),
            gid_tbl_len: r.gid_tbl_len,
            port_cap_flags: r.port_cap_flags,
            max_msg_sz: r.max_msg_sz,
            bad_pkey_cntr: r.bad_pkey_cntr,
            qkey_viol_cntr: r.qkey_viol_cntr,
            pkey_tbl_len: r.pkey_tbl_len,
            lid: r.lid,
            sm_lid: r.sm_lid,
            lmc: r.lmc,
            max_vl_num: r.max_vl_num,
            sm_sl: r.sm_sl,
            subnet_timeout: r.subnet_timeout,
            init_type_reply: r.init_type_reply,
            active_width: r.active_width,
            active_speed: r.active_speed,
            phys_state: PhysState(r.phys_state),
            link_layer: LinkLayer(r.link_layer),
            flags: r.flags,
            port_cap_flags2: cap_flags2,
        }
    }
}

impl Context {
    pub(crate) fn bad_port(&self, port: u32, op: String) -> io::Error {
        let n = self.port_count();
        Error::invalid(
            op,
            format!(
                "{} has {n} port{} (valid: 1..={n}), there is no port {port}",
                self.device().name(),
                if n == 1 { "" } else { "s" }
            ),
        )
        .into()
    }

    /// Number of ports: from sysfs, or from the device query when sysfs did not say.
    pub(crate) fn port_count(&self) -> u32 {
        match self.device().port_count() {
            0 => self
                .query_device()
                .map_or(0, |a| u32::from(a.phys_port_cnt)),
            n => n,
        }
    }

    /// Attributes of port `port` (1-based).
    pub fn query_port(&self, port: u32) -> io::Result<PortAttr> {
        let op = || format!("query port {port} of {}", self.device().name());
        let known = self.device().port_count();
        if port == 0 || port > u32::from(u8::MAX) || (known > 0 && port > known) {
            return Err(self.bad_port(port, op()));
        }
        let mut resp = ib_uverbs_query_port_resp_ex::new_zeroed();
        let via = self.ioctl_or_write(
            Method::QueryPort,
            &mut resp,
            |c, resp| {
                c.const_in(dev_m::ATTR_QUERY_PORT_PORT_NUM, u64::from(port));
                c.ptr_out(dev_m::ATTR_QUERY_PORT_RESP, resp);
            },
            |_| {
                let mut r = ib_uverbs_query_port_resp::new_zeroed();
                let req = ib_uverbs_query_port {
                    port_num: port as u8,
                    ..Default::default()
                };
                write::cmd_legacy_simple(self.cmd_fd(), nr::QUERY_PORT, &req, &mut r)?;
                Ok(PortAttr::from_resp(&r, 0))
            },
        );
        match via {
            Ok(Via::Ioctl(..)) => Ok(PortAttr::from_resp(&resp.legacy_resp, resp.port_cap_flags2)),
            Ok(Via::Write(attr)) => Ok(attr),
            Err(e) if e == Errno::INVAL && port > self.port_count() => {
                Err(self.bad_port(port, op()))
            }
            Err(e) => Err(Error::os(op(), e).into()),
        }
    }
}

impl Context {
    /// The effective bandwidth of port `port` (1-based), in units of 100 Mb/s
    /// (`ibv_query_port_speed`, rdma-core 62): what the device says the port carries, which
    /// need not be its lanes' speed times their width. 0 while the port is down.
    ///
    /// The kernel's `UVERBS_METHOD_QUERY_PORT_SPEED` answers it, with no write() fallback:
    /// kernels before it (6.1 and 6.12 have none; 7.3 has it) and devices whose kernel driver
    /// reports no speed (rxe and siw have none; mlx5 and EFA do) fail with
    /// [`io::ErrorKind::Unsupported`] and an error saying which. A port the device does not
    /// have is refused first ([`io::ErrorKind::InvalidInput`]).
    pub fn query_port_speed(&self, port: u32) -> io::Result<u64> {
        let op = || format!("query the speed of port {port} of {}", self.device().name());
        let known = self.device().port_count();
        if port == 0 || (known > 0 && port > known) {
            return Err(self.bad_port(port, op()));
        }
        let mut speed = 0u64;
        let mut c = IoctlCall::new(object::DEVICE, dev_m::METHOD_QUERY_PORT_SPEED);
        c.const_in(dev_m::ATTR_QUERY_PORT_SPEED_PORT_NUM, u64::from(port));
        let out = c.ptr_out(dev_m::ATTR_QUERY_PORT_SPEED_RESP, &mut speed);
        match self.ioctl(&mut c) {
            Ok(()) if c.valid_output(out) => {}
            Ok(()) => {
                return Err(Error::protocol(op(), "the kernel did not write the speed").into())
            }
            Err(e) => return Err(self.port_speed_refusal(port, op(), e)),
        }
        Ok(speed)
    }

    /// What a refusal of `QUERY_PORT_SPEED` means.
    fn port_speed_refusal(&self, port: u32, op: String, e: Errno) -> io::Error {
        match e {
            Errno::PROTONOSUPPORT | Errno::NOTTY => Error::unsupported(
                op,
                "this kernel has no QUERY_PORT_SPEED method (Linux 6.1 and 6.12 have none, 7.3 \
                 has it)",
            )
            .into(),
            Errno::OPNOTSUPP => Error::os(op, e)
                .with_detail(format!(
                    "{}'s kernel driver reports no effective port speed (rxe and siw report \
                     none)",
                    self.driver().map_or("the device", |d| d.name())
                ))
                .into(),
            Errno::INVAL if port > self.port_count() => self.bad_port(port, op),
            _ => Error::os(op, e).into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_and_names() {
        assert_eq!(Mtu::MTU_1024.bytes(), Some(1024));
        assert_eq!(Mtu::MTU_4096.bytes(), Some(4096));
        assert_eq!(Mtu(9).bytes(), None);
        assert_eq!(PortState::ACTIVE.to_string(), "PORT_ACTIVE");
        assert_eq!(LinkLayer::ETHERNET.to_string(), "Ethernet");
    }

    /// Each state's `rdma link show` name, as iproute2's tables give them by number.
    #[test]
    fn link_names() {
        let port = ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"];
        for (n, want) in port.iter().enumerate() {
            assert_eq!(PortState(n as u8).link_name(), *want);
        }
        assert_eq!(PortState(6).link_name(), "UNKNOWN");
        assert_eq!(PortState(255).link_name(), "UNKNOWN");
        let phys = [
            "NOP",
            "SLEEP",
            "POLLING",
            "DISABLED",
            "ARMED",
            "LINK_UP",
            "LINK_ERROR_RECOVER",
            "PHY_TEST",
            "UNKNOWN",
            "OPA_OFFLINE",
            "UNKNOWN",
            "OPA_TEST",
        ];
        for (n, want) in phys.iter().enumerate() {
            assert_eq!(PhysState(n as u8).link_name(), *want, "{n}");
        }
        assert_eq!(PhysState(12).link_name(), "UNKNOWN");
        assert_eq!(PhysState(255).link_name(), "UNKNOWN");
    }
}
