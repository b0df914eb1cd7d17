// SPDX-License-Identifier: GPL-2.0

//! expect: E0499
//! message: cannot borrow `r.buf` as mutable more than once at a time
//!
//! One buffer cannot be named twice as a receive target: two pieces of one message (or two
//! requests) would land in the same memory.

use kernel::prelude::*;
use kernel::rdma::{
    cq::Wc,
    dma::DmaBuf,
    qp::{Qp, Rts},
    wr::{Completion, Wr},
};

module! {
    type: Case,
    name: "recv_twice",
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

struct Rx {
    // twin: buf: DmaBuf, tail: DmaBuf,
    buf: DmaBuf,
}

impl Completion for Rx {
    fn done(_wr: Wr<Self>, _wc: &Wc) {}
}

#[expect(dead_code)]
fn post(qp: &Qp<Rts>, rx: Rx) -> Result {
    qp.post_recv(Wr::new(rx, GFP_KERNEL)?, |r, ops| {
        // twin: ops.buf(&mut r.buf, 0..32)?.buf(&mut r.tail, 0..32)?;
        ops.buf(&mut r.buf, 0..32)?.buf(&mut r.buf, 32..64)?;
        Ok(())
    })?;
    Ok(())
}
