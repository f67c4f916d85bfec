//! Completion channels (`ibv_comp_channel`).

use super::*;

/// An `ibv_comp_channel` and its rverbs channel.
#[repr(C)]
pub struct CChannel {
    /// What C sees (\[c-struct\]).
    pub c: UnsafeCell<ibv_comp_channel>,
    /// The rverbs channel.
    pub ch: Arc<CompChannel>,
}

from_c!(CChannel => ibv_comp_channel, "ibv_comp_channel");

symver!(ibv_create_comp_channel => "IBVERBS_1.0");
/// `ibv_create_comp_channel`. Its fd blocks, as libibverbs' does (a caller may make it
/// non-blocking with `fcntl`).
///
/// # Safety
/// `context` is ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    // SAFETY: [object] context.
    let c = obj!(unsafe { CContext::from_c(context) }, null);
    let ch = match CompChannel::create(&c.ctx).and_then(|ch| ch.set_blocking(true).map(|()| ch)) {
        Ok(ch) => ch,
        Err(e) => return null_with(&e),
    };
    let b = Box::new(CChannel {
        c: UnsafeCell::new(ibv_comp_channel {
            context,
            fd: ch.as_fd().as_raw_fd(),
            refcnt: 0,
        }),
        ch,
    });
    Box::into_raw(b).cast()
}

symver!(ibv_destroy_comp_channel => "IBVERBS_1.0");
/// `ibv_destroy_comp_channel`: `EBUSY` while CQs use it.
///
/// # Safety
/// `channel` came from [`ibv_create_comp_channel`]; on success it is gone.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    // SAFETY: [destroy] channel.
    let ch = obj!(unsafe { CChannel::from_c(channel) }, errno);
    if Arc::strong_count(&ch.ch) > 1 {
        return libc::EBUSY;
    }
    // SAFETY: [destroy] channel: boxed by ibv_create_comp_channel ([owner]).
    drop(unsafe { Box::from_raw(channel.cast::<CChannel>()) });
    0
}
