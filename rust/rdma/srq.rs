// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (`struct ib_srq`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! An SRQ is one pool of receive requests that any number of QPs take their receives from, so
//! that a server with many connections does not keep a full receive queue per connection. QPs
//! are attached at creation ([`Qp::new_with_srq`](super::qp::Qp::new_with_srq)) and report
//! their receives to the SRQ's CQ; receives are posted with
//! [`Srq::post_recv`].
//!
//! Two lifetime rules that C ULPs get wrong are kept here:
//!
//! - Moving a QP to the error state flushes its own queues, but not an SRQ: receives still on
//!   the SRQ when it is destroyed never complete. The SRQ therefore records every request
//!   posted on it; when it is dropped, it destroys the SRQ, processes what is left in its CQ
//!   (with every other poller of the CQ excluded), and gives each request still recorded back to
//!   its owner with [`WcStatus::WrFlushErr`](super::cq::WcStatus::WrFlushErr), as a handler of
//!   the CQ would be called, like a QP flush would.
//! - A receive taken from an SRQ may complete after the QP that consumed it was destroyed
//!   (draining a QP with an SRQ drains only its send queue). The completion's
//!   [`Wc::qp_num`](super::cq::Wc::qp_num) is looked up among the QPs still attached, so it is
//!   never read from a destroyed QP.
//!
//! The SRQ holds an `Arc` of its PD and CQ, and each QP attached to it an `Arc` of the SRQ, so
//! QPs are destroyed before the SRQ and the SRQ before its CQ. A request whose owner keeps an
//! `Arc<Srq>` keeps the SRQ alive while it is posted: such a cycle leaks the SRQ, and makes the
//! unloading of the owner's module wait for it ([`owner`](super::owner)).
//!
//! # Examples
//!
//! ```
//! use kernel::rdma::{cq::{Cq, PollContext}, device::Device, mr::Access, pd::Pd, qp::*, srq::Srq};
//!
//! fn two_qps_one_srq(dev: &Device) -> Result<(Qp<Init>, Qp<Init>)> {
//!     let pd = Pd::new(dev)?;
//!     let cq = Cq::new(dev, 256, 0, PollContext::Softirq)?;
//!     let srq = Srq::new(&pd, &cq, 64, 1)?;
//!     let caps = QpCaps { send_depth: 16, ..QpCaps::default() };
//!     let a = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?;
//!     let b = Qp::new_with_srq(&pd, QpType::Rc, &cq, &srq, &caps)?;
//!     Ok((a.to_init(1, Access::NONE)?, b.to_init(1, Access::NONE)?))
//! }
//! ```

use super::{
    cq::{Cq, Orphan},
    defer::{Deferred, Teardown},
    event::{AsyncHandler, EventSlot},
    owner::{Owner, OwnerCell},
    pd::Pd,
    sync::{atomic, sleepable, PostGate, PostTicket, SpinLockBh},
};
use crate::{
    alloc::{
        flags::{GFP_ATOMIC, GFP_KERNEL},
        KBox, KVec,
    },
    bindings,
    error::{code::EINVAL, from_err_ptr, Error, Result},
    new_spinlock_bh,
    prelude::*,
    sync::Arc,
};
use core::{
    mem::ManuallyDrop,
    pin::Pin,
    sync::atomic::{AtomicU32, Ordering},
};

/// An index of the bookkeeping table: a posted request, or a link of the free list.
enum Slot {
    Free { next: Option<u32> },
    Posted(Orphan),
}

/// What the SRQ records under its lock.
struct State {
    /// One slot per request the SRQ can hold.
    slots: KVec<Slot>,
    /// The first free slot.
    free: Option<u32>,
    /// The attached QPs, as (`ib_qp` address, QP number); `None` for reusable places.
    qps: KVec<Option<(usize, u32)>>,
}

impl State {
    /// Records `entry` in a free slot and returns its index.
    fn insert(&mut self, entry: Orphan) -> Option<u32> {
        let index = self.free?;
        let slot = self.slots.get_mut(index as usize)?;
        let Slot::Free { next } = *slot else {
            return None;
        };
        *slot = Slot::Posted(entry);
        self.free = next;
        Some(index)
    }

    /// Takes the request recorded at `index`, freeing the slot.
    fn remove(&mut self, index: u32) -> Option<Orphan> {
        let slot = self.slots.get_mut(index as usize)?;
        if let Slot::Free { .. } = slot {
            return None;
        }
        let Slot::Posted(entry) = core::mem::replace(slot, Slot::Free { next: self.free }) else {
            return None;
        };
        self.free = Some(index);
        Some(entry)
    }

    /// The number of attached QP `qp`, or 0 if it is not attached.
    fn qp_num(&self, qp: usize) -> u32 {
        self.qps
            .iter()
            .flatten()
            .find(|&&(addr, _)| addr == qp)
            .map_or(0, |&(_, n)| n)
    }
}

// SAFETY: The QP addresses are used only as keys; the requests are `Send`.
unsafe impl Send for State {}

/// The SRQ's bookkeeping, reached from completions through [`Inner::srq`](super::wr).
#[pin_data]
pub(crate) struct Shared {
    #[pin]
    state: SpinLockBh<State>,
    /// Requests posted and not yet completed.
    used: AtomicU32,
    /// Closed when the SRQ is dropped, which waits for the posts under way.
    pub(crate) gate: PostGate,
    /// The module whose requests are posted here.
    pub(crate) owner: OwnerCell,
    /// The owner's handler of the SRQ's asynchronous events.
    events: EventSlot,
}

/// The `event_handler` of every SRQ. Not generic, so built into the kernel.
///
/// # Safety
///
/// Called by the driver with a valid event of an SRQ created by this module, whose
/// `srq_context` is its `Shared`.
unsafe extern "C" fn srq_event(event: *mut bindings::ib_event, context: *mut core::ffi::c_void) {
    // SAFETY: `context` is the SRQ's `Shared`, freed only after the SRQ is destroyed, after
    // which no event is raised.
    let shared = unsafe { &*context.cast::<Shared>() };
    // SAFETY: `event` is valid for the call.
    unsafe { shared.events.raise(event) };
}

/// What the device reports of an SRQ (`struct ib_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receive requests the device holds at most (at least the depth asked for).
    pub max_wr: u32,
    /// Scatter entries per receive at most.
    pub max_sge: u32,
    /// The armed limit, 0 when none is armed.
    pub limit: u32,
}

impl Shared {
    /// Lets a post in: `ESHUTDOWN` once the SRQ is being destroyed, `EINVAL` for a request of
    /// another module than the SRQ's earlier ones.
    pub(crate) fn admit(&self, owner: Option<Owner>) -> Result<PostTicket<'_>> {
        let ticket = self.gate.enter()?;
        self.owner.claim(owner)?;
        Ok(ticket)
    }
}

/// Records the completion of the request at `index` and returns the number of the QP that
/// consumed it, if that QP is still attached (0 otherwise).
///
/// # Safety
///
/// `shared` must be the bookkeeping of the SRQ the request was posted on, and the request must
/// be completing (called once, from its completion).
pub(crate) unsafe fn complete(shared: *const Shared, index: u32, qp: *mut bindings::ib_qp) -> u32 {
    // SAFETY: The SRQ outlives the dispatch of its requests' completions (`RawSrq::drop`
    // quiesces its CQ before freeing `shared`).
    let shared = unsafe { &*shared };
    let qp_num = {
        let mut st = shared.state.lock();
        st.remove(index);
        st.qp_num(qp as usize)
    };
    shared.used.fetch_sub(1, Ordering::AcqRel);
    qp_num
}

/// A shared receive queue.
pub struct Srq {
    raw: Deferred<RawSrq>,
}

/// The C object of an [`Srq`] and its bookkeeping; dropping it destroys the SRQ and gives back
/// the requests left on it.
///
/// # Invariants
///
/// `ptr` is an SRQ created with `ib_create_srq_user` on `pd` with room for `depth` requests
/// of `sge` entries, whose `srq_context` is `shared`, and which has `depth` entries of `cq`
/// reserved. It is valid until `RawSrq` is dropped.
struct RawSrq {
    ptr: *mut bindings::ib_srq,
    // The next three are dropped by hand: they are leaked if the SRQ cannot be destroyed.
    shared: ManuallyDrop<Pin<KBox<Shared>>>,
    cq: ManuallyDrop<Arc<Cq>>,
    pd: ManuallyDrop<Arc<Pd>>,
    depth: u32,
    sge: u32,
}

// SAFETY: SRQ verbs may be called from any thread; the driver locks its queue and the
// bookkeeping is under a lock.
unsafe impl Send for RawSrq {}
// SAFETY: Posting through `&Srq` is safe to do concurrently (see `Send`).
unsafe impl Sync for RawSrq {}

impl Teardown for RawSrq {
    fn must_defer(&self) -> bool {
        // The teardown processes the CQ with its other pollers excluded: not from one of them.
        atomic()
            || self.cq.in_handler()
            || super::cq::in_any_handler()
            || self.shared.events.in_delivery()
    }
}

impl Srq {
    /// Creates an SRQ on `pd` for `depth` receives of up to `sge` scatter entries, whose
    /// receives complete on `cq` (`ib_create_srq`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` when `depth` is zero or above the device's `max_srq_wr` (a device without
    ///   SRQs has 0), `sge` is zero or above the device's `max_srq_sge` (or
    ///   [`MAX_RECV_SGE`](super::dma::MAX_RECV_SGE)), `cq` belongs to another device or has
    ///   fewer than `depth` free entries.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - Otherwise what the driver's `create_srq` returns.
    pub fn new(pd: &Arc<Pd>, cq: &Arc<Cq>, depth: u32, sge: u32) -> Result<Arc<Self>> {
        sleepable()?;
        let attrs = pd.device().attrs();
        if depth == 0 || depth > attrs.max_srq_wr() {
            return Err(EINVAL);
        }
        let max_sge = attrs.max_srq_sge().min(super::dma::MAX_RECV_SGE as u32);
        if sge == 0 || sge > max_sge {
            return Err(EINVAL);
        }
        if cq.device().as_raw() != pd.device().as_raw() {
            return Err(EINVAL);
        }
        let mut slots = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
        for i in 1..=depth {
            let next = (i < depth).then_some(i);
            slots.push(Slot::Free { next }, GFP_KERNEL)?;
        }
        let state = State {
            slots,
            free: Some(0),
            qps: KVec::new(),
        };
        let shared = KBox::pin_init(
            pin_init!(Shared {
                state <- new_spinlock_bh!(state, "rdma_srq"),
                used: AtomicU32::new(0),
                gate: PostGate::new(),
                owner: OwnerCell::new(),
                events: EventSlot::new(),
            }),
            GFP_KERNEL,
        )?;
        cq.reserve(depth)?;
        // SAFETY: All-zeroes is the "nothing requested" value of this plain C struct.
        let mut init: bindings::ib_srq_init_attr = unsafe { core::mem::zeroed() };
        init.srq_context = (&raw const *shared).cast_mut().cast();
        init.event_handler = Some(srq_event);
        init.attr.max_wr = depth;
        init.attr.max_sge = sge;
        init.srq_type = bindings::ib_srq_type_IB_SRQT_BASIC;
        // SAFETY: `pd` is valid and `init` fully initialised; a kernel SRQ has no uobject or
        // udata; `shared` outlives the SRQ (freed after `ib_destroy_srq_user` in `drop`).
        let ptr = unsafe {
            bindings::ib_create_srq_user(
                pd.as_raw(),
                &mut init,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        };
        let ptr = match from_err_ptr(ptr) {
            Ok(p) => p,
            Err(e) => {
                cq.unreserve(depth);
                return Err(e);
            }
        };
        // INVARIANT: Just created as described, with the CQ entries reserved above. On
        // failure below, what is built is dropped, which destroys the SRQ and gives the entries
        // back.
        let raw = Deferred::new(RawSrq {
            ptr,
            shared: ManuallyDrop::new(shared),
            cq: ManuallyDrop::new(cq.clone()),
            pd: ManuallyDrop::new(pd.clone()),
            depth,
            sge,
        })?;
        Ok(Arc::new(Self { raw }, GFP_KERNEL)?)
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_srq {
        self.raw.ptr
    }

    /// The CQ the SRQ's receives complete on.
    pub fn cq(&self) -> &Arc<Cq> {
        &self.raw.cq
    }

    /// The PD of the SRQ.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.raw.pd
    }

    /// Receive requests the SRQ holds at most.
    pub fn depth(&self) -> u32 {
        self.raw.depth
    }

    /// Scatter entries of one receive request at most.
    pub(crate) fn sge(&self) -> u32 {
        self.raw.sge
    }

    /// Gives the SRQ a handler of its asynchronous events ([`AsyncHandler`]), once, right after
    /// creating it. The handler lives until the SRQ is destroyed. May sleep.
    ///
    /// # Errors
    ///
    /// - `EBUSY` if the SRQ has a handler already.
    /// - `EAGAIN` in atomic context.
    /// - `ENOSPC` when the module of `H` cannot be tracked ([`owner`](super::owner)).
    /// - `ENOMEM` when an allocation fails.
    pub fn set_event_handler<H: AsyncHandler>(&self, handler: Arc<H>) -> Result {
        self.raw.shared.events.set(handler)
    }

    /// Arms the SRQ's limit (`ib_modify_srq` of `IB_SRQ_LIMIT`): when fewer than `limit`
    /// receives are left on it, the device raises
    /// [`AsyncEvent::SrqLimitReached`](super::event::AsyncEvent::SrqLimitReached) once, and
    /// disarms it. May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for 0 or a limit not below the depth.
    /// - `EAGAIN` in atomic context.
    /// - `EOPNOTSUPP` when the device cannot modify SRQs.
    /// - Otherwise what the driver's `modify_srq` returns.
    pub fn arm_limit(&self, limit: u32) -> Result {
        sleepable()?;
        if limit == 0 || limit >= self.raw.depth {
            return Err(EINVAL);
        }
        // SAFETY: All-zeroes is a valid `ib_srq_attr`; only `srq_limit` is read for this mask.
        let mut attr: bindings::ib_srq_attr = unsafe { core::mem::zeroed() };
        attr.srq_limit = limit;
        // SAFETY: `ptr` is valid (invariant) and `attr` initialised.
        let ret = unsafe {
            bindings::ib_modify_srq(
                self.raw.ptr,
                &mut attr,
                bindings::ib_srq_attr_mask_IB_SRQ_LIMIT,
            )
        };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    /// What the device reports of the SRQ (`ib_query_srq`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EAGAIN` in atomic context.
    /// - `EOPNOTSUPP` when the device cannot query SRQs.
    /// - Otherwise what the driver's `query_srq` returns.
    pub fn query(&self) -> Result<SrqAttr> {
        sleepable()?;
        // SAFETY: All-zeroes is a valid `ib_srq_attr`, filled in by the driver.
        let mut attr: bindings::ib_srq_attr = unsafe { core::mem::zeroed() };
        // SAFETY: `ptr` is valid (invariant) and `attr` writable.
        let ret = unsafe { bindings::ib_query_srq(self.raw.ptr, &mut attr) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(SrqAttr {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            limit: attr.srq_limit,
        })
    }

    /// Receive requests posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.raw.shared.used.load(Ordering::Acquire)
    }

    /// The bookkeeping that completions of requests posted here reach.
    pub(crate) fn shared(&self) -> &Shared {
        &self.raw.shared
    }

    /// Claims room for one more request; `false` when `depth` are outstanding. Any context.
    pub(crate) fn claim_slot(&self) -> bool {
        super::sync::claim(&self.raw.shared.used, 1, self.raw.depth)
    }

    /// Records a request about to be posted, or gives its room back (`None`) if no slot is
    /// free. Any context but hard interrupts.
    pub(crate) fn record(&self, entry: Orphan) -> Option<u32> {
        let index = self.raw.shared.state.lock().insert(entry);
        if index.is_none() {
            self.raw.shared.used.fetch_sub(1, Ordering::AcqRel);
        }
        index
    }

    /// Forgets the request at `index`, which the driver did not take, and gives its room back.
    pub(crate) fn unrecord(&self, index: u32) {
        self.raw.shared.state.lock().remove(index);
        self.raw.shared.used.fetch_sub(1, Ordering::AcqRel);
    }

    /// Records a QP created on the SRQ, so that its completions carry its number.
    pub(crate) fn attach(&self, qp: *mut bindings::ib_qp, qpn: u32) -> Result {
        let mut st = self.raw.shared.state.lock();
        let entry = Some((qp as usize, qpn));
        if let Some(place) = st.qps.iter_mut().find(|p| p.is_none()) {
            *place = entry;
        } else {
            st.qps.push(entry, GFP_ATOMIC)?;
        }
        Ok(())
    }

    /// Forgets a QP about to be destroyed: completions dispatched from now on do not look at it.
    pub(crate) fn detach(&self, qp: *mut bindings::ib_qp) {
        let mut st = self.raw.shared.state.lock();
        if let Some(place) = st
            .qps
            .iter_mut()
            .find(|p| matches!(p, Some((a, _)) if *a == qp as usize))
        {
            *place = None;
        }
    }
}

impl Drop for RawSrq {
    fn drop(&mut self) {
        let shared: &Shared = &self.shared;
        shared.gate.close();
        // SAFETY: `ptr` is valid (invariant); no QP is attached (each holds an `Arc<Srq>`).
        let ret = unsafe { bindings::ib_destroy_srq_user(self.ptr, core::ptr::null_mut()) };
        if ret != 0 {
            // The device may still use the posted requests: leave them, the bookkeeping, and the
            // hold on their module, whose unloading then waits, loudly, for ever.
            crate::pr_err!(
                "kernel::rdma: destroying SRQ failed: {}; its {} requests and bookkeeping are leaked\n",
                ret,
                shared.used.load(Ordering::Acquire)
            );
            return;
        }
        // Completions of requests consumed before the SRQ went away may still be in the CQ;
        // process them now, so that what is recorded afterwards was never consumed.
        self.cq.quiesce();
        for i in 0..self.depth {
            let taken = shared.state.lock().remove(i);
            if let Some(orphan) = taken {
                shared.used.fetch_sub(1, Ordering::AcqRel);
                // SAFETY: The SRQ is destroyed and its CQ has no completion of the request left:
                // nothing refers to it, and it is given back exactly once.
                unsafe { orphan.flush(&self.cq) };
            }
        }
        self.cq.unreserve(self.depth);
        // No callback of the requests' module is called for this SRQ any more; its hold goes
        // last.
        let hold = shared.owner.take();
        // SAFETY: Each is dropped once, here; the SRQ and its completions are gone.
        unsafe {
            ManuallyDrop::drop(&mut self.shared);
            ManuallyDrop::drop(&mut self.cq);
            ManuallyDrop::drop(&mut self.pd);
        }
        drop(hold);
    }
}
