//! Small helpers of the bed: errors, messages, paths, running programs, shell quoting, ELF checks.

use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// An error message meant for a person: it says what failed and what to do about it.
#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for Error {
    fn from(s: String) -> Self {
        Error(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Self {
        Error(s.to_string())
    }
}

/// Results of the bed: errors are messages for a person.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds what was being done to an error.
pub trait Context<T> {
    /// Prefixes the error with what was being done.
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error(format!("{}: {e}", what())))
    }
}

#[macro_export]
/// Returns early with an [`Error`] made by `format!`.
macro_rules! bail {
    ($($arg:tt)*) => { return Err($crate::util::Error(format!($($arg)*))) };
}

static PREFIX: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Sets the name the bed's messages start with (`xtask`, `rverbs-vm`); once, at start-up.
pub fn set_prefix(p: &'static str) {
    let _ = PREFIX.set(p);
}

/// The name the bed's messages start with.
pub fn prefix() -> &'static str {
    PREFIX.get().copied().unwrap_or("rverbs-testbed")
}

/// Prints a progress message on stderr, `<prefix>: <msg>`.
pub fn say(msg: impl fmt::Display) {
    eprintln!("{}: {msg}", prefix());
}

/// The user's cache directory for the bed: `$RVERBS_TESTBED_CACHE`, else
/// `$XDG_CACHE_HOME/rverbs-testbed`, else `~/.cache/rverbs-testbed`.
pub fn user_cache_dir() -> PathBuf {
    cache_dir_from(|v| std::env::var_os(v))
}

fn cache_dir_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> PathBuf {
    let var = |v: &str| env(v).filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(d) = var("RVERBS_TESTBED_CACHE") {
        return absolute(d);
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return absolute(d).join("rverbs-testbed");
    }
    let home = var("HOME").unwrap_or_else(|| PathBuf::from("/tmp"));
    home.join(".cache").join("rverbs-testbed")
}

/// `p` made absolute against the current directory.
pub fn absolute(p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        std::env::current_dir().unwrap_or_default().join(p)
    }
}

/// Finds `prog` in `$PATH` (and in the sbin directories a non-root `$PATH` may lack).
pub fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from);
    std::env::split_paths(&path)
        .chain(extra)
        .map(|d| d.join(prog))
        .find(|p| is_executable(p))
}

/// Whether `p` is an executable regular file.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // The effective uid is the owner of /proc/self.
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// Describes a command line for messages.
pub fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&shell_quote(&a.to_string_lossy()));
    }
    s
}

/// Runs a command with inherited stdio; fails with the command line when it exits non-zero.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .context(|| format!("cannot run `{}`", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({})", show(cmd), describe_status(status));
    }
    Ok(())
}

/// Runs a command and returns its stdout; stderr is returned inside the error on failure.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .context(|| format!("cannot run `{}`", show(cmd)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            show(cmd),
            describe_status(out.status),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `exit code N` or `killed by signal N`.
pub fn describe_status(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown status".into(),
    }
}

/// Quotes a word for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%^".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Quotes and joins words into a shell command line.
pub fn shell_join<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads the first bytes of an ELF file and says whether it is a static executable
/// (no `PT_INTERP` program header, so no dynamic loader is needed).
pub fn elf_is_static(path: &Path) -> Result<bool> {
    let mut f = std::fs::File::open(path).context(|| format!("cannot open {}", path.display()))?;
    let mut buf = Vec::new();
    f.by_ref()
        .take(1 << 20)
        .read_to_end(&mut buf)
        .context(|| format!("cannot read {}", path.display()))?;
    elf_static_from_bytes(&buf)
        .ok_or_else(|| Error(format!("{} is not a 64-bit ELF file", path.display())))
}

fn elf_static_from_bytes(b: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    let elf = Elf64::new(b)?;
    Some(
        !elf.program_headers()?
            .iter()
            .any(|&(ty, _)| ty == PT_INTERP),
    )
}

/// A little-endian 64-bit ELF image, read field by field (every read bounds-checked).
struct Elf64<'a>(&'a [u8]);

impl<'a> Elf64<'a> {
    fn new(b: &'a [u8]) -> Option<Self> {
        let ok = b.len() >= 64 && &b[..4] == b"\x7fELF" && b[4] == 2 && b[5] == 1;
        ok.then_some(Elf64(b))
    }

    fn u16_at(&self, o: usize) -> Option<u16> {
        Some(u16::from_le_bytes(self.0.get(o..o + 2)?.try_into().ok()?))
    }

    fn u32_at(&self, o: usize) -> Option<u32> {
        Some(u32::from_le_bytes(self.0.get(o..o + 4)?.try_into().ok()?))
    }

    fn u64_at(&self, o: usize) -> Option<usize> {
        usize::try_from(u64::from_le_bytes(self.0.get(o..o + 8)?.try_into().ok()?)).ok()
    }

    /// Each program header's type and offset in the image; `None` when the table does not
    /// fit in the bytes there are.
    fn program_headers(&self) -> Option<Vec<(u32, usize)>> {
        let phoff = self.u64_at(0x20)?;
        let phentsize = usize::from(self.u16_at(0x36)?);
        (0..usize::from(self.u16_at(0x38)?))
            .map(|i| {
                let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
                Some((self.u32_at(ph)?, ph))
            })
            .collect()
    }
}

/// The shared libraries (and the dynamic loader) a dynamically linked program loads, as
/// `ldd` lists them (with `lib_path` searched first): absolute paths on this machine.
pub fn shared_libs(prog: &Path, lib_path: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut cmd = Command::new("ldd");
    cmd.arg(prog);
    if !lib_path.is_empty() {
        let joined = std::env::join_paths(lib_path)
            .map_err(|e| Error(format!("library path {lib_path:?}: {e}")))?;
        cmd.env("LD_LIBRARY_PATH", joined);
    }
    let text = output(&mut cmd)?;
    Ok(parse_ldd(&text))
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let path = match line.split_once("=>") {
            Some((_, rest)) => rest.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            out.push(PathBuf::from(p));
        }
    }
    out
}

/// Whether an ELF image carries the Xen note `XEN_ELFNOTE_PHYS32_ENTRY` (type 18), the PVH
/// entry point that lets QEMU boot an uncompressed kernel directly.
pub fn elf_has_pvh_entry(b: &[u8]) -> bool {
    const PT_NOTE: u32 = 4;
    (|| -> Option<bool> {
        let elf = Elf64::new(b)?;
        for (ty, ph) in elf.program_headers()? {
            if ty != PT_NOTE {
                continue;
            }
            let off = elf.u64_at(ph + 8)?;
            let size = elf.u64_at(ph + 32)?;
            let mut at = off;
            while at + 12 <= off + size {
                let namesz = elf.u32_at(at)? as usize;
                let descsz = elf.u32_at(at + 4)? as usize;
                let ty = elf.u32_at(at + 8)?;
                let name = b.get(at + 12..at + 12 + namesz)?;
                if name.starts_with(b"Xen") && ty == 18 {
                    return Some(true);
                }
                at += 12 + namesz.div_ceil(4) * 4 + descsz.div_ceil(4) * 4;
            }
        }
        Some(false)
    })()
    .unwrap_or(false)
}

/// Reads a stream to its end, turning bytes into lines (lossy UTF-8, `\r` removed) and
/// handing each one to `f`. Used for console output, which may hold partial garbage.
pub fn for_each_line(mut r: impl Read, mut f: impl FnMut(String)) -> io::Result<()> {
    let mut pending = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some(pos) = pending.iter().position(|&c| c == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            f(clean_line(&line[..line.len() - 1]));
        }
    }
    if !pending.is_empty() {
        f(clean_line(&pending));
    }
    Ok(())
}

fn clean_line(b: &[u8]) -> String {
    String::from_utf8_lossy(b).replace('\r', "")
}

/// A duration as seconds with one decimal (`12.3 s`).
pub fn fmt_secs(d: std::time::Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("abc-1/x.y"), "abc-1/x.y");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
        assert_eq!(shell_join(&["echo", "a b", "c"]), "echo 'a b' c");
    }

    #[test]
    fn static_elf_detection() {
        // The test binary itself is dynamically linked on a glibc host, static on musl.
        let me = std::env::current_exe().unwrap();
        let is_static = elf_is_static(&me).unwrap();
        assert_eq!(is_static, cfg!(target_env = "musl"));
        assert!(elf_static_from_bytes(
            b"not an elf file at all, clearly not one at all, no no no no"
        )
        .is_none());
    }

    /// A minimal ELF64 image: the header, one program header of type `ty` at 64 whose
    /// segment is `seg` at 120, then `seg`.
    fn elf_with(ty: u32, seg: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 120];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[0x20..0x28].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
        b[0x36..0x38].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
        b[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes()); // e_phnum
        b[64..68].copy_from_slice(&ty.to_le_bytes()); // p_type
        b[72..80].copy_from_slice(&120u64.to_le_bytes()); // p_offset
        b[96..104].copy_from_slice(&(seg.len() as u64).to_le_bytes()); // p_filesz
        b.extend_from_slice(seg);
        b
    }

    #[test]
    fn pvh_note_and_interpreter_found_in_the_program_headers() {
        // A note "Xen\0" of type 18 (XEN_ELFNOTE_PHYS32_ENTRY) with a 4-byte descriptor.
        let mut note = Vec::new();
        for v in [4u32, 4, 18] {
            note.extend_from_slice(&v.to_le_bytes());
        }
        note.extend_from_slice(b"Xen\0\x00\x10\x00\x01");
        assert!(elf_has_pvh_entry(&elf_with(4, &note)));
        // Another note type, or the note in a segment that is no PT_NOTE: no PVH entry.
        let mut other = note.clone();
        other[8] = 17;
        assert!(!elf_has_pvh_entry(&elf_with(4, &other)));
        assert!(!elf_has_pvh_entry(&elf_with(1, &note)));
        // A note running past the image's end, and no ELF at all.
        let cut = elf_with(4, &note);
        assert!(!elf_has_pvh_entry(&cut[..cut.len() - 6]));
        assert!(!elf_has_pvh_entry(b"not an elf"));
        // PT_INTERP (3): a dynamic program; a program header table past the end: no answer.
        assert_eq!(elf_static_from_bytes(&elf_with(3, b"/lib/ld")), Some(false));
        assert_eq!(elf_static_from_bytes(&elf_with(1, b"")), Some(true));
        let mut short = elf_with(1, b"");
        short.truncate(66);
        assert_eq!(elf_static_from_bytes(&short), None);
    }

    #[test]
    fn cache_directory() {
        fn env(
            pairs: &'static [(&'static str, &'static str)],
        ) -> impl Fn(&str) -> Option<std::ffi::OsString> {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        }
        const ALL: &[(&str, &str)] = &[
            ("RVERBS_TESTBED_CACHE", "/c"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(cache_dir_from(env(ALL)), PathBuf::from("/c"));
        const XDG: &[(&str, &str)] = &[
            ("RVERBS_TESTBED_CACHE", ""),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(cache_dir_from(env(XDG)), PathBuf::from("/x/rverbs-testbed"));
        assert_eq!(
            cache_dir_from(env(&[("HOME", "/h")])),
            PathBuf::from("/h/.cache/rverbs-testbed")
        );
    }

    #[test]
    fn ldd_output() {
        let t = "\tlinux-vdso.so.1 (0x00007ffc)\n\tlibmnl.so.0 => /lib/x86_64-linux-gnu/libmnl.so.0 (0x00007f)\n\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n\tlibgone.so => not found\n";
        assert_eq!(
            parse_ldd(t),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libmnl.so.0"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn lines_are_split_and_cleaned() {
        let input: &[u8] = b"one\r\ntwo\n\xffthree";
        let mut got = Vec::new();
        for_each_line(input, |l| got.push(l)).unwrap();
        assert_eq!(got, ["one", "two", "\u{fffd}three"]);
    }
}
