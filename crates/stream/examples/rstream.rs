//! rdma-core's `rstream` benchmark, played by an [`RdmaStream`]: either side of it, against
//! rdma-core's own `rstream` or another copy of this program. Same options on both sides.
//!
//! ```text
//! rstream -b 10.10.0.1 -T v                                         # rdma-core's server
//! cargo run -p rverbs-stream --example rstream -- -s 10.10.0.1 -T v   # ours as the client
//! ```
//!
//! Options (a subset of rstream's): `-b ADDR` serve, `-s ADDR` connect, `-p PORT` (7471),
//! `-S all` the whole size table (default: the sizes rstream runs by default), `-S SIZE`,
//! `-I ITERATIONS`, `-C COUNT` one custom test on one connection, `-T v` check
//! every byte with rstream's pattern (a byte counter that runs across all transfers and both
//! connections), `-T z` (ours only; with `v`: `-T vz`) send from a registration of the send
//! buffer with [`RdmaStream::write_registered`] (zero copy on the sending side). Like rstream: one connection for the latency table, a second one for the
//! bandwidth table; before each test a 16-byte exchange (client first); then, per iteration,
//! `count` transfers from the client followed by `count` back from the server.
//! `crates/stream/tests/vm_stream.rs` runs it against rdma-core's `rstream` in the guests.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::Instant;

use rverbs_stream::{RdmaListener, RdmaStream, StreamOptions};
use rverbs_uverbs::mr::{AccessFlags, Mr};

/// rstream's size table: (size, option); option 0 runs by default, 1 only with `-S all`.
pub const SIZES: &[(usize, u8)] = &[
    (1 << 6, 0),
    (1 << 7, 1),
    ((1 << 7) + (1 << 6), 1),
    (1 << 8, 1),
    ((1 << 8) + (1 << 7), 1),
    (1 << 9, 1),
    ((1 << 9) + (1 << 8), 1),
    (1 << 10, 1),
    ((1 << 10) + (1 << 9), 1),
    (1 << 11, 1),
    ((1 << 11) + (1 << 10), 1),
    (1 << 12, 0),
    ((1 << 12) + (1 << 11), 1),
    (1 << 13, 1),
    ((1 << 13) + (1 << 12), 1),
    (1 << 14, 1),
    ((1 << 14) + (1 << 13), 1),
    (1 << 15, 1),
    ((1 << 15) + (1 << 14), 1),
    (1 << 16, 0),
    ((1 << 16) + (1 << 15), 1),
    (1 << 17, 1),
    ((1 << 17) + (1 << 16), 1),
    (1 << 18, 1),
    ((1 << 18) + (1 << 17), 1),
    (1 << 19, 1),
    ((1 << 19) + (1 << 18), 1),
    (1 << 20, 0),
    ((1 << 20) + (1 << 19), 1),
    (1 << 21, 1),
    ((1 << 21) + (1 << 20), 1),
    (1 << 22, 1),
    ((1 << 22) + (1 << 21), 1),
];

/// rdma-core's `size_to_count`.
pub fn size_to_count(size: usize) -> usize {
    match size {
        s if s >= 1 << 20 => 100,
        s if s >= 1 << 16 => 1000,
        s if s >= 1 << 10 => 10000,
        _ => 100000,
    }
}

/// One side of an rstream run.
#[derive(Clone, Debug)]
pub struct Config {
    /// `Some`: connect there (`-s`); `None`: serve on `bind` (`-b`).
    pub connect: Option<SocketAddr>,
    /// Where to listen when serving.
    pub bind: SocketAddr,
    /// `-S all`.
    pub all_sizes: bool,
    /// rstream's custom mode (`-S SIZE`, `-I ITERATIONS`, `-C COUNT`; defaults 1 and 1000):
    /// one connection, one test.
    pub custom: Option<(usize, usize, usize)>,
    /// `-T v`.
    pub verify: bool,
    /// `-T z` (ours only): sends go straight from a registration of the send buffer
    /// ([`RdmaStream::write_registered`]), without the send ring's copy.
    pub zero_copy: bool,
}

/// The byte pattern of `-v`: a counter for what we send and one for what we receive.
#[derive(Default)]
struct Pattern {
    send: u8,
    recv: u8,
    received: u64,
}

struct Run<'a> {
    cfg: &'a Config,
    buf: Vec<u8>,
    pat: Pattern,
    /// The send buffer registered on the stream's PD (`-T z`).
    reg: Option<Mr<Vec<u8>>>,
    out: &'a mut dyn Write,
}

impl Run<'_> {
    fn send(&mut self, s: &mut RdmaStream, size: usize) -> io::Result<()> {
        if self.cfg.verify {
            for b in &mut self.buf[..size] {
                *b = self.pat.send;
                self.pat.send = self.pat.send.wrapping_add(1);
            }
        }
        if !self.cfg.zero_copy {
            return s.write_all(&self.buf[..size]);
        }
        let fresh = match &self.reg {
            Some(m) => !std::sync::Arc::ptr_eq(m.pd(), s.pd()) || m.len() < size,
            None => true,
        };
        if fresh {
            self.reg = Some(Mr::register(
                s.pd(),
                self.buf.clone(),
                AccessFlags::empty(),
            )?);
        }
        let mr = self.reg.as_mut().expect("registered above");
        if self.cfg.verify {
            mr.write_at(0, &self.buf[..size]);
        }
        match s.write_registered(mr, 0..size)? {
            n if n == size => Ok(()),
            n => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("write_registered: {n} of {size} bytes"),
            )),
        }
    }

    fn recv(&mut self, s: &mut RdmaStream, size: usize) -> io::Result<()> {
        s.read_exact(&mut self.buf[..size])?;
        if self.cfg.verify {
            for (i, &b) in self.buf[..size].iter().enumerate() {
                if b != self.pat.recv {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "data verification failed at byte {}",
                            self.pat.received + i as u64
                        ),
                    ));
                }
                self.pat.recv = self.pat.recv.wrapping_add(1);
            }
            self.pat.received += size as u64;
        }
        Ok(())
    }

    /// rstream's `run_test`.
    fn test(
        &mut self,
        s: &mut RdmaStream,
        name: &str,
        size: usize,
        iters: usize,
        count: usize,
    ) -> io::Result<()> {
        let client = self.cfg.connect.is_some();
        if client {
            self.send(s, 16)?;
            self.recv(s, 16)?;
        } else {
            self.recv(s, 16)?;
            self.send(s, 16)?;
        }
        let t0 = Instant::now();
        for _ in 0..iters {
            for _ in 0..count {
                if client {
                    self.send(s, size)?
                } else {
                    self.recv(s, size)?
                }
            }
            for _ in 0..count {
                if client {
                    self.recv(s, size)?
                } else {
                    self.send(s, size)?
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let bytes = (iters * count * size * 2) as f64;
        writeln!(
            self.out,
            "{name:<10}{size:<8}{count:<8}{iters:<8}{:<8}{secs:8.2}s {:10.2}{:13.2}",
            bytes as u64,
            bytes * 8.0 / secs / 1e9,
            secs * 1e6 / iters as f64 / (count * 2) as f64,
        )
    }
}

fn connect_or_accept(cfg: &Config, listener: Option<&RdmaListener>) -> io::Result<RdmaStream> {
    // rstream sets SO_SNDBUF and SO_RCVBUF to 512 KiB.
    let opts = StreamOptions {
        send_buffer: 1 << 19,
        recv_buffer: 1 << 19,
        ..StreamOptions::default()
    };
    match (cfg.connect, listener) {
        // Unlike rstream, retry for 10 s while nobody listens yet (a server started at the
        // same time may still be starting).
        (Some(a), _) => {
            let t0 = Instant::now();
            loop {
                match RdmaStream::connect_with(a, &opts) {
                    Err(e)
                        if e.kind() == io::ErrorKind::ConnectionRefused
                            && t0.elapsed() < std::time::Duration::from_secs(10) =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(200))
                    }
                    r => return r,
                }
            }
        }
        (None, Some(l)) => l.accept().map(|(s, _)| s),
        (None, None) => Err(io::Error::other("no listener")),
    }
}

/// Runs rstream's default program (latency table, then bandwidth table) as `cfg` says.
pub fn run(cfg: &Config, out: &mut dyn Write) -> io::Result<()> {
    let opts = StreamOptions {
        send_buffer: 1 << 19,
        recv_buffer: 1 << 19,
        ..StreamOptions::default()
    };
    let listener = match cfg.connect {
        None => Some(RdmaListener::bind_with(cfg.bind, &opts)?),
        Some(_) => None,
    };
    let sizes: Vec<usize> = SIZES
        .iter()
        .filter(|(_, o)| cfg.all_sizes || *o == 0)
        .map(|(s, _)| *s)
        .collect();
    let mut r = Run {
        cfg,
        buf: vec![0u8; *sizes.iter().max().unwrap_or(&16)],
        pat: Pattern::default(),
        reg: None,
        out,
    };
    writeln!(
        r.out,
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:>8} {:>10}{:>13}",
        "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer"
    )?;
    if let Some((size, iters, count)) = cfg.custom {
        r.buf.resize(size.max(16), 0);
        let mut s = connect_or_accept(cfg, listener.as_ref())?;
        r.test(&mut s, "custom", size, iters, count)?;
        return s.shutdown(Shutdown::Both);
    }
    for latency in [true, false] {
        let mut s = connect_or_accept(cfg, listener.as_ref())?;
        for &size in &sizes {
            let (name, iters, count) = if latency {
                (format!("{}_lat", size_name(size)), size_to_count(size), 1)
            } else {
                (format!("{}_bw", size_name(size)), 1, size_to_count(size))
            };
            r.test(&mut s, &name, size, iters, count)?;
        }
        s.shutdown(Shutdown::Both)?;
    }
    Ok(())
}

/// rdma-core's `size_str`: 64, 4k, 64k, 1m, ...
fn size_name(size: usize) -> String {
    if size >= 1 << 20 {
        format!("{}m", size >> 20)
    } else if size >= 1 << 10 {
        format!("{}k", size >> 10)
    } else {
        size.to_string()
    }
}

#[allow(dead_code)] // built into tests/vm_stream.rs without its main
fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut connect = None;
    let mut bind = None;
    let mut port = 7471u16;
    let mut all_sizes = false;
    let mut verify = false;
    let mut zero_copy = false;
    let mut custom: (Option<usize>, Option<usize>, Option<usize>) = (None, None, None);
    let number = |v: &str| -> io::Result<usize> {
        v.parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("number {v:?}: {e}")))
    };
    let mut i = 0;
    let addr = |s: &str| -> io::Result<std::net::IpAddr> {
        s.parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("address {s:?}: {e}")))
    };
    while i < args.len() {
        let val = args.get(i + 1).map(String::as_str);
        match (args[i].as_str(), val) {
            ("-s", Some(v)) => connect = Some(addr(v)?),
            ("-b", Some(v)) => bind = Some(addr(v)?),
            ("-p", Some(v)) => {
                port = v.parse().map_err(|e| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("port {v:?}: {e}"))
                })?
            }
            ("-S", Some("all")) => all_sizes = true,
            ("-S", Some(v)) => custom.0 = Some(number(v)?),
            ("-I", Some(v)) => custom.1 = Some(number(v)?),
            ("-C", Some(v)) => custom.2 = Some(number(v)?),
            // rstream's test options: only v (verify) changes what we do; b, n, a (blocking,
            // non-blocking, poll) are how rstream waits, which the wire does not show.
            ("-T", Some(v)) => {
                verify |= v.contains('v');
                zero_copy |= v.contains('z');
            }
            (a, _) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("unknown or incomplete option {a:?}; usage: rstream [-s ADDR | -b ADDR] [-p PORT] [-S all|SIZE] [-I ITERATIONS] [-C COUNT] [-T v|z|vz]"),
                ))
            }
        }
        i += 2;
    }
    let cfg = Config {
        connect: connect.map(|a| SocketAddr::new(a, port)),
        bind: SocketAddr::new(bind.unwrap_or([0, 0, 0, 0].into()), port),
        all_sizes,
        custom: (custom != (None, None, None)).then(|| {
            (
                custom.0.unwrap_or(1000),
                custom.1.unwrap_or(1),
                custom.2.unwrap_or(1000),
            )
        }),
        verify,
        zero_copy,
    };
    run(&cfg, &mut io::stdout())
}
