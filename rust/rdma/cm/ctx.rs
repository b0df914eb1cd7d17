// SPDX-License-Identifier: GPL-2.0

//! The C side of a connection manager id: its context, its event trampoline, and who destroys
//! it where.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)
//!
//! Every id of this crate has [`cm_event`] as its event handler and a [`Ctx`] as its context.
//! `cm_event` is built into the kernel (not generic); it reaches the owner's handler through
//! function pointers of the handler's type, which live in the owner's module, and finishes what
//! a handler started (a destroy requested from inside the handler) only after that module code
//! has returned. The context holds the module ([`owner`](crate::rdma::owner)) until the id is
//! destroyed.

use super::{Event, Handler, Id, Request};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{code::*, Error, Result},
    init::InPlaceInit,
    new_mutex,
    rdma::{
        defer::{Deferred, Teardown},
        owner::{Hold, Owner},
        qp::CreatedOn,
        sync::{atomic, cm_handling, current, in_worker, might_sleep},
    },
    sync::{Arc, Mutex},
    types::Opaque,
};
use core::{
    cell::Cell,
    ffi::c_void,
    marker::PhantomData,
    pin::Pin,
    sync::atomic::{AtomicBool, AtomicPtr, Ordering},
};

/// The C-side context of an id: what its events need. Allocated with the id, freed after it
/// is destroyed.
pub(super) struct Ctx {
    pub(super) id: *mut bindings::rdma_cm_id,
    /// The `KBox<H>` of the handler; null once dropped.
    pub(super) handler: AtomicPtr<c_void>,
    /// Calls the handler with an event (`dispatch::<H>`).
    dispatch: unsafe fn(&Ctx, *mut bindings::rdma_cm_id, &bindings::rdma_cm_event),
    /// Offers a connection request to a listener's handler (`dispatch_request::<H>`).
    dispatch_request:
        unsafe fn(&Ctx, *mut bindings::rdma_cm_id, &bindings::rdma_cm_event) -> *mut Ctx,
    drop_handler: unsafe fn(*mut c_void),
    /// The task running a handler of this id (holding its handler lock), if any.
    locked_by: AtomicPtr<bindings::task_struct>,
    /// The last reference went while the id's handler lock was held: the handler's return
    /// path (or a work item) destroys the id.
    doomed: AtomicBool,
    /// A QP is being created on the id, or exists: a second one is refused.
    pub(super) qp_claimed: AtomicBool,
    /// Serialises the dispatch of the id's events: a listener on a wildcard address gets
    /// connection requests through one internal id per device, each under its own handler
    /// lock, so the CM's lock alone does not.
    dispatching: Pin<KBox<Mutex<()>>>,
    work: Opaque<bindings::work_struct>,
    /// The module of the handler, until the id is destroyed.
    _hold: Option<Hold>,
}

/// # Safety
///
/// `p` must come from `KBox::<H>::into_raw` and not be used again.
unsafe fn drop_handler<H>(p: *mut c_void) {
    // SAFETY: Per the safety requirements.
    drop(unsafe { KBox::from_raw(p.cast::<H>()) });
}

/// The dispatch lock of a context. Not generic, so that its lock class (key and name) is the
/// kernel's own: lockdep forgets the classes of a module that unloads.
fn dispatch_lock() -> Result<Pin<KBox<Mutex<()>>>> {
    KBox::pin_init(new_mutex!((), "rdma_cm_dispatch"), GFP_KERNEL)
}

/// Makes an id's core the destroyer of the QP created on it. Not generic, so that the
/// `CreatedOn` vtable (and the drop code it names) is the kernel's own, whichever module
/// creates the QP: a QP's teardown must not run module code after releasing its module.
pub(super) fn created_on(core: Arc<IdCore>) -> Arc<dyn CreatedOn> {
    core
}

impl Ctx {
    pub(super) fn locked_here(&self) -> bool {
        self.locked_by.load(Ordering::Acquire) == current()
    }

    fn drop_handler(&self) {
        let h = self.handler.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !h.is_null() {
            // SAFETY: `h` came from `KBox::into_raw` of the handler type `drop_handler` drops;
            // swapped out, so it is dropped once.
            unsafe { (self.drop_handler)(h) };
        }
    }

    /// Runs `f` as the task that holds the id's handler lock (the CM holds it for the call).
    fn locked(&self, f: impl FnOnce()) {
        self.locked_by.store(current(), Ordering::Release);
        cm_handling(f);
        self.locked_by
            .store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// Calls the handler of `ctx`, an `H`, with `ev` of `id`.
///
/// # Safety
///
/// `ctx` is the live context of `id`, whose handler is not dropped, and `ev` a valid event
/// (not a connection request) of `id`'s current handler call.
unsafe fn dispatch<H: Handler>(
    ctx: &Ctx,
    id: *mut bindings::rdma_cm_id,
    ev: &bindings::rdma_cm_event,
) {
    // SAFETY: The handler is the `KBox<H>` of the context (per the safety requirements), dropped
    // only under the handler lock (held) or after the id is destroyed.
    let h = unsafe { &*ctx.handler.load(Ordering::Acquire).cast::<H>() };
    // SAFETY: Per the safety requirements.
    let event = unsafe { translate::<H>(id, ev) };
    // SAFETY: The id is valid for the call.
    h.event(unsafe { Id::from_raw(id) }, event);
}

/// Offers the connection request `ev` (of the new id `id`) to the handler of the listener
/// `ctx`; returns the context the handler gave the new id with [`Request::take`], or null.
///
/// # Safety
///
/// As for [`dispatch`], with `ctx` the listener's context and `id` the request's new id.
unsafe fn dispatch_request<H: Handler>(
    ctx: &Ctx,
    id: *mut bindings::rdma_cm_id,
    ev: &bindings::rdma_cm_event,
) -> *mut Ctx {
    // SAFETY: As in `dispatch`.
    let h = unsafe { &*ctx.handler.load(Ordering::Acquire).cast::<H>() };
    let taken = Cell::new(core::ptr::null_mut::<Ctx>());
    let req = Request {
        id,
        event: ev,
        taken: &taken,
        _h: PhantomData,
    };
    // SAFETY: The listener is valid (its lock is held).
    h.event(unsafe { Id::from_raw(ctx.id) }, Event::ConnectRequest(req));
    taken.get()
}

/// The event handler of every id of this crate.
///
/// # Safety
///
/// Called by the CM with a valid id of this crate whose context is a live `Ctx` (for a
/// connection request: the listener's), and a valid event, with the id's handler lock held.
pub(super) unsafe extern "C" fn cm_event(
    id: *mut bindings::rdma_cm_id,
    ev: *mut bindings::rdma_cm_event,
) -> crate::ffi::c_int {
    // SAFETY: Per the safety requirements.
    let (ctx_ptr, ev) = unsafe { ((*id).context.cast::<Ctx>(), &*ev) };
    // SAFETY: The context is valid until the id is destroyed, which cannot happen while its
    // handler lock is held.
    let ctx = unsafe { &*ctx_ptr };
    let guard = ctx.dispatching.lock();
    if ev.event == bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_REQUEST {
        // SAFETY: As for this function; `id` is the new id, `ctx` its listener's, whose events
        // are serialised by `guard`.
        let ret = unsafe { connect_request(id, ctx_ptr, ev) };
        drop(guard);
        return ret;
    }
    if ctx.doomed.load(Ordering::Acquire) || ctx.handler.load(Ordering::Acquire).is_null() {
        // A work item is about to destroy the id; its handler is gone.
        return 0;
    }
    // SAFETY: The handler is present and the lock held; the event is not a request.
    ctx.locked(|| unsafe { (ctx.dispatch)(ctx, id, ev) });
    let doomed = ctx.doomed.load(Ordering::Acquire);
    drop(guard);
    if doomed {
        // The last reference to the id went in the handler: the CM destroys the id when told
        // so by the return value, and never calls the handler again (a second internal id of a
        // wildcard listener only delivers connection requests, which `doomed` refuses).
        ctx.drop_handler();
        // SAFETY: Nothing references the context any more.
        drop(unsafe { KBox::from_raw(ctx_ptr) });
        return 1;
    }
    0
}

/// # Safety
///
/// As for [`cm_event`]; `id` is the new id of a connection request and `ctx_ptr` the context of
/// its listener, whose handler lock the CM holds too.
unsafe fn connect_request(
    id: *mut bindings::rdma_cm_id,
    ctx_ptr: *mut Ctx,
    ev: &bindings::rdma_cm_event,
) -> crate::ffi::c_int {
    // SAFETY: Per the safety requirements.
    let ctx = unsafe { &*ctx_ptr };
    if ctx.doomed.load(Ordering::Acquire) || ctx.handler.load(Ordering::Acquire).is_null() {
        // The listener is going away: refuse.
        return 1;
    }
    let mut child = core::ptr::null_mut();
    // SAFETY: The handler is present and the listener's lock held.
    ctx.locked(|| child = unsafe { (ctx.dispatch_request)(ctx, id, ev) });
    let ret = if child.is_null() {
        // Not taken: the CM destroys the new id, which refuses the peer.
        1
    } else {
        // SAFETY: `take` created the new id's context; it is valid until freed here or by the
        // id's owner, which cannot happen before this returns (the id's lock is held).
        let c = unsafe { &*child };
        c.locked_by.store(core::ptr::null_mut(), Ordering::Release);
        if c.doomed.load(Ordering::Acquire) {
            c.drop_handler();
            // SAFETY: The id's last reference is gone; nothing else references its context.
            drop(unsafe { KBox::from_raw(child) });
            1
        } else {
            0
        }
    };
    if ctx.doomed.load(Ordering::Acquire) && !ctx.handler.load(Ordering::Acquire).is_null() {
        // The listener's last reference went in this handler (a later request sees the handler
        // gone and is refused above), and the CM holds its lock until this returns: destroy it
        // from a work item.
        ctx.drop_handler();
        let work = ctx.work.get();
        // SAFETY: `work` is unused until now; `destroy_work` matches it; the context is owned
        // by the work item from here on, and lives until it runs.
        unsafe {
            bindings::init_work_with_key(
                work,
                Some(destroy_work),
                false,
                c"kernel::rdma::cm::destroy".as_ptr().cast(),
                crate::static_lock_class!().as_ptr(),
            );
            bindings::queue_work_on(
                bindings::wq_misc_consts_WORK_CPU_UNBOUND as _,
                bindings::system_unbound_wq,
                work,
            );
        }
    }
    ret
}

/// Destroys a doomed listener from process context, once the CM has released its lock.
///
/// # Safety
///
/// `work` is the `work` field of a `Ctx` whose handler is dropped and which nothing else
/// references.
unsafe extern "C" fn destroy_work(work: *mut bindings::work_struct) {
    let ctx = work
        .cast::<u8>()
        .wrapping_sub(core::mem::offset_of!(Ctx, work))
        .cast::<Ctx>();
    // SAFETY: `ctx` is the `Ctx` of the work item, owned by it (see `connect_request`).
    let ctx = unsafe { KBox::from_raw(ctx) };
    // SAFETY: The id is valid and no longer referenced by anything else.
    unsafe { bindings::rdma_destroy_id(ctx.id) };
    // The hold on the handler's module goes with the context, here, in built-in code.
}

/// Owns an `rdma_cm_id`; dropping the last reference destroys it (see the
/// [`cm` documentation](super)), from process context if it goes where sleeping is not
/// allowed.
pub(crate) struct IdCore {
    raw: Deferred<IdRaw>,
}

/// # Invariants
///
/// `ctx` is null (nothing built yet) or a leaked `KBox<Ctx>` whose `id` is null (no id created
/// yet) or valid with `ctx` as its context.
struct IdRaw {
    ctx: *mut Ctx,
}

// SAFETY: The CM serialises the verbs on an id internally; `Ctx` is only read or atomically
// updated.
unsafe impl Send for IdRaw {}
// SAFETY: As above.
unsafe impl Sync for IdRaw {}

impl Teardown for IdRaw {
    fn must_defer(&self) -> bool {
        // `rdma_destroy_id` waits for the id's work, which may be queued behind the caller on
        // the CM's ordered workqueue: defer from workers, except inside the id's own handler,
        // where the handler's return value destroys it.
        // SAFETY: `ctx` is null or valid (invariant).
        let own = unsafe { self.ctx.as_ref() }.is_some_and(Ctx::locked_here);
        atomic() || (in_worker() && !own)
    }
}

impl Drop for IdRaw {
    fn drop(&mut self) {
        // SAFETY: `ctx` is null or valid (invariant).
        let Some(ctx) = (unsafe { self.ctx.as_ref() }) else {
            return;
        };
        if ctx.locked_here() {
            // Inside a handler of this id: `cm_event` finishes the job when it returns.
            ctx.doomed.store(true, Ordering::Release);
            return;
        }
        might_sleep();
        if !ctx.id.is_null() {
            // SAFETY: The id is valid (invariant); this waits for a handler running elsewhere,
            // and no event is delivered afterwards.
            unsafe { bindings::rdma_destroy_id(ctx.id) };
        }
        ctx.drop_handler();
        // SAFETY: Nothing references the context any more (the id is gone).
        drop(unsafe { KBox::from_raw(self.ctx) });
    }
}

impl IdCore {
    /// Wraps `id` (or, if null, an id the caller creates next and stores with
    /// [`IdCore::set_id`]) with a new context holding `handler`.
    ///
    /// # Safety
    ///
    /// `id` must be null or a valid id that nothing else owns; if `in_handler`, its handler lock
    /// is held by the current task, else no event of `id` can be delivered yet.
    pub(super) unsafe fn new<H: Handler>(
        id: *mut bindings::rdma_cm_id,
        handler: H,
        in_handler: bool,
    ) -> Result<Self> {
        // Everything is allocated before the id is touched; dropping `raw` before it has a
        // context does nothing.
        let mut raw = Deferred::new(IdRaw {
            ctx: core::ptr::null_mut(),
        })?;
        let dispatching = dispatch_lock()?;
        let owner = Owner::tracked(dispatch::<H> as *const () as usize)?;
        let h = KBox::into_raw(KBox::new(handler, GFP_KERNEL)?);
        let ctx = KBox::new(
            Ctx {
                id,
                handler: AtomicPtr::new(h.cast()),
                dispatch: dispatch::<H>,
                dispatch_request: dispatch_request::<H>,
                drop_handler: drop_handler::<H>,
                locked_by: AtomicPtr::new(if in_handler {
                    current()
                } else {
                    core::ptr::null_mut()
                }),
                doomed: AtomicBool::new(false),
                qp_claimed: AtomicBool::new(false),
                dispatching,
                work: Opaque::uninit(),
                _hold: owner.map(Owner::hold),
            },
            GFP_KERNEL,
        );
        let ctx = match ctx {
            Ok(c) => KBox::into_raw(c),
            Err(e) => {
                // SAFETY: `h` was just leaked and is not referenced.
                unsafe { drop_handler::<H>(h.cast()) };
                return Err(e.into());
            }
        };
        if !id.is_null() {
            // SAFETY: Per the safety requirements no event reads the context concurrently.
            unsafe { (*id).context = ctx.cast() };
        }
        // INVARIANT: `ctx` is set, with a null id or `id`, whose context it now is.
        raw.get_mut().ctx = ctx;
        Ok(Self { raw })
    }

    /// Records the id created for this context.
    ///
    /// # Safety
    ///
    /// `id` is a valid id, created with this context as its context, with no id recorded yet.
    pub(super) unsafe fn set_id(&mut self, id: *mut bindings::rdma_cm_id) {
        // SAFETY: The context is valid (invariant) and owned; no event of `id` can be delivered
        // before an operation on it.
        unsafe { (*self.raw.ctx).id = id };
    }

    pub(super) fn ctx(&self) -> &Ctx {
        // SAFETY: Set by `new` before `self` exists, and valid until `self` is dropped
        // (invariant).
        unsafe { &*self.raw.ctx }
    }

    /// The context, to hand to the CM when the id is created.
    pub(super) fn ctx_ptr(&self) -> *mut Ctx {
        self.raw.ctx
    }

    pub(crate) fn id(&self) -> *mut bindings::rdma_cm_id {
        self.ctx().id
    }
}

impl CreatedOn for IdCore {
    fn destroy_qp(&self, _qp: *mut bindings::ib_qp) {
        might_sleep();
        // SAFETY: The id is valid while `self` is; its QP is the one being destroyed
        // (`rdma_destroy_qp` destroys it and clears it from the id).
        unsafe { bindings::rdma_destroy_qp(self.id()) };
        self.ctx().qp_claimed.store(false, Ordering::Release);
    }

    fn established(&self) {
        // SAFETY: The id is valid while `self` is, and the QP (whose event this is) is
        // destroyed through it first. `rdma_notify` takes only spinlocks; it refuses (and we
        // ignore) an id that is not connecting any more.
        let _ =
            unsafe { bindings::rdma_notify(self.id(), bindings::ib_event_type_IB_EVENT_COMM_EST) };
    }
}

/// # Safety
///
/// `ev` must be a valid event (not a connection request) of the current handler call of the
/// valid id `id`.
unsafe fn translate<'a, H: Handler>(
    id: *mut bindings::rdma_cm_id,
    ev: &'a bindings::rdma_cm_event,
) -> Event<'a, H> {
    let status = ev.status;
    let err = || {
        if status < 0 {
            Error::from_errno(status)
        } else {
            EIO
        }
    };
    // SAFETY: For the events below, the union holds connection parameters, except for the
    // UDP port space's establishment, which holds UD parameters (see `Established`).
    let conn = unsafe { &ev.param.conn };
    match ev.event {
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_RESOLVED => Event::AddrResolved,
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_ERROR => Event::AddrError(err()),
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_RESOLVED => Event::RouteResolved,
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ROUTE_ERROR => Event::RouteError(err()),
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_CONNECT_ERROR => Event::ConnectError(err()),
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_UNREACHABLE => Event::Unreachable(err()),
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_REJECTED => Event::Rejected {
            reason: status,
            // SAFETY: The CM passes the reject's private data (or none).
            private_data: unsafe { super::private_data(conn) },
        },
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ESTABLISHED => {
            // A UD id's ESTABLISHED is the SIDR reply (only the active side gets one): it
            // carries UD parameters with a resolved address vector.
            // SAFETY: The id is valid; both variants start with the private data.
            let (is_ud, ud, dev) = unsafe {
                (
                    (*id).qp_type == bindings::ib_qp_type_IB_QPT_UD,
                    &ev.param.ud,
                    (*id).device,
                )
            };
            Event::Established {
                // SAFETY: As above.
                private_data: unsafe { super::private_data(conn) },
                ud: is_ud.then_some(super::UdPeer { param: ud, dev }),
            }
        }
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_DISCONNECTED => Event::Disconnected,
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_DEVICE_REMOVAL => Event::DeviceRemoval,
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_ADDR_CHANGE => Event::AddrChange,
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_TIMEWAIT_EXIT => Event::TimewaitExit,
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_MULTICAST_JOIN => {
            // SAFETY: A join event holds UD parameters with the group's address vector; the id
            // is valid.
            let (ud, dev) = unsafe { (&ev.param.ud, (*id).device) };
            Event::MulticastJoin(super::UdPeer { param: ud, dev })
        }
        bindings::rdma_cm_event_type_RDMA_CM_EVENT_MULTICAST_ERROR => Event::MulticastError(err()),
        other => Event::Other(other, status),
    }
}
