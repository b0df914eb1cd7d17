// SPDX-License-Identifier: GPL-2.0

//! expect: E0308
//! message: expected mutable reference `&mut _`
//! message: found reference `&DmaBuf`
//!
//! A receive target must be lent to the request exclusively (`&mut`): a buffer shared through
//! an `Arc` could be read by its other holders while the device writes it.

use kernel::prelude::*;
use kernel::rdma::{
    cq::Wc,
    dma::DmaBuf,
    qp::{Qp, Rts},
    wr::{Completion, Wr},
};
// twin:
use kernel::sync::Arc;

module! {
    type: Case,
    name: "recv_shared",
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
    // twin: buf: DmaBuf,
    buf: Arc<DmaBuf>,
}

impl Completion for Rx {
    fn done(_wr: Wr<Self>, _wc: &Wc) {}
}

#[expect(dead_code)]
fn post(qp: &Qp<Rts>, rx: Rx) -> Result {
    qp.post_recv(Wr::new(rx, GFP_KERNEL)?, |r, ops| {
        // twin: ops.buf(&mut r.buf, 0..64)?;
        ops.buf(&*r.buf, 0..64)?;
        Ok(())
    })?;
    Ok(())
}
