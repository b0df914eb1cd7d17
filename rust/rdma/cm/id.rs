// SPDX-License-Identifier: GPL-2.0

//! The operations on an rdma_cm id: resolving, binding, listening, connecting, accepting,
//! rejecting, disconnecting, multicast, and the id's options.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)

use super::{ctx::Ctx, ConnParam, SockAddr, REJ_CONSUMER_DEFINED};
use crate::{
    bindings,
    error::{code::*, to_result, Result},
    rdma::{device::Device, sync::sleepable},
    types::{ARef, Opaque},
};
use core::sync::atomic::Ordering;

// What the docs link to: the events that follow each call, the owner, the limits.
#[cfg(doc)]
use super::{CmId, Event, MAX_PRIVATE_DATA};

/// The operations on an id, for its owner ([`CmId`] dereferences to it) and its handler.
#[repr(transparent)]
pub struct Id(Opaque<bindings::rdma_cm_id>);

impl Id {
    /// # Safety
    ///
    /// `ptr` must be a valid id created by this module, valid for `'a`.
    pub(super) unsafe fn from_raw<'a>(ptr: *mut bindings::rdma_cm_id) -> &'a Self {
        // SAFETY: `Id` is a transparent wrapper of the id, which is valid for `'a`.
        unsafe { &*ptr.cast::<Self>() }
    }

    pub(super) fn raw(&self) -> *mut bindings::rdma_cm_id {
        self.0.get()
    }

    pub(super) fn ctx(&self) -> &Ctx {
        // SAFETY: Every id of this module has its `Ctx` as context while it is valid.
        unsafe { &*(*self.raw()).context.cast::<Ctx>() }
    }

    /// Finds the local device and address to reach `dst` (`rdma_resolve_addr`), binding to
    /// `src` if given: [`Event::AddrResolved`] or [`Event::AddrError`] follows within
    /// `timeout_ms`. A failure found later comes as [`Event::AddrError`].
    ///
    /// # Errors
    ///
    /// What `rdma_resolve_addr` answers at once:
    ///
    /// - `EINVAL` when the id is neither new nor just bound (resolving already, listening,
    ///   connected), or `dst` is of another address family than the id's address.
    /// - What binding to `src` answers (see [`Id::bind`]).
    /// - `ENOMEM` when an allocation fails.
    pub fn resolve_addr(
        &self,
        src: Option<SockAddr>,
        dst: impl Into<SockAddr>,
        timeout_ms: u32,
    ) -> Result {
        let src = src.map(SockAddr::to_raw);
        let mut dst = dst.into().to_raw();
        let src_ptr = src.as_ref().map_or(core::ptr::null_mut(), |s| {
            (s as *const bindings::__kernel_sockaddr_storage).cast_mut()
        });
        // SAFETY: The id is valid; the CM copies both addresses before returning.
        to_result(unsafe {
            bindings::rdma_resolve_addr(
                self.raw(),
                src_ptr.cast(),
                (&raw mut dst).cast(),
                timeout_ms.max(1) as _,
            )
        })
    }

    /// Resolves the route to the peer (`rdma_resolve_route`) after [`Event::AddrResolved`]:
    /// [`Event::RouteResolved`] or [`Event::RouteError`] follows.
    ///
    /// # Errors
    ///
    /// - `EINVAL` when the id's address is not resolved (or its route is being resolved).
    /// - `EOPNOTSUPP` on an iWARP device ([`Device::is_rnic`]): iWARP has no multicast (the CM
    ///   would answer `ENOSYS`).
    /// - `ENOSYS` on a port of no transport the CM knows.
    /// - Otherwise what starting the resolution answers (`ENOMEM`, or `ENODEV` on RoCE when
    ///   the id's network device is gone).
    pub fn resolve_route(&self, timeout_ms: u32) -> Result {
        // SAFETY: The id is valid.
        to_result(unsafe { bindings::rdma_resolve_route(self.raw(), timeout_ms.max(1) as _) })
    }

    /// Binds the id to a local address (`rdma_bind_addr`); an address of an RDMA device's
    /// netdev also binds the id to that device. Port 0 picks one. A link-local IPv6 address
    /// needs its scope (the interface index).
    ///
    /// # Errors
    ///
    /// - `EINVAL` when the id is bound already, or for a link-local IPv6 address without its
    ///   scope.
    /// - `EADDRNOTAVAIL` for an address no local network device has, or when no port is free
    ///   (port 0) or the port is taken by a wildcard bind.
    /// - `ENODEV` for an address whose network device has no RDMA device.
    /// - `EADDRINUSE` when another id is bound to the address and port.
    pub fn bind(&self, addr: impl Into<SockAddr>) -> Result {
        let mut a = addr.into().to_raw();
        // SAFETY: The id is valid; the CM copies the address.
        to_result(unsafe { bindings::rdma_bind_addr(self.raw(), (&raw mut a).cast()) })
    }

    /// Listens for connection requests (`rdma_listen`), which arrive as
    /// [`Event::ConnectRequest`]. An id that is not bound is bound to the IPv4 wildcard
    /// address first.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a backlog above `i32::MAX`, or an id past binding (resolving,
    ///   connected, listening already).
    /// - What binding answers (see [`Id::bind`]), `EADDRINUSE` when an id that allowed reuse
    ///   shares the address and port ([`Id::set_reuseaddr`]).
    /// - Otherwise what starting to listen answers (`ENOMEM`, ...).
    pub fn listen(&self, backlog: u32) -> Result {
        let backlog = i32::try_from(backlog).map_err(|_| EINVAL)?;
        // SAFETY: The id is valid.
        to_result(unsafe { bindings::rdma_listen(self.raw(), backlog) })
    }

    /// Connects to the resolved peer with the id's QP (`rdma_connect`, or `rdma_connect_locked`
    /// from the id's handler): [`Event::Established`], [`Event::Rejected`] or
    /// [`Event::Unreachable`] follows. UD: sends the SIDR request.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for more than [`MAX_PRIVATE_DATA`] bytes of private data (or more than the
    ///   transport carries), or when the route is not resolved (or a connect is under way).
    /// - `ENOSYS` on a port of no transport the CM knows.
    /// - Otherwise what sending the request answers (`ENOMEM`, or moving the QP to its
    ///   first states).
    pub fn connect(&self, param: &ConnParam<'_>) -> Result {
        let mut p = param.to_raw(self.device().as_deref())?;
        let locked = self.ctx().locked_here();
        // SAFETY: The id is valid; `p` and its private data live for the call (the CM copies
        // them). The locked variant is used exactly when this task holds the handler lock.
        to_result(unsafe {
            if locked {
                bindings::rdma_connect_locked(self.raw(), &mut p)
            } else {
                bindings::rdma_connect(self.raw(), &mut p)
            }
        })
    }

    /// Accepts the connection request of a taken id (`rdma_accept`): moves its QP to ready to
    /// send and answers the peer. Only from the handler that took the request.
    ///
    /// # Errors
    ///
    /// On failure the CM has rejected the peer.
    ///
    /// - `EINVAL` outside the handler that took the request (the CM requires its lock), for
    ///   an id that is not a taken request, or for more than [`MAX_PRIVATE_DATA`] bytes of
    ///   private data.
    /// - `ENOSYS` on a port of no transport the CM knows.
    /// - Otherwise what answering the peer answers (moving the QP to ready to send, sending
    ///   the reply).
    pub fn accept(&self, param: &ConnParam<'_>) -> Result {
        if !self.ctx().locked_here() {
            crate::pr_err!("kernel::rdma: rdma_accept outside the id's event handler\n");
            return Err(EINVAL);
        }
        let mut p = param.to_raw(self.device().as_deref())?;
        // SAFETY: The id is valid and its handler lock is held by this task (checked above).
        to_result(unsafe { bindings::rdma_accept(self.raw(), &mut p) })
    }

    /// Refuses a connection request of a taken id (`rdma_reject`, reason "consumer defined").
    ///
    /// # Errors
    ///
    /// - `EINVAL` for more than [`MAX_PRIVATE_DATA`] bytes of private data (or more than the
    ///   transport carries), or an id that has no connection.
    /// - `ENOSYS` on a port of no transport the CM knows.
    /// - Otherwise what sending the reject answers (`EINVAL` once the connection is past
    ///   being refused).
    pub fn reject(&self, private_data: &[u8]) -> Result {
        let len = u8::try_from(private_data.len()).map_err(|_| EINVAL)?;
        // SAFETY: The id is valid; the buffer lives for the call.
        to_result(unsafe {
            bindings::rdma_reject(
                self.raw(),
                private_data.as_ptr().cast(),
                len,
                REJ_CONSUMER_DEFINED,
            )
        })
    }

    /// Disconnects (`rdma_disconnect`): the QP moves to the error state (outstanding requests
    /// flush) and both sides get [`Event::Disconnected`].
    ///
    /// # Errors
    ///
    /// - `EINVAL` if the id never connected.
    /// - Otherwise what moving the QP to the error state answers.
    pub fn disconnect(&self) -> Result {
        // SAFETY: The id is valid.
        to_result(unsafe { bindings::rdma_disconnect(self.raw()) })
    }

    /// The RDMA device the id is bound to (after address resolution or a bind to a device's
    /// address).
    pub fn device(&self) -> Option<ARef<Device>> {
        // SAFETY: The id is valid; a bound id holds a reference to its device.
        let dev = unsafe { (*self.raw()).device };
        if dev.is_null() {
            return None;
        }
        // SAFETY: The device is valid while the id is bound to it, which covers this call;
        // `into` takes a reference of our own.
        Some(unsafe { Device::from_raw(dev) }.into())
    }

    /// The port of the device the id is bound to (0 before).
    pub fn port(&self) -> u32 {
        // SAFETY: The id is valid.
        unsafe { (*self.raw()).port_num }
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SockAddr> {
        // SAFETY: The id is valid; its address is a socket address.
        unsafe { SockAddr::from_raw(&raw const (*self.raw()).route.addr.src_addr) }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SockAddr> {
        // SAFETY: The id is valid; its address is a socket address.
        unsafe { SockAddr::from_raw(&raw const (*self.raw()).route.addr.dst_addr) }
    }

    /// Joins the multicast group at `addr` (`rdma_join_multicast`, as a full member; on RoCE the
    /// CM joins the IP group on the netdev too, so that it takes the group's packets):
    /// [`Event::MulticastJoin`] or [`Event::MulticastError`] follows. The id must be a UD id
    /// bound to a device (bind or address resolution), without a QP of its own: the QPs that
    /// receive the group's datagrams are created apart and attached. May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for an RC id, an id with a QP (the CM would warn about it), an id not bound
    ///   to a device, or the zero address.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - `ENOSYS` on a port of no transport the CM knows.
    /// - Otherwise what joining answers: on RoCE, `ENODEV` when the id's network device is
    ///   gone, and the kernel's internal `ENOTSUPP` (524) for an IPv6 group on a RoCE v2 port.
    pub fn join_multicast(&self, addr: impl Into<SockAddr>) -> Result {
        sleepable()?;
        // SAFETY: The id is valid.
        let (ty, qp) = unsafe { ((*self.raw()).qp_type, (*self.raw()).qp) };
        // A QP being created (claimed) counts as one.
        let claimed = self.ctx().qp_claimed.load(Ordering::Acquire);
        if ty != bindings::ib_qp_type_IB_QPT_UD || !qp.is_null() || claimed {
            return Err(EINVAL);
        }
        if self.device().is_some_and(|d| d.is_rnic()) {
            return Err(EOPNOTSUPP);
        }
        let mut a = addr.into().to_raw();
        // SAFETY: The id is valid; the CM copies the address; no context is passed.
        to_result(unsafe {
            bindings::rdma_join_multicast(
                self.raw(),
                (&raw mut a).cast(),
                1u8 << bindings::ib_sa_mc_join_states_FULLMEMBER_JOIN,
                core::ptr::null_mut(),
            )
        })
    }

    /// Leaves the multicast group at `addr` (`rdma_leave_multicast`); nothing for a group the
    /// id has not joined. Not from the id's own handler: leaving waits for the join's work,
    /// which runs the handler. Dropping the id leaves every group. May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` in the id's own handler.
    /// - `EAGAIN` in atomic context.
    pub fn leave_multicast(&self, addr: impl Into<SockAddr>) -> Result {
        sleepable()?;
        if self.ctx().locked_here() {
            return Err(EINVAL);
        }
        let mut a = addr.into().to_raw();
        // SAFETY: The id is valid and its handler does not run in this task.
        unsafe { bindings::rdma_leave_multicast(self.raw(), (&raw mut a).cast()) };
        Ok(())
    }

    /// Sets the type of service (IP TOS / traffic class) of the id's connection
    /// (`rdma_set_service_type`); before [`Id::resolve_route`] to take effect.
    pub fn set_tos(&self, tos: u8) {
        // SAFETY: The id is valid.
        unsafe { bindings::rdma_set_service_type(self.raw(), i32::from(tos)) };
    }

    /// Lets the id bind an address and port another id has just used (`rdma_set_reuseaddr`).
    ///
    /// # Errors
    ///
    /// `EINVAL` to turn it on for a listening id, or off once the id is bound.
    pub fn set_reuseaddr(&self, reuse: bool) -> Result {
        // SAFETY: The id is valid.
        to_result(unsafe { bindings::rdma_set_reuseaddr(self.raw(), i32::from(reuse)) })
    }

    /// Sets the local ACK timeout of the id's RC QP (4.096 us * 2^`timeout`, at most 31)
    /// instead of the one the path gives (`rdma_set_ack_timeout`).
    ///
    /// # Errors
    ///
    /// `EINVAL` on a UD id or above 31.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result {
        self.check_rc(timeout)?;
        // SAFETY: The id is valid.
        to_result(unsafe { bindings::rdma_set_ack_timeout(self.raw(), timeout) })
    }

    /// Sets the RNR NAK timer code the id's RC QP answers senders with when it has no receive
    /// posted (`rdma_set_min_rnr_timer`, at most 31).
    ///
    /// # Errors
    ///
    /// `EINVAL` on a UD id (which the CM would also warn about) or above 31.
    pub fn set_min_rnr_timer(&self, timer: u8) -> Result {
        self.check_rc(timer)?;
        // SAFETY: The id is valid.
        to_result(unsafe { bindings::rdma_set_min_rnr_timer(self.raw(), timer) })
    }

    /// `EINVAL` unless the id makes RC connections and `code` is a 5-bit timer code.
    fn check_rc(&self, code: u8) -> Result {
        // SAFETY: The id is valid; its QP type is fixed at creation.
        if unsafe { (*self.raw()).qp_type } != bindings::ib_qp_type_IB_QPT_RC || code > 31 {
            return Err(EINVAL);
        }
        Ok(())
    }
}
