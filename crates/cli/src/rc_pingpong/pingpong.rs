//! The ping-pong itself: what each completion does (`parse_single_wc` of the C tool) and the
//! two ways of waiting for completions (spinning on the CQ, or sleeping on its channel).

use std::time::{Duration, Instant};

use rverbs::uverbs::cq::Cq;
use rverbs::uverbs::qp::Qp;
use rverbs::uverbs::{MrRecvWr, MrSendWr, RawWc};

use super::watchdog::{idle_message, Watchdog};
use super::{RECV_WRID, SEND_WRID};
use crate::CmdResult;

/// Polls between two looks at the clock (polling mode).
const SPINS_PER_CLOCK_CHECK: u64 = 1 << 14;

/// The ping-pong loop's state (`parse_single_wc` of the C tool).
pub(super) struct PingPong<'a> {
    pub(super) qp: &'a Qp,
    pub(super) recv_wrs: &'a [MrRecvWr<'a>],
    pub(super) send_wr: [MrSendWr<'a>; 1],
    pub(super) rx_depth: u32,
    pub(super) iters: u32,
    pub(super) routs: u32,
    pub(super) rcnt: u32,
    pub(super) scnt: u32,
    pub(super) pending: u64,
    /// Empty CQ polls before every send (RVERBS_PINGPONG_PAD).
    pub(super) pad: u32,
    /// Padding polls made so far.
    pub(super) padded: u64,
    pub(super) cq: &'a Cq,
}

/// What the wait loops counted, for RVERBS_PINGPONG_STATS (docs/perf.md uses them to
/// separate waiting from work in instruction counts).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LoopStats {
    /// CQ polls.
    pub(super) polls: u64,
    /// Completion events taken from the channel.
    pub(super) events: u64,
}

/// Polls the CQ `n` times, for the padding measurement: callgrind counts the instructions.
/// The CQ is empty when a send is due (both completions of the last exchange are taken, and
/// the peer sends only after this side's send), so a completion here breaks the protocol.
#[inline(never)]
fn pad(cq: &Cq, n: u32) -> CmdResult {
    let mut wc = [RawWc::default(); 1];
    for _ in 0..n {
        if cq.poll_raw(&mut wc) != 0 {
            return Err(format!(
                "RVERBS_PINGPONG_PAD: a padding poll found a completion (wr_id {})",
                wc[0].wr_id()
            )
            .into());
        }
    }
    Ok(())
}

impl PingPong<'_> {
    /// Posts up to `n` receives; returns how many went in.
    fn post_recvs(&self, n: u32) -> u32 {
        let list = &self.recv_wrs[..n as usize];
        match self.qp.post_recv(list) {
            Ok(()) => n,
            Err(e) => e.posted() as u32,
        }
    }

    pub(super) fn post_send(&mut self) -> CmdResult {
        if self.pad != 0 {
            pad(self.cq, self.pad)?;
            self.padded += u64::from(self.pad);
        }
        self.qp
            .post_send(&self.send_wr)
            .map_err(|e| format!("Couldn't post send: {e}").into())
    }

    /// Handles one completion, reading only its status and `wr_id` (the CQ is polled with
    /// `Cq::poll_raw`: nothing else of the entry is decoded).
    #[inline]
    fn completion(&mut self, wc: &RawWc) -> CmdResult {
        if !wc.is_success() {
            let status = wc.status();
            return Err(format!(
                "Failed status {} ({}) for wr_id {}",
                status,
                status.0,
                wc.wr_id()
            )
            .into());
        }
        let wr_id = wc.wr_id();
        match wr_id {
            SEND_WRID => self.scnt += 1,
            RECV_WRID => {
                self.routs -= 1;
                if self.routs <= 1 {
                    self.routs += self.post_recvs(self.rx_depth - self.routs);
                    if self.routs < self.rx_depth {
                        return Err(format!("Couldn't post receive ({})", self.routs).into());
                    }
                }
                self.rcnt += 1;
            }
            other => return Err(format!("Completion for unknown wr_id {other}").into()),
        }
        self.pending &= !wr_id;
        if self.scnt < self.iters && self.pending == 0 {
            self.post_send()?;
            self.pending = RECV_WRID | SEND_WRID;
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.rcnt >= self.iters && self.scnt >= self.iters
    }

    fn idle_error(&self, idle: Duration) -> Box<dyn std::error::Error> {
        idle_message(idle, self.scnt, self.rcnt, self.iters).into()
    }

    /// Posts the first `rx_depth` receives; fewer is an error.
    pub(super) fn post_initial_recvs(&mut self) -> CmdResult {
        self.routs = self.post_recvs(self.rx_depth);
        if self.routs < self.rx_depth {
            return Err(format!("Couldn't post receive ({})", self.routs).into());
        }
        Ok(())
    }

    /// Waits for the receive of the first message, and on the sending side (`first_send`,
    /// the client) posts that message.
    pub(super) fn start(&mut self, first_send: bool) -> CmdResult {
        self.pending = RECV_WRID;
        if first_send {
            self.post_send()?;
            self.pending |= SEND_WRID;
        }
        Ok(())
    }

    /// The `-e` loop: one read(2) per event, like the C tool; the watchdog bounds the wait.
    /// Sleep on the channel, take the event, acknowledge it, re-arm, then poll once, as
    /// ibv_rc_pingpong does.
    pub(super) fn run_events(
        &mut self,
        channel: &rverbs::uverbs::channel::CompChannel,
        idle: Duration,
    ) -> Result<LoopStats, Box<dyn std::error::Error>> {
        // Polled with `poll_raw`: completions are copied out undecoded and only their status
        // and wr_id read (the fastest path; `Cq::poll` would decode every field).
        let mut wc = [RawWc::default(); 2];
        let mut stats = LoopStats::default();
        let cq = self.cq;
        channel.set_blocking(true)?;
        let watchdog = Watchdog::start(self.iters, idle)?;
        while !self.done() {
            cq.wait_event()
                .map_err(|e| format!("Failed to get cq_event: {e}"))?;
            cq.ack_events(1);
            stats.events += 1;
            cq.req_notify(false)
                .map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
            let n = cq.poll_raw(&mut wc);
            stats.polls += 1;
            for w in &wc[..n] {
                self.completion(w)?;
            }
            watchdog.progress(self.scnt, self.rcnt);
        }
        drop(watchdog);
        Ok(stats)
    }

    /// The polling loop: spin on the CQ. After SPINS_PER_CLOCK_CHECK empty polls in a row,
    /// look back: no completion since the last look starts (or continues) the idle clock.
    pub(super) fn run_polling(
        &mut self,
        idle: Duration,
    ) -> Result<LoopStats, Box<dyn std::error::Error>> {
        // Polled with `poll_raw`, as in `run_events`.
        let mut wc = [RawWc::default(); 2];
        let mut stats = LoopStats::default();
        let cq: &Cq = self.cq;
        let mut progressed = true;
        let mut idle_since: Option<Instant> = None;
        while !self.done() {
            let n = 'spin: loop {
                for _ in 0..SPINS_PER_CLOCK_CHECK {
                    let n = cq.poll_raw(&mut wc);
                    stats.polls += 1;
                    if n != 0 {
                        break 'spin n;
                    }
                }
                if progressed {
                    progressed = false;
                    idle_since = None;
                } else {
                    let now = Instant::now();
                    match idle_since {
                        None => idle_since = Some(now),
                        Some(t) if now.duration_since(t) >= idle => {
                            return Err(self.idle_error(idle))
                        }
                        Some(_) => {}
                    }
                }
            };
            progressed = true;
            for w in &wc[..n] {
                self.completion(w)?;
            }
        }
        Ok(stats)
    }
}
