// SPDX-License-Identifier: GPL-2.0

//! Waiting in process context for one request's completion.
//!
//! A ULP's data path re-posts its requests from [`Completion::done`]; its control path (a
//! memory registration at connect time, a handshake message, a transfer a sample makes) often
//! posts one request and sleeps until it is back. [`Waited::new`] makes such a request and a
//! [`Pending`] handle; the completion handler puts the request's data and its [`Wc`] in the
//! handle's slot and wakes it, so nothing allocates or sleeps in the handler, and
//! [`Pending::wait`] gives the data back, with the memory the device used, to the thread.
//!
//! A wait that times out does not take the request back: the device may still own its
//! memory. The data is dropped when the completion does arrive (at the latest as a flush when
//! the QP is destroyed), in the completion handler's context, like any request's.
//!
//! # Examples
//!
//! One SEND on a connected QP, waited for:
//!
//! ```
//! use kernel::rdma::{dma::DmaBuf, qp::{Qp, Rts}, wr::Waited};
//!
//! fn send_one(qp: &Qp<Rts>, msg: &[u8]) -> Result {
//!     let mut buf = DmaBuf::new(qp.pd(), msg.len(), GFP_KERNEL)?;
//!     buf.as_mut_slice().copy_from_slice(msg);
//!     let (wr, pending) = Waited::new(buf, GFP_KERNEL)?;
//!     qp.post_send(wr, |w, ops| {
//!         ops.send(&w.data, 0..w.data.len())?;
//!         Ok(())
//!     })?;
//!     // The buffer comes back only once the device is done with it.
//!     let (_buf, wc) = pending.wait(5000)?;
//!     if wc.is_ok() { Ok(()) } else { Err(EIO) }
//! }
//! ```

use super::{Completion, Wr};
use crate::{
    alloc::Flags,
    c_str,
    error::Result,
    prelude::*,
    rdma::{
        cq::Wc,
        sync::{sleepable, Completion as Signal, SpinLockBh},
    },
    static_lock_class,
    str::CStr,
    sync::{Arc, LockClassKey},
};

/// The lockdep class and name of every slot's lock.
///
/// Made here, outside the generic code: `Waited<T>` is instantiated in the modules that use it,
/// and a name (a string constant) emitted there would be freed with the module while lockdep
/// still holds the class it named (lockdep warns when one key meets two names). Never inlined,
/// so that the name stays in the kernel image.
#[inline(never)]
fn slot_class() -> (&'static CStr, &'static LockClassKey) {
    (c_str!("rdma_wait_slot"), static_lock_class!())
}

/// Where the handler leaves the data and the completion for the waiting thread.
#[pin_data]
struct Slot<T> {
    #[pin]
    done: SpinLockBh<Option<(T, Wc)>>,
    #[pin]
    sig: Signal,
}

/// A request whose completion is handed to a [`Pending`].
///
/// Its `data` is what the request's operations name (buffers, an MR, an address handle); the
/// post closure reaches it through the `&mut Waited<T>` it is given.
pub struct Waited<T: Send + 'static> {
    /// The memory and objects the request uses.
    pub data: T,
    slot: Arc<Slot<T>>,
}

/// The waiting side of a [`Waited`] request.
pub struct Pending<T: Send + 'static> {
    slot: Arc<Slot<T>>,
}

impl<T: Send + 'static> Waited<T> {
    /// Allocates a request owning `data`, and the handle that waits for its completion.
    ///
    /// # Errors
    ///
    /// Those of [`Wr::new`] (`ENOMEM`, `ENOSPC`); `data` is dropped with the error.
    pub fn new(data: T, flags: Flags) -> Result<(Wr<Self>, Pending<T>)> {
        let slot = Arc::pin_init(
            pin_init!(Slot {
                done <- {
                    let (name, key) = slot_class();
                    SpinLockBh::new(None, name, key)
                },
                sig <- Signal::new(),
            }),
            flags,
        )?;
        let wr = Wr::new(
            Self {
                data,
                slot: slot.clone(),
            },
            flags,
        )?;
        Ok((wr, Pending { slot }))
    }
}

impl<T: Send + 'static> Completion for Waited<T> {
    fn done(wr: Wr<Self>, wc: &Wc) {
        let Waited { data, slot } = wr.into_inner();
        *slot.done.lock() = Some((data, *wc));
        slot.sig.complete();
        // If the `Pending` is gone (its wait timed out), `slot` is the last reference and
        // drops `data` here, as a handler that drops its request would.
    }
}

impl<T: Send + 'static> Pending<T> {
    /// Sleeps until the request completes, at most `ms` milliseconds, and returns its data
    /// and completion, whatever its status (check [`Wc::is_ok`]). Process context only.
    ///
    /// # Errors
    ///
    /// - `ETIMEDOUT` if the request has not completed by then; it stays with the device, and
    ///   its data is dropped when it completes.
    /// - `EAGAIN` in atomic context.
    pub fn wait(self, ms: u32) -> Result<(T, Wc)> {
        sleepable()?;
        self.slot.sig.wait_timeout(ms)?;
        self.slot.done.lock().take().ok_or(EINVAL)
    }

    /// Whether the request has completed (any context).
    pub fn is_done(&self) -> bool {
        self.slot.done.lock().is_some()
    }
}
