//! EFA (AWS Elastic Fabric Adapter), driven as rdma-core 44's libefa drives it: the context's
//! driver data and device limits, CQs of sub-CQs with phase bits, UD and SRD QPs whose send
//! descriptors are copied to the device's LLQ window (write-combining memory the kernel maps)
//! and whose receive descriptors go to a host ring, each with its doorbell; AHs by the
//! kernel's AH number. docs/efa.md says what is proven (the oracle: libefa 44 on a fake
//! kernel, `tests/efa_oracle.rs`) and what is not.

pub(crate) mod abi;
pub(crate) mod driver;
pub(crate) mod queues;
