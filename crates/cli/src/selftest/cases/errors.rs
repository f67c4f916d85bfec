//! The error cases: a wrong rkey or lkey, a QP in ERROR flushing its requests, and the iWARP
//! forms of the rkey and flush cases. Each checks the completion statuses the device
//! reports and the memory a refused request must leave untouched.

use super::*;

/// An RDMA WRITE with a wrong rkey (the key byte of B's changed): REM_ACCESS_ERR.
pub(super) fn err_rkey(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(
        env,
        end,
        PairOpts {
            fast_fail: true,
            ..PairOpts::of(QpType::RC)
        },
    )?;
    let s = [p.ma.sge(0..64)];
    let op = SendOp::RdmaWrite {
        remote_addr: p.mb.addr(),
        rkey: p.mb.rkey() ^ 0x80,
    };
    post_send(
        &p.a,
        SendWr {
            op,
            ..SendWr::send(9, &s)
        },
    )?;
    status_wc(
        &p.cq_a,
        end,
        9,
        WcStatus::REM_ACCESS_ERR,
        "the WRITE with a wrong rkey",
    )?;
    if p.mb.read_vec(0..64).iter().any(|&b| b != 0) {
        return Err("the WRITE with a wrong rkey changed the memory".into());
    }
    Ok(Outcome::Pass)
}

/// A SEND whose one SGE carries a wrong lkey (the key byte of A's region changed): it
/// completes with a local error and nothing reaches the peer. IBTA names the error
/// LOC_PROT_ERR; rxe of Linux 6.1 and siw, which find no region for the key, report
/// LOC_QP_OP_ERR; rxe of Linux 6.12 reports WR_FLUSH_ERR (its requester moves the QP to
/// ERROR for the bad request, and the flush that follows overwrites the request's status),
/// taken only with the QP then in ERROR, which a correct SEND would have left in RTS.
#[allow(unsafe_code)] // a wrong lkey exists only as a raw SGE
pub(super) fn err_lkey(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    let r = [p.mb.sge(0..64)];
    p.b.post_recv(&[RecvWr::new(70, &r)])
        .map_err(|e| e.to_string())?;
    p.ma.write_at(0, &pattern(10, 64));
    let bad = [Sge {
        addr: p.ma.addr(),
        length: 64,
        lkey: p.ma.lkey() ^ 0x80,
    }];
    let wr = SendWr::send(13, &bad);
    // SAFETY: the SGE lies inside A's region (its first 64 bytes), registered on the QP's PD
    // and alive until the QPs are destroyed (Pair's drop order); only its key is wrong, so
    // the device refuses to read it. post_send_raw's contract asks no more.
    unsafe { p.a.post_send_raw(&[wr]) }.map_err(|e| e.to_string())?;
    let wc = wait_wc(&p.cq_a, end, "the SEND with a wrong lkey")?;
    let local = [WcStatus::LOC_PROT_ERR, WcStatus::LOC_QP_OP_ERR].contains(&wc.status);
    let flushed_in_error = wc.status == WcStatus::WR_FLUSH_ERR
        && p.a.query().map(|q| q.state).ok() == Some(QpState::ERR);
    if wc.wr_id != 13 || !(local || flushed_in_error) {
        return Err(format!(
            "the SEND with a wrong lkey: completion of wr_id {} with status {} ({}), expected \
             wr_id 13 with local protection error or local QP operation error (or flushed, \
             the QP in ERROR)",
            wc.wr_id, wc.status, wc.status.0
        ));
    }
    // Nothing was sent: the peer's receive did not complete with data (on iWARP the
    // requester ends the connection, which flushes it).
    if let Some(wc) = p.cq_b.poll_one() {
        if wc.status == WcStatus::SUCCESS {
            return Err(format!(
                "the peer received {} bytes of a SEND with a wrong lkey",
                wc.byte_len
            ));
        }
    }
    if p.mb.read_vec(0..64).iter().any(|&b| b != 0) {
        return Err("the SEND with a wrong lkey wrote the peer's memory".into());
    }
    Ok(Outcome::Pass)
}

/// Receives posted before, and a send posted after, the QP moves to ERROR: all flushed.
pub(super) fn err_flush(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    let (r0, r1) = ([p.mb.sge(0..64)], [p.mb.sge(64..128)]);
    p.b.post_recv(&[RecvWr::new(50, &r0), RecvWr::new(51, &r1)])
        .map_err(|e| e.to_string())?;
    let to_err = QpAttr {
        qp_state: Some(QpState::ERR),
        ..Default::default()
    };
    p.b.modify(&to_err).map_err(ctx("move the QP to ERROR"))?;
    for id in [50, 51] {
        status_wc(
            &p.cq_b,
            end,
            id,
            WcStatus::WR_FLUSH_ERR,
            "a receive of a QP in ERROR",
        )?;
    }
    p.a.modify(&to_err).map_err(ctx("move the QP to ERROR"))?;
    let s = [p.ma.sge(0..8)];
    post_send(&p.a, SendWr::send(52, &s))?;
    status_wc(
        &p.cq_a,
        end,
        52,
        WcStatus::WR_FLUSH_ERR,
        "a SEND posted in ERROR",
    )?;
    Ok(Outcome::Pass)
}

/// iWARP's wrong rkey (steering tag), which the responder answers by terminating the
/// connection (RDMAP's TERMINATE), not with a NAK:
///
/// - an RDMA WRITE: its completion at the requester says nothing (iWARP completes a WRITE
///   once sent: SUCCESS, or REM_ACCESS_ERR where the device waits, or LOC_QP_OP_ERR where
///   the connection ended while the WRITE was being sent: siw as the kernels ship it
///   (`siw_qp_sq_proc_tx`) fails a WQE with `-ECONNABORTED` when `tx_suspend` is set after
///   one of its segments went out, the last one too, and `siw_qp_sq_process` completes it
///   with `SIW_WC_LOC_QP_OP_ERR`; the responder's TERMINATE sets `tx_suspend`
///   (`siw_qp_cm_drop` from the receive path), here while the post's own system call is
///   still sending. Traced on 7.3.4: `wr type 0, ... data 64`, the responder's `init TERM`
///   and `sent TERM`, the requester's `got TERMINATE`, then `wqe type 0 processing failed:
///   -103` (docs/testing.md, "What else failed on 7.3.4"); the test bed's siw has that fixed
///   (`siw-tx-last-segment-2`) and completes the WRITE with SUCCESS. Only a WQE that
///   `siw_tx_hdt` sends (more than 32 bytes or more than one SGE: this WRITE's 64) can fail
///   so; a short one goes out through `siw_tx_ctrl`, which has no such test. A local
///   failure of the send itself is `rc-error-lkey`'s case); the responder's memory is untouched and its
///   posted receive is flushed (WR_FLUSH_ERR: it put its QP in ERROR), and so is the
///   requester's as the connection ends;
/// - an RDMA READ, on a second connection: its completion is an error (REM_ACCESS_ERR, or
///   WR_FLUSH_ERR where the device flushes the READ as the connection ends: siw), and its sink
///   is untouched.
pub(super) fn err_rkey_iwarp(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    let (rb, ra) = ([p.mb.sge(8192..8256)], [p.ma.sge(8192..8256)]);
    p.b.post_recv(&[RecvWr::new(90, &rb)])
        .map_err(|e| e.to_string())?;
    p.a.post_recv(&[RecvWr::new(91, &ra)])
        .map_err(|e| e.to_string())?;
    p.ma.write_at(0, &pattern(6, 64));
    let s = [p.ma.sge(0..64)];
    let op = SendOp::RdmaWrite {
        remote_addr: p.mb.addr(),
        rkey: p.mb.rkey() ^ 0x80,
    };
    post_send(
        &p.a,
        SendWr {
            op,
            ..SendWr::send(9, &s)
        },
    )?;
    let wc = wait_wc(&p.cq_a, end, "the WRITE with a wrong rkey")?;
    let sent = [
        WcStatus::SUCCESS,
        WcStatus::REM_ACCESS_ERR,
        WcStatus::LOC_QP_OP_ERR,
    ];
    if wc.wr_id != 9 || !sent.contains(&wc.status) {
        return Err(format!(
            "the WRITE with a wrong rkey: completion of wr_id {} with status {} ({}), expected \
             wr_id 9 with success (sent), remote access error or local QP operation error \
             (the connection ended while it was sent)",
            wc.wr_id, wc.status, wc.status.0
        ));
    }
    status_wc(
        &p.cq_b,
        end,
        90,
        WcStatus::WR_FLUSH_ERR,
        "the receive of the QP that got the WRITE with a wrong rkey",
    )?;
    status_wc(
        &p.cq_a,
        end,
        91,
        WcStatus::WR_FLUSH_ERR,
        "the receive of the QP that sent the WRITE with a wrong rkey",
    )?;
    if p.mb.read_vec(0..64).iter().any(|&b| b != 0) {
        return Err("the WRITE with a wrong rkey changed the memory".into());
    }
    drop(p);

    // The READ, on a connection of its own (the first one is gone).
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    p.mb.write_at(0, &pattern(6, 64));
    let s = [p.ma.sge(0..64)];
    let op = SendOp::RdmaRead {
        remote_addr: p.mb.addr(),
        rkey: p.mb.rkey() ^ 0x80,
    };
    post_send(
        &p.a,
        SendWr {
            op,
            ..SendWr::send(10, &s)
        },
    )?;
    let wc = wait_wc(&p.cq_a, end, "the READ with a wrong rkey")?;
    if wc.wr_id != 10 || ![WcStatus::REM_ACCESS_ERR, WcStatus::WR_FLUSH_ERR].contains(&wc.status) {
        return Err(format!(
            "the READ with a wrong rkey: completion of wr_id {} with status {} ({}), expected \
             wr_id 10 with remote access error or (the connection terminated) flushed",
            wc.wr_id, wc.status, wc.status.0
        ));
    }
    if p.ma.read_vec(0..64).iter().any(|&b| b != 0) {
        return Err("the READ with a wrong rkey wrote its sink".into());
    }
    Ok(Outcome::Pass)
}

/// iWARP's flush: receives posted before the QP moves to ERROR complete with WR_FLUSH_ERR,
/// and so does the peer's posted receive, since an iWARP QP in ERROR ends the connection. (A
/// SEND posted to a QP already in ERROR is not tried: siw leaves it in the user-mapped send
/// queue without a completion.)
pub(super) fn err_flush_iwarp(env: &Env, end: Instant) -> CaseResult {
    let p = Pair::new(env, end, PairOpts::of(QpType::RC))?;
    let (r0, r1, ra) = ([p.mb.sge(0..64)], [p.mb.sge(64..128)], [p.ma.sge(0..64)]);
    p.b.post_recv(&[RecvWr::new(50, &r0), RecvWr::new(51, &r1)])
        .map_err(|e| e.to_string())?;
    p.a.post_recv(&[RecvWr::new(53, &ra)])
        .map_err(|e| e.to_string())?;
    let to_err = QpAttr {
        qp_state: Some(QpState::ERR),
        ..Default::default()
    };
    p.b.modify(&to_err).map_err(ctx("move the QP to ERROR"))?;
    for id in [50, 51] {
        status_wc(
            &p.cq_b,
            end,
            id,
            WcStatus::WR_FLUSH_ERR,
            "a receive of a QP in ERROR",
        )?;
    }
    status_wc(
        &p.cq_a,
        end,
        53,
        WcStatus::WR_FLUSH_ERR,
        "a receive of the peer of a QP in ERROR (the connection ended)",
    )?;
    Ok(Outcome::Pass)
}
