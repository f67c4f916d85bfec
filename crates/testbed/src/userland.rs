//! A Debian 13 (trixie) userland for the host guests: rdma-core 56's libraries, tools
//! (ibverbs-utils, rdmacm-utils, perftest 25.01) and Python suite (python3-pyverbs 56, with
//! trixie's Python 3.13), unpacked from Debian's archive into the cache
//! (`<cache>/userland/trixie/root`) the way the build roots are (`buildroot`: apt's
//! closure downloaded, `dpkg-deb -x`, no package script run, docs out but rdma-core's, which
//! hold the Python suite's tests).
//!
//! The host guest sees the host's root read-only over 9p, so it sees this directory too; a
//! test enters it by `chroot` after binding the guest's `/dev`, `/proc`, `/sys`, a fresh
//! `/tmp` and the guest's own root (at `/host`, where our C drop-in's libraries are found)
//! onto the mount points the root carries (`crates/capi/tests/common/trixie.rs`). The guests
//! thus carry rdma-core 56 beside the host's Debian 12 rdma-core 44, and nothing of it is
//! copied into an initramfs.

use crate::buildroot;
use crate::util::Result;
use std::path::{Path, PathBuf};

/// The Debian release of the userland.
pub const SUITE: &str = "trixie";

/// What the userland holds (apt adds their dependencies: libibverbs1, librdmacm1,
/// ibverbs-providers, python3.13, ...).
pub const PACKAGES: &[&str] = &[
    "rdma-core",
    "ibverbs-utils",
    "rdmacm-utils",
    "perftest",
    "python3-pyverbs",
    // rping's and the tests' helpers: `timeout`, `sh`.
    "coreutils",
    "dash",
];

/// The environment variable through which the test stages tell the guest's tests where the
/// userland's root is (a host path, which the host guest sees at the same path).
pub const ROOT_ENV: &str = "RVERBS_TRIXIE_ROOT";

/// The cached Debian 13 userland under `cache` (made on first use: about 40 s and 100 MB of
/// downloads on a fast line). Returns its root directory.
pub fn prepare(cache: &Path) -> Result<PathBuf> {
    buildroot::prepare_in(
        cache,
        "userland",
        "userland (rdma-core 56, pyverbs 56)",
        SUITE,
        PACKAGES.iter().map(|p| p.to_string()).collect(),
        &["rdma-core"],
    )
}
