// SPDX-License-Identifier: GPL-2.0

//! Draining and destroying a QP (`ib_drain_qp`, `ib_destroy_qp`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! Draining stops the QP for good and waits until every request posted on it has come back to
//! its owner, flushed if it had not completed: afterwards no completion handler of the QP runs
//! and nothing posted refers to its owners' memory. While it drains, kernel::rdma holds the
//! poller slot of the QP's CQs (`Cq::exclusive`): the core's
//! drain polls a direct CQ itself, and no other poller may run a handler concurrently. A QP that
//! takes its receives from an SRQ has only its send queue drained; its receives come back
//! through the SRQ.
//!
//! A QP is destroyed only once drained. If its requests do not all come back (the drain could
//! not move the QP to the error state, or a handler blocks), the QP, its accounting and what it
//! holds are kept, with a message every ten seconds, until they do: a completion that arrives
//! late then finds what it needs, instead of freed memory.

use super::{Qp, QpInner, QpType, State};
use crate::{
    bindings,
    error::code::{EAGAIN, EINVAL},
    error::Result,
    rdma::{
        cq::Exclusive,
        sync::{atomic, in_cm_handler, might_sleep},
    },
};
use core::{mem::ManuallyDrop, sync::atomic::Ordering};

/// How long a UD drain waits for its flushed requests before it reports them.
const UD_DRAIN_MS: u32 = 10_000;
/// Seconds between two reports of requests that did not come back.
const REPORT_S: u32 = 10;

/// Which queues a drain is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Queues {
    Send,
    Recv,
    Both,
}

/// The poller slots of a QP's CQs, held while kernel::rdma processes them itself.
struct Slots<'a> {
    first: Exclusive<'a>,
    second: Option<Exclusive<'a>>,
}

impl Slots<'_> {
    /// Processes what is in direct CQs (the others' pollers do it).
    fn poll(&self) {
        self.first.poll(64);
        if let Some(s) = &self.second {
            s.poll(64);
        }
    }

    /// Waits for the handlers still running (a request's slot is given back just before its
    /// handler runs).
    fn quiesce(&self) {
        self.first.quiesce();
        if let Some(s) = &self.second {
            s.quiesce();
        }
    }
}

impl QpInner {
    fn outstanding(&self) -> (u32, u32) {
        let s = self.shared();
        (
            s.sq_used.load(Ordering::Acquire),
            s.rq_used.load(Ordering::Acquire),
        )
    }

    pub(super) fn qpn(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant).
        unsafe { (*self.ptr).qp_num }
    }

    /// Takes the poller slots of the QP's CQs, in slot order, so that two drains of QPs
    /// sharing CQs cannot wait for each other. Sleeps.
    fn exclusive(&self) -> Slots<'_> {
        let (s, r) = (&*self.keep.send_cq, &*self.keep.recv_cq);
        // One CQ, or two shares of one pool CQ: one slot.
        if s.slot_key() == r.slot_key() {
            return Slots {
                first: s.exclusive(),
                second: None,
            };
        }
        let (a, b) = if s.slot_key() < r.slot_key() {
            (s, r)
        } else {
            (r, s)
        };
        let first = a.exclusive();
        Slots {
            first,
            second: Some(b.exclusive()),
        }
    }

    /// `EAGAIN` where a drain would sleep where it must not, or wait for itself (in a handler
    /// of one of the QP's CQs), or in an rdma_cm event handler (see [`Qp::drain`]).
    fn check_may_drain(&self) -> Result {
        let k = &self.keep;
        if atomic() || in_cm_handler() || k.send_cq.in_handler() || k.recv_cq.in_handler() {
            return Err(EAGAIN);
        }
        Ok(())
    }

    /// Drains `which` queues, once each, however many callers ask at the same time: a caller
    /// returns only when the drain it asked for is over. Sleeps.
    fn drain_queues(&self, which: Queues, slots: &Slots<'_>) {
        might_sleep();
        let shared = self.shared();
        shared.gate.close();
        let mut done = shared.drained.lock();
        let srq = self.srq().is_some();
        // A UD QP is drained whole; a QP with an SRQ has no receive queue of its own.
        let send = matches!(which, Queues::Send | Queues::Both) && !done.send;
        let recv = matches!(which, Queues::Recv | Queues::Both) && !done.recv && !srq;
        if (send || recv) && shared.posted.load(Ordering::Acquire) {
            match (self.qp_type, send, recv) {
                // UD: `ib_drain_sq` posts an RDMA WRITE marker, which a UD QP refuses.
                (QpType::Ud, _, _) => self.drain_by_flush(slots),
                // SAFETY: `ptr` is valid; its CQs are allocated with `ib_alloc_cq`, one slot of
                // each queue was kept free for the markers, the gate keeps posts out, and the
                // CQs' poller slots are ours (a direct CQ is polled by the core's drain).
                (QpType::Rc, true, true) => unsafe { bindings::ib_drain_qp(self.ptr) },
                // SAFETY: As above, for the send queue. With an SRQ, this moves the QP to the
                // error state too, which stops it taking receives from the SRQ.
                (QpType::Rc, true, false) => unsafe { bindings::ib_drain_sq(self.ptr) },
                // SAFETY: As above, for the receive queue of a QP without an SRQ.
                (QpType::Rc, false, _) => unsafe { bindings::ib_drain_rq(self.ptr) },
            }
        }
        let whole = self.qp_type == QpType::Ud;
        done.send |= send || whole;
        done.recv |= recv || whole || srq;
    }

    /// Drains a UD QP: it is moved to the error state and the requests this module counts are
    /// waited for, then the handlers still running.
    fn drain_by_flush(&self, slots: &Slots<'_>) {
        if let Err(e) = self.set_error() {
            crate::pr_err!(
                "kernel::rdma: cannot move UD QP {} to error for drain: {:?}\n",
                self.qpn(),
                e
            );
            return;
        }
        // A deadline, not a count of sleeps: `msleep(1)` lasts a jiffy or two, not 1 ms.
        let deadline = crate::time::Ktime::ktime_get().to_ns() + i64::from(UD_DRAIN_MS) * 1_000_000;
        while crate::time::Ktime::ktime_get().to_ns() < deadline {
            if self.outstanding() == (0, 0) {
                slots.quiesce();
                return;
            }
            slots.poll();
            // SAFETY: Process context (`drain_queues`).
            unsafe { bindings::msleep(1) };
        }
    }

    /// Waits, however long it takes and loudly, until every request posted on the QP has come
    /// back and no handler of its CQs is still running one. Sleeps.
    fn wait_for_requests(&self, slots: &Slots<'_>) {
        let mut waited_ms = 0u32;
        loop {
            let (sq, rq) = self.outstanding();
            if (sq, rq) == (0, 0) {
                break;
            }
            if waited_ms % (REPORT_S * 1000) == 0 {
                crate::pr_err!(
                    "kernel::rdma: QP {}: {} sends and {} receives did not come back after the drain; the QP is kept until they do ({} s so far)\n",
                    self.qpn(),
                    sq,
                    rq,
                    waited_ms / 1000
                );
            }
            slots.poll();
            // An idle sleep: a long wait here is reported above, not as a hung task.
            // SAFETY: Process context (the QP's teardown).
            unsafe { bindings::rdma_sleep_idle_ms(100) };
            waited_ms = waited_ms.saturating_add(100);
        }
        if waited_ms > 0 {
            slots.quiesce();
            crate::pr_info!(
                "kernel::rdma: QP {}: its requests came back after {} ms; destroying it\n",
                self.qpn(),
                waited_ms
            );
        }
    }

    fn drain(&self, which: Queues) -> Result {
        self.check_may_drain()?;
        let slots = self.exclusive();
        self.drain_queues(which, &slots);
        Ok(())
    }

    /// [`Qp::drain_sq`], for the QP's own work items. Sleeps.
    pub(super) fn drain_send(&self) -> Result {
        self.drain(Queues::Send)
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        // The work item that gives partly posted requests back uses the QP.
        self.shared().cancel_orphan_work();
        {
            let slots = self.exclusive();
            self.drain_queues(Queues::Both, &slots);
            self.wait_for_requests(&slots);
        }
        let qpn = self.qpn();
        if let Some(srq) = self.srq() {
            srq.detach(self.ptr);
        }
        self.detach_all();
        let ret = match &self.keep.on {
            Some(on) => {
                on.destroy_qp(self.ptr);
                0
            }
            // SAFETY: `ptr` is valid (invariant) and drained: no request is outstanding and no
            // completion handler will look at `shared` again (receives from an SRQ complete
            // through the SRQ).
            None => unsafe { bindings::ib_destroy_qp_user(self.ptr, core::ptr::null_mut()) },
        };
        if ret != 0 {
            // The QP still exists: keep everything it may still use, and its module.
            crate::pr_err!(
                "kernel::rdma: destroying QP {} failed ({}): it and what it holds are leaked\n",
                qpn,
                ret
            );
            return;
        }
        let keep = &self.keep;
        // A request the driver took only part of, if the work item did not give it back: the
        // device is done with it now.
        for orphan in keep.shared.take_orphans() {
            // SAFETY: The QP is destroyed: nothing refers to the request any more.
            unsafe { orphan.flush(&keep.send_cq) };
        }
        keep.send_cq.unreserve(self.sq_slots + 1);
        keep.recv_cq.unreserve(self.recv_reserved);
        // No handler of the requests' module runs for this QP any more; its hold goes last,
        // once nothing of the QP is left.
        let hold = keep.shared.owner.take();
        // SAFETY: Dropped once, here, after the QP is destroyed.
        unsafe { ManuallyDrop::drop(&mut self.keep) };
        drop(hold);
    }
}

impl<S: State> Qp<S> {
    /// Stops the QP for good and waits until every posted request has come back to its owner
    /// (`ib_drain_qp`); posts fail with `ESHUTDOWN` from now on. Concurrent callers all return
    /// once the drain is over. Dropping the QP drains it too. Sleeps.
    ///
    /// # Errors
    ///
    /// `EAGAIN` in atomic context or in a handler of one of the QP's CQs, where it would wait
    /// for itself, and in an rdma_cm event handler. A drain waits for the work items of the
    /// QP's CQs, which may be shared (`ib_cq_pool_get`) with other ULPs whose completion
    /// handlers take their own locks; under the id's handler lock that waiting would order
    /// every one of those locks after the handler locks of all ids (nvmet-rdma, which drains
    /// from its `release_work`, takes them in the other order). End a connection from a work
    /// item instead ([`DropOutside`](crate::rdma::defer::DropOutside)); a QP dropped in a
    /// handler is drained from one.
    pub fn drain(&self) -> Result {
        self.inner.drain(Queues::Both)
    }

    /// Stops the QP (it moves to the error state; posts fail with `ESHUTDOWN`) and waits until
    /// every send request has come back to its owner (`ib_drain_sq`). Receives still
    /// outstanding complete, flushed, on their own (a UD QP is drained whole). Sleeps.
    ///
    /// # Errors
    ///
    /// `EAGAIN` where [`Qp::drain`] would refuse.
    pub fn drain_sq(&self) -> Result {
        self.inner.drain(Queues::Send)
    }

    /// Stops the QP (it moves to the error state; posts fail with `ESHUTDOWN`) and waits until
    /// every receive request has come back to its owner (`ib_drain_rq`; a UD QP is drained
    /// whole). Sleeps.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a QP that takes its receives from an SRQ, whose receives are not the
    ///   QP's to drain.
    /// - `EAGAIN` where [`Qp::drain`] would refuse.
    pub fn drain_rq(&self) -> Result {
        if self.inner.srq().is_some() {
            return Err(EINVAL);
        }
        self.inner.drain(Queues::Recv)
    }
}
