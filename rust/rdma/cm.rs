// SPDX-License-Identifier: GPL-2.0

//! The RDMA connection manager (`rdma_cm`): reaching a peer by its IP address.
//!
//! C header: [`include/rdma/rdma_cm.h`](srctree/include/rdma/rdma_cm.h)
//!
//! A [`CmId`] is the kernel's `rdma_cm_id`: an active side resolves the peer's address and
//! route ([`Id::resolve_addr`], [`Id::resolve_route`]), creates its QP on the id
//! ([`CmId::create_qp`]) and connects ([`Id::connect`]); a passive side binds and listens
//! ([`Id::bind`], [`Id::listen`]) and is handed each connection request as an
//! [`Event::ConnectRequest`], which it takes ([`Request::take`], with the new connection's own
//! handler), gives a QP and accepts, or rejects. The same calls run UD "connections"
//! ([`PortSpace::Udp`]): the request/reply exchange (SIDR) gives the client the server's QP
//! number and Q_Key and an address handle ([`UdPeer`]), so a datagram peer needs only its IP.
//!
//! Events reach the [`Handler`] of the id in process context (the CM's work queue), one at a
//! time per id, with the id's handler lock held: handlers may sleep, and `rdma_accept` (and
//! `rdma_connect` from a handler) must run there. A QP created on an id is moved through its
//! states by the CM; [`Qp::established`] checks that it is ready to send, and [`Qp::managed`]
//! shares it before that, for a server whose receives, posted before the accept, post on it
//! when they complete.
//!
//! Destroying an id (`rdma_destroy_id`) waits for its running handler, so an id must not be
//! destroyed from its own handler. Dropping the last [`CmId`] (or the QP on it) does the right
//! thing wherever it happens:
//!
//! - outside any handler of the id, in process context: the id is destroyed there and then
//!   (this sleeps);
//! - where sleeping is not allowed (a completion handler in softirq context): it is destroyed
//!   from a work item ([`defer`](super::defer));
//! - inside the id's own handler: the handler's return value tells the CM to destroy the id
//!   (the documented way: "returning a non-zero value from the callback destroys the id"),
//!   which is also how a device removal ([`Event::DeviceRemoval`]) is best answered;
//! - a listener dropped while it handles a connection request (its lock is held by the CM):
//!   it is destroyed from a work item once the handler has returned.
//!
//! The handler is dropped once the id is destroyed (or, from inside it, once it has returned).
//! The CM calls a trampoline built into the kernel, which reaches the handler through function
//! pointers into the owning module; the id holds that module until it is destroyed, so the
//! module cannot be unloaded while its handler may still be called ([`owner`](super::owner)).

use super::{
    ah::Ah,
    cq::Cq,
    device::{Device, Gid},
    owner::watch_unloads,
    pd::Pd,
    qp::{Init, Qp, QpCaps, QpType, Recv},
    srq::Srq,
    sync::sleepable,
};
use crate::{
    alloc::flags::GFP_KERNEL,
    bindings,
    error::{code::*, from_err_ptr, to_result, Error, Result},
    sync::Arc,
    types::{ARef, Opaque},
};
use core::{cell::Cell, marker::PhantomData, sync::atomic::Ordering};

mod ctx;
mod sockaddr;

pub use sockaddr::{SockAddr, SockAddrV4, SockAddrV6};

use ctx::{cm_event, created_on, Ctx, IdCore};

/// The Q_Key the CM gives UD QPs of the UDP port space (`RDMA_UDP_QKEY`).
pub const UDP_QKEY: u32 = 0x0123_4567;

/// Longest private data of a connect, accept or reject (the CM's own limits are lower on
/// some transports: 56 bytes in an IB CM connection request carrying the CM's header).
pub const MAX_PRIVATE_DATA: usize = 255;

/// The reject reason "consumer defined" (`IB_CM_REJ_CONSUMER_DEFINED`, `rdma/ib_cm.h`).
const REJ_CONSUMER_DEFINED: u8 = 28;

/// What kind of connections an id makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortSpace {
    /// Reliable connections (`RDMA_PS_TCP`, RC QPs).
    Tcp,
    /// Datagrams (`RDMA_PS_UDP`, UD QPs).
    Udp,
}

impl PortSpace {
    fn raw(self) -> (bindings::rdma_ucm_port_space, bindings::ib_qp_type) {
        match self {
            PortSpace::Tcp => (
                bindings::rdma_ucm_port_space_RDMA_PS_TCP,
                bindings::ib_qp_type_IB_QPT_RC,
            ),
            PortSpace::Udp => (
                bindings::rdma_ucm_port_space_RDMA_PS_UDP,
                bindings::ib_qp_type_IB_QPT_UD,
            ),
        }
    }

    /// The QP type of connections in this port space.
    pub fn qp_type(self) -> QpType {
        match self {
            PortSpace::Tcp => QpType::Rc,
            PortSpace::Udp => QpType::Ud,
        }
    }
}

/// The parameters of a connect or accept (`struct rdma_conn_param`).
#[derive(Clone, Copy, Debug)]
pub struct ConnParam<'a> {
    /// Sent to the peer (at most [`MAX_PRIVATE_DATA`] bytes; the transport may allow less).
    pub private_data: &'a [u8],
    /// RDMA READs and atomics the peer may have outstanding against this side; [`Id::connect`]
    /// and [`Id::accept`] hold it to the device's `max_qp_rd_atom`.
    pub responder_resources: u8,
    /// RDMA READs and atomics this side may have outstanding against the peer; held to the
    /// device's `max_qp_init_rd_atom`.
    pub initiator_depth: u8,
    /// Transport retries (connect only; both sides' QPs take it from the request). The
    /// default, 6, makes a request to a peer that vanished fail after 7 ACK timeouts (3.8 s
    /// with rdma_cm's RoCE timeout) on every device; soft-RoCE retries for ever with 7.
    pub retry_count: u8,
    /// Receiver-not-ready retries (7: without limit).
    pub rnr_retry_count: u8,
    /// Accepting without a QP on the id: the QP number to announce (a UD server answering
    /// every request with one QP created on its listener); 0 otherwise.
    pub qp_num: u32,
    /// UD accept: the Q_Key to announce (0: the port space's, [`UDP_QKEY`]).
    pub qkey: u32,
}

impl Default for ConnParam<'_> {
    fn default() -> Self {
        Self {
            private_data: &[],
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 6,
            rnr_retry_count: 7,
            qp_num: 0,
            qkey: 0,
        }
    }
}

impl ConnParam<'_> {
    /// The raw parameters, both READ depths held to what `dev` takes (as [`Qp::to_rts`] holds
    /// its own): a depth past the device's limit would fail the accept, or the QP's move to
    /// ready to send, on one device and not on another.
    fn to_raw(self, dev: Option<&Device>) -> Result<bindings::rdma_conn_param> {
        let len = u8::try_from(self.private_data.len()).map_err(|_| EINVAL)?;
        // SAFETY: All-zeroes is a valid `rdma_conn_param` (no private data, no SRQ).
        let mut p: bindings::rdma_conn_param = unsafe { core::mem::zeroed() };
        if len > 0 {
            p.private_data = self.private_data.as_ptr().cast();
        }
        p.private_data_len = len;
        let held = |depth: u8, limit: fn(&Device) -> u32| match dev {
            Some(d) => u8::try_from(u32::from(depth).min(limit(d))).unwrap_or(depth),
            None => depth,
        };
        p.responder_resources = held(self.responder_resources, |d| d.attrs().max_qp_rd_atom());
        p.initiator_depth = held(self.initiator_depth, |d| d.attrs().max_qp_init_rd_atom());
        p.retry_count = self.retry_count.min(7);
        p.rnr_retry_count = self.rnr_retry_count.min(7);
        p.qp_num = self.qp_num;
        p.qkey = self.qkey;
        Ok(p)
    }
}

/// Receives the events of a [`CmId`].
///
/// Called in process context, one event at a time per id, with the id's handler lock held
/// (see the [module documentation](self)); may sleep.
pub trait Handler: Send + Sync + Sized + 'static {
    /// Handles `event` of `id` (for [`Event::ConnectRequest`], `id` is the listener).
    fn event(&self, id: &Id, event: Event<'_, Self>);
}

/// An event of a [`CmId`].
pub enum Event<'a, H: Handler> {
    /// [`Id::resolve_addr`] found the local device for the peer's address.
    AddrResolved,
    /// [`Id::resolve_addr`] failed (no route or neighbour: the peer is unreachable).
    AddrError(Error),
    /// [`Id::resolve_route`] succeeded: the id may connect.
    RouteResolved,
    /// [`Id::resolve_route`] failed.
    RouteError(Error),
    /// A peer asks a listener for a connection.
    ConnectRequest(Request<'a, H>),
    /// Setting up the connection failed (the QP could not be moved, for example).
    ConnectError(Error),
    /// The peer did not answer, or (UD) refused.
    Unreachable(Error),
    /// The peer refused the connection (no listener on the port: reason 8, "invalid service
    /// ID"; a consumer's reject: reason 28), with its private data.
    Rejected {
        /// The transport's reject reason.
        reason: i32,
        /// The peer's private data, padded by the transport.
        private_data: &'a [u8],
    },
    /// The connection is up; the QP of the id is ready to send.
    Established {
        /// The peer's private data (padded by the transport to its fixed size).
        private_data: &'a [u8],
        /// UD: how to reach the peer's QP.
        ud: Option<UdPeer<'a>>,
    },
    /// The peer disconnected (or [`Id::disconnect`] completed): the QP is in the error state.
    /// The peer's disconnect request is answered by [`Id::disconnect`] (allowed from the
    /// handler) or when the id is dropped; until then the peer's side of the connection waits
    /// for the answer (its `Disconnected` comes when the request times out).
    Disconnected,
    /// The device of the id is going away: every resource on it must be freed (drop the QP
    /// and the id; from this handler, dropping the id is the way to do it).
    DeviceRemoval,
    /// The address the id is bound to moved to another device.
    AddrChange,
    /// The connection's time-wait is over; its QP number may be reused.
    TimewaitExit,
    /// [`Id::join_multicast`] joined the group: the group's GID and Q_Key, and an address
    /// handle to send to it ([`UdPeer::create_ah`]; datagrams go to QP number `0xffffff`).
    MulticastJoin(UdPeer<'a>),
    /// [`Id::join_multicast`] failed.
    MulticastError(Error),
    /// Any other event (raw event number and status).
    Other(u32, i32),
}

/// A connection request, handed to a listener's [`Handler`].
///
/// Dropping it refuses the connection (the CM destroys the new id and the peer gets a
/// reject); [`Request::take`] keeps it.
pub struct Request<'a, H: Handler> {
    id: *mut bindings::rdma_cm_id,
    event: &'a bindings::rdma_cm_event,
    taken: &'a Cell<*mut Ctx>,
    _h: PhantomData<H>,
}

impl<H: Handler> Request<'_, H> {
    /// The peer's private data, padded by the transport to its fixed size.
    pub fn private_data(&self) -> &[u8] {
        // SAFETY: The event is valid for the lifetime of the request; the connection and UD
        // parameters both start with the private data pointer and its length.
        unsafe { private_data(&self.event.param.conn) }
    }

    /// The RDMA READs the peer will have outstanding against this side (its initiator depth,
    /// which the CM reports from this side's point of view): what
    /// [`ConnParam::responder_resources`] of the accept should be.
    pub fn responder_resources(&self) -> u8 {
        // SAFETY: The new id is valid.
        if unsafe { (*self.id).qp_type } == bindings::ib_qp_type_IB_QPT_UD {
            return 0;
        }
        // SAFETY: As in `initiator_depth`.
        unsafe { self.event.param.conn.responder_resources }
    }

    /// The RDMA READs this side may have outstanding against the peer (the peer's responder
    /// resources, which the CM reports from this side's point of view: `cm_format_req_event`
    /// swaps the two): what [`ConnParam::initiator_depth`] of the accept may be at most.
    pub fn initiator_depth(&self) -> u8 {
        // SAFETY: The new id is valid.
        if unsafe { (*self.id).qp_type } == bindings::ib_qp_type_IB_QPT_UD {
            // A SIDR request carries UD parameters, which have no such field.
            return 0;
        }
        // SAFETY: The event is a connection request of an RC id: it holds connection
        // parameters.
        unsafe { self.event.param.conn.initiator_depth }
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SockAddr> {
        // SAFETY: The new id is valid; the CM filled in its route from the request.
        unsafe { SockAddr::from_raw(&raw const (*self.id).route.addr.dst_addr) }
    }

    /// Keeps the connection: its events go to `handler` from now on. The caller creates the
    /// QP on the returned id and accepts ([`Id::accept`]) before its handler returns; if it
    /// drops the id instead, the connection is refused.
    ///
    /// # Errors
    ///
    /// The request is dropped with the error, which refuses the connection:
    ///
    /// - `ENOMEM` when an allocation fails.
    /// - `ENOSPC` when the module of `H` cannot be tracked ([`owner`](super::owner)).
    pub fn take(self, handler: H) -> Result<CmId<H>> {
        // SAFETY: The new id is valid and its handler lock is held by the CM (this runs in the
        // listener's handler for it), so its context may change: its next event comes after.
        let core = unsafe { IdCore::new(self.id, handler, true) }?;
        self.taken.set(core.ctx_ptr());
        Ok(CmId {
            core: Arc::new(core, GFP_KERNEL)?,
            _h: PhantomData,
        })
    }

    /// Refuses the connection with `private_data` (reason "consumer defined").
    ///
    /// # Errors
    ///
    /// - `EINVAL` for more than [`MAX_PRIVATE_DATA`] bytes of private data, or more than the
    ///   transport carries in a reject.
    /// - Otherwise what `rdma_reject` answers (sending the reject). Dropping the request after
    ///   a failed reject still refuses the connection.
    pub fn reject(self, private_data: &[u8]) -> Result {
        let len = u8::try_from(private_data.len()).map_err(|_| EINVAL)?;
        // SAFETY: The new id is valid; the buffer lives for the call.
        to_result(unsafe {
            bindings::rdma_reject(
                self.id,
                private_data.as_ptr().cast(),
                len,
                REJ_CONSUMER_DEFINED,
            )
        })
    }
}

/// # Safety
///
/// `p` must be valid, with `private_data_len` bytes at `private_data` (or a null pointer).
unsafe fn private_data<'a>(p: &'a bindings::rdma_conn_param) -> &'a [u8] {
    if p.private_data.is_null() {
        return &[];
    }
    // SAFETY: Per the safety requirements.
    unsafe { core::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into()) }
}

/// How a UD client reaches the server's QP: from an [`Event::Established`] of the UDP port
/// space.
pub struct UdPeer<'a> {
    param: &'a bindings::rdma_ud_param,
    /// The device of the id.
    dev: *mut bindings::ib_device,
}

impl UdPeer<'_> {
    /// The peer's QP number (`0xffffff` for a multicast group).
    pub fn qpn(&self) -> u32 {
        self.param.qp_num
    }

    /// The peer's GID: for a multicast group, the group's, which QPs attach to
    /// ([`Qp::attach_mcast`](super::qp::Qp::attach_mcast)).
    pub fn gid(&self) -> Gid {
        // SAFETY: `raw` is the bytes of the GID, whichever view the union is read through.
        Gid(unsafe { self.param.ah_attr.grh.dgid.raw })
    }

    /// The peer's LID (InfiniBand; 0 on RoCE), for [`Qp::attach_mcast`](super::qp::Qp::attach_mcast).
    pub fn lid(&self) -> u16 {
        // SAFETY: The `ib` member of the address vector's union is read only for its LID,
        // which is zero on RoCE (the CM zeroes the vector first).
        unsafe { self.param.ah_attr.__bindgen_anon_1.ib.dlid }
    }

    /// The peer's Q_Key.
    pub fn qkey(&self) -> u32 {
        self.param.qkey
    }

    /// An address handle to the peer on `pd`. Sleeps.
    ///
    /// # Errors
    ///
    /// - `EINVAL` for a PD of another device than the id's.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - Otherwise what `rdma_create_ah` answers (`EOPNOTSUPP` when the device cannot create
    ///   AHs, or the driver's `create_ah`).
    pub fn create_ah(&self, pd: &Arc<Pd>) -> Result<Arc<Ah>> {
        if pd.device().as_raw() != self.dev {
            return Err(EINVAL);
        }
        let mut attr = self.param.ah_attr;
        // SAFETY: `attr` is the CM's resolved address vector, valid (with its GID attribute
        // reference, which the CM holds) for the handler call this runs in.
        unsafe { Ah::from_attr(pd, &mut attr) }
    }
}

/// A connection manager id with event handler `H`.
///
/// Dropping it destroys the id once the QP created on it is gone too (the QP holds it); see
/// the [module documentation](self) for where that may happen.
pub struct CmId<H: Handler> {
    core: Arc<IdCore>,
    _h: PhantomData<H>,
}

impl<H: Handler> CmId<H> {
    /// Creates an id in the initial network namespace (`rdma_create_id`) whose events go to
    /// `handler`. May sleep.
    ///
    /// # Errors
    ///
    /// `handler` is dropped with the error:
    ///
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - `ENOSPC` when the module of `H` cannot be tracked ([`owner`](super::owner)).
    pub fn new(ps: PortSpace, handler: H) -> Result<Self> {
        sleepable()?;
        watch_unloads();
        // SAFETY: A null id is recorded below, before the id can have events.
        let mut core = unsafe { IdCore::new::<H>(core::ptr::null_mut(), handler, false) }?;
        let (raw_ps, qp_type) = ps.raw();
        // SAFETY: `init_net` is a static; the context outlives the id (`IdCore` destroys the
        // id before freeing it); `cm_event` reads that context.
        let id = unsafe {
            bindings::__rdma_create_kernel_id(
                &raw mut bindings::init_net,
                Some(cm_event),
                core.ctx_ptr().cast(),
                raw_ps,
                qp_type,
                c"kernel::rdma".as_ptr().cast(),
            )
        };
        // On failure `core`, which has no id, frees its context and handler.
        let id = from_err_ptr(id)?;
        // SAFETY: `id` was just created with the context of `core`, which has none yet.
        unsafe { core.set_id(id) };
        Ok(Self {
            core: Arc::new(core, GFP_KERNEL)?,
            _h: PhantomData,
        })
    }

    /// The handler of the id.
    pub fn handler(&self) -> &H {
        let h = self.core.ctx().handler.load(Ordering::Acquire);
        // SAFETY: The handler is dropped only when the last reference to the id goes, and
        // `self` is one; it is a `KBox<H>` (type fixed by `CmId<H>`).
        unsafe { &*h.cast::<H>() }
    }

    /// Creates the id's QP on `pd` (`rdma_create_qp`), reporting to `send_cq` and `recv_cq`.
    /// The CM moves it to the states of the connection: it is in Init (RC) until the
    /// connection is established, and ready to send right away for UD; see
    /// [`Qp::established`]. Receives may be posted at once, and should be before the accept
    /// (or connect) for any message the peer may send first: an iWARP peer's SEND may follow
    /// the accept at once, and iWARP has no receiver-not-ready retry (a SEND that finds no
    /// receive ends the connection with a TERMINATE). When their completions post on the QP
    /// (an answer, the receive again), share it as [`Qp::managed`] does. Sleeps.
    ///
    /// The QP holds the id: the id lives until the QP is dropped.
    ///
    /// # Errors
    ///
    /// - `EINVAL` before the id has a device (resolve or bind it first), for a PD of another
    ///   device, or as [`Qp::new`].
    /// - `EBUSY` when the id has a QP already.
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails.
    /// - `EOPNOTSUPP` for a UD id on an iWARP device ([`Device::is_rnic`]), which has RC only.
    /// - Otherwise what `rdma_create_qp` answers: the driver's `create_qp`, or moving the new
    ///   QP to its first state.
    ///
    /// [`Device::is_rnic`]: crate::rdma::device::Device::is_rnic
    pub fn create_qp(
        &self,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        caps: &QpCaps,
    ) -> Result<Qp<Init>> {
        self.make_qp(pd, send_cq, Recv::Cq(recv_cq), caps)
    }

    /// Creates the id's QP on `pd` as [`CmId::create_qp`] does, taking its receives from
    /// `srq` (`rdma_create_qp` with an SRQ): it reports its sends to `send_cq` and its
    /// receives to the SRQ's CQ, and has no receive queue of its own (`caps.recv_depth` and
    /// `caps.recv_sge` are ignored; receives are posted with [`Srq::post_recv`]). Sleeps.
    ///
    /// On iWARP this is the only way to a QP on an SRQ: [`Qp::new_with_srq`] is refused there.
    ///
    /// # Errors
    ///
    /// As [`CmId::create_qp`]; `EINVAL` also when `srq` is on another PD.
    pub fn create_qp_with_srq(
        &self,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        srq: &Arc<Srq>,
        caps: &QpCaps,
    ) -> Result<Qp<Init>> {
        self.make_qp(pd, send_cq, Recv::Srq(srq), caps)
    }

    fn make_qp(
        &self,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv: Recv<'_>,
        caps: &QpCaps,
    ) -> Result<Qp<Init>> {
        sleepable()?;
        let ctx = self.core.ctx();
        let raw = ctx.id;
        // SAFETY: The id is valid while `self` holds it; its device, port and QP type are set
        // by the CM (the device once the id is bound or resolved).
        let (dev, qp_type, port) = unsafe { ((*raw).device, (*raw).qp_type, (*raw).port_num) };
        if dev.is_null() || dev != pd.device().as_raw() {
            return Err(EINVAL);
        }
        // One QP per id: claimed here, so that two callers cannot both create one.
        if ctx
            .qp_claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(EBUSY);
        }
        // SAFETY: As above; a QP created on the id elsewhere would be leaked by a second one.
        if !unsafe { (*raw).qp }.is_null() {
            ctx.qp_claimed.store(false, Ordering::Release);
            return Err(EBUSY);
        }
        let qp_type = if qp_type == bindings::ib_qp_type_IB_QPT_UD {
            QpType::Ud
        } else {
            QpType::Rc
        };
        let on = created_on(self.core.clone());
        let qp = Qp::create_on(on, port, pd, qp_type, send_cq, recv, caps, |pd, init| {
            // SAFETY: The id is valid, `pd` a PD of its device and `init` fully initialised;
            // on success the CM has put the new QP in the id (and moved it to Init, or for UD
            // to ready to send).
            to_result(unsafe { bindings::rdma_create_qp(raw, pd, init) })?;
            // SAFETY: Set by `rdma_create_qp` just now.
            Ok(unsafe { (*raw).qp })
        });
        if qp.is_err() {
            ctx.qp_claimed.store(false, Ordering::Release);
        }
        qp
    }
}

impl<H: Handler> core::ops::Deref for CmId<H> {
    type Target = Id;

    fn deref(&self) -> &Id {
        // SAFETY: The id is valid while `self` holds it.
        unsafe { Id::from_raw(self.core.id()) }
    }
}

/// The operations on an id, for its owner ([`CmId`] dereferences to it) and its handler.
#[repr(transparent)]
pub struct Id(Opaque<bindings::rdma_cm_id>);

impl Id {
    /// # Safety
    ///
    /// `ptr` must be a valid id created by this module, valid for `'a`.
    unsafe fn from_raw<'a>(ptr: *mut bindings::rdma_cm_id) -> &'a Self {
        // SAFETY: `Id` is a transparent wrapper of the id, which is valid for `'a`.
        unsafe { &*ptr.cast::<Self>() }
    }

    fn raw(&self) -> *mut bindings::rdma_cm_id {
        self.0.get()
    }

    fn ctx(&self) -> &Ctx {
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
