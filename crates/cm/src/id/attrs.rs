//! What the kernel tells about an id: the QP attributes it wants (`INIT_QP_ATTR`) and the
//! `QUERY` / `QUERY_ROUTE` answers.

use super::*;

impl CmId {
    // --- QP attributes -----------------------------------------------------------------------

    /// The attributes the kernel wants a QP of this id to have in `state` (`INIT_QP_ATTR`),
    /// ready for [`Qp::modify`](rverbs_uverbs::qp::Qp::modify): exactly the fields the
    /// kernel's mask names are `Some` ([`QpAttr::mask`] gives that mask). INIT after
    /// address/route resolution or a request, RTR and RTS once the peer's parameters are
    /// known (CONNECT_RESPONSE, or the request).
    pub fn init_qp_attr(&self, state: QpState) -> io::Result<QpAttr> {
        let mut resp = abi::ib_uverbs_qp_attr::default();
        let req = abi::rdma_ucm_init_qp_attr {
            response: resp_ptr(&mut resp),
            id: self.handle,
            qp_state: u32::from(state.0),
        };
        self.run("init_qp_attr", cmd::INIT_QP_ATTR, &req, size_of_val(&resp))
            .map_err(|e| Error::add_detail(e, format!("QP state {state}")))?;
        Ok(crate::qp_attr::from_kernel(&resp))
    }

    // --- queries -----------------------------------------------------------------------------

    /// Addresses and device of the id (`QUERY` / ADDR): local and peer addresses, the device's
    /// node GUID, port, P_Key and device index.
    pub fn query_addr(&self) -> io::Result<AddrQuery> {
        let mut resp = abi::rdma_ucm_query_addr_resp::default();
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut resp),
            id: self.handle,
            option: abi::query::ADDR,
        };
        self.run("query_addr", cmd::QUERY, &req, size_of_val(&resp))?;
        Ok(AddrQuery::from_raw(&resp))
    }

    /// The local and remote GIDs and P_Key as AF_IB addresses (`QUERY` / GID).
    pub fn query_gid(&self) -> io::Result<GidQuery> {
        let mut resp = abi::rdma_ucm_query_addr_resp::default();
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut resp),
            id: self.handle,
            option: abi::query::GID,
        };
        self.run("query_gid", cmd::QUERY, &req, size_of_val(&resp))?;
        let ib = |a: CmAddr| match a {
            CmAddr::Ib(ib) => ib,
            _ => IbAddr::default(),
        };
        Ok(GidQuery {
            src: ib(addr::decode_sized(&resp.src_addr.bytes, resp.src_size)),
            dst: ib(addr::decode_sized(&resp.dst_addr.bytes, resp.dst_size)),
            src_size: resp.src_size,
            dst_size: resp.dst_size,
        })
    }

    /// The resolved path records (`QUERY` / PATH); empty before ROUTE_RESOLVED.
    pub fn query_path(&self) -> io::Result<Vec<PathRecord>> {
        const MAX: usize = 6;
        const LEN: usize =
            size_of::<abi::rdma_ucm_query_path_resp>() + MAX * size_of::<abi::ib_path_rec_data>();
        // A u64 buffer keeps the response 8-byte aligned like the kernel's structure.
        let mut buf = [0u64; LEN / 8];
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut buf),
            id: self.handle,
            option: abi::query::PATH,
        };
        self.run("query_path", cmd::QUERY, &req, LEN)?;
        Ok(crate::query::decode_path_resp(buf.as_bytes()))
    }

    /// The route as the pre-AF_IB `QUERY_ROUTE` reports it (up to two `ib_user_path_rec`).
    pub fn query_route(&self) -> io::Result<RouteQuery> {
        let mut resp = abi::rdma_ucm_query_route_resp::default();
        let req = abi::rdma_ucm_query {
            response: resp_ptr(&mut resp),
            id: self.handle,
            option: 0,
        };
        self.run("query_route", cmd::QUERY_ROUTE, &req, size_of_val(&resp))?;
        Ok(RouteQuery::from_raw(&resp))
    }
}
