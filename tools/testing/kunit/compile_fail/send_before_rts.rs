// SPDX-License-Identifier: GPL-2.0

//! expect: E0599
//! message: the method `post_send` exists for reference `&Qp<kernel::rdma::qp::Init>`, but its trait bounds were not satisfied
//!
//! A QP sends only once it is ready to send: a QP in Init (created, not yet connected) is not in
//! a `CanSend` state, so it has no `post_send`, and a request cannot reach a QP that would
//! reject it or send to nobody.

use kernel::prelude::*;
use kernel::rdma::{
    cq::Wc,
    dma::DmaBuf,
    // twin: qp::{Qp, Rts},
    qp::{Init, Qp},
    wr::{Completion, Wr},
};

module! {
    type: Case,
    name: "send_before_rts",
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

struct Tx {
    buf: DmaBuf,
}

impl Completion for Tx {
    fn done(_wr: Wr<Self>, _wc: &Wc) {}
}

#[expect(dead_code)]
// twin: fn post(qp: &Qp<Rts>, tx: Tx) -> Result {
fn post(qp: &Qp<Init>, tx: Tx) -> Result {
    qp.post_send(Wr::new(tx, GFP_KERNEL)?, |t, ops| {
        ops.send(&t.buf, 0..32)?;
        Ok(())
    })?;
    Ok(())
}
