// SPDX-License-Identifier: GPL-2.0

//! expect: E0277
//! message: the trait bound `ToDevice: DeviceWrites` is not satisfied
//! message: required for `DmaBuf<ToDevice>` to implement `Scatter`
//!
//! Memory mapped for the device to read only (`ToDevice`) cannot be the target of an RDMA
//! READ, which the device writes.

use kernel::prelude::*;
use kernel::rdma::{
    cq::Wc,
    // twin: dma::{DmaBuf, FromDevice},
    dma::{DmaBuf, ToDevice},
    mr::Remote,
    qp::{Qp, Rts},
    wr::{Completion, Wr},
};

module! {
    type: Case,
    name: "read_into_to_device",
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

struct Rd {
    // twin: buf: DmaBuf<FromDevice>,
    buf: DmaBuf<ToDevice>,
}

impl Completion for Rd {
    fn done(_wr: Wr<Self>, _wc: &Wc) {}
}

#[expect(dead_code)]
fn post(qp: &Qp<Rts>, rd: Rd, from: Remote) -> Result {
    qp.post_send(Wr::new(rd, GFP_KERNEL)?, |r, ops| {
        ops.read(&mut r.buf, 0..64, from)?;
        Ok(())
    })?;
    Ok(())
}
