// SPDX-License-Identifier: GPL-2.0

//! Completion queues (`struct ib_cq`) and work completions (`struct ib_wc`, in [`wc`]).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! CQs are allocated with `ib_alloc_cq`: the RDMA core polls them and calls the `done` callback
//! of the `struct ib_cqe` of each completed work request. This crate installs that callback for
//! every [`Wr`](super::wr::Wr) and hands the request, with its buffers, back to its owner's
//! [`Completion::done`](super::wr::Completion::done). The [`PollContext`] chosen here decides
//! where that runs.
//!
//! A CQ is either the owner's alone ([`Cq::new`], `ib_alloc_cq`) or a share of a CQ of the
//! device's pool ([`Cq::from_pool`], `ib_cq_pool_get`), which the core spreads over the
//! completion vectors and which several QPs (of this and of other ULPs) report to.
//!
//! kernel::rdma sometimes has to process a CQ's completions itself (destroying an SRQ gives
//! back what is left in its CQ, draining a UD QP waits for handlers still running):
//! `Cq::quiesce` does it with every other poller of the CQ excluded, whatever its poll
//! context, so that no handler can run concurrently with it.

use super::{
    defer::{Deferred, Teardown},
    device::Device,
    event::{AsyncHandler, EventSlot},
    sync::{atomic, current, in_cm_handler, might_sleep, sleepable},
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{code::*, from_err_ptr, Error, Result},
    sync::Arc,
    types::ARef,
};
use core::{
    ffi::c_void,
    sync::atomic::{AtomicPtr, AtomicU32, Ordering},
};

mod exclusive;
pub mod wc;

pub(crate) use super::sync::{handling, in_any_handler};

pub(crate) use exclusive::{Exclusive, Orphan};
pub use wc::{Invalidation, Wc, WcOpcode, WcStatus};

/// Where the completion handlers of a CQ run (`enum ib_poll_context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PollContext {
    /// In softirq context (`irq_poll`), right after the device signals the CQ. Handlers must
    /// not sleep, must allocate with `GFP_ATOMIC` and may only take locks that disable bottom
    /// halves in process context ([`SpinLockBh`](super::sync::SpinLockBh)).
    Softirq,
    /// In a work item on the bound `ib_comp_wq`. Handlers may sleep, but should not for long.
    Workqueue,
    /// In a work item on the unbound `ib_comp_unbound_wq`.
    UnboundWorkqueue,
    /// Only when the owner calls [`Cq::poll_direct`], in the caller's context.
    Direct,
}

impl PollContext {
    /// Every context, for [`PollContext::from_name`].
    const ALL: [Self; 4] = [
        Self::Softirq,
        Self::Workqueue,
        Self::UnboundWorkqueue,
        Self::Direct,
    ];

    /// The context's name in control strings and status lines: `softirq`, `workqueue`,
    /// `unbound` or `direct`.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::cq::PollContext;
    ///
    /// assert_eq!(PollContext::Workqueue.name(), "workqueue");
    /// assert_eq!(PollContext::from_name(b"softirq"), Some(PollContext::Softirq));
    /// assert_eq!(PollContext::from_name(b"Softirq"), None);
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Self::Softirq => "softirq",
            Self::Workqueue => "workqueue",
            Self::UnboundWorkqueue => "unbound",
            Self::Direct => "direct",
        }
    }

    /// The context called `name` (see [`PollContext::name`]), if any: for control strings.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name().as_bytes() == name)
    }

    fn to_raw(self) -> bindings::ib_poll_context {
        match self {
            Self::Softirq => bindings::ib_poll_context_IB_POLL_SOFTIRQ,
            Self::Workqueue => bindings::ib_poll_context_IB_POLL_WORKQUEUE,
            Self::UnboundWorkqueue => bindings::ib_poll_context_IB_POLL_UNBOUND_WORKQUEUE,
            Self::Direct => bindings::ib_poll_context_IB_POLL_DIRECT,
        }
    }
}

/// Who polls a CQ of the owner's besides the RDMA core, through `ib_cq.cq_context`.
pub(crate) struct Shared {
    /// The task that holds the poller slot: running [`Cq::poll_direct`], or processing the CQ
    /// itself ([`Cq::exclusive`]: an SRQ teardown, a drain). It excludes every other such
    /// caller.
    poller: AtomicPtr<bindings::task_struct>,
    /// Callers waiting for the slot with [`Cq::exclusive`]: direct pollers stay out meanwhile,
    /// so that a busy poller cannot starve them.
    waiting: AtomicU32,
    /// The owner's handler of the CQ's asynchronous events.
    events: EventSlot,
}

/// The `event_handler` of every CQ. Not generic, so built into the kernel.
///
/// # Safety
///
/// Called by the driver with a valid event of a CQ allocated by this module, whose
/// `cq_context` is its `Shared`.
unsafe extern "C" fn cq_event(event: *mut bindings::ib_event, context: *mut core::ffi::c_void) {
    // SAFETY: `context` is the CQ's `Shared`, freed only after the CQ, after which no event is
    // raised.
    let shared = unsafe { &*context.cast::<Shared>() };
    // SAFETY: `event` is valid for the call.
    unsafe { shared.events.raise(event) };
}

/// Takes a poller slot; `false` if another task has it, or this one already does (a handler
/// polling its own CQ).
fn try_poll(slot: &AtomicPtr<bindings::task_struct>) -> bool {
    slot.compare_exchange(
        core::ptr::null_mut(),
        current(),
        Ordering::AcqRel,
        Ordering::Acquire,
    )
    .is_ok()
}

/// Where a CQ comes from.
enum Origin {
    /// Allocated for this [`Cq`] alone (`ib_alloc_cq`); its `cq_context` is this `Shared`.
    Own(KBox<Shared>),
    /// `entries` entries of a CQ of the device's pool (`ib_cq_pool_get`); `users` is the count
    /// of kernel::rdma's pool users on the device, which its removal waits for; `slot` is the
    /// pool CQ's poller slot (its `cq_context` is not kernel::rdma's to use), one per pool CQ,
    /// kept in C (`rdma_pool_slot_get`) for as long as kernel::rdma holds shares of the CQ.
    Pool {
        entries: u32,
        users: *mut c_void,
        slot: *mut *mut bindings::task_struct,
    },
}

/// A completion queue.
///
/// QPs hold an `Arc<Cq>` for each of their queues, so a CQ is freed only after the QPs that
/// report to it are destroyed.
pub struct Cq {
    raw: Deferred<RawCq>,
}

/// The C object of a [`Cq`]; dropping it frees the CQ.
///
/// # Invariants
///
/// `ptr` is a CQ on `device` with poll context `poll`, valid until `RawCq` is dropped: either
/// allocated with `__ib_alloc_cq` with the `Shared` of [`Origin::Own`] as its `cq_context`, or
/// taken from the device's pool, `entries` of its entries claimed, with `users` counted by
/// `rdma_cq_pool_user_get` and `slot` by `rdma_pool_slot_get` for `ptr` ([`Origin::Pool`]).
struct RawCq {
    ptr: *mut bindings::ib_cq,
    poll: PollContext,
    device: ARef<Device>,
    /// Entries promised to the queues of the QPs that report here.
    reserved: AtomicU32,
    origin: Origin,
}

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for RawCq {}
// SAFETY: The RDMA core serialises polling; the wrapper's own state is atomic.
unsafe impl Sync for RawCq {}

impl RawCq {
    /// The CQ's poller slot: the task that holds it runs [`Cq::poll_direct`] or processes the
    /// CQ itself ([`Cq::exclusive`]: an SRQ teardown, a drain), excluding every other such
    /// caller. Each CQ has a slot of its own: the holder of one waits for the CQ's handlers,
    /// which may need the slot of another CQ (to tear down a QP of it).
    fn slot(&self) -> &AtomicPtr<bindings::task_struct> {
        match &self.origin {
            Origin::Own(shared) => &shared.poller,
            // SAFETY: `slot` is valid and aligned while our share is counted, that is as long
            // as `self` (invariant), and is only ever accessed atomically (C initialises it
            // before publishing it and never touches it after).
            Origin::Pool { slot, .. } => unsafe { AtomicPtr::from_ptr(*slot) },
        }
    }

    /// The owner's `Shared`; `None` for a pool CQ.
    fn shared(&self) -> Option<&Shared> {
        match &self.origin {
            Origin::Own(shared) => Some(shared),
            Origin::Pool { .. } => None,
        }
    }

    /// Whether the current task runs a handler of this CQ in process context: its work item,
    /// or the holder of its poller slot (a direct poller, or kernel::rdma processing the CQ).
    fn in_handler(&self) -> bool {
        if self.slot().load(Ordering::Acquire) == current() {
            return true;
        }
        matches!(
            self.poll,
            PollContext::Workqueue | PollContext::UnboundWorkqueue
        ) && {
            // SAFETY: `current_work` only reads the current worker; `ptr` is valid (invariant)
            // and only the address of its work item is taken.
            unsafe { bindings::current_work() == &raw mut (*self.ptr).__bindgen_anon_1.work }
        }
    }
}

impl Teardown for RawCq {
    fn must_defer(&self) -> bool {
        // `ib_free_cq` waits for the CQ's work item or `irq_poll`: not from its own handler,
        // nor under an rdma_cm id's handler lock (see `in_cm_handler`); freeing the handler of
        // its events waits for their delivery: not from there either. Giving pool entries
        // back takes an IRQ-disabling lock: process context.
        match &self.origin {
            Origin::Own(shared) => {
                atomic()
                    || self.in_handler()
                    || in_any_handler()
                    || in_cm_handler()
                    || shared.events.in_delivery()
            }
            Origin::Pool { .. } => atomic(),
        }
    }
}

impl Drop for RawCq {
    fn drop(&mut self) {
        might_sleep();
        match self.origin {
            // SAFETY: `ptr` is valid (invariant); the QPs using it hold `Arc<Cq>` and are gone.
            // `ib_free_cq` waits for running handlers (it sleeps: process context only, never
            // one of its own handlers, see `must_defer`).
            Origin::Own(_) => unsafe { bindings::ib_free_cq(self.ptr) },
            Origin::Pool {
                entries,
                users,
                slot,
            } => {
                // SAFETY: `entries` of the pool CQ `ptr` are ours (invariant), and the QPs that
                // used them are gone; `slot` was counted for this share and is not held (a
                // holder borrows the `Cq`); `users` was counted for this CQ, and the device's
                // removal waits for it before it frees its pool. Process context
                // (`must_defer`).
                unsafe {
                    bindings::ib_cq_pool_put(self.ptr, entries);
                    bindings::rdma_pool_slot_put(slot);
                    bindings::rdma_cq_pool_user_put(users);
                }
            }
        }
    }
}

impl Cq {
    /// Allocates a CQ of at least `entries` entries on `device` (`ib_alloc_cq`), whose
    /// completions are signalled on the device's completion vector `comp_vector` (an interrupt
    /// vector: `0..device.num_comp_vectors()`, which decides on which CPU its handlers usually
    /// run) and processed in `poll`. Sleeps.
    ///
    /// # Errors
    ///
    /// - `EINVAL` when `entries` is zero or above the device's `max_cqe`, or when
    ///   `comp_vector` is not one of the device's completion vectors.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - Otherwise what the driver's `create_cq` returns.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{cq::{Cq, PollContext}, device::Device};
    ///
    /// fn cq_for(dev: &Device) -> Result {
    ///     let cq = Cq::new(dev, 128, 0, PollContext::Softirq)?;
    ///     assert!(cq.entries() >= 128);
    ///     // A CQ larger than the device allows is refused before the driver sees it.
    ///     assert_eq!(
    ///         Cq::new(dev, dev.attrs().max_cqe() + 1, 0, PollContext::Softirq).err(),
    ///         Some(EINVAL)
    ///     );
    ///     Ok(())
    /// }
    /// ```
    pub fn new(
        device: &Device,
        entries: u32,
        comp_vector: u32,
        poll: PollContext,
    ) -> Result<Arc<Self>> {
        sleepable()?;
        if entries == 0 || entries > device.attrs().max_cqe() {
            return Err(EINVAL);
        }
        if comp_vector >= device.num_comp_vectors() {
            return Err(EINVAL);
        }
        let nr = i32::try_from(entries).map_err(|_| EINVAL)?;
        let vec = i32::try_from(comp_vector).map_err(|_| EINVAL)?;
        let shared = KBox::new(
            Shared {
                poller: AtomicPtr::new(core::ptr::null_mut()),
                waiting: AtomicU32::new(0),
                events: EventSlot::new(),
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `device` is registered; the caller string is static; the private data is the
        // CQ's `Shared`, which outlives it (freed after `ib_free_cq`).
        let ptr = from_err_ptr(unsafe {
            bindings::__ib_alloc_cq(
                device.as_raw(),
                (&raw const *shared).cast_mut().cast(),
                nr,
                vec,
                poll.to_raw(),
                c"kernel::rdma".as_ptr().cast(),
            )
        })?;
        // `ib_alloc_cq` takes no event handler; nothing uses the CQ yet, so it is set here.
        // SAFETY: `ptr` was just allocated and is not shared with anyone yet.
        unsafe { (*ptr).event_handler = Some(cq_event) };
        // SAFETY: As above: no QP uses the CQ yet, so its work item has never been queued.
        unsafe { bindings::rdma_cq_own_class(ptr) };
        // INVARIANT: `ptr` was just allocated with `poll` on `device`, with `shared`.
        let raw = Deferred::new(RawCq {
            ptr,
            poll,
            device: device.into(),
            reserved: AtomicU32::new(0),
            origin: Origin::Own(shared),
        })?;
        Ok(Arc::new(Cq { raw }, GFP_KERNEL)?)
    }

    /// Takes `entries` entries of a CQ of the device's shared pool (`ib_cq_pool_get`), on
    /// completion vector `comp_vector`, or on the next vector in turn for `None`. Sleeps.
    ///
    /// The core keeps, per poll context, a set of large CQs (4096 entries, or the device's
    /// `max_cqe`), one per completion vector (as many as there are online CPUs), and hands out
    /// entries of the least used one: QPs of many connections, of this ULP and of others,
    /// share a few CQs whose handlers spread over the CPUs, as nvmet-rdma and isert do. The
    /// returned `Cq` stands for the share: QPs reserve their queues in its `entries` as in any
    /// CQ, and dropping the last reference gives the entries back (`ib_cq_pool_put`); the pool
    /// CQ itself lives until the device goes away, whose removal waits for every share.
    ///
    /// What is shared cannot be changed by one user: [`Cq::resize`], [`Cq::moderate`] and
    /// [`Cq::set_event_handler`] answer `EOPNOTSUPP` (the pool gives its CQs no event handler).
    ///
    /// # Errors
    ///
    /// - `EINVAL` for zero entries or more than the device's `max_cqe`, for
    ///   [`PollContext::Direct`] (pool CQs are polled by the core) and for a vector the device
    ///   does not have.
    /// - `ENODEV` while the device is being removed.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - Otherwise what the driver's `create_cq` returns when the pool needs new CQs.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{cq::{Cq, PollContext}, device::Device};
    ///
    /// fn shares(dev: &Device) -> Result {
    ///     let a = Cq::from_pool(dev, 64, Some(0), PollContext::Softirq)?;
    ///     let b = Cq::from_pool(dev, 64, Some(0), PollContext::Softirq)?;
    ///     // Two small shares on one vector come from the same pool CQ.
    ///     assert_eq!(a.comp_vector(), b.comp_vector());
    ///     assert_eq!(a.entries(), 64);
    ///     assert_eq!(a.resize(128), Err(EOPNOTSUPP));
    ///     Ok(())
    /// }
    /// ```
    pub fn from_pool(
        device: &Device,
        entries: u32,
        comp_vector: Option<u32>,
        poll: PollContext,
    ) -> Result<Arc<Self>> {
        sleepable()?;
        // The core looks for a CQ with room, allocating pool CQs until it finds one: more than
        // a CQ can hold would never be found.
        if entries == 0 || entries > device.attrs().max_cqe() || poll == PollContext::Direct {
            return Err(EINVAL);
        }
        let hint = match comp_vector {
            Some(v) if v >= device.num_comp_vectors() => return Err(EINVAL),
            Some(v) => i32::try_from(v).map_err(|_| EINVAL)?,
            None => -1,
        };
        // SAFETY: `device` is a valid device.
        let users = unsafe { bindings::rdma_cq_pool_user_get(device.as_raw()) };
        if users.is_null() {
            return Err(ENODEV);
        }
        // SAFETY: `device` is registered; `poll` is a pool poll context (checked above).
        let ptr = match from_err_ptr(unsafe {
            bindings::ib_cq_pool_get(device.as_raw(), entries, hint, poll.to_raw())
        }) {
            Ok(ptr) => ptr,
            Err(e) => {
                // SAFETY: Counted just above, for nothing.
                unsafe { bindings::rdma_cq_pool_user_put(users) };
                return Err(e);
            }
        };
        // SAFETY: `ptr` is a pool CQ of ours; process context.
        let slot = unsafe { bindings::rdma_pool_slot_get(ptr) };
        if slot.is_null() {
            // SAFETY: Claimed and counted just above, for nothing.
            unsafe {
                bindings::ib_cq_pool_put(ptr, entries);
                bindings::rdma_cq_pool_user_put(users);
            }
            return Err(ENOMEM);
        }
        // INVARIANT: `entries` of the pool CQ `ptr` of `device` were just claimed, with
        // `users` and `slot` counted. Should what follows fail, dropping `RawCq` gives them
        // back.
        let raw = Deferred::new(RawCq {
            ptr,
            poll,
            device: device.into(),
            reserved: AtomicU32::new(0),
            origin: Origin::Pool {
                entries,
                users,
                slot,
            },
        })?;
        Ok(Arc::new(Cq { raw }, GFP_KERNEL)?)
    }

    /// Whether the CQ is a share of a pool CQ ([`Cq::from_pool`]).
    pub fn is_pooled(&self) -> bool {
        matches!(self.raw.origin, Origin::Pool { .. })
    }

    /// The completion vector the CQ's completions are signalled on.
    pub fn comp_vector(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant); `comp_vector` is set at allocation only.
        unsafe { (*self.raw.ptr).comp_vector }
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_cq {
        self.raw.ptr
    }

    /// The device of the CQ.
    pub fn device(&self) -> &Device {
        &self.raw.device
    }

    /// The number of entries the driver actually allocated (at least the number asked for);
    /// for a pool CQ, the entries of the share.
    pub fn entries(&self) -> u32 {
        if let Origin::Pool { entries, .. } = self.raw.origin {
            return entries;
        }
        // SAFETY: `ptr` is valid (invariant). `cqe` is set at creation and changed only by
        // `Cq::resize` (the driver writes it), hence the volatile read.
        u32::try_from(unsafe { (&raw const (*self.raw.ptr).cqe).read_volatile() }).unwrap_or(0)
    }

    /// Promises `n` entries to a queue reporting here: a CQ with more work requests
    /// outstanding than entries overruns, which is a fatal device error. `EINVAL` if the free
    /// entries are fewer than `n` (with a message: the caller sees only a QP refused).
    pub(crate) fn reserve(&self, n: u32) -> Result {
        let entries = self.entries();
        if super::sync::claim(&self.raw.reserved, n, entries) {
            return Ok(());
        }
        crate::pr_err!(
            "kernel::rdma: a queue of {n} entries does not fit its CQ ({} of {entries} free)\n",
            self.free_entries()
        );
        Err(EINVAL)
    }

    /// Gives back entries promised by [`Cq::reserve`].
    pub(crate) fn unreserve(&self, n: u32) {
        self.raw.reserved.fetch_sub(n, Ordering::AcqRel);
    }

    /// Entries not promised to any QP queue yet.
    pub fn free_entries(&self) -> u32 {
        self.entries()
            .saturating_sub(self.raw.reserved.load(Ordering::Acquire))
    }

    /// Gives the CQ a handler of its asynchronous events ([`AsyncHandler`]), once, right after
    /// creating it. The handler lives until the CQ is freed. May sleep.
    ///
    /// # Errors
    ///
    /// - `EBUSY` if the CQ has a handler already.
    /// - `EOPNOTSUPP` for a pool CQ.
    /// - `EAGAIN` in atomic context.
    /// - `ENOSPC` when the module of `H` cannot be tracked ([`owner`](super::owner)).
    /// - `ENOMEM` when an allocation fails.
    pub fn set_event_handler<H: AsyncHandler>(&self, handler: Arc<H>) -> Result {
        self.raw.shared().ok_or(EOPNOTSUPP)?.events.set(handler)
    }

    /// Resizes the CQ to at least `entries` entries (`ib_resize_cq`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for zero or more than the device's `max_cqe`.
    /// - `EBUSY` when the QPs reporting here were promised more entries than the new size
    ///   (their queues could overrun it).
    /// - `EOPNOTSUPP` when the device cannot resize CQs, and for a pool CQ.
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what the driver's `resize_cq` returns (for instance `EINVAL` when more
    ///   completions are waiting than would fit).
    pub fn resize(&self, entries: u32) -> Result {
        sleepable()?;
        if self.is_pooled() {
            return Err(EOPNOTSUPP);
        }
        if entries == 0 || entries > self.raw.device.attrs().max_cqe() {
            return Err(EINVAL);
        }
        let nr = i32::try_from(entries).map_err(|_| EINVAL)?;
        // The entries being taken away are claimed first, so that no QP is promised them
        // meanwhile.
        let cut = self.entries().saturating_sub(entries);
        if cut > 0 && !super::sync::claim(&self.raw.reserved, cut, self.entries()) {
            return Err(EBUSY);
        }
        // SAFETY: `ptr` is valid (invariant); the driver serialises the resize with polling.
        let ret = unsafe { bindings::ib_resize_cq(self.raw.ptr, nr) };
        if cut > 0 {
            self.unreserve(cut);
        }
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    /// Asks the device to raise a completion event only after `count` completions or
    /// `period_us` microseconds: interrupt moderation (`rdma_set_cq_moderation`, formerly
    /// `ib_modify_cq`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EOPNOTSUPP` when the device has no moderation (soft-RoCE has none), and for a pool
    ///   CQ, which other users share.
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what the driver's `modify_cq` returns.
    pub fn moderate(&self, count: u16, period_us: u16) -> Result {
        // Drivers that have it talk to their firmware, which sleeps.
        sleepable()?;
        if self.is_pooled() {
            return Err(EOPNOTSUPP);
        }
        // SAFETY: `ptr` is valid (invariant).
        let ret = unsafe { bindings::rdma_set_cq_moderation(self.raw.ptr, count, period_us) };
        if ret != 0 {
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    /// The poll context the CQ was allocated with.
    pub fn poll_context(&self) -> PollContext {
        self.raw.poll
    }

    /// Whether the current task is running a handler of this CQ in process context: a
    /// teardown that waits for the CQ's handlers must not run here.
    pub(crate) fn in_handler(&self) -> bool {
        self.raw.in_handler()
    }

    /// Processes up to `budget` completions of a [`PollContext::Direct`] CQ in the caller's
    /// context (`ib_process_cq_direct`) and returns how many were processed.
    ///
    /// The handlers run in the caller's context. One task polls a CQ at a time: while another
    /// task polls it (or kernel::rdma quiesces it), and when called from one of the CQ's own
    /// handlers, this returns `Ok(0)` at once.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a CQ of any other poll context (pool CQs included), whose completions the
    /// core processes by itself.
    pub fn poll_direct(&self, budget: u32) -> Result<u32> {
        let shared = match self.raw.shared() {
            Some(shared) if self.raw.poll == PollContext::Direct => shared,
            _ => return Err(EINVAL),
        };
        if shared.waiting.load(Ordering::Acquire) != 0 || !try_poll(&shared.poller) {
            return Ok(0);
        }
        let budget = i32::try_from(budget).unwrap_or(i32::MAX);
        // SAFETY: `ptr` is a valid direct-polled CQ (invariant and check above), polled by no
        // one else (`try_poll`).
        let n = unsafe { bindings::ib_process_cq_direct(self.raw.ptr, budget) };
        shared
            .poller
            .store(core::ptr::null_mut(), Ordering::Release);
        Ok(u32::try_from(n).unwrap_or(0))
    }
}
