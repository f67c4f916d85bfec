//! librdmacm's verbs helpers over an rdma_cm id: [`Endpoint`] is an id with its QP, and the
//! blocking [`Endpoint::get_send_comp`] / [`Endpoint::get_recv_comp`].
//!
//! `rdma_get_send_comp(3)` may only be used on an id whose CQs are its own and separate for
//! sends and receives. Here that restriction is a property of the type: [`Endpoint::create`]
//! (like `rdma_create_qp` without CQs) gives the QP its own send CQ and its own receive CQ,
//! each with its own completion channel, and returns an `Endpoint<OwnCqs>` — the only kind with
//! `get_send_comp` / `get_recv_comp`. An endpoint built on caller-supplied CQs
//! ([`Endpoint::with_cqs`]) is an `Endpoint<UserCqs>`, which has neither; converting it with
//! [`Endpoint::into_own_cqs`] checks the CQs and refuses shared or combined ones with an error
//! that says which. The CQs of an `Endpoint<OwnCqs>` are never handed out as `Arc`s, so they
//! cannot be given to another QP; the check is repeated (one atomic load) at each call.
//!
//! ## Waits that end
//!
//! A completion wait also watches the id: when the connection ends — the peer disconnected or
//! died (DISCONNECTED), the device went away (DEVICE_REMOVAL), or the QP was moved to ERR —
//! the wait lets the protocol say what is left, with no timer: it moves the QP to ERR and
//! drains the queue ("How a wait ends" below), returning every completion the
//! device produced for the requests posted before the end — real or flushed
//! (`WR_FLUSH_ERR`) — and then fails with an error naming the cause and the QP
//! (`ConnectionReset` / `ConnectionAborted`, errno ECONNRESET, ENODEV, ECONNABORTED) instead
//! of sleeping for ever. The outcome is the same on an idle and on a loaded machine. The id's
//! events are not taken from their reader: the wait only looks at what the channel's
//! dispatcher recorded (see [`crate::CmId::end_event`]), so a `get_recv_comp` in one thread
//! and an `accept` or `get_event` in another do not steal each other's events.
//!
//! ## How a wait ends
//!
//! Once the end is known and the CQ is empty, the wait ([`Endpoint::drain_on_end`]) moves the
//! QP to ERR (the transition every provider flushes on) and then:
//! - on rxe and mlx5 posts a *marker* request ([`END_MARKER`], no SGE) to the queue
//!   it waits on and moves the QP to ERR once more. A QP in ERR completes every request with a
//!   flush, in order (IB spec C10-42, C10-97.2.1), so the marker's flush comes after the
//!   completion of every request posted before it; rxe flushes a user QP's receive queue only
//!   when its responder task runs, which the second move to ERR schedules (the send doorbell
//!   runs the requester, which flushes the send queue). The wait returns completions until it
//!   polls the marker, then the end error. If the queue is full, a request of the caller's is
//!   still to complete: its completion (or flush) ends the wait;
//! - on siw (iWARP) the move to ERR flushes both queues before the modify returns
//!   (`siw_qp_modify` → `siw_sq_flush`/`siw_rq_flush` under the QP's state lock; a close by the
//!   peer does the same in `siw_qp_llp_close`), and siw never flushes a request posted to a
//!   user-mapped queue after that: so what the CQ holds then is all there is;
//! - a QP in RESET discards its requests: nothing is left to come.
//!
//! The marker's completion is never returned: [`Endpoint::poll_comps`] drops it. The post
//! helpers refuse `END_MARKER` as a `wr_id`; requests posted through [`Endpoint::qp`] must not
//! use it either.

// The post_* helpers are safe (registered memory named by `MrSge`); one `unsafe` block, the
// INLINE post of a plain byte slice, which the device never sees (copied into the WQE).
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rverbs_uverbs::channel::CompChannel;
use rverbs_uverbs::context::Context;
use rverbs_uverbs::cq::{Cq, CqOptions};
use rverbs_uverbs::mr::{AccessFlags, Mr, MrMemory, RegisterError};
use rverbs_uverbs::pd::Pd;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::qp::{self as vqp, Qp, QpAttr, QpInit};
use rverbs_uverbs::{
    Error, MrSendWr, MrSge, RecvWr, SendFlags, SendOp, SendWr, UdDest, WorkCompletion,
};
use rverbs_uverbs::{PostError, PostQueue};

use crate::{CmEvent, CmEventKind, CmId, ConnParam, McJoinFlags, QpState, QpType, UdEventParam};
use std::net::SocketAddr;

mod inline;
mod wait;
pub use wait::{Drain, EndReason, END_MARKER};

mod sealed {
    pub trait Sealed {}
}

/// Who owns an endpoint's CQs (a type-level marker).
pub trait CqOwnership: sealed::Sealed {}

/// The endpoint's send and receive CQs are its own, separate, each with its own channel:
/// `get_send_comp` / `get_recv_comp` are available.
#[derive(Debug)]
pub enum OwnCqs {}
/// The caller supplied the CQs: they may be shared or combined, so the blocking helpers are
/// not available.
#[derive(Debug)]
pub enum UserCqs {}
impl sealed::Sealed for OwnCqs {}
impl sealed::Sealed for UserCqs {}
impl CqOwnership for OwnCqs {}
impl CqOwnership for UserCqs {}

/// What to create on the id (`ibv_qp_init_attr` of `rdma_create_qp`).
#[derive(Clone, Copy, Debug)]
pub struct EndpointAttr {
    /// Queue capacities the QP is created with (the kernel may grant more).
    pub caps: QpCaps,
    /// Every send is signaled (librdmacm's examples set it).
    pub sq_sig_all: bool,
}

impl Default for EndpointAttr {
    /// librdmacm's examples: one send, one receive, one SGE each, 16 bytes inline, all
    /// sends signaled.
    fn default() -> Self {
        Self {
            caps: QpCaps {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 16,
            },
            sq_sig_all: true,
        }
    }
}

/// An rdma_cm id with its QP (librdmacm's `rdma_cm_id` after `rdma_create_qp`).
///
/// # Dropping
///
/// Dropping an endpoint destroys, in this order, its QP (work requests still posted are
/// discarded: no completion comes for them), its CQs and its PD (each only when nothing else
/// holds it: an [`Mr`] registered on the PD keeps the PD alive), then the rdma_cm id. Nothing
/// blocks and nothing leaks. Destroying a connected id ends the connection in the kernel:
/// the peer sees DISCONNECTED as after [`Endpoint::disconnect`]; events of the id not yet
/// taken are discarded. Call [`Endpoint::disconnect`] first to end the connection with the
/// QP flushed (its outstanding work requests then complete with WR_FLUSH_ERR, to be polled).
///
/// # Soundness
///
/// An endpoint is an rdma_cm id plus verbs objects of `rverbs-uverbs` and inherits their
/// arguments (docs/architecture.md, "Why this is sound"): [`Endpoint::post_send`] and
/// [`Endpoint::post_recv`] take SGEs made from live [`Mr`]s only, [`Endpoint::post_send_inline`]
/// copies a Rust slice into the work request during the call, and the blocking
/// `get_send_comp` / `get_recv_comp` read completions through the CQ's locked poll. The fds it
/// exposes (`send_comp_fd`, `recv_comp_fd`, the id's channel fd) are borrowed.
pub struct Endpoint<C: CqOwnership = OwnCqs> {
    // Drop order: the QP first (it holds the CQs and PD), then the CQs and PD, then the id.
    qp: Arc<Qp>,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    pd: Arc<Pd>,
    id: CmId,
    /// A completion wait (not the caller) moved the QP to ERR, after the end event: `ended`
    /// then still reports the event.
    drained: AtomicBool,
    _own: PhantomData<C>,
}

impl<C: CqOwnership> fmt::Debug for Endpoint<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("qp", &self.qp)
            .finish_non_exhaustive()
    }
}

/// The default protection domain of `id`'s device: what [`Endpoint::create`] uses, as
/// librdmacm's `rdma_create_qp(id, NULL, …)` and `rdma_create_ep` use the per-device PD they
/// keep. One per device (by name) per process, on a context of its own, shared by every
/// endpoint and every caller of this function on that device; it is freed (with its context)
/// when its last holder drops it, and the next call allocates a new one.
///
/// Memory an endpoint's peer should reach through [`Endpoint::create`]'s QP must be registered
/// in this PD ([`Endpoint::reg_msgs`] and its siblings do that). To use a PD of your own,
/// create the endpoint with [`Endpoint::create_with_pd`].
pub fn default_pd(id: &CmId) -> io::Result<Arc<Pd>> {
    let dev = id_device(id, "get the default PD")?;
    device_pd(&dev)
}

fn device_pd(dev: &str) -> io::Result<Arc<Pd>> {
    // The table of default PDs, by device name. Held weakly: a PD goes away with its last
    // holder; the entry is then replaced on the next call.
    static PDS: Mutex<Option<HashMap<String, Weak<Pd>>>> = Mutex::new(None);
    let mut g = PDS.lock().unwrap_or_else(|p| p.into_inner());
    let map = g.get_or_insert_with(HashMap::new);
    if let Some(pd) = map.get(dev).and_then(Weak::upgrade) {
        return Ok(pd);
    }
    let ctx: Arc<Context> = rverbs_provider::open_by_name(dev)?;
    let pd = Pd::alloc(&ctx)?;
    map.insert(dev.to_string(), Arc::downgrade(&pd));
    Ok(pd)
}

/// The id's RDMA device name (known once its address is bound or resolved).
fn id_device(id: &CmId, op: &str) -> io::Result<String> {
    let q = id.query_addr()?;
    q.ib_device_name().map_err(|e| {
        Error::invalid(
            format!("{op} on rdma_cm id {}", id.handle()),
            format!("{e} (bind or resolve an address first)"),
        )
        .into()
    })
}

/// Moves `qp` to `state` with the attributes the kernel's rdma_cm gives for `id`.
fn cm_modify(id: &CmId, qp: &Qp, state: QpState) -> io::Result<()> {
    qp.modify(&id.init_qp_attr(state)?)
}

impl Endpoint<OwnCqs> {
    /// `rdma_create_qp` without CQs or PD: the device's [`default_pd`], a send CQ and a
    /// receive CQ (depths `max_send_wr` and `max_recv_wr`), each with its own completion
    /// channel, and a QP of the id's type brought to INIT (RTS for UD) with the kernel's
    /// attributes. The id must have a device (bound, resolved, or from a connection request).
    pub fn create(id: CmId, attr: &EndpointAttr) -> io::Result<Endpoint<OwnCqs>> {
        let dev = id_device(&id, "create QP")?;
        let pd = device_pd(&dev)?;
        Self::create_in(id, pd, attr)
    }

    /// As [`Endpoint::create`], in the caller's protection domain `pd` (`rdma_create_qp`
    /// with a PD), which must be on the id's device.
    pub fn create_with_pd(
        id: CmId,
        pd: &Arc<Pd>,
        attr: &EndpointAttr,
    ) -> io::Result<Endpoint<OwnCqs>> {
        let dev = id_device(&id, "create QP")?;
        let pd_dev = pd.context().name();
        if pd_dev != dev {
            return Err(Error::invalid(
                format!("create QP on rdma_cm id {}", id.handle()),
                format!("the PD is on {pd_dev}, the id's device is {dev}"),
            )
            .into());
        }
        Self::create_in(id, pd.clone(), attr)
    }

    fn create_in(id: CmId, pd: Arc<Pd>, attr: &EndpointAttr) -> io::Result<Endpoint<OwnCqs>> {
        let ctx = pd.context().clone();
        let cq_of = |depth: u32| -> io::Result<Arc<Cq>> {
            // Non-blocking (CompChannel's default): get_comp sleeps in poll() on this fd and
            // the rdma_cm channel together, so that the end of the connection ends the wait.
            let ch = CompChannel::create(&ctx)?;
            Cq::create(
                &ctx,
                depth.max(1),
                CqOptions {
                    channel: Some(ch),
                    comp_vector: 0,
                },
            )
        };
        let send_cq = cq_of(attr.caps.max_send_wr)?;
        let recv_cq = cq_of(attr.caps.max_recv_wr)?;
        Self::build(id, pd, send_cq, recv_cq, attr)
    }

    fn check_own(&self, which: &'static str) -> io::Result<&Arc<Cq>> {
        let cq = if which == "send" {
            &self.send_cq
        } else {
            &self.recv_cq
        };
        // Held by this endpoint and by its QP, nothing else.
        let holders = Arc::strong_count(cq);
        if holders != 2 {
            return Err(Error::invalid(
                format!("get_{which}_comp on rdma_cm id {}", self.id.handle()),
                format!(
                    "the {which} CQ has {} holders besides this endpoint and its QP",
                    holders.saturating_sub(2)
                ),
            )
            .into());
        }
        Ok(cq)
    }

    /// `rdma_get_send_comp`: a completed send, RDMA read or RDMA write of this id (its
    /// `wr_id` is the context given at post). Polls the send CQ; if none is there, arms the CQ,
    /// polls again (a completion that arrived before the arm raises no event), and sleeps on
    /// the CQ's channel and the id's rdma_cm channel until one arrives. The status is not
    /// checked: look at `wc.status`.
    ///
    /// When the connection ended it returns the completions of the requests posted before the
    /// end (real or flushed), then fails ([`Endpoint::drain_on_end`]): `ConnectionReset`
    /// (ECONNRESET) after DISCONNECTED, ENODEV after DEVICE_REMOVAL, `ConnectionAborted`
    /// (ECONNABORTED) after the caller moved the QP to ERR or RESET.
    pub fn get_send_comp(&self) -> io::Result<WorkCompletion> {
        self.get_comp_until("get_send_comp", true, None)?
            .ok_or_else(|| Error::protocol("get_send_comp", "woke up without a completion").into())
    }

    /// `rdma_get_recv_comp`: the same for the receive CQ.
    pub fn get_recv_comp(&self) -> io::Result<WorkCompletion> {
        self.get_comp_until("get_recv_comp", false, None)?
            .ok_or_else(|| Error::protocol("get_recv_comp", "woke up without a completion").into())
    }

    /// [`Endpoint::get_send_comp`] waiting at most `timeout`: `Ok(None)` when no completion
    /// came in time (and the connection did not end).
    pub fn get_send_comp_timeout(&self, timeout: Duration) -> io::Result<Option<WorkCompletion>> {
        self.get_comp_until("get_send_comp", true, Some(Instant::now() + timeout))
    }

    /// [`Endpoint::get_recv_comp`] waiting at most `timeout`: `Ok(None)` when no completion
    /// came in time (and the connection did not end).
    pub fn get_recv_comp_timeout(&self, timeout: Duration) -> io::Result<Option<WorkCompletion>> {
        self.get_comp_until("get_recv_comp", false, Some(Instant::now() + timeout))
    }

    /// The send CQ (its own, never shared; for polling and arming from an event loop).
    pub fn send_cq(&self) -> &Cq {
        &self.send_cq
    }

    /// The receive CQ (its own, never shared).
    pub fn recv_cq(&self) -> &Cq {
        &self.recv_cq
    }

    /// The send CQ's completion channel (for an event loop: see [`CompChannel`]'s readiness
    /// protocol).
    pub fn send_channel(&self) -> &Arc<CompChannel> {
        self.send_cq
            .channel()
            .expect("an Endpoint<OwnCqs> has its channels")
    }

    /// The receive CQ's completion channel.
    pub fn recv_channel(&self) -> &Arc<CompChannel> {
        self.recv_cq
            .channel()
            .expect("an Endpoint<OwnCqs> has its channels")
    }

    /// The fd of the send CQ's completion channel (non-blocking; readable when the armed CQ
    /// got a completion).
    pub fn send_comp_fd(&self) -> BorrowedFd<'_> {
        self.send_channel().as_fd()
    }

    /// The fd of the receive CQ's completion channel.
    pub fn recv_comp_fd(&self) -> BorrowedFd<'_> {
        self.recv_channel().as_fd()
    }
}

impl Endpoint<UserCqs> {
    /// `rdma_create_qp` with caller-supplied CQs (possibly shared with other ids, or one CQ
    /// for both directions). The blocking helpers are not available on such an endpoint.
    pub fn with_cqs(
        id: CmId,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        attr: &EndpointAttr,
    ) -> io::Result<Endpoint<UserCqs>> {
        Self::build(id, pd.clone(), send_cq.clone(), recv_cq.clone(), attr)
    }

    /// Turns this endpoint into one with `get_send_comp` / `get_recv_comp`, if its CQs allow:
    /// separate for sends and receives, used by no other QP or holder, each with a completion
    /// channel of its own. Otherwise returns it with an error saying which rule failed.
    pub fn into_own_cqs(self) -> Result<Endpoint<OwnCqs>, (io::Error, Box<Self>)> {
        let op = || format!("use get_send_comp on rdma_cm id {}", self.id.handle());
        let problem = if Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            Some("sends and receives share one CQ (a combined CQ)".to_string())
        } else if Arc::strong_count(&self.send_cq) != 2 || Arc::strong_count(&self.recv_cq) != 2 {
            Some(format!(
                "a CQ is shared: send CQ has {} holders, receive CQ {} (want 2 each: the \
                 endpoint and its QP)",
                Arc::strong_count(&self.send_cq),
                Arc::strong_count(&self.recv_cq)
            ))
        } else {
            match (self.send_cq.channel(), self.recv_cq.channel()) {
                (Some(a), Some(b)) if !Arc::ptr_eq(a, b) => None,
                (Some(_), Some(_)) => Some("both CQs report to one completion channel".into()),
                _ => Some("a CQ has no completion channel to sleep on".into()),
            }
        };
        match problem {
            Some(p) => {
                let e = Error::invalid(op(), p).into();
                Err((e, Box::new(self)))
            }
            None => {
                let Endpoint {
                    qp,
                    send_cq,
                    recv_cq,
                    pd,
                    id,
                    drained,
                    ..
                } = self;
                Ok(Endpoint {
                    qp,
                    send_cq,
                    recv_cq,
                    pd,
                    id,
                    drained,
                    _own: PhantomData,
                })
            }
        }
    }
}

impl<C: CqOwnership> Endpoint<C> {
    fn build(
        id: CmId,
        pd: Arc<Pd>,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        attr: &EndpointAttr,
    ) -> io::Result<Endpoint<C>> {
        // Connection parameters default to what the device allows (librdmacm does the same).
        let dev = pd.context().query_device()?;
        id.set_rd_atomic_max(
            dev.max_qp_init_rd_atom.min(255) as u8,
            dev.max_qp_rd_atom.min(255) as u8,
        );
        let qp = Qp::create(
            &pd,
            QpInit {
                qp_type: id.qp_type(),
                send_cq: send_cq.clone(),
                recv_cq: recv_cq.clone(),
                srq: None,
                caps: attr.caps,
                sq_sig_all: attr.sq_sig_all,
            },
        )?;
        // As librdmacm: a connected QP goes to INIT now (receives can then be posted before
        // connecting); a UD QP all the way to RTS.
        cm_modify(&id, &qp, QpState::INIT)?;
        if id.qp_type() == QpType::UD {
            // INIT_QP_ATTR answers a UD id with its INIT attributes (P_Key index, port,
            // Q_Key) whatever state is asked; the kernel refuses those on INIT→RTR. Like
            // librdmacm (`ucma_init_ud_qp`): RTR with the state alone, RTS with SQ PSN 0.
            qp.modify(&QpAttr {
                qp_state: Some(QpState::RTR),
                ..Default::default()
            })?;
            qp.modify(&QpAttr {
                qp_state: Some(QpState::RTS),
                sq_psn: Some(0),
                ..Default::default()
            })?;
        }
        Ok(Endpoint {
            qp,
            send_cq,
            recv_cq,
            pd,
            id,
            drained: AtomicBool::new(false),
            _own: PhantomData,
        })
    }

    /// The endpoint's QP (librdmacm's `id->qp`): for posting what the helpers below do not
    /// cover. It is locked like every QP; the endpoint keeps it connected and destroys it.
    pub fn qp(&self) -> &Arc<Qp> {
        &self.qp
    }

    /// The rdma_cm id.
    pub fn id(&self) -> &CmId {
        &self.id
    }
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }
    /// The QP's capacities as the kernel granted them.
    pub fn caps(&self) -> QpCaps {
        self.qp.caps()
    }
    /// The protection domain: the device's [`default_pd`] (shared by the endpoints of a
    /// device) unless the endpoint was created with a PD of the caller's.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }
    /// The QP's state as this endpoint last set it ([`Qp::cached_state`]: no system call; the
    /// kernel may have moved it to ERR since).
    pub fn cached_qp_state(&self) -> QpState {
        self.qp.cached_state()
    }

    /// Joins the multicast group `addr` ([`CmId::join_multicast`]) and, on a synchronous id,
    /// attaches the endpoint's UD QP to the group the MULTICAST_JOIN event names (what
    /// librdmacm's `rdma_join_multicast` does on an id with a QP), returning the event's UD
    /// parameters: [`UdEventParam::ah`] and `qkey` address the group for sending. On an
    /// asynchronous id the join is only issued (`None`): pass its MULTICAST_JOIN event to
    /// [`Endpoint::attach_multicast`]. A send-only join attaches nothing.
    pub fn join_multicast(
        &self,
        addr: SocketAddr,
        flags: McJoinFlags,
    ) -> io::Result<Option<UdEventParam>> {
        let Some(ud) = self.id.join_multicast(addr, flags)? else {
            return Ok(None);
        };
        if flags != McJoinFlags::SENDONLY_FULL_MEMBER {
            let mc_id = self.id.multicast_handle(addr).unwrap_or(u32::MAX);
            if let Err(e) = self.attach(mc_id, &ud) {
                if let Err(l) = self.id.leave_multicast(addr) {
                    tracing::warn!("leaving {} after the failed attach: {l}", addr.ip());
                }
                return Err(e);
            }
        }
        Ok(Some(ud))
    }

    /// Attaches the endpoint's QP to the group of `ev`, a MULTICAST_JOIN event of this
    /// endpoint's id (asynchronous ids; see [`Endpoint::join_multicast`]), and returns its UD
    /// parameters. Refuses any other event.
    pub fn attach_multicast(&self, ev: &CmEvent) -> io::Result<UdEventParam> {
        let op = || format!("attach_multicast on rdma_cm id {}", self.id.handle());
        let joined = (ev.kind() == CmEventKind::MULTICAST_JOIN && ev.is_for(&self.id))
            .then(|| self.id.joined_by_handle(ev.id_handle()))
            .flatten();
        let (Some(_), Some(ud)) = (joined, ev.ud()) else {
            return Err(Error::invalid(
                op(),
                format!("{ev} is not a MULTICAST_JOIN of a group this id joined"),
            )
            .into());
        };
        self.attach(ev.id_handle(), &ud)?;
        Ok(ud)
    }

    fn attach(&self, mc_id: u32, ud: &UdEventParam) -> io::Result<()> {
        let (gid, lid) = ud.mcast_group();
        self.qp.attach_mcast(&gid, lid)?;
        self.id.set_attached(mc_id, Some((gid, lid)));
        Ok(())
    }

    /// Detaches the endpoint's QP from the group `addr` (if [`Endpoint::join_multicast`] or
    /// [`Endpoint::attach_multicast`] attached it) and leaves the group
    /// ([`CmId::leave_multicast`]): no more datagrams of the group arrive after this returns.
    pub fn leave_multicast(&self, addr: SocketAddr) -> io::Result<u32> {
        if let Some(j) = self
            .id
            .multicast_handle(addr)
            .and_then(|h| self.id.joined_by_handle(h))
        {
            if let Some((gid, lid)) = j.attached {
                self.qp.detach_mcast(&gid, lid)?;
                self.id.set_attached(j.mc_id, None);
            }
        }
        self.id.leave_multicast(addr)
    }

    /// Whether the connection has ended: the rdma_cm reported DISCONNECTED or DEVICE_REMOVAL
    /// for the id (as far as its channel's dispatcher has read), or the QP was moved to ERR
    /// or RESET through this endpoint (a move to ERR made by a completion wait after the
    /// event reports the event). Completions may still be queued.
    pub fn ended(&self) -> Option<EndReason> {
        let st = self.qp.cached_state();
        // Relaxed: set before the wait's own modify, by the thread that reads it next.
        let by_wait = self.drained.load(Ordering::Relaxed);
        if st == QpState::RESET || (st == QpState::ERR && !by_wait) {
            return Some(EndReason::Qp(st));
        }
        if let Some((k, s)) = self.id.end_event() {
            return Some(EndReason::Event(k, s));
        }
        (st == QpState::ERR).then_some(EndReason::Qp(st))
    }

    /// `rdma_connect` with the QP: REQ, then RTR and RTS with the kernel's attributes when
    /// the REP arrives, then RTU. `param.qp_num` is filled in.
    pub fn connect(&self, param: &ConnParam) -> io::Result<()> {
        self.expect_init("connect")?;
        let mut p = param.clone();
        p.qp_num = self.qp.qp_num();
        if self.id.qp_type() == QpType::UD {
            return self.id.connect(&p);
        }
        self.id.connect_with(&p, |_id, _ev| self.to_rts())?;
        if self.id.is_sync() {
            // On iWARP the iw_cm connected the QP to RTS itself and reported ESTABLISHED (the
            // hook above did not run): record the state.
            return self.established();
        }
        Ok(())
    }

    /// For asynchronous ids (an event loop waits for the events): sends the REQ announcing the
    /// QP and returns at once. On the answer ([`Endpoint::connect_answer`]: CONNECT_RESPONSE,
    /// or ESTABLISHED on iWARP) call [`Endpoint::complete_connect`]; on a UD id, ESTABLISHED
    /// ends the connect.
    pub fn start_connect(&self, param: &ConnParam) -> io::Result<()> {
        self.expect_init("connect")?;
        if self.id.is_sync() {
            return Err(Error::invalid(
                format!("start_connect on rdma_cm id {}", self.id.handle()),
                "the id is synchronous: use connect, which waits for the response itself",
            )
            .into());
        }
        let mut p = param.clone();
        p.qp_num = self.qp.qp_num();
        self.id.connect(&p)
    }

    /// The event that answers [`Endpoint::start_connect`] on this endpoint's id:
    /// CONNECT_RESPONSE for an RC QP on InfiniBand and RoCE; ESTABLISHED for a UD id, and for
    /// an RC QP on iWARP, where the iw_cm connects the QP over its LLP (TCP) and moves it to
    /// RTS itself (no RTU follows).
    pub fn connect_answer(&self) -> CmEventKind {
        if self.id.qp_type() == QpType::UD || self.is_iwarp() {
            CmEventKind::ESTABLISHED
        } else {
            CmEventKind::CONNECT_RESPONSE
        }
    }

    /// After the answer ([`Endpoint::connect_answer`]) on an asynchronous RC id: on
    /// InfiniBand and RoCE the QP to INIT, RTR and RTS with the kernel's attributes, then the
    /// RTU ([`CmId::establish`]); on iWARP, whose answer is ESTABLISHED, records the RTS the
    /// iw_cm moved the QP to ([`Endpoint::established`]).
    pub fn complete_connect(&self) -> io::Result<()> {
        if self.is_iwarp() {
            return self.established();
        }
        self.to_rts()?;
        self.id.establish()
    }

    /// INIT again first, as librdmacm does (now that the connection exists the kernel's INIT
    /// attributes carry the access rights the peer's resources allow), then RTR and RTS, each
    /// with the kernel's attributes.
    fn to_rts(&self) -> io::Result<()> {
        cm_modify(&self.id, &self.qp, QpState::INIT)?;
        cm_modify(&self.id, &self.qp, QpState::RTR)?;
        cm_modify(&self.id, &self.qp, QpState::RTS)
    }

    /// After this id's ESTABLISHED (asynchronous ids: when their event loop sees it; the
    /// synchronous `connect` and `accept` call it themselves): on iWARP the iw_cm has moved
    /// the QP to RTS, and this records it (a modify to RTS, a no-op for the kernel), so that
    /// sends are accepted. Elsewhere the QP is in RTS already and this does nothing.
    pub fn established(&self) -> io::Result<()> {
        if !self.is_iwarp() {
            return Ok(());
        }
        self.qp.modify(&vqp::QpAttr {
            qp_state: Some(QpState::RTS),
            ..Default::default()
        })
    }

    /// `rdma_accept` with the QP: RTR and RTS with the kernel's attributes, then REP.
    pub fn accept(&self, param: &ConnParam) -> io::Result<()> {
        self.expect_init("accept")?;
        let mut p = param.clone();
        p.qp_num = self.qp.qp_num();
        if self.id.qp_type() != QpType::UD {
            cm_modify(&self.id, &self.qp, QpState::INIT)?;
            cm_modify(&self.id, &self.qp, QpState::RTR)?;
            cm_modify(&self.id, &self.qp, QpState::RTS)?;
        }
        self.id.accept(&p)?;
        if self.id.is_sync() {
            // ESTABLISHED came (`CmId::accept` waited for it): on iWARP the iw_cm has moved
            // the QP to RTS.
            return self.established();
        }
        Ok(())
    }

    /// The QP is on an iWARP device (siw, irdma, cxgb4): the iw_cm connects it.
    fn is_iwarp(&self) -> bool {
        self.qp.pd().context().device().transport() == rverbs_uverbs::device::Transport::IWARP
    }

    /// Connected QPs are connected once: connect/accept need the QP still in INIT.
    fn expect_init(&self, op: &str) -> io::Result<()> {
        let st = self.qp.cached_state();
        if self.id.qp_type() != QpType::UD && st != QpState::INIT {
            return Err(Error::invalid(
                format!("{op} on rdma_cm id {}", self.id.handle()),
                format!("the QP is in {st}, not INIT: already connected or accepted"),
            )
            .into());
        }
        Ok(())
    }

    /// `rdma_disconnect`: the QP to ERR (flushing what is posted), then DREQ/DREP.
    pub fn disconnect(&self) -> io::Result<()> {
        self.qp.modify(&vqp::QpAttr {
            qp_state: Some(QpState::ERR),
            ..Default::default()
        })?;
        self.id.disconnect()
    }

    /// `rdma_reg_msgs`: registers `mem` for local send/receive (LOCAL_WRITE).
    pub fn reg_msgs<M: MrMemory + 'static>(&self, mem: M) -> Result<Mr<M>, RegisterError<M>> {
        Mr::register(&self.pd, mem, AccessFlags::LOCAL_WRITE)
    }

    /// `rdma_reg_read`: registers `mem` so the peer may RDMA READ it.
    pub fn reg_read<M: MrMemory + 'static>(&self, mem: M) -> Result<Mr<M>, RegisterError<M>> {
        Mr::register(
            &self.pd,
            mem,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
    }

    /// `rdma_reg_write`: registers `mem` so the peer may RDMA WRITE it.
    pub fn reg_write<M: MrMemory + 'static>(&self, mem: M) -> Result<Mr<M>, RegisterError<M>> {
        Mr::register(
            &self.pd,
            mem,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
    }

    /// Registers `mem` so the peer may both RDMA READ and RDMA WRITE it (one registration,
    /// where librdmacm needs `ibv_reg_mr` with both flags).
    pub fn reg_remote<M: MrMemory + 'static>(&self, mem: M) -> Result<Mr<M>, RegisterError<M>> {
        Mr::register(
            &self.pd,
            mem,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )
    }

    fn post_one(&self, wr: MrSendWr<'_>) -> io::Result<()> {
        self.check_wr_id(wr.wr_id, PostQueue::Send)?;
        self.qp.post_send(&[wr]).map_err(io::Error::from)
    }

    /// The post helpers refuse the wr_id of the completion waits' end marker.
    fn check_wr_id(&self, wr_id: u64, queue: PostQueue) -> io::Result<()> {
        if wr_id != END_MARKER {
            return Ok(());
        }
        let what = format!(
            "wr_id {wr_id:#x} is END_MARKER, reserved for the end marker of the \
             completion waits: use another"
        );
        let e =
            PostError::invalid(0, what).at(self.qp.pd().context().name(), queue, self.qp.qp_num());
        Err(e.into())
    }

    /// `rdma_post_send`: sends `sge` with `wr_id` as the completion's context. Keep the
    /// regions alive until the completion is retrieved to get the data sent (see
    /// [`Qp::post_send`]).
    pub fn post_send(&self, wr_id: u64, sge: &[MrSge<'_>], flags: SendFlags) -> io::Result<()> {
        self.post_one(SendWr {
            wr_id,
            op: SendOp::Send,
            sge,
            flags,
            ud: None,
        })
    }

    /// Sends `data` inline (copied into the work request at post time, so no MR is needed).
    /// Fails if `data` is longer than the QP's `max_inline_data`.
    pub fn post_send_inline(&self, wr_id: u64, data: &[u8], flags: SendFlags) -> io::Result<()> {
        self.check_wr_id(wr_id, PostQueue::Send)?;
        let max = self.qp.caps().max_inline_data as usize;
        if data.len() > max {
            let what = format!(
                "{} bytes of inline data, the QP's max_inline_data is {max}",
                data.len()
            );
            let e = PostError::invalid(0, what).at(
                self.qp.pd().context().name(),
                PostQueue::Send,
                self.qp.qp_num(),
            );
            return Err(e.into());
        }
        // The provider copies INLINE sources with byte-wise atomics (they may be registered
        // memory someone writes); `data` is not, so it is first copied plainly into a private
        // buffer those copies may use under both aliasing models (see `inline`).
        inline::with_private_copy(data, |sge| {
            // SAFETY: with INLINE the bytes are copied into the WQE during the call (length
            // checked against max_inline_data above), so only the SGE's bytes must be valid
            // meanwhile: the private copy, alive and written by no one until `post` returns.
            unsafe {
                self.qp.post_send_raw(&[SendWr {
                    wr_id,
                    op: SendOp::Send,
                    sge,
                    flags: flags | SendFlags::INLINE,
                    ud: None,
                }])
            }
        })
        .map_err(io::Error::from)
    }

    /// `rdma_post_recv`: a receive into `sge` with `wr_id` as the completion's context.
    pub fn post_recv(&self, wr_id: u64, sge: &[MrSge<'_>]) -> io::Result<()> {
        self.check_wr_id(wr_id, PostQueue::Recv)?;
        self.qp
            .post_recv(&[RecvWr { wr_id, sge }])
            .map_err(|e: PostError| io::Error::from(e))
    }

    /// `rdma_post_read`: RDMA READ of `remote_addr`/`rkey` into `sge`.
    pub fn post_read(
        &self,
        wr_id: u64,
        sge: &[MrSge<'_>],
        remote_addr: u64,
        rkey: u32,
        flags: SendFlags,
    ) -> io::Result<()> {
        self.post_one(SendWr {
            wr_id,
            op: SendOp::RdmaRead { remote_addr, rkey },
            sge,
            flags,
            ud: None,
        })
    }

    /// `rdma_post_write`: RDMA WRITE of `sge` to `remote_addr`/`rkey`.
    pub fn post_write(
        &self,
        wr_id: u64,
        sge: &[MrSge<'_>],
        remote_addr: u64,
        rkey: u32,
        flags: SendFlags,
    ) -> io::Result<()> {
        self.post_one(SendWr {
            wr_id,
            op: SendOp::RdmaWrite { remote_addr, rkey },
            sge,
            flags,
            ud: None,
        })
    }

    /// `rdma_post_ud_send`: a UD send to `dest`.
    pub fn post_ud_send(
        &self,
        wr_id: u64,
        sge: &[MrSge<'_>],
        dest: UdDest,
        flags: SendFlags,
    ) -> io::Result<()> {
        self.post_one(SendWr {
            wr_id,
            op: SendOp::Send,
            sge,
            flags,
            ud: Some(dest),
        })
    }
}
