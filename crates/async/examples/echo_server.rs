//! An async RDMA echo server: one task per connection, each echoing every message back.
//!
//! ```sh
//! cargo run -p rverbs-async --example echo_server -- 10.10.0.1 7900
//! cargo run -p rverbs-async --example echo_client -- 10.10.0.1 7900 1000
//! ```

mod common;

use std::io;

use common::MsgBuf;
use rverbs_async::{AsyncCmId, AsyncEndpoint, AsyncEventChannel};
use rverbs_cm::{ConnParam, PortSpace};
use rverbs_uverbs::SendFlags;

async fn serve(id: AsyncCmId) -> io::Result<u64> {
    let ep = AsyncEndpoint::create(id, &common::attr())?;
    let buf = MsgBuf::new(ep.endpoint())?;
    buf.post_recv(ep.endpoint())?;
    ep.accept(&ConnParam::default()).await?;
    let mut n = 0;
    loop {
        let wc = match ep.get_recv_comp().await {
            Ok(wc) if wc.status.is_success() => wc,
            // The client disconnected (or the receive was flushed): done.
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        };
        let msg = buf.read(wc.byte_len as usize);
        buf.post_recv(ep.endpoint())?;
        ep.endpoint()
            .post_send_inline(n, &msg, SendFlags::empty())?;
        ep.get_send_comp().await?;
        n += 1;
    }
    drop(ep);
    drop(buf);
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> io::Result<()> {
    let (addr, _) = common::addr_and_args(7900)?;
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
