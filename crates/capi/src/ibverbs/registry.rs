//! The handle registries by which the kernel's events name objects (CQs, QPs, SRQs by
//! user handle), and the hasher of the CQ registry.

use super::*;
use rverbs_uverbs::kernel::sync::{SpinGuard, SpinLock};

pub(super) struct CqPtr(pub(super) *mut CCq);
// SAFETY: only used to find the CQ an event names, under CQS's lock ([registry]).
unsafe impl Send for CqPtr {}

/// Hashes a CQ's user handle for [`CQS`] with one multiplication. The handles are unique
/// integers handed out in sequence (never chosen by a peer), so std's default SipHash, which
/// guards against keys crafted to collide, cost `ibv_get_cq_event` about 150 instructions per
/// event for nothing. Multiplying by an odd constant permutes the low bits (the bucket index)
/// and spreads into the high ones (the table's tag bits).
#[derive(Default)]
pub(super) struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; stay correct for any other input anyway.
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type CqMap = HashMap<u64, CqPtr, std::hash::BuildHasherDefault<HandleHasher>>;

/// CQs by the user handle their completion and async events carry (\[registry\]: a CQ is in
/// it from creation until its destroy takes it out, before freeing it).
///
/// Behind the data path's spin lock, not a `Mutex`: every `ibv_get_cq_event` takes it for one
/// look-up (a `Mutex` added its poisoning checks, which were ignored anyway, and a futex
/// wake check: about 12 of the ~60 instructions of a delivery, callgrind). It is held for a
/// look-up, an insert or a removal, and never across a call that can block or longjmp.
static CQS: SpinLock<Option<CqMap>> = SpinLock::new(None);

pub(super) fn cqs() -> SpinGuard<'static, Option<CqMap>> {
    CQS.lock()
}

/// The CQ with user handle `handle`, its event counted as handed to C; NULL when no CQ has
/// that handle (any more).
pub(super) fn deliver_cq_event(handle: u64) -> *mut CCq {
    let m = cqs();
    let Some(p) = m.as_ref().and_then(|m| m.get(&handle)).map(|p| p.0) else {
        return null_mut();
    };
    // SAFETY: [registry] p is in CQS and we hold its lock: the CQ is alive.
    let c = unsafe { &*p };
    c.events.delivered();
    p
}

/// A C object's address, by the user handle the kernel's async events name it with.
struct Addr(usize);

/// QPs (key `(QP, handle)`) and SRQs (key `(SRQ, handle)`), for async events
/// (\[registry\]).
static OBJS: Mutex<Option<HashMap<(u8, u64), Addr>>> = Mutex::new(None);
pub(super) const QP: u8 = 0;
pub(super) const SRQ: u8 = 1;

fn objs() -> std::sync::MutexGuard<'static, Option<HashMap<(u8, u64), Addr>>> {
    OBJS.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn register(kind: u8, handle: u64, p: usize) {
    objs()
        .get_or_insert_with(HashMap::new)
        .insert((kind, handle), Addr(p));
}

pub(super) fn unregister(kind: u8, handle: u64) {
    if let Some(m) = objs().as_mut() {
        m.remove(&(kind, handle));
    }
}

/// The QP or SRQ `(kind, handle)` with an async event counted as handed to C (when
/// `count`); NULL when there is none.
pub(super) fn deliver_async_event(kind: u8, handle: u64, count: bool) -> *mut c_void {
    let m = objs();
    let Some(a) = m.as_ref().and_then(|m| m.get(&(kind, handle))).map(|a| a.0) else {
        return null_mut();
    };
    if count {
        // SAFETY: [registry] the object is in OBJS and we hold its lock: alive; `kind` says
        // its owner type.
        let ev = unsafe {
            if kind == QP {
                &(*(a as *const CQp)).events
            } else {
                &(*(a as *const CSrq)).events
            }
        };
        ev.delivered();
    }
    a as *mut c_void
}
