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

/// The ping pattern from every start: 'A' ..= 'z' repeated, long enough that the body of a
/// ping of the size it was made for is one slice of it (one copy per ping, where a table of
/// one cycle takes a copy per run of 58 and a byte loop a compare and a wrap per byte).
pub struct Pattern {
    runs: Box<[u8]>,
}

impl Pattern {
    /// The pattern for pings of at most `size` bytes.
    pub fn new(size: usize) -> Self {
        let runs = CYCLE.iter().copied().cycle().take(size + CYCLE.len());
        Pattern {
            runs: runs.collect(),
        }
    }

    /// The ping of `size` bytes that the C client makes for ping number `ping`, whose
    /// characters start at `start` (65 'A' ..= 122 'z'): `"rdma-ping-N: "`, then `start`,
    /// `start+1`, … wrapping from 'z' to 'A', and a NUL in the last byte. Handed to `put` as
    /// (offset, bytes) pieces that cover `0..size` once, in order: the head, the body and the
    /// NUL, so that the client writes them straight into its registered buffer.
    pub fn emit(&self, size: usize, ping: u32, start: u8, mut put: impl FnMut(usize, &[u8])) {
        let Some(end) = size.checked_sub(1) else {
            return;
        };
        let mut head = [0u8; HEAD_MAX];
        let h = write_head(&mut head, ping).min(end);
        put(0, &head[..h]);
        let off = usize::from(start.wrapping_sub(FIRST));
        match self.runs.get(off..off + (end - h)) {
            // `start` is in the cycle (off < 58) and the ping no longer than the pattern was
            // made for: the body is the slice of the runs that begins with `start`.
            Some(run) if off < CYCLE.len() => put(h, run),
            // Outside the cycle (not what the client passes), or a longer ping: byte by byte.
            _ => {
                let mut c = start;
                let body: Vec<u8> = (h..end)
                    .map(|_| {
                        let b = c;
                        c = if c >= LAST { FIRST } else { c + 1 };
                        b
                    })
                    .collect();
                put(h, &body);
            }
        }
        put(end, &[0]);
    }

    /// [`emit`](Self::emit) into `buf` (all of it): what the tests compare.
    #[cfg(test)]
    pub fn fill(&self, buf: &mut [u8], ping: u32, start: u8) {
        self.emit(buf.len(), ping, start, |at, b| {
            buf[at..at + b.len()].copy_from_slice(b)
        });
    }
}

/// "rdma-ping-", an i32 (at most 11 characters) and ": ".
const HEAD_MAX: usize = 23;

/// Writes `"rdma-ping-N: "` (N as the C client's `%d` of the count) into `head`; returns
/// its length.
fn write_head(head: &mut [u8; HEAD_MAX], ping: u32) -> usize {
    // On the stack and without the formatting machinery: this runs once per ping.
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
    len + 2
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

    /// A ping of `buf.len()` bytes with a pattern made for that size.
    fn fill_ping(buf: &mut [u8], ping: u32, start: u8) {
        Pattern::new(buf.len()).fill(buf, ping, start);
    }

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
        // The slice of the runs against the plain rule, for every start (in and out of the
        // cycle), sizes around one and several cycles of 58, and patterns made for the size,
        // for less (the byte loop) and for more (a shorter slice).
        for start in 0..=255u8 {
            for size in [MIN_SIZE as usize, 57, 58, 59, 64, 116, 117, 200] {
                for made_for in [size, size - 1, size + 1, 1000] {
                    let pattern = Pattern::new(made_for);
                    let mut b = vec![0xeeu8; size];
                    pattern.fill(&mut b, 12, start);
                    let mut want = b.clone();
                    let mut c = start;
                    for x in &mut want[14..] {
                        *x = c;
                        c = if c >= 122 { 65 } else { c + 1 };
                    }
                    *want.last_mut().unwrap() = 0;
                    let what = format!("start {start} size {size} pattern for {made_for}");
                    assert_eq!(&b[..14], b"rdma-ping-12: ", "{what}");
                    assert_eq!(b, want, "{what}");
                }
            }
        }
    }

    #[test]
    fn ping_shorter_than_its_head_is_the_head_cut() {
        // Not a size the options allow (MIN_SIZE), but the fill stays in the buffer.
        let mut b = [0xeeu8; 8];
        Pattern::new(8).fill(&mut b, 5, 65);
        assert_eq!(&b, b"rdma-pi\0");
    }

    #[test]
    fn emitted_pieces_cover_the_ping_once_in_order() {
        // What the client writes into its buffer piece by piece is what `fill` makes, and
        // every byte is written once: sizes down to 0, starts in and out of the cycle.
        for size in [0usize, 1, 2, 8, 13, 14, 26, 64, 200] {
            for start in [65u8, 100, 122, 0, 200] {
                let pattern = Pattern::new(64);
                let mut next = 0;
                let mut got = Vec::new();
                pattern.emit(size, 7, start, |at, b| {
                    assert_eq!(at, next, "size {size} start {start}");
                    next += b.len();
                    got.extend_from_slice(b);
                });
                assert_eq!(next, size, "size {size} start {start}");
                let mut want = vec![0xeeu8; size];
                pattern.fill(&mut want, 7, start);
                assert_eq!(got, want, "size {size} start {start}");
            }
        }
    }
}
