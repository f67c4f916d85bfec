//! Establishing and ending connections: bind and address/route resolution, the passive side
//! (listen, get_request, accept, reject) and the active side (connect, establish,
//! disconnect).

use super::*;
use crate::conn_param::{check_private_data, encode_conn_param, ConnParam, FALLBACK_RD_ATOMIC};

impl CmId {
    // --- address and route ---------------------------------------------------------------

    /// Binds to a local address (`BIND`); port 0 picks a free port. Binding to an address of an
    /// RDMA device's netdev also attaches the id to that device.
    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let (storage, size) = addr::to_storage(&addr);
        let req = abi::rdma_ucm_bind {
            id: self.handle,
            addr_size: size,
            reserved: 0,
            addr: storage,
        };
        self.run("bind", cmd::BIND, &req, 0)
            .map_err(|e| Error::add_detail(e, format!("address {addr}")))?;
        self.set_step(Step::Bound(addr));
        Ok(())
    }

    /// Resolves `dst` to an RDMA device and GID (`RESOLVE_ADDR`), from `src` if given.
    /// Completes with ADDR_RESOLVED or ADDR_ERROR (synchronous ids wait for it).
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> io::Result<()> {
        let mut req = abi::rdma_ucm_resolve_addr {
            id: self.handle,
            timeout_ms: millis("resolve_addr", timeout)?,
            ..Default::default()
        };
        if let Some(s) = src {
            let (st, n) = addr::to_storage(&s);
            req.src_addr = st;
            req.src_size = n;
        }
        let (dt, n) = addr::to_storage(&dst);
        req.dst_addr = dt;
        req.dst_size = n;
        self.run("resolve_addr", cmd::RESOLVE_ADDR, &req, 0)
            .map_err(|e| Error::add_detail(e, format!("destination {dst}")))?;
        self.set_step(Step::ResolvingAddr(dst));
        if self.sync {
            self.wait("resolve_addr", &[CmEventKind::ADDR_RESOLVED])
                .map_err(|e| Error::add_detail(e, format!("destination {dst}")))?;
        }
        Ok(())
    }

    /// Resolves the route to the resolved address (`RESOLVE_ROUTE`). Completes with
    /// ROUTE_RESOLVED or ROUTE_ERROR.
    pub fn resolve_route(&self, timeout: Duration) -> io::Result<()> {
        let req = abi::rdma_ucm_resolve_route {
            id: self.handle,
            timeout_ms: millis("resolve_route", timeout)?,
        };
        self.run("resolve_route", cmd::RESOLVE_ROUTE, &req, 0)?;
        self.set_step(Step::ResolvingRoute);
        if self.sync {
            self.wait("resolve_route", &[CmEventKind::ROUTE_RESOLVED])?;
        }
        Ok(())
    }

    // --- passive side ----------------------------------------------------------------------

    /// Listens for connection requests (`LISTEN`). `backlog` 0 means the kernel's maximum
    /// (`net.rdma_ucm.max_backlog`, 1024 by default). An unbound id listens on all devices.
    pub fn listen(&self, backlog: u32) -> io::Result<()> {
        let req = abi::rdma_ucm_listen {
            id: self.handle,
            backlog,
        };
        self.run("listen", cmd::LISTEN, &req, 0)?;
        self.set_step(Step::Listening);
        Ok(())
    }

    /// Synchronous listening ids: waits for the next connection request and returns the new
    /// id, itself synchronous (moved to its own channel). Its CONNECT_REQUEST event (private
    /// data, parameters) is available through [`CmId::take_event`].
    pub fn get_request(&self) -> io::Result<CmId> {
        if !self.sync {
            return Err(Error::invalid(
                "get_request",
                format!(
                    "rdma_cm id {} uses an explicit EventChannel: read CONNECT_REQUEST events \
                     there (CmEvent::take_id)",
                    self.handle
                ),
            )
            .into());
        }
        self.wait("get_request", &[CmEventKind::CONNECT_REQUEST])?;
        let mut ev = self
            .take_event()
            .ok_or_else(|| Error::protocol("get_request", "event vanished"))?;
        let mut id = ev
            .take_id()
            .ok_or_else(|| Error::protocol("get_request", "CONNECT_REQUEST without a new id"))?;
        id.migrate(None)?;
        id.lock().event = Some(Box::new(ev));
        Ok(id)
    }

    /// Accepts a connection request (`ACCEPT`), sending the REP (or SIDR REP for UD). Move the
    /// QP to RTR and RTS (with [`CmId::init_qp_attr`]) before calling this. Synchronous RC ids
    /// wait for ESTABLISHED.
    pub fn accept(&self, param: &ConnParam) -> io::Result<()> {
        let (req_depths, rd_max) = {
            let st = self.lock();
            (st.req_depths, st.rd_max)
        };
        let clamp = |asked: Option<u8>, requested: Option<u8>, max: Option<u8>| {
            asked.unwrap_or_else(|| match (requested, max) {
                (Some(r), Some(m)) => r.min(m),
                (Some(r), None) => r,
                (None, Some(m)) => m,
                (None, None) => FALLBACK_RD_ATOMIC,
            })
        };
        let depths = (
            clamp(
                param.initiator_depth,
                req_depths.map(|d| d.0),
                rd_max.map(|m| m.0),
            ),
            clamp(
                param.responder_resources,
                req_depths.map(|d| d.1),
                rd_max.map(|m| m.1),
            ),
        );
        let req = abi::rdma_ucm_accept {
            uid: self.uid,
            conn_param: encode_conn_param("accept", self.qp_type, param, depths)?,
            id: self.handle,
            reserved: 0,
            ece: abi::rdma_ucm_ece::default(),
        };
        self.run("accept", cmd::ACCEPT, &req, 0)?;
        self.set_step(Step::Accepting);
        if self.sync && self.qp_type != QpType::UD {
            self.wait("accept", &[CmEventKind::ESTABLISHED])?;
        }
        Ok(())
    }

    /// Rejects a connection request (`REJECT`, reason "consumer defined" 28) with private data
    /// (RC: at most 148 bytes, UD: 136). The active side gets REJECTED with status 28.
    pub fn reject(&self, private_data: &[u8]) -> io::Result<()> {
        check_private_data("reject", self.qp_type, private_data)?;
        let mut req = abi::rdma_ucm_reject::new_zeroed();
        req.id = self.handle;
        req.private_data_len = private_data.len() as u8;
        req.reason = 0;
        req.private_data[..private_data.len()].copy_from_slice(private_data);
        self.run("reject", cmd::REJECT, &req, 0)?;
        self.set_step(Step::Rejected);
        Ok(())
    }

    // --- active side -----------------------------------------------------------------------

    /// Connects (`CONNECT`): sends the REQ (SIDR REQ for UD). Synchronous RC ids wait for
    /// CONNECT_RESPONSE and then send the RTU ([`CmId::establish`]); synchronous UD ids wait
    /// for ESTABLISHED. With a QP, use [`CmId::connect_with`] to move it to RTR/RTS in between.
    pub fn connect(&self, param: &ConnParam) -> io::Result<()> {
        self.connect_with(param, |_, _| Ok(()))
    }

    /// [`CmId::connect`] with a step between the peer's REP (CONNECT_RESPONSE) and our RTU, for
    /// synchronous RC ids: `on_response` gets the id and the CONNECT_RESPONSE event and must
    /// bring the QP to RTS (`init_qp_attr(RTR)`, modify, `init_qp_attr(RTS)`, modify). If it
    /// fails, the connection is rejected and its error returned. Asynchronous ids ignore it:
    /// they see CONNECT_RESPONSE on their channel and call [`CmId::establish`]. On an iWARP
    /// device the answer is ESTABLISHED instead (the iw_cm has connected the QP and moved it
    /// to RTS): `on_response` is not called, no RTU is sent, and the event is kept for
    /// [`CmId::take_event`] (the peer's private data).
    pub fn connect_with(
        &self,
        param: &ConnParam,
        on_response: impl FnOnce(&CmId, &CmEvent) -> io::Result<()>,
    ) -> io::Result<()> {
        let rd_max = self.lock().rd_max;
        let depths = (
            param
                .initiator_depth
                .unwrap_or(rd_max.map_or(FALLBACK_RD_ATOMIC, |m| m.0)),
            param
                .responder_resources
                .unwrap_or(rd_max.map_or(FALLBACK_RD_ATOMIC, |m| m.1)),
        );
        let req = abi::rdma_ucm_connect {
            conn_param: encode_conn_param("connect", self.qp_type, param, depths)?,
            id: self.handle,
            reserved: 0,
            ece: abi::rdma_ucm_ece::default(),
        };
        self.run("connect", cmd::CONNECT, &req, 0).map_err(|e| {
            // iWARP connects its LLP (TCP) in the command itself: a refused TCP connection.
            if Error::errno_of(&e) == Some(Errno::CONNREFUSED) {
                Error::add_detail(e, "nobody listens on that port")
            } else {
                e
            }
        })?;
        self.set_step(Step::Connecting);
        if !self.sync {
            return Ok(());
        }
        if self.qp_type == QpType::UD {
            return self.wait("connect", &[CmEventKind::ESTABLISHED]);
        }
        self.wait(
            "connect",
            &[CmEventKind::CONNECT_RESPONSE, CmEventKind::ESTABLISHED],
        )?;
        let ev = self
            .take_event()
            .ok_or_else(|| Error::protocol("connect", "event vanished"))?;
        if ev.kind() == CmEventKind::ESTABLISHED {
            // iWARP: the iw_cm answers with ESTABLISHED and has connected the QP (moved it to
            // RTS) itself; there is no RTU to send and nothing for `on_response` to do.
            self.lock().event = Some(Box::new(ev));
            return Ok(());
        }
        let hook = on_response(self, &ev);
        self.lock().event = Some(Box::new(ev));
        if let Err(e) = hook {
            // Tell the peer now rather than letting it time out waiting for our RTU.
            if let Err(r) = self.reject(&[]) {
                tracing::debug!(id = self.handle, "reject after a failed connect step: {r}");
            }
            return Err(e);
        }
        self.establish()
    }

    /// Active RC side after CONNECT_RESPONSE (QP already in RTS): sends the RTU (an `ACCEPT`
    /// without parameters), completing the connection. The passive side then gets
    /// ESTABLISHED. (librdmacm's `rdma_establish`.)
    pub fn establish(&self) -> io::Result<()> {
        let mut req = abi::rdma_ucm_accept::new_zeroed();
        req.id = self.handle;
        self.run("establish", cmd::ACCEPT, &req, 0)?;
        self.set_step(Step::Event(CmEventKind::ESTABLISHED));
        Ok(())
    }

    /// Disconnects (`DISCONNECT`: DREQ, or DREP when answering the peer's). Move the QP to ERR
    /// first. Both sides get DISCONNECTED; this call does not wait for it.
    pub fn disconnect(&self) -> io::Result<()> {
        let req = abi::rdma_ucm_disconnect { id: self.handle };
        self.run("disconnect", cmd::DISCONNECT, &req, 0)?;
        self.set_step(Step::Disconnecting);
        Ok(())
    }

    /// Synchronous ids: waits for this id's next event (e.g. DISCONNECTED), up to `timeout`
    /// (`None`: forever). `Ok(None)` on timeout.
    pub fn get_event(&self, timeout: Option<Duration>) -> io::Result<Option<CmEvent>> {
        if !self.sync && !self.chan.lock().is_claimed(self.uid) {
            return Err(Error::invalid(
                "get_event",
                format!(
                    "rdma_cm id {} uses an explicit EventChannel: read its events there (or \
                     claim them with CmId::claim_events)",
                    self.handle
                ),
            )
            .into());
        }
        let uid = self.uid;
        let raw = self
            .chan
            .get_with(timeout, |d: &mut Dispatch| d.take_for(uid))
            .map_err(|e| Error::os("get rdma_cm event", e))?;
        Ok(raw.map(|r| {
            let ev = CmEvent::decode(r, &self.chan);
            self.set_step(Step::Event(ev.kind()));
            ev
        }))
    }
}
