//! What a memory region or window lets the device and peers do: [`AccessFlags`].

use crate::newtype::flag_set;

flag_set! {
    /// `IB_UVERBS_ACCESS_*` / `ibv_access_flags`.
    pub struct AccessFlags: u32 {
        /// The local device may write the memory (receives, RDMA READ results).
        const LOCAL_WRITE = 1 << 0;
        /// Peers may RDMA WRITE the memory (needs LOCAL_WRITE).
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ the memory.
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on the memory (needs LOCAL_WRITE).
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound to the region.
        const MW_BIND = 1 << 4;
        /// Addresses are offsets from the region's start.
        const ZERO_BASED = 1 << 5;
        /// On-demand paging.
        const ON_DEMAND = 1 << 6;
        /// The memory is backed by huge pages.
        const HUGETLB = 1 << 7;
        /// Peers may FLUSH the region to the global visibility point (IBTA 1.5; only on a
        /// device that reports FLUSH_GLOBAL: [`crate::op::DeviceCapsEx`]).
        const FLUSH_GLOBAL = 1 << 8;
        /// Peers may FLUSH the region to persistence (IBTA 1.5; the kernel takes it only for
        /// memory it knows to be persistent).
        const FLUSH_PERSISTENT = 1 << 9;
        /// Optional: a kernel or device that does not support it ignores it.
        const RELAXED_ORDERING = 1 << 20;
    }
}
