//! # rverbs-capi
//!
//! rverbs behind rdma-core's C ABI: built as `libibverbs.so.1` (rdma-core's soname and symbol
//! versions) so that unmodified programs linked against libibverbs run on rverbs, and as the
//! static archive `librverbs.a` for fully static C programs. `cargo xtask capi` builds both
//! and checks the exported symbol versions against what rdma-core's tools import;
//! `docs/capi.md` lists what works.
//!
//! The structures C callers touch directly ([`abi`]) are byte-exact copies of rdma-core's;
//! each one is the first field of a Rust object that owns the rverbs object behind it, so a
//! pointer handed to C leads back to its owner. The data path (`ibv_post_send`,
//! `ibv_poll_cq`, `ibv_req_notify_cq`, … — inline functions in `verbs.h`) reaches us through
//! the context's ops table.
//!
//! Error conventions are rdma-core's: constructors return NULL and set `errno`; destroy,
//! modify, query and post calls return a positive errno; `ibv_poll_cq` returns the number of
//! completions (negative on error); `ibv_get_cq_event` and `ibv_query_gid` return -1 and set
//! `errno`.
//!
//! Panics: every exported function is `extern "C"`, and unwinding out of such a function
//! aborts the process (Rust 1.81 and later): a bug in this library ends the program like a
//! failed assertion in C would, it never unwinds into C frames.
//!
//! # Safety vocabulary
//!
//! The exported functions are `unsafe extern "C"`: C cannot prove anything to the compiler, so
//! each function's `# Safety` section states what its caller promises, in the named contracts
//! below, and every `// SAFETY:` comment of this crate names the contract (in brackets) it
//! relies on. They are libibverbs' and librdmacm's own rules, written down once.
//!
//! - **\[object\]** — *valid object pointer*: NULL, or a pointer this library returned from
//!   the object's constructor (an element of `ibv_get_device_list`, `ibv_open_device`,
//!   `ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_comp_channel`, `ibv_create_cq(_ex)`,
//!   `ibv_create_srq`, `ibv_create_qp(_ex)`, `ibv_create_ah`, `ibv_alloc_mw`,
//!   `rdma_create_event_channel`, `rdma_create_id`, an event's id, …) that has not been
//!   destroyed and is not destroyed while the call runs. NULL is checked: the call fails
//!   with `EINVAL` in its convention. Other threads may use the same object at the same time
//!   (C programs do: an event thread and a data-path thread on one QP, rping's CM thread and
//!   its main thread on one `rdma_cm_id`), so the Rust owner of a C object is only ever
//!   reached through a shared reference (`&`); what changes after creation sits behind a
//!   `Mutex`, an atomic or a `OnceLock`.
//! - **\[destroy\]** — the object pointer given to a destroy call is an \[object\] that no other
//!   thread uses during the call and that the caller does not use again once the call
//!   succeeded (a refused destroy, `EBUSY`, leaves it intact).
//! - **\[c-struct\]** — *C-visible memory*: the C structure an object pointer points at (the
//!   owner's field `c`, in an `UnsafeCell`) belongs to C as much as to us: C reads and writes
//!   its fields (`cq_context`, `wr_id`, …) without telling us, so Rust never holds a reference
//!   to it; it is read and written through raw pointers, and our own writes after creation are
//!   serialised among our threads (a lock).
//! - **\[in\]** — *input pointer*: points to one initialised, readable value of the named C
//!   type (the layouts of [`abi`]), which no other thread writes during the call. NULL only
//!   where the function's doc allows it.
//! - **\[out\]** — *output pointer*: points to writable memory for one value of the named C
//!   type (or, for `(ptr, len)` pairs, `len` writable bytes), which no other thread accesses
//!   during the call. NULL only where the function's doc allows it.
//! - **\[buf\]** — *C buffer*: `ptr` with `len` bytes readable (or writable, as the doc says),
//!   for the duration of the call.
//! - **\[str\]** — *C string*: readable up to and including its NUL byte, unchanged during the
//!   call.
//! - **\[wr\]** — *work request list*: a NULL-terminated list of \[in\] requests, each with
//!   `sg_list` pointing to `num_sge` readable `ibv_sge` and naming objects of ours (AH, MW,
//!   MR) by \[object\] pointers.
//! - **\[registered\]** — *registered memory*: `addr..addr+length` of `ibv_reg_mr` (and the
//!   SGEs pointing into it) stays mapped while the MR lives; the device and peers read and
//!   write it at any time, so this library never forms a Rust reference to it and only hands
//!   its addresses to the kernel and the provider.
//! - **\[fd\]** — *file descriptor argument*: a number the caller passes as an fd; if it is
//!   open, no other thread closes it during the call (the library may read it as a borrowed
//!   fd and hand it to the kernel).
//! - **\[ops\]** — the functions of the ops tables (`ibv_context.ops`, `verbs_context`,
//!   `ibv_qp_ex`, `ibv_cq_ex`) are reachable only through a context, QP or CQ of ours: the
//!   inline wrappers of `verbs.h` pass the caller's pointers on, so their object arguments
//!   are \[object\] pointers of the right type and their other arguments follow the exported
//!   function's contract.
//!
//! Invariants of this crate that `// SAFETY:` comments name as well:
//!
//! - **\[owner\]** — every C object is the first field of a `#[repr(C)]` Rust owner allocated
//!   with `Box` (`CContext`, `CPd`, `CCq`, `CQp`, `CCmId`, …), so an \[object\] pointer cast
//!   to the owner's type points at a live owner, and the destroy call takes the `Box` back.
//! - **\[registry\]** — an object found in one of the maps by which events name objects
//!   (CQs, QPs, SRQs by user handle; rdma_cm ids by uid) is alive while the map's lock is
//!   held: destroy removes it under that lock before freeing it. An event handed out keeps
//!   its object alive until acknowledged: destroy waits for the acknowledgements.

#![allow(unsafe_code)]
#![warn(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

/// The owner behind a C object pointer (`FromC::from_c` of an
/// \[object\] pointer, which give `None` for NULL after logging it), or a return from the
/// calling function with `EINVAL` in its error convention: `errno` (a positive errno),
/// `neg` (-1 and `errno`), `neg_errno` (the negative errno), `null` (NULL and `errno`),
/// `unit` (nothing).
macro_rules! obj {
    ($e:expr, errno) => {
        match $e {
            Some(o) => o,
            None => return libc::EINVAL,
        }
    };
    ($e:expr, neg) => {
        match $e {
            Some(o) => o,
            None => {
                $crate::errno::set_errno(libc::EINVAL);
                return -1;
            }
        }
    };
    ($e:expr, neg_errno) => {
        match $e {
            Some(o) => o,
            None => return -(libc::EINVAL as isize),
        }
    };
    ($e:expr, null) => {
        match $e {
            Some(o) => o,
            None => {
                $crate::errno::set_errno(libc::EINVAL);
                return ::std::ptr::null_mut();
            }
        }
    };
    ($e:expr, unit) => {
        match $e {
            Some(o) => o,
            None => return,
        }
    };
}

// First: the modules below use its `symver!`.
#[macro_use]
mod symver;

pub mod abi;
pub mod cma;
mod errno;
mod events;
mod handle;
pub mod ibverbs;
#[cfg(test)]
mod null_tests;
pub mod preload;
pub mod rsocket;
#[cfg(test)]
mod unsupported_tests;
