// SPDX-License-Identifier: GPL-2.0

//! RoCE address resolution (`rdma_resolve_ip`): the Ethernet address behind a GID.
//!
//! C header: [`include/rdma/ib_addr.h`](srctree/include/rdma/ib_addr.h)
//!
//! On RoCE an address vector needs the peer's MAC address as well as its GID. The RDMA core
//! resolves it for user space and for rdma_cm, but a kernel QP connected by hand gets the
//! vector as given ("kernel users have to provide already resolved rdma_ah_attr's",
//! `_ib_modify_qp`). `resolve_dmac` does what the core's internal
//! `rdma_addr_find_l2_eth_by_grh` does, through the exported `rdma_resolve_ip`: a route and
//! neighbour lookup from the source GID's netdev to the destination IP. A destination on the
//! same device resolves to the device's own MAC, which is how soft-RoCE recognises loopback.

use super::{device::Device, device::Gid, sync::Completion};
use crate::{
    alloc::flags::GFP_KERNEL,
    bindings,
    error::{from_err_ptr, to_result, Result},
    prelude::*,
    types::Opaque,
};
use core::sync::atomic::{AtomicI32, Ordering};

/// How long the neighbour lookup may take.
const RESOLVE_MS: usize = 2000;

#[pin_data]
struct Resolve {
    #[pin]
    done: Completion,
    status: AtomicI32,
    addr: Opaque<bindings::rdma_dev_addr>,
}

/// # Safety
///
/// Called once by `rdma_resolve_ip` with the `context` given to it: a live `Resolve`.
unsafe extern "C" fn resolved(
    status: crate::ffi::c_int,
    _src: *mut bindings::sockaddr,
    _addr: *mut bindings::rdma_dev_addr,
    context: *mut crate::ffi::c_void,
) {
    // SAFETY: `context` is the pinned `Resolve` that `resolve_dmac` waits on.
    let r = unsafe { &*context.cast::<Resolve>() };
    r.status.store(status, Ordering::Release);
    r.done.complete();
}

/// Resolves the MAC address and hop limit to reach `dgid` from GID `sgid_index` of `port`.
///
/// Sleeps (up to two seconds): process context only. `ETIMEDOUT` or `ENODATA`-like errors
/// when the neighbour does not answer; `EINVAL` for a bad port or index.
pub(crate) fn resolve_dmac(
    dev: &Device,
    port: u32,
    sgid_index: u32,
    dgid: &Gid,
) -> Result<([u8; 6], u8)> {
    super::sync::might_sleep();
    if !dev.ports().contains(&port) {
        return Err(EINVAL);
    }
    let index = i32::try_from(sgid_index).map_err(|_| EINVAL)?;
    // SAFETY: `dev` is valid and `port` checked; the core checks `index`.
    let sgid_attr =
        from_err_ptr(unsafe { bindings::rdma_get_gid_attr(dev.as_raw(), port, index) }.cast_mut())?;
    let r = KBox::pin_init(
        pin_init!(Resolve {
            done <- Completion::new(),
            status: AtomicI32::new(0),
            // SAFETY: All-zeroes is the "nothing resolved yet" value of this plain C struct.
            addr: Opaque::new(unsafe { core::mem::zeroed() }),
        }),
        GFP_KERNEL,
    );
    let r = match r {
        Ok(r) => r,
        Err(e) => {
            // SAFETY: Gives back the reference taken above.
            unsafe { bindings::rdma_put_gid_attr(sgid_attr) };
            return Err(e);
        }
    };
    let addr = r.addr.get();
    // SAFETY: `addr` is ours until the callback has run; `init_net` is a static.
    unsafe {
        (*addr).net = &raw mut bindings::init_net;
        (*addr).sgid_attr = sgid_attr;
    }
    // A `sockaddr_in6` holds either family.
    // SAFETY: All-zeroes is a valid socket address buffer; `rdma_gid2ip` fills it in.
    let (mut src, mut dst): (bindings::sockaddr_in6, bindings::sockaddr_in6) =
        unsafe { (core::mem::zeroed(), core::mem::zeroed()) };
    let dgid_raw = bindings::ib_gid { raw: dgid.0 };
    // SAFETY: Both buffers are large enough for either family; the GIDs are valid.
    unsafe {
        bindings::rdma_gid2ip((&raw mut src).cast(), &raw const (*sgid_attr).gid);
        bindings::rdma_gid2ip((&raw mut dst).cast(), &dgid_raw);
    }
    let ctx = (&raw const *r).cast_mut().cast();
    // SAFETY: The addresses and `addr` are valid; `r` outlives the callback, because we wait
    // for it below whenever `rdma_resolve_ip` accepted the request.
    let ret = unsafe {
        bindings::rdma_resolve_ip(
            (&raw mut src).cast(),
            (&raw const dst).cast(),
            addr,
            RESOLVE_MS,
            Some(resolved),
            true,
            ctx,
        )
    };
    let result = to_result(ret).and_then(|()| {
        // The callback always runs (with -ETIMEDOUT at the latest); it must have run before
        // `r` is freed, so this wait has no timeout of its own.
        r.done.wait();
        to_result(r.status.load(Ordering::Acquire))
    });
    // SAFETY: Gives back the reference taken above; the resolution is over.
    unsafe { bindings::rdma_put_gid_attr(sgid_attr) };
    result?;
    // SAFETY: The resolution completed successfully and filled in `addr`.
    let (mac, hop) = unsafe { ((*addr).dst_dev_addr, (*addr).hoplimit) };
    let mut dmac = [0u8; 6];
    dmac.copy_from_slice(&mac[..6]);
    Ok((dmac, u8::try_from(hop).map_err(|_| EINVAL)?))
}
