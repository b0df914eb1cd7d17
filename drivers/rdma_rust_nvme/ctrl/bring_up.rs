// SPDX-License-Identifier: GPL-2.0

//! Bringing a controller up on its queues, as the kernel's host does: Fabrics Connect on the
//! admin queue, CC.EN and CSTS.RDY, Identify Controller, Set Features Number of Queues, then
//! each I/O queue and its Connect; and the namespace scan. The first connect and every
//! reconnect go through here.

use crate::connect::{connect_queue, QueueSpec};
use crate::options::Options;
use crate::proto::{
    connect_data, le32, reg, Command, Cqe, IdCtrl, Text, ADMIN_DEPTH, CNS_ACTIVE_NS, CNS_CTRL,
    IDENTIFY_LEN,
};
use crate::queue::{Data, Health, Queue};
use kernel::prelude::*;
use kernel::rdma::sync::msleep;
use kernel::sync::Arc;

/// How long an admin command may take.
pub(crate) const ADMIN_TIMEOUT_MS: u32 = 10_000;
/// Namespaces served at most.
const MAX_NAMESPACES: usize = 64;
/// CC: enable, IOSQES 6 (64-byte commands), IOCQES 4 (16-byte completions), NVM command set,
/// 4 KiB pages, round robin; and the shutdown notification.
pub(crate) const CC_EN: u32 = 1;
pub(crate) const CC_QES: u32 = (6 << 16) | (4 << 20);
pub(crate) const CC_SHN_NORMAL: u32 = 1 << 14;
/// CSTS: ready, fatal status, shutdown status complete.
const CSTS_RDY: u32 = 1;
const CSTS_CFS: u32 = 1 << 1;
pub(crate) const CSTS_SHST_MASK: u32 = 3 << 2;
pub(crate) const CSTS_SHST_CMPLT: u32 = 2 << 2;

/// `cmd` on `q`, which must succeed: `EIO` with a message naming `what` when its status is
/// not success.
pub(crate) fn must(q: &Queue, cmd: Command, data: Data<'_>, what: &str) -> Result<Cqe> {
    let cqe = q
        .command(cmd, data, ADMIN_TIMEOUT_MS)
        .inspect_err(|e| pr_err!("{what}: {e:?}\n"))?;
    if !cqe.is_ok() {
        pr_err!("{what}: the target answered status {:#x}\n", cqe.status);
        return Err(EIO);
    }
    Ok(cqe)
}

/// Reads register `offset` (Property Get).
pub(crate) fn get_reg(q: &Queue, offset: u32, wide: bool, what: &str) -> Result<u64> {
    Ok(must(q, Command::prop_get(offset, wide), Data::None, what)?.result)
}

/// Connects queue `q` to controller `cntlid` (0xffff on the admin queue: any) with Fabrics
/// Connect; the controller's ID.
fn fabrics_connect(
    q: &Queue,
    opts: &Options,
    cntlid: u16,
    sqsize: u16,
    kato_ms: u32,
) -> Result<u16> {
    let data = connect_data(&opts.hostid, cntlid, &opts.subnqn, &opts.hostnqn);
    let cqe = q
        .command(
            Command::connect(q.qid(), sqsize, kato_ms),
            Data::ToTarget(&data),
            ADMIN_TIMEOUT_MS,
        )
        .inspect_err(|e| pr_err!("queue {}: Connect: {e:?}\n", q.qid()))?;
    if !cqe.is_ok() {
        pr_err!(
            "queue {}: the target refused Connect to {} as {}: status {:#x}\n",
            q.qid(),
            Text(&opts.subnqn),
            Text(&opts.hostnqn),
            cqe.status
        );
        return Err(ECONNREFUSED);
    }
    Ok(cqe.result as u16)
}

/// What an admin queue's bring-up found.
pub(crate) struct Admin {
    pub(crate) queue: Arc<Queue>,
    pub(crate) cntlid: u16,
    pub(crate) id: IdCtrl,
    /// I/O queues the target granted.
    pub(crate) granted: u16,
    /// Entries an I/O queue may have (CAP.MQES + 1).
    pub(crate) mqes: u16,
}

/// Connects the admin queue of the controller `opts` names and brings the controller up,
/// asking `nr_io` I/O queues. Process context; nothing is left behind on failure.
pub(crate) fn admin(opts: &Options, nr_io: u16, health: &Arc<Health>) -> Result<Admin> {
    let queue = connect_queue(&QueueSpec {
        addr: opts.addr,
        qid: 0,
        depth: ADMIN_DEPTH,
        in_capsule: 0,
        health: health.clone(),
    })?;
    admin_on(&queue, opts, nr_io)
        .map(|(cntlid, id, granted, mqes)| Admin {
            queue: queue.clone(),
            cntlid,
            id,
            granted,
            mqes,
        })
        .inspect_err(|_| queue.close())
}

/// [`admin`] on its connected queue.
fn admin_on(admin: &Queue, opts: &Options, nr_io: u16) -> Result<(u16, IdCtrl, u16, u16)> {
    let cntlid = fabrics_connect(admin, opts, 0xffff, ADMIN_DEPTH - 1, opts.kato * 1000)?;
    let cap = get_reg(admin, reg::CAP, true, "Property Get CAP")?;
    let mqes = ((cap & 0xffff) as u16).saturating_add(1);
    let cap_to_ms = (((cap >> 24) & 0xff) as u32 * 500).clamp(500, 30_000);
    must(
        admin,
        Command::prop_set(reg::CC, CC_QES | CC_EN),
        Data::None,
        "Property Set CC.EN",
    )?;
    let mut waited = 0;
    loop {
        let csts = get_reg(admin, reg::CSTS, false, "Property Get CSTS")? as u32;
        if csts & CSTS_CFS != 0 {
            pr_err!("the controller reports a fatal status (CSTS.CFS)\n");
            return Err(EIO);
        }
        if csts & CSTS_RDY != 0 {
            break;
        }
        if waited >= cap_to_ms {
            pr_err!("the controller is not ready after {cap_to_ms} ms (CSTS.RDY 0)\n");
            return Err(ETIMEDOUT);
        }
        msleep(100);
        waited += 100;
    }
    let mut buf = KVec::from_elem(0u8, IDENTIFY_LEN, GFP_KERNEL)?;
    must(
        admin,
        Command::identify(CNS_CTRL, 0),
        Data::FromTarget(&mut buf),
        "Identify Controller",
    )?;
    let id = IdCtrl::decode(&buf)
        .inspect_err(|why| pr_err!("{}: Identify Controller: {why}\n", Text(&opts.subnqn)))
        .map_err(|_| EPROTO)?;
    if id.cntlid != cntlid {
        pr_err!(
            "Identify Controller names controller {}, Connect {}\n",
            id.cntlid,
            cntlid
        );
        return Err(EPROTO);
    }
    let cqe = must(
        admin,
        Command::set_queues(nr_io),
        Data::None,
        "Set Features Number of Queues",
    )?;
    // Both counts are 0-based.
    let granted = ((cqe.result & 0xffff) as u16)
        .min((cqe.result >> 16) as u16)
        .saturating_add(1);
    Ok((cntlid, id, granted, mqes))
}

/// Connects I/O queues 1 to `n` of controller `cntlid`, `depth` entries each. Process
/// context; nothing is left behind on failure.
pub(crate) fn io_queues(
    opts: &Options,
    a: &Admin,
    n: u16,
    depth: u16,
    health: &Arc<Health>,
) -> Result<KVec<Arc<Queue>>> {
    let mut queues = KVec::with_capacity(usize::from(n), GFP_KERNEL)?;
    let mut made = || -> Result {
        for qid in 1..=n {
            let q = connect_queue(&QueueSpec {
                addr: opts.addr,
                qid,
                depth,
                in_capsule: a.id.in_capsule,
                health: health.clone(),
            })?;
            if queues.push(q.clone(), GFP_KERNEL).is_err() {
                q.close();
                return Err(ENOMEM);
            }
            fabrics_connect(&q, opts, a.cntlid, depth - 1, 0)?;
        }
        Ok(())
    };
    match made() {
        Ok(()) => Ok(queues),
        Err(e) => {
            for q in queues.iter() {
                q.close();
            }
            Err(e)
        }
    }
}

/// The active namespaces: Identify's active namespace list, or (a target that has none)
/// every number up to NN.
pub(crate) fn scan(admin: &Queue, id: &IdCtrl) -> Result<KVec<u32>> {
    let mut buf = KVec::from_elem(0u8, IDENTIFY_LEN, GFP_KERNEL)?;
    let mut nsids = KVec::new();
    let listed = admin.command(
        Command::identify(CNS_ACTIVE_NS, 0),
        Data::FromTarget(&mut buf),
        ADMIN_TIMEOUT_MS,
    )?;
    if listed.is_ok() {
        let mut last = 0;
        for i in 0..IDENTIFY_LEN / 4 {
            let nsid = le32(&buf, 4 * i);
            // The list is ascending and ends at the first 0.
            if nsid == 0 || nsid <= last {
                break;
            }
            last = nsid;
            nsids.push(nsid, GFP_KERNEL)?;
            if nsids.len() == MAX_NAMESPACES {
                break;
            }
        }
    } else {
        for nsid in 1..=id.nn.min(MAX_NAMESPACES as u32) {
            nsids.push(nsid, GFP_KERNEL)?;
        }
    }
    Ok(nsids)
}
