//! Event channels (`rdma_event_channel`).

use super::*;

/// An `rdma_event_channel` and the rverbs channel behind it.
#[repr(C)]
pub struct CEventChannel {
    /// What C sees.
    pub c: rdma_event_channel,
    /// The rverbs channel.
    pub ch: EventChannel,
}

from_c!(CEventChannel => rdma_event_channel, "rdma_event_channel");

pub(super) fn new_channel(ch: EventChannel) -> *mut CEventChannel {
    Box::into_raw(Box::new(CEventChannel {
        c: rdma_event_channel { fd: ch.as_raw_fd() },
        ch,
    }))
}

symver!(rdma_create_event_channel => "RDMACM_1.0");
/// `rdma_create_event_channel`: NULL and `errno` when `/dev/infiniband/rdma_cm` cannot be
/// opened.
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    match EventChannel::new() {
        Ok(ch) => new_channel(ch).cast(),
        Err(e) => {
            set_errno(fail(&e));
            null_mut()
        }
    }
}

symver!(rdma_destroy_event_channel => "RDMACM_1.0");
/// `rdma_destroy_event_channel`.
///
/// # Safety
/// `channel` came from [`rdma_create_event_channel`] and no id uses it any more.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    if !channel.is_null() {
        // SAFETY: [destroy] channel: boxed by rdma_create_event_channel ([owner]).
        drop(unsafe { Box::from_raw(channel as *mut CEventChannel) });
    }
}
