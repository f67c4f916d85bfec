//! Functions rverbs does not support (`EOPNOTSUPP`).

use super::*;

macro_rules! cm_unsupported {
    ($($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*);)*) => {$(
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
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut c_void);
    /// `rdma_get_remote_ece`.
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut c_void);
}
