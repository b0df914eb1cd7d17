// SPDX-License-Identifier: GPL-2.0

//! How a command is carried out: planned against its controller or namespace, its SGL
//! descriptor checked against that, the host's data read by RDMA READ when it has any, the
//! command executed, and its completion sent (after the data for the host, by RDMA WRITE).

use super::{finish, post_recv, Answer, Queue, Stage};
use crate::config::Volume;
use crate::ctrl::{Ctrl, Data, QueueLink, Reply};
use crate::io;
use crate::misbehave::{self, Fault};
use crate::proto::{
    Cqe, Sgl, Sqe, Status, CONNECT_DATA_LEN, CQE_LEN, FABRICS, FCTYPE_CONNECT, SQE_LEN,
};
use core::sync::atomic::Ordering;
use kernel::page::{Page, PAGE_SIZE};
use kernel::prelude::*;
use kernel::rdma::{
    dma::{copy_from_pages, copy_to_pages, FromDevice, ToDevice},
    mr::Remote,
    rw::RwCtx,
    wr::Wr,
};
use kernel::sync::Arc;

impl Queue {
    /// How `sqe`'s data moves, and the volume an I/O command acts on; `Err` with the status
    /// the command gets instead.
    fn plan(
        &self,
        ctrl: Option<&Arc<Ctrl>>,
        sqe: &Sqe,
    ) -> Result<(Data, Option<Arc<Volume>>), Status> {
        match (ctrl, sqe.opcode) {
            (None, FABRICS) if sqe.fctype() == FCTYPE_CONNECT => {
                Ok((Data::FromHost(CONNECT_DATA_LEN), None))
            }
            // Nothing but a Connect before the queue has a controller.
            (None, _) => Err(Status::CMD_SEQ_ERROR),
            // A second Connect is out of sequence, whatever data it names.
            (Some(_), FABRICS) if sqe.fctype() == FCTYPE_CONNECT => Err(Status::CMD_SEQ_ERROR),
            (Some(_), FABRICS) => Ok((Data::None, None)),
            (Some(c), _) if self.qid == 0 => c.admin_data(sqe).map(|d| (d, None)),
            (Some(c), _) => {
                if !c.ready() {
                    return Err(Status::CMD_SEQ_ERROR);
                }
                let subsys = c.subsys.as_ref().ok_or(Status::INVALID_OPCODE)?;
                io::plan(subsys, sqe).map(|p| (p.data, Some(p.volume)))
            }
        }
    }

    /// Carries out the command in `wr`: plans it, checks its SGL, fetches the host's data (the
    /// command goes on in [`Queue::execute`] when the READ completes) or executes it now.
    pub(super) fn carry_out(self: &Arc<Self>, mut wr: Wr<Answer>) -> Option<Wr<Answer>> {
        let Some(sqe) = wr.data().sqe else {
            finish(&mut wr);
            return Some(wr);
        };
        // A command that reaches a controller which has ended (between its end and the QP's
        // error state) gets no answer: any status now would be a final one (CMD_SEQ_ERROR
        // carries DNR) for a command the host must retry on its next association. The
        // connection is going; nvmet-rdma drops such commands too.
        // The controller is looked up once per command: `execute` takes it from the answer.
        let ctrl = self.ctrl();
        if ctrl.as_ref().is_some_and(|c| c.ended()) {
            self.end("its controller ended");
            finish(&mut wr);
            return Some(wr);
        }
        let claimed = self.pool.lock().claim(sqe.cid);
        wr.data_mut().claimed = claimed;
        if !claimed {
            return self.reply(wr, Status::CMDID_CONFLICT.into());
        }
        let (data, volume) = match self.plan(ctrl.as_ref(), &sqe) {
            Ok(p) => p,
            Err(s) => return self.reply(wr, s.into()),
        };
        wr.data_mut().ctrl = ctrl;
        let sgl = match sqe.sgl {
            Ok(s) => s,
            Err(s) => return self.reply(wr, s.into()),
        };
        let len = match data {
            Data::None => 0,
            Data::FromHost(n) | Data::ToHost(n) => n,
        };
        // The descriptor must name exactly the command's data; a Dataset Management's may
        // name more (Linux sends its whole range buffer, 4 KiB, whatever NR says): only the
        // ranges are read.
        let longer = self.qid != 0 && io::sgl_may_be_longer(&sqe);
        if sgl.len() != len && !(longer && sgl.len() > len) {
            return self.reply(wr, Status::SGL_INVALID_DATA.into());
        }
        let a = wr.data_mut();
        let keyed = match (data, sgl) {
            (_, Sgl::Keyed { addr, key, .. }) => Some(Remote { addr, rkey: key }),
            (Data::None, Sgl::Inline { .. }) => None,
            (Data::FromHost(_), Sgl::Inline { offset, .. }) => {
                if offset != 0 {
                    return self.reply(wr, Status::SGL_INVALID_OFFSET.into());
                }
                // In-capsule data only on I/O queues, and all of it in the capsule.
                if self.qid == 0 || a.inline_len != sgl.len() {
                    return self.reply(wr, Status::SGL_INVALID_DATA.into());
                }
                None
            }
            (Data::ToHost(_), Sgl::Inline { .. }) => {
                return self.reply(wr, Status::SGL_INVALID_TYPE.into());
            }
        };
        a.data = data;
        a.volume = volume;
        if let Err(e) = a.pages.as_mut().ok_or(EINVAL).and_then(|p| grow(p, len)) {
            let _ = e;
            return self.reply(wr, Status::INTERNAL.into());
        }
        match (data, keyed) {
            (Data::FromHost(n), Some(remote)) if n > 0 => self.fetch(wr, n, remote),
            _ => self.execute(wr),
        }
    }

    /// Reads the host's `len` bytes at `remote` into the answer's pages; the answer's
    /// completion goes on with [`Queue::execute`].
    fn fetch(
        self: &Arc<Self>,
        mut wr: Wr<Answer>,
        len: usize,
        remote: Remote,
    ) -> Option<Wr<Answer>> {
        let a = wr.data_mut();
        let Some(pages) = a.pages.take() else {
            return self.reply(wr, Status::INTERNAL.into());
        };
        match RwCtx::<FromDevice>::new(&a.qp, pages, len, remote) {
            Ok(rw) => {
                a.from_host = Some(rw);
                a.stage = Stage::Fetching;
                let qp = a.qp.clone();
                let posted = qp.post_send(wr, |a, ops| {
                    ops.rw(a.from_host.as_mut().ok_or(EINVAL)?)?;
                    Ok(())
                });
                match posted {
                    Ok(()) => {
                        self.fetched.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    Err(e) => {
                        let mut wr = e.wr;
                        let a = wr.data_mut();
                        a.stage = Stage::Idle;
                        a.pages = a.from_host.take().map(RwCtx::into_pages);
                        self.reply(wr, Status::DATA_XFER_ERROR.into())
                    }
                }
            }
            Err((e, pages)) => {
                a.pages = Some(pages);
                pr_err!("queue {}: cannot read the host's data: {e:?}\n", self.qid);
                self.reply(wr, Status::DATA_XFER_ERROR.into())
            }
        }
    }

    /// Carries out a planned command whose host data, if any, is in the answer's pages.
    pub(super) fn execute(self: &Arc<Self>, mut wr: Wr<Answer>) -> Option<Wr<Answer>> {
        let a = wr.data_mut();
        let Some(sqe) = a.sqe else {
            finish(&mut wr);
            return Some(wr);
        };
        let len = match a.data {
            Data::None => 0,
            Data::FromHost(n) | Data::ToHost(n) => n,
        };
        let Some(pages) = a.pages.as_mut() else {
            return self.reply(wr, Status::INTERNAL.into());
        };
        let ctrl = a.ctrl.take();
        let reply = match ctrl {
            None => self.connect(&sqe, pages),
            Some(c) if sqe.opcode == FABRICS => self.target.fabrics(&c, self.qid, &sqe),
            Some(c) if self.qid == 0 => {
                let Ok(mut out) = KVec::from_elem(0u8, len, GFP_KERNEL) else {
                    return self.reply(wr, Status::INTERNAL.into());
                };
                match c.admin(&sqe, &mut out) {
                    // Held (an Asynchronous Event Request): its command ID stays in flight.
                    None => {
                        a.claimed = false;
                        finish(&mut wr);
                        return Some(wr);
                    }
                    Some(r) if r.status.is_ok() && len > 0 => match copy_to_pages(pages, 0, &out) {
                        Ok(()) => r,
                        Err(_) => Status::INTERNAL.into(),
                    },
                    Some(r) => r,
                }
            }
            Some(_) => {
                // The capsule's data, if the SGL names it (not a keyed block fetched into
                // `pages`).
                let inline = match sqe.sgl {
                    Ok(Sgl::Inline { .. }) => a
                        .capsule
                        .as_mut()
                        .and_then(|cb| cb.data_mut().buf.as_slice().get(SQE_LEN..SQE_LEN + len)),
                    _ => None,
                };
                match a.volume.as_deref() {
                    Some(v) => io::execute(&sqe, v, pages, len, inline),
                    None => Status::INTERNAL.into(),
                }
            }
        };
        self.reply(wr, reply)
    }

    /// The queue's Connect: the controller it makes or joins becomes the queue's.
    fn connect(self: &Arc<Self>, sqe: &Sqe, pages: &[Page]) -> Reply {
        let Ok(mut data) = KVec::from_elem(0u8, CONNECT_DATA_LEN, GFP_KERNEL) else {
            return Status::INTERNAL.into();
        };
        if copy_from_pages(pages, 0, &mut data).is_err() {
            return Status::INTERNAL.into();
        }
        let link: Arc<dyn QueueLink> = self.clone();
        let (reply, ctrl) = self
            .target
            .connect(&self.port, self.qid, self.depth, sqe, &data, link);
        if let Some(c) = ctrl {
            *self.ctrl.lock() = Some(c);
        }
        reply
    }

    /// Sends the completion of the command in `wr` with `reply`; its data for the host, if it
    /// succeeded, goes first by RDMA WRITE. With invalidate of the host's rkey when the SGL
    /// asked for it. `Some(wr)`, idle, if it could not be posted (the connection is ending).
    pub(super) fn reply(
        self: &Arc<Self>,
        mut wr: Wr<Answer>,
        mut reply: Reply,
    ) -> Option<Wr<Answer>> {
        let a = wr.data_mut();
        let Some(sqe) = a.sqe else {
            finish(&mut wr);
            return Some(wr);
        };
        let keyed = match sqe.sgl {
            Ok(Sgl::Keyed {
                addr,
                len,
                key,
                invalidate,
            }) if len > 0 => Some((Remote { addr, rkey: key }, invalidate)),
            _ => None,
        };
        if let (true, Data::ToHost(n), Some((remote, _))) = (reply.status.is_ok(), a.data, keyed) {
            match a.pages.take() {
                Some(pages) => match RwCtx::<ToDevice>::new(&a.qp, pages, n, remote) {
                    Ok(rw) => a.to_host = Some(rw),
                    Err((e, pages)) => {
                        a.pages = Some(pages);
                        pr_err!("queue {}: cannot write the host's data: {e:?}\n", self.qid);
                        reply = Status::DATA_XFER_ERROR.into();
                    }
                },
                // No data to send: the command cannot succeed.
                None => reply = Status::INTERNAL.into(),
            }
        }
        let mut invalidate = keyed.and_then(|(r, inv)| inv.then_some(r.rkey));
        let mut cid = sqe.cid;
        if let Some(fault) = misbehave::take(self.qid, sqe.opcode, invalidate.is_some()) {
            match fault {
                Fault::NoAnswer | Fault::KeepAliveUnanswered => {
                    pr_info!(
                        "queue {}: misbehaving on purpose ({fault:?}): command id {:#06x} is never completed\n",
                        self.qid,
                        sqe.cid
                    );
                    // As if the completion had gone: the answer is idle again, its command
                    // ID free (the host, which still waits for it, reuses it only after its
                    // timeout ends this connection).
                    finish(&mut wr);
                    return Some(wr);
                }
                Fault::UnknownCid => cid = (cid & 0xf000) | 0x0fff,
                Fault::StaleCid => cid ^= 0x1000,
                Fault::WrongRkey => invalidate = invalidate.map(|k| k ^ 0xff),
                Fault::ReservedStatus => reply.status = Status(0x0501),
                Fault::NoInvalidate => invalidate = None,
                Fault::AbsurdIdCtrl | Fault::AbsurdIdNs => {}
            }
            pr_info!(
                "queue {}: misbehaving on purpose ({fault:?}): command id {:#06x} completed as {cid:#06x}{}\n",
                self.qid,
                sqe.cid,
                match fault {
                    Fault::WrongRkey => ", invalidating another rkey",
                    Fault::NoInvalidate => ", leaving its rkey to the host",
                    _ => "",
                }
            );
        }
        Cqe {
            result: reply.result,
            sq_head: a.sq_head,
            sq_id: self.qid,
            cid,
            status: reply.status,
        }
        .encode(a.cqe.as_mut_slice());
        // The host may send its next command as soon as it has this completion: the buffer
        // kept for an in-capsule Write is posted first (it fails only on a connection that is
        // ending, where the completion would go nowhere either).
        if let Some(cb) = a.capsule.take() {
            if post_recv(&a.qp, cb).is_err() {
                finish(&mut wr);
                return Some(wr);
            }
        }
        // The host may reuse the command ID as soon as it has the completion, which can be
        // before the SEND's own completion comes back here: the ID is free from now on.
        if core::mem::take(&mut a.claimed) {
            self.pool.lock().release(sqe.cid);
        }
        a.stage = Stage::Answering;
        let qp = a.qp.clone();
        let posted = qp.post_send(wr, |a, ops| {
            if let Some(rw) = a.to_host.as_mut() {
                ops.rw(rw)?;
            }
            match invalidate {
                Some(rkey) => ops.send_inv(&a.cqe, 0..CQE_LEN, rkey)?,
                None => ops.send(&a.cqe, 0..CQE_LEN)?,
            };
            Ok(())
        });
        match posted {
            Ok(()) => None,
            Err(e) => {
                let mut wr = e.wr;
                self.protocol_error(format_args!("cannot post a completion: {:?}", e.err));
                finish(&mut wr);
                Some(wr)
            }
        }
    }
}

/// Grows `pages` to hold `len` bytes.
fn grow(pages: &mut KVec<Page>, len: usize) -> Result {
    while pages.len() * PAGE_SIZE < len {
        pages.push(Page::alloc_page(GFP_KERNEL)?, GFP_KERNEL)?;
    }
    Ok(())
}
