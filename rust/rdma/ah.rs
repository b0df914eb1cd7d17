// SPDX-License-Identifier: GPL-2.0

//! Address handles (`struct ib_ah`): where a UD datagram goes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! Creating and destroying an AH sleeps (this crate uses the sleepable variants); an AH whose
//! last reference goes in a completion handler is destroyed from process context
//! ([`defer`](super::defer)).

use super::{
    addr::resolve_dmac,
    defer::{Deferred, Teardown},
    device::{Gid, LinkLayer},
    pd::Pd,
    sync::{might_sleep, sleepable},
};
use crate::{
    bindings,
    error::{code::*, from_err_ptr, Result},
    sync::Arc,
};

/// An address handle for UD sends to the port with GID `dgid`.
///
/// A UD send names its AH by reference ([`SendOps::send_ud`](super::wr::SendOps::send_ud)), so
/// the request's owner keeps an `Arc<Ah>` and the AH outlives every request using it.
///
/// # Examples
///
/// A UD datagram to a peer QP; the buffer starts past nothing (sends need no GRH room, only
/// receives do).
///
/// ```
/// use kernel::rdma::{
///     ah::Ah, cq::Wc, dma::DmaBuf, qp::{Endpoint, Qp, Rts}, wr::{Completion, Wr},
/// };
/// use kernel::sync::Arc;
///
/// struct Dgram {
///     buf: DmaBuf,
///     ah: Arc<Ah>,
/// }
///
/// impl Completion for Dgram {
///     fn done(wr: Wr<Self>, _wc: &Wc) {
///         drop(wr);
///     }
/// }
///
/// fn send_to(qp: &Qp<Rts>, ah: &Arc<Ah>, peer: &Endpoint, qkey: u32) -> Result {
///     let d = Dgram { buf: DmaBuf::new(qp.pd(), 256, GFP_KERNEL)?, ah: ah.clone() };
///     qp.post_send(Wr::new(d, GFP_KERNEL)?, |d, ops| {
///         ops.send_ud(&d.buf, 0..256, &d.ah, peer.qpn, qkey)?;
///         Ok(())
///     })?;
///     Ok(())
/// }
///
/// fn ah_for(qp: &Qp<Rts>, peer: &Endpoint) -> Result<Arc<Ah>> {
///     // Sleeps (address resolution): process context, once per peer.
///     Ah::new(qp.pd(), 1, &peer.gid)
/// }
/// ```
pub struct Ah {
    raw: Deferred<RawAh>,
}

/// The C object of an [`Ah`]; dropping it destroys the AH.
///
/// # Invariants
///
/// `ptr` is an AH created on `pd`, valid until `RawAh` is dropped.
struct RawAh {
    ptr: *mut bindings::ib_ah,
    pd: Arc<Pd>,
}

// SAFETY: An AH may be used and destroyed from any thread.
unsafe impl Send for RawAh {}
// SAFETY: `&RawAh` only lends the pointer to posts, which the driver serialises.
unsafe impl Sync for RawAh {}

impl Teardown for RawAh {}

impl Drop for RawAh {
    fn drop(&mut self) {
        might_sleep();
        // SAFETY: `ptr` is valid (invariant); requests naming it own an `Arc<Ah>`, so none is
        // outstanding. Process context, so the sleepable destroy is allowed.
        unsafe {
            bindings::rdma_destroy_ah_user(
                self.ptr,
                bindings::rdma_destroy_ah_flags_RDMA_DESTROY_AH_SLEEPABLE,
                core::ptr::null_mut(),
            )
        };
    }
}

impl Ah {
    /// Creates an AH from local `port` to the RoCE port with GID `dgid` (`rdma_create_ah`,
    /// with the destination MAC resolved through the neighbour table first). Sleeps.
    ///
    /// `EINVAL` for a port outside the device, `EOPNOTSUPP` for a port that is not RoCE,
    /// `ENOENT` when the port has no usable source GID.
    pub fn new(pd: &Arc<Pd>, port: u32, dgid: &Gid) -> Result<Arc<Self>> {
        let dev = pd.device();
        if dev.link_layer(port)? != LinkLayer::Ethernet {
            return Err(EOPNOTSUPP);
        }
        let sgid = dev.find_gid(port)?;
        // SAFETY: All-zeroes is a valid `rdma_ah_attr` (no GID attribute held, no flags).
        let mut attr: bindings::rdma_ah_attr = unsafe { core::mem::zeroed() };
        attr.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        attr.port_num = port;
        attr.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        attr.grh.dgid.raw = dgid.0;
        attr.grh.sgid_index = u8::try_from(sgid.index).map_err(|_| EINVAL)?;
        let (dmac, hop_limit) = resolve_dmac(dev, port, sgid.index, dgid)?;
        attr.__bindgen_anon_1.roce.dmac = dmac;
        attr.grh.hop_limit = hop_limit;
        // SAFETY: `attr` is a complete, resolved RoCE address vector.
        unsafe { Self::from_attr(pd, &mut attr) }
    }

    /// Creates an AH on `pd` from a resolved address vector (`rdma_create_ah`). Sleeps.
    ///
    /// # Safety
    ///
    /// `attr` must be a complete address vector for `pd`'s device, with any GID attribute it
    /// names held for the call.
    pub(crate) unsafe fn from_attr(
        pd: &Arc<Pd>,
        attr: &mut bindings::rdma_ah_attr,
    ) -> Result<Arc<Self>> {
        sleepable()?;
        // SAFETY: `pd` is valid, `attr` is valid per the safety requirements, and this is
        // process context (sleepable creation).
        let ptr = from_err_ptr(unsafe {
            bindings::rdma_create_ah(
                pd.as_raw(),
                attr,
                bindings::rdma_create_ah_flags_RDMA_CREATE_AH_SLEEPABLE,
            )
        })?;
        // INVARIANT: Just created on `pd`.
        let raw = Deferred::new(RawAh {
            ptr,
            pd: pd.clone(),
        })?;
        Ok(Arc::new(Self { raw }, crate::alloc::flags::GFP_KERNEL)?)
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_ah {
        self.raw.ptr
    }

    /// The PD of the AH.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.raw.pd
    }
}
