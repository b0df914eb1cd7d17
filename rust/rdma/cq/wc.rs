// SPDX-License-Identifier: GPL-2.0

//! Work completions (`struct ib_wc`): what a completed work request reports to its owner.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h)

use crate::bindings;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

/// The status of a work completion (`enum ib_wc_status`).
///
/// # Examples
///
/// A handler tells a flushed request (its QP was stopped) from a real failure:
///
/// ```
/// use kernel::rdma::cq::WcStatus;
///
/// fn retry_worth(s: WcStatus) -> bool {
///     !matches!(s, WcStatus::Success | WcStatus::WrFlushErr)
/// }
/// assert!(retry_worth(WcStatus::RnrRetryExcErr));
/// assert!(!retry_worth(WcStatus::WrFlushErr));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// Local length error: a receive buffer too small for the message, for instance.
    LocLenErr,
    /// Local QP operation error.
    LocQpOpErr,
    /// Local protection error: an lkey or SGE that does not cover the buffer.
    LocProtErr,
    /// The QP went to the error state and the request was flushed without being executed.
    WrFlushErr,
    /// Bad response from the responder.
    BadRespErr,
    /// Local access error.
    LocAccessErr,
    /// Remote invalid request error.
    RemInvReqErr,
    /// Remote access error: a wrong rkey, address or access right at the responder.
    RemAccessErr,
    /// Remote operation error.
    RemOpErr,
    /// Transport retries exhausted: the peer did not answer.
    RetryExcErr,
    /// RNR retries exhausted: the peer had no receive posted.
    RnrRetryExcErr,
    /// Another status (its `enum ib_wc_status` value).
    Other(u32),
}

impl WcStatus {
    fn from_raw(s: bindings::ib_wc_status) -> Self {
        match s {
            bindings::ib_wc_status_IB_WC_SUCCESS => Self::Success,
            bindings::ib_wc_status_IB_WC_LOC_LEN_ERR => Self::LocLenErr,
            bindings::ib_wc_status_IB_WC_LOC_QP_OP_ERR => Self::LocQpOpErr,
            bindings::ib_wc_status_IB_WC_LOC_PROT_ERR => Self::LocProtErr,
            bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR => Self::WrFlushErr,
            bindings::ib_wc_status_IB_WC_BAD_RESP_ERR => Self::BadRespErr,
            bindings::ib_wc_status_IB_WC_LOC_ACCESS_ERR => Self::LocAccessErr,
            bindings::ib_wc_status_IB_WC_REM_INV_REQ_ERR => Self::RemInvReqErr,
            bindings::ib_wc_status_IB_WC_REM_ACCESS_ERR => Self::RemAccessErr,
            bindings::ib_wc_status_IB_WC_REM_OP_ERR => Self::RemOpErr,
            bindings::ib_wc_status_IB_WC_RETRY_EXC_ERR => Self::RetryExcErr,
            bindings::ib_wc_status_IB_WC_RNR_RETRY_EXC_ERR => Self::RnrRetryExcErr,
            other => Self::Other(other),
        }
    }
}

/// The kind of work that completed (`enum ib_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A SEND (with or without immediate data).
    Send,
    /// An RDMA WRITE (with or without immediate data).
    RdmaWrite,
    /// An RDMA READ.
    RdmaRead,
    /// An atomic compare-and-swap.
    CompSwap,
    /// An atomic fetch-and-add.
    FetchAdd,
    /// A local invalidate.
    LocalInv,
    /// A fast memory registration.
    RegMr,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by an RDMA WRITE with immediate data.
    RecvRdmaWithImm,
    /// Another opcode (its `enum ib_wc_opcode` value).
    Other(u32),
}

impl WcOpcode {
    fn from_raw(o: bindings::ib_wc_opcode) -> Self {
        match o {
            bindings::ib_wc_opcode_IB_WC_SEND => Self::Send,
            bindings::ib_wc_opcode_IB_WC_RDMA_WRITE => Self::RdmaWrite,
            bindings::ib_wc_opcode_IB_WC_RDMA_READ => Self::RdmaRead,
            bindings::ib_wc_opcode_IB_WC_COMP_SWAP => Self::CompSwap,
            bindings::ib_wc_opcode_IB_WC_FETCH_ADD => Self::FetchAdd,
            bindings::ib_wc_opcode_IB_WC_LOCAL_INV => Self::LocalInv,
            bindings::ib_wc_opcode_IB_WC_REG_MR => Self::RegMr,
            bindings::ib_wc_opcode_IB_WC_RECV => Self::Recv,
            bindings::ib_wc_opcode_IB_WC_RECV_RDMA_WITH_IMM => Self::RecvRdmaWithImm,
            other => Self::Other(other),
        }
    }
}

/// A work completion, as handed to [`Completion::done`](crate::rdma::wr::Completion::done).
///
/// Only `status` and (for the requests that carry them) the fields of a successful completion
/// are meaningful; for an error completion the other fields are undefined, and the accessors
/// say so by returning `None` or zero.
#[derive(Clone, Copy)]
pub struct Wc {
    raw: bindings::ib_wc,
    qp_num: u32,
    /// The device of the CQ, as an address (never dereferenced): which device an
    /// [`Invalidation`] comes from.
    dev: usize,
    /// The registration clock when the completion was dispatched: an [`Invalidation`] it
    /// reports concerns only registrations posted before.
    seen: u64,
}

// SAFETY: A `Wc` is a copy of a completion's fields; the pointers among them (the request's
// `ib_cqe`, the QP) are never dereferenced through it.
unsafe impl Send for Wc {}
// SAFETY: As for `Send`: `&Wc` only reads copied values.
unsafe impl Sync for Wc {}

impl Wc {
    /// A completion as the core dispatched it, with the number of the QP it belongs to (read
    /// while that QP was known to be alive; 0 when it was not).
    #[inline]
    pub(crate) fn new(raw: &bindings::ib_wc, qp_num: u32, dev: *const bindings::ib_device) -> Self {
        Self {
            raw: *raw,
            qp_num,
            dev: dev as usize,
            seen: REGISTRATIONS.load(Ordering::Acquire),
        }
    }

    /// The completion as the C API has it (its pointers are not to be dereferenced).
    pub(crate) fn as_raw(&self) -> &bindings::ib_wc {
        &self.raw
    }

    /// A flush completion for a request that kernel::rdma hands back itself ([`Orphan`](super::Orphan)).
    pub(crate) fn flushed() -> Self {
        // SAFETY: All-zeroes is a valid `ib_wc` (null pointers, zero fields).
        let mut raw: bindings::ib_wc = unsafe { core::mem::zeroed() };
        raw.status = bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR;
        Self {
            raw,
            qp_num: 0,
            dev: 0,
            seen: 0,
        }
    }

    /// The completion of a send request one of whose unsignaled operations failed `first`
    /// (an `ib_wc_status` and vendor error, as [`Wr`](crate::rdma::wr::Wr) records them; 0:
    /// none failed): it reports that failure, the cause, rather than its own status (most
    /// often the flush the failure led to).
    #[inline]
    pub(crate) fn failed_before(mut self, first: u64) -> Self {
        if first != 0 {
            self.raw.status = first as u32;
            self.raw.vendor_err = (first >> 32) as u32;
        }
        self
    }

    /// The status of the completion. For a send request of several operations, that of the
    /// first that failed: an unsignaled operation's error, which moves a connected QP to the
    /// error state, is reported by the request's completion instead of the flush (or error)
    /// of its last operation that follows.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.raw.status)
    }

    /// Whether the work request succeeded.
    #[inline]
    pub fn is_ok(&self) -> bool {
        self.raw.status == bindings::ib_wc_status_IB_WC_SUCCESS
    }

    /// What completed; `None` for an error completion, where the opcode is undefined.
    #[inline]
    pub fn opcode(&self) -> Option<WcOpcode> {
        self.is_ok().then(|| WcOpcode::from_raw(self.raw.opcode))
    }

    /// Bytes received (receive completions) or transferred (RDMA READ); 0 on error.
    #[inline]
    pub fn byte_len(&self) -> u32 {
        if self.is_ok() {
            self.raw.byte_len
        } else {
            0
        }
    }

    /// The immediate data of a SEND or RDMA WRITE with immediate, in host byte order.
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        let with_imm = self.raw.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_IMM as i32 != 0;
        // SAFETY: With `IB_WC_WITH_IMM` set, the `ex` union holds `imm_data`.
        (self.is_ok() && with_imm).then(|| u32::from_be(unsafe { self.raw.ex.imm_data }))
    }

    /// The rkey that the sender of a SEND with invalidate revoked, on a receive completion: the
    /// local MR with that rkey no longer grants access (see
    /// [`Region::invalidated_by`](crate::rdma::mr::Region::invalidated_by)).
    #[inline]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        let inv = self.raw.wc_flags & bindings::ib_wc_flags_IB_WC_WITH_INVALIDATE as i32 != 0;
        if !(self.is_ok() && inv) {
            return None;
        }
        // SAFETY: With `IB_WC_WITH_INVALIDATE` set, the `ex` union holds `invalidate_rkey`.
        Some(unsafe { self.raw.ex.invalidate_rkey })
    }

    /// The peer's remote invalidation this receive completion reports, as a value the owner of
    /// the MR can keep until it has the MR in hand again
    /// ([`Region::apply_invalidation`](crate::rdma::mr::Region::apply_invalidation)). It
    /// carries the moment the completion was dispatched, not the moment of this call: a `Wc`
    /// kept across later registrations revokes none of them.
    #[inline]
    pub fn invalidation(&self) -> Option<Invalidation> {
        self.invalidated_rkey().map(|rkey| Invalidation {
            rkey,
            dev: self.dev,
            seen: self.seen,
        })
    }

    /// Whether a UD receive buffer starts with the 40-byte GRH (always on RoCE).
    pub fn has_grh(&self) -> bool {
        self.is_ok() && self.raw.wc_flags & bindings::ib_wc_flags_IB_WC_GRH as i32 != 0
    }

    /// The sending QP of a UD receive.
    pub fn src_qp(&self) -> Option<u32> {
        self.is_ok().then_some(self.raw.src_qp)
    }

    /// The vendor error syndrome of an error completion.
    pub fn vendor_err(&self) -> u32 {
        self.raw.vendor_err
    }

    /// The number of the QP the work request was posted on, or (for a receive taken from an
    /// [`Srq`](crate::rdma::srq::Srq)) that consumed it; 0 when that QP was already destroyed, or for
    /// a request that kernel::rdma flushed itself (a receive left on a destroyed SRQ, a request
    /// the driver took only part of).
    #[inline]
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }
}

impl fmt::Debug for Wc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wc")
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("qp_num", &self.qp_num())
            .finish()
    }
}

/// Registrations of memory regions posted so far, over all devices: a clock that orders an
/// [`Invalidation`] with the registrations it may concern.
static REGISTRATIONS: AtomicU64 = AtomicU64::new(0);

/// Stamps a registration being posted: the value an [`Invalidation`] must have seen for it.
pub(crate) fn next_registration() -> u64 {
    REGISTRATIONS.fetch_add(1, Ordering::AcqRel) + 1
}

/// A remote invalidation (SEND with invalidate) that a receive completion reported
/// ([`Wc::invalidation`]). Only a completion makes one: it proves that the peer revoked
/// `rkey` on that completion's device, at that moment. A storage initiator whose response can
/// arrive before its command's SEND has come back (with the MR inside it) keeps this until
/// then. The MR takes it only if it is for the MR's device and current rkey and was seen
/// after the MR's latest registration was posted: a kept one never revokes a later
/// registration, even once the 8-bit key has come round.
#[derive(Debug, PartialEq, Eq)]
pub struct Invalidation {
    rkey: u32,
    dev: usize,
    /// The registration clock when the completion was dispatched.
    seen: u64,
}

impl Invalidation {
    /// The rkey the peer revoked.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Whether this revokes a registration with `rkey`, on the device at `dev`, posted when
    /// the registration clock read `stamp`.
    pub(crate) fn revokes(&self, rkey: u32, dev: *const bindings::ib_device, stamp: u64) -> bool {
        self.rkey == rkey && self.dev == dev as usize && self.seen >= stamp
    }
}
