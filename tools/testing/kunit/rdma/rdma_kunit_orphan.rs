// SPDX-License-Identifier: GPL-2.0

//! A module that leaves an RDMA request behind when it loads: the check that unloading a
//! module waits until none of its RDMA callbacks can run (`kernel::rdma::owner`).
//!
//! When it loads, it connects an RC QP on `rxe0` to a QP number nobody has, and posts a SEND
//! that owns the last references to the QP, its CQ and its PD, then keeps nothing. The SEND is
//! retried for a few seconds and fails with "retry exceeded"; its handler, this module's code,
//! logs that and drops everything. `rmmod` right after loading must wait for that: were the
//! module freed at once, the completion would call into freed memory.

use kernel::prelude::*;
use kernel::rdma::{
    cq::{Cq, PollContext, Wc},
    device::Device,
    dma::DmaBuf,
    mr::Access,
    pd::Pd,
    qp::{Endpoint, Qp, QpCaps, QpType, RcParams, Rts},
    wr::{Completion, Wr},
};
use kernel::{c_str, sync::Arc};

module! {
    type: Orphan,
    name: "rdma_kunit_orphan",
    author: "rdma-rust developers",
    description: "Leaves an RDMA request behind, for the module-unload check",
    license: "GPL",
}

/// The request: it owns the QP (and through it the CQ and PD) until its handler runs.
struct Lost {
    buf: DmaBuf,
    _qp: Arc<Qp<Rts>>,
}

impl Completion for Lost {
    fn done(wr: Wr<Self>, wc: &Wc) {
        pr_info!("the orphaned SEND came back: {:?}\n", wc.status());
        // The last references go here, in softirq context.
        drop(wr);
    }
}

struct Orphan;

impl kernel::Module for Orphan {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let dev = Device::get_by_name(c_str!("rxe0")).ok_or(ENODEV)?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 64, 0, PollContext::Softirq)?;
        let qp =
            Qp::new(&pd, QpType::Rc, &cq, &cq, &QpCaps::default())?.to_init(1, Access::NONE)?;
        let me = qp.endpoint()?;
        // Nobody has this QP number: the SEND is retried, unanswered, then fails.
        let nobody = Endpoint {
            qpn: me.qpn ^ 0x80_0000,
            ..me
        };
        // About half a second per try (4.096 us * 2^17), 6 retries (rxe retries for ever with
        // 7, the "infinite" of RNR retries).
        let params = RcParams {
            timeout: 17,
            retry_cnt: 6,
            ..RcParams::default()
        };
        let qp = Arc::new(qp.connect(&nobody, &params)?, GFP_KERNEL)?;
        let lost = Lost {
            buf: DmaBuf::new(&pd, 64, GFP_KERNEL)?,
            _qp: qp.clone(),
        };
        qp.post_send(Wr::new(lost, GFP_KERNEL)?, |l, ops| {
            ops.send(&l.buf, 0..64)?;
            Ok(())
        })?;
        pr_info!("QP {} left with a SEND to QP {}\n", qp.qpn(), nobody.qpn);
        Ok(Orphan)
    }
}
