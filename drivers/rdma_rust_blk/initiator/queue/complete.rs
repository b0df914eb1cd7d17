// SPDX-License-Identifier: GPL-2.0

//! A queue's completion side: a command's SEND coming back, an answer arriving, a keep-alive
//! coming back, each in the CQ's handler (process context, not sleeping: the completion
//! workqueue). Whichever of a tag's two completions comes
//! second ends its block request ([`Slot::settle`], [`IoQueue::finish`]); a completion that
//! failed fails the queue ([`IoQueue::check`]).

use super::{Answer, Io, IoQueue, KeepAlive, Settled, PROBE_WAITING};
use crate::proto::{Response, INLINE_MAX, RESP_LEN};
use core::sync::atomic::Ordering;
use kernel::block::mq::Request;
use kernel::prelude::*;
use kernel::rdma::{
    cq::{Invalidation, Wc, WcOpcode, WcStatus},
    wr::{Completion, Wr},
};

impl IoQueue {
    /// Does what [`Slot::settle`] left to do, outside the tag's lock. A CQ handler.
    fn finish(&self, settled: Settled) {
        match settled {
            Settled::Waiting => {}
            Settled::End(rq, result) => self.end(rq, result),
            Settled::Unrevoked => self.fail(
                format_args!("an answer did not revoke the buffer's rkey"),
                false,
            ),
        }
    }

    /// Keeps `resp` for its tag, which must have a command out and no answer yet; an inline
    /// read's `data`, exactly what its command asked, goes into the block request's pages.
    /// Finishes the tag's I/O if its request is back too ([`Slot::settle`]); `EPROTO` if the
    /// answer does not fit the tag's command. A CQ handler.
    fn take_answer(
        &self,
        resp: Response,
        data: &[u8],
        inv: Option<Invalidation>,
    ) -> Result<Settled> {
        // Read first: only a probe's queue ever waits, and the exchange would take the
        // line from other CPUs on every answer.
        if self.probe.load(Ordering::Acquire) == PROBE_WAITING {
            let status = i64::from(resp.status);
            let probed = self.probe.compare_exchange(
                PROBE_WAITING,
                status,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            if probed.is_ok() {
                self.probe_done.complete();
                return Ok(Settled::Waiting);
            }
        }
        let slot = self.slots.get(resp.tag as usize).ok_or(EPROTO)?;
        let mut guard = slot.lock();
        let s = &mut *guard;
        if s.answer.is_some() || s.closed {
            return Err(EPROTO);
        }
        let rq = s.rq.as_mut().ok_or(EPROTO)?;
        let mut status = resp.status;
        if status == 0 && s.inline_read > 0 {
            if data.len() != s.inline_read {
                return Err(EPROTO);
            }
            // The request's pages are written in place: it is ours until `complete` ends it.
            if let Err(e) = Request::copy_from_slice(rq, data) {
                status = e.to_errno();
            }
        } else if !data.is_empty() {
            return Err(EPROTO);
        }
        s.answer = Some((status, inv));
        Ok(s.settle())
    }

    /// Whether `wc`, the completion of `what`, succeeded; if not, fails the queue (from a CQ
    /// handler), unless the queue failed first and its requests come back flushed.
    ///
    /// A request flushed while the queue lives means the QP went to the error state behind
    /// the queue's back, with no completion in error of the queue's own: soft-RoCE's responder
    /// does that when it rejects the target's RDMA READ or WRITE (an rkey it does not accept),
    /// raising no asynchronous event either; a device's `QP_FATAL` flushes the same way. The
    /// keep-alive [`IoQueue::tick`] posts then comes back flushed, which fails the queue
    /// within one tick.
    fn check(&self, wc: &Wc, what: &str) -> bool {
        if wc.is_ok() {
            return true;
        }
        match wc.status() {
            WcStatus::WrFlushErr if self.is_dead() => {}
            WcStatus::WrFlushErr => self.fail(
                format_args!("{what} was flushed: the QP failed without an error of its own"),
                false,
            ),
            status => self.fail(format_args!("{what} failed: {status:?}"), false),
        }
        false
    }

    /// Posts an answer receive; dropped if the QP is being drained.
    fn post_answer(wr: Wr<Answer>) {
        let qp = wr.data().q.qp.clone();
        let _ = qp.post_recv(wr, |a, ops| {
            ops.buf(&mut a.buf, 0..RESP_LEN + INLINE_MAX as usize)?;
            Ok(())
        });
    }
}

impl Completion for Io {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let q = wr.data().q.clone();
        let tag = wr.data().tag as usize;
        // The device has read an inline write's pages: unmapped, and their reference to the
        // block request dropped, before the tag's request is back (see `end_failed`).
        drop(wr.data_mut().lent.take_back());
        let Some(slot) = q.slots.get(tag) else {
            return;
        };
        let settled = {
            let mut s = slot.lock();
            // Back in its slot in every case: a failed queue's requests are freed from there.
            // (Nothing is posted after `close`'s drain: one that comes back to a closed slot
            // is dropped.)
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
        q.finish(settled);
        q.check(wc, "a command");
        if q.is_dead() {
            // `fail` could not end a request whose pages were lent: it ends here.
            q.end_failed(tag);
        }
    }
}

impl Completion for KeepAlive {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let q = wr.data().q.clone();
        q.check(wc, "a keep-alive");
        // Back in its place in every case: `close` frees it, after the drain.
        q.keepalive_sent.store(0, Ordering::Release);
        *q.keepalive.lock() = Some(wr);
    }
}

impl Completion for Answer {
    fn done(mut wr: Wr<Self>, wc: &Wc) {
        let q = wr.data().q.clone();
        if !q.check(wc, "an answer's receive") {
            return;
        }
        let n = wc.byte_len() as usize;
        // An answer is a SEND (with invalidate, or not), never with immediate data. Anything
        // else that consumed the receive left the buffer as the last answer wrote it (an RDMA
        // WRITE with immediate data names a length, not this buffer): taken as an answer, the
        // stale one would end the tag's next block request, an inline read's with the old data.
        let (opcode, imm) = (wc.opcode(), wc.imm_data());
        if opcode != Some(WcOpcode::Recv) || imm.is_some() {
            IoQueue::post_answer(wr);
            q.fail(
                format_args!(
                    "the target sent {opcode:?} of {n} bytes{} where an answer goes",
                    if imm.is_some() {
                        " with immediate data"
                    } else {
                        ""
                    }
                ),
                false,
            );
            return;
        }
        let inv = wc.invalidation();
        // The answer is taken (and an inline read's data copied out) before its buffer is
        // posted again.
        let taken = match wr.data_mut().buf.as_slice().get(..n) {
            Some(b) => Response::decode(b).and_then(|(resp, data)| q.take_answer(resp, data, inv)),
            None => Err(EPROTO),
        };
        IoQueue::post_answer(wr);
        match taken {
            Ok(settled) => q.finish(settled),
            Err(_) => q.fail(
                format_args!("the target sent {n} bytes that are not an answer to a command"),
                false,
            ),
        }
    }
}
