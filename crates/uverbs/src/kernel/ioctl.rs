//! A small typed builder for `RDMA_VERBS_IOCTL` calls.
//!
//! One call names an object and a method and carries up to [`MAX_ATTRS`] attributes. The
//! encodings follow `rdma_user_ioctl_cmds.h`:
//!
//! | kind      | `len`          | `data`                                             |
//! |-----------|----------------|----------------------------------------------------|
//! | PTR_IN    | size           | the value itself when size ≤ 8, else a pointer     |
//! | PTR_OUT   | size           | pointer; the kernel copies at most `len` bytes     |
//! | CONST_IN  | 8              | the value                                          |
//! | IDR       | 0              | the handle (a create writes the new handle back)   |
//! | FD        | 0              | the fd (an FD-out is written back)                 |
//! | ENUM_IN   | like PTR_IN    | like PTR_IN, plus `elem_id` in `attr_data`         |
//!
//! Every buffer handed to the builder is borrowed for `'a`, so it outlives the call; nothing is
//! allocated, the header and attributes live on the stack.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, RawFd};

use rustix::io::Errno;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};
use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::kernel::abi::ioctl::{
    ib_uverbs_attr, ib_uverbs_ioctl_hdr, RDMA_VERBS_IOCTL, UVERBS_ATTR_F_MANDATORY,
    UVERBS_ATTR_F_VALID_OUTPUT,
};

/// Attributes one call can carry. The largest core method (QP create) uses 15.
pub const MAX_ATTRS: usize = 20;

#[repr(C)]
struct Buf {
    hdr: ib_uverbs_ioctl_hdr,
    attrs: [ib_uverbs_attr; MAX_ATTRS],
}

impl std::fmt::Debug for IoctlCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoctlCall")
            .field("hdr", &self.buf.hdr)
            .field("attrs", &&self.buf.attrs[..self.n])
            .finish()
    }
}

/// Index of an attribute inside a call, to read what the kernel wrote back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrIdx(usize);

/// One `RDMA_VERBS_IOCTL` call under construction. `'a` is the lifetime of every buffer the
/// attributes point to.
pub struct IoctlCall<'a> {
    buf: Buf,
    n: usize,
    _borrows: PhantomData<&'a mut [u8]>,
}

impl<'a> IoctlCall<'a> {
    /// A call of `method` on `object` (ids from [`crate::kernel::abi::ioctl`]).
    pub fn new(object: u16, method: u16) -> Self {
        Self {
            buf: Buf {
                hdr: ib_uverbs_ioctl_hdr {
                    object_id: object,
                    method_id: method,
                    ..Default::default()
                },
                attrs: [ib_uverbs_attr::default(); MAX_ATTRS],
            },
            n: 0,
            _borrows: PhantomData,
        }
    }

    fn push(&mut self, attr_id: u16, len: u16, data: u64) -> AttrIdx {
        assert!(
            self.n < MAX_ATTRS,
            "rverbs bug: more than {MAX_ATTRS} ioctl attributes"
        );
        self.buf.attrs[self.n] = ib_uverbs_attr {
            attr_id,
            len,
            flags: UVERBS_ATTR_F_MANDATORY,
            attr_data: 0,
            data,
        };
        self.n += 1;
        AttrIdx(self.n - 1)
    }

    /// Clears the mandatory flag of the attribute just added: a kernel that does not know it
    /// ignores it instead of failing with `EPROTONOSUPPORT`.
    pub fn optional(&mut self) -> &mut Self {
        if let Some(a) = self.buf.attrs[..self.n].last_mut() {
            a.flags &= !UVERBS_ATTR_F_MANDATORY;
        }
        self
    }

    /// PTR_IN of a plain value: inline when it fits in 8 bytes.
    pub fn ptr_in<T: IntoBytes + Immutable + ?Sized>(&mut self, id: u16, v: &'a T) -> AttrIdx {
        self.ptr_in_bytes(id, v.as_bytes())
    }

    /// PTR_IN of bytes: inline when at most 8 bytes.
    pub fn ptr_in_bytes(&mut self, id: u16, bytes: &'a [u8]) -> AttrIdx {
        let len = u16::try_from(bytes.len()).expect("rverbs bug: ioctl attribute over 64 KiB");
        let data = if bytes.len() <= 8 {
            let mut inline = [0u8; 8];
            inline[..bytes.len()].copy_from_slice(bytes);
            u64::from_ne_bytes(inline)
        } else {
            bytes.as_ptr() as u64
        };
        self.push(id, len, data)
    }

    /// PTR_OUT into a value the kernel fills (at most its size).
    pub fn ptr_out<T: IntoBytes + FromBytes + ?Sized>(&mut self, id: u16, v: &'a mut T) -> AttrIdx {
        self.ptr_out_bytes(id, v.as_mut_bytes())
    }

    /// PTR_OUT into bytes.
    pub fn ptr_out_bytes(&mut self, id: u16, bytes: &'a mut [u8]) -> AttrIdx {
        let len = u16::try_from(bytes.len()).expect("rverbs bug: ioctl attribute over 64 KiB");
        self.push(id, len, bytes.as_mut_ptr() as u64)
    }

    /// CONST_IN (also used for u8/u16/u32/u64 constants and object types).
    pub fn const_in(&mut self, id: u16, v: u64) -> AttrIdx {
        self.push(id, 8, v)
    }

    /// ENUM_IN: `elem_id` selects the variant, `v` its payload (may be empty).
    pub fn enum_in(&mut self, id: u16, elem_id: u8, v: &'a [u8]) -> AttrIdx {
        let i = self.ptr_in_bytes(id, v);
        self.buf.attrs[i.0].attr_data = u16::from(elem_id);
        i
    }

    /// IDR of an existing object.
    pub fn idr(&mut self, id: u16, handle: u32) -> AttrIdx {
        self.push(id, 0, u64::from(handle))
    }

    /// IDR of an object the method creates; read the handle with [`Self::handle`] afterwards.
    pub fn idr_new(&mut self, id: u16) -> AttrIdx {
        self.push(id, 0, 0)
    }

    /// FD of an existing file (completion channel, async event fd).
    pub fn fd(&mut self, id: u16, fd: BorrowedFd<'a>) -> AttrIdx {
        use std::os::fd::AsRawFd;
        self.push(id, 0, fd.as_raw_fd() as i64 as u64)
    }

    /// FD the method creates; read it with [`Self::new_fd`] afterwards (and own it). The
    /// attribute's data starts as -1 (the kernel ignores it for a new object and writes the
    /// fd there), so an fd read back from a call that wrote nothing is -1, never fd 0.
    pub fn fd_new(&mut self, id: u16) -> AttrIdx {
        self.push(id, 0, u64::MAX)
    }

    /// The handle the kernel wrote into an IDR-new attribute.
    pub fn handle(&self, i: AttrIdx) -> u32 {
        self.buf.attrs[i.0].data as u32
    }

    /// The raw fd the kernel wrote into an FD-new attribute (-1 if it wrote none).
    pub fn new_fd(&self, i: AttrIdx) -> RawFd {
        self.buf.attrs[i.0].data as i64 as RawFd
    }

    /// Whether the kernel wrote an (optional) output attribute.
    pub fn valid_output(&self, i: AttrIdx) -> bool {
        self.buf.attrs[i.0].flags & (UVERBS_ATTR_F_VALID_OUTPUT | UVERBS_ATTR_F_MANDATORY) != 0
    }

    /// Ends the call, keeping what the kernel wrote into its attributes (handles, fds,
    /// flags) but none of the borrows: the buffers the attributes pointed to are free again.
    pub(crate) fn answer(self) -> Answer {
        Answer {
            attrs: self.buf.attrs,
        }
    }

    /// Number of attributes so far.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when no attribute was added.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The header as it will be sent (for tests and tracing).
    pub fn header(&mut self, driver_id: u32) -> ib_uverbs_ioctl_hdr {
        self.finish_header(driver_id);
        self.buf.hdr
    }

    /// The attributes as they will be sent.
    pub fn attrs(&self) -> &[ib_uverbs_attr] {
        &self.buf.attrs[..self.n]
    }

    /// The attributes, writable: for a test transport that answers in the kernel's place
    /// (writes a new object's handle back into its IDR attribute, sets `VALID_OUTPUT`).
    pub fn attrs_mut(&mut self) -> &mut [ib_uverbs_attr] {
        &mut self.buf.attrs[..self.n]
    }

    fn finish_header(&mut self, driver_id: u32) {
        let len = size_of::<ib_uverbs_ioctl_hdr>() + self.n * size_of::<ib_uverbs_attr>();
        self.buf.hdr.length = len as u16;
        self.buf.hdr.num_attrs = self.n as u16;
        self.buf.hdr.driver_id = driver_id;
    }

    /// Issues the ioctl on the device's command fd. `driver_id` must be the device's
    /// (`RDMA_DRIVER_*`). Returns the raw errno on failure; callers name the operation.
    ///
    /// # Safety
    /// The kernel interprets each attribute by the method's specification, not by how it was
    /// added here: every attribute's kind must match what the method expects for its id (a
    /// value added with [`IoctlCall::const_in`] or [`IoctlCall::ptr_in`] where the method
    /// writes back, PTR_OUT, is taken as an address and written to), and every address carried
    /// inside attribute data (driver attributes, `UVERBS_ATTR_UHW` driver data: CQ/QP buffer
    /// addresses, doorbell records) must point to memory valid for what the kernel and the
    /// device do with it, for as long as they do it. The call must not destroy or modify
    /// kernel objects that safe rverbs types own.
    pub unsafe fn call(&mut self, fd: impl AsFd, driver_id: u32) -> Result<(), Errno> {
        self.call_checked(fd, driver_id)
    }

    /// [`IoctlCall::call`] for this crate, whose callers build each call from the method
    /// definitions in `abi::ioctl` (attribute kinds as the kernel specifies them) and pass
    /// driver data whose buffers the owning object keeps alive while the kernel object lives.
    pub(crate) fn call_checked(&mut self, fd: impl AsFd, driver_id: u32) -> Result<(), Errno> {
        self.finish_header(driver_id);
        let req = Raw {
            ptr: (&mut self.buf as *mut Buf).cast(),
        };
        // SAFETY: `req.ptr` points to a live, initialised `Buf` whose header says how many
        // bytes follow (`length` ≤ size_of::<Buf>()). Every pointer stored in an attribute comes
        // from a borrow of lifetime `'a`, which `self` (and so this call) cannot outlive, and
        // each PTR_OUT points to a buffer of at least `len` writable bytes. The kernel writes
        // back only into `Buf` (handles, fds, flags) and into those PTR_OUT buffers.
        unsafe { rustix::ioctl::ioctl(fd, req) }
    }
}

/// The attributes of a finished [`IoctlCall`], as the kernel left them: read a created
/// object's handle after the buffers the call borrowed are in use again.
#[derive(Debug)]
pub(crate) struct Answer {
    attrs: [ib_uverbs_attr; MAX_ATTRS],
}

impl Answer {
    /// The handle the kernel wrote into an IDR-new attribute.
    pub(crate) fn handle(&self, i: AttrIdx) -> u32 {
        self.attrs[i.0].data as u32
    }
}

struct Raw {
    ptr: *mut c_void,
}

// SAFETY: RDMA_VERBS_IOCTL reads the header and attributes at `ptr` and writes back into them
// (IS_MUTATING = true); the opcode is the kernel's `_IOWR(0x1b, 1, ib_uverbs_ioctl_hdr)`; the
// return value carries no data beyond success.
unsafe impl Ioctl for Raw {
    type Output = ();
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        RDMA_VERBS_IOCTL as Opcode
    }

    fn as_ptr(&mut self) -> *mut c_void {
        self.ptr
    }

    unsafe fn output_from_ptr(_out: IoctlOutput, _p: *mut c_void) -> rustix::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::abi::ioctl::object;
    use crate::kernel::abi::obj::cq;

    /// An FD-new attribute the kernel did not write reads as -1, not as fd 0.
    #[test]
    fn unwritten_new_fd_reads_minus_one() {
        let mut c = IoctlCall::new(object::CQ, cq::METHOD_CREATE);
        let i = c.fd_new(1);
        assert_eq!(c.attrs()[0].data, u64::MAX);
        assert_eq!(c.new_fd(i), -1);
    }

    #[test]
    fn encodes_inline_pointer_and_idr() {
        let small: u32 = 0xdead_beef;
        let big = [7u8; 20];
        let mut out = [0u8; 12];
        let out_ptr = out.as_ptr() as u64;
        let mut c = IoctlCall::new(object::CQ, cq::METHOD_CREATE);
        let h = c.idr_new(cq::ATTR_CREATE_HANDLE);
        c.ptr_in(cq::ATTR_CREATE_CQE, &small);
        c.ptr_in_bytes(0x1000, &big);
        c.const_in(cq::ATTR_CREATE_FLAGS, 5);
        c.ptr_out_bytes(0x1001, &mut out);
        c.optional();
        let hdr = c.header(14);
        assert_eq!(hdr.length, 24 + 5 * 16);
        assert_eq!(hdr.num_attrs, 5);
        assert_eq!(hdr.object_id, object::CQ);
        assert_eq!(hdr.driver_id, 14);
        let a = c.attrs();
        assert_eq!((a[0].attr_id, a[0].len, a[0].data), (0, 0, 0));
        assert_eq!((a[1].len, a[1].data), (4, 0xdead_beef));
        assert_eq!((a[2].len, a[2].data), (20, big.as_ptr() as u64));
        assert_eq!((a[3].len, a[3].data), (8, 5));
        assert_eq!((a[4].len, a[4].data, a[4].flags), (12, out_ptr, 0));
        assert_eq!(a[0].flags, UVERBS_ATTR_F_MANDATORY);
        assert_eq!(c.handle(h), 0);
    }

    #[test]
    fn enum_sets_elem_id() {
        let mut c = IoctlCall::new(0, 0);
        let i = c.enum_in(3, 2, &[]);
        assert_eq!(c.attrs()[i.0].attr_data, 2);
        assert_eq!(c.attrs()[i.0].len, 0);
    }
}
