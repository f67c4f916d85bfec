//! Message encoding and decoding: requests, replies, kernel errors, malformed input.

use super::*;

// Fixtures are little-endian byte strings written by hand from the kernel's layout
// (nlmsghdr 16 bytes, nlattr 4 bytes, payloads padded to 4), not produced by this code.
#[cfg(target_endian = "little")]
const CHARDEV_REQUEST: &[u8] = &[
    0x24, 0, 0, 0, // nlmsg_len 36
    0x0f, 0x14, // type: RDMA_NL_NLDEV << 10 | GET_CHARDEV = 0x140f
    0x05, 0, // NLM_F_REQUEST | NLM_F_ACK
    7, 0, 0, 0, // seq
    0, 0, 0, 0, // pid
    8, 0, 1, 0, 3, 0, 0, 0, // DEV_INDEX = 3
    11, 0, 69, 0, b'u', b'v', b'e', b'r', b'b', b's', 0, 0, // CHARDEV_TYPE "uverbs" + pad
];

#[cfg(target_endian = "little")]
const CHARDEV_REPLY_AND_ACK: &[u8] = &[
    // reply: 16 + 4 (pad) + 12 (CHARDEV) + 12 (ABI) + 12 (NAME) + 8 (DRIVER_ID) = 64
    64, 0, 0, 0, 0x0f, 0x14, 0, 0, 7, 0, 0, 0, 0xd2, 0x04, 0, 0, //
    4, 0, 0, 0, // RDMA_NLDEV_ATTR_PAD (aligns the u64 payloads)
    12, 0, 72, 0, 0xc0, 0xe7, 0, 0, 0, 0, 0, 0, // CHARDEV = huge_encode_dev(231:192)
    12, 0, 71, 0, 2, 0, 0, 0, 0, 0, 0, 0, // CHARDEV_ABI = 2
    12, 0, 70, 0, b'u', b'v', b'e', b'r', b'b', b's', b'0', 0, // CHARDEV_NAME
    8, 0, 73, 0, 14, 0, 0, 0, // UVERBS_DRIVER_ID = 14 (u32)
    // ACK: NLMSG_ERROR, NLM_F_CAPPED, error 0, then the request's header
    36, 0, 0, 0, 2, 0, 0, 1, 7, 0, 0, 0, 0xd2, 0x04, 0, 0, //
    0, 0, 0, 0, //
    0x24, 0, 0, 0, 0x0f, 0x14, 0x05, 0, 7, 0, 0, 0, 0, 0, 0, 0,
];

#[cfg(target_endian = "little")]
const PORT_REPLY: &[u8] = &[
    // 16 + 8 + 12 + 8 + 8 + 8 + 8 + 8 = 76
    76, 0, 0, 0, 0x05, 0x14, 0x02, 0, 9, 0, 0, 0, 0xd2, 0x04, 0, 0, //
    8, 0, 1, 0, 0, 0, 0, 0, // DEV_INDEX 0
    9, 0, 2, 0, b'r', b'x', b'e', b'0', 0, 0, 0, 0, // DEV_NAME "rxe0"
    8, 0, 3, 0, 1, 0, 0, 0, // PORT_INDEX 1
    5, 0, 12, 0, 4, 0, 0, 0, // PORT_STATE ACTIVE
    5, 0, 13, 0, 5, 0, 0, 0, // PORT_PHYS_STATE LINK_UP
    8, 0, 50, 0, 3, 0, 0, 0, // NDEV_INDEX 3
    7, 0, 51, 0, b'd', b'0', 0, 0, // NDEV_NAME "d0"
];

#[cfg(target_endian = "little")]
const DONE: &[u8] = &[
    20, 0, 0, 0, 3, 0, 2, 0, 9, 0, 0, 0, 0xd2, 0x04, 0, 0, 0, 0, 0, 0,
];

#[test]
#[cfg(target_endian = "little")]
fn encodes_get_chardev_request() {
    let mut b = MsgBuilder::new(
        rdma_nl_get_type(RDMA_NL_NLDEV, cmd::GET_CHARDEV),
        NLM_F_REQUEST | NLM_F_ACK,
        7,
    );
    b.put_u32(attr::DEV_INDEX, 3)
        .put_str(attr::CHARDEV_TYPE, "uverbs");
    assert_eq!(b.finish(), CHARDEV_REQUEST);
}

#[test]
#[cfg(target_endian = "little")]
fn decodes_chardev_reply_then_ack() {
    let mut out = Vec::new();
    let t = rdma_nl_get_type(RDMA_NL_NLDEV, cmd::GET_CHARDEV);
    assert!(absorb(CHARDEV_REPLY_AND_ACK, 7, t, Until::Ack, &mut out).unwrap());
    assert_eq!(out.len(), 1);
    let c = Chardev::decode(&out[0]).unwrap();
    assert_eq!(c.name, "uverbs0");
    assert_eq!(c.abi, 2);
    assert_eq!((c.major(), c.minor()), (231, 192));
    assert_eq!(c.driver_id, Some(DriverId::RXE));
}

#[test]
#[cfg(target_endian = "little")]
fn decodes_port_dump() {
    let mut out = Vec::new();
    let t = rdma_nl_get_type(RDMA_NL_NLDEV, cmd::PORT_GET);
    assert!(!absorb(PORT_REPLY, 9, t, Until::Done, &mut out).unwrap());
    assert!(absorb(DONE, 9, t, Until::Done, &mut out).unwrap());
    assert_eq!(out.len(), 1);
    let p = NlPort::decode(&out[0]).unwrap();
    assert_eq!(p.dev_name, "rxe0");
    assert_eq!(
        (p.port, p.state, p.phys_state),
        (1, Some(PortState::ACTIVE), Some(PhysState::LINK_UP))
    );
    assert_eq!((p.netdev.as_deref(), p.netdev_index), (Some("d0"), Some(3)));
    assert_eq!(
        p.link_line(),
        "link rxe0/1 state ACTIVE physical_state LINK_UP netdev d0"
    );
}

#[test]
#[cfg(target_endian = "little")]
fn replies_to_other_requests_are_ignored() {
    let mut out = Vec::new();
    let t = rdma_nl_get_type(RDMA_NL_NLDEV, cmd::PORT_GET);
    // Same bytes, but we wait for sequence 10.
    assert!(!absorb(PORT_REPLY, 10, t, Until::Done, &mut out).unwrap());
    assert!(out.is_empty());
}

#[test]
#[cfg(target_endian = "little")]
fn kernel_errors_come_back_as_errno() {
    // NLMSG_ERROR with error = -ENODEV (-19)
    let mut e = vec![36, 0, 0, 0, 2, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0];
    e.extend_from_slice(&(-19i32).to_ne_bytes());
    e.extend_from_slice(&[0u8; 16]);
    let t = rdma_nl_get_type(RDMA_NL_NLDEV, cmd::NEWLINK);
    match absorb(&e, 5, t, Until::Ack, &mut Vec::new()) {
        Err(TransactError::Os(errno)) => assert_eq!(errno, Errno::NODEV),
        other => panic!("{other:?}"),
    }
    // A dump that fails reports it in DONE.
    let mut d = DONE.to_vec();
    d[16..20].copy_from_slice(&(-22i32).to_ne_bytes());
    match absorb(&d, 9, t, Until::Done, &mut Vec::new()) {
        Err(TransactError::Os(errno)) => assert_eq!(errno, Errno::INVAL),
        other => panic!("{other:?}"),
    }
}

#[test]
fn error_codes_that_are_no_errno_are_decode_errors() {
    // Found by the fuzz target uverbs_netlink: rustix asserts an errno is 1..=4095.
    let t = rdma_nl_get_type(RDMA_NL_NLDEV, cmd::NEWLINK);
    for code in [1, 70_000, -70_000, i32::MIN] {
        let mut e = vec![36, 0, 0, 0, 2, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0];
        e.extend_from_slice(&code.to_ne_bytes());
        e.extend_from_slice(&[0u8; 16]);
        match absorb(&e, 5, t, Until::Ack, &mut Vec::new()) {
            Err(TransactError::Decode(d)) => {
                assert!(
                    d.0.contains(&format!("NLMSG_ERROR carries error {code}")),
                    "{d}"
                )
            }
            other => panic!("{code}: {other:?}"),
        }
    }
    let mut d = DONE.to_vec();
    d[16..20].copy_from_slice(&i32::MIN.to_ne_bytes());
    match absorb(&d, 9, t, Until::Done, &mut Vec::new()) {
        Err(TransactError::Decode(e)) => {
            assert!(e.0.contains("NLMSG_DONE carries error"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    // Length field larger than the buffer.
    let mut m = vec![0u8; 16];
    m[..4].copy_from_slice(&100u32.to_ne_bytes());
    assert!(messages(&m).next().unwrap().is_err());
    // Attribute longer than its area.
    let mut a = vec![0u8; 8];
    a[..2].copy_from_slice(&20u16.to_ne_bytes());
    assert!(attrs(&a).next().unwrap().is_err());
    // Missing mandatory attributes.
    assert!(NlPort::decode(&[]).is_err());
    let short = Attr {
        ty: 1,
        nested: false,
        data: &[1, 2],
    };
    assert!(short.u32().is_err());
    assert!(short.u64().is_err());
}

#[test]
fn nested_flag_is_reported_and_masked() {
    let mut b = MsgBuilder::new(0, 0, 0);
    b.put_bytes(
        attr::DEV_NAME | crate::kernel::abi::netlink::NLA_F_NESTED,
        &[1, 2, 3, 4],
    );
    let m = b.finish();
    let a = attrs(&m[16..]).next().unwrap().unwrap();
    assert_eq!(
        (a.ty, a.nested, a.data),
        (attr::DEV_NAME, true, &[1u8, 2, 3, 4][..])
    );
}

#[test]
fn type_helpers_round_trip() {
    let t = rdma_nl_get_type(RDMA_NL_NLDEV, cmd::PORT_GET);
    assert_eq!(t, 0x1405);
    assert_eq!(
        crate::kernel::abi::netlink::rdma_nl_get_client(t),
        RDMA_NL_NLDEV
    );
    assert_eq!(
        crate::kernel::abi::netlink::rdma_nl_get_op(t),
        cmd::PORT_GET
    );
}
