//! The INLINE source of [`Endpoint::post_send_inline`](super::Endpoint::post_send_inline):
//! a private plain copy of the caller's `&[u8]`.
//!
//! A provider copies an INLINE SGE's bytes with `rverbs_uverbs::kernel::shared`'s byte-wise atomic
//! loads, because in general they may be registered memory that a device, a peer or another
//! thread writes meanwhile; the byte loop that stands for those loads (what Miri runs) needs a
//! pointer that may write (`AtomicU8::from_ptr`), which a `&[u8]` does not give: Stacked
//! Borrows rejects the read-only borrow turned into `&AtomicU8`. A `&[u8]` from safe code is
//! not such memory — nobody may write its bytes while it lives, and a safe caller cannot hold
//! a reference into registered memory (`Mr::as_slice` is `unsafe` and its contract excludes
//! writers) — so the right copy of it is a plain one: into a private buffer here (at most the
//! QP's `max_inline_data` bytes, on the stack up to [`STACK`]), whose pointer may write, and
//! from there the provider's usual copy into the work-queue entry.

use rverbs_uverbs::Sge;

/// Inline payloads up to this many bytes are staged on the stack, longer ones in a `Vec`.
pub(super) const STACK: usize = 256;

/// Calls `post` with one SGE naming a private copy of `data` (lkey 0, for an INLINE post),
/// valid for reads and writes until `post` returns.
pub(super) fn with_private_copy<R>(data: &[u8], post: impl FnOnce(&[Sge; 1]) -> R) -> R {
    let mut stack = [0u8; STACK];
    let mut heap;
    let buf: &mut [u8] = if data.len() <= STACK {
        &mut stack[..data.len()]
    } else {
        heap = data.to_vec();
        &mut heap
    };
    buf.copy_from_slice(data);
    let sge = [Sge {
        addr: buf.as_mut_ptr() as u64,
        length: buf.len() as u32,
        lkey: 0,
    }];
    post(&sge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_uverbs::kernel::shared::copy_from_shared_raw;

    /// Issue 31, item 3: what a provider does with the INLINE SGE of `post_send_inline` (rxe,
    /// siw and mlx5 all copy it with `copy_from_shared_raw`) is sound under both aliasing
    /// models (the miri stage runs this under Stacked and Tree Borrows). Copying straight from
    /// the `&[u8]`, as before, is rejected by Stacked Borrows: "trying to retag ... for
    /// SharedReadWrite permission ... but that tag only grants SharedReadOnly permission".
    #[test]
    fn inline_source_is_a_private_copy() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
        for len in [0, 1, 16, 64, STACK, STACK + 1, 300] {
            let src: &[u8] = &data[..len];
            let mut out = vec![0u8; len];
            with_private_copy(src, |sge| {
                assert_eq!((sge[0].length as usize, sge[0].lkey), (len, 0));
                // SAFETY: the SGE names `len` bytes valid for reads and writes during the
                // call, touched by nothing else; `out` has `len` bytes of its own.
                unsafe {
                    copy_from_shared_raw(sge[0].addr as usize as *const u8, out.as_mut_ptr(), len)
                };
            });
            assert_eq!(out, src, "{len}");
        }
    }
}
