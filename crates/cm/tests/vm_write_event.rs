//! `CmId::write_event` (`WRITE_CM_EVENT`, librdmacm's `rdma_write_cm_event` of rdma-core 60)
//! against the kernel, in the VM: the 7.x kernels queue the USER event on the id's channel
//! (read there, or by the id itself when synchronous), 6.1 and 6.12 have no such command and
//! are refused by name. Runs in every guest (rxe; siw in the siw stages is not needed: the
//! command is the rdma_cm's, not the device's).

use std::io::ErrorKind;

use rverbs_cm::*;

/// The major version of the running kernel.
fn kernel_major() -> u32 {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    release.split('.').next().unwrap().parse().unwrap()
}

#[test]
#[cfg_attr(
    not(rverbs_vm),
    ignore = "needs the rdma_cm: runs in the VM (cargo xtask test)"
)]
fn user_events_reach_the_channel_where_the_kernel_has_write_cm_event() {
    let ch = EventChannel::new().unwrap();
    let id = CmId::create(Some(&ch), PortSpace::TCP).unwrap();
    let sync = CmId::create(None, PortSpace::UDP).unwrap();
    let r = id.write_event(-5, 0x0102_0304_0506_0708);
    if kernel_major() < 7 {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        assert!(
            e.to_string()
                .contains("this kernel's rdma_cm has no WRITE_CM_EVENT command"),
            "{e}"
        );
        let e = sync.write_event(0, 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        assert!(ch.try_get_event().unwrap().is_none(), "nothing was queued");
        return;
    }
    r.unwrap();
    let ev = ch.get_event().unwrap();
    assert_eq!(ev.kind(), CmEventKind::USER);
    assert!(ev.is_for(&id));
    assert_eq!(ev.status(), -5);
    assert_eq!(ev.arg(), Some(0x0102_0304_0506_0708));
    assert_eq!(ev.conn(), None, "a USER event's parameter is its argument");
    assert!(ev.private_data().is_empty());
    // A synchronous (UD) id reads its own.
    sync.write_event(3, u64::MAX).unwrap();
    let ev = sync.get_event(None).unwrap().expect("the USER event");
    assert_eq!(
        (ev.kind(), ev.status(), ev.arg(), ev.ud()),
        (CmEventKind::USER, 3, Some(u64::MAX), None)
    );
    assert!(ch.try_get_event().unwrap().is_none(), "one event each");
}
