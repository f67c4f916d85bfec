//! The value types of the verbs: what a request, a completion or an object's attributes are
//! made of (operation kinds, access flags, QP types, states and capacities, address vectors,
//! MTUs, driver ids, the raw parts of registered memory). The floor above the kernel layer and below the objects: a leaf that
//! imports no object module (the module graph test, `tests/module_graph.rs`, holds it to
//! that), so that the errors, the work requests, the operation table and the provider seam
//! can use these types without importing the objects that use them in turn.
//!
//! Private: each type is public at the path of the object it belongs to
//! (`rverbs_uverbs::qp::QpType`, `rverbs_uverbs::mr::AccessFlags`, ...), re-exported there.

mod access;
mod ah;
mod device;
mod memory;
mod mw;
mod op;
mod port;
mod qp;

pub use access::AccessFlags;
pub use ah::{AhAttr, GlobalRoute};
pub use device::{DriverId, OdpGeneralCaps, OdpTransportCaps};
pub use memory::RawMemory;
pub use mw::{MwBind, MwType};
pub(crate) use op::send_op_table;
pub use op::{DeviceCapsEx, FlushLevel, FlushType, OpKind};
internal! {
    pub use op::{OpTable, Transports};
}
pub use port::{LinkLayer, Mtu, PhysState, PortState};
pub use qp::{QpCaps, QpState, QpType};
