//! The ping protocol of each side (`rping_test_server`, `rping_test_client`): advertise a
//! buffer, RDMA READ or WRITE it, check and print the data.

use std::io::{self, Write};

use rverbs::uverbs::SendOp;

use super::cb::{Cb, State};
use super::message::*;
use super::*;

impl Cb<'_> {
    /// `rping_test_server`: serves pings until the client disconnects (`Ok`, wherever in a
    /// ping it happens, as rping: the client decides when the run ends) or something fails.
    pub(super) fn test_server(&mut self, out: &mut impl Write) -> io::Result<()> {
        match self.serve_pings(out) {
            Err(_) if self.state == State::Disconnected => Ok(()),
            r => r,
        }
    }

    fn serve_pings(&mut self, out: &mut impl Write) -> io::Result<()> {
        loop {
            if !self.wait_for(State::RdmaReadAdv)? {
                if self.state == State::Disconnected {
                    return Ok(());
                }
                return Err(self.unexpected(State::RdmaReadAdv));
            }
            debug_log!(self.o, "server received sink adv");
            let len = self.remote.size;
            if len > self.o.size {
                return Err(io::Error::other(format!(
                    "the client advertised a {len}-byte buffer, larger than this server's \
                     {} bytes: run the server with -S {len} or more",
                    self.o.size
                )));
            }
            let sge = [self.rdma_mr.sge(0..len as usize)];
            let op = SendOp::RdmaRead {
                remote_addr: self.remote.buf,
                rkey: self.remote.rkey,
            };
            self.link
                .post_send(op, &sge)
                .map_err(|e| os_err("post send error", e))?;
            debug_log!(self.o, "server posted rdma read req ");
            if !self.wait_for(State::RdmaReadComplete)? {
                return Err(self.unexpected(State::RdmaReadComplete));
            }
            debug_log!(self.o, "server received read complete");
            if self.o.verbose {
                out.write_all(b"server ping data: ")?;
                out.write_all(c_str(&self.rdma_mr.to_vec()))?;
                out.write_all(b"\n")?;
                out.flush()?;
            }
            self.post_info_send()
                .map_err(|e| os_err("post send error", e))?;
            debug_log!(self.o, "server posted go ahead");
            if !self.wait_for(State::RdmaWriteAdv)? {
                return Err(self.unexpected(State::RdmaWriteAdv));
            }
            debug_log!(self.o, "server received sink adv");
            // The string read, with its NUL (rping: strlen + 1), within our buffer.
            let len = (c_str(&self.rdma_mr.to_vec()).len() + 1).min(self.o.size as usize);
            let sge = [self.rdma_mr.sge(0..len)];
            debug_log!(
                self.o,
                "rdma write from lkey {:x} laddr {:x} len {}",
                sge[0].lkey,
                sge[0].addr,
                sge[0].length
            );
            let op = SendOp::RdmaWrite {
                remote_addr: self.remote.buf,
                rkey: self.remote.rkey,
            };
            self.link
                .post_send(op, &sge)
                .map_err(|e| os_err("post send error", e))?;
            if !self.wait_for(State::RdmaWriteComplete)? {
                return Err(self.unexpected(State::RdmaWriteComplete));
            }
            debug_log!(self.o, "server rdma write complete ");
            self.post_info_send()
                .map_err(|e| os_err("post send error", e))?;
            debug_log!(self.o, "server posted go ahead");
        }
    }

    /// The client's error for a wait that ended in another state than `want`.
    fn lost(&self, want: State, ping: u32) -> io::Error {
        if self.state != State::Disconnected {
            return self.unexpected(want);
        }
        let of = match self.o.count {
            0 => String::new(),
            n => format!(" of {n}"),
        };
        io::Error::other(format!(
            "the server disconnected during ping {ping}{of} (waiting for {})",
            want.name()
        ))
    }

    /// `rping_test_client`: `-C` pings (forever with 0).
    pub(super) fn test_client(&mut self, out: &mut impl Write) -> io::Result<()> {
        let mut start = 65u8;
        let mut ping = 0u32;
        let size = self.o.size as usize;
        // Allocated once: a ping reuses them (the checks and the printing read the regions
        // only when asked for, as rping does).
        let pattern = Pattern::new(size);
        let mut start_buf = Vec::new();
        let mut sink = Vec::new();
        while self.o.count == 0 || ping < self.o.count {
            self.state = State::RdmaReadAdv;
            let start_mr = self.start_mr.as_ref().expect("client");
            pattern.emit(size, ping, start, |at, b| start_mr.write_at(at, b));
            start = next_start(start);
            self.advertise(false)
                .map_err(|e| os_err("post send error", e))?;
            if !self.wait_for(State::RdmaWriteAdv)? {
                return Err(self.lost(State::RdmaWriteAdv, ping));
            }
            self.advertise(true)
                .map_err(|e| os_err("post send error", e))?;
            if !self.wait_for(State::RdmaWriteComplete)? {
                return Err(self.lost(State::RdmaWriteComplete, ping));
            }
            if self.o.validate || self.o.verbose {
                sink.resize(self.rdma_mr.len(), 0);
                self.rdma_mr.read_at(0, &mut sink);
            }
            if self.o.validate {
                let start_mr = self.start_mr.as_ref().expect("client");
                start_buf.resize(start_mr.len(), 0);
                start_mr.read_at(0, &mut start_buf);
            }
            if self.o.validate && start_buf[..size] != sink[..size] {
                return Err(io::Error::other(format!(
                    "data mismatch! (ping {ping}: the {size} bytes written back differ from \
                     those read)"
                )));
            }
            if self.o.verbose {
                out.write_all(b"ping data: ")?;
                out.write_all(c_str(&sink))?;
                out.write_all(b"\n")?;
                out.flush()?;
            }
            ping = ping.wrapping_add(1);
        }
        Ok(())
    }
}
