// SPDX-License-Identifier: GPL-2.0

//! Address handles (`struct ib_ah`): where a UD datagram goes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! An AH is made for a peer's GID ([`Ah::new`]), or for whoever sent a UD datagram, from its
//! completion and the GRH at the start of its receive buffer ([`Ah::from_wc`]): a UD server
//! answers any client that way, without an out-of-band exchange. Creating and destroying an AH
//! sleeps (this crate uses the sleepable variants); an AH whose last reference goes in a
//! completion handler is destroyed from process context ([`defer`](super::defer)).

use super::{
    addr::resolve_dmac,
    cq::Wc,
    defer::{Deferred, Teardown},
    device::{Device, Gid, LinkLayer},
    pd::Pd,
    sync::{might_sleep, sleepable},
};
use crate::{
    bindings,
    error::{code::*, from_err_ptr, to_result, Result},
    sync::Arc,
};

/// What an address handle addresses (`struct rdma_ah_attr` of a RoCE AH), from [`Ah::query`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// The local port.
    pub port: u32,
    /// The destination GID.
    pub dgid: Gid,
    /// The index of the source GID in the port's table.
    pub sgid_index: u8,
    /// The IP hop limit.
    pub hop_limit: u8,
    /// The IP traffic class.
    pub traffic_class: u8,
    /// The IPv6 flow label.
    pub flow_label: u32,
    /// The service level.
    pub sl: u8,
    /// The destination MAC address.
    pub dmac: [u8; 6],
}

/// A resolved RoCE address vector from `port` of `dev` to the port with GID `dgid`: the
/// destination MAC comes from the neighbour table. Sleeps.
fn roce_attr(dev: &Device, port: u32, dgid: &Gid) -> Result<bindings::rdma_ah_attr> {
    if dev.link_layer(port)? != LinkLayer::Ethernet {
        return Err(EOPNOTSUPP);
    }
    let sgid = dev.preferred_gid(port)?;
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
    Ok(attr)
}

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
/// `ptr` is an AH created on `pd` for `port`, valid until `RawAh` is dropped.
struct RawAh {
    ptr: *mut bindings::ib_ah,
    pd: Arc<Pd>,
    port: u32,
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
    /// with the destination MAC resolved through the neighbour table first). Sleeps: process
    /// context only (the neighbour lookup waits before anything can answer `EAGAIN`).
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a port outside the device.
    /// - `EOPNOTSUPP` for a port that is not RoCE (Ethernet link layer), or a device that
    ///   cannot create AHs.
    /// - `ENOENT` when the port has no usable source GID ([`Device::preferred_gid`]).
    /// - `ETIMEDOUT` when the neighbour does not answer within two seconds, or what the route
    ///   lookup answers (`ENETUNREACH`, for instance).
    /// - `ENOMEM` when an allocation fails.
    /// - Otherwise what the driver's `create_ah` returns.
    pub fn new(pd: &Arc<Pd>, port: u32, dgid: &Gid) -> Result<Arc<Self>> {
        let mut attr = roce_attr(pd.device(), port, dgid)?;
        // SAFETY: `attr` is a complete, resolved RoCE address vector.
        unsafe { Self::from_attr(pd, &mut attr) }
    }

    /// Creates an AH to the sender of the UD datagram that completed with `wc` on `port`
    /// (`ib_create_ah_from_wc`), from the datagram's `grh`: the first
    /// [`GRH_LEN`](super::wr::GRH_LEN) bytes of its receive buffer. The answer goes to
    /// [`Wc::src_qp`]. Sleeps: process context (a workqueue CQ, or a work item).
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a completion that is not a successful receive with a GRH, a GRH shorter
    ///   than 40 bytes or a port outside the device.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - Otherwise what `ib_create_ah_from_wc` answers: from finding the GID the datagram
    ///   came in on, resolving the sender's address (on RoCE), or the driver's `create_ah`.
    pub fn from_wc(pd: &Arc<Pd>, port: u32, wc: &Wc, grh: &[u8]) -> Result<Arc<Self>> {
        sleepable()?;
        let dev = pd.device();
        if !wc.has_grh() || !dev.ports().contains(&port) {
            return Err(EINVAL);
        }
        let src = grh
            .get(..core::mem::size_of::<bindings::ib_grh>())
            .ok_or(EINVAL)?;
        // SAFETY: All-zeroes is a valid `ib_grh` (plain C data); it is overwritten next.
        let mut g: bindings::ib_grh = unsafe { core::mem::zeroed() };
        // SAFETY: `src` holds exactly `size_of::<ib_grh>()` bytes and `g` is that large; the
        // copy also aligns the header, which the receive buffer need not be.
        unsafe {
            core::ptr::copy_nonoverlapping(src.as_ptr(), (&raw mut g).cast::<u8>(), src.len())
        };
        // SAFETY: `pd` is valid, `wc` a copy of a receive completion of `pd`'s device and `g`
        // its GRH; `port` is one of the device's ports; this is process context.
        let ptr = from_err_ptr(unsafe {
            bindings::ib_create_ah_from_wc(pd.as_raw(), wc.as_raw(), &g, port)
        })?;
        Self::wrap(pd, port, ptr)
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
        Self::wrap(pd, attr.port_num, ptr)
    }

    /// Owns `ptr`, just created on `pd` for `port`; destroys it if that fails.
    fn wrap(pd: &Arc<Pd>, port: u32, ptr: *mut bindings::ib_ah) -> Result<Arc<Self>> {
        // INVARIANT: Just created on `pd` for `port`.
        let raw = Deferred::new(RawAh {
            ptr,
            pd: pd.clone(),
            port,
        })?;
        Ok(Arc::new(Self { raw }, crate::alloc::flags::GFP_KERNEL)?)
    }

    /// What the AH addresses, as the device has it (`rdma_query_ah`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EOPNOTSUPP` when the device cannot query AHs.
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what the driver's `query_ah` returns.
    pub fn query(&self) -> Result<AhAttr> {
        sleepable()?;
        // SAFETY: All-zeroes is a valid `rdma_ah_attr`, filled in by the driver.
        let mut a: bindings::rdma_ah_attr = unsafe { core::mem::zeroed() };
        // SAFETY: `ptr` is valid (invariant) and `a` writable.
        to_result(unsafe { bindings::rdma_query_ah(self.raw.ptr, &mut a) })?;
        // SAFETY: For a RoCE AH, the `roce` member of the union is the one filled in.
        let dmac = unsafe { a.__bindgen_anon_1.roce.dmac };
        // SAFETY: `raw` is the bytes of the GID, whichever view the union is read through.
        let dgid = Gid(unsafe { a.grh.dgid.raw });
        let out = AhAttr {
            port: a.port_num,
            dgid,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
            flow_label: a.grh.flow_label,
            sl: a.sl,
            dmac,
        };
        // SAFETY: Gives back the GID attribute reference the query may have taken.
        unsafe { bindings::rdma_destroy_ah_attr(&mut a) };
        Ok(out)
    }

    /// Points the AH at the port with GID `dgid` (`rdma_modify_ah`), resolved as in
    /// [`Ah::new`]; sends posted after this go there. Sleeps.
    ///
    /// # Errors
    ///
    /// - `EOPNOTSUPP` when the device cannot modify AHs.
    /// - `EAGAIN` in atomic context.
    /// - What resolving `dgid` answers, as for [`Ah::new`] (`ENOENT`, `ETIMEDOUT`, ...).
    /// - Otherwise what the driver's `modify_ah` returns.
    pub fn modify(&self, dgid: &Gid) -> Result {
        sleepable()?;
        let mut attr = roce_attr(self.raw.pd.device(), self.raw.port, dgid)?;
        // SAFETY: `ptr` is valid (invariant); `attr` is a complete, resolved address vector
        // holding no GID attribute reference.
        to_result(unsafe { bindings::rdma_modify_ah(self.raw.ptr, &mut attr) })
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_ah {
        self.raw.ptr
    }

    /// The PD of the AH.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.raw.pd
    }
}
