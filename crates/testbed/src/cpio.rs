//! Writer for the "newc" cpio format that the Linux kernel unpacks as an initramfs
//! (see the kernel's Documentation/driver-api/early-userspace/buffer-format.rst).

use std::collections::BTreeSet;
use std::io::{self, Write};

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// Builds one cpio archive in memory. Parent directories are added on demand, so entries can
/// be added in any order as long as a path is not added twice.
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Default for Cpio {
    fn default() -> Self {
        Self::new()
    }
}

impl Cpio {
    /// An empty archive.
    pub fn new() -> Self {
        Cpio {
            buf: Vec::new(),
            ino: 1,
            dirs: BTreeSet::new(),
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = name.trim_start_matches('/');
        let namesize = name.len() + 1;
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            if mode & S_IFDIR == S_IFDIR { 2 } else { 1 },
            0, // mtime: fixed, so that archives are reproducible
            u32::try_from(data.len()).expect("cpio entries are limited to 4 GiB"),
            0,
            0,
            rdev.0,
            rdev.1,
            namesize as u32,
            0, // check (only used by the "crc" variant)
        ];
        self.ino += 1;
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            write!(self.buf, "{f:08x}").expect("writing to a Vec cannot fail");
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }

    fn parents(&mut self, path: &str) {
        let path = path.trim_start_matches('/');
        let mut at = 0;
        while let Some(pos) = path[at..].find('/') {
            let dir = &path[..at + pos];
            at += pos + 1;
            if !dir.is_empty() && self.dirs.insert(dir.to_string()) {
                self.entry(dir, S_IFDIR | 0o755, (0, 0), &[]);
            }
        }
    }

    /// Adds a directory (and its parents).
    pub fn dir(&mut self, path: &str) {
        self.parents(path);
        let p = path.trim_matches('/').to_string();
        if !p.is_empty() && self.dirs.insert(p.clone()) {
            self.entry(&p, S_IFDIR | 0o755, (0, 0), &[]);
        }
    }

    /// Adds a regular file with permission bits `perm`.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        self.parents(path);
        self.entry(path, S_IFREG | (perm & 0o7777), (0, 0), data);
    }

    /// Adds a symbolic link to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.parents(path);
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes());
    }

    /// Adds a character device node.
    pub fn char_dev(&mut self, path: &str, perm: u32, major: u32, minor: u32) {
        self.parents(path);
        self.entry(path, S_IFCHR | (perm & 0o7777), (major, minor), &[]);
    }

    /// Ends the archive and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.buf
    }

    /// Writes the archive, trailer included.
    pub fn write_to(self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads back (name, mode, data) triples, checking the format's alignment rules.
    fn parse(mut b: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut out = Vec::new();
        let total = b.len();
        loop {
            assert_eq!((total - b.len()) % 4, 0, "header not 4-byte aligned");
            assert_eq!(&b[..6], b"070701");
            let field = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&b[6 + 8 * i..14 + 8 * i]).unwrap(), 16)
                    .unwrap()
            };
            let mode = field(1);
            let filesize = field(6) as usize;
            let namesize = field(11) as usize;
            let name = std::str::from_utf8(&b[110..110 + namesize - 1])
                .unwrap()
                .to_string();
            assert_eq!(b[110 + namesize - 1], 0);
            let data_at = (110 + namesize).div_ceil(4) * 4;
            let data = b[data_at..data_at + filesize].to_vec();
            let next = (data_at + filesize).div_ceil(4) * 4;
            b = &b[next..];
            if name == "TRAILER!!!" {
                assert!(b.is_empty());
                return out;
            }
            out.push((name, mode, data));
        }
    }

    #[test]
    fn roundtrip_with_parents() {
        let mut c = Cpio::new();
        c.file("/bin/busybox", 0o755, b"ELF...");
        c.symlink("/bin/sh", "busybox");
        c.dir("/proc");
        c.char_dev("/dev/console", 0o600, 5, 1);
        c.file("/lib/modules/a/b.ko", 0o644, b"12345");
        c.dir("/lib/modules");
        let entries = parse(&c.finish());
        let names: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "bin/busybox",
                "bin/sh",
                "proc",
                "dev",
                "dev/console",
                "lib",
                "lib/modules",
                "lib/modules/a",
                "lib/modules/a/b.ko"
            ]
        );
        assert_eq!(entries[1].1, 0o100755);
        assert_eq!(entries[1].2, b"ELF...");
        assert_eq!(entries[2].1, 0o120777);
        assert_eq!(entries[2].2, b"busybox");
        assert_eq!(entries[5].1, 0o020600);
        assert_eq!(entries[9].2, b"12345");
    }
}
