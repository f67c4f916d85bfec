//! RDMA WRITE and RDMA READ over rdma_cm, with the key exchange they need: the server
//! registers a buffer the peer may write and read, and SENDs its address, rkey and length
//! (16 bytes: `u64` address, `u32` rkey, `u32` length, little-endian); the client RDMA WRITEs
//! into it, RDMA READs it back, checks both, and SENDs "done"; the server then finds the
//! client's data in its buffer without having posted anything for it.
//!
//! ```text
//! cargo run -p rverbs --example rdma_write_read -- server 10.10.0.1 7472
//! cargo run -p rverbs --example rdma_write_read -- client 10.10.0.1 7472 "some data"
//! ```

use std::io;

use rverbs::cm::{create_ep, getaddrinfo, AddrHints, CmId, ConnParam};
use rverbs::cm::{Endpoint, EndpointAttr};
use rverbs::uverbs::{SendFlags, WorkCompletion};

/// Bytes of the server's buffer.
pub const BUF_LEN: usize = 4096;

/// Where the peer may write and read: what the key message carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteBuf {
    /// Virtual address of the buffer in the server (what the RDMA operations name).
    pub addr: u64,
    /// The key that grants access to it.
    pub rkey: u32,
    /// Its length in bytes.
    pub len: u32,
}

impl RemoteBuf {
    /// The 16-byte key message.
    pub fn encode(&self) -> [u8; 16] {
        let mut m = [0u8; 16];
        m[..8].copy_from_slice(&self.addr.to_le_bytes());
        m[8..12].copy_from_slice(&self.rkey.to_le_bytes());
        m[12..].copy_from_slice(&self.len.to_le_bytes());
        m
    }

    /// Reads a key message; `None` if it is not 16 bytes.
    pub fn decode(m: &[u8]) -> Option<RemoteBuf> {
        let m: &[u8; 16] = m.try_into().ok()?;
        Some(RemoteBuf {
            addr: u64::from_le_bytes(m[..8].try_into().ok()?),
            rkey: u32::from_le_bytes(m[8..12].try_into().ok()?),
            len: u32::from_le_bytes(m[12..].try_into().ok()?),
        })
    }
}

/// Listens on `addr:port`.
pub fn listen(addr: &str, port: &str) -> io::Result<CmId> {
    let hints = AddrHints {
        passive: true,
        ..AddrHints::default()
    };
    let id = create_ep(&getaddrinfo(Some(addr), Some(port), &hints)?[0])?;
    id.listen(4)?;
    Ok(id)
}

/// The server side for one client: returns the first `n` bytes of its buffer after the
/// client's "done", `n` being what the client wrote (its "done" message says how much).
pub fn server(listener: &CmId) -> io::Result<Vec<u8>> {
    let ep = Endpoint::create(listener.get_request()?, &EndpointAttr::default())?;
    // REMOTE_READ and REMOTE_WRITE: the peer's RDMA READ and WRITE go to this buffer.
    let buf = ep.reg_remote(vec![0u8; BUF_LEN])?;
    let ctl = ep.reg_msgs(vec![0u8; 16])?; // the client's "done" message
    ep.post_recv(1, &[ctl.sge(0..16)])?;
    ep.accept(&ConnParam::default())?;
    let key = RemoteBuf {
        addr: buf.addr(),
        rkey: buf.rkey(),
        len: BUF_LEN as u32,
    };
    // 16 bytes fit the default endpoint's inline limit: sent without an MR.
    ep.post_send_inline(2, &key.encode(), SendFlags::empty())?;
    ok(ep.get_send_comp()?, "the key message")?;
    // The client's writes and reads need nothing from us; its "done" ends them.
    let wc = ok(ep.get_recv_comp()?, "the client's \"done\"")?;
    let mut done = vec![0u8; wc.byte_len as usize];
    ctl.read_at(0, &mut done);
    let n = std::str::from_utf8(&done)
        .ok()
        .and_then(|s| s.strip_prefix("done "))
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&n| n <= BUF_LEN)
        .ok_or_else(|| io::Error::other(format!("expected \"done N\", got {done:?}")))?;
    let mut data = vec![0u8; n];
    buf.read_at(0, &mut data);
    let _ = ep.disconnect(); // the client may have disconnected first
    Ok(data)
}

/// The client side: RDMA WRITEs `data` into the server's buffer, RDMA READs it back and
/// returns what the READ brought (equal to `data` when all went well).
pub fn client(addr: &str, port: &str, data: &[u8]) -> io::Result<Vec<u8>> {
    let ai = getaddrinfo(Some(addr), Some(port), &AddrHints::default())?;
    let ep = Endpoint::create(create_ep(&ai[0])?, &EndpointAttr::default())?;
    let ctl = ep.reg_msgs(vec![0u8; 16])?; // the key message
    ep.post_recv(1, &[ctl.sge(0..16)])?;
    ep.connect(&ConnParam::default())?;
    let wc = ok(ep.get_recv_comp()?, "the key message")?;
    let mut m = vec![0u8; wc.byte_len as usize];
    ctl.read_at(0, &mut m);
    let key = RemoteBuf::decode(&m)
        .ok_or_else(|| io::Error::other(format!("bad key message {m:02x?}")))?;
    if data.len() > key.len as usize {
        return Err(io::Error::other(format!(
            "{} bytes do not fit the server's {}",
            data.len(),
            key.len
        )));
    }
    // One local region: the data to write in its first half, the READ lands in the second.
    let n = data.len();
    let local = ep.reg_msgs(vec![0u8; 2 * n.max(1)])?;
    local.write_at(0, data);
    ep.post_write(
        2,
        &[local.sge(0..n)],
        key.addr,
        key.rkey,
        SendFlags::empty(),
    )?;
    ok(ep.get_send_comp()?, "the RDMA WRITE")?;
    ep.post_read(
        3,
        &[local.sge(n..2 * n)],
        key.addr,
        key.rkey,
        SendFlags::empty(),
    )?;
    ok(ep.get_send_comp()?, "the RDMA READ")?;
    let mut back = vec![0u8; n];
    local.read_at(n, &mut back);
    ep.post_send_inline(4, format!("done {n}").as_bytes(), SendFlags::empty())?;
    ok(ep.get_send_comp()?, "the \"done\" message")?;
    ep.disconnect()?;
    Ok(back)
}

/// `wc` if it succeeded, else an error naming `what`.
fn ok(wc: WorkCompletion, what: &str) -> io::Result<WorkCompletion> {
    if wc.status.is_success() {
        Ok(wc)
    } else {
        Err(io::Error::other(format!("{what}: {}", wc.status)))
    }
}

#[allow(dead_code)] // built into crates/cli/tests/rdma_examples.rs without its main
fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &'static str| args.get(i).map_or(default, String::as_str);
    match arg(0, "") {
        "server" => {
            let data = server(&listen(arg(1, "0.0.0.0"), arg(2, "7472"))?)?;
            println!(
                "server: the client wrote {:?}",
                String::from_utf8_lossy(&data)
            );
        }
        "client" => {
            let data = arg(3, "written by RDMA WRITE");
            let back = client(arg(1, "10.10.0.1"), arg(2, "7472"), data.as_bytes())?;
            assert_eq!(back, data.as_bytes(), "the RDMA READ brought other bytes");
            println!("client: wrote and read back {data:?}");
        }
        _ => {
            eprintln!("usage: rdma_write_read server|client ADDR PORT [DATA]");
            std::process::exit(2);
        }
    }
    Ok(())
}
