// SPDX-License-Identifier: GPL-2.0

//! The server's side of a CM run: it binds and listens, and takes each connection request,
//! an RC one with its own QP and buffer (a [`Conn`] in a [`Session`]), a UD one (SIDR)
//! answered with the listener's QP.

use super::{ping::Conn, ping_caps, Ev, Link, Session, Show, Waiter, MAGIC, MAX_SESSIONS};
use crate::ctl::Spec;
use crate::run::{check_ud_size, Res, Run};
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, Request, UDP_QKEY},
    cq::Cq,
    defer::DropOutside,
    device::Device,
    pd::Pd,
    qp::{QpCaps, QpType},
};
use kernel::sync::Arc;

impl Ev {
    /// A connection request to a server run.
    pub(super) fn request(&self, req: Request<'_, Ev>) {
        let (run, pd, cq, ud_qpn) = {
            let s = self.waiter.shared.lock();
            match (&s.run, &s.pd, &s.cq) {
                (Some(r), Some(p), Some(c)) => (r.clone(), p.clone(), c.clone(), s.ud_qpn),
                _ => return,
            }
        };
        let peer = Show(req.peer_addr());
        if run.stopping() {
            return;
        }
        let pdata = req.private_data();
        if pdata.starts_with(MAGIC) && pdata.len() >= 8 {
            let mut b = [0u8; 4];
            b.copy_from_slice(&pdata[4..8]);
            let size = u32::from_le_bytes(b) as usize;
            if run.spec.mode == QpType::Rc && size > run.spec.size {
                pr_err!(
                    "run {}: {peer} wants {size}-byte buffers, over this server's {}: rejected\n",
                    run.id,
                    run.spec.size
                );
                let mut reply = [0u8; 8];
                reply[..4].copy_from_slice(MAGIC);
                reply[4..].copy_from_slice(&(run.spec.size as u32).to_le_bytes());
                let _ = req.reject(&reply);
                return;
            }
        }
        if run.spec.mode == QpType::Ud {
            // Answer with the listener's QP; the new id is not needed after the reply.
            let Ok(child) = req.take(Ev {
                waiter: self.waiter.clone(),
                conn: None,
            }) else {
                return;
            };
            let p = ConnParam {
                qp_num: ud_qpn,
                qkey: UDP_QKEY,
                ..ConnParam::default()
            };
            match child.accept(&p) {
                Ok(()) => pr_info!("run {}: UD peer {peer} answered with QP {ud_qpn}\n", run.id),
                Err(e) => pr_err!("run {}: SIDR reply to {peer} failed: {e:?}\n", run.id),
            }
            return;
        }
        let open = self
            .waiter
            .with_link(|l| l.sessions.len())
            .unwrap_or(MAX_SESSIONS);
        if open >= MAX_SESSIONS {
            pr_err!("run {}: {peer} refused: {open} connections open\n", run.id);
            return;
        }
        if let Err(e) = self.accept(req, &run, &pd, &cq) {
            pr_err!("run {}: connection from {peer} failed: {e:?}\n", run.id);
        }
    }

    fn accept(&self, req: Request<'_, Ev>, run: &Arc<Run>, pd: &Arc<Pd>, cq: &Arc<Cq>) -> Result {
        let peer = Show(req.peer_addr());
        // As many RDMA READs against this side as the peer will issue (a ping client: none).
        let depth = req.responder_resources().clamp(1, 16);
        let conn = Conn::new(run, true, run.spec.size)?;
        let id = req.take(Ev {
            waiter: self.waiter.clone(),
            conn: Some(conn.clone()),
        })?;
        let qp = id.create_qp(pd, cq, cq, &ping_caps())?;
        // From here a failure drops the session, which ends the connection from a work item.
        let session = DropOutside::new(Session {
            id,
            conn: conn.clone(),
        })?;
        let id = &session.id;
        conn.prepare(&qp, pd)?;
        id.accept(&ConnParam {
            responder_resources: depth,
            initiator_depth: 1,
            ..ConnParam::default()
        })?;
        conn.begin(qp.established()?, cq)?;
        // The run ended meanwhile, or no memory: the session is dropped, which ends the
        // connection.
        match self
            .waiter
            .with_link(|l| l.sessions.push(session, GFP_KERNEL))
        {
            Some(Ok(())) => {
                pr_info!("run {}: connection from {peer}\n", run.id);
                Ok(())
            }
            Some(Err(e)) => Err(e.into()),
            None => Err(ESHUTDOWN),
        }
    }
}

pub(super) fn server(
    spec: &Spec,
    run_id: u32,
    id: CmId<Ev>,
    waiter: &Arc<Waiter>,
    attach: &dyn Fn(&Device, &Arc<Run>) -> Result,
) -> Result<Arc<Run>> {
    id.bind(spec.addr).inspect_err(|e| {
        pr_err!("start: cannot bind {}: {e:?}\n", spec.addr);
    })?;
    let Some(dev) = id.device() else {
        pr_err!(
            "start: {} is not the address of an RDMA device\n",
            spec.addr
        );
        return Err(EINVAL);
    };
    let pd = Pd::new(&dev)?;
    let cq_entries = match spec.mode {
        QpType::Rc => MAX_SESSIONS as u32 * 16,
        QpType::Ud => spec.receives() + 8,
    };
    let cq = spec.new_cq(&dev, cq_entries)?;
    let mut r = Res::new(pd.clone(), cq.clone());
    let mut ud_qpn = 0;
    if spec.mode == QpType::Ud {
        check_ud_size(spec, &dev.query_port(id.port())?)?;
        let caps = QpCaps {
            send_depth: 1,
            recv_depth: spec.receives(),
            ..QpCaps::default()
        };
        let qp = id.create_qp(&pd, &cq, &cq, &caps)?.established()?;
        ud_qpn = qp.qpn();
        r.rx_qp = Some(Arc::new(qp, GFP_KERNEL)?);
    }
    waiter.shared.lock().link = Some(Link {
        id: Some(id),
        conn: None,
        sessions: KVec::new(),
    });
    r.attached = Some(waiter.clone());
    let run = Run::new(spec, run_id, None, r)?;
    {
        let mut s = waiter.shared.lock();
        s.run = Some(run.clone());
        s.pd = Some(pd);
        s.cq = Some(cq);
        s.ud_qpn = ud_qpn;
    }
    let started = attach(&dev, &run).and_then(|()| run.go()).and_then(|()| {
        waiter
            .with_link(|l| l.id.as_ref().map_or(Err(EINVAL), |id| id.listen(16)))
            .unwrap_or(Err(ESHUTDOWN))
    });
    if let Err(e) = started {
        pr_err!(
            "start: server run {run_id} on {} failed: {e:?}\n",
            spec.addr
        );
        run.stop();
        run.finish();
        return Err(e);
    }
    pr_info!(
        "run {run_id}: listening on {} ({})\n",
        spec.addr,
        dev.name()
    );
    Ok(run)
}
