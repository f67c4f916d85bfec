//! Host programs the test bed needs: QEMU and a static busybox. Installed with apt when
//! missing and running as root; otherwise a message says exactly what to install.

use crate::util::{self, Result};
use std::path::PathBuf;
use std::process::Command;

pub struct HostTools {
    pub qemu: PathBuf,
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

/// Finds (installing if it can) qemu-system-x86_64 and a statically linked busybox.
pub fn ensure() -> Result<HostTools> {
    let mut missing = Vec::new();
    if util::which(QEMU).is_none() {
        missing.push("qemu-system-x86");
    }
    if find_static_busybox().is_none() {
        missing.push("busybox-static");
    }
    if !missing.is_empty() {
        let list = missing.join(" ");
        if util::is_root() && util::which("apt-get").is_some() {
            eprintln!("xtask: installing {list}");
            let install = |update: bool| {
                if update {
                    util::run(Command::new("apt-get").args(["update", "-q"]))?;
                }
                util::run(
                    Command::new("apt-get")
                        .args(["install", "-y", "-q", "--no-install-recommends"])
                        .args(&missing)
                        .env("DEBIAN_FRONTEND", "noninteractive"),
                )
            };
            // A fresh machine may have no package lists yet: update and retry once.
            if install(false).is_err() {
                install(true).map_err(|e| {
                    util::Error(format!(
                        "cannot install {list}: {e}\nInstall them: apt-get install {list}"
                    ))
                })?;
            }
        } else {
            return Err(util::Error(missing_message(&missing)));
        }
    }
    let qemu = util::which(QEMU)
        .ok_or_else(|| format!("{QEMU} is still missing after installing qemu-system-x86"))?;
    let busybox = find_static_busybox()
        .ok_or("a statically linked busybox is still missing (install busybox-static)")?;
    Ok(HostTools { qemu, busybox })
}

/// What to tell a user who cannot install the packages themselves (not root).
fn missing_message(missing: &[&str]) -> String {
    let list = missing.join(" ");
    let (verb, obj) = if missing.len() == 1 {
        ("is", "it")
    } else {
        ("are", "them")
    };
    format!(
        "the VM test bed needs the Debian package(s) {list}, which {verb} missing.\n\
         Install {obj} as root: apt-get install --no-install-recommends {list}\n\
         (or run the xtask as root, and it installs {obj} itself)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_the_packages_and_the_command() {
        let m = missing_message(&["qemu-system-x86", "busybox-static"]);
        assert!(
            m.contains("apt-get install --no-install-recommends qemu-system-x86 busybox-static"),
            "{m}"
        );
        assert!(m.contains("are missing"), "{m}");
        let m = missing_message(&["busybox-static"]);
        assert!(
            m.contains("is missing") && m.contains("--no-install-recommends busybox-static\n"),
            "{m}"
        );
    }
}
