// SPDX-License-Identifier: GPL-2.0

//! A queue's completion side: a command's request coming back, a completion arriving, each
//! in the CQ's handler (not sleeping). Whichever of a tag's two comes second ends its command
//! ([`Slot::settle`], [`Queue::finish`]); a work completion in error fails the queue.

use super::{Answer, Io, Queue, Settled};
use crate::proto::{self, Cqe, CQE_LEN};
use kernel::prelude::*;
use kernel::rdma::{
    cq::{Invalidation, Wc, WcOpcode, WcStatus},
    wr::{Completion, Wr},
};

impl Queue {
    /// Does what [`Slot::settle`] left to do, outside the tag's lock. A CQ handler.
    fn finish(&self, tag: usize, settled: Settled) {
        match settled {
            Settled::Waiting => {}
            Settled::End(rq, result) => self.end(rq, result),
            Settled::SyncDone => self.sync_done.complete(),
            Settled::Event(status, result) => self.health.event(status, result),
            Settled::Invalidate(wr) => {
                let posted = self.qp.post_send(wr, |io, ops| {
                    if let Some(r) = io.named() {
                        ops.local_inv(r)?;
                    }
                    Ok(())
                });
                if let Err(e) = posted {
                    if let Some(slot) = self.slots.get(tag) {
                        drop(slot.lock().put_back(e.wr));
                    }
                    self.fail(format_args!("cannot invalidate a command's region"), false);
                }
            }
            Settled::Bogus => self.fail(
                format_args!("bogus remote invalidation: not the rkey the command named"),
                false,
            ),
        }
    }

    /// Keeps `cqe` for the tag its command id names, which must have that command in flight
    /// and no completion yet; `EPROTO` otherwise. A CQ handler.
    fn take_answer(&self, cqe: Cqe, inv: Option<Invalidation>) -> Result<(usize, Settled)> {
        let tag = usize::from(proto::cid_tag(cqe.cid));
        let slot = self.slots.get(tag).ok_or(EPROTO)?;
        let mut s = slot.lock();
        if s.user.is_none() || s.answer.is_some() || s.closed || s.cid != cqe.cid {
            return Err(EPROTO);
        }
        s.answer = Some((cqe, inv));
        Ok((tag, s.settle()))
    }

    /// Whether `wc` succeeded; if not, fails the queue, unless it failed first and its
    /// requests come back flushed.
    fn check(&self, wc: &Wc, what: &str) -> bool {
        if wc.is_ok() {
            return true;
        }
        match wc.status() {
            WcStatus::WrFlushErr if self.is_dead() => {}
            status => self.fail(format_args!("{what} failed: {status:?}"), false),
        }
        false
    }

    /// Posts a completion's receive again; dropped if the QP is being drained.
    fn post_answer(&self, wr: Wr<Answer>) {
        let _ = self.qp.post_recv(wr, |a, ops| {
            ops.buf(&mut a.buf, 0..CQE_LEN)?;
            Ok(())
        });
    }
}

impl Completion for Io {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let q = wr.data().q.clone();
        let tag = wr.data().tag as usize;
        // The device has read a write's in-capsule pages: their reference to the block request
        // goes before the tag's request is back (see `end_failed`).
        drop(wr.data_mut().lent.take_back());
        let Some(slot) = q.slots.get(tag) else {
            return;
        };
        let settled = {
            let mut s = slot.lock();
            if let Some(late) = s.put_back(wr) {
                drop(s);
                drop(late);
                return;
            }
            if wc.is_ok() && !q.is_dead() {
                s.settle()
            } else {
                Settled::Waiting
            }
        };
        q.finish(tag, settled);
        q.check(wc, "a command");
        if q.is_dead() {
            q.end_failed(tag);
        }
    }
}

impl Completion for Answer {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let q = wr.data().q.clone();
        if !q.check(wc, "a completion's receive") {
            return;
        }
        let n = wc.byte_len() as usize;
        let (opcode, imm) = (wc.opcode(), wc.imm_data());
        if opcode != Some(WcOpcode::Recv) || imm.is_some() {
            q.post_answer(wr);
            q.fail(
                format_args!("the target sent {opcode:?} of {n} bytes where a completion goes"),
                false,
            );
            return;
        }
        let inv = wc.invalidation();
        let cqe = wr.data_mut().buf.as_slice().get(..n).and_then(Cqe::decode);
        q.post_answer(wr);
        let Some(cqe) = cqe else {
            q.fail(
                format_args!("the target sent {n} bytes where a 16-byte completion goes"),
                false,
            );
            return;
        };
        // Its request stays in flight: the recovery sends it again.
        if let Some(sct) = cqe.reserved_type() {
            q.fail(
                format_args!(
                    "a completion for command id {:#06x} with an impossible status {:#06x} (reserved status code type {sct})",
                    cqe.cid, cqe.status
                ),
                false,
            );
            return;
        }
        match q.take_answer(cqe, inv) {
            Ok((tag, settled)) => q.finish(tag, settled),
            Err(_) => q.fail(
                format_args!(
                    "a completion for command id {:#06x}, which is not in flight",
                    cqe.cid
                ),
                false,
            ),
        }
    }
}
