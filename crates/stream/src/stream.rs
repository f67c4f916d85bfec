//! `RdmaStream` and `RdmaListener`: the verbs side of the protocol in [`crate::ledger`].

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::{Duration, Instant};

use rustix::event::epoll;
use rverbs_cm::default_pd;
use rverbs_cm::{CmEventKind, CmId, ConnParam, PortSpace};
use rverbs_uverbs::channel::CompChannel;
use rverbs_uverbs::cq::{Cq, CqOptions};
use rverbs_uverbs::mr::{AccessFlags, Mr};
use rverbs_uverbs::qp::{Qp, QpCaps, QpInit, QpState, QpType};
use rverbs_uverbs::{MrSge, RecvWr, SendFlags, SendOp, SendWr, WcFlags, WcStatus, WorkCompletion};

use crate::ledger::{Fault, Ledger, Sizes, WR_ID_RECV};
use crate::wake::{Sleepers, Wake};
mod io_impls;
mod iomap;
mod listener;
mod options;
pub use iomap::{IoMap, RawIoMap};
pub use listener::RdmaListener;
pub use options::StreamOptions;

use crate::wire::{
    iomap_size_from_wire, iomap_size_to_wire, ConnData, Ctrl, RsSge, FLAG_IOMAP, FLAG_NET,
    HOST_IS_BIG_ENDIAN, IOMAP_ENTRY_LEN, MAX_IOMAP_ENTRIES, SGE_LEN, SGL_ENTRIES, VERSION,
};

/// Address and route resolution time limit of [`RdmaStream::connect`].
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long dropping a stream waits for its last sends (and its DISCONNECT) to complete.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// How long a blocked call polls the CQ (yielding the CPU in between) before it arms it and
/// sleeps (rsockets polls 10 µs). Longer spins took CPU from the peer in the emulated test
/// guests: 1 ms halved the 64-byte round trip there but made 64 KiB ones 3 times slower.
const SPIN: Duration = Duration::from_micros(50);

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

fn os(op: &str, e: rustix::io::Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("{op}: {e}"))
}

/// The verbs objects of one connection. Field order is drop order: the QP before the
/// regions and the CQ, the rdma_cm id last.
struct Conn {
    qp: Arc<Qp>,
    cq: Arc<Cq>,
    chan: Arc<CompChannel>,
    /// Send ring plus 4 control slots of one target SGL entry each.
    smr: Mr<Vec<u8>>,
    /// Our target SGL, then our iomap table: the peer writes its receive buffers' and its
    /// mappings' descriptions here.
    tmr: Mr<Vec<u8>>,
    /// Receive ring: the peer RDMA-WRITEs data here.
    rmr: Mr<Vec<u8>>,
    epoll: OwnedFd,
    /// The protection domain of the regions (iomap registrations too).
    pd: Arc<rverbs_uverbs::pd::Pd>,
    id: CmId,
}

impl Conn {
    /// QP, CQ, channel and the three registrations on `id` (bound or resolved), the QP in
    /// INIT with its receives posted.
    fn create(id: CmId, opts: &StreamOptions) -> io::Result<(Conn, Sizes)> {
        opts.check()?;
        let pd = default_pd(&id)?;
        let ctx = pd.context().clone();
        let chan = CompChannel::create(&ctx)?;
        chan.set_blocking(false)?;
        let cq = Cq::create(
            &ctx,
            opts.send_queue + opts.recv_queue,
            CqOptions {
                channel: Some(chan.clone()),
                comp_vector: 0,
            },
        )?;
        let qp = Qp::create(
            &pd,
            QpInit {
                qp_type: QpType::RC,
                send_cq: cq.clone(),
                recv_cq: cq.clone(),
                srq: None,
                caps: QpCaps {
                    max_send_wr: opts.send_queue,
                    max_recv_wr: opts.recv_queue,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: opts.inline,
                },
                sq_sig_all: true,
            },
        )?;
        qp.modify(&id.init_qp_attr(QpState::INIT)?)?;
        let caps = qp.caps();
        let ctrl_area = crate::ledger::CTRL_SLOTS as usize * SGE_LEN;
        let smr = Mr::register(
            &pd,
            vec![0u8; opts.send_buffer as usize + ctrl_area],
            AccessFlags::LOCAL_WRITE,
        )
        .map_err(io::Error::from)?;
        let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let iomap = iomap_size_from_wire(iomap_size_to_wire(opts.iomap_entries));
        let tmr = Mr::register(
            &pd,
            vec![0u8; SGL_ENTRIES as usize * SGE_LEN + iomap as usize * IOMAP_ENTRY_LEN],
            remote,
        )
        .map_err(io::Error::from)?;
        let rmr = Mr::register(&pd, vec![0u8; opts.recv_buffer as usize], remote)
            .map_err(io::Error::from)?;
        let epoll =
            epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| os("epoll_create", e))?;
        for (fd, tag) in [(chan.as_fd(), 0u64), (id.channel_fd(), 1)] {
            epoll::add(
                &epoll,
                fd,
                epoll::EventData::new_u64(tag),
                epoll::EventFlags::IN,
            )
            .map_err(|e| os("epoll_ctl ADD", e))?;
        }
        let conn = Conn {
            qp,
            cq,
            chan,
            smr,
            tmr,
            rmr,
            epoll,
            pd,
            id,
        };
        for _ in 0..caps.max_recv_wr.min(opts.recv_queue) {
            conn.post_recv()?;
        }
        let sizes = Sizes {
            sbuf: opts.send_buffer,
            rbuf: opts.recv_buffer,
            sq: caps.max_send_wr.min(opts.send_queue),
            rq: caps.max_recv_wr.min(opts.recv_queue),
            inline: caps.max_inline_data.min(opts.inline),
            iomap,
        };
        Ok((conn, sizes))
    }

    fn post_recv(&self) -> io::Result<()> {
        let none: &[MrSge<'_>] = &[];
        self.qp
            .post_recv(&[RecvWr {
                wr_id: WR_ID_RECV,
                sge: none,
            }])
            .map_err(io::Error::from)
    }

    /// Our connection data: version 1, our byte order, the iomap flag (as every rsocket
    /// sends it) and our table's size, `rq` credits, the target SGL and the receive ring's
    /// first half.
    fn conn_data(&self, sizes: &Sizes) -> ConnData {
        ConnData {
            version: VERSION,
            flags: FLAG_IOMAP | if HOST_IS_BIG_ENDIAN { FLAG_NET } else { 0 },
            credits: sizes.rq as u16,
            target_iomap_size: iomap_size_to_wire(sizes.iomap),
            target_sgl: RsSge {
                addr: self.tmr.addr(),
                key: self.tmr.rkey(),
                length: SGL_ENTRIES,
            },
            data_buf: RsSge {
                addr: self.rmr.addr(),
                key: self.rmr.rkey(),
                length: sizes.rbuf / 2,
            },
        }
    }

    fn to_rts(&self) -> io::Result<()> {
        for st in [QpState::INIT, QpState::RTR, QpState::RTS] {
            self.qp.modify(&self.id.init_qp_attr(st)?)?;
        }
        Ok(())
    }

    fn post_write_imm(
        &self,
        wr_id: u64,
        sge: &[MrSge<'_>],
        remote: (u64, u32),
        imm: u32,
        flags: SendFlags,
    ) -> io::Result<()> {
        self.qp
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::RdmaWriteWithImm {
                    remote_addr: remote.0,
                    rkey: remote.1,
                    imm,
                },
                sge,
                flags,
                ud: None,
            }])
            .map_err(io::Error::from)
    }
}

/// The shared state of a stream and its clones.
pub(crate) struct Inner {
    st: Mutex<State>,
    conn: Conn,
    nonblocking: AtomicBool,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
    /// Wakes the other waiters when one thread's progress may concern them.
    wake: Wake,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
}

struct State {
    l: Ledger,
    /// The CQ is armed and no event for it was read since.
    armed: bool,
    unacked: u32,
    /// Calls of `progress` (the fds are read on every 64th).
    calls: u32,
    /// Who waits (see `crate::wake`).
    sleepers: Sleepers,
}

/// A byte stream over an RDMA RC connection that speaks rsockets' protocol: an
/// [`RdmaStream`] talks to librdmacm's `rsocket` programs (`rstream`, `riostream`) and to
/// other `RdmaStream`s.
///
/// Data is copied once, from the caller's buffers into a registered send ring (with
/// `rverbs_uverbs::shared`'s copies), written by RDMA WRITE with immediate straight into the
/// peer's registered receive ring, and copied once out of ours. Rings are registered once,
/// at connect or accept; nothing is allocated per message.
///
/// Handles made by [`RdmaStream::try_clone`] share the stream (as `TcpStream`'s do): one
/// thread may read while another writes. The connection ends when the last handle is
/// dropped: a DISCONNECT message, up to a second for the last sends, then the rdma_cm
/// disconnect.
///
/// # Readiness ([`AsFd`])
///
/// The fd is an epoll fd over the stream's completion channel and its rdma_cm channel. With
/// [`RdmaStream::set_nonblocking`], a `read` or `write` that returns `WouldBlock` has armed
/// the stream so that the fd becomes readable when progress may be possible (a completion
/// or an rdma_cm event); then call it again. A readable fd does not promise that the next
/// call succeeds — it may return `WouldBlock` again and re-arm.
///
/// # Errors
///
/// A peer that breaks the protocol (a data message longer than the space published to it,
/// more messages than its credits, a reserved message type) ends the stream: reads and
/// writes return `InvalidData` naming the fault. A failed RDMA WRITE ends it with the
/// completion status. A peer that disconnects or dies: reads return what was received,
/// then 0; writes return `BrokenPipe`.
#[derive(Clone)]
pub struct RdmaStream {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaStream")
            .field("local", &self.inner.local)
            .field("peer", &self.inner.peer)
            .field("qp_num", &self.inner.conn.qp.qp_num())
            .finish_non_exhaustive()
    }
}

fn addrs(id: &CmId) -> (Option<SocketAddr>, Option<SocketAddr>) {
    match id.query_addr() {
        Ok(q) => (q.src.ip(), q.dst.ip()),
        Err(_) => (None, None),
    }
}

impl RdmaStream {
    /// Connects to an rsockets listener (an [`RdmaListener`], or `rstream -b`, `rsocket`'s
    /// `rlisten`) at `addr` with the default [`StreamOptions`].
    pub fn connect(addr: SocketAddr) -> io::Result<RdmaStream> {
        Self::connect_with(addr, &StreamOptions::default())
    }

    /// [`RdmaStream::connect`] with `opts`. Fails if nobody listens (the rdma_cm's
    /// rejection or unreachable event), or if the peer answers with connection data we do
    /// not speak (another version: `InvalidData` naming it).
    pub fn connect_with(addr: SocketAddr, opts: &StreamOptions) -> io::Result<RdmaStream> {
        Self::connect_from(None, addr, opts)
    }

    /// [`RdmaStream::connect_with`] from the local address `src` (an address of the RDMA
    /// device to use, port 0 or a free port), as a socket bound before `connect`.
    pub fn connect_from(
        src: Option<SocketAddr>,
        addr: SocketAddr,
        opts: &StreamOptions,
    ) -> io::Result<RdmaStream> {
        opts.check()?;
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("connect to {addr}: {e}"));
        let id = CmId::create(None, PortSpace::TCP).map_err(ctx)?;
        id.resolve_addr(src, addr, RESOLVE_TIMEOUT).map_err(ctx)?;
        id.resolve_route(RESOLVE_TIMEOUT).map_err(ctx)?;
        let (conn, sizes) = Conn::create(id, opts).map_err(ctx)?;
        let param = ConnParam {
            private_data: conn.conn_data(&sizes).to_bytes().to_vec(),
            flow_control: true,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: conn.qp.qp_num(),
            ..ConnParam::default()
        };
        let mut peer = None;
        conn.id
            .connect_with(&param, |_, ev| {
                let c = ConnData::parse(ev.private_data()).map_err(|e| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the listener's reply: {e}"),
                    )
                })?;
                peer = Some(c);
                conn.to_rts()
            })
            .map_err(ctx)?;
        let peer = peer.ok_or_else(|| ctx(io::Error::other("no connection reply")))?;
        Self::from_conn(conn, sizes, &peer).map_err(ctx)
    }

    fn from_conn(conn: Conn, sizes: Sizes, peer: &ConnData) -> io::Result<RdmaStream> {
        let (local, peer_addr) = addrs(&conn.id);
        Ok(RdmaStream {
            inner: Arc::new(Inner {
                st: Mutex::new(State {
                    l: Ledger::new(sizes, peer),
                    armed: false,
                    unacked: 0,
                    calls: 0,
                    sleepers: Sleepers::default(),
                }),
                conn,
                nonblocking: AtomicBool::new(false),
                read_timeout: Mutex::new(None),
                write_timeout: Mutex::new(None),
                wake: Wake::new()?,
                local,
                peer: peer_addr,
            }),
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner
            .peer
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no peer IP address"))
    }

    /// Our address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner
            .local
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no local IP address"))
    }

    /// Another handle to the same stream (shares its state; cannot fail).
    pub fn try_clone(&self) -> io::Result<RdmaStream> {
        Ok(self.clone())
    }

    /// Non-blocking mode: `read`/`write` return `WouldBlock` instead of waiting (see
    /// "Readiness").
    pub fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        self.inner.nonblocking.store(nonblocking, Ordering::Relaxed);
        Ok(())
    }

    /// Bounds how long a `read` waits (`None`: forever); on expiry it fails with
    /// `TimedOut`. A zero duration is refused, as by `TcpStream`.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        *lock(&self.inner.read_timeout) = t;
        Ok(())
    }

    /// Bounds how long a `write` waits for credits or ring space.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        *lock(&self.inner.write_timeout) = t;
        Ok(())
    }

    /// The read timeout.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(*lock(&self.inner.read_timeout))
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(*lock(&self.inner.write_timeout))
    }

    /// rsockets' `rshutdown`: `Write` sends SHUTDOWN (the peer reads EOF after our data),
    /// `Read` makes our reads return 0, `Both` (or the second half) sends DISCONNECT. Waits
    /// up to a second for the sends posted so far to complete (not an error if they have not:
    /// a closing peer may leave the last write retrying). Fails if no control message slot
    /// frees up within a second while the peer is still connected.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }

    /// `read_vectored` in non-blocking mode (`nonblocking`: rsockets' `MSG_DONTWAIT`) or
    /// blocking, for this call only, whatever [`RdmaStream::set_nonblocking`] says.
    pub fn recv_vectored(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        nonblocking: bool,
    ) -> io::Result<usize> {
        self.inner.read_with(bufs, nonblocking)
    }

    /// `write_vectored` in non-blocking mode or blocking, for this call only (see
    /// [`RdmaStream::recv_vectored`]). Blocking, it returns once every byte is posted.
    pub fn send_vectored(&self, bufs: &[IoSlice<'_>], nonblocking: bool) -> io::Result<usize> {
        self.inner.write_with(bufs, nonblocking)
    }

    /// What a `read` or `write` would find now, for `poll(2)`-style callers (rsockets'
    /// `rpoll`): processes what arrived and, if neither direction asked for (`read`,
    /// `write`) is ready, arms the stream so that its readiness fd ([`AsFd`]) becomes readable
    /// when that may have changed. Then poll the fd and call this again.
    pub fn poll_ready(&self, read: bool, write: bool) -> io::Result<Readiness> {
        self.inner.poll_ready(read, write)
    }
}

/// What [`RdmaStream::poll_ready`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A `read` would not block: data, end of stream (the peer shut down or disconnected, or
    /// our read half is shut down), or an error.
    pub readable: bool,
    /// A `write` would not block: credits and ring space (while earlier transfers are in
    /// flight, room for the next transfer: up to 64 KiB, at most half the send ring), or an
    /// error it would return.
    pub writable: bool,
    /// The connection is over (the peer disconnected or we sent our DISCONNECT) and no
    /// received data is left to read.
    pub hangup: bool,
    /// The stream ended with an error (a protocol fault or a failed transfer).
    pub error: bool,
}

impl Inner {
    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let mut st = lock(&self.st);
        if !st.l.connected {
            st.l.readable &= !matches!(how, Shutdown::Read | Shutdown::Both);
            self.wake.progressed(&mut st.sleepers);
            return Ok(());
        }
        let ctrl = match how {
            Shutdown::Both => {
                st.l.readable = false;
                st.l.writable = false;
                Some(Ctrl::DISCONNECT)
            }
            Shutdown::Write => {
                st.l.writable = false;
                Some(if st.l.readable {
                    Ctrl::SHUTDOWN
                } else {
                    Ctrl::DISCONNECT
                })
            }
            Shutdown::Read => {
                st.l.readable = false;
                if st.l.writable {
                    None
                } else {
                    Some(Ctrl::DISCONNECT)
                }
            }
        };
        // A thread blocked in `read` or `write` returns now.
        self.wake.progressed(&mut st.sleepers);
        if let Some(c) = ctrl {
            let deadline = Some(Instant::now() + CLOSE_WAIT);
            st = self.wait_for(st, deadline, None, |l| l.can_send_ctrl() || !l.connected)?;
            if st.l.connected {
                let imm = st.l.ctrl_message(c);
                self.conn
                    .post_write_imm(imm as u64, &[], (0, 0), imm, SendFlags::empty())?;
                if c == Ctrl::DISCONNECT {
                    st.l.connected = false;
                }
            }
            // Best effort, as rsockets' rshutdown: what is posted is delivered by RC or the
            // connection fails; a peer that is closing too may leave our last write retrying.
            let deadline = Some(Instant::now() + CLOSE_WAIT);
            match self.wait_for(st, deadline, None, |l| l.all_sends_done()) {
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                r => drop(r?),
            }
        }
        Ok(())
    }

    /// Processes what arrived: rdma_cm events, completion events, completions; reposts
    /// receives and sends a credit update when one is due.
    ///
    /// The fds are read (system calls) only when `events` is set — after a wait on the
    /// readiness fd, or when a call starts with the CQ armed — and on every 64th call, so
    /// that a busy stream still sees its peer disconnect; the CQ itself is polled every time
    /// (no system call on rxe).
    ///
    /// Whatever it consumed (an event, a completion) may be what another waiter of the
    /// stream waits for, so it then wakes them all (`crate::wake`).
    fn progress(&self, st: &mut State, events: bool) -> io::Result<()> {
        let mut moved = false;
        let r = self.progress_moved(st, events, &mut moved);
        if moved {
            self.wake.progressed(&mut st.sleepers);
        }
        r
    }

    fn progress_moved(&self, st: &mut State, events: bool, moved: &mut bool) -> io::Result<()> {
        let c = &self.conn;
        st.calls = st.calls.wrapping_add(1);
        if events || st.calls % 64 == 0 {
            while let Some(ev) = c.id.try_next_event()? {
                *moved = true;
                let k = ev.kind();
                if k == CmEventKind::DISCONNECTED || k == CmEventKind::DEVICE_REMOVAL {
                    st.l.peer_gone();
                }
            }
            while c.chan.try_get_event()?.is_some() {
                *moved = true;
                c.cq.event_received();
                st.armed = false;
                st.unacked += 1;
                if st.unacked >= 64 {
                    c.cq.ack_events(st.unacked);
                    st.unacked = 0;
                }
            }
        }
        let mut reposts = 0u32;
        let mut wcs = [WorkCompletion::default(); 16];
        loop {
            let n = c.cq.poll(&mut wcs);
            *moved |= n > 0;
            for wc in &wcs[..n] {
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
            if n < wcs.len() {
                break;
            }
        }
        if st.l.connected {
            for _ in 0..reposts {
                c.post_recv()?;
            }
        }
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
    /// `WouldBlock` in non-blocking mode (having armed the CQ, and registered `waker` for the
    /// next progress of another handle). Blocking, it sleeps on the readiness fd, or behind
    /// another thread that does (`crate::wake`).
    fn wait_for<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        deadline: Option<Instant>,
        nonblocking: Option<Option<&Waker>>,
        done: impl Fn(&Ledger) -> bool,
    ) -> io::Result<MutexGuard<'a, State>> {
        let mut events = nonblocking.is_some() || st.armed;
        let mut spun = false;
        loop {
            self.progress(&mut st, events)?;
            events = false;
            if done(&st.l) {
                return Ok(st);
            }
            if !spun {
                // As rsockets (its `polling_time`): poll a little before sleeping, with the
                // lock released in between so that the other direction can proceed.
                spun = true;
                let t0 = Instant::now();
                while t0.elapsed() < SPIN {
                    drop(st);
                    std::thread::yield_now();
                    st = lock(&self.st);
                    self.progress(&mut st, false)?;
                    if done(&st.l) {
                        return Ok(st);
                    }
                }
            }
            if !st.armed {
                self.conn.cq.req_notify(false)?;
                st.armed = true;
                continue; // poll once more: a completion before the arm made no event
            }
            if let Some(waker) = nonblocking {
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
            let (g, led) = self.wake.sleep(
                &self.st,
                st,
                |s| &mut s.sleepers,
                self.conn.epoll.as_fd(),
                deadline,
            )?;
            st = g;
            events = led;
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
        self.progress(&mut st, true)?;
        let mut r = look(&st.l);
        let ready = (read && r.readable) || (write && r.writable);
        if (read || write) && !ready && !st.armed {
            self.conn.cq.req_notify(false)?;
            st.armed = true;
            // A completion before the arm made no event: look once more.
            self.progress(&mut st, false)?;
            r = look(&st.l);
        }
        Ok(r)
    }

    fn fault_error(f: &Fault) -> io::Error {
        match f {
            Fault::Wire(w) => {
                io::Error::new(io::ErrorKind::InvalidData, format!("rsockets peer: {w}"))
            }
            Fault::Io(s) => io::Error::other(s.clone()),
        }
    }

    fn read_into(&self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        self.read_with(bufs, self.nonblocking.load(Ordering::Relaxed))
    }

    fn write_from(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_with(bufs, self.nonblocking.load(Ordering::Relaxed))
    }

    /// `read` in blocking or non-blocking mode (`nb`), whatever the stream's flag.
    pub(crate) fn read_with(&self, bufs: &mut [IoSliceMut<'_>], nb: bool) -> io::Result<usize> {
        self.read_mode(bufs, nb.then_some(None))
    }

    /// Non-blocking `read`; on `WouldBlock`, `waker` is woken by the next progress another
    /// handle makes.
    #[cfg(feature = "tokio")]
    pub(crate) fn read_waking(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        waker: &Waker,
    ) -> io::Result<usize> {
        self.read_mode(bufs, Some(Some(waker)))
    }

    /// `read`: blocking (`None`) or not (with a waker to register or none).
    fn read_mode(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        nb: Option<Option<&Waker>>,
    ) -> io::Result<usize> {
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        let deadline = lock(&self.read_timeout).map(|t| Instant::now() + t);
        let st = lock(&self.st);
        let mut st = self.wait_for(st, deadline, nb, |l| {
            l.has_data() || !l.readable || l.fault.is_some()
        })?;
        if let Some(f) = &st.l.fault {
            if !st.l.has_data() {
                return Err(Self::fault_error(f));
            }
        }
        let rmr = &self.conn.rmr;
        let mut n = 0;
        'bufs: for b in bufs.iter_mut() {
            let mut at = 0;
            while at < b.len() {
                let Some((off, len)) = st.l.take(b.len() - at) else {
                    break 'bufs;
                };
                rmr.read_at(off, &mut b[at..at + len]);
                at += len;
                n += len;
            }
        }
        // Hand the space back now rather than at the next call.
        self.progress(&mut st, false)?;
        Ok(n)
    }

    /// The wait of a write loop (`write`, `iowrite`) that has sent `written` bytes: until
    /// `ready`, the peer or a shutdown ends writing, or the stream fails. `Ok`: the lock, to
    /// go on; `Err`: what the call returns — the bytes written so far if any (a
    /// `WouldBlock`, a timeout, a fault or the end of writing after some bytes is a short
    /// write), else the error (`BrokenPipe` when writing has ended).
    fn wait_to_write<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
        deadline: Option<Instant>,
        nb: Option<Option<&Waker>>,
        written: usize,
        ready: impl Fn(&Ledger) -> bool,
    ) -> Result<MutexGuard<'a, State>, io::Result<usize>> {
        let short = |e: io::Error| if written > 0 { Ok(written) } else { Err(e) };
        let st = match self.wait_for(st, deadline, nb, |l| {
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

    /// `write` in blocking or non-blocking mode (`nb`), whatever the stream's flag.
    pub(crate) fn write_with(&self, bufs: &[IoSlice<'_>], nb: bool) -> io::Result<usize> {
        self.write_mode(bufs, nb.then_some(None))
    }

    /// Non-blocking `write`; on `WouldBlock`, `waker` is woken by the next progress another
    /// handle makes.
    #[cfg(feature = "tokio")]
    pub(crate) fn write_waking(&self, bufs: &[IoSlice<'_>], waker: &Waker) -> io::Result<usize> {
        self.write_mode(bufs, Some(Some(waker)))
    }

    /// `write`: blocking (`None`) or not (with a waker to register or none).
    fn write_mode(&self, bufs: &[IoSlice<'_>], nb: Option<Option<&Waker>>) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let deadline = lock(&self.write_timeout).map(|t| Instant::now() + t);
        let c = &self.conn;
        let mut st = lock(&self.st);
        let mut written = 0usize;
        st.l.start_write();
        // Position in `bufs` of byte `written`.
        let (mut bi, mut bo) = (0usize, 0usize);
        while written < total {
            let left = total - written;
            st = match self.wait_to_write(st, deadline, nb, written, |l| l.can_send_for(left)) {
                Ok(s) => s,
                Err(end) => return end,
            };
            let olen = st.l.next_olen();
            let t = st.l.plan(total - written, olen);
            // Copy the transfer's bytes into the ring, through `shared`.
            let mut ranges = [
                (t.first.0 as usize, t.first.1 as usize),
                (0, t.second as usize),
            ];
            for (off, len) in ranges.iter_mut() {
                while *len > 0 {
                    let src = &bufs[bi][bo..];
                    let k = src.len().min(*len);
                    c.smr.write_at(*off, &src[..k]);
                    *off += k;
                    *len -= k;
                    bo += k;
                    if bo == bufs[bi].len() {
                        bi += 1;
                        bo = 0;
                        while bi < bufs.len() && bufs[bi].is_empty() {
                            bi += 1;
                        }
                    }
                }
            }
            let (h, l1) = (t.first.0 as usize, t.first.1 as usize);
            let flags = if t.inline {
                SendFlags::INLINE
            } else {
                SendFlags::empty()
            };
            let s1 = c.smr.sge(h..h + l1);
            let r = if t.second > 0 {
                c.post_write_imm(
                    t.imm as u64,
                    &[s1, c.smr.sge(0..t.second as usize)],
                    t.remote,
                    t.imm,
                    flags,
                )
            } else {
                c.post_write_imm(t.imm as u64, &[s1], t.remote, t.imm, flags)
            };
            if let Err(e) = r {
                return if written > 0 { Ok(written) } else { Err(e) };
            }
            written += (t.first.1 + t.second) as usize;
        }
        Ok(written)
    }
}

fn check_timeout(t: Option<Duration>) -> io::Result<()> {
    if t == Some(Duration::ZERO) {
        return Err(invalid("a zero timeout: use None to wait forever"));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AsFd for RdmaStream {
    /// The readiness fd (see "Readiness").
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.conn.epoll.as_fd()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // rsockets' rclose: DISCONNECT if still connected, a bounded wait for the sends, then
        // the rdma_cm disconnect. Errors only mean that the peer is gone already.
        let connected = lock(&self.st).l.connected;
        if connected {
            if let Err(e) = self.shutdown(Shutdown::Both) {
                tracing::debug!("closing an RdmaStream: {e}");
            }
        }
        let _ = self.conn.qp.modify(&rverbs_uverbs::qp::QpAttr {
            qp_state: Some(QpState::ERR),
            ..Default::default()
        });
        let _ = self.conn.id.disconnect();
        let mut st = lock(&self.st);
        if st.unacked > 0 {
            self.conn.cq.ack_events(st.unacked);
            st.unacked = 0;
        }
    }
}
