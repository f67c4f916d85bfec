//! UD multicast: `JOIN_MCAST` (or `JOIN_IP_MCAST` on kernels without it) and `LEAVE_MCAST`.
//!
//! The join's uid is the id's own, so the MULTICAST_JOIN / MULTICAST_ERROR events reach the id
//! like its other events (a synchronous id waits for them; [`CmEvent::is_for`] holds) and are
//! decoded with the UD parameters. Their `id` field is the **multicast's** kernel id, which
//! tells the groups of one id apart (`CmId::multicast_handle`).

use std::net::IpAddr;

use super::*;
use crate::event::UdEventParam;
use crate::types::McJoinFlags;

/// One group joined on an id.
#[derive(Clone, Debug)]
pub(crate) struct Joined {
    pub(crate) addr: SocketAddr,
    /// The kernel's id of the multicast.
    pub(crate) mc_id: u32,
    /// The GID and LID a QP was attached to for this group (by the endpoint helpers).
    pub(crate) attached: Option<(rverbs_uverbs::gid::Gid, u16)>,
}

/// True for an IPv4 (224.0.0.0/4) or IPv6 (ff00::/8) multicast address.
fn is_multicast(addr: &SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V4(a) => a.is_multicast(),
        IpAddr::V6(a) => a.is_multicast(),
    }
}

impl CmId {
    /// Joins the multicast group `addr` (`rdma_join_multicast_ex`): an IPv4 or IPv6
    /// multicast address; the port is ignored. The id must be UD (port space UDP or IPOIB, or
    /// IB with a UD QP) and have a device: bind it to a local address or resolve the group's
    /// address from a local one first (`resolve_addr(Some(local), group)`, as rdma-core's
    /// `mckey` does).
    ///
    /// The kernel completes the join with MULTICAST_JOIN (or MULTICAST_ERROR), whose
    /// [`CmEvent::ud`] carries what a sender needs: the AH attributes towards the group
    /// (`ah_attr`, with the group's GID as `grh.dgid` and its LID as `dlid`), the QP number
    /// (0xffffff) and the Q_Key. A receiver attaches its UD QP to that GID and LID
    /// ([`rverbs_uverbs::qp::Qp::attach_mcast`], or [`crate::Endpoint::join_multicast`] which does
    /// both). Synchronous ids wait for the event and return its UD parameters (the event
    /// itself is then in [`CmId::take_event`]); asynchronous ids return `None` and the event
    /// arrives on the channel, its `CmEvent::id_handle` equal to
    /// `CmId::multicast_handle``(addr)`.
    ///
    /// Refused before the kernel is asked: an address that is not multicast, an id that is not
    /// UD, a group this id already joined.
    pub fn join_multicast(
        &self,
        addr: SocketAddr,
        flags: McJoinFlags,
    ) -> io::Result<Option<UdEventParam>> {
        let op = "join_multicast";
        let bad = |why: String| -> io::Error {
            Error::invalid(
                format!(
                    "join_multicast of {} on rdma_cm id {} ({} {})",
                    addr.ip(),
                    self.handle,
                    self.ps,
                    self.qp_type
                ),
                why,
            )
            .into()
        };
        if !is_multicast(&addr) {
            return Err(bad(
                "not a multicast address (IPv4 224.0.0.0/4 or IPv6 ff00::/8)".into(),
            ));
        }
        if self.qp_type != QpType::UD {
            return Err(bad(format!(
                "multicast needs a UD id (port space UDP or IPOIB), this one is {}",
                self.qp_type
            )));
        }
        if flags.name().is_none() {
            return Err(bad(format!(
                "unknown join flags {} (FULL_MEMBER or SENDONLY_FULL_MEMBER)",
                flags.0
            )));
        }
        if self.multicast_handle(addr).is_some() {
            return Err(bad("this id already joined the group".into()));
        }
        let mut resp = abi::rdma_ucm_create_id_resp::default();
        let (storage, size) = addr::to_storage(&addr);
        let req = abi::rdma_ucm_join_mcast {
            response: resp_ptr(&mut resp),
            uid: self.uid,
            id: self.handle,
            addr_size: size,
            join_flags: flags.0,
            addr: storage,
        };
        let mut r = self.chan.command(cmd::JOIN_MCAST, &req, size_of_val(&resp));
        if r == Err(Errno::NOSYS) && flags == McJoinFlags::FULL_MEMBER {
            // A kernel before JOIN_MCAST: the IP join (full member only).
            let req = abi::rdma_ucm_join_ip_mcast {
                response: resp_ptr(&mut resp),
                uid: self.uid,
                addr: addr::to_in6_slot(&addr),
                id: self.handle,
            };
            r = self
                .chan
                .command(cmd::JOIN_IP_MCAST, &req, size_of_val(&resp));
        }
        r.map_err(|e| Error::add_detail(self.kernel_err(op, e), format!("group {}", addr.ip())))?;
        self.lock().joined.push(Joined {
            addr,
            mc_id: resp.id,
            attached: None,
        });
        if !self.sync {
            return Ok(None);
        }
        match self.wait(op, &[CmEventKind::MULTICAST_JOIN]) {
            Ok(()) => {
                let st = self.lock();
                Ok(st.event.as_ref().and_then(|e| e.ud()))
            }
            Err(e) => {
                // The kernel keeps the multicast until it is left: leave it now so that a
                // failed join leaves nothing behind.
                if let Err(l) = self.leave_multicast(addr) {
                    tracing::warn!("leaving {} after the failed join: {l}", addr.ip());
                }
                Err(e)
            }
        }
    }

    /// Leaves the multicast group `addr` joined with [`CmId::join_multicast`]
    /// (`LEAVE_MCAST`); the kernel discards the join's unread events, and so does the id.
    /// A QP attached to the group stays attached until detached (the endpoint's
    /// [`crate::Endpoint::leave_multicast`] detaches first). Returns how many events the
    /// kernel reported for the join. Refused for a group this id has not joined. Destroying
    /// the id leaves all its groups.
    pub fn leave_multicast(&self, addr: SocketAddr) -> io::Result<u32> {
        let Some(mc_id) = self.multicast_handle(addr) else {
            return Err(Error::invalid(
                format!(
                    "leave_multicast of {} on rdma_cm id {}",
                    addr.ip(),
                    self.handle
                ),
                "this id has not joined the group",
            )
            .into());
        };
        let mut resp = abi::rdma_ucm_destroy_id_resp::default();
        let req = abi::rdma_ucm_destroy_id {
            response: resp_ptr(&mut resp),
            id: mc_id,
            reserved: 0,
        };
        self.run(
            "leave_multicast",
            cmd::LEAVE_MCAST,
            &req,
            size_of_val(&resp),
        )
        .map_err(|e| Error::add_detail(e, format!("group {}", addr.ip())))?;
        self.lock().joined.retain(|j| j.mc_id != mc_id);
        self.chan.lock().drop_multicast_events(self.uid, mc_id);
        Ok(resp.events_reported)
    }

    internal! {
    /// The kernel's id of this id's join of `addr` (the `id` of its MULTICAST_JOIN and
    /// MULTICAST_ERROR events), `None` if not joined.
    pub fn multicast_handle(&self, addr: SocketAddr) -> Option<u32> {
        self.lock()
            .joined
            .iter()
            .find(|j| j.addr.ip() == addr.ip())
            .map(|j| j.mc_id)
    }
    }

    /// The join whose kernel id is `mc_id`.
    pub(crate) fn joined_by_handle(&self, mc_id: u32) -> Option<Joined> {
        self.lock()
            .joined
            .iter()
            .find(|j| j.mc_id == mc_id)
            .cloned()
    }

    /// Records (or clears) the QP attachment of the join of `addr`.
    pub(crate) fn set_attached(
        &self,
        mc_id: u32,
        attached: Option<(rverbs_uverbs::gid::Gid, u16)>,
    ) {
        if let Some(j) = self.lock().joined.iter_mut().find(|j| j.mc_id == mc_id) {
            j.attached = attached;
        }
    }
}
