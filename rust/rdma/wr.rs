// SPDX-License-Identifier: GPL-2.0

//! Work requests (`struct ib_send_wr`, `struct ib_recv_wr`) and who owns their memory.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! The rule C ULPs keep by convention: memory named by a posted work request belongs to the
//! adapter until the request's completion (successful or flushed) comes back. Here a posted
//! request is a [`Wr<T>`]: a heap block holding the `struct ib_cqe` of the request and the
//! owner's `T`, which owns the memory ([`DmaBuf`](super::dma::DmaBuf), ...) the request uses.
//! Posting ([`Qp::post_send`], [`Qp::post_recv`], [`Srq::post_recv`]) takes the `Wr` and hands
//! it to the device; the only way back is [`Completion::done`], called with the `Wr` and its
//! [`Wc`] when the request completes. Safe code therefore cannot touch, free or reuse memory
//! the adapter may still use.
//!
//! The scatter/gather entries of a request are built by a closure that gets `&'a mut T` and a
//! [`SendOps<'a>`] or [`RecvOps<'a>`]. Memory the device only reads (a SEND or RDMA WRITE
//! source) is lent as `&'a`; memory it writes (a receive, RDMA READ or atomic target) as
//! `&'a mut`, so it must be owned by `T` alone: not shared through an `Arc`, not named twice,
//! not reachable by anyone who could read it while the device writes it. Memory must also be
//! mapped for the QP's own PD, and in a direction that lets the device do what the operation
//! asks ([`dma`](super::dma)); an address handle or memory region must belong to that PD too.
//!
//! The `Wr` is reused: `done` may post it again without allocating, which is how a data path
//! avoids allocation per message. `done` may also drop it, and with it the last reference to
//! the QP, CQ or PD it was posted on: their teardown then runs from process context
//! ([`defer`](super::defer)).
//!
//! # Examples
//!
//! A receive buffer that counts messages and posts itself again from its completion handler
//! (softirq context: no sleeping; posting neither sleeps nor allocates):
//!
//! ```
//! use core::sync::atomic::{AtomicU64, Ordering};
//! use kernel::rdma::{cq::Wc, dma::DmaBuf, qp::{Qp, Rts}, wr::{Completion, Wr}};
//! use kernel::sync::Arc;
//!
//! struct Rx {
//!     buf: DmaBuf,
//!     qp: Arc<Qp<Rts>>,
//!     count: Arc<AtomicU64>,
//! }
//!
//! impl Completion for Rx {
//!     fn done(wr: Wr<Self>, wc: &Wc) {
//!         if !wc.is_ok() {
//!             // Flushed (the QP is draining) or failed: dropping `wr` frees the buffer, and
//!             // may drop the last reference to the QP (it is then destroyed in process
//!             // context).
//!             return;
//!         }
//!         wr.data().count.fetch_add(1, Ordering::Relaxed);
//!         let qp = wr.data().qp.clone();
//!         if let Err(e) = qp.post_recv(wr, |rx, ops| {
//!             ops.buf(&mut rx.buf, 0..4096)?;
//!             Ok(())
//!         }) {
//!             pr_warn!("receive not re-posted: {:?}\n", e.err);
//!         }
//!     }
//! }
//!
//! fn start(qp: &Arc<Qp<Rts>>, count: &Arc<AtomicU64>, n: usize) -> Result {
//!     for _ in 0..n {
//!         let buf = DmaBuf::new(qp.pd(), 4096, GFP_KERNEL)?;
//!         let rx = Rx { buf, qp: qp.clone(), count: count.clone() };
//!         qp.post_recv(Wr::new(rx, GFP_KERNEL)?, |rx, ops| {
//!             ops.buf(&mut rx.buf, 0..4096)?;
//!             Ok(())
//!         })?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! [`Qp::post_send`]: super::qp::Qp::post_send
//! [`Qp::post_recv`]: super::qp::Qp::post_recv
//! [`Srq::post_recv`]: super::srq::Srq::post_recv

use super::{
    cq::Wc,
    dma::{span, Mapped},
    mr::Keys,
    owner::Owner,
    pd::PdKey,
};
use crate::{
    alloc::{Flags, KBox},
    bindings,
    error::{code::*, Error, Result},
};
use core::{
    ops::Range,
    sync::atomic::{AtomicU64, Ordering},
};

mod fixed;
mod post;
mod recv;
mod send;
mod wait;

use fixed::FixedVec;
pub use recv::RecvOps;
pub(crate) use send::Chain;
pub use send::SendOps;
pub use wait::{Pending, Waited};

/// The most operations one [`Wr`] may chain into one post (`ib_post_send` list).
pub const MAX_OPS: usize = 8;

/// The most MRs one send [`Wr`] may invalidate ([`SendOps::local_inv`],
/// [`SendOps::read_inv`]).
pub const MAX_INVALIDATIONS: usize = 4;

/// Bytes at the start of every UD receive buffer that receive the Global Route Header.
pub const GRH_LEN: usize = 40;

/// The owner of a work request, told when it completes.
///
/// `done` runs in the context of the CQ's [`PollContext`](super::cq::PollContext): with
/// `Softirq` (the usual choice) it must not sleep, must allocate with `GFP_ATOMIC` and may only
/// share state with process context through BH-safe locks
/// ([`SpinLockBh`](super::sync::SpinLockBh)). It gets the request back, with everything it
/// owns, whatever the status: after a flush (`WrFlushErr`) or an error, as after success.
pub trait Completion: Send + Sized + 'static {
    /// Called once for each posted [`Wr`] when its completion is processed.
    fn done(wr: Wr<Self>, wc: &Wc);
}

/// Which queue a request was posted on: its completion gives the slots back there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    Send,
    Recv,
    /// A shared receive queue: completes through [`srq::complete`](super::srq::complete).
    Srq,
}

#[repr(C)]
pub(crate) struct Inner<T> {
    cqe: bindings::ib_cqe,
    failures: Failures,
    settle: Settle,
    /// Queue slots this request holds while posted.
    slots: u32,
    queue: Queue,
    /// For [`Queue::Srq`]: the SRQ's bookkeeping and this request's index in it.
    srq: *const super::srq::Shared,
    srq_index: u32,
    /// The module whose code `done` is.
    owner: Option<Owner>,
    data: T,
}

/// A work request and the owner's data `T`, which owns the memory it names.
///
/// Allocated once with [`Wr::new`]; posting moves it to the device and [`Completion::done`]
/// gives it back, ready to be posted again.
pub struct Wr<T: Completion>(KBox<Inner<T>>);

// SAFETY: `Inner` is `T` (which is `Send`) plus C callback data, the SRQ pointer and the
// pointers into `T` of [`Settle`], which only the completion path dereferences, on whichever
// CPU the completion is dispatched.
unsafe impl<T: Completion> Send for Wr<T> {}
// SAFETY: `&Wr` gives access to `&T` only.
unsafe impl<T: Completion + Sync> Sync for Wr<T> {}

impl<T: Completion> Wr<T> {
    /// Allocates a request owning `data`.
    ///
    /// # Errors
    ///
    /// `data` is dropped with the error:
    ///
    /// - `ENOMEM` when the allocation fails.
    /// - `ENOSPC` in the unlikely case that the module of `T::done` cannot be tracked
    ///   ([`owner`](super::owner)).
    pub fn new(data: T, flags: Flags) -> Result<Self> {
        let owner = Owner::tracked(done_callback::<T> as *const () as usize)?;
        Ok(Self(KBox::new(
            Inner {
                cqe: bindings::ib_cqe { done: None },
                failures: Failures {
                    cqe: bindings::ib_cqe {
                        done: Some(unsignaled_failed),
                    },
                    first: AtomicU64::new(0),
                },
                settle: Settle::new(),
                slots: 0,
                queue: Queue::Send,
                srq: core::ptr::null(),
                srq_index: 0,
                owner,
                data,
            },
            flags,
        )?))
    }

    /// The owner's data.
    pub fn data(&self) -> &T {
        &self.0.data
    }

    /// The owner's data, for updating between posts.
    pub fn data_mut(&mut self) -> &mut T {
        &mut self.0.data
    }

    /// Frees the request and returns the owner's data.
    pub fn into_inner(self) -> T {
        KBox::into_inner(self.0).data
    }

    /// Hands the request over for posting on `queue`: it leaves its box until the post
    /// either fails ([`Posting::cancel`]) or succeeds ([`Posting::posted`]).
    pub(crate) fn start(mut self, queue: Queue) -> Posting<T> {
        self.0.cqe.done = Some(done_callback::<T>);
        *self.0.failures.first.get_mut() = 0;
        self.0.settle = Settle::new();
        self.0.queue = queue;
        Posting {
            raw: KBox::into_raw(self.0),
        }
    }

    /// Takes back a request that C owned.
    ///
    /// # Safety
    ///
    /// `raw` must come from [`Wr::start`] and no posted work request may refer to it.
    unsafe fn from_raw(raw: *mut Inner<T>) -> Self {
        // SAFETY: The caller guarantees `raw` came from `KBox::into_raw` and is unused.
        Self(unsafe { KBox::from_raw(raw) })
    }
}

/// A request on its way to the device.
///
/// # Invariants
///
/// `raw` comes from `KBox::into_raw` in [`Wr::start`] and is not yet posted.
pub(crate) struct Posting<T: Completion> {
    raw: *mut Inner<T>,
}

impl<T: Completion> Posting<T> {
    /// The owner's data, for building the scatter/gather list.
    ///
    /// # Safety
    ///
    /// The reference must not be used after [`Posting::posted`] or [`Posting::cancel`]
    /// (only values computed from it, such as DMA addresses, may outlive it).
    pub(crate) unsafe fn data<'a>(&mut self) -> &'a mut T {
        // SAFETY: `raw` is valid (invariant) and nothing else refers to `data` until the post;
        // the caller bounds the use of the reference.
        unsafe { &mut (*self.raw).data }
    }

    /// The module whose code the request's completion runs.
    pub(crate) fn owner(&self) -> Option<Owner> {
        // SAFETY: `raw` is valid (invariant).
        unsafe { (*self.raw).owner }
    }

    /// The `ib_cqe` that the (last) work request must carry.
    pub(crate) fn cqe(&self) -> *mut bindings::ib_cqe {
        // SAFETY: `raw` is valid (invariant); this is a field projection.
        unsafe { &raw mut (*self.raw).cqe }
    }

    /// The `ib_cqe` that the request's unsignaled operations carry ([`Failures`]).
    pub(crate) fn failures_cqe(&self) -> *mut bindings::ib_cqe {
        // SAFETY: `raw` is valid (invariant); this is a field projection.
        unsafe { &raw mut (*self.raw).failures.cqe }
    }

    /// Where the request records the MRs it invalidates.
    pub(crate) fn settle(&mut self) -> &mut Settle {
        // SAFETY: `raw` is valid and not yet shared with the device (invariant).
        unsafe { &mut (*self.raw).settle }
    }

    /// Records how many queue slots the request holds while posted.
    pub(crate) fn set_slots(&mut self, n: u32) {
        // SAFETY: `raw` is valid and not yet shared with the device (invariant).
        unsafe { (*self.raw).slots = n };
    }

    /// Records the SRQ bookkeeping entry of the request.
    pub(crate) fn set_srq(&mut self, srq: *const super::srq::Shared, index: u32) {
        // SAFETY: `raw` is valid and not yet shared with the device (invariant).
        unsafe {
            (*self.raw).srq = srq;
            (*self.raw).srq_index = index;
        }
    }

    /// The request, type-erased, for kernel::rdma to give back itself, flushed, when the core
    /// will not ([`Orphan`](super::cq::Orphan)).
    pub(crate) fn orphan(&self) -> super::cq::Orphan {
        super::cq::Orphan {
            raw: self.raw.cast(),
            flush: flush_orphan::<T>,
        }
    }

    /// The device did not take the request: gives it back.
    pub(crate) fn cancel(self) -> Wr<T> {
        // SAFETY: Not posted (invariant), so nothing else refers to it.
        unsafe { Wr::from_raw(self.raw) }
    }

    /// The device took the request; [`done_callback`] (or an [`Orphan`](super::cq::Orphan)
    /// made of it) takes it back at completion.
    pub(crate) fn posted(self) {}
}

/// The `done` callback of every [`Wr`]'s `ib_cqe`.
///
/// # Safety
///
/// Called by the RDMA core's CQ processing with a valid `wc` whose `wr_cqe` is the `cqe` of an
/// `Inner<T>` posted by this crate.
unsafe extern "C" fn done_callback<T: Completion>(
    cq: *mut bindings::ib_cq,
    wc: *mut bindings::ib_wc,
) {
    // SAFETY: The core calls us only for completions whose `wr_cqe` points at our `ib_cqe`.
    let cqe = unsafe { (*wc).__bindgen_anon_1.wr_cqe };
    // SAFETY: `cqe` is the `cqe` field of an `Inner<T>` (we installed this callback only there).
    let inner = unsafe { crate::container_of!(cqe, Inner<T>, cqe) }.cast_mut();
    // SAFETY: The completion ends the request: the device no longer uses it or its memory, and
    // each request completes once, so we take back the unique ownership `into_raw` gave away.
    let mut wr = unsafe { Wr::from_raw(inner) };
    // SAFETY: `wc` is valid for the duration of the callback.
    let raw = unsafe { &*wc };
    let qp_num = match wr.0.queue {
        // SAFETY: The request was posted on the SRQ `srq` (set before posting), which is kept
        // alive until its CQ has no completion of it left (its teardown quiesces the CQ).
        Queue::Srq => unsafe { super::srq::complete(wr.0.srq, wr.0.srq_index, raw.qp) },
        queue => {
            // SAFETY: The request was posted on the QP `raw.qp`, which is not destroyed before
            // its own queues are drained: valid until its slots are given back. The number is
            // read first: a drain may find the slots back, and the QP destroyed, right after.
            let qpn = unsafe { (*raw.qp).qp_num };
            // SAFETY: As above.
            unsafe { super::qp::release_slots(raw.qp, queue == Queue::Send, wr.0.slots) };
            qpn
        }
    };
    // SAFETY: `cq` is the CQ being processed, valid for the duration of the callback.
    let dev = unsafe { (*cq).device };
    let first = wr.0.failures.first.load(Ordering::Acquire);
    let wc = Wc::new(raw, qp_num, dev).failed_before(first);
    // SAFETY: The MRs recorded are reachable from the request's data, alive until `done`.
    unsafe { wr.0.settle.finish(wc.is_ok()) };
    super::cq::handling(|| T::done(wr, &wc));
}

/// The MRs a send request invalidates ([`SendOps::local_inv`], [`SendOps::read_inv`]): its
/// completion tells whether the invalidations ran (the request succeeded) or may not have
/// (it was flushed or failed), and the MRs become free, or registered again, accordingly.
///
/// # Invariants
///
/// The first `n` entries point at the [`Keys`] of MRs that the request's data owns (operations
/// name only memory reachable from it), alive until the request is given back to its owner.
pub(crate) struct Settle {
    keys: [*const Keys; MAX_INVALIDATIONS],
    n: usize,
}

impl Settle {
    #[inline]
    fn new() -> Self {
        // INVARIANT: No entry.
        Self {
            keys: [core::ptr::null(); MAX_INVALIDATIONS],
            n: 0,
        }
    }

    /// Records `keys`, an MR of the request's data (ignored past [`MAX_INVALIDATIONS`], which
    /// [`SendOps`] checks).
    pub(crate) fn add(&mut self, keys: &Keys) {
        if let Some(k) = self.keys.get_mut(self.n) {
            // INVARIANT: Operations name only memory reachable from the request's data.
            *k = core::ptr::from_ref(keys);
            self.n += 1;
        }
    }

    /// Settles the invalidations: they ran (`ran`) or may not have.
    ///
    /// # Safety
    ///
    /// The request's data must not have been given back to its owner yet.
    #[inline]
    unsafe fn finish(&mut self, ran: bool) {
        // Most requests invalidate nothing: no loop to enter then.
        if self.n == 0 {
            return;
        }
        for k in self.keys.iter().take(self.n) {
            // SAFETY: Per the invariant and the caller, the MR is alive.
            unsafe { (**k).end_invalidation(ran) };
        }
        self.n = 0;
    }
}

/// Where the unsignaled operations of a send request report. The core dispatches only their
/// errors (a successful unsignaled operation makes no completion), and the first one is kept
/// here: the request's own completion, which comes after it (a send queue completes in order)
/// and would only say that it was flushed, reports it instead ([`Wc::status`]).
#[repr(C)]
struct Failures {
    cqe: bindings::ib_cqe,
    /// The first failure of the post: its `ib_wc_status` (never 0, success) in the low half,
    /// its vendor error in the high half; 0 while there is none.
    first: AtomicU64,
}

/// The `done` callback of [`Failures::cqe`]. Built into the kernel (not generic).
///
/// # Safety
///
/// Called by the RDMA core's CQ processing with a valid `wc` whose `wr_cqe` is the `cqe` of the
/// `Failures` of a posted request whose own completion has not been dispatched yet.
unsafe extern "C" fn unsignaled_failed(_cq: *mut bindings::ib_cq, wc: *mut bindings::ib_wc) {
    // SAFETY: `wc` is valid for the duration of the callback.
    let wc = unsafe { &*wc };
    if wc.status == bindings::ib_wc_status_IB_WC_SUCCESS {
        return;
    }
    // SAFETY: The core calls us only for completions whose `wr_cqe` is set, to this `cqe`.
    let cqe = unsafe { wc.__bindgen_anon_1.wr_cqe };
    // SAFETY: `cqe` is the `cqe` field of a `Failures` (this callback is installed only there),
    // in a request the device still owns (its last operation completes after this one): it is
    // alive, and only shared references to `Failures` exist until its completion.
    let failures = unsafe { &*crate::container_of!(cqe, Failures, cqe) };
    let first = u64::from(wc.status) | u64::from(wc.vendor_err) << 32;
    let _ = failures
        .first
        .compare_exchange(0, first, Ordering::AcqRel, Ordering::Relaxed);
}

/// Gives a request that kernel::rdma took back itself to its owner, as flushed.
///
/// # Safety
///
/// `raw` must come from [`Posting::orphan`] of a posted `Posting<T>` to which nothing posted
/// refers any more and of which no completion is left to dispatch.
unsafe fn flush_orphan<T: Completion>(raw: *mut core::ffi::c_void) {
    // SAFETY: Per the safety requirements, nothing refers to the request any more.
    let mut wr = unsafe { Wr::<T>::from_raw(raw.cast()) };
    let first = wr.0.failures.first.load(Ordering::Acquire);
    // SAFETY: The MRs recorded are reachable from the request's data, alive until `done`.
    unsafe { wr.0.settle.finish(false) };
    super::cq::handling(|| T::done(wr, &Wc::flushed().failed_before(first)));
}

/// Appends the scatter/gather entries that describe `range` of `mem` to `out`, after syncing
/// it for the device; returns how many were added.
///
/// `EINVAL` when `mem` is mapped for another PD than `pd`, when `range` is empty or not inside
/// `mem`, or when `out` has no room left; `out` is then as it was.
pub(crate) fn add_sges<M: Mapped + ?Sized, const N: usize>(
    mem: &M,
    range: Range<usize>,
    pd: PdKey,
    out: &mut FixedVec<bindings::ib_sge, N>,
) -> Result<usize> {
    pd.check(mem.pd())?;
    let r = span(
        range.start,
        range.end.saturating_sub(range.start),
        mem.size(),
    )?;
    let first = out.len();
    let mut at = r.start;
    while at < r.end {
        let (addr, length) = mem.piece_for_device(at, r.end);
        let pushed = if length == 0 {
            Err(EINVAL)
        } else {
            out.push(bindings::ib_sge {
                addr,
                length,
                lkey: pd.lkey,
            })
        };
        if let Err(e) = pushed {
            // The operation's list stays contiguous if its owner goes on after the error.
            out.truncate(first);
            return Err(e);
        }
        at += length as usize;
    }
    Ok(out.len() - first)
}

/// A post that the device did not accept: the error, and the request, given back unposted.
pub struct PostError<T: Completion> {
    /// Why: `ENOMEM` for a full queue, `EINVAL` for a request the QP cannot carry,
    /// `ESHUTDOWN` after [`Qp::drain`](super::qp::Qp::drain), `EIO` on a QP that a driver
    /// failure stopped.
    pub err: Error,
    /// The request, with everything it owns.
    pub wr: Wr<T>,
}

impl<T: Completion> From<PostError<T>> for Error {
    fn from(e: PostError<T>) -> Error {
        e.err
    }
}

impl<T: Completion> core::fmt::Debug for PostError<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PostError").field("err", &self.err).finish()
    }
}
