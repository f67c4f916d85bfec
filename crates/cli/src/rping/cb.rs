//! One connection's control block (`struct rping_cb`): its objects and buffers, and the
//! event loop that waits on the CQ's channel and the rdma_cm id's fd together and moves the
//! connection through rping's states.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;

use rverbs::cm::{CmEvent, CmEventKind, CmId};
use rverbs::cm::{Endpoint, EndpointAttr};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::mr::{AccessFlags, Mr};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{self as vqp, Qp, QpInit};
use rverbs::uverbs::{SendOp, WcOpcode, WcStatus, WorkCompletion};

use super::link::Link;
use super::message::*;
use super::*;

/// What the client advertises for `mr`: its address and rkey, and `-S` bytes.
fn advert(mr: &Mr<Box<[u8]>>, o: &Opts) -> RdmaInfo {
    RdmaInfo {
        buf: mr.addr(),
        rkey: mr.rkey(),
        size: o.size,
    }
}

/// rping's `enum test_state`, numbered as in C (the numbers appear in its messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum State {
    Idle = 1,
    ConnectRequest,
    #[allow(dead_code)] // a synchronous id resolves without passing through these
    AddrResolved,
    #[allow(dead_code)]
    RouteResolved,
    Connected,
    RdmaReadAdv,
    RdmaReadComplete,
    RdmaWriteAdv,
    RdmaWriteComplete,
    Disconnected,
    Error,
}

impl State {
    pub(super) fn name(self) -> &'static str {
        match self {
            State::Idle => "IDLE",
            State::ConnectRequest => "CONNECT_REQUEST",
            State::AddrResolved => "ADDR_RESOLVED",
            State::RouteResolved => "ROUTE_RESOLVED",
            State::Connected => "CONNECTED",
            State::RdmaReadAdv => "RDMA_READ_ADV",
            State::RdmaReadComplete => "RDMA_READ_COMPLETE",
            State::RdmaWriteAdv => "RDMA_WRITE_ADV",
            State::RdmaWriteComplete => "RDMA_WRITE_COMPLETE",
            State::Disconnected => "DISCONNECTED",
            State::Error => "ERROR",
        }
    }
}

/// One connection's control block (`struct rping_cb`). Field order is drop order: the QP
/// goes before the memory it may access.
pub(super) struct Cb<'o> {
    pub(super) link: Link,
    pub(super) recv_mr: Mr<Box<[u8]>>,
    pub(super) send_mr: Mr<Box<[u8]>>,
    pub(super) rdma_mr: Mr<Box<[u8]>>,
    pub(super) start_mr: Option<Mr<Box<[u8]>>>,
    pub(super) cq: Arc<Cq>,
    pub(super) channel: Arc<CompChannel>,
    pub(super) o: &'o Opts,
    pub(super) server: bool,
    pub(super) state: State,
    /// rping's semaphore: posts not yet waited for.
    pub(super) sem: u32,
    /// Whether the CQ is armed (no completion event read since the last arm).
    armed: bool,
    pub(super) remote: RdmaInfo,
    /// The poll buffer, kept here so that a poll does not zero a new one each time.
    wcs: [WorkCompletion; 4],
}

impl<'o> Cb<'o> {
    /// `rping_setup_qp` + `rping_setup_buffers`: PD, one completion channel, one CQ of 32
    /// entries for sends and receives (armed), the QP (16 sends, 2 receives, 1 SGE), and the
    /// buffers: a 16-byte receive message, the send message (16 bytes; the client's 32 hold
    /// both its advertisements), the RDMA buffer (and the client's start buffer) of `-S`
    /// bytes.
    pub(super) fn setup(o: &'o Opts, id: CmId, server: bool) -> io::Result<Cb<'o>> {
        let dev = id
            .query_addr()
            .and_then(|q| q.ib_device_name())
            .map_err(|e| os_err("setup_qp failed: find the id's RDMA device", e))?;
        let ctx = rverbs::provider::open_by_name(&dev)
            .map_err(|e| os_err(&format!("setup_qp failed: open {dev}"), e))?;
        let pd = Pd::alloc(&ctx).map_err(|e| os_err("ibv_alloc_pd failed", e))?;
        debug_log!(o, "created pd {}", pd.handle());
        let channel =
            CompChannel::create(&ctx).map_err(|e| os_err("ibv_create_comp_channel failed", e))?;
        debug_log!(o, "created channel {}", channel.as_fd().as_raw_fd());
        let cq = Cq::create(
            &ctx,
            SQ_DEPTH * 2,
            CqOptions {
                channel: Some(channel.clone()),
                comp_vector: 0,
            },
        )
        .map_err(|e| os_err("ibv_create_cq failed", e))?;
        debug_log!(o, "created cq {}", cq.handle());
        cq.req_notify(false)
            .map_err(|e| os_err("ibv_req_notify_cq failed", e))?;
        let caps = QpCaps {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let link = if o.self_qp {
            let port = id.query_addr().map(|q| q.port_num).unwrap_or(1);
            let qp =
                Qp::create(&pd, QpInit::rc(&cq, caps)).map_err(|e| os_err("ibv_create_qp", e))?;
            qp.modify(&vqp::QpAttr {
                qp_state: Some(vqp::QpState::INIT),
                pkey_index: Some(0),
                port_num: Some(port),
                access_flags: Some(AccessFlags::empty()),
                ..Default::default()
            })
            .map_err(|e| os_err("ibv_modify_qp", e))?;
            Link::Own { qp, id }
        } else {
            let attr = EndpointAttr {
                caps,
                sq_sig_all: false,
            };
            Link::Cm(
                Endpoint::with_cqs(id, &pd, &cq, &cq, &attr)
                    .map_err(|e| os_err("rdma_create_qp", e))?,
            )
        };
        debug_log!(o, "created qp {:#x}", link.qp_num());
        let reg = |len: usize, access: AccessFlags, what: &str| {
            Mr::register(&pd, vec![0u8; len].into_boxed_slice(), access)
                .map_err(|e| os_err(&format!("{what} reg_mr failed"), e))
        };
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let size = o.size as usize;
        let recv_mr = reg(INFO_LEN, AccessFlags::LOCAL_WRITE, "recv_buf")?;
        // The client's two advertisements (start buffer, then sink buffer) name the same
        // buffers every ping: both are written here, once, and each ping sends one of the
        // halves (rping rewrites its one send buffer before each send).
        let send_len = if server { INFO_LEN } else { 2 * INFO_LEN };
        let send_mr = reg(send_len, AccessFlags::empty(), "send_buf")?;
        let rdma_mr = reg(size, rw, "rdma_buf")?;
        let start_mr = if server {
            None
        } else {
            let start_mr = reg(size, rw, "start_buf")?;
            for (i, mr) in [&start_mr, &rdma_mr].into_iter().enumerate() {
                send_mr.write_at(i * INFO_LEN, &advert(mr, o).encode());
            }
            Some(start_mr)
        };
        debug_log!(o, "allocated & registered buffers...");
        Ok(Cb {
            link,
            recv_mr,
            send_mr,
            rdma_mr,
            start_mr,
            cq,
            channel,
            o,
            server,
            state: State::Idle,
            sem: 0,
            armed: true,
            wcs: [WorkCompletion::default(); 4],
            remote: RdmaInfo {
                buf: 0,
                rkey: 0,
                size: 0,
            },
        })
    }

    pub(super) fn post_recv(&self) -> io::Result<()> {
        let sge = [self.recv_mr.sge(0..INFO_LEN)];
        self.link.post_recv(&sge)
    }

    /// The server's "go ahead": its 16-byte send buffer (rping's server never fills it).
    pub(super) fn post_info_send(&self) -> io::Result<()> {
        let sge = [self.send_mr.sge(0..INFO_LEN)];
        self.link.post_send(SendOp::Send, &sge)
    }

    /// `rping_format_send` and the send after it: advertises the client's start or sink
    /// buffer (the half of the send buffer that `setup` wrote for it).
    pub(super) fn advertise(&self, sink: bool) -> io::Result<()> {
        let at = if sink { INFO_LEN } else { 0 };
        if self.o.debug {
            let mr = if sink {
                &self.rdma_mr
            } else {
                self.start_mr.as_ref().expect("client has a start buffer")
            };
            let info = advert(mr, self.o);
            println!(
                "RDMA addr {:x} rkey {:x} len {}",
                info.buf, info.rkey, info.size
            );
        }
        let sge = [self.send_mr.sge(at..at + INFO_LEN)];
        self.link.post_send(SendOp::Send, &sge)
    }

    // --- completions and events ----------------------------------------------------------

    pub(super) fn on_recv(&mut self, byte_len: u32) -> io::Result<()> {
        if byte_len as usize != INFO_LEN {
            return Err(io::Error::other(format!(
                "Received bogus data, size {byte_len}"
            )));
        }
        if self.server {
            let mut b = [0u8; INFO_LEN];
            self.recv_mr.read_at(0, &mut b);
            self.remote = RdmaInfo::decode(&b);
            debug_log!(
                self.o,
                "Received rkey {:x} addr {:x} len {} from peer",
                self.remote.rkey,
                self.remote.buf,
                self.remote.size
            );
            self.state = if self.state <= State::Connected || self.state == State::RdmaWriteComplete
            {
                State::RdmaReadAdv
            } else {
                State::RdmaWriteAdv
            };
        } else {
            self.state = if self.state == State::RdmaReadAdv {
                State::RdmaWriteAdv
            } else {
                State::RdmaWriteComplete
            };
        }
        Ok(())
    }

    /// `rping_cq_event_handler` for one completion (its status, opcode and length): flushes
    /// are skipped, other errors end the run; receives are re-posted after their content was
    /// taken.
    pub(super) fn on_completion(
        &mut self,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> io::Result<()> {
        if !status.is_success() {
            if status == WcStatus::WR_FLUSH_ERR {
                return Ok(());
            }
            self.state = State::Error;
            return Err(io::Error::other(format!(
                "cq completion failed status {} ({status})",
                status.0
            )));
        }
        match opcode {
            WcOpcode::SEND => debug_log!(self.o, "send completion"),
            WcOpcode::RDMA_WRITE => {
                debug_log!(self.o, "rdma write completion");
                self.state = State::RdmaWriteComplete;
                self.sem += 1;
            }
            WcOpcode::RDMA_READ => {
                debug_log!(self.o, "rdma read completion");
                self.state = State::RdmaReadComplete;
                self.sem += 1;
            }
            WcOpcode::RECV => {
                debug_log!(self.o, "recv completion");
                self.on_recv(byte_len)
                    .map_err(|e| os_err("recv wc error", e))?;
                self.post_recv().map_err(|e| os_err("post recv error", e))?;
                self.sem += 1;
            }
            other => {
                self.state = State::Error;
                return Err(io::Error::other(format!(
                    "unexpected completion opcode {other}"
                )));
            }
        }
        Ok(())
    }

    pub(super) fn on_cm_event(&mut self, ev: &CmEvent) {
        let kind = ev.kind();
        debug_log!(
            self.o,
            "cma_event type RDMA_CM_EVENT_{} cma_id {} ({})",
            kind,
            ev.id_handle(),
            if self.server { "child" } else { "parent" }
        );
        match kind {
            CmEventKind::DISCONNECTED => {
                eprintln!(
                    "{} DISCONNECT EVENT...",
                    if self.server { "server" } else { "client" }
                );
                self.state = State::Disconnected;
                self.sem += 1;
            }
            CmEventKind::DEVICE_REMOVAL => {
                eprintln!("cma detected device removal!!!!");
                self.state = State::Error;
                self.sem += 1;
            }
            CmEventKind::ADDR_ERROR
            | CmEventKind::ROUTE_ERROR
            | CmEventKind::CONNECT_ERROR
            | CmEventKind::UNREACHABLE
            | CmEventKind::REJECTED => {
                eprintln!("cma event RDMA_CM_EVENT_{kind}, error {}", ev.status());
                self.state = State::Error;
                self.sem += 1;
            }
            CmEventKind::ESTABLISHED => {
                if !self.server {
                    self.state = State::Connected;
                }
                self.sem += 1;
            }
            other => eprintln!("unhandled event: RDMA_CM_EVENT_{other}, ignoring"),
        }
    }

    /// `sem_wait`: handles completions, and sleeps when there are none, until one of them or
    /// an rdma_cm event posted the semaphore.
    ///
    /// The CQ is armed only when a poll found it empty, and polled once more after the arm
    /// before the sleep (a completion that came before the arm raised no event). rping's CQ
    /// thread re-arms as soon as it has read an event instead; armed that early, the CQ
    /// raises a second event per wait for the send completion that follows the receive, a
    /// wake-up and an event read more (measured: about 200 Ir a ping more, docs/perf.md).
    pub(super) fn sem_wait(&mut self) -> io::Result<()> {
        while self.sem == 0 {
            let n = self.cq.poll(&mut self.wcs);
            if n == 0 {
                if self.armed {
                    self.sleep()?;
                } else {
                    self.cq
                        .req_notify(false)
                        .map_err(|e| os_err("Failed to set notify", e))?;
                    self.armed = true;
                }
                continue;
            }
            for i in 0..n {
                // The three fields rping reads, not a copy of the whole completion.
                let wc = &self.wcs[i];
                let (status, opcode, byte_len) = (wc.status, wc.opcode, wc.byte_len);
                self.on_completion(status, opcode, byte_len)?;
            }
        }
        self.sem -= 1;
        Ok(())
    }

    /// Sleeps on the CQ's channel and the rdma_cm id's fd together (the CQ is armed, see
    /// `sem_wait`), then takes what woke it: a completion event (acknowledged; the CQ is
    /// disarmed now) and the id's rdma_cm events.
    fn sleep(&mut self) -> io::Result<()> {
        use rustix::event::{poll, PollFd, PollFlags};
        let cm_fd = self.link.id().channel_fd();
        let mut fds = [
            PollFd::new(&*self.channel, PollFlags::IN),
            PollFd::new(&cm_fd, PollFlags::IN),
        ];
        let ts = rustix::time::Timespec {
            tv_sec: IDLE_TIMEOUT.as_secs() as _,
            tv_nsec: 0,
        };
        let ready = match poll(&mut fds, Some(&ts)) {
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(os_err("poll for completions and rdma_cm events", e)),
        };
        if ready == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no completion and no rdma_cm event for {} s while in state {} ({}): the \
                     peer is gone or cannot reach us",
                    IDLE_TIMEOUT.as_secs(),
                    self.state.name(),
                    self.state as u32
                ),
            ));
        }
        let (cq_ready, cm_ready) = (!fds[0].revents().is_empty(), !fds[1].revents().is_empty());
        if cq_ready {
            self.cq
                .wait_event()
                .map_err(|e| os_err("Failed to get cq event", e))?;
            self.cq.ack_events(1);
            self.armed = false;
        }
        if cm_ready {
            // The channel's readiness protocol: take events until none is left.
            loop {
                match self.link.id().try_next_event() {
                    Ok(Some(ev)) => self.on_cm_event(&ev),
                    Ok(None) => break,
                    Err(e) => return Err(os_err("rdma_get_cm_event", e)),
                }
            }
        }
        Ok(())
    }

    /// `sem_wait` and the check that follows it in rping: `Ok(true)` when the state is
    /// `want`, `Ok(false)` when it is another (see `self.state`).
    pub(super) fn wait_for(&mut self, want: State) -> io::Result<bool> {
        self.sem_wait()?;
        Ok(self.state == want)
    }

    /// The error for a wait that ended in another state than `want` (rping's message, and
    /// what the state means).
    pub(super) fn unexpected(&self, want: State) -> io::Error {
        let s = self.state;
        let mut msg = format!("wait for {} state {} ({})", want.name(), s as u32, s.name());
        if s == State::Disconnected {
            msg += if self.server {
                ": the client disconnected"
            } else {
                ": the server disconnected"
            };
        }
        io::Error::other(msg)
    }
}
