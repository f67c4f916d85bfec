//! RDMA netlink (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`): the kernel's device, port and link
//! interface, the one `rdma link` and rdma-core's device discovery use.
//!
//! What rverbs uses it for:
//! - [`RdmaNetlink::devices`] (`RDMA_NLDEV_CMD_GET` dump): device index, name, GUIDs, …;
//! - [`RdmaNetlink::ports`] (`RDMA_NLDEV_CMD_PORT_GET` dump): port state and netdev;
//! - [`RdmaNetlink::chardev`] (`RDMA_NLDEV_CMD_GET_CHARDEV`): the uverbs char device of a
//!   device and its **driver id**, which sysfs does not show;
//! - [`RdmaNetlink::link_add`] / [`RdmaNetlink::link_delete`] (`RDMA_NLDEV_CMD_NEWLINK` /
//!   `DELLINK`): create and remove soft-RoCE (`rxe`) and `siw` devices.
//!
//! The socket is a plain `AF_NETLINK`/`SOCK_RAW` socket made with rustix; messages and
//! attributes are encoded and decoded here (`MsgBuilder`, `messages`, `attrs`).

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::io::Errno;
use rustix::net::netlink::SocketAddrNetlink;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use zerocopy::{FromBytes, IntoBytes};

use crate::error::Error;
use crate::kernel::abi::netlink::{
    attr, cmd, nlattr, nlmsgerr, nlmsghdr, rdma_nl_get_type, NLA_ALIGNTO, NLMSG_ALIGNTO,
    NLMSG_DONE, NLMSG_ERROR, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST,
    RDMA_NLA_TYPE_MASK, RDMA_NL_NLDEV,
};
use crate::values::DriverId;
use crate::values::{PhysState, PortState};

const fn align(n: usize, to: usize) -> usize {
    (n + to - 1) & !(to - 1)
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// Builds one netlink message: header, then attributes, each padded to 4 bytes.
#[derive(Debug, Clone)]
pub(crate) struct MsgBuilder {
    buf: Vec<u8>,
}

impl MsgBuilder {
    /// A message of netlink type `ty` (for RDMA: `rdma_nl_get_type`).
    pub(crate) fn new(ty: u16, flags: u16, seq: u32) -> Self {
        let hdr = nlmsghdr {
            nlmsg_len: 0,
            nlmsg_type: ty,
            nlmsg_flags: flags,
            nlmsg_seq: seq,
            nlmsg_pid: 0,
        };
        Self {
            buf: hdr.as_bytes().to_vec(),
        }
    }

    /// Appends an attribute with a raw payload.
    pub(crate) fn put_bytes(&mut self, ty: u16, payload: &[u8]) -> &mut Self {
        let len = size_of::<nlattr>() + payload.len();
        let hdr = nlattr {
            nla_len: u16::try_from(len).expect("netlink attribute over 64 KiB"),
            nla_type: ty,
        };
        self.buf.extend_from_slice(hdr.as_bytes());
        self.buf.extend_from_slice(payload);
        self.buf.resize(align(self.buf.len(), NLA_ALIGNTO), 0);
        self
    }

    /// Appends a u32 attribute.
    pub(crate) fn put_u32(&mut self, ty: u16, v: u32) -> &mut Self {
        self.put_bytes(ty, &v.to_ne_bytes())
    }

    /// Appends a u64 attribute.
    #[cfg(any(test, rverbs_fuzzing))] // the fuzz targets' and tests' message builders
    pub(crate) fn put_u64(&mut self, ty: u16, v: u64) -> &mut Self {
        self.put_bytes(ty, &v.to_ne_bytes())
    }

    /// Appends a NUL-terminated string attribute (`NLA_NUL_STRING`).
    pub(crate) fn put_str(&mut self, ty: u16, s: &str) -> &mut Self {
        let mut v = Vec::with_capacity(s.len() + 1);
        v.extend_from_slice(s.as_bytes());
        v.push(0);
        self.put_bytes(ty, &v)
    }

    /// The finished message with its length filled in.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

/// A malformed netlink message or attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for io::Error {
    fn from(e: DecodeError) -> Self {
        Error::protocol("RDMA netlink", e.0).into()
    }
}

/// One netlink message: its header and payload (without the header and trailing padding).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message<'a> {
    /// The message header (type, flags, sequence number, port id).
    pub(crate) hdr: nlmsghdr,
    /// The bytes after the header, without trailing padding.
    pub(crate) payload: &'a [u8],
}

/// Splits a datagram into its messages.
pub(crate) fn messages(buf: &[u8]) -> impl Iterator<Item = Result<Message<'_>, DecodeError>> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Ok((hdr, _)) = nlmsghdr::read_from_prefix(rest) else {
            let n = rest.len();
            rest = &[];
            return Some(Err(DecodeError(format!(
                "{n} trailing bytes, shorter than a netlink header"
            ))));
        };
        let len = hdr.nlmsg_len as usize;
        if len < size_of::<nlmsghdr>() || len > rest.len() {
            let n = rest.len();
            rest = &[];
            return Some(Err(DecodeError(format!(
                "message length {len} out of range (16..={n})"
            ))));
        }
        let payload = &rest[size_of::<nlmsghdr>()..len];
        rest = &rest[align(len, NLMSG_ALIGNTO).min(rest.len())..];
        Some(Ok(Message { hdr, payload }))
    })
}

/// Decodes the `RES_SUMMARY` table of a `RES_GET` reply into (name, current count) pairs.
pub(crate) fn decode_res_summary(payload: &[u8]) -> Result<Vec<(String, u64)>, DecodeError> {
    let mut out = Vec::new();
    for a in attrs(payload) {
        let a = a?;
        if a.ty != attr::RES_SUMMARY {
            continue;
        }
        for e in attrs(a.data) {
            let e = e?;
            if e.ty != attr::RES_SUMMARY_ENTRY {
                continue;
            }
            let (mut name, mut curr) = (None, None);
            for f in attrs(e.data) {
                let f = f?;
                match f.ty {
                    attr::RES_SUMMARY_ENTRY_NAME => name = Some(f.str()?.to_string()),
                    attr::RES_SUMMARY_ENTRY_CURR => curr = Some(f.u64()?),
                    _ => {}
                }
            }
            match (name, curr) {
                (Some(n), Some(c)) => out.push((n, c)),
                _ => {
                    return Err(DecodeError(
                        "resource summary entry without name or count".into(),
                    ))
                }
            }
        }
    }
    Ok(out)
}

/// One attribute: its type (flag bits removed), whether it is nested, and its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attr<'a> {
    /// The attribute type with the NESTED and BYTEORDER flag bits removed.
    pub(crate) ty: u16,
    /// Whether the NESTED flag was set (the payload is more attributes).
    pub(crate) nested: bool,
    /// The payload, without padding.
    pub(crate) data: &'a [u8],
}

impl<'a> Attr<'a> {
    /// A u8 payload.
    pub(crate) fn u8(&self) -> Result<u8, DecodeError> {
        match self.data {
            [b, ..] => Ok(*b),
            [] => Err(self.bad("u8")),
        }
    }

    /// A u32 payload.
    pub(crate) fn u32(&self) -> Result<u32, DecodeError> {
        self.data
            .get(..4)
            .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
            .ok_or_else(|| self.bad("u32"))
    }

    /// A u64 payload; a 4-byte payload is accepted too (the kernel has used both sizes for
    /// some attributes, e.g. `UVERBS_DRIVER_ID`).
    pub(crate) fn u64(&self) -> Result<u64, DecodeError> {
        match self.data.len() {
            4 => self.u32().map(u64::from),
            n if n >= 8 => Ok(u64::from_ne_bytes(self.data[..8].try_into().unwrap())),
            _ => Err(self.bad("u64")),
        }
    }

    /// A string payload (up to the first NUL).
    pub(crate) fn str(&self) -> Result<&'a str, DecodeError> {
        let end = self
            .data
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.data.len());
        std::str::from_utf8(&self.data[..end]).map_err(|_| self.bad("UTF-8 string"))
    }

    fn bad(&self, what: &str) -> DecodeError {
        DecodeError(format!(
            "attribute {} has {} bytes, not a {what}",
            self.ty,
            self.data.len()
        ))
    }
}

/// Splits an attribute area (a message payload, or a nested attribute's payload).
pub(crate) fn attrs(buf: &[u8]) -> impl Iterator<Item = Result<Attr<'_>, DecodeError>> {
    let mut rest = buf;
    std::iter::from_fn(move || {
        if rest.len() < size_of::<nlattr>() {
            // Fewer than 4 bytes left can only be padding.
            return None;
        }
        let (hdr, _) = nlattr::read_from_prefix(rest).ok()?;
        let len = hdr.nla_len as usize;
        if len < size_of::<nlattr>() || len > rest.len() {
            let n = rest.len();
            rest = &[];
            return Some(Err(DecodeError(format!(
                "attribute {} length {len} out of range (4..={n})",
                hdr.nla_type & RDMA_NLA_TYPE_MASK
            ))));
        }
        let a = Attr {
            ty: hdr.nla_type & RDMA_NLA_TYPE_MASK,
            nested: hdr.nla_type & crate::kernel::abi::netlink::NLA_F_NESTED != 0,
            data: &rest[size_of::<nlattr>()..len],
        };
        rest = &rest[align(len, NLA_ALIGNTO).min(rest.len())..];
        Some(Ok(a))
    })
}

/// The attributes of one message, indexed by type (the last one of a type wins, as in the
/// kernel's `nla_parse`). Type 0 (`RDMA_NLDEV_ATTR_PAD`) is padding and skipped.
#[derive(Debug, Default, Clone)]
pub(crate) struct AttrTable<'a> {
    slots: Vec<Option<Attr<'a>>>,
}

impl<'a> AttrTable<'a> {
    /// Parses an attribute area.
    pub(crate) fn parse(buf: &'a [u8]) -> Result<Self, DecodeError> {
        let mut t = Self::default();
        for a in attrs(buf) {
            let a = a?;
            if a.ty == attr::PAD {
                continue;
            }
            let i = a.ty as usize;
            if t.slots.len() <= i {
                t.slots.resize(i + 1, None);
            }
            t.slots[i] = Some(a);
        }
        Ok(t)
    }

    /// The attribute of type `ty`.
    pub(crate) fn get(&self, ty: u16) -> Option<Attr<'a>> {
        self.slots.get(ty as usize).copied().flatten()
    }

    fn req(&self, ty: u16, what: &str) -> Result<Attr<'a>, DecodeError> {
        self.get(ty)
            .ok_or_else(|| DecodeError(format!("reply lacks attribute {ty} ({what})")))
    }

    fn opt_u8(&self, ty: u16) -> Result<Option<u8>, DecodeError> {
        self.get(ty).map(|a| a.u8()).transpose()
    }

    fn opt_u32(&self, ty: u16) -> Result<Option<u32>, DecodeError> {
        self.get(ty).map(|a| a.u32()).transpose()
    }

    fn opt_u64(&self, ty: u16) -> Result<Option<u64>, DecodeError> {
        self.get(ty).map(|a| a.u64()).transpose()
    }

    fn opt_string(&self, ty: u16) -> Result<Option<String>, DecodeError> {
        self.get(ty).map(|a| a.str().map(str::to_owned)).transpose()
    }
}

// ---------------------------------------------------------------------------------------------
// Typed replies
// ---------------------------------------------------------------------------------------------

/// One RDMA device as `RDMA_NLDEV_CMD_GET` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
// The kernel adds nldev attributes; a new field is not a breaking change.
#[non_exhaustive]
pub struct NlDevice {
    /// The kernel's device index (`RDMA_NLDEV_ATTR_DEV_INDEX`), used by the other commands.
    pub index: u32,
    /// The device's name, e.g. `rxe0`.
    pub name: String,
    /// Number of the last port (`rdma_end_port`).
    pub port_count: Option<u32>,
    /// `IB_DEVICE_*` capability bits.
    pub cap_flags: Option<u64>,
    /// Firmware version string, when the driver reports one.
    pub fw_version: Option<String>,
    /// Host-order GUIDs.
    pub node_guid: Option<u64>,
    /// System image GUID (host order).
    pub sys_image_guid: Option<u64>,
    /// `RDMA_NODE_*` (1 = CA).
    pub node_type: Option<u8>,
    /// "ib", "roce", "iw", "opa" or "usnic".
    pub protocol: Option<String>,
}

impl NlDevice {
    /// Decodes one `RDMA_NLDEV_CMD_GET` reply payload.
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let t = AttrTable::parse(payload)?;
        Ok(Self {
            index: t.req(attr::DEV_INDEX, "device index")?.u32()?,
            name: t.req(attr::DEV_NAME, "device name")?.str()?.to_owned(),
            port_count: t.opt_u32(attr::PORT_INDEX)?,
            cap_flags: t.opt_u64(attr::CAP_FLAGS)?,
            fw_version: t.opt_string(attr::FW_VERSION)?,
            node_guid: t.opt_u64(attr::NODE_GUID)?,
            sys_image_guid: t.opt_u64(attr::SYS_IMAGE_GUID)?,
            node_type: t.opt_u8(attr::DEV_NODE_TYPE)?,
            protocol: t.opt_string(attr::DEV_PROTOCOL)?,
        })
    }
}

/// One port as `RDMA_NLDEV_CMD_PORT_GET` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
// The kernel adds nldev attributes; a new field is not a breaking change.
#[non_exhaustive]
pub struct NlPort {
    /// The kernel's index of the port's device.
    pub dev_index: u32,
    /// The name of the port's device.
    pub dev_name: String,
    /// Port number (1-based).
    pub port: u32,
    /// The port's logical state (`rdma link` prints [`PortState::link_name`]).
    pub state: Option<PortState>,
    /// The port's physical state (`rdma link` prints [`PhysState::link_name`]).
    pub phys_state: Option<PhysState>,
    /// The netdev under this port (RoCE, iWARP), when it is in our network namespace.
    pub netdev: Option<String>,
    /// ifindex of `netdev`.
    pub netdev_index: Option<u32>,
    /// InfiniBand ports only.
    pub lid: Option<u32>,
    /// LID of the subnet manager.
    pub sm_lid: Option<u32>,
    /// LID mask control.
    pub lmc: Option<u8>,
    /// The port's subnet prefix (upper 64 bits of its GIDs).
    pub subnet_prefix: Option<u64>,
    /// `IB_PORT_*` capability bits.
    pub cap_flags: Option<u64>,
}

impl NlPort {
    /// Decodes one `RDMA_NLDEV_CMD_PORT_GET` reply payload.
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let t = AttrTable::parse(payload)?;
        Ok(Self {
            dev_index: t.req(attr::DEV_INDEX, "device index")?.u32()?,
            dev_name: t.req(attr::DEV_NAME, "device name")?.str()?.to_owned(),
            port: t.req(attr::PORT_INDEX, "port index")?.u32()?,
            state: t.opt_u8(attr::PORT_STATE)?.map(PortState),
            phys_state: t.opt_u8(attr::PORT_PHYS_STATE)?.map(PhysState),
            netdev: t.opt_string(attr::NDEV_NAME)?,
            netdev_index: t.opt_u32(attr::NDEV_INDEX)?,
            lid: t.opt_u32(attr::LID)?,
            sm_lid: t.opt_u32(attr::SM_LID)?,
            lmc: t.opt_u8(attr::LMC)?,
            subnet_prefix: t.opt_u64(attr::SUBNET_PREFIX)?,
            cap_flags: t.opt_u64(attr::CAP_FLAGS)?,
        })
    }

    /// The line `rdma link show` prints for this port (without its trailing space).
    pub fn link_line(&self) -> String {
        let mut s = format!("link {}/{}", self.dev_name, self.port);
        if let Some(p) = self.subnet_prefix {
            s += &format!(
                " subnet_prefix {:04x}:{:04x}:{:04x}:{:04x}",
                (p >> 48) & 0xffff,
                (p >> 32) & 0xffff,
                (p >> 16) & 0xffff,
                p & 0xffff
            );
        }
        if let Some(l) = self.lid {
            s += &format!(" lid {l}");
        }
        if let Some(l) = self.sm_lid {
            s += &format!(" sm_lid {l}");
        }
        if let Some(l) = self.lmc {
            s += &format!(" lmc {l}");
        }
        if let Some(st) = self.state {
            s += &format!(" state {}", st.link_name());
        }
        if let Some(st) = self.phys_state {
            s += &format!(" physical_state {}", st.link_name());
        }
        if let (Some(n), Some(_)) = (&self.netdev, self.netdev_index) {
            s += &format!(" netdev {n}");
        }
        s
    }
}

/// A char device of an RDMA device, as `RDMA_NLDEV_CMD_GET_CHARDEV` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chardev {
    /// e.g. "uverbs0".
    pub name: String,
    /// The ABI version of the char device (for uverbs: the driver's ABI version).
    pub abi: u64,
    /// `dev_t` in the kernel's `huge_encode_dev` encoding; see [`Chardev::major`].
    pub dev: u64,
    /// For uverbs: the device's `RDMA_DRIVER_*` id.
    pub driver_id: Option<DriverId>,
}

impl Chardev {
    /// Decodes a `RDMA_NLDEV_CMD_GET_CHARDEV` reply payload.
    pub(crate) fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let t = AttrTable::parse(payload)?;
        Ok(Self {
            name: t.req(attr::CHARDEV_NAME, "chardev name")?.str()?.to_owned(),
            abi: t.opt_u64(attr::CHARDEV_ABI)?.unwrap_or(0),
            dev: t.req(attr::CHARDEV, "chardev dev_t")?.u64()?,
            driver_id: t
                .opt_u64(attr::UVERBS_DRIVER_ID)?
                .map(|v| DriverId(v as u32)),
        })
    }

    /// Major number of [`Chardev::dev`].
    pub fn major(&self) -> u32 {
        ((self.dev & 0xfff00) >> 8) as u32
    }

    /// Minor number of [`Chardev::dev`].
    pub fn minor(&self) -> u32 {
        ((self.dev & 0xff) | ((self.dev >> 12) & 0xfff00)) as u32
    }
}

// ---------------------------------------------------------------------------------------------
// The socket
// ---------------------------------------------------------------------------------------------

const RECV_BUF: usize = 64 * 1024;
const TIMEOUT: Duration = Duration::from_secs(10);

/// An `NETLINK_RDMA` socket bound to a kernel-assigned port id.
#[derive(Debug)]
pub struct RdmaNetlink {
    fd: OwnedFd,
    seq: u32,
}

/// What a request waits for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// `NLMSG_DONE` of a dump.
    Done,
    /// The ACK (`NLMSG_ERROR` with error 0) of a request sent with `NLM_F_ACK`.
    Ack,
}

impl RdmaNetlink {
    /// Opens the socket.
    pub fn open() -> io::Result<Self> {
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            Some(rustix::net::netlink::RDMA),
        )
        .map_err(|e| {
            let err = Error::os("open RDMA netlink socket", e);
            if e == Errno::PROTONOSUPPORT || e == Errno::AFNOSUPPORT {
                err.with_detail("the kernel has no RDMA netlink (is the ib_core module loaded?)")
            } else {
                err
            }
        })?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, 0))
            .map_err(|e| Error::os("bind RDMA netlink socket", e))?;
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(TIMEOUT),
        )
        .map_err(|e| Error::os("set RDMA netlink receive timeout", e))?;
        // Sequence numbers only have to tell this socket's requests apart.
        Ok(Self { fd, seq: 0 })
    }

    /// Sends one `RDMA_NL_NLDEV` request and collects the payloads of the replies.
    /// `errno` of a kernel refusal is returned raw, for the caller to explain.
    fn transact(
        &mut self,
        op: u16,
        dump: bool,
        fill: impl FnOnce(&mut MsgBuilder),
    ) -> Result<Vec<Vec<u8>>, TransactError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let flags = NLM_F_REQUEST | if dump { NLM_F_DUMP } else { NLM_F_ACK };
        let mut b = MsgBuilder::new(rdma_nl_get_type(RDMA_NL_NLDEV, op), flags, seq);
        fill(&mut b);
        let msg = b.finish();
        let n = rustix::net::sendto(
            &self.fd,
            &msg,
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )
        .map_err(TransactError::Os)?;
        if n != msg.len() {
            return Err(TransactError::Os(Errno::IO));
        }
        let until = if dump { Until::Done } else { Until::Ack };
        let expected_type = rdma_nl_get_type(RDMA_NL_NLDEV, op);
        let mut out = Vec::new();
        let mut buf = vec![0u8; RECV_BUF];
        loop {
            let full = match rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::TRUNC) {
                Ok((_, full)) => full,
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return Err(TransactError::Timeout),
                Err(e) => return Err(TransactError::Os(e)),
            };
            if full > buf.len() {
                return Err(TransactError::Decode(DecodeError(format!(
                    "reply of {full} bytes truncated to {}",
                    buf.len()
                ))));
            }
            if absorb(&buf[..full], seq, expected_type, until, &mut out)? {
                return Ok(out);
            }
        }
    }

    /// All RDMA devices (`RDMA_NLDEV_CMD_GET` dump).
    pub fn devices(&mut self) -> io::Result<Vec<NlDevice>> {
        let replies = self
            .transact(cmd::GET, true, |_| {})
            .map_err(|e| e.into_error("list RDMA devices over netlink"))?;
        replies
            .iter()
            .map(|p| NlDevice::decode(p).map_err(io::Error::from))
            .collect()
    }

    /// The device called `name`, or a not-found error listing the existing ones.
    pub fn device_by_name(&mut self, name: &str, op: &'static str) -> io::Result<NlDevice> {
        let devs = self.devices()?;
        if let Some(d) = devs.iter().find(|d| d.name == name) {
            return Ok(d.clone());
        }
        let names: Vec<&str> = devs.iter().map(|d| d.name.as_str()).collect();
        Err(
            Error::not_found(op, format!("no RDMA device named {name:?}"))
                .with_detail(existing_list(&names))
                .into(),
        )
    }

    /// The ports of device `dev_index` (`RDMA_NLDEV_CMD_PORT_GET` dump).
    pub fn ports(&mut self, dev_index: u32) -> io::Result<Vec<NlPort>> {
        let replies = self
            .transact(cmd::PORT_GET, true, |b| {
                b.put_u32(attr::DEV_INDEX, dev_index);
            })
            .map_err(|e| {
                e.into_error("list RDMA ports over netlink")
                    .with_detail(format!("device index {dev_index}"))
            })?;
        replies
            .iter()
            .map(|p| NlPort::decode(p).map_err(io::Error::from))
            .collect()
    }

    /// The char device of type `kind` ("uverbs", "umad", …) of device `dev_index`
    /// (`RDMA_NLDEV_CMD_GET_CHARDEV`).
    pub fn chardev(&mut self, dev_index: u32, kind: &str) -> io::Result<Chardev> {
        let replies = self
            .transact(cmd::GET_CHARDEV, false, |b| {
                b.put_u32(attr::DEV_INDEX, dev_index);
                b.put_str(attr::CHARDEV_TYPE, kind);
            })
            .map_err(|e| {
                e.into_error("query RDMA char device over netlink")
                    .with_detail(format!("{kind} of device index {dev_index}"))
            })?;
        let p = replies.first().ok_or_else(|| {
            Error::protocol(
                "query RDMA char device over netlink",
                "the kernel acknowledged without a reply",
            )
        })?;
        Ok(Chardev::decode(p)?)
    }

    /// How many objects of each kind (`pd`, `cq`, `qp`, `cm_id`, `mr`, `ctx`, `srq`) the kernel
    /// holds for device `dev_index` across all processes (`RDMA_NLDEV_CMD_RES_GET`, what
    /// `rdma resource show` prints).
    pub fn resource_summary(&mut self, dev_index: u32) -> io::Result<Vec<(String, u64)>> {
        const OP: &str = "query RDMA resource summary over netlink";
        let replies = self
            .transact(cmd::RES_GET, false, |b| {
                b.put_u32(attr::DEV_INDEX, dev_index);
            })
            .map_err(|e| {
                e.into_error(OP)
                    .with_detail(format!("device index {dev_index}"))
            })?;
        let p = replies
            .first()
            .ok_or_else(|| Error::protocol(OP, "the kernel acknowledged without a reply"))?;
        decode_res_summary(p).map_err(io::Error::from)
    }

    /// Creates a software RDMA device `name` of `link_type` ("rxe" or "siw") on `netdev`
    /// (`RDMA_NLDEV_CMD_NEWLINK`, as `rdma link add NAME type TYPE netdev NETDEV`).
    pub fn link_add(&mut self, name: &str, link_type: &str, netdev: &str) -> io::Result<()> {
        let op = format!("link add {name}");
        if name.is_empty() || name.contains('%') || name.len() >= 64 {
            return Err(Error::invalid(
                op,
                format!("{name:?} is not a valid RDMA device name (1..63 bytes, no '%')"),
            )
            .into());
        }
        if let Ok(devs) = self.devices() {
            if devs.iter().any(|d| d.name == name) {
                return Err(Error::os(op, Errno::EXIST)
                    .with_detail(format!("an RDMA device named {name} already exists"))
                    .into());
            }
        }
        self.transact(cmd::NEWLINK, false, |b| {
            b.put_str(attr::DEV_NAME, name);
            b.put_str(attr::LINK_TYPE, link_type);
            b.put_str(attr::NDEV_NAME, netdev);
        })
        .map_err(|e| {
            let detail = match &e {
                TransactError::Os(Errno::NODEV) => Some(format!("netdev {netdev} not found")),
                TransactError::Os(Errno::EXIST) => Some(format!(
                    "netdev {netdev} already has an {link_type} device (see `rverbs link show`)"
                )),
                TransactError::Os(Errno::NFILE) => {
                    Some(format!("an RDMA device named {name} already exists"))
                }
                TransactError::Os(Errno::INVAL) => Some(format!(
                    "the kernel refused link type {link_type:?} on {netdev} (is the \
                     rdma_{link_type} module available? try `modprobe rdma_{link_type}`)"
                )),
                TransactError::Os(Errno::PERM) | TransactError::Os(Errno::ACCESS) => {
                    Some("creating RDMA links needs CAP_NET_ADMIN (run as root)".to_string())
                }
                _ => None,
            };
            let err = e.into_error(op.clone());
            match detail {
                Some(d) => err.with_detail(d),
                None => err,
            }
        })?;
        Ok(())
    }

    /// Removes the software RDMA device `name` (`RDMA_NLDEV_CMD_DELLINK`).
    pub fn link_delete(&mut self, name: &str) -> io::Result<()> {
        let op = format!("link delete {name}");
        let dev = self.device_by_name(name, "link delete")?;
        self.transact(cmd::DELLINK, false, |b| {
            b.put_u32(attr::DEV_INDEX, dev.index);
        })
        .map_err(|e| {
            let detail = match &e {
                TransactError::Os(Errno::INVAL) => Some(format!(
                    "the kernel refused to remove {name}: only software devices made with \
                     `link add` (rxe, siw) can be deleted"
                )),
                TransactError::Os(Errno::PERM) | TransactError::Os(Errno::ACCESS) => {
                    Some("deleting RDMA links needs CAP_NET_ADMIN (run as root)".to_string())
                }
                _ => None,
            };
            let err = e.into_error(op.clone());
            match detail {
                Some(d) => err.with_detail(d),
                None => err,
            }
        })?;
        Ok(())
    }
}

/// Takes the messages of one received datagram that answer request `seq`: payloads of type
/// `expected_type` go to `out`; returns `true` when the answer is complete (DONE of a dump,
/// ACK of a request) and the kernel's errno when it refused.
pub(crate) fn absorb(
    datagram: &[u8],
    seq: u32,
    expected_type: u16,
    until: Until,
    out: &mut Vec<Vec<u8>>,
) -> Result<bool, TransactError> {
    for m in messages(datagram) {
        let m = m.map_err(TransactError::Decode)?;
        if m.hdr.nlmsg_seq != seq {
            continue; // a stale reply to an earlier request
        }
        match m.hdr.nlmsg_type {
            NLMSG_NOOP => {}
            NLMSG_OVERRUN => {
                return Err(TransactError::Decode(DecodeError(
                    "kernel reported NLMSG_OVERRUN (data lost)".into(),
                )))
            }
            NLMSG_ERROR => {
                let (e, _) = nlmsgerr::read_from_prefix(m.payload).map_err(|_| {
                    TransactError::Decode(DecodeError(format!(
                        "NLMSG_ERROR payload of {} bytes",
                        m.payload.len()
                    )))
                })?;
                if e.error != 0 {
                    return Err(kernel_errno("NLMSG_ERROR", e.error));
                }
                if until == Until::Ack {
                    return Ok(true);
                }
            }
            NLMSG_DONE => {
                // A dump that failed part-way reports the errno in DONE's payload.
                if let Some(b) = m.payload.get(..4) {
                    let err = i32::from_ne_bytes(b.try_into().unwrap());
                    if err < 0 {
                        return Err(kernel_errno("NLMSG_DONE", err));
                    }
                }
                return Ok(true);
            }
            t if t == expected_type => out.push(m.payload.to_vec()),
            t => {
                return Err(TransactError::Decode(DecodeError(format!(
                    "unexpected netlink message type {t:#x} (expected {expected_type:#x})"
                ))))
            }
        }
    }
    Ok(false)
}

/// The errno of an error code a reply carries (a negative errno), or a decode error naming a
/// code that is none.
fn kernel_errno(what: &str, code: i32) -> TransactError {
    match code.checked_neg() {
        Some(n @ 1..=4095) => TransactError::Os(Errno::from_raw_os_error(n)),
        _ => TransactError::Decode(DecodeError(format!(
            "{what} carries error {code}, not a negative errno"
        ))),
    }
}

/// "existing devices: a, b" or "there are no RDMA devices".
pub(crate) fn existing_list(names: &[&str]) -> String {
    if names.is_empty() {
        "there are no RDMA devices".to_string()
    } else {
        format!("existing devices: {}", names.join(", "))
    }
}

#[derive(Debug)]
pub(crate) enum TransactError {
    Os(Errno),
    Timeout,
    Decode(DecodeError),
}

impl TransactError {
    fn into_error(self, op: impl Into<std::borrow::Cow<'static, str>>) -> Error {
        match self {
            TransactError::Os(e) => Error::os(op, e),
            TransactError::Timeout => Error::protocol(
                op,
                format!("no reply from the kernel within {} s", TIMEOUT.as_secs()),
            ),
            TransactError::Decode(d) => Error::protocol(op, d.0),
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod res_summary_tests;
