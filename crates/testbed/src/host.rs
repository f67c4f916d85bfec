//! Host programs the test bed needs: QEMU and a static busybox.

use crate::packages::{self, Need};
use crate::util::{self, Result};
use std::path::PathBuf;

/// The host programs a boot needs.
pub struct HostTools {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// A statically linked busybox (the guests' userland).
    pub busybox: PathBuf,
}

const QEMU: &str = "qemu-system-x86_64";

fn find_static_busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .map(PathBuf::from)
        .chain(util::which("busybox"))
        .find(|p| util::is_executable(p) && util::elf_is_static(p).unwrap_or(false))
}

/// Finds qemu-system-x86_64 and a statically linked busybox, after making sure the bed's
/// packages are installed (see [`packages`]).
pub fn ensure() -> Result<HostTools> {
    packages::ensure(Need::Bed, util::prefix())?;
    let qemu = util::which(QEMU).ok_or_else(|| {
        format!(
            "{QEMU} is missing although qemu-system-x86 is installed; install it: {}",
            packages::install_line(&["qemu-system-x86"])
        )
    })?;
    let busybox = find_static_busybox().ok_or_else(|| {
        format!(
            "a statically linked busybox is missing; install it: {}",
            packages::install_line(&["busybox-static"])
        )
    })?;
    Ok(HostTools { qemu, busybox })
}
