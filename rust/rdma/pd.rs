// SPDX-License-Identifier: GPL-2.0

//! Protection domains (`struct ib_pd`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A protection domain groups the QPs, memory regions and address handles that may be used
//! together. Everything created on a PD holds an `Arc<Pd>`, so the PD is deallocated only after
//! the last of them is gone, the order `ib_dealloc_pd` requires.
//!
//! There is deliberately no way to ask for `IB_PD_UNSAFE_GLOBAL_RKEY`: a global rkey exposes
//! all of memory to the peer. Remote access goes through fast-registered memory regions.

use super::device::Device;
use crate::{
    bindings,
    error::{from_err_ptr, Result},
    sync::Arc,
    types::ARef,
};

/// A protection domain.
///
/// # Invariants
///
/// `ptr` is a PD allocated with `__ib_alloc_pd` on `device`, valid until `Pd` is dropped.
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
    ptr: *mut bindings::ib_pd,
    device: ARef<Device>,
}

// SAFETY: A PD may be used and deallocated from any thread.
unsafe impl Send for Pd {}
// SAFETY: Verbs that take a PD synchronise internally (its `usecnt` is atomic).
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a protection domain on `device` (`ib_alloc_pd`). May sleep.
    pub fn new(device: &Device) -> Result<Arc<Self>> {
        // SAFETY: `device` is a registered device; no unsafe flags are passed, and the caller
        // name is a static string.
        let ptr = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(device.as_raw(), 0, c"kernel::rdma".as_ptr().cast())
        })?;
        // INVARIANT: `ptr` was just allocated on `device`.
        let pd = Self {
            ptr,
            device: device.into(),
        };
        Ok(Arc::new(pd, crate::alloc::flags::GFP_KERNEL)?)
    }

    /// Returns the raw `struct ib_pd` pointer.
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_pd {
        self.ptr
    }

    /// Returns the device the PD belongs to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The lkey with which local work requests access DMA-mapped memory of this PD.
    pub fn local_dma_lkey(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant); the field is set at allocation and never changes.
        unsafe { (*self.ptr).local_dma_lkey }
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        super::sync::might_sleep();
        // SAFETY: `ptr` is valid (invariant). Every object created on the PD holds an `Arc<Pd>`,
        // so none is left when the last reference drops here.
        unsafe { bindings::ib_dealloc_pd_user(self.ptr, core::ptr::null_mut()) };
    }
}
