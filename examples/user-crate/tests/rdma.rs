//! Device tests of usercrate: they need the rxe devices of the rverbs test bed and fail
//! without them (run them with `rverbs-vm`, see README.md).

use rverbs::uverbs::port::PortState;
use usercrate::{exchange, node};

#[test]
fn the_bed_names_active_devices() {
    assert_eq!(
        std::env::var("RVERBS_VM").as_deref(),
        Ok("1"),
        "not in an rverbs-vm guest"
    );
    let names: Vec<String> = rverbs::uverbs::device::devices()
        .expect("no RDMA devices")
        .iter()
        .map(|d| d.name().to_string())
        .collect();
    for which in ["A", "B"] {
        let n = node(which).unwrap();
        assert!(names.contains(&n.dev), "{} is not among {names:?}", n.dev);
        let ctx = rverbs::provider::open_by_name(&n.dev).expect("open the device");
        let port = ctx.query_port(1).expect("query port 1");
        assert_eq!(port.state, PortState::ACTIVE, "{} port 1", n.dev);
    }
}

#[test]
fn a_message_crosses_from_a_to_b() {
    let b = node("B").unwrap();
    let got = exchange(b.addr, 7801, b"hello from usercrate").expect("rdma_cm exchange");
    assert_eq!(got, b"hello from usercrate");
}

#[test]
fn the_topology_is_the_one_asked_for() {
    let (a, b) = (node("A").unwrap(), node("B").unwrap());
    match std::env::var("RVERBS_TOPO").as_deref() {
        Ok("one") => assert_eq!(a, b, "one node: A and B are the same device"),
        Ok("two") => assert_ne!(a.dev, b.dev, "two nodes: two devices"),
        other => panic!("RVERBS_TOPO is {other:?}"),
    }
}
