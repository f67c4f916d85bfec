//! The extended QP send API and the extended CQ through the inline functions of `verbs.h`:
//! our C program `tests/c/qp_ex.c`, linked `-static` against `librverbs.a` by
//! `cargo xtask capi`, runs two connected RC QPs on one device (`ibv_wr_*` SEND, SEND with
//! immediate, inline data, RDMA WRITE with and without immediate, RDMA READ, atomics, UD; an
//! `ibv_start_poll` loop; `ibv_poll_cq` and events on the same CQ; `ibv_wr_complete`'s
//! errors with nothing posted) and checks every byte and completion. Runs in every guest
//! (static: no rdma-core library needed).
//!
//! Also `tests/c/ah_from_wc.c`: a UD reply through `ibv_create_ah_from_wc`, static on ours in
//! every guest and, in the host guest, compared with its build on rdma-core's libibverbs; and
//! `tests/c/destroy_waits.c`: `ibv_destroy_cq` and `ibv_destroy_srq` wait for the
//! acknowledgement of an event another thread holds, on ours and on rdma-core's;
//! `tests/c/cm_destroy_waits.c`: `rdma_destroy_id` waits the same way for the events of the
//! id handed to C (an ADDR_RESOLVED, a threaded server's CONNECT_REQUEST); and
//! `tests/c/batch_post.c`: a batch post with a malformed request posts the valid requests
//! before it and points `bad_wr` at the bad one, as rdma-core's providers do.

use std::process::Command;
use std::time::Duration;

mod common;
use common::{capi_bin, env_or, Proc};

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_posts_with_ibv_wr_and_polls_ibv_cq_ex() {
    let mut c = Command::new(capi_bin("qp_ex"));
    c.args([env_or("RVERBS_DEV_A", "rxe0").as_str(), "1"]);
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains("all checks passed"), "{out}");
}

/// Runs `tests/c/ah_from_wc.c` as built `name`; returns its "reply:" lines.
fn ah_from_wc(name: &str) -> Vec<String> {
    let mut c = Command::new(capi_bin(name));
    c.args([env_or("RVERBS_DEV_A", "rxe0").as_str(), "1"]);
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains("ah_from_wc: all checks passed"), "{out}");
    out.lines()
        .filter(|l| l.starts_with("reply: "))
        .map(str::to_string)
        .collect()
}

/// A UD reply through `ibv_init_ah_from_wc` / `ibv_create_ah_from_wc` (our C program,
/// static on `librverbs.a`): the address from the receive's GRH reaches the sender; without
/// a GRH there is no global route; a GRH addressed to a GID we lack fails.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_replies_through_ibv_create_ah_from_wc() {
    let lines = ah_from_wc("ah_from_wc");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].contains("is_global 1"), "{lines:?}");
    assert!(lines[1].contains("is_global 0"), "{lines:?}");
}

/// The same program on rdma-core's libibverbs gives the same reply addresses, field by field.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn ibv_init_ah_from_wc_matches_rdma_core_interop() {
    assert_eq!(ah_from_wc("ah_from_wc"), ah_from_wc("ah_from_wc-rdma-core"));
}

/// Runs `tests/c/destroy_waits.c` as built `name`; returns how long after the ack each
/// destroy returned (CQ, SRQ), in seconds.
fn destroy_waits(name: &str) -> Vec<f64> {
    let mut c = Command::new(capi_bin(name));
    c.args([env_or("RVERBS_DEV_A", "rxe0").as_str(), "1"]);
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains("destroy_waits: all checks passed"), "{out}");
    out.lines()
        .filter_map(|l| l.split("returned ").nth(1))
        .map(|t| t.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// A thread holds a completion event (acked after 300 ms) and an SRQ_LIMIT_REACHED async
/// event (acked after 600 ms) while the main thread destroys the CQ and the SRQ: each destroy
/// returns only after its event's ack (the program checks the order on the monotonic clock),
/// as libibverbs' do. Before destroy waited, `ibv_destroy_cq` returned at once and the late
/// `ibv_ack_cq_events` touched a freed CQ.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_destroy_waits_for_event_acks() {
    let after = destroy_waits("destroy_waits");
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.iter().all(|&t| t >= 0.0), "{after:?}");
}

/// The same program on rdma-core's libibverbs: its destroys wait the same way (the behaviour
/// ours copies).
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn destroy_waits_for_event_acks_as_rdma_core_interop() {
    let after = destroy_waits("destroy_waits-rdma-core");
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(after.iter().all(|&t| t >= 0.0), "{after:?}");
}

/// Adds the route to 224.0.0.0/4 that rdma_cm's address resolution of a group needs (as
/// `rverbs-cm`'s `vm_mcast` does; idempotent).
fn mcast_route() {
    let out = Command::new("ip")
        .args(["route", "replace", "224.0.0.0/4", "dev", "d0"])
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        o => eprintln!("WARNING: ip route replace 224.0.0.0/4 dev d0: {o:?}"),
    }
}

/// Runs `tests/c/mcast.c` as built `name` on group `grp`; returns its output.
fn mcast(name: &str, grp: &str) -> String {
    mcast_route();
    let mut c = Command::new(capi_bin(name));
    c.args([env_or("RVERBS_ADDR_A", "10.10.0.1").as_str(), grp]);
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains("mcast: all checks passed"), "{out}");
    out
}

/// UD multicast through our librdmacm and libibverbs (the C program, static): a receiver
/// joined with `rdma_join_multicast` (its QP attached by the MULTICAST_JOIN event that
/// `rdma_get_cm_event` returns, with the join's context as private data) gets all 5
/// datagrams a send-only member (`rdma_join_multicast_ex`) sends through the AH made from its
/// event; after `rdma_leave_multicast` it gets none of 3 more; a leave of a group not joined
/// is `EADDRNOTAVAIL`.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_multicast_join_send_leave() {
    let out = mcast("mcast", "239.1.26.1");
    assert!(out.contains("delivered while joined: 5 of 5"), "{out}");
    assert!(out.contains("delivered after the leave: 0 of 3"), "{out}");
}

/// The same program on rdma-core's librdmacm and libibverbs: the behaviour ours copies.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn multicast_join_send_leave_as_rdma_core_interop() {
    let out = mcast("mcast-rdma-core", "239.1.26.2");
    assert!(out.contains("delivered while joined: 5 of 5"), "{out}");
    assert!(out.contains("delivered after the leave: 0 of 3"), "{out}");
}

/// Runs the C program built as `name` with `args`; returns its output (it must pass).
fn run_c(name: &str, args: &[&str], passed: &str) -> String {
    let mut c = Command::new(capi_bin(name));
    c.args(args);
    let (ok, out) = Proc::spawn(c).finish(Duration::from_secs(60));
    assert!(ok, "{out}");
    assert!(out.contains(passed), "{out}");
    out
}

/// Runs `tests/c/cm_destroy_waits.c` as built `name`.
fn cm_destroy_waits(name: &str) -> String {
    let addr = env_or("RVERBS_ADDR_A", "10.10.0.1");
    run_c(name, &[&addr], "cm_destroy_waits: all checks passed")
}

/// A thread holds an ADDR_RESOLVED event, and then a threaded server's CONNECT_REQUEST,
/// while the main thread destroys the event's id (the listening id for the request):
/// `rdma_destroy_id` returns only after the thread, having read the id through the event,
/// acknowledged it, as librdmacm's does. Before, it returned at once and `event->id` (or
/// `event->listen_id`) pointed at freed memory.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_rdma_destroy_id_waits_for_event_acks() {
    let out = cm_destroy_waits("cm_destroy_waits");
    assert_eq!(
        out.matches("returned after the event's ack").count(),
        2,
        "{out}"
    );
}

/// The same program on rdma-core's librdmacm: the behaviour ours copies.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn rdma_destroy_id_waits_for_event_acks_as_rdma_core_interop() {
    let out = cm_destroy_waits("cm_destroy_waits-rdma-core");
    assert_eq!(
        out.matches("returned after the event's ack").count(),
        2,
        "{out}"
    );
}

/// Runs `tests/c/batch_post.c` as built `name`; returns its "batch_post:" lines.
fn batch_post(name: &str) -> Vec<String> {
    let dev = env_or("RVERBS_DEV_A", "rxe0");
    run_c(name, &[&dev, "1"], "batch_post: all checks passed")
        .lines()
        .filter(|l| l.starts_with("batch_post: "))
        .map(str::to_string)
        .collect()
}

/// `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv` each handed 20 requests whose
/// 19th has `num_sge` -1: EINVAL with `bad_wr` at it, the 18 before it posted and completed
/// (across the 16-request batches the C drop-in converts at a time), the 20th not posted.
/// Before, the requests of the bad one's batch were not posted and the program waited for
/// 4 x 2 completions that never came.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn c_program_batch_post_posts_the_valid_prefix() {
    let lines = batch_post("batch_post");
    assert!(
        lines.contains(&"batch_post: the valid prefixes completed: 72 of 72".to_string()),
        "{lines:?}"
    );
}

/// The same program on rdma-core's libibverbs (its rxe provider) prints the same lines: the
/// same errors, `bad_wr`s and completions.
#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs an RDMA device: runs in the VM (cargo xtask test)"
)]
fn batch_post_matches_rdma_core_interop() {
    assert_eq!(batch_post("batch_post"), batch_post("batch_post-rdma-core"));
}
