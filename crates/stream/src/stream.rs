//! `RdmaStream` and `RdmaListener`: the verbs side of the protocol in [`crate::ledger`].

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
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
mod registered;
mod wait;
pub use iomap::{IoMap, RawIoMap};
pub use listener::RdmaListener;
pub use options::StreamOptions;
use wait::{Mode, EV_CM, EV_COMP_ONE};

use crate::wire::{
    iomap_size_from_wire, iomap_size_to_wire, ConnData, Ctrl, RsSge, FLAG_IOMAP, FLAG_NET,
    HOST_IS_BIG_ENDIAN, IOMAP_ENTRY_LEN, MAX_IOMAP_ENTRIES, SGE_LEN, SGL_ENTRIES, VERSION,
};

/// Address and route resolution time limit of [`RdmaStream::connect`].
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long dropping a stream waits for its last sends (and its DISCONNECT) to complete.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
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
    /// The readiness fd, and what a blocked call sleeps on: the completion channel, the
    /// rdma_cm channel and the eventfd of the stream's `Wake`, each with its `EV_*` bit as
    /// data (0 for the eventfd), so that the sleeper reads only the fds that are ready.
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
        // Tagged with what `progress` then reads (`crate::stream::wait`).
        for (fd, tag) in [(chan.as_fd(), EV_COMP_ONE), (id.channel_fd(), EV_CM)] {
            epoll::add(
                &epoll,
                fd,
                epoll::EventData::new_u64(tag as u64),
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
    /// How long a blocked call polls before it sleeps, in microseconds
    /// ([`RdmaStream::set_poll_time`]).
    poll_us: AtomicU32,
    /// Wakes the other waiters when one thread's progress may concern them.
    wake: Wake,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
}

struct State {
    l: Ledger,
    /// The CQ is armed and neither an event nor a completion was seen since (so no event
    /// is queued for this arm).
    armed: bool,
    /// A completion was polled while the CQ was armed: an event may be queued (or still
    /// come) on the completion channel; it is read before the next arm.
    maybe_event: bool,
    unacked: u32,
    /// Calls of `progress` (the rdma_cm channel is read on every `CM_EVERY`th).
    calls: u32,
    /// Who waits (see `crate::wake`).
    sleepers: Sleepers,
    /// `progress`'s completions, kept here so that a poll does not initialise an array.
    wcs: [WorkCompletion; 16],
}

/// A byte stream over an RDMA RC connection that speaks rsockets' protocol: an
/// [`RdmaStream`] talks to librdmacm's `rsocket` programs (`rstream`, `riostream`) and to
/// other `RdmaStream`s.
///
/// Data is copied once, from the caller's buffers into a registered send ring (with
/// `rverbs_uverbs::kernel::shared`'s copies), written by RDMA WRITE with immediate straight into the
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
/// The fd is an epoll fd over the stream's completion channel and its rdma_cm channel (and
/// the eventfd with which another handle's progress wakes a blocked call of this stream). With
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
        let wake = Wake::new()?;
        // The sleeping waiter's eventfd, in the same epoll (tag 0: nothing to read for
        // `progress`; the sleeper reads it itself). No fd more per stream.
        epoll::add(
            &conn.epoll,
            wake.as_fd(),
            epoll::EventData::new_u64(0),
            epoll::EventFlags::IN,
        )
        .map_err(|e| os("epoll_ctl ADD", e))?;
        Ok(RdmaStream {
            inner: Arc::new(Inner {
                st: Mutex::new(State {
                    l: Ledger::new(sizes, peer),
                    armed: false,
                    maybe_event: false,
                    unacked: 0,
                    calls: 0,
                    sleepers: Sleepers::default(),
                    wcs: [WorkCompletion::default(); 16],
                }),
                conn,
                nonblocking: AtomicBool::new(false),
                read_timeout: Mutex::new(None),
                write_timeout: Mutex::new(None),
                poll_us: AtomicU32::new(wait::default_poll_us()),
                wake,
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

    /// How long a blocked call (`read`, `write`, `iowrite`, … without
    /// [`RdmaStream::set_nonblocking`]) polls for completions before it arms the CQ and
    /// sleeps (rsockets' `polling_time`), for every handle of this stream. A reply that
    /// comes while it polls costs no system call and no wake-up; a sleep costs three system
    /// calls on rxe and siw (the arm, `epoll_wait`, the event's `read`) and a wake-up. Longer
    /// polling burns CPU while it waits (a problem where the peer or the device's kernel
    /// work needs that CPU); 0 sleeps at once. Whole microseconds (rounded down), at most
    /// one second: more is refused (`InvalidInput`). Non-blocking calls and the tokio
    /// layer never poll. The default is the process's: `RVERBS_STREAM_POLL_US` if set (read
    /// once per process), else 50 µs (rsockets' default is 10 µs; docs/perf.md, "Small
    /// messages", has the sweep behind the choice). It decides only how a wait spends its
    /// time, never its outcome.
    pub fn set_poll_time(&self, t: Duration) -> io::Result<()> {
        if t > wait::MAX_POLL {
            return Err(invalid(format!(
                "poll time {t:?}: must be at most {:?}",
                wait::MAX_POLL
            )));
        }
        self.inner
            .poll_us
            .store(t.as_micros() as u32, Ordering::Relaxed);
        Ok(())
    }

    /// The polling time of blocked calls ([`RdmaStream::set_poll_time`]).
    pub fn poll_time(&self) -> io::Result<Duration> {
        Ok(Duration::from_micros(
            self.inner.poll_us.load(Ordering::Relaxed) as u64,
        ))
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
    ///
    /// Non-blocking, it makes no system call unless an event is to be read, and a
    /// `WouldBlock` does not arm the stream (as rsockets' `rrecv`): call
    /// [`RdmaStream::poll_ready`] before waiting on the readiness fd.
    pub fn recv_vectored(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        nonblocking: bool,
    ) -> io::Result<usize> {
        self.inner.read_mode(bufs, Mode::or_try(nonblocking))
    }

    /// `write_vectored` in non-blocking mode or blocking, for this call only (see
    /// [`RdmaStream::recv_vectored`]: non-blocking, a `WouldBlock` does not arm the stream).
    /// Blocking, it returns once every byte is posted.
    pub fn send_vectored(&self, bufs: &[IoSlice<'_>], nonblocking: bool) -> io::Result<usize> {
        self.inner.write_mode(bufs, Mode::or_try(nonblocking))
    }

    /// What a `read` or `write` would find now, for `poll(2)`-style callers (rsockets'
    /// `rpoll`): processes what arrived and, if neither direction asked for (`read`,
    /// `write`) is ready, arms the stream so that its readiness fd ([`AsFd`]) becomes readable
    /// when that may have changed. Then poll the fd and call this again.
    pub fn poll_ready(&self, read: bool, write: bool) -> io::Result<Readiness> {
        self.inner.poll_ready(read, write)
    }

    /// How many bytes a `read` would return now without waiting (`ioctl(FIONREAD)` on a TCP
    /// socket): processes what arrived, then counts the received bytes not yet read. 0 also
    /// at the end of the stream; it never waits and never arms the stream.
    pub fn bytes_readable(&self) -> io::Result<usize> {
        self.inner.bytes_readable()
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
            st = self.wait_for(st, deadline, Mode::Block, |l| {
                l.can_send_ctrl() || !l.connected
            })?;
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
            match self.wait_for(st, deadline, Mode::Block, |l| l.all_sends_done()) {
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                r => drop(r?),
            }
        }
        Ok(())
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
        self.read_mode(bufs, Mode::of(self.nonblocking.load(Ordering::Relaxed)))
    }

    fn write_from(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_mode(bufs, Mode::of(self.nonblocking.load(Ordering::Relaxed)))
    }

    /// Non-blocking `read`; on `WouldBlock`, `waker` is woken by the next progress another
    /// handle makes. `fd_ready`: the readiness fd fired since the last try (its channels are
    /// read first); else none is read unless the call arms.
    #[cfg(feature = "tokio")]
    pub(crate) fn read_waking(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        waker: &Waker,
        fd_ready: bool,
    ) -> io::Result<usize> {
        self.read_mode(bufs, Mode::waking(waker, fd_ready))
    }

    /// `read`, waiting as `mode` says.
    pub(crate) fn read_mode(
        &self,
        bufs: &mut [IoSliceMut<'_>],
        mode: Mode<'_>,
    ) -> io::Result<usize> {
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        if want == 0 {
            return Ok(0);
        }
        let deadline = mode.deadline(&self.read_timeout);
        let st = lock(&self.st);
        let mut st = self.wait_for(st, deadline, mode, |l| {
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
        // Hand the space back now rather than at the next call (the CQ was just polled).
        self.send_due(&mut st)?;
        Ok(n)
    }

    /// Non-blocking `write`; on `WouldBlock`, `waker` is woken by the next progress another
    /// handle makes. `fd_ready` as for `read_waking`.
    #[cfg(feature = "tokio")]
    pub(crate) fn write_waking(
        &self,
        bufs: &[IoSlice<'_>],
        waker: &Waker,
        fd_ready: bool,
    ) -> io::Result<usize> {
        self.write_mode(bufs, Mode::waking(waker, fd_ready))
    }

    /// `write`, waiting as `mode` says.
    pub(crate) fn write_mode(&self, bufs: &[IoSlice<'_>], mode: Mode<'_>) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == 0 {
            return Ok(0);
        }
        let deadline = mode.deadline(&self.write_timeout);
        let c = &self.conn;
        let mut st = lock(&self.st);
        let mut written = 0usize;
        st.l.start_write();
        // Position in `bufs` of byte `written`.
        let (mut bi, mut bo) = (0usize, 0usize);
        while written < total {
            let left = total - written;
            st = match self.wait_to_write(st, deadline, mode, written, |l| l.can_send_for(left)) {
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
