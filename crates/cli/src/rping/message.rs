//! What the two sides send each other and put in their buffers: `struct rping_rdma_info`
//! (the address, rkey and size of a buffer) and the ping text.

use super::INFO_LEN;

/// `struct rping_rdma_info`: a buffer's address, rkey and size, all big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaInfo {
    pub buf: u64,
    pub rkey: u32,
    pub size: u32,
}

impl RdmaInfo {
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        b[0..8].copy_from_slice(&self.buf.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; INFO_LEN]) -> Self {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Self {
            buf: u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
            rkey: u32_at(8),
            size: u32_at(12),
        }
    }
}

/// The first and last characters of the ping pattern ('A' and 'z').
const FIRST: u8 = 65;
const LAST: u8 = 122;

/// One cycle of the ping pattern: 'A' ..= 'z'.
const CYCLE: [u8; (LAST - FIRST + 1) as usize] = {
    let mut t = [0u8; (LAST - FIRST + 1) as usize];
    let mut i = 0;
    while i < t.len() {
        t[i] = FIRST + i as u8;
        i += 1;
    }
    t
};

/// Fills `buf` as the C client does for ping number `ping`, whose characters start at
/// `start` (65 'A' ..= 122 'z'): `"rdma-ping-N: "`, then `start`, `start+1`, … wrapping from
/// 'z' to 'A', and a NUL in the last byte.
pub fn fill_ping(buf: &mut [u8], ping: u32, start: u8) {
    // On the stack and without the formatting machinery: this runs once per ping.
    // "rdma-ping-", an i32 (at most 11 characters) and ": " fit in 24 bytes.
    let mut head = [0u8; 24];
    head[..10].copy_from_slice(b"rdma-ping-");
    let mut len = 10;
    let v = ping as i32;
    if v < 0 {
        head[len] = b'-';
        len += 1;
    }
    let mut u = v.unsigned_abs();
    let mut digits = [0u8; 10];
    let mut k = 0;
    loop {
        digits[k] = b'0' + (u % 10) as u8;
        k += 1;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    for &d in digits[..k].iter().rev() {
        head[len] = d;
        len += 1;
    }
    head[len..len + 2].copy_from_slice(b": ");
    len += 2;
    let n = len.min(buf.len());
    buf[..n].copy_from_slice(&head[..n]);
    let body = &mut buf[n..];
    if (FIRST..=LAST).contains(&start) {
        // The pattern cycles through 'A' ..= 'z': whole runs copied from the table (a
        // memcpy each) instead of a compare and a wrap per byte.
        let mut off = usize::from(start - FIRST);
        let mut rest = body;
        while !rest.is_empty() {
            let take = rest.len().min(CYCLE.len() - off);
            let (run, tail) = rest.split_at_mut(take);
            run.copy_from_slice(&CYCLE[off..off + take]);
            rest = tail;
            off = 0;
        }
    } else {
        // Outside the cycle (not what the client passes): byte by byte into it.
        let mut c = start;
        for b in body {
            *b = c;
            c = if c >= LAST { FIRST } else { c + 1 };
        }
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
}

/// The first character of ping `ping + 1`, given ping `ping`'s.
pub fn next_start(start: u8) -> u8 {
    if start >= 122 {
        65
    } else {
        start + 1
    }
}

/// The C string at the start of `buf` (up to the first NUL, or all of it).
pub fn c_str(buf: &[u8]) -> &[u8] {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    &buf[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rping::MIN_SIZE;

    #[test]
    fn info_is_big_endian() {
        let i = RdmaInfo {
            buf: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            size: 64,
        };
        let b = i.encode();
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]
        );
        assert_eq!(RdmaInfo::decode(&b), i);
    }

    #[test]
    fn ping_pattern_is_the_c_clients() {
        // What rping -v prints for the first pings at -S 64 (checked against the C tool).
        let mut b = vec![0xffu8; 64];
        fill_ping(&mut b, 0, 65);
        assert_eq!(
            c_str(&b),
            b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
        );
        assert_eq!(b[63], 0);
        let mut start = 65;
        for _ in 0..2 {
            start = next_start(start);
        }
        fill_ping(&mut b, 2, start);
        assert_eq!(
            c_str(&b),
            b"rdma-ping-2: CDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrst"
        );
        // The characters wrap from 'z' to 'A', and so does the start.
        assert_eq!(next_start(122), 65);
        fill_ping(&mut b, 7, 120);
        assert_eq!(&c_str(&b)[13..18], b"xyzAB");
        // The smallest size still ends with a NUL.
        let mut s = vec![0u8; MIN_SIZE as usize];
        fill_ping(&mut s, 2_147_483_647, 65);
        assert_eq!(c_str(&s), b"rdma-ping-2147483647: ABC");
        // Past i32::MAX the C client's %d goes negative, and so does ours.
        let mut b = vec![0u8; 64];
        fill_ping(&mut b, 2_147_483_648, 65);
        assert_eq!(&c_str(&b)[..23], b"rdma-ping--2147483648: ");
        fill_ping(&mut b, u32::MAX, 65);
        assert_eq!(&c_str(&b)[..15], b"rdma-ping--1: A");
        fill_ping(&mut b, 1_000_000_000, 65);
        assert_eq!(&c_str(&b)[..23], b"rdma-ping-1000000000: A");
    }

    #[test]
    fn ping_pattern_runs_match_a_byte_by_byte_fill() {
        // The table copy against the plain rule, for every start (in and out of the cycle)
        // and sizes around one and several cycles of 58.
        for start in 0..=255u8 {
            for size in [MIN_SIZE as usize, 57, 58, 59, 64, 116, 117, 200] {
                let mut b = vec![0xeeu8; size];
                fill_ping(&mut b, 12, start);
                let mut want = b.clone();
                let mut c = start;
                for x in &mut want[14..] {
                    *x = c;
                    c = if c >= 122 { 65 } else { c + 1 };
                }
                *want.last_mut().unwrap() = 0;
                assert_eq!(&b[..14], b"rdma-ping-12: ", "start {start} size {size}");
                assert_eq!(b, want, "start {start} size {size}");
            }
        }
    }
}
