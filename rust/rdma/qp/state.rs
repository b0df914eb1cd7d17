// SPDX-License-Identifier: GPL-2.0

//! QP state transitions (`ib_modify_qp`, `ib_query_qp`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)
//!
//! Each transition consumes a [`Qp`] in one state and returns it in the next, with the
//! attributes that step needs. QPs created on a connection manager id are moved by the CM
//! instead: their transitions here fail with `EINVAL`, and [`Qp::established`] checks that the
//! CM has made one ready to send.

use super::{Cm, Endpoint, Init, Qp, QpInner, QpType, Reset, Rtr, Rts, State};
use crate::{
    bindings,
    error::{code::*, to_result, Result},
    rdma::{
        addr::resolve_dmac,
        device::{LinkLayer, Mtu},
        mr::Access,
        sync::sleepable,
    },
};

/// Connection parameters of an RC QP, with the usual defaults.
#[derive(Clone, Copy, Debug)]
pub struct RcParams {
    /// Path MTU; `None` uses the port's active MTU.
    pub path_mtu: Option<Mtu>,
    /// Outstanding RDMA READs/atomics, as initiator and as target (capped by the device).
    pub max_rd_atomic: u8,
    /// Minimum RNR NAK timer (IB encoding; 12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Local ACK timeout (4.096 us * 2^timeout). The default, 17 (537 ms), is what rdma_cm
    /// gives RoCE connections (its packet lifetime, 16, plus one): a shorter one makes
    /// soft-RoCE on a loaded host retransmit multi-packet WRITEs whose first copy is still
    /// on its way, which its responder can answer with a remote invalid request error.
    pub timeout: u8,
    /// Transport retries. The default, 6, bounds how long a request to a dead peer takes to
    /// fail: 7 tries of `timeout` each (3.8 s with the default timeout), then
    /// `RetryExcErr`. The IB maximum, 7, is read as "for ever" by soft-RoCE (as 7 RNR retries
    /// are everywhere), so a ULP using it there never learns that its peer is gone.
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
            timeout: 17,
            retry_cnt: 6,
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

impl QpState {
    pub(crate) fn from_raw(s: bindings::ib_qp_state) -> Self {
        match s {
            bindings::ib_qp_state_IB_QPS_RESET => QpState::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => QpState::Init,
            bindings::ib_qp_state_IB_QPS_RTR => QpState::Rtr,
            bindings::ib_qp_state_IB_QPS_RTS => QpState::Rts,
            bindings::ib_qp_state_IB_QPS_SQD => QpState::Sqd,
            bindings::ib_qp_state_IB_QPS_SQE => QpState::Sqe,
            _ => QpState::Err,
        }
    }
}

/// An all-zero `ib_qp_attr`, in which only the fields a mask names are read.
pub(super) fn zeroed_attr() -> bindings::ib_qp_attr {
    // SAFETY: All-zeroes is a valid `ib_qp_attr` (plain C data).
    unsafe { core::mem::zeroed() }
}

impl QpInner {
    fn modify(&self, attr: &mut bindings::ib_qp_attr, mask: u32) -> Result {
        // SAFETY: `ptr` is valid (invariant) and `attr` holds valid values for `mask`.
        to_result(unsafe { bindings::ib_modify_qp(self.ptr, attr, mask as i32) })
    }

    /// Moves the QP to the error state, flushing every outstanding request. May sleep.
    pub(crate) fn set_error(&self) -> Result {
        let mut attr = zeroed_attr();
        attr.qp_state = bindings::ib_qp_state_IB_QPS_ERR;
        self.modify(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE)
    }

    /// `EINVAL` for a QP whose transitions the connection manager makes.
    fn check_manual(&self) -> Result {
        if self.created_on() {
            Err(EINVAL)
        } else {
            Ok(())
        }
    }
}

impl Qp<Reset> {
    /// Moves an RC QP to Init on `port`, granting peers `access` to this QP's memory
    /// (`ib_modify_qp`). May sleep.
    ///
    /// # Errors
    ///
    /// The transition consumes the QP: on any error it is dropped (destroyed).
    ///
    /// - `EINVAL` for a UD QP, a QP created on a connection manager id (the CM moves it), a
    ///   port outside the device, or another port than [`QpCaps::port`](super::QpCaps::port)
    ///   when the QP was made for `rdma_ctxs`.
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what `ib_modify_qp` answers (the driver's `modify_qp`).
    pub fn to_init(self, port: u32, access: Access) -> Result<Qp<Init>> {
        if self.inner.qp_type != QpType::Rc {
            return Err(EINVAL);
        }
        self.init_common(port, |attr, mask| {
            attr.qp_access_flags = access.bits() as i32;
            *mask |= bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS;
        })
    }

    /// Moves a UD QP to Init on `port`, accepting datagrams sent with `qkey`. May sleep.
    ///
    /// # Errors
    ///
    /// The transition consumes the QP: on any error it is dropped (destroyed).
    ///
    /// - `EINVAL` for an RC QP, a QP created on a connection manager id, or a port outside
    ///   the device.
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what `ib_modify_qp` answers.
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
        sleepable()?;
        self.inner.check_manual()?;
        let caps = &self.inner.caps;
        // The core sized the QP's rdma_rw resources for the port it was created for.
        if !self.pd().device().ports().contains(&port) || (caps.rdma_ctxs > 0 && caps.port != port)
        {
            return Err(EINVAL);
        }
        let mut attr = zeroed_attr();
        attr.qp_state = bindings::ib_qp_state_IB_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = port;
        let mut mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX
            | bindings::ib_qp_attr_mask_IB_QP_PORT;
        f(&mut attr, &mut mask);
        self.inner.modify(&mut attr, mask)?;
        self.inner.get_mut().set_port(port);
        Ok(self.into_state())
    }
}

impl Qp<Init> {
    /// Moves an RC QP to Ready to Receive, connected to `peer` (`ib_modify_qp` with an address
    /// vector; the peer's MAC is resolved here first). Sleeps.
    ///
    /// # Errors
    ///
    /// The transition consumes the QP: on any error it is dropped (destroyed).
    ///
    /// - `EINVAL` for a UD QP or a QP created on a connection manager id, or when no path MTU
    ///   is given and the port reports none.
    /// - `EOPNOTSUPP` on a port that is not RoCE (InfiniBand needs LIDs from a subnet manager).
    /// - `EAGAIN` in atomic context.
    /// - `ENOENT` when the port has no valid GID to send from.
    /// - `ETIMEDOUT` when the peer's neighbour entry does not resolve within two seconds, or
    ///   what the route lookup answers (`ENETUNREACH`, for instance).
    /// - Otherwise what querying the port or `ib_modify_qp` answers.
    pub fn to_rtr(self, peer: &Endpoint, p: &RcParams) -> Result<Qp<Rtr>> {
        if self.inner.qp_type != QpType::Rc {
            return Err(EINVAL);
        }
        sleepable()?;
        self.inner.check_manual()?;
        let dev = self.pd().device();
        let port = self.inner.port;
        if dev.link_layer(port)? != LinkLayer::Ethernet {
            return Err(EOPNOTSUPP);
        }
        let mtu = match p.path_mtu {
            Some(m) => m,
            None => dev.query_port(port)?.active_mtu().ok_or(EINVAL)?,
        };
        let sgid = dev.preferred_gid(port)?;
        let rd_atomic = u32::from(p.max_rd_atomic)
            .min(dev.attrs().max_qp_rd_atom())
            .max(1);
        let mut attr = zeroed_attr();
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
        attr.ah_attr.grh.sgid_index = u8::try_from(sgid.index).map_err(|_| EINVAL)?;
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
        self.inner.modify(&mut attr, mask)?;
        Ok(self.into_state())
    }

    /// RC: [`Qp::to_rtr`] then [`Qp::to_rts`]. Sleeps.
    ///
    /// # Errors
    ///
    /// Those of [`Qp::to_rtr`] and [`Qp::to_rts`]; the QP is dropped with the error.
    pub fn connect(self, peer: &Endpoint, p: &RcParams) -> Result<Qp<Rts>> {
        self.to_rtr(peer, p)?.to_rts(p)
    }

    /// UD: moves the QP through Ready to Receive to Ready to Send. May sleep.
    ///
    /// # Errors
    ///
    /// The transition consumes the QP: on any error it is dropped (destroyed).
    ///
    /// - `EINVAL` for an RC QP or a QP created on a connection manager id.
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what `ib_modify_qp` answers.
    pub fn ready_ud(self) -> Result<Qp<Rts>> {
        if self.inner.qp_type != QpType::Ud {
            return Err(EINVAL);
        }
        sleepable()?;
        self.inner.check_manual()?;
        let mut attr = zeroed_attr();
        attr.qp_state = bindings::ib_qp_state_IB_QPS_RTR;
        self.inner
            .modify(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE)?;
        attr.qp_state = bindings::ib_qp_state_IB_QPS_RTS;
        attr.sq_psn = self.inner.sq_psn;
        self.inner.modify(
            &mut attr,
            bindings::ib_qp_attr_mask_IB_QP_STATE | bindings::ib_qp_attr_mask_IB_QP_SQ_PSN,
        )?;
        Ok(self.into_state())
    }

    /// A QP created on a CM id, once the CM has made it ready to send: after
    /// [`Event::Established`](crate::rdma::cm::Event::Established) for RC (the CM moves it
    /// through Ready to Receive on connect or accept), at once for UD. Queries the QP's state
    /// (may sleep).
    ///
    /// # Errors
    ///
    /// The QP is dropped with the error:
    ///
    /// - `EINVAL` for a QP not created on a CM id, or not yet ready to send.
    /// - What [`Qp::query`] answers (`EAGAIN` in atomic context, ...).
    pub fn established(self) -> Result<Qp<Rts>> {
        if !self.inner.created_on() || self.query_state()? != QpState::Rts {
            return Err(EINVAL);
        }
        Ok(self.into_state())
    }

    /// Hands the QP's states to the connection manager for good, so that it can be shared
    /// (in an `Arc`) before the connection is established: by the receives a server posts
    /// before `rdma_accept`, whose completions then post on it, sends included ([`Cm`]).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a QP not created on a CM id (it is dropped).
    pub fn managed(self) -> Result<Qp<Cm>> {
        if !self.inner.created_on() {
            return Err(EINVAL);
        }
        Ok(self.into_state())
    }
}

impl Qp<Rtr> {
    /// Moves an RC QP to Ready to Send (`ib_modify_qp`). May sleep.
    ///
    /// # Errors
    ///
    /// The transition consumes the QP: on any error it is dropped (destroyed).
    ///
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what `ib_modify_qp` answers.
    pub fn to_rts(self, p: &RcParams) -> Result<Qp<Rts>> {
        sleepable()?;
        let dev = self.pd().device();
        let rd_atomic = u32::from(p.max_rd_atomic)
            .min(dev.attrs().max_qp_init_rd_atom())
            .max(1);
        let mut attr = zeroed_attr();
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
    /// Queries the state the device has the QP in (`ib_query_qp`). May sleep.
    ///
    /// # Errors
    ///
    /// Those of [`Qp::query`].
    pub fn query_state(&self) -> Result<QpState> {
        Ok(self.query()?.state)
    }

    /// Moves the QP to the error state: every outstanding request completes with
    /// [`WcStatus::WrFlushErr`](crate::rdma::cq::WcStatus::WrFlushErr) and goes back to its
    /// owner. Sleeps.
    ///
    /// # Errors
    ///
    /// - `EAGAIN` in atomic context.
    /// - Otherwise what `ib_modify_qp` answers.
    pub fn set_error(&self) -> Result {
        sleepable()?;
        self.inner.set_error()
    }
}
