//! `cargo xtask test` (filled in below).
use crate::util::Result;
pub fn run(_args: &[String]) -> Result<u8> {
    Ok(1)
}
