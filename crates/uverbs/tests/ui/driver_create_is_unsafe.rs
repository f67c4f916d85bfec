// The driver seam maps what a create response names (rxe mmaps the command fd at the offset
// and size it gives), so safe code that reaches a context's driver cannot call into it with a
// callback of its own choosing: the create methods (and a CQ's resize) are `unsafe fn`s whose
// contract is "issue the genuine kernel command on the context's command fd".
use std::os::fd::AsFd;

use rverbs_uverbs::ah::AhAttr;
use rverbs_uverbs::context::Context;
use rverbs_uverbs::driver::{CqCreated, CreateFn};

fn demo(ctx: &Context, file: &std::fs::File) {
    let driver = ctx.driver().unwrap();
    let create: &mut CreateFn<'_, CqCreated> = &mut |_req, resp| {
        // A made-up response: "map this file at offset 0".
        resp.fill(0);
        Ok(CqCreated { handle: 1, cqe: 1 })
    };
    let _ = driver.create_cq(file.as_fd(), 1, create);
    let _ = driver.create_ah(&AhAttr::default(), &mut |_, _| Ok(0));
}

fn main() {
    let _ = demo;
}
