//! Options of an id (`SET_OPTION`: type of service, reuse, AF_IB, ACK timeout, …) and
//! `NOTIFY`.

use super::*;

impl CmId {
    // --- options -----------------------------------------------------------------------------

    /// `SET_OPTION` with raw bytes: `level` and `name` as `RDMA_OPTION_*` of `rdma_user_cm.h`.
    pub fn set_option_raw(&self, level: u32, name: u32, value: &[u8]) -> io::Result<()> {
        let req = abi::rdma_ucm_set_option {
            optval: value.as_ptr() as u64,
            id: self.handle,
            level,
            optname: name,
            optlen: u32::try_from(value.len())
                .map_err(|_| Error::invalid("set_option", "value too large"))?,
        };
        self.run("set_option", cmd::SET_OPTION, &req, 0)
            .map_err(|e| Error::add_detail(e, format!("level {level} option {name}")))
    }

    /// Type of service of the connection's traffic (RDMA_OPTION_ID_TOS).
    pub fn set_tos(&self, tos: u8) -> io::Result<()> {
        self.set_option_raw(abi::opt::LEVEL_ID, abi::opt::ID_TOS, &[tos])
    }

    /// Allow binding a port still in use (RDMA_OPTION_ID_REUSEADDR); before bind.
    pub fn set_reuseaddr(&self, on: bool) -> io::Result<()> {
        self.set_option_raw(
            abi::opt::LEVEL_ID,
            abi::opt::ID_REUSEADDR,
            &i32::from(on).to_ne_bytes(),
        )
    }

    /// An IPv6 wildcard bind listens on IPv6 only (RDMA_OPTION_ID_AFONLY); before bind.
    pub fn set_afonly(&self, on: bool) -> io::Result<()> {
        self.set_option_raw(
            abi::opt::LEVEL_ID,
            abi::opt::ID_AFONLY,
            &i32::from(on).to_ne_bytes(),
        )
    }

    /// Local ACK timeout exponent for the QP (RDMA_OPTION_ID_ACK_TIMEOUT): 4.096 µs · 2^t.
    pub fn set_ack_timeout(&self, timeout: u8) -> io::Result<()> {
        self.set_option_raw(abi::opt::LEVEL_ID, abi::opt::ID_ACK_TIMEOUT, &[timeout])
    }

    /// Tells the CM about a QP event (`NOTIFY`, an `ib_event_type`): IB_EVENT_COMM_EST = 4 when
    /// a receive completes before ESTABLISHED, IB_EVENT_PATH_MIG = 6.
    pub fn notify(&self, ib_event: u32) -> io::Result<()> {
        let req = abi::rdma_ucm_notify {
            id: self.handle,
            event: ib_event,
        };
        self.run("notify", cmd::NOTIFY, &req, 0)
    }

    /// Queues a USER event ([`CmEventKind::USER`](crate::types::CmEventKind::USER)) on this
    /// id's event channel (`WRITE_CM_EVENT`, librdmacm's `rdma_write_cm_event` of rdma-core
    /// 60): whoever reads the id's events (its channel, or the id itself when synchronous or
    /// claimed) gets it as any other, with `status` and `arg`
    /// ([`CmEvent::arg`](crate::CmEvent::arg)). A way to wake a thread waiting on the id's
    /// channel for any event. A blocking call of a synchronous or claimed id that waits for a
    /// particular event (say, `resolve_addr` for ADDR_RESOLVED) reads the USER event instead
    /// and fails with a protocol error, its own event staying queued for the next read: write
    /// events to such an id only while none of its calls waits. Kernels without the command (6.1 and 6.12 have none; 7.3 has it) are refused
    /// by name ([`io::ErrorKind::Unsupported`](std::io::ErrorKind::Unsupported)).
    pub fn write_event(&self, status: i32, arg: u64) -> io::Result<()> {
        self.write_event_of(CmEventKind::USER, status, arg)
    }

    internal! {
    /// Queues an INTERNAL event (librdmacm's own, `RDMA_CM_EVENT_INTERNAL` = 19) as
    /// [`CmId::write_event`] queues a USER one: what the C drop-in's `rdma_resolve_addrinfo`
    /// reports its answer with.
    pub fn write_internal_event(&self, status: i32, arg: u64) -> io::Result<()> {
        self.write_event_of(CmEventKind(INTERNAL_EVENT), status, arg)
    }
    }

    fn write_event_of(&self, kind: CmEventKind, status: i32, arg: u64) -> io::Result<()> {
        let op = "write rdma_cm event";
        let mut req = abi::rdma_ucm_write_cm_event {
            id: self.handle,
            event: kind.0,
            status: status as u32,
            ..Default::default()
        };
        req.param[..8].copy_from_slice(&arg.to_ne_bytes());
        tracing::trace!(id = self.handle, op, "rdma_cm command");
        match self.chan.command(cmd::WRITE_CM_EVENT, &req, 0) {
            Ok(()) => Ok(()),
            // The kind is one the command takes and the id is ours: EINVAL is a kernel whose
            // command table ends before WRITE_CM_EVENT.
            Err(Errno::INVAL) => Err(Error::unsupported(
                op,
                format!(
                    "event {kind} on id {}: this kernel's rdma_cm has no WRITE_CM_EVENT \
                     command (Linux 6.1 and 6.12 have none, 7.3 has it)",
                    self.handle
                ),
            )
            .into()),
            Err(e) => Err(self.kernel_err(op, e)),
        }
    }
}
