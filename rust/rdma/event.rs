// SPDX-License-Identifier: GPL-2.0

//! Asynchronous events: of a device (`ib_register_event_handler`), and of a QP, SRQ or CQ
//! (the `event_handler` of each).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! Device events go to every [`EventRegistration`] of the device. Events of one QP, SRQ or CQ
//! go to the [`AsyncHandler`] its owner gives it right after creating it
//! ([`Qp::set_event_handler`](super::qp::Qp::set_event_handler),
//! [`Srq::set_event_handler`](super::srq::Srq::set_event_handler),
//! [`Cq::set_event_handler`](super::cq::Cq::set_event_handler)).
//!
//! A driver reports port state changes, GID table changes and fatal errors with
//! `ib_dispatch_event`; the core hands them to every registered handler, in process context
//! (the `ib_wq` workqueue, or the thread that changed a GID table), holding the device's
//! `event_handler_rwsem` for reading. An
//! [`EventRegistration`] owns one registration: dropping it unregisters, which waits for a
//! handler that is running, so nothing runs once the unregistration is over (at once, or from a
//! work item when the registration is dropped on a workqueue or in atomic context).

use super::{
    defer::{Deferred, Teardown},
    device::Device,
    owner::{watch_unloads, Hold, Owner},
    sync::{atomic, in_worker, might_sleep, sleepable, Tasks},
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{code::EBUSY, Result},
    sync::Arc,
    types::{ARef, Opaque},
};
use core::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// An asynchronous event of a device (`struct ib_event`, for the events ULPs act on).
///
/// # Examples
///
/// ```
/// use kernel::rdma::event::Event;
///
/// fn port_of(e: Event) -> Option<u32> {
///     match e {
///         Event::PortActive(p) | Event::PortErr(p) | Event::GidChange(p) => Some(p),
///         _ => None,
///     }
/// }
/// assert_eq!(port_of(Event::PortErr(1)), Some(1));
/// assert_eq!(port_of(Event::DeviceFatal), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The port (its number) became active (`IB_EVENT_PORT_ACTIVE`).
    PortActive(u32),
    /// The port went down (`IB_EVENT_PORT_ERR`).
    PortErr(u32),
    /// The GID table of the port changed (`IB_EVENT_GID_CHANGE`).
    GidChange(u32),
    /// The LID of the port changed (`IB_EVENT_LID_CHANGE`).
    LidChange(u32),
    /// The P_Key table of the port changed (`IB_EVENT_PKEY_CHANGE`).
    PkeyChange(u32),
    /// The subnet manager asks clients to register again (`IB_EVENT_CLIENT_REREGISTER`).
    ClientReregister(u32),
    /// The device failed and must be torn down (`IB_EVENT_DEVICE_FATAL`).
    DeviceFatal,
    /// Another event (its `enum ib_event_type` value); QP, CQ and SRQ events go to the
    /// handlers of those objects, not here.
    Other(u32),
}

impl Event {
    /// # Safety
    ///
    /// `ev` must point to a valid `ib_event`.
    unsafe fn from_raw(ev: *const bindings::ib_event) -> Self {
        // SAFETY: The caller guarantees `ev` is valid.
        let kind = unsafe { (*ev).event };
        // The element is a port only for port events: read it only for those.
        // SAFETY: For the events matched below, the dispatcher set `element.port_num`.
        let port = || unsafe { (*ev).element.port_num };
        match kind {
            bindings::ib_event_type_IB_EVENT_PORT_ACTIVE => Self::PortActive(port()),
            bindings::ib_event_type_IB_EVENT_PORT_ERR => Self::PortErr(port()),
            bindings::ib_event_type_IB_EVENT_GID_CHANGE => Self::GidChange(port()),
            bindings::ib_event_type_IB_EVENT_LID_CHANGE => Self::LidChange(port()),
            bindings::ib_event_type_IB_EVENT_PKEY_CHANGE => Self::PkeyChange(port()),
            bindings::ib_event_type_IB_EVENT_CLIENT_REREGISTER => Self::ClientReregister(port()),
            bindings::ib_event_type_IB_EVENT_DEVICE_FATAL => Self::DeviceFatal,
            other => Self::Other(other),
        }
    }
}

/// What to do with the events of a device.
pub trait EventHandler: Send + Sync + 'static {
    /// Called for each event of the device.
    ///
    /// Runs in process context, with the device's event handler lock held for reading: from
    /// the `ib_wq` workqueue for most events, and directly from the thread that changed a GID
    /// table (with that table's lock held) for `GidChange`. It may sleep briefly and should
    /// hand long work to a work item. Registering a handler for the same device from here
    /// would wait for itself; dropping a registration is safe (it is then unregistered from a
    /// work item).
    fn event(&self, device: &Device, event: Event);
}

/// A registered [`EventHandler`]; dropping it unregisters the handler.
///
/// It holds a reference on the device, so a ULP drops it in its
/// [`Client::remove`](super::client::Client::remove) at the latest. Unregistering waits for a
/// running handler, so a registration dropped where that could wait for itself or must not
/// sleep (in atomic context, or on a workqueue, where the handlers run) is unregistered from a
/// work item instead ([`defer`](super::defer)); the handler's data lives until then.
///
/// # Examples
///
/// ```
/// use core::sync::atomic::{AtomicBool, Ordering};
/// use kernel::rdma::{device::Device, event::{Event, EventHandler, EventRegistration}};
///
/// /// Tracks whether port 1 is usable, for the data path to check before posting.
/// struct PortWatch {
///     up: AtomicBool,
/// }
///
/// impl EventHandler for PortWatch {
///     fn event(&self, device: &Device, event: Event) {
///         match event {
///             Event::PortActive(1) => self.up.store(true, Ordering::Release),
///             Event::PortErr(1) | Event::DeviceFatal => {
///                 self.up.store(false, Ordering::Release);
///                 pr_info!("{}: port 1 is down\n", device.name());
///             }
///             _ => {}
///         }
///     }
/// }
///
/// fn watch(dev: &Device) -> Result<EventRegistration<PortWatch>> {
///     EventRegistration::new(dev, PortWatch { up: AtomicBool::new(true) })
/// }
/// ```
pub struct EventRegistration<T: EventHandler> {
    inner: Deferred<Registered<T>>,
}

/// The registered handler and its data; dropping it unregisters.
///
/// # Invariants
///
/// Once `registered` is set, `handler` is registered with the RDMA core for `device`, with
/// `callback::<T>`, until drop; `handler` never moves (it lives in the [`Deferred`] box).
struct Registered<T: EventHandler> {
    handler: Opaque<bindings::ib_event_handler>,
    registered: bool,
    data: T,
    device: ARef<Device>,
    /// Tasks running the handler now (events may be dispatched concurrently, each under the
    /// device's lock for reading): a registration dropped by one of them must not unregister
    /// there, which would take that lock for writing.
    callers: Tasks<CALLERS>,
    /// The module of `callback::<T>`, while it may be called.
    _hold: Option<Hold>,
}

/// Concurrent handler calls of one registration that are tracked; beyond them, a registration
/// dropped in its own handler on a workqueue is still unregistered from a work item, and only
/// one dropped from a GID-table writer's thread could wait for itself.
const CALLERS: usize = 4;

// SAFETY: The handler is called on a workqueue thread; `T: Send + Sync` may be used there, and
// the C part is only touched by the RDMA core and `drop`.
unsafe impl<T: EventHandler> Send for Registered<T> {}
// SAFETY: `&Registered` only gives `&T`, and `T: Sync`.
unsafe impl<T: EventHandler> Sync for Registered<T> {}

impl<T: EventHandler> Registered<T> {
    fn in_callback(&self) -> bool {
        self.callers.has_current()
    }
}

impl<T: EventHandler> Teardown for Registered<T> {
    fn must_defer(&self) -> bool {
        atomic() || in_worker() || self.in_callback()
    }
}

impl<T: EventHandler> Drop for Registered<T> {
    fn drop(&mut self) {
        if !self.registered {
            return;
        }
        might_sleep();
        // SAFETY: Registered (invariant); unregistering waits for a running handler.
        unsafe { bindings::ib_unregister_event_handler(self.handler.get()) };
    }
}

impl<T: EventHandler> EventRegistration<T> {
    /// Registers `data` for the events of `device` (`ib_register_event_handler`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EAGAIN` in atomic context.
    /// - `ENOSPC` when the module of `T`'s handler cannot be tracked
    ///   ([`owner`](super::owner): more than [`MODULES`](super::owner::MODULES) modules use
    ///   kernel::rdma).
    /// - `ENOMEM` when an allocation fails.
    pub fn new(device: &Device, data: T) -> Result<Self> {
        sleepable()?;
        watch_unloads();
        let owner = Owner::tracked(callback::<T> as *const () as usize)?;
        let mut inner = Deferred::new(Registered {
            handler: Opaque::uninit(),
            registered: false,
            data,
            device: device.into(),
            callers: Tasks::new(),
            _hold: owner.map(Owner::hold),
        })?;
        let reg = inner.get_mut();
        let slot = reg.handler.get();
        // SAFETY: `slot` is valid for writes and never moves (it is in the `Deferred` box). The
        // list head points at itself (`INIT_LIST_HEAD`).
        unsafe {
            (*slot).device = device.as_raw();
            (*slot).handler = Some(callback::<T>);
            (*slot).list.next = &raw mut (*slot).list;
            (*slot).list.prev = &raw mut (*slot).list;
            bindings::ib_register_event_handler(slot);
        }
        // INVARIANT: Registered with `callback::<T>`.
        reg.registered = true;
        Ok(Self { inner })
    }

    /// The handler's data.
    pub fn data(&self) -> &T {
        &self.inner.data
    }
}

/// # Safety
///
/// Called by the RDMA core with a handler registered by [`EventRegistration::new`] and a
/// valid event of its device.
unsafe extern "C" fn callback<T: EventHandler>(
    handler: *mut bindings::ib_event_handler,
    event: *mut bindings::ib_event,
) {
    // SAFETY: `handler` is the `handler` field of a live `Registered<T>` (it is unregistered
    // before it is freed).
    let reg = unsafe {
        &*crate::container_of!(
            handler.cast::<Opaque<bindings::ib_event_handler>>(),
            Registered<T>,
            handler
        )
    };
    // SAFETY: `event` is valid for the call.
    let ev = unsafe { Event::from_raw(event) };
    let _mark = reg.callers.enter();
    reg.data.event(&reg.device, ev);
}

/// An asynchronous event of one QP, SRQ or CQ (`struct ib_event` with a QP, SRQ or CQ element).
///
/// Soft-RoCE (`rdma_rxe`) raises `SqDrained`, `QpLastWqeReached`, `SrqLimitReached` and
/// `CqErr` (on a CQ overrun, which the CQ entry accounting of this crate prevents); it reports
/// access and transport errors in completions only, never as `QpAccessErr`, `QpReqErr` or
/// `QpFatal` events, and it has no `CommEst` (its connections are established by the CM's
/// messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A QP in Ready to Receive got its first packet before the CM's RTU
    /// (`IB_EVENT_COMM_EST`); for the QP of a CM id it is passed on to `rdma_notify` as well.
    CommEst,
    /// The QP went to the error state on an error that is not a completion's
    /// (`IB_EVENT_QP_FATAL`).
    QpFatal,
    /// The responder saw an invalid request (`IB_EVENT_QP_REQ_ERR`).
    QpReqErr,
    /// The responder saw an access violation (`IB_EVENT_QP_ACCESS_ERR`).
    QpAccessErr,
    /// The send queue of a QP moved to Send Queue Drained has no request left
    /// (`IB_EVENT_SQ_DRAINED`).
    SqDrained,
    /// The QP moved to its alternate path (`IB_EVENT_PATH_MIG`).
    PathMig,
    /// Moving to the alternate path failed (`IB_EVENT_PATH_MIG_ERR`).
    PathMigErr,
    /// A QP with an SRQ in the error state will take no more receives from it
    /// (`IB_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached,
    /// The SRQ holds fewer receives than its armed limit (`IB_EVENT_SRQ_LIMIT_REACHED`); the
    /// limit is disarmed until armed again.
    SrqLimitReached,
    /// The SRQ failed (`IB_EVENT_SRQ_ERR`).
    SrqErr,
    /// The CQ failed, for instance on an overrun (`IB_EVENT_CQ_ERR`).
    CqErr,
    /// Another event (its `enum ib_event_type` value).
    Other(u32),
}

impl AsyncEvent {
    /// The event of type `kind` (`enum ib_event_type`).
    pub(crate) fn from_type(kind: bindings::ib_event_type) -> Self {
        match kind {
            bindings::ib_event_type_IB_EVENT_COMM_EST => Self::CommEst,
            bindings::ib_event_type_IB_EVENT_QP_FATAL => Self::QpFatal,
            bindings::ib_event_type_IB_EVENT_QP_REQ_ERR => Self::QpReqErr,
            bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR => Self::QpAccessErr,
            bindings::ib_event_type_IB_EVENT_SQ_DRAINED => Self::SqDrained,
            bindings::ib_event_type_IB_EVENT_PATH_MIG => Self::PathMig,
            bindings::ib_event_type_IB_EVENT_PATH_MIG_ERR => Self::PathMigErr,
            bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED => Self::QpLastWqeReached,
            bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED => Self::SrqLimitReached,
            bindings::ib_event_type_IB_EVENT_SRQ_ERR => Self::SrqErr,
            bindings::ib_event_type_IB_EVENT_CQ_ERR => Self::CqErr,
            other => Self::Other(other),
        }
    }
}

/// What to do with the asynchronous events of a QP, SRQ or CQ.
pub trait AsyncHandler: Send + Sync + 'static {
    /// Called for the events of the object the handler was given to.
    ///
    /// Drivers raise these events in whatever context they are in, often atomic and with hard
    /// interrupts disabled (soft-RoCE holds the QP's IRQ-safe state lock), where even a
    /// BH-disabling lock is wrong. So the event is only recorded there, and this runs later, in
    /// process context, from a work item on `system_wq`: it may sleep and allocate with
    /// `GFP_KERNEL`. Events of one kind raised before it ran are delivered once; calls for one
    /// object never overlap. Dropping the object from here is allowed, and so is dropping
    /// another QP, SRQ or CQ (their teardown then runs from another work item).
    fn event(&self, event: AsyncEvent);
}

/// An [`AsyncHandler`], its pending events and the work item that delivers them.
///
/// # Invariants
///
/// `work` is initialised for [`deliver`] once the sink is published in an [`EventSlot`].
#[repr(C)]
struct Sink {
    work: Opaque<bindings::work_struct>,
    /// Bit `n`: an event of type `n` waits to be delivered.
    pending: AtomicU32,
    // Dropped before the hold: the handler's drop runs the module's code.
    handler: Arc<dyn AsyncHandler>,
    _hold: Option<Hold>,
}

/// The tasks running [`deliver`] now (see [`in_any_delivery`]).
static DELIVERING: Tasks<16> = Tasks::new();

/// Whether the current task is delivering asynchronous events, of any object. Every delivery
/// work item is of one lock class; an object's teardown flushes its own delivery work, so a
/// teardown run from inside another object's delivery would make lockdep see a recursion (and
/// two handlers dropping each other's object would wait for each other): objects dropped there
/// are torn down from a work item of their own ([`defer`](super::defer)). While more deliveries
/// run than can be tracked, any workqueue worker counts as one (deferring needlessly is
/// harmless).
fn in_any_delivery() -> bool {
    DELIVERING.has_current()
}

/// The work function that delivers pending events. Built into the kernel (not generic).
///
/// # Safety
///
/// `work` is the `work` field of a published [`Sink`], which outlives the work item (its slot
/// flushes the work before freeing it).
unsafe extern "C" fn deliver(work: *mut bindings::work_struct) {
    // SAFETY: `work` is the first field of the `#[repr(C)]` sink, alive per the above.
    let sink = unsafe { &*work.cast::<Sink>() };
    let _mark = DELIVERING.enter();
    let mut bits = sink.pending.swap(0, Ordering::AcqRel);
    while bits != 0 {
        let n = bits.trailing_zeros();
        bits &= !(1 << n);
        sink.handler.event(AsyncEvent::from_type(n));
    }
}

/// Where a QP, SRQ or CQ keeps its [`AsyncHandler`], set once. Dropped with the object, after
/// the object is destroyed (no event can come after): that waits for the delivery of the events
/// raised before, so it sleeps.
pub(crate) struct EventSlot(AtomicPtr<Sink>);

impl EventSlot {
    pub(crate) const fn new() -> Self {
        Self(AtomicPtr::new(core::ptr::null_mut()))
    }

    /// Installs `handler`; `EBUSY` if the object has one already, `ENOSPC` if its module cannot
    /// be tracked. May sleep (allocates).
    pub(crate) fn set<H: AsyncHandler>(&self, handler: Arc<H>) -> Result {
        sleepable()?;
        watch_unloads();
        let code = <H as AsyncHandler>::event as fn(&H, AsyncEvent);
        let owner = Owner::tracked(code as *const () as usize)?;
        self.install(KBox::new(
            Sink {
                work: Opaque::uninit(),
                pending: AtomicU32::new(0),
                handler,
                _hold: owner.map(Owner::hold),
            },
            GFP_KERNEL,
        )?)
    }

    /// Publishes `sink`. Not generic, so that the work item's lock class is the kernel's own.
    fn install(&self, sink: KBox<Sink>) -> Result {
        let raw = KBox::into_raw(sink);
        // SAFETY: `raw` is a fresh sink, not published yet; `deliver` is its work function and
        // the lock class is static.
        unsafe {
            bindings::init_work_with_key(
                (*raw).work.get(),
                Some(deliver),
                false,
                c"kernel::rdma::event".as_ptr().cast(),
                crate::static_lock_class!().as_ptr(),
            )
        };
        if self
            .0
            .compare_exchange(
                core::ptr::null_mut(),
                raw,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // SAFETY: `raw` was not published: it is still only ours, and its work is idle.
            drop(unsafe { KBox::from_raw(raw) });
            return Err(EBUSY);
        }
        Ok(())
    }

    /// Records event `raw` for delivery, if there is a handler. Not generic: called from the
    /// built-in event trampolines of QPs, SRQs and CQs, in any context (hard interrupts
    /// disabled included).
    ///
    /// # Safety
    ///
    /// `raw` must point to a valid `ib_event`.
    pub(crate) unsafe fn raise(&self, raw: *const bindings::ib_event) {
        // SAFETY: A published sink lives until the slot is dropped, which happens only after
        // the object is destroyed and no event can be raised any more.
        let Some(sink) = (unsafe { self.0.load(Ordering::Acquire).as_ref() }) else {
            return;
        };
        // SAFETY: The caller guarantees `raw` is valid.
        let kind = unsafe { (*raw).event };
        if kind >= 32 {
            crate::pr_warn!("kernel::rdma: asynchronous event {} dropped\n", kind);
            return;
        }
        sink.pending.fetch_or(1 << kind, Ordering::AcqRel);
        // SAFETY: The work item is initialised (invariant) and its sink outlives it; queueing
        // is allowed in any context.
        unsafe { bindings::queue_work_on(WORK_CPU_UNBOUND, bindings::system_wq, sink.work.get()) };
    }

    /// Whether the current task is delivering events, this slot's or any other object's: the
    /// object must not be torn down here, where its teardown would wait for itself, or for a
    /// delivery work item from inside another ([`in_any_delivery`]).
    pub(crate) fn in_delivery(&self) -> bool {
        in_any_delivery()
    }
}

const WORK_CPU_UNBOUND: i32 = bindings::wq_misc_consts_WORK_CPU_UNBOUND as i32;

impl Drop for EventSlot {
    fn drop(&mut self) {
        let raw = *self.0.get_mut();
        if raw.is_null() {
            return;
        }
        might_sleep();
        // SAFETY: Published by `install`; no event is raised any more (the object is destroyed),
        // so once the work item is flushed nothing refers to the sink. `drop` never runs in the
        // work item itself (`in_delivery` defers the object's teardown).
        unsafe {
            bindings::flush_work((*raw).work.get());
            drop(KBox::from_raw(raw));
        }
    }
}
