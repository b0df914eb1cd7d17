// SPDX-License-Identifier: GPL-2.0

//! What the two MR types have in common: the MR's C object, its keys and where its latest
//! registration stands ([`Keys`]), and the [`Region`] trait through which
//! [`SendOps::reg_mr`] and [`SendOps::local_inv`] act on either.
//!
//! [`SendOps::reg_mr`]: crate::rdma::wr::SendOps::reg_mr
//! [`SendOps::local_inv`]: crate::rdma::wr::SendOps::local_inv

use super::Access;
use crate::{
    bindings,
    error::{code::*, from_err_ptr, Error, Result},
    rdma::{
        cq::{Invalidation, Wc},
        pd::Pd,
        sync::{might_sleep, sleepable},
    },
    sync::Arc,
};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// The C object of an MR (`ib_alloc_mr` of type `IB_MR_TYPE_MEM_REG`), its keys and whether
/// a registration of it is live; dropping it deregisters it (`ib_dereg_mr`).
///
/// What [`SendOps::reg_mr`] and [`SendOps::local_inv`] act on: the MR types of this module
/// (an [`Mr`], which owns its memory, and a [`LentMr`], which maps another object's pages)
/// each hold one ([`Region`]), before their memory, which goes only after it.
///
/// [`SendOps::reg_mr`]: crate::rdma::wr::SendOps::reg_mr
/// [`SendOps::local_inv`]: crate::rdma::wr::SendOps::local_inv
/// [`Mr`]: super::Mr
/// [`LentMr`]: super::LentMr
///
/// # Invariants
///
/// `ptr` is an MR allocated on `pd` for up to `max_pages` pages, valid until deregistered
/// (then null; only the owner's `Drop` deregisters, and uses nothing else after).
pub struct Keys {
    ptr: *mut bindings::ib_mr,
    max_pages: u32,
    pd: Arc<Pd>,
    /// Where the latest registration stands ([`State`]).
    state: AtomicU8,
    /// The registration clock's stamp of the latest registration posted (see
    /// [`Invalidation`]).
    reg_stamp: AtomicU64,
    /// The rkey of the latest registration posted, [`NO_RKEY`] before the first: the next
    /// one must use another ([`Region::bump_key`]).
    last_rkey: AtomicU64,
}

/// The value of [`Keys::last_rkey`] before the first registration (no rkey has it).
const NO_RKEY: u64 = u64::MAX;

/// Where an MR's latest registration stands. It is live on the device from the post of its
/// REG_MR until an invalidation of it has run: a LOCAL_INV (or READ with invalidate) whose
/// request completed, or a peer's SEND with invalidate that a receive completion reported.
/// An invalidation posted but not yet completed may still be flushed or fail, which leaves
/// the registration live, so the MR stays unavailable until the completion says which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum State {
    /// No registration is live: the memory is the owner's.
    Free = 0,
    /// A registration was posted and no invalidation of it is under way.
    Registered = 1,
    /// An invalidation was posted; its request's completion settles it: [`State::Free`] when
    /// it succeeded, [`State::Registered`] again otherwise.
    Invalidating = 2,
}

impl State {
    fn of(v: u8) -> Self {
        match v {
            0 => Self::Free,
            1 => Self::Registered,
            _ => Self::Invalidating,
        }
    }
}

/// What posting an operation that registers or invalidates an MR changed, for undoing it when
/// the device does not take the request ([`Keys::revert`]).
#[derive(Clone, Copy)]
pub(crate) struct Before {
    state: u8,
    stamp: u64,
    last_rkey: u64,
}

// SAFETY: An MR may be used and deregistered from any thread.
unsafe impl Send for Keys {}
// SAFETY: `&Keys` reads fields fixed while it is shared, and atomics.
unsafe impl Sync for Keys {}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = self.dereg();
    }
}

impl Keys {
    /// Deregisters the MR (`ib_dereg_mr`), once: later calls do nothing. May sleep. An error
    /// (the driver refused) means a peer may still reach the memory, which the owner must
    /// then never free.
    pub(crate) fn dereg(&mut self) -> Result {
        if self.ptr.is_null() {
            return Ok(());
        }
        might_sleep();
        // SAFETY: `ptr` is valid (invariant) and deregistered once: it is cleared below.
        // Deregistration revokes every key, after which the memory is unreachable for peers.
        let ret = unsafe { bindings::ib_dereg_mr_user(self.ptr, core::ptr::null_mut()) };
        self.ptr = core::ptr::null_mut();
        if ret != 0 {
            crate::pr_err!("kernel::rdma: ib_dereg_mr failed ({ret}): its memory is never freed\n");
            return Err(Error::from_errno(ret));
        }
        Ok(())
    }

    /// Allocates an MR for up to `max_pages` pages. May sleep. `EINVAL` for zero pages or more
    /// than the device's `max_fast_reg_page_list_len`.
    pub(crate) fn alloc(pd: &Arc<Pd>, max_pages: u32) -> Result<Self> {
        sleepable()?;
        if max_pages == 0 || max_pages > pd.device().attrs().max_fast_reg_page_list_len() {
            return Err(EINVAL);
        }
        // SAFETY: `pd` is valid; MEM_REG MRs are the fast-registration kind.
        let ptr = from_err_ptr(unsafe {
            bindings::ib_alloc_mr(
                pd.as_raw(),
                bindings::ib_mr_type_IB_MR_TYPE_MEM_REG,
                max_pages,
            )
        })?;
        // INVARIANT: Just allocated.
        Ok(Self {
            ptr,
            max_pages,
            pd: pd.clone(),
            state: AtomicU8::new(State::Free as u8),
            reg_stamp: AtomicU64::new(0),
            last_rkey: AtomicU64::new(NO_RKEY),
        })
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_mr {
        self.ptr
    }

    pub(crate) fn max_pages(&self) -> u32 {
        self.max_pages
    }

    /// The PD of the MR.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.pd
    }

    /// The rkey the peer uses.
    pub fn rkey(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant).
        unsafe { (*self.ptr).rkey }
    }

    /// The lkey local requests may use.
    pub fn lkey(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant).
        unsafe { (*self.ptr).lkey }
    }

    /// The I/O virtual address the MR maps its memory at.
    pub fn iova(&self) -> u64 {
        // SAFETY: `ptr` is valid (invariant).
        unsafe { (*self.ptr).iova }
    }

    /// Whether a registration was posted and no invalidation of it has run since (one posted
    /// and not yet completed has not).
    pub fn is_registered(&self) -> bool {
        self.state() != State::Free
    }

    /// Where the latest registration stands.
    pub(crate) fn state(&self) -> State {
        State::of(self.state.load(Ordering::Acquire))
    }

    /// Whether the MR's current rkey is that of its latest registration, which a new one must
    /// not reuse: a peer that still holds it, or a kept completion that revoked it, would
    /// then reach the new one.
    pub(crate) fn rkey_used(&self) -> bool {
        self.last_rkey.load(Ordering::Acquire) == u64::from(self.rkey())
    }

    /// See [`Region::invalidated_by`].
    pub(crate) fn invalidated_by(&self, wc: &Wc) -> bool {
        wc.invalidation()
            .is_some_and(|i| self.apply_invalidation(i))
    }

    /// See [`Region::apply_invalidation`].
    pub(crate) fn apply_invalidation(&self, inv: Invalidation) -> bool {
        let stamp = self.reg_stamp.load(Ordering::Acquire);
        if !inv.revokes(self.rkey(), self.pd.device().as_raw(), stamp) {
            return false;
        }
        // The peer's invalidation ran: whatever a local one under way reports, nothing is live.
        self.state.store(State::Free as u8, Ordering::Release);
        true
    }

    /// A registration of the MR is about to be posted: it is live from here on (before the
    /// post: the device may run it, and an invalidation of it be seen, at once). Stamps it
    /// and records its rkey.
    pub(crate) fn begin_registration(&self) -> Before {
        let before = self.before();
        self.reg_stamp
            .store(crate::rdma::cq::wc::next_registration(), Ordering::Release);
        self.last_rkey
            .store(u64::from(self.rkey()), Ordering::Release);
        self.state.store(State::Registered as u8, Ordering::Release);
        before
    }

    /// An invalidation of the MR is about to be posted: until its request completes, the
    /// registration may or may not be live ([`State::Invalidating`]).
    pub(crate) fn begin_invalidation(&self) -> Before {
        let before = self.before();
        let _ = self.state.compare_exchange(
            State::Registered as u8,
            State::Invalidating as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        before
    }

    /// The request of an invalidation begun with [`Keys::begin_invalidation`] completed,
    /// successfully (`ran`: every operation of it ran) or not: the registration is gone, or
    /// still live. A peer's invalidation recorded meanwhile stands.
    pub(crate) fn end_invalidation(&self, ran: bool) {
        let to = if ran { State::Free } else { State::Registered };
        let _ = self.state.compare_exchange(
            State::Invalidating as u8,
            to as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn before(&self) -> Before {
        Before {
            state: self.state.load(Ordering::Acquire),
            stamp: self.reg_stamp.load(Ordering::Acquire),
            last_rkey: self.last_rkey.load(Ordering::Acquire),
        }
    }

    /// Undoes a [`Keys::begin_registration`] or [`Keys::begin_invalidation`]: the device did
    /// not take the request.
    pub(crate) fn revert(&self, before: Before) {
        self.reg_stamp.store(before.stamp, Ordering::Release);
        self.last_rkey.store(before.last_rkey, Ordering::Release);
        self.state.store(before.state, Ordering::Release);
    }

    /// See [`Region::bump_key`].
    pub(crate) fn bump_key(&mut self) -> Result {
        if self.is_registered() {
            return Err(EBUSY);
        }
        let ptr = self.ptr;
        // SAFETY: `ptr` is valid (invariant); we have exclusive access, and nothing posted
        // refers to the MR (a `reg_mr` borrows it from its owner).
        unsafe {
            let key = (((*ptr).rkey & 0xff) + 1) & 0xff;
            (*ptr).lkey = ((*ptr).lkey & 0xffff_ff00) | key;
            (*ptr).rkey = ((*ptr).rkey & 0xffff_ff00) | key;
        }
        Ok(())
    }
}

/// A memory region that [`SendOps::reg_mr`] registers and [`SendOps::local_inv`] invalidates:
/// [`Mr`] and [`LentMr`], with their keys and registration state.
///
/// The trait is object safe: a ULP whose command names one of several MRs (a request's own
/// pages or a bounce buffer) picks it once, as a `&dyn Region`, and registers, advertises and
/// checks that one.
///
/// [`SendOps::reg_mr`]: crate::rdma::wr::SendOps::reg_mr
/// [`SendOps::local_inv`]: crate::rdma::wr::SendOps::local_inv
/// [`Mr`]: super::Mr
/// [`LentMr`]: super::LentMr
pub trait Region: private::Sealed {
    /// The MR's C object and registration state.
    fn keys(&self) -> &Keys;

    /// Whether the MR maps memory, so that it can be registered.
    fn is_mapped(&self) -> bool;

    /// Whether the memory may be registered for `access`: remote writes only into memory
    /// whose owner lets the device write it.
    fn allows(&self, access: Access) -> bool;

    /// The PD of the MR.
    fn pd(&self) -> &Arc<Pd> {
        self.keys().pd()
    }

    /// The rkey the peer uses.
    fn rkey(&self) -> u32 {
        self.keys().rkey()
    }

    /// The I/O virtual address the MR maps its memory at (for a [`LentMr`](super::LentMr),
    /// the lent pages' first byte): with [`Region::rkey`], what a command posted in the same
    /// request as the MR's registration names.
    fn iova(&self) -> u64 {
        self.keys().iova()
    }

    /// Whether a registration of the MR was posted and no invalidation of it has run since
    /// (a local one whose request completed successfully, or the peer's as recorded with
    /// [`Region::invalidated_by`]). While a local invalidation is posted and not completed,
    /// the MR still counts as registered: it may be flushed or fail and leave the
    /// registration live.
    fn is_registered(&self) -> bool {
        self.keys().is_registered()
    }

    /// Records a peer's remote invalidation: if `wc` (a receive completion) reports that the
    /// sender invalidated this MR's rkey (SEND with invalidate), the MR is no longer registered
    /// and this returns true. The peer can then no longer reach the memory, and the MR may be
    /// registered again ([`Region::bump_key`] first, so the old rkey stays dead).
    fn invalidated_by(&self, wc: &Wc) -> bool {
        self.keys().invalidated_by(wc)
    }

    /// Records a remote invalidation kept from a receive completion ([`Wc::invalidation`]), as
    /// [`Region::invalidated_by`] does; false (and nothing changes) if it revoked another rkey,
    /// on another device, or was seen before the MR's latest registration was posted.
    fn apply_invalidation(&self, inv: Invalidation) -> bool {
        self.keys().apply_invalidation(inv)
    }

    /// Moves to the next key (`ib_update_fast_reg_key(mr, ib_inc_rkey(rkey))`), so that a new
    /// registration does not revive an rkey a peer may still hold. A registration must be
    /// under another rkey than the one before it ([`SendOps::reg_mr`]).
    ///
    /// # Errors
    ///
    /// `EBUSY` while the MR is registered ([`Region::is_registered`]): its keys are the live
    /// registration's until an invalidation of it has run.
    ///
    /// [`SendOps::reg_mr`]: crate::rdma::wr::SendOps::reg_mr
    fn bump_key(&mut self) -> Result {
        self.keys_mut(private::Token(())).bump_key()
    }
}

pub(super) mod private {
    /// Seals [`Region`](super::Region), and keeps its mutable access to the keys out of
    /// reach: swapping two MRs' keys would leave each registration over the other's memory.
    /// The module cannot be named outside, but a trait object's supertrait methods are
    /// callable without naming their trait (on a `&mut dyn Region`): only code that can
    /// make a [`Token`] (this module's parent and its children) can call `keys_mut`.
    pub trait Sealed {
        fn keys_mut(&mut self, token: Token) -> &mut super::Keys;
    }

    /// Proof that the caller is `mr::keys` or one of its modules.
    pub struct Token(pub(super) ());
}
