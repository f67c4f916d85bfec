//! Fuzz entry points for the parsers of bytes the kernel writes: RDMA netlink replies, sysfs
//! text, completion-ring entries and async events.
//!
//! **Not for users: no stability, fuzz support only.** This module exists only with
//! `--cfg rverbs_fuzzing` (set by `cargo xtask fuzz` for the fuzz targets of the repository's
//! `fuzz/` crate; no Cargo feature, so no dependent crate turns it on) and in this crate's
//! unit tests, which run it over the committed seeds. Each
//! function is safe, takes the fuzzer's bytes and runs the crate's own (crate-private) parsers
//! on them, asserting what must hold for any input: no panic other than these asserts, values
//! in range, and round trips where an encoder exists. A failed assert is a finding.

use zerocopy::FromBytes;

use crate::async_event::{AsyncElement, AsyncEvent};
use crate::device::{
    format_guid, parse_dev_t, parse_guid, parse_hex_id, parse_node_type, DriverId, NodeType,
};
use crate::gid::Gid;
use crate::kernel::abi::netlink::{attr, nlmsghdr, RDMA_NLA_TYPE_MASK};
use crate::netlink::{
    absorb, attrs, decode_res_summary, messages, AttrTable, Chardev, MsgBuilder, NlDevice, NlPort,
    Until,
};
use crate::port::Mtu;
use crate::wc::{RawWc, WcFlags};

/// Whether `inner` lies within `outer` (same allocation, in bounds).
fn within(inner: &[u8], outer: &[u8]) -> bool {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    i >= o && i + inner.len() <= o + outer.len()
}

/// The payload of the first message `b` builds (the round trips' re-encoding).
fn payload_of(b: MsgBuilder) -> Vec<u8> {
    b.finish()[size_of::<nlmsghdr>()..].to_vec()
}

/// A datagram of RDMA netlink messages, as `RdmaNetlink` receives it: split into messages
/// and attributes, each payload decoded as every typed reply (device, port, chardev,
/// resource summary), the datagram absorbed as the answer to its first message's sequence
/// number. Decoded replies are encoded again and must decode to the same value.
pub fn netlink(data: &[u8]) {
    let mut first_seq = None;
    let mut payloads = Vec::new();
    for m in messages(data) {
        let Ok(m) = m else { continue };
        assert!(within(m.payload, data), "payload outside the datagram");
        assert!(m.payload.len() + size_of::<nlmsghdr>() <= m.hdr.nlmsg_len as usize);
        first_seq.get_or_insert(m.hdr.nlmsg_seq);
        payloads.push((m.hdr.nlmsg_type, m.payload));
    }
    for &(_, p) in &payloads {
        netlink_payload(p);
    }
    // The whole datagram as the answer to a request: what it keeps are payloads of the
    // expected type, copied unchanged.
    let seq = first_seq.unwrap_or(0);
    let ty = payloads.first().map_or(0, |&(t, _)| t);
    for until in [Until::Done, Until::Ack] {
        let mut out = Vec::new();
        let _ = absorb(data, seq, ty, until, &mut out);
        for o in &out {
            assert!(payloads.iter().any(|&(t, p)| t == ty && p == &o[..]));
        }
    }
}

/// One message payload (an attribute area) through every decoder.
fn netlink_payload(p: &[u8]) {
    let mut n = 0;
    for a in attrs(p) {
        let Ok(a) = a else { break };
        n += 1;
        assert!(within(a.data, p), "attribute outside its area");
        assert_eq!(a.ty & !RDMA_NLA_TYPE_MASK, 0, "flag bits left in the type");
        if let Ok(s) = a.str() {
            assert!(!s.contains('\0'));
        }
        if a.nested {
            // A nested attribute's payload is an attribute area again.
            for inner in attrs(a.data) {
                let Ok(inner) = inner else { break };
                assert!(within(inner.data, a.data));
            }
        }
    }
    assert!(n <= p.len() / 4, "{n} attributes in {} bytes", p.len());
    if let Ok(t) = AttrTable::parse(p) {
        for a in attrs(p).map_while(Result::ok) {
            assert!(a.ty == attr::PAD || t.get(a.ty).is_some());
        }
    }
    if let Ok(d) = NlDevice::decode(p) {
        let mut b = MsgBuilder::new(0, 0, 0);
        b.put_u32(attr::DEV_INDEX, d.index)
            .put_str(attr::DEV_NAME, &d.name);
        if let Some(v) = d.port_count {
            b.put_u32(attr::PORT_INDEX, v);
        }
        if let Some(v) = d.cap_flags {
            b.put_u64(attr::CAP_FLAGS, v);
        }
        if let Some(v) = &d.fw_version {
            b.put_str(attr::FW_VERSION, v);
        }
        if let Some(v) = d.node_guid {
            b.put_u64(attr::NODE_GUID, v);
        }
        if let Some(v) = d.sys_image_guid {
            b.put_u64(attr::SYS_IMAGE_GUID, v);
        }
        if let Some(v) = d.node_type {
            b.put_bytes(attr::DEV_NODE_TYPE, &[v]);
        }
        if let Some(v) = &d.protocol {
            b.put_str(attr::DEV_PROTOCOL, v);
        }
        assert_eq!(NlDevice::decode(&payload_of(b)).as_ref(), Ok(&d));
    }
    if let Ok(port) = NlPort::decode(p) {
        let line = port.link_line();
        assert!(line.starts_with("link "), "{line:?}");
        let mut b = MsgBuilder::new(0, 0, 0);
        b.put_u32(attr::DEV_INDEX, port.dev_index)
            .put_str(attr::DEV_NAME, &port.dev_name)
            .put_u32(attr::PORT_INDEX, port.port);
        let u8s = [
            (attr::PORT_STATE, port.state.map(|s| s.0)),
            (attr::PORT_PHYS_STATE, port.phys_state.map(|s| s.0)),
            (attr::LMC, port.lmc),
        ];
        for (ty, v) in u8s {
            if let Some(v) = v {
                b.put_bytes(ty, &[v]);
            }
        }
        if let Some(v) = &port.netdev {
            b.put_str(attr::NDEV_NAME, v);
        }
        let u32s = [
            (attr::NDEV_INDEX, port.netdev_index),
            (attr::LID, port.lid),
            (attr::SM_LID, port.sm_lid),
        ];
        for (ty, v) in u32s {
            if let Some(v) = v {
                b.put_u32(ty, v);
            }
        }
        for (ty, v) in [
            (attr::SUBNET_PREFIX, port.subnet_prefix),
            (attr::CAP_FLAGS, port.cap_flags),
        ] {
            if let Some(v) = v {
                b.put_u64(ty, v);
            }
        }
        let again = NlPort::decode(&payload_of(b)).expect("re-encoded port decodes");
        assert_eq!(again, port);
        assert_eq!(again.link_line(), line);
    }
    if let Ok(c) = Chardev::decode(p) {
        assert!(c.major() < 1 << 12 && c.minor() < 1 << 20);
        let mut b = MsgBuilder::new(0, 0, 0);
        b.put_str(attr::CHARDEV_NAME, &c.name)
            .put_u64(attr::CHARDEV_ABI, c.abi)
            .put_u64(attr::CHARDEV, c.dev);
        if let Some(d) = c.driver_id {
            b.put_u32(attr::UVERBS_DRIVER_ID, d.0);
        }
        assert_eq!(Chardev::decode(&payload_of(b)).as_ref(), Ok(&c));
    }
    if let Ok(entries) = decode_res_summary(p) {
        assert!(entries.len() <= p.len() / 12);
    }
}

/// sysfs text, as the device list and the GID table read it: GUIDs, GIDs, MTUs, driver names,
/// `dev` numbers, node types and PCI ids; and procfs's `fdinfo` text, as the dma-buf
/// registration reads it. Parsed values format back to text that parses to the same value.
pub fn sysfs_text(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    if let Some(info) = crate::dmabuf::parse_fdinfo(&s) {
        let text = format!("size:\t{}\nexp_name:\t{}\n", info.size, info.exporter);
        assert_eq!(crate::dmabuf::parse_fdinfo(&text), Some(info), "{text}");
    }
    if let Some(g) = parse_guid(&s) {
        let text = format_guid(g);
        assert_eq!(parse_guid(&text), Some(g), "{text}");
        let t = s.trim();
        if t.len() == 19
            && t.bytes()
                .all(|b| b == b':' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            assert_eq!(text, t);
        }
    }
    if let Some(gid) = Gid::parse(&s) {
        let sysfs = gid.to_sysfs_string();
        assert_eq!(sysfs.len(), 39);
        assert_eq!(Gid::parse(&sysfs), Some(gid), "{sysfs}");
        let shown = gid.to_string();
        assert_eq!(Gid::parse(&shown), Some(gid), "{shown}");
        if let Some(v4) = gid.to_ipv4_mapped() {
            assert_eq!(gid.0[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
            assert_eq!(v4.octets(), gid.0[12..]);
        }
    }
    if let Ok(n) = s.trim().parse::<u32>() {
        if let Some(m) = Mtu::from_bytes(n) {
            assert_eq!(m.bytes(), Some(n));
        }
    }
    let _ = DriverId::from_device_name(&s).to_string();
    // The device directory's `dev`, `node_type` and PCI ids.
    if let Some((major, minor)) = parse_dev_t(&s) {
        assert_eq!(
            parse_dev_t(&format!("{major}:{minor}")),
            Some((major, minor))
        );
    }
    let NodeType(n) = parse_node_type(&s);
    assert_eq!(parse_node_type(&format!("{n}: CA")), NodeType(n));
    if let Some(id) = parse_hex_id(&s) {
        assert_eq!(parse_hex_id(&format!("{id:#06x}")), Some(id));
    }
}

/// Completion-ring entries in the kernel's `ib_uverbs_wc` layout (48 bytes each) and async
/// event descriptors (16 bytes): every accessor agrees with the full decode, and the raw form
/// of the decoded completion is the entry itself.
pub fn completions(data: &[u8]) {
    for chunk in data.chunks_exact(size_of::<RawWc>()) {
        let raw = RawWc::read_from_bytes(chunk).expect("48 bytes");
        let wc = raw.to_work_completion();
        assert_eq!(wc.wr_id, raw.wr_id());
        assert_eq!(wc.status, raw.status());
        assert_eq!(wc.status.is_success(), raw.is_success());
        assert_eq!(wc.opcode, raw.opcode());
        assert_eq!(wc.byte_len, raw.byte_len());
        assert_eq!(wc.qp_num, raw.qp_num());
        assert_eq!(wc.wc_flags, raw.wc_flags());
        assert_eq!(wc.imm(), raw.imm());
        if raw_wc_flags_bits(chunk) & 0b110 != 0b110 {
            // The kernel sets WITH_IMM or WITH_INVALIDATE, never both (they share the word);
            // with both the eager decode byte-swaps it as immediate data, the lazy one not.
            assert_eq!(wc.invalidated_rkey(), raw.invalidated_rkey());
        }
        assert_eq!(wc.vendor_err, raw.vendor_err());
        assert_eq!(
            (wc.src_qp, wc.pkey_index, wc.slid),
            (raw.src_qp(), raw.pkey_index(), raw.slid())
        );
        assert_eq!(
            (wc.sl, wc.dlid_path_bits, wc.port_num),
            (raw.sl(), raw.dlid_path_bits(), raw.port_num())
        );
        // The flag renumbering is its own inverse; everything survives but the reserved byte's
        // bits other than bit 0 (`unmatched`, which does survive).
        assert_eq!(
            WcFlags::from_kernel(raw.wc_flags().bits()).bits(),
            raw_wc_flags_bits(chunk)
        );
        assert_eq!(wc.unmatched, chunk[47] & 1 != 0);
        let mut only_unmatched = chunk.to_vec();
        only_unmatched[47] &= 1;
        assert_eq!(
            RawWc::from_work_completion(&wc),
            RawWc::read_from_bytes(&only_unmatched[..]).expect("48 bytes"),
            "raw -> WorkCompletion -> raw"
        );
        let _ = format!("{raw:?} {} {}", wc.status, wc.opcode);
    }
    for chunk in data.chunks(16) {
        let ev = AsyncEvent::decode(chunk);
        assert_eq!(ev.is_some(), chunk.len() == 16);
        if let Some(ev) = ev {
            let element = u64::from_ne_bytes(chunk[..8].try_into().expect("8 bytes"));
            match ev.element {
                AsyncElement::Port(p) => assert_eq!(u64::from(p), element & 0xff),
                AsyncElement::Device => {}
                AsyncElement::Cq(e)
                | AsyncElement::Qp(e)
                | AsyncElement::Srq(e)
                | AsyncElement::Unknown(e) => assert_eq!(e, element),
            }
            let _ = format!("{ev:?} {}", ev.event_type);
        }
    }
}

/// The kernel-numbered `wc_flags` word of a 48-byte entry (offset 36).
fn raw_wc_flags_bits(chunk: &[u8]) -> u32 {
    u32::from_ne_bytes(chunk[36..40].try_into().expect("4 bytes"))
}

#[cfg(test)]
#[path = "../../../fuzz/seeds.rs"]
mod seeds;

#[cfg(test)]
mod tests {
    use super::seeds::seeds;
    use super::*;
    use crate::kernel::abi::netlink::{cmd, rdma_nl_get_type, RDMA_NL_NLDEV};
    use crate::netlink::TransactError;

    fn seed(target: &str, name: &str) -> Vec<u8> {
        seeds(target)
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no seed {target}/{name}"))
            .1
    }

    fn first_payload(b: &[u8]) -> Vec<u8> {
        messages(b).next().unwrap().unwrap().payload.to_vec()
    }

    #[test]
    fn netlink_seeds_decode() {
        for (_, b) in seeds("uverbs_netlink") {
            netlink(&b);
        }
        let c = Chardev::decode(&first_payload(&seed(
            "uverbs_netlink",
            "chardev_reply_then_ack",
        )))
        .unwrap();
        assert_eq!(
            (c.name.as_str(), c.major(), c.minor()),
            ("uverbs0", 231, 192)
        );
        let p = NlPort::decode(&first_payload(&seed(
            "uverbs_netlink",
            "port_dump_then_done",
        )))
        .unwrap();
        assert_eq!(
            (p.dev_name.as_str(), p.state),
            ("rxe0", Some(crate::port::PortState::ACTIVE))
        );
        let d = NlDevice::decode(&first_payload(&seed(
            "uverbs_netlink",
            "device_dump_then_done",
        )))
        .unwrap();
        assert_eq!(
            (d.name.as_str(), d.protocol.as_deref()),
            ("rxe0", Some("roce"))
        );
        let s = decode_res_summary(&first_payload(&seed("uverbs_netlink", "res_summary"))).unwrap();
        assert_eq!(s, vec![("pd".to_string(), 3), ("qp".to_string(), 12)]);
        let t = rdma_nl_get_type(RDMA_NL_NLDEV, cmd::NEWLINK);
        let e = seed("uverbs_netlink", "error_enodev");
        assert!(matches!(
            absorb(&e, 5, t, Until::Ack, &mut Vec::new()),
            Err(TransactError::Os(rustix::io::Errno::NODEV))
        ));
        // The fuzzer's first finding: a DONE whose error is no errno (a panic in rustix).
        let e = seed("uverbs_netlink", "done_error_not_an_errno");
        assert!(matches!(
            absorb(&e, 0xcd00_0000, 3, Until::Done, &mut Vec::new()),
            Err(TransactError::Decode(_))
        ));
    }

    #[test]
    fn sysfs_and_completion_seeds_decode() {
        for (_, b) in seeds("uverbs_sysfs_text") {
            sysfs_text(&b);
        }
        assert!(
            Gid::parse(&String::from_utf8(seed("uverbs_sysfs_text", "text_0")).unwrap()).is_some()
        );
        assert_eq!(
            parse_guid(&String::from_utf8(seed("uverbs_sysfs_text", "text_2")).unwrap()),
            Some(0x5054_00ff_fe12_3456)
        );
        let text = |name| String::from_utf8(seed("uverbs_sysfs_text", name)).unwrap();
        assert_eq!(parse_dev_t(text("text_8").trim()), Some((231, 192)));
        assert_eq!(parse_node_type(&text("text_9")), NodeType(1));
        assert_eq!(parse_hex_id(text("text_10").trim()), Some(0x15b3));
        let fdinfo = crate::dmabuf::parse_fdinfo(&text("fdinfo_udmabuf")).unwrap();
        assert_eq!((fdinfo.size, fdinfo.exporter.as_str()), (8192, "udmabuf"));
        assert_eq!(crate::dmabuf::parse_fdinfo(&text("fdinfo_memfd")), None);
        for (_, b) in seeds("uverbs_completions") {
            completions(&b);
        }
        let b = seed("uverbs_completions", "send_recv_imm_error");
        let wc = RawWc::read_from_bytes(&b[48..96]).unwrap();
        assert_eq!((wc.wr_id(), wc.imm()), (2, Some(0x1234_5678)));
    }
}
