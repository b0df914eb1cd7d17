// SPDX-License-Identifier: GPL-2.0

//! Creating a QP (`ib_create_qp`, or through a connection manager id): the checks of its
//! capabilities against the device, the CQ entries it reserves, and what it is given to keep.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{qp_event, CreatedOn, Init, Keep, Qp, QpCaps, QpInner, QpType, Reset, Shared};
use crate::{
    bindings,
    error::{from_err_ptr, Result},
    prelude::*,
    rdma::{
        cq::Cq,
        defer::Deferred,
        pd::{Pd, PdKey},
        srq::Srq,
        sync::sleepable,
    },
    sync::Arc,
};
use core::{mem::ManuallyDrop, sync::atomic::Ordering};

impl Qp<Reset> {
    /// Creates a QP on `pd` reporting to `send_cq` and `recv_cq` (`ib_create_qp`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EINVAL` when a depth is zero or above the device's `max_qp_wr` (less the drain slot
    ///   and the entries of `rdma_ctxs`), an SGE count is zero or above the device's limit (or
    ///   this crate's), `rw_sge` is set without `rdma_ctxs` or above the device's
    ///   `max_send_sge`, `rdma_ctxs` is set without a port of the device, the CQs belong to
    ///   another device, or a CQ has not enough free entries for the queues reporting to it (a
    ///   CQ overrun is fatal).
    /// - `EAGAIN` in atomic context.
    /// - `ENOMEM` when an allocation fails (the core's MR pool for `rdma_ctxs` included).
    /// - `EOPNOTSUPP` on an iWARP device ([`Device::is_rnic`]), whose QPs are made and
    ///   connected by the connection manager ([`CmId::create_qp`]), or when the device cannot
    ///   create kernel QPs.
    /// - Otherwise what the driver's `create_qp` returns.
    ///
    /// [`Device::is_rnic`]: crate::rdma::device::Device::is_rnic
    /// [`CmId::create_qp`]: crate::rdma::cm::CmId::create_qp
    pub fn new(
        pd: &Arc<Pd>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        caps: &QpCaps,
    ) -> Result<Self> {
        sleepable()?;
        check_recv_caps(pd, caps)?;
        let inner = create(
            pd,
            qp_type,
            send_cq,
            recv_cq,
            None,
            caps,
            None,
            create_kernel_qp,
        )?;
        Ok(Qp::wrap(inner))
    }

    /// Creates a QP on `pd` that takes its receives from `srq` (`ib_create_qp` with an SRQ)
    /// and reports its sends to `send_cq` and its receives to the SRQ's CQ. May sleep.
    ///
    /// The QP has no receive queue of its own: `caps.recv_depth` and `caps.recv_sge` are
    /// ignored and [`Qp::post_recv`](Qp::post_recv) fails with `EINVAL`; receives are posted
    /// with [`Srq::post_recv`].
    ///
    /// # Errors
    ///
    /// - `EINVAL` as for [`Qp::new`], or when `srq` is on another PD.
    /// - The others of [`Qp::new`]: `EAGAIN`, `ENOMEM`, `EOPNOTSUPP`, the driver's.
    pub fn new_with_srq(
        pd: &Arc<Pd>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        srq: &Arc<Srq>,
        caps: &QpCaps,
    ) -> Result<Self> {
        sleepable()?;
        let caps = srq_caps(pd, srq, caps)?;
        let inner = create(
            pd,
            qp_type,
            send_cq,
            srq.cq(),
            Some(srq),
            &caps,
            None,
            create_kernel_qp,
        )?;
        Ok(Qp::wrap(inner))
    }
}

/// Where a QP made through a connection manager id takes its receives from.
pub(crate) enum Recv<'a> {
    /// A receive queue of its own, reporting to this CQ.
    Cq(&'a Arc<Cq>),
    /// A shared receive queue (whose CQ its receives report to).
    Srq(&'a Arc<Srq>),
}

impl Qp<Init> {
    /// Creates a QP through `on` (the connection manager): `make` creates it from the filled
    /// in `ib_qp_init_attr` and returns it, in Init (RC) or ready to send (UD) on `port`.
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn create_on(
        on: Arc<dyn CreatedOn>,
        port: u32,
        pd: &Arc<Pd>,
        qp_type: QpType,
        send_cq: &Arc<Cq>,
        recv: Recv<'_>,
        caps: &QpCaps,
        make: impl FnOnce(
            *mut bindings::ib_pd,
            &mut bindings::ib_qp_init_attr,
        ) -> Result<*mut bindings::ib_qp>,
    ) -> Result<Self> {
        let (recv_cq, srq, caps) = match recv {
            Recv::Cq(cq) => {
                check_recv_caps(pd, caps)?;
                (cq, None, *caps)
            }
            Recv::Srq(srq) => (srq.cq(), Some(srq), srq_caps(pd, srq, caps)?),
        };
        let caps = QpCaps { port, ..caps };
        let mut inner = create(pd, qp_type, send_cq, recv_cq, srq, &caps, Some(on), make)?;
        inner.get_mut().set_port(port);
        Ok(Qp::wrap(inner))
    }
}

/// Creates a QP with the verbs (`ib_create_qp_kernel`): what [`create`] makes QPs with unless a
/// connection manager id does.
fn create_kernel_qp(
    pd: *mut bindings::ib_pd,
    init: &mut bindings::ib_qp_init_attr,
) -> Result<*mut bindings::ib_qp> {
    // SAFETY: `create` passes a valid PD and an `init` it filled in completely, naming valid CQs
    // (and SRQ) of the PD's device.
    from_err_ptr(unsafe {
        bindings::ib_create_qp_kernel(pd, init, c"kernel::rdma".as_ptr().cast())
    })
}

/// `caps` for a QP on `srq`, which has no receive queue of its own; `EINVAL` when `srq` is on
/// another PD than `pd`.
fn srq_caps(pd: &Arc<Pd>, srq: &Srq, caps: &QpCaps) -> Result<QpCaps> {
    PdKey::of(pd).check(srq.pd())?;
    Ok(QpCaps {
        recv_depth: 0,
        recv_sge: 0,
        ..*caps
    })
}

/// `EINVAL` unless a queue of `depth` requests (plus the drain slot) of `sge` entries fits
/// the device's `max_qp_wr` and `max_sge`.
fn check_queue(pd: &Pd, depth: u32, sge: u32, max_sge: u32) -> Result {
    if depth == 0 || depth >= pd.device().attrs().max_qp_wr() || sge == 0 || sge > max_sge {
        return Err(EINVAL);
    }
    Ok(())
}

/// `EINVAL` unless `caps` asks for a receive queue the device and this crate can give.
fn check_recv_caps(pd: &Pd, caps: &QpCaps) -> Result {
    let max_sge = pd.device().attrs().max_recv_sge();
    let max_sge = max_sge.min(crate::rdma::dma::MAX_RECV_SGE as u32);
    check_queue(pd, caps.recv_depth, caps.recv_sge, max_sge)
}

/// Creates a QP with `make`, after checking `caps` and reserving its CQ entries; the QP is
/// destroyed (or the reservation given back) on every error.
#[expect(clippy::too_many_arguments)]
fn create(
    pd: &Arc<Pd>,
    qp_type: QpType,
    send_cq: &Arc<Cq>,
    recv_cq: &Arc<Cq>,
    srq: Option<&Arc<Srq>>,
    caps: &QpCaps,
    on: Option<Arc<dyn CreatedOn>>,
    make: impl FnOnce(
        *mut bindings::ib_pd,
        &mut bindings::ib_qp_init_attr,
    ) -> Result<*mut bindings::ib_qp>,
) -> Result<Deferred<QpInner>> {
    // iWARP: RC only, connected by the connection manager alone.
    if pd.device().is_rnic() && (qp_type != QpType::Rc || on.is_none()) {
        return Err(EOPNOTSUPP);
    }
    let attrs = pd.device().attrs();
    let max_send_sge = attrs.max_send_sge().min(crate::rdma::dma::MAX_SGE as u32);
    check_queue(pd, caps.send_depth, caps.send_sge, max_send_sge)?;
    if caps.rw_sge > attrs.max_send_sge() || (caps.rw_sge != 0 && caps.rdma_ctxs == 0) {
        return Err(EINVAL);
    }
    let dev = pd.device().as_raw();
    if send_cq.device().as_raw() != dev || recv_cq.device().as_raw() != dev {
        return Err(EINVAL);
    }
    // A CM id's QP is on the id's port, which `rdma_create_qp` fills in.
    let port = match &on {
        Some(_) => caps.port,
        None if caps.rdma_ctxs == 0 => 0,
        None => {
            if !pd.device().ports().contains(&caps.port) {
                return Err(EINVAL);
            }
            caps.port
        }
    };
    // What `rdma_rw_init_qp` adds to the send queue for `rdma_ctxs`.
    let rw_wqes = if caps.rdma_ctxs == 0 {
        0
    } else {
        // SAFETY: `dev` is valid and `port` one of its ports.
        unsafe { bindings::rdma_rw_max_send_wr(dev, port, caps.rdma_ctxs, 0) }
    };
    let sq_slots = caps.send_depth.checked_add(rw_wqes).ok_or(EINVAL)?;
    if sq_slots >= attrs.max_qp_wr() {
        return Err(EINVAL);
    }
    // With an SRQ, the SRQ holds the receive CQ's entries for all its QPs.
    let recv_reserved = if srq.is_some() {
        0
    } else {
        caps.recv_depth + 1
    };
    let shared = Shared::new(on.clone())?;
    send_cq.reserve(sq_slots + 1)?;
    if let Err(e) = recv_cq.reserve(recv_reserved) {
        send_cq.unreserve(sq_slots + 1);
        return Err(e);
    }
    // SAFETY: All-zeroes is the "nothing requested" value of this plain C struct.
    let mut init: bindings::ib_qp_init_attr = unsafe { core::mem::zeroed() };
    init.qp_context = (&raw const *shared).cast_mut().cast();
    init.event_handler = Some(qp_event);
    init.send_cq = send_cq.as_raw();
    init.recv_cq = recv_cq.as_raw();
    init.cap.max_send_wr = caps.send_depth + 1;
    init.cap.max_recv_wr = recv_reserved;
    // The core's R/W contexts size their operations by the QP's `max_send_sge`; the
    // crate's own operations stay within `send_sge` (checked when posted).
    init.cap.max_send_sge = caps.send_sge.max(caps.rw_sge);
    init.cap.max_recv_sge = caps.recv_sge;
    init.cap.max_inline_data = caps.max_inline;
    init.cap.max_rdma_ctxs = caps.rdma_ctxs;
    init.port_num = port;
    init.sq_sig_type = bindings::ib_sig_type_IB_SIGNAL_REQ_WR;
    init.srq = srq.map_or(core::ptr::null_mut(), |s| s.as_raw());
    init.qp_type = match qp_type {
        QpType::Rc => bindings::ib_qp_type_IB_QPT_RC,
        QpType::Ud => bindings::ib_qp_type_IB_QPT_UD,
    };
    // `shared` outlives the QP: it is freed only after the QP is destroyed.
    let ptr = match make(pd.as_raw(), &mut init) {
        Ok(p) => p,
        Err(e) => {
            send_cq.unreserve(sq_slots + 1);
            recv_cq.unreserve(recv_reserved);
            return Err(e);
        }
    };
    let mut caps = *caps;
    // The driver may round the inline size up; it reports what it gave.
    caps.max_inline = init.cap.max_inline_data;
    // SAFETY: `get_random_u32` has no preconditions.
    let sq_psn = unsafe { bindings::get_random_u32() } & 0xff_ffff;
    // INVARIANT: Just created as described, with the CQ entries reserved above. From here on,
    // dropping `inner` destroys the QP and gives the entries back.
    let inner = Deferred::new(QpInner {
        ptr,
        qp_type,
        caps,
        port: 0,
        iwarp: false,
        sq_psn,
        sq_slots,
        recv_reserved,
        keep: ManuallyDrop::new(Keep {
            shared,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            srq: srq.cloned(),
            pd: pd.clone(),
            on,
        }),
    })?;
    // The QP lives in the `Deferred` box: its address is fixed until it is torn down.
    inner
        .shared()
        .inner
        .store((&raw const *inner).cast_mut(), Ordering::Release);
    if let Some(srq) = srq {
        // SAFETY: `ptr` is valid; `qp_num` is fixed at creation.
        let qpn = unsafe { (*ptr).qp_num };
        srq.attach(ptr, qpn)?;
    }
    Ok(inner)
}
