// SPDX-License-Identifier: GPL-2.0

//! A queue's failure and its end: failing the block requests in flight once nothing reaches
//! their pages any more, and closing the connection.

use super::IoQueue;
use core::sync::atomic::Ordering;
use kernel::block::mq::Request;
use kernel::prelude::*;

impl IoQueue {
    /// Marks the queue dead (once) and ends the block requests in flight with `EIO`; in
    /// process context (`may_sleep`) also moves its QP to the error state, so that what is
    /// posted comes back flushed (from a CQ handler the QP has failed already, or is closed
    /// later). Any context but hard interrupts.
    pub(crate) fn fail(&self, why: core::fmt::Arguments<'_>, may_sleep: bool) {
        if !self.dead.swap(true, Ordering::AcqRel) {
            pr_err!("queue {}: {why}: failing its I/O\n", self.index);
        }
        self.probe_done.complete();
        if may_sleep {
            let _ = self.qp.set_error();
        }
        for tag in 0..self.slots.len() {
            self.end_failed(tag);
        }
    }

    /// Ends the block request of `tag`, if any, with `EIO`, unless its pages are still lent to
    /// the device. Any context but hard interrupts.
    ///
    /// Pages lent to a command's SEND (an inline write) come back with the SEND's completion
    /// (flushed, if the QP failed), which unmaps them before it gives the tag's request back,
    /// and calls this after: whichever of the two comes second ends the block request. Pages
    /// registered for the target stay reachable until their MR is deregistered, which sleeps:
    /// once the tag's request is back, its MR goes, here in process context, or from a work
    /// item after a CQ handler; blk-mq's timer then ends the block request (see
    /// [`IoQueue::ending`]).
    pub(super) fn end_failed(&self, tag: usize) {
        let Some(slot) = self.slots.get(tag) else {
            return;
        };
        let taken = {
            let mut s = slot.lock();
            s.answer = None;
            s.rq.take()
        };
        let Some(mut rq) = taken else {
            return;
        };
        // Twice at most: once the tag's request is back without its MR, it lends nothing.
        for _ in 0..2 {
            match Request::end(rq, Err(EIO)) {
                Ok(()) => {
                    // Only on a failed queue, which reuses no tag: the flag is this request's.
                    slot.lock().owed = false;
                    self.errors.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(back) => rq = back,
            }
            let mut s = slot.lock();
            // `close` freed the tag's request, after the drain: nothing is lent any more.
            if s.closed {
                continue;
            }
            // Still posted: the SEND's completion ends it.
            let Some(wr) = s.io.as_mut() else {
                s.rq = Some(rq);
                return;
            };
            let Some(mr) = wr.data_mut().pages.take() else {
                // The MR is going already (from a work item): the next pass ends it.
                s.rq = Some(rq);
                return;
            };
            drop(s);
            // Deregistered here in process context, else from a work item; the request's
            // reference goes after.
            drop(mr);
        }
        let mut s = slot.lock();
        if s.closed {
            drop(s);
            self.note_unended();
        } else {
            // The MR's deregistration was deferred: the next pass ends it.
            s.rq = Some(rq);
        }
    }

    /// Whether the block request of `tag` is still to be ended on a failed queue (its MR's
    /// deregistration was deferred, or its SEND is not back): blk-mq's timer comes back for
    /// it, and each pass ([`IoQueue::fail`]) tries again.
    pub(crate) fn ending(&self, tag: usize) -> bool {
        self.is_dead() && self.slots.get(tag).is_some_and(|s| s.lock().owed)
    }

    /// Disconnects, drains and frees the queue's requests. Process context.
    pub(crate) fn close(&self) {
        self.dead.store(true, Ordering::Release);
        if let Some(id) = self.id.lock().as_ref() {
            let _ = id.disconnect();
        }
        let _ = self.qp.set_error();
        let _ = self.qp.drain();
        // Everything posted is back: what the slots hold (requests that hold the queue) goes.
        drop(self.keepalive.lock().take());
        for slot in self.slots.iter() {
            let (io, rq) = {
                let mut s = slot.lock();
                s.closed = true;
                s.owed = false;
                s.answer = None;
                (s.io.take(), s.rq.take())
            };
            // The request first: it may hold the block request's pages (never posted now).
            drop(io);
            if let Some(rq) = rq {
                self.end(rq, Err(EIO));
            }
        }
        // The id's handler holds the queue (to fail it): that link goes first, then the id,
        // which is destroyed with the QP, when the queue goes.
        let id = self.id.lock().take();
        if let Some(id) = &id {
            drop(id.handler().waiter.queue.lock().take());
        }
        drop(id);
    }
}
