// SPDX-License-Identifier: GPL-2.0

//! Synchronisation between completion handlers and process context.
//!
//! C header: [`include/linux/spinlock.h`](srctree/include/linux/spinlock.h)
//!
//! Completion handlers of CQs allocated with [`PollContext::Softirq`] run in softirq context
//! (`irq_poll`). 6.12's [`kernel::sync::SpinLock`] is a plain `spin_lock`: if process context
//! holds it and a softirq on the same CPU tries to take it, the CPU deadlocks (lockdep reports
//! it as an "inconsistent lock state"). [`SpinLockBh`] disables bottom halves while held, so it
//! may be shared between process context and softirq completion handlers.
//!
//! [`Completion`] wraps `struct completion`, the one-shot "it happened" signal with which
//! process context waits for a handler.
//!
//! [`PollContext::Softirq`]: super::cq::PollContext::Softirq
//! [`kernel::sync::SpinLock`]: crate::sync::SpinLock

use crate::{
    bindings,
    error::{
        code::{ESHUTDOWN, ETIMEDOUT},
        Result,
    },
    init::PinInit,
    prelude::*,
    sync::lock::{Backend, Lock},
    types::Opaque,
    workqueue::Work,
};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// Creates a [`SpinLockBh`] with a lockdep class of its own for this call site.
///
/// # Examples
///
/// ```
/// use kernel::rdma::sync::SpinLockBh;
/// use kernel::{new_spinlock_bh, prelude::*};
///
/// let counter = KBox::pin_init(new_spinlock_bh!(0u64, "counter"), GFP_KERNEL)?;
/// *counter.lock() += 1;
/// assert_eq!(*counter.lock(), 1);
/// # Ok::<(), Error>(())
/// ```
#[macro_export]
macro_rules! new_spinlock_bh {
    ($inner:expr $(, $name:literal)? $(,)?) => {
        $crate::rdma::sync::SpinLockBh::new(
            $inner, $crate::optional_name!($($name)?), $crate::static_lock_class!())
    };
}
pub use new_spinlock_bh;

/// A spinlock that disables bottom halves (softirqs) while it is held (`spin_lock_bh`).
///
/// Use it for data shared between process context and completion handlers that run in
/// softirq context. Like every spinlock, its critical sections must not sleep.
pub type SpinLockBh<T> = Lock<T, SpinLockBhBackend>;

/// The [`Backend`] of [`SpinLockBh`].
pub struct SpinLockBhBackend;

// SAFETY: `spinlock_t` provides mutual exclusion; `spin_lock_bh` and `spin_unlock_bh` are always
// paired by the guard, and `relock` uses the default implementation, which calls `lock` again.
unsafe impl Backend for SpinLockBhBackend {
    type State = bindings::spinlock_t;
    type GuardState = ();

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const crate::ffi::c_char,
        key: *mut bindings::lock_class_key,
    ) {
        // SAFETY: The caller guarantees that `ptr` is valid for writes and that `name` and `key`
        // live forever.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    #[inline]
    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The caller guarantees that `ptr` points to an initialised spinlock.
        unsafe { bindings::spin_lock_bh(ptr) }
    }

    #[inline]
    unsafe fn unlock(ptr: *mut Self::State, _guard_state: &Self::GuardState) {
        // SAFETY: The caller guarantees that `ptr` is initialised and held by this context.
        unsafe { bindings::spin_unlock_bh(ptr) }
    }
}

/// A one-shot event that process context can wait for (`struct completion`).
///
/// [`Completion::complete`] may be called from any context, including completion handlers
/// in softirq context; [`Completion::wait_timeout`] sleeps.
///
/// # Examples
///
/// ```
/// use kernel::prelude::*;
/// use kernel::rdma::sync::Completion;
///
/// let done = KBox::pin_init(Completion::new(), GFP_KERNEL)?;
/// assert_eq!(done.wait_timeout(1), Err(ETIMEDOUT));
/// done.complete();
/// assert_eq!(done.wait_timeout(1000), Ok(()));
/// # Ok::<(), Error>(())
/// ```
#[pin_data]
pub struct Completion {
    #[pin]
    inner: Opaque<bindings::completion>,
}

// SAFETY: `struct completion` is designed to be signalled and waited for from any thread.
unsafe impl Send for Completion {}
// SAFETY: All methods take `&self` and the C functions synchronise internally.
unsafe impl Sync for Completion {}

impl Completion {
    /// Creates a completion that has not happened yet.
    pub fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // SAFETY: `init_completion` initialises the pinned slot it is given.
            inner <- unsafe {
                Opaque::ffi_init(|slot: *mut bindings::completion| bindings::init_completion(slot))
            },
        })
    }

    /// Signals the completion, waking one waiter (`complete`). Any context.
    pub fn complete(&self) {
        // SAFETY: `inner` was initialised by `new` and is pinned.
        unsafe { bindings::complete(self.inner.get()) }
    }

    /// Signals the completion to every present and future waiter (`complete_all`). Any context.
    pub fn complete_all(&self) {
        // SAFETY: `inner` was initialised by `new` and is pinned.
        unsafe { bindings::complete_all(self.inner.get()) }
    }

    /// Rearms a completion that has been waited for (`reinit_completion`).
    pub fn reinit(&self) {
        // SAFETY: `inner` was initialised by `new` and is pinned.
        unsafe { bindings::reinit_completion(self.inner.get()) }
    }

    /// Waits for the completion, however long it takes (`wait_for_completion`).
    ///
    /// Sleeps: process context only. Use it only for events that are certain to happen.
    pub fn wait(&self) {
        // SAFETY: `inner` was initialised by `new` and is pinned.
        unsafe { bindings::wait_for_completion(self.inner.get()) }
    }

    /// Waits up to `ms` milliseconds for the completion.
    ///
    /// Sleeps: process context only.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` if the completion did not happen within `ms` milliseconds.
    pub fn wait_timeout(&self, ms: u32) -> Result {
        // SAFETY: `__msecs_to_jiffies` has no preconditions.
        let timeout = unsafe { bindings::__msecs_to_jiffies(ms) };
        // SAFETY: `inner` was initialised by `new` and is pinned.
        let left = unsafe { bindings::wait_for_completion_timeout(self.inner.get(), timeout) };
        if left == 0 {
            Err(ETIMEDOUT)
        } else {
            Ok(())
        }
    }
}

/// Adds `n` to `counter` if the sum stays within `limit`; returns whether it did.
///
/// The accounting behind queue depths and CQ entries: lock-free, so usable from completion
/// handlers.
#[inline]
pub(crate) fn claim(counter: &AtomicU32, n: u32, limit: u32) -> bool {
    let mut cur = counter.load(Ordering::Relaxed);
    loop {
        let Some(new) = cur.checked_add(n).filter(|&v| v <= limit) else {
            return false;
        };
        match counter.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(v) => cur = v,
        }
    }
}

/// Lets posts onto a queue (QP, SRQ) in until it is closed, and lets closing wait for the posts
/// already under way: what the owner does after [`PostGate::close`] (post a drain marker,
/// destroy the queue) comes after every post that got in.
pub(crate) struct PostGate {
    /// Posts under way.
    posters: AtomicU32,
    closed: AtomicBool,
}

/// A post under way; dropping it ends the post.
pub(crate) struct PostTicket<'a>(&'a PostGate);

impl Drop for PostTicket<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.posters.fetch_sub(1, Ordering::AcqRel);
    }
}

impl PostGate {
    pub(crate) const fn new() -> Self {
        Self {
            posters: AtomicU32::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Starts a post; `ESHUTDOWN` once the gate is closed. Any context.
    #[inline]
    pub(crate) fn enter(&self) -> Result<PostTicket<'_>> {
        self.posters.fetch_add(1, Ordering::SeqCst);
        let ticket = PostTicket(self);
        if self.closed.load(Ordering::SeqCst) {
            return Err(ESHUTDOWN);
        }
        Ok(ticket)
    }

    /// Closes the gate and waits until the posts that got in have ended. Sleeps: process
    /// context only. Idempotent.
    pub(crate) fn close(&self) {
        might_sleep();
        self.closed.store(true, Ordering::SeqCst);
        while self.posters.load(Ordering::SeqCst) != 0 {
            // SAFETY: Process context (`might_sleep` above documents and checks it).
            unsafe { bindings::msleep(1) };
        }
    }
}

// Without `CONFIG_PREEMPT_COUNT`, `preempt_disable` (and so `spin_lock` and, on a kernel
// without preemptible RCU, `rcu_read_lock`) counts nothing: `atomic()` could not see them, and a
// teardown or constructor that sleeps would run there instead of being deferred or refused.
// Deferring every teardown when the count is missing would not be enough (constructors and
// drains promise `EAGAIN` where they may not sleep), so the option is required: `RUST_RDMA`
// selects it in Kconfig (as preemptible kernels and `DEBUG_ATOMIC_SLEEP` do), and this catches
// a build of the crate that bypassed that Kconfig.
#[cfg(not(CONFIG_PREEMPT_COUNT))]
compile_error!(
    "kernel::rdma needs CONFIG_PREEMPT_COUNT: without it, atomic() cannot see spinlocks, RCU or preempt_disable"
);

/// Whether the caller may not sleep: in softirq or hardirq context, with bottom halves,
/// preemption or interrupts disabled, holding a spinlock, or in an RCU read-side section. The
/// test `might_sleep` makes. Exact because the kernel counts preemption
/// (`CONFIG_PREEMPT_COUNT`, required above); a `raw` lock taken without touching the count
/// (`arch_spin_lock`) is not seen, as `might_sleep` does not see it.
#[inline]
pub(crate) fn atomic() -> bool {
    // SAFETY: `rdma_in_atomic` only reads the calling context.
    unsafe { bindings::rdma_in_atomic() }
}

/// The number of CPUs online (`num_online_cpus()`): what a driver sizes its queues by (one
/// per CPU at most, as nvme's). A snapshot: CPUs may come and go after it. Any context.
pub fn online_cpus() -> u32 {
    // SAFETY: Reads a counter; no precondition.
    unsafe { bindings::num_online_cpus() }
}

/// Sleeps for about `ms` milliseconds (`msleep`): the pause of a polling loop in process
/// context (later kernels have `kernel::time::delay::fsleep`). Sleeps: process context only.
pub fn msleep(ms: u32) {
    might_sleep();
    // SAFETY: Process context (checked by `might_sleep` with `CONFIG_DEBUG_ATOMIC_SLEEP`).
    unsafe { bindings::msleep(ms) };
}

/// Gives the CPU to another task if one is waiting for it (`cond_resched`): what a busy-polling
/// loop in process context calls on every turn, so that it never starves the CPU it spins on
/// (and the kernel never reports a soft lockup). Returns whether it rescheduled. Process context
/// only.
pub fn cond_resched() -> bool {
    might_sleep();
    // SAFETY: Process context (checked by `might_sleep` with `CONFIG_DEBUG_ATOMIC_SLEEP`).
    unsafe { bindings::rdma_cond_resched() != 0 }
}

/// Waits until `work` has finished its last run (`flush_work`): once this returns, its function
/// has returned, so a module that stops re-queueing a work item and flushes it runs no code for
/// it afterwards (what its exit must wait for). 6.12's [`kernel::workqueue`] has no flush.
/// Returns whether it had to wait. Sleeps: process context only.
///
/// [`kernel::workqueue`]: crate::workqueue
pub fn flush_work<T: ?Sized, const ID: u64>(work: &Work<T, ID>) -> bool {
    might_sleep();
    // SAFETY: `work` is a reference, so the pointer is valid and aligned, and a `Work` is only
    // ever made by `Work::new`, which initialises its `work_struct`. Process context (checked by
    // `might_sleep` with `CONFIG_DEBUG_ATOMIC_SLEEP`).
    unsafe { bindings::flush_work(Work::raw_get(work)) }
}

/// The tasks running some kind of callback now (an event delivery, a completion handler), so
/// that a teardown can tell it runs inside one, of any object: objects dropped there are torn
/// down from a work item of their own ([`defer`](super::defer)). `N` tasks are tracked; while
/// more run at once, any workqueue worker counts as one of them (deferring needlessly is
/// harmless).
pub(crate) struct Tasks<const N: usize> {
    running: [AtomicPtr<bindings::task_struct>; N],
    /// Tasks running now that found no free entry.
    untracked: AtomicUsize,
}

/// A task's entry in a [`Tasks`], given back when dropped.
pub(crate) struct TaskMark<'a> {
    entry: Option<&'a AtomicPtr<bindings::task_struct>>,
    untracked: &'a AtomicUsize,
}

impl<const N: usize> Tasks<N> {
    pub(crate) const fn new() -> Self {
        Self {
            running: [const { AtomicPtr::new(core::ptr::null_mut()) }; N],
            untracked: AtomicUsize::new(0),
        }
    }

    /// Records the current task as running until the mark is dropped.
    pub(crate) fn enter(&self) -> TaskMark<'_> {
        let me = current();
        let entry = self.running.iter().find(|t| {
            t.compare_exchange(
                core::ptr::null_mut(),
                me,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        });
        if entry.is_none() {
            self.untracked.fetch_add(1, Ordering::AcqRel);
        }
        TaskMark {
            entry,
            untracked: &self.untracked,
        }
    }

    /// Whether the current task is running one (or may be: see the type).
    pub(crate) fn has_current(&self) -> bool {
        let me = current();
        self.running.iter().any(|t| t.load(Ordering::Acquire) == me)
            || (self.untracked.load(Ordering::Acquire) != 0 && in_worker())
    }
}

impl Drop for TaskMark<'_> {
    fn drop(&mut self) {
        match self.entry {
            Some(t) => t.store(core::ptr::null_mut(), Ordering::Release),
            None => {
                self.untracked.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

/// The tasks running a completion handler in process context now: a CQ's work item, or a
/// task processing a CQ itself (a direct poller, a drain).
static HANDLING: Tasks<16> = Tasks::new();

/// Runs `f`, the completion handler of a request, recorded as such: a QP, SRQ or CQ whose last
/// reference it drops is torn down from a work item ([`in_any_handler`]).
pub(crate) fn handling<R>(f: impl FnOnce() -> R) -> R {
    if atomic() {
        // Teardowns defer from atomic context anyway.
        return f();
    }
    let _mark = HANDLING.enter();
    f()
}

/// Whether the current task runs a completion handler in process context, of any CQ. A
/// teardown there would drain or free other CQs from inside this one's processing: a
/// handler of CQ X tearing down a QP of CQ Y waits for Y's work, and one of Y tearing down
/// a QP of X waits for X's (and lockdep sees both work items as one class).
pub(crate) fn in_any_handler() -> bool {
    HANDLING.has_current()
}

/// The tasks running an rdma_cm event handler now (recorded by [`cm`](super::cm) around each
/// call). The CM holds the id's handler lock for the call, so whatever a teardown there waits
/// for is ordered after that lock: freeing a CQ waits for the CQ's work item, a class shared by
/// every CQ, and a CQ handler elsewhere may take a lock held around `rdma_destroy_id` (nvmet's
/// configuration lock is one), which closes a cycle. Such teardowns are deferred.
static CM_HANDLING: Tasks<16> = Tasks::new();

/// Runs `f`, an rdma_cm event handler, recorded as such ([`in_cm_handler`]).
pub(crate) fn cm_handling<R>(f: impl FnOnce() -> R) -> R {
    let _mark = CM_HANDLING.enter();
    f()
}

/// Whether the current task runs an rdma_cm event handler (or may: see [`Tasks`]).
pub(crate) fn in_cm_handler() -> bool {
    CM_HANDLING.has_current()
}

/// Whether the running task is a workqueue worker (`PF_WQ_WORKER`).
#[inline]
pub(crate) fn in_worker() -> bool {
    // SAFETY: `rdma_in_worker` only reads the current task's flags.
    unsafe { bindings::rdma_in_worker() }
}

/// `EAGAIN` (`EWOULDBLOCK`) where the caller may not sleep: what every verb that sleeps
/// answers there, instead of sleeping in atomic context. (`might_sleep` only reports it, with
/// `CONFIG_DEBUG_ATOMIC_SLEEP`.)
pub(crate) fn sleepable() -> Result {
    if atomic() {
        return Err(crate::error::code::EAGAIN);
    }
    might_sleep();
    Ok(())
}

/// The running task.
#[inline]
pub(crate) fn current() -> *mut bindings::task_struct {
    // SAFETY: `get_current` has no preconditions.
    unsafe { bindings::get_current() }
}

/// Annotates a function that may sleep (`might_sleep`): with `CONFIG_DEBUG_ATOMIC_SLEEP` a
/// call from atomic context (a completion handler, under a spinlock) is reported at once,
/// rather than only when it actually sleeps.
pub(crate) fn might_sleep() {
    // SAFETY: `rdma_might_sleep` only checks the calling context.
    unsafe { bindings::rdma_might_sleep() }
}
