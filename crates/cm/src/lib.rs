//! # rverbs-cm
//!
//! rdma_cm over `/dev/infiniband/rdma_cm` (the ucma ABI), librdmacm's verbs helpers and the
//! blocking `get_send_comp` / `get_recv_comp`.

#![deny(unsafe_code)]
