//! How a call waits: progress (the CQ and the channels), polling, arming and sleeping, and
//! `poll_ready`. See docs/perf.md ("Small messages") for what each costs.

use super::*;

/// How long a blocked call polls the CQ by default before it arms it and sleeps, in µs
/// (rsockets' `polling_time`, 10 µs by default); `RVERBS_STREAM_POLL_US` sets the process's
/// default (read once per process), [`RdmaStream::set_poll_time`] a stream's. A sweep from
/// 0 to 200 µs moved no median beyond the rounds' noise (docs/perf.md, "Small messages":
/// "The polling budget"), so it stays.
const SPIN_DEFAULT_US: u32 = 50;
/// The longest polling time [`RdmaStream::set_poll_time`] takes (and the environment's
/// default is cut to).
pub(super) const MAX_POLL: Duration = Duration::from_secs(1);
/// The rdma_cm channel is read (a system call) on every this many calls of `progress`
/// besides when a wait found it readable, so that a caller that loops on non-blocking calls
/// without waiting on the readiness fd still sees its peer disconnect.
const CM_EVERY: u32 = 16384;
/// A blocked call's polling reads the clock on every this many turns.
const SPIN_CLOCK_EVERY: u32 = 8;

/// What `progress` reads besides the CQ.
pub(super) type Ev = u8;
/// Read the completion channel until it is empty.
pub(super) const EV_COMP: Ev = 1;
/// Read one event from the completion channel (a wait found it readable).
pub(super) const EV_COMP_ONE: Ev = 2;
/// Read the rdma_cm channel's events.
pub(super) const EV_CM: Ev = 4;

/// The polling time of a new stream's blocked calls, in µs: `RVERBS_STREAM_POLL_US` (a
/// number of microseconds, at most [`MAX_POLL`]; anything else is ignored) or
/// `SPIN_DEFAULT_US`.
pub(super) fn default_poll_us() -> u32 {
    static US: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *US.get_or_init(|| {
        std::env::var("RVERBS_STREAM_POLL_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(SPIN_DEFAULT_US, |us| {
                us.min(MAX_POLL.as_micros() as u64) as u32
            })
    })
}

/// How a call waits.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode<'w> {
    /// Blocking: polls the CQ for a while, then sleeps.
    Block,
    /// Non-blocking, and a `WouldBlock` has armed the stream (its readiness fd becomes
    /// readable on progress) and left the waker for other handles' progress. The `Ev` says
    /// which channels to read first: both when the caller's readiness fd may have fired
    /// (the std API's non-blocking calls, whose callers wait on the fd level-triggered, so it
    /// must be quiet again before they wait), none when the caller knows it did not (the
    /// tokio layer, whose registration reports each new event as an edge): then a try
    /// costs no system call unless it arms.
    Arm(Option<&'w Waker>, Ev),
    /// Non-blocking without arming (rsockets' `MSG_DONTWAIT`): no system call unless
    /// something is to be read; `poll_ready` arms before a wait on the readiness fd.
    Try,
}

impl Mode<'_> {
    pub(super) fn of(nonblocking: bool) -> Mode<'static> {
        if nonblocking {
            Mode::Arm(None, EV_COMP | EV_CM)
        } else {
            Mode::Block
        }
    }

    /// The deadline of a call that may wait with `timeout` (only a blocking one waits: the
    /// others do not read the timeout, a lock).
    pub(super) fn deadline(&self, timeout: &Mutex<Option<Duration>>) -> Option<Instant> {
        match self {
            Mode::Block => lock(timeout).map(|t| Instant::now() + t),
            Mode::Arm(..) | Mode::Try => None,
        }
    }

    /// The tokio layer's try: `fd_ready` says whether its readiness fd fired since its last
    /// try (then both channels are read first, the completion channel for one event, else
    /// none).
    #[cfg(feature = "tokio")]
    pub(super) fn waking(waker: &Waker, fd_ready: bool) -> Mode<'_> {
        // One completion event at most, not on to `EAGAIN` (a system call per wake-up saved;
        // docs/perf.md, "Where a gRPC call over RDMA spends its system calls"). A second
        // event may be queued (rxe and siw show a completion before they queue its event, so
        // an old arm's late event can follow a re-arm); it loses nothing: every event gives
        // the registration a new edge, its completion is already visible to the CQ poll that
        // follows, reading it only clears `armed`, and `maybe_event` drains to `EAGAIN`.
        Mode::Arm(Some(waker), if fd_ready { EV_COMP_ONE | EV_CM } else { 0 })
    }

    pub(super) fn or_try(nonblocking: bool) -> Mode<'static> {
        if nonblocking {
            Mode::Try
        } else {
            Mode::Block
        }
    }
}

impl Inner {
    /// Processes what arrived: rdma_cm events, completion events, completions; reposts
    /// receives and sends a credit update when one is due.
    ///
    /// The channels are read (system calls) only as `ev` says — after a wait found them
    /// readable, before an arm when an event may be queued, or in `poll_ready` — and the
    /// rdma_cm channel on every `CM_EVERY`th call, so that a busy stream still sees its peer
    /// disconnect; the CQ itself is polled every time (no system call on rxe).
    ///
    /// Whatever it consumed (an event, a completion) may be what another waiter of the
    /// stream waits for, so it then wakes them all (`crate::wake`).
    pub(super) fn progress(&self, st: &mut State, ev: Ev) -> io::Result<()> {
        let mut moved = false;
        let r = self.progress_moved(st, ev, &mut moved);
        if moved {
            self.wake.progressed(&mut st.sleepers);
        }
        r
    }

    fn progress_moved(&self, st: &mut State, ev: Ev, moved: &mut bool) -> io::Result<()> {
        let c = &self.conn;
        st.calls = st.calls.wrapping_add(1);
        if ev & EV_CM != 0 || st.calls % CM_EVERY == 0 {
            while let Some(ev) = c.id.try_next_event()? {
                *moved = true;
                let k = ev.kind();
                if k == CmEventKind::DISCONNECTED || k == CmEventKind::DEVICE_REMOVAL {
                    st.l.peer_gone();
                }
            }
        }
        if ev & (EV_COMP | EV_COMP_ONE) != 0 {
            loop {
                if c.chan.try_get_event()?.is_none() {
                    st.maybe_event = false;
                    break;
                }
                *moved = true;
                c.cq.event_received();
                // Whichever arm this event is of, the CQ may be disarmed now.
                st.armed = false;
                st.maybe_event = false;
                st.unacked += 1;
                if st.unacked >= 64 {
                    c.cq.ack_events(st.unacked);
                    st.unacked = 0;
                }
                if ev & EV_COMP == 0 {
                    break;
                }
            }
        }
        let mut reposts = 0u32;
        loop {
            let n = c.cq.poll(&mut st.wcs);
            if n > 0 {
                *moved = true;
                if st.armed {
                    // The arm may have fired: its event is read before the next arm.
                    st.armed = false;
                    st.maybe_event = true;
                }
            }
            for wc in &st.wcs[..n] {
                if wc.wr_id & WR_ID_RECV != 0 {
                    if wc.status.is_success() {
                        reposts += 1;
                        let imm = wc
                            .wc_flags
                            .contains(WcFlags::WITH_IMM)
                            .then_some(wc.imm_data);
                        let tmr = &c.tmr;
                        st.l.on_recv(imm, wc.byte_len, |i| {
                            let mut b = [0u8; SGE_LEN];
                            tmr.read_at(i * SGE_LEN, &mut b);
                            RsSge::from_bytes(&b, HOST_IS_BIG_ENDIAN)
                        });
                    } else if wc.status != WcStatus::WR_FLUSH_ERR && st.l.connected {
                        st.l.peer_gone();
                    }
                } else {
                    st.l.on_send(wc.wr_id, wc.status.is_success(), &wc.status);
                }
            }
            if n < st.wcs.len() {
                break;
            }
        }
        if st.l.connected {
            for _ in 0..reposts {
                c.post_recv()?;
            }
        }
        self.send_due(st)
    }

    /// Sends what the ledger has due: our mappings' announcements and a credit update.
    pub(super) fn send_due(&self, st: &mut State) -> io::Result<()> {
        let c = &self.conn;
        // Our mappings' announcements, before any later data (`Ledger::can_send` waits for
        // them).
        while let Some((t, entry)) = st.l.next_announcement() {
            c.post_transfer(&t, &entry.to_bytes(st.l.peer_big_endian), true)?;
        }
        if st.l.credits_due() {
            let u = st.l.credit_update(c.rmr.addr(), c.rmr.rkey());
            match u.entry {
                Some((bytes, addr, key, slot)) => {
                    let (flags, off) = if st.l.sizes.inline as usize >= SGE_LEN {
                        (
                            SendFlags::INLINE,
                            st.l.sizes.sbuf as usize + slot as usize * SGE_LEN,
                        )
                    } else {
                        (
                            SendFlags::empty(),
                            st.l.sizes.sbuf as usize + slot as usize * SGE_LEN,
                        )
                    };
                    c.smr.write_at(off, &bytes);
                    c.post_write_imm(
                        u.imm as u64,
                        &[c.smr.sge(off..off + SGE_LEN)],
                        (addr, key),
                        u.imm,
                        flags,
                    )?;
                }
                None => c.post_write_imm(u.imm as u64, &[], (0, 0), u.imm, SendFlags::empty())?,
            }
        }
        Ok(())
    }

    /// Processes until `done(ledger)` holds or the deadline passes (`TimedOut`), or
    /// `WouldBlock` in a non-blocking `mode` (`Mode::Arm`: having armed the CQ, and
    /// registered the waker for the next progress of another handle). Blocking, it polls
    /// for a while, then sleeps on the stream's fds, or behind another thread that does
    /// (`crate::wake`).
    pub(super) fn wait_for<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        deadline: Option<Instant>,
        mode: Mode<'_>,
        done: impl Fn(&Ledger) -> bool,
    ) -> io::Result<MutexGuard<'a, State>> {
        // A caller of the readiness fd may have been woken by an event: read the channels it
        // names so that the fd is quiet again (level-triggered) before it re-arms.
        let mut ev = match mode {
            Mode::Arm(_, ev) => ev,
            Mode::Block | Mode::Try => 0,
        };
        // Only a blocking call polls before it sleeps: a non-blocking one returns
        // `WouldBlock` at once (on tokio, a spin would hold the runtime's thread; its task
        // is woken by the completion's event or another handle's progress instead).
        let mut spun = !matches!(mode, Mode::Block);
        loop {
            self.progress(&mut st, ev)?;
            ev = 0;
            if done(&st.l) {
                return Ok(st);
            }
            if let Mode::Try = mode {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if !spun {
                // As rsockets (its `polling_time`): poll a while before sleeping, with the
                // lock released in between so that the other direction can proceed. No
                // system call: the CQ is polled in userspace.
                // The clock is read on every `SPIN_CLOCK_EVERY`th turn only (a CQ poll that
                // finds nothing costs less than a clock read, and where the clock is a
                // system call — a guest without a stable TSC, as the bed's emulated one —
                // much less), and first at that turn: a reply caught in the first turns
                // reads no clock. So the budget counts from the first clock read; the turns
                // before it are part of any sleep's cost anyway.
                spun = true;
                let mut budget = Duration::from_micros(self.poll_us.load(Ordering::Relaxed) as u64);
                let mut t0 = None;
                let mut turns = 0u32;
                while !budget.is_zero() {
                    turns = turns.wrapping_add(1);
                    if turns % SPIN_CLOCK_EVERY == 0 {
                        match t0 {
                            None => {
                                let now = Instant::now();
                                // Never past the call's deadline: the timeout, not the
                                // budget, says when a blocked call gives up.
                                if let Some(d) = deadline {
                                    budget = budget.min(d.saturating_duration_since(now));
                                }
                                t0 = Some(now);
                            }
                            Some(t) if t.elapsed() >= budget => break,
                            Some(_) => {}
                        }
                    }
                    drop(st);
                    std::hint::spin_loop();
                    st = lock(&self.st);
                    self.progress(&mut st, 0)?;
                    if done(&st.l) {
                        return Ok(st);
                    }
                }
            }
            if !st.armed {
                if st.maybe_event {
                    // The last arm's event first (mlx5 counts the events read in its arm
                    // sequence number); what it finds is looked at before the arm.
                    ev = EV_COMP;
                    continue;
                }
                self.conn.cq.req_notify(false)?;
                st.armed = true;
                continue; // poll once more: a completion before the arm made no event
            }
            if let Mode::Arm(waker, _) = mode {
                if let Some(w) = waker {
                    self.wake.register(&mut st.sleepers, w);
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if let Some(d) = deadline {
                if Instant::now() >= d {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "stream timed out"));
                }
            }
            let ep = self.conn.epoll.as_fd();
            let (g, ready) = self.wake.sleep(
                &self.st,
                st,
                |s| &mut s.sleepers,
                |d| wait_ready(ep, d),
                deadline,
            )?;
            st = g;
            ev = ready.unwrap_or(0);
        }
    }

    pub(crate) fn poll_ready(&self, read: bool, write: bool) -> io::Result<Readiness> {
        fn look(l: &Ledger) -> Readiness {
            let error = l.fault.is_some();
            Readiness {
                readable: l.has_data() || !l.readable || error,
                writable: l.can_send_for(usize::MAX) || !l.writable || error,
                // Not while data is left to read: poll(2) callers such as rstream treat a
                // hangup as the end, and the peer's last data precedes its DISCONNECT.
                hangup: !l.connected && !l.has_data(),
                error,
            }
        }
        let mut st = lock(&self.st);
        self.progress(&mut st, EV_COMP | EV_CM)?;
        let mut r = look(&st.l);
        let ready = (read && r.readable) || (write && r.writable);
        if (read || write) && !ready && !st.armed {
            self.conn.cq.req_notify(false)?;
            st.armed = true;
            // A completion before the arm made no event: look once more.
            self.progress(&mut st, 0)?;
            r = look(&st.l);
        }
        Ok(r)
    }

    /// [`RdmaStream::bytes_readable`]: progress, then the bytes queued.
    pub(crate) fn bytes_readable(&self) -> io::Result<usize> {
        let mut st = lock(&self.st);
        self.progress(&mut st, EV_COMP | EV_CM)?;
        Ok(st.l.queued())
    }

    /// The wait of a write loop (`write`, `iowrite`) that has sent `written` bytes: until
    /// `ready`, the peer or a shutdown ends writing, or the stream fails. `Ok`: the lock, to
    /// go on; `Err`: what the call returns — the bytes written so far if any (a
    /// `WouldBlock`, a timeout, a fault or the end of writing after some bytes is a short
    /// write), else the error (`BrokenPipe` when writing has ended).
    pub(super) fn wait_to_write<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        deadline: Option<Instant>,
        mode: Mode<'_>,
        written: usize,
        ready: impl Fn(&Ledger) -> bool,
    ) -> Result<MutexGuard<'a, State>, io::Result<usize>> {
        let short = |e: io::Error| if written > 0 { Ok(written) } else { Err(e) };
        let st = match self.wait_for(st, deadline, mode, |l| {
            ready(l) || !l.writable || l.fault.is_some()
        }) {
            Ok(s) => s,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(short(e))
            }
            Err(e) => return Err(Err(e)),
        };
        if let Some(f) = &st.l.fault {
            return Err(short(Self::fault_error(f)));
        }
        if !st.l.writable {
            return Err(short(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the stream is shut down for writing or the peer disconnected",
            )));
        }
        Ok(st)
    }
}

/// Waits on the sleep epoll `ep` until one of its fds is readable or `deadline` passes;
/// returns the `EV_*` bits of the ready channels (0 for the eventfd or the deadline).
fn wait_ready(ep: BorrowedFd<'_>, deadline: Option<Instant>) -> Result<Ev, rustix::io::Errno> {
    let ts = deadline.map(|d| {
        let left = d.saturating_duration_since(Instant::now());
        rustix::time::Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        }
    });
    let mut evs = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 3];
    let (got, _) = epoll::wait(ep, &mut evs, ts.as_ref())?;
    let mut ev = 0;
    for e in got.iter() {
        // Copies: `Event` is packed.
        let (flags, data) = (e.flags, e.data);
        if flags.intersects(epoll::EventFlags::ERR) {
            return Err(rustix::io::Errno::IO);
        }
        ev |= data.u64() as Ev;
    }
    Ok(ev)
}
