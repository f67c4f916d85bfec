//! The mlx5 driver data of GET_CONTEXT (alloc_ucontext): what rverbs asks for and what it
//! learns.

use zerocopy::FromBytes;

use rverbs_uverbs::Error;

use super::abi::{
    mlx5_ib_alloc_ucontext_req_v2, mlx5_ib_alloc_ucontext_resp, MLX5_ADAPTER_PAGE_SIZE,
    MLX5_CQE_VERSION_V0, MLX5_CQE_VERSION_V1, MLX5_DEF_TOT_UUARS,
    MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET,
    MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_DUMP_FILL_MKEY, MLX5_IB_MMAP_CMD_SHIFT,
    MLX5_IB_MMAP_REGULAR_PAGE, MLX5_LIB_CAP_4K_UAR, MLX5_LIB_CAP_DYN_UAR, MLX5_MAX_BFREGS,
    MLX5_MED_BFREGS_TSHOLD, MLX5_NUM_NON_FP_BFREGS_PER_UAR,
};

const OP: &str = "mlx5 alloc_ucontext";

/// Bytes of the response every mlx5 kernel fills: `qp_tab_size` through `num_ports` and its
/// pad (`flow_action_flags` today), i.e. up to `comp_mask`.
pub const RESP_MIN_LEN: usize = core::mem::offset_of!(mlx5_ib_alloc_ucontext_resp, comp_mask);

/// The alloc_ucontext request rverbs sends, and the parser of the answer.
///
/// The defaults are libmlx5's request without DEVX (which rverbs does not use): its bfreg
/// counts, CQE version up to 1, 4 KiB UARs and dynamic UARs (`MLX5_LIB_CAP_DYN_UAR`: a
/// kernel that supports them then allocates no static UAR page and answers `tot_bfregs` 0;
/// see [`super::uar`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mlx5ContextUdata {
    /// `total_num_bfregs` (blue-flame registers; two per 4 KiB UAR).
    pub total_num_bfregs: u32,
    /// `num_low_latency_bfregs`.
    pub num_low_latency_bfregs: u32,
    /// `max_cqe_version`: 0 or 1.
    pub max_cqe_version: u8,
    /// `lib_caps` (`MLX5_LIB_CAP_*`).
    pub lib_caps: u64,
}

impl Mlx5ContextUdata {
    /// The request for a system page size of `page_size` bytes: libmlx5's default bfreg
    /// counts (16, or one system page's worth of UARs if more; 4 low-latency ones, or all but
    /// 12), `MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR`, CQE version up to 1.
    pub fn new(page_size: usize) -> Self {
        let per_page =
            (page_size as u32 / MLX5_ADAPTER_PAGE_SIZE).max(1) * MLX5_NUM_NON_FP_BFREGS_PER_UAR;
        let total = MLX5_DEF_TOT_UUARS
            .max(per_page)
            .next_multiple_of(MLX5_NUM_NON_FP_BFREGS_PER_UAR);
        let low = 4u32.max(total.saturating_sub(MLX5_MED_BFREGS_TSHOLD));
        Self {
            total_num_bfregs: total,
            num_low_latency_bfregs: low,
            max_cqe_version: MLX5_CQE_VERSION_V1,
            lib_caps: MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR,
        }
    }

    /// The request struct, after checking what the kernel would refuse.
    pub fn request(&self) -> rverbs_uverbs::Result<mlx5_ib_alloc_ucontext_req_v2> {
        if self.total_num_bfregs == 0 || self.total_num_bfregs > MLX5_MAX_BFREGS {
            return Err(Error::invalid(
                OP,
                format!(
                    "total_num_bfregs {} outside 1..={MLX5_MAX_BFREGS}",
                    self.total_num_bfregs
                ),
            )
            .into());
        }
        if self.num_low_latency_bfregs > self.total_num_bfregs - 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "num_low_latency_bfregs {} must be below total_num_bfregs {}",
                    self.num_low_latency_bfregs, self.total_num_bfregs
                ),
            )
            .into());
        }
        if self.max_cqe_version > MLX5_CQE_VERSION_V1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "max_cqe_version {} not supported (0 or 1)",
                    self.max_cqe_version
                ),
            )
            .into());
        }
        Ok(mlx5_ib_alloc_ucontext_req_v2 {
            total_num_bfregs: self.total_num_bfregs,
            num_low_latency_bfregs: self.num_low_latency_bfregs,
            flags: 0,
            comp_mask: 0,
            max_cqe_version: self.max_cqe_version,
            reserved0: 0,
            reserved1: 0,
            reserved2: 0,
            lib_caps: self.lib_caps,
        })
    }

    /// Parses the driver response. `resp` is the part of the response buffer the kernel
    /// filled (pass the whole buffer if the length is unknown: the `response_length` field,
    /// when present and non-zero, limits what is read).
    ///
    /// Shorter than [`RESP_MIN_LEN`] (36 bytes) is an error. Fields past the filled length
    /// take the values older kernels imply: `cqe_version` 0, no clock offset, no dump-fill
    /// mkey, UAR size = system page and one UAR per page (libmlx5's `adjust_uar_info`).
    /// A CQE version above the one asked for, or `tot_bfregs` 0 when dynamic UARs were not
    /// asked for (no UAR to ring doorbells through), is an error.
    pub fn parse_response(
        &self,
        resp: &[u8],
        page_size: usize,
    ) -> rverbs_uverbs::Result<Mlx5ContextInfo> {
        const FULL: usize = core::mem::size_of::<mlx5_ib_alloc_ucontext_resp>();
        if resp.len() < RESP_MIN_LEN {
            return Err(Error::protocol(
                OP,
                format!(
                    "driver response of {} bytes is shorter than the {RESP_MIN_LEN} every mlx5 kernel fills",
                    resp.len()
                ),
            )
            .into());
        }
        let mut buf = [0u8; FULL];
        let mut filled = resp.len().min(FULL);
        buf[..filled].copy_from_slice(&resp[..filled]);
        let r = mlx5_ib_alloc_ucontext_resp::read_from_bytes(&buf[..])
            .map_err(|_| Error::protocol(OP, "response does not fit the struct"))?;
        let rl_end = core::mem::offset_of!(mlx5_ib_alloc_ucontext_resp, response_length) + 4;
        if filled >= rl_end && r.response_length != 0 {
            if (r.response_length as usize) < rl_end {
                return Err(Error::protocol(
                    OP,
                    format!(
                        "response_length {} does not even cover itself ({rl_end} bytes)",
                        r.response_length
                    ),
                )
                .into());
            }
            filled = filled.min(r.response_length as usize);
        }
        let has = |end: usize| filled >= end;
        macro_rules! end_of {
            ($f:ident) => {
                core::mem::offset_of!(mlx5_ib_alloc_ucontext_resp, $f)
                    + core::mem::size_of_val(&r.$f)
            };
        }

        let comp_mask = if has(end_of!(comp_mask)) {
            r.comp_mask
        } else {
            0
        };
        let cqe_version = if has(end_of!(cqe_version)) {
            r.cqe_version
        } else {
            MLX5_CQE_VERSION_V0
        };
        if cqe_version > self.max_cqe_version {
            return Err(Error::protocol(
                OP,
                format!(
                    "kernel chose CQE version {cqe_version}, above the {} asked for",
                    self.max_cqe_version
                ),
            )
            .into());
        }
        if r.tot_bfregs == 0 && self.lib_caps & MLX5_LIB_CAP_DYN_UAR == 0 {
            return Err(Error::protocol(
                OP,
                "tot_bfregs is 0: the kernel allocated no static UAR pages, and dynamic UARs were not asked for",
            )
            .into());
        }
        let (log_uar_size, num_uars_per_page) = if has(end_of!(num_uars_per_page))
            && (r.log_uar_size != 0 || r.num_uars_per_page != 0)
        {
            (r.log_uar_size, r.num_uars_per_page)
        } else {
            (page_size.trailing_zeros(), 1)
        };
        if log_uar_size >= 32 || num_uars_per_page == 0 {
            return Err(Error::protocol(
                OP,
                format!(
                    "impossible UAR geometry: log_uar_size {log_uar_size}, {num_uars_per_page} UARs per page"
                ),
            )
            .into());
        }
        let clock = has(end_of!(hca_core_clock_offset))
            && comp_mask & MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET != 0;
        let dump = has(end_of!(dump_fill_mkey))
            && comp_mask & MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_DUMP_FILL_MKEY != 0;
        let byte = |end: usize, v: u8| if has(end) { v } else { 0 };
        Ok(Mlx5ContextInfo {
            qp_tab_size: r.qp_tab_size,
            bf_reg_size: r.bf_reg_size,
            tot_bfregs: r.tot_bfregs,
            cache_line_size: r.cache_line_size,
            max_sq_desc_sz: r.max_sq_desc_sz,
            max_rq_desc_sz: r.max_rq_desc_sz,
            max_send_wqebb: r.max_send_wqebb,
            max_recv_wr: r.max_recv_wr,
            max_srq_recv_wr: r.max_srq_recv_wr,
            num_ports: r.num_ports,
            comp_mask,
            cqe_version,
            cmds_supp_uhw: byte(end_of!(cmds_supp_uhw), r.cmds_supp_uhw),
            eth_min_inline: byte(end_of!(eth_min_inline), r.eth_min_inline),
            clock_info_versions: byte(end_of!(clock_info_versions), r.clock_info_versions),
            hca_core_clock_offset: clock.then_some(r.hca_core_clock_offset),
            uar_size: 1u32 << log_uar_size,
            num_uars_per_page,
            num_dyn_bfregs: if has(end_of!(num_dyn_bfregs)) {
                r.num_dyn_bfregs
            } else {
                0
            },
            dump_fill_mkey: dump.then_some(r.dump_fill_mkey),
            filled_len: filled,
            page_size,
        })
    }
}

/// What the kernel said in its alloc_ucontext driver response (absent fields defaulted as
/// documented on [`Mlx5ContextUdata::parse_response`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mlx5ContextInfo {
    /// Size of the device QP table.
    pub qp_tab_size: u32,
    /// Blue-flame register size (0: the device has no write-combining support).
    pub bf_reg_size: u32,
    /// Static blue-flame registers the context got.
    pub tot_bfregs: u32,
    /// The kernel's cache line size.
    pub cache_line_size: u32,
    /// Largest send WQE, bytes (the QP sizing limit).
    pub max_sq_desc_sz: u16,
    /// Largest receive WQE, bytes.
    pub max_rq_desc_sz: u16,
    /// Most 64-byte send blocks per SQ.
    pub max_send_wqebb: u32,
    /// Most receive WQEs per RQ.
    pub max_recv_wr: u32,
    /// Most WQEs per SRQ.
    pub max_srq_recv_wr: u32,
    /// Ports of the device (1-based port numbers up to this).
    pub num_ports: u16,
    /// `MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_*`.
    pub comp_mask: u32,
    /// CQE version in force for this context (0 or 1).
    pub cqe_version: u8,
    /// `MLX5_USER_CMDS_SUPP_UHW_*` (bit 1: create AH answers the destination MAC).
    pub cmds_supp_uhw: u8,
    /// Minimum inline header for Ethernet raw-packet QPs (0 if not given).
    pub eth_min_inline: u8,
    /// Clock-info page versions the kernel can map (0 if not given).
    pub clock_info_versions: u8,
    /// mmap offset of the core clock, when the kernel gave one.
    pub hca_core_clock_offset: Option<u64>,
    /// Bytes per UAR (4 KiB when the device has 4K UARs, else the system page).
    pub uar_size: u32,
    /// UARs per system page.
    pub num_uars_per_page: u32,
    /// Blue-flame registers available for dynamic allocation (0 if not given).
    pub num_dyn_bfregs: u32,
    /// The dump-and-fill memory key, when the kernel gave one.
    pub dump_fill_mkey: Option<u32>,
    /// How many response bytes were taken as filled.
    pub filled_len: usize,
    /// System page size the offsets are computed for.
    pub page_size: usize,
}

impl Mlx5ContextInfo {
    /// mmap offset on the uverbs fd of static UAR page `index` (regular page command):
    /// `((MLX5_IB_MMAP_REGULAR_PAGE << 8) | index) * page_size`. Map one system page there,
    /// `MAP_SHARED`, writable. Index 0 is the page CQ doorbells of this context go through
    /// (when CREATE_CQ carries no UAR page index).
    pub fn uar_mmap_offset(&self, index: u8) -> u64 {
        (((MLX5_IB_MMAP_REGULAR_PAGE << MLX5_IB_MMAP_CMD_SHIFT) | index as u32) as u64)
            * self.page_size as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    fn full_resp() -> mlx5_ib_alloc_ucontext_resp {
        mlx5_ib_alloc_ucontext_resp {
            qp_tab_size: 1 << 18,
            bf_reg_size: 512,
            tot_bfregs: 16,
            cache_line_size: 64,
            max_sq_desc_sz: 512,
            max_rq_desc_sz: 512,
            max_send_wqebb: 1 << 15,
            max_recv_wr: 1 << 15,
            max_srq_recv_wr: 1 << 15,
            num_ports: 1,
            flow_action_flags: 0,
            comp_mask: MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_CORE_CLOCK_OFFSET,
            response_length: 72,
            cqe_version: 0,
            cmds_supp_uhw: 3,
            eth_min_inline: 1,
            clock_info_versions: 1,
            hca_core_clock_offset: 0x1010,
            log_uar_size: 12,
            num_uars_per_page: 1,
            num_dyn_bfregs: 32,
            dump_fill_mkey: 0,
        }
    }

    #[test]
    fn mlx5_default_request_matches_libmlx5_counts() {
        let u = Mlx5ContextUdata::new(4096);
        let r = u.request().unwrap();
        assert_eq!(r.total_num_bfregs, 16);
        assert_eq!(r.num_low_latency_bfregs, 4);
        assert_eq!(r.lib_caps, MLX5_LIB_CAP_4K_UAR | MLX5_LIB_CAP_DYN_UAR);
        assert_eq!(r.max_cqe_version, 1);
        // 64 KiB pages: 16 UARs * 2 bfregs fill a page; all but 12 are low latency.
        let u = Mlx5ContextUdata::new(65536);
        assert_eq!((u.total_num_bfregs, u.num_low_latency_bfregs), (32, 20));
    }

    #[test]
    fn mlx5_request_validation() {
        let mut u = Mlx5ContextUdata::new(4096);
        u.num_low_latency_bfregs = 16;
        assert!(u.request().unwrap_err().to_string().contains("below"));
        u.total_num_bfregs = 0;
        assert!(u.request().is_err());
        let mut u = Mlx5ContextUdata::new(4096);
        u.max_cqe_version = 2;
        assert!(u.request().is_err());
    }

    #[test]
    fn mlx5_full_response() {
        let u = Mlx5ContextUdata::new(4096);
        let i = u.parse_response(full_resp().as_bytes(), 4096).unwrap();
        assert_eq!(i.tot_bfregs, 16);
        assert_eq!(i.cache_line_size, 64);
        assert_eq!(i.hca_core_clock_offset, Some(0x1010));
        assert_eq!(i.dump_fill_mkey, None);
        assert_eq!(i.uar_size, 4096);
        assert_eq!(i.filled_len, 72);
        assert_eq!(i.uar_mmap_offset(0), 0);
        assert_eq!(i.uar_mmap_offset(3), 3 * 4096);
    }

    #[test]
    fn mlx5_shortened_response() {
        let u = Mlx5ContextUdata::new(4096);
        let mut r = full_resp();
        r.cqe_version = 0;
        r.log_uar_size = 0;
        r.num_uars_per_page = 0;
        let b = r.as_bytes();
        // Too short: names the length.
        let e = u.parse_response(&b[..35], 4096).unwrap_err();
        assert!(e.to_string().contains("35 bytes"), "{e}");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        // Old kernel: 36 bytes, defaults for the rest.
        let i = u.parse_response(&b[..36], 16384).unwrap();
        assert_eq!(i.cqe_version, 0);
        assert_eq!(i.hca_core_clock_offset, None);
        assert_eq!(i.uar_size, 16384);
        assert_eq!(i.num_uars_per_page, 1);
        assert_eq!(i.comp_mask, 0);
        // response_length limits what is read even in a larger buffer.
        let mut r2 = full_resp();
        r2.response_length = 48;
        let i = u.parse_response(r2.as_bytes(), 4096).unwrap();
        assert_eq!(i.filled_len, 48);
        assert_eq!(i.hca_core_clock_offset, None);
        r2.response_length = 7;
        assert!(u.parse_response(r2.as_bytes(), 4096).is_err());
    }

    #[test]
    fn mlx5_response_semantics_errors() {
        let mut u = Mlx5ContextUdata::new(4096);
        u.max_cqe_version = 0;
        let mut r = full_resp();
        r.cqe_version = 1;
        let e = u.parse_response(r.as_bytes(), 4096).unwrap_err();
        assert!(e.to_string().contains("CQE version 1"), "{e}");
        // tot_bfregs 0: dynamic UARs when asked for, else an error.
        let mut r = full_resp();
        r.tot_bfregs = 0;
        assert_eq!(u.parse_response(r.as_bytes(), 4096).unwrap().tot_bfregs, 0);
        u.lib_caps = MLX5_LIB_CAP_4K_UAR;
        let e = u.parse_response(r.as_bytes(), 4096).unwrap_err();
        assert!(e.to_string().contains("dynamic UARs were not asked"), "{e}");
        let mut r = full_resp();
        r.log_uar_size = 40;
        assert!(u.parse_response(r.as_bytes(), 4096).is_err());
    }
}
