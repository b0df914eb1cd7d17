// SPDX-License-Identifier: GPL-2.0

//! Multicast UD runs: `start cm=server|client mode=ud addr=LOCAL port=N mcast=GROUP`.
//!
//! Both roles bind their id to the local address (which names the device) and join the group
//! through it: on RoCE the CM also joins the IP group on the netdev, so that the device takes
//! the group's packets. The join event brings the group's GID, Q_Key and an address handle.
//! A server's QP is then attached to the group and receives what is sent to it, as a UD
//! server run; a client's sends go to the group (QP number `0xffffff`), as a UD client run.
//! Several servers, on one host or many, each receive every datagram. Leaving the group is
//! dropping the id (the run's link) and the QP, which detaches itself.

use super::*;
use kernel::rdma::qp::Qp;

/// Starts a multicast run: binds, joins the group, then starts a UD server or client run.
pub(super) fn start(
    spec: &Spec,
    run_id: u32,
    id: CmId<Ev>,
    waiter: &Arc<Waiter>,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    let group = spec.mcast.ok_or(EINVAL)?;
    let local = spec.addr;
    id.bind(local).inspect_err(|e| {
        pr_err!("start: cannot bind {local}: {e:?}\n");
    })?;
    let Some(dev) = id.device() else {
        pr_err!("start: {local} is not the address of an RDMA device\n");
        return Err(EINVAL);
    };
    check_ud_size(spec, &dev.query_port(id.port())?)?;
    let receiver = spec.role == Role::Server;
    let (caps, entries) = if receiver {
        let caps = QpCaps {
            send_depth: 1,
            recv_depth: spec.receives(),
            ..QpCaps::default()
        };
        (caps, spec.receives() + 8)
    } else {
        let caps = QpCaps {
            send_depth: spec.depth,
            recv_depth: 1,
            ..QpCaps::default()
        };
        (caps, spec.depth + 8)
    };
    let pd = Pd::new(&dev)?;
    let cq = spec.new_cq(&dev, entries)?;
    waiter.shared.lock().pd = Some(pd.clone());
    id.join_multicast(group)?;
    waiter
        .wait(Step::Joined, RESOLVE_MS + 1000)
        .inspect_err(|e| pr_err!("start: cannot join {group}: {e:?}\n"))?;
    let (ud, joined) = {
        let mut s = waiter.shared.lock();
        (s.ud.take(), s.group.take())
    };
    let (Some((ah, qpn, qkey)), Some((mgid, mlid))) = (ud, joined) else {
        return Err(EINVAL);
    };
    let qp = Qp::new(&pd, QpType::Ud, &cq, &cq, &caps)?
        .to_init_ud(id.port(), qkey)?
        .ready_ud()?;
    if receiver {
        qp.attach_mcast(&mgid, mlid)?;
    }
    waiter.shared.lock().link = Some(Link {
        id: Some(id),
        conn: None,
        sessions: KVec::new(),
    });
    let qp = Some(Arc::new(qp, GFP_KERNEL)?);
    let res = if receiver {
        Res {
            rx_qp: qp,
            attached: Some(waiter.clone()),
            ..Res::new(pd, cq)
        }
    } else {
        Res {
            tx_qp: qp,
            ah: Some(ah),
            ud_peer: Some((qpn, qkey)),
            attached: Some(waiter.clone()),
            ..Res::new(pd, cq)
        }
    };
    let run = Run::new(spec, run_id, None, res)?;
    waiter.shared.lock().run = Some(run.clone());
    if let Err(e) = attach(&dev, &run).and_then(|()| run.go()) {
        pr_err!("start: multicast run {run_id} on {group} failed: {e:?}\n");
        run.stop();
        run.finish();
        return Err(e);
    }
    pr_info!(
        "run {run_id}: {} multicast group {group} (GID {mgid}) from {local} ({})\n",
        if receiver {
            "receiving from"
        } else {
            "sending to"
        },
        dev.name()
    );
    Ok(run)
}
