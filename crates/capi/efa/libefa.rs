//! rverbs' `libefa.so.1`, built by `cargo xtask capi` with `rustc` directly (it is no crate of
//! the workspace), as `librdmacm.so.1` is: soname `libefa.so.1`, the version nodes `EFA_1.0`
//! … `EFA_1.3`, and a `DT_NEEDED` on rverbs' `libibverbs.so.1`, which defines the
//! `efadv_*@EFA_*` functions (`crates/capi/src/ibverbs/efadv.rs`). A program linked against
//! rdma-core's libefa records `efadv_query_device@EFA_1.1` as needed from `libefa.so.1`: the
//! loader checks that this file defines the version, then binds the symbol by name and
//! version in our libibverbs, where the EFA contexts are.

/// Names this library in `readelf`/`nm` listings; never needed by callers.
#[no_mangle]
pub extern "C" fn rverbs_libefa_shim() {}
