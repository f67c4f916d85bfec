//! Zero-copy writes: [`RdmaStream::write_registered`] sends straight from the caller's
//! registration, skipping the send ring's copy.
//!
//! Why the caller cannot free or reuse the bytes before the device has read them: the call
//! takes the region by `&mut` (no other access to it, not even `Mr::write_at`, for as long as
//! the call runs) and returns only once every transfer it posted has completed — successfully,
//! with an error, or flushed. Nothing outlives the call (no guard to `forget`, no future to
//! drop: a blocking call only), so whatever way the call ends the device is done with the
//! region when the borrow ends. A peer that never acknowledges does not hold the call
//! forever: the WRITE's acknowledgement comes from the peer's device, not its application,
//! and a silent peer makes the transfer fail once RC's retries run out (an error completion,
//! which also ends the stream).

use std::ops::Range;

use rverbs_uverbs::mr::MrMemory;

use super::*;
use crate::ledger::WR_ID_REG;

impl RdmaStream {
    /// The protection domain of the stream's registrations: register the buffers for
    /// [`RdmaStream::write_registered`] on it (`Mr::register(stream.pd(), …)`).
    pub fn pd(&self) -> &Arc<rverbs_uverbs::pd::Pd> {
        &self.inner.conn.pd
    }

    /// Writes `range` of `mr` straight from the registration (no copy into the send ring):
    /// the same data messages as [`Write::write_all`]'s, so the peer (an `RdmaStream` or an
    /// rsocket) cannot tell. Blocking, whatever [`RdmaStream::set_nonblocking`] says; returns
    /// the bytes written — all of them, or fewer when the stream ended or timed out partway
    /// (`Err` if none) — once the device is done with every byte it was given, so that
    /// the region may be written or freed when the call returns. The write timeout bounds
    /// the wait for credits; the wait for the device's completions is bounded by the
    /// connection itself (RC's retries).
    ///
    /// `mr` must be registered on [`RdmaStream::pd`] (`InvalidInput` otherwise; any access
    /// flags: the device only reads it); `range` must lie inside it (`InvalidInput`).
    pub fn write_registered<M: MrMemory>(
        &self,
        mr: &mut Mr<M>,
        range: Range<usize>,
    ) -> io::Result<usize> {
        if !Arc::ptr_eq(mr.pd(), &self.inner.conn.pd) {
            return Err(invalid(
                "write_registered: the region is registered on another protection domain \
                 than the stream's (RdmaStream::pd)",
            ));
        }
        if range.start > range.end || range.end > mr.len() {
            return Err(invalid(format!(
                "write_registered: range {range:?} is not inside the region of {} bytes",
                mr.len()
            )));
        }
        self.inner.write_registered(mr, range)
    }
}

impl Inner {
    fn write_registered<M: MrMemory>(&self, mr: &Mr<M>, range: Range<usize>) -> io::Result<usize> {
        let total = range.len();
        if total == 0 {
            return Ok(0);
        }
        let deadline = Mode::Block.deadline(&self.write_timeout);
        let mut st = lock(&self.st);
        let mut written = 0usize;
        let mut end: Option<io::Result<usize>> = None;
        while written < total {
            st = match self.wait_to_write(st, deadline, Mode::Block, written, |l| {
                l.can_send_registered()
            }) {
                Ok(s) => s,
                Err(e) => {
                    end = Some(e);
                    st = lock(&self.st);
                    break;
                }
            };
            let t = st.l.plan_registered(total - written);
            let len = t.first.1 as usize;
            let at = range.start + written;
            let flags = if t.inline {
                SendFlags::INLINE
            } else {
                SendFlags::empty()
            };
            if let Err(e) = self.conn.post_write_imm(
                t.imm as u64 | WR_ID_REG,
                &[mr.sge(at..at + len)],
                t.remote,
                t.imm,
                flags,
            ) {
                // Not posted: it will not complete.
                st.l.reg_posted -= 1;
                end = Some(if written > 0 { Ok(written) } else { Err(e) });
                break;
            }
            written += len;
        }
        // The device must be done with `mr` before the borrow ends: wait for every transfer
        // posted so far (ours, and those posted before them) to complete, without a deadline.
        let target = st.l.reg_posted;
        drop(st);
        self.drain_registered(target);
        end.unwrap_or(Ok(written))
    }

    /// Waits until the `target`th transfer from a registration has completed. Completions
    /// come: a posted WRITE completes (or fails, when RC's retries run out), and a failed
    /// one flushes the rest.
    fn drain_registered(&self, target: u64) {
        loop {
            let st = lock(&self.st);
            match self.wait_for(st, None, Mode::Block, |l| l.reg_done >= target) {
                Ok(_) => return,
                Err(e) => {
                    // Progress failed (a system call): the stream cannot go on; put the QP
                    // in the error state so that whatever is posted is flushed, and keep
                    // polling for those completions.
                    tracing::debug!("write_registered: draining after {e}");
                    let _ = self.conn.qp.modify(&rverbs_uverbs::qp::QpAttr {
                        qp_state: Some(QpState::ERR),
                        ..Default::default()
                    });
                    std::thread::yield_now();
                }
            }
        }
    }
}
