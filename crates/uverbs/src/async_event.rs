//! Asynchronous events: QP, CQ, SRQ, port and device events from the context's async fd.

use std::time::Duration;

use rustix::io::Errno;
use zerocopy::FromBytes;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::kernel::abi::obj::ib_uverbs_async_event_desc;
use crate::newtype::raw_newtype;

raw_newtype! {
    /// `ib_event_type`.
    AsyncEventType(u32) {
        CQ_ERR = 0, "CQ_ERR";
        QP_FATAL = 1, "QP_FATAL";
        QP_REQ_ERR = 2, "QP_REQ_ERR";
        QP_ACCESS_ERR = 3, "QP_ACCESS_ERR";
        COMM_EST = 4, "COMM_EST";
        SQ_DRAINED = 5, "SQ_DRAINED";
        PATH_MIG = 6, "PATH_MIG";
        PATH_MIG_ERR = 7, "PATH_MIG_ERR";
        DEVICE_FATAL = 8, "DEVICE_FATAL";
        PORT_ACTIVE = 9, "PORT_ACTIVE";
        PORT_ERR = 10, "PORT_ERR";
        LID_CHANGE = 11, "LID_CHANGE";
        PKEY_CHANGE = 12, "PKEY_CHANGE";
        SM_CHANGE = 13, "SM_CHANGE";
        SRQ_ERR = 14, "SRQ_ERR";
        SRQ_LIMIT_REACHED = 15, "SRQ_LIMIT_REACHED";
        QP_LAST_WQE_REACHED = 16, "QP_LAST_WQE_REACHED";
        CLIENT_REREGISTER = 17, "CLIENT_REREGISTER";
        GID_CHANGE = 18, "GID_CHANGE";
        WQ_FATAL = 19, "WQ_FATAL";
    }
}

/// What an async event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
// The kernel adds event kinds about other objects (WQ events carry a WQ handle): a known kind
// can get its own variant later without breaking matches.
#[non_exhaustive]
pub enum AsyncElement {
    /// A QP, by its [`crate::qp::Qp::user_handle`].
    Qp(u64),
    /// A CQ, by its [`crate::cq::Cq::user_handle`].
    Cq(u64),
    /// An SRQ, by its [`crate::srq::Srq::user_handle`].
    Srq(u64),
    /// A port number.
    Port(u8),
    /// The device.
    Device,
    /// An event type this crate does not know: the raw element.
    Unknown(u64),
}

/// One async event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: AsyncEventType,
    /// The object (CQ, QP, SRQ, WQ, port) it happened to.
    pub element: AsyncElement,
}

impl AsyncEvent {
    internal! {
    /// Decodes the kernel's 16-byte `ib_uverbs_async_event_desc`.
    pub fn decode(bytes: &[u8]) -> Option<AsyncEvent> {
        let d = ib_uverbs_async_event_desc::read_from_bytes(bytes).ok()?;
        let t = AsyncEventType(d.event_type);
        use AsyncEventType as T;
        let element = match t {
            T::CQ_ERR => AsyncElement::Cq(d.element),
            T::QP_FATAL
            | T::QP_REQ_ERR
            | T::QP_ACCESS_ERR
            | T::COMM_EST
            | T::SQ_DRAINED
            | T::PATH_MIG
            | T::PATH_MIG_ERR
            | T::QP_LAST_WQE_REACHED => AsyncElement::Qp(d.element),
            T::SRQ_ERR | T::SRQ_LIMIT_REACHED => AsyncElement::Srq(d.element),
            T::PORT_ACTIVE
            | T::PORT_ERR
            | T::LID_CHANGE
            | T::PKEY_CHANGE
            | T::SM_CHANGE
            | T::CLIENT_REREGISTER
            | T::GID_CHANGE => AsyncElement::Port(d.element as u8),
            T::DEVICE_FATAL => AsyncElement::Device,
            _ => AsyncElement::Unknown(d.element),
        };
        Some(AsyncEvent {
            event_type: t,
            element,
        })
    }
    }
}

impl Context {
    /// The next async event if one is queued, without waiting (one `read(2)` on the
    /// non-blocking async fd).
    pub fn try_get_async_event(&self) -> Result<Option<AsyncEvent>> {
        let op = || format!("read async event on {}", self.name());
        let mut buf = [0u8; 16];
        loop {
            return match rustix::io::read(self.async_fd(), &mut buf) {
                Ok(16) => AsyncEvent::decode(&buf)
                    .map(Some)
                    .ok_or_else(|| Error::protocol(op(), "undecodable event").into()),
                Ok(n) => Err(Error::protocol(op(), format!("short read of {n} bytes")).into()),
                Err(Errno::AGAIN) => Ok(None),
                Err(Errno::INTR) => continue,
                Err(e) => Err(Error::os(op(), e).into()),
            };
        }
    }

    /// Waits up to `timeout` (forever with `None`) for the next async event.
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        let fd = self.async_fd();
        let op = || format!("read async event on {}", self.name());
        loop {
            if !crate::kernel::fd::poll_readable(fd, timeout).map_err(|e| Error::os(op(), e))? {
                return Ok(None);
            }
            let mut buf = [0u8; 16];
            match rustix::io::read(fd, &mut buf) {
                Ok(16) => {
                    return AsyncEvent::decode(&buf)
                        .map(Some)
                        .ok_or_else(|| Error::protocol(op(), "undecodable event").into())
                }
                Ok(n) => {
                    return Err(Error::protocol(op(), format!("short read of {n} bytes")).into())
                }
                Err(Errno::AGAIN) | Err(Errno::INTR) => continue,
                Err(e) => return Err(Error::os(op(), e).into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    #[test]
    fn decodes_events() {
        let d = ib_uverbs_async_event_desc {
            element: 42,
            event_type: 1,
            reserved: 0,
        };
        let e = AsyncEvent::decode(d.as_bytes()).unwrap();
        assert_eq!(e.event_type, AsyncEventType::QP_FATAL);
        assert_eq!(e.element, AsyncElement::Qp(42));
        let d = ib_uverbs_async_event_desc {
            element: 1,
            event_type: 9,
            reserved: 0,
        };
        assert_eq!(
            AsyncEvent::decode(d.as_bytes()).unwrap().element,
            AsyncElement::Port(1)
        );
        let d = ib_uverbs_async_event_desc {
            element: 5,
            event_type: 77,
            reserved: 0,
        };
        let e = AsyncEvent::decode(d.as_bytes()).unwrap();
        assert_eq!(e.event_type.name(), None);
        assert_eq!(e.element, AsyncElement::Unknown(5));
        assert!(AsyncEvent::decode(&[0u8; 8]).is_none());
    }
}
