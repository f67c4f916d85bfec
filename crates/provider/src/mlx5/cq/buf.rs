//! The CQ's memory: the CQE ring and doorbell record we allocate (sizes, the CQE size), and
//! the CREATE_CQ driver data and response.

#![allow(unsafe_code)]

use super::*;

use std::fmt;

use rverbs_uverbs::kernel::mapping::Mapping;
use rverbs_uverbs::Error;

use crate::mlx5::abi::{
    mlx5_ib_create_cq, mlx5_ib_create_cq_resp, MLX5_CQ_CI_MASK,
    MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX, MLX5_MAX_CQ_ENTRIES,
};
use crate::mlx5::cqe::CqeOpcode;

/// Size of one CQE slot. With 128-byte CQEs the CQE64 is the second half of each slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CqeSize {
    /// 64-byte CQEs (libmlx5's default).
    #[default]
    B64,
    /// 128-byte CQEs.
    B128,
}

impl CqeSize {
    /// Bytes per slot.
    pub const fn bytes(self) -> usize {
        match self {
            CqeSize::B64 => 64,
            CqeSize::B128 => 128,
        }
    }
}

/// `op_own` of an entry software owns and the device has not written yet: opcode INVALID,
/// owner bit 0 (libmlx5's `mlx5_alloc_cq_buf()` and the kernel's `init_cq_frag_buf()`).
pub const OP_OWN_INIT: u8 = CqeOpcode::INVALID.0 << 4;

/// Entries the ring gets for a request of `cqe` completions: the next power of two above
/// `cqe` (`roundup_pow_of_two(cqe + 1)`, as libmlx5 and the kernel both compute it). The
/// kernel is told `ncqe - 1`, which makes it arrive at the same `ncqe`.
pub fn ring_entries(cqe: u32) -> rverbs_uverbs::Result<u32> {
    if cqe == 0 {
        return Err(Error::invalid(OP, "a CQ needs at least one entry (cqe = 0)").into());
    }
    match cqe.checked_add(1).and_then(u32::checked_next_power_of_two) {
        Some(n) if n <= MLX5_MAX_CQ_ENTRIES => Ok(n),
        _ => Err(Error::invalid(
            OP,
            format!(
                "cqe {cqe} needs a ring above the mlx5 maximum of {MLX5_MAX_CQ_ENTRIES} entries"
            ),
        )
        .into()),
    }
}

/// Anonymous, page-aligned memory that stays at one address until dropped (a
/// [`Mapping`]).
pub(crate) struct Region {
    map: Mapping,
}

impl Region {
    /// Maps `len` zeroed bytes.
    pub(crate) fn new(len: usize) -> rverbs_uverbs::Result<Self> {
        let map = Mapping::anonymous(len).map_err(|e| {
            Error::os("mmap mlx5 queue buffer", e).with_detail(format!("{len} bytes"))
        })?;
        Ok(Self { map })
    }

    /// The start of the memory.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.map.ptr().as_ptr()
    }
}

/// The memory of one mlx5 CQ: `ncqe` CQE slots, page aligned, then the doorbell record (two
/// big-endian u32: SET_CI, ARM) at the start of the following page.
///
/// Every slot's `op_own` starts as [`OP_OWN_INIT`] and the doorbell record as zero. The
/// buffer never moves; it is unmapped on drop, which must not happen while the kernel CQ that
/// was given its addresses still exists (destroy the CQ first).
pub struct CqBuf {
    pub(super) region: Region,
    pub(super) ncqe: u32,
    pub(super) cqe_size: CqeSize,
    pub(super) dbrec_off: usize,
}

// SAFETY: CqBuf owns its mapping; nothing in it is tied to a thread.
unsafe impl Send for CqBuf {}

impl fmt::Debug for CqBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqBuf")
            .field("buf_addr", &format_args!("{:#x}", self.buf_addr()))
            .field("db_addr", &format_args!("{:#x}", self.db_addr()))
            .field("ncqe", &self.ncqe)
            .field("cqe_size", &self.cqe_size)
            .finish()
    }
}

impl CqBuf {
    /// Allocates and initialises the buffer for a CQ of at least `cqe` entries.
    pub fn new(cqe: u32, cqe_size: CqeSize) -> rverbs_uverbs::Result<Self> {
        let ncqe = ring_entries(cqe)?;
        let page = rustix::param::page_size();
        let ring_bytes = ncqe as usize * cqe_size.bytes();
        let dbrec_off = ring_bytes.div_ceil(page) * page;
        let region = Region::new(dbrec_off + page)?;
        let buf = Self {
            region,
            ncqe,
            cqe_size,
            dbrec_off,
        };
        let tail = cqe_size.bytes() - 1;
        for i in 0..ncqe as usize {
            // SAFETY: slot `i` lies inside the ring (i < ncqe), which lies inside the mapping;
            // nobody else knows the buffer yet.
            unsafe {
                buf.ring_ptr()
                    .add(i * cqe_size.bytes() + tail)
                    .write(OP_OWN_INIT)
            };
        }
        Ok(buf)
    }

    /// Ring entries (a power of two).
    #[cfg(any(test, feature = "internals"))]
    pub fn ncqe(&self) -> u32 {
        self.ncqe
    }

    /// The `cqe` to give the kernel: `ncqe - 1`.
    #[cfg(any(test, feature = "internals"))]
    pub fn kernel_cqe(&self) -> u32 {
        self.ncqe - 1
    }

    /// Bytes per slot.
    #[cfg(any(test, feature = "internals"))]
    pub fn cqe_size(&self) -> CqeSize {
        self.cqe_size
    }

    /// Address of the first slot (`buf_addr`).
    pub fn buf_addr(&self) -> u64 {
        self.region.ptr() as usize as u64
    }

    /// Address of the doorbell record (`db_addr`).
    pub fn db_addr(&self) -> u64 {
        self.buf_addr() + self.dbrec_off as u64
    }

    /// First byte of the ring. Writing it is for simulated devices (tests) only and must
    /// follow the ownership protocol in the module docs.
    pub fn ring_ptr(&self) -> *mut u8 {
        self.region.ptr()
    }

    /// The doorbell record: `[SET_CI, ARM]`, each a big-endian u32.
    pub fn dbrec_ptr(&self) -> *mut u32 {
        // SAFETY: dbrec_off < region.len (a whole page follows the ring).
        unsafe { self.region.ptr().add(self.dbrec_off).cast::<u32>() }
    }

    /// The driver data of CREATE_CQ for this buffer: no CQE compression, no flags unless
    /// a UAR page index is given (then `MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX`). Without an
    /// index the kernel uses the context's first static UAR page, which is what rverbs maps.
    pub fn create_cq_udata(&self, uar_page_index: Option<u16>) -> mlx5_ib_create_cq {
        mlx5_ib_create_cq {
            buf_addr: self.buf_addr(),
            db_addr: self.db_addr(),
            cqe_size: self.cqe_size.bytes() as u32,
            cqe_comp_en: 0,
            cqe_comp_res_format: 0,
            flags: if uar_page_index.is_some() {
                MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX
            } else {
                0
            },
            uar_page_index: uar_page_index.unwrap_or(0),
            reserved0: 0,
            reserved1: 0,
        }
    }
}

/// Reads the CQ number out of the CREATE_CQ driver response (`mlx5_ib_create_cq_resp`).
/// `resp` is what the kernel filled; fewer than 4 bytes is an error.
pub fn parse_create_cq_resp(resp: &[u8]) -> rverbs_uverbs::Result<u32> {
    use zerocopy::FromBytes;
    let mut full = [0u8; core::mem::size_of::<mlx5_ib_create_cq_resp>()];
    if resp.len() < 4 {
        return Err(Error::protocol(
            "mlx5 create CQ",
            format!(
                "driver response of {} bytes has no cqn (need 4 of {})",
                resp.len(),
                full.len()
            ),
        )
        .into());
    }
    let n = resp.len().min(full.len());
    full[..n].copy_from_slice(&resp[..n]);
    let r = mlx5_ib_create_cq_resp::read_from_bytes(&full[..]).map_err(|_| {
        Error::protocol("mlx5 create CQ", "driver response does not fit the struct")
    })?;
    if r.cqn > MLX5_CQ_CI_MASK {
        return Err(Error::protocol(
            "mlx5 create CQ",
            format!("cqn {:#x} does not fit 24 bits", r.cqn),
        )
        .into());
    }
    Ok(r.cqn)
}
