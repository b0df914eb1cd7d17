// SPDX-License-Identifier: GPL-2.0

//! Asynchronous device events (`ib_register_event_handler`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
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
    sync::{atomic, current, in_worker, might_sleep, sleepable},
};
use crate::{
    bindings,
    error::Result,
    types::{ARef, Opaque},
};
use core::sync::atomic::{AtomicPtr, Ordering};

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
    callers: [AtomicPtr<bindings::task_struct>; CALLERS],
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
        let me = current();
        self.callers.iter().any(|c| c.load(Ordering::Acquire) == me)
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
    pub fn new(device: &Device, data: T) -> Result<Self> {
        sleepable()?;
        watch_unloads();
        let owner = Owner::tracked(callback::<T> as *const () as usize)?;
        let mut inner = Deferred::new(Registered {
            handler: Opaque::uninit(),
            registered: false,
            data,
            device: device.into(),
            callers: [const { AtomicPtr::new(core::ptr::null_mut()) }; CALLERS],
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
    let me = current();
    let slot = reg.callers.iter().find(|c| {
        c.compare_exchange(
            core::ptr::null_mut(),
            me,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
    });
    reg.data.event(&reg.device, ev);
    if let Some(c) = slot {
        c.store(core::ptr::null_mut(), Ordering::Release);
    }
}
