//! On-demand paging (ODP): the checks of a registration with [`AccessFlags::ON_DEMAND`], the
//! PD's table of its ODP regions, and prefetch advice ([`Pd::advise_mr`], [`MrAdvice`]).
//!
//! An ODP region pins nothing: the device reaches the bytes through the process's page tables
//! at the time of each access, faulting pages in as it goes, and the kernel's MMU notifier
//! drops its mapping of a page whenever the process's mapping changes (munmap,
//! `madvise(MADV_DONTNEED)`, migration). Why the safe [`Mr`](super::Mr) holds for it as for a
//! pinned region: docs/architecture.md, "On-demand paging".

use rustix::io::Errno;

use super::AccessFlags;
use crate::context::Context;
use crate::device_attr::OdpGeneralCaps;
use crate::error::{Error, Result};
use crate::kernel::abi::ioctl::object;
use crate::kernel::abi::obj::mr;
use crate::kernel::ioctl::IoctlCall;
use crate::newtype::{flag_set, raw_newtype};
use crate::pd::Pd;
use crate::wr::Sge;

raw_newtype! {
    /// `enum ibv_advise_mr_advice` (`IB_UVERBS_ADVISE_MR_ADVICE_*`): what [`Pd::advise_mr`]
    /// asks of the device.
    MrAdvice(u32) {
        /// Fault the pages in for reading.
        PREFETCH = 0, "PREFETCH";
        /// Fault the pages in for writing (the region needs `LOCAL_WRITE`).
        PREFETCH_WRITE = 1, "PREFETCH_WRITE";
        /// Map the pages that are present now, faulting none in.
        PREFETCH_NO_FAULT = 2, "PREFETCH_NO_FAULT";
    }
}

flag_set! {
    /// `enum ibv_advise_mr_flags` (`IB_UVERBS_ADVISE_MR_FLAG_*`).
    pub struct AdviseFlags: u32 {
        /// `IBV_ADVISE_MR_FLAG_FLUSH`: do it before returning (without it the kernel queues
        /// the work and returns at once; the queued work may fail unseen).
        const FLUSH = 1 << 0;
    }
}

/// Most SGEs one advice takes: the kernel's attribute length is 16 bits, 16 bytes an SGE.
pub(crate) const MAX_ADVISE_SGES: usize = (u16::MAX as usize) / size_of::<Sge>();

/// Refuses an `ON_DEMAND` registration of `addr..addr+len` that the device does not report
/// (a bare `EOPNOTSUPP` or `EINVAL` from the kernel otherwise).
pub(crate) fn check_odp(ctx: &Context, addr: u64, len: usize) -> std::result::Result<(), String> {
    let Some(l) = ctx.cached_limits() else {
        return Ok(()); // the device could not be queried: the kernel decides
    };
    let dev = ctx.name();
    if !l.odp_general_caps.contains(OdpGeneralCaps::SUPPORT) {
        return Err(format!(
            "device {dev} on this kernel reports no on-demand paging (IBV_ODP_SUPPORT is not in its \
             odp_caps.general_caps; rxe has it from about Linux 6.15, built with \
             CONFIG_INFINIBAND_ON_DEMAND_PAGING): register without AccessFlags::ON_DEMAND"
        ));
    }
    if addr == 0
        && len as u64 == u64::MAX
        && !l
            .odp_general_caps
            .contains(OdpGeneralCaps::SUPPORT_IMPLICIT)
    {
        return Err(format!(
            "device {dev} on this kernel reports no implicit on-demand paging (address 0, length \
             u64::MAX; IBV_ODP_SUPPORT_IMPLICIT is not in its odp_caps.general_caps)"
        ));
    }
    Ok(())
}

/// Whether [`check_safe_start`] refuses: an `ON_DEMAND` region on rxe `offset` bytes into its
/// first page, where the device reports ODP (`odp`: `Some(true)`) or its caps could not be
/// read (`None`, kept for the context's life: the kernel may still take the region, so the
/// rule must hold). Without ODP (`Some(false)`) the registration is refused anyway, by
/// [`check_odp`], which says why.
fn must_start_on_a_page(access: AccessFlags, odp: Option<bool>, rxe: bool, offset: u64) -> bool {
    access.contains(AccessFlags::ON_DEMAND) && odp != Some(false) && rxe && offset != 0
}

/// Refuses a safe ODP region on rxe whose memory does not start on a page boundary.
///
/// rxe's ODP copy (`__rxe_odp_mr_copy`, Linux 7.3.4 as Debian builds it, measured in the bed:
/// `rverbs/vm_odp`) copies each page's part to or from the *start* of the page instead of its
/// offset in the page. For a region that starts inside a page, a request at an address in
/// its first page then reads or writes the bytes of that page before the region: memory Rust
/// may use for anything else (a `Vec`'s neighbours on the heap), which a peer with the rkey
/// could overwrite or read. With a page-aligned start every such access stays inside the
/// region (misplaced, but not outside it), so the safe [`Mr`](super::Mr) takes ODP on rxe
/// only for memory that starts on a page boundary ([`PageBuf`](super::PageBuf) does).
pub(crate) fn check_safe_start(
    ctx: &Context,
    addr: u64,
    access: AccessFlags,
) -> std::result::Result<(), String> {
    let page = rustix::param::page_size() as u64;
    let odp = ctx
        .cached_limits()
        .map(|l| l.odp_general_caps.contains(OdpGeneralCaps::SUPPORT));
    if !must_start_on_a_page(
        access,
        odp,
        ctx.driver_id() == crate::device::DriverId::RXE,
        addr % page,
    ) {
        return Ok(());
    }
    Err(format!(
        "an on-demand-paging region on rxe must start on a page boundary ({addr:#x} is {} \
         bytes into its page): rxe copies ODP data at the start of each page instead of at \
         its offset (Linux 7.3.4), which would reach the bytes before the region; register \
         a PageBuf",
        addr % page
    ))
}

impl Pd {
    /// Gives the device advice about ranges of this PD's on-demand-paging regions
    /// (`ibv_advise_mr`): fault them in now ([`MrAdvice::PREFETCH`], `PREFETCH_WRITE`) or map
    /// what is present ([`MrAdvice::PREFETCH_NO_FAULT`]), before the requests that touch
    /// them. With [`AdviseFlags::FLUSH`] the work is done when this returns; without it the
    /// kernel queues it and a failure of the queued work is not reported.
    ///
    /// Each SGE names a range inside a region of this PD registered with
    /// [`AccessFlags::ON_DEMAND`] (a safe [`Mr`](super::Mr)'s [`sge`](super::Mr::sge), a
    /// [`RawMr`](super::RawMr)'s range): checked here, before the kernel sees it, because
    /// advice changes no byte of memory but a kernel driver may not check that the region is
    /// an ODP one (rxe's prefetch reads the region's ODP state without looking). A key is
    /// checked and used under one lock that its deregistration takes too.
    ///
    /// Errors: no SGE or more than 4095 (the kernel's attribute length is 16 bits), an unknown advice or flag bit, an
    /// SGE of length 0, a key that names no ODP region of this PD, a range outside its
    /// region, on rxe a region registered without `LOCAL_WRITE` (all `InvalidInput`); a device without ODP or without advice
    /// (`Unsupported`: rxe takes advice from about Linux 6.16); the kernel's refusal.
    pub fn advise_mr(&self, advice: MrAdvice, flags: AdviseFlags, sges: &[Sge]) -> Result<()> {
        let ctx = self.context();
        let op = || {
            format!(
                "advise MR ({advice:?}, {flags:?}, {} SGEs) on {}",
                sges.len(),
                ctx.name()
            )
        };
        if sges.is_empty() || sges.len() > MAX_ADVISE_SGES {
            return Err(Error::invalid(
                op(),
                format!("takes 1 to {MAX_ADVISE_SGES} SGEs, not {}", sges.len()),
            )
            .into());
        }
        if advice.name().is_none() {
            return Err(Error::invalid(op(), format!("unknown advice {}", advice.0)).into());
        }
        let unknown = flags.bits() & !AdviseFlags::FLUSH.bits();
        if unknown != 0 {
            return Err(Error::invalid(op(), format!("unknown flag bits {unknown:#x}")).into());
        }
        if let Some(l) = ctx.cached_limits() {
            if !l.odp_general_caps.contains(OdpGeneralCaps::SUPPORT) {
                return Err(Error::unsupported(
                    op(),
                    format!(
                        "device {} on this kernel reports no on-demand paging",
                        ctx.name()
                    ),
                )
                .into());
            }
        }
        let keys = self.odp_keys().lock();
        let mut wire = Vec::with_capacity(size_of_val(sges));
        for (i, s) in sges.iter().enumerate() {
            let Some(r) = keys.get(&s.lkey) else {
                return Err(Error::invalid(
                    op(),
                    format!(
                        "SGE {i}: lkey {:#x} names no on-demand-paging region of this PD \
                         (advice is for regions registered with AccessFlags::ON_DEMAND)",
                        s.lkey
                    ),
                )
                .into());
            };
            if s.length == 0 {
                return Err(Error::invalid(op(), format!("SGE {i} has length 0")).into());
            }
            if !r.local_write && ctx.driver_id() == crate::device::DriverId::RXE {
                // rxe_ib_advise_mr's prefetch looks each region up asking for local write
                // (lookup_mr with IB_ACCESS_LOCAL_WRITE): the kernel's bare EINVAL otherwise.
                return Err(Error::invalid(
                    op(),
                    format!(
                        "SGE {i}: lkey {:#x} names a region without AccessFlags::LOCAL_WRITE, \
                         which rxe takes no advice for (it looks each advised region up for \
                         local write)",
                        s.lkey
                    ),
                )
                .into());
            }
            let end = s.addr.checked_add(u64::from(s.length));
            if s.addr < r.addr || end.map_or(true, |e| e > r.addr.saturating_add(r.len)) {
                return Err(Error::invalid(
                    op(),
                    format!(
                        "SGE {i}: {:#x}+{} lies outside its region {:#x}+{}",
                        s.addr, s.length, r.addr, r.len
                    ),
                )
                .into());
            }
            wire.extend_from_slice(&s.addr.to_ne_bytes());
            wire.extend_from_slice(&s.length.to_ne_bytes());
            wire.extend_from_slice(&s.lkey.to_ne_bytes());
        }
        let fl = flags.bits();
        let mut c = IoctlCall::new(object::MR, mr::METHOD_ADVISE);
        c.idr(mr::ATTR_ADVISE_PD_HANDLE, self.handle());
        c.const_in(mr::ATTR_ADVISE_ADVICE, u64::from(advice.0));
        c.ptr_in(mr::ATTR_ADVISE_FLAGS, &fl);
        c.ptr_in_bytes(mr::ATTR_ADVISE_SGE_LIST, &wire);
        let r = ctx.ioctl(&mut c);
        drop(keys);
        r.map_err(|e| {
            let err = Error::os(op(), e);
            match e {
                Errno::OPNOTSUPP | Errno::PROTONOSUPPORT | Errno::NOTTY => {
                    err.with_detail(format!(
                        "{} on this kernel takes no memory advice (rxe has it from about Linux \
                     6.16)",
                        ctx.name()
                    ))
                }
                _ => err,
            }
        })?;
        Ok(())
    }
}

impl<M: super::MrMemory> super::Mr<M> {
    /// [`Pd::advise_mr`] for `range` of this region (which must be registered with
    /// [`AccessFlags::ON_DEMAND`]).
    ///
    /// # Panics
    /// If `range` is not inside the region (as [`Mr::sge`](super::Mr::sge)).
    pub fn advise(
        &self,
        range: std::ops::Range<usize>,
        advice: MrAdvice,
        flags: AdviseFlags,
    ) -> Result<()> {
        let sge = *self.sge(range);
        self.pd().advise_mr(advice, flags, &[sge])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_odp_on_rxe_is_refused_unless_the_device_has_no_odp() {
        let odp = AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND;
        assert!(must_start_on_a_page(odp, Some(true), true, 8));
        // Caps that could not be read (review finding 2): refused, not let through.
        assert!(must_start_on_a_page(odp, None, true, 8));
        assert!(!must_start_on_a_page(odp, Some(false), true, 8));
        assert!(!must_start_on_a_page(odp, Some(true), true, 0));
        assert!(!must_start_on_a_page(odp, Some(true), false, 8));
        assert!(!must_start_on_a_page(
            AccessFlags::LOCAL_WRITE,
            Some(true),
            true,
            8
        ));
    }

    #[test]
    fn advice_values_are_rdma_cores() {
        assert_eq!(MrAdvice::PREFETCH.0, 0);
        assert_eq!(MrAdvice::PREFETCH_WRITE.0, 1);
        assert_eq!(MrAdvice::PREFETCH_NO_FAULT.0, 2);
        assert_eq!(AdviseFlags::FLUSH.bits(), 1);
        assert_eq!(MAX_ADVISE_SGES, 4095);
    }
}
