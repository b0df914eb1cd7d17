// SPDX-License-Identifier: GPL-2.0

//! One RC connection of a hostile host to the target: rdma_cm, a QP with receives posted for
//! completions, and the capsules it sends.

use super::wire::{
    pattern, CmSpec, Cmd, ConnectSpec, CID_CONNECT, CID_ENABLE, CONNECT_MS, DATA_LEN, HOSTID,
    PD_MAX, POST_MS, RECVS, RECV_LEN, RESOLVE_MS, SEEN_MAX, WAIT_MS,
};
use crate::ctrl::now_ms;
use crate::proto::{
    le16, le64, put, put16, Text, CONNECT_DATA_LEN, FABRICS, FCTYPE_CONNECT, FCTYPE_PROP_SET,
    SQE_LEN,
};
use kernel::new_spinlock_bh;
use kernel::prelude::*;
use kernel::rdma::{
    cm::{CmId, ConnParam, Event, Handler, Id, PortSpace, SockAddr},
    cq::{Cq, Invalidation, PollContext, Wc, WcOpcode},
    dma::{DmaBuf, FromDevice, ToDevice},
    mr::{Access, Mr, Region, Remote},
    pd::Pd,
    qp::{Qp, QpCaps, Rts},
    sync::{Completion as Signal, SpinLockBh},
    wr::{Completion, Waited, Wr},
};
use kernel::sync::Arc;

/// What the CM said of a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Idle,
    Addr,
    Route,
    Up,
    Refused { status: u16, reason: i32 },
    Failed,
}

/// A completion the target sent.
pub(super) struct Seen {
    pub(super) cid: u16,
    pub(super) status: u16,
    pub(super) result: u64,
    pub(super) sqhd: u16,
    pub(super) len: usize,
    pub(super) inv: Option<Invalidation>,
}

pub(super) struct Inner {
    step: Step,
    ended: bool,
    seen: KVec<Seen>,
}

/// What the CM handler and the receives tell the probe.
#[pin_data]
pub(super) struct Shared {
    #[pin]
    inner: SpinLockBh<Inner>,
    #[pin]
    sig: Signal,
}

impl Shared {
    fn new() -> Result<Arc<Self>> {
        let seen = KVec::with_capacity(SEEN_MAX, GFP_KERNEL)?;
        Arc::pin_init(
            pin_init!(Shared {
                inner <- new_spinlock_bh!(
                    Inner {
                        step: Step::Idle,
                        ended: false,
                        seen,
                    },
                    "rdma_rust_nvmet_hostile"
                ),
                sig <- Signal::new(),
            }),
            GFP_KERNEL,
        )
    }

    fn update(&self, f: impl FnOnce(&mut Inner)) {
        f(&mut self.inner.lock());
        self.sig.complete();
    }

    /// Waits up to `ms` for the CM to leave `from`; the step then.
    fn step_after(&self, from: Step, ms: u32) -> Step {
        let end = now_ms() + i64::from(ms);
        loop {
            let s = self.inner.lock().step;
            let left = end - now_ms();
            if s != from || left <= 0 {
                return s;
            }
            let _ = self.sig.wait_timeout(left as u32);
        }
    }

    fn ended(&self) -> bool {
        self.inner.lock().ended
    }

    fn next(&self) -> Option<Seen> {
        let mut i = self.inner.lock();
        if i.seen.is_empty() {
            None
        } else {
            i.seen.remove(0)
        }
    }
}

/// The CM handler of a probe's connection.
pub(super) struct Ev {
    shared: Arc<Shared>,
}

impl Handler for Ev {
    fn event(&self, _id: &Id, event: Event<'_, Self>) {
        let s = &self.shared;
        match event {
            Event::AddrResolved => s.update(|i| i.step = Step::Addr),
            Event::RouteResolved => s.update(|i| i.step = Step::Route),
            Event::Established { .. } => s.update(|i| i.step = Step::Up),
            Event::Rejected {
                reason,
                private_data,
            } => {
                let status = le16(private_data, 2);
                s.update(|i| i.step = Step::Refused { status, reason });
            }
            Event::AddrError(_)
            | Event::RouteError(_)
            | Event::ConnectError(_)
            | Event::Unreachable(_) => s.update(|i| i.step = Step::Failed),
            // The id goes with the probe, which notices at its next wait.
            Event::Disconnected | Event::DeviceRemoval => s.update(|i| i.ended = true),
            _ => {}
        }
    }
}

/// A receive for one completion.
pub(super) struct Recv {
    shared: Arc<Shared>,
    qp: Arc<Qp<Rts>>,
    buf: DmaBuf<FromDevice>,
}

impl Completion for Recv {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let shared = wr.data().shared.clone();
        if !wc.is_ok() || wc.opcode() != Some(WcOpcode::Recv) {
            shared.update(|i| i.ended = true);
            return;
        }
        let b = wr.data_mut().buf.as_slice();
        let seen = Seen {
            result: le64(b, 0),
            sqhd: le16(b, 8),
            cid: le16(b, 12),
            status: le16(b, 14) >> 1,
            len: wc.byte_len() as usize,
            inv: wc.invalidation(),
        };
        shared.update(|i| {
            if i.seen.len() < SEEN_MAX {
                let _ = i.seen.push(seen, GFP_ATOMIC);
            }
        });
        if post_recv(wr).is_err() {
            shared.update(|i| i.ended = true);
        }
    }
}

pub(super) fn post_recv(wr: Wr<Recv>) -> Result {
    let qp = wr.data().qp.clone();
    qp.post_recv(wr, |r, ops| {
        let n = r.buf.len();
        ops.buf(&mut r.buf, 0..n)?;
        Ok(())
    })?;
    Ok(())
}

/// How a connection request ended.
pub(super) enum Opened {
    Up(Conn),
    Refused { status: u16, reason: i32 },
    Failed(Error),
}

/// What became of a command.
pub(super) enum Answer {
    Cqe(Seen),
    Ended,
    Silent,
}

/// One RC connection to the target: a queue of the probe.
pub(super) struct Conn {
    qid: u16,
    quiet: bool,
    shared: Arc<Shared>,
    // Dropped in this order, after `drop` drained the QP: the buffer, the QP, the id.
    mr: Option<Mr>,
    qp: Arc<Qp<Rts>>,
    id: CmId<Ev>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.id.disconnect();
        let _ = self.qp.set_error();
        let _ = self.qp.drain();
    }
}

impl Conn {
    /// Connects to `addr` with the request `cm`.
    pub(super) fn open(addr: SockAddr, cm: &CmSpec, quiet: bool) -> Opened {
        match Self::try_open(addr, cm, quiet) {
            Ok(o) => o,
            Err(e) => Opened::Failed(e),
        }
    }

    fn try_open(addr: SockAddr, cm: &CmSpec, quiet: bool) -> Result<Opened> {
        let shared = Shared::new()?;
        let id = CmId::new(
            PortSpace::Tcp,
            Ev {
                shared: shared.clone(),
            },
        )?;
        id.resolve_addr(None, addr, RESOLVE_MS)?;
        if shared.step_after(Step::Idle, RESOLVE_MS + 1000) != Step::Addr {
            return Err(ETIMEDOUT);
        }
        id.resolve_route(RESOLVE_MS)?;
        if shared.step_after(Step::Addr, RESOLVE_MS + 1000) != Step::Route {
            return Err(ETIMEDOUT);
        }
        let dev = id.device().ok_or(ENODEV)?;
        let pd = Pd::new(&dev)?;
        let cq = Cq::new(&dev, 2 * RECVS + 16, 0, PollContext::Workqueue)?;
        let caps = QpCaps {
            send_depth: 32,
            recv_depth: RECVS,
            ..QpCaps::default()
        };
        let qp = id.create_qp(&pd, &cq, &cq, &caps)?;
        let mut mr = Mr::new(&pd, (DATA_LEN / kernel::page::PAGE_SIZE) as u32 + 1)?;
        let mut buf = DmaBuf::new(&pd, DATA_LEN, GFP_KERNEL)?;
        for (i, x) in buf.as_mut_slice().iter_mut().enumerate() {
            *x = pattern(i);
        }
        mr.map(buf).map_err(|(e, _)| e)?;
        let mut pdata = [0u8; PD_MAX];
        put16(&mut pdata, 0, cm.recfmt);
        put16(&mut pdata, 2, cm.qid);
        put16(&mut pdata, 4, cm.hrqsize);
        put16(&mut pdata, 6, cm.hsqsize);
        let reads = cm
            .reads
            .unwrap_or(dev.attrs().max_qp_rd_atom().clamp(1, 16) as u8);
        id.connect(&ConnParam {
            private_data: pdata.get(..cm.len).unwrap_or(&[]),
            responder_resources: reads,
            initiator_depth: 0,
            ..ConnParam::default()
        })?;
        let qp = match shared.step_after(Step::Route, CONNECT_MS + 1000) {
            Step::Up => Arc::new(qp.established()?, GFP_KERNEL)?,
            Step::Refused { status, reason } => return Ok(Opened::Refused { status, reason }),
            _ => return Err(ETIMEDOUT),
        };
        // From here dropping the connection drains what was posted.
        let conn = Conn {
            qid: cm.qid,
            quiet,
            shared: shared.clone(),
            mr: Some(mr),
            qp: qp.clone(),
            id,
        };
        for _ in 0..RECVS {
            let r = Recv {
                shared: shared.clone(),
                qp: qp.clone(),
                buf: DmaBuf::<FromDevice>::alloc(&pd, RECV_LEN, GFP_KERNEL)?,
            };
            post_recv(Wr::new(r, GFP_KERNEL)?)?;
        }
        Ok(Opened::Up(conn))
    }

    /// The probe's buffer, registered for the target (again after it was invalidated).
    pub(super) fn remote(&mut self) -> Result<Remote> {
        let mut mr = self.mr.take().ok_or(EINVAL)?;
        if mr.is_registered() {
            let r = mr.remote();
            self.mr = Some(mr);
            return r;
        }
        mr.bump_key()?;
        let (wr, pending) = Waited::new(mr, GFP_KERNEL)?;
        self.qp.post_send(wr, |w, ops| {
            ops.reg_mr(&w.data, Access::REMOTE_READ | Access::REMOTE_WRITE)?;
            Ok(())
        })?;
        let (mr, wc) = pending.wait(POST_MS)?;
        let r = mr.remote();
        self.mr = Some(mr);
        if wc.is_ok() {
            r
        } else {
            Err(ECONNRESET)
        }
    }

    /// Sends `bytes` in one SEND and waits for it to complete.
    pub(super) fn send(&self, bytes: &[u8]) -> Result {
        let n = bytes.len();
        let mut buf = DmaBuf::<ToDevice>::alloc(self.qp.pd(), n, GFP_KERNEL)?;
        put(buf.as_mut_slice(), 0, bytes);
        let (wr, pending) = Waited::new(buf, GFP_KERNEL)?;
        self.qp.post_send(wr, |w, ops| {
            ops.send(&w.data, 0..n)?;
            Ok(())
        })?;
        let (_, wc) = pending.wait(POST_MS)?;
        if wc.is_ok() {
            Ok(())
        } else {
            Err(ECONNRESET)
        }
    }

    /// Sends `cmd` (registering the buffer first if it names it).
    pub(super) fn post(&mut self, cmd: &Cmd) -> Result {
        let remote = if cmd.needs_mr() {
            self.remote()?
        } else {
            Remote { addr: 0, rkey: 0 }
        };
        self.send(&cmd.encode(remote)?)
    }

    /// Logs a completion (and records the invalidation of the buffer it made).
    pub(super) fn note(&self, tag: &[u8], s: &mut Seen) {
        let inv = s.inv.take();
        let rkey = inv.as_ref().map(Invalidation::rkey);
        if let (Some(inv), Some(mr)) = (inv, self.mr.as_ref()) {
            mr.apply_invalidation(inv);
        }
        if self.quiet {
            return;
        }
        let what = match s.cid {
            CID_CONNECT => "connect",
            CID_ENABLE => "enable",
            _ => "cqe",
        };
        let (status, result, sqhd, cid, qid, len) =
            (s.status, s.result, s.sqhd, s.cid, self.qid, s.len);
        match rkey {
            Some(k) => pr_info!(
                "hostile {}: {what} qid={qid} cid={cid} status={status:#x} result={result:#x} sqhd={sqhd} len={len} inv={k:#x}\n",
                Text(tag)
            ),
            None => pr_info!(
                "hostile {}: {what} qid={qid} cid={cid} status={status:#x} result={result:#x} sqhd={sqhd} len={len} inv=-\n",
                Text(tag)
            ),
        }
    }

    /// Waits up to `ms` for the completion of `cid`, logging every completion that comes.
    pub(super) fn answer(&self, tag: &[u8], cid: u16, ms: u32) -> Answer {
        let end = now_ms() + i64::from(ms);
        loop {
            while let Some(mut s) = self.shared.next() {
                self.note(tag, &mut s);
                if s.cid == cid {
                    return Answer::Cqe(s);
                }
            }
            if self.shared.ended() {
                return Answer::Ended;
            }
            let left = end - now_ms();
            if left <= 0 {
                return Answer::Silent;
            }
            let _ = self.shared.sig.wait_timeout(left as u32);
        }
    }

    /// Sends `cmd` and waits for its answer (`Silent` at once if it has no wait).
    pub(super) fn command(&mut self, tag: &[u8], cmd: &Cmd) -> Result<Answer> {
        match self.post(cmd) {
            Ok(()) => {}
            Err(e) if e == ECONNRESET || self.shared.ended() => return Ok(Answer::Ended),
            Err(e) => return Err(e),
        }
        if cmd.wait == 0 {
            return Ok(Answer::Silent);
        }
        Ok(self.answer(tag, cmd.cid, cmd.wait))
    }

    /// The queue's Connect: `Some(controller id)` when it succeeded.
    pub(super) fn connect(
        &mut self,
        tag: &[u8],
        c: &ConnectSpec<'_>,
        subnqn: &[u8],
        hostnqn: &[u8],
        cntlid: u16,
        hsqsize: u16,
    ) -> Result<Option<u16>> {
        let mut data = [0u8; CONNECT_DATA_LEN];
        put(&mut data, 0, &HOSTID);
        put16(&mut data, 16, c.cntlid.unwrap_or(cntlid));
        put(&mut data, 256, c.subnqn.unwrap_or(subnqn));
        put(&mut data, 512, c.hostnqn.unwrap_or(hostnqn));
        let qid = c.qid.unwrap_or(self.qid);
        let mut cmd = Cmd {
            opc: FABRICS,
            cid: CID_CONNECT,
            nsid: u32::from(FCTYPE_CONNECT),
            len: CONNECT_DATA_LEN as u32,
            ..Cmd::default()
        };
        cmd.cdw[0] = u32::from(qid) << 16;
        cmd.cdw[1] = u32::from(c.sqsize.unwrap_or(hsqsize));
        cmd.cdw[2] = c.kato;
        let bytes = if c.inline {
            cmd.sgl = 0x01;
            cmd.data = CONNECT_DATA_LEN;
            let mut b = cmd.encode(Remote { addr: 0, rkey: 0 })?;
            put(&mut b, SQE_LEN, &data);
            b
        } else {
            let mr = self.mr.as_mut().ok_or(EINVAL)?;
            mr.write(0, &data)?;
            let remote = self.remote()?;
            cmd.encode(remote)?
        };
        if self.send(&bytes).is_err() {
            return Ok(None);
        }
        Ok(match self.answer(tag, CID_CONNECT, WAIT_MS) {
            Answer::Cqe(s) if s.status == 0 => Some(s.result as u16),
            _ => None,
        })
    }

    /// Property Set of CC: whether it succeeded.
    pub(super) fn enable(&mut self, tag: &[u8], cc: u32) -> bool {
        let mut cmd = Cmd {
            opc: FABRICS,
            cid: CID_ENABLE,
            nsid: u32::from(FCTYPE_PROP_SET),
            ..Cmd::default()
        };
        cmd.cdw[1] = crate::proto::reg::CC;
        cmd.cdw[2] = cc;
        matches!(self.command(tag, &cmd), Ok(Answer::Cqe(s)) if s.status == 0)
    }
}

/// Connects the admin queue with `cm` (logging a refusal): `None` if refused or failed.
pub(super) fn open_logged(
    tag: &[u8],
    addr: SockAddr,
    cm: &CmSpec,
    quiet: bool,
) -> Result<Option<Conn>> {
    match Conn::open(addr, cm, quiet) {
        Opened::Up(c) => Ok(Some(c)),
        Opened::Refused { status, reason } => {
            if !quiet {
                pr_info!(
                    "hostile {}: rejected status={status} reason={reason}\n",
                    Text(tag)
                );
            }
            Ok(None)
        }
        Opened::Failed(e) => {
            pr_err!(
                "hostile {}: no connection to the target: {e:?}\n",
                Text(tag)
            );
            Err(e)
        }
    }
}
