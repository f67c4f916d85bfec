//! rverbs' `librdmacm.so.1`, built by `cargo xtask capi` with `rustc` directly (it is no
//! crate of the workspace): soname `librdmacm.so.1`, the version nodes `RDMACM_1.0` …
//! `RDMACM_1.3`, and a `DT_NEEDED` on rverbs' `libibverbs.so.1`, which defines every
//! `rdma_*@RDMACM_*` function (`crates/capi/src/cma/`). A program linked against rdma-core's
//! librdmacm records `rdma_create_id@RDMACM_1.0` as needed from `librdmacm.so.1`: the loader
//! checks that this file defines the version, then binds the symbol by name and version
//! wherever it is defined in the program's scope — in our libibverbs, so there is one copy
//! of the verbs and rdma_cm state whichever library a caller reaches it through.

/// Names this library in `readelf`/`nm` listings; never needed by callers.
#[no_mangle]
pub extern "C" fn rverbs_librdmacm_shim() {}
