//! The client of `echo_server`: sends N messages one after the other, checks every echo.
//!
//! ```sh
//! cargo run -p rverbs-async --example echo_client -- 10.10.0.1 7900 1000
//! ```

mod common;

use std::io;
use std::time::Instant;

use common::MSG;
use rverbs_uverbs::SendFlags;

#[tokio::main(flavor = "current_thread")]
async fn main() -> io::Result<()> {
    let (dst, rest) = common::addr_and_args(7900)?;
    let n: u32 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let (ep, buf) = common::connect(dst).await?;
    let t0 = Instant::now();
    for i in 0..n {
        let msg: Vec<u8> = (0..MSG).map(|b| (i as usize + b) as u8).collect();
        ep.endpoint()
            .post_send_inline(u64::from(i), &msg, SendFlags::empty())?;
        ep.get_send_comp().await?;
        let wc = ep.get_recv_comp().await?;
        if !wc.status.is_success() || buf.read(MSG) != msg {
            return Err(io::Error::other(format!(
                "message {i} came back wrong: {wc:?}"
            )));
        }
        buf.post_recv(ep.endpoint())?;
    }
    let dt = t0.elapsed();
    println!(
        "echo_client: {n} messages of {MSG} bytes echoed in {dt:?} ({:.1} us per round trip)",
        dt.as_secs_f64() * 1e6 / f64::from(n.max(1))
    );
    ep.disconnect().await?;
    drop(ep);
    drop(buf);
    Ok(())
}
