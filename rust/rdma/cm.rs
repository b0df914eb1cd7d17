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
};
use core::{cell::Cell, marker::PhantomData, sync::atomic::Ordering};

mod ctx;
mod id;
mod sockaddr;

pub use id::Id;
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
