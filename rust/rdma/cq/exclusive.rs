// SPDX-License-Identifier: GPL-2.0

//! A CQ processed by kernel::rdma itself, outside the core's polling: its poller slot taken
//! ([`Exclusive`]) to quiesce it or poll it directly, and requests handed back with a flush
//! completion as one of its handlers would ([`Orphan`]).

use super::{try_poll, Cq, PollContext};
use crate::bindings;
use crate::rdma::sync::might_sleep;
use core::sync::atomic::Ordering;

impl Cq {
    /// Takes the CQ's poller slot for the caller, waiting for the current holder (every other
    /// direct poller gets `Ok(0)` meanwhile): the caller may then process the CQ itself. Sleeps:
    /// process context, not one of the CQ's handlers.
    ///
    /// Callers that need the slots of two CQs take them in the order of [`Cq::slot_key`], and
    /// once for two shares of one pool CQ (one slot, one key).
    pub(crate) fn exclusive(&self) -> Exclusive<'_> {
        might_sleep();
        let waiting = self.raw.shared().map(|s| &s.waiting);
        if let Some(w) = waiting {
            w.fetch_add(1, Ordering::AcqRel);
        }
        while !try_poll(self.raw.slot()) {
            // SAFETY: Process context (`might_sleep` above).
            unsafe { bindings::msleep(1) };
        }
        if let Some(w) = waiting {
            w.fetch_sub(1, Ordering::AcqRel);
        }
        Exclusive { cq: self }
    }

    /// Identifies the CQ's poller slot: the order in which to take two CQs' slots. Two CQs have
    /// the same key only if they are one (two shares of one pool CQ).
    pub(crate) fn slot_key(&self) -> usize {
        core::ptr::from_ref(self.raw.slot()) as usize
    }

    /// [`Exclusive::quiesce`], with the poller slot taken and given back.
    pub(crate) fn quiesce(&self) {
        self.exclusive().quiesce();
    }

    /// Runs `f` as a handler of this CQ would run: with bottom halves disabled for a softirq
    /// CQ. For handing requests back outside the core's polling. Process context.
    pub(crate) fn as_handler(&self, f: impl FnOnce()) {
        if self.raw.poll == PollContext::Softirq {
            // SAFETY: Paired with `local_bh_enable` below.
            unsafe { bindings::local_bh_disable() };
            f();
            // SAFETY: Paired with `local_bh_disable` above.
            unsafe { bindings::local_bh_enable() };
        } else {
            f();
        }
    }
}

/// The poller slot of a CQ, held (see [`Cq::exclusive`]); dropping it gives the slot back.
pub(crate) struct Exclusive<'a> {
    cq: &'a Cq,
}

impl Exclusive<'_> {
    /// Processes up to `budget` completions of a direct CQ here; nothing for other CQs, whose
    /// completions their poller processes.
    pub(crate) fn poll(&self, budget: i32) {
        if self.cq.raw.poll == PollContext::Direct {
            // SAFETY: A valid direct CQ (invariant), whose poller slot is ours.
            unsafe { bindings::ib_process_cq_direct(self.cq.raw.ptr, budget) };
        }
    }

    /// Processes, in the caller's context, every completion in the CQ, with its `irq_poll` or
    /// work item disabled meanwhile (direct pollers are kept out by the slot), then re-arms it
    /// as its poller would. When it returns, no handler of a completion that was in the CQ is
    /// running or still to run. Handlers run with bottom halves disabled for softirq CQs, as
    /// they do from `irq_poll`. Sleeps.
    pub(crate) fn quiesce(&self) {
        // SAFETY: `ptr` is valid; process context; no direct poller runs (the slot is ours).
        unsafe { bindings::rdma_cq_quiesce(self.cq.raw.ptr) };
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.cq
            .raw
            .slot()
            .store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// A posted request, type-erased, that kernel::rdma gives back to its owner itself, with a
/// flush completion, when the core cannot: a receive left on a destroyed SRQ, a chained send
/// the driver took only part of.
pub(crate) struct Orphan {
    pub(crate) raw: *mut crate::ffi::c_void,
    pub(crate) flush: unsafe fn(*mut crate::ffi::c_void),
}

// SAFETY: The request behind `raw` is `Send` (every `Completion` is) and is only handed back.
unsafe impl Send for Orphan {}

impl Orphan {
    /// Gives the request back to its owner as flushed, as a handler of `cq` would.
    ///
    /// # Safety
    ///
    /// Nothing posted may refer to the request any more, and no completion of it may be left
    /// to dispatch.
    pub(crate) unsafe fn flush(self, cq: &Cq) {
        // SAFETY: Per the safety requirements, the request is the caller's to give back, once.
        cq.as_handler(|| unsafe { (self.flush)(self.raw) });
    }
}
