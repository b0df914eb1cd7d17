// SPDX-License-Identifier: GPL-2.0

//! Fabrics Connect: the first command of every queue. An admin queue's makes a controller
//! (its subsystem and host checked against the port and the subsystem's allowed hosts); an
//! I/O queue's joins the controller it names. An invalid field's offset goes back in the
//! completion, as the specification's Invalid Parameter status wants.

use super::{now_ms, Ctrl, QueueLink, Regs, Reply, Target, MAX_CTRLS};
use crate::config::PortConf;
use crate::proto::{
    Connect, Sqe, Status, Text, ADMIN_DEPTH, CONNECT_DATA_LEN, DISCOVERY_NQN, FABRICS,
    FCTYPE_CONNECT, MAX_IO_QUEUES,
};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU16, AtomicU32, Ordering};
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::{new_mutex, new_spinlock};

/// A Connect's invalid parameter: the status and the offset of the field at fault (in the
/// command, or in the data with bit 16 set), as the result says.
fn invalid(status: Status, attr: u64) -> (Reply, Option<Arc<Ctrl>>) {
    (
        Reply {
            status,
            result: attr,
        },
        None,
    )
}

/// Offsets of Connect fields, for the completion of an invalid one.
const IPO_QID: u64 = 42;
const IPO_SQSIZE: u64 = 44;
const IPO_DATA: u64 = 1 << 16;
const IPO_CNTLID: u64 = IPO_DATA | 16;
const IPO_SUBNQN: u64 = IPO_DATA | 256;
const IPO_HOSTNQN: u64 = IPO_DATA | 512;

impl Target {
    /// A Connect, the first command of a queue: `qid` and `depth` are the queue's (from its
    /// connection request), `port` the port it came through, `data` the Connect's data. The
    /// reply carries the controller ID; with it, the controller the queue now belongs to.
    pub(crate) fn connect(
        &self,
        port: &Arc<PortConf>,
        qid: u16,
        depth: u16,
        sqe: &Sqe,
        data: &[u8],
        link: Arc<dyn QueueLink>,
    ) -> (Reply, Option<Arc<Ctrl>>) {
        if sqe.opcode != FABRICS || sqe.fctype() != FCTYPE_CONNECT {
            // Anything before a Connect is out of sequence.
            return (Status::CMD_SEQ_ERROR.into(), None);
        }
        if data.len() != CONNECT_DATA_LEN {
            return (Status::SGL_INVALID_DATA.into(), None);
        }
        let c = match Connect::decode(sqe, data) {
            Ok(c) => c,
            Err(s) => return invalid(s, IPO_SUBNQN),
        };
        // The capsule must name the queue the connection request did, at no more entries.
        if c.qid != qid {
            pr_err!(
                "Connect for queue {} on the connection of queue {qid}: refused\n",
                c.qid
            );
            return invalid(Status::CONNECT_INVALID_PARAM, IPO_QID);
        }
        if c.sqsize == 0 || u32::from(c.sqsize) + 1 > u32::from(depth) {
            pr_err!(
                "Connect for queue {qid} with sqsize {} (the connection has {depth} entries): refused\n",
                c.sqsize
            );
            return invalid(Status::CONNECT_INVALID_PARAM, IPO_SQSIZE);
        }
        if qid == 0 {
            self.connect_admin(port, depth, &c, link)
        } else {
            self.connect_io(qid, &c, link)
        }
    }

    fn connect_admin(
        &self,
        port: &Arc<PortConf>,
        depth: u16,
        c: &Connect<'_>,
        link: Arc<dyn QueueLink>,
    ) -> (Reply, Option<Arc<Ctrl>>) {
        if c.cntlid != 0xffff {
            pr_err!(
                "admin Connect of {} for controller {:#x}: only dynamic controllers (0xffff) are served\n",
                Text(c.hostnqn),
                c.cntlid
            );
            return invalid(Status::CONNECT_INVALID_PARAM, IPO_CNTLID);
        }
        if depth > ADMIN_DEPTH {
            return invalid(Status::CONNECT_INVALID_PARAM, IPO_SQSIZE);
        }
        let subsys = if c.subnqn == DISCOVERY_NQN {
            None
        } else {
            match port.subsystem(c.subnqn) {
                Some(s) => Some(s),
                None => {
                    pr_err!(
                        "Connect of {} to subsystem {}: no such subsystem on port {}\n",
                        Text(c.hostnqn),
                        Text(c.subnqn),
                        port.id
                    );
                    return invalid(Status::CONNECT_INVALID_PARAM, IPO_SUBNQN);
                }
            }
        };
        if let Some(s) = &subsys {
            if !s.allows(c.hostnqn) {
                pr_err!(
                    "Connect of {} to subsystem {}: the host is not allowed\n",
                    Text(c.hostnqn),
                    Text(c.subnqn)
                );
                return invalid(Status::CONNECT_INVALID_HOST, IPO_HOSTNQN);
            }
        }
        let mut hostnqn = KVec::new();
        if hostnqn.extend_from_slice(c.hostnqn, GFP_KERNEL).is_err() {
            return (Status::INTERNAL.into(), None);
        }
        let mut ctrls = self.ctrls.lock();
        if ctrls.len() >= MAX_CTRLS {
            pr_err!(
                "Connect of {}: the target serves {MAX_CTRLS} controllers already\n",
                Text(c.hostnqn)
            );
            return (Status::CONNECT_CTRL_BUSY.into(), None);
        }
        let Some(cntlid) = self.cntlid(&ctrls) else {
            return (Status::CONNECT_CTRL_BUSY.into(), None);
        };
        let ctrl = Arc::pin_init(
            pin_init!(Ctrl {
                cntlid,
                subsys,
                port: port.clone(),
                hostnqn,
                hostid: c.hostid,
                kato_ms: AtomicU32::new(c.kato),
                last_ka: AtomicI64::new(now_ms()),
                regs <- new_spinlock!(Regs::default(), "rdma_rust_nvmet_regs"),
                granted: AtomicU16::new(0),
                async_cfg: AtomicU32::new(0),
                events <- new_spinlock!(Default::default(), "rdma_rust_nvmet_events"),
                queues <- new_mutex!(KVec::new(), "rdma_rust_nvmet_queues"),
                dead: AtomicBool::new(false),
            }),
            GFP_KERNEL,
        );
        let Ok(ctrl) = ctrl else {
            return (Status::INTERNAL.into(), None);
        };
        if ctrls.push(ctrl.clone(), GFP_KERNEL).is_err() {
            return (Status::INTERNAL.into(), None);
        }
        drop(ctrls);
        if let Err(s) = ctrl.attach(0, link) {
            self.forget(&ctrl);
            return (s.into(), None);
        }
        pr_info!(
            "controller {cntlid}: {} connected to {} through port {} (keep-alive {} ms)\n",
            Text(c.hostnqn),
            Text(c.subnqn),
            port.id,
            c.kato
        );
        (
            Reply {
                status: Status::SUCCESS,
                result: u64::from(cntlid),
            },
            Some(ctrl),
        )
    }

    fn connect_io(
        &self,
        qid: u16,
        c: &Connect<'_>,
        link: Arc<dyn QueueLink>,
    ) -> (Reply, Option<Arc<Ctrl>>) {
        let ctrl = self
            .ctrls
            .lock()
            .iter()
            .find(|x| x.cntlid == c.cntlid)
            .cloned();
        let Some(ctrl) = ctrl.filter(|x| {
            x.hostnqn.as_slice() == c.hostnqn
                && x.hostid == c.hostid
                && x.subsys.as_ref().is_some_and(|s| s.nqn() == c.subnqn)
        }) else {
            pr_err!(
                "I/O queue {qid} Connect of {} for controller {} of {}: no such controller of that host\n",
                Text(c.hostnqn),
                c.cntlid,
                Text(c.subnqn)
            );
            return invalid(Status::CONNECT_INVALID_PARAM, IPO_CNTLID);
        };
        if !ctrl.ready() {
            pr_err!(
                "I/O queue {qid} Connect for controller {}: the controller is not enabled\n",
                ctrl.cntlid
            );
            return (Status::CMD_SEQ_ERROR.into(), None);
        }
        let granted = match ctrl.granted.load(Ordering::Acquire) {
            0 => MAX_IO_QUEUES,
            g => g,
        };
        if qid > granted {
            pr_err!(
                "I/O queue {qid} Connect for controller {}: {granted} queues granted\n",
                ctrl.cntlid
            );
            return invalid(Status::CONNECT_INVALID_PARAM, IPO_QID);
        }
        if let Err(s) = ctrl.attach(qid, link) {
            pr_err!(
                "I/O queue {qid} Connect for controller {}: the queue exists\n",
                ctrl.cntlid
            );
            return (s.into(), None);
        }
        (
            Reply {
                status: Status::SUCCESS,
                result: u64::from(ctrl.cntlid),
            },
            Some(ctrl),
        )
    }
}
