// SPDX-License-Identifier: GPL-2.0

//! The module whose code an RDMA callback runs, and unloading that module only once no callback
//! can run any more.
//!
//! C header: [`include/linux/module.h`](srctree/include/linux/module.h)
//!
//! Completion handlers ([`Completion::done`](super::wr::Completion::done)), connection manager
//! handlers and device event handlers are generic code: they are compiled into the module that
//! uses them, and the RDMA core calls them through function pointers. Nothing in the core pins
//! that module. If an object that can still call them outlives the module (a QP kept alive by
//! its own requests, a connection manager id that was leaked, a teardown handed to a work item),
//! the core would call into freed memory after `rmmod`.
//!
//! So every such object *holds* the module its callbacks live in (`Hold`) for as long as the core
//! may call them: a QP or SRQ from its first post until it is destroyed, a connection manager id
//! until it is destroyed, an event registration until it is unregistered, a client registration
//! while it lives, a deferred teardown until it has run. A module notifier, registered the first
//! time kernel::rdma is used, sees each module unload after its exit function ran and before its
//! memory is freed, and waits there until the module holds nothing any more, reporting every ten
//! seconds what it waits for. A module that tears its objects down in its exit path (as
//! [`Client::remove`] does when the client unregisters) never waits; one that leaked an object
//! makes `rmmod` wait for it, loudly, instead of freeing code the object still calls. Built-in code
//! needs no hold.
//!
//! Holds are counted per module in a fixed table of [`MODULES`] entries, so that taking one
//! neither allocates nor sleeps (completion handlers post requests). When the table is full,
//! objects with callbacks in another module cannot be made (`ENOSPC`).
//!
//! [`Client::remove`]: super::client::Client::remove

use super::sync::might_sleep;
use crate::{bindings, ffi::c_void, str::CStr, types::Opaque};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Modules that can be tracked at once.
pub const MODULES: usize = 32;

/// The holds of one module.
struct Entry {
    /// The module, or null for a free entry.
    module: AtomicPtr<bindings::module>,
    /// Objects of this module that the RDMA core may still call.
    live: AtomicUsize,
}

impl Entry {
    const fn new() -> Self {
        Self {
            module: AtomicPtr::new(core::ptr::null_mut()),
            live: AtomicUsize::new(0),
        }
    }
}

static TABLE: [Entry; MODULES] = [const { Entry::new() }; MODULES];
static TABLE_FULL_REPORTED: AtomicBool = AtomicBool::new(false);

/// The module whose text holds `code`, or null for code built into the kernel.
fn module_of(code: usize) -> *mut bindings::module {
    // SAFETY: The helper looks the address up with preemption disabled, as the module tree
    // requires; the module cannot go away while one of its functions is being referred to by
    // the code that is running (the caller's).
    unsafe { bindings::rdma_module_of(code) }
}

/// A loaded module whose code kernel::rdma may call.
///
/// # Invariants
///
/// `self.0.module` is the module, loaded, not freed while a [`Hold`] on it exists.
#[derive(Clone, Copy)]
pub(crate) struct Owner(&'static Entry);

impl Owner {
    /// The module whose code contains the address `code` (a function of the caller's), or
    /// `None` for code built into the kernel; `ENOSPC` for a module that cannot be tracked
    /// (more than [`MODULES`] modules use kernel::rdma): an object whose callbacks would be
    /// that module's must not be made. Any context.
    pub(crate) fn tracked(code: usize) -> crate::error::Result<Option<Owner>> {
        let module = module_of(code);
        if module.is_null() {
            return Ok(None);
        }
        Self::entry(module)
            .map(Some)
            .ok_or(crate::error::code::ENOSPC)
    }

    /// [`Owner::tracked`], with `None` also for a module that cannot be tracked (reported once):
    /// for the holds that cannot fail, those of teardowns already under way.
    pub(crate) fn of(code: usize) -> Option<Owner> {
        let module = module_of(code);
        if module.is_null() {
            return None;
        }
        Self::entry(module)
    }

    /// The entry of `module`, claimed if it has none yet.
    ///
    /// Claims are serialised by a lock (built into the kernel, IRQ-safe: callers may be in any
    /// context), so that a module never gets two entries: without it, two first callers for one
    /// module could each miss the other's claim (the one passing an entry while another
    /// module's unload frees it behind the other), and an object whose module was recorded with
    /// one entry would refuse requests carrying the other (`EINVAL`). Finding a claimed entry,
    /// the common case, takes no lock.
    fn entry(module: *mut bindings::module) -> Option<Owner> {
        let find = || {
            TABLE
                .iter()
                .find(|e| e.module.load(Ordering::Acquire) == module)
        };
        if let Some(e) = find() {
            return Some(Owner(e));
        }
        // SAFETY: Paired with `rdma_owner_unlock` below, with the flags it returned.
        let flags = unsafe { bindings::rdma_owner_lock() };
        let found = find().or_else(|| {
            TABLE.iter().find(|e| {
                // An unload frees entries without the lock, so the claim is an exchange; no other
                // claim can race it.
                e.module
                    .compare_exchange(
                        core::ptr::null_mut(),
                        module,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            })
        });
        // SAFETY: Taken above, with these flags.
        unsafe { bindings::rdma_owner_unlock(flags) };
        if let Some(e) = found {
            return Some(Owner(e));
        }
        if !TABLE_FULL_REPORTED.swap(true, Ordering::Relaxed) {
            crate::pr_warn!(
                "kernel::rdma: more than {} modules use RDMA callbacks; the others get ENOSPC for objects with callbacks\n",
                MODULES
            );
        }
        None
    }

    /// Holds the module: it is not freed until the hold is dropped. Any context.
    pub(crate) fn hold(self) -> Hold {
        self.0.live.fetch_add(1, Ordering::AcqRel);
        Hold(self)
    }

    fn name(self) -> &'static CStr {
        let m = self.0.module.load(Ordering::Acquire);
        if m.is_null() {
            return crate::c_str!("?");
        }
        // SAFETY: The module is loaded (invariant); its name is a NUL-terminated array.
        unsafe { CStr::from_char_ptr((*m).name.as_ptr()) }
    }
}

/// A hold on a module (see the [module documentation](self)); dropping it releases it.
///
/// It must be dropped from code built into the kernel, or from code of the held module that
/// another hold or the module's own running code keeps: the release may be the last one, after
/// which the module's memory can be freed.
pub(crate) struct Hold(Owner);

impl Drop for Hold {
    fn drop(&mut self) {
        self.0 .0.live.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The module notifier that makes unloads wait for the module's holds.
struct Watch {
    nb: Opaque<bindings::notifier_block>,
    registered: AtomicBool,
}

// SAFETY: `nb` is written once, by the caller that claimed `registered`, before it is handed to
// the notifier chain, which serialises everything else.
unsafe impl Sync for Watch {}

static WATCH: Watch = Watch {
    nb: Opaque::uninit(),
    registered: AtomicBool::new(false),
};

/// Makes module unloads wait for their holds. Called by every constructor that may sleep, so
/// that it has run before any hold is taken. Process context.
pub(crate) fn watch_unloads() {
    if WATCH.registered.load(Ordering::Acquire) {
        return;
    }
    might_sleep();
    if WATCH
        .registered
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let nb = WATCH.nb.get();
    // SAFETY: We claimed `registered`, so nothing else writes `nb`; it is static. All-zeroes
    // is a valid `notifier_block` with priority 0.
    unsafe {
        nb.write(core::mem::zeroed());
        (*nb).notifier_call = Some(module_going);
    }
    // SAFETY: `nb` is initialised, static, and registered once.
    let ret = unsafe { bindings::register_module_notifier(nb) };
    if ret != 0 {
        crate::pr_err!(
            "kernel::rdma: cannot watch module unloads ({}): a module may be freed under its RDMA callbacks\n",
            ret
        );
    }
}

/// Seconds between two reports of an unload that waits.
const REPORT_S: u32 = 10;

/// # Safety
///
/// Called by the module notifier chain with a `struct module` as `data`.
unsafe extern "C" fn module_going(
    _nb: *mut bindings::notifier_block,
    action: crate::ffi::c_ulong,
    data: *mut c_void,
) -> crate::ffi::c_int {
    if action != bindings::module_state_MODULE_STATE_GOING as crate::ffi::c_ulong {
        return 0;
    }
    let module = data.cast::<bindings::module>();
    // A module has one entry at most (`Owner::entry`); all of them are looked at regardless.
    let mine = || {
        TABLE
            .iter()
            .filter(|e| e.module.load(Ordering::Acquire) == module)
    };
    let Some(first) = mine().next() else {
        return 0;
    };
    let owner = Owner(first);
    let mut waited_ms = 0u32;
    loop {
        let live: usize = mine().map(|e| e.live.load(Ordering::Acquire)).sum();
        if live == 0 {
            break;
        }
        if waited_ms % (REPORT_S * 1000) == 0 {
            crate::pr_err!(
                "kernel::rdma: module {} is unloading with {} RDMA objects that can still call its code (leaked QP, SRQ or CM id?); waiting for them ({} s so far)\n",
                owner.name(),
                live,
                waited_ms / 1000
            );
        }
        // An idle sleep: a long wait here is reported above, not as a hung task.
        // SAFETY: The module notifier chain runs in process context (`delete_module`).
        unsafe { bindings::rdma_sleep_idle_ms(100) };
        waited_ms = waited_ms.saturating_add(100);
    }
    if waited_ms > 0 {
        crate::pr_info!(
            "kernel::rdma: module {}: its last RDMA object is gone after {} ms; unloading\n",
            owner.name(),
            waited_ms
        );
    }
    // No object of the module is left and its code no longer runs: its entries are free again.
    for e in mine() {
        e.module.store(core::ptr::null_mut(), Ordering::Release);
    }
    0
}

/// The module whose callbacks an object's requests carry (a QP's or an SRQ's), fixed by the
/// first request posted and held until the object is destroyed.
pub(crate) struct OwnerCell(AtomicPtr<Entry>);

impl OwnerCell {
    /// A cell that records no module yet.
    pub(crate) const fn new() -> Self {
        Self(AtomicPtr::new(core::ptr::null_mut()))
    }

    /// Records that callbacks of `owner` may be called for the object from now on: the first
    /// module to do so is held. `EINVAL` for callbacks of a second module: an object carries one
    /// module's requests (built-in code's are not recorded). Any context.
    #[inline]
    pub(crate) fn claim(&self, owner: Option<Owner>) -> crate::error::Result {
        let Some(o) = owner else {
            return Ok(());
        };
        let p = (o.0 as *const Entry).cast_mut();
        // Claimed already, the common case: a read leaves the line shared between the CPUs
        // that post, where the exchange would take it from the others on every post.
        if self.0.load(Ordering::Acquire) == p {
            return Ok(());
        }
        match self.0.compare_exchange(
            core::ptr::null_mut(),
            p,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // Released by `release`, when the object is destroyed.
                core::mem::forget(o.hold());
                Ok(())
            }
            Err(cur) if cur == p => Ok(()),
            Err(_) => Err(crate::error::code::EINVAL),
        }
    }

    /// Takes the hold of [`OwnerCell::claim`] out, to be dropped once the object's callbacks
    /// cannot be called any more, from code built into the kernel (see [`Hold`]).
    pub(crate) fn take(&self) -> Option<Hold> {
        let p = self.0.swap(core::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: A non-null value is an entry of `TABLE` (static), set by `claim`, which took
        // the hold handed over here.
        unsafe { p.as_ref() }.map(|e| Hold(Owner(e)))
    }
}
