//! `RdmaListener`: the passive side, which hands each connection to [`RdmaStream`].

use super::*;

/// Listens for rsockets connections (from [`RdmaStream::connect`], `rstream -s`, or any
/// `rsocket` client).
pub struct RdmaListener {
    id: CmId,
    opts: StreamOptions,
    local: Option<SocketAddr>,
}

impl fmt::Debug for RdmaListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaListener")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl RdmaListener {
    /// Binds to `addr` (port 0: a free port) and listens, with the default options for the
    /// streams it accepts.
    pub fn bind(addr: SocketAddr) -> io::Result<RdmaListener> {
        Self::bind_with(addr, &StreamOptions::default())
    }

    /// [`RdmaListener::bind`] with `opts` for the accepted streams (checked now).
    pub fn bind_with(addr: SocketAddr, opts: &StreamOptions) -> io::Result<RdmaListener> {
        opts.check()?;
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("listen on {addr}: {e}"));
        let id = CmId::create(None, PortSpace::TCP).map_err(ctx)?;
        id.bind(addr).map_err(ctx)?;
        id.listen(0).map_err(ctx)?;
        let local = id.query_addr().ok().and_then(|q| q.src.ip());
        Ok(RdmaListener {
            id,
            opts: *opts,
            local,
        })
    }

    /// The bound address (with the port chosen when bound to port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.local
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no local IP address"))
    }

    /// Waits for the next connection request and accepts it. A request whose connection
    /// data we do not speak (another rsockets version, too short) is rejected and reported
    /// as `InvalidData` naming the fault and the peer; the listener stays usable.
    pub fn accept(&self) -> io::Result<(RdmaStream, SocketAddr)> {
        self.accept_with(&self.opts)
    }

    /// [`RdmaListener::accept`] with `opts` for this stream instead of the listener's
    /// (rsockets' listeners pass on the options set after `listen`).
    pub fn accept_with(&self, opts: &StreamOptions) -> io::Result<(RdmaStream, SocketAddr)> {
        opts.check()?;
        let id = self.id.get_request()?;
        let ev = id
            .take_event()
            .ok_or_else(|| io::Error::other("accept: the connection request event is missing"))?;
        Self::accept_request(id, ev, opts)
    }

    /// The listener's options for the streams it accepts.
    #[cfg(feature = "tokio")]
    pub(crate) fn options(&self) -> StreamOptions {
        self.opts
    }

    /// The next connection request if one is queued, without waiting (when none is, the
    /// kernel's queue was read to its end): the new id, moved to a channel of its own as
    /// [`CmId::get_request`] does, and its CONNECT_REQUEST event. Another event on the
    /// listening id is an error naming it.
    #[cfg(feature = "tokio")]
    pub(crate) fn try_request(&self) -> io::Result<Option<(CmId, rverbs_cm::CmEvent)>> {
        let Some(mut ev) = self.id.try_next_event()? else {
            return Ok(None);
        };
        ev.check("accept", &[CmEventKind::CONNECT_REQUEST])?;
        let mut id = ev.take_id().ok_or_else(|| {
            io::Error::other("accept: a connection request without its new rdma_cm id")
        })?;
        id.migrate(None)?;
        Ok(Some((id, ev)))
    }

    /// Answers one connection request (`id` and its CONNECT_REQUEST event `ev`): the
    /// rsockets handshake of [`RdmaListener::accept`], blocking until the connection is
    /// established.
    pub(crate) fn accept_request(
        id: CmId,
        ev: rverbs_cm::CmEvent,
        opts: &StreamOptions,
    ) -> io::Result<(RdmaStream, SocketAddr)> {
        let (_, from) = addrs(&id);
        let who = from.map_or_else(|| "an unknown peer".to_string(), |a| a.to_string());
        let peer = match ConnData::parse(ev.private_data()) {
            Ok(p) => p,
            Err(e) => {
                if let Err(r) = id.reject(&[]) {
                    tracing::debug!("reject {who}: {r}");
                }
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("accept: connection request from {who} refused: {e}"),
                ));
            }
        };
        drop(ev);
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("accept from {who}: {e}"));
        let (conn, sizes) = Conn::create(id, opts).map_err(ctx)?;
        conn.to_rts().map_err(ctx)?;
        let param = ConnParam {
            private_data: conn.conn_data(&sizes).to_bytes().to_vec(),
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: conn.qp.qp_num(),
            ..ConnParam::default()
        };
        conn.id.accept(&param).map_err(ctx)?;
        let s = RdmaStream::from_conn(conn, sizes, &peer).map_err(ctx)?;
        let from = s.peer_addr()?;
        Ok((s, from))
    }
}

impl AsFd for RdmaListener {
    /// Readable when a connection request is waiting: [`RdmaListener::accept`] then does not
    /// block for long.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.id.channel_fd()
    }
}
