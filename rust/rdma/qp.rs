// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (`struct ib_qp`): creation (in `create`), the queue accounting, and what a QP
//! holds.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A QP moves Reset -> Init -> Ready to Receive -> Ready to Send; each step needs its own
//! attributes ([`state`]). [`Qp<S>`] carries its state in its type, so that posting a send on a
//! QP that is not ready, or skipping a step, does not compile. Receives may be posted from Init
//! on. Posting itself is in [`wr`](super::wr).
//!
//! A QP holds an `Arc` of its PD and CQs, so they outlive it. Dropping a QP drains it
//! (`ib_drain_qp`: every outstanding request completes, with a flush error, and goes back to its
//! owner) and destroys it ([`drain`]). Both sleep and wait for the QP's CQ handlers, so when the
//! last reference goes in a completion handler, or anywhere sleeping is not allowed, the
//! teardown runs from process context instead ([`defer`](super::defer)): a request may own an
//! `Arc` of its QP. A QP whose requests do not all come back is kept, never destroyed under
//! them, and says so.
//!
//! Each queue keeps one slot in reserve for the drain marker, and posting more requests than
//! the depth the QP was created with fails with `ENOMEM` before the driver sees it.
//!
//! # Examples
//!
//! Connecting two RC QPs of one device without rdma_cm (both ends known):
//!
//! ```
//! use kernel::rdma::{cq::{Cq, PollContext}, device::Device, mr::Access, pd::Pd, qp::*};
//!
//! fn pair(dev: &Device) -> Result<(Qp<Rts>, Qp<Rts>)> {
//!     let pd = Pd::new(dev)?;
//!     let cq = Cq::new(dev, 64, 0, PollContext::Softirq)?;
//!     let caps = QpCaps { send_depth: 8, recv_depth: 8, ..QpCaps::default() };
//!     let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::REMOTE_WRITE)?;
//!     let b = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::REMOTE_WRITE)?;
//!     let (ea, eb) = (a.endpoint()?, b.endpoint()?);
//!     Ok((a.connect(&eb, &RcParams::default())?, b.connect(&ea, &RcParams::default())?))
//! }
//! ```

use super::{
    cq::{Cq, Orphan},
    defer::{Deferred, Teardown},
    device::Gid,
    event::{AsyncHandler, EventSlot},
    owner::{Owner, OwnerCell},
    pd::Pd,
    srq::Srq,
    sync::{atomic, in_cm_handler, PostGate, PostTicket, SpinLockBh},
};
use crate::{
    alloc::{
        flags::{GFP_ATOMIC, GFP_KERNEL},
        KBox, KVec,
    },
    bindings,
    error::Result,
    new_mutex, new_spinlock_bh,
    prelude::*,
    sync::{Arc, Mutex},
    types::Opaque,
};
use core::{
    marker::PhantomData,
    mem::ManuallyDrop,
    pin::Pin,
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, Ordering},
};

mod create;
pub mod drain;
pub mod mcast;
pub mod query;
pub mod state;

pub(crate) use create::Recv;
pub use query::QpAttr;
pub use state::{QpState, RcParams};

/// The transport of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected: one peer QP, in-order delivery, RDMA and atomics.
    Rc,
    /// Unreliable datagram: any peer through an address handle, one MTU per message, no RDMA.
    Ud,
}

/// The queue sizes of a QP. Each queue gets one extra slot from the driver, kept for the drain
/// marker.
///
/// # Examples
///
/// ```
/// use kernel::rdma::qp::QpCaps;
///
/// let caps = QpCaps { send_depth: 64, max_inline: 128, ..QpCaps::default() };
/// assert_eq!((caps.recv_depth, caps.send_sge), (16, 1));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// Send requests (counting each chained operation) outstanding at most.
    pub send_depth: u32,
    /// Receive requests outstanding at most.
    pub recv_depth: u32,
    /// Scatter/gather entries per send operation, at most [`MAX_SGE`](super::dma::MAX_SGE).
    pub send_sge: u32,
    /// Scatter entries per receive request, at most [`MAX_RECV_SGE`](super::dma::MAX_RECV_SGE).
    pub recv_sge: u32,
    /// Largest inline send, in bytes.
    pub max_inline: u32,
    /// [`RwCtx`](super::rw::RwCtx) operations in flight at most (`max_rdma_ctxs`): the core
    /// adds the send queue entries they need (and, where the device registers memory for
    /// them, a pool of MRs) to the QP. Needs `port`.
    pub rdma_ctxs: u32,
    /// The port the QP will be bound to; needed with `rdma_ctxs`, since how the core moves
    /// data depends on the port's protocol. Ignored for a QP of a connection manager id.
    pub port: u32,
    /// Scatter/gather entries per RDMA READ or WRITE of an [`RwCtx`](super::rw::RwCtx): the
    /// core splits a transfer into operations of at most this many pages (READs also within
    /// the device's `max_sge_rd`), each a message of its own on the wire. 0 (the default):
    /// `send_sge`. Needs `rdma_ctxs`; at most the device's `max_send_sge`, but not bound by
    /// [`MAX_SGE`](super::dma::MAX_SGE), since the core builds these lists itself.
    pub rw_sge: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            send_depth: 16,
            recv_depth: 16,
            send_sge: 1,
            recv_sge: 1,
            max_inline: 0,
            rdma_ctxs: 0,
            port: 0,
            rw_sge: 0,
        }
    }
}

/// What a peer needs to know to connect an RC QP to this one (or to send UD datagrams to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP number.
    pub qpn: u32,
    /// The GID of the QP's port.
    pub gid: Gid,
    /// The first packet sequence number the QP sends.
    pub psn: u32,
}

mod private {
    pub trait Sealed {}
}

/// A QP state in the type of a [`Qp`].
pub trait State: private::Sealed {}
/// A state in which receives may be posted.
pub trait CanRecv: State {}
/// A state in which sends may be posted.
pub trait CanSend: CanRecv {}

/// Fresh QP.
pub struct Reset;
/// Initialised QP: receives may be posted.
pub struct Init;
/// Ready-to-receive QP.
pub struct Rtr;
/// Ready-to-send QP: sends may be posted.
pub struct Rts;
/// A QP of a connection manager id whose states the CM moves from now on, shared before its
/// connection is established ([`Qp::managed`]). Receives may be posted at once and sends
/// compile; what a send posted before the CM has made the QP ready to send does is the
/// driver's: soft-RoCE refuses it (`EINVAL`), soft-iWARP too (`ENOTCONN`), others queue it
/// until the QP is ready to send or flush it. Either way the request comes back to its owner.
/// On the passive side the QP is ready to send before the peer can send to it (rdma_accept
/// moves it there before it answers), so a handler may answer a received message at once; an
/// active side should wait for [`Event::Established`]. A QP shared by the requests posted on
/// it before `rdma_accept` needs this state: iWARP has no receiver-not-ready retry, so a
/// server's receives must be posted before the accept, and their completions must be able to
/// post on the same QP afterwards. An [`RwCtx`] takes a [`Qp<Rts>`]: not this state.
///
/// [`Event::Established`]: super::cm::Event::Established
/// [`RwCtx`]: super::rw::RwCtx
pub struct Cm;

impl private::Sealed for Reset {}
impl private::Sealed for Init {}
impl private::Sealed for Rtr {}
impl private::Sealed for Rts {}
impl private::Sealed for Cm {}
impl State for Reset {}
impl State for Init {}
impl State for Rtr {}
impl State for Rts {}
impl State for Cm {}
impl CanRecv for Init {}
impl CanRecv for Rtr {}
impl CanRecv for Rts {}
impl CanRecv for Cm {}
impl CanSend for Rts {}
impl CanSend for Cm {}

/// Which queues have been drained for good.
#[derive(Default)]
struct Drained {
    send: bool,
    recv: bool,
}

/// Per-QP accounting, reached from completions through `ib_qp.qp_context`.
#[pin_data]
pub(crate) struct Shared {
    pub(crate) sq_used: AtomicU32,
    pub(crate) rq_used: AtomicU32,
    /// Closed by drain, which waits for the posts under way.
    pub(crate) gate: PostGate,
    /// The module whose requests the QP carries.
    pub(crate) owner: OwnerCell,
    /// A chained post failed part-way (see [`Shared::break_off`]): posts fail with `EIO`.
    pub(crate) broken: AtomicBool,
    /// The requests of such posts, given back by `orphan_work` (or when the QP is destroyed).
    #[pin]
    orphans: SpinLockBh<KVec<Orphan>>,
    /// Moves the QP to the error state, drains its send queue and gives the orphans back
    /// ([`give_back_orphans`]); cancelled before the QP is destroyed.
    #[pin]
    orphan_work: Opaque<bindings::work_struct>,
    /// The QP, for `orphan_work`: set once it is created, before anything can be posted.
    inner: AtomicPtr<QpInner>,
    /// Whether anything was ever posted (a QP that never was needs no drain).
    pub(crate) posted: AtomicBool,
    /// Serialises drains: a second caller returns only once the first has finished.
    #[pin]
    drained: Mutex<Drained>,
    /// The owner's handler of the QP's asynchronous events.
    events: EventSlot,
    /// The connection manager id the QP was created on, told of `CommEst`.
    on: Option<Arc<dyn CreatedOn>>,
    /// The multicast groups the QP is attached to (GID and LID).
    #[pin]
    pub(crate) groups: Mutex<KVec<(Gid, u16)>>,
}

impl Shared {
    /// New accounting. Not generic, so that its lock classes (keys and names) are the kernel's
    /// own, whichever module creates QPs: lockdep forgets the classes of a module that unloads.
    fn new(on: Option<Arc<dyn CreatedOn>>) -> Result<Pin<KBox<Shared>>> {
        KBox::pin_init(
            pin_init!(Shared {
                sq_used: AtomicU32::new(0),
                rq_used: AtomicU32::new(0),
                gate: PostGate::new(),
                owner: OwnerCell::new(),
                broken: AtomicBool::new(false),
                orphans <- new_spinlock_bh!(KVec::new(), "rdma_qp_orphans"),
                // SAFETY: `init_work_with_key` initialises the pinned slot it is given, for a
                // built-in work function, with a static lock class.
                orphan_work <- unsafe {
                    Opaque::ffi_init(|slot: *mut bindings::work_struct| {
                        bindings::init_work_with_key(
                            slot,
                            Some(give_back_orphans),
                            false,
                            c"kernel::rdma::qp::orphans".as_ptr().cast(),
                            crate::static_lock_class!().as_ptr(),
                        )
                    })
                },
                inner: AtomicPtr::new(core::ptr::null_mut()),
                posted: AtomicBool::new(false),
                drained <- new_mutex!(Drained::default(), "rdma_qp_drain"),
                events: EventSlot::new(),
                on,
                groups <- new_mutex!(KVec::new(), "rdma_qp_groups"),
            }),
            GFP_KERNEL,
        )
    }

    /// A chained post of `n` operations got only part-way into the driver: the operations that
    /// did are unsignaled, so the request never completes through the core, and its memory must
    /// stay where the device may still read it. The QP takes no more posts (`EIO`), the
    /// request's slots are no longer counted, and the request is kept until the QP's send
    /// queue is drained: a work item moves the QP to the error state, drains the send queue
    /// (after which the device refers to nothing of the request), and gives it back, flushed
    /// ([`give_back_orphans`]). Not at the QP's destruction: a request that owns its QP (an
    /// `Arc` of it, or of an R/W context of it) would keep it for ever. If the request cannot
    /// even be recorded (no memory), it is leaked, loudly. Any context.
    pub(crate) fn break_off(&self, n: u32, request: Orphan) {
        self.sq_used.fetch_sub(n, Ordering::AcqRel);
        self.broken.store(true, Ordering::Release);
        if let Err(e) = self.orphans.lock().push(request, GFP_ATOMIC) {
            crate::pr_err!("kernel::rdma: a partly posted request is leaked: {:?}\n", e);
        }
        // SAFETY: The work item was initialised by `new`; queueing it is allowed in any context.
        // Its QP is set (the QP was posted on) and outlives it: the teardown cancels it first.
        unsafe {
            bindings::queue_work_on(
                bindings::wq_misc_consts_WORK_CPU_UNBOUND as _,
                bindings::system_unbound_wq,
                self.orphan_work.get(),
            )
        };
    }

    /// Whether the current task runs the QP's `orphan_work`: the QP must not be torn down
    /// there, where its teardown would wait for itself.
    fn in_orphan_work(&self) -> bool {
        // SAFETY: `current_work` only reads the current worker; only the address of the work
        // item is taken.
        unsafe { bindings::current_work() == self.orphan_work.get() }
    }

    /// Waits until `orphan_work` is neither queued nor running, and keeps it from running
    /// again. Sleeps; not from the work item itself (`in_orphan_work`).
    pub(crate) fn cancel_orphan_work(&self) {
        // SAFETY: Initialised by `new`; process context, outside the work item.
        unsafe { bindings::cancel_work_sync(self.orphan_work.get()) };
    }

    /// Records that something was posted (once: a store on every post would take the line
    /// from the CPU of the other queue's posts and completions each time). Any context.
    #[inline]
    pub(crate) fn mark_posted(&self) {
        if !self.posted.load(Ordering::Relaxed) {
            self.posted.store(true, Ordering::Release);
        }
    }

    /// Lets a post in: `ESHUTDOWN` once the QP is drained, `EIO` once a driver failure stopped
    /// it, `EINVAL` for a request of another module than the QP's earlier ones.
    #[inline]
    pub(crate) fn admit(&self, owner: Option<Owner>) -> Result<PostTicket<'_>> {
        // Before the gate, which the drain of a broken QP closes.
        if self.broken.load(Ordering::Acquire) {
            return Err(EIO);
        }
        let ticket = self.gate.enter()?;
        self.owner.claim(owner)?;
        Ok(ticket)
    }

    /// The requests of posts that failed part-way, once the device refers to none of them.
    pub(crate) fn take_orphans(&self) -> KVec<Orphan> {
        core::mem::take(&mut *self.orphans.lock())
    }
}

/// The `event_handler` of every QP: passes the event to the owner's handler, and `CommEst` to
/// the connection manager id the QP was created on. Not generic, so built into the kernel.
///
/// # Safety
///
/// Called by the driver with a valid event of a QP created by this module, whose
/// `qp_context` is its `Shared`.
unsafe extern "C" fn qp_event(event: *mut bindings::ib_event, context: *mut core::ffi::c_void) {
    // SAFETY: `context` is the QP's `Shared` (set at creation), freed only after the QP is
    // destroyed, after which no event is raised.
    let shared = unsafe { &*context.cast::<Shared>() };
    // SAFETY: `event` is valid for the call.
    if unsafe { (*event).event } == bindings::ib_event_type_IB_EVENT_COMM_EST {
        if let Some(on) = &shared.on {
            on.established();
        }
    }
    // SAFETY: `event` is valid for the call.
    unsafe { shared.events.raise(event) };
}

/// The work function of a QP's `orphan_work`. Built into the kernel (not generic).
///
/// # Safety
///
/// `work` is the `orphan_work` of a QP's `Shared` whose `inner` is set, queued by
/// [`Shared::break_off`]; the QP is not destroyed before the work item has run or been
/// cancelled.
unsafe extern "C" fn give_back_orphans(work: *mut bindings::work_struct) {
    // SAFETY: `work` is the `orphan_work` field of a live `Shared` (per the above).
    let shared = unsafe {
        &*crate::container_of!(
            work.cast::<Opaque<bindings::work_struct>>(),
            Shared,
            orphan_work
        )
    };
    // SAFETY: Set before anything was posted, and valid until the teardown has cancelled this
    // work item.
    let Some(inner) = (unsafe { shared.inner.load(Ordering::Acquire).as_ref() }) else {
        return;
    };
    inner.give_back_orphans();
}

/// Gives back the queue slots of a completed request.
///
/// # Safety
///
/// `qp` must be a QP created by this module (its `qp_context` is its `Shared`), not yet
/// destroyed.
#[inline]
pub(crate) unsafe fn release_slots(qp: *mut bindings::ib_qp, send: bool, n: u32) {
    // SAFETY: Per the safety requirements, `qp_context` points at the live `Shared` of the QP.
    let shared = unsafe { &*(*qp).qp_context.cast::<Shared>() };
    if send {
        shared.sq_used.fetch_sub(n, Ordering::AcqRel);
    } else {
        shared.rq_used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// Claims `n` of `depth` slots in `used`; `ENOMEM` when they are not free.
#[inline]
pub(crate) fn reserve(used: &AtomicU32, n: u32, depth: u32) -> Result {
    if super::sync::claim(used, n, depth) {
        Ok(())
    } else {
        Err(ENOMEM)
    }
}

/// Whatever else a QP was created through and must be destroyed through: the connection
/// manager, for the QP of a CM id (`rdma_create_qp` / `rdma_destroy_qp`).
pub(crate) trait CreatedOn: Send + Sync {
    /// Destroys `qp`, which was created through `self`. Sleeps.
    fn destroy_qp(&self, qp: *mut bindings::ib_qp);

    /// The QP got its first packet before the connection was established (`CommEst`): tells
    /// the connection manager. Any context.
    fn established(&self);
}

/// What the QP uses while it exists, and what must outlive it: dropped only once the QP is
/// destroyed, and leaked if it cannot be.
struct Keep {
    shared: Pin<KBox<Shared>>,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    srq: Option<Arc<Srq>>,
    pd: Arc<Pd>,
    on: Option<Arc<dyn CreatedOn>>,
}

/// The parts of a QP that do not depend on its state; dropping it drains and destroys the QP.
///
/// # Invariants
///
/// `ptr` is a QP created on `keep.pd` (through `keep.on`, if set), with `keep.send_cq` and
/// `keep.recv_cq` (and `keep.srq`, attached to it, if set), whose `qp_context` is
/// `keep.shared`, and which has `sq_slots + 1` / `recv_reserved` entries reserved on its CQs.
/// With `caps.rdma_ctxs`, it was created with that `max_rdma_ctxs` on port `port`. It is valid until `QpInner` is dropped.
pub(crate) struct QpInner {
    pub(crate) ptr: *mut bindings::ib_qp,
    pub(crate) qp_type: QpType,
    pub(crate) caps: QpCaps,
    pub(crate) port: u32,
    /// Whether `port` speaks iWARP ([`QpInner::set_port`]): read on every post.
    pub(crate) iwarp: bool,
    pub(crate) sq_psn: u32,
    /// Send queue entries that may be outstanding: `send_depth`, and the entries the core
    /// added for `rdma_ctxs`.
    pub(crate) sq_slots: u32,
    recv_reserved: u32,
    keep: ManuallyDrop<Keep>,
}

// SAFETY: Verbs on a QP may be called from any thread; the driver locks its queues and the
// accounting is atomic or under a lock.
unsafe impl Send for QpInner {}
// SAFETY: Posting and querying through `&QpInner` are safe to do concurrently (see `Send`).
unsafe impl Sync for QpInner {}

impl Teardown for QpInner {
    fn must_defer(&self) -> bool {
        // The drain waits for handlers of the QP's CQs to process its requests (not from one
        // of them, nor from any other CQ's: see `in_any_handler`, nor under an rdma_cm id's
        // handler lock: see `Qp::drain`); the teardown cancels the QP's `orphan_work`, which
        // may be what drops it.
        let k = &self.keep;
        atomic()
            || in_cm_handler()
            || k.shared.in_orphan_work()
            || k.shared.events.in_delivery()
            || super::cq::in_any_handler()
            || k.send_cq.in_handler()
            || k.recv_cq.in_handler()
            || k.srq.as_ref().is_some_and(|s| s.cq().in_handler())
    }
}

impl QpInner {
    /// Records the port the QP is on, and whether it speaks iWARP.
    pub(crate) fn set_port(&mut self, port: u32) {
        self.iwarp = self.keep.pd.device().is_iwarp(port);
        self.port = port;
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.keep.shared
    }

    pub(crate) fn pd(&self) -> &Arc<Pd> {
        &self.keep.pd
    }

    pub(crate) fn srq(&self) -> Option<&Arc<Srq>> {
        self.keep.srq.as_ref()
    }

    pub(crate) fn created_on(&self) -> bool {
        self.keep.on.is_some()
    }

    /// The work of [`Shared::break_off`]: moves the QP to the error state and drains its send
    /// queue, after which the device refers to nothing of the partly posted requests, then gives
    /// them back, flushed, as a handler of the send CQ would. If the drain cannot run, they are
    /// given back when the QP is destroyed. Process context (a work item).
    fn give_back_orphans(&self) {
        if let Err(e) = self.drain_send() {
            crate::pr_err!(
                "kernel::rdma: QP {}: cannot drain the send queue after a partial post ({:?}); its request comes back when the QP is destroyed\n",
                self.qpn(),
                e
            );
            return;
        }
        for orphan in self.shared().take_orphans() {
            // SAFETY: The send queue is drained: every operation of the request that the
            // driver took has completed and its completion has been processed (the drain's
            // marker comes after them), and the rest was never posted.
            unsafe { orphan.flush(&self.keep.send_cq) };
        }
    }
}

/// A queue pair in state `S`.
pub struct Qp<S: State> {
    pub(crate) inner: Deferred<QpInner>,
    _s: PhantomData<S>,
}

impl<S: State> Qp<S> {
    fn wrap(inner: Deferred<QpInner>) -> Self {
        Qp {
            inner,
            _s: PhantomData,
        }
    }

    pub(crate) fn into_state<N: State>(self) -> Qp<N> {
        Qp {
            inner: self.inner,
            _s: PhantomData,
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant); `qp_num` is fixed at creation.
        unsafe { (*self.inner.ptr).qp_num }
    }

    /// The transport of the QP.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The queue sizes, with the inline size the driver granted.
    pub fn caps(&self) -> &QpCaps {
        &self.inner.caps
    }

    /// The PD of the QP.
    pub fn pd(&self) -> &Arc<Pd> {
        self.inner.pd()
    }

    /// The SRQ the QP takes its receives from, if it was created with one.
    pub fn srq(&self) -> Option<&Arc<Srq>> {
        self.inner.srq()
    }

    /// Gives the QP a handler of its asynchronous events ([`AsyncHandler`]), once, right after
    /// creating it: events raised before are not delivered. The handler lives, and holds its
    /// module, until the QP is destroyed. May sleep.
    ///
    /// # Errors
    ///
    /// - `EBUSY` if the QP has a handler already.
    /// - `EAGAIN` in atomic context.
    /// - `ENOSPC` when the handler's module cannot be tracked ([`owner`](super::owner)).
    /// - `ENOMEM` when an allocation fails.
    pub fn set_event_handler<H: AsyncHandler>(&self, handler: Arc<H>) -> Result {
        self.inner.shared().events.set(handler)
    }

    /// Send requests outstanding (posted, not yet completed).
    pub fn send_outstanding(&self) -> u32 {
        self.inner.shared().sq_used.load(Ordering::Acquire)
    }

    /// Receive requests outstanding (posted, not yet completed).
    pub fn recv_outstanding(&self) -> u32 {
        self.inner.shared().rq_used.load(Ordering::Acquire)
    }

    /// What a peer needs to reach this QP.
    ///
    /// # Errors
    ///
    /// - `EINVAL` before the QP is bound to a port (Init).
    /// - `ENOENT` when the port has no valid GID ([`Device::preferred_gid`]), or what querying
    ///   the port answers.
    ///
    /// [`Device::preferred_gid`]: super::device::Device::preferred_gid
    pub fn endpoint(&self) -> Result<Endpoint> {
        if self.inner.port == 0 {
            return Err(EINVAL);
        }
        let gid = self.pd().device().preferred_gid(self.inner.port)?;
        Ok(Endpoint {
            qpn: self.qpn(),
            gid: gid.gid,
            psn: self.inner.sq_psn,
        })
    }
}
