// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (`struct ib_qp`): creation, state transitions, posting, drain and destruction.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! A QP moves Reset -> Init -> Ready to Receive -> Ready to Send; each step needs its own
//! attributes. [`Qp<S>`] carries its state in its type, so that posting a send on a QP that is
//! not ready, or skipping a step, does not compile. Receives may be posted from Init on.
//!
//! A QP holds an `Arc` of its PD and CQs, so they outlive it. Dropping a QP drains it
//! (`ib_drain_qp`: every outstanding request completes, with a flush error, and goes back to its
//! owner) and destroys it; both sleep, so the last reference to a QP must be dropped in process
//! context, never in a completion handler. A ULP whose requests own references to the QP (the
//! usual cycle: handler -> connection -> QP) breaks it with [`Qp::drain`] before letting go.
//!
//! Each queue keeps one slot in reserve for the drain marker, and posting more requests than
//! the depth the QP was created with fails with `ENOMEM` before the driver sees it.
//!
//! # Examples
//!
//! Connecting two RC QPs of one device without rdma_cm (both ends known):
//!
//! ```
//! use kernel::rdma::{cq::{Cq, PollContext}, device::Device, pd::Pd, qp::*};
//!
//! fn pair(dev: &Device) -> Result<(Qp<Rts>, Qp<Rts>)> {
//!     let pd = Pd::new(dev)?;
//!     let cq = Cq::new(dev, 64, 0, PollContext::Softirq)?;
//!     let caps = QpCaps { send_depth: 8, recv_depth: 8, ..QpCaps::default() };
//!     let a = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::REMOTE_WRITE)?;
//!     let b = Qp::new(&pd, QpType::Rc, &cq, &cq, &caps)?.to_init(1, Access::REMOTE_WRITE)?;
//!     let (ea, eb) = (a.endpoint()?, b.endpoint()?);
//!     Ok((a.connect(&eb, &RcParams::default())?, b.connect(&ea, &RcParams::default())?))
//! }
//! ```

use super::{
    addr::resolve_dmac,
    cm::IdCore,
    cq::Cq,
    device::{Gid, LinkLayer, Mtu},
    pd::Pd,
    srq::Srq,
    sync::{PostGate, PostTicket},
    wr::{Completion, PostError, Queue, RecvOps, SendOps, Wr},
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{code::*, from_err_ptr, to_result, Error, Result},
    sync::Arc,
};
use core::{
    marker::PhantomData,
    sync::atomic::{AtomicBool, AtomicU32, Ordering},
};

/// The transport of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected: one peer QP, in-order delivery, RDMA and atomics.
    Rc,
    /// Unreliable datagram: any peer through an address handle, one MTU per message, no RDMA.
    Ud,
}

/// The queue sizes of a QP. Each queue gets one extra slot from the driver, kept for the drain
/// marker.
///
/// # Examples
///
/// ```
/// use kernel::rdma::qp::QpCaps;
///
/// let caps = QpCaps { send_depth: 64, max_inline: 128, ..QpCaps::default() };
/// assert_eq!((caps.recv_depth, caps.send_sge), (16, 1));
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// Send requests (counting each chained operation) outstanding at most.
    pub send_depth: u32,
    /// Receive requests outstanding at most.
    pub recv_depth: u32,
    /// Scatter/gather entries per send operation (this crate posts one).
    pub send_sge: u32,
    /// Scatter entries per receive request, at most [`MAX_RECV_SGE`](super::wr::MAX_RECV_SGE).
    pub recv_sge: u32,
    /// Largest inline send, in bytes.
    pub max_inline: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            send_depth: 16,
            recv_depth: 16,
            send_sge: 1,
            recv_sge: 1,
            max_inline: 0,
        }
    }
}

/// Remote access rights of an RC QP or a memory region (`enum ib_access_flags`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::qp::Access;
///
/// let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
/// assert_eq!(rw.bits() & Access::REMOTE_WRITE.bits(), Access::REMOTE_WRITE.bits());
/// assert_eq!(Access::NONE.bits(), 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access(u32);

impl Access {
    /// No remote access.
    pub const NONE: Access = Access(0);
    /// The device may write the memory on behalf of local requests (RDMA READ results).
    pub const LOCAL_WRITE: Access = Access(bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ.
    pub const REMOTE_READ: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_READ);
    /// Peers may perform atomics.
    pub const REMOTE_ATOMIC: Access = Access(bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC);

    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// What a peer needs to know to connect an RC QP to this one (or to send UD datagrams to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP number.
    pub qpn: u32,
    /// The GID of the QP's port.
    pub gid: Gid,
    /// The first packet sequence number the QP sends.
    pub psn: u32,
}

/// Connection parameters of an RC QP, with the usual defaults.
#[derive(Clone, Copy, Debug)]
pub struct RcParams {
    /// Path MTU; `None` uses the port's active MTU.
    pub path_mtu: Option<Mtu>,
    /// Outstanding RDMA READs/atomics, as initiator and as target (capped by the device).
    pub max_rd_atomic: u8,
    /// Minimum RNR NAK timer (IB encoding; 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Local ACK timeout (4.096 us * 2^timeout; 14 = 67 ms).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
}

impl Default for RcParams {
    fn default() -> Self {
        Self {
            path_mtu: None,
            max_rd_atomic: 8,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// The state of a QP as the device reports it (`enum ib_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: every request is flushed.
    Err,
}

mod private {
    pub trait Sealed {}
}

/// A QP state in the type of a [`Qp`].
pub trait State: private::Sealed {}
/// A state in which receives may be posted.
pub trait CanRecv: State {}

/// Fresh QP.
pub struct Reset;
/// Initialised QP: receives may be posted.
pub struct Init;
/// Ready-to-receive QP.
pub struct Rtr;
/// Ready-to-send QP: sends may be posted.
pub struct Rts;

impl private::Sealed for Reset {}
impl private::Sealed for Init {}
impl private::Sealed for Rtr {}
impl private::Sealed for Rts {}
impl State for Reset {}
impl State for Init {}
impl State for Rtr {}
impl State for Rts {}
impl CanRecv for Init {}
impl CanRecv for Rtr {}
impl CanRecv for Rts {}

/// Per-QP accounting, reached from completions through `ib_qp.qp_context`.
struct Shared {
    sq_used: AtomicU32,
    rq_used: AtomicU32,
    /// Closed by drain, which waits for the posts under way.
    gate: PostGate,
    drained: AtomicBool,
    posted: AtomicBool,
}

/// Gives back the queue slots of a completed request.
///
/// # Safety
///
/// `qp` must be a QP created by this module (its `qp_context` is its `Shared`), not yet
/// destroyed.
pub(crate) unsafe fn release_slots(qp: *mut bindings::ib_qp, queue: Queue, n: u32) {
    // SAFETY: Per the safety requirements, `qp_context` points at the live `Shared` of the QP.
    let shared = unsafe { &*(*qp).qp_context.cast::<Shared>() };
    match queue {
        Queue::Send => shared.sq_used.fetch_sub(n, Ordering::AcqRel),
        Queue::Recv => shared.rq_used.fetch_sub(n, Ordering::AcqRel),
        // Completed through the SRQ (`srq::complete`), never here.
        Queue::Srq => 0,
    };
}

/// Claims `n` of `depth` slots in `used`; `ENOMEM` when they are not free.
fn reserve(used: &AtomicU32, n: u32, depth: u32) -> Result {
    if super::sync::claim(used, n, depth) {
        Ok(())
    } else {
        Err(ENOMEM)
    }
}

/// The parts of a QP that do not depend on its state; dropping it destroys the QP.
///
/// # Invariants
///
/// `ptr` is a QP created with `ib_create_qp_kernel` (or `rdma_create_qp` on `cm`) on `pd`, with `send_cq` and `recv_cq` (and
/// `srq`, attached to it, if set), whose `qp_context` is `shared`, and which has
/// `caps.send_depth + 1` / `recv_reserved` entries reserved on its CQs. It is valid until
/// `QpInner` is dropped.
struct QpInner {
    ptr: *mut bindings::ib_qp,
    shared: KBox<Shared>,
    qp_type: QpType,
    caps: QpCaps,
    port: u32,
    sq_psn: u32,
    send_cq: Arc<Cq>,
    recv_cq: Arc<Cq>,
    recv_reserved: u32,
    srq: Option<Arc<Srq>>,
    pd: Arc<Pd>,
    /// The connection manager id the QP was created on (destroyed with `rdma_destroy_qp`,
    /// and moved through its states by the CM).
    cm: Option<Arc<IdCore>>,
}

/// A queue pair in state `S`.
pub struct Qp<S: State> {
    inner: QpInner,
    _s: PhantomData<S>,
}

// SAFETY: Verbs on a QP may be called from any thread; the driver locks its queues and the
// accounting is atomic.
unsafe impl<S: State> Send for Qp<S> {}
// SAFETY: Posting and querying through `&Qp` are safe to do concurrently (see `Send`).
unsafe impl<S: State> Sync for Qp<S> {}

impl Qp<Reset> {
    /// Creates a QP on `pd` reporting to `send_cq` and `recv_cq` (`ib_create_qp`). May sleep.
    ///
    /// `EINVAL` when a depth is zero or above the device's `max_qp_wr` (less the drain slot),
    /// an SGE count is zero or above the device's limit, the CQs belong to another device, or a
    /// CQ has not enough free entries for the queues reporting to it (a CQ overrun is fatal).
    pub fn new(
        pd: &Arc<Pd>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        caps: &QpCaps,
    ) -> Result<Self> {
        let attrs = pd.device().attrs();
        let max_recv_sge = attrs.max_recv_sge().min(super::wr::MAX_RECV_SGE as u32);
        if caps.recv_depth == 0 || caps.recv_depth >= attrs.max_qp_wr() {
            return Err(EINVAL);
        }
        if caps.recv_sge == 0 || caps.recv_sge > max_recv_sge {
            return Err(EINVAL);
        }
        Self::create(pd, qp_type, send_cq, recv_cq, None, caps, None)
    }

    /// Creates the QP of a CM id (see [`CmId::create_qp`](super::cm::CmId::create_qp)).
    pub(crate) fn create_on_cm(
        id: &Arc<IdCore>,
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        caps: &QpCaps,
    ) -> Result<Qp<Init>> {
        super::sync::might_sleep();
        let raw = id.id();
        // SAFETY: The id is valid while `id` is held; its device and QP type are set by the CM
        // (the device once the id is bound or resolved).
        let (dev, qp_type, port) = unsafe { ((*raw).device, (*raw).qp_type, (*raw).port_num) };
        if dev.is_null() || dev != pd.device().as_raw() {
            return Err(EINVAL);
        }
        // SAFETY: As above; a QP already on the id would be leaked by a second one.
        if !unsafe { (*raw).qp }.is_null() {
            return Err(EBUSY);
        }
        let qp_type = if qp_type == bindings::ib_qp_type_IB_QPT_UD {
            QpType::Ud
        } else {
            QpType::Rc
        };
        let attrs = pd.device().attrs();
        if caps.recv_depth == 0 || caps.recv_depth >= attrs.max_qp_wr() {
            return Err(EINVAL);
        }
        if caps.recv_sge == 0 || caps.recv_sge > attrs.max_recv_sge() {
            return Err(EINVAL);
        }
        let mut qp = Self::create(pd, qp_type, send_cq, recv_cq, None, caps, Some(id))?;
        qp.inner.port = port;
        Ok(Qp {
            inner: qp.inner,
            _s: PhantomData,
        })
    }

    /// Creates a QP on `pd` that takes its receives from `srq` (`ib_create_qp` with an SRQ)
    /// and reports its sends to `send_cq` and its receives to the SRQ's CQ. May sleep.
    ///
    /// The QP has no receive queue of its own: `caps.recv_depth` and `caps.recv_sge` are
    /// ignored and [`Qp::post_recv`] fails with `EINVAL`; receives are posted with
    /// [`Srq::post_recv`]. `EINVAL` as for [`Qp::new`], or when `srq` is on another PD.
    pub fn new_with_srq(
        pd: &Arc<Pd>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        srq: &Arc<Srq>,
        caps: &QpCaps,
    ) -> Result<Self> {
        if srq.pd().as_raw() != pd.as_raw() {
            return Err(EINVAL);
        }
        let caps = QpCaps {
            recv_depth: 0,
            recv_sge: 0,
            ..*caps
        };
        Self::create(pd, qp_type, send_cq, srq.cq(), Some(srq), &caps, None)
    }

    fn create(
        pd: &Arc<Pd>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        srq: Option<&Arc<Srq>>,
        caps: &QpCaps,
        cm: Option<&Arc<IdCore>>,
    ) -> Result<Self> {
        let attrs = pd.device().attrs();
        if caps.send_depth == 0 || caps.send_depth >= attrs.max_qp_wr() {
            return Err(EINVAL);
        }
        if caps.send_sge == 0 || caps.send_sge > attrs.max_send_sge() {
            return Err(EINVAL);
        }
        let dev = pd.device().as_raw();
        if send_cq.device().as_raw() != dev || recv_cq.device().as_raw() != dev {
            return Err(EINVAL);
        }
        // With an SRQ, the SRQ holds the receive CQ's entries for all its QPs.
        let recv_reserved = if srq.is_some() {
            0
        } else {
            caps.recv_depth + 1
        };
        send_cq.reserve(caps.send_depth + 1)?;
        if let Err(e) = recv_cq.reserve(recv_reserved) {
            send_cq.unreserve(caps.send_depth + 1);
            return Err(e);
        }
        let release = || {
            send_cq.unreserve(caps.send_depth + 1);
            recv_cq.unreserve(recv_reserved);
        };
        let shared = match KBox::new(
            Shared {
                sq_used: AtomicU32::new(0),
                rq_used: AtomicU32::new(0),
                gate: PostGate::new(),
                drained: AtomicBool::new(false),
                posted: AtomicBool::new(false),
            },
            GFP_KERNEL,
        ) {
            Ok(s) => s,
            Err(e) => {
                release();
                return Err(e.into());
            }
        };
        // SAFETY: All-zeroes is the "nothing requested" value of this plain C struct.
        let mut init: bindings::ib_qp_init_attr = unsafe { core::mem::zeroed() };
        init.qp_context = (&raw const *shared).cast_mut().cast();
        init.send_cq = send_cq.as_raw();
        init.recv_cq = recv_cq.as_raw();
        init.cap.max_send_wr = caps.send_depth + 1;
        init.cap.max_recv_wr = recv_reserved;
        init.cap.max_send_sge = caps.send_sge;
        init.cap.max_recv_sge = caps.recv_sge;
        init.cap.max_inline_data = caps.max_inline;
        init.sq_sig_type = bindings::ib_sig_type_IB_SIGNAL_REQ_WR;
        init.srq = srq.map_or(core::ptr::null_mut(), |s| s.as_raw());
        init.qp_type = match qp_type {
            QpType::Rc => bindings::ib_qp_type_IB_QPT_RC,
            QpType::Ud => bindings::ib_qp_type_IB_QPT_UD,
        };
        let ptr = match cm {
            // SAFETY: `pd` is valid, `init` is fully initialised and names valid CQs of its
            // device; `shared` outlives the QP (it is freed after `ib_destroy_qp` in
            // `QpInner::drop`).
            None => unsafe {
                bindings::ib_create_qp_kernel(
                    pd.as_raw(),
                    &mut init,
                    c"kernel::rdma".as_ptr().cast(),
                )
            },
            Some(id) => {
                // SAFETY: As above, and the id is valid while `id` is held; on success the CM
                // has put the new QP in the id (and moved it to Init, or for UD to RTS).
                let ret = unsafe { bindings::rdma_create_qp(id.id(), pd.as_raw(), &mut init) };
                if ret == 0 {
                    // SAFETY: Set by `rdma_create_qp` just now.
                    unsafe { (*id.id()).qp }
                } else {
                    Error::from_errno(ret).to_ptr()
                }
            }
        };
        let ptr = match from_err_ptr(ptr) {
            Ok(p) => p,
            Err(e) => {
                release();
                return Err(e);
            }
        };
        let mut caps = *caps;
        // The driver may round the inline size up; it reports what it gave.
        caps.max_inline = init.cap.max_inline_data;
        // SAFETY: `get_random_u32` has no preconditions.
        let sq_psn = unsafe { bindings::get_random_u32() } & 0xff_ffff;
        // INVARIANT: Just created as described, with the CQ entries reserved above.
        let inner = QpInner {
            ptr,
            shared,
            qp_type,
            caps,
            port: 0,
            sq_psn,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            recv_reserved,
            srq: srq.cloned(),
            pd: pd.clone(),
            cm: cm.cloned(),
        };
        if let Some(srq) = srq {
            // SAFETY: `ptr` is valid; `qp_num` is fixed at creation.
            let qpn = unsafe { (*ptr).qp_num };
            // On failure `inner` is dropped, which destroys the QP.
            srq.attach(ptr, qpn)?;
        }
        Ok(Qp {
            inner,
            _s: PhantomData,
        })
    }

    /// Moves an RC QP to Init on `port`, granting peers `access` to this QP's memory
    /// (`ib_modify_qp`). `EINVAL` for a UD QP or a port outside the device.
    pub fn to_init(self, port: u32, access: Access) -> Result<Qp<Init>> {
        if self.inner.qp_type != QpType::Rc {
            return Err(EINVAL);
        }
        self.init_common(port, |attr, mask| {
            attr.qp_access_flags = access.bits() as i32;
            *mask |= bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS;
        })
    }

    /// Moves a UD QP to Init on `port`, accepting datagrams sent with `qkey`. `EINVAL` for an
    /// RC QP or a port outside the device.
    pub fn to_init_ud(self, port: u32, qkey: u32) -> Result<Qp<Init>> {
        if self.inner.qp_type != QpType::Ud {
            return Err(EINVAL);
        }
        self.init_common(port, |attr, mask| {
            attr.qkey = qkey;
            *mask |= bindings::ib_qp_attr_mask_IB_QP_QKEY;
        })
    }

    fn init_common(
        mut self,
        port: u32,
        f: impl FnOnce(&mut bindings::ib_qp_attr, &mut u32),
    ) -> Result<Qp<Init>> {
        if !self.inner.pd.device().ports().contains(&port) || self.inner.cm.is_some() {
            return Err(EINVAL);
        }
        // SAFETY: All-zeroes is a valid `ib_qp_attr`; only masked fields are read.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = bindings::ib_qp_state_IB_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = port;
        let mut mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX
            | bindings::ib_qp_attr_mask_IB_QP_PORT;
        f(&mut attr, &mut mask);
        self.inner.modify(&mut attr, mask)?;
        self.inner.port = port;
        Ok(self.into_state())
    }
}

impl Qp<Init> {
    /// Moves an RC QP to Ready to Receive, connected to `peer` (`ib_modify_qp` with an address
    /// vector; on RoCE the core resolves the peer's MAC). `EINVAL` for a UD QP;
    /// `EOPNOTSUPP` on a port that is not RoCE (InfiniBand needs LIDs from a subnet manager).
    pub fn to_rtr(self, peer: &Endpoint, p: &RcParams) -> Result<Qp<Rtr>> {
        if self.inner.qp_type != QpType::Rc || self.inner.cm.is_some() {
            return Err(EINVAL);
        }
        let dev = self.inner.pd.device();
        let port = self.inner.port;
        if dev.link_layer(port)? != LinkLayer::Ethernet {
            return Err(EOPNOTSUPP);
        }
        let mtu = match p.path_mtu {
            Some(m) => m,
            None => dev.query_port(port)?.active_mtu().ok_or(EINVAL)?,
        };
        let sgid = dev.find_gid(port)?;
        let rd_atomic = u32::from(p.max_rd_atomic)
            .min(dev.attrs().max_qp_rd_atom())
            .max(1);
        // SAFETY: All-zeroes is a valid `ib_qp_attr`; only masked fields are read.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = bindings::ib_qp_state_IB_QPS_RTR;
        attr.path_mtu = mtu.to_raw();
        attr.dest_qp_num = peer.qpn;
        attr.rq_psn = peer.psn;
        attr.max_dest_rd_atomic = rd_atomic as u8;
        attr.min_rnr_timer = p.min_rnr_timer;
        attr.ah_attr.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        attr.ah_attr.port_num = port;
        attr.ah_attr.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        attr.ah_attr.grh.dgid.raw = peer.gid.0;
        attr.ah_attr.grh.sgid_index = sgid.index as u8;
        // The core resolves the RoCE destination MAC of a connected QP only for user space
        // ("kernel users have to provide already resolved rdma_ah_attr's", `_ib_modify_qp`).
        let (dmac, hop_limit) = resolve_dmac(dev, port, sgid.index, &peer.gid)?;
        attr.ah_attr.__bindgen_anon_1.roce.dmac = dmac;
        attr.ah_attr.grh.hop_limit = hop_limit;
        let mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_AV
            | bindings::ib_qp_attr_mask_IB_QP_PATH_MTU
            | bindings::ib_qp_attr_mask_IB_QP_DEST_QPN
            | bindings::ib_qp_attr_mask_IB_QP_RQ_PSN
            | bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC
            | bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER;
        let mut me = self;
        me.inner.modify(&mut attr, mask)?;
        Ok(me.into_state())
    }

    /// RC: [`Qp::to_rtr`] then [`Qp::to_rts`].
    pub fn connect(self, peer: &Endpoint, p: &RcParams) -> Result<Qp<Rts>> {
        self.to_rtr(peer, p)?.to_rts(p)
    }

    /// UD: moves the QP through Ready to Receive to Ready to Send. `EINVAL` for an RC QP.
    pub fn ready_ud(mut self) -> Result<Qp<Rts>> {
        if self.inner.qp_type != QpType::Ud || self.inner.cm.is_some() {
            return Err(EINVAL);
        }
        // SAFETY: All-zeroes is a valid `ib_qp_attr`; only masked fields are read.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = bindings::ib_qp_state_IB_QPS_RTR;
        self.inner
            .modify(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE)?;
        attr.qp_state = bindings::ib_qp_state_IB_QPS_RTS;
        attr.sq_psn = self.inner.sq_psn;
        self.inner.modify(
            &mut attr,
            bindings::ib_qp_attr_mask_IB_QP_STATE | bindings::ib_qp_attr_mask_IB_QP_SQ_PSN,
        )?;
        Ok(Qp {
            inner: self.inner,
            _s: PhantomData,
        })
    }
}

impl Qp<Init> {
    /// A QP created on a CM id, once the CM has made it ready to send: after
    /// [`Event::Established`](super::cm::Event::Established) for RC (the CM moves it through
    /// Ready to Receive on connect or accept), at once for UD. Queries the QP's state (may
    /// sleep); `EINVAL` for a QP not created on a CM id or not yet ready to send (the QP is
    /// dropped).
    pub fn established(self) -> Result<Qp<Rts>> {
        if self.inner.cm.is_none() || self.query_state()? != QpState::Rts {
            return Err(EINVAL);
        }
        Ok(self.into_state())
    }
}

impl Qp<Rtr> {
    /// Moves an RC QP to Ready to Send (`ib_modify_qp`).
    pub fn to_rts(mut self, p: &RcParams) -> Result<Qp<Rts>> {
        let dev = self.inner.pd.device();
        let rd_atomic = u32::from(p.max_rd_atomic)
            .min(dev.attrs().max_qp_init_rd_atom())
            .max(1);
        // SAFETY: All-zeroes is a valid `ib_qp_attr`; only masked fields are read.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = bindings::ib_qp_state_IB_QPS_RTS;
        attr.timeout = p.timeout;
        attr.retry_cnt = p.retry_cnt;
        attr.rnr_retry = p.rnr_retry;
        attr.sq_psn = self.inner.sq_psn;
        attr.max_rd_atomic = rd_atomic as u8;
        let mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_TIMEOUT
            | bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT
            | bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY
            | bindings::ib_qp_attr_mask_IB_QP_SQ_PSN
            | bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC;
        self.inner.modify(&mut attr, mask)?;
        Ok(self.into_state())
    }
}

impl<S: State> Qp<S> {
    fn into_state<N: State>(self) -> Qp<N> {
        Qp {
            inner: self.inner,
            _s: PhantomData,
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: `ptr` is valid (invariant); `qp_num` is fixed at creation.
        unsafe { (*self.inner.ptr).qp_num }
    }

    /// The transport of the QP.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The queue sizes, with the inline size the driver granted.
    pub fn caps(&self) -> &QpCaps {
        &self.inner.caps
    }

    /// The PD of the QP.
    pub fn pd(&self) -> &Arc<Pd> {
        &self.inner.pd
    }

    /// The SRQ the QP takes its receives from, if it was created with one.
    pub fn srq(&self) -> Option<&Arc<Srq>> {
        self.inner.srq.as_ref()
    }

    /// Send requests outstanding (posted, not yet completed).
    pub fn send_outstanding(&self) -> u32 {
        self.inner.shared.sq_used.load(Ordering::Acquire)
    }

    /// Receive requests outstanding (posted, not yet completed).
    pub fn recv_outstanding(&self) -> u32 {
        self.inner.shared.rq_used.load(Ordering::Acquire)
    }

    /// What a peer needs to reach this QP. `EINVAL` before the QP is bound to a port (Init).
    pub fn endpoint(&self) -> Result<Endpoint> {
        if self.inner.port == 0 {
            return Err(EINVAL);
        }
        let gid = self.inner.pd.device().find_gid(self.inner.port)?;
        Ok(Endpoint {
            qpn: self.qpn(),
            gid: gid.gid,
            psn: self.inner.sq_psn,
        })
    }

    /// Queries the state the device has the QP in (`ib_query_qp`). May sleep.
    pub fn query_state(&self) -> Result<QpState> {
        // SAFETY: All-zeroes is a valid value of both plain C structs, which are written only.
        let (mut attr, mut init): (bindings::ib_qp_attr, bindings::ib_qp_init_attr) =
            unsafe { (core::mem::zeroed(), core::mem::zeroed()) };
        // SAFETY: `ptr` is valid (invariant) and both out-parameters are writable.
        to_result(unsafe {
            bindings::ib_query_qp(
                self.inner.ptr,
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as i32,
                &mut init,
            )
        })?;
        Ok(match attr.qp_state {
            bindings::ib_qp_state_IB_QPS_RESET => QpState::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => QpState::Init,
            bindings::ib_qp_state_IB_QPS_RTR => QpState::Rtr,
            bindings::ib_qp_state_IB_QPS_RTS => QpState::Rts,
            bindings::ib_qp_state_IB_QPS_SQD => QpState::Sqd,
            bindings::ib_qp_state_IB_QPS_SQE => QpState::Sqe,
            _ => QpState::Err,
        })
    }

    /// Moves the QP to the error state: every outstanding request completes with
    /// [`WcStatus::WrFlushErr`](super::cq::WcStatus::WrFlushErr) and goes back to its owner.
    pub fn set_error(&self) -> Result {
        self.inner.set_error()
    }

    /// Stops the QP for good and waits until every posted request has come back to its owner
    /// (`ib_drain_qp`); posts fail with `ESHUTDOWN` from now on. Sleeps: process context only,
    /// never from a completion handler. Idempotent; dropping the QP does it too.
    pub fn drain(&self) {
        self.inner.drain();
    }

    /// Stops the QP (it moves to the error state; posts fail with `ESHUTDOWN`) and waits until
    /// every send request has come back to its owner (`ib_drain_sq`). Receives still
    /// outstanding complete, flushed, on their own. Sleeps: process context only.
    pub fn drain_sq(&self) {
        self.inner.drain_one(Queue::Send);
    }

    /// Stops the QP (it moves to the error state; posts fail with `ESHUTDOWN`) and waits until
    /// every receive request has come back to its owner (`ib_drain_rq`). Sleeps: process
    /// context only. `EINVAL` for a QP that takes its receives from an SRQ, whose receives
    /// are not the QP's to drain.
    pub fn drain_rq(&self) -> Result {
        if self.inner.srq.is_some() {
            return Err(EINVAL);
        }
        self.inner.drain_one(Queue::Recv);
        Ok(())
    }
}

impl<S: CanRecv> Qp<S> {
    /// Posts a receive (`ib_post_recv`). `build` names its buffers, which must be inside `T`.
    ///
    /// On failure the request comes back in the [`PostError`]: `ENOMEM` when `recv_depth`
    /// receives are outstanding, `EINVAL` for an empty scatter list, more entries than the
    /// QP takes, or a QP that takes its receives from an SRQ, `ESHUTDOWN` once the QP is
    /// drained. Any context.
    pub fn post_recv<T: Completion>(
        &self,
        wr: Wr<T>,
        build: impl for<'a> FnOnce(&'a T, &mut RecvOps<'a>) -> Result,
    ) -> Result<(), PostError<T>> {
        let inner = &self.inner;
        let _guard = match inner.enter() {
            Ok(g) => g,
            Err(err) => return Err(PostError { err, wr }),
        };
        let mut p = wr.start(Queue::Recv);
        let mut ops = RecvOps::new();
        // SAFETY: The reference is used only by `build`, which records DMA addresses.
        let built = build(unsafe { p.data() }, &mut ops);
        let checked = built.and_then(|()| {
            if inner.srq.is_some() || ops.n == 0 || ops.n as u32 > inner.caps.recv_sge {
                return Err(EINVAL);
            }
            reserve(&inner.shared.rq_used, 1, inner.caps.recv_depth)
        });
        if let Err(err) = checked {
            return Err(PostError {
                err,
                wr: p.cancel(),
            });
        }
        p.set_slots(1);
        let rwr = bindings::ib_recv_wr {
            next: core::ptr::null_mut(),
            __bindgen_anon_1: bindings::ib_recv_wr__bindgen_ty_1 { wr_cqe: p.cqe() },
            sg_list: ops.sges.as_mut_ptr(),
            num_sge: ops.n as i32,
        };
        // SAFETY: `ptr` is valid; `rwr` and its scatter list are valid for the call (the driver
        // copies them); the buffers belong to the request, which the device owns from now on.
        let ret = unsafe { bindings::ib_post_recv(inner.ptr, &rwr, core::ptr::null_mut()) };
        if ret != 0 {
            inner.shared.rq_used.fetch_sub(1, Ordering::AcqRel);
            return Err(PostError {
                err: Error::from_errno(ret),
                wr: p.cancel(),
            });
        }
        p.posted();
        inner.shared.posted.store(true, Ordering::Release);
        Ok(())
    }
}

impl Qp<Rts> {
    /// Posts the operations `build` adds, chained, as one send request (`ib_post_send`).
    ///
    /// The operations may name only buffers inside `T` (and `'static` ones); the request owns
    /// them until its completion. Only the last operation is signaled.
    ///
    /// On failure the request comes back in the [`PostError`]: `ENOMEM` when the operations do
    /// not fit in the free send slots, `EINVAL` for no operation, an inline send longer than the
    /// QP's `max_inline`, or an operation the transport does not have (RDMA or atomics on UD,
    /// UD sends on RC), `ESHUTDOWN` once the QP is drained. Any context.
    pub fn post_send<T: Completion>(
        &self,
        wr: Wr<T>,
        build: impl for<'a> FnOnce(&'a T, &mut SendOps<'a>) -> Result,
    ) -> Result<(), PostError<T>> {
        let inner = &self.inner;
        let _guard = match inner.enter() {
            Ok(g) => g,
            Err(err) => return Err(PostError { err, wr }),
        };
        let mut p = wr.start(Queue::Send);
        let mut ops = SendOps::new();
        // SAFETY: The reference is used only by `build`, which records DMA addresses and
        // raw pointers to objects owned by the request.
        let built = build(unsafe { p.data() }, &mut ops);
        let n = ops.n;
        let checked = built.and_then(|()| {
            let ud = inner.qp_type == QpType::Ud;
            let valid = n > 0
                && ops.inline_len[..n]
                    .iter()
                    .all(|&l| l <= inner.caps.max_inline)
                && if ud { ops.ud_ops == n } else { ops.ud_ops == 0 };
            if !valid {
                return Err(EINVAL);
            }
            reserve(&inner.shared.sq_used, n as u32, inner.caps.send_depth)
        });
        if let Err(err) = checked {
            return Err(PostError {
                err,
                wr: p.cancel(),
            });
        }
        p.set_slots(n as u32);
        let head = ops.link(p.cqe());
        let mut bad: *const bindings::ib_send_wr = core::ptr::null();
        // SAFETY: `ptr` is valid; the list and its SGEs live in `ops` for the call (the driver
        // copies them); the buffers belong to the request, which the device owns from now on.
        let ret = unsafe { bindings::ib_post_send(inner.ptr, head, &mut bad) };
        if ret != 0 {
            if bad == head {
                inner.shared.sq_used.fetch_sub(n as u32, Ordering::AcqRel);
                return Err(PostError {
                    err: Error::from_errno(ret),
                    wr: p.cancel(),
                });
            }
            // Part of the chain is on the device and names the request's buffers: they must
            // stay allocated, so the request is leaked (never freed). The checks above make
            // this a driver failure; the QP is moved to error so that what was posted stops.
            crate::pr_err!(
                "kernel::rdma: QP {}: partial post ({}); request leaked\n",
                self.qpn(),
                ret
            );
            let _ = self.set_error();
            return Ok(());
        }
        p.posted();
        inner.shared.posted.store(true, Ordering::Release);
        Ok(())
    }
}

impl QpInner {
    fn modify(&mut self, attr: &mut bindings::ib_qp_attr, mask: u32) -> Result {
        // SAFETY: `ptr` is valid (invariant) and `attr` holds valid values for `mask`.
        to_result(unsafe { bindings::ib_modify_qp(self.ptr, attr, mask as i32) })
    }

    /// Moves the QP to the error state, flushing every outstanding request.
    fn set_error(&self) -> Result {
        // SAFETY: All-zeroes is a valid `ib_qp_attr`; only masked fields are read.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = bindings::ib_qp_state_IB_QPS_ERR;
        // SAFETY: `ptr` is valid (invariant); `attr` is valid for the mask.
        to_result(unsafe {
            bindings::ib_modify_qp(
                self.ptr,
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as i32,
            )
        })
    }

    fn enter(&self) -> Result<PostTicket<'_>> {
        self.shared.gate.enter()
    }

    /// Stops posting: posts fail with `ESHUTDOWN` from now on. Posts that started before
    /// finish before it returns, so a drain marker posted afterwards comes after them.
    fn stop_posting(&self) {
        self.shared.gate.close();
    }

    fn drain_one(&self, queue: Queue) {
        self.stop_posting();
        if !self.shared.posted.load(Ordering::Acquire) {
            return;
        }
        match (self.qp_type, queue) {
            // SAFETY: `ptr` is valid; its CQs are allocated with `ib_alloc_cq` and one slot of
            // the send queue was kept free for the drain marker.
            (QpType::Rc, Queue::Send) => unsafe { bindings::ib_drain_sq(self.ptr) },
            // SAFETY: As above, for the receive queue (not an SRQ's: checked by the caller).
            (QpType::Rc, Queue::Recv) => unsafe { bindings::ib_drain_rq(self.ptr) },
            _ => self.drain_by_flush(),
        }
    }

    fn drain(&self) {
        self.stop_posting();
        if self.shared.posted.load(Ordering::Acquire)
            && !self.shared.drained.swap(true, Ordering::AcqRel)
        {
            match self.qp_type {
                // SAFETY: `ptr` is valid; its CQs are allocated with `ib_alloc_cq` and one slot
                // of each queue was kept free for the drain markers.
                QpType::Rc => unsafe { bindings::ib_drain_qp(self.ptr) },
                QpType::Ud => self.drain_by_flush(),
            }
        }
    }

    /// Drains a UD QP: `ib_drain_sq` posts an RDMA WRITE marker, which a UD QP refuses, so the
    /// QP is moved to the error state and the requests this module counts are waited for.
    fn drain_by_flush(&self) {
        if let Err(e) = self.set_error() {
            crate::pr_err!(
                "kernel::rdma: cannot move UD QP to error for drain: {:?}\n",
                e
            );
            return;
        }
        // Flushes take microseconds; give up (leaking what is still posted) after 10 s.
        for _ in 0..10_000 {
            if self.shared.sq_used.load(Ordering::Acquire) == 0
                && self.shared.rq_used.load(Ordering::Acquire) == 0
            {
                // A request's slot is given back before its handler runs: wait for handlers
                // still running, so that none holds a reference past the drain (the last
                // reference to the QP must not go in a handler).
                for cq in [&self.send_cq, &self.recv_cq] {
                    // SAFETY: The CQ is valid (held by the QP); process context (`drain`).
                    unsafe { bindings::rdma_cq_quiesce(cq.as_raw()) };
                }
                return;
            }
            for cq in [&self.send_cq, &self.recv_cq] {
                let _ = cq.poll_direct(64);
            }
            // SAFETY: Process context (checked by `drain`).
            unsafe { bindings::msleep(1) };
        }
        crate::pr_err!("kernel::rdma: UD QP did not drain in 10 s\n");
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        self.drain();
        let qpn = {
            // SAFETY: `ptr` is valid until destroyed below.
            unsafe { (*self.ptr).qp_num }
        };
        if let Some(srq) = &self.srq {
            srq.detach(self.ptr);
        }
        let ret = match &self.cm {
            Some(id) => {
                // SAFETY: As below; the QP is the id's (`rdma_destroy_qp` destroys it and
                // clears it from the id, which `self.cm` keeps alive until after this).
                unsafe { bindings::rdma_destroy_qp(id.id()) };
                0
            }
            // SAFETY: `ptr` is valid (invariant) and drained: no request is outstanding and no
            // completion handler will look at `shared` again (receives from an SRQ complete
            // through the SRQ).
            None => unsafe { bindings::ib_destroy_qp_user(self.ptr, core::ptr::null_mut()) },
        };
        if ret != 0 {
            crate::pr_err!("kernel::rdma: destroying QP {} failed: {}\n", qpn, ret);
        }
        self.send_cq.unreserve(self.caps.send_depth + 1);
        self.recv_cq.unreserve(self.recv_reserved);
        let (sq, rq) = (
            self.shared.sq_used.load(Ordering::Acquire),
            self.shared.rq_used.load(Ordering::Acquire),
        );
        if sq != 0 || rq != 0 {
            crate::pr_err!(
                "kernel::rdma: QP {} destroyed with {} sends and {} receives outstanding\n",
                qpn,
                sq,
                rq
            );
        }
    }
}
