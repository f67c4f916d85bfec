//! The address exchange over TCP: the 52-byte message of `ibv_rc_pingpong`
//! (`"%04x:%06x:%06x:<GID>"`: LID, QPN, PSN, GID) and who sends it when.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use rverbs::uverbs::gid::Gid;

/// Default TCP port, as ibv_rc_pingpong.
pub const DEFAULT_PORT: u16 = 18515;
/// Bytes of the address message on the TCP socket: `sizeof "0000:000000:000000:" + 32 hex
/// digits`, NUL included.
pub const MSG_LEN: usize = 52;
/// What the client sends after reading the server's address (NUL included).
pub const DONE_MSG: &[u8; 5] = b"done\0";

/// How long the client tries each address of the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long each read or write of the address exchange may take.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// One side's address as exchanged over TCP (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl fmt::Display for Dest {
    /// The text after "local address:" / "remote address:".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            self.lid, self.qpn, self.psn, self.gid
        )
    }
}

/// The GID as the wire carries it: its 16 bytes in order as 32 lowercase hex digits.
pub fn gid_to_wire(gid: &Gid) -> [u8; 32] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (i, b) in gid.0.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    out
}

/// Reads a wire GID (32 hex digits, either case).
pub fn wire_to_gid(s: &str) -> Option<Gid> {
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(Gid(g))
}

/// The 52-byte message: `"%04x:%06x:%06x:<32 hex>"` and a NUL.
pub fn encode_dest(d: &Dest) -> [u8; MSG_LEN] {
    let mut m = [0u8; MSG_LEN];
    let head = format!(
        "{:04x}:{:06x}:{:06x}:",
        d.lid,
        d.qpn & 0xff_ffff,
        d.psn & 0xff_ffff
    );
    m[..head.len()].copy_from_slice(head.as_bytes());
    m[head.len()..head.len() + 32].copy_from_slice(&gid_to_wire(&d.gid));
    m
}

/// Parses a peer's message (what C's `sscanf("%x:%x:%x:%s")` reads): three hex numbers and
/// a 32-digit GID, separated by ':', up to the first NUL.
pub fn decode_dest(msg: &[u8]) -> Result<Dest, String> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = std::str::from_utf8(&msg[..end])
        .map_err(|_| format!("the remote address message is not text: {msg:02x?}"))?;
    let bad = |why: &str| format!("bad remote address message {text:?}: {why}");
    let mut parts = text.splitn(4, ':');
    let mut hex = |name: &str, max: u32| -> Result<u32, String> {
        let s = parts.next().ok_or_else(|| bad(&format!("no {name}")))?;
        match u32::from_str_radix(s, 16) {
            Ok(v) if v <= max => Ok(v),
            _ => Err(bad(&format!(
                "{name} {s:?} is not a hex number up to {max:#x}"
            ))),
        }
    };
    let lid = hex("LID", 0xffff)? as u16;
    let qpn = hex("QPN", 0xff_ffff)?;
    let psn = hex("PSN", 0xff_ffff)?;
    let g = parts.next().ok_or_else(|| bad("no GID"))?;
    let gid = wire_to_gid(g).ok_or_else(|| bad(&format!("GID {g:?} is not 32 hex digits")))?;
    Ok(Dest { lid, qpn, psn, gid })
}

/// Reads exactly `buf.len()` bytes; a peer that closes early is an error naming how much came.
fn read_msg(s: &mut TcpStream, buf: &mut [u8], what: &str, peer: &str) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{peer} closed the connection after {got} of the {} bytes of {what}",
                        buf.len()
                    ),
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no {what} from {peer} within {} s (got {got} of {} bytes)",
                        EXCHANGE_TIMEOUT.as_secs(),
                        buf.len()
                    ),
                ))
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("read {what} from {peer}: {e}"),
                ))
            }
        }
    }
    Ok(())
}

fn write_msg(s: &mut TcpStream, buf: &[u8], what: &str, peer: &str) -> io::Result<()> {
    s.write_all(buf)
        .map_err(|e| io::Error::new(e.kind(), format!("send {what} to {peer}: {e}")))
}

fn bounded(s: &TcpStream) -> io::Result<()> {
    s.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    s.set_write_timeout(Some(EXCHANGE_TIMEOUT))?;
    s.set_nodelay(true)
}

/// Connects to `host:port`, trying each address it resolves to.
pub fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| io::Error::new(e.kind(), format!("resolve {host}:{port}: {e}")))?
        .collect();
    let mut errs = Vec::new();
    for a in &addrs {
        match TcpStream::connect_timeout(a, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => errs.push((e.kind(), format!("{a}: {e}"))),
        }
    }
    let kind = errs.first().map_or(io::ErrorKind::NotFound, |e| e.0);
    let detail = if errs.is_empty() {
        "no address".to_string()
    } else {
        errs.into_iter().map(|e| e.1).collect::<Vec<_>>().join("; ")
    };
    Err(io::Error::new(
        kind,
        format!("couldn't connect to {host}:{port}: {detail}"),
    ))
}

/// Client side: send ours, read theirs, send "done".
pub fn client_exchange(s: &mut TcpStream, peer: &str, mine: &Dest) -> io::Result<Dest> {
    bounded(s)?;
    write_msg(s, &encode_dest(mine), "our address", peer)?;
    let mut m = [0u8; MSG_LEN];
    read_msg(s, &mut m, "the remote address", peer)?;
    write_msg(s, DONE_MSG, "\"done\"", peer)?;
    decode_dest(&m).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Listens on `port` on every address (IPv6 and IPv4; IPv4 alone when there is no IPv6).
pub fn listen(port: u16) -> io::Result<TcpListener> {
    TcpListener::bind((std::net::Ipv6Addr::UNSPECIFIED, port))
        .or_else(|_| TcpListener::bind((std::net::Ipv4Addr::UNSPECIFIED, port)))
        .map_err(|e| io::Error::new(e.kind(), format!("couldn't listen to port {port}: {e}")))
}

/// Server side: read theirs, `connect_qp(theirs)`, send ours, read "done".
pub fn server_exchange(
    s: &mut TcpStream,
    peer: &str,
    mine: &Dest,
    connect_qp: impl FnOnce(&Dest) -> Result<(), Box<dyn std::error::Error>>,
) -> Result<Dest, Box<dyn std::error::Error>> {
    bounded(s)?;
    let mut m = [0u8; MSG_LEN];
    read_msg(s, &mut m, "the remote address", peer)?;
    let rem = decode_dest(&m)?;
    connect_qp(&rem)?;
    write_msg(s, &encode_dest(mine), "our address", peer)?;
    let mut done = [0u8; DONE_MSG.len()];
    read_msg(s, &mut done, "\"done\"", peer)?;
    if &done != DONE_MSG {
        return Err(format!("{peer} sent {done:02x?} where \"done\" was expected").into());
    }
    Ok(rem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rc_pingpong::Summary;

    fn roce_dest() -> Dest {
        Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::parse("::ffff:10.10.0.1").unwrap(),
        }
    }

    #[test]
    fn message_is_the_c_tools_bytes() {
        let m = encode_dest(&roce_dest());
        assert_eq!(m.len(), 52);
        assert_eq!(
            &m[..51],
            b"0000:000011:abcdef:00000000000000000000ffff0a0a0001"
        );
        assert_eq!(m[51], 0);
        // IB-style: a LID, no GID.
        let d = Dest {
            lid: 0x1f,
            qpn: 0xfffffe,
            psn: 0,
            gid: Gid::default(),
        };
        assert_eq!(
            &encode_dest(&d)[..],
            &b"001f:fffffe:000000:00000000000000000000000000000000\0"[..]
        );
    }

    #[test]
    fn message_round_trips_and_parses_c_output() {
        let d = roce_dest();
        assert_eq!(decode_dest(&encode_dest(&d)).unwrap(), d);
        // The form of ibv_rc_pingpong's sprintf for a link-local GID (NUL included), and a
        // reader that stops at the NUL.
        let c = b"0000:000012:5f0c3a:fe80000000000000505400fffe123456\0";
        let d = decode_dest(c).unwrap();
        assert_eq!((d.lid, d.qpn, d.psn), (0, 0x12, 0x5f0c3a));
        assert_eq!(d.gid.to_string(), "fe80::5054:ff:fe12:3456");
        assert_eq!(
            wire_to_gid("00000000000000000000FFFF0A0A0001").unwrap(),
            roce_dest().gid
        );
        assert_eq!(
            std::str::from_utf8(&gid_to_wire(&roce_dest().gid)).unwrap(),
            "00000000000000000000ffff0a0a0001"
        );
    }

    #[test]
    fn bad_messages_say_what_is_wrong() {
        let e = decode_dest(b"0000:000011\0").unwrap_err();
        assert!(e.contains("no PSN"), "{e}");
        let e = decode_dest(b"0000:zz:000001:00000000000000000000ffff0a0a0001\0").unwrap_err();
        assert!(e.contains("QPN \"zz\""), "{e}");
        let e = decode_dest(b"0000:000011:1000000:00000000000000000000ffff0a0a0001\0").unwrap_err();
        assert!(e.contains("PSN"), "{e}");
        let e = decode_dest(b"0000:000011:000001:ffff0a0a0001\0").unwrap_err();
        assert!(e.contains("not 32 hex digits"), "{e}");
        let e = decode_dest(&[0xff; 52]).unwrap_err();
        assert!(e.contains("not text"), "{e}");
    }

    #[test]
    fn address_lines_match_the_c_format() {
        assert_eq!(
            roce_dest().to_string(),
            "LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:10.10.0.1"
        );
        let s = Summary {
            bytes: 64 * 1000 * 2,
            usec: 250_000.0,
            iters: 1000,
        };
        assert_eq!(
            s.to_string(),
            "128000 bytes in 0.25 seconds = 4.10 Mbit/sec\n\
             1000 iters in 0.25 seconds = 250.00 usec/iter\n"
        );
    }

    /// The TCP exchange between our client and our server over loopback, with a fake QP
    /// connect that records the order of events.
    #[test]
    fn exchange_over_loopback() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server_me = Dest {
            qpn: 0x22,
            ..roce_dest()
        };
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut connected = None;
            let rem = server_exchange(&mut s, "client", &server_me, |r| {
                connected = Some(*r);
                Ok(())
            })
            .unwrap();
            assert_eq!(connected, Some(rem));
            rem
        });
        let mut s = connect("127.0.0.1", port).unwrap();
        let client_me = roce_dest();
        let got = client_exchange(&mut s, "server", &client_me).unwrap();
        assert_eq!(got, server_me);
        assert_eq!(t.join().unwrap(), client_me);
    }

    #[test]
    fn exchange_errors() {
        // The peer closes after part of its message.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut m = [0u8; MSG_LEN];
            s.read_exact(&mut m).unwrap();
            s.write_all(b"0000:0000").unwrap();
        });
        let mut s = connect("127.0.0.1", port).unwrap();
        let e = client_exchange(&mut s, "srv", &roce_dest()).unwrap_err();
        assert!(
            e.to_string().contains(
                "srv closed the connection after 9 of the 52 bytes of the remote address"
            ),
            "{e}"
        );
        t.join().unwrap();
        // Nobody listens.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let e = connect("127.0.0.1", port).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("couldn't connect to 127.0.0.1:{port}")),
            "{e}"
        );
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused);
    }
}
