//! The verbs objects of one run (context, PD, MR, CQ, an RC QP in INIT, the optional
//! completion channel), this side's address, and the QP's connection to the peer's.

use std::sync::Arc;

use rverbs::rc::{RcPath, RcRemote};
use rverbs::uverbs::ah::{AhAttr, GlobalRoute};
use rverbs::uverbs::channel::CompChannel;
use rverbs::uverbs::context::Context;
use rverbs::uverbs::cq::{Cq, CqOptions};
use rverbs::uverbs::gid::Gid;
use rverbs::uverbs::mr::{AccessFlags, Mr, PageBuf};
use rverbs::uverbs::pd::Pd;
use rverbs::uverbs::port::{LinkLayer, PortAttr};
use rverbs::uverbs::qp::QpCaps;
use rverbs::uverbs::qp::{Qp, QpInit};
use rverbs::uverbs::SendFlags;

use super::exchange::Dest;
use super::opts::Opts;
use crate::CmdResult;

/// Everything a run creates, in the order the C tool creates it. Field order is drop order,
/// the C tool's teardown order: QP, CQ, MR, PD, channel, context. The MR goes after the QP,
/// so the device never writes to a buffer whose registration is gone while receives are
/// still posted.
pub(super) struct Resources {
    pub(super) qp: Arc<Qp>,
    pub(super) cq: Arc<Cq>,
    pub(super) mr: Mr<PageBuf>,
    /// Kept to be dropped in the C tool's order (after the MR, before the channel).
    _pd: Arc<Pd>,
    pub(super) channel: Option<Arc<CompChannel>>,
    pub(super) ctx: Arc<Context>,
    /// The port of `-i`, queried before anything is created.
    pub(super) port: PortAttr,
    /// SIGNALED, and INLINE when the QP can inline a whole message.
    pub(super) send_flags: SendFlags,
}

impl Resources {
    /// Opens the device and creates the objects: a buffer of `-s` bytes filled with 0x7b,
    /// PD, MR, CQ (rx_depth + 1 entries), an RC QP (1 send WR, rx_depth receive WRs, 1 SGE
    /// each) moved to INIT.
    pub(super) fn create(o: &Opts) -> Result<Resources, Box<dyn std::error::Error>> {
        let ctx = match &o.ib_dev {
            Some(name) => rverbs::provider::open_by_name(name)?,
            None => rverbs::provider::open_first()?,
        };
        // Queried first (the C tool asks after creating its objects): a port that does not
        // exist is then reported as such, not as a failed QP transition.
        let port = ctx
            .query_port(u32::from(o.ib_port))
            .map_err(|e| format!("Couldn't get port info: {e}"))?;
        let mut buf = PageBuf::new(o.size as usize)?;
        buf.as_mut_slice().fill(0x7b);
        let channel = if o.events {
            Some(CompChannel::create(&ctx)?)
        } else {
            None
        };
        let pd = Pd::alloc(&ctx)?;
        let mr = Mr::register(&pd, buf, AccessFlags::LOCAL_WRITE)?;
        let cq = Cq::create(
            &ctx,
            o.rx_depth + 1,
            CqOptions {
                channel: channel.clone(),
                comp_vector: 0,
            },
        )?;
        let qp: Arc<Qp> = Qp::create(
            &pd,
            QpInit::rc(
                &cq,
                QpCaps {
                    max_send_wr: 1,
                    max_recv_wr: o.rx_depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
            ),
        )?;
        let mut send_flags = SendFlags::SIGNALED;
        if qp.caps().max_inline_data >= o.size {
            send_flags |= SendFlags::INLINE;
        }
        rverbs::rc::to_init(&qp, &path(o))
            .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
        Ok(Resources {
            qp,
            cq,
            mr,
            _pd: pd,
            channel,
            ctx,
            port,
            send_flags,
        })
    }

    /// This side's address: LID (an InfiniBand port must have one), QP number, a random PSN,
    /// and the GID of `-g` (zero without it).
    pub(super) fn local_dest(&self, o: &Opts) -> Result<Dest, Box<dyn std::error::Error>> {
        if self.port.link_layer != LinkLayer::ETHERNET && self.port.lid == 0 {
            return Err(format!(
                "Couldn't get local LID: port {} of {} has LID 0 (is the subnet manager \
                 running?)",
                o.ib_port,
                self.ctx.name()
            )
            .into());
        }
        let gid = match o.gid_idx {
            Some(i) => {
                self.ctx
                    .query_gid(u32::from(o.ib_port), i)
                    .map_err(|e| format!("can't read sgid of index {i}: {e}"))?
                    .gid
            }
            None => Gid::default(),
        };
        Ok(Dest {
            lid: self.port.lid,
            qpn: self.qp.qp_num(),
            psn: random_psn(),
            gid,
        })
    }

    /// Moves the QP to RTR towards `rem`, then to RTS with our PSN `my_psn`.
    pub(super) fn connect_qp(&self, o: &Opts, my_psn: u32, rem: &Dest) -> CmdResult {
        // A GRH is used when the peer has a GID (as the C tool: its interface id is not zero).
        let grh = (rem.gid.0[8..] != [0; 8]).then(|| GlobalRoute {
            dgid: rem.gid.0,
            flow_label: 0,
            sgid_index: o.gid_idx.unwrap_or(0) as u8,
            hop_limit: 1,
            traffic_class: 0,
        });
        let remote = RcRemote {
            qp_num: rem.qpn,
            psn: rem.psn,
            ah: AhAttr {
                dlid: rem.lid,
                sl: o.sl,
                src_path_bits: 0,
                static_rate: 0,
                port_num: o.ib_port,
                grh,
            },
        };
        let path = path(o);
        rverbs::rc::to_rtr(&self.qp, &path, &remote).map_err(|e| {
            let hint = if self.port.link_layer == LinkLayer::ETHERNET
                && (grh.is_none() || o.gid_idx.is_none())
            {
                " (RoCE needs GIDs: give -g <GID index> on both sides; `rverbs devinfo -v` \
                 lists the GID table)"
            } else {
                ""
            };
            format!("Failed to modify QP to RTR: {e}{hint}")
        })?;
        rverbs::rc::to_rts(&self.qp, &path, my_psn)
            .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
        Ok(())
    }
}

/// The connection's local choices: the C tool's (no remote access, one outstanding RDMA
/// READ/atomic each way, timeout 14, 7 retries, RNR timer 12) on port `-i` with MTU `-m`.
fn path(o: &Opts) -> RcPath {
    RcPath {
        port_num: o.ib_port,
        path_mtu: o.mtu,
        ..RcPath::default()
    }
}

/// A random 24-bit PSN (lrand48() & 0xffffff in the C tool).
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}
