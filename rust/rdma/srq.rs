// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (`struct ib_srq`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! An SRQ is one pool of receive requests that any number of QPs take their receives from, so
//! that a server with many connections does not keep a full receive queue per connection. QPs
//! are attached at creation ([`Qp::new_with_srq`](super::qp::Qp::new_with_srq)) and report
//! their receives to the SRQ's CQ.
//!
//! Two lifetime rules that C ULPs get wrong are kept here:
//!
//! - Moving a QP to the error state flushes its own queues, but not an SRQ: receives still on
//!   the SRQ when it is destroyed never complete. The SRQ therefore records every request
//!   posted on it; when it is dropped, it destroys the SRQ, processes what is left in its CQ,
//!   and gives each request still recorded back to its owner with
//!   [`WcStatus::WrFlushErr`](super::cq::WcStatus::WrFlushErr), like a QP flush would.
//! - A receive taken from an SRQ may complete after the QP that consumed it was destroyed
//!   (draining a QP with an SRQ drains only its send queue). The completion's
//!   [`Wc::qp_num`](super::cq::Wc::qp_num) is looked up among the QPs still attached, so it is
//!   never read from a destroyed QP.
//!
//! The SRQ holds an `Arc` of its PD and CQ, and each QP attached to it an `Arc` of the SRQ, so
//! QPs are destroyed before the SRQ and the SRQ before its CQ. A request whose owner keeps an
//! `Arc<Srq>` keeps the SRQ alive while it is posted: such a cycle leaks the SRQ.
//!
//! # Examples
//!
//! ```
//! use kernel::rdma::{cq::{Cq, PollContext}, device::Device, pd::Pd, qp::*, srq::Srq};
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
    cq::Cq,
    pd::Pd,
    sync::{PostGate, SpinLockBh},
    wr::{Completion, PostError, Queue, RecvOps, Wr},
};
use crate::{
    alloc::{
        flags::{GFP_ATOMIC, GFP_KERNEL},
        KBox, KVec,
    },
    bindings,
    error::{
        code::{EINVAL, ENOMEM},
        from_err_ptr, Error, Result,
    },
    ffi::c_void,
    new_spinlock_bh,
    prelude::*,
    sync::Arc,
};
use core::{
    mem::ManuallyDrop,
    pin::Pin,
    sync::atomic::{AtomicU32, Ordering},
};

/// A request posted on the SRQ, type-erased, with the function that flushes it to its owner.
struct Entry {
    raw: *mut c_void,
    flush: unsafe fn(*mut c_void),
}

/// An index of the bookkeeping table: a posted request, or a link of the free list.
enum Slot {
    Free { next: Option<u32> },
    Posted(Entry),
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
    fn insert(&mut self, entry: Entry) -> Option<u32> {
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
    fn remove(&mut self, index: u32) -> Option<Entry> {
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

// SAFETY: The raw pointers are requests owned by the SRQ's bookkeeping and QP addresses used
// only as keys; they are touched under the lock from any CPU.
unsafe impl Send for State {}

/// The SRQ's bookkeeping, reached from completions through [`Inner::srq`](super::wr).
#[pin_data]
pub(crate) struct Shared {
    #[pin]
    state: SpinLockBh<State>,
    /// Requests posted and not yet completed.
    used: AtomicU32,
    /// Closed when the SRQ is dropped, which waits for the posts under way.
    gate: PostGate,
}

/// Records the completion of the request at `index` and returns the number of the QP that
/// consumed it, if that QP is still attached (0 otherwise).
///
/// # Safety
///
/// `shared` must be the bookkeeping of the SRQ the request was posted on, and the request must
/// be completing (called once, from its completion).
pub(crate) unsafe fn complete(shared: *const Shared, index: u32, qp: *mut bindings::ib_qp) -> u32 {
    // SAFETY: The SRQ outlives the dispatch of its requests' completions (`Srq::drop`
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
///
/// # Invariants
///
/// `ptr` is an SRQ created with `ib_create_srq_user` on `pd` with room for `depth` requests
/// of `sge` entries, whose `srq_context` is `shared`, and which has `depth` entries of `cq`
/// reserved. It is valid until `Srq` is dropped.
pub struct Srq {
    ptr: *mut bindings::ib_srq,
    shared: ManuallyDrop<Pin<KBox<Shared>>>,
    depth: u32,
    sge: u32,
    cq: Arc<Cq>,
    pd: Arc<Pd>,
}

// SAFETY: SRQ verbs may be called from any thread; the driver locks its queue and the
// bookkeeping is under a lock.
unsafe impl Send for Srq {}
// SAFETY: Posting through `&Srq` is safe to do concurrently (see `Send`).
unsafe impl Sync for Srq {}

impl Srq {
    /// Creates an SRQ on `pd` for `depth` receives of up to `sge` scatter entries, whose
    /// receives complete on `cq` (`ib_create_srq`). May sleep.
    ///
    /// `EINVAL` when `depth` is zero or above the device's `max_srq_wr`, `sge` is zero or above
    /// the device's `max_srq_sge` (or [`MAX_RECV_SGE`](super::wr::MAX_RECV_SGE)), `cq` belongs
    /// to another device or has fewer than `depth` free entries.
    pub fn new(pd: &Arc<Pd>, cq: &Arc<Cq>, depth: u32, sge: u32) -> Result<Arc<Self>> {
        let attrs = pd.device().attrs();
        if depth == 0 || depth > attrs.max_srq_wr() {
            return Err(EINVAL);
        }
        let max_sge = attrs.max_srq_sge().min(super::wr::MAX_RECV_SGE as u32);
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
            }),
            GFP_KERNEL,
        )?;
        cq.reserve(depth)?;
        // SAFETY: All-zeroes is the "nothing requested" value of this plain C struct.
        let mut init: bindings::ib_srq_init_attr = unsafe { core::mem::zeroed() };
        init.srq_context = (&raw const *shared).cast_mut().cast();
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
        // INVARIANT: Just created as described, with the CQ entries reserved above.
        let srq = Self {
            ptr,
            shared: ManuallyDrop::new(shared),
            depth,
            sge,
            cq: cq.clone(),
            pd: pd.clone(),
        };
        // On failure `srq` is dropped, which destroys the SRQ and gives the entries back.
        Ok(Arc::new(srq, GFP_KERNEL)?)
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_srq {
        self.ptr
    }

    /// The CQ the SRQ's receives complete on.
    pub fn cq(&self) -> &Arc<Cq> {
        &self.cq
    }

    /// The PD of the SRQ.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// Receive requests the SRQ holds at most.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Receive requests posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.shared.used.load(Ordering::Acquire)
    }

    /// Records a QP created on the SRQ, so that its completions carry its number.
    pub(crate) fn attach(&self, qp: *mut bindings::ib_qp, qpn: u32) -> Result {
        let mut st = self.shared.state.lock();
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
        let mut st = self.shared.state.lock();
        if let Some(place) = st
            .qps
            .iter_mut()
            .find(|p| matches!(p, Some((a, _)) if *a == qp as usize))
        {
            *place = None;
        }
    }

    /// Posts a receive on the SRQ (`ib_post_srq_recv`); whichever attached QP takes it
    /// completes it. `build` names its buffers, which must be inside `T`.
    ///
    /// On failure the request comes back in the [`PostError`]: `ENOMEM` when `depth` receives
    /// are outstanding, `EINVAL` for an empty scatter list or more than `sge` entries,
    /// `ESHUTDOWN` once the SRQ is being destroyed. Any context.
    pub fn post_recv<T: Completion>(
        &self,
        wr: Wr<T>,
        build: impl for<'a> FnOnce(&'a T, &mut RecvOps<'a>) -> Result,
    ) -> Result<(), PostError<T>> {
        let shared: &Shared = &self.shared;
        let _ticket = match shared.gate.enter() {
            Ok(t) => t,
            Err(err) => return Err(PostError { err, wr }),
        };
        let mut p = wr.start(Queue::Srq);
        let mut ops = RecvOps::new();
        // SAFETY: The reference is used only by `build`, which records DMA addresses.
        let built = build(unsafe { p.data() }, &mut ops);
        let checked = built.and_then(|()| {
            if ops.n == 0 || ops.n as u32 > self.sge {
                return Err(EINVAL);
            }
            if !super::sync::claim(&shared.used, 1, self.depth) {
                return Err(ENOMEM);
            }
            Ok(())
        });
        if let Err(err) = checked {
            return Err(PostError {
                err,
                wr: p.cancel(),
            });
        }
        let (raw, flush) = p.erased();
        // `used` <= depth, so a free slot exists.
        let index = shared.state.lock().insert(Entry { raw, flush });
        let Some(index) = index else {
            shared.used.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError {
                err: ENOMEM,
                wr: p.cancel(),
            });
        };
        p.set_slots(1);
        p.set_srq(shared, index);
        let rwr = bindings::ib_recv_wr {
            next: core::ptr::null_mut(),
            __bindgen_anon_1: bindings::ib_recv_wr__bindgen_ty_1 { wr_cqe: p.cqe() },
            sg_list: ops.sges.as_mut_ptr(),
            num_sge: ops.n as i32,
        };
        // SAFETY: `ptr` is valid; `rwr` and its scatter list are valid for the call (the driver
        // copies them); the buffers belong to the request, which the device owns from now on.
        let ret = unsafe { bindings::ib_post_srq_recv(self.ptr, &rwr, core::ptr::null_mut()) };
        if ret != 0 {
            shared.state.lock().remove(index);
            shared.used.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError {
                err: Error::from_errno(ret),
                wr: p.cancel(),
            });
        }
        p.posted();
        Ok(())
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        let shared: &Shared = &self.shared;
        shared.gate.close();
        // SAFETY: `ptr` is valid (invariant); no QP is attached (each holds an `Arc<Srq>`).
        let ret = unsafe { bindings::ib_destroy_srq_user(self.ptr, core::ptr::null_mut()) };
        if ret != 0 {
            // The device may still use the posted requests: leave them and the bookkeeping.
            crate::pr_err!("kernel::rdma: destroying SRQ failed: {}; leaked\n", ret);
            return;
        }
        // Completions of requests consumed before the SRQ went away may still be in the CQ;
        // process them now, so that what is recorded afterwards was never consumed.
        // SAFETY: The CQ is valid (we hold an `Arc`); process context.
        unsafe { bindings::rdma_cq_quiesce(self.cq.as_raw()) };
        for i in 0..self.depth {
            let taken = shared.state.lock().remove(i);
            if let Some(e) = taken {
                shared.used.fetch_sub(1, Ordering::AcqRel);
                // SAFETY: The SRQ is destroyed and its CQ has no completion of the request
                // left: nothing refers to it, and it is given back exactly once.
                unsafe { (e.flush)(e.raw) };
            }
        }
        self.cq.unreserve(self.depth);
        // SAFETY: Not used again: the SRQ is destroyed and its completions all dispatched.
        unsafe { ManuallyDrop::drop(&mut self.shared) };
    }
}
