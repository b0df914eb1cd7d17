// SPDX-License-Identifier: GPL-2.0

//! Posting work requests (`ib_post_send`, `ib_post_recv`, `ib_post_srq_recv`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! Every post runs the same steps: the request leaves its box ([`Wr::start`]), the owner's
//! closure names its memory, the list is checked against the queue, then, inside the queue's
//! post gate (which drain closes), the module of the request's handler is recorded and a slot
//! claimed before the driver sees it. The closure runs before the gate, so that it may do
//! anything, drain the queue included, without waiting for itself. Any context but hard
//! interrupts (the bookkeeping takes BH-disabling locks).

use super::{Completion, PostError, Queue, RecvOps, SendOps, Wr};
use crate::{
    bindings,
    error::{code::*, Error, Result},
    rdma::{
        qp::{reserve, CanRecv, CanSend, Qp},
        srq::Srq,
        sync::PostTicket,
    },
};
use core::sync::atomic::Ordering;

/// Gives `wr` back with `err` when `r` is an error.
macro_rules! or_cancel {
    ($r:expr, $p:expr) => {
        match $r {
            Ok(v) => v,
            Err(err) => {
                return Err(PostError {
                    err,
                    wr: $p.cancel(),
                })
            }
        }
    };
}

impl<S: CanSend> Qp<S> {
    /// Posts the operations `build` adds, chained, as one send request (`ib_post_send`).
    ///
    /// The operations may name only memory reachable from `T` (see [`wr`](super)); the request
    /// owns it until its completion. Only the last operation is signaled. Any context but hard
    /// interrupts (softirq included).
    ///
    /// If the driver takes only part of a chained request (a driver failure, logged), this
    /// returns `Ok`: the QP then refuses further posts with `EIO`, and a work item moves it to
    /// the error state, drains its send queue and gives the request back, flushed (whether or
    /// not the request owns the QP).
    ///
    /// # Errors
    ///
    /// The request was not posted and comes back in the [`PostError`], with everything it
    /// owns (`?` on it drops them; match it to keep them):
    ///
    /// - What `build` returns: the errors of the [`SendOps`] methods (`EINVAL`; `EBUSY` from
    ///   [`SendOps::reg_mr`] for an MR still registered or whose invalidation is under way, and
    ///   from [`SendOps::rw`] for an R/W context posted already), or its own.
    /// - `ENOMEM` when the operations do not fit in the free send slots.
    /// - `EINVAL` for no operation, an inline send longer than the QP's `max_inline`, more
    ///   memory pieces in one operation than its `send_sge`, an operation the transport does
    ///   not have (RDMA or atomics on UD, UD sends on RC), an R/W context of another QP, or a
    ///   request of another module than the QP's earlier ones.
    /// - `EOPNOTSUPP` for an operation only iWARP has ([`SendOps::read_inv`]) on another port.
    /// - `ESHUTDOWN` once the QP is drained.
    /// - `EIO` once a driver failure stopped the QP.
    /// - Otherwise what the driver's `post_send` returns for the first operation (on a
    ///   [`Cm`](crate::rdma::qp::Cm) QP not yet ready to send, see there).
    pub fn post_send<T: Completion>(
        &self,
        wr: Wr<T>,
        build: impl for<'a> FnOnce(&'a mut T, &mut SendOps<'a>) -> Result,
    ) -> Result<(), PostError<T>> {
        let inner = &*self.inner;
        let shared = inner.shared();
        let mut p = wr.start(Queue::Send);
        let mut ops = SendOps::new(inner.pd());
        // SAFETY: The reference is used only by `build`, which records DMA addresses and raw
        // pointers to objects owned by the request.
        or_cancel!(build(unsafe { p.data() }, &mut ops), p);
        or_cancel!(ops.check(inner), p);
        let n = ops.wqes();
        let _ticket: PostTicket<'_> = or_cancel!(shared.admit(p.owner()), p);
        or_cancel!(reserve(&shared.sq_used, n, inner.sq_slots), p);
        p.set_slots(n);
        shared.mark_posted();
        // Nothing of the request may be touched once the device has it: the MRs it registers
        // or invalidates change state now (and back if it is refused).
        ops.apply(p.settle());
        let head = ops.link(p.cqe(), p.failures_cqe());
        let mut bad: *const bindings::ib_send_wr = core::ptr::null();
        // SAFETY: `ptr` is valid; the list and its SGEs live in `ops` for the call (the driver
        // copies them); the memory belongs to the request, which the device owns from now on.
        let ret = unsafe { post_list(inner.ptr, head, &mut bad) };
        if ret == 0 {
            p.posted();
            return Ok(());
        }
        if bad == head {
            ops.revert();
            shared.sq_used.fetch_sub(n, Ordering::AcqRel);
            return Err(PostError {
                err: Error::from_errno(ret),
                wr: p.cancel(),
            });
        }
        // Part of the chain is on the device and names the request's memory: it must stay
        // where it is until the send queue is drained. The checks above make this a driver
        // failure.
        crate::pr_err!(
            "kernel::rdma: QP {}: the driver took part of a chained post ({}); the QP is stopped and the request comes back once its send queue is drained\n",
            self.qpn(),
            ret
        );
        shared.break_off(n, p.orphan());
        p.posted();
        Ok(())
    }
}

/// Posts the send list `head` on `qp` (`ib_post_send`), or, where a task armed the
/// fault-injection point of a partial post ([`partial_post`]), all of it but its last work
/// request, which is then reported refused (`EIO`), as a driver failure would.
///
/// # Safety
///
/// As for `ib_post_send`: `qp` is a valid QP and `head` a valid list whose memory may be given
/// to the device; the list's links may be changed for the call (they are restored).
unsafe fn post_list(
    qp: *mut bindings::ib_qp,
    head: *const bindings::ib_send_wr,
    bad: &mut *const bindings::ib_send_wr,
) -> i32 {
    #[cfg(CONFIG_FAULT_INJECTION)]
    {
        // SAFETY: Per the safety requirements.
        let injected = unsafe { partial_post(qp, head, bad) };
        if let Some(ret) = injected {
            return ret;
        }
    }
    // SAFETY: Per the safety requirements.
    unsafe { bindings::ib_post_send(qp, head, bad) }
}

/// The fault-injection point of a chained post: with a list of two work requests or more, and
/// when the point fires (only for a task that armed `fail_nth`: probability 0), posts the list
/// but its last work request and returns what a driver that refused that one would. What no
/// check can provoke on soft-RoCE (the checks before the post catch what it would refuse), for
/// the KUnit cases of a request the driver took only part of. `None` when it does not fire.
///
/// # Safety
///
/// As for [`post_list`].
#[cfg(CONFIG_FAULT_INJECTION)]
unsafe fn partial_post(
    qp: *mut bindings::ib_qp,
    head: *const bindings::ib_send_wr,
    bad: &mut *const bindings::ib_send_wr,
) -> Option<i32> {
    let mut prev = head.cast_mut();
    // SAFETY: `head` is a valid list (safety requirements): each `next` is null or the next
    // valid entry.
    let mut last = unsafe { (*prev).next };
    if last.is_null() {
        return None;
    }
    // SAFETY: As above.
    while !unsafe { (*last).next }.is_null() {
        prev = last;
        // SAFETY: As above.
        last = unsafe { (*last).next };
    }
    // SAFETY: Reads only the calling context; any context.
    if !unsafe { bindings::rdma_fail_partial_post() } {
        return None;
    }
    // SAFETY: The list may be relinked for the call (safety requirements); it is restored below.
    unsafe { (*prev).next = core::ptr::null_mut() };
    // SAFETY: `qp` is valid and the shortened list is still valid.
    let ret = unsafe { bindings::ib_post_send(qp, head, bad) };
    // SAFETY: As above.
    unsafe { (*prev).next = last };
    Some(if ret != 0 {
        ret
    } else {
        *bad = last;
        EIO.to_errno()
    })
}

impl<S: CanRecv> Qp<S> {
    /// Posts a receive (`ib_post_recv`). `build` names its memory, which must be reachable from
    /// `T` alone (see [`wr`](super)). Any context but hard interrupts.
    ///
    /// # Errors
    ///
    /// The request was not posted and comes back in the [`PostError`], with everything it
    /// owns (`?` on it drops them; match it to keep them):
    ///
    /// - What `build` returns: the errors of [`RecvOps::buf`] (`EINVAL`), or its own.
    /// - `ENOMEM` when `recv_depth` receives are outstanding.
    /// - `EINVAL` for an empty scatter list, more entries than the QP takes, a request of
    ///   another module than the QP's earlier ones, or a QP that takes its receives from an
    ///   SRQ.
    /// - `ESHUTDOWN` once the QP is drained.
    /// - `EIO` once a driver failure stopped the QP (a chained send the driver took only part
    ///   of: see [`Qp::post_send`]).
    /// - Otherwise what the driver's `post_recv` returns.
    pub fn post_recv<T: Completion>(
        &self,
        wr: Wr<T>,
        build: impl for<'a> FnOnce(&'a mut T, &mut RecvOps<'a>) -> Result,
    ) -> Result<(), PostError<T>> {
        let inner = &*self.inner;
        let shared = inner.shared();
        let mut p = wr.start(Queue::Recv);
        let mut ops = RecvOps::new(inner.pd());
        // SAFETY: The reference is used only by `build`, which records DMA addresses.
        or_cancel!(build(unsafe { p.data() }, &mut ops), p);
        // A QP with an SRQ has no receive queue (its `recv_sge` is 0).
        or_cancel!(ops.check(inner.caps.recv_sge), p);
        let _ticket: PostTicket<'_> = or_cancel!(shared.admit(p.owner()), p);
        or_cancel!(reserve(&shared.rq_used, 1, inner.caps.recv_depth), p);
        p.set_slots(1);
        shared.mark_posted();
        let rwr = ops.raw(p.cqe());
        // SAFETY: `ptr` is valid; `rwr` and its scatter list are valid for the call (the driver
        // copies them); the memory belongs to the request, which the device owns from now on.
        let ret = unsafe { bindings::ib_post_recv(inner.ptr, &rwr, core::ptr::null_mut()) };
        if ret != 0 {
            shared.rq_used.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError {
                err: Error::from_errno(ret),
                wr: p.cancel(),
            });
        }
        p.posted();
        Ok(())
    }
}

impl Srq {
    /// Posts a receive on the SRQ (`ib_post_srq_recv`); whichever attached QP takes it
    /// completes it. `build` names its memory, which must be reachable from `T` alone. Any
    /// context but hard interrupts.
    ///
    /// # Errors
    ///
    /// The request was not posted and comes back in the [`PostError`], with everything it
    /// owns (`?` on it drops them; match it to keep them):
    ///
    /// - What `build` returns: the errors of [`RecvOps::buf`] (`EINVAL`), or its own.
    /// - `ENOMEM` when `depth` receives are outstanding.
    /// - `EINVAL` for an empty scatter list, more than `sge` entries, or a request of another
    ///   module than the SRQ's earlier ones.
    /// - `ESHUTDOWN` once the SRQ is being destroyed.
    /// - Otherwise what the driver's `post_srq_recv` returns.
    pub fn post_recv<T: Completion>(
        &self,
        wr: Wr<T>,
        build: impl for<'a> FnOnce(&'a mut T, &mut RecvOps<'a>) -> Result,
    ) -> Result<(), PostError<T>> {
        let shared = self.shared();
        let mut p = wr.start(Queue::Srq);
        let mut ops = RecvOps::new(self.pd());
        // SAFETY: The reference is used only by `build`, which records DMA addresses.
        or_cancel!(build(unsafe { p.data() }, &mut ops), p);
        or_cancel!(ops.check(self.sge()), p);
        let _ticket: PostTicket<'_> = or_cancel!(shared.admit(p.owner()), p);
        if !self.claim_slot() {
            return Err(PostError {
                err: ENOMEM,
                wr: p.cancel(),
            });
        }
        // Room was claimed above, so a free slot exists.
        let Some(index) = self.record(p.orphan()) else {
            return Err(PostError {
                err: ENOMEM,
                wr: p.cancel(),
            });
        };
        p.set_slots(1);
        p.set_srq(shared, index);
        let rwr = ops.raw(p.cqe());
        // SAFETY: `ptr` is valid; `rwr` and its scatter list are valid for the call (the driver
        // copies them); the memory belongs to the request, which the device owns from now on.
        let ret = unsafe { bindings::ib_post_srq_recv(self.as_raw(), &rwr, core::ptr::null_mut()) };
        if ret != 0 {
            self.unrecord(index);
            return Err(PostError {
                err: Error::from_errno(ret),
                wr: p.cancel(),
            });
        }
        p.posted();
        Ok(())
    }
}
