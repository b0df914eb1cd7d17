// SPDX-License-Identifier: GPL-2.0

//! Teardown that waits for process context.
//!
//! C header: [`include/linux/workqueue.h`](srctree/include/linux/workqueue.h)
//!
//! Destroying a QP, CQ, PD, MR, SRQ, address handle, connection manager id or event registration
//! sleeps: the driver waits for its own references, a QP is drained first. The last reference to
//! such an object may nevertheless go where sleeping is not allowed: in a completion handler
//! running in softirq context (a request that owns an `Arc` of its QP), under a BH-disabling
//! lock, or in a handler of the very CQ the teardown has to wait for (which would wait for
//! itself). `Deferred` makes that harmless: each such object keeps, from its creation, the
//! storage of a work item; when it is dropped where its teardown cannot run, the teardown is
//! queued on `system_unbound_wq` instead of running there and then. Nothing is allocated at that
//! point, so handing the teardown over cannot fail.
//!
//! A deferred teardown still holds what the object held (its device, PD, CQs), so unregistering
//! the device waits for it, as it waits for any other reference; and it holds the module whose
//! code it may run ([`owner`](super::owner)), so unloading that module waits for it too.

use super::{
    owner::{Hold, Owner},
    sync::{atomic, in_any_handler, in_cm_handler},
};
use crate::{alloc::flags::GFP_KERNEL, alloc::KBox, bindings, error::Result, types::Opaque};
use core::ops::Deref;

/// An object whose destruction may sleep.
pub(crate) trait Teardown: Send + Sized + 'static {
    /// Whether the object, dropped here and now, must be torn down from process context
    /// instead: by default, when the caller may not sleep.
    fn must_defer(&self) -> bool {
        atomic()
    }
}

/// The part of a deferred teardown that the (non-generic) work function reads.
#[repr(C)]
struct Header {
    work: Opaque<bindings::work_struct>,
    /// Frees the [`Slot`] this header starts, dropping its object.
    drop_slot: unsafe fn(*mut Header),
    /// The module whose code `drop_slot` is, while the teardown is queued.
    hold: Option<Hold>,
}

#[repr(C)]
struct Slot<T> {
    header: Header,
    obj: T,
}

/// # Safety
///
/// `h` must be the header of a `Slot<T>` allocated by [`Deferred::new`] and owned by the caller.
unsafe fn drop_slot<T>(h: *mut Header) {
    // SAFETY: The header is the first field of a `#[repr(C)]` `Slot<T>` allocated as a `KBox`,
    // which the caller owns.
    drop(unsafe { KBox::from_raw(h.cast::<Slot<T>>()) });
}

/// The work function of every deferred teardown. Built into the kernel (not generic), so that
/// it releases the hold on the module whose code it called only after that code has returned.
///
/// # Safety
///
/// `work` is the `work` field of the header of a queued slot, which the work item owns.
unsafe extern "C" fn deferred_work(work: *mut bindings::work_struct) {
    let h = work.cast::<Header>();
    // SAFETY: `work` is the first field of the `#[repr(C)]` header, which the work item owns.
    let (drop_fn, hold) = unsafe { ((*h).drop_slot, (*h).hold.take()) };
    // SAFETY: The slot is owned by this work item, which runs once.
    unsafe { drop_fn(h) };
    drop(hold);
}

/// Hands the slot starting with header `h` to a work item that drops it. Not generic, so that
/// the work item's lock class (key and name) is the kernel's own: lockdep forgets the classes
/// of a module that unloads.
///
/// # Safety
///
/// `h` is the header of a slot allocated by [`Deferred::new`], owned by the caller, which
/// gives it to the work item.
unsafe fn queue(h: *mut Header) {
    // SAFETY: The header is initialised for `deferred_work`, which runs once;
    // `system_unbound_wq` is a static workqueue of the kernel.
    unsafe {
        // The function that frees the slot was picked where `new` was compiled, which may be a
        // module: hold it until the work item has run.
        (*h).hold = Owner::of((*h).drop_slot as usize).map(Owner::hold);
        bindings::init_work_with_key(
            (*h).work.get(),
            Some(deferred_work),
            false,
            c"kernel::rdma::defer".as_ptr().cast(),
            crate::static_lock_class!().as_ptr(),
        );
        bindings::queue_work_on(
            bindings::wq_misc_consts_WORK_CPU_UNBOUND as _,
            bindings::system_unbound_wq,
            (*h).work.get(),
        );
    }
}

/// Owns an object whose teardown may sleep, and runs that teardown where it can (see the
/// [module documentation](self)).
///
/// # Invariants
///
/// `slot` is a `KBox<Slot<T>>` turned into a raw pointer, owned by `self`, whose work item is
/// not queued.
pub(crate) struct Deferred<T: Teardown> {
    slot: *mut Slot<T>,
}

// SAFETY: `Deferred<T>` owns a `T`, which is `Send`; the work item is only used when it is
// dropped.
unsafe impl<T: Teardown> Send for Deferred<T> {}
// SAFETY: `&Deferred<T>` only gives `&T`.
unsafe impl<T: Teardown + Sync> Sync for Deferred<T> {}

impl<T: Teardown> Deferred<T> {
    /// Takes `obj`, with the storage of its work item. Process context: on failure `obj` is
    /// dropped here.
    pub(crate) fn new(obj: T) -> Result<Self> {
        let slot = KBox::new(
            Slot {
                header: Header {
                    work: Opaque::uninit(),
                    drop_slot: drop_slot::<T>,
                    hold: None,
                },
                obj,
            },
            GFP_KERNEL,
        )?;
        // INVARIANT: Owned, and the work item is not queued.
        Ok(Self {
            slot: KBox::into_raw(slot),
        })
    }

    /// The object, for changing it while it is owned alone.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // SAFETY: `slot` is valid and owned (invariant); `&mut self` is exclusive.
        unsafe { &mut (*self.slot).obj }
    }
}

impl<T: Teardown> Deref for Deferred<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: `slot` is valid and owned (invariant).
        unsafe { &(*self.slot).obj }
    }
}

impl<T: Teardown> Drop for Deferred<T> {
    fn drop(&mut self) {
        if !self.must_defer() {
            // SAFETY: Owned (invariant), never queued: freed once, here.
            drop(unsafe { KBox::from_raw(self.slot) });
            return;
        }
        // SAFETY: The slot is valid and owned, and from here on owned by the work item.
        unsafe { queue(self.slot.cast::<Header>()) };
    }
}

/// The teardown rule of a [`DropOutside`]: deferred in atomic context, in a completion
/// handler and in an rdma_cm event handler.
struct Outside<T>(T);

impl<T: Send + 'static> Teardown for Outside<T> {
    fn must_defer(&self) -> bool {
        atomic() || in_cm_handler() || in_any_handler()
    }
}

/// Owns a value whose drop must run in process context, outside every RDMA handler: one that
/// ends a connection (drains its QP, destroys its rdma_cm id, frees what its requests used).
///
/// Dropped in an rdma_cm event handler, a completion handler or atomic context, the value is
/// dropped from a work item on `system_unbound_wq` instead, as nvmet-rdma ends its queues
/// from `release_work`: in an rdma_cm handler, whose id's handler lock the CM holds, a drain
/// would wait for the work of CQs that other ULPs share ([`Qp::drain`] refuses there). The
/// work item's storage is allocated by [`DropOutside::new`], so handing the drop over cannot
/// fail; the module whose drop code runs is held until it has run, so `rmmod` waits for it.
///
/// [`Qp::drain`]: super::qp::Qp::drain
///
/// # Examples
///
/// ```
/// use kernel::prelude::*;
/// use kernel::rdma::defer::DropOutside;
///
/// struct Session;
/// impl Drop for Session {
///     fn drop(&mut self) {
///         // Disconnect, drain the QP, free the buffers: may sleep on completion handlers.
///     }
/// }
///
/// let s = DropOutside::new(Session)?;
/// // In an rdma_cm event handler this drop is handed to a work item; here it runs now.
/// drop(s);
/// # Ok::<(), Error>(())
/// ```
pub struct DropOutside<T: Send + 'static>(Deferred<Outside<T>>);

// SAFETY: It owns a `T`, which is `Send`. Stated here rather than derived through `Deferred`'s
// `Teardown` bound, so that a `T` holding `DropOutside<T>`s of its own kind (a connection whose
// id's handler holds the list of connections) is `Send` too.
unsafe impl<T: Send + 'static> Send for DropOutside<T> {}
// SAFETY: `&DropOutside<T>` only gives `&T`.
unsafe impl<T: Send + Sync + 'static> Sync for DropOutside<T> {}

impl<T: Send + 'static> DropOutside<T> {
    /// Takes `value`, with the storage of the work item that may drop it. On failure (`ENOMEM`)
    /// `value` is dropped here: make it where that is allowed, before the connection has
    /// anything outstanding.
    pub fn new(value: T) -> Result<Self> {
        Ok(Self(Deferred::new(Outside(value))?))
    }
}

impl<T: Send + 'static> Deref for DropOutside<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0 .0
    }
}
