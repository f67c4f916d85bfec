//! Address vectors and address handles (for UD).

use std::fmt;
use std::net::Ipv6Addr;
use std::sync::Arc;

use zerocopy::{FromBytes, IntoBytes};

use crate::abi::cmd::nr;
use crate::abi::ioctl::{ah, object};
use crate::abi::obj::ib_uverbs_destroy_ah;
use crate::abi::obj::{
    ib_uverbs_ah_attr, ib_uverbs_create_ah, ib_uverbs_create_ah_resp, ib_uverbs_global_route,
    ib_uverbs_qp_dest,
};
use crate::context::M_DESTROY_AH;
use crate::error::{Error, Result};
use crate::ioctl::IoctlCall;
use crate::pd::Pd;
use crate::write;

/// The global route header of an address vector (mandatory on RoCE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID (for RoCE v2 over IPv4: `::ffff:a.b.c.d`).
    pub dgid: [u8; 16],
    pub flow_label: u32,
    /// Index of our own GID to send from.
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

impl GlobalRoute {
    /// The destination GID as an IPv6 address.
    pub fn dgid_addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.dgid)
    }
}

/// An address vector (`ibv_ah_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub port_num: u8,
    pub grh: Option<GlobalRoute>,
}

impl AhAttr {
    /// A RoCE address vector: port, destination GID, our GID index.
    pub fn roce(port_num: u8, dgid: [u8; 16], sgid_index: u8) -> Self {
        Self {
            port_num,
            grh: Some(GlobalRoute {
                dgid,
                sgid_index,
                hop_limit: 64,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(crate) fn to_qp_dest(self) -> ib_uverbs_qp_dest {
        let g = self.grh.unwrap_or_default();
        ib_uverbs_qp_dest {
            dgid: g.dgid,
            flow_label: g.flow_label,
            dlid: self.dlid,
            reserved: 0,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: u8::from(self.grh.is_some()),
            port_num: self.port_num,
        }
    }

    pub(crate) fn from_qp_dest(d: &ib_uverbs_qp_dest) -> Self {
        Self {
            dlid: d.dlid,
            sl: d.sl,
            src_path_bits: d.src_path_bits,
            static_rate: d.static_rate,
            port_num: d.port_num,
            grh: (d.is_global != 0).then_some(GlobalRoute {
                dgid: d.dgid,
                flow_label: d.flow_label,
                sgid_index: d.sgid_index,
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
            }),
        }
    }

    fn to_abi(self) -> ib_uverbs_ah_attr {
        let g = self.grh.unwrap_or_default();
        ib_uverbs_ah_attr {
            grh: ib_uverbs_global_route {
                dgid: g.dgid,
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
                reserved: 0,
            },
            dlid: self.dlid,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: u8::from(self.grh.is_some()),
            port_num: self.port_num,
            reserved: 0,
        }
    }
}

/// An address handle: where UD sends go.
pub struct Ah {
    pd: Arc<Pd>,
    handle: u32,
    ah_num: u32,
    attr: AhAttr,
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ah")
            .field("handle", &self.handle)
            .field("ah_num", &self.ah_num)
            .field("attr", &self.attr)
            .finish()
    }
}

impl Ah {
    /// Creates an address handle.
    pub fn create(pd: &Arc<Pd>, attr: AhAttr) -> Result<Arc<Ah>> {
        let ctx = pd.context();
        let op = || {
            let to = attr
                .grh
                .map(|g| g.dgid_addr().to_string())
                .unwrap_or_else(|| format!("LID {}", attr.dlid));
            let sgid = attr
                .grh
                .map(|g| format!(" from GID index {}", g.sgid_index))
                .unwrap_or_default();
            format!(
                "create AH to {to}{sgid} on {} port {}",
                ctx.name(),
                attr.port_num
            )
        };
        let driver = ctx.driver()?;
        let user_handle = crate::util::next_user_handle();
        let mut handle: Option<u32> = None;
        let res = driver.create_ah_for(&attr, &mut |uhw_in, uhw_out| {
            let req = ib_uverbs_create_ah {
                response: 0,
                user_handle,
                pd_handle: pd.handle(),
                reserved: 0,
                attr: attr.to_abi(),
            };
            let core_len = size_of::<ib_uverbs_create_ah_resp>();
            let mut resp = vec![0u8; core_len + uhw_out.len()];
            write::cmd_legacy(
                ctx.cmd_fd(),
                nr::CREATE_AH,
                req.as_bytes(),
                uhw_in,
                &mut resp,
            )
            .map_err(|e| {
                let mut err = Error::os(op(), e);
                if e == rustix::io::Errno::INVAL {
                    err = err.with_detail("check the port and that the GID index exists");
                }
                err
            })?;
            let r = ib_uverbs_create_ah_resp::read_from_prefix(&resp)
                .map(|(r, _)| r)
                .map_err(|_| Error::protocol(op(), "short response"))?;
            uhw_out.copy_from_slice(&resp[core_len..]);
            handle = Some(r.ah_handle);
            Ok(r.ah_handle)
        });
        match res {
            Ok(ah_num) => Ok(Arc::new(Ah {
                pd: pd.clone(),
                handle: handle.expect("provider built an AH without creating it"),
                ah_num,
                attr,
            })),
            Err(e) => {
                if let Some(h) = handle {
                    let _ = destroy_ah(pd, h);
                }
                Err(e)
            }
        }
    }

    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// The provider's number for this AH (what UD work requests carry).
    pub fn ah_num(&self) -> u32 {
        self.ah_num
    }
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The destination for a UD send through this AH.
    pub fn ud_dest(&self, remote_qpn: u32, remote_qkey: u32) -> crate::wr::UdDest {
        crate::wr::UdDest {
            ah_num: self.ah_num,
            ah_handle: self.handle,
            remote_qpn,
            remote_qkey,
        }
    }
}

fn destroy_ah(pd: &Pd, handle: u32) -> Result<()> {
    let ctx = pd.context();
    let mut c = IoctlCall::new(object::AH, ah::METHOD_DESTROY);
    c.idr(ah::ATTR_DESTROY_HANDLE, handle);
    let r = match ctx.try_ioctl(M_DESTROY_AH, &mut c) {
        Ok(true) => Ok(()),
        Ok(false) => {
            let req = ib_uverbs_destroy_ah { ah_handle: handle };
            write::cmd_legacy(ctx.cmd_fd(), nr::DESTROY_AH, req.as_bytes(), &[], &mut [])
        }
        Err(e) => Err(e),
    };
    r.map_err(|e| Error::os(format!("destroy AH {handle} on {}", ctx.name()), e).into())
}

impl Drop for Ah {
    fn drop(&mut self) {
        if let Err(e) = destroy_ah(&self.pd, self.handle) {
            tracing::error!("{e}");
        }
    }
}
