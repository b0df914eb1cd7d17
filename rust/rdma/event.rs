// SPDX-License-Identifier: GPL-2.0

//! Asynchronous device events (`ib_register_event_handler`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A driver reports port state changes, GID table changes and fatal errors with
//! `ib_dispatch_event`; the core hands them to every registered handler from the `ib_wq`
//! workqueue (process context), holding the device's `event_handler_rwsem` for reading. An
//! [`EventRegistration`] owns one registration: dropping it unregisters, which waits for a
//! handler that is running, so nothing runs after the drop.

use super::device::Device;
use crate::{
    alloc::flags::GFP_KERNEL,
    bindings,
    error::Result,
    prelude::*,
    types::{ARef, Opaque},
};

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
        let (kind, port) = unsafe { ((*ev).event, (*ev).element.port_num) };
        match kind {
            bindings::ib_event_type_IB_EVENT_PORT_ACTIVE => Self::PortActive(port),
            bindings::ib_event_type_IB_EVENT_PORT_ERR => Self::PortErr(port),
            bindings::ib_event_type_IB_EVENT_GID_CHANGE => Self::GidChange(port),
            bindings::ib_event_type_IB_EVENT_LID_CHANGE => Self::LidChange(port),
            bindings::ib_event_type_IB_EVENT_PKEY_CHANGE => Self::PkeyChange(port),
            bindings::ib_event_type_IB_EVENT_CLIENT_REREGISTER => Self::ClientReregister(port),
            bindings::ib_event_type_IB_EVENT_DEVICE_FATAL => Self::DeviceFatal,
            other => Self::Other(other),
        }
    }
}

/// What to do with the events of a device.
pub trait EventHandler: Send + Sync + 'static {
    /// Called for each event of the device.
    ///
    /// Runs in process context (the `ib_wq` workqueue) with the device's event handler
    /// lock held for reading: it may sleep briefly, but must not register or drop an
    /// [`EventRegistration`] of the same device (that takes the lock for writing) and should
    /// hand long work to a work item.
    fn event(&self, device: &Device, event: Event);
}

/// A registered [`EventHandler`]; dropping it unregisters the handler.
///
/// It holds a reference on the device, so a ULP drops it in its
/// [`Client::remove`](super::client::Client::remove) at the latest.
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
/// fn watch(dev: &Device) -> Result<Pin<KBox<EventRegistration<PortWatch>>>> {
///     EventRegistration::new(dev, PortWatch { up: AtomicBool::new(true) })
/// }
/// ```
///
/// # Invariants
///
/// `handler` is registered with the RDMA core for `device`, with `callback::<T>`, from `new`
/// until drop.
#[pin_data(PinnedDrop)]
pub struct EventRegistration<T: EventHandler> {
    #[pin]
    handler: Opaque<bindings::ib_event_handler>,
    data: T,
    device: ARef<Device>,
}

// SAFETY: The handler is called on a workqueue thread; `T: Send + Sync` may be used there.
unsafe impl<T: EventHandler> Send for EventRegistration<T> {}
// SAFETY: `&EventRegistration` only gives `&T`, and `T: Sync`.
unsafe impl<T: EventHandler> Sync for EventRegistration<T> {}

impl<T: EventHandler> EventRegistration<T> {
    /// Registers `data` for the events of `device` (`ib_register_event_handler`). May sleep.
    pub fn new(device: &Device, data: T) -> Result<Pin<KBox<Self>>> {
        let dev = device.as_raw();
        let reg = KBox::pin_init(
            pin_init!(Self {
                handler <- Opaque::ffi_init(move |slot: *mut bindings::ib_event_handler| {
                    // SAFETY: `slot` is valid for writes; it is registered only once `Self`
                    // is complete (below). The list head points at itself (`INIT_LIST_HEAD`).
                    unsafe {
                        (*slot).device = dev;
                        (*slot).handler = Some(callback::<T>);
                        (*slot).list.next = &raw mut (*slot).list;
                        (*slot).list.prev = &raw mut (*slot).list;
                    }
                }),
                data,
                device: device.into(),
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: The handler is initialised and pinned in a box that lives until
        // `PinnedDrop` unregisters it.
        unsafe { bindings::ib_register_event_handler(reg.handler.get()) };
        // INVARIANT: Registered with `callback::<T>`.
        Ok(reg)
    }

    /// The handler's data.
    pub fn data(&self) -> &T {
        &self.data
    }
}

#[pinned_drop]
impl<T: EventHandler> PinnedDrop for EventRegistration<T> {
    fn drop(self: Pin<&mut Self>) {
        super::sync::might_sleep();
        // SAFETY: Registered (invariant); unregistering waits for a running handler.
        unsafe { bindings::ib_unregister_event_handler(self.handler.get()) };
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
    // SAFETY: `handler` is the `handler` field of a live, pinned `EventRegistration<T>`
    // (it is unregistered before it is freed).
    let reg = unsafe {
        &*crate::container_of!(
            handler.cast::<Opaque<bindings::ib_event_handler>>(),
            EventRegistration<T>,
            handler
        )
    };
    // SAFETY: `event` is valid for the call.
    let ev = unsafe { Event::from_raw(event) };
    reg.data.event(&reg.device, ev);
}
