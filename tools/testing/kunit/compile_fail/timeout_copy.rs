// SPDX-License-Identifier: GPL-2.0

//! expect: E0599
//! message: no method named `copy_to_slice` found for struct `TimedOut`
//!
//! A block driver's timeout callback cannot read a request's data: blk-mq calls it while the
//! driver may be ending the request on another CPU, whose bios are then freed under the copy
//! (issue 42, item 9). The callback learns the request's tag, hardware queue, sector and
//! length, copied out, and finds its own reference to the request by them.

use kernel::block::mq::{self, Operations, TimeoutAction};
use kernel::prelude::*;
use kernel::types::ARef;

module! {
    type: Case,
    name: "timeout_copy",
    author: "rdma-rust developers",
    description: "must not compile",
    license: "GPL",
}

struct Case;

impl kernel::Module for Case {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        Ok(Case)
    }
}

#[allow(dead_code)]
struct Dev;

/// The driver's own reference to the request with `tag`, if it still holds it (this one
/// holds none): what the timeout callback may use.
#[allow(dead_code)]
fn own_request(_tag: u32) -> Option<ARef<mq::Request<Dev>>> {
    None
}

#[vtable]
impl Operations for Dev {
    type QueueData = ();

    fn queue_rq(_queue_data: (), rq: ARef<mq::Request<Self>>, _is_last: bool) -> Result {
        let _ = mq::Request::end_ok(rq);
        Ok(())
    }

    fn commit_rqs(_queue_data: ()) {}

    fn timeout(_queue_data: (), rq: mq::TimedOut) -> TimeoutAction {
        let mut data = [0u8; 512];
        // The request's segments, walked while their bios may be freed.
        // twin: let _ = own_request(rq.tag()).map(|rq| rq.copy_to_slice(&mut data));
        let _ = rq.copy_to_slice(&mut data);
        TimeoutAction::ResetTimer
    }
}
