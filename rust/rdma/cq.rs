// SPDX-License-Identifier: GPL-2.0

//! Completion queues (`struct ib_cq`) and work completions (`struct ib_wc`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! CQs are allocated with `ib_alloc_cq`: the RDMA core polls them and calls the `done` callback
//! of the `struct ib_cqe` of each completed work request. This crate installs that callback for
//! every [`Wr`](super::wr::Wr) and hands the request, with its buffers, back to its owner's
//! [`Completion::done`](super::wr::Completion::done). The [`PollContext`] chosen here decides
//! where that runs.
//!
//! kernel::rdma sometimes has to process a CQ's completions itself (destroying an SRQ gives
//! back what is left in its CQ, draining a UD QP waits for handlers still running):
//! [`Cq::quiesce`] does it with every other poller of the CQ excluded, whatever its poll
//! context, so that no handler can run concurrently with it.

use super::{
    defer::{Deferred, Teardown},
    device::Device,
    event::{AsyncHandler, EventSlot},
    sync::{atomic, current, might_sleep, sleepable},
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{code::*, from_err_ptr, Error, Result},
    sync::Arc,
    types::ARef,
};
use core::{
    fmt,
    sync::atomic::{AtomicPtr, AtomicU32, Ordering},
};

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
    fn to_raw(self) -> bindings::ib_poll_context {
        match self {
            Self::Softirq => bindings::ib_poll_context_IB_POLL_SOFTIRQ,
            Self::Workqueue => bindings::ib_poll_context_IB_POLL_WORKQUEUE,
            Self::UnboundWorkqueue => bindings::ib_poll_context_IB_POLL_UNBOUND_WORKQUEUE,
            Self::Direct => bindings::ib_poll_context_IB_POLL_DIRECT,
        }
    }
}

/// Who polls a CQ besides the RDMA core, through `ib_cq.cq_context`.
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

impl Shared {
    /// Takes the poller slot; `false` if another task has it, or this one already does (a
    /// handler polling its own CQ).
    fn try_poll(&self) -> bool {
        self.poller
            .compare_exchange(
                core::ptr::null_mut(),
                current(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }

    fn end_poll(&self) {
        self.poller.store(core::ptr::null_mut(), Ordering::Release);
    }
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
/// `ptr` is a CQ allocated with `__ib_alloc_cq` on `device` with poll context `poll` and
/// `shared` as its `cq_context`, valid until `RawCq` is dropped.
struct RawCq {
    ptr: *mut bindings::ib_cq,
    poll: PollContext,
    device: ARef<Device>,
    /// Entries promised to the queues of the QPs that report here.
    reserved: AtomicU32,
    shared: KBox<Shared>,
}

// SAFETY: A CQ may be used and freed from any thread.
unsafe impl Send for RawCq {}
// SAFETY: The RDMA core serialises polling; the wrapper's own state is atomic.
unsafe impl Sync for RawCq {}

impl RawCq {
    /// Whether the current task runs a handler of this CQ in process context: its work item,
    /// or the holder of its poller slot (a direct poller, or kernel::rdma processing the CQ).
    fn in_handler(&self) -> bool {
        if self.shared.poller.load(Ordering::Acquire) == current() {
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
        // `ib_free_cq` waits for the CQ's work item or `irq_poll`: not from its own handler;
        // freeing the handler of its events waits for their delivery: not from there either.
        atomic() || self.in_handler() || self.shared.events.in_delivery()
    }
}

impl Drop for RawCq {
    fn drop(&mut self) {
        might_sleep();
        // SAFETY: `ptr` is valid (invariant); the QPs using it hold `Arc<Cq>` and are gone.
        // `ib_free_cq` waits for running handlers (it sleeps: process context only, never one
        // of its own handlers, see `must_defer`).
        unsafe { bindings::ib_free_cq(self.ptr) };
    }
}

impl Cq {
    /// Allocates a CQ of at least `entries` entries on `device` (`ib_alloc_cq`). Sleeps.
    ///
    /// `EINVAL` when `entries` is zero or above the device's `max_cqe`, or when `comp_vector`
    /// is not one of the device's completion vectors.
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
        // INVARIANT: `ptr` was just allocated with `poll` on `device`, with `shared`.
        let raw = Deferred::new(RawCq {
            ptr,
            poll,
            device: device.into(),
            reserved: AtomicU32::new(0),
            shared,
        })?;
        Ok(Arc::new(Cq { raw }, GFP_KERNEL)?)
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_cq {
        self.raw.ptr
    }

    /// The device of the CQ.
    pub fn device(&self) -> &Device {
        &self.raw.device
    }

    /// The number of entries the driver actually allocated (at least the number asked for).
    pub fn entries(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant). `cqe` is set at creation and changed only by
        // `Cq::resize` (the driver writes it), hence the volatile read.
        u32::try_from(unsafe { (&raw const (*self.raw.ptr).cqe).read_volatile() }).unwrap_or(0)
    }

    /// Promises `n` entries to a queue reporting here: a CQ with more work requests
    /// outstanding than entries overruns, which is a fatal device error. `EINVAL` if the free
    /// entries are fewer than `n`.
    pub(crate) fn reserve(&self, n: u32) -> Result {
        if super::sync::claim(&self.raw.reserved, n, self.entries()) {
            Ok(())
        } else {
            Err(EINVAL)
        }
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
    /// creating it. `EBUSY` if it has one already, `EAGAIN` in atomic context. The handler lives
    /// until the CQ is freed. May sleep.
    pub fn set_event_handler<H: AsyncHandler>(&self, handler: Arc<H>) -> Result {
        self.raw.shared.events.set(handler)
    }

    /// Resizes the CQ to at least `entries` entries (`ib_resize_cq`). May sleep.
    ///
    /// `EINVAL` for zero or more than the device's `max_cqe`; `EBUSY` when the QPs reporting
    /// here were promised more entries than the new size (their queues could overrun it);
    /// `EOPNOTSUPP` when the device cannot resize CQs; what the driver answers otherwise (for
    /// instance `EINVAL` when more completions are waiting than would fit).
    pub fn resize(&self, entries: u32) -> Result {
        sleepable()?;
        if entries == 0 || entries > self.raw.device.attrs().max_cqe() {
            return Err(EINVAL);
        }
        let nr = i32::try_from(entries).map_err(|_| EINVAL)?;
        // The entries being taken away are claimed first, so that no QP is promised them
        // meanwhile.
        let cut = self.entries().saturating_sub(entries);
        if cut > 0 {
            self.reserve(cut).map_err(|_| EBUSY)?;
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
    /// `ib_modify_cq`). `EOPNOTSUPP` when the device has none (soft-RoCE has none). May sleep.
    pub fn moderate(&self, count: u16, period_us: u16) -> Result {
        // Drivers that have it talk to their firmware, which sleeps.
        sleepable()?;
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
    /// handlers, this returns `Ok(0)` at once. `EINVAL` for any other poll context, whose
    /// completions the core processes by itself.
    pub fn poll_direct(&self, budget: u32) -> Result<u32> {
        if self.raw.poll != PollContext::Direct {
            return Err(EINVAL);
        }
        let shared = &self.raw.shared;
        if shared.waiting.load(Ordering::Acquire) != 0 || !shared.try_poll() {
            return Ok(0);
        }
        let budget = i32::try_from(budget).unwrap_or(i32::MAX);
        // SAFETY: `ptr` is a valid direct-polled CQ (invariant and check above), polled by no
        // one else (`try_poll`).
        let n = unsafe { bindings::ib_process_cq_direct(self.raw.ptr, budget) };
        shared.end_poll();
        Ok(u32::try_from(n).unwrap_or(0))
    }

    /// Takes the CQ's poller slot for the caller, waiting for the current holder (every other
    /// direct poller gets `Ok(0)` meanwhile): the caller may then process the CQ itself. Sleeps:
    /// process context, not one of the CQ's handlers.
    pub(crate) fn exclusive(&self) -> Exclusive<'_> {
        might_sleep();
        let shared = &self.raw.shared;
        shared.waiting.fetch_add(1, Ordering::AcqRel);
        while !shared.try_poll() {
            // SAFETY: Process context (`might_sleep` above).
            unsafe { bindings::msleep(1) };
        }
        shared.waiting.fetch_sub(1, Ordering::AcqRel);
        Exclusive(self)
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
pub(crate) struct Exclusive<'a>(&'a Cq);

impl Exclusive<'_> {
    /// Processes up to `budget` completions of a direct CQ here; nothing for other CQs, whose
    /// completions their poller processes.
    pub(crate) fn poll(&self, budget: i32) {
        if self.0.raw.poll == PollContext::Direct {
            // SAFETY: A valid direct CQ (invariant), whose poller slot is ours.
            unsafe { bindings::ib_process_cq_direct(self.0.raw.ptr, budget) };
        }
    }

    /// Processes, in the caller's context, every completion in the CQ, with its `irq_poll` or
    /// work item disabled meanwhile (direct pollers are kept out by the slot), then re-arms it
    /// as its poller would. When it returns, no handler of a completion that was in the CQ is
    /// running or still to run. Handlers run with bottom halves disabled for softirq CQs, as
    /// they do from `irq_poll`. Sleeps.
    pub(crate) fn quiesce(&self) {
        // SAFETY: `ptr` is valid; process context; no direct poller runs (the slot is ours).
        unsafe { bindings::rdma_cq_quiesce(self.0.raw.ptr) };
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.0.raw.shared.end_poll();
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

/// The status of a work completion (`enum ib_wc_status`).
///
/// # Examples
///
/// A handler tells a flushed request (its QP was stopped) from a real failure:
///
/// ```
/// use kernel::rdma::cq::WcStatus;
///
/// fn retry_worth(s: WcStatus) -> bool {
///     !matches!(s, WcStatus::Success | WcStatus::WrFlushErr)
/// }
/// assert!(retry_worth(WcStatus::RnrRetryExcErr));
/// assert!(!retry_worth(WcStatus::WrFlushErr));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// Local length error: a receive buffer too small for the message, for instance.
    LocLenErr,
    /// Local QP operation error.
    LocQpOpErr,
    /// Local protection error: an lkey or SGE that does not cover the buffer.
    LocProtErr,
    /// The QP went to the error state and the request was flushed without being executed.
    WrFlushErr,
    /// Bad response from the responder.
    BadRespErr,
    /// Local access error.
    LocAccessErr,
    /// Remote invalid request error.
    RemInvReqErr,
    /// Remote access error: a wrong rkey, address or access right at the responder.
    RemAccessErr,
    /// Remote operation error.
    RemOpErr,
    /// Transport retries exhausted: the peer did not answer.
    RetryExcErr,
    /// RNR retries exhausted: the peer had no receive posted.
    RnrRetryExcErr,
    /// Another status (its `enum ib_wc_status` value).
    Other(u32),
}

impl WcStatus {
    fn from_raw(s: bindings::ib_wc_status) -> Self {
        match s {
            bindings::ib_wc_status_IB_WC_SUCCESS => Self::Success,
            bindings::ib_wc_status_IB_WC_LOC_LEN_ERR => Self::LocLenErr,
            bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR => Self::LocQpOpErr,
            bindings::ib_wc_status_IB_WC_LOC_PROT_ERR => Self::LocProtErr,
            bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR => Self::WrFlushErr,
            bindings::ib_wc_status_IB_WC_BAD_RESP_ERR => Self::BadRespErr,
            bindings::ib_wc_status_IB_WC_LOC_ACCESS_ERR => Self::LocAccessErr,
            bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR => Self::RemInvReqErr,
            bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR => Self::RemAccessErr,
            bindings::ib_wc_status_IB_WC_REM_OP_ERR => Self::RemOpErr,
            bindings::ib_wc_status_IB_WC_RETRY_EXC_ERR => Self::RetryExcErr,
            bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR => Self::RnrRetryExcErr,
            other => Self::Other(other),
        }
    }
}

/// The kind of work that completed (`enum ib_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND (with or without immediate data).
    Send,
    /// An RDMA WRITE (with or without immediate data).
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic compare-and-swap.
    CompSwap,
    /// An atomic fetch-and-add.
    FetchAdd,
    /// A local invalidate.
    LocalInv,
    /// A fast memory registration.
    RegMr,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by an RDMA WRITE with immediate data.
    RecvRdmaWithImm,
    /// Another opcode (its `enum ib_wc_opcode` value).
    Other(u32),
}

impl WcOpcode {
    fn from_raw(o: bindings::ib_wc_opcode) -> Self {
        match o {
            bindings::ib_wc_opcode_IB_WC_SEND => Self::Send,
            bindings::ib_wc_opcode_IB_WC_RDMA_WRITE => Self::RdmaWrite,
            bindings::ib_wc_opcode_IB_WC_RDMA_READ => Self::RdmaRead,
            bindings::ib_wc_opcode_IB_WC_COMP_SWAP => Self::CompSwap,
            bindings::ib_wc_opcode_IB_WC_FETCH_ADD => Self::FetchAdd,
            bindings::ib_wc_opcode_IB_WC_LOCAL_INV => Self::LocalInv,
            bindings::ib_wc_opcode_IB_WC_REG_MR => Self::RegMr,
            bindings::ib_wc_opcode_IB_WC_RECV => Self::Recv,
            bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM => Self::RecvRdmaWithImm,
            other => Self::Other(other),
        }
    }
}

/// A work completion, as handed to [`Completion::done`](super::wr::Completion::done).
///
/// Only `status` and (for the requests that carry them) the fields of a successful completion
/// are meaningful; for an error completion the other fields are undefined, and the accessors
/// say so by returning `None` or zero.
#[derive(Clone, Copy)]
pub struct Wc {
    raw: bindings::ib_wc,
    qp_num: u32,
}

// SAFETY: A `Wc` is a copy of a completion's fields; the pointers among them (the request's
// `ib_cqe`, the QP) are never dereferenced through it.
unsafe impl Send for Wc {}
// SAFETY: As for `Send`: `&Wc` only reads copied values.
unsafe impl Sync for Wc {}

impl Wc {
    /// A completion as the core dispatched it, with the number of the QP it belongs to (read
    /// while that QP was known to be alive; 0 when it was not).
    #[inline]
    pub(crate) fn new(raw: &bindings::ib_wc, qp_num: u32) -> Self {
        Self { raw: *raw, qp_num }
    }

    /// The completion as the C API has it (its pointers are not to be dereferenced).
    pub(crate) fn as_raw(&self) -> &bindings::ib_wc {
        &self.raw
    }

    /// A flush completion for a request that kernel::rdma hands back itself ([`Orphan`]).
    pub(crate) fn flushed() -> Self {
        // SAFETY: All-zeroes is a valid `ib_wc` (null pointers, zero fields).
        let mut raw: bindings::ib_wc = unsafe { core::mem::zeroed() };
        raw.status = bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR;
        Self { raw, qp_num: 0 }
    }

    /// The status of the completion.
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.raw.status)
    }

    /// Whether the work request succeeded.
    pub fn is_ok(&self) -> bool {
        self.raw.status == bindings::ib_wc_status_IB_WC_SUCCESS
    }

    /// What completed; `None` for an error completion, where the opcode is undefined.
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.is_ok().then(|| WcOpcode::from_raw(self.raw.opcode))
    }

    /// Bytes received (receive completions) or transferred (RDMA READ); 0 on error.
    pub fn byte_len(&self) -> u32 {
        if self.is_ok() {
            self.raw.byte_len
        } else {
            0
        }
    }

    /// The immediate data of a SEND or RDMA WRITE with immediate, in host byte order.
    pub fn imm_data(&self) -> Option<u32> {
        let with_imm = self.raw.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_IMM as i32 != 0;
        // SAFETY: With `IB_WC_WITH_IMM` set, the `ex` union holds `imm_data`.
        (self.is_ok() && with_imm).then(|| u32::from_be(unsafe { self.raw.ex.imm_data }))
    }

    /// The rkey that the sender of a SEND with invalidate revoked, on a receive completion: the
    /// local MR with that rkey no longer grants access (see
    /// [`Mr::invalidated_by`](super::mr::Mr::invalidated_by)).
    pub fn invalidated_rkey(&self) -> Option<u32> {
        let inv = self.raw.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32 != 0;
        if !(self.is_ok() && inv) {
            return None;
        }
        // SAFETY: With `IB_WC_WITH_INVALIDATE` set, the `ex` union holds `invalidate_rkey`.
        Some(unsafe { self.raw.ex.invalidate_rkey })
    }

    /// Whether a UD receive buffer starts with the 40-byte GRH (always on RoCE).
    pub fn has_grh(&self) -> bool {
        self.is_ok() && self.raw.wc_flags & bindings::ib_wc_flags_IB_WC_GRH as i32 != 0
    }

    /// The sending QP of a UD receive.
    pub fn src_qp(&self) -> Option<u32> {
        self.is_ok().then_some(self.raw.src_qp)
    }

    /// The vendor error syndrome of an error completion.
    pub fn vendor_err(&self) -> u32 {
        self.raw.vendor_err
    }

    /// The number of the QP the work request was posted on, or (for a receive taken from an
    /// [`Srq`](super::srq::Srq)) that consumed it; 0 when that QP was already destroyed, or for
    /// a request that kernel::rdma flushed itself (a receive left on a destroyed SRQ, a request
    /// the driver took only part of).
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }
}

impl fmt::Debug for Wc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wc")
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("qp_num", &self.qp_num())
            .finish()
    }
}
