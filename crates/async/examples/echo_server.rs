//! An async RDMA echo server: one task per connection, each echoing every message back.
//!
//! ```sh
//! cargo run -p rverbs-async --example echo_server -- 10.10.0.1 7900
//! cargo run -p rverbs-async --example echo_client -- 10.10.0.1 7900 1000
//! ```

use std::io;
use std::net::SocketAddr;

use rverbs_async::{AsyncCmId, AsyncEndpoint, AsyncEventChannel};
use rverbs_cm::verbs::EndpointAttr;
use rverbs_cm::{ConnParam, PortSpace};
use rverbs_uverbs::mr::PageBuf;
use rverbs_uverbs::qp::QpCaps;
use rverbs_uverbs::SendFlags;

const MSG: usize = 64;

fn attr() -> EndpointAttr {
    EndpointAttr {
        caps: QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: MSG as u32,
        },
        sq_sig_all: true,
    }
}

async fn serve(id: AsyncCmId) -> io::Result<u64> {
    let ep = AsyncEndpoint::create(id, &attr())?;
    let mr = ep
        .endpoint()
        .reg_msgs(PageBuf::new(4096)?)
        .map_err(std::io::Error::from)?;
    let sge = [mr.sge(0..MSG)];
    ep.endpoint().post_recv(0, &sge)?;
    ep.accept(&ConnParam::default()).await?;
    let mut n = 0;
    loop {
        let wc = match ep.recv_comp().await {
            Ok(wc) if wc.status.is_success() => wc,
            // The client disconnected (or the receive was flushed): done.
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        };
        let msg = mr.read_vec(0..wc.byte_len as usize);
        ep.endpoint().post_recv(0, &sge)?;
        ep.endpoint()
            .post_send_inline(n, &msg, SendFlags::empty())?;
        ep.send_comp().await?;
        n += 1;
    }
    drop(ep);
    drop(mr);
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let ip = args.next().unwrap_or_else(|| "10.10.0.1".into());
    let port = args.next().unwrap_or_else(|| "7900".into());
    let addr: SocketAddr = format!("{ip}:{port}")
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{ip}:{port}: {e}")))?;
    let ch = AsyncEventChannel::new()?;
    let lis = ch.create_id(PortSpace::TCP)?;
    lis.bind(addr)?;
    lis.listen(0)?;
    println!("echo_server: listening on {addr}");
    loop {
        let (id, _req) = lis.get_request().await?;
        tokio::spawn(async move {
            match serve(id).await {
                Ok(n) => println!("echo_server: a connection ended after {n} messages"),
                Err(e) => eprintln!("echo_server: {e}"),
            }
        });
    }
}
