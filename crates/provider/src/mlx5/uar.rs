//! Dynamic UARs: when the kernel's alloc_ucontext answer has `tot_bfregs` 0 (what a 6.1
//! kernel answers to a library that announces `MLX5_LIB_CAP_DYN_UAR`), the context owns no
//! static UAR page and allocates each UAR it needs through the mlx5 driver object
//! `MLX5_IB_OBJECT_UAR` (methods `UAR_OBJ_ALLOC` / `UAR_OBJ_DESTROY` of
//! `mlx5_user_ioctl_cmds.h`), then maps it from the command fd at the offset the kernel
//! returned.
//!
//! The assignment of registers to QPs is libmlx5's (`mlx5_get_qp_uar`): one non-cached UAR
//! for the context (CQ doorbells and arming, and the QPs' doorbells when BlueFlame is off);
//! write-combining UARs for QPs, each giving two registers per 4 KiB UAR: first up to
//! `num_low_latency_bfregs` registers dedicated to one QP each (given back when the QP goes),
//! then up to `total_num_bfregs - num_low_latency_bfregs` shared ones, the least used chosen.
//! UARs are destroyed and unmapped when the context's driver is dropped.

#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use rustix::io::Errno;
use rverbs_uverbs::kernel::ioctl::IoctlCall;
use rverbs_uverbs::kernel::mapping::{MapAccess, Mapping};
use rverbs_uverbs::Error;

use super::abi::{
    MLX5_ADAPTER_PAGE_SIZE, MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE,
    MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET,
    MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE,
    MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE, MLX5_IB_METHOD_UAR_OBJ_ALLOC,
    MLX5_IB_METHOD_UAR_OBJ_DESTROY, MLX5_IB_OBJECT_UAR, MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF,
    MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC, MLX5_NUM_NON_FP_BFREGS_PER_UAR,
};
use super::wq::BfReg;

/// `MLX5_BF_OFFSET`: the first register's offset inside a 4 KiB UAR.
const BF_OFFSET: usize = 0x800;

/// The kernel operations dynamic UARs need: the UAR object's ioctls and mappings of the
/// command fd. [`KernelUars`] does them on a real device; tests give a fake kernel.
///
/// # Safety
/// What [`UarKernel::map`] returns becomes a doorbell target: the dynamic UAR code writes
/// (volatile, from any thread holding the register) anywhere in the `len` bytes it returned
/// until it passes them to [`UarKernel::unmap`]. An implementation promises that each mapping
/// it returns is `len` bytes of memory valid for such writes, aliased by no Rust reference
/// and by no other mapping it returned, and stays so until unmapped; and that `ioctl` writes
/// only through the call's PTR_OUT attributes, within their lengths.
pub unsafe trait UarKernel: Send + Sync + fmt::Debug {
    /// Issues `call` (an `MLX5_IB_OBJECT_UAR` method) on the context's command fd.
    ///
    /// # Safety
    /// `call` must be built as the method's specification says (rverbs' [`DynUar`] code
    /// does): the kernel writes through its PTR_OUT attributes.
    unsafe fn ioctl(&self, call: &mut IoctlCall<'_>) -> Result<(), Errno>;

    /// Maps `len` bytes of the command fd at `offset`, shared and writable.
    fn map(&self, offset: u64, len: usize) -> io::Result<NonNull<u8>>;

    /// Unmaps what [`UarKernel::map`] returned.
    ///
    /// # Safety
    /// `ptr`/`len` must be one mapping [`UarKernel::map`] returned, no longer used.
    unsafe fn unmap(&self, ptr: NonNull<u8>, len: usize);
}

/// [`UarKernel`] on a real uverbs device: ioctls and mmaps on a duplicate of the context's
/// command fd (so the UARs can be destroyed when the driver is dropped, whatever the order
/// in which the context closes its own fd).
#[derive(Debug)]
pub struct KernelUars {
    fd: OwnedFd,
    driver_id: u32,
}

impl KernelUars {
    /// Duplicates `cmd_fd` (close-on-exec); `driver_id` is the device's `RDMA_DRIVER_*`.
    pub fn new(cmd_fd: std::os::fd::BorrowedFd<'_>, driver_id: u32) -> io::Result<Self> {
        let fd = rustix::io::fcntl_dupfd_cloexec(cmd_fd, 0)
            .map_err(|e| Error::os("duplicate the mlx5 command fd for dynamic UARs", e))?;
        Ok(Self { fd, driver_id })
    }
}

// SAFETY: `map` is a fresh shared mapping of the device's UAR page (the kernel backs it as
// long as it is mapped; nothing else references it); `ioctl` is the kernel's, which writes
// only through the call's PTR_OUT attributes.
unsafe impl UarKernel for KernelUars {
    unsafe fn ioctl(&self, call: &mut IoctlCall<'_>) -> Result<(), Errno> {
        // SAFETY: the caller's contract (a call built per the UAR object's specification).
        unsafe { call.call(self.fd.as_fd(), self.driver_id) }
    }

    fn map(&self, offset: u64, len: usize) -> io::Result<NonNull<u8>> {
        // Write only, as libmlx5 maps UARs (nothing reads a UAR). Given up as raw parts to
        // the DynUar, which hands them back to `unmap`.
        let m =
            Mapping::shared(self.fd.as_fd(), offset, len, MapAccess::WriteOnly).map_err(|e| {
                Error::os("map an mlx5 dynamic UAR", e)
                    .with_detail(format!("offset {offset:#x}, {len} bytes"))
            })?;
        Ok(m.into_raw().0)
    }

    unsafe fn unmap(&self, ptr: NonNull<u8>, len: usize) {
        // SAFETY: the caller's contract: one mapping `map` returned (the parts of a Mapping
        // given up there, with the length asked), unused from now on.
        drop(unsafe { Mapping::from_raw(ptr, len) });
    }
}

/// One UAR allocated from the kernel and mapped; destroyed and unmapped on drop.
pub struct DynUar {
    kernel: Arc<dyn UarKernel>,
    handle: u32,
    map: Option<(NonNull<u8>, usize)>,
    page_id: u32,
}

// SAFETY: the mapping is device memory only written through the registers built over it
// (which synchronise themselves); the owner only unmaps it, once, on drop.
unsafe impl Send for DynUar {}
// SAFETY: as above; shared access only reads the pointer and the numbers.
unsafe impl Sync for DynUar {}

impl fmt::Debug for DynUar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynUar")
            .field("handle", &self.handle)
            .field("page_id", &self.page_id)
            .field("map", &self.map)
            .finish()
    }
}

impl DynUar {
    /// Allocates a UAR of `kind` (`MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF` or `_NC`) and maps it.
    /// `dev` names the device in errors. On any failure nothing is left: a UAR the kernel
    /// allocated is destroyed again.
    pub fn alloc(kernel: &Arc<dyn UarKernel>, kind: u32, dev: &str) -> io::Result<Self> {
        let what = if kind == MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC {
            "non-cached"
        } else {
            "write-combining"
        };
        let op = || format!("allocate a {what} UAR on {dev}");
        let mut offset = 0u64;
        // The kernel's u64 offset, u32 length and u32 page id, as libmlx5 passes them.
        let mut length = 0u32;
        let mut page_id = 0u32;
        let mut call = IoctlCall::new(MLX5_IB_OBJECT_UAR, MLX5_IB_METHOD_UAR_OBJ_ALLOC);
        let h = call.idr_new(MLX5_IB_ATTR_UAR_OBJ_ALLOC_HANDLE);
        call.const_in(MLX5_IB_ATTR_UAR_OBJ_ALLOC_TYPE, u64::from(kind));
        call.ptr_out(MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_OFFSET, &mut offset);
        call.ptr_out(MLX5_IB_ATTR_UAR_OBJ_ALLOC_MMAP_LENGTH, &mut length);
        call.ptr_out(MLX5_IB_ATTR_UAR_OBJ_ALLOC_PAGE_ID, &mut page_id);
        // SAFETY: built per the UAR_OBJ_ALLOC specification: a new IDR, a constant, three
        // outputs into locals that outlive the call.
        unsafe { kernel.ioctl(&mut call) }.map_err(|e| Error::os(op(), e))?;
        let handle = call.handle(h);
        let mut uar = Self {
            kernel: kernel.clone(),
            handle,
            map: None,
            page_id,
        };
        let len = length as usize;
        if len < MLX5_ADAPTER_PAGE_SIZE as usize || len % MLX5_ADAPTER_PAGE_SIZE as usize != 0 {
            // `uar` destroys the kernel object on drop.
            return Err(Error::protocol(
                op(),
                format!("the kernel answered a UAR of {length} bytes (whole 4 KiB UARs expected)"),
            )
            .into());
        }
        if kind == MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC && page_id > u32::from(u16::MAX) {
            return Err(Error::protocol(
                op(),
                format!("page id {page_id:#x} does not fit CREATE_CQ's 16-bit uar_page_index"),
            )
            .into());
        }
        let p = kernel
            .map(offset, len)
            .map_err(|e| Error::protocol(op(), e.to_string()))?;
        uar.map = Some((p, len));
        Ok(uar)
    }

    /// The UAR's index on the device (what CREATE_CQ/CREATE_QP name it by).
    pub fn page_id(&self) -> u32 {
        self.page_id
    }

    /// Start and length of the mapping.
    pub fn mapping(&self) -> (*mut u8, usize) {
        let (p, l) = self
            .map
            .expect("a DynUar is always mapped once alloc returns");
        (p.as_ptr(), l)
    }
}

impl Drop for DynUar {
    fn drop(&mut self) {
        if let Some((p, len)) = self.map.take() {
            // SAFETY: our mapping; every register over it belongs to the pool that owns
            // this UAR and is dropped with it (QPs and CQs hold the context alive).
            unsafe { self.kernel.unmap(p, len) };
        }
        let mut call = IoctlCall::new(MLX5_IB_OBJECT_UAR, MLX5_IB_METHOD_UAR_OBJ_DESTROY);
        call.idr(MLX5_IB_ATTR_UAR_OBJ_DESTROY_HANDLE, self.handle);
        // SAFETY: built per UAR_OBJ_DESTROY: the handle of a UAR this value owns.
        if let Err(e) = unsafe { self.kernel.ioctl(&mut call) } {
            tracing::error!("destroy mlx5 UAR handle {}: {e}", self.handle);
        }
    }
}

/// A register a QP holds from the dynamic pool; handed back on drop.
pub struct UarLease {
    pool: Arc<Mutex<PoolState>>,
    bf: Arc<BfReg>,
    kind: LeaseKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LeaseKind {
    /// The context's non-cached register (BlueFlame off): nothing to give back.
    Nc,
    Dedicated,
    Shared(usize),
}

impl fmt::Debug for UarLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UarLease({:?}, {:?})", self.kind, self.bf)
    }
}

impl UarLease {
    /// The register.
    pub fn bf(&self) -> &Arc<BfReg> {
        &self.bf
    }
}

impl Drop for UarLease {
    fn drop(&mut self) {
        let mut s = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        match self.kind {
            LeaseKind::Nc => {}
            // libmlx5 `mlx5_put_qp_uar`: a dedicated register goes to the tail of the list.
            LeaseKind::Dedicated => s.dedicated.push_back(self.bf.clone()),
            LeaseKind::Shared(i) => s.shared[i].1 -= 1,
        }
    }
}

#[derive(Debug, Default)]
struct PoolState {
    uars: Vec<DynUar>,
    dedicated: VecDeque<Arc<BfReg>>,
    shared: Vec<(Arc<BfReg>, u32)>,
    alloc_dedicated: u32,
}

/// A context's dynamic UARs: the non-cached one and the write-combining ones QPs use.
pub struct DynUarPool {
    kernel: Arc<dyn UarKernel>,
    dev: String,
    nc: DynUar,
    nc_bf: Arc<BfReg>,
    state: Arc<Mutex<PoolState>>,
    max_dedicated: u32,
    max_shared: u32,
    bf_reg_size: u32,
    uars_per_page: u32,
}

impl fmt::Debug for DynUarPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynUarPool")
            .field("nc", &self.nc)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl DynUarPool {
    /// Allocates the context's non-cached UAR (libmlx5 `mlx5_set_singleton_nc_uar`).
    /// `total_bfregs` / `low_latency_bfregs` are what the alloc_ucontext request asked for;
    /// `bf_reg_size` and `uars_per_page` what the kernel answered.
    pub fn new(
        kernel: Arc<dyn UarKernel>,
        dev: &str,
        total_bfregs: u32,
        low_latency_bfregs: u32,
        bf_reg_size: u32,
        uars_per_page: u32,
    ) -> io::Result<Self> {
        let nc = DynUar::alloc(&kernel, MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC, dev)?;
        let (p, len) = nc.mapping();
        // SAFETY: the register lies in `nc`'s mapping, which the pool keeps until it is
        // dropped, after every QP and CQ (they hold the context, which owns the pool).
        let nc_bf = Arc::new(unsafe { BfReg::at(p, len, BF_OFFSET, 0, nc.page_id())? });
        Ok(Self {
            kernel,
            dev: dev.to_string(),
            nc,
            nc_bf,
            state: Arc::new(Mutex::new(PoolState::default())),
            max_dedicated: low_latency_bfregs,
            max_shared: total_bfregs.saturating_sub(low_latency_bfregs),
            bf_reg_size,
            uars_per_page: uars_per_page.max(1),
        })
    }

    /// The non-cached UAR (CQ doorbells; its page id goes into CREATE_CQ).
    pub fn nc(&self) -> &DynUar {
        &self.nc
    }

    /// A register for a new QP (libmlx5 `mlx5_get_qp_uar`). `bf_off`: BlueFlame is off
    /// (`MLX5_SHUT_UP_BF` or `bf_reg_size` 0), so the non-cached register serves.
    pub fn qp_register(&self, bf_off: bool) -> io::Result<UarLease> {
        if bf_off || self.bf_reg_size == 0 {
            return Ok(UarLease {
                pool: self.state.clone(),
                bf: self.nc_bf.clone(),
                kind: LeaseKind::Nc,
            });
        }
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(bf) = s.dedicated.pop_front() {
                return Ok(UarLease {
                    pool: self.state.clone(),
                    bf,
                    kind: LeaseKind::Dedicated,
                });
            }
            if s.alloc_dedicated < self.max_dedicated {
                let regs = self.alloc_regs(&mut s)?;
                s.alloc_dedicated += regs.len() as u32;
                s.dedicated.extend(regs);
                continue;
            }
            if (s.shared.len() as u32) < self.max_shared {
                let regs = self.alloc_regs(&mut s)?;
                s.shared.extend(regs.into_iter().map(|b| (b, 0)));
            }
            // The least used shared register, the first of equals (libmlx5 takes a later
            // one only if strictly less used).
            let mut best = None;
            for (i, &(_, n)) in s.shared.iter().enumerate() {
                if best.map_or(true, |b: usize| n < s.shared[b].1) {
                    best = Some(i);
                }
            }
            let Some(i) = best else {
                return Err(Error::invalid(
                    format!("create QP on {}", self.dev),
                    "no blue-flame register: the context asked for none beyond the low-latency ones",
                )
                .into());
            };
            s.shared[i].1 += 1;
            return Ok(UarLease {
                pool: self.state.clone(),
                bf: s.shared[i].0.clone(),
                kind: LeaseKind::Shared(i),
            });
        }
    }

    /// Allocates a write-combining UAR and makes its registers (two per 4 KiB UAR of the
    /// system page), in libmlx5's order.
    fn alloc_regs(&self, s: &mut PoolState) -> io::Result<Vec<Arc<BfReg>>> {
        let uar = DynUar::alloc(&self.kernel, MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF, &self.dev)?;
        let (p, len) = uar.mapping();
        let n = self.uars_per_page * MLX5_NUM_NON_FP_BFREGS_PER_UAR;
        let mut regs = Vec::with_capacity(n as usize);
        for j in 0..n {
            let within =
                (j / MLX5_NUM_NON_FP_BFREGS_PER_UAR) as usize * MLX5_ADAPTER_PAGE_SIZE as usize;
            let off = within
                + BF_OFFSET
                + (j % MLX5_NUM_NON_FP_BFREGS_PER_UAR) as usize * self.bf_reg_size as usize;
            // SAFETY: inside `uar`'s mapping (checked by `at`), which the pool keeps as long
            // as itself, after every QP holding a register.
            regs.push(Arc::new(unsafe {
                BfReg::at(
                    p,
                    len,
                    off,
                    self.bf_reg_size as usize / 2,
                    uar.page_id() + j / MLX5_NUM_NON_FP_BFREGS_PER_UAR,
                )?
            }));
        }
        s.uars.push(uar);
        Ok(regs)
    }
}

impl Drop for DynUarPool {
    fn drop(&mut self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.dedicated.clear();
        s.shared.clear();
        // The write-combining UARs, then (as a field, after this) the non-cached one.
        s.uars.clear();
    }
}
