//! Connection parameters ([`ConnParam`], `struct rdma_conn_param`): librdmacm's defaults and
//! the checks of what the kernel would silently truncate (private-data limits, 3-bit retry
//! counts, 24-bit QP numbers).

use std::io;

use rverbs_uverbs::Error;
use zerocopy::FromZeros;

use crate::abi::{self, cm_sizes};
use crate::types::QpType;

/// Defaults of librdmacm's `rdma_connect`/`rdma_accept` when the caller gives none.
pub const DEFAULT_RETRY_COUNT: u8 = 7;
/// See [`DEFAULT_RETRY_COUNT`].
pub const DEFAULT_RNR_RETRY_COUNT: u8 = 7;
/// responder_resources / initiator_depth used when neither the caller nor
/// [`CmId::set_rd_atomic_max`](crate::CmId::set_rd_atomic_max) says more: 1 lets RDMA READ work on every device.
pub const FALLBACK_RD_ATOMIC: u8 = 1;

/// Parameters of [`CmId::connect`](crate::CmId::connect) and [`CmId::accept`](crate::CmId::accept) (`struct rdma_conn_param`).
///
/// Defaults follow librdmacm: retry_count 7, rnr_retry_count 7; `None` for
/// responder_resources / initiator_depth means "the device maximum" when known (see
/// [`CmId::set_rd_atomic_max`](crate::CmId::set_rd_atomic_max)), on accept at most what the peer's request asked, else
/// [`FALLBACK_RD_ATOMIC`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    /// Sent in the REQ/REP (or SIDR REQ/REP). Limits on IB/RoCE with IP addressing: connect RC
    /// 56, connect UD 180, accept RC 196, accept UD 136.
    pub private_data: Vec<u8>,
    /// RDMA reads/atomics the peer may have outstanding toward us.
    pub responder_resources: Option<u8>,
    /// RDMA reads/atomics we may have outstanding toward the peer.
    pub initiator_depth: Option<u8>,
    /// Announce end-to-end flow control support.
    pub flow_control: bool,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7; 7 = infinite).
    pub rnr_retry_count: u8,
    /// Announce that the local QP takes receives from an SRQ.
    pub srq: bool,
    /// The local QP number announced to the peer (24 bits). The CM only carries it in its
    /// messages: a handshake without a QP can use any value.
    pub qp_num: u32,
    /// Only used with AF_IB addressing (which this crate does not produce).
    pub qkey: u32,
}

impl Default for ConnParam {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            responder_resources: None,
            initiator_depth: None,
            flow_control: false,
            retry_count: DEFAULT_RETRY_COUNT,
            rnr_retry_count: DEFAULT_RNR_RETRY_COUNT,
            srq: false,
            qp_num: 0,
            qkey: 0,
        }
    }
}

impl ConnParam {
    /// Default parameters announcing `qp_num`.
    pub fn with_qp_num(qp_num: u32) -> Self {
        Self {
            qp_num,
            ..Self::default()
        }
    }
}

/// The private-data limit for `op` on an id of `qp_type` with IP addressing, and its reason.
pub(crate) fn private_data_limit(op: &str, qp_type: QpType) -> (usize, &'static str) {
    let ud = qp_type == QpType::UD;
    match (op, ud) {
        ("connect", false) => (
            cm_sizes::REQ - cm_sizes::CMA_HDR,
            "an IB CM REQ carries 92 bytes, of which rdma_cm uses 36 for its address header",
        ),
        ("connect", true) => (
            cm_sizes::SIDR_REQ - cm_sizes::CMA_HDR,
            "an IB CM SIDR REQ carries 216 bytes, of which rdma_cm uses 36 for its address header",
        ),
        ("accept", false) => (
            cm_sizes::REP,
            "an IB CM REP carries 196 bytes of private data",
        ),
        ("reject", false) => (
            cm_sizes::REJ,
            "an IB CM REJ carries 148 bytes of private data",
        ),
        (_, true) => (
            cm_sizes::SIDR_REP,
            "an IB CM SIDR REP carries 136 bytes of private data",
        ),
        _ => (
            abi::RDMA_MAX_PRIVATE_DATA,
            "the ucma ABI buffer holds 256 bytes",
        ),
    }
}

pub(crate) fn check_private_data(op: &'static str, qp_type: QpType, data: &[u8]) -> io::Result<()> {
    let (limit, why) = private_data_limit(op, qp_type);
    if data.len() > limit {
        return Err(Error::invalid(
            op,
            format!(
                "{} bytes of private data exceed the limit of {limit} for {op} on a {qp_type} id \
                 ({why})",
                data.len()
            ),
        )
        .into());
    }
    Ok(())
}

/// Builds the kernel's conn_param, validating what the kernel would silently truncate.
pub(crate) fn encode_conn_param(
    op: &'static str,
    qp_type: QpType,
    p: &ConnParam,
    depths: (u8, u8),
) -> io::Result<abi::rdma_ucm_conn_param> {
    check_private_data(op, qp_type, &p.private_data)?;
    if p.retry_count > 7 || p.rnr_retry_count > 7 {
        return Err(Error::invalid(
            op,
            format!(
                "retry_count {} / rnr_retry_count {}: the CM carries 3 bits, 0..=7",
                p.retry_count, p.rnr_retry_count
            ),
        )
        .into());
    }
    if p.qp_num > 0x00ff_ffff {
        return Err(Error::invalid(
            op,
            format!("qp_num {:#x} does not fit in 24 bits", p.qp_num),
        )
        .into());
    }
    let mut c = abi::rdma_ucm_conn_param::new_zeroed();
    c.qp_num = p.qp_num;
    c.qkey = p.qkey;
    c.private_data[..p.private_data.len()].copy_from_slice(&p.private_data);
    c.private_data_len = p.private_data.len() as u8;
    c.srq = u8::from(p.srq);
    c.initiator_depth = depths.0;
    c.responder_resources = depths.1;
    c.flow_control = u8::from(p.flow_control);
    c.retry_count = p.retry_count;
    c.rnr_retry_count = p.rnr_retry_count;
    c.valid = 1;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    #[test]
    fn conn_param_encoding() {
        let p = ConnParam {
            private_data: b"hello".to_vec(),
            qp_num: 0x12345,
            srq: true,
            flow_control: true,
            ..ConnParam::default()
        };
        let c = encode_conn_param("connect", QpType::RC, &p, (3, 4)).unwrap();
        let b = c.as_bytes();
        assert_eq!(b.len(), 272);
        assert_eq!(&b[0..4], &0x12345u32.to_ne_bytes());
        assert_eq!(&b[4..8], &0u32.to_ne_bytes());
        assert_eq!(&b[8..13], b"hello");
        assert!(b[13..264].iter().all(|&x| x == 0));
        // private_data_len, srq, responder_resources, initiator_depth, flow_control,
        // retry_count, rnr_retry_count, valid
        assert_eq!(&b[264..272], &[5, 1, 4, 3, 1, 7, 7, 1]);
    }

    #[test]
    fn private_data_limits_name_both_numbers() {
        let p = ConnParam {
            private_data: vec![0; 57],
            ..ConnParam::default()
        };
        let e = encode_conn_param("connect", QpType::RC, &p, (1, 1)).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("57 bytes") && s.contains("limit of 56"), "{s}");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let ok = ConnParam {
            private_data: vec![0; 56],
            ..ConnParam::default()
        };
        encode_conn_param("connect", QpType::RC, &ok, (1, 1)).unwrap();
        // UD connect (SIDR REQ): 180; accept RC (REP): 196; UD accept (SIDR REP): 136.
        let ud = ConnParam {
            private_data: vec![0; 181],
            ..ConnParam::default()
        };
        let s = encode_conn_param("connect", QpType::UD, &ud, (0, 0))
            .unwrap_err()
            .to_string();
        assert!(s.contains("181 bytes") && s.contains("limit of 180"), "{s}");
        let rep = ConnParam {
            private_data: vec![0; 197],
            ..ConnParam::default()
        };
        let s = encode_conn_param("accept", QpType::RC, &rep, (1, 1))
            .unwrap_err()
            .to_string();
        assert!(s.contains("197 bytes") && s.contains("limit of 196"), "{s}");
        let rep_ok = ConnParam {
            private_data: vec![0; 196],
            ..ConnParam::default()
        };
        encode_conn_param("accept", QpType::RC, &rep_ok, (1, 1)).unwrap();
        let sidr = ConnParam {
            private_data: vec![0; 137],
            ..ConnParam::default()
        };
        let s = encode_conn_param("accept", QpType::UD, &sidr, (0, 0))
            .unwrap_err()
            .to_string();
        assert!(s.contains("137 bytes") && s.contains("limit of 136"), "{s}");
        let s = check_private_data("reject", QpType::RC, &[0; 149])
            .unwrap_err()
            .to_string();
        assert!(s.contains("149 bytes") && s.contains("limit of 148"), "{s}");
        check_private_data("reject", QpType::RC, &[0; 148]).unwrap();
    }

    #[test]
    fn conn_param_range_checks() {
        let p = ConnParam {
            retry_count: 8,
            ..ConnParam::default()
        };
        assert!(encode_conn_param("connect", QpType::RC, &p, (1, 1))
            .unwrap_err()
            .to_string()
            .contains("0..=7"));
        let p = ConnParam {
            qp_num: 0x0100_0000,
            ..ConnParam::default()
        };
        assert!(encode_conn_param("connect", QpType::RC, &p, (1, 1))
            .unwrap_err()
            .to_string()
            .contains("24 bits"));
    }
}
