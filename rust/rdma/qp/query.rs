// SPDX-License-Identifier: GPL-2.0

//! What the device reports of a QP (`ib_query_qp`).
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use super::{state::zeroed_attr, Qp, QpState, State};
use crate::{
    bindings,
    error::{to_result, Result},
    rdma::{device::Mtu, mr::Access, sync::sleepable},
};

/// The attributes of a QP as the device has them (`struct ib_qp_attr` and the capabilities of
/// `struct ib_qp_init_attr`), from [`Qp::query`]. Fields that do not apply to the QP's
/// transport or state read as the device reports them (usually zero).
#[derive(Clone, Copy, Debug)]
pub struct QpAttr {
    /// The state.
    pub state: QpState,
    /// The path MTU (RC), `None` before Ready to Receive.
    pub path_mtu: Option<Mtu>,
    /// The packet sequence number of the next request sent.
    pub sq_psn: u32,
    /// The packet sequence number expected next from the peer (RC).
    pub rq_psn: u32,
    /// The peer's QP number (RC).
    pub dest_qpn: u32,
    /// The Q_Key (UD).
    pub qkey: u32,
    /// The local ACK timeout exponent: 4.096 us * 2^timeout (RC; 0 waits for ever).
    pub timeout: u8,
    /// Transport retries before an error (RC).
    pub retry_cnt: u8,
    /// RNR retries before an error (RC; 7 retries for ever).
    pub rnr_retry: u8,
    /// The RNR NAK timer code this QP answers senders with (RC).
    pub min_rnr_timer: u8,
    /// RDMA READs and atomics this QP may have outstanding as initiator (RC).
    pub max_rd_atomic: u8,
    /// RDMA READs and atomics it accepts as responder (RC).
    pub max_dest_rd_atomic: u8,
    /// The remote access the QP grants (RC).
    pub access: Access,
    /// The port the QP is bound to.
    pub port: u32,
    /// The P_Key index.
    pub pkey_index: u16,
    /// Send queue entries the device allocated (including the one kept for the drain marker).
    pub max_send_wr: u32,
    /// Receive queue entries the device allocated (0 with an SRQ).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// The largest inline send.
    pub max_inline_data: u32,
}

impl<S: State> Qp<S> {
    /// Queries every attribute the device has of the QP (`ib_query_qp`). May sleep.
    ///
    /// # Errors
    ///
    /// - `EAGAIN` in atomic context.
    /// - `EOPNOTSUPP` when the device cannot query QPs.
    /// - Otherwise what the driver's `query_qp` returns.
    pub fn query(&self) -> Result<QpAttr> {
        sleepable()?;
        let mut a = zeroed_attr();
        // SAFETY: All-zeroes is a valid value of this plain C struct, which is written only.
        let mut init: bindings::ib_qp_init_attr = unsafe { core::mem::zeroed() };
        let mask = bindings::ib_qp_attr_mask_IB_QP_STATE
            | bindings::ib_qp_attr_mask_IB_QP_PATH_MTU
            | bindings::ib_qp_attr_mask_IB_QP_SQ_PSN
            | bindings::ib_qp_attr_mask_IB_QP_RQ_PSN
            | bindings::ib_qp_attr_mask_IB_QP_DEST_QPN
            | bindings::ib_qp_attr_mask_IB_QP_QKEY
            | bindings::ib_qp_attr_mask_IB_QP_TIMEOUT
            | bindings::ib_qp_attr_mask_IB_QP_RETRY_CNT
            | bindings::ib_qp_attr_mask_IB_QP_RNR_RETRY
            | bindings::ib_qp_attr_mask_IB_QP_MIN_RNR_TIMER
            | bindings::ib_qp_attr_mask_IB_QP_MAX_QP_RD_ATOMIC
            | bindings::ib_qp_attr_mask_IB_QP_MAX_DEST_RD_ATOMIC
            | bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS
            | bindings::ib_qp_attr_mask_IB_QP_PORT
            | bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX
            | bindings::ib_qp_attr_mask_IB_QP_CAP;
        // SAFETY: `ptr` is valid (invariant) and both out-parameters are writable.
        to_result(unsafe {
            bindings::ib_query_qp(self.inner.ptr, &mut a, mask as i32, &mut init)
        })?;
        Ok(QpAttr {
            state: QpState::from_raw(a.qp_state),
            path_mtu: Mtu::from_raw(a.path_mtu),
            sq_psn: a.sq_psn,
            rq_psn: a.rq_psn,
            dest_qpn: a.dest_qp_num,
            qkey: a.qkey,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            min_rnr_timer: a.min_rnr_timer,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            access: Access::from_bits(a.qp_access_flags as u32),
            port: a.port_num,
            pkey_index: a.pkey_index,
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            max_send_sge: init.cap.max_send_sge,
            max_recv_sge: init.cap.max_recv_sge,
            max_inline_data: init.cap.max_inline_data,
        })
    }
}
