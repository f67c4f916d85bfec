//! Symbol versions of the exported functions (only with the `symver` feature, for the
//! cdylib): one `.symver NAME, NAME@@VERSION` directive each, which makes `VERSION` the
//! default version of `NAME` in `libibverbs.so.1`. The versions are those of rdma-core 44's
//! `libibverbs.map.in` (the newest version each name has there). The nodes themselves are
//! declared by the version script `build.rs` writes.

/// Declares the versions; invoked in `verbs.rs`, the module that defines the functions (a
/// `.symver` must be in the same object as its symbol).
macro_rules! symvers {
    ($($name:ident => $ver:literal,)*) => {
        #[cfg(feature = "symver")]
        std::arch::global_asm!($(concat!(".symver ", stringify!($name), ", ", stringify!($name), "@@", $ver)),*);

        /// Every exported function with its version (for tests and `cargo xtask capi`).
        #[allow(dead_code)]
        pub const SYMBOLS: &[(&str, &str)] = &[$((stringify!($name), $ver)),*];
    };
}

#[rustfmt::skip]
macro_rules! all_symvers { () => { symvers! {
    ibv_get_device_list => "IBVERBS_1.1",
    ibv_free_device_list => "IBVERBS_1.1",
    ibv_get_device_name => "IBVERBS_1.1",
    ibv_get_device_guid => "IBVERBS_1.1",
    ibv_get_device_index => "IBVERBS_1.9",
    ibv_open_device => "IBVERBS_1.1",
    ibv_close_device => "IBVERBS_1.1",
    ibv_query_device => "IBVERBS_1.1",
    ibv_query_port => "IBVERBS_1.1",
    ibv_query_gid => "IBVERBS_1.1",
    ibv_query_pkey => "IBVERBS_1.1",
    ibv_alloc_pd => "IBVERBS_1.1",
    ibv_dealloc_pd => "IBVERBS_1.1",
    ibv_reg_mr => "IBVERBS_1.1",
    ibv_reg_mr_iova => "IBVERBS_1.7",
    ibv_reg_mr_iova2 => "IBVERBS_1.8",
    ibv_dereg_mr => "IBVERBS_1.1",
    ibv_create_comp_channel => "IBVERBS_1.0",
    ibv_destroy_comp_channel => "IBVERBS_1.0",
    ibv_create_cq => "IBVERBS_1.1",
    ibv_resize_cq => "IBVERBS_1.1",
    ibv_destroy_cq => "IBVERBS_1.1",
    ibv_get_cq_event => "IBVERBS_1.1",
    ibv_ack_cq_events => "IBVERBS_1.1",
    ibv_create_srq => "IBVERBS_1.1",
    ibv_modify_srq => "IBVERBS_1.1",
    ibv_query_srq => "IBVERBS_1.1",
    ibv_destroy_srq => "IBVERBS_1.1",
    ibv_create_qp => "IBVERBS_1.1",
    ibv_query_qp => "IBVERBS_1.1",
    ibv_modify_qp => "IBVERBS_1.1",
    ibv_destroy_qp => "IBVERBS_1.1",
    ibv_qp_to_qp_ex => "IBVERBS_1.6",
    ibv_create_ah => "IBVERBS_1.1",
    ibv_destroy_ah => "IBVERBS_1.1",
    ibv_fork_init => "IBVERBS_1.1",
    ibv_is_fork_initialized => "IBVERBS_1.13",
    ibv_wc_status_str => "IBVERBS_1.1",
    ibv_node_type_str => "IBVERBS_1.1",
    ibv_port_state_str => "IBVERBS_1.1",
    ibv_event_type_str => "IBVERBS_1.1",
    ibv_read_sysfs_file => "IBVERBS_1.0",
    ibv_query_gid_type => "IBVERBS_PRIVATE_34",
    _ibv_query_gid_ex => "IBVERBS_1.11",
    _ibv_query_gid_table => "IBVERBS_1.11",
    ibv_get_async_event => "IBVERBS_1.1",
    ibv_ack_async_event => "IBVERBS_1.1",
    ibv_get_pkey_index => "IBVERBS_1.5",
    ibv_get_sysfs_path => "IBVERBS_1.0",
    ibv_copy_ah_attr_from_kern => "IBVERBS_1.1",
    ibv_copy_qp_attr_from_kern => "IBVERBS_1.0",
    ibv_copy_path_rec_from_kern => "IBVERBS_1.0",
    ibv_create_ah_from_wc => "IBVERBS_1.1",
    ibv_rereg_mr => "IBVERBS_1.1",
    ibv_reg_dmabuf_mr => "IBVERBS_1.12",
    ibv_import_device => "IBVERBS_1.10",
    ibv_import_pd => "IBVERBS_1.10",
    ibv_unimport_pd => "IBVERBS_1.10",
    ibv_import_mr => "IBVERBS_1.10",
    ibv_unimport_mr => "IBVERBS_1.10",
    ibv_import_dm => "IBVERBS_1.13",
    ibv_unimport_dm => "IBVERBS_1.13",
    ibv_query_ece => "IBVERBS_1.10",
    ibv_set_ece => "IBVERBS_1.10",
    ibv_attach_mcast => "IBVERBS_1.1",
    ibv_detach_mcast => "IBVERBS_1.1",
    ibv_query_qp_data_in_order => "IBVERBS_1.14",
}
} }
