//! What `INIT_QP_ATTR` answers, as the verbs [`QpAttr`] a modify-QP takes: the rdma_cm and
//! the verbs speak of the same QPs, so there is one attribute type.

use rverbs_uverbs::ah::{AhAttr, GlobalRoute};
use rverbs_uverbs::mr::AccessFlags;
use rverbs_uverbs::port::Mtu;
use rverbs_uverbs::qp::QpAttr;

use crate::abi;
use crate::types::{QpAttrMask, QpState};

/// The verbs address vector of the kernel's `ib_uverbs_ah_attr`.
pub(crate) fn ah_from_kernel(x: &abi::ib_uverbs_ah_attr) -> AhAttr {
    AhAttr {
        dlid: x.dlid,
        sl: x.sl,
        src_path_bits: x.src_path_bits,
        static_rate: x.static_rate,
        port_num: x.port_num,
        grh: (x.is_global != 0).then_some(GlobalRoute {
            dgid: x.grh.dgid,
            flow_label: x.grh.flow_label,
            sgid_index: x.grh.sgid_index,
            hop_limit: x.grh.hop_limit,
            traffic_class: x.grh.traffic_class,
        }),
    }
}

/// The verbs modify-QP attributes of what `INIT_QP_ATTR` returned: exactly the fields the
/// kernel's mask names. Fields the verbs modify does not send (the alternate path, path
/// migration state, capacities, rate limit) are left out.
pub(crate) fn from_kernel(r: &abi::ib_uverbs_qp_attr) -> QpAttr {
    let m = QpAttrMask::from_bits_retain(r.qp_attr_mask);
    let on = |bit: QpAttrMask| m.contains(bit);
    let ah = ah_from_kernel;
    QpAttr {
        qp_state: on(QpAttrMask::STATE).then_some(QpState(r.qp_state as u8)),
        cur_qp_state: on(QpAttrMask::CUR_STATE).then_some(QpState(r.cur_qp_state as u8)),
        en_sqd_async_notify: on(QpAttrMask::EN_SQD_ASYNC_NOTIFY)
            .then_some(r.en_sqd_async_notify != 0),
        access_flags: on(QpAttrMask::ACCESS_FLAGS)
            .then_some(AccessFlags::from_bits_retain(r.qp_access_flags)),
        pkey_index: on(QpAttrMask::PKEY_INDEX).then_some(r.pkey_index),
        port_num: on(QpAttrMask::PORT).then_some(r.port_num),
        qkey: on(QpAttrMask::QKEY).then_some(r.qkey),
        ah_attr: on(QpAttrMask::AV).then(|| ah(&r.ah_attr)),
        path_mtu: on(QpAttrMask::PATH_MTU).then_some(Mtu(r.path_mtu as u8)),
        timeout: on(QpAttrMask::TIMEOUT).then_some(r.timeout),
        retry_cnt: on(QpAttrMask::RETRY_CNT).then_some(r.retry_cnt),
        rnr_retry: on(QpAttrMask::RNR_RETRY).then_some(r.rnr_retry),
        rq_psn: on(QpAttrMask::RQ_PSN).then_some(r.rq_psn),
        max_rd_atomic: on(QpAttrMask::MAX_QP_RD_ATOMIC).then_some(r.max_rd_atomic),
        min_rnr_timer: on(QpAttrMask::MIN_RNR_TIMER).then_some(r.min_rnr_timer),
        sq_psn: on(QpAttrMask::SQ_PSN).then_some(r.sq_psn),
        max_dest_rd_atomic: on(QpAttrMask::MAX_DEST_RD_ATOMIC).then_some(r.max_dest_rd_atomic),
        dest_qp_num: on(QpAttrMask::DEST_QPN).then_some(r.dest_qp_num),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_masked_fields_are_taken() {
        let r = abi::ib_uverbs_qp_attr {
            qp_state: 2,
            dest_qp_num: 0x456,
            path_mtu: 3,
            rq_psn: 77,
            qp_attr_mask: (QpAttrMask::STATE | QpAttrMask::DEST_QPN | QpAttrMask::PATH_MTU).bits(),
            ..Default::default()
        };
        let a = from_kernel(&r);
        assert_eq!(a.qp_state, Some(QpState::RTR));
        assert_eq!(a.dest_qp_num, Some(0x456));
        assert_eq!(a.path_mtu, Some(Mtu::MTU_1024));
        assert_eq!(a.rq_psn, None, "not in the mask");
        assert_eq!(
            a.mask(),
            QpAttrMask::STATE | QpAttrMask::DEST_QPN | QpAttrMask::PATH_MTU
        );
        assert_eq!(
            from_kernel(&abi::ib_uverbs_qp_attr::default()),
            QpAttr::default()
        );
    }
}
