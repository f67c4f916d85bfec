//! Conversions from and to the kernel's structures (`ibv_copy_*_kern`), used by rdma-core's
//! librdmacm.

use super::*;

pub(crate) fn ah_from_kern(a: &rverbs_cm::abi::ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.grh.dgid },
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global,
        port_num: a.port_num,
    }
}

symver!(ibv_copy_ah_attr_from_kern => "IBVERBS_1.1");
/// `ibv_copy_ah_attr_from_kern`: `struct ib_uverbs_ah_attr` to `ibv_ah_attr`.
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut ibv_ah_attr,
    src: *const rverbs_cm::abi::ib_uverbs_ah_attr,
) {
    // SAFETY: [in] src, [out] dst (read_unaligned: C gives no alignment promise beyond 4).
    unsafe { dst.write(ah_from_kern(&src.read_unaligned())) };
}

symver!(ibv_copy_qp_attr_from_kern => "IBVERBS_1.0");
/// `ibv_copy_qp_attr_from_kern`: `struct ib_uverbs_qp_attr` to `ibv_qp_attr`.
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut ibv_qp_attr,
    src: *const rverbs_cm::abi::ib_uverbs_qp_attr,
) {
    // SAFETY: [in] src (unaligned), [out] dst.
    unsafe { dst.write(qp_attr_from_kern(&src.read_unaligned())) };
}

/// The `ibv_qp_attr` of the kernel's `ib_uverbs_qp_attr`.
fn qp_attr_from_kern(k: &rverbs_cm::abi::ib_uverbs_qp_attr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: k.qp_state,
        cur_qp_state: k.cur_qp_state,
        path_mtu: k.path_mtu,
        path_mig_state: k.path_mig_state,
        qkey: k.qkey,
        rq_psn: k.rq_psn,
        sq_psn: k.sq_psn,
        dest_qp_num: k.dest_qp_num,
        qp_access_flags: k.qp_access_flags,
        cap: ibv_qp_cap {
            max_send_wr: k.max_send_wr,
            max_recv_wr: k.max_recv_wr,
            max_send_sge: k.max_send_sge,
            max_recv_sge: k.max_recv_sge,
            max_inline_data: k.max_inline_data,
        },
        ah_attr: ah_from_kern(&k.ah_attr),
        alt_ah_attr: ah_from_kern(&k.alt_ah_attr),
        pkey_index: k.pkey_index,
        alt_pkey_index: k.alt_pkey_index,
        en_sqd_async_notify: k.en_sqd_async_notify,
        sq_draining: k.sq_draining,
        max_rd_atomic: k.max_rd_atomic,
        max_dest_rd_atomic: k.max_dest_rd_atomic,
        min_rnr_timer: k.min_rnr_timer,
        port_num: k.port_num,
        timeout: k.timeout,
        retry_cnt: k.retry_cnt,
        rnr_retry: k.rnr_retry,
        alt_port_num: k.alt_port_num,
        alt_timeout: k.alt_timeout,
        rate_limit: 0,
    }
}

symver!(ibv_copy_path_rec_from_kern => "IBVERBS_1.0");
/// `ibv_copy_path_rec_from_kern`: `struct ib_user_path_rec` to `ibv_sa_path_rec`.
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut ibv_sa_path_rec,
    src: *const rverbs_cm::abi::ib_user_path_rec,
) {
    // SAFETY: [in] src (unaligned).
    let k = unsafe { src.read_unaligned() };
    let o = ibv_sa_path_rec {
        dgid: ibv_gid { raw: k.dgid },
        sgid: ibv_gid { raw: k.sgid },
        // Already big-endian on both sides: keep the bytes.
        dlid: u16::from_ne_bytes(k.dlid),
        slid: u16::from_ne_bytes(k.slid),
        raw_traffic: k.raw_traffic as c_int,
        flow_label: u32::from_ne_bytes(k.flow_label),
        hop_limit: k.hop_limit,
        traffic_class: k.traffic_class,
        reversible: k.reversible as c_int,
        numb_path: k.numb_path,
        pkey: u16::from_ne_bytes(k.pkey),
        sl: k.sl,
        mtu_selector: k.mtu_selector,
        mtu: k.mtu as u8,
        rate_selector: k.rate_selector,
        rate: k.rate,
        packet_life_time_selector: k.packet_life_time_selector,
        packet_life_time: k.packet_life_time,
        preference: k.preference,
    };
    // SAFETY: [out] dst.
    unsafe { dst.write(o) };
}

symver!(ibv_copy_path_rec_to_kern => "IBVERBS_1.0");
/// `ibv_copy_path_rec_to_kern`: `ibv_sa_path_rec` to `struct ib_user_path_rec`, the inverse
/// of [`ibv_copy_path_rec_from_kern`].
///
/// # Safety
/// `dst` is writable, `src` readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut rverbs_cm::abi::ib_user_path_rec,
    src: *const ibv_sa_path_rec,
) {
    // SAFETY: [in] src (unaligned).
    let o = unsafe { src.read_unaligned() };
    let k = rverbs_cm::abi::ib_user_path_rec {
        dgid: o.dgid.raw,
        sgid: o.sgid.raw,
        // Big-endian on both sides: the bytes as they are.
        dlid: o.dlid.to_ne_bytes(),
        slid: o.slid.to_ne_bytes(),
        raw_traffic: o.raw_traffic as u32,
        flow_label: o.flow_label.to_ne_bytes(),
        reversible: o.reversible as u32,
        mtu: u32::from(o.mtu),
        pkey: o.pkey.to_ne_bytes(),
        hop_limit: o.hop_limit,
        traffic_class: o.traffic_class,
        numb_path: o.numb_path,
        sl: o.sl,
        mtu_selector: o.mtu_selector,
        rate_selector: o.rate_selector,
        rate: o.rate,
        packet_life_time_selector: o.packet_life_time_selector,
        packet_life_time: o.packet_life_time,
        preference: o.preference,
    };
    // SAFETY: [out] dst (unaligned).
    unsafe { dst.write_unaligned(k) };
}
