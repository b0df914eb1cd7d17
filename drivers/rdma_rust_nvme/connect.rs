// SPDX-License-Identifier: GPL-2.0

//! Connecting a queue: an rdma_cm id, its address and route resolved, a QP, and the
//! connection request whose private data names the queue and its sizes (NVMe/RDMA's
//! `nvme_rdma_cm_req`). The id's handler (`queue/cm.rs`) follows the connection and fails
//! the queue when it ends.

use crate::proto::cm_request;
use crate::queue::{Health, Queue, Step, Waiter, MAX_IO};
use kernel::page::PAGE_SIZE;
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, PortSpace, SockAddr},
    cq::{Cq, PollContext},
    dma::MAX_SGE,
    pd::Pd,
    qp::QpCaps,
};
use kernel::sync::Arc;

/// How long address and route resolution may take.
const RESOLVE_MS: u32 = 2000;
/// How long a connection may take to be established (or refused).
const CONNECT_MS: u32 = 10_000;

/// What a queue is connected with.
pub(crate) struct QueueSpec {
    pub(crate) addr: SockAddr,
    pub(crate) qid: u16,
    /// Entries: commands out at once.
    pub(crate) depth: u16,
    /// In-capsule data a write may carry (0: none, the admin queue).
    pub(crate) in_capsule: u32,
    /// The controller's state, which a failure of the queue changes.
    pub(crate) health: Arc<Health>,
}

/// Connects one queue (process context); nothing is left behind on failure.
pub(crate) fn connect_queue(spec: &QueueSpec) -> Result<Arc<Queue>> {
    let (waiter, ev) = Waiter::new()?;
    let id = CmId::new(PortSpace::Tcp, ev)?;
    let why = |what: &'static str| {
        move |e: &Error| pr_err!("connect {} queue {}: {what}: {e:?}\n", spec.addr, spec.qid)
    };
    id.resolve_addr(None, spec.addr, RESOLVE_MS)
        .inspect_err(why("cannot resolve the address"))?;
    waiter
        .wait(Step::AddrResolved, RESOLVE_MS + 1000)
        .inspect_err(why("cannot resolve the address"))?;
    id.resolve_route(RESOLVE_MS).inspect_err(why("no route"))?;
    waiter
        .wait(Step::RouteResolved, RESOLVE_MS + 1000)
        .inspect_err(why("no route"))?;
    let dev = id.device().ok_or(ENODEV)?;
    let depth = u32::from(spec.depth);
    let pd = Pd::new(&dev).inspect_err(why("no PD"))?;
    // Completions in the core's high-priority completion workqueue, not in softirq as
    // nvme-rdma's: soft-RoCE raises CQ events from its kworkers, and softirq work raised
    // there waits for ksoftirqd behind them (the retired rdma_rust_blk's finding). Against the stock
    // host (release kernel, same boot) depth-1 4 KiB I/O measured 1.12-1.16x with the
    // workqueue, 1.01-1.15x with softirq (Documentation/bench.rst). Nothing in the
    // handlers sleeps, so either works.
    let cq = Cq::new(
        &dev,
        // Per command: its SEND (with its REG_MR) or its LOCAL_INV, and its completion: the
        // QP's two queues.
        3 * depth + 8,
        u32::from(spec.qid) % dev.num_comp_vectors().max(1),
        PollContext::Workqueue,
    )
    .inspect_err(why("no CQ"))?;
    let send_sge = dev.attrs().max_send_sge().clamp(1, MAX_SGE as u32);
    let caps = QpCaps {
        // A REG_MR and a SEND per command, or (after its completion) a LOCAL_INV.
        send_depth: 2 * depth + 1,
        recv_depth: depth + 1,
        send_sge,
        ..QpCaps::default()
    };
    let qp = id
        .create_qp(&pd, &cq, &cq, &caps)
        .inspect_err(why("no QP"))?;
    // The target RDMA READs a write's data from us: as many as the device allows.
    let reads = dev.attrs().max_qp_rd_atom().min(255) as u8;
    let private = cm_request(spec.qid, spec.depth, spec.depth - 1);
    id.connect(&ConnParam {
        private_data: &private,
        responder_resources: reads,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    })
    .inspect_err(why("cannot send the connection request"))?;
    waiter
        .wait(Step::Established, CONNECT_MS + 1000)
        .inspect_err(why("cannot connect"))?;
    let qp = Arc::new(qp.established()?, GFP_KERNEL)?;
    let lend_max = if spec.in_capsule > 0 {
        (send_sge as usize - 1).min(MAX_IO as usize / PAGE_SIZE)
    } else {
        0
    };
    let q = Arc::pin_init(
        Queue::new(
            spec.qid,
            qp,
            spec.depth,
            spec.in_capsule,
            lend_max,
            spec.health.clone(),
        ),
        GFP_KERNEL,
    )?;
    if let Err(e) = q.fill(id, &pd) {
        q.close();
        return Err(e);
    }
    waiter.set_queue(q.clone());
    Ok(q)
}
