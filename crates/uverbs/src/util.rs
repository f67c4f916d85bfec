//! Small helpers shared by the object modules.

/// A process-wide unique user handle for objects whose events name them.
pub fn next_user_handle() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: only uniqueness matters, not ordering with other memory.
    NEXT.fetch_add(1, Ordering::Relaxed)
}
