//! rdma-core 44's `infiniband/efadv.h` structures (checked by the layout test).

/// `struct efadv_device_attr` (rdma-core 44, 32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(missing_docs)]
pub struct efadv_device_attr {
    pub comp_mask: u64,
    pub max_sq_wr: u32,
    pub max_rq_wr: u32,
    pub max_sq_sge: u16,
    pub max_rq_sge: u16,
    pub inline_buf_size: u16,
    pub reserved: [u8; 2],
    pub device_caps: u32,
    pub max_rdma_size: u32,
}

/// `struct efadv_qp_init_attr` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(missing_docs)]
pub struct efadv_qp_init_attr {
    pub comp_mask: u64,
    pub driver_qp_type: u32,
    pub reserved: [u8; 4],
}

/// `struct efadv_ah_attr` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(missing_docs)]
pub struct efadv_ah_attr {
    pub comp_mask: u64,
    pub ahn: u16,
    pub reserved: [u8; 6],
}
