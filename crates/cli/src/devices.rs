//! `rverbs devices`: the RDMA devices and their node GUIDs, laid out like `ibv_devices`.

use std::ffi::OsString;
use std::fmt::Write as _;

use rverbs::uverbs::device::{devices, Device};

use crate::{usage_err, CmdResult};

pub const USAGE: &str = "\
Usage: rverbs devices

List the RDMA devices (those with a uverbs char device) and their node GUIDs.
";

/// The table `ibv_devices` prints: a header, a rule, one row per device.
pub fn format(devs: &[Device]) -> String {
    let rows: Vec<(&str, u64)> = devs.iter().map(|d| (d.name(), d.node_guid())).collect();
    format_rows(&rows)
}

/// [`format()`] from (name, node GUID) pairs.
pub fn format_rows(rows: &[(&str, u64)]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "    {:<16}\t   node GUID", "device");
    let _ = writeln!(s, "    {:<16}\t----------------", "------");
    for (name, guid) in rows {
        let _ = writeln!(s, "    {name:<16}\t{guid:016x}");
    }
    s
}

pub fn run(args: Vec<OsString>) -> CmdResult {
    if let Some(a) = args.first() {
        if a == "-h" || a == "--help" {
            print!("{USAGE}");
            return Ok(());
        }
        return Err(usage_err(format!(
            "unexpected argument {:?}",
            a.to_string_lossy()
        )));
    }
    print!("{}", format(&devices()?));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_ibv_devices() {
        let s = format_rows(&[
            ("rxe0", 0x5054_00ff_fe12_3456),
            ("mlx5_0", 0xb8ce_f603_0012_3456),
        ]);
        assert_eq!(
            s,
            "    device          \t   node GUID\n\
             \x20   ------          \t----------------\n\
             \x20   rxe0            \t505400fffe123456\n\
             \x20   mlx5_0          \tb8cef60300123456\n"
        );
    }

    #[test]
    fn rejects_arguments() {
        let e = run(vec!["-x".into()]).unwrap_err();
        assert!(e.to_string().contains("unexpected argument \"-x\""), "{e}");
    }
}
