//! Shared by the mlx5 tests that drive `Mlx5Driver` through the provider seam
//! (`mlx5_qp.rs`, `mlx5_oracle.rs`): the command fd the seam wants, and a fake kernel for
//! dynamic UARs answering as the oracle harness's does (`harnesses/mlx5_oracle/harness.c`,
//! `fake_uar_ioctl`).

#![allow(dead_code)]

use std::fmt::Write as _;
use std::ptr::NonNull;
use std::sync::Mutex;

use crate::mlx5::abi::{
    MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE, MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH,
    MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID,
    MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, MLX5_IB_METHOD_UAR_OBJ_ALLOC, MLX5_IB_METHOD_UAR_OBJ_DESTROY,
    MLX5_IB_OBJECT_UAR,
};
use crate::mlx5::driver::Mlx5Driver;
use crate::mlx5::uar::UarKernel;
use rverbs_uverbs::ah::AhAttr;
use rverbs_uverbs::driver::{
    CqCreated, CqOps, CreateFn, Driver, KernelObj, QpCreated, QpOps, QpRequest, SrqCreated, SrqOps,
};
use rverbs_uverbs::kernel::ioctl::IoctlCall;

/// The system page size the fakes use.
pub const PAGE: usize = 4096;

/// A command fd for the seam: /dev/null, opened once and kept for the process (the mlx5 data
/// path never uses it: no write() doorbells).
pub fn fd() -> std::os::fd::BorrowedFd<'static> {
    use std::os::fd::AsFd;
    static NULL: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    NULL.get_or_init(|| std::fs::File::open("/dev/null").unwrap())
        .as_fd()
}

/// A kernel object on [`fd`].
pub fn kobj() -> KernelObj<'static> {
    KernelObj {
        fd: fd(),
        handle: 1,
    }
}

/// The harness's dynamic UARs: UAR `k` is mapped at offset `(DYN_OFF + k) * PAGE`, has page
/// id `DYN_PAGE_ID + k` and handle `0x100 + k` (harness.c, `fake_uar_ioctl`).
pub const DYN_UARS: usize = 8;
pub const DYN_OFF: u64 = 0x1000;
pub const DYN_PAGE_ID: u32 = 0x30;

/// The fake kernel's `MLX5_IB_OBJECT_UAR`, answering as the harness's does; what it prints
/// and maps is collected for the run to take in order.
#[derive(Debug, Default)]
pub struct FakeUars {
    /// The state, for tests to set knobs and inspect.
    pub st: Mutex<FakeUarState>,
}

#[derive(Debug, Default)]
pub struct FakeUarState {
    /// Backing memory of the UARs.
    pub mem: Vec<u64>,
    /// Per UAR allocated so far: not destroyed yet.
    pub alive: Vec<bool>,
    /// The `fail_at`-th allocation (1-based) fails with ENOMEM (0: none).
    pub fail_at: u32,
    /// What the harness prints for the same calls.
    pub out: String,
    /// UARs mapped since the last look: (index, address).
    pub mapped: Vec<(usize, *mut u8)>,
    /// Handles destroyed since the last look.
    pub destroyed: Vec<u32>,
    /// Answer this mmap length instead of one page (bad-input tests).
    pub bad_len: Option<u32>,
    /// Answer page ids from here instead of `DYN_PAGE_ID`.
    pub page_base: Option<u32>,
    /// Mappings fail.
    pub map_fail: bool,
}

impl FakeUarState {
    /// UARs allocated and not destroyed.
    pub fn live(&self) -> usize {
        self.alive.iter().filter(|a| **a).count()
    }
}

// SAFETY: the raw pointers are into `mem`, owned by the state; all access is under the lock.
unsafe impl Send for FakeUarState {}

// SAFETY: `map` hands out disjoint 4 KiB pieces of `mem` (a heap buffer no reference is
// taken into while they are mapped, kept until the fake is dropped, after every UAR);
// `ioctl` writes only PTR_OUT attributes, at most their lengths.
unsafe impl UarKernel for FakeUars {
    unsafe fn ioctl(&self, call: &mut IoctlCall<'_>) -> Result<(), rustix::io::Errno> {
        let mut s = self.st.lock().unwrap();
        let h = call.header(1);
        assert_eq!(h.object_id, MLX5_IB_OBJECT_UAR);
        if h.method_id == MLX5_IB_METHOD_UAR_OBJ_DESTROY {
            let a = call.attrs();
            assert_eq!(a.len(), 1);
            assert_eq!((a[0].attr_id, a[0].len, a[0].flags), (0x1000, 0, 1));
            let k = a[0].data as usize - 0x100;
            if !s.alive.get(k).copied().unwrap_or(false) {
                return Err(rustix::io::Errno::NOENT);
            }
            s.alive[k] = false;
            s.destroyed.push(a[0].data as u32);
            return Ok(());
        }
        assert_eq!(h.method_id, MLX5_IB_METHOD_UAR_OBJ_ALLOC);
        let mut line = format!("  ioctl {:x}/{:x}", h.object_id, h.method_id);
        for a in call.attrs() {
            let _ = write!(line, " {:x}:{}:{}", a.attr_id, a.len, a.flags);
            if a.attr_id == MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE
                || a.attr_id == MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE
            {
                let _ = write!(line, "={:x}", a.data);
            }
        }
        let _ = writeln!(s.out, "{line}");
        let k = s.alive.len();
        if k == DYN_UARS || (s.fail_at != 0 && k as u32 + 1 == s.fail_at) {
            s.fail_at = 0;
            s.out.push_str("  = ENOMEM\n");
            return Err(rustix::io::Errno::NOMEM);
        }
        s.alive.push(true);
        for a in call.attrs_mut() {
            let v: u64 = match a.attr_id {
                MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE => {
                    a.data = 0x100 + k as u64;
                    continue;
                }
                MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET => (DYN_OFF + k as u64) * PAGE as u64,
                MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH => {
                    u64::from(s.bad_len.unwrap_or(PAGE as u32))
                }
                MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID => {
                    u64::from(s.page_base.unwrap_or(DYN_PAGE_ID)) + k as u64
                }
                _ => continue,
            };
            let n = usize::from(a.len).min(8);
            // SAFETY: a PTR_OUT attribute: `data` points to `len` writable bytes the caller
            // keeps for the call (the kernel writes at most `len`).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    v.to_ne_bytes().as_ptr(),
                    a.data as usize as *mut u8,
                    n,
                )
            };
        }
        Ok(())
    }

    fn map(&self, offset: u64, len: usize) -> std::io::Result<NonNull<u8>> {
        let mut s = self.st.lock().unwrap();
        let k = (offset / PAGE as u64).wrapping_sub(DYN_OFF) as usize;
        if s.map_fail || !s.alive.get(k).copied().unwrap_or(false) || len != PAGE {
            return Err(std::io::Error::from_raw_os_error(libc_einval()));
        }
        if s.mem.is_empty() {
            s.mem = vec![0u64; DYN_UARS * PAGE / 8];
        }
        // SAFETY: page `k` of `mem` (k < DYN_UARS), which is never reallocated.
        let p = unsafe { s.mem.as_mut_ptr().cast::<u8>().add(k * PAGE) };
        s.mapped.push((k, p));
        Ok(NonNull::new(p).unwrap())
    }

    unsafe fn unmap(&self, _ptr: NonNull<u8>, _len: usize) {}
}

fn libc_einval() -> i32 {
    rustix::io::Errno::INVAL.raw_os_error()
}

/// [`Mlx5Driver`]'s create methods with a test's fake kernel as the callback.
///
/// The methods are `unsafe` because a provider may map what a create response names; mlx5
/// maps nothing a create response names (its rings are memory it allocates, its UAR pages
/// were mapped when the driver was built, and the numbers a response carries — CQN, QPN,
/// SRQN, register index — are checked before use), so answers a fake kernel makes up cannot
/// make its data path touch memory it does not own.
pub trait FakeCreate {
    fn sim_create_cq(
        &self,
        cmd_fd: std::os::fd::BorrowedFd<'_>,
        cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> std::io::Result<Box<dyn CqOps>>;
    fn sim_create_qp(
        &self,
        cmd_fd: std::os::fd::BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> std::io::Result<Box<dyn QpOps>>;
    fn sim_create_srq(
        &self,
        cmd_fd: std::os::fd::BorrowedFd<'_>,
        max_wr: u32,
        max_sge: u32,
        create: &mut CreateFn<'_, SrqCreated>,
    ) -> std::io::Result<Box<dyn SrqOps>>;
    fn sim_create_ah(&self, attr: &AhAttr, create: &mut CreateFn<'_, u32>) -> std::io::Result<u32>;
}

impl FakeCreate for Mlx5Driver {
    fn sim_create_cq(
        &self,
        cmd_fd: std::os::fd::BorrowedFd<'_>,
        cqe: u32,
        create: &mut CreateFn<'_, CqCreated>,
    ) -> std::io::Result<Box<dyn CqOps>> {
        // SAFETY: see the trait: mlx5 maps nothing a create response names.
        unsafe { Driver::create_cq(self, cmd_fd, cqe, create) }
    }

    fn sim_create_qp(
        &self,
        cmd_fd: std::os::fd::BorrowedFd<'_>,
        req: &QpRequest,
        create: &mut CreateFn<'_, QpCreated>,
    ) -> std::io::Result<Box<dyn QpOps>> {
        // SAFETY: see the trait: mlx5 maps nothing a create response names.
        unsafe { Driver::create_qp(self, cmd_fd, req, create) }
    }

    fn sim_create_srq(
        &self,
        cmd_fd: std::os::fd::BorrowedFd<'_>,
        max_wr: u32,
        max_sge: u32,
        create: &mut CreateFn<'_, SrqCreated>,
    ) -> std::io::Result<Box<dyn SrqOps>> {
        // SAFETY: see the trait: mlx5 maps nothing a create response names.
        unsafe { Driver::create_srq(self, cmd_fd, max_wr, max_sge, create) }
    }

    fn sim_create_ah(&self, attr: &AhAttr, create: &mut CreateFn<'_, u32>) -> std::io::Result<u32> {
        // SAFETY: see the trait: mlx5 maps nothing a create response names.
        unsafe { Driver::create_ah(self, attr, create) }
    }
}
