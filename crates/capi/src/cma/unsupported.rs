//! Functions rverbs does not support (`EOPNOTSUPP`).

use super::*;

/// Declares `extern "C"` functions that fail with -1 and `EOPNOTSUPP`, each with its symbol
/// version (`"VERSION" fn name(…);`).
macro_rules! cm_unsupported {
    ($($(#[$m:meta])* $ver:literal fn $name:ident($($a:ident: $t:ty),*);)*) => {$(
        symver!($name => $ver);
        $(#[$m])*
        ///
        /// Not supported: -1 and `errno` `EOPNOTSUPP`.
        ///
        /// # Safety
        /// Never touches its arguments.
        #[no_mangle]
        pub unsafe extern "C" fn $name($(_: $t),*) -> c_int {
            set_errno(libc::EOPNOTSUPP);
            -1
        }
    )*};
}

cm_unsupported! {
    /// `rdma_set_local_ece`.
    "RDMACM_1.3" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    /// `rdma_get_remote_ece`.
    "RDMACM_1.3" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    /// `rdma_reject_ece` (a reject with reason 35, "vendor option not supported", for a
    /// peer's ECE; with no ECE there is none to refuse).
    "RDMACM_1.3" fn rdma_reject_ece(id: *mut rdma_cm_id, private_data: *const c_void, private_data_len: u8);
}
