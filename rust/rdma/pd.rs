// SPDX-License-Identifier: GPL-2.0

//! Protection domains (`struct ib_pd`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A protection domain groups the QPs, memory regions and address handles that may be used
//! together. Everything created on a PD holds an `Arc<Pd>`, so the PD is deallocated only after
//! the last of them is gone, the order `ib_dealloc_pd` requires. Deallocation sleeps; the last
//! reference may nevertheless go anywhere (a completion handler included), and the PD is then
//! deallocated from process context ([`defer`](super::defer)).
//!
//! There is deliberately no way to ask for `IB_PD_UNSAFE_GLOBAL_RKEY`: a global rkey exposes
//! all of memory to the peer. Remote access goes through fast-registered memory regions.

use super::{
    defer::{Deferred, Teardown},
    device::Device,
    owner::watch_unloads,
    sync::{might_sleep, sleepable},
};
use crate::{
    bindings,
    error::{code::EINVAL, from_err_ptr, Result},
    sync::Arc,
    types::ARef,
};

/// A protection domain.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{device::Device, pd::Pd};
///
/// fn lkey_of(dev: &Device) -> Result<u32> {
///     let pd = Pd::new(dev)?;
///     Ok(pd.local_dma_lkey())
/// }
/// ```
pub struct Pd {
    raw: Deferred<RawPd>,
}

/// The C object of a [`Pd`]; dropping it deallocates the PD.
///
/// # Invariants
///
/// `ptr` is a PD allocated with `__ib_alloc_pd` on `device`, valid until `RawPd` is dropped.
struct RawPd {
    ptr: *mut bindings::ib_pd,
    device: ARef<Device>,
}

// SAFETY: A PD may be used and deallocated from any thread.
unsafe impl Send for RawPd {}
// SAFETY: Verbs that take a PD synchronise internally (its `usecnt` is atomic).
unsafe impl Sync for RawPd {}

impl Teardown for RawPd {}

impl Drop for RawPd {
    fn drop(&mut self) {
        might_sleep();
        // SAFETY: `ptr` is valid (invariant). Every object created on the PD holds an `Arc<Pd>`,
        // so none is left when the last reference drops here.
        unsafe { bindings::ib_dealloc_pd_user(self.ptr, core::ptr::null_mut()) };
    }
}

impl Pd {
    /// Allocates a protection domain on `device` (`ib_alloc_pd`). Sleeps.
    ///
    /// # Errors
    ///
    /// - `EAGAIN` in atomic context, like every verb that sleeps.
    /// - `ENOMEM` when an allocation fails.
    /// - Otherwise what the driver's `alloc_pd` (or `get_dma_mr`, on devices without a local
    ///   DMA lkey) returns; soft-RoCE answers `EINVAL` when the device has all the PDs it
    ///   allows.
    pub fn new(device: &Device) -> Result<Arc<Self>> {
        sleepable()?;
        watch_unloads();
        // SAFETY: `device` is a registered device; no unsafe flags are passed, and the caller
        // name is a static string.
        let ptr = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(device.as_raw(), 0, c"kernel::rdma".as_ptr().cast())
        })?;
        // INVARIANT: `ptr` was just allocated on `device`.
        let raw = Deferred::new(RawPd {
            ptr,
            device: device.into(),
        })?;
        Ok(Arc::new(Self { raw }, crate::alloc::flags::GFP_KERNEL)?)
    }

    /// Returns the raw `struct ib_pd` pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_pd {
        self.raw.ptr
    }

    /// Returns the device the PD belongs to.
    pub fn device(&self) -> &Device {
        &self.raw.device
    }

    /// The lkey with which local work requests access DMA-mapped memory of this PD.
    pub fn local_dma_lkey(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant); the field is set at allocation and never changes.
        unsafe { (*self.raw.ptr).local_dma_lkey }
    }
}

/// The PD a request is checked against: the QP's (or SRQ's).
#[derive(Clone, Copy)]
pub(crate) struct PdKey {
    raw: *mut bindings::ib_pd,
    pub(crate) lkey: u32,
}

impl PdKey {
    pub(crate) fn of(pd: &Pd) -> Self {
        Self {
            raw: pd.as_raw(),
            lkey: pd.local_dma_lkey(),
        }
    }

    /// `EINVAL` unless `pd` is this PD: what a QP posts (memory, memory regions, address
    /// handles) must belong to the QP's PD, or the driver would reach an object of another PD,
    /// or of another device, as its own.
    pub(crate) fn check(&self, pd: &Pd) -> Result {
        if pd.as_raw() == self.raw {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }
}
