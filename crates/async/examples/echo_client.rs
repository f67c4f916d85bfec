//! The client of `echo_server`: sends N messages one after the other, checks every echo.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rverbs_async::{AsyncEndpoint, AsyncEventChannel};
use rverbs_cm::verbs::EndpointAttr;
use rverbs_cm::{ConnParam, PortSpace};
use rverbs_uverbs::mr::PageBuf;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::SendFlags;

const MSG: usize = 64;

#[tokio::main(flavor = "current_thread")]
async fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let ip = args.next().unwrap_or_else(|| "10.10.0.1".into());
    let port = args.next().unwrap_or_else(|| "7900".into());
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let dst: SocketAddr = format!("{ip}:{port}")
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{ip}:{port}: {e}")))?;
    let ch = AsyncEventChannel::new()?;
    let id = ch.create_id(PortSpace::TCP)?;
    id.resolve_addr(None, dst, Duration::from_secs(2)).await?;
    id.resolve_route(Duration::from_secs(2)).await?;
    let attr = EndpointAttr {
        caps: QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: MSG as u32,
        },
        sq_sig_all: true,
    };
    let ep = AsyncEndpoint::create(id, &attr)?;
    let mr = ep
        .endpoint()
        .reg_msgs(PageBuf::new(4096)?)
        .map_err(std::io::Error::from)?;
    let sge = [mr.sge(0..MSG)];
    ep.endpoint().post_recv(0, &sge)?;
    ep.connect(&ConnParam::default()).await?;
    let t0 = Instant::now();
    for i in 0..n {
        let msg: Vec<u8> = (0..MSG).map(|b| (i as usize + b) as u8).collect();
        ep.endpoint()
            .post_send_inline(u64::from(i), &msg, SendFlags::empty())?;
        ep.send_comp().await?;
        let wc = ep.recv_comp().await?;
        if !wc.status.is_success() || mr.read_vec(0..MSG)[..] != msg[..] {
            return Err(io::Error::other(format!(
                "message {i} came back wrong: {wc:?}"
            )));
        }
        ep.endpoint().post_recv(0, &sge)?;
    }
    let dt = t0.elapsed();
    println!(
        "echo_client: {n} messages of {MSG} bytes echoed in {dt:?} ({:.1} us per round trip)",
        dt.as_secs_f64() * 1e6 / f64::from(n.max(1))
    );
    ep.disconnect().await?;
    drop(ep);
    drop(mr);
    Ok(())
}
